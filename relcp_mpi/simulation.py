"""The public Python API of a ReLCP run: deck -> run state -> run loop -> output.

    import relcp_mpi
    sim = relcp_mpi.Simulation.from_deck("input_decks/two_ellipsoids.yaml")    # or a dict, or from_checkpoint
    sim.run(20, writers=[], on_step=lambda s: print(s.step, s.diag["max_overlap"]))
    gid, x = sim.gather("x")                                                   # all bodies, by gid

Under ``mpirun`` every rank runs the same script: the constructors, :meth:`Simulation.run` and
:meth:`Simulation.gather` are collective; ``sim.bodies`` is this rank's part.  ``relcp-mpi run deck.yaml``
(:mod:`relcp_mpi.cli`) is this API with the deck's output section as writers.

The pieces: :class:`relcp_mpi.state.RunState` (everything a step changes and a checkpoint holds),
:class:`relcp_mpi.driver.engine.StepEngine` (one step), :class:`relcp_mpi.driver.policy.StepPolicy` (dt
halving), :mod:`relcp_mpi.driver.actions` (what happens between steps), :mod:`relcp_mpi.io.restart`
(state <-> checkpoint).
"""
import copy
import os
import time

import numpy as np
from mpi4py import MPI

from relcp_mpi import __version__
from relcp_mpi.config.deck import DeckError, load, validate
from relcp_mpi.config.sections import Deck, typed
from relcp_mpi.driver import actions as A
from relcp_mpi.driver.engine import StepEngine
from relcp_mpi.driver.history import HISTORY_LENGTH, StepHistory
from relcp_mpi.driver.policy import StepPolicy
from relcp_mpi.driver.signals import (_SIGNAL_FLAG, EXIT_SIGNAL_CHECKPOINT, StopRequested,  # noqa: F401 (API)
                                      clear_pending_signal, install_signal_handlers, pending_signal)
from relcp_mpi.io.progress import StageTimer
from relcp_mpi.io.restart import read_state, write_state
from relcp_mpi.parallel.decomposition import GhostWidthError
from relcp_mpi.state import fresh_state


def _deck_and_text(deck):
    """(validated deck, YAML text or '') from a path, a raw mapping, a validated mapping or a typed Deck."""
    if isinstance(deck, (str, os.PathLike)):
        return load(deck)
    if isinstance(deck, Deck):
        return deck, ""
    return validate(copy.deepcopy(deck)), ""


def _from_state(name, doc, settable=False):
    """A property of Simulation reading (and with ``settable`` writing) ``self.state.<name>``."""
    def get(self):
        return getattr(self.state, name)

    def put(self, value):
        setattr(self.state, name, value)
    return property(get, put if settable else None, doc=doc)


