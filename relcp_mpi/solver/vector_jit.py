"""The vector work of one projected-gradient iteration (APGD, BBPGD) in fused passes, compiled, with numpy twins
that give the same bits.

Why: an iteration is one product with ``A`` and some twenty numpy passes over the local vectors (copies, the
projected step, differences, three dot products, the min-map residual, the extrapolation).  Once the vectors no
longer fit in the cache (a colony of 8,192 cells: 80k rows, 640 kB per vector) these passes cost as much as the
product: 1.4 ms of a 2.9 ms APGD iteration on one rank (docs/BENCHMARKS.md, "Fused solver vectors").  Here they are
three passes (APGD) or two (BBPGD), each reading every vector once.

Arithmetic (a contract: tests/test_vector_jit.py compares every build with the numpy twins byte for byte):

* element-wise results are the numpy expressions the solvers used before, operation by operation, no fused
  multiply-add (numba_switch: no fastmath; the AOT build targets the generic CPU): the projected step
  ``P(y + (-t) g)`` = ``max(fl(fl(g * (-t)) + y), 0)`` with ``np.maximum``'s rule (the first argument when it is
  NaN or larger: ``max(-0.0, 0.0) = 0.0``), the extrapolation ``fl(fl(fl(x - x_old) * beta) + x)``;
* each dot product is summed in four interleaved partial sums, element ``i`` into partial ``i mod 4`` (the tail
  beyond the last multiple of four into partial 0), each partial sequentially from +0.0, combined as
  ``(p0 + p1) + (p2 + p3)``: four independent dependency chains, so the compiled loop is not bound by the latency
  of one addition chain, and a fixed order that numpy reproduces with ``np.add.accumulate`` (the numpy twins);
* the min-map residual ``max_i |min(x_i, g_i)|`` is order-independent; NaN anywhere gives NaN, as numpy's.

The dot products' order differs from BLAS ``ddot``'s (the solvers' numpy code before this module), so results
changed at the rounding level once, with this module; they do not depend on the backend.
"""
import numpy as np

from relcp_mpi.geometry.numba_switch import AVAILABLE, backend, compiled_entries, enabled

MIN_LENGTH = 4096        # the JIT kernels serve vectors from this length (importing numba costs ~1 s per process)

_JIT_NAMES = ("_project_step", "_resid", "_term", "_add", "_measure", "_apgd_measure", "_extrapolate", "_bb_measure")
_ENTRIES = ("_project_step", "_apgd_measure", "_extrapolate", "_bb_measure")     # callees above come first
AOT_SIGNATURES = {       # the entry points' types for the AOT build (geometry/aot_build.py)
    "_project_step": "void(f8[::1], f8[::1], f8[::1], f8[::1], f8[::1], f8[::1], f8)",
    "_apgd_measure": "void(f8[::1], f8[::1], f8[::1], f8[::1], f8[::1], f8[::1], f8[::1])",
    "_extrapolate": "void(f8[::1], f8[::1], f8[::1], f8[::1], f8[::1], f8[::1], f8)",
    "_bb_measure": "void(f8[::1], f8[::1], f8[::1], f8[::1], f8[::1], f8[::1])",
}


# The loops index with unsigned integers (numba tests every signed index for a negative value to wrap it around)
# and keep the twelve partial sums in scalars: both made the measuring passes ~1.7x faster (same bits).
_ONE = np.uint64(1)
_FOUR = np.uint64(4)


def _project_step(X, G, Y, GY, XO, GO, t):
    """``XO = X; GO = G; X = P(Y - t GY)`` (all (n,)); ``Y``/``GY`` may be ``X``/``G`` themselves (BBPGD)."""
    nt = -t
    n = np.uint64(X.shape[0])
    i = np.uint64(0)
    while i < n:
        x = X[i]
        g = G[i]
        v = GY[i] * nt + Y[i]        # read before X[i], G[i] are written: Y may be X, GY may be G
        XO[i] = x
        GO[i] = g
        X[i] = v if (v > 0.0 or v != v) else 0.0
        i += _ONE


def _resid(res, nan, x, g):
    """The running min-map residual ``max |min(x, g)|`` and NaN flag after element (x, g)."""
    r = np.nan if (x != x or g != g) else abs(x if x < g else g)
    return (r if r > res else res), (nan or r != r)


def _term(X, G, Q, A, B, C, i, apgd):
    """Element i of :func:`_measure`: ``G[i] += Q[i]``; returns its three dot-product terms and (x_i, g_i).
    APGD (A, B, C = Y, GY, XO): d.d, d.(g - gy), d.(x - xo) with d = x - y; BBPGD (A, B = XO, GO): s.s, s.y, y.y
    with s = x - xo, y = g - go."""
    g = G[i] + Q[i]
    G[i] = g
    x = X[i]
    d = x - A[i]
    if apgd:
        return d * d, d * (g - B[i]), d * (x - C[i]), x, g
    y = g - B[i]
    return d * d, d * y, y * y, x, g


def _add(a, b, c, res, nan, X, G, Q, A, B, C, i, apgd):
    """Element i added to the partial sums (a, b, c) and to the running residual (res, nan)."""
    t0, t1, t2, x, g = _term(X, G, Q, A, B, C, i, apgd)
    res, nan = _resid(res, nan, x, g)
    return a + t0, b + t1, c + t2, res, nan


