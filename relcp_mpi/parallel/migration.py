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


def migrate(bodies, decomp, comm, check=True, offset=0.0, order="gid"):
    """Send every body to ``decomp.owner(x)``; returns this rank's bodies sorted by gid (``order="spatial"``:
    along a Morton curve of their positions, :func:`relcp_mpi.bodies.order.spatial_order`).

    Positions are wrapped into the box on periodic axes first (ids are kept; with Lees--Edwards boundaries
    ``decomp.box.shear`` a body wrapped along the gradient axis moves by the image ``offset`` [L] along the
    flow axis and its velocity by the images' velocity jump, :meth:`Box.wrap_with_velocity`).  Collective: all
    ranks must call it.  With ``check`` (default) the global id multiset is verified (one extra
    Alltoallv of two ints per body and an allreduce); problems raise :class:`MigrationError` on
    every rank naming the offending ids.  Non-finite positions always raise (collectively).
    """
    from mpi4py import MPI
    size = comm.Get_size()
    b = bodies.copy()
    if decomp.box.shear is not None and b.n:
        b.x, b.u = decomp.box.wrap_with_velocity(b.x, b.u, offset)
    else:
        b.x = decomp.box.wrap(b.x) if b.n else b.x
    finite = np.all(np.isfinite(b.x), axis=1) if b.n else np.ones(0, dtype=bool)
    nbad = np.array([int(np.count_nonzero(~finite))], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, nbad, op=MPI.SUM)
    if nbad[0]:
        bad = comm.allgather(b.gid[~finite][:_MAX_LISTED])
        bad = np.concatenate(bad)
        raise MigrationError(f"migrate: {int(nbad[0])} bodies have non-finite positions "
                             f"(gids {_fmt_ids(bad)})")
    dest = decomp.owner(b.x)
    recv = exchange_rows(pack_rows(b), dest, comm)
    # order the received rows before unpacking them: one permutation of the packed rows instead of a second
    # copy of every field
    gid = np.rint(recv[:, BodyStore.pack_columns("gid")][:, 0]).astype(np.int64)
    if order == "spatial":
        perm = spatial_order(recv[:, BodyStore.pack_columns("x")], gid)
    else:
        perm = np.argsort(gid, kind="stable")
    out = BodyStore.unpack(recv[perm])
    if check:
        _check_ids(b.gid, out.gid, comm, size)
    return out


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
