"""SIGTERM / SIGUSR1 (what SLURM sends before the time limit) request checkpoint-and-exit.

The handler only sets a flag (it may run while MPI/HDF5 calls are in progress on this rank).  It is installed
first thing by the command (:func:`relcp_mpi.cli.main`, before MPI, PETSc or the deck are touched), so a stop
signal arriving during start-up is a request, not the death of the rank.  The flag is acted upon at fixed
points that every rank reaches, where the ranks agree (:func:`agreed_stop_signal`: a signal may reach only
some ranks):

* during start-up (after the deck is read, after PETSc is initialised): exit with status 3, nothing written;
* before the first step, once the run is set up (:class:`relcp_mpi.driver.actions.SignalCheck`): write the
  checkpoint of the initial state (a restart's checkpoint is already there) and stop, status 3;
* at the end of every step (the same action): write a checkpoint and stop, status 3.
"""
import signal

EXIT_SIGNAL_CHECKPOINT = 3
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
_SIGNAL_FLAG = {"signum": 0}


class StopRequested(Exception):
    """Raised by the run loop after a signal-triggered checkpoint was written (``path``; None when a stop
    during start-up ended the run before anything was written)."""

    def __init__(self, signum, path):
        where = f"checkpoint written to {path}" if path else "nothing written"
        super().__init__(f"stopped by {signal_name(signum)}; {where}")
        self.signum = signum
        self.path = path


def _on_signal(signum, frame):
    _SIGNAL_FLAG["signum"] = signum


def install_signal_handlers():
    """Install the flag-setting handler for SIGTERM and SIGUSR1 (idempotent; main thread only)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _on_signal)


def restore_default_signal_handlers():
    """Back to the default action (terminate) for the stop signals, for commands that never checkpoint; a
    signal received meanwhile is delivered again, now with its default action."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    pending = pending_signal()
    if pending:
        clear_pending_signal()
        signal.raise_signal(pending)


def pending_signal():
    """The signal number received on this rank and not yet acted upon (0 if none)."""
    return int(_SIGNAL_FLAG["signum"])


def clear_pending_signal():
    _SIGNAL_FLAG["signum"] = 0


def agreed_stop_signal(comm):
    """Collective: the stop signal received by any rank of ``comm`` and not yet acted upon (the largest
    signal number), 0 if none; the same on every rank."""
    return int(max(comm.allgather(pending_signal())))


def signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
