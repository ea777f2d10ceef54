"""Collective error handling: guards raise on every rank; uncaught errors abort the whole job once."""
import os
import shutil
import subprocess
import textwrap
import time

import pytest
from mpi4py import MPI

from relcp_mpi.parallel.errors import CollectiveError, check_collective, collective_guard

comm = MPI.COMM_WORLD
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.mpi
def test_guard_one_rank_fails_every_rank_raises():
    bad = 2 % comm.size
    with pytest.raises(CollectiveError) as ei:
        with collective_guard(comm, "assemble"):
            if comm.rank == bad:
                raise ValueError("boom on purpose")
    e = ei.value
    assert e.failed_ranks == [bad]
    assert f"rank {bad}: ValueError: boom on purpose" in str(e)
    assert "assemble" in str(e)
    if comm.rank == bad:
        assert isinstance(e.__cause__, ValueError) and "boom on purpose" in e.local_traceback
    else:
        assert e.local_traceback is None


@pytest.mark.mpi
def test_guard_several_failures_and_success():
    with collective_guard(comm, "fine"):
        x = 1 + 1
    assert x == 2
    with pytest.raises(CollectiveError) as ei:
        with collective_guard(comm, "odd ranks"):
            if comm.rank % 2 == 1 or comm.size == 1:
                raise KeyError(f"r{comm.rank}")
    expect = [r for r in range(comm.size) if r % 2 == 1] or [0]
    assert ei.value.failed_ranks == expect
    # nested guards: the inner CollectiveError passes through the outer guard unchanged
    with pytest.raises(CollectiveError, match="inner"):
        with collective_guard(comm, "outer"):
            with collective_guard(comm, "inner"):
                if comm.rank == 0:
                    raise RuntimeError("x")
    # the communicator is still usable afterwards (no stray messages)
    assert comm.allreduce(1) == comm.size


@pytest.mark.mpi
def test_check_collective():
    check_collective(True, "never shown", comm)
    last = comm.size - 1
    with pytest.raises(CollectiveError, match=f"rank {last}: bad value 42"):
        check_collective(comm.rank != last, lambda: "bad value 42", comm)


def _clean_env():
    """Environment for a nested mpirun: drop the variables of the launcher we may be running under."""
    keep = {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMPI_MCA_rmaps_base_oversubscribe"}
    env = {k: v for k, v in os.environ.items()
           if k in keep or not (k.startswith("OMPI_") or k.startswith("PMIX_") or k.startswith("PRTE_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    return env


def _run_job(script, n=4, timeout=20.0):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not found")
    t0 = time.monotonic()
    try:
        res = subprocess.run([mpirun, "-n", str(n), "/usr/bin/python3", "-c", textwrap.dedent(script)],
                             env=_clean_env(), cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"MPI job did not end within {timeout} s (hang)")
    return res, time.monotonic() - t0


needs_serial = pytest.mark.skipif(comm.size > 1, reason="launches its own mpirun; run at size 1")


@needs_serial
def test_uncaught_error_on_one_rank_aborts_job():
    res, dt = _run_job("""
        from mpi4py import MPI
        from relcp_mpi.parallel.errors import install_excepthook
        comm = MPI.COMM_WORLD
        install_excepthook(comm)
        comm.Barrier()
        if comm.rank == 2:
            raise RuntimeError("rank two failed on purpose")
        comm.Barrier()  # the other ranks would wait here forever
        print("unreachable", flush=True)
    """)
    msg = "relcp_mpi: error on rank 2: RuntimeError: rank two failed on purpose"
    assert res.returncode != 0
    assert dt < 20.0
    assert res.stderr.count(msg) == 1, res.stderr
    assert "Traceback" in res.stderr
    assert res.stderr.count("relcp_mpi: error on rank") == 1
    assert "unreachable" not in res.stdout


@needs_serial
def test_uncaught_collective_error_reported_once():
    res, dt = _run_job("""
        from mpi4py import MPI
        from relcp_mpi.parallel.errors import install_excepthook, collective_guard
        comm = MPI.COMM_WORLD
        install_excepthook(comm)
        with collective_guard(comm, "contact solve"):
            if comm.rank == 1:
                raise ValueError("solver diverged on purpose")
        print("unreachable", flush=True)
    """)
    assert res.returncode != 0
    assert dt < 20.0
    assert res.stderr.count("relcp_mpi: error on rank 1: ValueError: solver diverged on purpose") == 1, res.stderr
    assert res.stderr.count("relcp_mpi: error on rank") == 1
    assert "contact solve" in res.stderr
    assert "unreachable" not in res.stdout
