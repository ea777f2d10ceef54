"""The public Python API: relcp_mpi.Simulation.from_deck / from_checkpoint, run(steps, writers, on_step,
until), read access to bodies and per-step diagnostics; the step policy (sticky dt halving) and its state in
checkpoints.  Serial tests on COMM_SELF, MPI tests (``-m mpi``) on COMM_WORLD."""
import copy
import os

import numpy as np
import pytest
from mpi4py import MPI

import relcp_mpi
from relcp_mpi.driver.actions import Action, Trajectory
from relcp_mpi.io.trajectory import list_frames, read_frame

SELF, WORLD = MPI.COMM_SELF, MPI.COMM_WORLD


def pile_raw(directory, steps=8):
    """Six spheres settling onto a floor wall under gravity (raw deck mapping, validated by from_deck)."""
    bodies = [{"shape": "sphere", "radius": 0.5, "position": [0.55 * (i % 3) * 2 - 1.1, 0.0, 0.6 + 1.05 * i],
               "force": [0.0, 0.0, -5.0]} for i in range(6)]
    return {"name": "pile", "time": {"dt": 0.1, "steps": steps}, "box": {"lo": [-4, -4, -1], "hi": [4, 4, 9]},
            "walls": [{"point": [0, 0, 0], "normal": [0, 0, 1]}], "bodies": bodies,
            "contact": {"overlap_tol": 1e-3, "skin": 0.3}, "solver": {"tol": 1e-6},
            "output": {"directory": str(directory), "trajectory_every": 0, "progress_every": 0}}


def halving_raw(directory, steps, keep):
    """Two ellipsoids driven past each other at a dt that needs an appended row; max_depth 1 makes every
    such step fail, so the step policy must redo it at dt/2 (``keep``: time.keep_halved_steps)."""
    return {"name": "halving", "time": {"dt": 0.2, "steps": steps, "max_halvings": 3, "keep_halved_steps": keep},
            "bodies": [{"shape": "ellipsoid", "axes": [2.0, 0.5, 0.5], "position": [-3.0, 0.6, 0.0],
                        "orientation": {"axis": [0, 0, 1], "angle": 0.15}, "force": [20.0, -10.0, 0]},
                       {"shape": "ellipsoid", "axes": [2.0, 0.5, 0.5], "position": [3.0, -0.6, 0.0],
                        "orientation": {"axis": [0, 0, 1], "angle": -0.15}, "force": [-20.0, 10.0, 0]}],
            "contact": {"overlap_tol": 1e-3, "skin": 2.0, "max_depth": 1}, "solver": {"tol": 1e-5},
            "output": {"directory": str(directory), "trajectory_every": 0, "progress_every": 0,
                       "keep_checkpoints": 5}}


def test_package_exports_simulation():
    from relcp_mpi.simulation import Simulation
    assert relcp_mpi.Simulation is Simulation


def test_run_callbacks_history_and_continuation_are_bitwise(tmp_path):
    """run(5) + run(3) == run(8) bit for bit; on_step sees every step once; history has one entry per step;
    until() stops early; a user action with every=3 runs at steps 3 and 6 only."""
    raw = pile_raw(tmp_path)
    ref = relcp_mpi.Simulation.from_deck(raw, comm=SELF)
    ref.run(8, writers=[])
    seen = []

    class EveryThird(Action):
        def __call__(self, sim):
            seen.append(sim.step)

    sim = relcp_mpi.Simulation.from_deck(copy.deepcopy(raw), comm=SELF)
    calls = []
    sim.run(5, writers=[EveryThird(every=3)], on_step=lambda s: calls.append((s.step, s.diag["constraints"])))
    sim.run(3, writers=[EveryThird(every=3)])
    assert [c[0] for c in calls] == [1, 2, 3, 4, 5] and seen == [3, 6]
    assert sim.step == ref.step == 8 and sim.time == ref.time
    assert len(sim.history) == 8 and [h["constraints"] for h in sim.history[:5]] == [c[1] for c in calls]
    assert max(h["constraints"] for h in sim.history) >= 1      # the spheres touch the floor / each other
    for f in ("x", "q", "u"):
        assert np.array_equal(sim.gather(f)[1], ref.gather(f)[1]), f
    g, x = sim.gather("x")
    assert list(g) == list(range(6)) and np.all(x[:, 2] >= 0.5 - 1e-3)   # nothing sinks into the floor
    stopper = relcp_mpi.Simulation.from_deck(copy.deepcopy(raw), comm=SELF)
    stopper.run(writers=[], until=lambda s: s.step == 2)
    assert stopper.step == 2


def test_trajectory_writer_action_and_deck_path(tmp_path):
    """from_deck accepts a file path; a Trajectory action writes the initial frame and every 2nd step; the
    frames hold the bodies the API reports."""
    import yaml
    p = tmp_path / "pile.yaml"
    p.write_text(yaml.safe_dump(pile_raw(tmp_path / "out", steps=4)))
    sim = relcp_mpi.Simulation.from_deck(str(p), comm=SELF)
    assert sim.deck_text and sim.n_global == 6
    traj = str(tmp_path / "t.h5")
    sim.run(writers=[Trajectory(every=2, path=traj)])
    assert [s for _, s, _, _ in list_frames(traj)] == [0, 2, 4]
    fr = read_frame(traj, step=4)
    assert np.array_equal(fr["x"], sim.gather("x")[1])


