"""Restart faults (issue 12, items 2-4): a same-rank restart reproduces the uninterrupted run's trajectory
frames AND its per-step diagnostics bit for bit; a restart with a changed deck reports every difference and
refuses the physics-defining ones (exit 2); a stop signal during start-up ends the job with status 3 and one
message on every rank count, never a traceback or a hang.

MPI:     mpirun -n 2 tools/mpi_pytest.sh -q --with-mpi -m "mpi and not slow" tests/test_restart_faults.py
Serial:  .venv/bin/python -m pytest tests/test_restart_faults.py -q   (the subprocess tests: serial only)
"""
import os

import h5py
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.config.deck import validate
from relcp_mpi.io.checkpoint import checkpoint_path
from tests.helpers import UNDER_LAUNCHER
from tests.test_restart import colony_raw

WORLD = MPI.COMM_WORLD
serial_only = pytest.mark.skipif(WORLD.size > 1 or UNDER_LAUNCHER,
                                 reason="serial test (launches mpirun itself); run without mpirun")
HANG_TIMEOUT = 180


def _frames(path):
    """{step: (attrs dict, {dataset: array})} of every frame of a trajectory file (serial read)."""
    out = {}
    with h5py.File(path, "r") as f:
        for g in f["frames"].values():
            out[int(g.attrs["step"])] = (dict(g.attrs), {k: ds[()] for k, ds in g.items()})
        table = {k: ds[()] for k, ds in f["diagnostics"].items()}
    return out, table


# ------------------------------------------------------------------------------------------------
# item 4: diagnostics of a same-rank restart
@pytest.mark.mpi
def test_same_rank_restart_frames_and_diagnostics_bitwise(shared_dir, hang_guard):
    """Growing, dividing colony with RCB rebalancing checked every 2 steps (imbalance 1.01): uninterrupted
    N steps vs. k steps + checkpoint + (crash after k + 2) + restart.  Every frame (datasets and attributes,
    i.e. the step's diagnostics), every row of the /diagnostics table and every in-memory diagnostics dict
    must be bitwise equal.  The restart point k = 5 lies between two rebalance checks, where the imbalance
    diagnostic of the last check must come from the checkpoint."""
    from relcp_mpi.simulation import Simulation
    N, k = 12, 5

    def deck(d, steps, every=0):
        raw = colony_raw(d, steps, every)
        raw["output"]["trajectory_every"] = 1
        return validate(raw)

    ref_dir, run_dir = os.path.join(shared_dir, "ref"), os.path.join(shared_dir, "run")
    ref = Simulation.from_deck(deck(ref_dir, N), comm=WORLD)
    ref.run()
    assert ref.n_global > 12 and "imbalance" in ref.history[k]        # cells divided, RCB checks ran
    part = Simulation.from_deck(deck(run_dir, k + 2, k), comm=WORLD)
    part.run()
    sim = Simulation.from_checkpoint(checkpoint_path(os.path.join(run_dir, "colony_ckpt"), k),
                                     deck(run_dir, N), "", WORLD)
    sim.run()
    assert len(sim.history) == N - k
    for s, (a, b) in enumerate(zip(ref.history[k:], sim.history), start=k + 1):
        assert a.keys() == b.keys(), (s, sorted(set(a) ^ set(b)))
        for key in a:
            assert np.array_equal(a[key], b[key]), (s, key, a[key], b[key])
    WORLD.Barrier()
    if WORLD.rank == 0:
        fa, ta = _frames(os.path.join(ref_dir, "colony.h5"))
        fb, tb = _frames(os.path.join(run_dir, "colony.h5"))
        assert sorted(fa) == sorted(fb) == list(range(N + 1))
        for s in fa:
            (aa, da), (ab, db) = fa[s], fb[s]
            assert aa.keys() == ab.keys(), (s, sorted(set(aa) ^ set(ab)))
            for key in aa:
                assert np.array_equal(aa[key], ab[key]), (s, key, aa[key], ab[key])
            for key in da:
                assert np.array_equal(da[key], db[key]), (s, key)
        assert ta.keys() == tb.keys()
        for key in ta:
            assert np.array_equal(ta[key], tb[key], equal_nan=True), (key, ta[key], tb[key])
        assert np.isfinite(ta["imbalance"][k + 1:]).all()            # a real value in every restarted row
    WORLD.Barrier()
