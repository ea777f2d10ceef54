"""The trajectory writers selected by a deck's ``output.format`` (``hdf5``, ``gsd`` or both).

``open_trajectory_writers(deck, comm, restart_step, base)`` (``deck``: the typed
:class:`relcp_mpi.config.sections.Deck`) returns one object with the writers' interface
(``write_frame(step, time, bodies, diagnostics)``, ``close()``) that forwards every call to each writer:
``<output.directory>/<name>.h5`` (+ ``.xdmf``, :class:`relcp_mpi.io.trajectory.TrajectoryWriter`) and/or
``<name>.gsd`` (:class:`relcp_mpi.io.gsd_writer.GSDWriter`).  With ``restart_step`` not None the existing
files are appended to, frames after that step being dropped.
"""
import os

from relcp_mpi.io.gsd_writer import GSDWriter
from relcp_mpi.io.trajectory import TrajectoryWriter
from relcp_mpi.parallel.errors import collective_guard


class WriterGroup:
    """Several trajectory writers behind one interface (collective calls, same order on every rank)."""

    def __init__(self, writers):
        self.writers = list(writers)

    def write_frame(self, step, time, bodies, diagnostics=None):
        wrote = [w.write_frame(step, time, bodies, diagnostics) for w in self.writers]
        return any(wrote)

    def close(self):
        for w in self.writers:
            w.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def open_trajectory_writers(deck, comm, restart_step=None, base=None):
    """Writers of ``deck.output.format`` into ``base`` + ``.h5`` / ``.gsd`` (default base:
    ``<output.directory>/<name>``; its directory is created).  Collective."""
    if base is None:
        base = os.path.join(deck.output.directory, deck.name)
    d = os.path.dirname(base)
    with collective_guard(comm, "trajectory directory"):
        if comm.rank == 0 and d:
            os.makedirs(d, exist_ok=True)
    append = restart_step is not None
    writers = []
    try:
        for fmt in deck.output.format:
            if fmt == "hdf5":
                writers.append(TrajectoryWriter(base + ".h5", comm, append=append, restart_step=restart_step))
            elif fmt == "gsd":
                writers.append(GSDWriter(base + ".gsd", comm, deck.box.lo, deck.box.hi, append=append,
                                         restart_step=restart_step))
            else:
                raise ValueError(f"unknown trajectory format {fmt!r}")
    except Exception:
        for w in writers:
            w.close()
        raise
    return WriterGroup(writers)
