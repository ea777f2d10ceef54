"""Multi-sphere proxy contact model (the LCP-MS baseline).

Every body is replaced, for contact purposes only, by a union of spheres rigidly attached to it (the proxy);
every close pair of proxy spheres of two different bodies (and every proxy sphere close to a wall) gives one
unilateral constraint row with the exact sphere-sphere (sphere-wall) geometry.  The rows follow the contact
sign convention of docs/ARCHITECTURE.md: ``normal`` points from j towards i, ``sep = n . (p_i - p_j)``, the
witness points lie on the proxy sphere surfaces, and the caller's lever arms ``p - x_body`` give the right
torques (a proxy sphere is rigidly attached to its body).

Proxy construction (:func:`sphere_proxy`), ``resolution`` = number of spheres per non-spherical body:

* sphere: the body itself (one sphere, offset 0), whatever the resolution;
* spherocylinder (R, L): ``resolution`` spheres of radius R with centres uniformly spaced on the core segment
  from -L/2 to +L/2 along body z (one sphere at the centre for resolution 1 or L = 0).  The union lies inside
  the body and touches both tips; its Hausdorff distance to the body is
  ``sqrt(R^2 + h^2/4) - R`` (h = L/(resolution-1), attained on the cylinder midway between two centres), and
  ``L/2`` for resolution 1;
* ellipsoid (semi-axes sorted a >= b >= c): ``resolution`` spheres centred on the longest body axis at
  ``t_k = -T + 2 T k/(resolution-1)``, each with the largest radius that fits inside the ellipsoid (the
  inscribed radius ``-sdf_E(t_k e_long)``, computed with the exact foot-point solver
  :func:`relcp_mpi.geometry.ellipsoid.closest_point_body`).  The half extent T is chosen in
  ``(0, T*]``, ``T* = a - c^2/a`` (the tip's centre of curvature in the (a, c) plane: the largest inscribed
  sphere that still touches the tip), to minimise the Hausdorff distance between proxy and body (grid scan +
  golden-section refinement).  Putting the end spheres exactly at T* ("touch the tips") is much worse at low
  resolution (aspect-4 spheroid, resolution 2: gap 3.62 c at T* vs 1.25 c optimised) and converges to the same
  layout as the resolution grows, so the optimised T is used.  An ellipsoid with a == c (a sphere) gets one
  sphere.

Geometric error (:func:`proxy_gap`): the proxy is inside the body, so the Hausdorff distance of the two sets
is ``max_{y on the body surface} dist(y, proxy)``.  For spheres centred on the long axis the distance of a
surface point to each sphere increases with its distance from the axis, so the maximum is attained in the
(long, middle) principal plane and is computed on that 1-D profile curve (dense sampling, exact up to
O(sampling^2)).  For a separated pair this bounds the error of the closest proxy row:
``SNSD(i, j) <= min sep <= SNSD(i, j) + gap_i + gap_j``.  Measured for a prolate spheroid (4, 1, 1)
(lengths in units of the minor semi-axis): resolution 1: 3.0, 2: 1.25, 4: 0.463, 8: 0.165, 16: 0.056,
32: 0.018; spheroid (2, 1, 1): 2: 0.349, 4: 0.106, 8: 0.032, 16: 0.009.
Caveat: a line of spheres cannot fill a flat (b > c) cross section, so for ellipsoids whose two minor axes
differ the gap does not go to zero (it tends to about b - c); for oblate ellipsoids (a == b) the proxy is poor.

Vectorisation: body pairs are expanded to all their proxy-sphere pairs with repeat / cumulative-offset index
arithmetic (no Python loop per pair); work and memory are O(number of sphere pairs), processed in chunks.
The layout optimisation for ellipsoids runs once per distinct (shape, resolution) class and is cached.
"""
import functools

import numpy as np

from ..bodies.shapes import SPHERE, SPHEROCYLINDER, ELLIPSOID, RING, KIND_NAMES
from ..basics import quaternion
from ..geometry.contact import ContactGeometry
from ..geometry.ellipsoid import closest_point_body
from ..geometry.sphere import sphere_sphere

#: maximal number of sphere pairs expanded at once (memory bound of :func:`multisphere_rows`)
CHUNK = 1 << 20

_PROFILE_SAMPLES = 4097     # points on the quarter profile curve for the ellipsoid gap
_SCAN = 48                  # grid points of the half-extent scan
_GOLDEN_ITERS = 40


