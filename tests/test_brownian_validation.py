"""Brownian motion validation (issue 13 item 1), ``slow``: ``.venv/bin/python -m pytest -m slow
tests/test_brownian_validation.py`` (about 3-4 minutes on one core).

* free spheres: MSD(t) = 6 D_t t and <u(t).u(0)> = exp(-2 D_r t) with the Stokes--Einstein coefficients;
* free prolate ellipsoids (semi-axes 0.4, 0.4, 1): body-frame MSD along / across the axis and the axis
  decorrelation against Perrin's closed forms (Kim & Karrila), which are independent of the Carlson-integral
  mobility of the code;
* Brownian hard spheres at volume fraction 0.1: the contact value g(sigma) against Carnahan--Starling.

Every comparison is within 4 standard errors, the error computed from independent samples (bodies x
non-overlapping time windows; independent time blocks for g(r)); the error bars are small enough that a
wrong coefficient (a factor 2 in kT, the drag of the wrong axis) fails by tens of standard errors.  The runs
and estimators are those of ``tools/study_brownian.py`` (which makes the README figure).
"""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.physics import diffusion as dif
from tools.study_brownian import contact_value, diffusion_rows, free_run, hard_sphere_run

pytestmark = pytest.mark.slow


def _check(rows, quantity, max_rel_se):
    rr = [r for r in rows if r["quantity"] == quantity]
    assert rr
    for r in rr:
        assert r["stderr"] < max_rel_se * abs(r["analytic"]), r           # resolving power of the test
        assert abs(r["value"] - r["analytic"]) <= 4 * r["stderr"], r


def test_free_spheres_stokes_einstein():
    dt, window = 0.02, 80                  # D_t dt = 2e-3, D_r dt = 6e-3: rotation-step bias ~1e-3 relative
    arrays, _ = free_run("sphere", 216, window, 10, dt, comm=MPI.COMM_SELF)
    rows = diffusion_rows("sphere", arrays, window, [10, 20, 40, 80], dt)
    _check(rows, "msd", 0.025)
    _check(rows, "axis_corr", 0.03)


def test_free_prolate_ellipsoids_perrin():
    dt, window = 0.05, 80
    arrays, _ = free_run("ellipsoid", 216, window, 8, dt, comm=MPI.COMM_SELF)
    rows = diffusion_rows("ellipsoid", arrays, window, [10, 20, 40, 80], dt)
    p = dif.perrin_prolate(1.0, 0.4, 1.0, 1.0)
    # the two body-frame coefficients differ by 19 %, far more than the error bars: the test tells them apart
    assert p["D_par"] / p["D_perp"] > 1.15
    _check(rows, "msd_par", 0.04)
    _check(rows, "msd_perp", 0.03)
    _check(rows, "axis_corr", 0.035)


def test_hard_sphere_contact_value_carnahan_starling():
    """g(r) of Brownian hard spheres (phi = 0.1) on bins beyond the time-step boundary layer at contact
    (3 relative rms steps), fitted linearly and extrapolated to sigma, against (1 - phi/2)/(1 - phi)^3."""
    edges, g, phi, pressure, density = hard_sphere_run(2500, 1000, comm=MPI.COMM_SELF)
    assert phi == pytest.approx(0.1, abs=1e-3)
    g0, se, gmean = contact_value(edges, g, 1.0, 1.05, 1.25)
    ref = dif.carnahan_starling_contact(phi)
    assert se < 0.04
    assert abs(g0 - ref) <= 4 * se, (g0, se, ref)
    # the structure is there: contact enhancement over the ideal gas far beyond the error
    assert g0 - 1.0 > 5 * se
    # the collision stress of the LCP forces (virial pressure of the constraint forces) against the hard-sphere
    # contact pressure n kT 4 phi g(sigma), errors from 10 consecutive blocks of steps
    p, p_se = dif.mean_and_error([b.mean() for b in np.array_split(pressure, 10)])
    p_ref = density * 1.0 * 4 * phi * ref
    assert p_se < 0.05 * p_ref
    assert abs(p - p_ref) <= 4 * p_se, (p, p_se, p_ref)
