"""Collision (constraint) stress: the virial of the contact forces of one step.

Following Yan, Zhang & Shelley, J. Chem. Phys. 150, 064109 (2019), the stress carried by the constraint
forces of a step is the volume-averaged virial

    sigma = -(1/V) sum_k  r_k (x) f_k                                   [F / L^2]

over every constraint row k of every rank, with f_k = gamma_k n_k the force the row exerts on its body i
(gamma [F] is the row's multiplier: U = U_ext + M D gamma, so gamma is a force; n_k the unit normal from j
towards i) and r_k the row's lever:

* **pair rows** (body i, body j): the centre-to-centre vector r_k = x_i - x_j at the start-of-step
  configuration (``StepInput.x0``).  Ghost copies carry image-shifted positions, so this is the minimum image
  under periodic boundaries.  Swapping i and j flips both r and f, so the term does not depend on which body
  of the pair is "i".  With several rows per pair (ReLCP recursion levels, multi-sphere proxies), every row
  contributes with the same lever and its own normal.
* **wall rows** (body i, wall j): the wall is treated as a body whose centre is the contact point on the
  plane, r_k = x_i - p_wall = sep0_k n_k - r_i,k (p_wall = projection of the witness point p_i onto the plane,
  so p_i - p_wall = sep0 n; both at the configuration where the row was generated).  With this convention
  the sum over all rows equals  sum_bodies x_b (x) F_b  -  sum_walls p_wall (x) f_wall,  the virial of all
  contact forces with the wall forces applied where they act.  For a packing resting on a floor (normal +z,
  plane z = z_w) at steady state (contact forces balance the external forces F_ext,b):

      sigma_zz V = -sum_b (z_b - z_w) W_b ,    i.e.  sigma_zz = -(W / A) (zbar - z_w) / H

  with W_b the weight of body b, W = sum W_b, zbar the weight-averaged centre height, A the box area
  normal to z and H its height (V = A H): the volume average over the box of the mechanical stress
  -W_above(z)/A of the column, which is -W/A at the floor (tests/test_stress.py derives and checks it).

V is the volume of the deck's box (``box.lo``/``box.hi``, periodic or not): the stress is an average over the
simulation box, so a dilute packing in a big box has a small stress.

Cost: one (c, 3)^T (c, 3) product per rank and one allreduce of 9 numbers.

**Per-body stresslet** (:func:`body_stresslets`, on demand: ``Simulation.stresslet()`` /
``sim.gather("stresslet")``): the symmetric first moment of the constraint forces on each body,

    S_b = sum over the rows c touching b of  sym(r_bc (x) f_bc)                       [F L]

with r_bc = p_bc - x_b the lever from the body centre to the row's witness point on b and f_bc the row's
force on b (+gamma n for body i, -gamma n for body j; wall rows act on body i only).  Compressive contacts
give negative normal components (two spheres of radius R pressed by F along x: S = -F R e_x e_x each).
Relation to the virial: for every pair row (r_i - r_j) = (p_i - p_j) - (x_i - x_j), and for a wall row
r_i = (p_i - p_wall) - (sep0 n - r_i) with p_i - p_wall = sep0 n, so (rows generated at the start-of-step
configuration, witness points p_i - p_j = sep0 n as for spheres and for smooth bodies in contact)

    sum_b S_b = V sym(sigma) + sum_k gamma_k sep0_k n_k n_k^T ,

i.e. the stresslets sum to the box's virial when the loaded rows touch (sep0 = 0) and differ by at most
sum_k gamma_k |sep0_k| (about overlap_tol times the total contact force) otherwise; rows appended at trial
configurations (recursion levels >= 1) carry their trial lever arms.  Rows of a rank that touch a ghost copy
send their share to the body's owner (one exchange).
"""
import numpy as np

from relcp_mpi.parallel.exchange import exchange_rows

COMPONENTS = ("xx", "xy", "xz", "yx", "yy", "yz", "zx", "zy", "zz")


def constraint_virial(ia, ib, normal, r_i, sep0, gamma, x):
    """Local sum over rows of r_k (x) f_k, shape (3, 3) [F L] (row index = lever, column index = force).

    ``ia``, ``ib`` (c,) indices into ``x`` (m, 3), ``ib < 0`` for wall rows; ``normal`` (c, 3) unit, j -> i;
    ``r_i`` (c, 3) lever arm p_i - x_i of the witness point on body i; ``sep0`` (c,) the row's separation at
    generation [L]; ``gamma`` (c,) multipliers [F]."""
    ia = np.asarray(ia, dtype=np.int64)
    ib = np.asarray(ib, dtype=np.int64)
    if len(ia) == 0:
        return np.zeros((3, 3))
    normal = np.asarray(normal, dtype=np.float64).reshape(-1, 3)
    wall = np.flatnonzero(ib < 0)
    pair = np.flatnonzero(ib >= 0)
    # levers filled in place, pair rows x_i - x_j and wall rows sep0 n - r_i (the same numbers as one np.where
    # of both expressions over all rows, without its five (c, 3) temporaries: this ran at the end of every step,
    # next to the step's result)
    lever = x[ia]
    lever[pair] -= x[ib[pair]]
    lever[wall] = np.asarray(sep0, float)[wall, None] * normal[wall] - np.asarray(r_i, float).reshape(-1, 3)[wall]
    f = np.asarray(gamma, dtype=np.float64)[:, None] * normal
    return lever.T @ f


