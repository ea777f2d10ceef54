"""The ReLCP time-stepping driver: deck -> bodies -> pairs -> constraints -> solver -> update -> output.

``Simulation(deck, deck_text, comm).run()`` is what ``relcp-mpi run deck.yaml`` does for ``engine: relcp``.
Each step (collective over all ranks):

1. migrate bodies to the rank owning their centre (optionally rebalance the decomposition);
2. number the body rows of D (exscan), exchange ghosts (bodies within the ghost width of my subdomain,
   periodic images included);
3. mobility blocks and unconstrained velocity U_ext = M F_ext + U_imposed of owned bodies;
4. the ReLCP step (:func:`relcp_mpi.stepper.relcp.relcp_step`);
5. commit, grow spherocylinders, output trajectory frames / checkpoints / progress.
"""
import os
import signal
import time

import numpy as np
from mpi4py import MPI

from relcp_mpi import __version__
from relcp_mpi.bodies.builder import build_bodies
from relcp_mpi.bodies.shapes import bounding_radius
from relcp_mpi.bodies.store import BodyStore
from relcp_mpi.config.deck import DeckError
from relcp_mpi.geometry.contact import pair_snsd, wall_snsd
from relcp_mpi.io.progress import Progress, StageTimer
from relcp_mpi.parallel.box import Box
from relcp_mpi.parallel import decomposition as pdecomp
from relcp_mpi.parallel.ghosts import exchange_ghosts, refresh_ghosts
from relcp_mpi.parallel.migration import alltoallv_rows, migrate
from relcp_mpi.physics.growth import GrowthModel, divide, grow
from relcp_mpi.physics.mobility import mobility_blocks
from relcp_mpi.physics.stress import step_stress_diagnostics
from relcp_mpi.contact.neighbors import candidate_pairs, wall_candidates
from relcp_mpi.stepper.lcp_debug import LcpDebug
from relcp_mpi.stepper.relcp import StepInput, StepParams, StepSolver, relcp_step


EXIT_SIGNAL_CHECKPOINT = 3


class StopRequested(Exception):
    """Raised by :meth:`Simulation.run` after a signal-triggered checkpoint was written."""

    def __init__(self, signum, path):
        super().__init__(f"stopped by signal {signum}; checkpoint written to {path}")
        self.signum = signum
        self.path = path


_SIGNAL_FLAG = {"signum": 0}
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


def _on_signal(signum, frame):
    # only set a flag: the handler may run while MPI/HDF5 calls are in progress on this rank
    _SIGNAL_FLAG["signum"] = signum


def install_signal_handlers():
    """SIGTERM and SIGUSR1 (what SLURM sends before the time limit) request checkpoint-and-exit.

    The request is acted upon at the end of the current step of :meth:`Simulation.run`: all ranks agree
    (one allreduce per step), write a checkpoint and raise :class:`StopRequested`.  Returns the previous
    handlers ({signum: handler}) for :func:`restore_signal_handlers`."""
    old = {}
    for sig in STOP_SIGNALS:
        old[sig] = signal.signal(sig, _on_signal)
    return old


def restore_signal_handlers(old):
    for sig, h in (old or {}).items():
        signal.signal(sig, h if h is not None else signal.SIG_DFL)


def pending_signal():
    """The signal number received on this rank and not yet acted upon (0 if none)."""
    return int(_SIGNAL_FLAG["signum"])


def clear_pending_signal():
    _SIGNAL_FLAG["signum"] = 0


