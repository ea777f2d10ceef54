"""The contact operator ``A = D^T M D`` as a PETSc shell Mat (type ``python``), never assembled.

* ``D``: PETSc MPIAIJ Mat, rows = body dofs (6 per owned body, owner-distributed, in body order: the 6 rows of
  local body ``b`` are local rows ``6b .. 6b+5``), columns = constraints (distributed).
* ``M``: block diagonal mobility, one 6x6 block per owned body, given as a numpy array ``(n_local, 6, 6)`` and
  applied pointwise (``einsum``) on the local array of a work Vec.

``ContactOperator`` *is* a ``PETSc.Mat`` (a Python subclass whose handle is a ``MATPYTHON`` shell), so it can be
passed wherever a PETSc Mat is expected (``solve_lcp``, TAO Hessian, KSP).  ``update(D, blocks)`` swaps in a new
``D`` / ``M``: when the local and global sizes are unchanged the shell handle and the work Vecs are kept; when
they change, the shell handle is re-created in place (same Python object) with new work Vecs.  Objects composed
on the old handle (e.g. solver work Vecs) are released with it.

:func:`assemble_D` builds ``D`` from COO triplets that any rank may hold (see its docstring).
"""
from __future__ import annotations

import atexit
import weakref

import numpy as np

from relcp_mpi.petsc import get_petsc

PETSc = get_petsc()

__all__ = ["ContactOperator", "assemble_D", "as_mpi_comm", "as_petsc_comm"]

# petsc4py 3.18 (Debian) segfaults at interpreter exit when a MATPYTHON shell whose context references other
# PETSc objects is still alive.  Live operators are tracked weakly and destroyed by an atexit hook that runs before
# petsc4py's own finalisation (atexit is LIFO and this module is imported after petsc4py is initialised).
_LIVE = {}


def _track(op):
    key = id(op)
    _LIVE[key] = weakref.ref(op, lambda _r, key=key: _LIVE.pop(key, None))


def _destroy_live_operators():
    for ref in list(_LIVE.values()):
        op = ref()
        if op is None:
            continue
        try:
            op.destroy()
        except Exception:  # pragma: no cover - best effort at exit
            pass


atexit.register(_destroy_live_operators)


def as_petsc_comm(comm):
    """Accept None (-> PETSc.COMM_WORLD), a PETSc Comm or an mpi4py communicator."""
    if comm is None:
        return PETSc.COMM_WORLD
    if isinstance(comm, PETSc.Comm):
        return comm
    return PETSc.Comm(comm)


def as_mpi_comm(comm):
    """mpi4py communicator for a PETSc Comm / mpi4py comm / PETSc object (None -> COMM_WORLD)."""
    if comm is None:
        from mpi4py import MPI
        return MPI.COMM_WORLD
    if isinstance(comm, PETSc.Object):
        comm = comm.getComm()
    if isinstance(comm, PETSc.Comm):
        return comm.tompi4py()
    return comm


def any_rank(petsc_comm, flag):
    """True on every rank if ``flag`` is true on any rank of the PETSc communicator (one allreduce)."""
    mc = as_mpi_comm(petsc_comm)
    if mc.Get_size() == 1:
        return bool(flag)
    from mpi4py import MPI
    return bool(mc.allreduce(bool(flag), op=MPI.LOR))


