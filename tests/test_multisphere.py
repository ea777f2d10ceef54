"""Multi-sphere proxy contact model (LCP-MS baseline): proxy geometry and constraint rows."""
import numpy as np
import pytest

from relcp_mpi.bodies.shapes import SPHERE, SPHEROCYLINDER, ELLIPSOID, bounding_radius
from relcp_mpi.contact import multisphere as ms
from relcp_mpi.contact.multisphere import (sphere_proxy, proxy_counts, proxy_gap, multisphere_rows,
                                           multisphere_wall_rows, resolution_for_gap)
from relcp_mpi.geometry import quaternion
from relcp_mpi.geometry.contact import pair_snsd, wall_snsd
from relcp_mpi.geometry.ellipsoid import closest_point_body


# ------------------------------------------------------------------------------------------------ helpers
def fib(n):
    """n roughly uniform unit vectors."""
    k = np.arange(n) + 0.5
    z = 1.0 - 2.0 * k / n
    ph = np.pi * (1.0 + 5 ** 0.5) * k
    s = np.sqrt(1.0 - z * z)
    return np.stack([s * np.cos(ph), s * np.sin(ph), z], axis=1)


def body_sdf(kind, shape, y):
    """Exact signed distance of body-frame points y (N, 3) to one body."""
    if kind == SPHERE:
        return np.linalg.norm(y, axis=1) - shape[0]
    if kind == SPHEROCYLINDER:
        h = 0.5 * shape[1]
        zc = np.clip(y[:, 2], -h, h)
        return np.linalg.norm(y - np.stack([0 * zc, 0 * zc, zc], axis=1), axis=1) - shape[0]
    return closest_point_body(np.broadcast_to(shape, y.shape), y)[1]


def surface_samples(kind, shape, n_t=721, n_p=48):
    """Dense body-frame samples of the body surface (independent of the proxy construction)."""
    th = np.linspace(0.0, np.pi, n_t)
    ph = np.linspace(0.0, 2 * np.pi, n_p, endpoint=False)
    T, P = np.meshgrid(th, ph, indexing="ij")
    u = np.stack([np.sin(T) * np.cos(P), np.sin(T) * np.sin(P), np.cos(T)], axis=-1).reshape(-1, 3)
    if kind == SPHERE:
        return shape[0] * u
    if kind == ELLIPSOID:
        return u * shape
    R, L = shape[0], shape[1]
    z = np.linspace(-L / 2, L / 2, n_t)
    Z, P = np.meshgrid(z, ph, indexing="ij")
    cyl = np.stack([R * np.cos(P), R * np.sin(P), Z], axis=-1).reshape(-1, 3)
    caps = R * u + np.where(u[:, 2:3] >= 0, 1.0, -1.0) * np.array([0, 0, L / 2])
    return np.concatenate([cyl, caps])


def sampled_gap(kind, shape, resolution):
    off, rad, _ = sphere_proxy([kind], [shape], resolution)
    y = surface_samples(kind, np.asarray(shape, float))
    d = np.linalg.norm(y[:, None, :] - off[None], axis=2) - rad[None]
    return d.min(axis=1).max()


def random_bodies(rng, n, box):
    kinds = rng.integers(0, 3, n)
    shape = np.zeros((n, 3))
    shape[kinds == SPHERE, 0] = rng.uniform(0.3, 0.8, (kinds == SPHERE).sum())
    m = kinds == SPHEROCYLINDER
    shape[m, 0] = rng.uniform(0.2, 0.5, m.sum())
    shape[m, 1] = rng.uniform(0.5, 2.0, m.sum())
    m = kinds == ELLIPSOID
    ax = np.array([[1.6, 0.5, 0.5], [0.6, 0.6, 1.8], [1.0, 0.7, 0.4]])
    shape[m] = ax[rng.integers(0, 3, m.sum())]
    x = rng.uniform(0, box, (n, 3))
    q = quaternion.random_unit(rng, n)
    return kinds, shape, x, q


def close_pairs(kind, shape, x, skin):
    b = bounding_radius(kind, shape)
    i, j = np.triu_indices(len(kind), 1)
    keep = np.linalg.norm(x[i] - x[j], axis=1) <= b[i] + b[j] + skin
    return i[keep], j[keep]


