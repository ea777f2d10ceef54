"""Collision stress (relcp_mpi.physics.stress): the virial of the constraint forces against hand-computable
cases, and its independence of the rank count.

Column derivation (wall convention of relcp_mpi.physics.stress): N spheres of weight w stacked on a floor
z = 0 (normal +z).  At steady state the pair (k, k+1) carries (N - k) w, the floor N w.  Pair rows contribute
(x_i - x_j)_z f_z = 2R (N - k) w, the floor row (x_1 - p_wall)_z f_z = R N w, so
sum_k r_k (x) f_k |_zz = w R (N(N - 1) + N) = w R N^2 = W zbar  (W = N w, zbar = N R the mean centre height):
sigma_zz = -W zbar / V = -(W / A) (zbar / H), the box average of the column's stress -W_above(z)/A.
"""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.physics.stress import collision_stress, constraint_virial, stress_diagnostics, stresslet_terms
from tests.helpers import make_deck, run_sim

HANG_TIMEOUT = 240


def _pair_deck(x0, x1, F, box_lo, box_hi, periodic):
    bodies = [{"shape": "sphere", "radius": 0.5, "position": x0, "force": [F, 0.0, 0.0]},
              {"shape": "sphere", "radius": 0.5, "position": x1, "force": [-F, 0.0, 0.0]}]
    return make_deck(time={"dt": 0.1, "steps": 12}, box={"lo": box_lo, "hi": box_hi, "periodic": periodic},
                     bodies=bodies, contact={"overlap_tol": 1e-4, "skin": 0.2}, solver={"tol": 1e-11})


