"""YAML input decks: schema, defaults and up-front validation.

A deck is a YAML mapping.  Every key is checked before anything runs; all problems are collected and
reported together in one :class:`DeckError` whose message names each bad key (as a dotted path) and value.

Top-level sections (defaults in ``SCHEMA``)::

    name: str                      run name (used for output file names)
    engine: relcp | event_driven   which engine runs the deck
    seed: int                      seed of all random streams, keyed by (seed, step, body id)
    time:     {dt: float > 0, steps: int >= 0 | t_end: float, max_halvings: int >= 0 (redo a failed step as
               two of dt/2, down to dt/2^k; 0 = off), keep_halved_steps: int >= 0 (after a halved step keep
               its finer dt until this many steps in a row succeed; 0 = back to dt at once)}
    box:      {lo: [3 floats], hi: [3 floats], periodic: [3 bools]}
    walls:    list of {point: [3], normal: [3]}   planes; the normal points into the allowed side
    fluid:    {viscosity: float > 0 (mu [F T / L^2]), kT: float >= 0 (thermal energy [F L]; > 0 adds Brownian
               motion, overdamped Euler-Maruyama, see relcp_mpi.physics.brownian; 0 = none)}
    forces:   {body_force: [3], body_torque: [3]}  applied to every body (plus per-body force/torque)
    bodies:   list of explicit bodies (see BODY_KEYS)
    generate: list of generators (see GENERATOR_KEYS): lattice or random placement
    contact:  {model: relcp | snsd | multisphere, overlap_tol, skin, max_depth, initial_overlap_tol,
               ms_resolution (proxy spheres per body for the multisphere baseline), recheck_neighbors,
               line_contacts (relcp: level-0 rows at both ends of rod-rod and rod-wall line contacts),
               max_trial_rotation (rad; with time.max_halvings > 0 a step whose recursion tries a rotation
               larger than this is redone at dt/2 at once; 0 = never), row_rotation_limit (rad, default 0 =
               off: rows appended by the recursion are linearised at a configuration where no body has turned
               more than this from the start, instead of at the trial; see docs/ARCHITECTURE.md),
               row_depth_limit ([L], default 0 = off: a pair overlapping by more than this at a trial gets its
               appended row where the step's path brings it to about half that depth; see docs/ARCHITECTURE.md),
               carry_rows (relcp: level 0 of a step re-samples the material points of the previous step's
               appended rod-rod rows, see docs/ARCHITECTURE.md), gap_margin ([L], 0 <= gap_margin <=
               overlap_tol, default 0: every LCP row asks for a predicted gap >= gap_margin instead of >= 0;
               bodies at rest keep a gap of about gap_margin and fewer steps need another recursion level, see
               docs/ARCHITECTURE.md), strict_retries (int 0..8, default 0: a step whose LCP solve fails or
               whose recursion reaches max_depth is redone at the same dt up to this many times with the
               appended rows' limits row_rotation_limit / row_depth_limit halved (switched on when off), before
               any dt halving; see relcp_mpi.driver.policy), pinch_repairs (int 0..16, default 0; needs
               row_rotation_limit > 0: a grown LCP whose wall rows pinch a body (stepper/wall_pinch.py) is
               repaired in place up to this many times per step: that body's appended wall rows are dropped
               and its later rows linearised with its rotation limit halved per repair, instead of the
               whole step failing), drop_axial_torque (bool, default false: the rows exert no torque about
               the symmetry axis of spherocylinders and rings at the start of the step, which no frictionless
               contact force has, and a spin about that axis does not move it in the trial update; rows
               appended at turned trials otherwise spin such bodies; best with row_rotation_limit, see
               docs/ARCHITECTURE.md)}
    solver:   {method: a name of relcp_mpi.solver.registry (bbpgd, apgd, ipm, tao-<type>), tol, max_iter,
               options (the method's tunable options, e.g. {L_safety: 1.1} for apgd; the registry lists them),
               fallback (method tried on an LCP the first method fails on, default ipm; none = fail at once),
               petsc_options: [str]}
    parallel: {decomposition: cartesian|rcb, rebalance_every, imbalance_threshold, body_order: spatial|gid (the
               order of a rank's bodies in memory during a step: along a Morton curve (default) or by id;
               the same physics, the rounding of sums differs; see relcp_mpi.bodies.order)}
    output:   {directory, trajectory_every, format: hdf5 | gsd | [hdf5, gsd] (trajectory files <name>.h5 (+ .xdmf)
               and/or <name>.gsd; normalised to a list), checkpoint_every, keep_checkpoints, progress_every,
               restart}
    growth:   {model: linear (growth_rate [L/T] adds to L) | exponential (growth_rate r [1/T]: L + 2R grows as
               exp(r t)), division_noise (cells divide at divide_at (1 + division_noise U[-1, 1])),
               orientation_noise [rad], noise_axis: [3] (daughters turn about this axis by U[-1, 1] *
               orientation_noise; default: isotropic normal rotation vector), growth_rate_noise (each cell
               grows at growth_rate (1 + growth_rate_noise U[-1, 1]))}  (see relcp_mpi.physics.growth)
    debug:    {dump_lcp: DIR (dump grown LCPs there), dump_on: fail|always, check_on_fail (search an
               infeasibility certificate when a solve fails), check_rows (whole-LCP search up to this size),
               trace_levels: FILE (one JSON line per recursion level appended there: rows, offending pairs,
               iterations, trial rotations, ...)}
               (see relcp_mpi.stepper.lcp_debug)
    event_driven: the certified event engine's inputs, exact numbers (engine: event_driven only; schema and
               checks in relcp_mpi.config.events)
    flow:     {type: none | shear, rate: float [1/T], flow_axis: x|y|z, gradient_axis: x|y|z}  imposed
               background flow u_a = rate (x_g - box centre_g) that bodies follow without contacts (Jeffery
               rotation for non-spherical bodies); shear needs a box periodic along both axes and uses
               Lees--Edwards boundaries along the gradient axis; walls must be normal to the third axis
               (see relcp_mpi.physics.flow)

Units are the user's (consistent) units: lengths L, times T, viscosity mu; forces F = mu L^2 / T.
"""
import copy
import math
import os
import re
import sys

