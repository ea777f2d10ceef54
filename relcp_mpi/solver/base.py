"""Shared base of the LCP solvers: results, errors, fused reductions, persistent work vectors, the min-map
residual, the certificate, and :class:`LCPSolver`, the class every method derives from.

See :mod:`relcp_mpi.solver.lcp` for the problem, the contract of ``solve_lcp`` and the certificate's claims;
:mod:`relcp_mpi.solver.registry` for the list of methods.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relcp_mpi.petsc import get_petsc
from relcp_mpi.solver import projection as _proj
from relcp_mpi.solver.operator import any_rank
from relcp_mpi.solver.vector_jit import minmap_local  # noqa: F401 (the solvers import it from here)

PETSc = get_petsc()

__all__ = ["LCPSolver", "SolverResult", "SolverError", "minmap_residual", "certify", "empty_result"]

_U = np.finfo(np.float64).eps / 2.0


class LCPSolver:
    """One LCP method: ``solve(A, q, x, tol, max_iter, raise_on_fail, mu=None, **options) -> SolverResult``.

    Subclasses implement :meth:`solve` (``x``: initial guess in, solution out) with the shared machinery of
    this module: :func:`start_projected_gradient`, :class:`FusedReducer` (one allreduce per iteration),
    :func:`work_vecs` (persistent work Vecs composed on ``A``), :func:`minmap_local` and :meth:`finish`
    (certificate, :class:`SolverResult`, :class:`SolverError`).  ``name`` is the registry name (e.g. 'tao-bncg')."""

    def __init__(self, name):
        self.name = name

    def solve(self, A, q, x, tol=1e-8, max_iter=10000, raise_on_fail=True, mu=None, **options):
        raise NotImplementedError

    def finish(self, A, q, x, g, **kw):
        """:func:`finish` with this method's name."""
        return finish(A, q, x, g, method=self.name, **kw)


@dataclass
class SolverResult:
    """Outcome of an LCP solve (fields in the order of the architecture contract; the last two are extras)."""

    converged: bool
    iterations: int
    residual: float
    history: np.ndarray
    certificate: float
    method: str
    error_bound: float = float("nan")
    step: float = float("nan")


class SolverError(RuntimeError):
    """Raised when an LCP solve does not reach the tolerance.  Carries ``method``, ``iterations``, ``residual``,
    ``tol``, ``history`` (np.ndarray of residuals, entry 0 = initial guess) and ``result`` (the SolverResult)."""

    def __init__(self, method, iterations, residual, tol, history, reason="maximum iterations reached",
                 result=None):
        self.method = method
        self.iterations = int(iterations)
        self.residual = float(residual)
        self.tol = float(tol)
        self.history = np.asarray(history, dtype=float)
        self.reason = reason
        self.result = result
        super().__init__(
            "LCP solver '%s' did not converge (%s): min-map residual %.3e > tol %.3e after %d iterations"
            % (method, reason, self.residual, self.tol, self.iterations))


# ------------------------------------------------------------------------------------------- shared machinery
def mpi_comm_of(obj):
    """mpi4py communicator of a PETSc object."""
    return obj.getComm().tompi4py()


_OPS = {}


def _fused_op(nsum):
    """User MPI op: elementwise sum of the first ``nsum`` doubles, max of the rest (commutative)."""
    op = _OPS.get(nsum)
    if op is None:
        from mpi4py import MPI

        def fn(inbuf, outbuf, datatype, _n=nsum):
            a = np.frombuffer(inbuf, dtype=np.float64)
            b = np.frombuffer(outbuf, dtype=np.float64)
            b[:_n] += a[:_n]
            np.maximum(b[_n:], a[_n:], out=b[_n:])

        op = MPI.Op.Create(fn, commute=True)
        _OPS[nsum] = op
    return op


