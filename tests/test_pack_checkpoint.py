"""tools/pack_checkpoint.py: a gzip-compressed copy of a checkpoint (kept in results/checkpoints/ so that a long
study can continue in a later session) restarts exactly as the original, and bad arguments write nothing.

Serial: .venv/bin/python -m pytest -q tests/test_pack_checkpoint.py
"""
import os
import sys

import h5py
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.config.deck import validate
from relcp_mpi.simulation import Simulation
from tests.helpers import ROOT
from tests.test_restart import pile_raw

sys.path.insert(0, os.path.join(ROOT, "tools"))
import pack_checkpoint  # noqa: E402

SELF = MPI.COMM_SELF


def test_packed_checkpoint_restarts_bitwise(tmp_path, monkeypatch):
    monkeypatch.setattr(pack_checkpoint, "MIN_COMPRESSED", 10)     # a small run: compress its arrays too
    deck = validate(pile_raw(str(tmp_path / "run"), steps=6))
    sim = Simulation.from_deck(deck, comm=SELF)
    sim.run(3, writers=[])
    ckpt = sim.write_checkpoint()
    packed = str(tmp_path / "packed.h5")
    pack_checkpoint.main([ckpt, packed])
    with h5py.File(packed, "r") as f:           # the warm-start and body arrays are stored compressed
        assert f["warm/gamma"].size > 10 and f["warm/gamma"].compression == "gzip"
        assert f["bodies/x"].compression == "gzip"
    a = Simulation.from_checkpoint(ckpt, deck, comm=SELF)
    b = Simulation.from_checkpoint(packed, deck, comm=SELF)
    a.run(3, writers=[])
    b.run(3, writers=[])
    for field in ("x", "q", "u"):
        ga, va = a.gather(field)
        gb, vb = b.gather(field)
        assert np.array_equal(ga, gb) and va.tobytes() == vb.tobytes(), field


def test_bad_arguments_write_nothing(tmp_path):
    missing = str(tmp_path / "missing.h5")
    out = str(tmp_path / "out.h5")
    with pytest.raises(SystemExit, match="missing.h5"):
        pack_checkpoint.main([missing, out])
    (tmp_path / "junk.h5").write_bytes(b"not an HDF5 file")
    with pytest.raises(SystemExit, match="junk.h5"):
        pack_checkpoint.main([str(tmp_path / "junk.h5"), out])
    with pytest.raises(SystemExit, match="another file"):
        pack_checkpoint.main([out, out])
    assert sorted(os.listdir(tmp_path)) == ["junk.h5"]
