#!/usr/bin/env python3
"""Iterations per LCP solve against the problem size, per solver method (a benchmark: prints, asserts nothing).

Two sub-commands (``source tools/env.sh`` first):

``capture`` -- run the colony deck through the library (MPI, any rank count) and save the first LCP of a step once
the colony has held at least each target cell count for ``--settle`` steps, as ``<out>/colony_<cells>.npz``::

    mpirun -n 2 .venv/bin/python tools/bench_solver_scaling.py capture --targets 1024,2048,4096 --out /tmp/lcps

  A wrapper around ``relcp_mpi.stepper.relcp.solve_lcp`` gathers the operator's ``D`` (global CSR: rows = 6 dofs
  per body in the rank-ordered body layout, columns = constraints), the scaled mobility blocks ``dt M`` (n, 6, 6),
  ``q`` and the warm start ``x0`` to rank 0 (collective on every rank, then the original solve runs).  The npz
  keys are ``indptr, indices, data, shape, blocks, q, x0, dt, cells`` (:func:`save_lcp` / :func:`load_lcp`).

  With ``--all-levels`` every LCP of that step is saved (``colony_<cells>_L<level>.npz``): the grown LCPs of
  the ReLCP recursion, which are the hard ones.

``bench`` -- solve saved LCPs (``--lcps`` files or directories) with each method from the same initial guess
(zero, or the saved warm start with ``--warm``) at one tolerance and print iterations, residual and wall time::

    .venv/bin/python tools/bench_solver_scaling.py bench --lcps /tmp/lcps --methods apgd,bbpgd,ipm --tol 1e-3
    mpirun -n 2 .venv/bin/python tools/bench_solver_scaling.py bench --lcps /tmp/lcps --methods ipm

  The saved problem is distributed by contiguous body blocks (each rank gets the columns whose first nonzero row
  it owns), so any rank count solves the same global LCP.
"""
import argparse
import glob
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relcp_mpi.petsc import get_petsc  # noqa: E402

PETSc = get_petsc()
from mpi4py import MPI  # noqa: E402


# ------------------------------------------------------------------------------------------------ npz format
def save_lcp(path, indptr, indices, data, shape, blocks, q, x0, dt, cells):
    """Write one LCP: D (CSR, body dofs x constraints), blocks = dt M (n, 6, 6), q, x0 (c,), dt, cells."""
    np.savez_compressed(path, indptr=np.asarray(indptr, np.int64), indices=np.asarray(indices, np.int32),
                        data=np.asarray(data, np.float64), shape=np.asarray(shape, np.int64),
                        blocks=np.asarray(blocks, np.float64), q=np.asarray(q, np.float64),
                        x0=np.asarray(x0, np.float64), dt=float(dt), cells=int(cells))


def load_lcp(path):
    """Read :func:`save_lcp`'s file: dict with ``D`` (scipy CSR) and the other keys."""
    import scipy.sparse as sp
    z = np.load(path)
    D = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
    return dict(D=D, blocks=z["blocks"], q=z["q"], x0=z["x0"], dt=float(z["dt"]), cells=int(z["cells"]))


