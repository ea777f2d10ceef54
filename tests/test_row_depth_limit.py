"""contact.row_depth_limit: a pair that overlaps deeply at a trial configuration gets its appended row where the
step's path brings it to about half the limit (stepper/relcp.py, _backed_off_rows).

Serial:  .venv/bin/python -m pytest -q tests/test_row_depth_limit.py
"""
import copy
from types import SimpleNamespace

import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.basics import quaternion
from relcp_mpi.bodies.shapes import SPHEROCYLINDER
from relcp_mpi.geometry.contact import pair_snsd_indexed
from relcp_mpi.stepper.relcp import _backed_off_rows

S2 = np.sqrt(0.5)
ALONG_X = np.array([S2, 0.0, S2, 0.0])       # body z axis -> lab x
ALONG_Y = quaternion.multiply(np.array([S2, 0.0, 0.0, S2]), ALONG_X)   # ALONG_X turned by 90 deg about lab z


def _two_rods(x0, q0, xt, qt):
    """A step input of two rods (radius 0.5, axis length 2) moving from (x0, q0) to the trial (xt, qt)."""
    inp = SimpleNamespace(x0=np.array(x0, float), q0=np.array(q0, float), kind=np.full(2, SPHEROCYLINDER, np.int8),
                          shape=np.array([[0.5, 2.0, 0.0]] * 2))
    Xt, Qt = np.array(xt, float), np.array(qt, float)
    pa, pb = np.array([0]), np.array([1])
    trial = pair_snsd_indexed(inp.kind, inp.shape, Xt, Qt, pa, pb, tol=1e-12, check=True)
    return inp, Xt, Qt, pa, pb, trial


def _prm(limit):
    return SimpleNamespace(row_depth_limit=limit, overlap_tol=1e-3, geometry_tol=1e-12)


def test_translation_row_is_taken_at_half_the_limit_and_predicts_the_trial_exactly():
    # rod 1 slides from 1.2 beyond rod 0 (beyond any skin) to 0.7 into it in one step
    inp, Xt, Qt, pa, pb, trial = _two_rods([[0, 0, 0], [0, 2.2, 0]], [ALONG_X, ALONG_X],
                                           [[0, 0, 0], [0, 0.3, 0]], [ALONG_X, ALONG_X])
    assert trial.sep[0] == pytest.approx(-0.7)
    geo, mask = _backed_off_rows(inp, _prm(0.1), Xt, Qt, pa, pb, trial.sep, trial)
    assert mask is not None and mask[0]
    # linear motion: the linearisation at Z predicts the trial separation exactly, and the normal is the same
    assert geo.sep[0] == pytest.approx(-0.7, abs=1e-12)
    assert np.allclose(np.abs(geo.normal[0]), [0, 1, 0])
    # the lever arms are those at Z (the witness point of rod 0 is on its surface below rod 1's path)
    r_i = geo.p_i[0] - Xt[0]
    assert r_i[1] == pytest.approx(0.5) and abs(r_i[2]) < 1e-12
    # off, or shallower than the limit: the rows are left as they are
    same, none = _backed_off_rows(inp, _prm(0.8), Xt, Qt, pa, pb, trial.sep, trial)
    assert none is None and same is trial


def test_crossing_rods_get_an_in_plane_row_instead_of_the_trials_vertical_one():
    # rod 1 turns by 90 deg about z and moves onto rod 0: at the trial the two rods cross in the plane, where
    # the shared normal of the deepest point is vertical (a row the walls of a monolayer would forbid)
    inp, Xt, Qt, pa, pb, trial = _two_rods([[0, 0, 0], [0, 2.2, 0]], [ALONG_X, ALONG_X],
                                           [[0, 0, 0], [0.2, 0.1, 1e-3]], [ALONG_X, ALONG_Y])
    assert trial.sep[0] < -0.9 and abs(trial.normal[0, 2]) > 0.9
    geo, mask = _backed_off_rows(inp, _prm(0.1), Xt, Qt, pa, pb, trial.sep, trial)
    assert mask[0]
    assert abs(geo.normal[0, 2]) < 1e-2 and abs(geo.normal[0, 1]) > 0.99   # in the plane: rod 1 came along -y
    assert geo.sep[0] < -1e-3                               # it still cuts the trial off


def test_row_depth_limit_changes_only_deep_trial_rows_in_a_run():
    """In a run (the pinched bed of tests/test_line_contacts_mpi.py, line contacts on) whose trials never
    overlap by more than the limit the option is bit-identical; without line contacts, where rods turn by
    ~35 deg in a trial, it changes rows and the run still ends within overlap_tol."""
    from tests.test_line_contacts import run_sim
    from tests.test_line_contacts_mpi import pinched_bed
    out = {}
    for lc in (True, False):
        for limit in (0.0, 0.05):
            deck = copy.deepcopy(pinched_bed(lc, max_iter=5000))
            deck["contact"]["row_rotation_limit"] = 0.35
            deck["contact"]["row_depth_limit"] = limit
            sim, diags = run_sim(deck, comm=MPI.COMM_SELF)
            out[lc, limit] = (sim.gather()[1], diags)
            assert max(d["max_overlap"] for d in diags) <= 1e-3
    assert np.array_equal(out[True, 0.0][0], out[True, 0.05][0])
    assert not np.array_equal(out[False, 0.0][0], out[False, 0.05][0])
