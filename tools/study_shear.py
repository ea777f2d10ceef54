#!/usr/bin/env python3
"""Validation study of the imposed shear flow with Lees--Edwards boundaries (issue 13, item 3).

1. Jeffery orbits: a prolate ellipsoid (aspect ratio 3) and a spherocylinder (tip-to-tip aspect ratio 2.5, the
   equivalent-ellipsoid approximation of relcp_mpi.physics.flow) alone in simple shear; the angle of the axis in
   the flow-gradient plane against the analytic orbit tan(phi) = tan(psi) / r, psi = psi0 - gdot r t / (r^2 + 1),
   and the measured period against 2 pi / gdot (r + 1/r).
2. Contact viscosity of a sheared sphere suspension (deck input_decks/shear_suspension.yaml, no walls, with
   the spheres placed at random by random sequential addition) at several volume fractions: the time average (second half of the run) of the constraint stress's
   (sigma_xy + sigma_yx) / 2 / gdot, with its standard error from block averages.

Writes results/shear_jeffery.csv, results/shear_viscosity.csv and results/shear.png.

    mpirun -n 2 .venv/bin/python tools/study_shear.py [--phis 0.05,0.1,0.2] [--count 300] [--steps 400]
"""
import argparse
import copy

import numpy as np
from study_common import machine, plt, run_rows, write_csv


def jeffery_run(body, aspect, rate=1.0, per_period=200, periods=1.2):
    """(t, measured axis angle phi (unwrapped), analytic phi, measured period) of one body alone in shear."""
    from mpi4py import MPI
    from relcp_mpi.basics import quaternion as quat
    from relcp_mpi.config.deck import validate
    from relcp_mpi.physics.flow import jeffery_period
    T = jeffery_period(aspect, rate)
    dt = T / per_period
    n = int(periods * per_period)
    deck = validate({"name": "jeffery", "time": {"dt": dt, "steps": n},
                     "box": {"lo": [-5, -5, -5], "hi": [5, 5, 5], "periodic": [True, True, True]},
                     "flow": {"type": "shear", "rate": rate},
                     "bodies": [dict(body, position=[0, 0, 0],
                                     orientation={"axis": [1, 0, 0], "angle": -np.pi / 2})],
                     "output": {"trajectory_every": 0, "progress_every": 0}})
    axes = []
    run_rows(deck, comm=MPI.COMM_SELF,
             on_step=lambda s, row: axes.append(quat.rotate(s.bodies.q, [[0, 0, 1.0]])[0]))
    p = np.array(axes)
    t = dt * np.arange(n + 1)
    phi = np.unwrap(np.concatenate([[np.pi / 2], np.arctan2(p[:, 1], p[:, 0])]))
    psi = np.pi / 2 - rate * aspect * t / (aspect ** 2 + 1)
    exact = np.unwrap(np.arctan2(np.sin(psi), aspect * np.cos(psi)))
    target = np.pi / 2 - 2 * np.pi
    k = np.flatnonzero(phi <= target)[0]
    period = t[k - 1] + (target - phi[k - 1]) / (phi[k] - phi[k - 1]) * dt
    return t, phi, exact, period, T


def at_volume_fraction(base, phi, count, steps):
    """The suspension deck with ``count`` spheres at random positions (random sequential addition) in a cube
    sized for volume fraction ``phi`` (the deck's jittered lattice starts with rows along the flow that collide
    only slowly: a long transient)."""
    from tests.helpers import random_sphere_bodies
    d = copy.deepcopy(base)
    g = d.pop("generate")[0]
    L = float((count * 4.0 / 3.0 * np.pi * g["radius"] ** 3 / phi) ** (1.0 / 3.0))
    d["box"]["lo"], d["box"]["hi"] = [0.0] * 3, [L] * 3
    d["bodies"] = random_sphere_bodies(count, L, g["radius"], seed=d["seed"])
    d["time"]["steps"] = steps
    d["output"].update(trajectory_every=0, progress_every=0, checkpoint_every=0)
    return d


