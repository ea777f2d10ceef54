"""Chainmail: interlaced rigid rings through the whole ReLCP stepper (ring dispatch in pair_snsd/wall_snsd).

A small net (3 x 3 flat rings, 12 links, tools/make_chainmail_deck.py) under a body force on MPI.COMM_SELF:
ReLCP keeps the smooth-surface overlap below overlap_tol at every step and every interlaced (flat ring, link)
pair stays interlaced; the multi-sphere ring proxy runs on the same deck.  The full deck
input_decks/chainmail.yaml passes the initial-overlap check although the bounding spheres of linked rings
overlap by design.
"""
import importlib.util
import pathlib

import numpy as np
from mpi4py import MPI

from helpers import make_deck, run_sim
from relcp_mpi.bodies.shapes import RING, bounding_radius
from relcp_mpi.config.deck import load
from relcp_mpi.geometry.contact import pair_snsd
from relcp_mpi.geometry.torus import rings_linked

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("make_chainmail_deck", ROOT / "tools" / "make_chainmail_deck.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GEN = _generator()


def small_net(n=3, steps=16, dt=0.5, force=-4.0, model="relcp", ms_resolution=16, overlap_tol=1e-3):
    L = (n - 1) * GEN.SPACING
    return make_deck(time={"dt": dt, "steps": steps},
                     box={"lo": [-2.0, -2.0, -20.0], "hi": [L + 2.0, L + 2.0, 4.0]},
                     bodies=GEN.rings(n, force=force),
                     contact={"model": model, "overlap_tol": overlap_tol, "skin": 0.3, "ms_resolution": ms_resolution},
                     solver={"method": "bbpgd", "tol": 1e-4})


def linked_state(sim, pairs):
    """(smooth SNSD, linked flag, centre distance - Rc_i - Rc_j) of the given gid pairs (serial run)."""
    b = sim.bodies
    o = np.argsort(b.gid)
    x, q, k, s = b.x[o], b.q[o], b.kind[o], b.shape[o]
    i, j = pairs[:, 0], pairs[:, 1]
    g = pair_snsd(k[i], s[i], x[i], q[i], k[j], s[j], x[j], q[j])
    link = rings_linked(x[i], q[i], s[i, 0], x[j], q[j], s[j, 0])
    reach = np.linalg.norm(x[i] - x[j], axis=1) - s[i, 0] - s[j, 0]
    return g.sep, link, reach


def test_relcp_chainmail_no_overlap_and_links_preserved():
    tol = 1e-3
    deck = small_net(overlap_tol=tol)
    pairs = np.array(GEN.linked_pairs(3))
    seen = []

    def record(sim):
        seen.append(linked_state(sim, pairs) + (sim.bodies.x[np.argsort(sim.bodies.gid)].copy(),))

    sim, diags = run_sim(deck, comm=MPI.COMM_SELF, record=record)
    assert len(diags) == 16
    for step, (d, (sep, link, reach, _)) in enumerate(zip(diags, seen), start=1):
        assert d["max_overlap"] <= tol, (step, d)
        assert np.all(sep > -tol), (step, sep.min())
        assert np.all(link), (step, np.nonzero(~link)[0])
        assert np.all(reach < 0.0), step         # linked circles: centre distance < Rc_i + Rc_j
    # the links went taut and carry the load: contacts active, the recursion was needed on the way
    assert diags[-1]["active"] > 0
    assert max(d["depth"] for d in diags) >= 1
    # the free centre ring (gid 4) hangs: it stopped moving before the end (no free fall)
    z = np.array([s[3][4, 2] for s in seen])
    assert z[-1] < -0.5
    assert abs(z[-1] - z[-2]) < 0.1 * abs(z[1] - z[0])


def test_multisphere_chainmail_runs():
    deck = small_net(steps=8, model="multisphere", ms_resolution=32)
    sim, diags = run_sim(deck, comm=MPI.COMM_SELF)
    assert len(diags) == 8
    # proxy rows exist (several sphere pairs per ring pair); the reported overlap is the true torus overlap
    assert diags[-1]["constraints"] > len(GEN.linked_pairs(3))
    assert all(np.isfinite(d["max_overlap"]) and d["max_overlap"] >= 0.0 for d in diags)
    assert all(d["depth"] == 0 for d in diags)


def test_chainmail_deck_initial_check_accepts_interlaced_rings():
    from relcp_mpi.simulation import Simulation
    deck, text = load(str(ROOT / "input_decks" / "chainmail.yaml"))
    n = 6
    assert len(deck["bodies"]) == n * n + 2 * n * (n - 1)
    sim = Simulation(deck, text, MPI.COMM_SELF)
    sim.check_initial_overlap()                     # no DeckError: linked rings do not touch
    b = sim.bodies
    o = np.argsort(b.gid)
    x, q, k, s = b.x[o], b.q[o], b.kind[o], b.shape[o]
    assert np.all(k == RING)
    pairs = np.array(GEN.linked_pairs(n))
    i, j = pairs[:, 0], pairs[:, 1]
    r = bounding_radius(k, s)
    np.testing.assert_allclose(r, s[:, 0] + s[:, 1])
    # bounding spheres of linked rings overlap heavily, the tubes are apart, the rings are linked
    assert np.all(np.linalg.norm(x[i] - x[j], axis=1) < 0.7 * (r[i] + r[j]))
    g = pair_snsd(k[i], s[i], x[i], q[i], k[j], s[j], x[j], q[j])
    np.testing.assert_allclose(g.sep, 0.5, atol=1e-9)     # D = Rc - (S/2 - Rc) = 0.7, minus 2 r
    assert np.all(rings_linked(x[i], q[i], s[i, 0], x[j], q[j], s[j, 0]))
    sim.solver.free()


def test_generator_deck_validates():
    from relcp_mpi.config.deck import validate
    raw = GEN.chainmail_deck(n=4, steps=10, model="multisphere", ms_resolution=24)
    deck = validate(raw)
    assert deck["contact"]["model"] == "multisphere" and deck["contact"]["ms_resolution"] == 24
    assert len(deck["bodies"]) == 16 + 24
    assert sum(b["fixed"] for b in deck["bodies"]) == 12
    assert len(GEN.linked_pairs(4)) == 2 * 24
