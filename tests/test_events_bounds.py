"""Guard, normal and reset Lipschitz bounds (seed 001), including a tight case, and the guard derivative."""
from fractions import Fraction as F
import math

import numpy as np
from hypothesis import assume, given, settings, strategies as st

from relcp_mpi.events import (guard_lipschitz, guard_lipschitz_upper, normal_lipschitz, normal_lipschitz_relative,
                              reset_lipschitz, reset_lipschitz_upper)
from relcp_mpi.events.bounds import full_guard, full_normal, full_reset

P, D = 3, 3
coord = st.floats(-3, 3, allow_nan=False, allow_infinity=False)
state = st.lists(coord, min_size=2 * P * D, max_size=2 * P * D).map(np.array)
mass = st.floats(0.2, 5.0)
rest = st.floats(0.0, 1.0)


def test_constants():
    assert guard_lipschitz() == math.sqrt(2)
    assert normal_lipschitz(2.0) == math.sqrt(2)
    assert normal_lipschitz_relative(4.0) == 0.5
    assert guard_lipschitz_upper() ** 2 >= 2 and float(guard_lipschitz_upper()) - math.sqrt(2) < 1e-30
    # L_R = 1 + sqrt2 beta kappa (1 + 4V/sigma); unit masses, e = 1: beta = sqrt2, kappa = 1
    assert math.isclose(reset_lipschitz(1, 1, 1, 1.0, 2.0), 1 + 2 * 3.0)
    up = reset_lipschitz_upper(1, 1, 1, 1, 2)
    assert up >= 7 and float(up) - 7 < 1e-12


@settings(max_examples=100, deadline=None)
@given(state, state, mass, mass, rest, st.floats(0.0, 1.0))
def test_lipschitz_bounds(z1, z2, mi, mj, e, frac):
    z2 = z1 + frac * (z2 - z1)          # near and far pairs of states
    q1, q2 = z1[:P * D].reshape(P, D), z2[:P * D].reshape(P, D)
    v1, v2 = z1[P * D:].reshape(P, D), z2[P * D:].reshape(P, D)
    sig = min(np.linalg.norm(q1[0] - q1[1]), np.linalg.norm(q2[0] - q2[1]))
    assume(sig > 0.05)
    V = max(np.linalg.norm(v1[0] - v1[1]), np.linalg.norm(v2[0] - v2[1]))
    dz = np.linalg.norm(z1 - z2)
    tol = 1e-9 * (1 + dz)
    r_i, r_j = 0.3, 0.4
    assert abs(full_guard(z1, P, D, 0, 1, r_i, r_j) - full_guard(z2, P, D, 0, 1, r_i, r_j)) <= guard_lipschitz() * dz + tol
    assert np.linalg.norm(full_normal(z1, P, D, 0, 1) - full_normal(z2, P, D, 0, 1)) <= normal_lipschitz(sig) * dz + tol
    dd = np.linalg.norm((q1[0] - q1[1]) - (q2[0] - q2[1]))
    assert np.linalg.norm(full_normal(z1, P, D, 0, 1) - full_normal(z2, P, D, 0, 1)) <= normal_lipschitz_relative(sig) * dd + tol
    LR = reset_lipschitz(mi, mj, e, V, sig)
    dR = np.linalg.norm(full_reset(z1, P, D, 0, 1, mi, mj, e) - full_reset(z2, P, D, 0, 1, mi, mj, e))
    assert dR <= LR * dz + 1e-9 * (1 + LR * dz)


@settings(max_examples=100, deadline=None)
@given(st.fractions(min_value=F(1, 10), max_value=5, max_denominator=20),
       st.fractions(min_value=F(1, 50), max_value=1, max_denominator=50))
def test_guard_bound_is_tight(L, t):
    """Moving q_i by +t n and q_j by -t n changes gamma by 2t while ||z - z'|| = sqrt(2) t: equality."""
    # exact with rationals: d along the x-axis so ||d|| is rational
    d0 = L + 1                       # ||q_i - q_j|| = L + 1 > r_i + r_j = 1
    g0 = d0 - 1
    g1 = (d0 + 2 * t) - 1
    dz2 = t * t + t * t              # ||z - z'||^2
    assert (g1 - g0) ** 2 == 2 * dz2  # |dgamma| = sqrt(2) ||dz|| exactly
    # the same configuration through the float full-state guard
    z1 = np.zeros(2 * P * D)
    z1[0] = float(d0)
    z2 = z1.copy()
    z2[0] += float(t)
    z2[D] -= float(t)
    ratio = abs(full_guard(z2, P, D, 0, 1, 0.5, 0.5) - full_guard(z1, P, D, 0, 1, 0.5, 0.5)) / np.linalg.norm(z2 - z1)
    assert math.isclose(ratio, guard_lipschitz(), rel_tol=1e-9)


@settings(max_examples=100, deadline=None)
@given(state, st.floats(0.1, 2.0))
def test_guard_derivative_along_flow(z, t):
    q, v = z[:P * D].reshape(P, D), z[P * D:].reshape(P, D)
    assume(np.linalg.norm(q[0] - q[1]) > 0.2)
    h = 1e-6

    def gam(s):
        qs = q + s * v
        return np.linalg.norm(qs[0] - qs[1]) - 0.1

    dnum = (gam(h) - gam(-h)) / (2 * h)
    n = (q[0] - q[1]) / np.linalg.norm(q[0] - q[1])
    assert abs(dnum - np.dot(n, v[0] - v[1])) <= 1e-5 * (1 + np.linalg.norm(v[0] - v[1]))
