"""The ``relcp-mpi`` command (also ``python -m relcp_mpi``).

Sub-commands::

    relcp-mpi run DECK.yaml [--steps N] [--output DIR] [--restart PATH|latest] [--overwrite]
                            [--allow-deck-change KEY ...]
                            [--petsc "-opt val ..."] [--quiet]
    relcp-mpi validate DECK.yaml      check a deck (schema, body construction, initial overlaps) and
                                      print the normalised version
    relcp-mpi info FILE.h5            describe a checkpoint or trajectory file
    relcp-mpi convert CKPT.h5 OUT.h5  write a checkpoint as a one-frame trajectory (+ XDMF) for ParaView
    relcp-mpi lcpcheck DUMP.npz [--bodies G,G..] [--hops H] [--top K] [--all]
                                      search an infeasibility certificate in a dumped LCP (deck option
                                      debug.dump_lcp); exit 0 "infeasible, rows: ...", 4 "no certificate found"

``run``: a fresh run refuses to start when its output directory already holds a trajectory or checkpoints
of the deck's name (``--overwrite`` deletes them once the deck has been checked; ``--restart`` continues
from them).  ``--restart`` (or the deck's ``output.restart``) takes a checkpoint path or ``latest`` (the
newest valid ``<output.directory>/<name>_ckpt_<step>.h5``); the trajectory is then appended to.  Every
difference between the checkpoint's deck and the deck given is printed; the physics-defining ones are
refused with exit 2 unless accepted with ``--allow-deck-change KEY`` (see :mod:`relcp_mpi.io.deck_changes`).
SIGTERM or SIGUSR1 (to the rank processes; ``mpirun`` forwards SIGUSR1 but not SIGTERM) makes all ranks
write a checkpoint at the end of the current step and exit with status 3.  The handlers are installed first
thing (:func:`main`); a stop during start-up ends the job with status 3 at once (nothing written), one just
before the first step writes the initial state's checkpoint; the ``event_driven`` engine stops before its
next event and writes the certified prefix (status 3).

Exit codes: 0 success, 2 bad input (deck, checkpoint, existing output; one message naming the key, value
or file, printed once), 1 any other error (the job is aborted on all ranks with one message),
3 stopped by a signal after writing a checkpoint.
"""
import argparse
import glob
import os
import re
import sys

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_SIGNAL = 3     # == relcp_mpi.simulation.EXIT_SIGNAL_CHECKPOINT


class InputError(Exception):
    """Bad command-line input detected by the CLI itself (reported like a deck error, exit 2)."""


