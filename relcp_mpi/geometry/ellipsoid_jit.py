"""Compiled (numba) twins of the ellipsoid kernels' iterations, one pair / point at a time: the Riemannian Newton
ascent of the ellipsoid-ellipsoid SNSD (``ee_newton``) and the foot-point solve behind the closest point and
signed distance (``closest_point_body``, used by the sphere-, spherocylinder- and ellipsoid-ellipsoid kernels).

Optional: used by :func:`relcp_mpi.geometry.ellipsoid._ee_newton` and ``closest_point_body`` for any batch
with the AOT build and for batches of at least ``MIN_ROWS`` rows with numba's JIT, when a build of them is available (the ahead-of-time module of geometry/aot_build.py,
built by ``tools/setup.sh``; else numba's JIT: Debian ``python3-numba``, on a cluster ``pip install numba`` or
nothing; geometry/numba_switch.py) and ``RELCP_NUMBA`` is not ``0``.  Without it the batched numpy
iterations run; both give the same bits.

Why they are bit-identical to the numpy paths: the numpy kernels (``ellipsoid._ee_local`` / ``_ee_newton_iter``,
``closest_point_body``) evaluate every quantity with elementwise operations on the rows (no BLAS; the only
reductions are sums, minima and maxima of three numbers, summed left to right), so per pair it is a fixed
sequence of IEEE scalar operations.  This module performs the same operations in the same
order for one pair after the other (numba without ``fastmath``: no reassociation, no fused multiply-add; the
numpy error model: division by zero gives inf/nan as in numpy).  Iterating the pairs one by one instead of in
lockstep changes nothing per pair: the numpy iteration's active-set compaction only removes finished rows.
``tests/test_kernels_fast.py`` checks both paths against each other bit for bit.

What is gained: the numpy iteration pays ~150 array passes per Newton iteration over the active rows plus the
line search's masked copies; here a pair's whole ascent stays in registers (docs/BENCHMARKS.md, "Step kernels").
"""
import numpy as np

from .numba_switch import AVAILABLE, compiled_entries, enabled, use_compiled  # noqa: F401 (re-exported)

_EPS = np.finfo(float).eps

# numba is imported (and the kernels compiled or loaded from numba's cache) only when first used, so that
# processes that never evaluate an ellipsoid pair do not pay for the import (geometry/numba_switch.py)
MIN_ROWS = 256          # smaller batches take the numpy iteration (importing numba costs ~1 s per process)


def use(rows):
    """Whether a batch of ``rows`` rows takes the compiled kernels (numba_switch.use_compiled: the AOT build for
    any batch, numba's JIT from ``MIN_ROWS``)."""
    return use_compiled(rows, MIN_ROWS)


_JIT_NAMES = ("_mv", "_f", "_tgrad", "_newton_pair", "_newton_all", "_foot_axis", "_foot_all", "_support_any",
              "_general_lb_all")
_ENTRIES = ("_newton_all", "_foot_all", "_general_lb_all")
AOT_SIGNATURES = {      # the entry points' types for the AOT build (geometry/aot_build.py)
    "_newton_all": "void(f8[:, ::1], f8[:, ::1], f8, f8, i8, f8[:, ::1], b1[::1])",
    "_foot_all": "void(f8[:, ::1], f8[:, ::1], i8, f8[:, ::1], f8[::1], f8[:, ::1], b1[::1])",
    "_general_lb_all": "void(f8[:, ::1], f8[:, :, ::1], i8[::1], f8[:, ::1], i8[::1], i8[::1], f8[:, ::1], b1, "
                       "b1[::1], f8[::1])",
}

# body kinds (relcp_mpi.bodies.shapes; repeated here: kernel modules import nothing from the package)
_SPHERE, _ROD, _ELLIPSOID, _RING = 0, 1, 2, 3


def _compiled():
    """The compiled entry points (numba_switch.compiled_entries: the AOT module's, or numba's, compiled from the
    scalar functions below on first use)."""
    return compiled_entries(globals(), _JIT_NAMES, _ENTRIES)


def _mv(m0, m1, m2, m3, m4, m5, x, y, z):
    """M v for the packed symmetric M = (M00, M11, M22, M01, M02, M12), as ``ellipsoid._mv``."""
    return (m0 * x + m3 * y + m4 * z, m3 * x + m1 * y + m5 * z, m4 * x + m5 * y + m2 * z)


