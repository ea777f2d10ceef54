#!/usr/bin/env python3
"""Study 3 (issue 6): a growing bacterial colony of spherocylinders, run until it holds a target cell count.

Runs the colony deck (default input_decks/bacterial_colony.yaml: one cell that grows its axis at a set rate and
divides into two daughters at a critical length, monolayer between two walls, RCB decomposition that rebalances
as the colony spreads) under MPI until the global cell count reaches ``--target-cells`` (default 10,000) or
``--max-steps`` steps have run.  Rank 0 writes

* results/colony.csv          per step: step, time, cells, constraints, active, depth, iterations, max_overlap,
                              wall_s, imbalance (max/mean over ranks of the rebalancing work = bodies + rows),
                              n_rebalances, bodies per rank min/max, divided (cells that divided this step),
                              and rank 0's wall time per stage of the step (t_<stage>);
* results/colony_summary.csv  final cell count, steps, simulated time, total wall time, mean/max wall per step,
                              max overlap over the run (and overlap_tol), max depth, number of rebalances,
                              final max/mean bodies per rank, ...;
A step whose LCP solve fails (SolverError, e.g. an infeasible grown LCP) or that hits the ReLCP recursion limit
is redone by the deck's own policy (``contact.strict_retries``: the same dt with stricter rows); by default
nothing else (``--max-halvings 0``: the colony decks run without dt halving, issue 10).  With ``--max-halvings
N`` such a step is also undone and redone as two steps of dt/2 (up to N times; the following steps keep the
finer sub-steps until ``--keep-halved`` steps in a row succeed; column ``substeps``): the driver's step policy
(deck keys ``time.max_halvings`` and ``time.keep_halved_steps``, set from these options).

* results/colony.png          cell count vs time (log axis), max overlap vs step with the overlap_tol line,
                              wall time per step vs cell count.

Rank 0 prints a progress line every ``--progress-every`` steps (default 20) with a projected finish time, and
the -log_view-style stage table at the end.  Global ids are checked after every step in which cells divided
(global count == the simulation's count == next gid, no duplicate ids on any rank, gid range and sums of the
ids and their squares equal to those of 0..N-1: a few allreduces) and, every ``--gid-check-every`` steps
(default 100) and at the end, exactly (all gids gathered on rank 0: they must be 0..N-1, each once).
The CSVs are also rewritten every ``--save-every`` steps (default 100) and, if the run fails, with the steps
done so far (the summary then says completed=False and names the error), so a long run can be inspected
while it runs.

    mpirun -n 2 .venv/bin/python tools/study_colony.py [--target-cells 10000] [--deck input_decks/bacterial_colony.yaml]
                                                       [--max-steps N] [--out results]

(``source tools/env.sh`` first.)  For a long run in the background:

    nohup mpirun -n 2 .venv/bin/python tools/study_colony.py > /tmp/colony_study.log 2>&1 &
"""
import argparse
import math
import os
import time
import traceback

import numpy as np

from study_common import machine, plt, run_rows
from study_common import write_csv as _write_csv


def write_csv(path, rows):
    """Write atomically (temporary file + rename): a run killed while writing leaves the previous file."""
    _write_csv(path + ".tmp", rows)
    os.replace(path + ".tmp", path)

STAGES = ("rebalance", "growth", "migrate", "ghosts", "mobility", "neighbors", "geometry", "assembly", "solve",
          "recursion")


