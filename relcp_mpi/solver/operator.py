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
"""
from __future__ import annotations

import atexit
import weakref

import numpy as np

from relcp_mpi.contact.constraints import CSR_ATTR, LAYOUT_ATTR, local_csr
from relcp_mpi.petsc import get_petsc
from relcp_mpi.solver import operator_jit

PETSc = get_petsc()

__all__ = ["ContactOperator", "as_mpi_comm", "as_petsc_comm"]

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


_NO_SPLIT = np.zeros(0, np.int64)      # operator_jit's ndiag when every column is owned (one rank)

# (body, column) entries per chunk of the diagonal computation (bounds its temporaries, 288 bytes of mobility block
# per entry: 1.1 MiB; see _ContactCtx.diagonal)
DIAG_CHUNK_ENTRIES = 4096


class _ContactCtx:
    """Python context of the shell Mat: holds D, the 6x6 blocks and two persistent body-dof work Vecs."""

    def __init__(self):
        self.D = None
        self.blocks = None
        self.blocks_T = None
        self.U = None          # D x            (body-dof layout)
        self.F = None          # M (D x)        (body-dof layout)
        self._diag = None      # cached diagonal of A (numpy, local), built on demand
        self.onepass = None    # the compiled one-pass product for D (:class:`_OnePass`), None: PETSc's products
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
        self.release()
        self.D = D
        self.blocks = blocks
        self.blocks_T = None
        self._diag = None
        self.onepass = _OnePass.create(D)

    def release(self):
        """Drop the references to D and what was built from it (the one-pass product's layout and scatters)."""
        if self.onepass is not None:
            self.onepass.destroy()
            self.onepass = None
        self.D = None
        self._diag = None

    # --- PETSc python-Mat callbacks -----------------------------------------------------------------------------
    def _apply(self, x, y, blocks):
        self.nmult += 1
        if self.onepass is not None:           # one compiled pass over D, the same bits (solver/operator_jit.py)
            self.onepass.apply(self.D, blocks, x, y)
            return
        self.D.mult(x, self.U)
        u = self.U.getArray(readonly=True).reshape(-1, 6)
        f = self.F.getArray().reshape(-1, 6)
        if u.shape[0]:
            np.einsum("bij,bj->bi", blocks, u, out=f)
        self.F.stateIncrease()
        self.D.multTranspose(self.F, y)

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
        owner of column c).

        The (body, column) pairs of D's local rows come from :func:`_body_column_index`; their 6-vectors are
        gathered from the CSR values and the quadratic forms evaluated DIAG_CHUNK_ENTRIES pairs at a time, so the
        temporaries stay bounded (a dense 8,000-rod bed took 64 MiB in one pass; all 6-vectors at once 6 MiB)
        while each column gets its contributions in the same order as in one pass."""
        if self._diag is not None:
            return self._diag
        if self.onepass is not None:           # one compiled pass over D (~30 ms -> ~1 ms on a 65k-row bed)
            self._diag = self.onepass.diagonal(self.D, self.blocks, template)
            return self._diag
        indptr, cols, vals = local_csr(self.D)
        index = _body_column_index(indptr, cols)
        if index is None:                     # not one column pattern per body: the general path
            ub, uc, dbc = _body_column_blocks(indptr, cols, vals, self.D.getSize()[1])
            del indptr, cols, vals

            def vectors(sl):
                return dbc[sl]
        else:
            ub, uc, at, stride = index
            del indptr, cols

            def vectors(sl):
                return _gather_vectors(vals, at[sl], stride[sl])
        dv = template.duplicate()
        dv.set(0.0)
        # (body, column) entries in chunks: the per-entry copies of the mobility blocks (288 bytes each) stay
        # bounded; entries are ordered by body, so each column still receives its contributions in body order
        for k0 in range(0, ub.size, DIAG_CHUNK_ENTRIES):
            sl = slice(k0, k0 + DIAG_CHUNK_ENTRIES)
            v = vectors(sl)
            contrib = np.einsum("ki,kij,kj->k", v, self.blocks[ub[sl]], v)
            dv.setValues(uc[sl], contrib, addv=PETSc.InsertMode.ADD_VALUES)
        dv.assemble()
        self._diag = dv.getArray(readonly=True).copy()
        dv.destroy()
        return self._diag


class _OnePass:
    """The compiled one-pass product ``y = D^T M D x`` (:mod:`relcp_mpi.solver.operator_jit`) for one D.

    It needs one column pattern per body, which assemble_D marks with the attribute ``CSR_ATTR``
    (contact/constraints.py); any other D keeps PETSc's products.  On one rank the kernel reads D's own CSR arrays
    (the attribute: PETSc's arrays, looked up at each product and never held, so they die with D).  On several
    ranks it reads a reordering of D's local rows (built from assemble_D's arrays in the attribute, which it takes
    over, or from PETSc's copy) with each body's owned columns first and its ghost columns after
    (local column numbers: owned ``c - c0``, ghost ``n_owned + k`` for the k-th of the sorted ghost columns), the
    order in which PETSc's MPIAIJ product sums them (diagonal block, then off-diagonal block); the ghost values of
    x come in by a forward scatter, the ghost columns' sums go to their owners by a reverse scatter-add, as in
    PETSc's ``multTranspose``.  Whether to use it is decided together on all ranks (the scatters are
    collective)."""

    def __init__(self, comm_size):
        self.parallel = comm_size > 1
        self.layout = None           # several ranks: (indptr, ndiag, cols, vals) of the reordered local rows
        self.scatter = None
        self.xext = self.yext = None     # [owned, ghost] column values: the kernel's x and y
        self.xg = self.yg = None         # Vecs over the ghost parts of xext / yext (the scatters' ends)
        self.n_owned = 0
        self.kernel = operator_jit.kernel()
        self.diagonal_kernel = operator_jit.diagonal_kernel()

    @classmethod
    def create(cls, D):
        """A _OnePass for D, or None when PETSc's products stay (collective on D's communicator)."""
        csr = D.getAttr(CSR_ATTR)
        size = D.getComm().getSize()
        ok = csr is not None and operator_jit.usable(D.getSize()[1], PETSc.IntType if size > 1 else csr[1].dtype)
        if size > 1:
            ok = not any_rank(D.getComm(), not ok)
        if not ok:
            return None
        op = cls(size)
        if op.parallel:
            op._build(D)
        return op

    def _build(self, D):
        c0, c1 = D.getOwnershipRangeColumn()
        self.n_owned = c1 - c0
        lay = D.getAttr(LAYOUT_ATTR)
        if lay:                                     # assemble_D's layout: taken over once
            D.setAttr(LAYOUT_ATTR, ())
            indptr, ndiag, lcols, vals, gl = lay
            self._ghosts(D, (indptr, ndiag, lcols, vals), gl)
            return
        csr = D.getAttr(CSR_ATTR)
        if len(csr):                                # assemble_D's arrays: taken once, not held beside the layout
            D.setAttr(CSR_ATTR, ())
            indptr, cols, vals = csr
            del csr
        else:                                       # taken by an earlier operator on this D: PETSc's copy
            indptr, cols, vals = D.getValuesCSR()   # local rows, global columns (ascending in each row)
        indptr = np.asarray(indptr, dtype=np.int64)
        nb = (indptr.size - 1) // 6
        r0 = indptr[0:-1:6]
        n = indptr[1::6] - r0                       # columns per body
        body = np.repeat(np.arange(nb), n)          # row-0 entries of each body, in order
        pos = r0[body] + np.arange(body.size) - np.repeat(np.cumsum(n) - n, n)
        gcol = cols[pos]
        ghost = (gcol < c0) | (gcol >= c1)
        order = np.argsort(2 * body + ghost, kind="stable")      # within each body: owned, then ghost
        step = n[body]
        newvals = np.empty_like(vals)
        for k in range(6):
            newvals[pos + k * step] = vals[pos[order] + k * step]
        del vals
        gcol = gcol[order]
        ghost = ghost[order]
        gl = np.unique(gcol[ghost])                 # the ghost columns, ascending (PETSc's garray order)
        lcol = np.where(ghost, self.n_owned + np.searchsorted(gl, gcol), gcol - c0).astype(PETSc.IntType)
        newcols = np.empty(cols.size, PETSc.IntType)
        for k in range(6):
            newcols[pos + k * step] = lcol
        ndiag = np.bincount(body[~ghost], minlength=nb).astype(np.int64)
        self._ghosts(D, (indptr.astype(PETSc.IntType), ndiag, newcols, newvals), gl)

    def _ghosts(self, D, layout, gl):
        """Adopt ``layout`` (indptr, ndiag, local columns, values) and the ghost columns ``gl`` (ascending): the
        extended vectors and the scatter of the ghost values."""
        self.layout = layout
        self.xext = np.zeros(self.n_owned + gl.size)
        self.yext = np.zeros(self.n_owned + gl.size)
        self.xg = PETSc.Vec().createWithArray(self.xext[self.n_owned:], comm=PETSc.COMM_SELF)
        self.yg = PETSc.Vec().createWithArray(self.yext[self.n_owned:], comm=PETSc.COMM_SELF)
        template = D.createVecRight()
        index = PETSc.IS().createGeneral(gl.astype(PETSc.IntType), comm=PETSc.COMM_SELF)
        self.scatter = PETSc.Scatter().create(template, index, self.xg, None)
        index.destroy()
        template.destroy()

    def apply(self, D, blocks, x, y):
        if not self.parallel:
            indptr, cols, vals = D.getAttr(CSR_ATTR)
            self.kernel(indptr, _NO_SPLIT, cols, vals, blocks, x.getArray(readonly=True), y.getArray())
            y.stateIncrease()
            return
        self.scatter.scatter(x, self.xg, PETSc.InsertMode.INSERT_VALUES, PETSc.ScatterMode.FORWARD)
        self.xext[:self.n_owned] = x.getArray(readonly=True)
        self.kernel(*self.layout, blocks, self.xext, self.yext)
        y.getArray()[:] = self.yext[:self.n_owned]
        y.stateIncrease()
        self.yg.stateIncrease()
        self.scatter.scatter(self.yg, y, PETSc.InsertMode.ADD_VALUES, PETSc.ScatterMode.REVERSE)

    def diagonal(self, D, blocks, template):
        """Local part of diag(D^T M D) (numpy, owned columns) by the compiled pass; on several ranks the ghost
        columns' sums are added to their owners by the product's reverse scatter (collective)."""
        if not self.parallel:
            indptr, cols, vals = D.getAttr(CSR_ATTR)
            d = np.empty(template.getLocalSize())
            self.diagonal_kernel(indptr, _NO_SPLIT, cols, vals, blocks, d)
            return d
        self.diagonal_kernel(*self.layout, blocks, self.yext)
        dv = template.duplicate()
        dv.getArray()[:] = self.yext[:self.n_owned]
        self.yg.stateIncrease()
        self.scatter.scatter(self.yg, dv, PETSc.InsertMode.ADD_VALUES, PETSc.ScatterMode.REVERSE)
        d = dv.getArray(readonly=True).copy()
        dv.destroy()
        return d

    def destroy(self):
        for o in (self.scatter, self.xg, self.yg):
            if o is not None:
                o.destroy()
        self.scatter = self.xg = self.yg = None
        self.layout = self.xext = self.yext = None


def _body_column_index(indptr, cols):
    """Where the 6-vectors D_{b,:,c} of the (body b, column c) pairs of D's local CSR rows are, when the six dof
    rows of every body share one column pattern (as assembled here: each constraint writes a full 6-vector):
    ``(ub (k,), uc (k,), at (k,), stride (k,))`` ordered by body, then column, component i of pair p at
    ``vals[at[p] + i stride[p]]``; None for any other pattern.  Index arrays per pair (k = nnz / 6), not per
    entry."""
    indptr = np.asarray(indptr, dtype=np.int64)
    nrow = indptr.size - 1
    if nrow % 6 or not cols.size:
        return None
    rowlen = np.diff(indptr)
    nb = rowlen[0::6]
    if not np.all(rowlen.reshape(-1, 6) == nb[:, None]):
        return None
    ub = np.repeat(np.arange(nrow // 6, dtype=np.int64), nb)        # body of each (body, column) pair
    at = indptr[0:-1:6][ub] + np.arange(ub.size) - (np.cumsum(nb) - nb)[ub]    # its entry in the body's row 0
    stride = nb[ub]
    uc = cols[at]
    for comp in range(1, 6):
        if not np.array_equal(cols[at + comp * stride], uc):
            return None
    return ub, uc.astype(PETSc.IntType), at, stride


def _gather_vectors(vals, at, stride):
    """The 6-vectors (k, 6) at ``vals[at + i stride]`` (see :func:`_body_column_index`), ``+ 0.0`` (-0.0 -> 0.0)."""
    v = np.empty((at.size, 6))
    for comp in range(6):
        v[:, comp] = vals[at + comp * stride]
    v += 0.0
    return v


def _body_column_blocks(indptr, cols, vals, ncol_glob):
    """The 6-vectors D_{b,:,c} of every (body b, column c) pair present in the local CSR rows of D.

    Returns ``(ub (k,), uc (k,), dbc (k, 6))`` ordered by body, then column: with one column pattern per body
    read off by :func:`_body_column_index`, else by a sort of the entries.  ``+ 0.0`` / ``bincount``: the same bits
    either way (-0.0 entries become 0.0)."""
    index = _body_column_index(indptr, cols)
    if index is not None:
        ub, uc, at, stride = index
        return ub, uc, _gather_vectors(vals, at, stride)
    indptr = np.asarray(indptr, dtype=np.int64)
    nrow = indptr.size - 1
    rowlen = np.diff(indptr)
    row = np.repeat(np.arange(nrow), rowlen)
    body = row // 6
    comp = row % 6
    nc = max(ncol_glob, 1)
    key = body.astype(np.int64) * nc + cols.astype(np.int64)
    ukey, inv = np.unique(key, return_inverse=True)
    # scatter-add of the entries into their (body, column) 6-vectors; bincount accumulates in the same order
    # as np.add.at (bit-identical), an order of magnitude faster
    dbc = np.bincount(inv.astype(np.int64) * 6 + comp, weights=vals, minlength=6 * ukey.size).reshape(-1, 6)
    return (ukey // nc).astype(np.int64), (ukey % nc).astype(PETSc.IntType), dbc


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

    def release(self):
        """Drop D and what was built from it until the next :meth:`update` (the stepper calls it before it
        assembles the next D, so that the two are not held together)."""
        self._ctx.release()

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
