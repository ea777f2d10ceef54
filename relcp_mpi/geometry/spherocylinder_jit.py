"""Compiled (numba) twins of the spherocylinder (rod) kernels, one pair after the other:

* :func:`capsule_capsule` of :func:`relcp_mpi.geometry.spherocylinder.capsule_capsule` (segment-segment closest
  points, the core normal with its degenerate fallbacks, separation and witness points);
* :func:`capsule_pairs_indexed`: the same for the pairs (ia, ib) of a rod bed, reading the body arrays by index
  (``contact.pair_snsd_indexed``, the stepper's pair geometry: no per-pair gathers of centres and matrices);
* :func:`end_rows`: ``contact.line_contacts.rod_pair_end_rows`` (skip bound, segment kernel, skin and duplicate
  filter) in one pass;
* :func:`round_lower_bound`: ``support.pair_lower_bound`` of sphere/rod sets (the support-function screen).

Optional (geometry/numba_switch.py): used for any batch with the AOT build, for batches of at least ``MIN_ROWS`` pairs with numba's JIT, when a build of them is
available (the ahead-of-time module of geometry/aot_build.py, else numba's JIT) and ``RELCP_NUMBA`` is not ``0``.  Both paths give the same bits; ``tests/test_kernels_rod_jit.py`` checks it on
random batches with the degenerate cases (parallel, crossing, coincident, collinear, point cores).

Why bit-identical: the numpy kernel is a fixed sequence of elementwise IEEE operations per pair (no BLAS), and
this module performs the same operations in the same order for one pair (numba without ``fastmath``: no
reassociation, no fused multiply-add; the numpy error model).  Where numpy's choices are not visible in the
expression they are reproduced explicitly:

* ``np.einsum("ij,ij->i", x, y)`` of (m, 3) rows sums in an order that depends on the memory layout: when both
  operands have contiguous rows, numpy's SIMD inner loop (2 lanes on the SSE3 baseline) gives
  ``((0 + x0 y0) + x2 y2) + x1 y1``, otherwise ``((0 + x0 y0) + x1 y1) + x2 y2`` (the leading ``0 +`` turns a
  -0 into +0, as the accumulator does).  The caller's axes are often strided views of rotation matrices, so
  the wrapper passes each axis array's layout flag (``_dot``);
* ``np.clip`` / ``np.maximum`` / ``np.minimum``: ``max(a, b) = a if (a is NaN or a > b) else b`` (likewise
  min), which fixes which signed zero wins a tie (``_max``, ``_min``, ``_clip``);
* ``norm_rows``: ``sqrt((v0 v0 + v1 v1) + v2 v2)``; ``np.cross``: ``a1 b2 - a2 b1`` etc., products first.

The layout rule of ``einsum`` is a property of the numpy build (the SIMD baseline of its inner loops); the
tests pin both layouts to the numpy kernel, so a numpy with another order shows up as a failing test, not as
silently different bits.  The kernels use only +, -, *, /, sqrt, abs and comparisons, which are correctly
rounded in numpy's runtime-dispatched SIMD loops as in LLVM, so the bits do not depend on the CPU either (unlike
a transcendental such as ``np.power``, whose AVX-512 loop is not libm's).

What is gained: the numpy kernels make about a hundred array passes over the pairs (plus the gathers of the
bodies' data and the masked copies of the branches); here a pair stays in registers (docs/BENCHMARKS.md,
"Compiled rod kernels").
"""
import numpy as np

from .numba_switch import AVAILABLE, compiled_entries, enabled, use_compiled  # noqa: F401 (the dispatch switch, re-exported)

_EPS = np.finfo(float).eps
MIN_ROWS = 256          # smaller batches take the numpy kernel (importing numba costs ~1 s per process)


def use(rows):
    """Whether a batch of ``rows`` rows takes the compiled kernels (numba_switch.use_compiled: the AOT build for
    any batch, numba's JIT from ``MIN_ROWS``)."""
    return use_compiled(rows, MIN_ROWS)


_JIT_NAMES = ("_max", "_min", "_clip", "_dot", "_norm", "_capsule_pair", "_store", "_capsule_all", "_capsule_indexed",
              "_point_core_bound", "_end_scales", "_end_rows_all", "_support", "_round_lb_all")
