"""Method options from the deck (``solver.options``): validated against the solver registry's table, and
passed through the stepper to the method (issue 11, item 3)."""
import numpy as np
import pytest

from relcp_mpi.config.deck import DeckError, loads
from relcp_mpi.solver.lcp import SolverError
from relcp_mpi.solver.registry import method_info
from tests.helpers import make_deck, run_sim

BODY = "bodies: [{shape: sphere, radius: 1, position: [0,0,0]}]\n"


def _deck(solver):
    return loads("time: {dt: 0.1, steps: 2}\nsolver: " + solver + "\n" + BODY)


def test_options_are_checked_against_the_registry():
    d = _deck("{method: apgd, options: {L_safety: 2, power_iters: 3, restart: false}}")
    assert d["solver"]["options"] == {"L_safety": 2.0, "power_iters": 3, "restart": False}
    assert isinstance(d["solver"]["options"]["L_safety"], float)      # ints accepted for float options
    assert _deck("{method: bbpgd}")["solver"]["options"] == {}
    d = _deck("{method: tao-bncg, options: {tao_options: {tao_bncg_type: gd}}}")
    assert d["solver"]["options"]["tao_options"] == {"tao_bncg_type": "gd"}


@pytest.mark.parametrize("solver, message", [
    ("{method: apgd, options: {step0: 1.0}}", r"solver.options.step0: not an option of method 'apgd' \(its options: "
                                              r"L, L_safety, divergence_every"),
    ("{method: ipm, options: {max_newton: 2.5}}", "solver.options.max_newton: must be an integer, got 2.5"),
    ("{method: ipm, options: {max_newton: true}}", "solver.options.max_newton: must be an integer"),
    ("{method: apgd, options: {restart: 1}}", "solver.options.restart: must be true or false"),
    ("{method: apgd, options: {L: .inf}}", "solver.options.L: must be a number"),
    ("{method: ipm, options: {pc_type: 3}}", "solver.options.pc_type: must be a string"),
    ("{method: apgd, options: [L, 2]}", "solver.options: must be a mapping"),
    ("{method: tao-bncg, options: {tao_options: {a: [1]}}}", "solver.options.tao_options: must be a mapping"),
])
def test_bad_options_are_named(solver, message):
    with pytest.raises(DeckError, match=message):
        _deck(solver)


def test_every_registered_option_type_is_checkable():
    # the deck's type table must cover every type the registry declares (a new option type would otherwise
    # reach the KeyError in the message formatting instead of a clear problem)
    from relcp_mpi.config.deck import _OPTION_TYPES
    from relcp_mpi.solver.registry import method_names
    for name in method_names():
        assert set(method_info(name).options.values()) <= set(_OPTION_TYPES), name


def _pressed_spheres(solver):
    """A column of 4 spheres on a wall under gravity: every step needs a real LCP solve."""
    bodies = [{"shape": "sphere", "radius": 0.5, "position": [0.0, 0.0, 0.5 + 1.0 * k]} for k in range(4)]
    return make_deck(time={"dt": 0.05, "steps": 3}, box={"lo": [-4, -4, -1], "hi": [4, 4, 8]},
                     walls=[{"point": [0, 0, 0], "normal": [0, 0, 1]}], bodies=bodies,
                     forces={"body_force": [0.0, 0.0, -5.0]},
                     contact={"overlap_tol": 1e-3, "skin": 0.3}, solver=solver)


def test_options_reach_the_method():
    # ipm with max_newton 1 cannot solve the pressed column: the option must arrive at the solver
    with pytest.raises(SolverError, match="'ipm'"):
        run_sim(_pressed_spheres({"method": "ipm", "tol": 1e-8, "options": {"max_newton": 1}}))
    sim, _ = run_sim(_pressed_spheres({"method": "ipm", "tol": 1e-8, "options": {"max_newton": 60}}))
    z = np.sort(sim.gather("x")[1][:, 2])
    # the spheres rest on the wall and on each other: centres at 0.5, 1.5, 2.5, 3.5 to the overlap tolerance
    assert np.all(np.abs(z - (0.5 + np.arange(4))) < 1e-3 + 1e-8)


def test_same_physics_with_tuned_options():
    # apgd with a different step-size estimate and no restart: same trajectory to the solver tolerance
    a, _ = run_sim(_pressed_spheres({"method": "apgd", "tol": 1e-9}))
    b, _ = run_sim(_pressed_spheres({"method": "apgd", "tol": 1e-9,
                                     "options": {"power_iters": 2, "L_safety": 3.0, "restart": False}}))
    assert np.max(np.abs(a.gather("x")[1] - b.gather("x")[1])) < 1e-6


def test_fallback_solves_what_the_method_cannot():
    # apgd limited to 2 iterations cannot solve the pressed column; the ipm fallback (the default) can, from the
    # same warm start, and the step reports it; with fallback none the run fails
    deck = _pressed_spheres({"method": "apgd", "tol": 1e-8, "max_iter": 2})
    assert deck["solver"]["fallback"] == "ipm"
    sim, diags = run_sim(deck)
    assert diags[0].get("fallback_solves", 0) >= 1          # the cold first step at least
    z = np.sort(sim.gather("x")[1][:, 2])
    assert np.all(np.abs(z - (0.5 + np.arange(4))) < 1e-3 + 1e-8)
    with pytest.raises(SolverError, match="'apgd'"):
        run_sim(_pressed_spheres({"method": "apgd", "tol": 1e-8, "max_iter": 2, "fallback": "none"}))
    # (both failing -- an infeasible LCP -- gives one error naming both: tests/test_lcp_certificate.py)
