"""Independent brute-force oracle for the contact geometry (tests and tools/ checks only; slow, one pair).

This module deliberately shares no code with the production kernels (no foot-point Newton, no support-
function formula, no segment clamping): every quantity is obtained by dense sampling followed by repeated
local "zoom" resampling around the best samples.

* every body surface is sampled as the image of a Fibonacci point set on the unit sphere under a continuous
  surjective map onto the surface (ellipsoid: ``x + R diag(e) w``; sphere: ``x + R w``; spherocylinder: the
  polar angle of w is mapped to the arc length of a meridian cap - cylinder - cap);
* support values ``max_{y in body} u.y`` and unsigned distances to the surface are minimised/maximised over
  the samples and then refined on shrinking parameter patches around the best samples (several candidates);
* core distances of spheres/spherocylinders: dense grid over the segment parameters, zoomed.

Definitions reproduced (docs/ARCHITECTURE.md): core distance minus radii (round pairs); ``sdf_E(c) - R``
(ellipsoid-sphere); ``min_t sdf_E(c + t a) - R`` (ellipsoid-spherocylinder); ``max_u [min_i u.y - max_j u.y]``
(ellipsoid-ellipsoid).  The sign of sdf comes from the implicit function of the ellipsoid.
Attainable accuracy is roughly 1e-9 relative to the body size (limited by the zoom depth).

Rings (torus (Rc, r), axis body z; shares no code with ``geometry/torus.py``): the separation is the distance
between the centre circles (ring-ring), of the sphere centre to the centre circle (ring-sphere) or of the wall
plane to the lowest centre-circle point (ring-wall), minus the radii.  Circle distances are screened on a dense
angle grid (ring-ring: all discrete local minima of the 2-D periodic grid), and the best candidates are
refined by grid zooming on direct point differences (:func:`ring_pair_oracle`, :func:`ring_wall_oracle`).
Accuracy about 1e-12 relative to the ring size; ``ambiguous`` flags a non-isolated minimiser (several
distinct minimisers with the same value, e.g. coaxial rings), where normal and witness points are not unique.
"""
import numpy as np

from ..bodies.shapes import SPHERE, SPHEROCYLINDER, ELLIPSOID, RING
from ..basics import quaternion


def fibonacci_sphere(n):
    """n nearly uniform unit vectors (golden-angle spiral)."""
    k = np.arange(n) + 0.5
    z = 1.0 - 2.0 * k / n
    rho = np.sqrt(np.maximum(0.0, 1.0 - z * z))
    ang = np.pi * (3.0 - np.sqrt(5.0)) * k
    return np.stack([rho * np.cos(ang), rho * np.sin(ang), z], axis=-1)


class Body:
    """One body for the oracle: kind code, shape (3,), centre (3,), quaternion (4,)."""

    def __init__(self, kind, shape, x, q):
        self.kind = int(kind)
        self.shape = np.asarray(shape, dtype=float)
        self.x = np.asarray(x, dtype=float)
        self.R = quaternion.to_matrix(np.asarray(q, dtype=float)[None, :])[0]

    def surface(self, w):
        """Map parameter unit vectors w (..., 3) to lab-frame surface points (..., 3)."""
        w = w / np.linalg.norm(w, axis=-1, keepdims=True)
        if self.kind == ELLIPSOID:
            yb = w * self.shape
        elif self.kind == SPHERE:
            yb = w * self.shape[0]
        else:
            Rr, L = self.shape[0], self.shape[1]
            h = 0.5 * L
            theta = np.arccos(np.clip(w[..., 2], -1.0, 1.0))
            phi = np.arctan2(w[..., 1], w[..., 0])
            arc = theta / np.pi * (np.pi * Rr + L)
            cap = 0.5 * np.pi * Rr
            top = arc < cap
            bot = arc > cap + L
            al = np.where(top, arc / Rr, np.where(bot, (arc - L) / Rr, 0.5 * np.pi))
            zc = np.where(top, h, np.where(bot, -h, h - (arc - cap)))
            yb = np.stack([Rr * np.sin(al) * np.cos(phi), Rr * np.sin(al) * np.sin(phi),
                           zc + Rr * np.cos(al)], axis=-1)
        return self.x + yb @ self.R.T

    def inside(self, p):
        """Implicit-function inside test for ellipsoids (p (..., 3))."""
        yb = (p - self.x) @ self.R
        return np.sum((yb / self.shape) ** 2, axis=-1) < 1.0

    def core(self, s):
        """Core point(s) at parameter s (sphere: the centre)."""
        a = self.R[:, 2]
        return self.x + np.asarray(s)[..., None] * a

    @property
    def half_length(self):
        return 0.5 * self.shape[1] if self.kind == SPHEROCYLINDER else 0.0