_ENTRIES = ("_capsule_all", "_capsule_indexed", "_end_scales", "_end_rows_all", "_round_lb_all")
# the entry points' types for the AOT build (geometry/aot_build.py); "A" (any layout) where the wrapper does not
# make the array contiguous
AOT_SIGNATURES = {
    "_capsule_all": "void(f8[:, :], f8[:, :], f8[::1], f8[::1], f8[:, :], f8[:, :], f8[::1], f8[::1], b1, b1, "
                    "f8[::1], f8[:, ::1], f8[:, ::1], f8[:, ::1])",
    "_capsule_indexed": "void(f8[:, ::1], f8[:, :, ::1], f8[:, ::1], i8[::1], i8[::1], f8[::1], f8[:, ::1], "
                        "f8[:, ::1], f8[:, ::1])",
    "_end_scales": "UniTuple(f8, 6)(f8[:, ::1], f8[:, ::1], i8[::1], i8[::1])",
    "_end_rows_all": "i8(f8[:, ::1], f8[:, :, ::1], f8[:, ::1], i8[::1], i8[::1], i8[::1], f8[:, ::1], f8[:, ::1], "
                     "f8, f8, f8, i8[::1], i8[::1], f8[::1], f8[:, ::1], f8[:, ::1], f8[:, ::1])",
    "_round_lb_all": "void(f8[:, ::1], f8[:], f8[:], f8[:], f8[:], f8[:], i8[::1], i8[::1], f8[:, ::1], b1, "
                     "f8[::1])",
}


def _compiled():
    """The compiled entry points (numba_switch.compiled_entries: the AOT module's, or numba's, compiled from the
    scalar functions below on first use)."""
    return compiled_entries(globals(), _JIT_NAMES, _ENTRIES)


def _max(a, b):
    """np.maximum of two floats (NaN in a propagates; a tie keeps b)."""
    return a if (a != a or a > b) else b


def _min(a, b):
    """np.minimum of two floats."""
    return a if (a != a or a < b) else b


def _clip(x, lo, hi):
    """np.clip(x, lo, hi) = minimum(maximum(x, lo), hi)."""
    return _min(_max(x, lo), hi)


def _dot(x0, x1, x2, y0, y1, y2, contig):
    """One row of ``np.einsum("ij,ij->i", x, y)``; ``contig``: both operands have contiguous rows (module
    docstring)."""
    if contig:
        return ((0.0 + x0 * y0) + x2 * y2) + x1 * y1
    return ((0.0 + x0 * y0) + x1 * y1) + x2 * y2


def _norm(v0, v1, v2):
    """One row of ``norm_rows``."""
    return np.sqrt((v0 * v0 + v1 * v1) + v2 * v2)


