"""Migration: bodies end on owner(x), none lost or duplicated, periodic wrapping keeps ids."""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.bodies.store import BodyStore
from relcp_mpi.parallel.box import Box
from relcp_mpi.parallel.decomposition import CartesianDecomposition, RCBDecomposition
from relcp_mpi.parallel.errors import CollectiveError
from relcp_mpi.parallel.migration import MigrationError, migrate, pack_rows

comm = MPI.COMM_WORLD


def make_bodies(n, box, rng, spread=0.0):
    """The same global set of bodies on every rank (random gids, random state)."""
    gid = rng.permutation(10 * n)[:n] + 7
    x = box.lo + rng.random((n, 3)) * box.lengths
    x += spread * rng.normal(size=(n, 3)) * box.lengths  # some leave the box
    q = rng.normal(size=(n, 4)); q /= np.linalg.norm(q, axis=1, keepdims=True)
    return BodyStore(gid=gid, kind=rng.integers(0, 3, n), shape=rng.random((n, 3)) + 0.1, x=x, q=q,
                     u=rng.normal(size=(n, 6)), f_ext=rng.normal(size=(n, 6)),
                     u_imp=rng.normal(size=(n, 6)), growth=rng.random(n))


def scatter_randomly(allb, rng):
    """Random initial placement (not by position); identical choice on every rank."""
    home = rng.integers(0, comm.size, allb.n)
    return allb.take(np.flatnonzero(home == comm.rank))


def unit_box_bodies(seed, n):
    """(rng, periodic unit box, its Cartesian decomposition, n bodies in it): the set-up of several tests."""
    rng = np.random.default_rng(seed)
    box = Box([0, 0, 0], [1, 1, 1], periodic=True)
    return rng, box, CartesianDecomposition(box, comm), make_bodies(n, box, rng)


def gather(b):
    return BodyStore.concatenate([BodyStore.unpack(r) for r in comm.allgather(pack_rows(b))])


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["cart", "rcb"])
@pytest.mark.parametrize("periodic", [True, False, (True, False, True)])
def test_migrate_to_owner(kind, periodic):
    rng = np.random.default_rng(2024)
    box = Box([-2, 0, 1], [3, 4, 2.5], periodic=periodic)
    allb = make_bodies(600, box, rng, spread=0.3)
    mine = scatter_randomly(allb, rng)
    if kind == "cart":
        d = CartesianDecomposition(box, comm)
    else:
        d = RCBDecomposition(box, comm, mine.x)
    out = migrate(mine, d, comm)
    assert np.all(np.diff(out.gid) > 0)  # sorted, unique locally
    assert np.all(d.owner(out.x) == comm.rank)
    lo, hi = d.my_bounds
    per = box.periodic
    assert np.all((out.x[:, per] >= lo[per]) & (out.x[:, per] < hi[per]))
    g = gather(out).sort_by_gid()
    ref = allb.sort_by_gid()
    np.testing.assert_array_equal(g.gid, ref.gid)
    # every field preserved exactly, positions wrapped on periodic axes only
    np.testing.assert_array_equal(g.x, box.wrap(ref.x))
    for f in ("kind", "shape", "q", "u", "f_ext", "u_imp", "growth"):
        np.testing.assert_array_equal(getattr(g, f), getattr(ref, f))
    # migrating again is a no-op
    again = migrate(out, d, comm)
    np.testing.assert_array_equal(pack_rows(again), pack_rows(out))


@pytest.mark.mpi
def test_migrate_across_periodic_boundary_keeps_ids():
    rng, box, d, allb = unit_box_bodies(3, 200)
    b = migrate(scatter_randomly(allb, rng), d, comm)
    # push everything across the x boundary (and by several box lengths for some)
    b.x[:, 0] += np.where(b.gid % 2 == 0, 0.999, -3.25)
    before = {int(g): x.copy() for g, x in zip(b.gid, b.x)}
    out = migrate(b, d, comm)
    allb2 = gather(out)
    before_all = {}
    for dct in comm.allgather(before):
        before_all.update(dct)
    assert sorted(before_all) == sorted(allb2.gid.tolist())
    for g, x in zip(allb2.gid, allb2.x):
        assert np.all((x >= 0) & (x < 1))
        dx = x - before_all[int(g)]
        np.testing.assert_allclose(dx, np.rint(dx), atol=1e-12)  # moved by whole box lengths only
    assert np.all(d.owner(out.x) == comm.rank)


