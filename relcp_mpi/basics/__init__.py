"""Shared basics at the bottom of the package (no relcp_mpi imports): batched quaternion algebra
(:mod:`.quaternion`), counter-based random streams keyed by (seed, step, body id) (:mod:`.random`) and the input
error type of decks (:mod:`.errors`)."""
