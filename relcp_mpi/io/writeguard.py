"""Write failures (full disk, I/O error, quota, a vanished directory) during collective output: every rank
ends within seconds with one message naming the file and the OS error -- never a hang.

A failed write usually happens on ONE rank (an MPI-IO aggregator, or rank 0 writing a sidecar) while the
others succeed.  If that rank simply raised, the others would wait forever in the next collective call.
:class:`WriteGuard` wraps one collective output phase (a trajectory frame, a checkpoint file, ...):

* every operation of the phase runs inside ``guard.step(what)``; an exception there (h5py reports I/O
  errors as OSError or RuntimeError) is recorded (the first one per rank) instead of raised, so the rank
  keeps making the same sequence of calls as the others;
* :meth:`WriteGuard.agree` (every rank, end of the phase: one allreduce through
  :func:`relcp_mpi.parallel.errors.check_collective`) raises :class:`OutputError` on EVERY rank, with the
  same message, when any rank recorded a failure;
* a rank that recorded a failure arms a watchdog: if the phase does not reach the agreement within
  :func:`failure_timeout` seconds (another rank is stuck inside an HDF5/MPI-IO collective that cannot
  complete any more), the watchdog prints the message (the lowest failing rank first; the others are
  normally aborted before their turn) and aborts the job with ``MPI_Abort(1)``.
  :func:`close_after_failure` closes a file under the same watchdog.

Test hook (fault injection): ``RELCP_TEST_WRITE_FAILURE="<point>:<rank>:<ERRNO NAME>[:<skip>]"`` makes
:func:`inject` raise ``OSError(errno)`` once, the ``skip + 1``-th time the named point is reached on that
rank (points: ``frame``, ``frame-flush``, ``xdmf``, ``append``, ``checkpoint``, ``checkpoint-trailer``,
``reopen`` (closing the trajectory before its periodic reopening)).
"""
import errno as _errno
import os
import re
import sys
import threading

from relcp_mpi.parallel.errors import CollectiveError, check_collective

_TIMEOUT_ENV = "RELCP_WRITE_FAILURE_TIMEOUT"
_INJECT_ENV = "RELCP_TEST_WRITE_FAILURE"
_injected = {}          # point -> times reached on this rank


class OutputError(RuntimeError):
    """A write of the run's output failed (raised on every rank alike; the message names the file and the
    OS error).  Exit status 1."""


def failure_timeout():
    """Seconds a rank that failed to write waits for the others to agree before it aborts the job."""
    try:
        return max(0.5, float(os.environ.get(_TIMEOUT_ENV, "5")))
    except ValueError:
        return 5.0


def describe_oserror(exc):
    """'No space left on device (ENOSPC)' for an OSError; str(exc) for anything else."""
    if isinstance(exc, OSError) and exc.errno:
        name = _errno.errorcode.get(exc.errno, str(exc.errno))
        return f"{exc.strerror or os.strerror(exc.errno)} ({name})"
    if isinstance(exc, OSError):
        # h5py/HDF5 errors carry no errno; HDF5's sec2/MPI-IO messages name it: "errno = 28, error message
        # = 'No space left on device'"
        text = str(exc) or type(exc).__name__
        m = re.search(r"errno = (\d+), error message = '([^']*)'", text)
        if m:
            name = _errno.errorcode.get(int(m.group(1)), m.group(1))
            return f"{m.group(2)} ({name})"
        return text
    return f"{type(exc).__name__}: {exc}"


def diagnose_filesystem(path):
    """Why writing ``path`` may have failed when the library gave no OS error (MPI-IO reports 'other I/O
    error'): the directory is gone, or its file system is (nearly) full.  '' when nothing is found."""
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        return f"; directory {d} no longer exists: {os.strerror(_errno.ENOENT)} (ENOENT)"
    try:
        st = os.statvfs(d)
    except OSError:
        return ""
    free = st.f_bavail * st.f_frsize
    if free < (1 << 20):
        return (f"; the file system holding {d} has {free} bytes free: "
                f"{os.strerror(_errno.ENOSPC)} (ENOSPC)")
    return ""


def inject(point, rank):
    """Raise the injected OSError for ``point`` on ``rank`` once (see the module docstring)."""
    spec = os.environ.get(_INJECT_ENV)
    if not spec:
        return
    parts = spec.split(":")
    if len(parts) < 3 or parts[0] != point or int(parts[1]) != rank:
        return
    seen = _injected.get(point, 0)
    _injected[point] = seen + 1
    if seen == (int(parts[3]) if len(parts) > 3 else 0):
        code = getattr(_errno, parts[2], _errno.EIO)
        raise OSError(code, os.strerror(code))


