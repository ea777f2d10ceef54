"""Constraint table of one rank and the distributed D matrix.

A rank owns the constraints of the pairs it owns (pair rule: the rank owning the body with the lower global
id; a wall constraint belongs to the body's owner).  Each row k of the table is one unilateral SNSD
constraint: pair (gid_i, gid_j, sub) where ``sub`` counts the rows of that pair generated in the current
step by the ReLCP recursion (0 = the initial constraint).  For walls gid_j = -1 - wall_index.

Arrays (c = number of local constraints):

* ``ia``, ``ib`` int64 (c,)  indices into the rank's combined [owned, ghost] body arrays (ib = -1 for walls)
* ``gid_i``, ``gid_j``, ``sub`` int64 (c,)
* ``level`` int64 (c,): the recursion level that appended the row (0 = rows of the start configuration)
* ``normal`` (c, 3), ``r_i`` (c, 3), ``r_j`` (c, 3): unit normal (j -> i) and lever arms p - x of the witness
  points relative to the body centres, at the configuration where the row was generated
* ``gap_free`` (c,): the LCP constant q [L], the gap each row predicts for the step without contact forces,
  q = Phi0 + dt D^T U_ext - gap_margin (see ``stepper.relcp``; named so that ``q`` stays the quaternion of a body)
* ``sep0`` (c,): the separation measured when the row was generated [L]
"""
import numpy as np

from relcp_mpi.parallel.exchange import exchange_rows
from relcp_mpi.petsc import get_petsc

_INT = ("ia", "ib", "gid_i", "gid_j", "sub", "level")
_OPTIONAL = {"level": 0}        # columns that may be omitted in append (filled with this value)
_VEC = ("normal", "r_i", "r_j")
_SCAL = ("gap_free", "sep0")


class ConstraintTable:
    """Local constraints as parallel numpy arrays (see module docstring).

    Appended rows are kept as parts and joined into the columns when a column is first read: a level appends
    several groups of rows in a row (SNSD, end-point, wall, cap rows), and joining each group at once
    reallocated the whole table (9 MiB on the dense 8,000-rod bed) per group, each copy larger than the holes the
    last one left in the heap."""

    def __init__(self):
        self._cols = {f: np.zeros((0, 3) if f in _VEC else 0, np.int64 if f in _INT else np.float64)
                      for f in _INT + _VEC + _SCAL}
        self._parts = []            # appended column dicts not yet joined into _cols
        self._n = 0

    def __len__(self):
        return self._n

    def append(self, **cols):
        """Append rows; every field but those of ``_OPTIONAL`` must be given, with equal lengths."""
        n = len(np.asarray(cols["ia"]))
        part = {}
        for f in _INT + _VEC + _SCAL:
            a = np.asarray(cols[f]) if f in cols or f not in _OPTIONAL else np.full(n, _OPTIONAL[f])
            if len(a) != n:
                raise ValueError(f"constraint column {f} has length {len(a)}, expected {n}")
            old = self._cols[f]
            part[f] = a.astype(old.dtype).reshape((-1,) + old.shape[1:])    # a copy: callers may reuse a
        self._parts.append(part)
        self._n += n

    def _column(self, f):
        if self._parts:             # join the pending rows into every column (once per group of appends)
            parts, self._parts = self._parts, []
            for g in self._cols:
                self._cols[g] = np.concatenate([self._cols[g]] + [p[g] for p in parts])
        return self._cols[f]

    def _set_column(self, f, value):
        self._column(f)
        self._cols[f] = value

    def keep(self, mask):
        """Drop the rows where ``mask`` (c,) bool is False (the order of the others is kept)."""
        mask = np.asarray(mask, bool)
        if len(mask) != self._n:
            raise ValueError(f"keep: mask of length {len(mask)} for {self._n} rows")
        self._column("ia")              # join pending parts
        for f in self._cols:
            self._cols[f] = self._cols[f][mask]
        self._n = int(mask.sum())

    def keys(self):
        """Structured (gid_i, gid_j, sub) keys for warm-start matching, shape (c,)."""
        k = np.empty(len(self), dtype=[("gid_i", np.int64), ("gid_j", np.int64), ("sub", np.int64)])
        k["gid_i"], k["gid_j"], k["sub"] = self.gid_i, self.gid_j, self.sub
        return k


for _f in _INT + _VEC + _SCAL:
    setattr(ConstraintTable, _f, property(lambda self, f=_f: self._column(f),
                                          lambda self, value, f=_f: self._set_column(f, value)))
del _f


