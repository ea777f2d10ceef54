"""SIGTERM / SIGUSR1 (what SLURM sends before the time limit) request checkpoint-and-exit.

The handler only sets a flag (it may run while MPI/HDF5 calls are in progress on this rank); the run loop's
:class:`relcp_mpi.driver.actions.SignalCheck` acts on it at the end of the current step: all ranks agree (one
allreduce per step), write a checkpoint and raise :class:`StopRequested`.
"""
import signal

EXIT_SIGNAL_CHECKPOINT = 3
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
_SIGNAL_FLAG = {"signum": 0}


class StopRequested(Exception):
    """Raised by the run loop after a signal-triggered checkpoint was written."""

    def __init__(self, signum, path):
        super().__init__(f"stopped by signal {signum}; checkpoint written to {path}")
        self.signum = signum
        self.path = path


def _on_signal(signum, frame):
    _SIGNAL_FLAG["signum"] = signum


def install_signal_handlers():
    """Install the flag-setting handler for SIGTERM and SIGUSR1."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _on_signal)


def pending_signal():
    """The signal number received on this rank and not yet acted upon (0 if none)."""
    return int(_SIGNAL_FLAG["signum"])


def clear_pending_signal():
    _SIGNAL_FLAG["signum"] = 0