def _cross(a, b):
    return np.stack([a[:, 1] * b[:, 2] - a[:, 2] * b[:, 1],
                     a[:, 2] * b[:, 0] - a[:, 0] * b[:, 2],
                     a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]], axis=1)


def _patch(w0, rho, k):
    """k x k grid of parameter vectors around each unit vector w0 (P, 3) with radius rho (P,)."""
    w0 = w0 / np.linalg.norm(w0, axis=-1, keepdims=True)
    ref = np.where((np.abs(w0[:, 0]) < 0.6)[:, None], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0])
    e1 = _cross(w0, ref)
    e1 /= np.linalg.norm(e1, axis=1)[:, None]
    e2 = _cross(w0, e1)
    g = np.linspace(-1.0, 1.0, k)
    A, B = np.meshgrid(g, g, indexing="ij")
    A, B = A.ravel(), B.ravel()
    w = (w0[:, None, :] + rho[:, None, None] * (A[None, :, None] * e1[:, None, :]
                                                 + B[None, :, None] * e2[:, None, :]))
    return w / np.linalg.norm(w, axis=-1, keepdims=True)


def _refine(body, score, w_best, n_base, levels=14, k=9):
    """Maximise score(points (P, Q, 3)) -> (P, Q) over the surface parameter, zooming around w_best (P, 3)."""
    rho = np.full(w_best.shape[0], 2.5 * np.sqrt(4 * np.pi / n_base))
    best_w = w_best.copy()
    best_val = score(body.surface(best_w)[:, None, :])[:, 0]
    for _ in range(levels):
        W = _patch(best_w, rho, k)
        vals = score(body.surface(W))
        j = np.argmax(vals, axis=1)
        v = vals[np.arange(W.shape[0]), j]
        upd = v > best_val
        best_val = np.where(upd, v, best_val)
        best_w = np.where(upd[:, None], W[np.arange(W.shape[0]), j], best_w)
        rho = rho * 0.35
    return best_val, best_w


def support(body, U, n_base=3000, n_cand=1):
    """max_{y in body} u.y for each direction U (P, 3), by sampling + zoom."""
    U = np.atleast_2d(U)
    W0 = fibonacci_sphere(n_base)
    Y0 = body.surface(W0)
    vals = U @ Y0.T                                   # (P, N)
    cand = np.argpartition(-vals, n_cand, axis=1)[:, :n_cand]
    best = np.full(U.shape[0], -np.inf)
    for c in range(n_cand):
        v, _ = _refine(body, lambda Y: np.einsum("pqd,pd->pq", Y, U), W0[cand[:, c]], n_base)
        best = np.maximum(best, v)
    return best


def surface_distance(body, P, n_base=3000, n_cand=3):
    """Unsigned distance of points P (k, 3) to the body surface, by sampling + zoom."""
    P = np.atleast_2d(P)
    W0 = fibonacci_sphere(n_base)
    Y0 = body.surface(W0)
    d2 = np.sum((P[:, None, :] - Y0[None, :, :]) ** 2, axis=-1)
    cand = np.argpartition(d2, n_cand, axis=1)[:, :n_cand]
    best = np.full(P.shape[0], np.inf)
    for c in range(n_cand):
        v, _ = _refine(body, lambda Y: -np.sum((Y - P[:, None, :]) ** 2, axis=-1), W0[cand[:, c]], n_base)
        best = np.minimum(best, np.sqrt(-v))
    return best


def ellipsoid_sdf(body, P):
    d = surface_distance(body, P)
    return np.where(body.inside(np.atleast_2d(P)), -d, d)


