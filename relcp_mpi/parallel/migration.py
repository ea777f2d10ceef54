"""Body migration: every body goes to the rank that owns its centre.

Body rows travel as packed float64 rows (:meth:`BodyStore.pack`) through
:func:`relcp_mpi.parallel.exchange.exchange_rows`.  After the exchange a collective check verifies that
the global multiset of ids is unchanged and that ids are unique: ids are routed to a "checker" rank
(``gid mod size``) together with the pre-migration ids, so lost, duplicated or spurious ids can be
named.  Any problem raises :class:`MigrationError` (a :class:`CollectiveError`) on every rank.
"""
import numpy as np

from ..bodies.order import spatial_order
from ..bodies.store import PACK_WIDTH, BodyStore
from .errors import CollectiveError
from .exchange import exchange_rows

__all__ = ["migrate", "MigrationError", "pack_rows"]

_MAX_LISTED = 20


class MigrationError(CollectiveError):
    """Lost / duplicated / non-finite bodies detected during migration (raised on every rank)."""

    def __init__(self, message):
        RuntimeError.__init__(self, message)
        self.phase, self.failed_ranks, self.messages, self.local_traceback = "migrate", [], {}, None


def pack_rows(store):
    """``store.pack()``, also for an empty store (BodyStore.pack cannot reshape zero rows)."""
    if store.n == 0:
        return np.zeros((0, PACK_WIDTH), dtype=np.float64)
    return store.pack()


def _fmt_ids(ids):
    ids = np.asarray(ids)
    s = ", ".join(str(int(i)) for i in ids[:_MAX_LISTED])
    return s + (f", ... ({len(ids)} in total)" if len(ids) > _MAX_LISTED else "")


def migrate(bodies, decomp, comm, check=True, offset=0.0, order="gid", dest=None):
    """Send every body to ``decomp.owner(x)``; returns this rank's bodies sorted by gid (``order="spatial"``:
    along a Morton curve of their positions, :func:`relcp_mpi.bodies.order.spatial_order`).

    Positions are wrapped into the box on periodic axes first (ids are kept; with Lees--Edwards boundaries
    ``decomp.box.shear`` a body wrapped along the gradient axis moves by the image ``offset`` [L] along the
    flow axis and its velocity by the images' velocity jump, :meth:`Box.wrap_with_velocity`).  Collective: all
    ranks must call it.  Only the bodies that change rank are packed and sent; the others are gathered straight
    into the new store (one copy of every field, in the final order).

    ``check``: ``True`` / ``"full"`` (default) verifies the global id multiset exactly (one extra Alltoallv of two
    ints per body and an allreduce); ``"fast"`` compares a 64-bit fingerprint of the ids before and after (sums
    of a mixing hash, one allreduce) and the local uniqueness of the received ids, and runs the exact check only
    when one of them fails -- the stepper's per-step mode: it catches lost, duplicated or spurious bodies of the
    exchange itself and any duplicate within a rank, but not two copies of an id that sit on two ranks before the
    call and do not move (the full check of the run's first migration and of every restart rules those out);
    ``False``: no check.  Problems raise :class:`MigrationError` on every rank naming the offending ids.
    Non-finite positions always raise (collectively).  ``dest`` (n,): the owner ranks of the bodies' wrapped
    positions when the caller has them (``decomp.owner`` of the wrapped positions, else computed here).
    """
    from mpi4py import MPI
    size, rank = comm.Get_size(), comm.Get_rank()
    fields = bodies.arrays()
    if decomp.box.shear is not None and bodies.n:
        fields["x"], fields["u"] = decomp.box.wrap_with_velocity(bodies.x, bodies.u, offset)
    elif bodies.n:
        fields["x"] = decomp.box.wrap(bodies.x)
    x = fields["x"]
    finite = np.all(np.isfinite(x), axis=1) if bodies.n else np.ones(0, dtype=bool)
    nbad = np.array([int(np.count_nonzero(~finite))], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, nbad, op=MPI.SUM)
    if nbad[0]:
        bad = comm.allgather(bodies.gid[~finite][:_MAX_LISTED])
        bad = np.concatenate(bad)
        raise MigrationError(f"migrate: {int(nbad[0])} bodies have non-finite positions "
                             f"(gids {_fmt_ids(bad)})")
    if dest is None or len(dest) != bodies.n:
        dest = np.asarray(decomp.owner(x), dtype=np.int64) if bodies.n else np.zeros(0, np.int64)
    stay = np.flatnonzero(dest == rank)
    movers = np.flatnonzero(dest != rank)
    if size == 1 and len(movers) == 0:    # one rank: every body stays, nothing to pack or exchange
        recv = np.zeros((0, PACK_WIDTH))
    else:
        recv = exchange_rows(pack_rows(BodyStore._adopt({f: a[movers] for f, a in fields.items()})), dest[movers],
                             comm)
    got = BodyStore.unpack(recv).arrays()
    # the new store: the staying bodies, then the received ones, put in order by one gather per field
    ns = len(stay)
    gid = np.concatenate([fields["gid"][stay], got["gid"]])
    if order == "spatial":
        perm = spatial_order(np.concatenate([x[stay], got["x"]]), gid)
    else:
        perm = np.argsort(gid, kind="stable")
    if len(recv) == 0:
        out = BodyStore._adopt({f: a[stay[perm]] for f, a in fields.items()})
    else:
        src = np.concatenate([stay, np.full(len(recv), -1, np.int64)])[perm]
        mine = src >= 0
        theirs = perm[~mine] - ns
        arrays = {}
        for f, a in fields.items():
            o = np.empty((len(perm),) + a.shape[1:], dtype=a.dtype)
            o[mine] = a[src[mine]]
            o[~mine] = got[f][theirs]
            arrays[f] = o
        out = BodyStore._adopt(arrays)
    if check == "fast":
        _check_fast(bodies.gid, out.gid, out.gid if order != "spatial" else None, comm, size)
    elif check:
        _check_ids(bodies.gid, out.gid, comm, size)
    return out


