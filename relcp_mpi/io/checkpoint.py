"""Atomic, checksummed parallel checkpoints (restart on any rank count).

File layout (format ``relcp_mpi-checkpoint``, ``format_version`` 1)::

    /                   attrs: format, format_version, code_version, checksum (sha256 hex),
                               checksum_algo, meta_json (all metadata as one JSON string),
                               step, time, dt, n_bodies, n_warm (copies for h5dump/h5ls users)
    /bodies/<field>     one dataset per BodyStore FIELD, N rows in increasing global-id order;
                        integer fields stored as int64, floating fields as float64;
                        attr checksum (16 hex digits, see h5util)
    /warm/<column>      warm-start table: gid_i, gid_j, sub (int64), gamma (float64) and any
                        extra columns the caller passes; rows in writer rank order; attr checksum

Global-id order is produced by a distributed sample sort (:func:`relcp_mpi.io.h5util.sort_rows_by_key`):
no rank gathers all bodies.  The file checksum is the SHA-256 of ``meta_json`` and every dataset's
name, shape and 64-bit word checksum; each dataset checksum is independent of the rank count, so a file
written on P ranks verifies on any number of readers.

Whole-file checksum (trailer): after the HDF5 file is closed, rank 0 appends ONE fixed-length line
``#relcp_mpi-checkpoint-sha256:<64 hex>:<20-digit length>`` (:data:`TRAILER_LEN` bytes) holding the SHA-256
and the length of every byte before it; HDF5 ignores bytes after its end-of-file address.  The trailer is
appended to the temporary file, so it is renamed (atomically) together with the data.  Every reader
(:func:`read_checkpoint`, :func:`verify_checkpoint`, :func:`latest_checkpoint`, ``relcp-mpi info``) checks
it on ONE process (:func:`verify_file_checksum`) before HDF5 parses anything: a damaged checkpoint is
refused without the HDF5 library ever reading it (damaged HDF5 metadata can crash, hang or make the
library allocate without bound).  Files written before the trailer existed (no trailer; a trailer that
is merely damaged is recognised as one and refused) are still read, with the older checks only: the
structural preflight, size sanity checks of every count against the file size before anything is
allocated, and the per-dataset and metadata checksums.  Parsing a *damaged* legacy file is up to the
HDF5 library; only files with a trailer are protected from that.

Atomicity: the file is written to ``path + '.tmp'``, flushed and closed collectively, fsynced by rank 0,
renamed onto ``path`` by rank 0 (``os.replace``; the directory is fsynced too), and only then are older
checkpoints of the same prefix removed (retention ``keep``).  A job killed at any moment therefore
leaves the previous checkpoint intact; a stale ``.tmp`` is ignored by :func:`latest_checkpoint` and
overwritten by the next write.

Naming: ``<prefix>_<step:09d>.h5`` (:func:`checkpoint_path`).  Retention only applies to paths of that
form.

Reading (:func:`read_checkpoint`): rank 0 first checks the file serially (exists, is HDF5, not
truncated, format/version, every dataset and attribute present, consistent lengths) and broadcasts the
verdict, so every rank raises the same :class:`CheckpointError` without touching collective HDF5 calls.
Then all ranks open the file with the mpio driver, each reads a contiguous block of rows
(``[N r / P, N (r+1) / P)``) with independent I/O, the checksums are verified collectively, and the
bodies come back as a :class:`BodyStore` in global-id order (the caller migrates them to their owners).
Nothing is ever written while reading.

Metadata: ``meta`` is taken from rank 0 (all ranks must pass the same).  Required keys: ``step`` (int),
``time``, ``dt``.  Added automatically when absent: ``code_version``, ``next_gid`` (max gid + 1),
``n_ranks_written``.  Conventional keys: ``deck`` (YAML text), ``seed``, ``decomposition`` (str/json).
Any other JSON-able values are stored too (numpy scalars/arrays are converted to Python numbers/lists).
Floats survive the JSON round trip exactly.
"""
import hashlib
import json
import os
import re
import time as _time

import numpy as np

from relcp_mpi import __version__
from relcp_mpi.bodies.store import FIELDS, BodyStore

# body fields added after checkpoints were first written: a checkpoint without them is read with this value
# (``gen``, the cell generation, arrived with the realistic colony model; older files have only generation 0)
OPTIONAL_BODY_FIELDS = {"gen": 0}
from relcp_mpi.io import h5util as hu
from relcp_mpi.io.writeguard import OutputError, WriteGuard, describe_oserror, guarded_dataset, inject

