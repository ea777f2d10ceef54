"""Serial tests of the LCP solvers (relcp_mpi.solver.*): correctness against exact references, agreement between
methods, assembled-vs-shell operator, warm start, failure reporting, certificates, zero size."""
import numpy as np
import pytest
import scipy.optimize

from relcp_mpi.petsc import get_petsc
from relcp_mpi.solver.lcp import METHODS, SolverError, SolverResult, minmap_residual, solve_lcp
from relcp_mpi.solver.operator import ContactOperator
from tests.helpers import aij_from_triplets

PETSc = get_petsc()
SELF = PETSc.COMM_SELF
ALL = ["bbpgd", "apgd", "ipm", "tao-bncg", "tao-blmvm", "tao-tron"]
TOL = 1e-8


# ------------------------------------------------------------------------------------------------- helpers
def petsc_aij(A):
    n, m = A.shape
    r, c = np.nonzero(A)
    indptr = np.concatenate(([0], np.cumsum(np.bincount(r, minlength=n)))).astype(PETSc.IntType)
    M = PETSc.Mat().createAIJ((n, m), csr=(indptr, c.astype(PETSc.IntType), A[r, c]), comm=SELF)
    M.assemble()
    return M


def petsc_vec(a):
    v = PETSc.Vec().createSeq(len(a), comm=SELF)
    v.getArray()[:] = a
    v.stateIncrease()
    return v


def arr(v):
    return v.getArray(readonly=True).copy()


def known_solution_lcp(A, rng, frac=0.5):
    """q built from a complementary pair (x0 >= 0, w0 >= 0, x0.w0 = 0): x0 solves the LCP (uniquely if A is PD)."""
    n = A.shape[0]
    act = rng.random(n) < frac
    x0 = np.where(act, rng.random(n) + 0.1, 0.0)
    w0 = np.where(act, 0.0, rng.random(n) + 0.1)
    return x0, w0 - A @ x0


def random_spd(n, rng, shift=0.2):
    B = rng.standard_normal((n, n)) / np.sqrt(n)
    return B.T @ B + shift * np.eye(n)


def contact_D(nb, nc, rng, wall_frac=0.2):
    """Dense D (6 nb x nc) in the contact layout: [n; r_i x n] for body i, -[n; r_j x n] for body j (walls: i only)."""
    D = np.zeros((6 * nb, nc))
    for k in range(nc):
        i = rng.integers(nb)
        nrm = rng.standard_normal(3)
        nrm /= np.linalg.norm(nrm)
        ri = rng.standard_normal(3) * 0.5
        D[6 * i:6 * i + 3, k] = nrm
        D[6 * i + 3:6 * i + 6, k] = np.cross(ri, nrm)
        if rng.random() > wall_frac:
            j = (i + 1 + rng.integers(nb - 1)) % nb
            rj = rng.standard_normal(3) * 0.5
            D[6 * j:6 * j + 3, k] -= nrm
            D[6 * j + 3:6 * j + 6, k] -= np.cross(rj, nrm)
    return D


def spd_blocks(nb, rng):
    G = rng.standard_normal((nb, 6, 6))
    return G @ G.transpose(0, 2, 1) / 6 + 0.5 * np.eye(6)


def block_diag(blocks):
    nb = blocks.shape[0]
    M = np.zeros((6 * nb, 6 * nb))
    for b in range(nb):
        M[6 * b:6 * b + 6, 6 * b:6 * b + 6] = blocks[b]
    return M


def contact_op(Dd, blocks):
    r, c = np.nonzero(Dd)
    D = aij_from_triplets(r, c, Dd[r, c], Dd.shape[0], Dd.shape[1], SELF)
    return ContactOperator(D, blocks), D


def murty_lcp(A, q, max_pivots=10000):
    """Exact reference: Murty's least-index principal pivoting (finite for P-matrices, e.g. SPD)."""
    n = len(q)
    F = np.zeros(n, dtype=bool)            # basic x variables
    for _ in range(max_pivots):
        x = np.zeros(n)
        if F.any():
            x[F] = np.linalg.solve(A[np.ix_(F, F)], -q[F])
        w = A @ x + q
        bad = np.flatnonzero((F & (x < -1e-13)) | (~F & (w < -1e-13)))
        if bad.size == 0:
            return np.maximum(x, 0.0)
        F[bad[0]] = ~F[bad[0]]
    raise RuntimeError("Murty pivoting did not terminate")


