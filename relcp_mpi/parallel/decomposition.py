"""Spatial domain decomposition: Cartesian blocks or weighted recursive coordinate bisection (RCB).

Every rank owns one axis-aligned subdomain; the subdomains tile the box.  Ownership is half-open:
a position belongs to the subdomain with ``lo <= p < hi`` per axis, where ``p = canonical(x)`` is
the position wrapped into the box on periodic axes and *clipped* into ``[lo, hi]`` on walled axes
(a body slightly beyond a wall is owned by the subdomain at that wall; the upper wall itself
belongs to the last subdomain).

Ghost-width rule (:meth:`Decomposition.validate_ghost_width`)
------------------------------------------------------------
Ghost copies are selected by the Euclidean distance between the canonical position of a body's
periodic image and each target subdomain (closed box), over image shifts in ``{-L, 0, +L}`` on every
periodic axis, and sent directly to every rank that needs them (not only face neighbours), so no
rule on the subdomain sizes is needed.  What is needed is that the ghost width ``w`` satisfies

    0 <= w < L_a / 2   on every periodic axis a,

so that the nearest image of a partner within ``w`` is unique and reachable with one shift per axis
(then a pair within ``w`` is never found twice through two images).  Walled axes impose no limit.
Clipping onto the box is non-expansive, so pairs involving bodies beyond a wall are covered too.
A violation is a deck problem (box too small for the bodies + skin): ``validate_ghost_width`` raises
:class:`GhostWidthError` on every rank (collective decision), which the driver reports as a deck error
(``relcp-mpi run``: bad input, exit 2).
"""
import numpy as np

from .box import Box
from .errors import agree

__all__ = ["Decomposition", "CartesianDecomposition", "RCBDecomposition", "GhostWidthError", "imbalance",
           "should_rebalance"]


class GhostWidthError(ValueError):
    """The ghost width is too large for a periodic axis of the box (a deck problem: box, skin, body sizes)."""


def _shift_candidates(box):
    """All image shifts (k, 3) with components in {-L, 0, L} on periodic axes, 0 elsewhere; zero first."""
    opts = [(0.0, -1.0, 1.0) if p else (0.0,) for p in box.periodic]
    m = np.array(np.meshgrid(*opts, indexing="ij")).reshape(3, -1).T
    order = np.lexsort((m[:, 2], m[:, 1], m[:, 0]))  # deterministic
    m = m[order]
    zero = np.all(m == 0, axis=1)
    m = np.concatenate([m[zero], m[~zero]])
    return m * box.lengths


def _box_box_distance(alo, ahi, blo, bhi):
    """Euclidean distance between closed boxes (broadcast over leading dims)."""
    gap = np.maximum(0.0, np.maximum(blo - ahi, alo - bhi))
    return np.sqrt(np.sum(gap * gap, axis=-1))


def point_box_distance(p, lo, hi):
    """Euclidean distance from points p (n, 3) to the closed box [lo, hi]."""
    gap = np.maximum(0.0, np.maximum(lo - p, p - hi))
    return np.sqrt(np.sum(gap * gap, axis=-1))


