"""The fast paths of the step's kernels give the same bits as the straightforward constructions they replace.

Each test builds an independent reference with the plain numpy expression the fast path stands for (strided
norms, structured-key sorts, a lexsort + bincount CSR, per-pair support functions, every end-point row through
the segment kernel, np.unique + np.add.at) on random data with the degenerate cases (duplicates, -0.0, coincident
centres, NaN hints, parallel and point cores) and demands exact equality: the peer-case speed-ups of
docs/BENCHMARKS.md ("Step kernels") change no result of a run.
"""
import numpy as np
import pytest

from relcp_mpi.basics import quaternion as Q
from relcp_mpi.basics.rows import norm_rows
from relcp_mpi.bodies.shapes import ELLIPSOID, RING, SPHERE, SPHEROCYLINDER
from relcp_mpi.contact.constraints import ConstraintTable, _halves, _owned_csr, lookup_keys
from relcp_mpi.contact.line_contacts import rod_pair_end_rows
from relcp_mpi.contact.neighbors import candidate_pairs
from relcp_mpi.geometry.contact import ContactGeometry, pair_snsd
from relcp_mpi.geometry.spherocylinder import capsule_capsule
from relcp_mpi.geometry.support import pair_lower_bound, separation_lower_bound


def _unit_q(rng, m):
    q = rng.normal(size=(m, 4))
    return q / np.linalg.norm(q, axis=1)[:, None]


@pytest.mark.parametrize("m", [0, 1, 7, 1000, 30001])
def test_norm_rows_is_numpy_norm(m):
    rng = np.random.default_rng(m)
    v = rng.normal(size=(m, 3)) * 10.0 ** rng.uniform(-150, 150, (m, 1))
    v[::5] = 0.0
    for arr in (v, rng.normal(size=(m, 4))[:, 1:], rng.normal(size=(m, 3, 3))[:, :, 2]):   # contiguous, strided
        assert np.array_equal(norm_rows(arr), np.linalg.norm(arr, axis=1))


def _structured(a, b, k):
    out = np.empty(len(a), dtype=[("gid_i", np.int64), ("gid_j", np.int64), ("sub", np.int64)])
    out["gid_i"], out["gid_j"], out["sub"] = a, b, k
    return out


def test_lookup_keys_packed_equals_structured_search():
    rng = np.random.default_rng(1)
    for n, hi in ((0, 5), (1, 5), (50, 4), (5000, 3000)):
        table = _structured(rng.integers(0, hi, n), rng.integers(-3, hi, n), rng.integers(0, 6, n))  # duplicates
        keys = np.concatenate([table[: n // 2], _structured(rng.integers(0, hi, n), rng.integers(-3, hi, n),
                                                            rng.integers(0, 9, n))])
        ref = np.full(len(keys), -1, np.int64)
        if len(keys) and len(table):
            order = np.argsort(table, kind="stable")
            sk = table[order]
            pos = np.minimum(np.searchsorted(sk, keys), len(sk) - 1)
            hit = sk[pos] == keys
            ref[hit] = order[pos[hit]]
        assert np.array_equal(lookup_keys(keys, table), ref)
    # codes that would not fit into 62 bits fall back to the structured search
    big = _structured(np.array([0, 2 ** 40]), np.array([0, 2 ** 40]), np.array([0, 1]))
    assert lookup_keys(big[::-1], big).tolist() == [1, 0]


