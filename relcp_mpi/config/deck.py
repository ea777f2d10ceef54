"""YAML input decks: schema, defaults and up-front validation.

A deck is a YAML mapping.  Every key is checked before anything runs; all problems are collected and
reported together in one :class:`DeckError` whose message names each bad key (as a dotted path) and value.

Top-level sections (defaults in ``SCHEMA``)::

    name: str                      run name (used for output file names)
    engine: relcp | event_driven   which engine runs the deck
    seed: int                      seed of all random streams, keyed by (seed, step, body id)
    time:     {dt: float > 0, steps: int >= 0 | t_end: float, max_halvings: int >= 0 (redo a failed step as
               two of dt/2, down to dt/2^k; 0 = off)}
    box:      {lo: [3 floats], hi: [3 floats], periodic: [3 bools]}
    walls:    list of {point: [3], normal: [3]}   planes; the normal points into the allowed side
    fluid:    {viscosity: float > 0}
    forces:   {body_force: [3], body_torque: [3]}  applied to every body (plus per-body force/torque)
    bodies:   list of explicit bodies (see BODY_KEYS)
    generate: list of generators (see GENERATOR_KEYS): lattice or random placement
    contact:  {model: relcp | snsd | multisphere, overlap_tol, skin, max_depth, initial_overlap_tol,
               ms_resolution (proxy spheres per body for the multisphere baseline), recheck_neighbors}
    solver:   {method: bbpgd|apgd|ipm|tao-bncg|tao-blmvm, tol, max_iter, petsc_options: [str]}
    parallel: {decomposition: cartesian|rcb, rebalance_every, imbalance_threshold}
    output:   {directory, trajectory_every, checkpoint_every, keep_checkpoints, progress_every, restart}

Units are the user's (consistent) units: lengths L, times T, viscosity mu; forces F = mu L^2 / T.
"""
import math

import numpy as np
import yaml


class DeckError(ValueError):
    """Invalid input deck.  ``problems`` is a list of 'key: message' strings."""

    def __init__(self, problems, source="deck"):
        self.problems = list(problems)
        self.source = source
        lines = "\n  - ".join(self.problems)
        super().__init__(f"invalid input deck {source}:\n  - {lines}")


# ------------------------------------------------------------------------------------------------
# tiny schema language: each leaf is (type, default, check) where check(value) -> None | message
def _pos(v):
    return None if v > 0 else f"must be > 0, got {v}"


def _nonneg(v):
    return None if v >= 0 else f"must be >= 0, got {v}"


def _choice(*opts):
    def check(v):
        return None if v in opts else f"must be one of {list(opts)}, got {v!r}"
    return check


def _vec3(v):
    if not (isinstance(v, (list, tuple)) and len(v) == 3 and all(_is_number(c) for c in v)):
        return f"must be a list of 3 numbers, got {v!r}"
    return None


def _bool3(v):
    if not (isinstance(v, (list, tuple)) and len(v) == 3 and all(isinstance(c, bool) for c in v)):
        return f"must be a list of 3 booleans, got {v!r}"
    return None


def _str_list(v):
    if not (isinstance(v, list) and all(isinstance(c, str) for c in v)):
        return f"must be a list of strings, got {v!r}"
    return None


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


FLOAT, INT, STR, BOOL, ANY = "float", "int", "str", "bool", "any"


class _Invalid:
    """Placeholder for a value that failed validation (already reported)."""

    def __repr__(self):
        return "<invalid>"


INVALID = _Invalid()

