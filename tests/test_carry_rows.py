"""Rows carried from the previous step (contact.carry_rows): level 0 of a step re-samples the material points of
the previous step's appended rod-rod rows as point-against-core rows (relcp_mpi.contact.line_contacts
.rod_point_rows).  Each such row must be a necessary condition of nonpenetration (its separation is never below
the pair's true smooth-surface separation, and it is the exact distance of the point it samples); a run with the
option keeps the overlap guarantee, needs no more recursion levels on a jammed bed, agrees across rank counts and
continues bit for bit from a checkpoint (the carried points are in the checkpoint's warm-start table).

Serial: .venv/bin/python -m pytest -q tests/test_carry_rows.py
MPI:    mpirun -n 2 tools/mpi_pytest.sh -q --with-mpi -m "mpi and not slow" tests/test_carry_rows.py
"""
import os

import numpy as np
import pytest
from mpi4py import MPI

from relcp_mpi.bodies.shapes import SPHEROCYLINDER
from relcp_mpi.config.deck import validate
from relcp_mpi.contact.line_contacts import N_PAIR_SLOTS, core_parameters, rod_point_rows
from relcp_mpi.geometry import bruteforce, quaternion
from relcp_mpi.geometry.contact import pair_snsd
from relcp_mpi.geometry.spherocylinder import closest_points_segments
from tests.helpers import run_sim
from tests.test_line_contacts_mpi import pinched_bed

WORLD, SELF = MPI.COMM_WORLD, MPI.COMM_SELF
HANG_TIMEOUT = 300


def _random_rod_pairs(rng, m):
    """m rod pairs (bodies 0..m-1 against m..2m-1), centres close enough that many cores cross or nearly touch."""
    kind = np.full(2 * m, SPHEROCYLINDER)
    shape = np.column_stack([rng.uniform(0.2, 0.6, 2 * m), rng.uniform(0.5, 3.0, 2 * m), np.zeros(2 * m)])
    X = rng.normal(size=(2 * m, 3)) * 0.8
    Q = quaternion.normalize(rng.normal(size=(2 * m, 4)))
    return kind, shape, X, Q, np.arange(m), np.arange(m, 2 * m)


def test_core_parameters_recover_the_kernels_core_points():
    rng = np.random.default_rng(11)
    kind, shape, X, Q, ia, ib = _random_rod_pairs(rng, 400)
    R = quaternion.to_matrix(Q)
    geo = pair_snsd(kind[ia], shape[ia], X[ia], Q[ia], kind[ib], shape[ib], X[ib], Q[ib])
    s, t, _, _ = closest_points_segments(X[ia], R[ia][:, :, 2], 0.5 * shape[ia, 1],
                                         X[ib], R[ib][:, :, 2], 0.5 * shape[ib, 1])
    s_i = core_parameters(kind, shape, X, R, ia, geo.p_i, geo.normal, 1.0)
    s_j = core_parameters(kind, shape, X, R, ib, geo.p_j, geo.normal, -1.0)
    # crossing cores (distance 0) have no unique closest pair; everywhere else the parameters are the kernel's
    apart = geo.sep > -shape[ia, 0] - shape[ib, 0] + 1e-6
    assert apart.sum() > 300
    assert np.allclose(s_i[apart], s[apart], atol=1e-9) and np.allclose(s_j[apart], t[apart], atol=1e-9)
    assert np.all(np.abs(s_i) <= 0.5 * shape[ia, 1]) and np.all(np.abs(s_j) <= 0.5 * shape[ib, 1])


def test_point_rows_are_necessary_conditions_and_exact_point_distances():
    rng = np.random.default_rng(5)
    m = 300
    kind, shape, X, Q, ia, ib = _random_rod_pairs(rng, m)
    R = quaternion.to_matrix(Q)
    h_i, h_j = 0.5 * shape[ia, 1], 0.5 * shape[ib, 1]
    # material points anywhere on the cores, a third of them end points (those give no row on that side)
    s_i = rng.uniform(-1, 1, m) * h_i
    s_j = rng.uniform(-1, 1, m) * h_j
    s_i[::3] = h_i[::3]
    s_j[::6] = -h_j[::6]
    pair, g = rod_point_rows(kind, shape, X, R, ia, ib, s_i, s_j)
    both_ends = (np.abs(s_i) >= h_i) & (np.abs(s_j) >= h_j)
    assert np.array_equal(pair, np.flatnonzero(~both_ends))
    geo = pair_snsd(kind[ia], shape[ia], X[ia], Q[ia], kind[ib], shape[ib], X[ib], Q[ib])
    assert np.all(g.sep >= geo.sep[pair] - 1e-12)
    assert np.allclose(np.linalg.norm(g.normal, axis=1), 1.0)
    assert np.allclose(np.einsum("ij,ij->i", g.normal, g.p_i - g.p_j), g.sep, atol=1e-12)
    on_i = np.abs(s_i[pair]) < h_i[pair]
    for k in rng.choice(len(pair), 30, replace=False):
        p = pair[k]
        bi = bruteforce.Body(kind[ia[p]], shape[ia[p]], X[ia[p]], Q[ia[p]])
        bj = bruteforce.Body(kind[ib[p]], shape[ib[p]], X[ib[p]], Q[ib[p]])
        radii = shape[ia[p], 0] + shape[ib[p], 0]
        # the row never cuts below the exact smooth-surface separation (an independent oracle) ...
        assert g.sep[k] >= bruteforce.core_distance(bi, bj) - radii - 1e-7
        # ... and is the exact distance of the material point it samples from the other core
        if on_i[k]:
            d = bruteforce._point_core_distance(bi.core(s_i[p])[None, :], bj)[0]
        else:
            d = bruteforce._point_core_distance(bj.core(s_j[p])[None, :], bi)[0]
        assert g.sep[k] == pytest.approx(d - radii, abs=1e-7)


