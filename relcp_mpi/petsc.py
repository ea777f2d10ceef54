"""One place that initialises petsc4py (with options from the deck / command line)."""
import os
import sys

_PETSC = None


def get_petsc(options=None):
    """Return the ``PETSc`` module, initialising petsc4py on first use.

    ``options`` is a list of PETSc option strings (e.g. ``["-log_view"]``) used only on the first call.
    """
    global _PETSC
    if _PETSC is None:
        os.environ.setdefault("PETSC_DIR", "/usr/lib/petscdir/petsc3.18/x86_64-linux-gnu-real")
        import petsc4py
        args = [sys.argv[0] if sys.argv else "relcp_mpi"] + list(options or [])
        petsc4py.init(args)
        from petsc4py import PETSc
        _PETSC = PETSc
    return _PETSC
