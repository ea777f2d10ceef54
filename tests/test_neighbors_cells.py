"""The compiled cell list (contact/neighbors_jit.py ``cell_pairs``) gives the KD-tree path's candidate pairs
(contact/neighbors.py ``tree_pairs``) in the same order, bit for bit, on every compiled backend; the tree path
stays the fallback (no compiled kernels, non-finite boxes) and stays tested."""
import numpy as np
import pytest

from relcp_mpi.contact import neighbors as N
from relcp_mpi.contact import neighbors_jit as J


def _same(a, b):
    return all(u.dtype == v.dtype and np.array_equal(u, v) for u, v in zip(a, b))


def _check(x, r, skin, n_owned):
    x = np.ascontiguousarray(x, dtype=float)
    r = np.asarray(r, dtype=float)
    radius = 2 * float(r.max()) + skin
    got = J.cell_pairs(x, r, skin, radius, n_owned)
    ref = N.tree_pairs(x, r, skin, n_owned, radius)
    assert got is not None
    assert _same(got, ref), (len(got[0]), len(ref[0]))
    return len(ref[0])


def _clouds(rng):
    m = 3000
    yield "uniform", rng.uniform(0.0, 10.0, (m, 3)), rng.choice([0.25, 1.0], m)
    x = rng.normal(0.0, 1.5, (m, 3))                                   # clustered: crowded cells
    yield "clustered", x, rng.uniform(0.05, 0.3, m)
    # periodic-ghost-like: owned points in a box, ghosts = images of the points near the faces, shifted by L
    L = 8.0
    own = rng.uniform(0.0, L, (2000, 3))
    near = own[own[:, 0] < 1.5]
    ghosts = np.concatenate([near + [L, 0.0, 0.0], own[own[:, 1] > L - 1.5] - [0.0, L, 0.0]])
    yield "ghosts", np.concatenate([own, ghosts]), np.full(len(own) + len(ghosts), 0.4)
    x = rng.uniform(0.0, 4.0, (500, 3))
    x = np.concatenate([x, x, x[:50]])                                 # duplicated points
    yield "duplicates", x, np.full(len(x), 0.2)
    x = rng.uniform(-1.0, 1.0, (400, 3)) * 1e12                        # huge range: the grid is capped
    x[:20] = x[20:40] + 1e-3
    yield "huge_range", x, np.full(len(x), 1e-2)
    x = rng.uniform(0.0, 1.0, (300, 3)) + 1e15                         # large offset, coarse rounding
    yield "offset", x, np.full(len(x), 0.05)
    x = np.zeros((200, 3))
    x[:, 0] = np.arange(200) * 0.5                                     # a line of points exactly 2 r + skin apart
    yield "at_bound", x, np.full(200, 0.2)
    yield "zero_radius", np.repeat(rng.uniform(0, 1, (100, 3)), 2, axis=0), np.zeros(200)


