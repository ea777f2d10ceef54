"""Fast unit tests: quaternions, body store, mobility, neighbour search, deck validation."""
import numpy as np
import pytest

from relcp_mpi.bodies.shapes import ELLIPSOID, SPHERE, SPHEROCYLINDER, bounding_radius
from relcp_mpi.bodies.store import PACK_WIDTH, BodyStore
from relcp_mpi.config import deck as deckmod
from relcp_mpi.contact.neighbors import candidate_pairs, wall_candidates
from relcp_mpi.geometry import quaternion as quat
from relcp_mpi.physics.mobility import body_frame_drag, mobility_blocks


def test_quaternion_rotation_matches_matrix_and_is_orthonormal(rng):
    q = quat.random_unit(rng, 50)
    R = quat.to_matrix(q)
    assert np.allclose(np.einsum("nij,nkj->nik", R, R), np.eye(3), atol=1e-12)
    assert np.allclose(np.linalg.det(R), 1.0)
    # composition: R(a*b) = R(a) R(b)
    a, b = quat.random_unit(rng, 10), quat.random_unit(rng, 10)
    assert np.allclose(quat.to_matrix(quat.multiply(a, b)), quat.to_matrix(a) @ quat.to_matrix(b), atol=1e-12)


def test_exact_rotation_update_about_fixed_axis():
    q0 = np.array([[1.0, 0, 0, 0]])
    w = np.array([[0.0, 0.0, 2.0]])
    q = q0
    for _ in range(10):
        q = quat.integrate(q, w, 0.05)
    v = quat.rotate(q, np.array([[1.0, 0, 0]]))[0]
    assert np.allclose(v, [np.cos(1.0), np.sin(1.0), 0.0], atol=1e-13)


def test_body_store_pack_roundtrip(rng):
    n = 7
    b = BodyStore(gid=np.arange(n) * 1000 + 3, kind=rng.integers(0, 3, n), shape=rng.random((n, 3)),
                  x=rng.normal(size=(n, 3)), q=quat.random_unit(rng, n), u=rng.normal(size=(n, 6)))
    buf = b.pack()
    assert buf.shape == (n, PACK_WIDTH)
    c = BodyStore.unpack(buf)
    for f, a in b.arrays().items():
        assert np.array_equal(a, getattr(c, f)), f
    assert len(BodyStore.unpack(np.zeros((0, PACK_WIDTH)))) == 0
    with pytest.raises(ValueError):
        BodyStore(gid=[1, 2], x=np.zeros((3, 3)))


def test_mobility_sphere_and_ellipsoid_limits():
    zt, zr = body_frame_drag([SPHERE, ELLIPSOID], [[0.7, 0, 0], [0.7, 0.7, 0.7]], mu=2.0)
    assert np.allclose(zt, 6 * np.pi * 2.0 * 0.7)
    assert np.allclose(zr, 8 * np.pi * 2.0 * 0.7 ** 3)
    # prolate ellipsoid: axial translation is easier than transverse; rod likewise
    zt, zr = body_frame_drag([ELLIPSOID, SPHEROCYLINDER], [[3, 1, 1], [0.2, 4.0, 0]], mu=1.0)
    assert zt[0, 0] < zt[0, 1] == pytest.approx(zt[0, 2])
    assert zt[1, 2] < zt[1, 0] == pytest.approx(zt[1, 1])
    assert np.all(zr > 0)


def test_ellipsoid_drag_per_body_whatever_the_mix(rng):
    # the drag is computed once per distinct semi-axis triple: every body must get its own triple's values,
    # whether all bodies share one triple (monodisperse fast path) or not, and mixed with other shapes
    axes = np.array([[1.0, 0.5, 0.25], [0.4, 0.4, 0.9], [1.0, 0.5, 0.3]])
    pick = rng.integers(0, 3, 200)
    kind = np.where(rng.random(200) < 0.2, SPHERE, ELLIPSOID)
    shape = np.where((kind == SPHERE)[:, None], [[0.5, 0.0, 0.0]], axes[pick])
    zt, zr = body_frame_drag(kind, shape, 1.3)
    for k in (0, 1, 2):
        one_t, one_r = body_frame_drag(np.array([ELLIPSOID]), axes[k:k + 1], 1.3)
        sel = (kind == ELLIPSOID) & (pick == k)
        assert np.array_equal(zt[sel], np.repeat(one_t, sel.sum(), axis=0))
        assert np.array_equal(zr[sel], np.repeat(one_r, sel.sum(), axis=0))
    mono_t, _ = body_frame_drag(np.full(5, ELLIPSOID), np.tile(axes[1], (5, 1)), 1.3)
    assert np.array_equal(mono_t, np.repeat(body_frame_drag(np.array([ELLIPSOID]), axes[1:2], 1.3)[0], 5, axis=0))


