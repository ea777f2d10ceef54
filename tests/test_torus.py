"""Rigid rings (tori): ring-ring / ring-sphere / ring-wall kernels (relcp_mpi.geometry.torus).

The brute-force oracle below shares no code with the kernels: rotations come from scipy (quaternion order
(x, y, z, w)), the circle distance is screened on a dense 2000 x 2000 angle grid (chunked), the reduced
function G(th) = min_ph |c_i(th) - c_j(ph)| is scanned for its discrete local minima, and the best few are
refined by 2-D grid zooming on direct point differences.
"""
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from relcp_mpi.geometry import quaternion as Q
from relcp_mpi.geometry.contact import ContactGeometry
from relcp_mpi.geometry.torus import (ring_ring, ring_ring_kernel, ring_sphere, ring_wall, ring_proxy_spheres)

ID = np.array([1.0, 0.0, 0.0, 0.0])


# ----------------------------------------------------------------------------------------------------------
# independent oracle
# ----------------------------------------------------------------------------------------------------------
def rotmat(q):
    q = np.asarray(q, dtype=float)
    return Rotation.from_quat([q[1], q[2], q[3], q[0]]).as_matrix()


class Circle:
    def __init__(self, x, q, Rc):
        self.x = np.asarray(x, dtype=float)
        M = rotmat(q)
        self.u, self.v, self.z = M[:, 0], M[:, 1], M[:, 2]
        self.Rc = float(Rc)

    def pts(self, ang, origin):
        ang = np.asarray(ang, dtype=float)
        return ((self.x - origin) + self.Rc * (np.cos(ang)[..., None] * self.u
                                               + np.sin(ang)[..., None] * self.v))


def oracle_circles(ci, cj, n=2000, n_cand=4, levels=36, k=11):
    """Global minimum of |c_i(th) - c_j(ph)|: returns (D, th, ph, values of the refined candidates)."""
    o = 0.5 * (ci.x + cj.x)
    g = 2 * np.pi * np.arange(n) / n
    Pi, Pj = ci.pts(g, o), cj.pts(g, o)
    ni, nj = np.sum(Pi ** 2, axis=1), np.sum(Pj ** 2, axis=1)
    G = np.empty(n)
    arg = np.empty(n, dtype=np.int64)
    for s in range(0, n, 250):
        d2 = ni[s:s + 250, None] + nj[None, :] - 2.0 * Pi[s:s + 250] @ Pj.T
        arg[s:s + 250] = np.argmin(d2, axis=1)
        G[s:s + 250] = d2[np.arange(d2.shape[0]), arg[s:s + 250]]
    loc = np.nonzero((G <= np.roll(G, 1)) & (G <= np.roll(G, -1)))[0]
    loc = loc[np.argsort(G[loc])][:n_cand]
    results = []
    for i0 in loc:
        th, ph = g[i0], g[arg[i0]]
        w = 3.0 * 2 * np.pi / n
        best = np.linalg.norm(ci.pts(th, o) - cj.pts(ph, o))
        lin = np.linspace(-1.0, 1.0, k)
        for _ in range(levels):
            T, P = np.meshgrid(th + w * lin, ph + w * lin, indexing="ij")
            D = np.linalg.norm(ci.pts(T, o) - cj.pts(P, o), axis=-1)
            a = np.unravel_index(np.argmin(D), D.shape)
            if D[a] < best:
                best, th, ph = D[a], T[a], P[a]
            w *= 0.4
        results.append((best, th, ph))
    results.sort(key=lambda t: t[0])
    return results[0][0], results[0][1], results[0][2], [r[0] for r in results]


def oracle_pair(xi, qi, Rci, xj, qj, Rcj):
    ci, cj = Circle(xi, qi, Rci), Circle(xj, qj, Rcj)
    D, th, ph, vals = oracle_circles(ci, cj)
    o = np.zeros(3)
    d = ci.pts(th, o) - cj.pts(ph, o)
    return D, d / max(np.linalg.norm(d), 1e-300), vals


