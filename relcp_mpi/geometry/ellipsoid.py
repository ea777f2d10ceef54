"""Batched ellipsoid kernels: closest point / signed distance, ellipsoid-sphere, ellipsoid-spherocylinder and
ellipsoid-ellipsoid signed separation (SNSD).

Ellipsoid E: centre x, rotation R (body -> lab), semi-axes e = (a, b, c) along body x, y, z;
``M = R diag(e)^2 R^T``.  Support function ``h_E(u) = x.u + sqrt(u^T M u)``, support point
``s_E(u) = x + M u / sqrt(u^T M u)``.

Closest point (body frame, point y): the foot point is ``x_k = e_k^2 y_k / (e_k^2 + t)`` with the Lagrange
multiplier t the unique root in ``t > -e_min^2`` of ``sum (e_k y_k / (e_k^2 + t))^2 = 1`` (outside t > 0,
inside t < 0).  We solve in the shifted, scaled variable ``sigma = (t + e_min^2) / e_min^2 > 0``, in which the
minimal-axis pole sits at sigma = 0 and stays representable for points arbitrarily close to the medial
plane, with a bracketed (safeguarded) Newton iteration on ``psi(sigma) = 1/phi(sigma) - 1``,
``phi = |(alpha_k / (beta_k + sigma))_k|`` (psi is nearly linear both near the pole and far away).  The
degenerate interior case where the root does not exist (point on the minimal-axis medial plane, deep inside)
is handled in closed form.

Ellipsoid-ellipsoid: ``sep = max_{|u|=1} f(u)``, ``f(u) = -h_i(-u) - h_j(u) = d.u - r_i(u) - r_j(u)`` with
``d = x_i - x_j`` and ``r(u) = sqrt(u^T M u)``; solved by a batched Riemannian Newton iteration on the unit
sphere with a shifted Hessian, step cap and Armijo backtracking.  A start is certified when the tangent
gradient is below ``tol * S`` (S = |d| + largest semi-axes) and the tangent Hessian is negative (semi)definite
(largest eigenvalue <= 1e-10 S; automatic where f > 0).  ``f = d.u - h_K(u)`` with h_K the support function
of the Minkowski body K = (E_i - x_i) + (E_j - x_j), so {f > 0} is geodesically convex and holds only the
unique maximiser: a pair with any direction of f > 0 (a screened direction, a foot-point normal or a hint) is
separated and needs a single Newton ascent, certified globally by the duality gap ``|p_i - p_j| - sep``
(below ``10 tol S``).  The other pairs (overlapping or nearly touching) get the multi-start Newton (centre
direction, both foot-point normals and 4 well separated screened directions); the best certified start is
returned and the pair is marked converged only if no other start found a larger f.
Screening (f at the centre direction, the +- principal axes and a 64-direction Fibonacci set) is done with
closed forms and a small GEMM on the packed upper triangles of M; the Newton iteration works on a
structure-of-arrays layout, compacts the active set every iteration and processes it in cache-sized blocks.
Optional warm start (``hint``): previous normals; see :func:`ellipsoid_vs_ellipsoid`.
"""
import numpy as np

from . import ellipsoid_jit

_EPS = np.finfo(float).eps


def _dot(a, b):
    return np.einsum("...i,...i->...", a, b)


def _matvec(M, v):
    if M.ndim == 3 and v.ndim == 2:
        return M[:, :, 0] * v[:, 0:1] + M[:, :, 1] * v[:, 1:2] + M[:, :, 2] * v[:, 2:3]
    return np.einsum("...ij,...j->...i", M, v)