def _capsule_pair(c1x, c1y, c1z, a1x, a1y, a1z, h1, c2x, c2y, c2z, a2x, a2y, a2z, h2, f1, f2):
    """``spherocylinder._closest`` + ``_core_normal`` for one pair; f1, f2: contiguous rows of a1, a2.
    Returns (P1 (3), P2 (3), n (3), dist)."""
    eps4 = 4 * _EPS
    eps64 = 64 * _EPS
    # ---- _closest ----
    rx = c1x - c2x
    ry = c1y - c2y
    rz = c1z - c2z
    B = _dot(a1x, a1y, a1z, a2x, a2y, a2z, f1 and f2)
    D = _dot(a1x, a1y, a1z, rx, ry, rz, f1)
    E = _dot(a2x, a2y, a2z, rx, ry, rz, f2)
    crx = a1y * a2z - a1z * a2y
    cry = a1z * a2x - a1x * a2z
    crz = a1x * a2y - a1y * a2x
    den = _dot(crx, cry, crz, crx, cry, crz, True)
    nonpar = den > 1e-28
    dsafe = den if nonpar else 1.0
    # candidate A: general position
    s = _clip((B * E - D) / dsafe, -h1, h1) if nonpar else 0.0
    t = B * s + E
    tc = _clip(t, -h2, h2)
    if tc != t:
        s = _clip(B * tc - D, -h1, h1)
    t = tc
    inter = nonpar and abs(s) < h1 and abs(t) < h2
    wx = (rx + s * a1x) - t * a2x
    wy = (ry + s * a1y) - t * a2y
    wz = (rz + s * a1z) - t * a2z
    Dw = _dot(a1x, a1y, a1z, wx, wy, wz, f1)
    Ew = _dot(a2x, a2y, a2z, wx, wy, wz, f2)
    ds = (B * Ew - Dw) / dsafe
    dt = B * ds + Ew
    if inter:
        s, t = _clip(s + ds, -h1, h1), _clip(t + dt, -h2, h2)
    pa1x, pa1y, pa1z = c1x + s * a1x, c1y + s * a1y, c1z + s * a1z
    pa2x, pa2y, pa2z = c2x + t * a2x, c2y + t * a2y, c2z + t * a2z
    dA = _norm(pa1x - pa2x, pa1y - pa2y, pa1z - pa2z)
    # candidate B: parallel treatment
    aB = abs(B)
    plo = -D - aB * h2
    phi = -D + aB * h2
    lo = _max(plo, -h1)
    hi = _min(phi, h1)
    sp = _clip(0.5 * (lo + hi), -h1, h1)
    tp = _clip(B * sp + E, -h2, h2)
    if not (lo <= hi):
        sp = _clip(B * tp - D, -h1, h1)
    pb1x, pb1y, pb1z = c1x + sp * a1x, c1y + sp * a1y, c1z + sp * a1z
    pb2x, pb2y, pb2z = c2x + tp * a2x, c2y + tp * a2y, c2z + tp * a2z
    dB = _norm(pb1x - pb2x, pb1y - pb2y, pb1z - pb2z)
    scale = (_norm(rx, ry, rz) + h1) + h2
    if (not nonpar) or (dB <= dA + eps4 * scale and den < 1e-12) or dB < dA:
        s, t = sp, tp
        pa1x, pa1y, pa1z, pa2x, pa2y, pa2z = pb1x, pb1y, pb1z, pb2x, pb2y, pb2z
    # ---- _core_normal ----
    dx, dy, dz = pa1x - pa2x, pa1y - pa2y, pa1z - pa2z
    dist = _norm(dx, dy, dz)
    tiny = eps64 * _max(scale, 1e-300)
    seg1 = h1 > 0
    seg2 = h2 > 0
    crn = _norm(crx, cry, crz)
    interior = abs(s) < h1 and abs(t) < h2
    dd = dist if dist > 0 else 1.0
    nx, ny, nz = dx / dd, dy / dd, dz / dd
    if seg1 and seg2 and crn > 1e-10 and ((interior and crn > 1e-6) or dist <= tiny):
        # crossing direction
        ux, uy, uz = crx / crn, cry / crn, crz / crn
        sgn = _dot(dx, dy, dz, ux, uy, uz, True)
        if not (abs(sgn) > tiny):
            sgn = _dot(rx, ry, rz, ux, uy, uz, True)
        if sgn < 0:
            nx, ny, nz = -ux, -uy, -uz
        else:
            nx, ny, nz = ux, uy, uz
    elif dist <= tiny:
        # coincident points / collinear cores: spherocylinder.perpendicular of the reference axis
        if seg1:
            e0, e1, e2 = a1x, a1y, a1z
        elif seg2:
            e0, e1, e2 = a2x, a2y, a2z
        else:
            e0, e1, e2 = 0.0, 0.0, 1.0
        if abs(e0) < 0.6:
            w0, w1, w2 = 1.0, 0.0, 0.0
        else:
            w0, w1, w2 = 0.0, 1.0, 0.0
        v0 = e1 * w2 - e2 * w1
        v1 = e2 * w0 - e0 * w2
        v2 = e0 * w1 - e1 * w0
        nv = _norm(v0, v1, v2)
        v0, v1, v2 = v0 / nv, v1 / nv, v2 / nv
        if _dot(v0, v1, v2, rx, ry, rz, True) < 0:
            v0, v1, v2 = -v0, -v1, -v2
        if seg1 or seg2:
            nx, ny, nz = v0, v1, v2
        else:
            nx, ny, nz = 0.0, 0.0, 1.0
    return pa1x, pa1y, pa1z, pa2x, pa2y, pa2z, nx, ny, nz, dist


def _capsule_all(c1, a1, h1, R1, c2, a2, h2, R2, f1, f2, sep, nrm, p1, p2):
    """``spherocylinder.capsule_capsule`` pair after pair into the output arrays."""
    for k in range(c1.shape[0]):
        P1x, P1y, P1z, P2x, P2y, P2z, nx, ny, nz, dist = _capsule_pair(
            c1[k, 0], c1[k, 1], c1[k, 2], a1[k, 0], a1[k, 1], a1[k, 2], h1[k],
            c2[k, 0], c2[k, 1], c2[k, 2], a2[k, 0], a2[k, 1], a2[k, 2], h2[k], f1, f2)
        _store(k, dist, R1[k], R2[k], P1x, P1y, P1z, P2x, P2y, P2z, nx, ny, nz, sep, nrm, p1, p2)


