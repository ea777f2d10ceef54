#!/usr/bin/env python3
"""Where the cost of a dense ReLCP step goes, level by level (issue 10; a benchmark: prints, asserts nothing).

``capture`` -- continue a colony checkpoint for a few steps on ONE rank with every LCP dumped
(``debug: {dump_lcp: DIR, dump_on: always}``, :mod:`relcp_mpi.contact.lcp_dump`); on one rank the columns of
level k+1 extend those of level k, so level k's solution is level k+1's warm start::

    .venv/bin/python tools/bench_level_solves.py capture CKPT --deck input_decks/bacterial_colony.yaml \\
        --steps 2 --out /tmp/levels/c1024

``bench`` -- solve each dumped level with relcp_mpi's own solver (``solve_lcp`` on the stepper's operator
``A = D^T (dt M) D``) from the stepper's warm start (previous level's solution, zeros for the appended rows;
level 0 from zero) and from zero, and print per level: rows, appended rows (and how many of them belong to
pairs already in the LCP, i.e. re-sampled witness points), the warm start's min-map residual, and the solver's
iterations warm and cold::

    .venv/bin/python tools/bench_level_solves.py bench /tmp/levels/c1024 --method apgd --tol 1e-3

``--admm RHO`` also runs an ADMM prototype (scipy, not a library method) on the same LCPs: the splitting
``z = D^T U + q >= 0`` of the primal QP with penalty ``RHO / mean(diag A)``, over-relaxation 1.6, one sparse
LU of ``(dt M)^-1 + rho D D^T`` per LCP; its iterations are comparable with the first-order methods' (one
triangular solve pair against one matvec each).  Results: docs/BENCHMARKS.md, "Per-level cost of the colony".
"""
import argparse
import glob
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def capture(args):
    import yaml
    from relcp_mpi.simulation import Simulation
    with open(args.deck) as fh:
        deck = yaml.safe_load(fh)
    deck["debug"] = {"dump_lcp": args.out, "dump_on": "always"}
    deck["output"] = {"directory": os.path.join(args.out, "run"), "trajectory_every": 0, "progress_every": 1}
    os.makedirs(args.out, exist_ok=True)
    sim = Simulation.from_checkpoint(args.checkpoint, deck)
    if sim.comm.size != 1:
        raise SystemExit("capture: run on one rank (the warm-start prefix property needs one rank's column order)")
    sim.run(args.steps)


def _levels(directory):
    """{step: [path of level 0, 1, ...]} of the dumps in ``directory``."""
    steps = {}
    for p in sorted(glob.glob(os.path.join(directory, "lcp_step*_level*.npz"))):
        m = re.search(r"lcp_step(\d+)_level(\d+)\.npz$", p)
        if m:
            steps.setdefault(int(m.group(1)), []).append(p)
    return steps


def _solve(data, x0, method, tol, max_iter):
    """Iterations of ``solve_lcp(method)`` on the dump's operator from ``x0`` (serial PETSc objects)."""
    from relcp_mpi.petsc import get_petsc
    PETSc = get_petsc()
    from relcp_mpi.solver.lcp import solve_lcp
    from relcp_mpi.solver.operator import ContactOperator
    D = data["D"].tocsr()
    Dm = PETSc.Mat().createAIJ(D.shape, csr=(D.indptr.astype(PETSc.IntType), D.indices.astype(PETSc.IntType),
                                             D.data), comm=PETSc.COMM_SELF)
    Dm.assemble()
    A = ContactOperator(Dm, data["dt"] * data["blocks"])
    q = Dm.createVecRight()
    q.getArray()[:] = data["q"]
    x = Dm.createVecRight()
    x.getArray()[:] = x0
    t0 = time.perf_counter()
    res = solve_lcp(A, q, x, method=method, tol=tol, max_iter=max_iter, raise_on_fail=False)
    wall = time.perf_counter() - t0
    for o in (A, Dm, q, x):
        o.destroy()
    return res.iterations, res.residual, wall


