"""Compiled (numba) application of the contact operator ``y = D^T M D x`` in one pass over D, bit for bit the
shell operator's ``D.mult`` / ``einsum`` / ``D.multTranspose`` (:mod:`relcp_mpi.solver.operator`).

Optional (geometry/numba_switch.py): used when a build of it is available (the ahead-of-time module of
geometry/aot_build.py always; numba's JIT from ``MIN_COLUMNS`` columns, importing numba costs ~1 s) and
``RELCP_NUMBA`` is not ``0``.

Why it is faster: PETSc reads D twice per application (``mult``, then ``multTranspose``), each time the column index
of every one of the six dof rows of a body, although the six rows share one column pattern (each constraint writes
a full 6-vector, :func:`relcp_mpi.contact.constraints._owned_csr`).  Here each body's column pattern is read once
and its 6 x n values once, while they are in cache, for both products: about a third of PETSc's memory traffic
(2.2-2.5x faster per application on dense 2k-8k beds and a 4k colony).

Why the bits are the same (a contract checked by tests/test_operator_jit.py against PETSc):

* ``u = D x`` row by row as PETSc sums it: the owned columns as its SeqAIJ inode kernel does, terms added to
  the running sum in pairs, ``s += (v_t x_t + v_{t+1} x_{t+1})``, the last term alone when their number is odd;
  on several ranks then the ghost columns one term at a time, continuing the same sum (MPIAIJ: diagonal block,
  then ``multAdd`` of the off-diagonal block, which PETSc keeps without inodes);
* ``f = M_b u`` as numpy's ``einsum("bij,bj->bi")`` sums a row of 6: ``((m0 u0 + m2 u2) + m4 u4) +
  ((m1 u1 + m3 u3) + m5 u5)``;
* ``y = D^T f`` accumulated per column in the order of D's rows (bodies in order, their six dof rows in order),
  as PETSc's ``multTranspose`` does; ghost columns' sums are added to their owners' afterwards (reverse scatter).

No fused multiply-add anywhere (numba_switch.compile_globals: no fastmath; the AOT build targets the generic CPU).
"""
import numpy as np

from relcp_mpi.geometry.numba_switch import AVAILABLE, backend, compiled_entries, enabled  # noqa: F401 (re-exported)

MIN_COLUMNS = 4096      # the JIT kernel: smaller operators keep PETSc's (importing numba costs ~1 s per process)

_JIT_NAMES = ("_body_matvec", "_body_diagonal")
_ENTRIES = ("_body_matvec", "_body_diagonal")
AOT_SIGNATURES = {      # the entry points' types for the AOT build (geometry/aot_build.py); PETSc's 32-bit ints
    "_body_matvec": "void(i4[::1], i8[::1], i4[::1], f8[::1], f8[:, :, ::1], f8[::1], f8[::1])",
    "_body_diagonal": "void(i4[::1], i8[::1], i4[::1], f8[::1], f8[:, :, ::1], f8[::1])",
}


def _compiled():
    return compiled_entries(globals(), _JIT_NAMES, _ENTRIES)


def _body_matvec(indptr, ndiag, cols, vals, blocks, x, y):
    """``y = D^T M D x`` (module docstring) for D given as CSR arrays whose six dof rows of each body share one
    column pattern: body b's rows are ``6 b .. 6 b + 5``, row ``6 b + k`` holds ``n_b`` entries starting at
    ``indptr[6 b] + k n_b``, columns ``cols`` (local indices into ``x`` / ``y``) the same in all six.

    ``indptr`` (6 nb + 1,), ``cols`` / ``vals`` (nnz,), ``blocks`` (nb, 6, 6) the mobility blocks, ``x`` / ``y``
    (n_cols,) (``y`` is overwritten); ``ndiag`` (nb,): the number of owned columns at the start of each body's
    pattern (the rest are ghost columns, summed after them), or empty when all are owned."""
    # every index below is an unsigned 64-bit integer: numba wraps negative signed indices around (a compare and
    # an add per access, and the gathers through ``cols`` cannot be proven non-negative), which made the product
    # ~2x slower; unsigned arithmetic throughout (a uint64 mixed with an int64 would give a float)
    one = np.uint64(1)
    nb = blocks.shape[0]
    y[:] = 0.0
    split = ndiag.shape[0] > 0
    for b in range(nb):
        r0 = np.uint64(indptr[6 * b])
        n = np.uint64(indptr[6 * b + 1]) - r0
        nd = np.uint64(ndiag[b]) if split else n
        u0 = 0.0
        u1 = 0.0
        u2 = 0.0
        u3 = 0.0
        u4 = 0.0
        u5 = 0.0
        # owned columns: added in pairs, as PETSc's SeqAIJ inode kernel sums a row of the (diagonal) block
        t = np.uint64(0)
        while t + one < nd:
            p = r0 + t
            xa = x[np.uint64(cols[p])]
            xb = x[np.uint64(cols[p + one])]
            u0 += vals[p] * xa + vals[p + one] * xb
            p += n
            u1 += vals[p] * xa + vals[p + one] * xb
            p += n
            u2 += vals[p] * xa + vals[p + one] * xb
            p += n
            u3 += vals[p] * xa + vals[p + one] * xb
            p += n
            u4 += vals[p] * xa + vals[p + one] * xb
            p += n
            u5 += vals[p] * xa + vals[p + one] * xb
            t += np.uint64(2)
        # the odd owned column, then the ghost columns one at a time, continuing the sums (MPIAIJ's off-diagonal
        # block has no inodes: its multAdd adds term by term)
        n2, n3, n4, n5 = np.uint64(2) * n, np.uint64(3) * n, np.uint64(4) * n, np.uint64(5) * n
        while t < n:
            p = r0 + t
            xa = x[np.uint64(cols[p])]
            u0 += vals[p] * xa
            u1 += vals[p + n] * xa
            u2 += vals[p + n2] * xa
            u3 += vals[p + n3] * xa
            u4 += vals[p + n4] * xa
            u5 += vals[p + n5] * xa
            t += one
        m = blocks[b]
        f0 = ((m[0, 0] * u0 + m[0, 2] * u2) + m[0, 4] * u4) + ((m[0, 1] * u1 + m[0, 3] * u3) + m[0, 5] * u5)
        f1 = ((m[1, 0] * u0 + m[1, 2] * u2) + m[1, 4] * u4) + ((m[1, 1] * u1 + m[1, 3] * u3) + m[1, 5] * u5)
        f2 = ((m[2, 0] * u0 + m[2, 2] * u2) + m[2, 4] * u4) + ((m[2, 1] * u1 + m[2, 3] * u3) + m[2, 5] * u5)
        f3 = ((m[3, 0] * u0 + m[3, 2] * u2) + m[3, 4] * u4) + ((m[3, 1] * u1 + m[3, 3] * u3) + m[3, 5] * u5)
        f4 = ((m[4, 0] * u0 + m[4, 2] * u2) + m[4, 4] * u4) + ((m[4, 1] * u1 + m[4, 3] * u3) + m[4, 5] * u5)
        f5 = ((m[5, 0] * u0 + m[5, 2] * u2) + m[5, 4] * u4) + ((m[5, 1] * u1 + m[5, 3] * u3) + m[5, 5] * u5)
        t = np.uint64(0)
        while t < n:
            p = r0 + t
            c = np.uint64(cols[p])
            # the six terms added to y[c] one after the other, left to right (multTranspose's order)
            y[c] = (((((y[c] + vals[p] * f0) + vals[p + n] * f1) + vals[p + n2] * f2) + vals[p + n3] * f3)
                    + vals[p + n4] * f4) + vals[p + n5] * f5
            t += one


