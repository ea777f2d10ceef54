"""Ring (torus) contact through the dispatcher: pair_snsd / wall_snsd with RING bodies.

The dispatch is compared with the independent brute-force oracle of relcp_mpi/geometry/bruteforce.py
(dense angle screening + grid zooming, no code shared with geometry/torus.py) for random interlaced,
separated and overlapping ring pairs, ring-sphere pairs in both orders, ring-wall pairs and a mixed batch.
Conventions checked (docs/ARCHITECTURE.md): normal from j towards i, p_i on body i, p_j on body j,
sep = n . (p_i - p_j) and, since both witness points lie on the line through the closest core points,
p_i - p_j = sep * n exactly.
"""
import numpy as np
import pytest

from relcp_mpi.bodies.shapes import ELLIPSOID, RING, SPHERE, SPHEROCYLINDER
from relcp_mpi.geometry import bruteforce as bf
from relcp_mpi.geometry import quaternion as Q
from relcp_mpi.geometry.contact import ContactGeometry, GeometryError, pair_snsd, wall_snsd
from relcp_mpi.geometry.torus import ring_ring, ring_sphere, ring_wall, rings_linked

ID = np.array([1.0, 0.0, 0.0, 0.0])


# ----------------------------------------------------------------------------------------------------------
# configurations: one pair = (kind_i, shape_i, x_i, q_i, kind_j, shape_j, x_j, q_j)
# ----------------------------------------------------------------------------------------------------------
def rot_q(axis, ang):
    axis = np.asarray(axis, dtype=float)
    return np.r_[np.cos(ang / 2), np.sin(ang / 2) * axis / np.linalg.norm(axis)]


def ring_shape(rng, lo=0.6, hi=1.4):
    Rc = rng.uniform(lo, hi)
    return np.array([Rc, rng.uniform(0.06, 0.3) * Rc, 0.0])


def rigid(rng, xi, qi, xj, qj):
    q0 = Q.random_unit(rng, 1)[0]
    R0 = Q.to_matrix(q0[None])[0]
    t = rng.normal(size=3) * 2.0
    return R0 @ xi + t, Q.multiply(q0[None], qi[None])[0], R0 @ xj + t, Q.multiply(q0[None], qj[None])[0]


def sampled_linked(xi, qi, Rci, xj, qj, Rcj, n=20000):
    """Independent linking test by sampling: circle j crosses the disk of circle i an odd number of times."""
    Mi, Mj = Q.to_matrix(np.array([qi]))[0], Q.to_matrix(np.array([qj]))[0]
    a = 2 * np.pi * np.arange(n) / n
    P = xj - xi + Rcj * (np.cos(a)[:, None] * Mj[:, 0] + np.sin(a)[:, None] * Mj[:, 1])
    h = P @ Mi[:, 2]
    k = np.nonzero(np.sign(h) != np.sign(np.roll(h, -1)))[0]
    t = h[k] / (h[k] - np.roll(h, -1)[k])
    X = P[k] + t[:, None] * (np.roll(P, -1, axis=0)[k] - P[k])
    return int(np.sum(np.linalg.norm(X, axis=1) < Rci)) % 2 == 1


def cfg_random(rng):
    si, sj = ring_shape(rng), ring_shape(rng)
    d = rng.normal(size=3)
    xi = rng.normal(size=3)
    xj = xi + d / np.linalg.norm(d) * rng.uniform(0.3, 1.4) * (si[0] + sj[0] + si[1] + sj[1])
    return RING, si, xi, Q.random_unit(rng, 1)[0], RING, sj, xj, Q.random_unit(rng, 1)[0]


def cfg_separated(rng):
    """Random pair with separated tubes (rejection sampling on the oracle)."""
    while True:
        c = cfg_random(rng)
        if bf.ring_pair_oracle(*c)[0] > 1e-3:
            return c


