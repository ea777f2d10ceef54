"""Growth and division of spherocylinders (bacterial colonies).

A growing spherocylinder (``growth`` > 0, [L/T]) lengthens its axis segment L linearly in time.  When L reaches
``l_div`` it divides into two daughters that split the mother's tip-to-tip length l = L + 2R in halves: each
daughter has segment length L_d = L/2 - R, the same radius, orientation and growth parameters, and centre at
x -/+ ((L + 2R)/4) a (a = axis); the two daughters touch at the mother's midpoint.  A small deterministic
random tilt (``tilt`` radians, keyed by (seed, step, gid)) is applied to each daughter to break the symmetry of
perfectly aligned chains, as is customary in colony simulations.

Global ids: daughter 1 keeps the mother's gid; daughter 2 gets ``next_gid + k`` where k is the rank of the
mother's gid among ALL mothers dividing in this step (one allgather of the dividing gids), so new ids are
unique across ranks and do not depend on the rank count.
"""
import numpy as np

from relcp_mpi.bodies.shapes import SPHEROCYLINDER
from relcp_mpi.bodies.store import BodyStore
from relcp_mpi.geometry import quaternion as quat
from relcp_mpi.parallel import random as prandom


def grow(bodies, dt):
    """Advance L by growth*dt for growing spherocylinders (in place)."""
    m = (bodies.kind == SPHEROCYLINDER) & (bodies.growth != 0)
    if m.any():
        bodies.shape[m, 1] += dt * bodies.growth[m]


def divide(bodies, comm, next_gid, seed, step, tilt=0.02):
    """Split every spherocylinder with L >= l_div > 0.  Returns (new BodyStore, new next_gid, n divided)."""
    m = (bodies.kind == SPHEROCYLINDER) & (bodies.l_div > 0) & (bodies.shape[:, 1] >= bodies.l_div)
    mothers = np.sort(bodies.gid[m])
    allm = np.concatenate(comm.allgather(mothers)) if comm.size > 1 else mothers
    allm = np.sort(allm)
    n_div = len(allm)
    if n_div == 0:
        return bodies, next_gid, 0
    idx = np.nonzero(m)[0]
    mom = bodies.take(idx)
    R, L = mom.shape[:, 0], mom.shape[:, 1]
    a = quat.rotate(mom.q, np.tile([0.0, 0.0, 1.0], (len(mom), 1)))
    off = ((L + 2 * R) / 4.0)[:, None] * a
    Ld = L / 2.0 - R
    d1 = mom.copy()
    d2 = mom.copy()
    d1.x = mom.x - off
    d2.x = mom.x + off
    d1.shape[:, 1] = Ld
    d2.shape[:, 1] = Ld
    d2.gid = next_gid + np.searchsorted(allm, mom.gid)
    # deterministic small tilts keyed by (seed, step, gid of the daughter)
    for d in (d1, d2):
        th = tilt * prandom.normal(seed, step, d.gid, 3, stream=7)
        d.q = quat.normalize(quat.multiply(quat.from_rotation_vector(th), d.q))
        d.u[:] = 0.0
    keep = bodies.take(~m)
    out = BodyStore.concatenate([keep, d1, d2])
    return out, next_gid + n_div, n_div
