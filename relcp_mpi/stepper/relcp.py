"""One overdamped time step with the ReLCP recursion (collective over all ranks).

Length-unit LCP of a step, for the constraint rows k present at a recursion level::

    0 <= gamma  _|_  w = q + dt D^T M D gamma >= 0,

* rows generated at the start-of-step configuration (level 0, one per candidate pair / wall):
  q_k = Phi_k(start) + dt D_k^T U_ext;
* rows appended at level l for pairs whose smooth-surface separation at the trial configuration is below
  ``-overlap_tol``: geometry (normal, witness points, lever arms) taken at the trial configuration and
  q_k = Phi_k(trial) - dt D_k^T (U_trial - U_ext), so that the row's prediction at the previous solution
  equals the measured trial separation (this is the "whole grown LCP, warm started" variant: the previous
  gamma is kept for old rows, zero for new rows, and the full LCP is re-solved).  With
  ``contact.row_rotation_limit`` > 0 the appended rows are taken at a configuration Y where the trial's
  rotations larger than the limit are cut back to it (q_k = Phi_k(Y) - dt D_k^T (U_Y - U_ext));
  see ``_limited_rotation``.  With ``contact.row_depth_limit`` > 0 a pair that overlaps by more than the limit
  at the trial gets its row where the step's path brings it to about half that depth (``_backed_off_rows``).

With ``contact.gap_margin`` m > 0 every q_k above is lowered by m, i.e. the LCP asks for predicted gaps >= m
(bodies pressed together rest about m apart).  The trial check still allows overlaps up to ``overlap_tol``, so
the solver's tolerance and part of the linearisation error are absorbed by m instead of by another level.

In the code the LCP constant q of the rows is ``table.gap_free`` (and ``gap_v`` as a PETSc Vec): ``q``, ``Q0``,
``qt`` are quaternions there, as in the body store.

After each solve U = U_ext + M D gamma, every body is re-stepped from the START configuration (trial), ghosts
are refreshed, the neighbour search is re-run at the trial configuration (pairs that come into contact during
the step are not missed), and the SNSD of every candidate pair is evaluated there.  The decision "any pair
below -overlap_tol?" is one global allreduce.  The last trial configuration is committed.  With
``model='snsd'`` the recursion is disabled (single constraint per pair, the classical SNSD LCP).
"""
import time
from dataclasses import dataclass, field

import numpy as np

from relcp_mpi.contact.constraints import ConstraintTable, assemble_D, lookup_keys, match_keys
from relcp_mpi.basics import quaternion
from relcp_mpi.basics.rows import norm_rows
from relcp_mpi.bodies.shapes import ELLIPSOID, RING, SPHERE, SPHEROCYLINDER
from relcp_mpi.contact.line_contacts import (N_PAIR_SLOTS, N_WALL_SLOTS, core_parameters, distinct_within_skin,
                                             ring_wall_rows, rod_pair_end_rows, rod_point_rows, rod_wall_cap_rows)
from relcp_mpi.contact.neighbors import (candidate_pairs, pair_distance, screened_candidate_pairs,
                                        wall_candidates)
from relcp_mpi.geometry.contact import pair_snsd_indexed, wall_snsd
from relcp_mpi.geometry.result import ContactGeometry
from relcp_mpi.geometry.support import pair_lower_bound, separation_lower_bound
from relcp_mpi.petsc import get_petsc
from relcp_mpi.solver.lcp import SolverError, solve_lcp
from relcp_mpi.stepper import lcp_debug, wall_pinch
from relcp_mpi.solver.operator import ContactOperator
from relcp_mpi.stepper.integrator import advance


class RecursionDepthError(RuntimeError):
    """The ReLCP recursion hit ``max_depth`` without meeting the overlap tolerance."""


class TrialRangeError(RecursionDepthError):
    """A trial configuration of the recursion rotates some body by more than ``max_trial_rotation`` in one
    step: rows built there would carry lever arms and normals far outside the linearisation's validity, so the
    step is given up at once (and redone with a smaller dt by the driver's halving policy) instead of
    appending such rows and running the solver to ``max_iter`` on a possibly infeasible grown LCP."""


@dataclass
class StepParams:
    dt: float
    overlap_tol: float
    skin: float
    max_depth: int = 50
    model: str = "relcp"           # 'relcp', 'snsd' (no recursion) or 'multisphere' (LCP-MS baseline)
    ms_resolution: int = 8         # proxy spheres per non-spherical body for 'multisphere'
    method: str = "bbpgd"
    tol: float = 1e-4              # LCP min-map tolerance [L]
    max_iter: int = 100000
    options: dict = field(default_factory=dict)   # method options (solver.options, relcp_mpi.solver.registry)
    fallback: str = ""             # method tried when `method` fails on an LCP (solver.fallback; "" = none)
    recheck_neighbors: bool = True
    line_contacts: bool = True     # level-0 end-point / end-cap rows for rods (contact.line_contacts)
    max_trial_rotation: float = 0.0  # [rad] give a step up when a trial rotates a body more (0 = off)
    row_rotation_limit: float = 0.0  # [rad] appended rows are linearised where no body turned more (0 = off)
    row_depth_limit: float = 0.0   # [L] pairs overlapping deeper at a trial get rows from along the step (0 = off)
    carry_rows: bool = False       # level 0 re-samples the previous step's appended rod-rod rows (contact.carry_rows)
    gap_margin: float = 0.0        # [L] the LCP asks every row for a predicted gap >= gap_margin (contact.gap_margin)
    pinch_repairs: int = 0         # wall pinches repaired in place per step (contact.pinch_repairs, _repair_pinch)
    drop_axial_torque: bool = False  # rows exert no torque about a rod's / ring's axis (contact.drop_axial_torque)
    geometry_tol: float = 1e-12
    debug: object = None           # lcp_debug.LcpDebug: LCP dumps and certificate checks (None = off)


@dataclass
class StepInput:
    """Everything one step needs; arrays cover the combined [owned, ghost] bodies (m = n_owned + ghosts)."""
    comm: object
    n_owned: int
    gid: np.ndarray          # (m,)
    row: np.ndarray          # (m,) global block row of each body in D
    row_starts: np.ndarray   # (P+1,)
    kind: np.ndarray         # (m,)
    shape: np.ndarray        # (m, 3)
    bound: np.ndarray        # (m,) bounding radii
    x0: np.ndarray           # (m, 3) start configuration (ghost positions image-shifted)
    q0: np.ndarray           # (m, 4)
    blocks: np.ndarray       # (n_owned, 6, 6) mobility at the start configuration
    U_ext: np.ndarray        # (n_owned, 6) unconstrained velocity M F_ext + U_imposed
    wall_points: np.ndarray  # (W, 3)
    wall_normals: np.ndarray  # (W, 3)
    refresh: object          # callable(x_owned, q_owned) -> (x_ghost, q_ghost), collective
    warm_keys: np.ndarray = None     # (c_prev,) structured (gid_i, gid_j, sub) keys of the previous step's rows
    warm_values: np.ndarray = None   # (c_prev, 4): multiplier and a geometry hint (the pair's latest normal,
                                     # NaN if none) used to warm-start level 0 (see StepResult.warm_table);
                                     # (c_prev, 6) with contact.carry_rows: + the rows' core parameters s_i, s_j
    image_velocity: np.ndarray = None  # (m, 3) velocity of each local copy relative to its body (Lees-Edwards
                                       # images of a shear flow; see _image_gap_rate), None = all zero


@dataclass
class StepResult:
    x: np.ndarray            # (n_owned, 3) committed positions
    q: np.ndarray            # (n_owned, 4)
    U: np.ndarray            # (n_owned, 6) velocity of the step
    F: np.ndarray            # (n_owned, 6) total constraint force/torque on each owned body
    table: ConstraintTable
    gamma: np.ndarray        # (c,) local multipliers [F]
    diagnostics: dict = field(default_factory=dict)
    hint: np.ndarray = None  # (c,) x 3: each row's pair normal at the committed configuration when it was
                             # evaluated there (else the row's own normal); the next step's geometry hint
    carry: np.ndarray = None  # (c, 2) core parameters (s_i, s_j) [L] of the rows the next step re-samples at
                              # level 0 (contact.carry_rows; NaN = not carried), None when the option is off

    def warm_table(self):
        """(keys (c,), values (c, 4)) for the next step: multiplier and geometry hint per row; with
        contact.carry_rows (c, 6): + the core parameters of the rows to carry (NaN for the others)."""
        h = self.hint if self.hint is not None else self.table.normal
        cols = [self.gamma, h] if self.carry is None else [self.gamma, h, self.carry]
        width = 4 if self.carry is None else 6
        return self.table.keys(), np.column_stack(cols) if len(self.gamma) else np.zeros((0, width))


