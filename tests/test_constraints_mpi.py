"""Distributed D assembly: same operator as a dense serial reference on any rank count."""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.contact.constraints import ConstraintTable, assemble_D, match_keys
from relcp_mpi.petsc import get_petsc


def _global_problem(N=23, C=41, W=2, seed=3):
    rng = np.random.default_rng(seed)
    pi = rng.integers(0, N, C)
    pj = (pi + 1 + rng.integers(0, N - 1, C)) % N
    pj[:W] = -1                                      # first W constraints are wall constraints
    n = rng.normal(size=(C, 3))
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    return pi, pj, n, rng.normal(size=(C, 3)), rng.normal(size=(C, 3))


def _dense_D(N, pi, pj, n, ri, rj, axis=None):
    """Dense reference; with ``axis`` (N, 3) each body's torques lose their component along its axis."""
    axis = np.zeros((N, 3)) if axis is None else axis

    def six(b, r, nk):
        t = np.cross(r, nk)
        return np.concatenate([nk, t - np.dot(t, axis[b]) * axis[b]])

    D = np.zeros((6 * N, len(pi)))
    for k in range(len(pi)):
        D[6 * pi[k]:6 * pi[k] + 6, k] += six(pi[k], ri[k], n[k])
        if pj[k] >= 0:
            D[6 * pj[k]:6 * pj[k] + 6, k] -= six(pj[k], rj[k], n[k])
    return D


@pytest.mark.mpi
@pytest.mark.parametrize("with_axis", [False, True])
def test_distributed_D_matches_dense(with_axis):
    """With ``with_axis`` every other body has a unit axis along which its torques are dropped
    (contact.drop_axial_torque), the others none."""
    PETSc = get_petsc()
    comm = MPI.COMM_WORLD
    P, r = comm.size, comm.rank
    N, C = 23, 41
    pi, pj, n, ri, rj = _global_problem(N, C)
    axis = None
    if with_axis:
        axis = np.random.default_rng(5).normal(size=(N, 3))
        axis /= np.linalg.norm(axis, axis=1, keepdims=True)
        axis[1::2] = 0.0
    # rank 0 owns no body when P > 1 (zero-body rank), bodies split among the others
    owners = np.arange(N) % max(P - 1, 1) + (1 if P > 1 else 0)
    starts = np.concatenate([[0], np.cumsum(np.bincount(owners, minlength=P))])
    order = np.argsort(owners, kind="stable")
    row_of = np.empty(N, np.int64)
    row_of[order] = np.arange(N)                     # global block row of body g
    mine_c = np.arange(C)[np.arange(C) % P == r]     # constraints owned round-robin
    # combined local body list: owned bodies, then the ghosts referenced by my constraints
    owned = order[starts[r]:starts[r + 1]]
    ref = np.unique(np.concatenate([pi[mine_c], pj[mine_c][pj[mine_c] >= 0]]))
    ghosts = np.setdiff1d(ref, owned)
    local = np.concatenate([owned, ghosts])
    idx = {g: k for k, g in enumerate(local)}
    t = ConstraintTable()
    t.append(ia=[idx[g] for g in pi[mine_c]], ib=[idx[g] if g >= 0 else -1 for g in pj[mine_c]],
             gid_i=pi[mine_c], gid_j=pj[mine_c], sub=np.zeros(len(mine_c)), normal=n[mine_c], r_i=ri[mine_c],
             r_j=rj[mine_c], gap_free=np.zeros(len(mine_c)), sep0=np.zeros(len(mine_c)))
    counts = comm.allgather(len(t))
    D = assemble_D(t, row_of[local], starts, comm, int(sum(counts[:r])), C,
                   axis=None if axis is None else axis[local])
    Dd = _dense_D(N, pi, pj, n, ri, rj, axis)
    if with_axis:                                    # the projection changes the reference (else it tests nothing)
        assert not np.allclose(Dd, _dense_D(N, pi, pj, n, ri, rj), atol=1e-3)
    # permutation: global column order is (rank, local order)
    colperm = np.concatenate([np.arange(C)[np.arange(C) % P == p] for p in range(P)])
    rowperm = np.concatenate([np.arange(6 * g, 6 * g + 6) for g in order])
    Dp = Dd[rowperm][:, colperm]
    x = D.createVecRight()
    rng = np.random.default_rng(9)
    xg = rng.normal(size=C)
    lo, hi = x.getOwnershipRange()
    x.getArray()[:] = xg[lo:hi]
    y = D.createVecLeft()
    D.mult(x, y)
    ylo, yhi = y.getOwnershipRange()
    assert np.allclose(y.getArray(), (Dp @ xg)[ylo:yhi], atol=1e-12)
    z = D.createVecLeft()
    zg = rng.normal(size=6 * N)
    z.getArray()[:] = zg[ylo:yhi]
    w = D.createVecRight()
    D.multTranspose(z, w)
    assert np.allclose(w.getArray(), (Dp.T @ zg)[lo:hi], atol=1e-12)
    D.destroy()


def test_match_keys():
    t = ConstraintTable()
    t.append(ia=[0, 1, 2], ib=[1, 2, -1], gid_i=[5, 5, 9], gid_j=[7, 8, -1], sub=[0, 1, 0],
             normal=np.zeros((3, 3)), r_i=np.zeros((3, 3)), r_j=np.zeros((3, 3)), gap_free=np.zeros(3), sep0=np.zeros(3))
    old = ConstraintTable()
    old.append(ia=[0, 0], ib=[0, 0], gid_i=[9, 5], gid_j=[-1, 8], sub=[0, 1], normal=np.zeros((2, 3)),
               r_i=np.zeros((2, 3)), r_j=np.zeros((2, 3)), gap_free=np.zeros(2), sep0=np.zeros(2))
    v = match_keys(t.keys(), old.keys(), np.array([3.0, 4.0]))
    assert v.tolist() == [0.0, 4.0, 3.0]
