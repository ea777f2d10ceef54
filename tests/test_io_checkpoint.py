"""Checkpoints: parallel round trip (1/2/4 ranks, any reader count), zero-body ranks, atomicity under
SIGKILL, retention, corruption detection, deck compatibility.

Serial:  /usr/bin/python3 -m pytest tests/test_io_checkpoint.py -q
MPI:     mpirun -n 4 /usr/bin/python3 -m pytest --with-mpi tests/test_io_checkpoint.py -q
"""
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

os.environ.setdefault("H5PY_ALWAYS_USE_MPI", "1")
from mpi4py import MPI  # noqa: E402

from relcp_mpi.bodies.store import FIELDS, BodyStore  # noqa: E402
from relcp_mpi.io.checkpoint import (CheckpointError, check_compatible, checkpoint_path,  # noqa: E402
                                     latest_checkpoint, read_checkpoint, verify_checkpoint,
                                     write_checkpoint, TRAILER_LEN, TRAILER_MAGIC)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORLD = MPI.COMM_WORLD
UNDER_LAUNCHER = any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))
serial_only = pytest.mark.skipif(WORLD.size > 1 or UNDER_LAUNCHER,
                                 reason="serial test (spawns processes / edits files); run without mpirun")
HANG_TIMEOUT = 60


# ------------------------------------------------------------------------------------------------
# fixtures and helpers


def global_bodies(n, seed=7):
    """The same N bodies on every rank (unique, non-contiguous gids; awkward float values)."""
    rng = np.random.default_rng(seed)
    gid = rng.permutation(np.arange(n) * 3 + 11).astype(np.int64)
    kind = rng.integers(0, 3, n)
    b = BodyStore(n, gid=gid, kind=kind, shape=rng.random((n, 3)) + 0.1, x=rng.normal(size=(n, 3)) * 10,
                  q=rng.normal(size=(n, 4)), u=rng.normal(size=(n, 6)), f_ext=rng.normal(size=(n, 6)),
                  u_imp=rng.normal(size=(n, 6)), growth=rng.random(n))
    if n > 3:  # bit patterns that a lossy path would change
        b.x[0, 0] = -0.0
        b.x[1, 1] = 5e-324
        b.u[2, 3] = np.nan
        b.growth[3] = 1e308
    return b


def owner_of(n, size, zero_rank=1, seed=3):
    """Random owner per body; ``zero_rank`` (if it exists) owns nothing."""
    own = np.random.default_rng(seed).integers(0, size, n)
    if size > 1 and zero_rank is not None:
        own[own == zero_rank] = 0
    return own


def local_part(b, owner, rank):
    idx = np.nonzero(owner == rank)[0]
    return b.take(np.random.default_rng(rank).permutation(idx))  # local order is arbitrary


def global_warm(m, seed=5):
    rng = np.random.default_rng(seed)
    return {"gid_i": rng.integers(0, 100, m), "gid_j": rng.integers(0, 100, m),
            "sub": rng.integers(0, 3, m), "gamma": rng.random(m)}


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).tobytes() if a.size else b""


def assert_bodies_equal(got, want):
    assert got.n == want.n
    for f, (dt, _) in FIELDS.items():
        g, w = getattr(got, f), getattr(want, f)
        assert g.dtype == np.dtype(dt), f
        assert g.shape == w.shape, f
        assert bits(g) == bits(w.astype(dt)), f


META = {"step": 120, "time": 1.2000000000000002, "dt": 0.01, "seed": 42,
        "deck": "name: t\nbodies:\n  - {shape: sphere, radius: 1.0}\n", "decomposition": '{"kind": "rcb"}',
        "extra": {"list": [1, 2.5, None], "flag": True}}


