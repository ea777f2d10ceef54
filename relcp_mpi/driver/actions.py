"""Actions of the run loop: what happens between steps (output, checks, user code).

An action has ``every`` (act after every step that is a multiple of it; 0 = never on that account) and
``at_end`` (also act after the last step of a :meth:`relcp_mpi.Simulation.run`).  The loop calls
``start(sim, end)`` once before the first step, ``__call__(sim)`` after each due step (in list order, on every
rank: actions are collective when what they do is), and ``finish(sim)`` once at the end (also after an
error).  Write your own by subclassing :class:`Action`, or pass a function as ``on_step``.

Built in: :class:`Progress` (progress line on rank 0), :class:`Trajectory` (HDF5 frames + XDMF and/or GSD),
:class:`Checkpoint` (atomic checkpoint files), :class:`SignalCheck` (SIGTERM/SIGUSR1: checkpoint and stop),
:class:`Callback` (call a function).
"""
from mpi4py import MPI

from relcp_mpi.driver.signals import StopRequested, clear_pending_signal, pending_signal
from relcp_mpi.io.progress import Progress as _ProgressLine
from relcp_mpi.io.writers import open_trajectory_writers


class Action:
    """Base class: act after steps that are multiples of ``every`` and, with ``at_end``, after the last."""

    def __init__(self, every=1, at_end=False):
        self.every = int(every or 0)
        self.at_end = bool(at_end)

    def due(self, step, end):
        return bool(self.every and step % self.every == 0) or (self.at_end and step == end)

    def start(self, sim, end):
        pass

    def __call__(self, sim):
        raise NotImplementedError

    def finish(self, sim):
        pass


class Callback(Action):
    """Call ``fn(sim)`` after every ``every``-th step (collective if ``fn`` is)."""

    def __init__(self, fn, every=1, at_end=False):
        super().__init__(every, at_end)
        self.fn = fn

    def __call__(self, sim):
        self.fn(sim)


class Progress(Action):
    """One progress line on rank 0 every ``every`` steps and after the last step (step, time, steps/s, ETA,
    constraints, depth, iterations, max overlap)."""

    def __init__(self, every=10, stream=None):
        super().__init__(every=1)
        self.line_every = int(every or 0)
        self.stream = stream

    def start(self, sim, end):
        self.end = end
        self.line = _ProgressLine(sim.comm, end, self.line_every, stream=self.stream)

    def __call__(self, sim):
        self.line.update(sim.step, sim.time, sim.diag, sim.overlap_tol, force=sim.step == self.end)


class Trajectory(Action):
    """Trajectory frames every ``every`` steps in the deck's ``output.format`` (HDF5 + XDMF
    :class:`relcp_mpi.io.trajectory.TrajectoryWriter` and/or GSD :class:`relcp_mpi.io.gsd_writer.GSDWriter`,
    :func:`relcp_mpi.io.writers.open_trajectory_writers`), into ``path`` (default ``<output.directory>/<name>.h5``;
    the GSD file is the same path with ``.gsd``).  A fresh run (step 0) writes the initial frame and starts new
    files; a run continuing at step S > 0 (restart, or a second ``run``) appends to them, dropping frames after
    S written by an interrupted run."""

    def __init__(self, every=10, path=None):
        super().__init__(every)
        self.path = path
        self.writer = None

    def start(self, sim, end):
        base = None if self.path is None else (self.path[:-3] if self.path.endswith(".h5") else self.path)
        continuing = sim.restarted_from is not None or sim.step > 0
        self.writer = open_trajectory_writers(sim.deck, sim.comm, restart_step=sim.step if continuing else None,
                                              base=base)
        if not continuing:
            with sim.timer.stage("output"):
                self.writer.write_frame(sim.step, sim.time, sim.bodies.sort_by_gid(), sim.diag or {})

    def __call__(self, sim):
        with sim.timer.stage("output"):
            self.writer.write_frame(sim.step, sim.time, sim.bodies, sim.diag)

    def finish(self, sim):
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class Checkpoint(Action):
    """An atomic checkpoint (:meth:`relcp_mpi.Simulation.write_checkpoint`) every ``every`` steps and after
    the last step."""

    def __init__(self, every):
        super().__init__(every, at_end=True)

    def __call__(self, sim):
        with sim.timer.stage("output"):
            sim.write_checkpoint()


class SignalCheck(Action):
    """Before the first step and after every step: did any rank receive SIGTERM/SIGUSR1?  (one allreduce;
    all ranks agree.)  If so, write a checkpoint (unless the run's state at this step is already in one: just
    written, or the checkpoint a restart started from) and raise :class:`StopRequested`.  Before the first
    step of a fresh run that is the checkpoint of the initial state."""

    def __init__(self):
        super().__init__(every=1)

    def start(self, sim, end):
        self(sim)

    def __call__(self, sim):
        signum = int(sim.comm.allreduce(pending_signal(), op=MPI.MAX))
        if not signum:
            return
        path = sim.last_checkpoint
        if path is None or sim.last_checkpoint_step != sim.step:
            with sim.timer.stage("output"):
                path = sim.write_checkpoint()
        clear_pending_signal()
        raise StopRequested(signum, path)
