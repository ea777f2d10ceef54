"""First-impact step for a one-dimensional unilateral contact (seed 001), in exact arithmetic.

Gap ``g(s) = q + s v + a s^2 / 2`` and velocity ``w(s) = v + a s`` on ``[0, h]``.  Every branch of the seed
is implemented literally:

1. ``q = 0`` and ``v < 0``: impact at ``s = 0``, ``v- = v``, ``J = -m (1 + e) v-``, ``v+ = -e v-``.
2. Otherwise the complete candidate set ``R`` of real roots of ``g``:
   ``q = v = a = 0 -> {}``; ``a = 0, v != 0 -> {-q/v}``; ``a = 0, v = 0, q > 0 -> {}``;
   ``a != 0``: ``D = v^2 - 2 a q``; ``D < 0 -> {}``; ``D = 0 -> {-v/a}``;
   ``D > 0 -> {(-v - sqrt D)/a, (-v + sqrt D)/a}`` (duplicates removed).
   ``|R| > B`` -> unresolved.  Retain exactly the ``s`` with ``0 < s <= h`` and ``w(s) < 0``, increasing.
3. Nonempty retained list: impact at its least value.
4. Empty: minimum of ``g`` over ``[0, h]`` from the two endpoints and, when ``a > 0`` and
   ``-v/a in (0, h)``, the vertex.  Negative minimum -> unresolved; otherwise free flight with endpoint
   ``(g(h), w(h))`` and impulse 0 (this includes a grazing zero: a double root is never retained because
   ``w = 0`` there, and the vertex check certifies nonpenetration).

Roots live in ``Q(sqrt D)`` and are :class:`~relcp_mpi.events.exact.QuadSurd`; every comparison is exact.
Reported numbers are Fractions when rational, QuadSurds otherwise.
"""
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Optional, Tuple

from .exact import QuadSurd, simplify, to_fraction

__all__ = ["FirstImpactResult", "first_impact"]

IMPACT, FREE_FLIGHT, UNRESOLVED = "impact", "free-flight", "unresolved"


@dataclass(frozen=True)
class FirstImpactResult:
    """Result of :func:`first_impact`.

    kind:      "impact", "free-flight" or "unresolved"
    time:      impact time s (exact), h for free flight, None when unresolved
    gap:       reported gap q*: 0 at an impact, g(h) for free flight
    impulse:   J = -m (1 + e) v- at an impact, 0 for free flight
    v_minus:   incoming velocity w(s) at an impact; w(h) for free flight
    v_plus:    post-impact velocity -e v- at an impact; w(h) for free flight
    endpoint:  (gap, velocity) reported at ``time``: (0, v+) at an impact, (g(h), w(h)) for free flight
    roots:     the candidate set R (increasing), for inspection
    retained:  the retained candidates (increasing)
    reason:    for unresolved: "budget" (|R| > B) or "penetration" (negative minimum)
    """
    kind: str
    time: object = None
    gap: object = None
    impulse: object = None
    v_minus: object = None
    v_plus: object = None
    endpoint: Optional[Tuple[object, object]] = None
    roots: tuple = field(default_factory=tuple)
    retained: tuple = field(default_factory=tuple)
    reason: Optional[str] = None


def _check_inputs(q, v, a, h, m, e, budget):
    q = to_fraction(q, "q")
    v = to_fraction(v, "v")
    a = to_fraction(a, "a")
    h = to_fraction(h, "h")
    m = to_fraction(m, "m")
    e = to_fraction(e, "e")
    if q < 0:
        raise ValueError(f"q: the gap must be >= 0, got {q}")
    if h <= 0:
        raise ValueError(f"h: the step horizon must be > 0, got {h}")
    if m <= 0:
        raise ValueError(f"m: the mass must be > 0, got {m}")
    if not (0 <= e <= 1):
        raise ValueError(f"e: the restitution must lie in [0, 1], got {e}")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ValueError(f"budget: the candidate-root budget must be an integer >= 0, got {budget!r}")
    return q, v, a, h, m, e


def candidate_roots(q, v, a):
    """The seed's complete candidate set R of real roots of ``g`` (increasing, as QuadSurds)."""
    if a == 0:
        if v != 0:
            return (QuadSurd(-q / v),)
        return ()            # q = v = a = 0, or a = 0, v = 0, q > 0 (q >= 0 is an input condition)
    D = v * v - 2 * a * q
    if D < 0:
        return ()
    if D == 0:
        return (QuadSurd(-v / a),)
    r1 = QuadSurd(-v / a, Fraction(-1) / a, D)
    r2 = QuadSurd(-v / a, Fraction(1) / a, D)
    lo, hi = (r1, r2) if r1 < r2 else (r2, r1)
    if lo == hi:
        return (lo,)
    return (lo, hi)


def first_impact(q, v, a, h, m, e, budget):
    """Exact first-impact step of seed 001.  Inputs are ints / Fractions (strings "p/q" and floats are read
    exactly via :func:`~relcp_mpi.events.exact.to_fraction`).  Returns a :class:`FirstImpactResult`."""
    q, v, a, h, m, e = _check_inputs(q, v, a, h, m, e, budget)

    def g(s):
        return q + s * v + a * s * s / 2

    def w(s):
        return v + a * s

    # branch 1: contact at the start with approach
    if q == 0 and v < 0:
        vm = v
        J = -m * (1 + e) * vm
        vp = -e * vm
        return FirstImpactResult(IMPACT, Fraction(0), Fraction(0), J, vm, vp, (Fraction(0), vp))

    R = candidate_roots(q, v, a)
    if len(R) > budget:
        return FirstImpactResult(UNRESOLVED, roots=R, reason="budget")
    retained = tuple(s for s in R if s > 0 and s <= h and w(s) < 0)
    if retained:
        s = retained[0]
        vm = simplify(w(s))
        J = simplify(-m * (1 + e) * vm)
        vp = simplify(-e * vm)
        return FirstImpactResult(IMPACT, simplify(s), Fraction(0), J, vm, vp, (Fraction(0), vp),
                                 roots=R, retained=retained)
    # no retained root: minimum of g over [0, h] (endpoints and, when a > 0 and -v/a in (0, h), the vertex)
    values = [g(Fraction(0)), g(h)]
    if a > 0:
        sv = -v / a
        if 0 < sv < h:
            values.append(g(sv))
    if min(values) < 0:
        return FirstImpactResult(UNRESOLVED, roots=R, reason="penetration")
    gh, wh = g(h), w(h)
    return FirstImpactResult(FREE_FLIGHT, h, gh, Fraction(0), wh, wh, (gh, wh), roots=R)
