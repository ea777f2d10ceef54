"""Realistic colony model (relcp_mpi.physics.growth, deck section ``growth``): exponential elongation, noisy
division lengths keyed by (seed, gen, gid), daughter orientation noise; rank-count independence and bitwise
restart in the middle of growth.

Serial:  .venv/bin/python -m pytest -q tests/test_colony_realistic.py
MPI:     mpirun -n 2 tools/mpi_pytest.sh -q --with-mpi -m "mpi and not slow" tests/test_colony_realistic.py
"""
import os

import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.config.deck import DeckError, validate
from relcp_mpi.config.sections import typed
from relcp_mpi.physics.growth import GrowthModel, division_length, growth_rate
from tests.helpers import make_deck, run_sim

WORLD = MPI.COMM_WORLD
HANG_TIMEOUT = 300
R, DT = 0.5, 0.05
RATE = np.log(2.0) / 1.0                    # doubling time 1: 20 steps per cell cycle
NOISY = {"model": "exponential", "division_noise": 0.1, "orientation_noise": 0.1, "noise_axis": [0, 0, 1]}


def colony_raw(steps, directory=None, checkpoint_every=0, growth=NOISY, divide_at=2.0):
    raw = {"name": "realistic", "seed": 11, "time": {"dt": DT, "steps": steps},
           "box": {"lo": [-30, -30, -2], "hi": [30, 30, 2]},
           "walls": [{"point": [0, 0, -0.52], "normal": [0, 0, 1]}, {"point": [0, 0, 0.52], "normal": [0, 0, -1]}],
           "bodies": [{"shape": "spherocylinder", "radius": R, "length": 1.0, "position": [0, 0, 0],
                       "orientation": {"axis": [0, 1, 0], "angle": np.pi / 2}, "growth_rate": float(RATE),
                       "divide_at": divide_at}],
           "growth": growth, "contact": {"overlap_tol": 1e-3, "skin": 0.3}, "solver": {"tol": 1e-5},
           "parallel": {"decomposition": "rcb", "rebalance_every": 5, "imbalance_threshold": 1.05},
           "output": {"trajectory_every": 0, "progress_every": 0, "checkpoint_every": checkpoint_every,
                      "keep_checkpoints": 5}}
    if directory is not None:
        raw["output"]["directory"] = str(directory)
    return raw


def test_free_cell_grows_exponentially():
    """One cell that never divides: after n steps its tip-to-tip length is l0 exp(r n dt) (growth is applied
    once per step as the exact factor exp(r dt), so there is no discretisation error, only rounding)."""
    deck = validate(colony_raw(40, divide_at=0.0))
    lengths = []
    sim, d = run_sim(deck, comm=MPI.COMM_SELF, record=lambda s: lengths.append(s.bodies.shape[0, 1]))
    n = np.arange(1, 41)
    want = (1.0 + 2 * R) * np.exp(RATE * n * DT)
    assert np.allclose(np.array(lengths) + 2 * R, want, rtol=1e-13, atol=0)
    assert sim.n_global == 1 and lengths[-1] > 6.0          # l = 2 * 2^2 = 8: long, yet one cell
    assert max(x["max_overlap"] for x in d) <= 1e-3