def test_virial_by_hand():
    """Two rows given by hand: a pair along x and a wall row; swapping i and j changes nothing."""
    x = np.array([[0.0, 0.0, 1.0], [1.0, 0.2, 1.0]])
    n = np.array([[-1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])      # pair: j -> i is -x; wall: +z
    r_i = np.array([[0.5, 0.0, 0.0], [0.0, 0.0, -0.5]])
    sep0 = np.array([0.0, 0.01])
    g = np.array([2.0, 3.0])
    V = constraint_virial([0, 0], [1, -1], n, r_i, sep0, g, x)
    lever_pair = x[0] - x[1]                                 # (-1, -0.2, 0)
    lever_wall = np.array([0.0, 0.0, 0.51])                  # x_i - p_wall = sep0 n - r_i
    expect = np.outer(lever_pair, 2.0 * n[0]) + np.outer(lever_wall, 3.0 * n[1])
    assert np.allclose(V, expect, rtol=0, atol=1e-15)
    swapped = constraint_virial([1], [0], -n[:1], r_i[:1], sep0[:1], g[:1], x)
    assert np.allclose(swapped, np.outer(lever_pair, 2.0 * n[0]), rtol=0, atol=1e-15)
    d = stress_diagnostics(-V / 8.0)
    assert d["stress_xx"] == pytest.approx(-2.0 * 1.0 / 8.0) and d["stress_yx"] == pytest.approx(-2.0 * 0.2 / 8.0)
    assert d["pressure"] == pytest.approx(np.trace(V) / 24.0)


@pytest.mark.parametrize("periodic", [False, True])
def test_two_spheres_pressed_together(periodic):
    """Equal and opposite forces F: at steady state gamma = F and sigma_xx = -F d / V (d = 2R, the centre
    distance; across the periodic boundary the minimum image, not the box length)."""
    F = 1.0
    if periodic:     # the spheres meet across x = 0 = 6 (periodic): left one pushed -x, right one +x
        deck = _pair_deck([0.55, 0.0, 0.0], [5.45, 0.0, 0.0], -F, [0, -3, -3], [6, 3, 3], [True, False, False])
    else:
        deck = _pair_deck([-0.53, 0.0, 0.0], [0.53, 0.0, 0.0], F, [-3, -3, -3], [3, 3, 3], [False] * 3)
    comm = MPI.COMM_SELF
    _, diags = run_sim(deck, comm=comm)
    d = diags[-1]
    assert d["active"] == 1
    V = 6.0 ** 3
    sigma = np.array([d[f"stress_{c}"] for c in ("xx", "xy", "xz", "yx", "yy", "yz", "zx", "zy", "zz")])
    expect = np.zeros(9)
    expect[0] = -F * 1.0 / V                                # d = 2R up to the overlap (< 1e-4)
    assert np.allclose(sigma, expect, rtol=0, atol=2e-4 * F / V)
    assert d["pressure"] == pytest.approx(F / (3 * V), rel=2e-4)
    # before contact the stress is exactly zero
    assert diags[0]["stress_xx"] == 0.0


def test_column_on_floor_weight_per_area():
    """A column of N touching spheres under gravity on a floor, laterally periodic: sigma_zz equals
    -(W/A) (zbar - z_wall)/H (derivation in the module docstring); the lateral components vanish."""
    N, R, w = 4, 0.5, 2.0
    Lx, H = 4.0, 6.0
    bodies = [{"shape": "sphere", "radius": R, "position": [2.0, 2.0, R + 2 * R * k]} for k in range(N)]
    deck = make_deck(time={"dt": 0.05, "steps": 6}, box={"lo": [0, 0, 0], "hi": [Lx, Lx, H],
                                                          "periodic": [True, True, False]},
                     walls=[{"point": [0, 0, 0], "normal": [0, 0, 1]}], bodies=bodies,
                     forces={"body_force": [0.0, 0.0, -w]}, contact={"overlap_tol": 1e-4, "skin": 0.1},
                     solver={"tol": 1e-11})
    sim, diags = run_sim(deck, comm=MPI.COMM_SELF)
    d = diags[-1]
    assert d["active"] == N                                 # N - 1 pair rows and the floor row
    W, A = N * w, Lx * Lx
    zbar = sim.bodies.x[:, 2].mean()
    assert zbar == pytest.approx(N * R, abs=1e-3)
    assert d["stress_zz"] == pytest.approx(-(W / A) * zbar / H, rel=1e-6)
    # the hand value: W zbar / V with zbar = N R
    assert d["stress_zz"] == pytest.approx(-w * R * N ** 2 / (A * H), rel=1e-3)
    for c in ("xx", "yy", "xy", "xz", "yz", "zx", "zy", "yx"):
        assert abs(d[f"stress_{c}"]) < 1e-9 * W / A


@pytest.mark.mpi
def test_collision_stress_sums_over_ranks():
    """collision_stress is the global sum over the ranks' rows divided by V (pure function check on a
    fake table split over the ranks of COMM_WORLD; on one rank it is the serial sum)."""
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(3)
    c = 40
    x = rng.normal(size=(30, 3))
    ia = rng.integers(0, 30, c)
    ib = np.where(rng.random(c) < 0.2, -1, rng.integers(0, 30, c))
    n = rng.normal(size=(c, 3))
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    r_i, sep0, g = rng.normal(size=(c, 3)), rng.normal(size=c), rng.random(c)
    ref = -constraint_virial(ia, ib, n, r_i, sep0, g, x) / 7.0
    mine = np.arange(c) % comm.size == comm.rank

    class Table:
        pass
    t = Table()
    t.ia, t.ib, t.normal, t.r_i, t.sep0 = ia[mine], ib[mine], n[mine], r_i[mine], sep0[mine]
    got = collision_stress(t, g[mine], x, 7.0, comm)
    assert np.allclose(got, ref, rtol=1e-12, atol=1e-14)


def _settling_deck():
    box = {"lo": [0, 0, 0], "hi": [6, 6, 6], "periodic": [True, True, False]}
    gen = {"shape": "sphere", "radius": 0.45, "count": 36, "method": "random",
           "region": {"lo": [0.0, 0.0, 0.05], "hi": [6, 6, 5.5]}}
    return make_deck(time={"dt": 0.1, "steps": 10}, seed=17, box=box,
                     walls=[{"point": [0, 0, 0], "normal": [0, 0, 1]}],
                     forces={"body_force": [1.5, 0.7, -6.0]}, generate=[gen],
                     contact={"overlap_tol": 1e-3, "skin": 0.3}, solver={"tol": 1e-8})


@pytest.mark.mpi
def test_stress_independent_of_rank_count(hang_guard):
    """Settling spheres in a laterally periodic box: the per-step stress on all ranks of COMM_WORLD equals
    the COMM_SELF run's within the solver tolerance."""
    deck = _settling_deck()
    _, dref = run_sim(deck, comm=MPI.COMM_SELF)
    _, d = run_sim(deck, comm=MPI.COMM_WORLD)
    keys = [f"stress_{c}" for c in ("xx", "xy", "xz", "yx", "yy", "yz", "zx", "zy", "zz")] + ["pressure"]
    ref = np.array([[e[k] for k in keys] for e in dref])
    got = np.array([[e[k] for k in keys] for e in d])
    assert np.abs(ref).max() > 0.01                        # contacts carry load
    assert np.allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


# ------------------------------------------------------------------------------------------------ stresslet
class _Rows:
    """A constraint table given by its columns (the fields the stress functions read)."""

    def __init__(self, **cols):
        self.__dict__.update(cols)


def _sphere_rows(rng, n_bodies=12, n_pairs=25, n_walls=6):
    """Rows between random spheres with exact sphere geometry (n j -> i, r_i = -R_i n, r_j = R_j n, so
    p_i - p_j = sep0 n) and floor rows (z = 0, normal +z)."""
    x = rng.uniform(0.5, 4.0, (n_bodies, 3))
    R = rng.uniform(0.2, 0.6, n_bodies)
    i = rng.integers(0, n_bodies, n_pairs)
    j = (i + rng.integers(1, n_bodies, n_pairs)) % n_bodies
    d = x[i] - x[j]
    n = d / np.linalg.norm(d, axis=1, keepdims=True)
    w = rng.integers(0, n_bodies, n_walls)
    nw = np.tile([0.0, 0.0, 1.0], (n_walls, 1))
    return _Rows(ia=np.concatenate([i, w]), ib=np.concatenate([j, -np.ones(n_walls, np.int64)]),
                 normal=np.concatenate([n, nw]), r_i=np.concatenate([-R[i, None] * n, -R[w, None] * nw]),
                 r_j=np.concatenate([R[j, None] * n, np.zeros((n_walls, 3))]),
                 sep0=np.concatenate([np.linalg.norm(d, axis=1) - R[i] - R[j], x[w, 2] - R[w]])), x


def test_stresslet_by_hand():
    """Two spheres of radius R pressed along x by gamma, body 0 also on a floor row of multiplier 3:
    S_0 = -gamma R e_x e_x - 3 R e_z e_z, S_1 = -gamma R e_x e_x; a row's shares are symmetric."""
    R, gam = 0.5, 2.0
    n = np.array([[-1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])          # pair: j -> i is -x (body 0 left of 1)
    t = stresslet_terms([0, 0], [1, -1], np.array([[R, 0, 0], [0, 0, -R]]), np.array([[-R, 0, 0], [0, 0, 0]]),
                        n, [gam, 3.0], 2)
    ex, ez = np.diag([1.0, 0, 0]), np.diag([0, 0, 1.0])
    assert np.allclose(t[0], -gam * R * ex - 3.0 * R * ez, rtol=0, atol=1e-15)
    assert np.allclose(t[1], -gam * R * ex, rtol=0, atol=1e-15)
    # an off-centre lever gives a symmetric tensor: r = (0, R, 0), f = (-gam, 0, 0) -> xy = yx = -gam R / 2
    t = stresslet_terms([0], [-1], [[0.0, R, 0.0]], [[0.0, 0.0, 0.0]], [[-1.0, 0.0, 0.0]], [gam], 1)[0]
    assert t[0, 1] == t[1, 0] == pytest.approx(-gam * R / 2) and np.count_nonzero(t) == 2


def test_stresslets_sum_to_virial():
    """sum_b S_b = V sym(sigma) + sum_k gamma_k sep0_k n_k n_k^T (relcp_mpi.physics.stress), exactly: the
    stresslets of touching rows (sep0 = 0) add up to the box virial."""
    rng = np.random.default_rng(5)
    rows, x = _sphere_rows(rng)
    g = rng.random(len(rows.ia))
    m = len(x)
    S = stresslet_terms(rows.ia, rows.ib, rows.r_i, rows.r_j, rows.normal, g, m)
    Vsigma = -constraint_virial(rows.ia, rows.ib, rows.normal, rows.r_i, rows.sep0, g, x)
    corr = np.einsum("k,ki,kj->ij", g * rows.sep0, rows.normal, rows.normal)
    assert np.allclose(S.sum(axis=0), 0.5 * (Vsigma + Vsigma.T) + corr, rtol=0, atol=1e-12)
    # move the witness points of each pair onto each other (p_i = p_j, sep0 = 0; a wall row with sep0 = 0
    # touches whatever its lever): then the sum is V sym(sigma) itself
    half = 0.5 * (rows.sep0 * (rows.ib >= 0))[:, None] * rows.normal
    r_i_t, r_j_t, touching = rows.r_i - half, rows.r_j + half, np.zeros_like(rows.sep0)
    St = stresslet_terms(rows.ia, rows.ib, r_i_t, r_j_t, rows.normal, g, m)
    Vt = -constraint_virial(rows.ia, rows.ib, rows.normal, r_i_t, touching, g, x)
    assert not np.allclose(St.sum(axis=0), S.sum(axis=0))
    assert np.allclose(St.sum(axis=0), 0.5 * (Vt + Vt.T), rtol=0, atol=1e-12)


@pytest.mark.parametrize("periodic", [False, True])
def test_two_spheres_stresslet(periodic):
    """Two spheres pressed together by F (steady state, touching): each stresslet is -F R e_x e_x, and their
    sum is V sigma."""
    F, R = 1.0, 0.5
    if periodic:
        deck = _pair_deck([0.55, 0.0, 0.0], [5.45, 0.0, 0.0], -F, [0, -3, -3], [6, 3, 3], [True, False, False])
    else:
        deck = _pair_deck([-0.53, 0.0, 0.0], [0.53, 0.0, 0.0], F, [-3, -3, -3], [3, 3, 3], [False] * 3)
    sim, diags = run_sim(deck, comm=MPI.COMM_SELF)
    gid, S = sim.gather("stresslet")
    assert gid.tolist() == [0, 1] and S.shape == (2, 3, 3)
    expect = np.zeros((3, 3))
    expect[0, 0] = -F * R
    for k in range(2):
        assert np.allclose(S[k], expect, rtol=0, atol=2e-4 * F * R)
    d = diags[-1]
    sigma = np.array([d[f"stress_{c}"] for c in ("xx", "xy", "xz", "yx", "yy", "yz", "zx", "zy", "zz")])
    V = 6.0 ** 3
    assert np.allclose(S.sum(axis=0), V * sigma.reshape(3, 3), rtol=0, atol=2e-4 * F * R)


def _pile_deck():
    """Spheres settling on a floor and pushed against a side wall (x = 0) in a closed (non-periodic) box,
    longest along x (so that ranks split the pile and loaded contacts cross rank boundaries)."""
    box = {"lo": [0, 0, 0], "hi": [8, 4, 4], "periodic": [False, False, False]}
    gen = {"shape": "sphere", "radius": 0.45, "count": 40, "method": "lattice", "spacing": 0.9,   # touching
           "region": {"lo": [0.0, 0.0, 0.0], "hi": [7.2, 2.7, 1.8]}}
    return make_deck(time={"dt": 0.1, "steps": 4}, seed=21, box=box,
                     walls=[{"point": [0, 0, 0], "normal": [0, 0, 1]}, {"point": [0, 0, 0], "normal": [1, 0, 0]}],
                     forces={"body_force": [-3.0, 0.3, -6.0]}, generate=[gen],
                     contact={"overlap_tol": 1e-3, "skin": 0.3}, solver={"tol": 1e-9})


@pytest.mark.mpi
def test_stresslet_sum_and_rank_independence(hang_guard):
    """Settling spheres in a closed box on all ranks of COMM_WORLD (rows touching ghosts send their share to
    the owner): per-body stresslets equal the COMM_SELF run's within the solver tolerance, and their sum is
    V sym(sigma) + sum_k gamma_k sep0_k n_k n_k^T of the step's rows."""
    deck = _pile_deck()
    comm = MPI.COMM_WORLD
    ref, _ = run_sim(deck, comm=MPI.COMM_SELF)
    _, Sref = ref.gather("stresslet")
    sim, diags = run_sim(deck, comm=comm)
    gid, S = sim.gather("stresslet")
    assert np.array_equal(gid, np.arange(40)) and np.abs(Sref).max() > 0.1      # contacts carry load
    assert np.allclose(S, Sref, rtol=1e-5, atol=1e-5 * np.abs(Sref).max())
    table, gamma, n_owned = sim.engine._last_rows[:3]    # the last step's rows on this rank (test only)
    if comm.size > 1:                                    # some loaded rows touch a ghost copy
        assert comm.allreduce(int(np.sum((table.ib >= n_owned) & (gamma > 0)))) > 0
    corr = comm.allreduce(np.einsum("k,ki,kj->ij", gamma * table.sep0, table.normal, table.normal))
    d = diags[-1]
    Vs = np.array([d[f"stress_{c}"] for c in ("xx", "xy", "xz", "yx", "yy", "yz", "zx", "zy", "zz")]
                  ).reshape(3, 3) * 8 * 4 * 4
    assert np.allclose(S.sum(axis=0), 0.5 * (Vs + Vs.T) + corr, rtol=0, atol=1e-9 * np.abs(Vs).max())
