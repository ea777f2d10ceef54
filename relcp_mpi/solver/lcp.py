"""LCP front end: ``solve_lcp``, ``minmap_residual``, ``SolverResult``, ``SolverError`` and shared machinery.

Problem: find ``x`` with ``0 <= x  _|_  A x + q >= 0`` (A symmetric positive semidefinite, a PETSc Mat: assembled
AIJ or a shell such as :class:`relcp_mpi.solver.operator.ContactOperator`).  Equivalent bound-constrained QP:
``min 1/2 x^T A x + q^T x  s.t.  x >= 0``.

Residual (every method, convergence test): the min-map / projected-gradient residual
``r(x) = ||x - P(x - (A x + q))||_inf = ||min(x, A x + q)||_inf`` for ``x >= 0``.

Contract::

    result = solve_lcp(A, q, x, method="bbpgd", tol=1e-8, max_iter=10000, raise_on_fail=True, **options)

``x`` is the initial guess on entry (it is first projected onto ``x >= 0`` in place) and the solution on exit.
``result`` is a :class:`SolverResult`; non-convergence raises :class:`SolverError` carrying the residual history
(or returns ``converged=False`` when ``raise_on_fail=False``).  All ranks of ``A``'s communicator must call.

Methods (:mod:`relcp_mpi.solver.registry`, one :class:`relcp_mpi.solver.base.LCPSolver` subclass each):
``'bbpgd'`` (default, :mod:`.bbpgd`), ``'apgd'`` (:mod:`.apgd`), ``'ipm'`` (interior point with
Newton solves on the body-dof system, :mod:`.ipm`), ``'tao-<type>'`` (:mod:`.tao`:
``'tao-bncg'``, ``'tao-blmvm'``, ``'tao-tron'``, ``'tao-bnls'``, ``'tao-bntr'``, ``'tao-bqnls'``, ``'tao-gpcg'``).

Certificate (``SolverResult.certificate``, see :func:`certify`): for the final iterate ``x`` (``x >= 0``), its
computed gradient ``g = A x + q`` and the method's last step ``t > 0`` (BBPGD: last Barzilai-Borwein step;
APGD: ``1/L``; TAO: ``1``), ``certificate`` is an upper bound ``eps`` on the fixed-point residual
``||x - P(x - t g)||_2`` obtained from seed 001's approximate-projection theorem (``p in C`` and
``sup_{z in C} <y - p, z - p> <= eps^2`` imply ``||p - P_C(y)||_2 <= eps``), applied with ``y = x - t g`` and
the two feasible points ``p = x`` (gives ``sqrt(t x.g)`` when ``g >= 0``, else ``inf``) and ``p = P(y)``
(gives ``||x - P(y)||_2`` plus the certificate of ``P(y)`` itself, 0 up to rounding), combined by the triangle
inequality and taking the smaller.  ``x`` is a solution iff this residual is 0, for any ``t > 0``.

Error bound (``SolverResult.error_bound``, only when ``mu`` > 0 is passed: a lower bound on the smallest eigenvalue
of the symmetric part of A, i.e. A is then positive definite and the solution ``x*`` is unique):
with ``x+ = P(x - t g)`` and ``e = x - x+``,
``||x - x*||_2 <= ||e||_2 + ||e - t A e||_2 / (t mu)``.
Proof: the projection VI at ``x+`` (seed 001) with ``z = x*`` and the LCP's VI at ``x*`` with ``z = x+`` give
``t <A(x+ - x*), x+ - x*> <= <(I - t A) e, x+ - x*>``, hence ``||x+ - x*|| <= ||(I - tA) e|| / (t mu)``; add
``||e||`` (bounded by ``certificate``).  This costs one extra matvec.  What is *claimed*: these bounds hold in
exact arithmetic for the computed ``x``, ``g``, ``A e`` (floating-point error in forming ``g`` and ``A e`` is not
included; the projection certificate itself is rounded upwards).  Nothing is claimed when ``mu`` is not given
(``error_bound = nan``); if the given ``mu`` is not a valid lower bound, neither is the error bound.
"""
from relcp_mpi.solver.base import (FusedReducer, SolverError, SolverResult, certify, check_layout,  # noqa: F401
                                   empty_result, minmap_residual, mpi_comm_of)
from relcp_mpi.solver.registry import method_info, method_names, solver_class

__all__ = ["SolverResult", "SolverError", "solve_lcp", "minmap_residual", "certify", "METHODS"]

METHODS = method_names()


def solve_lcp(A, q, x, method="bbpgd", tol=1e-8, max_iter=10000, raise_on_fail=True, **options):
    """Solve ``0 <= x _|_ A x + q >= 0`` in place in ``x`` (initial guess in, solution out).

    Parameters: ``A`` PETSc Mat (assembled or shell, e.g. ContactOperator), ``q``/``x`` PETSc Vecs with A's
    column layout; ``method`` one of :data:`METHODS` (:mod:`relcp_mpi.solver.registry`); ``tol`` on the min-map
    residual (inf-norm); ``max_iter``; ``raise_on_fail``.  Options common to all methods: ``mu`` (lower bound on
    A's smallest eigenvalue, enables ``error_bound``).  Method options: the registry's, see the method modules.

    Returns :class:`SolverResult`; raises :class:`SolverError` (non-convergence) or ``ValueError`` (bad
    arguments).  Zero-size problems return at once (converged, 0 iterations).
    """
    method = str(method).lower()
    if tol is None or not (tol >= 0):
        raise ValueError("solve_lcp: tol must be >= 0, got %r" % (tol,))
    if int(max_iter) < 0:
        raise ValueError("solve_lcp: max_iter must be >= 0, got %r" % (max_iter,))
    try:
        method_info(method)
    except ValueError as exc:
        raise ValueError("solve_lcp: %s" % exc) from None
    if A.getSize()[1] == 0:
        return empty_result(method)
    check_layout(A, q, x, mpi_comm_of(A))
    return solver_class(method)(method).solve(A, q, x, tol=float(tol), max_iter=int(max_iter),
                                              raise_on_fail=bool(raise_on_fail), **options)
