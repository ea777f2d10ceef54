"""Compiled (numba) candidate-pair search of :func:`relcp_mpi.contact.neighbors.candidate_pairs`: a cell list
that gives the same pairs in the same order as the KD-tree path, without scipy.

Optional (geometry/numba_switch.py): used when a build of it is available (the ahead-of-time module of
geometry/aot_build.py always; numba's JIT for at least ``MIN_POINTS`` points, importing numba costs ~1 s) and
``RELCP_NUMBA`` is not ``0``.  Without it, ``neighbors.py`` queries scipy's ``cKDTree`` (~16 MiB per rank of
import, which a run with the AOT kernels no longer loads) and filters its pairs with numpy or with
:func:`_filter_sort` below.

Why the pairs are the same (``neighbors.candidate_pairs``: the tree's pairs within ``radius = 2 rmax + skin``,
then kept when ``d <= (r_a + r_b) + skin`` and ``min(a, b) < n_owned``, ordered by ``(lo, hi)``):

* the cells are cubes of side ``h >= radius (1 + 2^-20)`` (larger when the grid would exceed ``MAX_CELLS_PER_POINT``
  cells per point), so two points whose coordinates differ by at most ``radius`` (to the last few bits) lie in the
  same or adjacent cells: the 27 cells around a point hold every pair the tree can report, and more;
* each candidate is tested with the tree's own leaf test, ``s <= radius * radius`` with ``s`` the squared distance
  summed ``(s0 + s1) + s2`` (scipy's ``sqeuclidean_distance_double`` for 3 dimensions), then with the numpy
  path's filter (``d = sqrt(s) <= (r_a + r_b) + skin``, the operations of ``pair_distance``); the squares do not
  depend on the sign of the differences and the sums are commutative, so the order of a and b does not matter;
* the pairs are emitted for lo = 0, 1, ... < n_owned in turn, each lo's partners sorted: the (lo, hi) order.

The tree decides a pair at the leaf test except where its node bounds, accumulated in rounded arithmetic, prune or
accept a whole node pair; a pair could differ only if its squared distance were within rounding of
``radius^2``, where the tree's own answer depends on the node layout (tests/test_neighbors_cells.py compares the
two on random, clustered, periodic-ghost-like and boundary clouds).
"""
import numpy as np

from relcp_mpi.geometry.numba_switch import (AVAILABLE, backend, compiled_entries, enabled,  # noqa: F401 (re-exported)
                                              use_compiled)

MIN_ROWS = 4096         # the tree path's compiled filter: fewer tree pairs are filtered as fast by numpy
MIN_POINTS = 1024       # the JIT cell list: smaller sets take the tree (importing numba costs ~1 s per process)
MAX_CELLS_PER_POINT = 4     # grid cap (cells <= 4 m + 64): wider cells instead of a huge grid of empty cells
CELL_MARGIN = 2.0 ** -20    # relative: cells wider than the radius by more than the rounding of the cell indices
_CAPACITY = {}          # the last search's pair count (+25 %) per kind of search: the next one's output capacity
_NO_INT = np.zeros(0, np.int64)         # the screen's arrays when there is no screen (not read)
_NO_FLOAT = np.zeros(0)
_NO_AXES = np.zeros((3, 0))


_JIT_NAMES = ("_sort_run", "_cell_pairs", "_filter_sort")
_ENTRIES = ("_cell_pairs", "_filter_sort")
AOT_SIGNATURES = {      # the entry points' types for the AOT build (geometry/aot_build.py)
    "_cell_pairs": "i8(f8[:, ::1], f8[::1], f8, f8, i8, f8[::1], f8, i8[::1], i8[::1], f8[:, ::1], f8[::1], f8[::1], "
                   "f8, i8[::1], i8[::1])",
    "_filter_sort": "i8(f8[:, ::1], f8[::1], f8, i8, i8[:, ::1], i8[::1], i8[::1], i8[::1])",
}