class Decomposition:
    """Base class.  Subclasses fill ``self._lo`` / ``self._hi`` (size, 3) and implement ``_owner``."""

    def __init__(self, box, comm):
        if not isinstance(box, Box):
            raise TypeError(f"box must be a relcp_mpi.parallel.box.Box, got {type(box).__name__}")
        self.box = box
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._lo = None
        self._hi = None
        self.last_ghost_plan = None  # set by ghosts.exchange_ghosts, used by refresh_ghosts
        self._target_cache = {}

    # -- positions and ownership ------------------------------------------------------------
    def canonical(self, x):
        """Positions wrapped into the box on periodic axes and clipped into [lo, hi] on walled axes."""
        p = self.box.wrap(np.asarray(x, dtype=np.float64).reshape(-1, 3))
        w = ~self.box.periodic
        if np.any(w):
            p[:, w] = np.clip(p[:, w], self.box.lo[w], self.box.hi[w])
        return p

    def owner(self, x):
        """Owning rank of each position (n,) int64 (positions are wrapped/clipped first)."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, 3)
        if x.size and not np.all(np.isfinite(x)):
            bad = np.flatnonzero(~np.all(np.isfinite(x), axis=1))
            raise ValueError(f"owner(): non-finite positions at local indices {bad[:10].tolist()}")
        return self._owner(self.canonical(x)).astype(np.int64)

    def _owner(self, p):  # pragma: no cover - abstract
        raise NotImplementedError

    def bounds(self, rank):
        """(lo, hi) of a rank's subdomain, copies of shape (3,)."""
        return self._lo[rank].copy(), self._hi[rank].copy()

    @property
    def my_bounds(self):
        return self.bounds(self.rank)

    @property
    def all_bounds(self):
        """(lo, hi) arrays (size, 3) of every subdomain."""
        return self._lo.copy(), self._hi.copy()

    # -- neighbourhood ----------------------------------------------------------------------------
    def ghost_targets(self, width):
        """Ranks and image shifts that may need ghosts of my bodies.

        Returns ``(ranks (k,), shifts (k, 3))``: all (rank, shift) with
        ``dist(my subdomain + shift, subdomain(rank)) <= width``, excluding (my rank, zero shift).
        Ordered by rank, then by shift (zero shift first).  Cached per width.
        """
        width = float(width)
        if width in self._target_cache:
            return self._target_cache[width]
        shifts = _shift_candidates(self.box)
        mlo, mhi = self.my_bounds
        lo_s, hi_s = mlo + shifts, mhi + shifts
        if self.box.shear is not None:
            # Lees-Edwards: an image along the gradient axis slides along the flow axis by the current offset,
            # so my bodies' images there may lie anywhere along the flow axis (exchange_ghosts re-wraps them)
            a, g = self.box.shear.flow_axis, self.box.shear.gradient_axis
            sl = shifts[:, g] != 0
            lo_s[sl, a] = self.box.lo[a] + shifts[sl, a]
            hi_s[sl, a] = self.box.hi[a] + shifts[sl, a]
        d = _box_box_distance(lo_s[None, :, :], hi_s[None, :, :],
                              self._lo[:, None, :], self._hi[:, None, :])  # (size, nshift)
        ok = d <= width
        ok[self.rank, 0] = False  # shift 0 is first
        r, s = np.nonzero(ok)
        out = (r.astype(np.int64), shifts[s])
        self._target_cache[width] = out
        return out

    def neighbors(self, width=0.0):
        """Sorted ranks (excluding mine) whose subdomain is within ``width`` of mine (periodic-aware)."""
        r, _ = self.ghost_targets(width)
        return np.unique(r[r != self.rank])

    def _ghost_width_problem(self, width):
        """Local check of :meth:`validate_ghost_width`: ``(w, None)`` if fine, else ``(w, exception)``:
        ValueError (not a finite number >= 0) or GhostWidthError (too large for the box)."""
        try:
            w = float(width)
        except (TypeError, ValueError):
            return None, ValueError(f"ghost width must be a number, got {width!r}")
        if not np.isfinite(w) or w < 0:
            return w, ValueError(f"ghost width must be finite and >= 0, got {width!r}")
        for ax in np.flatnonzero(self.box.periodic):
            L = float(self.box.lengths[ax])
            if not w < 0.5 * L:
                name = "xyz"[ax]
                return w, GhostWidthError(
                    f"box: ghost width {w:.12g} (2 x largest bounding radius + 2 x contact.skin) is too large for "
                    f"periodic axis {name} of length {L:.12g}: it must be < L/2 = {0.5 * L:.12g} so that each pair "
                    f"within the ghost width has a unique nearest periodic image; enlarge the box along {name} "
                    f"(box.lo/box.hi), or reduce contact.skin or the largest body (the limit does not depend "
                    f"on the number of ranks)")
        return w, None

    def validate_ghost_width(self, width):
        """Return ``float(width)``; raise unless 0 <= width < L_a/2 on every periodic axis a (see the module
        docstring).  Collective over ``self.comm`` (:func:`relcp_mpi.parallel.errors.agree`: one small
        allreduce): the verdict is the same on every rank even if the ranks passed different widths, and the
        error raised is the one of the lowest failing rank, with the same message everywhere:

        * :class:`GhostWidthError` (a ``ValueError``) when the width is too large for the box (the deck's
          box / skin / body sizes are incompatible), naming the width, the axis and its length and what to
          change;
        * ``ValueError`` when the width is not a finite number >= 0 (a programming error)."""
        w, problem = self._ghost_width_problem(width)
        if self.comm is not None:
            agree(self.comm, problem)
        elif problem is not None:
            raise problem
        return w


