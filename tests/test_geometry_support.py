"""Support functions and the certified separation lower bound used to screen pairs before the kernels."""
import numpy as np
import pytest

from relcp_mpi.bodies.shapes import ELLIPSOID, RING, SPHERE, SPHEROCYLINDER
from relcp_mpi.geometry import quaternion as Q
from relcp_mpi.geometry.contact import pair_snsd
from relcp_mpi.geometry.support import separation_lower_bound, support
from tests.test_geometry_properties import COMBOS, random_pairs, random_shapes


def _surface_points(kind, shape, n=4000, rng=None):
    """Dense body-frame sample of the surface of one body (for the brute-force support maximum)."""
    rng = rng or np.random.default_rng(0)
    v = rng.normal(size=(n, 3))
    v /= np.linalg.norm(v, axis=1)[:, None]
    if kind == SPHERE:
        return shape[0] * v
    if kind == ELLIPSOID:
        return shape * v
    if kind == SPHEROCYLINDER:
        z = np.where(v[:, 2] >= 0, 0.5 * shape[1], -0.5 * shape[1])
        return shape[0] * v + np.stack([0 * z, 0 * z, z], axis=1)
    t = rng.uniform(0, 2 * np.pi, n)                   # ring: centre circle plus tube sphere
    c = shape[0] * np.stack([np.cos(t), np.sin(t), 0 * t], axis=1)
    return c + shape[1] * v


@pytest.mark.parametrize("kind,shape", [(SPHERE, [0.7, 0, 0]), (SPHEROCYLINDER, [0.4, 2.0, 0]),
                                        (ELLIPSOID, [1.5, 0.6, 0.3]), (RING, [1.2, 0.2, 0])])
def test_support_is_max_over_surface_points(kind, shape):
    rng = np.random.default_rng(3)
    shape = np.array(shape, float)
    m = 40
    q = Q.random_unit(rng, m)
    u = rng.normal(size=(m, 3))
    u /= np.linalg.norm(u, axis=1)[:, None]
    h = support(np.full(m, kind), np.tile(shape, (m, 1)), q, u)
    P = _surface_points(kind, shape, 20000, rng)
    R = Q.to_matrix(q)
    sampled = np.einsum("kij,pj,ki->kp", R, P, u).max(axis=1)
    assert np.all(sampled <= h + 1e-12)                 # no surface point beyond the support plane
    assert np.allclose(sampled, h, atol=0.03 * shape.max())   # and the plane touches the (sampled) body


@pytest.mark.parametrize("ki,kj", COMBOS)
def test_lower_bound_never_exceeds_true_separation(ki, kj):
    rng = np.random.default_rng(11 + 3 * ki + kj)
    m = 400
    si, xi, qi, sj, xj, qj = random_pairs(rng, ki, kj, m, spread=(0.05, 1.5))
    Ki, Kj = np.full(m, ki), np.full(m, kj)
    geo = pair_snsd(Ki, si, xi, qi, Kj, sj, xj, qj, check=False)
    ok = geo.converged
    lb = separation_lower_bound(Ki, si, xi, qi, Kj, sj, xj, qj)
    assert np.all(lb[ok] <= geo.sep[ok] + 1e-9)
    # with the exact normal as hint the bound is tight for separated pairs (the normal is the maximiser)
    lbh = separation_lower_bound(Ki, si, xi, qi, Kj, sj, xj, qj, hint=geo.normal)
    sepd = ok & (geo.sep > 0)
    assert np.all(lbh[ok] <= geo.sep[ok] + 1e-9)
    assert np.allclose(lbh[sepd], geo.sep[sepd], atol=1e-7)
    # a random (bad) hint never breaks the bound, NaN hints are ignored
    bad = rng.normal(size=(m, 3))
    bad[::3] = np.nan
    lbb = separation_lower_bound(Ki, si, xi, qi, Kj, sj, xj, qj, hint=bad)
    assert np.all(lbb[ok] <= geo.sep[ok] + 1e-9) and np.all(lbb >= lb)


def test_coincident_centres_give_no_information():
    s = np.array([[1.0, 0.5, 0.5]])
    lb = separation_lower_bound([ELLIPSOID], s, np.zeros((1, 3)), [[1, 0, 0, 0]], [ELLIPSOID], s,
                                np.zeros((1, 3)), [[1, 0, 0, 0]])
    assert lb[0] == -np.inf
