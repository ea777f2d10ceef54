"""Level-0 rows of rod line contacts (relcp_mpi.contact.line_contacts): each extra row is a necessary condition
of nonpenetration (its separation bounds the pair's from above, and it is exact for the end point it samples),
and they make line contacts terminate at depth 0."""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.bodies.shapes import SPHEROCYLINDER
from relcp_mpi.contact.line_contacts import rod_pair_end_rows, rod_wall_cap_rows
from relcp_mpi.geometry import quaternion
from relcp_mpi.geometry.contact import pair_snsd, wall_snsd
from tests.helpers import make_deck, run_sim

SELF = MPI.COMM_SELF


def _random_rods(rng, m):
    kind = np.full(2 * m, SPHEROCYLINDER)
    shape = np.column_stack([rng.uniform(0.2, 0.6, 2 * m), rng.uniform(0.5, 3.0, 2 * m), np.zeros(2 * m)])
    X = rng.normal(size=(2 * m, 3)) * 1.2
    Q = quaternion.normalize(rng.normal(size=(2 * m, 4)))
    return kind, shape, X, Q


def _brute_end_distance(c, a, h, R_i, p, R_j):
    """Distance of point p (a sphere of radius R_j) from a capsule (c, a, h, R_i) by dense sampling of the core."""
    t = np.linspace(-h, h, 20001)
    return np.min(np.linalg.norm(c + t[:, None] * a - p, axis=1)) - R_i - R_j


def test_end_rows_bound_the_pair_separation_and_match_a_brute_force_distance():
    rng = np.random.default_rng(7)
    m = 300
    kind, shape, X, Q = _random_rods(rng, m)
    ia, ib = np.arange(m), np.arange(m, 2 * m)
    geo = pair_snsd(kind[ia], shape[ia], X[ia], Q[ia], kind[ib], shape[ib], X[ib], Q[ib])
    pair, sub, g = rod_pair_end_rows(kind, shape, X, Q, ia, ib, geo, skin=np.inf)
    assert len(pair) > 2 * m and set(np.unique(sub)) <= {1, 2, 3, 4}
    # necessary conditions: never below the true separation
    assert np.all(g.sep >= geo.sep[pair] - 1e-12)
    # witness points on the two surfaces and sep = n . (p_i - p_j), unit normals from j to i
    assert np.allclose(np.linalg.norm(g.normal, axis=1), 1.0)
    assert np.allclose(np.einsum("ij,ij->i", g.normal, g.p_i - g.p_j), g.sep, atol=1e-12)
    A = quaternion.to_matrix(Q)[:, :, 2]
    for k in rng.choice(len(pair), 40, replace=False):
        i, j, s = ia[pair[k]], ib[pair[k]], sub[k]
        if s in (1, 2):        # end of i (sphere of radius R_i) against rod j
            e = X[i] + (-1 if s == 1 else 1) * 0.5 * shape[i, 1] * A[i]
            ref = _brute_end_distance(X[j], A[j], 0.5 * shape[j, 1], shape[j, 0], e, shape[i, 0])
        else:
            e = X[j] + (-1 if s == 3 else 1) * 0.5 * shape[j, 1] * A[j]
            ref = _brute_end_distance(X[i], A[i], 0.5 * shape[i, 1], shape[i, 0], e, shape[j, 0])
        assert g.sep[k] == pytest.approx(ref, abs=1e-6)


def test_end_rows_drop_duplicates_of_the_snsd_row_and_respect_the_skin():
    # rods along x with disjoint projections: the SNSD row joins the end +h of i and the end -h of j, so the
    # rows of those two end points (slots 2 and 3) duplicate it and are dropped
    kind = np.array([SPHEROCYLINDER, SPHEROCYLINDER])
    shape = np.array([[0.5, 2.0, 0.0], [0.5, 2.0, 0.0]])
    X = np.array([[0.0, 0.0, 0.0], [2.5, 1.05, 0.0]])
    q = quaternion.from_rotation_vector(np.array([[0.0, np.pi / 2, 0.0]]))[0]
    Q = np.tile(q, (2, 1))
    ia, ib = np.array([0]), np.array([1])
    geo = pair_snsd(kind[ia], shape[ia], X[ia], Q[ia], kind[ib], shape[ib], X[ib], Q[ib])
    pair, sub, g = rod_pair_end_rows(kind, shape, X, Q, ia, ib, geo, skin=np.inf)
    d = np.linalg.norm(g.p_i - geo.p_i[0], axis=1) + np.linalg.norm(g.p_j - geo.p_j[0], axis=1)
    assert np.all(d > 1e-9) and sorted(sub) == [1, 4]
    _, _, g2 = rod_pair_end_rows(kind, shape, X, Q, ia, ib, geo, skin=0.2)
    assert np.all(g2.sep <= 0.2) and len(g2.sep) < len(g.sep)


