"""Imposed background flow: the velocity a body follows in the absence of contacts (deck section ``flow``).

Simple shear (``flow: {type: shear, rate: gdot, flow_axis: x, gradient_axis: y}``)::

    u_inf(x) = G (x - c),   G[a, g] = gdot (all other entries 0),

with a the flow axis, g the gradient axis and c the box centre (the flow vanishes in the middle of the box;
under Lees--Edwards boundaries the choice of c only shifts every velocity by a constant).  The background
velocity gradient G splits into the rate of strain E = (G + G^T)/2 and the vorticity omega_inf = 1/2 curl
u_inf (for simple shear along x with gradient y: omega_inf = -gdot/2 e_z).

A force- and torque-free rigid body in this flow (Stokes flow, no hydrodynamic interactions between bodies)
moves with (Jeffery 1922)

* translation: u_inf at its centre (exact for centrally symmetric bodies);
* rotation, in the body frame (semi-axes a_1, a_2, a_3 along body x, y, z; (i, j, k) cyclic):

      Omega_i = omega_inf_i + (a_j^2 - a_k^2) / (a_j^2 + a_k^2) E_jk,

  Jeffery's result for a triaxial ellipsoid.  For a body of revolution with axis p and aspect ratio r
  (axial / equatorial semi-axis) it is dp/dt = W p + B (E p - (p.E.p) p) with the Bretherton constant
  B = (r^2 - 1)/(r^2 + 1); in simple shear p turns on Jeffery orbits of period T = 2 pi / gdot (r + 1/r).

Shape factors used (:func:`jeffery_axes`):
* sphere: B = 0 (rotates with the fluid, Omega = omega_inf);
* ellipsoid (a, b, c): exact (the triaxial formula above);
* spherocylinder (R, L): **the ellipsoid of the same length and width** -- semi-axes (R, R, R + L/2), i.e.
  the tip-to-tip aspect ratio r = (L + 2R) / (2R) in B.  This is an approximation: a cylinder rotates like
  an ellipsoid of a somewhat larger equivalent aspect ratio (Cox 1971, Harris & Pittman 1975); for the
  slender cells of the colony decks (r >= 4) B differs from 1 by < 12 % either way;
* ring (torus, Rc, r): the oblate ellipsoid of the same extents, semi-axes (Rc + r, Rc + r, r) (an
  approximation of the same kind).

Fixed bodies do not follow the flow (they move with their imposed velocity only).  Units: lengths L, times T,
velocities L/T, angular velocities 1/T.
"""
from dataclasses import dataclass

import numpy as np

from relcp_mpi.basics import quaternion as quat
from relcp_mpi.bodies.shapes import ELLIPSOID, RING, SPHERE, SPHEROCYLINDER

AXES = {"x": 0, "y": 1, "z": 2}


def jeffery_axes(kind, shape):
    """Effective semi-axes (n, 3) along body x, y, z of each body for the Jeffery rotation (module docstring)."""
    kind = np.asarray(kind)
    shape = np.asarray(shape, dtype=np.float64).reshape(-1, 3)
    R, L = shape[:, 0], shape[:, 1]
    ax = np.ones((len(kind), 3))
    sel = kind == SPHERE
    ax[sel] = R[sel, None]
    sel = kind == ELLIPSOID
    ax[sel] = shape[sel]
    sel = kind == SPHEROCYLINDER
    ax[sel] = np.stack([R[sel], R[sel], R[sel] + 0.5 * L[sel]], axis=1)
    sel = kind == RING
    ax[sel] = np.stack([R[sel] + L[sel], R[sel] + L[sel], L[sel]], axis=1)
    return ax


def bretherton(aspect):
    """Bretherton constant B = (r^2 - 1)/(r^2 + 1) of a body of revolution of aspect ratio r (scalar/array)."""
    r2 = np.asarray(aspect, dtype=np.float64) ** 2
    return (r2 - 1.0) / (r2 + 1.0)


def jeffery_period(aspect, rate):
    """Period [T] of a Jeffery orbit in simple shear of rate ``rate``: 2 pi / |rate| (r + 1/r)."""
    return 2.0 * np.pi / abs(rate) * (aspect + 1.0 / aspect)


@dataclass(frozen=True)
class ImposedFlow:
    """A uniform background velocity gradient ``G`` (3, 3) [1/T] about the point ``centre`` (3,) [L]."""
    gradient: np.ndarray
    centre: np.ndarray

    @classmethod
    def shear(cls, rate, flow_axis, gradient_axis, centre):
        """Simple shear u_a = rate (x_g - centre_g); axes as 0/1/2 or 'x'/'y'/'z'."""
        a = AXES.get(flow_axis, flow_axis)
        g = AXES.get(gradient_axis, gradient_axis)
        G = np.zeros((3, 3))
        G[a, g] = float(rate)
        return cls(gradient=G, centre=np.asarray(centre, dtype=np.float64).reshape(3))

    @classmethod
    def from_deck(cls, deck):
        """The flow of a typed deck (:class:`relcp_mpi.config.sections.Deck`), or None for ``type: none``."""
        f = deck.flow
        if f.type == "none":
            return None
        centre = 0.5 * (np.asarray(deck.box.lo, float) + np.asarray(deck.box.hi, float))
        return cls.shear(f.rate, f.flow_axis, f.gradient_axis, centre)

    @property
    def strain_rate(self):
        """E = (G + G^T)/2, (3, 3) [1/T]."""
        return 0.5 * (self.gradient + self.gradient.T)

    @property
    def vorticity(self):
        """omega_inf = 1/2 curl u_inf, (3,) [1/T]."""
        G = self.gradient
        return 0.5 * np.array([G[2, 1] - G[1, 2], G[0, 2] - G[2, 0], G[1, 0] - G[0, 1]])

    def velocity_at(self, x):
        """u_inf at points x (n, 3) -> (n, 3) [L/T]."""
        return (np.asarray(x, dtype=np.float64).reshape(-1, 3) - self.centre) @ self.gradient.T

    def body_velocity(self, kind, shape, x, q, fixed=None):
        """(n, 6) velocity and angular velocity [L/T, 1/T] (lab frame) of force- and torque-free bodies at
        centres x (n, 3) with orientations q (n, 4) (module docstring); zero rows for ``fixed`` bodies."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, 3)
        n = len(x)
        out = np.zeros((n, 6))
        if n == 0:
            return out
        out[:, :3] = self.velocity_at(x)
        R = quat.to_matrix(q).reshape(n, 3, 3)                          # body -> lab
        Eb = np.einsum("nji,jk,nkl->nil", R, self.strain_rate, R)       # R^T E R, body frame
        a2 = jeffery_axes(kind, shape) ** 2
        j, k = [1, 2, 0], [2, 0, 1]                                      # (i, j, k) cyclic for i = 0, 1, 2
        lam = (a2[:, j] - a2[:, k]) / (a2[:, j] + a2[:, k])
        wb = lam * Eb[:, j, k]                                           # (n, 3) body-frame Jeffery term
        out[:, 3:] = self.vorticity + np.einsum("nij,nj->ni", R, wb)
        if fixed is not None:
            out[np.asarray(fixed).astype(bool)] = 0.0
        return out
