"""Exact arithmetic for the event engine: rationals and quadratic surds ``a + b sqrt(d)``.

Every decision of the event engine (which root is earliest, is a guard value positive, is a derivative
negative on a bracket) is an exact sign computation on numbers of the form ``p + q sqrt(D)`` or
``p + q sqrt(D) + r sqrt(E)`` with rational ``p, q, r, D, E``.  Signs are decided by squaring with sign care,
never by floating point.  Floats appear only in ``__float__`` for output.

Contents
--------
* :func:`to_fraction` -- int / Fraction / decimal string / ``"p/q"`` / float (read as its shortest decimal
  repr, so ``0.1 -> 1/10``) to :class:`fractions.Fraction`.
* :func:`sign_surd` -- exact sign of ``u + q sqrt(D)``.
* :func:`sign_two_surds` -- exact sign of ``p + q sqrt(D) + r sqrt(E)``.
* :class:`QuadSurd` -- the number ``a + b sqrt(d)``; same-field arithmetic, exact comparisons with any
  rational or surd (any radicands), exact floor/ceil on a dyadic grid.
* :func:`sqrt_down`, :func:`sqrt_up` -- certified rational lower/upper bounds of ``sqrt(x)``.
* :func:`exp_up` -- certified rational upper bound of ``exp(x)``, ``x >= 0``.
* :func:`round_dyadic` -- nearest point of the grid ``2**-bits Z``.
"""
from fractions import Fraction
from math import isqrt
import math
import numbers

from relcp_mpi.basics.rational import to_fraction as _to_fraction

__all__ = ["to_fraction", "sign_surd", "sign_two_surds", "QuadSurd", "as_surd", "simplify", "sqrt_down",
           "sqrt_up", "exp_up", "round_dyadic", "round_up_rel", "SQRT2_UP", "fstr"]


def to_fraction(x, name="value"):
    """Convert ``x`` to a Fraction exactly (:func:`relcp_mpi.basics.rational.to_fraction`); a rational
    QuadSurd gives its rational part, an irrational one a ``ValueError``."""
    if isinstance(x, QuadSurd):
        if x.is_rational():
            return x.a
        raise ValueError(f"{name}: expected a rational number, got {x!r} ({type(x).__name__})")
    return _to_fraction(x, name)


def _sgn(x):
    return (x > 0) - (x < 0)


def sign_surd(u, q, D):
    """Exact sign (-1, 0, 1) of ``u + q sqrt(D)`` for rationals ``u, q`` and ``D >= 0``."""
    su = _sgn(u)
    if q == 0 or D == 0:
        return su
    sq = _sgn(q)
    if su == 0:
        return sq
    if su == sq:
        return su
    c = u * u - q * q * D          # |u|^2 - |q sqrt D|^2
    if c > 0:
        return su
    if c < 0:
        return sq
    return 0


def sign_two_surds(p, q, D, r, E):
    """Exact sign of ``p + q sqrt(D) + r sqrt(E)`` (rationals, ``D, E >= 0``)."""
    sA = sign_surd(p, q, D)
    sB = _sgn(r) if E != 0 else 0
    if sB == 0:
        return sA
    if sA == 0:
        return sB
    if sA == sB:
        return sA
    # opposite signs: compare A^2 = p^2 + q^2 D + 2 p q sqrt(D) with B^2 = r^2 E
    s = sign_surd(p * p + q * q * D - r * r * E, 2 * p * q, D)
    if s > 0:
        return sA
    if s < 0:
        return sB
    return 0


def _normalize_radicand(b, d):
    """Return (rational_part_multiplier_or_None, b', d') with d' a positive non-square integer."""
    d = Fraction(d)
    if d < 0:
        raise ValueError(f"QuadSurd: negative radicand {d}")
    if b == 0 or d == 0:
        return Fraction(0), Fraction(0), Fraction(0)
    # sqrt(n/m) = sqrt(n m) / m
    n, m = d.numerator, d.denominator
    nm = n * m
    r = isqrt(nm)
    if r * r == nm:
        return b * Fraction(r, m), Fraction(0), Fraction(0)
    return Fraction(0), b / m, Fraction(nm)


