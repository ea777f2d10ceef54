"""Certified event-driven simulation of P spheres in d dimensions (seed 001, "Procedure").

:func:`simulate` runs the seed's loop with the exact provider of :mod:`relcp_mpi.events.provider`::

    t* = 0, E = 0, j = 0
    while t* < T:
        inspect every unordered pair (lexicographic; optionally split over MPI ranks) on [t* - w_prev, T]
        no possible zero (besides the certified just-processed segment-start root) -> complete
        earliest pair p0: must be transverse; ordering against the next pair; bracket [a, b] certified
        exact root tau = T and policy pre-impact -> complete with the pre-impact endpoint (no reset, no count)
        j >= B -> unresolved(budget);  j >= N_evt -> unresolved(event_count)
        a - b_prev < delta -> unresolved(separation)
        reset at U(b) (exact), optional dyadic rounding (its bound goes to eps_R)
        E <- L_R eta_ref + (L_R M- + M+) Delta + eps_R;  E > ledger_tol -> unresolved(ledger_tolerance)
        t* <- b, j <- j + 1
    complete (endpoint reset included)

Reason codes of ``unresolved``: ``grazing``, ``simultaneous``, ``ambiguous``, ``budget``, ``event_count``,
``separation``, ``endpoint_undecided``, ``ledger_tolerance``, ``stopped`` (``should_stop()`` returned a
signal number on some rank, e.g. SIGTERM/SIGUSR1: checked before every event, all ranks agree).  An
unresolved result carries the certified prefix: the segments and events accepted so far, ending at the last
reported reset time ``t_final``.

Everything is exact rational arithmetic (reported states are Fractions); floats appear only in output.
The result does not depend on the number of MPI ranks: each rank scans a contiguous slice of the
lexicographic pair list and reduces it to its two earliest possible zeros (exact surds, ties by pair
index); these are allgathered and merged, and every later step is computed identically on every rank.
"""
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cmp_to_key
from typing import Optional

from relcp_mpi.config.events import ENDPOINT_POLICIES

from .exact import QuadSurd, SQRT2_UP, round_dyadic, round_up_rel, sqrt_up, to_fraction
from .provider import (AMBIGUOUS, BUDGET, ENDPOINT, EVENT_COUNT, LEDGER, SEPARATION, SIMULTANEOUS, TRANSVERSE,
                       ExactProvider)

__all__ = ["Segment", "Event", "EventResult", "simulate", "COMPLETE", "UNRESOLVED"]

COMPLETE, UNRESOLVED = "complete", "unresolved"
STOPPED = "stopped"
POLICIES = ENDPOINT_POLICIES


@dataclass
class Segment:
    """Smooth segment starting at ``t0`` from the reported state ``(q, v)`` (exact) with aligned error
    bound ``E`` at ``t0``; it lasts until the next segment's ``t0`` (or ``t_final``)."""
    t0: Fraction
    q: list
    v: list
    E: Fraction


@dataclass
class Event:
    """One processed (or, for a pre-impact endpoint, pending) event.  Times are absolute."""
    index: int
    pair: tuple
    a: Fraction
    b: Fraction
    root_reported: object          # exact root of the reported guard (QuadSurd); the exact event time when E = 0
    exact: bool                    # a = b = tau certified
    nu: Fraction
    eps_obs: Fraction
    lag: Fraction                  # Delta
    eta_ref: Fraction
    L_R: Fraction
    M_minus: Fraction
    M_plus: Fraction
    eps_R: Fraction
    E_before: Fraction
    E_after: Fraction
    v_minus: tuple = ()            # (v_i, v_j) at U(b) before the reset
    v_plus: tuple = ()             # (v_i, v_j) after the reset
    impulse: tuple = ()            # impulse vector J n on sphere i (exact)
    processed: bool = True
    certs: dict = field(default_factory=dict)


