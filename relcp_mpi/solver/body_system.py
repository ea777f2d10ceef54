"""Newton systems of the second-order LCP methods (:mod:`.ipm`), reduced to the body dofs.

For ``A = D^T Mt D`` (a :class:`~relcp_mpi.solver.operator.ContactOperator`, ``Mt = dt M`` the scaled (6, 6)
mobility blocks) and a diagonal ``Theta >= 0`` over the constraint rows, the Sherman-Morrison-Woodbury identity
gives, on the rows where ``Theta > 0``::

    (Theta^{-1} + A)^{-1} b = Theta (b - D^T v),   K v = D Theta b,   K = Mt^{-1} + D Theta D^T,

and ``0`` on the rows where ``Theta = 0`` (they drop out of K: a row with ``Theta = 0`` is held at zero).  K is a
body-dof (6 per body, block size 6) SPD matrix: the stiffness matrix of the contact network with spring constant
``Theta_k`` per contact.  :class:`BodySystem` assembles it (``Ds = D Theta^{1/2}``, ``Ds Ds^T`` by MatTranspose +
MatMatMult, plus the block-diagonal ``Mt^{-1}``) and solves it with a persistent KSP; :class:`ConstraintSystem`
is the same for an assembled constraint-space matrix ``A`` (``A + Theta^{-1}``, ``Theta > 0`` on every row).

Linear solver (``pc_type``): ``'cholesky'``: one sparse Cholesky factorization by MUMPS per assembly, applied
once (``preonly``); any other PC type: CG preconditioned by it to the relative tolerance ``rtol``.
"""
from __future__ import annotations

import numpy as np

from relcp_mpi.petsc import get_petsc

PETSc = get_petsc()

__all__ = ["BodySystem", "ConstraintSystem", "persistent_ksp", "inverse_blocks"]


def inverse_blocks(blocks):
    """(n, 6, 6) symmetric positive (semi)definite blocks -> their inverses; eigenvalues below 1e-12 of the
    block's largest are raised to that floor (a dof without mobility becomes a stiff dof, not a division by 0)."""
    if blocks.shape[0] == 0:
        return np.zeros((0, 6, 6))
    sym = 0.5 * (blocks + np.transpose(blocks, (0, 2, 1)))
    lam, vec = np.linalg.eigh(sym)
    floor = 1e-12 * np.maximum(lam[:, -1:], np.finfo(float).tiny)
    lam = np.maximum(lam, floor)
    return np.einsum("bij,bj,bkj->bik", vec, 1.0 / lam, vec)