def cfg_interlaced(rng):
    """Chainmail link: ring j stands roughly perpendicular to i and threads through its hole."""
    while True:
        si, sj = ring_shape(rng, 0.8, 1.2), ring_shape(rng, 0.8, 1.2)
        si[1], sj[1] = 0.1 * si[0], 0.1 * sj[0]
        c = rng.uniform(abs(si[0] - sj[0]) + 0.1, si[0] + sj[0] - 0.1)
        qj = Q.multiply(rot_q(rng.normal(size=3), rng.uniform(0, 0.3))[None], rot_q([1, 0, 0], np.pi / 2)[None])[0]
        qj = Q.multiply(qj[None], rot_q([0, 0, 1], rng.uniform(0, 2 * np.pi))[None])[0]
        qi = rot_q([0, 0, 1], rng.uniform(0, 2 * np.pi))
        xi, xj = np.zeros(3), np.array([c, 0.0, 0.0]) + 0.05 * rng.normal(size=3)
        if sampled_linked(xi, qi, si[0], xj, qj, sj[0]):
            xi, qi, xj, qj = rigid(rng, xi, qi, xj, qj)
            return RING, si, xi, qi, RING, sj, xj, qj


def shifted(cfg, target_D):
    """Move body j along the oracle normal so that the core distance becomes exactly target_D (the global
    minimum drops by exactly the shift: every other core distance drops by at most as much)."""
    ki, si, xi, qi, kj, sj, xj, qj = cfg
    sep, n, _, _, _ = bf.ring_pair_oracle(*cfg)
    ri = si[1] if ki == RING else si[0]
    rj = sj[1] if kj == RING else sj[0]
    D = sep + ri + rj
    return ki, si, xi, qi, kj, sj, xj + (D - target_D) * n, qj


def cfg_overlapping(rng):
    """Tubes interpenetrating (0 < D < r_i + r_j): negative separation with a well-defined normal."""
    c = cfg_separated(rng) if rng.uniform() < 0.5 else cfg_interlaced(rng)
    return shifted(c, rng.uniform(0.2, 0.9) * (c[1][1] + c[5][1]))        # D only decreases: exact


def cfg_touching(rng):
    c = cfg_separated(rng)
    return shifted(c, c[1][1] + c[5][1] + 10.0 ** -rng.uniform(3, 7) * rng.choice([-1.0, 1.0]))


def cfg_ring_sphere(rng, sphere_first=False):
    s = ring_shape(rng)
    x = rng.normal(size=3)
    q = Q.random_unit(rng, 1)[0]
    M = Q.to_matrix(q[None])[0]
    ang, rad, h = rng.uniform(0, 2 * np.pi), rng.uniform(0.0, 2.0) * s[0], rng.uniform(-1.5, 1.5) * s[0]
    xs = x + rad * (np.cos(ang) * M[:, 0] + np.sin(ang) * M[:, 1]) + h * M[:, 2]
    ss = np.array([rng.uniform(0.05, 0.6), 0.0, 0.0])
    qs = Q.random_unit(rng, 1)[0]
    if sphere_first:
        return SPHERE, ss, xs, qs, RING, s, x, q
    return RING, s, x, q, SPHERE, ss, xs, qs


def batch(cfgs):
    cols = list(zip(*cfgs))
    return [np.array(c) for c in cols]


def dispatch(cfgs, **kw):
    return pair_snsd(*batch(cfgs), **kw)


def swapped(cfgs):
    return [c[4:] + c[:4] for c in cfgs]


def check_identity(g, atol=1e-12):
    np.testing.assert_allclose(np.linalg.norm(g.normal, axis=1), 1.0, atol=1e-13)
    np.testing.assert_allclose(g.p_i - g.p_j, g.sep[:, None] * g.normal, atol=atol)
    np.testing.assert_allclose(np.einsum("ij,ij->i", g.normal, g.p_i - g.p_j), g.sep, atol=atol)


def on_surface(kind, shape, x, q, p):
    """Distance of p to the body's core minus the radius (0 on the surface)."""
    if kind == SPHERE:
        return np.linalg.norm(p - x) - shape[0]
    y = Q.to_matrix(np.array([q]))[0].T @ (p - x)
    return np.hypot(np.hypot(y[0], y[1]) - shape[0], y[2]) - shape[1]


