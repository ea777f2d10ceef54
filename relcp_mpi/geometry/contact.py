"""Contact geometry dispatcher: signed separation, shared normal and witness points for mixed body kinds.

Contract (docs/ARCHITECTURE.md, "Geometry contract"): for a pair (i, j) the unit normal points from j towards
i, ``sep`` is the signed separation (negative = overlap), ``p_i``/``p_j`` are witness points on the surfaces
with ``sep = n . (p_i - p_j)``.

Definitions used per kind combination:

================================  =======================================================================
sphere/spherocylinder pairs       core (point/segment) distance minus both radii (exact to rounding)
ellipsoid with sphere             ``sdf_E(centre) - R`` (exact signed distance, foot-point Newton)
ellipsoid with spherocylinder     ``min_t sdf_E(c + t a) - R`` (1-D convex minimisation)
ellipsoid with ellipsoid          ``max_|u|=1 [min_{a in i} u.a - max_{b in j} u.b]`` (Riemannian Newton)
ring with ring                    centre-circle distance minus both tube radii (``torus.ring_ring_kernel``:
                                  multi-start Newton + certified branch-and-bound global search)
ring with sphere                  distance of the sphere centre to the centre circle minus r and R (closed
                                  form, ``torus.ring_sphere_kernel``)
ring with wall                    ``n . (lowest point of the tube) - n . wall_point`` (closed form)
================================  =======================================================================

Pairs are grouped by kind combination with masks; every kernel is batched (no Python loop over pairs).
Pairs with the ellipsoid as body i, and (sphere i, ring j) pairs, are evaluated with the bodies swapped and
the result flipped (normal -> -normal, p_i <-> p_j), so swapping i and j flips the normal exactly for those
kinds; the ring-ring kernel is itself symmetric.  Rings (shape (Rc, r, 0), axis = body z) have a non-convex
surface: the ring-ring separation is the global minimum over both centre circles (certified to
``1e-10 (Rc_i + Rc_j)``), and interlaced rings are correctly reported as separated although their bounding
spheres overlap.  Ring with ellipsoid or spherocylinder is not implemented and raises
:class:`NotImplementedError` (decks mixing them are rejected by the deck validation).
"""

import numpy as np

from ..bodies.shapes import SPHERE, SPHEROCYLINDER, ELLIPSOID, RING, KIND_NAMES
from ..basics import quaternion
from .sphere import sphere_sphere
from .spherocylinder import capsule_capsule
from . import spherocylinder_jit
from .ellipsoid import sphere_vs_ellipsoid, capsule_vs_ellipsoid, ellipsoid_vs_ellipsoid
from .torus import ring_ring_kernel, ring_sphere_kernel
from .result import ContactGeometry  # noqa: F401 (the geometry contract, re-exported)
from .wall import body_wall


class GeometryError(RuntimeError):
    """A geometry kernel did not converge; ``pairs`` holds the failing pair indices (into the input arrays)."""

    def __init__(self, message, pairs=()):
        super().__init__(message)
        self.pairs = np.asarray(pairs, dtype=np.int64)


def _empty(m):
    return ContactGeometry(np.empty(m), np.empty((m, 3)), np.empty((m, 3)), np.empty((m, 3)),
                           np.ones(m, dtype=bool))


def _prep(kind, shape, x, q, m):
    kind = np.broadcast_to(np.asarray(kind, dtype=np.int64), (m,))
    shape = np.broadcast_to(np.asarray(shape, dtype=float), (m, 3))
    x = np.asarray(x, dtype=float).reshape(m, 3)
    q = np.broadcast_to(np.asarray(q, dtype=float), (m, 4))
    return kind, shape, x, q


def _raise_if_failed(conv, what):
    bad = np.nonzero(~conv)[0]
    if bad.size:
        shown = bad[:20].tolist()
        more = "" if bad.size <= 20 else f" (+{bad.size - 20} more)"
        raise GeometryError(f"{what}: geometry solve did not converge for {bad.size} pair(s), "
                            f"indices {shown}{more}", bad)