def test_mobility_blocks_rotate_with_body(rng):
    q = quat.random_unit(rng, 5)
    M = mobility_blocks(np.full(5, ELLIPSOID), np.tile([2.0, 1.0, 0.5], (5, 1)), q, 1.0)
    assert np.allclose(M, np.transpose(M, (0, 2, 1)))
    assert np.all(np.linalg.eigvalsh(M) > 0)
    # force along the body long axis is resisted by the axial drag
    zt, _ = body_frame_drag([ELLIPSOID], [[2.0, 1.0, 0.5]], 1.0)
    ax = quat.rotate(q, np.tile([1.0, 0, 0], (5, 1)))
    U = np.einsum("nij,nj->ni", M[:, :3, :3], ax)
    assert np.allclose(U, ax / zt[0, 0])


def test_candidate_pairs_match_brute_force(rng):
    x = rng.random((300, 3)) * 10
    r = rng.random(300) * 0.5 + 0.1
    ia, ib = candidate_pairs(x, r, 0.2)
    d = np.linalg.norm(x[:, None] - x[None], axis=2)
    ref = {(i, j) for i in range(300) for j in range(i + 1, 300) if d[i, j] <= r[i] + r[j] + 0.2}
    assert set(zip(ia.tolist(), ib.tolist())) == ref
    # owned restriction
    ia, ib = candidate_pairs(x, r, 0.2, n_owned=100)
    assert np.all(ia < 100)
    wb, ww = wall_candidates(x, r, 0.0, [[0, 0, 1.0]], [[0, 0, 1.0]])
    assert set(wb.tolist()) == set(np.nonzero(x[:, 2] - 1.0 <= r)[0].tolist())


GOOD = """
name: t
time: {dt: 0.1, steps: 3}
bodies:
  - {shape: sphere, radius: 1.0, position: [0, 0, 0]}
"""


def test_deck_defaults_and_normalisation():
    d = deckmod.loads(GOOD)
    assert d["solver"]["tol"] == pytest.approx(0.1 * d["contact"]["overlap_tol"])
    assert d["output"]["directory"] == "out/t"
    assert d["bodies"][0]["radius"] == 1.0


@pytest.mark.parametrize("text, needle", [
    ("time: {dt: 0.1, steps: 3}\nbodies: [{shape: cube, radius: 1, position: [0,0,0]}]", "bodies[0].shape: unknown shape 'cube'"),
    ("time: {dt: 0.1, steps: 3}\nbodies: [{shape: sphere, radius: -1, position: [0,0,0]}]", "bodies[0].radius: must be > 0"),
    ("time: {dt: 0.1, steps: 3}\nbodies: [{shape: ellipsoid, axes: [1, 0, 1], position: [0,0,0]}]", "semi-axes must all be > 0"),
    ("time: {dt: 0.1, steps: 3}\nbodies: [{shape: sphere, radius: 1, position: [0,0]}]", "bodies[0].position: must be a list of 3 numbers"),
    ("time: {dt: 0.1, steps: 3}\nbodies: [{shape: sphere, radius: 1, position: [0,0,0], colour: red}]", "bodies[0].colour: unknown key"),
    ("time: {dt: 0.1, steps: 3}\nbodies: [{shape: sphere, length: 1, radius: 1, position: [0,0,0]}]", "bodies[0].length: not a parameter of shape sphere"),
    ("time: {dt: 0.1, steps: 3}\ntypo_section: 1\nbodies: [{shape: sphere, radius: 1, position: [0,0,0]}]", "typo_section: unknown key"),
    ("time: {dt: zero, steps: 3}\nbodies: [{shape: sphere, radius: 1, position: [0,0,0]}]", "time.dt: expected float, got 'zero'"),
    ("time: {dt: 0.1}\nbodies: [{shape: sphere, radius: 1, position: [0,0,0]}]", "time: give steps or t_end"),
    ("time: {dt: 0.1, steps: 2}\n", "the deck defines no bodies"),
    ("time: {dt: 0.1, steps: 2\nbodies: [", "malformed YAML at line"),
    ("", "the deck is empty"),
    ("- 1\n- 2\n", "top level must be a mapping"),
    ("time: {dt: 0.1, steps: 2}\ncontact: {overlap_tol: 1.0e-3}\nsolver: {tol: 0.1}\nbodies: [{shape: sphere, radius: 1, position: [0,0,0]}]", "solver.tol: must be <= contact.overlap_tol"),
    ("time: {dt: 0.1, steps: 2}\nsolver: {method: magic}\nbodies: [{shape: sphere, radius: 1, position: [0,0,0]}]", "solver.method: must be one of"),
])
def test_bad_decks_name_the_problem(text, needle):
    with pytest.raises(deckmod.DeckError) as ei:
        deckmod.loads(text, source="x.yaml")
    assert needle in str(ei.value)
    assert "x.yaml" in str(ei.value)


def test_all_shipped_decks_validate():
    import glob
    for path in sorted(glob.glob("input_decks/*.yaml")):
        deckmod.load(path)


def test_bounding_radius():
    r = bounding_radius([SPHERE, SPHEROCYLINDER, ELLIPSOID], [[1, 0, 0], [0.5, 3, 0], [1, 4, 2]])
    assert np.allclose(r, [1.0, 2.0, 4.0])