def test_division_length_distribution():
    """Uniform within +-10 % of divide_at, mean and spread as requested, a pure function of (seed, gen, gid)."""
    m = GrowthModel("exponential", 0.1)
    n = 20000
    gid = np.arange(n, dtype=np.int64) * 7 + 3
    gen = (np.arange(n) % 6).astype(np.int64)
    ldiv = np.full(n, 2.0)
    L = division_length(ldiv, gen, gid, 11, m)
    assert L.min() >= 1.8 and L.max() < 2.2
    assert abs(L.mean() - 2.0) < 6 * 0.2 / np.sqrt(3 * n)
    assert abs(L.std() / (0.2 / np.sqrt(3)) - 1) < 0.03
    assert np.histogram(L, bins=10, range=(1.8, 2.2))[0].min() > 0.9 * n / 10      # flat
    sub = np.arange(0, n, 13)[::-1]                            # any subset, any order: same numbers
    assert np.array_equal(division_length(ldiv[sub], gen[sub], gid[sub], 11, m), L[sub])
    L_next = division_length(ldiv, gen + 1, gid, 11, m)        # the next generation draws anew
    assert abs(np.corrcoef(L, L_next)[0, 1]) < 0.05
    assert not np.array_equal(division_length(ldiv, gen, gid, 12, m), L)
    assert division_length(ldiv, gen, gid, 11, GrowthModel()) is ldiv    # no noise: divide_at itself


def test_growth_deck_validation():
    body = {"shape": "spherocylinder", "radius": 0.5, "length": 1.0, "position": [0, 0, 0], "growth_rate": 0.1,
            "divide_at": 1.1}
    with pytest.raises(DeckError) as ei:
        make_deck(bodies=[body], growth={"model": "logistic", "division_noise": 1.5, "orientation_noise": -1.0,
                                         "noise_axis": [0, 0]})
    msg = str(ei.value)
    for s in ("growth.model: must be one of ['linear', 'exponential']", "growth.division_noise: must be in [0, 1)",
              "growth.orientation_noise: must be >= 0", "growth.noise_axis: must be a list of 3 numbers"):
        assert s in msg
    with pytest.raises(DeckError, match="bodies\\[0\\].divide_at: with growth.division_noise 0.2 cells may "
                                        "divide at 0.88"):
        make_deck(bodies=[body], growth={"division_noise": 0.2})
    with pytest.raises(DeckError, match="growth.noise_axis: must be nonzero"):
        make_deck(bodies=[body], growth={"noise_axis": [0, 0, 0]})
    d = validate(colony_raw(1))
    assert d["growth"] == dict(NOISY, growth_rate_noise=0.0)


def test_divisions_at_own_length_and_desynchronised():
    """Every division happens in the first step whose growth takes L past the cell's own division length, the
    division lengths spread, and the cells of one generation divide at different steps."""
    deck = validate(colony_raw(80))
    m = GrowthModel.from_deck(typed(deck).growth)
    before = {}
    events = []                                    # (step, gen of the mother, mother's L at division)

    def record(sim):
        b = sim.bodies
        now = {(int(g), int(k)): L for g, k, L in zip(b.gid, b.gen, b.shape[:, 1])}
        for (g, k), Lb in before.items():
            if (g, k) not in now:                  # cell (gid g, generation k) divided in this step
                thr = division_length(np.array([2.0]), np.array([k]), np.array([g]), deck["seed"], m)[0]
                L_div = (Lb + 2 * R) * np.exp(RATE * DT) - 2 * R
                assert Lb < thr <= L_div, (g, k, Lb, thr, L_div)
                events.append((sim.step, k, L_div))
        before.clear()
        before.update(now)

    sim, d = run_sim(deck, comm=MPI.COMM_SELF, record=record)
    assert max(x["max_overlap"] for x in d) <= 1e-3
    assert np.all(np.abs(sim.bodies.x[:, 2]) <= 0.03)
    gids = sim.bodies.gid
    assert len(np.unique(gids)) == len(gids) == sim.n_global and gids.max() == sim.n_global - 1
    assert sim.n_global == 16                      # generations 0-3 divided (one cell cycle = 20 steps)
    ev = np.array(events)
    assert len(ev) == 15
    for k, apart in ((1, 2), (2, 2), (3, 3)):       # the 2^k cells of generation k divide at >= `apart` steps
        steps = ev[ev[:, 1] == k, 0]               # (synchronous linear model: all at one step)
        assert len(steps) == 2 ** k and len(np.unique(steps)) >= apart, (k, steps)
    assert np.std(ev[:, 2]) > 0.05                 # division lengths spread (linear model: all equal)


