"""Overdamped block-diagonal mobility: U = M F + U_imposed, one 6x6 block per body.

Body-frame resistance (drag) coefficients, viscosity ``mu`` [F T / L^2]:

* sphere of radius R: translation 6 pi mu R, rotation 8 pi mu R^3 (isotropic);
* spherocylinder with radius R and axis-segment length L: slender-body drag with the tip-to-tip length
  l = L + 2R and b = -(1 + 2 ln(R / l)):  zeta_par = 8 pi mu l / (2 b), zeta_perp = 8 pi mu l / (b + 2),
  zeta_rot = 2 pi mu l^3 / (3 (b + 2)) about axes perpendicular to the rod, and 4 pi mu R^2 l about the rod
  axis (so that M is invertible); the axis is body z;
* ellipsoid with semi-axes (a1, a2, a3): Oberbeck/Perrin translation zeta_i = 16 pi mu / (chi + a_i^2 alpha_i)
  and Edwardes rotation zeta_rot_i = 16 pi mu (a_j^2 + a_k^2) / (3 (a_j^2 alpha_j + a_k^2 alpha_k)), with
  chi = int_0^inf ds/Delta = 2 R_F(a1^2, a2^2, a3^2), alpha_i = int_0^inf ds/((a_i^2+s) Delta)
  = (2/3) R_D(a_j^2, a_k^2, a_i^2), Delta = sqrt(prod (a_i^2 + s)) (Carlson symmetric integrals).

* ring (torus, centre-circle radius Rc, tube radius r, axis body z): resistive-force-theory estimate with
  slender-body coefficients per unit length c_n = 4 pi mu / (lam + 1/2), c_t = 2 pi mu / (lam - 1/2),
  lam = ln(8 Rc / r): translation along the axis 2 pi Rc c_n, in plane pi Rc (c_n + c_t); rotation about the
  axis 2 pi Rc^3 c_t, about a diameter pi Rc^3 c_n (adequate for overdamped chainmail dynamics, not a
  precise hydrodynamic model).

The lab-frame block is blockdiag(R diag(1/zeta_t) R^T, R diag(1/zeta_r) R^T), R = R(q).
"""
import numpy as np

from relcp_mpi.bodies.shapes import ELLIPSOID, RING, SPHERE, SPHEROCYLINDER
from relcp_mpi.basics import quaternion as quat


def body_frame_drag(kind, shape, mu):
    """Body-frame drag coefficients: (zeta_t (n,3), zeta_r (n,3))."""
    kind = np.asarray(kind)
    shape = np.asarray(shape, dtype=float).reshape(-1, 3)
    n = len(kind)
    zt = np.zeros((n, 3))
    zr = np.zeros((n, 3))

    m = kind == SPHERE
    if m.any():
        R = shape[m, 0]
        zt[m] = (6 * np.pi * mu * R)[:, None]
        zr[m] = (8 * np.pi * mu * R ** 3)[:, None]

    m = kind == SPHEROCYLINDER
    if m.any():
        R = shape[m, 0]
        ell = shape[m, 1] + 2 * R
        b = -(1 + 2 * np.log(R / ell))
        par = 8 * np.pi * mu * ell / (2 * b)
        perp = 8 * np.pi * mu * ell / (b + 2)
        rot = 2 * np.pi * mu * ell ** 3 / (3 * (b + 2))
        zt[m] = np.stack([perp, perp, par], axis=1)
        zr[m] = np.stack([rot, rot, 4 * np.pi * mu * R ** 2 * ell], axis=1)

    m = kind == ELLIPSOID
    if m.any():
        # Carlson integrals once per distinct semi-axis triple (suspensions have one or a few)
        uniq, inv = _distinct_rows(shape[m])
        zt_u, zr_u = _ellipsoid_drag(uniq, mu)
        zt[m] = zt_u[inv]
        zr[m] = zr_u[inv]
    m = kind == RING
    if m.any():
        Rc, r = shape[m, 0], shape[m, 1]
        lam = np.log(8 * Rc / r)
        cn = 4 * np.pi * mu / (lam + 0.5)
        ct = 2 * np.pi * mu / np.maximum(lam - 0.5, 0.5)
        zt[m] = np.stack([np.pi * Rc * (cn + ct), np.pi * Rc * (cn + ct), 2 * np.pi * Rc * cn], axis=1)
        zr[m] = np.stack([np.pi * Rc ** 3 * cn, np.pi * Rc ** 3 * cn, 2 * np.pi * Rc ** 3 * ct], axis=1)
    return zt, zr


