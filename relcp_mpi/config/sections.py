"""The validated deck as typed, frozen sections: ``typed(validate(raw))`` -> :class:`Deck`.

Validation (:func:`relcp_mpi.config.deck.validate`) stays where it is and reports every problem at once by
dotted key; this module only turns its normalised mapping (defaults filled) into one frozen dataclass per
section, so the driver reads ``deck.time.dt`` instead of ``deck["time"]["dt"]``.  Field names are the deck's
keys (units as in :mod:`relcp_mpi.config.deck`).  Body lists (``bodies``, ``generate``), ``forces`` and the
event-driven section stay mappings (their consumers, the body builder and the event engine, read them);
``Deck.raw`` is the whole validated mapping (stored in checkpoints, compared on restart).
"""
import os
from dataclasses import dataclass, fields


def _section(cls, d):
    """``cls`` from the mapping ``d``: the fields ``cls`` declares (keys added to the schema later are ignored
    here until the section declares them); lists become tuples (frozen)."""
    return cls(**{f.name: (tuple(d[f.name]) if isinstance(d[f.name], list) else d[f.name]) for f in fields(cls)})


@dataclass(frozen=True)
class TimeSection:
    dt: float                 # [T]
    steps: int                # total steps, or None when t_end is given
    t_end: float              # [T] or None
    max_halvings: int         # a failed step is redone as two of dt/2, down to dt/2^max_halvings (0: off)
    keep_halved_steps: int    # after a halved step keep the finer dt for this many successful steps (0: off)

    @property
    def n_steps(self):
        """Total number of steps (``steps``, or ``t_end / dt`` rounded)."""
        return int(self.steps) if self.steps is not None else int(round(self.t_end / float(self.dt)))


@dataclass(frozen=True)
class BoxSection:
    lo: tuple                 # (3,) [L]
    hi: tuple                 # (3,) [L]
    periodic: tuple           # (3,) bool


@dataclass(frozen=True)
class Wall:
    point: tuple              # (3,) [L] a point of the plane
    normal: tuple             # (3,) pointing into the allowed half-space (not necessarily unit)


@dataclass(frozen=True)
class FluidSection:
    viscosity: float          # mu


@dataclass(frozen=True)
class ContactSection:
    model: str                # relcp | snsd | multisphere
    ms_resolution: int        # proxy spheres per body (multisphere)
    overlap_tol: float        # [L]
    skin: float               # [L] or None (0.25 x largest bounding radius)
    max_depth: int            # recursion levels
    initial_overlap_tol: float  # [L]
    recheck_neighbors: bool
    line_contacts: bool       # relcp: level-0 rows at both ends of rod-rod and rod-wall line contacts
    max_trial_rotation: float  # [rad] with time.max_halvings > 0: redo a step at dt/2 when a trial rotates more


@dataclass(frozen=True)
class SolverSection:
    method: str               # a name of relcp_mpi.solver.registry
    tol: float                # [L] min-map tolerance of the length-unit LCP
    max_iter: int
    petsc_options: tuple      # of str


@dataclass(frozen=True)
class ParallelSection:
    decomposition: str        # cartesian | rcb
    rebalance_every: int      # steps (0: never)
    imbalance_threshold: float


@dataclass(frozen=True)
class OutputSection:
    directory: str
    trajectory_every: int     # steps (0: no trajectory)
    format: tuple             # of 'hdf5' | 'gsd': trajectory files <name>.h5 (+ .xdmf) and/or <name>.gsd
    checkpoint_every: int     # steps (0: no periodic checkpoints)
    keep_checkpoints: int
    progress_every: int       # steps (0: only the last)
    restart: object           # None, 'latest' or a checkpoint path


@dataclass(frozen=True)
class GrowthSection:
    """Growth law and division noise of growing spherocylinders (:class:`relcp_mpi.physics.growth.GrowthModel`)."""
    model: str                # linear | exponential
    division_noise: float     # division length noise (fraction)
    orientation_noise: float  # [rad] daughter orientation noise
    noise_axis: tuple         # (3,) rotation axis of the orientation noise, or None (isotropic)
    growth_rate_noise: float  # per-cell growth rate factor 1 + noise U[-1, 1]


@dataclass(frozen=True)
class DebugSection:
    """LCP dumps and infeasibility checks (:class:`relcp_mpi.stepper.lcp_debug.LcpDebug`)."""
    dump_lcp: str             # directory of the dumps, or None (off)
    dump_on: str              # fail | always
    check_on_fail: bool       # search an infeasibility certificate when a solve fails
    check_rows: int           # largest LCP (rows) the exact check is tried on


@dataclass(frozen=True)
class FlowSection:
    """Imposed background flow (:class:`relcp_mpi.physics.flow.ImposedFlow`)."""
    type: str                 # none | shear
    rate: float               # [1/T] shear rate: u_flow_axis = rate (x_gradient_axis - box centre)
    flow_axis: str            # x | y | z
    gradient_axis: str        # x | y | z (Lees-Edwards boundaries along this axis)

    @property
    def axes(self):
        """(flow axis, gradient axis) as 0/1/2."""
        return "xyz".index(self.flow_axis), "xyz".index(self.gradient_axis)


@dataclass(frozen=True)
class Deck:
    """A validated deck, one typed section per deck section (see the module docstring)."""
    name: str
    engine: str
    seed: int
    time: TimeSection
    box: BoxSection
    walls: tuple              # of Wall
    fluid: FluidSection
    contact: ContactSection
    solver: SolverSection
    parallel: ParallelSection
    output: OutputSection
    growth: GrowthSection
    debug: DebugSection
    raw: dict
    flow: FlowSection = None  # (a default, so a Deck built without it still works; typed() always sets it)

    @property
    def checkpoint_prefix(self):
        """``<output.directory>/<name>_ckpt``: checkpoints are ``<prefix>_<step>.h5``."""
        return os.path.join(self.output.directory, f"{self.name}_ckpt")


def typed(deck):
    """The typed view of a validated deck mapping (see :func:`relcp_mpi.config.deck.validate`); a Deck is
    returned as it is."""
    if isinstance(deck, Deck):
        return deck
    return Deck(name=deck["name"], engine=deck["engine"], seed=deck["seed"],
                time=_section(TimeSection, deck["time"]), box=_section(BoxSection, deck["box"]),
                walls=tuple(_section(Wall, w) for w in deck["walls"]), fluid=_section(FluidSection, deck["fluid"]),
                contact=_section(ContactSection, deck["contact"]), solver=_section(SolverSection, deck["solver"]),
                parallel=_section(ParallelSection, deck["parallel"]), output=_section(OutputSection, deck["output"]),
                growth=_section(GrowthSection, deck["growth"]), debug=_section(DebugSection, deck["debug"]),
                raw=deck,
                flow=_section(FlowSection, deck["flow"]) if "flow" in deck else FlowSection("none", 0.0, "x", "y"))