def distribute(lcp, comm):
    """The saved global LCP as (ContactOperator, D, q Vec, x0 numpy slice) on ``comm``: bodies split in contiguous
    blocks, each column owned by the rank owning its first nonzero row (columns renumbered so that ownership is
    contiguous; the LCP is the same up to this permutation, which is returned as ``perm``)."""
    from relcp_mpi.solver.operator import ContactOperator
    from tests.helpers import aij_from_triplets
    D = lcp["D"].tocsc()
    nb = lcp["blocks"].shape[0]
    size, rank = comm.Get_size(), comm.Get_rank()
    b_ends = np.linspace(0, nb, size + 1).astype(np.int64)
    first_row = D.indices[D.indptr[:-1]] if D.nnz else np.zeros(D.shape[1], np.int64)
    owner = np.searchsorted(b_ends[1:], first_row // 6, side="right")
    perm = np.argsort(owner, kind="stable")
    c_ends = np.concatenate(([0], np.cumsum(np.bincount(owner, minlength=size))))
    c0, c1 = int(c_ends[rank]), int(c_ends[rank + 1])
    Dp = D[:, perm[c0:c1]].tocoo()
    Dm = aij_from_triplets(Dp.row, Dp.col + c0, Dp.data, 6 * int(b_ends[rank + 1] - b_ends[rank]), c1 - c0, comm)
    op = ContactOperator(Dm, lcp["blocks"][b_ends[rank]:b_ends[rank + 1]])
    qv = Dm.createVecRight()
    qv.getArray()[:] = lcp["q"][perm[c0:c1]]
    qv.stateIncrease()
    return op, Dm, qv, lcp["x0"][perm[c0:c1]], perm, (c0, c1)


# ------------------------------------------------------------------------------------------------------ capture
def _gather_lcp(A, q, x, comm):
    """Global D (CSR), blocks, q, x on rank 0 (None elsewhere).  Collective."""
    D = A.D
    indptr, indices, data = D.getValuesCSR()
    parts = comm.gather((np.diff(indptr), indices.copy(), data.copy(), A.blocks.copy(),
                         q.getArray(readonly=True).copy(), x.getArray(readonly=True).copy()), root=0)
    if comm.rank != 0:
        return None
    nnz = np.concatenate([p[0] for p in parts])
    return dict(indptr=np.concatenate(([0], np.cumsum(nnz))), indices=np.concatenate([p[1] for p in parts]),
                data=np.concatenate([p[2] for p in parts]), shape=D.getSize(),
                blocks=np.concatenate([p[3] for p in parts]), q=np.concatenate([p[4] for p in parts]),
                x0=np.concatenate([p[5] for p in parts]))


def capture(a):
    from relcp_mpi.config.sections import load_typed, override
    from relcp_mpi.parallel.errors import install_excepthook
    from relcp_mpi.simulation import Simulation
    import relcp_mpi.stepper.relcp as stepper
    comm = MPI.COMM_WORLD
    install_excepthook(comm)
    deck, text = load_typed(a.deck)
    deck = override(deck, {"output.trajectory_every": 0, "output.progress_every": 0}, source=a.deck)
    targets = sorted(int(t) for t in a.targets.split(","))
    os.makedirs(a.out, exist_ok=True)
    state = {"want": None, "level": 0}
    orig = stepper.solve_lcp

    def wrapper(A, q, x, **kw):
        if state["want"] is not None:          # same decision on every rank (based on the global cell count)
            lcp = _gather_lcp(A, q, x, comm)
            if comm.rank == 0:
                cells = lcp["blocks"].shape[0]
                path = os.path.join(a.out, "colony_%d%s.npz" % (cells, "_L%d" % state["level"] if a.all_levels
                                                                     else ""))
                save_lcp(path, dt=sim.dt, cells=cells, **lcp)
                print("saved %s: %d cells, %d rows, min q %.3g" % (path, cells, lcp["shape"][1], lcp["q"].min()),
                      flush=True)
            state["level"] += 1
            if not a.all_levels:
                state["want"] = None
        return orig(A, q, x, **kw)

    stepper.solve_lcp = wrapper
    sim = Simulation(deck, text, comm)
    sim.check_initial_overlap()
    reached = {}
    t0 = time.perf_counter()
    try:
        while targets and sim.step < sim.n_steps:
            for t in targets:
                if sim.n_global >= t:
                    reached.setdefault(t, sim.step)
            if targets[0] in reached and sim.step - reached[targets[0]] >= a.settle:
                state["want"] = targets.pop(0)
            state["level"] = 0
            sim.step_once()
            state["want"] = None
            if comm.rank == 0 and sim.step % 50 == 0:
                print("step %d cells %d wall %.0f s" % (sim.step, sim.n_global, time.perf_counter() - t0),
                      flush=True)
    finally:
        sim.solver.free()
        stepper.solve_lcp = orig


# -------------------------------------------------------------------------------------------------------- bench
def bench(a):
    from relcp_mpi.solver.lcp import SolverError, solve_lcp
    comm = MPI.COMM_WORLD
    files = []
    for p in a.lcps.split(","):
        files += sorted(glob.glob(os.path.join(p, "*.npz"))) if os.path.isdir(p) else [p]
    files.sort(key=lambda f: load_lcp(f)["cells"])
    methods = a.methods.split(",")
    rows = []
    for f in files:
        lcp = load_lcp(f)
        op, Dm, qv, x0, perm, _ = distribute(lcp, comm)
        for m in methods:
            x = Dm.createVecRight()
            x.getArray()[:] = x0 if a.warm else 0.0
            x.stateIncrease()
            comm.Barrier()
            t0 = time.perf_counter()
            try:
                r = solve_lcp(op, qv, x, method=m, tol=a.tol, max_iter=a.max_iter)
                its, res, ok, extra = r.iterations, r.residual, True, getattr(r, "inner_iterations", None)
            except SolverError as e:
                its, res, ok, extra = e.iterations, e.residual, False, None
            comm.Barrier()
            wall = time.perf_counter() - t0
            xg = np.concatenate(comm.allgather(x.getArray(readonly=True).copy()))
            row = dict(file=os.path.basename(f), cells=lcp["cells"], rows=lcp["q"].size, method=m, converged=ok,
                       iterations=its, inner=extra, residual=res, wall_s=wall, sum_gamma=float(xg.sum()))
            rows.append(row)
            if comm.rank == 0:
                print("%-22s cells %6d rows %6d %-10s conv %-5s its %6d inner %6s res %.2e wall %7.2f s sum %.6g"
                      % (row["file"], row["cells"], row["rows"], m, ok, its, extra, res, wall, row["sum_gamma"]),
                      flush=True)
            x.destroy()
        for o in (op, Dm, qv):
            o.destroy()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--deck", default="input_decks/bacterial_colony.yaml")
    c.add_argument("--targets", default="1024,2048,4096")
    c.add_argument("--settle", type=int, default=10, help="steps after reaching a target before capturing")
    c.add_argument("--out", default="/tmp/relcp_lcps")
    c.add_argument("--all-levels", action="store_true",
                   help="save every recursion level's (grown) LCP of the step as colony_<cells>_L<level>.npz")
    b = sub.add_parser("bench")
    b.add_argument("--lcps", default="/tmp/relcp_lcps")
    b.add_argument("--methods", default="apgd,bbpgd,ipm")
    b.add_argument("--tol", type=float, default=1e-3)
    b.add_argument("--max-iter", type=int, default=20000)
    b.add_argument("--warm", action="store_true", help="start from the saved warm start instead of zero")
    a = ap.parse_args()
    capture(a) if a.cmd == "capture" else bench(a)


if __name__ == "__main__":
    main()