def _compiled():
    return compiled_entries(globals(), _JIT_NAMES, _ENTRIES)


def _sort_run(v, n):
    """Sort v[:n] (distinct int64) in place: insertion sort for the usual short runs, else numpy's sort."""
    if n > 64:
        v[:n] = np.sort(v[:n])
        return
    for k in range(1, n):
        t = v[k]
        q = k - 1
        while q >= 0 and v[q] > t:
            v[q + 1] = v[q]
            q -= 1
        v[q + 1] = t


def _cell_pairs(x, r, skin, radius, n_owned, origin, h, dims, gid, ax, rad, half, screen, lo_out, hi_out):
    """Kept pairs (module docstring) of the points x (m, 3) with radii r (m,), in (lo, hi) order, into lo_out /
    hi_out (capacity p); the grid: ``dims`` (3,) cells of side ``h`` from ``origin`` (3,) (indices clipped into
    the grid).  Returns the number of kept pairs, which may exceed p: then only the first p were written.

    ``screen`` NaN: no more.  Else (a set of spheres and spherocylinders) the stepper's level-0 filters follow
    in the same pass, in the order of the pairs: keep the pairs this rank owns (b owned, or ``gid[a] < gid[b]``),
    orient them lower gid first (``stepper.relcp._own_pairs``), and keep those whose support-function lower bound
    is ``<= screen`` (``support.pair_lower_bound``'s operations: ``ax`` (3, m) body axes, ``rad`` / ``half`` (m,)
    radii and half lengths, 0 for spheres); ``gid`` (m,).  Otherwise these arrays are not read."""
    m = x.shape[0]
    nx, ny, nz = dims[0], dims[1], dims[2]
    ncell = nx * ny * nz
    cix = np.empty((m, 3), np.int64)
    start = np.zeros(ncell + 1, np.int64)
    for i in range(m):
        c = 0
        for k in range(3):
            j = int((x[i, k] - origin[k]) / h)
            j = min(max(j, 0), dims[k] - 1)
            cix[i, k] = j
            c = c * dims[k] + j
        start[c + 1] += 1
    for c in range(ncell):
        start[c + 1] += start[c]
    order = np.empty(m, np.int64)       # points by cell, each cell's in increasing index (stable fill)
    fill = start[:ncell].copy()
    for i in range(m):
        c = (cix[i, 0] * ny + cix[i, 1]) * nz + cix[i, 2]
        order[fill[c]] = i
        fill[c] += 1
    xs = np.empty((m, 3))               # coordinates and radii in cell order: the scans below read them in a row
    rs = np.empty(m)
    for q in range(m):
        i = order[q]
        xs[q, 0], xs[q, 1], xs[q, 2] = x[i, 0], x[i, 1], x[i, 2]
        rs[q] = r[i]
    r2 = radius * radius
    cap = lo_out.shape[0]
    buf = np.empty(m, np.int64)
    screening = screen == screen
    # the scans index with unsigned integers: numba wraps negative signed indices around (a compare and an add
    # per access, which the indices loaded from ``start`` / ``order`` / ``buf`` cannot be proven to skip)
    one = np.uint64(1)
    nown = np.uint64(max(n_owned, 0))
    total = 0
    for a in range(min(n_owned, m)):
        nb = np.uint64(0)
        ix, iy, iz = cix[a, 0], cix[a, 1], cix[a, 2]
        xa0, xa1, xa2, ra = x[a, 0], x[a, 1], x[a, 2], r[a]
        for jx in range(max(ix - 1, 0), min(ix + 2, nx)):
            for jy in range(max(iy - 1, 0), min(iy + 2, ny)):
                for jz in range(max(iz - 1, 0), min(iz + 2, nz)):
                    c = np.uint64((jx * ny + jy) * nz + jz)
                    lo, end = np.uint64(start[c]), np.uint64(start[c + one])
                    hi = end
                    while lo < hi:              # the cell's first point after a (its indices increase)
                        mid = (lo + hi) >> one
                        if order[mid] <= a:
                            lo = mid + one
                        else:
                            hi = mid
                    q = lo
                    while q < end:
                        d0 = xa0 - xs[q, 0]
                        d1 = xa1 - xs[q, 1]
                        d2 = xa2 - xs[q, 2]
                        s = (d0 * d0 + d1 * d1) + d2 * d2
                        if s <= r2 and np.sqrt(s) <= (ra + rs[q]) + skin:
                            buf[nb] = order[q]
                            nb += one
                        q += one
        _sort_run(buf, np.int64(nb))
        t = np.uint64(0)
        while t < nb:
            i = np.uint64(a)
            j = np.uint64(buf[t])
            t += one
            if screening:
                if j >= nown and not gid[i] < gid[j]:       # a ghost pair of the lower gid's rank
                    continue
                if gid[i] > gid[j]:
                    i, j = j, i
                d0 = x[i, 0] - x[j, 0]
                d1 = x[i, 1] - x[j, 1]
                d2 = x[i, 2] - x[j, 2]
                dist = np.sqrt((d0 * d0 + d1 * d1) + d2 * d2)
                lb = -np.inf
                if dist > 0:
                    u0, u1, u2 = d0 / dist, d1 / dist, d2 / dist
                    lb = (dist - (rad[i] + half[i] * abs((ax[0, i] * u0 + ax[1, i] * u1) + ax[2, i] * u2))) \
                        - (rad[j] + half[j] * abs((ax[0, j] * u0 + ax[1, j] * u1) + ax[2, j] * u2))
                if not lb <= screen:
                    continue
            if total < cap:
                lo_out[total] = i
                hi_out[total] = j
            total += 1
    return total