def linked(xi, qi, Rci, xj, qj, Rcj, n=20000):
    """Independent linking test: circle j crosses the plane of i inside the disk exactly once."""
    ci, cj = Circle(xi, qi, Rci), Circle(xj, qj, Rcj)
    P = cj.pts(2 * np.pi * np.arange(n) / n, np.zeros(3)) - ci.x
    h = P @ ci.z
    cr = np.nonzero(np.sign(h) != np.sign(np.roll(h, -1)))[0]
    inside = 0
    for k in cr:
        a, b = P[k], P[(k + 1) % n]
        t = h[k] / (h[k] - h[(k + 1) % n])
        p = a + t * (b - a)
        inside += np.linalg.norm(p - (p @ ci.z) * ci.z) < Rci
    return inside % 2 == 1


# ----------------------------------------------------------------------------------------------------------
# configuration generators
# ----------------------------------------------------------------------------------------------------------
def rot_q(axis, ang):
    axis = np.asarray(axis, dtype=float)
    axis = axis / np.linalg.norm(axis)
    return np.r_[np.cos(ang / 2), np.sin(ang / 2) * axis]


def rigid(rng, xi, qi, xj, qj):
    """Apply one random rigid motion to both rings."""
    q0 = Q.random_unit(rng, 1)[0]
    t = rng.normal(size=3) * 3.0
    R0 = Q.to_matrix(q0[None])[0]
    return (R0 @ xi + t, Q.multiply(q0[None], qi[None])[0], R0 @ xj + t, Q.multiply(q0[None], qj[None])[0])


def cfg_random(rng):
    Rci, Rcj = rng.uniform(0.5, 1.5, 2)
    ri, rj = rng.uniform(0.05, 0.4, 2) * np.array([Rci, Rcj])
    xi = rng.normal(size=3)
    d = rng.normal(size=3)
    xj = xi + d / np.linalg.norm(d) * rng.uniform(0.1, 1.3) * (Rci + Rcj + ri + rj)
    return xi, Q.random_unit(rng, 1)[0], Rci, ri, xj, Q.random_unit(rng, 1)[0], Rcj, rj


def cfg_linked(rng):
    """Chainmail link: perpendicular-ish planes, each passing through the other's hole."""
    while True:
        Rci, Rcj = rng.uniform(0.7, 1.3, 2)
        lo, hi = max(Rcj - Rci, Rci - Rcj), Rci + Rcj          # c - Rcj inside the disk, c + Rcj outside
        c = rng.uniform(lo + 0.05, hi - 0.05)
        qj = Q.multiply(rot_q(rng.normal(size=3), rng.uniform(0, 0.35))[None],
                        rot_q([1, 0, 0], np.pi / 2)[None])[0]
        qj = Q.multiply(qj[None], rot_q([0, 0, 1], rng.uniform(0, 2 * np.pi))[None])[0]
        qi = rot_q([0, 0, 1], rng.uniform(0, 2 * np.pi))
        xi = np.zeros(3)
        xj = np.array([c, 0.0, 0.0]) + rng.normal(size=3) * 0.05
        if linked(xi, qi, Rci, xj, qj, Rcj):
            xi, qi, xj, qj = rigid(rng, xi, qi, xj, qj)
            ri, rj = 0.12 * Rci, 0.12 * Rcj
            return xi, qi, Rci, ri, xj, qj, Rcj, rj


def cfg_far(rng):
    xi, qi, Rci, ri, xj, qj, Rcj, rj = cfg_random(rng)
    d = xj - xi
    return xi, qi, Rci, ri, xi + d / np.linalg.norm(d) * rng.uniform(10, 100) * (Rci + Rcj), qj, Rcj, rj


def cfg_coplanar(rng):
    Rci, Rcj = rng.uniform(0.5, 1.5, 2)
    qi = rot_q([0, 0, 1], rng.uniform(0, 2 * np.pi))
    qj = rot_q([0, 0, 1], rng.uniform(0, 2 * np.pi))
    if rng.uniform() < 0.5:
        qj = Q.multiply(rot_q([1, 0, 0], np.pi)[None], qj[None])[0]      # flipped axis, same plane
    ang = rng.uniform(0, 2 * np.pi)
    xj = rng.uniform(0.2, 3.0) * np.array([np.cos(ang), np.sin(ang), 0.0])
    xi, qi, xj, qj = rigid(rng, np.zeros(3), qi, xj, qj)
    return xi, qi, Rci, 0.1, xj, qj, Rcj, 0.1


