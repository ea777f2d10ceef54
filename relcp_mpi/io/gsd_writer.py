"""GSD trajectory frames (HOOMD-blue's schema), read by OVITO, freud, HOOMD and ``gsd.hoomd``.

Same interface as :class:`relcp_mpi.io.trajectory.TrajectoryWriter`: ``write_frame(step, time, bodies,
diagnostics)`` (collective, writes when ``step % every == 0``, returns whether it wrote) and ``close()``.
GSD is a serial format: every frame is gathered to rank 0 (one Gatherv of 15 float64 per body), sorted by
global id and written by rank 0, so frames do not depend on the rank count.  Requires Debian's
``python3-gsd`` (2.7; imported only when a writer is created).

Per frame (``gsd.hoomd`` snapshot; HOOMD conventions: float32 positions relative to the box centre,
quaternions (w, x, y, z) body -> lab like relcp_mpi's)::

    configuration/step      the step
    configuration/box       [Lx, Ly, Lz, 0, 0, 0]: the deck box (non-periodic axes too: the deck's region)
    particles/N, position   x - box centre (float32)
    particles/orientation   q (float32)
    particles/types, typeid one type per distinct (kind, shape parameters) in the frame, named
                            ``sphere``/``ellipsoid``/``spherocylinder``/``ring`` (+ ``_k`` if a kind has several);
                            with more than ``max_types`` distinct shapes (a growing colony), one type per kind
                            with the kind's mean parameters (the exact ones are in log/particles/shape)
    particles/type_shapes   per type, HOOMD's shape specs (OVITO draws them): sphere ``Sphere`` {diameter};
                            ellipsoid ``Ellipsoid`` {a, b, c}; spherocylinder ``ConvexSpheropolyhedron``
                            {vertices: the axis segment ends (0, 0, -/+L/2), rounding_radius: R} (a capsule);
                            ring ``Mesh`` {vertices, indices}: a triangulated torus
    particles/diameter      2 x bounding radius (float32)
    log/particles/gid       (N,) int64 global ids (frames are in increasing gid order)
    log/particles/kind      (N,) int32 shape codes (relcp_mpi.bodies.shapes)
    log/particles/shape     (N, 3) float64 per-body shape parameters (exact, e.g. each cell's length)
    log/particles/x, q, u   (N, 3), (N, 4), (N, 6) float64: exact lab-frame positions, orientations, velocity
    log/relcp/time          (1,) float64 simulated time
    log/relcp/<key>         (1,) float64 every diagnostic of the step (constraints, max_overlap, stress_xx ...)

Restart/append: ``append=True, restart_step=S`` keeps the frames with step <= S of an existing file (the
file is rewritten when frames must be dropped -- GSD files are append-only -- via a temporary file and an
atomic rename) and appends after them; a frame whose step equals the last step in the file replaces it, a
smaller step raises :class:`relcp_mpi.io.trajectory.TrajectoryError`.
"""
import os

import numpy as np

from relcp_mpi.bodies.shapes import ELLIPSOID, KIND_NAMES, RING, SPHERE, SPHEROCYLINDER, bounding_radius
from relcp_mpi.io.trajectory import TrajectoryError

_COLS = (("gid", 1), ("kind", 1), ("shape", 3), ("x", 3), ("q", 4), ("u", 6))   # 18 float64 per body
_WIDTH = sum(w for _, w in _COLS)


def require_gsd():
    """Import ``gsd.hoomd`` or raise an ImportError saying how to install it."""
    try:
        import gsd.hoomd
    except ImportError as exc:
        raise ImportError("output.format 'gsd' needs the gsd Python package: install Debian's python3-gsd "
                          "(apt-get install python3-gsd, done by tools/setup.sh) or `pip install gsd`") from exc
    return gsd.hoomd


def torus_mesh(Rc, r, n_major=24, n_minor=12):
    """Triangulated torus (axis z, centre-circle radius Rc, tube radius r): (vertices (V, 3), faces (F, 3))."""
    u = 2 * np.pi * np.arange(n_major) / n_major
    v = 2 * np.pi * np.arange(n_minor) / n_minor
    U, Vv = np.meshgrid(u, v, indexing="ij")
    ring = Rc + r * np.cos(Vv)
    verts = np.stack([ring * np.cos(U), ring * np.sin(U), r * np.sin(Vv)], axis=-1).reshape(-1, 3)
    i, j = np.meshgrid(np.arange(n_major), np.arange(n_minor), indexing="ij")
    a = i * n_minor + j
    b = ((i + 1) % n_major) * n_minor + j
    c = ((i + 1) % n_major) * n_minor + (j + 1) % n_minor
    d = i * n_minor + (j + 1) % n_minor
    faces = np.concatenate([np.stack([a, b, c], -1).reshape(-1, 3), np.stack([a, c, d], -1).reshape(-1, 3)])
    return verts, faces


