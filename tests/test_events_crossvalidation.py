"""Cross-validation: the ReLCP time stepper against the exact first-impact step of the event engine.

Overdamped dynamics of two spheres under constant forces is the event engine's free flight with the drag
coefficients ``zeta_i = 6 pi mu R_i`` in the role of the masses:

* before contact every sphere moves with ``v_i = F_i / zeta_i`` (gap rate constant, ``a = 0``);
* at contact the frictionless contact force makes the normal relative velocity zero, and since the pair's
  drag-weighted centroid is driven by ``F_1 + F_2`` alone the common velocity afterwards is
  ``(zeta_1 v_1 + zeta_2 v_2) / (zeta_1 + zeta_2)`` -- exactly the perfectly inelastic (e = 0) binary impulse
  law with masses ``zeta_i``; the persistent contact force equals the seed's impulse ``J = -m (1 + e) v-``
  with the effective mass ``m = zeta_1 zeta_2 / (zeta_1 + zeta_2)`` (an impulse per unit time here).

So the exact trajectory is: free flight to the first impact time of :func:`first_impact`, then the post-impact
velocities of :func:`binary_impulse` with e = 0.  The stepper must reproduce it at the step ends to solver
tolerance, detect the impact in the step that contains it, and its piecewise-linear trajectory must converge
to the exact one at first order in dt (the kink at the impact is cut within one step).
"""
from fractions import Fraction

import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.events import binary_impulse, first_impact
from relcp_mpi.physics.mobility import body_frame_drag
from tests.helpers import make_deck, run_sim

R1, R2 = 1.0, 0.5
MU = 1.0
N = np.array([1.0, 2.0, 2.0]) / 3.0          # line of centres (from sphere 1 to sphere 2)
W = np.array([2.0, -1.0, 0.0]) / np.sqrt(5.0)  # a direction tangential to N (common drift of both spheres)
G0 = 1.0                                      # initial surface gap
T_END = 3.0


def _setup():
    zeta = body_frame_drag(np.array([0, 0]), np.array([[R1, 0, 0], [R2, 0, 0]]), MU)[0][:, 0]
    x1 = np.zeros(3)
    x2 = (R1 + R2 + G0) * N
    v1 = 0.3 * N + 0.2 * W
    v2 = -0.5 * N + 0.2 * W
    return zeta, x1, x2, v1, v2


def _exact():
    """Exact reference: first impact (time, contact force) and post-impact velocities, from relcp_mpi.events."""
    zeta, x1, x2, v1, v2 = _setup()
    m_eff = zeta[0] * zeta[1] / (zeta[0] + zeta[1])
    v_rel = float(np.dot(v2 - v1, N))                   # gap rate (< 0: approaching)
    fi = first_impact(Fraction(G0), Fraction(v_rel), 0, Fraction(T_END), Fraction(m_eff), 0, 4)
    assert fi.kind == "impact"
    ts = float(fi.time)
    c1, c2 = x1 + ts * v1, x2 + ts * v2                  # centres at the impact (touching)
    bi = binary_impulse(c1, c2, v1, v2, zeta[0], zeta[1], R1, R2, 0.0)
    return dict(t=ts, J=float(fi.impulse), c1=c1, c2=c2, v1=v1, v2=v2,
                w1=np.asarray(bi.v1_plus, float), w2=np.asarray(bi.v2_plus, float), zeta=zeta, x1=x1, x2=x2)


def _exact_positions(ex, t):
    """(len(t), 2, 3) exact centres at times t."""
    t = np.asarray(t, float)[:, None]
    before = t <= ex["t"]
    p1 = np.where(before, ex["x1"] + t * ex["v1"], ex["c1"] + (t - ex["t"]) * ex["w1"])
    p2 = np.where(before, ex["x2"] + t * ex["v2"], ex["c2"] + (t - ex["t"]) * ex["w2"])
    return np.stack([p1, p2], axis=1)


