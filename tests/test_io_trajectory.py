"""Trajectory frames + XDMF sidecar, h5util helpers, info/convert.

Serial:  /usr/bin/python3 -m pytest tests/test_io_trajectory.py -q
MPI:     mpirun -n 4 /usr/bin/python3 -m pytest --with-mpi tests/test_io_trajectory.py -q
"""
import os
import xml.etree.ElementTree as ET

import numpy as np
import pytest

os.environ.setdefault("H5PY_ALWAYS_USE_MPI", "1")
import h5py  # noqa: E402
from mpi4py import MPI  # noqa: E402

from relcp_mpi import __version__  # noqa: E402
from relcp_mpi.bodies.store import BodyStore  # noqa: E402
from relcp_mpi.io import h5util as hu  # noqa: E402
from relcp_mpi.io.checkpoint import checkpoint_path, write_checkpoint  # noqa: E402
from relcp_mpi.io.info import convert_checkpoint_to_trajectory, describe_checkpoint  # noqa: E402
from relcp_mpi.io.trajectory import (TrajectoryError, TrajectoryWriter, list_frames,  # noqa: E402
                                     read_diagnostics, read_frame)

WORLD = MPI.COMM_WORLD
UNDER_LAUNCHER = any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))
serial_only = pytest.mark.skipif(WORLD.size > 1 or UNDER_LAUNCHER, reason="serial test; run without mpirun")


def bodies_at(step, n=23):
    """Global state at a step (same on all ranks)."""
    rng = np.random.default_rng(step)
    gid = np.arange(n, dtype=np.int64) * 5 + 2
    return BodyStore(n, gid=gid, kind=gid % 3, shape=np.tile([0.5, 1.0, 0.3], (n, 1)),
                     x=rng.normal(size=(n, 3)), q=rng.normal(size=(n, 4)), u=rng.normal(size=(n, 6)))


def my_part(b, step, comm, zero_rank=1):
    own = np.random.default_rng(100 + step).integers(0, comm.size, b.n)
    if comm.size > 1:
        own[own == zero_rank] = 0          # rank 1 owns no body
    idx = np.nonzero(own == comm.rank)[0]
    return b.take(idx[::-1])


def check_xdmf(xdmf_path, h5_path, expect_steps):
    tree = ET.parse(xdmf_path)                     # well-formed XML
    root = tree.getroot()
    assert root.tag == "Xdmf"
    coll = root.find("Domain/Grid")
    assert coll.get("GridType") == "Collection" and coll.get("CollectionType") == "Temporal"
    grids = coll.findall("Grid")
    assert len(grids) == len(expect_steps)
    with h5py.File(h5_path, "r") as f:
        times = []
        for g, step in zip(grids, expect_steps):
            times.append(float(g.find("Time").get("Value")))
            assert g.find("Topology").get("TopologyType") == "Polyvertex"
            n = int(g.find("Topology").get("NumberOfElements"))
            assert g.find("Geometry").get("GeometryType") == "XYZ"
            assert {a.get("Name") for a in g.findall("Attribute")} >= {"gid", "kind", "shape", "q", "u"}
            items = [d for d in g.iter("DataItem") if d.get("Format") == "HDF"]
            assert items
            for d in items:
                fname, dpath = d.text.strip().split(":", 1)
                assert fname == os.path.basename(h5_path)
                assert dpath in f, dpath
                dims = tuple(int(v) for v in d.get("Dimensions").split())
                assert f[dpath].shape == dims, dpath
                assert dpath.startswith(f"/frames/{step:09d}/")
                assert int(f[dpath].shape[0]) == n
        assert times == sorted(times)


# ------------------------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("order", ["gid", "rank"])
def test_frames_roundtrip_zero_body_rank(shared_dir, hang_guard, order):
    path = os.path.join(shared_dir, "traj.h5")
    steps = [0, 5, 10]
    with TrajectoryWriter(path, WORLD, order=order, every=5) as w:
        for step in range(0, 11):
            b = bodies_at(step)
            wrote = w.write_frame(step, 0.1 * step, my_part(b, step, WORLD),
                                  {"residual": 1e-9 * step, "iterations": step * 2})
            assert wrote == (step in steps)
    WORLD.Barrier()
    if WORLD.rank == 0:
        fr = list_frames(path)
        assert [s for _, s, _, _ in fr] == steps
        for step in steps:
            got = read_frame(path, step=step)
            want = bodies_at(step)
            if order == "gid":
                assert np.array_equal(got["gid"], want.gid)
                perm = np.arange(want.n)
            else:
                perm = np.searchsorted(want.gid, got["gid"])
                assert np.array_equal(np.sort(got["gid"]), want.gid)
            for k in ("x", "q", "u", "shape"):
                assert np.array_equal(got[k], getattr(want, k)[perm]), k
            assert np.array_equal(got["kind"], want.kind[perm])
            assert got["attrs"]["iterations"] == step * 2
            assert got["time"] == 0.1 * step
        d = read_diagnostics(path)
        assert list(d["step"]) == steps and np.allclose(d["time"], [0.0, 0.5, 1.0])
        assert np.array_equal(d["iterations"], [0, 10, 20]) and set(d) == {"step", "time", "residual", "iterations"}
        check_xdmf(os.path.join(shared_dir, "traj.xdmf"), path, steps)


