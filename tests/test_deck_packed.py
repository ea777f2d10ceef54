"""The typed deck keeps a long list of explicit bodies pickled (config/sections.py, PackedBodies): the same
validated entries (values and types), the same bodies built, the same checkpoint and restart."""
import copy

import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.bodies.builder import build_bodies
from relcp_mpi.bodies.store import FIELDS
from relcp_mpi.config import sections
from relcp_mpi.config.deck import validate
from relcp_mpi.config.sections import BodySpec, PackedBodies, _body_spec, typed

serial = pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial test")


def bodies(n):
    """n entries mixing ints, floats, signed zeros, axis-angle, quaternion and named orientations."""
    out = []
    for k in range(n):
        x, y = 1.5 * (k % 8) + 0.75, 1.5 * (k // 8) + 0.75
        b = {"shape": ("sphere", "ellipsoid", "spherocylinder")[k % 3], "position": [x, y, 1 if k % 2 else 0.6]}
        if b["shape"] == "sphere":
            b.update(radius=0.5 if k % 2 else 0.25, orientation="random", force=[0, -0.0, 1])
        elif b["shape"] == "ellipsoid":
            b.update(axes=[0.5, 0.3, 0.25], orientation={"axis": [0, 0, 1], "angle": 0.1 * k}, velocity=[1, 0.0, -0.0])
        else:
            b.update(radius=0.2, length=0.5, orientation=[1, 0, 0, -0.0], growth_rate=0.01 * k, divide_at=2.0)
        out.append(b)
    return out


def raw(n, directory="out", steps=3):
    return {"name": "packed", "seed": 5, "time": {"dt": 0.05, "steps": steps},
            "box": {"lo": [0, 0, 0], "hi": [12, 1.5 * (n // 8 + 1), 6], "periodic": [True, False, False]},
            "walls": [{"point": [0, 0, 0], "normal": [0, 0, 1]}], "forces": {"body_force": [0, 0, -2.0]},
            "bodies": bodies(n), "contact": {"overlap_tol": 1e-3, "skin": 0.2},
            "output": {"directory": str(directory), "progress_every": 0, "keep_checkpoints": 5}}


def test_packed_entries_are_the_validated_ones():
    v = validate(raw(100))
    d = typed(v)
    assert isinstance(d._raw["bodies"], PackedBodies) and len(d._raw["bodies"]) == 100 == d.n_bodies
    r = d.raw
    assert r == v and list(r) == list(v) and r is not d.raw          # a new mapping per read
    assert repr(r["bodies"]) == repr(v["bodies"])                     # types too: 0 / 0.0 / -0.0, ints
    assert all(r[k] is v[k] for k in v if k != "bodies")
    assert d.bodies == tuple(_body_spec(BodySpec, b) for b in v["bodies"])
    assert typed(copy.deepcopy(v)) == d
    small = validate(raw(sections.PACK_BODIES - 1))
    assert typed(small).raw is small                                  # below the threshold: kept as given


def test_packed_bodies_build_the_same_store(monkeypatch):
    v = validate(raw(1100))                                           # three chunks
    packed = build_bodies(typed(copy.deepcopy(v)))
    monkeypatch.setattr(sections, "PACK_BODIES", 10 ** 9)
    plain_deck = typed(v)
    assert not isinstance(plain_deck._raw["bodies"], PackedBodies)
    plain = build_bodies(plain_deck)
    for f in FIELDS:
        a, b = getattr(packed, f), getattr(plain, f)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), f


@serial
def test_packed_deck_checkpoint_restart_bitwise(tmp_path):
    from relcp_mpi import Simulation
    comm = MPI.COMM_WORLD
    deck = raw(72, tmp_path, steps=4)
    full = Simulation.from_deck(deck, comm=comm)
    assert isinstance(full.deck._raw["bodies"], PackedBodies)
    full.run(2, writers=[])
    path = full.write_checkpoint()
    full.run(2, writers=[])
    again = Simulation.from_checkpoint(path, deck, comm=comm)        # the deck as a mapping: no text
    assert again.deck_changes == [] and again.step == 2
    again.run(2, writers=[])
    for f in ("x", "q", "u"):
        (ga, a), (gb, b) = again.gather(f), full.gather(f)
        assert np.array_equal(ga, gb) and a.tobytes() == b.tobytes(), f
