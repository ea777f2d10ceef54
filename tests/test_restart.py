"""Checkpoint/restart of ReLCP runs: bitwise continuation on the same rank count, agreement within solver
tolerance on other rank counts, signal-triggered checkpoints (SIGUSR1 to mpirun, SIGTERM to the ranks),
and rejection of missing / truncated / corrupt / incompatible checkpoints without touching any file.

MPI:     mpirun -n 2 tools/mpi_pytest.sh -q --with-mpi -m "mpi and not slow" tests/test_restart.py  (and -n 4)
Serial:  .venv/bin/python -m pytest tests/test_restart.py -q   (the subprocess tests: serial only)
"""
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml
from mpi4py import MPI

from relcp_mpi.config.deck import validate
from relcp_mpi.io.checkpoint import CheckpointError, checkpoint_path, latest_checkpoint, verify_checkpoint
from tests.helpers import (ROOT, UNDER_LAUNCHER, clean_env, mpirun_path, run_cli, snapshot,
                           write_deck)

WORLD = MPI.COMM_WORLD
serial_only = pytest.mark.skipif(WORLD.size > 1 or UNDER_LAUNCHER,
                                 reason="serial test (launches mpirun itself); run without mpirun")
HANG_TIMEOUT = 120
FIELDS = ("x", "q", "u")


# ------------------------------------------------------------------------------------------------
# a small pile of ellipsoids pressed onto a floor and squeezed laterally: ~60 active contacts that persist
# across steps (warm starts matter) and a recursion depth of 1 in later steps
def pile_bodies():
    out = []
    for iz, z in enumerate([0.45, 1.3]):
        for ix in range(6):
            for iy, y in enumerate([-0.5, 0.5]):
                x = -3.125 + 1.25 * ix + 0.3 * iz
                out.append({"shape": "ellipsoid", "axes": [0.6, 0.45, 0.4], "position": [x, y, z],
                            "orientation": {"axis": [0, 0, 1], "angle": 0.1 * (ix - iy)},
                            "force": [-3.0 * x, 0.0, 0.0]})
    return out


def pile_raw(directory, steps, checkpoint_every=0, decomposition="cartesian", trajectory_every=0, name="pile"):
    return {"name": name, "seed": 3, "time": {"dt": 0.1, "steps": steps},
            "box": {"lo": [-5, -2, -1], "hi": [5, 2, 5]},
            "walls": [{"point": [0, 0, 0], "normal": [0, 0, 1]}],
            "forces": {"body_force": [0, 0, -20.0]},
            "bodies": pile_bodies(),
            "contact": {"overlap_tol": 1e-3, "skin": 0.3},
            "solver": {"tol": 1e-6},
            "parallel": {"decomposition": decomposition},
            "output": {"directory": str(directory), "checkpoint_every": checkpoint_every, "keep_checkpoints": 10,
                       "trajectory_every": trajectory_every, "progress_every": 0}}


def pile_deck(*a, **k):
    return validate(pile_raw(*a, **k))


def run_fresh(deck, comm):
    from relcp_mpi import Simulation
    sim = Simulation.from_deck(deck, comm=comm)
    sim.run()
    return sim


def state(sim):
    return {f: sim.gather(f) for f in FIELDS}


