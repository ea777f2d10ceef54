#!/usr/bin/env python3
"""Study 2: compaction of a 10,000-ellipsoid suspension (the ReLCP paper's Figure 4 setting).

Runs the same dense initial suspension with ReLCP and with the multi-sphere baseline (LCP-MS) at two or more
resolutions; records per step the constraint rows, active constraints, solver iterations, recursion depth,
wall time and the max smooth-surface overlap; writes results/suspension.csv, results/suspension_summary.csv
(with the ReLCP / LCP-MS ratios) and results/suspension.png.

    mpirun -n 2 .venv/bin/python tools/study_suspension.py [--deck input_decks/ellipsoid_suspension.yaml]
        [--steps N (default: the deck's)] [--resolutions 4,8] [--count N (resize the lattice)]
"""
import argparse

from study_common import machine, model_variants, plt, run_rows, step_line, write_csv


def load_deck(path, steps=None, count=None):
    """The study deck (default input_decks/ellipsoid_suspension.yaml), optionally shortened or resized."""
    from relcp_mpi.config.deck import load, validate
    deck, text = load(path)
    if steps is not None:
        deck["time"]["steps"] = int(steps)
    if count is not None:                       # smaller systems for a quick look: keep the layer height
        raw = yaml_safe(text)
        g = raw["generate"][0]
        side = 2.0 * max(int((count / 11.0) ** 0.5 + 0.999), 2)
        g["count"] = int(count)
        g["region"] = {"lo": [0, 0, 0], "hi": [side, side, 22.0]}
        raw["box"]["hi"] = [side, side, raw["box"]["hi"][2]]
        raw["time"]["steps"] = deck["time"]["steps"]
        deck = validate(raw)
    deck["output"]["progress_every"] = 0
    return deck


def yaml_safe(text):
    import yaml
    return yaml.safe_load(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deck", default="input_decks/ellipsoid_suspension.yaml")
    ap.add_argument("--count", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--resolutions", default="4,8")
    ap.add_argument("--out", default="results")
    a = ap.parse_args()
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    base = load_deck(a.deck, a.steps, a.count)
    rows, summary = [], []
    for label, d in model_variants(base, a.resolutions):

        def show(sim, row):
            if comm.rank == 0 and row["step"] % 10 == 0:
                print(step_line(label, row), flush=True)
        sim, r = run_rows(d, comm=comm, label=label, on_step=show)
        for x in r:
            x["model"] = label
        rows += r
        summary.append({"model": label, "ranks": comm.size, "bodies": sim.n_global, "steps": len(r),
                        "mean_rows": sum(x["constraints"] for x in r) / len(r),
                        "mean_active": sum(x["active"] for x in r) / len(r),
                        "mean_iterations": sum(x["iterations"] for x in r) / len(r),
                        "max_depth": max(x["depth"] for x in r),
                        "max_overlap": max(x["max_overlap"] for x in r),
                        "wall_s": sum(x["wall_s"] for x in r)})
        if comm.rank == 0:
            print(summary[-1], flush=True)
    if comm.rank != 0:
        return
    rl = summary[0]
    for s in summary[1:]:
        s["relcp_over_ms_active"] = rl["mean_active"] / max(s["mean_active"], 1e-300)
        s["relcp_over_ms_rows"] = rl["mean_rows"] / max(s["mean_rows"], 1e-300)
        s["relcp_over_ms_wall"] = rl["wall_s"] / max(s["wall_s"], 1e-300)
    write_csv(f"{a.out}/suspension.csv", rows)
    write_csv(f"{a.out}/suspension_summary.csv", summary)
    p = plt()
    fig, axes = p.subplots(1, 4, figsize=(16, 3.4))
    for lab in [s["model"] for s in summary]:
        rr = [x for x in rows if x["model"] == lab]
        st = [x["step"] for x in rr]
        axes[0].plot(st, [x["active"] for x in rr], label=lab)
        axes[1].plot(st, [x["iterations"] for x in rr], label=lab)
        axes[2].plot(st, [x["wall_s"] for x in rr], label=lab)
        axes[3].semilogy(st, [max(x["max_overlap"], 1e-9) for x in rr], label=lab)
    axes[3].axhline(base["contact"]["overlap_tol"], color="k", ls="--", lw=0.8)
    for ax, t in zip(axes, ["active constraints", "solver iterations", "wall time per step [s]",
                            "max smooth-surface overlap"]):
        ax.set_title(t, fontsize=9)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{summary[0]['bodies']} ellipsoids (1, 0.5, 0.5), {comm.size} rank(s), {machine()}", fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{a.out}/suspension.png", dpi=110)


if __name__ == "__main__":
    main()
