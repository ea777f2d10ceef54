"""Accelerated projected gradient (Nesterov / FISTA) with adaptive restart for ``0 <= x _|_ A x + q >= 0``.

Iteration (``P`` = projection onto ``x >= 0``, step ``t = 1/L``)::

    y_0 = x_0 = P(x_in), theta_0 = 1
    x_{k+1} = P(y_k - t g(y_k))                 g(y_k) = g_k + beta_k (g_k - g_{k-1})   (linear: no extra matvec)
    backtracking: with d = x_{k+1} - y_k, accept iff d.A d <= L d.d  (d.A d = d.(g(x_{k+1}) - g(y_k)));
                  else L <- 2 L and recompute x_{k+1} (one extra matvec)
    theta_{k+1} = (1 + sqrt(1 + 4 theta_k^2)) / 2,  beta = (theta_k - 1) / theta_{k+1}
    restart (O'Donoghue & Candes gradient-mapping test): if (y_k - x_{k+1}).(x_{k+1} - x_k) > 0:
            theta <- 1, beta <- 0
    y_{k+1} = x_{k+1} + beta (x_{k+1} - x_k)

``L`` starts from ``power_iters`` (default 10) power iterations on A from a rank-count independent start vector
(the Rayleigh quotient, times ``L_safety`` = 1.05); the backtracking test makes an underestimate harmless.  The
residual and stopping test are the min-map residual of ``x_k`` (same as BBPGD); one fused allreduce per iteration.

Options: ``mu`` (error bound, see :mod:`relcp_mpi.solver.lcp`), ``L`` (skip the power iteration),
``power_iters``, ``L_safety``, ``restart`` (True), ``divergence_every`` / ``divergence_factor`` (early stop of a
diverging solve, :mod:`.divergence`; 0 = off).
"""
from __future__ import annotations

import numpy as np

from relcp_mpi.solver import vector_jit
from relcp_mpi.solver.base import FusedReducer, LCPSolver, mpi_comm_of, start_projected_gradient, work_vecs
from relcp_mpi.solver.divergence import StoppingTest

__all__ = ["APGD", "estimate_lmax"]


def _start_vector(v):
    lo, hi = v.getOwnershipRange()
    idx = np.arange(lo, hi, dtype=np.float64)
    a = v.getArray()
    a[:] = 1.0 + 0.5 * np.sin(12.9898 * idx + 78.233)   # deterministic, independent of the rank count
    v.stateIncrease()


def estimate_lmax(A, template, iters=10):
    """Rayleigh-quotient estimate of the largest eigenvalue of (symmetric PSD) A by power iteration.
    Collective; one fused reduction per iteration.  Returns a lower estimate (>= 0)."""
    comm = mpi_comm_of(A)
    v, w = work_vecs(A, "power", template, 2)
    _start_vector(v)
    red = FusedReducer(comm, 2, 0)
    lam = 0.0
    V = v.getArray()
    W = w.getArray()
    (vv,), _ = FusedReducer(comm, 1, 0).reduce([V @ V], [])
    if vv <= 0:
        return 0.0
    V /= np.sqrt(vv)
    v.stateIncrease()
    for _ in range(max(int(iters), 1)):
        A.mult(v, w)
        (vw, ww), _ = red.reduce([V @ W, W @ W], [])
        lam = max(lam, vw)
        if ww <= 0:
            break
        np.multiply(W, 1.0 / np.sqrt(ww), out=V)
        v.stateIncrease()
    return float(lam)


class APGD(LCPSolver):
    """Accelerated projected gradient with adaptive restart (see the module docstring)."""

    def solve(self, A, q, x, tol=1e-8, max_iter=10000, raise_on_fail=True, mu=None, L=None, power_iters=10,
              L_safety=1.05, restart=True, divergence_every=100, divergence_factor=1e4, **unused):
        if unused:
            raise TypeError("apgd: unknown options %s" % sorted(unused))
        st = start_projected_gradient(A, q, x, "apgd", 4)      # x_0 = P(x_in), g(x_0), r_0
        red, X, Q, res, history = st.red, st.X, st.Q, st.residual, st.history
        g = st.vecs[0]
        G, XO, GO, GY = st.arrays   # g(x_k), x_{k-1}, g(x_{k-1}), g(y_k)
        Yv = np.empty_like(X)  # y_k
        out = np.empty(4)      # the measured sums and the local residual of an iteration
        project_step, measure, extrapolate, _ = vector_jit.kernels(X.shape[0])
        it = 0
        converged = res <= tol
        if converged:
            g.stateIncrease()
            return self.finish(A, q, x, g, converged=True, iterations=0, residual=res, history=history,
                          tol=tol, t=1.0, mu=mu, raise_on_fail=raise_on_fail)

        if L is None:
            L = L_safety * estimate_lmax(A, x, power_iters)
        L = float(L) if (L and np.isfinite(L) and L > 0) else 1.0
        theta = 1.0
        Yv[:] = X
        GY[:] = G
        n_backtrack = 0
        stop = StoppingTest(A, q, x, history, tol, divergence_every, divergence_factor)
        while it < max_iter:
            while True:
                t = 1.0 / L
                # XO = x_k, GO = g(x_k); x = P(y - t g(y))  (one pass, solver/vector_jit.py)
                project_step(X, G, Yv, GY, XO, GO, t)
                x.stateIncrease()
                A.mult(x, g)
                measure(X, G, Q, Yv, GY, XO, out)     # G += q; d.d, d.(G - GY), -d.(X - XO), local residual
                (dd, dAd, rst), (res,) = red.reduce([out[0], out[1], out[2]], [out[3]])
                if dAd <= L * dd * (1.0 + 1e-10) or not np.isfinite(dAd):
                    break
                L *= 2.0
                n_backtrack += 1
                X[:] = XO              # back to x_k, g(x_k) for the next trial step (project_step saves them again)
                G[:] = GO
            it += 1
            if stop.done(it, res):
                break
            theta_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * theta * theta))
            beta = (theta - 1.0) / theta_new
            theta = theta_new
            if restart and rst > 0.0:
                theta, beta = 1.0, 0.0
            # y = x + beta (x - x_old); g(y) = g + beta (g - g_old) by linearity
            extrapolate(X, XO, G, GO, Yv, GY, beta)
        g.stateIncrease()
        return self.finish(A, q, x, g, converged=stop.converged, iterations=it, residual=res, history=history,
                           tol=tol, t=1.0 / L, mu=mu, raise_on_fail=raise_on_fail, reason=stop.reason)