def cfg_in_plane(rng):
    """Ring j (small, tilted or not) with its centre in the plane of ring i, inside i's hole."""
    Rci = 1.0
    Rcj = rng.uniform(0.2, 0.5)
    ang = rng.uniform(0, 2 * np.pi)
    xj = rng.uniform(0.0, 0.4) * np.array([np.cos(ang), np.sin(ang), 0.0])
    qj = rot_q(rng.normal(size=3), rng.choice([0.0, rng.uniform(0, np.pi)]))
    xi, qi, xj, qj = rigid(rng, np.zeros(3), ID, xj, qj)
    return xi, qi, Rci, 0.05, xj, qj, Rcj, 0.05


def one(g, k=0):
    return g.sep[k], g.normal[k], g.p_i[k], g.p_j[k], g.converged[k]


def run(cfgs, **kw):
    cols = list(zip(*cfgs))
    return ring_ring(np.array(cols[0]), np.array(cols[1]), np.array(cols[2]), np.array(cols[3]),
                     np.array(cols[4]), np.array(cols[5]), np.array(cols[6]), np.array(cols[7]), **kw)


def check_contract(g, tol=1e-12):
    np.testing.assert_allclose(np.linalg.norm(g.normal, axis=1), 1.0, atol=1e-13)
    np.testing.assert_allclose(np.einsum("ij,ij->i", g.normal, g.p_i - g.p_j), g.sep, atol=tol)


# ----------------------------------------------------------------------------------------------------------
# oracle
# ----------------------------------------------------------------------------------------------------------
def test_oracle_exact_cases():
    # coplanar side by side and coaxial stacking
    D, _, _ = oracle_pair([3.0, 0, 0], ID, 1.0, [0, 0, 0], ID, 1.5)
    assert D == pytest.approx(0.5, abs=1e-12)
    D, _, _ = oracle_pair([0, 0, 0.7], ID, 1.0, [0, 0, 0], ID, 1.0)
    assert D == pytest.approx(0.7, abs=1e-12)
    assert linked([0, 0, 0], ID, 1.0, [1.0, 0, 0], rot_q([1, 0, 0], np.pi / 2), 1.0)
    assert not linked([0, 0, 0], ID, 1.0, [2.5, 0, 0], rot_q([1, 0, 0], np.pi / 2), 1.0)


@pytest.mark.parametrize("gen,count", [(cfg_random, 8), (cfg_linked, 8), (cfg_far, 3), (cfg_coplanar, 4),
                                       (cfg_in_plane, 4)])
def test_ring_ring_vs_oracle(rng, gen, count):
    cfgs = [gen(rng) for _ in range(count)]
    g = run(cfgs)
    assert np.all(g.converged)
    check_contract(g, tol=1e-10)
    for k, c in enumerate(cfgs):
        xi, qi, Rci, ri, xj, qj, Rcj, rj = c
        D, n_or, vals = oracle_pair(xi, qi, Rci, xj, qj, Rcj)
        S = Rci + Rcj
        assert abs(g.sep[k] - (D - ri - rj)) <= 1e-10 * S, (gen.__name__, k, g.sep[k], D - ri - rj)
        distinct = [v for v in vals[1:] if abs(v - D) > 1e-6 * S]
        if len(distinct) == len(vals) - 1 and D > 1e-6 * S:      # isolated minimiser: normal is defined
            assert np.linalg.norm(g.normal[k] - n_or) <= 1e-5, (gen.__name__, k, g.normal[k], n_or)
    if gen is cfg_linked:
        # linked circles never intersect (D > 0) although their bounding spheres overlap heavily
        cols = list(zip(*cfgs))
        D = g.sep + np.array(cols[3]) + np.array(cols[7])
        assert np.all(D > 0.02)
        assert np.all(np.linalg.norm(np.array(cols[0]) - np.array(cols[4]), axis=1)
                      < np.array(cols[2]) + np.array(cols[6]))


def test_nearly_touching_vs_oracle(rng):
    cfgs = []
    for _ in range(6):
        xi, qi, Rci, _, xj, qj, Rcj, _ = cfg_random(rng)
        D, n_or, _ = oracle_pair(xi, qi, Rci, xj, qj, Rcj)
        if D < 0.05:
            continue
        gap = 10.0 ** -rng.uniform(3, 8)
        xj = xj + (D - 0.3 - gap) * n_or         # move j towards i along the normal
        cfgs.append((xi, qi, Rci, 0.15, xj, qj, Rcj, 0.15))
    g = run(cfgs)
    assert np.all(g.converged)
    for k, (xi, qi, Rci, ri, xj, qj, Rcj, rj) in enumerate(cfgs):
        D, _, _ = oracle_pair(xi, qi, Rci, xj, qj, Rcj)
        assert abs(g.sep[k] - (D - ri - rj)) <= 1e-11 * (Rci + Rcj)
        assert abs(g.sep[k]) < 0.05


