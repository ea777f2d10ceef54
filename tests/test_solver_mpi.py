"""MPI tests of the distributed LCP solvers: the same global LCP distributed over 1, 2 and 4 ranks (sub-communicators
of COMM_WORLD, the last rank of each owning zero bodies and zero constraints, triplets passed by a rank that does
not own their row) gives the same solution, and BBPGD the same iteration count.

    mpirun -n 2 python -m pytest --with-mpi tests/test_solver_mpi.py -q
    mpirun -n 4 python -m pytest --with-mpi tests/test_solver_mpi.py -q
"""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.petsc import get_petsc
from relcp_mpi.solver import projection as pj
from relcp_mpi.solver.lcp import SolverError, minmap_residual, solve_lcp
from relcp_mpi.solver.operator import ContactOperator
from tests.helpers import aij_from_triplets

PETSc = get_petsc()
WORLD = MPI.COMM_WORLD
pytestmark = pytest.mark.mpi

NB, NC = 40, 110           # 240 body dofs, 110 constraints (A = D^T M D positive definite)


def global_problem(seed=7):
    rng = np.random.default_rng(seed)
    D = np.zeros((6 * NB, NC))
    for k in range(NC):
        i = rng.integers(NB)
        n = rng.standard_normal(3)
        n /= np.linalg.norm(n)
        D[6 * i:6 * i + 3, k] = n
        D[6 * i + 3:6 * i + 6, k] = np.cross(0.5 * rng.standard_normal(3), n)
        if rng.random() > 0.2:
            j = (i + 1 + rng.integers(NB - 1)) % NB
            D[6 * j:6 * j + 3, k] -= n
            D[6 * j + 3:6 * j + 6, k] -= np.cross(0.5 * rng.standard_normal(3), n)
    G = rng.standard_normal((NB, 6, 6))
    blocks = G @ G.transpose(0, 2, 1) / 6 + 0.5 * np.eye(6)
    M = np.zeros((6 * NB, 6 * NB))
    for b in range(NB):
        M[6 * b:6 * b + 6, 6 * b:6 * b + 6] = blocks[b]
    A = D.T @ M @ D
    act = rng.random(NC) < 0.5
    x0 = np.where(act, rng.random(NC) + 0.1, 0.0)
    w0 = np.where(act, 0.0, rng.random(NC) + 0.1)
    q = w0 - A @ x0
    return D, blocks, A, q, x0


PROB = global_problem()


def split(n, k, rank, weights=None):
    """Contiguous ownership of n items over k ranks; for k > 1 the last rank owns nothing."""
    if k == 1:
        return 0, n
    w = np.ones(k - 1) if weights is None else np.asarray(weights[:k - 1], float)
    ends = np.concatenate(([0], np.round(np.cumsum(w) / w.sum() * n).astype(int)))
    if rank >= k - 1:
        return n, n
    return int(ends[rank]), int(ends[rank + 1])


def build(sub, kind):
    """Distributed operator (shell ContactOperator or assembled AIJ), q and x on communicator ``sub``."""
    D, blocks, A, q, _ = PROB
    k, r = sub.Get_size(), sub.Get_rank()
    b0, b1 = split(NB, k, r, weights=[1, 2, 1])
    c0, c1 = split(NC, k, r, weights=[2, 1, 1])
    pc = PETSc.Comm(sub)
    if kind == "shell":
        # every rank passes the triplets of the constraints (columns) it owns, wherever their rows live
        rows, cols = np.nonzero(D[:, c0:c1])
        cols = cols + c0
        Dm = aij_from_triplets(rows, cols, D[rows, cols], 6 * (b1 - b0), c1 - c0, sub)
        op = ContactOperator(Dm, blocks[b0:b1])
        objs = [op, Dm]
    else:
        loc = A[c0:c1]
        rr, cc = np.nonzero(loc)
        indptr = np.concatenate(([0], np.cumsum(np.bincount(rr, minlength=c1 - c0)))).astype(PETSc.IntType)
        op = PETSc.Mat().createAIJ(((c1 - c0, NC), (c1 - c0, NC)),
                                   csr=(indptr, cc.astype(PETSc.IntType), loc[rr, cc]), comm=pc)
        op.assemble()
        objs = [op]
    qv = op.createVecLeft()
    qv.getArray()[:] = q[c0:c1]
    qv.stateIncrease()
    x = op.createVecRight()
    x.set(0.0)
    return op, qv, x, objs + [qv, x], (c0, c1)


