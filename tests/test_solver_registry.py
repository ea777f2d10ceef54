"""The LCP method registry: one class per method over LCPSolver, the deck validation reads the same list, and a
new method plugs in with one register() line."""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.config.deck import DeckError
from relcp_mpi.petsc import get_petsc
from relcp_mpi.solver import registry
from relcp_mpi.solver.base import LCPSolver, minmap_local, start_projected_gradient
from relcp_mpi.solver.lcp import METHODS, SolverError, solve_lcp
from tests.helpers import make_deck

PETSc = get_petsc()
SELF = MPI.COMM_SELF


class FixedStepPG(LCPSolver):
    """Projected gradient with a fixed step ``step`` (a minimal method written against the shared base)."""

    def solve(self, A, q, x, tol=1e-8, max_iter=10000, raise_on_fail=True, mu=None, step=None):
        st = start_projected_gradient(A, q, x, "fixed_pg", 1, nsum=0)
        X, Q, G, res, it = st.X, st.Q, st.arrays[0], st.residual, 0
        while res > tol and it < max_iter:
            it += 1
            np.maximum(X - step * G, 0.0, out=X)
            x.stateIncrease()
            A.mult(x, st.vecs[0])
            G += Q
            _, (res,) = st.red.reduce([], [minmap_local(X, G)])
            st.history.append(res)
        st.vecs[0].stateIncrease()
        return self.finish(A, q, x, st.vecs[0], converged=res <= tol, iterations=it, residual=res,
                           history=st.history, tol=tol, t=step, mu=mu, raise_on_fail=raise_on_fail)


def test_every_method_is_an_lcp_solver_class_and_the_deck_accepts_exactly_the_registry():
    assert METHODS == registry.method_names() and "bbpgd" in METHODS and "tao-tron" in METHODS
    for m in METHODS:
        assert issubclass(registry.solver_class(m), LCPSolver)
        make_deck(bodies=[{"shape": "sphere", "radius": 1.0, "position": [0, 0, 0]}], solver={"method": m})
    with pytest.raises(DeckError, match=r"solver\.method: must be one of \[.*'apgd'.*got 'newton'"):
        make_deck(bodies=[{"shape": "sphere", "radius": 1.0, "position": [0, 0, 0]}], solver={"method": "newton"})
    with pytest.raises(ValueError, match="unknown method 'newton'"):
        registry.method_info("newton")


def test_a_new_method_registers_with_one_line():
    registry.register("test-fixed-pg", __name__, "FixedStepPG", {"step": float}, "test only")
    try:
        rng = np.random.default_rng(3)
        B = rng.standard_normal((6, 6))
        Ad = B @ B.T + np.eye(6)
        qd = rng.standard_normal(6)
        A = PETSc.Mat().createDense((6, 6), array=Ad.copy(), comm=SELF)
        A.assemble()
        q = PETSc.Vec().createWithArray(qd.copy(), comm=SELF)
        x = q.duplicate()
        x.set(0.0)
        step = 1.0 / np.linalg.eigvalsh(Ad).max()
        r = solve_lcp(A, q, x, method="test-fixed-pg", tol=1e-10, max_iter=100000, step=step)
        X = x.getArray()
        w = Ad @ X + qd
        assert r.converged and r.method == "test-fixed-pg" and np.all(X >= 0) and np.all(w >= -1e-9)
        assert abs(X @ w) < 1e-8 and r.certificate < 1e-6
        x.set(0.0)
        with pytest.raises(SolverError, match="test-fixed-pg"):
            solve_lcp(A, q, x, method="test-fixed-pg", tol=1e-12, max_iter=2, step=step)
    finally:
        registry._METHODS.pop("test-fixed-pg", None)
