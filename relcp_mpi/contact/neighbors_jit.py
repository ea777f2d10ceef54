"""Compiled (numba) twin of the part of :func:`relcp_mpi.contact.neighbors.candidate_pairs` after the KD-tree:
the exact bounding-sphere filter of the tree's pairs and their (lo, hi) order.

Optional (geometry/numba_switch.py): used for at least ``MIN_ROWS`` tree pairs when a build of it is available
(the ahead-of-time module of geometry/aot_build.py, else numba's JIT) and ``RELCP_NUMBA`` is not ``0``.  The same pairs in the same order as the numpy path:

* the filter evaluates, per pair, the numpy path's operations in its order (``pair_distance``: the squares of
  the coordinate differences summed ``(s0 + s1) + s2``, then ``sqrt``; ``d <= (r_a + r_b) + skin``;
  ``min(a, b) < n_owned``), so it keeps the same pairs;
* the numpy path sorts the int64 keys ``lo m + hi``; the pairs are distinct, so the sorted order is unique and
  a counting sort by ``lo`` followed by an insertion sort of each (short) ``hi`` run gives it too, in O(pairs)
  instead of a comparison sort of all keys, and without the key, mask and gather temporaries.

The KD-tree query itself stays (scipy, compiled): replacing it by a cell list would decide pairs at the tree's
radius with other rounding than the tree's own distance test (``docs/BENCHMARKS.md``, "Compiled rod kernels").
"""
import numpy as np

from relcp_mpi.geometry.numba_switch import AVAILABLE, compiled_entries, enabled  # noqa: F401 (re-exported)

MIN_ROWS = 4096         # the tree of a small body set finds few pairs: numpy is as fast, numba costs ~1 s to import


_JIT_NAMES = _ENTRIES = ("_filter_sort",)
AOT_SIGNATURES = {      # the entry point's types for the AOT build (geometry/aot_build.py)
    "_filter_sort": "i8(f8[:, ::1], f8[::1], f8, i8, i8[:, ::1], i8[::1], i8[::1], i8[::1])",
}


def _compiled():
    return compiled_entries(globals(), _JIT_NAMES, _ENTRIES)[0]


def _filter_sort(x, r, skin, n_owned, pairs, start, lo_out, hi_out):
    """Kept pairs of the tree's ``pairs`` (p, 2) into lo_out / hi_out ordered by (lo, hi); ``start`` (m + 1,)
    zeros on entry (bucket offsets).  Returns the number of kept pairs."""
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
    for i in range(m):                  # each run of hi values: insertion sort (runs are ~10 long)
        for k in range(start[i] + 1, start[i + 1]):
            v = hi_out[k]
            q = k - 1
            while q >= start[i] and hi_out[q] > v:
                hi_out[q + 1] = hi_out[q]
                q -= 1
            hi_out[q + 1] = v
    return start[m]


def filter_sort(x, r, skin, n_owned, pairs):
    """Compiled filter and order of the tree pairs (see module docstring): x (m, 3), r (m,), pairs (p, 2) ->
    (ia (k,), ib (k,)) int64, ia < ib, ordered by (ia, ib)."""
    pairs = np.ascontiguousarray(pairs, dtype=np.int64)
    m = len(x)
    lo, hi = np.empty(len(pairs), np.int64), np.empty(len(pairs), np.int64)
    k = _compiled()(np.ascontiguousarray(x, dtype=float), np.ascontiguousarray(r, dtype=float), float(skin),
                    int(n_owned), pairs, np.zeros(m + 1, np.int64), lo, hi)
    return lo[:k], hi[:k]
