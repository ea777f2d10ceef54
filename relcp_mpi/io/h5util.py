"""Shared helpers for the parallel HDF5 I/O (trajectory frames and checkpoints).

* :func:`exscan_offsets` -- row offset of this rank and the global total (one MPI exscan + allreduce).
* :func:`sort_rows_by_key` -- distributed sample sort: rows (float64 array plus an int64 key) are moved
  so that every rank holds a locally sorted, contiguous range of the globally sorted keys and rank r's
  range precedes rank r+1's.  No rank ever receives all rows (only ``OVERSAMPLE`` keys per rank are
  allgathered to pick the splitters).  Writing the result at :func:`exscan_offsets` gives a dataset in
  global key (= global id) order.
* :func:`write_rows` / :func:`read_rows` -- write/read rows ``[start, start + n)`` of a dataset.
  **h5py 3.7 zero-row workaround**: h5py's ``Dataset.__setitem__`` returns early when the selection is
  empty, so a rank owning zero rows skips the ``H5Dwrite`` call that the other ranks make collectively and
  the job hangs.  :func:`write_rows` therefore talks to the low-level API directly: a rank with no rows
  still calls ``H5Dwrite`` with ``H5S_NONE`` selections in both the memory and the file space (a one-row
  dummy buffer, so the pointer is valid), which is the documented way to take part in a collective
  transfer without data.
* :func:`block_range` -- contiguous block ``[N r / P, N (r+1) / P)`` of rank r (used for reading).
* :func:`partial_checksum` / :func:`combine_checksums` -- a position-aware, rank-count independent
  64-bit checksum of a dataset's bytes: every 8-byte word w_k at global word index k contributes
  ``mix(w_k XOR mix(k XOR salt))`` (splitmix64 finaliser, a bijection) and the contributions are summed
  modulo 2**64.  Partial sums of any split of the rows add up to the same value, so the writer (P ranks)
  and the reader (any number of ranks, or one serial process) agree; a change of any single word always
  changes the sum.  Only 8-byte dtypes are hashed (checkpoints store int64/float64 only).
"""
import hashlib

import numpy as np

from relcp_mpi.parallel.errors import agree as agree_all, first_message
from relcp_mpi.parallel.exchange import exchange_counts, exchange_sorted

OVERSAMPLE = 32          # keys per rank allgathered to choose the sort splitters
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
MASK64 = (1 << 64) - 1


def require_mpi_h5py():
    """Raise a clear error if h5py is missing or lacks MPI support.

    h5py (with its HDF5 and MPI-IO libraries, ~12 MiB resident per rank) is imported here and in the functions
    that use it, not with this module: a run without output or checkpoints never loads it."""
    try:
        import h5py
    except ImportError:
        raise ImportError("h5py is not installed") from None
    if not h5py.get_config().mpi:
        raise ImportError("h5py was built without MPI support; on Debian install python3-h5py-mpi and set "
                          "H5PY_ALWAYS_USE_MPI=1 (source tools/env.sh)")


# ------------------------------------------------------------------------------------------------
# offsets, blocks
def exscan_offsets(comm, n):
    """(offset of this rank's first row, global number of rows) for ``n`` local rows in rank order."""
    from mpi4py import MPI
    n = int(n)
    off = comm.exscan(n, op=MPI.SUM)
    if comm.rank == 0 or off is None:
        off = 0
    total = comm.allreduce(n, op=MPI.SUM)
    return int(off), int(total)


def block_range(total, size, rank):
    """Rows ``[start, stop)`` of rank ``rank`` when ``total`` rows are split in contiguous blocks."""
    return (total * rank) // size, (total * (rank + 1)) // size


