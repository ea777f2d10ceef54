"""Brownian motion (issue 13 item 1), fast tests: the thermal noise per body has mean 0 and covariance
2 kT h M for every shape, M^{1/2} is the symmetric square root of the mobility block, the numbers depend only on
(seed, step, gid) (not on how bodies are split over ranks), halved sub-steps refine the same Brownian path,
the deck key is validated, and a run adds exactly h U_B to a free body's position.

Statistical checks use the sampling error of the estimate (5 standard errors: a wrong factor, a missing square
root or a non-symmetric root fails by far more)."""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.basics import quaternion as quat
from relcp_mpi.bodies.shapes import ELLIPSOID, RING, SPHERE, SPHEROCYLINDER
from relcp_mpi.config.deck import DeckError
from relcp_mpi.physics.brownian import brownian_velocity, standard_noise
from relcp_mpi.physics.mobility import mobility_blocks, sqrt_apply
from tests.helpers import make_deck, run_sim

SHAPES = [(SPHERE, [0.6, 0.0, 0.0]), (SPHEROCYLINDER, [0.3, 1.7, 0.0]), (ELLIPSOID, [1.5, 0.7, 0.4]),
          (RING, [1.0, 0.2, 0.0])]


def _one_shape(kind, shape, q, n):
    return np.full(n, kind), np.tile(shape, (n, 1)), np.tile(q, (n, 1))


@pytest.mark.parametrize("kind,shape", SHAPES)
def test_sqrt_is_the_symmetric_root_of_the_mobility_block(kind, shape, rng):
    q = quat.random_unit(rng, 4)
    K, S, _ = _one_shape(kind, shape, q[0], 4)
    M = mobility_blocks(K, S, q, 0.7)
    cols = np.stack([sqrt_apply(K, S, q, 0.7, np.tile(e, (4, 1))) for e in np.eye(6)], axis=2)   # (4, 6, 6)
    assert np.allclose(cols, cols.transpose(0, 2, 1), atol=1e-14)
    assert np.allclose(cols @ cols, M, rtol=1e-12, atol=1e-14)
    assert np.all(np.linalg.eigvalsh(cols) > 0)
    fixed = np.array([True, False, False, True])
    out = sqrt_apply(K, S, q, 0.7, np.ones((4, 6)), fixed=fixed)
    assert np.all(out[fixed] == 0) and np.all(out[~fixed] != 0)


@pytest.mark.parametrize("kind,shape", SHAPES)
def test_displacement_mean_zero_and_covariance_2kT_h_M(kind, shape, rng):
    """One body shape and orientation, n independent bodies (gids): sample mean and covariance of the free
    displacement h U_B against 0 and 2 kT h M, entry by entry within 5 standard errors."""
    n, kT, h, mu = 40000, 1.3, 0.02, 0.9
    q = quat.random_unit(rng, 1)[0]
    K, S, Q = _one_shape(kind, shape, q, n)
    d = h * brownian_velocity(K, S, Q, mu, kT, h, seed=5, step=17, gid=np.arange(n) + 1000)
    exact = 2 * kT * h * mobility_blocks(K[:1], S[:1], Q[:1], mu)[0]
    mean = d.mean(axis=0)
    C = np.cov(d, rowvar=False)
    var = np.diag(exact)
    assert np.all(np.abs(mean) <= 5 * np.sqrt(var / n)), mean / np.sqrt(var / n)
    se = np.sqrt((np.outer(var, var) + exact ** 2) / n)        # sampling error of a Gaussian covariance entry
    assert np.all(np.abs(C - exact) <= 5 * se), (C - exact) / se
    # the estimate resolves the mobility's anisotropy: a wrong (isotropic) noise would fail
    assert np.all(np.abs(np.diag(C) / var - 1) < 0.05)


