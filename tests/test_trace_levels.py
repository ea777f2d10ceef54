"""debug.trace_levels: one JSON record per recursion level, consistent with the step's own diagnostics.

The pinched bed of tests/test_line_contacts_mpi.py (16 rods pressed together between two walls and twisted)
needs several recursion levels per step: every level's record must add up to the step's diagnostics (levels 0 ..
depth, iterations, rows, the deepest overlap of the last trial), the offenders of a level must be what the next
level appended rows for, and the last level of a step must have no offender.  Runs on any number of ranks (the
MPI variant runs it on 2 and 4)."""
import copy
import json
import os
import tempfile

import numpy as np
import pytest
from mpi4py import MPI

from tests.helpers import run_sim
from tests.test_line_contacts_mpi import pinched_bed


def _traced_run(tmp_dir, comm, line_contacts=True, **contact):
    deck = copy.deepcopy(pinched_bed(line_contacts, max_iter=5000))
    deck["contact"].update(contact)
    path = os.path.join(tmp_dir, "levels.jsonl")
    deck["debug"] = {"trace_levels": path}
    _, diags = run_sim(deck, comm=comm)
    comm.Barrier()
    with open(path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    return records, diags


def _check(records, diags):
    assert len(diags) == 4
    assert max(d["depth"] for d in diags) >= 2            # the case recurses (else the test says nothing)
    for step, d in enumerate(diags, start=1):
        rec = [r for r in records if r["step"] == step]
        assert [r["level"] for r in rec] == list(range(d["depth"] + 1))
        assert sum(r["iterations"] for r in rec) == d["iterations"]
        assert rec[-1]["rows"] == d["constraints"]
        assert rec[0]["appended"] == rec[0]["rows"]
        for a, b in zip(rec, rec[1:]):
            # a level appends one row per offending pair / wall contact of the level before (no backed-off or
            # rotation-limited extras in this deck) and its rows are the earlier ones plus those
            assert b["appended"] == a["bad_pairs"] + a["bad_walls"] > 0
            assert b["appended_limited"] == b["appended_backed"] == 0
            assert b["rows"] == a["rows"] + b["appended"]
            assert a["min_sep"] < -1e-3
        last = rec[-1]
        assert last["bad_pairs"] == last["bad_walls"] == last["bad_bodies"] == 0
        assert last["min_sep"] >= -1e-3
        assert max(0.0, -last["min_sep"]) == pytest.approx(d["max_overlap"], abs=1e-15)
        assert max(r["rows_rot_deg"] for r in rec) == pytest.approx(d["trial_rotation"], rel=1e-12)
        for r in rec:
            assert 0 <= r["repeat_bodies"] <= r["bad_bodies"] <= 2 * r["bad_pairs"] + r["bad_walls"]
            assert 0 <= r["repeat_contacts"] <= r["bad_pairs"] + r["bad_walls"]
            assert r["level"] > 0 or r["repeat_bodies"] == 0
            assert r["residual"] <= 1e-6 and r["solve_s"] >= 0.0
            # the multipliers of the level's solution: the largest of the wall rows and of the level's own rows
            # are among all rows'; the rods are pressed against the walls (wall rows carry load)
            assert 0.0 < r["gamma_max_wall"] <= r["gamma_max"]
            assert 0.0 <= r["gamma_max_level"] <= r["gamma_max"]
            assert 0 < r["active"] <= r["rows"]
            assert r["warm_residual"] >= r["residual"] or r["iterations"] == 0
        # level 0's rows are all its rows; the last level's active rows are the step's
        assert rec[0]["gamma_max_level"] == rec[0]["gamma_max"]
        assert last["active"] == d["active"]


def test_trace_levels_adds_up_to_the_step_diagnostics(tmp_path):
    records, diags = _traced_run(str(tmp_path), MPI.COMM_SELF)
    _check(records, diags)
    # some offender of a deep step offends again at a later level (what the trace is for)
    assert any(r["repeat_bodies"] > 0 for r in records)


@pytest.mark.mpi
def test_trace_levels_on_several_ranks(hang_guard):
    comm = MPI.COMM_WORLD
    tmp = comm.bcast(tempfile.mkdtemp() if comm.rank == 0 else None, root=0)
    records, diags = _traced_run(tmp, comm)
    _check(records, diags)
    # every rank's offenders are counted once: the offending contacts are those of the serial run (the
    # trajectories agree within the solver's tolerance, and the counts of this deck do not depend on it)
    if comm.rank == 0:
        os.makedirs(os.path.join(tmp, "serial"))
        serial, _ = _traced_run(os.path.join(tmp, "serial"), MPI.COMM_SELF)
        assert [(r["step"], r["level"], r["bad_pairs"], r["bad_walls"]) for r in records] == \
            [(r["step"], r["level"], r["bad_pairs"], r["bad_walls"]) for r in serial]
    comm.Barrier()


def test_trace_levels_counts_rotation_limited_rows(tmp_path):
    """The pinched bed without line contacts turns rods by ~35 deg at its first trials: with
    contact.row_rotation_limit 0.35 rad some appended pair rows are taken at the rotation-limited configuration,
    and the trace counts them among the level's appended rows."""
    records, diags = _traced_run(str(tmp_path), MPI.COMM_SELF, line_contacts=False, row_rotation_limit=0.35)
    assert max(d["max_overlap"] for d in diags) <= 1e-3
    assert sum(r["appended_limited"] for r in records) > 0
    for a, b in zip(records, records[1:]):
        if b["level"] > 0:
            assert b["appended"] == a["bad_pairs"] + a["bad_walls"]
            assert 0 <= b["appended_limited"] <= a["bad_pairs"] and b["appended_backed"] == 0


def test_unwritable_trace_file_fails_with_its_name(tmp_path):
    deck = copy.deepcopy(pinched_bed(True, max_iter=5000))
    bad = os.path.join(str(tmp_path), "no_such_dir", "levels.jsonl")
    deck["debug"] = {"trace_levels": bad}
    with pytest.raises(OSError, match="debug.trace_levels: cannot append to .*no_such_dir"):
        run_sim(deck, comm=MPI.COMM_SELF)
    assert not os.path.exists(os.path.dirname(bad))