def _bed(carry, steps=12, directory=None, checkpoint_every=0):
    """The jammed bed of tests/test_line_contacts_mpi.py (rods pinched between walls, twisted by torques): the
    recursion appends rod-rod rows in most steps, so rows are carried."""
    deck = pinched_bed(True)
    deck["contact"]["carry_rows"] = carry
    deck["time"]["steps"] = steps
    if directory is not None:
        deck["name"] = "bed"
        deck["output"].update(directory=directory, checkpoint_every=checkpoint_every, keep_checkpoints=10)
    return validate(deck)


def test_carried_rows_keep_the_overlap_guarantee_and_need_no_more_levels():
    runs = {c: run_sim(_bed(c), comm=SELF) for c in (False, True)}
    off, on = runs[False][1], runs[True][1]
    assert sum(d["carried_rows"] for d in on) > 0           # the option did carry rows
    for diags in (off, on):
        assert max(d["max_overlap"] for d in diags) < 1e-3
    assert sum(d["depth"] for d in on) <= sum(d["depth"] for d in off)
    # carried rows sit in the level-0 sub-contact range above the fixed slots, with keys unique in the table
    table = runs[True][0].engine._last_rows[0]
    keys = table.keys()
    assert len(np.unique(keys)) == len(keys)
    carried = (table.level == 0) & (table.sub >= N_PAIR_SLOTS)
    assert np.all(table.ib[carried] >= 0)


@pytest.mark.mpi
def test_carried_rows_same_answer_on_one_and_two_ranks(hang_guard):
    deck = _bed(True, steps=8)
    ref, dref = run_sim(deck, comm=SELF)
    sim, diags = run_sim(deck, comm=WORLD)
    assert sum(d["carried_rows"] for d in diags) > 0
    assert [d["constraints"] for d in diags] == [d["constraints"] for d in dref]
    assert [d["carried_rows"] for d in diags] == [d["carried_rows"] for d in dref]
    assert max(d["max_overlap"] for d in diags) < 1e-3
    g0, x0 = ref.gather()
    g1, x1 = sim.gather()
    assert np.array_equal(g0, g1) and np.allclose(x0, x1, atol=1e-5)


@pytest.mark.mpi
def test_restart_continues_carried_rows_bit_for_bit(shared_dir, hang_guard):
    """Jammed bed with carried rows: k steps, checkpoint, restart, N - k steps == N steps uninterrupted, bit for
    bit (the carried points are in the checkpoint); dropping them from the restarted state changes the run."""
    from relcp_mpi.io.checkpoint import read_checkpoint
    from relcp_mpi.simulation import Simulation
    N, k = 8, 4
    ref, _ = run_sim(_bed(True, N), comm=WORLD)
    want = ref.gather("x")
    d = os.path.join(shared_dir, "run")
    Simulation.from_deck(_bed(True, k, d, checkpoint_every=k), comm=WORLD).run()       # writes the checkpoint
    _, _, warm = read_checkpoint(os.path.join(d, f"bed_ckpt_{k:09d}.h5"), WORLD)
    assert WORLD.allreduce(int(np.count_nonzero(np.isfinite(warm["carry_si"]) | np.isfinite(warm["carry_sj"])))) > 0
    got = {}
    for drop in (False, True):
        sim = Simulation.from_checkpoint("latest", _bed(True, N, d), "", WORLD)
        if drop:
            keys, vals = sim.warm
            sim.warm = (keys, vals[:, :4])
        sim.run()
        got[drop] = sim.gather("x")
    assert np.array_equal(got[False][0], want[0]) and np.array_equal(got[False][1], want[1])
    assert not np.array_equal(got[True][1], want[1])


def test_deck_key_is_validated_and_may_change_on_restart():
    from relcp_mpi.config.deck import DeckError
    from relcp_mpi.io.deck_changes import judge
    raw = {"name": "t", "time": {"dt": 0.1, "steps": 1},
           "bodies": [{"shape": "sphere", "radius": 0.5, "position": [0, 0, 0]}]}
    assert validate(dict(raw))["contact"]["carry_rows"] is False
    with pytest.raises(DeckError, match="contact.carry_rows"):
        validate(dict(raw, contact={"carry_rows": "sometimes"}))
    # carried rows are necessary conditions: switching them on or off keeps the step's guarantee
    assert judge("contact.carry_rows")[0] == "allowed"
