"""The compiled spherocylinder kernels (geometry/spherocylinder_jit.py) give the same bits as the numpy kernels.

Random batches of rod (and point-core) pairs with the degenerate cases of the segment kernel: parallel and
anti-parallel cores side by side, collinear cores, coincident centres of parallel cores, crossing cores,
zero-length cores, touching end points.  Every output is compared byte for byte (signed zeros included), for both
memory layouts of the axes (the sum order of numpy's row dot products depends on it).  Every test runs for each
build of the compiled kernels (the ``compiled_backend`` fixture: the AOT extension module and numba's JIT), and
is skipped only for a build that is not available here (no AOT build, no numba, RELCP_NUMBA=0 at start).
"""
import numpy as np
import pytest

from relcp_mpi.basics import quaternion as Q
from relcp_mpi.bodies.shapes import SPHEROCYLINDER
from relcp_mpi.contact.line_contacts import rod_pair_end_rows
from relcp_mpi.contact.neighbors import candidate_pairs, tree_pairs
from relcp_mpi.geometry import spherocylinder_jit as J
from relcp_mpi.geometry.contact import pair_snsd, pair_snsd_indexed
from relcp_mpi.geometry.spherocylinder import capsule_capsule

pytestmark = pytest.mark.skipif(not J.AVAILABLE, reason="no compiled kernels or RELCP_NUMBA=0 at start")


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _unit_q(rng, m):
    q = rng.normal(size=(m, 4))
    return q / np.linalg.norm(q, axis=1)[:, None]


def _degenerate_pairs(rng, m):
    """(c1, M1, h1, r1, c2, M2, h2, r2): m random pairs, blocks of them degenerate."""
    M1, M2 = Q.to_matrix(_unit_q(rng, m)), Q.to_matrix(_unit_q(rng, m))
    c1, c2 = rng.uniform(0.0, 3.0, (m, 3)), rng.uniform(0.0, 3.0, (m, 3))
    h1, h2 = rng.choice([0.0, 0.75, 1.0], m), rng.choice([0.0, 0.5, 0.75], m)
    r1, r2 = np.full(m, 0.25), rng.uniform(0.1, 0.3, m)
    b = m // 10
    M2[:2 * b] = M1[:2 * b]                                              # parallel ...
    c2[:b] = c1[:b]                                                      # ... with coincident centres
    c2[b:2 * b] = c1[b:2 * b] + 0.5 * M1[b:2 * b, :, 0]                  # ... side by side
    c2[2 * b:3 * b] = c1[2 * b:3 * b]                                    # crossing at the centres
    M2[3 * b:4 * b, :, 2] = -M1[3 * b:4 * b, :, 2]                       # anti-parallel
    c2[4 * b:5 * b] = c1[4 * b:5 * b] + 1.2 * M1[4 * b:5 * b, :, 2]      # collinear ...
    M2[4 * b:5 * b] = M1[4 * b:5 * b]
    h1[5 * b:6 * b] = 0.0                                                # point cores on both sides
    h2[5 * b:6 * b] = 0.0
    c2[5 * b:5 * b + 10] = c1[5 * b:5 * b + 10]                          # coincident points
    c2[6 * b:7 * b] = c1[6 * b:7 * b] + (h1[6 * b:7 * b, None] + 0.5) * M1[6 * b:7 * b, :, 2]  # end on axis
    # crossing cores at an interior point: c2 on the core of 1, axes not parallel
    c2[7 * b:8 * b] = c1[7 * b:8 * b] + 0.3 * M1[7 * b:8 * b, :, 2] - 0.2 * M2[7 * b:8 * b, :, 2]
    h1[7 * b:8 * b], h2[7 * b:8 * b] = 0.75, 0.75
    return c1, M1, h1, r1, c2, M2, h2, r2