def write_read_check(comm, directory, n=37, m=23, zero_rank=1, readers=None):
    """Write on ``comm`` and read on each communicator in ``readers`` (default: comm itself)."""
    b = global_bodies(n)
    own = owner_of(n, comm.size, zero_rank)
    mine = local_part(b, own, comm.rank)
    w = global_warm(m)
    wown = owner_of(m, comm.size, zero_rank, seed=9)
    wmine = {k: v[wown == comm.rank] for k, v in w.items()}
    path = checkpoint_path(os.path.join(directory, "ck"), META["step"])
    out = write_checkpoint(path, comm, mine, META, wmine)
    assert out == path and os.path.exists(path) and not os.path.exists(path + ".tmp")
    # expected warm table: rows in writer rank order
    order = np.concatenate([np.nonzero(wown == r)[0] for r in range(comm.size)])
    want_warm = {k: v[order] for k, v in w.items()}
    want = b.sort_by_gid()
    for rc in (readers or [comm]):
        if rc == MPI.COMM_NULL:
            continue
        got, meta, warm = read_checkpoint(path, rc)
        a0, a1 = (n * rc.rank) // rc.size, (n * (rc.rank + 1)) // rc.size
        assert_bodies_equal(got, want.take(np.arange(a0, a1)))       # contiguous block, gid order
        for k in ("step", "time", "dt", "seed", "deck", "decomposition", "extra"):
            assert meta[k] == META[k], k
        assert meta["next_gid"] == int(b.gid.max()) + 1
        assert meta["n_bodies"] == n and meta["n_ranks_written"] == comm.size
        allw = rc.allgather(warm)
        for k, v in want_warm.items():
            cat = np.concatenate([x[k] for x in allw])
            assert bits(cat) == bits(v.astype(cat.dtype)), k
        allg = np.concatenate(rc.allgather(got.gid))
        assert np.array_equal(allg, np.sort(b.gid))
    return path


# ------------------------------------------------------------------------------------------------
# MPI tests (also valid at 1 rank: mpirun -n 1 ... --with-mpi)
@pytest.mark.mpi
def test_roundtrip_same_comm_with_zero_body_rank(shared_dir, hang_guard):
    write_read_check(WORLD, shared_dir)


@pytest.mark.mpi
def test_roundtrip_only_one_rank_has_bodies(shared_dir, hang_guard):
    # every rank but the last owns nothing (and the warm table lives on the last rank only)
    b = global_bodies(9)
    mine = b if WORLD.rank == WORLD.size - 1 else b.take(np.zeros(0, int))
    w = global_warm(4)
    wmine = w if WORLD.rank == WORLD.size - 1 else {k: v[:0] for k, v in w.items()}
    p = write_checkpoint(os.path.join(shared_dir, "one_000000001.h5"), WORLD, mine, META, wmine)
    got, _, warm = read_checkpoint(p, WORLD)
    gids = np.concatenate(WORLD.allgather(got.gid))
    assert np.array_equal(gids, np.sort(b.gid))
    assert sum(WORLD.allgather(len(warm["gamma"]))) == 4


@pytest.mark.mpi
def test_empty_checkpoint(shared_dir, hang_guard):
    p = write_checkpoint(os.path.join(shared_dir, "e_000000000.h5"), WORLD, BodyStore(0), META, None)
    got, meta, warm = read_checkpoint(p, WORLD)
    assert got.n == 0 and meta["n_bodies"] == 0 and len(warm["gid_i"]) == 0 and meta["next_gid"] == 0


@pytest.mark.mpi
def test_written_on_all_read_on_fewer_ranks(shared_dir, hang_guard):
    """Written on COMM_WORLD (P ranks), read on 2 ranks (sub-communicator) and on 1 rank."""
    sub = WORLD.Split(0 if WORLD.rank < 2 else MPI.UNDEFINED, WORLD.rank)
    one = MPI.COMM_SELF if WORLD.rank == 0 else MPI.COMM_NULL
    write_read_check(WORLD, shared_dir, readers=[WORLD, sub, one])
    if sub != MPI.COMM_NULL:
        sub.Free()