@dataclass
class EventResult:
    status: str                    # "complete" | "unresolved"
    reason: Optional[str]
    message: str
    t_final: Fraction              # T (complete) or the end of the certified prefix (unresolved)
    q_final: list
    v_final: list
    error_final: Fraction          # certified bound on ||reported - reference|| at t_final
    events: list
    segments: list
    ledger: list                   # E after every processed event (ledger[0] = 0 at t = 0)
    certificates: list
    pending: Optional[Event] = None
    params: dict = field(default_factory=dict)
    stop_signal: int = 0           # the signal number that stopped the run (reason 'stopped'), else 0

    @property
    def n_events(self):
        return len(self.events)

    def state_at(self, t, field_g):
        """Reported state at time t inside the certified prefix (exact)."""
        t = to_fraction(t)
        if not (0 <= t <= self.t_final):
            raise ValueError(f"t = {t} outside the certified prefix [0, {self.t_final}]")
        seg = [s for s in self.segments if s.t0 <= t][-1]
        s = t - seg.t0
        h = s * s / 2
        q = [tuple(x + s * y + h * g for x, y, g in zip(qk, vk, field_g)) for qk, vk in zip(seg.q, seg.v)]
        v = [tuple(y + s * g for y, g in zip(vk, field_g)) for vk in seg.v]
        return q, v


def _dcmp(x, y):
    c = x.s.cmp(y.s)
    if c:
        return c
    return (x.idx > y.idx) - (x.idx < y.idx)


def _top2(items):
    return sorted(items, key=cmp_to_key(_dcmp))[:2]


def _as_matrix(e, P):
    if isinstance(e, (list, tuple)):
        if len(e) != P or any(not isinstance(row, (list, tuple)) or len(row) != P for row in e):
            raise ValueError(f"restitution: expected a scalar or a {P} x {P} matrix")
        M = [[to_fraction(x, f"restitution[{i}][{j}]") for j, x in enumerate(row)] for i, row in enumerate(e)]
        for i in range(P):
            for j in range(P):
                if i != j and M[i][j] != M[j][i]:
                    raise ValueError(f"restitution: matrix must be symmetric, [{i}][{j}] != [{j}][{i}]")
    else:
        x = to_fraction(e, "restitution")
        M = [[x] * P for _ in range(P)]
    for i in range(P):
        for j in range(P):
            if i != j and not (0 <= M[i][j] <= 1):
                raise ValueError(f"restitution[{i}][{j}] = {M[i][j]} outside [0, 1]")
    return M


def _vecs(x, name, P=None, d=None):
    if not isinstance(x, (list, tuple)) and not hasattr(x, "tolist"):
        raise ValueError(f"{name}: expected a list of vectors")
    x = x.tolist() if hasattr(x, "tolist") else x
    out = []
    for k, row in enumerate(x):
        if not isinstance(row, (list, tuple)):
            raise ValueError(f"{name}[{k}]: expected a vector, got {row!r}")
        out.append(tuple(to_fraction(c, f"{name}[{k}]") for c in row))
    if P is not None and len(out) != P:
        raise ValueError(f"{name}: expected {P} vectors, got {len(out)}")
    dims = {len(r) for r in out}
    if len(dims) != 1 or (d is not None and dims != {d}):
        raise ValueError(f"{name}: all vectors must have the same dimension {d if d else ''}")
    return out