def _check_rings(kind, shape, what):
    """Rings need 0 < r < Rc (the torus kernels assume it)."""
    rg = kind == RING
    if np.any(rg):
        Rc, r = shape[rg, 0], shape[rg, 1]
        bad = ~((r > 0) & (r < Rc) & np.isfinite(Rc) & np.isfinite(r))
        if np.any(bad):
            k = int(np.nonzero(rg)[0][np.nonzero(bad)[0][0]])
            raise ValueError(f"{what}: ring needs 0 < r < Rc, got Rc={shape[k, 0]}, r={shape[k, 1]} (index {k})")


def pair_snsd(kind_i, shape_i, x_i, q_i, kind_j, shape_j, x_j, q_j, *, tol=1e-12, check=True, max_iter=None,
              hint=None, R_i=None, R_j=None):
    """Signed separation, shared normal and witness points for m pairs of bodies (any kinds).

    kind_*: (m,) int shape codes (or a scalar), shape_*: (m, 3) (or (3,)), x_*: (m, 3) centres,
    q_*: (m, 4) unit quaternions (w, x, y, z), body -> lab.
    tol: relative tolerance of the iterative (ellipsoid) solvers.  max_iter: iteration cap of the iterative
    solvers (None = defaults: 50 Newton iterations for ellipsoid pairs, 100 for foot points and the 1-D
    capsule search, 60 per Newton start for ring pairs).  For ring pairs ``tol`` is the relative gradient
    tolerance of the angle Newton solves; ``converged`` is False where the global certificate failed.
    Ring with ellipsoid or spherocylinder raises :class:`NotImplementedError`.
    check: raise :class:`GeometryError` naming the pair indices that did not converge.
    hint: optional warm start, an (m, 3) array of previous normals of the same pairs (same (i, j) order, i.e.
    from j towards i; any positive length) with NaN rows (or zero rows) for "no hint".  Used only for
    ellipsoid-ellipsoid pairs: a hint direction u with f(u) > 0 proves the pair separated and a single Newton
    ascent from it is accepted only when certified globally optimal by the duality gap; all other pairs (no
    or useless hint, overlapping, not certified) take the hint-free path.  The result is the same certified
    optimum with or without hints (to the solver tolerance); bad hints only cost time.  Ignored for the
    other kind combinations (closed forms, or a 1-D bracketed search that a hint would not shorten).
    R_i, R_j: optional (m, 3, 3) rotation matrices of q_i, q_j (``quaternion.to_matrix``) when the caller has
    them already (the stepper computes them once per body and configuration); same result to the last bit.
    """
    x_i = np.asarray(x_i, dtype=float).reshape(-1, 3)
    m = x_i.shape[0]
    if m == 0:
        return _empty(0)
    if hint is not None:
        hint = np.asarray(hint, dtype=float)
        if hint.shape != (m, 3):
            raise ValueError(f"hint must have shape ({m}, 3), got {hint.shape}")
    kind_i, shape_i, x_i, q_i = _prep(kind_i, shape_i, x_i, q_i, m)
    kind_j, shape_j, x_j, q_j = _prep(kind_j, shape_j, x_j, q_j, m)
    for k in (kind_i, kind_j):
        bad = ~np.isin(k, list(KIND_NAMES))
        if np.any(bad):
            raise ValueError(f"unknown shape kind(s) {np.unique(k[bad]).tolist()}")
    ring_i = kind_i == RING
    ring_j = kind_j == RING
    unsupported = (ring_i & ~(ring_j | (kind_j == SPHERE))) | (ring_j & ~(ring_i | (kind_i == SPHERE)))
    if np.any(unsupported):
        bad = np.nonzero(unsupported)[0]
        k = int(bad[0])
        raise NotImplementedError(
            f"pair_snsd: contact between a ring and a {KIND_NAMES[int(kind_j[k] if ring_i[k] else kind_i[k])]} "
            f"is not implemented (rings combine only with rings, spheres and walls); {bad.size} such pair(s), "
            f"indices {bad[:20].tolist()}")
    _check_rings(kind_i, shape_i, "pair_snsd (i)")
    _check_rings(kind_j, shape_j, "pair_snsd (j)")
    it_ee = 50 if max_iter is None else max_iter
    it_1d = 100 if max_iter is None else max_iter
    it_ring = 60 if max_iter is None else max_iter

    R_i = quaternion.to_matrix(q_i) if R_i is None else np.asarray(R_i, dtype=float).reshape(m, 3, 3)
    R_j = quaternion.to_matrix(q_j) if R_j is None else np.asarray(R_j, dtype=float).reshape(m, 3, 3)
    sep = np.full(m, np.nan)
    normal = np.full((m, 3), np.nan)
    p_i = np.full((m, 3), np.nan)
    p_j = np.full((m, 3), np.nan)
    conv = np.zeros(m, dtype=bool)

    def store(mask, flip, res):
        s, n, pa, pb, c = res
        sep[mask] = s
        if flip:
            normal[mask] = -n
            p_i[mask] = pb
            p_j[mask] = pa
        else:
            normal[mask] = n
            p_i[mask] = pa
            p_j[mask] = pb
        conv[mask] = c

    def side(mask, which):
        if which == "i":
            return kind_i[mask], shape_i[mask], x_i[mask], R_i[mask]
        return kind_j[mask], shape_j[mask], x_j[mask], R_j[mask]

    round_i = (kind_i == SPHERE) | (kind_i == SPHEROCYLINDER)
    round_j = (kind_j == SPHERE) | (kind_j == SPHEROCYLINDER)

    # sphere - sphere
    mk = (kind_i == SPHERE) & (kind_j == SPHERE)
    if np.any(mk):
        s, n, a, b = sphere_sphere(x_i[mk], shape_i[mk, 0], x_j[mk], shape_j[mk, 0])
        store(mk, False, (s, n, a, b, np.ones(s.shape, dtype=bool)))
    # sphere / spherocylinder mixtures (core segments; a sphere is a segment of half length 0)
    mk = round_i & round_j & ~((kind_i == SPHERE) & (kind_j == SPHERE))
    if np.any(mk):
        hi_ = np.where(kind_i[mk] == SPHEROCYLINDER, 0.5 * shape_i[mk, 1], 0.0)
        hj_ = np.where(kind_j[mk] == SPHEROCYLINDER, 0.5 * shape_j[mk, 1], 0.0)
        s, n, a, b = capsule_capsule(x_i[mk], R_i[mk, :, 2], hi_, shape_i[mk, 0],
                                     x_j[mk], R_j[mk, :, 2], hj_, shape_j[mk, 0])
        store(mk, False, (s, n, a, b, np.ones(s.shape, dtype=bool)))
    # round body vs ellipsoid, both orders: the kernels take (round = A, ellipsoid = B)
    for flip, A, B, kA, kB in ((False, "i", "j", kind_i, kind_j), (True, "j", "i", kind_j, kind_i)):
        mk = (kA == SPHERE) & (kB == ELLIPSOID)
        if np.any(mk):
            _, shA, xA, _ = side(mk, A)
            _, shB, xB, RB = side(mk, B)
            store(mk, flip, sphere_vs_ellipsoid(xA, shA[:, 0], xB, RB, shB, max_iter=it_1d))
        mk = (kA == SPHEROCYLINDER) & (kB == ELLIPSOID)
        if np.any(mk):
            _, shA, xA, RA = side(mk, A)
            _, shB, xB, RB = side(mk, B)
            store(mk, flip, capsule_vs_ellipsoid(xA, RA[:, :, 2], 0.5 * shA[:, 1], shA[:, 0], xB, RB, shB,
                                                 tol=tol, max_iter=it_1d))
    # ellipsoid - ellipsoid
    mk = (kind_i == ELLIPSOID) & (kind_j == ELLIPSOID)
    if np.any(mk):
        store(mk, False, ellipsoid_vs_ellipsoid(x_i[mk], R_i[mk], shape_i[mk], x_j[mk], R_j[mk], shape_j[mk],
                                                tol=tol, max_iter=it_ee,
                                                hint=None if hint is None else hint[mk]))
    # ring - ring (symmetric kernel: swapping i and j flips the normal and swaps the witness points)
    mk = ring_i & ring_j
    if np.any(mk):
        store(mk, False, ring_ring_kernel(x_i[mk], R_i[mk], shape_i[mk, 0], shape_i[mk, 1],
                                          x_j[mk], R_j[mk], shape_j[mk, 0], shape_j[mk, 1],
                                          tol=tol, max_iter=it_ring))
    # ring - sphere, both orders: the kernel takes (ring = A, sphere = B), normal from the sphere to the ring
    for flip, A, B, kA, kB in ((False, "i", "j", kind_i, kind_j), (True, "j", "i", kind_j, kind_i)):
        mk = (kA == RING) & (kB == SPHERE)
        if np.any(mk):
            _, shA, xA, RA = side(mk, A)
            _, shB, xB, _ = side(mk, B)
            store(mk, flip, ring_sphere_kernel(xA, RA, shA[:, 0], shA[:, 1], xB, shB[:, 0]))
    if check:
        _raise_if_failed(conv, "pair_snsd")
    return ContactGeometry(sep, normal, p_i, p_j, conv)


