"""Growth and division of spherocylinders (bacterial colonies).

Two growth models (deck section ``growth``, :class:`GrowthModel`):

* ``linear`` (default, the synchronous stress case): a growing spherocylinder (``growth`` > 0, [L/T]) lengthens
  its axis segment L by ``growth * dt`` per step;
* ``exponential``: the tip-to-tip length l = L + 2R grows as dl/dt = r l (``growth`` = r [1/T]); a step
  multiplies l by exp(r dt) exactly, so after n steps l = l0 exp(r n dt) up to rounding, whatever dt.

With ``growth_rate_noise`` > 0 each cell grows at its own rate ``growth (1 + growth_rate_noise (2 u - 1))``, u
keyed by (seed, gen, gid) like the division length below.  (Why: with exponential growth and division noise
alone, a cell of generation n has length l0 exp(r t) / 2^n whatever its ancestors did, so its division time
depends on its own threshold only and the generations stay separate waves; rate noise makes the phases of the
lineages drift apart.)

A cell divides when L reaches its division length ``l_div (1 + division_noise (2 u - 1))``, u uniform in [0, 1)
from the counter-based stream keyed by (seed, gen, gid) (:mod:`relcp_mpi.parallel.random`): drawn once per cell
(gid and generation identify a cell: daughter 1 keeps the mother's gid, both daughters have gen + 1), identical on
any rank count and after a restart (``gen`` is a body field, checkpointed with the bodies).  With
``division_noise = 0`` the threshold is ``l_div`` itself.  The mother's tip-to-tip length is split in halves:
each daughter has segment length L_d = L/2 - R, the same radius, orientation and growth parameters, and centre
at x -/+ ((L + 2R)/4) a (a = axis); the two daughters touch at the mother's midpoint.  Each daughter is then
rotated by a small deterministic random rotation to break the symmetry of perfectly aligned chains:
``noise_axis = None``: rotation vector with N(0, orientation_noise^2) components keyed by (seed, step, gid) (the
original colony model); ``noise_axis`` = a lab axis (e.g. the normal of a monolayer's walls): rotation about it
by an angle uniform in [-orientation_noise, orientation_noise] keyed by (seed, gen, gid).

Global ids: daughter 1 keeps the mother's gid; daughter 2 gets ``next_gid + k`` where k is the rank of the
mother's gid among ALL mothers dividing in this step (one allgather of the dividing gids), so new ids are
unique across ranks and do not depend on the rank count.
"""
from dataclasses import dataclass

import numpy as np

from relcp_mpi.bodies.shapes import SPHEROCYLINDER
from relcp_mpi.bodies.store import BodyStore
from relcp_mpi.geometry import quaternion as quat
from relcp_mpi.parallel import random as prandom


_STREAM_DIVISION = 9       # random streams (see relcp_mpi.parallel.random): division length, daughter angle,
_STREAM_ANGLE = 10         # growth rate
_STREAM_RATE = 11


@dataclass
class GrowthModel:
    """Deck section ``growth``: ``model`` 'linear' | 'exponential', ``division_noise`` (relative half-width of the
    uniform division-length distribution, in [0, 1)), ``orientation_noise`` [rad], ``noise_axis`` (3,) or None,
    ``growth_rate_noise`` (relative half-width of the uniform per-cell growth-rate distribution, in [0, 1))."""
    model: str = "linear"
    division_noise: float = 0.0
    orientation_noise: float = 0.02
    noise_axis: tuple = None
    growth_rate_noise: float = 0.0

    @classmethod
    def from_deck(cls, section):
        """From the deck's typed ``growth`` section (:class:`relcp_mpi.config.sections.GrowthSection`)."""
        s = section
        return cls(model=s.model, division_noise=float(s.division_noise),
                   orientation_noise=float(s.orientation_noise),
                   noise_axis=None if s.noise_axis is None else tuple(float(v) for v in s.noise_axis),
                   growth_rate_noise=float(s.growth_rate_noise))


_DEFAULT = GrowthModel()


