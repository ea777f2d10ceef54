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
sphere with a shifted Hessian, step cap and Armijo backtracking, from several starts.  A start is certified
when the tangent gradient is below ``tol * S`` (S = |d| + largest semi-axes) and the tangent Hessian is
negative (semi)definite (largest eigenvalue <= 1e-10 S); the best certified start is returned and the pair is
marked converged only if no other start found a larger f (which would disprove global optimality) and, for
separated pairs, the duality gap ``|p_i - p_j| - sep`` is below tolerance.
"""
import numpy as np

_EPS = np.finfo(float).eps


def _dot(a, b):
    return np.einsum("...i,...i->...", a, b)


def _matvec(M, v):
    if M.ndim == 3 and v.ndim == 2:
        return M[:, :, 0] * v[:, 0:1] + M[:, :, 1] * v[:, 1:2] + M[:, :, 2] * v[:, 2:3]
    return np.einsum("...ij,...j->...i", M, v)


def shape_matrix(R, e):
    """``M = R diag(e^2) R^T``, (m, 3, 3)."""
    return np.einsum("nik,nk,njk->nij", R, np.asarray(e, dtype=float) ** 2, R)


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
        dpsi = np.sum(v * v / den, axis=1) / phi ** 3
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
def _fibonacci(n):
    k = np.arange(n) + 0.5
    z = 1.0 - 2.0 * k / n
    rho = np.sqrt(np.maximum(0.0, 1.0 - z * z))
    phi = np.pi * (3.0 - np.sqrt(5.0)) * k
    return np.stack([rho * np.cos(phi), rho * np.sin(phi), z], axis=1)


_SCREEN = _fibonacci(64)


def _tangent_basis(u):
    w = np.where((np.abs(u[:, 0]) < 0.6)[:, None], np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0]))
    e1 = np.cross(u, w)
    e1 /= np.linalg.norm(e1, axis=1)[:, None]
    e2 = np.cross(u, e1)
    return e1, e2


def _ee_value(d, Mi, Mj, u):
    ri = np.sqrt(_dot(u, _matvec(Mi, u)))
    rj = np.sqrt(_dot(u, _matvec(Mj, u)))
    return _dot(d, u) - ri - rj


def _ee_local(d, Mi, Mj, u):
    """f, Riemannian gradient (2,) and Hessian (2x2 entries) at unit u, plus the tangent basis."""
    Miu = _matvec(Mi, u)
    Mju = _matvec(Mj, u)
    ri = np.sqrt(_dot(u, Miu))
    rj = np.sqrt(_dot(u, Mju))
    f = _dot(d, u) - ri - rj
    g = d - Miu / ri[:, None] - Mju / rj[:, None]
    e1, e2 = _tangent_basis(u)
    g1 = _dot(g, e1)
    g2 = _dot(g, e2)
    ug = _dot(u, g)
    Mie1, Mie2 = _matvec(Mi, e1), _matvec(Mi, e2)
    Mje1, Mje2 = _matvec(Mj, e1), _matvec(Mj, e2)
    a1i, a2i = _dot(e1, Miu), _dot(e2, Miu)
    a1j, a2j = _dot(e1, Mju), _dot(e2, Mju)
    ri3, rj3 = ri ** 3, rj ** 3
    h11 = -(_dot(e1, Mie1) / ri - a1i * a1i / ri3) - (_dot(e1, Mje1) / rj - a1j * a1j / rj3) - ug
    h22 = -(_dot(e2, Mie2) / ri - a2i * a2i / ri3) - (_dot(e2, Mje2) / rj - a2j * a2j / rj3) - ug
    h12 = -(_dot(e1, Mie2) / ri - a1i * a2i / ri3) - (_dot(e1, Mje2) / rj - a1j * a2j / rj3)
    return f, g1, g2, h11, h12, h22, e1, e2


def _ee_newton(d, Mi, Mj, S, u, active, gtol, htol, max_iter):
    """Batched Riemannian Newton ascent of f on the sphere for rows `active` (bool mask)."""
    n = u.shape[0]
    conv = np.zeros(n, dtype=bool)
    act = np.nonzero(active)[0]
    for it in range(max_iter + 1):
        if act.size == 0:
            break
        dd, Ma, Mb, Sa, ua = d[act], Mi[act], Mj[act], S[act], u[act]
        f, g1, g2, h11, h12, h22, e1, e2 = _ee_local(dd, Ma, Mb, ua)
        gn = np.hypot(g1, g2)
        mean = 0.5 * (h11 + h22)
        rad = np.hypot(0.5 * (h11 - h22), h12)
        lmax = mean + rad
        ok = (gn <= gtol * Sa) & (lmax <= htol * Sa)
        ok &= np.isfinite(f)
        conv[act[ok]] = True
        if it == max_iter:
            break
        keep = ~ok
        act = act[keep]
        if act.size == 0:
            break
        dd, Ma, Mb, Sa, ua = dd[keep], Ma[keep], Mb[keep], Sa[keep], ua[keep]
        f, g1, g2, h11, h12, h22, e1, e2 = (f[keep], g1[keep], g2[keep], h11[keep], h12[keep], h22[keep],
                                            e1[keep], e2[keep])
        gn, lmax = gn[keep], lmax[keep]
        # shifted Newton step: solve (H - mu I) xi = -g with H - mu I negative definite
        delta = 1e-8 * Sa
        mu = np.maximum(0.0, lmax + delta)
        a11, a12, a22 = h11 - mu, h12, h22 - mu
        det = a11 * a22 - a12 * a12
        x1 = -(a22 * g1 - a12 * g2) / det
        x2 = -(-a12 * g1 + a11 * g2) / det
        # saddle / minimum with vanishing gradient: move along the ascent curvature eigenvector
        stuck = gn <= gtol * Sa
        va = np.stack([h12, lmax - h11], axis=1)
        vb = np.stack([lmax - h22, h12], axis=1)
        v = np.where((np.linalg.norm(va, axis=1) >= np.linalg.norm(vb, axis=1))[:, None], va, vb)
        vn = np.linalg.norm(v, axis=1)
        v = np.where((vn > 0)[:, None], v / np.where(vn > 0, vn, 1.0)[:, None], np.array([1.0, 0.0]))
        x1 = np.where(stuck, 0.1 * v[:, 0], x1)
        x2 = np.where(stuck, 0.1 * v[:, 1], x2)
        xn = np.hypot(x1, x2)
        cap = np.where(xn > 0.5, 0.5 / np.where(xn > 0, xn, 1.0), 1.0)
        x1, x2 = x1 * cap, x2 * cap
        slope = g1 * x1 + g2 * x2
        step = x1[:, None] * e1 + x2[:, None] * e2
        tstep = np.ones(act.size)
        accepted = np.zeros(act.size, dtype=bool)
        unew = ua.copy()
        slack = 8 * _EPS * Sa
        for _ in range(40):
            todo = np.nonzero(~accepted)[0]
            if todo.size == 0:
                break
            cand = ua[todo] + tstep[todo, None] * step[todo]
            cand /= np.linalg.norm(cand, axis=1)[:, None]
            fc = _ee_value(dd[todo], Ma[todo], Mb[todo], cand)
            acc = fc >= f[todo] + 1e-4 * tstep[todo] * slope[todo] - slack[todo]
            unew[todo[acc]] = cand[acc]
            accepted[todo[acc]] = True
            tstep[todo[~acc]] *= 0.5
        u[act] = unew
        # rows whose line search failed keep their point; they are retried (the step is recomputed
        # identically, so drop them to save time: they cannot be certified)
        act = act[accepted]
    return u, conv


def ellipsoid_vs_ellipsoid(x_i, R_i, e_i, x_j, R_j, e_j, tol=1e-12, max_iter=50, n_extra=4):
    """Separating-axis signed separation of ellipsoid i and ellipsoid j, batched.

    Returns ``sep (m,), normal (m,3) (maximiser u, from j to i), p_i = s_i(-u), p_j = s_j(u), converged``.
    """
    m = x_i.shape[0]
    Mi = shape_matrix(R_i, e_i)
    Mj = shape_matrix(R_j, e_j)
    d = x_i - x_j
    dn = np.linalg.norm(d, axis=1)
    S = dn + e_i.max(axis=1) + e_j.max(axis=1)
    gtol = max(tol, 16 * _EPS)
    htol = 1e-10

    # fixed starts: centre-to-centre direction and the two foot-point normal directions
    u0 = np.where((dn > 0)[:, None], d / np.where(dn > 0, dn, 1.0)[:, None], np.array([0.0, 0.0, 1.0]))
    _, _, n1, _ = closest_point(x_j, R_j, e_j, x_i)          # outward normal of j at foot of x_i
    _, _, n2, _ = closest_point(x_i, R_i, e_i, x_j)          # outward normal of i at foot of x_j
    fixed = np.stack([u0, n1, -n2], axis=1)                # (m, 3, 3)
    # screening set: +- principal axes of both bodies and a Fibonacci set
    axes = np.concatenate([np.swapaxes(R_i, 1, 2), -np.swapaxes(R_i, 1, 2),
                           np.swapaxes(R_j, 1, 2), -np.swapaxes(R_j, 1, 2),
                           np.broadcast_to(_SCREEN, (m,) + _SCREEN.shape)], axis=1)
    cand = np.concatenate([fixed, axes], axis=1)           # (m, K, 3)
    K = cand.shape[1]
    dk = np.broadcast_to(d[:, None, :], cand.shape)
    fc = (_dot(dk, cand) - np.sqrt(np.einsum("nkd,nkd->nk", cand, np.matmul(cand, Mi)))
          - np.sqrt(np.einsum("nkd,nkd->nk", cand, np.matmul(cand, Mj))))
    best = np.argmax(fc, axis=1)
    separated = fc[np.arange(m), best] > 0.0
    # greedy choice of n_extra well separated (> ~35 degrees) screen directions with the largest f
    ns = 3 + n_extra
    score = fc[:, 3:].copy()
    scr = cand[:, 3:]
    extra = np.empty((m, n_extra, 3))
    for r in range(n_extra):
        k = np.argmax(score, axis=1)
        pick = scr[np.arange(m), k]
        extra[:, r] = pick
        near = np.einsum("nkd,nd->nk", scr, pick) > 0.82
        score[near] = -np.inf
    starts = np.concatenate([fixed, extra], axis=1)                                   # (m, ns, 3)
    # clearly separated pairs: any start with f > 0 lies in the (geodesically convex) superlevel set of
    # the unique maximiser, so one start suffices
    starts[separated, 0] = cand[np.arange(m), best][separated]
    used = np.ones((m, ns), dtype=bool)
    used[separated, 1:] = False

    rep = lambda A: np.repeat(A, ns, axis=0)
    U = starts.reshape(-1, 3).copy()
    U, conv = _ee_newton(rep(d), rep(Mi), rep(Mj), rep(S), U, used.reshape(-1), gtol, htol, max_iter)
    fU = _ee_value(rep(d), rep(Mi), rep(Mj), U).reshape(m, ns)
    conv = conv.reshape(m, ns) & used
    fU = np.where(used, fU, -np.inf)
    fconv = np.where(conv, fU, -np.inf)
    kbest = np.argmax(fconv, axis=1)
    anyconv = np.any(conv, axis=1)
    kbest = np.where(anyconv, kbest, np.argmax(fU, axis=1))
    u = U.reshape(m, ns, 3)[np.arange(m), kbest]
    fbest = fU[np.arange(m), kbest]
    fmax = fU.max(axis=1)
    converged = anyconv & (fbest >= fmax - 10 * gtol * S)

    Miu = _matvec(Mi, u)
    Mju = _matvec(Mj, u)
    ri = np.sqrt(_dot(u, Miu))
    rj = np.sqrt(_dot(u, Mju))
    p_i = x_i - Miu / ri[:, None]
    p_j = x_j + Mju / rj[:, None]
    sep = _dot(d, u) - ri - rj
    gap = np.linalg.norm(p_i - p_j, axis=1) - sep
    converged &= ~((sep > 0) & (gap > 10 * gtol * S))
    converged &= np.isfinite(sep)
    return sep, u, p_i, p_j, converged