def test_noise_independent_of_partition_and_order():
    """The numbers of a body depend on (seed, step, gid) only: any split of the bodies over ranks, in any
    order, gives each body the same noise (this is what makes runs independent of the rank count)."""
    gid = np.arange(0, 3000, 3) * 7919
    full = standard_noise(11, 4, gid, level=2, index=3)
    perm = np.random.default_rng(1).permutation(len(gid))
    parts = np.array_split(perm, 3)
    for p in parts:
        assert np.array_equal(standard_noise(11, 4, gid[p], level=2, index=3), full[p])
    assert not np.array_equal(standard_noise(11, 5, gid, level=2, index=3), full)     # step is in the key
    assert not np.array_equal(standard_noise(12, 4, gid, level=2, index=3), full)     # seed is in the key
    assert standard_noise(11, 4, np.zeros(0, np.int64)).shape == (0, 6)


def test_halved_substeps_refine_the_same_brownian_path():
    """Bisection (Brownian bridge): the two halves of a sub-step add up to its increment exactly, and the
    halves are independent standard normals (so each has covariance 2 kT (h/2) M)."""
    gid = np.arange(20000)
    z0 = standard_noise(3, 9, gid)
    for level in (1, 2, 4):
        zs = [standard_noise(3, 9, gid, level=level, index=i) for i in range(2 ** level)]
        # increments sqrt(h / 2**level) z_i add up to sqrt(h) z0
        assert np.allclose(sum(zs) / np.sqrt(2 ** level), z0, atol=1e-12)
    a, b = standard_noise(3, 9, gid, 1, 0), standard_noise(3, 9, gid, 1, 1)
    n = len(gid)
    C = np.cov(np.hstack([a, b]), rowvar=False)
    assert np.all(np.abs(C - np.eye(12)) < 5 * np.sqrt(2.0 / n))
    with pytest.raises(ValueError):
        standard_noise(3, 9, gid, level=1, index=2)


def _free_deck(kT=1.0, dt=0.01, steps=1, bodies=None, time=None, **more):
    bodies = bodies or [
        {"shape": "ellipsoid", "axes": [0.9, 0.5, 0.3], "position": [2.0, 2.0, 2.0],
         "orientation": {"axis": [1, 2, 3], "angle": 0.8}},
        {"shape": "sphere", "radius": 0.5, "position": [7.0, 7.0, 7.0]},
        {"shape": "spherocylinder", "radius": 0.2, "length": 1.0, "position": [2.0, 7.0, 5.0]}]
    return make_deck(time=time or {"dt": dt, "steps": steps}, seed=21, fluid={"viscosity": 0.8, "kT": kT},
                     box={"lo": [0, 0, 0], "hi": [10, 10, 10], "periodic": [True, True, True]}, bodies=bodies,
                     contact={"skin": 0.2}, **more)


def test_run_adds_the_thermal_displacement_to_free_bodies():
    """One step of free bodies moves each by exactly dt U_B (translation) and rotates it by dt omega_B."""
    deck = _free_deck()
    sim0, _ = run_sim(deck, comm=MPI.COMM_SELF, steps=0)
    g, x0 = sim0.gather("x")
    _, q0 = sim0.gather("q")
    kind, shape = sim0.gather("kind")[1], sim0.gather("shape")[1]
    sim, d = run_sim(deck, comm=MPI.COMM_SELF, steps=1)
    _, x1 = sim.gather("x")
    _, q1 = sim.gather("q")
    U = brownian_velocity(kind, shape, q0, 0.8, 1.0, 0.01, 21, 0, g)
    assert d[0]["constraints"] == 0
    assert np.allclose(x1, x0 + 0.01 * U[:, :3], rtol=0, atol=1e-13)
    assert np.allclose(q1, quat.integrate(q0, U[:, 3:], 0.01), atol=1e-13)
    assert np.all(np.abs(x1 - x0) > 1e-4)                  # the noise is not negligible here
    # kT = 0 (the default): no motion at all
    sim_cold, _ = run_sim(_free_deck(kT=0.0), comm=MPI.COMM_SELF, steps=1)
    assert np.array_equal(sim_cold.gather("x")[1], x0)


