"""Candidate contact pairs from bounding spheres (a compiled cell list, else a KD-tree; no O(n^2)).

A pair (a, b) is a candidate when |x_a - x_b| <= r_a + r_b + skin, with r the bounding radius.
Periodic images are handled by the ghost layer (ghosts carry image-shifted positions), so the search here
is a plain Euclidean one over owned + ghost bodies.

Two searches, the same pairs in the same order (contact/neighbors_jit.py, tests/test_neighbors_cells.py): the
compiled cell list (``neighbors_jit.cell_pairs``) when the compiled kernels are available, else scipy's
``cKDTree``, imported only then (``scipy.spatial`` costs ~16 MiB per rank).
"""
import numpy as np

from relcp_mpi.contact import neighbors_jit


def candidate_pairs(x, r, skin, n_owned=None):
    """Candidate pairs among points x (m, 3) with bounding radii r (m,).

    Only pairs with at least one index < n_owned are returned (ghost-ghost pairs belong to other ranks).
    Returns int64 arrays (ia, ib) with ia < ib.
    """
    x = np.asarray(x, dtype=float).reshape(-1, 3)
    r = np.asarray(r, dtype=float)
    m = len(x)
    if n_owned is None:
        n_owned = m
    if m < 2 or n_owned == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    radius = 2 * float(r.max()) + skin
    if neighbors_jit.use_cells(m):
        pairs = neighbors_jit.cell_pairs(x, r, skin, radius, n_owned)
        if pairs is not None:
            return pairs
    return tree_pairs(x, r, skin, n_owned, radius)


def screened_candidate_pairs(x, r, skin, n_owned, screen):
    """:func:`candidate_pairs` followed, in the search's own pass, by the stepper's level-0 filters of a set of
    spheres and spherocylinders (``neighbors_jit._cell_pairs``): the pairs this rank owns, oriented lower gid
    first, whose support-function lower bound is at most the threshold.  ``screen = (gid (m,), ax (3, m),
    rad (m,), half (m,), threshold)``.  Returns (ia, ib) int64, or None when the compiled cell list cannot take
    the search (the caller filters :func:`candidate_pairs` itself)."""
    x = np.asarray(x, dtype=float).reshape(-1, 3)
    r = np.asarray(r, dtype=float)
    m = len(x)
    if m < 2 or n_owned == 0 or not neighbors_jit.use_cells(m):
        return None
    return neighbors_jit.cell_pairs(x, r, skin, 2 * float(r.max()) + skin, n_owned, screen=screen)


def tree_pairs(x, r, skin, n_owned, radius):
    """:func:`candidate_pairs` by scipy's KD-tree (the path without compiled kernels): x (m, 3) float, r (m,)
    float, m >= 2, ``radius = 2 max(r) + skin`` -> (ia, ib) int64, ia < ib, ordered by (ia, ib)."""
    from scipy.spatial import cKDTree      # here: a run with the compiled cell list never loads scipy.spatial
    m = len(x)
    # sliding-midpoint splits without node compaction: a much cheaper build and a no slower query for the
    # near-uniform body clouds here (the pair set is the same: every pair within the radius)
    tree = cKDTree(x, balanced_tree=False, compact_nodes=False)
    pairs = tree.query_pairs(radius, output_type="ndarray")
    if len(pairs) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if len(pairs) >= neighbors_jit.MIN_ROWS and neighbors_jit.enabled():
        return neighbors_jit.filter_sort(x, r, skin, n_owned, pairs)      # compiled twin of the rest, same pairs
    ia, ib = pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
    d = pair_distance(x, ia, ib)
    keep = (d <= r[ia] + r[ib] + skin) & (np.minimum(ia, ib) < n_owned)
    ia, ib = ia[keep], ib[keep]
    # sorted by (lo, hi): one sort of int64 keys lo * m + hi (cheaper than a two-key lexsort)
    key = np.sort(np.minimum(ia, ib) * m + np.maximum(ia, ib))
    return key // m, key % m


def pair_distance(x, ia, ib):
    """|x[ia] - x[ib]| (k,), bit for bit np.linalg.norm(x[ia] - x[ib], axis=1) ((s0 + s1) + s2), computed on
    contiguous coordinate columns (gathers and a sum of three squares instead of a strided reduction)."""
    d2 = None
    for k in range(3):
        c = np.ascontiguousarray(x[:, k])
        dk = c[ia] - c[ib]
        dk *= dk
        d2 = dk if d2 is None else d2 + dk
    return np.sqrt(d2)


def wall_candidates(x, r, skin, wall_points, wall_normals):
    """Body-wall candidates: (body index (k,), wall index (k,)) with n.(x - p) <= r + skin."""
    x = np.asarray(x, dtype=float).reshape(-1, 3)
    W = len(wall_points)
    if W == 0 or len(x) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    P = np.asarray(wall_points, dtype=float).reshape(W, 3)
    N = np.asarray(wall_normals, dtype=float).reshape(W, 3)
    h = np.einsum("wk,nk->nw", N, x) - np.einsum("wk,wk->w", N, P)[None, :]
    ib, iw = np.nonzero(h <= (np.asarray(r)[:, None] + skin))
    return ib.astype(np.int64), iw.astype(np.int64)