def run_distributed(k, method, kind="shell", **kw):
    """Solve on the first k ranks of WORLD; returns (x_global, iterations, residual) on every WORLD rank."""
    color = 1 if WORLD.Get_rank() < k else MPI.UNDEFINED
    sub = WORLD.Split(color, WORLD.Get_rank())
    out = None
    if sub != MPI.COMM_NULL:
        op, qv, x, objs, (c0, c1) = build(sub, kind)
        res = solve_lcp(op, qv, x, method=method, **kw)
        r2 = minmap_residual(op, qv, x)
        xg = np.concatenate(sub.allgather(x.getArray(readonly=True).copy()))
        out = (xg, res.iterations, res.residual, r2, res.certificate)
        for o in objs:
            o.destroy()
        sub.Free()
    return WORLD.bcast(out, root=0)


def rank_counts():
    return [k for k in (1, 2, 4) if k <= WORLD.Get_size()]


def test_layout_has_an_empty_rank():
    for k in (2, 4):
        assert split(NB, k, k - 1) == (NB, NB) and split(NC, k, k - 1) == (NC, NC)
        spans = [split(NC, k, r, [2, 1, 1]) for r in range(k)]
        assert spans[0][0] == 0 and spans[-1][1] == NC
        assert all(spans[i][1] == spans[i + 1][0] for i in range(k - 1))


@pytest.mark.parametrize("kind", ["shell", "aij"])
def test_bbpgd_same_solution_and_iterations_across_rank_counts(kind):
    _, _, A, q, x0 = PROB
    runs = {k: run_distributed(k, "bbpgd", kind, tol=1e-9, max_iter=20000) for k in rank_counts()}
    x1, it1, r1, _, _ = runs[1]
    assert np.abs(x1 - x0).max() <= 1e-6
    assert np.abs(np.minimum(x1, A @ x1 + q)).max() <= 1e-8
    for k, (xk, itk, rk, r2k, ck) in runs.items():
        assert rk <= 1e-9 and abs(r2k - rk) <= 1e-12 and ck >= 0.0
        assert np.abs(xk - x1).max() <= 1e-8, k
        assert itk == it1, (k, itk, it1)


@pytest.mark.parametrize("method", ["apgd", "ipm", "tao-bncg", "tao-blmvm", "tao-tron"])
def test_other_methods_same_solution_across_rank_counts(method):
    _, _, A, q, x0 = PROB
    for k in rank_counts():
        xk, itk, rk, _, _ = run_distributed(k, method, "shell", tol=1e-9, max_iter=20000)
        assert rk <= 1e-9
        assert np.abs(xk - x0).max() <= 1e-6, (method, k)


def test_warm_start_and_collective_failure():
    k = WORLD.Get_size()
    op, qv, x, objs, (c0, c1) = build(WORLD, "shell")
    try:
        solve_lcp(op, qv, x, tol=1e-10)
        r = solve_lcp(op, qv, x, tol=1e-9)
        assert r.converged and r.iterations == 0
        x.set(0.0)
        # every rank raises (the decision is made on reduced values), nobody hangs
        with pytest.raises(SolverError) as ei:
            solve_lcp(op, qv, x, tol=1e-14, max_iter=2)
        assert len(ei.value.history) == 3
        hist = WORLD.allgather(ei.value.history)
        assert all(np.array_equal(h, hist[0]) for h in hist)
    finally:
        for o in objs:
            o.destroy()
    assert k >= 1


