"""tools/render_frame.py: the body meshes lie on the bodies' surfaces (numpy only; the VTK rendering itself is
exercised by running the tool, see README Results)."""
import importlib.util
import os

import numpy as np

from relcp_mpi.bodies.shapes import ELLIPSOID, RING, SPHERE, SPHEROCYLINDER
from relcp_mpi.geometry.quaternion import normalize, to_matrix

_spec = importlib.util.spec_from_file_location(
    "render_frame", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools",
                                 "render_frame.py"))
rf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rf)


def _body_frame(kind, shape, x, q):
    pts, nrm, faces, V = rf.lab_mesh(kind, shape, x, q)
    n = len(x)
    R = to_matrix(q)
    local = np.einsum("nji,nvj->nvi", R, pts.reshape(n, V, 3) - x[:, None, :])   # R^T (p - x)
    ln = np.einsum("nji,nvj->nvi", R, nrm.reshape(n, V, 3))
    assert faces.max() == n * V - 1 and faces.min() == 0
    return local, ln


def test_meshes_on_surfaces(rng):
    n = 5
    x = rng.normal(size=(n, 3)) * 3
    q = normalize(rng.normal(size=(n, 4)))
    s = np.column_stack([rng.uniform(0.5, 1.5, n), rng.uniform(0.3, 1.0, n), rng.uniform(0.2, 0.9, n)])
    p, nn = _body_frame(ELLIPSOID, s, x, q)
    assert np.allclose(((p / s[:, None, :]) ** 2).sum(axis=2), 1.0)
    g = p / s[:, None, :] ** 2                                    # outward normal direction of the ellipsoid
    assert np.allclose(np.cross(g, nn), 0.0, atol=1e-12) and np.all((g * nn).sum(axis=2) > 0)
    p, _ = _body_frame(SPHERE, s, x, q)
    assert np.allclose(np.linalg.norm(p, axis=2), s[:, :1])
    # capsule: distance to the axis segment [-L/2, L/2] e_z equals R
    p, _ = _body_frame(SPHEROCYLINDER, s, x, q)
    zc = np.clip(p[:, :, 2], -0.5 * s[:, 1, None], 0.5 * s[:, 1, None])
    d = np.sqrt(p[:, :, 0] ** 2 + p[:, :, 1] ** 2 + (p[:, :, 2] - zc) ** 2)
    assert np.allclose(d, s[:, :1])
    assert np.allclose(p[:, :, 2].max(axis=1), 0.5 * s[:, 1] + s[:, 0])
    # torus: distance to the centre circle equals the tube radius
    t = np.column_stack([s[:, 0] + 1.0, s[:, 1] * 0.5, np.zeros(n)])
    p, _ = _body_frame(RING, t, x, q)
    rho = np.hypot(p[:, :, 0], p[:, :, 1])
    assert np.allclose(np.hypot(rho - t[:, :1], p[:, :, 2]), t[:, 1:2])
