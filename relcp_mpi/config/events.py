"""The ``event_driven`` section of an ``engine: event_driven`` deck: validation and its typed section.

Schema (every number is read exactly, :func:`relcp_mpi.basics.rational.read_exact`: integers, ``"p/q"``
strings, decimal strings, YAML floats through their shortest repr)::

    event_driven:
      dimension: 1                   # d >= 1 (optional; inferred from the first position)
      horizon: 10                    # T > 0
      eps_time: 1/1000000            # bracket width tolerance > 0
      eps_guard: 1/1000000           # guard residual tolerance > 0
      delta: 1/20                    # event separation bound > 0
      n_evt: 4                       # certified event-count bound (int >= 0)
      budget: 4                      # event budget (int >= 0)
      endpoint_policy: include       # include | pre-impact
      restitution: 1                 # scalar in [0, 1] or a symmetric P x P matrix
      field: [0]                     # uniform acceleration (length d), default 0
      precision: {grid_bits, round_bits, bound_bits: 64, max_refine: 200}
      ledger_tol: null               # bound on the error ledger (exceeded -> unresolved)
      spheres: [{position: [d], velocity: [d] (default 0), mass: 1, radius}, ...]   # P >= 2
      # or the arrays positions, velocities, masses, radii (masses/radii may be scalars)

:func:`check_event_section` appends every problem (dotted key, value) to the deck loader's list
(:func:`relcp_mpi.config.deck.validate`) and returns the frozen :class:`EventDrivenSection` when there was
none.  Initial spheres that overlap (exactly: ``|q_i - q_j|^2 < (r_i + r_j)^2``) are problems too.
"""
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from relcp_mpi.basics.rational import MAX_NUMBER_BITS, read_exact  # noqa: F401 (re-exported bound)
from relcp_mpi.config.problems import unknown_keys

EVENT_KEYS = {"dimension", "horizon", "eps_time", "eps_guard", "delta", "n_evt", "budget", "endpoint_policy",
              "restitution", "field", "precision", "ledger_tol", "spheres", "positions", "velocities", "masses",
              "radii"}
PRECISION_KEYS = {"grid_bits", "round_bits", "bound_bits", "max_refine"}
SPHERE_KEYS = {"position", "velocity", "mass", "radius"}
ENDPOINT_POLICIES = ("include", "pre-impact")

# bounds on the work and precision a deck can ask for (exit 2 naming the key instead of a run that never ends):
MAX_PRECISION_BITS = 4096   # precision.grid_bits / round_bits / bound_bits
MAX_REFINE = 10000          # precision.max_refine
MAX_EVENTS = 10 ** 6        # n_evt and budget
MAX_SPHERES = 2000          # P (every event inspects the P (P - 1) / 2 pairs exactly)
MAX_DIMENSION = 64


@dataclass(frozen=True)
class EventSphere:
    position: tuple           # (d,) Fractions
    velocity: tuple           # (d,) Fractions
    mass: Fraction            # > 0
    radius: Fraction          # > 0


@dataclass(frozen=True)
class EventPrecision:
    grid_bits: int            # minimum bits of the dyadic bracket grid, or None
    round_bits: int           # round reported post-reset states to 2**-round_bits, or None
    bound_bits: int           # precision of the certified sqrt / exp bounds
    max_refine: int           # bracket refinement steps before giving up


@dataclass(frozen=True)
class EventDrivenSection:
    """The validated ``event_driven`` section: exact numbers (Fractions), tuples."""
    horizon: Fraction
    eps_time: Fraction
    eps_guard: Fraction
    delta: Fraction
    n_evt: int
    budget: int
    endpoint_policy: str
    ledger_tol: Fraction      # or None
    precision: EventPrecision
    spheres: tuple            # of EventSphere (P >= 2)
    restitution: object       # Fraction, or a P x P tuple of tuples of Fractions
    field: tuple              # (d,) Fractions or None
    form: str                 # 'spheres' or 'positions': how the deck listed them (names the keys in messages)

    @property
    def dimension(self):
        return len(self.spheres[0].position)


def _num(sec, key, problems, path, positive=False, required=True, default=None):
    if key not in sec or sec[key] is None:
        if required:
            problems.append(f"{path}.{key}: required")
        return default
    try:
        x = read_exact(sec[key], f"{path}.{key}")
    except ValueError as exc:
        problems.append(str(exc))
        return default
    if positive and x <= 0:
        problems.append(f"{path}.{key}: must be > 0, got {sec[key]!r}")
    return x


