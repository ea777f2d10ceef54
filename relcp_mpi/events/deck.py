"""``engine: event_driven`` decks: parsing, validation and :func:`run_event_deck`.

A deck selects the engine at the top level and puts the engine's inputs in the ``event_driven`` section::

    name: newton_cradle              # optional run name
    engine: event_driven
    event_driven:
      dimension: 1                   # d >= 1 (optional; inferred from the first position)
      horizon: 10                    # T > 0
      eps_time: 1/1000000            # bracket width tolerance eps_time > 0
      eps_guard: 1/1000000           # guard residual tolerance eps_guard > 0
      delta: 1/20                    # event separation bound delta > 0
      n_evt: 4                       # certified event-count bound N_evt (int >= 0)
      budget: 4                      # event budget B (int >= 0; choose B >= N_evt)
      endpoint_policy: include       # include | pre-impact
      restitution: 1                 # scalar e in [0, 1] or a P x P symmetric matrix e_ij
      field: [0]                     # optional uniform acceleration g (length d), default 0
      precision:                     # optional
        grid_bits: 64                # minimum bits of the dyadic bracket grid (finer => smaller ledger)
        round_bits: null             # round reported post-reset states to 2**-round_bits (bound -> eps_R)
        bound_bits: 64               # precision of the certified rational sqrt / exp bounds (>= 16)
        max_refine: 200              # bracket refinement steps before giving up
      ledger_tol: null               # optional bound on the error ledger E (exceeded -> unresolved)
      spheres:                       # P >= 2 spheres
        - {position: [0], velocity: [1], mass: 1, radius: 1/2}
        - ...

Every number is read exactly: integers, ``"p/q"`` strings, decimal strings (``"0.1"``, ``"1e-6"``), and YAML
floats (read through their shortest decimal repr, so ``0.1`` is ``1/10``).  All problems are collected and
reported together in one ``DeckError`` (from :mod:`relcp_mpi.config.deck` when available) naming the key
and the bad value.  Instead of ``spheres`` the arrays ``positions``, ``velocities``, ``masses``, ``radii`` may
be given (``masses``/``radii`` may be scalars applied to every sphere).

Output (:func:`run_event_deck`, HDF5 built in memory by rank 0 and written to ``path`` with plain file I/O, atomically):

* root attributes: ``engine``, ``name``, ``status`` (complete|unresolved), ``reason`` ("" when complete),
  ``message``, ``t_final`` (float) and ``t_final_exact`` (string), ``n_events``, ``error_final`` (+ exact),
  ``endpoint_policy``, ``P``, ``d``, ``horizon``, ``eps_time``, ``eps_guard``, ``delta``, ``n_evt``, ``budget``;
* ``events/``: ``pair (n, 2)``, ``bracket (n, 2)``, ``bracket_exact (n, 2)`` strings, ``root_reported``
  (float) and ``root_reported_exact`` (string), ``exact_root`` (bool), ``nu``, ``eps_obs``, ``lag``,
  ``eta_ref``, ``L_R``, ``M_minus``, ``M_plus``, ``eps_R``, ``E_before``, ``E_after``, ``impulse (n, d)``,
  ``v_minus (n, 2, d)``, ``v_plus (n, 2, d)``;
* ``ledger/``: ``E`` (float) and ``E_exact`` (strings): ``E`` after every processed event (entry 0 is t = 0);
* ``segments/``: ``t0``, ``positions (k, P, d)``, ``velocities (k, P, d)`` (reported segment-start states);
* ``final/``: ``positions``, ``velocities`` (float) and ``positions_exact``, ``velocities_exact`` (strings);
* ``pending/`` (only when an event was certified but not processed, e.g. a pre-impact endpoint event):
  ``pair``, ``bracket``.
"""
import os
from fractions import Fraction

import numpy as np

from .exact import fstr, to_fraction
from .simulator import POLICIES, simulate

__all__ = ["parse_event_deck", "run_event_deck", "EVENT_KEYS"]

try:  # share the project's error type when the config package provides it
    from relcp_mpi.config.deck import DeckError
except Exception:  # pragma: no cover
    class DeckError(ValueError):
        def __init__(self, problems, source="deck"):
            self.problems = list(problems)
            super().__init__(f"invalid input deck {source}:\n  - " + "\n  - ".join(self.problems))

EVENT_KEYS = {"dimension", "horizon", "eps_time", "eps_guard", "delta", "n_evt", "budget", "endpoint_policy",
              "restitution", "field", "precision", "ledger_tol", "spheres", "positions", "velocities", "masses",
              "radii"}
PRECISION_KEYS = {"grid_bits", "round_bits", "bound_bits", "max_refine"}
SPHERE_KEYS = {"position", "velocity", "mass", "radius"}