@pytest.mark.mpi
def test_append_after_restart(shared_dir, hang_guard):
    path = os.path.join(shared_dir, "run.h5")
    with TrajectoryWriter(path, WORLD) as w:
        for step in range(6):                      # the crashed run wrote frames 0..5
            w.write_frame(step, float(step), my_part(bodies_at(step), step, WORLD), {"e": float(step)})
    # restart from a checkpoint at step 3: frames 4, 5 are dropped; frame 3 is re-written (replaced)
    with TrajectoryWriter(path, WORLD, append=True, restart_step=3) as w:
        assert w.last_step == 3 and w.n_frames == 4
        with pytest.raises(TrajectoryError, match="before the last step"):
            w.write_frame(2, 2.0, my_part(bodies_at(2), 2, WORLD))
        for step in (3, 4, 5, 6):
            w.write_frame(step, float(step) + 0.5, my_part(bodies_at(step + 50), step, WORLD),
                          {"e": -float(step), "new_key": 7})
    WORLD.Barrier()
    if WORLD.rank == 0:
        assert [s for _, s, _, _ in list_frames(path)] == [0, 1, 2, 3, 4, 5, 6]
        d = read_diagnostics(path)
        assert list(d["step"]) == [0, 1, 2, 3, 4, 5, 6]
        assert list(d["e"]) == [0, 1, 2, -3, -4, -5, -6]
        assert np.isnan(d["new_key"][:3]).all() and (d["new_key"][3:] == 7).all()
        assert list(d["time"]) == [0, 1, 2, 3.5, 4.5, 5.5, 6.5]
        assert np.array_equal(read_frame(path, step=4)["x"], bodies_at(54).x)
        assert np.array_equal(read_frame(path, step=2)["x"], bodies_at(2).x)
        check_xdmf(os.path.join(shared_dir, "run.xdmf"), path, [0, 1, 2, 3, 4, 5, 6])
    # plain append (no restart step) continues after the last frame
    with TrajectoryWriter(path, WORLD, append=True) as w:
        w.write_frame(7, 7.0, my_part(bodies_at(7), 7, WORLD))
    WORLD.Barrier()
    if WORLD.rank == 0:
        assert list_frames(path)[-1][1] == 7
        assert np.isnan(read_diagnostics(path)["e"][-1])


@pytest.mark.mpi
def test_empty_frame_and_all_on_one_rank(shared_dir, hang_guard):
    path = os.path.join(shared_dir, "e.h5")
    b = bodies_at(1)
    with TrajectoryWriter(path, WORLD) as w:
        w.write_frame(0, 0.0, BodyStore(0))
        w.write_frame(1, 1.0, b if WORLD.rank == WORLD.size - 1 else BodyStore(0))
    WORLD.Barrier()
    if WORLD.rank == 0:
        assert [n for *_, n in list_frames(path)] == [0, b.n]
        assert np.array_equal(read_frame(path, step=1)["gid"], b.gid)
        check_xdmf(os.path.join(shared_dir, "e.xdmf"), path, [1])   # empty frames are not in the XDMF


@pytest.mark.mpi
def test_sample_sort_distribution(hang_guard):
    """Skewed inputs (one rank holds most rows, one none): output is globally sorted, complete, and
    balanced to within the sampling error."""
    rng = np.random.default_rng(WORLD.rank)
    n = {0: 1000, 1: 0}.get(WORLD.rank, 37)
    keys = rng.choice(10 ** 9, n, replace=False) * WORLD.size + WORLD.rank   # unique across ranks
    rows = np.stack([keys * 2.0, -keys * 1.0], axis=1)
    k2, r2 = hu.sort_rows_by_key(WORLD, keys, rows)
    assert np.all(np.diff(k2) > 0) and np.array_equal(r2[:, 0], k2 * 2.0) and np.array_equal(r2[:, 1], -k2 * 1.0)
    assert hu.check_unique_sorted(WORLD, k2) is None
    allk = WORLD.allgather(k2)
    cat = np.concatenate(allk)
    assert np.all(np.diff(cat) > 0)
    assert np.array_equal(cat, np.sort(np.concatenate(WORLD.allgather(keys))))
    total = len(cat)
    assert max(len(a) for a in allk) <= total / WORLD.size + 2 * total / hu.OVERSAMPLE + 1
    # distributed checksum does not depend on the distribution of rows
    off, _ = hu.exscan_offsets(WORLD, len(k2))
    c = hu.distributed_checksum(WORLD, r2, off, "t")
    assert c == hu.partial_checksum(np.stack([cat * 2.0, -cat * 1.0], axis=1), 0, hu.name_salt("t"))


