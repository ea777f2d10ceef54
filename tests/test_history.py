"""The bounded per-step history of the Python API (``Simulation.history``, issue 12 item 8).

Serial:  .venv/bin/python -m pytest -q tests/test_history.py
"""
from mpi4py import MPI

from relcp_mpi import Simulation
from relcp_mpi.driver.history import StepHistory
from tests.helpers import make_deck


def test_step_history_reads_like_the_tail_of_a_list():
    ref = []
    h = StepHistory(maxlen=4)
    for k in range(11):
        ref.append({"k": k})
        h.append(ref[-1])
        tail = ref[-4:]
        assert len(h) == len(tail) and list(h) == tail and h.dropped == len(ref) - len(tail)
        assert h[-1] is ref[-1] and h[0] is tail[0]
        for s in (slice(None), slice(1, None), slice(None, 2), slice(-3, -1), slice(None, None, 2), slice(5, 1)):
            assert h[s] == tail[s], s
    h.maxlen = 2                      # shrinking drops the oldest
    assert list(h) == ref[-2:] and h.dropped == 9
    h.maxlen = None                   # unbounded from now on
    for k in range(5):
        h.append({"k": 100 + k})
    assert len(h) == 7 and h.dropped == 9


def test_simulation_history_keeps_the_newest_steps():
    """A run longer than history_length keeps exactly the diagnostics of its last steps (as on_step saw them)."""
    bodies = [{"shape": "sphere", "radius": 0.5, "position": [x, 0.0, 0.6], "force": [0.0, 0.0, -1.0]}
              for x in (-0.6, 0.6)]
    deck = make_deck(time={"dt": 0.05, "steps": 7}, box={"lo": [-4, -4, 0], "hi": [4, 4, 4]}, bodies=bodies,
                     walls=[{"point": [0, 0, 0], "normal": [0, 0, 1]}],
                     contact={"overlap_tol": 1e-3, "skin": 0.3})
    seen = []
    sim = Simulation.from_deck(deck, comm=MPI.COMM_SELF)
    sim.history.maxlen = 3
    sim.run(writers=[], on_step=lambda s: seen.append(s.diag))
    assert len(seen) == 7 and sim.history.dropped == 4
    assert list(sim.history) == seen[-3:] and sim.history[-1] is sim.diag
    assert max(d["constraints"] for d in seen) >= 1          # the spheres touch each other and the floor
