"""ReLCP time stepper physics: nonpenetration, force balance, recursion behaviour."""
import numpy as np
import pytest
from mpi4py import MPI

from tests.helpers import make_deck, run_sim

SELF = MPI.COMM_SELF


def two_spheres(dt=0.1, steps=40, force=10.0, tol=1e-3, model="relcp"):
    return make_deck(
        time={"dt": dt, "steps": steps},
        bodies=[{"shape": "sphere", "radius": 1.0, "position": [-1.6, 0.0, 0.0], "force": [force, 0, 0]},
                {"shape": "sphere", "radius": 0.5, "position": [1.2, 0.0, 0.0], "force": [-force, 0, 0]}],
        contact={"overlap_tol": tol, "skin": 0.5, "model": model},
        solver={"tol": 1e-6})


def test_two_spheres_nonpenetration_force_balance_and_single_row():
    deck = two_spheres()
    forces = []
    sim, diags = run_sim(deck, comm=SELF, record=lambda s: forces.append((s.bodies.gid.copy(), s.contact_force.copy())))
    # contact happens, spheres never need a second row, overlap within tolerance every step
    assert max(d["constraints"] for d in diags) >= 1
    assert all(d["depth"] == 0 for d in diags)
    assert max(d["max_overlap"] for d in diags) <= deck["contact"]["overlap_tol"]
    # final state: head-on, in contact, at rest, contact forces equal and opposite and balancing F_ext
    gid, F = forces[-1]
    assert np.allclose(F[0, :3] + F[1, :3], 0.0, atol=1e-9)           # Newton's third law (momentum)
    x = sim.bodies.x
    d = np.linalg.norm(x[0] - x[1])
    assert d == pytest.approx(1.5, abs=2e-3)
    Fext = sim.bodies.f_ext[:, :3]
    assert np.allclose(F[:, :3] + Fext, 0.0, atol=1e-3 * 10.0)
    assert np.allclose(sim.bodies.u, 0.0, atol=1e-3)


def test_sphere_against_wall_stops_at_wall():
    deck = make_deck(
        time={"dt": 0.2, "steps": 30},
        walls=[{"point": [0, 0, 0], "normal": [0, 0, 1]}],
        bodies=[{"shape": "sphere", "radius": 1.0, "position": [0, 0, 2.5], "force": [1.0, 0, -30.0]}],
        contact={"overlap_tol": 1e-3, "skin": 0.5}, solver={"tol": 1e-6})
    sim, diags = run_sim(deck, comm=SELF)
    z = sim.bodies.x[0, 2]
    assert 1.0 - 1e-3 <= z <= 1.0 + 1e-6
    assert all(d["depth"] == 0 for d in diags)
    # tangential motion is unaffected by the frictionless wall: x velocity = F_x / (6 pi mu R)
    assert sim.bodies.u[0, 0] == pytest.approx(1.0 / (6 * np.pi), rel=1e-9)


def _ellipsoid_deck(model, dt, T=6.0):
    """Two prolate ellipsoids pressed together (F_y) while driven past each other (F_x)."""
    return make_deck(
        time={"dt": dt, "steps": int(round(T / dt))},
        bodies=[{"shape": "ellipsoid", "axes": [2.0, 0.5, 0.5], "position": [-3.0, 0.6, 0.0],
                 "orientation": {"axis": [0, 0, 1], "angle": 0.15}, "force": [20.0, -10.0, 0]},
                {"shape": "ellipsoid", "axes": [2.0, 0.5, 0.5], "position": [3.0, -0.6, 0.0],
                 "orientation": {"axis": [0, 0, 1], "angle": -0.15}, "force": [-20.0, 10.0, 0]}],
        contact={"overlap_tol": 1e-3, "skin": 2.0, "model": model, "max_depth": 100},
        solver={"tol": 1e-5})


@pytest.mark.parametrize("dt", [0.1, 0.2])
def test_two_ellipsoids_recursion_keeps_overlap_below_tolerance(dt):
    """Paper's first test at large dt: one SNSD row per pair overlaps beyond tol, ReLCP does not."""
    tol = 1e-3
    snsd, d_snsd = run_sim(_ellipsoid_deck("snsd", dt), comm=SELF)
    relcp, d_relcp = run_sim(_ellipsoid_deck("relcp", dt), comm=SELF)
    assert max(d["max_overlap"] for d in d_snsd) > tol
    assert max(d["max_overlap"] for d in d_relcp) <= tol
    assert max(d["depth"] for d in d_relcp) >= 1          # the recursion was needed ...
    assert max(d["constraints"] for d in d_relcp) >= 2    # ... and appended rows
    # the bodies did slide past each other (contact persisted and then released)
    assert relcp.bodies.x[0, 0] > 2.0 and relcp.bodies.x[1, 0] < -2.0
    # equal and opposite external forces, frictionless contact: the centre of drag stays put
    assert np.allclose(relcp.bodies.x.sum(axis=0), [0.0, 0.0, 0.0], atol=0.2)