@pytest.mark.parametrize("skin", [0.0, 0.1])
def test_cell_pairs_are_tree_pairs(compiled_backend, skin):
    rng = np.random.default_rng(11)
    found = 0
    for name, x, r in _clouds(rng):
        m = len(x)
        for n_owned in (m, m // 2, 1, 0):
            found += _check(x, r, skin, n_owned)
    assert found > 10000


def test_cell_pairs_small_sets(compiled_backend):
    rng = np.random.default_rng(12)
    for m in (2, 3, 5, 17):
        x = rng.uniform(0.0, 1.0, (m, 3))
        r = rng.uniform(0.0, 0.3, m)
        for n_owned in (m, 1, 0):
            _check(x, r, 0.05, n_owned)
    _check(np.zeros((2, 3)), np.zeros(2), 0.0, 2)                     # one cell, zero radius
    _check(np.array([[0.0, 0, 0], [1e150, 0, 0]]), np.ones(2), 0.0, 2)


def test_cell_grid_is_capped_and_falls_back():
    x = np.random.default_rng(13).uniform(-1e12, 1e12, (1000, 3))
    origin, h, dims = J.cell_grid(x, 1e-3)
    assert h >= 1e-3 and np.prod(dims) <= J.MAX_CELLS_PER_POINT * 1000 + 64
    assert J.cell_grid(np.array([[-1e308, 0, 0], [1e308, 0, 0]]), 1.0) is None      # extent overflows
    assert J.cell_grid(np.array([[0.0, 0, 0], [np.nan, 0, 0]]), 1.0) is None
    assert J.cell_grid(np.zeros((3, 3)), np.inf) is None


def test_candidate_pairs_dispatch(compiled_backend, monkeypatch):
    """candidate_pairs takes the cell list with the compiled kernels (the AOT build always, the JIT from
    MIN_POINTS points), the tree without them or when the box is not finite; same pairs either way."""
    rng = np.random.default_rng(14)
    m = max(J.MIN_POINTS, 2000)
    x, r = rng.uniform(0.0, 10.0, (m, 3)), rng.choice([0.25, 1.0], m)
    calls = []
    real = J.cell_pairs
    monkeypatch.setattr(J, "cell_pairs", lambda *a: calls.append(1) or real(*a))
    got = N.candidate_pairs(x, r, 0.1, n_owned=m - 100)
    assert calls == [1]
    monkeypatch.setenv("RELCP_NUMBA", "0")
    ref = N.candidate_pairs(x, r, 0.1, n_owned=m - 100)
    assert calls == [1] and _same(got, ref) and len(ref[0]) > 1000
    monkeypatch.setenv("RELCP_NUMBA", "1")
    monkeypatch.setattr(J, "cell_grid", lambda *a: None)                 # a box the grid cannot hold ...
    tree = []
    real_tree = N.tree_pairs
    monkeypatch.setattr(N, "tree_pairs", lambda *a: tree.append(1) or real_tree(*a))
    assert _same(N.candidate_pairs(x, r, 0.1, n_owned=m - 100), ref) and tree == [1]     # ... takes the tree


def test_tree_path_brute_force(monkeypatch):
    """The fallback (no compiled kernels): the tree path against a brute-force search."""
    monkeypatch.setenv("RELCP_NUMBA", "0")
    rng = np.random.default_rng(15)
    x, r = rng.uniform(0.0, 5.0, (400, 3)), rng.uniform(0.1, 0.4, 400)
    d = np.linalg.norm(x[:, None] - x[None], axis=2)
    ia, ib = np.nonzero(np.triu(d <= r[:, None] + r[None] + 0.05, 1) & (np.arange(400)[:, None] < 300))
    got = N.candidate_pairs(x, r, 0.05, n_owned=300)
    assert _same(got, (ia.astype(np.int64), ib.astype(np.int64)))


def _rod_set(rng, n_owned, L=8.0):
    """Spheres and spherocylinders in a periodic-like box with image ghosts (same gid, shifted), random axes."""
    from relcp_mpi.basics import quaternion
    from relcp_mpi.bodies.shapes import SPHERE, SPHEROCYLINDER
    own = rng.uniform(0.0, L, (n_owned, 3))
    near = np.flatnonzero(own[:, 0] < 2.0)
    x = np.concatenate([own, own[near] + [L, 0.0, 0.0]])
    gid = np.concatenate([rng.permutation(n_owned), np.zeros(0, np.int64)])
    gid = np.concatenate([gid, gid[near]]).astype(np.int64)
    m = len(x)
    kind = np.where(rng.random(m) < 0.8, SPHEROCYLINDER, SPHERE)
    kind[n_owned:] = kind[near]
    shape = np.zeros((m, 3))
    shape[:, 0] = rng.uniform(0.1, 0.3, m)
    shape[:, 1] = np.where(kind == SPHEROCYLINDER, rng.uniform(0.2, 1.5, m), 0.0)
    shape[n_owned:] = shape[near]
    q = rng.normal(size=(m, 4))
    q /= np.linalg.norm(q, axis=1)[:, None]
    q[n_owned:] = q[near]
    R = quaternion.to_matrix(q)
    bound = shape[:, 0] + 0.5 * shape[:, 1]
    return x, gid, kind, shape, R, bound


@pytest.mark.parametrize("threshold", [0.0, 0.15, 1.0])
def test_screened_search_is_the_stepper_filters(compiled_backend, monkeypatch, threshold):
    """The cell list's fused level-0 filters (neighbors.screened_candidate_pairs) give exactly the pairs of the
    unfused pipeline: candidate_pairs, the ownership rule and orientation (stepper.relcp._own_pairs), then the
    support-function screen (support.pair_lower_bound <= threshold), in the same order."""
    from relcp_mpi.bodies.shapes import SPHEROCYLINDER
    from relcp_mpi.geometry.support import pair_lower_bound
    from relcp_mpi.stepper.relcp import _own_pairs

    class Inp:
        pass
    monkeypatch.setattr(J, "MIN_POINTS", 0)         # the JIT cell list on the small sets too
    rng = np.random.default_rng(int(threshold * 100) + 5)
    skin = 0.15
    total = 0
    for n_owned in (1500, 40, 2):
        x, gid, kind, shape, R, bound = _rod_set(rng, n_owned)
        inp = Inp()
        inp.n_owned, inp.gid = n_owned, gid
        ia, ib = N.candidate_pairs(x, bound, skin, n_owned=n_owned)
        ia, ib = _own_pairs(inp, ia, ib)
        keep = pair_lower_bound(kind, shape, x, R, ia, ib) <= threshold
        ref = (ia[keep], ib[keep])
        half = np.where(kind == SPHEROCYLINDER, 0.5 * shape[:, 1], 0.0)
        got = N.screened_candidate_pairs(x, bound, skin, n_owned, (gid, R[:, :, 2].T, shape[:, 0], half, threshold))
        assert got is not None and _same(got, ref), (len(got[0]), len(ref[0]))
        if n_owned == 1500:                           # the screen removes pairs, and not all of them
            assert 0 < len(ref[0]) < len(ia)
        total += len(ref[0])
    assert total > 1000
