#!/usr/bin/env python3
"""Benchmark (issue 14): the spherocylinder cases shared with the C++ peer (SimToolbox) and the 10k-ellipsoid
compaction, a fixed number of steps each, through the public API (:class:`relcp_mpi.Simulation`).

    source tools/env.sh
    .venv/bin/python tools/bench_peer_cases.py [--cases n2000,n10000,n2000c,n8000c,ellipsoids] \\
        [--steps 10] [--warm 2] [--np 1]

Every case runs in its own process (``mpirun -n NP`` when ``--np`` > 1), so the peak resident memory of each
case is its own: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` at the end of the case (import, deck, set-up,
initial-overlap check and all steps included), reduced over the ranks (max and min).  Per case it reports

* wall time per timed step (after ``--warm`` untimed steps) and steps/s; CPU time per timed step (max over the
  ranks; the figure to compare on a shared machine); the compiled-kernel backend (``aot``, ``jit`` or ``numpy``:
  ``RELCP_NUMBA`` / ``RELCP_AOT``, geometry/numba_switch.py) and whether numba was imported;
* the stage breakdown of the timed steps (the engine's stage timer: migrate, ghosts, mobility, neighbors,
  geometry, assembly, solve, recursion; max over ranks, seconds per step and percent of the step);
* LCP solves per step (recursion depth + 1), solver iterations per step and per solve, constraint rows,
  max overlap over the timed steps (smooth surfaces) and overlap_tol;
* resident memory per rank [MiB]: after the imports, after the deck and the bodies are built, at the end, and
  the peak.

One JSON line per case is appended to ``--json`` (default ``tools/bench_results.jsonl``, ``"bench":
"peer_cases"``) and rank 0 prints a table.  The decks are ``input_decks/peer/*.yaml`` (copies of the decks the
peer comparison used: same initial states) and ``input_decks/ellipsoid_suspension.yaml``.  This is a benchmark,
not a test: the figures depend on the machine and its load (docs/BENCHMARKS.md).
"""
import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))     # the tools' shared helpers
from study_common import parse_settings  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = {
    "n2000": "input_decks/peer/n2000.yaml",          # loose sedimentation, 2,000 rods
    "n10000": "input_decks/peer/n10000.yaml",        # loose sedimentation, 10,000 rods
    "n2000c": "input_decks/peer/n2000c.yaml",        # dense bed, 2,000 rods
    "n8000c": "input_decks/peer/n8000c.yaml",        # dense bed, 8,000 rods
    "ellipsoids": "input_decks/ellipsoid_suspension.yaml",   # 10,000 ellipsoids compacting
}
# stages of the engine's timer shown in the table (the rest are in the JSON record)
STAGES = ("migrate", "ghosts", "mobility", "neighbors", "geometry", "assembly", "solve", "recursion")
# fields every JSON record carries (tests/test_bench_peer_cases.py checks them)
RECORD_FIELDS = ("bench", "case", "deck", "ranks", "bodies", "timed_steps", "warm_steps", "wall_s", "s_per_step",
                 "steps_per_s", "cpu_s_per_step", "kernels", "numba_imported", "stages", "stage_s_per_step",
                 "solves_per_step", "iterations_per_step", "iterations_per_solve", "mean_constraints", "max_depth",
                 "max_overlap", "overlap_tol", "rss_mib", "peak_rss_mib_max", "peak_rss_mib_min", "machine", "load_avg",
                 "date")