class StepWorkspace:
    """Persistent PETSc objects (operator, vectors) reused across recursion levels and steps."""

    def __init__(self, comm):
        self.comm = comm
        self.D = None
        self.op = None

    def release_D(self):
        """Destroy the last step's D (its CSR arrays: 9.4 MiB on the dense 8,000-rod bed) before the next step:
        its first assembly replaces it anyway, and held through the migration, the neighbour search and the
        level-0 geometry it sat under their temporaries.  The operator drops what it built from D (on several ranks
        the one-pass product's reordered rows) but keeps its shell and work Vecs (freeing those too between steps
        raised the peak, docs/BENCHMARKS.md)."""
        if self.op is not None:
            self.op.release()
        if self.D is not None:
            self.D.destroy()
            self.D = None

    def free(self):
        if self.op is not None:
            self.op.destroy()
            self.op = None
        if self.D is not None:
            self.D.destroy()
            self.D = None


FALLBACK_MIN_ITER = 200


def _solve(A, gap_v, gv, prm):
    """Solve the level's LCP with the deck's method; if that fails and ``prm.fallback`` names another method,
    solve it again with that one from the same initial guess (the failed iterate is dropped).  Collective (every
    rank sees the same failure).  Returns ``(result, None)``, or ``(fallback result, iterations of the failed
    solve)``; raises SolverError naming both methods when both fail."""
    fallback = prm.fallback if prm.fallback and prm.fallback != prm.method else None
    x0 = gv.getArray().copy() if fallback else None      # the start of the fallback (only kept when there is one)
    try:
        return solve_lcp(A, gap_v, gv, method=prm.method, tol=prm.tol, max_iter=prm.max_iter, raise_on_fail=True,
                         **prm.options), None
    except SolverError as first:
        if fallback is None:
            raise
        gv.getArray()[:] = x0
        try:
            # at least FALLBACK_MIN_ITER iterations: a max_iter sized for a first-order method must not starve an
            # interior-point fallback (ipm caps itself at max_newton)
            return solve_lcp(A, gap_v, gv, method=fallback, tol=prm.tol,
                             max_iter=max(prm.max_iter, FALLBACK_MIN_ITER), raise_on_fail=True), first.iterations
        except SolverError as second:
            raise SolverError(first.method, first.iterations, first.residual, first.tol, first.history,
                              reason=f"{first.reason}; the fallback '{second.method}' failed too "
                                     f"({second.reason}, residual {second.residual:.3e})",
                              result=first.result) from second


# pairs per call of a batched geometry kernel: their temporaries take 0.4-0.9 kB per pair for rods and ~2.4 kB for
# ellipsoid pairs (the support-function screen and Newton iteration), and the screening of an 8,000-rod bed sees
# ~200k candidate pairs (70 MiB at once); the kernels work per pair, so chunking changes no result, only the step's
# peak memory (docs/BENCHMARKS.md, "Memory"); 8,192 pairs per call cost no measurable time against 16,384
KERNEL_CHUNK = 8192


def _chunks(n):
    """Slices of at most KERNEL_CHUNK pairs covering range(n) (one empty slice when n == 0)."""
    return [slice(k, k + KERNEL_CHUNK) for k in range(0, n, KERNEL_CHUNK)] or [slice(0, 0)]


def _pair_geometry(inp, X, Q, ia, ib, tol, hint=None, R=None):
    """Geometry of the pairs (ia, ib) at the configuration (X, Q), KERNEL_CHUNK pairs per kernel call; ``R`` =
    rotation matrices of Q (per body) or None."""
    return ContactGeometry.concatenate([
        pair_snsd_indexed(inp.kind, inp.shape, X, Q, ia[s], ib[s], tol=tol, check=True,
                          hint=None if hint is None else hint[s], R=R)
        for s in _chunks(len(ia))])


class _HintCache:
    """Latest normal of every body pair evaluated during a step, keyed by local indices (ia, ib).

    Geometry hints only speed up the iterative (ellipsoid-ellipsoid) kernel; the kernel certifies its answer
    either way, so a hint never changes the meaning of a result."""

    def __init__(self, base):
        self.base = max(int(base), 1)
        self.keys = np.zeros(0, np.int64)
        self.normals = np.zeros((0, 3))

    def get(self, ia, ib):
        """(m, 3) latest normals of pairs (ia, ib), NaN rows for pairs never evaluated this step."""
        out = np.full((len(ia), 3), np.nan)
        if len(self.keys) == 0:
            return out
        k = ia.astype(np.int64) * self.base + ib
        # the keys are sorted and unique (np.unique in update): a search, no sorted copy (lookup_keys would sort)
        pos = np.minimum(np.searchsorted(self.keys, k), len(self.keys) - 1)
        hit = self.keys[pos] == k
        out[hit] = self.normals[pos[hit]]
        return out

    def update(self, ia, ib, normals):
        if len(ia) == 0:
            return
        new = ia.astype(np.int64) * self.base + ib
        if len(self.keys):
            # the trial checks evaluate pairs of the level-0 candidates, which are all cached: overwrite in
            # place instead of re-sorting the whole cache (a pair listed twice in one batch has the same normal
            # both times: same configuration, same hint)
            pos = np.minimum(np.searchsorted(self.keys, new), len(self.keys) - 1)
            if np.array_equal(self.keys[pos], new):
                self.normals[pos] = normals
                return
        k = np.concatenate([new, self.keys])
        u, first = np.unique(k, return_index=True)      # new values first: they win
        del k
        # the normals of the kept entries gathered from the new and the old ones directly, without concatenating
        # both first (the trial checks' update was the step's peak: ~100k normals of an 8,000-rod bed)
        old = first >= len(ia)
        nn = np.empty((len(u), 3))
        nn[~old] = normals[first[~old]]
        nn[old] = self.normals[first[old] - len(ia)]
        self.keys, self.normals = u, nn


def _screen(inp, X, Q, ia, ib, hint, threshold, R=None):
    """Mask of the pairs that may be closer than ``threshold`` (certified support-function lower bound)."""
    if len(ia) == 0:
        return np.zeros(0, bool)
    parts = []
    for s in _chunks(len(ia)):          # KERNEL_CHUNK pairs at a time (peak memory)
        a, b, h = ia[s], ib[s], None if hint is None else hint[s]
        if R is None:
            parts.append(separation_lower_bound(inp.kind[a], inp.shape[a], X[a], Q[a], inp.kind[b], inp.shape[b],
                                                X[b], Q[b], hint=h))
        else:
            parts.append(pair_lower_bound(inp.kind, inp.shape, X, R, a, b, hint=h))
    return np.concatenate(parts) <= threshold


def _any_ellipsoid_pair(inp, ia, ib):
    return bool(np.any((inp.kind[ia] == ELLIPSOID) & (inp.kind[ib] == ELLIPSOID)))


def _level0_hint(inp, ia, ib):
    """Geometry hints for the level-0 pairs from the warm-start table (rows with sub = 0), or None."""
    if inp.warm_keys is None or len(ia) == 0 or not _any_ellipsoid_pair(inp, ia, ib):
        return None
    keys = np.empty(len(ia), dtype=inp.warm_keys.dtype)
    keys["gid_i"], keys["gid_j"], keys["sub"] = inp.gid[ia], inp.gid[ib], 0
    return match_keys(keys, inp.warm_keys, inp.warm_values[:, 1:4], default=np.nan)


def _wall_geometry(inp, X, Q, wb, ww, R=None):
    return wall_snsd(inp.kind[wb], inp.shape[wb], X[wb], Q[wb], inp.wall_points[ww], inp.wall_normals[ww],
                     R=None if R is None else R[wb])


