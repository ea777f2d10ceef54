"""LCP dumps and infeasibility certificates (relcp_mpi.contact.lcp_dump, relcp_mpi.solver.certificate).

Infeasible / feasible verdicts are checked against an independent feasibility LP on the whole LCP
({g >= 0 : A g + q >= 0} with A = D^T (dt M) D formed densely here)."""
import os
import re

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from scipy.optimize import linprog

from relcp_mpi.contact.constraints import ConstraintTable, assemble_D
from relcp_mpi.contact.lcp_dump import gather_lcp, lcp_matrix, load_lcp, save_lcp
from relcp_mpi.solver.certificate import check_dump, describe, neighbourhood, search_certificate
from tests.helpers import make_deck, run_sim
from tests.test_constraints_mpi import _dense_D, _global_problem

DT = 0.05


def _col(n, r):
    n, r = np.asarray(n, float), np.asarray(r, float)
    return np.concatenate([n, np.cross(r, n)])


def _rod_blocks(N):
    """Mobility blocks of N free rods (positive definite, not isotropic)."""
    return np.tile(np.diag([1.0, 1.3, 0.7, 2.0, 2.5, 0.4]), (N, 1, 1))


def _pinch(a=0.5, b=0.3, R=0.5):
    """One rod (body 0) between a floor (wall 0, normal +z) and a ceiling (wall 1, normal -z): two floor rows
    at x = +-a (level 0) and two ceiling rows at y = +-b (appended at a trial configuration where the rod had
    turned about z).  Force and torque balance needs all four: the weighted contact points of the floor rows
    (on the x axis) and of the ceiling rows (on the y axis) must coincide, at the centre."""
    cols = [_col([0, 0, 1], [a, 0, -R]), _col([0, 0, 1], [-a, 0, -R]),
            _col([0, 0, -1], [0, b, R]), _col([0, 0, -1], [0, -b, R])]
    meta = dict(gid_i=np.zeros(4, np.int64), gid_j=np.array([-1, -1, -2, -2]), sub=np.array([0, 1, 0, 1]),
                level=np.array([0, 0, 3, 5]))
    return sp.csr_matrix(np.array(cols).T), meta


def _feasible_by_lp(D, q, blocks):
    """Independent: is {g >= 0 : A g + q >= 0} non-empty?  (dense A, HiGHS)"""
    M = np.zeros((D.shape[0], D.shape[0]))
    for b in range(len(blocks)):
        M[6 * b:6 * b + 6, 6 * b:6 * b + 6] = DT * blocks[b]
    Dd = D.toarray()
    A = Dd.T @ M @ Dd
    r = linprog(np.zeros(len(q)), A_ub=-A, b_ub=q, bounds=(0, None), method="highs")
    assert r.status in (0, 2)
    return r.status == 0


def _data(D, q, blocks, meta):
    return dict(D=D, q=np.asarray(q, float), gamma=np.zeros(len(q)), blocks=blocks, dt=DT,
                body_gid=np.arange(len(blocks)), sep0=np.asarray(q, float), **meta)


def test_pinched_rod_four_rows_infeasible():
    D, meta = _pinch()
    q = np.array([0.01, 0.01, -0.015, -0.016])        # total gap of the pinch -0.011 < 0
    blocks = _rod_blocks(1)
    assert not _feasible_by_lp(D, q, blocks)
    res = search_certificate(D, q, blocks, DT)
    assert res.infeasible and res.exact
    assert sorted(res.rows.tolist()) == [0, 1, 2, 3]   # no two rows alone cancel force and torque
    y = np.zeros(4)
    y[res.rows] = res.y
    assert np.all(y > 0) and q @ y < 0
    assert np.abs(D @ y).max() <= 1e-12 * np.abs(y).max()
    text = describe(res, _data(D, q, blocks, meta))
    assert text.startswith("infeasible, rows: 4 row(s)")
    assert "body 0 - wall 1 (sub 1, level 5" in text and "body 0 - wall 0 (sub 0, level 0" in text


def test_pinched_rod_with_positive_total_gap_is_feasible():
    D, meta = _pinch()
    q = np.array([-0.02, 0.01, 0.015, 0.0])          # pressed at one end, room at the ceiling
    blocks = _rod_blocks(1)
    assert _feasible_by_lp(D, q, blocks)
    res = search_certificate(D, q, blocks, DT)
    assert not res.infeasible
    assert describe(res, _data(D, q, blocks, meta)).startswith("no certificate found")


