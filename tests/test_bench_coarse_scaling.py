"""tools/bench_coarse_scaling.py: its numpy APGD is the package's APGD, and the coarse scaling correction keeps
the iteration a solver of the same LCP (min-map residual within tol, the same multipliers to the solution's
precision).  The LCP is the first one the stepper dumps for the pinched rod bed (16 rods between two walls).

Serial: .venv/bin/python -m pytest -q tests/test_bench_coarse_scaling.py
"""
import glob
import os
import sys

import numpy as np
from mpi4py import MPI

from relcp_mpi.config.deck import validate
from relcp_mpi.contact.lcp_dump import load_lcp
from relcp_mpi.petsc import get_petsc
from relcp_mpi.solver.lcp import solve_lcp
from tests.test_line_contacts_mpi import pinched_bed

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import bench_coarse_scaling as bcs  # noqa: E402


def _dumped_lcp(tmp_path):
    from relcp_mpi.simulation import Simulation
    deck = pinched_bed(True, tol=1e-6)
    deck = validate({**deck, "time": {**deck["time"], "steps": 1},
                     "debug": {"dump_lcp": str(tmp_path), "dump_on": "always"}})
    Simulation.from_deck(deck, comm=MPI.COMM_SELF).run(1, writers=[])
    return load_lcp(sorted(glob.glob(os.path.join(str(tmp_path), "*level00*.npz")))[0])


def test_numpy_apgd_is_the_package_apgd_and_the_correction_solves_the_same_lcp(tmp_path):
    PETSc = get_petsc()
    dump = _dumped_lcp(tmp_path)
    op, _ = bcs.build_operator(dump)
    q = PETSc.Vec().createWithArray(np.asarray(dump["q"], float).copy(), comm=PETSc.COMM_SELF)
    tol = 1e-7
    x = q.duplicate()
    x.set(0.0)
    ref = solve_lcp(op, q, x, method="apgd", tol=tol, max_iter=20000)
    X_ref = x.getArray().copy()
    zero = np.zeros(len(dump["q"]))
    it, _, nc, res, X = bcs.apgd(op, q, zero, tol)
    assert nc == 0 and it == ref.iterations and res <= tol
    np.testing.assert_allclose(X, X_ref, rtol=0, atol=1e-9 * max(1.0, np.abs(X_ref).max()))
    corr = bcs.ScalingCorrection(dump, block=2)
    assert corr.n_aggregates > 1
    it_c, _, nc, res_c, X_c = bcs.apgd(op, q, zero, tol, every=5, first=5, correction=corr)
    assert nc > 0 and res_c <= tol
    assert np.all(X_c >= 0)
    # the same LCP solved: the min-map residual of the corrected answer, checked with the package's operator
    xv, gv = q.duplicate(), q.duplicate()
    xv.getArray()[:] = X_c
    xv.stateIncrease()
    op.mult(xv, gv)
    assert np.abs(np.minimum(X_c, gv.getArray() + dump["q"])).max() <= tol
    # and the forces agree with the plain solve's where the solution is unique enough to compare: their totals
    np.testing.assert_allclose(X_c.sum(), X_ref.sum(), rtol=1e-3)
