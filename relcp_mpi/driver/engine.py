"""One time step of a ReLCP run, applied to a :class:`relcp_mpi.state.RunState` (collective).

:meth:`StepEngine.single_step` (its body :meth:`StepEngine._advance`) is the data flow of a step:

1. rebalance (RCB, when due), grow and divide cells (growth acts at the start of the step, so the step's LCP
   resolves the new overlaps);
2. :meth:`StepEngine.prepare`: migrate bodies (the warm-start rows travel with their body gid_i) to the rank
   owning their centre, order them along a space-filling curve for the step (``parallel.body_order``; id
   order again after it), number the body rows of D (exscan), exchange ghosts;
3. mobility blocks and unconstrained velocity U_ext = M F_ext + U_imposed (+ the Brownian velocity
   sqrt(2 kT / dt) M^{1/2} Z when ``fluid.kT`` > 0, :mod:`relcp_mpi.physics.brownian`; + the imposed background
   flow, deck section ``flow``, :mod:`relcp_mpi.physics.flow`) of owned bodies;
4. the ReLCP step (:func:`relcp_mpi.stepper.relcp.relcp_step`): pairs -> constraints -> solver -> trial update;
5. commit positions, velocities, the warm-start table and the work weights into the state (with a shear flow:
   advance the Lees--Edwards image offset and wrap bodies that crossed the gradient-axis boundary with it).

The engine holds what does not belong to the run state: the deck's constants (box, walls, viscosity, step
parameters), the persistent PETSc workspace, the ghost plan of the current step and the stage timer.
"""
import dataclasses

import numpy as np
from mpi4py import MPI

from relcp_mpi.bodies.shapes import bounding_radius
from relcp_mpi.bodies.store import BodyStore
from relcp_mpi.contact.constraints import lookup_keys
from relcp_mpi.contact.neighbors import candidate_pairs, wall_candidates
from relcp_mpi.geometry.contact import pair_snsd, wall_snsd
from relcp_mpi.io.progress import StageTimer
from relcp_mpi.parallel import decomposition as pdecomp
from relcp_mpi.parallel.exchange import exchange_rows
from relcp_mpi.parallel.ghosts import exchange_ghosts, refresh_ghosts
from relcp_mpi.parallel.migration import migrate
from relcp_mpi.physics.brownian import brownian_velocity
from relcp_mpi.physics.flow import ImposedFlow
from relcp_mpi.physics.growth import GrowthModel, divide, grow
from relcp_mpi.physics.mobility import mobility_blocks
from relcp_mpi.physics.stress import body_stresslets, step_stress_diagnostics
from relcp_mpi.state import box_of, empty_warm
from relcp_mpi.stepper.lcp_debug import LcpDebug
from relcp_mpi.stepper.relcp import StepInput, StepParams, StepWorkspace, relcp_step


# pairs per pair_snsd call in the initial-overlap check (bounds its temporaries: ~2.4 kB per ellipsoid pair, so
# ~20 MiB; 16,384 pairs set the peak of the 10k-ellipsoid run at 40 MiB of kernel temporaries)
INITIAL_CHECK_CHUNK = 8192


class InitialOverlapError(ValueError):
    """Bodies of the initial configuration overlap (``problems``: one line each; raised on every rank)."""

    def __init__(self, problems):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


def _local_index(gid, query):
    """(m,) position in ``gid`` (n,) (distinct ids) of each id of ``query`` (m,), -1 where absent.  A direct table
    over the ids' range when it is not much wider than n (one scatter and one gather), else the sort and search of
    :func:`relcp_mpi.contact.constraints.lookup_keys`."""
    out = np.full(len(query), -1, np.int64)
    if len(gid) == 0 or len(query) == 0:
        return out
    q = np.ascontiguousarray(query, dtype=np.int64)
    lo, hi = int(gid.min()), int(gid.max())
    if hi - lo < 8 * len(gid) + 1024:
        table = np.full(hi - lo + 1, -1, np.int64)
        table[gid - lo] = np.arange(len(gid))
        inside = (q >= lo) & (q <= hi)
        out[inside] = table[q[inside] - lo]
        return out
    return lookup_keys(q, np.asarray(gid, dtype=np.int64))


