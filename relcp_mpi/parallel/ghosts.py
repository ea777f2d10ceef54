"""Ghost bodies: copies of (images of) bodies near my subdomain, and cheap state refreshes.

Selection rule (see the ghost-width rule in :mod:`relcp_mpi.parallel.decomposition`): body ``b``
owned by rank ``s`` is sent to rank ``r`` with image shift ``S`` (components in {-L, 0, L} on periodic
axes, 0 on walled axes) when ``dist(canonical(x_b) + S, subdomain(r)) <= width`` (Euclidean, closed
box), except for ``r == s, S == 0``.  The ghost copy carries ``x_b + S``; ``image_shift`` records ``S``.

Guarantee: if ``|x_a - x_b|`` (minimum image) ``<= width`` then the owner of ``a`` holds ``b`` either as
an owned body (same rank, no shift) or as a ghost at the image nearest to ``a`` -- and, because
``width < L/2`` on periodic axes, exactly once.  Assigning a pair to the owner of the lower gid
therefore finds every pair within ``width`` exactly once over all ranks.

Lees--Edwards boundaries (``decomp.box.shear``): an image ``n`` cells up the gradient axis g is displaced by
``n offset`` along the flow axis a (``offset``: the run's current image offset) and re-wrapped along a, so its
shift ``S`` has an a component that depends on the body; the image moves ``n rate L_g`` faster along a than
its body (``GhostPlan.send_vshift``), which :func:`refresh_ghosts` adds over the ``elapsed`` time of a trial
configuration, and the ghost's velocity ``u`` carries it.

Preconditions: ``bodies`` are this rank's owned bodies right after :func:`migrate` (positions inside
my subdomain, wrapped).  To keep the ghosts valid while bodies move inside a time step, include the
maximum displacement in the width (the skin) and use :func:`refresh_ghosts`, which re-sends the
state of the same ghosts along the remembered plan (no search, one Alltoallv).
"""
from dataclasses import dataclass

import numpy as np

from ..bodies.store import PACK_WIDTH, BodyStore
from .decomposition import point_box_distance
from .errors import check_collective
from .exchange import exchange_counts, exchange_sorted
from .migration import pack_rows

__all__ = ["exchange_ghosts", "refresh_ghosts", "GhostPlan"]

REFRESH_FIELDS = ("x", "q", "u", "shape")
_REFRESH_WIDTHS = (3, 4, 6, 3)


@dataclass
class GhostPlan:
    """Communication pattern of one ghost exchange (everything needed to refresh without search)."""
    width: float
    n_owned: int                 # number of owned bodies at exchange time
    send_idx: np.ndarray         # (m,) local indices sent, grouped by destination rank
    send_shift: np.ndarray       # (m, 3) image shift applied to each sent row
    send_gid: np.ndarray         # (m,) gids of the sent bodies (consistency check)
    scount: np.ndarray           # (size,) rows sent to each rank
    rcount: np.ndarray           # (size,) rows received from each rank
    recv_perm: np.ndarray        # (g,) received-row order -> ghost order
    ghost_gid: np.ndarray        # (g,) gids of the ghosts, in ghost order
    ghost_rank: np.ndarray       # (g,) owner rank of each ghost, in ghost order
    send_vshift: np.ndarray = None  # (m, 3) Lees-Edwards velocity shift of each sent image (None: no shear)

    @property
    def n_ghost(self):
        return len(self.ghost_gid)


