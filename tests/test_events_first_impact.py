"""First-impact step (seed 001): every branch, and the complementarity / momentum / energy theorem."""
from fractions import Fraction as F

import pytest
from hypothesis import given, settings, strategies as st

from relcp_mpi.events import QuadSurd, first_impact
from relcp_mpi.events.first_impact import candidate_roots

nonneg = st.fractions(min_value=0, max_value=5, max_denominator=12)
real = st.fractions(min_value=-5, max_value=5, max_denominator=12)
pos = st.fractions(min_value=F(1, 12), max_value=5, max_denominator=12)
rest = st.fractions(min_value=0, max_value=1, max_denominator=8)


def g(q, v, a, s):
    return q + s * v + a * s * s / 2


# ---------------- branches ----------------

def test_contact_with_approach_at_start():
    r = first_impact(0, -2, 5, 1, 3, F(1, 2), 0)       # budget 0 is irrelevant on this branch
    assert r.kind == "impact" and r.time == 0 and r.gap == 0
    assert r.v_minus == -2 and r.impulse == 9 and r.v_plus == 1


def test_a_zero_branches():
    r = first_impact(2, -1, 0, 5, 1, 1, 1)              # R = {-q/v} = {2}
    assert r.kind == "impact" and r.time == 2 and r.v_minus == -1 and r.v_plus == 1 and r.impulse == 2
    r = first_impact(2, -1, 0, 1, 1, 1, 1)              # root beyond h
    assert r.kind == "free-flight" and r.gap == 1 and r.endpoint == (1, -1) and r.impulse == 0
    r = first_impact(2, 0, 0, 1, 1, 1, 0)               # a = v = 0, q > 0: R empty
    assert r.kind == "free-flight" and r.roots == () and r.endpoint == (2, 0)
    r = first_impact(0, 0, 0, 1, 1, 1, 0)               # q = v = a = 0: R empty, min 0
    assert r.kind == "free-flight" and r.roots == () and r.gap == 0
    r = first_impact(2, 1, 0, 1, 1, 1, 1)               # root -2 < 0 not retained
    assert r.kind == "free-flight" and r.gap == 3


def test_discriminant_negative():
    r = first_impact(1, 0, 1, 2, 1, 1, 2)               # D = -2
    assert r.kind == "free-flight" and r.roots == ()


def test_discriminant_zero_grazing_is_free_flight():
    # q = 1/2, v = -1, a = 1: D = 0, double root s = 1 with w(1) = 0 -> not retained; vertex check: min 0
    r = first_impact(F(1, 2), -1, 1, 2, 1, 1, 1)
    assert r.roots == (QuadSurd(1),) and r.retained == ()
    assert r.kind == "free-flight" and r.gap == F(1, 2) and r.endpoint == (F(1, 2), 1)


def test_discriminant_zero_budget():
    r = first_impact(F(1, 2), -1, 1, 2, 1, 1, 0)
    assert r.kind == "unresolved" and r.reason == "budget"


def test_discriminant_positive_irrational_root():
    r = first_impact(1, -1, -1, 3, 2, F(1, 2), 2)       # g = 1 - s - s^2/2, roots -1 +- sqrt 3
    assert r.kind == "impact"
    s = r.time
    assert isinstance(s, QuadSurd) and s == QuadSurd(-1, 1, 3)
    assert g(F(1), F(-1), F(-1), s) == 0
    assert r.v_minus == -1 - s and r.impulse == -2 * F(3, 2) * r.v_minus


def test_budget_exceeded():
    r = first_impact(1, -1, -1, 3, 2, F(1, 2), 1)       # |R| = 2 > 1
    assert r.kind == "unresolved" and r.reason == "budget"


def test_vertex_check_detects_penetration_between_samples():
    # a > 0 with D > 0 but both roots... q = 0, v = 0, a = -1: g = -s^2/2 < 0 after 0, R = {0} not retained
    r = first_impact(0, 0, -1, 1, 1, 1, 2)
    assert r.kind == "unresolved" and r.reason == "penetration"


