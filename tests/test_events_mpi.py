"""MPI split of the pair inspection: identical results on 1, 2 and 4 ranks.

Run: mpirun -n 2 python -m pytest --with-mpi tests/test_events_mpi.py  (and -n 4)."""
import os
import tempfile
from fractions import Fraction as F

import pytest
import yaml

from relcp_mpi.events import run_event_deck, simulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(name):
    with open(os.path.join(ROOT, "input_decks", name)) as fh:
        return yaml.safe_load(fh)


def signature(r):
    return (r.status, r.reason, r.t_final, [tuple(x) for x in r.q_final],
            [tuple(x) for x in r.v_final], r.error_final, r.ledger,
            [(e.pair, e.a, e.b, e.E_after, e.nu, e.eps_obs, e.lag, e.v_plus) for e in r.events])


def sub_comms(comm):
    """Communicators of size 2 and 4 (as far as the world size allows); size 1 is the comm=None reference."""
    out = []
    size = comm.Get_size()
    for s in (2, 4):
        if s <= size and size % s == 0:
            out.append(comm.Split(comm.Get_rank() // s, comm.Get_rank()))
    return out


@pytest.mark.mpi
def test_gas_identical_on_1_2_4_ranks():
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    kw = load("event_gas.yaml")
    ref = run_event_deck(kw, None, None)
    for c in sub_comms(world):
        r = run_event_deck(kw, None, c)
        assert signature(r) == signature(ref), f"differs on {c.Get_size()} ranks"
        c.Free()
    # every rank of the world agrees
    sigs = world.allgather(repr(signature(ref)))
    assert all(s == sigs[0] for s in sigs)


@pytest.mark.mpi
def test_unresolved_reasons_identical_across_ranks():
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    cases = [
        dict(positions=[[F(0)], [F(3)], [F(6)]], velocities=[[F(1)], [F(0)], [F(-1)]], masses=[1, 1, 1],
             radii=[1, 1, 1], restitution=1, T=10),
        dict(positions=[[0], [F(11, 10)], [F(21, 10)], [F(31, 10)]], velocities=[[1], [0], [0], [0]],
             masses=[1] * 4, radii=[F(1, 2)] * 4, restitution=1, T=10),
        dict(positions=[[0, 0], [3, F(1, 2)], [7, F(3, 2)], [-4, 5]], velocities=[[1, 0], [0, 0], [0, 0], [0, -1]],
             masses=[1, 2, 1, 1], radii=[1, 1, 1, 1], restitution=0, T=10),
        dict(positions=[[0, 0], [3, F(1, 2)], [7, F(3, 2)], [-4, 5]], velocities=[[1, 0], [0, 0], [0, 0], [0, -1]],
             masses=[1, 2, 1, 1], radii=[1, 1, 1, 1], restitution=1, T=10),
    ]
    tol = dict(eps_time=F(1, 10 ** 9), eps_guard=F(1, 10 ** 6), delta=F(1, 20), n_evt=8, budget=8, grid_bits=80)
    for case in cases:
        ref = simulate(**case, **tol)
        for c in sub_comms(world):
            r = simulate(**case, **tol, comm=c)
            assert signature(r) == signature(ref)
            c.Free()


@pytest.mark.mpi
def test_run_event_deck_writes_once():
    from mpi4py import MPI
    import h5py
    world = MPI.COMM_WORLD
    path = world.bcast(os.path.join(tempfile.mkdtemp(), "cradle.h5") if world.Get_rank() == 0 else None, root=0)
    res = run_event_deck(load("newton_cradle.yaml"), path, world)
    assert res.status == "complete"
    world.Barrier()
    if world.Get_rank() == 0:
        with h5py.File(path, "r") as f:
            assert f.attrs["n_events"] == 4 and list(f["final/velocities"][:, 0]) == [0, 0, 0, 0, 1]
