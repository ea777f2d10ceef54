"""Batched unit-quaternion utilities.

Convention: q = (w, x, y, z), scalar first, arrays of shape (n, 4).  A quaternion maps body-frame
vectors to the lab frame: v_lab = R(q) v_body.
"""
from dataclasses import dataclass

import numpy as np

from relcp_mpi.basics.rows import norm_rows


@dataclass(frozen=True)
class AxisAngle:
    """A body orientation given as a rotation ``angle`` [rad] about ``axis`` (3,) (not necessarily unit): the
    typed form of a deck's ``orientation: {axis, angle}`` (:mod:`relcp_mpi.config.sections`), read by the body
    builder."""
    axis: tuple
    angle: float


def normalize(q):
    """Return q / |q| for q of shape (n, 4) (or (4,))."""
    q = np.asarray(q, dtype=float)
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def to_matrix(q):
    """Rotation matrices R(q), shape (n, 3, 3), for unit quaternions q of shape (n, 4)."""
    q = np.asarray(q, dtype=float)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    R = np.empty(q.shape[:-1] + (3, 3))
    R[..., 0, 0] = 1 - 2 * (y * y + z * z)
    R[..., 0, 1] = 2 * (x * y - z * w)
    R[..., 0, 2] = 2 * (x * z + y * w)
    R[..., 1, 0] = 2 * (x * y + z * w)
    R[..., 1, 1] = 1 - 2 * (x * x + z * z)
    R[..., 1, 2] = 2 * (y * z - x * w)
    R[..., 2, 0] = 2 * (x * z - y * w)
    R[..., 2, 1] = 2 * (y * z + x * w)
    R[..., 2, 2] = 1 - 2 * (x * x + y * y)
    return R


def rotate(q, v):
    """Rotate body-frame vectors v (n, 3) by quaternions q (n, 4); returns (n, 3)."""
    return np.einsum("...ij,...j->...i", to_matrix(q), v)


def multiply(a, b):
    """Hamilton product a*b for arrays of shape (n, 4)."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    w1, x1, y1, z1 = np.moveaxis(a, -1, 0)
    w2, x2, y2, z2 = np.moveaxis(b, -1, 0)
    return np.stack([
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
    ], axis=-1)


def from_rotation_vector(theta):
    """Exact quaternion of the rotation by the vector theta (n, 3) (angle |theta| about theta/|theta|)."""
    theta = np.asarray(theta, dtype=float)
    ang = np.linalg.norm(theta, axis=-1)
    half = 0.5 * ang
    # sin(half)/ang with a series for tiny angles
    small = ang < 1e-8
    s = np.where(small, 0.5 - ang * ang / 48.0, np.sin(half) / np.where(small, 1.0, ang))
    return np.concatenate([np.cos(half)[..., None], theta * s[..., None]], axis=-1)


def rotation_vector_between(q_from, q_to):
    """Rotation vectors (n, 3) d of the shortest rotations taking q_from (n, 4) to q_to (n, 4): q_to = exp(d) q_from
    (angle |d| <= pi about d / |d|); from_rotation_vector(d) * q_from equals q_to up to sign and rounding."""
    rel = multiply(q_to, q_from * np.array([1.0, -1.0, -1.0, -1.0]))
    rel *= np.where(rel[:, :1] < 0.0, -1.0, 1.0)
    vn = norm_rows(rel[:, 1:])
    return rel[:, 1:] * (2.0 * np.arctan2(vn, rel[:, 0]) / np.where(vn > 0.0, vn, 1.0))[:, None]


def integrate(q, omega, dt):
    """Advance orientations q (n, 4) by a constant lab-frame angular velocity omega (n, 3) over dt.

    Exact for constant omega: q_new = exp(omega dt / 2) * q, renormalised.
    """
    return normalize(multiply(from_rotation_vector(np.asarray(omega) * dt), q))


def random_unit(rng, n):
    """n uniformly distributed unit quaternions from a numpy Generator."""
    q = rng.normal(size=(n, 4))
    q = normalize(q)
    return q * np.where(q[:, :1] < 0, -1.0, 1.0)
