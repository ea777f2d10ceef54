"""Imposed shear flow (deck section ``flow``) and Lees--Edwards boundaries (issue 13, item 3).

* the flow's body velocities against Jeffery's equations written independently (dp/dt = W p + B (E p -
  (p.E.p) p), B = (r^2 - 1)/(r^2 + 1)), and the Jeffery orbit period 2 pi / gdot (r + 1/r) of an ellipsoid
  run through the whole stepper;
* a tracer with no contacts follows the flow, also when it crosses the sheared boundary (positions against
  the discrete unfolded trajectory folded by hand);
* Lees--Edwards wrap and minimum image by hand; two spheres meeting across the sheared boundary are detected
  and kept apart (distance of the sheared minimum image, computed independently);
* deck validation; a restart continues bitwise with the image offset.
"""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.basics import quaternion as quat
from relcp_mpi.config.deck import DeckError
from relcp_mpi.parallel.box import Box, LeesEdwards
from relcp_mpi.physics.flow import ImposedFlow, bretherton, jeffery_period
from tests.helpers import make_deck, random_sphere_bodies, run_sim

BOX = {"lo": [-5, -5, -5], "hi": [5, 5, 5], "periodic": [True, True, True]}


def _le_box(rate=1.0):
    return Box([-5, -5, -5], [5, 5, 5], True, shear=LeesEdwards(flow_axis=0, gradient_axis=1, rate=rate))


# ---------------------------------------------------------------------------------------------------------
def test_body_velocity_matches_jeffery_equation():
    """Translation = u_inf(centre); rotation of spheroids, spherocylinders (equivalent ellipsoid r = (L+2R)/2R)
    and spheres against dp/dt = W p + B (E p - (p.E.p) p) and the spin omega_inf . p."""
    rng = np.random.default_rng(3)
    gdot = 0.7
    flow = ImposedFlow.shear(gdot, "x", "y", centre=[0.0, 0.5, 0.0])
    G = np.zeros((3, 3))
    G[0, 1] = gdot
    E, W = 0.5 * (G + G.T), 0.5 * (G - G.T)
    n = 12
    q = quat.normalize(rng.normal(size=(n, 4)))
    x = rng.uniform(-3, 3, size=(n, 3))
    kinds = np.array([2, 2, 1, 1, 0, 2] * 2)
    shape = np.array([[0.5, 0.5, 1.5], [1.2, 1.2, 0.4], [0.3, 2.0, 0.0], [0.5, 0.2, 0.0], [0.7, 0, 0],
                      [1.0, 1.0, 1.0]] * 2)
    aspect = np.array([3.0, 0.4 / 1.2, 2.6 / 0.6, 1.2 / 1.0, 1.0, 1.0] * 2)
    U = flow.body_velocity(kinds, shape, x, q)
    assert np.allclose(U[:, 0], gdot * (x[:, 1] - 0.5)) and np.all(U[:, 1:3] == 0)
    p = quat.rotate(q, np.tile([0.0, 0.0, 1.0], (n, 1)))
    B = bretherton(aspect)
    Ep = p @ E.T
    pdot_ref = p @ W.T + B[:, None] * (Ep - np.einsum("ni,ni->n", p, Ep)[:, None] * p)
    pdot = np.cross(U[:, 3:], p)
    assert np.allclose(pdot, pdot_ref, atol=1e-14)
    assert np.allclose(np.einsum("ni,ni->n", U[:, 3:], p), -0.5 * gdot * p[:, 2], atol=1e-14)
    sph = kinds == 0
    assert np.allclose(U[sph, 3:], [0.0, 0.0, -0.5 * gdot])
    assert np.all(flow.body_velocity(kinds, shape, x, q, fixed=np.ones(n, bool)) == 0)


def test_triaxial_ellipsoid_body_frame_rates():
    """An ellipsoid (a, b, c) aligned with the lab axes in a pure strain E_xy: Omega_z = (a^2 - b^2)/(a^2 + b^2)
    E_xy + omega_z (Jeffery's triaxial result, here checked for the body x-y pair)."""
    a, b, c = 2.0, 0.5, 1.0
    flow = ImposedFlow.shear(1.0, "x", "y", centre=[0, 0, 0])
    U = flow.body_velocity([2], [[a, b, c]], [[0, 0, 0]], [[1.0, 0, 0, 0]])
    assert U[0, 5] == pytest.approx(-0.5 + (a * a - b * b) / (a * a + b * b) * 0.5, abs=1e-15)
    assert np.allclose(U[0, 3:5], 0.0)


