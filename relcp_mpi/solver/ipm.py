"""Primal-dual interior-point method (Mehrotra predictor-corrector) for ``0 <= x _|_ A x + q >= 0``
(``method='ipm'``), with the Newton systems reduced to the body dofs and solved by PETSc (sparse Cholesky by
MUMPS by default, or CG with an algebraic-multigrid or other preconditioner).

Why: first-order methods (BBPGD, APGD, TAO-BNCG) need iterations that grow with the size of a jammed packing
(the force network of a colony behaves like an elliptic problem over the whole packing).  An interior-point
method needs a number of Newton steps that hardly depends on the size (measured: 10-17 steps from 256 to 4096
colony cells, see docs/BENCHMARKS.md, "Contact solve scaling"); each Newton step is one sparse factorization.

Iteration (``n`` constraints, ``g`` = multipliers = the LCP's ``x``, ``w`` = slacks, both kept > 0)::

    r = A g + q - w,  mu = g.w / n,  Lambda = diag(w / g)
    Newton step for (A g + q - w = 0, g_i w_i = sigma mu):   (A + Lambda) dg = sigma mu / g - w - r,
                                                            dw = A dg + r     (one matvec; keeps r exact)
    (with a proximal regularization rho = reg * mean(diag A) added to Lambda, default reg = 1e-8: it bounds
    g/w, hence the condition of K below, and lets the method reach 1e-6 on degenerate colony LCPs where the
    unregularized steps stall; the error it makes in a Newton step, g * rho * dg, vanishes as the steps do)
    predictor (sigma = 0) -> step alpha_a, mu_a;  sigma = (mu_a / mu)^3;  corrector with the second-order term
    dg_a dw_a;  one step length alpha for g and w (they are coupled through A): 0.99 x the distance to the
    boundary, at most 1.

Stopping test (same as every method): the min-map residual ``||min(g, A g + q)||_inf <= tol`` with a freshly
computed ``A g`` (one matvec per iteration).  ``iterations`` counts Newton steps; ``SolverResult.inner_iterations``
the CG iterations over all of them.

Newton systems, two forms chosen by the operator:

* ``A`` a :class:`~relcp_mpi.solver.operator.ContactOperator` (``A = D^T Mt D``, ``Mt = dt M`` the scaled
  mobility blocks): with ``Theta = Lambda^{-1} = diag(g / w)`` the Sherman-Morrison-Woodbury identity gives
  ``(Lambda + D^T Mt D)^{-1} b = Theta (b - D^T v)`` with ``K v = D Theta b``, ``K = Mt^{-1} + D Theta D^T``:
  a body-dof (6 per body) SPD matrix, the stiffness matrix of the contact network with spring constant g/w per
  contact.  K is assembled each Newton step (``Ds = D Theta^{1/2}``, ``Ds Ds^T`` by MatTranspose + MatMatMult, plus the
  block-diagonal ``Mt^{-1}``, block size 6) and solved (``pc_type`` below).  If ``K v`` misses its right-hand
  side by ``s``, the Newton equation for the complementarity products is missed by exactly ``g * (D^T Mt s)``
  (componentwise) while the linear residual ``r`` stays exact (dw is formed as ``A dg + r``), so an inexact
  solve only perturbs the centering; the refinement loop below measures that error and corrects it.
* ``A`` an assembled AIJ matrix: ``A + Lambda`` is assembled and solved the same way.

After each step the projection of g onto the guessed active set (g_i > w_i, else 0) is also tested (one matvec):
it often meets the tolerance a step earlier than the interior iterate.

Failure: ``max_iter`` Newton steps (capped at ``max_newton``, default 200: a solve that needs more is an
infeasible or numerically broken LCP), or a step length below ``1e-12`` (stall; an infeasible LCP drives g to
infinity along its certificate ray) raise :class:`~relcp_mpi.solver.lcp.SolverError` on every rank (all
decisions are made on reduced values).

Persistent PETSc objects: the KSP (options prefix ``relcp_ipm_``, so ``-relcp_ipm_pc_type hypre`` etc. apply)
and the work Vecs are composed on ``A`` and reused across calls; the matrices built from ``D`` (which changes at
every recursion level) are rebuilt once per call and reused (same nonzero pattern) by every Newton step.

Linear solver (``pc_type``): ``'cholesky'`` (default): a sparse Cholesky factorization of K by MUMPS per Newton
step (symbolic analysis shared by the steps of a call), applied with up to ``refine`` (5) steps of iterative
refinement; any other PC type (``'gamg'``, ``'hypre'``, ``'jacobi'``): CG to ``ksp_rtol`` with that
preconditioner.  Measured (docs/BENCHMARKS.md): CG + GAMG/hypre needs CG iterations that grow ~3x per Newton
step as mu falls (thousands at mu ~ 1e-5 on a 256-cell colony), GAMG's Chebyshev smoother even reports an
indefinite preconditioner; the factorization is the robust choice.

Options: ``mu`` (error bound, see :mod:`relcp_mpi.solver.lcp`), ``max_newton``, ``pc_type``, ``ksp_rtol``,
``refine``, ``refine_tol`` (1e-2), ``reg``, ``step_fraction`` (0.99).
"""
from __future__ import annotations