def _f(P, k, ux, uy, uz):
    """f(u) of pair k (``ellipsoid._ee_f``)."""
    ax, ay, az = _mv(P[3, k], P[4, k], P[5, k], P[6, k], P[7, k], P[8, k], ux, uy, uz)
    ri = np.sqrt(ux * ax + uy * ay + uz * az)
    bx, by, bz = _mv(P[9, k], P[10, k], P[11, k], P[12, k], P[13, k], P[14, k], ux, uy, uz)
    rj = np.sqrt(ux * bx + uy * by + uz * bz)
    return P[0, k] * ux + P[1, k] * uy + P[2, k] * uz - ri - rj


def _tgrad(P, k, ux, uy, uz):
    """|tangent gradient| of pair k at u (``ellipsoid._ee_tgrad``)."""
    ax, ay, az = _mv(P[3, k], P[4, k], P[5, k], P[6, k], P[7, k], P[8, k], ux, uy, uz)
    ri = np.sqrt(ux * ax + uy * ay + uz * az)
    bx, by, bz = _mv(P[9, k], P[10, k], P[11, k], P[12, k], P[13, k], P[14, k], ux, uy, uz)
    rj = np.sqrt(ux * bx + uy * by + uz * bz)
    qi = 1.0 / ri
    qj = 1.0 / rj
    gx = P[0, k] - ax * qi - bx * qj
    gy = P[1, k] - ay * qi - by * qj
    gz = P[2, k] - az * qi - bz * qj
    ug = ux * gx + uy * gy + uz * gz
    gx = gx - ug * ux
    gy = gy - ug * uy
    gz = gz - ug * uz
    return np.sqrt(gx * gx + gy * gy + gz * gz)


