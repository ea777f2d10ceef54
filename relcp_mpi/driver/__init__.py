"""The run loop's parts: one step on a run state (engine), the step policy (dt halving) and the actions
between steps (trajectory, checkpoint, progress, signal check, callbacks).  The public entry point is
:class:`relcp_mpi.Simulation`."""
