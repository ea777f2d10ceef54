"""contact.drop_axial_torque: the rows exert no torque about the symmetry axis of a spherocylinder.

A frictionless contact force on a surface of revolution has no moment about its axis, and the level-0 rows
(taken at the start of the step) agree to rounding; rows appended at a trial configuration where a rod has
turned do not, and the LCP then spins the rod about its start axis.  The pinched bed of
tests/test_line_contacts_mpi.py (16 rods pressed together between two walls and twisted by torques perpendicular
to their axes) with rows linearised at rotation-limited trials shows that spin; with the option the contact
torque of every rod is perpendicular to its axis at the start of the step, and the steps still keep every
overlap below overlap_tol, on any number of ranks."""
import copy

import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi import Simulation
from relcp_mpi.basics import quaternion
from relcp_mpi.config.deck import DeckError, validate
from tests.helpers import same_on_sub_communicators
from tests.test_line_contacts_mpi import pinched_bed


def _deck(drop):
    deck = copy.deepcopy(pinched_bed(False, max_iter=5000, fallback="ipm"))
    deck["contact"].update(row_rotation_limit=0.35, drop_axial_torque=drop)
    return deck


def _axial_torque(deck, comm):
    """Run ``deck``; per step the largest |contact torque . start axis| over the rods, relative to the largest
    contact torque component, and the step diagnostics."""
    sim = Simulation.from_deck(deck, comm=comm)
    ratios = []
    start = {"q": sim.gather("q")[1]}

    def record(s):
        _, q = s.gather("q")
        _, f = s.gather("contact_force")
        axis = quaternion.to_matrix(start["q"])[:, :, 2]
        tau = f[:, 3:]
        ratios.append(np.abs(np.einsum("ij,ij->i", tau, axis)).max() / np.abs(tau).max())
        start["q"] = q

    sim.run(None, writers=[], on_step=record)
    return sim, np.array(ratios), sim.history


def test_rows_exert_no_torque_about_the_rod_axis():
    _, ratio_off, d_off = _axial_torque(_deck(False), MPI.COMM_SELF)
    _, ratio_on, d_on = _axial_torque(_deck(True), MPI.COMM_SELF)
    assert max(d["depth"] for d in d_off) >= 2          # rows appended at turned trials (else nothing to see)
    assert ratio_off.max() > 1e-3                       # the spurious axial torque exists without the option
    assert ratio_on.max() < 1e-12                       # and is gone with it
    for d in d_on:
        assert d["max_overlap"] <= 1e-3
        assert d["residual"] <= 1e-6


@pytest.mark.mpi
def test_axial_torque_dropped_on_any_rank_count(hang_guard):
    deck = _deck(True)
    ref, ratios, dref = _axial_torque(deck, MPI.COMM_SELF)
    assert ratios.max() < 1e-12
    assert same_on_sub_communicators(deck, ref, dref) == []


def test_drop_axial_torque_must_be_a_boolean():
    deck = _deck(True)
    deck["contact"]["drop_axial_torque"] = "yes please"
    with pytest.raises(DeckError, match="contact.drop_axial_torque"):
        validate(deck)


def test_symmetry_axes_of_rods_and_rings_only():
    """The axis along which torques are dropped: body z (rotated to the lab frame) of spherocylinders and rings,
    none for spheres and ellipsoids."""
    from types import SimpleNamespace

    from relcp_mpi.bodies.shapes import ELLIPSOID, RING, SPHERE, SPHEROCYLINDER
    from relcp_mpi.stepper.relcp import _symmetry_axes
    rng = np.random.default_rng(4)
    q = quaternion.normalize(rng.normal(size=(8, 4)))
    kind = np.array([SPHERE, SPHEROCYLINDER, ELLIPSOID, RING] * 2)
    axes = _symmetry_axes(SimpleNamespace(kind=kind, q0=q))
    z = quaternion.to_matrix(q) @ np.array([0.0, 0.0, 1.0])
    rev = (kind == SPHEROCYLINDER) | (kind == RING)
    assert np.allclose(axes[rev], z[rev], atol=1e-15)
    assert np.allclose(np.linalg.norm(axes[rev], axis=1), 1.0)
    assert np.all(axes[~rev] == 0.0)


