"""Shape kinds and their parameters.

Every body carries ``kind`` (int8) and ``shape`` (float64, 3 numbers):

=============  ====  ==========================================================
kind           code  shape = (s0, s1, s2)
=============  ====  ==========================================================
sphere         0     (R, 0, 0): radius R
spherocylinder 1     (R, L, 0): radius R, length L of the axis segment (tip to
                     tip length L + 2R); the axis is the body-frame z axis
ellipsoid      2     (a, b, c): semi-axes along body-frame x, y, z
ring           3     (Rc, r, 0): torus with centre-circle radius Rc in the body
                     xy plane (axis = body z) and tube radius r < Rc
=============  ====  ==========================================================
"""
import numpy as np

SPHERE = 0
SPHEROCYLINDER = 1
ELLIPSOID = 2
RING = 3

KIND_NAMES = {SPHERE: "sphere", SPHEROCYLINDER: "spherocylinder", ELLIPSOID: "ellipsoid", RING: "ring"}
KIND_CODES = {v: k for k, v in KIND_NAMES.items()}


def bounding_radius(kind, shape):
    """Radius of the smallest centred ball containing each body, shape (n,)."""
    kind = np.asarray(kind)
    shape = np.asarray(shape, dtype=float).reshape(-1, 3)
    r = np.where(kind == SPHERE, shape[:, 0], 0.0)
    r = np.where(kind == SPHEROCYLINDER, shape[:, 0] + 0.5 * shape[:, 1], r)
    r = np.where(kind == ELLIPSOID, shape.max(axis=1), r)
    r = np.where(kind == RING, shape[:, 0] + shape[:, 1], r)
    return r


def volume(kind, shape):
    """Body volumes, shape (n,)."""
    kind = np.asarray(kind)
    shape = np.asarray(shape, dtype=float).reshape(-1, 3)
    R, L = shape[:, 0], shape[:, 1]
    v = np.where(kind == SPHERE, 4.0 / 3.0 * np.pi * R ** 3, 0.0)
    v = np.where(kind == SPHEROCYLINDER, np.pi * R ** 2 * L + 4.0 / 3.0 * np.pi * R ** 3, v)
    v = np.where(kind == ELLIPSOID, 4.0 / 3.0 * np.pi * shape.prod(axis=1), v)
    v = np.where(kind == RING, 2 * np.pi ** 2 * shape[:, 0] * shape[:, 1] ** 2, v)
    return v