# ------------------------------------------------------------------------------------------------ proxy
SHAPES = [(SPHERE, (0.7, 0, 0)), (SPHEROCYLINDER, (0.5, 3.0, 0)), (SPHEROCYLINDER, (0.4, 0.0, 0)),
          (ELLIPSOID, (4.0, 1.0, 1.0)), (ELLIPSOID, (1.0, 1.0, 4.0)), (ELLIPSOID, (3.0, 2.0, 1.0)),
          (ELLIPSOID, (1.0, 2.5, 1.5)), (ELLIPSOID, (1.3, 1.3, 1.3))]


@pytest.mark.parametrize("kind,shape", SHAPES)
@pytest.mark.parametrize("res", [1, 2, 5, 16])
def test_proxy_spheres_inside_body(kind, shape, res):
    off, rad, owner = sphere_proxy([kind], [shape], res)
    assert np.all(owner == 0) and np.all(rad > 0)
    u = fib(300)
    pts = (off[:, None, :] + rad[:, None, None] * u[None]).reshape(-1, 3)
    assert body_sdf(kind, np.asarray(shape, float), pts).max() <= 1e-12
    # every sphere touches the body surface (it is the largest ball at its centre)
    assert np.allclose(body_sdf(kind, np.asarray(shape, float), off), -rad, atol=1e-12)


def test_proxy_counts_and_layout():
    kind = [SPHERE, SPHEROCYLINDER, SPHEROCYLINDER, ELLIPSOID, ELLIPSOID]
    shape = [(1, 0, 0), (0.5, 2.0, 0), (0.5, 0.0, 0), (1, 1, 3), (1, 1, 1)]
    assert proxy_counts(kind, shape, 6).tolist() == [1, 6, 1, 6, 1]
    assert proxy_counts(kind, shape, [3, 4, 5, 7, 2]).tolist() == [1, 4, 1, 7, 1]
    off, rad, owner = sphere_proxy(kind, shape, 6)
    assert owner.tolist() == [0] + [1] * 6 + [2] + [3] * 6 + [4]
    # capsule: uniform on the segment, tips included, radius R
    assert np.allclose(off[1:7, 2], np.linspace(-1, 1, 6)) and np.allclose(off[1:7, :2], 0)
    assert np.allclose(rad[1:7], 0.5)
    # ellipsoid (1,1,3): centres on the body z axis (the longest), symmetric
    e = off[8:14]
    assert np.allclose(e[:, :2], 0) and np.allclose(e[:, 2], -e[::-1, 2]) and np.all(np.diff(e[:, 2]) > 0)
    # the layout half extent lies within the tip's curvature centre a - c^2/a
    assert e[-1, 2] <= 3 - 1 / 3 + 1e-12
    assert np.allclose(rad[14], 1.0) and np.allclose(off[14], 0)
    with pytest.raises(ValueError):
        sphere_proxy([SPHERE], [(1, 0, 0)], 0)


@pytest.mark.parametrize("kind,shape", [(ELLIPSOID, (4.0, 1.0, 1.0)), (ELLIPSOID, (1.0, 4.0, 1.0)),
                                        (SPHEROCYLINDER, (0.5, 3.0, 0.0))])
def test_gap_converges_monotonically(kind, shape):
    res = [2, 4, 8, 16]
    g = np.array([proxy_gap([kind], [shape], r)[0] for r in res])
    assert np.all(np.diff(g) < 0), g
    if kind == ELLIPSOID:
        assert g[-1] < 0.06          # aspect-4 spheroid, minor semi-axis 1: measured 0.0556 at resolution 16
    # the reported gap is the Hausdorff distance: check against independent dense 3-D surface sampling
    for r, gr in zip(res, g):
        gs = sampled_gap(kind, shape, r)
        assert gs <= gr + 1e-9
        assert gs >= 0.98 * gr - 1e-6
    if kind == SPHEROCYLINDER:
        R, L = shape[0], shape[1]
        h = L / (np.array(res) - 1)
        assert np.allclose(g, np.sqrt(R ** 2 + h ** 2 / 4) - R)


def test_gap_flat_ellipsoid_is_reported_honestly():
    # a line of spheres cannot fill a flat cross section: the gap tends to b - c, not 0
    g = [proxy_gap([ELLIPSOID], [(3.0, 2.0, 1.0)], r)[0] for r in (4, 16)]
    assert g[1] < g[0] and g[1] > 0.99
    assert abs(sampled_gap(ELLIPSOID, (3.0, 2.0, 1.0), 16) - g[1]) < 0.02 * g[1]