# ------------------------------------------------------------------------------------------------
@serial_only
def test_checksum_properties():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(101, 3))
    salt = hu.name_salt("x")
    full = hu.partial_checksum(a, 0, salt)
    for cut in (0, 1, 50, 101):
        assert hu.combine_checksums([hu.partial_checksum(a[:cut], 0, salt),
                                     hu.partial_checksum(a[cut:], cut, salt)]) == full
    b = a.copy()
    b.view(np.uint64)[40, 1] ^= np.uint64(1)           # one bit
    assert hu.partial_checksum(b, 0, salt) != full
    assert hu.partial_checksum(a[::-1].copy(), 0, salt) != full   # order matters
    assert hu.partial_checksum(a, 0, hu.name_salt("y")) != full


@serial_only
def test_info_and_convert(tmp_path):
    b = bodies_at(3)
    ck = write_checkpoint(checkpoint_path(str(tmp_path / "c"), 30), MPI.COMM_SELF, b,
                          {"step": 30, "time": 0.3, "dt": 0.01, "seed": 1,
                           "deck": "name: demo\nengine: relcp\nbodies: []\ngenerate: [{kind: lattice}]\n"}, None)
    text = describe_checkpoint(ck)
    assert "step        : 30" in text and "checksum    : OK" in text and f"relcp_mpi {__version__}" in text
    assert "sphere" in text and "name=demo" in text
    # a damaged copy is reported, not raised
    raw = bytearray(open(ck, "rb").read())
    with h5py.File(ck, "r") as f:
        off = f["bodies/x"].id.get_offset()
    raw[off + 3] ^= 0xFF
    bad = tmp_path / "bad_000000030.h5"
    bad.write_bytes(bytes(raw))
    assert "checksum    : FAILED" in describe_checkpoint(str(bad))
    assert "does not exist" in describe_checkpoint(str(tmp_path / "nothing.h5"))
    traj = str(tmp_path / "view.h5")
    convert_checkpoint_to_trajectory(ck, traj)
    got = read_frame(traj)
    assert got["step"] == 30 and np.array_equal(got["x"], b.x) and np.array_equal(got["gid"], b.gid)
    check_xdmf(str(tmp_path / "view.xdmf"), traj, [30])
    t = describe_checkpoint(traj)
    assert "frames      : 1" in t and "30 .. 30" in t and "'dt'" in t and "n_bodies" in t


@serial_only
def test_writer_misuse(tmp_path):
    with pytest.raises(ValueError):
        TrajectoryWriter(str(tmp_path / "a.h5"), MPI.COMM_SELF, order="random")
    with TrajectoryWriter(str(tmp_path / "a.h5"), MPI.COMM_SELF) as w:
        with pytest.raises(TrajectoryError, match="invalid diagnostic key"):
            w.write_frame(0, 0.0, bodies_at(0), {"step": 1})
    with pytest.raises(TrajectoryError, match="closed"):
        w.write_frame(1, 0.0, bodies_at(0))
    # appending to a non-trajectory file is refused
    other = tmp_path / "o.h5"
    with h5py.File(other, "w") as f:
        f["x"] = 1
    with pytest.raises(TrajectoryError, match="not a relcp_mpi trajectory"):
        TrajectoryWriter(str(other), MPI.COMM_SELF, append=True)


@pytest.mark.mpi
def test_reopen_keeps_frames_identical(shared_dir, hang_guard):
    """Closing and reopening the file every frame (the bound on HDF5's per-open-file memory) writes the same
    frames, diagnostics and sidecar as a writer that keeps the file open; appends after reopening work."""
    paths = {r: os.path.join(shared_dir, f"reopen{r}.h5") for r in (0, 1)}
    for r, path in paths.items():
        with TrajectoryWriter(path, WORLD, every=2, reopen_every=r) as w:
            for step in range(9):
                w.write_frame(step, 0.5 * step, my_part(bodies_at(step), step, WORLD), {"e": float(step)})
            assert w.n_frames == 5 and w._since_open == (5 if r == 0 else 0)
    WORLD.Barrier()
    if WORLD.rank == 0:
        fr = [list_frames(p) for p in paths.values()]
        assert fr[0] == fr[1] and [s for _, s, _, _ in fr[0]] == [0, 2, 4, 6, 8]
        for step in (0, 2, 4, 6, 8):
            a, b = (read_frame(p, step=step) for p in paths.values())
            for k in ("gid", "kind", "shape", "x", "q", "u"):
                assert np.array_equal(a[k], b[k]), k
        da, db = (read_diagnostics(p) for p in paths.values())
        assert set(da) == set(db) and all(np.array_equal(da[k], db[k]) for k in da)
        check_xdmf(os.path.join(shared_dir, "reopen1.xdmf"), paths[1], [0, 2, 4, 6, 8])
