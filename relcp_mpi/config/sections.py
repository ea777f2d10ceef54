"""The validated deck as typed, frozen sections: ``typed(validate(raw))`` -> :class:`Deck`.

Validation (:func:`relcp_mpi.config.deck.validate`) stays where it is and reports every problem at once by
dotted key; this module only turns its normalised mapping (defaults filled) into one frozen dataclass per
section, so the driver reads ``deck.time.dt`` instead of ``deck["time"]["dt"]``.  Field names are the deck's
keys (units as in :mod:`relcp_mpi.config.deck`).  The body lists are tuples of :class:`BodySpec` /
:class:`GeneratorSpec` (``Deck.bodies`` made from the mapping when read, not stored), the event engine's section
an :class:`~relcp_mpi.config.events.EventDrivenSection` (exact numbers).  ``Deck.raw`` is the whole validated
mapping (stored in checkpoints, compared on restart; a long list of explicit bodies is kept pickled,
:class:`PackedBodies`, and ``raw`` unpickles it when read).  Nothing outside ``config/`` looks keys up in a deck
mapping: changes to a deck (command-line overrides, the studies' variations) go through :func:`override`, which
validates the changed deck again.
"""
import copy
import dataclasses
import os
import pickle
from dataclasses import dataclass, fields

from relcp_mpi.basics.quaternion import AxisAngle  # noqa: F401 (a typed orientation; re-exported here)
from relcp_mpi.config.deck import BODY_KEYS, GENERATOR_KEYS, load, validate
from relcp_mpi.config.events import check_event_section


def _frozen(v):
    """Lists (nested too) become tuples."""
    return tuple(_frozen(c) for c in v) if isinstance(v, list) else v


def _section(cls, d):
    """``cls`` from the mapping ``d``: the fields ``cls`` declares (keys added to the schema later are ignored
    here until the section declares them); lists become tuples (frozen)."""
    return cls(**{f.name: _frozen(d[f.name]) for f in fields(cls)})


def _body_spec(cls, d):
    """A :class:`BodySpec` / :class:`GeneratorSpec` from a validated entry: an axis-angle orientation becomes an
    :class:`AxisAngle`, a region a :class:`Region`."""
    spec = _section(cls, d)
    o, r = d["orientation"], d.get("region")
    return dataclasses.replace(spec, **({"orientation": AxisAngle(tuple(o["axis"]), o["angle"])}
                                        if isinstance(o, dict) else {}),
                               **({"region": Region(tuple(r["lo"]), tuple(r["hi"]))} if isinstance(r, dict) else {}))


@dataclass(frozen=True)
class Region:
    lo: tuple                 # (3,) [L]
    hi: tuple                 # (3,) [L]


@dataclass(frozen=True)
class ForcesSection:
    body_force: tuple         # (3,) [F] on every body
    body_torque: tuple        # (3,) [F L] on every body


@dataclass(frozen=True)
class BodySpec:
    """One entry of ``bodies`` (keys: :data:`relcp_mpi.config.deck.BODY_KEYS`)."""
    shape: str                # sphere | spherocylinder | ellipsoid | ring
    radius: float             # [L] or None
    length: float             # [L] or None (spherocylinder)
    axes: tuple               # (3,) [L] or None (ellipsoid)
    ring_radius: float        # [L] or None (ring)
    position: tuple           # (3,) [L]
    orientation: object       # 'random' | 'identity' | (w, x, y, z) | AxisAngle
    force: tuple              # (3,) [F]
    torque: tuple             # (3,) [F L]
    velocity: tuple           # (3,) [L/T] imposed
    angular_velocity: tuple   # (3,) [1/T] imposed
    growth_rate: float        # [L/T] (spherocylinders)
    divide_at: float          # [L] (spherocylinders, 0: never)
    fixed: bool


