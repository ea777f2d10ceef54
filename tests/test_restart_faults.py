"""Restart faults (issue 12, items 2-4): a same-rank restart reproduces the uninterrupted run's trajectory
frames AND its per-step diagnostics bit for bit; a restart with a changed deck reports every difference and
refuses the physics-defining ones (exit 2); a stop signal during start-up ends the job with status 3 and one
message on every rank count, never a traceback or a hang.

MPI:     mpirun -n 2 tools/mpi_pytest.sh -q --with-mpi -m "mpi and not slow" tests/test_restart_faults.py
Serial:  .venv/bin/python -m pytest tests/test_restart_faults.py -q   (the subprocess tests: serial only)
"""
import os

import h5py
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.config.deck import validate
from relcp_mpi.io.checkpoint import checkpoint_path
from tests.helpers import UNDER_LAUNCHER
from tests.test_restart import colony_raw

WORLD = MPI.COMM_WORLD
serial_only = pytest.mark.skipif(WORLD.size > 1 or UNDER_LAUNCHER,
                                 reason="serial test (launches mpirun itself); run without mpirun")
HANG_TIMEOUT = 180


def _frames(path):
    """{step: (attrs dict, {dataset: array})} of every frame of a trajectory file (serial read)."""
    out = {}
    with h5py.File(path, "r") as f:
        for g in f["frames"].values():
            out[int(g.attrs["step"])] = (dict(g.attrs), {k: ds[()] for k, ds in g.items()})
        table = {k: ds[()] for k, ds in f["diagnostics"].items()}
    return out, table


# ------------------------------------------------------------------------------------------------
# item 4: diagnostics of a same-rank restart
@pytest.mark.mpi
def test_same_rank_restart_frames_and_diagnostics_bitwise(shared_dir, hang_guard):
    """Growing, dividing colony with RCB rebalancing checked every 2 steps (imbalance 1.01): uninterrupted
    N steps vs. k steps + checkpoint + (crash after k + 2) + restart.  Every frame (datasets and attributes,
    i.e. the step's diagnostics), every row of the /diagnostics table and every in-memory diagnostics dict
    must be bitwise equal.  The restart point k = 5 lies between two rebalance checks, where the imbalance
    diagnostic of the last check must come from the checkpoint."""
    from relcp_mpi.simulation import Simulation
    N, k = 12, 5

    def deck(d, steps, every=0):
        raw = colony_raw(d, steps, every)
        raw["output"]["trajectory_every"] = 1
        return validate(raw)

    ref_dir, run_dir = os.path.join(shared_dir, "ref"), os.path.join(shared_dir, "run")
    ref = Simulation.from_deck(deck(ref_dir, N), comm=WORLD)
    ref.run()
    assert ref.n_global > 12 and "imbalance" in ref.history[k]        # cells divided, RCB checks ran
    part = Simulation.from_deck(deck(run_dir, k + 2, k), comm=WORLD)
    part.run()
    sim = Simulation.from_checkpoint(checkpoint_path(os.path.join(run_dir, "colony_ckpt"), k),
                                     deck(run_dir, N), "", WORLD)
    sim.run()
    assert len(sim.history) == N - k
    for s, (a, b) in enumerate(zip(ref.history[k:], sim.history), start=k + 1):
        assert a.keys() == b.keys(), (s, sorted(set(a) ^ set(b)))
        for key in a:
            assert np.array_equal(a[key], b[key]), (s, key, a[key], b[key])
    WORLD.Barrier()
    if WORLD.rank == 0:
        fa, ta = _frames(os.path.join(ref_dir, "colony.h5"))
        fb, tb = _frames(os.path.join(run_dir, "colony.h5"))
        assert sorted(fa) == sorted(fb) == list(range(N + 1))
        for s in fa:
            (aa, da), (ab, db) = fa[s], fb[s]
            assert aa.keys() == ab.keys(), (s, sorted(set(aa) ^ set(ab)))
            for key in aa:
                assert np.array_equal(aa[key], ab[key]), (s, key, aa[key], ab[key])
            for key in da:
                assert np.array_equal(da[key], db[key]), (s, key)
        assert ta.keys() == tb.keys()
        for key in ta:
            assert np.array_equal(ta[key], tb[key], equal_nan=True), (key, ta[key], tb[key])
        assert np.isfinite(ta["imbalance"][k + 1:]).all()            # a real value in every restarted row
    WORLD.Barrier()


