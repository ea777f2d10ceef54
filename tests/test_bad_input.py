"""Hostile and broken input to ``relcp-mpi run`` on 4 ranks (issue 12, item 5): every case ends with exit 2
and ONE message naming the deck / key / path, no traceback, no hang, nothing written outside the output
directory and no pre-existing file changed.  Also the output-directory lock against a concurrent run.

Serial (the tests launch ``mpirun -n 4`` themselves):
    .venv/bin/python -m pytest tests/test_bad_input.py -q
"""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from mpi4py import MPI

from tests.helpers import UNDER_LAUNCHER, clean_env, mpirun_path, run_cli, snapshot, write_deck

pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.size > 1 or UNDER_LAUNCHER,
                                reason="serial test (launches mpirun itself); run without mpirun")
NP = 4
TIMEOUT = 90            # a case taking longer is a hang


GOOD = """name: good
time: {dt: 0.1, steps: 2}
box: {lo: [-5, -5, -5], hi: [5, 5, 5]}
output: {trajectory_every: 1, checkpoint_every: 1, progress_every: 0}
bodies:
  - {shape: sphere, radius: 1.0, position: [0, 0, 0], force: [1, 0, 0]}
  - {shape: sphere, radius: 1.0, position: [2.1, 0, 0]}
"""


def _one_error(r):
    """(all output, the one error message: its line plus the '  - problem' lines under it)."""
    both = r.stdout + r.stderr
    lines = both.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("relcp-mpi: error:")]
    assert len(starts) == 1, both
    assert "Traceback" not in both, both
    i = starts[0] + 1
    while i < len(lines) and lines[i].startswith("  - "):
        i += 1
    return both, "\n".join(lines[starts[0]:i])


def run_case(tmp_path, deck_path, extra=(), out_name="out", expect_out=False):
    """Run on NP ranks with a pre-existing file next to the deck; check the common guarantees.  Returns the
    combined output and the error line."""
    sentinel = tmp_path / "sentinel.txt"
    sentinel.write_text("pre-existing\n")
    out = tmp_path / out_name
    before = snapshot(str(tmp_path))
    r, _ = run_cli(["run", deck_path, "--output", out, *extra], n=NP, timeout=TIMEOUT)
    both, err = _one_error(r)
    assert r.returncode == 2, both
    after = snapshot(str(tmp_path))
    assert after == before, (sorted(set(after) ^ set(before)), both)      # nothing written, nothing changed
    if not expect_out:
        assert not out.exists()
    return both, err


# ------------------------------------------------------------------------------------------------
def _first_bad_utf8_offset(data):
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start
    return None


def test_binary_garbage_deck(tmp_path):
    data = np.random.default_rng(3).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    off = _first_bad_utf8_offset(data)
    assert off is not None
    deck = tmp_path / "garbage.yaml"
    deck.write_bytes(data)
    _, err = run_case(tmp_path, str(deck))
    assert str(deck) in err and "not a UTF-8 text file" in err and f"byte offset {off} " in err


def test_invalid_utf8_in_deck(tmp_path):
    text = GOOD.encode()
    k = text.index(b"bodies:")
    data = text[:k] + b"# caf\xe9\n" + text[k:]            # latin-1 in a comment
    deck = tmp_path / "latin1.yaml"
    deck.write_bytes(data)
    _, err = run_case(tmp_path, str(deck))
    assert str(deck) in err and f"byte offset {k + 5} " in err and "0xe9" in err


def test_control_character_in_deck(tmp_path):
    text = GOOD.encode()
    k = text.index(b"bodies:")
    deck = tmp_path / "nul.yaml"
    deck.write_bytes(text[:k] + b"\x00" + text[k:])
    _, err = run_case(tmp_path, str(deck))
    assert str(deck) in err and f"#x0000 at byte offset {k} " in err


