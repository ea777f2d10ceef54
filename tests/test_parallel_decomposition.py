"""Box, Cartesian and RCB decompositions (run under mpirun at several sizes, also serially)."""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.parallel.box import Box
from relcp_mpi.parallel.decomposition import (CartesianDecomposition, RCBDecomposition, imbalance,
                                              should_rebalance)

comm = MPI.COMM_WORLD


def test_box_wrap_and_minimum_image():
    box = Box([0, -1, 2], [10, 1, 5], periodic=[True, True, False])
    x = np.array([[-0.5, 1.5, 7.0], [10.0, -1.0, 1.0], [25.0, 0.2, 3.0], [-1e-17, -3.0, 2.0]])
    w = box.wrap(x)
    assert np.all(w[:, :2] >= box.lo[:2]) and np.all(w[:, :2] < box.hi[:2])
    assert np.array_equal(w[:, 2], x[:, 2])  # walled axis untouched
    np.testing.assert_allclose(w[:3], [[9.5, -0.5, 7.0], [0.0, -1.0, 1.0], [5.0, 0.2, 3.0]], atol=1e-12)
    d = box.minimum_image(np.array([[9.0, 1.5, 4.0], [-6.0, -0.9, -4.0]]))
    np.testing.assert_allclose(d, [[-1.0, -0.5, 4.0], [4.0, -0.9, -4.0]])
    np.testing.assert_array_equal(box.lengths, [10, 2, 3])
    with pytest.raises(ValueError):
        Box([0, 0, 0], [1, 0, 1])


def _random_points(n, box, rng):
    return box.lo + rng.random((n, 3)) * box.lengths


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["cart", "rcb"])
def test_owner_consistent_with_bounds(kind):
    rng = np.random.default_rng(7)
    box = Box([0, 0, 0], [4, 3, 2], periodic=[True, False, True])
    pts = _random_points(3000, box, rng)
    if kind == "cart":
        d = CartesianDecomposition(box, comm)
    else:
        mine = pts[rng.integers(0, comm.size, len(pts)) == comm.rank]
        d = RCBDecomposition(box, comm, mine)
    own = d.owner(pts)
    assert own.min() >= 0 and own.max() < comm.size
    lo, hi = d.all_bounds
    inside = np.all((pts >= lo[own]) & (pts < hi[own]), axis=1)
    assert inside.all()
    # subdomains tile the box: volumes sum to the box volume
    np.testing.assert_allclose(np.prod(hi - lo, axis=1).sum(), np.prod(box.lengths))
    # periodic images and out-of-box points on walled axes still get a valid owner
    shifted = pts + np.array([4.0, 0.0, -2.0])
    np.testing.assert_array_equal(d.owner(shifted), own)
    far = pts.copy(); far[:, 1] = 10.0
    o2 = d.owner(far)
    assert np.all(hi[o2, 1] == 3.0)
    # neighbours are symmetric
    nb = comm.allgather(d.neighbors(0.3).tolist())
    for r, lst in enumerate(nb):
        assert r not in lst
        for q in lst:
            assert r in nb[q]


def test_validate_ghost_width():
    box = Box([0, 0, 0], [4, 3, 2], periodic=[True, False, True])
    d = CartesianDecomposition(box, comm)
    assert d.validate_ghost_width(0.99) == 0.99
    with pytest.raises(ValueError, match="axis z"):
        d.validate_ghost_width(1.0)
    with pytest.raises(ValueError):
        d.validate_ghost_width(-1)
    with pytest.raises(ValueError):
        d.validate_ghost_width(float("nan"))
    walled = CartesianDecomposition(Box([0, 0, 0], [1, 1, 1]), comm)
    walled.validate_ghost_width(5.0)  # no periodic axis -> no limit


def test_cartesian_dims_follow_longest_axis():
    d = CartesianDecomposition(Box([0, 0, 0], [1, 8, 2]), comm)
    assert int(np.prod(d.dims)) == comm.size
    assert d.dims[1] == d.dims.max()


@pytest.mark.mpi
@pytest.mark.parametrize("periodic", [False, True])
def test_rcb_balances_clustered_bodies(periodic):
    rng = np.random.default_rng(11)
    box = Box([0, 0, 0], [10, 10, 10], periodic=periodic)
    n = 4000
    pts = 0.3 + rng.random((n, 3)) * 1.5  # everything in one corner
    mine = pts[rng.integers(0, comm.size, n) == comm.rank]
    d = RCBDecomposition(box, comm, mine)
    counts = np.bincount(d.owner(pts), minlength=comm.size)
    assert counts.sum() == n
    assert counts.max() / counts.mean() < 1.1
    assert imbalance(counts[comm.rank], comm) == pytest.approx(counts.max() / counts.mean())


@pytest.mark.mpi
def test_rcb_weighted_and_independent_of_placement():
    rng = np.random.default_rng(5)
    box = Box([-1, -1, -1], [1, 1, 1], periodic=[True, False, False])
    n = 3000
    pts = rng.normal(scale=0.3, size=(n, 3))
    w = 1.0 + 3.0 * (pts[:, 0] > 0)  # heavier on one side
    results = []
    for trial in range(3):
        if trial == 0:
            sel = np.arange(n) % comm.size == comm.rank
        elif trial == 1:
            sel = rng.integers(0, comm.size, n) == comm.rank
        else:
            sel = np.zeros(n, dtype=bool)
            if comm.rank == comm.size - 1:
                sel[:] = True  # everything on one rank, others empty
        perm = rng.permutation(np.flatnonzero(sel))  # local order must not matter either
        d = RCBDecomposition(box, comm, pts[perm], w[perm])
        results.append(d.all_bounds)
        wsum = np.bincount(d.owner(pts), weights=w, minlength=comm.size)
        assert wsum.max() / wsum.mean() < 1.05
    for lo, hi in results[1:]:
        np.testing.assert_array_equal(lo, results[0][0])
        np.testing.assert_array_equal(hi, results[0][1])


@pytest.mark.mpi
def test_rcb_no_bodies_and_coincident_bodies():
    box = Box([0, 0, 0], [3, 2, 1])
    d = RCBDecomposition(box, comm, np.zeros((0, 3)))
    lo, hi = d.all_bounds
    np.testing.assert_allclose(np.prod(hi - lo, axis=1), np.prod(box.lengths) / comm.size)
    same = np.tile([1.0, 1.0, 0.5], (5 if comm.rank == 0 else 0, 1))
    d2 = RCBDecomposition(box, comm, same)
    assert d2.owner(same).size == len(same)


def test_should_rebalance():
    assert should_rebalance(10, 5, 1.3, 1.2)
    assert not should_rebalance(11, 5, 1.3, 1.2)
    assert not should_rebalance(10, 5, 1.1, 1.2)
    assert not should_rebalance(10, 0, 9.0, 1.2)
    assert not should_rebalance(0, 5, 9.0, 1.2)
