"""Dump of one (grown) contact LCP to a ``.npz`` file, gathered on rank 0, and its reader.

The LCP of a ReLCP solve is ``0 <= gamma _|_ q + dt D^T M D gamma >= 0`` (length units, see
:mod:`relcp_mpi.stepper.relcp`).  :func:`gather_lcp` collects on rank 0 (collective; ``None`` on the other
ranks):

* ``D`` as scipy CSR, shape ``(6 N, c)``: row ``6 r + k`` is dof k (vx, vy, vz, wx, wy, wz) of the body with
  global block row r; column j is global constraint j (rank order, then the rank's table order -- the column
  numbering of the solve);
* ``blocks`` ``(N, 6, 6)`` the unscaled mobility blocks M_b [L/(F T), ...] in block-row order, ``dt`` [T],
  ``body_gid`` ``(N,)`` the gid of each block row;
* ``q`` ``(c,)`` [L] and ``gamma`` ``(c,)`` [F T] (the solution, or the last iterate of a failed solve);
* per-row metadata ``(c,)``: ``gid_i``, ``gid_j`` (walls: ``-1 - wall index``), ``sub``, ``level``, ``sep0`` [L],
  ``rank``; ``(c, 3)``: ``normal``, ``r_i``, ``r_j`` [L];
* scalars in ``info`` (a dict: step, depth, method, tol, residual, ...).

:func:`save_lcp` / :func:`load_lcp` write and read it; :func:`lcp_matrix` rebuilds ``A = D^T (dt M) D`` as scipy
CSR (equal to the solve's operator up to rounding; for checks and tools, not for the solve).
"""
import os

import numpy as np

ROW_FIELDS = ("gid_i", "gid_j", "sub", "level", "sep0", "normal", "r_i", "r_j")


def gather_lcp(comm, D, blocks, dt, q, gamma, table, body_gid, info=None):
    """Collect the distributed LCP on rank 0 (collective).  Returns the dump dict on rank 0, None elsewhere.

    ``D`` PETSc AIJ (rows: 6 per owned body, owner-distributed in rank order), ``blocks`` (n_owned, 6, 6),
    ``q``/``gamma`` (c_local,) in the rank's column order, ``table`` the rank's ConstraintTable, ``body_gid``
    (n_owned,) gids of the owned bodies in local row order."""
    indptr, cols, vals = D.getValuesCSR()
    r0 = D.getOwnershipRange()[0]
    local = dict(indptr=np.asarray(indptr, np.int64), cols=np.asarray(cols, np.int64),
                 vals=np.asarray(vals, float), r0=int(r0), blocks=np.asarray(blocks, float).reshape(-1, 6, 6),
                 body_gid=np.asarray(body_gid, np.int64), q=np.asarray(q, float), gamma=np.asarray(gamma, float),
                 **{f: np.asarray(getattr(table, f)) for f in ROW_FIELDS})
    parts = comm.gather(local, root=0)
    if comm.rank != 0:
        return None
    import scipy.sparse as sp
    nrow, ncol = D.getSize()
    rows = [p["r0"] + np.repeat(np.arange(len(p["indptr"]) - 1), np.diff(p["indptr"])) for p in parts]
    Dg = sp.csr_matrix((np.concatenate([p["vals"] for p in parts]),
                        (np.concatenate(rows), np.concatenate([p["cols"] for p in parts]))), shape=(nrow, ncol))
    out = dict(D=Dg, dt=float(dt), info=dict(info or {}))
    for f in ("blocks", "body_gid", "q", "gamma") + ROW_FIELDS:
        out[f] = np.concatenate([p[f] for p in parts])
    out["rank"] = np.concatenate([np.full(len(p["q"]), k, np.int64) for k, p in enumerate(parts)])
    return out


def save_lcp(path, data):
    """Write a dump dict (from :func:`gather_lcp`) to ``path`` (.npz, written to a temp name then renamed)."""
    D = data["D"].tocsr()
    arrays = {k: v for k, v in data.items() if k not in ("D", "info")}
    tmp = path + ".tmp.npz"
    np.savez_compressed(tmp, D_data=D.data, D_indices=D.indices, D_indptr=D.indptr, D_shape=np.array(D.shape),
                        info_keys=np.array(list(data["info"].keys()), dtype=str),
                        info_vals=np.array([str(v) for v in data["info"].values()], dtype=str), **arrays)
    os.replace(tmp, path)
    return path


def load_lcp(path):
    """Read a dump written by :func:`save_lcp`; returns the dict of :func:`gather_lcp`."""
    import scipy.sparse as sp
    with np.load(path) as z:
        out = {k: z[k] for k in z.files if not k.startswith("D_") and not k.startswith("info_")}
        out["D"] = sp.csr_matrix((z["D_data"], z["D_indices"], z["D_indptr"]), shape=tuple(z["D_shape"]))
        out["info"] = dict(zip(z["info_keys"].tolist(), z["info_vals"].tolist()))
    out["dt"] = float(out["dt"])
    return out


def lcp_matrix(data):
    """A = D^T (dt M) D (scipy CSR, (c, c)) of a dump; dt M is formed as the stepper forms it (dt * blocks)."""
    import scipy.sparse as sp
    n = len(data["blocks"])
    M = sp.bsr_matrix((data["dt"] * data["blocks"], np.arange(n), np.arange(n + 1)), shape=(6 * n, 6 * n))
    D = data["D"]
    return (D.T @ (M @ D)).tocsr()
