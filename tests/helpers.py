"""Test helpers: build decks in code and run short simulations; run the ``relcp-mpi`` command in a
subprocess (as a 1-rank job or under ``mpirun``) with a clean environment."""
import copy
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml
from mpi4py import MPI

from relcp_mpi.config.deck import validate


def make_deck(**sections):
    raw = {"name": "test", "time": {"dt": 0.05, "steps": 5}, "output": {"trajectory_every": 0, "progress_every": 0}}
    for k, v in sections.items():
        if isinstance(v, dict) and isinstance(raw.get(k), dict):
            raw[k] = {**raw[k], **v}
        else:
            raw[k] = v
    return validate(copy.deepcopy(raw))


def mixed_shapes_deck(directory, steps=6, **output):
    """Two ellipsoids pushed together, a spherocylinder and a spinning sphere in a closed box [-4, 4]^3, with
    trajectory frames every 2 steps in ``directory`` (more ``output`` keys as given): trajectory-format tests."""
    bodies = [{"shape": "ellipsoid", "axes": [1.0, 0.4, 0.3], "position": [-1.2, 0.3, 0.0],
               "orientation": {"axis": [0, 0, 1], "angle": 0.3}, "force": [4.0, -1.0, 0.0]},
              {"shape": "ellipsoid", "axes": [1.0, 0.4, 0.3], "position": [1.2, -0.3, 0.0],
               "orientation": {"axis": [1, 1, 0], "angle": 0.7}, "force": [-4.0, 1.0, 0.0]},
              {"shape": "spherocylinder", "radius": 0.3, "length": 1.0, "position": [0.0, 2.0, 0.5],
               "orientation": {"axis": [0, 1, 0], "angle": 1.2}, "force": [0.0, -1.0, 0.0]},
              {"shape": "sphere", "radius": 0.5, "position": [2.5, 2.5, -2.0], "torque": [0.0, 0.0, 5.0]}]
    return make_deck(time={"dt": 0.05, "steps": steps}, box={"lo": [-4, -4, -4], "hi": [4, 4, 4]}, bodies=bodies,
                     contact={"overlap_tol": 1e-3, "skin": 0.3},
                     output=dict({"directory": str(directory), "trajectory_every": 2}, **output))


def run_sim(deck, comm=None, steps=None, record=None):
    """Run a deck without output; returns (sim, per-step diagnostics list).  ``record(sim)`` is called after
    every step."""
    from relcp_mpi import Simulation
    sim = Simulation.from_deck(deck, comm=comm or MPI.COMM_WORLD)
    sim.run(steps, writers=[], on_step=record)
    return sim, sim.history


def same_on_sub_communicators(deck, ref, ref_diag, box=None, atol=1e-5):
    """Run ``deck`` on sub-communicators of COMM_WORLD of 2 .. world size ranks and compare each run with the
    reference run ``ref`` (a Simulation) and its per-step diagnostics ``ref_diag``: same gids, positions within
    ``atol`` (minimum image in a periodic ``box`` (3,) when given), orientations within 1e-8, the same
    constraint count every step and max overlap <= 1e-3.  Collective over COMM_WORLD; returns the list of
    sizes that differ (the same on every rank)."""
    world = MPI.COMM_WORLD
    g_ref, x_ref = ref.gather()
    _, q_ref = ref.gather("q")
    bad = []
    for size in range(2, world.size + 1):
        sub = world.Split(0 if world.rank < size else MPI.UNDEFINED, world.rank)
        ok = True
        if sub != MPI.COMM_NULL:
            sim, d = run_sim(deck, comm=sub)
            g, x = sim.gather()
            _, q = sim.gather("q")
            dx = x - x_ref
            if box is not None:        # a body may sit across the periodic boundary in one run only
                dx -= box * np.round(dx / box)
            ok = (np.array_equal(g, g_ref) and np.allclose(x_ref + dx, x_ref, atol=atol)
                  and np.allclose(np.abs(np.einsum("ij,ij->i", q, q_ref)), 1.0, atol=1e-8)
                  and [e["constraints"] for e in d] == [e["constraints"] for e in ref_diag]
                  and max(e["max_overlap"] for e in d) <= 1e-3)
            sub.Free()
        if not world.allreduce(ok, op=MPI.LAND):
            bad.append(size)
    return bad