def test_random_lcps_agree_with_feasibility_lp():
    """Random rows on a chain of 3 rods and 2 walls: the checker finds an exact certificate exactly when the
    independent feasibility LP says infeasible."""
    rng = np.random.default_rng(7)
    blocks = _rod_blocks(3)
    seen = {True: 0, False: 0}
    for trial in range(40):
        cols = []
        for k in range(rng.integers(4, 10)):
            i = rng.integers(0, 3)
            r = np.array([rng.uniform(-0.6, 0.6), 0.0, 0.0])
            if rng.random() < 0.6:                         # wall row, floor or ceiling
                s = 1 if rng.random() < 0.5 else -1
                c = np.zeros(18)
                c[6 * i:6 * i + 6] = _col([0, 0, s], r + [0, 0, -0.5 * s])
            else:                                          # rod-rod row along x
                j = (i + 1) % 3
                c = np.zeros(18)
                c[6 * i:6 * i + 6] = _col([1, 0, 0], [-0.5, 0, r[0] * 0.1])
                c[6 * j:6 * j + 6] = -_col([1, 0, 0], [0.5, 0, r[0] * 0.1])
            cols.append(c)
        D = sp.csr_matrix(np.array(cols).T)
        q = rng.uniform(-0.03, 0.02, len(cols))
        feas = _feasible_by_lp(D, q, blocks)
        res = search_certificate(D, q, blocks, DT)
        assert res.infeasible == (not feas), trial
        if res.infeasible:
            assert res.exact
        seen[feas] += 1
    assert seen[True] >= 5 and seen[False] >= 5


def test_neighbourhood_search():
    """A pinched rod (body 0) at one end of a chain of 4 bodies: found from its own neighbourhood or from a
    neighbour with enough hops, not from the far end with hops = 0."""
    Dp, _ = _pinch()
    N = 4
    Dd = np.zeros((6 * N, 4 + 3))
    Dd[:6, :4] = Dp.toarray()
    for k in range(3):                                     # chain rows 0-1, 1-2, 2-3 (separated: q > 0)
        Dd[6 * k:6 * k + 6, 4 + k] = _col([1, 0, 0], [-0.5, 0, 0])
        Dd[6 * (k + 1):6 * (k + 1) + 6, 4 + k] = -_col([1, 0, 0], [0.5, 0, 0])
    D = sp.csr_matrix(Dd)
    q = np.array([0.01, 0.01, -0.015, -0.016, 0.1, 0.1, 0.1])
    blocks = _rod_blocks(N)
    assert neighbourhood(D, [3], hops=0).tolist() == [6]
    assert neighbourhood(D, [3], hops=1).tolist() == [5, 6]
    assert neighbourhood(D, [1], hops=1).tolist() == [0, 1, 2, 3, 4, 5, 6]
    data = _data(D, q, blocks, dict(gid_i=np.zeros(7, np.int64), gid_j=np.zeros(7, np.int64),
                                    sub=np.zeros(7, np.int64), level=np.zeros(7, np.int64)))
    assert check_dump(data, bodies=[0], hops=0).infeasible
    assert check_dump(data, bodies=[1], hops=1).infeasible
    assert not check_dump(data, bodies=[3], hops=0).infeasible
    data["gamma"] = np.array([0, 0, 5.0, 0, 0, 0, 0])     # default seeds: the largest multipliers
    assert check_dump(data, whole=False, top=1, hops=0).infeasible


def test_nearly_singular_candidate_gives_rigorous_bound():
    """Rows that almost cancel (ceiling rows slightly tilted): feasible, but only with large multipliers; the
    checker reports no certificate and a lower bound on sum(g) that a computed solution respects."""
    eps = 1e-4
    n_top = np.array([eps, 0.0, -1.0]) / np.hypot(eps, 1.0)
    cols = [_col([0, 0, 1], [0.4, 0, -0.5]), _col([0, 0, 1], [-0.4, 0, -0.5]),
            _col(n_top, [0.4, 0, 0.5]), _col(n_top, [-0.4, 0, 0.5])]
    D = sp.csr_matrix(np.array(cols).T)
    q = np.array([-0.01, -0.01, -0.01, -0.01])
    blocks = _rod_blocks(1)
    res = search_certificate(D, q, blocks, DT)
    assert not res.infeasible
    assert np.isfinite(res.bound) and res.bound > 1.0
    A = lcp_matrix(_data(D, q, blocks, {})).toarray()
    r = linprog(np.ones(4), A_ub=-A, b_ub=q, bounds=(0, None), method="highs")   # a feasible g of least sum
    assert r.status == 0 and r.x.sum() >= res.bound * (1 - 1e-9)


