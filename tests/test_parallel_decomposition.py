"""Box, Cartesian and RCB decompositions (run under mpirun at several sizes, also serially)."""
import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.parallel.box import Box
from relcp_mpi.parallel.decomposition import (CartesianDecomposition, RCBDecomposition, imbalance,
                                              should_rebalance)

comm = MPI.COMM_WORLD


def test_box_wrap_and_minimum_image():
    box = Box([0, -1, 2], [10, 1, 5], periodic=[True, True, False])
    x = np.array([[-0.5, 1.5, 7.0], [10.0, -1.0, 1.0], [25.0, 0.2, 3.0], [-1e-17, -3.0, 2.0]])
    w = box.wrap(x)
    assert np.all(w[:, :2] >= box.lo[:2]) and np.all(w[:, :2] < box.hi[:2])
    assert np.array_equal(w[:, 2], x[:, 2])  # walled axis untouched
    np.testing.assert_allclose(w[:3], [[9.5, -0.5, 7.0], [0.0, -1.0, 1.0], [5.0, 0.2, 3.0]], atol=1e-12)
    d = box.minimum_image(np.array([[9.0, 1.5, 4.0], [-6.0, -0.9, -4.0]]))
    np.testing.assert_allclose(d, [[-1.0, -0.5, 4.0], [4.0, -0.9, -4.0]])
    np.testing.assert_array_equal(box.lengths, [10, 2, 3])
    with pytest.raises(ValueError):
        Box([0, 0, 0], [1, 0, 1])


def _random_points(n, box, rng):
    return box.lo + rng.random((n, 3)) * box.lengths


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["cart", "rcb"])
def test_owner_consistent_with_bounds(kind):
    rng = np.random.default_rng(7)
    box = Box([0, 0, 0], [4, 3, 2], periodic=[True, False, True])
    pts = _random_points(3000, box, rng)
    if kind == "cart":
        d = CartesianDecomposition(box, comm)
    else:
        mine = pts[rng.integers(0, comm.size, len(pts)) == comm.rank]
        d = RCBDecomposition(box, comm, mine)
    own = d.owner(pts)
    assert own.min() >= 0 and own.max() < comm.size
    lo, hi = d.all_bounds
    inside = np.all((pts >= lo[own]) & (pts < hi[own]), axis=1)
    assert inside.all()
    # subdomains tile the box: volumes sum to the box volume
    np.testing.assert_allclose(np.prod(hi - lo, axis=1).sum(), np.prod(box.lengths))
    # periodic images and out-of-box points on walled axes still get a valid owner
    shifted = pts + np.array([4.0, 0.0, -2.0])
    np.testing.assert_array_equal(d.owner(shifted), own)
    far = pts.copy(); far[:, 1] = 10.0
    o2 = d.owner(far)
    assert np.all(hi[o2, 1] == 3.0)
    # neighbours are symmetric
    nb = comm.allgather(d.neighbors(0.3).tolist())
    for r, lst in enumerate(nb):
        assert r not in lst
        for q in lst:
            assert r in nb[q]


def test_validate_ghost_width():
    box = Box([0, 0, 0], [4, 3, 2], periodic=[True, False, True])
    d = CartesianDecomposition(box, comm)
    assert d.validate_ghost_width(0.99) == 0.99
    with pytest.raises(ValueError, match="axis z"):
        d.validate_ghost_width(1.0)
    with pytest.raises(ValueError):
        d.validate_ghost_width(-1)
    with pytest.raises(ValueError):
        d.validate_ghost_width(float("nan"))
    walled = CartesianDecomposition(Box([0, 0, 0], [1, 1, 1]), comm)
    walled.validate_ghost_width(5.0)  # no periodic axis -> no limit


def test_cartesian_dims_follow_longest_axis():
    d = CartesianDecomposition(Box([0, 0, 0], [1, 8, 2]), comm)
    assert int(np.prod(d.dims)) == comm.size
    assert d.dims[1] == d.dims.max()


