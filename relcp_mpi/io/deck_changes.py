"""What a restart may change in the deck: every difference between the deck a checkpoint was written for and
the deck given to the restart, by dotted key (``time.dt``, ``bodies[3].radius``), judged by prefix tables.

Three verdicts (the longest matching prefix decides; a key no table lists is *refused*, so a key added to
the schema later is safe by default until it is listed as allowed):

* ``fixed`` (:data:`FIXED`): never accepted -- the checkpoint's bodies carry these (shapes, per-body and
  deck-wide forces, growth rates) or the state lives in them (the box), so a change would be ignored or
  would break the continuation.  Only the keys known to be baked in are fixed (``forces.body_force``, not
  ``forces``): a key added to a section later is refused, not fixed;
* ``refused`` (:data:`REFUSED`, and unknown keys): physics-defining -- the continued run would be a different
  physical system than the one checkpointed (viscosity, contact model, overlap tolerance, walls, growth,
  seed).  An expert may accept one with ``--allow-deck-change KEY`` (verdict ``overridden``);
* ``allowed`` (:data:`ALLOWED`): how the same physics is computed and recorded -- dt and step count,
  halving, solver method and tolerances, neighbour skin, recursion depth, decomposition, output cadence and
  files, progress, debugging, the run name.

The deck a checkpoint stores is the deck file's text; the command-line overrides (``--steps``, ``--output``,
``--quiet``) are stored next to it as ``deck_overrides`` (:func:`deck_overrides`), so the comparison is with
the deck the interrupted run really used.
"""
import copy
import functools
from dataclasses import dataclass

import yaml

from relcp_mpi.config.deck import DeckError, fill_defaults, safe_load, validate

_BAKED = "is part of every body's external force in the checkpoint; a change would be ignored"
_IN_BOX = "positions, periodic images and the decomposition of the checkpoint live in this box"
FIXED = {
    "engine": "a checkpoint continues a relcp run only",
    "bodies": "the bodies (shapes, per-body force/torque/velocity, growth) come from the checkpoint; a change "
              "would be ignored",
    "generate": "the bodies come from the checkpoint; a change would be ignored",
    "forces.body_force": "the deck-wide body force " + _BAKED,
    "forces.body_torque": "the deck-wide body torque " + _BAKED,
    "box.lo": _IN_BOX,
    "box.hi": _IN_BOX,
    "box.periodic": _IN_BOX,
}
REFUSED = {
    "seed": "it keys the run's random streams (division noise, ...)",
    "walls": "walls are part of the physical system",
    "fluid.viscosity": "the viscosity sets the mobility, i.e. the dynamics",
    "fluid.kT": "the thermal energy sets the Brownian motion",
    "flow": "the imposed background flow is part of the physics",
    "contact.model": "the contact model defines the constraints",
    "contact.ms_resolution": "it defines the multi-sphere proxies' constraints",
    "contact.line_contacts": "it changes the constraint rows of line contacts",
    "contact.overlap_tol": "it is the accuracy guarantee of every step of the run",
    "growth": "the growth model is part of the physics",
}
ALLOWED = ("name", "time", "solver", "parallel", "output", "debug", "contact.skin", "contact.max_depth",
           "contact.initial_overlap_tol", "contact.recheck_neighbors", "contact.max_trial_rotation",
           # carried rows are necessary conditions only: the step's guarantee (overlap_tol) is unchanged
           "contact.carry_rows",
           # where appended rows are linearised (a configuration reachable in the step): guarantee unchanged
           "contact.row_rotation_limit", "contact.row_depth_limit",
           # a numerical target gap below overlap_tol, like solver.tol: the guarantee is unchanged
           "contact.gap_margin",
           # how a failed step is redone (stricter rows, same guarantee), like time.max_halvings
           "contact.strict_retries",
           # where a pinched body's appended rows are linearised (same guarantee)
           "contact.pinch_repairs",
           # a spin no contact force produces, dropped from the rows (same guarantee: every trial is checked)
           "contact.drop_axial_torque")
UNKNOWN_WHY = "not known to be safe to change across a restart"


