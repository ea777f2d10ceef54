"""GSD trajectories (relcp_mpi.io.gsd_writer): read back with gsd.hoomd, the frames equal the HDF5 frames of the
same run (serial and on all ranks of COMM_WORLD); shapes as HOOMD type_shapes; restart appends after dropping
later frames; deck validation of output.format."""
import os
import sys

import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.bodies.shapes import ELLIPSOID, RING, SPHERE, SPHEROCYLINDER
from relcp_mpi.bodies.store import BodyStore
from relcp_mpi.config.deck import DeckError
from relcp_mpi.io.trajectory import TrajectoryError, list_frames, read_diagnostics, read_frame
from tests.helpers import make_deck, mixed_shapes_deck

gsd_hoomd = pytest.importorskip("gsd.hoomd", reason="Debian python3-gsd is not installed (tools/setup.sh)")
from relcp_mpi.io.gsd_writer import GSDWriter, frame_types, require_gsd, torus_mesh  # noqa: E402

HANG_TIMEOUT = 240
WORLD = MPI.COMM_WORLD


def _deck(directory, steps=6, checkpoint_every=0):
    return mixed_shapes_deck(directory, steps, format=["hdf5", "gsd"], checkpoint_every=checkpoint_every)


def _run(deck, comm):
    from relcp_mpi.simulation import Simulation
    sim = Simulation(deck, "", comm)
    sim.run(progress_stream=open(os.devnull, "w"))
    return sim


def _check_against_hdf5(base):
    h5, gsdpath = base + ".h5", base + ".gsd"
    frames = list_frames(h5)
    diag = read_diagnostics(h5)
    with gsd_hoomd.open(gsdpath, "rb") as t:
        assert len(t) == len(frames) == 4
        for k, snap in enumerate(t):
            ref = read_frame(h5, index=k)
            assert snap.configuration.step == ref["step"]
            assert np.allclose(snap.configuration.box, [8, 8, 8, 0, 0, 0])
            lg = snap.log
            assert np.array_equal(lg["particles/gid"], ref["gid"])
            assert np.array_equal(lg["particles/kind"], ref["kind"])
            assert np.array_equal(lg["particles/x"], ref["x"])           # exact float64 copies
            assert np.array_equal(lg["particles/q"], ref["q"])
            assert np.array_equal(lg["particles/u"], ref["u"])
            assert np.array_equal(lg["particles/shape"], ref["shape"])
            assert float(lg["relcp/time"][0]) == ref["time"]
            # the HOOMD fields OVITO reads: float32, positions relative to the box centre (here 0)
            assert snap.particles.N == len(ref["gid"])
            assert np.allclose(snap.particles.position, ref["x"], rtol=0, atol=1e-6 * 8)
            assert np.allclose(snap.particles.orientation, ref["q"], rtol=0, atol=1e-7)
            types = [snap.particles.types[i] for i in snap.particles.typeid]
            kinds = {SPHERE: "sphere", SPHEROCYLINDER: "spherocylinder", ELLIPSOID: "ellipsoid"}
            assert types == [kinds[int(c)] for c in ref["kind"]]
            shapes = {n: s for n, s in zip(snap.particles.types, snap.particles.type_shapes)}
            assert shapes["ellipsoid"] == {"type": "Ellipsoid", "a": 1.0, "b": 0.4, "c": 0.3}
            assert shapes["sphere"] == {"type": "Sphere", "diameter": 1.0}
            assert shapes["spherocylinder"]["type"] == "ConvexSpheropolyhedron"
            assert shapes["spherocylinder"]["rounding_radius"] == 0.3
            assert np.allclose(shapes["spherocylinder"]["vertices"], [[0, 0, -0.5], [0, 0, 0.5]])
            row = int(np.flatnonzero(diag["step"] == ref["step"])[0])
            for key in ("constraints", "max_overlap", "stress_xx", "pressure"):
                if k > 0:
                    assert float(lg[f"relcp/{key}"][0]) == diag[key][row]
    first, last = read_frame(h5, index=0), read_frame(h5, index=-1)
    assert np.abs(last["x"] - first["x"]).max() > 0.05 and np.abs(last["q"] - first["q"]).max() > 1e-3


def test_gsd_frames_equal_hdf5_serial(tmp_path):
    d = str(tmp_path / "run")
    _run(_deck(d), MPI.COMM_SELF)
    _check_against_hdf5(os.path.join(d, "test"))


@pytest.mark.mpi
def test_gsd_frames_equal_hdf5_parallel(shared_dir, hang_guard):
    d = os.path.join(shared_dir, "run")
    _run(_deck(d), WORLD)
    ok = True
    if WORLD.rank == 0:
        _check_against_hdf5(os.path.join(d, "test"))
    assert WORLD.allreduce(ok, op=MPI.LAND)


