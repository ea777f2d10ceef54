"""Ghost exchange: owned + ghost data finds every pair within the cutoff exactly once."""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.bodies.store import BodyStore
from relcp_mpi.parallel.box import Box
from relcp_mpi.parallel.decomposition import CartesianDecomposition, RCBDecomposition
from relcp_mpi.parallel.errors import CollectiveError
from relcp_mpi.parallel.ghosts import exchange_ghosts, refresh_ghosts
from relcp_mpi.parallel.migration import migrate

comm = MPI.COMM_WORLD


def global_bodies(n, box, rng, outside=0.0):
    gid = rng.permutation(5 * n)[:n]
    x = box.lo + rng.random((n, 3)) * box.lengths
    # a few bodies slightly beyond the walls on walled axes (e.g. overlapping a wall)
    if outside:
        k = max(1, n // 20)
        walled = ~box.periodic
        x[:k, walled] = np.where(rng.random((k, walled.sum())) < 0.5,
                                 box.lo[walled] - outside * rng.random((k, walled.sum())),
                                 box.hi[walled] + outside * rng.random((k, walled.sum())))
    return BodyStore(gid=gid, x=x, shape=np.full((n, 3), 0.1), u=rng.normal(size=(n, 6)))


def brute_force_pairs(allb, box, cutoff):
    """{(gid_lo, gid_hi, image index of the higher-gid body)} from all bodies (minimum image)."""
    b = allb.sort_by_gid()
    x = box.wrap(b.x)
    i, j = np.triu_indices(b.n, k=1)
    dx = x[j] - x[i]
    s = box.image_shift(dx)
    d = np.linalg.norm(dx + s, axis=1)
    keep = d <= cutoff
    img = np.rint(s[keep] / box.lengths).astype(int)
    return {(int(b.gid[a]), int(b.gid[c]), *map(int, m)) for a, c, m in zip(i[keep], j[keep], img)}


def local_pairs(owned, ghosts, shift, box, cutoff):
    """Pairs found on this rank under the rule 'pair owned by the owner of the lower gid'."""
    cand_gid = np.concatenate([owned.gid, ghosts.gid])
    cand_x = np.concatenate([owned.x, ghosts.x])
    cand_s = np.concatenate([np.zeros((owned.n, 3)), shift])
    if owned.n == 0 or len(cand_gid) == 0:
        return []
    d = np.linalg.norm(owned.x[:, None, :] - cand_x[None, :, :], axis=2)
    a, c = np.nonzero((d <= cutoff) & (owned.gid[:, None] < cand_gid[None, :]))
    img = np.rint(cand_s[c] / box.lengths).astype(int)
    return [(int(owned.gid[p]), int(cand_gid[q]), *map(int, m)) for p, q, m in zip(a, c, img)]


def check_pairs(box, decomp_kind, width, n, seed, outside=0.0, slabs=False):
    rng = np.random.default_rng(seed)
    allb = global_bodies(n, box, rng, outside)
    home = rng.integers(0, comm.size, n)
    mine = allb.take(np.flatnonzero(home == comm.rank))
    if decomp_kind == "cart":
        d = CartesianDecomposition(box, comm, dims=(comm.size, 1, 1) if slabs else None)
    else:
        d = RCBDecomposition(box, comm, mine.x)
    owned = migrate(mine, d, comm)
    ghosts, shift, plan = exchange_ghosts(owned, d, comm, width, return_plan=True)
    assert shift.shape == (ghosts.n, 3)
    assert d.last_ghost_plan is plan
    np.testing.assert_array_equal(plan.ghost_rank, d.owner(ghosts.x - shift))
    # ghost positions are the owner's (wrapped) positions plus the image shift
    ref = {int(g): x for g, x in zip(allb.gid, box.wrap(allb.x))}
    for g, x, s in zip(ghosts.gid, ghosts.x, shift):
        np.testing.assert_allclose(x, ref[int(g)] + s, rtol=0, atol=1e-12)
    assert not np.any(np.all(shift == 0, axis=1) & np.isin(ghosts.gid, owned.gid))
    found = local_pairs(owned, ghosts, shift, box, width)
    everything = [p for lst in comm.allgather(found) for p in lst]
    assert len(everything) == len(set(everything)), "a pair was found twice"
    expected = brute_force_pairs(allb, box, width)
    missing = expected - set(everything)
    extra = set(everything) - expected
    assert not missing and not extra, (sorted(missing)[:5], sorted(extra)[:5])
    return len(expected), comm.allreduce(ghosts.n)


BOXES = {
    "periodic": Box([0, 0, 0], [3.0, 2.5, 2.0], periodic=True),
    "walled": Box([-1, 0, 0], [2.0, 2.5, 1.5], periodic=False),
    "mixed": Box([0, 0, 0], [3.0, 2.0, 1.5], periodic=[True, False, True]),
}


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["cart", "rcb"])
@pytest.mark.parametrize("boxname", list(BOXES))
def test_pairs_found_exactly_once(kind, boxname):
    box = BOXES[boxname]
    npairs, nghost = check_pairs(box, kind, width=0.55, n=300, seed=17, outside=0.2)
    assert npairs > 100  # the test is not vacuous
    if box.periodic.any():
        assert nghost > 0