# --------------------------------------------------------------------------------------------------------------
# closest point / signed distance
# --------------------------------------------------------------------------------------------------------------
def closest_point_body(e, y, max_iter=100):
    """Foot point on the ellipsoid ``sum (x_k/e_k)^2 = 1`` nearest to the body-frame points y, batched.

    e: (m, 3) semi-axes, y: (m, 3).  Returns ``foot (m, 3), sdf (m,), normal (m, 3), converged (m,)``
    where sdf is the exact signed distance (negative inside) and normal the unit outward normal at the foot.
    """
    e = np.asarray(e, dtype=float).reshape(-1, 3)
    y = np.asarray(y, dtype=float).reshape(-1, 3)
    m = y.shape[0]
    if ellipsoid_jit.use(m):      # compiled twin, same bits
        return ellipsoid_jit.closest_point_body(e, y, max_iter)
    emin = e.min(axis=1, keepdims=True)
    beta = (e - emin) * (e + emin) / emin ** 2          # >= 0, exactly 0 on the minimal axes
    alpha = e * y / emin ** 2
    ismin = beta == 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        qw = np.where(ismin, 0.0, alpha / np.where(ismin, 1.0, beta))
    g_without = np.sum(qw ** 2, axis=1) - 1.0
    pole = ~np.any(ismin & (alpha != 0.0), axis=1) & (g_without <= 0.0)

    lo = np.maximum(0.0, np.max(np.abs(alpha) - beta, axis=1))
    hi = np.sqrt(np.sum(alpha ** 2, axis=1))
    hi = np.maximum(hi, lo)
    sigma = hi.copy()
    conv = pole.copy()
    active = np.nonzero(~pole)[0]
    for _ in range(max_iter):
        if active.size == 0:
            break
        s = sigma[active]
        a = alpha[active]
        den = beta[active] + s[:, None]
        v = a / den
        phi = np.sqrt(np.sum(v * v, axis=1))
        psi = 1.0 / phi - 1.0
        # phi^3 as two products, not a power: numpy's power has its own SIMD code on some CPUs (AVX-512), which
        # differs in the last bits from libm's pow that the compiled twin would use
        dpsi = np.sum(v * v / den, axis=1) / (phi * phi * phi)
        l = np.where(psi <= 0.0, s, lo[active])
        u = np.where(psi >= 0.0, s, hi[active])
        lo[active] = l
        hi[active] = u
        with np.errstate(divide="ignore", invalid="ignore"):
            s_new = s - psi / dpsi
        bad = ~((s_new > l) & (s_new < u))
        bis = np.where((l > 0.0) & (u > 4.0 * l), np.sqrt(l * u), 0.5 * (l + u))
        s_new = np.where(bad, bis, s_new)
        exact = psi == 0.0
        s_new = np.where(exact, s, s_new)
        done = exact | (np.abs(s_new - s) <= 8 * _EPS * s) | (u - l <= 8 * _EPS * u)
        sigma[active] = s_new
        conv[active[done]] = True
        active = active[~done]

    # foot point
    den = beta + sigma[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        foot = np.where(den > 0.0, e * alpha / np.where(den > 0.0, den, 1.0), 0.0)
    if np.any(pole):
        ip = np.nonzero(pole)[0]
        fp = np.where(ismin[ip], 0.0, e[ip] * qw[ip])
        first = np.argmax(ismin[ip], axis=1)
        fp[np.arange(ip.size), first] = emin[ip, 0] * np.sqrt(np.maximum(0.0, -g_without[ip]))
        foot[ip] = fp
        sigma[ip] = 0.0
    grad = foot / e ** 2
    gn = np.linalg.norm(grad, axis=1)
    normal = grad / gn[:, None]
    sdf = (sigma - 1.0) * emin[:, 0] ** 2 * gn
    return foot, sdf, normal, conv


def closest_point(x_e, R_e, e, p, max_iter=100):
    """Lab-frame version of :func:`closest_point_body`: ellipsoid (x_e (m,3), R_e (m,3,3), e (m,3)),
    points p (m,3).  Returns ``foot (lab), sdf, outward normal (lab), converged``."""
    y = np.einsum("nji,nj->ni", R_e, p - x_e)
    foot_b, sdf, nb, conv = closest_point_body(e, y, max_iter=max_iter)
    return x_e + _matvec(R_e, foot_b), sdf, _matvec(R_e, nb), conv


def ellipsoid_sdf(x_e, R_e, e, p):
    """Exact signed distance of the points p (m, 3) to the ellipsoids (negative inside)."""
    return closest_point(x_e, R_e, e, p)[1]


# --------------------------------------------------------------------------------------------------------------
# ellipsoid vs sphere / spherocylinder (body A = the round body = i, body B = the ellipsoid = j)
# --------------------------------------------------------------------------------------------------------------
def sphere_vs_ellipsoid(c, R, x_e, R_e, e, max_iter=100):
    """Sphere i (centre c, radius R) against ellipsoid j.

    ``sep = sdf_E(c) - R``, normal = outward ellipsoid normal at the foot point (from j towards i).
    Returns ``sep, normal, p_i, p_j, converged``.
    """
    foot, sdf, n, conv = closest_point(x_e, R_e, e, c, max_iter=max_iter)
    sep = sdf - R
    p_i = c - R[:, None] * n
    return sep, n, p_i, foot, conv


def capsule_vs_ellipsoid(c, a, h, R, x_e, R_e, e, tol=1e-12, max_iter=100):
    """Spherocylinder i (core c + t a, |t| <= h, radius R) against ellipsoid j.

    ``sep = min_t sdf_E(c + t a) - R``: the sdf of a convex body is convex, so this is a 1-D convex
    minimisation.  We bracket the sign change of the derivative ``g(t) = n_E(t) . a`` (n_E = outward normal at
    the foot point, the gradient of sdf) and shrink the bracket with Illinois false position, falling back to
    bisection whenever a step shrinks the bracket by less than a half (robust at kinks of the sdf on the medial
    surface).  Converged when the bracket is below ``tol * S`` or |g| <= 1e-14.

    Witness points: ``p_j`` = foot point of the optimal core point c*, ``p_i = c* - R n``.  When the core is
    outside the ellipsoid (sep > -R) the sdf is C^1, ``n . a = 0`` at an interior optimum and p_i lies on the
    capsule surface with outward normal -n.  When the core enters the ellipsoid the optimum can sit on a kink
    of sdf_E (the core crossing the medial surface); then n is one of the one-sided foot normals and p_i lies
    inside the capsule (sep = n . (p_i - p_j) still holds exactly).
    Returns ``sep, normal (from j to i), p_i, p_j, converged``.
    """
    m = c.shape[0]
    S = np.max(e, axis=1) + 2 * h + R
    ttol = np.maximum(tol, 4 * _EPS) * S

    def evaluate(idx, t):
        foot, sdf, n, cv = closest_point(x_e[idx], R_e[idx], e[idx], c[idx] + t[:, None] * a[idx],
                                         max_iter=max_iter)
        return sdf, _dot(n, a[idx]), cv

    tl = -h.copy()
    th = h.copy()
    all_idx = np.arange(m)
    fl, gl, cvl = evaluate(all_idx, tl)
    fh, gh, cvh = evaluate(all_idx, th)
    conv = cvl & cvh
    tbest = np.where(fl <= fh, tl, th)
    fbest = np.minimum(fl, fh)
    left = (gl >= 0.0) | (h <= 0.0)
    right = (~left) & (gh <= 0.0)
    tbest = np.where(left, tl, np.where(right, th, tbest))
    done = left | right
    active = np.nonzero(~done)[0]
    Gl = gl.copy()
    Gh = gh.copy()
    side = np.zeros(m, dtype=np.int8)     # last updated side: -1 low, +1 high
    force_bis = np.zeros(m, dtype=bool)
    it_conv = np.zeros(m, dtype=bool)
    it_conv[done] = True
    for _ in range(max_iter):
        if active.size == 0:
            break
        a_l, a_h = tl[active], th[active]
        G_l, G_h = Gl[active], Gh[active]
        with np.errstate(divide="ignore", invalid="ignore"):
            tn = (a_l * G_h - a_h * G_l) / (G_h - G_l)
        width = a_h - a_l
        mid = 0.5 * (a_l + a_h)
        ok = np.isfinite(tn) & (tn > a_l + 0.01 * width) & (tn < a_h - 0.01 * width)
        tn = np.where(ok & ~force_bis[active], tn, mid)
        fn, gn, cvn = evaluate(active, tn)
        conv[active] &= cvn
        better = fn < fbest[active]
        fbest[active] = np.where(better, fn, fbest[active])
        tbest[active] = np.where(better, tn, tbest[active])
        go_low = gn < 0.0                  # minimiser lies above tn
        # Illinois: halve the stale end's value when the same side is updated twice
        sd = side[active]
        new_side = np.where(go_low, -1, 1).astype(np.int8)
        stale_h = go_low & (sd == -1)
        stale_l = (~go_low) & (sd == 1)
        Gh[active] = np.where(stale_h, 0.5 * G_h, G_h)
        Gl[active] = np.where(stale_l, 0.5 * G_l, G_l)
        tl[active] = np.where(go_low, tn, a_l)
        Gl[active] = np.where(go_low, gn, Gl[active])
        th[active] = np.where(go_low, a_h, tn)
        Gh[active] = np.where(go_low, Gh[active], gn)
        side[active] = new_side
        new_width = th[active] - tl[active]
        force_bis[active] = new_width > 0.5 * width
        fin = (new_width <= ttol[active]) | (np.abs(gn) <= 1e-14)
        it_conv[active[fin]] = True
        active = active[~fin]
    conv &= it_conv
    cstar = c + tbest[:, None] * a
    foot, sdf, n, cv = closest_point(x_e, R_e, e, cstar, max_iter=max_iter)
    conv &= cv
    sep = sdf - R
    p_i = cstar - R[:, None] * n
    return sep, n, p_i, foot, conv


# --------------------------------------------------------------------------------------------------------------
# ellipsoid vs ellipsoid
# --------------------------------------------------------------------------------------------------------------
#
# Layout: the kernels below work on "structure of arrays" data, one row per quantity and one column per pair,
# so that every operation is a flat, contiguous 1-D numpy operation and compacting the active set is a single
# fancy index.  The packed pair data ``P`` is a (16, n) array:
#   P[0:3] = d = x_i - x_j,  P[3:9] = upper triangle of M_i,  P[9:15] = upper triangle of M_j,  P[15] = S
# with the upper triangle stored as (M00, M11, M22, M01, M02, M12).  Unit directions are (3, n) arrays.
def _fibonacci(n):
    k = np.arange(n) + 0.5
    z = 1.0 - 2.0 * k / n
    rho = np.sqrt(np.maximum(0.0, 1.0 - z * z))
    phi = np.pi * (3.0 - np.sqrt(5.0)) * k
    return np.stack([rho * np.cos(phi), rho * np.sin(phi), z], axis=1)


_SCREEN = _fibonacci(64)
# quadratic monomials of the screen directions: u^T M u = _SCREEN_MONO @ sym6(M) (one small GEMM per batch)
_SCREEN_MONO = np.stack([_SCREEN[:, 0] ** 2, _SCREEN[:, 1] ** 2, _SCREEN[:, 2] ** 2,
                         2 * _SCREEN[:, 0] * _SCREEN[:, 1], 2 * _SCREEN[:, 0] * _SCREEN[:, 2],
                         2 * _SCREEN[:, 1] * _SCREEN[:, 2]], axis=1)
_NP = 16


def _sym6(Rt, eT):
    """Upper triangle (M00, M11, M22, M01, M02, M12) of ``M = R diag(e^2) R^T`` as a (6, m) array, from the
    rotations as a contiguous (3, 3, m) array ``Rt[a, k] = R[:, a, k]`` and the semi-axes ``eT`` (3, m)."""
    W = Rt * (eT * eT)[None]
    out = np.empty((6, Rt.shape[2]))
    for r, (a, b) in enumerate(((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))):
        np.multiply(W[a, 0], Rt[b, 0], out=out[r])
        out[r] += W[a, 1] * Rt[b, 1]
        out[r] += W[a, 2] * Rt[b, 2]
    return out


def _mv(M, x, y, z):
    """M v for a packed symmetric (6, n) M and v = (x, y, z)."""
    return (M[0] * x + M[3] * y + M[4] * z,
            M[3] * x + M[1] * y + M[5] * z,
            M[4] * x + M[5] * y + M[2] * z)


def _pack(d, Mi6, Mj6, S):
    P = np.empty((_NP, d.shape[0]))
    P[0:3] = d.T
    P[3:9] = Mi6
    P[9:15] = Mj6
    P[15] = S
    return P


def _ee_support(P, U):
    """Support data of both ellipsoids at unit directions U (3, n): (M_i u (3 arrays), r_i = sqrt(u.M_i u),
    M_j u (3 arrays), r_j)."""
    ux, uy, uz = U
    a = _mv(P[3:9], ux, uy, uz)
    ri = np.sqrt(ux * a[0] + uy * a[1] + uz * a[2])
    b = _mv(P[9:15], ux, uy, uz)
    rj = np.sqrt(ux * b[0] + uy * b[1] + uz * b[2])
    return a, ri, b, rj


def _ee_f(P, U):
    """f(u) = d.u - r_i(u) - r_j(u) for packed pairs P (16, n) and unit directions U (3, n)."""
    ux, uy, uz = U
    _, ri, _, rj = _ee_support(P, U)
    return P[0] * ux + P[1] * uy + P[2] * uz - ri - rj


def _ee_fgap(P, U):
    """f(u) and the duality gap ``|p_i - p_j| - f`` with ``p_i - p_j = d - M_i u/r_i - M_j u/r_j``."""
    ux, uy, uz = U
    (ax, ay, az), ri, (bx, by, bz), rj = _ee_support(P, U)
    f = P[0] * ux + P[1] * uy + P[2] * uz - ri - rj
    gx = P[0] - ax / ri - bx / rj
    gy = P[1] - ay / ri - by / rj
    gz = P[2] - az / ri - bz / rj
    return f, np.sqrt(gx * gx + gy * gy + gz * gz) - f


def _ee_tgrad(P, U):
    """Norm of the tangent gradient ``|g - (u.g) u|`` at the unit directions U."""
    ux, uy, uz = U
    (ax, ay, az), ri, (bx, by, bz), rj = _ee_support(P, U)
    qi, qj = 1.0 / ri, 1.0 / rj
    gx = P[0] - ax * qi - bx * qj
    gy = P[1] - ay * qi - by * qj
    gz = P[2] - az * qi - bz * qj
    ug = ux * gx + uy * gy + uz * gz
    gx -= ug * ux
    gy -= ug * uy
    gz -= ug * uz
    return np.sqrt(gx * gx + gy * gy + gz * gz)


def _ee_local(P, U):
    """f, Riemannian gradient (g1, g2) and Hessian (h11, h12, h22) at the unit directions U in the tangent
    basis (e1, e2), e1 = u x w / |u x w| (w = x axis if |u_x| < 0.6, else y axis), e2 = u x e1.
    Ambient gradient ``g = d - M_i u/r_i - M_j u/r_j``, ambient Hessian
    ``-(M_i/r_i - a_i a_i^T/r_i^3) - (M_j/r_j - a_j a_j^T/r_j^3)`` (a = M u); the Riemannian Hessian is its
    tangent projection minus ``(u.g) I``."""
    ux, uy, uz = U
    dx, dy, dz = P[0], P[1], P[2]
    Mi, Mj = P[3:9], P[9:15]
    aix, aiy, aiz = _mv(Mi, ux, uy, uz)
    ajx, ajy, ajz = _mv(Mj, ux, uy, uz)
    ri = np.sqrt(ux * aix + uy * aiy + uz * aiz)
    rj = np.sqrt(ux * ajx + uy * ajy + uz * ajz)
    f = dx * ux + dy * uy + dz * uz - ri - rj
    qi = 1.0 / ri
    qj = 1.0 / rj
    gx = dx - aix * qi - ajx * qj
    gy = dy - aiy * qi - ajy * qj
    gz = dz - aiz * qi - ajz * qj
    ug = ux * gx + uy * gy + uz * gz
    s = (np.abs(ux) < 0.6).astype(float)             # 1: w = x axis, 0: w = y axis (exact blend)
    r = 1.0 - s
    e1x = -uz * r
    e1y = uz * s
    e1z = ux * r - uy * s
    inv = 1.0 / np.sqrt(e1x * e1x + e1y * e1y + e1z * e1z)
    e1x *= inv
    e1y *= inv
    e1z *= inv
    e2x = uy * e1z - uz * e1y
    e2y = uz * e1x - ux * e1z
    e2z = ux * e1y - uy * e1x
    g1 = gx * e1x + gy * e1y + gz * e1z
    g2 = gx * e2x + gy * e2y + gz * e2z
    A = Mi * qi
    A += Mj * qj
    p, q, r = _mv(A, e1x, e1y, e1z)
    c11 = e1x * p + e1y * q + e1z * r
    c12 = e2x * p + e2y * q + e2z * r
    p, q, r = _mv(A, e2x, e2y, e2z)
    c22 = e2x * p + e2y * q + e2z * r
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
    h11 += t * b1j
    h12 += t * b2j
    h22 += b2j * b2j * qj3
    h11 -= c11
    h11 -= ug
    h22 -= c22
    h22 -= ug
    h12 -= c12
    return f, g1, g2, h11, h12, h22, (e1x, e1y, e1z), (e2x, e2y, e2z)


_CHUNK = 8192      # rows per block inside a Newton iteration (keeps the temporaries in cache)


def _ee_newton(P, U, gtol, htol, max_iter, chunk=_CHUNK):
    """Batched Riemannian Newton ascent of f on the unit sphere from the unit directions U (3, n).

    Shifted Newton step (H - mu I negative definite), step cap 0.5, Armijo backtracking (<= 40 halvings).
    The active set is compacted every iteration: converged rows and rows whose line search failed (they
    cannot make progress: the step would be recomputed identically) leave the iteration; large active sets
    are processed in blocks of ``chunk`` rows.
    Returns the final directions (3, n) and ``conv`` (n,) = gradient below ``gtol S`` and tangent Hessian
    largest eigenvalue below ``htol S`` (or f > 0, which implies it) at the returned direction.
    With numba available the compiled per-pair iteration of :mod:`.ellipsoid_jit` runs instead (``ellipsoid_jit.use``:
    any batch with the AOT build, from ``MIN_ROWS`` rows with numba's JIT; same bits).
    """
    if ellipsoid_jit.use(U.shape[1]):
        return ellipsoid_jit.ee_newton(P, U, gtol, htol, max_iter)
    n = U.shape[1]
    U = np.array(U, dtype=float, copy=True)
    conv = np.zeros(n, dtype=bool)
    act = np.arange(n)
    Pc, Uc = P, U.copy()                 # compacted copies of the active rows
    for it in range(max_iter + 1):
        if act.size == 0:
            break
        last = it == max_iter
        done = np.empty(act.size, dtype=bool)
        cont = np.empty(act.size, dtype=bool)
        for s in range(0, act.size, chunk):
            sl = slice(s, s + chunk)
            done[sl], cont[sl], Uc[:, sl] = _ee_newton_iter(Pc[:, sl], Uc[:, sl], gtol, htol, last)
        conv[act[done]] = True
        if not cont.all():
            out = ~cont
            U[:, act[out]] = Uc[:, out]
            act, Pc, Uc = act[cont], Pc[:, cont], Uc[:, cont]
    if act.size:
        U[:, act] = Uc
    return U, conv


def _ee_newton_iter(Pa, Ua, gtol, htol, last):
    """One Newton iteration for the rows (Pa, Ua).  Returns ``done`` (certified at the returned direction),
    ``cont`` (row stays active: not done and the line search accepted a step) and the new directions.

    Early certification: where the current gradient is already small (the Newton step lands in the quadratic
    convergence regime) and the accepted full step has f > 0, the tangent gradient is evaluated at the new
    point; below ``gtol S`` the row is certified there without a further Hessian evaluation (for f(u) > 0
    the Riemannian Hessian is ``-P Hess(h_K) P - f I <= -f I``: negative definite automatically, h_K being
    the convex support function of the Minkowski body, so the Hessian test of the next iteration would
    pass)."""
    f, g1, g2, h11, h12, h22, e1, e2 = _ee_local(Pa, Ua)
    Sa = Pa[15]
    gn = np.sqrt(g1 * g1 + g2 * g2)
    hd = 0.5 * (h11 - h22)
    lmax = 0.5 * (h11 + h22) + np.sqrt(hd * hd + h12 * h12)
    small = gn <= gtol * Sa
    ok = small & (lmax <= htol * Sa) & np.isfinite(f)
    if last:
        return ok, np.zeros(ok.shape, dtype=bool), Ua
    cont = ~ok
    if ok.any():
        rows = np.nonzero(cont)[0]
        Pa, Ub, Sa = Pa[:, rows], Ua[:, rows], Sa[rows]
        f, g1, g2, h11, h12, h22 = f[rows], g1[rows], g2[rows], h11[rows], h12[rows], h22[rows]
        e1 = tuple(c[rows] for c in e1)
        e2 = tuple(c[rows] for c in e2)
        gn, lmax, small = gn[rows], lmax[rows], small[rows]
    else:
        rows = None
        Ub = Ua
    # shifted Newton step: solve (H - mu I) xi = -g with H - mu I negative definite
    mu = np.maximum(0.0, lmax + 1e-8 * Sa)
    a11 = h11 - mu
    a22 = h22 - mu
    det = a11 * a22 - h12 * h12
    x1 = -(a22 * g1 - h12 * g2) / det
    x2 = -(-h12 * g1 + a11 * g2) / det
    if small.any():
        # saddle / minimum with vanishing gradient: move along the ascent curvature eigenvector
        va1, va2 = h12, lmax - h11
        vb1, vb2 = lmax - h22, h12
        use_a = np.hypot(va1, va2) >= np.hypot(vb1, vb2)
        v1 = np.where(use_a, va1, vb1)
        v2 = np.where(use_a, va2, vb2)
        vn = np.hypot(v1, v2)
        pos = vn > 0
        vs = np.where(pos, vn, 1.0)
        v1 = np.where(pos, v1 / vs, 1.0)
        v2 = np.where(pos, v2 / vs, 0.0)
        x1 = np.where(small, 0.1 * v1, x1)
        x2 = np.where(small, 0.1 * v2, x2)
    cap = 0.5 / np.maximum(np.sqrt(x1 * x1 + x2 * x2), 0.5)      # step cap 0.5 (cap = 1 exactly below)
    x1 = x1 * cap
    x2 = x2 * cap
    slope = g1 * x1 + g2 * x2
    step = np.empty((3, x1.size))
    for c in range(3):
        np.multiply(x1, e1[c], out=step[c])
        step[c] += x2 * e2[c]
    slack = 8 * _EPS * Sa
    # Armijo backtracking; the full step first for every row, halvings only for the rows that fail
    cand = Ub + step
    cand /= np.sqrt(cand[0] * cand[0] + cand[1] * cand[1] + cand[2] * cand[2])
    fc = _ee_f(Pa, cand)
    acc = fc >= f + 1e-4 * slope - slack
    acc_full = acc.copy()
    if not acc.all():
        todo = np.nonzero(~acc)[0]
        t = 1.0
        for _ in range(39):
            t *= 0.5
            ct = Ub[:, todo] + t * step[:, todo]
            ct /= np.sqrt(ct[0] * ct[0] + ct[1] * ct[1] + ct[2] * ct[2])
            fct = _ee_f(Pa[:, todo], ct)
            ok_t = fct >= f[todo] + 1e-4 * t * slope[todo] - slack[todo]
            if ok_t.any():
                cand[:, todo[ok_t]] = ct[:, ok_t]
                acc[todo[ok_t]] = True
                todo = todo[~ok_t]
                if todo.size == 0:
                    break
        # rows whose line search failed keep their point and leave (they cannot be certified)
        cand[:, ~acc] = Ub[:, ~acc]
    early = acc_full & (gn <= 1e-5 * Sa) & (fc > 0.0)
    if early.any():
        er = np.nonzero(early)[0]
        early[er] = _ee_tgrad(Pa[:, er], cand[:, er]) <= gtol * Sa[er]
    if rows is None:
        return ok | early, acc & ~early, cand
    unew = Ua.copy()
    unew[:, rows] = cand
    cont[rows] = acc & ~early
    ok[rows[early]] = True
    return ok, cont, unew


def _ee_global(P, Rti, Rtj, x_i, R_i, e_i, x_j, R_j, e_j, gtol, htol, max_iter, n_extra):
    """Global maximisation of f for packed pairs P without prior information.

    Screening: f at the centre-to-centre direction u0, the +- principal axes of both bodies and a
    64-direction Fibonacci set (cheap: closed forms and one small GEMM).  A pair with a positive screened
    value is separated, and any start with f > 0 lies in the geodesically convex superlevel set
    {f > 0} of the unique maximiser, so a single Newton ascent from the best screened direction suffices
    (certified afterwards by the duality gap).  Only for the remaining pairs the foot-point normals n1 (of j
    at the foot of x_i) and -n2 are computed; if one of them is positive the pair is separated as well,
    otherwise the pair (overlapping or nearly touching) gets the multi-start Newton from u0, n1, -n2 and
    n_extra well separated screen directions with the largest f.
    Returns directions U (3, n) and conv (n,) (best certified start, no other start larger).
    """
    n = P.shape[1]
    d = P[0:3]
    S = P[15]
    dn = np.sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2])
    pos = dn > 0
    u0 = np.where(pos, d / np.where(pos, dn, 1.0), np.array([[0.0], [0.0], [1.0]]))
    # screen values, (n, 77): u0, +a_i (3), -a_i (3), +a_j (3), -a_j (3), Fibonacci (64)
    fc = np.empty((n, 77))
    fc[:, 0] = _ee_f(P, u0)
    Mi, Mj = P[3:9], P[9:15]
    fax = np.empty((12, n))
    for k in range(3):
        for Rt, e, M, o in ((Rti, e_i, Mj, 0), (Rtj, e_j, Mi, 6)):
            ax, ay, az = Rt[0, k], Rt[1, k], Rt[2, k]
            da = d[0] * ax + d[1] * ay + d[2] * az
            bx, by, bz = _mv(M, ax, ay, az)
            r = e[:, k] + np.sqrt(ax * bx + ay * by + az * bz)
            np.subtract(da, r, out=fax[o + k])
            np.negative(da, out=fax[o + 3 + k])
            fax[o + 3 + k] -= r
    fc[:, 1:13] = fax.T
    for s in range(0, n, 2048):                     # blocks keep the (block, 64) temporaries in cache
        sl = slice(s, s + 2048)
        a = Mi[:, sl].T @ _SCREEN_MONO.T
        np.sqrt(a, out=a)
        b = Mj[:, sl].T @ _SCREEN_MONO.T
        np.sqrt(b, out=b)
        c = d[:, sl].T @ _SCREEN.T
        c -= a
        c -= b
        fc[sl, 13:] = c
    kbest = np.argmax(fc, axis=1)
    fbest = fc[np.arange(n), kbest]

    def axes(rows):
        """The 12 screen axes (+a_i, -a_i, +a_j, -a_j) of the given rows, (r, 12, 3)."""
        Ai = np.swapaxes(R_i[rows], 1, 2)
        Aj = np.swapaxes(R_j[rows], 1, 2)
        return np.concatenate([Ai, -Ai, Aj, -Aj], axis=1)

    def direction(rows, k):
        out = np.empty((3, rows.size))
        z = k == 0
        out[:, z] = u0[:, rows[z]]
        a = np.nonzero((k >= 1) & (k < 13))[0]
        if a.size:
            out[:, a] = axes(rows[a])[np.arange(a.size), k[a] - 1].T
        s = k >= 13
        out[:, s] = _SCREEN[k[s] - 13].T
        return out

    U = np.empty((3, n))
    conv = np.zeros(n, dtype=bool)
    sep_rows = np.nonzero(fbest > 0.0)[0]
    rest = np.nonzero(~(fbest > 0.0))[0]
    starts_sep = direction(sep_rows, kbest[sep_rows])
    multi = rest
    if rest.size:
        # foot-point normal starts, only where the cheap screen found no positive value
        _, _, n1, _ = closest_point(x_j[rest], R_j[rest], e_j[rest], x_i[rest])
        _, _, n2, _ = closest_point(x_i[rest], R_i[rest], e_i[rest], x_j[rest])
        fixed = np.stack([u0[:, rest].T, n1, -n2], axis=1)                           # (r, 3, 3)
        Pr = P[:, rest]
        f1 = _ee_f(Pr, n1.T)
        f2 = _ee_f(Pr, -n2.T)
        late = (f1 > 0.0) | (f2 > 0.0)
        if late.any():
            lu = np.where((f1 >= f2)[late][None, :], n1[late].T, -n2[late].T)
            sep_rows = np.concatenate([sep_rows, rest[late]])
            starts_sep = np.concatenate([starts_sep, lu], axis=1)
        keep = ~late
        multi = rest[keep]
        fixed = fixed[keep]
    if sep_rows.size:
        us, cs = _ee_newton(P[:, sep_rows], starts_sep, gtol, htol, max_iter)
        U[:, sep_rows] = us
        conv[sep_rows] = cs
    if multi.size:
        r = multi.size
        ns = 3 + n_extra
        # greedy choice of n_extra well separated (> ~35 degrees) screen directions with the largest f
        score = fc[multi, 1:]                                   # (r, 76): axes (12), then Fibonacci (64)
        AXm = axes(multi)
        extra = np.empty((r, n_extra, 3))
        ar = np.arange(r)
        near = np.empty((r, 76), dtype=bool)
        for q in range(n_extra):
            k = np.argmax(score, axis=1)
            pick = np.where((k < 12)[:, None], AXm[ar, np.minimum(k, 11)], _SCREEN[np.maximum(k - 12, 0)])
            extra[:, q] = pick
            near[:, :12] = np.einsum("nkd,nd->nk", AXm, pick) > 0.82
            near[:, 12:] = pick @ _SCREEN.T > 0.82
            score[near] = -np.inf
        starts = np.concatenate([fixed, extra], axis=1).reshape(-1, 3).T                  # (3, r*ns)
        Pm = np.repeat(P[:, multi], ns, axis=1)
        Um, cm = _ee_newton(Pm, starts, gtol, htol, max_iter)
        fU = _ee_f(Pm, Um).reshape(r, ns)
        cm = cm.reshape(r, ns)
        fconv = np.where(cm, fU, -np.inf)
        kb = np.argmax(fconv, axis=1)
        anyconv = np.any(cm, axis=1)
        kb = np.where(anyconv, kb, np.argmax(fU, axis=1))
        fb = fU[ar, kb]
        fmax = fU.max(axis=1)
        U[:, multi] = Um.reshape(3, r, ns)[:, ar, kb]
        conv[multi] = anyconv & (fb >= fmax - 10 * gtol * S[multi])
    return U, conv