def test_owned_csr_equals_triplet_lexsort_bincount():
    """D's CSR from the rows' 6-vectors is bit for bit the former construction from (row, col, value) triplets
    (lexsort, duplicates summed in input order, -0.0 -> 0.0), walls and a body paired with its own image
    (two 6-vectors at one (body, column)) included."""
    rng = np.random.default_rng(2)
    c, nb, m = 3000, 100, 130
    body_row = np.concatenate([np.arange(nb), rng.integers(0, nb, m - nb)])   # ghosts: images of owned bodies
    t = ConstraintTable()
    ia = rng.integers(0, nb, c)
    ib = rng.integers(0, m, c)
    ib[rng.random(c) < 0.1] = -1                                           # walls
    normal = rng.normal(size=(c, 3))
    normal[::9] = [0.0, 0.0, -1.0]                                         # signed zeros in D
    t.append(ia=ia, ib=ib, gid_i=ia, gid_j=ib, sub=np.zeros(c), normal=normal, r_i=rng.normal(size=(c, 3)),
             r_j=rng.normal(size=(c, 3)), gap_free=np.zeros(c), sep0=np.zeros(c))
    assert np.any((ib >= 0) & (body_row[np.maximum(ib, 0)] == body_row[ia]))     # a repeated (body, column)
    off = 17
    # the former triplets: per constraint the six rows of body i, then the six of body j (not for walls)
    Gi = np.concatenate([normal, np.cross(t.r_i, normal)], axis=1)                  # [n, r_i x n]
    Gj = -np.concatenate([normal, np.cross(t.r_j, normal)], axis=1)                 # -[n, r_j x n]
    R = np.concatenate([6 * body_row[ia][:, None] + np.arange(6), 6 * body_row[np.maximum(ib, 0)][:, None]
                        + np.arange(6)], axis=1)
    V = np.concatenate([Gi, Gj], axis=1)
    C = np.repeat(off + np.arange(c), 12).reshape(c, 12)
    keep = np.ones((c, 12), bool)
    keep[ib < 0, 6:] = False
    R, C, V = R[keep], C[keep], V[keep] + 0.0
    order = np.lexsort((C, R))
    r, cc, v = R[order], C[order], V[order]
    first = np.ones(len(r), bool)
    first[1:] = (r[1:] != r[:-1]) | (cc[1:] != cc[:-1])
    v = np.bincount(np.cumsum(first) - 1, weights=v)
    r, cc = r[first], cc[first]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=6 * nb))])
    body, col, component = _halves(t, body_row, off)
    got = _owned_csr(body * (off + c) + col, component, nb, off + c)
    assert np.array_equal(got[0], indptr) and np.array_equal(got[1], cc)
    assert np.array_equal(got[2], v) and np.array_equal(np.signbit(got[2]), np.signbit(v))


def _bodies(rng, m, kinds):
    kind = rng.choice(kinds, m)
    shape = rng.uniform(0.1, 0.5, (m, 3))
    shape[kind == SPHEROCYLINDER, 1] = rng.uniform(0.0, 2.0, int(np.sum(kind == SPHEROCYLINDER)))
    shape[kind == SPHEROCYLINDER, 2] = 0.0
    shape[kind == RING, 0] += 0.6
    X = rng.uniform(0.0, 6.0, (m, 3))
    q = _unit_q(rng, m)
    return kind, shape, X, q


@pytest.mark.parametrize("kinds", [(SPHEROCYLINDER,), (SPHERE, SPHEROCYLINDER), (SPHERE, SPHEROCYLINDER, ELLIPSOID),
                                   (ELLIPSOID, RING, SPHERE), (RING,), (SPHERE, RING), (ELLIPSOID,)])
def test_pair_lower_bound_equals_per_pair_bound(kinds):
    rng = np.random.default_rng(len(kinds))
    m, k = 800, 20000
    kind, shape, X, q = _bodies(rng, m, kinds)
    ia, ib = rng.integers(0, m, k), rng.integers(0, m, k)
    ib[:5] = ia[:5]                                               # coincident centres
    hint = rng.normal(size=(k, 3))
    hint[::5] = np.nan
    hint[1::7] = 0.0
    for h in (None, hint):
        ref = separation_lower_bound(kind[ia], shape[ia], X[ia], q[ia], kind[ib], shape[ib], X[ib], q[ib], hint=h)
        got = pair_lower_bound(kind, shape, X, Q.to_matrix(q), ia, ib, hint=h)
        assert np.array_equal(got, ref)