import numpy as np
import yaml

from relcp_mpi.basics.errors import DeckError  # noqa: F401 (the deck's error type, defined below the bodies)
from relcp_mpi.config.events import check_event_section
from relcp_mpi.config.problems import unknown_keys
from relcp_mpi.solver.registry import method_info, method_names


# ------------------------------------------------------------------------------------------------
# tiny schema language: each leaf is (type, default, check) where check(value) -> None | message
# every number of a deck must be finite and at most this large in magnitude, so squares and cubes (volumes,
# drag coefficients, squared distances) computed from it stay finite in float64
MAX_MAGNITUDE = 1e100
MAX_STEPS = 2 ** 32 - 1          # the random streams are keyed by step < 2**32 (parallel/random.py)
SEED_RANGE = 2 ** 64             # Philox key: 0 <= seed < 2**64
# halved Brownian sub-steps draw from streams [2**14, 2**15) of basics.random (relcp_mpi.physics.brownian)
MAX_BROWNIAN_HALVINGS = 13
MAX_BODIES = 2 ** 53             # global ids travel as float64 in packed rows: exact below 2**53


def _pos(v):
    return None if v > 0 else f"must be > 0, got {v}"


def _int_range(lo, hi):
    """Check: lo <= v <= hi (inclusive), for integers."""
    def check(v):
        return None if lo <= v <= hi else f"must be in [{lo}, {hi}], got {v}"
    return check


def _seed(v):
    return None if 0 <= v < SEED_RANGE else f"must be in [0, 2**64) (the random generator's key), got {v}"


def _name(v):
    """A run name becomes part of output file names: it must not be able to leave the output directory."""
    if not v or v.strip() != v:
        return f"must be a non-empty file name without leading/trailing blanks, got {v!r}"
    if "/" in v or "\\" in v or os.sep in v or (os.altsep and os.altsep in v):
        return f"must not contain path separators (it names files in output.directory), got {v!r}"
    if ".." in v or v == "." or "\0" in v:
        return f"must not contain '..' or NUL and must not be '.' (it names files in output.directory), got {v!r}"
    return None


def _nonneg(v):
    return None if v >= 0 else f"must be >= 0, got {v}"


def _unit_interval(v):
    return None if 0 <= v < 1 else f"must be in [0, 1), got {v}"


def _choice(*opts):
    def check(v):
        return None if v in opts else f"must be one of {list(opts)}, got {v!r}"
    return check


def _vec3(v):
    if not (isinstance(v, (list, tuple)) and len(v) == 3 and all(_is_number(c) for c in v)):
        return f"must be a list of 3 numbers (finite), got {v!r}"
    if any(abs(c) > MAX_MAGNITUDE for c in v):
        return f"components must be at most {MAX_MAGNITUDE:g} in magnitude, got {v!r}"
    return None


def _bool3(v):
    if not (isinstance(v, (list, tuple)) and len(v) == 3 and all(isinstance(c, bool) for c in v)):
        return f"must be a list of 3 booleans, got {v!r}"
    return None


def _str_list(v):
    if not (isinstance(v, list) and all(isinstance(c, str) for c in v)):
        return f"must be a list of strings, got {v!r}"
    return None


TRAJECTORY_FORMATS = ("hdf5", "gsd")


def _formats(v):
    items = v if isinstance(v, list) else [v]
    if not items or not all(isinstance(f, str) and f in TRAJECTORY_FORMATS for f in items) \
            or len(set(items)) != len(items):
        return f"must be one of {list(TRAJECTORY_FORMATS)} or a list of them without repeats, got {v!r}"
    return None


_OPTION_TYPES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "a mapping"}


def _check_solver_options(s, problems):
    """``solver.options``: a mapping of the chosen method's tunable options (the registry's table, so the deck,
    the solvers and the docs share one list); each value of the registered type.  Ints are accepted for float
    options; values are stored converted (e.g. 100 -> 100.0)."""
    opts = s["options"]
    if opts is None:
        s["options"] = {}
        return
    if not isinstance(opts, dict):
        problems.append(f"solver.options: must be a mapping of option: value, got {opts!r}")
        s["options"] = {}
        return
    if s["method"] not in method_names():
        return                           # solver.method is already reported
    known = method_info(s["method"]).options
    out = {}
    for name, val in opts.items():
        key = f"solver.options.{name}"
        typ = known.get(name)
        if typ is None:
            problems.append(f"{key}: not an option of method {s['method']!r} (its options: "
                            f"{', '.join(sorted(known)) or 'none'})")
            continue
        if typ is float and _is_number(val):
            val = float(val)
        elif typ is int and isinstance(val, int) and not isinstance(val, bool):
            if abs(val) > 2 ** 31 - 1:
                problems.append(f"{key}: must be at most {2 ** 31 - 1} in magnitude, got {val}")
                continue
        elif typ is dict and isinstance(val, dict) and all(isinstance(k, str) for k in val) \
                and all(isinstance(v, (str, int, float, bool)) or v is None for v in val.values()):
            val = dict(val)
        elif not (typ in (bool, str) and isinstance(val, typ)):
            problems.append(f"{key}: must be {_OPTION_TYPES[typ]}, got {val!r}")
            continue
        if typ is float and abs(val) > MAX_MAGNITUDE:
            problems.append(f"{key}: must be at most {MAX_MAGNITUDE:g} in magnitude, got {val!r}")
            continue
        out[name] = val
    s["options"] = out


def _is_number(v):
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:          # an int too large for a float
        return False


FLOAT, INT, STR, BOOL, ANY = "float", "int", "str", "bool", "any"