def _fingerprint(ids):
    """Sum (mod 2**64) of a mixing hash of int64 ids (splitmix64's finaliser): equal for equal multisets, and
    for different ones only by a 2**-64 accident."""
    z = ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return int(np.sum(z, dtype=np.uint64))


def _check_fast(pre, post, post_sorted, comm, size):
    """Collective ``check="fast"`` of :func:`migrate`: the exact check only if the id fingerprints before and
    after differ globally or a rank holds an id twice.  ``post_sorted``: ``post`` in increasing order when the
    caller has it (else it is sorted here)."""
    from mpi4py import MPI
    s = np.sort(post) if post_sorted is None else post_sorted
    dup = int(np.count_nonzero(s[1:] == s[:-1])) if len(s) > 1 else 0
    with np.errstate(over="ignore"):
        mine = np.array([_fingerprint(np.asarray(pre, np.int64)), _fingerprint(np.asarray(post, np.int64)), dup],
                        dtype=np.uint64)
    tot = np.zeros(3, dtype=np.uint64)
    comm.Allreduce(mine, tot, op=MPI.SUM)      # sums mod 2**64, the same on every rank
    if tot[2] or tot[0] != tot[1]:
        _check_ids(pre, post, comm, size)
        raise MigrationError("migrate: the body ids changed in the exchange (id fingerprints differ)")


def _check_ids(pre, post, comm, size):
    """Collective: the multiset of ids must be unchanged and ids unique."""
    from mpi4py import MPI
    tag = np.concatenate([np.zeros(len(pre), np.int64), np.ones(len(post), np.int64)])
    ids = np.concatenate([pre, post]).astype(np.int64)
    rows = np.stack([ids, tag], axis=1)
    got = exchange_rows(rows, np.mod(ids, size), comm, dtype=np.int64)
    g, t = got[:, 0], got[:, 1]
    uniq, inv = np.unique(g, return_inverse=True)
    npre = np.bincount(inv, weights=(t == 0), minlength=len(uniq)).astype(np.int64)
    npost = np.bincount(inv, weights=(t == 1), minlength=len(uniq)).astype(np.int64)
    lost = uniq[npost < npre]
    dup = uniq[npost > 1]
    extra = uniq[npost > npre]
    counts = np.array([len(lost), len(dup), len(extra)], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
    if counts.sum() == 0:
        return
    allinfo = comm.allgather((lost[:_MAX_LISTED], dup[:_MAX_LISTED], extra[:_MAX_LISTED]))
    parts = []
    names = ("lost", "duplicated", "unexpected")
    for j, name in enumerate(names):
        if counts[j]:
            ids_j = np.sort(np.concatenate([a[j] for a in allinfo]))
            more = f" (showing {len(ids_j)} of {counts[j]})" if counts[j] > len(ids_j) else ""
            parts.append(f"{counts[j]} {name} body id(s): {_fmt_ids(ids_j)}{more}")
    raise MigrationError("migrate: global body ids are not preserved/unique: " + "; ".join(parts))