def _newton_pair(P, k, ux, uy, uz, gtol, htol, max_iter):
    """Newton ascent of pair k from u (``ellipsoid._ee_newton`` for one row); returns (ux, uy, uz, conv)."""
    dx, dy, dz = P[0, k], P[1, k], P[2, k]
    i0, i1, i2, i3, i4, i5 = P[3, k], P[4, k], P[5, k], P[6, k], P[7, k], P[8, k]
    j0, j1, j2, j3, j4, j5 = P[9, k], P[10, k], P[11, k], P[12, k], P[13, k], P[14, k]
    S = P[15, k]
    for it in range(max_iter + 1):
        # ---- local model (ellipsoid._ee_local) ----
        aix, aiy, aiz = _mv(i0, i1, i2, i3, i4, i5, ux, uy, uz)
        ajx, ajy, ajz = _mv(j0, j1, j2, j3, j4, j5, ux, uy, uz)
        ri = np.sqrt(ux * aix + uy * aiy + uz * aiz)
        rj = np.sqrt(ux * ajx + uy * ajy + uz * ajz)
        f = dx * ux + dy * uy + dz * uz - ri - rj
        qi = 1.0 / ri
        qj = 1.0 / rj
        gx = dx - aix * qi - ajx * qj
        gy = dy - aiy * qi - ajy * qj
        gz = dz - aiz * qi - ajz * qj
        ug = ux * gx + uy * gy + uz * gz
        s = 1.0 if np.abs(ux) < 0.6 else 0.0
        r = 1.0 - s
        e1x = -uz * r
        e1y = uz * s
        e1z = ux * r - uy * s
        inv = 1.0 / np.sqrt(e1x * e1x + e1y * e1y + e1z * e1z)
        e1x = e1x * inv
        e1y = e1y * inv
        e1z = e1z * inv
        e2x = uy * e1z - uz * e1y
        e2y = uz * e1x - ux * e1z
        e2z = ux * e1y - uy * e1x
        g1 = gx * e1x + gy * e1y + gz * e1z
        g2 = gx * e2x + gy * e2y + gz * e2z
        a0 = i0 * qi + j0 * qj
        a1 = i1 * qi + j1 * qj
        a2 = i2 * qi + j2 * qj
        a3 = i3 * qi + j3 * qj
        a4 = i4 * qi + j4 * qj
        a5 = i5 * qi + j5 * qj
        p, q, rr = _mv(a0, a1, a2, a3, a4, a5, e1x, e1y, e1z)
        c11 = e1x * p + e1y * q + e1z * rr
        c12 = e2x * p + e2y * q + e2z * rr
        p, q, rr = _mv(a0, a1, a2, a3, a4, a5, e2x, e2y, e2z)
        c22 = e2x * p + e2y * q + e2z * rr
        b1i = e1x * aix + e1y * aiy + e1z * aiz
        b2i = e2x * aix + e2y * aiy + e2z * aiz
        b1j = e1x * ajx + e1y * ajy + e1z * ajz
        b2j = e2x * ajx + e2y * ajy + e2z * ajz
        qi3 = qi * qi * qi
        qj3 = qj * qj * qj
        t = b1i * qi3
        h11 = t * b1i
        h12 = t * b2i
        h22 = b2i * b2i * qi3
        t = b1j * qj3
        h11 = h11 + t * b1j
        h12 = h12 + t * b2j
        h22 = h22 + b2j * b2j * qj3
        h11 = h11 - c11
        h11 = h11 - ug
        h22 = h22 - c22
        h22 = h22 - ug
        h12 = h12 - c12
        # ---- certification (ellipsoid._ee_newton_iter) ----
        gn = np.sqrt(g1 * g1 + g2 * g2)
        hd = 0.5 * (h11 - h22)
        lmax = 0.5 * (h11 + h22) + np.sqrt(hd * hd + h12 * h12)
        small = gn <= gtol * S
        if small and lmax <= htol * S and np.isfinite(f):
            return ux, uy, uz, True
        if it == max_iter:
            return ux, uy, uz, False
        # ---- shifted Newton step ----
        mu = lmax + 1e-8 * S
        if 0.0 >= mu:                      # np.maximum(0.0, mu) (NaN propagates)
            mu = 0.0
        a11 = h11 - mu
        a22 = h22 - mu
        det = a11 * a22 - h12 * h12
        x1 = -(a22 * g1 - h12 * g2) / det
        x2 = -(-h12 * g1 + a11 * g2) / det
        if small:
            va1, va2 = h12, lmax - h11
            vb1, vb2 = lmax - h22, h12
            if np.hypot(va1, va2) >= np.hypot(vb1, vb2):
                v1, v2 = va1, va2
            else:
                v1, v2 = vb1, vb2
            vn = np.hypot(v1, v2)
            if vn > 0:
                v1 = v1 / vn
                v2 = v2 / vn
            else:
                v1 = 1.0
                v2 = 0.0
            x1 = 0.1 * v1
            x2 = 0.1 * v2
        sq = np.sqrt(x1 * x1 + x2 * x2)
        if not (sq >= 0.5 or sq != sq):    # np.maximum(sq, 0.5)
            sq = 0.5
        cap = 0.5 / sq
        x1 = x1 * cap
        x2 = x2 * cap
        slope = g1 * x1 + g2 * x2
        sx = x1 * e1x + x2 * e2x
        sy = x1 * e1y + x2 * e2y
        sz = x1 * e1z + x2 * e2z
        slack = 8 * _EPS * S
        # ---- Armijo backtracking: the full step, then up to 39 halvings ----
        cx = ux + sx
        cy = uy + sy
        cz = uz + sz
        nc = np.sqrt(cx * cx + cy * cy + cz * cz)
        cx = cx / nc
        cy = cy / nc
        cz = cz / nc
        fc = _f(P, k, cx, cy, cz)
        acc_full = fc >= f + 1e-4 * slope - slack
        acc = acc_full
        if not acc:
            tt = 1.0
            for _ in range(39):
                tt *= 0.5
                cx = ux + tt * sx
                cy = uy + tt * sy
                cz = uz + tt * sz
                nc = np.sqrt(cx * cx + cy * cy + cz * cz)
                cx = cx / nc
                cy = cy / nc
                cz = cz / nc
                if _f(P, k, cx, cy, cz) >= f + 1e-4 * tt * slope - slack:
                    acc = True
                    break
            if not acc:                    # the line search failed: keep the point, leave uncertified
                return ux, uy, uz, False
        if acc_full and gn <= 1e-5 * S and fc > 0.0 and _tgrad(P, k, cx, cy, cz) <= gtol * S:
            return cx, cy, cz, True        # early certification at the accepted full step
        ux, uy, uz = cx, cy, cz
    return ux, uy, uz, False


def _newton_all(P, U, gtol, htol, max_iter, Uout, conv):
    for k in range(P.shape[1]):
        ux, uy, uz, c = _newton_pair(P, k, U[0, k], U[1, k], U[2, k], gtol, htol, max_iter)
        Uout[0, k] = ux
        Uout[1, k] = uy
        Uout[2, k] = uz
        conv[k] = c


def ee_newton(P, U, gtol, htol, max_iter):
    """Compiled ``ellipsoid._ee_newton``: packed pairs P (16, n), unit start directions U (3, n) ->
    (directions (3, n), conv (n,))."""
    P = np.ascontiguousarray(P, dtype=np.float64)
    U = np.ascontiguousarray(U, dtype=np.float64)
    n = P.shape[1]
    Uout = np.empty((3, n))
    conv = np.zeros(n, dtype=np.bool_)
    if n:
        _compiled()[0](P, U, float(gtol), float(htol), int(max_iter), Uout, conv)
    return Uout, conv


