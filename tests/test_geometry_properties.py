"""Structural properties of the contact geometry on random batches of every kind combination."""
import numpy as np
import pytest

from relcp_mpi.bodies.shapes import SPHERE, SPHEROCYLINDER, ELLIPSOID
from relcp_mpi.geometry import quaternion as Q
from relcp_mpi.geometry.contact import pair_snsd, GeometryError
from relcp_mpi.geometry.ellipsoid import closest_point_body

KINDS = [SPHERE, SPHEROCYLINDER, ELLIPSOID]
COMBOS = [(a, b) for a in KINDS for b in KINDS]


def random_shapes(rng, kind, m, aspect=4.0):
    s = np.zeros((m, 3))
    if kind == SPHERE:
        s[:, 0] = rng.uniform(0.3, 1.5, m)
    elif kind == SPHEROCYLINDER:
        s[:, 0] = rng.uniform(0.2, 0.8, m)
        s[:, 1] = rng.uniform(0.0, 4.0, m)
        s[rng.random(m) < 0.1, 1] = 0.0
    else:
        s[:] = rng.uniform(0.3, 1.0, (m, 3)) * rng.uniform(1.0, aspect, (m, 3))
    return s


def random_pairs(rng, ki, kj, m, aspect=4.0, spread=(0.1, 1.3)):
    si = random_shapes(rng, ki, m, aspect)
    sj = random_shapes(rng, kj, m, aspect)
    from relcp_mpi.bodies.shapes import bounding_radius
    reach = bounding_radius(np.full(m, ki), si) + bounding_radius(np.full(m, kj), sj)
    xi = rng.normal(size=(m, 3))
    d = rng.normal(size=(m, 3))
    d *= (rng.uniform(*spread, m) * reach / np.linalg.norm(d, axis=1))[:, None]
    xj = xi - d
    return si, xi, Q.random_unit(rng, m), sj, xj, Q.random_unit(rng, m)


def smooth_mask(ki, si, kj, sj, sep):
    """Pairs whose SNSD is evaluated at a smooth point.  For ellipsoid-spherocylinder pairs the minimiser of
    sdf_E(c + t a) can sit on a kink of sdf_E (core crossing the medial surface, only possible when the core
    enters the ellipsoid, sep < -R); there the normal is one of the one-sided normals and the capsule witness
    point c* - R n lies inside the capsule (documented limitation)."""
    ok = np.ones(sep.shape, dtype=bool)
    if ki == SPHEROCYLINDER and kj == ELLIPSOID:
        ok = sep + si[:, 0] > 0
    if kj == SPHEROCYLINDER and ki == ELLIPSOID:
        ok = sep + sj[:, 0] > 0
    return ok


def surface_residual(kind, shape, x, q, p):
    """0 when p is on the surface of the body."""
    R = Q.to_matrix(q)
    y = np.einsum("nji,nj->ni", R, p - x)
    res = np.empty(len(p))
    sph = kind == SPHERE
    res[sph] = np.linalg.norm(y[sph], axis=1) - shape[sph, 0]
    sc = kind == SPHEROCYLINDER
    h = 0.5 * shape[sc, 1]
    core = np.zeros((sc.sum(), 3))
    core[:, 2] = np.clip(y[sc, 2], -h, h)
    res[sc] = np.linalg.norm(y[sc] - core, axis=1) - shape[sc, 0]
    el = kind == ELLIPSOID
    res[el] = (np.linalg.norm(y[el] / shape[el], axis=1) - 1.0) * shape[el].min(axis=1)
    return res


def outward_normal(kind, shape, x, q, p):
    R = Q.to_matrix(q)
    y = np.einsum("nji,nj->ni", R, p - x)
    g = np.empty_like(y)
    sph = kind == SPHERE
    g[sph] = y[sph]
    sc = kind == SPHEROCYLINDER
    h = 0.5 * shape[sc, 1]
    core = np.zeros((sc.sum(), 3))
    core[:, 2] = np.clip(y[sc, 2], -h, h)
    g[sc] = y[sc] - core
    el = kind == ELLIPSOID
    g[el] = y[el] / shape[el] ** 2
    g /= np.linalg.norm(g, axis=1)[:, None]
    return np.einsum("nij,nj->ni", R, g)