def gid_check(sim, exact):
    """Collective: raise (on every rank) if the global ids are not exactly 0..N-1 with N = sim.n_global."""
    from mpi4py import MPI
    comm = sim.comm
    g = np.asarray(sim.bodies.gid, dtype=np.int64)
    n_true = comm.allreduce(len(g))
    local_dup = int(len(np.unique(g)) != len(g))
    problems = []
    if n_true != sim.n_global:
        problems.append(f"global body count {n_true} != sim.n_global {sim.n_global}")
    if sim.n_global != sim.next_gid:
        problems.append(f"n_global {sim.n_global} != next_gid {sim.next_gid} (no cells are removed)")
    if comm.allreduce(local_dup, op=MPI.MAX):
        problems.append("duplicate gid on one rank")
    lo = comm.allreduce(int(g.min()) if len(g) else 0, op=MPI.MIN)
    hi = comm.allreduce(int(g.max()) if len(g) else -1, op=MPI.MAX)
    N = n_true
    if lo != 0 or hi != N - 1:
        problems.append(f"gid range [{lo}, {hi}] != [0, {N - 1}]")
    s1 = comm.allreduce(int(g.sum()))
    s2 = comm.allreduce(int((g * g).sum()))           # exact in Python ints (N < 3e6)
    if s1 != N * (N - 1) // 2 or s2 != (N - 1) * N * (2 * N - 1) // 6:
        problems.append("gid sums differ from those of 0..N-1 (duplicates across ranks)")
    if exact:
        allg = comm.gather(g, root=0)
        msg = None
        if comm.rank == 0:
            allg = np.sort(np.concatenate(allg))
            if not np.array_equal(allg, np.arange(len(allg))):
                dup = np.unique(allg[1:][allg[1:] == allg[:-1]])
                msg = f"gathered gids are not 0..{len(allg) - 1} once each (duplicates: {dup[:10].tolist()})"
        msg = comm.bcast(msg, root=0)
        if msg:
            problems.append(msg)
    if problems:
        raise RuntimeError(f"gid check failed after step {sim.step}: " + "; ".join(problems))


def project_finish(rows, target, t_now, wall_so_far):
    """Rough projection of the remaining wall time: cell count N(t) extrapolated exponentially with the
    run's mean doubling time; wall per step modelled as c N^p, p fitted to the mean wall per step of the last
    three cell counts held for >= 5 steps (the LCP gets harder as the colony grows, so p > 1), c from the
    recent steps."""
    if len(rows) < 5 or rows[-1]["cells"] >= target:
        return float("nan"), float("nan")
    n_now = rows[-1]["cells"]
    first = next((r for r in rows if r["cells"] > rows[0]["cells"]), None)
    if first is None or n_now <= first["cells"] or t_now <= first["time"]:
        return float("nan"), float("nan")
    td = (t_now - first["time"]) / math.log2(n_now / first["cells"])
    t_target = t_now + td * math.log2(target / n_now)
    groups = {}
    for r in rows:
        groups.setdefault(r["cells"], []).append(r["wall_s"])
    pts = [(n, float(np.mean(w[1:]))) for n, w in sorted(groups.items()) if len(w) >= 5 and n >= 16][-3:]
    p = 1.0
    if len(pts) >= 2:
        ln, lw = np.log([x[0] for x in pts]), np.log([max(x[1], 1e-6) for x in pts])
        p = float(np.clip(np.polyfit(ln, lw, 1)[0], 1.0, 4.0))
    recent = rows[-10:]
    c = float(np.mean([r["wall_s"] / r["cells"] ** p for r in recent]))
    dt = rows[-1]["time"] - rows[-2]["time"]
    k = max(int(math.ceil((t_target - t_now) / dt)), 0)
    ts = t_now + dt * np.arange(1, k + 1)
    n_future = np.minimum(n_now * 2.0 ** np.floor((ts - t_now) / td + 1e-9), max(target, n_now))
    rem = float(c * np.sum(n_future ** p))
    return rem, t_target