def test_two_ellipsoids_small_dt_needs_no_recursion():
    """As dt -> 0 the recursion terminates after the initial solve (paper's small-timestep limit)."""
    _, d = run_sim(_ellipsoid_deck("relcp", 0.02), comm=SELF)
    assert max(x["depth"] for x in d) == 0
    assert max(x["max_overlap"] for x in d) <= 1e-3


@pytest.mark.mpi(min_size=2)
def test_rank_count_independence_spheres():
    """The same compaction on COMM_SELF and on all ranks gives the same positions."""
    deck = make_deck(
        time={"dt": 0.05, "steps": 8}, seed=3,
        box={"lo": [0, 0, 0], "hi": [6, 6, 6], "periodic": [True, True, False]},
        walls=[{"point": [0, 0, 0], "normal": [0, 0, 1]}], forces={"body_force": [0.3, 0.0, -5.0]},
        generate=[{"shape": "sphere", "radius": 0.4, "count": 64, "method": "random",
                   "region": {"lo": [0, 0, 0.05], "hi": [6, 6, 4]}}],
        contact={"overlap_tol": 1e-3, "skin": 0.2}, solver={"tol": 1e-7})
    ref, dref = run_sim(deck, comm=SELF)
    par, dpar = run_sim(deck, comm=MPI.COMM_WORLD)
    g1, x1 = ref.gather()
    g2, x2 = par.gather()
    assert np.array_equal(g1, g2)
    assert np.allclose(x1, x2, atol=1e-5)
    assert [d["constraints"] for d in dref] == [d["constraints"] for d in dpar]


def test_multisphere_model_equals_relcp_for_spheres():
    """For spheres the multi-sphere proxy is the body itself: same rows, same trajectory."""
    a, da = run_sim(two_spheres(model="relcp", steps=20), comm=SELF)
    b, db = run_sim(two_spheres(model="multisphere", steps=20), comm=SELF)
    assert [d["constraints"] for d in da] == [d["constraints"] for d in db]
    assert np.allclose(a.bodies.x, b.bodies.x, atol=1e-10)


def test_multisphere_baseline_runs_on_ellipsoids_with_more_rows():
    """The LCP-MS baseline needs many more constraint rows than ReLCP for the same collision."""
    d = _ellipsoid_deck("multisphere", 0.1)
    d["contact"]["ms_resolution"] = 12
    ms, dms = run_sim(d, comm=SELF)
    _, drl = run_sim(_ellipsoid_deck("relcp", 0.1), comm=SELF)
    assert max(x["constraints"] for x in dms) > 10 * max(x["constraints"] for x in drl)


def test_failed_step_is_redone_with_halved_dt():
    """time.max_halvings: a step that reaches the recursion limit is undone and redone as sub-steps of dt/2^k
    (same final time, overlap still below tolerance); without it the same deck stops with the error."""
    from relcp_mpi.stepper.relcp import RecursionDepthError
    dt, T = 0.2, 6.0
    deck = _ellipsoid_deck("relcp", dt, T)
    deck["contact"]["max_depth"] = 1                  # any step needing an appended row fails
    with pytest.raises(RecursionDepthError):
        run_sim(deck, comm=SELF)
    deck["time"]["max_halvings"] = 3
    sim, diags = run_sim(deck, comm=SELF)
    assert sim.step == int(round(T / dt)) and sim.time == pytest.approx(T)
    sub = [d.get("substeps", 1) for d in diags]
    assert max(sub) >= 2 and min(sub) == 1               # some steps were subdivided, not all
    assert max(d["max_overlap"] for d in diags) <= 1e-3
    assert max(d["depth"] for d in diags) == 0           # every accepted (sub-)step needed no appended row
    # the subdivided run follows the reference run at the finest dt closely
    ref = _ellipsoid_deck("relcp", dt / 8, T)
    rsim, _ = run_sim(ref, comm=SELF)
    assert np.allclose(np.sort(sim.bodies.x[:, 0]), np.sort(rsim.bodies.x[:, 0]), atol=0.25)
