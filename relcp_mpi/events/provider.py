"""Exact certificate provider for spheres under free flight or a uniform constant field (seed 001, items 1-5).

Smooth mode: ``q_k' = v_k, v_k' = g`` (the same ``g`` for every sphere).  From a reported rational state at
the segment start ``t*`` the reconstruction ``U`` is the exact polynomial flow, so ``eta_loc = 0`` and
``eta_ref = e^{L H} E`` with ``L = 1`` (the field ``(v, g)`` has Jacobian ``[[0, I], [0, 0]]``, norm 1);
``e^{H}`` is replaced by the certified rational upper bound :func:`~relcp_mpi.events.exact.exp_up`.

Pair guards.  The field cancels in relative motion, so for a pair with ``d0 = q_i - q_j``, ``w = v_i - v_j``
at ``t*`` (local time ``s = t - t*``) ``N(s) = ||d0 + s w||^2 = A s^2 + 2 B s + C`` with rational
``A = w.w, B = d0.w, C = d0.d0``, and ``sign(gamma) = sign(N - R^2)`` (``R = r_i + r_j``).  The reference
guard satisfies ``|gamma_ref - gamma_rep| <= sqrt(2) eta`` (guard bound); with ``c >= sqrt(2) eta`` (a
rational upper bound) every enclosure test ``gamma_rep(s) - c > 0`` is the exact rational/surd test
``N(s) > (R + c)^2``.  Levels ``R + c`` and ``R - c`` have roots in ``Q(sqrt(Disc))`` (QuadSurds).

Per pair the scan returns the first time in the window ``[s_min, S]`` at which the reference guard may
vanish (``s_min = -(b - a)`` of the previous bracket, so the window also covers the reference's post-reset
path inside the previous bracket), classified as

* ``transverse`` -- the enclosure crosses ``R + c`` and the reported guard reaches ``R - c``: a candidate
  bracket ``[a, b]`` with ``a < s_hi`` (root of level ``R + c``) and ``b > s_lo`` (root of level ``R - c``)
  certifies ``gamma_ref(a) > 0 > gamma_ref(b)``;
* ``grazing`` -- a tangency (zero discriminant), a touching pair that is not approaching, or a dip into the
  uncertainty band that never certainly crosses zero;
* ``ambiguous`` -- the enclosure already contains zero at the window start (not the just-processed pair);
* ``ledger_tolerance`` -- ``c >= R`` (the ledger swamps the radius).

The just-processed pair (its segment-start root may be ignored once) is certified outgoing instead: the
reference guard is 0 at the reference reset time ``tau_prev`` inside the previous bracket and its derivative
is certified positive on ``[s_min, t1]`` (derivative enclosure: ``|gamma'_ref - gamma'_rep| <=
sqrt(2) eta (1 + 2 V / sigma)`` from the guard and normal bounds), after which ``N > (R + c)^2``.  In exact
mode (``c = 0`` and exact contact at ``t*``) this is ``B > 0``.  Anything else -- in particular the zero
outgoing normal speed left by ``e = 0`` -- is ``grazing`` (unresolved).

Brackets (:meth:`ExactProvider.bracket`): on the dyadic grid ``2**-k`` (``k`` from ``eps_time`` and
``delta``, refined until every test passes), ``a = floor(s_hi)``, ``b = ceil(s_lo)`` with strictness; when
``c = 0`` and the root is rational ``a = b = root``.  Certified on the whole bracket: ``N(a) > (R + c)^2``,
``N(b) < (R - c)^2`` (sign change), ``gamma'_ref <= -nu < 0`` with
``nu = -(B + bA)/sqrt_up(N(a)) - c (1 + 2 V/sigma)``, ``sigma = sqrt_down(N(b)) - c > 0``,
``eps_obs = (R^2 - N(b)) / (R + sqrt_down(N(b))) <= eps_guard``, ``b - a <= eps_time``, ``b - a < delta/3``,
``b <= S`` and ``b <`` the next pair's first possible zero (ordering certificate).
"""
from dataclasses import dataclass, field
from fractions import Fraction
import math
from typing import Optional

from .exact import QuadSurd, SQRT2_UP, exp_up, sqrt_down, sqrt_up
from .impulse import pair_reset

__all__ = ["Danger", "Bracket", "ExactProvider", "TRANSVERSE", "GRAZING", "AMBIGUOUS", "LEDGER",
           "SIMULTANEOUS", "BUDGET", "EVENT_COUNT", "SEPARATION", "ENDPOINT", "REASONS"]

