"""Damaged checkpoints (issue 12, item 6): a seeded sample of byte offsets of a small checkpoint is corrupted
one at a time and a 2-rank restart is run from each copy under an address-space limit (``ulimit -v``) and a
timeout.  Every restart must end with exit 2 (one message naming the file, no traceback, nothing written)
or continue identically to the uninterrupted run -- never a crash, a hang or a runaway allocation.

Serial (launches mpirun itself):
    .venv/bin/python -m pytest tests/test_checkpoint_damage.py -q
"""
import shutil
import subprocess
import sys

import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.io.checkpoint import TRAILER_LEN, TRAILER_MAGIC
from tests.helpers import UNDER_LAUNCHER, checkpoint_state, clean_env, mpirun_path, snapshot, write_deck

pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.size > 1 or UNDER_LAUNCHER,
                                reason="serial test (launches mpirun itself); run without mpirun")
TIMEOUT = 60                 # a restart taking longer is a hang
VMEM_KB = 4_000_000          # ulimit -v per process: far above a normal run, far below a runaway allocation
N_SAMPLE = 24

DECK = {"name": "dmg", "seed": 5, "time": {"dt": 0.1, "steps": 3},
        "box": {"lo": [-6, -6, -6], "hi": [6, 6, 6]},
        "bodies": [{"shape": "ellipsoid", "axes": [1.0, 0.5, 0.5], "position": [-1.2, 0.3, 0.0],
                    "force": [10.0, -5.0, 0.0]},
                   {"shape": "ellipsoid", "axes": [1.0, 0.5, 0.5], "position": [1.2, -0.3, 0.0],
                    "force": [-10.0, 5.0, 0.0]},
                   {"shape": "sphere", "radius": 0.5, "position": [0.0, 2.0, 0.0], "force": [0.0, -8.0, 0.0]}],
        "contact": {"overlap_tol": 1e-3, "skin": 1.0},
        "solver": {"tol": 1e-6},
        "output": {"trajectory_every": 1, "checkpoint_every": 1, "keep_checkpoints": 10, "progress_every": 0}}


def _mpirun(args, n=2):
    """``relcp-mpi ARGS`` on n ranks under ``ulimit -v``; fails the test on a hang."""
    cmd = " ".join([f"ulimit -v {VMEM_KB};", "exec", mpirun_path(), "-n", str(n), sys.executable, "-m",
                    "relcp_mpi"] + [f"'{a}'" for a in args])
    try:
        return subprocess.run(["bash", "-c", cmd], env=clean_env(), capture_output=True, text=True,
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hang (> {TIMEOUT} s): {args}: {e.stdout!r} {e.stderr!r}")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted 3-step run on 2 ranks with checkpoints after every step."""
    tmp = tmp_path_factory.mktemp("dmg")
    out = tmp / "ref"
    deck = write_deck(tmp / "dmg.yaml", dict(DECK, output=dict(DECK["output"], directory=str(out))))
    r = _mpirun(["run", deck])
    assert r.returncode == 0, r.stdout + r.stderr
    return tmp, deck, out, checkpoint_state(out / "dmg_ckpt_000000003.h5")


def _restart_from(tmp, deck, ref_out, name, data):
    """A copy of the reference run's state after step 1 (trajectory and checkpoint 1) whose checkpoint holds
    ``data``; restart from it to step 3.  Returns (CompletedProcess, case directory, snapshot before)."""
    case = tmp / name
    case.mkdir()
    shutil.copy(ref_out / "dmg.h5", case / "dmg.h5")
    ck = case / "dmg_ckpt_000000001.h5"
    ck.write_bytes(data)
    before = snapshot(str(case))
    r = _mpirun(["run", deck, "--output", str(case), "--restart", str(ck)])
    return r, case, before


def _assert_exit2_or_identical(r, case, before, ref_state, what):
    both = r.stdout + r.stderr
    assert r.returncode in (0, 2), (what, r.returncode, both)
    assert "Traceback" not in both, (what, both)
    if r.returncode == 2:
        errs = [ln for ln in r.stderr.splitlines() if ln.startswith("relcp-mpi: error:")]
        assert len(errs) == 1 and "dmg_ckpt_000000001.h5" in errs[0], (what, both)
        assert snapshot(str(case)) == before, what                    # nothing written or changed
        return "refused"
    got = checkpoint_state(case / "dmg_ckpt_000000003.h5")
    for k in ref_state:
        assert np.array_equal(got[k], ref_state[k]), (what, k)         # bitwise the uninterrupted run
    return "identical"


def test_intact_and_legacy_checkpoints_continue_identically(reference):
    tmp, deck, out, ref = reference
    raw = (out / "dmg_ckpt_000000001.h5").read_bytes()
    assert raw[-TRAILER_LEN:].startswith(TRAILER_MAGIC)
    for name, data in (("intact", raw), ("legacy", raw[:-TRAILER_LEN])):
        r, case, before = _restart_from(tmp, deck, out, name, data)
        assert _assert_exit2_or_identical(r, case, before, ref, name) == "identical", r.stdout + r.stderr


def test_corrupted_bytes_refused_or_identical(reference):
    tmp, deck, out, ref = reference
    raw = (out / "dmg_ckpt_000000001.h5").read_bytes()
    rng = np.random.default_rng(20261203)
    n = len(raw)
    # the superblock, a few bytes of the trailer (magic, digest, length) and a seeded sample of the rest
    offsets = [0, 9, 20, 44, n - TRAILER_LEN + 2, n - TRAILER_LEN + 50, n - 8]
    offsets += sorted(int(o) for o in rng.choice(n - TRAILER_LEN, N_SAMPLE - len(offsets), replace=False))
    verdicts = {}
    for off in offsets:
        bad = bytearray(raw)
        bad[off] ^= int(rng.integers(1, 256))
        r, case, before = _restart_from(tmp, deck, out, f"flip{off}", bytes(bad))
        verdicts[off] = _assert_exit2_or_identical(r, case, before, ref, f"byte {off}")
        shutil.rmtree(case)
    # with the whole-file checksum every damaged copy is refused before HDF5 reads it
    assert set(verdicts.values()) == {"refused"}, verdicts
