#!/usr/bin/env python3
"""Benchmark (issue 10, deliverable 3): APGD with and without a coarse *scaling* correction, on dumped LCPs.

A serial measurement harness for a candidate method, not a solver of the package.  It reads LCPs dumped by the
stepper (``debug: {dump_lcp: DIR, dump_on: always}``, :mod:`relcp_mpi.contact.lcp_dump`), applies ``A = D^T M D``
with the package's compiled operator (:class:`relcp_mpi.solver.operator.ContactOperator`), and runs the
accelerated projected gradient of :mod:`relcp_mpi.solver.apgd` written out in numpy (the same iterates: with no
correction it needs exactly the package's iteration count), optionally with corrections:

Every ``--every`` iterations from iteration ``--first`` on, the iterate is replaced by the best non-negative
scaling of its parts on aggregates of rows, ``x <- sum_a s_a x|_a``: rows are grouped by their lowest body index
in blocks of ``--block`` bodies (the dumps list bodies in the step's Morton order, so a block is a patch of the
packing), and ``s >= 0`` minimises the LCP's quadratic ``f(x) = 1/2 x.A x + q.x`` over that family -- a small
non-negative QP with Hessian ``H = W^T M W``, ``W = D diag(x) P`` (``P`` the row-to-aggregate indicator), solved
exactly (Cholesky + NNLS).  The previous iterate is scaled by the same factors, so the momentum survives.  Why:
in a stressed colony what converges slowly is the overall force level (the sum of the multipliers creeps up over
the whole solve while the rows above tolerance halve every few hundred iterations), a long-wavelength mode
that the aggregates' scalings move at once.

    source tools/env.sh
    .venv/bin/python tools/bench_coarse_scaling.py DUMP.npz [--warm PREVIOUS_LEVEL.npz] \\
        [--variants 0:0,100:100,200:100] [--block 8] [--tol 1e-3]

``--variants`` lists ``every:first`` pairs (``0:0`` = plain APGD).  ``--warm`` starts from the previous level's
solution matched by (gid_i, gid_j, sub) (zeros for new rows).  Prints, per variant: iterations, operator
products, corrections, final min-map residual, sum of the multipliers and wall time.  Figures:
docs/BENCHMARKS.md, "Session 16: a coarse scaling correction".
"""
import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def build_operator(dump):
    """(ContactOperator, its D as a PETSc Mat) of a loaded dump; the CSR attribute lets it use the one-pass
    compiled product."""
    from relcp_mpi.contact.constraints import CSR_ATTR
    from relcp_mpi.petsc import get_petsc
    from relcp_mpi.solver.operator import ContactOperator
    PETSc = get_petsc()
    D = dump["D"].tocsr()
    D.sort_indices()
    ip, ci = D.indptr.astype(PETSc.IntType), D.indices.astype(PETSc.IntType)
    v = D.data.astype(PETSc.ScalarType)
    M = PETSc.Mat().createAIJWithArrays(size=D.shape, csr=(ip, ci, v), comm=PETSc.COMM_SELF)
    M.assemble()
    M.setAttr(CSR_ATTR, (ip, ci, v))
    return ContactOperator(M, np.ascontiguousarray(dump["blocks"])), M


class ScalingCorrection:
    """The coarse correction of the module docstring for one LCP: ``factors(x)`` -> (rows,) scaling of each row."""

    def __init__(self, dump, block):
        import scipy.sparse as sp
        self.D = dump["D"].tocsc()
        self.q = np.asarray(dump["q"], float)
        nr = self.D.shape[1]
        lowest = np.minimum.reduceat(self.D.indices, self.D.indptr[:-1]) // 6      # every column has entries
        self.agg = lowest // int(block)
        na = int(self.agg.max()) + 1 if nr else 0
        self.P = sp.csr_matrix((np.ones(nr), (np.arange(nr), self.agg)), shape=(nr, na))
        self.M = sp.block_diag(list(dump["blocks"]), format="csr")
        self.n_aggregates = na

    def factors(self, x):
        import scipy.sparse as sp
        from scipy.optimize import nnls
        W = (self.D @ sp.diags(x)) @ self.P
        H = (W.T @ (self.M @ W)).toarray()
        c = self.P.T @ (self.q * x)
        act = np.diag(H) > 0                       # aggregates whose rows carry force
        s = np.ones(self.n_aggregates)
        if act.any():
            Ha = H[np.ix_(act, act)]
            L = np.linalg.cholesky(Ha + 1e-12 * np.trace(Ha) / len(Ha) * np.eye(len(Ha)))
            s[act] = nnls(L.T, -np.linalg.solve(L, c[act]), maxiter=10 * len(Ha))[0]
        return s[self.agg]


