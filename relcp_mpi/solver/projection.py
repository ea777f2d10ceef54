"""Projections onto the nonnegative orthant and boxes, normal cones, and the approximate-projection certificate.

Everything here is plain numpy on *local* arrays; the ``*_mpi`` variants take a communicator (mpi4py) and combine
the local results with one reduction.

Sets handled: the nonnegative orthant ``C = {x : x >= 0}`` and boxes ``C = {x : lo <= x <= hi}`` with
``lo <= hi`` componentwise (``lo`` may be ``-inf``, ``hi`` may be ``+inf``; scalars broadcast).  Both are nonempty,
closed and convex, so the theorems of seed 001 apply:

* (nonexpansive) ``||P_C(u) - P_C(v)||_2 <= ||u - v||_2``;
* (variational inequality) ``P_C(y) = p``  iff  ``p in C`` and ``y - p in N_C(p)`` where
  ``N_C(x) = {n : <n, z - x> <= 0 for all z in C}`` for ``x in C`` and ``N_C(x) = {}`` otherwise;
* (approximate projection) if ``p in C`` and ``sup_{z in C} <y - p, z - p> <= eps^2`` then
  ``||p - P_C(y)||_2 <= eps``.

Closed forms used for the certificate.  With ``r = y - p`` and ``p`` in a box the supremum separates by component:
``sup_{z_k in [lo_k, hi_k]} r_k (z_k - p_k) = max(r_k, 0) (hi_k - p_k) + max(-r_k, 0) (p_k - lo_k)`` (a term is 0
when ``r_k = 0`` even if the bound is infinite, and ``+inf`` when ``r_k`` points towards an infinite bound).  For the
orthant (``lo = 0``, ``hi = inf``) this is ``+inf`` if some ``r_k > 0`` and ``-sum_k r_k p_k`` otherwise.  Every
term is ``>= 0`` (``z = p`` is admissible), so ``eps = sqrt(sup)`` and ``eps = 0`` for ``d = 0``.

Floating point: :func:`certificate_box` / :func:`certificate_orthant` evaluate the supremum in float64 and, with
``safe=True`` (default), inflate it by a factor that bounds the rounding of the evaluation (each term is a product
of two correctly rounded differences; the sum of ``d`` nonnegative terms has relative error ``<= (d - 1) u``), so
the returned ``eps`` bounds the exact supremum built from the *given* float arrays ``y`` and ``p``.  Rounding made
before the call (e.g. in forming ``y``) is the caller's business.
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "project_orthant",
    "project_box",
    "normal_cone_residual",
    "in_normal_cone",
    "certificate_sup_box",
    "certificate_box",
    "certificate_orthant",
    "certificate_box_mpi",
    "certificate_orthant_mpi",
    "normal_cone_residual_mpi",
]

_U = np.finfo(np.float64).eps / 2.0          # unit roundoff
_TINY = 2.0 ** -1074                          # smallest subnormal (absolute error of one underflowing op)


def project_orthant(y, out=None):
    """Nearest point of the nonnegative orthant: ``max(y, 0)`` (exact in floating point)."""
    return np.maximum(y, 0.0, out=out)


def _check_box(lo, hi):
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    if np.any(np.isnan(lo)) or np.any(np.isnan(hi)) or np.any(lo > hi):
        raise ValueError("box bounds must satisfy lo <= hi componentwise (no NaN)")
    return lo, hi


def project_box(y, lo, hi, out=None):
    """Nearest point of the box ``[lo, hi]`` (componentwise clip; exact in floating point)."""
    lo, hi = _check_box(lo, hi)
    return np.clip(y, lo, hi, out=out)


def _nc_components(x, n, lo, hi):
    """Componentwise |x - P_C(x + n)| (exact arithmetic formula, no cancellation) plus infeasibility of x."""
    x = np.asarray(x, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    infeas = np.maximum(np.maximum(lo - x, x - hi), 0.0)
    with np.errstate(invalid="ignore"):
        up = np.minimum(np.maximum(n, 0.0), hi - x)       # n_k > 0 must be stopped by hi
        down = np.minimum(np.maximum(-n, 0.0), x - lo)    # n_k < 0 must be stopped by lo
    comp = np.maximum(np.maximum(up, down), 0.0)
    comp = np.where(np.isnan(comp), np.inf, comp)
    return np.maximum(comp, infeas)


def normal_cone_residual(x, n, lo=0.0, hi=np.inf):
    """``max(dist_inf(x, C), ||x - P_C(x + n)||_inf)`` for the box ``C = [lo, hi]`` (default: orthant).

    It is zero exactly when ``n in N_C(x)`` (by the variational inequality ``P_C(x + n) = x`` iff ``x in C`` and
    ``n in N_C(x)``).  Componentwise, for ``x`` in the box, ``|x - P_C(x + n)|_k = min(n_k^+, hi_k - x_k) +
    min(n_k^-, x_k - lo_k)``, which is what is evaluated (no rounding of ``x + n``).  For the orthant and
    ``n = -(Ax + q)`` this is the LCP min-map residual ``||min(x, Ax + q)||_inf``.  Empty input gives 0.
    """
    lo, hi = _check_box(lo, hi)
    r = _nc_components(x, n, lo, hi)
    return float(r.max()) if r.size else 0.0


def in_normal_cone(x, n, lo=0.0, hi=np.inf, tol=0.0):
    """``n in N_C(x)`` up to ``tol`` in the sense ``normal_cone_residual(x, n, lo, hi) <= tol``.

    With ``tol = 0`` this is the exact membership test (``x in C``; ``n_k = 0`` where ``lo_k < x_k < hi_k``;
    ``n_k <= 0`` where ``x_k = lo_k < hi_k``; ``n_k >= 0`` where ``x_k = hi_k > lo_k``; any ``n_k`` where
    ``lo_k = x_k = hi_k``).
    """
    return normal_cone_residual(x, n, lo, hi) <= tol


def _sup_terms(y, p, lo, hi):
    y = np.asarray(y, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    r = y - p
    rp = np.maximum(r, 0.0)
    rm = np.maximum(-r, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        up = np.where(rp > 0.0, rp * (hi - p), 0.0)
        dn = np.where(rm > 0.0, rm * (p - lo), 0.0)
    return up + dn


def _feasible(p, lo, hi):
    p = np.asarray(p, dtype=np.float64)
    return bool(np.all((p >= lo) & (p <= hi)))


def certificate_sup_box(y, p, lo=0.0, hi=np.inf):
    """Local (unreduced) ``sup_{z in [lo,hi]} <y - p, z - p>`` as a float (``+inf`` possible).

    ``p`` must lie in the box (``ValueError`` otherwise: the theorem needs ``p in C``).
    """
    lo, hi = _check_box(lo, hi)
    if not _feasible(p, lo, hi):
        raise ValueError("certificate needs a feasible p (p in C)")
    t = _sup_terms(y, p, lo, hi)
    return float(t.sum()) if t.size else 0.0


def _eps_from_sup(s, d, safe, nred=0):
    if not np.isfinite(s):
        return float("inf")
    s = max(s, 0.0)
    if d == 0:
        return 0.0
    if safe:
        k = d + 4 + nred
        s = s * (1.0 + k * _U / (1.0 - k * _U)) + k * _TINY
        return float(np.sqrt(s) * (1.0 + 2.0 * _U))
    return float(np.sqrt(s))


def certificate_box(y, p, lo=0.0, hi=np.inf, safe=True):
    """``eps`` with ``sup_{z in C} <y - p, z - p> <= eps^2`` for the box C; then ``||p - P_C(y)||_2 <= eps``.

    ``+inf`` when the supremum is unbounded (``y - p`` points towards an infinite bound somewhere).
    """
    lo, hi = _check_box(lo, hi)
    s = certificate_sup_box(y, p, lo, hi)
    return _eps_from_sup(s, np.size(y), safe)


def certificate_orthant(y, p, safe=True):
    """Orthant case: ``+inf`` if some ``(y - p)_k > 0`` else ``sqrt(-sum_k (y - p)_k p_k)`` (safely rounded up)."""
    return certificate_box(y, p, 0.0, np.inf, safe=safe)


# --------------------------------------------------------------------------------------------------- MPI variants
def _comm_size(comm):
    return 1 if comm is None else comm.Get_size()


def certificate_box_mpi(y_local, p_local, comm, lo=0.0, hi=np.inf, safe=True):
    """Distributed certificate: each rank passes its local slice; one allreduce (sum of the local suprema, plus
    the global count for the rounding factor).  Feasibility of ``p`` is checked collectively (a rank holding an
    infeasible entry makes every rank raise ``ValueError``)."""
    lo, hi = _check_box(lo, hi)
    ok = _feasible(p_local, lo, hi)
    if ok:
        s_loc = float(_sup_terms(y_local, p_local, lo, hi).sum()) if np.size(y_local) else 0.0
    else:
        s_loc = 0.0
    buf = np.array([s_loc, float(np.size(y_local)), 0.0 if ok else 1.0])
    if comm is not None and comm.Get_size() > 1:
        from mpi4py import MPI
        out = np.empty_like(buf)
        comm.Allreduce(buf, out, op=MPI.SUM)
        buf = out
    if buf[2] > 0:
        raise ValueError("certificate needs a feasible p (p in C) on every rank")
    return _eps_from_sup(buf[0], int(buf[1]), safe, nred=_comm_size(comm) - 1)


def certificate_orthant_mpi(y_local, p_local, comm, safe=True):
    """Orthant version of :func:`certificate_box_mpi`."""
    return certificate_box_mpi(y_local, p_local, comm, 0.0, np.inf, safe=safe)


def normal_cone_residual_mpi(x_local, n_local, comm, lo=0.0, hi=np.inf):
    """Global ``normal_cone_residual`` from local slices (one max-allreduce)."""
    r = normal_cone_residual(x_local, n_local, lo, hi)
    if comm is not None and comm.Get_size() > 1:
        from mpi4py import MPI
        r = comm.allreduce(r, op=MPI.MAX)
    return r
