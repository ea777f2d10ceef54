"""Support functions and cheap certified lower bounds on pair separations (screening before the kernels).

The support function of a body in the unit direction u is ``h(u) = max_{p in body} u . (p - x)``:

* sphere (R):              h = R
* spherocylinder (R, L):   h = R + L/2 |a . u|            (a: body z axis in the lab frame)
* ellipsoid (a, b, c):     h = |diag(a, b, c) R^T u|       (R: body -> lab rotation)
* ring (Rc, r):            h = Rc sqrt(1 - (a . u)^2) + r  (support of the convex hull of the torus)

For any unit u pointing from body j towards body i, ``lb(u) = u . (x_i - x_j) - h_i(-u) - h_j(u)`` is the gap
between the two bodies' slabs along u, hence a lower bound on the signed separation (the distance of the
bodies, or minus the penetration depth of convex bodies, which is the maximum of lb over u; for the
non-convex ring the bound holds for its convex hull and so for the ring).  A pair whose bound exceeds a
threshold is certified farther apart than that threshold without running the iterative kernel.
"""
import numpy as np

from relcp_mpi.bodies.shapes import ELLIPSOID, RING, SPHERE, SPHEROCYLINDER
from relcp_mpi.basics import quaternion

__all__ = ["support", "separation_lower_bound"]


def support(kind, shape, q, u):
    """Support values h(u) of m bodies.  kind (m,), shape (m, 3), q (m, 4), u (m, 3) unit -> (m,) [L]."""
    kind = np.asarray(kind)
    shape = np.asarray(shape, dtype=float)
    u = np.asarray(u, dtype=float)
    h = np.zeros(len(kind))
    sph = kind == SPHERE
    h[sph] = shape[sph, 0]
    other = ~sph
    if not np.any(other):
        return h
    Rm = quaternion.to_matrix(np.asarray(q, dtype=float)[other])        # (k, 3, 3) body -> lab
    ub = np.einsum("kji,kj->ki", Rm, u[other])                           # u in body coordinates
    k, s = kind[other], shape[other]
    az = np.abs(ub[:, 2])
    ho = np.zeros(len(k))
    c = k == SPHEROCYLINDER
    ho[c] = s[c, 0] + 0.5 * s[c, 1] * az[c]
    e = k == ELLIPSOID
    ho[e] = np.linalg.norm(s[e] * ub[e], axis=1)
    r = k == RING
    ho[r] = s[r, 0] * np.sqrt(np.maximum(0.0, 1.0 - az[r] ** 2)) + s[r, 1]
    h[other] = ho
    return h


def separation_lower_bound(kind_i, shape_i, x_i, q_i, kind_j, shape_j, x_j, q_j, hint=None):
    """Certified lower bound (m,) on the signed separation of m pairs [L].

    Uses the line of centres and, where given and finite, the ``hint`` directions (m, 3) (previous normals,
    from j towards i); returns the larger bound.  All bodies are centrally symmetric, so h(-u) = h(u).
    Coincident centres without a hint give -inf (no information)."""
    d = np.asarray(x_i, dtype=float) - np.asarray(x_j, dtype=float)
    dist = np.linalg.norm(d, axis=1)
    ok = dist > 0
    u = np.where(ok[:, None], d / np.where(ok, dist, 1.0)[:, None], np.array([0.0, 0.0, 1.0]))
    lb = dist - support(kind_i, shape_i, q_i, u) - support(kind_j, shape_j, q_j, u)
    lb[~ok] = -np.inf
    if hint is not None:
        h = np.asarray(hint, dtype=float)
        hn = np.linalg.norm(h, axis=1)
        good = np.isfinite(hn) & (hn > 0)
        if np.any(good):
            v = h[good] / hn[good, None]
            lb_h = np.einsum("ij,ij->i", v, d[good]) \
                - support(np.asarray(kind_i)[good], np.asarray(shape_i)[good], np.asarray(q_i)[good], v) \
                - support(np.asarray(kind_j)[good], np.asarray(shape_j)[good], np.asarray(q_j)[good], v)
            lb[good] = np.maximum(lb[good], lb_h)
    return lb