def _own_pairs(inp, ia, ib):
    """Keep the pairs this rank owns: both owned, or owned-ghost with the owned body's gid lower."""
    n = inp.n_owned
    both = (ia < n) & (ib < n)
    g = inp.gid
    a_own = (ia < n) & (ib >= n) & (g[ia] < g[ib])
    b_own = (ib < n) & (ia >= n) & (g[ib] < g[ia])
    keep = both | a_own | b_own
    ia, ib = ia[keep], ib[keep]
    # orient: i = lower gid
    swap = g[ia] > g[ib]
    return np.where(swap, ib, ia), np.where(swap, ia, ib)


def _candidates(inp, X, skin, R=None, screen=None):
    """This rank's candidate pairs (ia, ib) (lower gid first) and wall candidates (wb, ww) at X, and whether the
    pairs are already screened: with rotation matrices ``R`` and a ``screen`` threshold, a set of spheres and
    spherocylinders searched by the compiled cell list gets the support-function screen of :func:`_screen`
    (``<= screen``) in the search's own pass (same pairs, same order: no arrays of the ~6x more bounding-sphere
    candidates of rods)."""
    pairs = None
    if R is not None and screen is not None and len(inp.kind) and \
            np.all((inp.kind == SPHERE) | (inp.kind == SPHEROCYLINDER)):
        half = np.where(inp.kind == SPHEROCYLINDER, 0.5 * inp.shape[:, 1], 0.0)
        pairs = screened_candidate_pairs(X, inp.bound, skin, inp.n_owned,
                                         (inp.gid, R[:, :, 2].T, inp.shape[:, 0], half, screen))
    if pairs is None:
        ia, ib = candidate_pairs(X, inp.bound, skin, n_owned=inp.n_owned)
        ia, ib = _own_pairs(inp, ia, ib)
    else:
        ia, ib = pairs
    wb, ww = wall_candidates(X[:inp.n_owned], inp.bound[:inp.n_owned], skin, inp.wall_points, inp.wall_normals)
    return ia, ib, wb, ww, pairs is not None


def _rows(inp, geo, ia, ib, X, subs, gap_free):
    """Columns dict for ConstraintTable.append from a ContactGeometry."""
    wall = ib < 0
    xi = X[ia]
    xj = np.where(wall[:, None], geo.p_j, X[np.where(wall, 0, ib)])
    return dict(ia=ia, ib=ib, gid_i=inp.gid[ia],
                gid_j=np.where(wall, -1 - np.maximum(-ib - 1, 0), inp.gid[np.where(wall, 0, ib)]),
                sub=subs, normal=geo.normal, r_i=geo.p_i - xi, r_j=geo.p_j - xj, gap_free=gap_free, sep0=geo.sep)


def _bodyvec(PETSc, D, arr):
    v = D.createVecLeft()
    v.getArray()[:] = arr.ravel()
    return v


class _NullTimer:
    def stage(self, name):
        import contextlib
        return contextlib.nullcontext()

    def start(self, name):
        pass

    def stop(self, name):
        pass