class _Invalid:
    """Placeholder for a value that failed validation (already reported)."""

    def __repr__(self):
        return "<invalid>"


INVALID = _Invalid()

SCHEMA = {
    "name": (STR, "run", _name),
    "engine": (STR, "relcp", _choice("relcp", "event_driven")),
    "seed": (INT, 1, _seed),
    "time": {
        "dt": (FLOAT, None, _pos),
        "steps": (INT, None, _int_range(0, MAX_STEPS)),
        "t_end": (FLOAT, None, _nonneg),
        "max_halvings": (INT, 0, _int_range(0, 30)),
        "keep_halved_steps": (INT, 0, _nonneg),
    },
    "box": {
        "lo": (ANY, [-10.0, -10.0, -10.0], _vec3),
        "hi": (ANY, [10.0, 10.0, 10.0], _vec3),
        "periodic": (ANY, [False, False, False], _bool3),
    },
    "walls": (ANY, [], None),
    "fluid": {"viscosity": (FLOAT, 1.0, _pos), "kT": (FLOAT, 0.0, _nonneg)},
    "forces": {
        "body_force": (ANY, [0.0, 0.0, 0.0], _vec3),
        "body_torque": (ANY, [0.0, 0.0, 0.0], _vec3),
    },
    "bodies": (ANY, [], None),
    "generate": (ANY, [], None),
    "contact": {
        "model": (STR, "relcp", _choice("relcp", "snsd", "multisphere")),
        "ms_resolution": (INT, 8, _int_range(1, 4096)),
        "overlap_tol": (FLOAT, 1e-3, _pos),
        "skin": (FLOAT, None, _nonneg),
        "max_depth": (INT, 50, _int_range(1, 100000)),
        "initial_overlap_tol": (FLOAT, None, _nonneg),
        "recheck_neighbors": (BOOL, True, None),
        "line_contacts": (BOOL, True, None),
        "max_trial_rotation": (FLOAT, 0.35, _nonneg),
        "row_rotation_limit": (FLOAT, 0.0, _nonneg),
        "row_depth_limit": (FLOAT, 0.0, _nonneg),
        "carry_rows": (BOOL, False, None),
        "gap_margin": (FLOAT, 0.0, _nonneg),
        "strict_retries": (INT, 0, _int_range(0, 8)),
        "pinch_repairs": (INT, 0, _int_range(0, 16)),
        "drop_axial_torque": (BOOL, False, None),
    },
    "solver": {
        "method": (STR, "bbpgd", _choice(*method_names())),
        "tol": (FLOAT, None, _pos),
        "max_iter": (INT, 100000, _int_range(1, 2 ** 31 - 1)),
        "petsc_options": (ANY, [], _str_list),
        "options": (ANY, {}, None),      # method options, checked against the registry below
        "fallback": (STR, "ipm", _choice("none", *method_names())),
    },
    "parallel": {
        "decomposition": (STR, "cartesian", _choice("cartesian", "rcb")),
        "rebalance_every": (INT, 0, _int_range(0, MAX_STEPS)),
        "imbalance_threshold": (FLOAT, 1.25, _pos),
        "body_order": (STR, "spatial", _choice("spatial", "gid")),
    },
    "output": {
        "directory": (STR, None, None),
        "trajectory_every": (INT, 10, _int_range(0, MAX_STEPS)),
        "format": (ANY, "hdf5", _formats),
        "checkpoint_every": (INT, 0, _int_range(0, MAX_STEPS)),
        "keep_checkpoints": (INT, 3, _int_range(1, 10 ** 6)),
        "progress_every": (INT, 10, _int_range(0, MAX_STEPS)),
        "restart": (ANY, None, None),
    },
    "event_driven": (ANY, None, None),
    "growth": {
        "model": (STR, "linear", _choice("linear", "exponential")),
        "division_noise": (FLOAT, 0.0, _unit_interval),
        "orientation_noise": (FLOAT, 0.02, _nonneg),
        "noise_axis": (ANY, None, _vec3),
        "growth_rate_noise": (FLOAT, 0.0, _unit_interval),
    },
    "flow": {
        "type": (STR, "none", _choice("none", "shear")),
        "rate": (FLOAT, 0.0, None),
        "flow_axis": (STR, "x", _choice("x", "y", "z")),
        "gradient_axis": (STR, "y", _choice("x", "y", "z")),
    },
    "debug": {
        "dump_lcp": (STR, None, None),
        "dump_on": (STR, "fail", _choice("fail", "always")),
        "check_on_fail": (BOOL, True, None),
        "check_rows": (INT, 5000, _pos),
        "trace_levels": (STR, None, None),
    },
}

BODY_KEYS = {
    "shape": (STR, None, None),
    "radius": (FLOAT, None, _pos),
    "length": (FLOAT, None, _nonneg),
    "axes": (ANY, None, _vec3),
    "position": (ANY, None, _vec3),
    "orientation": (ANY, [1.0, 0.0, 0.0, 0.0], None),
    "force": (ANY, [0.0, 0.0, 0.0], _vec3),
    "torque": (ANY, [0.0, 0.0, 0.0], _vec3),
    "velocity": (ANY, [0.0, 0.0, 0.0], _vec3),
    "angular_velocity": (ANY, [0.0, 0.0, 0.0], _vec3),
    "growth_rate": (FLOAT, 0.0, _nonneg),
    "divide_at": (FLOAT, 0.0, _nonneg),
    "ring_radius": (FLOAT, None, _pos),
    "fixed": (BOOL, False, None),
}

GENERATOR_KEYS = dict(BODY_KEYS)
GENERATOR_KEYS.pop("position")
GENERATOR_KEYS.update({
    "count": (INT, None, _int_range(0, MAX_BODIES)),
    "method": (STR, "lattice", _choice("lattice", "random")),
    "region": (ANY, None, None),
    "spacing": (FLOAT, None, _pos),
    "orientation": (ANY, "random", None),
})


