"""Certified event-driven simulator (seed 001): exact answers, every unresolved reason, certificates."""
from fractions import Fraction as F
import itertools
import math
import random

import pytest
from hypothesis import given, settings, strategies as st

from relcp_mpi.events import simulate

TOL = dict(eps_time=F(1, 10 ** 6), eps_guard=F(1, 10 ** 6), delta=F(1, 20))


def cradle(gaps, v0=1, e=1, T=10, n_evt=10, budget=10, **kw):
    x = [F(0)]
    for gp in gaps:
        x.append(x[-1] + 1 + F(gp))
    P = len(x)
    vel = [[F(v0)]] + [[F(0)] for _ in range(P - 1)]
    opts = dict(TOL)
    opts.update(kw)
    return simulate([[c] for c in x], vel, [1] * P, [F(1, 2)] * P, e, T, n_evt=n_evt, budget=budget, **opts)


def dist2(q, i, j):
    return sum((a - b) ** 2 for a, b in zip(q[i], q[j]))


# ---------------- exact answers ----------------

def test_gapped_five_ball_cradle_exact():
    r = cradle([F(1, 10)] * 4, n_evt=4, budget=4)
    assert r.status == "complete" and r.reason is None
    assert [tuple(v) for v in r.v_final] == [(0,), (0,), (0,), (0,), (1,)]
    assert [e.pair for e in r.events] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert [e.a for e in r.events] == [F(1, 10), F(2, 10), F(3, 10), F(4, 10)]
    assert all(e.a == e.b and e.exact and e.lag == 0 and e.E_after == 0 for e in r.events)
    assert r.ledger == [0] * 5 and r.error_final == 0 and r.t_final == 10
    # exact contact at every reported event time, and the final positions
    for ev in r.events:
        q, _ = r.state_at(ev.b, [0])
        i, j = ev.pair
        assert dist2(q, i, j) == 1
    assert [tuple(x) for x in r.q_final] == [(F(1, 10),), (F(12, 10),), (F(23, 10),), (F(34, 10),), (F(44, 10) + 10 - F(4, 10),)]


def test_cradle_unequal_masses_momentum_energy_exact():
    pos = [[F(0)], [F(5, 2)], [F(11, 2)]]
    r = simulate(pos, [[F(2)], [F(-1, 3)], [F(-1)]], [1, 3, F(1, 2)], [1, 1, F(1, 2)], 1, 20, n_evt=20,
                 budget=20, **TOL)
    assert r.status == "complete" and r.n_events >= 2
    m = [1, 3, F(1, 2)]
    assert sum(mk * v[0] for mk, v in zip(m, r.v_final)) == 2 - 1 - F(1, 2)
    assert sum(mk * v[0] ** 2 for mk, v in zip(m, r.v_final)) == 4 + F(1, 3) + F(1, 2)
    assert r.error_final == 0


def test_touching_cradle_unresolved():
    r = cradle([0, 0, 0, 0])                         # all touching, ball 0 pushes: grazing/simultaneous at t = 0
    assert r.status == "unresolved" and r.reason in ("simultaneous", "grazing")
    assert r.events == [] and r.t_final == 0
    r = cradle([F(1, 10), 0, 0, 0])                  # gap before a touching chain: zero-speed zeros at t = 0
    assert r.status == "unresolved" and r.reason == "grazing" and r.n_events == 0


def test_initial_enabled_root_processed_once():
    r = cradle([0], n_evt=1, budget=1)               # two balls touching and approaching at t = 0
    assert r.status == "complete" and r.n_events == 1
    assert r.events[0].a == r.events[0].b == 0
    assert [tuple(v) for v in r.v_final] == [(0,), (1,)]


def test_simultaneous_impacts_unresolved():
    pos = [[F(0)], [F(3)], [F(6)]]
    r = simulate(pos, [[F(1)], [F(0)], [F(-1)]], [1, 1, 1], [1, 1, 1], 1, 10, n_evt=5, budget=5, **TOL)
    assert r.status == "unresolved" and r.reason == "simultaneous" and r.n_events == 0
    # 2-D: two spheres hit a third at the same irrational time
    pos = [[F(-3), F(1, 2)], [F(0), F(0)], [F(3), F(1, 2)]]
    r = simulate(pos, [[F(1), F(0)], [F(0), F(0)], [F(-1), F(0)]], [1, 1, 1], [1, 1, 1], 1, 10, n_evt=5,
                 budget=5, **TOL)
    assert r.status == "unresolved" and r.reason == "simultaneous"


