"""The deck reader builds values straight from libyaml's event stream (no node tree; issue 14 item 4): it must
give exactly what the full PyYAML loader gives, or leave the text to it.

Serial:  .venv/bin/python -m pytest -q tests/test_deck_streaming.py
"""
import glob
import os

import pytest
import yaml

from relcp_mpi.config import deck as D

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML without libyaml: full loader only")

SNIPPETS = [
    "a: 1",
    "a: [1, 2.5, 1e3, 1.0e3, .inf, -.Inf, 0x10, 0o7, 010, 1_000, +12, 12:30:00, yes, No, ~, null, '1', \"x\\ty\"]",
    "a: 2001-12-14\nb: !!str 5\nc: !!float 3\nd: |\n  two\n  lines\n",
    "a: &x {b: [1, 2]}\nc: *x\nd: &y 3\ne: *y",
    "1: a\n2.5: b\nfalse: c\n~: d",
    "- {shape: sphere, radius: 0.5, position: [0, 0, 1.5e-3]}\n- {shape: ellipsoid, axes: [1, 0.5, 0.5]}",
    "",
]
# left to the full loader (merge keys, explicit collection tags, complex keys, several documents, bad YAML)
FALLBACK = ["base: &b {x: 1}\nd:\n  <<: *b\n  y: 2", "a: !!set {x, y}", "? [1, 2]\n: 3", "--- 1\n--- 2",
            "a: [", "a: b: c", "a: !foo 1"]


def full(text):
    return yaml.load(text, Loader=D._UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


@pytest.mark.parametrize("text", SNIPPETS)
def test_stream_equals_full_loader(text):
    got = D._load_streaming(text)
    assert got == full(text) and repr(got) == repr(full(text))        # same values and the same types


@pytest.mark.parametrize("text", FALLBACK)
def test_unsupported_yaml_is_left_to_the_full_loader(text):
    with pytest.raises(D._NotStreamable):
        D._load_streaming(text)


def test_duplicate_keys_named_with_both_lines():
    for text, msg in (("a: 1\nb: 2\na: 3", "duplicated key 'a' (at lines 1 and 3;"),
                      ("x:\n  - {k: 1, k: 2}", "duplicated key 'k' (at lines 2 and 2;")):
        with pytest.raises(D.DeckError, match=r"duplicated key") as ei:
            D.loads(text)
        assert msg in str(ei.value)
        with pytest.raises(D._DuplicateKey):
            full(text)


def test_every_deck_of_the_repository_reads_the_same():
    decks = sorted(glob.glob(os.path.join(ROOT, "input_decks", "*.yaml")))
    decks += [os.path.join(ROOT, "input_decks", "peer", "n2000c.yaml")]       # 2,000 explicit bodies
    for path in decks:
        with open(path) as fh:
            text = fh.read()
        assert D._load_streaming(text) == full(text), path


def test_exponent_notation_without_a_point_is_a_float():
    # YAML 1.1 (PyYAML's default) reads "5e-4" as a string; a deck reads it as the user means it, in every section
    # but the event-driven one (which reads exact literals from strings); out-of-range literals stay strings
    deck = D.loads("name: t\ntime: {dt: 5e-2, steps: 1}\ncontact: {overlap_tol: 2E-3, gap_margin: 1e-3}\n"
                   "bodies: [{shape: sphere, radius: 5e-1, position: [0, 1_0e-1, -2e+0]}]")
    assert (deck["time"]["dt"], deck["contact"]["overlap_tol"], deck["contact"]["gap_margin"]) == (0.05, 2e-3, 1e-3)
    assert deck["bodies"][0]["radius"] == 0.5 and deck["bodies"][0]["position"] == [0, 1.0, -2.0]
    assert D._exponent_floats({"a": ["5e-4", "1e-1000", "1e400", "0e-1000", "e5", "5e", "x5e-4"],
                               "event_driven": {"eps_time": "1e-6"}}) == \
        {"a": [5e-4, "1e-1000", "1e400", 0.0, "e5", "5e", "x5e-4"], "event_driven": {"eps_time": "1e-6"}}
    # text keys keep their text: a run called 1e3, a PETSc option value
    deck = D.loads("name: 1e3\ntime: {dt: 0.1, steps: 1}\nsolver: {petsc_options: [-ksp_rtol, 1e-8]}\n"
                   "bodies: [{shape: sphere, radius: 0.5, position: [0, 0, 0]}]")
    assert deck["name"] == "1e3" and deck["solver"]["petsc_options"] == ["-ksp_rtol", "1e-8"]
    with pytest.raises(D.DeckError, match="overlap_tol: expected float"):
        D.loads("name: t\ntime: {dt: 0.1, steps: 1}\ncontact: {overlap_tol: 1e-1000}\n"
                "bodies: [{shape: sphere, radius: 0.5, position: [0, 0, 0]}]")
