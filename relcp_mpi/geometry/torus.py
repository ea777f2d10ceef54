"""Rigid rings (tori): batched contact kernels and the multi-sphere proxy.

A ring has centre ``x``, orientation ``q`` (body -> lab), a centre circle of radius ``Rc`` in the body-frame
xy plane (axis = body z) and a tube radius ``r`` (``0 < r < Rc``).  Shape parameters are stored as
``(Rc, r, 0)``.  Convention (docs/ARCHITECTURE.md): the normal points from j towards i, ``sep`` is the
signed separation (negative = overlap) and ``sep = n . (p_i - p_j)``.

Ring - ring (:func:`ring_ring`)
-------------------------------
``sep = dist(circle_i, circle_j) - r_i - r_j``; ``c_i, c_j`` are the closest points of the centre circles,
``n = (c_i - c_j) / |c_i - c_j|``, ``p_i = c_i - r_i n``, ``p_j = c_j + r_j n``.

With ``a_i(th) = Rc_i (cos th u_i + sin th v_i)`` (u, v = body x, y axes in the lab), the squared circle
distance is ``f(th, ph) = |d|^2``, ``d = (x_i - x_j) + a_i(th) - a_j(ph)``.  With ``t = da/dangle``::

    f_th = 2 d.t_i                 f_ph = -2 d.t_j
    f_thth = 2 (Rc_i^2 - d.a_i)    f_phph = 2 (Rc_j^2 + d.a_j)    f_thph = -2 t_i.t_j
    f_ththth = -2 d.t_i,  f_ththph = 2 a_i.t_j,  f_thphph = 2 t_i.a_j,  f_phphph = 2 d.t_j

so |third derivatives| <= 2 Rc_i D, 2 Rc_i Rc_j, 2 Rc_i Rc_j, 2 Rc_j D (D = |d|).  f is non-convex (up to
four local minima and continua of minima in degenerate positions).

Algorithm (everything batched over pairs, no Python loop per pair):

1. coarse screen of f on a ``grid x grid`` periodic angle grid (closed-form trigonometric expansion, chunked);
2. ``n_starts`` starts = the lowest discrete local minima of the screen (filled with the lowest other nodes);
3. safeguarded Newton on (th, ph) from every start (eigenvalue-shifted Hessian, step clipped to 0.5 rad,
   Armijo backtracking with a rounding slack); a start is *stationary* when
   ``max|grad f| <= tol * 2 max(Rc) (|x_i - x_j| + Rc_i + Rc_j)`` (relative gradient test);
   the reported point is the lowest stationary value found;
4. global certificate by branch and bound over angle boxes (cell centre g, half width delta).  For every box
   a rigorous lower bound of f over the box is
   ``lb = f(g) + min_box[grad f(g).D + D^T H(g) D / 2] - delta^3/3 ((Rc_i+Rc_j) Dc + 6 Rc_i Rc_j)``
   (Taylor with the Lagrange remainder and the third-derivative bounds above; the box minimum of the
   2-D quadratic model is computed exactly: interior minimiser or edges/corners; ``Dc = D(g) + (Rc_i+Rc_j) delta`` bounds D on the box because D is
   Lipschitz: ``|dD| <= Rc_i |dth| + Rc_j |dph|``), together with the Lipschitz bound
   ``D >= D(g) - (Rc_i+Rc_j) delta`` (so a grid of spacing h = 2 delta cannot hide a distance below the
   best node value minus (Rc_i+Rc_j) h/2).  A box is discarded when ``lb >= (D* - eps)^2`` with
   ``eps = cert_tol (Rc_i + Rc_j)``, or when it lies inside the *convexity ball* of a stationary point
   with positive-definite Hessian: with ``mu = lam_min(H(p))`` and
   ``Kh = 2 sqrt((Rc_i^2 + Rc_j^2) Dm^2 + 6 Rc_i^2 Rc_j^2)`` (Frobenius bound of the Hessian's rate of
   change from the third derivatives, Dm = D(p) + sqrt(Rc_i^2 + Rc_j^2) bounds D on a ball of radius <= 1),
   f is strongly convex (Hessian >= mu/2) on the ball of radius ``rho = min(1, mu / (2 Kh))``,
   so p is its only minimiser there and ``f >= f(p) - |grad f(p)|^2 / mu`` on it.  Remaining boxes are
   split in four (at most ``max_levels`` levels; when a level would hold more than ``max_cells`` boxes
   the pairs are processed in groups, so ``max_cells`` bounds memory; a single pair needing more boxes
   than that is reported unconverged); a box centre with a value below
   ``(D* - eps)^2`` starts a new Newton solve and the certificate continues with the improved value.
   ``converged`` = the reported point is stationary and every box was discarded (or ``D* <= eps``,
   trivially within eps of the minimum since distances are >= 0), i.e. the returned
   distance (an attained value, hence an upper bound of the true distance) is within
   ``cert_tol (Rc_i + Rc_j)`` of the global minimum.  Degenerate minima (continua, singular Hessian) are
   certified by the box bounds alone (no ball), which costs more boxes but terminates because the
   remainder term is cubic in delta.
5. coaxial pairs (axes parallel and centres on a common axis: ``max(Rc) |z_i x z_j| + |x_perp| <=
   cert_tol (Rc_i + Rc_j) / 4`` or rounding, including coplanar concentric rings) have a continuum of minimisers and are solved in closed form:
   ``D = sqrt(h^2 + (Rc_i - Rc_j)^2)`` at the radial direction ``e`` = projection of ``u_i + u_j`` (then
   ``v_i + v_j``, then ``u_i``) onto the common plane (symmetric in i, j and rigid-motion covariant).

Normal fallbacks when the circles (numerically) intersect (``D <= 64 eps (|x_i - x_j| + Rc_i + Rc_j)``):
``n = t_i x t_j`` (normal of the plane of the two tangents), else the component of ``x_i - x_j``
orthogonal to the common tangent, else the axis of ring i; the sign is chosen with ``n.(x_i - x_j) >= 0``.
The separation is then ``-r_i - r_j`` (exact up to rounding).

Ring - sphere and ring - wall are closed forms (:func:`ring_sphere`, :func:`ring_wall`).
"""
import numpy as np