# bounds on the work and precision a deck can ask for (exit 2 naming the key instead of a run that never ends):
MAX_NUMBER_BITS = 1024      # numerator and denominator of every number: |x| and 1/|x| below ~1.8e308
MAX_PRECISION_BITS = 4096   # precision.grid_bits / round_bits / bound_bits
MAX_REFINE = 10000          # precision.max_refine
MAX_EVENTS = 10 ** 6        # n_evt and budget
MAX_SPHERES = 2000          # P (every event inspects the P (P - 1) / 2 pairs exactly)
MAX_DIMENSION = 64


def _exact(x, name):
    """to_fraction with a bound on the size of the number: a decimal exponent or an integer too large is
    refused before it is expanded (``1e100000000`` would take minutes to build and forever to simulate)."""
    import re
    if isinstance(x, str):
        m = re.search(r"[eE]\s*([+-]?\d+)\s*$", x.strip())
        if m and abs(int(m.group(1))) > 400:
            raise ValueError(f"{name}: {x!r} is out of range (magnitude between 1e-300 and 1e300 and at most "
                             f"{MAX_NUMBER_BITS} bits in numerator and denominator)")
        if len(x) > 1000:
            raise ValueError(f"{name}: {x[:40]!r}... is too long ({len(x)} characters) for a number")
    v = to_fraction(x, name)
    if v.numerator.bit_length() > MAX_NUMBER_BITS or v.denominator.bit_length() > MAX_NUMBER_BITS:
        shown = x if len(str(x)) <= 40 else str(x)[:40] + "..."
        raise ValueError(f"{name}: {shown!r} is out of range (numerator and denominator must have at most "
                         f"{MAX_NUMBER_BITS} bits, i.e. magnitudes between ~1e-308 and ~1e308)")
    return v


def _num(sec, key, problems, path, positive=False, required=True, default=None):
    if key not in sec or sec[key] is None:
        if required:
            problems.append(f"{path}.{key}: required")
        return default
    try:
        x = _exact(sec[key], f"{path}.{key}")
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
        out = [_exact(c, name) for c in x]
    except ValueError as exc:
        problems.append(str(exc))
        return None
    if d is not None and len(out) != d:
        problems.append(f"{name}: expected {d} components, got {len(out)} ({x!r})")
        return None
    return out


def parse_event_deck(deck, source="deck"):
    """Validate an ``engine: event_driven`` deck (a dict) and return the keyword arguments of
    :func:`~relcp_mpi.events.simulator.simulate` (plus ``name``).  Raises ``DeckError`` listing every problem."""
    problems = []
    if not isinstance(deck, dict):
        raise DeckError([f"top level must be a mapping, got {type(deck).__name__}"], source)
    engine = deck.get("engine", "event_driven")
    if engine != "event_driven":
        problems.append(f"engine: must be event_driven for this runner, got {engine!r}")
    sec = deck.get("event_driven", deck.get("events"))
    path = "event_driven"
    if not isinstance(sec, dict):
        raise DeckError(problems + [f"{path}: required mapping, got {sec!r}"], source)
    for k in sec:
        if k not in EVENT_KEYS:
            problems.append(f"{path}.{k}: unknown key (allowed: {', '.join(sorted(EVENT_KEYS))})")
    out = {"name": str(deck.get("name", "event_driven"))}
    out["T"] = _num(sec, "horizon", problems, path, positive=True)
    out["eps_time"] = _num(sec, "eps_time", problems, path, positive=True)
    out["eps_guard"] = _num(sec, "eps_guard", problems, path, positive=True)
    out["delta"] = _num(sec, "delta", problems, path, positive=True)
    out["n_evt"] = _int(sec, "n_evt", problems, path, maximum=MAX_EVENTS)
    out["budget"] = _int(sec, "budget", problems, path, maximum=MAX_EVENTS)
    pol = sec.get("endpoint_policy", "include")
    if pol not in POLICIES:
        problems.append(f"{path}.endpoint_policy: must be one of {', '.join(POLICIES)}, got {pol!r}")
    out["endpoint_policy"] = pol
    lt = _num(sec, "ledger_tol", problems, path, required=False)
    if lt is not None and lt < 0:
        problems.append(f"{path}.ledger_tol: must be >= 0, got {sec['ledger_tol']!r}")
    out["ledger_tol"] = lt

    prec = sec.get("precision") or {}
    if not isinstance(prec, dict):
        problems.append(f"{path}.precision: expected a mapping, got {prec!r}")
        prec = {}
    for k in prec:
        if k not in PRECISION_KEYS:
            problems.append(f"{path}.precision.{k}: unknown key (allowed: {', '.join(sorted(PRECISION_KEYS))})")
    pp = path + ".precision"
    out["grid_bits"] = _int(prec, "grid_bits", problems, pp, required=False, minimum=1, maximum=MAX_PRECISION_BITS)
    out["round_bits"] = _int(prec, "round_bits", problems, pp, required=False, minimum=1,
                             maximum=MAX_PRECISION_BITS)
    out["bits"] = _int(prec, "bound_bits", problems, pp, required=False, default=64, minimum=16,
                       maximum=MAX_PRECISION_BITS)
    out["max_refine"] = _int(prec, "max_refine", problems, pp, required=False, default=200, minimum=1,
                             maximum=MAX_REFINE)

    # spheres
    d = _int(sec, "dimension", problems, path, required=False, minimum=1, maximum=MAX_DIMENSION)
    pos, vel, mas, rad = [], [], [], []
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
            for key in s:
                if key not in SPHERE_KEYS:
                    problems.append(f"{sp}.{key}: unknown key (allowed: {', '.join(sorted(SPHERE_KEYS))})")
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
    out.update(positions=pos, velocities=vel, masses=mas, radii=rad)

    e = sec.get("restitution", 1)
    if isinstance(e, list):
        ok = len(e) == len(pos) and all(isinstance(r, list) and len(r) == len(pos) for r in e)
        if not ok:
            problems.append(f"{path}.restitution: expected a scalar or a {len(pos)} x {len(pos)} matrix")
        else:
            try:
                e = [[_exact(x, f"{path}.restitution") for x in r] for r in e]
                for i in range(len(e)):
                    for j in range(len(e)):
                        if i != j and not (0 <= e[i][j] <= 1):
                            problems.append(f"{path}.restitution[{i}][{j}]: must lie in [0, 1], got {e[i][j]}")
                        if e[i][j] != e[j][i]:
                            problems.append(f"{path}.restitution: must be symmetric ([{i}][{j}] != [{j}][{i}])")
            except ValueError as exc:
                problems.append(str(exc))
    else:
        x = _num({"restitution": e}, "restitution", problems, path)
        if x is not None and not (0 <= x <= 1):
            problems.append(f"{path}.restitution: must lie in [0, 1], got {e!r}")
        e = x
    out["restitution"] = e
    if "field" in sec and sec["field"] is not None:
        out["field"] = _vector(sec["field"], f"{path}.field", problems, d)
    else:
        out["field"] = None
    if not problems:
        problems += _overlaps(out["positions"], out["radii"], sec, path)
    if problems:
        raise DeckError(problems, source)
    return out


