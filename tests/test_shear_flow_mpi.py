"""Shear flow with Lees--Edwards boundaries on several ranks (issue 13, item 3): the same answer as on one
rank, and a pair colliding across the sheared boundary kept apart when its bodies live on different ranks.

Run under ``mpirun -n 2`` (or 4): sub-communicators of every size up to the world size run the same deck and
are compared against a COMM_SELF run on each rank.
"""
import numpy as np
import pytest
from mpi4py import MPI

from tests.helpers import make_deck, run_sim
from tests.test_shear_flow import check_pair_history, pair_distance_history


def _split(size):
    world = MPI.COMM_WORLD
    return world.Split(0 if world.rank < size else MPI.UNDEFINED, world.rank)


def _suspension(shape, decomposition):
    """A sheared periodic suspension (about 10 % volume fraction), Lees--Edwards along y; the gradient axis is
    split between ranks (Cartesian grid 1 x P x 1 is not forced: the default grid splits x first, RCB splits
    the longest axis), so pairs cross both rank and sheared boundaries."""
    shape = dict(shape)
    gen = dict(shape, count=shape.pop("count"), method="random", orientation="random",
               region={"lo": [0.0, 0.0, 0.0], "hi": [6.0, 8.0, 6.0]})
    return make_deck(time={"dt": 0.05, "steps": 40}, seed=5,
                     box={"lo": [0, 0, 0], "hi": [6, 8, 6], "periodic": [True, True, True]}, generate=[gen],
                     flow={"type": "shear", "rate": 2.0}, contact={"overlap_tol": 1e-3, "skin": 0.3},
                     solver={"tol": 1e-8}, parallel={"decomposition": decomposition})


SHAPES = {"sphere": {"shape": "sphere", "radius": 0.6, "count": 60},
          "ellipsoid": {"shape": "ellipsoid", "axes": [0.7, 0.35, 0.35], "count": 60}}


@pytest.mark.mpi
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("decomposition", ["cartesian", "rcb"])
def test_sheared_suspension_same_on_every_rank_count(shape, decomposition):
    world = MPI.COMM_WORLD
    deck = _suspension(SHAPES[shape], decomposition)
    ref, dref = run_sim(deck, comm=MPI.COMM_SELF)
    g_ref, x_ref = ref.gather()
    _, q_ref = ref.gather("q")
    assert max(d["active"] for d in dref) >= 3              # real contacts
    assert max(d["max_overlap"] for d in dref) <= 1e-3
    for size in range(2, world.size + 1):
        sub = _split(size)
        ok = True
        if sub != MPI.COMM_NULL:
            sim, d = run_sim(deck, comm=sub)
            g, x = sim.gather()
            _, q = sim.gather("q")
            ok = (np.array_equal(g, g_ref) and np.allclose(x, x_ref, atol=1e-5)
                  and np.allclose(np.abs(np.einsum("ij,ij->i", q, q_ref)), 1.0, atol=1e-8)
                  and [e["constraints"] for e in d] == [e["constraints"] for e in dref]
                  and sim.state.shear_offset == ref.state.shear_offset
                  and np.allclose([e["stress_xy"] for e in d], [e["stress_xy"] for e in dref], rtol=1e-4,
                                  atol=1e-8))
            sub.Free()
        assert world.allreduce(ok, op=MPI.LAND), f"{size} ranks differ from 1 rank"


@pytest.mark.mpi
def test_contact_across_sheared_boundary_between_ranks():
    """The pair of tests/test_shear_flow.py on all ranks (the two spheres and their images are owned by
    different ranks for part of the run); same checks, and the same trajectory as on one rank."""
    rec = pair_distance_history(MPI.COMM_WORLD)
    check_pair_history(rec)
    ref = pair_distance_history(MPI.COMM_SELF)
    assert np.allclose([r[0] for r in rec], [r[0] for r in ref], atol=1e-6)