@dataclass(frozen=True)
class DeckChange:
    """One difference: dotted ``key``, ``old`` (checkpoint) and ``new`` (deck) values, ``verdict``
    (allowed | refused | fixed | overridden) and ``why`` (for refused/fixed/overridden)."""
    key: str
    old: object
    new: object
    verdict: str
    why: str = ""

    def describe(self):
        s = f"{self.key}: {_show(self.old)} -> {_show(self.new)} ({self.verdict}"
        return s + (f": {self.why})" if self.why else ")")


def _show(v, limit=60):
    if isinstance(v, list) and len(v) > 6:
        return f"[{len(v)} entries]"
    s = repr(v)
    return s if len(s) <= limit else s[:limit - 20] + f"... ({len(s)} characters)"


def _under(key, prefix):
    return key == prefix or key.startswith(prefix + ".") or key.startswith(prefix + "[")


def judge(key, allow=()):
    """(verdict, why) of a change of the dotted ``key``; ``allow``: prefixes accepted by the user
    (``--allow-deck-change``), which cannot accept a FIXED key."""
    best = None
    for table, verdict in ((FIXED, "fixed"), (REFUSED, "refused"), (dict.fromkeys(ALLOWED, ""), "allowed")):
        for prefix, why in table.items():
            if _under(key, prefix) and (best is None or len(prefix) > len(best[0])):
                best = (prefix, verdict, why)
    verdict, why = ("refused", UNKNOWN_WHY) if best is None else best[1:]
    if verdict == "refused" and any(_under(key, a) for a in allow):
        return "overridden", f"{why}; accepted by --allow-deck-change"
    return verdict, why


def _same(a, b):
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    return a == b


def differences(old, new, path=""):
    """[(dotted key, old value, new value)] of two normalised decks (mappings), depth first; lists of
    different lengths are one difference."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in list(new) + [k for k in old if k not in new]:
            out += differences(old.get(k), new.get(k), f"{path}.{k}" if path else str(k))
        return out
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new)):
            out += differences(a, b, f"{path}[{i}]")
        return out
    return [] if _same(old, new) else [(path, old, new)]


def deck_changes(stored, given, allow=()):
    """[DeckChange] between the stored (effective, normalised) deck and the given normalised deck."""
    return [DeckChange(k, a, b, *judge(k, allow)) for k, a, b in differences(stored, given)]


def refused(changes):
    return [c for c in changes if c.verdict in ("refused", "fixed")]


# ------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4)
def _normalised_text(text):
    # the stream reader: yaml.safe_load's node tree of an 8,000-body deck took ~100 MiB and 6 s on every rank at a
    # run's first checkpoint (deck_overrides)
    try:
        d = safe_load(text)
    except yaml.YAMLError:
        return text
    if not isinstance(d, dict):
        return d
    try:
        return validate(d)
    except DeckError:
        return fill_defaults(d)


def normalised_deck(d):
    """A stored deck (YAML text or mapping) in normalised form (defaults filled), as a new object; if it does not
    validate (e.g. written by another version), the mapping with the defaults of keys it lacks filled in
    (:func:`~relcp_mpi.config.deck.fill_defaults`: keys added since then are not reported as changes)."""
    if isinstance(d, str):
        return copy.deepcopy(_normalised_text(d))
    if not isinstance(d, dict):
        return d
    try:
        return validate(copy.deepcopy(d))
    except DeckError:
        return fill_defaults(copy.deepcopy(d))


def deck_overrides(deck_text, effective):
    """{top-level section or key: value} where the effective normalised deck differs from its file's text
    (the command-line overrides: --steps, --output, --quiet), to be stored with the text; {} without text."""
    if not deck_text:
        return {}
    base = _normalised_text(deck_text)          # cached, read only
    if not isinstance(base, dict):
        return {}
    return {k: v for k, v in effective.items() if not _same_tree(base.get(k), v)}


def _same_tree(a, b):
    return not differences({"k": a}, {"k": b})


def effective_stored_deck(meta):
    """The deck a checkpoint's run used: its stored deck (normalised) with the stored overrides applied."""
    d = normalised_deck(meta.get("deck"))
    over = meta.get("deck_overrides")
    if isinstance(d, dict) and isinstance(over, dict):
        d.update(copy.deepcopy(over))
    return d
