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
"""
from relcp_mpi.solver.lcp import SolverError
from relcp_mpi.stepper.relcp import RecursionDepthError

STEP_FAILURES = (SolverError, RecursionDepthError)


class StepPolicy:
    """Carries out one step of ``state.dt`` with :meth:`relcp_mpi.driver.engine.StepEngine.single_step`."""

    def __init__(self, max_halvings=0, keep_halved_steps=0, log=None):
        self.max_halvings = int(max_halvings or 0)
        self.keep = int(keep_halved_steps or 0)
        self.log = log if log is not None else (lambda msg: None)

    def advance(self, engine, st):
        """One step of the deck's dt (collective); returns its diagnostics (merged over sub-steps)."""
        k = self.max_halvings
        if k <= 0:
            return engine.single_step(st, st.dt)
        step0 = st.step
        diags = []
        failed = [False]
        deepest = [st.policy["level"]]

        def run(dt, level, index):
            # (step0, level, index) names the sub-step [index, index + 1) * dt within the deck step: the key of
            # its Brownian noise (physics/brownian.py refines the step's Brownian path by bisection)
            saved = st.copy()
            try:
                diags.append(engine.single_step(st, dt, noise_key=(step0, level, index)))
            except STEP_FAILURES as exc:
                if level >= k:
                    raise
                self.log(f"relcp-mpi: step {step0 + 1}: {type(exc).__name__} at dt={dt:g}; redoing it as two "
                         f"steps of dt={dt / 2:g}")
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
        return d

    def _update_level(self, st, failed, deepest):
        p = st.policy
        if failed:
            p["level"], p["ok"] = min(deepest, self.max_halvings), 0
        else:
            p["ok"] += 1
            if p["level"] > 0 and p["ok"] >= self.keep:
                p["level"], p["ok"] = p["level"] - 1, 0
