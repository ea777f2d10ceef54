"""Write failures during a run (issue 12, item 1): a failing write (ENOSPC, EIO) on ONE rank while writing a
trajectory frame, the XDMF sidecar, a checkpoint, its checksum trailer, or while a restart appends to the
trajectory ends every rank within seconds with exit 1 and one message naming the file and the OS error;
the checkpoints and trajectory frames written before stay readable, and the run continues from them with
``--restart latest`` exactly like an uninterrupted run.  Plus a real full file system (a 200 KiB tmpfs;
skipped when mounting is not permitted).

Serial (launches mpirun itself):
    .venv/bin/python -m pytest tests/test_write_faults.py -q
"""
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.io.checkpoint import verify_checkpoint
from relcp_mpi.io.trajectory import list_frames, read_frame
from tests.helpers import UNDER_LAUNCHER, checkpoint_state, clean_env, mpirun_path, write_deck

pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.size > 1 or UNDER_LAUNCHER,
                                reason="serial test (launches mpirun itself); run without mpirun")
NP = 4
TIMEOUT = 90         # hard limit of one run (start-up of 4 ranks on a shared 2-core machine included)
END_WITHIN = 30      # after the failure every rank must be gone within this many seconds (watchdog: 5 s)

DECK = {"name": "wf", "seed": 2, "time": {"dt": 0.1, "steps": 6},
        "box": {"lo": [-6, -6, -6], "hi": [6, 6, 6]},
        "bodies": [{"shape": "ellipsoid", "axes": [1.0, 0.5, 0.5], "position": [-1.2, 0.3, 0.0],
                    "force": [10.0, -5.0, 0.0]},
                   {"shape": "ellipsoid", "axes": [1.0, 0.5, 0.5], "position": [1.2, -0.3, 0.0],
                    "force": [-10.0, 5.0, 0.0]},
                   {"shape": "sphere", "radius": 0.5, "position": [0.0, 2.0, 0.0], "force": [0.0, -8.0, 0.0]},
                   {"shape": "sphere", "radius": 0.5, "position": [3.0, -2.0, 1.0], "force": [-2.0, 0.0, 0.0]}],
        "contact": {"overlap_tol": 1e-3, "skin": 1.0},
        "solver": {"tol": 1e-6},
        "output": {"trajectory_every": 1, "checkpoint_every": 2, "keep_checkpoints": 10, "progress_every": 0}}


def _run(args, inject=None, n=NP, prefix="", env_extra=None):
    env = clean_env()
    if inject:
        env["RELCP_TEST_WRITE_FAILURE"] = inject
    env.update(env_extra or {})
    cmd = [mpirun_path(), "-n", str(n), sys.executable, "-m", "relcp_mpi"] + [str(a) for a in args]
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hang (> {TIMEOUT} s): {args} {inject}: {e.stdout!r} {e.stderr!r}")
    return r, time.monotonic() - t0


