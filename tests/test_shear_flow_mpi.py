"""Shear flow with Lees--Edwards boundaries on several ranks (issue 13, item 3): the same answer as on one
rank, and a pair colliding across the sheared boundary kept apart when its bodies live on different ranks.

Run under ``mpirun -n 2`` (or 4): sub-communicators of every size up to the world size run the same deck and
are compared against a COMM_SELF run on each rank.
"""
import numpy as np
import pytest
from mpi4py import MPI

from tests.helpers import make_deck, run_sim
from tests.test_shear_flow import check_pair_history, pair_distance_history


def _split(size):
    world = MPI.COMM_WORLD
    return world.Split(0 if world.rank < size else MPI.UNDEFINED, world.rank)


def _suspension(shape, decomposition):
    """A sheared periodic suspension (about 10 % volume fraction), Lees--Edwards along y; the gradient axis is
    split between ranks (Cartesian grid 1 x P x 1 is not forced: the default grid splits x first, RCB splits
    the longest axis), so pairs cross both rank and sheared boundaries."""
    shape = dict(shape)
    gen = dict(shape, count=shape.pop("count"), method="random", orientation="random",
               region={"lo": [0.0, 0.0, 0.0], "hi": [6.0, 8.0, 6.0]})
    return make_deck(time={"dt": 0.05, "steps": 40}, seed=5,
                     box={"lo": [0, 0, 0], "hi": [6, 8, 6], "periodic": [True, True, True]}, generate=[gen],
                     flow={"type": "shear", "rate": 2.0}, contact={"overlap_tol": 1e-3, "skin": 0.3},
                     solver={"tol": 1e-8}, parallel={"decomposition": decomposition})


SHAPES = {"sphere": {"shape": "sphere", "radius": 0.6, "count": 60},
          "ellipsoid": {"shape": "ellipsoid", "axes": [0.7, 0.35, 0.35], "count": 60}}


@pytest.mark.mpi
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("decomposition", ["cartesian", "rcb"])
def test_sheared_suspension_same_on_every_rank_count(shape, decomposition):
    world = MPI.COMM_WORLD
    deck = _suspension(SHAPES[shape], decomposition)
    ref, dref = run_sim(deck, comm=MPI.COMM_SELF)
    assert max(d["active"] for d in dref) >= 3              # real contacts
    assert max(d["max_overlap"] for d in dref) <= 1e-3
    for size in range(2, world.size + 1):
        sub = _split(size)
        ok = True
        if sub != MPI.COMM_NULL:
            ok = _agrees(*run_sim(deck, comm=sub), ref, dref)
            sub.Free()
        assert world.allreduce(ok, op=MPI.LAND), f"{size} ranks differ from 1 rank"


def _agrees(sim, hist, ref, href):
    """Same gids, positions (1e-5), orientations (up to sign), constraint counts per step, image offset and
    xy stress (rtol 1e-4) as the one-rank reference (collective over sim's communicator)."""
    (g, x), (g0, x0) = sim.gather(), ref.gather()
    dots = np.abs(np.einsum("ij,ij->i", sim.gather("q")[1], ref.gather("q")[1]))
    rows, rows0 = ([e["constraints"] for e in h] for h in (hist, href))
    sxy, sxy0 = ([e["stress_xy"] for e in h] for h in (hist, href))
    return bool(np.array_equal(g, g0) and np.allclose(x, x0, atol=1e-5) and np.allclose(dots, 1.0, atol=1e-8)
                and rows == rows0 and sim.state.shear_offset == ref.state.shear_offset
                and np.allclose(sxy, sxy0, rtol=1e-4, atol=1e-8))


@pytest.mark.mpi
def test_contact_across_sheared_boundary_between_ranks():
    """The pair of tests/test_shear_flow.py on all ranks (the two spheres and their images are owned by
    different ranks for part of the run); same checks, and the same trajectory as on one rank."""
    rec = pair_distance_history(MPI.COMM_WORLD)
    check_pair_history(rec)
    ref = pair_distance_history(MPI.COMM_SELF)
    assert np.allclose([r[0] for r in rec], [r[0] for r in ref], atol=1e-6)