# ------------------------------------------------------------------------------------------------
# item 3: a restart with a changed deck
def test_deck_change_verdicts_by_dotted_prefix():
    """The prefix tables: longest prefix wins, an unknown key is refused, --allow-deck-change accepts a
    refused key (and whatever lies below the given prefix) but never a fixed one."""
    from relcp_mpi.io.deck_changes import deck_changes, judge
    assert judge("time.dt")[0] == "allowed"
    assert judge("solver.tol")[0] == "allowed"
    assert judge("contact.skin")[0] == "allowed"
    assert judge("contact.model")[0] == "refused"
    assert judge("contact.overlap_tol")[0] == "refused"
    assert judge("fluid.viscosity")[0] == "refused"
    assert judge("fluid.kT")[0] == "refused" and judge("flow.rate")[0] == "refused"
    assert judge("fluid.viscosity", ("fluid",))[0] == "overridden"
    assert judge("bodies[3].radius")[0] == "fixed"
    assert judge("forces.body_force[2]")[0] == "fixed"
    assert judge("box.periodic[0]")[0] == "fixed"
    assert judge("brownian.temperature")[0] == "refused"            # a key no table lists
    assert judge("forces.shear_rate")[0] == "refused"               # a new key in a section with fixed keys
    assert judge("contact.model", ("contact",))[0] == "overridden"
    assert judge("contact.model_x", ("contact.model",))[0] == "refused"  # a prefix is a whole key
    assert judge("bodies[0].radius", ("bodies",))[0] == "fixed"
    old = validate({"time": {"dt": 0.1, "steps": 4}, "bodies": [{"shape": "sphere", "radius": 1.0,
                                                                  "position": [0, 0, 0]}]})
    new = validate({"time": {"dt": 0.05, "steps": 4}, "contact": {"model": "snsd"},
                    "bodies": [{"shape": "sphere", "radius": 1.0, "position": [0, 0, 0.0]}]})
    got = {c.key: (c.old, c.new, c.verdict) for c in deck_changes(old, new)}
    assert got == {"time.dt": (0.1, 0.05, "allowed"), "contact.model": ("relcp", "snsd", "refused")}


def test_deck_of_an_older_version_compares_by_its_keys():
    """A checkpoint written by an earlier version stores a deck without the keys added since (and possibly one the
    current checks refuse, here t_end / dt beyond the step limit): keys it lacks compare equal to the new
    defaults, keys it has are still compared, and a key it has that the schema no longer knows is reported."""
    import yaml
    from relcp_mpi.io.deck_changes import deck_changes, effective_stored_deck, refused
    old_text = yaml.safe_dump({"name": "old", "time": {"dt": 0.05, "t_end": 1.0e9}, "fluid": {"viscosity": 1.0},
                               "bodies": [{"shape": "sphere", "radius": 1.0, "position": [0, 0, 0]}]})
    new = validate({"name": "old", "time": {"dt": 0.05, "steps": 10},
                    "bodies": [{"shape": "sphere", "radius": 1.0, "position": [0, 0, 0]}]})
    got = {c.key: c.verdict for c in deck_changes(effective_stored_deck({"deck": old_text}), new)}
    # (values the validation derives, e.g. solver.tol from overlap_tol, show up as allowed differences)
    assert got["time.t_end"] == got["time.steps"] == "allowed" and set(got.values()) == {"allowed"}
    assert not any(k.startswith(("fluid", "flow", "forces", "bodies")) for k in got)
    viscous = validate({"name": "old", "time": {"dt": 0.05, "steps": 10}, "fluid": {"viscosity": 2.0},
                        "bodies": [{"shape": "sphere", "radius": 1.0, "position": [0, 0, 0]}]})
    assert [c.key for c in refused(deck_changes(effective_stored_deck({"deck": old_text}), viscous))] \
        == ["fluid.viscosity"]
    moved = yaml.safe_dump({**yaml.safe_load(old_text), "fluid": {"viscosity": 1.0, "body_force": [0, 0, -1]}})
    assert "fluid.body_force" in {c.key for c in refused(deck_changes(effective_stored_deck({"deck": moved}), new))}


def _two_sphere_deck(tmp_path, name="dc", model="relcp", dt=0.1, steps=4):
    from tests.helpers import write_deck
    raw = {"name": name, "time": {"dt": dt, "steps": steps}, "box": {"lo": [-5, -5, -5], "hi": [5, 5, 5]},
           "contact": {"model": model},
           "output": {"trajectory_every": 1, "checkpoint_every": 2, "progress_every": 0},
           "bodies": [{"shape": "sphere", "radius": 1.0, "position": [0, 0, 0], "force": [1, 0, 0]},
                      {"shape": "sphere", "radius": 1.0, "position": [2.1, 0, 0]}]}
    return write_deck(tmp_path / f"{name}_{model}_{dt}.yaml", raw)