def _type_ok(kind, v):
    if kind == FLOAT:
        return _is_number(v)
    if kind == INT:
        return isinstance(v, int) and not isinstance(v, bool)
    if kind == STR:
        return isinstance(v, str)
    if kind == BOOL:
        return isinstance(v, bool)
    return True


def fill_defaults(raw):
    """A copy of the deck mapping ``raw`` with every key the schema knows and ``raw`` lacks (or sets to null) filled
    with its default, without checking anything; unknown keys are kept as they are.  For comparing a deck
    stored by another version (which may not validate any more) with a validated one: keys added since then
    compare equal when the new deck uses their default."""
    def fill(schema, data):
        out = dict(data) if isinstance(data, dict) else {}
        for key, spec in schema.items():
            if isinstance(spec, dict):
                out[key] = fill(spec, out.get(key))
            elif out.get(key) is None:
                out[key] = copy.deepcopy(spec[1])
        return out
    out = fill(SCHEMA, raw if isinstance(raw, dict) else {})
    for section, keys in (("bodies", BODY_KEYS), ("generate", GENERATOR_KEYS)):
        if isinstance(out.get(section), list):
            out[section] = [fill(keys, b) if isinstance(b, dict) else b for b in out[section]]
    return out


def _apply(schema, data, path, problems):
    """Check ``data`` against ``schema``; return a new dict with defaults filled in."""
    out = {}
    if data is None:
        data = {}
    if not isinstance(data, dict):
        problems.append(f"{path or 'deck'}: must be a mapping, got {type(data).__name__}")
        return out
    unknown_keys(data, schema, path, problems)
    for key, spec in schema.items():
        kp = f"{path}.{key}" if path else key
        if isinstance(spec, dict):
            out[key] = _apply(spec, data.get(key), kp, problems)
            continue
        kind, default, check = spec
        if key not in data or data[key] is None:
            out[key] = default
            continue
        v = data[key]
        if kind == FLOAT and isinstance(v, int) and not isinstance(v, bool) and _is_number(v):
            v = float(v)
        if not _type_ok(kind, v):
            finite = " (finite)" if kind == FLOAT and isinstance(v, (int, float)) and not isinstance(v, bool) else ""
            shown = repr(v) if len(repr(v)) <= 60 else repr(v)[:40] + f"... ({len(repr(v))} characters)"
            problems.append(f"{kp}: expected {kind}{finite}, got {shown}")
            out[key] = INVALID
            continue
        if kind == FLOAT and abs(v) > MAX_MAGNITUDE:
            problems.append(f"{kp}: must be at most {MAX_MAGNITUDE:g} in magnitude, got {v!r}")
            out[key] = INVALID
            continue
        if check is not None:
            msg = check(v)
            if msg:
                problems.append(f"{kp}: {msg}")
                out[key] = INVALID
                continue
        out[key] = v
    return out


def _check_orientation(o, kp, problems):
    if isinstance(o, str):
        if o not in ("random", "identity"):
            problems.append(f"{kp}: must be 'random', 'identity', a quaternion [w,x,y,z] or "
                            f"{{axis: [3], angle: float}}, got {o!r}")
        return
    if isinstance(o, dict):
        if set(o) != {"axis", "angle"} or _vec3(o.get("axis")) or not _is_number(o.get("angle")) \
                or abs(o["angle"]) > MAX_MAGNITUDE:
            problems.append(f"{kp}: axis-angle orientation needs exactly axis: [3 numbers] and angle: number")
        elif np.linalg.norm(o["axis"]) == 0:
            problems.append(f"{kp}.axis: must be nonzero")
        return
    if not (isinstance(o, (list, tuple)) and len(o) == 4 and all(_is_number(c) for c in o)) \
            or any(abs(c) > MAX_MAGNITUDE for c in o) or np.linalg.norm(o) == 0:
        problems.append(f"{kp}: quaternion must be 4 numbers, not all zero, got {o!r}")


def _check_shape_keys(b, kp, problems):
    shape = b.get("shape")
    need = {"sphere": ["radius"], "spherocylinder": ["radius", "length"], "ellipsoid": ["axes"],
            "ring": ["radius", "ring_radius"]}
    if shape not in need:
        problems.append(f"{kp}.shape: unknown shape {shape!r} (expected sphere, spherocylinder, ellipsoid or ring)")
        return
    for k in need[shape]:
        if b.get(k) is None:
            problems.append(f"{kp}.{k}: required for shape {shape}")
    extra = {"radius", "length", "axes", "ring_radius"} - set(need[shape])
    for k in sorted(extra):
        if b.get(k) is not None:
            problems.append(f"{kp}.{k}: not a parameter of shape {shape}")
    if shape == "ring" and isinstance(b.get("radius"), float) and isinstance(b.get("ring_radius"), float) \
            and b["radius"] >= b["ring_radius"]:
        problems.append(f"{kp}.radius: the tube radius must be smaller than ring_radius ({b['ring_radius']}), "
                        f"got {b['radius']}")
    if shape == "ellipsoid" and b.get("axes") not in (None, INVALID) and not _vec3(b["axes"]):
        if min(b["axes"]) <= 0:
            problems.append(f"{kp}.axes: semi-axes must all be > 0, got {b['axes']}")


def _check_region(r, kp, problems, box):
    if r is None:
        return
    if not isinstance(r, dict) or set(r) - {"lo", "hi"} or _vec3(r.get("lo")) or _vec3(r.get("hi")):
        problems.append(f"{kp}: must be {{lo: [3 numbers], hi: [3 numbers]}}, got {r!r}")
        return
    if np.any(np.asarray(r["hi"]) <= np.asarray(r["lo"])):
        problems.append(f"{kp}: hi must exceed lo on every axis, got lo={r['lo']} hi={r['hi']}")
        return
    if _vec3(box["lo"]) or _vec3(box["hi"]):
        return
    blo, bhi = np.asarray(box["lo"], float), np.asarray(box["hi"], float)
    out = [ax for k, ax in enumerate("xyz") if r["lo"][k] < blo[k] or r["hi"][k] > bhi[k]]
    if out:
        problems.append(f"{kp}: region lo={r['lo']} hi={r['hi']} extends outside the box lo={box['lo']} "
                        f"hi={box['hi']} along {', '.join(out)} (bodies would be placed outside the domain)")