class _Watchdog:
    def __init__(self, comm, message, timeout, speak):
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(comm, message, timeout, speak), daemon=True)
        self._thread.start()

    def _run(self, comm, message, timeout, speak):
        if self._done.wait(timeout):
            return
        if speak:
            sys.stderr.write(f"relcp-mpi: error: {message} (rank {comm.rank}; other ranks did not respond "
                             f"within {timeout:g} s, aborting the job)\n")
            sys.stderr.flush()
        # MPI_Abort from this thread while the main thread is inside MPI normally ends the job; should it
        # block, exiting this process makes the launcher end the job (mpirun does; srun with
        # --kill-on-bad-exit)
        threading.Thread(target=comm.Abort, args=(1,), daemon=True).start()
        threading.Event().wait(3.0)
        os._exit(1)

    def cancel(self):
        self._done.set()


class WriteGuard:
    """Sticky error of one collective output phase on one rank (see the module docstring).

    ``what`` (e.g. ``"trajectory frame 120 of out/run.h5"``) starts the message."""

    def __init__(self, comm, what, path=None):
        self.comm = comm
        self.what = what
        self.path = path
        self.error = None            # first failure on this rank: message
        self.exc = None
        self._watchdog = None

    def fail(self, exc, where=None):
        if self.error is not None:
            return
        self.exc = exc
        desc = describe_oserror(exc)
        self.error = f"{where or self.what}: {desc}"
        if not re.search(r"\(E[A-Z]+\)$", desc) and self.path:
            self.error += diagnose_filesystem(self.path)
        # the lowest failing rank speaks first; a later one only if the job is still alive then
        delay = failure_timeout() + 0.5 * self.comm.rank
        self._watchdog = _Watchdog(self.comm, f"cannot write {self.error}", delay, speak=True)

    def step(self, where=None):
        """Context manager: an OSError inside is recorded (not raised) unless this rank already failed,
        in which case the block still runs (collective calls must match) and further errors are ignored."""
        return _Step(self, where)

    @property
    def failed(self):
        return self.error is not None

    def agree(self):
        """Collective: raise OutputError on every rank if any rank failed.  The watchdog of this rank stays
        armed until :meth:`done` (the caller may still have to close files)."""
        try:
            check_collective(not self.failed, lambda: self.error, comm=self.comm, phase=self.what)
        except CollectiveError as exc:
            r = exc.failed_ranks[0]
            more = f" (on rank {r})" if self.comm.size > 1 else ""
            err = OutputError(f"cannot write {exc.messages[r]}{more}")
            err.guard = self
            raise err from self.exc
        self.done()

    def done(self):
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None


class _Step:
    def __init__(self, guard, where):
        self.guard, self.where = guard, where

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        if exc is None:
            return False
        if isinstance(exc, Exception):
            # any failure inside a collective output phase (h5py raises OSError, RuntimeError, ValueError
            # ... for I/O errors) is agreed on, never raised on one rank alone
            self.guard.fail(exc, self.where)
            return True
        return False


def close_after_failure(comm, close, message):
    """Call ``close()`` (e.g. an h5py File's close) after an agreed write failure, ignoring its errors; if it
    does not return within :func:`failure_timeout` seconds (a collective inside cannot complete), print
    ``message`` once (rank 0) and abort the job."""
    dog = _Watchdog(comm, message, failure_timeout(), speak=comm.rank == 0)
    try:
        close()
    except Exception:  # noqa: BLE001 - the write already failed; the file is abandoned
        pass
    finally:
        dog.cancel()



def guarded_dataset(guard, group, name, arr, total, offset, dtype=None, attrs=None, inject_point=None):
    """Create ``group[name]`` with ``total`` rows (trailing shape and dtype of ``arr``, or ``dtype``) and
    write this rank's rows ``arr`` at ``offset`` collectively, each in a guard step (an I/O error is
    recorded, the collective write is still attempted).  ``attrs``: dataset attributes.  Returns the dataset
    (None on a rank whose creation failed)."""
    from relcp_mpi.io import h5util as hu
    ds = None
    with guard.step():
        ds = group.create_dataset(name, shape=(total,) + arr.shape[1:], dtype=dtype or arr.dtype)
        for k, v in (attrs or {}).items():
            ds.attrs[k] = v
        if inject_point:
            inject(inject_point, guard.comm.rank)
    with guard.step():
        if total:
            hu.write_rows(ds, offset, arr, collective=True)
    return ds