def exchange_ghosts(bodies, decomp, comm, width, return_plan=False, offset=0.0):
    """Collect the ghosts of my subdomain for the given width (collective).

    Returns ``(ghosts, image_shift)`` -- a :class:`BodyStore` of ghost copies (positions already
    shifted by their image shift), ordered by (gid, shift), and the (g, 3) shifts -- or
    ``(ghosts, image_shift, plan)`` with ``return_plan=True``.  The plan is also stored as
    ``decomp.last_ghost_plan`` for :func:`refresh_ghosts`.  ``offset`` [L]: the Lees--Edwards image offset
    (ignored without ``decomp.box.shear``).  Raises DeckError (a ValueError; on every
    rank, the check is collective) if ``width`` violates :meth:`Decomposition.validate_ghost_width`.
    """
    w = decomp.validate_ghost_width(width)
    size = comm.Get_size()
    scale = float(np.max(np.abs(np.concatenate([decomp.box.lo, decomp.box.hi]))))
    w_eff = w * (1.0 + 1e-12) + 1e-12 * scale  # tiny slack: a superset of ghosts is harmless
    n = bodies.n
    p = decomp.canonical(bodies.x) if n else np.zeros((0, 3))
    mlo, mhi = decomp.my_bounds
    # bodies deeper than w_eff inside my subdomain cannot be near any other subdomain (tiling)
    near = np.flatnonzero(np.any((p - mlo <= w_eff) | (mhi - p <= w_eff), axis=1))
    pn = p[near]
    ranks, shifts = decomp.ghost_targets(w_eff)
    le = _LeesEdwardsImages(decomp.box, pn, offset)
    idx_parts, shift_parts, dest_parts = [], [], []
    for r, s in zip(ranks, shifts):  # loop over (rank, image) targets, not bodies
        lo, hi = decomp._lo[r], decomp._hi[r]
        s = le.shifts(s)                 # (3,), or (len(near), 3) for Lees-Edwards images
        ok = point_box_distance(pn + s, lo, hi) <= w_eff
        sel = near[ok]
        if len(sel):
            idx_parts.append(sel)
            shift_parts.append(np.broadcast_to(s, (len(near), 3))[ok] if s.ndim == 2 else
                               np.broadcast_to(s, (len(sel), 3)))
            dest_parts.append(np.full(len(sel), r, dtype=np.int64))
    if idx_parts:
        send_idx = np.concatenate(idx_parts)
        send_shift = np.concatenate(shift_parts).astype(np.float64)
        dest = np.concatenate(dest_parts)
    else:
        send_idx, send_shift, dest = np.zeros(0, np.int64), np.zeros((0, 3)), np.zeros(0, np.int64)
    # targets are ordered by rank, so rows are already grouped by destination
    scount = np.bincount(dest, minlength=size).astype(np.int64)
    rcount = exchange_counts(scount, comm)
    sent = bodies.take(send_idx)
    sent.x = sent.x + send_shift
    send_vshift = le.velocity_shift(send_shift)
    if send_vshift is not None:
        sent.u = sent.u.copy()
        sent.u[:, :3] += send_vshift
    if size == 1:
        # the images stay on this rank: the sent copies are the ghosts (pack / unpack would give the same bits)
        g, shift = sent, send_shift
    else:
        rows = np.concatenate([pack_rows(sent), send_shift], axis=1)
        recv = exchange_sorted(rows, scount, rcount, comm)
        g = BodyStore.unpack(recv[:, :PACK_WIDTH])
        shift = recv[:, PACK_WIDTH:]
    perm = np.lexsort((shift[:, 2], shift[:, 1], shift[:, 0], g.gid))
    ghosts = g.take(perm)
    image_shift = np.ascontiguousarray(shift[perm])
    plan = GhostPlan(width=w, n_owned=n, send_idx=send_idx, send_shift=send_shift,
                     send_gid=bodies.gid[send_idx].copy(), scount=scount, rcount=rcount,
                     recv_perm=perm, ghost_gid=ghosts.gid.copy(),
                     ghost_rank=np.repeat(np.arange(size, dtype=np.int64), rcount)[perm], send_vshift=send_vshift)
    decomp.last_ghost_plan = plan
    if return_plan:
        return ghosts, image_shift, plan
    return ghosts, image_shift


