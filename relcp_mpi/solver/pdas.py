"""Proximal primal-dual active-set method (a semismooth Newton method) for ``0 <= g _|_ A g + q >= 0``
(``method='pdas'``), with its linear systems reduced to the body dofs (:mod:`relcp_mpi.solver.body_system`).

Why: the first-order methods (BBPGD, APGD) need iterations that grow with the size of a jammed packing (the force
network behaves like an elliptic problem over the whole packing), and the interior-point method (:mod:`.ipm`)
has flat Newton-step counts but cannot use a warm start: it factors a new matrix at every one of its 15-20 Newton
steps, at every recursion level.  An active-set Newton method needs a new factorization only when its guess of
the active contacts changes, and a recursion level's warm start (the previous level's solution) already has
almost the right active set.

Iteration (``c`` rows, ``d = diag(A) + eps``, ``eps = prox * mean(diag A)``)::

    w = A g + q
    active set   S = { k : g_k - w_k / d_k > 0 }            (the semismooth Newton step of the min-map)
    Newton/prox  (eps I + A_SS) g+_S = eps g_S - q_S,   g+_k = 0 off S

The proximal term ``eps`` makes every system positive definite although ``A_SS`` is singular whenever the active
contacts outnumber the body dofs (redundant line-contact rows, jammed packings), and it turns the iteration on a
fixed active set into the proximal-point method for ``A_SS g_S = -q_S``, which converges for any ``eps > 0``
(the error left in ``w`` after ``k`` steps is at most about ``eps |g| / k``).  With ``Theta = 1/eps`` on ``S`` and
``0`` off it the system is ``(Theta^{-1} + A) g+ = b`` on S (Sherman-Morrison-Woodbury, one sparse Cholesky of the
body-dof matrix ``K = Mt^{-1} + D_S D_S^T / eps`` by MUMPS): K is re-factored only when S changes on some rank;
otherwise a step costs one triangular-solve pair.  Unlike the interior-point matrix (spring constants g/w spread
over ~10 decades) K has one uniform spring constant per active contact.

Stopping test (as every method): the min-map residual of the projected iterate ``max(g, 0)`` with a freshly
computed ``A g + q``.  ``iterations`` counts Newton steps; ``SolverResult.inner_iterations`` the KSP iterations
and ``SolverResult.factorizations`` the number of assemblies of K.

Failure: ``max_newton`` (default 100) steps, or ``stall`` (default 12) steps in a row without a new best residual
(an active-set method can cycle on a degenerate LCP; an infeasible LCP makes g run off along its certificate ray)
raise :class:`~relcp_mpi.solver.lcp.SolverError` on every rank (all decisions are taken on reduced values).

Options: ``max_newton``, ``prox`` (1e-6), ``stall``, ``pc_type`` ('cholesky' = MUMPS; or a PETSc PC type for CG,
e.g. 'gamg'), ``ksp_rtol`` (1e-10, CG only).  PETSc options with the prefix ``relcp_pdas_`` apply to the KSP.
"""
from __future__ import annotations

import numpy as np

from relcp_mpi.solver.base import FusedReducer, LCPSolver, SolverError, minmap_local, mpi_comm_of, \
    start_projected_gradient
from relcp_mpi.solver.body_system import BodySystem, ConstraintSystem, persistent_ksp
from relcp_mpi.solver.operator import any_rank

__all__ = ["PDAS"]


class PDAS(LCPSolver):
    """Proximal primal-dual active-set Newton method (see the module docstring)."""

    def solve(self, A, q, x, tol=1e-8, max_iter=10000, raise_on_fail=True, mu=None, max_newton=100, prox=1e-6,
              stall=12, pc_type="cholesky", ksp_rtol=1e-10, **unused):
        if unused:
            raise TypeError("pdas: unknown options %s" % sorted(unused))
        if not prox > 0:
            raise ValueError("pdas: prox must be > 0, got %r" % (prox,))
        comm = mpi_comm_of(A)
        body_form = hasattr(A, "D") and hasattr(A, "blocks")
        if not body_form and A.getType() in ("python", "shell"):
            raise ValueError("pdas: A must be a ContactOperator or an assembled matrix (got a shell without D)")
        st = start_projected_gradient(A, q, x, "pdas", 2, nsum=0)    # x_0 = P(x_in), vecs[0] = A x_0 + q
        gv, av = st.vecs
        red, X, Q, res, history = st.red, st.X, st.Q, st.residual, st.history
        if res <= tol:
            return self.finish(A, q, x, gv, converged=True, iterations=0, residual=res, history=history,
                               tol=tol, t=1.0, mu=mu, raise_on_fail=raise_on_fail)
        dvec = A.getDiagonal()
        dloc = dvec.getArray(readonly=True).copy()
        dvec.destroy()
        (dsum, n_glob), _ = FusedReducer(comm, 2, 0).reduce([float(dloc.sum()), float(dloc.size)], [])
        eps = float(prox) * (dsum / n_glob if dsum > 0 else 1.0)
        dscale = dloc + eps

        ksp = persistent_ksp(A, pc_type, ksp_rtol, prefix="relcp_pdas_")
        system = BodySystem(A, ksp) if body_form else ConstraintSystem(A, ksp)
        g = X.copy()
        W = st.arrays[0].copy()                # A g + q
        active = None
        it = inner = factorizations = since_best = 0
        best = res
        converged = False
        reason = "maximum iterations reached"
        limit = min(int(max_iter), int(max_newton))
        try:
            while True:
                new_active = (g - W / dscale) > 0.0
                if any_rank(comm, active is None or not np.array_equal(new_active, active)):
                    system.assemble(np.where(new_active, 1.0 / eps, 0.0))
                    factorizations += 1
                    active = new_active
                g, k = system.solve(eps * g - Q)          # 0 off the active set
                inner += k
                W = _apply(A, gv, av, g) + Q
                it += 1
                neg = g < 0.0
                if any_rank(comm, bool(neg.any())):       # residual of the feasible point max(g, 0)
                    gp = np.maximum(g, 0.0)
                    Wp = _apply(A, gv, av, gp) + Q
                else:
                    gp, Wp = g, W
                _, (res,) = red.reduce([], [minmap_local(gp, Wp)])
                history.append(res)
                if res <= tol:
                    converged = True
                    X[:] = gp
                    W = Wp
                    break
                if res < best:
                    best, since_best = res, 0
                else:
                    since_best += 1
                if it >= limit:
                    break
                if since_best >= int(stall) or not np.isfinite(res):
                    reason = ("no progress in %d active-set steps (cycling, or the LCP may be infeasible)"
                              % since_best)
                    break
            if not converged:
                X[:] = np.maximum(g, 0.0)
                W = _apply(A, gv, av, X) + Q
        finally:
            system.destroy()
        x.stateIncrease()
        G = gv.getArray()
        G[:] = W
        gv.stateIncrease()
        out = self.finish(A, q, x, gv, converged=converged, iterations=it, residual=res, history=history,
                          tol=tol, t=1.0, mu=mu, raise_on_fail=False)
        out.inner_iterations = inner
        out.factorizations = factorizations
        if not converged and raise_on_fail:
            raise SolverError("pdas", it, res, tol, history, reason=reason, result=out)
        return out


def _apply(A, v, out, arr):
    """``A @ arr`` (local numpy in, local numpy copy out) through the persistent Vecs ``v`` and ``out``."""
    v.getArray()[:] = arr
    v.stateIncrease()
    A.mult(v, out)
    return out.getArray(readonly=True).copy()