def _errors(r):
    lines = (r.stdout + r.stderr).splitlines()
    assert "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    return [ln for ln in lines if ln.startswith("relcp-mpi: error:")]


@serial_only
def test_restart_with_changed_dt_is_reported_and_used(tmp_path):
    """2 ranks: 4 steps of dt 0.1 (checkpoint at 4), then the deck with dt 0.05 continues to step 6: the
    change is printed (old -> new, allowed), and the new dt is really used (t = 0.4 + 2 x 0.05)."""
    from relcp_mpi.io.checkpoint import verify_checkpoint
    from tests.helpers import run_cli
    out = tmp_path / "out"
    r, _ = run_cli(["run", _two_sphere_deck(tmp_path), "--output", out], n=2)
    assert r.returncode == 0, r.stdout + r.stderr
    r, _ = run_cli(["run", _two_sphere_deck(tmp_path, dt=0.05), "--output", out, "--restart", "latest",
                    "--steps", "6"], n=2)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not _errors(r)
    ck = checkpoint_path(str(out / "dc_ckpt"), 4)
    head = [ln for ln in r.stdout.splitlines() if "the deck differs" in ln]
    assert head == [f"relcp-mpi: the deck differs from the one of checkpoint {ck} in 2 key(s):"], r.stdout
    assert "  time.dt: 0.1 -> 0.05 (allowed)" in r.stdout.splitlines()
    assert "  time.steps: 4 -> 6 (allowed)" in r.stdout.splitlines()
    assert "output.directory" not in r.stdout         # --output of the first run is no change
    meta = verify_checkpoint(checkpoint_path(str(out / "dc_ckpt"), 6))
    assert meta["step"] == 6 and abs(meta["time"] - 0.5) < 1e-12 and meta["dt"] == 0.05


@serial_only
def test_restart_with_changed_contact_model_refused(tmp_path):
    """2 ranks: the contact model changed -> exit 2, one message naming contact.model (old -> new), nothing
    written; --allow-deck-change contact.model accepts it (reported as overridden); a step count below
    the checkpoint's step -> exit 2 with a message instead of a run doing nothing."""
    from tests.helpers import run_cli, snapshot
    out = tmp_path / "out"
    r, _ = run_cli(["run", _two_sphere_deck(tmp_path), "--output", out], n=2)
    assert r.returncode == 0, r.stdout + r.stderr
    snsd = _two_sphere_deck(tmp_path, model="snsd")
    before = snapshot(str(out))
    r, _ = run_cli(["run", snsd, "--output", out, "--restart", "latest", "--steps", "6"], n=2)
    errs = _errors(r)
    assert r.returncode == 2 and len(errs) == 1, r.stdout + r.stderr
    assert "a restart must keep: contact.model " in errs[0] and "--allow-deck-change" in errs[0]
    assert "  - contact.model: 'relcp' -> 'snsd' (refused: the contact model defines the constraints)" in r.stderr
    assert "  - time.steps: 4 -> 6 (allowed)" in r.stderr           # the other differences are listed too
    assert snapshot(str(out)) == before
    # the expert override
    r, _ = run_cli(["run", snsd, "--output", out, "--restart", "latest", "--steps", "6",
                    "--allow-deck-change", "contact.model"], n=2)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "  contact.model: 'relcp' -> 'snsd' (overridden: the contact model defines the constraints; " \
           "accepted by --allow-deck-change)" in r.stdout.splitlines()
    # fewer total steps than the checkpoint's step
    before = snapshot(str(out))
    r, _ = run_cli(["run", snsd, "--output", out, "--restart", "latest", "--steps", "3"], n=2)
    errs = _errors(r)
    assert r.returncode == 2 and len(errs) == 1, r.stdout + r.stderr
    assert "time.steps (--steps) = 3, below the step 6 of checkpoint" in errs[0]
    assert snapshot(str(out)) == before