FORMAT = "relcp_mpi-checkpoint"
FORMAT_VERSION = 1
CHECKSUM_ALGO = "relcp-splitmix64-sum+sha256/v1"
WARM_COLUMNS = {"gid_i": np.int64, "gid_j": np.int64, "sub": np.int64, "gamma": np.float64}
_NAME_RE = re.compile(r"^(?P<prefix>.*)_(?P<step>\d{9})\.h5$")

# whole-file trailer (see the module docstring)
TRAILER_MAGIC = b"\n#relcp_mpi-checkpoint-sha256:"
TRAILER_LEN = len(TRAILER_MAGIC) + 64 + 1 + 20 + 1
_HASH_CHUNK = 1 << 22
_TAIL_SCAN = 1 << 16          # a trailer anywhere in the last 64 KiB marks a file as written with one

# test hook: seconds to sleep after the data is written and before the file is closed/renamed
_DELAY_ENV = "RELCP_CHECKPOINT_TEST_DELAY"


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written, read or used; the message names the file and the problem."""


# ------------------------------------------------------------------------------------------------
# names
def checkpoint_path(prefix, step):
    """``<prefix>_<step:09d>.h5``."""
    return f"{prefix}_{int(step):09d}.h5"


def _list_checkpoints(directory, prefix=None):
    """[(step, path)] of checkpoint files in ``directory`` (optionally with a given basename prefix)."""
    out = []
    try:
        names = os.listdir(directory or ".")
    except FileNotFoundError:
        return out
    for nm in names:
        m = _NAME_RE.match(nm)
        if not m:
            continue
        if prefix is not None and m.group("prefix") != prefix:
            continue
        out.append((int(m.group("step")), os.path.join(directory, nm)))
    out.sort()
    return out


def latest_checkpoint(directory_or_prefix, valid_only=False):
    """Path of the checkpoint with the highest step, or None.

    ``directory_or_prefix`` is either a directory (any ``*_<9 digits>.h5`` inside) or a prefix
    ``dir/name`` (files ``dir/name_<9 digits>.h5``).  ``.tmp`` files are never returned.  With
    ``valid_only=True`` files that fail :func:`verify_checkpoint` are skipped (serial read of each
    candidate, newest first; call it on one rank and broadcast the answer)."""
    p = str(directory_or_prefix)
    if os.path.isdir(p):
        cands = _list_checkpoints(p)
    else:
        cands = _list_checkpoints(os.path.dirname(p), os.path.basename(p))
    for _, path in reversed(cands):
        if not valid_only:
            return path
        try:
            verify_checkpoint(path)
            return path
        except CheckpointError:
            continue
    return None


# ------------------------------------------------------------------------------------------------
# json helpers
def _jsonable(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"value of type {type(o).__name__} is not JSON-serialisable")


def _storage_dtype(dtype):
    return np.int64 if np.issubdtype(np.dtype(dtype), np.integer) else np.float64


def _field_width(tshape):
    return int(np.prod(tshape)) if tshape else 1


def _bodies_to_columns(bodies):
    """(gid int64, float64 rows of all fields in FIELDS order, exact).

    Same column layout as ``BodyStore.pack`` but also correct for an empty store (``pack`` reshapes with
    ``-1``, which numpy rejects for zero rows) and without the float64 round trip of the gid."""
    n = bodies.n
    if n and np.abs(bodies.gid).max() >= 2 ** 53:
        raise OverflowError("global ids must be < 2**53")
    cols = [np.asarray(getattr(bodies, f)).reshape(n, _field_width(t)).astype(np.float64)
            for f, (_, t) in FIELDS.items()]
    return np.asarray(bodies.gid, dtype=np.int64), np.concatenate(cols, axis=1)


def _columns_to_fields(rows):
    """Dict name -> storage array (int64/float64) from packed rows."""
    out, c = {}, 0
    for name, (dtype, tshape) in FIELDS.items():
        w = _field_width(tshape)
        col = rows[:, c:c + w]
        sd = _storage_dtype(dtype)
        if sd is np.int64:
            col = np.rint(col).astype(np.int64)
        out[name] = np.ascontiguousarray(col.reshape((-1,) + tuple(tshape)), dtype=sd)
        c += w
    return out


def _file_checksum(meta_json, dset_sums):
    """sha256 over the metadata and every (name, shape, dataset checksum), names sorted."""
    h = hashlib.sha256()
    h.update(meta_json.encode("utf-8"))
    for name in sorted(dset_sums):
        shape, val = dset_sums[name]
        h.update(f"\n{name}:{tuple(int(s) for s in shape)}:{hu.checksum_hex(val)}".encode())
    return h.hexdigest()


def _sha256_prefix(fh, n):
    """SHA-256 of the first ``n`` bytes of an open binary file (read in chunks)."""
    h = hashlib.sha256()
    fh.seek(0)
    left = n
    while left > 0:
        chunk = fh.read(min(_HASH_CHUNK, left))
        if not chunk:
            raise OSError(f"file ended {left} bytes early")
        h.update(chunk)
        left -= len(chunk)
    return h.hexdigest()


def _append_trailer(path):
    """Append the whole-file checksum trailer to the closed file ``path`` and fsync it (one process)."""
    with open(path, "r+b") as fh:
        fh.seek(0, os.SEEK_END)
        n = fh.tell()
        digest = _sha256_prefix(fh, n)
        fh.seek(n)
        fh.write(TRAILER_MAGIC + digest.encode("ascii") + b":" + f"{n:020d}".encode("ascii") + b"\n")
        fh.flush()
        os.fsync(fh.fileno())


def _looks_like_trailer(tail):
    """True if the last TRAILER_LEN bytes are (possibly a damaged copy of) a trailer: most of the fixed
    magic bytes in place.  A single damaged byte must not make a new file pass for a legacy one."""
    if len(tail) != TRAILER_LEN:
        return False
    same = sum(a == b for a, b in zip(tail[:len(TRAILER_MAGIC)], TRAILER_MAGIC))
    return same >= len(TRAILER_MAGIC) // 2


def _cut_trailer(tail):
    """True if the file ends inside a trailer (the start of TRAILER_MAGIC, possibly followed by part of the
    digest): a truncated new file, not a legacy one."""
    pos = tail.find(TRAILER_MAGIC[:3])
    while pos >= 0:
        rest = tail[pos:]
        k = min(len(rest), len(TRAILER_MAGIC))
        if rest[:k] == TRAILER_MAGIC[:k]:
            return True
        pos = tail.find(TRAILER_MAGIC[:3], pos + 1)
    return False


def verify_file_checksum(path):
    """Check the whole-file trailer of a checkpoint, reading the file as plain bytes (no HDF5).

    Returns True when the trailer is present and matches, False when the file has no trailer (written
    before it existed); raises :class:`CheckpointError` naming the file when the trailer is damaged or the
    file's bytes do not match it (damaged, truncated or appended to)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            fh.seek(max(size - _TAIL_SCAN, 0))
            scan = fh.read(_TAIL_SCAN)
            tail = scan[-TRAILER_LEN:]
            if not _looks_like_trailer(tail):
                if _cut_trailer(tail) or TRAILER_MAGIC[2:] in scan:
                    raise CheckpointError(f"checkpoint {path}: whole-file checksum trailer is cut short or not at "
                                          f"the end of the file (file truncated or appended to)")
                return False
            m = re.fullmatch(rb"\n#relcp_mpi-checkpoint-sha256:([0-9a-f]{64}):([0-9]{20})\n", tail)
            if m is None:
                raise CheckpointError(f"checkpoint {path}: whole-file checksum trailer is damaged (file damaged)")
            n = int(m.group(2))
            if n != size - TRAILER_LEN:
                raise CheckpointError(f"checkpoint {path}: file has {size - TRAILER_LEN} bytes before its "
                                      f"checksum trailer, the trailer says {n} (file damaged)")
            got = _sha256_prefix(fh, n)
    except OSError as e:
        raise CheckpointError(f"checkpoint {path}: cannot be read: {e.strerror or e}") from e
    if got != m.group(1).decode("ascii"):
        raise CheckpointError(f"checkpoint {path}: whole-file checksum mismatch (sha256 stored "
                              f"{m.group(1).decode()[:16]}..., computed {got[:16]}...): file damaged")
    return True