TRANSVERSE = "transverse"
GRAZING = "grazing"
AMBIGUOUS = "ambiguous"
SIMULTANEOUS = "simultaneous"
BUDGET = "budget"
EVENT_COUNT = "event_count"
SEPARATION = "separation"
ENDPOINT = "endpoint_undecided"
LEDGER = "ledger_tolerance"
REASONS = (GRAZING, SIMULTANEOUS, AMBIGUOUS, BUDGET, EVENT_COUNT, SEPARATION, ENDPOINT, LEDGER)


def _dot(a, b):
    return sum(x * y for x, y in zip(a, b))


@dataclass
class Danger:
    """First possible zero of one pair's reference guard in the inspection window (local time ``s``)."""
    s: QuadSurd
    idx: int
    kind: str
    s_lo: Optional[QuadSurd] = None
    detail: str = ""


@dataclass
class Bracket:
    """A certified event bracket (local times relative to the segment start)."""
    a: Fraction
    b: Fraction
    nu: Fraction                 # certified -gamma'_ref >= nu > 0 on [a, b]
    eps_obs: Fraction            # certified |gamma(b, U(b))|
    sigma: Fraction              # pair distance >= sigma on the bracket (reported and reference)
    V: Fraction                  # reported relative speed upper bound
    guard_sq_a: Fraction         # N(a) - (R + c)^2 > 0  (sign-change certificate, or 0 when a = b)
    guard_sq_b: Fraction         # N(b) - (R - c)^2 < 0
    exact_root: bool             # a = b is the exact root (c = 0, rational root)
    grid_bits: int
    certs: dict = field(default_factory=dict)


