"""Brownian motion (issue 13 item 1): the same Brownian trajectory on 1, 2 and 3 ranks.

The noise of a body is keyed by (seed, step, gid), so a run with contacts must give the same constraint
counts each step and the same final positions and orientations within the solver tolerance on every rank
count.  Run under ``mpirun -n 3`` (sub-communicators of 2 and 3 ranks are compared with a COMM_SELF run on
each rank; under ``-n 2`` only 1 and 2 ranks are compared).
"""
import numpy as np
import pytest
from mpi4py import MPI

from tests.helpers import make_deck, run_sim, same_on_sub_communicators

SHAPES = {
    "sphere": {"shape": "sphere", "radius": 0.54},
    "ellipsoid": {"shape": "ellipsoid", "axes": [0.6, 0.35, 0.3]},
}


def _deck(shape, decomposition="cartesian"):
    # a crowded periodic box: the noise pushes bodies into each other (contacts every step)
    gen = dict(SHAPES[shape], count=48, method="lattice", spacing=1.2, orientation="random",
               region={"lo": [0.0, 0.0, 0.0], "hi": [4.8, 4.8, 3.6]})
    return make_deck(time={"dt": 0.01, "steps": 10}, seed=29, fluid={"viscosity": 1.0, "kT": 3.0},
                     box={"lo": [0, 0, 0], "hi": [4.8, 4.8, 3.6], "periodic": [True, True, True]},
                     generate=[gen], contact={"overlap_tol": 1e-3, "skin": 0.15}, solver={"tol": 1e-8},
                     parallel={"decomposition": decomposition})


def _unwrap_close(x, x_ref, box, atol):
    d = x - x_ref
    d -= box * np.round(d / box)              # a body may sit across the periodic boundary on one run only
    return np.all(np.abs(d) <= atol)


@pytest.mark.mpi
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_same_brownian_trajectory_on_every_rank_count(shape):
    deck = _deck(shape)
    ref, dref = run_sim(deck, comm=MPI.COMM_SELF)
    _, x_ref = ref.gather()
    assert max(d["active"] for d in dref) >= 5 and sum(d["active"] > 0 for d in dref) >= 8   # contacts
    start = make_deck(**{k: v for k, v in deck.items() if k not in ("fluid",)})
    _, x_cold = run_sim(start, comm=MPI.COMM_SELF, steps=0)[0].gather()
    assert np.max(np.abs(x_ref - x_cold)) > 0.05               # and the bodies did move by diffusion
    bad = same_on_sub_communicators(deck, ref, dref, box=np.array([4.8, 4.8, 3.6]))
    assert not bad, f"{shape}: {bad} ranks differ from 1 rank"


@pytest.mark.mpi
def test_rcb_brownian_run_matches_one_rank():
    world = MPI.COMM_WORLD
    deck = _deck("sphere", decomposition="rcb")
    ref, _ = run_sim(deck, comm=MPI.COMM_SELF)
    par, _ = run_sim(deck, comm=world)
    g1, x1 = ref.gather()
    g2, x2 = par.gather()
    assert np.array_equal(g1, g2) and _unwrap_close(x2, x1, np.array([4.8, 4.8, 3.6]), 1e-5)