def viscosity_rows(base, phis, count, steps, comm):
    """One summary row per volume fraction: mean contact viscosity over the second half, its standard error
    (8 block averages), mean active contacts, max overlap, wall time."""
    from relcp_mpi.config.deck import validate
    out, per_step = [], []
    for phi in phis:
        _, rows = run_rows(validate(at_volume_fraction(base, phi, count, steps)), comm=comm, label=f"phi={phi}")
        eta = np.array([r["contact_viscosity"] for r in rows[steps // 2:]])
        blocks = np.array([b.mean() for b in np.array_split(eta, 8)])
        out.append({"phi": phi, "bodies": count, "steps": steps, "eta_contact": float(eta.mean()),
                    "stderr": float(blocks.std(ddof=1) / np.sqrt(len(blocks))),
                    "mean_active": float(np.mean([r["active"] for r in rows[steps // 2:]])),
                    "max_overlap": max(r["max_overlap"] for r in rows),
                    "max_depth": max(r["depth"] for r in rows), "wall_s": float(sum(r["wall_s"] for r in rows))})
        per_step += [{"phi": phi, "step": r["step"], "contact_viscosity": r["contact_viscosity"],
                      "active": r["active"]} for r in rows]
    return out, per_step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="results")
    ap.add_argument("--phis", default="0.05,0.1,0.2")
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--steps", type=int, default=400)
    a = ap.parse_args()
    from mpi4py import MPI
    from relcp_mpi.config.deck import load
    comm = MPI.COMM_WORLD
    jeff = {}
    if comm.rank == 0:
        for name, body, r in [("ellipsoid r=3", {"shape": "ellipsoid", "axes": [0.5, 0.5, 1.5]}, 3.0),
                              ("spherocylinder r=2.5", {"shape": "spherocylinder", "radius": 0.4, "length": 1.2},
                               2.5)]:
            jeff[name] = jeffery_run(body, r)
    base, _ = load("input_decks/shear_suspension.yaml")
    visc, per_step = viscosity_rows(base, [float(p) for p in a.phis.split(",")], a.count, a.steps, comm)
    if comm.rank != 0:
        return
    jrows = []
    for name, (t, phi, exact, period, T) in jeff.items():
        print(f"{name}: Jeffery period measured {period:.5f}, analytic {T:.5f} (rel. error {period / T - 1:.1e}), "
              f"max |phi - phi_exact| {np.abs(phi - exact).max():.2e} rad")
        jrows += [{"body": name, "t": float(ti), "phi": float(p), "phi_exact": float(e), "period": period,
                   "period_exact": T} for ti, p, e in zip(t, phi, exact)]
    for r in visc:
        print(f"phi={r['phi']:.3f}: contact viscosity {r['eta_contact']:.4g} +- {r['stderr']:.2g}, "
              f"mean active {r['mean_active']:.1f}, max overlap {r['max_overlap']:.2e}, wall {r['wall_s']:.0f} s")
    write_csv(f"{a.out}/shear_jeffery.csv", jrows)
    write_csv(f"{a.out}/shear_viscosity.csv", visc)
    write_csv(f"{a.out}/shear_viscosity_steps.csv", per_step)
    p = plt()
    fig, ax = p.subplots(1, 2, figsize=(11, 4.2))
    for (name, (t, phi, exact, period, T)), c in zip(jeff.items(), ("C0", "C1")):
        ax[0].plot(t / T, np.degrees(phi), c, lw=2.5, alpha=0.6, label=f"{name}: relcp_mpi")
        ax[0].plot(t / T, np.degrees(exact), "k--", lw=1, label="Jeffery (analytic)" if c == "C0" else None)
    ax[0].set(xlabel="t / T_Jeffery", ylabel="axis angle from flow axis [deg]",
              title="Jeffery orbits in simple shear (gdot = 1)")
    ax[0].legend(fontsize=8)
    ph = np.array([r["phi"] for r in visc])
    eta = np.array([r["eta_contact"] for r in visc])
    err = np.array([r["stderr"] for r in visc])
    ax[1].errorbar(ph, eta, yerr=err, fmt="o-", capsize=3, label="relcp_mpi (mean, 2nd half)")
    ref = eta[-1] * (ph / ph[-1]) ** 2
    ax[1].plot(ph, ref, "k:", label="~ phi^2 (pair collisions)")
    ax[1].set(xlabel="volume fraction phi", ylabel="contact viscosity (sigma_xy / gdot) [mu]",
              title=f"Sheared spheres, Lees-Edwards, {visc[0]['bodies']} bodies")
    ax[1].legend(fontsize=8)
    fig.suptitle(machine(), fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{a.out}/shear.png", dpi=120)
    print(f"wrote {a.out}/shear.png")


if __name__ == "__main__":
    main()