def ellipsoid_vs_ellipsoid(x_i, R_i, e_i, x_j, R_j, e_j, tol=1e-12, max_iter=50, n_extra=4, hint=None):
    """Separating-axis signed separation of ellipsoid i and ellipsoid j, batched.

    hint: optional (m, 3) previous normals (from j towards i, any length) or NaN rows for "no hint".  A pair
    whose hint direction has f > 0 (proof that the pair is separated) is solved by one Newton ascent from the
    hint and accepted only if certified globally optimal by the duality gap (sep > 0 and
    ``|p_i - p_j| - sep <= 10 tol S``); every other pair (no / useless hint, overlapping, not certified) goes
    through the hint-free path, so the result has the same meaning with or without hints.

    Returns ``sep (m,), normal (m,3) (maximiser u, from j to i), p_i = s_i(-u), p_j = s_j(u), converged``.
    """
    m = x_i.shape[0]
    e_i = np.asarray(e_i, dtype=float)
    e_j = np.asarray(e_j, dtype=float)
    d = x_i - x_j
    dn = np.sqrt(np.einsum("ij,ij->i", d, d))
    S = dn + e_i.max(axis=1) + e_j.max(axis=1)
    Rti = np.ascontiguousarray(R_i.transpose(1, 2, 0))
    Rtj = np.ascontiguousarray(R_j.transpose(1, 2, 0))
    P = _pack(d, _sym6(Rti, e_i.T), _sym6(Rtj, e_j.T), S)
    gtol = max(tol, 16 * _EPS)
    htol = 1e-10
    gap_tol = 10 * gtol * S

    U = np.empty((3, m))
    conv = np.zeros(m, dtype=bool)
    todo = None
    if hint is not None:
        H = np.asarray(hint, dtype=float).reshape(m, 3)
        with np.errstate(invalid="ignore", over="ignore"):
            hn = np.sqrt(np.einsum("ij,ij->i", H, H))
            use = np.nonzero(np.isfinite(hn) & (hn > 0))[0]
        if use.size:
            uh = (H[use] / hn[use, None]).T
            Ph = P[:, use]
            fh = _ee_f(Ph, uh)
            good = fh > 0.0                       # the hint proves separation: {f > 0} holds only the maximiser
            use, uh, Ph = use[good], uh[:, good], Ph[:, good]
            if use.size:
                uh, ch = _ee_newton(Ph, uh, gtol, htol, max_iter)
                fh, gap = _ee_fgap(Ph, uh)
                ch &= (fh > 0.0) & (gap <= gap_tol[use])
                U[:, use[ch]] = uh[:, ch]
                conv[use[ch]] = True
        todo = np.nonzero(~conv)[0]
    if todo is None:
        U, conv = _ee_global(P, Rti, Rtj, x_i, R_i, e_i, x_j, R_j, e_j, gtol, htol, max_iter, n_extra)
    elif todo.size:
        Ut, ct = _ee_global(P[:, todo], Rti[:, :, todo], Rtj[:, :, todo], x_i[todo], R_i[todo], e_i[todo],
                            x_j[todo], R_j[todo], e_j[todo], gtol, htol, max_iter, n_extra)
        U[:, todo] = Ut
        conv[todo] = ct

    ux, uy, uz = U
    ax, ay, az = _mv(P[3:9], ux, uy, uz)
    bx, by, bz = _mv(P[9:15], ux, uy, uz)
    ri = np.sqrt(ux * ax + uy * ay + uz * az)
    rj = np.sqrt(ux * bx + uy * by + uz * bz)
    u = U.T.copy()
    p_i = x_i - np.stack([ax, ay, az], axis=1) / ri[:, None]
    p_j = x_j + np.stack([bx, by, bz], axis=1) / rj[:, None]
    sep = P[0] * ux + P[1] * uy + P[2] * uz - ri - rj
    dp = p_i - p_j
    gap = np.sqrt(np.einsum("ij,ij->i", dp, dp)) - sep
    conv &= ~((sep > 0) & (gap > gap_tol))
    conv &= np.isfinite(sep)
    return sep, u, p_i, p_j, conv
