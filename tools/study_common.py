"""Shared helpers of the study scripts (tools/study_*.py): run a deck in-process, collect per-step rows,
write CSV and PNG.  Run a study with the project venv, e.g. ``.venv/bin/python tools/study_two_ellipsoids.py``
(or under ``mpirun -n 2`` for the large ones)."""
import csv
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_settings(settings):
    """``["section.key=value", ...]`` -> ``{"section.key": value}`` (the value a number, else parsed as YAML), the
    changes :func:`relcp_mpi.config.sections.override` applies and validates."""
    import yaml
    changes = {}
    for item in settings:
        key, eq, value = item.partition("=")
        section, dot, name = key.partition(".")
        if not (section and name and dot and eq):
            raise SystemExit(f"--set: expected section.key=value, got {item!r}")
        try:                        # numbers as Python reads them (YAML 1.1 reads 5e-4 as a string)
            changes[key] = int(value) if value.strip().lstrip("+-").isdigit() else float(value)
        except ValueError:
            changes[key] = yaml.safe_load(value)
    return changes


def machine():
    import multiprocessing
    return f"{platform.node()} {platform.machine()} {multiprocessing.cpu_count()} cores, Python {platform.python_version()}"


def run_rows(deck, comm=None, label="", on_step=None, stop=None):
    """Run a deck (no output files) with :class:`relcp_mpi.Simulation`; returns (sim, one dict per step:
    diagnostics + wall time of the step on this rank).

    ``on_step(sim, row)`` is called after every step; ``stop(sim, row)`` (optional) ends the run early when it
    returns True -- it must return the same on every rank (base it on global quantities)."""
    from relcp_mpi import Simulation
    sim = Simulation.from_deck(deck, comm=comm)
    rows = []

    def record(s):
        rows.append({"label": label, "step": s.step, "time": s.time, "wall_s": s.step_wall, "bodies": s.n_global,
                     **s.diag})
        if on_step:
            on_step(s, rows[-1])

    sim.run(writers=[], on_step=record, until=(lambda s: stop(s, rows[-1])) if stop else None)
    return sim, rows


def write_csv(path, rows):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    keys = []
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow(r)


def plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as p
    return p


def model_variants(base, resolutions):
    """[(label, deck)] for ReLCP and the multi-sphere baseline at each resolution (comma list or iterable).

    Each deck is ``base`` (a typed deck) with ``contact.model`` (and ``contact.ms_resolution``) set
    (:func:`relcp_mpi.config.sections.override`); labels are 'relcp' and 'multisphere<res>'."""
    from relcp_mpi.config.sections import override
    if isinstance(resolutions, str):
        resolutions = [int(r) for r in resolutions.split(",") if r.strip()]
    out = []
    for model, res in [("relcp", None)] + [("multisphere", int(r)) for r in resolutions]:
        changes = {"contact.model": model, **({"contact.ms_resolution": res} if res else {})}
        out.append((f"{model}{res or ''}", override(base, changes)))
    return out


def step_line(label, row, extra=""):
    """One progress line of a study step (rows, active, iterations, depth, overlap, wall)."""
    return (f"  {label} step {row['step']}: rows {row['constraints']} active {row['active']} "
            f"iters {row['iterations']} depth {row['depth']} overlap {row['max_overlap']:.2e}{extra} "
            f"wall {row['wall_s']:.3f}s")
