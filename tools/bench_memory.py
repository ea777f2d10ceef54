#!/usr/bin/env python3
"""Long-run memory benchmark (issue 12 item 8): resident memory per rank at constant work, output on vs off.

A bed of 2,000 spheres (``--bodies``) settled on a floor (constant work per step once settled) runs ``--steps``
steps twice, each in its own MPI job of ``--np`` ranks: once with output (trajectory frames every
``--trajectory-every`` steps and checkpoints every ``--checkpoint-every`` steps, the deck's output section as in
a production run, into a temporary directory) and once without (``writers=[]``).  Every ``--every`` steps each
rank samples its resident set size (/proc/self/statm); the growth rate per rank is the least-squares slope over
the second half of the run [MiB per 1,000 steps] (the first half includes the settling and the warm-up of the
allocator and of HDF5).

    source tools/env.sh
    .venv/bin/python tools/bench_memory.py [--steps 1000] [--every 20] [--np 2] [--modes on,off]

Rank 0 prints the samples and the slopes, writes ``--csv`` (one row per sample: mode, step, rank, rss_mib) and
appends one JSON line per mode to ``--json`` (default tools/bench_results.jsonl, ``"bench": "memory"``).  This
is a benchmark, not a test (docs/BENCHMARKS.md, "Memory").
"""
import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_mib():
    """Current resident set size of this process [MiB] (Linux /proc)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def make_deck(bodies, steps, out_dir, trajectory_every, checkpoint_every):
    """A settled-bed deck: ``bodies`` spheres of radius 0.4 in a laterally periodic box, random placement in
    the lowest layers, a floor wall, gravity."""
    side = 16.0 * (bodies / 2000.0) ** 0.5
    return {"name": "bench_memory", "seed": 5, "time": {"dt": 0.02, "steps": steps},
            "box": {"lo": [0, 0, 0], "hi": [side, side, 12.0], "periodic": [True, True, False]},
            "walls": [{"point": [0, 0, 0], "normal": [0, 0, 1]}], "fluid": {"viscosity": 1.0},
            "forces": {"body_force": [0.0, 0.0, -5.0]},
            "generate": [{"shape": "sphere", "radius": 0.4, "count": bodies, "method": "lattice",
                          "region": {"lo": [0, 0, 0.05], "hi": [side, side, 7.0]}}],
            "contact": {"overlap_tol": 1e-3, "skin": 0.2}, "solver": {"method": "bbpgd", "tol": 1e-4},
            "output": {"directory": out_dir, "trajectory_every": trajectory_every,
                       "checkpoint_every": checkpoint_every, "keep_checkpoints": 2, "progress_every": 0}}


def slope(steps, values):
    """Least-squares slope of values against steps over the second half of the samples [per 1,000 steps]."""
    steps, values = np.asarray(steps, float), np.asarray(values, float)
    half = steps >= steps[0] + (steps[-1] - steps[0]) / 2
    if half.sum() < 2:
        return float("nan")
    return float(np.polyfit(steps[half], values[half], 1)[0] * 1000.0)


def read_samples(path):
    """{(mode, rank): ([steps], [rss_mib])} from a CSV written by this script."""
    out = {}
    with open(path) as fh:
        for r in csv.DictReader(fh):
            st, rss = out.setdefault((r["mode"], int(r["rank"])), ([], []))
            st.append(int(r["step"]))
            rss.append(float(r["rss_mib"]))
    return out


def plot(path_png, csv_path, baseline=None, labels=("this run", "baseline")):
    """RSS per rank against step, output on / off; ``baseline`` (a CSV of an earlier run) dashed."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from study_common import plt
    p = plt()
    fig, ax = p.subplots(figsize=(7, 4))
    for label, path, style in ((labels[0], csv_path, "-"), (labels[1], baseline, "--")):
        if not path:
            continue
        for (mode, rank), (st, rss) in sorted(read_samples(path).items()):
            ax.plot(st, rss, style, label=f"{label}: output {mode}, rank {rank}")
    ax.set_xlabel("step")
    ax.set_ylabel("resident memory per rank [MiB]")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path_png, dpi=110)


