#!/usr/bin/env python3
"""Throughput of the batched contact-geometry kernels (pairs per second), and an optional oracle check.

    source tools/env.sh
    /usr/bin/python3 tools/bench_geometry.py [--m 10000] [--check 5]

Configurations: random orientations, semi-axes in [0.3, 1] x aspect up to 4, centre distances between
0.3 and 1.2 times the sum of the bounding radii (a mix of overlapping and separated pairs).
--check N compares N random pairs of every kind combination against the brute-force oracle
(relcp_mpi/geometry/bruteforce.py) and prints the largest relative deviation.

Suspension cases (equal ellipsoids with semi-axes (1, .5, .5), random orientations; --suspension-only skips
the mixed table):
  (a) unhinted, centre distance uniform in [1.0, 2.3] (mostly separated, ~20% overlapping)
  (b) the same pairs after a small random rigid motion of every body (0.01 L, 0.01 rad), hinted with the
      exact normals of the previous configuration (the time stepper's case); the hinted result is checked
      against the unhinted one
  (c) overlapping, centre distance uniform in [0.5, 1.0]

With numba installed the ellipsoid kernels' Newton and foot-point iterations run compiled (RELCP_NUMBA=0: numpy;
the same bits either way); the best of --repeat runs keeps numba's one-time compile/load out of the times.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relcp_mpi.bodies.shapes import SPHERE, SPHEROCYLINDER, ELLIPSOID, KIND_NAMES, bounding_radius  # noqa
from relcp_mpi.geometry import quaternion as Q  # noqa
from relcp_mpi.geometry.contact import pair_snsd  # noqa


def shapes(rng, kind, m):
    s = np.zeros((m, 3))
    if kind == SPHERE:
        s[:, 0] = rng.uniform(0.3, 1.5, m)
    elif kind == SPHEROCYLINDER:
        s[:, 0] = rng.uniform(0.2, 0.8, m)
        s[:, 1] = rng.uniform(0.0, 4.0, m)
    else:
        s[:] = rng.uniform(0.3, 1.0, (m, 3)) * rng.uniform(1.0, 4.0, (m, 3))
    return s


def batch(rng, ki, kj, m, spread=(0.3, 1.2)):
    si, sj = shapes(rng, ki, m), shapes(rng, kj, m)
    reach = bounding_radius(np.full(m, ki), si) + bounding_radius(np.full(m, kj), sj)
    d = rng.normal(size=(m, 3))
    d *= (rng.uniform(*spread, m) * reach / np.linalg.norm(d, axis=1))[:, None]
    xi = rng.normal(size=(m, 3)) * 10
    return si, xi, Q.random_unit(rng, m), sj, xi - d, Q.random_unit(rng, m), reach


def suspension(rng, m, lo, hi):
    e = np.broadcast_to([1.0, 0.5, 0.5], (m, 3)).copy()
    xi = rng.uniform(0.0, 50.0, (m, 3))
    d = rng.normal(size=(m, 3))
    d *= (rng.uniform(lo, hi, m) / np.linalg.norm(d, axis=1))[:, None]
    return e, xi, Q.random_unit(rng, m), e.copy(), xi - d, Q.random_unit(rng, m)


CLOCK = time.perf_counter       # --clock cpu: time.process_time (steadier on a shared machine)


def best_time(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = CLOCK()
        out = fn()
        times.append(CLOCK() - t0)
    return min(times), out


def suspension_table(rng, m, repeat):
    E = ELLIPSOID
    si, xi, qi, sj, xj, qj = suspension(rng, m, 1.0, 2.3)
    g0 = pair_snsd(E, si, xi, qi, E, sj, xj, qj)
    mv = lambda x: x + 0.01 * rng.normal(size=x.shape)
    rot = lambda q: Q.integrate(q, 0.01 * rng.normal(size=(m, 3)), 1.0)
    xi1, qi1, xj1, qj1 = mv(xi), rot(qi), mv(xj), rot(qj)
    so = suspension(rng, m, 0.5, 1.0)
    print(f"\nsuspension ellipsoids (1, .5, .5), m = {m}:")
    print(f"{'case':52s} {'overlap':>8s} {'best time [s]':>14s} {'pairs/s':>12s}")
    t, g = best_time(lambda: pair_snsd(E, si, xi, qi, E, sj, xj, qj), repeat)
    print(f"{'(a) unhinted, distance in [1.0, 2.3]':52s} {np.mean(g.sep < 0):8.2f} {t:14.4f} {m / t:12.0f}")
    ref = pair_snsd(E, si, xi1, qi1, E, sj, xj1, qj1)
    t, g = best_time(lambda: pair_snsd(E, si, xi1, qi1, E, sj, xj1, qj1, hint=g0.normal), repeat)
    S = np.linalg.norm(xi1 - xj1, axis=1) + 2.0
    dev = np.max(np.abs(g.sep - ref.sep) / S)
    print(f"{'(b) hinted with previous normals after small motion':52s} {np.mean(g.sep < 0):8.2f} {t:14.4f} "
          f"{m / t:12.0f}   (max |sep - sep_unhinted| / S = {dev:.1e})")
    t, g = best_time(lambda: pair_snsd(E, so[0], so[1], so[2], E, so[3], so[4], so[5]), repeat)
    print(f"{'(c) unhinted, distance in [0.5, 1.0]':52s} {np.mean(g.sep < 0):8.2f} {t:14.4f} {m / t:12.0f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=10000, help="pairs per batch (default 10^4)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--check", type=int, default=0, help="oracle-check N pairs per kind combination")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--suspension-only", action="store_true", help="only the suspension cases (a)-(c)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="wall time (default) or the process's CPU time, steadier when other jobs share the cores")
    args = ap.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    rng = np.random.default_rng(args.seed)
    if args.suspension_only:
        suspension_table(rng, args.m, args.repeat)
        return
    combos = [(ELLIPSOID, ELLIPSOID), (SPHEROCYLINDER, ELLIPSOID), (SPHERE, ELLIPSOID),
              (SPHEROCYLINDER, SPHEROCYLINDER), (SPHERE, SPHERE)]
    print(f"{'pair kinds':34s} {'m':>7s} {'overlap':>8s} {'best time [s]':>14s} {'pairs/s':>12s}")
    for ki, kj in combos:
        si, xi, qi, sj, xj, qj, _ = batch(rng, ki, kj, args.m)
        t, g = best_time(lambda: pair_snsd(ki, si, xi, qi, kj, sj, xj, qj), args.repeat)
        name = f"{KIND_NAMES[ki]}-{KIND_NAMES[kj]}"
        print(f"{name:34s} {args.m:7d} {np.mean(g.sep < 0):8.2f} {t:14.4f} {args.m / t:12.0f}")
    suspension_table(rng, args.m, args.repeat)
    if args.check:
        from relcp_mpi.geometry.bruteforce import bruteforce_snsd
        print(f"\noracle check ({args.check} pairs per combination, |sep - sep_bf| / reach):")
        for ki in (SPHERE, SPHEROCYLINDER, ELLIPSOID):
            for kj in (SPHERE, SPHEROCYLINDER, ELLIPSOID):
                si, xi, qi, sj, xj, qj, reach = batch(rng, ki, kj, args.check, spread=(0.1, 1.2))
                g = pair_snsd(ki, si, xi, qi, kj, sj, xj, qj)
                err = [abs(g.sep[k] - bruteforce_snsd(ki, si[k], xi[k], qi[k], kj, sj[k], xj[k], qj[k])[0])
                       / reach[k] for k in range(args.check)]
                print(f"  {KIND_NAMES[ki]}-{KIND_NAMES[kj]:16s} max rel. deviation {max(err):.2e}")


if __name__ == "__main__":
    main()