def test_sticky_halving_keeps_the_finer_dt(tmp_path):
    """time.keep_halved_steps: after a failed step the next steps start at the finer dt (substeps > 1 without
    a new failure) and return to the deck's dt after that many successful steps; without it every step
    starts at the deck's dt."""
    plain = relcp_mpi.Simulation.from_deck(halving_raw(tmp_path, 20, 0), comm=SELF)
    plain.run(writers=[])
    sticky = relcp_mpi.Simulation.from_deck(halving_raw(tmp_path, 20, 3), comm=SELF)
    sticky.run(writers=[])
    sp = [d["substeps"] for d in plain.history]
    ss = [d["substeps"] for d in sticky.history]
    assert max(sp) >= 2 and max(ss) >= 2
    first = ss.index(next(s for s in ss if s > 1))
    assert ss[first + 1] >= 2                      # the step after a halved one starts halved
    # after 3 successful steps at dt/4 the level drops by one: 3 steps of 2 sub-steps, then the deck's dt
    text = ",".join(map(str, ss))
    assert "4,4,4,2,2,2,1" in text and ss[-1] == 1 and sum(ss) > sum(sp)
    assert sp[-1] == 1 and "2,2,2" not in ",".join(map(str, sp))
    assert sticky.step == plain.step == 20 and sticky.time == pytest.approx(4.0)
    assert max(d["max_overlap"] for d in sticky.history) <= 1e-3
    assert np.allclose(sticky.gather("x")[1], plain.gather("x")[1], atol=0.3)


@pytest.mark.mpi
def test_api_under_mpi_matches_one_rank(shared_dir, hang_guard):
    """The same script on all ranks of COMM_WORLD and on one rank: same bodies (by gid), positions agree to
    solver tolerance; history and diagnostics are the same on every rank."""
    par = relcp_mpi.Simulation.from_deck(pile_raw(shared_dir), comm=WORLD)
    par.run(writers=[])
    ser = relcp_mpi.Simulation.from_deck(pile_raw(shared_dir), comm=SELF)
    ser.run(writers=[])
    gp, xp = par.gather("x")
    gs, xs = ser.gather("x")
    assert np.array_equal(gp, gs) and np.allclose(xp, xs, atol=1e-5)
    hist = WORLD.allgather([d["constraints"] for d in par.history])
    assert all(h == hist[0] for h in hist) and len(hist[0]) == 8


@pytest.mark.mpi
def test_sticky_policy_state_is_checkpointed(shared_dir, hang_guard):
    """A run with sticky halving, checkpointed after a halved step and restarted, continues bit for bit
    (the policy's level and count come back from the checkpoint)."""
    N, k = 14, 7
    ref = relcp_mpi.Simulation.from_deck(halving_raw(os.path.join(shared_dir, "ref"), N, 5), comm=WORLD)
    ref.run(writers=[])
    d = os.path.join(shared_dir, "run")
    part = relcp_mpi.Simulation.from_deck(halving_raw(d, k, 5), comm=WORLD)
    part.run(writers=[])
    path = part.write_checkpoint()
    assert part.state.policy["level"] > 0            # the checkpoint holds a non-trivial policy state
    sim = relcp_mpi.Simulation.from_checkpoint(path, halving_raw(d, N, 5), comm=WORLD)
    assert sim.state.policy == part.state.policy and sim.step == k
    sim.run(writers=[])
    assert [h["substeps"] for h in sim.history] == [h["substeps"] for h in ref.history[k:]]
    for f in ("x", "q", "u"):
        assert np.array_equal(sim.gather(f)[1], ref.gather(f)[1]), f


def test_typed_deck_sections_are_frozen_views_of_the_validated_deck(tmp_path):
    import dataclasses

    from relcp_mpi.config.deck import validate
    from relcp_mpi.config.sections import typed
    raw = pile_raw(tmp_path)
    raw["time"] = {"dt": 0.04, "t_end": 1.0}
    d = typed(validate(raw))
    assert d.time.dt == 0.04 and d.time.n_steps == 25 and d.time.max_halvings == 0
    assert d.box.lo == (-4, -4, -1) and d.walls[0].normal == (0, 0, 1) and d.contact.skin == 0.3
    assert d.solver.tol == 1e-6 and d.solver.method == "bbpgd" and d.output.directory == str(tmp_path)
    assert d.checkpoint_prefix == os.path.join(str(tmp_path), "pile_ckpt") and typed(d) is d
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.time.dt = 1.0
    sim = relcp_mpi.Simulation.from_deck(raw, comm=SELF, check=False)
    assert sim.deck.time == d.time and sim.n_steps == 25