def apgd(op, q, x0, tol, every=0, first=0, correction=None, max_iter=20000, power_iters=10, L_safety=1.05):
    """relcp_mpi's APGD (solver/apgd.py: backtracking, gradient-mapping restart) in numpy, with corrections.
    Returns (iterations, products, corrections, residual, x)."""
    from relcp_mpi.solver.apgd import estimate_lmax
    xv, gv = q.duplicate(), q.duplicate()
    Q = q.getArray(readonly=True).copy()

    def A(v):
        xv.getArray()[:] = v
        xv.stateIncrease()
        op.mult(xv, gv)
        return gv.getArray(readonly=True).copy()
    L = L_safety * estimate_lmax(op, q, power_iters)
    X = np.maximum(x0, 0.0)
    G = A(X) + Q
    products = 1 + power_iters
    res = np.abs(np.minimum(X, G)).max()
    XO, GO, Y, GY = X.copy(), G.copy(), X.copy(), G.copy()
    theta, it, nc = 1.0, 0, 0
    while res > tol and it < max_iter:
        t = 1.0 / L
        XO, GO = X, G
        X = np.maximum(Y - t * GY, 0.0)
        G = A(X) + Q
        products += 1
        d = X - Y
        if d @ (G - GY) > L * (d @ d) * (1.0 + 1e-10):
            L *= 2.0
            X, G = XO, GO
            continue
        it += 1
        res = np.abs(np.minimum(X, G)).max()
        if res <= tol:
            break
        theta_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * theta * theta))
        beta = (theta - 1.0) / theta_new
        theta = theta_new
        if (Y - X) @ (X - XO) > 0.0:
            theta, beta = 1.0, 0.0
        if every and it >= first and (it - first) % every == 0:
            s = correction.factors(X)
            X, XO = X * s, XO * s
            G, GO = A(X) + Q, A(XO) + Q
            products += 2
            nc += 1
        Y = X + beta * (X - XO)
        GY = G + beta * (G - GO)
    return it, products, nc, res, X


def warm_start(dump, previous):
    """The previous level's solution on this level's rows, matched by (gid_i, gid_j, sub); 0 for new rows."""
    known = {k: g for k, g in zip(zip(previous["gid_i"], previous["gid_j"], previous["sub"]), previous["gamma"])}
    return np.array([known.get(k, 0.0) for k in zip(dump["gid_i"], dump["gid_j"], dump["sub"])])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump")
    ap.add_argument("--warm", default=None, help="previous level's dump (warm start)")
    ap.add_argument("--variants", default="0:0,100:100,200:100", help="every:first pairs; 0:0 = plain APGD")
    ap.add_argument("--block", type=int, default=8, help="bodies per aggregate (Morton-ordered blocks)")
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--max-iter", type=int, default=20000)
    args = ap.parse_args(argv)
    from relcp_mpi.contact.lcp_dump import load_lcp
    from relcp_mpi.petsc import get_petsc
    PETSc = get_petsc()
    dump = load_lcp(args.dump)
    op, _ = build_operator(dump)
    q = PETSc.Vec().createWithArray(np.asarray(dump["q"], float).copy(), comm=PETSc.COMM_SELF)
    x0 = warm_start(dump, load_lcp(args.warm)) if args.warm else np.zeros(len(dump["q"]))
    corr = ScalingCorrection(dump, args.block)
    print(f"{os.path.basename(args.dump)}: {len(dump['q'])} rows, {dump['blocks'].shape[0]} bodies, "
          f"{corr.n_aggregates} aggregates of {args.block} bodies, tol {args.tol:g}"
          + (f", warm start from {os.path.basename(args.warm)}" if args.warm else ", from zero"), flush=True)
    for spec in args.variants.split(","):
        every, first = (int(v) for v in spec.split(":"))
        t0 = time.perf_counter()
        it, products, nc, res, X = apgd(op, q, x0, args.tol, every, first, corr, args.max_iter)
        print(f"  every {every:4d} from {first:4d}: {it:6d} iterations, {products:6d} products, {nc:3d} corrections, "
              f"residual {res:.2e}, sum x {X.sum():.6e}, {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