# ------------------------------------------------------------------------------------------------
# item 2: stop signals before the first step, and in the event-driven engine
@pytest.mark.mpi
def test_stop_before_first_step_writes_initial_checkpoint(shared_dir, hang_guard):
    """A stop flag on one rank only, pending when the run starts: every rank stops before the first step;
    a fresh run writes the checkpoint of its initial state (step 0, restartable); a restart, whose state is
    already in the checkpoint it started from, writes nothing."""
    import signal

    from relcp_mpi import simulation as S
    from relcp_mpi.io.checkpoint import verify_checkpoint
    from tests.test_restart import pile_deck
    d = os.path.join(shared_dir, "run")
    sim = S.Simulation.from_deck(pile_deck(d, 5), comm=WORLD)
    if WORLD.rank == WORLD.size - 1:
        S._SIGNAL_FLAG["signum"] = int(signal.SIGUSR1)      # as the handler would
    with pytest.raises(S.StopRequested) as ei:
        sim.run()
    ck0 = checkpoint_path(os.path.join(d, "pile_ckpt"), 0)
    assert (ei.value.signum, ei.value.path, sim.step, sim.steps_run) == (signal.SIGUSR1, ck0, 0, 0)
    assert S.pending_signal() == 0
    WORLD.Barrier()
    if WORLD.rank == 0:
        assert verify_checkpoint(ck0)["step"] == 0
    mtime = os.stat(ck0).st_mtime_ns
    res = S.Simulation.from_checkpoint("latest", pile_deck(d, 5), "", WORLD)
    if WORLD.rank == 0:
        S._SIGNAL_FLAG["signum"] = int(signal.SIGTERM)
    with pytest.raises(S.StopRequested) as ei:
        res.run()
    assert (ei.value.signum, ei.value.path, res.step) == (signal.SIGTERM, ck0, 0)
    assert os.stat(ck0).st_mtime_ns == mtime                          # not rewritten
    res = S.Simulation.from_checkpoint("latest", pile_deck(d, 2), "", WORLD)
    res.run()
    assert res.step == 2
    WORLD.Barrier()


def _gas():
    import yaml

    from relcp_mpi.events.deck import parse_event_deck
    from tests.helpers import ROOT
    with open(os.path.join(ROOT, "input_decks", "event_gas.yaml")) as fh:
        deck = yaml.safe_load(fh)
    kw = parse_event_deck(deck)
    kw.pop("name")
    return kw


def _simulate(kw, **extra):
    from relcp_mpi.events import simulate
    kw = dict(kw)
    return simulate(kw.pop("positions"), kw.pop("velocities"), kw.pop("masses"), kw.pop("radii"),
                    kw.pop("restitution"), kw.pop("T"), **kw, **extra)


@pytest.mark.mpi
def test_event_driven_engine_honours_stop_on_any_rank():
    """The event loop asks ``should_stop`` before every event; a request on one rank only stops every rank
    before event k with reason 'stopped', and the certified prefix is exactly the first k events of the
    uninterrupted run."""
    import signal
    comm = WORLD if WORLD.size > 1 else None
    kw = _gas()
    full = _simulate(kw, comm=comm)
    assert full.status == "complete" and full.n_events > 6
    k = 4
    calls = [0]

    def should_stop():          # this rank only: the last one
        calls[0] += 1
        return int(signal.SIGUSR1) if calls[0] > k and WORLD.rank == WORLD.size - 1 else 0

    res = _simulate(kw, comm=comm, should_stop=should_stop)
    assert (res.status, res.reason, res.stop_signal, res.n_events) == ("unresolved", "stopped",
                                                                        int(signal.SIGUSR1), k)
    assert res.t_final == full.events[k - 1].b
    assert [(e.pair, e.a, e.b, e.E_after, e.v_plus) for e in res.events] == \
        [(e.pair, e.a, e.b, e.E_after, e.v_plus) for e in full.events[:k]]


