"""Explicit position update with exact rotation for constant angular velocity over a step."""
import numpy as np

from relcp_mpi.basics import quaternion as quat


def advance(x, q, U, dt):
    """Return (x + dt u, exp(dt w / 2) q) for positions x (n,3), quaternions q (n,4), velocities U (n,6)."""
    U = np.asarray(U, dtype=float).reshape(-1, 6)
    return x + dt * U[:, :3], quat.integrate(q, U[:, 3:], dt)