def _valid(*vals):
    return all(v is not None and v is not INVALID for v in vals)


def _speed_scale(deck):
    """Rough largest unconstrained speed [L/T] of any body: imposed speed plus |force| / (6 pi mu r), with r
    the body's smallest size parameter (drag of a sphere of that radius; other shapes drag more)."""
    mu = deck["fluid"]["viscosity"]
    forces = deck["forces"]
    if not _valid(mu) or _vec3(forces["body_force"]):
        return 0.0
    bf = np.asarray(forces["body_force"], float)
    vmax = 0.0
    for b in list(deck["bodies"]) + list(deck["generate"]):
        if not isinstance(b, dict) or _vec3(b.get("force")) or _vec3(b.get("velocity")):
            continue
        r = _min_size(b)
        if r is None:
            continue
        f = float(np.linalg.norm(np.add(b["force"], bf)))
        v = float(np.linalg.norm(b["velocity"])) + f / (6 * math.pi * mu * r)
        vmax = max(vmax, v)
    return vmax + _flow_speed(deck)


def _flow_speed(deck):
    """Largest speed of the imposed flow in the box [L/T]: |rate| L_g / 2 (0 without flow)."""
    f, box = deck.get("flow") or {}, deck["box"]
    if f.get("type") != "shear" or not _valid(f.get("rate")) or f.get("gradient_axis") not in ("x", "y", "z") \
            or _vec3(box["lo"]) or _vec3(box["hi"]):
        return 0.0
    g = "xyz".index(f["gradient_axis"])
    return 0.5 * abs(f["rate"]) * abs(float(box["hi"][g]) - float(box["lo"][g]))


def _check_flow(deck, problems):
    """A shear flow needs distinct axes, a box periodic along both (Lees--Edwards) and walls normal to the
    third axis only."""
    f = deck["flow"]
    if f["type"] != "shear" or not _valid(f["flow_axis"], f["gradient_axis"]):
        return
    a, g = f["flow_axis"], f["gradient_axis"]
    if a == g:
        problems.append(f"flow.gradient_axis: must differ from flow.flow_axis ({a!r})")
        return
    per = deck["box"]["periodic"]
    if not _bool3(per):
        for ax in (a, g):
            if not per["xyz".index(ax)]:
                problems.append(f"box.periodic: a shear flow needs a periodic box along its {ax} axis "
                                f"(flow along {a}, Lees-Edwards boundaries along {g}), got {per}")
    for k, w in enumerate(deck["walls"]):
        if isinstance(w, dict) and not _vec3(w.get("normal")):
            nrm = np.asarray(w["normal"], float)
            if abs(nrm["xyz".index(a)]) > 0 or abs(nrm["xyz".index(g)]) > 0:
                problems.append(f"walls[{k}].normal: with a shear flow (flow {a}, gradient {g}) walls must be "
                                f"normal to the third axis, got {w['normal']}")


def _min_size(b):
    """The smallest positive size parameter [L] (radius, length, ring radius, semi-axis) of a body or
    generator mapping, or None."""
    sizes = [v for k in ("radius", "length", "ring_radius") for v in [b.get(k)] if isinstance(v, float) and v > 0]
    if isinstance(b.get("axes"), list) and not _vec3(b["axes"]):
        sizes += [float(a) for a in b["axes"] if a > 0]
    return min(sizes) if sizes else None


def _check_brownian(deck, problems):
    """fluid.kT > 0: the relcp engine only, sub-step depth within the noise streams, and a time step whose rms
    Brownian displacement (3D, of a sphere of the body's smallest size r) sqrt(6 kT dt / (6 pi mu r)) stays
    below that size r, so bodies cannot jump through each other between the start and the trial configuration."""
    kT, mu, dt = deck["fluid"]["kT"], deck["fluid"]["viscosity"], deck["time"]["dt"]
    if not _valid(kT) or kT == 0:
        return
    if deck["engine"] != "relcp":
        problems.append(f"fluid.kT: Brownian motion needs engine relcp, got engine {deck['engine']!r}")
    mh = deck["time"]["max_halvings"]
    if _valid(mh) and mh > MAX_BROWNIAN_HALVINGS:
        problems.append(f"time.max_halvings: at most {MAX_BROWNIAN_HALVINGS} with fluid.kT > 0 (the Brownian noise of "
                        f"halved steps), got {mh}")
    if not _valid(mu, dt):
        return
    for sec in ("bodies", "generate"):
        for k, b in enumerate(deck[sec]):
            r = _min_size(b) if isinstance(b, dict) else None
            if r is None:
                continue
            step = math.sqrt(kT * dt / (math.pi * mu * r))
            if step > r:
                problems.append(f"time.dt: {dt:g} is too large for Brownian motion: {sec}[{k}] (size {r:g}) moves "
                                f"~{step:.3g} per step (rms, kT {kT:g}), more than its size; bodies could pass "
                                f"through each other within a step")
                return