def _env_rank():
    """This process's rank from the launcher's environment (Open MPI, MPICH/PMI, PMIx, SLURM), without
    initialising MPI; 0 when not launched by an MPI launcher."""
    for k in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"):
        v = os.environ.get(k)
        if v is not None and v.strip().isdigit():
            return int(v)
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse that prints its usage / error message on rank 0 only (every rank still exits with 2)."""

    def _print_message(self, message, file=None):
        if _env_rank() == 0:
            super()._print_message(message, file)


def _parser():
    p = _Parser(prog="relcp-mpi", description="ReLCP smooth rigid-body contact simulations (MPI)")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a deck")
    r.add_argument("deck")
    r.add_argument("--steps", type=int, help="override time.steps (total steps, counted from 0)")
    r.add_argument("--output", help="override output.directory")
    r.add_argument("--restart", metavar="PATH|latest",
                   help="continue from a checkpoint file, or 'latest' (newest valid checkpoint of the deck in the "
                        "output directory); overrides output.restart")
    r.add_argument("--overwrite", action="store_true",
                   help="allow a fresh run to replace the trajectory/checkpoints of an earlier run of the deck")
    r.add_argument("--allow-deck-change", metavar="KEY", action="append", default=[],
                   help="restart: accept a change of the physics-defining deck key KEY (dotted, e.g. "
                        "contact.overlap_tol or fluid; repeatable) that a restart refuses otherwise")
    r.add_argument("--petsc", default="", help="PETSc options, e.g. \"-log_view\"")
    r.add_argument("--quiet", action="store_true", help="no progress lines")
    v = sub.add_parser("validate", help="validate a deck (schema, bodies, initial overlaps)")
    v.add_argument("deck")
    i = sub.add_parser("info", help="describe a checkpoint or trajectory file")
    i.add_argument("file")
    c = sub.add_parser("convert", help="write a checkpoint as a one-frame trajectory (+ XDMF sidecar)")
    c.add_argument("checkpoint")
    c.add_argument("output")
    c.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    k = sub.add_parser("lcpcheck", help="search an infeasibility certificate in a dumped LCP (serial)")
    k.add_argument("dump")
    k.add_argument("--bodies", help="comma-separated gids whose neighbourhood is searched (default: the bodies of "
                                    "the largest multipliers, or the whole LCP when it is small)")
    k.add_argument("--hops", type=int, default=1, help="rings of neighbours added to the bodies (default 1)")
    k.add_argument("--top", type=int, default=10, help="number of largest multipliers seeding the search")
    k.add_argument("--all", action="store_true", help="search the whole LCP")
    return p


def _rank():
    """MPI rank if MPI is (or can cheaply be) initialised, else 0."""
    try:
        from mpi4py import MPI
        return MPI.COMM_WORLD.rank
    except Exception:  # noqa: BLE001
        return 0


def _err(comm, msg):
    if comm is None or comm.rank == 0:
        sys.stderr.write(f"relcp-mpi: error: {msg}\n")
        sys.stderr.flush()


def _named(exc, path):
    """A DeckError raised after loading (body construction, initial overlaps) names the deck file."""
    from relcp_mpi.config.deck import DeckError
    if isinstance(exc, DeckError) and exc.source == "deck":
        return DeckError(exc.problems, source=path)
    return exc


def main(argv=None):
    from relcp_mpi.driver.signals import install_signal_handlers, restore_default_signal_handlers
    # first thing, before MPI, PETSc or the deck: a stop signal from now on is a request (acted upon at the
    # next point where the ranks agree), not the death of the rank
    install_signal_handlers()
    args = _parser().parse_args(argv)
    if args.command != "run":
        restore_default_signal_handlers()        # the other commands never checkpoint
    if args.command == "validate":
        return _validate(args)
    if args.command == "info":
        return _info(args)
    if args.command == "convert":
        return _convert(args)
    if args.command == "lcpcheck":
        return _lcpcheck(args)
    return _run(args)


# ------------------------------------------------------------------------------------------------
def _validate(args):
    """Schema check, then (relcp engine) build the bodies and check initial overlaps, serially."""
    from relcp_mpi.config.deck import DeckError
    from relcp_mpi.config.sections import load_typed
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    try:
        deck, _ = load_typed(args.deck)
    except DeckError as exc:
        _err(comm, exc)
        return EXIT_BAD_INPUT
    note = ""
    if deck.engine == "relcp":
        from relcp_mpi.simulation import Simulation
        try:
            check_build_memory(MPI.COMM_SELF, deck, args.deck)
            sim = Simulation(deck, "", MPI.COMM_SELF)
            sim.check_initial_overlap()
        except DeckError as exc:
            _err(comm, _named(exc, args.deck))
            return EXIT_BAD_INPUT
        note = f"# OK: {sim.n_global} bodies, {sim.n_steps} steps of dt={sim.dt:g}, no initial overlaps\n"
    if comm.rank == 0:
        import yaml
        sys.stdout.write(yaml.safe_dump(deck.raw, sort_keys=False) + note)
        sys.stdout.flush()
    return EXIT_OK


EXIT_NO_CERTIFICATE = 4


def _lcpcheck(args):
    """Serial certificate search on a dump (rank 0 prints; other ranks, if any, do nothing)."""
    if _rank() != 0:
        return EXIT_OK
    from relcp_mpi.contact.lcp_dump import load_lcp
    from relcp_mpi.solver.certificate import check_dump, describe
    try:
        data = load_lcp(args.dump)
        bodies = [int(b) for b in args.bodies.split(",")] if args.bodies else None
    except (OSError, ValueError, KeyError) as exc:
        _err(None, f"cannot read LCP dump {args.dump}: {exc}")
        return EXIT_BAD_INPUT
    res = check_dump(data, bodies=bodies, hops=args.hops, top=args.top, whole=True if args.all else None)
    info = data.get("info", {})
    head = f"{args.dump}: {data['D'].shape[1]} rows, {len(data['blocks'])} bodies"
    if info:
        head += " (" + ", ".join(f"{k} {v}" for k, v in info.items()) + ")"
    sys.stdout.write(head + "\n" + describe(res, data) + "\n")
    sys.stdout.flush()
    return EXIT_OK if res.infeasible else EXIT_NO_CERTIFICATE


def _info(args):
    """Describe a file; exit 2 if it is missing, not a relcp_mpi file, or a checkpoint that fails
    verification (the description is still printed)."""
    from relcp_mpi.io.info import describe_file
    if _rank() != 0:
        return EXIT_OK
    path = args.file
    if not os.path.exists(path):
        _err(None, f"{path}: file does not exist")
        return EXIT_BAD_INPUT
    try:
        text = describe_file(path)
    except Exception as exc:  # noqa: BLE001 - report any unreadable file clearly
        _err(None, f"{path}: cannot be described: {type(exc).__name__}: {exc}")
        return EXIT_BAD_INPUT
    print(text, flush=True)
    first = text.splitlines()[0] if text else ""
    if "checksum    : FAILED" in text or not (first.endswith("relcp_mpi checkpoint")
                                                or first.endswith("relcp_mpi trajectory")):
        _err(None, f"{path}: " + ("checkpoint failed verification" if "FAILED" in text
                                  else first.split(": ", 1)[-1]))
        return EXIT_BAD_INPUT
    return EXIT_OK


def _convert(args):
    """Checkpoint -> one-frame trajectory + XDMF (collective over all ranks)."""
    from mpi4py import MPI
    from relcp_mpi.io.checkpoint import CheckpointError
    from relcp_mpi.io.info import convert_checkpoint_to_trajectory
    from relcp_mpi.io.xdmf import xdmf_path_for
    comm = MPI.COMM_WORLD
    src, dst = os.path.abspath(args.checkpoint), os.path.abspath(args.output)
    msg = None
    if comm.rank == 0:
        if src == dst:
            msg = f"{args.output}: output would replace the checkpoint itself"
        elif os.path.exists(dst) and not args.overwrite:
            msg = f"{args.output}: file exists (use --overwrite to replace it)"
    msg = comm.bcast(msg, root=0)
    if msg:
        _err(comm, msg)
        return EXIT_BAD_INPUT
    try:
        convert_checkpoint_to_trajectory(args.checkpoint, args.output, comm=comm)
    except CheckpointError as exc:
        _err(comm, exc)
        return EXIT_BAD_INPUT
    if comm.rank == 0:
        print(f"relcp-mpi: wrote {args.output} (one frame) and {xdmf_path_for(args.output)} "
              f"from checkpoint {args.checkpoint}", flush=True)
    return EXIT_OK


# ------------------------------------------------------------------------------------------------
def existing_outputs(deck):
    """Files of an earlier run of this (typed) deck in its output directory (trajectory, XDMF sidecar, GSD
    trajectory, checkpoints incl. stale temporaries, event-driven result), sorted."""
    d, name = deck.output.directory, deck.name
    if not os.path.isdir(d):
        return []
    found = []
    for p in (os.path.join(d, f"{name}.h5"), os.path.join(d, f"{name}.xdmf"), os.path.join(d, f"{name}.gsd"),
              os.path.join(d, f"{name}_events.h5")):
        if os.path.exists(p):
            found.append(p)
    ck = re.compile(re.escape(name) + r"_ckpt_\d{9}\.h5(\.tmp)?$")
    found += [p for p in glob.glob(os.path.join(glob.escape(d), f"{glob.escape(name)}_ckpt_*"))
              if ck.match(os.path.basename(p))]
    return sorted(found)


def _memory_per_rank(comm):
    """(bytes of memory one rank may use, how that was found): physical memory of the node divided by the
    ranks sharing it, or the address-space limit (``ulimit -v``) if lower.  Collective."""
    from mpi4py import MPI
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    nlocal = local.size
    local.Free()
    try:
        phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        phys = None
    limit, how = None, ""
    if phys:
        limit, how = phys // nlocal, f"{phys / 2 ** 30:.1f} GiB of memory / {nlocal} rank(s) on this node"
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY and (limit is None or soft < limit):
            limit, how = soft, f"address-space limit (ulimit -v) {soft / 2 ** 30:.1f} GiB"
    except (ImportError, ValueError, OSError):
        pass
    return limit, how


def check_build_memory(comm, deck, source):
    """Refuse (DeckError, same on every rank) a deck whose initial bodies cannot be built in the memory of
    one rank: every rank builds all of them.  Collective."""
    from relcp_mpi.bodies.builder import BUILD_BYTES_PER_BODY, build_memory_estimate, initial_body_count
    from relcp_mpi.config.deck import DeckError
    need = build_memory_estimate(deck)
    limit, how = _memory_per_rank(comm)
    msg = None
    if comm.rank == 0 and limit is not None and need > limit:
        msg = (f"generate: {initial_body_count(deck)} initial bodies need an estimated {need / 2 ** 30:.1f} GiB "
               f"per rank ({BUILD_BYTES_PER_BODY} bytes per body; every rank builds all initial bodies), more "
               f"than the {limit / 2 ** 30:.1f} GiB available per rank ({how}); lower the generator counts")
    msg = comm.bcast(msg, root=0)
    if msg:
        raise DeckError([msg], source=source)


def _lock_output(comm, deck):
    """Create the output directory and take the run lock on rank 0 (collective).  Returns the RunLock on
    rank 0, None elsewhere; raises InputError (same on every rank) naming the path and the OS error, or the
    run already holding the lock."""
    from relcp_mpi.io.rundir import RunDirError, acquire_run_lock
    lock, msg = None, None
    if comm.rank == 0:
        try:
            lock = acquire_run_lock(deck.output.directory, deck.name)
            if lock.note:
                print(f"relcp-mpi: {lock.note}", flush=True)
        except RunDirError as exc:
            msg = str(exc)
    msg = comm.bcast(msg, root=0)
    if msg:
        raise InputError(msg)
    return lock


def _refuse_or_clear(comm, deck, overwrite, restart_hint=True):
    """Fresh run: refuse (InputError, same on every rank) if earlier output exists and not ``overwrite``;
    with ``overwrite`` rank 0 deletes it.  Collective."""
    msg, files = None, []
    if comm.rank == 0:
        files = existing_outputs(deck)
        data = [f for f in files if not f.endswith(".xdmf")]
        if data and not overwrite:
            shown = ", ".join(data[:4]) + (f", ... ({len(data)} files)" if len(data) > 4 else "")
            hint = " or --restart latest to continue it" if restart_hint else ""
            msg = (f"output directory {deck.output.directory} already holds output of a run of "
                   f"'{deck.name}' ({shown}); refusing to overwrite it: pass --overwrite to replace it{hint}, "
                   f"or choose another --output directory")
        elif overwrite:
            for f in files:
                try:
                    os.remove(f)
                except OSError as e:
                    msg = f"--overwrite: cannot remove {f}: {e.strerror}"
                    break
    msg = comm.bcast(msg, root=0)
    if msg:
        raise InputError(msg)


def _run(args):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    from relcp_mpi.parallel.errors import install_excepthook
    install_excepthook(comm)
    from relcp_mpi.config.deck import DeckError
    from relcp_mpi.config.sections import load_typed, override
    try:
        deck, text = load_typed(args.deck)
        changes = {}
        if args.steps is not None:
            from relcp_mpi.config.deck import MAX_STEPS
            if not 0 <= args.steps <= MAX_STEPS:
                raise DeckError([f"--steps: must be in [0, {MAX_STEPS}], got {args.steps}"], source=args.deck)
            changes.update({"time.steps": args.steps, "time.t_end": None})
        if args.output:
            changes["output.directory"] = args.output
        if args.quiet:
            changes["output.progress_every"] = 0
        if changes:
            deck = override(deck, changes, source=args.deck)
        restart = args.restart if args.restart is not None else deck.output.restart
        if restart is not None and (not isinstance(restart, str) or not restart.strip()):
            raise DeckError([f"output.restart: must be 'latest' or a checkpoint path, got {restart!r}"],
                            source=args.deck)
        if restart is not None and deck.engine != "relcp":
            raise DeckError([f"output.restart / --restart: restarting is only supported for engine relcp "
                             f"(this deck has engine {deck.engine})"], source=args.deck)
    except DeckError as exc:
        _err(comm, exc)
        return EXIT_BAD_INPUT
    if _stopped_during_startup(comm, restart):
        return EXIT_SIGNAL
    from relcp_mpi.petsc import get_petsc
    get_petsc(args.petsc.split() + list(deck.solver.petsc_options))
    if _stopped_during_startup(comm, restart):
        return EXIT_SIGNAL
    if deck.engine == "event_driven":
        return _run_events(comm, deck, args)
    held = []                     # the run lock, once taken (rank 0): released however the run ends
    try:
        return _run_relcp(comm, deck, text, args, restart, held)
    finally:
        _release(held)


def _stopped_during_startup(comm, restart):
    """Collective: True (after rank 0 printed why) if any rank received SIGTERM/SIGUSR1 during start-up;
    nothing has been written then (a restart's checkpoint is left as it is)."""
    from relcp_mpi.driver.signals import agreed_stop_signal, clear_pending_signal, signal_name
    signum = agreed_stop_signal(comm)
    if not signum:
        return False
    clear_pending_signal()
    if comm.rank == 0:
        again = "start the run again" if restart is None else \
            f"the checkpoint is unchanged: restart again with --restart {restart}"
        print(f"relcp-mpi: stopped by {signal_name(signum)} during start-up, before the first step; nothing was "
              f"written ({again})", flush=True)
    return True


def _release(held):
    for lock in held:
        lock.release()
    held.clear()


def _report_deck_changes(comm, sim, args):
    """Restart: print (rank 0) every accepted difference from the checkpoint's deck; refuse (InputError, on
    every rank) a total step count below the checkpoint's step, which would run nothing."""
    if sim.n_steps < sim.step:
        t = sim.deck.time
        how = (f"time.t_end = {t.t_end:g} with dt = {t.dt:g} gives {sim.n_steps} steps" if t.steps is None else
               f"time.steps{' (--steps)' if args.steps is not None else ''} = {sim.n_steps}")
        raise InputError(f"{how}, below the step {sim.step} of checkpoint {sim.restarted_from}: nothing to run "
                         f"(the step count is the total, counted from step 0: pass --steps N with N > {sim.step} "
                         f"to continue)")
    if comm.rank != 0:
        return
    ch = sim.deck_changes
    if ch:
        print(f"relcp-mpi: the deck differs from the one of checkpoint {sim.restarted_from} in {len(ch)} "
              f"key(s):\n" + "\n".join("  " + c.describe() for c in ch), flush=True)
    from relcp_mpi.io.deck_changes import judge
    for key in args.allow_deck_change:
        if not any(c.key == key or c.key.startswith((key + ".", key + "[")) for c in ch):
            note = "" if judge(key, (key,))[0] == "overridden" else f" (and {key} is not a refused key)"
            print(f"relcp-mpi: note: --allow-deck-change {key}: the deck does not change it{note}", flush=True)


def _run_relcp(comm, deck, text, args, restart, held):
    """Set up (restart or fresh), lock the output directory, run; returns the exit status."""
    from relcp_mpi.config.deck import DeckError
    from relcp_mpi.io.checkpoint import CheckpointError
    from relcp_mpi.io.writeguard import OutputError
    from relcp_mpi.simulation import Simulation, StopRequested
    try:
        if restart is not None:
            held.extend(lk for lk in [_lock_output(comm, deck)] if lk is not None)
            sim = Simulation.from_checkpoint(restart, deck, text, comm, allow_deck_changes=args.allow_deck_change)
            _report_deck_changes(comm, sim, args)
        else:
            check_build_memory(comm, deck, args.deck)
            sim = Simulation(deck, text, comm)
            sim.check_initial_overlap()
            held.extend(lk for lk in [_lock_output(comm, deck)] if lk is not None)
            _refuse_or_clear(comm, deck, args.overwrite)
    except DeckError as exc:
        _err(comm, _named(exc, args.deck))
        return EXIT_BAD_INPUT
    except (CheckpointError, InputError) as exc:
        _err(comm, exc)
        return EXIT_BAD_INPUT
    if comm.rank == 0:
        how = f"restarting from {sim.restarted_from} at step {sim.step}" if restart is not None else "running"
        print(f"relcp_mpi: {how} '{deck.name}' ({sim.n_global} bodies, {sim.n_steps} steps, dt={sim.dt:g}) "
              f"on {comm.size} rank(s)", flush=True)
    try:
        sim.run()
    except StopRequested as stop:
        if comm.rank == 0:
            from relcp_mpi.driver.signals import signal_name
            when = f"after step {sim.step}" if sim.steps_run else f"before the first step (step {sim.step})"
            done = "checkpoint written to" if stop.path != sim.restarted_from else "the run's state is in checkpoint"
            here = os.path.dirname(os.path.abspath(sim.deck.checkpoint_prefix))
            again = "latest" if os.path.dirname(os.path.abspath(stop.path)) == here else stop.path
            print(f"relcp-mpi: stopped by {signal_name(stop.signum)} {when} (t={sim.time:.6g}); {done} "
                  f"{stop.path}; continue with: relcp-mpi run {args.deck} --restart {again}"
                  + (f" --output {args.output}" if args.output else ""), flush=True)
        return EXIT_SIGNAL
    except (CheckpointError, OutputError) as exc:   # a failed write is raised on every rank alike
        _err(comm, exc)
        return 1
    summary = sim.summary()
    if comm.rank == 0:
        print(summary, flush=True)
    return EXIT_OK


def _run_events(comm, deck, args):
    from relcp_mpi.config.deck import DeckError
    from relcp_mpi.driver.signals import pending_signal, signal_name
    from relcp_mpi.events.deck import event_deck, run_event_deck
    from relcp_mpi.io.writeguard import OutputError
    held = []
    try:
        event_deck(deck, source=args.deck)      # the engine check (the section was validated by the loader)
        held.extend(lk for lk in [_lock_output(comm, deck)] if lk is not None)
        _refuse_or_clear(comm, deck, args.overwrite, restart_hint=False)
        path = os.path.join(deck.output.directory, f"{deck.name}_events.h5")
        try:
            result = run_event_deck(deck, path, comm, should_stop=pending_signal)
        except DeckError as exc:
            _err(comm, exc)
            return EXIT_BAD_INPUT
        except OutputError as exc:            # raised on every rank alike
            _err(comm, exc)
            return 1
    except (DeckError, InputError) as exc:
        _err(comm, exc)
        return EXIT_BAD_INPUT
    finally:
        _release(held)
    if result.stop_signal:
        if comm.rank == 0:
            print(f"relcp-mpi: stopped by {signal_name(result.stop_signal)} at t={float(result.t_final):.6g} after "
                  f"{result.n_events} event(s); the certified prefix [0, t] is written to {path} (status "
                  f"unresolved, reason stopped); an event-driven run cannot be continued: run it again", flush=True)
        return EXIT_SIGNAL
    if comm.rank == 0:
        print(f"event-driven run '{deck.name}': {getattr(result, 'status', result)}; written to {path}")
    return EXIT_OK
