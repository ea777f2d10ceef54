"""The body-dof Newton systems of the second-order LCP methods (relcp_mpi.solver.body_system): both forms return
``(Theta^{-1} + A)^{-1} b``; the body-dof form also holds the rows with ``Theta = 0`` at zero, i.e. it solves
``(Theta_S^{-1} + A_SS) x_S = b_S`` on the subset S -- checked against a dense solve."""
import numpy as np
import pytest

from relcp_mpi.petsc import get_petsc
from relcp_mpi.solver.body_system import BodySystem, ConstraintSystem, persistent_ksp
from test_solver import block_diag, contact_D, contact_op, petsc_aij, spd_blocks

PETSc = get_petsc()


@pytest.mark.parametrize("form, frac_on", [("body", 1.0), ("body", 0.6), ("constraint", 1.0)])
def test_subset_newton_system_matches_dense_solve(form, frac_on):
    rng = np.random.default_rng(7)
    nb, nc = 12, 40                       # more rows than dofs (72): A is singular, Theta^{-1} makes it definite
    Dd = contact_D(nb, nc, rng)
    blocks = spd_blocks(nb, rng)
    A_dense = Dd.T @ block_diag(blocks) @ Dd
    theta = np.where(rng.random(nc) < frac_on, 10.0 ** rng.uniform(-2, 3, nc), 0.0)
    on = theta > 0
    b = rng.standard_normal(nc)
    if form == "body":
        A, D = contact_op(Dd, blocks)
    else:
        A, D = petsc_aij(A_dense), None
    ksp = persistent_ksp(A, "cholesky", 1e-12, prefix="test_bs_")
    system = BodySystem(A, ksp) if form == "body" else ConstraintSystem(A, ksp)
    try:
        system.assemble(theta)
        x, _ = system.solve(b)
    finally:
        system.destroy()
    ref = np.zeros(nc)
    S = np.flatnonzero(on)
    ref[S] = np.linalg.solve(np.diag(1.0 / theta[S]) + A_dense[np.ix_(S, S)], b[S])
    assert np.all(x[~on] == 0.0)
    assert np.allclose(x, ref, rtol=1e-8, atol=1e-10 * np.abs(ref).max())