def _run(dt):
    _, x1, x2, v1, v2 = _setup()
    zeta = _setup()[0]
    steps = int(round(T_END / dt))
    deck = make_deck(
        time={"dt": dt, "steps": steps}, fluid={"viscosity": MU},
        bodies=[{"shape": "sphere", "radius": R1, "position": x1.tolist(), "force": (zeta[0] * v1).tolist()},
                {"shape": "sphere", "radius": R2, "position": x2.tolist(), "force": (zeta[1] * v2).tolist()}],
        contact={"overlap_tol": 1e-8, "skin": 0.5}, solver={"tol": 1e-11})
    xs, fs = [np.stack([x1, x2])], [0.0]

    def rec(sim):
        order = np.argsort(sim.bodies.gid)
        xs.append(sim.bodies.x[order].copy())
        fs.append(float(np.linalg.norm(sim.contact_force[order][0, :3])))

    run_sim(deck, comm=MPI.COMM_SELF, record=rec)
    return np.arange(steps + 1) * dt, np.array(xs), np.array(fs)


def test_exact_reference_is_consistent():
    ex = _exact()
    # contact at the impact, zero normal relative velocity after it (e = 0), momentum (drag-weighted) kept,
    # tangential drift untouched
    assert np.linalg.norm(ex["c2"] - ex["c1"]) == pytest.approx(R1 + R2, abs=1e-12)
    assert np.dot(ex["w2"] - ex["w1"], N) == pytest.approx(0.0, abs=1e-12)
    z = ex["zeta"]
    assert np.allclose(z[0] * ex["w1"] + z[1] * ex["w2"], z[0] * ex["v1"] + z[1] * ex["v2"], atol=1e-12)
    assert np.dot(ex["w1"], W) == pytest.approx(0.2, abs=1e-12)
    assert ex["t"] == pytest.approx(G0 / 0.8, rel=1e-14)


@pytest.mark.parametrize("dt", [0.3, 0.07])
def test_stepper_matches_first_impact_at_step_ends(dt):
    ex = _exact()
    t, xs, fs = _run(dt)
    ref = _exact_positions(ex, t)
    # step ends: exact to solver tolerance (the sphere-sphere row is exact along the line of centres)
    assert np.abs(xs - ref).max() < 1e-7
    # the impact is detected in the step that contains it
    n_hit = int(np.argmax(fs > 1e-9))
    assert fs[n_hit] > 0 and t[n_hit - 1] < ex["t"] <= t[n_hit] + 1e-12
    # after the impact step the contact force is the seed's impulse J = m_eff |v-| (per unit time here)
    assert np.allclose(fs[n_hit + 1:], ex["J"], rtol=1e-7)
    # post-impact velocities from the stepper's positions = inelastic binary impulse law
    u = (xs[-1] - xs[-2]) / dt
    assert np.allclose(u[0], ex["w1"], atol=1e-7) and np.allclose(u[1], ex["w2"], atol=1e-7)


def test_trajectory_error_converges_at_first_order():
    ex = _exact()
    # impact at the middle of a step for every dt (the chord error depends on where in the step it falls)
    dts = [ex["t"] / (n + 0.5) for n in (3, 7, 15, 31)]
    errs = []
    for dt in dts:
        t, xs, _ = _run(dt)
        tf = np.linspace(0.0, t[-1], 6001)
        interp = np.stack([np.stack([np.interp(tf, t, xs[:, b, k]) for k in range(3)], axis=1)
                           for b in range(2)], axis=1)
        err = np.abs(interp - _exact_positions(ex, tf)).max()
        # the chord cuts the kink: error <= |v - w| dt / 4 for each sphere
        bound = max(np.abs(ex["v1"] - ex["w1"]).max(), np.abs(ex["v2"] - ex["w2"]).max()) * dt / 4
        assert 0.0 < err <= bound * (1 + 1e-6) + 1e-9
        errs.append(err)
    slope = np.polyfit(np.log(dts), np.log(errs), 1)[0]
    assert 0.8 <= slope <= 1.2, (errs, slope)