class _ContactCtx:
    """Python context of the shell Mat: holds D, the 6x6 blocks and two persistent body-dof work Vecs."""

    def __init__(self):
        self.D = None
        self.blocks = None
        self.blocks_T = None
        self.U = None          # D x            (body-dof layout)
        self.F = None          # M (D x)        (body-dof layout)
        self._diag = None      # cached diagonal of A (numpy, local), built on demand
        self.nmult = 0

    def set(self, D, blocks):
        nr, nc = D.getLocalSize()
        blocks = np.ascontiguousarray(blocks, dtype=np.float64)
        if blocks.ndim != 3 or blocks.shape[1:] != (6, 6) or 6 * blocks.shape[0] != nr:
            raise ValueError("blocks must have shape (n_local_bodies, 6, 6) with 6*n_local_bodies == local rows "
                             "of D (%d); got %s" % (nr, blocks.shape))
        stale = self.U is None or self.U.getLocalSize() != nr or self.U.getSize() != D.getSize()[0]
        if any_rank(D.getComm(), stale):    # re-creation is collective: decide it together
            for v in (self.U, self.F):
                if v is not None:
                    v.destroy()
            self.U = D.createVecLeft()
            self.F = D.createVecLeft()
        self.D = D
        self.blocks = blocks
        self.blocks_T = None
        self._diag = None

    # --- PETSc python-Mat callbacks -----------------------------------------------------------------------------
    def _apply(self, x, y, blocks):
        self.D.mult(x, self.U)
        u = self.U.getArray(readonly=True).reshape(-1, 6)
        f = self.F.getArray().reshape(-1, 6)
        if u.shape[0]:
            np.einsum("bij,bj->bi", blocks, u, out=f)
        self.F.stateIncrease()
        self.D.multTranspose(self.F, y)
        self.nmult += 1

    def mult(self, mat, x, y):
        self._apply(x, y, self.blocks)

    def multTranspose(self, mat, x, y):
        if self.blocks_T is None:
            self.blocks_T = np.ascontiguousarray(np.transpose(self.blocks, (0, 2, 1)))
        self._apply(x, y, self.blocks_T)

    def getDiagonal(self, mat, d):
        d.getArray()[:] = self.diagonal(d)
        d.stateIncrease()

    def diagonal(self, template):
        """Local part of diag(A): diag_c = sum_b D_{b,:,c}^T M_b D_{b,:,c} (contributions scatter-added to the
        owner of column c)."""
        if self._diag is not None:
            return self._diag
        indptr, cols, vals = self.D.getValuesCSR()
        nrow = indptr.size - 1
        row = np.repeat(np.arange(nrow), np.diff(indptr))
        body = row // 6
        comp = row % 6
        ncol_glob = self.D.getSize()[1]
        key = body.astype(np.int64) * max(ncol_glob, 1) + cols.astype(np.int64)
        ukey, inv = np.unique(key, return_inverse=True)
        dbc = np.zeros((ukey.size, 6))
        np.add.at(dbc, (inv, comp), vals)
        ub = (ukey // max(ncol_glob, 1)).astype(np.int64)
        uc = (ukey % max(ncol_glob, 1)).astype(PETSc.IntType)
        contrib = np.einsum("ki,kij,kj->k", dbc, self.blocks[ub], dbc) if ukey.size else np.zeros(0)
        dv = template.duplicate()
        dv.set(0.0)
        if uc.size:
            dv.setValues(uc, contrib, addv=PETSc.InsertMode.ADD_VALUES)
        dv.assemble()
        self._diag = dv.getArray(readonly=True).copy()
        dv.destroy()
        return self._diag


class ContactOperator(PETSc.Mat):
    """Shell Mat applying ``A = D^T M D`` (constraints x constraints).

    Parameters: ``D`` (PETSc AIJ Mat, body dofs x constraints) and ``blocks`` (numpy ``(n_local_bodies, 6, 6)``).
    Work Vecs (two body-dof Vecs) are persistent; ``update`` reuses them unless sizes change.
    Supports ``mult``, ``multTranspose`` (uses the transposed blocks) and ``getDiagonal``.
    """

    def __init__(self, D, blocks):
        super().__init__()
        self._ctx = _ContactCtx()
        self._sizes = None
        self.update(D, blocks)
        _track(self)

    def update(self, D, blocks):
        """Swap in a new ``D`` and ``blocks``; re-creates the shell handle and work Vecs only if sizes change."""
        nr, nc = D.getLocalSize()
        Nr, Nc = D.getSize()
        sizes = ((nc, Nc), (nc, Nc))
        if any_rank(D.getComm(), sizes != self._sizes):   # collective decision: creation is collective
            if self._sizes is not None:
                self.destroy()
            self._ctx.set(D, blocks)
            self.createPython(sizes, context=self._ctx, comm=D.getComm())
            self.setUp()
            self._sizes = sizes
        else:
            self._ctx.set(D, blocks)
        return self

    @property
    def D(self):
        return self._ctx.D

    @property
    def blocks(self):
        return self._ctx.blocks

    @property
    def n_mult(self):
        """Number of operator applications so far (for benchmarks)."""
        return self._ctx.nmult

    def apply_mobility(self, u_local):
        """Apply the block-diagonal M to a local body-dof array (``(6 n_local,)`` or ``(n_local, 6)``)."""
        u = np.asarray(u_local, dtype=np.float64).reshape(-1, 6)
        return np.einsum("bij,bj->bi", self._ctx.blocks, u).reshape(np.shape(u_local))


def _allgather_sizes(mpicomm, n):
    if mpicomm.Get_size() == 1:
        return np.array([n], dtype=np.int64)
    return np.array(mpicomm.allgather(int(n)), dtype=np.int64)


def assemble_D(rows_global, cols_global, vals, n_body_dofs_local, n_constraints_local, comm=None):
    """Assemble the MPIAIJ matrix ``D`` (body dofs x constraints) from COO triplets.

    Parameters
    ----------
    rows_global, cols_global, vals : 1-D arrays of equal length
        Triplets ``D[rows_global[k], cols_global[k]] += vals[k]``.  Indices are *global* (row = 6*global body
        position in the rank-ordered body layout + component; column = global constraint index).  A rank may pass
        entries of rows it does not own (e.g. the constraint owner passes both bodies' 6-blocks even when the
        other body lives elsewhere); repeated (row, col) pairs are summed (ADD_VALUES).
    n_body_dofs_local : int
        Rows owned by this rank (6 x owned bodies); rows are owned contiguously in rank order.
    n_constraints_local : int
        Columns (constraints) owned by this rank, contiguous in rank order (defines the layout of gamma).
    comm : mpi4py comm, PETSc Comm, or None (COMM_WORLD).  Collective.

    Method: bad indices are detected on every rank first (collective ``ValueError``).  The triplets are then
    routed to the owner of their row with one ``Alltoallv`` (this is the off-process stash done explicitly, which
    lets us compute the *exact* diagonal/off-diagonal preallocation and keeps the insertion a single C loop),
    duplicates are summed, the Mat is preallocated exactly and filled with ``MatSetValues(..., ADD_VALUES)``
    (``setValuesRCV``), then assembled.  Any rank may own zero rows and/or zero columns.
    """
    from mpi4py import MPI

    pcomm = as_petsc_comm(comm)
    mcomm = pcomm.tompi4py()
    size, rank = mcomm.Get_size(), mcomm.Get_rank()
    rows = np.asarray(rows_global, dtype=np.int64).ravel()
    cols = np.asarray(cols_global, dtype=np.int64).ravel()
    vals = np.asarray(vals, dtype=np.float64).ravel()

    nr_all = _allgather_sizes(mcomm, n_body_dofs_local)
    nc_all = _allgather_sizes(mcomm, n_constraints_local)
    r_ends = np.cumsum(nr_all)
    c_ends = np.cumsum(nc_all)
    Nr, Nc = int(r_ends[-1]), int(c_ends[-1])
    rstart = int(r_ends[rank] - nr_all[rank])
    cstart, cend = int(c_ends[rank] - nc_all[rank]), int(c_ends[rank])

    bad = ""
    if not (rows.size == cols.size == vals.size):
        bad = "rows/cols/vals lengths differ (%d, %d, %d)" % (rows.size, cols.size, vals.size)
    elif rows.size and (rows.min() < 0 or rows.max() >= Nr):
        bad = "row index out of range [0, %d)" % Nr
    elif cols.size and (cols.min() < 0 or cols.max() >= Nc):
        bad = "column index out of range [0, %d)" % Nc
    elif n_body_dofs_local % 6:
        bad = "n_body_dofs_local=%d is not a multiple of 6" % n_body_dofs_local
    msgs = mcomm.allgather(bad) if size > 1 else [bad]
    errs = ["rank %d: %s" % (r, m) for r, m in enumerate(msgs) if m]
    if errs:
        raise ValueError("assemble_D: " + "; ".join(errs))

    # route triplets to row owners
    if size > 1:
        owner = np.searchsorted(r_ends, rows, side="right")
        order = np.argsort(owner, kind="stable")
        rows, cols, vals = rows[order], cols[order], vals[order]
        scount = np.bincount(owner, minlength=size).astype(np.int64)
        rcount = np.empty(size, dtype=np.int64)
        mcomm.Alltoall(scount, rcount)
        sdisp = np.concatenate(([0], np.cumsum(scount)[:-1]))
        rdisp = np.concatenate(([0], np.cumsum(rcount)[:-1]))
        ntot = int(rcount.sum())
        out = []
        for arr, mt in ((rows, MPI.INT64_T), (cols, MPI.INT64_T), (vals, MPI.DOUBLE)):
            rb = np.empty(ntot, dtype=arr.dtype)
            mcomm.Alltoallv([arr, (scount, sdisp), mt], [rb, (rcount, rdisp), mt])
            out.append(rb)
        rows, cols, vals = out

    # combine duplicates, exact preallocation
    nloc = int(n_body_dofs_local)
    lr = rows - rstart
    key = lr * max(Nc, 1) + cols
    ukey, inv = np.unique(key, return_inverse=True)
    uval = np.bincount(inv, weights=vals, minlength=ukey.size) if ukey.size else np.zeros(0)
    urow = ukey // max(Nc, 1)
    ucol = ukey % max(Nc, 1)
    diag = (ucol >= cstart) & (ucol < cend)
    d_nnz = np.bincount(urow[diag], minlength=nloc).astype(PETSc.IntType)
    o_nnz = np.bincount(urow[~diag], minlength=nloc).astype(PETSc.IntType)

    D = PETSc.Mat().create(comm=pcomm)
    D.setSizes(((nloc, Nr), (int(n_constraints_local), Nc)))
    D.setType(PETSc.Mat.Type.AIJ)
    D.setPreallocationNNZ((d_nnz, o_nnz))
    D.setOption(PETSc.Mat.Option.NEW_NONZERO_ALLOCATION_ERR, True)
    if ukey.size:
        R = (urow + rstart).astype(PETSc.IntType).reshape(-1, 1)
        C = ucol.astype(PETSc.IntType).reshape(-1, 1)
        D.setValuesRCV(R, C, uval.reshape(-1, 1), addv=PETSc.InsertMode.ADD_VALUES)
    D.assemble()
    return D