def relcp_step(inp: StepInput, prm: StepParams, workspace: StepWorkspace, timer=None) -> StepResult:
    """One collective ReLCP step (see module docstring).  ``timer`` is an optional StageTimer."""
    PETSc = get_petsc()
    T = timer if timer is not None else _NullTimer()
    comm = inp.comm
    n = inp.n_owned
    dt = prm.dt
    X0, Q0 = inp.x0, inp.q0
    carry = prm.carry_rows and prm.model == "relcp"
    axial = np.full((0, 2), np.nan)          # (c, 2) core parameters of the table's rows (carry only)

    # ---- level 0: candidate pairs and one SNSD row each, at the start configuration ------------------
    snsd = prm.model != "multisphere"
    with T.stage("neighbors"):
        R0 = quaternion.to_matrix(Q0) if snsd else None         # once per body, not per pair
        ia, ib, wb, ww, screened = _candidates(inp, X0, prm.skin, R0, prm.skin if snsd else None)
    table = ConstraintTable()
    cache = _HintCache(len(inp.gid))
    with T.stage("geometry"):
        if not snsd:
            _multisphere_level0(inp, prm, X0, Q0, ia, ib, wb, ww, table)
        else:
            ia, ib, wb, ww, axial = _snsd_level0(inp, prm, X0, Q0, R0, ia, ib, wb, ww, table, cache, carry,
                                                 screened)
        del R0
    spin_axis = _symmetry_axes(inp) if prm.drop_axial_torque else None
    # candidate set for the overlap checks: body pairs as (ia, ib), walls as (wb, ww)
    cand_pairs = np.stack([ia, ib], axis=1)
    cand_walls = np.stack([wb, ww], axis=1)
    del ia, ib, wb, ww

    gamma = match_keys(table.keys(), inp.warm_keys, inp.warm_values[:, 0]) if inp.warm_keys is not None \
        else np.zeros(len(table))
    depth = 0
    iters_total = 0
    fallbacks = 0
    n_backed = 0                     # rows taken along the step's path (contact.row_depth_limit), this rank
    max_trial_rot = 0.0
    pinch_rows = 0                   # wall rows searched for a pinch certificate (all ranks, all levels)
    history = []
    rank, size = comm.rank, comm.size
    U_ext = inp.U_ext
    scaled_blocks = dt * inp.blocks
    level_start = 0
    repairs = 0                      # wall pinches repaired in place in this step (contact.pinch_repairs)
    pinched = {}                     # gid -> repairs of that body: its rotation limit is halved per repair
    trace = lcp_debug.tracing(prm.debug)
    traced = dict(bodies=np.zeros(0, np.int64), contacts=np.zeros(0, np.int64),  # offenders so far (trace)
                  limited=0, backed=0,   # this rank's rows of the last appended level from Y / along the path
                  repairs=0)
    prev_cols = 0

    while True:
        # ---- global column numbering and D --------------------------------------------------------
        c = len(table)
        T.start("assembly")
        counts = comm.allgather(c)
        col_offset = int(sum(counts[:rank]))
        n_cols = int(sum(counts))
        if workspace.op is not None:
            workspace.op.release()                 # the previous D's products: not held through this assembly
        workspace.D = assemble_D(table, inp.row, inp.row_starts, comm, col_offset, n_cols, D=workspace.D,
                                 axis=spin_axis)
        D = workspace.D
        Uext_v = _bodyvec(PETSc, D, U_ext)
        tmp = D.createVecRight()
        D.multTranspose(Uext_v, tmp)               # D^T U_ext
        DtU = tmp.getArray().copy()
        if depth == 0:                             # collective branch: same on every rank
            table.gap_free[:] = table.sep0 + dt * DtU - prm.gap_margin
            if inp.image_velocity is not None:
                table.gap_free[:] += dt * _image_gap_rate(inp, table)
        else:
            # appended rows: q = sep_trial - dt D^T (U_trial - U_ext) (rows linearised at a rotation-limited
            # configuration carry their prediction of sep_trial in sep0: _limited_rotation)
            new = slice(level_start, c)
            Ut_v = _bodyvec(PETSc, D, U_trial)
            D.multTranspose(Ut_v, tmp)
            table.gap_free[new] = table.sep0[new] - dt * (tmp.getArray()[new] - DtU[new]) - prm.gap_margin
            Ut_v.destroy()
        # ---- solve --------------------------------------------------------------------------------------
        if workspace.op is None:
            workspace.op = ContactOperator(D, scaled_blocks)
        else:
            workspace.op.update(D, scaled_blocks)
        A = workspace.op
        gap_v = D.createVecRight()       # the LCP constant q (PETSc Vec; q alone names quaternions here)
        gap_v.getArray()[:] = table.gap_free
        gv = D.createVecRight()
        gv.getArray()[:] = np.maximum(gamma, 0.0)
        T.stop("assembly")
        repair = None
        with T.stage("solve"):
            try:
                if depth > 0:                    # appended rows: an exactly certified pinch fails at once
                    pinch_rows += _wall_pinch(inp, prm, table, DtU, comm, depth)
                t_solve = time.perf_counter()
                res, extra = _solve(A, gap_v, gv, prm)
                t_solve = time.perf_counter() - t_solve
            except SolverError as exc:           # every rank: dump / explain the failed LCP, then fail
                # (an early pinch failure names its certificate: no search over the gathered LCP), unless the pinch
                # is repaired in place (the certificate's rows are the same list on every rank)
                repair = exc.rows if (isinstance(exc, wall_pinch.InfeasibleRowsError)
                                      and repairs < prm.pinch_repairs) else None
                if repair is None:
                    lcp_debug.on_failure(prm.debug, exc, comm, D, inp, dt, table, gv.getArray(), depth,
                                         check=not isinstance(exc, wall_pinch.InfeasibleRowsError))
                # destroy the level's Vecs here, together on every rank: left to the garbage collector (the
                # traceback holds this frame), parallel PETSc objects are freed at rank-dependent moments, and a
                # step policy that goes on after the failure (dt halving, strict retries) then ended in a
                # PetscFinalize that waited forever for the other ranks' garbage cleanup (petsc4py 3.18)
                for v in (Uext_v, tmp, gap_v, gv):
                    v.destroy()
                if repair is None:
                    raise
        if repair is not None:
            repairs += 1
            traced["repairs"] = repairs
            keep = _repair_pinch(table, repair, pinched)
            level_start -= int(np.count_nonzero(~keep[:level_start]))
            table.keep(keep)
            gamma = gamma[keep]
            if carry:
                axial = axial[keep]
            continue
        if extra is not None:
            fallbacks += 1
            iters_total += extra
        iters_total += res.iterations
        history.append(res.residual)
        gamma = gv.getArray().copy()
        lcp_debug.on_solve(prm.debug, comm, D, inp, dt, table, gamma, depth, res)
        # ---- trial configuration ----------------------------------------------------------------------
        Fv = D.createVecLeft()
        D.mult(gv, Fv)
        F = Fv.getArray().reshape(n, 6).copy()
        U_trial = U_ext + np.einsum("nij,nj->ni", inp.blocks, F)
        for v in (Uext_v, tmp, gap_v, gv, Fv):
            v.destroy()
        xt, qt = advance(X0[:n], Q0[:n], U_trial, dt, None if spin_axis is None else spin_axis[:n])
        xg, qg = inp.refresh(xt, qt)
        T.start("recursion")
        Xt = np.concatenate([xt, xg]) if len(xg) else xt
        Qt = np.concatenate([qt, qg]) if len(qg) else qt
        # ---- smooth-surface check at the trial configuration ------------------------------------------
        # surface points of a body move by at most dt (|v| + |omega| r_bound) in the step; if no two bodies can
        # close a gap of the skin together, no pair outside the candidate set can overlap at the trial
        # configuration and the neighbour search need not be repeated (one scalar allreduce)
        reach = dt * (norm_rows(U_trial[:, :3]) + norm_rows(U_trial[:, 3:]) * inp.bound[:n])
        # rotation of the bodies of the LCP's rows from the start to the trial configuration (the range over which
        # the rows' lever arms and normals are extrapolated); bodies without rows may rotate freely
        rot = 2.0 * np.arccos(np.minimum(np.abs(np.einsum("ij,ij->i", Q0, Qt)), 1.0))
        rows_rot = np.maximum(rot[table.ia], np.where(table.ib >= 0, rot[np.maximum(table.ib, 0)], 0.0))
        # largest rotation angle |omega| dt of any owned body (decides collectively whether rows need the
        # rotation-limited linearisation configuration)
        ang = dt * norm_rows(U_trial[:, 3:])
        ext = np.array([reach.max(initial=0.0), rows_rot.max(initial=0.0), ang.max(initial=0.0)])
        if inp.image_velocity is not None:       # images drift relative to their bodies (Lees-Edwards)
            ext[0] += dt * np.linalg.norm(inp.image_velocity, axis=1).max(initial=0.0)
        comm.Allreduce(_MPI().IN_PLACE, ext, op=_MPI().MAX)
        max_reach, max_rot, max_ang = float(ext[0]), float(ext[1]), float(ext[2])
        max_trial_rot = max(max_trial_rot, float(max_rot))
        if prm.max_trial_rotation > 0 and max_rot > prm.max_trial_rotation:      # same decision on every rank
            T.stop("recursion")
            raise TrialRangeError(
                f"ReLCP trial configuration at recursion level {depth} rotates a body by "
                f"{np.degrees(max_rot):.1f} deg in one step (> contact.max_trial_rotation "
                f"{np.degrees(prm.max_trial_rotation):.1f} deg): outside the linearisation's validity")
        if prm.recheck_neighbors and 2.0 * max_reach > prm.skin:
            na, nb, nwb, nww, _ = _candidates(inp, Xt, prm.skin)
            cand_pairs = _union_pairs(cand_pairs, na, nb, len(inp.gid))
            cand_walls = _union_pairs(cand_walls, nwb, nww, max(len(inp.wall_points), 1))
        # only pairs whose bounding spheres intersect can overlap (sep >= |dx| - r_i - r_j): skip the rest
        pa, pb = cand_pairs[:, 0], cand_pairs[:, 1]
        lb = pair_distance(Xt, pa, pb) - inp.bound[pa] - inp.bound[pb]
        pa, pb = pa[lb < 0], pb[lb < 0]
        cw = cand_walls
        if len(cw):
            lbw = np.einsum("ij,ij->i", Xt[cw[:, 0]] - inp.wall_points[cw[:, 1]], inp.wall_normals[cw[:, 1]]) \
                - inp.bound[cw[:, 0]]
            cw = cw[lbw < 0]
        hint = cache.get(pa, pb)
        Rt = quaternion.to_matrix(Qt)
        # pairs certified non-overlapping by a support-function bound cannot need a row (nor raise the overlap)
        maybe = _screen(inp, Xt, Qt, pa, pb, hint, 0.0, Rt)
        pa, pb, hint = pa[maybe], pb[maybe], hint[maybe]
        tgeo = _pair_geometry(inp, Xt, Qt, pa, pb, prm.geometry_tol, hint=hint, R=Rt)
        cache.update(pa, pb, tgeo.normal)
        twgeo = _wall_geometry(inp, Xt, Qt, cw[:, 0], cw[:, 1], Rt)
        min_sep_local = min(tgeo.sep.min(initial=np.inf), twgeo.sep.min(initial=np.inf))
        bad_p = tgeo.sep < -prm.overlap_tol
        bad_w = twgeo.sep < -prm.overlap_tol
        nbad = comm.allreduce(int(bad_p.sum() + bad_w.sum()))
        min_sep = comm.allreduce(float(min_sep_local), op=_MPI().MIN)
        T.stop("recursion")
        if trace:
            _trace(prm, comm, inp, depth, n_cols, prev_cols, res, extra, t_solve, pa[bad_p], pb[bad_p],
                   cw[bad_w], rot, max_rot, max_ang, min_sep, traced, table, gamma)
            prev_cols = n_cols
        grow = nbad > 0 and prm.model == "relcp"
        if grow:
            if depth + 1 >= prm.max_depth:
                raise RecursionDepthError(
                    f"ReLCP recursion reached max_depth={prm.max_depth} with {nbad} pair(s) still overlapping "
                    f"by more than overlap_tol={prm.overlap_tol:g} (deepest {-min_sep:.3e}); reduce dt or raise "
                    f"contact.max_depth")
            depth += 1
            level_start = len(table)
            sel, wsel, Ra = tgeo.take(bad_p), twgeo.take(bad_w), None
            # same decision on every rank (collective; ``pinched`` is: the repairs' certificates are global)
            if prm.row_rotation_limit > 0.0 and (max_ang > prm.row_rotation_limit or pinched):
                sel, wsel, Ra = _limited_rotation(inp, prm, U_trial, ang, Xt, Qt, pa[bad_p], pb[bad_p],
                                                  cw[bad_w], sel, wsel, _body_limits(inp, prm, pinched),
                                                  None if spin_axis is None else spin_axis[:n])
            backed = None
            if prm.row_depth_limit > 0.0:                          # local: no collective
                sel, backed = _backed_off_rows(inp, prm, Xt, Qt, pa[bad_p], pb[bad_p], tgeo.sep[bad_p], sel)
                n_backed += 0 if backed is None else int(backed.sum())
            if trace:
                traced["limited"] = int(Ra[2].sum()) if Ra is not None else 0
                traced["backed"] = 0 if backed is None else int(backed.sum())
            axial = _append_level(inp, table, depth, sel, pa[bad_p], pb[bad_p], wsel, cw[bad_w], Xt, Rt,
                                  axial if carry else None, R_alt=Ra, not_carried=backed)
            del sel, wsel, Ra, backed
            gamma = np.concatenate([gamma, np.zeros(len(table) - level_start)])
        # the trial check's arrays (geometry of every checked pair, hints, rotations) are recomputed at the next
        # level: release them before its assembly and solve, or before the step's end, instead of holding them
        # through either (peak memory)
        del tgeo, twgeo, hint, maybe, pa, pb, bad_p, bad_w, lb, cw, Rt, Xt, Qt, reach, rot, rows_rot, ang
        if not grow:
            break

    n_global, n_active, n_backed = comm.allreduce(np.array([len(table), int(np.count_nonzero(gamma > 0)), n_backed]))
    diag = dict(constraints=int(n_global), active=int(n_active), depth=int(depth), iterations=int(iters_total),
                max_overlap=float(max(0.0, -min_sep)) if np.isfinite(min_sep) else 0.0,
                residual=float(max(history) if history else 0.0), trial_rotation=float(np.degrees(max_trial_rot)))
    if fallbacks:            # only then: the diagnostics of runs that never fall back keep their layout
        diag["fallback_solves"] = fallbacks
    if prm.row_depth_limit > 0.0:
        diag["backed_off_rows"] = int(n_backed)
    if pinch_rows:           # only then, like fallback_solves
        diag["pinch_rows_checked"] = int(pinch_rows)
    if repairs:
        diag["pinch_repairs"] = int(repairs)
    # next step's geometry hints: the latest normal of each body-pair row's pair (evaluated at the committed
    # configuration when the pair was in the last trial check); wall rows keep their own normal
    hint = table.normal.copy()
    body = np.flatnonzero(table.ib >= 0)
    h = cache.get(table.ia[body], table.ib[body])
    ok = np.all(np.isfinite(h), axis=1)
    hint[body[ok]] = h[ok]
    carried = None
    if carry:
        # carried on: the rows appended in this step and the carried rows that ended up active
        carried = np.where(((table.level >= 1) | (gamma > 0))[:, None], axial, np.nan)
        diag["carried_rows"] = int(comm.allreduce(int(np.count_nonzero(table.level[table.sub >= N_PAIR_SLOTS]
                                                                        == 0))))
    return StepResult(x=xt, q=qt, U=U_trial, F=F, table=table, gamma=gamma, diagnostics=diag, hint=hint,
                      carry=carried)