def _body_diagonal(indptr, ndiag, cols, vals, blocks, y):
    """``y = diag(D^T M D)`` for D laid out as in :func:`_body_matvec` (the same arguments but ``x``): column c
    gets ``v^T M_b v`` from every body b whose pattern holds it (``v`` = D's 6-vector of b at c), in body order.
    ``ndiag`` is not needed (the owned / ghost split does not change a sum of per-body terms' order) and only
    keeps the signature of the product.  Not PETSc's bits (there is no PETSc twin: the shell's numpy path sums
    each quadratic form in einsum's order); its users (the divergence monitor's scale, the Jacobi scalings of
    ipm / TAO) need the value, not the bits."""
    one = np.uint64(1)
    nb = blocks.shape[0]
    y[:] = 0.0
    for b in range(nb):
        r0 = np.uint64(indptr[6 * b])
        n = np.uint64(indptr[6 * b + 1]) - r0
        m = blocks[b]
        t = np.uint64(0)
        while t < n:                                  # unsigned indices (see _body_matvec)
            p = r0 + t
            v0 = vals[p]
            v1 = vals[p + n]
            v2 = vals[p + np.uint64(2) * n]
            v3 = vals[p + np.uint64(3) * n]
            v4 = vals[p + np.uint64(4) * n]
            v5 = vals[p + np.uint64(5) * n]
            w0 = (m[0, 0] * v0 + m[0, 1] * v1 + m[0, 2] * v2) + (m[0, 3] * v3 + m[0, 4] * v4 + m[0, 5] * v5)
            w1 = (m[1, 0] * v0 + m[1, 1] * v1 + m[1, 2] * v2) + (m[1, 3] * v3 + m[1, 4] * v4 + m[1, 5] * v5)
            w2 = (m[2, 0] * v0 + m[2, 1] * v1 + m[2, 2] * v2) + (m[2, 3] * v3 + m[2, 4] * v4 + m[2, 5] * v5)
            w3 = (m[3, 0] * v0 + m[3, 1] * v1 + m[3, 2] * v2) + (m[3, 3] * v3 + m[3, 4] * v4 + m[3, 5] * v5)
            w4 = (m[4, 0] * v0 + m[4, 1] * v1 + m[4, 2] * v2) + (m[4, 3] * v3 + m[4, 4] * v4 + m[4, 5] * v5)
            w5 = (m[5, 0] * v0 + m[5, 1] * v1 + m[5, 2] * v2) + (m[5, 3] * v3 + m[5, 4] * v4 + m[5, 5] * v5)
            s = ((v0 * w0 + v1 * w1) + (v2 * w2 + v3 * w3)) + (v4 * w4 + v5 * w5)
            c = np.uint64(cols[p])
            y[c] += s
            t += one


def kernel():
    """:func:`_body_matvec` of the current compiled backend (callers check :func:`usable` first and keep it for the
    operator's life: looking the backend up costs more than a small product)."""
    return _compiled()[0]


def diagonal_kernel():
    """:func:`_body_diagonal` of the current compiled backend (as :func:`kernel`)."""
    return _compiled()[1]


def usable(n_columns, index_dtype):
    """Whether the compiled operator serves an operator of ``n_columns`` global columns with PETSc index type
    ``index_dtype``: a compiled backend is on, and (JIT) the operator is large enough to pay for numba's import,
    (AOT) the build's 32-bit index signature fits."""
    if not (AVAILABLE and enabled()):
        return False
    if backend() == "aot":
        return np.dtype(index_dtype) == np.int32
    return n_columns >= MIN_COLUMNS
