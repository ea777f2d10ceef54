#!/usr/bin/env python3
"""Convert a relcp_mpi spherocylinder deck (input_decks/peer/*.yaml) to SimToolbox input files.

    python3 deck_to_peer.py DECK.yaml OUTDIR [--tol 1e-5] [--maxite 100000] [--colbuf 0.3]

Writes OUTDIR/RunConfig.yaml and OUTDIR/SylinderInitial.dat.

Conventions (checked in the sources):
* relcp_mpi: quaternion (w, x, y, z), scalar first, maps body to lab (relcp_mpi/basics/quaternion.py);
  spherocylinder shape (R, L): L = length of the axis segment, tip-to-tip L + 2R, axis = body z
  (relcp_mpi/bodies/shapes.py).
* SimToolbox: SylinderInitial.dat has two header lines, then `C gid radius mx my mz px py pz [group]` with
  (m, p) the two ends of the axis segment; length = |p - m| (segment length, tip-to-tip length + 2R),
  axis = body z, orientation = FromTwoVectors(e_z, p - m) (Sylinder/SylinderSystem.cpp setInitialFromFile).
  So relcp (R, L, pos, q) -> m,p = pos -/+ (L/2) R(q) e_z.
* walls {point, normal} -> boundaries {type: wall, center, norm}; the peer's wall normal points into the fluid,
  as relcp's.
* body force: not a RunConfig setting in SimToolbox; the driver (peer_bench.cpp) applies it to every body with
  setForceNonBrown each step (--force fx fy fz, printed here).
"""
import argparse
import os

import numpy as np
import yaml

ap = argparse.ArgumentParser()
ap.add_argument("deck")
ap.add_argument("outdir")
ap.add_argument("--tol", type=float, default=1e-5, help="conResTol (the peer's example RunConfigs use 1e-5)")
ap.add_argument("--maxite", type=int, default=100000, help="conMaxIte")
ap.add_argument("--colbuf", type=float, default=0.3,
                help="sylinderColBuf (peer default 0.3: pairs recorded when sep < 2 * 0.3 * R = 0.15 = deck skin)")
a = ap.parse_args()

d = yaml.safe_load(open(a.deck))
os.makedirs(a.outdir, exist_ok=True)
bodies = d["bodies"]
R = {b["radius"] for b in bodies}
L = {b["length"] for b in bodies}
assert all(b["shape"] == "spherocylinder" for b in bodies)
assert len(R) == 1 and len(L) == 1, "one size only (RunConfig needs sylinderLength/Diameter; the .dat carries each)"
R, L = R.pop(), L.pop()
pos = np.array([b["position"] for b in bodies], float)
q = np.array([b["orientation"] for b in bodies], float)
q /= np.linalg.norm(q, axis=1, keepdims=True)
w, x, y, z = q.T
axis = np.stack([2 * (x * z + y * w), 2 * (y * z - x * w), 1 - 2 * (x * x + y * y)], axis=1)  # R(q) e_z
m = pos - 0.5 * L * axis
p = pos + 0.5 * L * axis
with open(os.path.join(a.outdir, "SylinderInitial.dat"), "w") as fh:
    fh.write(f"{len(bodies)}\nconverted from {os.path.basename(a.deck)}\n")
    for i in range(len(bodies)):
        fh.write("C %d %.17g %.17g %.17g %.17g %.17g %.17g %.17g 0\n" % (i, R, *m[i], *p[i]))

box = d["box"]
dt = d["time"]["dt"]
cfg = {
    "rngSeed": int(d.get("seed", 1)),
    "logLevel": 4,                      # spdlog err: no per-step console output
    "timerLevel": 4,
    "simBoxLow": [float(v) for v in box["lo"]],
    "simBoxHigh": [float(v) for v in box["hi"]],
    "simBoxPBC": [bool(v) for v in box["periodic"]],
    "monolayer": False,
    "viscosity": float(d["fluid"]["viscosity"]),
    "KBT": 0.0,                         # no Brownian motion
    "sylinderFixed": False,
    "sylinderNumber": len(bodies),
    "sylinderLength": float(L),
    "sylinderLengthSigma": -1,
    "sylinderDiameter": float(2 * R),
    "sylinderColBuf": a.colbuf,
    "initPreSteps": 0,                  # no collision-resolution pre-steps: start from the deck's state
    "dt": float(dt),
    "timeTotal": 1e6 * dt,
    "timeSnap": 1e6 * dt,               # the driver does not call writeResult anyway
    "conResTol": a.tol,
    "conMaxIte": a.maxite,
    "conSolverChoice": 0,               # BBPGD
    "boundaries": [{"type": "wall", "center": [float(v) for v in wl["point"]],
                    "norm": [float(v) for v in wl["normal"]]} for wl in d.get("walls", [])],
}
with open(os.path.join(a.outdir, "RunConfig.yaml"), "w") as fh:
    fh.write(f"# converted from {a.deck} by tools/peer/deck_to_peer.py\n")
    yaml.safe_dump(cfg, fh, default_flow_style=None, sort_keys=False)
bf = d.get("forces", {}).get("body_force", [0, 0, 0])
print(f"{a.outdir}: {len(bodies)} bodies R={R} L={L} dt={dt} mu={cfg['viscosity']} walls={len(cfg['boundaries'])} "
      f"force: --force {bf[0]} {bf[1]} {bf[2]}")
