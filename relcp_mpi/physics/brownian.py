"""Brownian motion: the thermal velocity of overdamped Euler--Maruyama (deck key ``fluid.kT``).

A step of length h adds to every free body's unconstrained velocity (``U_ext`` of the ReLCP step)

    U_B = sqrt(2 kT / h) M^{1/2} Z,        Z ~ N(0, I_6) per body,

so the free displacement over the step, h U_B = sqrt(2 kT h) M^{1/2} Z, has mean 0 and covariance 2 kT h M
(fluctuation--dissipation); contacts are resolved by the same LCP, which sees U_ext = M F_ext + U_imposed + U_B.
M^{1/2} is the symmetric square root of the body's 6x6 lab-frame mobility block (R M_body^{1/2} R^T per block,
:func:`relcp_mpi.physics.mobility.sqrt_apply`).  No Ito drift term is needed: the blocks depend on the
orientation only, and for M_rr = R D R^T the rotational divergence sum_j ([e_j]x M - M [e_j]x)_ij vanishes
because M is symmetric (the translational block does not depend on position).

Units: kT is an energy [F L] (F = mu L^2 / T in the deck's units); with it a free sphere of radius a has the
Stokes--Einstein coefficients D_t = kT / (6 pi mu a) [L^2/T] and D_r = kT / (8 pi mu a^3) [1/T].

**Noise keys.**  Z is drawn from the counter-based streams of :mod:`relcp_mpi.basics.random`, keyed by
(deck seed, step, gid), so a body's noise does not depend on the rank that owns it or on the rank count.
A step that the step policy redoes as sub-steps (``time.max_halvings``) refines the same Brownian path by
bisection (a Brownian bridge): sub-step ``index`` of ``2**level`` within the step gets

    Z(0, 0) = N(stream 2**14 + 1),
    Z(l, 2j + c) = (Z(l-1, j) + (1 - 2c) Y(l, j)) / sqrt(2),   Y(l, j) = N(stream 2**14 + 2**l + 2j),

so the two halves of a sub-step add up to exactly its displacement (for a fixed mobility), the halves are
independent, and each has covariance 2 kT (h/2) M.  The halving depth is limited to ``MAX_LEVEL`` (the stream
numbers must stay below 2**15); the streams at and above 2**14 are reserved for this module.
"""
import numpy as np

from relcp_mpi.basics import random as prandom
from relcp_mpi.config.deck import MAX_BROWNIAN_HALVINGS
from relcp_mpi.physics.mobility import sqrt_apply

STREAM_BASE = 2 ** 14        # streams [2**14, 2**15) of basics.random: Brownian noise only
MAX_LEVEL = MAX_BROWNIAN_HALVINGS   # deepest sub-step level (time.max_halvings with fluid.kT > 0)


def standard_noise(seed, step, gid, level=0, index=0):
    """Standard normal Z (n, 6) of sub-step ``index`` (0 <= index < 2**level) of step ``step`` for bodies
    ``gid`` (n,) (see the module docstring; level 0 = the whole step)."""
    level, index = int(level), int(index)
    if not 0 <= level <= MAX_LEVEL or not 0 <= index < 2 ** level:
        raise ValueError(f"Brownian sub-step {index} of 2**{level}: level must be in [0, {MAX_LEVEL}] and "
                         f"index in [0, 2**level)")
    z = prandom.normal(seed, step, gid, 6, stream=STREAM_BASE + 1)
    for lev in range(1, level + 1):
        parent = index >> (level - lev + 1)               # node (lev - 1, parent) is split here
        side = (index >> (level - lev)) & 1               # 0: first half, 1: second half
        y = prandom.normal(seed, step, gid, 6, stream=STREAM_BASE + 2 ** lev + 2 * parent)
        z = (z + y) * np.sqrt(0.5) if side == 0 else (z - y) * np.sqrt(0.5)
    return z


def brownian_velocity(kind, shape, q, mu, kT, h, seed, step, gid, fixed=None, level=0, index=0):
    """Thermal velocity sqrt(2 kT / h) M^{1/2} Z of each body, shape (n, 6) [L/T, 1/T] (lab frame).

    ``kind`` (n,), ``shape`` (n, 3), ``q`` (n, 4) orientations at the start of the sub-step, ``mu`` viscosity,
    ``kT`` [F L], ``h`` the sub-step's length [T], ``gid`` (n,), ``fixed`` (n,) bool (no noise: zero mobility);
    ``level``/``index`` select the sub-step of a halved step (0, 0: a whole step)."""
    z = standard_noise(seed, step, gid, level, index)
    return np.sqrt(2.0 * kT / h) * sqrt_apply(kind, shape, q, mu, z, fixed=fixed)
