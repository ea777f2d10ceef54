"""The ``relcp-mpi`` command (also ``python -m relcp_mpi``).

Sub-commands::

    relcp-mpi run DECK.yaml [--steps N] [--output DIR] [--restart PATH|latest] [--petsc "-opt val ..."]
    relcp-mpi validate DECK.yaml      check a deck and print the normalised version
    relcp-mpi info FILE.h5            describe a checkpoint or trajectory file

Exit codes: 0 success, 2 bad input (deck, checkpoint), 1 any other error (the job is aborted on all ranks
with one message), 3 stopped by a signal after writing a checkpoint.
"""
import argparse
import os
import sys

EXIT_BAD_INPUT = 2


def _parser():
    p = argparse.ArgumentParser(prog="relcp-mpi", description="ReLCP smooth rigid-body contact simulations (MPI)")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a deck")
    r.add_argument("deck")
    r.add_argument("--steps", type=int, help="override time.steps")
    r.add_argument("--output", help="override output.directory")
    r.add_argument("--restart", help="checkpoint file, or 'latest' in the output directory")
    r.add_argument("--petsc", default="", help="PETSc options, e.g. \"-log_view\"")
    r.add_argument("--quiet", action="store_true", help="no progress lines")
    v = sub.add_parser("validate", help="validate a deck")
    v.add_argument("deck")
    i = sub.add_parser("info", help="describe a checkpoint or trajectory file")
    i.add_argument("file")
    return p


def _err(comm, msg):
    if comm is None or comm.rank == 0:
        sys.stderr.write(f"relcp-mpi: error: {msg}\n")
        sys.stderr.flush()


def main(argv=None):
    args = _parser().parse_args(argv)
    from relcp_mpi.config.deck import DeckError, load
    if args.command == "validate":
        try:
            deck, _ = load(args.deck)
        except DeckError as exc:
            _err(None, exc)
            return EXIT_BAD_INPUT
        import yaml
        print(yaml.safe_dump(deck, sort_keys=False))
        return 0
    if args.command == "info":
        from relcp_mpi.io.info import describe_file
        try:
            print(describe_file(args.file))
        except Exception as exc:  # noqa: BLE001 - report any unreadable file clearly
            _err(None, f"{args.file}: {exc}")
            return EXIT_BAD_INPUT
        return 0
    return _run(args)


def _run(args):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    from relcp_mpi.parallel.errors import install_excepthook
    install_excepthook(comm)
    from relcp_mpi.config.deck import DeckError, load
    try:
        deck, text = load(args.deck)
        if args.steps is not None:
            deck["time"]["steps"], deck["time"]["t_end"] = args.steps, None
        if args.output:
            deck["output"]["directory"] = args.output
        if args.quiet:
            deck["output"]["progress_every"] = 0
    except DeckError as exc:
        _err(comm, exc)
        return EXIT_BAD_INPUT
    from relcp_mpi.petsc import get_petsc
    get_petsc(args.petsc.split() + list(deck["solver"]["petsc_options"]))
    if deck["engine"] == "event_driven":
        from relcp_mpi.events.deck import run_event_deck
        os.makedirs(deck["output"]["directory"], exist_ok=True) if comm.rank == 0 else None
        comm.Barrier()
        path = os.path.join(deck["output"]["directory"], f"{deck['name']}_events.h5")
        result = run_event_deck(deck, path, comm)
        if comm.rank == 0:
            print(f"event-driven run '{deck['name']}': {getattr(result, 'status', result)}; written to {path}")
        return 0
    from relcp_mpi.simulation import Simulation
    try:
        sim = Simulation(deck, text, comm)
        sim.check_initial_overlap()
    except DeckError as exc:
        _err(comm, exc)
        return EXIT_BAD_INPUT
    if comm.rank == 0:
        print(f"relcp_mpi: running '{deck['name']}' ({sim.n_global} bodies, {sim.n_steps} steps, dt={sim.dt:g}) "
              f"on {comm.size} rank(s)", flush=True)
    sim.run()
    summary = sim.summary()
    if comm.rank == 0:
        print(summary, flush=True)
    return 0