def _zoom_1d(fun, lo, hi, n=33, levels=28):
    """Minimise a convex function of one variable on [lo, hi] by grid zooming (fun takes an array).

    The window shrinks by 3/8 per level, so kinks (the sdf is only piecewise smooth) are resolved too."""
    if hi <= lo:
        return float(fun(np.array([lo]))[0]), lo
    a, b = lo, hi
    best_v, best_t = np.inf, lo
    for _ in range(levels):
        t = np.linspace(a, b, n)
        v = fun(t)
        j = int(np.argmin(v))
        if v[j] < best_v:
            best_v, best_t = float(v[j]), float(t[j])
        dt = (b - a) / (n - 1)
        a, b = max(lo, best_t - 1.5 * dt), min(hi, best_t + 1.5 * dt)
        n = 9
        if b - a <= 1e-13 * (hi - lo):
            break
    return best_v, best_t


def _point_core_distance(P, body, levels=40, n=9):
    """min_t |P_k - core(t)| for points P (k, 3), grid zooming per point (vectorised over points)."""
    h = body.half_length
    k = P.shape[0]
    if h <= 0:
        return np.linalg.norm(P - body.x, axis=1)
    a = np.full(k, -h)
    b = np.full(k, h)
    best = np.full(k, np.inf)
    best_t = np.zeros(k)
    for _ in range(levels):
        t = a[:, None] + (b - a)[:, None] * np.linspace(0.0, 1.0, n)[None, :]
        d = np.linalg.norm(P[:, None, :] - body.core(t), axis=-1)
        j = np.argmin(d, axis=1)
        v = d[np.arange(k), j]
        upd = v < best
        best = np.where(upd, v, best)
        best_t = np.where(upd, t[np.arange(k), j], best_t)
        dt = (b - a) / (n - 1)
        a = np.maximum(-h, best_t - 1.5 * dt)
        b = np.minimum(h, best_t + 1.5 * dt)
    return best


def core_distance(bi, bj):
    """Distance between the cores (points/segments) of two round bodies: the convex function
    g(s) = min_t |core_i(s) - core_j(t)| is minimised by nested grid zooming (robust for nearly parallel
    segments, where the 2-D valley is very elongated)."""
    v, _ = _zoom_1d(lambda s: _point_core_distance(bi.core(s), bj), -bi.half_length, bi.half_length,
                    levels=40)
    return v


def ellipsoid_pair_sep(bi, bj, n_dirs=600, n_start=3, levels=11, k=5):
    """max_u [ -support_i(-u) - support_j(u) ] by direction sampling + zoom; returns (sep, u)."""
    F = lambda U: -support(bi, -U) - support(bj, U)
    U0 = fibonacci_sphere(n_dirs)
    # coarse screen with plain sampled supports (cheap), then accurate values for the best few
    W0 = fibonacci_sphere(2000)
    Yi, Yj = bi.surface(W0), bj.surface(W0)
    coarse = (U0 @ Yi.T).min(axis=1) - (U0 @ Yj.T).max(axis=1)
    starts = U0[np.argsort(-coarse)[:n_start]]
    best_v, best_u = -np.inf, None
    for u0 in starts:
        u = u0[None, :]
        v = F(u)[0]
        rho = np.array([1.5 * np.sqrt(4 * np.pi / n_dirs)])
        for _ in range(levels):
            Ucand = _patch(u, rho, k)[0]
            vals = F(Ucand)
            j = int(np.argmax(vals))
            if vals[j] > v:
                v, u = vals[j], Ucand[j][None, :]
            rho = rho * 0.4
        if v > best_v:
            best_v, best_u = v, u[0]
    return best_v, best_u


# ----------------------------------------------------------------------------------------------------------
# rings
# ----------------------------------------------------------------------------------------------------------
def _circle(x, q, Rc):
    """Callable ang (...) -> lab points (..., 3) of the centre circle of a ring."""
    M = quaternion.to_matrix(np.asarray(q, dtype=float)[None, :])[0]
    u, v = M[:, 0], M[:, 1]
    x = np.asarray(x, dtype=float)

    def pts(ang, origin=np.zeros(3)):
        ang = np.asarray(ang, dtype=float)
        return (x - origin) + Rc * (np.cos(ang)[..., None] * u + np.sin(ang)[..., None] * v)
    return pts


