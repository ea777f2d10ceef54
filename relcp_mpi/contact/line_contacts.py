"""Extra level-0 rows for line contacts of spherocylinders (rods against rods and against walls).

Why: the ReLCP finite-termination argument assumes strictly convex bodies.  A spherocylinder is not: two
side-by-side parallel rods, or a rod lying on a wall, touch along a segment, and the single shared-normal
(SNSD) row of such a pair sits at one point of it.  That row does not resist the rod pivoting about it, so the
first solve of a dense step can tilt rods by tens of degrees; the rows the recursion then appends at those far
trial configurations carry lever arms and normals of a configuration the step never reaches and can contradict
the level-0 rows (measured: grown colony LCPs without any solution, docs/ARCHITECTURE.md, "Dense packings").

What: every row added here is a *necessary* condition of nonpenetration evaluated exactly at the start
configuration, so the feasible set of the step is not reduced and nothing is over-constrained:

* rod - wall: the distance of a capsule to a plane is attained at one of its two end caps, so the wall row of
  a rod is replaced by one row per end cap (cap centre ``c +- h a``, radius R).  The two rows together are
  *equivalent* to the smooth-surface condition (min of the two >= 0), and each stays exact under any rigid
  motion of the rod up to the linearisation of its own lever arm.
* rod - rod: the core-core distance is the minimum over the interior closest pair (when the cores cross) and
  the four end-point-to-segment distances; each end point of one rod (a sphere of the rod's radius) against the
  other rod gives a row with sep = dist(end, core) - R_i - R_j >= the pair's separation.  Rows identical to the
  pair's SNSD row (whose closest point is already an end point) are dropped.

* ring - wall: a ring lying on a wall touches it along its whole centre circle.  Besides its SNSD wall row (the
  lowest point of the tube, angle phi* on the centre circle, sub 0) the ring gets rows at phi* + 90, 180 and 270
  degrees (subs 1-3): sep = n . (c(phi) - w) - r for the centre-circle point c(phi), each >= the ring's wall
  separation (a necessary condition); a ring tilted away from the wall keeps only the rows within the skin.

Rows are kept only where their separation is within the skin (as for the SNSD rows).  Sub-contact numbers are
fixed slots so that warm starts match across steps: body pairs: SNSD 0, end -h / +h of i: 1 / 2, end -h / +h
of j: 3 / 4; rod - wall: cap -h: 0, cap +h: 1.  Rows appended by the recursion take larger numbers.
"""
import numpy as np

from relcp_mpi.bodies.shapes import RING, SPHEROCYLINDER
from relcp_mpi.basics.rows import norm_rows
from relcp_mpi.geometry import quaternion
from relcp_mpi.geometry.contact import ContactGeometry
from relcp_mpi.geometry import spherocylinder_jit
from relcp_mpi.geometry.spherocylinder import capsule_capsule

N_PAIR_SLOTS = 5          # sub-contact numbers 0..4 are level-0 slots of a body pair
N_WALL_SLOTS = 4          # 0..1 for a rod against a wall, 0..3 for a ring


def _axis_half(kind, shape, Q, R=None):
    """Unit axes (m, 3) and half lengths h = L/2 (m,) of spherocylinders given their quaternions (or their
    rotation matrices R (m, 3, 3) when given)."""
    a = (quaternion.to_matrix(Q) if R is None else R)[:, :, 2]
    return a, 0.5 * shape[:, 1]