def summarize(rows, sim, deck, comm_size, wall_total, completed, error=None, bodies_rank=None):
    last = rows[-1] if rows else {}
    walls = [r["wall_s"] for r in rows] or [0.0]
    return {
        "completed": completed, "error": error or "", "ranks": comm_size, "deck": deck.name,
        "final_cells": last.get("cells", 0), "steps": len(rows), "simulated_time": last.get("time", 0.0),
        "dt": deck.time.dt, "total_wall_s": wall_total, "step_wall_s": sum(walls),
        "mean_wall_per_step_s": sum(walls) / max(len(rows), 1), "max_wall_per_step_s": max(walls),
        "max_overlap": max((r["max_overlap"] for r in rows), default=0.0),
        "overlap_tol": deck.contact.overlap_tol,
        "steps_over_tol": sum(r["max_overlap"] > deck.contact.overlap_tol for r in rows),
        "steps_subdivided": sum(r.get("substeps", 1) > 1 for r in rows),
        "max_substeps": max((r.get("substeps", 1) for r in rows), default=1),
        "max_depth": max((r["depth"] for r in rows), default=0),
        "max_iterations": max((r["iterations"] for r in rows), default=0),
        "total_iterations": sum(r["iterations"] for r in rows),
        "max_constraints": max((r["constraints"] for r in rows), default=0),
        "n_rebalances": last.get("n_rebalances", 0),
        "final_max_bodies_per_rank": last.get("bodies_rank_max", 0),
        "final_mean_bodies_per_rank": last.get("cells", 0) / comm_size,
        "final_imbalance_bodies": last.get("bodies_rank_max", 0) / max(last.get("cells", 0) / comm_size, 1e-300),
        "final_imbalance_work": last.get("imbalance", 1.0),
        "machine": machine(),
    }


