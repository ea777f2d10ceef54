"""Property tests for relcp_mpi.solver.projection (seed 001: nonexpansive projection, projection VI, and the
approximate-projection certificate ||p - P_C(y)|| <= eps), including d = 0."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from relcp_mpi.solver import projection as pj

FIN = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
SETTINGS = settings(max_examples=150, deadline=None)


@st.composite
def boxes(draw, d=None):
    """(d, lo, hi): bounds may be infinite; some components degenerate (lo == hi)."""
    if d is None:
        d = draw(st.integers(0, 8))
    a = draw(hnp.arrays(np.float64, d, elements=FIN))
    w = draw(hnp.arrays(np.float64, d, elements=st.floats(0, 1e3)))
    kind = draw(hnp.arrays(np.int64, d, elements=st.integers(0, 4)))
    lo = np.where(kind == 1, -np.inf, a)
    hi = np.where(kind == 2, np.inf, a + w)
    hi = np.where(kind == 3, lo, hi)           # degenerate component (or -inf..-inf excluded below)
    lo = np.where(kind == 4, 0.0, lo)
    hi = np.where(kind == 4, np.inf, hi)       # orthant component
    hi = np.where(np.isinf(lo) & (kind == 3), 0.0, hi)
    assert np.all(lo <= hi)
    return d, lo, hi


def vec(d):
    return hnp.arrays(np.float64, d, elements=FIN)


@st.composite
def box_and_points(draw, npts=2):
    d, lo, hi = draw(boxes())
    pts = [draw(vec(d)) for _ in range(npts)]
    return (d, lo, hi, *pts)


@st.composite
def feasible_point(draw, lo, hi):
    d = lo.size
    u = draw(hnp.arrays(np.float64, d, elements=st.floats(0, 1)))
    big = draw(hnp.arrays(np.float64, d, elements=st.floats(0, 1e3)))
    at = draw(hnp.arrays(np.int64, d, elements=st.integers(0, 3)))
    flo = np.where(np.isfinite(lo), lo, np.where(np.isfinite(hi), hi - big, -big))
    fhi = np.where(np.isfinite(hi), hi, flo + big)
    p = flo + u * (fhi - flo)
    p = np.where((at == 1) & np.isfinite(lo), lo, p)   # put some components on the bounds
    p = np.where((at == 2) & np.isfinite(hi), hi, p)
    p = np.clip(p, lo, hi)
    return p


# ------------------------------------------------------------------------------------------------ projections
def test_basic_projections():
    y = np.array([-2.0, 0.0, 3.0])
    assert np.array_equal(pj.project_orthant(y), [0.0, 0.0, 3.0])
    assert np.array_equal(pj.project_box(y, -1.0, 1.0), [-1.0, 0.0, 1.0])
    assert pj.project_orthant(np.zeros(0)).shape == (0,)
    with pytest.raises(ValueError):
        pj.project_box(y, 1.0, 0.0)


@SETTINGS
@given(box_and_points())
def test_projection_nonexpansive(data):
    d, lo, hi, u, v = data
    pu, pv = pj.project_box(u, lo, hi), pj.project_box(v, lo, hi)
    assert np.all((pu >= lo) & (pu <= hi))
    # exact in floating point: clipping is exact and rounding is monotone
    assert np.all(np.abs(pu - pv) <= np.abs(u - v))
    assert np.linalg.norm(pu - pv) <= np.linalg.norm(u - v)
    # idempotent
    assert np.array_equal(pj.project_box(pu, lo, hi), pu)


@SETTINGS
@given(st.integers(0, 8).flatmap(lambda d: st.tuples(vec(d), vec(d))))
def test_orthant_nonexpansive(uv):
    u, v = uv
    pu, pv = pj.project_orthant(u), pj.project_orthant(v)
    assert np.all(pu >= 0)
    assert np.linalg.norm(pu - pv) <= np.linalg.norm(u - v)


# ---------------------------------------------------------------------------------------- VI characterisation
@SETTINGS
@given(box_and_points(npts=1))
def test_vi_projection_is_in_normal_cone(data):
    d, lo, hi, y = data
    p = pj.project_box(y, lo, hi)
    assert pj.in_normal_cone(p, y - p, lo, hi, tol=0.0)
    assert pj.normal_cone_residual(p, y - p, lo, hi) == 0.0


@SETTINGS
@given(st.data())
def test_vi_normal_cone_point_projects_back(data):
    d, lo, hi = data.draw(boxes())
    p = data.draw(feasible_point(lo, hi))
    mag = data.draw(hnp.arrays(np.float64, d, elements=st.floats(0, 1e3)))
    sgn = data.draw(hnp.arrays(np.float64, d, elements=st.sampled_from([-1.0, 1.0])))
    # build n in N_C(p): 0 in the interior, <= 0 at lo, >= 0 at hi, free when lo == hi
    n = np.zeros(d)
    n = np.where((p == lo) & (p < hi), -mag, n)
    n = np.where((p == hi) & (p > lo), mag, n)
    n = np.where(lo == hi, sgn * mag, n)
    assert pj.in_normal_cone(p, n, lo, hi)
    y = p + n
    assert np.array_equal(pj.project_box(y, lo, hi), p)


@SETTINGS
@given(st.data())
def test_vi_iff(data):
    """P_C(y) = p  <=>  p in C and y - p in N_C(p), for arbitrary y and feasible p."""
    d, lo, hi = data.draw(boxes())
    y = data.draw(vec(d))
    p = data.draw(feasible_point(lo, hi))
    if data.draw(st.booleans()):
        p = pj.project_box(y, lo, hi)
    lhs = np.array_equal(pj.project_box(y, lo, hi), p)
    rhs = pj.in_normal_cone(p, y - p, lo, hi, tol=0.0)
    assert lhs == rhs


def test_normal_cone_infeasible_point_and_tolerance():
    # x outside C: N_C(x) is empty
    assert not pj.in_normal_cone(np.array([-1.0]), np.array([0.0]))
    assert pj.in_normal_cone(np.array([-1e-12]), np.array([0.0]), tol=1e-10)
    # orthant: residual is the min-map ||min(x, -n)||_inf
    x = np.array([0.0, 2.0, 1e-3])
    n = np.array([-5.0, 0.0, -1.0])
    assert pj.normal_cone_residual(x, n) == pytest.approx(1e-3)
    assert pj.in_normal_cone(x, n, tol=2e-3) and not pj.in_normal_cone(x, n, tol=1e-4)
    assert pj.normal_cone_residual(np.zeros(0), np.zeros(0)) == 0.0


@SETTINGS
@given(st.integers(0, 8).flatmap(lambda d: st.tuples(vec(d), vec(d))))
def test_orthant_residual_is_minmap(xn):
    x, n = xn
    x = np.abs(x)
    r = pj.normal_cone_residual(x, n)
    ref = np.abs(x - np.maximum(x + n, 0.0)).max(initial=0.0)
    assert r == pytest.approx(ref, rel=1e-12, abs=1e-9)
    assert r == np.abs(np.minimum(x, -n)).max(initial=0.0)


# ------------------------------------------------------------------------------------------------ certificate
def _dist(p, y, lo, hi):
    return float(np.linalg.norm(p - pj.project_box(y, lo, hi)))


@SETTINGS
@given(st.data())
def test_certificate_bounds_distance_box(data):
    d, lo, hi = data.draw(boxes())
    y = data.draw(vec(d))
    p = data.draw(feasible_point(lo, hi))
    eps = pj.certificate_box(y, p, lo, hi)
    assert eps >= 0.0
    dist = _dist(p, y, lo, hi)
    assert dist <= eps * (1 + 1e-12) + 1e-300
    # exact projection: certificate (numerically) zero
    assert pj.certificate_box(y, pj.project_box(y, lo, hi), lo, hi) <= 1e-150


@SETTINGS
@given(st.data())
def test_certificate_orthant_closed_form(data):
    d = data.draw(st.integers(0, 8))
    y = data.draw(vec(d))
    p = np.abs(data.draw(vec(d)))
    if data.draw(st.booleans()):
        # make y - p <= 0 so the certificate is finite
        y = np.minimum(y, p)
    r = y - p
    eps = pj.certificate_orthant(y, p)
    if np.any(r > 0):
        assert eps == np.inf
    else:
        s = -(r * p).sum()
        assert eps == pytest.approx(np.sqrt(max(s, 0.0)), rel=1e-10, abs=1e-150)
        assert float(np.linalg.norm(p - np.maximum(y, 0.0))) <= eps * (1 + 1e-12) + 1e-300
    assert pj.certificate_orthant_mpi(y, p, None) == eps


def test_certificate_edge_cases():
    e = np.zeros(0)
    assert pj.certificate_box(e, e) == 0.0           # d = 0: C = {()} and the bound is 0
    assert pj.certificate_orthant(e, e) == 0.0
    assert pj.certificate_box_mpi(e, e, None) == 0.0
    # infinite supremum towards an infinite bound
    assert pj.certificate_orthant(np.array([1.0]), np.array([0.0])) == np.inf
    # towards a finite bound: sup = r (hi - p)
    assert pj.certificate_box(np.array([5.0]), np.array([0.0]), 0.0, 1.0, safe=False) == pytest.approx(np.sqrt(5.0))
    # zero residual component with infinite bound contributes 0 (no inf*0)
    assert pj.certificate_orthant(np.array([2.0, -1.0]), np.array([2.0, 0.0])) <= 1e-150
    with pytest.raises(ValueError):
        pj.certificate_orthant(np.array([0.0]), np.array([-1.0]))   # p must be feasible


def test_certificate_mpi_self_matches_serial(rng):
    from mpi4py import MPI
    y = rng.standard_normal(50)
    p = np.abs(rng.standard_normal(50))
    y = np.minimum(y, p)
    assert pj.certificate_orthant_mpi(y, p, MPI.COMM_SELF) == pytest.approx(pj.certificate_orthant(y, p), rel=1e-14)
    assert pj.normal_cone_residual_mpi(p, y - p, MPI.COMM_SELF) == pj.normal_cone_residual(p, y - p)