@pytest.mark.mpi
def test_retention_and_latest(shared_dir, hang_guard):
    b = global_bodies(10)
    mine = local_part(b, owner_of(10, WORLD.size), WORLD.rank)
    prefix = os.path.join(shared_dir, "run")
    for step in (10, 20, 30, 40, 50):
        write_checkpoint(checkpoint_path(prefix, step), WORLD, mine, dict(META, step=step), None, keep=2)
    WORLD.Barrier()
    names = sorted(os.listdir(shared_dir))
    assert names == ["run_000000040.h5", "run_000000050.h5"]
    assert latest_checkpoint(prefix) == checkpoint_path(prefix, 50)
    assert latest_checkpoint(shared_dir) == checkpoint_path(prefix, 50)
    assert latest_checkpoint(os.path.join(shared_dir, "other")) is None
    _, meta, _ = read_checkpoint(latest_checkpoint(prefix), WORLD)
    assert meta["step"] == 50


@pytest.mark.mpi
def test_collective_errors(shared_dir, hang_guard):
    # duplicate global id across ranks: every rank raises, nothing is written
    b = global_bodies(6)
    mine = b.take([0, 1]) if WORLD.rank in (0, WORLD.size - 1) else b.take(np.zeros(0, int))
    if WORLD.size == 1:
        mine = BodyStore.concatenate([mine, mine])
    p = os.path.join(shared_dir, "dup_000000001.h5")
    with pytest.raises(CheckpointError, match="duplicate global id"):
        write_checkpoint(p, WORLD, mine, META, None)
    assert not os.path.exists(p) and not os.path.exists(p + ".tmp")
    # bad metadata (rank 0's copy is used)
    with pytest.raises(CheckpointError, match="step"):
        write_checkpoint(p, WORLD, b.take(np.zeros(0, int)), {"time": 0.0, "dt": 1.0}, None)
    # missing warm column on one rank only
    warm = None if WORLD.rank else {"gid_i": [1], "gid_j": [2], "sub": [0]}
    with pytest.raises(CheckpointError, match="warm"):
        write_checkpoint(p, WORLD, b.take(np.zeros(0, int)), META, warm)
    # a missing file fails on every rank with the path in the message
    with pytest.raises(CheckpointError, match="does not exist") as ei:
        read_checkpoint(os.path.join(shared_dir, "nope.h5"), WORLD)
    assert "nope.h5" in str(ei.value)


# ------------------------------------------------------------------------------------------------
# serial tests
@serial_only
def test_roundtrip_serial(tmp_path):
    write_read_check(MPI.COMM_SELF, str(tmp_path))


def _good(tmp_path, step=1):
    b = global_bodies(20)
    return write_checkpoint(checkpoint_path(str(tmp_path / "c"), step), MPI.COMM_SELF, b,
                            dict(META, step=step), global_warm(5))


def strip_trailer(raw):
    """A checkpoint's bytes without the whole-file checksum trailer: the file as written before it existed."""
    assert raw[-TRAILER_LEN:].startswith(TRAILER_MAGIC)
    return raw[:-TRAILER_LEN]


def _expect_error(path, pattern):
    with pytest.raises(CheckpointError, match=pattern) as ei:
        read_checkpoint(path, MPI.COMM_SELF)
    assert str(path) in str(ei.value)
    with pytest.raises(CheckpointError):
        verify_checkpoint(path)