def _descendants(pid):
    """Pids of all processes below ``pid`` (Linux /proc)."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _catches_stop_signals(pid):
    """True if the process has handlers for SIGTERM and SIGUSR1 installed (SigCgt of /proc/<pid>/status)."""
    import signal
    try:
        with open(f"/proc/{pid}/status") as fh:
            mask = int(next(ln for ln in fh if ln.startswith("SigCgt:")).split()[1], 16)
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read()
    except (OSError, StopIteration):
        return False
    return b"relcp_mpi" in cmd and all(mask >> (s - 1) & 1 for s in (signal.SIGTERM, signal.SIGUSR1))


def _signal_during_startup(tmp_path, deck, n, how, delay, timeout=120):
    """Launch ``python -m relcp_mpi run deck`` on n ranks, wait until every rank has its handlers (the
    first thing the command does), wait ``delay`` s and signal: SIGUSR1 to mpirun, or SIGTERM to one rank.
    Returns (returncode, stdout + stderr, output directory)."""
    import signal
    import subprocess
    import sys
    import time

    from tests.helpers import ROOT, clean_env, mpirun_path
    out = tmp_path / f"out_{n}_{how}_{delay}"
    proc = subprocess.Popen([mpirun_path(), "-n", str(n), sys.executable, "-m", "relcp_mpi", "run", deck,
                             "--output", str(out)], env=clean_env(), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.monotonic()
        while True:
            ranks = [p for p in _descendants(proc.pid) if _catches_stop_signals(p)]
            if len(ranks) == n:
                break
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - t0 < 60, "the ranks did not start"
            time.sleep(0.01)
        time.sleep(delay)
        if how == "usr1-to-mpirun":
            os.kill(proc.pid, signal.SIGUSR1)
        else:
            os.kill(ranks[-1], signal.SIGTERM)
        try:
            o, e = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{n} ranks, {how} {delay} s after start-up: hang (> {timeout} s)")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, o + e, out


@serial_only
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc to see the ranks' handlers")
@pytest.mark.parametrize("n", [2, 4])
def test_stop_signal_during_startup_exits_3_with_message(tmp_path, n):
    """SIGUSR1 to mpirun (forwarded to every rank) or SIGTERM to one rank only, 0 - 3.5 s after every rank
    has started (MPI initialisation, deck, PETSc, set-up, or already stepping): status 3, one 'stopped by'
    message, no traceback, no rank killed by the signal, no hang, the lock released; what was written is
    consistent with the message (nothing, the step-0 checkpoint, or the checkpoint of step S)."""
    from relcp_mpi.io.checkpoint import latest_checkpoint, verify_checkpoint
    from tests.helpers import write_deck
    raw = {"name": "sig", "time": {"dt": 0.01, "steps": 100000}, "box": {"lo": [-5, -5, -5], "hi": [5, 5, 5]},
           "output": {"trajectory_every": 10, "checkpoint_every": 0, "progress_every": 0},
           "bodies": [{"shape": "sphere", "radius": 1.0, "position": [0, 0, 0], "force": [1, 0, 0]},
                      {"shape": "sphere", "radius": 1.0, "position": [2.1, 0, 0]}]}
    deck = write_deck(tmp_path / "sig.yaml", raw)
    phases = []
    cases = [("usr1-to-mpirun", d) for d in (0.0, 0.2, 0.5, 1.0, 2.0, 3.5)] + \
            [("term-to-one-rank", d) for d in (0.0, 0.5, 1.5)]
    for how, delay in cases:
        rc, text, out = _signal_during_startup(tmp_path, deck, n, how, delay)
        what = f"{n} ranks, {how} after {delay} s:\n{text}"
        sig = "SIGUSR1" if how.startswith("usr1") else "SIGTERM"
        lines = [ln for ln in text.splitlines() if ln.startswith("relcp-mpi: stopped by")]
        assert rc == 3 and len(lines) == 1 and sig in lines[0], what
        assert "Traceback" not in text and "exited on signal" not in text and "error" not in text.lower(), what
        assert not (out / "sig.lock").exists(), what
        ck = latest_checkpoint(str(out / "sig_ckpt"))
        if "during start-up" in lines[0]:
            phases.append("start-up")
            assert "nothing was written" in lines[0] and ck is None, what
        else:
            step = 0 if "before the first step" in lines[0] else int(lines[0].split("after step ")[1].split()[0])
            phases.append("before step 1" if step == 0 else "stepping")
            assert ck is not None and f"checkpoint written to {ck};" in lines[0], what
            assert verify_checkpoint(ck)["step"] == step, what
    print(f"{n} ranks: {list(zip(cases, phases))}")
    assert "start-up" in phases, phases          # the signal did arrive during start-up (delay 0 at least)


@serial_only
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc to see the ranks' handlers")
def test_stop_signal_event_driven_engine(tmp_path):
    """engine: event_driven on 2 ranks: a stop signal ends the run with status 3 and one message (during
    start-up: nothing written; in the event loop: the certified prefix is written, reason 'stopped')."""
    import h5py

    from tests.helpers import ROOT
    deck = os.path.join(ROOT, "input_decks", "event_gas.yaml")
    for how, delay in (("usr1-to-mpirun", 0.0), ("usr1-to-mpirun", 0.8), ("term-to-one-rank", 0.4)):
        rc, text, out = _signal_during_startup(tmp_path, deck, 2, how, delay)
        what = f"{how} after {delay} s:\n{text}"
        lines = [ln for ln in text.splitlines() if ln.startswith("relcp-mpi: stopped by")]
        assert rc == 3 and len(lines) == 1, what
        assert "Traceback" not in text and "exited on signal" not in text, what
        result = out / "event_gas_events.h5"
        if "during start-up" in lines[0]:
            assert not result.exists(), what
        else:
            assert "certified prefix" in lines[0], what
            with h5py.File(result, "r") as f:
                assert (f.attrs["status"], f.attrs["reason"]) == ("unresolved", "stopped"), what