def _overlaps(pos, rad, sec, path, limit=5):
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
    what = "spheres" if "spheres" in sec else "positions"
    out = []
    for a, b in zip(i[near], j[near]):
        a, b = int(a), int(b)
        e2 = sum((x - y) ** 2 for x, y in zip(pos[a], pos[b]))
        s2 = (rad[a] + rad[b]) ** 2
        if e2 < s2:
            depth = float(rad[a] + rad[b]) - float(e2) ** 0.5
            out.append(f"{path}.{what}[{a}] and {path}.{what}[{b}]: the initial spheres overlap (centre distance "
                       f"{float(e2) ** 0.5:.6g} < r_{a} + r_{b} = {float(rad[a] + rad[b]):.6g}, by {depth:.3g})")
            if len(out) >= limit:
                out.append(f"{path}.{what}: (further overlapping pairs not listed)")
                break
    return out


def _f(x):
    return float(x) if x is not None else np.nan


def _write_h5(path, res, name):
    """Build the result file in memory (HDF5 core driver) and write its bytes with plain file I/O to
    ``path + '.tmp'``, fsync, rename: a full disk or an I/O error is then an ordinary OSError (HDF5's own
    disk writes can crash the process on ENOSPC) and never leaves a half-written ``path``."""
    import h5py
    f = h5py.File(f"{name}-result-in-memory.h5", "w", driver="core", backing_store=False)
    try:
        _fill_h5(f, res, name)
        f.flush()
        image = f.id.get_file_image()
    finally:
        f.close()
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(image)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def _fill_h5(f, res, name):
    import h5py
    P, d = res.params["P"], res.params["d"]
    sdt = h5py.string_dtype()
    f.attrs["engine"] = "event_driven"
    f.attrs["name"] = name
    f.attrs["status"] = res.status
    f.attrs["reason"] = res.reason or ""
    f.attrs["message"] = res.message
    f.attrs["t_final"] = float(res.t_final)
    f.attrs["t_final_exact"] = fstr(res.t_final)
    f.attrs["n_events"] = len(res.events)
    f.attrs["error_final"] = float(res.error_final)
    f.attrs["error_final_exact"] = fstr(res.error_final)
    for k in ("endpoint_policy", "P", "d", "n_evt", "budget"):
        f.attrs[k] = res.params[k]
    for k in ("T", "eps_time", "eps_guard", "delta"):
        f.attrs["horizon" if k == "T" else k] = float(res.params[k])
        f.attrs[("horizon" if k == "T" else k) + "_exact"] = fstr(res.params[k])
    ev = res.events
    n = len(ev)
    g = f.create_group("events")
    g.create_dataset("pair", data=np.array([e.pair for e in ev], dtype=np.int64).reshape(n, 2))
    g.create_dataset("bracket", data=np.array([[float(e.a), float(e.b)] for e in ev]).reshape(n, 2))
    g.create_dataset("bracket_exact", data=np.array([[fstr(e.a), fstr(e.b)] for e in ev], dtype=object)
                     .reshape(n, 2), dtype=sdt)
    g.create_dataset("root_reported", data=np.array([float(e.root_reported) for e in ev]))
    g.create_dataset("root_reported_exact", data=np.array([fstr(e.root_reported) for e in ev], dtype=object),
                     dtype=sdt)
    g.create_dataset("exact_root", data=np.array([e.exact for e in ev], dtype=bool))
    for k in ("nu", "eps_obs", "lag", "eta_ref", "L_R", "M_minus", "M_plus", "eps_R", "E_before", "E_after"):
        g.create_dataset(k, data=np.array([float(getattr(e, k)) for e in ev]))
    g.create_dataset("impulse", data=np.array([[float(x) for x in e.impulse] for e in ev]).reshape(n, d))
    g.create_dataset("v_minus", data=np.array([[[float(x) for x in vv] for vv in e.v_minus] for e in ev])
                     .reshape(n, 2, d))
    g.create_dataset("v_plus", data=np.array([[[float(x) for x in vv] for vv in e.v_plus] for e in ev])
                     .reshape(n, 2, d))
    gl = f.create_group("ledger")
    gl.create_dataset("E", data=np.array([float(x) for x in res.ledger]))
    gl.create_dataset("E_exact", data=np.array([fstr(x) for x in res.ledger], dtype=object), dtype=sdt)
    gs = f.create_group("segments")
    k = len(res.segments)
    gs.create_dataset("t0", data=np.array([float(s.t0) for s in res.segments]))
    gs.create_dataset("positions", data=np.array([[[float(x) for x in r] for r in s.q] for s in res.segments])
                      .reshape(k, P, d))
    gs.create_dataset("velocities", data=np.array([[[float(x) for x in r] for r in s.v] for s in res.segments])
                      .reshape(k, P, d))
    gf = f.create_group("final")
    gf.create_dataset("positions", data=np.array([[float(x) for x in r] for r in res.q_final]).reshape(P, d))
    gf.create_dataset("velocities", data=np.array([[float(x) for x in r] for r in res.v_final]).reshape(P, d))
    gf.create_dataset("positions_exact", data=np.array([[fstr(x) for x in r] for r in res.q_final],
                                                       dtype=object).reshape(P, d), dtype=sdt)
    gf.create_dataset("velocities_exact", data=np.array([[fstr(x) for x in r] for r in res.v_final],
                                                        dtype=object).reshape(P, d), dtype=sdt)
    if res.pending is not None:
        gp = f.create_group("pending")
        gp.create_dataset("pair", data=np.array(res.pending.pair, dtype=np.int64))
        gp.create_dataset("bracket", data=np.array([float(res.pending.a), float(res.pending.b)]))


