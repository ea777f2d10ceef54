"""The simulation box: bounds and per-axis periodicity.

``Box(lo, hi, periodic)`` describes the axis-aligned region ``[lo, hi)`` (3-vectors).  On a periodic
axis positions are taken modulo the box length; on a non-periodic ("walled") axis the bounds only
define the region that the domain decomposition splits: bodies slightly outside it (e.g. overlapping
a wall) are still owned by the subdomain at that boundary (see
:meth:`relcp_mpi.parallel.decomposition.Decomposition.canonical`).
"""
import numpy as np


class Box:
    """Axis-aligned box ``[lo, hi)`` with per-axis periodicity.

    Parameters
    ----------
    lo, hi : array_like (3,)
        Lower and upper corners, finite, ``hi > lo`` on every axis.
    periodic : bool or array_like of 3 bools
        Periodicity per axis (a single bool applies to all axes).
    """

    def __init__(self, lo, hi, periodic=False):
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
        self.lo, self.hi, self.periodic = lo, hi, per
        self.lo.flags.writeable = False
        self.hi.flags.writeable = False
        self.periodic.flags.writeable = False

    @property
    def lengths(self):
        """Edge lengths ``hi - lo``, shape (3,)."""
        return self.hi - self.lo

    def __repr__(self):
        return f"Box(lo={self.lo.tolist()}, hi={self.hi.tolist()}, periodic={self.periodic.tolist()})"

    def __eq__(self, other):
        return (isinstance(other, Box) and np.array_equal(self.lo, other.lo)
                and np.array_equal(self.hi, other.hi) and np.array_equal(self.periodic, other.periodic))

    def wrap(self, x):
        """Positions mapped into ``[lo, hi)`` on periodic axes (other axes unchanged). Returns a new array."""
        x = np.array(x, dtype=np.float64)
        shp = x.shape
        x = x.reshape(-1, 3)
        for ax in np.flatnonzero(self.periodic):
            lo, hi, L = self.lo[ax], self.hi[ax], self.hi[ax] - self.lo[ax]
            c = lo + np.mod(x[:, ax] - lo, L)
            # rounding can land exactly on hi (or a hair below lo): map to the periodic equivalent lo
            c[(c >= hi) | (c < lo)] = lo
            x[:, ax] = c
        return x.reshape(shp)

    def minimum_image(self, dx):
        """Separation vectors reduced to the nearest periodic image (|dx_a| <= L_a / 2 on periodic axes)."""
        dx = np.array(dx, dtype=np.float64)
        shp = dx.shape
        dx = dx.reshape(-1, 3)
        L = self.lengths
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
