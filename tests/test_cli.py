"""The ``relcp-mpi`` command: bad decks (exit 2, one message naming the problem, on 1 and 4 ranks, no hang),
``validate``, ``info``, ``convert``, and the refusal to overwrite the output of an earlier run.

Serial only (the tests launch ``python -m relcp_mpi`` themselves, as a 1-rank job or under ``mpirun -n 4``):
    .venv/bin/python -m pytest tests/test_cli.py -q
"""
import os

import numpy as np
import pytest
import yaml
from mpi4py import MPI

from tests.helpers import ROOT, UNDER_LAUNCHER, run_cli, snapshot, write_deck

pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.size > 1 or UNDER_LAUNCHER,
                                reason="serial test (launches relcp-mpi / mpirun itself); run without mpirun")
TIME_LIMIT = 30.0


def small_raw(out, steps=2, checkpoint_every=1, name="duo"):
    """Two ellipsoids pushed into each other (the default deck, shortened)."""
    return {"name": name, "seed": 7, "time": {"dt": 0.1, "steps": steps},
            "box": {"lo": [-8, -8, -8], "hi": [8, 8, 8]},
            "bodies": [{"shape": "ellipsoid", "axes": [2.0, 0.5, 0.5], "position": [-2.2, 0.6, 0.0],
                        "orientation": {"axis": [0, 0, 1], "angle": 0.15}, "force": [20.0, -10.0, 0.0]},
                       {"shape": "ellipsoid", "axes": [2.0, 0.5, 0.5], "position": [2.2, -0.6, 0.0],
                        "orientation": {"axis": [0, 0, 1], "angle": -0.15}, "force": [-20.0, 10.0, 0.0]}],
            "contact": {"overlap_tol": 1e-3, "skin": 2.0},
            "solver": {"tol": 1e-5},
            "output": {"directory": str(out), "trajectory_every": 1, "checkpoint_every": checkpoint_every,
                       "keep_checkpoints": 5, "progress_every": 0}}


# ------------------------------------------------------------------------------------------------
# bad decks
BASE = """name: bad
time: {dt: 0.1, steps: 3}
"""
BAD_DECKS = {
    "malformed-yaml": (BASE + "bodies: [\n  - {shape: sphere, radius: 1.0, position: [0, 0, 0]\n",
                       "malformed YAML at line"),
    "unknown-shape": (BASE + "bodies:\n  - {shape: sphere, radius: 1.0, position: [0, 0, 0]}\n"
                             "  - {shape: cube, radius: 1.0, position: [3, 0, 0]}\n",
                      "bodies[1].shape: unknown shape 'cube'"),
    "negative-radius": (BASE + "bodies:\n  - {shape: sphere, radius: -1.0, position: [0, 0, 0]}\n",
                        "bodies[0].radius: must be > 0, got -1.0"),
    "overlapping-bodies": (BASE + "bodies:\n  - {shape: sphere, radius: 1.0, position: [0, 0, 0]}\n"
                                  "  - {shape: sphere, radius: 1.0, position: [0.5, 1.0, 0]}\n"
                                  "  - {shape: sphere, radius: 1.0, position: [5, 5, 5]}\n",
                           "bodies 0 and 1 overlap by"),
    "unknown-key": (BASE + "contact: {overlap_tolerance: 1.0e-3}\n"
                           "bodies:\n  - {shape: sphere, radius: 1.0, position: [0, 0, 0]}\n",
                    "contact.overlap_tolerance: unknown key"),
}


def _run_bad_deck(deck, out, n):
    """Run a bad deck on n ranks: exit 2 within the time limit, one error line (rank 0) naming the deck file,
    no traceback, nothing written.  Returns stdout + stderr."""
    r, dt = run_cli(["run", deck, "--output", out], n=None if n == 1 else n, timeout=2 * TIME_LIMIT)
    both = r.stdout + r.stderr
    assert r.returncode == 2, both
    assert dt < TIME_LIMIT
    errors = [ln for ln in both.splitlines() if ln.startswith("relcp-mpi: error:")]
    assert len(errors) == 1 and deck in errors[0], both
    assert "Traceback" not in both
    assert not out.exists()
    return both