def _int(sec, key, problems, path, required=True, default=None, minimum=0, maximum=None):
    if key not in sec or sec[key] is None:
        if required:
            problems.append(f"{path}.{key}: required")
        return default
    x = sec[key]
    if isinstance(x, bool) or not isinstance(x, int) or x < minimum or (maximum is not None and x > maximum):
        rng = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        shown = repr(x) if len(repr(x)) <= 40 else repr(x)[:40] + "..."
        problems.append(f"{path}.{key}: must be an integer {rng}, got {shown}")
        return default
    return x


def _vector(x, name, problems, d=None):
    if not isinstance(x, (list, tuple)) or not x:
        problems.append(f"{name}: expected a list of numbers, got {x!r}")
        return None
    try:
        out = tuple(read_exact(c, name) for c in x)
    except ValueError as exc:
        problems.append(str(exc))
        return None
    if d is not None and len(out) != d:
        problems.append(f"{name}: expected {d} components, got {len(out)} ({x!r})")
        return None
    return out


def _precision(sec, path, problems):
    prec = sec.get("precision") or {}
    if not isinstance(prec, dict):
        problems.append(f"{path}.precision: expected a mapping, got {prec!r}")
        prec = {}
    unknown_keys(prec, PRECISION_KEYS, path + ".precision", problems)
    pp = path + ".precision"
    return EventPrecision(
        grid_bits=_int(prec, "grid_bits", problems, pp, required=False, minimum=1, maximum=MAX_PRECISION_BITS),
        round_bits=_int(prec, "round_bits", problems, pp, required=False, minimum=1, maximum=MAX_PRECISION_BITS),
        bound_bits=_int(prec, "bound_bits", problems, pp, required=False, default=64, minimum=16,
                        maximum=MAX_PRECISION_BITS),
        max_refine=_int(prec, "max_refine", problems, pp, required=False, default=200, minimum=1,
                        maximum=MAX_REFINE))


def _spheres(sec, path, problems):
    """(positions, velocities, masses, radii, form) as lists, from ``spheres`` or the arrays."""
    d = _int(sec, "dimension", problems, path, required=False, minimum=1, maximum=MAX_DIMENSION)
    pos, vel, mas, rad = [], [], [], []
    form = "spheres" if "spheres" in sec else "positions"
    if "spheres" in sec:
        sph = sec["spheres"]
        if not isinstance(sph, list):
            problems.append(f"{path}.spheres: expected a list of {{position, velocity, mass, radius}}")
            sph = []
        for k, s in enumerate(sph):
            sp = f"{path}.spheres[{k}]"
            if not isinstance(s, dict):
                problems.append(f"{sp}: expected a mapping, got {s!r}")
                continue
            unknown_keys(s, SPHERE_KEYS, sp, problems)
            p = _vector(s.get("position"), f"{sp}.position", problems, d)
            if p is not None and d is None:
                d = len(p)
            pos.append(p)
            vel.append(_vector(s.get("velocity", [0] * (d or 1)), f"{sp}.velocity", problems, d))
            mas.append(_num(s, "mass", problems, sp, positive=True, required=False, default=Fraction(1)))
            rad.append(_num(s, "radius", problems, sp, positive=True))
    elif "positions" in sec:
        P0 = sec["positions"] if isinstance(sec["positions"], list) else []
        for k, p in enumerate(P0):
            p = _vector(p, f"{path}.positions[{k}]", problems, d)
            if p is not None and d is None:
                d = len(p)
            pos.append(p)
        V0 = sec.get("velocities", [[0] * (d or 1)] * len(pos))
        if not isinstance(V0, list) or len(V0) != len(pos):
            problems.append(f"{path}.velocities: expected {len(pos)} vectors")
        else:
            vel = [_vector(x, f"{path}.velocities[{k}]", problems, d) for k, x in enumerate(V0)]
        for key, lst in (("masses", mas), ("radii", rad)):
            val = sec.get(key, 1 if key == "masses" else None)
            if isinstance(val, list):
                if len(val) != len(pos):
                    problems.append(f"{path}.{key}: expected {len(pos)} entries, got {len(val)}")
                for k, x in enumerate(val):
                    lst.append(_num({key: x}, key, problems, f"{path}[{k}]", positive=True))
            else:
                x = _num({key: val}, key, problems, path, positive=True)
                lst.extend([x] * len(pos))
    else:
        problems.append(f"{path}.spheres: required (or give positions/velocities/masses/radii)")
    if len(pos) < 2 and ("spheres" in sec or "positions" in sec):
        problems.append(f"{path}.spheres: need at least 2 spheres, got {len(pos)}")
    if len(pos) > MAX_SPHERES:
        problems.append(f"{path}.spheres: at most {MAX_SPHERES} spheres, got {len(pos)}")
    return pos, vel, mas, rad, form, d