def nnls_lcp(A, q):
    """Second exact reference: A = C^T C (Cholesky), LCP = KKT of min ||C x - d||^2, x >= 0 with C^T d = -q."""
    C = np.linalg.cholesky(A).T
    d = np.linalg.solve(C.T, -q)
    return scipy.optimize.nnls(C, d, maxiter=50 * len(q))[0]


def check_complementarity(A, q, x, tol):
    w = A @ x + q
    assert np.all(x >= 0)
    assert np.all(w >= -tol)
    assert np.abs(np.minimum(x, w)).max(initial=0) <= tol
    assert abs(x @ w) <= tol * (1 + np.abs(x).sum() + np.abs(w).sum())


# ------------------------------------------------------------------------------------------- references agree
def test_references_agree(rng):
    for _ in range(5):
        A = random_spd(12, rng)
        q = rng.standard_normal(12)
        xm, xn = murty_lcp(A, q), nnls_lcp(A, q)
        assert np.allclose(xm, xn, atol=1e-10)
        check_complementarity(A, q, xm, 1e-10)


@pytest.mark.parametrize("method", ALL)
def test_dense_random_lcp_vs_exact_reference(method, rng):
    n = 40
    A = random_spd(n, rng)
    q = rng.standard_normal(n)
    xref = murty_lcp(A, q)
    mu = np.linalg.eigvalsh(A)[0]
    Am, qv = petsc_aij(A), petsc_vec(q)
    x = qv.duplicate()
    x.set(0.0)
    res = solve_lcp(Am, qv, x, method=method, tol=TOL, mu=0.99 * mu)
    xs = arr(x)
    assert isinstance(res, SolverResult) and res.converged and res.method == method
    assert res.residual <= TOL and res.history[-1] == res.residual and len(res.history) >= 2
    check_complementarity(A, q, xs, TOL)
    assert np.abs(minmap_residual(Am, qv, x) - res.residual) <= 1e-12
    # certified distance to the exact solution holds and is informative
    err = np.linalg.norm(xs - xref)
    assert err <= res.error_bound
    assert res.error_bound <= 1e-5
    # certificate bounds the fixed-point residual for the reported step
    g = A @ xs + q
    fp = np.linalg.norm(xs - np.maximum(xs - res.step * g, 0.0))
    # (certified w.r.t. the solver's own computed g; numpy's g differs by rounding, hence the absolute slack)
    assert fp <= res.certificate * (1 + 1e-9) + 1e-13
    assert np.abs(xs - xref).max() <= 1e-6


def test_known_solution_and_methods_agree(rng):
    n = 60
    A = random_spd(n, rng, shift=0.1)
    x0, q = known_solution_lcp(A, rng)
    Am, qv = petsc_aij(A), petsc_vec(q)
    sols = {}
    for m in ALL:
        x = qv.duplicate()
        x.set(0.0)
        solve_lcp(Am, qv, x, method=m, tol=1e-9)
        sols[m] = arr(x)
    for m, s in sols.items():
        assert np.abs(s - x0).max() <= 1e-6, m
        assert np.abs(s - sols["bbpgd"]).max() <= 1e-6, m


# ----------------------------------------------------------------------------------- contact operator (shell)
def test_shell_matches_assembled_and_diagonal(rng):
    nb, nc = 12, 40
    Dd = contact_D(nb, nc, rng)
    blocks = spd_blocks(nb, rng)
    A = Dd.T @ block_diag(blocks) @ Dd
    op, D = contact_op(Dd, blocks)
    Am = petsc_aij(A)
    assert op.getSize() == (nc, nc) and op.getType() == "python"
    for _ in range(3):
        xv = petsc_vec(rng.standard_normal(nc))
        y1, y2 = op.createVecLeft(), Am.createVecLeft()
        op.mult(xv, y1)
        Am.mult(xv, y2)
        assert np.allclose(arr(y1), arr(y2), rtol=1e-13, atol=1e-12)
        assert np.allclose(arr(y1), A @ arr(xv), rtol=1e-13, atol=1e-12)
        op.multTranspose(xv, y1)
        assert np.allclose(arr(y1), A.T @ arr(xv), rtol=1e-13, atol=1e-12)
    d = op.createVecLeft()
    op.getDiagonal(d)
    assert np.allclose(arr(d), np.diag(A), rtol=1e-13)
    # D assembled exactly (dense compare)
    assert np.allclose(D.convert("dense").getDenseArray(), Dd)