def _fsync_path(path, directory=False):
    flags = os.O_RDONLY
    if directory:
        flags |= getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------------
# writing
def write_checkpoint(path, comm, bodies, meta, warm=None, keep=3, _hook=None):
    """Write a checkpoint collectively and atomically; returns ``path`` on every rank.

    ``bodies``: this rank's BodyStore (any subset, any order, possibly empty).  ``meta``: dict (see module
    docstring; rank 0's copy is used).  ``warm``: dict of equal-length 1-D arrays with at least
    gid_i, gid_j, sub, gamma (or None for an empty table).  ``keep``: keep the newest ``keep``
    checkpoints ``<prefix>_<step>.h5`` (None or 0: keep all).  ``_hook(stage)`` (tests) is called on
    every rank with 'data-written' before the temporary file is closed.  Raises CheckpointError on all
    ranks if any rank's input is invalid (nothing is renamed in that case)."""
    import h5py
    hu.require_mpi_h5py()
    path = os.fspath(path)
    tmp = path + ".tmp"

    # -- 1. validate input, sort bodies into global-id order, checksums (no file open yet) ------
    err, prepared = None, None
    try:
        if not isinstance(bodies, BodyStore):
            raise TypeError(f"bodies must be a BodyStore, got {type(bodies).__name__}")
        keys, rows = _bodies_to_columns(bodies)
    except Exception as e:  # noqa: BLE001 - reported collectively
        err, keys, rows = e, np.zeros(0, np.int64), np.zeros((0, sum(_field_width(t) for _, t in FIELDS.values())))
    hu.agree(comm, err, lambda m: CheckpointError(f"cannot write checkpoint {path}: {m}"))

    keys, rows = hu.sort_rows_by_key(comm, keys, rows)
    dup = hu.check_unique_sorted(comm, keys)
    if dup:
        raise CheckpointError(f"cannot write checkpoint {path}: {dup} (global ids must be unique)")
    off, nbod = hu.exscan_offsets(comm, len(keys))
    fields = _columns_to_fields(rows)

    # warm-start table
    err = None
    warm_cols = {}
    try:
        warm_cols = _prepare_warm(warm)
    except Exception as e:  # noqa: BLE001
        err = e
    hu.agree(comm, err, lambda m: CheckpointError(f"cannot write checkpoint {path}: warm-start table: {m}"))
    names0 = comm.bcast(sorted(warm_cols) if comm.rank == 0 else None, root=0)
    err = None if sorted(warm_cols) == names0 else ValueError(
        f"warm-start columns {sorted(warm_cols)} differ from rank 0's {names0}")
    hu.agree(comm, err, lambda m: CheckpointError(f"cannot write checkpoint {path}: {m}"))
    nw_local = len(next(iter(warm_cols.values()))) if warm_cols else 0
    woff, nwarm = hu.exscan_offsets(comm, nw_local)

    # metadata (rank 0's)
    from mpi4py import MPI
    gmax = comm.allreduce(int(keys.max()) if len(keys) else -1, op=MPI.MAX)
    err, meta_json = None, None
    if comm.rank == 0:
        try:
            meta_json = _make_meta_json(meta, nbod, nwarm, gmax, comm.size)
        except Exception as e:  # noqa: BLE001
            err = e
    err = comm.bcast(None if err is None else str(err), root=0)
    if err:
        raise CheckpointError(f"cannot write checkpoint {path}: metadata: {err}")
    meta_json = comm.bcast(meta_json, root=0)
    md = json.loads(meta_json)

    sums = {}
    for name, arr in fields.items():
        sums[f"bodies/{name}"] = (arr.shape[1:], hu.distributed_checksum(comm, arr, off, f"bodies/{name}"))
    for name, arr in warm_cols.items():
        sums[f"warm/{name}"] = (arr.shape[1:], hu.distributed_checksum(comm, arr, woff, f"warm/{name}"))
    # full shapes for the file checksum
    dset_sums = {}
    for name, (tshape, val) in sums.items():
        n0 = nbod if name.startswith("bodies/") else nwarm
        dset_sums[name] = ((n0,) + tuple(tshape), val)
    fsum = _file_checksum(meta_json, dset_sums)

    # -- 2. write the temporary file ------------------------------------------------------------
    d = os.path.dirname(os.path.abspath(path))
    ok = 1
    if comm.rank == 0:
        try:
            os.makedirs(d, exist_ok=True)
        except OSError:
            ok = 0
    if not comm.bcast(ok, root=0):
        raise CheckpointError(f"cannot write checkpoint {path}: cannot create directory {d}")
    try:
        f = h5py.File(tmp, "w", driver="mpio", comm=comm)
    except Exception as e:  # collective open failed on all ranks
        raise CheckpointError(f"cannot write checkpoint {path}: cannot create {tmp}: {e}") from e
    # every HDF5 call in a guard step: an OSError (full disk, EIO, ...) on one rank is recorded and agreed
    # on after the close, so all ranks keep making the same collective calls (relcp_mpi.io.writeguard)
    guard = WriteGuard(comm, f"checkpoint file {tmp}", path=tmp)
    with guard.step():
        f.attrs["format"] = FORMAT
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["code_version"] = __version__
        f.attrs["checksum_algo"] = CHECKSUM_ALGO
        f.attrs["meta_json"] = meta_json
        f.attrs["step"] = int(md["step"])
        f.attrs["time"] = float(md["time"])
        f.attrs["dt"] = float(md["dt"])
        f.attrs["n_bodies"] = nbod
        f.attrs["n_warm"] = nwarm
        gb = f.create_group("bodies")
        gw = f.create_group("warm")
    for grp_name, cols, o, ntot in (("bodies", fields, off, nbod), ("warm", warm_cols, woff, nwarm)):
        for name in (FIELDS if grp_name == "bodies" else sorted(cols)):
            arr = cols[name]
            guarded_dataset(guard, gb if grp_name == "bodies" else gw, name, arr, ntot, o,
                            attrs={"checksum": hu.checksum_hex(sums[f"{grp_name}/{name}"][1])},
                            inject_point="checkpoint" if name == "x" else None)
    with guard.step():
        f.flush()
    if _hook is not None:
        _hook("data-written")
    delay = float(os.environ.get(_DELAY_ENV, "0") or 0)
    if delay > 0:
        _time.sleep(delay)
    with guard.step():
        f.attrs["checksum"] = fsum       # written last: a file without it is incomplete
    with guard.step():
        f.close()
    try:
        guard.agree()
    except OutputError as err:
        if comm.rank == 0:
            _remove_quietly(tmp)         # free the space; the previous checkpoints are untouched
        guard.done()
        raise CheckpointError(str(err)) from err

    # -- 3. whole-file checksum trailer, durable rename, then retention --------------------------
    err = None
    if comm.rank == 0:
        try:
            inject("checkpoint-trailer", comm.rank)
            _append_trailer(tmp)         # also fsyncs the file
        except Exception as e:  # noqa: BLE001
            err = describe_oserror(e)
            _remove_quietly(tmp)
    err = comm.bcast(None if err is None else str(err), root=0)
    if err:
        raise CheckpointError(f"cannot write checkpoint {path}: checksum trailer of {tmp}: {err}")
    if comm.rank == 0:
        try:
            os.replace(tmp, path)
            _fsync_path(d, directory=True)
        except Exception as e:  # noqa: BLE001
            err = e
    err = comm.bcast(None if err is None else str(err), root=0)
    if err:
        raise CheckpointError(f"cannot write checkpoint {path}: rename of {tmp} failed: {err}")
    if comm.rank == 0 and keep:
        _apply_retention(path, int(keep))
    comm.Barrier()
    return path


