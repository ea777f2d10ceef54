"""The package's one personalised all-to-all (parallel/exchange.py): rows arrive grouped by source rank, in their
order on the source, with every bit kept -- through MPI on several ranks and without MPI calls on one."""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.parallel.exchange import exchange_counts, exchange_rows, exchange_sorted


def _rows(rank, n, dtype):
    """n rows of width 3 tagged with their source rank and index; int64 rows carry values beyond 2**53."""
    k = np.arange(n)
    if dtype == np.int64:
        return np.stack([np.full(n, rank), k, 2 ** 60 + 7 * k + rank], axis=1).astype(np.int64)
    return np.stack([np.full(n, rank), k, np.pi * (k + 1) / 3.0 + rank], axis=1)


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_one_rank_returns_a_copy_of_the_rows(dtype):
    comm = MPI.COMM_SELF
    rows = _rows(0, 5, dtype)
    got = exchange_rows(rows, np.zeros(5, np.int64), comm, dtype=dtype)
    assert got.dtype == dtype and np.array_equal(got, rows)
    got[0, 0] = 99                                   # a copy: the caller's rows are untouched
    assert rows[0, 0] == 0
    assert exchange_counts(np.array([5]), comm).tolist() == [5]
    assert exchange_sorted(rows[:0], [0], [0], comm).shape == (0, 3)
    assert exchange_sorted(np.arange(4.0), [4], [4], comm).shape == (4, 1)        # 1-D rows: one column


@pytest.mark.mpi
@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_rows_arrive_by_source_rank_in_source_order(dtype):
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    rng = np.random.default_rng(11 + rank)
    n = int(rng.integers(0, 9))                     # some ranks may send nothing
    rows = _rows(rank, n, dtype)
    dest = rng.integers(0, size, n)
    got = exchange_rows(rows, dest, comm, dtype=dtype)
    # reference: every rank's rows and destinations, gathered; mine are the rows sent to me, by source rank
    every = comm.allgather((rows, dest))
    expect = np.concatenate([r[d == rank] for r, d in every])
    assert got.dtype == dtype and np.array_equal(got, expect)
    counts = np.bincount(dest, minlength=size)
    assert exchange_counts(counts, comm).tolist() == [int(np.count_nonzero(d == rank)) for _, d in every]
