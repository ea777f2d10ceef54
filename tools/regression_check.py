#!/usr/bin/env python3
"""Bitwise regression check of the driver: run every deck of ``input_decks/`` for a few steps and compare
the trajectory (every dataset of every frame: gid, x, q, u, ...), the per-step diagnostics and the final
checkpoint (bodies and warm-start table) with a recorded baseline, bit for bit.

    mpirun -n 2 .venv/bin/python tools/regression_check.py record   # before a refactoring
    mpirun -n 2 .venv/bin/python tools/regression_check.py check    # after it: exit 1 on any difference

(also with ``-n 1``; ``source tools/env.sh`` first).  The baseline is one SHA-256 digest per dataset,
kept in ``tools/regression_baseline.json`` keyed by rank count and case.  Digests depend on the machine's
floating-point stack (numpy, BLAS, MPI): re-record on another machine.  A refactoring of the driver
(run state, run loop, writers, checkpoints) must not change any digest; a physics change does.

Cases: each relcp deck for a few steps (the big ones shortened), a variant of ``two_ellipsoids`` whose steps
fail at the full dt and are redone at dt/2^k (``time.max_halvings``), and the two event-driven decks.
"""
import argparse
import copy
import hashlib
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
BASELINE = os.path.join(ROOT, "tools", "regression_baseline.json")

# (case, deck file, steps, deck overrides {dotted key: value})
CASES = [
    ("two_ellipsoids", "two_ellipsoids.yaml", 24, {}),
    ("two_ellipsoids_halving", "two_ellipsoids.yaml", 16,
     {"time.dt": 0.2, "contact.max_depth": 1, "time.max_halvings": 3}),
    ("sphere_compaction", "sphere_compaction.yaml", 8, {}),
    ("spherocylinder_packing", "spherocylinder_packing.yaml", 8, {}),
    ("chainmail", "chainmail.yaml", 6, {}),
    ("bacterial_colony", "bacterial_colony.yaml", 70, {"parallel.rebalance_every": 10}),
    ("ellipsoid_suspension", "ellipsoid_suspension.yaml", 3, {"parallel.rebalance_every": 2}),
    ("sphere_box_100k", "sphere_box_100k.yaml", 2, {}),
    ("newton_cradle", "newton_cradle.yaml", None, {}),
    ("event_gas", "event_gas.yaml", None, {}),
]


def _digests(path, prefix):
    """{prefix/dataset path: sha256 of its bytes (dtype and shape included)} of every dataset in a file."""
    import h5py
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            a = obj[()]
            import numpy as np
            a = np.asarray(a)
            h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
            if a.dtype == object:             # variable-length strings (exact rationals): hash their text
                h.update(repr(a.tolist()).encode())
            else:
                h.update(np.ascontiguousarray(a).tobytes())
            out[f"{prefix}/{name}"] = h.hexdigest()
    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return out


def run_case(name, deck_file, steps, overrides, workdir, comm):
    """Run one case in ``workdir``; returns {dataset: digest} (rank 0; {} elsewhere)."""
    from relcp_mpi.config.sections import load_typed, override
    deck, text = load_typed(os.path.join(ROOT, "input_decks", deck_file))
    out = os.path.join(workdir, name)
    changes = {**overrides, "output.directory": out, "output.progress_every": 0}
    if deck.engine == "event_driven":
        from relcp_mpi.events.deck import run_event_deck
        deck = override(deck, changes)
        path = os.path.join(out, f"{name}_events.h5")
        if comm.rank == 0:
            os.makedirs(out, exist_ok=True)
        comm.Barrier()
        run_event_deck(deck, path, comm)
        return _digests(path, "events") if comm.rank == 0 else {}
    deck = override(deck, {**changes, "time.steps": steps, "time.t_end": None, "output.trajectory_every": 1,
                           "output.checkpoint_every": steps, "output.keep_checkpoints": 1})
    from relcp_mpi.simulation import Simulation
    if hasattr(Simulation, "from_deck"):
        sim = Simulation.from_deck(deck, comm=comm)
        sim.run()
    else:                                         # the driver before the run-state refactoring
        sim = Simulation(deck, "", comm)
        sim.check_initial_overlap()
        sim.run()
    comm.Barrier()
    if comm.rank != 0:
        return {}
    d = _digests(os.path.join(out, f"{deck.name}.h5"), "trajectory")
    ck = os.path.join(out, f"{deck.name}_ckpt_{steps:09d}.h5")
    d.update({k: v for k, v in _digests(ck, "checkpoint").items()})
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["record", "check"])
    ap.add_argument("--cases", help="comma list of case names (default: all)")
    ap.add_argument("--baseline", default=BASELINE)
    a = ap.parse_args()
    from mpi4py import MPI
    from relcp_mpi.parallel.errors import install_excepthook
    comm = MPI.COMM_WORLD
    install_excepthook(comm)
    want = set(a.cases.split(",")) if a.cases else None
    workdir = tempfile.mkdtemp(prefix="relcp_regress_") if comm.rank == 0 else None
    workdir = comm.bcast(workdir, root=0)
    key = f"np{comm.size}"
    base = {}
    if os.path.exists(a.baseline):
        with open(a.baseline) as fh:
            base = json.load(fh)
    bad = 0
    try:
        for name, f, steps, ov in CASES:
            if want and name not in want:
                continue
            got = run_case(name, f, steps, ov, workdir, comm)
            if comm.rank != 0:
                continue
            if a.mode == "record":
                base.setdefault(key, {})[name] = got
                print(f"recorded {key} {name}: {len(got)} datasets", flush=True)
                continue
            ref = base.get(key, {}).get(name)
            if ref is None:
                print(f"MISSING baseline {key} {name}", flush=True)
                bad += 1
                continue
            diff = sorted(k for k in set(ref) | set(got) if ref.get(k) != got.get(k))
            if diff:
                bad += 1
                print(f"DIFFERENT {key} {name}: {len(diff)} of {len(ref)} datasets, e.g. {diff[:5]}", flush=True)
            else:
                print(f"identical {key} {name}: {len(ref)} datasets", flush=True)
    finally:
        comm.Barrier()
        if comm.rank == 0:
            shutil.rmtree(workdir, ignore_errors=True)
    if comm.rank == 0 and a.mode == "record":
        with open(a.baseline, "w") as fh:
            json.dump(base, fh, indent=1, sort_keys=True)
    bad = comm.bcast(bad, root=0)
    if comm.rank == 0 and a.mode == "check":
        print("REGRESSION CHECK: " + ("all identical" if not bad else f"{bad} case(s) differ"), flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
