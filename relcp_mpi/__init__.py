"""relcp_mpi: MPI-parallel simulation of smooth rigid bodies in nonsmooth contact (ReLCP).

Two engines share the package:

* the ReLCP time stepper (``relcp_mpi.stepper``), overdamped, PETSc-backed BBPGD contact solver;
* the certified event-driven sphere engine (``relcp_mpi.events``).

Units are whatever the input deck uses consistently (length L, time T, viscosity mu);
docstrings state shapes of arrays as ``(n, 3)`` etc.
"""

__version__ = "0.1.0"


def __getattr__(name):
    # ``relcp_mpi.Simulation`` without importing mpi4py/PETSc at package import (start-up order: petsc4py
    # must be initialised through relcp_mpi.petsc.get_petsc() with the user's options first)
    if name == "Simulation":
        from relcp_mpi.simulation import Simulation
        return Simulation
    raise AttributeError(f"module 'relcp_mpi' has no attribute {name!r}")