def test_e_zero_after_first_impact():
    """e = 0: the first impact is processed; afterwards the pair has zero outgoing normal speed, which is no
    isolated transverse event (seed item 5): unresolved (grazing), prefix = the first impact."""
    r = cradle([F(1, 2)], e=0, n_evt=5, budget=5)
    assert r.status == "unresolved" and r.reason == "grazing"
    assert r.n_events == 1 and r.t_final == F(1, 2)
    assert [tuple(v) for v in r.v_final] == [(F(1, 2),), (F(1, 2),)]
    # oblique 2-D, irrational impact time: the start certificate of the next segment fails as well
    r = simulate([[0, 0], [3, F(1, 2)]], [[1, 0], [0, 0]], [1, 1], [1, 1], 0, 5, n_evt=5, budget=5,
                 eps_time=F(1, 10 ** 9), eps_guard=F(1, 10 ** 6), delta=F(1, 20), grid_bits=80)
    assert r.status == "unresolved" and r.reason == "grazing" and r.n_events == 1


def test_grazing_trajectory_unresolved():
    # ||(-5 + t, 2)|| = 2 = r1 + r2 touches at t = 5 only (zero discriminant)
    r = simulate([[0, 0], [5, 2]], [[1, 0], [0, 0]], [1, 1], [1, 1], 1, 10, n_evt=5, budget=5, **TOL)
    assert r.status == "unresolved" and r.reason == "grazing" and r.n_events == 0
    r = simulate([[0, 0], [5, 2]], [[1, 0], [0, 0]], [1, 1], [1, 1], 1, 4, n_evt=5, budget=5, **TOL)
    assert r.status == "complete"                      # the tangency lies after T


def test_endpoint_policies():
    # two balls, impact exactly at T = 1/2
    kw = dict(n_evt=1, budget=1)
    r = cradle([F(1, 2)], T=F(1, 2), endpoint_policy="include", **kw)
    assert r.status == "complete" and r.n_events == 1 and [tuple(v) for v in r.v_final] == [(0,), (1,)]
    r = cradle([F(1, 2)], T=F(1, 2), endpoint_policy="pre-impact", **kw)
    assert r.status == "complete" and r.n_events == 0 and r.pending is not None
    assert [tuple(v) for v in r.v_final] == [(1,), (0,)] and r.t_final == F(1, 2)
    r = cradle([F(1, 2)], T=F(1, 2), endpoint_policy="include", n_evt=0, budget=0)
    assert r.status == "unresolved" and r.reason == "budget"
    r = cradle([F(1, 2)], T=F(1, 2), endpoint_policy="pre-impact", n_evt=0, budget=0)
    assert r.status == "complete"                      # the endpoint event is not counted


def test_budget_and_event_count():
    r = cradle([F(1, 10)] * 4, n_evt=4, budget=2)
    assert r.status == "unresolved" and r.reason == "budget" and r.n_events == 2
    assert [tuple(v) for v in r.v_final] == [(0,), (0,), (1,), (0,), (0,)] and r.t_final == F(2, 10)
    r = cradle([F(1, 10)] * 4, n_evt=3, budget=4)
    assert r.status == "unresolved" and r.reason == "event_count" and r.n_events == 3


def test_separation():
    r = cradle([F(1, 10)] * 4, delta=F(1, 5))
    assert r.status == "unresolved" and r.reason == "separation" and r.n_events == 1


def test_penetrating_input_rejected():
    with pytest.raises(ValueError, match="penetrates"):
        simulate([[0], [F(1, 2)]], [[0], [0]], [1, 1], [F(1, 2), F(1, 2)], 1, 1, n_evt=1, budget=1, **TOL)
    with pytest.raises(ValueError):
        cradle([1], endpoint_policy="later")