DECK_CASES = {
    "duplicate-top-level": (GOOD.replace("output:", "time: {dt: 0.2, steps: 3}\noutput:"),
                            "duplicated key 'time' (at lines 2 and 4;"),
    "duplicate-nested": (GOOD.replace("time: {dt: 0.1, steps: 2}", "time:\n  dt: 0.1\n  steps: 2\n  dt: 0.2"),
                         "duplicated key 'dt' (at lines 3 and 5;"),
    "duplicate-in-body": (GOOD.replace("position: [2.1, 0, 0]}", "position: [2.1, 0, 0], radius: 2.0}"),
                          "duplicated key 'radius' (at lines 7 and 7;"),
    "dt-overflow": (GOOD.replace("dt: 0.1", "dt: 1.0e+308"), "time.dt: must be at most 1e+100 in magnitude"),
    "dt-vs-box": (GOOD.replace("dt: 0.1", "dt: 1.0e+6"), "time.dt: 1e+06 is too large for the box"),
    "dt-inf": (GOOD.replace("dt: 0.1", "dt: .inf"), "time.dt: expected float (finite), got inf"),
    "dt-nan": (GOOD.replace("dt: 0.1", "dt: .nan"), "time.dt: expected float (finite), got nan"),
    "t_end-too-many-steps": (GOOD.replace("dt: 0.1, steps: 2", "dt: 1.0e-12, t_end: 1.0e+3"),
                             "time.t_end: t_end / dt = 1e+15 steps, more than the supported"),
    "steps-too-many": (GOOD.replace("steps: 2", f"steps: {2 ** 40}"), "time.steps: must be in [0, 4294967295]"),
    "seed-2**70": (GOOD.replace("name: good", f"name: good\nseed: {2 ** 70}"), "seed: must be in [0, 2**64)"),
    "seed-negative": (GOOD.replace("name: good", "name: good\nseed: -1"), "seed: must be in [0, 2**64)"),
    "int-too-large-for-float": (GOOD.replace("radius: 1.0, position: [0", f"radius: {10 ** 400}, position: [0"),
                                "bodies[0].radius: expected float (finite), got 1000"),
    "position-inf": (GOOD.replace("[2.1, 0, 0]", "[.inf, 0, 0]"),
                     "bodies[1].position: must be a list of 3 numbers (finite), got [inf, 0, 0]"),
    "force-huge": (GOOD.replace("force: [1, 0, 0]", "force: [1.0e+200, 0, 0]"),
                   "bodies[0].force: components must be at most 1e+100"),
    "generator-count-1e9": (GOOD.replace("bodies:", "generate:\n  - {shape: sphere, radius: 0.001, count: 1000000000,"
                                                     " region: {lo: [3, 3, 3], hi: [5, 5, 5]}}\nbodies:"),
                            "generate: 1000000002 initial bodies need an estimated"),
    "body-outside-box": (GOOD.replace("[2.1, 0, 0]", "[7.5, 0, 0]"),
                         "bodies[1].position: [7.5, 0, 0] lies outside the box"),
    "region-outside-box": (GOOD.replace("bodies:", "generate:\n  - {shape: sphere, radius: 0.1, count: 4,"
                                                   " region: {lo: [3, 3, 3], hi: [6, 5, 5]}}\nbodies:"),
                           "generate[0].region: region lo=[3, 3, 3] hi=[6, 5, 5] extends outside the box"),
    "name-dotdot": (GOOD.replace("name: good", "name: ../escape"), "name: must not contain path separators"),
    "name-subdir": (GOOD.replace("name: good", "name: sub/dir/x"), "name: must not contain path separators"),
    "name-dots": (GOOD.replace("name: good", "name: a..b"), "name: must not contain '..'"),
}


@pytest.mark.parametrize("case", sorted(DECK_CASES))
def test_bad_deck_4_ranks(tmp_path, case):
    text, problem = DECK_CASES[case]
    deck = write_deck(tmp_path / f"{case}.yaml", text)
    both, err = run_case(tmp_path, deck)
    assert deck in err, both
    assert both.count(problem) == 1, both
    if case == "generator-count-1e9":
        assert "GiB per rank" in both and "GiB available per rank" in both
    # a name that could escape: nothing anywhere near the deck either
    assert not (tmp_path.parent / "escape").exists() and not (tmp_path / "sub").exists()


