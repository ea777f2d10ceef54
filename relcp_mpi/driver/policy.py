"""Step policy: how one step of the deck's dt is carried out, and what happens when it fails.

``time.max_halvings = k > 0``: a step whose LCP solve fails (``SolverError``, e.g. an infeasible grown LCP) or
that reaches the recursion limit (``RecursionDepthError``) -- both global decisions, so every rank takes the
same branch -- is undone (:meth:`RunState.restore`) and redone as two steps of dt/2, recursively down to
dt/2^k; the sub-steps count as one step (``diag['substeps']``).  Without it such a step ends the run.

``time.keep_halved_steps = m > 0`` makes the halving sticky: after a step that needed dt/2^j, the following
steps are made of 2^j sub-steps of dt/2^j from the start (a failed solve costs max_iter iterations, and in a
growing, jamming packing the next step would most likely fail at the coarser dt again); after m steps in a
row without a failure the level is lowered by one.  The level and the count are part of the run state
(``state.policy``), so they are checkpointed and a restart continues with them.

``contact.strict_retries = r > 0`` is tried first, before any halving: a failed step is undone and redone at the
same dt up to r times, each time with the recursion's appended rows linearised closer to the start of the step
(:func:`stricter_rows`: ``contact.row_rotation_limit`` and ``contact.row_depth_limit`` halved, or switched on
when off).  The failures this answers are grown LCPs made unsolvable by rows taken at far-off trial
configurations (docs/ARCHITECTURE.md, "Dense packings"); the step's guarantee is the same (every accepted
configuration passes the trial check at ``overlap_tol``), only the rows differ.  A step that needed j retries
reports ``diag['strict_retries'] = j``.
"""
import dataclasses
import gc

from relcp_mpi.solver.lcp import SolverError
from relcp_mpi.stepper.relcp import RecursionDepthError

STEP_FAILURES = (SolverError, RecursionDepthError)
WHY_CHARS = 300          # the failure's own message in a retry line, cut to this length