# ---------------- inexact events: brackets, ledger ----------------

def gas(d, side, seed):
    rnd = random.Random(seed)
    pos, vel = [], []
    for p in itertools.product(range(side), repeat=d):
        pos.append([F(5 * x, 2) + F(rnd.randint(-20, 20), 100) for x in p])
        vel.append([F(rnd.randint(-100, 100), 100) - F(2 * x - (side - 1), 2) for x in p])
    return pos, vel


GAS = dict(eps_time=F(1, 10 ** 12), eps_guard=F(1, 10 ** 9), delta=F(1, 10 ** 4), n_evt=60, budget=60)


def check_certificates(r, field_g):
    """Independent re-check of every event certificate from the reported exact states."""
    for k, ev in enumerate(r.events):
        seg = r.segments[k]
        i, j = ev.pair
        R = r.params["radii"][i] + r.params["radii"][j]
        c = ev.certs.get("c", 0) if not ev.exact else 0
        # brackets: width, separation, sign change of the (inflated) guard
        assert ev.a <= ev.b and ev.b - ev.a <= r.params["eps_time"] and 3 * (ev.b - ev.a) < r.params["delta"]
        if k:
            assert ev.a - r.events[k - 1].b >= r.params["delta"]
        # reported state at the segment start flowed to a and b
        s_a, s_b = ev.a - seg.t0, ev.b - seg.t0

        def N(s):
            return sum((x + s * y - (x2 + s * y2)) ** 2 for x, y, x2, y2 in zip(seg.q[i], seg.v[i], seg.q[j], seg.v[j]))

        if ev.exact:
            assert N(s_a) == R * R and ev.lag == 0
        else:
            assert N(s_a) > (R + c) ** 2 and N(s_b) < (R - c) ** 2
            assert ev.root_reported > ev.a and ev.root_reported < ev.b
            assert 0 < ev.lag <= ev.b - ev.a
        assert ev.nu > 0 and 0 <= ev.eps_obs <= r.params["eps_guard"]
        # ledger recurrence
        rhs = ev.L_R * ev.eta_ref + (ev.L_R * ev.M_minus + ev.M_plus) * ev.lag + ev.eps_R
        assert ev.E_after >= rhs and ev.E_after <= rhs * (1 + F(1, 2 ** 40))
        assert ev.eta_ref >= ev.E_before
        if ev.E_before:
            assert ev.eta_ref >= ev.E_before * (1 + s_b)    # e^{H} >= 1 + H
        assert r.ledger[k + 1] == ev.E_after


def test_gas_2d_complete_with_certificates():
    pos, vel = gas(2, 3, 3)
    g = [F(0), F(-1)]
    r = simulate(pos, vel, [1] * 9, [1] * 9, F(9, 10), 4, field=g, grid_bits=600, round_bits=700, **GAS)
    assert r.status == "complete" and r.n_events >= 10
    assert any(not ev.exact for ev in r.events)
    check_certificates(r, g)
    assert r.error_final < F(1, 10 ** 100)


def test_gas_3d_exact_conservation_without_rounding():
    """3-D, e = 1, uniform field, no rounding: the reported states are exact rationals, so momentum and the
    total mechanical energy of the reported trajectory are conserved exactly across the certified resets."""
    pos, vel = gas(3, 2, 1)
    g = [F(0), F(0), F(-1)]
    P = len(pos)
    m = [1, 2, 1, 3, 1, 1, 2, 1]
    r = simulate(pos, vel, m, [1] * P, 1, 3, field=g, grid_bits=200, **GAS)
    assert r.status == "complete" and r.n_events >= 2
    check_certificates(r, g)
    T = F(3)
    for k in range(3):
        p0 = sum(mk * v[k] for mk, v in zip(m, vel)) + sum(m) * g[k] * T
        assert sum(mk * v[k] for mk, v in zip(m, r.v_final)) == p0

    def energy(q, v):
        return sum(mk * sum(c * c for c in vk) / 2 - mk * sum(gg * c for gg, c in zip(g, qk))
                   for mk, qk, vk in zip(m, q, v))

    assert energy(r.q_final, r.v_final) == energy([[to for to in p] for p in pos], vel)


