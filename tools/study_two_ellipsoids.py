#!/usr/bin/env python3
"""Study 1: two ellipsoids colliding and sliding past each other under equal and opposite forces.

Max smooth-surface overlap vs time for several dt: ReLCP vs single-constraint SNSD vs multi-sphere (LCP-MS)
at two resolutions.  Writes results/two_ellipsoids.csv, results/two_ellipsoids_summary.csv and
results/two_ellipsoids.png.

    .venv/bin/python tools/study_two_ellipsoids.py [--out results]
"""
import argparse

from study_common import machine, plt, run_rows, write_csv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="results")
    ap.add_argument("--dts", default="0.02,0.05,0.1,0.2")
    a = ap.parse_args()
    from mpi4py import MPI
    from relcp_mpi.config.sections import load_typed, override
    base, text = load_typed("input_decks/two_ellipsoids.yaml")
    models = [("relcp", None), ("snsd", None), ("multisphere", 8), ("multisphere", 16)]
    rows, summary = [], []
    for dt in [float(x) for x in a.dts.split(",")]:
        for model, res in models:
            d = override(base, {"time.dt": dt, "time.steps": int(round(6.0 / dt)), "contact.model": model,
                                **({"contact.ms_resolution": res} if res else {})})
            label = f"{model}{res or ''} dt={dt}"
            sim, r = run_rows(d, comm=MPI.COMM_SELF, label=label)
            for x in r:
                x.update(model=f"{model}{res or ''}", dt=dt)
            rows += r
            summary.append({"model": f"{model}{res or ''}", "dt": dt, "steps": len(r),
                            "max_overlap": max(x["max_overlap"] for x in r),
                            "max_rows": max(x["constraints"] for x in r),
                            "max_active": max(x["active"] for x in r),
                            "max_depth": max(x["depth"] for x in r),
                            "total_iterations": sum(x["iterations"] for x in r),
                            "wall_s": sum(x["wall_s"] for x in r),
                            "final_x0": float(sim.bodies.x[sim.bodies.gid == 0][0, 0]) if 0 in sim.bodies.gid else None})
            print(summary[-1], flush=True)
    write_csv(f"{a.out}/two_ellipsoids.csv", rows)
    write_csv(f"{a.out}/two_ellipsoids_summary.csv", summary)
    p = plt()
    dts = sorted({x["dt"] for x in rows})
    fig, axes = p.subplots(1, len(dts), figsize=(4 * len(dts), 3.4), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, dt in zip(axes, dts):
        for m in [f"{m}{r or ''}" for m, r in models]:
            rr = [x for x in rows if x["dt"] == dt and x["model"] == m]
            ax.semilogy([x["time"] for x in rr], [max(x["max_overlap"], 1e-9) for x in rr], label=m)
        ax.axhline(base.contact.overlap_tol, color="k", ls="--", lw=0.8, label="overlap_tol")
        ax.set_title(f"dt = {dt}")
        ax.set_xlabel("time")
    axes[0].set_ylabel("max smooth-surface overlap")
    axes[-1].legend(fontsize=7)
    fig.suptitle(f"Two sliding ellipsoids ({machine()})", fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{a.out}/two_ellipsoids.png", dpi=120)


if __name__ == "__main__":
    main()