def _why(exc):
    """``exc``'s type and the first line of its message (at most WHY_CHARS characters): which solver, why, at which
    residual, or which recursion limit -- what a user needs to tell a stiff step from a broken deck."""
    first = (str(exc).splitlines() or [""])[0]
    if len(first) > WHY_CHARS:
        first = first[:WHY_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


# the limits a strict retry starts from when the deck has them off: rows linearised where no body turned more
# than 20 deg, and deep overlaps (beyond 100 overlap_tol) backed off along the step's path
STRICT_ROTATION_LIMIT = 0.35        # [rad]
STRICT_DEPTH_FACTOR = 100.0         # x overlap_tol [L]
MIN_DEPTH_FACTOR = 4.0              # a depth limit below 4 overlap_tol would back off rows of ordinary overlaps


def collect_failed_step():
    """Free what a failed step left behind, now and on every rank (the caller is collective): its frames, kept by
    the exception's traceback, hold parallel PETSc objects in reference cycles, and freed by the garbage collector
    at rank-dependent moments they left PetscFinalize waiting forever for the other ranks' garbage cleanup."""
    gc.collect()


def stricter_rows(params, attempt):
    """The step parameters of strict retry ``attempt`` (1, 2, ...): ``row_rotation_limit`` theta -> theta / 2^a
    (0 -> STRICT_ROTATION_LIMIT / 2^(a-1)) and ``row_depth_limit`` d -> max(d / 2^a, 4 overlap_tol)
    (0 -> 100 overlap_tol / 2^(a-1), same floor)."""
    a = int(attempt)
    theta = params.row_rotation_limit
    theta = theta / 2 ** a if theta > 0 else STRICT_ROTATION_LIMIT / 2 ** (a - 1)
    tol = params.overlap_tol
    d = params.row_depth_limit
    d = d / 2 ** a if d > 0 else STRICT_DEPTH_FACTOR * tol / 2 ** (a - 1)
    return dataclasses.replace(params, row_rotation_limit=theta, row_depth_limit=max(d, MIN_DEPTH_FACTOR * tol))


class StepPolicy:
    """Carries out one step of ``state.dt`` with :meth:`relcp_mpi.driver.engine.StepEngine.single_step`."""

    def __init__(self, max_halvings=0, keep_halved_steps=0, log=None, strict_retries=0):
        self.max_halvings = int(max_halvings or 0)
        self.keep = int(keep_halved_steps or 0)
        self.strict_retries = int(strict_retries or 0)
        self.log = log if log is not None else (lambda msg: None)

    def _single(self, engine, st, dt, noise_key=None):
        """``engine.single_step`` with up to ``strict_retries`` redos at stricter rows (same dt, same noise);
        the last failure propagates.  Collective: failures are global decisions, so every rank retries."""
        if self.strict_retries <= 0:
            return engine.single_step(st, dt, noise_key=noise_key)
        saved = st.copy()
        base = engine.params
        try:
            for attempt in range(self.strict_retries + 1):
                try:
                    d = engine.single_step(st, dt, noise_key=noise_key)
                    d["strict_retries"] = attempt
                    return d
                except STEP_FAILURES as exc:
                    if attempt == self.strict_retries:
                        raise
                    failure = _why(exc)
                collect_failed_step()              # outside the except clause: the traceback is gone
                engine.params = stricter_rows(base, attempt + 1)
                self.log(f"relcp-mpi: step {saved.step + 1} failed at dt={dt:g}: {failure}; redoing it with "
                         f"stricter rows (row_rotation_limit {engine.params.row_rotation_limit:.4g} rad, "
                         f"row_depth_limit {engine.params.row_depth_limit:.4g})")
                st.restore(saved)
        finally:
            engine.params = base

    def advance(self, engine, st):
        """One step of the deck's dt (collective); returns its diagnostics (merged over sub-steps)."""
        k = self.max_halvings
        if k <= 0:
            return self._single(engine, st, st.dt)
        step0 = st.step
        diags = []
        failed = [False]
        deepest = [st.policy["level"]]

        def run(dt, level, index):
            # (step0, level, index) names the sub-step [index, index + 1) * dt within the deck step: the key of
            # its Brownian noise (physics/brownian.py refines the step's Brownian path by bisection)
            saved = st.copy()
            try:
                diags.append(self._single(engine, st, dt, noise_key=(step0, level, index)))
                return
            except STEP_FAILURES as exc:
                if level >= k:
                    raise
                failure = _why(exc)
            collect_failed_step()                  # outside the except clause: the traceback is gone
            self.log(f"relcp-mpi: step {step0 + 1} failed at dt={dt:g}: {failure}; redoing it as two steps of "
                     f"dt={dt / 2:g}")
            st.restore(saved)
            failed[0] = True
            deepest[0] = max(deepest[0], level + 1)
            run(dt / 2, level + 1, 2 * index)
            run(dt / 2, level + 1, 2 * index + 1)

        level = st.policy["level"] if self.keep > 0 else 0
        n = 2 ** level
        for i in range(n):
            run(st.dt / n, level, i)
        if self.keep > 0:
            self._update_level(st, failed[0], deepest[0])
        st.step = step0 + 1                   # the sub-steps count as one step of the deck's dt
        d = dict(diags[-1])
        d["max_overlap"] = max(x["max_overlap"] for x in diags)
        d["depth"] = max(x["depth"] for x in diags)
        d["iterations"] = sum(x["iterations"] for x in diags)
        d["substeps"] = len(diags)
        d["strict_retries"] = sum(x.get("strict_retries", 0) for x in diags)
        return d

    def _update_level(self, st, failed, deepest):
        p = st.policy
        if failed:
            p["level"], p["ok"] = min(deepest, self.max_halvings), 0
        else:
            p["ok"] += 1
            if p["level"] > 0 and p["ok"] >= self.keep:
                p["level"], p["ok"] = p["level"] - 1, 0