def lookup_keys(keys, table_keys):
    """Vectorised position of each structured key of ``keys`` in ``table_keys``; -1 where absent.  Shape (m,)."""
    out = np.full(len(keys), -1, dtype=np.int64)
    if len(keys) == 0 or table_keys is None or len(table_keys) == 0:
        return out
    keys, table_keys = _packed(keys, table_keys)
    order = np.argsort(table_keys, kind="stable")
    sk = table_keys[order]
    pos = np.minimum(np.searchsorted(sk, keys), len(sk) - 1)
    hit = sk[pos] == keys
    out[hit] = order[pos[hit]]
    return out


def _packed(keys, table_keys):
    """Structured integer keys of both arrays as order-preserving int64 codes (sorting and searching structured
    arrays is a slow generic comparison); unchanged when they are plain or do not fit into 62 bits."""
    names = keys.dtype.names
    if not names or table_keys.dtype.names != names:
        return keys, table_keys
    lo, span = [], []
    for f in names:
        a, b = keys[f], table_keys[f]
        lo_f = min(int(a.min()), int(b.min()))
        lo.append(lo_f)
        span.append(max(int(a.max()), int(b.max())) - lo_f + 1)
    if np.prod([float(x) for x in span]) >= 2.0 ** 62:
        return keys, table_keys
    out = []
    for arr in (keys, table_keys):
        code = np.zeros(len(arr), np.int64)
        for f, lo_f, sp in zip(names, lo, span):
            code *= sp
            code += arr[f].astype(np.int64) - lo_f
        out.append(code)
    return out[0], out[1]


def match_keys(keys, table_keys, table_values, default=0.0):
    """Vectorised lookup of structured ``keys`` in (table_keys, table_values); missing -> default.

    ``table_values`` may be (c,) or (c, k); the result has shape (m,) or (m, k) accordingly."""
    vals = np.asarray(table_values, dtype=float) if table_values is not None else np.zeros(0)
    out = np.full((len(keys),) + vals.shape[1:], default, dtype=float)
    idx = lookup_keys(keys, table_keys)
    hit = idx >= 0
    out[hit] = vals[idx[hit]]
    return out


# the attribute by which assemble_D marks its D as having one column pattern per body (the six dof rows of a body
# share it), for the solver's compiled operator (solver/operator_jit.py); on one rank it holds D's local CSR arrays
# (indptr, cols, vals) with global columns, the arrays PETSc uses in place; on several ranks the empty tuple, and
# LAYOUT_ATTR holds the operator's layout of the local rows (see assemble_D), which the operator takes over once
# (replacing it by the empty tuple, so it is not held twice)
CSR_ATTR = "relcp_csr"
LAYOUT_ATTR = "relcp_layout"


