"""Serial tests of the interior-point LCP solver (``method='ipm'``, relcp_mpi.solver.ipm) beyond the shared method
tests of test_solver.py (which run 'ipm' too): agreement with BBPGD/APGD on a saved colony LCP, the CG variants,
infeasible LCPs ending in SolverError, persistent PETSc objects, the deck's method list.

tests/data/colony_lcp_256.npz: the first LCP of a step of input_decks/bacterial_colony.yaml at 256 cells (1,180
rows), saved by ``tools/bench_solver_scaling.py capture`` (keys: D as CSR ``indptr/indices/data/shape`` with rows
= 6 dofs per body and columns = constraints, ``blocks`` = dt M (n, 6, 6), ``q``, ``x0`` = the stepper's warm
start, ``dt``, ``cells``).
"""
import os

import numpy as np
import pytest
import scipy.sparse as sp

from relcp_mpi.petsc import get_petsc
from relcp_mpi.solver.lcp import SolverError, minmap_residual, solve_lcp
from relcp_mpi.solver.operator import ContactOperator
from tests.helpers import aij_from_triplets
from test_solver import block_diag, check_complementarity, contact_D, contact_op, known_solution_lcp, spd_blocks

PETSc = get_petsc()
SELF = PETSc.COMM_SELF
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "colony_lcp_256.npz")


def load_colony():
    z = np.load(DATA)
    D = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
    return D, z["blocks"], z["q"], z["x0"]


def colony_operator(comm=SELF):
    D, blocks, q, _ = load_colony()
    C = D.tocoo()
    Dm = aij_from_triplets(C.row, C.col, C.data, D.shape[0], D.shape[1], comm)
    op = ContactOperator(Dm, blocks)
    qv = Dm.createVecRight()
    qv.getArray()[:] = q
    return op, Dm, qv


def solve(op, qv, method, **kw):
    x = qv.duplicate()
    x.set(0.0)
    r = solve_lcp(op, qv, x, method=method, **kw)
    return r, x.getArray(readonly=True).copy()


def test_colony_lcp_ipm_agrees_with_bbpgd_and_apgd():
    D, blocks, q, _ = load_colony()
    op, Dm, qv = colony_operator()
    tol = 1e-7
    sols = {}
    for m in ("bbpgd", "apgd", "ipm"):
        r, xs = solve(op, qv, m, tol=tol, max_iter=50000)
        assert r.converged and r.residual <= tol
        # independent check of the residual with scipy's D and the blocks
        w = D.T @ np.einsum("bij,bj->bi", blocks, (D @ xs).reshape(-1, 6)).ravel() + q
        assert np.all(xs >= 0) and np.abs(np.minimum(xs, w)).max() <= 1.01 * tol
        sols[m] = xs
    assert r.iterations <= 40                                  # Newton steps, not gradient steps
    scale = sols["bbpgd"].max()
    disp = {m: np.einsum("bij,bj->bi", blocks, (D @ s).reshape(-1, 6)) for m, s in sols.items()}  # dt U [L]
    for m in ("apgd", "ipm"):
        assert np.abs(sols[m] - sols["bbpgd"]).max() <= 1e-5 * scale, m
        assert np.abs(disp[m] - disp["bbpgd"]).max() <= 1e-5, m
    for o in (op, Dm, qv):
        o.destroy()


def contact_problem(nb, nc, rng):
    """Random contact LCP with a known solution: (Dd, blocks, A, x0, q, operator, q Vec)."""
    Dd = contact_D(nb, nc, rng)
    blocks = spd_blocks(nb, rng)
    A = Dd.T @ block_diag(blocks) @ Dd
    x0, q = known_solution_lcp(A, rng)
    op, _ = contact_op(Dd, blocks)
    qv = op.createVecLeft()
    qv.getArray()[:] = q
    return Dd, blocks, A, x0, q, op, qv


@pytest.mark.parametrize("pc_type", ["hypre", "jacobi"])
def test_cg_variants_agree(pc_type, rng):
    _, _, A, x0, q, op, qv = contact_problem(15, 50, rng)
    r, xs = solve(op, qv, "ipm", tol=1e-9, pc_type=pc_type, ksp_rtol=1e-12)
    assert r.converged and r.inner_iterations > r.iterations   # CG iterations counted
    check_complementarity(A, q, xs, 1e-9)
    assert np.abs(xs - x0).max() <= 1e-6