def rss_mib():
    """Current resident set size of this process [MiB] (Linux /proc)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def peak_rss_mib():
    """Peak resident set size of this process so far [MiB] (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def machine():
    return (f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{platform.platform()}")


def run_case(case, deck_path, steps, warm, settings=()):
    """One case on the current MPI world (collective); returns the JSON record on rank 0, None elsewhere."""
    mem = {"start": rss_mib()}
    from mpi4py import MPI

    from relcp_mpi import Simulation
    from relcp_mpi.config.deck import load
    from relcp_mpi.config.sections import override
    from relcp_mpi.geometry import numba_switch
    from relcp_mpi.petsc import get_petsc
    get_petsc()
    comm = MPI.COMM_WORLD
    mem["imports"] = rss_mib()
    deck, text = load(deck_path)
    if settings:
        deck = override(deck, parse_settings(settings), source=deck_path)
    sim = Simulation.from_deck(deck, comm=comm)          # builds the bodies, checks initial overlaps
    del deck, text
    mem["setup"] = rss_mib()
    if warm:
        sim.run(warm, writers=[])
    diags = []
    sim.reset_timer()                                    # time only the remaining steps
    comm.Barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    sim.run(steps, writers=[], on_step=lambda s: diags.append(s.diag))
    cpu = comm.allreduce(time.process_time() - c0, op=MPI.MAX)
    comm.Barrier()
    wall = time.perf_counter() - t0
    mem["end"] = rss_mib()
    stages = {k: float(v) for k, v in sim.timer.total.items()}
    names = sorted(set().union(*comm.allgather(sorted(stages))))
    stage_max = {k: comm.allreduce(stages.get(k, 0.0), op=MPI.MAX) for k in names}
    mem_all = comm.gather({**mem, "peak": peak_rss_mib()}, root=0)
    table = sim.timer.report(comm, wall=wall)
    if comm.rank != 0:
        return None
    n = max(len(diags), 1)
    solves = sum(d["depth"] + 1 for d in diags)
    iters = sum(d["iterations"] for d in diags)
    return dict(
        bench="peer_cases", case=case, deck=deck_path, ranks=comm.size, bodies=sim.n_global, timed_steps=steps,
        warm_steps=warm, settings=list(settings), wall_s=wall, s_per_step=wall / steps, steps_per_s=steps / wall,
        cpu_s_per_step=cpu / steps, kernels=numba_switch.backend(), numba_imported="numba" in sys.modules,
        stages=stage_max, stage_s_per_step={k: v / steps for k, v in stage_max.items()},
        solves_per_step=solves / n, iterations_per_step=iters / n, iterations_per_solve=iters / max(solves, 1),
        mean_constraints=sum(d["constraints"] for d in diags) / n, max_depth=max(d["depth"] for d in diags),
        max_overlap=max(d["max_overlap"] for d in diags), overlap_tol=sim.overlap_tol,
        rss_mib={k: [m[k] for m in mem_all] for k in ("imports", "setup", "end")},
        peak_rss_mib_max=max(m["peak"] for m in mem_all), peak_rss_mib_min=min(m["peak"] for m in mem_all),
        machine=machine(), load_avg=os.getloadavg(), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        stage_table=table)


def print_table(recs, out=sys.stdout):
    """The summary table of the records (one line per case) and each case's stage shares."""
    out.write(f"{'case':<11}{'bodies':>7}{'ranks':>6}{'s/step':>9}{'solves':>8}{'it/step':>9}{'it/solve':>9}"
              f"{'rows':>8}{'max overlap':>13}{'peak RSS [MiB]':>16}\n")
    for r in recs:
        out.write(f"{r['case']:<11}{r['bodies']:>7}{r['ranks']:>6}{r['s_per_step']:>9.3f}"
                  f"{r['solves_per_step']:>8.2f}{r['iterations_per_step']:>9.0f}{r['iterations_per_solve']:>9.0f}"
                  f"{r['mean_constraints']:>8.0f}{r['max_overlap']:>13.3e}"
                  f"{r['peak_rss_mib_max']:>9.0f} /{r['peak_rss_mib_min']:>5.0f}\n")
    out.write("stage shares of the step (max over ranks, % of wall):\n")
    out.write(f"{'case':<11}" + "".join(f"{s[:9]:>10}" for s in STAGES) + "\n")
    for r in recs:
        out.write(f"{r['case']:<11}" + "".join(
            f"{100 * r['stages'].get(s, 0.0) / r['wall_s']:>9.1f}%" for s in STAGES) + "\n")
    out.flush()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated names (" + ", ".join(CASES) +
                    ") or deck paths")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per case")
    ap.add_argument("--warm", type=int, default=2, help="untimed steps first")
    ap.add_argument("--np", type=int, default=1, help="MPI ranks per case (mpirun -n NP when > 1)")
    ap.add_argument("--json", default=os.path.join(ROOT, "tools", "bench_results.jsonl"))
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="deck override for every case (repeatable), e.g. --set contact.gap_margin=5e-4")
    ap.add_argument("--child", metavar="CASE", help=argparse.SUPPRESS)   # run one case in this process
    ap.add_argument("--record", help=argparse.SUPPRESS)                 # child: write its record here
    a = ap.parse_args(argv)
    if a.child:
        rec = run_case(a.child, CASES.get(a.child, a.child), a.steps, a.warm, a.set)
        if rec is not None:
            with open(a.record, "w") as fh:
                json.dump(rec, fh)
        return 0
    recs = []
    names = [c for c in a.cases.split(",") if c]
    print(f"bench_peer_cases: {len(names)} case(s), {a.warm} warm + {a.steps} timed steps, {a.np} rank(s); "
          f"{machine()}; load average {os.getloadavg()[0]:.2f}", flush=True)
    for case in names:
        deck = CASES.get(case, case)
        rec_path = os.path.join(tempfile.gettempdir(), f"bench_peer_{os.getpid()}_{case.replace('/', '_')}.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", case, "--record", rec_path,
               "--steps", str(a.steps), "--warm", str(a.warm)] + [f"--set={s}" for s in a.set]
        if a.np > 1:
            cmd = ["mpirun", "-n", str(a.np)] + cmd
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT)
        if proc.returncode or not os.path.exists(rec_path):
            print(f"{case}: FAILED (exit {proc.returncode})", flush=True)
            continue
        with open(rec_path) as fh:
            rec = json.load(fh)
        os.remove(rec_path)
        rec["process_wall_s"] = time.perf_counter() - t0
        print(f"{case} ({deck}): {rec['bodies']} bodies, {rec['s_per_step']:.3f} s/step, peak RSS "
              f"{rec['peak_rss_mib_max']:.0f} MiB, load average {rec['load_avg'][0]:.2f}\n{rec['stage_table']}",
              flush=True)
        recs.append(rec)
        with open(a.json, "a") as fh:
            fh.write(json.dumps({k: v for k, v in rec.items() if k != "stage_table"}) + "\n")
    print_table(recs)
    return 0 if len(recs) == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
