"""Former location of :mod:`relcp_mpi.basics.random`: ``import relcp_mpi.parallel.random`` still works (this name is
the same module object).  New code imports :mod:`relcp_mpi.basics.random`."""
import sys

from relcp_mpi.basics import random as _module

sys.modules[__name__] = _module