def _distinct_rows(a):
    """(distinct rows (k, w), index of each row's distinct row (n,)) of ``a`` (n, w), like ``np.unique(a, axis=0,
    return_inverse=True)`` up to the order of the distinct rows.  One pass when all rows are equal (a monodisperse
    suspension), else one lexsort; ``np.unique(axis=0)`` sorts the rows as byte strings (~10 ms per 10k bodies
    per step)."""
    if len(a) == 0 or np.all(a == a[0]):
        return a[:1].copy(), np.zeros(len(a), np.int64)
    order = np.lexsort(a.T[::-1])
    s = a[order]
    new = np.ones(len(a), bool)
    new[1:] = np.any(s[1:] != s[:-1], axis=1)
    inv = np.empty(len(a), np.int64)
    inv[order] = np.cumsum(new) - 1
    return s[new], inv


def _ellipsoid_drag(axes, mu):
    """Perrin drag coefficients of ellipsoids with semi-axes ``axes`` (k, 3): (zeta_t (k, 3), zeta_r (k, 3))."""
    from scipy.special import elliprd, elliprf     # here, not with the module: only runs with ellipsoids load it
    a2 = axes ** 2
    chi = 2 * elliprf(a2[:, 0], a2[:, 1], a2[:, 2])
    alpha = np.stack([
        (2.0 / 3.0) * elliprd(a2[:, 1], a2[:, 2], a2[:, 0]),
        (2.0 / 3.0) * elliprd(a2[:, 2], a2[:, 0], a2[:, 1]),
        (2.0 / 3.0) * elliprd(a2[:, 0], a2[:, 1], a2[:, 2]),
    ], axis=1)
    zt = 16 * np.pi * mu / (chi[:, None] + a2 * alpha)
    zr = np.empty_like(zt)
    for i in range(3):   # three fixed axes, vectorised over bodies
        j, k = (i + 1) % 3, (i + 2) % 3
        zr[:, i] = 16 * np.pi * mu * (a2[:, j] + a2[:, k]) / (3 * (a2[:, j] * alpha[:, j] + a2[:, k] * alpha[:, k]))
    return zt, zr


def mobility_blocks(kind, shape, q, mu, fixed=None):
    """Lab-frame 6x6 mobility blocks, shape (n, 6, 6) [translation L/(F T), rotation 1/(F L T)].

    ``fixed`` (n,) bool: fixed bodies get a zero block (they move only with their imposed velocity)."""
    zt, zr = body_frame_drag(kind, shape, mu)
    R = quat.to_matrix(q)
    n = len(zt)
    M = np.zeros((n, 6, 6))
    Rt = R.transpose(0, 2, 1)
    M[:, :3, :3] = (R / zt[:, None, :]) @ Rt
    M[:, 3:, 3:] = (R / zr[:, None, :]) @ Rt
    if fixed is not None:
        M[np.asarray(fixed, bool)] = 0.0
    return M


def sqrt_apply(kind, shape, q, mu, W, fixed=None):
    """Lab-frame M^{1/2} W per body, shape (n, 6): the symmetric square root of each 6x6 block,
    blockdiag(R diag(zeta_t^-1/2) R^T, R diag(zeta_r^-1/2) R^T) [translation sqrt(L/(F T)), rotation
    sqrt(1/(F L T))], applied to ``W`` (n, 6) (e.g. standard normal numbers: M^{1/2} W then has covariance M).

    ``fixed`` (n,) bool: fixed bodies get zero (their mobility block is zero)."""
    zt, zr = body_frame_drag(kind, shape, mu)
    R = quat.to_matrix(q)
    W = np.asarray(W, dtype=float).reshape(-1, 6)
    out = np.empty_like(W)
    # R (R^T w / sqrt(zeta)): lab -> body frame, scale per body axis, back to the lab frame
    out[:, :3] = np.einsum("nij,nj->ni", R, np.einsum("nji,nj->ni", R, W[:, :3]) / np.sqrt(zt))
    out[:, 3:] = np.einsum("nij,nj->ni", R, np.einsum("nji,nj->ni", R, W[:, 3:]) / np.sqrt(zr))
    if fixed is not None:
        out[np.asarray(fixed, bool)] = 0.0
    return out


def apply(blocks, F):
    """U = M F for blocks (n, 6, 6) and generalized forces F (n, 6)."""
    return np.einsum("nij,nj->ni", blocks, F)