def compare_with_oracle(cfgs, g, sep_tol=1e-10, vec_tol=2e-6):
    assert isinstance(g, ContactGeometry) and len(g) == len(cfgs)
    assert np.all(g.converged)
    n_vec = 0
    for k, c in enumerate(cfgs):
        sep, n, pi, pj, amb = bf.ring_pair_oracle(*c)
        scale = (c[1][0] if c[0] == RING else 0.0) + (c[5][0] if c[4] == RING else 0.0)
        assert abs(g.sep[k] - sep) <= sep_tol * scale, (k, g.sep[k], sep)
        if not amb:
            n_vec += 1
            np.testing.assert_allclose(g.normal[k], n, atol=vec_tol, err_msg=f"normal of pair {k}")
            np.testing.assert_allclose(g.p_i[k], pi, atol=vec_tol * scale, err_msg=f"p_i of pair {k}")
            np.testing.assert_allclose(g.p_j[k], pj, atol=vec_tol * scale, err_msg=f"p_j of pair {k}")
        # witness points on the own surfaces
        assert abs(on_surface(c[0], c[1], c[2], c[3], g.p_i[k])) <= 1e-12 * (1 + scale)
        assert abs(on_surface(c[4], c[5], c[6], c[7], g.p_j[k])) <= 1e-12 * (1 + scale)
    return n_vec


# ----------------------------------------------------------------------------------------------------------
# ring - ring
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gen,count", [(cfg_random, 10), (cfg_separated, 8), (cfg_interlaced, 10),
                                       (cfg_overlapping, 8), (cfg_touching, 6)])
def test_ring_ring_dispatch_vs_oracle(rng, gen, count):
    cfgs = [gen(rng) for _ in range(count)]
    g = dispatch(cfgs)
    n_vec = compare_with_oracle(cfgs, g)
    assert n_vec >= count // 2                      # most random pairs have an isolated minimiser
    check_identity(g)
    if gen is cfg_separated:
        assert np.all(g.sep > 0.0)
    if gen is cfg_interlaced:
        # interlaced rings: bounding spheres overlap heavily, but the tubes are apart and the pair is linked
        c = batch(cfgs)
        assert np.all(np.linalg.norm(c[2] - c[6], axis=1) < c[1][:, 0] + c[5][:, 0])
        assert np.all(g.sep > 0.0)
        assert np.all(rings_linked(c[2], c[3], c[1][:, 0], c[6], c[7], c[5][:, 0]))
    if gen is cfg_overlapping:
        assert np.all(g.sep < 0.0)
    # the dispatcher gives exactly the kernel's answer
    c = batch(cfgs)
    ref = ring_ring(c[2], c[3], c[1][:, 0], c[1][:, 1], c[6], c[7], c[5][:, 0], c[5][:, 1])
    np.testing.assert_array_equal(g.sep, ref.sep)
    np.testing.assert_array_equal(g.normal, ref.normal)


def test_ring_ring_swap_flips_normal(rng):
    cfgs = [cfg_separated(rng) for _ in range(6)] + [cfg_interlaced(rng) for _ in range(6)] + \
        [cfg_overlapping(rng) for _ in range(4)]
    g, h = dispatch(cfgs), dispatch(swapped(cfgs))
    np.testing.assert_allclose(h.sep, g.sep, atol=1e-12)
    np.testing.assert_allclose(h.normal, -g.normal, atol=1e-8)
    np.testing.assert_allclose(h.p_i, g.p_j, atol=1e-8)
    np.testing.assert_allclose(h.p_j, g.p_i, atol=1e-8)


def test_ring_ring_exact_perpendicular_link():
    """Ring i (Rc 1) in the xy plane at 0, ring j (Rc 0.6) in the xz plane at (0.7, 0, 0): closest centre-circle
    points (1, 0, 0) on i and (1.3, 0, 0) on j, D = 0.3 (see tests/test_torus.py)."""
    qj = rot_q([1, 0, 0], np.pi / 2)
    g = pair_snsd(RING, [1.0, 0.05, 0.0], np.zeros(3), ID, RING, [0.6, 0.05, 0.0], [0.7, 0.0, 0.0], qj)
    assert g.sep[0] == pytest.approx(0.2, abs=1e-13)
    np.testing.assert_allclose(g.normal[0], [-1.0, 0.0, 0.0], atol=1e-10)
    np.testing.assert_allclose(g.p_i[0], [1.05, 0.0, 0.0], atol=1e-10)
    np.testing.assert_allclose(g.p_j[0], [1.25, 0.0, 0.0], atol=1e-10)
    assert rings_linked(np.zeros(3), ID, 1.0, [0.7, 0.0, 0.0], qj, 0.6)[0]