def _check_ranges(deck, problems):
    """Ranges that involve several keys: the time span, dt against the box, bodies inside the box."""
    t, box = deck["time"], deck["box"]
    dt, steps, t_end = t["dt"], t["steps"], t["t_end"]
    if _valid(dt, t_end) and t_end / dt > MAX_STEPS:
        problems.append(f"time.t_end: t_end / dt = {t_end / dt:.3g} steps, more than the supported "
                        f"{MAX_STEPS} (2**32 - 1)")
    if _valid(dt, steps) and steps * dt > MAX_MAGNITUDE:
        problems.append(f"time.dt: steps * dt = {steps * dt:.3g} exceeds {MAX_MAGNITUDE:g} (simulated time "
                        f"would overflow)")
    if _vec3(box["lo"]) or _vec3(box["hi"]) or _bool3(box["periodic"]):
        return
    lo, hi = np.asarray(box["lo"], float), np.asarray(box["hi"], float)
    if np.any(hi <= lo):
        return
    if _valid(dt):
        v = _speed_scale(deck)
        if v * dt > float(np.max(hi - lo)):
            problems.append(f"time.dt: {dt:g} is too large for the box: a free body moves up to ~{v * dt:.3g} "
                            f"per step (speed ~{v:.3g} from its force, drag and imposed velocity), more than the "
                            f"largest box extent {float(np.max(hi - lo)):g}")
    per = box["periodic"]
    total = len(deck["bodies"]) + sum(g["count"] for g in deck["generate"]
                                      if isinstance(g, dict) and isinstance(g.get("count"), int))
    if total > MAX_BODIES:
        problems.append(f"generate: {total} bodies in total, more than the supported 2**53")
    for k, b in enumerate(deck["bodies"]):
        if not isinstance(b, dict) or _vec3(b.get("position")):
            continue
        x = b["position"]
        out = [ax for a, ax in enumerate("xyz") if not per[a] and not lo[a] <= x[a] <= hi[a]]
        if out:
            problems.append(f"bodies[{k}].position: {x} lies outside the box lo={box['lo']} hi={box['hi']} "
                            f"along the non-periodic {', '.join(out)}")