def _rows_contiguous(a):
    """True when the rows of the (m, 3) array a are contiguous (numpy's einsum then takes its SIMD loop)."""
    return a.strides[1] == a.itemsize


def capsule_capsule(c_i, a_i, h_i, R_i, c_j, a_j, h_j, R_j):
    """Compiled ``spherocylinder.capsule_capsule``: (m, 3) centres and unit axes (any strides), (m,) half lengths
    and radii -> ``sep (m,), normal (m, 3) (from j to i), p_i (m, 3), p_j (m, 3)``, the same bits."""
    c_i = np.asarray(c_i, dtype=float).reshape(-1, 3)
    c_j = np.asarray(c_j, dtype=float).reshape(-1, 3)
    a_i = np.asarray(a_i, dtype=float).reshape(-1, 3)
    a_j = np.asarray(a_j, dtype=float).reshape(-1, 3)
    m = c_i.shape[0]
    h_i, h_j, R_i, R_j = (np.ascontiguousarray(np.broadcast_to(np.asarray(v, dtype=float), (m,)))
                          for v in (h_i, h_j, R_i, R_j))
    sep, n, p_i, p_j = np.empty(m), np.empty((m, 3)), np.empty((m, 3)), np.empty((m, 3))
    if m:
        _compiled()[0](c_i, a_i, h_i, R_i, c_j, a_j, h_j, R_j, _rows_contiguous(a_i), _rows_contiguous(a_j),
                       sep, n, p_i, p_j)
    return sep, n, p_i, p_j


def _store(k, dist, ri, rj, P1x, P1y, P1z, P2x, P2y, P2z, nx, ny, nz, sep, nrm, p1, p2):
    """Row k of capsule_capsule's outputs: sep = dist - R_i - R_j, p_i = P1 - R_i n, p_j = P2 + R_j n."""
    sep[k] = (dist - ri) - rj
    nrm[k, 0], nrm[k, 1], nrm[k, 2] = nx, ny, nz
    p1[k, 0], p1[k, 1], p1[k, 2] = P1x - ri * nx, P1y - ri * ny, P1z - ri * nz
    p2[k, 0], p2[k, 1], p2[k, 2] = P2x + rj * nx, P2y + rj * ny, P2z + rj * nz


def _capsule_indexed(X, Rm, shape, ia, ib, sep, nrm, p1, p2):
    """capsule_capsule of the rod pairs (ia, ib) of one body set, read from the body arrays (no gathers).
    The axes are taken as ``pair_snsd`` hands them over (masked copies, contiguous rows)."""
    for k in range(ia.shape[0]):
        i, j = ia[k], ib[k]
        P1x, P1y, P1z, P2x, P2y, P2z, nx, ny, nz, dist = _capsule_pair(
            X[i, 0], X[i, 1], X[i, 2], Rm[i, 0, 2], Rm[i, 1, 2], Rm[i, 2, 2], 0.5 * shape[i, 1],
            X[j, 0], X[j, 1], X[j, 2], Rm[j, 0, 2], Rm[j, 1, 2], Rm[j, 2, 2], 0.5 * shape[j, 1], True, True)
        _store(k, dist, shape[i, 0], shape[j, 0], P1x, P1y, P1z, P2x, P2y, P2z, nx, ny, nz, sep, nrm, p1, p2)


def capsule_pairs_indexed(X, Rm, shape, ia, ib):
    """``pair_snsd`` of the pairs (ia, ib) (k,) of a set of spherocylinders, bit for bit, without per-pair copies:
    X (m, 3) centres, Rm (m, 3, 3) rotation matrices, shape (m, 3) = (R, L, 0) -> sep (k,), normal (k, 3),
    p_i (k, 3), p_j (k, 3)."""
    k = len(ia)
    sep, n, p_i, p_j = np.empty(k), np.empty((k, 3)), np.empty((k, 3)), np.empty((k, 3))
    if k:
        _compiled()[1](np.ascontiguousarray(X, dtype=float), np.ascontiguousarray(Rm, dtype=float),
                       np.ascontiguousarray(shape, dtype=float), np.ascontiguousarray(ia, dtype=np.int64),
                       np.ascontiguousarray(ib, dtype=np.int64), sep, n, p_i, p_j)
    return sep, n, p_i, p_j


