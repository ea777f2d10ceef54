"""Batched sphere-sphere signed separation.

Convention (docs/ARCHITECTURE.md): the normal points from j towards i, ``sep = n . (p_i - p_j)``,
negative means overlap.  Coincident centres get the deterministic fallback normal ``e_z``.
"""
import numpy as np

_EPS = np.finfo(float).eps
FALLBACK_NORMAL = np.array([0.0, 0.0, 1.0])


def sphere_sphere(x_i, R_i, x_j, R_j):
    """Separation of spheres (x_i, R_i) and (x_j, R_j), batched.

    x_i, x_j: (m, 3) centres; R_i, R_j: (m,) radii.
    Returns ``sep (m,), normal (m, 3), p_i (m, 3), p_j (m, 3)``.  Exact to rounding.
    """
    x_i = np.asarray(x_i, dtype=float).reshape(-1, 3)
    x_j = np.asarray(x_j, dtype=float).reshape(-1, 3)
    R_i = np.broadcast_to(np.asarray(R_i, dtype=float), x_i.shape[:1])
    R_j = np.broadcast_to(np.asarray(R_j, dtype=float), x_j.shape[:1])
    diff = x_i - x_j
    dist = np.linalg.norm(diff, axis=1)
    ok = dist > 0.0
    n = np.where(ok[:, None], diff / np.where(ok, dist, 1.0)[:, None], FALLBACK_NORMAL)
    sep = dist - R_i - R_j
    p_i = x_i - R_i[:, None] * n
    p_j = x_j + R_j[:, None] * n
    return sep, n, p_i, p_j
