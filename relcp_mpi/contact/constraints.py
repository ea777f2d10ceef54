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
    """Local constraints as parallel numpy arrays (see module docstring)."""

    def __init__(self):
        for f in _INT:
            setattr(self, f, np.zeros(0, np.int64))
        for f in _VEC:
            setattr(self, f, np.zeros((0, 3)))
        for f in _SCAL:
            setattr(self, f, np.zeros(0))
        self._d_rows = None          # D entries of the rows seen by assemble_D (see _triplets)

    def __len__(self):
        return len(self.ia)

    def append(self, **cols):
        """Append rows; every field but those of ``_OPTIONAL`` must be given, with equal lengths."""
        n = len(np.asarray(cols["ia"]))
        for f in _INT + _VEC + _SCAL:
            a = np.asarray(cols[f]) if f in cols or f not in _OPTIONAL else np.full(n, _OPTIONAL[f])
            n = len(a) if n is None else n
            if len(a) != n:
                raise ValueError(f"constraint column {f} has length {len(a)}, expected {n}")
            old = getattr(self, f)
            setattr(self, f, np.concatenate([old, a.astype(old.dtype).reshape((-1,) + old.shape[1:])]))

    def columns(self, start=0):
        """Per-constraint 6-vectors for body i and body j of the rows from ``start`` on: (Gi (c,6), Gj (c,6)).

        Gi = [n, r_i x n];  Gj = -[n, r_j x n] (zero for walls)."""
        n = self.normal[start:]
        Gi = np.concatenate([n, np.cross(self.r_i[start:], n)], axis=1)
        Gj = -np.concatenate([n, np.cross(self.r_j[start:], n)], axis=1)
        Gj[self.ib[start:] < 0] = 0.0
        return Gi, Gj

    def keys(self):
        """Structured (gid_i, gid_j, sub) keys for warm-start matching, shape (c,)."""
        k = np.empty(len(self), dtype=[("gid_i", np.int64), ("gid_j", np.int64), ("sub", np.int64)])
        k["gid_i"], k["gid_j"], k["sub"] = self.gid_i, self.gid_j, self.sub
        return k


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


def assemble_D(table, body_row, row_starts, comm, col_offset, n_cols_global, D=None):
    """Distributed D: rows = 6 dofs per body (owner-distributed), columns = constraints.

    ``body_row`` (m,) is the global block-row index of each body in the combined [owned, ghost] arrays and
    ``row_starts`` (P+1,) the first block row of every rank (rank p owns block rows
    [row_starts[p], row_starts[p+1])).  Entries in rows of ghost bodies are sent to the owning rank with one
    Alltoallv of (row, col, value) triplets; every rank then builds its owned rows in CSR form and PETSc
    creates the AIJ matrix from the arrays (no per-entry Python calls, no sort: see :func:`_owned_csr`).  ``D`` (a previous matrix) is destroyed.
    """
    PETSc = get_petsc()
    R, C, V = _triplets(table, body_row, col_offset)
    rank, size = comm.rank, comm.size
    r0, r1 = 6 * int(row_starts[rank]), 6 * int(row_starts[rank + 1])
    if size > 1:
        R, C, V = _route_triplets(R, C, V, 6 * np.asarray(row_starts, dtype=np.int64), comm)
    nloc = r1 - r0
    indptr, C, V = _owned_csr(R - r0, C, V, nloc)
    if D is not None:
        D.destroy()
    # with arrays: on one rank PETSc adopts the CSR arrays (MatCreateSeqAIJWithArrays, kept alive by petsc4py)
    # instead of inserting them row by row; several ranks copy them (MatCreateMPIAIJWithArrays).  Same matrix.
    D = PETSc.Mat().createAIJWithArrays(size=((nloc, None), (len(table), n_cols_global)),
                                        csr=(indptr.astype(PETSc.IntType), C.astype(PETSc.IntType),
                                             V.astype(PETSc.ScalarType)),
                                        comm=comm)
    D.assemble()
    return D


def _triplets(table, body_row, col_offset):
    """(row, col, value) triplets of the local constraints' D entries, in column order (per constraint the six
    rows of body i, then the six of body j; walls only body i): int64 (e,), int64 (e,), float (e,).

    Rows are only ever appended to a table (recursion levels of one step), so the per-row rows and values of the
    rows seen before are kept on the table and only the appended rows are computed (row-wise arithmetic: the
    same numbers); the column numbers are recomputed, since ``col_offset`` moves when other ranks append rows."""
    c = len(table)
    cache = getattr(table, "_d_rows", None)
    start, R0, V0 = (cache[1], cache[2], cache[3]) if cache is not None and cache[0] is body_row \
        else (0, np.zeros((0, 12), np.int64), np.zeros((0, 12)))
    Gi, Gj = table.columns(start)
    bi = body_row[table.ia[start:]]
    bj = body_row[np.where(table.ib[start:] < 0, 0, table.ib[start:])]
    R1 = np.empty((c - start, 12), np.int64)
    R1[:, :6] = 6 * bi[:, None] + np.arange(6)
    R1[:, 6:] = 6 * bj[:, None] + np.arange(6)
    R = np.concatenate([R0, R1]) if start else R1
    V = np.concatenate([V0, np.concatenate([Gi, Gj], axis=1)]) if start else np.concatenate([Gi, Gj], axis=1)
    table._d_rows = (body_row, c, R, V)
    wall = table.ib < 0
    C = np.repeat(col_offset + np.arange(c, dtype=np.int64), 12).reshape(c, 12)
    if wall.any():
        keep = np.ones((c, 12), bool)
        keep[wall, 6:] = False
        return R[keep], C[keep], V[keep]
    return R.ravel(), C.ravel(), V.ravel()


def _owned_csr(R, C, V, nloc):
    """CSR arrays (indptr (nloc+1,), columns, values) of triplets with local rows R in [0, nloc), columns
    ascending within each row, duplicate (row, col) entries summed in input order.

    The triplets arrive in column order (:func:`_triplets`; after routing, by source rank, whose column ranges
    ascend), so a stable counting sort by row (scipy's COO -> CSR conversion, O(e)) already gives the columns of
    each row in ascending order; no general sort is needed.  Values are normalised with ``+ 0.0`` so that the
    result is bit for bit the former ``lexsort`` + ``bincount`` construction (which turned -0.0 into 0.0)."""
    import scipy.sparse as sp
    V = V + 0.0
    if len(R) and np.any(np.diff(C) < 0):           # not column-ordered (never expected): general sort
        order = np.lexsort((C, R))
        R, C, V = R[order], C[order], V[order]
    A = sp.coo_matrix((V, (R, C)), shape=(nloc, int(C.max()) + 1 if len(C) else 1)).tocsr()
    A.sort_indices()
    return A.indptr, A.indices, A.data


def _route_triplets(R, C, V, row_starts6, comm):
    """Send each (row, col, value) triplet to the rank owning its row; returns the received triplets."""
    dest = np.searchsorted(row_starts6, R, side="right") - 1
    got = exchange_rows(np.stack([R.astype(np.float64), C.astype(np.float64), V], axis=1), dest, comm)
    return got[:, 0].astype(np.int64), got[:, 1].astype(np.int64), got[:, 2]