def _point_core_bound(wx, wy, wz, ax, ay, az, h):
    """``line_contacts._point_core_bound`` of one point: max(|w| - h, sqrt(max(|w|^2 - (w.a)^2, 0)))."""
    ww = _norm(wx, wy, wz)
    t = (wx * ax + wy * ay) + wz * az
    return _max(ww - h, np.sqrt(_max(ww * ww - t * t, 0.0)))


def _end_scales(X, shape, i, j):
    """max |X[i]|, max |X[j]|, max h_i, max h_j, max R_i, max R_j over the rod pairs (exact maxima)."""
    xi, xj, hi, hj, ri, rj = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    for p in range(i.shape[0]):
        a, b = i[p], j[p]
        for c in range(3):
            xi = _max(abs(X[a, c]), xi)
            xj = _max(abs(X[b, c]), xj)
        hi = _max(0.5 * shape[a, 1], hi)
        hj = _max(0.5 * shape[b, 1], hj)
        ri = _max(shape[a, 0], ri)
        rj = _max(shape[b, 0], rj)
    return xi, xj, hi, hj, ri, rj


def _end_rows_all(X, Rm, shape, i, j, rods, gpi, gpj, thr, skin, dup_tol, pair, sub, sep, nrm, p1, p2):
    """``line_contacts.rod_pair_end_rows`` after its rod selection: slot after slot, pair after pair, the
    skip test, the segment kernel (the axes as strided views there: left-to-right dots) and the skin / duplicate
    filter; the kept rows go to the outputs in the numpy function's order.  Returns their number."""
    cnt = 0
    for slot in range(1, 5):
        sgn = -1.0 if slot % 2 == 1 else 1.0
        for p in range(i.shape[0]):
            a, b = i[p], j[p]
            h_i, h_j = 0.5 * shape[a, 1], 0.5 * shape[b, 1]
            ri, rj = shape[a, 0], shape[b, 0]
            aix, aiy, aiz = Rm[a, 0, 2], Rm[a, 1, 2], Rm[a, 2, 2]
            ajx, ajy, ajz = Rm[b, 0, 2], Rm[b, 1, 2], Rm[b, 2, 2]
            if slot <= 2:               # end sphere of i against the core of j
                f = sgn * h_i
                ex, ey, ez = X[a, 0] + f * aix, X[a, 1] + f * aiy, X[a, 2] + f * aiz
                lb = _point_core_bound(ex - X[b, 0], ey - X[b, 1], ez - X[b, 2], ajx, ajy, ajz, h_j)
            else:                       # core of i against the end sphere of j
                f = sgn * h_j
                ex, ey, ez = X[b, 0] + f * ajx, X[b, 1] + f * ajy, X[b, 2] + f * ajz
                lb = _point_core_bound(ex - X[a, 0], ey - X[a, 1], ez - X[a, 2], aix, aiy, aiz, h_i)
            if not ((lb - ri) - rj <= thr):
                continue
            if slot <= 2:
                P1x, P1y, P1z, P2x, P2y, P2z, nx, ny, nz, dist = _capsule_pair(
                    ex, ey, ez, aix, aiy, aiz, 0.0, X[b, 0], X[b, 1], X[b, 2], ajx, ajy, ajz, h_j, False, False)
            else:
                P1x, P1y, P1z, P2x, P2y, P2z, nx, ny, nz, dist = _capsule_pair(
                    X[a, 0], X[a, 1], X[a, 2], aix, aiy, aiz, h_i, ex, ey, ez, ajx, ajy, ajz, 0.0, False, False)
            _store(cnt, dist, ri, rj, P1x, P1y, P1z, P2x, P2y, P2z, nx, ny, nz, sep, nrm, p1, p2)
            q = rods[p]
            scale = ((ri + rj) + h_i) + h_j
            same = (_norm(p1[cnt, 0] - gpi[q, 0], p1[cnt, 1] - gpi[q, 1], p1[cnt, 2] - gpi[q, 2])
                    + _norm(p2[cnt, 0] - gpj[q, 0], p2[cnt, 1] - gpj[q, 1], p2[cnt, 2] - gpj[q, 2])
                    <= dup_tol * scale)
            if sep[cnt] <= skin and not same:
                pair[cnt] = q
                sub[cnt] = slot
                cnt += 1
    return cnt