class Simulation:
    """One ReLCP run described by a validated deck (see :mod:`relcp_mpi.config.deck`)."""

    def __init__(self, deck, deck_text="", comm=None, bodies=None, step=0, time0=0.0, warm=None):
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.deck = deck
        self.deck_text = deck_text
        self.timer = StageTimer()
        c = deck["contact"]
        self.dt = float(deck["time"]["dt"])
        t = deck["time"]
        self.n_steps = int(t["steps"]) if t["steps"] is not None else int(round(t["t_end"] / self.dt))
        self.box = Box(deck["box"]["lo"], deck["box"]["hi"], deck["box"]["periodic"])
        W = deck["walls"]
        self.wall_points = np.array([w["point"] for w in W], float).reshape(-1, 3)
        nrm = np.array([w["normal"] for w in W], float).reshape(-1, 3)
        self.wall_normals = nrm / np.maximum(np.linalg.norm(nrm, axis=1, keepdims=True), 1e-300)
        self.mu = float(deck["fluid"]["viscosity"])
        self.step = step
        self.time = time0
        self.warm = warm or (None, None)      # (keys (c,), values (c, 4)): see StepResult.warm_table
        self.diag = {}
        if bodies is None:
            allb = build_bodies(deck)                 # identical on every rank
            self.n_global = len(allb)
            self.next_gid = int(allb.gid.max()) + 1 if len(allb) else 0
            self._make_decomposition(allb.x)
            mine = self.decomp.owner(self.box.wrap(allb.x)) == self.comm.rank
            self.bodies = allb.take(mine)
        else:
            self.bodies = bodies
            self.n_global = self.comm.allreduce(len(bodies))
            self.next_gid = self.comm.allreduce(int(bodies.gid.max()) + 1 if len(bodies) else 0, op=MPI.MAX)
            self._make_decomposition(None)
            self.bodies = migrate(self.bodies, self.decomp, self.comm)
        self._update_widths()
        self._work_per_body = np.ones(len(self.bodies))
        self.n_rebalances = 0
        self.params = StepParams(dt=self.dt, overlap_tol=c["overlap_tol"], skin=self.skin,
                                 max_depth=c["max_depth"], model=c["model"], ms_resolution=c["ms_resolution"],
                                 method=deck["solver"]["method"],
                                 tol=deck["solver"]["tol"], max_iter=deck["solver"]["max_iter"],
                                 recheck_neighbors=c["recheck_neighbors"], line_contacts=c["line_contacts"],
                                 # the early trial-range check only makes sense when the step can be redone
                                 max_trial_rotation=c["max_trial_rotation"] if deck["time"].get("max_halvings")
                                 else 0.0)
        self.solver = StepSolver(self.comm)
        self.params.debug = LcpDebug.from_deck(deck.get("debug"))
        self.growth_model = GrowthModel.from_deck(deck.get("growth"))
        self.has_growth = bool(self.comm.allreduce(bool(np.any(self.bodies.growth != 0)), op=MPI.LOR))

    def _update_widths(self):
        """Largest bounding radius (collective), skin and ghost width = 2 r_max + 2 skin.

        The ghost layer must hold every body that can touch an owned body during the step: centres within
        2 r_max + skin at the start, plus up to one more skin of relative motion inside the step."""
        c = self.deck["contact"]
        self.rmax = self.comm.allreduce(
            float(bounding_radius(self.bodies.kind, self.bodies.shape).max(initial=0.0)), op=MPI.MAX)
        if not hasattr(self, "skin"):
            self.skin = float(c["skin"]) if c["skin"] is not None else 0.25 * self.rmax
        self.ghost_width = 2 * self.rmax + 2 * self.skin

    # ------------------------------------------------------------------------------------------------
    def _make_decomposition(self, x_all):
        par = self.deck["parallel"]
        if par["decomposition"] == "rcb":
            if x_all is not None:
                # every rank holds all initial positions: give each rank a disjoint slice as its "local" set
                n = len(x_all)
                r, P = self.comm.rank, self.comm.size
                sl = slice(n * r // P, n * (r + 1) // P)
                xl = self.box.wrap(x_all[sl])
            else:
                xl = self.box.wrap(self.bodies.x)
            self.decomp = pdecomp.RCBDecomposition(self.box, self.comm, xl, np.ones(len(xl)))
        else:
            self.decomp = pdecomp.CartesianDecomposition(self.box, self.comm)

    def _rebalance_if_needed(self):
        """RCB only: every ``rebalance_every`` steps, rebuild the decomposition if the work imbalance
        (max/mean over ranks of bodies + constraint rows owned) exceeds ``imbalance_threshold``."""
        par = self.deck["parallel"]
        if par["decomposition"] != "rcb" or not par["rebalance_every"] or self.step % par["rebalance_every"]:
            return
        w = self._work_per_body if len(self._work_per_body) == len(self.bodies) else np.ones(len(self.bodies))
        imb = pdecomp.imbalance(float(w.sum()), self.comm)
        self._imbalance = float(imb)
        if pdecomp.should_rebalance(self.step, par["rebalance_every"], imb, par["imbalance_threshold"]):
            with self.timer.stage("rebalance"):
                self.decomp = pdecomp.RCBDecomposition(self.box, self.comm, self.box.wrap(self.bodies.x), w)
            self.n_rebalances += 1

    # ------------------------------------------------------------------------------------------------
    def _prepare(self):
        """Migrate, number rows, exchange ghosts.  Returns the combined arrays for the stepper."""
        comm = self.comm
        with self.timer.stage("migrate"):
            self._route_warm_with_bodies()
            self.bodies = migrate(self.bodies, self.decomp, comm)
        b = self.bodies
        n = len(b)
        offset = comm.exscan(n) or 0
        b.row[:] = offset + np.arange(n)
        self.row_starts = np.concatenate([[0], np.cumsum(comm.allgather(n))]).astype(np.int64)
        with self.timer.stage("ghosts"):
            self.decomp.validate_ghost_width(self.ghost_width)
            ghosts, shift = exchange_ghosts(b, self.decomp, comm, self.ghost_width)
        self.ghosts = ghosts
        self.ghost_shift = shift
        return b, ghosts

    def _route_warm_with_bodies(self):
        """Send warm-start rows to the rank that will own body gid_i after migration (collective).

        Before migration every row's gid_i is an owned body of this rank (the pair owner owns the lower gid),
        so a row goes wherever its body goes and warm starts survive migration."""
        keys, vals = self.warm
        if keys is None:
            keys = np.zeros(0, dtype=[("a", np.int64), ("b", np.int64), ("k", np.int64)])
            vals = np.zeros((0, 4))
        b = self.bodies
        order = np.argsort(b.gid)
        pos = np.searchsorted(b.gid[order], keys["a"])
        ok = (pos < len(b)) & (b.gid[order][np.minimum(pos, max(len(b) - 1, 0))] == keys["a"]) if len(b) else \
            np.zeros(len(keys), bool)
        keys, vals = keys[ok], vals[ok]
        idx = order[pos[ok]]
        dest = self.decomp.owner(self.box.wrap(b.x[idx])) if len(idx) else np.zeros(0, np.int64)
        rows = np.stack([keys["a"], keys["b"], keys["k"]], axis=1).astype(np.float64) if len(keys) else \
            np.zeros((0, 3))
        recv = alltoallv_rows(np.concatenate([rows, vals], axis=1) if len(keys) else np.zeros((0, 7)),
                              dest, self.comm)
        k = np.empty(len(recv), dtype=keys.dtype)
        k["a"], k["b"], k["k"] = (np.rint(recv[:, c]).astype(np.int64) for c in range(3))
        self.warm = (k, recv[:, 3:].copy())

    def _adopt_warm(self, warm_keys, warm_vals):
        """Restart: send every warm-start row to the rank owning its body gid_i (collective).

        The rows arrive in an arbitrary block split (checkpoint reader) and the owner of a gid is only
        known to that owner, so a distributed directory is used (no rank gathers the table): rows and
        (gid, owner) records both go to rank ``gid mod P``, which matches them and forwards each row to
        the owner.  Rows whose body no longer exists are dropped.  The order of the resulting table does
        not matter (the stepper matches warm starts by key)."""
        comm = self.comm
        P, rank = comm.size, comm.rank
        kdt = [("a", np.int64), ("b", np.int64), ("k", np.int64)]
        if warm_keys is None or len(warm_keys) == 0:
            keys, vals = np.zeros(0, dtype=kdt), np.zeros((0, 4))
        else:
            keys, vals = np.asarray(warm_keys), np.asarray(warm_vals, dtype=np.float64)
        # int64 rows (the multiplier and the hint travel as their bit patterns: exact)
        rows = np.zeros((len(keys), 7), dtype=np.int64)
        if len(keys):
            rows[:, 0], rows[:, 1], rows[:, 2] = keys["a"], keys["b"], keys["k"]
            rows[:, 3:] = np.ascontiguousarray(vals, dtype=np.float64).view(np.int64)
        at_dir = alltoallv_rows(rows, np.mod(rows[:, 0], P), comm, dtype=np.int64)
        gid = np.asarray(self.bodies.gid, dtype=np.int64)
        own = alltoallv_rows(np.stack([gid, np.full(len(gid), rank, np.int64)], axis=1),
                             np.mod(gid, P), comm, dtype=np.int64)
        order = np.argsort(own[:, 0], kind="stable")
        og = own[order, 0]
        pos = np.searchsorted(og, at_dir[:, 0])
        pc = np.minimum(pos, max(len(og) - 1, 0))
        hit = (pos < len(og)) & (og[pc] == at_dir[:, 0]) if len(og) else np.zeros(len(at_dir), bool)
        dest = own[order, 1][pc[hit]] if len(og) else np.zeros(0, np.int64)
        got = alltoallv_rows(at_dir[hit], dest, comm, dtype=np.int64)
        k = np.empty(len(got), dtype=kdt)
        k["a"], k["b"], k["k"] = got[:, 0], got[:, 1], got[:, 2]
        self.warm = (k, np.ascontiguousarray(got[:, 3:]).view(np.float64).copy())

    def _refresh(self, x_owned, q_owned):
        """Ghost positions/orientations for trial owned states (collective, reuses the ghost plan)."""
        with self.timer.stage("ghosts"):
            trial = BodyStore(gid=self.bodies.gid, kind=self.bodies.kind, shape=self.bodies.shape,
                              x=x_owned, q=q_owned)
            g = refresh_ghosts(trial, self.ghosts, self.decomp, self.comm)
        return g.x, g.q

    def check_initial_overlap(self):
        """Collective: raise DeckError (on every rank) naming overlapping initial bodies."""
        b, g = self._prepare()
        X = np.concatenate([b.x, g.x])
        Q = np.concatenate([b.q, g.q])
        K = np.concatenate([b.kind, g.kind])
        S = np.concatenate([b.shape, g.shape])
        G = np.concatenate([b.gid, g.gid])
        r = bounding_radius(K, S)
        ia, ib = candidate_pairs(X, r, 0.0, n_owned=len(b))
        keep = (G[ia] < G[ib]) & (ia < len(b)) | (G[ib] < G[ia]) & (ib < len(b))
        ia, ib = ia[keep], ib[keep]
        tol = self.deck["contact"]["initial_overlap_tol"]
        geo = pair_snsd(K[ia], S[ia], X[ia], Q[ia], K[ib], S[ib], X[ib], Q[ib], check=True)
        bad = geo.sep < -tol
        msgs = [f"bodies {int(G[i])} and {int(G[j])} overlap by {-s:.3e} (> initial_overlap_tol {tol:g})"
                for i, j, s in zip(ia[bad][:5], ib[bad][:5], geo.sep[bad][:5])]
        wb, ww = wall_candidates(b.x, r[:len(b)], 0.0, self.wall_points, self.wall_normals)
        wgeo = wall_snsd(b.kind[wb], b.shape[wb], b.x[wb], b.q[wb], self.wall_points[ww], self.wall_normals[ww])
        wbad = wgeo.sep < -tol
        msgs += [f"body {int(b.gid[i])} penetrates wall {int(w)} by {-s:.3e}"
                 for i, w, s in zip(wb[wbad][:5], ww[wbad][:5], wgeo.sep[wbad][:5])]
        allmsgs = [m for part in self.comm.allgather(msgs) for m in part]
        if allmsgs:
            raise DeckError(["initial configuration: " + m for m in allmsgs[:10]])

    # ------------------------------------------------------------------------------------------------
    def step_once(self):
        """One step of the deck's dt (collective); returns the StepResult of the (last) sub-step.

        With ``time.max_halvings = k > 0``, a step whose LCP solve fails (``SolverError``, e.g. an infeasible
        grown LCP) or that reaches the recursion limit (``RecursionDepthError``) -- both global decisions, so
        every rank takes the same branch -- is undone and redone as two steps of dt/2, recursively down to
        dt/2^k; the sub-steps count as one step (``diag['substeps']``).  Without it such a step ends the run."""
        k = int(self.deck["time"].get("max_halvings") or 0)
        if k <= 0:
            return self._single_step(self.dt)
        from relcp_mpi.solver.lcp import SolverError
        from relcp_mpi.stepper.relcp import RecursionDepthError
        step0 = self.step
        diags = []

        def run(dt, level):
            snap = self._snapshot()
            try:
                res = self._single_step(dt)
                diags.append(dict(self.diag))
                return res
            except (SolverError, RecursionDepthError) as exc:
                if level >= k:
                    raise
                if self.comm.rank == 0:
                    print(f"relcp-mpi: step {step0 + 1}: {type(exc).__name__} at dt={dt:g}; redoing it as two "
                          f"steps of dt={dt / 2:g}", flush=True)
                self._restore(snap)
                run(dt / 2, level + 1)
                return run(dt / 2, level + 1)

        res = run(self.dt, 0)
        self.step = step0 + 1
        d = dict(diags[-1])
        d["max_overlap"] = max(x["max_overlap"] for x in diags)
        d["depth"] = max(x["depth"] for x in diags)
        d["iterations"] = sum(x["iterations"] for x in diags)
        d["substeps"] = len(diags)
        self.diag = d
        return res

    def _snapshot(self):
        """What a step changes, so a failed step can be undone (collective-free)."""
        return dict(bodies=self.bodies.copy(), warm=self.warm, next_gid=self.next_gid, n_global=self.n_global,
                    decomp=self.decomp, n_rebalances=self.n_rebalances, work=self._work_per_body,
                    rmax=self.rmax, ghost_width=self.ghost_width, step=self.step, time=self.time,
                    imbalance=getattr(self, "_imbalance", None))

    def _restore(self, snap):
        self.bodies = snap["bodies"].copy()
        self.warm, self.next_gid, self.n_global = snap["warm"], snap["next_gid"], snap["n_global"]
        self.decomp, self.n_rebalances, self._work_per_body = snap["decomp"], snap["n_rebalances"], snap["work"]
        self.rmax, self.ghost_width, self.step, self.time = snap["rmax"], snap["ghost_width"], snap["step"], \
            snap["time"]
        self._imbalance = snap["imbalance"]

    def _single_step(self, dt):
        comm = self.comm
        self.params.dt = dt
        self.params.debug.step = self.step + 1           # label of LCP dumps / failure reports
        self._rebalance_if_needed()
        if self.has_growth:
            # growth and division act at the start of the step, so the step's LCP resolves the new overlaps
            with self.timer.stage("growth"):
                grow(self.bodies, dt, self.growth_model, self.deck["seed"])
                self.bodies, self.next_gid, ndiv = divide(self.bodies, comm, self.next_gid, self.deck["seed"],
                                                          self.step, model=self.growth_model)
                if ndiv:
                    self.n_global += ndiv
                self._update_widths()
        b, g = self._prepare()
        n = len(b)
        K = np.concatenate([b.kind, g.kind])
        S = np.concatenate([b.shape, g.shape])
        with self.timer.stage("mobility"):
            blocks = mobility_blocks(b.kind, b.shape, b.q, self.mu, fixed=b.fixed)
            U_ext = np.einsum("nij,nj->ni", blocks, b.f_ext) + b.u_imp
        inp = StepInput(
            comm=comm, n_owned=n, gid=np.concatenate([b.gid, g.gid]), row=np.concatenate([b.row, g.row]),
            row_starts=self.row_starts, kind=K, shape=S, bound=bounding_radius(K, S),
            x0=np.concatenate([b.x, g.x]), q0=np.concatenate([b.q, g.q]), blocks=blocks, U_ext=U_ext,
            wall_points=self.wall_points, wall_normals=self.wall_normals, refresh=self._refresh,
            warm_keys=self.warm[0], warm_values=self.warm[1])
        with self.timer.stage("relcp"):
            res = relcp_step(inp, self.params, self.solver, timer=self.timer)
        b.x[:] = self.box.wrap(res.x)          # committed positions live in the box on periodic axes
        b.q[:] = res.q
        b.u[:] = res.U
        self.contact_force = res.F          # (n_owned, 6) constraint force/torque of the step [F, F L]
        own = res.table.ia[res.table.ia < len(b)]
        self._work_per_body = 1.0 + np.bincount(own, minlength=len(b))
        self.warm = res.warm_table()
        self.step += 1
        self.time += dt
        self.diag = dict(res.diagnostics)
        # collision stress of the step (virial of the constraint forces; one allreduce of 9 numbers)
        self.diag.update(step_stress_diagnostics(res.table, res.gamma, inp.x0, self.box.lengths, comm))
        if getattr(self, "_imbalance", None) is not None:
            self.diag["imbalance"] = self._imbalance      # measured at the last rebalance check
        return res

    def run(self, progress_stream=None):
        """Run the remaining steps of the deck; returns the diagnostics of the last step.

        Writes trajectory frames every ``output.trajectory_every`` steps (appending after a restart),
        checkpoints every ``output.checkpoint_every`` steps and after the last step (when checkpointing
        is enabled), and -- when any rank received SIGTERM/SIGUSR1 (see :func:`install_signal_handlers`)
        -- a checkpoint at the end of the current step followed by :class:`StopRequested` on every rank."""
        out = self.deck["output"]
        prog = Progress(self.comm, self.n_steps, out["progress_every"], stream=progress_stream)
        t0 = time.perf_counter()
        self.steps_run = 0
        writer = self._open_trajectory()
        try:
            if writer is not None and self.step == 0 and getattr(self, "restarted_from", None) is None:
                with self.timer.stage("output"):
                    writer.write_frame(self.step, self.time, self.bodies.sort_by_gid(), self.diag or {})
            ck = out["checkpoint_every"]
            while self.step < self.n_steps:
                self.step_once()
                self.steps_run += 1
                prog.update(self.step, self.time, self.diag, self.params.overlap_tol,
                            force=self.step == self.n_steps)
                if writer is not None and out["trajectory_every"] and self.step % out["trajectory_every"] == 0:
                    with self.timer.stage("output"):
                        writer.write_frame(self.step, self.time, self.bodies, self.diag)
                # one tiny allreduce per step: did any rank receive SIGTERM/SIGUSR1?  (all ranks agree)
                signum = int(self.comm.allreduce(pending_signal(), op=MPI.MAX))
                if signum or (ck and (self.step % ck == 0 or self.step == self.n_steps)):
                    with self.timer.stage("output"):
                        path = self.write_checkpoint()
                    self.last_checkpoint = path
                    if signum:
                        clear_pending_signal()
                        self.wall_time = time.perf_counter() - t0
                        raise StopRequested(signum, path)
        finally:
            if writer is not None:
                writer.close()
            self.solver.free()
        self.wall_time = time.perf_counter() - t0
        return self.diag

    def _open_trajectory(self):
        """Trajectory writer: a new file for a fresh run; after a restart the existing file is appended
        to, frames after the restart step (written by the interrupted run) being dropped."""
        if not self.deck["output"]["trajectory_every"]:
            return None
        from relcp_mpi.io.writers import open_trajectory_writers     # output.format: hdf5 and/or gsd
        restarted = getattr(self, "restarted_from", None) is not None or self.step > 0
        return open_trajectory_writers(self.deck, self.comm, restart_step=self.step if restarted else None)

    # ------------------------------------------------------------------------------------------------
    @property
    def checkpoint_prefix(self):
        return os.path.join(self.deck["output"]["directory"], f"{self.deck['name']}_ckpt")

    def write_checkpoint(self):
        """Collective atomic checkpoint of the full state; returns its path.

        Holds the bodies, the warm-start table, step, time, dt, the deck (its YAML text, or the
        normalised deck when the simulation was built without text) and what a restart on the same rank
        count needs to continue bit for bit: the ownership of the bodies during the last step (``row_starts``;
        with the bodies' ``row`` it gives each body's rank), the skin, and for RCB the current decomposition
        tree."""
        from relcp_mpi.io.checkpoint import checkpoint_path, write_checkpoint
        if self.comm.rank == 0:
            os.makedirs(self.deck["output"]["directory"], exist_ok=True)
        keys, vals = self.warm
        warm = None
        if keys is not None:
            warm = {"gid_i": keys["a"], "gid_j": keys["b"], "sub": keys["k"], "gamma": vals[:, 0],
                    "hint_x": vals[:, 1], "hint_y": vals[:, 2], "hint_z": vals[:, 3]}
        meta = {"step": int(self.step), "time": float(self.time), "dt": float(self.dt),
                "deck": self.deck_text if self.deck_text else self.deck,
                "seed": int(self.deck["seed"]), "next_gid": int(self.next_gid), "n_steps": int(self.n_steps),
                "decomposition": self.deck["parallel"]["decomposition"], "n_bodies": int(self.n_global),
                "skin": float(self.skin), "n_rebalances": int(getattr(self, "n_rebalances", 0))}
        rs = getattr(self, "row_starts", None)
        if rs is not None and len(rs) == self.comm.size + 1:
            meta["row_starts"] = np.asarray(rs, dtype=np.int64)
        if isinstance(self.decomp, pdecomp.RCBDecomposition):
            meta["rcb"] = self.decomp.to_dict()
        path = checkpoint_path(self.checkpoint_prefix, self.step)
        return write_checkpoint(path, self.comm, self.bodies, meta, warm,
                                keep=self.deck["output"]["keep_checkpoints"])

    @classmethod
    def from_checkpoint(cls, path, deck, deck_text="", comm=None):
        """Continue a run from a checkpoint (any rank count).  ``path`` may be 'latest' (the newest valid
        checkpoint ``<output.directory>/<name>_ckpt_<step>.h5``).

        Raises :class:`relcp_mpi.io.checkpoint.CheckpointError` on every rank (message naming the file and
        the problem) when the file is missing, damaged, or was written for an incompatible deck (different
        bodies, generators, box or walls); nothing is written in that case.  On the rank count that wrote
        the checkpoint the continued run is bitwise identical to an uninterrupted one."""
        from relcp_mpi.io.checkpoint import CheckpointError, check_compatible, latest_checkpoint, read_checkpoint
        comm = comm if comm is not None else MPI.COMM_WORLD
        if path == "latest":
            prefix = os.path.join(deck["output"]["directory"], f"{deck['name']}_ckpt")
            found = latest_checkpoint(prefix, valid_only=True) if comm.rank == 0 else None
            found = comm.bcast(found, root=0)
            if found is None:
                raise CheckpointError(f"no valid checkpoint '{prefix}_<step>.h5' to restart from "
                                      f"(--restart latest)")
            path = found
        path = os.fspath(path)
        bodies, meta, warm = read_checkpoint(path, comm)

        def _normalised_deck(d):
            """A stored deck (YAML text or dict) in normalised form (defaults filled); the raw mapping if it
            does not validate (e.g. written by another version)."""
            import copy

            import yaml

            from relcp_mpi.config.deck import validate
            if isinstance(d, str):
                try:
                    d = yaml.safe_load(d)
                except yaml.YAMLError:
                    return d            # check_compatible reports it
            if not isinstance(d, dict):
                return d
            try:
                return validate(copy.deepcopy(d))
            except DeckError:
                return d

        # compare the deck entries that must not change (bodies, generators, box, walls) in normalised
        # form (defaults filled), so a checkpoint written from a dict matches the same deck given as text
        m = dict(meta)
        if m.get("deck") is not None:
            m["deck"] = _normalised_deck(m["deck"])
        check_compatible(m, deck, path=f"checkpoint {path}")
        keys = None
        vals = None
        if warm and "gid_i" in warm:
            keys = np.empty(len(warm["gid_i"]), dtype=[("a", np.int64), ("b", np.int64), ("k", np.int64)])
            keys["a"], keys["b"], keys["k"] = warm["gid_i"], warm["gid_j"], warm["sub"]
            vals = np.full((len(keys), 4), np.nan)
            vals[:, 0] = warm["gamma"]
            if all(c in warm for c in ("hint_x", "hint_y", "hint_z")):     # older checkpoints have no hints
                vals[:, 1], vals[:, 2], vals[:, 3] = warm["hint_x"], warm["hint_y"], warm["hint_z"]
        sim = cls(deck, deck_text, comm, bodies=bodies, step=int(meta["step"]), time0=float(meta["time"]))
        same_ranks = int(meta.get("n_ranks_written", -1)) == comm.size
        rcb = meta.get("rcb")
        if same_ranks and isinstance(sim.decomp, pdecomp.RCBDecomposition) and isinstance(rcb, dict) and \
                int(rcb.get("size", -1)) == comm.size:
            # partition exactly as the interrupted run did (its tree may also come from a rebalance)
            try:
                d = pdecomp.RCBDecomposition.from_dict(sim.box, comm, rcb)
            except ValueError as exc:
                raise CheckpointError(f"checkpoint {path}: stored RCB decomposition: {exc}") from None
            sim.decomp = d
            sim.bodies = migrate(sim.bodies, d, comm)
        rs = meta.get("row_starts")
        if same_ranks and isinstance(rs, list) and len(rs) == comm.size + 1:
            # give every body back to the rank that owned it during the last step (its D row tells which):
            # the next step starts from exactly the interrupted run's distribution (the rebalancing
            # decision and its work weights depend on it), not from one recomputed from the positions
            from relcp_mpi.parallel.migration import pack_rows
            rs = np.asarray(rs, dtype=np.int64)
            b = sim.bodies
            dest = np.clip(np.searchsorted(rs, b.row, side="right") - 1, 0, comm.size - 1)
            sim.bodies = BodyStore.unpack(alltoallv_rows(pack_rows(b), dest, comm)).sort_by_gid() \
                if comm.allreduce(len(b)) else b
            sim.row_starts = rs
        if deck["contact"]["skin"] is None and "skin" in meta:
            # automatic skin: the one of the interrupted run (fixed at its start), not 0.25 r_max of now
            sim.skin = float(meta["skin"])
            sim.params.skin = sim.skin
            sim._update_widths()
        sim.n_rebalances = int(meta.get("n_rebalances", 0))
        sim._adopt_warm(keys, vals)
        # work per body of the last step (1 + its constraint rows = its warm-start rows), for rebalancing
        b = sim.bodies
        idx = np.searchsorted(b.gid, sim.warm[0]["a"]) if len(b) else np.zeros(0, np.int64)
        sim._work_per_body = 1.0 + np.bincount(idx, minlength=len(b)).astype(np.float64)
        sim.next_gid = max(sim.next_gid, int(meta.get("next_gid", 0)))
        sim.restarted_from = path
        sim.restart_meta = meta
        return sim

    def summary(self):
        """Multi-line run summary (collective; meaningful on rank 0)."""
        stages = self.timer.report(self.comm, wall=getattr(self, "wall_time", None))
        d = self.diag
        wall = getattr(self, "wall_time", 0.0)
        nrun = getattr(self, "steps_run", self.step)
        rs = getattr(self, "restarted_from", None)
        restart = f"restarted from {rs} (step {self.step - nrun})\n" if rs else ""
        return (f"relcp_mpi {__version__}: {self.deck['name']} on {self.comm.size} rank(s), "
                f"{self.n_global} bodies, {self.step} steps, t={self.time:.6g}\n" + restart +
                f"last step: constraints={d.get('constraints', 0)} depth={d.get('depth', 0)} "
                f"iterations={d.get('iterations', 0)} max_overlap={d.get('max_overlap', 0.0):.3e} "
                f"(overlap_tol {self.params.overlap_tol:g})\n" + _stress_line(d) +
                f"wall time {wall:.3f} s, {nrun / max(wall, 1e-300):.2f} steps/s\n" + stages)


def _stress_line(d):
    """Summary line of the last step's collision stress (empty when the diagnostics have none)."""
    if "pressure" not in d:
        return ""
    # all 9 components: with centre-to-centre levers the tensor of non-spherical bodies need not be symmetric
    comps = " ".join(f"{c}={d[f'stress_{c}']:.3e}" for c in ("xx", "yy", "zz", "xy", "yx", "xz", "zx", "yz", "zy"))
    return f"collision stress [F/L^2] (last step): pressure={d['pressure']:.3e} {comps}\n"