def test_few_starts_certificate_finds_global_minimum(rng):
    """One Newton start on a coarse 6x6 screen: the branch-and-bound certificate must find the global
    minimum itself when the start converges to a worse local minimum."""
    cfgs = [cfg_linked(rng) for _ in range(6)] + [cfg_random(rng) for _ in range(6)]
    g = run(cfgs, n_starts=1, grid=6)
    g8 = run(cfgs)
    assert np.all(g.converged)
    np.testing.assert_allclose(g.sep, g8.sep, atol=1e-10)
    # without the branch and bound (max_levels=0) the single start misses the global minimum somewhere,
    # and that pair is then not certified
    g0 = run(cfgs, n_starts=1, grid=6, max_levels=0)
    worse = g0.sep > g.sep + 1e-6
    assert np.any(worse)
    assert not np.any(g0.converged[worse])


# ----------------------------------------------------------------------------------------------------------
# exact cases
# ----------------------------------------------------------------------------------------------------------
def test_coaxial_stacked(rng):
    for _ in range(5):
        q = Q.random_unit(rng, 1)[0]
        z = Q.to_matrix(q[None])[0][:, 2]
        h = rng.uniform(-2, 2)
        qj = Q.multiply(q[None], rot_q([0, 0, 1], rng.uniform(0, 6))[None])[0]   # spin about the axis
        if rng.uniform() < 0.5:
            qj = Q.multiply(qj[None], rot_q([1, 0, 0], np.pi)[None])[0]           # antiparallel axis
        xi = rng.normal(size=3)
        g = ring_ring(xi, q, 1.2, 0.1, xi - h * z, qj, 1.2, 0.2)
        sep, n, pi, pj, c = one(g)
        assert c
        assert sep == pytest.approx(abs(h) - 0.3, abs=1e-13)
        np.testing.assert_allclose(n, np.sign(h) * z, atol=1e-12)
        # unequal radii: D = sqrt(h^2 + dR^2)
        g = ring_ring(xi, q, 1.2, 0.1, xi - h * z, qj, 0.7, 0.2)
        assert g.converged[0]
        assert g.sep[0] == pytest.approx(np.hypot(h, 0.5) - 0.3, abs=1e-13)
        check_contract(g)


def test_coplanar_concentric_degenerate(rng):
    q = Q.random_unit(rng, 1)[0]
    x = rng.normal(size=3)
    g = ring_ring(x, q, 1.0, 0.1, x, Q.multiply(q[None], rot_q([0, 0, 1], 1.0)[None])[0], 0.6, 0.1)
    assert g.converged[0]
    assert g.sep[0] == pytest.approx(0.4 - 0.2, abs=1e-14)
    check_contract(g)
    # identical circles: D = 0, deep overlap, deterministic unit normal
    g = ring_ring(x, q, 1.0, 0.1, x, q, 1.0, 0.15)
    assert g.converged[0]
    assert g.sep[0] == pytest.approx(-0.25, abs=1e-14)
    check_contract(g)


def test_coplanar_side_by_side(rng):
    for _ in range(5):
        Rci, Rcj = rng.uniform(0.5, 1.5, 2)
        ang = rng.uniform(0, 2 * np.pi)
        dist = Rci + Rcj + rng.uniform(-0.3, 1.0)
        xi, qi, xj, qj = rigid(rng, dist * np.array([np.cos(ang), np.sin(ang), 0.0]),
                               rot_q([0, 0, 1], rng.uniform(0, 6)), np.zeros(3),
                               rot_q([1, 0, 0], np.pi * rng.integers(2)))
        g = ring_ring(xi, qi, Rci, 0.1, xj, qj, Rcj, 0.05)
        sep, n, _, _, c = one(g)
        assert c
        D = dist - Rci - Rcj
        if D > 0:
            assert sep == pytest.approx(D - 0.15, abs=1e-12)
            np.testing.assert_allclose(n, (xi - xj) / dist, atol=1e-10)
        else:     # the circles cross in the common plane: D = 0
            assert sep == pytest.approx(-0.15, abs=1e-12)
        check_contract(g)


