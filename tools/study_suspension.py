#!/usr/bin/env python3
"""Study 2: compaction of a 10,000-ellipsoid suspension (the ReLCP paper's Figure 4 setting).

Runs the same dense initial suspension with ReLCP and with the multi-sphere baseline (LCP-MS) at two or more
resolutions; records per step the constraint rows, active constraints, solver iterations, recursion depth,
wall time and the max smooth-surface overlap; writes results/<tag>.csv, results/<tag>_summary.csv (with the
ReLCP / LCP-MS ratios) and results/<tag>.png (tag ``suspension``).

``--equal-resolution`` adds the LCP-MS resolution whose surface roughness matches ``contact.overlap_tol``:
the smallest proxy count n whose proxy (a line of inscribed spheres) lies within ``--gap-factor`` x
overlap_tol of every ellipsoid's surface (the Hausdorff gap, :func:`relcp_mpi.contact.multisphere.
resolution_for_gap`; geometric, no run needed).  Two proxied bodies touching then overlap by at most twice the
gap on their smooth surfaces, a wall contact by the gap.  The summary's ReLCP / LCP-MS ratios of rows, active
constraints, iterations and wall time at that resolution are the comparison of the paper's abstract ("fewer
collision constraints to achieve the same surface resolution"); tag ``suspension_equal_resolution``.

    mpirun -n 2 .venv/bin/python tools/study_suspension.py [--deck input_decks/ellipsoid_suspension.yaml]
        [--steps N (default: the deck's)] [--resolutions 4,8] [--count N (resize the lattice)]
        [--equal-resolution [--gap-factor 1.0]]
"""
import argparse
import dataclasses

from study_common import machine, model_variants, plt, run_rows, step_line, write_csv


def load_deck(path, steps=None, count=None):
    """The study deck (typed; default input_decks/ellipsoid_suspension.yaml), optionally shortened or resized
    (``count`` bodies on the same lattice spacing and layer height, in a smaller laterally periodic box)."""
    from relcp_mpi.config.sections import load_typed, override
    deck, _ = load_typed(path)
    changes = {"output.progress_every": 0}
    if steps is not None:
        changes.update({"time.steps": int(steps), "time.t_end": None})
    if count is not None:                       # smaller systems: keep the layer height and the spacing
        g = dataclasses.asdict(deck.generate[0])
        side = 2.0 * max(int((count / 11.0) ** 0.5 + 0.999), 2)
        g.update(count=int(count), region={"lo": [0, 0, 0], "hi": [side, side, 22.0]})
        changes.update({"generate": [g], "box.hi": [side, side, deck.box.hi[2]]})
    return override(deck, changes, source=path)


def equal_resolution(deck, factor=1.0):
    """(n, gap): the smallest LCP-MS proxy count whose roughness (Hausdorff gap between proxy and smooth
    surface, worst body of the deck) is at most ``factor * contact.overlap_tol``."""
    import numpy as np

    from relcp_mpi.bodies.shapes import KIND_CODES
    from relcp_mpi.contact.multisphere import resolution_for_gap
    specs = list(deck.bodies) + list(deck.generate)
    kind = np.array([KIND_CODES[b.shape] for b in specs])
    shape = np.array([_shape_params(b) for b in specs], float)
    return resolution_for_gap(kind, shape, factor * deck.contact.overlap_tol)