# ----------------------------------------------------------------------------------------------------------
# proxy construction
# ----------------------------------------------------------------------------------------------------------
def _as_arrays(kind, shape):
    kind = np.atleast_1d(np.asarray(kind)).astype(np.int64)
    shape = np.asarray(shape, dtype=float).reshape(-1, 3)
    if shape.shape[0] != kind.shape[0]:
        shape = np.broadcast_to(shape, (kind.shape[0], 3))
    bad = ~np.isin(kind, list(KIND_NAMES))
    if np.any(bad):
        raise ValueError(f"unknown shape kind(s) {np.unique(kind[bad]).tolist()}")
    return kind, shape


def _resolution(resolution, n):
    res = np.broadcast_to(np.asarray(resolution), (n,)).astype(np.int64)
    if np.any(res < 1):
        raise ValueError(f"proxy resolution must be >= 1, got {np.unique(res[res < 1]).tolist()}")
    return res


def proxy_counts(kind, shape, resolution):
    """Number of proxy spheres of every body, (n,) int64 (1 for spheres, capsules with L = 0, round ellipsoids)."""
    kind, shape = _as_arrays(kind, shape)
    res = _resolution(resolution, len(kind))
    s = np.sort(shape, axis=1)
    one = (kind == SPHERE) | ((kind == SPHEROCYLINDER) & (shape[:, 1] == 0.0)) | \
          ((kind == ELLIPSOID) & (s[:, 2] == s[:, 0]))
    return np.where(one, 1, res)


def _inscribed_radius(abc, t):
    """Radius of the largest ball centred at (t, 0, 0) inside the ellipsoid with semi-axes abc = (a, b, c)."""
    t = np.asarray(t, dtype=float).ravel()
    y = np.zeros((t.size, 3))
    y[:, 0] = t
    _, sdf, _, conv = closest_point_body(np.broadcast_to(abc, (t.size, 3)), y)
    if not np.all(conv):
        raise RuntimeError("ellipsoid proxy: inscribed-radius foot point did not converge")
    return np.maximum(-sdf, 0.0)


def _profile(a, b):
    th = np.linspace(0.0, 0.5 * np.pi, _PROFILE_SAMPLES)
    return a * np.cos(th), b * np.sin(th)


def _layout_gap(px, pr, T, r):
    """Hausdorff gap of axis spheres (centres T (..., n), radii r (..., n)) on the profile (px, pr)."""
    d = np.sqrt((px[:, None] - T[..., None, :]) ** 2 + pr[:, None] ** 2) - r[..., None, :]
    return d.min(axis=-1).max(axis=-1)


@functools.lru_cache(maxsize=256)
def ellipsoid_layout(a, b, c, n):
    """Axis layout of the ellipsoid proxy for sorted semi-axes a >= b >= c and n spheres.

    Returns ``(t (n,), r (n,), gap)``: centres along the long axis, inscribed radii and the Hausdorff distance
    between proxy and ellipsoid (see module docstring).  Cached per (a, b, c, n).
    """
    a, b, c, n = float(a), float(b), float(c), int(n)
    abc = np.array([a, b, c])
    px, pr = _profile(a, b)
    tstar = (a - c) * (a + c) / a
    if n == 1 or tstar <= 0.0:
        t = np.zeros(1)
        r = _inscribed_radius(abc, t)
        return t, r, float(_layout_gap(px, pr, t, r))
    u = np.linspace(-1.0, 1.0, n)

    def gap_of(Ts):
        Ts = np.atleast_1d(Ts)
        t = Ts[:, None] * u[None, :]
        r = _inscribed_radius(abc, t).reshape(t.shape)
        return _layout_gap(px, pr, t, r)

    grid = tstar * np.arange(1, _SCAN + 1) / _SCAN
    g = gap_of(grid)
    k = int(np.argmin(g))
    lo = grid[k - 1] if k > 0 else 0.0
    hi = grid[k + 1] if k + 1 < _SCAN else tstar
    best_T, best_g = grid[k], g[k]
    # golden-section refinement on [lo, hi] (keeps the best value seen, so never worse than the scan)
    phi = 0.5 * (np.sqrt(5.0) - 1.0)
    x1, x2 = hi - phi * (hi - lo), lo + phi * (hi - lo)
    f1, f2 = gap_of(np.array([x1, x2]))
    for _ in range(_GOLDEN_ITERS):
        if f1 <= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - phi * (hi - lo)
            f1 = gap_of(x1)[0]
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + phi * (hi - lo)
            f2 = gap_of(x2)[0]
        for xv, fv in ((x1, f1), (x2, f2)):
            if fv < best_g:
                best_T, best_g = xv, fv
    t = best_T * u
    r = _inscribed_radius(abc, t)
    return t, r, float(_layout_gap(px, pr, t, r))