# ------------------------------------------------------------------------------------------------
# in-process MPI tests
@pytest.mark.mpi
@pytest.mark.parametrize("decomposition", ["cartesian", "rcb"])
def test_bitwise_continuation_same_rank_count(shared_dir, hang_guard, decomposition):
    """N steps uninterrupted == k steps, checkpoint, restart, N - k steps: every bit of x, q, u (and of
    the trajectory frames, which the restarted run appends to after dropping the frames written after the
    checkpoint by the 'crashed' run)."""
    from relcp_mpi.io.trajectory import list_frames, read_frame
    from relcp_mpi.simulation import Simulation
    N, k = 12, 5
    ref_dir, run_dir = os.path.join(shared_dir, "ref"), os.path.join(shared_dir, "run")
    ref = run_fresh(pile_deck(ref_dir, N, decomposition=decomposition, trajectory_every=2), WORLD)
    assert ref.diag["active"] > 20 and ref.diag["depth"] >= 1      # contacts persist, recursion happens
    want = state(ref)
    # the interrupted run: checkpoint at k (every k), then it goes on to k + 3 and "crashes"
    part = run_fresh(pile_deck(run_dir, k + 3, checkpoint_every=k, decomposition=decomposition,
                               trajectory_every=2), WORLD)
    assert part.step == k + 3
    ck = checkpoint_path(os.path.join(run_dir, "pile_ckpt"), k)
    sim = Simulation.from_checkpoint(ck, pile_deck(run_dir, N, decomposition=decomposition, trajectory_every=2),
                                     "", WORLD)
    t = 0.0
    for _ in range(k):
        t += 0.1                    # the driver accumulates time step by step
    assert (sim.step, sim.time) == (k, t)
    sim.run()
    got = state(sim)
    assert sim.step == N and sim.time == ref.time
    for f in FIELDS:
        assert np.array_equal(got[f][0], want[f][0])
        assert np.array_equal(got[f][1], want[f][1]), f"{f} differs after restart ({decomposition})"
    WORLD.Barrier()
    if WORLD.rank == 0:
        ft = os.path.join(run_dir, "pile.h5")
        fr = os.path.join(ref_dir, "pile.h5")
        assert [s for _, s, _, _ in list_frames(ft)] == list(range(0, N + 1, 2))
        for s in range(0, N + 1, 2):
            a, b = read_frame(ft, step=s), read_frame(fr, step=s)
            assert a["time"] == b["time"]
            for key in ("gid", "x", "q", "u"):
                assert np.array_equal(a[key], b[key]), (s, key)
    WORLD.Barrier()


def colony_raw(directory, steps, checkpoint_every=0):
    """Growing and dividing spherocylinders between two walls, RCB rebalanced every 2 steps, automatic
    skin (0.25 r_max at the start of the run)."""
    bodies = [{"shape": "spherocylinder", "radius": 0.5, "length": 1.0 + 0.07 * (3 * i + j),
               "position": [-4.5 + 3.0 * i, -2.4 + 2.4 * j, 0.0],
               "orientation": {"axis": [0, 1, 0], "angle": float(np.pi / 2)}, "growth_rate": 0.5, "divide_at": 2.0}
              for i in range(4) for j in range(3)]
    return {"name": "colony", "seed": 5, "time": {"dt": 0.05, "steps": steps},
            "box": {"lo": [-20, -20, -2], "hi": [20, 20, 2]},
            "walls": [{"point": [0, 0, -0.52], "normal": [0, 0, 1]}, {"point": [0, 0, 0.52], "normal": [0, 0, -1]}],
            "bodies": bodies, "contact": {"overlap_tol": 1e-3}, "solver": {"tol": 1e-5},
            "parallel": {"decomposition": "rcb", "rebalance_every": 2, "imbalance_threshold": 1.01},
            "output": {"directory": str(directory), "checkpoint_every": checkpoint_every, "trajectory_every": 0,
                       "progress_every": 0, "keep_checkpoints": 3}}


@pytest.mark.mpi
def test_bitwise_continuation_with_division_and_rebalancing(shared_dir, hang_guard):
    """Cells grow and divide (new gids, body count changes), RCB rebalances every 2 steps: the restarted run
    still reproduces the uninterrupted one bit for bit (same bodies, same number of rebalances)."""
    from relcp_mpi.simulation import Simulation
    N, k = 40, 24
    ref = run_fresh(validate(colony_raw(os.path.join(shared_dir, "ref"), N)), WORLD)
    want = {f: ref.gather(f) for f in FIELDS + ("shape",)}
    d = os.path.join(shared_dir, "run")
    part = run_fresh(validate(colony_raw(d, k, checkpoint_every=k)), WORLD)
    assert part.n_global > 12                                                # cells divided before k
    sim = Simulation.from_checkpoint("latest", validate(colony_raw(d, N)), "", WORLD)
    assert sim.n_global == part.n_global and sim.next_gid == part.next_gid and sim.skin == part.skin
    sim.run()
    assert sim.n_global == ref.n_global > part.n_global                      # and divided again after it
    if WORLD.size > 1:
        assert ref.n_rebalances > 0
    assert sim.n_rebalances == ref.n_rebalances
    for f in FIELDS + ("shape",):
        g, v = sim.gather(f)
        assert np.array_equal(g, want[f][0])
        assert np.array_equal(v, want[f][1]), f


