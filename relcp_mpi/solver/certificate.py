"""Infeasibility certificates of contact LCPs ``0 <= g _|_ q + A g >= 0`` with ``A = D^T (dt M) D``.

Why: A is symmetric positive semidefinite, so the LCP has a solution exactly when it is feasible
(``{g >= 0 : A g + q >= 0}`` non-empty).  By Farkas' lemma it is infeasible iff some ``y >= 0`` has
``A y <= 0`` and ``q.y < 0``; for y >= 0, ``A y <= 0`` forces ``y^T A y = 0`` hence ``A y = 0``, i.e.
``M^(1/2) D y = 0``: ``D y = 0`` on the dofs of every body with a positive definite mobility block.  Such a y is
a set of rows whose contact forces cancel on every body (zero net force and torque) while their weighted gaps
sum to a negative number: the rows demand a compression no rigid motion can produce.

What this module does (numpy/scipy only; it works on a dump, see :mod:`relcp_mpi.contact.lcp_dump`):

1. :func:`neighbourhood`: the columns touching a set of bodies and their neighbours (``hops`` rings of bodies
   sharing a row), the default search space (seeds: the bodies of the largest multipliers, i.e. where a
   diverging solve runs off);
2. :func:`search_certificate`: the LP ``min sum(y)  s.t.  D_S y = 0, q_S.y = -1, y >= 0`` over those columns S
   (HiGHS dual simplex, so the answer is a vertex with a small support); rows of D are restricted to the dofs
   of bodies with a nonzero mobility block (fixed bodies absorb any force);
3. verification in exact rational arithmetic (:class:`fractions.Fraction` of the float data, which are exact
   binary rationals): on the LP's support T, the linear system ``D_T z = 0, q_T.z = -1`` is solved exactly
   (free variables, if any, set to the LP's values); if ``z >= 0`` then ``A z`` and ``q.z`` are evaluated
   exactly; ``A z <= 0`` and ``q.z < 0`` certify infeasibility of the float LCP as given (``exact = True``).
   Otherwise the LP's float y (clipped to y >= 0) is evaluated exactly and gives the rigorous bound
   ``sum(g) >= -q.y / max(A y)^+`` for every feasible g (from ``0 <= y.(A g + q) <= sum(g) max(A y)^+ + q.y``):
   the LCP may be solvable but only with huge multipliers (``bound``).  When the LP has no solution, the
   candidate of least ``||D y||_1`` (relaxed LP, ``q.y = -1``) gives the same kind of bound.

An LP that finds nothing proves nothing about rows outside S (``status = 'none'``).
"""
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = ["CertificateResult", "neighbourhood", "search_certificate", "check_dump", "describe"]

EXACT_MAX_SUPPORT = 80      # rational elimination beyond this support is left to the floating bound


@dataclass
class CertificateResult:
    """Outcome of a certificate search.

    ``status``: 'infeasible' (exact Farkas certificate found and verified) or 'none'.  ``rows`` (k,) global
    column indices of the candidate's support (empty if the LP found none); ``y`` (k,) weights (exact
    certificate converted to float when ``exact``, else the LP's), normalised to q.y = -1; ``qy`` the exact
    ``q.y`` as float; ``dy_residual`` ``||D y||_inf`` of the LP's float answer; ``bound`` rigorous lower bound on
    ``sum(g)`` of every feasible g (inf when infeasible, nan when there is no candidate); ``n_searched`` the
    number of columns searched; ``lp_status`` HiGHS' message."""

    status: str
    rows: np.ndarray
    y: np.ndarray
    exact: bool
    qy: float
    dy_residual: float
    bound: float
    n_searched: int
    lp_status: str = ""

    @property
    def infeasible(self):
        return self.status == "infeasible"