def test_perpendicular_linked_equal_radius_at_distance_Rc(rng):
    """Ring i in the xy plane at 0, ring j in the xz plane centred at (Rc, 0, 0): |c_i - c_j|^2 =
    Rc^2 (1 + 2 (1 - cos th)(1 + cos ph)) >= Rc^2, so D = Rc, attained on two whole lines (th = 0: the point
    of circle i at the centre of j; ph = pi: the point of j at the centre of i).  Degenerate (singular
    Hessian); certified by the box bounds alone."""
    for Rc in (1.0, 2.5):
        qj = rot_q([1, 0, 0], np.pi / 2)
        xi, qi, xj, qj = rigid(rng, np.zeros(3), ID, np.array([Rc, 0.0, 0.0]), qj)
        assert linked(xi, qi, Rc, xj, qj, Rc)
        g = ring_ring(xi, qi, Rc, 0.1 * Rc, xj, qj, Rc, 0.2 * Rc)
        assert g.converged[0]
        assert g.sep[0] == pytest.approx(Rc - 0.3 * Rc, abs=1e-10 * Rc)
        check_contract(g)


def test_perpendicular_linked_offset_exact():
    """Ring i (Rc 1) in the xy plane at 0, ring j (Rc 0.6) in the xz plane centred at (0.7, 0, 0) (linked):
    f = (cos th - 0.7 - 0.6 cos ph)^2 + sin^2 th + 0.36 sin^2 ph.  The closest points are (1, 0, 0) on i and
    (1.3, 0, 0) on j (th = ph = 0), D = 0.3; a dense grid confirms no lower value."""
    qj = rot_q([1, 0, 0], np.pi / 2)
    assert linked(np.zeros(3), ID, 1.0, np.array([0.7, 0.0, 0.0]), qj, 0.6)
    g = ring_ring(np.zeros(3), ID, 1.0, 0.05, np.array([0.7, 0.0, 0.0]), qj, 0.6, 0.05)
    t = np.linspace(0, 2 * np.pi, 1501)
    th, ph = np.meshgrid(t, t, indexing="ij")
    f = (np.cos(th) - 0.7 - 0.6 * np.cos(ph)) ** 2 + np.sin(th) ** 2 + 0.36 * np.sin(ph) ** 2
    assert np.sqrt(f.min()) == pytest.approx(0.3, abs=1e-12)
    assert g.converged[0]
    assert g.sep[0] == pytest.approx(0.3 - 0.1, abs=1e-13)
    np.testing.assert_allclose(g.normal[0], [-1.0, 0.0, 0.0], atol=1e-10)
    np.testing.assert_allclose(g.p_i[0], [1.05, 0.0, 0.0], atol=1e-10)
    np.testing.assert_allclose(g.p_j[0], [1.25, 0.0, 0.0], atol=1e-10)


# ----------------------------------------------------------------------------------------------------------
# symmetry / invariance / contract / failure path
# ----------------------------------------------------------------------------------------------------------
def test_swap_symmetry_and_contract(rng):
    cfgs = [cfg_random(rng) for _ in range(20)] + [cfg_linked(rng) for _ in range(10)]
    g = run(cfgs)
    sw = [(c[4], c[5], c[6], c[7], c[0], c[1], c[2], c[3]) for c in cfgs]
    h = run(sw)
    assert np.all(g.converged) and np.all(h.converged)
    check_contract(g, 1e-11)
    check_contract(h, 1e-11)
    np.testing.assert_allclose(h.sep, g.sep, atol=1e-12)
    np.testing.assert_allclose(h.normal, -g.normal, atol=1e-8)
    np.testing.assert_allclose(h.p_i, g.p_j, atol=1e-8)
    np.testing.assert_allclose(h.p_j, g.p_i, atol=1e-8)
    # witness points lie on the tube surfaces: distance to the own centre circle = r
    for k, c in enumerate(cfgs):
        for p, (x, q, Rc, r) in ((g.p_i[k], c[0:4]), (g.p_j[k], c[4:8])):
            M = rotmat(q)
            y = M.T @ (p - x)
            assert np.hypot(np.hypot(y[0], y[1]) - Rc, y[2]) == pytest.approx(r, abs=1e-12)