@pytest.mark.mpi
def test_warm_start_is_what_makes_it_bitwise(shared_dir, hang_guard):
    """Sanity check of the test above: restarting without the warm-start table is not bitwise (so the
    deck does exercise the warm-start routing of the checkpoint)."""
    from relcp_mpi.simulation import Simulation
    N, k = 8, 4
    want = state(run_fresh(pile_deck(os.path.join(shared_dir, "a"), N), WORLD))
    d = os.path.join(shared_dir, "b")
    run_fresh(pile_deck(d, k, checkpoint_every=k), WORLD)
    sim = Simulation.from_checkpoint("latest", pile_deck(d, N), "", WORLD)
    assert WORLD.allreduce(len(sim.warm[0])) > 20
    sim.warm = (None, None)
    sim.run()
    got = state(sim)
    assert not np.array_equal(got["x"][1], want["x"][1])
    assert np.allclose(got["x"][1], want["x"][1], atol=1e-4)


@pytest.mark.mpi
@pytest.mark.parametrize("decomposition", ["cartesian", "rcb"])
def test_restart_on_fewer_ranks_agrees_within_solver_tolerance(shared_dir, hang_guard, decomposition):
    """Checkpoint written on all P ranks, resumed on 1 .. P-1 ranks (sub-communicators): the final state
    agrees with the uninterrupted P-rank run to solver tolerance (different reduction order only)."""
    from relcp_mpi.simulation import Simulation
    P = WORLD.size
    if P < 2:
        pytest.skip("needs >= 2 ranks")
    N, k = 12, 5
    want = state(run_fresh(pile_deck(os.path.join(shared_dir, "ref"), N, decomposition=decomposition), WORLD))
    d = os.path.join(shared_dir, "run")
    run_fresh(pile_deck(d, k, checkpoint_every=k, decomposition=decomposition), WORLD)
    ck = checkpoint_path(os.path.join(d, "pile_ckpt"), k)
    results = {}
    for n in range(1, P):
        sub = WORLD.Split(0 if WORLD.rank < n else MPI.UNDEFINED, WORLD.rank)
        if sub != MPI.COMM_NULL:
            try:
                sim = Simulation.from_checkpoint(ck, pile_deck(d, N, decomposition=decomposition), "", sub)
                sim.run()
                got = state(sim)
                results[n] = {f: (np.array_equal(got[f][0], want[f][0]),
                                  float(np.abs(got[f][1] - want[f][1]).max())) for f in FIELDS}
                results[n]["size"] = sub.size
                results[n]["step"] = sim.step
            finally:
                sub.Free()
        WORLD.Barrier()
    results = WORLD.bcast(results, root=0)
    assert sorted(results) == list(range(1, P))
    for n, r in results.items():
        assert r["size"] == n and r["step"] == N
        for f in FIELDS:
            same_ids, diff = r[f]
            assert same_ids
            # solver tol 1e-6 (force units, gamma ~ 10): positions/orientations move by dt * mobility * error
            tol = {"x": 5e-5, "q": 5e-5, "u": 2e-3}[f]
            assert diff < tol, (n, f, diff)


@pytest.mark.mpi
def test_incompatible_or_damaged_checkpoint_raises_on_every_rank(shared_dir, hang_guard):
    from relcp_mpi.simulation import Simulation
    d = os.path.join(shared_dir, "run")
    run_fresh(pile_deck(d, 2, checkpoint_every=2), WORLD)
    ck = checkpoint_path(os.path.join(d, "pile_ckpt"), 2)
    raw = pile_raw(d, 6)
    raw["bodies"][3]["axes"] = [0.6, 0.45, 0.35]
    with pytest.raises(CheckpointError, match=r"pile_ckpt_000000002\.h5.*bodies\[3\]\.axes"):
        Simulation.from_checkpoint(ck, validate(raw), "", WORLD)
    raw = pile_raw(d, 6)
    raw["box"]["hi"] = [5, 2, 6]
    with pytest.raises(CheckpointError, match=r"(?s)a restart must keep: box\.hi\[2\] .*box\.hi\[2\]: 5 -> 6 \(fixed"):
        Simulation.from_checkpoint(ck, validate(raw), "", WORLD)
    with pytest.raises(CheckpointError, match="does not exist"):
        Simulation.from_checkpoint(ck + ".missing", pile_deck(d, 6), "", WORLD)
    with pytest.raises(CheckpointError, match="no valid checkpoint"):
        Simulation.from_checkpoint("latest", pile_deck(os.path.join(shared_dir, "empty"), 6), "", WORLD)
    # the same deck given as YAML text (what the CLI passes) is compatible with a dict-written checkpoint
    text = yaml.safe_dump(pile_raw(d, 6))
    sim = Simulation.from_checkpoint(ck, pile_deck(d, 6), text, WORLD)
    assert sim.step == 2
    sim.solver.free()
    WORLD.Barrier()