def rod_pair_end_rows(kind, shape, X, Q, ia, ib, geo, skin, dup_tol=1e-12, R=None):
    """End-point rows of rod-rod pairs (see module docstring).

    kind (m,), shape (m, 3), X (m, 3), Q (m, 4): combined body arrays; ``ia``, ``ib`` (p,) the pairs that have
    an SNSD row ``geo`` (ContactGeometry of length p).  Returns ``(pair (r,), sub (r,), ContactGeometry (r))``:
    for each extra row the index into the pair list, its slot (1..4) and its geometry (normal from j to i,
    witness points on the two surfaces, sep [L]).  ``R`` (m, 3, 3): optional rotation matrices of ``Q``.
    """
    rods = np.flatnonzero((kind[ia] == SPHEROCYLINDER) & (kind[ib] == SPHEROCYLINDER)
                          & (shape[ia, 1] > 0) & (shape[ib, 1] > 0))
    if len(rods) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), _empty()
    i, j = ia[rods], ib[rods]
    if spherocylinder_jit.use(len(rods)):
        # compiled twin of the rest of this function (same bits, same row order), reading the body arrays
        pair, sub, sep, nrm, p_i, p_j = spherocylinder_jit.end_rows(
            X, quaternion.to_matrix(Q) if R is None else R, shape, i, j, rods, geo.p_i, geo.p_j, skin, dup_tol)
        return pair, sub, ContactGeometry(sep=sep, normal=nrm, p_i=p_i, p_j=p_j,
                                          converged=np.ones(len(pair), bool))
    M_i = quaternion.to_matrix(Q[i]) if R is None else R[i]        # (k, 3, 3); axis = M[:, :, 2]
    M_j = quaternion.to_matrix(Q[j]) if R is None else R[j]
    h_i, h_j = 0.5 * shape[i, 1], 0.5 * shape[j, 1]
    R_i, R_j = shape[i, 0], shape[j, 0]
    X_i, X_j = X[i], X[j]
    zero = np.zeros(len(rods))
    # round-off margin of the skip test below (absolute, from the coordinate and body scales)
    margin = 1e-9 * (1.0 + float(np.abs(X_i).max()) + float(np.abs(X_j).max()) + float(h_i.max())
                     + float(h_j.max()) + float(R_i.max()) + float(R_j.max()) + abs(float(skin)))
    parts = []
    for slot, end_of_i, sgn in ((1, True, -1.0), (2, True, 1.0), (3, False, -1.0), (4, False, 1.0)):
        # skip rows certified beyond the skin (they are dropped below anyway): the distance of an end point e
        # to the other core is at least |e - c_other| - h_other (triangle inequality) and at least its distance
        # to the core's line
        if end_of_i:      # end sphere of i (core of half length 0) against the core of j
            e = X_i + (sgn * h_i)[:, None] * M_i[:, :, 2]
            lb = _point_core_bound(e - X_j, M_j[:, :, 2], h_j)
        else:             # core of i against the end sphere of j
            e = X_j + (sgn * h_j)[:, None] * M_j[:, :, 2]
            lb = _point_core_bound(e - X_i, M_i[:, :, 2], h_i)
        s = np.flatnonzero(lb - R_i - R_j <= skin + margin)
        # the kernel gets the rows s of the very arrays it got before, in the same memory layout (axes as strided
        # views of the matrices): its dot products' summation order depends on the layout, so the rows' results
        # stay the same to the last bit
        a_i, a_j = M_i[s][:, :, 2], M_j[s][:, :, 2]
        if end_of_i:
            r = capsule_capsule(e[s], a_i, zero[s], R_i[s], X_j[s], a_j, h_j[s], R_j[s])
        else:
            r = capsule_capsule(X_i[s], a_i, h_i[s], R_i[s], e[s], a_j, zero[s], R_j[s])
        parts.append((s, np.full(len(s), slot), r))
    sub = np.concatenate([p[1] for p in parts])
    idx = np.concatenate([p[0] for p in parts])
    pair = rods[idx]
    sep, nrm, p_i, p_j = (np.concatenate([p[2][k] for p in parts]) for k in range(4))
    keep = distinct_within_skin(sep, p_i, p_j, geo.p_i[pair], geo.p_j[pair], (R_i + R_j + h_i + h_j)[idx], skin,
                                dup_tol)
    g = ContactGeometry(sep=sep[keep], normal=nrm[keep], p_i=p_i[keep], p_j=p_j[keep],
                        converged=np.ones(int(keep.sum()), bool))
    return pair[keep], sub[keep].astype(np.int64), g


def distinct_within_skin(sep, p_i, p_j, snsd_p_i, snsd_p_j, scale, skin, dup_tol=1e-12):
    """Mask (k,) of the extra rows of rod pairs to keep: within the skin (``sep <= skin``) and not a copy of the
    pair's own SNSD row (witness points ``snsd_p_i``, ``snsd_p_j``), i.e. their witness points differ from it by
    more than ``dup_tol * scale`` [L] (``scale`` (k,): a length of the pair)."""
    same = norm_rows(p_i - snsd_p_i) + norm_rows(p_j - snsd_p_j) <= dup_tol * scale
    return (sep <= skin) & ~same


