"""Exact cases of the contact geometry kernels (closed-form separations, degenerate configurations)."""
import numpy as np
import pytest

from relcp_mpi.bodies.shapes import SPHERE, SPHEROCYLINDER, ELLIPSOID
from relcp_mpi.geometry import quaternion as Q
from relcp_mpi.geometry.contact import pair_snsd, wall_snsd, ContactGeometry

ID = np.array([1.0, 0.0, 0.0, 0.0])


def q_axis_angle(axis, angle):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    return np.r_[np.cos(angle / 2), np.sin(angle / 2) * axis]


def one(kind_i, shape_i, x_i, q_i, kind_j, shape_j, x_j, q_j, **kw):
    g = pair_snsd(kind_i, np.atleast_2d(shape_i), np.atleast_2d(x_i), np.atleast_2d(q_i),
                  kind_j, np.atleast_2d(shape_j), np.atleast_2d(x_j), np.atleast_2d(q_j), **kw)
    return g.sep[0], g.normal[0], g.p_i[0], g.p_j[0]


def rotate_config(rng, x_i, q_i, x_j, q_j):
    """Apply one random rigid motion to both bodies."""
    qr = Q.random_unit(rng, 1)[0]
    shift = rng.normal(size=3) * 3
    Rm = Q.to_matrix(qr[None])[0]
    rot = lambda x: Rm @ np.asarray(x, float) + shift
    qm = lambda q: Q.multiply(qr[None], np.asarray(q, float)[None])[0]
    return rot(x_i), qm(q_i), rot(x_j), qm(q_j), Rm, shift


# ----------------------------------------------------------------------------------------------- spheres
def test_two_spheres_exact():
    s, n, pi, pj = one(SPHERE, [1.0, 0, 0], [3.0, 4.0, 0.0], ID, SPHERE, [2.0, 0, 0], [0.0, 0.0, 0.0], ID)
    assert s == 5.0 - 3.0
    np.testing.assert_allclose(n, [0.6, 0.8, 0.0], atol=1e-15)
    np.testing.assert_allclose(pi, [3.0 - 0.6, 4.0 - 0.8, 0.0], atol=1e-15)
    np.testing.assert_allclose(pj, [1.2, 1.6, 0.0], atol=1e-15)


def test_coincident_spheres_unit_fallback():
    s, n, pi, pj = one(SPHERE, [1.0, 0, 0], [1.0, 1.0, 1.0], ID, SPHERE, [0.5, 0, 0], [1.0, 1.0, 1.0], ID)
    assert s == -1.5
    assert np.linalg.norm(n) == pytest.approx(1.0)
    np.testing.assert_allclose(n, [0.0, 0.0, 1.0])


def test_empty_batch():
    g = pair_snsd(np.zeros(0, int), np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 4)),
                  np.zeros(0, int), np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 4)))
    assert isinstance(g, ContactGeometry) and g.sep.shape == (0,) and g.normal.shape == (0, 3)
    w = wall_snsd(np.zeros(0, int), np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 4)), [0, 0, 0], [0, 0, 1])
    assert w.sep.shape == (0,)


# ----------------------------------------------------------------------------------------------- walls
def test_walls_exact(rng):
    n = np.array([1.0, 2.0, 2.0]) / 3.0
    w = np.array([0.5, -1.0, 2.0])
    m = 30
    x = rng.normal(size=(m, 3)) * 3
    q = Q.random_unit(rng, m)
    kind = np.repeat([SPHERE, SPHEROCYLINDER, ELLIPSOID], 10)
    shape = np.zeros((m, 3))
    shape[:10, 0] = rng.uniform(0.5, 2, 10)
    shape[10:20, 0] = rng.uniform(0.2, 1, 10)
    shape[10:20, 1] = rng.uniform(0.5, 4, 10)
    shape[20:] = rng.uniform(0.3, 3, (10, 3))
    g = wall_snsd(kind, shape, x, q, w, 2.0 * n)       # normal is renormalised
    R = Q.to_matrix(q)
    base = (x - w) @ n
    # support of each body in direction -n, closed forms
    expect = np.empty(m)
    expect[:10] = base[:10] - shape[:10, 0]
    a = R[10:20, :, 2]
    expect[10:20] = base[10:20] - shape[10:20, 0] - 0.5 * shape[10:20, 1] * np.abs(a @ n)
    nb = np.einsum("nji,j->ni", R[20:], n)
    expect[20:] = base[20:] - np.linalg.norm(nb * shape[20:], axis=1)
    np.testing.assert_allclose(g.sep, expect, atol=1e-13)
    np.testing.assert_allclose(g.normal, np.broadcast_to(n, (m, 3)), atol=1e-15)
    np.testing.assert_allclose((g.p_i - g.p_j) @ n, g.sep, atol=1e-13)
    np.testing.assert_allclose((g.p_j - w) @ n, 0.0, atol=1e-13)           # p_j on the plane
    # p_i on the body surfaces
    np.testing.assert_allclose(np.linalg.norm(g.p_i[:10] - x[:10], axis=1), shape[:10, 0], atol=1e-13)
    yb = np.einsum("nji,nj->ni", R[20:], g.p_i[20:] - x[20:]) / shape[20:]
    np.testing.assert_allclose(np.linalg.norm(yb, axis=1), 1.0, atol=1e-13)
    assert np.all(g.converged)