@pytest.mark.mpi
def test_signal_flag_on_one_rank_stops_all_ranks_with_checkpoint(shared_dir, hang_guard):
    """The per-step agreement: a signal received on one rank during step 1 -> checkpoint at the end of the
    step + StopRequested on every rank.  (A signal pending before the first step: tests/test_restart_faults.py.)"""
    from relcp_mpi import simulation as S
    from relcp_mpi.driver.actions import Action
    d = os.path.join(shared_dir, "run")
    sim = S.Simulation(pile_deck(d, 50), "", WORLD)
    sim.check_initial_overlap()

    class During(Action):        # runs after step 1 before SignalCheck, as a handler during the step would
        def __call__(self, s):
            if WORLD.rank == WORLD.size - 1 and s.step == 1:
                S._SIGNAL_FLAG["signum"] = int(signal.SIGUSR1)

    with pytest.raises(S.StopRequested) as ei:
        sim.run(writers=[During(every=1)] + sim.default_actions())
    assert ei.value.signum == signal.SIGUSR1 and sim.step == 1
    assert ei.value.path == checkpoint_path(os.path.join(d, "pile_ckpt"), 1)
    assert S.pending_signal() == 0
    WORLD.Barrier()
    if WORLD.rank == 0:
        assert verify_checkpoint(ei.value.path)["step"] == 1
    res = S.Simulation.from_checkpoint("latest", pile_deck(d, 3), "", WORLD)
    assert res.step == 1
    res.run()
    assert res.step == 3
    WORLD.Barrier()


# ------------------------------------------------------------------------------------------------
# subprocess tests (serial only): the relcp-mpi command under mpirun (helpers: tests/helpers.py)

# each rank runs the CLI in-process and records its own exit status and pid
_WRAPPER = """
import os, sys
rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
out = sys.argv[1]
with open(os.path.join(out, f"pid_{rank}"), "w") as fh:
    fh.write(str(os.getpid()))
from relcp_mpi.cli import main
rc = main(sys.argv[2:])
with open(os.path.join(out, f"rc_{rank}"), "w") as fh:
    fh.write(str(rc))
sys.exit(rc)
"""