def test_resolution_for_gap_hand_cases():
    """Smallest proxy count whose roughness meets a target, on cases computed by hand."""
    # capsule (R, L): gap sqrt(R^2 + h^2/4) - R with h = L/(n-1) <= g  <=>  h <= 2 sqrt((R+g)^2 - R^2)
    R, L, g = 0.5, 3.0, 1e-3
    n_hand = int(np.ceil(L / (2 * np.sqrt((R + g) ** 2 - R ** 2)))) + 1          # = 49
    n, gap = resolution_for_gap([SPHEROCYLINDER], [(R, L, 0)], g)
    assert n == n_hand == 49 and gap <= g
    assert proxy_gap([SPHEROCYLINDER], [(R, L, 0)], n - 1)[0] > g
    # a sphere-like ellipsoid (1.2, 1, 1): one inscribed sphere of radius 1 at the centre leaves the tips 0.2
    # away, so any target >= 0.2 needs one sphere, and 0.2 is exactly the one-sphere gap
    assert proxy_gap([ELLIPSOID], [(1.2, 1.0, 1.0)], 1)[0] == pytest.approx(0.2, abs=1e-12)
    assert resolution_for_gap([ELLIPSOID], [(1.2, 1.0, 1.0)], 0.25)[0] == 1
    assert resolution_for_gap([ELLIPSOID], [(1.2, 1.0, 1.0)], 0.19)[0] >= 2
    # round bodies are one sphere: gap 0 at n = 1
    n, gap = resolution_for_gap([SPHERE, ELLIPSOID], [(0.7, 0, 0), (1, 1, 1)], 1e-9)
    assert n == 1 and gap == pytest.approx(0.0, abs=1e-12)      # rounding of the sphere-surface distances
    # several bodies: the worst one decides
    assert resolution_for_gap([SPHEROCYLINDER, SPHEROCYLINDER], [(R, L, 0), (R, L / 2, 0)], g)[0] == 49
    with pytest.raises(ValueError, match="still exceeds"):
        resolution_for_gap([ELLIPSOID], [(3.0, 2.0, 1.0)], 0.5, max_resolution=64)   # flat: gap -> b - c


def test_resolution_for_gap_ellipsoid_against_sampling():
    """The suspension's prolate ellipsoid (1, 0.5, 0.5): the count returned meets the target and one sphere
    fewer does not, both checked by dense independent surface sampling (a lower bound of the gap)."""
    shape = (1.0, 0.5, 0.5)
    k = 20
    target = float(np.sqrt(proxy_gap([ELLIPSOID], [shape], k)[0] * proxy_gap([ELLIPSOID], [shape], k + 1)[0]))
    n, gap = resolution_for_gap([ELLIPSOID], [shape], target)
    assert n == k + 1 and gap <= target
    assert sampled_gap(ELLIPSOID, shape, n) <= target
    assert sampled_gap(ELLIPSOID, shape, n - 1) > target          # sampling bounds the true gap from below
    # the gap decreases with the count over the whole range the search visits (its bisection relies on it)
    g = np.array([proxy_gap([ELLIPSOID], [shape], m)[0] for m in range(1, 41)])
    assert np.all(np.diff(g) < 0), g


# ------------------------------------------------------------------------------------------------ rows
def test_two_spheres_equal_pair_snsd(rng):
    for _ in range(5):
        kind = np.array([SPHERE, SPHERE])
        shape = np.array([[rng.uniform(0.3, 1), 0, 0], [rng.uniform(0.3, 1), 0, 0]])
        x = rng.normal(size=(2, 3))
        q = quaternion.random_unit(rng, 2)
        for res in (1, 8):
            out = multisphere_rows(kind, shape, x, q, [0], [1], res, skin=10.0)
            ref = pair_snsd(kind[0], shape[0], x[0], q[0], kind[1], shape[1], x[1], q[1])
            assert len(out["geo"]) == 1 and out["pair"].tolist() == [0] and out["sub"].tolist() == [0]
            for f in ("sep", "normal", "p_i", "p_j"):
                assert np.array_equal(getattr(out["geo"], f), getattr(ref, f)), f
            assert out["geo"].converged.all()