def test_contact_forces_on_rods_and_rings_have_no_axial_moment():
    """The premise of the option: at any configuration the SNSD contact normal of a rod or a ring lies in a plane
    through the body's axis, so (p - x) x n has no component along the axis (random close pairs of both kinds)."""
    from relcp_mpi.bodies.shapes import RING, SPHEROCYLINDER
    from relcp_mpi.geometry.contact import pair_snsd_indexed
    rng = np.random.default_rng(8)
    k = 60
    kind = np.repeat([SPHEROCYLINDER, RING], k)
    shape = np.concatenate([np.tile([0.5, 1.5, 0.0], (k, 1)), np.tile([1.0, 0.2, 0.0], (k, 1))])
    X = rng.uniform(-1.5, 1.5, size=(2 * k, 3))
    Q = quaternion.normalize(rng.normal(size=(2 * k, 4)))
    ia = np.concatenate([np.arange(0, k, 2), np.arange(k, 2 * k, 2)])          # rod-rod and ring-ring pairs
    ib = np.concatenate([np.arange(1, k, 2), np.arange(k + 1, 2 * k, 2)])
    g = pair_snsd_indexed(kind, shape, X, Q, ia, ib, tol=1e-12)
    ok = g.converged
    axis = quaternion.to_matrix(Q)[:, :, 2]
    for body, p, sign in ((ia, g.p_i, 1.0), (ib, g.p_j, -1.0)):
        moment = np.einsum("ij,ij->i", np.cross(p - X[body], sign * g.normal), axis[body])
        lever = np.linalg.norm(p - X[body], axis=1)
        assert np.all(np.abs(moment[ok]) <= 1e-7 * np.maximum(lever[ok], 1.0))


def test_spin_about_the_axis_does_not_tip_it():
    """advance with axes: the spin part of omega turns a body about its own axis first, so the axis moves on the
    great circle of omega's perpendicular part (exactly), whatever the spin; without axes it is the plain
    exp(omega dt) update, bit for bit, and both agree to first order in dt."""
    from relcp_mpi.stepper.integrator import advance
    rng = np.random.default_rng(11)
    n, dt = 50, 0.05
    q = quaternion.normalize(rng.normal(size=(n, 4)))
    U = rng.normal(size=(n, 6)) * 10.0
    a = quaternion.to_matrix(q)[:, :, 2]
    axis = a.copy()
    axis[::5] = 0.0                                       # bodies without an axis: the plain update
    x_plain, q_plain = advance(np.zeros((n, 3)), q, U, dt)
    x_axis, q_axis = advance(np.zeros((n, 3)), q, U, dt, axis)
    assert np.array_equal(x_plain, x_axis)
    assert np.array_equal(q_axis[::5], q_plain[::5])
    rev = np.any(axis != 0.0, axis=1)
    w = U[:, 3:]
    w_perp = w - np.einsum("ij,ij->i", w, a)[:, None] * a
    expected = quaternion.to_matrix(quaternion.integrate(q, w_perp, dt))[:, :, 2]
    got = quaternion.to_matrix(q_axis)[:, :, 2]
    assert np.allclose(got[rev], expected[rev], atol=1e-13)
    plain = quaternion.to_matrix(q_plain)[:, :, 2]
    assert not np.allclose(plain[rev], expected[rev], atol=1e-6)      # the plain update tips it (big spins here)
    # first order: a small step gives the same axis up to O(dt^2)
    _, q1 = advance(np.zeros((n, 3)), q, U, 1e-5, axis)
    _, q0 = advance(np.zeros((n, 3)), q, U, 1e-5)
    assert np.allclose(quaternion.to_matrix(q1)[:, :, 2], quaternion.to_matrix(q0)[:, :, 2], atol=1e-7)


def test_rod_spun_between_walls_stays_in_the_plane():
    """A rod between two walls (clearance 0.02) driven by a torque with a component along its axis and one about
    the wall normal: with the plain update the spin tips the axis into the walls and the step needs recursion
    levels (tests/test_wall_pinch.py builds on that); with drop_axial_torque the axis stays in the plane, no wall
    row is needed beyond level 0 and no overlap appears."""
    from tests.helpers import run_sim
    from tests.test_wall_pinch import _spun_rod
    # one step: later the fixed lab torque has a part perpendicular to the turned axis, which tilts it for real
    _, d_off = run_sim(_spun_rod(steps=1), comm=MPI.COMM_SELF)            # pinned off there
    deck = _spun_rod(steps=1)
    deck["contact"]["drop_axial_torque"] = True
    sim, d_on = run_sim(deck, comm=MPI.COMM_SELF)
    assert max(d["depth"] for d in d_off) >= 1
    assert max(d["depth"] for d in d_on) == 0
    assert max(d["max_overlap"] for d in d_on) <= 1e-3
    _, q = sim.gather("q")
    assert abs(quaternion.to_matrix(q)[0, 2, 2]) < 1e-12            # the axis' z component: still in the plane
    # two steps: the real tilt of the second is held by the level-0 wall rows, again without overlap
    deck2 = _spun_rod()
    deck2["contact"]["drop_axial_torque"] = True
    _, d2 = run_sim(deck2, comm=MPI.COMM_SELF)
    assert max(d["max_overlap"] for d in d2) <= 1e-3
