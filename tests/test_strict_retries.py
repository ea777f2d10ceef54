"""contact.strict_retries (relcp_mpi.driver.policy): a step whose grown LCP defeats the solver is redone at the
same dt with the appended rows linearised closer to the start of the step, instead of ending the run.  The case
is the pinched bed of tests/test_line_contacts_mpi.py without line contacts: its first step's trial turns rods by
~35 deg, the rows appended there make the grown LCP unsolvable for APGD, and without a fallback solver or a
retry the run fails."""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.driver.policy import stricter_rows
from relcp_mpi.solver.lcp import SolverError
from relcp_mpi.stepper.relcp import StepParams
from tests.helpers import run_sim
from tests.test_line_contacts_mpi import pinched_bed


def test_stricter_rows_halves_the_limits_or_switches_them_on():
    off = StepParams(dt=0.1, overlap_tol=1e-3, skin=0.1)
    one, two = stricter_rows(off, 1), stricter_rows(off, 2)
    assert (one.row_rotation_limit, one.row_depth_limit) == pytest.approx((0.35, 0.1))
    assert (two.row_rotation_limit, two.row_depth_limit) == pytest.approx((0.175, 0.05))
    on = StepParams(dt=0.1, overlap_tol=1e-3, skin=0.1, row_rotation_limit=0.3, row_depth_limit=0.1)
    s = stricter_rows(on, 1)
    assert (s.row_rotation_limit, s.row_depth_limit) == pytest.approx((0.15, 0.05))
    # the depth limit stops at 4 overlap_tol (below it ordinary overlaps would be backed off)
    assert stricter_rows(on, 6).row_depth_limit == pytest.approx(4e-3)
    assert (s.dt, s.tol, s.method) == (on.dt, on.tol, on.method)      # nothing else changes


def test_pinched_bed_fails_without_and_runs_with_strict_retries():
    comm = MPI.COMM_SELF
    with pytest.raises(SolverError):
        run_sim(pinched_bed(False, max_iter=1500), comm=comm)
    deck = pinched_bed(False, max_iter=1500)
    deck["contact"]["strict_retries"] = 2
    sim, diags = run_sim(deck, comm=comm)
    retries = [d["strict_retries"] for d in diags]
    assert len(diags) == 4 and retries[0] >= 1           # the first step needed stricter rows ...
    assert all(d.get("substeps", 1) == 1 for d in diags)  # ... at the deck's dt (no halving)
    assert max(d["max_overlap"] for d in diags) <= 1e-3   # the guarantee of every accepted step
    assert all(d.get("fallback_solves", 0) == 0 for d in diags)
    assert sim.engine.params.row_rotation_limit == 0.0    # the deck's rows again after the retried step


def test_a_retried_step_says_why_it_failed(capsys):
    """The retry line names the failure itself (solver, reason, residual, iterations), not only its type: a user
    reading a long run's log can tell a stiff step from a broken deck."""
    deck = pinched_bed(False, max_iter=1500)
    deck["contact"]["strict_retries"] = 2
    run_sim(deck, comm=MPI.COMM_SELF)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "redoing it with stricter rows" in ln]
    assert lines, "the first step of the pinched bed is retried"
    assert lines[0].startswith("relcp-mpi: step 1 failed at dt=")
    assert "SolverError: LCP solver 'apgd' did not converge" in lines[0]
    assert "after 1500 iterations" in lines[0] and "min-map residual" in lines[0]


def test_the_failure_in_a_retry_line_is_one_bounded_line():
    from relcp_mpi.driver.policy import WHY_CHARS, _why
    from relcp_mpi.stepper.relcp import RecursionDepthError
    assert _why(RecursionDepthError("max_depth=3 reached\nsecond line")) == "RecursionDepthError: max_depth=3 reached"
    long = _why(SolverError("apgd", 10, 1.0, 1e-3, [1.0], reason="x" * 1000))
    assert len(long) <= len("SolverError: ") + WHY_CHARS and long.endswith("...")
    assert _why(RuntimeError()) == "RuntimeError"


def test_strict_retries_change_nothing_when_no_step_fails():
    deck = pinched_bed(True)
    ref, dref = run_sim(deck, comm=MPI.COMM_SELF)
    deck["contact"]["strict_retries"] = 2
    sim, diags = run_sim(deck, comm=MPI.COMM_SELF)
    assert [d["strict_retries"] for d in diags] == [0] * len(diags)
    assert np.array_equal(ref.gather()[1], sim.gather()[1])
    assert [d["iterations"] for d in diags] == [d["iterations"] for d in dref]


@pytest.mark.mpi
def test_strict_retries_agree_across_rank_counts(hang_guard):
    """The retry is a global decision: every rank redoes the step, and the result is the 1-rank result."""
    deck = pinched_bed(False, max_iter=1500)
    deck["contact"]["strict_retries"] = 2
    ref, dref = run_sim(deck, comm=MPI.COMM_SELF)
    sim, diags = run_sim(deck, comm=MPI.COMM_WORLD)
    assert [d["strict_retries"] for d in diags] == [d["strict_retries"] for d in dref]
    assert sum(d["strict_retries"] for d in diags) >= 1
    assert [d["constraints"] for d in diags] == [d["constraints"] for d in dref]
    assert max(d["max_overlap"] for d in diags) <= 1e-3
    g0, x0 = ref.gather()
    g1, x1 = sim.gather()
    assert np.array_equal(g0, g1)
    assert np.allclose(x0, x1, atol=1e-5)
