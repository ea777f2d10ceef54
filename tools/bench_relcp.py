#!/usr/bin/env python3
"""Benchmark a deck: steps/s and wall time per step by stage (-log_view style), on the current MPI world.

    mpirun -n 2 .venv/bin/python tools/bench_relcp.py input_decks/ellipsoid_suspension.yaml --steps 60 --warm 40

``--warm K`` runs K steps first (e.g. to let a suspension compact) and times only the remaining steps.
Besides the wall time per step it reports rank 0's CPU time per step and the 1-minute load average: on a shared
machine the CPU time is the steadier figure (a process waiting for a core does not accumulate it).
Prints a table on rank 0 and appends one JSON line to ``--json`` (default tools/bench_results.jsonl).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("deck")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warm", type=int, default=0, help="untimed steps first")
    ap.add_argument("--model", help="override contact.model")
    ap.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "bench_results.jsonl"))
    a = ap.parse_args()
    from mpi4py import MPI
    from relcp_mpi import Simulation
    from relcp_mpi.config.sections import load_typed, override
    comm = MPI.COMM_WORLD
    deck, _ = load_typed(a.deck)
    if a.model:
        deck = override(deck, {"contact.model": a.model}, source=a.deck)
    sim = Simulation.from_deck(deck, comm=comm, check=False)
    sim.run(a.warm, writers=[])
    sim.reset_timer()                            # time only the remaining steps
    comm.Barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    diags = []                                   # (sim.history keeps only the newest steps)
    sim.run(a.steps, writers=[], on_step=lambda s: diags.append(s.diag))
    comm.Barrier()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    table = sim.timer.report(comm, wall=wall)
    if comm.rank == 0:
        rec = {"deck": a.deck, "ranks": comm.size, "bodies": sim.n_global, "timed_steps": a.steps,
               "warm_steps": a.warm, "model": deck.contact.model, "wall_s": wall,
               "steps_per_s": a.steps / wall, "s_per_step": wall / a.steps,
               "mean_constraints": sum(d["constraints"] for d in diags) / len(diags),
               "mean_active": sum(d.get("active", 0) for d in diags) / len(diags),
               "mean_iterations": sum(d["iterations"] for d in diags) / len(diags),
               "max_depth": max(d["depth"] for d in diags),
               "max_overlap": max(d["max_overlap"] for d in diags),
               "stages": {k: v for k, v in sim.timer.total.items()}}
        rec.update(cpu_s_per_step=cpu / a.steps, load_avg_1min=os.getloadavg()[0])
        print(f"{a.deck}: {comm.size} rank(s), {sim.n_global} bodies, {a.steps} steps after {a.warm} warm-up: "
              f"{rec['steps_per_s']:.3f} steps/s ({rec['s_per_step']:.3f} s/step, CPU {rec['cpu_s_per_step']:.3f} s/step "
              f"on rank 0, load {rec['load_avg_1min']:.1f}); mean constraints "
              f"{rec['mean_constraints']:.0f} (active {rec['mean_active']:.0f}), mean iterations "
              f"{rec['mean_iterations']:.0f}, max depth {rec['max_depth']}, max overlap {rec['max_overlap']:.2e}")
        print(table)
        with open(a.json, "a") as fh:
            fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
