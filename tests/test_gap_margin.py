"""contact.gap_margin: every LCP row asks for a predicted gap >= gap_margin instead of >= 0.

Bodies pressed together must come to rest that far apart (to the solver's tolerance), a sphere and a rod lying
on a wall alike (the rod at both end caps); the trial check still bounds the overlap by overlap_tol on a jammed
bed, the answer does not depend on the rank count, and the deck key is validated (0 <= gap_margin <=
overlap_tol) and may change on restart (a numerical target gap, like solver.tol).

Serial: .venv/bin/python -m pytest -q tests/test_gap_margin.py
MPI:    mpirun -n 2 tools/mpi_pytest.sh -q --with-mpi -m "mpi and not slow" tests/test_gap_margin.py
"""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.config.deck import DeckError, validate
from relcp_mpi.io.deck_changes import judge
from tests.helpers import make_deck, run_sim, same_on_sub_communicators
from tests.test_line_contacts_mpi import pinched_bed

SELF = MPI.COMM_SELF
TOL = 1e-7          # LCP tolerance of the resting cases [L]


def _resting(margin):
    """A sphere (R 0.5) and a horizontal spherocylinder (R 0.25, L 2) pushed onto the floor z = 0 from 0.02
    above it; 30 steps of dt 0.05 settle both (free fall alone would take ~2 steps)."""
    bodies = [{"shape": "sphere", "radius": 0.5, "position": [-3.0, 0.0, 0.52], "force": [0.0, 0.0, -2.0]},
              {"shape": "spherocylinder", "radius": 0.25, "length": 2.0, "position": [2.0, 0.0, 0.27],
               "orientation": {"axis": [0, 1, 0], "angle": float(np.pi / 2)}, "force": [0.0, 0.0, -2.0],
               "torque": [0.0, 0.3, 0.0]}]
    return make_deck(time={"dt": 0.05, "steps": 30}, box={"lo": [-8, -8, -1], "hi": [8, 8, 4]},
                     walls=[{"point": [0, 0, 0], "normal": [0, 0, 1]}], bodies=bodies,
                     contact={"overlap_tol": 1e-3, "gap_margin": margin},
                     solver={"method": "apgd", "tol": TOL, "max_iter": 20000})


def _floor_gaps(sim):
    """Gap of the sphere and of the rod's two end caps to the floor z = 0 [L]: (sphere, rod end a, rod end b)."""
    from relcp_mpi.geometry import quaternion
    gid, x = sim.gather()
    _, q = sim.gather("q")
    x, q = x[np.argsort(gid)], q[np.argsort(gid)]
    axis = quaternion.to_matrix(q[1:2])[0][:, 2]          # the rod's core runs along its body z axis
    ends = x[1] + np.outer([-1.0, 1.0], axis)              # core end points (L / 2 = 1 from the centre)
    return np.array([x[0, 2] - 0.5, ends[0, 2] - 0.25, ends[1, 2] - 0.25])


@pytest.mark.parametrize("margin", [0.0, 2e-4, 7e-4])
def test_bodies_pressed_on_a_wall_rest_gap_margin_apart(margin):
    sim, diags = run_sim(_resting(margin), comm=SELF)
    gaps = _floor_gaps(sim)
    # resting contact: the predicted gap equals the margin to the LCP's tolerance; the committed gap differs from
    # the prediction only by the (second-order) rotation of the rod in the last step, which is at rest
    assert gaps == pytest.approx(np.full(3, margin), abs=1e-6), gaps
    assert max(d["max_overlap"] for d in diags) < 1e-3


def test_jammed_bed_keeps_the_overlap_guarantee_with_a_margin():
    # the pinched, twisted bed of tests/test_line_contacts_mpi.py: the recursion appends rows in most steps
    deck = pinched_bed(True, tol=1e-4)
    with_margin = validate({**deck, "contact": {**deck["contact"], "gap_margin": 5e-4}})
    _, d0 = run_sim(deck, comm=SELF)
    _, d1 = run_sim(with_margin, comm=SELF)
    assert max(d["max_overlap"] for d in d1) < 1e-3
    # the margin absorbs the LCP tolerance and part of the linearisation error: never more levels than without
    assert sum(d["depth"] for d in d1) <= sum(d["depth"] for d in d0)


@pytest.mark.mpi
def test_margin_same_answer_on_any_rank_count(hang_guard):
    deck = pinched_bed(True, tol=1e-6)
    deck = validate({**deck, "contact": {**deck["contact"], "gap_margin": 5e-4}})
    ref, dref = run_sim(deck, comm=SELF)
    assert max(d["max_overlap"] for d in dref) < 1e-3
    assert same_on_sub_communicators(deck, ref, dref) == []


def test_deck_key_is_validated_and_may_change_on_restart():
    raw = {"name": "t", "time": {"dt": 0.1, "steps": 1},
           "bodies": [{"shape": "sphere", "radius": 0.5, "position": [0, 0, 0]}]}
    assert validate(dict(raw))["contact"]["gap_margin"] == 0.0
    with pytest.raises(DeckError, match="contact.gap_margin"):
        validate(dict(raw, contact={"gap_margin": -1e-4}))
    with pytest.raises(DeckError, match="contact.gap_margin: must be <= contact.overlap_tol"):
        validate(dict(raw, contact={"gap_margin": 2e-3, "overlap_tol": 1e-3}))
    assert judge("contact.gap_margin")[0] == "allowed"
