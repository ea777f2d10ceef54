#!/usr/bin/env python3
"""Repack a relcp_mpi checkpoint with gzip compression, for keeping it in the repository (serial).

    .venv/bin/python tools/pack_checkpoint.py CKPT.h5 OUT.h5

Why: a long study (the growing colony to 65,536 cells, issue 10) takes longer than one session on the project's
machine, and the machine's files do not survive between sessions.  The study continues from a checkpoint kept
in ``results/checkpoints/`` (``tools/bench_colony.py --restart FILE``).  The run writes its checkpoints
uncompressed (parallel HDF5); this copy holds the same groups, datasets, dtypes and attributes, with datasets of
more than 1,000 elements gzip-compressed (level 6, byte shuffle): ~2.9x smaller for a colony checkpoint
(8,192 cells with 81k warm-start rows: 6.9 -> 2.4 MB).  HDF5 decompresses on read, so the restart code reads it
unchanged.  Every dataset and attribute of the copy is compared with the original before the copy is renamed
into place; on any difference nothing is written.
"""
import argparse
import os
import sys

import h5py
import numpy as np

MIN_COMPRESSED = 1000


def _copy(src, dst):
    for k, v in src.attrs.items():
        dst.attrs[k] = v
    for name, obj in src.items():
        if isinstance(obj, h5py.Group):
            _copy(obj, dst.create_group(name))
            continue
        kw = dict(compression="gzip", compression_opts=6, shuffle=True) if obj.size > MIN_COMPRESSED else {}
        d = dst.create_dataset(name, data=obj[()], **kw)
        for k, v in obj.attrs.items():
            d.attrs[k] = v


def _same(a, b, path="/"):
    """List of differences between two HDF5 groups (names, attributes, dataset dtypes and values, bitwise)."""
    out = []
    if set(a.attrs) != set(b.attrs) or any(not np.array_equal(np.asarray(a.attrs[k]), np.asarray(b.attrs[k]))
                                           for k in a.attrs):
        out.append(f"{path}: attributes differ")
    if set(a) != set(b):
        return out + [f"{path}: members differ"]
    for name in a:
        x, y = a[name], b[name]
        if isinstance(x, h5py.Group):
            out += _same(x, y, path + name + "/")
            continue
        vx, vy = x[()], y[()]
        if vx.dtype != vy.dtype or np.asarray(vx).tobytes() != np.asarray(vy).tobytes():
            out.append(f"{path}{name}: data differ")
        out += _same_attrs(x, y, path + name)
    return out


def _same_attrs(x, y, where):
    if set(x.attrs) != set(y.attrs) or any(not np.array_equal(np.asarray(x.attrs[k]), np.asarray(y.attrs[k]))
                                           for k in x.attrs):
        return [f"{where}: attributes differ"]
    return []


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("out")
    args = ap.parse_args(argv)
    if os.path.abspath(args.checkpoint) == os.path.abspath(args.out):
        sys.exit("pack_checkpoint: the output must be another file than the checkpoint")
    tmp = args.out + ".tmp"
    try:
        with h5py.File(args.checkpoint, "r") as src, h5py.File(tmp, "w") as dst:
            _copy(src, dst)
        with h5py.File(args.checkpoint, "r") as a, h5py.File(tmp, "r") as b:
            diff = _same(a, b)
        if diff:
            raise RuntimeError("; ".join(diff[:5]))
    except (OSError, RuntimeError) as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        sys.exit(f"pack_checkpoint: {args.checkpoint}: {exc}")
    os.replace(tmp, args.out)
    print(f"{args.out}: {os.path.getsize(args.checkpoint) / 2**20:.1f} -> {os.path.getsize(args.out) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