def type_shape(kind, p):
    """HOOMD ``type_shapes`` entry (dict) of one shape kind with parameters p (3,)."""
    p = [float(v) for v in p]
    if kind == SPHERE:
        return {"type": "Sphere", "diameter": 2 * p[0]}
    if kind == ELLIPSOID:
        return {"type": "Ellipsoid", "a": p[0], "b": p[1], "c": p[2]}
    if kind == SPHEROCYLINDER:
        return {"type": "ConvexSpheropolyhedron", "vertices": [[0.0, 0.0, -0.5 * p[1]], [0.0, 0.0, 0.5 * p[1]]],
                "rounding_radius": p[0]}
    if kind == RING:
        v, f = torus_mesh(p[0], p[1])
        return {"type": "Mesh", "vertices": v.tolist(), "indices": f.tolist()}
    raise ValueError(f"unknown shape kind {kind}")


def frame_types(kind, shape, max_types=32):
    """(type names, type_shapes, typeid (n,)) of a frame's bodies (see the module docstring)."""
    kind = np.asarray(kind, dtype=np.int64)
    shape = np.asarray(shape, dtype=np.float64).reshape(-1, 3)
    if len(kind) == 0:
        return [], [], np.zeros(0, np.uint32)
    key = np.concatenate([kind[:, None].astype(np.float64), shape], axis=1)
    uniq, inv = np.unique(key, axis=0, return_inverse=True)
    if len(uniq) > max_types:          # one type per kind, mean parameters
        kinds, inv = np.unique(kind, return_inverse=True)
        params = np.array([shape[kind == k].mean(axis=0) for k in kinds])
    else:
        kinds, params = uniq[:, 0].astype(np.int64), uniq[:, 1:]
    names, counter = [], {}
    for k in kinds:
        counter[int(k)] = counter.get(int(k), 0) + 1
    seen = {}
    for k in kinds:
        base = KIND_NAMES[int(k)]
        if counter[int(k)] > 1:
            seen[int(k)] = seen.get(int(k), -1) + 1
            base = f"{base}_{seen[int(k)]}"
        names.append(base)
    shapes = [type_shape(int(k), p) for k, p in zip(kinds, params)]
    return names, shapes, np.asarray(inv, dtype=np.uint32).reshape(-1)


