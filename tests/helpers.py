"""Test helpers: build decks in code and run short simulations."""
import copy

import numpy as np
from mpi4py import MPI

from relcp_mpi.config.deck import validate


def make_deck(**sections):
    raw = {"name": "test", "time": {"dt": 0.05, "steps": 5}, "output": {"trajectory_every": 0, "progress_every": 0}}
    for k, v in sections.items():
        if isinstance(v, dict) and isinstance(raw.get(k), dict):
            raw[k] = {**raw[k], **v}
        else:
            raw[k] = v
    return validate(copy.deepcopy(raw))


def run_sim(deck, comm=None, steps=None, record=None):
    """Run a deck; returns (sim, per-step diagnostics list).  ``record(sim)`` is called after every step."""
    from relcp_mpi.simulation import Simulation
    comm = comm or MPI.COMM_WORLD
    sim = Simulation(deck, "", comm)
    sim.check_initial_overlap()
    diags = []
    n = sim.n_steps if steps is None else steps
    try:
        for _ in range(n):
            sim.step_once()
            diags.append(dict(sim.diag))
            if record:
                record(sim)
    finally:
        sim.solver.free()
    return sim, diags


def gather_by_gid(sim, field="x"):
    """All bodies' field, ordered by gid, on every rank."""
    b = sim.bodies
    parts = sim.comm.allgather((b.gid.copy(), getattr(b, field).copy()))
    gid = np.concatenate([p[0] for p in parts])
    val = np.concatenate([p[1] for p in parts])
    order = np.argsort(gid)
    return gid[order], val[order]