@pytest.mark.parametrize("n", [1, 4])
@pytest.mark.parametrize("case", sorted(BAD_DECKS))
def test_bad_deck_exit_2_one_message(tmp_path, case, n):
    text, problem = BAD_DECKS[case]
    deck = write_deck(tmp_path / f"{case}.yaml", text)
    out = tmp_path / "out"
    both = _run_bad_deck(deck, out, n)
    assert both.count(problem) == 1, both                           # ... and the key / body, once


SMALL_PERIODIC_BOX = BASE + """box: {lo: [-2, -2, -2], hi: [2, 2, 2], periodic: [true, true, true]}
contact: {skin: 0.5}
bodies:
  - {shape: sphere, radius: 0.5, position: [0, 0, 0]}
  - {shape: sphere, radius: 0.5, position: [1.2, 1.2, 1.2]}
"""


@pytest.mark.parametrize("n", [1, 2])
def test_periodic_box_too_small_for_ghost_width_exit_2(tmp_path, n):
    """Ghost width 2 r_max + 2 skin = 2 is not < L/2 = 2: a deck error found when the decomposition is
    checked (after the schema), reported once on rank 0, exit 2 on every rank, nothing written."""
    deck = write_deck(tmp_path / "tiny.yaml", SMALL_PERIODIC_BOX)
    out = tmp_path / "out"
    both = _run_bad_deck(deck, out, n)
    problem = "box: ghost width 2 (2 x largest bounding radius + 2 x contact.skin) is too large for periodic axis x"
    assert both.count(problem) == 1, both
    for s in ("of length 4", "< L/2 = 2", "enlarge the box along x", "reduce contact.skin"):
        assert s in both, both
    assert "Traceback" not in both
    assert not out.exists()


def test_missing_deck_file(tmp_path):
    r, _ = run_cli(["run", tmp_path / "nope.yaml"])
    assert r.returncode == 2
    assert "nope.yaml" in r.stderr and "deck file does not exist" in r.stderr


