"""basics/quaternion.py: rotation vectors between orientations."""
import numpy as np

from relcp_mpi.basics import quaternion


def test_rotation_vector_between_inverts_from_rotation_vector():
    rng = np.random.default_rng(7)
    q0 = quaternion.random_unit(rng, 200)
    d = rng.normal(size=(200, 3))
    d *= (rng.uniform(0.0, 0.999 * np.pi, 200) / np.linalg.norm(d, axis=1))[:, None]   # angles below pi
    d[:3] = [[0, 0, 0], [1e-12, 0, 0], [0, 0, 3.0]]
    q1 = quaternion.multiply(quaternion.from_rotation_vector(d), q0)
    q1[::2] *= -1.0                                     # the same orientations with the other sign
    got = quaternion.rotation_vector_between(q0, q1)
    assert np.allclose(got, d, atol=1e-12, rtol=1e-9)
    # a fraction of it lies on the constant-axis path from q0 to q1
    half = quaternion.multiply(quaternion.from_rotation_vector(0.5 * got), q0)
    assert np.allclose(np.abs(np.einsum("ij,ij->i", half, quaternion.multiply(
        quaternion.from_rotation_vector(0.5 * d), q0))), 1.0)
