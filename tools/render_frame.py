#!/usr/bin/env python3
"""Render one frame of bodies to a PNG with VTK (offscreen; re-runs itself under ``xvfb-run`` when there is
no X display): ellipsoids as ellipsoids, spherocylinders as capsules, rings as tori, spheres as spheres.

    .venv/bin/python tools/render_frame.py SOURCE -o results/frame.png [--frame K | --step S] [--steps N]
                                           [--view iso|top|side] [--color auto|gid|z|axis|kind] [--size WxH]

SOURCE is a trajectory (``.h5`` of relcp_mpi, or ``.gsd``), a checkpoint ``.h5``, or a deck ``.yaml``; a
deck is run serially for ``--steps`` steps (default 0: the deck's initial state) without writing output.
Needs Debian's ``python3-vtk9`` (and ``xvfb`` + ``xauth`` without a display): ``RELCP_VIEWERS=1 bash
tools/setup.sh``.

Meshes are built with numpy for all bodies of a kind at once (template surface in the body frame, scaled by
each body's shape parameters, rotated by its quaternion, shifted to its centre) and handed to VTK as one
polydata per kind.
"""
import argparse
import os
import shutil
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


# ------------------------------------------------------------------------------------------------
# frame sources -> dict(kind (n,), shape (n, 3), x (n, 3), q (n, 4), gid (n,), label str)
def load_frame(source, frame=None, step=None, steps=0):
    if source.endswith((".yaml", ".yml")):
        return _deck_frame(source, steps)
    if source.endswith(".gsd"):
        import gsd.hoomd
        with gsd.hoomd.open(source, "rb") as t:
            snap = t[-1 if frame is None else frame] if step is None else \
                [s for s in t if s.configuration.step == step][0]
            lg = snap.log
            return dict(kind=lg["particles/kind"], shape=lg["particles/shape"], x=lg["particles/x"],
                        q=lg["particles/q"], gid=lg["particles/gid"],
                        label=f"{os.path.basename(source)} step {snap.configuration.step}")
    import h5py
    with h5py.File(source, "r") as f:
        fmt = f.attrs.get("format", b"")
    fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
    if fmt == "relcp_mpi-checkpoint":
        from mpi4py import MPI

        from relcp_mpi.io.checkpoint import read_checkpoint
        b, meta, _ = read_checkpoint(source, MPI.COMM_SELF)
        return dict(kind=b.kind, shape=b.shape, x=b.x, q=b.q, gid=b.gid,
                    label=f"{os.path.basename(source)}: step {meta['step']}, t = {meta['time']:.4g}")
    from relcp_mpi.io.trajectory import read_frame
    fr = read_frame(source, step=step, index=frame)
    return dict(kind=fr["kind"], shape=fr["shape"], x=fr["x"], q=fr["q"], gid=fr["gid"],
                label=f"{os.path.basename(source)}: step {fr['step']}, t = {fr['time']:.4g}")


def _deck_frame(path, steps):
    from mpi4py import MPI

    from relcp_mpi.config.sections import load_typed, override
    from relcp_mpi.simulation import Simulation
    deck, text = load_typed(path)
    deck = override(deck, {"output.trajectory_every": 0, "output.checkpoint_every": 0}, source=path)
    sim = Simulation(deck, text, MPI.COMM_SELF)
    try:
        for _ in range(steps):
            sim.step_once()
    finally:
        sim.solver.free()
    b = sim.bodies.sort_by_gid()
    return dict(kind=b.kind, shape=b.shape, x=b.x, q=b.q, gid=b.gid,
                label=f"{deck.name}: step {sim.step}, t = {sim.time:.4g}, {len(b)} bodies")


# ------------------------------------------------------------------------------------------------
# meshes (numpy)
def _grid_faces(n_u, n_v, wrap_v):
    """Triangles of an (n_u, n_v) vertex grid, periodic in u; periodic in v too if ``wrap_v``."""
    i, j = np.meshgrid(np.arange(n_u), np.arange(n_v if wrap_v else n_v - 1), indexing="ij")
    a = i * n_v + j
    b = ((i + 1) % n_u) * n_v + j
    c = ((i + 1) % n_u) * n_v + (j + 1) % n_v
    d = i * n_v + (j + 1) % n_v
    return np.concatenate([np.stack([a, b, c], -1).reshape(-1, 3), np.stack([a, c, d], -1).reshape(-1, 3)])