@serial_only
def test_corruption_detected(tmp_path):
    import h5py
    p = _good(tmp_path)
    verify_checkpoint(p)
    raw = open(p, "rb").read()

    # missing file
    _expect_error(str(tmp_path / "missing_000000001.h5"), "does not exist")
    # wrong file type
    txt = tmp_path / "deck.h5"
    txt.write_text("name: not hdf5\n")
    _expect_error(str(txt), "not an HDF5 file")
    # truncated
    for cut in (len(raw) // 2, len(raw) - 100, 600):
        t = tmp_path / f"trunc{cut}.h5"
        t.write_bytes(raw[:cut])
        _expect_error(str(t), "")
    # flipped bytes in the middle of each of a few datasets -> the whole-file checksum (trailer) refuses the
    # file before HDF5 opens it; without the trailer (a checkpoint written before it existed) the
    # per-dataset checksum names the dataset
    legacy = strip_trailer(raw)
    for name in ("bodies/x", "bodies/gid", "warm/gamma"):
        with h5py.File(p, "r") as f:
            ds = f[name]
            offset = ds.id.get_offset() + ds.id.get_storage_size() // 2
        for kind, data, msg in (("new", raw, "whole-file checksum mismatch"),
                                ("legacy", legacy, f"checksum mismatch in dataset '/{name}'")):
            bad = bytearray(data)
            bad[offset] ^= 0x10
            c = tmp_path / f"flip_{kind}_{name.replace('/', '_')}.h5"
            c.write_bytes(bytes(bad))
            _expect_error(str(c), msg)
    # the trailer itself: a damaged digest, length or magic byte, a cut inside it, bytes appended after it
    t0 = len(raw) - TRAILER_LEN
    for k, msg in ((t0 + 40, "whole-file checksum mismatch"), (t0 + 3, "trailer is damaged"),
                   (len(raw) - 5, "the trailer says"), (len(raw) - 1, "trailer is damaged")):
        bad = bytearray(raw)
        bad[k] ^= 0x01
        c = tmp_path / f"trailer{k}.h5"
        c.write_bytes(bytes(bad))
        _expect_error(str(c), msg)
    for name, data in (("cut.h5", raw[:-50]), ("cut_in_magic.h5", raw[:t0 + 10]),
                       ("appended.h5", raw + b"x" * 10), ("padded.h5", raw + b"x" * 5000)):
        c = tmp_path / name
        c.write_bytes(data)
        _expect_error(str(c), "trailer is cut short or not at the end of the file")
    # a legacy file (no trailer) that is intact is still read
    c = tmp_path / "legacy_000000001.h5"
    c.write_bytes(legacy)
    b0, m0, w0 = read_checkpoint(p, MPI.COMM_SELF)
    b1, m1, w1 = read_checkpoint(str(c), MPI.COMM_SELF)
    assert_bodies_equal(b1, b0) and m1 == m0
    verify_checkpoint(str(c))
    # original untouched by all of this
    assert open(p, "rb").read() == raw


@serial_only
def test_structural_errors(tmp_path):
    import h5py
    p = _good(tmp_path)
    raw = strip_trailer(open(p, "rb").read())         # structure checks: legacy files (no trailer)

    def variant(name, edit):
        c = tmp_path / name
        c.write_bytes(raw)
        with h5py.File(c, "r+") as f:
            edit(f)
        return str(c)

    _expect_error(variant("nods.h5", lambda f: f.__delitem__("bodies/q")), "missing dataset '/bodies/q'")
    _expect_error(variant("nosum.h5", lambda f: f.attrs.__delitem__("checksum")), "missing attribute")
    _expect_error(variant("ver.h5", lambda f: f.attrs.__setitem__("format_version", 99)), "format_version 99")
    _expect_error(variant("fmt.h5", lambda f: f.attrs.__setitem__("format", "something")), "format")
    _expect_error(variant("meta.h5", lambda f: f.attrs.__setitem__(
        "meta_json", f.attrs["meta_json"].replace('"step": 1', '"step": 2'))), "checksum mismatch")
    # an HDF5 file that is not a checkpoint
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = 1
    _expect_error(str(other), "missing attribute")
    # code-version check is opt-in
    cv = variant("cv.h5", lambda f: f.attrs.__setitem__("code_version", "0.0.0-old"))
    with pytest.raises(CheckpointError, match="written by relcp_mpi 0.0.0-old"):
        read_checkpoint(cv, MPI.COMM_SELF, strict_version=True)


_KILL_SCRIPT = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {root!r})
    from mpi4py import MPI
    import numpy as np
    from relcp_mpi.bodies.store import BodyStore
    from relcp_mpi.io.checkpoint import write_checkpoint, checkpoint_path
    prefix, marker = sys.argv[1], sys.argv[2]
    n = 2000
    b = BodyStore(n, gid=np.arange(n), x=np.random.default_rng(1).random((n, 3)))
    meta = dict(step=1, time=0.5, dt=0.1)
    write_checkpoint(checkpoint_path(prefix, 1), MPI.COMM_WORLD, b, meta, None, keep=1)
    def hook(stage):
        open(marker, "w").close()
        time.sleep(60)          # the parent kills us here
    b.x += 1.0
    write_checkpoint(checkpoint_path(prefix, 2), MPI.COMM_WORLD, b, dict(meta, step=2), None, keep=1,
                     _hook=hook)