@pytest.mark.mpi
def test_ghost_width_larger_than_subdomains():
    """Thin slabs: ghosts must come from non-adjacent ranks as well (no nearest-neighbour assumption)."""
    box = Box([0, 0, 0], [2.0, 2.0, 2.0], periodic=True)
    check_pairs(box, "cart", width=0.95, n=150, seed=4, slabs=True)


@pytest.mark.mpi
def test_ghosts_with_empty_ranks():
    box = Box([0, 0, 0], [2.0, 2.0, 2.0], periodic=True)
    # three bodies near a corner: their periodic images are ghosts elsewhere, most ranks own nothing
    check_pairs(box, "cart", width=0.9, n=3, seed=1)
    check_pairs(box, "rcb", width=0.9, n=3, seed=2)
    d = CartesianDecomposition(box, comm)
    g, s = exchange_ghosts(BodyStore(0), d, comm, 0.5)
    assert g.n == 0 and s.shape == (0, 3)


@pytest.mark.mpi
def test_width_validated():
    box = Box([0, 0, 0], [2.0, 2.0, 1.0], periodic=True)
    d = CartesianDecomposition(box, comm)
    with pytest.raises(ValueError, match="L/2"):
        exchange_ghosts(BodyStore(0), d, comm, 0.5)


@pytest.mark.mpi
def test_refresh_sends_updated_state_for_same_ghosts():
    rng = np.random.default_rng(8)
    box = Box([0, 0, 0], [3.0, 2.0, 2.0], periodic=[True, True, False])
    allb = global_bodies(200, box, rng)
    mine = allb.take(np.flatnonzero(rng.integers(0, comm.size, 200) == comm.rank))
    d = RCBDecomposition(box, comm, mine.x)
    owned = migrate(mine, d, comm)
    ghosts, shift = exchange_ghosts(owned, d, comm, 0.6)
    before = ghosts.copy()

    def new_state(gid, x):
        t = gid[:, None].astype(float)
        return (x + 0.01 * np.sin(t + np.arange(3)), np.cos(t + np.arange(4)), t * np.ones(6),
                0.2 + 0.001 * t * np.ones(3))

    x2, q2, u2, s2 = new_state(owned.gid, owned.x)
    owned.x, owned.q, owned.u, owned.shape = x2, q2, u2, s2
    owned.f_ext[:] = 99.0  # not refreshed
    out = refresh_ghosts(owned, ghosts, d, comm)
    assert out is ghosts
    np.testing.assert_array_equal(ghosts.gid, before.gid)
    ref_x = {int(g): x for g, x in zip(allb.gid, box.wrap(allb.x))}
    base = np.array([ref_x[int(g)] for g in ghosts.gid]).reshape(-1, 3)
    ex, eq, eu, es = new_state(ghosts.gid, base)
    np.testing.assert_allclose(ghosts.x, ex + shift, atol=1e-12)
    np.testing.assert_array_equal(ghosts.q, eq)
    np.testing.assert_array_equal(ghosts.u, eu)
    np.testing.assert_array_equal(ghosts.shape, es)
    np.testing.assert_array_equal(ghosts.f_ext, before.f_ext)
    # a stale plan (one rank lost a body) is detected on every rank
    bad = owned.take(np.arange(owned.n - 1)) if (comm.rank == 0 and owned.n) else owned
    if comm.rank == 0 and owned.n == 0:
        bad = BodyStore(gid=[123456], x=[[0.1, 0.1, 0.1]])
    with pytest.raises(CollectiveError, match="rank 0"):
        refresh_ghosts(bad, ghosts, d, comm)