def test_rigid_motion_invariance(rng):
    cfgs = [cfg_random(rng) for _ in range(15)] + [cfg_linked(rng) for _ in range(10)]
    g = run(cfgs)
    q0 = Q.random_unit(rng, 1)[0]
    R0 = Q.to_matrix(q0[None])[0]
    t = np.array([5.0, -3.0, 2.0])
    moved = [(R0 @ c[0] + t, Q.multiply(q0[None], c[1][None])[0], c[2], c[3],
              R0 @ c[4] + t, Q.multiply(q0[None], c[5][None])[0], c[6], c[7]) for c in cfgs]
    h = run(moved)
    np.testing.assert_allclose(h.sep, g.sep, atol=1e-12)
    np.testing.assert_allclose(h.normal, g.normal @ R0.T, atol=1e-8)
    np.testing.assert_allclose(h.p_i, g.p_i @ R0.T + t, atol=1e-8)
    np.testing.assert_allclose(h.p_j, g.p_j @ R0.T + t, atol=1e-8)


def test_batch_equals_single_and_types(rng):
    cfgs = [cfg_random(rng) for _ in range(5)]
    g = run(cfgs)
    assert isinstance(g, ContactGeometry) and len(g) == 5
    for k, c in enumerate(cfgs):
        s = ring_ring(*c)
        assert s.sep[0] == pytest.approx(g.sep[k], abs=1e-13)
    e = ring_ring(np.empty((0, 3)), ID, 1.0, 0.1, np.empty((0, 3)), ID, 1.0, 0.1)
    assert len(e) == 0
    with pytest.raises(ValueError, match="0 < r < Rc"):
        ring_ring(np.zeros(3), ID, 1.0, 1.0, np.ones(3), ID, 1.0, 0.1)


def test_max_iter_one_not_converged(rng):
    cfgs = [cfg_random(rng) for _ in range(10)] + [cfg_linked(rng) for _ in range(5)]
    g = run(cfgs, max_iter=1)
    assert not np.any(g.converged)
    assert np.all(np.isfinite(g.sep)) and np.all(np.isfinite(g.normal))


def test_certificate_budget_exhausted_reports_not_converged(rng):
    cfgs = [cfg_linked(rng) for _ in range(6)]
    g = run(cfgs, grid=4, max_levels=0)
    assert not np.any(g.converged)
    g = run(cfgs, grid=4, max_cells=8)
    assert not np.all(g.converged)
    # a small (but sufficient per pair) budget only changes the grouping, not the result
    ref = run(cfgs)
    g = run(cfgs, max_cells=150)
    assert np.all(g.converged)
    np.testing.assert_allclose(g.sep, ref.sep, atol=1e-13)


def test_info_and_throughput_smoke(rng):
    m = 500
    cfgs = [cfg_random(rng) for _ in range(m)]
    cols = [np.array(c) for c in zip(*cfgs)]
    Rs = [Q.to_matrix(cols[1]), Q.to_matrix(cols[5])]
    out = ring_ring_kernel(cols[0], Rs[0], cols[2], cols[3], cols[4], Rs[1], cols[6], cols[7], return_info=True)
    assert np.all(out[4])
    assert out[5]["levels"] <= 24


