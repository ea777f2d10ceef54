"""PETSc TAO bound-constrained solvers for ``0 <= x _|_ A x + q >= 0`` (selected as ``method='tao-<type>'``).

The LCP is posed as ``min 1/2 x^T A x + q^T x`` with gradient ``A x + q``, constant Hessian ``A`` and bounds
``[0, +inf)``.  Any TAO bound-constrained type can be named; tested here: ``bncg``, ``blmvm``, ``tron``
(also working: ``bnls``, ``bntr``, ``bqnls``, ``gpcg``).

Convergence: TAO's default test is replaced by the min-map residual test ``||min(x, g)||_inf <= tol`` evaluated at
TAO's current solution (the gradient of the last objective evaluation is reused when it was taken at exactly that
point on every rank, otherwise one extra matvec; ``max_iter`` is enforced in the same callback).  After ``TAOSolve``
returns, the residual is recomputed from scratch (fresh matvec); an answer that does not meet ``tol`` is a
failure (``SolverError``, or ``converged=False`` with ``raise_on_fail=False``), whatever TAO's own reason.

Shell Hessians (``MATPYTHON``, e.g. ContactOperator): Newton/trust-region types (``tron``, ``bn*``, ``gpcg``) by
default extract the free-variable submatrix (``MatCreateSubMatrix``), which a shell Mat does not implement; for
shell matrices this module sets ``-<prefix>tao_subset_type matrixfree`` and a PC of ``jacobi`` when the shell
provides ``getDiagonal`` (ContactOperator does), else ``none``.  With those, ``tao-tron`` works with the shell.

Options: ``mu`` (error bound), ``tao_options`` (dict of extra PETSc options, keys without the prefix, applied
with the object's options prefix ``relcp_tao_``), ``prefix``.
"""
from __future__ import annotations

import itertools

import numpy as np

from relcp_mpi.petsc import get_petsc
from relcp_mpi.solver.base import FusedReducer, LCPSolver, minmap_local, mpi_comm_of, work_vecs

PETSc = get_petsc()

__all__ = ["TaoSolver"]

_counter = itertools.count()
_REASONS = {getattr(PETSc.TAO.Reason, k): k for k in dir(PETSc.TAO.Reason) if k.isupper()}


def _is_shell(A):
    try:
        return A.getType() in ("python", "shell")
    except Exception:  # pragma: no cover
        return False


class TaoSolver(LCPSolver):
    """A TAO bound-constrained type, named ``'tao-<type>'`` (see the module docstring)."""

    def solve(self, A, q, x, tol=1e-8, max_iter=10000, raise_on_fail=True, mu=None, tao_options=None,
              prefix="relcp_tao_", **unused):
        if unused:
            raise TypeError("tao: unknown options %s" % sorted(unused))
        tao_type = self.name[len("tao-"):]
        comm = mpi_comm_of(A)
        red = FusedReducer(comm, 0, 1)
        g, lo, hi, gc, gt = work_vecs(A, "tao", x, 5)

        X = x.getArray()
        Q = q.getArray(readonly=True)
        np.maximum(X, 0.0, out=X)
        x.stateIncrease()
        A.mult(x, g)
        G = g.getArray()
        G += Q
        g.stateIncrease()
        _, (res,) = red.reduce([], [minmap_local(X, G)])
        history = [res]
        if res <= tol:
            return self.finish(A, q, x, g, converged=True, iterations=0, residual=res, history=history,
                          tol=tol, t=1.0, mu=mu, raise_on_fail=raise_on_fail)

        lo.set(0.0)
        hi.set(PETSc.INFINITY)
        fred = FusedReducer(comm, 1, 0)

        # last evaluated (x, g) pair, so the convergence test can reuse the gradient when TAO's current solution is
        # exactly the last evaluation point (TAO's stored gradient is not always the gradient at its solution)
        last_x = np.empty_like(X)
        last_g = np.empty_like(X)

        def objgrad(tao, Xv, Gv):
            A.mult(Xv, Gv)
            Ga = Gv.getArray()
            Ga += Q
            Xa = Xv.getArray(readonly=True)
            Gv.stateIncrease()
            last_x[:] = Xa
            last_g[:] = Ga
            (f,), _ = fred.reduce([0.5 * (Xa @ (Ga + Q))], [])
            return f

        def hessian(tao, Xv, H, P):
            return None

        cred = FusedReducer(comm, 0, 1)
        cred_s = FusedReducer(comm, 1, 0)

        def converged(tao):
            its = tao.getIterationNumber()
            Xa = tao.getSolution().getArray(readonly=True)
            same = np.array_equal(Xa, last_x)
            (nsame,), _ = cred_s.reduce([0.0 if same else 1.0], [])
            if nsame == 0.0:
                Ga = last_g
            else:                                   # fresh gradient at TAO's current solution
                A.mult(tao.getSolution(), gc)
                Ga = gc.getArray()
                Ga += Q
                gc.stateIncrease()
            _, (r,) = cred.reduce([], [minmap_local(Xa, Ga)])
            if its > 0:
                history.append(r)
            if r <= tol:
                reason = PETSc.TAO.Reason.CONVERGED_USER
            elif its >= max_iter:
                reason = PETSc.TAO.Reason.DIVERGED_MAXITS
            else:
                reason = PETSc.TAO.Reason.CONTINUE_ITERATING
            tao.setConvergedReason(reason)
            return reason

        pfx = "%s%d_" % (prefix, next(_counter))
        opts = PETSc.Options()
        set_here = []

        def setopt(k, v):
            name = pfx + k
            if not opts.hasName(name):
                opts[name] = v
                set_here.append(name)

        shell = _is_shell(A)
        if shell:
            setopt("tao_subset_type", "matrixfree")
        for k, v in (tao_options or {}).items():
            setopt(k.lstrip("-"), v)

        tao = PETSc.TAO().create(comm=A.getComm())
        try:
            tao.setType(tao_type)
            tao.setOptionsPrefix(pfx)
            tao.setObjectiveGradient(objgrad, gt)
            tao.setHessian(hessian, A, A)
            tao.setVariableBounds(lo, hi)
            tao.setSolution(x)
            tao.setTolerances(gatol=0.0, grtol=0.0, gttol=0.0)
            tao.setMaximumIterations(max_iter)
            tao.setMaximumFunctionEvaluations(max(10000, 100 * max_iter))
            tao.setConvergenceTest(converged)
            tao.setFromOptions()
            ksp = tao.getKSP()
            if ksp is not None and ksp.handle and shell and "tao_pc_type" not in (tao_options or {}):
                ctx = A.getPythonContext() if A.getType() == "python" else None
                ksp.getPC().setType("jacobi" if hasattr(ctx, "getDiagonal") else "none")
            tao.solve(x)
            its = tao.getIterationNumber()
            tao_reason = _REASONS.get(tao.getConvergedReason(), str(tao.getConvergedReason()))
        finally:
            tao.destroy()
            for name in set_here:
                opts.delValue(name)

        # independent verification of TAO's answer
        A.mult(x, g)
        G = g.getArray()
        G += Q
        g.stateIncrease()
        X = x.getArray(readonly=True)
        _, (res,) = red.reduce([], [minmap_local(X, G)])
        if not history or history[-1] != res:
            history.append(res)
        ok = res <= tol
        reason = "TAO reason %s" % tao_reason
        if not ok and tao_reason == "CONVERGED_USER":
            reason += " but the recomputed residual misses the tolerance"
        return self.finish(A, q, x, g, converged=ok, iterations=its, residual=res, history=history,
                      tol=tol, t=1.0, mu=mu, raise_on_fail=raise_on_fail, reason=reason)
