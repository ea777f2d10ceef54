"""A run state to a checkpoint and back: :func:`write_state` and :func:`read_state` (restart).

The checkpoint file format is :mod:`relcp_mpi.io.checkpoint`; this module decides what of a
:class:`relcp_mpi.state.RunState` goes into it and how a state is rebuilt from it on any number of ranks:

* bodies, the warm-start table (multiplier and hint normal per constraint row), step, time, dt, next gid,
  the skin, the number of rebalances and the imbalance measured at the last rebalance check (a per-step
  diagnostic), the step policy's state, the Lees--Edwards image offset of a shear flow
  (``shear_offset`` [L]; a restart continues the sliding images where they were);
* what a restart on the same rank count needs to continue bit for bit: the ownership of the bodies during the
  last step (``row_starts``; with the bodies' ``row`` it gives each body's rank) and, for RCB, the
  decomposition tree.  On another rank count the decomposition is rebuilt and the run agrees to solver
  tolerance.
"""
import os

import numpy as np
from mpi4py import MPI

from relcp_mpi.bodies.store import BodyStore
from relcp_mpi.io.checkpoint import (CheckpointError, check_compatible, checkpoint_path, latest_checkpoint,
                                     read_checkpoint, write_checkpoint)
from relcp_mpi.io.deck_changes import deck_changes, deck_overrides, effective_stored_deck, refused
from relcp_mpi.parallel import decomposition as pdecomp
from relcp_mpi.parallel.errors import collective_guard
from relcp_mpi.parallel.exchange import exchange_rows
from relcp_mpi.parallel.migration import migrate, pack_rows
from relcp_mpi.state import WARM_KEY_DTYPE, RunState, box_of, empty_warm, initial_skin, make_decomposition


def write_state(st, deck, deck_text, comm):
    """Collective atomic checkpoint of the run state ``st`` of the typed deck ``deck``; returns its path.

    The deck is stored as its YAML text, or the normalised deck when the run was built without text."""
    with collective_guard(comm, "checkpoint directory"):
        if comm.rank == 0:
            os.makedirs(deck.output.directory, exist_ok=True)
    keys, vals = st.warm
    warm = None
    if keys is not None:
        warm = {"gid_i": keys["gid_i"], "gid_j": keys["gid_j"], "sub": keys["sub"], "gamma": vals[:, 0],
                "hint_x": vals[:, 1], "hint_y": vals[:, 2], "hint_z": vals[:, 3]}
        if vals.shape[1] >= 6:          # contact.carry_rows: the core parameters of the rows to carry
            warm["carry_si"], warm["carry_sj"] = vals[:, 4], vals[:, 5]
    meta = {"step": int(st.step), "time": float(st.time), "dt": float(st.dt),
            "deck": deck_text if deck_text else deck.raw,
            "deck_overrides": deck_overrides(deck_text, deck.raw),
            "seed": int(deck.seed), "next_gid": int(st.next_gid), "n_steps": deck.time.n_steps,
            "decomposition": deck.parallel.decomposition, "n_bodies": int(st.n_global),
            "skin": float(st.skin), "n_rebalances": int(st.n_rebalances),
            "step_policy": {"level": int(st.policy["level"]), "ok": int(st.policy["ok"])}}
    if deck.flow is not None and deck.flow.type == "shear":
        meta["shear_offset"] = float(st.shear_offset)
    if st.imbalance is not None:
        # the RCB imbalance of the last rebalance check is a diagnostic of every step until the next check:
        # without it a restarted run's diagnostics rows would lack it until then
        meta["imbalance"] = float(st.imbalance)
    if st.row_starts is not None and len(st.row_starts) == comm.size + 1:
        meta["row_starts"] = np.asarray(st.row_starts, dtype=np.int64)
    if isinstance(st.decomp, pdecomp.RCBDecomposition):
        meta["rcb"] = st.decomp.to_dict()
    path = checkpoint_path(deck.checkpoint_prefix, st.step)
    return write_checkpoint(path, comm, st.bodies, meta, warm, keep=deck.output.keep_checkpoints)


def resolve_checkpoint(path, deck, comm):
    """``path``, or for 'latest' the newest valid checkpoint of the deck in its output directory."""
    if path != "latest":
        return os.fspath(path)
    prefix = deck.checkpoint_prefix
    found = latest_checkpoint(prefix, valid_only=True) if comm.rank == 0 else None
    found = comm.bcast(found, root=0)
    if found is None:
        raise CheckpointError(f"no valid checkpoint '{prefix}_<step>.h5' to restart from (--restart latest)")
    return found


