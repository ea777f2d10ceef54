#!/usr/bin/env python3
"""Benchmark (issue 10): grow a colony to large cell counts and record how the cost of a step scales with N.

Runs a colony deck (default input_decks/bacterial_colony.yaml; also input_decks/colony_realistic.yaml) under MPI
until the colony holds ``--target`` cells, WITHOUT dt halving (a failed step ends the run and is reported), and
records per step: cells, wall time, LCP solves (recursion depth + 1), solver iterations, iterations per solve,
constraint rows, active rows, depth, trial rotation, max overlap and the resident memory of every rank.  Rank 0
writes

* ``<out>/bench_colony_<deck>.csv``          one row per step;
* ``<out>/bench_colony_<deck>_sizes.csv``    per size class N = 2^k (steps with N <= cells < 2N): steps, mean wall
                                             per step, wall per cell-step, mean iterations per solve, mean/max rows,
                                             max depth, failed/halved steps, max overlap, peak RSS per rank;
* ``<out>/bench_colony_<deck>.png``          log-log cost per cell-step and iterations per solve against N.

Long runs can be continued: ``--checkpoint-every S`` writes a checkpoint of the run (in ``--ckpt-dir``) every S
steps and ``--restart PATH|latest`` continues from one (the CSV is appended to).

    source tools/env.sh
    mpirun -n 2 .venv/bin/python tools/bench_colony.py --target 16384 [--deck input_decks/colony_realistic.yaml]

This is a benchmark, not a test: the figures depend on the machine and its load (docs/BENCHMARKS.md).
"""
import argparse
import csv
import math
import os
import sys
import time

import numpy as np
import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from study_common import machine, parse_settings, plt  # noqa: E402