def assemble_D(table, body_row, row_starts, comm, col_offset, n_cols_global, D=None, axis=None):
    """Distributed D: rows = 6 dofs per body (owner-distributed), columns = constraints.

    ``body_row`` (m,) is the global block-row index of each body in the combined [owned, ghost] arrays and
    ``row_starts`` (P+1,) the first block row of every rank (rank p owns block rows
    [row_starts[p], row_starts[p+1])).  Every constraint contributes one 6-vector per body (:func:`_halves`);
    the 6-vectors of ghost bodies are sent to the owning rank with one Alltoallv, and every rank builds its
    owned rows in CSR form straight from the 6-vectors (:func:`_owned_csr`: the six dof rows of a body share
    one column pattern) in PETSc's index and scalar types, which PETSc adopts on one rank and copies on
    several (no per-entry Python calls, no (row, col, value) triplets).  ``D`` (a previous matrix) is destroyed
    first, so that its memory is free again before the new arrays are built.  ``axis`` (m, 3) or None: a unit
    vector per local body (zero for none) along which the rows' torques are dropped (:func:`_halves`).
    """
    PETSc = get_petsc()
    if D is not None:
        D.destroy()
    body, col, component = _halves(table, body_row, col_offset, axis)
    rank, size = comm.rank, comm.size
    b0, b1 = int(row_starts[rank]), int(row_starts[rank + 1])
    if size > 1:
        body, col, component = _route_halves(body, col, component, np.asarray(row_starts, dtype=np.int64), comm)
    nloc = 6 * (b1 - b0)
    ncol = max(int(n_cols_global), 1)
    size_arg = ((nloc, None), (len(table), n_cols_global))
    if size == 1:
        # the (local block row, column) code of every 6-vector; body and col are not needed beyond it (peak memory)
        key = (body - b0) * ncol + col
        del body, col
        indptr, cols, vals = _owned_csr(key, component, b1 - b0, n_cols_global)
        del key, component
        D = PETSc.Mat().createAIJWithArrays(size=size_arg, csr=(indptr, cols, vals), comm=comm)
        D.assemble()
        D.setAttr(CSR_ATTR, (indptr, cols, vals))
        return D
    # several ranks: each body's owned columns first, then its ghost columns (columns of other ranks' rows), each
    # part ascending -- the diagonal and off-diagonal blocks of PETSc's MPIAIJ in its own entry order, handed to
    # PETSc split (MatCreateMPIAIJWithSplitArrays: no row-by-row insertion) and, renumbered, to the compiled
    # operator (solver/operator.py, _OnePass), which would otherwise reorder D's rows itself at every level
    c0, c1 = int(col_offset), int(col_offset) + len(table)
    ghost = (col < c0) | (col >= c1)
    key = (body - b0) * (2 * ncol) + ghost * ncol + col
    ndiag = np.bincount(body[~ghost] - b0, minlength=b1 - b0).astype(np.int64)
    gl = np.unique(col[ghost])                  # the ghost columns, ascending (PETSc's garray order)
    del body, col, ghost
    indptr, cols, vals = _owned_csr(key, component, b1 - b0, n_cols_global, stride=2 * ncol)
    del key, component
    gm = (cols < c0) | (cols >= c1)             # per entry
    own = ~gm
    nper = (indptr[1::6] - indptr[0:-1:6]).astype(np.int64)      # columns per body
    di = np.zeros(nloc + 1, PETSc.IntType)
    np.cumsum(np.repeat(ndiag, 6), out=di[1:])
    oi = np.zeros(nloc + 1, PETSc.IntType)
    np.cumsum(np.repeat(nper - ndiag, 6), out=oi[1:])
    split = ((di, (cols[own] - c0).astype(PETSc.IntType), vals[own]), (oi, cols[gm], vals[gm]))
    D = PETSc.Mat().createAIJWithArrays(size=size_arg, csr=split, comm=comm)
    D.assemble()
    del split, di, oi
    lcols = cols                                # local numbering: owned c - c0, ghost n_owned + rank in gl
    lcols[own] -= c0
    lcols[gm] = (c1 - c0) + np.searchsorted(gl, lcols[gm])
    D.setAttr(CSR_ATTR, ())
    D.setAttr(LAYOUT_ATTR, (indptr, ndiag, lcols, vals, gl))
    return D


def local_csr(D):
    """D's local rows as CSR arrays (indptr, cols, vals) in PETSc's types, global columns: the arrays of the
    attribute ``CSR_ATTR`` while it holds them (on one rank the arrays D lives in: shared, not to be written;
    getValuesCSR would copy them, 9.4 MiB on the dense 8,000-rod bed), else :meth:`getValuesCSR`'s copies."""
    csr = D.getAttr(CSR_ATTR)
    return csr if csr else D.getValuesCSR()


def _halves(table, body_row, col_offset, axis=None):
    """The D entries of the local constraints as one 6-vector per (constraint, body): ``(body (h,) int64 global
    block rows, col (h,) int64 global columns, component)``, body i's 6-vectors of all rows first, then body j's
    (walls have none), ``[n, r_i x n]`` for body i and ``-[n, r_j x n]`` for body j, where ``component(k)`` is
    the (h,) array of component k of the 6-vectors, computed when asked for: the CSR is filled one component at
    a time, and all 6-vectors at once took 48 bytes per half (6 MiB on the dense 8,000-rod bed, at the assembly
    that set the step's peak).  The cross product is written out as ``np.cross`` computes it (a_p b_q - a_q b_p,
    two products and a difference), so the bits are np.cross's.  The one place D's entries are formed.

    ``axis`` (m, 3) or None: per local body a unit vector (or zero) along which the torques are dropped, each
    torque t replaced by t - (t . a) a (contact.drop_axial_torque: the symmetry axis of a spherocylinder or ring
    at the start of the step)."""
    c = len(table)
    pair = np.flatnonzero(table.ib >= 0)
    n, r_i, r_j = table.normal, table.r_i, table.r_j

    def torque(k):
        out = np.empty(c + len(pair))
        p, q = ((1, 2), (2, 0), (0, 1))[k]                 # (r x n)_k = r_p n_q - r_q n_p
        np.subtract(r_i[:, p] * n[:, q], r_i[:, q] * n[:, p], out=out[:c])
        np.negative(r_j[pair, p] * n[pair, q] - r_j[pair, q] * n[pair, p], out=out[c:])
        return out

    if axis is not None:
        a = np.concatenate([axis[table.ia], axis[table.ib[pair]]])
        ta = sum(torque(k) * a[:, k] for k in range(3))       # (h,) torque along each half's body axis

    def component(k):
        if k < 3:
            out = np.empty(c + len(pair))
            out[:c] = n[:, k]
            np.negative(n[pair, k], out=out[c:])
            return out
        out = torque(k - 3)
        if axis is not None:
            out -= ta * a[:, k - 3]
        return out

    col = col_offset + np.arange(c, dtype=np.int64)
    body = np.concatenate([body_row[table.ia], body_row[table.ib[pair]]]).astype(np.int64, copy=False)
    return body, np.concatenate([col, col[pair]]), component