@pytest.mark.mpi
@pytest.mark.parametrize("decomp_kind", ["cart", "rcb"])
@pytest.mark.parametrize("offset", [0.0, 3.7, 9.95])
def test_lees_edwards_ghosts_find_every_pair_once(decomp_kind, offset):
    """Owned + ghost bodies (Lees--Edwards images displaced by the offset) find every pair within the ghost
    width exactly once over all ranks, at the sheared minimum-image distance (brute force over all bodies with
    Box.minimum_image); refreshed images move by elapsed x their velocity jump."""
    from relcp_mpi.bodies.store import BodyStore
    from relcp_mpi.parallel.box import Box, LeesEdwards
    from relcp_mpi.parallel.decomposition import CartesianDecomposition, RCBDecomposition
    from relcp_mpi.parallel.ghosts import exchange_ghosts, refresh_ghosts
    from relcp_mpi.parallel.migration import migrate
    comm = MPI.COMM_WORLD
    rate = 0.7
    box = Box([0, 0, 0], [10, 8, 6], True, shear=LeesEdwards(flow_axis=0, gradient_axis=1, rate=rate))
    rng = np.random.default_rng(11)
    n, width = 300, 1.3
    allb = BodyStore(gid=np.arange(n), x=box.lo + rng.random((n, 3)) * box.lengths, shape=np.full((n, 3), 0.1),
                     u=rng.normal(size=(n, 6)))
    mine = allb.take(np.arange(n)[comm.rank::comm.size])
    decomp = CartesianDecomposition(box, comm) if decomp_kind == "cart" else \
        RCBDecomposition(box, comm, mine.x, np.ones(mine.n))
    owned = migrate(mine, decomp, comm, offset=offset)
    ghosts, shift = exchange_ghosts(owned, decomp, comm, width, offset=offset)
    X = np.concatenate([owned.x, ghosts.x])
    G = np.concatenate([owned.gid, ghosts.gid])
    d = np.linalg.norm(owned.x[:, None, :] - X[None, :, :], axis=2) if owned.n else np.zeros((0, len(G)))
    a, c = np.nonzero((d <= width) & (owned.gid[:, None] < G[None, :]))
    found = [(int(owned.gid[p]), int(G[q]), round(float(d[p, q]), 9)) for p, q in zip(a, c)]
    found = sorted(sum(comm.allgather(found), []))
    i, j = np.triu_indices(n, k=1)
    dd = np.linalg.norm(box.minimum_image(allb.x[i] - allb.x[j], offset=offset), axis=1)
    keep = dd <= width
    expect = sorted((int(p), int(q), round(float(e), 9)) for p, q, e in zip(i[keep], j[keep], dd[keep]))
    assert len(expect) > 50
    assert [f[:2] for f in found] == [e[:2] for e in expect]          # every pair, exactly once
    assert np.allclose([f[2] for f in found], [e[2] for e in expect], atol=1e-8)
    # ghost velocities carry the images' jump; a refresh after `elapsed` moves the images by elapsed x jump
    ny = np.rint(shift[:, 1] / 8.0)
    own_u = dict(zip(allb.gid.tolist(), allb.u[:, 0].tolist()))
    assert np.allclose(ghosts.u[:, 0], [own_u[int(g)] for g in ghosts.gid] + ny * rate * 8.0)
    x0 = ghosts.x.copy()
    refresh_ghosts(owned, ghosts, decomp, comm, elapsed=0.5)
    assert np.allclose(ghosts.x[:, 0] - x0[:, 0], ny * rate * 8.0 * 0.5) and np.allclose(ghosts.x[:, 1:], x0[:, 1:])