def test_pair_snsd_with_precomputed_rotations():
    rng = np.random.default_rng(3)
    m, k = 300, 2000
    kind, shape, X, q = _bodies(rng, m, (SPHERE, SPHEROCYLINDER, ELLIPSOID))
    ia, ib = rng.integers(0, m, k), rng.integers(0, m, k)
    ok = ia != ib
    ia, ib = ia[ok], ib[ok]
    R = Q.to_matrix(q)
    a = pair_snsd(kind[ia], shape[ia], X[ia], q[ia], kind[ib], shape[ib], X[ib], q[ib])
    b = pair_snsd(kind[ia], shape[ia], X[ia], q[ia], kind[ib], shape[ib], X[ib], q[ib], R_i=R[ia], R_j=R[ib])
    for f in ("sep", "normal", "p_i", "p_j"):
        assert np.array_equal(getattr(a, f), getattr(b, f))


def test_rod_end_rows_skip_changes_nothing():
    """Every end-point row through the segment kernel (the former construction), then the skin filter."""
    rng = np.random.default_rng(4)
    m, skin = 600, 0.15
    kind = np.full(m, SPHEROCYLINDER)
    shape = np.column_stack([np.full(m, 0.25), rng.choice([0.0, 1.5], m, p=[0.1, 0.9]), np.zeros(m)])
    X = rng.uniform(0.0, 7.0, (m, 3))
    X[1] = X[0] + [0.5, 0.0, 0.0]                                   # parallel neighbours
    q = _unit_q(rng, m)
    q[1] = q[0]
    ia, ib = candidate_pairs(X, 0.25 + 0.5 * shape[:, 1], skin)     # bounding-sphere neighbours
    geo = pair_snsd(kind[ia], shape[ia], X[ia], q[ia], kind[ib], shape[ib], X[ib], q[ib])
    pair, sub, g = rod_pair_end_rows(kind, shape, X, q, ia, ib, geo, skin, R=Q.to_matrix(q))
    # reference
    rods = np.flatnonzero((shape[ia, 1] > 0) & (shape[ib, 1] > 0))
    i, j = ia[rods], ib[rods]
    a_i, a_j = Q.to_matrix(q[i])[:, :, 2], Q.to_matrix(q[j])[:, :, 2]
    h_i, h_j, R_i, R_j, zero = 0.5 * shape[i, 1], 0.5 * shape[j, 1], shape[i, 0], shape[j, 0], np.zeros(len(i))
    parts = []
    for sgn, of_i in ((-1.0, True), (1.0, True), (-1.0, False), (1.0, False)):
        if of_i:
            parts.append(capsule_capsule(X[i] + (sgn * h_i)[:, None] * a_i, a_i, zero, R_i, X[j], a_j, h_j, R_j))
        else:
            parts.append(capsule_capsule(X[i], a_i, h_i, R_i, X[j] + (sgn * h_j)[:, None] * a_j, a_j, zero, R_j))
    sep, nrm, p_i, p_j = (np.concatenate([p[c] for p in parts]) for c in range(4))
    rp, rs = np.tile(rods, 4), np.repeat([1, 2, 3, 4], len(rods))
    scale = np.tile(R_i + R_j + h_i + h_j, 4)
    same = (np.linalg.norm(p_i - geo.p_i[rp], axis=1) + np.linalg.norm(p_j - geo.p_j[rp], axis=1)
            <= 1e-12 * scale)
    keep = (sep <= skin) & ~same
    assert keep.sum() > 50
    assert np.array_equal(pair, rp[keep]) and np.array_equal(sub, rs[keep])
    ref = ContactGeometry(sep[keep], nrm[keep], p_i[keep], p_j[keep], np.ones(int(keep.sum()), bool))
    for f in ("sep", "normal", "p_i", "p_j"):
        assert np.array_equal(getattr(g, f), getattr(ref, f))


def test_candidate_pairs_bruteforce():
    rng = np.random.default_rng(5)
    for m, n_owned in ((2, 2), (300, 300), (400, 250)):
        x = rng.uniform(0.0, 5.0, (m, 3))
        r = rng.uniform(0.05, 0.4, m)
        ia, ib = candidate_pairs(x, r, 0.1, n_owned=n_owned)
        a, b = np.triu_indices(m, 1)
        d = np.linalg.norm(x[a] - x[b], axis=1)
        keep = (d <= r[a] + r[b] + 0.1) & (a < n_owned)
        assert np.array_equal(ia, a[keep]) and np.array_equal(ib, b[keep])