@pytest.mark.parametrize("method", ALL)
def test_contact_lcp_shell_vs_assembled(method, rng):
    nb, nc = 15, 50                  # 90 dofs > 50 constraints: A positive definite (generically)
    Dd = contact_D(nb, nc, rng)
    blocks = spd_blocks(nb, rng)
    A = Dd.T @ block_diag(blocks) @ Dd
    x0, q = known_solution_lcp(A, rng)
    op, _ = contact_op(Dd, blocks)
    Am, qv = petsc_aij(A), petsc_vec(q)
    out = []
    for M in (op, Am):
        x = qv.duplicate()
        x.set(0.0)
        r = solve_lcp(M, qv, x, method=method, tol=1e-9, max_iter=20000)
        assert r.converged
        out.append(arr(x))
        check_complementarity(A, q, out[-1], 1e-9)
    assert np.abs(out[0] - out[1]).max() <= 1e-6
    assert np.abs(out[0] - x0).max() <= 1e-5


def test_semidefinite_contact_lcp_methods_agree_on_velocity(rng):
    """More constraints than dofs: A = D^T M D is singular; x is not unique but A x (hence D x) is."""
    nb, nc = 5, 45                   # 30 dofs < 45 constraints
    Dd = contact_D(nb, nc, rng)
    blocks = spd_blocks(nb, rng)
    A = Dd.T @ block_diag(blocks) @ Dd
    assert np.linalg.matrix_rank(A) < nc
    _, q = known_solution_lcp(A, rng)
    op, _ = contact_op(Dd, blocks)
    qv = petsc_vec(q)
    vel = {}
    for m in ("bbpgd", "apgd", "tao-blmvm"):
        x = qv.duplicate()
        x.set(0.0)
        r = solve_lcp(op, qv, x, method=m, tol=1e-8, max_iter=50000)
        assert r.converged
        xs = arr(x)
        check_complementarity(A, q, xs, 1e-8)
        vel[m] = block_diag(blocks) @ Dd @ xs
    for m in vel:
        assert np.abs(vel[m] - vel["bbpgd"]).max() <= 1e-4, m


def test_operator_update_reuses_work_vectors(rng):
    nb, nc = 6, 10
    Dd = contact_D(nb, nc, rng)
    blocks = spd_blocks(nb, rng)
    op, D = contact_op(Dd, blocks)
    U0 = op._ctx.U
    # same sizes: same shell handle, same work Vecs, new values
    Dd2 = contact_D(nb, nc, rng)
    op2, D2 = contact_op(Dd2, blocks)
    h = op.handle
    op.update(D2, 2.0 * blocks)
    assert op.handle == h and op._ctx.U is U0
    xv = petsc_vec(rng.standard_normal(nc))
    y = op.createVecLeft()
    op.mult(xv, y)
    assert np.allclose(arr(y), Dd2.T @ block_diag(2.0 * blocks) @ Dd2 @ arr(xv))
    # more constraints and bodies: sizes change, same Python object
    Dd3 = contact_D(nb + 2, nc + 7, rng)
    b3 = spd_blocks(nb + 2, rng)
    _, D3 = contact_op(Dd3, b3)
    op.update(D3, b3)
    assert op.getSize() == (nc + 7, nc + 7) and op._ctx.U is not U0
    xv = petsc_vec(rng.standard_normal(nc + 7))
    y = op.createVecLeft()
    op.mult(xv, y)
    assert np.allclose(arr(y), Dd3.T @ block_diag(b3) @ Dd3 @ arr(xv))
    with pytest.raises(ValueError, match="blocks"):
        op.update(D3, b3[:-1])


def test_work_vectors_persist_across_calls(rng):
    A = random_spd(20, rng)
    Am, qv = petsc_aij(A), petsc_vec(rng.standard_normal(20))
    x = qv.duplicate()
    x.set(0.0)
    solve_lcp(Am, qv, x)
    w = Am.query("relcp_bbpgd_0")
    x.set(0.0)
    solve_lcp(Am, qv, x)
    assert Am.query("relcp_bbpgd_0").handle == w.handle


# ---------------------------------------------------------------------------- warm start, failure, zero size
@pytest.mark.parametrize("method", ALL)
def test_warm_start_returns_at_once(method, rng):
    A = random_spd(30, rng)
    q = rng.standard_normal(30)
    Am, qv = petsc_aij(A), petsc_vec(q)
    x = qv.duplicate()
    x.set(0.0)
    solve_lcp(Am, qv, x, method="bbpgd", tol=1e-10)
    xs = arr(x)
    r = solve_lcp(Am, qv, x, method=method, tol=1e-8)
    assert r.converged and r.iterations == 0 and len(r.history) == 1
    assert np.array_equal(arr(x), xs)


