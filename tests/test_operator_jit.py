"""The compiled one-pass contact operator (solver/operator_jit.py) gives the bits of PETSc's ``D.mult`` / ``einsum`` /
``D.multTranspose``, on each compiled build, for D as assemble_D makes it (walls, a body paired with its own image,
signed zeros, bodies without constraints, values over many decades); the switch selects the path it claims."""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.contact.constraints import CSR_ATTR, ConstraintTable, assemble_D
from relcp_mpi.petsc import get_petsc
from relcp_mpi.solver import operator_jit
from relcp_mpi.solver.operator import ContactOperator

PETSc = get_petsc()


def _one_rank_D(rng, nb, c, idle=0):
    """A one-rank D from a random constraint table: ``nb`` owned bodies (the last ``idle`` of them in no
    constraint), ghosts that are periodic images of owned bodies, 10 % walls, normals and levers spread over
    decades, some normals with signed zeros."""
    m = nb + nb // 3
    body_row = np.concatenate([np.arange(nb), rng.integers(0, max(nb - idle, 1), m - nb)])
    active = max(nb - idle, 1)
    ia = rng.integers(0, active, c)
    ib = rng.integers(0, m, c)
    ib[(ib < nb) & (ib >= active)] = -1
    ib[rng.random(c) < 0.1] = -1
    normal = rng.normal(size=(c, 3)) * 10.0 ** rng.uniform(-3, 3, (c, 1))
    normal[::7] = [0.0, -0.0, 1.0]
    t = ConstraintTable()
    t.append(ia=ia, ib=ib, gid_i=ia, gid_j=ib, sub=np.zeros(c), normal=normal,
             r_i=rng.normal(size=(c, 3)) * 10.0 ** rng.uniform(-2, 2, (c, 1)), r_j=rng.normal(size=(c, 3)),
             gap_free=np.zeros(c), sep0=np.zeros(c))
    return assemble_D(t, body_row, np.array([0, nb]), MPI.COMM_SELF, 0, c)


def _onepass(A):
    """Whether the operator A applies the compiled one-pass product."""
    return A._ctx.onepass is not None


def _products(D, blocks, xs):
    """``A x`` and ``A^T x`` for each x of ``xs`` through a fresh ContactOperator (its path chosen now)."""
    A = ContactOperator(D, blocks)
    x, y = D.createVecRight(), D.createVecRight()
    out = []
    for xv in xs:
        x.getArray()[:] = xv
        A.mult(x, y)
        out.append(y.getArray().copy())
        A.multTranspose(x, y)
        out.append(y.getArray().copy())
    fused = _onepass(A)
    for o in (A, x, y):
        o.destroy()
    return out, fused


@pytest.mark.parametrize("nb,c,idle", [(1, 1, 0), (3, 2, 1), (40, 300, 5), (900, 5000, 30)])
def test_compiled_operator_is_petsc_bit_for_bit(compiled_backend, monkeypatch, nb, c, idle):
    monkeypatch.setattr(operator_jit, "MIN_COLUMNS", 0)        # the JIT build on small operators too
    rng = np.random.default_rng(nb + c)
    D = _one_rank_D(rng, nb, c, idle)
    assert D.getAttr(CSR_ATTR) is not None
    blocks = rng.normal(size=(nb, 6, 6)) * 10.0 ** rng.uniform(-4, 1, (nb, 1, 1))   # not symmetric: A^T != A
    blocks[::5, 2, :] = -0.0
    xs = [rng.random(c) * (rng.random(c) < 0.5) * 10.0 ** rng.uniform(-3, 3, c), rng.normal(size=c)]
    got, fused = _products(D, blocks, xs)
    assert fused
    monkeypatch.setenv("RELCP_NUMBA", "0")
    ref, fused = _products(D, blocks, xs)
    assert not fused
    for g, r in zip(got, ref):
        assert np.array_equal(g, r) and np.array_equal(np.signbit(g), np.signbit(r))
    D.destroy()