def test_distributed_certificate_matches_serial():
    rng = np.random.default_rng(3)
    n = 57
    y = rng.standard_normal(n)
    p = np.abs(rng.standard_normal(n))
    y = np.minimum(y, p)
    lo, hi = split(n, WORLD.Get_size(), WORLD.Get_rank())
    eps = pj.certificate_orthant_mpi(y[lo:hi], p[lo:hi], WORLD)
    ref = pj.certificate_orthant(y, p)
    assert eps == pytest.approx(ref, rel=1e-12)
    assert np.linalg.norm(p - np.maximum(y, 0)) <= eps
    nr = pj.normal_cone_residual_mpi(p[lo:hi], (y - p)[lo:hi], WORLD)
    assert nr == pj.normal_cone_residual(p, y - p)
    # infeasible p on one rank only: every rank raises
    pbad = p.copy()
    pbad[0] = -1.0                          # owned by rank 0 only
    with pytest.raises(ValueError):
        pj.certificate_orthant_mpi(y[lo:hi], pbad[lo:hi], WORLD)


# ----------------------------------------------------------------------------------- ipm on a saved colony LCP
def colony_distributed(sub):
    """tests/data/colony_lcp_256.npz on ``sub``: bodies and columns split contiguously (last rank empty for
    k > 1); every rank passes the triplets of the columns it owns."""
    import os
    import scipy.sparse as sp
    z = np.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "colony_lcp_256.npz"))
    D = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"])).tocsc()
    nb, nc = z["blocks"].shape[0], D.shape[1]
    k, r = sub.Get_size(), sub.Get_rank()
    b0, b1 = split(nb, k, r)
    c0, c1 = split(nc, k, r, weights=[2, 1, 1])
    C = D[:, c0:c1].tocoo()
    Dm = aij_from_triplets(C.row, C.col + c0, C.data, 6 * (b1 - b0), c1 - c0, sub)
    op = ContactOperator(Dm, z["blocks"][b0:b1])
    qv = Dm.createVecRight()
    qv.getArray()[:] = z["q"][c0:c1]
    x = Dm.createVecRight()
    x.set(0.0)
    return op, qv, x, [op, Dm, qv, x]


def test_ipm_colony_lcp_rank_count_independent(hang_guard):
    tol = 1e-7
    out = {}
    for k in rank_counts():
        color = 1 if WORLD.Get_rank() < k else MPI.UNDEFINED
        sub = WORLD.Split(color, WORLD.Get_rank())
        res = None
        if sub != MPI.COMM_NULL:
            op, qv, x, objs = colony_distributed(sub)
            r = solve_lcp(op, qv, x, method="ipm", tol=tol, max_iter=200)
            r2 = minmap_residual(op, qv, x)
            res = (np.concatenate(sub.allgather(x.getArray(readonly=True).copy())), r.residual, r2)
            for o in objs:
                o.destroy()
            sub.Free()
        out[k] = WORLD.bcast(res, root=0)
    x1 = out[1][0]
    for k, (xk, rk, r2k) in out.items():
        assert rk <= tol and abs(r2k - rk) <= 1e-9, k
        assert np.abs(xk - x1).max() <= 1e-5 * x1.max(), k


def test_ipm_collective_failure(hang_guard):
    """An LCP the method cannot solve in max_iter Newton steps: every rank raises the same SolverError."""
    op, qv, x, objs, _ = build(WORLD, "shell")
    try:
        with pytest.raises(SolverError) as ei:
            solve_lcp(op, qv, x, method="ipm", tol=1e-14, max_iter=2)
        e = ei.value
        assert e.method == "ipm" and e.iterations == 2 and len(e.history) == 3
        hist = WORLD.allgather(e.history)
        assert all(np.array_equal(h, hist[0]) for h in hist)
        x.set(0.0)
        r = solve_lcp(op, qv, x, method="ipm", tol=1e-9)
        assert r.converged and np.abs(np.concatenate(WORLD.allgather(x.getArray(readonly=True).copy()))
                                      - PROB[4]).max() <= 1e-6
    finally:
        for o in objs:
            o.destroy()