def _restitution(sec, path, problems, P):
    e = sec.get("restitution", 1)
    if isinstance(e, list):
        if not (len(e) == P and all(isinstance(r, list) and len(r) == P for r in e)):
            problems.append(f"{path}.restitution: expected a scalar or a {P} x {P} matrix")
            return None
        try:
            e = tuple(tuple(read_exact(x, f"{path}.restitution") for x in r) for r in e)
        except ValueError as exc:
            problems.append(str(exc))
            return None
        for i in range(P):
            for j in range(P):
                if i != j and not (0 <= e[i][j] <= 1):
                    problems.append(f"{path}.restitution[{i}][{j}]: must lie in [0, 1], got {e[i][j]}")
                if e[i][j] != e[j][i]:
                    problems.append(f"{path}.restitution: must be symmetric ([{i}][{j}] != [{j}][{i}])")
        return e
    x = _num({"restitution": e}, "restitution", problems, path)
    if x is not None and not (0 <= x <= 1):
        problems.append(f"{path}.restitution: must lie in [0, 1], got {e!r}")
    return x


def check_event_section(sec, problems, path="event_driven"):
    """Validate the raw ``event_driven`` mapping ``sec``; append every problem to ``problems`` and return the
    :class:`EventDrivenSection` (None when a problem was found)."""
    n0 = len(problems)
    if not isinstance(sec, dict):
        problems.append(f"{path}: required mapping, got {sec!r}")
        return None
    unknown_keys(sec, EVENT_KEYS, path, problems)
    scalars = {k: _num(sec, k, problems, path, positive=True) for k in ("horizon", "eps_time", "eps_guard", "delta")}
    n_evt = _int(sec, "n_evt", problems, path, maximum=MAX_EVENTS)
    budget = _int(sec, "budget", problems, path, maximum=MAX_EVENTS)
    pol = sec.get("endpoint_policy", "include")
    if pol not in ENDPOINT_POLICIES:
        problems.append(f"{path}.endpoint_policy: must be one of {', '.join(ENDPOINT_POLICIES)}, got {pol!r}")
    lt = _num(sec, "ledger_tol", problems, path, required=False)
    if lt is not None and lt < 0:
        problems.append(f"{path}.ledger_tol: must be >= 0, got {sec['ledger_tol']!r}")
    precision = _precision(sec, path, problems)
    pos, vel, mas, rad, form, d = _spheres(sec, path, problems)
    e = _restitution(sec, path, problems, len(pos))
    field = _vector(sec["field"], f"{path}.field", problems, d) if sec.get("field") is not None else None
    if len(problems) == n0:
        problems += _overlaps(pos, rad, form, path)
    if len(problems) > n0:
        return None
    spheres = tuple(EventSphere(p, v, m, r) for p, v, m, r in zip(pos, vel, mas, rad))
    return EventDrivenSection(n_evt=n_evt, budget=budget, endpoint_policy=pol, ledger_tol=lt, precision=precision,
                              spheres=spheres, restitution=e, field=field, form=form, **scalars)


def _overlaps(pos, rad, form, path, limit=5):
    """'spheres i and j overlap' problems of the initial state (exact: ||q_i - q_j||^2 < (r_i + r_j)^2),
    at most ``limit`` listed.  Float screening first (O(P^2) vectorised), exact check of the close pairs."""
    P = len(pos)
    if P < 2:
        return []
    X = np.array([[float(c) for c in p] for p in pos])
    R = np.array([float(r) for r in rad])
    i, j = np.triu_indices(P, 1)
    d2 = np.sum((X[i] - X[j]) ** 2, axis=1)
    near = d2 <= (R[i] + R[j]) ** 2 * (1 + 1e-9) + 1e-300
    out = []
    for a, b in zip(i[near], j[near]):
        a, b = int(a), int(b)
        e2 = sum((x - y) ** 2 for x, y in zip(pos[a], pos[b]))
        s2 = (rad[a] + rad[b]) ** 2
        if e2 < s2:
            depth = float(rad[a] + rad[b]) - float(e2) ** 0.5
            out.append(f"{path}.{form}[{a}] and {path}.{form}[{b}]: the initial spheres overlap (centre distance "
                       f"{float(e2) ** 0.5:.6g} < r_{a} + r_{b} = {float(rad[a] + rad[b]):.6g}, by {depth:.3g})")
            if len(out) >= limit:
                out.append(f"{path}.{form}: (further overlapping pairs not listed)")
                break
    return out