@pytest.mark.parametrize("shape, aspect", [({"shape": "ellipsoid", "axes": [0.5, 0.5, 1.5]}, 3.0),
                                           ({"shape": "spherocylinder", "radius": 0.4, "length": 1.2}, 2.5)])
def test_jeffery_orbit_period(shape, aspect):
    """A body of revolution with its axis in the flow-gradient plane, alone in shear, turns on a Jeffery orbit:
    the time for its axis to turn by 2 pi equals 2 pi / gdot (r + 1/r) (explicit steps of dt = T/200: the
    measured error is ~2e-4 T; the sphere-like spin would give 4 pi / gdot, 40 % off)."""
    gdot = 1.0
    T = jeffery_period(aspect, gdot)
    dt = T / 200.0
    n = 220
    body = dict(shape, position=[0.0, 1.0, 0.0], orientation={"axis": [1, 0, 0], "angle": -np.pi / 2})
    deck = make_deck(time={"dt": dt, "steps": n}, box=BOX, bodies=[body], flow={"type": "shear", "rate": gdot})
    axes = []
    sim, _ = run_sim(deck, comm=MPI.COMM_SELF, record=lambda s: axes.append(quat.rotate(s.bodies.q, [[0, 0, 1.0]])[0]))
    p = np.array(axes)
    assert np.abs(p[:, 2]).max() < 1e-12                     # stays in the flow-gradient plane
    phi = np.unwrap(np.concatenate([[np.pi / 2], np.arctan2(p[:, 1], p[:, 0])]))
    t = dt * np.arange(n + 1)
    target = np.pi / 2 - 2 * np.pi                           # clockwise for gdot > 0
    k = np.flatnonzero(phi <= target)[0]
    tc = t[k - 1] + (target - phi[k - 1]) / (phi[k] - phi[k - 1]) * dt
    assert tc == pytest.approx(T, rel=1e-3)
    # slowest rotation when aligned with the flow: |dphi/dt| = gdot / (r^2 + 1) r^2 ... at phi = 0: gdot/(r^2+1)
    rate = -np.diff(phi) / dt
    assert rate.min() == pytest.approx(gdot / (aspect ** 2 + 1), rel=0.05)
    assert rate.max() == pytest.approx(gdot * aspect ** 2 / (aspect ** 2 + 1), rel=0.05)


def test_tracer_follows_flow_across_the_sheared_boundary():
    """A sphere with an imposed velocity along the gradient axis crosses y = 5 three times; without contacts its
    positions are the explicit steps of dx/dt = gdot (y - 0) + v_x, dy/dt = v_y in the unfolded frame, folded
    by hand with the image offset gdot L_y t; its velocity jumps by -gdot L_y at each crossing."""
    gdot, vx, vy, dt, n = 0.8, 0.3, 2.5, 0.05, 250
    deck = make_deck(time={"dt": dt, "steps": n}, box=BOX, flow={"type": "shear", "rate": gdot},
                     bodies=[{"shape": "sphere", "radius": 0.5, "position": [1.0, 3.0, 2.0],
                              "velocity": [vx, vy, 0.0]},
                             {"shape": "ellipsoid", "axes": [0.3, 0.4, 0.9], "position": [-2.0, -1.0, -3.0]}])
    xs, us, offs = [], [], []
    run_sim(deck, comm=MPI.COMM_SELF, record=lambda s: (xs.append(s.bodies.x.copy()), us.append(s.bodies.u.copy()),
                                                        offs.append(s.state.shear_offset)))
    X, Uu = np.array(xs), np.array(us)
    # unfolded explicit trajectory, then folded by hand
    xu, yu = 1.0, 3.0
    expect, crossings = [], 0
    for k in range(1, n + 1):
        xu, yu = xu + dt * (gdot * yu + vx), yu + dt * vy
        ncell = np.floor((yu + 5.0) / 10.0)
        off = np.mod(gdot * 10.0 * k * dt, 10.0)
        assert offs[k - 1] == pytest.approx(off, abs=1e-9) or abs(abs(offs[k - 1] - off) - 10.0) < 1e-9
        xf = np.mod(xu - ncell * off + 5.0, 10.0) - 5.0
        expect.append([xf, yu - 10.0 * ncell, 2.0])
        crossings = int(ncell)
    assert crossings == 3
    d = X[:, 0] - np.array(expect)
    d[:, 0] -= 10.0 * np.rint(d[:, 0] / 10.0)
    assert np.abs(d).max() < 1e-9
    # the step's velocity (flow at the start-of-step position), shifted by -gdot L_y with the body on crossing:
    # the local flow at the folded start position y - dt v_y
    assert np.allclose(Uu[:, 0, 0], gdot * (X[:, 0, 1] - dt * vy) + vx, atol=1e-12)
    assert np.allclose(Uu[:, 0, 5], -0.5 * gdot) and np.allclose(Uu[:, 0, 3:5], 0.0)
    # the ellipsoid stays at its y and moves with the flow there
    assert np.allclose(X[:, 1, 1], -1.0) and np.allclose(Uu[:, 1, 0], -gdot)