def test_operator_diagonal_blocks_fast_and_general_paths():
    from relcp_mpi.solver.operator import _body_column_blocks
    rng = np.random.default_rng(6)
    nb, c = 50, 400
    # a D pattern as assemble_D makes it: each column a full 6-vector in one or two bodies
    rows, cols, vals = [], [], []
    for col in range(c):
        for b in {int(rng.integers(nb)), int(rng.integers(nb))}:
            rows += list(6 * b + np.arange(6))
            cols += [col] * 6
            vals += list(rng.normal(size=6) * (rng.random() < 0.9))     # some all-zero blocks (signed zeros)
    rows, cols, vals = np.array(rows), np.array(cols), np.array(vals)
    vals[::11] = -0.0
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=6 * nb))])

    def reference(indptr, cols, vals):
        row = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
        key = (row // 6) * c + cols
        ukey, inv = np.unique(key, return_inverse=True)
        dbc = np.zeros((ukey.size, 6))
        np.add.at(dbc, (inv, row % 6), vals)
        return ukey // c, ukey % c, dbc

    for args in ((indptr, cols, vals),                                  # one pattern per body: fast path
                 (indptr[:-5], cols[:indptr[-6]], vals[:indptr[-6]])):   # last body incomplete: general path
        ub, uc, dbc = _body_column_blocks(*args, c)
        rb, rc, rd = reference(*args)
        assert np.array_equal(ub, rb) and np.array_equal(uc, rc)
        assert np.array_equal(dbc, rd) and np.array_equal(np.signbit(dbc), np.signbit(rd))


def _ellipsoid_pairs(rng, m, lo, hi, mixed):
    if mixed:
        e_i = rng.uniform(0.3, 1.0, (m, 3)) * rng.uniform(1.0, 4.0, (m, 3))
        e_j = rng.uniform(0.3, 1.0, (m, 3)) * rng.uniform(1.0, 4.0, (m, 3))
    else:
        e_i = np.broadcast_to([1.0, 0.5, 0.5], (m, 3)).copy()
        e_j = e_i.copy()
    x_i = rng.uniform(0.0, 30.0, (m, 3))
    d = rng.normal(size=(m, 3))
    d *= (rng.uniform(lo, hi, m) * (e_i.max(axis=1) + e_j.max(axis=1)) / np.linalg.norm(d, axis=1))[:, None]
    return e_i, x_i, _unit_q(rng, m), e_j, x_i - d, _unit_q(rng, m)


def test_ellipsoid_newton_compiled_equals_numpy(compiled_backend, monkeypatch):
    """The compiled Newton ascent (geometry/ellipsoid_jit.py; each build: AOT and JIT) and the numpy iteration give
    the same bits, unhinted and hinted, separated and overlapping; RELCP_NUMBA=0 forces the numpy path."""
    from relcp_mpi.geometry import ellipsoid_jit
    rng = np.random.default_rng(7)
    E = ELLIPSOID
    for lo, hi, mixed in ((0.25, 0.5, False), (0.5, 1.2, False), (0.05, 1.3, True)):
        e_i, x_i, q_i, e_j, x_j, q_j = _ellipsoid_pairs(rng, 1500, lo, hi, mixed)
        hint = rng.normal(size=(1500, 3))
        hint[::4] = np.nan
        for h in (None, hint):
            monkeypatch.setenv("RELCP_NUMBA", "0")
            ref = pair_snsd(E, e_i, x_i, q_i, E, e_j, x_j, q_j, hint=h, check=False)
            monkeypatch.setenv("RELCP_NUMBA", "1")
            assert ellipsoid_jit.enabled()
            got = pair_snsd(E, e_i, x_i, q_i, E, e_j, x_j, q_j, hint=h, check=False)
            assert ref.converged.mean() > 0.99
            for f in ("sep", "normal", "p_i", "p_j", "converged"):
                assert np.array_equal(getattr(got, f), getattr(ref, f)), (lo, hi, mixed, f)
    # the switch really selects the path
    monkeypatch.setenv("RELCP_NUMBA", "0")
    monkeypatch.setattr(ellipsoid_jit, "ee_newton", lambda *a: (_ for _ in ()).throw(AssertionError("jit used")))
    pair_snsd(E, e_i, x_i, q_i, E, e_j, x_j, q_j, check=False)


def test_ellipsoid_foot_point_compiled_equals_numpy(compiled_backend, monkeypatch):
    """The compiled foot-point solve (closest point / signed distance) equals the numpy one bit for bit, on
    degenerate input too (equal semi-axes, spheres, points on medial planes, the centre, points very close to it);
    so do the sphere- and spherocylinder-ellipsoid kernels built on it."""
    from relcp_mpi.geometry import ellipsoid as EL
    rng = np.random.default_rng(8)
    m = 6000
    e = rng.uniform(0.2, 2.0, (m, 3))
    e[::7, 1] = e[::7, 0]
    e[::11] = 1.0
    y = rng.normal(size=(m, 3)) * rng.uniform(0.01, 5.0, (m, 1))
    y[::13, 0] = 0.0
    y[::17] = 0.0
    y[::19] *= 1e-9
    monkeypatch.setenv("RELCP_NUMBA", "0")
    ref = EL.closest_point_body(e, y)
    monkeypatch.setenv("RELCP_NUMBA", "1")
    got = EL.closest_point_body(e, y)
    assert ref[3].all()
    for a, b in zip(ref, got):
        assert np.array_equal(a, b)
    for kind, sh in ((SPHERE, np.column_stack([rng.uniform(0.1, 1.0, 2000), np.zeros((2000, 2))])),
                     (SPHEROCYLINDER, np.column_stack([rng.uniform(0.1, 0.5, 2000), rng.uniform(0.0, 3.0, 2000),
                                                       np.zeros(2000)]))):
        e_i, x_i, q_i, e_j, x_j, q_j = _ellipsoid_pairs(rng, 2000, 0.05, 1.2, True)
        out = []
        for flag in ("0", "1"):
            monkeypatch.setenv("RELCP_NUMBA", flag)
            out.append(pair_snsd(kind, sh, x_i, q_i, ELLIPSOID, e_j, x_j, q_j, check=False))
        for f in ("sep", "normal", "p_i", "p_j", "converged"):
            assert np.array_equal(getattr(out[0], f), getattr(out[1], f)), (kind, f)


@pytest.mark.parametrize("kinds", ["ellipsoids", "mixed", "rings"])
def test_general_lower_bound_compiled_equals_numpy(compiled_backend, monkeypatch, kinds):
    """The compiled support-function screen of body sets with ellipsoids or rings (ellipsoid_jit) equals the numpy
    ``separation_lower_bound`` bit for bit: unhinted and hinted (NaN, zero, strided hints, hints along the centre
    line), coincident centres, every kind mixed with every other (a chunk with no ellipsoid on one side takes the
    rods' sum order in numpy: the same order)."""
    rng = np.random.default_rng(11)
    m, k = 2000, 8000
    kind = {"ellipsoids": np.full(m, ELLIPSOID), "rings": rng.choice([ELLIPSOID, RING], m),
            "mixed": rng.choice([SPHERE, SPHEROCYLINDER, ELLIPSOID, RING], m)}[kinds]
    shape = rng.uniform(0.1, 1.5, (m, 3))
    X = rng.uniform(0.0, 8.0, (m, 3))
    R = Q.to_matrix(_unit_q(rng, m))
    ia, ib = rng.integers(0, m, k), rng.integers(0, m, k)
    ib[:6] = ia[:6]                                                     # coincident centres
    hint = rng.normal(size=(k, 3))
    hint[::5] = np.nan
    hint[1::7] = 0.0
    hint[2::9] = X[ia[2::9]] - X[ib[2::9]]
    for h in (None, hint, hint[::-1]):
        got = pair_lower_bound(kind, shape, X, R, ia, ib, hint=h)
        with monkeypatch.context() as mp:
            mp.setenv("RELCP_NUMBA", "0")
            ref = pair_lower_bound(kind, shape, X, R, ia, ib, hint=h)
        assert np.isneginf(ref[:6]).all() == (h is None)
        assert got.dtype == ref.dtype and got.tobytes() == ref.tobytes()