def refresh_ghosts(bodies, ghosts, decomp, comm, plan=None, check=True, elapsed=0.0):
    """Re-send x (shifted by the remembered image shift), q, u and shape of the same ghosts.

    ``elapsed`` [T]: time since the exchange; Lees--Edwards images have moved by ``elapsed`` times their
    velocity shift relative to their bodies (ignored without shear).

    ``bodies`` must be the same owned bodies in the same order as at the exchange (only their
    state changed); ``ghosts`` is updated in place and returned.  ``plan`` defaults to
    ``decomp.last_ghost_plan``.  Cost: one Alltoallv of 16 doubles per ghost (no search, no count
    exchange) plus, with ``check`` (default), one small allreduce that verifies -- on every rank
    together -- that the owned bodies and ghosts still match the plan.
    """
    plan = decomp.last_ghost_plan if plan is None else plan
    if plan is None:
        raise ValueError("refresh_ghosts: no ghost plan (call exchange_ghosts first)")
    if check:
        ok = (bodies.n == plan.n_owned and len(ghosts) == plan.n_ghost
              and np.array_equal(bodies.gid[plan.send_idx], plan.send_gid)
              and np.array_equal(ghosts.gid, plan.ghost_gid))
        check_collective(ok, lambda: (f"refresh_ghosts: owned bodies ({bodies.n}) or ghosts ({len(ghosts)}) do "
                                      f"not match the ghost plan ({plan.n_owned} owned, {plan.n_ghost} ghosts); "
                                      f"call exchange_ghosts again after migration"), comm, phase="refresh_ghosts")
    i = plan.send_idx
    if plan.send_vshift is None:
        rows = np.concatenate([bodies.x[i] + plan.send_shift, bodies.q[i], bodies.u[i], bodies.shape[i]], axis=1)
    else:
        u = bodies.u[i].copy()
        u[:, :3] += plan.send_vshift
        rows = np.concatenate([bodies.x[i] + plan.send_shift + elapsed * plan.send_vshift, bodies.q[i], u,
                               bodies.shape[i]], axis=1)
    recv = exchange_sorted(rows, plan.scount, plan.rcount, comm)[plan.recv_perm]
    c = 0
    for name, wd in zip(REFRESH_FIELDS, _REFRESH_WIDTHS):
        getattr(ghosts, name)[...] = recv[:, c:c + wd]
        c += wd
    return ghosts


class _LeesEdwardsImages:
    """Image shifts and velocity shifts of Lees--Edwards boundaries for the ghost exchange (no-op without)."""

    def __init__(self, box, p, offset):
        self.box, self.p, self.offset = box, p, float(offset)
        self.shear = box.shear

    def shifts(self, s):
        """Shift(s) of the image ``s`` (a multiple of the box lengths) of the bodies at ``p`` (k, 3): ``s``
        itself, or for an image along the gradient axis (k, 3) shifts whose flow-axis part moves each image
        by n offset and back into the box along the flow axis (the target enumeration covers the whole
        flow-axis range for such images)."""
        if self.shear is None or s[self.shear.gradient_axis] == 0:
            return s
        a, g = self.shear.flow_axis, self.shear.gradient_axis
        n = np.rint(s[g] / self.box.lengths[g])
        pa = self.p[:, a] + n * self.offset
        wrapped = self.box.wrap_axis(pa.copy(), a)
        out = np.broadcast_to(s, (len(self.p), 3)).copy()
        out[:, a] += wrapped - self.p[:, a]
        return out

    def velocity_shift(self, send_shift):
        """(m, 3) velocity of each sent image relative to its body (n rate L_g along the flow axis), or None."""
        if self.shear is None:
            return None
        a, g = self.shear.flow_axis, self.shear.gradient_axis
        v = np.zeros((len(send_shift), 3))
        v[:, a] = np.rint(send_shift[:, g] / self.box.lengths[g]) * self.shear.rate * self.box.lengths[g]
        return v