def _one_error(r):
    both = r.stdout + r.stderr
    errs = [ln for ln in both.splitlines() if ln.startswith("relcp-mpi: error:")]
    assert len(errs) == 1, both
    assert "Traceback" not in both, both
    return errs[0]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted 6-step run on NP ranks (frames 0..6, checkpoints 2, 4, 6) and its start-up time."""
    tmp = tmp_path_factory.mktemp("wf")
    out = tmp / "ref"
    deck = write_deck(tmp / "wf.yaml", dict(DECK, output=dict(DECK["output"], directory=str(out))))
    r, secs = _run(["run", deck])
    assert r.returncode == 0, r.stdout + r.stderr
    return tmp, deck, out, checkpoint_state(out / "wf_ckpt_000000006.h5"), secs


# (point, rank, errno, skip) -> what must be in the message; checkpoints expected intact afterwards
CASES = {
    "frame": ("frame:2:ENOSPC:3", "trajectory frame 3 to {out}/wf.h5: No space left on device (ENOSPC) (on rank 2)",
              [2]),
    # the failing rank skips the collective flush (as if HDF5 failed before its collective part): the other
    # ranks wait inside HDF5, so the failing rank's watchdog aborts the job; its lock is left (stale)
    "frame-flush": ("frame-flush:0:EIO:4", "trajectory frame 4 to {out}/wf.h5: Input/output error (EIO) (rank 0; "
                    "other ranks did not respond within 5 s, aborting the job)", [2]),
    "xdmf": ("xdmf:0:ENOSPC:4", "XDMF sidecar {out}/wf.xdmf: No space left on device (ENOSPC) (on rank 0)", [2]),
    "checkpoint": ("checkpoint:3:ENOSPC:1",
                   "checkpoint file {out}/wf_ckpt_000000004.h5.tmp: No space left on device (ENOSPC) (on rank 3)",
                   [2]),
    # the trajectory is closed and reopened every 2 frames here (RELCP_TRAJECTORY_REOPEN_EVERY): the close after
    # frame 3 fails on rank 1
    "reopen": ("reopen:1:EIO:1", "trajectory {out}/wf.h5 (reopening): Input/output error (EIO) (on rank 1)", [2]),
    "checkpoint-trailer": ("checkpoint-trailer:0:EDQUOT:1",
                           "cannot write checkpoint {out}/wf_ckpt_000000004.h5: checksum trailer of "
                           "{out}/wf_ckpt_000000004.h5.tmp: Disk quota exceeded (EDQUOT)", [2]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_injected_write_failure_on_one_rank(reference, case):
    tmp, deck, ref_out, ref_final, _ = reference
    inject, message, checkpoints = CASES[case]
    out = tmp / case
    r, secs = _run(["run", deck, "--output", out], inject=inject,
                   env_extra={"RELCP_TRAJECTORY_REOPEN_EVERY": "2"} if case == "reopen" else None)
    err = _one_error(r)
    assert r.returncode == 1, r.stdout + r.stderr
    assert message.format(out=out) in err, err
    assert secs < TIMEOUT
    # earlier output intact: the checkpoints before the failure verify, the frames before it are readable
    names = sorted(os.listdir(out))
    assert [n for n in names if n.endswith(".h5") and "_ckpt_" in n] == \
        [f"wf_ckpt_{s:09d}.h5" for s in checkpoints], names
    assert not any(n.endswith(".tmp") for n in names), names                  # no half-written temporary
    assert ("wf.lock" in names) == (case == "frame-flush")                     # released unless aborted
    for s in checkpoints:
        verify_checkpoint(str(out / f"wf_ckpt_{s:09d}.h5"))
    frames = [s for _, s, _, _ in list_frames(str(out / "wf.h5"))]
    assert frames == list(range(frames[-1] + 1)) and frames[-1] >= checkpoints[-1]
    for s in frames:
        assert read_frame(str(out / "wf.h5"), step=s)["x"].shape == (4, 3)
    # ... and restartable: the continued run ends exactly where the uninterrupted one did
    r, _ = _run(["run", deck, "--output", out, "--restart", "latest"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("removed the stale lock" in r.stdout) == (case == "frame-flush")
    got = checkpoint_state(out / "wf_ckpt_000000006.h5")
    for k in ref_final:
        assert np.array_equal(got[k], ref_final[k]), k
    assert [s for _, s, _, _ in list_frames(str(out / "wf.h5"))] == list(range(7))


def test_injected_failure_while_restart_appends(reference):
    """A restart whose trajectory append (dropping the frames after the checkpoint) fails: exit 1, one
    message, the checkpoint it started from untouched."""
    tmp, deck, ref_out, _, _ = reference
    import shutil
    out = tmp / "append"
    shutil.copytree(ref_out, out)
    before = (out / "wf_ckpt_000000004.h5").read_bytes()
    r, _ = _run(["run", deck, "--output", out, "--restart", str(out / "wf_ckpt_000000004.h5")],
                inject="append:1:EIO")
    err = _one_error(r)
    assert r.returncode == 1
    assert f"trajectory {out}/wf.h5 (dropping frames after step 4): Input/output error (EIO) (on rank 1)" in err
    assert (out / "wf_ckpt_000000004.h5").read_bytes() == before
    verify_checkpoint(str(out / "wf_ckpt_000000004.h5"))


# ------------------------------------------------------------------------------------------------
# a real full file system
def _mounted_tmpfs(d, size):
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a {size} tmpfs here (needs root / CAP_SYS_ADMIN): "
                    f"{r.stderr.strip() or r.returncode}")
    yield d
    for _ in range(20):
        if subprocess.run(["umount", str(d)], capture_output=True).returncode == 0:
            break
        time.sleep(0.5)


@pytest.fixture
def small_fs(tmp_path):
    yield from _mounted_tmpfs(tmp_path / "fs", "200k")


@pytest.fixture
def tiny_fs(tmp_path):
    yield from _mounted_tmpfs(tmp_path / "fs", "8k")


def test_event_engine_full_filesystem(tiny_fs):
    """The event-driven engine's result file does not fit: exit 1, one message naming it, on 2 ranks."""
    from tests.helpers import ROOT
    deck = os.path.join(ROOT, "input_decks", "newton_cradle.yaml")
    out = tiny_fs / "out"
    r, _ = _run(["run", deck, "--output", out], n=2)
    err = _one_error(r)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"cannot write {out}/newton_cradle_events.h5:" in err, err


FULL = {"name": "full", "seed": 1, "time": {"dt": 0.05, "steps": 400},
        "box": {"lo": [0, 0, 0], "hi": [8, 8, 8], "periodic": [True, True, False]},
        "walls": [{"point": [0, 0, 0], "normal": [0, 0, 1]}], "forces": {"body_force": [0, 0, -5]},
        "generate": [{"shape": "sphere", "radius": 0.4, "count": 64, "method": "random",
                      "region": {"lo": [0, 0, 0.05], "hi": [8, 8, 8]}}],
        "output": {"progress_every": 0, "keep_checkpoints": 1000}}


@pytest.mark.parametrize("what", ["trajectory", "checkpoints"])
def test_real_full_filesystem(tmp_path, small_fs, what):
    out = small_fs / "out"
    o = dict(FULL["output"], trajectory_every=1 if what == "trajectory" else 0,
             checkpoint_every=0 if what == "trajectory" else 1)
    deck = write_deck(tmp_path / "full.yaml", dict(FULL, output=o))
    r, secs = _run(["run", deck, "--output", out])
    err = _one_error(r)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "No space left on device (ENOSPC)" in err and str(out) in err, err
    assert secs < TIMEOUT
    if what == "trajectory":
        frames = list_frames(str(out / "full.h5"))
        assert len(frames) >= 3
        for _, s, _, n in frames:
            assert n == 64 and np.all(np.isfinite(read_frame(str(out / "full.h5"), step=s)["x"]))
    else:
        cks = sorted(n for n in os.listdir(out) if n.endswith(".h5"))
        assert len(cks) >= 2
        for n in cks:
            verify_checkpoint(str(out / n))