""")


def _clean_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_COMM", "OMPI_MCA_ess", "OMPI_MCA_orte", "PMIX_", "PMI_"))}
    env["H5PY_ALWAYS_USE_MPI"] = "1"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


@serial_only
def test_sigkill_mid_write_keeps_previous(tmp_path):
    script = tmp_path / "killme.py"
    script.write_text(_KILL_SCRIPT.format(root=ROOT))
    prefix, marker = str(tmp_path / "k"), str(tmp_path / "marker")
    proc = subprocess.Popen([sys.executable, str(script), prefix, marker], env=_clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        t0 = time.time()
        while not os.path.exists(marker):
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.time() - t0 < 60, "writer never reached the hook"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    p1, p2 = checkpoint_path(prefix, 1), checkpoint_path(prefix, 2)
    assert os.path.exists(p2 + ".tmp") and not os.path.exists(p2)
    assert latest_checkpoint(prefix) == p1
    assert latest_checkpoint(str(tmp_path)) == p1
    meta = verify_checkpoint(p1)
    bodies, meta, _ = read_checkpoint(p1, MPI.COMM_SELF)
    assert meta["step"] == 1 and bodies.n == 2000
    # the half-written temporary is not a valid checkpoint, and the next write replaces it
    with pytest.raises(CheckpointError):
        read_checkpoint(p2 + ".tmp", MPI.COMM_SELF)
    bodies.x += 1.0
    write_checkpoint(p2, MPI.COMM_SELF, bodies, dict(meta, step=2), None, keep=1)
    assert latest_checkpoint(prefix) == p2 and not os.path.exists(p1) and not os.path.exists(p2 + ".tmp")


_WRITE4_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
    from mpi4py import MPI
    from test_io_checkpoint import write_read_check
    write_read_check(MPI.COMM_WORLD, sys.argv[1])
""")