def run_event_deck(deck, output_path, comm=None, should_stop=None):
    """Validate and run an ``engine: event_driven`` deck, write the result to ``output_path`` (HDF5, rank 0
    only, atomically; a write failure raises OutputError on every rank) and return the
    :class:`~relcp_mpi.events.simulator.EventResult` (identical on every rank).  ``comm``: optional mpi4py communicator splitting the pair inspection; ``should_stop``: see
    :func:`~relcp_mpi.events.simulator.simulate` (a stopped run writes its certified prefix)."""
    kw = parse_event_deck(deck)
    name = kw.pop("name")
    res = simulate(kw.pop("positions"), kw.pop("velocities"), kw.pop("masses"), kw.pop("radii"),
                   kw.pop("restitution"), kw.pop("T"), comm=comm, should_stop=should_stop, **kw)
    rank = comm.Get_rank() if comm is not None else 0
    err = None
    if rank == 0 and output_path is not None:
        from relcp_mpi.io.writeguard import describe_oserror
        try:
            _write_h5(output_path, res, name)
        except Exception as exc:  # report on every rank, never hang
            err = describe_oserror(exc)
    if comm is not None and comm.Get_size() > 1:
        err = comm.bcast(err, root=0)
    if err is not None:
        from relcp_mpi.io.writeguard import OutputError     # a RuntimeError: exit 1, one message
        raise OutputError(f"cannot write {output_path}: {err}")
    return res