import numpy as np

from relcp_mpi.petsc import get_petsc
from relcp_mpi.solver.body_system import BodySystem, ConstraintSystem, persistent_ksp
from relcp_mpi.solver.base import (FusedReducer, LCPSolver, SolverError, minmap_local, mpi_comm_of,
                                   start_projected_gradient)

PETSc = get_petsc()

__all__ = ["IPM"]


def _max_step(v, dv, frac):
    """Largest a <= 1 with v + a dv >= (1 - frac) v (local; v > 0)."""
    neg = dv < 0
    if not np.any(neg):
        return 1.0
    return float(min(1.0, frac * np.min(-v[neg] / dv[neg])))


class IPM(LCPSolver):
    """Mehrotra interior point with Newton steps on the body-dof system (see the module docstring)."""

    def solve(self, A, q, x, tol=1e-8, max_iter=10000, raise_on_fail=True, mu=None, max_newton=200, ksp_rtol=1e-8,
              pc_type="cholesky", step_fraction=0.99, refine=5, reg=1e-8,
              refine_tol=1e-2, **unused):
        if unused:
            raise TypeError("ipm: unknown options %s" % sorted(unused))
        comm = mpi_comm_of(A)
        body_form = hasattr(A, "D") and hasattr(A, "blocks")
        if not body_form and A.getType() in ("python", "shell"):
            raise ValueError("ipm: A must be a ContactOperator or an assembled matrix (got a shell without D)")
        st = start_projected_gradient(A, q, x, "ipm", 4, nsum=0)   # x_0 = P(x_in), g_0 = A x_0 + q, r_0
        gv, dgv, agv, adv = st.vecs
        red, X, Q, res, history = st.red, st.X, st.Q, st.residual, st.history
        red_mu = FusedReducer(comm, 1, 0)
        red_step = FusedReducer(comm, 0, 2)
        if res <= tol:
            return self.finish(A, q, x, gv, converged=True, iterations=0, residual=res, history=history,
                          tol=tol, t=1.0, mu=mu, raise_on_fail=raise_on_fail)

        n_glob = float(A.getSize()[0])
        # starting point: shift g and w into the interior by a scale set from q and diag(A)
        dvec = A.getDiagonal()
        (dsum,), _ = FusedReducer(comm, 1, 0).reduce([float(dvec.getArray(readonly=True).sum())], [])
        _, (qinf, gmax) = FusedReducer(comm, 0, 2).reduce([], [float(np.abs(Q).max(initial=0.0)),
                                                                  float(X.max(initial=0.0))])
        dvec.destroy()
        a_mean = dsum / n_glob if dsum > 0 else 1.0
        rho = float(reg) * a_mean
        w_shift = max(qinf, tol, 1e-300)
        g_shift = max(w_shift / a_mean, 1e-3 * gmax)
        g = X + g_shift
        X[:] = g
        x.stateIncrease()
        A.mult(x, agv)
        AG = agv.getArray(readonly=True).copy()
        w = np.maximum(AG + Q, 0.0) + w_shift

        ksp = persistent_ksp(A, pc_type, ksp_rtol)
        system = BodySystem(A, ksp) if body_form else ConstraintSystem(A, ksp)

        def newton(b, r, mu_k):
            """Solve (Lambda + rho + A) dg = b, refined (at most ``refine`` times, with the same factorization)
            until the complementarity equations it stands for are met to ``refine_tol`` mu (K loses accuracy as g/w
            spreads over many decades); dw = A dg + r."""
            dg, k = system.solve(b)
            Adg = _apply(A, dgv, adv, dg)
            for _ in range(int(refine)):
                lin = (w / g + rho) * dg + Adg - b
                _, (e,) = red.reduce([], [float(np.abs(g * lin).max(initial=0.0))])
                if not (e > refine_tol * mu_k):
                    break
                c, kc = system.solve(-lin)
                dg += c
                k += kc
                Adg = _apply(A, dgv, adv, dg)
            return dg, Adg + r, k

        it = 0
        inner = 0
        converged = False
        reason = "maximum iterations reached"
        limit = min(int(max_iter), int(max_newton))
        try:
            while True:
                r = AG + Q - w
                (gw,), _ = red_mu.reduce([float(g @ w)], [])
                mu_k = gw / n_glob
                system.assemble(1.0 / (w / g + rho))
                # predictor
                dg_a, dw_a, k1 = newton(-w - r, r, mu_k)
                _, (ma, mb) = red_step.reduce([], [-_max_step(g, dg_a, 1.0), -_max_step(w, dw_a, 1.0)])
                al_a = min(-ma, -mb)
                (gw_a,), _ = red_mu.reduce([float((g + al_a * dg_a) @ (w + al_a * dw_a))], [])
                sigma = min(1.0, (gw_a / max(gw, 1e-300)) ** 3)
                # corrector
                dg, dw, k2 = newton((sigma * mu_k - dg_a * dw_a) / g - w - r, r, mu_k)
                inner += k1 + k2
                _, (ma, mb) = red_step.reduce([], [-_max_step(g, dg, step_fraction), -_max_step(w, dw, step_fraction)])
                alpha = min(-ma, -mb)
                g += alpha * dg
                w += alpha * dw
                it += 1
                X[:] = g
                x.stateIncrease()
                A.mult(x, agv)
                AG[:] = agv.getArray(readonly=True)
                _, (res,) = red.reduce([], [minmap_local(g, AG + Q)])
                history.append(res)
                if res <= tol:
                    converged = True
                    break
                # the interior iterate keeps g_i ~ mu / w_i > 0 on inactive rows; its projection onto the guessed
                # active set (g_i > w_i) often meets the tolerance earlier (one matvec to check it exactly)
                gc = np.where(g > w, g, 0.0)
                pc_res = _apply(A, dgv, adv, gc) + Q
                _, (res_c,) = red.reduce([], [minmap_local(gc, pc_res)])
                if res_c <= tol:
                    X[:] = gc
                    x.stateIncrease()
                    AG[:] = pc_res - Q
                    res = res_c
                    history[-1] = res
                    converged = True
                    break
                if it >= limit:
                    break
                if not (alpha > 1e-12) or not np.isfinite(res):
                    reason = "interior-point step length %.1e (stalled; the LCP may be infeasible)" % alpha
                    break
        finally:
            system.destroy()
        G = gv.getArray()
        np.add(AG, Q, out=G)
        gv.stateIncrease()
        res_obj = self.finish(A, q, x, gv, converged=converged, iterations=it, residual=res, history=history,
                         tol=tol, t=1.0, mu=mu, raise_on_fail=False)
        res_obj.inner_iterations = inner
        if not converged and raise_on_fail:
            raise SolverError("ipm", it, res, tol, history, reason=reason, result=res_obj)
        return res_obj


def _apply(A, v, out, arr):
    """``A @ arr`` (local numpy in, local numpy copy out) through the persistent Vecs ``v`` and ``out``."""
    v.getArray()[:] = arr
    v.stateIncrease()
    A.mult(v, out)
    return out.getArray(readonly=True).copy()