@serial_only
def test_written_by_4_rank_job_read_serially(tmp_path):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not available")
    script = tmp_path / "w4.py"
    script.write_text(_WRITE4_SCRIPT.format(root=ROOT, tests=os.path.join(ROOT, "tests")))
    env = _clean_env()
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    r = subprocess.run([mpirun, "-n", "4", sys.executable, str(script), str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    path = checkpoint_path(str(tmp_path / "ck"), META["step"])
    got, meta, warm = read_checkpoint(path, MPI.COMM_SELF)
    assert meta["n_ranks_written"] == 4
    assert_bodies_equal(got, global_bodies(37).sort_by_gid())
    assert len(warm["gamma"]) == 23


@serial_only
def test_check_compatible():
    deck = {"name": "t", "bodies": [{"shape": "sphere", "radius": 1.0}], "box": {"lo": [0, 0, 0]}}
    meta = {"deck": "name: t\nbodies:\n  - {shape: sphere, radius: 1.0}\nbox: {lo: [0, 0, 0]}\n", "n_bodies": 1}
    check_compatible(meta, deck)
    check_compatible(meta, dict(deck, name="renamed", solver={"tol": 1e-6}))   # other keys may change
    with pytest.raises(CheckpointError, match=r"bodies\[0\]\.radius"):
        check_compatible(meta, dict(deck, bodies=[{"shape": "sphere", "radius": 2.0}]))
    with pytest.raises(CheckpointError, match=r"bodies \(length\)"):
        check_compatible(meta, dict(deck, bodies=deck["bodies"] * 2))
    with pytest.raises(CheckpointError, match=r"box\.lo\[2\]"):
        check_compatible(meta, dict(deck, box={"lo": [0, 0, 1]}))
    with pytest.raises(CheckpointError, match="generate"):
        check_compatible(meta, dict(deck, generate=[{"kind": "lattice"}]))
    with pytest.raises(CheckpointError, match="no deck"):
        check_compatible({}, deck)


@serial_only
def test_check_compatible_body_count_unless_cells_divide():
    """The checkpoint's body count is compared with the deck's explicit body list, except when the deck lets
    cells divide (divide_at > 0): then the count legitimately differs (the bodies themselves still must not)."""
    import copy

    import yaml

    from relcp_mpi.config.deck import validate
    from relcp_mpi.io.checkpoint import deck_has_division
    rod = {"shape": "spherocylinder", "radius": 0.5, "length": 1.0, "position": [0, 0, 0]}
    growing = dict(rod, growth_rate=0.1, divide_at=2.5)
    for raw_bodies, divides in (([rod], False), ([dict(rod, growth_rate=0.1)], False),
                                ([growing], True), ([rod, dict(growing, position=[5, 0, 0])], True)):
        raw = {"name": "t", "time": {"dt": 0.1, "steps": 2}, "bodies": raw_bodies}
        deck = validate(copy.deepcopy(raw))            # normalised (divide_at: 0.0 when not given)
        assert deck_has_division(deck) is divides and deck_has_division(raw) is divides
        n = len(raw_bodies)
        for stored in (yaml.safe_dump(deck), deck):     # the deck as stored text or dict
            check_compatible({"deck": stored, "n_bodies": n}, deck)                 # same count: always fine
            meta = {"deck": stored, "n_bodies": n + 3}                              # e.g. after 3 divisions
            if divides:
                check_compatible(meta, deck)
            else:
                with pytest.raises(CheckpointError, match=f"'bodies' lists {n} bodies, checkpoint holds {n + 3}"):
                    check_compatible(meta, deck)
        # the body entries themselves are still compared, division or not
        other = copy.deepcopy(deck)
        other["bodies"][0]["radius"] = 0.4
        with pytest.raises(CheckpointError, match=r"bodies\[0\]\.radius"):
            check_compatible({"deck": deck, "n_bodies": n + 3}, other)
    # generators with division and malformed entries
    assert deck_has_division({"generate": [{"divide_at": 3.0}]})
    assert not deck_has_division({"bodies": [{"divide_at": 0}, {"divide_at": None}, "x", {"divide_at": True}]})
    assert not deck_has_division(None) and not deck_has_division({"bodies": None})


def test_checkpoint_written_before_the_gen_field_still_restarts():
    """tests/data/ckpt_before_gen_field.h5 was written by relcp_mpi before bodies had a ``gen`` column (commit
    a33919d, deck beside it): it reads with generation 0 for every body and its checksums still verify."""
    from relcp_mpi.io.checkpoint import read_checkpoint
    here = os.path.join(os.path.dirname(__file__), "data", "ckpt_before_gen_field.h5")
    bodies, meta, warm = read_checkpoint(here, MPI.COMM_SELF)
    assert bodies.n == 2 and meta["step"] == 3
    assert np.array_equal(bodies.gen, [0, 0])
    assert np.all(np.isfinite(bodies.x))