def _diagonal(D, blocks):
    """diag(A) through a fresh ContactOperator (its path chosen now) and whether it took the compiled pass."""
    A = ContactOperator(D, blocks)
    d = D.createVecRight()
    A.getDiagonal(d)
    out, fused = d.getArray().copy(), _onepass(A)
    for o in (A, d):
        o.destroy()
    return out, fused


def _assembled_diagonal(D, blocks):
    """diag(D^T M D) from the assembled local rows of D: the independent reference (one rank)."""
    indptr, cols, vals = D.getValuesCSR()
    Dd = np.zeros(D.getSize())
    for r in range(indptr.size - 1):
        Dd[r, cols[indptr[r]:indptr[r + 1]]] = vals[indptr[r]:indptr[r + 1]]
    M = np.zeros((Dd.shape[0], Dd.shape[0]))
    for b in range(blocks.shape[0]):
        M[6 * b:6 * b + 6, 6 * b:6 * b + 6] = blocks[b]
    return np.einsum("rc,rs,sc->c", Dd, M, Dd)


@pytest.mark.parametrize("nb,c,idle", [(1, 1, 0), (3, 2, 1), (40, 300, 5)])
def test_compiled_diagonal_matches_assembled(compiled_backend, monkeypatch, nb, c, idle):
    """The compiled diagonal (one pass over D) against the assembled A's diagonal and the numpy path."""
    monkeypatch.setattr(operator_jit, "MIN_COLUMNS", 0)
    rng = np.random.default_rng(7 * nb + c)
    D = _one_rank_D(rng, nb, c, idle)
    g = rng.normal(size=(nb, 6, 6))
    blocks = np.einsum("bij,bkj->bik", g, g) * 10.0 ** rng.uniform(-4, 1, (nb, 1, 1))    # SPD like a mobility
    got, fused = _diagonal(D, blocks)
    assert fused
    ref = _assembled_diagonal(D, blocks)
    assert np.allclose(got, ref, rtol=1e-12, atol=0.0)
    monkeypatch.setenv("RELCP_NUMBA", "0")
    numpy_path, fused = _diagonal(D, blocks)
    assert not fused
    assert np.allclose(got, numpy_path, rtol=1e-13, atol=0.0)
    D.destroy()


def test_operator_path_selection(monkeypatch):
    """PETSc's products wherever the compiled one cannot serve: no compiled backend, a D without the CSR
    attribute (built elsewhere), JIT below MIN_COLUMNS; the compiled one otherwise."""
    rng = np.random.default_rng(3)
    D = _one_rank_D(rng, 30, 200)
    blocks = np.tile(np.eye(6), (30, 1, 1))
    monkeypatch.setenv("RELCP_NUMBA", "0")
    assert not _onepass(ContactOperator(D, blocks))
    monkeypatch.setenv("RELCP_NUMBA", "1")
    from relcp_mpi.geometry import numba_switch
    if numba_switch.AVAILABLE:
        monkeypatch.setenv("RELCP_AOT", "0")
        if numba_switch.backend() == "jit":
            assert not _onepass(ContactOperator(D, blocks))                # 200 columns < MIN_COLUMNS
            monkeypatch.setattr(operator_jit, "MIN_COLUMNS", 100)
            assert _onepass(ContactOperator(D, blocks))
    indptr, cols, vals = D.getValuesCSR()
    E = PETSc.Mat().createAIJ(D.getSize(), csr=(indptr, cols, vals), comm=PETSc.COMM_SELF)
    E.assemble()
    assert not _onepass(ContactOperator(E, blocks))
    for o in (D, E):
        o.destroy()


