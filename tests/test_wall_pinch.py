"""The early infeasibility check of grown LCPs (stepper/wall_pinch.py): wall rows that pinch a body.

* :func:`wall_pinch.check` against an independent test of the same question, the primal feasibility LP "is there
  a body velocity u with c_k + J_k u >= 0 for every row" (Farkas' other alternative), on small random row sets of
  bodies between two walls; and the hand-made pinch (a bottom row and a top row at the same lever point whose
  zero-velocity gaps sum to a negative number).
* In the stepper: a rod spun and tilted between two walls gets recursion levels; a contradicting top-wall row is
  added to its first appended level (as a row extrapolated over a far rotation would be).  The step then fails
  before that level's solve (no iteration spent) with a message naming the rod's rows; with
  ``contact.strict_retries`` it is redone at once and passes with every overlap below overlap_tol; on several
  ranks (the rod on one of them) every rank takes the same branch.  With ``contact.pinch_repairs`` the pinch is
  repaired in the level where it is found (the rod's appended wall rows dropped, its later rows linearised with
  half the rotation limit) and the step goes on without being redone.
"""
import types

import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.solver.lcp import SolverError
from relcp_mpi.stepper import relcp, wall_pinch
from relcp_mpi.stepper.relcp import StepParams
from tests.helpers import make_deck, run_sim

UP, DOWN = np.array([0.0, 0.0, 1.0]), np.array([0.0, 0.0, -1.0])


def _feasible(normal, r, c):
    """Independent reference: some u (6,) with c_k + [n_k, r_k x n_k] . u >= 0 for all k (primal LP)."""
    from scipy.optimize import linprog
    J = np.concatenate([normal, np.cross(r, normal)], axis=1)
    lp = linprog(np.zeros(6), A_ub=-J, b_ub=c, bounds=(None, None), method="highs")
    return lp.status == 0


def test_pinch_of_two_rows_is_found_and_positive_gaps_are_not():
    r = np.array([[0.5, 0.0, -0.5], [-0.5, 0.0, -0.5], [0.5, 0.0, 0.5], [-0.5, 0.0, 0.5]])
    n = np.array([UP, UP, DOWN, DOWN])
    blocks = np.eye(6)[None]
    body = np.zeros(4, np.int64)
    c = np.full(4, 0.02)                                   # level-0 rows of a rod between walls: no pinch
    assert wall_pinch.check(body, n, r, c, blocks, 0.05) is None
    # a top row at the lever of the first bottom row predicting -0.1 at zero velocity: with it, 0.02 - 0.1 < 0
    found = wall_pinch.check(np.zeros(5, np.int64), np.vstack([n, DOWN]), np.vstack([r, [0.5, 0.0, 0.5]]),
                             np.append(c, -0.1), blocks, 0.05)
    assert found is not None
    rows, y = found
    assert sorted(rows) == [0, 4] and np.allclose(y[0], y[1]) and y.min() > 0
    # a fixed body (zero mobility block) cannot move: its one row with a negative gap is infeasible by itself
    rows, y = wall_pinch.check(np.zeros(5, np.int64), np.vstack([n, DOWN]), np.vstack([r, [0.5, 0.0, 0.5]]),
                               np.append(c, -0.1), np.zeros((1, 6, 6)), 0.05)
    assert list(rows) == [4]


def test_check_agrees_with_the_primal_feasibility_lp():
    rng = np.random.default_rng(3)
    verdicts = []
    for trial in range(60):
        nb = int(rng.integers(1, 4))
        k = int(rng.integers(2, 7))
        body = np.sort(rng.integers(0, nb, nb * k))
        n = np.where(rng.random(len(body))[:, None] < 0.5, UP, DOWN)
        # dyadic data (exact in binary): levers on a rod of half length 1/2 and radius 1/2, gaps of +-1/64 .. 1/8
        r = np.column_stack([rng.integers(-4, 5, len(body)) / 8.0, rng.integers(-2, 3, len(body)) / 8.0,
                             -0.5 * n[:, 2]])
        c = rng.integers(-8, 9, len(body)) / 64.0
        blocks = np.tile(np.eye(6), (nb, 1, 1))
        found = wall_pinch.check(body, n, r, c, blocks, 0.05)
        expect = all(_feasible(n[body == b], r[body == b], c[body == b]) for b in np.unique(body))
        assert (found is None) == expect
        if found is not None:                              # the certificate itself: y >= 0, sum y J = 0, c.y < 0
            rows, y = found
            J = np.concatenate([n[rows], np.cross(r[rows], n[rows])], axis=1)
            for b in np.unique(body[rows]):
                sel = body[rows] == b
                assert np.allclose(y[sel] @ J[sel], 0.0, atol=1e-12)
            assert y.min() >= 0 and c[rows] @ y < 0
        verdicts.append(found is None)
    assert 5 < sum(verdicts) < 55                          # both verdicts occur