def sphere_proxy(kind, shape, resolution):
    """Proxy spheres of n bodies.

    kind (n,), shape (n, 3), resolution: int or (n,) ints (spheres per non-spherical body).
    Returns flat arrays over all proxy spheres, grouped by body in body order:
    ``offsets (s, 3)`` body-frame centres, ``radii (s,)``, ``owner (s,)`` body index.
    """
    kind, shape = _as_arrays(kind, shape)
    n = len(kind)
    counts = proxy_counts(kind, shape, resolution)
    s = int(counts.sum())
    owner = np.repeat(np.arange(n, dtype=np.int64), counts)
    first = np.cumsum(counts) - counts
    local = np.arange(s, dtype=np.int64) - first[owner]
    cnt = counts[owner]
    u = np.where(cnt > 1, 2.0 * local / np.maximum(cnt - 1, 1) - 1.0, 0.0)   # in [-1, 1]
    offsets = np.zeros((s, 3))
    radii = np.zeros(s)
    ko = kind[owner]
    sh = shape[owner]
    sph = ko == SPHERE
    radii[sph] = sh[sph, 0]
    sc = ko == SPHEROCYLINDER
    radii[sc] = sh[sc, 0]
    offsets[sc, 2] = 0.5 * sh[sc, 1] * u[sc]
    # rings (torus Rc, r): ``resolution`` spheres of the tube radius evenly spaced on the centre circle
    rg = ko == RING
    if rg.any():
        ang = 2 * np.pi * local[rg] / cnt[rg]
        offsets[rg, 0] = sh[rg, 0] * np.cos(ang)
        offsets[rg, 1] = sh[rg, 0] * np.sin(ang)
        radii[rg] = sh[rg, 1]
    # ellipsoids: one layout per distinct (shape, count) class
    el_bodies = np.nonzero(kind == ELLIPSOID)[0]
    if el_bodies.size:
        keys = np.concatenate([shape[el_bodies], counts[el_bodies, None].astype(float)], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        inv = inv.ravel()
        for g, key in enumerate(uniq):
            e = key[:3]
            nsph = int(key[3])
            order = np.argsort(-e, kind="stable")            # order[0] = longest body axis
            t, r, _ = ellipsoid_layout(*e[order], nsph)
            bodies = el_bodies[inv == g]
            idx = (first[bodies, None] + np.arange(nsph)[None, :]).ravel()
            offsets[idx, order[0]] = np.tile(t, bodies.size)
            radii[idx] = np.tile(r, bodies.size)
    return offsets, radii, owner


def proxy_gap(kind, shape, resolution):
    """Hausdorff distance between every body and its proxy, (n,) (proxy inside the body, so this is
    ``max_{y in body} dist(y, proxy)``); see the module docstring for the formulas."""
    kind, shape = _as_arrays(kind, shape)
    counts = proxy_counts(kind, shape, resolution)
    gap = np.zeros(len(kind))
    sc = kind == SPHEROCYLINDER
    R, L = shape[:, 0], shape[:, 1]
    h = L / np.maximum(counts - 1, 1)
    gap[sc] = np.where(counts[sc] > 1, np.sqrt(R[sc] ** 2 + 0.25 * h[sc] ** 2) - R[sc], 0.5 * L[sc])
    # ring: worst tube point lies midway between two neighbouring spheres, on the outer side of the tube:
    # gap = sqrt(Rc^2 sin^2(pi/n) + (Rc (1 - cos(pi/n)) + r)^2) - r
    rg = kind == RING
    nn = np.maximum(counts, 1)
    ring_gap = np.sqrt((shape[:, 0] * np.sin(np.pi / nn)) ** 2
                       + (shape[:, 0] * (1 - np.cos(np.pi / nn)) + shape[:, 1]) ** 2) - shape[:, 1]
    gap[rg] = ring_gap[rg]
    el = np.nonzero(kind == ELLIPSOID)[0]
    if el.size:                                      # one (cached) layout per distinct shape class
        keys = np.concatenate([-np.sort(-shape[el], axis=1), counts[el, None].astype(float)], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        g = np.array([ellipsoid_layout(*k[:3], int(k[3]))[2] for k in uniq])
        gap[el] = g[inv.ravel()]
    return gap


def resolution_for_gap(kind, shape, max_gap, max_resolution=4096):
    """Smallest proxy resolution n (spheres per body) with ``proxy_gap(kind, shape, n) <= max_gap`` for every
    one of the given bodies (kind (m,), shape (m, 3)): the LCP-MS resolution whose surface roughness matches
    a length ``max_gap`` [L] (e.g. ``contact.overlap_tol``).  The gap decreases with n (the axis layout is
    re-optimised for every n; tested), so the search doubles n until the gap is met and then bisects:
    O(log n) layouts.  Returns ``(n, gap at n)``; raises ValueError when even ``max_resolution`` spheres do
    not reach ``max_gap`` (e.g. flat ellipsoids, whose gap tends to b - c).  Bodies that are one sphere
    (spheres, round ellipsoids, capsules with L = 0) have gap 0 at n = 1."""
    if not max_gap > 0:
        raise ValueError(f"max_gap must be > 0, got {max_gap}")
    kind, shape = _as_arrays(kind, shape)

    def worst(n):
        return float(proxy_gap(kind, shape, n).max()) if len(kind) else 0.0

    lo, hi = 0, 1                     # invariant: worst(lo) > max_gap (lo = 0: nothing), worst(hi) tested
    g_hi = worst(hi)
    while g_hi > max_gap:
        if hi >= max_resolution:
            raise ValueError(f"proxy gap {g_hi:.3g} at the largest resolution {max_resolution} still exceeds "
                             f"{max_gap:g}")
        lo, hi = hi, min(2 * hi, max_resolution)
        g_hi = worst(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        g = worst(mid)
        if g <= max_gap:
            hi, g_hi = mid, g
        else:
            lo = mid
    return hi, g_hi


# ----------------------------------------------------------------------------------------------------------
# constraint rows
# ----------------------------------------------------------------------------------------------------------
def _proxy_lab(kind, shape, x, q, resolution, proxy):
    kind, shape = _as_arrays(kind, shape)
    m = len(kind)
    if proxy is None:
        proxy = sphere_proxy(kind, shape, resolution)
    offsets, radii, owner = proxy
    counts = np.bincount(owner, minlength=m)
    first = np.cumsum(counts) - counts
    x = np.asarray(x, dtype=float).reshape(m, 3)
    q = np.asarray(q, dtype=float).reshape(m, 4)
    centres = x[owner] + quaternion.rotate(q[owner], offsets)
    return centres, radii, counts, first


def _chunks(work):
    """Split consecutive items with per-item work ``work`` into slices of total work <= CHUNK (>= 1 item)."""
    if work.size == 0:
        return []
    cum = np.cumsum(work)
    bounds = [0]
    while bounds[-1] < work.size:
        base = cum[bounds[-1] - 1] if bounds[-1] > 0 else 0
        nxt = int(np.searchsorted(cum, base + CHUNK, side="right"))
        bounds.append(max(nxt, bounds[-1] + 1))
    return [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def _expand(ni, nj):
    """All (pair, s, t) with s < ni[pair], t < nj[pair], ordered by pair then s then t."""
    npp = ni * nj
    pair = np.repeat(np.arange(ni.size, dtype=np.int64), npp)
    k = np.arange(pair.size, dtype=np.int64) - np.repeat(np.cumsum(npp) - npp, npp)
    njr = nj[pair]
    s = k // njr
    return pair, s, k - s * njr


def _empty_geo():
    return ContactGeometry(np.zeros(0), np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 3)),
                           np.ones(0, dtype=bool))


def multisphere_rows(kind, shape, x, q, ia, ib, resolution, skin, proxy=None):
    """One constraint row per close proxy-sphere pair of the candidate body pairs (ia, ib).

    kind, shape, x, q: the rank's combined body arrays (m,); ia, ib (P,) body indices (i, j of each pair).
    A row is produced for spheres s of body i and t of body j whose centres are within ``r_s + r_t + skin``
    (i.e. sphere-sphere sep <= skin).  ``proxy``: optional precomputed ``sphere_proxy(kind, shape, resolution)``.

    Returns a dict: ``pair`` (c,) index into ia/ib; ``sub`` (c,) = s * n_j + t (n_j = number of proxy spheres
    of body j), unique within a body pair and deterministic, for warm-start keys (gid_i, gid_j, sub);
    ``ia``, ``ib`` (c,) body indices; ``sphere_i``, ``sphere_j`` (c,) flat proxy-sphere indices; ``geo`` a
    ContactGeometry (normal j -> i, p_i / p_j on the sphere surfaces, converged all True).
    Rows are ordered by pair, then sub.
    """
    centres, radii, counts, first = _proxy_lab(kind, shape, x, q, resolution, proxy)
    ia = np.asarray(ia, dtype=np.int64).ravel()
    ib = np.asarray(ib, dtype=np.int64).ravel()
    ni, nj = counts[ia], counts[ib]
    out = dict(pair=[], sub=[], si=[], sj=[])
    for sl in _chunks(ni * nj):
        pair, s, t = _expand(ni[sl], nj[sl])
        pair += sl.start
        gs = first[ia[pair]] + s
        gt = first[ib[pair]] + t
        d = centres[gs] - centres[gt]
        lim = radii[gs] + radii[gt] + skin
        keep = (lim >= 0.0) & (np.einsum("ij,ij->i", d, d) <= lim * lim)
        out["pair"].append(pair[keep])
        out["sub"].append((s * nj[pair] + t)[keep])
        out["si"].append(gs[keep])
        out["sj"].append(gt[keep])
    if not out["pair"]:
        z = np.zeros(0, np.int64)
        return dict(pair=z, sub=z, ia=z, ib=z, sphere_i=z, sphere_j=z, geo=_empty_geo())
    pair, sub, si, sj = (np.concatenate(out[k]) for k in ("pair", "sub", "si", "sj"))
    sep, n, p_i, p_j = sphere_sphere(centres[si], radii[si], centres[sj], radii[sj])
    geo = ContactGeometry(sep, n, p_i, p_j, np.ones(sep.size, dtype=bool))
    return dict(pair=pair, sub=sub, ia=ia[pair], ib=ib[pair], sphere_i=si, sphere_j=sj, geo=geo)


def multisphere_wall_rows(kind, shape, x, q, wb, ww, wall_points, wall_normals, resolution, skin, proxy=None):
    """One row per proxy sphere of body wb[k] within ``skin`` of wall ww[k] (sphere-wall sep <= skin).

    wall_points, wall_normals: (W, 3), the normal (renormalised) points into the allowed half-space.
    Returns a dict: ``pair`` (c,) index into wb/ww; ``sub`` (c,) the proxy sphere's local index in its body;
    ``body``, ``wall`` (c,); ``sphere`` (c,) flat proxy-sphere index; ``geo`` a ContactGeometry with
    normal = wall normal, p_i on the sphere, p_j its projection on the plane (body = i, wall = j).
    """
    centres, radii, counts, first = _proxy_lab(kind, shape, x, q, resolution, proxy)
    wb = np.asarray(wb, dtype=np.int64).ravel()
    ww = np.asarray(ww, dtype=np.int64).ravel()
    wp = np.asarray(wall_points, dtype=float).reshape(-1, 3)
    wn = np.asarray(wall_normals, dtype=float).reshape(-1, 3)
    wn = wn / np.linalg.norm(wn, axis=1)[:, None]
    nb = counts[wb]
    pair = np.repeat(np.arange(wb.size, dtype=np.int64), nb)
    s = np.arange(pair.size, dtype=np.int64) - np.repeat(np.cumsum(nb) - nb, nb)
    gs = first[wb[pair]] + s
    n = wn[ww[pair]]
    c = centres[gs]
    sep = np.einsum("ij,ij->i", n, c - wp[ww[pair]]) - radii[gs]
    keep = sep <= skin
    pair, s, gs, n, c, sep = pair[keep], s[keep], gs[keep], n[keep], c[keep], sep[keep]
    p_i = c - radii[gs, None] * n
    p_j = p_i - sep[:, None] * n
    geo = ContactGeometry(sep, n, p_i, p_j, np.ones(sep.size, dtype=bool))
    return dict(pair=pair, sub=s, body=wb[pair], wall=ww[pair], sphere=gs, geo=geo)