def _filter_sort(x, r, skin, n_owned, pairs, start, lo_out, hi_out):
    """Kept pairs of the tree's ``pairs`` (p, 2) into lo_out / hi_out ordered by (lo, hi); ``start`` (m + 1,)
    zeros on entry (bucket offsets).  Returns the number of kept pairs.  The same filter as the numpy path
    (``pair_distance``'s ``(s0 + s1) + s2``, ``sqrt``, ``d <= (r_a + r_b) + skin``, ``min(a, b) < n_owned``);
    the keys are distinct, so a counting sort by lo and :func:`_sort_run` of each (short) hi run give the
    numpy path's sorted order."""
    p = pairs.shape[0]
    keep = np.zeros(p, np.bool_)
    for k in range(p):
        a, b = pairs[k, 0], pairs[k, 1]
        d0 = x[a, 0] - x[b, 0]
        d1 = x[a, 1] - x[b, 1]
        d2 = x[a, 2] - x[b, 2]
        d = np.sqrt((d0 * d0 + d1 * d1) + d2 * d2)
        lo = min(a, b)
        if d <= (r[a] + r[b]) + skin and lo < n_owned:
            keep[k] = True
            start[lo + 1] += 1
    m = start.shape[0] - 1
    for i in range(m):
        start[i + 1] += start[i]
    fill = start[:m].copy()
    for k in range(p):
        if keep[k]:
            a, b = pairs[k, 0], pairs[k, 1]
            lo, hi = min(a, b), max(a, b)
            lo_out[fill[lo]] = lo
            hi_out[fill[lo]] = hi
            fill[lo] += 1
    for i in range(m):                  # each lo's run of hi values (distinct): sorted in place
        _sort_run(hi_out[start[i]:start[i + 1]], start[i + 1] - start[i])
    return start[m]


def use_cells(m):
    """True when :func:`cell_pairs` takes the search of m points: a compiled backend, and for the JIT at least
    ``MIN_POINTS`` points (:func:`numba_switch.use_compiled`)."""
    return use_compiled(m, MIN_POINTS)