def test_candidates_only_with_a_far_off_appended_row():
    body = np.array([0, 0, 1, 1, 2])
    level = np.array([0, 1, 0, 1, 0])
    c = np.array([-5e-4, 0.01, 0.02, -0.3, -0.3])          # body 1 has an appended row far below: its rows only
    assert wall_pinch.pinch_candidates(body, level, c, 1e-3).tolist() == [False, False, True, True, False]


def _spun_rod(steps=2, strict_retries=0):
    bodies = [{"shape": "spherocylinder", "radius": 0.5, "length": 1.5, "position": [0.0, 0.0, 0.0],
               "orientation": {"axis": [0, 1, 0], "angle": float(np.pi / 2)}, "torque": [50.0, 0.0, 100.0]}]
    return make_deck(time={"dt": 0.05, "steps": steps}, box={"lo": [-20, -20, -2], "hi": [20, 20, 2]},
                     walls=[{"point": [0, 0, -0.52], "normal": [0, 0, 1]},
                            {"point": [0, 0, 0.52], "normal": [0, 0, -1]}],
                     # the plain update (drop_axial_torque off): the spin tips the rod into the walls, the rows
                     # this file's pinches are made of (tests/test_axial_torque.py: with it on, no level is needed)
                     bodies=bodies, contact={"overlap_tol": 1e-3, "skin": 0.3, "max_depth": 30,
                                             "strict_retries": strict_retries, "drop_axial_torque": False},
                     solver={"tol": 1e-6, "method": "apgd", "max_iter": 3000})


@pytest.fixture
def bad_row_once(monkeypatch):
    """The first appended level of the run gets one more row: a top-wall row at the lever of the rod's first
    bottom-wall row, its gap extrapolated to -0.3 at the start (as a row taken at a far-rotated trial).  Counts the
    LCP solves."""
    state = {"added": False, "solves": 0}
    append, solve = relcp._append_level, relcp._solve

    def append_with_bad_row(inp, table, depth, *args, **kwargs):
        out = append(inp, table, depth, *args, **kwargs)
        walls = np.flatnonzero((table.ib < 0) & (table.normal[:, 2] > 0.5) & (table.level == 0))
        if not state["added"] and len(walls):
            i = walls[0]
            r = table.r_i[i].copy()
            r[2] = -r[2]
            table.append(ia=[table.ia[i]], ib=[-1], gid_i=[table.gid_i[i]], gid_j=[-2], sub=[99], level=[depth],
                         normal=[DOWN], r_i=[r], r_j=[np.zeros(3)], gap_free=[0.0], sep0=[-0.3])
            state["added"] = True
        return out if out is None or len(out) == len(table) else np.vstack([out, np.full((1, 2), np.nan)])

    def counted_solve(*args, **kwargs):
        state["solves"] += 1
        return solve(*args, **kwargs)

    monkeypatch.setattr(relcp, "_append_level", append_with_bad_row)
    monkeypatch.setattr(relcp, "_solve", counted_solve)
    return state


def test_spun_rod_needs_recursion_levels():
    _, diags = run_sim(_spun_rod(), comm=MPI.COMM_SELF)
    assert max(d["depth"] for d in diags) >= 1                 # the case appends rows (the fixture needs a level)
    assert max(d["max_overlap"] for d in diags) <= 1e-3


def test_contradicting_row_fails_before_its_solve(bad_row_once):
    with pytest.raises(SolverError) as ei:
        run_sim(_spun_rod(), comm=MPI.COMM_SELF)
    exc = ei.value
    assert isinstance(exc, wall_pinch.InfeasibleRowsError) and exc.iterations == 0
    assert "infeasible" in str(exc) and "gid 0" in str(exc) and "level 1" in str(exc)
    assert "LCP of step" not in str(exc)            # no second search over the gathered LCP (debug.check_on_fail)
    assert bad_row_once["added"]
    rows = sorted((g, w, s) for g, w, s, _, _ in exc.rows)        # (gid, wall, sub): a bottom row and the bad one
    assert len(rows) == 2 and rows[0][:2] == (0, 0) and rows[1] == (0, 1, 99)
    # the solves before the failure: level 0 of the step only (the failing level never reached the solver)
    assert bad_row_once["solves"] == 1


def test_strict_retry_redoes_the_pinched_step_at_once(bad_row_once):
    sim, diags = run_sim(_spun_rod(strict_retries=1), comm=MPI.COMM_SELF)
    assert bad_row_once["added"]
    assert diags[0]["strict_retries"] == 1 and all(d.get("substeps", 1) == 1 for d in diags)
    assert max(d["max_overlap"] for d in diags) <= 1e-3


