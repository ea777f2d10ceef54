"""Batched body-wall signed separation.

A wall is the plane through ``wall_point`` with unit ``wall_normal`` pointing into the allowed half-space.
For body i: ``sep = min_{y in body} n . (y - wall_point) = n . (x - w) - h_body(-n)`` (h = support function),
``p_i`` = the body point attaining the minimum, ``p_j`` = its projection onto the plane, normal = n.
For a spherocylinder lying parallel to the wall (``a . n = 0`` up to rounding) the contact point is taken at
the middle of the core (deterministic).  Rings (torus (Rc, r), axis body z): the centre-circle point farthest
along -n minus r n (:func:`relcp_mpi.geometry.torus.ring_wall_lowest_point`; a ring lying flat on the wall
takes the point along its body x axis).
"""
import numpy as np

from ..bodies.shapes import SPHERE, SPHEROCYLINDER, ELLIPSOID, RING
from .torus import ring_wall_lowest_point

_EPS = np.finfo(float).eps


def _dot(a, b):
    return np.einsum("ij,ij->i", a, b)


def wall_lowest_point(kind, shape, x, R, n):
    """Point of each body minimising ``n . y`` (the support point in direction -n), batched.

    kind (m,), shape (m, 3), x (m, 3), R (m, 3, 3) rotation matrices, n (m, 3) unit normals.
    """
    m = x.shape[0]
    p = np.empty((m, 3))
    # sphere
    sph = kind == SPHERE
    p[sph] = x[sph] - shape[sph, 0:1] * n[sph]
    # spherocylinder
    sc = kind == SPHEROCYLINDER
    if np.any(sc):
        a = R[sc, :, 2]
        an = _dot(a, n[sc])
        h = 0.5 * shape[sc, 1]
        t = np.where(np.abs(an) <= 4 * _EPS, 0.0, -np.sign(an) * h)
        p[sc] = x[sc] + t[:, None] * a - shape[sc, 0:1] * n[sc]
    # ellipsoid: x - M n / sqrt(n^T M n)
    el = kind == ELLIPSOID
    if np.any(el):
        Re = R[el]
        nb = np.einsum("nji,nj->ni", Re, n[el]) * shape[el]          # diag(e) R^T n
        w = nb * shape[el]                                           # diag(e)^2 R^T n
        r = np.linalg.norm(nb, axis=1)
        p[el] = x[el] - np.einsum("nij,nj->ni", Re, w) / r[:, None]
    # ring
    rg = kind == RING
    if np.any(rg):
        p[rg] = ring_wall_lowest_point(x[rg], R[rg], shape[rg, 0], shape[rg, 1], n[rg])
    bad = ~(sph | sc | el | rg)
    if np.any(bad):
        raise ValueError(f"unknown shape kind(s) {np.unique(kind[bad]).tolist()}")
    return p


def body_wall(kind, shape, x, R, wall_point, wall_normal):
    """Returns ``sep (m,), normal (m, 3), p_i (m, 3), p_j (m, 3)`` for bodies against walls."""
    n = wall_normal
    p_i = wall_lowest_point(kind, shape, x, R, n)
    sep = _dot(n, p_i - wall_point)
    p_j = p_i - sep[:, None] * n
    return sep, n.copy(), p_i, p_j