def _incidence(D):
    """(N bodies, c) 0/1 CSR: body b has a nonzero in column j."""
    import scipy.sparse as sp
    C = D.tocoo()
    B = sp.csr_matrix((np.ones(C.nnz), (C.row // 6, C.col)), shape=(D.shape[0] // 6, D.shape[1]))
    B.data[:] = 1.0
    return B


def neighbourhood(D, seed_bodies, hops=1):
    """Sorted column indices of the rows touching ``seed_bodies`` (block-row indices) and ``hops`` rings of
    their neighbours (bodies sharing a row with the set)."""
    B = _incidence(D)
    Bt = B.T.tocsr()
    bodies = np.unique(np.asarray(seed_bodies, np.int64))
    for _ in range(max(int(hops), 0)):
        cols = np.unique(B[bodies].indices)
        bodies = np.unique(np.concatenate([bodies, Bt[cols].indices]))
    return np.unique(B[bodies].indices).astype(np.int64)


def _free_dofs(blocks):
    """Boolean (6 N,): dofs of bodies whose mobility block is not identically zero."""
    return np.repeat(np.any(blocks.reshape(len(blocks), -1) != 0, axis=1), 6)


def search_certificate(D, q, blocks, dt, cols=None, relaxed=True):
    """Search ``y >= 0, D y = 0, q.y < 0`` supported on ``cols`` (default: all columns) and verify it.

    ``D`` scipy sparse (6 N, c), ``q`` (c,), ``blocks`` (N, 6, 6) unscaled mobility, ``dt`` [T].  ``relaxed``:
    when the LP has no solution, bound the multipliers by the relaxed LP (module docstring); off, that second LP
    is skipped (status 'none', nan bound).  Returns :class:`CertificateResult`."""
    from scipy.optimize import linprog
    D = D.tocsc()
    q = np.asarray(q, float)
    cols = np.arange(D.shape[1]) if cols is None else np.asarray(cols, np.int64)
    k = len(cols)
    empty = CertificateResult("none", np.zeros(0, np.int64), np.zeros(0), False, float("nan"), float("nan"),
                              float("nan"), k, "")
    if k == 0 or not np.any(q[cols] < 0):
        empty.lp_status = "no row with q < 0" if k else "no rows"
        return empty
    Ds = D[:, cols].tocsr()
    dofs = np.flatnonzero(_free_dofs(blocks) & (np.diff(Ds.indptr) > 0))
    import scipy.sparse as sp
    A_eq = sp.vstack([Ds[dofs], sp.csr_matrix(q[cols][None, :])]).tocsr()
    b_eq = np.concatenate([np.zeros(len(dofs)), [-1.0]])
    lp = linprog(np.ones(k), A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method="highs-ds")
    empty.lp_status = lp.message
    if lp.status == 2 and relaxed:
        # no exact certificate: the candidate of least ||D y||_1 (D y = s+ - s-, q.y = -1) still bounds the
        # multipliers of every feasible point (nearly infeasible LCPs)
        m = len(dofs)
        I = sp.identity(m, format="csr")
        A_rel = sp.vstack([sp.hstack([Ds[dofs], -I, I]),
                           sp.hstack([sp.csr_matrix(q[cols][None, :]), sp.csr_matrix((1, 2 * m))])]).tocsr()
        rel = linprog(np.concatenate([np.zeros(k), np.ones(2 * m)]), A_eq=A_rel, b_eq=b_eq, bounds=(0, None),
                      method="highs-ds")
        if rel.status != 0:
            return empty
        y = np.maximum(rel.x[:k], 0.0)
        supp = np.flatnonzero(y > 1e-12 * y.max())
        qy, wmax = _exact_farkas(D, q, dt * blocks, cols[supp], [Fraction(float(v)) for v in y[supp]])
        bound = float(-qy / wmax) if (qy < 0 and wmax > 0) else float("nan")
        return CertificateResult("none", cols[supp], y[supp], False, float(qy),
                                 float(np.abs(D[:, cols[supp]] @ y[supp]).max()), bound, k, lp.message)
    if lp.status != 0:
        return empty
    y = np.maximum(lp.x, 0.0)
    supp = np.flatnonzero(y > 1e-12 * y.max())
    rows, ys = cols[supp], y[supp]
    dy = float(np.abs(D[:, rows] @ ys).max()) if len(rows) else 0.0
    z = _exact_null_vector(D, q, blocks, rows, ys) if len(rows) <= EXACT_MAX_SUPPORT else None
    if z is not None:
        qy, wmax = _exact_farkas(D, q, dt * blocks, rows, z)
        if qy < 0 and wmax <= 0:
            zf = np.array([float(v) for v in z])
            return CertificateResult("infeasible", rows, zf, True, float(qy), dy, float("inf"), k, lp.message)
    qy, wmax = _exact_farkas(D, q, dt * blocks, rows, [Fraction(float(v)) for v in ys])
    if qy < 0 and wmax <= 0:
        return CertificateResult("infeasible", rows, ys, True, float(qy), dy, float("inf"), k, lp.message)
    bound = float(-qy / wmax) if qy < 0 else float("nan")
    return CertificateResult("none", rows, ys, False, float(qy), dy, bound, k, lp.message)


def _exact_null_vector(D, q, blocks, rows, y):
    """Exact rational z on ``rows`` with D z = 0 (free-body dofs) and q.z = -1, free variables taken from the
    float ``y``; None if the system is inconsistent or z has a negative entry."""
    Dc = D[:, rows].tocsr()
    dofs = np.flatnonzero(_free_dofs(blocks) & (np.diff(Dc.indptr) > 0))
    Dd = Dc[dofs].toarray()
    k = len(rows)
    M = [[Fraction(float(v)) for v in r] + [Fraction(0)] for r in Dd]
    M.append([Fraction(float(v)) for v in q[rows]] + [Fraction(-1)])
    piv = []                                    # Gauss-Jordan elimination to reduced row echelon form
    r = 0
    for c in range(k):
        p = next((i for i in range(r, len(M)) if M[i][c] != 0), None)
        if p is None:
            continue
        M[r], M[p] = M[p], M[r]
        inv = 1 / M[r][c]
        M[r] = [v * inv for v in M[r]]
        for i in range(len(M)):
            if i != r and M[i][c] != 0:
                f = M[i][c]
                M[i] = [a - f * b for a, b in zip(M[i], M[r])]
        piv.append(c)
        r += 1
        if r == len(M):
            break
    if any(M[i][k] != 0 for i in range(r, len(M))):       # 0 = nonzero: inconsistent
        return None
    z = [Fraction(float(v)) for v in y]
    free = [c for c in range(k) if c not in piv]
    for i, c in enumerate(piv):
        z[c] = M[i][k] - sum(M[i][f] * z[f] for f in free)
    return z if all(v >= 0 for v in z) else None


def _exact_farkas(D, q, scaled_blocks, rows, z):
    """Exact (q.z, max_c (A z)_c) for z >= 0 on ``rows`` (Fractions), A = D^T blockdiag(scaled_blocks) D."""
    Dc = D.tocsc()
    u = {}
    for j, zj in zip(rows, z):
        for p in range(Dc.indptr[j], Dc.indptr[j + 1]):
            r = int(Dc.indices[p])
            u[r] = u.get(r, Fraction(0)) + Fraction(float(Dc.data[p])) * zj
    f = {}
    for b in sorted({r // 6 for r in u}):
        ub = [u.get(6 * b + i, Fraction(0)) for i in range(6)]
        Mb = scaled_blocks[b]
        for i in range(6):
            s = sum((Fraction(float(Mb[i, j])) * ub[j] for j in range(6) if ub[j] != 0 and Mb[i, j] != 0),
                    Fraction(0))
            if s != 0:
                f[6 * b + i] = s
    qy = sum((Fraction(float(q[j])) * zj for j, zj in zip(rows, z)), Fraction(0))
    if not f:
        return qy, Fraction(0)
    Dr = D.tocsr()
    w = {}
    for r, fr in f.items():
        for p in range(Dr.indptr[r], Dr.indptr[r + 1]):
            c = int(Dr.indices[p])
            w[c] = w.get(c, Fraction(0)) + Fraction(float(Dr.data[p])) * fr
    return qy, max(max(w.values()), Fraction(0))


def check_dump(data, bodies=None, hops=1, top=10, max_rows=5000, whole=None):
    """Search a certificate in a dumped LCP (see :mod:`relcp_mpi.contact.lcp_dump`).

    Search space: the whole LCP when ``whole`` is True, or when it is None and the LCP has at most ``max_rows``
    rows; else the :func:`neighbourhood` (``hops``) of ``bodies`` (gids), by default of the bodies of the
    ``top`` largest multipliers ``gamma``.  Returns :class:`CertificateResult`."""
    D, q, gamma = data["D"], np.asarray(data["q"]), np.asarray(data["gamma"])
    c = D.shape[1]
    if whole or (whole is None and bodies is None and c <= max_rows):
        cols = None
    else:
        if bodies is not None:
            seeds = np.flatnonzero(np.isin(data["body_gid"], np.asarray(bodies, np.int64)))
        else:
            big = np.argsort(-np.nan_to_num(gamma, nan=0.0), kind="stable")[:top]
            seeds = np.unique(D.tocsc()[:, big].indices // 6)
        cols = neighbourhood(D, seeds, hops)
    return search_certificate(D, q, data["blocks"], data["dt"], cols)


def _row_name(data, j):
    gi, gj = int(data["gid_i"][j]), int(data["gid_j"][j])
    other = f"wall {-1 - gj}" if gj < 0 else f"body {gj}"
    return (f"row {j}: body {gi} - {other} (sub {int(data['sub'][j])}, level {int(data['level'][j])}, "
            f"sep0 {float(data['sep0'][j]):+.3e}, q {float(data['q'][j]):+.3e})")


def describe(res, data):
    """Human-readable verdict: 'infeasible, rows: ...' or 'no certificate found ...' (one string)."""
    if res.infeasible:
        lines = [f"infeasible, rows: {len(res.rows)} row(s) with y >= 0, D y = 0, q.y < 0 (verified in exact "
                 f"rational arithmetic; searched {res.n_searched} rows):"]
        lines += [f"  y = {w:.4g}  " + _row_name(data, j) for j, w in zip(res.rows, res.y)]
        return "\n".join(lines)
    msg = f"no certificate found (searched {res.n_searched} rows; LP: {res.lp_status})"
    if np.isfinite(res.bound):
        msg += (f"; nearest candidate ({len(res.rows)} rows, ||D y|| = {res.dy_residual:.1e}) proves every "
                f"feasible multiplier vector has sum >= {res.bound:.3e}")
    return msg