def _trace(prm, comm, inp, depth, n_cols, prev_cols, res, extra, t_solve, bad_a, bad_b, bad_cw, rot, max_rot,
           max_ang, min_sep, seen, table, gamma):
    """Collective (debug.trace_levels only): one JSON record of recursion level ``depth``.

    ``bad_a``/``bad_b`` local body indices of the pairs offending at the level's trial configuration,
    ``bad_cw`` (k, 2) the offending (body, wall) contacts, ``rot`` (m,) trial rotation of every local body
    [rad]; ``seen`` (updated): 'bodies' (gids) and 'contacts' (pair codes), sorted int64 arrays of what offended
    at earlier levels of the step, and 'limited' / 'backed', this rank's pair rows of the level linearised at
    the rotation-limited configuration / along the step's path (set where they are appended), 'repairs' the
    step's wall pinches repaired in place so far (contact.pinch_repairs).

    A record: rows of the level's LCP and how many it appended (of those, rotation-limited and backed-off pair
    rows), iterations / residual / wall time of its solve, the offending pairs, walls and bodies at its trial
    and how many of those bodies and contacts offended before, the deepest overlap (min_sep), the largest trial
    rotation of a body with rows and of any body, and the largest among the offending bodies [deg]; from the
    level's solution ``gamma`` (len(table),) [impulse, F T]: the largest multiplier of all rows, of the wall rows
    and of the rows the level appended, the number of active rows (gamma > 0), and the min-map residual at the
    solve's start (the warm start; with a fallback solve, the fallback's start).  A level whose new rows nearly
    contradict earlier ones (rows of one body at orientations far apart, against two walls) shows as
    multipliers far above the earlier levels'."""
    gid = inp.gid.astype(np.int64)
    ga, gb, gw = gid[bad_a], gid[bad_b], gid[bad_cw[:, 0]]
    idx = np.unique(np.concatenate([bad_a, bad_b, bad_cw[:, 0]]).astype(np.int64))
    # contact codes: body pairs (lo, hi) and walls (gid, -1 - wall) in one int64 each (gids < 2^31)
    codes = np.concatenate([(np.minimum(ga, gb) << 32) + np.maximum(ga, gb),
                            (gw << 32) + (2 ** 32 - 1 - bad_cw[:, 1].astype(np.int64))])
    counts = comm.allreduce(np.array([len(bad_a), len(bad_cw), seen["limited"], seen["backed"],
                                      np.count_nonzero(gamma > 0)], np.int64))
    g_loc = np.array([gamma.max(initial=0.0), gamma[table.ib < 0].max(initial=0.0),
                      gamma[table.level == depth].max(initial=0.0)])
    g_max = np.empty_like(g_loc)
    comm.Allreduce(g_loc, g_max, op=_MPI().MAX)
    bad_rot = comm.allreduce(float(rot[idx].max(initial=0.0)), op=_MPI().MAX)
    gids = np.unique(np.concatenate(comm.allgather(gid[idx])))
    codes = np.unique(np.concatenate(comm.allgather(codes)))
    repeat_b = int(np.isin(gids, seen["bodies"]).sum())
    repeat_c = int(np.isin(codes, seen["contacts"]).sum())
    seen["bodies"] = np.union1d(seen["bodies"], gids)
    seen["contacts"] = np.union1d(seen["contacts"], codes)
    lcp_debug.trace_level(prm.debug, comm, dict(
        level=int(depth), rows=int(n_cols), appended=int(n_cols - prev_cols), appended_limited=int(counts[2]),
        appended_backed=int(counts[3]),
        iterations=int(res.iterations + (extra or 0)), residual=float(res.residual), solve_s=round(t_solve, 4),
        bad_pairs=int(counts[0]), bad_walls=int(counts[1]), bad_bodies=int(len(gids)), repeat_bodies=repeat_b,
        repeat_contacts=repeat_c, min_sep=float(min_sep) if np.isfinite(min_sep) else None,
        rows_rot_deg=float(np.degrees(max_rot)), max_turn_deg=float(np.degrees(max_ang)),
        bad_rot_deg=float(np.degrees(bad_rot)), pinch_repairs=int(seen["repairs"]),
        warm_residual=float(res.history[0]) if len(res.history) else None, active=int(counts[4]),
        gamma_max=float(g_max[0]), gamma_max_wall=float(g_max[1]), gamma_max_level=float(g_max[2])))


def _wall_pinch(inp, prm, table, DtU, comm, depth):
    """Collective: raise :class:`wall_pinch.InfeasibleRowsError` on every rank when some rank's wall rows pinch a
    body (an exactly verified infeasibility certificate, stepper/wall_pinch.py); ``DtU`` (c,) = D^T U_ext of the
    local rows (their zero-velocity gaps are ``gap_free - dt DtU``).  Returns the number of wall rows checked on
    all ranks (0 when no appended wall row predicted a gap below -overlap_tol at zero velocity)."""
    w = np.flatnonzero(table.ib < 0)
    found = None
    checked = 0
    if len(w):
        c = table.gap_free[w] - prm.dt * DtU[w]
        cand = wall_pinch.pinch_candidates(table.ia[w], table.level[w], c, prm.overlap_tol)
        if cand.any():
            w = w[cand]
            checked = len(w)
            found = wall_pinch.check(table.ia[w], table.normal[w], table.r_i[w], table.gap_free[w], inp.blocks,
                                     prm.dt)
    tally = np.array([int(found is not None), checked], np.int64)
    comm.Allreduce(_MPI().IN_PLACE, tally, op=_MPI().SUM)
    if not tally[0]:
        return int(tally[1])
    rows = []
    if found is not None:
        k = w[found[0]]
        rows = [(int(table.gid_i[i]), int(-1 - table.gid_j[i]), int(table.sub[i]), int(table.level[i]),
                 float(table.gap_free[i])) for i in k]
    every = [r for part in comm.allgather(rows) for r in part]
    bodies = sorted({r[0] for r in every})
    listed = "; ".join(f"body {g} wall {wl} (sub {sb}, level {lv}, q {q:.3g})" for g, wl, sb, lv, q in every[:12])
    raise wall_pinch.InfeasibleRowsError(
        f"grown LCP at recursion level {depth} is infeasible: {len(every)} wall row(s) of "
        f"{len(bodies)} bod{'y' if len(bodies) == 1 else 'ies'} (gid {', '.join(map(str, bodies[:6]))}) pinch "
        f"it between the walls with zero net force and torque and a negative total gap (Farkas certificate, "
        f"verified exactly; rows appended at a far-rotated trial configuration): {listed}", prm.tol, rows)


