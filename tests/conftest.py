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
