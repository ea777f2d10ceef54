"""parallel.body_order: a step keeps a rank's bodies along a Morton curve (relcp_mpi.bodies.order).

The order must be a function of the positions and ids only (a restart orders bodies as the uninterrupted run
does), must be the order D and the dumped LCPs actually use, must not change the physics beyond the solver
tolerance, and sim.bodies, contact forces and stresslets must be in id order (and belong together) between
steps, although the state keeps the step's order.

Serial: .venv/bin/python -m pytest -q tests/test_body_order.py
MPI:    mpirun -n 2 tools/mpi_pytest.sh -q --with-mpi -m "mpi and not slow" tests/test_body_order.py
"""
import glob
import os

import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.bodies.order import morton_keys, spatial_order
from relcp_mpi.config.deck import DeckError, validate
from relcp_mpi.contact.lcp_dump import load_lcp
from relcp_mpi.io.deck_changes import judge
from tests.helpers import run_sim, same_on_sub_communicators
from tests.test_line_contacts_mpi import pinched_bed

SELF = MPI.COMM_SELF


def _interleave(i, j, k, bits=21):
    """Reference Morton code, bit by bit (x bit b -> 3b, y -> 3b + 1, z -> 3b + 2)."""
    out = 0
    for b in range(bits):
        out |= ((i >> b) & 1) << (3 * b) | ((j >> b) & 1) << (3 * b + 1) | ((k >> b) & 1) << (3 * b + 2)
    return out


def test_morton_keys_interleave_the_quantized_coordinates():
    rng = np.random.default_rng(5)
    cells = rng.integers(0, 2 ** 21, size=(200, 3))
    cells[0] = 0
    cells[1] = 2 ** 21 - 1                      # spans the grid: the quantization is then exact
    keys = morton_keys(cells.astype(float))
    ref = np.array([_interleave(int(a), int(b), int(c)) for a, b, c in cells], dtype=np.uint64)
    np.testing.assert_array_equal(keys, ref)


def test_spatial_order_is_local_and_independent_of_the_listing():
    # 1,000 points on a jittered 10 x 10 x 10 lattice, listed at random: consecutive points of the Morton order
    # are lattice neighbours far more often than in the listing
    rng = np.random.default_rng(3)
    g = np.stack(np.meshgrid(*(np.arange(10),) * 3, indexing="ij"), -1).reshape(-1, 3).astype(float)
    x = (g + rng.uniform(-0.2, 0.2, g.shape))[rng.permutation(len(g))]
    gid = rng.permutation(len(x)) + 100
    perm = spatial_order(x, gid)
    assert np.array_equal(np.sort(perm), np.arange(len(x)))
    step_sorted = np.linalg.norm(np.diff(x[perm], axis=0), axis=1)
    step_listed = np.linalg.norm(np.diff(x, axis=0), axis=1)
    assert np.median(step_sorted) < 1.5 < np.median(step_listed)
    # the same set listed otherwise gives the same sequence of ids
    shuffle = rng.permutation(len(x))
    assert np.array_equal(gid[shuffle][spatial_order(x[shuffle], gid[shuffle])], gid[perm])
    # bodies in one grid cell (coincident points) are ordered by id
    same = np.zeros((5, 3))
    assert np.array_equal(spatial_order(same, np.array([7, 3, 9, 1, 5])), [3, 1, 4, 0, 2])
    assert len(spatial_order(np.zeros((0, 3)), np.zeros(0, np.int64))) == 0


def _bed(order, tol=1e-6, **debug):
    deck = pinched_bed(True, tol=tol)
    return validate({**deck, "parallel": {**deck["parallel"], "body_order": order},
                     **({"debug": debug} if debug else {})})


def test_the_step_uses_the_spatial_order_and_ids_come_back_between_steps(tmp_path):
    # the LCP dump lists the owned bodies in the order of D's block rows: the Morton order of the step's start
    deck = _bed("spatial", dump_lcp=str(tmp_path / "dump"), dump_on="always")
    deck = validate({**deck, "time": {**deck["time"], "steps": 1}})
    from relcp_mpi.simulation import Simulation
    sim = Simulation.from_deck(deck, comm=SELF)
    gid0, x0 = sim.gather()
    sim.run(1, writers=[])
    dump = load_lcp(sorted(glob.glob(os.path.join(str(tmp_path / "dump"), "*level00*.npz")))[0])
    assert np.array_equal(dump["body_gid"], gid0[spatial_order(x0, gid0)])
    assert not np.array_equal(dump["body_gid"], np.sort(gid0))      # the test bed is not already in that order
    assert np.array_equal(sim.bodies.gid, np.sort(sim.bodies.gid))  # id order after the step