@pytest.mark.parametrize("n", [2, 4, 7])
def test_parallel_spherocylinders(rng, n):
    R, L, g = 0.5, 3.0, 0.1
    h = L / (n - 1)
    d = 2 * R + g
    kind = np.array([SPHEROCYLINDER, SPHEROCYLINDER])
    shape = np.array([[R, L, 0], [R, L, 0]])
    Q = quaternion.random_unit(rng, 1)                    # rotate the whole configuration
    x = quaternion.rotate(Q, np.array([[d, 0, 0], [0, 0, 0]])) + rng.normal(size=3)
    q = np.repeat(Q, 2, axis=0)
    ex = quaternion.rotate(Q, np.array([[1.0, 0, 0]]))[0]
    s1 = np.sqrt(d ** 2 + h ** 2) - 2 * R                 # diagonal neighbours (k, k+-1)
    s2 = np.sqrt(d ** 2 + 4 * h ** 2) - 2 * R             # (k, k+-2)
    # skin between g and s1: only the n facing sphere pairs, each exactly at the gap g (= the exact SNSD)
    out = multisphere_rows(kind, shape, x, q, [0], [1], n, skin=0.5 * (g + s1))
    geo = out["geo"]
    assert len(geo) == n
    assert np.allclose(geo.sep, g, atol=1e-12)
    assert np.allclose(geo.normal, ex, atol=1e-12)
    assert out["sub"].tolist() == [k * n + k for k in range(n)]
    ref = pair_snsd(kind[0], shape[0], x[0], q[0], kind[1], shape[1], x[1], q[1])
    assert np.isclose(geo.sep.min(), ref.sep[0], atol=1e-12)
    # skin between s1 and s2: also the diagonal neighbours at sqrt(d^2 + h^2) - 2R
    skin = 0.5 * (s1 + s2)
    out = multisphere_rows(kind, shape, x, q, [0], [1], n, skin=skin)
    sep = np.sort(out["geo"].sep)
    expect = np.sort(np.concatenate([np.full(n, g), np.full(2 * (n - 1), s1)]))
    assert sep.shape == expect.shape and np.allclose(sep, expect, atol=1e-12)
    k = out["sub"] // n, out["sub"] % n
    assert np.all(np.abs(k[0] - k[1]) <= 1)


def _check_rows(kind, shape, x, q, ia, ib, res, skin, out):
    geo = out["geo"]
    off, rad, owner = sphere_proxy(kind, shape, res)
    C = x[owner] + quaternion.rotate(q[owner], off)
    si, sj = out["sphere_i"], out["sphere_j"]
    assert np.all(owner[si] == ia[out["pair"]]) and np.all(owner[sj] == ib[out["pair"]])
    assert np.all(out["ia"] == ia[out["pair"]]) and np.all(out["ib"] == ib[out["pair"]])
    # sign convention: unit normal from j to i, sep = n.(p_i - p_j), witness points on the sphere surfaces
    assert np.allclose(np.linalg.norm(geo.normal, axis=1), 1.0, atol=1e-14)
    assert np.allclose(geo.sep, np.einsum("ij,ij->i", geo.normal, geo.p_i - geo.p_j), atol=1e-12)
    assert np.all(np.einsum("ij,ij->i", geo.normal, C[si] - C[sj]) > 0)
    assert np.allclose(np.linalg.norm(geo.p_i - C[si], axis=1), rad[si], atol=1e-12)
    assert np.allclose(np.linalg.norm(geo.p_j - C[sj], axis=1), rad[sj], atol=1e-12)
    assert np.all(geo.sep <= skin + 1e-12) and geo.converged.all()
    # sub ids: unique per body pair and = s_local * n_j + t_local
    cnt = proxy_counts(kind, shape, res)
    first = np.cumsum(cnt) - cnt
    assert np.array_equal(out["sub"], (si - first[owner[si]]) * cnt[owner[sj]] + (sj - first[owner[sj]]))
    key = out["pair"] * 10 ** 6 + out["sub"]
    assert np.unique(key).size == key.size


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_row_properties_random(seed):
    rng = np.random.default_rng(seed)
    kind, shape, x, q = random_bodies(rng, 30, 5.0)
    res, skin = 6, 1.5
    ia, ib = close_pairs(kind, shape, x, skin)
    assert ia.size > 20
    out = multisphere_rows(kind, shape, x, q, ia, ib, res, skin)
    _check_rows(kind, shape, x, q, ia, ib, res, skin, out)
    # deterministic; permuting / swapping the candidate list permutes / flips the rows consistently
    again = multisphere_rows(kind, shape, x, q, ia, ib, res, skin)
    for k in ("pair", "sub", "sphere_i", "sphere_j"):
        assert np.array_equal(out[k], again[k])
    assert np.array_equal(out["geo"].sep, again["geo"].sep)
    perm = rng.permutation(ia.size)
    o2 = multisphere_rows(kind, shape, x, q, ia[perm], ib[perm], res, skin)
    a = sorted(zip(out["sphere_i"], out["sphere_j"], out["geo"].sep))
    b = sorted(zip(o2["sphere_i"], o2["sphere_j"], o2["geo"].sep))
    assert a == b
    o3 = multisphere_rows(kind, shape, x, q, ib, ia, res, skin)
    b = sorted(zip(o3["sphere_j"], o3["sphere_i"], o3["geo"].sep))
    assert len(a) == len(b) and np.allclose([t[2] for t in a], [t[2] for t in b], atol=1e-14)
    # proxy is inside the bodies: for separated pairs min row sep >= true SNSD, and within the two gaps
    ref = pair_snsd(kind[ia], shape[ia], x[ia], q[ia], kind[ib], shape[ib], x[ib], q[ib])
    gap = proxy_gap(kind, shape, res)
    minsep = np.full(ia.size, np.inf)
    np.minimum.at(minsep, out["pair"], out["geo"].sep)
    sepd = ref.sep > 0
    assert np.all(minsep[sepd] >= ref.sep[sepd] - 1e-9)
    bound = ref.sep + gap[ia] + gap[ib]
    must = sepd & (bound <= skin)
    assert must.sum() > 5
    assert np.all(minsep[must] <= bound[must] + 1e-9)