def pair_snsd_indexed(kind, shape, X, Q, ia, ib, *, tol=1e-12, check=True, hint=None, R=None):
    """:func:`pair_snsd` of the pairs (ia, ib) (k,) of one body set (kind (m,), shape (m, 3), X (m, 3), Q (m, 4),
    optional rotation matrices R (m, 3, 3)), bit for bit.

    A set of spherocylinders only (the rod beds) with R given and numba available takes the compiled kernel,
    which reads the body arrays by index instead of gathering per-pair copies (``spherocylinder_jit``);
    everything else gathers and calls :func:`pair_snsd`."""
    ia = np.asarray(ia, dtype=np.int64)
    ib = np.asarray(ib, dtype=np.int64)
    if (R is not None and spherocylinder_jit.use(len(ia))
            and np.all(np.asarray(kind) == SPHEROCYLINDER)):
        sep, n, p_i, p_j = spherocylinder_jit.capsule_pairs_indexed(X, R, shape, ia, ib)
        return ContactGeometry(sep, n, p_i, p_j, np.ones(len(ia), dtype=bool))
    return pair_snsd(kind[ia], shape[ia], X[ia], Q[ia], kind[ib], shape[ib], X[ib], Q[ib], tol=tol, check=check,
                     hint=hint, R_i=None if R is None else R[ia], R_j=None if R is None else R[ib])