def _zoom_angles(fun, starts, width, levels=40, k=9, shrink=0.4):
    """Minimise fun(angles (K, d)) -> (K,) from each start (d,) by k^d grid zooming; returns [(value, angles)]."""
    d = len(starts[0])
    lin = np.linspace(-1.0, 1.0, k)
    offs = np.stack(np.meshgrid(*([lin] * d), indexing="ij"), axis=-1).reshape(-1, d)
    out = []
    for a0 in starts:
        a = np.asarray(a0, dtype=float)
        best = float(fun(a[None, :])[0])
        w = width
        for _ in range(levels):
            cand = a[None, :] + w * offs
            vals = fun(cand)
            j = int(np.argmin(vals))
            if vals[j] < best:
                best, a = float(vals[j]), cand[j]
            w *= shrink
        out.append((best, a))
    out.sort(key=lambda t: t[0])
    return out


def _ambiguous(results, scale, pts_of):
    """Another refined candidate with (nearly) the best value at a different point: minimiser not unique."""
    best, a = results[0]
    p0 = pts_of(a)
    for v, b in results[1:]:
        if abs(v - best) <= 1e-7 * scale and np.linalg.norm(pts_of(b) - p0) > 1e-4 * scale:
            return True
    return False


def ring_pair_oracle(kind_i, shape_i, x_i, q_i, kind_j, shape_j, x_j, q_j, n=1024, n_cand=8):
    """Brute-force ring-ring or ring-sphere geometry (either order).  Returns
    ``(sep, normal (from j to i), p_i, p_j, ambiguous)``; the normal is the unit vector between the closest
    core points (circle/circle or circle/centre), the witness points are those core points moved by the tube
    (sphere) radii along the normal."""
    ki, kj = int(kind_i), int(kind_j)
    si, sj = np.asarray(shape_i, dtype=float), np.asarray(shape_j, dtype=float)
    if RING not in (ki, kj) or not {ki, kj} <= {RING, SPHERE}:
        raise ValueError("ring_pair_oracle: needs a ring with a ring or a sphere")
    o = 0.5 * (np.asarray(x_i, dtype=float) + np.asarray(x_j, dtype=float))
    g = 2 * np.pi * np.arange(n) / n
    if ki == RING and kj == RING:
        ci, cj = _circle(x_i, q_i, si[0]), _circle(x_j, q_j, sj[0])
        Pi, Pj = ci(g, o), cj(g, o)
        d2 = np.sum(Pi ** 2, axis=1)[:, None] + np.sum(Pj ** 2, axis=1)[None, :] - 2.0 * Pi @ Pj.T
        loc = np.ones(d2.shape, dtype=bool)
        for di in (-1, 0, 1):
            for dj in (-1, 0, 1):
                if di or dj:
                    loc &= d2 <= np.roll(d2, (di, dj), axis=(0, 1))
        idx = np.nonzero(loc.ravel())[0]
        idx = idx[np.argsort(d2.ravel()[idx])][:n_cand]
        starts = [np.array([g[t // n], g[t % n]]) for t in idx]

        def fun(A):
            return np.linalg.norm(ci(A[:, 0], o) - cj(A[:, 1], o), axis=-1)
        res = _zoom_angles(fun, starts, 3.0 * 2 * np.pi / n)
        th, ph = res[0][1]
        a, b = ci(th), cj(ph)
        amb = _ambiguous(res, si[0] + sj[0], lambda A: np.concatenate([ci(A[0]), cj(A[1])]))
        r_a, r_b = si[1], sj[1]
        scale = si[0] + sj[0]
    else:
        ring_is_i = ki == RING
        xr, qr, sr = (x_i, q_i, si) if ring_is_i else (x_j, q_j, sj)
        xs, ss = (np.asarray(x_j, dtype=float), sj) if ring_is_i else (np.asarray(x_i, dtype=float), si)
        c = _circle(xr, qr, sr[0])
        dist = np.linalg.norm(c(g) - xs, axis=-1)
        loc = np.nonzero((dist <= np.roll(dist, 1)) & (dist <= np.roll(dist, -1)))[0]
        loc = loc[np.argsort(dist[loc])][:n_cand]

        def fun(A):
            return np.linalg.norm(c(A[:, 0]) - xs, axis=-1)
        res = _zoom_angles(fun, [np.array([g[t]]) for t in loc], 3.0 * 2 * np.pi / n)
        pc = c(res[0][1][0])
        amb = _ambiguous(res, sr[0], lambda A: c(A[0]))
        a, b = (pc, xs) if ring_is_i else (xs, pc)
        r_a, r_b = (sr[1], ss[0]) if ring_is_i else (ss[0], sr[1])
        scale = sr[0]
    d = a - b
    D = float(np.linalg.norm(d))
    amb = amb or D <= 1e-9 * scale
    nrm = d / max(D, 1e-300)
    return D - r_a - r_b, nrm, a - r_a * nrm, b + r_b * nrm, amb


def ring_wall_oracle(shape, x, q, wall_point, wall_normal, n=4096, n_cand=4):
    """Brute-force ring-wall geometry: ``(sep, p_i, p_j, ambiguous)`` with the normal = the wall normal."""
    shape = np.asarray(shape, dtype=float)
    nw = np.asarray(wall_normal, dtype=float)
    nw = nw / np.linalg.norm(nw)
    w = np.asarray(wall_point, dtype=float)
    c = _circle(x, q, shape[0])
    g = 2 * np.pi * np.arange(n) / n
    h = (c(g) - w) @ nw
    loc = np.nonzero((h <= np.roll(h, 1)) & (h <= np.roll(h, -1)))[0]
    loc = loc[np.argsort(h[loc])][:n_cand]
    res = _zoom_angles(lambda A: (c(A[:, 0]) - w) @ nw, [np.array([g[t]]) for t in loc], 3.0 * 2 * np.pi / n)
    p = c(res[0][1][0]) - shape[1] * nw
    sep = float((p - w) @ nw)
    amb = _ambiguous(res, shape[0], lambda A: c(A[0]))
    return sep, p, p - sep * nw, amb


def bruteforce_snsd(kind_i, shape_i, x_i, q_i, kind_j, shape_j, x_j, q_j):
    """Brute-force SNSD of one pair.  Returns ``(sep, normal)``; normal is None where the oracle does not
    produce one (round-round and sdf-based definitions: only sep is checked; rings: a non-isolated
    minimiser)."""
    if RING in (int(kind_i), int(kind_j)):
        sep, nrm, _, _, amb = ring_pair_oracle(kind_i, shape_i, x_i, q_i, kind_j, shape_j, x_j, q_j)
        return sep, None if amb else nrm
    bi = Body(kind_i, shape_i, x_i, q_i)
    bj = Body(kind_j, shape_j, x_j, q_j)
    round_i = bi.kind != ELLIPSOID
    round_j = bj.kind != ELLIPSOID
    if round_i and round_j:
        return core_distance(bi, bj) - bi.shape[0] - bj.shape[0], None
    if round_i or round_j:
        E, C = (bj, bi) if round_i else (bi, bj)
        v, _ = _zoom_1d(lambda t: ellipsoid_sdf(E, C.core(t)), -C.half_length, C.half_length)
        return v - C.shape[0], None
    return ellipsoid_pair_sep(bi, bj)


def min_sampled_distance(kind_i, shape_i, x_i, q_i, kind_j, shape_j, x_j, q_j, n=2000):
    """Plain dense-sampling distance (no zoom): an upper bound on the distance of separated bodies, accurate
    to O(spacing^2)."""
    bi = Body(kind_i, shape_i, x_i, q_i)
    bj = Body(kind_j, shape_j, x_j, q_j)
    W = fibonacci_sphere(n)
    Yi, Yj = bi.surface(W), bj.surface(W)
    c = 0.5 * (Yi.mean(axis=0) + Yj.mean(axis=0))
    Yi, Yj = Yi - c, Yj - c
    d2 = np.sum(Yi ** 2, axis=1)[:, None] + np.sum(Yj ** 2, axis=1)[None, :] - 2.0 * Yi @ Yj.T
    k = np.unravel_index(np.argmin(d2), d2.shape)
    return float(np.linalg.norm(Yi[k[0]] - Yj[k[1]]))
