"""Early divergence test for the projected-gradient LCP solvers (BBPGD, APGD).

For a positive semidefinite A the LCP ``0 <= x _|_ A x + q >= 0`` has a solution iff it is feasible, and an
infeasible one makes the iterates run off along a direction y >= 0 with ``A y ~ 0`` and ``q.y < 0`` (see
:mod:`relcp_mpi.solver.certificate`) while the residual stalls: the solver then burns ``max_iter`` iterations.

Test, every ``every`` iterations k (one extra matvec and one fused reduction): with ``y = max(x_k - x_{k-every}, 0)``
(the recent growth of the iterate),

    B = -q.y / max_j (A y)_j^+        (B = inf when A y <= 0)

is a lower bound on ``sum(g)`` for EVERY feasible g (``0 <= y.(A g + q) <= sum(g) max(A y)^+ + q.y``), in
exact arithmetic; in particular any solution has multipliers summing to at least B.  The monitor reports
divergence when ``q.y < 0`` and ``B > factor * S`` with the LCP's natural multiplier scale
``S = sum_j max(-q_j, 0) / A_jj`` (the multipliers that would close every gap row by row, computed once, at
the first test, from A's diagonal): the LCP is then infeasible, or solvable only with multipliers ``factor``
times its natural scale.  (The scale must not be the iterate's own size: a Barzilai-Borwein step can throw the
iterate 10^10 along the runaway direction at once, and B is then limited by rounding.)  The monitor never
changes the iterates; it only stops a solve early (``SolverError`` with reason 'diverging ...').  The float
evaluation of B is not rigorous; the stepper's certificate search (exact arithmetic) tells which case it is.
An operator without ``getDiagonal`` switches the test off.
"""
import numpy as np

from relcp_mpi.solver.base import FusedReducer, mpi_comm_of, work_vecs

__all__ = ["DivergenceMonitor", "StoppingTest"]


class DivergenceMonitor:
    """``check(it)`` after iteration ``it`` of a solver on ``x``: None, or the reason string when diverging.

    ``every`` iterations between tests (0 = off), ``factor`` the threshold on B / S (see the module docstring).
    Collective: every rank calls ``check`` at the same iterations."""

    def __init__(self, A, q, x, every=100, factor=1e4):
        self.every = int(every or 0)
        self.factor = float(factor)
        self.A, self.q, self.x = A, q, x
        self.scale = None
        self.bound = float("nan")
        if self.every <= 0:
            return
        self.ref, self.y, self.Ay = work_vecs(A, "diverge", x, 3)
        self.ref.getArray()[:] = x.getArray(readonly=True)
        self.red = FusedReducer(mpi_comm_of(A), 2, 1)

    def _natural_scale(self):
        """sum_j max(-q_j, 0) / A_jj over rows with A_jj > 0 (collective); None if A has no diagonal."""
        try:
            self.A.getDiagonal(self.Ay)
            ok = 1.0
        except Exception:  # noqa: BLE001 - any shell without MATOP_GET_DIAGONAL
            ok = 0.0
        d = self.Ay.getArray(readonly=True)
        Q = self.q.getArray(readonly=True)
        pos = (d > 0) & (Q < 0) if ok else np.zeros(len(Q), bool)
        (s, bad), _ = self.red.reduce([float(np.sum(-Q[pos] / d[pos])), 1.0 - ok], [0.0])
        return None if bad > 0 else s

    def check(self, it):
        if self.every <= 0 or it % self.every:
            return None
        if self.scale is None:
            self.scale = self._natural_scale()
            if self.scale is None:
                self.every = 0
                return None
        X = self.x.getArray(readonly=True)
        R = self.ref.getArray()
        Y = self.y.getArray()
        np.subtract(X, R, out=Y)
        np.maximum(Y, 0.0, out=Y)
        R[:] = X
        self.y.stateIncrease()
        self.A.mult(self.y, self.Ay)
        AY = self.Ay.getArray(readonly=True)
        Q = self.q.getArray(readonly=True)
        (qy, sx), (amax,) = self.red.reduce([float(Q @ Y), float(X.sum())],
                                            [float(AY.max(initial=0.0)) if AY.size else 0.0])
        if not qy < 0:
            return None
        self.bound = float("inf") if amax <= 0 else -qy / amax
        if self.bound > self.factor * self.scale:
            return ("diverging: the iterate grows along y >= 0 with q.y = %.3e < 0; every feasible point has "
                    "sum(x) >= %.3e > %g x the natural scale %.3e (sum(x_k) = %.3e)"
                    % (qy, self.bound, self.factor, self.scale, sx))
        return None


class StoppingTest:
    """The end-of-iteration test shared by the projected-gradient methods: ``done(it, res)`` records the
    residual in ``history``, and is True when it meets ``tol`` (``converged``) or when the
    :class:`DivergenceMonitor` (``every``, ``factor``; 0 = off) reports divergence (``reason``).
    Collective like the monitor."""

    def __init__(self, A, q, x, history, tol, every, factor):
        self.history = history
        self.tol = tol
        self.converged = bool(history and history[-1] <= tol)
        self.monitor = DivergenceMonitor(A, q, x, 0 if self.converged else every, factor)
        self.diverging = None

    def done(self, it, res):
        self.history.append(res)
        if res <= self.tol:
            self.converged = True
            return True
        self.diverging = self.monitor.check(it)
        return bool(self.diverging)

    @property
    def reason(self):
        """Why a solve that did not converge stopped."""
        return self.diverging or "maximum iterations reached"
