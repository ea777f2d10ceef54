#!/usr/bin/env python3
"""Benchmark (issue 10 item 2 / issue 14 item 3): does ``contact.carry_rows`` save recursion levels?

Continues one checkpoint for ``--steps`` steps once per setting of ``contact.carry_rows`` (off, on) and
records per step: cells, recursion depth, LCP solves, constraint rows, rows appended by the recursion (rod-rod
and rod-wall), carried rows, total solver iterations, max overlap, wall time.  Both runs start from the same
state, so the two columns of a step differ by the option only for the first step and by the diverging
trajectories after it.  Rank 0 prints a per-step table and the totals and writes ``--csv`` when given.

    source tools/env.sh
    mpirun -n 1 .venv/bin/python tools/bench_carry_rows.py /tmp/col/ck/bacterial_colony_ckpt_000000600.h5 \
        --steps 20 [--deck input_decks/bacterial_colony.yaml] [--csv results/carry.csv]
    mpirun -n 1 .venv/bin/python tools/bench_carry_rows.py fresh --deck input_decks/peer/n2000c.yaml --steps 10

This is a benchmark, not a test: wall times depend on the machine and its load; depths, rows and iterations
do not (for a given rank count).
"""
import argparse
import csv
import os
import sys
import time

import numpy as np
import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))     # the tools' shared helpers
from study_common import parse_settings  # noqa: E402


def run(ckpt, deck_path, carry, steps, comm, extra, paired=False):
    from relcp_mpi import Simulation
    from relcp_mpi.config.sections import load_typed, override
    deck, _ = load_typed(deck_path)
    deck = override(deck, {"time.max_halvings": 0, "time.t_end": 1e6 * deck.time.dt, "time.steps": None,
                           "output.trajectory_every": 0, "output.progress_every": 0,
                           "output.checkpoint_every": 0, "output.directory": "/tmp/bench_carry_rows",
                           "contact.carry_rows": carry, **extra}, source=deck_path)
    if ckpt == "fresh":          # the deck's own initial state (e.g. the peer's dense beds)
        sim = Simulation.from_deck(deck, comm)
    else:
        sim = Simulation.from_checkpoint(ckpt, deck, yaml.safe_dump(deck.raw), comm)
    rows = []
    for _ in range(steps):
        if paired:       # the same start state without the carried points first (carry = 0 rows), then with
            saved = sim.state.copy()
            keys, vals = sim.state.warm
            sim.state.warm = (keys, vals[:, :4]) if vals is not None else (keys, vals)
            rows.append(_measure(sim, comm, 0))
            sim.state.restore(saved)
        rows.append(_measure(sim, comm, int(carry)))
    sim.engine.free()
    return rows


def _measure(sim, comm, carry):
    """One step of ``sim`` and its row of the table (collective)."""
    comm.Barrier()
    t0 = time.perf_counter()
    d = sim.step_once()
    wall = time.perf_counter() - t0
    table, gamma = sim.engine._last_rows[:2]
    app = table.level >= 1
    car = (table.level == 0) & (table.sub >= 5) & (table.ib >= 0)
    counts = comm.allreduce(np.array([int(np.count_nonzero(app & (table.ib >= 0))),
                                      int(np.count_nonzero(app & (table.ib < 0))),
                                      int(np.count_nonzero(app & (gamma > 0))),
                                      int(np.count_nonzero(car & (gamma > 0)))]))
    return dict(carry=int(carry), step=sim.step, cells=sim.n_global, depth=d["depth"], solves=d["depth"] + 1,
                rows=d["constraints"], appended_pair=int(counts[0]), appended_wall=int(counts[1]),
                appended_active=int(counts[2]), carried_active=int(counts[3]), carried=d.get("carried_rows", 0),
                iterations=d["iterations"], max_overlap=d["max_overlap"], trial_rotation=d["trial_rotation"],
                wall_s=comm.allreduce(wall, op=_max()))


def _max():
    from mpi4py import MPI
    return MPI.MAX


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", help="checkpoint to continue, or 'fresh' (start from the deck)")
    ap.add_argument("--deck", default="input_decks/bacterial_colony.yaml")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--settings", default="0,1", help="carry_rows settings to run, in order (0 = off, 1 = on)")
    ap.add_argument("--set", action="append", default=[], help="extra deck override section.key=value (repeatable)")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--paired", action="store_true",
                    help="one trajectory with carry_rows on; every step is also run from the same state without "
                         "the carried points (rows carry=0), so each pair of rows differs by the option only")
    args = ap.parse_args()
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    extra = parse_settings(args.set)
    allrows = []
    if args.paired:
        args.settings = "1"
    for c in (bool(int(x)) for x in args.settings.split(",")):
        allrows += run(args.checkpoint, args.deck, c, args.steps, comm, extra, paired=args.paired)
    if comm.rank:
        return
    keys = list(allrows[0])
    print(" ".join(f"{k:>13}" for k in keys))
    for r in allrows:
        print(" ".join(f"{r[k]:>13.3e}" if isinstance(r[k], float) else f"{r[k]:>13}" for k in keys))
    for c in sorted({r["carry"] for r in allrows}):
        rr = [r for r in allrows if r["carry"] == c]
        print(f"carry_rows={bool(c)}: {len(rr)} steps, solves {sum(r['solves'] for r in rr)}, "
              f"mean depth {np.mean([r['depth'] for r in rr]):.2f} (max {max(r['depth'] for r in rr)}), "
              f"mean rows {np.mean([r['rows'] for r in rr]):.0f}, appended pair/wall "
              f"{sum(r['appended_pair'] for r in rr)}/{sum(r['appended_wall'] for r in rr)}, "
              f"carried {sum(r['carried'] for r in rr)}, iterations {sum(r['iterations'] for r in rr)}, "
              f"max overlap {max(r['max_overlap'] for r in rr):.3e}, wall {sum(r['wall_s'] for r in rr):.1f} s")
    if args.csv:
        os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=keys)
            w.writeheader()
            w.writerows(allrows)


if __name__ == "__main__":
    main()