class GSDWriter:
    """Collective GSD frame writer (rank 0 writes); see the module docstring for the layout and rules."""

    def __init__(self, path, comm, box_lo, box_hi, append=False, every=1, restart_step=None, max_types=32):
        if int(every) < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.path = os.fspath(path)
        self.comm = comm
        self.every = int(every)
        self.max_types = int(max_types)
        self.lo = np.asarray(box_lo, dtype=np.float64)
        self.hi = np.asarray(box_hi, dtype=np.float64)
        self._traj = None
        err, steps = None, []
        if comm.rank == 0:
            try:
                hoomd = require_gsd()
                os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
                if append and os.path.exists(self.path):
                    steps = self._keep_frames(hoomd, int(restart_step) if restart_step is not None else None)
                    self._traj = hoomd.open(self.path, "rb+")
                else:
                    self._traj = hoomd.open(self.path, "wb")
            except Exception as exc:  # noqa: BLE001 - reported on every rank below
                err = f"GSD trajectory {self.path}: {exc}"
        err, steps = comm.bcast((err, steps), root=0)
        if err:
            raise TrajectoryError(err)
        self._steps = list(steps)

    # -- internals (rank 0) ---------------------------------------------------------------------
    def _rewrite(self, hoomd, keep):
        """Rewrite the file with the frames whose index is in ``keep`` (temporary file + atomic rename)."""
        tmp = self.path + ".tmp"
        with hoomd.open(self.path, "rb") as src, hoomd.open(tmp, "wb") as dst:
            for i in keep:
                dst.append(src[i])
        os.replace(tmp, self.path)

    def _keep_frames(self, hoomd, restart_step):
        """Drop the frames after ``restart_step``; returns the steps of the kept frames."""
        with hoomd.open(self.path, "rb") as f:
            steps = [int(s.configuration.step) for s in f]
        if restart_step is None:
            return steps
        keep = [i for i, s in enumerate(steps) if s <= restart_step]
        if len(keep) < len(steps):
            self._rewrite(hoomd, keep)
        return [steps[i] for i in keep]

    def _gather(self, bodies):
        """(N, 18) rows of all bodies sorted by gid on rank 0 (None elsewhere); one Gatherv."""
        from mpi4py import MPI
        n = bodies.n
        rows = np.concatenate([np.asarray(getattr(bodies, c), dtype=np.float64).reshape(n, w) for c, w in _COLS],
                              axis=1) if n else np.zeros((0, _WIDTH))
        counts = np.asarray(self.comm.gather(rows.size, root=0) or [], dtype=np.int64)
        recv = None
        if self.comm.rank == 0:
            buf = np.empty(int(counts.sum()), dtype=np.float64)
            recv = [buf, counts, np.concatenate([[0], np.cumsum(counts)[:-1]]), MPI.DOUBLE]
        self.comm.Gatherv(np.ascontiguousarray(rows).ravel(), recv, root=0)
        if self.comm.rank != 0:
            return None
        allrows = recv[0].reshape(-1, _WIDTH)
        return allrows[np.argsort(allrows[:, 0], kind="stable")]

    def _snapshot(self, hoomd, step, time, rows, diagnostics):
        cols, c = {}, 0
        for name, w in _COLS:
            cols[name] = rows[:, c] if w == 1 else rows[:, c:c + w]
            c += w
        gid = np.rint(cols["gid"]).astype(np.int64)
        kind = np.rint(cols["kind"]).astype(np.int32)
        s = hoomd.Snapshot()
        s.configuration.step = int(step)
        L = self.hi - self.lo
        s.configuration.box = [float(L[0]), float(L[1]), float(L[2]), 0.0, 0.0, 0.0]
        s.configuration.dimensions = 3
        names, shapes, typeid = frame_types(kind, cols["shape"], self.max_types)
        p = s.particles
        p.N = len(gid)
        p.types = names or ["sphere"]
        p.type_shapes = shapes or [type_shape(SPHERE, [0.5, 0, 0])]
        p.typeid = typeid
        p.position = (cols["x"] - 0.5 * (self.lo + self.hi)).astype(np.float32)
        p.orientation = cols["q"].astype(np.float32)
        p.diameter = (2.0 * bounding_radius(kind, cols["shape"])).astype(np.float32)
        s.log["particles/gid"] = gid
        s.log["particles/kind"] = kind
        s.log["particles/shape"] = np.ascontiguousarray(cols["shape"])
        s.log["particles/x"] = np.ascontiguousarray(cols["x"])
        s.log["particles/q"] = np.ascontiguousarray(cols["q"])
        s.log["particles/u"] = np.ascontiguousarray(cols["u"])
        s.log["relcp/time"] = np.array([float(time)])
        for k, v in diagnostics.items():
            s.log[f"relcp/{k}"] = np.array([float(v)])
        return s

    # -- public ---------------------------------------------------------------------------------
    @property
    def last_step(self):
        return self._steps[-1] if self._steps else None

    @property
    def n_frames(self):
        return len(self._steps)

    def write_frame(self, step, time, bodies, diagnostics=None):
        """Write one frame collectively (if ``step % every == 0``); returns True if written."""
        comm = self.comm
        step, time, diagnostics = comm.bcast((int(step), float(time), dict(diagnostics or {})), root=0)
        if step % self.every:
            return False
        if self._steps and step < self._steps[-1]:
            raise TrajectoryError(f"GSD trajectory {self.path}: frame step {step} is before the last step "
                                  f"{self._steps[-1]} in the file (after a restart open with append=True, "
                                  "restart_step=<checkpoint step>)")
        rows = self._gather(bodies)
        err = None
        if comm.rank == 0:
            try:
                hoomd = require_gsd()
                if self._steps and step == self._steps[-1]:      # replace the frame of the restart step
                    self._traj.close()
                    self._rewrite(hoomd, range(len(self._steps) - 1))
                    self._traj = hoomd.open(self.path, "rb+")
                self._traj.append(self._snapshot(hoomd, step, time, rows, diagnostics))
            except Exception as exc:  # noqa: BLE001 - reported on every rank below
                err = f"GSD trajectory {self.path}: cannot write frame {step}: {exc}"
        err = comm.bcast(err, root=0)
        if err:
            raise TrajectoryError(err)
        if self._steps and step == self._steps[-1]:
            self._steps.pop()
        self._steps.append(step)
        return True

    def close(self):
        if self._traj is not None:
            self._traj.close()
            self._traj = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
