"""Barzilai-Borwein projected gradient descent (BBPGD) for ``0 <= x _|_ A x + q >= 0`` on PETSc Vecs.

Iteration (``P`` = projection onto ``x >= 0``, ``g = A x + q``)::

    x_0 = P(x_in); g_0 = A x_0 + q; r_0 = ||min(x_0, g_0)||_inf      (warm start: return if r_0 <= tol)
    a_0 = 1 / r_0                                                     (1 / ||projected gradient||_inf)
    x_{k+1} = P(x_k - a_k g_k);  g_{k+1} = A x_{k+1} + q              (one matvec per iteration)
    s = x_{k+1} - x_k, y = g_{k+1} - g_k
    r_{k+1} = ||min(x_{k+1}, g_{k+1})||_inf; stop if r_{k+1} <= tol
    a_{k+1} = s.s / s.y  (BB1, k even)   or   s.y / y.y  (BB2, k odd)   (alternating, BB1 first)

If ``s.y <= 0`` (possible only for ``s`` in the null space of a semidefinite A, or through rounding) the step falls
back to ``1 / r_{k+1}``.  The local parts of ``s.s``, ``s.y``, ``y.y`` and the local max of the residual are computed
with numpy on the Vecs' local arrays and combined with ONE allreduce per iteration (user MPI op: sum + max).
Work Vecs (g, x_old, g_old) are composed on ``A`` and reused across calls of the same size.

Options: ``mu`` (see :mod:`relcp_mpi.solver.lcp`, error bound), ``step0`` (override the first step),
``divergence_every`` / ``divergence_factor`` (early stop of a diverging solve, :mod:`.divergence`; 0 = off).
"""
from __future__ import annotations

import numpy as np

from relcp_mpi.solver import vector_jit
from relcp_mpi.solver.base import LCPSolver, start_projected_gradient
from relcp_mpi.solver.divergence import StoppingTest

__all__ = ["BBPGD"]


class BBPGD(LCPSolver):
    """Barzilai-Borwein projected gradient (see the module docstring)."""

    def solve(self, A, q, x, tol=1e-8, max_iter=10000, raise_on_fail=True, mu=None, step0=None,
              divergence_every=100, divergence_factor=1e4, **unused):
        if unused:
            raise TypeError("bbpgd: unknown options %s" % sorted(unused))
        st = start_projected_gradient(A, q, x, "bbpgd", 3)     # x_0 = P(x_in), g_0, r_0
        red, X, Q, res, history = st.red, st.X, st.Q, st.residual, st.history
        g = st.vecs[0]
        G, XO, GO = st.arrays
        out = np.empty(4)      # the measured sums and the local residual of an iteration
        project_step, _, _, measure = vector_jit.kernels(X.shape[0])
        it = 0
        alpha = float(step0) if step0 else (1.0 / res if res > 0 else 1.0)
        stop = StoppingTest(A, q, x, history, tol, divergence_every, divergence_factor)
        t_last = 1.0
        while not stop.converged and it < max_iter:
            it += 1
            project_step(X, G, X, G, XO, GO, alpha)      # XO = x, GO = g, x = P(x - alpha g) (vector_jit)
            x.stateIncrease()
            t_last = alpha
            A.mult(x, g)
            measure(X, G, Q, XO, GO, out)        # G += q; s.s, s.y, y.y (s = x - XO, y = G - GO), residual
            (ss, sy, yy), (res,) = red.reduce([out[0], out[1], out[2]], [out[3]])
            if stop.done(it, res):
                break
            if sy > 0.0 and np.isfinite(sy):
                alpha = ss / sy if (it % 2 == 1) else sy / yy
            else:
                alpha = 1.0 / res if res > 0 else 1.0
            if not (np.isfinite(alpha) and alpha > 0.0):
                alpha = 1.0 / res if res > 0 else 1.0
        g.stateIncrease()
        return self.finish(A, q, x, g, converged=stop.converged, iterations=it, residual=res, history=history,
                           tol=tol, t=t_last, mu=mu, raise_on_fail=raise_on_fail, reason=stop.reason)
