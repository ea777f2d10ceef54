"""tools/bench_peer_cases.py on a tiny case: the JSON record carries every field with consistent values.

Serial:  .venv/bin/python -m pytest -q tests/test_bench_peer_cases.py
"""
import importlib.util
import os

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bench():
    spec = importlib.util.spec_from_file_location("bench_peer_cases", os.path.join(ROOT, "tools",
                                                                                   "bench_peer_cases.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_record_fields_on_a_tiny_peer_deck(tmp_path, capsys):
    bench = _bench()
    with open(os.path.join(ROOT, "input_decks", "peer", "n2000c.yaml")) as fh:
        raw = yaml.safe_load(fh)
    raw["bodies"] = raw["bodies"][:60]              # the first 60 rods of the dense bed, resting on the floor
    deck = tmp_path / "tiny.yaml"
    deck.write_text(yaml.safe_dump(raw))
    rec = bench.run_case("tiny", str(deck), steps=2, warm=1)
    assert set(bench.RECORD_FIELDS) <= set(rec)
    assert rec["bodies"] == 60 and rec["timed_steps"] == 2 and rec["warm_steps"] == 1 and rec["ranks"] == 1
    assert rec["s_per_step"] > 0 and abs(rec["s_per_step"] * rec["steps_per_s"] - 1) < 1e-12
    assert 1 <= rec["solves_per_step"] <= 1 + rec["max_depth"]
    assert abs(rec["iterations_per_solve"] * rec["solves_per_step"] - rec["iterations_per_step"]) < 1e-9
    assert 0 <= rec["max_overlap"] <= rec["overlap_tol"] == 1e-3
    assert {"geometry", "neighbors", "assembly", "solve"} <= set(rec["stages"])
    assert sum(rec["stages"][k] for k in ("geometry", "neighbors", "assembly", "solve")) <= rec["wall_s"]
    # ru_maxrss (the kernel's high-water mark) and /proc/self/statm count slightly differently: within 5 %
    assert rec["peak_rss_mib_max"] >= 0.95 * max(rec["rss_mib"]["end"]) > 0
    # (>=: inside a long test session the run may reuse heap pages earlier tests left, and not grow at all)
    assert max(rec["rss_mib"]["end"]) >= max(rec["rss_mib"]["imports"]) > 0
    bench.print_table([rec])
    assert "tiny" in capsys.readouterr().out