def test_good_deck_runs(tmp_path):
    """The template of the cases above is valid: it runs, and the lock is gone afterwards."""
    deck = write_deck(tmp_path / "good.yaml", GOOD)
    r, _ = run_cli(["run", deck, "--output", tmp_path / "out"], n=NP, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(os.listdir(tmp_path / "out")) == ["good.h5", "good.xdmf", "good_ckpt_000000001.h5",
                                                    "good_ckpt_000000002.h5"]


def test_missing_deck_file_says_so(tmp_path):
    r, _ = run_cli(["run", tmp_path / "nope.yaml"], n=NP, timeout=TIMEOUT)
    _, err = _one_error(r)
    assert r.returncode == 2 and "nope.yaml" in err and "deck file does not exist" in err


def test_steps_not_a_number_reported_once(tmp_path):
    deck = write_deck(tmp_path / "good.yaml", GOOD)
    r, _ = run_cli(["run", deck, "--steps", "abc"], n=NP, timeout=TIMEOUT)
    both = r.stdout + r.stderr
    assert r.returncode == 2, both
    assert both.count("invalid int value: 'abc'") == 1 and both.count("usage:") == 1, both
    assert "Traceback" not in both


# ------------------------------------------------------------------------------------------------
# output directory
def test_output_is_a_file(tmp_path):
    deck = write_deck(tmp_path / "good.yaml", GOOD)
    (tmp_path / "out").write_text("a file\n")
    _, err = run_case(tmp_path, deck, expect_out=True)
    assert f"output directory {tmp_path / 'out'}: exists and is not a directory" in err


def test_output_below_a_file(tmp_path):
    deck = write_deck(tmp_path / "good.yaml", GOOD)
    (tmp_path / "blocker").write_text("a file\n")
    _, err = run_case(tmp_path, deck, out_name="blocker/sub/out")
    assert f"output directory {tmp_path / 'blocker/sub/out'}: cannot be created ({tmp_path / 'blocker'} is " \
           f"not a directory): Not a directory (ENOTDIR)" in err


@pytest.fixture
def readonly_dir(tmp_path):
    """A read-only tmpfs mounted at tmp_path/ro (skips when mounting is not permitted)."""
    d = tmp_path / "ro"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(d)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {r.stderr.strip() or r.returncode}")
    yield d
    subprocess.run(["umount", str(d)], capture_output=True)


def test_output_on_readonly_filesystem(tmp_path, readonly_dir):
    deck = write_deck(tmp_path / "good.yaml", GOOD)
    for out in (readonly_dir, readonly_dir / "new"):
        r, _ = run_cli(["run", deck, "--output", out], n=NP, timeout=TIMEOUT)
        both, err = _one_error(r)
        assert r.returncode == 2, both
        assert f"output directory {out}" in err and "Read-only file system (EROFS)" in err, err
    assert os.listdir(readonly_dir) == []


# ------------------------------------------------------------------------------------------------
# the run lock
def _lock(out):
    return out / "good.lock"


def test_lock_held_by_live_process_refuses(tmp_path):
    """A lock held by a live process on this host (a stand-in for another run): exit 2 naming its pid and host,
    the lock and the directory are left alone."""
    from relcp_mpi.io.rundir import _proc_start
    import socket
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        info = {"pid": holder.pid, "host": socket.gethostname(), "proc_start": _proc_start(holder.pid),
                "started": "2026-01-01T00:00:00Z", "command": "relcp-mpi run other.yaml"}
        _lock(out).write_text(json.dumps(info) + "\n")
        deck = write_deck(tmp_path / "good.yaml", GOOD)
        _, err = run_case(tmp_path, deck, expect_out=True)
        assert f"output directory {out} is in use by another run of 'good' (pid {holder.pid} on host " \
               f"{socket.gethostname()}" in err and str(_lock(out)) in err
        assert os.listdir(out) == ["good.lock"]
    finally:
        holder.kill()
        holder.wait()


def test_lock_of_exited_unreaped_or_exiting_holder_is_stale(tmp_path):
    """The ranks of a run ended by MPI_Abort may still exist when the launcher returns: as zombies (exited, not
    reaped) or for a moment while they exit.  Their lock is stale: a zombie holder at once, a holder that exits
    within STALE_GRACE seconds after waiting for it (rundir.acquire_run_lock, serial)."""
    import socket
    from relcp_mpi.io.rundir import STALE_GRACE, _proc_start, acquire_run_lock
    for kind in ("zombie", "exiting"):
        out = tmp_path / kind
        out.mkdir()
        code = "pass" if kind == "zombie" else "import time; time.sleep(%g)" % (0.3 * STALE_GRACE)
        holder = subprocess.Popen([sys.executable, "-c", code])
        try:
            info = {"pid": holder.pid, "host": socket.gethostname(), "proc_start": _proc_start(holder.pid)}
            _lock(out).write_text(json.dumps(info) + "\n")
            if kind == "zombie":
                deadline = time.monotonic() + 30
                while open(f"/proc/{holder.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
            lock = acquire_run_lock(str(out), "good")      # not refused: the holder is gone / goes
            assert lock.note and f"removed the stale lock {_lock(out)}" in lock.note
            lock.release()
        finally:
            holder.kill()
            holder.wait()


def test_stale_lock_is_replaced(tmp_path):
    """A lock left by a dead process on this host is removed (with a note) and the run proceeds; the
    run's own lock is gone afterwards."""
    import socket
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _lock(out).write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "proc_start": 1}) + "\n")
    deck = write_deck(tmp_path / "good.yaml", GOOD)
    r, _ = run_cli(["run", deck, "--output", out], n=NP, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(f"removed the stale lock {_lock(out)}") == 1
    assert not _lock(out).exists() and (out / "good_ckpt_000000002.h5").exists()


def test_concurrent_runs_second_refuses(tmp_path):
    """Two real runs into one directory: the second refuses naming the first (its rank-0 pid), the first
    finishes normally and releases the lock."""
    out = tmp_path / "out"
    deck = write_deck(tmp_path / "good.yaml", GOOD)
    env = clean_env()
    env["RELCP_CHECKPOINT_TEST_DELAY"] = "4"          # the first run sleeps inside each checkpoint write
    first = subprocess.Popen([mpirun_path(), "-n", "2", sys.executable, "-m", "relcp_mpi", "run", deck,
                              "--output", str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        t0 = time.monotonic()
        while not _lock(out).exists() and time.monotonic() - t0 < 60 and first.poll() is None:
            time.sleep(0.1)
        assert _lock(out).exists(), "first run never took the lock"
        holder = json.loads(_lock(out).read_text())
        r, _ = run_cli(["run", deck, "--output", out], n=NP, timeout=TIMEOUT)
        both, err = _one_error(r)
        assert r.returncode == 2, both
        assert f"is in use by another run of 'good' (pid {holder['pid']} on host {holder['host']}" in err
        so, se = first.communicate(timeout=TIMEOUT)
        assert first.returncode == 0, so + se
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert not _lock(out).exists()
    assert sorted(os.listdir(out)) == ["good.h5", "good.xdmf", "good_ckpt_000000001.h5", "good_ckpt_000000002.h5"]


def test_failed_restart_leaves_no_directory(tmp_path):
    """A restart that is refused (no checkpoint) releases the lock and removes the directory it created."""
    deck = write_deck(tmp_path / "good.yaml", GOOD)
    _, err = run_case(tmp_path, deck, extra=("--restart", "latest"))
    assert "no valid checkpoint" in err


def test_lock_unit(tmp_path):
    """acquire/release directly: a second acquire while held is refused; release removes the lock and the
    directory it created (only when empty)."""
    from relcp_mpi.io.rundir import RunDirError, acquire_run_lock
    d = tmp_path / "a" / "b"
    lk = acquire_run_lock(str(d), "x")
    assert d.is_dir() and (d / "x.lock").exists() and lk.created_dir
    with pytest.raises(RunDirError, match=f"pid {os.getpid()}"):
        acquire_run_lock(str(d), "x")
    other = acquire_run_lock(str(d), "y")           # another name in the same directory is independent
    other.release()
    lk.release()
    assert not d.exists()
    lk = acquire_run_lock(str(d), "x")
    (d / "data.h5").write_text("")
    lk.release()
    assert sorted(os.listdir(d)) == ["data.h5"]


# ------------------------------------------------------------------------------------------------
# engine: event_driven (item 7)
def _cradle():
    from tests.helpers import ROOT
    with open(os.path.join(ROOT, "input_decks", "newton_cradle.yaml")) as fh:
        return fh.read()


EVENT_CASES = {
    "grid_bits-1e9": (("horizon: 10", "horizon: 10\n  precision: {grid_bits: 1000000000}"),
                      "event_driven.precision.grid_bits: must be an integer in [1, 4096], got 1000000000"),
    "round_bits-huge": (("horizon: 10", "horizon: 10\n  precision: {round_bits: 100000}"),
                        "event_driven.precision.round_bits: must be an integer in [1, 4096], got 100000"),
    "bound_bits-huge": (("horizon: 10", "horizon: 10\n  precision: {bound_bits: 100000}"),
                        "event_driven.precision.bound_bits: must be an integer in [16, 4096], got 100000"),
    "max_refine-huge": (("horizon: 10", "horizon: 10\n  precision: {max_refine: 1000000000}"),
                        "event_driven.precision.max_refine: must be an integer in [1, 10000]"),
    "horizon-1e100000": (("horizon: 10", "horizon: 1e100000"), "event_driven.horizon: '1e100000' is out of range"),
    "horizon-huge-integer": (("horizon: 10", f"horizon: {10 ** 400}"), "event_driven.horizon: "),
    "horizon-inf": (("horizon: 10", "horizon: .inf"), "event_driven.horizon: expected a finite number"),
    "eps_time-tiny": (("eps_time: 1/1000000", "eps_time: 1e-1000"), "event_driven.eps_time: '1e-1000' is out of range"),
    "budget-huge": (("budget: 4", "budget: 1000000000000"), "event_driven.budget: must be an integer in [0, 1000000]"),
    "overlapping-spheres": (("{position: [11/10]", "{position: [9/10]"),
                            "event_driven.spheres[0] and event_driven.spheres[1]: the initial spheres overlap "
                            "(centre distance 0.9 < r_0 + r_1 = 1, by 0.1)"),
}


@pytest.mark.parametrize("case", sorted(EVENT_CASES))
def test_bad_event_deck_4_ranks(tmp_path, case):
    (old, new), problem = EVENT_CASES[case]
    text = _cradle()
    assert old in text
    deck = write_deck(tmp_path / f"{case}.yaml", text.replace(old, new, 1))
    both, err = run_case(tmp_path, deck)
    assert deck in err and both.count(problem) == 1, both


def test_event_overlap_check_is_exact():
    """Touching spheres (distance exactly r_i + r_j, irrational-free rationals) are allowed, any overlap
    however small is reported, and the pair is named."""
    from fractions import Fraction as F
    from relcp_mpi.config.deck import DeckError
    from relcp_mpi.events.deck import parse_event_deck
    base = {"engine": "event_driven", "event_driven": {
        "horizon": 1, "eps_time": "1e-6", "eps_guard": "1e-6", "delta": "1/20", "n_evt": 2, "budget": 2,
        "positions": [[0, 0], ["3/5", "4/5"], [5, 5]], "radii": ["1/2", "1/2", 1]}}
    kw = parse_event_deck(base)                                   # |(3/5, 4/5)| = 1 = r_0 + r_1: touching
    assert kw["positions"][1] == [F(3, 5), F(4, 5)]
    base["event_driven"]["radii"] = ["1/2", str(F(1, 2) + F(1, 10 ** 30)), 1]
    with pytest.raises(DeckError, match=r"positions\[0\] and event_driven.positions\[1\]: the initial spheres "
                                        r"overlap") as ei:
        parse_event_deck(base)
    assert "positions[2]" not in str(ei.value)