# ----------------------------------------------------------------------------------------------------------
# ring - sphere (both orders)
# ----------------------------------------------------------------------------------------------------------
def test_ring_sphere_both_orders_vs_oracle(rng):
    rs = [cfg_ring_sphere(rng) for _ in range(10)]
    sr = [cfg_ring_sphere(rng, sphere_first=True) for _ in range(10)]
    cfgs = rs + sr
    order = rng.permutation(len(cfgs))                 # interleave the two orders in one call
    cfgs = [cfgs[k] for k in order]
    g = dispatch(cfgs)
    compare_with_oracle(cfgs, g)
    check_identity(g)
    # normal from j towards i: for (sphere i, ring j) it points from the ring towards the sphere
    h = dispatch(swapped(cfgs))
    np.testing.assert_allclose(h.sep, g.sep, atol=1e-14)
    np.testing.assert_allclose(h.normal, -g.normal, atol=1e-14)
    np.testing.assert_allclose(h.p_i, g.p_j, atol=1e-14)
    np.testing.assert_allclose(h.p_j, g.p_i, atol=1e-14)
    # same as the kernel on the (ring, sphere) orientation
    c = batch([x if x[0] == RING else x[4:] + x[:4] for x in cfgs])
    ref = ring_sphere(c[2], c[3], c[1][:, 0], c[1][:, 1], c[6], c[5][:, 0])
    flip = np.array([x[0] == SPHERE for x in cfgs])
    np.testing.assert_allclose(g.sep, ref.sep, atol=0)
    np.testing.assert_allclose(g.normal, np.where(flip[:, None], -ref.normal, ref.normal), atol=0)
    np.testing.assert_allclose(g.p_i, np.where(flip[:, None], ref.p_j, ref.p_i), atol=0)


def test_ring_sphere_exact_cases():
    # sphere above the centre circle point (1, 0, 0): sep = h - r - R, normal from the sphere (j) to the ring (i)
    g = pair_snsd(RING, [1.0, 0.1, 0.0], np.zeros(3), ID, SPHERE, [0.2, 0.0, 0.0], [1.0, 0.0, 0.5], ID)
    assert g.sep[0] == pytest.approx(0.2, abs=1e-15)
    np.testing.assert_allclose(g.normal[0], [0, 0, -1], atol=1e-15)
    np.testing.assert_allclose(g.p_i[0], [1.0, 0.0, 0.1], atol=1e-15)
    np.testing.assert_allclose(g.p_j[0], [1.0, 0.0, 0.3], atol=1e-15)
    # same with the sphere as body i: normal from the ring (j) to the sphere (i)
    g = pair_snsd(SPHERE, [0.2, 0.0, 0.0], [1.0, 0.0, 0.5], ID, RING, [1.0, 0.1, 0.0], np.zeros(3), ID)
    assert g.sep[0] == pytest.approx(0.2, abs=1e-15)
    np.testing.assert_allclose(g.normal[0], [0, 0, 1], atol=1e-15)
    np.testing.assert_allclose(g.p_i[0], [1.0, 0.0, 0.3], atol=1e-15)
    np.testing.assert_allclose(g.p_j[0], [1.0, 0.0, 0.1], atol=1e-15)
    # a small sphere threaded through the hole (centre on the axis): separated from the tube
    g = pair_snsd(SPHERE, [0.5, 0.0, 0.0], np.zeros(3), ID, RING, [1.0, 0.1, 0.0], np.zeros(3), ID)
    assert g.sep[0] == pytest.approx(0.4, abs=1e-15)
    check_identity(g)