def _owned_csr(key, component, nb, ncol, stride=None):
    """CSR arrays (indptr (6 nb + 1,), columns (e,), values (e,)) in PETSc's IntType / ScalarType of the local
    rows of D, from h 6-vectors given by their codes ``key`` (h,) int64 = local block row b in [0, nb) times
    ``stride`` (default max(ncol, 1)) plus column (assemble_D on several ranks: stride 2 ncol, plus ncol for a
    ghost column, so that a body's owned columns come first), and ``component(k)``, the (h,) array of their
    components k (see :func:`_halves`): dof row 6 b + k holds component k of the 6-vectors of body b, in key order
    (ascending columns with the default stride).  Values are
    normalised with ``+ 0.0`` and 6-vectors at the same (body, column) summed in input order, which is bit for bit
    the former (row, col, value) triplet construction (``lexsort`` + ``bincount``, turning -0.0 into 0.0).  A
    (body, column) pair repeats only when a constraint's two bodies share a block row (a body paired with its own
    periodic image, which the pair rule excludes): then the merge below keeps the input order.  ``key`` is
    sorted in place.

    Temporaries are per 6-vector (h = e / 6), not per entry, and there is no (h, 6) array: the six dof rows of a
    body are filled one component at a time from one sort of the 6-vectors by (body, column) (the output and
    ~7 h-arrays live; this assembly is the step's peak)."""
    PETSc = get_petsc()
    ncol = max(int(ncol), 1)
    stride = ncol if stride is None else int(stride)
    order = np.argsort(key, kind="stable")
    key[:] = key[order]
    new = np.ones(len(key), bool)
    new[1:] = key[1:] != key[:-1]
    if not new.all():                        # repeated (body, column): sum in input order (stable sort)
        first = np.flatnonzero(new)
        merged = [np.add.reduceat(component(k)[order] + 0.0, first) for k in range(6)]
        component, key, order = merged.__getitem__, key[first], None
    del new
    col = key % ncol
    body = key // stride
    nper = np.bincount(body, minlength=nb)                   # 6-vectors (columns) per body
    start = np.cumsum(nper) - nper                          # first 6-vector of each body
    indptr = np.zeros(6 * nb + 1, PETSc.IntType)
    np.cumsum(np.repeat(nper, 6), out=indptr[1:])
    # entry of 6-vector t (body b, t - start[b]-th of the body) in dof row 6 b + k: 6 start[b] + k nper[b] + t - start[b]
    base = start[body]
    base *= 5
    base += np.arange(len(body))
    step = nper[body]
    del body
    cols = np.empty(6 * len(col), PETSc.IntType)
    vals = np.empty(6 * len(col), PETSc.ScalarType)
    idx = np.empty(len(col), np.int64)
    for k in range(6):                       # one component at a time
        np.multiply(step, k, out=idx)
        idx += base
        cols[idx] = col
        g = component(k)
        if order is not None:
            g = g[order]
            g += 0.0
        vals[idx] = g
        del g
    return indptr, cols, vals


def _route_halves(body, col, component, row_starts, comm):
    """Send each 6-vector to the rank owning its body's block row; returns the rank's own and received ones as
    ``(body, col, component)`` like :func:`_halves`."""
    dest = np.searchsorted(row_starts, body, side="right") - 1
    mine = dest == comm.rank
    away = ~mine
    got = exchange_rows(np.column_stack([body[away].astype(np.float64), col[away].astype(np.float64)]
                                        + [component(k)[away] for k in range(6)]), dest[away], comm)

    def routed(k):
        return np.concatenate([component(k)[mine], got[:, 2 + k]])

    return (np.concatenate([body[mine], got[:, 0].astype(np.int64)]),
            np.concatenate([col[mine], got[:, 1].astype(np.int64)]), routed)