class ExactProvider:
    """Exact certificates for ``P`` spheres in ``d`` dimensions under a uniform field ``g``.

    masses, radii: sequences of Fractions; restitution: ``P x P`` nested list of Fractions (symmetric);
    field: length-``d`` sequence of Fractions; bits: precision of the rational sqrt / exp bounds."""

    def __init__(self, masses, radii, restitution, field, bits=64):
        self.masses = list(masses)
        self.radii = list(radii)
        self.e = restitution
        self.g = list(field)
        self.P = len(self.masses)
        self.dim = len(self.g)
        self.bits = bits
        self.pairs = [(i, j) for i in range(self.P) for j in range(i + 1, self.P)]
        self.g2 = _dot(self.g, self.g)

    # ---------------- smooth flow ----------------
    def flow(self, q, v, s):
        """Exact state after local time ``s`` (may be negative): ``q + s v + s^2 g / 2``, ``v + s g``."""
        s = Fraction(s)
        h = s * s / 2
        g = self.g
        qn = [tuple(x + s * y + h * gg for x, y, gg in zip(qk, vk, g)) for qk, vk in zip(q, v)]
        vn = [tuple(y + s * gg for y, gg in zip(vk, g)) for vk in v]
        return qn, vn

    def coeffs(self, q, v, idx):
        i, j = self.pairs[idx]
        d0 = [a - b for a, b in zip(q[i], q[j])]
        w = [a - b for a, b in zip(v[i], v[j])]
        return _dot(w, w), _dot(d0, w), _dot(d0, d0), self.radii[i] + self.radii[j]

    @staticmethod
    def _N(A, B, C, s):
        return A * s * s + 2 * B * s + C

    # ---------------- pair scan ----------------
    def scan_pair(self, q, v, idx, c, s_min, S):
        """Danger of one (not just-processed) pair on ``[s_min, S]``, or None when certified safe."""
        A, B, C, R = self.coeffs(q, v, idx)
        rho = R + c
        f_min = self._N(A, B, C, s_min) - rho * rho
        if f_min <= 0:
            if c == 0 and s_min == 0 and f_min == 0:
                if B < 0:      # exact touching with approach: an enabled incoming root at the start
                    z = QuadSurd(0)
                    return Danger(z, idx, TRANSVERSE, z, "exact contact with approach at segment start")
                return Danger(QuadSurd(s_min), idx, GRAZING, None,
                              "touching at segment start without approach (zero-speed zero)")
            if c == 0:
                return Danger(QuadSurd(s_min), idx, AMBIGUOUS, None, "penetrating at segment start")
            return Danger(QuadSurd(s_min), idx, AMBIGUOUS, None,
                          "guard enclosure contains zero at segment start")
        if A == 0:
            return None
        disc = B * B - A * (C - rho * rho)
        if disc < 0:
            return None
        if disc == 0:
            sv = -B / A
            if s_min < sv <= S:
                return Danger(QuadSurd(sv), idx, GRAZING, None, "tangency of the guard enclosure (zero discriminant)")
            return None
        s1 = QuadSurd(-B / A, Fraction(-1) / A, disc)
        s2 = QuadSurd(-B / A, Fraction(1) / A, disc)
        if s2 <= s_min or s1 > S:
            return None
        if c >= R:
            return Danger(s1, idx, LEDGER, None, "ledger inflation exceeds the contact radius")
        rl = R - c
        disc_lo = B * B - A * (C - rl * rl)
        if disc_lo <= 0:
            return Danger(s1, idx, GRAZING, None,
                          "grazing: zero discriminant" if c == 0 else "possible grazing within the ledger band")
        s_lo = QuadSurd(-B / A, Fraction(-1) / A, disc_lo)
        return Danger(s1, idx, TRANSVERSE, s_lo, "")

    def scan(self, q, v, c, s_min, S, idx_range, skip=None):
        """Scan pairs ``idx_range`` (an iterable of pair indices, lexicographic order), skipping ``skip``."""
        out = []
        for idx in idx_range:
            if idx == skip:
                continue
            dz = self.scan_pair(q, v, idx, c, s_min, S)
            if dz is not None:
                out.append(dz)
        return out

    # ---------------- just-processed pair ----------------
    def certify_start(self, q, v, idx, c, s_min, S, grid_bits):
        """Certify the just-processed pair's segment-start root (ignored once).  Returns (Danger or None,
        certificate dict)."""
        A, B, C, R = self.coeffs(q, v, idx)
        N0 = C
        if c == 0 and s_min == 0 and N0 == R * R:
            if B > 0:
                return None, {"mode": "exact", "B": B}
            return (Danger(QuadSurd(0), idx, GRAZING, None,
                           "zero outgoing normal speed after the reset (e = 0 or grazing): no isolated transverse event"),
                    {"mode": "exact", "B": B})
        Bmin = B + s_min * A
        if Bmin <= 0:
            return (Danger(QuadSurd(s_min), idx, GRAZING, None, "outgoing speed not certified after the reset"),
                    {"mode": "band", "B_min": Bmin})
        rho = R + c
        if self._N(A, B, C, s_min) > rho * rho:
            return None, {"mode": "band", "B_min": Bmin, "t1": s_min}
        disc = B * B - A * (C - rho * rho)          # > 0 here
        s2 = QuadSurd(-B / A, Fraction(1) / A, disc)
        k = grid_bits
        t1 = s2.ceil_grid(k)
        if t1 == s2:
            t1 += Fraction(1, 1 << k)
        t1 = min(t1, S)
        Nmin = self._N(A, B, C, s_min)
        Nmax = self._N(A, B, C, t1)
        nu_plus = Bmin / sqrt_up(Nmax, self.bits)
        sigma = sqrt_down(Nmin, self.bits) - c
        V = sqrt_up(A, self.bits)
        cert = {"mode": "band", "B_min": Bmin, "t1": t1, "nu_plus": nu_plus, "sigma": sigma}
        if sigma <= 0 or nu_plus <= c * (1 + 2 * V / sigma):
            return (Danger(QuadSurd(s_min), idx, GRAZING, None,
                           "outgoing derivative not certified positive within the ledger band"), cert)
        return None, cert

    # ---------------- brackets ----------------
    def grid_bits(self, eps_time, delta, min_bits=None):
        """Bits of the dyadic bracket grid: enough for ``b - a <= eps_time`` and ``< delta/3`` with margin,
        and at least ``min_bits`` (a finer grid keeps the lag Delta, hence the ledger, small)."""
        lim = min(eps_time, delta / 3)
        k = max(1, math.ceil(math.log2(4 / lim)) + 1) if lim < 4 else 1
        return max(k, min_bits or 0)

    def bracket(self, q, v, dz, nxt, c, S, eps_time, delta, eps_guard, max_refine=200, min_bits=None):
        """Certified bracket for the transverse candidate ``dz`` (next candidate ``nxt`` or None).  Returns
        ``(Bracket, None, "")`` or ``(None, reason, message)``."""
        A, B, C, R = self.coeffs(q, v, dz.idx)
        s_hi, s_lo = dz.s, dz.s_lo
        k0 = self.grid_bits(eps_time, delta, min_bits)
        if c == 0 and s_hi.is_rational():
            a = s_hi.a
            if a > S:
                return None, ENDPOINT, "root beyond the horizon"
            num = B + a * A
            # N(a) = R^2 exactly
            nu = -num / R
            cert = {"root": a}
            return Bracket(a, a, nu, Fraction(0), R, sqrt_up(A, self.bits), Fraction(0), Fraction(0), True, 0,
                           cert), None, ""
        if c > 0:
            if c >= eps_guard:
                return None, LEDGER, f"guard inflation sqrt(2) eta = {float(c):.3e} >= eps_guard"
            if s_lo >= s_hi + eps_time or s_lo >= s_hi + delta / 3:
                return None, LEDGER, "ledger band forces a bracket wider than eps_time or delta/3"
            if s_lo >= S:
                return None, ENDPOINT, "event may lie at or beyond the horizon: endpoint undecided"
        reason, msg = LEDGER, "bracket refinement exhausted"
        for k in range(k0, k0 + max_refine):
            h = Fraction(1, 1 << k)
            a = s_hi.floor_grid(k)
            if a == s_hi:
                a -= h
            a = max(a, Fraction(0))
            b = s_lo.ceil_grid(k)
            if b == s_lo:
                b += h
            if b > S:
                reason, msg = ENDPOINT, "bracket end beyond the horizon"
                continue
            if b - a > eps_time or 3 * (b - a) >= delta:
                reason, msg = LEDGER, "bracket too wide"
                continue
            if nxt is not None and nxt.s <= b:
                reason, msg = AMBIGUOUS, "ordering against the next pair not certified"
                continue
            num_b = B + b * A
            if num_b >= 0:
                reason, msg = GRAZING, "derivative not negative on the bracket"
                continue
            Na, Nb = self._N(A, B, C, a), self._N(A, B, C, b)
            ga = Na - (R + c) ** 2
            gb = Nb - (R - c) ** 2
            if not (ga > 0 and gb < 0):
                reason, msg = AMBIGUOUS, "sign change not certified"
                continue
            V = sqrt_up(A, self.bits)
            sigma = sqrt_down(Nb, self.bits) - c
            if sigma <= 0:
                reason, msg = GRAZING, "pair distance bound sigma not positive"
                continue
            nu = -num_b / sqrt_up(Na, self.bits) - c * (1 + 2 * V / sigma)
            if nu <= 0:
                reason, msg = GRAZING, "derivative bound nu not positive (grazing/uncertain derivative)"
                continue
            eps_obs = (R * R - Nb) / (R + sqrt_down(Nb, self.bits))
            if eps_obs > eps_guard:
                reason, msg = LEDGER, "eps_obs exceeds eps_guard"
                continue
            return Bracket(a, b, nu, eps_obs, sigma, V, ga, gb, False, k, {}), None, ""
        return None, reason, msg

    # ---------------- reset and ledger bounds ----------------
    def reset(self, q, v, idx):
        """Exact reset extension at the state (q, v) for pair idx; returns (v_new, Jn)."""
        i, j = self.pairs[idx]
        vip, vjp, Jn = pair_reset(q[i], q[j], v[i], v[j], self.masses[i], self.masses[j], self.e[i][j])
        vn = list(v)
        vn[i], vn[j] = vip, vjp
        return vn, Jn

    def ledger_terms(self, v, idx, br, eta_b, c_b):
        """Certified M-, M+, L_R for the event with bracket ``br`` (reported velocities ``v`` at the segment
        start; ``eta_b`` the continuation bound through b, ``c_b = sqrt(2)_up eta_b``)."""
        i, j = self.pairs[idx]
        P = self.P
        G = sqrt_up(P * self.g2, self.bits)                      # ||(g, ..., g)||

        def vsq(s):
            return sum(sum((y + s * gg) ** 2 for y, gg in zip(vk, self.g)) for vk in v)

        vmax2 = max(vsq(br.a), vsq(br.b))
        M_minus = sqrt_up(vmax2 + P * self.g2, self.bits) + eta_b
        vin = sqrt_up(vmax2, self.bits) + eta_b
        mmax, mmin = max(self.masses), min(self.masses)
        vplus = sqrt_up(mmax / mmin, self.bits) * vin             # kinetic energy does not increase at a reset
        M_plus = vplus + (br.b - br.a) * G + G
        e = self.e[i][j]
        mi, mj = self.masses[i], self.masses[j]
        alpha = 1 / mi + 1 / mj
        kappa = (1 + e) / alpha
        beta = sqrt_up(1 / (mi * mi) + 1 / (mj * mj), self.bits)
        V_LR = br.V + c_b
        L_R = 1 + SQRT2_UP * beta * kappa * (1 + 4 * V_LR / br.sigma)
        return M_minus, M_plus, L_R

    def eta(self, E, H):
        """eta_ref = eta_loc + e^{L H} E with eta_loc = 0, L = 1 (certified upper bound)."""
        if E == 0:
            return Fraction(0)
        return exp_up(H, self.bits) * E