@pytest.mark.mpi
def test_gsd_restart_appends_like_hdf5(shared_dir, hang_guard):
    """Checkpoints at steps 3 and 6; restart from step 3 and run to 6 again: the GSD file holds every frame
    once, equal to the uninterrupted run's (same rank count: bitwise)."""
    from relcp_mpi.simulation import Simulation
    d = os.path.join(shared_dir, "rs")
    deck = _deck(d, steps=6, checkpoint_every=3)
    _run(deck, WORLD)
    base = os.path.join(d, "test")
    with_all = None
    if WORLD.rank == 0:
        with gsd_hoomd.open(base + ".gsd", "rb") as t:
            with_all = [(s.configuration.step, s.log["particles/x"].copy()) for s in t]
    sim = Simulation.from_checkpoint(os.path.join(d, "test_ckpt_000000003.h5"), deck, "", WORLD)
    sim.run(progress_stream=open(os.devnull, "w"))
    if WORLD.rank == 0:
        with gsd_hoomd.open(base + ".gsd", "rb") as t:
            again = [(s.configuration.step, s.log["particles/x"].copy()) for s in t]
        assert [s for s, _ in again] == [0, 2, 4, 6] == [s for s, _ in with_all]
        for (_, a), (_, b) in zip(again, with_all):
            assert np.array_equal(a, b)
        _check_against_hdf5(base)


def _fake_bodies(n, step):
    rng = np.random.default_rng(step)
    gid = np.arange(n, dtype=np.int64)
    return BodyStore(n, gid=gid, kind=np.full(n, SPHERE), shape=np.tile([0.5, 0, 0], (n, 1)),
                     x=rng.normal(size=(n, 3)), q=np.tile([1.0, 0, 0, 0], (n, 1)), u=np.zeros((n, 6)))


def test_writer_restart_drops_and_replaces(tmp_path):
    p = str(tmp_path / "t.gsd")
    comm = MPI.COMM_SELF
    with GSDWriter(p, comm, [-5] * 3, [5] * 3) as w:
        for s in range(6):
            assert w.write_frame(s, 0.1 * s, _fake_bodies(3, s), {"a": s})
    with GSDWriter(p, comm, [-5] * 3, [5] * 3, append=True, restart_step=3) as w:
        assert w.last_step == 3 and w.n_frames == 4
        w.write_frame(3, 0.3, _fake_bodies(3, 33))            # replaces the frame of the restart step
        w.write_frame(4, 0.4, _fake_bodies(3, 44))
        with pytest.raises(TrajectoryError, match="before the last step"):
            w.write_frame(2, 0.2, _fake_bodies(3, 2))
    with gsd_hoomd.open(p, "rb") as t:
        assert [s.configuration.step for s in t] == [0, 1, 2, 3, 4]
        assert np.array_equal(t[3].log["particles/x"], _fake_bodies(3, 33).x)
        assert np.array_equal(t[1].log["particles/x"], _fake_bodies(3, 1).x)
        assert float(t[2].log["relcp/a"][0]) == 2.0


def test_every_and_empty_frame(tmp_path):
    p = str(tmp_path / "e.gsd")
    with GSDWriter(p, MPI.COMM_SELF, [0] * 3, [1] * 3, every=2) as w:
        assert not w.write_frame(1, 0.1, _fake_bodies(2, 1))
        assert w.write_frame(2, 0.2, _fake_bodies(0, 2))
    with gsd_hoomd.open(p, "rb") as t:
        assert len(t) == 1 and t[0].particles.N == 0


def test_type_shapes():
    kind = np.array([SPHEROCYLINDER] * 40 + [RING, SPHERE])
    shape = np.array([[0.5, 1.0 + 0.01 * k, 0] for k in range(40)] + [[2.0, 0.3, 0], [0.4, 0, 0]])
    names, shapes, typeid = frame_types(kind, shape, max_types=32)
    # 42 distinct shapes > 32: one type per kind, mean parameters
    assert names == ["sphere", "spherocylinder", "ring"]
    assert [names[i] for i in typeid[[0, 40, 41]]] == ["spherocylinder", "ring", "sphere"]
    assert shapes[1]["rounding_radius"] == 0.5
    assert np.allclose(shapes[1]["vertices"], [[0, 0, -0.5 * 1.195], [0, 0, 0.5 * 1.195]])
    assert shapes[2]["type"] == "Mesh"
    names, shapes, typeid = frame_types(kind[:3], shape[:3])
    assert names == ["spherocylinder_0", "spherocylinder_1", "spherocylinder_2"] and list(typeid) == [0, 1, 2]
    v, f = torus_mesh(2.0, 0.3)
    assert np.allclose((np.hypot(v[:, 0], v[:, 1]) - 2.0) ** 2 + v[:, 2] ** 2, 0.09)
    assert f.max() == len(v) - 1 and len(f) == 2 * len(v)


def test_deck_format_validation():
    assert make_deck(bodies=[{"shape": "sphere", "radius": 1, "position": [0, 0, 0]}])["output"]["format"] == \
        ["hdf5"]
    d = make_deck(bodies=[{"shape": "sphere", "radius": 1, "position": [0, 0, 0]}], output={"format": "gsd"})
    assert d["output"]["format"] == ["gsd"]
    for bad in ("vtk", ["hdf5", "hdf5"], [], 3):
        with pytest.raises(DeckError, match="output.format"):
            make_deck(bodies=[{"shape": "sphere", "radius": 1, "position": [0, 0, 0]}], output={"format": bad})


def test_missing_gsd_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "gsd", None)
    monkeypatch.setitem(sys.modules, "gsd.hoomd", None)
    with pytest.raises(ImportError, match="python3-gsd"):
        require_gsd()
