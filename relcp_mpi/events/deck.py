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

The deck is read by the project's one deck loader (:func:`relcp_mpi.config.deck.validate`, section schema in
:mod:`relcp_mpi.config.events`): every number exactly (integers, ``"p/q"`` strings, decimal strings, YAML
floats through their shortest decimal repr, so ``0.1`` is ``1/10``), every problem of the whole deck reported
together in one ``DeckError`` naming the dotted key and the bad value, and the typed
:class:`~relcp_mpi.config.events.EventDrivenSection` as the result.  Instead of ``spheres`` the arrays
``positions``, ``velocities``, ``masses``, ``radii`` may be given (``masses``/``radii`` may be scalars applied
to every sphere).

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
import copy
import os

import numpy as np

from relcp_mpi.config.deck import DeckError, validate
from relcp_mpi.config.sections import Deck, typed

from .exact import fstr
from .simulator import simulate

__all__ = ["parse_event_deck", "run_event_deck", "event_deck"]


def event_deck(deck, source="deck"):
    """The typed :class:`~relcp_mpi.config.sections.Deck` of an ``engine: event_driven`` deck: ``deck`` is a
    Deck or a deck mapping (validated here, not modified).  Raises ``DeckError`` listing every problem."""
    if not isinstance(deck, Deck):
        if not isinstance(deck, dict):
            raise DeckError([f"top level must be a mapping, got {type(deck).__name__}"], source)
        deck = typed(validate(copy.deepcopy(deck), source=source))
    if deck.engine != "event_driven":
        raise DeckError([f"engine: must be event_driven for this runner, got {deck.engine!r}"], source)
    return deck


def parse_event_deck(deck, source="deck"):
    """Validate an ``engine: event_driven`` deck (a mapping or a typed Deck) and return the keyword arguments
    of :func:`~relcp_mpi.events.simulator.simulate` (plus ``name``).  Raises ``DeckError`` listing every
    problem."""
    d = event_deck(deck, source)
    ev = d.event_driven
    sph = ev.spheres
    e = ev.restitution
    return {"name": d.name, "T": ev.horizon, "eps_time": ev.eps_time, "eps_guard": ev.eps_guard,
            "delta": ev.delta, "n_evt": ev.n_evt, "budget": ev.budget, "endpoint_policy": ev.endpoint_policy,
            "ledger_tol": ev.ledger_tol, "grid_bits": ev.precision.grid_bits,
            "round_bits": ev.precision.round_bits, "bits": ev.precision.bound_bits,
            "max_refine": ev.precision.max_refine,
            "positions": [list(s.position) for s in sph], "velocities": [list(s.velocity) for s in sph],
            "masses": [s.mass for s in sph], "radii": [s.radius for s in sph],
            "restitution": [list(r) for r in e] if isinstance(e, tuple) else e,
            "field": None if ev.field is None else list(ev.field)}


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