def _foot_axis(ec, yc, emin, em2):
    """beta, alpha and beta-scaled alpha of one axis (``ellipsoid.closest_point_body``)."""
    be = (ec - emin) * (ec + emin) / em2
    al = ec * yc / em2
    return be, al, (0.0 if be == 0.0 else al / be)


def _foot_all(e, y, max_iter, foot, sdf, normal, conv):
    """``ellipsoid.closest_point_body`` one point after the other (same operations, same order)."""
    eps8 = 8 * _EPS
    for k in range(e.shape[0]):
        e0, e1, e2 = e[k, 0], e[k, 1], e[k, 2]
        emin = min(e0, min(e1, e2))
        em2 = emin * emin
        be0, al0, qw0 = _foot_axis(e0, y[k, 0], emin, em2)
        be1, al1, qw1 = _foot_axis(e1, y[k, 1], emin, em2)
        be2, al2, qw2 = _foot_axis(e2, y[k, 2], emin, em2)
        g_without = qw0 * qw0 + qw1 * qw1 + qw2 * qw2 - 1.0
        pole = g_without <= 0.0 and not ((be0 == 0.0 and al0 != 0.0) or (be1 == 0.0 and al1 != 0.0)
                                         or (be2 == 0.0 and al2 != 0.0))
        lo = max(np.abs(al0) - be0, max(np.abs(al1) - be1, np.abs(al2) - be2))
        if 0.0 >= lo:                      # np.maximum(0.0, lo)
            lo = 0.0
        hi = np.sqrt(al0 * al0 + al1 * al1 + al2 * al2)
        if not (hi >= lo or hi != hi):     # np.maximum(hi, lo)
            hi = lo
        sigma = hi
        cv = pole
        if not pole:
            for _ in range(max_iter):
                sg = sigma
                d0, d1, d2 = be0 + sg, be1 + sg, be2 + sg
                v0, v1, v2 = al0 / d0, al1 / d1, al2 / d2
                phi = np.sqrt(v0 * v0 + v1 * v1 + v2 * v2)
                psi = 1.0 / phi - 1.0
                dpsi = (v0 * v0 / d0 + v1 * v1 / d1 + v2 * v2 / d2) / (phi * phi * phi)
                l = sg if psi <= 0.0 else lo
                u = sg if psi >= 0.0 else hi
                lo = l
                hi = u
                s_new = sg - psi / dpsi
                if not (s_new > l and s_new < u):
                    s_new = np.sqrt(l * u) if (l > 0.0 and u > 4.0 * l) else 0.5 * (l + u)
                exact = psi == 0.0
                if exact:
                    s_new = sg
                sigma = s_new
                if exact or np.abs(s_new - sg) <= eps8 * sg or u - l <= eps8 * u:
                    cv = True
                    break
        if pole:
            f0 = 0.0 if be0 == 0.0 else e0 * qw0
            f1 = 0.0 if be1 == 0.0 else e1 * qw1
            f2 = 0.0 if be2 == 0.0 else e2 * qw2
            mg = -g_without
            if 0.0 >= mg:
                mg = 0.0
            fm = emin * np.sqrt(mg)
            if be0 == 0.0:                 # the first minimal axis
                f0 = fm
            elif be1 == 0.0:
                f1 = fm
            else:
                f2 = fm
            sigma = 0.0
        else:
            d0, d1, d2 = be0 + sigma, be1 + sigma, be2 + sigma
            f0 = e0 * al0 / d0 if d0 > 0.0 else 0.0
            f1 = e1 * al1 / d1 if d1 > 0.0 else 0.0
            f2 = e2 * al2 / d2 if d2 > 0.0 else 0.0
        foot[k, 0] = f0
        foot[k, 1] = f1
        foot[k, 2] = f2
        g0 = f0 / (e0 * e0)
        g1 = f1 / (e1 * e1)
        g2 = f2 / (e2 * e2)
        gn = np.sqrt(g0 * g0 + g1 * g1 + g2 * g2)
        normal[k, 0] = g0 / gn
        normal[k, 1] = g1 / gn
        normal[k, 2] = g2 / gn
        sdf[k] = (sigma - 1.0) * em2 * gn
        conv[k] = cv


