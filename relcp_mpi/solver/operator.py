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

from relcp_mpi.petsc import get_petsc

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


# bodies per chunk of the diagonal computation (bounds its temporaries; see _ContactCtx.diagonal)
DIAG_CHUNK_BODIES = 2048


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
        owner of column c).

        Bodies are taken in chunks of DIAG_CHUNK_BODIES: the (body, column) 6-vectors of a body involve only
        its own 6 rows, and chunks in body order add the contributions to each column in the same order as
        one pass, while the temporaries (~140 bytes per nonzero of D) stay bounded (a dense 8,000-rod bed:
        64 MiB in one pass)."""
        if self._diag is not None:
            return self._diag
        indptr, cols, vals = self.D.getValuesCSR()
        ncol_glob = max(self.D.getSize()[1], 1)
        nbody = (indptr.size - 1) // 6
        dv = template.duplicate()
        dv.set(0.0)
        for b0 in range(0, nbody, DIAG_CHUNK_BODIES):
            r0, r1 = 6 * b0, 6 * min(nbody, b0 + DIAG_CHUNK_BODIES)
            lo, hi = indptr[r0], indptr[r1]
            row = np.repeat(np.arange(r0, r1), np.diff(indptr[r0:r1 + 1]))
            key = (row // 6).astype(np.int64) * ncol_glob + cols[lo:hi].astype(np.int64)
            ukey, inv = np.unique(key, return_inverse=True)
            dbc = np.zeros((ukey.size, 6))
            np.add.at(dbc, (inv, row % 6), vals[lo:hi])
            ub = (ukey // ncol_glob).astype(np.int64)
            uc = (ukey % ncol_glob).astype(PETSc.IntType)
            if uc.size:
                contrib = np.einsum("ki,kij,kj->k", dbc, self.blocks[ub], dbc)
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
