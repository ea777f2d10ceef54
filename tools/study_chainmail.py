#!/usr/bin/env python3
"""Study 3: a chainmail net of interlaced rigid rings (tori) sagging under a smooth load.

Runs input_decks/chainmail.yaml (tools/make_chainmail_deck.py: 6 x 6 flat rings with fixed boundary, 60 link
rings, constant body force on the free rings; the net sags, the links go taut near t = 75 and the net settles)
with ReLCP (exact torus geometry, certified ring-ring SNSD) and with the multi-sphere ring proxy (LCP-MS,
``contact.ms_resolution`` spheres of the tube radius on the centre circle) at several resolutions.  Records per
step and model the constraint rows, active rows, recursion depth, solver iterations, the max smooth-surface
(true torus) overlap, the wall time of the step, the number of initially interlaced ring pairs still
interlaced and the lowest ring centre; writes results/chainmail.csv, results/chainmail_summary.csv and
results/chainmail.png.  Exit status 1 if ReLCP exceeded contact.overlap_tol at any step.

About 1.5 minutes on one core (defaults):

    cd /work/main && source tools/env.sh && .venv/bin/python tools/study_chainmail.py [--resolutions 8,16,32]
        [--steps 240] [--deck input_decks/chainmail.yaml] [--out results]
"""
import argparse
import sys

import numpy as np

from study_common import machine, model_variants, plt, run_rows, step_line, write_csv


def _all_bodies(sim):
    """(x, q, kind, shape) of all bodies ordered by gid, on every rank."""
    b = sim.bodies
    parts = sim.comm.allgather((b.gid, b.x, b.q, b.kind, b.shape))
    gid = np.concatenate([p[0] for p in parts])
    o = np.argsort(gid)
    return tuple(np.concatenate([p[k] for p in parts])[o] for k in range(1, 5))


def initially_linked(deck):
    """Index pairs (by body order = gid) of interlaced rings in the deck's initial configuration."""
    from relcp_mpi.bodies.builder import build_bodies
    from relcp_mpi.bodies.shapes import RING, bounding_radius
    from relcp_mpi.contact.neighbors import candidate_pairs
    from relcp_mpi.geometry.torus import rings_linked
    b = build_bodies(deck)
    o = np.argsort(b.gid)
    x, q, k, s = b.x[o], b.q[o], b.kind[o], b.shape[o]
    i, j = candidate_pairs(x, bounding_radius(k, s), 0.0)
    ring = (k[i] == RING) & (k[j] == RING)
    i, j = i[ring], j[ring]
    lk = rings_linked(x[i], q[i], s[i, 0], x[j], q[j], s[j, 0])
    return np.stack([i[lk], j[lk]], axis=1)


def link_state(sim, pairs):
    from relcp_mpi.geometry.contact import pair_snsd
    from relcp_mpi.geometry.torus import rings_linked
    x, q, k, s = _all_bodies(sim)
    i, j = pairs[:, 0], pairs[:, 1]
    lk = rings_linked(x[i], q[i], s[i, 0], x[j], q[j], s[j, 0])
    g = pair_snsd(k[i], s[i], x[i], q[i], k[j], s[j], x[j], q[j], check=False)
    return int(lk.sum()), float(g.sep.min()), float(x[:, 2].min())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deck", default="input_decks/chainmail.yaml")
    ap.add_argument("--steps", type=int, default=None, help="default: the deck's time.steps")
    ap.add_argument("--resolutions", default="8,16,32", help="multi-sphere proxy resolutions (spheres per ring)")
    ap.add_argument("--out", default="results")
    a = ap.parse_args()
    from mpi4py import MPI
    from relcp_mpi.config.sections import load_typed, override
    comm = MPI.COMM_WORLD
    base, text = load_typed(a.deck)
    if a.steps is not None:
        base = override(base, {"time.steps": a.steps})
    tol = float(base.contact.overlap_tol)
    pairs = initially_linked(base)
    rows, summary = [], []
    for label, d in model_variants(base, a.resolutions):

        def on_step(sim, row):
            nl, smin, zmin = link_state(sim, pairs)
            row.update(linked=nl, min_link_sep=smin, z_min=zmin)
            if comm.rank == 0 and row["step"] % 20 == 0:
                print(step_line(label, row, f" linked {nl}/{len(pairs)} z_min {zmin:.3f}"), flush=True)
        sim, r = run_rows(d, comm=comm, label=label, on_step=on_step)
        keep = ("step", "time", "constraints", "active", "depth", "iterations", "max_overlap", "wall_s",
                "linked", "min_link_sep", "z_min")
        r = [dict(model=label, **{k: x[k] for k in keep}) for x in r]
        rows += r
        summary.append({"model": label, "ms_resolution": d.contact.ms_resolution if label != "relcp" else "", "ranks": comm.size, "bodies": sim.n_global,
                        "steps": len(r), "dt": d.time.dt, "overlap_tol": tol,
                        "max_overlap": max(x["max_overlap"] for x in r),
                        "steps_over_tol": sum(x["max_overlap"] > tol for x in r),
                        "mean_constraints": float(np.mean([x["constraints"] for x in r])),
                        "max_constraints": max(x["constraints"] for x in r),
                        "mean_active": float(np.mean([x["active"] for x in r])),
                        "mean_iterations": float(np.mean([x["iterations"] for x in r])),
                        "max_depth": max(x["depth"] for x in r),
                        "linked_pairs": len(pairs), "links_lost": len(pairs) - r[-1]["linked"],
                        "final_z_min": r[-1]["z_min"],
                        "wall_s": sum(x["wall_s"] for x in r)})
        if comm.rank == 0:
            print(summary[-1], flush=True)
    if comm.rank != 0:
        return 0
    write_csv(f"{a.out}/chainmail.csv", rows)
    write_csv(f"{a.out}/chainmail_summary.csv", summary)
    p = plt()
    fig, axes = p.subplots(1, 3, figsize=(14, 3.8))
    for s in summary:
        rr = [x for x in rows if x["model"] == s["model"]]
        st = [x["step"] for x in rr]
        axes[0].semilogy(st, [max(x["max_overlap"], 1e-7) for x in rr], label=s["model"])
        axes[1].plot(st, [x["constraints"] for x in rr], label=s["model"])
        axes[2].plot(st, [x["linked"] for x in rr], label=s["model"])
    axes[0].axhline(tol, color="k", ls="--", lw=0.8, label="overlap_tol")
    for ax, t in zip(axes, ["max smooth-surface (torus) overlap (floored at 1e-7)", "constraint rows",
                            f"interlaced pairs still interlaced (of {len(pairs)})"]):
        ax.set_title(t, fontsize=9)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Chainmail, {summary[0]['bodies']} rings, dt = {base['time']['dt']}, {comm.size} rank(s), "
                 f"{machine()}", fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{a.out}/chainmail.png", dpi=110)
    rl = summary[0]
    ok = rl["steps_over_tol"] == 0
    print(f"ReLCP max overlap {rl['max_overlap']:.3e} (overlap_tol {tol:g}): "
          f"{'below the tolerance at every step' if ok else 'EXCEEDED at %d step(s)' % rl['steps_over_tol']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