def plot(rows, deck, out, comm_size):
    p = plt()
    fig, axes = p.subplots(1, 3, figsize=(14, 3.8))
    t = [r["time"] for r in rows]
    axes[0].semilogy(t, [r["cells"] for r in rows])
    axes[0].set_xlabel("time")
    axes[0].set_title("cell count", fontsize=9)
    axes[1].semilogy([r["step"] for r in rows], [max(r["max_overlap"], 1e-9) for r in rows], lw=0.8,
                     label="max overlap")
    axes[1].axhline(deck.contact.overlap_tol, color="k", ls="--", lw=0.8, label="overlap_tol")
    axes[1].set_xlabel("step")
    axes[1].set_title("max smooth-surface overlap (ReLCP)", fontsize=9)
    axes[1].legend(fontsize=7)
    axes[2].loglog([r["cells"] for r in rows], [r["wall_s"] for r in rows], ".", ms=2)
    axes[2].set_xlabel("cells")
    axes[2].set_title(f"wall time per step [s] ({comm_size} ranks)", fontsize=9)
    fig.suptitle(f"Growing colony ({deck.name}, dt={deck.time.dt}), {comm_size} rank(s), {machine()}",
                 fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{out}/colony.png", dpi=110)
    p.close(fig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deck", default="input_decks/bacterial_colony.yaml")
    ap.add_argument("--target-cells", type=int, default=10000)
    ap.add_argument("--max-steps", type=int, default=None,
                    help="stop after this many steps (default: the deck's steps / t_end)")
    ap.add_argument("--out", default="results")
    ap.add_argument("--progress-every", type=int, default=20)
    ap.add_argument("--gid-check-every", type=int, default=100, help="exact (gathered) gid check interval")
    ap.add_argument("--save-every", type=int, default=100, help="rewrite the CSVs every N steps")
    ap.add_argument("--max-halvings", type=int, default=0,
                    help="a step whose LCP solve or recursion fails is redone as 2 steps of dt/2, up to N times "
                         "(default 0: the colony decks run without halving, issue 10; a failed step then ends the "
                         "study, after the deck's contact.strict_retries)")
    ap.add_argument("--keep-halved", type=int, default=10,
                    help="after a halved step keep the finer dt until N steps in a row succeed")
    a = ap.parse_args()
    from mpi4py import MPI
    from relcp_mpi.config.sections import load_typed, override
    from relcp_mpi.parallel import decomposition as pdecomp
    from relcp_mpi.parallel.errors import install_excepthook
    comm = MPI.COMM_WORLD
    install_excepthook(comm)                 # an exception on one rank aborts the job (no hang)
    deck, _ = load_typed(a.deck)
    deck = override(deck, {"output.progress_every": 0, "time.max_halvings": a.max_halvings,
                           "time.keep_halved_steps": a.keep_halved,
                           **({"time.steps": a.max_steps, "time.t_end": None} if a.max_steps is not None else {})},
                    source=a.deck)
    rows = []
    state = {"t0": time.perf_counter(), "n_prev": None, "stage_prev": {}, "sim": None}

    def on_step(sim, row):
        state["sim"] = sim
        counts = np.array(comm.allgather(len(sim.bodies)))
        imb = pdecomp.imbalance(float(np.sum(sim.state.work)), comm)
        first = state["n_prev"] is None
        divided = 0 if first else sim.n_global - state["n_prev"]
        state["n_prev"] = sim.n_global
        exact = (a.gid_check_every and sim.step % a.gid_check_every == 0)
        if divided or exact or first:
            gid_check(sim, exact=bool(exact))
        stage = {k: sim.timer.total.get(k, 0.0) - state["stage_prev"].get(k, 0.0) for k in STAGES}
        state["stage_prev"] = dict(sim.timer.total)
        r = {"step": sim.step, "time": round(sim.time, 12), "cells": sim.n_global,
             "constraints": row["constraints"], "active": row["active"], "depth": row["depth"],
             "iterations": row["iterations"], "max_overlap": row["max_overlap"], "residual": row.get("residual"),
             "wall_s": row["wall_s"], "substeps": row.get("substeps", 1), "imbalance": imb, "n_rebalances": sim.n_rebalances,
             "bodies_rank_min": int(counts.min()), "bodies_rank_max": int(counts.max()), "divided": divided}
        r.update({f"t_{k}": v for k, v in stage.items()})
        rows.append(r)
        if comm.rank == 0:
            if a.progress_every and (sim.step % a.progress_every == 0 or sim.step == 1):
                el = time.perf_counter() - state["t0"]
                rec = rows[-a.progress_every:]
                rem, t_tgt = project_finish(rows, a.target_cells, sim.time, el)
                print(f"step {sim.step:5d} t={sim.time:7.3f} cells={sim.n_global:6d} rows={r['constraints']:6d} "
                      f"active={r['active']:6d} depth={r['depth']} iters={r['iterations']:5d} "
                      f"overlap={r['max_overlap']:.2e} wall/step={sum(x['wall_s'] for x in rec) / len(rec):.3f}s "
                      f"elapsed={el / 60:.1f}min ranks[{r['bodies_rank_min']},{r['bodies_rank_max']}] "
                      f"imb={imb:.3f} rebal={sim.n_rebalances} "
                      f"eta~{rem / 60:.0f}min (target at t~{t_tgt:.1f})", flush=True)
            if a.save_every and sim.step % a.save_every == 0:
                write_csv(f"{a.out}/colony.csv", rows)

    def stop(sim, row):
        return sim.n_global >= a.target_cells

    if comm.rank == 0:
        print(f"colony study: deck {a.deck}, target {a.target_cells} cells, {comm.size} rank(s), {machine()}",
              flush=True)
    error = None
    try:
        sim, _ = run_rows(deck, comm=comm, on_step=on_step, stop=stop)
    except Exception as exc:                  # write what we have, then fail
        error = f"{type(exc).__name__}: {exc}"
        sim = state["sim"]
        if comm.rank == 0:
            traceback.print_exc()
            if rows:
                write_csv(f"{a.out}/colony.csv", rows)
                write_csv(f"{a.out}/colony_summary.csv",
                          [summarize(rows, sim, deck, comm.size, time.perf_counter() - state["t0"], False, error)])
                print(f"partial results ({len(rows)} steps) written to {a.out}/colony*.csv", flush=True)
        if comm.rank != 0:
            time.sleep(20)                    # let rank 0 write the partial results before this rank aborts
        raise
    wall_total = time.perf_counter() - state["t0"]
    gid_check(sim, exact=True)
    stages = sim.timer.report(comm, wall=wall_total)
    if comm.rank != 0:
        return
    completed = sim.n_global >= a.target_cells
    summary = summarize(rows, sim, deck, comm.size, wall_total, completed,
                        None if completed else f"stopped at max steps {sim.n_steps} before the target")
    write_csv(f"{a.out}/colony.csv", rows)
    write_csv(f"{a.out}/colony_summary.csv", [summary])
    plot(rows, deck, a.out, comm.size)
    print(stages)
    print(summary, flush=True)
    print(f"wrote {a.out}/colony.csv, {a.out}/colony_summary.csv, {a.out}/colony.png", flush=True)


if __name__ == "__main__":
    main()