def _remove_quietly(path):
    try:
        os.remove(path)
    except OSError:
        pass


def _prepare_warm(warm):
    if warm is None:
        return {k: np.zeros(0, dtype=v) for k, v in WARM_COLUMNS.items()}
    missing = [k for k in WARM_COLUMNS if k not in warm]
    if missing:
        raise KeyError(f"missing columns {missing}")
    cols = {}
    for k, v in warm.items():
        a = np.asarray(v)
        if a.dtype.kind not in "biuf":
            raise TypeError(f"column {k!r} has non-numeric dtype {a.dtype}")
        sd = WARM_COLUMNS.get(k, np.int64 if a.dtype.kind in "biu" else np.float64)
        if np.dtype(sd) == np.int64 and a.dtype.kind == "f":
            raise TypeError(f"column {k!r} must be integer, got {a.dtype}")
        cols[k] = np.ascontiguousarray(a, dtype=sd)
    lens = {k: len(a) for k, a in cols.items()}
    if len(set(lens.values())) > 1:
        raise ValueError(f"columns have different lengths {lens}")
    return cols


def _make_meta_json(meta, nbod, nwarm, gmax, nranks):
    meta = dict(meta or {})
    for k in ("step", "time", "dt"):
        if k not in meta:
            raise KeyError(f"required key {k!r} missing")
    step = meta["step"]
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"'step' must be an integer, got {step!r}")
    meta["step"] = int(step)
    meta.setdefault("code_version", __version__)
    meta.setdefault("next_gid", int(gmax) + 1)
    meta["n_ranks_written"] = int(nranks)
    meta["n_bodies"] = int(nbod)
    meta["n_warm"] = int(nwarm)
    meta["format_version"] = FORMAT_VERSION
    return json.dumps(meta, default=_jsonable, sort_keys=True, allow_nan=True)