# ----------------------------------------------------------------------------------------------------------
# ring - sphere, ring - wall, proxy
# ----------------------------------------------------------------------------------------------------------
def test_ring_sphere_exact(rng):
    q = Q.random_unit(rng, 1)[0]
    M = Q.to_matrix(q[None])[0]
    u, v, z = M[:, 0], M[:, 1], M[:, 2]
    x = rng.normal(size=3)
    Rc, r, R = 1.5, 0.2, 0.3
    a, h, ang = 0.4, 0.9, 0.7
    e = np.cos(ang) * u + np.sin(ang) * v
    xs = x + a * e + h * z
    g = ring_sphere(x, q, Rc, r, xs, R)
    assert g.sep[0] == pytest.approx(np.hypot(Rc - a, h) - r - R, abs=1e-14)
    c = x + Rc * e
    np.testing.assert_allclose(g.normal[0], (c - xs) / np.linalg.norm(c - xs), atol=1e-14)
    check_contract(g, 1e-14)
    # sphere centre on the axis: every circle point is equidistant; deterministic point along body x
    g = ring_sphere(x, q, Rc, r, x + h * z, R)
    assert g.sep[0] == pytest.approx(np.hypot(Rc, h) - r - R, abs=1e-14)
    np.testing.assert_allclose(g.p_i[0] + r * g.normal[0], x + Rc * u, atol=1e-14)
    check_contract(g, 1e-14)
    # sphere centre on the centre circle: deepest overlap, normal towards the ring centre
    g = ring_sphere(x, q, Rc, r, x + Rc * e, R)
    assert g.sep[0] == pytest.approx(-r - R, abs=1e-14)
    np.testing.assert_allclose(g.normal[0], -e, atol=1e-12)
    # batch vs a dense-sampling bound
    m = 20
    xs = x + rng.normal(size=(m, 3)) * 2
    g = ring_sphere(np.tile(x, (m, 1)), q, Rc, r, xs, R)
    P = x + Rc * (np.cos(np.linspace(0, 2 * np.pi, 200001))[:, None] * u
                  + np.sin(np.linspace(0, 2 * np.pi, 200001))[:, None] * v)
    for k in range(m):
        Dk = np.min(np.linalg.norm(P - xs[k], axis=1))
        assert g.sep[k] <= Dk - r - R + 1e-14
        assert g.sep[k] >= Dk - r - R - 1e-8
    check_contract(g, 1e-13)


def test_ring_wall_exact(rng):
    Rc, r = 1.2, 0.15
    for beta in (0.0, 0.3, np.pi / 2, 2.0):
        q = rot_q([1, 0, 0], beta)
        x = np.array([0.3, -0.2, 2.0])
        g = ring_wall(x, q, Rc, r, [0, 0, 0.5], [0, 0, 2.0])
        assert g.sep[0] == pytest.approx(2.0 - 0.5 - Rc * abs(np.sin(beta)) - r, abs=1e-14)
        np.testing.assert_allclose(g.normal[0], [0, 0, 1])
        assert g.p_j[0][2] == pytest.approx(0.5, abs=1e-14)
        check_contract(g, 1e-14)
    # flat ring: deterministic point along body x
    g = ring_wall(np.array([0.0, 0.0, 1.0]), rot_q([0, 0, 1], 0.4), Rc, r, [0, 0, 0], [0, 0, 1])
    np.testing.assert_allclose(g.p_i[0], [Rc * np.cos(0.4), Rc * np.sin(0.4), 1.0 - r], atol=1e-14)
    # random orientation vs sampling
    q = Q.random_unit(rng, 1)[0]
    M = Q.to_matrix(q[None])[0]
    nrm = np.array([0.3, -0.5, 0.8])
    nrm /= np.linalg.norm(nrm)
    g = ring_wall(np.zeros(3), q, Rc, r, np.zeros(3), nrm)
    t = np.linspace(0, 2 * np.pi, 100001)
    P = Rc * (np.cos(t)[:, None] * M[:, 0] + np.sin(t)[:, None] * M[:, 1])
    assert g.sep[0] == pytest.approx((P @ nrm).min() - r, abs=1e-9)


def test_proxy_spheres():
    c = ring_proxy_spheres(2.0, 0.3, 12)
    assert c.shape == (12, 3)
    np.testing.assert_allclose(np.hypot(c[:, 0], c[:, 1]), 2.0)
    np.testing.assert_allclose(c[:, 2], 0.0)
    gaps = np.linalg.norm(c - np.roll(c, 1, axis=0), axis=1)
    np.testing.assert_allclose(gaps, 2 * 2.0 * np.sin(np.pi / 12))
    np.testing.assert_allclose(c[0], [2.0, 0, 0])
    with pytest.raises(ValueError):
        ring_proxy_spheres(1.0, 1.5, 8)


# ----------------------------------------------------------------------------------------------------------
# heavier sweep
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("gen", [cfg_random, cfg_linked, cfg_coplanar, cfg_in_plane, cfg_far])
def test_ring_ring_vs_oracle_sweep(gen):
    rng = np.random.default_rng(777)
    cfgs = [gen(rng) for _ in range(40)]
    g = run(cfgs)
    assert np.all(g.converged)
    for k, (xi, qi, Rci, ri, xj, qj, Rcj, rj) in enumerate(cfgs):
        D, _, _ = oracle_pair(xi, qi, Rci, xj, qj, Rcj)
        assert abs(g.sep[k] - (D - ri - rj)) <= 1e-10 * (Rci + Rcj)