def test_growth_rate_noise_desynchronises_lineages():
    """Per-cell growth rates (+-10 %, keyed by (seed, gen, gid)): every cell follows its own exponential law
    step by step and every cell has its own length (with division noise alone a cell of generation n has
    length l0 exp(r t) / 2^n, the same for the whole generation)."""
    deck = validate(colony_raw(90, growth=dict(NOISY, growth_rate_noise=0.1)))
    m = GrowthModel.from_deck(typed(deck).growth)
    r = growth_rate(np.full(4000, 2.0), np.arange(4000) % 3, np.arange(4000), 11, m)
    assert r.min() >= 1.8 and r.max() < 2.2 and abs(r.mean() - 2.0) < 0.01
    before, checked = {}, [0]

    def record(sim):
        b = sim.bodies
        now = {(int(g), int(k)): (L, rate) for g, k, L, rate in zip(
            b.gid, b.gen, b.shape[:, 1], growth_rate(b.growth, b.gen, b.gid, deck["seed"], m))}
        for key, (Lb, rate) in before.items():
            if key in now:                         # did not divide: exactly one exponential step
                assert now[key][0] == (Lb + 2 * R) * np.exp(DT * rate) - 2 * R
                checked[0] += 1
        before.clear()
        before.update(now)

    sim, d = run_sim(deck, comm=MPI.COMM_SELF, record=record)
    assert checked[0] > 500
    L = sim.bodies.shape[:, 1]                     # division noise alone: one length per generation
    assert sim.n_global >= 8 and len(np.unique(L)) == len(L)
    assert max(x["max_overlap"] for x in d) <= 1e-3


@pytest.mark.mpi
def test_realistic_colony_rank_count_independence(hang_guard):
    deck = validate(colony_raw(80))
    ref, _ = run_sim(deck, comm=MPI.COMM_SELF)
    par, dpar = run_sim(deck, comm=WORLD)
    for f in ("shape", "gen"):                     # lengths and generations: bitwise
        g1, v1 = ref.gather(f)
        g2, v2 = par.gather(f)
        assert np.array_equal(g1, g2) and np.array_equal(v1, v2), f
    assert len(g1) >= 8 and len(np.unique(g1)) == len(g1)
    _, x1 = ref.gather()
    _, x2 = par.gather()
    assert np.allclose(x1, x2, atol=1e-4)
    assert max(x["max_overlap"] for x in dpar) <= 1e-3


@pytest.mark.mpi
def test_realistic_colony_restart_bitwise(shared_dir, hang_guard):
    """Checkpoint in the middle of growth (some cells of generation 2 divided, others not yet), restart: every
    bit of the bodies equals the uninterrupted run's."""
    from relcp_mpi.io.checkpoint import checkpoint_path
    from relcp_mpi.simulation import Simulation
    from tests.test_restart import run_fresh
    N, k = 70, 53
    ref = run_fresh(validate(colony_raw(N, os.path.join(shared_dir, "ref"))), WORLD)
    run_dir = os.path.join(shared_dir, "run")
    run_fresh(validate(colony_raw(k, run_dir, checkpoint_every=k)), WORLD)
    sim = Simulation.from_checkpoint(checkpoint_path(os.path.join(run_dir, "realistic_ckpt"), k),
                                     validate(colony_raw(N, run_dir)), "", WORLD)
    _, gk = sim.gather("gen")
    assert set(gk.tolist()) == {2, 3}              # mid-growth: in the middle of generation 2's divisions
    sim.run()
    assert sim.n_global == ref.n_global >= 6
    for f in ("x", "q", "u", "shape", "gen", "l_div"):
        g1, v1 = ref.gather(f)
        g2, v2 = sim.gather(f)
        assert np.array_equal(g1, g2) and np.array_equal(v1, v2), f
    WORLD.Barrier()