@dataclass(frozen=True)
class GeneratorSpec:
    """One entry of ``generate`` (keys: :data:`relcp_mpi.config.deck.GENERATOR_KEYS`)."""
    shape: str
    radius: float
    length: float
    axes: tuple
    ring_radius: float
    count: int
    method: str               # lattice | random
    region: object            # Region or None (the box)
    spacing: float            # [L] lattice spacing or None (largest that fits)
    orientation: object       # 'random' | 'identity' | (w, x, y, z) | AxisAngle
    force: tuple
    torque: tuple
    velocity: tuple
    angular_velocity: tuple
    growth_rate: float
    divide_at: float
    fixed: bool


assert {f.name for f in fields(BodySpec)} == set(BODY_KEYS)
assert {f.name for f in fields(GeneratorSpec)} == set(GENERATOR_KEYS)


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
    viscosity: float          # mu [F T / L^2]
    kT: float                 # thermal energy [F L] of the Brownian noise (0: none; relcp_mpi.physics.brownian)


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
    row_rotation_limit: float  # [rad] appended rows linearised where no body turned more than this (0 = off)
    row_depth_limit: float    # [L] pairs overlapping deeper at a trial get rows from along the step (0 = off)
    carry_rows: bool          # relcp: level 0 re-samples the previous step's appended rod-rod rows
    gap_margin: float         # [L] every LCP row asks for a predicted gap >= gap_margin (0 <= it <= overlap_tol)
    strict_retries: int       # a failed step is redone up to this many times with stricter rows (driver.policy)
    pinch_repairs: int        # wall pinches repaired in place per step (stepper.relcp) before the step fails
    drop_axial_torque: bool   # rows exert no torque about the symmetry axis of rods and rings (stepper.relcp)


@dataclass(frozen=True)
class SolverSection:
    method: str               # a name of relcp_mpi.solver.registry
    tol: float                # [L] min-map tolerance of the length-unit LCP
    max_iter: int
    petsc_options: tuple      # of str
    options: dict             # method options (relcp_mpi.solver.registry), validated
    fallback: str             # method tried when `method` fails on an LCP, or 'none'


@dataclass(frozen=True)
class ParallelSection:
    decomposition: str        # cartesian | rcb
    rebalance_every: int      # steps (0: never)
    imbalance_threshold: float
    body_order: str           # spatial | gid: order of a rank's bodies in memory (relcp_mpi.bodies.order)


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
    trace_levels: str         # file that gets one JSON line per recursion level (rank 0 appends), or None


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


# from this many explicit bodies typed() keeps their validated entries pickled (PackedBodies), in chunks of
PACK_BODIES = 64
PACK_CHUNK = 512


class PackedBodies:
    """The validated deck's explicit body entries (a list of dicts), kept pickled in chunks of
    :data:`PACK_CHUNK` entries: ~1 MiB for 8,000 bodies instead of ~6.5 MiB of dicts, lists and floats on every
    rank for the whole run (they are read once, when the bodies are built, and by checkpoints and restarts).
    Iterating unpickles one chunk at a time; :meth:`unpack` gives the whole list (the same values and types as
    the entries given: pickle keeps them exactly)."""
    __slots__ = ("n", "blobs")

    def __init__(self, entries):
        self.n = len(entries)
        self.blobs = tuple(pickle.dumps(entries[i:i + PACK_CHUNK], protocol=pickle.HIGHEST_PROTOCOL)
                           for i in range(0, self.n, PACK_CHUNK))

    def __len__(self):
        return self.n

    def __iter__(self):
        for blob in self.blobs:
            yield from pickle.loads(blob)

    def unpack(self):
        """The entries as a new list of new dicts."""
        return list(self)

    def __eq__(self, other):
        return isinstance(other, PackedBodies) and self.unpack() == other.unpack()

    def __repr__(self):
        return f"PackedBodies({self.n} entries, {sum(len(b) for b in self.blobs)} bytes)"


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
    forces: ForcesSection
    generate: tuple           # of GeneratorSpec
    event_driven: object      # EventDrivenSection (engine event_driven) or None
    _raw: dict                # the validated mapping, its explicit bodies possibly packed (read it as ``raw``)
    flow: FlowSection = None  # (a default, so a Deck built without it still works; typed() always sets it)

    @property
    def raw(self):
        """The whole validated mapping (stored in checkpoints, compared on restart).  When the explicit bodies
        are kept packed (:class:`PackedBodies`) every read returns a new mapping with a new list of the body
        entries (the other sections are the stored ones); else the mapping given to :func:`typed`."""
        r = self._raw
        if not isinstance(r.get("bodies"), PackedBodies):
            return r
        return {k: (v.unpack() if k == "bodies" else v) for k, v in r.items()}

    @property
    def bodies(self):
        """The explicit bodies as a tuple of :class:`BodySpec`, made from ``raw`` on every access: a deck of
        8,000 bodies held them as 4.5 MiB of tuples and dataclasses on every rank for the whole run, for one
        read when the bodies are built (the validated mapping ``raw`` stays: checkpoints store it)."""
        return tuple(self.iter_bodies())

    def iter_bodies(self):
        """The explicit bodies one :class:`BodySpec` at a time (made from ``raw`` as they are read: the body
        builder holds one at a time, not a tuple of all of them)."""
        return (_body_spec(BodySpec, b) for b in self._raw["bodies"])

    @property
    def n_bodies(self):
        """Number of explicit bodies (``len(self.bodies)`` without making them)."""
        return len(self._raw["bodies"])

    @property
    def checkpoint_prefix(self):
        """``<output.directory>/<name>_ckpt``: checkpoints are ``<prefix>_<step>.h5``."""
        return os.path.join(self.output.directory, f"{self.name}_ckpt")