def child(a):
    """One mode in this MPI job: run and sample; rank 0 writes the samples (JSON) to ``a.record``."""
    from mpi4py import MPI

    from relcp_mpi import Simulation
    comm = MPI.COMM_WORLD
    out_dir = comm.bcast(tempfile.mkdtemp(prefix="bench_memory_") if comm.rank == 0 else None, root=0)
    on = a.child == "on"
    deck = make_deck(a.bodies, a.steps, out_dir, a.trajectory_every if on else 0, a.checkpoint_every if on else 0)
    sim = Simulation.from_deck(deck, comm=comm)
    if a.history is not None:
        sim.history.maxlen = a.history or None
    samples = []

    def sample(s):
        if s.step % a.every == 0 or s.step == 1:
            samples.append((s.step, comm.allgather(rss_mib()), s.diag["constraints"]))
    t0 = time.perf_counter()
    # on: the deck's own output section (trajectory + checkpoints + progress + signal check); off: no writers
    sim.run(writers=None if on else [], on_step=sample)
    wall = time.perf_counter() - t0
    if comm.rank == 0:
        with open(a.record, "w") as fh:
            json.dump({"mode": a.child, "samples": samples, "wall_s": wall, "bodies": sim.n_global,
                       "history_len": len(sim.history)}, fh)
        import shutil
        shutil.rmtree(out_dir, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--every", type=int, default=20, help="sample RSS every N steps")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--bodies", type=int, default=2000)
    ap.add_argument("--trajectory-every", type=int, default=5)
    ap.add_argument("--checkpoint-every", type=int, default=20)
    ap.add_argument("--modes", default="on,off")
    ap.add_argument("--history", type=int, default=None,
                    help="entries Simulation.history keeps (default: the API's default; 0 = all)")
    ap.add_argument("--csv", default=os.path.join(ROOT, "results", "bench_memory.csv"))
    ap.add_argument("--json", default=os.path.join(ROOT, "tools", "bench_results.jsonl"))
    ap.add_argument("--plot", help="write a PNG of the samples (with --baseline CSV dashed)")
    ap.add_argument("--baseline", help="CSV of an earlier run to draw next to this one")
    ap.add_argument("--child", choices=["on", "off"], help=argparse.SUPPRESS)
    ap.add_argument("--record", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a)
        return 0
    print(f"bench_memory: {a.bodies} spheres, {a.steps} steps, {a.np} rank(s), trajectory every "
          f"{a.trajectory_every}, checkpoint every {a.checkpoint_every}; load average {os.getloadavg()[0]:.2f}",
          flush=True)
    rows, ok = [], True
    for mode in a.modes.split(","):
        rec_path = os.path.join(tempfile.gettempdir(), f"bench_memory_{os.getpid()}_{mode}.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, "--record", rec_path]
        cmd += [f"--{k}={v}" for k, v in (("steps", a.steps), ("every", a.every), ("bodies", a.bodies),
                                           ("trajectory-every", a.trajectory_every),
                                           ("checkpoint-every", a.checkpoint_every))]
        cmd += [] if a.history is None else [f"--history={a.history}"]
        if a.np > 1:
            cmd = ["mpirun", "-n", str(a.np)] + cmd
        proc = subprocess.run(cmd, cwd=ROOT)
        if proc.returncode or not os.path.exists(rec_path):
            print(f"mode {mode}: FAILED (exit {proc.returncode})", flush=True)
            ok = False
            continue
        with open(rec_path) as fh:
            rec = json.load(fh)
        os.remove(rec_path)
        steps = [s[0] for s in rec["samples"]]
        per_rank = np.array([s[1] for s in rec["samples"]])          # (samples, ranks)
        slopes = [slope(steps, per_rank[:, r]) for r in range(per_rank.shape[1])]
        print(f"output {mode}: {rec['wall_s']:.0f} s; RSS per rank [MiB] at steps " +
              ", ".join(f"{st}: " + "/".join(f"{v:.1f}" for v in per_rank[k])
                        for k, st in enumerate(steps) if k % max(1, len(steps) // 10) == 0 or k == len(steps) - 1),
              flush=True)
        print(f"output {mode}: growth over the second half " +
              ", ".join(f"rank {r}: {s:+.2f} MiB per 1,000 steps" for r, s in enumerate(slopes)) +
              f"; constraints {rec['samples'][-1][2]}; history entries kept {rec['history_len']}", flush=True)
        rows += [dict(mode=mode, step=st, rank=r, rss_mib=float(per_rank[k, r]))
                 for k, st in enumerate(steps) for r in range(per_rank.shape[1])]
        with open(a.json, "a") as fh:
            fh.write(json.dumps(dict(
                bench="memory", mode=mode, ranks=a.np, bodies=rec["bodies"], steps=a.steps, every=a.every,
                trajectory_every=a.trajectory_every if mode == "on" else 0,
                checkpoint_every=a.checkpoint_every if mode == "on" else 0, wall_s=rec["wall_s"],
                rss_first_mib=per_rank[0].tolist(), rss_last_mib=per_rank[-1].tolist(),
                growth_mib_per_1000_steps=slopes, history_len=rec["history_len"], history_maxlen=a.history,
                machine=f"{platform.node()} {os.cpu_count()} cores", load_avg=os.getloadavg(),
                date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))) + "\n")
    if rows:
        os.makedirs(os.path.dirname(os.path.abspath(a.csv)), exist_ok=True)
        with open(a.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        if a.plot:
            plot(a.plot, a.csv, a.baseline)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