def end_rows(X, Rm, shape, i, j, rods, geo_p_i, geo_p_j, skin, dup_tol):
    """Compiled end-point rows of rod-rod pairs (``line_contacts.rod_pair_end_rows`` after its rod selection):
    bodies X (m, 3), Rm (m, 3, 3), shape (m, 3); rod pairs (i, j) (k,), their indices ``rods`` (k,) into the
    pair list with SNSD witness points geo_p_i, geo_p_j (p, 3).  Returns ``pair, sub, sep, normal, p_i, p_j``
    of the kept rows, the same bits and order as the numpy function."""
    X = np.ascontiguousarray(X, dtype=float)
    Rm = np.ascontiguousarray(Rm, dtype=float)
    shape = np.ascontiguousarray(shape, dtype=float)
    i, j, rods = (np.ascontiguousarray(v, dtype=np.int64) for v in (i, j, rods))
    _, _, scales, rows, _ = _compiled()
    xi, xj, hi, hj, ri, rj = scales(X, shape, i, j)
    # the numpy function's round-off margin, summed in its order
    margin = 1e-9 * (1.0 + xi + xj + hi + hj + ri + rj + abs(float(skin)))
    k = 4 * len(i)
    pair, sub = np.empty(k, np.int64), np.empty(k, np.int64)
    sep, n, p_i, p_j = np.empty(k), np.empty((k, 3)), np.empty((k, 3)), np.empty((k, 3))
    c = rows(X, Rm, shape, i, j, rods, np.ascontiguousarray(geo_p_i, dtype=float),
             np.ascontiguousarray(geo_p_j, dtype=float), skin + margin, float(skin), float(dup_tol),
             pair, sub, sep, n, p_i, p_j)
    return pair[:c], sub[:c], sep[:c], n[:c], p_i[:c], p_j[:c]


def _support(ax0, ax1, ax2, rad, half, i, u0, u1, u2):
    """Support value of round body i (sphere: half = 0) along the unit u: R + L/2 |a . u| (``support.pair_lower_bound``'s
    ``h``, sum order (p0 + p1) + p2)."""
    return rad[i] + half[i] * abs((ax0[i] * u0 + ax1[i] * u1) + ax2[i] * u2)


def _round_lb_all(X, ax0, ax1, ax2, rad, half, ia, ib, hint, has_hint, lb):
    """``support.pair_lower_bound`` of a sphere/rod set, pair after pair (same operations, same order)."""
    for k in range(ia.shape[0]):
        a, b = ia[k], ib[k]
        d0, d1, d2 = X[a, 0] - X[b, 0], X[a, 1] - X[b, 1], X[a, 2] - X[b, 2]
        dist = np.sqrt((d0 * d0 + d1 * d1) + d2 * d2)
        if dist > 0:
            u0, u1, u2 = d0 / dist, d1 / dist, d2 / dist
            v = (dist - _support(ax0, ax1, ax2, rad, half, a, u0, u1, u2)) \
                - _support(ax0, ax1, ax2, rad, half, b, u0, u1, u2)
        else:
            v = -np.inf
        if has_hint:
            h0, h1, h2 = hint[k, 0], hint[k, 1], hint[k, 2]
            hn = _norm(h0, h1, h2)
            if np.isfinite(hn) and hn > 0:
                w0, w1, w2 = h0 / hn, h1 / hn, h2 / hn
                lb_h = (_dot(w0, w1, w2, d0, d1, d2, True) - _support(ax0, ax1, ax2, rad, half, a, w0, w1, w2)) \
                    - _support(ax0, ax1, ax2, rad, half, b, w0, w1, w2)
                v = _max(v, lb_h)
        lb[k] = v


def round_lower_bound(X, ax, rad, half, ia, ib, hint=None):
    """Compiled ``support.pair_lower_bound`` of a set of spheres and spherocylinders, the same bits: X (m, 3),
    ax = 3 contiguous axis columns (m,), rad / half (m,) radii and half lengths (0 for spheres), pairs (ia, ib)
    (k,), hint (k, 3) or None -> lb (k,)."""
    k = len(ia)
    lb = np.empty(k)
    if k:
        has = hint is not None
        h = np.ascontiguousarray(hint, dtype=float) if has else np.zeros((1, 3))
        _compiled()[4](np.ascontiguousarray(X, dtype=float), ax[0], ax[1], ax[2], rad, half,
                       np.ascontiguousarray(ia, dtype=np.int64), np.ascontiguousarray(ib, dtype=np.int64),
                       h, has, lb)
    return lb
