"""Rank-0 progress lines and PETSc ``-log_view``-style stage timing."""
import sys
import time

import numpy as np


class StageTimer:
    """Accumulates wall time per named stage; ``report(comm)`` gives max/avg over ranks like -log_view."""

    def __init__(self):
        self.total = {}
        self.count = {}
        self._t0 = {}

    def start(self, name):
        self._t0[name] = time.perf_counter()

    def stop(self, name):
        dt = time.perf_counter() - self._t0.pop(name)
        self.total[name] = self.total.get(name, 0.0) + dt
        self.count[name] = self.count.get(name, 0) + 1

    def stage(self, name):
        """Context manager timing one stage ``name`` (``with timer.stage("solve"): ...``)."""
        return _StageContext(self, name)

    def report(self, comm, wall=None):
        """Table of stages (collective): time max/avg over ranks, calls, percent of wall time."""
        names = comm.allgather(sorted(self.total))
        allnames = sorted(set().union(*names))
        mine = np.array([self.total.get(n, 0.0) for n in allnames])
        mx = np.zeros_like(mine)
        sm = np.zeros_like(mine)
        from mpi4py import MPI
        comm.Allreduce(mine, mx, op=MPI.MAX)
        comm.Allreduce(mine, sm, op=MPI.SUM)
        if wall is None:
            wall = max(float(mx.sum()), 1e-300)
        lines = [f"{'stage':<14}{'calls':>8}{'max [s]':>12}{'avg [s]':>12}{'% wall':>9}"]
        for k, n in enumerate(allnames):
            lines.append(f"{n:<14}{self.count.get(n, 0):>8}{mx[k]:>12.4f}{sm[k] / comm.size:>12.4f}"
                         f"{100 * mx[k] / wall:>8.1f}%")
        return "\n".join(lines)


class _StageContext:
    """``StageTimer.stage``'s context manager (one module-level class: building a class per call cost ~30 us,
    eight times per step)."""
    __slots__ = ("timer", "name")

    def __init__(self, timer, name):
        self.timer, self.name = timer, name

    def __enter__(self):
        self.timer.start(self.name)

    def __exit__(self, *exc):
        self.timer.stop(self.name)
        return False


def format_eta(seconds):
    if not np.isfinite(seconds) or seconds < 0:
        return "--:--:--"
    s = int(round(seconds))
    return f"{s // 3600}:{(s // 60) % 60:02d}:{s % 60:02d}"


class Progress:
    """Prints one line per ``every`` steps on rank 0 (stdout, flushed).  Create it right before the first step:
    steps/s and the ETA count from then."""

    def __init__(self, comm, total_steps, every=10, stream=None):
        self.rank = comm.rank
        self.total = total_steps
        self.every = every
        self.stream = stream or sys.stdout
        self.t_start = time.perf_counter()
        self.step_start = None

    def update(self, step, t, diag, overlap_tol, force=False):
        if self.step_start is None:       # the clock runs from construction, i.e. includes this first step
            self.step_start = step - 1
        if self.rank != 0 or not (force or (self.every and step % self.every == 0)):
            return
        el = time.perf_counter() - self.t_start
        done = step - self.step_start
        rate = done / el if el > 0 else float("nan")
        eta = (self.total - step) / rate if rate > 0 else float("nan")
        self.stream.write(
            f"step {step:>7d}/{self.total} t={t:.4e} | {rate:7.2f} steps/s ETA {format_eta(eta)} | "
            f"constraints {diag.get('constraints', 0):>7d} depth {diag.get('depth', 0):>2d} "
            f"iters {diag.get('iterations', 0):>6d} | max overlap {diag.get('max_overlap', 0.0):.3e} "
            f"(tol {overlap_tol:.1e})" + (f" | pressure {diag['pressure']:.3e}" if "pressure" in diag else "")
            + "\n")
        self.stream.flush()