def check_deck_changes(meta, deck, path, allow=()):
    """Every difference between the deck the checkpoint's run used and the typed ``deck``
    (:mod:`relcp_mpi.io.deck_changes`); raises :class:`CheckpointError` naming each refused key (old -> new,
    why) and listing the other differences, else returns the list of :class:`DeckChange` (allowed or
    overridden).  ``allow``: dotted prefixes accepted by the user (``--allow-deck-change``)."""
    if meta.get("deck") is None:
        raise CheckpointError(f"checkpoint {path}: checkpoint holds no deck; cannot check compatibility")
    # normalised form (defaults filled) with the stored command-line overrides, so a checkpoint written
    # from a dict matches the same deck given as text and --steps/--output of the first run are no change
    changes = deck_changes(effective_stored_deck(meta), deck.raw, allow)
    bad = refused(changes)
    if bad:
        others = [c for c in changes if c not in bad]
        keys = ", ".join(c.key for c in bad[:8]) + (f", ... ({len(bad)} keys)" if len(bad) > 8 else "")
        lines = [c.describe() for c in bad[:20]] + ([f"... and {len(bad) - 20} more"] if len(bad) > 20 else [])
        lines += [c.describe() for c in others]
        hint = "" if all(c.verdict == "fixed" for c in bad) else \
            "; --allow-deck-change KEY accepts a refused (not a fixed) key"
        raise CheckpointError(f"checkpoint {path}: the deck changes key(s) a restart must keep: {keys} (restart "
                              f"with the deck the checkpoint was written for{hint}):\n  - " + "\n  - ".join(lines))
    # the body count of an explicit body list (the deck may have been given without text)
    check_compatible(meta, deck.raw, keys=(), path=f"checkpoint {path}")
    return changes


def read_state(path, deck, comm, allow_deck_changes=()):
    """Rebuild the run state from a checkpoint for a typed deck (:class:`relcp_mpi.config.sections.Deck`) (collective, any rank count).

    ``path`` may be 'latest'.  Returns ``(state, meta, path)``; ``meta['deck_changes']`` lists the accepted
    differences between the checkpoint's deck and ``deck`` (:func:`check_deck_changes`).  Raises
    :class:`CheckpointError` on every rank (message naming the file and the problem) when the file is
    missing, damaged, or the deck changes a key a restart must keep (bodies, generators, box, forces; the
    physics-defining keys unless listed in ``allow_deck_changes``)."""
    path = resolve_checkpoint(path, deck, comm)
    bodies, meta, warm = read_checkpoint(path, comm)
    meta["deck_changes"] = check_deck_changes(meta, deck, path, allow_deck_changes)

    box = box_of(deck)
    offset = _shear_offset(meta, box)
    same_ranks = int(meta.get("n_ranks_written", -1)) == comm.size
    decomp = make_decomposition(deck, box, comm, bodies.x)
    rcb = meta.get("rcb")
    if same_ranks and isinstance(decomp, pdecomp.RCBDecomposition) and isinstance(rcb, dict) and \
            int(rcb.get("size", -1)) == comm.size:
        # partition exactly as the interrupted run did (its tree may also come from a rebalance); the
        # bodies first go to the owners of the provisional decomposition, as a fresh start does
        bodies = migrate(bodies, decomp, comm, offset=offset)
        try:
            decomp = pdecomp.RCBDecomposition.from_dict(box, comm, rcb)
        except ValueError as exc:
            raise CheckpointError(f"checkpoint {path}: stored RCB decomposition: {exc}") from None
    bodies = migrate(bodies, decomp, comm, offset=offset)
    st = RunState(bodies=bodies, dt=float(deck.time.dt), decomp=decomp, skin=0.0, rmax=0.0,
                  step=int(meta["step"]), time=float(meta["time"]), shear_offset=offset)
    st.n_global = comm.allreduce(len(bodies))
    st.next_gid = max(comm.allreduce(int(bodies.gid.max()) + 1 if len(bodies) else 0, op=MPI.MAX),
                      int(meta.get("next_gid", 0)))
    rs = meta.get("row_starts")
    if same_ranks and isinstance(rs, list) and len(rs) == comm.size + 1:
        # give every body back to the rank that owned it during the last step (its D row tells which):
        # the next step starts from exactly the interrupted run's distribution (the rebalancing
        # decision and its work weights depend on it), not from one recomputed from the positions
        rs = np.asarray(rs, dtype=np.int64)
        b = st.bodies
        dest = np.clip(np.searchsorted(rs, b.row, side="right") - 1, 0, comm.size - 1)
        st.bodies = BodyStore.unpack(exchange_rows(pack_rows(b), dest, comm)).sort_by_gid() \
            if st.n_global else b
        st.row_starts = rs
    st.update_rmax(comm)
    if deck.contact.skin is None and "skin" in meta:
        # automatic skin: the one of the interrupted run (fixed at its start), not 0.25 r_max of now
        st.skin = float(meta["skin"])
    else:
        st.skin = initial_skin(deck, st.rmax)
    st.n_rebalances = int(meta.get("n_rebalances", 0))
    if meta.get("imbalance") is not None:
        st.imbalance = float(meta["imbalance"])
    pol = meta.get("step_policy")
    if isinstance(pol, dict):
        st.policy = {"level": int(pol.get("level", 0)), "ok": int(pol.get("ok", 0))}
    st.warm = adopt_warm(_warm_from_columns(warm), st.bodies, comm)
    # work per body of the last step (1 + its constraint rows = its warm-start rows), for rebalancing
    b = st.bodies
    idx = np.searchsorted(b.gid, st.warm[0]["gid_i"]) if len(b) else np.zeros(0, np.int64)
    st.work = 1.0 + np.bincount(idx, minlength=len(b)).astype(np.float64)
    return st, meta, path