@pytest.mark.mpi
@pytest.mark.parametrize("periodic", [False, True])
def test_rcb_balances_clustered_bodies(periodic):
    rng = np.random.default_rng(11)
    box = Box([0, 0, 0], [10, 10, 10], periodic=periodic)
    n = 4000
    pts = 0.3 + rng.random((n, 3)) * 1.5  # everything in one corner
    mine = pts[rng.integers(0, comm.size, n) == comm.rank]
    d = RCBDecomposition(box, comm, mine)
    counts = np.bincount(d.owner(pts), minlength=comm.size)
    assert counts.sum() == n
    assert counts.max() / counts.mean() < 1.1
    assert imbalance(counts[comm.rank], comm) == pytest.approx(counts.max() / counts.mean())


@pytest.mark.mpi
def test_rcb_weighted_and_independent_of_placement():
    rng = np.random.default_rng(5)
    box = Box([-1, -1, -1], [1, 1, 1], periodic=[True, False, False])
    n = 3000
    pts = rng.normal(scale=0.3, size=(n, 3))
    w = 1.0 + 3.0 * (pts[:, 0] > 0)  # heavier on one side
    results = []
    for trial in range(3):
        if trial == 0:
            sel = np.arange(n) % comm.size == comm.rank
        elif trial == 1:
            sel = rng.integers(0, comm.size, n) == comm.rank
        else:
            sel = np.zeros(n, dtype=bool)
            if comm.rank == comm.size - 1:
                sel[:] = True  # everything on one rank, others empty
        perm = rng.permutation(np.flatnonzero(sel))  # local order must not matter either
        d = RCBDecomposition(box, comm, pts[perm], w[perm])
        results.append(d.all_bounds)
        wsum = np.bincount(d.owner(pts), weights=w, minlength=comm.size)
        assert wsum.max() / wsum.mean() < 1.05
    for lo, hi in results[1:]:
        np.testing.assert_array_equal(lo, results[0][0])
        np.testing.assert_array_equal(hi, results[0][1])


@pytest.mark.mpi
def test_rcb_no_bodies_and_coincident_bodies():
    box = Box([0, 0, 0], [3, 2, 1])
    d = RCBDecomposition(box, comm, np.zeros((0, 3)))
    lo, hi = d.all_bounds
    np.testing.assert_allclose(np.prod(hi - lo, axis=1), np.prod(box.lengths) / comm.size)
    same = np.tile([1.0, 1.0, 0.5], (5 if comm.rank == 0 else 0, 1))
    d2 = RCBDecomposition(box, comm, same)
    assert d2.owner(same).size == len(same)


def test_should_rebalance():
    assert should_rebalance(10, 5, 1.3, 1.2)
    assert not should_rebalance(11, 5, 1.3, 1.2)
    assert not should_rebalance(10, 5, 1.1, 1.2)
    assert not should_rebalance(10, 0, 9.0, 1.2)
    assert not should_rebalance(0, 5, 9.0, 1.2)


# ------------------------------------------------------------------------------------------------
# RCBDecomposition.to_dict / from_dict (checkpoint round trip)
class _SoloComm:
    """A stand-in communicator of ``size`` ranks of which only rank 0 exists and holds all bodies: the
    RCB build (order- and placement-independent) then gives the tree of a real ``size``-rank run, serially."""

    def __init__(self, size):
        self._size = size

    def Get_rank(self):
        return 0

    def Get_size(self):
        return self._size

    def Allreduce(self, send, recv, op=None):
        if send is not MPI.IN_PLACE:
            np.copyto(recv, send)


def _rcb_fixture(comm_, seed=3):
    rng = np.random.default_rng(seed)
    box = Box([0, -1, 2], [6, 3, 5], periodic=[True, False, True])
    pts = np.concatenate([box.lo + rng.random((400, 3)) * box.lengths,
                          0.5 + rng.random((600, 3)) * 0.8])                      # clustered part
    w = 1.0 + 2.0 * rng.random(len(pts))
    size, rank = comm_.Get_size(), comm_.Get_rank()
    if isinstance(comm_, _SoloComm):
        mine = np.ones(len(pts), dtype=bool)
    else:
        mine = np.arange(len(pts)) % size == rank
    d = RCBDecomposition(box, comm_, pts[mine], w[mine], bins=32, rounds=5)
    return box, d, rng


