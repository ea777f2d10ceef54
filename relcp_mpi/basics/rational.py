"""Exact rational numbers read from input: :func:`to_fraction` and the size-bounded :func:`read_exact`.

Shared by the deck loader (``event_driven`` section, :mod:`relcp_mpi.config.events`) and the event engine
(:mod:`relcp_mpi.events.exact`, which adds quadratic surds on top).  No relcp_mpi imports.
"""
import math
import numbers
import re
from fractions import Fraction

# numerator and denominator of every number read with read_exact: |x| and 1/|x| below ~1.8e308
MAX_NUMBER_BITS = 1024


def to_fraction(x, name="value"):
    """Convert ``x`` to a Fraction exactly.  Floats are read through their shortest decimal ``repr``
    (``0.1`` is ``1/10``), strings may be ``"3"``, ``"-1/3"``, ``"0.25"``, ``"1e-6"``.  Booleans, NaN and
    infinities are rejected with a ``ValueError`` naming ``name``."""
    if isinstance(x, bool):
        raise ValueError(f"{name}: expected a number, got the boolean {x!r}")
    if isinstance(x, Fraction):
        return x
    if isinstance(x, numbers.Integral):
        return Fraction(int(x))
    if isinstance(x, numbers.Rational):
        return Fraction(x.numerator, x.denominator)
    if isinstance(x, numbers.Real):
        xf = float(x)
        if not math.isfinite(xf):
            raise ValueError(f"{name}: expected a finite number, got {x!r}")
        return Fraction(repr(xf))
    if isinstance(x, str):
        try:
            return Fraction(x.strip())
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"{name}: cannot read {x!r} as an exact number (use e.g. 3, -1/3, 0.25, 1e-6)")
    raise ValueError(f"{name}: expected a rational number, got {x!r} ({type(x).__name__})")


def read_exact(x, name):
    """:func:`to_fraction` with a bound on the size of the number: a decimal exponent or an integer too large
    is refused (``ValueError`` naming ``name``) before it is expanded (``1e100000000`` would take minutes to
    build and forever to compute with)."""
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