def simulate(positions, velocities, masses, radii, restitution, T, *, eps_time, eps_guard, delta, n_evt,
             budget, endpoint_policy="include", field=None, round_bits=None, ledger_tol=None, bits=64, grid_bits=None,
             max_refine=200, comm=None, should_stop=None):
    """Certified event-driven simulation (see the module docstring).

    positions, velocities: P vectors of length d (exact numbers: int, Fraction, "p/q", decimal strings;
    floats are read by their decimal repr); masses, radii: P positive numbers; restitution: scalar or
    P x P symmetric matrix in [0, 1]; T > 0 horizon; eps_time > 0 bracket width tolerance; eps_guard > 0
    guard-residual tolerance; delta > 0 event separation; n_evt certified event-count bound; budget event
    budget B; endpoint_policy "include" | "pre-impact"; field: uniform acceleration (length d, default 0);
    round_bits: round every reported post-reset state to the grid 2**-round_bits (bound added to eps_R);
    ledger_tol: optional bound on the ledger E; bits: precision of rational sqrt/exp bounds; grid_bits:
    minimum bits of the dyadic bracket grid (finer brackets keep the ledger small; default from eps_time);
    comm: optional mpi4py communicator to split the pair inspection; should_stop: optional callable returning
    a nonzero signal number when the run must stop (checked before every event on every rank; the ranks
    agree through the event loop's allgather).  Returns an :class:`EventResult`."""
    q = _vecs(positions, "positions")
    P = len(q)
    if P < 2:
        raise ValueError(f"positions: need P >= 2 spheres, got {P}")
    d = len(q[0])
    if d < 1:
        raise ValueError("positions: dimension must be >= 1")
    v = _vecs(velocities, "velocities", P, d)
    masses = [to_fraction(m, f"masses[{k}]") for k, m in enumerate(masses)]
    radii = [to_fraction(r, f"radii[{k}]") for k, r in enumerate(radii)]
    if len(masses) != P or len(radii) != P:
        raise ValueError(f"masses and radii need {P} entries each")
    for k in range(P):
        if masses[k] <= 0:
            raise ValueError(f"masses[{k}] = {masses[k]} must be > 0")
        if radii[k] <= 0:
            raise ValueError(f"radii[{k}] = {radii[k]} must be > 0")
    E_mat = _as_matrix(restitution, P)
    T = to_fraction(T, "T")
    eps_time = to_fraction(eps_time, "eps_time")
    eps_guard = to_fraction(eps_guard, "eps_guard")
    delta = to_fraction(delta, "delta")
    for nm, val in (("T", T), ("eps_time", eps_time), ("eps_guard", eps_guard), ("delta", delta)):
        if val <= 0:
            raise ValueError(f"{nm} must be > 0, got {val}")
    for nm, val in (("n_evt", n_evt), ("budget", budget)):
        if isinstance(val, bool) or not isinstance(val, int) or val < 0:
            raise ValueError(f"{nm} must be an integer >= 0, got {val!r}")
    if endpoint_policy not in POLICIES:
        raise ValueError(f"endpoint_policy must be one of {POLICIES}, got {endpoint_policy!r}")
    g = [Fraction(0)] * d if field is None else [to_fraction(x, "field") for x in field]
    if len(g) != d:
        raise ValueError(f"field: expected {d} components, got {len(g)}")
    if round_bits is not None and (isinstance(round_bits, bool) or not isinstance(round_bits, int) or round_bits < 1):
        raise ValueError(f"round_bits must be a positive integer or None, got {round_bits!r}")
    if grid_bits is not None and (isinstance(grid_bits, bool) or not isinstance(grid_bits, int) or grid_bits < 1):
        raise ValueError(f"grid_bits must be a positive integer or None, got {grid_bits!r}")
    if isinstance(bits, bool) or not isinstance(bits, int) or bits < 16:
        raise ValueError(f"bits must be an integer >= 16, got {bits!r}")
    if ledger_tol is not None:
        ledger_tol = to_fraction(ledger_tol, "ledger_tol")
        if ledger_tol < 0:
            raise ValueError("ledger_tol must be >= 0")

    prov = ExactProvider(masses, radii, E_mat, g, bits=bits)
    npairs = len(prov.pairs)
    # the exact reference initial state must be nonpenetrating
    for idx in range(npairs):
        A, B, C, R = prov.coeffs(q, v, idx)
        if C < R * R:
            i, j = prov.pairs[idx]
            raise ValueError(f"initial state penetrates: pair ({i}, {j}) has ||q_i - q_j||^2 = {C} < (r_i + r_j)^2 = {R * R}")

    if comm is not None and comm.Get_size() > 1:
        rank, size = comm.Get_rank(), comm.Get_size()
        my_range = range(rank * npairs // size, (rank + 1) * npairs // size)
    else:
        comm = None
        my_range = range(npairs)

    params = dict(P=P, d=d, T=T, eps_time=eps_time, eps_guard=eps_guard, delta=delta, n_evt=n_evt,
                  budget=budget, endpoint_policy=endpoint_policy, field=g, round_bits=round_bits,
                  ledger_tol=ledger_tol, grid_bits=grid_bits, bits=bits, masses=masses, radii=radii)
    t = Fraction(0)
    E = Fraction(0)
    j = 0
    last = None
    w_prev = Fraction(0)
    b_prev = None
    events, certificates = [], []
    segments = [Segment(t, q, v, E)]
    ledger = [E]
    grid = prov.grid_bits(eps_time, delta, grid_bits)

    def finish(status, reason, message, tq=None, pending=None):
        if tq is None:
            tq = (t, q, v, E)
        return EventResult(status, reason, message, tq[0], tq[1], tq[2], tq[3], events, segments, ledger,
                           certificates, pending, params)

    while t < T:
        S = T - t
        s_min = -w_prev
        eta_seg = prov.eta(E, S + w_prev)
        c = round_up_rel(SQRT2_UP * eta_seg, bits) if eta_seg else Fraction(0)
        local = _top2(prov.scan(q, v, c, s_min, S, my_range, skip=last))
        stop = int(should_stop()) if should_stop is not None else 0
        if comm is not None:
            parts = comm.allgather((local, stop))
            gathered = [dz for part, _ in parts for dz in part]
            stop = max(s for _, s in parts)
        else:
            gathered = local
        if stop:
            res = finish(UNRESOLVED, STOPPED, f"stopped by signal {stop} at t = {t} ({float(t):.6g}) before "
                                              f"event {j}: the certified prefix ends there")
            res.stop_signal = stop
            return res
        seg_cert = {"t0": t, "eta_seg": eta_seg, "c": c, "window": (t + s_min, T)}
        if last is not None:
            sd, scert = prov.certify_start(q, v, last, c, s_min, S, grid)
            seg_cert["start_root"] = {"pair": prov.pairs[last], **scert}
            if sd is not None:
                gathered.append(sd)
        top = _top2(gathered)
        if not top:
            seg_cert["no_event"] = True
            certificates.append(seg_cert)
            qT, vT = prov.flow(q, v, S)
            return finish(COMPLETE, None, "no further event through T: nonpenetration certified",
                          (T, qT, vT, prov.eta(E, S)))
        p0 = top[0]
        nxt = top[1] if len(top) > 1 else None
        pi = prov.pairs[p0.idx]
        seg_cert["candidate"] = {"pair": pi, "kind": p0.kind, "first_possible_zero": t + p0.s}
        if nxt is not None:
            seg_cert["ordering"] = {"next_pair": prov.pairs[nxt.idx], "next_kind": nxt.kind,
                                    "next_first_possible_zero": t + nxt.s}
        certificates.append(seg_cert)
        if p0.kind != TRANSVERSE:
            return finish(UNRESOLVED, p0.kind, f"pair {pi} at t ~ {float(t + p0.s):.6g}: {p0.detail}")
        if p0.s < 0 or (p0.s == 0 and t > 0 and c > 0):
            return finish(UNRESOLVED, SEPARATION, f"pair {pi}: possible event inside the previous bracket")
        if nxt is not None and nxt.s <= p0.s_lo:
            if c == 0 and nxt.s == p0.s:
                return finish(UNRESOLVED, SIMULTANEOUS,
                              f"pairs {pi} and {prov.pairs[nxt.idx]} reach zero simultaneously at t = {t + p0.s}")
            return finish(UNRESOLVED, AMBIGUOUS,
                          f"pairs {pi} and {prov.pairs[nxt.idx]} cannot be ordered (overlapping uncertainty)")
        if p0.s_lo > S:
            return finish(UNRESOLVED, ENDPOINT, f"pair {pi}: event may lie at or beyond T; endpoint undecided")
        br, reason, msg = prov.bracket(q, v, p0, nxt, c, S, eps_time, delta, eps_guard, max_refine, grid_bits)
        if br is None:
            return finish(UNRESOLVED, reason, f"pair {pi}: {msg}")
        a_abs, b_abs = t + br.a, t + br.b
        A, B, C, R = prov.coeffs(q, v, p0.idx)
        disc0 = B * B - A * (C - R * R)
        root = QuadSurd(-B / A, Fraction(-1) / A, disc0) + t
        qb, vb = prov.flow(q, v, br.b)
        i, jj = pi
        ev_common = dict(pair=pi, a=a_abs, b=b_abs, root_reported=root, exact=br.exact_root, nu=br.nu,
                         eps_obs=br.eps_obs)
        if br.exact_root and b_abs == T and endpoint_policy == "pre-impact":
            pend = Event(j, lag=Fraction(0), eta_ref=Fraction(0), L_R=Fraction(0), M_minus=Fraction(0),
                         M_plus=Fraction(0), eps_R=Fraction(0), E_before=E, E_after=E,
                         v_minus=(vb[i], vb[jj]), processed=False, **ev_common)
            return finish(COMPLETE, None, "exact event at T reported pre-impact (policy pre-impact)",
                          (T, qb, vb, prov.eta(E, S)), pending=pend)
        if j >= budget:
            return finish(UNRESOLVED, BUDGET, f"event budget B = {budget} exhausted before pair {pi} at t ~ {float(b_abs):.6g}")
        if j >= n_evt:
            return finish(UNRESOLVED, EVENT_COUNT, f"event-count bound N_evt = {n_evt} reached before pair {pi}")
        if b_prev is not None and a_abs - b_prev < delta:
            return finish(UNRESOLVED, SEPARATION,
                          f"pair {pi}: separation from the previous event not certified >= delta "
                          f"(a - b_prev = {float(a_abs - b_prev):.3e})")
        # ledger terms
        eta_b = prov.eta(E, br.b)
        c_b = round_up_rel(SQRT2_UP * eta_b, bits) if eta_b else Fraction(0)
        lag = Fraction(0) if br.a == br.b else min(br.b - br.a, (c_b + br.eps_obs) / br.nu)
        M_minus, M_plus, L_R = prov.ledger_terms(v, p0.idx, br, eta_b, c_b)
        vnew, Jn = prov.reset(qb, vb, p0.idx)
        qnew = qb
        eps_R = Fraction(0)
        if round_bits is not None:
            qr = [tuple(round_dyadic(x, round_bits) for x in row) for row in qnew]
            vr = [tuple(round_dyadic(x, round_bits) for x in row) for row in vnew]
            err2 = sum((x - y) ** 2 for r1, r2 in zip(qr, qnew) for x, y in zip(r1, r2))
            err2 += sum((x - y) ** 2 for r1, r2 in zip(vr, vnew) for x, y in zip(r1, r2))
            eps_R = sqrt_up(err2, bits)
            qnew, vnew = qr, vr
        E_new = L_R * eta_b + (L_R * M_minus + M_plus) * lag + eps_R
        if E_new:
            E_new = round_up_rel(E_new, bits)
        ev = Event(j, lag=lag, eta_ref=eta_b, L_R=L_R, M_minus=M_minus, M_plus=M_plus, eps_R=eps_R,
                   E_before=E, E_after=E_new, v_minus=(vb[i], vb[jj]), v_plus=(vnew[i], vnew[jj]),
                   impulse=Jn, certs={"sigma": br.sigma, "V": br.V, "guard_sq_a": br.guard_sq_a,
                                      "guard_sq_b": br.guard_sq_b, "grid_bits": br.grid_bits, "c": c},
                   **ev_common)
        if ledger_tol is not None and E_new > ledger_tol:
            return finish(UNRESOLVED, LEDGER,
                          f"ledger E = {float(E_new):.3e} after pair {pi} exceeds ledger_tol = {float(ledger_tol):.3e}",
                          pending=ev)
        events.append(ev)
        j += 1
        t = b_abs
        q, v, E = qnew, vnew, E_new
        last = p0.idx
        w_prev = br.b - br.a
        b_prev = b_abs
        segments.append(Segment(t, q, v, E))
        ledger.append(E)
    return finish(COMPLETE, None, "horizon reached with the endpoint reset included")