def test_the_state_keeps_the_step_order_and_the_api_shows_id_order():
    # the stepper does not sort its bodies back after a step (the next migration orders them from positions and
    # ids alone); Simulation.bodies, contact_force and stresslet() are in id order and belong together
    from relcp_mpi.simulation import Simulation
    sim = Simulation.from_deck(_bed("spatial"), comm=SELF)
    sim.run(2, writers=[])
    st, eng = sim.state, sim.engine
    assert not np.array_equal(st.bodies.gid, np.sort(st.bodies.gid))      # left in the step's Morton order
    raw_gid, raw_force = eng._step_gid.copy(), eng.contact_force.copy()
    raw_stress = eng.body_stresslet(raw_gid)
    work_of = dict(zip(st.bodies.gid.tolist(), st.work.tolist()))
    b = sim.bodies
    assert np.array_equal(b.gid, np.sort(raw_gid))
    assert st.bodies is b                                                # sorted once, kept sorted in the state
    assert dict(zip(st.bodies.gid.tolist(), st.work.tolist())) == work_of   # work weights moved with their bodies
    at = np.argsort(raw_gid)
    np.testing.assert_array_equal(sim.contact_force, raw_force[at])
    np.testing.assert_array_equal(sim.stresslet(), raw_stress[at])
    assert np.abs(sim.contact_force).max() > 0
    # ids the last step did not hold get zeros
    got = eng.body_contact_force(np.array([10 ** 9, int(b.gid[0])]))
    np.testing.assert_array_equal(got[0], 0.0)
    np.testing.assert_array_equal(got[1], raw_force[at][0])


def test_a_failed_step_leaves_the_bodies_in_id_order():
    # the pinched bed without line contacts: APGD fails on a grown LCP (no fallback), the exception propagates
    from relcp_mpi.simulation import Simulation
    from relcp_mpi.solver.lcp import SolverError
    sim = Simulation.from_deck(pinched_bed(False, max_iter=1500), comm=SELF)
    with pytest.raises(SolverError):
        sim.run(4, writers=[])
    assert np.array_equal(sim.bodies.gid, np.sort(sim.bodies.gid))


def test_same_physics_in_either_order():
    a, da = run_sim(_bed("spatial"), comm=SELF)
    b, db = run_sim(_bed("gid"), comm=SELF)
    assert [d["constraints"] for d in da] == [d["constraints"] for d in db]
    assert max(d["max_overlap"] for d in list(da) + list(db)) <= 1e-3
    for field, atol in (("x", 1e-5), ("q", 1e-6), ("contact_force", 1e-2)):
        ga, va = a.gather(field)
        gb, vb = b.gather(field)
        assert np.array_equal(ga, gb)
        if field == "contact_force":        # relative to the largest force of the bed
            atol *= max(1.0, float(np.abs(vb).max()))
        np.testing.assert_allclose(va, vb, atol=atol, err_msg=field)
    # per-body arrays between steps follow sim.bodies (id order): the same body gets the same stresslet
    np.testing.assert_allclose(a.stresslet(), b.stresslet(), rtol=1e-2, atol=1e-2 * np.abs(b.stresslet()).max())


def test_deck_key_is_validated_and_may_change_on_restart():
    raw = {"name": "t", "time": {"dt": 0.1, "steps": 1},
           "bodies": [{"shape": "sphere", "radius": 0.5, "position": [0, 0, 0]}]}
    assert validate(dict(raw))["parallel"]["body_order"] == "spatial"
    with pytest.raises(DeckError, match="parallel.body_order"):
        validate(dict(raw, parallel={"body_order": "hilbert"}))
    assert judge("parallel.body_order")[0] == "allowed"


@pytest.mark.mpi
def test_spatial_order_same_answer_on_any_rank_count(hang_guard):
    deck = _bed("spatial")
    ref, dref = run_sim(deck, comm=SELF)
    assert same_on_sub_communicators(deck, ref, dref) == []


def test_spatial_order_is_the_two_key_sort():
    """The key-only sort (no ties) and the two-key sort with ids (ties) give the two-key sort's permutation."""
    rng = np.random.default_rng(8)
    x = rng.uniform(0.0, 50.0, (3000, 3))
    gid = rng.permutation(3000) * 3 + 1
    assert np.array_equal(spatial_order(x, gid), np.lexsort((gid, morton_keys(x))))
    x[100:130] = x[7]                                  # a few bodies in one cell: ties broken by id
    assert np.array_equal(spatial_order(x, gid), np.lexsort((gid, morton_keys(x))))


@pytest.mark.parametrize("spread", [1, 1000])
def test_local_index_table_and_search(spread):
    """The engine's id -> local position lookup (a direct table for compact ids, else sort and search) against
    a dictionary, with absent ids below, inside and above the range."""
    from relcp_mpi.driver.engine import _local_index
    rng = np.random.default_rng(spread)
    gid = rng.choice(np.arange(5, 5 + 2000 * spread), 2000, replace=False).astype(np.int64)
    query = np.concatenate([rng.choice(gid, 500), rng.integers(0, 10 + 2000 * spread, 500), [-3, 10 ** 12]])
    where = {int(g): k for k, g in enumerate(gid)}
    expect = np.array([where.get(int(q), -1) for q in query])
    assert np.array_equal(_local_index(gid, query), expect)
    assert len(_local_index(gid[:0], query)) == len(query) and np.all(_local_index(gid[:0], query) == -1)
