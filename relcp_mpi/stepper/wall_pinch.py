"""Early infeasibility check of a grown LCP: wall rows that pinch one body (docs/ARCHITECTURE.md, "Dense packings").

Why: the LCP ``0 <= g _|_ q + A g >= 0`` with ``A = dt D^T M D`` is solvable exactly when no ``y >= 0`` has
``D y = 0`` and ``q.y < 0`` (:mod:`relcp_mpi.solver.certificate`).  Writing ``q = c + dt D^T U_ext``, such a y
has ``q.y = c.y``, where ``c_k`` is row k's own linear model of its gap evaluated at zero velocity (the start
configuration): a set of rows can only be contradictory if some of them predict a negative gap for bodies that
do not move.  Rows of the start configuration (level 0) predict the gaps measured there (>= -overlap_tol); a row
appended at a trial configuration predicts the start by extrapolating its gap back along the trial's lever arms
and normal, which over a large trial rotation can be off by much more than a wall clearance.  Every infeasible
grown LCP of the colonies of issue 10 had one pattern: two to four wall rows of a single cell, at both walls,
some appended at rotated trials, with zero net force and torque and a negative total gap.

What :func:`check` does, before a level's solve: the wall rows of the bodies that have an appended wall row with
``c_k < -overlap_tol`` (usually none, so nothing else happens) form a block-diagonal D (a wall row touches only its
own body, so ``D y = 0`` splits into one 6-vector equation per body); one LP over all of them
(:func:`relcp_mpi.solver.certificate.search_certificate`, without its relaxed second LP) looks for a Farkas
certificate, which is then verified in exact rational arithmetic on the same float data as the LCP's D and q.  A
verified certificate proves the whole grown LCP infeasible (y is zero on every other row), so the solver need not
run to ``max_iter`` to find out: the stepper raises :class:`InfeasibleRowsError` at once and the step policy
redoes the step with stricter rows (``contact.strict_retries``) or halves dt.  The check is local to each rank
(a body's wall rows live with its owner); the stepper takes the decision collectively.
"""
import numpy as np

from relcp_mpi.solver.lcp import SolverError

__all__ = ["InfeasibleRowsError", "pinch_candidates", "check"]


class InfeasibleRowsError(SolverError):
    """A grown LCP is infeasible (an exactly verified Farkas certificate on some bodies' wall rows); raised before
    the solve.  ``rows`` (global gid_i, wall, sub, level) of the certificate's support on this rank."""

    def __init__(self, message, tol, rows=()):
        super().__init__("wall-pinch check", 0, float("inf"), tol, [], reason="infeasible grown LCP")
        self.args = (message,)
        self.rows = list(rows)


def pinch_candidates(body, level, c, threshold):
    """Mask (w,) of the wall rows (of bodies ``body`` (w,), appended at ``level`` (w,), zero-velocity gaps ``c``
    (w,) [L]) that may take part in a certificate: every wall row of a body with an appended row whose ``c`` is
    below ``-threshold``."""
    sus = (level >= 1) & (c < -threshold)
    if not sus.any():
        return np.zeros(len(body), bool)
    return np.isin(body, np.unique(body[sus]))


def check(body, normal, r, q, blocks, dt):
    """Search an infeasibility certificate among wall rows (local).

    ``body`` (w,) owned-body indices of the rows, ``normal`` (w, 3) wall normals, ``r`` (w, 3) lever arms [L],
    ``q`` (w,) the rows' LCP constants [L], ``blocks`` (n, 6, 6) the owned bodies' mobility, ``dt`` [T].  Returns
    ``(rows (k,) indices into the given rows, y (k,))`` of a verified certificate, or None."""
    import scipy.sparse as sp

    from relcp_mpi.solver.certificate import search_certificate
    w = len(body)
    if w == 0:
        return None
    ub, local = np.unique(body, return_inverse=True)
    # D's 6-vectors of the rows, [n, r x n] as the assembly forms them (constraints._halves: np.cross's bits)
    vec = np.concatenate([normal, np.cross(r, normal)], axis=1)
    D = sp.csr_matrix((vec.ravel(), ((6 * local[:, None] + np.arange(6)).ravel(), np.repeat(np.arange(w), 6))),
                      shape=(6 * len(ub), w))
    res = search_certificate(D, np.asarray(q, float), blocks[ub], dt, relaxed=False)
    if not res.infeasible:
        return None
    return res.rows, res.y