def _check_round_trip(comm_):
    import json
    box, d, rng = _rcb_fixture(comm_)
    dd = d.to_dict()
    assert set(dd) == {"size", "bins", "rounds", "axis", "cut", "left", "right", "rank", "lo", "hi"}
    text = json.dumps(dd)                                  # JSON-able (plain Python types)
    for k in ("axis", "left", "right", "rank"):
        assert all(type(v) is int for v in dd[k])
    assert all(type(v) is float for v in dd["cut"])
    r = RCBDecomposition.from_dict(box, comm_, json.loads(text))
    assert isinstance(r, RCBDecomposition)
    assert (r.size, r.rank, r.bins, r.rounds) == (d.size, d.rank, d.bins, d.rounds)
    for a, b in zip(r.all_bounds, d.all_bounds):
        np.testing.assert_array_equal(a, b)
    for k in range(d.size):
        for a, b in zip(r.bounds(k), d.bounds(k)):
            np.testing.assert_array_equal(a, b)
    pts = box.lo - 2.0 + rng.random((5000, 3)) * (box.lengths + 4.0)   # also outside the box (wrap / clip)
    np.testing.assert_array_equal(r.owner(pts), d.owner(pts))
    for attr in ("node_axis", "node_cut", "node_left", "node_right", "node_rank"):
        a, b = getattr(r, attr), getattr(d, attr)
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert r.to_dict() == dd or json.dumps(r.to_dict()) == text     # NaN cuts: compare as JSON text
    return d, dd


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8])
def test_rcb_dict_round_trip_serial(size):
    d, dd = _check_round_trip(_SoloComm(size))
    assert len(dd["axis"]) == 2 * size - 1 and np.array(dd["lo"]).shape == (size, 3)


@pytest.mark.mpi
def test_rcb_dict_round_trip_mpi():
    _check_round_trip(comm)


def _bad_dicts(dd):
    size = dd["size"]
    yield "not a dict", [1, 2], "expected a dict"
    yield "missing key", {k: v for k, v in dd.items() if k != "cut"}, r"missing key\(s\) \['cut'\]"
    yield "size", dict(dd, size=size + 1), f"written for {size + 1} rank"
    yield "node count", dict(dd, axis=dd["axis"] + [0]), "'axis' has shape"
    yield "left shorter", dict(dd, left=dd["left"][:-1]), "'left' has shape"
    yield "lo shape", dict(dd, lo=dd["lo"][:-1]), "'lo' has"
    yield "hi not numbers", dict(dd, hi=[["a", "b", "c"]] * size), "'hi' is not a list of numbers"
    yield "bins", dict(dd, bins="many"), "must be integers"
    yield "rank float", dict(dd, rank=[v + 0.5 for v in dd["rank"]]), "'rank' must hold integers"
    if size > 1:
        left = list(dd["left"])
        left[0] = 0                                              # root is its own child: owner() would loop
        yield "cycle", dict(dd, left=left), "malformed tree"
        rank = list(dd["rank"])
        leaves = [i for i, v in enumerate(rank) if v >= 0]
        rank[leaves[0]] = rank[leaves[1]]                        # one rank twice, one missing
        yield "leaf ranks", dict(dd, rank=rank), "each rank 0..size-1 exactly once"
        axis = list(dd["axis"])
        axis[0] = 3
        yield "axis", dict(dd, axis=axis), "axis in 0..2"


@pytest.mark.parametrize("size", [1, 4])
def test_rcb_from_dict_rejects_bad_dicts(size):
    c = _SoloComm(size)
    box, d, _ = _rcb_fixture(c)
    dd = d.to_dict()
    for name, bad, msg in _bad_dicts(dd):
        with pytest.raises(ValueError, match=msg):
            RCBDecomposition.from_dict(box, c, bad)
    # the dict of another rank count
    with pytest.raises(ValueError, match=f"written for {size} rank.*communicator has {size + 1}"):
        RCBDecomposition.from_dict(box, _SoloComm(size + 1), dd)