def test_lees_edwards_box_by_hand():
    box = _le_box()
    x, u = box.wrap_with_velocity([[4.0, 5.5, 0.0], [1.0, -6.0, 0.0], [2.0, 1.0, 7.0]],
                                  [[1.0, 2, 3], [0.0, 0, 0], [0.0, 0, 0]], offset=3.0)
    assert np.allclose(x, [[1.0, -4.5, 0.0], [4.0, 4.0, 0.0], [2.0, 1.0, -3.0]], rtol=0, atol=1e-15)
    assert np.allclose(u[:, 0], [1.0 - 10.0, 10.0, 0.0]) and np.allclose(u[:, 1:], [[2, 3], [0, 0], [0, 0]])
    # the image of a body one cell up is displaced by +offset: minimum image of (x_i - x_j) removes it
    dx = box.minimum_image([[3.0 + 0.2, 9.5, 0.0]], offset=3.0)
    assert np.allclose(dx, [[0.2, -0.5, 0.0]])
    assert Box([0] * 3, [1] * 3, True) != Box([0] * 3, [1] * 3, True, shear=LeesEdwards(0, 1, 1.0))
    with pytest.raises(ValueError, match="Lees-Edwards"):
        Box([0] * 3, [1] * 3, [True, False, True], shear=LeesEdwards(0, 1, 1.0))


def _pair_across_boundary(steps=120, **extra):
    """Sphere A just below y = 5, sphere B just above y = -5, behind A along x: B's sheared image one cell up
    (y = 5.6) overtakes A (y = 4.6) and the pair collides across the boundary (centre distance along y 0.8 <
    2R = 1)."""
    bodies = [{"shape": "sphere", "radius": 0.5, "position": [0.0, 4.6, 0.0]},
              {"shape": "sphere", "radius": 0.5, "position": [-1.5, -4.6, 0.0]}]
    return make_deck(time={"dt": 0.02, "steps": steps}, box=BOX, bodies=bodies, flow={"type": "shear", "rate": 1.0},
                     contact={"overlap_tol": 1e-3, "skin": 0.2}, solver={"tol": 1e-6}, **extra)


def pair_distance_history(comm):
    """Run the pair deck; per step (distance of the sheared minimum image, diagnostics, positions)."""
    deck = _pair_across_boundary()
    box = _le_box()
    rec = []

    def record(s):
        _, x = s.gather("x")
        dx = box.minimum_image(x[0] - x[1], offset=s.state.shear_offset)
        rec.append((float(np.linalg.norm(dx)), dx.copy(), dict(s.diag), x))
    run_sim(deck, comm=comm, record=record)
    return rec


def check_pair_history(rec):
    dist = np.array([r[0] for r in rec])
    active = np.array([r[2]["active"] for r in rec])
    assert active.max() >= 1 and active.sum() >= 10              # the pair across the boundary is in contact
    assert dist.min() >= 1.0 - 1e-3                              # nonpenetration <= overlap_tol
    assert max(r[2]["max_overlap"] for r in rec) <= 1e-3
    # spheres need no recursion when the level-0 row's predicted gap includes the image's velocity jump
    # gdot L_y (without it this pair needs depth 1)
    assert max(r[2]["depth"] for r in rec) == 0
    # the collision pushed the pair apart along the gradient axis (without it the y distance stays 0.8)
    assert abs(rec[-1][1][1]) > 0.95
    # contact stress of a collision in the compressional quadrant: positive shear stress (adds viscosity)
    assert max(r[2]["contact_viscosity"] for r in rec) > 0
    assert min(r[2]["stress_xy"] for r in rec) >= -1e-12


def test_contact_across_sheared_boundary():
    check_pair_history(pair_distance_history(MPI.COMM_SELF))