def cell_grid(x, radius):
    """The cell grid of the points x (m, 3) for the search radius: (origin (3,), side h, dims (3,) int64), or
    None when the bounding box or the radius is not finite (the caller takes the tree).  Cells of side
    ``radius (1 + CELL_MARGIN)`` at least, widened (x 1.5 at a time) until there are at most
    ``MAX_CELLS_PER_POINT m + 64`` cells."""
    m = len(x)
    origin = x.min(axis=0)
    with np.errstate(over="ignore", invalid="ignore"):
        ext = x.max(axis=0) - origin
    if not (np.all(np.isfinite(ext)) and np.isfinite(radius)):
        return None
    limit = MAX_CELLS_PER_POINT * m + 64
    h = max(float(radius) * (1.0 + CELL_MARGIN), float(ext.max()) / limit, np.finfo(float).tiny)
    while True:
        dims = np.floor(ext / h) + 1.0
        if float(np.prod(dims)) <= limit:
            return np.ascontiguousarray(origin, dtype=float), h, dims.astype(np.int64)
        h *= 1.5


def cell_pairs(x, r, skin, radius, n_owned, screen=None):
    """Candidate pairs by the compiled cell list (module docstring): x (m, 3), r (m,), the tree's radius
    ``2 max(r) + skin`` -> (ia (k,), ib (k,)) int64, ia < ib, ordered by (ia, ib); None when the grid cannot be
    built (non-finite coordinates or radius).

    ``screen = (gid (m,), ax (3, m), rad (m,), half (m,), threshold)``: the owned, oriented, screened pairs of
    :func:`_cell_pairs` instead (ia = the lower gid; the order of the plain search with those filters applied)."""
    x = np.ascontiguousarray(x, dtype=float)
    grid = cell_grid(x, radius)
    if grid is None:
        return None
    origin, h, dims = grid
    r = np.ascontiguousarray(r, dtype=float)
    if screen is None:
        tag, gid, ax, rad, half, thr = "plain", _NO_INT, _NO_AXES, _NO_FLOAT, _NO_FLOAT, np.nan
    else:
        gid, ax, rad, half, thr = screen
        tag = "screened"
        gid = np.ascontiguousarray(gid, dtype=np.int64)
        ax = np.ascontiguousarray(ax, dtype=float)
        rad = np.ascontiguousarray(rad, dtype=float)
        half = np.ascontiguousarray(half, dtype=float)
        thr = float(thr)
    kern = _compiled()[0]
    cap = max(_CAPACITY.get(tag, 0), (8 if screen is None else 2) * len(x))
    while True:
        lo, hi = np.empty(cap, np.int64), np.empty(cap, np.int64)
        k = kern(x, r, float(skin), float(radius), int(n_owned), origin, h, dims, gid, ax, rad, half, thr, lo, hi)
        if k <= cap:
            break
        cap = k                         # rare: more pairs than the hint (then the search runs twice)
    _CAPACITY[tag] = k + k // 4
    if k < cap // 2:                    # do not hold twice the pairs' memory through the step
        return lo[:k].copy(), hi[:k].copy()
    return lo[:k], hi[:k]


def filter_sort(x, r, skin, n_owned, pairs):
    """Compiled filter and order of the tree pairs (see :func:`_filter_sort`): x (m, 3), r (m,), pairs (p, 2) ->
    (ia (k,), ib (k,)) int64, ia < ib, ordered by (ia, ib)."""
    pairs = np.ascontiguousarray(pairs, dtype=np.int64)
    m = len(x)
    lo, hi = np.empty(len(pairs), np.int64), np.empty(len(pairs), np.int64)
    k = _compiled()[1](np.ascontiguousarray(x, dtype=float), np.ascontiguousarray(r, dtype=float), float(skin),
                       int(n_owned), pairs, np.zeros(m + 1, np.int64), lo, hi)
    return lo[:k], hi[:k]