def _repair_pinch(table, rows, pinched):
    """A wall pinch repaired in place (contact.pinch_repairs): the keep-mask (c,) of the local ``table`` without
    the appended wall rows (level >= 1) of the bodies of the certificate ``rows`` (the list of
    :class:`wall_pinch.InfeasibleRowsError`, the same on every rank: (gid, wall, sub, level, q) each); each such
    body's repair count in ``pinched`` (gid -> count) goes up by one, which halves the rotation limit of its later
    appended rows (:func:`_body_limits`).

    Why this removes the pinch: a certificate of wall rows of one body needs rows that disagree about the body's
    orientation.  Rows linearised at one orientation of the body have the same lever arms at the same cap, and a
    bottom and a top row there add up to the slab's clearance (>= 0) whatever the velocity: no negative total
    gap.  The pinching rows are the appended ones, taken at far-turned trials; without them the level's LCP is the
    previous level's plus the other new rows, and the body's rows appended from then on are linearised at
    orientations turned at most half as far (repeated, the limit halves again, towards the start orientation of
    its level-0 rows).  The step's guarantee is unchanged: every trial is still checked for overlaps."""
    bodies = np.unique(np.array([r[0] for r in rows], np.int64))
    for g in bodies.tolist():
        pinched[g] = pinched.get(g, 0) + 1
    drop = (table.ib < 0) & (table.level >= 1) & np.isin(table.gid_i, bodies)
    return ~drop


def _symmetry_axes(inp):
    """(m, 3) unit symmetry axis at the start of the step of every local spherocylinder and ring (body z), zero
    for other bodies: the rows' torques along it are dropped (contact.drop_axial_torque).

    Why: a frictionless contact force on a surface of revolution acts along the surface normal, which lies in a
    plane through the axis, so it has no moment about the axis; the level-0 rows (taken at the start) agree.  A
    row appended at a trial configuration where the body has turned carries a lever arm and normal of the turned
    body, whose torque has a component along the start axis, so the LCP could meet that row by spinning the body
    about its start axis: with the spin the finite rotation exp(omega dt) moves the axis on a cone instead of the
    great circle the other rows predict, and the spin, which no true contact force produces, sets the rotation
    limit of the body's next rows (|omega| dt).  Spheres need nothing (their rows' torques vanish); ellipsoids
    have no symmetry axis in general."""
    axis = np.zeros((len(inp.kind), 3))
    rev = (inp.kind == SPHEROCYLINDER) | (inp.kind == RING)
    if np.any(rev):
        axis[rev] = quaternion.to_matrix(inp.q0[rev])[:, :, 2]
    return axis


def _body_limits(inp, prm, pinched):
    """Rotation limit [rad] of each owned body's appended rows: ``prm.row_rotation_limit`` (a float) when no body
    was repaired, else (n_owned,) with the limit halved once per repair of the body (``pinched``: gid -> count)."""
    if not pinched:
        return prm.row_rotation_limit
    gids = np.fromiter(pinched.keys(), np.int64, len(pinched))
    counts = np.fromiter(pinched.values(), np.int64, len(pinched))
    order = np.argsort(gids)
    gids, counts = gids[order], counts[order]
    own = inp.gid[:inp.n_owned].astype(np.int64)
    pos = np.minimum(np.searchsorted(gids, own), len(gids) - 1)
    c = np.where(gids[pos] == own, counts[pos], 0)
    return prm.row_rotation_limit * 0.5 ** c


def _limited_rotation(inp, prm, U_trial, ang, Xt, Qt, pa, pb, cw, sel, wsel, limits=None, axis=None):
    """Rows of a recursion level linearised where no body has turned more than ``prm.row_rotation_limit``
    (collective: every rank calls it when any rank's trial turns a body by more).

    A row appended at a trial configuration carries that configuration's normal and lever arms, extrapolated
    back to the start of the step; a trial that turns a body by tens of degrees puts both far from what the
    body does at the solution.  Each owned body's angular velocity is scaled by s_i = min(1, limit /
    (|omega_i| dt)) (translation kept), which reaches a configuration Y (positions equal to the trial's) where
    no body has turned more than the limit, and the offending pairs and walls are evaluated there.  A row taken
    at Y is kept only if its own linearisation still predicts the overlap found at the trial (predicted
    separation at the trial, sep(Y) + n . (d_i x r_i - d_j x r_j) with d the rotation vector from Y to the
    trial, below -overlap_tol): it then cuts the last solution off as the trial row would, so every level
    still excludes the previous solution (the recursion's progress); otherwise the pair keeps its trial row.
    A kept row stores that prediction as its separation (sep0), so the level's constant q = sep0 - dt D^T
    (U_trial - U_ext) is the exact linearisation about Y.

    ``U_trial`` (n_owned, 6), ``ang`` (n_owned,) its rotation angles [rad], ``Xt`` (m, 3), ``Qt`` (m, 4) the
    trial configuration; ``pa, pb`` local indices of the offending pairs, ``cw`` (k, 2) offending (body, wall)
    candidates, ``sel``/``wsel`` their trial geometry; ``limits`` (n_owned,) per-body limits replacing
    ``prm.row_rotation_limit`` (:func:`_body_limits`), or None; ``axis`` (n_owned, 3) the owned bodies' symmetry
    axes of the trial update (:func:`_symmetry_axes`, contact.drop_axial_torque), or None.  Returns (pair
    geometry, wall geometry, R_alt) where R_alt = (rotation matrices at Y (m, 3, 3), mask of pair rows taken at
    Y, mask of those rows where Y turns a body of the pair less than the trial does)."""
    n = inp.n_owned
    lim = prm.row_rotation_limit if limits is None else limits       # float, or (n_owned,) (pinch repairs)
    U_lin = U_trial.copy()
    U_lin[:, 3:] *= (lim / np.maximum(ang, lim))[:, None]
    _, ql = advance(inp.x0[:n], inp.q0[:n], U_lin, prm.dt, axis)
    _, qg = inp.refresh(Xt[:n], ql)          # ghost orientations at Y (positions are the trial's)
    Ql = np.concatenate([ql, qg]) if len(qg) else ql
    Rl = quaternion.to_matrix(Ql)
    d = quaternion.rotation_vector_between(Ql, Qt)          # rotation vectors Y -> trial
    geo = _pair_geometry(inp, Xt, Ql, pa, pb, prm.geometry_tol, hint=sel.normal, R=Rl)
    wgeo = _wall_geometry(inp, Xt, Ql, cw[:, 0], cw[:, 1], Rl)
    # each row's prediction of the trial separation from its linearisation about Y
    pred = geo.sep + np.einsum("ij,ij->i", geo.normal, np.cross(d[pa], geo.p_i - Xt[pa])
                               - np.cross(d[pb], geo.p_j - Xt[pb]))
    wb = cw[:, 0]
    wpred = wgeo.sep + np.einsum("ij,ij->i", wgeo.normal, np.cross(d[wb], wgeo.p_i - Xt[wb]))
    use, wuse = pred < -prm.overlap_tol, wpred < -prm.overlap_tol
    geo.sep, wgeo.sep = pred, wpred
    # (an unscaled body's Y is its trial orientation; d of equal quaternions is a rounding residue ~1e-16)
    cut = (norm_rows(d[pa]) > 1e-12) | (norm_rows(d[pb]) > 1e-12)
    return geo.where(use, sel), wgeo.where(wuse, wsel), (Rl, use, use & cut)