def _point_core_bound(w, a, h):
    """Lower bound (k,) on the distance of points c + w to the segments c + t a, |t| <= h (a unit): the larger of
    |w| - h and the distance to the segment's line."""
    ww = norm_rows(w)
    t = w[:, 0] * a[:, 0] + w[:, 1] * a[:, 1] + w[:, 2] * a[:, 2]
    return np.maximum(ww - h, np.sqrt(np.maximum(ww * ww - t * t, 0.0)))


def rod_wall_cap_rows(kind, shape, X, Q, wb, ww, wall_points, wall_normals, skin, R=None):
    """End-cap rows of rods against walls (see module docstring).

    ``wb`` (w,) body indices, ``ww`` (w,) wall indices of the candidate rod-wall pairs (only rods with L > 0 are
    used).  Returns ``(cand (r,), sub (r,), ContactGeometry (r))``: index into the candidate list, slot (0 for
    the cap at -h, 1 at +h) and geometry (normal = wall normal, p_j = projection of p_i on the plane).
    ``R`` (m, 3, 3): optional rotation matrices of ``Q``.
    """
    rods = np.flatnonzero((kind[wb] == SPHEROCYLINDER) & (shape[wb, 1] > 0))
    if len(rods) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), _empty()
    b = wb[rods]
    a, h = _axis_half(kind[b], shape[b], Q[b], None if R is None else R[b])
    n = wall_normals[ww[rods]]
    w = wall_points[ww[rods]]
    centres = [(slot, X[b] + (sgn * h)[:, None] * a) for slot, sgn in ((0, -1.0), (1, 1.0))]
    return _sphere_wall_samples(rods, centres, shape[b, 0], n, w, skin)


def ring_wall_rows(kind, shape, X, Q, wb, ww, wall_points, wall_normals, skin):
    """Extra wall rows of rings (see module docstring): centre-circle points at 90, 180 and 270 degrees from the
    lowest one.  Arguments as :func:`rod_wall_cap_rows`; returns ``(cand (r,), sub (r,) in 1..3, ContactGeometry)``.
    """
    rings = np.flatnonzero(kind[wb] == RING)
    if len(rings) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), _empty()
    b = wb[rings]
    Rm = quaternion.to_matrix(Q[b])
    z = Rm[:, :, 2]
    n = wall_normals[ww[rings]]
    w = wall_points[ww[rings]]
    Rc, r = shape[b, 0], shape[b, 1]
    # direction of the lowest centre-circle point in the ring plane (flat ring: body x axis, as the SNSD row)
    d = -(n - np.einsum("ij,ij->i", n, z)[:, None] * z)
    nd = np.linalg.norm(d, axis=1)
    flat = nd <= 32.0 * np.finfo(float).eps
    e0 = np.where(flat[:, None], Rm[:, :, 0], d / np.where(flat, 1.0, nd)[:, None])
    e1 = np.cross(z, e0)
    centres = [(slot, X[b] + Rc[:, None] * e) for slot, e in ((1, e1), (2, -e0), (3, -e1))]
    return _sphere_wall_samples(rings, centres, r, n, w, skin)


def _sphere_wall_samples(cand, centres, radius, n, w, skin):
    """Wall rows of spheres of radius ``radius`` (k,) at sample centres on a body's core: ``centres`` is a list of
    (slot, (k, 3) centres) for the candidates ``cand`` (k,) against walls (point w, unit normal n, (k, 3)).
    sep = n . (c - w) - radius, p_i = c - radius n, p_j its projection on the plane; rows beyond the skin are
    dropped.  Returns ``(cand (r,), sub (r,), ContactGeometry (r))``."""
    seps, pis = [], []
    for _, c in centres:
        p_i = c - radius[:, None] * n
        pis.append(p_i)
        seps.append(np.einsum("ij,ij->i", n, p_i - w))
    sep, p_i = np.concatenate(seps), np.concatenate(pis)
    nrm = np.tile(n, (len(centres), 1))
    keep = sep <= skin
    sub = np.repeat([slot for slot, _ in centres], len(cand))
    g = ContactGeometry(sep=sep[keep], normal=nrm[keep], p_i=p_i[keep],
                        p_j=p_i[keep] - sep[keep, None] * nrm[keep], converged=np.ones(int(keep.sum()), bool))
    return np.tile(cand, len(centres))[keep], sub[keep].astype(np.int64), g