def _apply_retention(path, keep):
    """Delete all but the newest ``keep`` checkpoints with the prefix of ``path`` (never ``path``)."""
    m = _NAME_RE.match(os.path.basename(path))
    if not m:
        return
    cands = _list_checkpoints(os.path.dirname(path) or ".", m.group("prefix"))
    me = os.path.abspath(path)
    for _, p in cands[:-keep] if keep < len(cands) else []:
        if os.path.abspath(p) == me:
            continue
        try:
            os.remove(p)
        except OSError:
            pass


# ------------------------------------------------------------------------------------------------
# reading
def _preflight(path, strict_version=False):
    """Serial structural check; returns info dict or raises CheckpointError (no data is read)."""
    import h5py
    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint {path}: file does not exist")
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path}: not a regular file")
    has_trailer = verify_file_checksum(path)      # before HDF5 reads a single byte
    try:
        is_h5 = h5py.is_hdf5(path)
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"checkpoint {path}: cannot be read: {e}") from e
    if not is_h5:
        raise CheckpointError(f"checkpoint {path}: not an HDF5 file")
    try:
        f = h5py.File(path, "r")
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"checkpoint {path}: cannot open HDF5 file (truncated or damaged?): {e}") from e
    try:
        info = _inspect(f, path, strict_version, os.path.getsize(path))
        info["whole_file_checksum"] = has_trailer
        return info
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"checkpoint {path}: damaged file: {type(e).__name__}: {e}") from e
    finally:
        f.close()