class QuadSurd:
    """The real number ``a + b sqrt(d)`` with rational ``a, b`` and a non-square positive integer ``d``
    (or ``b = d = 0`` for a rational).  Immutable.  Arithmetic with rationals and with surds of the same
    radicand is exact; comparisons work between any two surds (any radicands) and rationals."""

    __slots__ = ("a", "b", "d")

    def __init__(self, a, b=0, d=0):
        a = to_fraction(a, "QuadSurd.a")
        b = to_fraction(b, "QuadSurd.b")
        extra, b, d = _normalize_radicand(b, to_fraction(d, "QuadSurd.d"))
        object.__setattr__(self, "a", a + extra)
        object.__setattr__(self, "b", b)
        object.__setattr__(self, "d", d)

    def __setattr__(self, k, v):
        raise AttributeError("QuadSurd is immutable")

    def __reduce__(self):
        return (QuadSurd, (self.a, self.b, self.d))

    # ---- inspection ----
    def is_rational(self):
        return self.b == 0

    def sign(self):
        return sign_surd(self.a, self.b, self.d)

    def conjugate(self):
        return QuadSurd(self.a, -self.b, self.d)

    def __float__(self):
        if self.b == 0:
            return float(self.a)
        bs = sqrt_down(self.b * self.b * self.d, 64)
        approx = float(self.a + (bs if self.b > 0 else -bs))
        k = 80 - math.frexp(approx)[1] if approx != 0 else 400
        k = max(0, min(k, 4000))
        return float(Fraction(self.floor_scaled(k), 1 << k))

    def __repr__(self):
        if self.b == 0:
            return f"QuadSurd({self.a})"
        return f"QuadSurd({self.a} + ({self.b})*sqrt({self.d}))"

    def __str__(self):
        if self.b == 0:
            return str(self.a)
        return f"{self.a} + ({self.b})*sqrt({self.d})"

    # ---- arithmetic (same field) ----
    def _field(self, other):
        o = as_surd(other)
        if self.b != 0 and o.b != 0 and self.d != o.d:
            raise ValueError(f"QuadSurd arithmetic across fields sqrt({self.d}) and sqrt({o.d}) is not supported")
        return o, (self.d if self.b != 0 else o.d)

    def __add__(self, other):
        try:
            o, d = self._field(other)
        except TypeError:
            return NotImplemented
        return QuadSurd(self.a + o.a, self.b + o.b, d)

    __radd__ = __add__

    def __neg__(self):
        return QuadSurd(-self.a, -self.b, self.d)

    def __pos__(self):
        return self

    def __abs__(self):
        return -self if self.sign() < 0 else self

    def __sub__(self, other):
        try:
            o, d = self._field(other)
        except TypeError:
            return NotImplemented
        return QuadSurd(self.a - o.a, self.b - o.b, d)

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        try:
            o, d = self._field(other)
        except TypeError:
            return NotImplemented
        return QuadSurd(self.a * o.a + self.b * o.b * d, self.a * o.b + self.b * o.a, d)

    __rmul__ = __mul__

    def __truediv__(self, other):
        try:
            o, d = self._field(other)
        except TypeError:
            return NotImplemented
        if o.b == 0:
            if o.a == 0:
                raise ZeroDivisionError("QuadSurd division by zero")
            return QuadSurd(self.a / o.a, self.b / o.a, self.d)
        den = o.a * o.a - o.b * o.b * o.d   # nonzero: d is not a square
        num = self * o.conjugate()
        return QuadSurd(num.a / den, num.b / den, d)

    def __rtruediv__(self, other):
        return as_surd(other) / self

    def __pow__(self, n):
        if not isinstance(n, int) or n < 0:
            return NotImplemented
        r = QuadSurd(1)
        for _ in range(n):
            r = r * self
        return r

    # ---- comparisons (any radicands) ----
    def cmp(self, other):
        """Exact sign of ``self - other``."""
        o = as_surd(other)
        if self.b == 0 or o.b == 0 or self.d == o.d:
            d = self.d if self.b != 0 else o.d
            return sign_surd(self.a - o.a, self.b - o.b, d)
        return sign_two_surds(self.a - o.a, self.b, self.d, -o.b, o.d)

    def __eq__(self, other):
        try:
            return self.cmp(other) == 0
        except TypeError:
            return NotImplemented

    def __ne__(self, other):
        try:
            return self.cmp(other) != 0
        except TypeError:
            return NotImplemented

    def __lt__(self, other):
        return self.cmp(other) < 0

    def __le__(self, other):
        return self.cmp(other) <= 0

    def __gt__(self, other):
        return self.cmp(other) > 0

    def __ge__(self, other):
        return self.cmp(other) >= 0

    __hash__ = None

    # ---- rational approximation ----
    def floor_scaled(self, k):
        """Exact ``floor(self * 2**k)`` as an int (k >= 0 integer)."""
        s = 1 << k
        A, Bq = self.a * s, self.b * s
        if Bq == 0:
            return math.floor(A)
        y = Bq * Bq * self.d
        r = isqrt(y.numerator // y.denominator)
        n = math.floor(A) + (r if Bq > 0 else -r - 1)
        x = QuadSurd(A, Bq, self.d)
        while x.cmp(n) < 0:
            n -= 1
        while x.cmp(n + 1) >= 0:
            n += 1
        return n

    def floor_grid(self, k):
        """Largest multiple of ``2**-k`` that is <= self (a Fraction)."""
        return Fraction(self.floor_scaled(k), 1 << k)

    def ceil_grid(self, k):
        """Smallest multiple of ``2**-k`` that is >= self (a Fraction)."""
        return -((-self).floor_grid(k))


def as_surd(x):
    """Wrap a rational (int/Fraction) as a QuadSurd; QuadSurds pass through.  Other types: TypeError."""
    if isinstance(x, QuadSurd):
        return x
    if isinstance(x, bool):
        raise TypeError("bool is not a number here")
    if isinstance(x, (int, Fraction)) or isinstance(x, numbers.Rational):
        return QuadSurd(Fraction(x))
    raise TypeError(f"cannot use {type(x).__name__} in exact surd arithmetic")


def simplify(x):
    """Return a Fraction when the surd is rational, else the QuadSurd itself."""
    if isinstance(x, QuadSurd) and x.is_rational():
        return x.a
    return x


def fstr(x):
    """Exact string of a Fraction / int / QuadSurd (for output files)."""
    if x is None:
        return ""
    return str(x)


def _sqrt_floor_scaled(x, bits):
    """Shared part of :func:`sqrt_down` / :func:`sqrt_up`.  Returns ``(exact, r, k)``: ``exact`` is the
    Fraction ``sqrt(x)`` when ``x`` is 0 or the square of a rational (then ``r, k`` are None), else None and
    ``r = isqrt(floor(x 4**k))`` with ``k`` chosen for a relative precision of about ``2**-bits``, so that
    ``r / 2**k <= sqrt(x) < (r + 1) / 2**k``."""
    x = to_fraction(x)
    if x < 0:
        raise ValueError(f"sqrt of negative {x}")
    if x == 0:
        return Fraction(0), None, None
    n, m = x.numerator, x.denominator
    rn, rm = isqrt(n), isqrt(m)
    if rn * rn == n and rm * rm == m:
        return Fraction(rn, rm), None, None
    e = n.bit_length() - m.bit_length()
    k = max(0, bits - e // 2 + 2)
    r = isqrt((n << (2 * k)) // m)      # r^2 <= floor(x 4^k) => (r+1)^2 > x 4^k
    return None, r, k


def sqrt_down(x, bits=64):
    """Certified rational lower bound of ``sqrt(x)`` (x a nonnegative rational), relative precision
    about ``2**-bits``; exact when x is the square of a rational."""
    exact, r, k = _sqrt_floor_scaled(x, bits)
    if exact is not None:
        return exact
    return Fraction(r, 1 << k)


def sqrt_up(x, bits=64):
    """Certified rational upper bound of ``sqrt(x)``; exact on squares of rationals."""
    exact, r, k = _sqrt_floor_scaled(x, bits)
    if exact is not None:
        return exact
    return Fraction(r + 1, 1 << k)


def round_up_rel(v, bits=64):
    """Upper bound of the positive rational v on a dyadic grid with about ``bits`` significant bits."""
    v = to_fraction(v)
    if v <= 0:
        return v
    e = v.numerator.bit_length() - v.denominator.bit_length()
    sh = bits - e
    if sh >= 0:
        num = -((-v.numerator << sh) // v.denominator)
        return Fraction(num, 1 << sh)
    den = 1 << (-sh)
    num = -((-v.numerator) // (v.denominator * den))
    return Fraction(num * den)


def exp_up(x, bits=64):
    """Certified rational upper bound of ``exp(x)`` for rational ``x >= 0`` (argument halving, Taylor
    polynomial plus a geometric remainder bound, then squaring with upward rounding)."""
    x = to_fraction(x)
    if x < 0:
        raise ValueError("exp_up needs x >= 0")
    if x == 0:
        return Fraction(1)
    s = 0
    y = x
    half = Fraction(1, 2)
    while y > half:
        y /= 2
        s += 1
    y = round_up_rel(y, bits + 16)
    tol = Fraction(1, 1 << (bits + 16))
    total = Fraction(1)
    term = Fraction(1)
    k = 0
    while True:
        k += 1
        term = term * y / k
        total += term
        if term < tol:
            break
    # tail: sum_{j>k} y^j/j! <= term * y/(k+1) / (1 - y/(k+2)) <= 2 term y/(k+1)  (y <= 1/2)
    total += 2 * term * y / (k + 1)
    total = round_up_rel(total, bits + 16)
    for _ in range(s):
        total = round_up_rel(total * total, bits + 16)
    return total


def round_dyadic(x, bits):
    """Nearest multiple of ``2**-bits`` to the rational x (ties away from zero is not needed: any nearest
    point works, the rounding error is bounded separately)."""
    x = to_fraction(x)
    s = 1 << bits
    return Fraction(round(x * s), s)


SQRT2_UP = sqrt_up(2, 128)