# ----------------------------------------------------------------------------------------------------------
# ring - wall
# ----------------------------------------------------------------------------------------------------------
def test_ring_wall_vs_oracle(rng):
    m = 12
    shapes = np.array([ring_shape(rng) for _ in range(m)])
    x = rng.normal(size=(m, 3))
    q = Q.random_unit(rng, m)
    wp = rng.normal(size=(m, 3))
    wn = rng.normal(size=(m, 3)) * rng.uniform(0.5, 3.0, size=(m, 1))      # not unit: renormalised
    g = wall_snsd(RING, shapes, x, q, wp, wn)
    nw = wn / np.linalg.norm(wn, axis=1)[:, None]
    np.testing.assert_allclose(g.normal, nw, atol=1e-15)
    check_identity(g, atol=1e-12)
    for k in range(m):
        sep, pi, pj, amb = bf.ring_wall_oracle(shapes[k], x[k], q[k], wp[k], wn[k])
        assert g.sep[k] == pytest.approx(sep, abs=1e-11)
        assert not amb
        np.testing.assert_allclose(g.p_i[k], pi, atol=1e-6)
        np.testing.assert_allclose(g.p_j[k], pj, atol=1e-6)
        assert abs(on_surface(RING, shapes[k], x[k], q[k], g.p_i[k])) <= 1e-12
        assert (g.p_j[k] - wp[k]) @ nw[k] == pytest.approx(0.0, abs=1e-12)
    ref = ring_wall(x, q, shapes[:, 0], shapes[:, 1], wp, wn)
    np.testing.assert_allclose(g.sep, ref.sep, rtol=0, atol=1e-14)


def test_ring_wall_exact_tilted_and_flat():
    for beta in (0.0, 0.4, np.pi / 2):
        g = wall_snsd(RING, [1.2, 0.15, 0.0], [0.3, -0.2, 2.0], rot_q([1, 0, 0], beta), [0, 0, 0.5], [0, 0, 1])
        assert g.sep[0] == pytest.approx(1.5 - 1.2 * np.sin(beta) - 0.15, abs=1e-14)
        assert g.p_j[0, 2] == pytest.approx(0.5, abs=1e-14)


# ----------------------------------------------------------------------------------------------------------
# mixed batches, unsupported combinations, bad shapes
# ----------------------------------------------------------------------------------------------------------
def _non_ring_pairs(rng, count):
    out = []
    for _ in range(count):
        cfg = []
        for _side in range(2):
            k = rng.choice([SPHERE, SPHEROCYLINDER, ELLIPSOID])
            s = {SPHERE: [rng.uniform(0.3, 0.8), 0, 0], SPHEROCYLINDER: [rng.uniform(0.2, 0.5), rng.uniform(0.5, 2), 0],
                 ELLIPSOID: list(rng.uniform(0.3, 1.0, 3))}[k]
            cfg += [int(k), np.array(s, dtype=float), rng.normal(size=3) * 1.5, Q.random_unit(rng, 1)[0]]
        out.append(tuple(cfg))
    return out


def test_mixed_batch(rng):
    ring_cfgs = [cfg_separated(rng), cfg_interlaced(rng), cfg_overlapping(rng), cfg_interlaced(rng),
                 cfg_ring_sphere(rng), cfg_ring_sphere(rng, True), cfg_ring_sphere(rng, True)]
    other = _non_ring_pairs(rng, 10)
    cfgs = ring_cfgs + other
    perm = rng.permutation(len(cfgs))
    cfgs = [cfgs[k] for k in perm]
    g = dispatch(cfgs)
    assert np.all(g.converged) and np.all(np.isfinite(g.sep))
    is_ring = np.array([RING in (c[0], c[4]) for c in cfgs])
    # rows equal the homogeneous calls (the grouping by kind does not change any result)
    gr = dispatch([c for c, r in zip(cfgs, is_ring) if r])
    go = dispatch([c for c, r in zip(cfgs, is_ring) if not r])
    for a, b, msk in ((g, gr, is_ring), (g, go, ~is_ring)):
        np.testing.assert_array_equal(a.sep[msk], b.sep)
        np.testing.assert_array_equal(a.normal[msk], b.normal)
        np.testing.assert_array_equal(a.p_i[msk], b.p_i)
        np.testing.assert_array_equal(a.p_j[msk], b.p_j)
    # ring rows against the oracle, all rows satisfy sep = n.(p_i - p_j); the ring rows p_i - p_j = sep n
    rc = [c for c, r in zip(cfgs, is_ring) if r]
    compare_with_oracle(rc, gr)
    np.testing.assert_allclose(np.einsum("ij,ij->i", g.normal, g.p_i - g.p_j), g.sep, atol=1e-8)
    np.testing.assert_allclose(g.p_i[is_ring] - g.p_j[is_ring], g.sep[is_ring, None] * g.normal[is_ring],
                               atol=1e-12)
    # non-ring rows (separated ones) against the oracle's separation
    for k in np.nonzero(~is_ring)[0][:4]:
        s_bf, _ = bf.bruteforce_snsd(*cfgs[k])
        assert g.sep[k] == pytest.approx(s_bf, abs=2e-7)