def _backed_off_rows(inp, prm, Xt, Qt, pa, pb, tsep, sel, steps=8):
    """Rows of the offending pairs that overlap by more than ``prm.row_depth_limit`` at the trial, taken where the
    step's path brings the pair to about half that depth (local: no collective).

    At a deep trial overlap (rods crossing: a fast-turning rod swept through a neighbour that was beyond the skin
    at the start) the pair's shared normal says little about how the pair can separate: between two walls it
    can point along the wall normal, a row that asks the two rods to clear each other vertically, which the walls
    forbid (measured: the 16k colony's step 851, multipliers of 5e6-8e6 on such a pinch).  The start-to-trial
    path of each body is x(t) = x0 + t (xt - x0), q(t) = exp(t phi) q0 with phi the rotation vector from q0 to qt
    (for an owned body the trial's own constant-omega path); per pair, ``steps`` bisections find the largest t
    (on their grid) where the pair overlaps by less than half the limit, configuration Z.  The pair's row is
    taken at Z and kept if its linearisation still predicts the trial's overlap, sep(Z) + n . (dp_i - dp_j) <
    -overlap_tol with dp = (1 - t)(xt - x0) + (1 - t) phi x r(Z) the motion of its witness point from Z to the
    trial (as in _limited_rotation: then it cuts the last solution off, and the level makes progress); the row
    stores that prediction as sep0 and its lever arms at Z.

    ``pa, pb`` (k,) local indices of the offending pairs, ``tsep`` (k,) their trial separations, ``sel`` their
    rows' geometry so far (trial or rotation-limited).  Returns (geometry, mask of the rows replaced or None)."""
    deep = np.flatnonzero(tsep < -prm.row_depth_limit)
    if len(deep) == 0:
        return sel, None
    k = len(deep)
    body = np.concatenate([pa[deep], pb[deep]])           # pair p's bodies are entries p and k + p
    x0, q0 = inp.x0[body], inp.q0[body]
    dx = Xt[body] - x0
    phi = quaternion.rotation_vector_between(q0, Qt[body])
    kind, shape = inp.kind[body], inp.shape[body]
    ia, ib = np.arange(k), np.arange(k, 2 * k)

    def geometry(t):
        tt = np.concatenate([t, t])[:, None]
        X = x0 + tt * dx
        Q = quaternion.normalize(quaternion.multiply(quaternion.from_rotation_vector(tt * phi), q0))
        return X, pair_snsd_indexed(kind, shape, X, Q, ia, ib, tol=prm.geometry_tol, check=True)

    lo, hi = np.zeros(k), np.ones(k)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        too_deep = geometry(mid)[1].sep < -0.5 * prm.row_depth_limit
        hi = np.where(too_deep, mid, hi)
        lo = np.where(too_deep, lo, mid)
    X, g = geometry(lo)
    r_i, r_j = g.p_i - X[ia], g.p_j - X[ib]
    rest = (1.0 - lo)[:, None]
    dp_i = rest * (dx[ia] + np.cross(phi[ia], r_i))
    dp_j = rest * (dx[ib] + np.cross(phi[ib], r_j))
    pred = g.sep + np.einsum("ij,ij->i", g.normal, dp_i - dp_j)
    use = pred < -prm.overlap_tol
    # the rows store lever arms (witness point - body centre); the table builds them from positions Xt
    g.sep, g.p_i, g.p_j = pred, r_i + Xt[pa[deep]], r_j + Xt[pb[deep]]
    if not np.any(use):
        return sel, None
    mask = np.zeros(len(pa), bool)
    mask[deep[use]] = True
    src = np.zeros(len(pa), np.int64)               # row of g for each offending pair (used where mask)
    src[deep] = np.arange(k)
    return g.take(src).where(mask, sel), mask


def _append_level(inp, table, depth, sel, pa, pb, wsel, cw, Xt, Rt, axial, R_alt=None, not_carried=None):
    """Append the rows of recursion level ``depth``: one per offending pair (pa, pb) with its geometry ``sel``
    and per offending wall candidate ``cw`` (k, 2: body, wall) with ``wsel``, taken at the trial configuration
    (positions Xt, rotation matrices Rt).  With contact.carry_rows ``axial`` (the core parameters of the table's
    rows, (c, 2)) is returned extended by the new rows' (wall rows: none, see _carried_rows); None stays None.
    ``R_alt`` = (rotation matrices, mask of the pair rows taken there) when some rows were linearised at a
    rotation-limited configuration (_limited_rotation); ``not_carried`` (mask of the pair rows, or None) marks rows
    taken along the step's path (_backed_off_rows), whose material points are not carried to the next step."""
    sub_counts = _next_sub(table, inp.gid[pa], inp.gid[pb], first=N_PAIR_SLOTS)
    table.append(**_rows(inp, sel, pa, pb, Xt, sub_counts, np.zeros(len(pa))), level=np.full(len(pa), depth))
    wb, ww = cw[:, 0], cw[:, 1]
    sub_w = _next_sub(table, inp.gid[wb], -1 - ww, first=N_WALL_SLOTS)
    table.append(**_rows(inp, wsel, wb, -1 - ww, Xt, sub_w, np.zeros(len(wb))), level=np.full(len(wb), depth))
    if axial is None:
        return None
    new = np.stack([core_parameters(inp.kind, inp.shape, Xt, Rt, pa, sel.p_i, sel.normal, 1.0),
                    core_parameters(inp.kind, inp.shape, Xt, Rt, pb, sel.p_j, sel.normal, -1.0)], axis=1)
    if R_alt is not None and np.any(R_alt[1]):
        Ry, use = R_alt[:2]
        new[use] = np.stack([core_parameters(inp.kind, inp.shape, Xt, Ry, pa[use], sel.p_i[use], sel.normal[use], 1.0),
                             core_parameters(inp.kind, inp.shape, Xt, Ry, pb[use], sel.p_j[use], sel.normal[use],
                                             -1.0)], axis=1)
    if not_carried is not None:
        new[not_carried] = np.nan
    return np.concatenate([axial, new, np.full((len(wb), 2), np.nan)])


def _snsd_level0(inp, prm, X0, Q0, R0, ia, ib, wb, ww, table, cache, carry, screened=False):
    """Level-0 rows of the SNSD models at the start configuration (X0, Q0): one row per candidate pair (ia, ib)
    and wall candidate (wb, ww) whose smooth surfaces are within the skin, plus the line-contact and carried rows
    (relcp).  Appends to ``table``, records the pairs' normals in ``cache``; returns the pairs and walls kept
    (ia, ib, wb, ww) and the core parameters ``axial`` (len(table), 2) of the carried rows (contact.carry_rows,
    else (0, 2)).  A function of its own so that the level's geometry (~80 bytes per pair kept) is released
    before the assembly and the solves instead of being held through the whole step (peak memory)."""
    # pairs certified farther apart than the skin (support-function bound) need no kernel and no row
    # (line of centres first, unless the search did it (``screened``); then the previous normals, looked up
    # only for the survivors).  R0: rotation matrices of Q0 (per body)
    if not screened:
        close = _screen(inp, X0, Q0, ia, ib, None, prm.skin, R0)
        ia, ib = ia[close], ib[close]
    hint0 = _level0_hint(inp, ia, ib)
    if hint0 is not None:
        close = _screen(inp, X0, Q0, ia, ib, hint0, prm.skin, R0)
        ia, ib, hint0 = ia[close], ib[close], hint0[close]
    geo = _pair_geometry(inp, X0, Q0, ia, ib, prm.geometry_tol, hint=hint0, R=R0)
    cache.update(ia, ib, geo.normal)
    wgeo = _wall_geometry(inp, X0, Q0, wb, ww, R0)
    # rows only for pairs whose smooth surfaces are within the skin (bounding-sphere candidates that are
    # farther apart cannot touch within the step; the trial check would catch them if they did)
    near = geo.sep <= prm.skin
    wnear = wgeo.sep <= prm.skin
    ia, ib, geo = ia[near], ib[near], geo.take(near)
    wb, ww, wgeo = wb[wnear], ww[wnear], wgeo.take(wnear)
    table.append(**_rows(inp, geo, ia, ib, X0, np.zeros(len(ia), np.int64), np.zeros(len(ia))))
    if prm.line_contacts and prm.model == "relcp":
        _line_contact_level0(inp, prm, X0, Q0, ia, ib, geo, wb, ww, wgeo, table, R0)
    else:
        table.append(**_rows(inp, wgeo, wb, -1 - ww, X0, np.zeros(len(wb), np.int64), np.zeros(len(wb))))
    axial = _carried_rows(inp, prm, X0, R0, ia, ib, geo, table) if carry else np.full((0, 2), np.nan)
    return ia, ib, wb, ww, axial