from ..basics import quaternion
from .result import ContactGeometry

_EPS = np.finfo(float).eps
_TWO_PI = 2.0 * np.pi
_SQRT2 = np.sqrt(2.0)


# ----------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------
def _geometry(sep, n, p_i, p_j, conv):
    return ContactGeometry(sep, n, p_i, p_j, conv)


def _dot(a, b):
    return np.einsum("...i,...i->...", a, b)


def _norm(a):
    return np.sqrt(_dot(a, a))


def _cross(a, b):
    return np.cross(a, b)


def _wrap(a):
    return (a + np.pi) % _TWO_PI - np.pi


def _prep_pose(x, q, m):
    x = np.asarray(x, dtype=float).reshape(m, 3)
    q = np.broadcast_to(np.asarray(q, dtype=float), (m, 4))
    return x, quaternion.to_matrix(q)


def _prep_ring(Rc, r, m, who):
    Rc = np.broadcast_to(np.asarray(Rc, dtype=float), (m,)).copy()
    r = np.broadcast_to(np.asarray(r, dtype=float), (m,)).copy()
    bad = ~((Rc > 0) & (r > 0) & (r < Rc) & np.isfinite(Rc) & np.isfinite(r))
    if np.any(bad):
        k = int(np.nonzero(bad)[0][0])
        raise ValueError(f"{who}: ring needs 0 < r < Rc, got Rc={Rc[k]}, r={r[k]} (pair {k})")
    return Rc, r


def _unit_or(v, fallback, thresh):
    """Normalise rows of v; rows with norm <= thresh take the corresponding row of fallback (unnormalised)."""
    nv = _norm(v)
    ok = nv > thresh
    return np.where(ok[:, None], v / np.where(ok, nv, 1.0)[:, None], fallback), ok


# ----------------------------------------------------------------------------------------------------------
# evaluation of f = |d|^2 and its derivatives
# ----------------------------------------------------------------------------------------------------------
def _circle_points(A, ang):
    """a = A (cos, sin), t = A (-sin, cos) for A (K, 3, 2), ang (K,)."""
    c, s = np.cos(ang), np.sin(ang)
    a = A[:, :, 0] * c[:, None] + A[:, :, 1] * s[:, None]
    t = A[:, :, 1] * c[:, None] - A[:, :, 0] * s[:, None]
    return a, t


def _eval_f(x, Ai, Aj, th, ph):
    ai, _ = _circle_points(Ai, th)
    aj, _ = _circle_points(Aj, ph)
    d = x + ai - aj
    return _dot(d, d)


def _eval_full(x, Ai, Aj, Rci, Rcj, th, ph):
    """f, gradient (2 arrays), Hessian (3 arrays: hh, hp, pp) and D at (th, ph), direct (accurate) formulas."""
    ai, ti = _circle_points(Ai, th)
    aj, tj = _circle_points(Aj, ph)
    d = x + ai - aj
    f = _dot(d, d)
    gt = 2.0 * _dot(d, ti)
    gp = -2.0 * _dot(d, tj)
    htt = 2.0 * (Rci * Rci - _dot(d, ai))
    hpp = 2.0 * (Rcj * Rcj + _dot(d, aj))
    htp = -2.0 * _dot(ti, tj)
    return f, gt, gp, htt, htp, hpp


def _lam_min(a, b, c):
    return 0.5 * (a + c) - np.hypot(0.5 * (a - c), b)