def aij_from_triplets(rows, cols, vals, n_rows_local, n_cols_local, comm):
    """PETSc AIJ matrix (tests and tools) from global (row, col, value) triplets that any rank may hold;
    duplicates are summed; ``n_rows_local`` / ``n_cols_local`` rows / columns owned by this rank.  Collective."""
    from relcp_mpi.petsc import get_petsc
    PETSc = get_petsc()
    M = PETSc.Mat().createAIJ(size=((int(n_rows_local), None), (int(n_cols_local), None)), comm=comm)
    M.setUp()
    M.setOption(PETSc.Mat.Option.NEW_NONZERO_ALLOCATION_ERR, False)   # no preallocation (tests only)
    rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    for r, c, v in zip(rows.tolist(), cols.tolist(), np.asarray(vals, float).tolist()):
        M.setValue(r, c, v, addv=PETSc.InsertMode.ADD_VALUES)
    M.assemble()
    return M


# ------------------------------------------------------------------------------------------------
# subprocess helpers (tests/test_cli.py, tests/test_restart.py)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# True when this pytest process was itself started by an MPI launcher (then it must not launch mpirun)
UNDER_LAUNCHER = any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))


def clean_env():
    """The environment for a child ``python -m relcp_mpi`` / ``mpirun``: this process's environment without
    the OMPI_* / PMIX_* / PRTE_* variables of an enclosing MPI job (except the run-as-root / oversubscribe
    settings, which are forced on), the project on PYTHONPATH, one OpenMP thread and h5py's MPI mode."""
    keep = {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMPI_MCA_rmaps_base_oversubscribe"}
    env = {k: v for k, v in os.environ.items()
           if k in keep or not (k.startswith("OMPI_") or k.startswith("PMIX_") or k.startswith("PRTE_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONPATH=ROOT, OMP_NUM_THREADS="1",
               H5PY_ALWAYS_USE_MPI="1")
    return env


def mpirun_path():
    """Path of ``mpirun``; skips the calling test if there is none."""
    m = shutil.which("mpirun")
    if m is None:
        pytest.skip("mpirun not found")
    return m


def run_cli(args, n=None, timeout=60, cwd=None):
    """``python -m relcp_mpi ARGS`` as a singleton MPI process (n=None) or under ``mpirun -n n``, in ``cwd``
    (default: the project root) with :func:`clean_env`.  Returns (CompletedProcess, seconds); a run longer
    than ``timeout`` seconds fails the test as a hang."""
    args = [str(a) for a in args]
    cmd = ([] if n is None else [mpirun_path(), "-n", str(n)]) + [sys.executable, "-m", "relcp_mpi"] + args
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, env=clean_env(), cwd=cwd or ROOT, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"relcp-mpi {' '.join(args)} on {n or 1} rank(s) hung (> {timeout} s): "
                    f"{e.stdout!r} {e.stderr!r}")
    return r, time.monotonic() - t0


def write_deck(path, text_or_raw):
    """Write a deck file: YAML text as is, a mapping through ``yaml.safe_dump``.  Returns ``str(path)``."""
    with open(path, "w") as fh:
        fh.write(text_or_raw if isinstance(text_or_raw, str) else yaml.safe_dump(text_or_raw))
    return str(path)


def snapshot(directory):
    """{relative path: (bytes, mtime_ns)} of every file in a directory tree (to check nothing was touched)."""
    out = {}
    for dp, _, files in os.walk(directory):
        for f in files:
            p = os.path.join(dp, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, directory)] = (fh.read(), os.stat(p).st_mtime_ns)
    return out


def checkpoint_state(path, fields=("gid", "x", "q")):
    """{field: array} of the bodies stored in a checkpoint file (serial h5py read)."""
    import h5py
    with h5py.File(path, "r") as f:
        return {k: f["bodies/" + k][()] for k in fields}


def random_sphere_bodies(count, L, radius, seed, gap=0.02):
    """``count`` explicit sphere bodies at random non-overlapping positions (random sequential addition, centre
    distances >= 2 radius + gap, minimum image) in the periodic cube [0, L)^3: a disordered start (the deck's
    ``generate`` jitters a lattice, whose rows collide slowly under shear).  Deck construction only."""
    rng = np.random.default_rng(seed)
    x = np.zeros((0, 3))
    d2 = (2 * radius + gap) ** 2
    while len(x) < count:
        c = rng.uniform(0.0, L, size=3)
        dx = x - c
        dx -= L * np.rint(dx / L)
        if len(x) == 0 or np.min(np.einsum("ij,ij->i", dx, dx)) >= d2:
            x = np.vstack([x, c])
    return [{"shape": "sphere", "radius": radius, "position": p.tolist()} for p in x]