# ------------------------------------------------------------------------------------------------ dumps
def _distributed_table(comm):
    """The random constraints of tests/test_constraints_mpi on this communicator: (table, D, blocks (owned),
    owned gids, global references)."""
    P, r = comm.size, comm.rank
    N, C = 23, 41
    pi, pj, n, ri, rj = _global_problem(N, C)
    owners = np.arange(N) % max(P - 1, 1) + (1 if P > 1 else 0)   # rank 0 owns no body when P > 1
    starts = np.concatenate([[0], np.cumsum(np.bincount(owners, minlength=P))])
    order = np.argsort(owners, kind="stable")
    row_of = np.empty(N, np.int64)
    row_of[order] = np.arange(N)
    mine = np.arange(C)[np.arange(C) % P == r]
    local = np.arange(N)                                  # every body visible (owned + ghosts)
    qg = np.sin(np.arange(C) + 0.3)
    t = ConstraintTable()
    t.append(ia=pi[mine], ib=np.where(pj[mine] >= 0, pj[mine], -1), gid_i=pi[mine] + 100,
             gid_j=np.where(pj[mine] >= 0, pj[mine] + 100, -1), sub=mine % 3, normal=n[mine], r_i=ri[mine],
             r_j=rj[mine], gap_free=qg[mine], sep0=-qg[mine], level=mine % 4)
    counts = comm.allgather(len(t))
    D = assemble_D(t, row_of[local], starts, comm, int(sum(counts[:r])), C)
    owned = order[starts[r]:starts[r + 1]]
    blocks_g = np.array([np.diag(1.0 + 0.1 * np.arange(6)) + 0.05 * (g % 5) for g in range(N)])
    colperm = np.concatenate([np.arange(C)[np.arange(C) % P == p] for p in range(P)])
    ref = dict(Dd=_dense_D(N, pi, pj, n, ri, rj), order=order, colperm=colperm, q=qg, blocks=blocks_g)
    return t, D, blocks_g[owned], owned + 100, ref


@pytest.mark.mpi
def test_dump_round_trip(shared_dir):
    """gather -> save -> load reproduces D^T (dt M) D, q and the metadata (any rank count, rank 0 bodiless)."""
    from relcp_mpi.solver.operator import ContactOperator
    comm = MPI.COMM_WORLD
    t, D, blocks, owned_gid, ref = _distributed_table(comm)
    gamma = np.cos(np.arange(len(t)) + comm.rank)
    data = gather_lcp(comm, D, blocks, DT, t.gap_free, gamma, t, owned_gid, info={"step": 7})
    op = ContactOperator(D, DT * blocks)
    x = D.createVecRight()
    lo, hi = x.getOwnershipRange()
    x.getArray()[:] = np.cos(0.7 * np.arange(lo, hi))
    y = D.createVecRight()
    op.mult(x, y)
    Ay = np.concatenate(comm.allgather(y.getArray().copy()))
    path = os.path.join(shared_dir, "lcp.npz")
    if comm.rank == 0:
        save_lcp(path, data)
        back = load_lcp(path)
        Nb = len(ref["order"])
        rowperm = np.concatenate([np.arange(6 * g, 6 * g + 6) for g in ref["order"]])
        Dp = ref["Dd"][rowperm][:, ref["colperm"]]
        Mp = np.zeros((6 * Nb, 6 * Nb))
        for k, g in enumerate(ref["order"]):
            Mp[6 * k:6 * k + 6, 6 * k:6 * k + 6] = DT * ref["blocks"][g]
        A_ref = Dp.T @ Mp @ Dp
        A = lcp_matrix(back).toarray()
        assert np.allclose(A, A_ref, rtol=1e-13, atol=1e-13)
        assert np.allclose(A @ np.cos(0.7 * np.arange(len(Ay))), Ay, rtol=1e-12, atol=1e-12)
        assert np.array_equal(back["q"], ref["q"][ref["colperm"]])
        assert np.array_equal(back["body_gid"], ref["order"] + 100)
        assert np.array_equal(back["level"], ref["colperm"] % 4)
        assert np.array_equal(back["rank"], ref["colperm"] % comm.size)
        assert back["info"]["step"] == "7" and back["dt"] == DT
    else:
        assert data is None
    op.destroy()
    x.destroy()
    y.destroy()
    comm.Barrier()