def validate(raw, source="deck", _consume=False):
    """Validate a parsed deck mapping; return the normalised deck (defaults filled).

    Raises :class:`DeckError` listing every problem found.  (``_consume``, for :func:`loads` only: the entries
    of ``raw``'s body and generator lists are dropped from them as they are validated, so the parsed and the
    normalised entries of a long body list do not coexist.)"""
    problems = []
    if not isinstance(raw, dict):
        raise DeckError([f"top level must be a mapping of sections, got {type(raw).__name__}"], source)
    deck = _apply(SCHEMA, raw, "", problems)

    t = deck["time"]
    if deck["engine"] == "relcp":
        if t["dt"] is None:
            problems.append("time.dt: required")
        if t["steps"] is None and t["t_end"] is None:
            problems.append("time: give steps or t_end")
        if t["steps"] is not None and t["t_end"] is not None:
            problems.append("time: give only one of steps and t_end")
        if not deck["bodies"] and not deck["generate"]:
            problems.append("bodies: the deck defines no bodies (give bodies or generate)")
    else:
        # the event engine's section: exact numbers, every problem by dotted key into the same list
        check_event_section(deck["event_driven"], problems)
    if deck["engine"] == "relcp" and deck["event_driven"] is not None:
        problems.append("event_driven: only read by engine: event_driven (this deck has engine relcp)")

    box = deck["box"]
    if not _vec3(box["lo"]) and not _vec3(box["hi"]):
        if np.any(np.asarray(box["hi"], float) <= np.asarray(box["lo"], float)):
            problems.append(f"box: hi must exceed lo on every axis, got lo={box['lo']} hi={box['hi']}")

    if not isinstance(deck["walls"], list):
        problems.append("walls: must be a list of {point, normal}")
        deck["walls"] = []
    for k, w in enumerate(deck["walls"]):
        kp = f"walls[{k}]"
        if not isinstance(w, dict) or set(w) != {"point", "normal"} or _vec3(w.get("point")) or _vec3(w.get("normal")):
            problems.append(f"{kp}: must be {{point: [3 numbers], normal: [3 numbers]}}, got {w!r}")
        elif np.linalg.norm(w["normal"]) == 0:
            problems.append(f"{kp}.normal: must be nonzero")

    gr = deck["growth"]
    noise = gr["division_noise"]
    if isinstance(gr["noise_axis"], list) and not _vec3(gr["noise_axis"]) and np.linalg.norm(gr["noise_axis"]) == 0:
        problems.append("growth.noise_axis: must be nonzero")
    for section, keys in (("bodies", BODY_KEYS), ("generate", GENERATOR_KEYS)):
        items = deck[section]
        if not isinstance(items, list):
            problems.append(f"{section}: must be a list")
            deck[section] = []
            continue
        norm = []
        for k, b in enumerate(items):
            kp = f"{section}[{k}]"
            nb = _apply(keys, b, kp, problems)
            if isinstance(b, dict):
                _check_shape_keys(nb, kp, problems)
                if nb["orientation"] is not INVALID:
                    _check_orientation(nb["orientation"], kp + ".orientation", problems)
                if section == "bodies" and nb["position"] is None:
                    problems.append(f"{kp}.position: required")
                if section == "generate":
                    if nb["count"] is None:
                        problems.append(f"{kp}.count: required")
                    _check_region(nb["region"], kp + ".region", problems, box)
                if nb.get("growth_rate") not in (None, INVALID, 0.0) and nb["shape"] != "spherocylinder":
                    problems.append(f"{kp}.growth_rate: only spherocylinders can grow")
                if nb.get("divide_at") not in (None, INVALID, 0.0):
                    if nb["shape"] != "spherocylinder":
                        problems.append(f"{kp}.divide_at: only spherocylinders can divide")
                    elif isinstance(nb.get("radius"), float) and isinstance(nb.get("length"), float) \
                            and nb["divide_at"] <= max(nb["length"], 2 * nb["radius"]):
                        problems.append(f"{kp}.divide_at: must exceed the initial length {nb['length']} and "
                                        f"2*radius {2 * nb['radius']} (daughters have length L/2 - R > 0)")
                    elif isinstance(nb.get("radius"), float) and isinstance(noise, float) and noise > 0 \
                            and nb["divide_at"] * (1 - noise) <= 2 * nb["radius"]:
                        problems.append(f"{kp}.divide_at: with growth.division_noise {noise} cells may divide at "
                                        f"{nb['divide_at'] * (1 - noise):g}, which must exceed 2*radius "
                                        f"{2 * nb['radius']} (daughters have length L/2 - R > 0)")
            norm.append(nb)
            if _consume:
                items[k] = None
        deck[section] = norm

    _check_ranges(deck, problems)
    _check_brownian(deck, problems)
    _check_flow(deck, problems)
    kinds = {b.get("shape") for sec in ("bodies", "generate") for b in deck[sec] if isinstance(b, dict)}
    if "ring" in kinds and kinds & {"ellipsoid", "spherocylinder"}:
        problems.append("bodies: rings can only be combined with spheres and walls (ring-ellipsoid and "
                        "ring-spherocylinder contact are not implemented)")
    dbg = deck["debug"]
    # only 'always' needs the directory: 'fail' is the default, and a validated deck is validated again as is
    # (Simulation.from_deck of a mapping), so the check must pass on its own output
    if dbg["dump_on"] == "always" and dbg["dump_lcp"] is None:
        problems.append("debug.dump_on: needs debug.dump_lcp (the directory for the dumps)")
    c, s = deck["contact"], deck["solver"]
    if isinstance(c["pinch_repairs"], int) and c["pinch_repairs"] > 0 and not c["row_rotation_limit"]:
        problems.append("contact.pinch_repairs: needs contact.row_rotation_limit > 0 (a repaired body's rows are "
                        "linearised with that limit halved)")
    _check_solver_options(s, problems)
    if isinstance(s["tol"], float) and isinstance(c["overlap_tol"], float) and s["tol"] > c["overlap_tol"]:
        problems.append(f"solver.tol: must be <= contact.overlap_tol ({c['overlap_tol']}), got {s['tol']}")
    if isinstance(c["gap_margin"], float) and isinstance(c["overlap_tol"], float) \
            and c["gap_margin"] > c["overlap_tol"]:
        problems.append(f"contact.gap_margin: must be <= contact.overlap_tol ({c['overlap_tol']}), got "
                        f"{c['gap_margin']}")
    if problems:
        raise DeckError(problems, source)
    if s["tol"] is None:
        s["tol"] = 0.1 * c["overlap_tol"]
    if c["initial_overlap_tol"] is None:
        c["initial_overlap_tol"] = c["overlap_tol"]
    if not isinstance(deck["output"]["format"], list):
        deck["output"]["format"] = [deck["output"]["format"]]
    if deck["output"]["directory"] is None:
        deck["output"]["directory"] = f"out/{deck['name']}"
    return deck


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key, first, again):
        shown = repr(key) if len(repr(key)) <= 60 else repr(key)[:40] + "..."
        super().__init__(f"duplicated key {shown} (at lines {first} and {again}; "
                         f"YAML would silently keep the second)")


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (PyYAML silently keeps the last one)."""


def _construct_unique_mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:           # unhashable key: the base constructor reports it
            continue
        line = key_node.start_mark.line + 1
        if first is not None:
            raise _DuplicateKey(key, first, line)
        seen[key] = line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def load(path):
    """Read and validate a deck file; returns ``(deck, text)``.  Raises DeckError with the file name
    (a missing file, a file that is not UTF-8 text -- naming the byte offset --, malformed YAML,
    duplicated keys, or any schema problem)."""
    path = str(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise DeckError(["deck file does not exist"], source=path) from None
    except IsADirectoryError:
        raise DeckError(["is a directory, not a deck file"], source=path) from None
    except OSError as exc:
        raise DeckError([f"cannot read deck file: {exc.strerror}"], source=path) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DeckError([f"not a UTF-8 text file: invalid byte 0x{data[exc.start]:02x} at byte offset "
                         f"{exc.start} ({exc.reason})"], source=path) from None
    return loads(text, source=path), text


_ALIASED = object()      # key of the anchors table set when an alias was read (values shared by several keys)
_INTERN_MAX = 64        # string scalars up to this length are interned by the stream reader


class _NotStreamable(Exception):
    """The streaming reader met something it leaves to the full loader (merge keys, explicit collection tags,
    complex keys, several documents, an error)."""


_SAFE_MAP_TAGS = (None, "!", "tag:yaml.org,2002:map")
_SAFE_SEQ_TAGS = (None, "!", "tag:yaml.org,2002:seq")


def _stream_value(loader, anchors):
    """The Python value of the next node of ``loader``'s event stream (recursive over collections)."""
    ev = loader.get_event()
    if isinstance(ev, yaml.AliasEvent):
        if ev.anchor not in anchors:
            raise _NotStreamable("undefined alias")
        anchors[_ALIASED] = True
        return anchors[ev.anchor]
    if isinstance(ev, yaml.ScalarEvent):
        tag = ev.tag
        if tag is None or tag == "!":
            tag = loader.resolve(yaml.ScalarNode, ev.value, ev.implicit)
        if tag == "tag:yaml.org,2002:merge":
            raise _NotStreamable("merge key")
        node = yaml.ScalarNode(tag, ev.value, ev.start_mark, ev.end_mark, style=ev.style)
        make = loader.yaml_constructors.get(tag, loader.yaml_constructors[None])
        value = make(loader, node)           # safe scalar constructors return the value (no generators)
        if type(value) is str and len(value) <= _INTERN_MAX:
            value = sys.intern(value)        # keys and names repeat per body: one string each, not one per body
    elif isinstance(ev, yaml.SequenceStartEvent):
        if ev.tag not in _SAFE_SEQ_TAGS:
            raise _NotStreamable("tagged sequence")
        value = []
        if ev.anchor is not None:
            anchors[ev.anchor] = value
        while not loader.check_event(yaml.SequenceEndEvent):
            value.append(_stream_value(loader, anchors))
        loader.get_event()
        return value
    elif isinstance(ev, yaml.MappingStartEvent):
        if ev.tag not in _SAFE_MAP_TAGS:
            raise _NotStreamable("tagged mapping")
        value, lines = {}, {}
        if ev.anchor is not None:
            anchors[ev.anchor] = value
        while not loader.check_event(yaml.MappingEndEvent):
            line = loader.peek_event().start_mark.line + 1
            key = _stream_value(loader, anchors)
            if isinstance(key, (list, dict)):
                raise _NotStreamable("complex key")
            if key in lines:
                raise _DuplicateKey(key, lines[key], line)
            lines[key] = line
            value[key] = _stream_value(loader, anchors)
        loader.get_event()
        return value
    else:
        raise _NotStreamable(f"unexpected {type(ev).__name__}")
    if ev.anchor is not None:
        anchors[ev.anchor] = value
    return value