class CartesianDecomposition(Decomposition):
    """Equal blocks on a ``dims[0] x dims[1] x dims[2]`` grid of ranks (row-major rank order).

    ``dims`` defaults to ``MPI.Compute_dims(size, 3)`` with the largest factor assigned to the
    longest box axis.
    """

    def __init__(self, box, comm, dims=None):
        super().__init__(box, comm)
        if dims is None:
            from mpi4py import MPI
            cd = sorted(MPI.Compute_dims(self.size, 3), reverse=True)
            order = np.argsort(-box.lengths, kind="stable")
            dims = [0, 0, 0]
            for i, ax in enumerate(order):
                dims[ax] = cd[i]
        dims = np.array(dims, dtype=np.int64).reshape(3)
        if np.any(dims < 1) or int(np.prod(dims)) != self.size:
            raise ValueError(f"Cartesian dims {dims.tolist()} do not multiply to the rank count {self.size}")
        self.dims = dims
        self.cuts = []
        for ax in range(3):
            c = box.lo[ax] + box.lengths[ax] * (np.arange(dims[ax] + 1) / dims[ax])
            c[0], c[-1] = box.lo[ax], box.hi[ax]
            self.cuts.append(c)
        idx = np.array(np.unravel_index(np.arange(self.size), tuple(dims))).T  # (size, 3)
        self.coords = idx
        self._lo = np.stack([self.cuts[a][idx[:, a]] for a in range(3)], axis=1)
        self._hi = np.stack([self.cuts[a][idx[:, a] + 1] for a in range(3)], axis=1)

    def _owner(self, p):
        i = [np.searchsorted(self.cuts[a][1:-1], p[:, a], side="right") for a in range(3)]
        return np.ravel_multi_index(tuple(i), tuple(self.dims))


