"""The simulation box: bounds and per-axis periodicity.

``Box(lo, hi, periodic)`` describes the axis-aligned region ``[lo, hi)`` (3-vectors).  On a periodic
axis positions are taken modulo the box length; on a non-periodic ("walled") axis the bounds only
define the region that the domain decomposition splits: bodies slightly outside it (e.g. overlapping
a wall) are still owned by the subdomain at that boundary (see
:meth:`relcp_mpi.parallel.decomposition.Decomposition.canonical`).

Lees--Edwards boundaries (``Box(..., shear=LeesEdwards(flow_axis, gradient_axis, rate))``): the periodic
images of the box along the gradient axis g slide along the flow axis a.  The image ``n`` cells up along g
(shift ``n L_g``) is displaced by ``n * offset`` along a and moves ``n * rate * L_g`` faster along a, where
``offset`` = rate L_g t (mod L_a) is the run's current image offset [L] (held by the run state, passed to
:meth:`Box.wrap` and :meth:`Box.minimum_image`).  A body that leaves the box through the g boundary re-enters
with its a coordinate shifted by -n offset and its velocity by -n rate L_g (:meth:`Box.wrap_with_velocity`).
"""
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LeesEdwards:
    """Sliding periodic images (simple shear u_a = rate (x_g - centre_g)): flow axis a, gradient axis g
    (0, 1, 2; a != g, both periodic), shear rate [1/T] (the images' velocity jump is rate L_g)."""
    flow_axis: int
    gradient_axis: int
    rate: float


class Box:
    """Axis-aligned box ``[lo, hi)`` with per-axis periodicity.

    Parameters
    ----------
    lo, hi : array_like (3,)
        Lower and upper corners, finite, ``hi > lo`` on every axis.
    periodic : bool or array_like of 3 bools
        Periodicity per axis (a single bool applies to all axes).
    """

    def __init__(self, lo, hi, periodic=False, shear=None):
        lo = np.array(lo, dtype=np.float64).reshape(-1)
        hi = np.array(hi, dtype=np.float64).reshape(-1)
        if lo.shape != (3,) or hi.shape != (3,):
            raise ValueError(f"Box lo and hi must be 3-vectors, got lo={lo.tolist()}, hi={hi.tolist()}")
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            raise ValueError(f"Box bounds must be finite, got lo={lo.tolist()}, hi={hi.tolist()}")
        if not np.all(hi > lo):
            raise ValueError(f"Box needs hi > lo on every axis, got lo={lo.tolist()}, hi={hi.tolist()}")
        per = np.array(periodic, dtype=bool).reshape(-1)
        if per.size == 1:
            per = np.repeat(per, 3)
        if per.shape != (3,):
            raise ValueError(f"Box periodic must be a bool or 3 bools, got {periodic!r}")
        if shear is not None:
            a, g = int(shear.flow_axis), int(shear.gradient_axis)
            if a == g or not (per[a] and per[g]):
                raise ValueError(f"Lees-Edwards boundaries need distinct periodic flow and gradient axes, got "
                                 f"flow axis {a}, gradient axis {g}, periodic={per.tolist()}")
        self.lo, self.hi, self.periodic = lo, hi, per
        self.shear = shear
        self.lo.flags.writeable = False
        self.hi.flags.writeable = False
        self.periodic.flags.writeable = False

    @property
    def lengths(self):
        """Edge lengths ``hi - lo``, shape (3,)."""
        return self.hi - self.lo

    def __repr__(self):
        le = "" if self.shear is None else f", shear={self.shear}"
        return f"Box(lo={self.lo.tolist()}, hi={self.hi.tolist()}, periodic={self.periodic.tolist()}{le})"

    def __eq__(self, other):
        return (isinstance(other, Box) and np.array_equal(self.lo, other.lo)
                and np.array_equal(self.hi, other.hi) and np.array_equal(self.periodic, other.periodic)
                and self.shear == other.shear)

    def wrap(self, x, offset=0.0):
        """Positions mapped into ``[lo, hi)`` on periodic axes (other axes unchanged). Returns a new array.

        With Lees--Edwards boundaries a position n cells up the gradient axis is moved by -n ``offset`` along
        the flow axis before that axis is wrapped (``offset`` [L]: the current image offset)."""
        return self._wrap(x, offset)[0]

    def wrap_with_velocity(self, x, u, offset):
        """``(wrap(x, offset), u')``: with Lees--Edwards boundaries the flow-axis velocity of a body wrapped by
        n cells along the gradient axis drops by n rate L_g (``u`` (n, 3) or (n, 6), lab frame; copied)."""
        x, n_cells = self._wrap(x, offset)
        u = np.array(u, dtype=np.float64)
        if self.shear is not None and len(n_cells):
            sh = self.shear
            u.reshape(len(n_cells), -1)[:, sh.flow_axis] -= n_cells * sh.rate * self.lengths[sh.gradient_axis]
        return x, u

    def _wrap(self, x, offset):
        """Wrapped positions and, with Lees--Edwards boundaries, the number of gradient-axis cells (n,)
        each was moved down by (None without)."""
        x = np.array(x, dtype=np.float64)
        shp = x.shape
        x = x.reshape(-1, 3)
        n_cells = None
        if self.shear is not None:
            a, g = self.shear.flow_axis, self.shear.gradient_axis
            yw = self.wrap_axis(x[:, g], g)
            # x - wrapped is a multiple of L_g up to rounding: rint gives the exact cell count
            n_cells = np.rint((x[:, g] - yw) / self.lengths[g])
            x[:, g] = yw
            x[:, a] -= n_cells * float(offset)
        for ax in np.flatnonzero(self.periodic):
            if n_cells is not None and ax == self.shear.gradient_axis:
                continue
            x[:, ax] = self.wrap_axis(x[:, ax], ax)
        return x.reshape(shp), n_cells

    def wrap_axis(self, c, ax):
        """Coordinates ``c`` (n,) of periodic axis ``ax`` mapped into [lo, hi)."""
        lo, hi, L = self.lo[ax], self.hi[ax], self.hi[ax] - self.lo[ax]
        c = lo + np.mod(c - lo, L)
        # rounding can land exactly on hi (or a hair below lo): map to the periodic equivalent lo
        c[(c >= hi) | (c < lo)] = lo
        return c

    def minimum_image(self, dx, offset=0.0):
        """Separation vectors reduced to the nearest periodic image (|dx_a| <= L_a / 2 on periodic axes; with
        Lees--Edwards boundaries the gradient axis is reduced first, moving dx by -n ``offset`` along the flow
        axis)."""
        dx = np.array(dx, dtype=np.float64)
        shp = dx.shape
        dx = dx.reshape(-1, 3)
        L = self.lengths
        if self.shear is not None:
            a, g = self.shear.flow_axis, self.shear.gradient_axis
            n_cells = np.rint(dx[:, g] / L[g])
            dx[:, g] -= L[g] * n_cells
            dx[:, a] -= n_cells * float(offset)
        for ax in np.flatnonzero(self.periodic):
            dx[:, ax] -= L[ax] * np.rint(dx[:, ax] / L[ax])
        return dx.reshape(shp)

    def image_shift(self, dx):
        """Shift ``s`` (multiples of the box lengths, zero on walled axes) with ``dx + s = minimum_image(dx)``."""
        dx = np.asarray(dx, dtype=np.float64)
        L = self.lengths
        return np.where(self.periodic, -L * np.rint(dx / L), 0.0)

    def contains(self, x):
        """Boolean mask: inside ``[lo, hi)`` on every axis."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, 3)
        return np.all((x >= self.lo) & (x < self.hi), axis=1)