def _shear_offset(meta, box):
    """The Lees--Edwards image offset [L] to continue from: the checkpoint's, or for a checkpoint written
    without shear (a deck that adds a shear flow on restart) rate L_g t mod L_a, as if it had always run."""
    if box.shear is None:
        return 0.0
    if "shear_offset" in meta:
        return float(meta["shear_offset"])
    sh, L = box.shear, box.lengths
    return float(np.mod(sh.rate * L[sh.gradient_axis] * float(meta["time"]), L[sh.flow_axis]))


def _warm_from_columns(warm):
    """The checkpoint's warm-start columns as (keys, values (c, 4)); hints NaN in older checkpoints; (c, 6) with
    the carried rows' core parameters when the checkpoint has them (written with contact.carry_rows)."""
    if not warm or "gid_i" not in warm:
        return empty_warm()
    keys = np.empty(len(warm["gid_i"]), dtype=WARM_KEY_DTYPE)
    keys["gid_i"], keys["gid_j"], keys["sub"] = warm["gid_i"], warm["gid_j"], warm["sub"]
    carried = "carry_si" in warm and "carry_sj" in warm
    vals = np.full((len(keys), 6 if carried else 4), np.nan)
    if carried:
        vals[:, 4], vals[:, 5] = warm["carry_si"], warm["carry_sj"]
    vals[:, 0] = warm["gamma"]
    if all(c in warm for c in ("hint_x", "hint_y", "hint_z")):
        vals[:, 1], vals[:, 2], vals[:, 3] = warm["hint_x"], warm["hint_y"], warm["hint_z"]
    return keys, vals


def adopt_warm(warm, bodies, comm):
    """Send every warm-start row to the rank owning its body gid_i (collective); returns (keys, values).

    The rows arrive in an arbitrary block split (checkpoint reader) and the owner of a gid is only known to
    that owner, so a distributed directory is used (no rank gathers the table): rows and (gid, owner)
    records both go to rank ``gid mod P``, which matches them and forwards each row to the owner.  Rows
    whose body no longer exists are dropped.  The order of the resulting table does not matter (the stepper
    matches warm starts by key)."""
    P, rank = comm.size, comm.rank
    keys, vals = warm
    # int64 rows (the multiplier and the hint travel as their bit patterns: exact); the values' width is the
    # checkpoint's, the same on every rank
    rows = np.zeros((len(keys), 3 + vals.shape[1]), dtype=np.int64)
    if len(keys):
        rows[:, 0], rows[:, 1], rows[:, 2] = keys["gid_i"], keys["gid_j"], keys["sub"]
        rows[:, 3:] = np.ascontiguousarray(vals, dtype=np.float64).view(np.int64)
    at_dir = exchange_rows(rows, np.mod(rows[:, 0], P), comm, dtype=np.int64)
    gid = np.asarray(bodies.gid, dtype=np.int64)
    own = exchange_rows(np.stack([gid, np.full(len(gid), rank, np.int64)], axis=1), np.mod(gid, P), comm,
                        dtype=np.int64)
    order = np.argsort(own[:, 0], kind="stable")
    og = own[order, 0]
    pos = np.searchsorted(og, at_dir[:, 0])
    pc = np.minimum(pos, max(len(og) - 1, 0))
    hit = (pos < len(og)) & (og[pc] == at_dir[:, 0]) if len(og) else np.zeros(len(at_dir), bool)
    dest = own[order, 1][pc[hit]] if len(og) else np.zeros(0, np.int64)
    got = exchange_rows(at_dir[hit], dest, comm, dtype=np.int64)
    k = np.empty(len(got), dtype=WARM_KEY_DTYPE)
    k["gid_i"], k["gid_j"], k["sub"] = got[:, 0], got[:, 1], got[:, 2]
    return k, np.ascontiguousarray(got[:, 3:]).view(np.float64).copy()
