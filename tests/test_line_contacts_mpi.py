"""A jammed bed of rods pinched between two walls (the colony's failure mechanism, docs/ARCHITECTURE.md "Dense
packings"): without the level-0 line-contact rows the grown LCPs defeat APGD (rows built at far-off trial
configurations pinch rods between the walls) and, with no fallback solver, the run fails; the interior-point
fallback (solver.fallback, default ipm) gets through them; with line contacts APGD alone solves every step,
overlaps stay below overlap_tol, and the answer is the same on 1, 2 and 4 ranks.  Run under mpirun -n 2 and -n 4 (a COMM_SELF run is the 1-rank reference)."""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.solver.lcp import SolverError
from tests.helpers import make_deck, run_sim

HANG_TIMEOUT = 240


def pinched_bed(line_contacts, tol=1e-6, max_iter=5000, fallback="none"):
    """4 x 4 rods (R 0.5, L 1.5) lying between walls 1.04 apart (clearance 0.02 per side), pressed together in
    the plane and twisted about their short axes by torques of +-50..100 (deterministic pattern)."""
    rng = np.random.default_rng(2)
    bodies = []
    for i in range(4):
        for j in range(4):
            x, y = (i - 1.5) * 2.52, (j - 1.5) * 1.02
            bodies.append({"shape": "spherocylinder", "radius": 0.5, "length": 1.5, "position": [x, y, 0.0],
                           "orientation": {"axis": [0, 1, 0], "angle": float(np.pi / 2 + rng.uniform(-0.02, 0.02))},
                           "torque": [0, float(100 * rng.choice([-1, 1]) * rng.uniform(0.5, 1)),
                                      float(rng.uniform(-10, 10))],
                           "force": [-5 * x, -5 * y, 0.0]})
    return make_deck(time={"dt": 0.05, "steps": 4}, box={"lo": [-20, -20, -2], "hi": [20, 20, 2]},
                     walls=[{"point": [0, 0, -0.52], "normal": [0, 0, 1]},
                            {"point": [0, 0, 0.52], "normal": [0, 0, -1]}],
                     bodies=bodies, contact={"overlap_tol": 1e-3, "skin": 0.3, "line_contacts": line_contacts,
                                             "max_depth": 30},
                     solver={"tol": tol, "method": "apgd", "max_iter": max_iter, "fallback": fallback},
                     parallel={"decomposition": "rcb"})


@pytest.mark.mpi
def test_pinched_rods_fail_without_line_contacts(hang_guard):
    # APGD alone fails on the grown LCPs (1500 iterations keep the test short) ...
    with pytest.raises(SolverError):
        run_sim(pinched_bed(False, max_iter=1500), comm=MPI.COMM_WORLD)
    # ... which the ipm fallback solves, keeping the overlaps below overlap_tol
    _, diags = run_sim(pinched_bed(False, max_iter=1500, fallback="ipm"), comm=MPI.COMM_WORLD)
    assert sum(d.get("fallback_solves", 0) for d in diags) > 0
    assert max(d["max_overlap"] for d in diags) <= 1e-3


@pytest.mark.mpi
def test_pinched_rods_solved_with_line_contacts_on_any_rank_count(hang_guard):
    world = MPI.COMM_WORLD
    deck = pinched_bed(True)
    ref, dref = run_sim(deck, comm=MPI.COMM_SELF)
    sim, diags = run_sim(deck, comm=world)
    for d in (dref, diags):
        assert max(x["max_overlap"] for x in d) <= 1e-3
        assert max(x["depth"] for x in d) <= 8
    assert [x["constraints"] for x in diags] == [x["constraints"] for x in dref]
    g0, x0 = ref.gather()
    g1, x1 = sim.gather()
    assert np.array_equal(g0, g1)
    assert np.allclose(x0, x1, atol=1e-5)


@pytest.mark.mpi
@pytest.mark.parametrize("depth_limit", [0.0, 0.05])
def test_pinched_rods_solved_by_rotation_limited_rows_on_any_rank_count(hang_guard, depth_limit):
    """Without line contacts the first solve of the pinched bed turns rods by ~35 deg; rows appended at that trial
    make the grown LCP unsolvable for APGD (test above).  With contact.row_rotation_limit the same rows are
    linearised where no rod has turned more than the limit: APGD alone (no fallback) solves every level, the
    recursion stays shallow, overlaps stay below overlap_tol, and 1, 2 and 4 ranks agree -- also with
    contact.row_depth_limit, which takes the rows of deep trial overlaps along the step's path (it acts here:
    tests/test_row_depth_limit.py)."""
    world = MPI.COMM_WORLD
    deck = pinched_bed(False, max_iter=5000)
    deck["contact"]["row_rotation_limit"] = 0.35
    deck["contact"]["row_depth_limit"] = depth_limit
    ref, dref = run_sim(deck, comm=MPI.COMM_SELF)
    sim, diags = run_sim(deck, comm=world)
    for d in (dref, diags):
        assert max(x["max_overlap"] for x in d) <= 1e-3
        assert max(x["depth"] for x in d) <= 5
        assert max(x["iterations"] for x in d) < 2000
        assert max(x["trial_rotation"] for x in d) > np.degrees(0.35)      # the limit did act
    assert [x["constraints"] for x in diags] == [x["constraints"] for x in dref]
    g0, x0 = ref.gather()
    g1, x1 = sim.gather()
    assert np.array_equal(g0, g1)
    assert np.allclose(x0, x1, atol=1e-5)