def test_halved_step_continues_the_same_brownian_path(monkeypatch):
    """A step redone as two half steps (time.max_halvings) moves a free sphere (constant mobility) exactly as
    far as the undivided step: the policy passes the sub-step keys and the noise is bisected."""
    from relcp_mpi.driver import engine as eng
    from relcp_mpi.stepper.relcp import RecursionDepthError
    sphere = [{"shape": "sphere", "radius": 0.5, "position": [5.0, 5.0, 5.0]}]
    deck = _free_deck(steps=3, bodies=sphere)
    ref, _ = run_sim(deck, comm=MPI.COMM_SELF)
    real = eng.relcp_step
    calls = []

    def failing_first(inp, prm, *a, **k):
        calls.append(prm.dt)
        if len(calls) == 2:                 # fail the second step once: it is redone as two of dt/2
            raise RecursionDepthError("injected")
        return real(inp, prm, *a, **k)
    monkeypatch.setattr(eng, "relcp_step", failing_first)
    halved = _free_deck(bodies=sphere, time={"dt": 0.01, "steps": 3, "max_halvings": 1})
    sim, d = run_sim(halved, comm=MPI.COMM_SELF)
    assert calls == [0.01, 0.01, 0.005, 0.005, 0.01] and [e.get("substeps", 1) for e in d] == [1, 2, 1]
    assert np.allclose(sim.gather("x")[1], ref.gather("x")[1], rtol=0, atol=1e-13)


def test_contacts_resolved_under_noise():
    """Dense spheres with strong noise: the noise enters the LCP, so contacts stay within overlap_tol."""
    deck = make_deck(time={"dt": 0.002, "steps": 12}, seed=4, fluid={"viscosity": 1.0, "kT": 2.0},
                     box={"lo": [0, 0, 0], "hi": [4, 4, 4], "periodic": [True, True, True]},
                     generate=[{"shape": "sphere", "radius": 0.45, "count": 27, "method": "lattice",
                                "spacing": 0.92, "region": {"lo": [0.5, 0.5, 0.5], "hi": [3.5, 3.5, 3.5]}}],
                     contact={"overlap_tol": 1e-3, "skin": 0.1}, solver={"tol": 1e-5})
    sim, d = run_sim(deck, comm=MPI.COMM_SELF)
    assert max(e["active"] for e in d) >= 5
    assert max(e["max_overlap"] for e in d) <= 1e-3


@pytest.mark.parametrize("fluid,time,msg", [
    ({"kT": -1.0}, {"dt": 0.01, "steps": 2}, "fluid.kT: must be >= 0"),
    ({"kT": 1.0}, {"dt": 0.01, "steps": 2, "max_halvings": 14}, "time.max_halvings: at most 13"),
    ({"kT": 1.0, "viscosity": 0.01}, {"dt": 1.0, "steps": 2}, "too large for Brownian motion"),
])
def test_deck_checks_kT(fluid, time, msg):
    with pytest.raises(DeckError, match=msg):
        make_deck(fluid=fluid, time=time, bodies=[{"shape": "sphere", "radius": 0.5, "position": [0, 0, 0]}])
    if fluid["kT"] > 0:                     # the same deck is fine at a small enough dt / halving depth
        ok = make_deck(fluid=fluid, time={"dt": 1e-3, "steps": 2},
                       bodies=[{"shape": "sphere", "radius": 0.5, "position": [0, 0, 0]}])
        assert ok["fluid"]["kT"] == 1.0
    assert _free_deck(kT=0.0)["fluid"]["kT"] == 0.0
    assert make_deck(bodies=[{"shape": "sphere", "radius": 0.5, "position": [0, 0, 0]}])["fluid"]["kT"] == 0.0


def test_event_driven_deck_refuses_kT():
    from relcp_mpi.config.deck import loads
    with pytest.raises(DeckError, match="Brownian motion needs engine relcp"):
        loads("engine: event_driven\nevent_driven: {}\nfluid: {kT: 1.0}\n")


def test_pair_meeting_from_outside_the_skin_gets_a_row():
    """Two spheres farther apart than the skin at the start (no level-0 row anywhere) that overlap at the
    trial configuration -- what a large Brownian kick does -- get an appended row and end in contact (this
    used to fail with an IndexError in the sub-contact numbering of an empty table)."""
    deck = make_deck(time={"dt": 0.1, "steps": 1}, box={"lo": [-5, -5, -5], "hi": [5, 5, 5]},
                     bodies=[{"shape": "sphere", "radius": 0.5, "position": [-0.8, 0, 0], "force": [60.0, 0, 0]},
                             {"shape": "sphere", "radius": 0.5, "position": [0.8, 0, 0], "force": [-60.0, 0, 0]}],
                     contact={"skin": 0.1, "overlap_tol": 1e-3}, solver={"tol": 1e-8})
    sim, d = run_sim(deck, comm=MPI.COMM_SELF)
    _, x = sim.gather("x")
    assert d[0]["depth"] == 1 and d[0]["constraints"] == 1
    assert x[1, 0] - x[0, 0] == pytest.approx(1.0, abs=1e-6)       # touching, not overlapping


