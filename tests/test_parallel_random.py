"""Counter-based random numbers: identical for the same (seed, step, gid) on any rank count / order."""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.parallel import random as prand

comm = MPI.COMM_WORLD


def test_philox_known_answers():
    """Random123 known-answer vectors for Philox4x32-10."""
    cases = [
        ([0, 0, 0, 0], [0, 0], [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]),
        ([0xffffffff] * 4, [0xffffffff] * 2, [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]),
        ([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0],
         [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]),
    ]
    for ctr, key, want in cases:
        np.testing.assert_array_equal(prand.philox4x32(np.array([ctr]), np.array([key]))[0], want)


def test_rows_independent_of_batch_and_order():
    gids = np.array([0, 5, 3, 2 ** 40 + 7, 11, 12])
    for fn in (prand.normal, prand.uniform):
        full = fn(42, 7, gids, (2, 3))
        assert full.shape == (6, 2, 3)
        perm = np.array([3, 0, 5, 1, 4, 2])
        np.testing.assert_array_equal(fn(42, 7, gids[perm], (2, 3)), full[perm])
        for i, g in enumerate(gids):
            np.testing.assert_array_equal(fn(42, 7, [g], (2, 3))[0], full[i])
        # keyed: a different seed / step / stream / gid changes the numbers
        assert not np.any(fn(43, 7, gids, (2, 3)) == full)
        assert not np.any(fn(42, 8, gids, (2, 3)) == full)
        assert not np.any(fn(42, 7, gids, (2, 3), stream=1) == full)
    # the first columns do not depend on how many are drawn
    np.testing.assert_array_equal(prand.normal(1, 2, gids, 7)[:, :3], prand.normal(1, 2, gids, 3))
    assert prand.uniform(1, 2, gids).shape == (6,)
    assert prand.normal(1, 2, np.zeros(0, np.int64), 3).shape == (0, 3)


def test_statistics():
    g = np.arange(200000)
    u = prand.uniform(3, 1, g)
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    z = prand.normal(3, 1, g, 2)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert abs(np.corrcoef(z[:, 0], z[:, 1])[0, 1]) < 0.01
    assert abs(np.corrcoef(z[:, 0], prand.uniform(3, 1, g))[0, 1]) < 0.01
    with pytest.raises(ValueError):
        prand.uniform(-1, 0, g)


@pytest.mark.mpi
def test_same_numbers_on_any_rank_count():
    rng = np.random.default_rng(99)
    n = 1000
    gids = rng.permutation(10 ** 6)[:n]
    reference = prand.normal(2024, 17, gids, 6)  # computed serially on every rank
    mine = np.flatnonzero(rng.integers(0, comm.size, n) == comm.rank)
    mine = mine[rng.permutation(len(mine))]
    local = prand.normal(2024, 17, gids[mine], 6)
    got_idx = np.concatenate(comm.allgather(mine))
    got = np.concatenate(comm.allgather(local))
    np.testing.assert_array_equal(got, reference[got_idx])
    assert sorted(got_idx.tolist()) == list(range(n))