def _empty():
    return ContactGeometry(np.zeros(0), np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 3)), np.zeros(0, bool))


# ---- rows carried from the previous step (contact.carry_rows) -------------------------------------------------
def core_parameters(kind, shape, X, R, idx, p, normal, radius_sign):
    """Axial parameter s (k,) of the core point behind witness points ``p`` (k, 3) of bodies ``idx`` (k,):
    the material point ``x + s a`` (a = body z axis from the rotation matrices ``R`` (m, 3, 3)) of a
    spherocylinder whose surface point facing the contact is ``p``; NaN for bodies that are not rods with
    L > 0.  ``radius_sign`` = +1 for body i of a pair (its surface point is core - R n, n from j to i), -1 for
    body j.  The capsule kernel's witness point is core point -+ R n, so this recovers the core parameter of the
    kernel exactly up to round-off, clamped to [-h, h] [L]."""
    rod = (kind[idx] == SPHEROCYLINDER) & (shape[idx, 1] > 0)
    h = 0.5 * shape[idx, 1]
    core = p + (radius_sign * shape[idx, 0])[:, None] * normal - X[idx]
    s = np.einsum("ij,ij->i", core, R[idx][:, :, 2])
    return np.where(rod, np.clip(s, -h, h), np.nan)


def rod_point_rows(kind, shape, X, R, ia, ib, s_i, s_j, interior_tol=1e-9):
    """Rows of a material point of one rod against the core of the other, at start configuration (X, R).

    ``ia``, ``ib`` (p,) local body indices of rod-rod pairs (i = lower gid, as every pair row), ``s_i``, ``s_j``
    (p,) the axial parameters [L] of the core points of an earlier row of the pair (:func:`core_parameters`;
    NaN = none).  The point of i at s_i (a sphere of i's radius on its core) against the core of j gives
    ``sep = dist(x_i + s_i a_i, core_j) - R_i - R_j``; since the sphere lies inside capsule i, this is >= the
    pair's smooth-surface separation: a necessary condition of nonpenetration, like the end-point rows
    (:func:`rod_pair_end_rows`).  The point is taken on i when s_i is interior (|s_i| < h_i), else on j when s_j
    is; a pair whose both points are end points gets no row (that row is already a level-0 end-point row).
    Only parameters inside the *current* core count (a rod that divided since has a shorter core): a point
    outside it would not be a point of the rod, and the row would not be a necessary condition.

    Returns ``(pair (r,) index into the pair list, ContactGeometry (r))`` (normal from j to i, witness points)."""
    ok = (kind[ia] == SPHEROCYLINDER) & (kind[ib] == SPHEROCYLINDER) & (shape[ia, 1] > 0) & (shape[ib, 1] > 0)
    h_i, h_j = 0.5 * shape[ia, 1], 0.5 * shape[ib, 1]
    with np.errstate(invalid="ignore"):
        in_i = ok & (np.abs(s_i) < h_i * (1.0 - interior_tol))
        in_j = ok & ~in_i & (np.abs(s_j) < h_j * (1.0 - interior_tol))
    pair = np.flatnonzero(in_i | in_j)
    i, j, on_i = ia[pair], ib[pair], in_i[pair]
    a_i, a_j = R[i][:, :, 2], R[j][:, :, 2]
    s = np.where(on_i, s_i[pair], s_j[pair])
    # the point (a core of half length 0) sits on i or on j; the other body keeps its whole core
    c_i = X[i] + np.where(on_i, s, 0.0)[:, None] * a_i
    c_j = X[j] + np.where(on_i, 0.0, s)[:, None] * a_j
    hh_i = np.where(on_i, 0.0, h_i[pair])
    hh_j = np.where(on_i, h_j[pair], 0.0)
    sep, nrm, p_i, p_j = capsule_capsule(c_i, a_i, hh_i, shape[i, 0], c_j, a_j, hh_j, shape[j, 0])
    return pair, ContactGeometry(sep=sep, normal=nrm, p_i=p_i, p_j=p_j, converged=np.ones(len(pair), bool))
