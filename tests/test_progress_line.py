"""The rank-0 progress line: steps/s and the ETA must count the time of the steps they report."""
import io
import re
import time

import pytest
from mpi4py import MPI

from relcp_mpi.io.progress import Progress, StageTimer, format_eta


def _rate(line):
    return float(re.search(r"\|\s+([0-9.]+) steps/s", line).group(1))


def test_first_line_counts_the_first_step():
    # regression: the first line after a (re)start reported ~1e6 steps/s because the clock started at the
    # first report instead of before the first step
    out = io.StringIO()
    line = Progress(MPI.COMM_SELF, total_steps=105, every=1, stream=out)
    time.sleep(0.05)                              # the first step (here step 101 of a restarted run)
    line.update(101, 1.0, {"constraints": 3}, 1e-3)
    rate = _rate(out.getvalue())
    assert 0 < rate <= 1 / 0.05 * 1.05
    time.sleep(0.05)
    line.update(102, 1.1, {}, 1e-3)
    assert _rate(out.getvalue().splitlines()[-1]) <= 2 / 0.1 * 1.05
    assert "ETA 0:00:0" in out.getvalue().splitlines()[-1]


def test_format_eta():
    assert format_eta(3725.4) == "1:02:05"
    assert format_eta(float("nan")) == "--:--:--"


def test_stage_timer_counts_nested_stages_and_lets_exceptions_through():
    timer = StageTimer()
    for _ in range(3):
        with timer.stage("relcp"):
            with timer.stage("solve"):
                time.sleep(0.01)
    with pytest.raises(RuntimeError):
        with timer.stage("solve"):
            raise RuntimeError("failed solve")
    assert timer.count == {"relcp": 3, "solve": 4}
    assert timer.total["relcp"] >= timer.total["solve"] - 1e-3 >= 0.03 - 1e-3
    assert timer._t0 == {}                       # every started stage was stopped, the failed one too
    report = timer.report(MPI.COMM_SELF)
    assert re.search(r"^solve\s+4\s", report, re.M) and re.search(r"^relcp\s+3\s", report, re.M)