def _inspect(f, path, strict_version=False, file_size=None):
    """Structure, sizes and metadata checksum of an open checkpoint (no dataset is read).  Every size the
    file declares (attribute lengths, dataset shapes, counts in the metadata) is checked against
    ``file_size`` before anything of that size is read or allocated."""
    import h5py
    attrs = f.attrs
    limit = file_size if file_size is not None else os.path.getsize(path)
    for a in ("format", "meta_json", "checksum", "code_version"):
        if a in attrs:
            nbytes = attrs.get_id(a).get_storage_size()
            if nbytes > limit:
                raise CheckpointError(f"checkpoint {path}: attribute '/{a}' claims {nbytes} bytes, more than the "
                                      f"file's {limit} (file damaged)")
    for a in ("format", "format_version", "meta_json", "checksum"):
        if a not in attrs:
            hint = " (incomplete write?)" if a == "checksum" else ""
            raise CheckpointError(f"checkpoint {path}: missing attribute '/{a}'{hint}")
    fmt = _s(attrs["format"])
    if fmt != FORMAT:
        raise CheckpointError(f"checkpoint {path}: format is {fmt!r}, expected {FORMAT!r}")
    fv = int(attrs["format_version"])
    if fv != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {path}: format_version {fv} is not supported "
                              f"(this is relcp_mpi {__version__}, format_version {FORMAT_VERSION})")
    cv = _s(attrs.get("code_version", "?"))
    if strict_version and cv != __version__:
        raise CheckpointError(f"checkpoint {path}: written by relcp_mpi {cv}, this is {__version__}")
    meta_json = _s(attrs["meta_json"])
    try:
        meta = json.loads(meta_json)
    except ValueError as e:
        raise CheckpointError(f"checkpoint {path}: attribute '/meta_json' is not valid JSON: {e}") from e
    for k in ("step", "time", "dt"):
        if k not in meta:
            raise CheckpointError(f"checkpoint {path}: metadata key {k!r} missing")
    info = {"meta_json": meta_json, "meta": meta, "checksum": _s(attrs["checksum"]), "code_version": cv,
            "datasets": {}}
    for grp, names in (("bodies", [c for c in FIELDS if c not in OPTIONAL_BODY_FIELDS or f"bodies/{c}" in f]),
                       ("warm", None)):
        if grp not in f:
            raise CheckpointError(f"checkpoint {path}: missing group '/{grp}'")
        g = f[grp]
        if names is None:
            names = sorted(g.keys())
            miss = [c for c in WARM_COLUMNS if c not in g]
            if miss:
                raise CheckpointError(f"checkpoint {path}: missing dataset '/warm/{miss[0]}'")
        lens = set()
        for nm in names:
            if nm not in g:
                raise CheckpointError(f"checkpoint {path}: missing dataset '/{grp}/{nm}'")
            ds = g[nm]
            if not isinstance(ds, h5py.Dataset):
                raise CheckpointError(f"checkpoint {path}: '/{grp}/{nm}' is not a dataset")
            if "checksum" not in ds.attrs:
                raise CheckpointError(f"checkpoint {path}: missing attribute 'checksum' on '/{grp}/{nm}'")
            if grp == "bodies":
                dt, tshape = FIELDS[nm]
                if tuple(ds.shape[1:]) != tuple(tshape):
                    raise CheckpointError(f"checkpoint {path}: dataset '/bodies/{nm}' has shape {ds.shape}, "
                                          f"expected (N,)+{tuple(tshape)}")
            if ds.dtype.itemsize != 8:
                raise CheckpointError(f"checkpoint {path}: dataset '/{grp}/{nm}' has dtype {ds.dtype}")
            if ds.ndim < 1 or any(int(d) < 0 for d in ds.shape) or \
                    int(np.prod(ds.shape, dtype=object)) * 8 > limit:
                raise CheckpointError(f"checkpoint {path}: dataset '/{grp}/{nm}' claims shape {ds.shape}, more "
                                      f"data than the file's {limit} bytes (file damaged)")
            lens.add(ds.shape[0])
            info["datasets"][f"{grp}/{nm}"] = (tuple(ds.shape), _s(ds.attrs["checksum"]), ds.dtype.str)
        if len(lens) > 1:
            raise CheckpointError(f"checkpoint {path}: datasets in '/{grp}' have different lengths {sorted(lens)}")
        info["n_" + grp] = lens.pop() if lens else 0
    for key in ("bodies", "warm"):
        if info["n_" + key] != meta.get("n_" + key, info["n_" + key]):
            raise CheckpointError(f"checkpoint {path}: metadata says {meta.get('n_' + key)} {key} rows, "
                                  f"datasets hold {info['n_' + key]}")
    _check_meta_sizes(meta, info["n_bodies"], path)
    # the file checksum binds the metadata and the per-dataset checksums together
    dset_sums = {k: (shape, int(h, 16)) for k, (shape, h, _) in info["datasets"].items()}
    if _file_checksum(meta_json, dset_sums) != info["checksum"]:
        raise CheckpointError(f"checkpoint {path}: checksum mismatch in the metadata/checksum attributes "
                              "(file damaged or modified)")
    return info


