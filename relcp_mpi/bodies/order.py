"""Local order of a rank's bodies in memory: by a space-filling curve, so that bodies close in space are close
in the arrays.

Why: the columns of D (6 per body) and every per-body vector of the contact solve are indexed in the owned
bodies' order.  Bodies arrive in id order, which is spatial order for a lattice-built deck but not for a
colony (daughters are appended: two sisters are ``n`` apart) nor for a deck of randomly placed bodies.  A row
of D then reads body vectors at random places, and the contact operator's one-pass product, the geometry and
the neighbour search all miss the cache more.  Sorting the bodies along a Morton (Z-order) curve is cheap
(one sort of n 63-bit keys per step) and depends only on the positions and ids, so a restarted run orders
its bodies exactly as the uninterrupted run does.
"""
import numpy as np

__all__ = ["morton_keys", "spatial_order"]

_BITS = 21                      # bits per axis: 3 x 21 = 63 bits, one uint64 key per body


def _spread3(v):
    """Insert two zero bits between the low 21 bits of each uint64 of ``v`` (bit k -> bit 3k)."""
    v = v & np.uint64(0x1FFFFF)
    v = (v | (v << np.uint64(32))) & np.uint64(0x1F00000000FFFF)
    v = (v | (v << np.uint64(16))) & np.uint64(0x1F0000FF0000FF)
    v = (v | (v << np.uint64(8))) & np.uint64(0x100F00F00F00F00F)
    v = (v | (v << np.uint64(4))) & np.uint64(0x10C30C30C30C30C3)
    v = (v | (v << np.uint64(2))) & np.uint64(0x1249249249249249)
    return v


def morton_keys(x):
    """(n,) uint64 Morton keys of the points ``x`` (n, 3) [L].

    The points are quantized on a cubic grid of 2**21 cells per axis spanning their own bounding box (the same
    cell size on every axis, so the curve's locality is isotropic: a flat colony gets few z bits).  Non-finite
    coordinates are not expected (migration rejects them) and get key 0.
    """
    x = np.asarray(x, dtype=np.float64).reshape(-1, 3)
    if len(x) == 0:
        return np.zeros(0, dtype=np.uint64)
    lo = x.min(axis=0)
    span = float(np.max(x.max(axis=0) - lo))
    scale = (2 ** _BITS - 1) / span if span > 0 and np.isfinite(span) else 0.0
    c = np.nan_to_num((x - lo) * scale, nan=0.0, posinf=0.0, neginf=0.0)
    c = np.clip(c, 0, 2 ** _BITS - 1).astype(np.uint64)
    return _spread3(c[:, 0]) | (_spread3(c[:, 1]) << np.uint64(1)) | (_spread3(c[:, 2]) << np.uint64(2))


def spatial_order(x, gid):
    """(n,) permutation that sorts bodies at ``x`` (n, 3) [L] with ids ``gid`` (n,) along the Morton curve;
    ties (bodies in the same grid cell) by id, so the order depends on the set of bodies, not on how they are
    listed."""
    gid = np.asarray(gid)
    if len(gid) == 0:
        return np.zeros(0, dtype=np.int64)
    keys = morton_keys(x)
    # with 2**21 cells per axis two bodies rarely share a cell: sort the keys alone and take the two-key sort
    # only when a tie needs the ids (the same permutation either way: distinct keys order it completely)
    order = np.argsort(keys)
    ks = keys[order]
    if np.any(ks[1:] == ks[:-1]):
        return np.lexsort((gid, keys))
    return order
