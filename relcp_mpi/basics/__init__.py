"""Shared basics at the bottom of the package (no relcp_mpi imports): batched quaternion algebra
(:mod:`.quaternion`) and counter-based random streams keyed by (seed, step, body id) (:mod:`.random`)."""
