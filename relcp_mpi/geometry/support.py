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
from relcp_mpi.basics.rows import norm_rows
from relcp_mpi.geometry import ellipsoid_jit, spherocylinder_jit

__all__ = ["support", "separation_lower_bound", "pair_lower_bound"]


def support(kind, shape, q, u, R=None):
    """Support values h(u) of m bodies.  kind (m,), shape (m, 3), q (m, 4), u (m, 3) unit -> (m,) [L].

    ``R`` (m, 3, 3): optional rotation matrices of ``q`` (``quaternion.to_matrix(q)``), when the caller has
    them already; the result is the same to the last bit."""
    kind = np.asarray(kind)
    shape = np.asarray(shape, dtype=float)
    u = np.asarray(u, dtype=float)
    h = np.zeros(len(kind))
    sph = kind == SPHERE
    h[sph] = shape[sph, 0]
    other = ~sph
    if not np.any(other):
        return h
    every = bool(other.all())            # one kind of non-sphere body (the common case): no masked copies
    if R is None:
        Rm = quaternion.to_matrix(np.asarray(q, dtype=float) if every else np.asarray(q, dtype=float)[other])
    else:
        Rm = np.asarray(R, dtype=float) if every else np.asarray(R, dtype=float)[other]
    uo = u if every else u[other]
    k, s = (kind, shape) if every else (kind[other], shape[other])
    e = k == ELLIPSOID
    if np.any(e):
        ub = np.einsum("kji,kj->ki", np.ascontiguousarray(Rm), uo)          # u in body coordinates
        az = np.abs(ub[:, 2])
    else:
        # only the axis component is needed: the einsum's own sum order (p0 + p1) + p2, bit for bit
        az = Rm[:, 0, 2] * uo[:, 0]
        az += Rm[:, 1, 2] * uo[:, 1]
        az += Rm[:, 2, 2] * uo[:, 2]
        np.abs(az, out=az)
    c = k == SPHEROCYLINDER
    if c.all():
        ho = s[:, 0] + 0.5 * s[:, 1] * az
    else:
        ho = np.zeros(len(k))
        ho[c] = s[c, 0] + 0.5 * s[c, 1] * az[c]
        if np.any(e):
            ho[e] = np.linalg.norm(s[e] * ub[e], axis=1)
        r = k == RING
        ho[r] = s[r, 0] * np.sqrt(np.maximum(0.0, 1.0 - az[r] ** 2)) + s[r, 1]
    if every:
        return ho
    h[other] = ho
    return h


def separation_lower_bound(kind_i, shape_i, x_i, q_i, kind_j, shape_j, x_j, q_j, hint=None, R_i=None, R_j=None):
    """Certified lower bound (m,) on the signed separation of m pairs [L].

    Uses the line of centres and, where given and finite, the ``hint`` directions (m, 3) (previous normals,
    from j towards i); returns the larger bound.  All bodies are centrally symmetric, so h(-u) = h(u).
    Coincident centres without a hint give -inf (no information).  ``R_i``, ``R_j`` (m, 3, 3): optional
    rotation matrices of ``q_i``, ``q_j`` (see :func:`support`)."""
    d = np.asarray(x_i, dtype=float) - np.asarray(x_j, dtype=float)
    dist = norm_rows(d)
    ok = dist > 0
    if ok.all():
        u = d / dist[:, None]
    else:
        u = np.where(ok[:, None], d / np.where(ok, dist, 1.0)[:, None], np.array([0.0, 0.0, 1.0]))
    lb = dist - support(kind_i, shape_i, q_i, u, R_i) - support(kind_j, shape_j, q_j, u, R_j)
    lb[~ok] = -np.inf
    if hint is not None:
        h = np.asarray(hint, dtype=float)
        hn = norm_rows(h)
        good = np.isfinite(hn) & (hn > 0)
        if np.any(good):
            sub = (lambda a: a) if good.all() else (lambda a: None if a is None else np.asarray(a)[good])
            v = sub(h) / sub(hn)[:, None]
            lb_h = np.einsum("ij,ij->i", v, sub(d)) \
                - support(sub(np.asarray(kind_i)), sub(np.asarray(shape_i)), sub(q_i), v, sub(R_i)) \
                - support(sub(np.asarray(kind_j)), sub(np.asarray(shape_j)), sub(q_j), v, sub(R_j))
            lb[good] = np.maximum(lb[good], lb_h)
    return lb


