"""Comparison of the batched kernels against the independent brute-force oracle (geometry/bruteforce.py)."""
import numpy as np
import pytest

from relcp_mpi.bodies.shapes import SPHERE, SPHEROCYLINDER, ELLIPSOID, bounding_radius
from relcp_mpi.geometry import quaternion as Q
from relcp_mpi.geometry import bruteforce as bf
from relcp_mpi.geometry.contact import pair_snsd

ID = np.array([1.0, 0.0, 0.0, 0.0])


def shape_of(rng, kind, aspect=4.0):
    if kind == SPHERE:
        return np.array([rng.uniform(0.3, 1.5), 0.0, 0.0])
    if kind == SPHEROCYLINDER:
        return np.array([rng.uniform(0.2, 0.8), rng.uniform(0.0, 4.0), 0.0])
    e = np.array([1.0, rng.uniform(1.0, aspect), aspect]) * rng.uniform(0.3, 1.0)
    return rng.permutation(e)


def config(rng, ki, kj, aspect=4.0, spread=(0.2, 1.2)):
    si, sj = shape_of(rng, ki, aspect), shape_of(rng, kj, aspect)
    reach = bounding_radius([ki], si)[0] + bounding_radius([kj], sj)[0]
    xi = rng.normal(size=3)
    d = rng.normal(size=3)
    xj = xi - d / np.linalg.norm(d) * rng.uniform(*spread) * reach
    return si, xi, Q.random_unit(rng, 1)[0], sj, xj, Q.random_unit(rng, 1)[0], reach


def kernel(ki, si, xi, qi, kj, sj, xj, qj):
    g = pair_snsd(ki, si[None], xi[None], qi[None], kj, sj[None], xj[None], qj[None])
    return g.sep[0], g.normal[0]


def compare(rng, ki, kj, n, aspect=4.0, spread=(0.2, 1.2), tol=1e-8):
    overlaps = 0
    for _ in range(n):
        si, xi, qi, sj, xj, qj, reach = config(rng, ki, kj, aspect, spread)
        s, nrm = kernel(ki, si, xi, qi, kj, sj, xj, qj)
        s_bf, n_bf = bf.bruteforce_snsd(ki, si, xi, qi, kj, sj, xj, qj)
        overlaps += s < 0
        assert abs(s - s_bf) <= tol * reach, (ki, kj, s, s_bf)
        if n_bf is not None:
            assert np.linalg.norm(nrm - n_bf) <= 1e-4, (nrm, n_bf)
    return overlaps


def test_oracle_reproduces_exact_cases():
    e = np.array([3.0, 2.0, 1.0])
    s, u = bf.bruteforce_snsd(ELLIPSOID, e, [7.0, 0, 0], ID, ELLIPSOID, [2.5, 1.5, 0.8], [0, 0, 0], ID)
    assert s == pytest.approx(7.0 - 5.5, abs=1e-9)
    np.testing.assert_allclose(u, [1, 0, 0], atol=1e-4)
    s, _ = bf.bruteforce_snsd(SPHERE, [0.5, 0, 0], [0, 0, 0.3], ID, ELLIPSOID, e, [0, 0, 0], ID)
    assert s == pytest.approx(-0.7 - 0.5, abs=1e-9)
    s, _ = bf.bruteforce_snsd(SPHEROCYLINDER, [0.2, 3.0, 0], [0, 0.7, 0], [np.cos(np.pi / 4), 0, np.sin(np.pi / 4), 0],
                              SPHEROCYLINDER, [0.3, 3.0, 0], [0, 0, 0], ID)
    assert s == pytest.approx(0.2, abs=1e-12)


@pytest.mark.parametrize("ki,kj", [(SPHERE, SPHERE), (SPHERE, SPHEROCYLINDER), (SPHEROCYLINDER, SPHERE),
                                   (SPHEROCYLINDER, SPHEROCYLINDER)])
def test_round_pairs_vs_oracle(rng, ki, kj):
    overl = compare(rng, ki, kj, 12, tol=1e-10)
    assert overl > 0


def test_near_parallel_spherocylinders_vs_oracle(rng):
    for k in range(8):
        ang = 10.0 ** -rng.uniform(2, 7)
        qi = np.r_[np.cos(ang / 2), np.sin(ang / 2) * np.array([1.0, 0, 0])]
        xi = np.array([rng.uniform(-0.2, 0.2), rng.uniform(-0.5, 0.5), rng.uniform(-2, 2)])
        s, _ = kernel(SPHEROCYLINDER, np.array([0.2, 3.0, 0]), xi, qi,
                      SPHEROCYLINDER, np.array([0.3, 4.0, 0]), np.zeros(3), ID)
        s_bf, _ = bf.bruteforce_snsd(SPHEROCYLINDER, [0.2, 3.0, 0], xi, qi, SPHEROCYLINDER, [0.3, 4.0, 0],
                                     np.zeros(3), ID)
        assert abs(s - s_bf) <= 1e-8, (ang, s, s_bf)


@pytest.mark.parametrize("ki,kj", [(SPHERE, ELLIPSOID), (ELLIPSOID, SPHERE)])
def test_sphere_ellipsoid_vs_oracle(rng, ki, kj):
    overl = compare(rng, ki, kj, 4, spread=(0.1, 1.0))
    assert overl > 0


@pytest.mark.parametrize("ki,kj", [(SPHEROCYLINDER, ELLIPSOID), (ELLIPSOID, SPHEROCYLINDER)])
def test_spherocylinder_ellipsoid_vs_oracle(rng, ki, kj):
    compare(rng, ki, kj, 2, spread=(0.1, 1.0))


@pytest.mark.parametrize("aspect,spread", [(3.0, (0.1, 0.6)), (10.0, (0.1, 0.5)), (20.0, (0.5, 1.0))])
def test_ellipsoid_pairs_vs_oracle(rng, aspect, spread):
    compare(rng, ELLIPSOID, ELLIPSOID, 1, aspect=aspect, spread=spread)


@pytest.mark.parametrize("ki", [SPHERE, SPHEROCYLINDER, ELLIPSOID])
@pytest.mark.parametrize("kj", [SPHERE, SPHEROCYLINDER, ELLIPSOID])
def test_separated_pairs_vs_plain_sampling(rng, ki, kj):
    """Plain dense sampling (2000 points per body, no zoom): for separated pairs the minimum sampled
    distance is an upper bound on sep and exceeds it by at most O(spacing^2 * curvature)."""
    for _ in range(4):
        si, xi, qi, sj, xj, qj, reach = config(rng, ki, kj, spread=(1.05, 1.5))
        s, _ = kernel(ki, si, xi, qi, kj, sj, xj, qj)
        if s <= 0:
            continue
        d = bf.min_sampled_distance(ki, si, xi, qi, kj, sj, xj, qj, n=2000)
        assert s <= d + 1e-12 * reach
        assert d - s <= 0.02 * reach, (s, d)


@pytest.mark.slow
@pytest.mark.parametrize("ki", [SPHERE, SPHEROCYLINDER, ELLIPSOID])
@pytest.mark.parametrize("kj", [SPHERE, SPHEROCYLINDER, ELLIPSOID])
def test_oracle_sweep_slow(ki, kj):
    rng = np.random.default_rng(100 + 3 * ki + kj)
    n = 40 if ELLIPSOID not in (ki, kj) else 12
    compare(rng, ki, kj, n, spread=(0.05, 1.2))
    if ki == kj == ELLIPSOID:
        for aspect in (10.0, 20.0):
            compare(rng, ki, kj, 10, aspect=aspect, spread=(0.05, 1.0))