def test_validate(tmp_path):
    good = write_deck(tmp_path / "good.yaml", small_raw(tmp_path / "out"))
    r, _ = run_cli(["validate", good])
    assert r.returncode == 0, r.stderr
    norm = yaml.safe_load(r.stdout)
    assert norm["name"] == "duo" and norm["contact"]["max_depth"] == 50      # defaults filled in
    assert "# OK: 2 bodies, 2 steps" in r.stdout
    bad = write_deck(tmp_path / "bad.yaml", BAD_DECKS["overlapping-bodies"][0])
    r, _ = run_cli(["validate", bad])
    assert r.returncode == 2 and "bodies 0 and 1 overlap" in r.stderr and r.stdout == ""
    r, _ = run_cli(["validate", write_deck(tmp_path / "u.yaml", BAD_DECKS["unknown-key"][0])])
    assert r.returncode == 2 and "contact.overlap_tolerance: unknown key" in r.stderr


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A 2-step run on 2 ranks with checkpoints at steps 1 and 2."""
    tmp = tmp_path_factory.mktemp("cli_run")
    out = tmp / "out"
    deck = write_deck(tmp / "duo.yaml", small_raw(out))
    r, _ = run_cli(["run", deck], n=2)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "duo on 2 rank(s), 2 bodies, 2 steps" in r.stdout
    return tmp, deck, out


def test_info_checkpoint_trajectory_and_damaged(finished_run, tmp_path):
    _, _, out = finished_run
    ck = out / "duo_ckpt_000000002.h5"
    r, _ = run_cli(["info", ck])
    assert r.returncode == 0, r.stderr
    for s in ("relcp_mpi checkpoint", "step        : 2", "bodies      : 2 {'ellipsoid': 2}",
              "checksum    : OK", "on 2 ranks", "name=duo"):
        assert s in r.stdout, r.stdout
    r, _ = run_cli(["info", out / "duo.h5"])
    assert r.returncode == 0, r.stderr
    assert "relcp_mpi trajectory" in r.stdout and "frames      : 3" in r.stdout and "steps       : 0 .. 2" in r.stdout
    bad = tmp_path / "bad.h5"
    data = ck.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    r, _ = run_cli(["info", bad])
    assert r.returncode == 2 and "bad.h5" in r.stderr
    r, _ = run_cli(["info", tmp_path / "missing.h5"])
    assert r.returncode == 2 and "missing.h5: file does not exist" in r.stderr


def test_convert_checkpoint_to_trajectory(finished_run, tmp_path):
    from relcp_mpi.io.checkpoint import read_checkpoint
    from relcp_mpi.io.trajectory import list_frames, read_frame
    _, _, out = finished_run
    ck = str(out / "duo_ckpt_000000002.h5")
    dst = tmp_path / "view.h5"
    r, _ = run_cli(["convert", ck, dst])
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "view.xdmf").exists() and "view.xdmf" in r.stdout
    assert [(s, n) for _, s, _, n in list_frames(str(dst))] == [(2, 2)]
    fr = read_frame(str(dst))
    bodies, meta, _ = read_checkpoint(ck, MPI.COMM_SELF)
    assert fr["step"] == 2 and fr["time"] == meta["time"]
    assert np.array_equal(fr["gid"], bodies.gid) and np.array_equal(fr["x"], bodies.x)
    assert np.array_equal(fr["q"], bodies.q)
    # never overwrites silently; a damaged checkpoint is an input error
    before = snapshot(str(tmp_path))
    r, _ = run_cli(["convert", ck, dst])
    assert r.returncode == 2 and "view.h5: file exists (use --overwrite" in r.stderr
    assert snapshot(str(tmp_path)) == before
    r, _ = run_cli(["convert", ck, dst, "--overwrite"], n=2)
    assert r.returncode == 0, r.stderr
    assert np.array_equal(read_frame(str(dst))["x"], bodies.x)
    bad = tmp_path / "bad_ckpt.h5"
    data = open(ck, "rb").read()
    bad.write_bytes(data[: len(data) // 2])
    r, _ = run_cli(["convert", bad, tmp_path / "x.h5"])
    assert r.returncode == 2 and "bad_ckpt.h5" in r.stderr and not (tmp_path / "x.h5").exists()


def test_fresh_run_refuses_to_overwrite_earlier_output(tmp_path):
    out = tmp_path / "out"
    deck = write_deck(tmp_path / "duo.yaml", small_raw(out))
    r, _ = run_cli(["run", deck])
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(out)) == ["duo.h5", "duo.xdmf", "duo_ckpt_000000001.h5", "duo_ckpt_000000002.h5"]
    before = snapshot(str(out))
    r, _ = run_cli(["run", deck, "--steps", "1"])
    assert r.returncode == 2
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("relcp-mpi: error:")]
    assert len(errors) == 1
    assert str(out) in errors[0] and "duo.h5" in errors[0] and "--overwrite" in errors[0]
    assert snapshot(str(out)) == before                              # nothing touched
    # only the checkpoints left: still refused
    os.remove(out / "duo.h5")
    r, _ = run_cli(["run", deck, "--steps", "1"])
    assert r.returncode == 2 and "duo_ckpt_000000001.h5" in r.stderr
    # --overwrite: the earlier output is replaced, stale checkpoints of the old run are removed
    r, _ = run_cli(["run", deck, "--steps", "1", "--overwrite"])
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(out)) == ["duo.h5", "duo.xdmf", "duo_ckpt_000000001.h5"]
    # a bad deck with --overwrite deletes nothing
    before = snapshot(str(out))
    raw = small_raw(out)
    raw["bodies"][1]["position"] = [0.5, 0.0, 0.0]                   # overlaps body 0
    r, _ = run_cli(["run", write_deck(tmp_path / "overlap.yaml", raw), "--overwrite"])
    assert r.returncode == 2 and "bodies 0 and 1 overlap" in r.stderr
    assert snapshot(str(out)) == before


def test_run_default_script_is_idempotent():
    text = open(os.path.join(ROOT, "tools", "run_default.sh")).read()
    assert "--overwrite" in text