def _block_diag_mat(D, inv):
    """Assembled block-diagonal AIJ (block size 6) with D's row layout holding ``inv`` (n_local, 6, 6)."""
    nr, _ = D.getLocalSize()
    Nr, _ = D.getSize()
    r0, _ = D.getOwnershipRange()
    nb = nr // 6
    indptr = (6 * np.arange(nr + 1)).astype(PETSc.IntType)
    cols = (r0 + 6 * (np.arange(nr) // 6)[:, None] + np.arange(6)).astype(PETSc.IntType).ravel()
    vals = inv.reshape(nb * 6, 6).ravel() if nb else np.zeros(0)
    M = PETSc.Mat().createAIJ(((nr, Nr), (nr, Nr)), bsize=6, csr=(indptr, cols, vals), comm=D.getComm())
    M.assemble()
    return M


class BodySystem:
    """``K = Mt^{-1} + D Theta D^T`` (body dofs) for a ContactOperator.  ``assemble(theta)`` (``(c,)`` local,
    ``>= 0``) builds and factors K; ``solve(b)`` -> ``((Theta^{-1} + A)^{-1} b`` on the rows with ``Theta > 0``,
    0 elsewhere (numpy, ``(c,)``), KSP iterations)."""

    def __init__(self, A, ksp):
        self.D = A.D
        self.ksp = ksp
        self.Minv = _block_diag_mat(self.D, inverse_blocks(A.blocks))
        self.Ds = self.D.duplicate(copy=True)
        self.P = None
        self.Dst = None
        self.K = None
        self.sv = self.D.createVecRight()        # sqrt(theta), constraint layout
        self.tv = self.D.createVecRight()        # theta b, then D^T v
        self.rhs, self.v = self.Minv.createVecs()

    def assemble(self, theta):
        S = self.sv.getArray()
        np.sqrt(theta, out=S)
        self.sv.stateIncrease()
        self.D.copy(self.Ds, structure=PETSc.Mat.Structure.SAME_NONZERO_PATTERN)
        self.Ds.diagonalScale(R=self.sv)
        # Ds Ds^T through an explicit transpose: MatMatTransposeMult's reuse path fails for MPIAIJ in PETSc 3.18
        if self.P is None:
            self.Dst = self.Ds.transpose(PETSc.Mat())      # (petsc4py: transpose() without out is in place)
            self.P = self.Ds.matMult(self.Dst)
            self.K = self.Minv.copy()
            self.K.axpy(1.0, self.P, structure=PETSc.Mat.Structure.DIFFERENT_NONZERO_PATTERN)
        else:
            self.Ds.transpose(self.Dst)
            self.Ds.matMult(self.Dst, result=self.P)
            self.K.zeroEntries()
            self.K.axpy(1.0, self.Minv, structure=PETSc.Mat.Structure.SUBSET_NONZERO_PATTERN)
            self.K.axpy(1.0, self.P, structure=PETSc.Mat.Structure.SUBSET_NONZERO_PATTERN)
        self.ksp.setOperators(self.K)
        self.ksp.setUp()
        self.theta = theta

    def solve(self, b):
        T = self.tv.getArray()
        np.multiply(self.theta, b, out=T)
        self.tv.stateIncrease()
        self.D.mult(self.tv, self.rhs)
        self.ksp.solve(self.rhs, self.v)
        self.D.multTranspose(self.v, self.tv)
        return self.theta * (b - self.tv.getArray(readonly=True)), self.ksp.getIterationNumber()

    def destroy(self):
        for o in (self.Minv, self.Ds, self.Dst, self.P, self.K, self.sv, self.tv, self.rhs, self.v):
            if o is not None:
                o.destroy()


class ConstraintSystem:
    """``A + Theta^{-1}`` assembled (A an AIJ matrix, ``Theta > 0`` on every row); ``solve(b)`` -> (dg (numpy),
    KSP iterations), as :class:`BodySystem`."""

    def __init__(self, A, ksp):
        self.A = A
        self.ksp = ksp
        self.K = A.copy()
        self.dA = A.getDiagonal()
        self.dv = self.dA.duplicate()
        self.bv, self.xv = A.createVecs()

    def assemble(self, theta):
        A = self.A
        A.copy(self.K, structure=PETSc.Mat.Structure.SAME_NONZERO_PATTERN)
        d = self.dv.getArray()
        np.add(self.dA.getArray(readonly=True), 1.0 / theta, out=d)
        self.dv.stateIncrease()
        self.K.setDiagonal(self.dv)
        self.ksp.setOperators(self.K)
        self.ksp.setUp()

    def solve(self, b):
        self.bv.getArray()[:] = b
        self.bv.stateIncrease()
        self.ksp.solve(self.bv, self.xv)
        return self.xv.getArray(readonly=True).copy(), self.ksp.getIterationNumber()

    def destroy(self):
        for o in (self.K, self.dA, self.dv, self.bv, self.xv):
            o.destroy()


def configure_ksp(ksp, pc_type, rtol):
    """``pc_type='cholesky'``: one sparse Cholesky factorization (MUMPS) per Newton step, applied once
    (``preonly``); any other PC type: CG preconditioned by it to the relative tolerance ``rtol``."""
    pc = ksp.getPC()
    if pc_type == "cholesky":
        ksp.setType("preonly")
        pc.setType("cholesky")
        pc.setFactorSolverType("mumps")
    else:
        ksp.setType("cg")
        pc.setType(pc_type)
        ksp.setTolerances(rtol=rtol, atol=0.0, max_it=10000)
        ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)


def persistent_ksp(A, pc_type, rtol, prefix="relcp_ipm_"):
    """The persistent KSP of a method, composed on A under ``<prefix>ksp`` (created on first use; PETSc options
    with that prefix apply, e.g. ``-relcp_ipm_pc_type hypre``)."""
    key = prefix + "ksp"
    ksp = A.query(key)
    if ksp is None:
        ksp = PETSc.KSP().create(comm=A.getComm())
        ksp.setOptionsPrefix(prefix)
        configure_ksp(ksp, pc_type, rtol)
        ksp.setFromOptions()
        A.compose(key, ksp)
        ksp.destroy()                       # A holds the reference
        ksp = A.query(key)
    elif (ksp.getPC().getType(), ksp.getTolerances()[0]) != (pc_type, rtol):
        configure_ksp(ksp, pc_type, rtol)
    return ksp
