"""engine: event_driven decks: validation, run_event_deck, HDF5 output, the shipped decks."""
import os
from fractions import Fraction as F

import h5py
import numpy as np
import pytest
import yaml

from relcp_mpi.events import parse_event_deck, run_event_deck

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(name):
    with open(os.path.join(ROOT, "input_decks", name)) as fh:
        return yaml.safe_load(fh)


def test_newton_cradle_deck(tmp_path):
    out = tmp_path / "cradle.h5"
    res = run_event_deck(load("newton_cradle.yaml"), str(out))
    assert res.status == "complete" and [tuple(v) for v in res.v_final] == [(0,), (0,), (0,), (0,), (1,)]
    with h5py.File(out, "r") as f:
        assert f.attrs["status"] == "complete" and f.attrs["reason"] == "" and f.attrs["n_events"] == 4
        assert f.attrs["engine"] == "event_driven" and f.attrs["t_final_exact"] == "10"
        assert np.array_equal(f["events/pair"][:], [[0, 1], [1, 2], [2, 3], [3, 4]])
        assert np.allclose(f["events/bracket"][:, 0], [0.1, 0.2, 0.3, 0.4])
        assert [x.decode() if isinstance(x, bytes) else x for x in f["events/bracket_exact"][:, 0]] == \
            ["1/10", "1/5", "3/10", "2/5"]
        assert np.all(f["events/exact_root"][:]) and np.all(f["ledger/E"][:] == 0)
        assert np.array_equal(f["final/velocities"][:, 0], [0, 0, 0, 0, 1])
        assert f["segments/positions"].shape == (5, 5, 1)


def test_event_gas_deck(tmp_path):
    out = tmp_path / "gas.h5"
    res = run_event_deck(load("event_gas.yaml"), str(out))
    assert res.status == "complete" and res.n_events >= 10
    with h5py.File(out, "r") as f:
        n = f.attrs["n_events"]
        assert f["events/bracket"].shape == (n, 2) and f["events/v_minus"].shape == (n, 2, 2)
        b = f["events/bracket"][:]
        assert np.all(b[:, 1] >= b[:, 0]) and np.all(np.diff(b[:, 0]) > 0)
        E = f["ledger/E"][:]
        assert E.shape == (n + 1,) and E[0] == 0 and np.all(E[1:] > 0) and np.all(E < 1e-100)
        assert f["final/positions"].shape == (9, 2)


def test_deck_with_arrays_and_precision():
    deck = {"engine": "event_driven", "event_driven": {
        "horizon": 2, "eps_time": "1e-6", "eps_guard": 1e-6, "delta": 0.05, "n_evt": 2, "budget": 2,
        "positions": [[0, 0], [3, 0]], "velocities": [[1, 0], [0, 0]], "masses": 1, "radii": [1, 1],
        "restitution": [[1, "1/2"], ["1/2", 1]], "precision": {"grid_bits": 40, "round_bits": 64}}}
    kw = parse_event_deck(deck)
    assert kw["eps_guard"] == F(1, 10 ** 6) and kw["delta"] == F(1, 20) and kw["grid_bits"] == 40
    res = run_event_deck(deck, None)
    assert res.status == "complete" and res.n_events == 1
    assert [tuple(v) for v in res.v_final] == [(F(1, 4), 0), (F(3, 4), 0)]


def test_deck_errors_name_every_key():
    bad = {"engine": "event_driven", "event_driven": {
        "horizon": -1, "eps_time": "x", "delta": 0, "n_evt": -2, "budget": 1.5, "endpoint_policy": "never",
        "restitution": 2, "bogus": 1, "precision": {"grid_bits": 0, "what": 1},
        "spheres": [{"position": [0, 0], "velocity": [1], "radius": 1}, {"position": [3, 0], "radius": -1, "colour": 1}]}}
    with pytest.raises(ValueError) as ei:
        parse_event_deck(bad)
    msg = str(ei.value)
    for key in ("horizon", "eps_time", "eps_guard: required", "delta", "n_evt", "budget", "endpoint_policy",
                "restitution", "bogus", "grid_bits", "precision.what", "spheres[0].velocity", "spheres[1].radius",
                "spheres[1].colour"):
        assert key in msg, key
    with pytest.raises(ValueError, match="event_driven"):
        parse_event_deck({"engine": "event_driven"})
    with pytest.raises(ValueError, match="engine"):
        parse_event_deck({"engine": "relcp", "event_driven": {}})