@pytest.mark.parametrize("ki,kj", COMBOS)
def test_contract_properties(rng, ki, kj):
    m = 300
    si, xi, qi, sj, xj, qj = random_pairs(rng, ki, kj, m)
    g = pair_snsd(ki, si, xi, qi, kj, sj, xj, qj)
    S = np.abs(xi - xj).max() + si.max() + sj.max()
    assert np.all(g.converged)
    assert 0.05 < np.mean(g.sep < 0) < 0.95            # the batch mixes overlapping and separated pairs
    np.testing.assert_allclose(np.linalg.norm(g.normal, axis=1), 1.0, atol=1e-13)
    np.testing.assert_allclose(np.einsum("ij,ij->i", g.normal, g.p_i - g.p_j), g.sep, atol=1e-11 * S)
    ok = smooth_mask(ki, si, kj, sj, g.sep)
    assert ok.mean() > 0.5
    ka, kb = np.full(m, ki)[ok], np.full(m, kj)[ok]
    si, xi, qi, sj, xj, qj = si[ok], xi[ok], qi[ok], sj[ok], xj[ok], qj[ok]
    g = type(g)(g.sep[ok], g.normal[ok], g.p_i[ok], g.p_j[ok], g.converged[ok])
    np.testing.assert_allclose(surface_residual(ka, si, xi, qi, g.p_i), 0.0, atol=1e-11 * S)
    np.testing.assert_allclose(surface_residual(kb, sj, xj, qj, g.p_j), 0.0, atol=1e-11 * S)
    # shared normal: the outward normal of i at p_i is -n, of j at p_j is +n (for capsules: where the
    # witness point lies on a smooth part, which holds for generic configurations)
    tol = 1e-6
    np.testing.assert_allclose(outward_normal(ka, si, xi, qi, g.p_i), -g.normal, atol=tol)
    np.testing.assert_allclose(outward_normal(kb, sj, xj, qj, g.p_j), g.normal, atol=tol)
    # separated pairs: sep is the distance between the witness points (zero duality gap)
    pos = g.sep > 0
    np.testing.assert_allclose(np.linalg.norm(g.p_i - g.p_j, axis=1)[pos], g.sep[pos], atol=1e-10 * S)


@pytest.mark.parametrize("ki,kj", COMBOS)
def test_swap_symmetry(rng, ki, kj):
    m = 200
    si, xi, qi, sj, xj, qj = random_pairs(rng, ki, kj, m)
    g = pair_snsd(ki, si, xi, qi, kj, sj, xj, qj)
    h = pair_snsd(kj, sj, xj, qj, ki, si, xi, qi)
    S = si.max() + sj.max()
    np.testing.assert_allclose(h.sep, g.sep, atol=1e-12 * S)
    np.testing.assert_allclose(h.normal, -g.normal, atol=1e-7)
    np.testing.assert_allclose(h.p_i, g.p_j, atol=1e-7 * S)
    np.testing.assert_allclose(h.p_j, g.p_i, atol=1e-7 * S)


@pytest.mark.parametrize("ki,kj", COMBOS)
def test_rigid_motion_invariance(rng, ki, kj):
    m = 100
    si, xi, qi, sj, xj, qj = random_pairs(rng, ki, kj, m)
    g = pair_snsd(ki, si, xi, qi, kj, sj, xj, qj)
    qr = Q.random_unit(rng, 1)
    Rm = Q.to_matrix(qr)[0]
    t = rng.normal(size=3) * 5
    mv = lambda x: x @ Rm.T + t
    qq = lambda q: Q.multiply(np.broadcast_to(qr, q.shape), q)
    h = pair_snsd(ki, si, mv(xi), qq(qi), kj, sj, mv(xj), qq(qj))
    S = si.max() + sj.max() + 5
    np.testing.assert_allclose(h.sep, g.sep, atol=1e-11 * S)
    ok = smooth_mask(ki, si, kj, sj, g.sep)
    np.testing.assert_allclose(h.normal[ok], g.normal[ok] @ Rm.T, atol=1e-7)
    np.testing.assert_allclose(h.p_i[ok], mv(g.p_i[ok]), atol=1e-7 * S)


@pytest.mark.parametrize("ki,kj", COMBOS)
def test_sep_rate_matches_D_column(rng, ki, kj):
    """d sep / dt = D^T U: first-order change of sep under small rigid motions of i and j."""
    m = 100
    si, xi, qi, sj, xj, qj = random_pairs(rng, ki, kj, m, spread=(0.4, 1.2))
    g = pair_snsd(ki, si, xi, qi, kj, sj, xj, qj)
    eps = 1e-6
    vi, wi, vj, wj = (rng.normal(size=(m, 3)) for _ in range(4))
    ri, rj = g.p_i - xi, g.p_j - xj
    rate = (np.einsum("ij,ij->i", g.normal, vi) + np.einsum("ij,ij->i", np.cross(ri, g.normal), wi)
            - np.einsum("ij,ij->i", g.normal, vj) - np.einsum("ij,ij->i", np.cross(rj, g.normal), wj))
    h = pair_snsd(ki, si, xi + eps * vi, Q.integrate(qi, wi, eps), kj, sj, xj + eps * vj, Q.integrate(qj, wj, eps))
    k = pair_snsd(ki, si, xi - eps * vi, Q.integrate(qi, wi, -eps), kj, sj, xj - eps * vj,
                  Q.integrate(qj, wj, -eps))
    fd = (h.sep - k.sep) / (2 * eps)
    # kinks (e.g. crossing capsule cores) are measure-zero; allow a few outliers
    good = np.abs(fd - rate) < 1e-4 * (1 + np.abs(rate))
    assert good.mean() > 0.97, np.sort(np.abs(fd - rate))[-5:]


