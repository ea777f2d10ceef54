"""XDMF (v3) sidecar for trajectory files, readable by ParaView ("Xdmf3 Reader" or "XDMF Reader").

One temporal collection of Polyvertex grids, one grid per frame::

    <Xdmf Version="3.0">
      <Domain>
        <Grid Name="trajectory" GridType="Collection" CollectionType="Temporal">
          <Grid Name="frame_000000123" GridType="Uniform">
            <Time Value="1.23"/>
            <Topology TopologyType="Polyvertex" NumberOfElements="n" NodesPerElement="1"/>
            <Geometry GeometryType="XYZ"> x (n 3) </Geometry>
            <Attribute Name="gid" .../> <Attribute Name="kind" .../>
            <Attribute Name="shape" AttributeType="Vector"/>   (n 3)
            <Attribute Name="q" AttributeType="Matrix"/>       (n 4), w x y z
            <Attribute Name="u" AttributeType="Matrix"/>       (n 6), vx vy vz wx wy wz
          </Grid> ...

Every DataItem is a plain HDF reference: ParaView's Xdmf3 reader (vtkXdmf3Reader, ParaView 5.11) silently
drops attributes given as ``ItemType="HyperSlab"`` (or ``Function``) items ("Skipping unrecognized array
type"), so the generalized velocity is exposed as one 6-component array ``u`` (ParaView: Calculator
``u_0*iHat+u_1*jHat+u_2*kHat`` for the linear velocity).  tests/test_xdmf_reader.py opens the sidecar
with both ParaView readers ("Xdmf3 Reader S" and the legacy "XDMF Reader").  Open the sidecar by a path
that contains a directory (ParaView's Xdmf3 reader resolves the HDF5 name against the directory part of
the path it was given).

Heavy data stay in the HDF5 file (referenced as ``<basename of h5>:/frames/<name>/<dataset>``, so the
pair of files can be moved together).  Frames with zero bodies are skipped (ParaView rejects empty
Polyvertex grids).  The sidecar is written by one process to ``<xdmf>.tmp`` and renamed, so a reader
never sees a half-written file.
"""
import os

FRAME_DATASETS = {  # name -> (NumberType, Precision, trailing width)
    "gid": ("Int", 8, 1),
    "kind": ("Int", 4, 1),
    "shape": ("Float", 8, 3),
    "x": ("Float", 8, 3),
    "q": ("Float", 8, 4),
    "u": ("Float", 8, 6),
}


def xdmf_path_for(h5_path):
    """``run.h5`` -> ``run.xdmf``."""
    base, ext = os.path.splitext(os.fspath(h5_path))
    return base + ".xdmf"


def _item(h5name, group, dset, n):
    nt, prec, w = FRAME_DATASETS[dset]
    dims = f"{n}" if w == 1 else f"{n} {w}"
    return (f'<DataItem Dimensions="{dims}" NumberType="{nt}" Precision="{prec}" Format="HDF">'
            f"{h5name}:{group}/{dset}</DataItem>")


def render_xdmf(h5_filename, frames):
    """XDMF text for ``frames``: iterable of (group_path, step, time, n_bodies)."""
    # imported here: xml.sax.saxutils pulls in urllib.request (http.client, email, ssl with OpenSSL), ~3 MiB of
    # resident memory on every rank of every run, for one attribute escape when a sidecar is written
    from xml.sax.saxutils import quoteattr
    h5name = os.path.basename(os.fspath(h5_filename))
    out = ['<?xml version="1.0" encoding="utf-8"?>',
           '<!DOCTYPE Xdmf SYSTEM "Xdmf.dtd" []>',
           '<Xdmf xmlns:xi="http://www.w3.org/2001/XInclude" Version="3.0">',
           "  <Domain>",
           '    <Grid Name="trajectory" GridType="Collection" CollectionType="Temporal">']
    for group, step, time, n in frames:
        n = int(n)
        if n == 0:
            continue
        name = "frame_" + group.rstrip("/").split("/")[-1]
        out.append(f"      <Grid Name={quoteattr(name)} GridType=\"Uniform\">")
        out.append(f'        <Time Value="{float(time)!r}"/>')
        out.append(f'        <Information Name="step" Value="{int(step)}"/>')
        out.append(f'        <Topology TopologyType="Polyvertex" NumberOfElements="{n}" NodesPerElement="1"/>')
        out.append('        <Geometry GeometryType="XYZ">' + _item(h5name, group, "x", n) + "</Geometry>")
        out.append('        <Attribute Name="gid" AttributeType="Scalar" Center="Node">'
                   + _item(h5name, group, "gid", n) + "</Attribute>")
        out.append('        <Attribute Name="kind" AttributeType="Scalar" Center="Node">'
                   + _item(h5name, group, "kind", n) + "</Attribute>")
        out.append('        <Attribute Name="shape" AttributeType="Vector" Center="Node">'
                   + _item(h5name, group, "shape", n) + "</Attribute>")
        out.append('        <Attribute Name="q" AttributeType="Matrix" Center="Node">'
                   + _item(h5name, group, "q", n) + "</Attribute>")
        out.append('        <Attribute Name="u" AttributeType="Matrix" Center="Node">'
                   + _item(h5name, group, "u", n) + "</Attribute>")
        out.append("      </Grid>")
    out += ["    </Grid>", "  </Domain>", "</Xdmf>", ""]
    return "\n".join(out)


def write_xdmf(xdmf_path, h5_filename, frames):
    """Write the sidecar atomically (one process only)."""
    xdmf_path = os.fspath(xdmf_path)
    tmp = xdmf_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(render_xdmf(h5_filename, frames))
    os.replace(tmp, xdmf_path)
    return xdmf_path


def frames_in_file(h5file):
    """[(group_path, step, time, n)] of the frames of an open trajectory file, in step order."""
    out = []
    if "frames" not in h5file:
        return out
    for name, g in h5file["frames"].items():
        if "step" not in g.attrs or "time" not in g.attrs or "gid" not in g:
            continue                # incomplete: a write failed while this frame was written
        out.append((g.name, int(g.attrs["step"]), float(g.attrs["time"]), int(g["gid"].shape[0])))
    out.sort(key=lambda r: r[1])
    return out