def closest_point_body(e, y, max_iter):
    """Compiled ``ellipsoid.closest_point_body``: semi-axes e (m, 3), body-frame points y (m, 3) ->
    (foot (m, 3), sdf (m,), normal (m, 3), converged (m,))."""
    e = np.ascontiguousarray(e, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    m = e.shape[0]
    foot, normal = np.empty((m, 3)), np.empty((m, 3))
    sdf, conv = np.empty(m), np.zeros(m, dtype=np.bool_)
    if m:
        _compiled()[1](e, y, int(max_iter), foot, sdf, normal, conv)
    return foot, sdf, normal, conv


def _support_any(kind, shape, R, i, u0, u1, u2):
    """Support value of body i along the unit u, as ``support.support`` computes it for a body set with
    ellipsoids: the body-frame component ``ub_c = (R_0c u0 + R_1c u1) + R_2c u2`` (einsum ``kji,kj->ki``),
    sphere R, rod R + (L/2) |ub_2|, ellipsoid |diag(a, b, c) ub| summed (s0 + s1) + s2 (``np.linalg.norm``),
    ring Rc sqrt(max(0, 1 - ub_2^2)) + r."""
    k = kind[i]
    if k == _SPHERE:
        return shape[i, 0]
    z = abs((R[i, 0, 2] * u0 + R[i, 1, 2] * u1) + R[i, 2, 2] * u2)
    if k == _ROD:
        return shape[i, 0] + 0.5 * shape[i, 1] * z
    if k == _ELLIPSOID:
        a = shape[i, 0] * ((R[i, 0, 0] * u0 + R[i, 1, 0] * u1) + R[i, 2, 0] * u2)
        b = shape[i, 1] * ((R[i, 0, 1] * u0 + R[i, 1, 1] * u1) + R[i, 2, 1] * u2)
        c = shape[i, 2] * z
        return np.sqrt((a * a + b * b) + c * c)
    w = 1.0 - z * z
    return shape[i, 0] * np.sqrt(w if (w != w or w > 0.0) else 0.0) + shape[i, 1]


def _general_lb_all(X, R, kind, shape, ia, ib, hint, has_hint, good, lb):
    """``support.separation_lower_bound`` of the pairs (ia, ib) of a body set with ellipsoids or rings, pair after
    pair (the same operations in the same order): X (m, 3), R (m, 3, 3), kind (m,), shape (m, 3); ``hint`` (k, 3)
    read where ``has_hint``; ``good`` (k,) the hints it uses (finite, non-zero norm); -> lb (k,)."""
    for k in range(ia.shape[0]):
        a, b = ia[k], ib[k]
        d0, d1, d2 = X[a, 0] - X[b, 0], X[a, 1] - X[b, 1], X[a, 2] - X[b, 2]
        dist = np.sqrt((d0 * d0 + d1 * d1) + d2 * d2)
        if dist > 0:
            u0, u1, u2 = d0 / dist, d1 / dist, d2 / dist
            v = (dist - _support_any(kind, shape, R, a, u0, u1, u2)) - _support_any(kind, shape, R, b, u0, u1, u2)
        else:
            v = -np.inf
        if has_hint and good[k]:
            h0, h1, h2 = hint[k, 0], hint[k, 1], hint[k, 2]
            hn = np.sqrt((h0 * h0 + h1 * h1) + h2 * h2)
            w0, w1, w2 = h0 / hn, h1 / hn, h2 / hn
            # np.einsum("ij,ij->i") of contiguous rows sums ((0 + p0) + p2) + p1 (spherocylinder_jit._dot)
            lb_h = ((((0.0 + w0 * d0) + w2 * d2) + w1 * d1) - _support_any(kind, shape, R, a, w0, w1, w2)) \
                - _support_any(kind, shape, R, b, w0, w1, w2)
            v = v if (v != v or v > lb_h) else lb_h
        lb[k] = v


def general_lower_bound(X, R, kind, shape, ia, ib, hint=None):
    """Compiled ``support.pair_lower_bound`` of a body set with ellipsoids or rings, the same bits: X (m, 3),
    R (m, 3, 3) rotation matrices, kind (m,), shape (m, 3), pairs (ia, ib) (k,), hint (k, 3) or None -> lb (k,)
    [L]."""
    k = len(ia)
    lb = np.empty(k)
    if k:
        has = hint is not None
        if has:
            h = np.ascontiguousarray(hint, dtype=np.float64)
            hn = np.sqrt((h[:, 0] * h[:, 0] + h[:, 1] * h[:, 1]) + h[:, 2] * h[:, 2])
            good = np.isfinite(hn) & (hn > 0)
        else:
            h, good = np.zeros((1, 3)), np.zeros(1, np.bool_)
        _compiled()[2](np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(R, dtype=np.float64),
                       np.ascontiguousarray(kind, dtype=np.int64), np.ascontiguousarray(shape, dtype=np.float64),
                       np.ascontiguousarray(ia, dtype=np.int64), np.ascontiguousarray(ib, dtype=np.int64), h, has,
                       good, lb)
    return lb