@pytest.mark.mpi
def test_zero_bodies_everywhere_and_on_some_ranks():
    box = Box([0, 0, 0], [1, 1, 1], periodic=True)
    d = CartesianDecomposition(box, comm)
    out = migrate(BodyStore(0), d, comm)
    assert out.n == 0
    b = BodyStore(gid=[5], x=[[0.99, 0.99, 0.99]]) if comm.rank == 0 else BodyStore(0)
    out = migrate(b, d, comm)
    assert comm.allreduce(out.n) == 1
    assert out.n == (1 if d.owner([[0.99, 0.99, 0.99]])[0] == comm.rank else 0)


@pytest.mark.mpi
@pytest.mark.parametrize("same_rank", [True, False])
def test_duplicated_body_raises_on_every_rank(same_rank):
    rng, box, d, allb = unit_box_bodies(9, 50)
    dup_gid = int(allb.gid[17])
    mine = scatter_randomly(allb, rng)
    holder = comm.size - 1 if same_rank else 0
    if comm.rank == holder:
        extra = allb.take([17])
        extra.x = extra.x * 0.5 + 0.2  # different position: may go elsewhere
        mine = BodyStore.concatenate([mine, extra])
    with pytest.raises(MigrationError, match=f"duplicated body id\\(s\\): {dup_gid}") as ei:
        migrate(mine, d, comm)
    assert isinstance(ei.value, CollectiveError)


@pytest.mark.mpi
def test_non_finite_position_raises_on_every_rank():
    box = Box([0, 0, 0], [1, 1, 1], periodic=False)
    d = CartesianDecomposition(box, comm)
    b = BodyStore(gid=[comm.rank * 10 + 1], x=[[0.5, 0.5, 0.5]])
    if comm.rank == comm.size - 1:
        b.x[0, 1] = np.nan
    with pytest.raises(MigrationError, match=f"gids {(comm.size - 1) * 10 + 1}"):
        migrate(b, d, comm)


@pytest.mark.mpi
@pytest.mark.parametrize("order", ["gid", "spatial"])
def test_fast_check_gives_the_same_store(order):
    """check="fast" (the stepper's per-step mode) changes nothing but the check: same bodies, same order, same
    bits as the exact check, with bodies staying, moving and wrapping."""
    rng = np.random.default_rng(41)
    box = Box([0, 0, 0], [2, 1, 1], periodic=(True, True, False))
    d = RCBDecomposition(box, comm, box.lo + rng.random((64, 3)) * box.lengths)
    allb = make_bodies(400, box, rng, spread=0.2)
    mine = scatter_randomly(allb, rng)
    a = migrate(mine, d, comm, order=order)
    b = migrate(mine, d, comm, order=order, check="fast")
    np.testing.assert_array_equal(pack_rows(a), pack_rows(b))
    # a second round: almost every body stays where it is
    b.x = b.x + 0.01 * rng.normal(size=b.x.shape)
    np.testing.assert_array_equal(pack_rows(migrate(b, d, comm, order=order)),
                                  pack_rows(migrate(b, d, comm, order=order, check="fast")))


@pytest.mark.mpi
def test_fast_check_finds_a_duplicate_on_one_rank():
    rng, box, d, allb = unit_box_bodies(5, 50)
    mine = migrate(scatter_randomly(allb, rng), d, comm)
    dup = comm.bcast(int(mine.gid[0]) if comm.rank == 0 and mine.n else None, root=0)
    if comm.rank == 0 and mine.n:
        mine = BodyStore.concatenate([mine, mine.take([0])])      # the copy stays on this rank
    if dup is None:
        pytest.skip("rank 0 holds no body")
    with pytest.raises(MigrationError, match=f"duplicated body id\\(s\\): {dup}"):
        migrate(mine, d, comm, check="fast")


@pytest.mark.mpi
def test_fast_check_finds_a_body_lost_in_the_exchange(monkeypatch):
    """An exchange that drops a row (a fault of the transport, not of the input) is named by the fast check."""
    import relcp_mpi.parallel.migration as mig
    rng, box, d, allb = unit_box_bodies(6, 80)
    mine = scatter_randomly(allb, rng)
    real = mig.exchange_rows

    def lossy(rows, dest, c, dtype=np.float64):
        got = real(rows, dest, c, dtype=dtype)
        return got[1:] if dtype == np.float64 and comm.rank == 0 and len(got) else got
    monkeypatch.setattr(mig, "exchange_rows", lossy)
    if comm.size == 1:
        pytest.skip("one rank: no body changes rank, nothing is exchanged")
    assert comm.allreduce(int(np.count_nonzero(d.owner(box.wrap(mine.x)) == 0)) if comm.rank else 0) > 0
    with pytest.raises(MigrationError, match="lost body id"):
        migrate(mine, d, comm, check="fast")