def test_retained_requires_negative_velocity_and_window():
    # q = 0, v = 1, a = -2: roots 0 and 1; w(0) = 1 > 0 (not retained, also s > 0 fails), w(1) = -1 -> impact at 1
    r = first_impact(0, 1, -2, 2, 1, 0, 2)
    assert r.kind == "impact" and r.time == 1 and r.v_plus == 0 and r.impulse == 1
    r = first_impact(0, 1, -2, F(1, 2), 1, 0, 2)       # h < 1: no retained root, g(h) > 0
    assert r.kind == "free-flight"
    r = first_impact(0, 1, -2, 1, 1, 0, 2)              # h = 1 exactly: root at s = h is retained
    assert r.kind == "impact" and r.time == 1


def test_vertex_only_for_positive_a():
    # a > 0, vertex inside: q = 1, v = -2, a = 2: g = 1 - 2s + s^2 = (s-1)^2, D = 0 -> grazing at 1, free flight
    r = first_impact(1, -2, 2, 3, 1, 1, 1)
    assert r.kind == "free-flight"
    # q = 1, v = -3, a = 4: roots 1/2, 1 (w(1/2) = -1 -> impact)
    r = first_impact(1, -3, 4, 3, 1, 1, 2)
    assert r.kind == "impact" and r.time == F(1, 2)


def test_input_validation():
    for args in ((-1, 0, 0, 1, 1, 1, 1), (1, 0, 0, 0, 1, 1, 1), (1, 0, 0, 1, 0, 1, 1), (1, 0, 0, 1, 1, 2, 1),
                 (1, 0, 0, 1, 1, 1, -1), (1, 0, 0, 1, 1, 1, 1.5)):
        with pytest.raises(ValueError):
            first_impact(*args)


def test_candidate_set_is_complete():
    for q, v, a in ((1, -3, 4), (0, 1, -2), (2, 1, -1), (3, 0, 2)):
        R = candidate_roots(F(q), F(v), F(a))
        for s in R:
            assert g(F(q), F(v), F(a), s) == 0


# ---------------- theorem (property-based) ----------------

@settings(max_examples=300, deadline=None)
@given(nonneg, real, real, pos, pos, rest, st.integers(0, 3))
def test_complementarity_momentum_energy(q, v, a, h, m, e, B):
    r = first_impact(q, v, a, h, m, e, B)
    if r.kind == "unresolved":
        if r.reason == "budget":
            assert len(r.roots) > B
        else:  # certified negative value somewhere on [0, h]
            cands = [F(0), h] + ([-v / a] if a > 0 and 0 < -v / a < h else [])
            assert min(g(q, v, a, s) for s in cands) < 0
        return
    qs, J, vs = r.endpoint[0], r.impulse, r.endpoint[1]
    assert qs >= 0 and J >= 0 and qs * J == 0                     # q* >= 0, J >= 0, q* J = 0
    if r.kind == "free-flight":
        assert J == 0 and m * vs == m * v + m * a * h              # momentum over the step
        assert qs == g(q, v, a, h)
        for k in range(0, 9):                                       # nonpenetration over the whole step
            assert g(q, v, a, h * k / 8) >= 0
        if a == 0:
            assert vs * vs <= v * v
    else:
        s = r.time
        assert 0 <= s <= h and g(q, v, a, s) == 0
        assert r.v_minus == v + a * s and r.v_minus < 0
        assert m * r.v_plus == m * r.v_minus + J                    # impulse-momentum
        dK = m * r.v_plus * r.v_plus / 2 - m * r.v_minus * r.v_minus / 2
        assert dK == -m * (1 - e * e) * r.v_minus * r.v_minus / 2 and dK <= 0
        assert r.v_plus == -e * r.v_minus                            # restitution
        for k in range(0, 9):                                       # no penetration before the impact
            t = (s * k / 8)
            assert g(q, v, a, t) >= 0
        if a == 0:
            assert r.v_plus * r.v_plus <= v * v                      # KE nonincreasing over the full step