class FusedReducer:
    """One ``Allreduce`` for several sums and maxima: ``reduce(sums, maxes) -> (sums, maxes)`` (numpy arrays).

    PETSc's ``VecDot``/``VecNorm`` cost one allreduce each; the solvers compute all per-iteration local dot products
    and maxima with numpy and call this once per iteration.  On one rank no MPI call is made.
    """

    def __init__(self, comm, nsum, nmax):
        self.comm = comm
        self.nsum = nsum
        self.buf = np.zeros(nsum + nmax)
        self.out = np.zeros(nsum + nmax)
        self.parallel = comm is not None and comm.Get_size() > 1
        self.op = _fused_op(nsum) if self.parallel else None
        self.count = 0

    def reduce(self, sums, maxes):
        n = self.nsum
        self.buf[:n] = sums
        self.buf[n:] = maxes
        if self.parallel:
            from mpi4py import MPI
            self.comm.Allreduce([self.buf, MPI.DOUBLE], [self.out, MPI.DOUBLE], op=self.op)
            res = self.out
        else:
            res = self.buf
        self.count += 1
        return res[:n].copy(), res[n:].copy()


def work_vecs(A, tag, template, n):
    """``n`` work Vecs laid out like ``template``, persistent across calls: composed on ``A`` under
    ``relcp_<tag>_<i>`` and re-created only if the (local, global) size changed.  They die with ``A``."""
    lsz, gsz = template.getLocalSize(), template.getSize()
    names = ["relcp_%s_%d" % (tag, i) for i in range(n)]
    cached = [A.query(nm) for nm in names]
    stale = any(v is None or v.getLocalSize() != lsz or v.getSize() != gsz for v in cached)
    if any_rank(A.getComm(), stale):       # collective decision: every rank re-creates together
        cached = []
        for nm in names:
            v = template.duplicate()
            A.compose(nm, v)
            cached.append(v)
    return cached


@dataclass
class GradientStart:
    """What :func:`start_projected_gradient` sets up for a projected-gradient method (BBPGD, APGD).

    ``vecs``: the method's persistent work Vecs (``vecs[0]`` is ``g``, holding ``g_0 = A x_0 + q``);
    ``arrays``: their local numpy arrays in the same order; ``X`` / ``Q``: local arrays of ``x`` (already
    projected, ``x_0 = P(x_in)``) and ``q`` (read-only); ``red``: the method's fused reducer (``nsum`` sums +
    1 max); ``residual``: the global min-map residual of ``x_0``; ``history``: ``[residual]``."""

    comm: object
    red: FusedReducer
    vecs: list
    arrays: list
    X: np.ndarray
    Q: np.ndarray
    residual: float
    history: list


def start_projected_gradient(A, q, x, tag, n_work, nsum=3):
    """Shared start of the projected-gradient solvers: work Vecs (``work_vecs(A, tag, x, n_work)``), a
    ``FusedReducer(comm, nsum, 1)``, projection of the initial guess onto ``x >= 0`` in place, ``g = A x + q``
    in ``vecs[0]`` and the initial min-map residual (one fused reduction, the sums slots unused).
    Collective.  Returns a :class:`GradientStart`."""
    comm = mpi_comm_of(A)
    vecs = work_vecs(A, tag, x, n_work)
    red = FusedReducer(comm, nsum, 1)
    X = x.getArray()
    Q = q.getArray(readonly=True)
    arrays = [v.getArray() for v in vecs]
    G = arrays[0]
    np.maximum(X, 0.0, out=X)
    x.stateIncrease()
    A.mult(x, vecs[0])
    G += Q
    _, (res,) = red.reduce([0.0] * nsum, [minmap_local(X, G)])
    return GradientStart(comm, red, list(vecs), arrays, X, Q, res, [res])


def check_layout(A, q, x, comm):
    """Collective check that x, q match A's column layout (raises ValueError on every rank)."""
    nl = A.getLocalSize()[1]
    if any_rank(A.getComm(), not (x.getLocalSize() == nl and q.getLocalSize() == nl)):
        raise ValueError("solve_lcp: x and q must have the column layout of A (local size %d on this rank; "
                         "got x %d, q %d)" % (nl, x.getLocalSize(), q.getLocalSize()))