@serial_only
@pytest.mark.parametrize("how", ["usr1-to-mpirun", "term-to-all-ranks", "term-to-one-rank"])
def test_signal_checkpoint_clean_exit_and_resume(tmp_path, how):
    """A long run is signalled mid-way: every rank writes the checkpoint at the end of the step and exits
    with status 3 (so does mpirun); the run then resumes from it (--restart latest) and finishes."""
    out = tmp_path / "out"
    out.mkdir()
    raw = pile_raw(out, 2000, trajectory_every=1)
    raw["time"]["dt"] = 0.05
    deck = write_deck(tmp_path / "deck.yaml", raw)
    wrapper = tmp_path / "wrap.py"
    wrapper.write_text(_WRAPPER)
    proc = subprocess.Popen([mpirun_path(), "-n", "2", sys.executable, str(wrapper), str(tmp_path), "run", deck],
                            env=clean_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        traj = out / "pile.h5"          # created by Simulation.run, after the handlers are installed
        t0 = time.monotonic()
        while not (traj.exists() and (tmp_path / "pid_0").exists() and (tmp_path / "pid_1").exists()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - t0 < 60, "run did not start"
            time.sleep(0.05)
        time.sleep(0.5)
        pids = [int((tmp_path / f"pid_{r}").read_text()) for r in (0, 1)]
        if how == "usr1-to-mpirun":
            os.kill(proc.pid, signal.SIGUSR1)
        elif how == "term-to-all-ranks":
            for p in pids:
                os.kill(p, signal.SIGTERM)
        else:
            os.kill(pids[1], signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 3, (stdout, stderr)
    assert [(tmp_path / f"rc_{r}").read_text() for r in (0, 1)] == ["3", "3"]
    sig = "SIGUSR1" if how.startswith("usr1") else "SIGTERM"
    lines = [ln for ln in stdout.splitlines() if "stopped by" in ln]
    assert len(lines) == 1 and sig in lines[0] and "--restart latest" in lines[0], stdout
    assert "Traceback" not in stderr, stderr
    ck = latest_checkpoint(str(out / "pile_ckpt"))
    assert ck is not None and ck in lines[0]
    step = verify_checkpoint(ck)["step"]
    assert 0 <= step < 2000           # 0: stopped before the first step (initial-state checkpoint)
    # resume and finish two steps later
    r, _ = run_cli(["run", deck, "--restart", "latest", "--steps", str(step + 2)], n=2)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert f"restarting from {ck} at step {step}" in r.stdout
    from relcp_mpi.io.trajectory import list_frames
    assert [s for _, s, _, _ in list_frames(str(traj))] == list(range(0, step + 3))


def _make_checkpoint(tmp_path, steps=2):
    out = tmp_path / "out"
    raw = pile_raw(out, steps, checkpoint_every=steps, trajectory_every=1)
    deck = write_deck(tmp_path / "deck.yaml", raw)
    r, _ = run_cli(["run", deck])
    assert r.returncode == 0, (r.stdout, r.stderr)
    return deck, raw, out, checkpoint_path(str(out / "pile_ckpt"), steps)


def _flip_byte_in_dataset(path, name):
    import h5py
    with h5py.File(path, "r") as f:
        off = f[name].id.get_offset()
    with open(path, "r+b") as fh:
        fh.seek(off + 5)
        b = fh.read(1)
        fh.seek(off + 5)
        fh.write(bytes([b[0] ^ 0xFF]))


@serial_only
def test_bad_checkpoints_rejected_exit_2_nothing_touched(tmp_path):
    deck, raw, out, ck = _make_checkpoint(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    trunc = str(bad / "pile_ckpt_000000002.h5")
    data = open(ck, "rb").read()
    open(trunc, "wb").write(data[: len(data) // 2])
    corrupt = str(bad / "corrupt.h5")
    shutil.copy(ck, corrupt)
    _flip_byte_in_dataset(corrupt, "bodies/x")
    notckpt = str(bad / "traj.h5")
    shutil.copy(str(out / "pile.h5"), notckpt)
    other = dict(raw)
    other["bodies"] = pile_bodies()
    other["bodies"][0] = dict(other["bodies"][0], axes=[0.5, 0.45, 0.4])
    other_deck = write_deck(tmp_path / "other.yaml", other)
    cases = [
        (["run", deck, "--restart", str(bad / "missing.h5")], "missing.h5: file does not exist"),
        (["run", deck, "--restart", trunc], "pile_ckpt_000000002.h5: cannot open HDF5 file (truncated"),
        (["run", deck, "--restart", corrupt], "corrupt.h5: whole-file checksum mismatch"),
        (["run", deck, "--restart", notckpt], "traj.h5: missing attribute"),
        (["run", other_deck, "--restart", ck],
         "the deck changes key(s) a restart must keep: bodies[0].axes[0] "),
        (["run", deck, "--restart", "latest", "--output", str(bad)], "no valid checkpoint"),
    ]
    before = snapshot(str(tmp_path))
    # every case as a 1-rank job, the damaged/incompatible ones also under mpirun on 2 ranks
    for n, args, msg in [(None,) + c for c in cases] + [(2,) + c for c in cases[1:5]]:
        r, dt = run_cli(args, n=n, timeout=30)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        errs = [ln for ln in r.stderr.splitlines() if ln.startswith("relcp-mpi: error:")]
        assert len(errs) == 1 and msg in errs[0], (args, r.stderr)
        assert "Traceback" not in r.stderr
    assert snapshot(str(tmp_path)) == before          # no file written, replaced or touched


@serial_only
def test_deck_option_restart_latest(tmp_path):
    """output.restart: latest in the deck continues the run like --restart latest."""
    deck, raw, out, ck = _make_checkpoint(tmp_path)
    raw2 = dict(raw)
    raw2["output"] = dict(raw["output"], restart="latest")
    raw2["time"] = {"dt": 0.1, "steps": 4}
    deck2 = write_deck(tmp_path / "cont.yaml", raw2)
    r, _ = run_cli(["run", deck2], n=2)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert f"restarting from {ck} at step 2" in r.stdout
    assert verify_checkpoint(checkpoint_path(str(out / "pile_ckpt"), 4))["step"] == 4
    raw2["output"]["restart"] = 7
    r, _ = run_cli(["run", write_deck(tmp_path / "bad.yaml", raw2)])
    assert r.returncode == 2 and "output.restart: must be 'latest' or a checkpoint path" in r.stderr