def test_matches_brute_force_loop(rng):
    kind, shape, x, q = random_bodies(rng, 12, 3.0)
    res = np.where(np.arange(12) % 2 == 0, 3, 5)          # per-body resolution
    skin = 0.4
    ia, ib = close_pairs(kind, shape, x, skin)
    out = multisphere_rows(kind, shape, x, q, ia, ib, res, skin)
    off, rad, owner = sphere_proxy(kind, shape, res)
    C = x[owner] + quaternion.rotate(q[owner], off)
    ref = []
    for p, (i, j) in enumerate(zip(ia, ib)):
        S, T = np.nonzero(owner == i)[0], np.nonzero(owner == j)[0]
        for a, s in enumerate(S):
            for b, t in enumerate(T):
                dist = np.linalg.norm(C[s] - C[t])
                if dist - rad[s] - rad[t] <= skin:
                    ref.append((p, a * len(T) + b, dist - rad[s] - rad[t]))
    got = list(zip(out["pair"].tolist(), out["sub"].tolist(), out["geo"].sep.tolist()))
    assert [r[:2] for r in got] == [r[:2] for r in ref]
    assert np.allclose([r[2] for r in got], [r[2] for r in ref], atol=1e-13)


def test_chunked_expansion_identical(rng, monkeypatch):
    kind, shape, x, q = random_bodies(rng, 25, 4.0)
    ia, ib = close_pairs(kind, shape, x, 1.0)
    full = multisphere_rows(kind, shape, x, q, ia, ib, 7, 1.0)
    monkeypatch.setattr(ms, "CHUNK", 50)
    part = multisphere_rows(kind, shape, x, q, ia, ib, 7, 1.0)
    for k in ("pair", "sub", "sphere_i", "sphere_j"):
        assert np.array_equal(full[k], part[k])
    assert np.array_equal(full["geo"].p_i, part["geo"].p_i)


def test_empty_inputs():
    kind, shape = np.array([SPHERE, ELLIPSOID]), np.array([[1, 0, 0], [2, 1, 1]])
    x, q = np.array([[0, 0, 0], [10, 0, 0.]]), np.tile([1.0, 0, 0, 0], (2, 1))
    out = multisphere_rows(kind, shape, x, q, [], [], 4, 0.1)
    assert len(out["geo"]) == 0 and out["sub"].size == 0
    out = multisphere_rows(kind, shape, x, q, [0], [1], 4, 0.1)     # far apart: no rows
    assert len(out["geo"]) == 0 and out["geo"].normal.shape == (0, 3)
    w = multisphere_wall_rows(kind, shape, x, q, [], [], np.zeros((1, 3)), [[0, 0, 1.]], 4, 0.1)
    assert len(w["geo"]) == 0


