"""The fused vector kernels of the projected-gradient solvers (relcp_mpi/solver/vector_jit.py): every compiled build
gives the numpy twins' bits (signed zeros and NaN included), the twins sum as documented, and the solvers give the
same answers with either."""
import numpy as np
import pytest

from relcp_mpi.solver import vector_jit as vj


def _vectors(rng, n, specials=True):
    """Seven (n,) arrays with zeros, signed zeros, ties and, optionally, NaNs in them."""
    a = [rng.normal(size=n) * 10.0 ** rng.integers(-3, 3, size=n) for _ in range(7)]
    if specials and n:
        for v in a:
            k = rng.integers(0, n, size=max(n // 8, 1))
            v[k] = rng.choice([0.0, -0.0, 1.0, -1.0], size=len(k))
        a[1][a[1] == 1.0] = a[0][a[1] == 1.0]          # ties between x and g
    return a


def _same(a, b):
    return a.tobytes() == b.tobytes()


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 17, 1000, 4099])
def test_compiled_kernels_are_the_numpy_twins_bit_for_bit(compiled_backend, n):
    rng = np.random.default_rng(n)
    comp = vj.compiled_entries(vars(vj), vj._JIT_NAMES, vj._ENTRIES)
    for nan in (False, True):
        base = _vectors(rng, n)
        if nan and n:
            base[1][rng.integers(0, n)] = np.nan
        for t in (0.37, 2.0):
            runs = []
            for fns in (comp, vj.NUMPY):
                project, measure, extrapolate, bb = fns
                X, G, Y, GY, XO, GO, Q = (v.copy() for v in base)
                project(X, G, Y, GY, XO, GO, t)
                out = np.empty(4)
                measure(X, G, Q, Y, GY, XO, out)
                extrapolate(X, XO, G, GO, Y, GY, 0.61)
                X2, G2, XO2, GO2 = (v.copy() for v in base[:4])
                project(X2, G2, X2, G2, XO2, GO2, t)          # BBPGD's call: y, g(y) are x, g themselves
                out2 = np.empty(4)
                bb(X2, G2, Q, XO2, GO2, out2)
                runs.append((X, G, Y, GY, XO, GO, out, X2, G2, XO2, GO2, out2))
            for a, b in zip(*runs):
                assert _same(a, b)


def test_numpy_twins_follow_the_documented_arithmetic():
    rng = np.random.default_rng(7)
    X, G, Y, GY, XO, GO, Q = _vectors(rng, 1001, specials=False)
    X[:5] = [-0.0, 0.0, -1e-300, 3.0, np.nan]
    Y[:5] = 0.0
    GY[:5] = 0.0
    project, measure, extrapolate, bb = vj.NUMPY
    x0 = X.copy()
    project(X, G, Y, GY, XO, GO, 0.5)
    assert _same(XO, x0)
    ref = np.maximum(GY * -0.5 + Y, 0.0)
    assert _same(X, ref)
    assert _same(X[:3], np.zeros(3)) and np.signbit(X[:3]).sum() == 0      # max(-0.0, 0.0) = +0.0
    # the four interleaved sequential partial sums, combined pairwise
    t = rng.normal(size=1003)
    p = [0.0, 0.0, 0.0, 0.0]
    for i in range(1000):
        p[i % 4] += t[i]
    for i in range(1000, 1003):
        p[0] += t[i]
    assert vj.dot4(t, np.ones_like(t)) == (p[0] + p[1]) + (p[2] + p[3])
    assert vj.dot4(t, t) == pytest.approx(t @ t, rel=1e-14)
    out = np.empty(4)
    X[4] = 1.0
    measure(X, G, Q, Y, GY, XO, out)
    assert out[3] == np.abs(np.minimum(X, G)).max()
    X[7] = np.nan
    measure(X, G, Q, Y, GY, XO, out)
    assert np.isnan(out[3])


@pytest.mark.parametrize("method", ["apgd", "bbpgd"])
def test_solvers_agree_with_and_without_the_compiled_kernels(compiled_backend, method, monkeypatch):
    """The stored 256-cell colony LCP (tests/data/colony_lcp_256.npz): the same iterations and the same bits with a
    compiled build and with numpy (RELCP_NUMBA=0), and a min-map residual below tol."""
    from test_solver_ipm import colony_operator, solve
    monkeypatch.setattr(vj, "MIN_LENGTH", 0)          # the JIT too, on this small LCP
    results = []
    for env in ("1", "0"):
        monkeypatch.setenv("RELCP_NUMBA", env)
        op, Dm, qv = colony_operator()
        r, x = solve(op, qv, method, tol=1e-6, max_iter=20000)
        results.append((r, x))
        for o in (op, Dm, qv):
            o.destroy()
    (r1, x1), (r0, x0) = results
    assert r1.iterations == r0.iterations and r1.residual <= 1e-6
    assert _same(x1, x0)
