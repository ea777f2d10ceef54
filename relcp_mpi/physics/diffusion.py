"""Reference coefficients and estimators for validating Brownian runs (:mod:`relcp_mpi.physics.brownian`).

* :func:`stokes_einstein`: D_t = kT / (6 pi mu a) [L^2/T], D_r = kT / (8 pi mu a^3) [1/T] of a sphere;
* :func:`perrin_prolate`: the diffusion coefficients of a prolate spheroid from Perrin's closed forms (as
  tabulated by Kim & Karrila, *Microhydrodynamics* (1991), Table 3.4), with semi-major axis a along the
  symmetry axis, semi-minor b and eccentricity e = sqrt(1 - b^2/a^2), L = ln((1 + e) / (1 - e)):
  X^A = (8/3) e^3 / (-2e + (1 + e^2) L),  Y^A = (16/3) e^3 / (2e + (3e^2 - 1) L)   (translation, 6 pi mu a),
  X^C = (4/3) e^3 (1 - e^2) / (2e - (1 - e^2) L),  Y^C = (4/3) e^3 (2 - e^2) / (-2e + (1 + e^2) L)
  (rotation, 8 pi mu a^3); D = kT / drag.  This is independent of the Carlson-integral evaluation in
  :mod:`relcp_mpi.physics.mobility`;
* :func:`carnahan_starling_contact`: the hard-sphere contact value g(sigma) = (1 - phi/2) / (1 - phi)^3;
* :class:`Recorder`: per-step positions (unwrapped across periodic boundaries), orientations and body-frame
  displacements of every body of a run (an ``on_step`` callback; small runs: it gathers on every rank);
* :func:`window_samples`, :func:`mean_and_error`: statistics over independent bodies and non-overlapping time
  windows (for free bodies the increments of different windows are independent, so the standard error is the
  sample standard deviation over sqrt(number of samples));
* :func:`pair_distribution`: the radial distribution function g(r) of a periodic configuration.
"""
import numpy as np

from relcp_mpi.basics import quaternion as quat


def stokes_einstein(a, mu, kT):
    """(D_t [L^2/T], D_r [1/T]) of a sphere of radius ``a`` in viscosity ``mu`` at thermal energy ``kT``."""
    return kT / (6 * np.pi * mu * a), kT / (8 * np.pi * mu * a ** 3)


def perrin_prolate(a, b, mu, kT):
    """Diffusion coefficients of a prolate spheroid (semi-major ``a`` > semi-minor ``b``), body frame:
    dict with ``D_par`` (translation along the axis), ``D_perp`` (across it) [L^2/T], ``Dr_perp`` (rotation
    of the axis, about a diameter) and ``Dr_axis`` (spin about the axis) [1/T]."""
    if not a > b > 0:
        raise ValueError(f"a prolate spheroid needs a > b > 0, got a={a}, b={b}")
    e = np.sqrt(1.0 - (b / a) ** 2)
    L = np.log((1 + e) / (1 - e))
    XA = (8.0 / 3.0) * e ** 3 / (-2 * e + (1 + e ** 2) * L)
    YA = (16.0 / 3.0) * e ** 3 / (2 * e + (3 * e ** 2 - 1) * L)
    XC = (4.0 / 3.0) * e ** 3 * (1 - e ** 2) / (2 * e - (1 - e ** 2) * L)
    YC = (4.0 / 3.0) * e ** 3 * (2 - e ** 2) / (-2 * e + (1 + e ** 2) * L)
    t, r = 6 * np.pi * mu * a, 8 * np.pi * mu * a ** 3
    return {"D_par": kT / (t * XA), "D_perp": kT / (t * YA), "Dr_axis": kT / (r * XC), "Dr_perp": kT / (r * YC)}


def carnahan_starling_contact(phi):
    """Contact value g(sigma) of the hard-sphere fluid at volume fraction ``phi`` (Carnahan--Starling)."""
    return (1 - phi / 2) / (1 - phi) ** 3


