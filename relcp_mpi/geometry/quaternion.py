"""Former location of :mod:`relcp_mpi.basics.quaternion`: ``import relcp_mpi.geometry.quaternion`` still works (this name is
the same module object).  New code imports :mod:`relcp_mpi.basics.quaternion`."""
import sys

from relcp_mpi.basics import quaternion as _module

sys.modules[__name__] = _module