def _load_streaming(text):
    return _load_streaming_aliased(text)[0]


def _load_streaming_aliased(text):
    """The YAML document ``text`` as Python objects, built straight from libyaml's event stream.

    ``yaml.load`` first composes the whole node tree (a Python object with two marks per scalar: ~100 MiB
    for a deck of 8,000 explicit bodies, on every rank, and 20 s with the pure-Python parser); this builds the
    values while the events pass, so the peak is the result itself.  Raises :class:`_NotStreamable` for
    anything it leaves to the full loader (which then gives the same value, or the established error)."""
    if not getattr(yaml, "__with_libyaml__", False):
        raise _NotStreamable("no libyaml")
    yaml.reader.Reader(text)                 # the pure-Python reader's character check (same errors as before)
    loader = yaml.CSafeLoader(text)
    try:
        try:
            loader.get_event()               # StreamStart
            if loader.check_event(yaml.StreamEndEvent):
                return None, False
            loader.get_event()               # DocumentStart
            anchors = {}
            value = _stream_value(loader, anchors)
            loader.get_event()               # DocumentEnd
            if not loader.check_event(yaml.StreamEndEvent):
                raise _NotStreamable("several documents")
        except (yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, _DuplicateKey):
                raise
            raise _NotStreamable(str(exc)) from None
        return value, _ALIASED in anchors
    finally:
        loader.dispose()


def safe_load(text):
    """``yaml.safe_load(text)``, built from libyaml's event stream when :func:`_load_streaming` can (no node tree
    of the whole document: ~100 MiB and seconds for a deck of 8,000 bodies); the same value, and whatever the stream
    reader leaves (duplicate keys included: the last one wins there) goes to ``yaml.safe_load`` itself."""
    try:
        return _load_streaming(text)
    except (_NotStreamable, _DuplicateKey):
        return yaml.safe_load(text)


# YAML 1.1 (PyYAML) reads a number in exponent notation without a decimal point ("5e-4", "1E6") as a string;
# YAML 1.2 and users mean a float.  The event-driven section is left alone: it reads exact decimal and rational
# literals from strings itself (relcp_mpi.config.events).
_EXP_FLOAT = re.compile(r"[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+")


def _text_keys(*schemas):
    """Keys whose values are text by the schema (kind STR, or a list of strings): never read as numbers."""
    out = set()
    for schema in schemas:
        for k, spec in schema.items():
            if isinstance(spec, dict):
                out |= _text_keys(spec)
            elif spec[0] == STR or spec[2] is _str_list:
                out.add(k)
    return out


def _exponent_floats(value, key=None, in_place=False):
    """``value`` with every string in exponent notation without a point read as a float (recursively; the
    ``event_driven`` section, the values of text keys (a run name "1e3") and literals out of a double's range are
    kept as they are).  With ``in_place`` the dicts and lists of ``value`` are changed instead of copied (no copy
    of every body's dict and lists): only for a value no other code holds and whose containers are each
    reachable once (no aliases)."""
    if key == "event_driven" or key in _TEXT_KEYS:
        return value
    if isinstance(value, dict):
        if not in_place:
            return {k: _exponent_floats(v, k) for k, v in value.items()}
        for k, v in value.items():           # values replaced, keys unchanged: safe while iterating
            value[k] = _exponent_floats(v, k, True)
        return value
    if isinstance(value, list):
        if not in_place:
            return [_exponent_floats(v) for v in value]
        for i, v in enumerate(value):
            value[i] = _exponent_floats(v, None, True)
        return value
    if isinstance(value, str) and _EXP_FLOAT.fullmatch(value):
        f = float(value.replace("_", ""))
        mantissa = float(value.replace("_", "").lower().split("e")[0])
        if math.isfinite(f) and (f != 0.0 or mantissa == 0.0):
            return f
    return value


_TEXT_KEYS = _text_keys(SCHEMA, BODY_KEYS, GENERATOR_KEYS)


def loads(text, source="deck"):
    try:
        try:
            raw, aliased = _load_streaming_aliased(text)
            own = not aliased                # every container is ours and reachable once
        except _NotStreamable:
            raw = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
            own = False
    except yaml.reader.ReaderError as exc:
        # a character YAML does not accept (control characters, NUL): name its byte offset in the file
        pos = int(getattr(exc, "position", 0) or 0)
        off = len(text[:pos].encode("utf-8"))
        ch = exc.character
        what = f"#x{ch:04x}" if isinstance(ch, int) else repr(ch)
        raise DeckError([f"not a YAML text file: unacceptable character {what} at byte offset {off} "
                         f"({exc.reason})"], source=source) from None
    except _DuplicateKey as exc:
        raise DeckError([str(exc)], source=source) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise DeckError([f"malformed YAML{where}: {problem}"], source=source) from None
    if raw is None:
        raise DeckError(["the deck is empty"], source=source)
    if own:
        return validate(_exponent_floats(raw, in_place=True), source=source, _consume=True)
    return validate(_exponent_floats(raw), source=source)