def _measure(X, G, Q, A, B, C, apgd, out):
    """The measuring pass of :func:`_apgd_measure` / :func:`_bb_measure`: ``out[:3]`` the three dot products of
    :func:`_term` (element i into partial sum i mod 4, the tail into partial 0; the third negated for APGD),
    ``out[3] = max |min(X, G)|`` (NaN if any element is NaN)."""
    n = np.uint64(X.shape[0])
    m = n - n % _FOUR
    a0, a1, a2, a3 = 0.0, 0.0, 0.0, 0.0
    b0, b1, b2, b3 = 0.0, 0.0, 0.0, 0.0
    c0, c1, c2, c3 = 0.0, 0.0, 0.0, 0.0
    res = 0.0
    nan = False
    i = np.uint64(0)
    while i < m:
        a0, b0, c0, res, nan = _add(a0, b0, c0, res, nan, X, G, Q, A, B, C, i, apgd)
        a1, b1, c1, res, nan = _add(a1, b1, c1, res, nan, X, G, Q, A, B, C, i + _ONE, apgd)
        a2, b2, c2, res, nan = _add(a2, b2, c2, res, nan, X, G, Q, A, B, C, i + np.uint64(2), apgd)
        a3, b3, c3, res, nan = _add(a3, b3, c3, res, nan, X, G, Q, A, B, C, i + np.uint64(3), apgd)
        i += _FOUR
    while i < n:
        a0, b0, c0, res, nan = _add(a0, b0, c0, res, nan, X, G, Q, A, B, C, i, apgd)
        i += _ONE
    out[0] = (a0 + a1) + (a2 + a3)
    out[1] = (b0 + b1) + (b2 + b3)
    third = (c0 + c1) + (c2 + c3)
    out[2] = -third if apgd else third
    out[3] = np.nan if nan else res


def _apgd_measure(X, G, Q, Y, GY, XO, out):
    """``G += Q`` (G held ``A x``), then ``out = [d.d, d.(G - GY), -d.(X - XO), max |min(X, G)|]`` with
    ``d = X - Y``; ``out`` (4,)."""
    _measure(X, G, Q, Y, GY, XO, True, out)


def _bb_measure(X, G, Q, XO, GO, out):
    """``G += Q`` (G held ``A x``), then ``out = [s.s, s.y, y.y, max |min(X, G)|]`` with ``s = X - XO``,
    ``y = G - GO``; ``out`` (4,)."""
    _measure(X, G, Q, XO, GO, XO, False, out)


def _extrapolate(X, XO, G, GO, Y, GY, beta):
    """``Y = X + beta (X - XO)``, ``GY = G + beta (G - GO)`` (all (n,))."""
    n = np.uint64(X.shape[0])
    i = np.uint64(0)
    while i < n:
        x = X[i]
        Y[i] = (x - XO[i]) * beta + x
        g = G[i]
        GY[i] = (g - GO[i]) * beta + g
        i += _ONE


# ---- numpy twins (the same bits) ------------------------------------------------------------------------------
def dot4(a, b):
    """``a.b`` summed as the compiled kernels sum it (module docstring): four interleaved sequential partial sums
    from +0.0 (the tail into partial 0), combined as ``(p0 + p1) + (p2 + p3)``."""
    t = a * b
    n = t.shape[0]
    m = n - n % 4
    p = []
    for k in range(4):
        part = t[k:m:4] if k else np.concatenate([t[0:m:4], t[m:]])
        # np.add.accumulate adds left to right; the leading +0.0 makes the first partial sum 0.0 + t_k, as the loop
        p.append(np.add.accumulate(np.concatenate([[0.0], part]))[-1])
    return (p[0] + p[1]) + (p[2] + p[3])


def minmap_local(X, G):
    """Local ``||min(X, G)||_inf`` = ``||X - max(X - G, 0)||_inf`` for X >= 0 (0 for empty arrays); the numpy twins'
    residual, and every LCP solver's (solver/base.py)."""
    if X.size == 0:
        return 0.0
    return float(np.abs(np.minimum(X, G)).max())


def numpy_project_step(X, G, Y, GY, XO, GO, t):
    v = GY * -t
    v += Y
    XO[:] = X
    GO[:] = G
    np.maximum(v, 0.0, out=X)


def numpy_apgd_measure(X, G, Q, Y, GY, XO, out):
    G += Q
    d = X - Y
    out[0] = dot4(d, d)
    out[1] = dot4(d, G - GY)
    out[2] = -dot4(d, X - XO)
    out[3] = minmap_local(X, G)


def numpy_extrapolate(X, XO, G, GO, Y, GY, beta):
    np.subtract(X, XO, out=Y)
    Y *= beta
    Y += X
    np.subtract(G, GO, out=GY)
    GY *= beta
    GY += G


def numpy_bb_measure(X, G, Q, XO, GO, out):
    G += Q
    s = X - XO
    y = G - GO
    out[0] = dot4(s, s)
    out[1] = dot4(s, y)
    out[2] = dot4(y, y)
    out[3] = minmap_local(X, G)


NUMPY = (numpy_project_step, numpy_apgd_measure, numpy_extrapolate, numpy_bb_measure)


def kernels(n):
    """``(project_step, apgd_measure, extrapolate, bb_measure)`` for local vectors of length ``n``: the compiled
    build when one is on (the JIT only from MIN_LENGTH), else the numpy twins -- the same bits either way."""
    if AVAILABLE and enabled() and (backend() == "aot" or n >= MIN_LENGTH):
        return compiled_entries(globals(), _JIT_NAMES, _ENTRIES)
    return NUMPY
