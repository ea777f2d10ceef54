"""Guard, normal and reset Lipschitz bounds of seed 001 ("sphere-contact guards, normals and binary resets
have explicit tube bounds").

Full state ``z = (q_1..q_P, v_1..v_P)`` with the Euclidean norm; pair ``i < j``; ``d = q_i - q_j``;
``gamma(z) = ||d|| - r_i - r_j``, ``n(z) = d / ||d||``; ``alpha = 1/m_i + 1/m_j``, ``kappa = (1 + e)/alpha``,
``beta = sqrt(m_i^-2 + m_j^-2)``.  For states with pair distance >= sigma > 0 and relative speed <= V::

    |gamma(z) - gamma(z')| <= sqrt(2) ||z - z'||                       (guard_lipschitz)
    ||n(z) - n(z')||       <= 2 sqrt(2) / sigma ||z - z'||             (normal_lipschitz; 2/sigma on d)
    ||R(z) - R(z')||       <= L_R ||z - z'||,
    L_R = 1 + sqrt(2) beta kappa (1 + 4 V / sigma)                      (reset_lipschitz)

Float versions are for reporting and tests; ``*_upper`` versions are certified rational upper bounds used
by the engine.  :func:`full_guard`, :func:`full_normal`, :func:`full_reset` evaluate gamma, n and R on a
flat float state vector (for the property tests of the theorem).
"""
import math

import numpy as np

from .exact import SQRT2_UP, sqrt_up, to_fraction

__all__ = ["guard_lipschitz", "normal_lipschitz", "normal_lipschitz_relative", "reset_lipschitz",
           "guard_lipschitz_upper", "normal_lipschitz_upper", "reset_lipschitz_upper", "alpha_kappa_beta",
           "full_guard", "full_normal", "full_reset", "split_state"]


def guard_lipschitz():
    """sqrt(2): Lipschitz constant of the guard gamma in the full state."""
    return math.sqrt(2.0)


def normal_lipschitz(sigma):
    """2 sqrt(2) / sigma: Lipschitz constant of the normal n in the full state (pair distances >= sigma)."""
    sigma = float(sigma)
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    return 2.0 * math.sqrt(2.0) / sigma


def normal_lipschitz_relative(sigma):
    """2 / sigma: Lipschitz constant of n as a function of the relative vector d (|d| >= sigma)."""
    sigma = float(sigma)
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    return 2.0 / sigma


def alpha_kappa_beta(m_i, m_j, e):
    """(alpha, kappa, beta) as floats."""
    m_i, m_j, e = float(m_i), float(m_j), float(e)
    alpha = 1.0 / m_i + 1.0 / m_j
    return alpha, (1.0 + e) / alpha, math.sqrt(m_i ** -2 + m_j ** -2)


def reset_lipschitz(m_i, m_j, e, V, sigma):
    """L_R = 1 + sqrt(2) beta kappa (1 + 4 V / sigma) (float)."""
    if not float(sigma) > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    if float(V) < 0:
        raise ValueError(f"V must be >= 0, got {V}")
    _, kappa, beta = alpha_kappa_beta(m_i, m_j, e)
    return 1.0 + math.sqrt(2.0) * beta * kappa * (1.0 + 4.0 * float(V) / float(sigma))


def guard_lipschitz_upper():
    """Certified rational upper bound of sqrt(2)."""
    return SQRT2_UP


def normal_lipschitz_upper(sigma):
    """Certified rational upper bound of 2 sqrt(2)/sigma."""
    sigma = to_fraction(sigma, "sigma")
    if sigma <= 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    return 2 * SQRT2_UP / sigma


def reset_lipschitz_upper(m_i, m_j, e, V, sigma, bits=64):
    """Certified rational upper bound of L_R (exact rationals in, Fraction out)."""
    m_i, m_j, e, V, sigma = (to_fraction(x) for x in (m_i, m_j, e, V, sigma))
    if sigma <= 0 or V < 0 or m_i <= 0 or m_j <= 0:
        raise ValueError("reset_lipschitz_upper: need masses > 0, V >= 0, sigma > 0")
    alpha = 1 / m_i + 1 / m_j
    kappa = (1 + e) / alpha
    beta_up = sqrt_up(1 / (m_i * m_i) + 1 / (m_j * m_j), bits)
    return 1 + SQRT2_UP * beta_up * kappa * (1 + 4 * V / sigma)


# ---------------- full-state evaluations (float) ----------------

def split_state(z, P, d):
    """Flat state vector (2 P d,) -> (q (P, d), v (P, d))."""
    z = np.asarray(z, dtype=float)
    return z[:P * d].reshape(P, d), z[P * d:].reshape(P, d)


def full_guard(z, P, d, i, j, r_i, r_j):
    q, _ = split_state(z, P, d)
    return float(np.linalg.norm(q[i] - q[j])) - r_i - r_j


def full_normal(z, P, d, i, j):
    q, _ = split_state(z, P, d)
    dij = q[i] - q[j]
    return dij / np.linalg.norm(dij)


def full_reset(z, P, d, i, j, m_i, m_j, e):
    """The reset extension R(z) on a flat float state (positions unchanged)."""
    q, v = split_state(z, P, d)
    v = v.copy()
    n = full_normal(z, P, d, i, j)
    kappa = (1.0 + e) / (1.0 / m_i + 1.0 / m_j)
    J = -kappa * float(np.dot(v[i] - v[j], n))
    v[i] = v[i] + J * n / m_i
    v[j] = v[j] - J * n / m_j
    return np.concatenate([q.ravel(), v.ravel()])