def pinched_body(q_top, q_bottom):
    """One body between two walls: rows [e_z; 0] (floor) and [-e_z; 0] (ceiling).  With q_top + q_bottom < 0 the
    LCP is infeasible: y = (1, 1) >= 0 has D y = 0 and q.y < 0 (the body cannot fit between the walls)."""
    Dd = np.zeros((6, 2))
    Dd[2, 0], Dd[2, 1] = 1.0, -1.0
    op, D = contact_op(Dd, np.eye(6)[None] * 0.05)
    qv = op.createVecLeft()
    qv.getArray()[:] = [q_bottom, q_top]
    return op, D, qv


def test_infeasible_lcp_raises_solver_error():
    op, D, qv = pinched_body(-0.01, -0.02)
    x = qv.duplicate()
    x.set(0.0)
    with pytest.raises(SolverError) as ei:
        solve_lcp(op, qv, x, method="ipm", tol=1e-6, max_iter=20000)
    e = ei.value
    assert e.method == "ipm" and e.residual > 1e-6 and e.iterations <= 200
    assert e.history[-1] == e.residual and "ipm" in str(e)
    # the same body with room to spare is solved (only the bottom wall pushes, by the exact amount)
    op2, D2, qv2 = pinched_body(0.03, -0.02)
    r, xs = solve(op2, qv2, "ipm", tol=1e-10)
    assert r.converged
    # w = A x + q with A = 0.05 [[1, -1], [-1, 1]]: the floor row must close its gap exactly, the ceiling stays open
    assert xs[0] == pytest.approx(0.02 / 0.05, rel=1e-8) and xs[1] <= 1e-9


def test_ksp_persists_across_calls_and_operator_updates(rng):
    nb, nc = 10, 30
    Dd, blocks, _, _, _, op, qv = contact_problem(nb, nc, rng)
    solve(op, qv, "ipm", tol=1e-9)
    ksp = op.query("relcp_ipm_ksp")
    assert ksp is not None
    solve(op, qv, "ipm", tol=1e-9)
    assert op.query("relcp_ipm_ksp").handle == ksp.handle
    # a grown LCP (more rows, same operator object): still solved correctly
    Dd2 = np.hstack([Dd, contact_D(nb, 7, rng)])
    A2 = Dd2.T @ block_diag(blocks) @ Dd2
    _, q2 = known_solution_lcp(A2, rng)
    r_, c_ = np.nonzero(Dd2)
    op.update(aij_from_triplets(r_, c_, Dd2[r_, c_], 6 * nb, nc + 7, SELF), blocks)
    qv2 = op.createVecLeft()
    qv2.getArray()[:] = q2
    r, xs = solve(op, qv2, "ipm", tol=1e-9)
    assert r.converged and abs(minmap_residual(op, qv2, _vec(xs)) - r.residual) <= 1e-12
    check_complementarity(A2, q2, xs, 1e-9)


def _vec(a):
    v = PETSc.Vec().createSeq(len(a), comm=SELF)
    v.getArray()[:] = a
    return v


def test_shell_without_D_is_refused(rng):
    class Ctx:
        def mult(self, mat, x, y):
            x.copy(y)

    M = PETSc.Mat().createPython((3, 3), context=Ctx(), comm=SELF)
    M.setUp()
    q = _vec(np.array([-1.0, 1.0, -2.0]))
    x = q.duplicate()
    x.set(0.0)
    with pytest.raises(ValueError, match="ContactOperator"):
        solve_lcp(M, q, x, method="ipm")
    M.destroy()


def test_deck_accepts_ipm():
    from relcp_mpi.config.deck import DeckError, loads
    body = "bodies: [{shape: sphere, radius: 1, position: [0,0,0]}]"
    deck = loads("time: {dt: 0.1, steps: 2}\nsolver: {method: ipm, tol: 1.0e-4}\n" + body)
    assert deck["solver"]["method"] == "ipm"
    with pytest.raises(DeckError, match="solver.method"):
        loads("time: {dt: 0.1, steps: 2}\nsolver: {method: ipmx}\n" + body)
