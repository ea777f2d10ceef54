"""The state of a ReLCP run: everything a step reads and changes, and everything a checkpoint holds.

:class:`RunState` is one object built in two ways -- :func:`fresh_state` (from a deck: build the bodies, the
initial decomposition, the skin) or :func:`relcp_mpi.io.restart.read_state` (from a checkpoint) -- and
advanced in place by :class:`relcp_mpi.driver.engine.StepEngine`.  A step that has to be undone (the dt
halving policy) is undone by :meth:`RunState.copy` / :meth:`RunState.restore`.

Units: lengths L, times T (the deck's).  ``dt`` is the deck's step [T], stored here once; sub-steps of the
halving policy pass their own dt to the engine and never change it.
"""
import copy as _copy
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from relcp_mpi.bodies.builder import build_bodies
from relcp_mpi.bodies.shapes import bounding_radius
from relcp_mpi.bodies.store import BodyStore
from relcp_mpi.parallel import decomposition as pdecomp
from relcp_mpi.parallel.box import Box, LeesEdwards

# warm-start table keys: (gid_i, gid_j, sub-contact index) of a constraint row (as StepResult.warm_table)
WARM_KEY_DTYPE = [("gid_i", np.int64), ("gid_j", np.int64), ("sub", np.int64)]


def empty_warm():
    """An empty warm-start table: keys (0,) WARM_KEY_DTYPE, values (0, 4) (multiplier, hint normal)."""
    return np.zeros(0, dtype=WARM_KEY_DTYPE), np.zeros((0, 4))


def box_of(deck):
    """The simulation box of a typed deck (:class:`relcp_mpi.config.sections.Deck`); with a shear flow its
    gradient axis has Lees--Edwards boundaries."""
    shear = None
    if deck.flow is not None and deck.flow.type == "shear":
        a, g = deck.flow.axes
        shear = LeesEdwards(flow_axis=a, gradient_axis=g, rate=float(deck.flow.rate))
    return Box(list(deck.box.lo), list(deck.box.hi), list(deck.box.periodic), shear=shear)


@dataclass
class RunState:
    """One run's state on this rank (collective object: every rank holds its part).

    bodies      BodyStore of the bodies this rank owns
    dt          the deck's time step [T]
    decomp      the domain decomposition (CartesianDecomposition or RCBDecomposition)
    skin        neighbour-search skin [L] (fixed at the start of the run)
    rmax        largest bounding radius over all bodies [L]; ghost_width = 2 rmax + 2 skin
    step, time  steps done and simulated time [T]
    warm        (keys (c,) WARM_KEY_DTYPE, values (c, 4)): each constraint row of the last step (owned by the
                owner of its body gid_i) with its multiplier and the pair's latest normal; (None, None) = none
    next_gid    the global id the next new body (cell division) gets
    n_global    number of bodies over all ranks
    row_starts  (P+1,) first D block row of each rank during the last step (None before the first step)
    work        (n_owned,) work weight of each owned body (1 + its constraint rows) for RCB rebalancing
    n_rebalances, imbalance   RCB rebalances so far, imbalance measured at the last rebalance check
    policy      the step policy's state (dt halving level and successful steps since, see driver.policy)
    shear_offset  Lees--Edwards image offset [L] along the flow axis, rate L_g t (mod L_a) (0 without shear)
    """
    bodies: BodyStore
    dt: float
    decomp: object
    skin: float
    rmax: float
    step: int = 0
    time: float = 0.0
    warm: tuple = (None, None)
    next_gid: int = 0
    n_global: int = 0
    row_starts: np.ndarray = None
    work: np.ndarray = None
    n_rebalances: int = 0
    imbalance: float = None
    policy: dict = field(default_factory=lambda: {"level": 0, "ok": 0})
    shear_offset: float = 0.0

    @property
    def ghost_width(self):
        """Ghost layer width [L]: every body that can touch an owned body within the step (centres within
        2 r_max + skin at the start, plus up to one more skin of relative motion inside the step)."""
        return 2 * self.rmax + 2 * self.skin

    def copy(self):
        """What a step changes, copied (bodies deep, the rest by value / shared immutable objects)."""
        c = _copy.copy(self)
        c.bodies = self.bodies.copy()
        c.policy = dict(self.policy)
        return c

    def restore(self, saved):
        """Return to a state saved with :meth:`copy` (in place; ``saved`` stays usable)."""
        vars(self).update(vars(saved.copy()))

    def update_rmax(self, comm):
        """Largest bounding radius over all ranks (collective); bodies grow, so called after growth."""
        self.rmax = comm.allreduce(
            float(bounding_radius(self.bodies.kind, self.bodies.shape).max(initial=0.0)), op=MPI.MAX)


def make_decomposition(deck, box, comm, x_local):
    """The deck's decomposition; for RCB balanced over ``x_local`` (this rank's share of the bodies, unit
    weights; every rank passes a disjoint share)."""
    if deck.parallel.decomposition == "rcb":
        return pdecomp.RCBDecomposition(box, comm, box.wrap(x_local), np.ones(len(x_local)))
    return pdecomp.CartesianDecomposition(box, comm)


def initial_skin(deck, rmax):
    """The deck's skin, or 0.25 r_max when it gives none [L]."""
    s = deck.contact.skin
    return float(s) if s is not None else 0.25 * rmax


def fresh_state(deck, comm):
    """The state at step 0 of a typed deck (collective): bodies built on every rank (identically),
    decomposition from the initial positions, each rank keeps the bodies it owns."""
    box = box_of(deck)
    allb = build_bodies(deck)
    n = len(allb)
    r, P = comm.rank, comm.size
    # every rank holds all initial positions: give each rank a disjoint slice as its "local" set
    decomp = make_decomposition(deck, box, comm, allb.x[n * r // P: n * (r + 1) // P])
    mine = decomp.owner(box.wrap(allb.x)) == comm.rank
    st = RunState(bodies=allb.take(mine), dt=float(deck.time.dt), decomp=decomp, skin=0.0, rmax=0.0,
                  n_global=n, next_gid=int(allb.gid.max()) + 1 if n else 0)
    st.update_rmax(comm)
    st.skin = initial_skin(deck, st.rmax)
    st.work = np.ones(len(st.bodies))
    return st