@pytest.mark.parametrize("ratio", [1.2, 2.5, 6.0])
def test_perrin_closed_forms_match_the_mobility(ratio):
    """The closed-form Perrin coefficients used as the validation reference agree with the code's
    Carlson-integral drag of a prolate spheroid (semi-axes b, b, a along body x, y, z)."""
    from relcp_mpi.physics.diffusion import perrin_prolate, stokes_einstein
    from relcp_mpi.physics.mobility import body_frame_drag
    a, b, mu, kT = 0.9, 0.9 / ratio, 1.7, 0.6
    p = perrin_prolate(a, b, mu, kT)
    zt, zr = body_frame_drag([ELLIPSOID], [[b, b, a]], mu)
    assert kT / zt[0] == pytest.approx([p["D_perp"], p["D_perp"], p["D_par"]], rel=1e-10)
    assert kT / zr[0] == pytest.approx([p["Dr_perp"], p["Dr_perp"], p["Dr_axis"]], rel=1e-10)
    # towards the sphere: Stokes-Einstein
    q = perrin_prolate(1.0, 0.999, mu, kT)
    Dt, Dr = stokes_einstein(1.0, mu, kT)
    assert q["D_par"] == pytest.approx(Dt, rel=2e-3) and q["Dr_perp"] == pytest.approx(Dr, rel=2e-3)


def test_pair_distribution_of_an_ideal_gas_is_one():
    from relcp_mpi.physics.diffusion import carnahan_starling_contact, pair_distribution
    rng = np.random.default_rng(8)
    box = np.array([10.0, 12.0, 11.0])
    edges = np.linspace(0.5, 4.5, 9)
    g = np.mean([pair_distribution(rng.uniform(0, 1, (1500, 3)) * box, box, edges) for _ in range(4)], axis=0)
    n_pairs = 4 * 0.5 * 1500 * 1499 * 4 / 3 * np.pi * (edges[1:] ** 3 - edges[:-1] ** 3) / np.prod(box)
    assert np.all(np.abs(g - 1) < 5 / np.sqrt(n_pairs))            # Poisson error of each bin's count
    assert carnahan_starling_contact(1e-4) == pytest.approx(1 + 2.5e-4, rel=1e-7)   # low-density virial limit


def test_restart_continues_the_brownian_run_bitwise(tmp_path):
    """The noise is keyed by the step number stored in the checkpoint: 3 + 3 steps with a restart in between
    equal 6 uninterrupted steps bit for bit (contacts included)."""
    from relcp_mpi import Simulation
    deck = make_deck(time={"dt": 0.002, "steps": 6}, seed=4, fluid={"viscosity": 1.0, "kT": 2.0},
                     box={"lo": [0, 0, 0], "hi": [4, 4, 4], "periodic": [True, True, True]},
                     generate=[{"shape": "ellipsoid", "axes": [0.5, 0.4, 0.35], "count": 27, "method": "lattice",
                                "spacing": 1.05, "region": {"lo": [0.5, 0.5, 0.5], "hi": [3.7, 3.7, 3.7]}}],
                     contact={"overlap_tol": 1e-3, "skin": 0.1}, output={"directory": str(tmp_path)})
    ref, d = run_sim(deck, comm=MPI.COMM_SELF)
    assert max(e["active"] for e in d) > 0
    first = Simulation.from_deck(deck, comm=MPI.COMM_SELF)
    first.run(3, writers=[])
    first.write_checkpoint()
    more = Simulation.from_checkpoint("latest", deck, comm=MPI.COMM_SELF)
    more.run(writers=[])
    assert more.step == 6
    for f in ("x", "q"):
        assert np.array_equal(more.gather(f)[1], ref.gather(f)[1])