def _admm(data, A, x0, tol, rho_factor, max_iter, alpha=1.6):
    """ADMM prototype (see the module docstring) on the dump ``data`` with its matrix ``A`` (scipy):
    (iterations, min-map residual, wall)."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as sla
    q, D = data["q"], data["D"].tocsc()
    t0 = time.perf_counter()
    Minv = sp.block_diag([np.linalg.inv(b) for b in data["dt"] * data["blocks"]], format="csc")
    rho = rho_factor / A.diagonal().mean()
    lu = sla.splu((Minv + rho * (D @ D.T)).tocsc())

    def resolvent(c):            # (I / rho + A)^-1 c by the body-dof system (Woodbury)
        return rho * (c - D.T @ lu.solve(rho * (D @ c)))

    u = -x0 / rho
    z = np.maximum(A @ x0 + q, 0.0)
    res = float(np.abs(np.minimum(x0, A @ x0 + q)).max())
    it = 0
    while res > tol and it < max_iter:
        c = q - z + u
        v = z - u + resolvent(c) / rho          # D^T U + q of the U-update
        v = alpha * v + (1.0 - alpha) * z
        z = np.maximum(v + u, 0.0)
        u += v - z
        it += 1
        g = -rho * u
        res = float(np.abs(np.minimum(g, A @ g + q)).max())
    return it, res, time.perf_counter() - t0


def _ssnal(data, A, x0, tol, rho_factor, grow, max_outer=100, max_newton=60):
    """SSNAL prototype (see the module docstring) on the dump ``data`` with its matrix ``A`` (scipy), from the
    multipliers ``x0``: (sparse Cholesky factorizations, min-map residual, wall)."""
    import scipy.sparse as sp
    from relcp_mpi.petsc import get_petsc
    from relcp_mpi.solver.body_system import inverse_blocks
    PETSc = get_petsc()
    q, D = data["q"], data["D"].tocsr()
    Dt = D.T.tocsr()
    n = len(data["blocks"])
    Mt = data["dt"] * data["blocks"]

    def bdiag(b):
        return sp.bsr_matrix((b, np.arange(n), np.arange(n + 1)), shape=(6 * n, 6 * n)).tocsr()

    Minv, Mtm = bdiag(inverse_blocks(Mt)), bdiag(Mt)
    ksp = PETSc.KSP().create(comm=PETSc.COMM_SELF)
    ksp.setType("preonly")
    ksp.getPC().setType("cholesky")
    ksp.getPC().setFactorSolverType("mumps")
    t0 = time.perf_counter()
    rho = rho_factor / A.diagonal().mean()
    g = np.maximum(x0, 0.0)
    nfact, K, S_fact = 0, None, None
    bv, xv = PETSc.Vec().createSeq(6 * n), PETSc.Vec().createSeq(6 * n)    # right-hand side, Newton step
    res = float(np.abs(np.minimum(g, A @ g + q)).max())
    for _ in range(max_outer):
        if res <= tol:
            break
        u = Mtm @ (D @ g)
        for _ in range(max_newton):            # semismooth Newton on the subproblem, exact line search
            z = g - rho * (q + Dt @ u)
            S = z > 0
            Mu = Minv @ u
            grad = Mu - D @ np.where(S, z, 0.0)
            if S_fact is None or not np.array_equal(S, S_fact):
                DS = D[:, np.flatnonzero(S)]
                H = (Minv + rho * (DS @ DS.T)).tocsr()
                H.sort_indices()
                if K is not None:
                    K.destroy()
                K = PETSc.Mat().createAIJ(H.shape, csr=(H.indptr.astype(PETSc.IntType),
                                                        H.indices.astype(PETSc.IntType), H.data), comm=PETSc.COMM_SELF)
                K.assemble()
                K.setOption(PETSc.Mat.Option.SPD, True)
                ksp.setOperators(K)
                ksp.setUp()
                S_fact, nfact = S.copy(), nfact + 1
            bv.getArray()[:] = -grad
            bv.stateIncrease()
            ksp.solve(bv, xv)
            du = xv.getArray().copy()
            s, a, b = Dt @ du, Mu @ du, du @ (Minv @ du)
            t = 1.0                            # root of the monotone piecewise-linear derivative of the merit
            for _ in range(60):
                zt = z - t * rho * s
                act = zt > 0
                t_new = t - (a + t * b - zt[act] @ s[act]) / (b + rho * (s[act] @ s[act]))
                done = abs(t_new - t) <= 1e-12 * max(1.0, abs(t))
                t = t_new
                if done:
                    break
            u = u + t * du
            if abs(t - 1.0) < 1e-8 and np.array_equal((g - rho * (q + Dt @ u)) > 0, S):
                break
        g = np.maximum(0.0, g - rho * (q + Dt @ u))
        res = float(np.abs(np.minimum(g, A @ g + q)).max())
        rho *= grow
        S_fact = None if grow != 1.0 else S_fact
    for o in (ksp, bv, xv) + ((K,) if K is not None else ()):
        o.destroy()
    return nfact, res, time.perf_counter() - t0


def bench(args):
    from relcp_mpi.contact.lcp_dump import lcp_matrix, load_lcp
    print("%-8s %5s %8s %7s %9s %10s %16s %16s%s" % ("step", "level", "rows", "new", "re-sampl", "warm res",
                                                      "%s warm it (s)" % args.method, "cold it (s)",
                                                      ("   admm warm it (s)" if args.admm else "")
                                                      + ("   ssnal warm fact (s)" if args.ssnal else "")))
    for step, paths in sorted(_levels(args.dumps).items()):
        prev = None
        for level, p in enumerate(paths):
            d = load_lcp(p)
            c = len(d["q"])
            x0 = np.zeros(c)
            new = np.ones(c, bool)
            if prev is not None and len(prev["q"]) <= c:
                x0[:len(prev["q"])] = np.maximum(prev["gamma"], 0.0)
                new[:len(prev["q"])] = False
            old_pairs = set(zip(d["gid_i"][~new].tolist(), d["gid_j"][~new].tolist()))
            resampled = sum((a, b) in old_pairs for a, b in zip(d["gid_i"][new].tolist(), d["gid_j"][new].tolist()))
            A = lcp_matrix(d)
            r0 = float(np.abs(np.minimum(x0, A @ x0 + d["q"])).max())
            iw, rw, tw = _solve(d, x0, args.method, args.tol, args.max_iter)
            ic, rc, tc = _solve(d, np.zeros(c), args.method, args.tol, args.max_iter) if level else (iw, rw, tw)
            extra = ""
            if args.admm:
                ia, ra, ta = _admm(d, A, x0, args.tol, args.admm, args.max_iter)
                extra = "   %6d (%.2f)%s" % (ia, ta, "" if ra <= args.tol else " FAIL")
            if args.ssnal:
                fs, rs, ts = _ssnal(d, A, x0, args.tol, args.ssnal, args.ssnal_grow)
                extra += "   %6d (%.2f)%s" % (fs, ts, "" if rs <= args.tol else " FAIL")
            print("%-8d %5d %8d %7d %9d %10.2e %9d (%5.2f) %9d (%5.2f)%s" % (
                step, level, c, int(new.sum()) if level else c, resampled if level else 0, r0, iw, tw, ic, tc, extra),
                flush=True)
            prev = d


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("checkpoint")
    c.add_argument("--deck", default="input_decks/bacterial_colony.yaml")
    c.add_argument("--steps", type=int, default=2)
    c.add_argument("--out", required=True)
    b = sub.add_parser("bench")
    b.add_argument("dumps")
    b.add_argument("--method", default="apgd")
    b.add_argument("--tol", type=float, default=1e-3)
    b.add_argument("--max-iter", type=int, default=20000)
    b.add_argument("--admm", type=float, default=0.0, help="also run the ADMM prototype with this rho factor")
    b.add_argument("--ssnal", type=float, default=0.0, help="also run the SSNAL prototype with this rho factor")
    b.add_argument("--ssnal-grow", type=float, default=1.0, help="SSNAL: rho factor per multiplier update")
    args = ap.parse_args()
    capture(args) if args.cmd == "capture" else bench(args)


if __name__ == "__main__":
    main()