def minmap_residual(A, q, x):
    """Global min-map residual ``||x - P(x - (A x + q))||_inf`` (exact formula ``||min(x, Ax+q)||_inf`` is used
    for ``x >= 0``; for infeasible ``x`` the infeasibility ``max(-x)`` enters through the same formula).
    Collective; uses a persistent work Vec composed on ``A``."""
    comm = mpi_comm_of(A)
    (g,) = work_vecs(A, "minmap", x, 1)
    A.mult(x, g)
    G = g.getArray()
    G += q.getArray(readonly=True)
    X = x.getArray(readonly=True)
    r = float(np.abs(X - np.maximum(X - G, 0.0)).max()) if X.size else 0.0
    g.stateIncrease()
    if comm.Get_size() > 1:
        from mpi4py import MPI
        r = comm.allreduce(r, op=MPI.MAX)
    return r


def certify(A, q, x, g=None, t=1.0, mu=None):
    """``(certificate, error_bound)`` for iterate ``x`` (>= 0) with gradient ``g = A x + q`` (computed if None)
    and step ``t``.  See the module docstring for the exact claims.  Collective (1 or 2 reductions; one extra
    matvec when ``mu`` is given, two when ``g`` is None)."""
    comm = mpi_comm_of(A)
    t = float(t) if (t is not None and np.isfinite(t) and t > 0) else 1.0
    X = x.getArray(readonly=True)
    if g is None:
        (gv,) = work_vecs(A, "cert_g", x, 1)
        A.mult(x, gv)
        G = gv.getArray()
        G += q.getArray(readonly=True)
        gv.stateIncrease()
    else:
        G = g.getArray(readonly=True)
    n_loc = X.size
    Y = X - t * G
    Xp = np.maximum(Y, 0.0)
    E = X - Xp
    ok = bool(np.all(X >= 0.0))
    sup_x = float(_proj._sup_terms(Y, X, 0.0, np.inf).sum()) if (n_loc and ok) else (0.0 if ok else np.inf)
    sup_p = float(_proj._sup_terms(Y, Xp, 0.0, np.inf).sum()) if n_loc else 0.0
    ee = float(E @ E) if n_loc else 0.0
    red = FusedReducer(comm, 4, 0)
    (s_x, s_p, ee, n_glob), _ = red.reduce([sup_x, sup_p, ee, float(n_loc)], [])
    size = comm.Get_size()
    eps_a = _proj._eps_from_sup(s_x, int(n_glob), True, nred=size)
    k = int(n_glob) + size + 2
    norm_e = np.sqrt(ee * (1.0 + k * _U / (1.0 - k * _U))) * (1.0 + 2.0 * _U)
    eps_b = norm_e + _proj._eps_from_sup(s_p, int(n_glob), True, nred=size)
    cert = float(min(eps_a, eps_b))
    bound = float("nan")
    if mu is not None and mu > 0:
        ev, aev = work_vecs(A, "cert_e", x, 2)
        ev.getArray()[:] = E
        ev.stateIncrease()
        A.mult(ev, aev)
        W = E - t * aev.getArray(readonly=True)
        ww = float(W @ W) if n_loc else 0.0
        (ww,), _ = FusedReducer(comm, 1, 0).reduce([ww], [])
        bound = cert + float(np.sqrt(ww)) / (t * mu)
    return cert, bound


def finish(A, q, x, g, *, method, converged, iterations, residual, history, tol, t, mu, raise_on_fail,
           reason="maximum iterations reached"):
    """Build the SolverResult (certificate included) and raise SolverError when not converged and asked to."""
    x.stateIncrease()
    cert, bound = certify(A, q, x, g=g, t=t, mu=mu)
    res = SolverResult(bool(converged), int(iterations), float(residual), np.asarray(history, dtype=float),
                       cert, method, bound, float(t) if t else float("nan"))
    if not converged and raise_on_fail:
        raise SolverError(method, iterations, residual, tol, history, reason=reason, result=res)
    return res


def empty_result(method):
    """The result of a zero-size LCP (converged at once)."""
    return SolverResult(True, 0, 0.0, np.zeros(1), 0.0, method, 0.0, 1.0)