def _sphere_squeeze_deck(**debug):
    """Two spheres of radius 0.5 between walls 0.9 apart: the start-of-step LCP is infeasible (floor and ceiling
    rows through a centre, both with gap -0.05).  On 2 ranks one rank may hold no body."""
    return make_deck(time={"dt": DT, "steps": 1},
                     walls=[{"point": [0, 0, -0.45], "normal": [0, 0, 1]},
                            {"point": [0, 0, 0.45], "normal": [0, 0, -1]}],
                     bodies=[{"shape": "sphere", "radius": 0.5, "position": [0, 0, 0]},
                             {"shape": "sphere", "radius": 0.5, "position": [3, 0, 0]}],
                     contact={"overlap_tol": 1e-3, "skin": 0.1, "initial_overlap_tol": 1.0},
                     solver={"tol": 1e-5, "max_iter": 300}, debug=debug)


@pytest.mark.mpi
def test_failed_solve_reports_certificate_and_dumps(shared_dir):
    from relcp_mpi.solver.lcp import SolverError
    d = os.path.join(shared_dir, "dumps")
    with pytest.raises(SolverError) as ei:
        run_sim(_sphere_squeeze_deck(dump_lcp=d), comm=MPI.COMM_WORLD)
    msg = str(ei.value)
    assert "LCP of step 1, level 0: infeasible, rows: 2 row(s)" in msg
    b = re.search(r"row \d+: body (\d) - wall 0", msg).group(1)        # either sphere is pinched
    assert f"body {b} - wall 1 (sub 0, level 0, sep0 -5.000e-02" in msg
    assert ei.value.lcp_dump == os.path.join(d, "lcp_step000001_level00_fail.npz")
    if MPI.COMM_WORLD.rank == 0:
        data = load_lcp(ei.value.lcp_dump)
        res = check_dump(data)
        assert res.infeasible and res.exact
        assert data["info"]["converged"] == "False"
    MPI.COMM_WORLD.Barrier()


def test_dump_always_gives_solved_lcps(tmp_path):
    """debug.dump_on: always -> one dump per solve; each dumped gamma solves its dumped LCP to the tolerance."""
    deck = make_deck(time={"dt": DT, "steps": 2}, walls=[{"point": [0, 0, 0], "normal": [0, 0, 1]}],
                     forces={"body_force": [0, 0, -1.0]},
                     generate=[{"shape": "sphere", "radius": 0.5, "count": 8, "orientation": "identity",
                                "region": {"lo": [-1, -1, 0.5], "hi": [1, 1, 2.6]}}],
                     contact={"overlap_tol": 1e-3, "skin": 0.2}, solver={"tol": 1e-6},
                     debug={"dump_lcp": str(tmp_path), "dump_on": "always", "check_on_fail": False})
    run_sim(deck, comm=MPI.COMM_SELF)
    files = sorted(os.listdir(tmp_path))
    assert files[0] == "lcp_step000001_level00.npz" and "lcp_step000002_level00.npz" in files
    for f in files:
        data = load_lcp(os.path.join(tmp_path, f))
        A = lcp_matrix(data)
        g = data["gamma"]
        assert len(g) > 0 and np.all(g >= 0)
        assert np.abs(np.minimum(g, A @ g + data["q"])).max() <= 1e-6 * 1.0001