def growth_rate(growth, gen, gid, seed, model=None):
    """(n,) each cell's own rate: ``growth`` (n,) times the cell's factor ``1 + growth_rate_noise (2 u - 1)``
    keyed by (seed, gen, gid) (``growth`` itself without noise)."""
    model = model or _DEFAULT
    if model.growth_rate_noise == 0 or len(growth) == 0:
        return growth
    return growth * (1.0 + model.growth_rate_noise * (2.0 * _per_generation(seed, gen, gid, _STREAM_RATE) - 1.0))


def grow(bodies, dt, model=None, seed=0):
    """Advance the length of growing spherocylinders over one step of ``dt`` (in place): L += r dt (linear) or
    L + 2R *= exp(r dt) (exponential), r = :func:`growth_rate` (``seed`` keys its noise)."""
    model = model or _DEFAULT
    m = (bodies.kind == SPHEROCYLINDER) & (bodies.growth != 0)
    if m.any():
        r = growth_rate(bodies.growth[m], bodies.gen[m], bodies.gid[m], seed, model)
        if model.model == "exponential":
            R = bodies.shape[m, 0]
            bodies.shape[m, 1] = (bodies.shape[m, 1] + 2 * R) * np.exp(dt * r) - 2 * R
        else:
            bodies.shape[m, 1] += dt * r


def _per_generation(seed, gen, gid, stream, low=0.0, high=1.0):
    """(n,) uniforms keyed by (seed, gen, gid): one vectorised draw per generation present."""
    u = np.empty(len(gid))
    for g in np.unique(gen):
        k = gen == g
        u[k] = prandom.uniform(seed, int(g), gid[k], low=low, high=high, stream=stream)
    return u


def division_length(l_div, gen, gid, seed, model=None):
    """(n,) segment length [L] at which each cell divides: ``l_div`` (n,) times the cell's noise factor, keyed by
    (seed, gen, gid) (n,) each; ``l_div`` itself without noise (0 = never divides)."""
    model = model or _DEFAULT
    if model.division_noise == 0 or len(l_div) == 0:
        return l_div
    return l_div * (1.0 + model.division_noise * (2.0 * _per_generation(seed, gen, gid, _STREAM_DIVISION) - 1.0))


def _daughter_rotation(d, seed, step, model):
    """Rotation vectors (n, 3) of the daughters ``d`` (see the module docstring)."""
    if model.noise_axis is None:
        return model.orientation_noise * prandom.normal(seed, step, d.gid, 3, stream=7)
    axis = np.asarray(model.noise_axis, float)
    axis = axis / np.linalg.norm(axis)
    ang = _per_generation(seed, d.gen, d.gid, _STREAM_ANGLE, low=-1.0, high=1.0)
    return (model.orientation_noise * ang)[:, None] * axis


def divide(bodies, comm, next_gid, seed, step, tilt=None, model=None):
    """Split every spherocylinder with L >= its division length > 0.  Returns (new BodyStore, new next_gid,
    n divided).  ``tilt`` overrides ``model.orientation_noise``."""
    model = model or _DEFAULT
    if tilt is not None:
        model = GrowthModel(model.model, model.division_noise, float(tilt), model.noise_axis)
    L = bodies.shape[:, 1]
    # only cells past the shortest possible division length need their own (random) one
    m = (bodies.kind == SPHEROCYLINDER) & (bodies.l_div > 0) & (L >= bodies.l_div * (1.0 - model.division_noise))
    k = np.flatnonzero(m)
    m[k] = L[k] >= division_length(bodies.l_div[k], bodies.gen[k], bodies.gid[k], seed, model)
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
    # deterministic small rotations keyed by the daughter's gid (and the step or its generation)
    for d in (d1, d2):
        d.gen = mom.gen + 1
        th = _daughter_rotation(d, seed, step, model)
        d.q = quat.normalize(quat.multiply(quat.from_rotation_vector(th), d.q))
        d.u[:] = 0.0
    keep = bodies.take(~m)
    out = BodyStore.concatenate([keep, d1, d2])
    return out, next_gid + n_div, n_div
