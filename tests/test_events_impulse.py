"""Binary frictionless impulse law (seed 001): J > 0, momentum, restitution, tangential invariance, energy."""
from fractions import Fraction as F

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from relcp_mpi.events import NotApproachingError, NotAtContactError, binary_impulse, kinetic_energy, pair_reset

fr = st.fractions(min_value=-4, max_value=4, max_denominator=10)
pos = st.fractions(min_value=F(1, 10), max_value=4, max_denominator=10)
rest = st.fractions(min_value=0, max_value=1, max_denominator=8)


def rational_unit(dim, s, t):
    """A rational point on the unit sphere (inverse stereographic projection)."""
    if dim == 1:
        return [F(1) if s >= 0 else F(-1)]
    if dim == 2:
        n = 1 + s * s
        return [(1 - s * s) / n, 2 * s / n]
    n = 1 + s * s + t * t
    return [2 * s / n, 2 * t / n, (s * s + t * t - 1) / n]


def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


@st.composite
def contact(draw):
    dim = draw(st.integers(1, 3))
    u = rational_unit(dim, draw(fr), draw(fr))
    r1, r2, m1, m2 = draw(pos), draw(pos), draw(pos), draw(pos)
    x2 = [draw(fr) for _ in range(dim)]
    x1 = [a + (r1 + r2) * c for a, c in zip(x2, u)]
    v1 = [draw(fr) for _ in range(dim)]
    v2 = [draw(fr) for _ in range(dim)]
    return x1, x2, v1, v2, m1, m2, r1, r2, draw(rest)


@settings(max_examples=120, deadline=None)
@given(contact())
def test_impulse_laws(c):
    x1, x2, v1, v2, m1, m2, r1, r2, e = c
    n = [(a - b) / (r1 + r2) for a, b in zip(x1, x2)]
    vn = dot([a - b for a, b in zip(v1, v2)], n)
    if vn >= 0:
        with pytest.raises(NotApproachingError):
            binary_impulse(x1, x2, v1, v2, m1, m2, r1, r2, e)
        return
    res = binary_impulse(x1, x2, v1, v2, m1, m2, r1, r2, e)
    assert res.vn == vn and list(res.normal) == n
    assert res.J > 0
    for k in range(len(n)):                                     # momentum, componentwise exact
        assert m1 * res.v1_plus[k] + m2 * res.v2_plus[k] == m1 * v1[k] + m2 * v2[k]
    vnp = dot([a - b for a, b in zip(res.v1_plus, res.v2_plus)], n)
    assert vnp == -e * vn                                       # restitution
    for vold, vnew in ((v1, res.v1_plus), (v2, res.v2_plus)):   # tangential invariance
        t_old = [a - dot(vold, n) * c for a, c in zip(vold, n)]
        t_new = [a - dot(vnew, n) * c for a, c in zip(vnew, n)]
        assert t_old == t_new
    Km = kinetic_energy([m1, m2], [v1, v2])
    Kp = kinetic_energy([m1, m2], [res.v1_plus, res.v2_plus])
    alpha = 1 / m1 + 1 / m2
    assert Kp - Km == -(1 - e * e) * vn * vn / (2 * alpha) and Kp <= Km
    # the exact reset extension agrees at contact
    v1p, v2p, Jn = pair_reset(x1, x2, v1, v2, m1, m2, e)
    assert list(v1p) == list(res.v1_plus) and list(v2p) == list(res.v2_plus)
    assert list(Jn) == [res.J * c for c in n]


def test_not_at_contact_and_validation():
    with pytest.raises(NotAtContactError):
        binary_impulse([0, 0], [F(21, 10), 0], [1, 0], [0, 0], 1, 1, 1, 1, 1)
    with pytest.raises(NotApproachingError):
        binary_impulse([2, 0], [0, 0], [1, 0], [0, 0], 1, 1, 1, 1, 1)       # separating
    with pytest.raises(NotApproachingError):
        binary_impulse([2, 0], [0, 0], [0, 1], [0, 0], 1, 1, 1, 1, 1)       # tangential only
    with pytest.raises(ValueError):
        binary_impulse([2, 0], [0, 0], [-1, 0], [0, 0], 0, 1, 1, 1, 1)
    with pytest.raises(ValueError):
        binary_impulse([2, 0], [0, 0], [-1, 0], [0, 0], 1, 1, 1, 1, F(3, 2))


def test_equal_masses_elastic_exchange_exact():
    r = binary_impulse([2], [0], [-1], [0], 1, 1, 1, 1, 1)
    assert r.v1_plus == (0,) and r.v2_plus == (-1,) and r.J == 1


def test_float_path():
    x1 = np.array([np.cos(0.3), np.sin(0.3), 0.0]) * 2.0
    res = binary_impulse(x1, np.zeros(3), [-1.0, 0.2, 0.1], [0.0, 0.0, 0.0], 1.0, 3.0, 1.0, 1.0, 0.5)
    n = res.normal
    assert res.J > 0
    assert np.allclose(1.0 * res.v1_plus + 3.0 * res.v2_plus, [-1.0, 0.2, 0.1])
    assert np.isclose(np.dot(res.v1_plus - res.v2_plus, n), -0.5 * res.vn)
    with pytest.raises(NotAtContactError):
        binary_impulse(x1 * 1.001, np.zeros(3), [-1.0, 0, 0], [0.0, 0, 0], 1.0, 1.0, 1.0, 1.0, 1.0)