def typed(deck):
    """The typed view of a validated deck mapping (see :func:`relcp_mpi.config.deck.validate`); a Deck is
    returned as it is."""
    if isinstance(deck, Deck):
        return deck
    raw = deck
    if isinstance(deck.get("bodies"), list) and len(deck["bodies"]) >= PACK_BODIES:
        raw = dict(deck)
        raw["bodies"] = PackedBodies(deck["bodies"])
    return Deck(name=deck["name"], engine=deck["engine"], seed=deck["seed"],
                time=_section(TimeSection, deck["time"]), box=_section(BoxSection, deck["box"]),
                walls=tuple(_section(Wall, w) for w in deck["walls"]), fluid=_section(FluidSection, deck["fluid"]),
                contact=_section(ContactSection, deck["contact"]), solver=_section(SolverSection, deck["solver"]),
                parallel=_section(ParallelSection, deck["parallel"]), output=_section(OutputSection, deck["output"]),
                growth=_section(GrowthSection, deck["growth"]), debug=_section(DebugSection, deck["debug"]),
                forces=_section(ForcesSection, deck["forces"]),
                generate=tuple(_body_spec(GeneratorSpec, g) for g in deck["generate"]),
                event_driven=check_event_section(deck["event_driven"], []) if deck["engine"] == "event_driven"
                else None, _raw=raw,
                flow=_section(FlowSection, deck["flow"]))


def override(deck, changes, source="deck"):
    """A new typed :class:`Deck`: ``deck`` (a Deck or a validated mapping; not modified) with ``changes``, a
    mapping of dotted keys to values (``{"time.steps": 10, "output.progress_every": 0}``; a top-level key
    replaces its whole section), validated again (:class:`~relcp_mpi.config.deck.DeckError` naming the key).
    Unknown sections or keys are refused like in a deck file."""
    raw = copy.deepcopy(deck.raw if isinstance(deck, Deck) else deck)
    for key, value in changes.items():
        *path, last = key.split(".")
        node = raw
        for k in path:
            node = node.setdefault(k, {}) if isinstance(node, dict) else node
        if not isinstance(node, dict):
            from relcp_mpi.config.deck import DeckError
            raise DeckError([f"{key}: {'.'.join(path)} is not a section"], source)
        node[last] = value
    return typed(validate(raw, source=source))



def load_typed(path):
    """(typed :class:`Deck`, YAML text) of the deck file ``path`` (:func:`relcp_mpi.config.deck.load`: every
    problem at once in one DeckError naming the file)."""
    deck, text = load(path)
    return typed(deck), text
