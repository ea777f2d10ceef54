"""Explicit position update with exact rotation for constant angular velocity over a step."""
import numpy as np

from relcp_mpi.basics import quaternion as quat


def advance(x, q, U, dt, axis=None):
    """Return (x + dt u, exp(dt w / 2) q) for positions x (n,3), quaternions q (n,4), velocities U (n,6).

    ``axis`` (n, 3) or None: per body a unit symmetry axis at the start (zero for none; contact.drop_axial_torque).
    A body with an axis a is turned by its spin (w.a) a about a first, which leaves a in place, and then by the
    rest of w: its axis moves on the great circle of w's perpendicular part whatever the spin.  (Turned by w at
    once, about a fixed lab axis, the body axis would move on a cone around w: a spin the body's geometry does not
    see would tip its axis, e.g. out of the plane of a colony into its walls.)  The same to first order in dt."""
    U = np.asarray(U, dtype=float).reshape(-1, 6)
    w = U[:, 3:]
    if axis is None:
        return x + dt * U[:, :3], quat.integrate(q, w, dt)
    rev = np.any(axis != 0.0, axis=1)
    qn = np.empty_like(q, dtype=float)
    qn[~rev] = quat.integrate(q[~rev], w[~rev], dt)         # per body: the same bits as the whole-array update
    a = axis[rev]
    spin = np.einsum("ij,ij->i", w[rev], a)[:, None] * a
    qn[rev] = quat.integrate(quat.integrate(q[rev], spin, dt), w[rev] - spin, dt)
    return x + dt * U[:, :3], qn