class Simulation:
    """One ReLCP run described by a validated deck (see :mod:`relcp_mpi.config.deck`).

    ``Simulation(deck, deck_text, comm)`` starts fresh from a validated deck; prefer :meth:`from_deck`
    (also checks the initial configuration) and :meth:`from_checkpoint`.  ``sim.history`` keeps the
    diagnostics of the newest ``history_length`` steps (:class:`relcp_mpi.driver.history.StepHistory`;
    ``sim.history.maxlen = None`` keeps all)."""

    def __init__(self, deck, deck_text="", comm=None, state=None, history_length=HISTORY_LENGTH):
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.deck = deck = typed(deck)           # the validated mapping is deck.raw
        self.deck_text = deck_text
        self.state = state if state is not None else fresh_state(deck, self.comm)
        self.engine = StepEngine(deck, self.comm, self.state)
        log = (lambda msg: print(msg, flush=True)) if self.comm.rank == 0 else None
        self.policy = StepPolicy(deck.time.max_halvings, deck.time.keep_halved_steps, log,
                                 strict_retries=deck.contact.strict_retries)
        self.n_steps = deck.time.n_steps
        self.overlap_tol = deck.contact.overlap_tol
        self.name = deck.name
        self.output_directory = deck.output.directory
        self.diag = {}
        # newest per-step diagnostics (bounded: a long run must not grow; the full record is the trajectory's
        # /diagnostics table)
        self.history = StepHistory(history_length)
        self.step_wall = 0.0
        self.steps_run = 0
        self.wall_time = 0.0
        self.restarted_from = None
        self.deck_changes = []          # differences from the checkpoint's deck accepted by from_checkpoint
        self.last_checkpoint = None
        self.last_checkpoint_step = None

    # ------------------------------------------------------------------------------------------------
    @classmethod
    def from_deck(cls, deck, comm=None, check=True):
        """A fresh run of ``deck``: a file path, a raw mapping (validated here) or a validated deck.

        With ``check`` (default) the initial configuration is checked for overlaps (DeckError naming the
        bodies).  Collective."""
        deck, text = _deck_and_text(deck)
        # typed here, so the validated copy (its body entries: ~7 MiB of Python objects for 8,000 bodies) is
        # released before the set-up allocates the run's long-lived objects between them
        deck = typed(deck)
        sim = cls(deck, text, comm)
        if check:
            sim.check_initial_overlap()
        return sim

    @classmethod
    def from_checkpoint(cls, path, deck, deck_text="", comm=None, allow_deck_changes=()):
        """Continue a run from a checkpoint (any rank count).  ``path`` may be 'latest' (the newest valid
        checkpoint ``<output.directory>/<name>_ckpt_<step>.h5``); ``deck`` as for :meth:`from_deck`.

        Raises :class:`relcp_mpi.io.checkpoint.CheckpointError` on every rank (message naming the file and
        the problem) when the file is missing, damaged, or ``deck`` changes a key a restart must keep
        (:mod:`relcp_mpi.io.deck_changes`: bodies, generators, box, forces; physics-defining keys such as
        the contact model or the viscosity unless their dotted prefix is in ``allow_deck_changes``); nothing
        is written in that case.  The accepted differences are in ``sim.deck_changes``.  On the rank count
        that wrote the checkpoint the continued run is bitwise identical to an uninterrupted one."""
        if not deck_text:
            deck, deck_text = _deck_and_text(deck)
        comm = comm if comm is not None else MPI.COMM_WORLD
        state, meta, path = read_state(path, typed(deck), comm, allow_deck_changes)
        sim = cls(deck, deck_text, comm, state=state)
        sim.restarted_from = path
        sim.deck_changes = meta["deck_changes"]
        sim.last_checkpoint, sim.last_checkpoint_step = path, sim.step      # the state at this step is in it
        return sim

    # ------------------------------------------------------------------------------------------------
    # read access (the run state lives in self.state)
    step = _from_state("step", "steps done")
    time = _from_state("time", "simulated time [T]")
    dt = _from_state("dt", "the deck's time step [T]")
    n_global = _from_state("n_global", "number of bodies over all ranks")
    next_gid = _from_state("next_gid", "global id of the next new body")
    skin = _from_state("skin", "neighbour-search skin [L]")
    n_rebalances = _from_state("n_rebalances", "RCB rebalances so far")
    warm = _from_state("warm", "warm-start table (keys, values) of the last step", settable=True)

    @property
    def bodies(self):
        """This rank's bodies (BodyStore), sorted by gid (the stepper may leave them in another order between
        steps: they are sorted here when they are not)."""
        return self.engine.id_ordered(self.state)

    @property
    def timer(self):
        """The stage timer (:class:`relcp_mpi.io.progress.StageTimer`) of the steps run so far."""
        return self.engine.timer

    def reset_timer(self):
        """Start timing the stages afresh (e.g. after warm-up steps)."""
        self.engine.timer = StageTimer()

    @property
    def solver(self):
        """The persistent PETSc workspace of the step (``.free()`` releases it)."""
        return self.engine.workspace

    @property
    def contact_force(self):
        """(n_owned, 6) constraint force and torque on each owned body in the last step [F, F L], aligned with
        :attr:`bodies` (None before the first step)."""
        return self.engine.body_contact_force(self.bodies.gid)

    def stresslet(self):
        """(n_owned, 3, 3) stresslet of each owned body in the last step [F L]: the symmetric first moment
        sum sym(r (x) f) of the constraint forces on the body, lever from its centre to the contact point
        (:func:`relcp_mpi.physics.stress.body_stresslets`; zeros before the first step).  Collective."""
        return self.engine.body_stresslet(self.bodies.gid)

    def gather(self, field="x"):
        """(gid, values) of all bodies, ordered by gid, on every rank (collective; small runs only).  ``field``
        is a BodyStore field, or ``"stresslet"`` ((3, 3) per body, :meth:`stresslet`) or ``"contact_force"``
        ((6,) per body: constraint force and torque of the last step)."""
        b = self.bodies
        if field == "stresslet":
            values = self.stresslet()
        elif field == "contact_force":
            values = self.contact_force
            values = values if values is not None else np.zeros((len(b), 6))
        else:
            values = getattr(b, field)
        parts = self.comm.allgather((b.gid.copy(), np.array(values, copy=True)))
        gid = np.concatenate([p[0] for p in parts])
        val = np.concatenate([p[1] for p in parts])
        order = np.argsort(gid)
        return gid[order], val[order]

    # ------------------------------------------------------------------------------------------------
    def check_initial_overlap(self):
        """Collective: raise DeckError (on every rank) naming overlapping initial bodies, or a box too small
        for the ghost layer (bodies + skin)."""
        try:
            problems = self.engine.initial_overlaps(self.state)
        except GhostWidthError as exc:
            raise DeckError([str(exc)]) from None
        if problems:
            raise DeckError(["initial configuration: " + m for m in problems])

    def step_once(self):
        """One step of the deck's dt (with the step policy); returns its diagnostics.  Collective."""
        t0 = time.perf_counter()
        self.diag = self.policy.advance(self.engine, self.state)
        self.step_wall = time.perf_counter() - t0
        self.history.append(self.diag)
        return self.diag

    def default_actions(self, progress_stream=None):
        """The actions the deck's output section asks for: progress line, trajectory frames, checkpoints,
        and the SIGTERM/SIGUSR1 check (checkpoint and stop)."""
        out = self.deck.output
        acts = [A.Progress(out.progress_every, stream=progress_stream)]
        if out.trajectory_every:
            acts.append(A.Trajectory(out.trajectory_every))
        if out.checkpoint_every:
            acts.append(A.Checkpoint(out.checkpoint_every))
        acts.append(A.SignalCheck())
        return acts

    def run(self, steps=None, writers=None, on_step=None, until=None, progress_stream=None):
        """Run ``steps`` more steps (default: up to the deck's total); returns the last step's diagnostics.

        ``writers``: list of :class:`relcp_mpi.driver.actions.Action` (default :meth:`default_actions`: the
        deck's output section; ``[]`` = none).  ``on_step(sim)`` is called after every step, after the
        writers.  ``until(sim)`` ends the run early when it returns True -- it must return the same on every
        rank (base it on global quantities).  Collective.  Raises :class:`StopRequested` after a
        signal-triggered checkpoint."""
        end = self.n_steps if steps is None else self.step + int(steps)
        acts = self.default_actions(progress_stream) if writers is None else list(writers)
        if on_step is not None:
            acts.append(A.Callback(on_step))
        t0 = time.perf_counter()
        self.steps_run = 0
        started = []
        try:
            for a in acts:
                a.start(self, end)
                started.append(a)
            while self.step < end:
                self.step_once()
                self.steps_run += 1
                for a in acts:
                    if a.due(self.step, end):
                        a(self)
                if until is not None and until(self):
                    break
        finally:
            for a in started:
                a.finish(self)
            self.engine.free()
            self.wall_time = time.perf_counter() - t0
        return self.diag

    # ------------------------------------------------------------------------------------------------
    def write_checkpoint(self):
        """Collective atomic checkpoint of the run state (:func:`relcp_mpi.io.restart.write_state`);
        returns its path."""
        path = write_state(self.state, self.deck, self.deck_text, self.comm)
        self.last_checkpoint, self.last_checkpoint_step = path, self.step
        return path

    def summary(self):
        """Multi-line run summary (collective; meaningful on rank 0)."""
        stages = self.timer.report(self.comm, wall=self.wall_time)
        d = self.diag
        nrun = self.steps_run
        rs = self.restarted_from
        restart = f"restarted from {rs} (step {self.step - nrun})\n" if rs else ""
        return (f"relcp_mpi {__version__}: {self.name} on {self.comm.size} rank(s), "
                f"{self.n_global} bodies, {self.step} steps, t={self.time:.6g}\n" + restart +
                f"last step: constraints={d.get('constraints', 0)} depth={d.get('depth', 0)} "
                f"iterations={d.get('iterations', 0)} max_overlap={d.get('max_overlap', 0.0):.3e} "
                f"(overlap_tol {self.overlap_tol:g})\n" + _stress_line(d) +
                f"wall time {self.wall_time:.3f} s, {nrun / max(self.wall_time, 1e-300):.2f} steps/s\n" + stages)


def _stress_line(d):
    """Summary line of the last step's collision stress (empty when the diagnostics have none)."""
    if "pressure" not in d:
        return ""
    # all 9 components: with centre-to-centre levers the tensor of non-spherical bodies need not be symmetric
    comps = " ".join(f"{c}={d[f'stress_{c}']:.3e}" for c in ("xx", "yy", "zz", "xy", "yx", "xz", "zx", "yz", "zy"))
    return f"collision stress [F/L^2] (last step): pressure={d['pressure']:.3e} {comps}\n"