@pytest.mark.parametrize("method", ALL)
def test_non_convergence_raises_with_history(method, rng):
    A = random_spd(50, rng, shift=1e-3)
    q = rng.standard_normal(50)
    Am, qv = petsc_aij(A), petsc_vec(q)
    x = qv.duplicate()
    x.set(0.0)
    its = 1 if method == "tao-tron" else 3       # TRON (Newton + CG) solves a QP in very few iterations
    with pytest.raises(SolverError) as ei:
        solve_lcp(Am, qv, x, method=method, tol=1e-15, max_iter=its)
    e = ei.value
    assert e.method == method and e.iterations <= its and e.residual > 1e-15 and e.tol == 1e-15
    assert e.history.ndim == 1 and len(e.history) >= 2 and e.history[-1] == e.residual
    assert method in str(e) and "1.000e-15" in str(e)
    x.set(0.0)
    r = solve_lcp(Am, qv, x, method=method, tol=1e-15, max_iter=its, raise_on_fail=False)
    assert not r.converged and r.residual > 1e-15


def test_bbpgd_history_and_iteration_count(rng):
    A = random_spd(30, rng)
    q = rng.standard_normal(30)
    Am, qv = petsc_aij(A), petsc_vec(q)
    x = qv.duplicate()
    x.set(0.0)
    r = solve_lcp(Am, qv, x, tol=1e-10)
    assert len(r.history) == r.iterations + 1
    assert r.history[0] == pytest.approx(np.abs(np.minimum(0.0, q)).max())


def test_initial_guess_is_projected(rng):
    A = random_spd(10, rng)
    q = rng.standard_normal(10)
    Am, qv = petsc_aij(A), petsc_vec(q)
    x = petsc_vec(-np.ones(10))
    r = solve_lcp(Am, qv, x, tol=1e-10)
    assert r.converged and np.all(arr(x) >= 0)
    check_complementarity(A, q, arr(x), 1e-10)


@pytest.mark.parametrize("method", ALL)
def test_zero_size(method):
    A = PETSc.Mat().createAIJ((0, 0), nnz=0, comm=SELF)
    A.assemble()
    q = PETSc.Vec().createSeq(0, comm=SELF)
    x = q.duplicate()
    r = solve_lcp(A, q, x, method=method)
    assert r.converged and r.iterations == 0 and r.residual == 0.0 and r.certificate == 0.0
    # shell operator with no constraints (and no bodies)
    D = aij_from_triplets([], [], [], 0, 0, SELF)
    op = ContactOperator(D, np.zeros((0, 6, 6)))
    r = solve_lcp(op, q, x, method=method)
    assert r.converged and r.iterations == 0


def test_bad_arguments(rng):
    A = random_spd(5, rng)
    Am, qv = petsc_aij(A), petsc_vec(rng.standard_normal(5))
    x = qv.duplicate()
    with pytest.raises(ValueError, match="unknown method"):
        solve_lcp(Am, qv, x, method="nope")
    with pytest.raises(ValueError, match="layout"):
        solve_lcp(Am, qv, petsc_vec(np.zeros(4)))
    with pytest.raises(TypeError, match="unknown options"):
        solve_lcp(Am, qv, x, method="bbpgd", bogus=1)
    assert set(ALL) <= set(METHODS)


def test_bbpgd_one_fused_reduction_per_iteration(rng, monkeypatch):
    """BBPGD makes exactly one (fused) reduction per iteration: initial residual + iterations + certificate."""
    import relcp_mpi.solver.lcp as lcp_mod
    calls = []
    orig = lcp_mod.FusedReducer.reduce

    def counting(self, sums, maxes):
        calls.append((len(sums), len(maxes)))
        return orig(self, sums, maxes)

    monkeypatch.setattr(lcp_mod.FusedReducer, "reduce", counting)
    A = random_spd(30, rng)
    Am, qv = petsc_aij(A), petsc_vec(rng.standard_normal(30))
    x = qv.duplicate()
    x.set(0.0)
    r = solve_lcp(Am, qv, x, tol=1e-10)
    assert r.iterations > 5
    assert len(calls) == r.iterations + 2
    assert calls[1:-1] == [(3, 1)] * r.iterations     # s.s, s.y, y.y and the residual max in one call
