"""Debug hooks of the ReLCP step: dump grown LCPs and explain failed solves with a certificate.

Deck section ``debug`` (see :mod:`relcp_mpi.config.deck`)::

    debug: {dump_lcp: DIR, dump_on: fail | always, check_on_fail: true, check_rows: 5000}

* ``dump_lcp``: directory for LCP dumps (:mod:`relcp_mpi.contact.lcp_dump`, one ``.npz`` per solve:
  ``lcp_step<step>_level<depth>.npz`` after every solve with ``dump_on: always``,
  ``lcp_step<step>_level<depth>_fail.npz`` when a solve fails; a repeated name, e.g. a step redone at dt/2,
  gets a ``_<k>`` suffix).
* ``check_on_fail``: when a solve raises :class:`relcp_mpi.solver.lcp.SolverError`, gather the LCP on rank 0
  and search an infeasibility certificate (:mod:`relcp_mpi.solver.certificate`): over the whole LCP when it has
  at most ``check_rows`` rows, else over the neighbourhood of the bodies with the largest multipliers.  The
  verdict ("infeasible, rows: ..." or "no certificate found ...") is appended to the error message on every
  rank.
* ``trace_levels``: a file to which rank 0 appends one JSON line per recursion level (:func:`trace_level`):
  the step, the level, the rows, the rows appended, the offending pairs and walls at the level's trial
  configuration, how many of their bodies offended at an earlier level of the step, iterations, residual and
  wall time of the solve, the largest trial rotations.  It shows where a deep step spends its levels.

Every function here is collective (called by all ranks in the same branch of the step).
"""
import gc
import json
import os
from dataclasses import dataclass

import numpy as np


@dataclass
class LcpDebug:
    dump_dir: str = None
    dump_on: str = "fail"
    check_on_fail: bool = True
    check_rows: int = 5000
    trace_file: str = None          # per-level JSON lines (rank 0 appends), None = off
    step: int = 0                   # label of the step being solved (set by the driver)

    @classmethod
    def from_deck(cls, section):
        """From the deck's typed ``debug`` section (:class:`relcp_mpi.config.sections.DebugSection`)."""
        s = section
        return cls(dump_dir=s.dump_lcp, dump_on=s.dump_on, check_on_fail=bool(s.check_on_fail),
                   check_rows=int(s.check_rows), trace_file=s.trace_levels)


def _gather(comm, D, inp, dt, table, gamma, info):
    from relcp_mpi.contact.lcp_dump import gather_lcp
    n = inp.n_owned
    return gather_lcp(comm, D, inp.blocks, dt, table.gap_free, gamma, table, inp.gid[:n], info)


def _path(dbg, depth, fail):
    base = os.path.join(dbg.dump_dir, f"lcp_step{dbg.step:06d}_level{depth:02d}{'_fail' if fail else ''}")
    path, k = base + ".npz", 1
    while os.path.exists(path):
        path, k = f"{base}_{k}.npz", k + 1
    return path


def _save(dbg, data, depth, fail):
    from relcp_mpi.contact.lcp_dump import save_lcp
    os.makedirs(dbg.dump_dir, exist_ok=True)
    return save_lcp(_path(dbg, depth, fail), data)


def on_solve(dbg, comm, D, inp, dt, table, gamma, depth, res):
    """After a successful solve: dump it when ``dump_on == 'always'``."""
    if dbg is None or not dbg.dump_dir or dbg.dump_on != "always":
        return
    info = dict(step=dbg.step, depth=depth, method=res.method, residual=res.residual, iterations=res.iterations,
                converged=True)
    data = _gather(comm, D, inp, dt, table, gamma, info)
    if comm.rank == 0:
        _save(dbg, data, depth, False)


def _diagnose(dbg, comm, D, inp, dt, table, gamma, depth, info, check=True):
    """Gather the failed LCP on rank 0, dump and/or check it there; ``(report, path)`` on every rank."""
    data = _gather(comm, D, inp, dt, table, np.asarray(gamma, float), info)
    report, path = "", None
    if comm.rank == 0:
        # rank 0 works alone here; any failure of the diagnosis becomes part of the message (no rank may hang)
        try:
            if dbg.dump_dir:
                path = _save(dbg, data, depth, True)
            if dbg.check_on_fail and check:
                from relcp_mpi.solver.certificate import check_dump, describe
                report = describe(check_dump(data, max_rows=dbg.check_rows), data)
        except Exception as e:  # noqa: BLE001
            report = f"(LCP diagnosis failed: {type(e).__name__}: {e})"
    return comm.bcast((report, path), root=0)


def on_failure(dbg, exc, comm, D, inp, dt, table, gamma, depth, check=True):
    """A solve raised ``exc`` (SolverError) on every rank: dump the LCP and/or append a certificate verdict to
    the error message (``exc.args``; also ``exc.lcp_report``, and ``exc.lcp_dump`` the dump path or None).
    ``check=False``: dump only (the failure carries its certificate already: stepper/wall_pinch.py)."""
    if dbg is None or not (dbg.dump_dir or (dbg.check_on_fail and check)):
        return
    info = dict(step=dbg.step, depth=depth, method=exc.method, residual=exc.residual, iterations=exc.iterations,
                converged=False)
    # the garbage collector is off meanwhile: the gathered LCP and its diagnosis allocate on rank 0 alone, and a
    # collection triggered there alone would free parallel PETSc objects on one rank only (PetscFinalize then
    # waits forever for the others' garbage cleanup, petsc4py 3.18)
    was_on = gc.isenabled()
    gc.disable()
    try:
        report, path = _diagnose(dbg, comm, D, inp, dt, table, gamma, depth, info, check)
    finally:
        if was_on:
            gc.enable()
    exc.lcp_report, exc.lcp_dump = report, path
    extra = (f"\nLCP of step {dbg.step}, level {depth}: {report}" if report else "") + \
        (f"\nLCP dumped to {path}" if path else "")
    if extra:
        exc.args = (str(exc) + extra,) + tuple(exc.args[1:])


def tracing(dbg):
    """True when per-level records are wanted (the same on every rank: the deck is)."""
    return dbg is not None and bool(dbg.trace_file)


def trace_level(dbg, comm, record):
    """Collective: append ``record`` (a dict of global figures, equal on every rank) as one JSON line to
    ``dbg.trace_file`` on rank 0 (the step label is added).  A failed write raises OSError on every rank."""
    err = None
    if comm.rank == 0:
        try:
            with open(dbg.trace_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(dict(step=dbg.step, **record)) + "\n")
        except OSError as e:
            err = f"debug.trace_levels: cannot append to {dbg.trace_file!r}: {e.strerror or e}"
    err = comm.bcast(err, root=0)
    if err:
        raise OSError(err)