def test_sphere_on_floor():
    g = wall_snsd(SPHERE, [1.0, 0, 0], [[2.0, 3.0, 0.75]], [ID], [0, 0, 0], [0, 0, 1])
    assert g.sep[0] == -0.25
    np.testing.assert_allclose(g.p_i[0], [2.0, 3.0, -0.25])
    np.testing.assert_allclose(g.p_j[0], [2.0, 3.0, 0.0])


def test_spherocylinder_flat_on_wall_uses_middle():
    g = wall_snsd(SPHEROCYLINDER, [0.5, 4.0, 0], [[0.0, 0.0, 1.0]], [q_axis_angle([0, 1, 0], np.pi / 2)],
                  [0, 0, 0], [0, 0, 1])
    assert g.sep[0] == pytest.approx(0.5, abs=1e-15)
    np.testing.assert_allclose(g.p_i[0], [0.0, 0.0, 0.5], atol=1e-15)


# ----------------------------------------------------------------------------------------------- spherocylinders
def test_parallel_spherocylinders_midpoint_of_overlap():
    # both along z; i spans z in [-0.5, 3.5], j spans [-1, 1]: overlap [-0.5, 1], midpoint 0.25
    s, n, pi, pj = one(SPHEROCYLINDER, [0.5, 4.0, 0], [3.0, 0.0, 1.5], ID,
                       SPHEROCYLINDER, [1.0, 2.0, 0], [0.0, 0.0, 0.0], ID)
    assert s == pytest.approx(3.0 - 1.5, abs=1e-15)
    np.testing.assert_allclose(n, [1.0, 0.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(pi, [2.5, 0.0, 0.25], atol=1e-15)
    np.testing.assert_allclose(pj, [1.0, 0.0, 0.25], atol=1e-15)
    # the same with the roles swapped
    s2, n2, pi2, pj2 = one(SPHEROCYLINDER, [1.0, 2.0, 0], [0.0, 0.0, 0.0], ID,
                           SPHEROCYLINDER, [0.5, 4.0, 0], [3.0, 0.0, 1.5], ID)
    assert s2 == s
    np.testing.assert_allclose(n2, -n, atol=1e-15)
    np.testing.assert_allclose(pi2, pj, atol=1e-15)


def test_antiparallel_and_collinear_spherocylinders():
    qflip = q_axis_angle([1, 0, 0], np.pi)
    s, n, pi, pj = one(SPHEROCYLINDER, [0.5, 2.0, 0], [0.0, 2.0, 0.0], qflip,
                       SPHEROCYLINDER, [0.5, 2.0, 0], [0.0, 0.0, 0.0], ID)
    assert s == pytest.approx(1.0, abs=1e-15)
    np.testing.assert_allclose(n, [0.0, 1.0, 0.0], atol=1e-15)
    # collinear, end to end along z with a gap 0.5 between core ends
    s, n, pi, pj = one(SPHEROCYLINDER, [0.2, 2.0, 0], [0.0, 0.0, 2.5], ID,
                       SPHEROCYLINDER, [0.3, 2.0, 0], [0.0, 0.0, 0.0], qflip)
    assert s == pytest.approx(0.5 - 0.5, abs=1e-15)
    np.testing.assert_allclose(n, [0.0, 0.0, 1.0], atol=1e-15)


def test_crossing_spherocylinders():
    qx = q_axis_angle([0, 1, 0], np.pi / 2)       # axis along x
    # j along z at the origin, i along x at height y = 0.7: distance 0.7
    s, n, pi, pj = one(SPHEROCYLINDER, [0.2, 3.0, 0], [0.0, 0.7, 0.0], qx,
                       SPHEROCYLINDER, [0.3, 3.0, 0], [0.0, 0.0, 0.0], ID)
    assert s == pytest.approx(0.2, abs=1e-15)
    np.testing.assert_allclose(n, [0.0, 1.0, 0.0], atol=1e-15)
    # exactly intersecting cores: normal = +-(a_i x a_j), towards i's centre
    s, n, pi, pj = one(SPHEROCYLINDER, [0.2, 3.0, 0], [0.0, 0.0, 0.5], qx,
                       SPHEROCYLINDER, [0.3, 3.0, 0], [0.0, 0.0, 0.0], ID)
    assert s == pytest.approx(-0.5, abs=1e-15)
    assert abs(n[1]) == pytest.approx(1.0)
    s2, n2, _, _ = one(SPHEROCYLINDER, [0.3, 3.0, 0], [0.0, 0.0, 0.0], ID,
                       SPHEROCYLINDER, [0.2, 3.0, 0], [0.0, 0.0, 0.5], qx)
    assert s2 == s
    np.testing.assert_allclose(n2, -n, atol=1e-15)
    # crossing with the i centre off the crossing line: the sign points towards i
    s, n, _, _ = one(SPHEROCYLINDER, [0.2, 3.0, 0], [0.0, 0.0, 0.0], q_axis_angle([1, 1, 0], 0.7),
                     SPHEROCYLINDER, [0.3, 3.0, 0], [0.0, 0.0, 0.0], ID)
    assert np.linalg.norm(n) == pytest.approx(1.0)


def test_sphere_vs_spherocylinder():
    # sphere beyond the tip of a capsule along z
    s, n, pi, pj = one(SPHERE, [0.5, 0, 0], [0.0, 0.0, 4.0], ID, SPHEROCYLINDER, [1.0, 4.0, 0], [0, 0, 0], ID)
    assert s == pytest.approx(4.0 - 2.0 - 1.5, abs=1e-15)
    np.testing.assert_allclose(n, [0, 0, 1.0])
    # beside the cylinder
    s, n, pi, pj = one(SPHERE, [0.5, 0, 0], [2.0, 0.0, 1.0], ID, SPHEROCYLINDER, [1.0, 4.0, 0], [0, 0, 0], ID)
    assert s == pytest.approx(0.5, abs=1e-15)
    np.testing.assert_allclose(pj, [1.0, 0.0, 1.0], atol=1e-15)
    # sphere centre on the core: deterministic perpendicular normal
    s, n, _, _ = one(SPHERE, [0.5, 0, 0], [0.0, 0.0, 0.3], ID, SPHEROCYLINDER, [1.0, 4.0, 0], [0, 0, 0], ID)
    assert s == -1.5 and np.linalg.norm(n) == pytest.approx(1.0) and abs(n[2]) < 1e-15


def test_rotated_spherocylinders_invariance(rng):
    for _ in range(10):
        si, sj = [0.3, 2.0, 0], [0.4, 3.0, 0]
        xi, xj = rng.normal(size=3), rng.normal(size=3)
        qi, qj = Q.random_unit(rng, 1)[0], Q.random_unit(rng, 1)[0]
        s, n, pi, pj = one(SPHEROCYLINDER, si, xi, qi, SPHEROCYLINDER, sj, xj, qj)
        xi2, qi2, xj2, qj2, Rm, sh = rotate_config(rng, xi, qi, xj, qj)
        s2, n2, pi2, pj2 = one(SPHEROCYLINDER, si, xi2, qi2, SPHEROCYLINDER, sj, xj2, qj2)
        assert s2 == pytest.approx(s, abs=1e-13)
        np.testing.assert_allclose(n2, Rm @ n, atol=1e-12)
        np.testing.assert_allclose(pi2, Rm @ pi + sh, atol=1e-12)


# ----------------------------------------------------------------------------------------------- ellipsoids
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("d", [9.0, 6.2, 5.9])
def test_ellipsoids_aligned_on_a_principal_axis(rng, axis, d):
    ei = np.array([3.0, 2.0, 1.0])
    ej = np.array([2.5, 1.5, 0.8])
    # only the x-axis touch remains the maximiser when slightly overlapping (d > ~5.4)
    if axis != 0 and d < 7:
        d = ei[axis] + ej[axis] + (d - 6.0) * 0.05
    xi = np.zeros(3)
    xi[axis] = d
    s, n, pi, pj = one(ELLIPSOID, ei, xi, ID, ELLIPSOID, ej, np.zeros(3), ID)
    assert s == pytest.approx(d - ei[axis] - ej[axis], abs=1e-13)
    e = np.zeros(3)
    e[axis] = 1.0
    np.testing.assert_allclose(n, e, atol=1e-12)
    # rotated copies
    for _ in range(3):
        xi2, qi2, xj2, qj2, Rm, sh = rotate_config(rng, xi, ID, np.zeros(3), ID)
        s2, n2, pi2, pj2 = one(ELLIPSOID, ei, xi2, qi2, ELLIPSOID, ej, xj2, qj2)
        assert s2 == pytest.approx(s, abs=1e-12 * 10)
        np.testing.assert_allclose(n2, Rm @ n, atol=1e-9)
        np.testing.assert_allclose(pi2, Rm @ pi + sh, atol=1e-9)


def test_ellipsoid_sphere_on_axes():
    e = np.array([3.0, 2.0, 1.0])
    for axis in range(3):
        for d in (5.0, e[axis] + 0.1, e[axis] - 0.2):
            xs = np.zeros(3)
            xs[axis] = d
            s, n, pi, pj = one(SPHERE, [0.5, 0, 0], xs, ID, ELLIPSOID, e, np.zeros(3), ID)
            assert s == pytest.approx(d - e[axis] - 0.5, abs=1e-14)
            np.testing.assert_allclose(n[axis], 1.0, atol=1e-14)
            s2, n2, pi2, pj2 = one(ELLIPSOID, e, np.zeros(3), ID, SPHERE, [0.5, 0, 0], xs, ID)
            assert s2 == s
            np.testing.assert_allclose(n2, -n)
            np.testing.assert_allclose(pi2, pj)
    # inside on the minor axis: nearest boundary point is the axis end
    s, n, pi, pj = one(SPHERE, [0.25, 0, 0], [0, 0, 0.3], ID, ELLIPSOID, e, np.zeros(3), ID)
    assert s == pytest.approx(-(1.0 - 0.3) - 0.25, abs=1e-14)
    # centre of the ellipsoid: deterministic, depth = minor semi-axis
    s, n, pi, pj = one(SPHERE, [0.25, 0, 0], [0, 0, 0], ID, ELLIPSOID, e, np.zeros(3), ID)
    assert s == pytest.approx(-1.25, abs=1e-14) and abs(abs(n[2]) - 1) < 1e-14


def test_ellipsoid_spherocylinder_exact():
    e = np.array([3.0, 2.0, 1.0])
    qx = q_axis_angle([0, 1, 0], np.pi / 2)
    # capsule parallel to the x axis above the ellipsoid (z = 2): sep = 2 - 1 - R
    s, n, pi, pj = one(SPHEROCYLINDER, [0.3, 2.0, 0], [0.4, 0.0, 2.0], qx, ELLIPSOID, e, np.zeros(3), ID)
    assert s == pytest.approx(2.0 - 1.0 - 0.3, abs=1e-12)
    np.testing.assert_allclose(n, [0, 0, 1.0], atol=1e-7)
    # capsule along z pointing at the ellipsoid: sep = 4 - L/2 - 1 - R
    s, n, pi, pj = one(SPHEROCYLINDER, [0.3, 2.0, 0], [0.0, 0.0, 4.0], ID, ELLIPSOID, e, np.zeros(3), ID)
    assert s == pytest.approx(4.0 - 1.0 - 1.0 - 0.3, abs=1e-13)
    np.testing.assert_allclose(pi, [0, 0, 2.7], atol=1e-13)
    np.testing.assert_allclose(pj, [0, 0, 1.0], atol=1e-13)
    # capsule through the centre along z (kink of the sdf on the medial plane): sep = -c - R
    s, n, pi, pj = one(ELLIPSOID, e, np.zeros(3), ID, SPHEROCYLINDER, [0.3, 2.0, 0], [0.0, 0.0, 0.1], ID)
    assert s == pytest.approx(-1.0 - 0.3, abs=1e-11)