class StepEngine:
    """Advances a RunState by one step of a given dt (collective over ``comm``); ``deck`` is the typed deck
    (:class:`relcp_mpi.config.sections.Deck`)."""

    def __init__(self, deck, comm, state, timer=None):
        self.comm = comm
        self.timer = timer if timer is not None else StageTimer()
        self.box = box_of(deck)
        self.wall_points = np.array([w.point for w in deck.walls], float).reshape(-1, 3)
        nrm = np.array([w.normal for w in deck.walls], float).reshape(-1, 3)
        self.wall_normals = nrm / np.maximum(np.linalg.norm(nrm, axis=1, keepdims=True), 1e-300)
        self.mu = float(deck.fluid.viscosity)
        self.kT = float(deck.fluid.kT)
        c, s, par = deck.contact, deck.solver, deck.parallel
        self.initial_overlap_tol = c.initial_overlap_tol
        self.rcb = par.decomposition == "rcb"
        self.rebalance_every = par.rebalance_every
        self.imbalance_threshold = par.imbalance_threshold
        self.spatial_order = par.body_order == "spatial"
        self.seed = deck.seed
        self.params = StepParams(dt=state.dt, overlap_tol=c.overlap_tol, skin=state.skin, max_depth=c.max_depth,
                                 model=c.model, ms_resolution=c.ms_resolution, method=s.method, tol=s.tol,
                                 max_iter=s.max_iter, options=dict(s.options),
                                 fallback="" if s.fallback == "none" else s.fallback,
                                 recheck_neighbors=c.recheck_neighbors, line_contacts=c.line_contacts,
                                 # the early trial-range check only makes sense when the step can be redone
                                 max_trial_rotation=c.max_trial_rotation if deck.time.max_halvings else 0.0,
                                 row_rotation_limit=c.row_rotation_limit, row_depth_limit=c.row_depth_limit,
                                 carry_rows=c.carry_rows, gap_margin=c.gap_margin,
                                 pinch_repairs=c.pinch_repairs, drop_axial_torque=c.drop_axial_torque,
                                 debug=LcpDebug.from_deck(deck.debug))
        self.growth_model = GrowthModel.from_deck(deck.growth)
        self.workspace = StepWorkspace(comm)
        self.has_growth = bool(comm.allreduce(bool(np.any(state.bodies.growth != 0)), op=MPI.LOR))
        self.ghosts = None
        self.ghost_shift = None
        self.contact_force = None       # (n, 6) of the last step, in that step's body order (_step_gid)
        self._last_rows = None          # (table, gamma, n_owned, row, row_starts) of the last step: stresslets
        self._step_gid = None           # (n,) ids of the last step's owned bodies in its order (forces, stresslets)
        self._ids_checked = False       # the exact migration id check ran once (later steps: check="fast")
        self._body_dest = None          # owner rank of each body before migration (_route_warm_with_bodies)
        self.flow = ImposedFlow.from_deck(deck)     # None without a flow section

    def free(self):
        """Release the PETSc workspace (it is re-created by the next step)."""
        self.workspace.free()

    def body_stresslet(self, gid):
        """(len(gid), 3, 3) stresslet [F L] in the last step of the owned bodies with ids ``gid`` (zeros before the
        first step and for bodies the step did not hold; :func:`relcp_mpi.physics.stress.body_stresslets`).
        Collective."""
        if self._last_rows is None:
            return np.zeros((len(gid), 3, 3))
        table, gamma, n, row, row_starts = self._last_rows
        return self._by_gid(body_stresslets(table, gamma, n, row, row_starts, self.comm), gid)

    def body_contact_force(self, gid):
        """(len(gid), 6) constraint force and torque [F, F L] in the last step on the owned bodies with ids
        ``gid`` (zeros for bodies the step did not hold), or None before the first step."""
        return None if self.contact_force is None else self._by_gid(self.contact_force, gid)

    def _by_gid(self, values, gid):
        """Rows of ``values`` (aligned with the last step's owned bodies, ``_step_gid``) for the ids ``gid``."""
        src = self._step_gid
        if len(src) == len(gid) and np.array_equal(src, gid):
            return values
        order = np.argsort(src)
        pos = np.minimum(np.searchsorted(src[order], gid), max(len(src) - 1, 0))
        hit = (src[order][pos] == gid) if len(src) else np.zeros(len(gid), bool)
        out = np.zeros((len(gid),) + values.shape[1:], dtype=values.dtype)
        out[hit] = values[order[pos[hit]]]
        return out

    def id_ordered(self, st):
        """``st.bodies`` in id order (and ``st.work`` with them); returns them.  A step leaves the owned bodies in
        its own order (with ``parallel.body_order: spatial`` a Morton order), which is as good a state as any:
        the next step's migration orders them from positions and ids alone.  Whoever shows bodies to the user
        (``Simulation.bodies``, writers) or needs a listing-independent input (the RCB rebalance) calls this;
        sorting only then saves the stepper a permutation of every body field per step."""
        g = st.bodies.gid
        if len(g) > 1 and not np.all(g[1:] > g[:-1]):
            perm = np.argsort(g, kind="stable")
            st.bodies = st.bodies.take(perm)
            if st.work is not None and len(st.work) == len(perm):
                st.work = st.work[perm]
        return st.bodies

    # ------------------------------------------------------------------------------------------------
    @staticmethod
    def _work_weights(st):
        """(n,) RCB work weight of each owned body (bodies + rows owned by the last step; 1 each when unknown)."""
        return st.work if st.work is not None and len(st.work) == len(st.bodies) else np.ones(len(st.bodies))

    def _rebalance_if_needed(self, st):
        """RCB only: every ``rebalance_every`` steps, rebuild the decomposition if the work imbalance
        (max/mean over ranks of bodies + constraint rows owned) exceeds ``imbalance_threshold``."""
        if not self.rcb or not self.rebalance_every or st.step % self.rebalance_every:
            return
        imb = pdecomp.imbalance(float(self._work_weights(st).sum()), self.comm)
        st.imbalance = float(imb)
        if pdecomp.should_rebalance(st.step, self.rebalance_every, imb, self.imbalance_threshold):
            with self.timer.stage("rebalance"):
                self.id_ordered(st)          # RCB's cuts must not depend on how the bodies are listed
                st.decomp = pdecomp.RCBDecomposition(self.box, self.comm, self.box.wrap(st.bodies.x, st.shear_offset),
                                                     self._work_weights(st))
            st.n_rebalances += 1

    def prepare(self, st):
        """Migrate (with the warm-start rows), number rows, exchange ghosts.  Returns (owned, ghosts)."""
        comm = self.comm
        with self.timer.stage("migrate"):
            self._route_warm_with_bodies(st)
            # with body_order spatial, D's columns and the solver's body vectors follow a Morton curve: bodies near
            # in space near in memory (relcp_mpi.bodies.order); a function of positions and ids only, so restarts
            # agree.  After the step they stay in that order until someone needs id order (id_ordered).
            # the exact id check once (the engine's first migration: every id unique on all ranks), then the
            # exchange-only fingerprint check of migrate's check="fast" (~3 ms per 10k bodies less per step)
            st.bodies = migrate(st.bodies, st.decomp, comm, offset=st.shear_offset,
                                order="spatial" if self.spatial_order else "gid",
                                check="fast" if self._ids_checked else True, dest=self._body_dest)
            self._body_dest = None
            self._ids_checked = True
        b = st.bodies
        n = len(b)
        offset = comm.exscan(n) or 0
        b.row[:] = offset + np.arange(n)
        st.row_starts = np.concatenate([[0], np.cumsum(comm.allgather(n))]).astype(np.int64)
        with self.timer.stage("ghosts"):
            st.decomp.validate_ghost_width(st.ghost_width)
            ghosts, self.ghost_shift = exchange_ghosts(b, st.decomp, comm, st.ghost_width, offset=st.shear_offset)
        self.ghosts = ghosts
        self._decomp = st.decomp
        return b, ghosts

    def _route_warm_with_bodies(self, st):
        """Send warm-start rows to the rank that will own body gid_i after migration (collective).

        Before migration every row's gid_i is an owned body of this rank (the pair owner owns the lower gid),
        so a row goes wherever its body goes and warm starts survive migration."""
        keys, vals = st.warm
        if keys is None:
            keys, vals = empty_warm()
        b = st.bodies
        idx = _local_index(b.gid, keys["gid_i"])        # each row's body on this rank, -1 where it has none
        ok = idx >= 0
        keys, vals, idx = keys[ok], vals[ok], idx[ok]
        # the owner of every body once (a body has ~2 rows); migrate takes the same ranks.  Bodies with non-finite
        # positions keep their rows here: migrate then stops the step collectively, naming them
        fin = np.all(np.isfinite(b.x), axis=1)
        body_dest = np.full(len(b), self.comm.Get_rank(), np.int64)
        if fin.any() and self.comm.Get_size() > 1:          # (one rank owns every position)
            body_dest[fin] = st.decomp.owner(self.box.wrap(b.x[fin], st.shear_offset))
        self._body_dest = body_dest
        dest = body_dest[idx]
        # only the rows of bodies that change rank travel; the others stay in place (before the received ones)
        stay = dest == self.comm.Get_rank()
        go = ~stay
        rows = np.stack([keys["gid_i"][go], keys["gid_j"][go], keys["sub"][go]], axis=1).astype(np.float64)
        # the values' width (4, or 6 with contact.carry_rows) is the same on every rank
        recv = exchange_rows(np.concatenate([rows, vals[go]], axis=1), dest[go], self.comm)
        k = np.empty(len(recv), dtype=keys.dtype)
        k["gid_i"], k["gid_j"], k["sub"] = (np.rint(recv[:, c]).astype(np.int64) for c in range(3))
        st.warm = (np.concatenate([keys[stay], k]), np.concatenate([vals[stay], recv[:, 3:]]))

    def _refresh(self, x_owned, q_owned, bodies, elapsed=0.0):
        """Ghost positions/orientations for trial owned states ``elapsed`` [T] after the step's start
        (collective, reuses the ghost plan; ``elapsed`` moves Lees--Edwards images)."""
        with self.timer.stage("ghosts"):
            trial = BodyStore(gid=bodies.gid, kind=bodies.kind, shape=bodies.shape, x=x_owned, q=q_owned)
            g = refresh_ghosts(trial, self.ghosts, self._decomp, self.comm, elapsed=elapsed)
        return g.x, g.q

    # ------------------------------------------------------------------------------------------------
    def initial_overlaps(self, st):
        """Collective: the problems of the initial configuration (pairs or walls overlapping by more than
        ``contact.initial_overlap_tol``), the same list on every rank (at most 10)."""
        b, g = self.prepare(st)
        X = np.concatenate([b.x, g.x])
        Q = np.concatenate([b.q, g.q])
        K = np.concatenate([b.kind, g.kind])
        S = np.concatenate([b.shape, g.shape])
        G = np.concatenate([b.gid, g.gid])
        r = bounding_radius(K, S)
        ia, ib = candidate_pairs(X, r, 0.0, n_owned=len(b))
        keep = (G[ia] < G[ib]) & (ia < len(b)) | (G[ib] < G[ia]) & (ib < len(b))
        ia, ib = ia[keep], ib[keep]
        tol = self.initial_overlap_tol
        # the kernels' temporaries are ~0.7 kB per pair: evaluate the (unscreened) candidates in chunks so that
        # this one-off check does not set the run's peak memory (150k pairs of an 8,000-rod bed: 110 MiB)
        sep = np.concatenate([np.zeros(0)] + [
            pair_snsd(K[a], S[a], X[a], Q[a], K[b], S[b], X[b], Q[b], check=True).sep
            for a, b in ((ia[k:k + INITIAL_CHECK_CHUNK], ib[k:k + INITIAL_CHECK_CHUNK])
                         for k in range(0, len(ia), INITIAL_CHECK_CHUNK))])
        bad = sep < -tol
        msgs = [f"bodies {int(G[i])} and {int(G[j])} overlap by {-s:.3e} (> initial_overlap_tol {tol:g})"
                for i, j, s in zip(ia[bad][:5], ib[bad][:5], sep[bad][:5])]
        wb, ww = wall_candidates(b.x, r[:len(b)], 0.0, self.wall_points, self.wall_normals)
        wgeo = wall_snsd(b.kind[wb], b.shape[wb], b.x[wb], b.q[wb], self.wall_points[ww], self.wall_normals[ww])
        wbad = wgeo.sep < -tol
        msgs += [f"body {int(b.gid[i])} penetrates wall {int(w)} by {-s:.3e}"
                 for i, w, s in zip(wb[wbad][:5], ww[wbad][:5], wgeo.sep[wbad][:5])]
        self.id_ordered(st)
        return [m for part in self.comm.allgather(msgs) for m in part][:10]

    def single_step(self, st, dt, noise_key=None):
        """One step of ``dt`` [T] (collective): :meth:`_advance`.  A step that fails (the exception propagates)
        leaves the owned bodies as the step found them (after growth, in the step's order), not committed."""
        return self._advance(st, dt, noise_key)

    def _advance(self, st, dt, noise_key=None):
        """One step of ``dt`` [T] (collective): advances ``st`` in place; returns the step's diagnostics
        (constraints, active, depth, iterations, max_overlap, residual, collision stress: pressure and stress_<ij>
        [F/L^2], and imbalance once measured).  ``noise_key`` = (step, level, index): the Brownian noise of
        sub-step ``index`` of 2**level of deck step ``step`` (default: (st.step, 0, 0), a whole step)."""
        comm = self.comm
        self.params.debug.step = st.step + 1           # label of LCP dumps / failure reports
        # the last step's rows (stresslets) index the bodies as they were before this step's migration: release
        # them now rather than carry the whole constraint table through the new step (8.5 MiB on n8000c), and
        # the last D with them (StepWorkspace.release_D)
        self._last_rows = None
        self.workspace.release_D()
        self._rebalance_if_needed(st)
        if self.has_growth:
            with self.timer.stage("growth"):
                grow(st.bodies, dt, self.growth_model, self.seed)
                st.bodies, st.next_gid, ndiv = divide(st.bodies, comm, st.next_gid, self.seed, st.step,
                                                      model=self.growth_model)
                st.n_global += ndiv
                st.update_rmax(comm)
        b, g = self.prepare(st)
        n = len(b)
        K = np.concatenate([b.kind, g.kind])
        S = np.concatenate([b.shape, g.shape])
        with self.timer.stage("mobility"):
            blocks = mobility_blocks(b.kind, b.shape, b.q, self.mu, fixed=b.fixed)
            U_ext = np.einsum("nij,nj->ni", blocks, b.f_ext) + b.u_imp
            if self.kT > 0:                 # thermal noise in the unconstrained velocity (Euler-Maruyama)
                step, level, index = noise_key if noise_key is not None else (st.step, 0, 0)
                U_ext = U_ext + brownian_velocity(b.kind, b.shape, b.q, self.mu, self.kT, dt, self.seed, step,
                                                  b.gid, fixed=b.fixed, level=level, index=index)
            if self.flow is not None:       # the background flow bodies follow without contacts
                U_ext = U_ext + self.flow.body_velocity(b.kind, b.shape, b.x, b.q, fixed=b.fixed)
        inp = StepInput(
            comm=comm, n_owned=n, gid=np.concatenate([b.gid, g.gid]), row=np.concatenate([b.row, g.row]),
            row_starts=st.row_starts, kind=K, shape=S, bound=bounding_radius(K, S),
            x0=np.concatenate([b.x, g.x]), q0=np.concatenate([b.q, g.q]), blocks=blocks, U_ext=U_ext,
            wall_points=self.wall_points, wall_normals=self.wall_normals,
            refresh=lambda x, q: self._refresh(x, q, b, elapsed=dt), warm_keys=st.warm[0], warm_values=st.warm[1],
            image_velocity=self._image_velocity(n))
        prm = dataclasses.replace(self.params, dt=dt, skin=st.skin)
        with self.timer.stage("relcp"):
            res = relcp_step(inp, prm, self.workspace, timer=self.timer)
        b.q[:] = res.q
        if self.box.shear is None:
            b.x[:] = self.box.wrap(res.x)          # committed positions live in the box on periodic axes
            b.u[:] = res.U
        else:                                   # Lees-Edwards: the images slid by rate L_g dt during the step
            st.shear_offset = self._advance_offset(st.shear_offset, dt)
            b.x[:], b.u[:] = self.box.wrap_with_velocity(res.x, res.U, st.shear_offset)
        self.contact_force = res.F          # (n_owned, 6) constraint force/torque of the step [F, F L]
        self._step_gid = b.gid.copy()
        self._last_rows = (res.table, res.gamma, n, inp.row, st.row_starts)
        own = res.table.ia[res.table.ia < len(b)]
        st.work = 1.0 + np.bincount(own, minlength=len(b))
        # collision stress of the step (virial of the constraint forces; one allreduce of 9 numbers), before the
        # new warm-start table is built: while that is built the old one is still held (by inp too)
        stress = step_stress_diagnostics(res.table, res.gamma, inp.x0, self.box.lengths, comm)
        st.warm = res.warm_table()
        st.step += 1
        st.time += dt
        diag = dict(res.diagnostics)
        diag.update(stress)
        if st.imbalance is not None:
            diag["imbalance"] = st.imbalance      # measured at the last rebalance check
        if self.box.shear is not None:
            sh = self.box.shear
            diag["shear_offset"] = float(st.shear_offset)
            if sh.rate != 0.0:     # contact contribution to the shear viscosity [F T / L^2]
                a, g = "xyz"[sh.flow_axis], "xyz"[sh.gradient_axis]
                diag["contact_viscosity"] = 0.5 * (diag[f"stress_{a}{g}"] + diag[f"stress_{g}{a}"]) / sh.rate
        return diag

    # ------------------------------------------------------------------------------------------------
    def _advance_offset(self, offset, dt):
        """Lees--Edwards image offset after ``dt`` [T]: offset + rate L_g dt, mod L_a, in [0, L_a) [L]."""
        sh, L = self.box.shear, self.box.lengths
        La = float(L[sh.flow_axis])
        out = float(np.mod(offset + sh.rate * float(L[sh.gradient_axis]) * dt, La))
        return 0.0 if out >= La else out

    def _image_velocity(self, n_owned):
        """(m, 3) velocity of each local copy relative to its body: 0 for owned bodies and plain images, the
        Lees--Edwards jump n rate L_g along the flow axis for images n cells along the gradient axis; None
        without shear (the stepper adds it to the level-0 rows' predicted gap rate)."""
        sh = self.box.shear
        if sh is None:
            return None
        L = self.box.lengths
        v = np.zeros((n_owned + len(self.ghost_shift), 3))
        v[n_owned:, sh.flow_axis] = np.rint(self.ghost_shift[:, sh.gradient_axis] / L[sh.gradient_axis]) \
            * sh.rate * L[sh.gradient_axis]
        return v