def test_ledger_tolerance_and_band():
    pos, vel = gas(2, 3, 3)
    g = [F(0), F(-1)]
    # an explicit ledger tolerance below the first inexact event's E
    r = simulate(pos, vel, [1] * 9, [1] * 9, F(9, 10), 4, field=g, grid_bits=100, ledger_tol=F(1, 10 ** 60), **GAS)
    assert r.status == "unresolved" and r.reason == "ledger_tolerance" and r.pending is not None
    # a coarse grid: the ledger band soon forces brackets wider than eps_time
    r = simulate(pos, vel, [1] * 9, [1] * 9, F(9, 10), 4, field=g, **GAS)
    assert r.status == "unresolved" and r.reason == "ledger_tolerance" and r.n_events >= 1


def test_endpoint_undecided():
    """T placed inside the uncertainty band of an inexact event: the engine cannot decide whether the event
    happens before T."""
    base = dict(eps_time=F(1, 10 ** 9), eps_guard=F(1, 10 ** 6), delta=F(1, 20), n_evt=5, budget=5, grid_bits=80)
    pos = [[F(0), F(0)], [F(3), F(1, 2)], [F(7), F(3, 2)]]
    vel = [[F(1), F(0)], [F(0), F(0)], [F(0), F(0)]]
    r = simulate(pos, vel, [1, 1, 1], [1, 1, 1], 1, 10, **base)
    assert r.status == "complete" and r.n_events >= 2 and not r.events[1].exact
    ev = r.events[1]
    k = math.ceil(-math.log2(float(ev.E_before))) + 12
    T = ev.root_reported.floor_grid(k)
    r2 = simulate(pos, vel, [1, 1, 1], [1, 1, 1], 1, T, **base)
    assert r2.status == "unresolved" and r2.reason == "endpoint_undecided" and r2.n_events == 1


# ---------------- property-based: random 1-D chains ----------------

@st.composite
def chain(draw):
    P = draw(st.integers(2, 4))
    gaps = [draw(st.fractions(min_value=F(1, 5), max_value=2, max_denominator=10)) for _ in range(P - 1)]
    vel = [draw(st.fractions(min_value=-2, max_value=2, max_denominator=6)) for _ in range(P)]
    m = [draw(st.fractions(min_value=F(1, 2), max_value=3, max_denominator=4)) for _ in range(P)]
    e = draw(st.fractions(min_value=F(1, 4), max_value=1, max_denominator=4))
    return gaps, vel, m, e


@settings(max_examples=40, deadline=None)
@given(chain())
def test_random_chains_exact_laws(c):
    gaps, vel, m, e = c
    x = [F(0)]
    for gp in gaps:
        x.append(x[-1] + 1 + gp)
    P = len(x)
    r = simulate([[a] for a in x], [[v] for v in vel], m, [F(1, 2)] * P, e, 5, n_evt=30, budget=30,
                 eps_time=F(1, 10 ** 6), eps_guard=F(1, 10 ** 6), delta=F(1, 10 ** 6))
    # 1-D impact times are rational: everything is exact
    assert all(ev.exact for ev in r.events) and all(E == 0 for E in r.ledger)
    t_end = r.t_final
    assert sum(mk * v[0] for mk, v in zip(m, r.v_final)) == sum(mk * v for mk, v in zip(m, vel))
    K0 = sum(mk * v * v for mk, v in zip(m, vel))
    K1 = sum(mk * v[0] ** 2 for mk, v in zip(m, r.v_final))
    assert K1 <= K0 and (e < 1 or K1 == K0)
    for i in range(P - 1):                              # order preserved, nonpenetration at the end
        assert r.q_final[i + 1][0] - r.q_final[i][0] >= 1
    for ev in r.events:                                 # exact contact and approach at every event
        i, j = ev.pair
        assert j == i + 1
        (vi, vj) = ev.v_minus
        assert vi[0] - vj[0] > 0
        (pi, pj) = ev.v_plus
        assert pj[0] - pi[0] == e * (vi[0] - vj[0])
    if r.status == "unresolved":
        assert r.reason in ("simultaneous", "grazing", "separation", "budget", "event_count")