def test_mixed_walls(rng):
    kinds = np.array([RING, SPHERE, ELLIPSOID, SPHEROCYLINDER, RING, RING])
    shapes = np.array([[1.0, 0.1, 0], [0.5, 0, 0], [0.8, 0.5, 0.3], [0.3, 1.0, 0], [0.7, 0.2, 0], [1.3, 0.05, 0]])
    x = rng.normal(size=(6, 3))
    q = Q.random_unit(rng, 6)
    g = wall_snsd(kinds, shapes, x, q, [0.0, 0.0, -1.0], [0.0, 0.0, 1.0])
    for k in range(6):
        h = wall_snsd(kinds[k], shapes[k], x[k], q[k], [0.0, 0.0, -1.0], [0.0, 0.0, 1.0])
        assert g.sep[k] == h.sep[0]
    rg = kinds == RING
    ref = ring_wall(x[rg], q[rg], shapes[rg, 0], shapes[rg, 1], [0.0, 0.0, -1.0], [0.0, 0.0, 1.0])
    np.testing.assert_allclose(g.sep[rg], ref.sep, rtol=0, atol=1e-14)
    check_identity(g)


@pytest.mark.parametrize("other", [ELLIPSOID, SPHEROCYLINDER])
def test_ring_with_ellipsoid_or_spherocylinder_raises(rng, other):
    shape = [0.5, 0.4, 0.3] if other == ELLIPSOID else [0.3, 1.0, 0.0]
    for order in (0, 1):
        cfgs = [cfg_separated(rng), (RING, np.array([1.0, 0.1, 0.0]), np.zeros(3), ID,
                                     other, np.array(shape), np.array([3.0, 0.0, 0.0]), ID)]
        if order:
            cfgs = swapped(cfgs)
        with pytest.raises(NotImplementedError, match=r"ring and a (ellipsoid|spherocylinder).*indices \[1\]"):
            dispatch(cfgs)


def test_bad_ring_shape_raises():
    with pytest.raises(ValueError, match="0 < r < Rc"):
        pair_snsd(RING, [1.0, 1.0, 0.0], np.zeros(3), ID, SPHERE, [0.3, 0, 0], [3.0, 0, 0], ID)
    with pytest.raises(ValueError, match="0 < r < Rc"):
        wall_snsd(RING, [1.0, 0.0, 0.0], np.zeros(3), ID, [0, 0, -3.0], [0, 0, 1.0])


def test_ring_not_converged_is_reported(rng):
    cfgs = [cfg_interlaced(rng) for _ in range(4)]
    g = dispatch(cfgs, max_iter=1, check=False)
    assert not np.all(g.converged)
    with pytest.raises(GeometryError):
        dispatch(cfgs, max_iter=1)


# ----------------------------------------------------------------------------------------------------------
# linking test used by the chainmail diagnostics
# ----------------------------------------------------------------------------------------------------------
def test_rings_linked_vs_sampling(rng):
    cfgs = [cfg_interlaced(rng) for _ in range(8)] + [cfg_separated(rng) for _ in range(16)]
    c = batch(cfgs)
    got = rings_linked(c[2], c[3], c[1][:, 0], c[6], c[7], c[5][:, 0])
    want = np.array([sampled_linked(x[2], x[3], x[1][0], x[6], x[7], x[5][0]) for x in cfgs])
    np.testing.assert_array_equal(got, want)
    assert got[:8].all()
    # symmetric in i and j
    np.testing.assert_array_equal(rings_linked(c[6], c[7], c[5][:, 0], c[2], c[3], c[1][:, 0]), got)