def test_foot_point_solver_extremes(rng):
    m = 4000
    e = np.exp(rng.uniform(np.log(0.01), np.log(10.0), (m, 3)))
    e[:50] = [1.0, 1.0, 1.0]                                # spheres
    e[50:100] = [2.0, 1.0, 1.0]                             # spheroids (double minor axis)
    y = rng.normal(size=(m, 3)) * e * rng.uniform(0, 2.0, (m, 1))
    y[100:200, rng.integers(0, 3)] = 0.0                    # points on symmetry planes (medial / pole case)
    y[200:250] = 0.0                                        # centres
    y[250:300] *= 1e6                                       # far away
    foot, sdf, n, conv = closest_point_body(e, y)
    assert np.all(conv)
    np.testing.assert_allclose(np.linalg.norm(foot / e, axis=1), 1.0, atol=1e-13)
    inside = np.linalg.norm(y / e, axis=1) < 1
    assert np.all(sdf[inside] <= 0) and np.all(sdf[~inside] >= 0)
    scale = np.linalg.norm(y, axis=1) + e.max(axis=1)
    err = np.abs(np.abs(sdf) - np.linalg.norm(y - foot, axis=1)) / scale
    assert err.max() <= 1e-13, (err.max(), np.argmax(err))
    # y - foot is along the normal (foot is a critical point of the distance)
    r = y - foot
    cr = np.linalg.norm(np.cross(r, n), axis=1)
    assert np.max(cr / scale) <= 1e-9, (np.max(cr / scale), np.argmax(cr / scale))
    # nearest: no sampled surface point is closer (1000 samples per body, first 300 bodies)
    w = rng.normal(size=(1000, 3))
    w /= np.linalg.norm(w, axis=1)[:, None]
    for k in range(0, 300, 30):
        pts = w * e[k]
        dmin = np.linalg.norm(pts - y[k], axis=1).min()
        assert abs(sdf[k]) <= dmin + 1e-12 * scale[k]


def test_non_convergence_path(rng):
    m = 60
    si, xi, qi, sj, xj, qj = random_pairs(rng, ELLIPSOID, ELLIPSOID, m, aspect=6.0, spread=(0.05, 0.6))
    with pytest.raises(GeometryError) as err:
        pair_snsd(ELLIPSOID, si, xi, qi, ELLIPSOID, sj, xj, qj, max_iter=1)
    g = pair_snsd(ELLIPSOID, si, xi, qi, ELLIPSOID, sj, xj, qj, max_iter=1, check=False)
    bad = np.nonzero(~g.converged)[0]
    assert bad.size > 0
    np.testing.assert_array_equal(err.value.pairs, bad)
    assert str(bad[0]) in str(err.value)
    # with the default iteration cap the same batch converges
    assert np.all(pair_snsd(ELLIPSOID, si, xi, qi, ELLIPSOID, sj, xj, qj).converged)
    # ellipsoid-spherocylinder path (1-D search) and mixed batches report the right indices
    kind_i = np.where(np.arange(m) % 2 == 0, ELLIPSOID, SPHEROCYLINDER)
    si2 = si.copy()
    si2[kind_i == SPHEROCYLINDER] = [0.3, 3.0, 0.0]
    g = pair_snsd(kind_i, si2, xi, qi, ELLIPSOID, sj, xj, qj, max_iter=1, check=False)
    assert np.any(~g.converged[kind_i == SPHEROCYLINDER])
    with pytest.raises(GeometryError):
        pair_snsd(kind_i, si2, xi, qi, ELLIPSOID, sj, xj, qj, max_iter=1)


def test_elongated_ellipsoids_converge(rng):
    for aspect in (10.0, 20.0):
        m = 400
        si = np.sort(rng.uniform(0.2, 1.0, (m, 3)), axis=1) * [1.0, 3.0, aspect]
        sj = np.sort(rng.uniform(0.2, 1.0, (m, 3)), axis=1) * [1.0, 3.0, aspect]
        si = rng.permuted(si, axis=1)
        sj = rng.permuted(sj, axis=1)
        xi = np.zeros((m, 3))
        d = rng.normal(size=(m, 3))
        xj = d * (rng.uniform(0.0, 1.1, m) * (si.max(1) + sj.max(1)) / np.linalg.norm(d, axis=1))[:, None]
        qi, qj = Q.random_unit(rng, m), Q.random_unit(rng, m)
        g = pair_snsd(ELLIPSOID, si, xi, qi, ELLIPSOID, sj, xj, qj)      # raises if any pair fails
        h = pair_snsd(ELLIPSOID, sj, xj, qj, ELLIPSOID, si, xi, qi)
        S = si.max(1) + sj.max(1)
        # both orders reach the same (global) maximum from different screening sets
        assert np.all(np.abs(g.sep - h.sep) <= 1e-10 * S)
        np.testing.assert_allclose(outward_normal(np.full(m, ELLIPSOID), si, xi, qi, g.p_i), -g.normal,
                                   atol=1e-7)


def test_bad_kind_rejected():
    with pytest.raises(ValueError):
        pair_snsd(7, [1, 0, 0], [[0, 0, 0]], [[1, 0, 0, 0]], 0, [1, 0, 0], [[3, 0, 0]], [[1, 0, 0, 0]])