class RCBDecomposition(Decomposition):
    """Weighted recursive coordinate bisection, built collectively.

    Parameters
    ----------
    box, comm
    x_local : (n, 3) positions of this rank's bodies
    weights_local : (n,) non-negative work weights (default 1)
    bins, rounds : histogram resolution of the cut search (each cut is located to within
        ``extent / bins**rounds``)

    Each node holding ``p > 1`` ranks is split into ``floor(p/2)`` and ``p - floor(p/2)`` ranks by a
    plane normal to the longest extent of the bounding box of its bodies (of its region if it holds
    none) at the weighted quantile ``floor(p/2)/p``.  The quantile is found by a few rounds of
    collective histogram bisection.  Weights are quantised to integers (2**20 levels of the largest
    weight; positive weights count at least 1) so all sums are exact: the result depends only on the
    global set of (position, weight) and not on which rank holds which body nor on summation order.
    All nodes of one tree level are processed together (2 + rounds allreduces per level).
    """

    WEIGHT_LEVELS = 2 ** 20

    def __init__(self, box, comm, x_local, weights_local=None, bins=64, rounds=6):
        super().__init__(box, comm)
        x = np.asarray(x_local, dtype=np.float64).reshape(-1, 3)
        if x.size and not np.all(np.isfinite(x)):
            raise ValueError("RCBDecomposition: non-finite positions")
        p = self.canonical(x)
        w = np.ones(len(p)) if weights_local is None else np.asarray(weights_local, dtype=np.float64).reshape(-1)
        if w.shape != (len(p),):
            raise ValueError(f"weights_local has shape {w.shape}, expected ({len(p)},)")
        if w.size and (not np.all(np.isfinite(w)) or np.any(w < 0)):
            raise ValueError("RCB weights must be finite and >= 0")
        self.bins, self.rounds = int(bins), int(rounds)
        self._build(p, self._quantise(w))

    def _quantise(self, w):
        from mpi4py import MPI
        wmax = np.array([w.max() if w.size else 0.0])
        self.comm.Allreduce(MPI.IN_PLACE, wmax, op=MPI.MAX)
        if wmax[0] <= 0:
            return np.zeros(len(w), dtype=np.int64)
        wi = np.rint(w / wmax[0] * self.WEIGHT_LEVELS).astype(np.int64)
        wi[(w > 0) & (wi == 0)] = 1
        return wi

    def _build(self, p, w):
        from mpi4py import MPI
        comm, K = self.comm, self.bins
        blo, bhi = self.box.lo, self.box.hi
        # node table (python lists; the number of nodes is 2*size - 1)
        r0, nr, rlo, rhi = [0], [self.size], [blo.copy()], [bhi.copy()]
        axis, cut, left, right = [-1], [np.nan], [-1], [-1]
        node_of = np.zeros(len(p), dtype=np.int64)
        active = [0] if self.size > 1 else []
        while active:
            A = len(active)
            slot_of_node = np.full(len(r0), -1, dtype=np.int64)
            slot_of_node[active] = np.arange(A)
            s = slot_of_node[node_of]
            m = s >= 0
            sm, pm, wm = s[m], p[m], w[m]
            # bounding boxes of the bodies in each active node (exact, order independent)
            bb = np.full((A, 6), np.inf)
            if len(sm):
                np.minimum.at(bb, (sm[:, None], np.arange(3)[None, :]), pm)
                np.minimum.at(bb, (sm[:, None], np.arange(3, 6)[None, :]), -pm)
            comm.Allreduce(MPI.IN_PLACE, bb, op=MPI.MIN)
            tot = np.zeros(A, dtype=np.int64)
            np.add.at(tot, sm, wm)
            comm.Allreduce(MPI.IN_PLACE, tot, op=MPI.SUM)
            bmin, bmax = bb[:, :3], -bb[:, 3:]
            has = np.all(bmin <= bmax, axis=1)
            ext_b = np.where(has[:, None], bmax - bmin, 0.0)
            reg_lo = np.array([rlo[k] for k in active])
            reg_hi = np.array([rhi[k] for k in active])
            nrs = np.array([nr[k] for k in active])
            nleft = nrs // 2
            frac = nleft / nrs
            geometric = ~has | (tot == 0) | (ext_b.max(axis=1) <= 0)
            ax = np.where(geometric, np.argmax(reg_hi - reg_lo, axis=1), np.argmax(ext_b, axis=1))
            ar = np.arange(A)
            # geometric cut (no bodies / no weight / all bodies at one point)
            cuts = reg_lo[ar, ax] + (reg_hi[ar, ax] - reg_lo[ar, ax]) * frac
            # weighted quantile by histogram bisection: invariant F(a) < T <= F(b), F(c) = W(coord < c)
            T = tot * frac
            a = np.where(geometric, 0.0, bmin[ar, ax])
            b = np.where(geometric, 1.0, np.nextafter(bmax[ar, ax], np.inf))
            Fa = np.zeros(A, dtype=np.int64)
            Fb = tot.copy()
            c = pm[np.arange(len(pm)), ax[sm]] if len(sm) else np.zeros(0)
            use = ~geometric[sm] if len(sm) else np.zeros(0, dtype=bool)
            frac_k = np.arange(K + 1) / K
            for _ in range(self.rounds):
                edges = a[:, None] + (b - a)[:, None] * frac_k[None, :]
                edges[:, 0], edges[:, -1] = a, b
                inside = use & (c >= a[sm]) & (c < b[sm])
                si, ci = sm[inside], c[inside]
                k = np.floor((ci - a[si]) / (b[si] - a[si]) * K).astype(np.int64)
                k = np.clip(k, 0, K - 1)
                for _fix in range(3):  # make the bin consistent with the edge comparisons
                    k = np.where(ci < edges[si, k], k - 1, k)
                    k = np.clip(k, 0, K - 1)
                    k = np.where(ci >= edges[si, k + 1], k + 1, k)
                    k = np.clip(k, 0, K - 1)
                hist = np.zeros((A, K), dtype=np.int64)
                np.add.at(hist, (si, k), wm[inside])
                comm.Allreduce(MPI.IN_PLACE, hist, op=MPI.SUM)
                F = np.concatenate([Fa[:, None], Fa[:, None] + np.cumsum(hist, axis=1)], axis=1)
                kk = np.sum(F < T[:, None], axis=1) - 1
                kk = np.clip(kk, 0, K - 1)
                na, nb = edges[ar, kk], edges[ar, kk + 1]
                nFa, nFb = F[ar, kk], F[ar, kk + 1]
                keep = geometric
                a, b = np.where(keep, a, na), np.where(keep, b, nb)
                Fa, Fb = np.where(keep, Fa, nFa), np.where(keep, Fb, nFb)
            qcut = np.where((T - Fa) <= (Fb - T), a, b)
            cuts = np.where(geometric, cuts, qcut)
            cuts = np.clip(cuts, reg_lo[ar, ax], reg_hi[ar, ax])
            new_active = []
            for i, node in enumerate(active):
                nl = int(nleft[i])
                lo_l, hi_l = rlo[node].copy(), rhi[node].copy()
                hi_l[ax[i]] = cuts[i]
                lo_r, hi_r = rlo[node].copy(), rhi[node].copy()
                lo_r[ax[i]] = cuts[i]
                for (q0, qn, qlo, qhi) in ((r0[node], nl, lo_l, hi_l), (r0[node] + nl, nr[node] - nl, lo_r, hi_r)):
                    r0.append(q0); nr.append(qn); rlo.append(qlo); rhi.append(qhi)
                    axis.append(-1); cut.append(np.nan); left.append(-1); right.append(-1)
                    if qn > 1:
                        new_active.append(len(r0) - 1)
                left[node], right[node] = len(r0) - 2, len(r0) - 1
                axis[node], cut[node] = int(ax[i]), float(cuts[i])
            # move bodies to the children
            if len(sm):
                idx = np.flatnonzero(m)
                go_right = c >= cuts[sm]
                lch = np.array(left, dtype=np.int64)[np.array(active)][sm]
                rch = np.array(right, dtype=np.int64)[np.array(active)][sm]
                node_of[idx] = np.where(go_right, rch, lch)
            active = new_active
        self.node_axis = np.array(axis, dtype=np.int64)
        self.node_cut = np.array(cut, dtype=np.float64)
        self.node_left = np.array(left, dtype=np.int64)
        self.node_right = np.array(right, dtype=np.int64)
        leaves = np.flatnonzero(self.node_left < 0)
        self.node_rank = np.full(len(r0), -1, dtype=np.int64)
        self.node_rank[leaves] = np.array(r0)[leaves]
        self._lo = np.zeros((self.size, 3))
        self._hi = np.zeros((self.size, 3))
        for lf in leaves:
            self._lo[r0[lf]] = rlo[lf]
            self._hi[r0[lf]] = rhi[lf]

    # -- serialisation (checkpoints) ------------------------------------------------------------
    _DICT_KEYS = ("size", "bins", "rounds", "axis", "cut", "left", "right", "rank", "lo", "hi")
    _NODE_KEYS = (("node_axis", "axis", np.int64), ("node_cut", "cut", np.float64),
                  ("node_left", "left", np.int64), ("node_right", "right", np.int64),
                  ("node_rank", "rank", np.int64))

    def to_dict(self):
        """The decomposition tree as a JSON-able dict of plain ints / floats / lists (``cut`` holds NaN for
        leaves; ``json.dumps`` writes it with its default ``allow_nan=True``).  Keys: ``size``, ``bins``,
        ``rounds``, the node arrays ``axis``, ``cut``, ``left``, ``right``, ``rank`` (2 size - 1 nodes) and the
        subdomain bounds ``lo``, ``hi`` (size x 3 nested lists).  :meth:`from_dict` rebuilds it exactly."""
        d = {"size": int(self.size), "bins": int(self.bins), "rounds": int(self.rounds)}
        for attr, key, dt in self._NODE_KEYS:
            d[key] = np.asarray(getattr(self, attr), dtype=dt).tolist()
        d["lo"] = np.asarray(self._lo, dtype=np.float64).tolist()
        d["hi"] = np.asarray(self._hi, dtype=np.float64).tolist()
        return d

    @classmethod
    def from_dict(cls, box, comm, d):
        """Rebuild a decomposition written by :meth:`to_dict` on ``comm`` (no communication; the same
        ``owner()`` answers and bounds as the original, bit for bit).

        Raises ``ValueError`` naming the problem when ``d`` is not such a dict: missing keys, ``size`` not
        ``comm``'s size, node arrays not all of length ``2 size - 1``, ``lo``/``hi`` not ``size x 3``, or a tree
        that is not well formed (child indices, split axes, leaf ranks)."""
        def bad(msg):
            return ValueError(f"RCBDecomposition.from_dict: {msg}")

        if not isinstance(d, dict):
            raise bad(f"expected a dict, got {type(d).__name__}")
        missing = [k for k in cls._DICT_KEYS if k not in d]
        if missing:
            raise bad(f"missing key(s) {missing}")
        size = comm.Get_size()
        try:
            n_size, bins, rounds = (int(d["size"]), int(d["bins"]), int(d["rounds"]))
        except (TypeError, ValueError):
            raise bad(f"size, bins, rounds must be integers, got {d['size']!r}, {d['bins']!r}, "
                      f"{d['rounds']!r}") from None
        if n_size != size:
            raise bad(f"written for {n_size} rank(s), the communicator has {size}")
        n_nodes = 2 * size - 1
        arrays = {}
        for attr, key, dt in cls._NODE_KEYS:
            try:
                a = np.asarray(d[key], dtype=np.float64)
            except (TypeError, ValueError):
                raise bad(f"'{key}' is not a list of numbers") from None
            if a.ndim != 1 or len(a) != n_nodes:
                raise bad(f"'{key}' has shape {a.shape}, expected ({n_nodes},) (2 * size - 1 nodes)")
            if dt is np.int64:
                if not np.all(np.isfinite(a)) or np.any(a != np.rint(a)):
                    raise bad(f"'{key}' must hold integers")
            arrays[attr] = a.astype(dt)
        for key in ("lo", "hi"):
            try:
                a = np.asarray(d[key], dtype=np.float64)
            except (TypeError, ValueError):
                raise bad(f"'{key}' is not a list of numbers") from None
            if a.size != 3 * size:
                raise bad(f"'{key}' has {a.size} numbers, expected {size} x 3")
            if not np.all(np.isfinite(a)):
                raise bad(f"'{key}' holds non-finite values")
            arrays[key] = a.reshape(size, 3)
        if np.any(arrays["lo"] > arrays["hi"]):
            raise bad("some subdomain has lo > hi")
        left, right = arrays["node_left"], arrays["node_right"]
        ax, cut, rank = arrays["node_axis"], arrays["node_cut"], arrays["node_rank"]
        idx = np.arange(n_nodes)
        inner = left >= 0
        # children come after their parent (as _build appends them): guarantees owner() terminates
        if np.any(inner != (right >= 0)) or np.any(inner & ((left <= idx) | (left >= n_nodes)
                                                           | (right <= idx) | (right >= n_nodes))):
            raise bad("malformed tree: child indices out of range or not after their parent")
        if np.any(inner & ((ax < 0) | (ax > 2))) or not np.all(np.isfinite(cut[inner])):
            raise bad("malformed tree: inner nodes need an axis in 0..2 and a finite cut")
        if np.any(inner & (rank != -1)) or sorted(rank[~inner].tolist()) != list(range(size)):
            raise bad("malformed tree: the leaves must hold each rank 0..size-1 exactly once")
        obj = cls.__new__(cls)
        Decomposition.__init__(obj, box, comm)
        obj.bins, obj.rounds = bins, rounds
        for attr, _, _ in cls._NODE_KEYS:
            setattr(obj, attr, arrays[attr])
        obj._lo = arrays["lo"]
        obj._hi = arrays["hi"]
        return obj

    def _owner(self, p):
        node = np.zeros(len(p), dtype=np.int64)
        while True:
            inner = self.node_left[node] >= 0
            if not np.any(inner):
                break
            ii = np.flatnonzero(inner)
            nd = node[ii]
            coord = p[ii, self.node_axis[nd]]
            node[ii] = np.where(coord < self.node_cut[nd], self.node_left[nd], self.node_right[nd])
        return self.node_rank[node]


def imbalance(work_local, comm):
    """Load imbalance max/mean over ranks of the scalar ``work_local`` (1.0 if the total is 0)."""
    from mpi4py import MPI
    v = np.array([float(np.sum(work_local))])
    mx, sm = np.zeros(1), np.zeros(1)
    comm.Allreduce(v, mx, op=MPI.MAX)
    comm.Allreduce(v, sm, op=MPI.SUM)
    mean = sm[0] / comm.Get_size()
    return float(mx[0] / mean) if mean > 0 else 1.0


def should_rebalance(step, rebalance_every, imbalance, threshold):
    """True when ``step`` is a positive multiple of ``rebalance_every`` (> 0) and ``imbalance > threshold``.

    Pass the *global* imbalance from :func:`imbalance` so every rank takes the same decision.
    ``rebalance_every <= 0`` disables rebalancing.
    """
    if rebalance_every is None or rebalance_every <= 0:
        return False
    return step > 0 and step % rebalance_every == 0 and imbalance > threshold
