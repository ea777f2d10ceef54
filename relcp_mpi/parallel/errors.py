"""Collective error handling: one clear message, every rank ends, never a hang.

Two mechanisms:

* :func:`install_excepthook` -- an uncaught exception on any rank prints ONE message
  ``relcp_mpi: error on rank R: <type>: <message>`` plus the traceback to stderr, flushes, and calls
  ``comm.Abort(1)`` so the whole job ends promptly (other ranks may be blocked in a collective).
  For a :class:`CollectiveError` (raised on every rank by the functions below) only the lowest failing
  rank prints; the others wait a short grace period for that rank's abort and then abort themselves.

* :func:`collective_guard` / :func:`check_collective` -- a decision "did any rank fail?" taken by
  all ranks together, so every rank raises the same :class:`CollectiveError` (naming the failing
  ranks and their messages) and can clean up / checkpoint consistently.  When nothing fails the
  cost is ONE allreduce of one integer.

Limitation (inherent to MPI): a guard can only catch failures that happen *between* collectives.
If rank A raises while rank B is already blocked inside a collective that A will never call (e.g. an
Alltoallv inside the guarded block), the guard's allreduce cannot be matched; such cases are
handled by :func:`install_excepthook` (the uncaught exception aborts the job).  Keep guarded blocks
local or make sure every collective inside them is reached by all ranks.
"""
import contextlib
import os
import sys
import time
import traceback

import numpy as np

_PREFIX = "relcp_mpi"


class CollectiveError(RuntimeError):
    """Raised on EVERY rank of a communicator when one or more ranks failed in a collective phase.

    Attributes
    ----------
    phase : str            name of the phase
    failed_ranks : list    ranks that failed (sorted)
    messages : dict        rank -> "Type: message" of the original failure
    local_traceback : str  formatted traceback of this rank's original exception (None if it did not fail)
    """

    def __init__(self, phase, failed_ranks, messages, local_traceback=None):
        self.phase = phase
        self.failed_ranks = sorted(int(r) for r in failed_ranks)
        self.messages = {int(k): v for k, v in messages.items()}
        self.local_traceback = local_traceback
        detail = "; ".join(f"rank {r}: {self.messages.get(r, '?')}" for r in self.failed_ranks)
        plural = "s" if len(self.failed_ranks) > 1 else ""
        super().__init__(f"phase '{phase}' failed on rank{plural} "
                         f"{', '.join(map(str, self.failed_ranks))}: {detail}")


def _world():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def _describe(exc):
    return f"{type(exc).__name__}: {exc}"


def agree(comm, exc=None, make_error=None):
    """The agreement primitive: did any rank fail?  Every rank passes its local failure (an exception, or
    None); every rank returns normally, or every rank raises the same error.

    Cost when no rank failed: ONE allreduce of one integer.  On failure (only then) the failing ranks'
    messages are gathered and every rank raises ``make_error(messages)`` -- ``messages`` is
    ``{rank: (exception type name, str(exception))}`` of the failing ranks -- or, without ``make_error``, a
    copy of the lowest failing rank's exception itself (sent pickled; it must be rebuildable from its
    ``args``, as exceptions constructed from one message are).  On the failing ranks the local exception is
    chained as ``__cause__``."""
    from mpi4py import MPI
    size = comm.Get_size()
    first = int(comm.allreduce(comm.Get_rank() if exc is not None else size, op=MPI.MIN))
    if first >= size:
        return
    if make_error is None:
        err = comm.bcast(exc if comm.Get_rank() == first else None, root=first)
    else:
        info = comm.allgather(None if exc is None else (type(exc).__name__, str(exc)))
        err = make_error({r: m for r, m in enumerate(info) if m is not None})
    raise err from (exc if exc is not err else None)


def first_message(messages):
    """(rank, message) of the lowest failing rank in an :func:`agree` ``messages`` dict."""
    r = min(messages)
    return r, messages[r][1]


def _agree(comm, failed, local_msg, phase, local_tb=None):
    """CollectiveError on every rank when any rank failed (the collective_guard contract)."""
    exc = RuntimeError(local_msg) if failed else None

    def make(messages):
        return CollectiveError(phase, list(messages), {r: m for r, (_, m) in messages.items()}, local_tb)
    agree(comm, exc, make)


@contextlib.contextmanager
def collective_guard(comm=None, phase_name="collective phase"):
    """Context manager: an exception inside the block on any rank -> CollectiveError on every rank.

    Every rank must enter and leave the block (the exit does one allreduce).  A
    :class:`CollectiveError` raised inside the block (already collective, e.g. from a nested guard)
    is re-raised unchanged without further communication.  The original exception is chained as
    ``__cause__`` on the rank(s) where it happened.
    """
    comm = _world() if comm is None else comm
    try:
        yield
    except CollectiveError:
        raise
    except Exception as exc:  # noqa: BLE001 -- we re-raise collectively
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            _agree(comm, True, _describe(exc), phase_name, tb)
        except CollectiveError as cerr:
            raise cerr from exc
        raise AssertionError("unreachable")  # pragma: no cover
    _agree(comm, False, None, phase_name)


def check_collective(flag_local, message, comm=None, phase="check"):
    """Collective check: ``flag_local`` True means "OK on this rank".

    If any rank passes a false flag, every rank raises :class:`CollectiveError` naming the failing
    ranks and their ``message`` (a string, or a callable returning one, evaluated only on failure).
    Cost when all are OK: one allreduce of one integer.
    """
    comm = _world() if comm is None else comm
    failed = not bool(flag_local)
    msg = None
    if failed:
        msg = message() if callable(message) else str(message)
    _agree(comm, failed, msg, phase)


def format_error(rank, exc_type, exc, tb):
    """The one message printed for an uncaught error (header line + traceback)."""
    if isinstance(exc, CollectiveError) and exc.local_traceback:
        orig = exc.messages.get(rank, _describe(exc))
        head = f"{_PREFIX}: error on rank {rank}: {orig}\n"
        body = exc.local_traceback + f"(raised on every rank as CollectiveError: {exc})\n"
        return head + body
    head = f"{_PREFIX}: error on rank {rank}: {exc_type.__name__}: {exc}\n"
    return head + "".join(traceback.format_exception(exc_type, exc, tb))


def install_excepthook(comm=None, grace=3.0):
    """Install a ``sys.excepthook`` that reports an uncaught exception once and aborts the MPI job.

    ``grace`` (seconds): for a :class:`CollectiveError` the ranks that do not print wait at most this
    long for the printing rank's abort; if it has not come (e.g. that rank caught the error) they
    print the message themselves and call ``Abort``.
    Returns the previous hook.
    """
    comm = _world() if comm is None else comm
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        rank = comm.Get_rank()
        try:
            printer = True
            if isinstance(exc, CollectiveError) and exc.failed_ranks:
                printer = rank == min(exc.failed_ranks)
            if printer:
                sys.stderr.write(format_error(rank, exc_type, exc, tb))
                sys.stderr.flush()
                sys.stdout.flush()
            else:
                time.sleep(grace)  # normally the printing rank's Abort ends us during this sleep
                sys.stderr.write(format_error(rank, exc_type, exc, tb))
                sys.stderr.flush()
        finally:
            try:
                comm.Abort(1)
            finally:  # Abort should not return; make sure the process ends anyway
                os._exit(1)

    sys.excepthook = hook
    return previous