def test_cap_rows_are_the_two_end_caps_and_their_minimum_is_the_wall_separation():
    rng = np.random.default_rng(3)
    m = 200
    kind, shape, X, Q = _random_rods(rng, m // 2)
    n = rng.normal(size=(m, 3))
    n /= np.linalg.norm(n, axis=1)[:, None]
    w = rng.normal(size=(m, 3))
    wb, ww = np.arange(m), np.arange(m)
    cand, sub, g = rod_wall_cap_rows(kind, shape, X, Q, wb, ww, w, n, skin=np.inf)
    assert len(cand) == 2 * m and sorted(set(sub)) == [0, 1]
    ref = wall_snsd(kind, shape, X, Q, w, n)
    lo = np.full(m, np.inf)
    np.minimum.at(lo, cand, g.sep)
    assert np.allclose(lo, ref.sep, atol=1e-12)
    assert np.all(g.sep >= ref.sep[cand] - 1e-12)
    assert np.allclose(np.einsum("ij,ij->i", g.normal, g.p_i - g.p_j), g.sep, atol=1e-12)


def _rod_on_wall(line_contacts, tilt=0.05):
    return make_deck(
        time={"dt": 0.05, "steps": 40}, walls=[{"point": [0, 0, 0], "normal": [0, 0, 1]}],
        bodies=[{"shape": "spherocylinder", "radius": 0.5, "length": 4.0,
                 "position": [0, 0, 0.51 + 2 * np.sin(tilt)],
                 "orientation": {"axis": [0, 1, 0], "angle": np.pi / 2 - tilt},
                 "force": [0, 0, -20.0], "torque": [0, 8.0, 0]}],
        contact={"overlap_tol": 1e-3, "skin": 0.3, "line_contacts": line_contacts}, solver={"tol": 1e-6})


def _parallel_rods(line_contacts):
    rod = {"shape": "spherocylinder", "radius": 0.5, "length": 4.0,
           "orientation": {"axis": [0, 1, 0], "angle": np.pi / 2}}
    return make_deck(
        time={"dt": 0.05, "steps": 40},
        bodies=[{**rod, "position": [0, 0, 0], "force": [0, 10, 0], "torque": [0, 0, 5.0]},
                {**rod, "position": [0.3, 1.02, 0], "force": [0, -10, 0], "torque": [0, 0, -5.0]}],
        contact={"overlap_tol": 1e-3, "skin": 0.3, "line_contacts": line_contacts}, solver={"tol": 1e-6})


@pytest.mark.parametrize("case", [_rod_on_wall, _parallel_rods])
def test_line_contacts_terminate_at_level_zero(case):
    """A rod pushed and twisted onto a wall, and two parallel rods pressed together with opposite torques:
    with end rows every step is resolved by the level-0 LCP (without them, the single SNSD point lets the rod
    pivot and each step needs a second level).  Nonpenetration holds; the rod on the wall comes to rest with
    the cap forces balancing the applied force and torque, the rods' contact forces are equal and opposite."""
    _, old = run_sim(case(False), comm=SELF)
    assert max(d["depth"] for d in old) >= 1          # the situation does exercise the pivot
    sim, diags = run_sim(case(True), comm=SELF)
    assert max(d["depth"] for d in diags) == 0
    assert max(d["max_overlap"] for d in diags) <= 1e-3
    F = sim.contact_force
    if case is _rod_on_wall:
        assert np.allclose(F + sim.bodies.f_ext, 0.0, atol=1e-4 * np.abs(sim.bodies.f_ext).max())
    else:
        assert np.allclose(F[0, :3] + F[1, :3], 0.0, atol=1e-9)


def test_far_trial_rotation_redoes_the_step_before_the_solver_runs_off(capsys):
    """Without line contacts the pinched bed's second level tries a trial rotation far outside the
    linearisation; with time.max_halvings the trial-range check gives the step up at once (TrialRangeError,
    not a SolverError after max_iter) and the sub-steps resolve it within the tolerance."""
    import copy

    from tests.test_line_contacts_mpi import pinched_bed
    deck = copy.deepcopy(pinched_bed(False, max_iter=5000))
    deck["time"]["max_halvings"] = 4
    deck["contact"]["max_trial_rotation"] = 0.25
    sim, diags = run_sim(deck, comm=SELF)
    out = capsys.readouterr().out
    assert "TrialRangeError" in out and "SolverError" not in out
    assert max(d["substeps"] for d in diags) >= 2
    assert max(d["max_overlap"] for d in diags) <= 1e-3
    assert all(d["trial_rotation"] <= np.degrees(0.25) for d in diags)


def test_ring_wall_rows_bound_the_wall_separation_and_a_flat_ring_does_not_pivot():
    from relcp_mpi.bodies.shapes import RING
    from relcp_mpi.contact.line_contacts import ring_wall_rows
    rng = np.random.default_rng(5)
    m = 100
    kind = np.full(m, RING)
    shape = np.column_stack([rng.uniform(1.0, 2.0, m), rng.uniform(0.1, 0.4, m), np.zeros(m)])
    X = rng.normal(size=(m, 3))
    Q = quaternion.normalize(rng.normal(size=(m, 4)))
    Q[:10] = [1.0, 0, 0, 0]                                 # flat rings (body x axis fallback)
    n = np.tile([0.0, 0.0, 1.0], (m, 1))
    w = np.tile([0.0, 0.0, -5.0], (m, 1))
    cand, sub, g = ring_wall_rows(kind, shape, X, Q, np.arange(m), np.arange(m), w, n, skin=np.inf)
    assert len(cand) == 3 * m and sorted(set(sub)) == [1, 2, 3]
    ref = wall_snsd(kind, shape, X, Q, w, n)
    assert np.all(g.sep >= ref.sep[cand] - 1e-12)
    # the four samples (SNSD + 3) of a flat ring are all at its lowest height
    flat = cand < 10
    assert np.allclose(g.sep[flat], ref.sep[cand[flat]], atol=1e-12)
    # the sample opposite the lowest point is higher by 2 Rc sin(tilt), tilt = angle between the axis and n
    c = np.abs(quaternion.to_matrix(Q)[:, 2, 2])
    opp = sub == 2
    assert np.allclose(g.sep[opp] - ref.sep[cand[opp]], 2 * shape[cand[opp], 0] * np.sqrt(1 - c[cand[opp]] ** 2),
                       atol=1e-9)


def _ring_on_wall(line_contacts):
    return make_deck(
        time={"dt": 0.05, "steps": 20}, walls=[{"point": [0, 0, 0], "normal": [0, 0, 1]}],
        bodies=[{"shape": "ring", "ring_radius": 1.5, "radius": 0.2, "position": [0, 0, 0.221],
                 "orientation": {"axis": [0, 1, 0], "angle": 0.01},
                 "force": [0, 0, -20.0], "torque": [0, 5.0, 3.0]}],
        contact={"overlap_tol": 1e-3, "skin": 0.3, "line_contacts": line_contacts}, solver={"tol": 1e-6})


def test_flat_ring_pressed_and_twisted_on_a_wall_terminates_at_level_zero():
    _, old = run_sim(_ring_on_wall(False), comm=SELF)
    assert max(d["depth"] for d in old) >= 1
    sim, diags = run_sim(_ring_on_wall(True), comm=SELF)
    assert max(d["depth"] for d in diags) == 0
    assert max(d["max_overlap"] for d in diags) <= 1e-3


def test_row_rotation_limit_is_inert_below_the_limit_and_cuts_back_far_trials():
    """contact.row_rotation_limit only moves the linearisation point of appended rows whose trial turned a body
    further than the limit: a run whose trials stay below it is bit-identical with and without the option; a
    run whose first trial turns rods by ~35 deg (the pinched bed without line contacts) is changed by it and
    then solved by APGD alone within overlap_tol (the full-trial rows make APGD fail: tests/test_line_contacts_mpi.py)."""
    import copy

    from tests.test_line_contacts_mpi import pinched_bed
    base = pinched_bed(True, max_iter=5000)
    runs = []
    for lim in (0.0, 0.35):
        deck = copy.deepcopy(base)
        deck["contact"]["row_rotation_limit"] = lim
        sim, diags = run_sim(deck, comm=SELF)
        runs.append((sim.gather()[1], diags))
    assert max(d["trial_rotation"] for d in runs[0][1]) < np.degrees(0.35)
    assert np.array_equal(runs[0][0], runs[1][0])
    assert [d["iterations"] for d in runs[0][1]] == [d["iterations"] for d in runs[1][1]]
    deck = copy.deepcopy(pinched_bed(False, max_iter=5000))
    deck["contact"]["row_rotation_limit"] = 0.35
    _, diags = run_sim(deck, comm=SELF)
    assert max(d["max_overlap"] for d in diags) <= 1e-3
    assert max(d["trial_rotation"] for d in diags) > np.degrees(0.35)
    assert max(d["depth"] for d in diags) <= 5
