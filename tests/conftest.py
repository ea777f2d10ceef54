"""Shared test fixtures.  petsc4py is initialised once through relcp_mpi.petsc."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("PETSC_DIR", "/usr/lib/petscdir/petsc3.18/x86_64-linux-gnu-real")
os.environ.setdefault("H5PY_ALWAYS_USE_MPI", "1")


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(12345)


@pytest.fixture(autouse=True)
def _collect_together(request):
    """After every MPI test, free the test's garbage on every rank at the same point: simulations and operators
    left in reference cycles hold parallel PETSc objects, and freed by the garbage collector at rank-dependent
    moments (one rank's allocations, e.g. an LCP diagnosis on rank 0, trigger it there alone) they left the
    ranks with different PETSc garbage, and PetscFinalize (petsc4py 3.18) then waited forever in its cleanup."""
    yield
    if request.node.get_closest_marker("mpi") is not None:
        import gc
        gc.collect()


@pytest.fixture
def hang_guard(request):
    """A hang (e.g. a collective call one rank skipped) kills the process after the test module's HANG_TIMEOUT
    (default 60 s) and dumps the stacks, so the test run fails instead of blocking."""
    import faulthandler
    faulthandler.dump_traceback_later(getattr(request.module, "HANG_TIMEOUT", 60), exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def shared_dir():
    """A temporary directory every rank of COMM_WORLD sees (created by rank 0, removed after the test)."""
    import shutil
    import tempfile

    from mpi4py import MPI
    world = MPI.COMM_WORLD
    d = world.bcast(tempfile.mkdtemp(prefix="relcp_test_") if world.rank == 0 else None, root=0)
    yield d
    world.Barrier()
    if world.rank == 0:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(params=["aot", "jit"])
def compiled_backend(request, monkeypatch):
    """Each build of the compiled kernels in turn (geometry/numba_switch.py): ``aot`` (the ahead-of-time extension
    module) and ``jit`` (numba), selected through RELCP_AOT; a backend that is not available here (no AOT build,
    no numba, or RELCP_NUMBA=0 at start) is skipped."""
    from relcp_mpi.geometry import numba_switch
    if not numba_switch.AVAILABLE:
        pytest.skip("no compiled kernels (no AOT build and no numba, or RELCP_NUMBA=0 at start)")
    monkeypatch.setenv("RELCP_NUMBA", "1")
    monkeypatch.setenv("RELCP_AOT", "1" if request.param == "aot" else "0")
    if numba_switch.backend() != request.param:
        pytest.skip(f"the {request.param} kernels are not available here")
    return request.param