class Recorder:
    """``on_step`` callback collecting, after every step, for all bodies ordered by gid:
    ``x`` (unwrapped positions), ``q`` (orientations) and ``xb`` (the sum over steps of each step's
    displacement in the body frame at the start of the step, R(q_n)^T (x_{n+1} - x_n)).  Collective (it calls
    ``sim.gather``); call :meth:`start` with the simulation before the run to record the initial state.
    ``box`` (3,): periodic lengths (minimum image per step; a body moves far less than half a box per step)."""

    def __init__(self, box, every=1):
        self.box = np.asarray(box, float)
        self.every = int(every)
        self.x, self.q, self.xb = [], [], []

    def start(self, sim):
        _, x = sim.gather("x")
        _, q = sim.gather("q")
        self._x, self._q, self._xu, self._xb = x, q, x.copy(), np.zeros_like(x)
        self.x, self.q, self.xb = [x.copy()], [q.copy()], [self._xb.copy()]

    def __call__(self, sim):
        _, x = sim.gather("x")
        _, q = sim.gather("q")
        d = x - self._x
        d -= self.box * np.round(d / self.box)          # minimum image: the step's displacement
        self._xu = self._xu + d
        self._xb = self._xb + np.einsum("nji,nj->ni", quat.to_matrix(self._q), d)   # R^T d
        self._x, self._q = x, q
        if sim.step % self.every == 0:
            self.x.append(self._xu.copy())
            self.q.append(q.copy())
            self.xb.append(self._xb.copy())

    def arrays(self):
        """(x (F, N, 3), q (F, N, 4), xb (F, N, 3)) over the recorded frames F."""
        return np.array(self.x), np.array(self.q), np.array(self.xb)


def window_samples(values, window, lags):
    """Increments over non-overlapping windows: for each lag l (frames, 0 < l <= window) the array
    ``values[t0 + l] - values[t0]`` over the window starts t0 = 0, window, 2 window, ... and all bodies,
    flattened to (samples, ...).  ``values`` (F, N, ...)."""
    F = len(values)
    starts = np.arange(0, F - window, window)
    out = {}
    for lag in lags:
        if not 0 < lag <= window:
            raise ValueError(f"lag {lag} must be in (0, window={window}]")
        d = values[starts + lag] - values[starts]
        out[lag] = d.reshape((-1,) + values.shape[2:])
    return out


def axis_products(axes, window, lags):
    """u(t0 + l) . u(t0) for unit vectors ``axes`` (F, N, 3) over non-overlapping windows, per lag: (samples,)."""
    F = len(axes)
    starts = np.arange(0, F - window, window)
    return {lag: np.einsum("snk,snk->sn", axes[starts + lag], axes[starts]).ravel() for lag in lags}


def mean_and_error(samples):
    """(mean, standard error) of independent samples (axis 0)."""
    s = np.asarray(samples, float)
    return s.mean(axis=0), s.std(axis=0, ddof=1) / np.sqrt(len(s))


def pair_distribution(x, box, edges):
    """g(r) of one periodic configuration ``x`` (N, 3) in a box of lengths ``box`` (3,) on the radial bins
    ``edges`` (B+1,) (all edges below half the smallest box length): pair counts over the ideal-gas count
    N (N - 1) / 2 * (shell volume / V).  O(N^2) memory in chunks of rows: small systems only."""
    x = np.asarray(x, float)
    box = np.asarray(box, float)
    n = len(x)
    counts = np.zeros(len(edges) - 1)
    for i0 in range(0, n - 1, 256):
        i = np.arange(i0, min(i0 + 256, n - 1))
        d = x[i, None, :] - x[None, :, :]
        d -= box * np.round(d / box)
        r = np.sqrt(np.einsum("ijk,ijk->ij", d, d))
        r = r[np.arange(n)[None, :] > i[:, None]]
        counts += np.histogram(r, bins=edges)[0]
    shell = 4.0 / 3.0 * np.pi * (edges[1:] ** 3 - edges[:-1] ** 3)
    return counts / (0.5 * n * (n - 1) * shell / np.prod(box))
