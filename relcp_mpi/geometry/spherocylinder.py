"""Batched closest points between segments (spherocylinder cores) and points.

A spherocylinder with radius R and length L has the core segment ``c + t a``, ``t in [-L/2, L/2]``,
``a`` = body z axis in the lab frame.  A sphere is the degenerate core with half length 0.
The signed separation of two such bodies is the core-core distance minus both radii; the normal points from
the closest core point of j to that of i (docs/ARCHITECTURE.md).

Degenerate cases (all deterministic, all give a unit normal):

* parallel segments: the closest points are taken at the midpoint of the overlap interval of the projections
  (or at the nearest end points if the projections do not overlap);
* cores that touch or cross (distance ~ 0) and are not parallel: ``n = +-(a_i x a_j)/|a_i x a_j|``, the sign
  chosen so that ``n . (c_i - c_j) >= 0``;
* coincident parallel/point cores: a fixed vector perpendicular to the reference axis (body i's axis, else
  body j's), oriented so that ``n . (c_i - c_j) >= 0``; for two points ``e_z``.
"""
import numpy as np

from relcp_mpi.basics.rows import norm_rows
from relcp_mpi.geometry import spherocylinder_jit

_EPS = np.finfo(float).eps
_EZ = np.array([0.0, 0.0, 1.0])


def _dot(a, b):
    return np.einsum("ij,ij->i", a, b)


def _unit_or(v, fallback, tiny=0.0):
    nv = norm_rows(v)
    ok = nv > tiny
    out = np.where(ok[:, None], v / np.where(ok, nv, 1.0)[:, None], fallback)
    return out, ok


def perpendicular(a):
    """A deterministic unit vector perpendicular to each unit vector a (m, 3)."""
    a = np.asarray(a, dtype=float).reshape(-1, 3)
    ex = np.array([1.0, 0.0, 0.0])
    ey = np.array([0.0, 1.0, 0.0])
    use_x = np.abs(a[:, 0]) < 0.6
    w = np.where(use_x[:, None], ex, ey)
    v = np.cross(a, w)
    return v / norm_rows(v)[:, None]


def closest_points_segments(c1, a1, h1, c2, a2, h2):
    """Closest points between segments ``c1 + s a1, |s| <= h1`` and ``c2 + t a2, |t| <= h2`` (a1, a2 unit).

    Segments of half length 0 are points.  Returns ``s (m,), t (m,), P1 (m, 3), P2 (m, 3)``.
    Non-parallel segments: clamped solution of the 2x2 normal equations (Ericson's order of clamping) plus one
    step of iterative refinement on the residual; parallel segments: midpoint of the overlap interval.  Of the
    two candidate point pairs the closer one is kept (both are feasible, so this only ever helps).
    """
    return _closest(c1, a1, h1, c2, a2, h2)[:4]


def _closest(c1, a1, h1, c2, a2, h2):
    """:func:`closest_points_segments` plus the intermediates :func:`core_normal` needs again:
    ``s, t, P1, P2, r = c1 - c2, cr = a1 x a2, scale = |r| + h1 + h2``."""
    c1 = np.asarray(c1, dtype=float).reshape(-1, 3)
    c2 = np.asarray(c2, dtype=float).reshape(-1, 3)
    a1 = np.asarray(a1, dtype=float).reshape(-1, 3)
    a2 = np.asarray(a2, dtype=float).reshape(-1, 3)
    m = c1.shape[0]
    h1 = np.broadcast_to(np.asarray(h1, dtype=float), (m,))
    h2 = np.broadcast_to(np.asarray(h2, dtype=float), (m,))
    r = c1 - c2
    B = _dot(a1, a2)
    D = _dot(a1, r)
    E = _dot(a2, r)
    cr = np.cross(a1, a2)
    den = _dot(cr, cr)                       # 1 - B^2, accurate for near-parallel axes
    nonpar = den > 1e-28
    dsafe = np.where(nonpar, den, 1.0)

    # candidate A: general position (Ericson, Real-Time Collision Detection 5.1.9)
    s = np.where(nonpar, np.clip((B * E - D) / dsafe, -h1, h1), 0.0)
    t = B * s + E
    tc = np.clip(t, -h2, h2)
    tclamped = tc != t
    s = np.where(tclamped, np.clip(B * tc - D, -h1, h1), s)
    t = tc
    # one refinement step where both parameters are interior
    inter = nonpar & (np.abs(s) < h1) & (np.abs(t) < h2)
    w = r + s[:, None] * a1 - t[:, None] * a2
    Dw = _dot(a1, w)
    Ew = _dot(a2, w)
    ds = (B * Ew - Dw) / dsafe
    dt = B * ds + Ew
    s = np.where(inter, np.clip(s + ds, -h1, h1), s)
    t = np.where(inter, np.clip(t + dt, -h2, h2), t)
    PA1 = c1 + s[:, None] * a1
    PA2 = c2 + t[:, None] * a2
    dA = norm_rows(PA1 - PA2)

    # candidate B: parallel treatment (midpoint of the overlap of the projections of segment 2 on line 1)
    plo = -D - np.abs(B) * h2
    phi = -D + np.abs(B) * h2
    lo = np.maximum(plo, -h1)
    hi = np.minimum(phi, h1)
    overlap = lo <= hi
    sp = np.clip(0.5 * (lo + hi), -h1, h1)
    tp = np.clip(B * sp + E, -h2, h2)
    sp = np.where(overlap, sp, np.clip(B * tp - D, -h1, h1))
    PB1 = c1 + sp[:, None] * a1
    PB2 = c2 + tp[:, None] * a2
    dB = norm_rows(PB1 - PB2)

    scale = norm_rows(r) + h1 + h2
    useB = (~nonpar) | (dB <= dA + 4 * _EPS * scale) & (den < 1e-12) | (dB < dA)
    s = np.where(useB, sp, s)
    t = np.where(useB, tp, t)
    P1 = np.where(useB[:, None], PB1, PA1)
    P2 = np.where(useB[:, None], PB2, PA2)
    return s, t, P1, P2, r, cr, scale


