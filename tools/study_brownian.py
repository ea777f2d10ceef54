#!/usr/bin/env python3
"""Brownian motion validation study (issue 13 item 1) -> ``results/brownian_diffusion.csv``,
``results/brownian_gr.csv``, ``results/brownian_summary.csv`` and ``results/brownian.png``.

1. Free spheres (radius 0.5, kT = 1, viscosity 1): mean-square displacement MSD(t) = 6 D_t t and the
   orientation decorrelation <u(t).u(0)> = exp(-2 D_r t) against Stokes--Einstein.
2. Free prolate ellipsoids (semi-axes 0.4, 0.4, 1.0): translation along / across the axis in the body frame,
   MSD_par = 2 D_par t, MSD_perp (two axes) = 4 D_perp t, and <u(t).u(0)> = exp(-2 Dr_perp t) against Perrin's
   closed forms (:func:`relcp_mpi.physics.diffusion.perrin_prolate`).
3. Brownian hard spheres at volume fraction 0.1 (``input_decks/brownian_spheres.yaml``): g(r) near contact,
   extrapolated to r = sigma, against the Carnahan--Starling contact value.

Error bars are standard errors over independent samples: bodies x non-overlapping time windows (free
bodies), independent time blocks (g(r)).  ``tests/test_brownian_validation.py`` (``-m slow``) runs the same
functions on smaller systems and asserts agreement within the statistical error.

    source tools/env.sh; .venv/bin/python tools/study_brownian.py [--quick]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relcp_mpi.basics import quaternion as quat                      # noqa: E402
from relcp_mpi.physics import diffusion as dif                       # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KT, MU = 1.0, 1.0


def _lattice_box(n, spacing):
    side = int(np.ceil(n ** (1.0 / 3.0) - 1e-9))
    return side * spacing


def free_run(shape, n, window, windows, dt, seed=3, comm=None, spacing=6.0):
    """Run ``n`` free bodies (``shape``: 'sphere' or 'ellipsoid') on a dilute periodic lattice for
    ``window * windows`` steps of ``dt``; returns (Recorder arrays (x, q, xb), box length)."""
    from mpi4py import MPI
    from relcp_mpi import Simulation
    from relcp_mpi.config.deck import validate
    L = _lattice_box(n, spacing)
    body = {"shape": "sphere", "radius": 0.5} if shape == "sphere" else \
        {"shape": "ellipsoid", "axes": [0.4, 0.4, 1.0]}
    # a rare collision of two ellipsoids under a large random rotation can give a grown LCP the solver does not
    # finish: such a step is redone as two halves of the same Brownian path (time.max_halvings; the early
    # trial-rotation stop is off: free bodies in this dilute system rotate by ~10 deg per step)
    raw = {"name": f"brownian_free_{shape}", "seed": seed,
           "time": {"dt": dt, "steps": window * windows, "max_halvings": 4},
           "box": {"lo": [0, 0, 0], "hi": [L, L, L], "periodic": [True, True, True]},
           "fluid": {"viscosity": MU, "kT": KT},
           "generate": [dict(body, count=n, method="lattice", spacing=spacing, orientation="random",
                             region={"lo": [0, 0, 0], "hi": [L, L, L]})],
           "contact": {"skin": 0.2, "max_trial_rotation": 0.0},
           "output": {"trajectory_every": 0, "progress_every": 0}}
    sim = Simulation.from_deck(validate(raw), comm=comm or MPI.COMM_WORLD)
    rec = dif.Recorder([L, L, L])
    rec.start(sim)
    sim.run(writers=[], on_step=rec)
    return rec.arrays(), L


def diffusion_rows(shape, arrays, window, lags, dt):
    """One row per (quantity, lag): measured value, standard error, analytic value."""
    x, q, xb = arrays
    axis = quat.rotate(q.reshape(-1, 4), np.tile([0.0, 0.0, 1.0], (q.shape[0] * q.shape[1], 1))).reshape(x.shape)
    rows = []
    if shape == "sphere":
        Dt, Dr = dif.stokes_einstein(0.5, MU, KT)
        msd = {lag: np.einsum("ij,ij->i", d, d) for lag, d in dif.window_samples(x, window, lags).items()}
        refs = {"msd": lambda t: 6 * Dt * t}
        series = {"msd": msd}
    else:
        p = dif.perrin_prolate(1.0, 0.4, MU, KT)
        Dr = p["Dr_perp"]
        s = dif.window_samples(xb, window, lags)
        series = {"msd_par": {lag: d[:, 2] ** 2 for lag, d in s.items()},
                  "msd_perp": {lag: d[:, 0] ** 2 + d[:, 1] ** 2 for lag, d in s.items()}}
        refs = {"msd_par": lambda t: 2 * p["D_par"] * t, "msd_perp": lambda t: 4 * p["D_perp"] * t}
    series["axis_corr"] = dif.axis_products(axis, window, lags)
    refs["axis_corr"] = lambda t: np.exp(-2 * Dr * t)
    for name, per_lag in series.items():
        for lag, samples in per_lag.items():
            m, se = dif.mean_and_error(samples)
            t = lag * dt
            rows.append({"body": shape, "quantity": name, "t": t, "value": float(m), "stderr": float(se),
                         "analytic": float(refs[name](t)), "samples": len(samples)})
    return rows


def hard_sphere_run(steps, equilibrate, every=5, comm=None, deck_path=None, bins=None):
    """Brownian hard spheres of ``input_decks/brownian_spheres.yaml``: run ``equilibrate`` steps, then
    ``steps`` steps recording g(r) every ``every`` steps.  Returns (edges, g per frame (F, B), phi, pressures
    of the sampled steps, n/V)."""
    from mpi4py import MPI
    from relcp_mpi import Simulation
    from relcp_mpi.config.deck import load
    deck, _ = load(deck_path or os.path.join(ROOT, "input_decks", "brownian_spheres.yaml"))
    comm = comm or MPI.COMM_WORLD
    sim = Simulation.from_deck(deck, comm=comm)
    box = np.subtract(deck["box"]["hi"], deck["box"]["lo"])
    n = sim.n_global
    a = deck["generate"][0]["radius"]
    phi = n * 4.0 / 3.0 * np.pi * a ** 3 / np.prod(box)
    edges = bins if bins is not None else np.linspace(2 * a, 2 * a + 0.6, 31)
    sim.run(equilibrate, writers=[])
    frames, pressure = [], []

    def sample(s):
        pressure.append(s.diag["pressure"])
        if s.step % every == 0:
            _, x = s.gather("x")
            frames.append(dif.pair_distribution(x, box, edges))
    sim.run(steps, writers=[], on_step=sample)
    return edges, np.array(frames), phi, np.array(pressure), n / np.prod(box)


def contact_value(edges, g_frames, sigma, fit_from, fit_to, blocks=10):
    """g(sigma) by a linear least-squares fit of g(r) on the bins with centres in [fit_from, fit_to],
    extrapolated to r = sigma, for each of ``blocks`` consecutive blocks of frames: (mean, standard error over
    the blocks, mean g per bin)."""
    centres = 0.5 * (edges[1:] + edges[:-1])
    sel = (centres >= fit_from) & (centres <= fit_to)
    vals = []
    for blk in np.array_split(g_frames, blocks):
        g = blk.mean(axis=0)
        c = np.polyfit(centres[sel] - sigma, g[sel], 1)
        vals.append(c[-1])
    m, se = dif.mean_and_error(vals)
    return float(m), float(se), g_frames.mean(axis=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller systems (a smoke run of the script)")
    a = ap.parse_args()
    from mpi4py import MPI
    from tools.study_common import plt, write_csv
    comm = MPI.COMM_WORLD
    f = 0.25 if a.quick else 1.0
    res = os.path.join(ROOT, "results")
    # free spheres: D_t = 0.106, D_r = 0.318; windows of 1.6 time units
    dt_s, win_s = 0.02, 80
    lags_s = list(range(4, win_s + 1, 4))
    arr_s, _ = free_run("sphere", int(343 * f), win_s, 10, dt_s, comm=comm)
    rows = diffusion_rows("sphere", arr_s, win_s, lags_s, dt_s)
    # free prolate ellipsoids: D_par = 0.102, D_perp = 0.085, Dr_perp = 0.131; windows of 4 time units
    dt_e, win_e = 0.05, 80
    lags_e = list(range(4, win_e + 1, 4))
    arr_e, _ = free_run("ellipsoid", int(343 * f), win_e, 8, dt_e, comm=comm)
    rows += diffusion_rows("ellipsoid", arr_e, win_e, lags_e, dt_e)
    # hard spheres at phi = 0.1
    edges, gf, phi, pres, dens = hard_sphere_run(int(4000 * f), 1000 if not a.quick else 200, comm=comm)
    g0, g0_se, gmean = contact_value(edges, gf, 1.0, 1.05, 1.25)
    gcs = dif.carnahan_starling_contact(phi)
    p_mean, p_se = dif.mean_and_error([b.mean() for b in np.array_split(pres, 10)])
    if comm.rank != 0:
        return
    write_csv(os.path.join(res, "brownian_diffusion.csv"), rows)
    centres = 0.5 * (edges[1:] + edges[:-1])
    write_csv(os.path.join(res, "brownian_gr.csv"), [{"r": float(r), "g": float(g)} for r, g in zip(centres, gmean)])
    summary = [{"quantity": "g_contact", "value": g0, "stderr": g0_se, "reference": gcs,
                "note": f"phi={phi:.4f}, Carnahan-Starling; first-order virial 1+2.5phi={1 + 2.5 * phi:.4f}"},
               {"quantity": "collision_pressure", "value": float(p_mean), "stderr": float(p_se),
                "reference": float(dens * KT * 4 * phi * gcs), "note": "n kT 4 phi g_CS(sigma)"}]
    for r in rows:
        if r["t"] == max(x["t"] for x in rows if x["body"] == r["body"]):
            summary.append({"quantity": f"{r['body']}_{r['quantity']}_t{r['t']:g}", "value": r["value"],
                            "stderr": r["stderr"], "reference": r["analytic"], "note": f"{r['samples']} samples"})
    write_csv(os.path.join(res, "brownian_summary.csv"), summary)
    for s in summary:
        print(f"{s['quantity']:>32s}: {s['value']:.4f} +- {s['stderr']:.4f} (reference {s['reference']:.4f}) "
              f"{s['note']}")
    p = plt()
    fig, ax = p.subplots(1, 3, figsize=(15, 4.3))
    styles = {("sphere", "msd"): ("C0", "spheres: MSD, 6 $D_t t$"),
              ("ellipsoid", "msd_par"): ("C1", "ellipsoids: body-frame MSD$_\\parallel$, 2 $D_\\parallel t$"),
              ("ellipsoid", "msd_perp"): ("C2", "ellipsoids: body-frame MSD$_\\perp$, 4 $D_\\perp t$")}
    for (body, qty), (col, lab) in styles.items():
        rr = [r for r in rows if r["body"] == body and r["quantity"] == qty]
        t = np.array([r["t"] for r in rr])
        ax[0].errorbar(t, [r["value"] for r in rr], yerr=[2 * r["stderr"] for r in rr], fmt="o", ms=3, color=col,
                       label=lab)
        tt = np.linspace(0, t.max(), 50)
        ax[0].plot(tt, [r["analytic"] / r["t"] for r in rr][0] * tt, "-", color=col, lw=1)
    ax[0].set_xlabel("t [T]")
    ax[0].set_ylabel("mean-square displacement [L$^2$]")
    ax[0].set_title("free diffusion (lines: Stokes-Einstein / Perrin)")
    ax[0].legend(fontsize=8)
    for body, col, lab in (("sphere", "C0", "spheres, exp(-2 $D_r t$)"),
                           ("ellipsoid", "C1", "ellipsoid axis, exp(-2 $D_{r\\perp} t$)")):
        rr = [r for r in rows if r["body"] == body and r["quantity"] == "axis_corr"]
        t = np.array([r["t"] for r in rr])
        ax[1].errorbar(t, [r["value"] for r in rr], yerr=[2 * r["stderr"] for r in rr], fmt="o", ms=3, color=col,
                       label=lab)
        ax[1].plot(t, [r["analytic"] for r in rr], "-", color=col, lw=1)
    ax[1].set_yscale("log")
    ax[1].set_xlabel("t [T]")
    ax[1].set_ylabel("<u(t).u(0)>")
    ax[1].set_title("orientation decorrelation")
    ax[1].legend(fontsize=8)
    ax[2].plot(centres, gmean, "o-", ms=3, label="ReLCP Brownian hard spheres")
    ax[2].errorbar([1.0], [g0], yerr=[2 * g0_se], fmt="s", color="C3", label=f"fit extrapolated: {g0:.3f}")
    ax[2].plot([1.0], [gcs], "k*", ms=10, label=f"Carnahan-Starling {gcs:.3f}")
    ax[2].axhline(1.0, color="grey", lw=0.5)
    ax[2].set_xlabel("r / $\\sigma$")
    ax[2].set_ylabel("g(r)")
    ax[2].set_title(f"hard spheres, $\\phi$ = {phi:.3f} (error bars: 2 s.e.)")
    ax[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(res, "brownian.png"), dpi=110)
    print("wrote", os.path.join(res, "brownian.png"))


if __name__ == "__main__":
    main()