def test_debug_deck_validation():
    from relcp_mpi.config.deck import DeckError
    with pytest.raises(DeckError) as ei:
        make_deck(bodies=[{"shape": "sphere", "radius": 0.5, "position": [0, 0, 0]}],
                  debug={"dump_on": "sometimes", "check_rows": 0, "bogus": 1})
    msg = str(ei.value)
    assert "debug.dump_on: must be one of ['fail', 'always']" in msg
    assert "debug.check_rows: must be > 0" in msg and "debug.bogus: unknown key" in msg
    with pytest.raises(DeckError, match="debug.dump_on: needs debug.dump_lcp"):
        make_deck(bodies=[{"shape": "sphere", "radius": 0.5, "position": [0, 0, 0]}], debug={"dump_on": "always"})


# ------------------------------------------------------------------------------------------------ early stop
def _pinch_problem(q):
    from tests.test_solver import contact_op, petsc_vec
    D, _ = _pinch()
    op, Dm = contact_op(D.toarray(), DT * _rod_blocks(1))
    qv = petsc_vec(np.asarray(q, float))
    x = qv.duplicate()
    x.set(0.0)
    return op, Dm, qv, x


@pytest.mark.parametrize("method", ["bbpgd", "apgd"])
def test_infeasible_solve_stops_early(method):
    """The pinched rod: the solver gives up after a few hundred iterations instead of max_iter, with the
    divergence bound in the reason; the last iterate's growth direction is the certificate's."""
    from relcp_mpi.solver.lcp import SolverError, solve_lcp
    op, Dm, qv, x = _pinch_problem([0.01, 0.01, -0.015, -0.016])
    with pytest.raises(SolverError) as ei:
        solve_lcp(op, qv, x, method=method, tol=1e-6, max_iter=20000)
    e = ei.value
    assert e.reason.startswith("diverging") and "every feasible point has sum(x) >=" in str(e)
    assert e.iterations <= 1000
    xs = x.getArray().copy()
    assert np.all(xs > 0) and xs.sum() > 1.0             # all four rows run off together
    for o in (op, Dm, qv, x):
        o.destroy()


@pytest.mark.parametrize("method", ["bbpgd", "apgd"])
def test_feasible_solve_unaffected_by_divergence_test(method):
    """A feasible pinch and a random semidefinite contact LCP: same iterates with the test on and off."""
    from relcp_mpi.solver.lcp import solve_lcp
    from tests.test_solver import contact_D, contact_op, petsc_vec, spd_blocks
    rng = np.random.default_rng(5)
    Dd = contact_D(5, 45, rng)
    op2, D2 = contact_op(Dd, spd_blocks(5, rng))
    q2 = petsc_vec(rng.uniform(-1, 1, 45))
    for op, qv in ((_pinch_problem([-0.02, 0.01, 0.015, 0.0])[0], _pinch_problem([-0.02, 0.01, 0.015, 0.0])[2]),
                   (op2, q2)):
        out = []
        for every in (100, 0):
            x = qv.duplicate()
            x.set(0.0)
            r = solve_lcp(op, qv, x, method=method, tol=1e-9, max_iter=50000, divergence_every=every)
            assert r.converged
            out.append((r.iterations, x.getArray().copy()))
        assert out[0][0] == out[1][0] and np.array_equal(out[0][1], out[1][1])


def test_lcpcheck_cli(tmp_path, capsys):
    """``relcp-mpi lcpcheck``: exit 0 and the rows for an infeasible dump, exit 4 for a feasible one."""
    from relcp_mpi.cli import main
    from relcp_mpi.solver.lcp import SolverError
    with pytest.raises(SolverError) as ei:
        run_sim(_sphere_squeeze_deck(dump_lcp=str(tmp_path), check_on_fail=False), comm=MPI.COMM_SELF)
    # check off: dump only (no verdict; the message names both the method and the fallback that failed)
    assert ei.value.lcp_report == "" and "infeasible, rows" not in str(ei.value)
    assert "the fallback 'ipm' failed too" in str(ei.value)
    path = ei.value.lcp_dump
    assert main(["lcpcheck", path]) == 0
    out = capsys.readouterr().out
    assert "4 rows, 2 bodies" in out and "infeasible, rows: 2 row(s)" in out and "- wall 1 (sub 0, level 0" in out
    data = load_lcp(path)
    data["q"] = np.abs(data["q"])                            # gaps opened: feasible (g = 0)
    feas = str(tmp_path / "feasible.npz")
    save_lcp(feas, data)
    assert main(["lcpcheck", feas, "--bodies", "0", "--hops", "0"]) == 4
    assert "no certificate found" in capsys.readouterr().out