def core_normal(c1, a1, h1, c2, a2, h2, s, t, P1, P2):
    """Unit normal from the core point of 2 to that of 1 with the deterministic degenerate fallbacks."""
    r = c1 - c2
    return _core_normal(a1, h1, a2, h2, s, t, P1 - P2, r, np.cross(a1, a2), norm_rows(r) + h1 + h2)[0]


def _core_normal(a1, h1, a2, h2, s, t, diff, r, cr, scale):
    """:func:`core_normal` from the intermediates of :func:`_closest` (``diff = P1 - P2``); returns
    ``(n, |diff|)``.  The crossing direction and the perpendicular fallback are evaluated only on the rows that
    use them (row-wise arithmetic on contiguous rows: the same bits as evaluating them everywhere)."""
    dist = norm_rows(diff)
    tiny = 64 * _EPS * np.maximum(scale, 1e-300)
    # crossing direction (only meaningful when both cores are segments and not parallel)
    seg1 = h1 > 0
    seg2 = h2 > 0
    crn = norm_rows(cr)
    cross_ok = seg1 & seg2 & (crn > 1e-10)
    interior = (np.abs(s) < h1) & (np.abs(t) < h2)
    n = diff / np.where(dist > 0, dist, 1.0)[:, None]
    use_cross = cross_ok & ((interior & (crn > 1e-6)) | (dist <= tiny))
    rows = np.flatnonzero(use_cross)
    if rows.size:
        cdir = cr[rows] / crn[rows, None]
        sgn = _dot(diff[rows], cdir)
        sgn = np.where(np.abs(sgn) > tiny[rows], sgn, _dot(r[rows], cdir))
        n[rows] = np.where((sgn < 0)[:, None], -cdir, cdir)
    # fallback for coincident points / collinear cores
    rows = np.flatnonzero((~use_cross) & (dist <= tiny))
    if rows.size:
        s1, s2 = seg1[rows], seg2[rows]
        ref = np.where(s1[:, None], a1[rows], np.where(s2[:, None], a2[rows], _EZ))
        perp = perpendicular(ref)
        perp = np.where((_dot(perp, r[rows]) < 0)[:, None], -perp, perp)
        n[rows] = np.where((s1 | s2)[:, None], perp, _EZ)
    return n, dist


def capsule_capsule(c_i, a_i, h_i, R_i, c_j, a_j, h_j, R_j):
    """Signed separation of two spherocylinders (h = L/2; h = 0 gives a sphere), batched.

    c: (m, 3) centres, a: (m, 3) unit axes, h, R: (m,).
    Returns ``sep, normal (from j to i), p_i, p_j``.
    With compiled kernels available (``spherocylinder_jit.use``: any batch with the AOT build) the batch runs the compiled twin of
    :mod:`.spherocylinder_jit` (same bits).
    """
    if len(np.shape(c_i)) == 2 and spherocylinder_jit.use(len(c_i)):
        return spherocylinder_jit.capsule_capsule(c_i, a_i, h_i, R_i, c_j, a_j, h_j, R_j)
    c_i = np.asarray(c_i, dtype=float).reshape(-1, 3)
    c_j = np.asarray(c_j, dtype=float).reshape(-1, 3)
    a_i = np.asarray(a_i, dtype=float).reshape(-1, 3)
    a_j = np.asarray(a_j, dtype=float).reshape(-1, 3)
    m = c_i.shape[0]
    h_i = np.broadcast_to(np.asarray(h_i, dtype=float), (m,))
    h_j = np.broadcast_to(np.asarray(h_j, dtype=float), (m,))
    R_i = np.broadcast_to(np.asarray(R_i, dtype=float), (m,))
    R_j = np.broadcast_to(np.asarray(R_j, dtype=float), (m,))
    s, t, P1, P2, r, cr, scale = _closest(c_i, a_i, h_i, c_j, a_j, h_j)
    n, dist = _core_normal(a_i, h_i, a_j, h_j, s, t, P1 - P2, r, cr, scale)
    sep = dist - R_i - R_j
    p_i = P1 - R_i[:, None] * n
    p_j = P2 + R_j[:, None] * n
    return sep, n, p_i, p_j