def _box_qp_min(gt, gp, a, b, c, delta):
    """Lower bound (exact up to rounding) of ``q(D) = g.D + D^T H D / 2`` over the box ``|D|_inf <= delta``,
    H = [[a, b], [b, c]]: the unconstrained minimum when H is positive definite and its minimiser lies in
    the box (slightly enlarged), otherwise the minimum over the four edges (1-D quadratics: clipped
    stationary points and the corners).  Exact because a convex q with its minimiser outside the box, and
    any non-convex q, attain the box minimum on the boundary."""
    det = a * c - b * b
    pd = (a > 0) & (det > 0)
    det_s = np.where(pd, det, 1.0)
    dt = -(c * gt - b * gp) / det_s
    dp = -(a * gp - b * gt) / det_s
    inside = pd & (np.abs(dt) <= 1.01 * delta) & (np.abs(dp) <= 1.01 * delta)
    best = np.where(inside, -0.5 * (c * gt * gt - 2.0 * b * gt * gp + a * gp * gp) / det_s, np.inf)

    def q(u, v):
        return gt * u + gp * v + 0.5 * (a * u * u + 2.0 * b * u * v + c * v * v)

    one = np.ones_like(gt)
    for sgn in (-1.0, 1.0):
        fix = sgn * delta * one
        for v in (-delta * one, delta * one):          # corners
            best = np.minimum(best, q(fix, v))
        # edge th = fix: minimise over ph
        lin = gp + b * fix
        v = np.clip(-lin / np.where(c > 0, c, 1.0), -delta, delta)
        best = np.minimum(best, np.where(c > 0, q(fix, v), np.inf))
        # edge ph = fix: minimise over th
        lin = gt + b * fix
        u = np.clip(-lin / np.where(a > 0, a, 1.0), -delta, delta)
        best = np.minimum(best, np.where(a > 0, q(u, fix), np.inf))
    return best


def _box_lower(f, gt, gp, htt, htp, hpp, delta, Rci, Rcj, slack):
    """Rigorous lower bound of f over the box [th +- delta] x [ph +- delta] (see module docstring)."""
    qmin = _box_qp_min(gt, gp, htt, htp, hpp, delta)
    S = Rci + Rcj
    D = np.sqrt(np.maximum(f, 0.0))
    Dc = D + S * delta
    cubic = delta ** 3 / 3.0 * (S * Dc + 6.0 * Rci * Rcj)
    lb = f + qmin - cubic - slack
    lip = np.maximum(D - S * delta, 0.0)
    return np.maximum(lb, lip * lip - slack)


# ----------------------------------------------------------------------------------------------------------
# safeguarded Newton on the two angles
# ----------------------------------------------------------------------------------------------------------
_ALPHAS = 0.5 ** np.arange(1, 31)


def _newton(x, Ai, Aj, Rci, Rcj, gscale, hscale, fslack, th, ph, max_iter, tol):
    """Newton from (th, ph) for K problems; returns th, ph, stationary (bool)."""
    th = th.copy()
    ph = ph.copy()
    K = th.size
    stat = np.zeros(K, dtype=bool)
    act = np.arange(K)
    for it in range(max_iter + 1):
        if act.size == 0:
            break
        xa, Aia, Aja, Ria, Rja = x[act], Ai[act], Aj[act], Rci[act], Rcj[act]
        f, gt, gp, a, b, c = _eval_full(xa, Aia, Aja, Ria, Rja, th[act], ph[act])
        ok = np.maximum(np.abs(gt), np.abs(gp)) <= tol * gscale[act]
        stat[act[ok]] = True
        if it == max_iter:
            break
        keep = ~ok
        act = act[keep]
        if act.size == 0:
            break
        xa, Aia, Aja = xa[keep], Aia[keep], Aja[keep]
        f, gt, gp, a, b, c = f[keep], gt[keep], gp[keep], a[keep], b[keep], c[keep]
        lam = _lam_min(a, b, c)
        eta = 1e-9 * hscale[act]
        tau = np.maximum(0.0, eta - lam)
        a2, c2 = a + tau, c + tau
        det = a2 * c2 - b * b
        st = -(c2 * gt - b * gp) / det
        sp = -(a2 * gp - b * gt) / det
        big = np.maximum(np.abs(st), np.abs(sp))
        scl = np.minimum(1.0, 0.5 / np.maximum(big, 1e-300))
        st *= scl
        sp *= scl
        slope = gt * st + gp * sp
        th0, ph0 = th[act], ph[act]
        sl = fslack[act]
        f1 = _eval_f(xa, Aia, Aja, th0 + st, ph0 + sp)
        acc = f1 <= f + 1e-4 * slope + sl
        alpha = np.where(acc, 1.0, 0.0)
        rest = np.nonzero(~acc)[0]
        if rest.size:
            nr, na = rest.size, _ALPHAS.size
            rr = np.repeat(rest, na)
            al = np.tile(_ALPHAS, nr)
            fr = _eval_f(xa[rr], Aia[rr], Aja[rr], th0[rr] + al * st[rr], ph0[rr] + al * sp[rr]).reshape(nr, na)
            okr = fr <= (f[rest][:, None] + 1e-4 * slope[rest][:, None] * _ALPHAS[None, :] + sl[rest][:, None])
            has = okr.any(axis=1)
            first = np.argmax(okr, axis=1)
            alpha[rest] = np.where(has, _ALPHAS[first], 0.0)
        moved = alpha > 0
        th[act] = _wrap(th0 + alpha * st)
        ph[act] = _wrap(ph0 + alpha * sp)
        act = act[moved]            # stalled problems (no acceptable step) stop, not stationary
    return th, ph, stat