SCHEMA = {
    "name": (STR, "run", None),
    "engine": (STR, "relcp", _choice("relcp", "event_driven")),
    "seed": (INT, 1, _nonneg),
    "time": {
        "dt": (FLOAT, None, _pos),
        "steps": (INT, None, _nonneg),
        "t_end": (FLOAT, None, _nonneg),
        "max_halvings": (INT, 0, _nonneg),
    },
    "box": {
        "lo": (ANY, [-10.0, -10.0, -10.0], _vec3),
        "hi": (ANY, [10.0, 10.0, 10.0], _vec3),
        "periodic": (ANY, [False, False, False], _bool3),
    },
    "walls": (ANY, [], None),
    "fluid": {"viscosity": (FLOAT, 1.0, _pos)},
    "forces": {
        "body_force": (ANY, [0.0, 0.0, 0.0], _vec3),
        "body_torque": (ANY, [0.0, 0.0, 0.0], _vec3),
    },
    "bodies": (ANY, [], None),
    "generate": (ANY, [], None),
    "contact": {
        "model": (STR, "relcp", _choice("relcp", "snsd", "multisphere")),
        "ms_resolution": (INT, 8, _pos),
        "overlap_tol": (FLOAT, 1e-3, _pos),
        "skin": (FLOAT, None, _nonneg),
        "max_depth": (INT, 50, _pos),
        "initial_overlap_tol": (FLOAT, None, _nonneg),
        "recheck_neighbors": (BOOL, True, None),
    },
    "solver": {
        "method": (STR, "bbpgd", _choice("bbpgd", "apgd", "ipm", "tao-bncg", "tao-blmvm", "tao-tron")),
        "tol": (FLOAT, None, _pos),
        "max_iter": (INT, 100000, _pos),
        "petsc_options": (ANY, [], _str_list),
    },
    "parallel": {
        "decomposition": (STR, "cartesian", _choice("cartesian", "rcb")),
        "rebalance_every": (INT, 0, _nonneg),
        "imbalance_threshold": (FLOAT, 1.25, _pos),
    },
    "output": {
        "directory": (STR, None, None),
        "trajectory_every": (INT, 10, _nonneg),
        "checkpoint_every": (INT, 0, _nonneg),
        "keep_checkpoints": (INT, 3, _pos),
        "progress_every": (INT, 10, _nonneg),
        "restart": (ANY, None, None),
    },
    "event_driven": (ANY, None, None),
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
    "count": (INT, None, _nonneg),
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


def _apply(schema, data, path, problems):
    """Check ``data`` against ``schema``; return a new dict with defaults filled in."""
    out = {}
    if data is None:
        data = {}
    if not isinstance(data, dict):
        problems.append(f"{path or 'deck'}: must be a mapping, got {type(data).__name__}")
        return out
    for key in data:
        if key not in schema:
            problems.append(f"{path + '.' if path else ''}{key}: unknown key (allowed: {', '.join(sorted(schema))})")
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
        if kind == FLOAT and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if not _type_ok(kind, v):
            problems.append(f"{kp}: expected {kind}, got {v!r}")
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
        if set(o) != {"axis", "angle"} or _vec3(o.get("axis")) or not _is_number(o.get("angle")):
            problems.append(f"{kp}: axis-angle orientation needs exactly axis: [3 numbers] and angle: number")
        elif np.linalg.norm(o["axis"]) == 0:
            problems.append(f"{kp}.axis: must be nonzero")
        return
    if not (isinstance(o, (list, tuple)) and len(o) == 4 and all(_is_number(c) for c in o)) \
            or np.linalg.norm(o) == 0:
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


def validate(raw, source="deck"):
    """Validate a parsed deck mapping; return the normalised deck (defaults filled).

    Raises :class:`DeckError` listing every problem found."""
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
    elif deck["event_driven"] is None:
        problems.append("event_driven: required when engine is event_driven")

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
            norm.append(nb)
        deck[section] = norm

    kinds = {b.get("shape") for sec in ("bodies", "generate") for b in deck[sec] if isinstance(b, dict)}
    if "ring" in kinds and kinds & {"ellipsoid", "spherocylinder"}:
        problems.append("bodies: rings can only be combined with spheres and walls (ring-ellipsoid and "
                        "ring-spherocylinder contact are not implemented)")
    c, s = deck["contact"], deck["solver"]
    if isinstance(s["tol"], float) and isinstance(c["overlap_tol"], float) and s["tol"] > c["overlap_tol"]:
        problems.append(f"solver.tol: must be <= contact.overlap_tol ({c['overlap_tol']}), got {s['tol']}")
    if problems:
        raise DeckError(problems, source)
    if s["tol"] is None:
        s["tol"] = 0.1 * c["overlap_tol"]
    if c["initial_overlap_tol"] is None:
        c["initial_overlap_tol"] = c["overlap_tol"]
    if deck["output"]["directory"] is None:
        deck["output"]["directory"] = f"out/{deck['name']}"
    return deck


def load(path):
    """Read and validate a deck file; returns ``(deck, text)``.  Raises DeckError with the file name."""
    try:
        with open(path, "r", encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise DeckError([f"cannot read deck file: {exc.strerror}"], source=str(path)) from None
    return loads(text, source=str(path)), text


def loads(text, source="deck"):
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise DeckError([f"malformed YAML{where}: {problem}"], source=source) from None
    if raw is None:
        raise DeckError(["the deck is empty"], source=source)
    return validate(raw, source=source)