def wall_snsd(kind, shape, x, q, wall_point, wall_normal, R=None):
    """Signed separation of m bodies (body i) from m walls (plane point, unit normal into the allowed side).

    wall_point / wall_normal may be (3,) (one wall for all) or (m, 3).  The normal is renormalised.
    ``sep = min_{y in body} n . (y - wall_point)``; ``p_j`` is the projection of ``p_i`` on the plane.
    All kinds, rings included (closed forms, see :mod:`relcp_mpi.geometry.wall`).  ``R`` (m, 3, 3): optional
    rotation matrices of ``q``.
    """
    x = np.asarray(x, dtype=float).reshape(-1, 3)
    m = x.shape[0]
    if m == 0:
        return _empty(0)
    kind, shape, x, q = _prep(kind, shape, x, q, m)
    _check_rings(kind, shape, "wall_snsd")
    w = np.broadcast_to(np.asarray(wall_point, dtype=float), (m, 3))
    n = np.broadcast_to(np.asarray(wall_normal, dtype=float), (m, 3))
    n = n / np.linalg.norm(n, axis=1)[:, None]
    R = quaternion.to_matrix(q) if R is None else np.asarray(R, dtype=float).reshape(m, 3, 3)
    sep, n, p_i, p_j = body_wall(kind, shape, x, R, w, n)
    return ContactGeometry(sep, n, p_i, p_j, np.ones(m, dtype=bool))