def _check_meta_sizes(meta, n_bodies, path):
    """Counts in the metadata that a restart uses to size arrays or loops: plausible values only."""
    def bad(key, why):
        raise CheckpointError(f"checkpoint {path}: metadata '{key}' {why} (file damaged?)")
    step = meta.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2 ** 32:
        bad("step", f"is {step!r}, not an integer in [0, 2**32)")
    for key in ("time", "dt"):
        v = meta.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
            bad(key, f"is {v!r}, not a finite number")
    nr = meta.get("n_ranks_written")
    if nr is not None and (isinstance(nr, bool) or not isinstance(nr, int) or not 1 <= nr <= 2 ** 24):
        bad("n_ranks_written", f"is {nr!r}")
    rs = meta.get("row_starts")
    if rs is not None:
        if not isinstance(rs, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in rs) \
                or (nr is not None and len(rs) != nr + 1) or any(b < a for a, b in zip(rs, rs[1:])) \
                or (rs and (rs[0] < 0 or rs[-1] > n_bodies)):
            bad("row_starts", "is not a non-decreasing list of n_ranks_written + 1 row offsets")
    ng = meta.get("next_gid")
    if ng is not None and (isinstance(ng, bool) or not isinstance(ng, int) or not 0 <= ng < 2 ** 53):
        bad("next_gid", f"is {ng!r}")
    rcb = meta.get("rcb")
    if rcb is not None and not isinstance(rcb, dict):
        bad("rcb", "is not a mapping")


def _s(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def verify_checkpoint(path):
    """Serial full verification (structure + every dataset checksum).  Returns the metadata dict."""
    import h5py
    info = _preflight(path)
    try:
        with h5py.File(path, "r") as f:
            for name, (shape, h, _) in info["datasets"].items():
                got = hu.serial_dataset_checksum(f[name], name)
                if hu.checksum_hex(got) != h:
                    raise CheckpointError(f"checkpoint {path}: checksum mismatch in dataset '/{name}' "
                                          f"(stored {h}, computed {hu.checksum_hex(got)})")
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"checkpoint {path}: cannot read data: {e}") from e
    return info["meta"]