def test_lever_arms_give_separation_rate(rng):
    """d sep/dt = D^T U with D columns [n; (p_i - x_i) x n], -[n; (p_j - x_j) x n] (rigid body motion)."""
    kind, shape, x, q = random_bodies(rng, 16, 3.0)
    ia, ib = close_pairs(kind, shape, x, 0.5)
    U = rng.normal(size=(16, 6))
    out = multisphere_rows(kind, shape, x, q, ia, ib, 5, 0.5)
    geo = out["geo"]
    i, j = out["ia"], out["ib"]
    n = geo.normal
    rate = np.einsum("ij,ij->i", n, U[i, :3]) + np.einsum("ij,ij->i", np.cross(geo.p_i - x[i], n), U[i, 3:]) \
        - np.einsum("ij,ij->i", n, U[j, :3]) - np.einsum("ij,ij->i", np.cross(geo.p_j - x[j], n), U[j, 3:])
    dt = 1e-6
    seps = []
    for s in (dt, -dt):
        xs, qs = x + s * U[:, :3], quaternion.integrate(q, U[:, 3:], s)
        o = multisphere_rows(kind, shape, xs, qs, ia, ib, 5, 10.0)
        key = o["pair"] * 1000 + o["sub"]
        idx = np.searchsorted(key, out["pair"] * 1000 + out["sub"])
        assert np.array_equal(key[idx], out["pair"] * 1000 + out["sub"])
        seps.append(o["geo"].sep[idx])
    fd = (seps[0] - seps[1]) / (2 * dt)
    assert len(geo) > 10
    assert np.allclose(fd, rate, atol=1e-6)


def test_wall_rows(rng):
    R, L, g, n = 0.5, 3.0, 0.2, 5
    wp, wn = np.array([[0, 0, -1.0]]), np.array([[0, 0, 2.0]])   # normal renormalised
    kind = np.array([SPHEROCYLINDER, SPHEROCYLINDER, ELLIPSOID])
    shape = np.array([[R, L, 0], [R, L, 0], [2.0, 0.5, 0.5]])
    # body 0 lying flat at height R + g above the wall, body 1 tilted, body 2 a random ellipsoid
    qflat = quaternion.from_rotation_vector(np.array([[np.pi / 2, 0, 0]]))[0]
    qtilt = quaternion.from_rotation_vector(np.array([[0.3, 0, 0]]))[0]
    q = np.stack([qflat, qtilt, quaternion.random_unit(rng, 1)[0]])
    x = np.array([[0, 0, -1 + R + g], [5, 0, -1 + 0.5 * L * np.cos(0.3) + R + g], [10, 0, 1.0]])
    out = multisphere_wall_rows(kind, shape, x, q, [0, 1, 2], [0, 0, 0], wp, wn, n, skin=0.1 + g)
    geo = out["geo"]
    flat = out["body"] == 0
    assert flat.sum() == n and np.allclose(geo.sep[flat], g) and out["sub"][flat].tolist() == list(range(n))
    assert np.allclose(geo.normal, [0, 0, 1.0])
    assert np.allclose(geo.sep, np.einsum("ij,ij->i", geo.normal, geo.p_i - geo.p_j), atol=1e-14)
    assert np.allclose(geo.p_j[:, 2], -1.0)
    tilt = out["body"] == 1
    assert out["sub"][tilt].tolist() == [0]           # only the lower tip sphere is within the skin
    ref = wall_snsd(kind, shape, x, q, wp[0], wn[0] / 2)
    assert np.isclose(geo.sep[tilt][0], ref.sep[1], atol=1e-12)   # the end sphere reproduces the cap
    # ellipsoid: proxy above the true lowest point by at most the proxy gap
    o = multisphere_wall_rows(kind, shape, x, q, [2], [0], wp, wn, n, skin=10.0)
    gap = proxy_gap(kind, shape, n)[2]
    assert o["geo"].sep.min() >= ref.sep[2] - 1e-12 and o["geo"].sep.min() <= ref.sep[2] + gap + 1e-12
    assert o["pair"].tolist() == [0] * n and o["sub"].tolist() == list(range(n))