def test_restart_continues_bitwise_with_offset(tmp_path):
    from relcp_mpi import Simulation
    deck = _pair_across_boundary(steps=80, output={"directory": str(tmp_path), "trajectory_every": 0,
                                                   "progress_every": 0})
    ref = Simulation.from_deck(deck, comm=MPI.COMM_SELF)
    ref.run(80, writers=[])
    part = Simulation.from_deck(deck, comm=MPI.COMM_SELF)
    part.run(45, writers=[])
    path = part.write_checkpoint()
    more = Simulation.from_checkpoint(path, deck, comm=MPI.COMM_SELF)
    assert more.state.shear_offset == part.state.shear_offset != 0.0
    more.run(35, writers=[])
    assert more.step == 80 and more.state.shear_offset == ref.state.shear_offset
    for f in ("x", "q", "u"):
        assert np.array_equal(more.gather(f)[1], ref.gather(f)[1])


@pytest.mark.parametrize("flow, box, walls, msg", [
    ({"type": "shear", "rate": 1.0, "flow_axis": "y"}, BOX, [], "must differ"),
    ({"type": "shear", "rate": 1.0}, dict(BOX, periodic=[True, False, True]), [], "periodic box along its y"),
    ({"type": "shear", "rate": 1.0}, BOX, [{"point": [0, 0, 0], "normal": [0, 1, 0]}], "normal to the third"),
    ({"type": "couette"}, BOX, [], "flow.type"),
    ({"type": "shear", "rate": "fast"}, BOX, [], "flow.rate"),
])
def test_deck_validation(flow, box, walls, msg):
    with pytest.raises(DeckError, match=msg):
        make_deck(box=box, walls=walls, flow=flow, bodies=[{"shape": "sphere", "radius": 0.5, "position": [0, 0, 0]}])


def test_deck_without_flow_is_unchanged():
    d = make_deck(bodies=[{"shape": "sphere", "radius": 0.5, "position": [0, 0, 0]}])
    assert d["flow"]["type"] == "none"
    from relcp_mpi.config.sections import typed
    from relcp_mpi.state import box_of
    assert box_of(typed(d)).shear is None
    sh = make_deck(box=BOX, flow={"type": "shear", "rate": 2.0, "flow_axis": "z", "gradient_axis": "x"},
                   walls=[{"point": [0, -5, 0], "normal": [0, 1, 0]}],
                   bodies=[{"shape": "sphere", "radius": 0.5, "position": [0, 0, 0]}])
    assert box_of(typed(sh)).shear == LeesEdwards(flow_axis=2, gradient_axis=0, rate=2.0)


def _sheared_spheres(phi, count=120, steps=240, seed=13):
    """Spheres at volume fraction ``phi`` in a periodic cube at random positions, simple shear gdot = 1."""
    L = float((count * 4.0 / 3.0 * np.pi * 0.5 ** 3 / phi) ** (1.0 / 3.0))
    return make_deck(time={"dt": 0.02, "steps": steps}, bodies=random_sphere_bodies(count, L, 0.5, seed),
                     box={"lo": [0.0] * 3, "hi": [L] * 3, "periodic": [True] * 3}, flow={"type": "shear", "rate": 1.0},
                     contact={"overlap_tol": 1e-3, "skin": 0.2}, solver={"tol": 1e-4})


@pytest.mark.slow
def test_contact_viscosity_grows_with_volume_fraction():
    """Dilute sheared sphere suspensions (Lees--Edwards, no walls) at volume fractions 0.05, 0.1, 0.2: the
    time-averaged contact stress sigma_xy / gdot over the second half of the run is positive and grows with
    the volume fraction (pair collisions: ~ phi^2), each step by more than 3 standard errors (block averages);
    the overlap stays below overlap_tol throughout."""
    means, errs = [], []
    for phi in (0.05, 0.1, 0.2):
        _, d = run_sim(_sheared_spheres(phi), comm=MPI.COMM_SELF)
        assert max(e["max_overlap"] for e in d) <= 1e-3
        eta = np.array([e["contact_viscosity"] for e in d[len(d) // 2:]])
        blocks = np.array([b.mean() for b in np.array_split(eta, 6)])
        means.append(eta.mean())
        errs.append(blocks.std(ddof=1) / np.sqrt(len(blocks)))
    assert means[0] > 0
    for k in range(2):
        assert means[k + 1] - means[k] > 3 * np.hypot(errs[k], errs[k + 1]), (means, errs)
