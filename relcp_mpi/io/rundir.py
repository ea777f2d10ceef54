"""The output directory of a run: checked before any step, and locked against a second concurrent run.

:func:`acquire_run_lock` (serial; call it on ONE rank and broadcast the verdict) creates the output
directory if needed and then the lock file ``<directory>/<name>.lock`` with ``O_CREAT | O_EXCL`` (atomic on
local and NFSv3+ file systems).  The lock holds one JSON line: pid, host, process start time, start date
and the command line of the run holding it.  Creating it is also the writability probe: a read-only mount,
a missing permission, a file where the directory should be or a directory below a file all surface here
as :class:`RunDirError` naming the path and the OS error, before anything else is written.

A lock whose run has died without releasing it (``kill -9``, ``MPI_Abort``, a node crash) is *stale*.  On the
same host it is recognised (the pid no longer exists, or now belongs to a process started at another
time) and replaced, with a note.  A lock written on another host cannot be checked from here: the
message names that host and pid and says to remove the lock file once that run is known to be gone.

:meth:`RunLock.release` removes the lock file (only if it is still ours) and the output directory if the
lock created it and it is still empty.
"""
import errno
import json
import os
import socket
import sys
import time

LOCK_SUFFIX = ".lock"


class RunDirError(RuntimeError):
    """The output directory cannot be used (not creatable, not writable, or in use by another run)."""


def lock_path(directory, name):
    return os.path.join(directory, f"{name}{LOCK_SUFFIX}")


def _oserror(exc):
    code = errno.errorcode.get(exc.errno, str(exc.errno)) if exc.errno else "?"
    return f"{exc.strerror or exc} ({code})"


def _proc_stat(pid):
    """(state, start time in clock ticks since boot) of process ``pid`` from Linux /proc, or (None, None)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            fields = fh.read().decode("ascii", "replace").rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])                     # fields 3 and 22 of stat
    except (OSError, ValueError, IndexError):
        return None, None


def _proc_start(pid):
    """Start time of process ``pid`` in clock ticks since boot (Linux /proc), or None if unknown."""
    return _proc_stat(pid)[1]


def _alive(pid, start):
    """Is the process that wrote a lock (pid, start time) still running on this host?"""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass                    # exists, owned by someone else
    except (OverflowError, ValueError):
        return False
    state, now = _proc_stat(pid)
    if state in ("Z", "X"):     # exited, not yet reaped (a rank killed by MPI_Abort whose launcher has returned)
        return False
    return start is None or now is None or now == start      # a reused pid has another start time


# seconds a live holder of the lock on this host is given to exit before the run is refused: the ranks of a run
# ended by MPI_Abort may still be on their way out when the launcher returns and the user restarts
STALE_GRACE = 5.0


def _gone_within(pid, start, seconds):
    """True if the lock holder (pid, start time) on this host has exited, waiting at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while _alive(pid, start):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def ensure_directory(directory):
    """Create ``directory`` (and parents); returns True if it was created.  Raises RunDirError naming the
    path and the OS error (a file in the way, a directory below a file, no permission, read-only)."""
    if os.path.isdir(directory):
        return False
    if os.path.lexists(directory):
        raise RunDirError(f"output directory {directory}: exists and is not a directory")
    try:
        os.makedirs(directory)
    except FileExistsError:
        if not os.path.isdir(directory):
            raise RunDirError(f"output directory {directory}: exists and is not a directory") from None
        return False
    except OSError as exc:
        blocker = _file_in_the_way(directory)
        at = f" ({blocker} is not a directory)" if blocker else ""
        raise RunDirError(f"output directory {directory}: cannot be created{at}: {_oserror(exc)}") from None
    return True


def _file_in_the_way(directory):
    """The nearest existing ancestor of ``directory`` if it is not a directory (else None)."""
    p = os.path.abspath(directory)
    while p and not os.path.lexists(p):
        parent = os.path.dirname(p)
        if parent == p:
            return None
        p = parent
    return p if p and os.path.lexists(p) and not os.path.isdir(p) else None


class RunLock:
    """A held run lock (see the module docstring)."""

    def __init__(self, path, token, created_dir, note=None):
        self.path, self.token, self.created_dir, self.note = path, token, created_dir, note

    def release(self):
        try:
            with open(self.path, "r", encoding="utf-8") as fh:
                ours = fh.read().strip() == self.token
        except OSError:
            ours = False
        if ours:
            try:
                os.remove(self.path)
            except OSError:
                pass
        if self.created_dir:
            try:
                os.rmdir(os.path.dirname(self.path) or ".")     # only if still empty
            except OSError:
                pass


def _describe(info):
    host, pid = info.get("host", "?"), info.get("pid", "?")
    started = info.get("started", "?")
    cmd = info.get("command")
    return f"pid {pid} on host {host}, started {started}" + (f": {cmd}" if cmd else "")


def acquire_run_lock(directory, name):
    """Create the output directory if needed and take ``<directory>/<name>.lock``.  Returns a RunLock.

    Raises :class:`RunDirError` when the directory cannot be created or written to, or another live run
    holds the lock.  Serial: call it on one rank only."""
    created = ensure_directory(directory)
    path = lock_path(directory, name)
    pid = os.getpid()
    info = {"pid": pid, "host": socket.gethostname(), "proc_start": _proc_start(pid),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join(sys.argv)}
    token = json.dumps(info, sort_keys=True)
    note = None
    for attempt in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            other = _read_lock(path)
            if attempt == 0 and other is None:          # released meanwhile: try again
                continue
            if attempt == 0 and other.get("host") == info["host"] \
                    and _gone_within(other.get("pid", -1), other.get("proc_start"), STALE_GRACE):
                try:
                    os.remove(path)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise RunDirError(f"output directory {directory}: cannot remove the stale lock {path}: "
                                      f"{_oserror(exc)}") from None
                note = f"removed the stale lock {path} of a run that no longer exists ({_describe(other)})"
                continue
            who = _describe(other) if other is not None else "unreadable lock file"
            raise RunDirError(f"output directory {directory} is in use by another run of '{name}' ({who}); "
                              f"lock file {path}: wait for that run to end, use another --output directory, "
                              f"or remove the lock file if that run is gone") from None
        except OSError as exc:
            if created:
                try:
                    os.rmdir(directory)
                except OSError:
                    pass
            raise RunDirError(f"output directory {directory}: not writable: cannot create {path}: "
                              f"{_oserror(exc)}") from None
        try:
            os.write(fd, (token + "\n").encode("utf-8"))
            os.fsync(fd)
        except OSError as exc:
            os.close(fd)
            try:
                os.remove(path)
            except OSError:
                pass
            raise RunDirError(f"output directory {directory}: cannot write {path}: {_oserror(exc)}") from None
        os.close(fd)
        return RunLock(path, token, created, note)
    raise RunDirError(f"output directory {directory}: cannot take the lock {path}")   # pragma: no cover


def _read_lock(path):
    try:
        with open(path, "r", encoding="utf-8") as fh:
            info = json.loads(fh.read().strip() or "{}")
        return info if isinstance(info, dict) else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
