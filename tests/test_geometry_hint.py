"""Warm-start hints of pair_snsd (ellipsoid pairs): the answer must not depend on the hint, good or bad."""
import numpy as np
import pytest

from relcp_mpi.bodies.shapes import SPHERE, SPHEROCYLINDER, ELLIPSOID
from relcp_mpi.geometry import quaternion as Q
from relcp_mpi.geometry import ellipsoid as ell
from relcp_mpi.geometry.contact import pair_snsd, GeometryError

from tests.test_geometry_properties import random_pairs


def suspension_pairs(rng, m, lo=1.0, hi=2.3):
    """Equal prolate ellipsoids (1, .5, .5), random orientations, centre distance uniform in [lo, hi]."""
    s = np.broadcast_to([1.0, 0.5, 0.5], (m, 3)).copy()
    xi = rng.uniform(0, 20, (m, 3))
    d = rng.normal(size=(m, 3))
    d *= (rng.uniform(lo, hi, m) / np.linalg.norm(d, axis=1))[:, None]
    return s, xi, Q.random_unit(rng, m), s.copy(), xi - d, Q.random_unit(rng, m)


def small_motion(rng, xi, qi, xj, qj, dx=0.01, dth=0.01):
    m = xi.shape[0]
    return (xi + dx * rng.normal(size=(m, 3)), Q.integrate(qi, dth * rng.normal(size=(m, 3)), 1.0),
            xj + dx * rng.normal(size=(m, 3)), Q.integrate(qj, dth * rng.normal(size=(m, 3)), 1.0))


def assert_same(g, h, S, normal_tol=1e-8):
    """Same certified optimum: sep to 1e-11 S (certificates are 1e-11 S), normals / witness points closely."""
    np.testing.assert_array_equal(g.converged, h.converged)
    np.testing.assert_allclose(h.sep, g.sep, rtol=0, atol=1e-11 * S)
    np.testing.assert_allclose(h.normal, g.normal, rtol=0, atol=normal_tol)
    np.testing.assert_allclose(h.p_i, g.p_i, rtol=0, atol=normal_tol * S)
    np.testing.assert_allclose(h.p_j, g.p_j, rtol=0, atol=normal_tol * S)


def scale_of(si, xi, sj, xj):
    return (np.linalg.norm(xi - xj, axis=1) + si.max(axis=1) + sj.max(axis=1))[:, None].max()


def bad_hints(rng, n):
    m = n.shape[0]
    rand = rng.normal(size=(m, 3))
    mixed = n.copy()
    k = rng.integers(0, 5, m)
    mixed[k == 0] = np.nan
    mixed[k == 1] = -n[k == 1]
    mixed[k == 2] = rand[k == 2]
    mixed[k == 3] = 0.0
    mixed[k == 4] *= 1e5
    odd = n.copy()
    odd[::3] = np.inf
    odd[1::3, 0] = np.nan                       # partially NaN rows count as "no hint"
    return {"random": rand, "opposite": -n, "mixed": mixed, "nan": np.full((m, 3), np.nan),
            "zero": np.zeros((m, 3)), "inf/partial nan": odd, "orthogonal": np.cross(n, rand)}


@pytest.mark.parametrize("batch", ["suspension", "random"])
def test_hinted_equals_unhinted_after_small_motion(rng, batch):
    m = 2000
    if batch == "suspension":
        si, xi, qi, sj, xj, qj = suspension_pairs(rng, m)
    else:
        si, xi, qi, sj, xj, qj = random_pairs(rng, ELLIPSOID, ELLIPSOID, m, spread=(0.1, 1.3))
    g0 = pair_snsd(ELLIPSOID, si, xi, qi, ELLIPSOID, sj, xj, qj)
    xi1, qi1, xj1, qj1 = small_motion(rng, xi, qi, xj, qj)
    g = pair_snsd(ELLIPSOID, si, xi1, qi1, ELLIPSOID, sj, xj1, qj1)
    h = pair_snsd(ELLIPSOID, si, xi1, qi1, ELLIPSOID, sj, xj1, qj1, hint=g0.normal)
    assert np.all(g.converged)
    assert 0.05 < np.mean(g.sep < 0) < 0.95                 # both paths are exercised
    assert_same(g, h, scale_of(si, xi1, sj, xj1))
    # the exact current normals as hints
    k = pair_snsd(ELLIPSOID, si, xi1, qi1, ELLIPSOID, sj, xj1, qj1, hint=g.normal)
    assert_same(g, k, scale_of(si, xi1, sj, xj1))


@pytest.mark.parametrize("kind", ["random", "opposite", "mixed", "nan", "zero", "inf/partial nan", "orthogonal"])
def test_bad_hints_do_not_change_the_answer(rng, kind):
    m = 1500
    si, xi, qi, sj, xj, qj = suspension_pairs(rng, m, lo=0.6, hi=2.3)
    g = pair_snsd(ELLIPSOID, si, xi, qi, ELLIPSOID, sj, xj, qj)
    hint = bad_hints(rng, g.normal)[kind]
    h = pair_snsd(ELLIPSOID, si, xi, qi, ELLIPSOID, sj, xj, qj, hint=hint)
    assert_same(g, h, scale_of(si, xi, sj, xj))