# ------------------------------------------------------------------------------------------------
# ghost width too large for the box: GhostWidthError collectively (a DeckError through the driver)
def _small_periodic_box():
    return Box([-2, -2, -2], [2, 2, 2], periodic=[True, True, True])


def test_ghost_width_too_large_is_a_deck_error():
    from relcp_mpi.parallel.decomposition import GhostWidthError
    d = CartesianDecomposition(_small_periodic_box(), comm)
    assert d.validate_ghost_width(1.999) == 1.999
    with pytest.raises(GhostWidthError) as ei:
        d.validate_ghost_width(2.0)
    msg = str(ei.value)
    assert msg.startswith("box: ")
    for s in ("ghost width 2", "periodic axis x", "length 4", "L/2 = 2", "enlarge the box", "contact.skin"):
        assert s in msg, msg
    # an invalid width stays a plain ValueError (programming error, not a deck problem)
    with pytest.raises(ValueError) as ei:
        d.validate_ghost_width(-1.0)
    assert not isinstance(ei.value, GhostWidthError)


def test_too_small_periodic_box_deck_gives_deck_error():
    from relcp_mpi.config.deck import DeckError
    from relcp_mpi.simulation import Simulation
    from tests.helpers import make_deck
    deck = make_deck(box={"lo": [-2, -2, -2], "hi": [2, 2, 2], "periodic": [True, True, True]},
                     bodies=[{"shape": "sphere", "radius": 0.5, "position": [0, 0, 0]}],
                     contact={"skin": 0.5})
    sim = Simulation(deck, "", comm)
    try:
        with pytest.raises(DeckError, match="ghost width 2 .*periodic axis x"):
            sim.check_initial_overlap()
    finally:
        sim.solver.free()


@pytest.mark.mpi(min_size=2)
def test_ghost_width_deck_error_on_every_rank():
    from relcp_mpi.config.deck import DeckError
    from relcp_mpi.parallel.decomposition import GhostWidthError
    from relcp_mpi.simulation import Simulation
    from tests.helpers import make_deck
    d = CartesianDecomposition(_small_periodic_box(), comm)

    def outcome(width):
        try:
            d.validate_ghost_width(width)
        except GhostWidthError as e:
            return ("GhostWidthError", str(e))
        except Exception as e:  # noqa: BLE001
            return (type(e).__name__, str(e))
        return ("ok", "")

    got = comm.allgather(outcome(2.5))
    assert got[0][0] == "GhostWidthError" and all(g == got[0] for g in got), got
    # only the last rank passes a width that is too large: every rank raises, with that rank's message
    got = comm.allgather(outcome(3.0 if comm.rank == comm.size - 1 else 1.0))
    assert got[0][0] == "GhostWidthError" and "ghost width 3" in got[0][1] and all(g == got[0] for g in got), got
    assert comm.allgather(outcome(1.0)) == [("ok", "")] * comm.size
    # the same through the driver, for a deck whose periodic box is too small
    deck = make_deck(box={"lo": [-2, -2, -2], "hi": [2, 2, 2], "periodic": [True, True, True]},
                     bodies=[{"shape": "sphere", "radius": 0.5, "position": [0, 0, 0]},
                             {"shape": "sphere", "radius": 0.5, "position": [1.2, 1.2, 1.2]}],
                     contact={"skin": 0.5})
    sim = Simulation(deck, "", comm)
    try:
        try:
            sim.check_initial_overlap()
            res = ("ok", "")
        except DeckError as e:
            res = ("DeckError", str(e))
    finally:
        sim.solver.free()
    got = comm.allgather(res)
    assert got[0][0] == "DeckError" and "periodic axis x" in got[0][1] and all(g == got[0] for g in got), got
