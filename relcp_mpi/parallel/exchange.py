"""The one personalised all-to-all of the package: send rows of a 2-D array to chosen ranks.

Every exchange of the driver and the parallel layer (migration, ghosts, warm-start routing, restart
redistribution, the migration id check) moves whole rows of a numpy array to the rank named per row; this
module does it with one ``Alltoall`` of the counts (skipped when the caller already knows them) and one
buffer-based ``Alltoallv`` of the rows.  Collective: every rank of ``comm`` calls it, also with zero rows.
"""
import numpy as np

_MPI_TYPES = {np.dtype(np.float64): "DOUBLE", np.dtype(np.int64): "INT64_T"}


def _displacements(counts):
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def exchange_counts(scount, comm):
    """(P,) rows this rank receives from each rank, given the (P,) rows it sends to each (one Alltoall)."""
    scount = np.ascontiguousarray(scount, dtype=np.int64)
    if comm.Get_size() == 1:                # a rank sends only to itself: no MPI call (fixed cost of every step)
        return scount.copy()
    rcount = np.zeros(comm.Get_size(), dtype=np.int64)
    comm.Alltoall(scount, rcount)
    return rcount


def exchange_sorted(send, scount, rcount, comm):
    """Send the rows of ``send`` (n, w), already grouped by destination rank with ``scount[r]`` rows for
    rank r, and receive ``rcount[s]`` rows from each rank s.  Returns (sum(rcount), w), ordered by source
    rank, then by the rows' order on the source.  float64 or int64 rows (bit patterns are kept)."""
    from mpi4py import MPI
    send = np.ascontiguousarray(send)
    width = send.shape[1] if send.ndim == 2 else 1
    if comm.Get_size() == 1:                # the rows come back as sent, in their order (a copy, every bit kept)
        return send.reshape(send.shape[0], width).copy()
    mpitype = getattr(MPI, _MPI_TYPES[send.dtype])
    recv = np.empty((int(np.sum(rcount)), width), dtype=send.dtype)
    sc = np.asarray(scount, dtype=np.int64) * width
    rc = np.asarray(rcount, dtype=np.int64) * width
    comm.Alltoallv([send, (sc, _displacements(sc)), mpitype], [recv, (rc, _displacements(rc)), mpitype])
    return recv


def exchange_rows(rows, dest, comm, dtype=np.float64):
    """Send row ``i`` of the 2-D array ``rows`` (n, w) to rank ``dest[i]`` (n,); returns the received rows
    (m, w), ordered by source rank, then by their order on the source.  ``dtype`` float64 or int64."""
    rows = np.asarray(rows, dtype=dtype)
    dest = np.asarray(dest, dtype=np.int64)
    order = np.argsort(dest, kind="stable")
    scount = np.bincount(dest, minlength=comm.Get_size()).astype(np.int64)
    return exchange_sorted(rows[order], scount, exchange_counts(scount, comm), comm)