def _unit_sphere(n_az=24, n_lat=14, split=False):
    """Unit sphere vertices (V, 3), faces, and the hemisphere sign (V,) (+1 top, -1 bottom).  With ``split``
    the equator appears twice (once per hemisphere) so the hemispheres can be pulled apart into a capsule."""
    if split:
        half = np.linspace(0.0, np.pi / 2, n_lat // 2 + 1)
        lat = np.concatenate([-half[::-1], half])
        sign = np.concatenate([-np.ones(len(half)), np.ones(len(half))])
    else:
        lat = np.linspace(-np.pi / 2, np.pi / 2, n_lat + 1)
        sign = np.sign(lat)
    az = 2 * np.pi * np.arange(n_az) / n_az
    A, L = np.meshgrid(az, lat, indexing="ij")
    v = np.stack([np.cos(L) * np.cos(A), np.cos(L) * np.sin(A), np.sin(L)], -1).reshape(-1, 3)
    s = np.broadcast_to(sign, A.shape).reshape(-1)
    return v, _grid_faces(n_az, len(lat), wrap_v=False), s


def body_meshes(kind, shape, fine=True):
    """Body-frame vertices (n, V, 3), unit outward normals (n, V, 3) (exact, from the shape) and faces (F, 3)
    for n bodies of one kind (shape (n, 3))."""
    from relcp_mpi.bodies.shapes import ELLIPSOID, RING, SPHERE, SPHEROCYLINDER
    s = np.asarray(shape, float)
    n_az, n_lat = (48, 28) if fine else (20, 12)
    if kind in (SPHERE, ELLIPSOID):
        v, f, _ = _unit_sphere(n_az, n_lat)
        scale = np.repeat(s[:, :1], 3, axis=1) if kind == SPHERE else s
        verts = v[None] * scale[:, None, :]
        nrm = v[None] / scale[:, None, :]                      # gradient of sum (x_i / a_i)^2
        return verts, nrm / np.linalg.norm(nrm, axis=2, keepdims=True), f
    if kind == SPHEROCYLINDER:
        v, f, sign = _unit_sphere(n_az, n_lat, split=True)
        verts = v[None] * s[:, 0, None, None]
        verts[:, :, 2] += sign[None] * 0.5 * s[:, 1, None]
        return verts, np.broadcast_to(v, verts.shape), f
    if kind == RING:
        n_u, n_v = (64, 20) if fine else (32, 12)
        u = 2 * np.pi * np.arange(n_u) / n_u
        w = 2 * np.pi * np.arange(n_v) / n_v
        U, W = (a.reshape(-1) for a in np.meshgrid(u, w, indexing="ij"))
        Rc, r = s[:, 0, None], s[:, 1, None]
        tube = np.stack([np.cos(W) * np.cos(U), np.cos(W) * np.sin(U), np.sin(W)], -1)      # (V, 3)
        centre = np.stack([np.cos(U), np.sin(U), np.zeros_like(U)], -1)
        verts = Rc[:, :, None] * centre[None] + r[:, :, None] * tube[None]
        return verts, np.broadcast_to(tube, verts.shape), _grid_faces(n_u, n_v, wrap_v=True)
    raise ValueError(f"unknown kind {kind}")


def lab_mesh(kind, shape, x, q, fine=True):
    """Lab-frame vertices (n*V, 3), normals (n*V, 3) and faces (n*F, 3) of all bodies of one kind."""
    from relcp_mpi.geometry.quaternion import to_matrix
    v, nrm, f = body_meshes(kind, shape, fine)
    R = to_matrix(np.asarray(q, float))                          # (n, 3, 3) body -> lab
    lab = np.einsum("nij,nvj->nvi", R, v) + np.asarray(x, float)[:, None, :]
    labn = np.einsum("nij,nvj->nvi", R, nrm)
    n, V = v.shape[:2]
    faces = (f[None] + (V * np.arange(n))[:, None, None]).reshape(-1, 3)
    return lab.reshape(-1, 3), labn.reshape(-1, 3), faces, V


# ------------------------------------------------------------------------------------------------
def body_scalar(fr, how):
    from relcp_mpi.bodies.shapes import SPHEROCYLINDER
    from relcp_mpi.geometry.quaternion import rotate
    kind = np.asarray(fr["kind"])
    if how == "auto":
        how = "gid" if len(kind) <= 8 else ("axis" if np.all(kind == SPHEROCYLINDER) else "z")
    if how == "gid":
        return np.argsort(np.argsort(fr["gid"])).astype(float), how
    if how == "z":
        return np.asarray(fr["x"])[:, 2].astype(float), how
    if how == "axis":     # in-plane direction of the body axis, modulo pi
        a = rotate(np.asarray(fr["q"], float), np.tile([0.0, 0.0, 1.0], (len(kind), 1)))
        return np.mod(np.arctan2(a[:, 1], a[:, 0]), np.pi), how
    return kind.astype(float), how


def render(fr, out, view="iso", color="auto", size=(1200, 900), title=None):
    import vtk
    from vtk.util.numpy_support import numpy_to_vtk, numpy_to_vtkIdTypeArray
    kind = np.asarray(fr["kind"])
    scal, how = body_scalar(fr, color)
    ren = vtk.vtkRenderer()
    ren.SetBackground(1.0, 1.0, 1.0)
    lut = vtk.vtkLookupTable()
    if how == "axis":
        lut.SetHueRange(0.0, 1.0)                               # cyclic: 0 and pi get the same colour
        lut.SetSaturationRange(0.55, 0.55)
    else:
        lut.SetHueRange(0.62, 0.0)
        lut.SetSaturationRange(0.65, 0.65)
    lut.SetValueRange(0.95, 0.95)
    lut.Build()
    lo, hi = float(scal.min(initial=0.0)), float(scal.max(initial=1.0))
    if how == "axis":
        lo, hi = 0.0, np.pi
    for k in np.unique(kind):
        m = kind == k
        pts, nrm, faces, V = lab_mesh(int(k), np.asarray(fr["shape"])[m], np.asarray(fr["x"])[m],
                                      np.asarray(fr["q"])[m], fine=len(kind) <= 500)
        poly = vtk.vtkPolyData()
        p = vtk.vtkPoints()
        p.SetData(numpy_to_vtk(np.ascontiguousarray(pts), deep=True))
        poly.SetPoints(p)
        cells = np.hstack([np.full((len(faces), 1), 3), faces]).astype(np.int64).ravel()
        ca = vtk.vtkCellArray()
        ca.SetCells(len(faces), numpy_to_vtkIdTypeArray(cells, deep=True))
        poly.SetPolys(ca)
        sc = numpy_to_vtk(np.repeat(scal[m], V).astype(np.float64), deep=True)
        sc.SetName("c")
        poly.GetPointData().SetScalars(sc)
        na = numpy_to_vtk(np.ascontiguousarray(nrm), deep=True)
        na.SetName("Normals")
        poly.GetPointData().SetNormals(na)
        mapper = vtk.vtkPolyDataMapper()
        mapper.SetInputData(poly)
        mapper.SetLookupTable(lut)
        mapper.SetScalarRange(lo, hi if hi > lo else lo + 1.0)
        actor = vtk.vtkActor()
        actor.SetMapper(mapper)
        actor.GetProperty().SetSpecular(0.25)
        actor.GetProperty().SetSpecularPower(20)
        ren.AddActor(actor)
    if title:
        t = vtk.vtkTextActor()
        t.SetInput(title)
        t.GetTextProperty().SetColor(0.1, 0.1, 0.1)
        t.GetTextProperty().SetFontSize(max(14, size[1] // 40))
        t.SetDisplayPosition(12, 12)
        ren.AddActor2D(t)
    cam = ren.GetActiveCamera()
    direction = {"iso": (1.0, -1.6, 1.1), "top": (0.0, 0.0, 1.0), "side": (0.0, -1.0, 0.25)}[view]
    cam.SetFocalPoint(0, 0, 0)
    cam.SetPosition(*direction)
    cam.SetViewUp(0, 1, 0) if view == "top" else cam.SetViewUp(0, 0, 1)
    ren.ResetCamera()
    cam.Zoom(1.3 if view == "top" else 1.15)
    win = vtk.vtkRenderWindow()
    win.SetOffScreenRendering(1)
    win.SetSize(*size)
    win.SetMultiSamples(4)
    win.AddRenderer(ren)
    win.Render()
    grab = vtk.vtkWindowToImageFilter()
    grab.SetInput(win)
    grab.Update()
    w = vtk.vtkPNGWriter()
    w.SetFileName(out)
    w.SetInputConnection(grab.GetOutputPort())
    w.Write()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--frame", type=int, default=None, help="frame index of a trajectory (default: last)")
    ap.add_argument("--step", type=int, default=None, help="frame with this step (trajectory)")
    ap.add_argument("--steps", type=int, default=0, help="deck source: steps to run before rendering")
    ap.add_argument("--view", choices=("iso", "top", "side"), default="iso")
    ap.add_argument("--color", choices=("auto", "gid", "z", "axis", "kind"), default="auto")
    ap.add_argument("--size", default="1200x900")
    ap.add_argument("--title", default=None)
    args = ap.parse_args(argv)
    if not os.environ.get("DISPLAY") and not os.environ.get("RELCP_RENDER_CHILD") and shutil.which("xvfb-run"):
        os.environ["RELCP_RENDER_CHILD"] = "1"                  # VTK's X window needs a display: use Xvfb
        os.execvp("xvfb-run", ["xvfb-run", "-a", sys.executable, os.path.abspath(__file__)] + sys.argv[1:])
    fr = load_frame(args.source, frame=args.frame, step=args.step, steps=args.steps)
    w, h = (int(v) for v in args.size.lower().split("x"))
    render(fr, args.output, view=args.view, color=args.color, size=(w, h), title=args.title or fr["label"])
    print(f"wrote {args.output} ({len(fr['kind'])} bodies; {fr['label']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