def _distributed_D(comm, rng, n_bodies, n_cols_per_rank):
    """D as the stepper assembles it on ``comm``: bodies split contiguously (the last rank may own none),
    constraints of each rank between its owned bodies and ghosts owned elsewhere, 10 % walls."""
    P, r = comm.size, comm.rank
    owners = P - 1 if P > 2 else P                 # from 3 ranks on the last one owns nothing
    starts = np.array([min(n_bodies, k * n_bodies // owners) for k in range(P + 1)])
    own = np.arange(starts[r], starts[r + 1])
    c = n_cols_per_rank if own.size else 0
    ghosts = rng.choice(n_bodies, size=min(n_bodies, 40), replace=False)
    ghosts = np.setdiff1d(ghosts, own)
    body_row = np.concatenate([own, ghosts]).astype(np.int64)
    m = body_row.size
    ia = rng.integers(0, max(own.size, 1), c)
    ib = rng.integers(0, max(m, 1), c)
    ib[ib == ia] = -1
    ib[rng.random(c) < 0.1] = -1
    normal = rng.normal(size=(c, 3)) * 10.0 ** rng.uniform(-3, 3, (c, 1))
    t = ConstraintTable()
    t.append(ia=ia, ib=ib, gid_i=ia, gid_j=ib, sub=np.zeros(c), normal=normal, r_i=rng.normal(size=(c, 3)),
             r_j=rng.normal(size=(c, 3)), gap_free=np.zeros(c), sep0=np.zeros(c))
    counts = comm.allgather(c)
    D = assemble_D(t, body_row, starts, comm, int(sum(counts[:r])), int(sum(counts)))
    return D, own.size


def _n_ghost_columns(D):
    c0, c1 = D.getOwnershipRangeColumn()
    cols = D.getValuesCSR()[1]
    return int(np.unique(cols[(cols < c0) | (cols >= c1)]).size)


@pytest.mark.mpi
def test_compiled_operator_is_petsc_bit_for_bit_on_ranks(monkeypatch):
    """Several ranks: the reordered local rows, the ghost scatters and the reverse scatter-add give PETSc's
    MPIAIJ products bit for bit (ranks without bodies included)."""
    from relcp_mpi.geometry import numba_switch
    if not numba_switch.enabled():
        pytest.skip("no compiled kernels")
    monkeypatch.setattr(operator_jit, "MIN_COLUMNS", 0)
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(11 + comm.rank)
    for n_bodies, per_rank in ((5, 3), (200, 700)):
        D, nb = _distributed_D(comm, rng, n_bodies, per_rank)
        blocks = rng.normal(size=(nb, 6, 6)) * 10.0 ** rng.uniform(-4, 1, (nb, 1, 1))
        nloc = D.getLocalSize()[1]
        xs = [rng.random(nloc) * 10.0 ** rng.uniform(-3, 3, nloc), rng.normal(size=nloc)]
        got, fused = _products(D, blocks, xs)
        assert fused
        if comm.size > 1:                          # the case the scatters exist for: columns owned elsewhere
            assert comm.allreduce(_n_ghost_columns(D), op=MPI.SUM) > 0
            # the operator took assemble_D's arrays over; a second one on the same D reads PETSc's copy
            assert comm.allreduce(int(D.getAttr(CSR_ATTR) == ()), op=MPI.SUM) == comm.size
        again, fused = _products(D, blocks, xs)
        assert fused
        monkeypatch.setenv("RELCP_NUMBA", "0")
        ref, fused = _products(D, blocks, xs)
        monkeypatch.setenv("RELCP_NUMBA", "1")
        assert not fused
        ok = all(np.array_equal(g, r) and np.array_equal(a, r) for g, a, r in zip(got, again, ref))
        assert all(comm.allgather(ok))
        # the diagonal: the compiled pass (ghost columns' sums scatter-added to their owners) against the numpy
        # path's per-entry setValues
        spd = np.einsum("bij,bkj->bik", blocks, blocks)
        diag, fused = _diagonal(D, spd)
        assert fused
        monkeypatch.setenv("RELCP_NUMBA", "0")
        ref_diag, fused = _diagonal(D, spd)
        monkeypatch.setenv("RELCP_NUMBA", "1")
        assert not fused
        assert all(comm.allgather(bool(np.allclose(diag, ref_diag, rtol=1e-13, atol=0.0))))
        D.destroy()