def test_hints_on_elongated_ellipsoids(rng):
    for aspect in (10.0, 20.0):
        m = 300
        si, xi, qi, sj, xj, qj = random_pairs(rng, ELLIPSOID, ELLIPSOID, m, aspect=aspect, spread=(0.05, 1.2))
        g0 = pair_snsd(ELLIPSOID, si, xi, qi, ELLIPSOID, sj, xj, qj)
        xi1, qi1, xj1, qj1 = small_motion(rng, xi, qi, xj, qj, dx=0.05, dth=0.05)
        g = pair_snsd(ELLIPSOID, si, xi1, qi1, ELLIPSOID, sj, xj1, qj1)
        S = scale_of(si, xi1, sj, xj1)
        for hint in (g0.normal, -g0.normal, rng.normal(size=(m, 3))):
            assert_same(g, pair_snsd(ELLIPSOID, si, xi1, qi1, ELLIPSOID, sj, xj1, qj1, hint=hint), S,
                        normal_tol=1e-7)


def test_hint_path_is_used_for_separated_pairs(rng, monkeypatch):
    """With exact hints only pairs whose hint does not prove separation reach the hint-free path."""
    m = 1000
    si, xi, qi, sj, xj, qj = suspension_pairs(rng, m)
    g = pair_snsd(ELLIPSOID, si, xi, qi, ELLIPSOID, sj, xj, qj)
    seen = []
    real = ell._ee_global

    def spy(P, *args):
        seen.append(P.shape[1])
        return real(P, *args)

    monkeypatch.setattr(ell, "_ee_global", spy)
    h = pair_snsd(ELLIPSOID, si, xi, qi, ELLIPSOID, sj, xj, qj, hint=g.normal)
    assert seen == [np.sum(g.sep <= 0)]
    assert_same(g, h, scale_of(si, xi, sj, xj))
    # separated pairs hinted with their exact normal need no Newton step: converged even with max_iter=1
    k = pair_snsd(ELLIPSOID, si, xi, qi, ELLIPSOID, sj, xj, qj, hint=g.normal, max_iter=1, check=False)
    assert np.all(k.converged[g.sep > 0])


def test_hint_in_mixed_batches_and_validation(rng):
    m = 90
    kinds = np.array([SPHERE, SPHEROCYLINDER, ELLIPSOID])
    ki = kinds[rng.integers(0, 3, m)]
    kj = kinds[rng.integers(0, 3, m)]
    si, xi, qi, sj, xj, qj = random_pairs(rng, ELLIPSOID, ELLIPSOID, m, spread=(0.2, 1.3))
    si[ki == SPHERE] = [0.7, 0, 0]
    sj[kj == SPHERE] = [0.5, 0, 0]
    si[ki == SPHEROCYLINDER] = [0.3, 2.0, 0]
    sj[kj == SPHEROCYLINDER] = [0.4, 1.0, 0]
    g = pair_snsd(ki, si, xi, qi, kj, sj, xj, qj)
    S = scale_of(si, xi, sj, xj)
    for hint in (g.normal, -g.normal, rng.normal(size=(m, 3))):
        h = pair_snsd(ki, si, xi, qi, kj, sj, xj, qj, hint=hint)
        assert_same(g, h, S)
        ee = (ki == ELLIPSOID) & (kj == ELLIPSOID)
        np.testing.assert_array_equal(h.sep[~ee], g.sep[~ee])          # ignored for the other kinds
    with pytest.raises(ValueError):
        pair_snsd(ki, si, xi, qi, kj, sj, xj, qj, hint=np.zeros((m - 1, 3)))


def test_hint_non_convergence_is_still_reported(rng):
    m = 60
    si, xi, qi, sj, xj, qj = random_pairs(rng, ELLIPSOID, ELLIPSOID, m, aspect=6.0, spread=(0.05, 0.6))
    hint = rng.normal(size=(m, 3))
    g = pair_snsd(ELLIPSOID, si, xi, qi, ELLIPSOID, sj, xj, qj, max_iter=1, check=False)
    h = pair_snsd(ELLIPSOID, si, xi, qi, ELLIPSOID, sj, xj, qj, max_iter=1, check=False, hint=hint)
    assert np.any(~h.converged)
    with pytest.raises(GeometryError) as err:
        pair_snsd(ELLIPSOID, si, xi, qi, ELLIPSOID, sj, xj, qj, max_iter=1, hint=hint)
    np.testing.assert_array_equal(err.value.pairs, np.nonzero(~h.converged)[0])
    # a hint never loses a certificate that the hint-free path finds
    assert np.all(h.converged[g.converged])