# ----------------------------------------------------------------------------------------------------------
# circle - circle distance: screen + Newton + branch-and-bound certificate
# ----------------------------------------------------------------------------------------------------------
def _screen(x, Ai, Aj, Rci, Rcj, grid, n_starts, chunk=1024):
    """Coarse grid: returns start angles (m, n_starts) x2 and node values f (m, N, N) (closed-form
    trigonometric expansion ``f = K + alpha.e(th) - beta.e(ph) - e(th)^T C e(ph)``)."""
    m = x.shape[0]
    N = grid
    ang = _TWO_PI * np.arange(N) / N
    E = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    alpha = 2.0 * np.einsum("mki,mk->mi", Ai, x)
    beta = 2.0 * np.einsum("mki,mk->mi", Aj, x)
    C = 2.0 * np.einsum("mki,mkj->mij", Ai, Aj)
    K0 = _dot(x, x) + Rci * Rci + Rcj * Rcj
    F = np.empty((m, N, N))
    for s in range(0, m, chunk):
        sl = slice(s, min(m, s + chunk))
        M00 = np.einsum("nk,mkl->mnl", E, C[sl]) @ E.T
        f = F[sl]
        np.subtract((K0[sl, None] + alpha[sl] @ E.T)[:, :, None], (beta[sl] @ E.T)[:, None, :], out=f)
        f -= M00
        np.maximum(f, 0.0, out=f)
    # starts: lowest discrete (periodic, 8-neighbour) local minima, then the lowest other nodes
    locmin = np.ones((m, N, N), dtype=bool)
    for di in (-1, 0, 1):
        for dj in (-1, 0, 1):
            if di or dj:
                locmin &= F <= np.roll(F, (di, dj), axis=(1, 2))
    flat = F.reshape(m, -1)
    span = flat.max(axis=1) - flat.min(axis=1) + 1.0
    key = np.where(locmin.reshape(m, -1), flat, flat + 2.0 * span[:, None])
    k = min(n_starts, N * N)
    idx = np.argpartition(key, k - 1, axis=1)[:, :k]
    th0 = ang[idx // N]
    ph0 = ang[idx % N]
    return th0, ph0, F


def _solve_circles(x, Ai, Aj, Rci, Rcj, *, tol, max_iter, n_starts, grid, cert_tol, max_levels, max_cells):
    """Minimise |x + a_i(th) - a_j(ph)| for m pairs.  Returns th, ph, converged, info dict."""
    m = x.shape[0]
    S = Rci + Rcj
    xn = _norm(x)
    Rmax = np.maximum(Rci, Rcj)
    gscale = 2.0 * Rmax * (xn + S)
    hscale = 2.0 * Rmax * (Rmax + xn + S)
    fslack = 8.0 * _EPS * (xn + S) ** 2
    slack0 = 16.0 * _EPS * (xn + S) ** 2
    N = grid

    # 1-2: screen and starts
    th0, ph0, F = _screen(x, Ai, Aj, Rci, Rcj, N, n_starts)
    ns = th0.shape[1]
    rep = np.repeat(np.arange(m), ns)
    # 3: Newton from all starts
    th, ph, stat = _newton(x[rep], Ai[rep], Aj[rep], Rci[rep], Rcj[rep], gscale[rep], hscale[rep], fslack[rep],
                           th0.ravel(), ph0.ravel(), max_iter, tol)
    f, gt, gp, a, b, c = _eval_full(x[rep], Ai[rep], Aj[rep], Rci[rep], Rcj[rep], th, ph)
    f = f.reshape(m, ns)
    best = np.argmin(f, axis=1)
    rows = np.arange(m)
    fstar = f[rows, best]
    bth = th.reshape(m, ns)[rows, best]
    bph = ph.reshape(m, ns)[rows, best]
    bstat = stat.reshape(m, ns)[rows, best]

    # convexity balls of the stationary starts with a positive-definite Hessian
    nb_max = ns + max_levels + 1
    ball_th = np.zeros((m, nb_max))
    ball_ph = np.zeros((m, nb_max))
    ball_rho = np.zeros((m, nb_max))
    ball_f = np.full((m, nb_max), np.inf)
    nball = np.zeros(m, dtype=np.int64)

    def ball_params(fk, gtk, gpk, ak, bk, ck, stk, Ri, Rj, hs):
        mu = _lam_min(ak, bk, ck)
        good = stk & (mu > 1e3 * _EPS * hs)
        mu_s = np.where(good, mu, 1.0)
        Dm = np.sqrt(np.maximum(fk, 0.0)) + np.sqrt(Ri * Ri + Rj * Rj)       # D on a ball of radius <= 1
        Kh = 2.0 * np.sqrt((Ri * Ri + Rj * Rj) * Dm * Dm + 6.0 * Ri * Ri * Rj * Rj)
        rho = np.where(good, np.minimum(1.0, mu_s / (2.0 * Kh)), 0.0)
        fb = np.where(good, fk - (gtk * gtk + gpk * gpk) / mu_s, np.inf)
        return rho, fb

    rho, fb = ball_params(f.ravel(), gt, gp, a, b, c, stat, Rci[rep], Rcj[rep], hscale[rep])
    ball_th[:, :ns] = th.reshape(m, ns)
    ball_ph[:, :ns] = ph.reshape(m, ns)
    ball_rho[:, :ns] = rho.reshape(m, ns)
    ball_f[:, :ns] = fb.reshape(m, ns)
    nball[:] = ns

    epsD = cert_tol * S

    def threshold(fs, e):
        return np.maximum(np.sqrt(np.maximum(fs, 0.0)) - e, 0.0) ** 2

    T = threshold(fstar, epsD)

    def in_ball(p, tc, pc, delta, Tp):
        dt = _wrap(tc[:, None] - ball_th[p])
        dp = _wrap(pc[:, None] - ball_ph[p])
        dist = np.hypot(dt, dp) + _SQRT2 * np.reshape(delta, (-1, 1))
        return np.any((dist <= ball_rho[p]) & (ball_f[p] >= Tp[:, None]), axis=1)

    # 4: branch and bound, level 0 = the screen boxes
    todo = bstat & (T > 0)
    failed = ~bstat & (T > 0)
    ang = _TWO_PI * np.arange(N) / N
    # level 0, cheap Lipschitz test on the screen values (D >= D(g) - (Rc_i + Rc_j) delta), then the
    # second-order box bound at the surviving screen nodes
    delta = np.pi / N
    lip = np.maximum(np.sqrt(np.maximum(F - slack0[:, None, None], 0.0)) - (S * delta)[:, None, None], 0.0) ** 2
    p, it_, ip_ = np.nonzero((lip < T[:, None, None]) & todo[:, None, None])
    tc, pc = ang[it_], ang[ip_]
    if p.size:
        fv, gtv, gpv, av, bv, cv = _eval_full(x[p], Ai[p], Aj[p], Rci[p], Rcj[p], tc, pc)
        lb = _box_lower(fv, gtv, gpv, av, bv, cv, delta, Rci[p], Rcj[p], slack0[p])
        keep = lb < T[p]
        p, tc, pc = p[keep], tc[keep], pc[keep]
    if p.size:
        keep = ~in_ball(p, tc, pc, delta, T[p])
        p, tc, pc = p[keep], tc[keep], pc[keep]
    # refinement.  All boxes of one pair share one level; when a level would exceed ``max_cells`` boxes the
    # pairs are processed in groups (the others wait on a stack), so the budget bounds memory, not success.
    dl = np.full(p.size, delta)
    delta_min = np.pi / N * 0.5 ** max_levels
    stack = []
    levels_used = 0
    max_level_cells = 0
    while True:
        if p.size == 0:
            if not stack:
                break
            p, tc, pc, dl = stack.pop()
            keep = ~failed[p]
            p, tc, pc, dl = p[keep], tc[keep], pc[keep], dl[keep]
            continue
        # level cap: pairs whose boxes would get smaller than delta_min are not certified
        cap = dl * 0.5 < delta_min * (1.0 - 1e-12)
        if np.any(cap):
            failed[p[cap]] = True
            keep = ~failed[p]
            p, tc, pc, dl = p[keep], tc[keep], pc[keep], dl[keep]
            continue
        if 4 * p.size > max_cells:
            cnt = np.bincount(p, minlength=m)
            pairs = np.nonzero(cnt)[0]
            csum = np.cumsum(cnt[pairs])
            nfit = int(np.searchsorted(csum, max_cells // 4, side="right"))
            if nfit == 0:                       # a single pair beyond the budget
                failed[pairs[0]] = True
                keep = ~failed[p]
                p, tc, pc, dl = p[keep], tc[keep], pc[keep], dl[keep]
                continue
            now = np.zeros(m, dtype=bool)
            now[pairs[:nfit]] = True
            later = ~now[p]
            stack.append((p[later], tc[later], pc[later], dl[later]))
            p, tc, pc, dl = p[~later], tc[~later], pc[~later], dl[~later]
        h = 0.5 * dl
        n0 = p.size
        p = np.repeat(p, 4)
        dl = np.repeat(h, 4)
        sg_t = np.tile([-1.0, -1.0, 1.0, 1.0], n0)
        sg_p = np.tile([-1.0, 1.0, -1.0, 1.0], n0)
        tc = np.repeat(tc, 4) + sg_t * dl
        pc = np.repeat(pc, 4) + sg_p * dl
        levels_used = max(levels_used, int(round(np.log2(np.pi / N / dl.min()))))
        max_level_cells = max(max_level_cells, p.size)
        fv, gtv, gpv, av, bv, cv = _eval_full(x[p], Ai[p], Aj[p], Rci[p], Rcj[p], tc, pc)
        # a box centre below the threshold: better minimum exists -> Newton from the best such node per pair
        better = fv < T[p]
        if np.any(better):
            pb = p[better]
            o = np.lexsort((fv[better], pb))
            pb_s = pb[o]
            first = np.r_[True, pb_s[1:] != pb_s[:-1]]
            sel = np.nonzero(better)[0][o[first]]
            q = p[sel]
            nth, nph, nst = _newton(x[q], Ai[q], Aj[q], Rci[q], Rcj[q], gscale[q], hscale[q], fslack[q],
                                    tc[sel], pc[sel], max_iter, tol)
            nf, ngt, ngp, na, nb, nc = _eval_full(x[q], Ai[q], Aj[q], Rci[q], Rcj[q], nth, nph)
            rho_n, fb_n = ball_params(nf, ngt, ngp, na, nb, nc, nst, Rci[q], Rcj[q], hscale[q])
            room = nball[q] < nb_max
            qr = q[room]
            k = nball[qr]
            ball_th[qr, k], ball_ph[qr, k] = nth[room], nph[room]
            ball_rho[qr, k], ball_f[qr, k] = rho_n[room], fb_n[room]
            nball[qr] += 1
            upd = nf < fstar[q]
            qu = q[upd]
            fstar[qu], bth[qu], bph[qu], bstat[qu] = nf[upd], nth[upd], nph[upd], nst[upd]
            T[qu] = threshold(fstar[qu], epsD[qu])
            failed[qu[~nst[upd] & (T[qu] > 0)]] = True
        slack = 8.0 * _EPS * (xn[p] + S[p]) * (np.sqrt(np.maximum(fv, 0.0)) + dl * (xn[p] + S[p]))
        lb = _box_lower(fv, gtv, gpv, av, bv, cv, dl, Rci[p], Rcj[p], slack)
        keep = (lb < T[p]) & ~failed[p] & (T[p] > 0)      # T == 0 (D* <= eps): nothing left to certify
        p, tc, pc, dl = p[keep], tc[keep], pc[keep], dl[keep]
        if p.size:
            keep = ~in_ball(p, tc, pc, dl, T[p])
            p, tc, pc, dl = p[keep], tc[keep], pc[keep], dl[keep]
    # a best value within eps of zero is certified whatever the Newton state (0 <= D_glob <= D*)
    conv = (bstat | (T <= 0)) & ~failed
    info = {"levels": levels_used, "max_level_cells": max_level_cells}
    return _wrap(bth), _wrap(bph), conv, info


# ----------------------------------------------------------------------------------------------------------
# public kernels
# ----------------------------------------------------------------------------------------------------------
def _tangent_normal(ti, tj, x, zi, scale):
    """Deterministic normal for (numerically) intersecting centre circles (see module docstring)."""
    ui = ti / _norm(ti)[:, None]
    uj = tj / _norm(tj)[:, None]
    n = _cross(ui, uj)
    perp = x - _dot(x, ui)[:, None] * ui
    fb, _ = _unit_or(perp, zi, 1e-12 * scale)
    n, _ = _unit_or(n, fb, 1e-8)
    s = np.where(_dot(n, x) < 0.0, -1.0, 1.0)
    return n * s[:, None]


def ring_ring_kernel(x_i, R_i, Rc_i, r_i, x_j, R_j, Rc_j, r_j, *, tol=1e-12, max_iter=60, n_starts=8, grid=24,
                     cert_tol=1e-10, max_levels=24, max_cells=1 << 21, return_info=False):
    """Ring-ring kernel on rotation matrices (for the dispatcher).  Returns ``sep, n, p_i, p_j, converged``
    (plus an info dict with ``return_info``).  x_* (m, 3), R_* (m, 3, 3), Rc_*, r_* (m,)."""
    m = x_i.shape[0]
    x = x_i - x_j
    xn = _norm(x)
    S = Rc_i + Rc_j
    ui, vi, zi = R_i[:, :, 0], R_i[:, :, 1], R_i[:, :, 2]
    uj, vj, zj = R_j[:, :, 0], R_j[:, :, 1], R_j[:, :, 2]
    Ai = R_i[:, :, :2] * Rc_i[:, None, None]
    Aj = R_j[:, :, :2] * Rc_j[:, None, None]
    th = np.zeros(m)
    ph = np.zeros(m)
    conv = np.ones(m, dtype=bool)

    # coaxial (continuum of minimisers): closed form
    sinang = _norm(_cross(zi, zj))
    xperp = _norm(x - _dot(x, zi)[:, None] * zi)
    # the closed form moves each circle by at most disp, so it is within 4 disp of the true distance
    disp = np.maximum(Rc_i, Rc_j) * sinang + xperp
    coax = disp <= np.maximum(0.25 * cert_tol * S, 32.0 * _EPS * (xn + S))
    info = {"levels": 0, "max_level_cells": 0, "coaxial": int(coax.sum())}
    if np.any(coax):
        z = zi[coax]

        def proj(v):
            return v - _dot(v, z)[:, None] * z
        e3, _ = _unit_or(proj(ui[coax]), proj(ui[coax]), 0.0)
        e2, _ = _unit_or(proj(vi[coax] + vj[coax]), e3, 1e-6)
        e, _ = _unit_or(proj(ui[coax] + uj[coax]), e2, 1e-6)
        th[coax] = np.arctan2(_dot(e, vi[coax]), _dot(e, ui[coax]))
        ph[coax] = np.arctan2(_dot(e, vj[coax]), _dot(e, uj[coax]))
    gen = ~coax
    if np.any(gen):
        tg, pg, cg, inf = _solve_circles(x[gen], Ai[gen], Aj[gen], Rc_i[gen], Rc_j[gen], tol=tol,
                                         max_iter=max_iter, n_starts=n_starts, grid=grid, cert_tol=cert_tol,
                                         max_levels=max_levels, max_cells=max_cells)
        th[gen], ph[gen], conv[gen] = tg, pg, cg
        info.update(inf)

    ai, ti = _circle_points(Ai, th)
    aj, tj = _circle_points(Aj, ph)
    d = x + ai - aj
    D = _norm(d)
    small = D <= 64.0 * _EPS * (xn + S)
    n = d / np.where(small, 1.0, D)[:, None]
    if np.any(small):
        n[small] = _tangent_normal(ti[small], tj[small], x[small], zi[small], (xn + S)[small])
    sep = D - r_i - r_j
    p_i = x_i + ai - r_i[:, None] * n
    p_j = x_j + aj + r_j[:, None] * n
    if return_info:
        return sep, n, p_i, p_j, conv, info
    return sep, n, p_i, p_j, conv


def ring_ring(x_i, q_i, Rc_i, r_i, x_j, q_j, Rc_j, r_j, *, tol=1e-12, max_iter=60, n_starts=8, grid=24,
              cert_tol=1e-10, max_levels=24, max_cells=1 << 21):
    """Signed separation of m ring pairs (see the module docstring for definitions and the certificate).

    x_*: (m, 3) centres, q_*: (m, 4) unit quaternions (w, x, y, z) (or (4,) for all), Rc_*, r_*: centre-circle
    and tube radii (scalars or (m,)).  tol: relative gradient tolerance of the Newton solves; max_iter: Newton
    iteration cap; n_starts: Newton starts per pair; grid: coarse screen resolution per angle; cert_tol:
    global-optimality tolerance relative to Rc_i + Rc_j; max_levels: depth cap of the branch and bound;
    max_cells: boxes per refinement step (memory bound; pairs are processed in groups beyond it).
    Returns a :class:`~relcp_mpi.geometry.contact.ContactGeometry`; ``converged`` is False where the
    certificate failed (the values are still the best found).
    """
    x_i = np.asarray(x_i, dtype=float).reshape(-1, 3)
    m = x_i.shape[0]
    if m == 0:
        return _geometry(np.empty(0), np.empty((0, 3)), np.empty((0, 3)), np.empty((0, 3)),
                         np.ones(0, dtype=bool))
    x_i, R_i = _prep_pose(x_i, q_i, m)
    x_j, R_j = _prep_pose(x_j, q_j, m)
    Rc_i, r_i = _prep_ring(Rc_i, r_i, m, "ring_ring (i)")
    Rc_j, r_j = _prep_ring(Rc_j, r_j, m, "ring_ring (j)")
    return _geometry(*ring_ring_kernel(x_i, R_i, Rc_i, r_i, x_j, R_j, Rc_j, r_j, tol=tol, max_iter=max_iter,
                                       n_starts=n_starts, grid=grid, cert_tol=cert_tol, max_levels=max_levels,
                                       max_cells=max_cells))


def ring_sphere_kernel(x_ring, R_ring, Rc, r, x_s, R):
    """Ring (body i) vs sphere (body j) on rotation matrices; returns ``sep, n, p_i, p_j, converged``.

    Closest circle point to the sphere centre: ``c = x + Rc e``, e = unit projection of ``x_s - x`` onto the
    ring plane; sphere centre on the ring axis (every circle point equidistant): e = body x axis.
    Sphere centre on the centre circle: n = -e (towards the ring centre).
    """
    u, z = R_ring[:, :, 0], R_ring[:, :, 2]
    w = x_s - x_ring
    scale = _norm(w) + Rc
    wp = w - _dot(w, z)[:, None] * z
    e, _ = _unit_or(wp, u, 32.0 * _EPS * scale)
    c = x_ring + Rc[:, None] * e
    d = c - x_s
    D = _norm(d)
    n, _ = _unit_or(d, -e, 64.0 * _EPS * scale)
    sep = D - r - R
    p_i = c - r[:, None] * n
    p_j = x_s + R[:, None] * n
    return sep, n, p_i, p_j, np.ones(sep.shape, dtype=bool)


def ring_sphere(x_ring, q_ring, Rc, r, x_s, R):
    """Signed separation of m (ring i, sphere j) pairs; normal from the sphere towards the ring.

    x_ring, x_s (m, 3); q_ring (m, 4) or (4,); Rc, r, R scalars or (m,).  Exact closed form (ContactGeometry).
    """
    x_ring = np.asarray(x_ring, dtype=float).reshape(-1, 3)
    m = x_ring.shape[0]
    x_ring, R_ring = _prep_pose(x_ring, q_ring, m)
    Rc, r = _prep_ring(Rc, r, m, "ring_sphere")
    x_s = np.asarray(x_s, dtype=float).reshape(m, 3)
    R = np.broadcast_to(np.asarray(R, dtype=float), (m,)).copy()
    return _geometry(*ring_sphere_kernel(x_ring, R_ring, Rc, r, x_s, R))


def ring_wall_lowest_point(x, R_ring, Rc, r, n):
    """Point of each ring minimising ``n . y``: c = x + Rc e with e = -(unit projection of n on the ring
    plane) (flat ring on the wall: e = body x axis), minus r n."""
    u, z = R_ring[:, :, 0], R_ring[:, :, 2]
    np_ = n - _dot(n, z)[:, None] * z
    e, _ = _unit_or(-np_, u, 32.0 * _EPS)
    return x + Rc[:, None] * e - r[:, None] * n


def ring_wall(x, q, Rc, r, wall_point, wall_normal):
    """Signed separation of m rings from walls (plane point, unit normal into the allowed side; renormalised).

    ``sep = min_{y in ring} n . (y - wall_point)``, n = wall normal, p_j = projection of p_i on the plane.
    """
    x = np.asarray(x, dtype=float).reshape(-1, 3)
    m = x.shape[0]
    x, R_ring = _prep_pose(x, q, m)
    Rc, r = _prep_ring(Rc, r, m, "ring_wall")
    w = np.broadcast_to(np.asarray(wall_point, dtype=float), (m, 3))
    n = np.broadcast_to(np.asarray(wall_normal, dtype=float), (m, 3))
    n = n / _norm(n)[:, None]
    p_i = ring_wall_lowest_point(x, R_ring, Rc, r, n)
    sep = _dot(n, p_i - w)
    p_j = p_i - sep[:, None] * n
    return _geometry(sep, n.copy(), p_i, p_j, np.ones(m, dtype=bool))


def ring_proxy_spheres(Rc, r, resolution):
    """Body-frame centres (resolution, 3) of the multi-sphere ring model: ``resolution`` spheres of radius r
    evenly spaced on the centre circle (angles 2 pi k / resolution, k = 0..resolution-1).

    The union of the spheres lies inside the torus; between neighbouring spheres the tube is thinned to
    ``sqrt(r^2 - (Rc sin(pi / resolution))^2)`` (the spheres are disconnected when Rc sin(pi/res) >= r).
    """
    Rc = float(Rc)
    r = float(r)
    resolution = int(resolution)
    if not (0 < r < Rc):
        raise ValueError(f"ring_proxy_spheres: need 0 < r < Rc, got Rc={Rc}, r={r}")
    if resolution < 1:
        raise ValueError(f"ring_proxy_spheres: resolution must be >= 1, got {resolution}")
    a = _TWO_PI * np.arange(resolution) / resolution
    return np.stack([Rc * np.cos(a), Rc * np.sin(a), np.zeros(resolution)], axis=1)


def rings_linked(x_i, q_i, Rc_i, x_j, q_j, Rc_j):
    """Whether the centre circles of m ring pairs are linked (interlaced), (m,) bool.

    Closed form: circle j, ``p(ph) = x_j + Rc_j (cos ph u_j + sin ph v_j)``, meets the plane of ring i where
    ``h + a cos ph + b sin ph = 0`` (``h = z_i.(x_j - x_i)``, ``a = Rc_j z_i.u_j``, ``b = Rc_j z_i.v_j``), i.e.
    at ``ph = atan2(b, a) +- arccos(-h / hypot(a, b))`` (no crossing when ``hypot(a, b) <= |h|``, tangency
    counted as no crossing).  Two disjoint circles are linked iff exactly one of the (at most two) crossings
    lies inside the disk of circle i (``|p - x_i| < Rc_i``).  Intersecting circles (a crossing exactly on
    circle i) are reported as not linked.  Used for chainmail diagnostics (tests, tools/study_chainmail.py).
    """
    x_i = np.asarray(x_i, dtype=float).reshape(-1, 3)
    m = x_i.shape[0]
    x_i, R_i = _prep_pose(x_i, q_i, m)
    x_j, R_j = _prep_pose(x_j, q_j, m)
    Rc_i = np.broadcast_to(np.asarray(Rc_i, dtype=float), (m,))
    Rc_j = np.broadcast_to(np.asarray(Rc_j, dtype=float), (m,))
    zi = R_i[:, :, 2]
    uj, vj = R_j[:, :, 0], R_j[:, :, 1]
    w = x_j - x_i
    h = _dot(zi, w)
    a = Rc_j * _dot(zi, uj)
    b = Rc_j * _dot(zi, vj)
    rho = np.hypot(a, b)
    cross = rho > np.abs(h)
    base = np.arctan2(b, a)
    delta = np.arccos(np.clip(-h / np.where(cross, rho, 1.0), -1.0, 1.0))
    inside = np.zeros((m, 2), dtype=bool)
    for k, s in enumerate((1.0, -1.0)):
        ph = base + s * delta
        p = w + Rc_j[:, None] * (np.cos(ph)[:, None] * uj + np.sin(ph)[:, None] * vj)
        p = p - _dot(p, zi)[:, None] * zi                   # remove the rounding residue off the plane
        inside[:, k] = _dot(p, p) < Rc_i * Rc_i
    return cross & (inside[:, 0] != inside[:, 1])