def collision_stress(table, gamma, x, volume, comm):
    """Global collision stress tensor (3, 3) [F/L^2] of one step (collective: one allreduce of 9 numbers).

    ``table``: the step's ``ConstraintTable`` (fields ia, ib, normal, r_i, sep0); ``gamma`` (c,) its
    multipliers; ``x`` (m, 3) the start-of-step positions of the rank's [owned, ghost] bodies (the arrays
    ``ia``/``ib`` index); ``volume`` the box volume [L^3]."""
    from mpi4py import MPI
    local = constraint_virial(table.ia, table.ib, table.normal, table.r_i, table.sep0, gamma, x)
    total = np.empty(9)
    comm.Allreduce(np.ascontiguousarray(local.ravel()), total, op=MPI.SUM)
    return -total.reshape(3, 3) / float(volume) + 0.0       # + 0.0: no "-0" without contacts


def stress_diagnostics(sigma):
    """Diagnostics entries of a stress tensor: ``stress_xx`` ... ``stress_zz`` (9 components, row = lever
    direction, column = force direction) and ``pressure`` = -trace/3 [F/L^2]."""
    sigma = np.asarray(sigma, dtype=np.float64).reshape(3, 3)
    out = {f"stress_{c}": float(v) for c, v in zip(COMPONENTS, sigma.ravel())}
    out["pressure"] = float(-np.trace(sigma) / 3.0) + 0.0
    return out


def step_stress_diagnostics(table, gamma, x, box_lengths, comm):
    """The one call of the driver: stress diagnostics of a step, V = product of the box edge lengths."""
    return stress_diagnostics(collision_stress(table, gamma, x, float(np.prod(box_lengths)), comm))


def stresslet_terms(ia, ib, r_i, r_j, normal, gamma, m):
    """Local per-body sums of sym(r (x) f), (m, 3, 3) [F L], over the rows (ia, ib) of a constraint table;
    ``m`` the number of [owned, ghost] bodies the indices refer to, ``ib < 0`` for wall rows (body i only).
    ``r_i``, ``r_j`` (c, 3) levers centre -> witness point, ``normal`` (c, 3) unit j -> i, ``gamma`` (c,)."""
    ia = np.asarray(ia, dtype=np.int64)
    ib = np.asarray(ib, dtype=np.int64)
    out = np.zeros((m, 9))
    if len(ia) == 0:
        return out.reshape(m, 3, 3)
    f = np.asarray(gamma, dtype=np.float64)[:, None] * np.asarray(normal, dtype=np.float64).reshape(-1, 3)
    pair = ib >= 0
    idx = np.concatenate([ia, ib[pair]])
    lever = np.concatenate([np.asarray(r_i, float).reshape(-1, 3), np.asarray(r_j, float).reshape(-1, 3)[pair]])
    force = np.concatenate([f, -f[pair]])
    t = lever[:, :, None] * force[:, None, :]
    t = 0.5 * (t + t.transpose(0, 2, 1)).reshape(-1, 9)
    for c in range(9):
        out[:, c] = np.bincount(idx, weights=t[:, c], minlength=m)
    return out.reshape(m, 3, 3)


def body_stresslets(table, gamma, n_owned, row, row_starts, comm):
    """Stresslet S_b (n_owned, 3, 3) [F L] of every owned body from one step's rows (collective: the shares of
    ghost copies go to their owners with one exchange).  ``table`` the step's ConstraintTable (ia, ib, r_i, r_j,
    normal), ``gamma`` (c,) its multipliers, ``row`` (m,) global D block row of every [owned, ghost] body and
    ``row_starts`` (P+1,) the first block row of each rank (a ghost's owner is the rank whose range holds its
    row; owned body k has row row_starts[rank] + k)."""
    row = np.asarray(row, dtype=np.int64)
    m = len(row)
    S = stresslet_terms(table.ia, table.ib, table.r_i, table.r_j, table.normal, gamma, m).reshape(m, 9)
    ghost = np.arange(n_owned, m)
    ghost = ghost[np.any(S[ghost] != 0.0, axis=1)]
    dest = np.searchsorted(row_starts, row[ghost], side="right") - 1
    got = exchange_rows(np.column_stack([row[ghost].astype(np.float64), S[ghost]]), dest, comm)
    own = S[:n_owned].copy()
    if len(got):
        k = got[:, 0].astype(np.int64) - int(row_starts[comm.Get_rank()])
        for c in range(9):
            own[:, c] += np.bincount(k, weights=got[:, 1 + c], minlength=n_owned)
    return own.reshape(n_owned, 3, 3)