def _multisphere_level0(inp, prm, X, Q, ia, ib, wb, ww, table):
    """LCP-MS rows: one per close proxy-sphere pair (sub = sphere-pair id), one per proxy sphere near a wall."""
    from relcp_mpi.contact.multisphere import multisphere_rows, multisphere_wall_rows
    r = multisphere_rows(inp.kind, inp.shape, X, Q, ia, ib, prm.ms_resolution, prm.skin)
    pa, pb = ia[r["pair"]], ib[r["pair"]]
    table.append(**_rows(inp, r["geo"], pa, pb, X, np.asarray(r["sub"], np.int64), np.zeros(len(pa))))
    w = multisphere_wall_rows(inp.kind, inp.shape, X, Q, wb, ww, inp.wall_points, inp.wall_normals,
                              prm.ms_resolution, prm.skin)
    bw, iw = wb[w["pair"]], ww[w["pair"]]
    table.append(**_rows(inp, w["geo"], bw, -1 - iw, X, np.asarray(w["sub"], np.int64), np.zeros(len(bw))))


def _line_contact_level0(inp, prm, X, Q, ia, ib, geo, wb, ww, wgeo, table, R=None):
    """Level-0 rows of line contacts (:mod:`relcp_mpi.contact.line_contacts`): end-point rows of rod pairs
    next to their SNSD rows (already in ``table``), the wall rows of rods as one row per end cap (the SNSD wall
    row of a rod is one of its caps), and three more centre-circle rows of rings next to their SNSD wall row;
    other bodies keep their SNSD wall row."""
    pair, sub, g = rod_pair_end_rows(inp.kind, inp.shape, X, Q, ia, ib, geo, prm.skin, R=R)
    table.append(**_rows(inp, g, ia[pair], ib[pair], X, sub, np.zeros(len(pair))))
    cand, wsub, wg = rod_wall_cap_rows(inp.kind, inp.shape, X, Q, wb, ww, inp.wall_points, inp.wall_normals,
                                       prm.skin, R=R)
    other = np.ones(len(wb), bool)
    other[cand] = False
    table.append(**_rows(inp, wgeo.take(other), wb[other], -1 - ww[other], X,
                         np.zeros(int(other.sum()), np.int64), np.zeros(int(other.sum()))))
    table.append(**_rows(inp, wg, wb[cand], -1 - ww[cand], X, wsub, np.zeros(len(cand))))
    cand, wsub, wg = ring_wall_rows(inp.kind, inp.shape, X, Q, wb, ww, inp.wall_points, inp.wall_normals, prm.skin)
    table.append(**_rows(inp, wg, wb[cand], -1 - ww[cand], X, wsub, np.zeros(len(cand))))


def _carried_rows(inp, prm, X, R, ia, ib, geo, table):
    """Level-0 rows re-sampling the material points of the previous step's appended rod-rod rows
    (contact.carry_rows): for every warm-start row with core parameters (s_i, s_j) whose pair is among the
    level-0 pairs (ia, ib) with SNSD geometry ``geo``, a point-against-core row
    (:func:`relcp_mpi.contact.line_contacts.rod_point_rows`) at the start configuration, a necessary condition
    of nonpenetration.  The row keeps the previous row's key (gid_i, gid_j, sub >= N_PAIR_SLOTS), so it is
    warm-started with that row's multiplier, and rows appended later in the step take larger subs.  Rows
    beyond the skin and rows that coincide with the pair's SNSD row are dropped.

    Wall rows are not carried: the wall distance of a core point is linear in its axial parameter, so a row at an
    interior point of a rod is a convex combination (gap and D column) of the two level-0 end-cap rows and cannot
    change the LCP's feasible set; ring and ellipsoid rows are not carried either (point contacts or strictly
    convex).  Returns the (len(table), 2) core parameters of the table's rows (NaN except the carried rows)."""
    wv = inp.warm_values
    if inp.warm_keys is None or wv is None or wv.shape[1] < 6 or len(ia) == 0:
        return np.full((len(table), 2), np.nan)
    take = np.flatnonzero(np.isfinite(wv[:, 4]) | np.isfinite(wv[:, 5]))
    # rows in key order: the warm table's order depends on its route (a restart's table arrives in another order),
    # and the column order of D must not, for a restart to continue bit for bit
    wk = inp.warm_keys[take]
    take = take[np.lexsort((wk["sub"], wk["gid_j"], wk["gid_i"]))]
    wk = inp.warm_keys[take]
    # the rows' pairs among the level-0 pairs (i = lower gid on both sides; the owner of gid_i owns both)
    pk = np.empty(len(ia), dtype=[("gid_i", np.int64), ("gid_j", np.int64)])
    pk["gid_i"], pk["gid_j"] = inp.gid[ia], inp.gid[ib]
    ck = np.empty(len(wk), dtype=pk.dtype)
    ck["gid_i"], ck["gid_j"] = wk["gid_i"], wk["gid_j"]
    at = lookup_keys(ck, pk)
    hit = at >= 0
    take, at = take[hit], at[hit]
    pair, g = rod_point_rows(inp.kind, inp.shape, X, R, ia[at], ib[at], wv[take, 4], wv[take, 5])
    k = at[pair]
    scale = inp.shape[ia[k], 0] + inp.shape[ib[k], 0] + inp.shape[ia[k], 1] + inp.shape[ib[k], 1]
    keep = distinct_within_skin(g.sep, g.p_i, g.p_j, geo.p_i[k], geo.p_j[k], scale, prm.skin)
    rows, k = pair[keep], k[keep]
    before = len(table)
    table.append(**_rows(inp, g.take(keep), ia[k], ib[k], X, inp.warm_keys["sub"][take[rows]],
                         np.zeros(len(rows))))
    return np.concatenate([np.full((before, 2), np.nan), wv[take[rows], 4:6]])


def _image_gap_rate(inp, table):
    """(c,) rate of change of each row's gap from the images' own motion: n . (v_i - v_j) with v the velocity of
    the local copy relative to its body (``inp.image_velocity``; walls do not move).  D^T U only holds the
    bodies' velocities, so a level-0 row between a body and a Lees--Edwards image adds this to its predicted
    gap; appended rows need nothing (their q is measured at the trial configuration, where images have
    moved)."""
    iv = inp.image_velocity
    vi = iv[table.ia]
    vj = np.where((table.ib >= 0)[:, None], iv[np.maximum(table.ib, 0)], 0.0)
    return np.einsum("ij,ij->i", table.normal, vi - vj)


def _union_pairs(pairs, a, b, base):
    """Sorted union of index pairs (k, 2) with new pairs (a, b), via int64 keys a*base + b."""
    keys = np.concatenate([pairs[:, 0] * base + pairs[:, 1], a * base + b])
    u = np.unique(keys)
    return np.stack([u // base, u % base], axis=1)


def _next_sub(table, gi, gj, first=1):
    """Sub-contact index for new rows of pairs (gi, gj): 1 + the largest existing sub of that pair, and at
    least ``first`` (the numbers below it are the fixed level-0 slots of :mod:`relcp_mpi.contact.line_contacts`,
    so a row appended in one step never takes the warm-start key of a level-0 row of the next step)."""
    if len(gi) == 0:
        return np.zeros(0, np.int64)
    if len(table) == 0:        # no earlier row on this rank (e.g. the pair met from outside the skin)
        return np.full(len(gi), first, np.int64)
    keys = np.empty(len(gi), dtype=[("gid_i", np.int64), ("gid_j", np.int64)])
    keys["gid_i"], keys["gid_j"] = gi, gj
    tk = np.empty(len(table), dtype=[("gid_i", np.int64), ("gid_j", np.int64)])
    tk["gid_i"], tk["gid_j"] = table.gid_i, table.gid_j
    order = np.lexsort((table.sub, tk["gid_j"], tk["gid_i"]))
    tk_s, sub_s = tk[order], table.sub[order]
    pos = np.searchsorted(tk_s, keys, side="right") - 1
    ok = (pos >= 0) & (tk_s[np.maximum(pos, 0)] == keys)
    return np.maximum(np.where(ok, sub_s[np.maximum(pos, 0)] + 1, 0), first).astype(np.int64)


def _MPI():
    from mpi4py import MPI
    return MPI