@pytest.mark.parametrize("layout", ["strided", "contiguous", "mixed"])
@pytest.mark.parametrize("m", [1, 7, 300, 5000])
def test_capsule_capsule_jit_is_numpy(compiled_backend, monkeypatch, layout, m):
    rng = np.random.default_rng(m)
    c1, M1, h1, r1, c2, M2, h2, r2 = _degenerate_pairs(rng, m)
    a1 = M1[:, :, 2] if layout != "contiguous" else np.ascontiguousarray(M1[:, :, 2])
    a2 = M2[:, :, 2] if layout == "strided" else np.ascontiguousarray(M2[:, :, 2])
    got = J.capsule_capsule(c1, a1, h1, r1, c2, a2, h2, r2)
    monkeypatch.setenv("RELCP_NUMBA", "0")
    assert not J.enabled()
    ref = capsule_capsule(c1, a1, h1, r1, c2, a2, h2, r2)
    for g, r in zip(got, ref):
        assert _same_bits(g, r)
    # the degenerate blocks really are degenerate: unit normals, and the crossing cores meet (sep = -R1 - R2)
    assert np.allclose(np.linalg.norm(ref[1], axis=1), 1.0)
    if m >= 300:
        b = slice(7 * (m // 10), 8 * (m // 10))
        assert np.allclose(ref[0][b], -(r1 + r2)[b], rtol=0.0, atol=1e-12)


def test_capsule_capsule_dispatch(compiled_backend, monkeypatch):
    """Batches of MIN_ROWS pairs and more take the compiled kernel unless RELCP_NUMBA=0."""
    rng = np.random.default_rng(1)
    m = J.MIN_ROWS
    c1, M1, h1, r1, c2, M2, h2, r2 = _degenerate_pairs(rng, m)
    calls = []
    real = J.capsule_capsule
    monkeypatch.setattr(J, "capsule_capsule", lambda *a: calls.append(1) or real(*a))
    got = capsule_capsule(c1, M1[:, :, 2], h1, r1, c2, M2[:, :, 2], h2, r2)
    assert calls == [1]
    monkeypatch.setenv("RELCP_NUMBA", "0")
    ref = capsule_capsule(c1, M1[:, :, 2], h1, r1, c2, M2[:, :, 2], h2, r2)
    assert calls == [1]
    assert all(_same_bits(g, r) for g, r in zip(got, ref))


def _rod_bed(rng, m):
    """A random rod bed with parallel neighbours, crossing rods and zero-length cores."""
    kind = np.full(m, SPHEROCYLINDER)
    shape = np.column_stack([np.full(m, 0.25), rng.choice([0.0, 1.5], m, p=[0.1, 0.9]), np.zeros(m)])
    X = rng.uniform(0.0, 7.0, (m, 3))
    q = _unit_q(rng, m)
    X[1], q[1] = X[0] + [0.5, 0.0, 0.0], q[0]                           # parallel neighbours
    X[3], q[3] = X[2], q[2]                                             # coincident
    X[5] = X[4]                                                         # crossing at the centres
    X[7] = X[6] + 0.3 * Q.to_matrix(q[6:7])[0, :, 2]                    # crossing off centre
    return kind, shape, X, q


def test_pair_snsd_indexed_jit_is_pair_snsd(compiled_backend, monkeypatch):
    rng = np.random.default_rng(2)
    kind, shape, X, q = _rod_bed(rng, 1500)
    R = Q.to_matrix(q)
    ia, ib = candidate_pairs(X, 0.25 + 0.5 * shape[:, 1], 0.3)
    assert len(ia) >= J.MIN_ROWS
    ia, ib = np.concatenate([ia, [0, 2, 4, 6]]), np.concatenate([ib, [1, 3, 5, 7]])
    got = pair_snsd_indexed(kind, shape, X, q, ia, ib, R=R)
    ref = pair_snsd(kind[ia], shape[ia], X[ia], q[ia], kind[ib], shape[ib], X[ib], q[ib], R_i=R[ia], R_j=R[ib])
    monkeypatch.setenv("RELCP_NUMBA", "0")
    ref0 = pair_snsd(kind[ia], shape[ia], X[ia], q[ia], kind[ib], shape[ib], X[ib], q[ib], R_i=R[ia], R_j=R[ib])
    for f in ("sep", "normal", "p_i", "p_j", "converged"):
        assert _same_bits(getattr(got, f), getattr(ref, f))
        assert _same_bits(getattr(got, f), getattr(ref0, f))


@pytest.mark.parametrize("skin", [0.15, 0.6])
def test_rod_end_rows_jit_is_numpy(compiled_backend, monkeypatch, skin):
    rng = np.random.default_rng(3)
    kind, shape, X, q = _rod_bed(rng, 1500)
    R = Q.to_matrix(q)
    ia, ib = candidate_pairs(X, 0.25 + 0.5 * shape[:, 1], skin)
    assert len(ia) >= J.MIN_ROWS                                         # the compiled path is taken
    ia, ib = np.concatenate([ia, [0, 2, 4, 6]]), np.concatenate([ib, [1, 3, 5, 7]])
    geo = pair_snsd(kind[ia], shape[ia], X[ia], q[ia], kind[ib], shape[ib], X[ib], q[ib])
    for rot in (R, None):
        got = rod_pair_end_rows(kind, shape, X, q, ia, ib, geo, skin, R=rot)
        with monkeypatch.context() as mp:
            mp.setenv("RELCP_NUMBA", "0")
            ref = rod_pair_end_rows(kind, shape, X, q, ia, ib, geo, skin, R=rot)
        assert len(ref[0]) > 100 and set(ref[1].tolist()) == {1, 2, 3, 4}
        assert _same_bits(got[0], ref[0]) and _same_bits(got[1], ref[1])
        for f in ("sep", "normal", "p_i", "p_j", "converged"):
            assert _same_bits(getattr(got[2], f), getattr(ref[2], f))


@pytest.mark.parametrize("n_owned", [None, 2500])
def test_candidate_pairs_jit_is_numpy(compiled_backend, monkeypatch, n_owned):
    """The compiled filter and order of the KD-tree pairs (contact/neighbors_jit.py; the tree path, the fallback
    of the cell list) keep the same pairs in the same order: mixed radii, duplicate points, pairs exactly at the bound, ghosts (n_owned)."""
    from relcp_mpi.contact import neighbors_jit
    rng = np.random.default_rng(4)
    m = 4000
    x = rng.uniform(0.0, 12.0, (m, 3))
    r = rng.choice([0.25, 1.0], m)
    x[1] = x[0]                                                          # coincident centres
    x[3] = x[2] + [r[2] + r[3] + 0.1, 0.0, 0.0]                          # at the bound (up to rounding)
    x[5] = x[4] + [0.0, 0.0, 2.1]
    r[4] = r[5] = 1.0
    calls = []
    real = neighbors_jit.filter_sort
    monkeypatch.setattr(neighbors_jit, "filter_sort", lambda *a: calls.append(1) or real(*a))
    radius = 2 * float(r.max()) + 0.1
    no = m if n_owned is None else n_owned
    got = tree_pairs(x, r, 0.1, no, radius)                              # the tree path (the fallback)
    assert calls == [1]                                                  # the compiled path was taken
    assert _same_bits(got[0], candidate_pairs(x, r, 0.1, n_owned=n_owned)[0])     # the cell list: same pairs
    monkeypatch.setenv("RELCP_NUMBA", "0")
    ref = tree_pairs(x, r, 0.1, no, radius)
    assert calls == [1] and len(ref[0]) > neighbors_jit.MIN_ROWS
    assert _same_bits(got[0], ref[0]) and _same_bits(got[1], ref[1])


@pytest.mark.parametrize("spheres", [False, True])
def test_pair_lower_bound_jit_is_numpy(compiled_backend, monkeypatch, spheres):
    """The compiled support-function screen of sphere/rod sets equals the numpy one bit for bit, unhinted and
    hinted (NaN and zero hints, hints along and against the centre line), coincident centres included."""
    from relcp_mpi.bodies.shapes import SPHERE
    from relcp_mpi.geometry.support import pair_lower_bound
    rng = np.random.default_rng(6)
    kind, shape, X, q = _rod_bed(rng, 1500)
    if spheres:
        kind[::3] = SPHERE
        shape[::3, 1] = 0.0
    R = Q.to_matrix(q)
    ia, ib = rng.integers(0, 1500, 6000), rng.integers(0, 1500, 6000)
    ia[:4], ib[:4] = [0, 2, 4, 6], [1, 3, 5, 7]
    ib[4:8] = ia[4:8]                                                    # coincident centres
    hint = rng.normal(size=(6000, 3))
    hint[::5] = np.nan
    hint[1::7] = 0.0
    hint[2::9] = X[ia[2::9]] - X[ib[2::9]]                               # along the centre line
    for h in (None, hint, hint[::-1]):                                   # (reversed: a strided hint)
        got = pair_lower_bound(kind, shape, X, R, ia, ib, hint=h)
        with monkeypatch.context() as mp:
            mp.setenv("RELCP_NUMBA", "0")
            ref = pair_lower_bound(kind, shape, X, R, ia, ib, hint=h)
        assert np.isneginf(ref[4:8]).all() == (h is None)
        assert _same_bits(got, ref)