def pair_lower_bound(kind, shape, X, R, ia, ib, hint=None):
    """:func:`separation_lower_bound` of the pairs (ia, ib) (k,) of one body set, bit for bit, without per-pair
    copies of the body data where possible.

    kind (m,), shape (m, 3), X (m, 3) centres, R (m, 3, 3) rotation matrices (``quaternion.to_matrix``) of the
    bodies; hint (k, 3) or None as in :func:`separation_lower_bound`.  When every body is a sphere or a
    spherocylinder (h = R + L/2 |a . u|, a sphere being a rod of length 0), the bound is computed from
    per-body axis and radius columns gathered per pair (no (k, 3, 3) matrices, no kind masks); other body sets
    take the general function (compiled: ``ellipsoid_jit.general_lower_bound``)."""
    kind = np.asarray(kind)
    ia = np.asarray(ia, dtype=np.int64)
    ib = np.asarray(ib, dtype=np.int64)
    if not np.all((kind == SPHERE) | (kind == SPHEROCYLINDER)):
        if ellipsoid_jit.use(len(ia)):            # compiled twin of the general function, same bits
            return ellipsoid_jit.general_lower_bound(X, R, kind, shape, ia, ib, hint=hint)
        return separation_lower_bound(kind[ia], shape[ia], X[ia], None, kind[ib], shape[ib], X[ib], None,
                                      hint=hint, R_i=R[ia], R_j=R[ib])
    rad = np.ascontiguousarray(shape[:, 0], dtype=float)
    half = np.where(kind == SPHEROCYLINDER, 0.5 * shape[:, 1], 0.0)    # 0 * |a.u| = 0: spheres get h = R
    ax = [np.ascontiguousarray(R[:, c, 2], dtype=float) for c in range(3)]
    if spherocylinder_jit.use(len(ia)):
        return spherocylinder_jit.round_lower_bound(X, ax, rad, np.ascontiguousarray(half, dtype=float), ia, ib,
                                                    hint=hint)     # compiled twin of the rest, same bits
    d = [np.ascontiguousarray(X[:, c], dtype=float) for c in range(3)]
    d = [c[ia] - c[ib] for c in d]
    dist = d[0] * d[0]
    dist += d[1] * d[1]
    dist += d[2] * d[2]
    np.sqrt(dist, out=dist)                                           # = norm_rows(x_i - x_j)
    ok = dist > 0
    if ok.all():
        u = [c / dist for c in d]
    else:
        ds = np.where(ok, dist, 1.0)
        u = [np.where(ok, c / ds, z) for c, z in zip(d, (0.0, 0.0, 1.0))]

    def h(idx, v):
        """Support values of bodies idx along unit directions v (3 columns); the sum order of the general
        path's matrix-vector product, (p0 + p1) + p2."""
        az = ax[0][idx] * v[0]
        az += ax[1][idx] * v[1]
        az += ax[2][idx] * v[2]
        np.abs(az, out=az)
        return rad[idx] + half[idx] * az

    lb = dist - h(ia, u) - h(ib, u)
    lb[~ok] = -np.inf
    if hint is not None:
        hh = np.asarray(hint, dtype=float)
        hn = norm_rows(hh)
        good = np.flatnonzero(np.isfinite(hn) & (hn > 0))
        if good.size:
            v = hh[good] / hn[good, None]
            dg = np.stack([c[good] for c in d], axis=1)
            vc = [np.ascontiguousarray(v[:, c]) for c in range(3)]
            lb_h = np.einsum("ij,ij->i", v, dg) - h(ia[good], vc) - h(ib[good], vc)
            lb[good] = np.maximum(lb[good], lb_h)
    return lb