def _shape_params(b):
    """The (3,) shape row of a body/generator spec (see relcp_mpi.bodies.shapes)."""
    if b.shape == "ellipsoid":
        return list(b.axes)
    if b.shape == "spherocylinder":
        return [b.radius, b.length, 0.0]
    if b.shape == "ring":
        return [b.ring_radius, b.radius, 0.0]
    return [b.radius, 0.0, 0.0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deck", default="input_decks/ellipsoid_suspension.yaml")
    ap.add_argument("--count", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--resolutions", default="4,8")
    ap.add_argument("--equal-resolution", action="store_true",
                    help="add the LCP-MS proxy count whose roughness matches overlap_tol (see the docstring)")
    ap.add_argument("--gap-factor", type=float, default=1.0, help="target gap = factor x overlap_tol")
    ap.add_argument("--out", default="results")
    a = ap.parse_args()
    from mpi4py import MPI
    from relcp_mpi.contact.multisphere import proxy_gap
    from relcp_mpi.bodies.shapes import ELLIPSOID
    comm = MPI.COMM_WORLD
    base = load_deck(a.deck, a.steps, a.count)
    tol = base.contact.overlap_tol
    resolutions = [int(r) for r in a.resolutions.split(",") if r.strip()]
    n_eq, gap_eq = None, None
    if a.equal_resolution:
        n_eq, gap_eq = equal_resolution(base, a.gap_factor)
        resolutions = sorted(set(resolutions) | {n_eq})
        if comm.rank == 0:
            print(f"equal surface resolution: {n_eq} proxy spheres per body, roughness {gap_eq:.3e} <= "
                  f"{a.gap_factor:g} x overlap_tol {tol:g}", flush=True)
    tag = "suspension_equal_resolution" if a.equal_resolution else "suspension"
    ell = [tuple(g.axes) for g in base.generate if g.shape == "ellipsoid"]
    rows, summary = [], []
    for label, d in model_variants(base, resolutions):

        def show(sim, row):
            if comm.rank == 0 and row["step"] % 10 == 0:
                print(step_line(label, row), flush=True)
        sim, r = run_rows(d, comm=comm, label=label, on_step=show)
        for x in r:
            x["model"] = label
        rows += r
        res = d.contact.ms_resolution if d.contact.model == "multisphere" else None
        summary.append({"model": label, "ranks": comm.size, "bodies": sim.n_global, "steps": len(r),
                        "proxy_spheres": res or "",
                        "proxy_gap": float(max(proxy_gap([ELLIPSOID] * len(ell), ell, res))) if res and ell else "",
                        "equal_resolution": bool(res is not None and res == n_eq),
                        "mean_rows": sum(x["constraints"] for x in r) / len(r),
                        "mean_active": sum(x["active"] for x in r) / len(r),
                        "mean_iterations": sum(x["iterations"] for x in r) / len(r),
                        "max_depth": max(x["depth"] for x in r),
                        "max_overlap": max(x["max_overlap"] for x in r),
                        "steps_over_tol": sum(x["max_overlap"] > tol for x in r),
                        "wall_s": sum(x["wall_s"] for x in r)})
        if comm.rank == 0:
            print(summary[-1], flush=True)
    if comm.rank != 0:
        return
    rl = summary[0]
    for s in summary[1:]:
        s["relcp_over_ms_active"] = rl["mean_active"] / max(s["mean_active"], 1e-300)
        s["relcp_over_ms_rows"] = rl["mean_rows"] / max(s["mean_rows"], 1e-300)
        s["relcp_over_ms_iterations"] = rl["mean_iterations"] / max(s["mean_iterations"], 1e-300)
        s["relcp_over_ms_wall"] = rl["wall_s"] / max(s["wall_s"], 1e-300)
    write_csv(f"{a.out}/{tag}.csv", rows)
    write_csv(f"{a.out}/{tag}_summary.csv", summary)
    p = plt()
    fig, axes = p.subplots(1, 4, figsize=(16, 3.4))
    for lab in [s["model"] for s in summary]:
        rr = [x for x in rows if x["model"] == lab]
        st = [x["step"] for x in rr]
        name = lab + (" (equal resolution)" if n_eq is not None and lab == f"multisphere{n_eq}" else "")
        axes[0].plot(st, [x["constraints"] for x in rr], label=name)
        axes[1].plot(st, [x["active"] for x in rr], label=name)
        axes[2].plot(st, [x["wall_s"] for x in rr], label=name)
        axes[3].semilogy(st, [max(x["max_overlap"], 1e-9) for x in rr], label=name)
    axes[3].axhline(tol, color="k", ls="--", lw=0.8)
    for ax, t in zip(axes, ["constraint rows", "active constraints", "wall time per step [s]",
                            "max smooth-surface overlap"]):
        ax.set_title(t, fontsize=9)
        ax.set_xlabel("step")
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{summary[0]['bodies']} ellipsoids {ell[0] if ell else ''}, {comm.size} rank(s), {machine()}",
                 fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{a.out}/{tag}.png", dpi=110)


if __name__ == "__main__":
    main()