# ------------------------------------------------------------------------------------------------
# distributed sample sort
def sort_rows_by_key(comm, keys, rows):
    """Redistribute ``rows`` (float64, (m, w)) so that keys are globally sorted in rank order.

    Returns ``(keys_sorted, rows_sorted)`` on every rank.  Collective.  Keys must be int64 and should be
    unique (ties are kept together on one rank but their relative order follows the source ranks).
    """
    keys = np.ascontiguousarray(keys, dtype=np.int64).reshape(-1)
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    if rows.ndim == 1:
        rows = rows.reshape(-1, 1)
    if rows.ndim != 2 or rows.shape[0] != len(keys):
        raise ValueError(f"rows must have shape ({len(keys)}, w), got {rows.shape}")
    width = rows.shape[1]
    order = np.argsort(keys, kind="stable")
    keys, rows = keys[order], rows[order]
    P = comm.size
    if P == 1:
        return keys, rows
    m = len(keys)
    # weighted samples: each sample stands for m / k local rows, so ranks with many (or zero) rows are
    # represented in proportion and the buckets are balanced even for a skewed initial distribution.
    k = min(m, OVERSAMPLE)
    if k:
        pos = ((np.arange(k) + 0.5) * m / k).astype(np.int64)
        samp = keys[pos]
        wts = np.full(k, m / k)
    else:
        samp, wts = np.zeros(0, np.int64), np.zeros(0)
    all_s = comm.allgather((samp, wts))
    s = np.concatenate([a for a, _ in all_s])
    w = np.concatenate([b for _, b in all_s])
    total = w.sum()
    if len(s):
        o = np.argsort(s, kind="stable")
        s, cw = s[o], np.cumsum(w[o])
        targets = total * np.arange(1, P) / P
        idx = np.minimum(np.searchsorted(cw, targets, side="left"), len(s) - 1)
        splitters = s[idx]
    else:
        splitters = np.zeros(P - 1, np.int64)
    dest = np.searchsorted(splitters, keys, side="left")  # bucket r holds splitter[r-1] < key <= splitter[r]
    send_counts = np.bincount(dest, minlength=P).astype(np.int64)
    recv_counts = exchange_counts(send_counts, comm)
    # keys travel separately as int64 (exact for any value), rows as float64
    rkeys = exchange_sorted(keys.reshape(-1, 1), send_counts, recv_counts, comm).reshape(-1)
    rrows = exchange_sorted(rows, send_counts, recv_counts, comm)
    o = np.argsort(rkeys, kind="stable")
    return rkeys[o], rrows[o]


def check_unique_sorted(comm, keys_sorted, what="global id"):
    """After :func:`sort_rows_by_key`: return a description of a duplicate key, or None (collective)."""
    keys_sorted = np.asarray(keys_sorted)
    msg = None
    if len(keys_sorted) > 1:
        d = np.nonzero(np.diff(keys_sorted) == 0)[0]
        if len(d):
            msg = f"duplicate {what} {int(keys_sorted[d[0]])}"
    ends = comm.allgather((int(keys_sorted[0]), int(keys_sorted[-1])) if len(keys_sorted) else None)
    msgs = comm.allgather(msg)
    for m_ in msgs:
        if m_:
            return m_
    last = None
    for e in ends:
        if e is None:
            continue
        if last is not None and e[0] <= last:
            return f"duplicate {what} {e[0]}"
        last = e[1]
    return None


# ------------------------------------------------------------------------------------------------
# zero-row safe dataset transfer
def _dxpl(collective):
    from h5py import h5fd, h5p
    plist = h5p.create(h5p.DATASET_XFER)
    if collective:
        plist.set_dxpl_mpio(h5fd.MPIO_COLLECTIVE)
    return plist


def is_mpio(dset):
    try:
        return dset.file.driver == "mpio"
    except Exception:  # pragma: no cover
        return False