def rss_mib():
    """Current resident set size of this process [MiB] (Linux /proc)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def size_class(n):
    return 2 ** int(math.floor(math.log2(max(n, 1))))


def summarize(rows):
    """Per size class N = 2^k: aggregate the step rows (see module docstring)."""
    out = []
    for N in sorted({int(r["size_class"]) for r in rows}):
        rr = [r for r in rows if r["size_class"] == N]
        wall = np.array([r["wall_s"] for r in rr])
        cells = np.array([r["cells"] for r in rr])
        ips = np.array([r["iters_per_solve"] for r in rr])
        out.append(dict(N=N, steps=len(rr), mean_cells=float(cells.mean()), wall_per_step_s=float(wall.mean()),
                        wall_per_cell_step_us=float(1e6 * (wall / cells).mean()),
                        iters_per_solve=float(ips.mean()), max_iters_per_solve=float(ips.max()),
                        mean_rows=float(np.mean([r["constraints"] for r in rr])),
                        max_rows=int(max(r["constraints"] for r in rr)),
                        mean_depth=float(np.mean([r["depth"] for r in rr])),
                        max_depth=int(max(r["depth"] for r in rr)),
                        halved_steps=int(sum(r["substeps"] > 1 for r in rr)),
                        retried_steps=int(sum(int(r.get("strict_retries", 0)) > 0 for r in rr)),
                        max_overlap=float(max(r["max_overlap"] for r in rr)),
                        max_trial_rotation_deg=float(max(r["trial_rotation"] for r in rr)),
                        peak_rss_mib_max_rank=float(max(r["rss_max_mib"] for r in rr)),
                        peak_rss_mib_min_rank=float(max(r["rss_min_mib"] for r in rr))))
    return out


def write_csv(path, rows, append=False):
    """Write (or append) rows; appending to a CSV of an older version of this tool whose header lacks some of the
    rows' columns rewrites it with the union of the columns (0 where a column was not recorded)."""
    if not rows:
        return
    exists = append and os.path.exists(path)
    fields = list(rows[0])
    if exists:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            header = list(reader.fieldnames or [])
            missing = [k for k in fields if k not in header]
            if missing:
                rows, exists = list(reader) + list(rows), False
        fields = header + missing
    with open(path, "a" if exists else "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, restval=0)
        if not exists:
            w.writeheader()
        w.writerows(rows)


def read_csv(path):
    with open(path) as fh:
        return [{k: (float(v) if k not in ("deck",) else v) for k, v in r.items()} for r in csv.DictReader(fh)]


def plot(summary, path, title, min_steps=10):
    """Cost per cell-step and iterations per solve against N; size classes with fewer than ``min_steps`` steps
    (the class the run stopped in, just after the division) are left out: one step is not a generation."""
    p = plt()
    summary = [s for s in summary if s["steps"] >= min_steps]
    N = [s["N"] for s in summary]
    fig, ax = p.subplots(1, 2, figsize=(10, 4))
    ax[0].loglog(N, [s["wall_per_cell_step_us"] for s in summary], "o-")
    ax[0].set_xlabel("cells N (size class)")
    ax[0].set_ylabel("wall per cell-step [us]")
    ax[1].semilogx(N, [s["iters_per_solve"] for s in summary], "o-", label="mean")
    ax[1].semilogx(N, [s["max_iters_per_solve"] for s in summary], "s--", label="max")
    ax[1].set_xlabel("cells N (size class)")
    ax[1].set_ylabel("solver iterations per LCP solve")
    ax[1].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deck", default="input_decks/bacterial_colony.yaml")
    ap.add_argument("--target", type=int, default=4096, help="stop when the colony holds this many cells")
    ap.add_argument("--out", default="results")
    ap.add_argument("--checkpoint-every", type=int, default=0)
    ap.add_argument("--ckpt-dir", default="out/bench_colony")
    ap.add_argument("--restart", default=None, help="checkpoint path or 'latest' (in --ckpt-dir)")
    ap.add_argument("--progress-every", type=int, default=20)
    ap.add_argument("--solver", default=None, help="override solver.method (e.g. to compare solvers)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a deck setting (repeatable), e.g. debug.dump_lcp=DIR to dump a failing LCP")
    args = ap.parse_args()

    from mpi4py import MPI

    from relcp_mpi import Simulation
    from relcp_mpi.config.sections import load_typed, override
    from relcp_mpi.driver.actions import Checkpoint
    comm = MPI.COMM_WORLD
    deck, _ = load_typed(args.deck)
    deck = override(deck, {
        "time.max_halvings": 0,                        # the benchmark measures the formulation as is: no halving
        "time.t_end": 1e6 * deck.time.dt, "time.steps": None,  # effectively unbounded: the target size ends it
        "output.trajectory_every": 0, "output.progress_every": 0, "output.directory": args.ckpt_dir,
        "output.checkpoint_every": 0, **({"solver.method": args.solver} if args.solver else {}),
        **parse_settings(args.set)}, source=args.deck)
    name = os.path.splitext(os.path.basename(args.deck))[0]
    csv_path = os.path.join(args.out, f"bench_colony_{name}.csv")
    if args.restart:
        sim = Simulation.from_checkpoint(args.restart, deck, yaml.safe_dump(deck.raw), comm)
    else:
        sim = Simulation.from_deck(deck, comm)
    if comm.rank == 0:
        os.makedirs(args.out, exist_ok=True)
        if args.restart and os.path.exists(csv_path):
            # the steps after the checkpoint are run again: drop the rows an earlier run wrote for them
            keep = [r for r in read_csv(csv_path) if r["step"] <= sim.step]
            os.remove(csv_path)
            write_csv(csv_path, keep)
        elif os.path.exists(csv_path):
            os.remove(csv_path)
        print(f"bench_colony: {name} from step {sim.step} ({sim.n_global} cells) to {args.target} cells on "
              f"{comm.size} rank(s); {machine()}", flush=True)
    rows, failed = [], None
    t_run = time.perf_counter()

    def record(s):
        """After every step (collective): one CSV row; the rows so far go to the CSV at each checkpoint."""
        nonlocal rows
        wall = comm.allreduce(s.step_wall, op=MPI.MAX)      # the step's wall time on the slowest rank
        d = s.diag
        rss = comm.allgather(rss_mib())
        solves = d["depth"] + 1
        row = dict(deck=name, step=s.step, time=s.time, cells=s.n_global,
                   size_class=size_class(s.n_global), wall_s=wall, solves=solves,
                   iterations=d["iterations"], iters_per_solve=d["iterations"] / solves,
                   constraints=d["constraints"], active=d["active"], depth=d["depth"],
                   substeps=d.get("substeps", 1), strict_retries=d.get("strict_retries", 0),
                   trial_rotation=d.get("trial_rotation", 0.0),
                   max_overlap=d["max_overlap"], rss_max_mib=max(rss), rss_min_mib=min(rss))
        rows.append(row)
        if comm.rank == 0 and args.progress_every and s.step % args.progress_every == 0:
            print(f"  step {s.step}: {s.n_global} cells, {row['constraints']} rows, depth {row['depth']}, "
                  f"{row['iters_per_solve']:.0f} it/solve, {wall:.2f} s, overlap {row['max_overlap']:.2e}, "
                  f"rss {max(rss):.0f} MiB, elapsed {time.perf_counter() - t_run:.0f} s", flush=True)
        if args.checkpoint_every and s.step % args.checkpoint_every == 0:   # written by the Checkpoint action
            if comm.rank == 0:
                write_csv(csv_path, rows, append=True)
            rows = []

    writers = [Checkpoint(args.checkpoint_every)] if args.checkpoint_every else []
    try:
        if sim.n_global < args.target:
            sim.run(writers=writers, on_step=record, until=lambda s: s.n_global >= args.target)
    except Exception as exc:  # noqa: BLE001 -- a failed step is a result of the benchmark (raised on every rank)
        failed = f"step {sim.step + 1}: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    if comm.rank == 0:
        write_csv(csv_path, rows, append=True)
        # no CSV: the run failed at its first step (a restart replaying a failing step): only that is reported
        allrows = read_csv(csv_path) if os.path.exists(csv_path) else []
        if allrows:
            summary = summarize(allrows)
            write_csv(os.path.join(args.out, f"bench_colony_{name}_sizes.csv"), summary)
            plot(summary, os.path.join(args.out, f"bench_colony_{name}.png"),
                 f"{name}: {comm.size} rank(s), up to {int(max(r['cells'] for r in allrows))} cells")
            for s in summary:
                print(f"N={s['N']:6d}: {s['steps']:4d} steps, {s['wall_per_step_s']:.3f} s/step, "
                      f"{s['wall_per_cell_step_us']:.1f} us/cell-step, {s['iters_per_solve']:.0f} it/solve, "
                      f"rows {s['mean_rows']:.0f}, depth <= {s['max_depth']}, halved {s['halved_steps']}, "
                      f"retried {s['retried_steps']}, "
                      f"overlap {s['max_overlap']:.2e}, rss {s['peak_rss_mib_max_rank']:.0f} MiB", flush=True)
        print("completed" if failed is None else f"FAILED at {failed}", flush=True)
    return 0 if failed is None else 1


if __name__ == "__main__":
    sys.exit(main())