def read_checkpoint(path, comm, strict_version=False):
    """Read a checkpoint collectively on any number of ranks.

    Returns ``(bodies_local, meta, warm)``: rank r holds the contiguous block ``[N r/P, N (r+1)/P)`` of
    the bodies in increasing global-id order (FIELDS dtypes) and the same block split of the warm-start
    table (dict of 1-D arrays).  Raises :class:`CheckpointError` on every rank when the file is missing,
    not HDF5, truncated, incomplete, of another format/version, or fails its checksums.
    ``strict_version=True`` also rejects files written by another relcp_mpi version."""
    import h5py
    hu.require_mpi_h5py()
    path = os.fspath(path)
    info, err = None, None
    if comm.rank == 0:
        try:
            info = _preflight(path, strict_version)
        except CheckpointError as e:
            err = str(e)
    err = comm.bcast(err, root=0)
    if err:
        raise CheckpointError(err)
    info = comm.bcast(info, root=0)

    nb, nw = info["n_bodies"], info["n_warm"]
    b0, b1 = hu.block_range(nb, comm.size, comm.rank)
    w0, w1 = hu.block_range(nw, comm.size, comm.rank)
    data, err = {}, None
    try:
        f = h5py.File(path, "r", driver="mpio", comm=comm)
    except Exception as e:  # noqa: BLE001
        f, err = None, e
    hu.agree(comm, err, lambda m: CheckpointError(f"checkpoint {path}: cannot open with MPI-IO: {m}"))
    try:
        for name in info["datasets"]:
            a, b = (b0, b1) if name.startswith("bodies/") else (w0, w1)
            data[name] = hu.read_rows(f[name], a, b, collective=False)
    except Exception as e:  # noqa: BLE001
        err = e
    finally:
        f.close()
    hu.agree(comm, err, lambda m: CheckpointError(f"checkpoint {path}: cannot read data: {m}"))

    for name, arr in data.items():
        a = b0 if name.startswith("bodies/") else w0
        got = hu.distributed_checksum(comm, arr, a, name)
        want = info["datasets"][name][1]
        if hu.checksum_hex(got) != want:
            raise CheckpointError(f"checkpoint {path}: checksum mismatch in dataset '/{name}' "
                                  f"(stored {want}, computed {hu.checksum_hex(got)}): file damaged")

    nloc = b1 - b0
    bodies = BodyStore(**{nm: data[f"bodies/{nm}"].astype(FIELDS[nm][0]) if f"bodies/{nm}" in data
                          else np.full(nloc, OPTIONAL_BODY_FIELDS[nm], FIELDS[nm][0]) for nm in FIELDS})
    if bodies.n > 1 and np.any(np.diff(bodies.gid) <= 0):
        raise CheckpointError(f"checkpoint {path}: bodies are not in increasing global-id order")
    warm = {k[len("warm/"):]: v for k, v in data.items() if k.startswith("warm/")}
    return bodies, info["meta"], warm


# ------------------------------------------------------------------------------------------------
# compatibility with a deck
DEFAULT_COMPAT_KEYS = ("bodies", "generate", "box", "walls")


def check_compatible(meta, deck_dict, keys=DEFAULT_COMPAT_KEYS, path="checkpoint"):
    """Raise CheckpointError if the checkpoint's deck differs from ``deck_dict`` in ``keys``.

    ``meta['deck']`` is the deck text (YAML) or dict stored at write time.  ``keys`` are dotted paths of
    deck entries that must not change across a restart (default: the body lists/generators -- i.e. the
    body count and the shapes -- the box and the walls).  The message names the first differing key
    (as a dotted path with list indices, e.g. ``bodies[3].shape``) and both values.  If the meta holds
    ``n_bodies`` and the deck gives an explicit body list without generators, the count is checked too --
    unless the deck lets cells divide (any body or generator with ``divide_at`` > 0, see
    :func:`deck_has_division`): the body count of a growing colony changes during the run."""
    stored = meta.get("deck")
    if stored is None:
        raise CheckpointError(f"{path}: checkpoint holds no deck; cannot check compatibility")
    if isinstance(stored, str):
        import yaml
        try:
            stored = yaml.safe_load(stored)
        except yaml.YAMLError as e:
            raise CheckpointError(f"{path}: stored deck is not valid YAML: {e}") from e
    stored = stored or {}
    for key in keys:
        a, pa = _dig(stored, key)
        b, pb = _dig(deck_dict, key)
        if pa is False and pb is False:
            continue
        diff = _first_diff(a, b, key)
        if diff is not None:
            where, va, vb = diff
            raise CheckpointError(f"{path}: incompatible deck: key '{where}' differs "
                                  f"(checkpoint: {va!r}, deck: {vb!r})")
    n = meta.get("n_bodies")
    bl = deck_dict.get("bodies") if isinstance(deck_dict, dict) else None
    if n is not None and isinstance(bl, list) and not deck_dict.get("generate") and len(bl) != n \
            and not deck_has_division(deck_dict):
        raise CheckpointError(f"{path}: incompatible deck: key 'bodies' lists {len(bl)} bodies, "
                              f"checkpoint holds {n}")


def deck_has_division(deck_dict):
    """True if any entry of the deck's ``bodies`` or ``generate`` lists has cell division enabled
    (``divide_at`` a number > 0), i.e. the number of bodies can change during the run."""
    if not isinstance(deck_dict, dict):
        return False
    for section in ("bodies", "generate"):
        items = deck_dict.get(section)
        if not isinstance(items, list):
            continue
        for b in items:
            v = b.get("divide_at") if isinstance(b, dict) else None
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                return True
    return False


def _dig(d, dotted):
    cur = d
    for part in dotted.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return None, False
    return cur, True


def _first_diff(a, b, where):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            d = _first_diff(a.get(k), b.get(k), f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return (f"{where} (length)", len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            d = _first_diff(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return None if float(a) == float(b) else (where, a, b)
    return None if a == b else (where, a, b)