def write_rows(dset, start, data, collective=True):
    """Write ``data`` into rows ``[start, start + len(data))`` of ``dset``.

    With ``collective=True`` (and an mpio file) every rank of the file's communicator must call this,
    including ranks with ``len(data) == 0`` (they take part with empty selections; see module notes).
    """
    trailing = tuple(dset.shape[1:])
    data = np.ascontiguousarray(data, dtype=dset.dtype).reshape((-1,) + trailing)
    n = data.shape[0]
    collective = collective and is_mpio(dset)
    if n == 0 and not collective:
        return
    from h5py import h5s
    fspace = dset.id.get_space()
    if n:
        if start < 0 or start + n > dset.shape[0]:
            raise IndexError(f"rows [{start}, {start + n}) outside dataset {dset.name} of {dset.shape[0]} rows")
        fspace.select_hyperslab((int(start),) + (0,) * len(trailing), (n,) + trailing)
        mem = data
        mspace = h5s.create_simple(mem.shape)
    else:
        fspace.select_none()
        mem = np.zeros((1,) + trailing, dtype=dset.dtype)
        mspace = h5s.create_simple(mem.shape)
        mspace.select_none()
    dset.id.write(mspace, fspace, mem, dxpl=_dxpl(collective))


def read_rows(dset, start, stop, collective=False):
    """Rows ``[start, stop)`` of ``dset`` as a numpy array (zero-row safe in collective mode too)."""
    trailing = tuple(dset.shape[1:])
    n = int(stop) - int(start)
    collective = collective and is_mpio(dset)
    out = np.empty((max(n, 0),) + trailing, dtype=dset.dtype)
    if n <= 0 and not collective:
        return out
    from h5py import h5s
    fspace = dset.id.get_space()
    if n > 0:
        fspace.select_hyperslab((int(start),) + (0,) * len(trailing), (n,) + trailing)
        mem = out
    else:
        fspace.select_none()
        mem = np.zeros((1,) + trailing, dtype=dset.dtype)
    mspace = h5s.create_simple(mem.shape)
    if n <= 0:
        mspace.select_none()
    dset.id.read(mspace, fspace, mem, dxpl=_dxpl(collective))
    return out


# ------------------------------------------------------------------------------------------------
# checksums
def _mix(z):
    z = z ^ (z >> _S30)
    z = z * _M1
    z = z ^ (z >> _S27)
    z = z * _M2
    return z ^ (z >> _S31)


def name_salt(name):
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


def partial_checksum(arr, row_offset, salt):
    """Sum mod 2**64 of the mixed words of ``arr`` (rows starting at global row ``row_offset``)."""
    arr = np.ascontiguousarray(arr)
    if arr.dtype.itemsize != 8:
        raise TypeError(f"checksums need 8-byte dtypes, got {arr.dtype}")
    n = arr.shape[0] if arr.ndim else 1
    if arr.size == 0:
        return 0
    words = arr.reshape(n, -1).view(np.uint64)
    w = words.shape[1]
    with np.errstate(over="ignore"):
        k = (np.uint64(row_offset) + np.arange(n, dtype=np.uint64))[:, None] * np.uint64(w) \
            + np.arange(w, dtype=np.uint64)[None, :]
        h = _mix(words ^ _mix(k ^ np.uint64(salt)))
        s = h.sum(dtype=np.uint64)
    return int(s)


def combine_checksums(parts):
    """Sum of partial checksums modulo 2**64."""
    return sum(int(p) for p in parts) & MASK64


def distributed_checksum(comm, arr, row_offset, name):
    """Checksum of a distributed dataset (rows in rank order starting at ``row_offset``), collective."""
    return combine_checksums(comm.allgather(partial_checksum(arr, row_offset, name_salt(name))))


def checksum_hex(value):
    return f"{int(value) & MASK64:016x}"


def serial_dataset_checksum(dset, name, block_rows=1 << 16):
    """Checksum of a whole dataset read in blocks by one process (for verification tools)."""
    total, salt, n = 0, name_salt(name), dset.shape[0]
    for a in range(0, n, block_rows):
        b = min(n, a + block_rows)
        total += partial_checksum(dset[a:b], a, salt)
    return total & MASK64


def agree(comm, exc, make_error):
    """Collective error agreement (:func:`relcp_mpi.parallel.errors.agree`): if any rank has a non-None
    ``exc`` raise ``make_error(message)`` on all ranks.  The message is the lowest failing rank's (suffixed
    with that rank when the communicator has several)."""
    def make(messages):
        r, m = first_message(messages)
        return make_error(m if comm.size == 1 else f"{m} (reported by rank {r})")
    agree_all(comm, exc, make)
