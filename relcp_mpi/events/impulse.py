"""Binary frictionless sphere impulse law (seed 001) and its smooth reset extension.

:func:`binary_impulse` -- spheres at contact (``||x1 - x2|| = r1 + r2``) approaching
(``v_n = <v1 - v2, n> < 0``, ``n = (x1 - x2)/(r1 + r2)`` from 2 to 1)::

    alpha = 1/m1 + 1/m2,  J = -(1 + e) v_n / alpha,  v1+ = v1 + J n / m1,  v2+ = v2 - J n / m2.

With rational inputs (ints / Fractions) everything is exact (the normal ``(x1 - x2)/(r1 + r2)`` is rational)
and the contact test is an exact equality of squared lengths; with any float input the computation is in
float64 and contact is tested with the relative tolerance ``rtol``.

:func:`pair_reset` -- the time-independent extension ``R(z)`` to every state with ``d = x_i - x_j != 0``:
``J(z) n(z) = -kappa <v_i - v_j, d> d / ||d||^2`` with ``kappa = (1 + e)/alpha``; this vector is rational
for rational states, so the event engine's reset is exact (``eps_R = 0``) whatever the guard value.
"""
from dataclasses import dataclass
from fractions import Fraction
import numbers

import numpy as np

from .exact import to_fraction

__all__ = ["ImpactError", "NotAtContactError", "NotApproachingError", "ImpulseResult", "binary_impulse",
           "pair_reset", "kinetic_energy"]


class ImpactError(ValueError):
    """The binary impulse law does not apply to the given pair."""


class NotAtContactError(ImpactError):
    """``||x1 - x2|| != r1 + r2``."""


class NotApproachingError(ImpactError):
    """The relative normal velocity is not negative."""


@dataclass(frozen=True)
class ImpulseResult:
    """J: impulse magnitude (> 0); v1_plus, v2_plus: post-impact velocities; normal: unit n from 2 to 1;
    vn: pre-impact relative normal velocity (< 0).  Exact Fractions (tuples) or float64 arrays."""
    J: object
    v1_plus: object
    v2_plus: object
    normal: object
    vn: object


def _is_exact(*vals):
    for x in vals:
        if isinstance(x, (list, tuple, np.ndarray)):
            arr = np.asarray(x, dtype=object).ravel()
            if not all(isinstance(y, (numbers.Rational, str)) and not isinstance(y, bool) for y in arr):
                return False
        elif not (isinstance(x, (numbers.Rational, str)) and not isinstance(x, bool)):
            return False
    return True


def _vec(x, name):
    if not isinstance(x, (list, tuple, np.ndarray)):
        raise ValueError(f"{name}: expected a vector, got {x!r}")
    return [to_fraction(y, name) for y in np.asarray(x, dtype=object).ravel()]


def _check_scalars(m1, m2, r1, r2, e):
    for nm, val in (("m1", m1), ("m2", m2), ("r1", r1), ("r2", r2)):
        if not val > 0:
            raise ValueError(f"{nm}: must be > 0, got {val}")
    if not (0 <= e <= 1):
        raise ValueError(f"e: restitution must lie in [0, 1], got {e}")


def binary_impulse(x1, x2, v1, v2, m1, m2, r1, r2, e, *, rtol=1e-9):
    """Apply the seed's binary impulse law.  Raises :class:`NotAtContactError` when the spheres are not at
    contact and :class:`NotApproachingError` when ``v_n >= 0``.  See the module docstring."""
    if _is_exact(x1, x2, v1, v2, m1, m2, r1, r2, e):
        x1, x2, v1, v2 = (_vec(x1, "x1"), _vec(x2, "x2"), _vec(v1, "v1"), _vec(v2, "v2"))
        m1, m2, r1, r2, e = (to_fraction(m1, "m1"), to_fraction(m2, "m2"), to_fraction(r1, "r1"),
                             to_fraction(r2, "r2"), to_fraction(e, "e"))
        _check_scalars(m1, m2, r1, r2, e)
        dim = len(x1)
        if not (len(x2) == len(v1) == len(v2) == dim) or dim == 0:
            raise ValueError("x1, x2, v1, v2 must be vectors of one common dimension >= 1")
        d = [a - b for a, b in zip(x1, x2)]
        dist2 = sum(c * c for c in d)
        R = r1 + r2
        if dist2 != R * R:
            raise NotAtContactError(f"spheres are not at contact: ||x1 - x2||^2 = {dist2} != (r1 + r2)^2 = {R * R}")
        n = [c / R for c in d]
        vn = sum((a - b) * c for a, b, c in zip(v1, v2, n))
        if vn >= 0:
            raise NotApproachingError(f"spheres are not approaching: <v1 - v2, n> = {vn} >= 0")
        alpha = 1 / m1 + 1 / m2
        J = -(1 + e) * vn / alpha
        v1p = tuple(a + J * c / m1 for a, c in zip(v1, n))
        v2p = tuple(b - J * c / m2 for b, c in zip(v2, n))
        return ImpulseResult(J, v1p, v2p, tuple(n), vn)
    # float path
    x1, x2, v1, v2 = (np.asarray(x, dtype=float).ravel() for x in (x1, x2, v1, v2))
    m1, m2, r1, r2, e = (float(y) for y in (m1, m2, r1, r2, e))
    _check_scalars(m1, m2, r1, r2, e)
    if not (x1.shape == x2.shape == v1.shape == v2.shape) or x1.size == 0:
        raise ValueError("x1, x2, v1, v2 must be vectors of one common dimension >= 1")
    d = x1 - x2
    R = r1 + r2
    dist = float(np.linalg.norm(d))
    if abs(dist - R) > rtol * R:
        raise NotAtContactError(f"spheres are not at contact: ||x1 - x2|| = {dist!r}, r1 + r2 = {R!r} (rtol {rtol})")
    n = d / R
    vn = float(np.dot(v1 - v2, n))
    if not vn < 0:
        raise NotApproachingError(f"spheres are not approaching: <v1 - v2, n> = {vn!r} >= 0")
    alpha = 1 / m1 + 1 / m2
    J = -(1 + e) * vn / alpha
    return ImpulseResult(J, v1 + J * n / m1, v2 - J * n / m2, n, vn)


def pair_reset(xi, xj, vi, vj, mi, mj, e):
    """Exact smooth reset extension R(z) for one pair (Fractions in, tuples of Fractions out):
    returns ``(vi+, vj+, Jn)`` with ``Jn = -kappa <vi - vj, d> d / ||d||^2`` (the impulse vector on i)."""
    d = [a - b for a, b in zip(xi, xj)]
    dd = sum(c * c for c in d)
    if dd == 0:
        raise ImpactError("reset extension undefined: coincident centres (d = 0)")
    alpha = 1 / Fraction(mi) + 1 / Fraction(mj)
    kappa = (1 + Fraction(e)) / alpha
    dv_d = sum((a - b) * c for a, b, c in zip(vi, vj, d))
    f = -kappa * dv_d / dd
    Jn = tuple(f * c for c in d)
    vip = tuple(a + c / mi for a, c in zip(vi, Jn))
    vjp = tuple(b - c / mj for b, c in zip(vj, Jn))
    return vip, vjp, Jn


def kinetic_energy(masses, velocities):
    """``sum_k m_k ||v_k||^2 / 2`` (exact for Fractions)."""
    return sum(m * sum(c * c for c in v) for m, v in zip(masses, velocities)) / 2