@pytest.mark.mpi
def test_pinch_check_is_collective(hang_guard, bad_row_once):
    """On several ranks (the rod owned by one of them) the failure and the retry are taken by every rank."""
    world = MPI.COMM_WORLD
    with pytest.raises(SolverError) as ei:
        run_sim(_spun_rod(), comm=world)
    assert isinstance(ei.value, wall_pinch.InfeasibleRowsError) and "gid 0" in str(ei.value)
    bad_row_once["added"] = False
    sim, diags = run_sim(_spun_rod(strict_retries=1), comm=world)
    assert diags[0]["strict_retries"] == 1
    assert max(d["max_overlap"] for d in diags) <= 1e-3


def test_pinch_repaired_in_place_without_redoing_the_step(bad_row_once, tmp_path):
    """contact.pinch_repairs: the certified pinch of the injected row is repaired in the level where it is found
    (the rod's appended wall rows dropped, its later rows linearised with half the rotation limit): no strict retry,
    no failure, and the step's guarantee holds; debug.trace_levels shows the repair from the repaired level on."""
    import json
    deck = _spun_rod()
    deck["contact"].update(pinch_repairs=1, row_rotation_limit=0.35)
    deck["debug"] = {"trace_levels": str(tmp_path / "levels.jsonl")}
    sim, diags = run_sim(deck, comm=MPI.COMM_SELF)
    assert bad_row_once["added"]
    assert diags[0]["pinch_repairs"] == 1 and diags[0].get("strict_retries", 0) == 0
    assert all("pinch_repairs" not in d for d in diags[1:])        # the injected row came once
    assert max(d["max_overlap"] for d in diags) <= 1e-3
    records = [json.loads(line) for line in open(tmp_path / "levels.jsonl", encoding="utf-8")]
    first = [r["pinch_repairs"] for r in records if r["step"] == 1]
    assert first[0] == 0 and first[-1] == 1 and len(first) == diags[0]["depth"] + 1


def test_pinch_repairs_exhausted_fail_as_before(bad_row_once, monkeypatch):
    """With its repairs used up a step fails with the certificate as without the option: here the repair is
    made to keep the offending rows (so the same pinch comes back), and pinch_repairs 2 ends in the error."""
    monkeypatch.setattr(relcp, "_repair_pinch", lambda table, rows, pinched: np.ones(len(table), bool))
    deck = _spun_rod()
    deck["contact"].update(pinch_repairs=2, row_rotation_limit=0.35)
    with pytest.raises(wall_pinch.InfeasibleRowsError):
        run_sim(deck, comm=MPI.COMM_SELF)


def test_repair_drops_only_the_pinched_bodys_appended_wall_rows():
    from relcp_mpi.contact.constraints import ConstraintTable
    t = ConstraintTable()
    #            body 7: level-0 wall, appended wall, appended pair; body 8: appended wall
    t.append(ia=[0, 0, 0, 1], ib=[-1, -2, 1, -1], gid_i=[7, 7, 7, 8], gid_j=[-1, -2, 8, -1], sub=[1, 4, 9, 4],
             level=[0, 2, 2, 1], normal=np.tile(UP, (4, 1)), r_i=np.zeros((4, 3)), r_j=np.zeros((4, 3)),
             gap_free=[0.1, -0.2, 0.0, 0.3], sep0=[0.1, -0.2, 0.0, 0.3])
    pinched = {}
    keep = relcp._repair_pinch(t, [(7, 0, 1, 0, 0.1), (7, 1, 4, 2, -0.2)], pinched)
    assert keep.tolist() == [True, False, True, True] and pinched == {7: 1}
    t.keep(keep)
    assert len(t) == 3 and t.gap_free.tolist() == [0.1, 0.0, 0.3] and t.sub.tolist() == [1, 9, 4]
    relcp._repair_pinch(t, [(7, 0, 1, 0, 0.1)], pinched)
    assert pinched == {7: 2}
    prm = StepParams(dt=0.05, overlap_tol=1e-3, skin=0.3, row_rotation_limit=0.4)
    inp = types.SimpleNamespace(gid=np.array([8, 7, 3, 7]), n_owned=3)      # the last one a ghost
    assert relcp._body_limits(inp, prm, {}) == 0.4
    assert relcp._body_limits(inp, prm, pinched).tolist() == [0.4, 0.1, 0.4]


def test_pinch_repairs_need_a_rotation_limit():
    deck = _spun_rod()
    deck["contact"]["pinch_repairs"] = 1
    with pytest.raises(Exception, match="contact.pinch_repairs: needs contact.row_rotation_limit > 0"):
        run_sim(deck, comm=MPI.COMM_SELF)


@pytest.mark.mpi
def test_pinch_repair_is_collective(hang_guard, bad_row_once):
    """On several ranks (the rod owned by one of them) every rank repairs the same pinch and goes on."""
    deck = _spun_rod()
    deck["contact"].update(pinch_repairs=1, row_rotation_limit=0.35)
    sim, diags = run_sim(deck, comm=MPI.COMM_WORLD)
    assert diags[0]["pinch_repairs"] == 1 and diags[0].get("strict_retries", 0) == 0
    assert max(d["max_overlap"] for d in diags) <= 1e-3
