"""Human-readable summaries of relcp_mpi HDF5 files (``relcp-mpi info FILE.h5``) and conversions.

* :func:`describe_file` (alias :func:`describe_checkpoint`): checkpoint -> step, time, dt, bodies per
  kind, checksum status (every dataset verified), versions, deck summary, decomposition; trajectory ->
  frame count, step and time range, bodies in the last frame, diagnostics keys.  Serial; never raises
  for a damaged checkpoint (the problem is reported in the text).
* :func:`convert_checkpoint_to_trajectory`: a one-frame trajectory (+ XDMF sidecar) of a checkpoint, to
  look at it in ParaView.
"""
import json
import os

import numpy as np

from relcp_mpi.bodies.shapes import KIND_NAMES
from relcp_mpi.io import checkpoint as _ck
from relcp_mpi.io import trajectory as _tr


def _fmt_attr(f):
    v = f.attrs.get("format", b"")
    return v.decode() if isinstance(v, bytes) else str(v)


def describe_file(path):
    """Multi-line description of a checkpoint or trajectory file."""
    import h5py
    path = os.fspath(path)
    if not os.path.exists(path):
        return f"{path}: file does not exist"
    try:
        _ck.verify_file_checksum(path)       # a damaged checkpoint is never handed to HDF5
    except _ck.CheckpointError as e:
        return (f"{path}: relcp_mpi checkpoint\n"
                f"  checksum    : FAILED: {str(e).split(': ', 1)[-1]} (not opened with HDF5)")
    if not h5py.is_hdf5(path):
        return f"{path}: not an HDF5 file"
    try:
        with h5py.File(path, "r") as f:
            fmt = _fmt_attr(f)
    except Exception as e:  # noqa: BLE001
        return f"{path}: cannot open HDF5 file (truncated or damaged?): {e}"
    if fmt == _tr.FORMAT:
        return _describe_trajectory(path)
    if fmt == _ck.FORMAT:
        return _describe_checkpoint(path)
    return f"{path}: HDF5 file of unknown format {fmt!r} (not written by relcp_mpi)"


describe_checkpoint = describe_file


def _deck_summary(deck_text):
    if not deck_text:
        return "(none stored)"
    try:
        import yaml
        d = yaml.safe_load(deck_text) if isinstance(deck_text, str) else deck_text
    except Exception:  # noqa: BLE001
        return f"(unparsable, {len(deck_text)} characters)"
    if not isinstance(d, dict):
        return f"({len(str(deck_text))} characters)"
    parts = []
    for k in ("name", "engine", "seed"):
        if k in d:
            parts.append(f"{k}={d[k]}")
    if isinstance(d.get("time"), dict):
        parts.append("time=" + json.dumps(d["time"], sort_keys=True))
    if isinstance(d.get("bodies"), list):
        parts.append(f"explicit bodies={len(d['bodies'])}")
    if isinstance(d.get("generate"), list):
        parts.append(f"generators={len(d['generate'])}")
    parts.append(f"sections={sorted(map(str, d))}")
    return ", ".join(parts)


def _describe_checkpoint(path):
    import h5py
    lines = [f"{path}: relcp_mpi checkpoint"]
    try:
        meta = _ck.verify_checkpoint(path)
        status = "OK (structure and every dataset checksum verified)"
    except _ck.CheckpointError as e:
        status = f"FAILED: {e}"
        meta = None
    if meta is None:
        try:
            with h5py.File(path, "r") as f:
                meta = json.loads(f.attrs["meta_json"])
        except Exception:  # noqa: BLE001
            meta = {}
    lines.append(f"  step        : {meta.get('step', '?')}")
    lines.append(f"  time        : {meta.get('time', '?')}")
    lines.append(f"  dt          : {meta.get('dt', '?')}")
    try:
        with h5py.File(path, "r") as f:
            kinds = f["bodies/kind"][()]
            nw = f["warm/gamma"].shape[0] if "warm/gamma" in f else 0
        counts = {KIND_NAMES.get(int(k), f"kind {int(k)}"): int(c)
                  for k, c in zip(*np.unique(kinds, return_counts=True))}
        lines.append(f"  bodies      : {len(kinds)} " + (str(counts) if counts else ""))
        lines.append(f"  warm start  : {nw} rows")
    except Exception as e:  # noqa: BLE001
        lines.append(f"  bodies      : unreadable ({e})")
    lines.append(f"  checksum    : {status}")
    lines.append(f"  written by  : relcp_mpi {meta.get('code_version', '?')} on "
                 f"{meta.get('n_ranks_written', '?')} ranks (format {meta.get('format_version', '?')})")
    lines.append(f"  next_gid    : {meta.get('next_gid', '?')}   seed: {meta.get('seed', '?')}")
    if "decomposition" in meta:
        lines.append(f"  decomposition: {meta['decomposition']}")
    lines.append(f"  deck        : {_deck_summary(meta.get('deck'))}")
    extra = sorted(set(meta) - {"step", "time", "dt", "deck", "seed", "code_version", "next_gid",
                                "n_ranks_written", "n_bodies", "n_warm", "format_version", "decomposition"})
    if extra:
        lines.append(f"  other meta  : {extra}")
    return "\n".join(lines)


def _describe_trajectory(path):
    frames = _tr.list_frames(path)
    diag = _tr.read_diagnostics(path)
    lines = [f"{path}: relcp_mpi trajectory"]
    lines.append(f"  frames      : {len(frames)}")
    if frames:
        lines.append(f"  steps       : {frames[0][1]} .. {frames[-1][1]}")
        lines.append(f"  time        : {frames[0][2]!r} .. {frames[-1][2]!r}")
        lines.append(f"  bodies      : {frames[-1][3]} in the last frame")
    keys = sorted(k for k in diag if k not in ("step", "time"))
    lines.append(f"  diagnostics : {keys}")
    x = _xdmf_sidecar(path)
    lines.append(f"  XDMF sidecar: {x if os.path.exists(x) else 'missing (' + x + ')'}")
    return "\n".join(lines)


def _xdmf_sidecar(path):
    from relcp_mpi.io.xdmf import xdmf_path_for
    return xdmf_path_for(path)


def convert_checkpoint_to_trajectory(ckpt_path, traj_path, comm=None):
    """Write a one-frame trajectory (plus XDMF sidecar) holding the bodies of a checkpoint.

    Collective over ``comm`` (default ``MPI.COMM_SELF``, i.e. serial).  The frame's step and time are
    the checkpoint's; its diagnostics attributes are the checkpoint's ``dt`` and ``n_bodies``."""
    from mpi4py import MPI
    comm = MPI.COMM_SELF if comm is None else comm
    bodies, meta, _ = _ck.read_checkpoint(ckpt_path, comm)
    with _tr.TrajectoryWriter(traj_path, comm) as w:
        w.write_frame(int(meta["step"]), float(meta["time"]), bodies,
                      {"dt": float(meta["dt"]), "n_bodies": int(meta.get("n_bodies", bodies.n))})
    return traj_path
