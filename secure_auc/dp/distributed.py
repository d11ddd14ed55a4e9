"""Noise on the aggregate, added in shares by the clients (beyond the paper).

In the MPC protocol the server opens only the sums over all clients, so the
noise has to protect only those sums: it is added once in total, in shares,
instead of once per client, and the accuracy no longer depends on the number of
clients K.  Each client adds a *share* drawn from an infinitely divisible
distribution, so that the sum of the shares of any h clients has exactly the
distribution a single trusted curator would add (discrete Gaussian shares: a
sum close to it, accounted as such).  Derivations, the trust model
and measured results: ``docs/distributed-noise.md``.

Centred statistic.  With rbar = (M - 1) / 2 (public) and 0-based mid-ranks,

    AUC = (S - P (P - 1) / 2) / (P N) = 1/2 + C / (P N),   C = <r - rbar 1, y>,

because sum_i r_i = M (M - 1) / 2 for any ties.  Changing one label moves C by
|r_i - rbar| <= (M - 1) / 2 (half the sensitivity M - 1 of S) and P by 1.
Mid-ranks are half-integers, so the integer noise is put on D = 2C =
<2r - (M - 1), y> (integer, sensitivity M - 1); the noise on C is half of it.

What a client releases.  Client k adds shares e_C,k (on C) and e_P,k (on P) and
releases, in the usual format,

    localP'_k   = localP_k   + e_P,k
    localSum'_k = localSum_k + e_C,k + rbar e_P,k.

Summed: globalSum' = S + E_C + rbar E_P and P' = P + E_P, so the server's usual
estimator (eq. 1) gives exactly 1/2 + (C + E_C) / (P' N'): noise on the
centred statistic and on P, independent, with no change to the server
(:meth:`secure_auc.dp.base.Mechanism.estimate`).  Every released value is a
multiple of 1/4 (discrete Laplace, Skellam) or of 2^-8 (Gaussian), so the
protocol's 8-bit fixed point represents it exactly and sums are exact.

Noise families (``noise``), each calibrated for the two statistics jointly:

* ``discrete_laplace`` (pure eps, integer, the default).  DLap(t) with
  P(x) proportional to exp(-|x| / t) is eps-DP for an integer statistic of sensitivity
  Delta when t = Delta / eps.  DLap = G1 - G2 with G geometric, a geometric is
  the negative binomial NB(1, p) with p = 1 - exp(-eps / Delta), and NB is
  infinitely divisible: each share is NB(1/h, p) - NB(1/h, p), and any h
  shares sum to exactly DLap (Goryczka & Xiong 2015; Balle, Bell, Gascon,
  Nissim 2020).  Budget: eps_C = split * eps on D, eps_P = (1 - split) eps on P.
* ``skellam`` ((eps, delta), integer).  Sk(mu) = Pois(mu) - Pois(mu); shares
  Pois(mu/h) - Pois(mu/h) sum to exactly Sk(mu).  Its privacy event
  (:func:`.events.skellam_event`, one per coordinate) is composed with the exact
  privacy-loss distribution (:mod:`.skellam_pld`); one evaluation is calibrated
  to spend exactly eps by that PLD, starting from the Renyi-DP bound of
  Agarwal, Kairouz & Liu (2021) with RDP composition over the two coordinates
  and the RDP -> (eps, delta) conversion of Balle et al. (2020) / Canonne,
  Kamath & Steinke (2020) (kept if the PLD fails).
* ``gaussian`` ((eps, delta), integer): the distributed discrete Gaussian.
  Each share is C_GRID N_Z(0, s_C^2) on C and P_GRID N_Z(0, s_P^2) on P (s in
  grid units, C_GRID = 2^-8, P_GRID = 2^-7 so that rbar e_P stays on the 2^-8
  grid), drawn exactly (:func:`.discrete.discrete_gaussian`).  A label change
  shifts the sum by 128 (M - 1) grid steps on C and 128 on P.  The sum of h
  shares is not a discrete Gaussian; its event (:func:`.events.ddg_event`, one
  per coordinate) is accounted by the pointwise bound of :mod:`.ddg` with the
  PLD of N_Z(0, h s^2), and by Kairouz, Liu & Steinke (2021, Proposition 14)
  for RDP.  Each share's std is at least MIN_SHARE_STD = 2 grid steps, where
  the difference between the sum and N_Z(0, h s^2) is negligible; the scale is
  the smallest meeting (eps, delta) by the tightest accountant.

Samplers.  The discrete Laplace and discrete Gaussian shares are exact: drawn
with integer arithmetic only from the client's uniform integers
(:mod:`.discrete`).  A share NB(r, p) (r = 1/h, or K/h for a total) is drawn
at the scale T = 1 / -log(1 - p), rounded up to a rational t / s (the noise at
least as large as calibrated) by :func:`.discrete.negative_binomial`: floor(r)
geometrics, P(G = n) = (1 - q) q^n with q = exp(-s / t) (the one-sided part of
CKS Algorithm 2), plus for the fractional part rho of r a geometric G split by
a Polya urn with weights rho and 1 - rho.  The urn is a Chinese restaurant with
concentration 1, whose tables are the cycles of a uniform permutation of G:
stick breaking L_1 uniform on {1..G}, L_2 on {1..G - L_1}, ... (about
ln G + 0.58 steps), each table white with probability rho; the share is the
total size of the white tables.  Given G it is BetaBinomial(G, rho, 1 - rho),
which makes it NB(rho, q) exactly (if X ~ NB(rho), Y ~ NB(1 - rho), then
X + Y ~ NB(1) and X | X + Y = n ~ BetaBinomial(n, rho, 1 - rho)).  Skellam's
Poisson shares have means up to about 1e12 grid steps, where no exact sampler
is practical (the integer-only ones take time linear in the mean), so Skellam
is for analysis and simulation only: a release refuses it
(:meth:`DistributedNoiseMechanism.check_release`); the distributed discrete
Gaussian has the same standard deviation and is exact.

For Skellam and Gaussian, ``split`` is the share of the squared (Mahalanobis)
sensitivity budget on C: Delta_C^2 / sigma_C^2 = split / sigma_1^2 and
Delta_P^2 / sigma_P^2 = (1 - split) / sigma_1^2.

Budget split.  To first order dAUC = (dC - g dP) / (P N) with
g = (AUC - 1/2)(N - P).  With r = g / Delta_C = 2 |AUC - 1/2| |1 - 2 pi| M/(M-1)
the variance is proportional to

    Laplace (limit of DLap):  2 / (s eps)^2 + r^2 2 / ((1 - s) eps)^2
        -> s* = 1 / (1 + r^(2/3));
    Gaussian / Skellam:       1 / w + r^2 / (1 - w)
        -> w* = 1 / (1 + r).

The split may not depend on the private AUC and base rate, so ``split=None``
uses public priors (``prior_auc`` = 0.75, ``prior_base_rate`` = 0.25 give
r = 0.25 and s* = 0.716 for Laplace; the built-in data has r = 0.244).  For
the discrete Laplace the exact discrete variance is minimised numerically
(it differs from the Laplace closed form only for large eps).

Trust.  The guarantee holds if at least h = ceil(honest_fraction * K) clients
do not collude with the server (colluders can subtract their own shares): the
honest shares alone already sum to the curator's noise.  The total noise is
K/h times the curator's in variance.  A single client's noisy statistics are
*not* private on their own (see :meth:`DistributedNoiseMechanism.share_epsilon`),
which is why they are never opened: the MPC opens only the sum, and the plain
protocol refuses this mechanism.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import lru_cache

import numpy as np

from ..local_stats import LocalStatistics
from ..validation import InputError, check_delta, check_epsilon
from .base import Mechanism, NoisyStatistics, PrivacyCost
from .family import EPSILON, Family, Option
from .discrete import discrete_gaussian, dlap_variance, negative_binomial
from .noise import analytic_gaussian_sigma
from .streams import Uniforms

__all__ = [
    "FAMILY",
    "NOISES",
    "DistributedNoiseMechanism",
    "DistributedNoise",
    "Calibration",
    "optimal_split",
    "laplace_split",
    "sqrt_split",
    "prior_ratio",
    "centred_std",
    "dlap_variance",
    "dlap_pmf",
    "nb_scale",
    "skellam_rdp",
    "rdp_to_dp",
    "skellam_epsilon",
    "C_GRID",
    "P_GRID",
    "MIN_SHARE_STD",
]

NAME = "distributed"  # the family (declared at the end of this module: FAMILY)
NOISES = ("discrete_laplace", "skellam", "gaussian")
SKELLAM_RELEASE = ("Skellam noise is for analysis only: its Poisson shares cannot be drawn exactly at these means; "
                   "use noise='gaussian' (exact distributed discrete Gaussian shares, the same standard deviation)")
C_GRID = 2.0**-8  # Gaussian shares on C: the protocol's fixed-point step (protocol.messages.FRACTION_BITS)
P_GRID = 2.0**-7  # Gaussian shares on P: rbar * e_P must stay on the 2^-8 grid (rbar is a half-integer)
MIN_SHARE_STD = 2.0  # least std of a discrete Gaussian share, in grid units (the sum's bound L < 3e-17 for h <= 10^6)
SPLIT_BOUNDS = (0.01, 0.99)
RDP_ORDERS = np.unique(np.round(np.geomspace(2, 1e6, 3000)))  # integer Renyi orders for the Skellam accounting


# ---------------------------------------------------------------------------------------------
# distributions
def dlap_pmf(x, eps_per_unit: float) -> np.ndarray:
    """P(X = x) = (1 - q)/(1 + q) q^|x|, q = exp(-eps_per_unit)."""
    q = math.exp(-eps_per_unit)
    return (1 - q) / (1 + q) * q ** np.abs(np.asarray(x, dtype=np.float64))


def skellam_rdp(alpha, mu: float, l2: float, l1: float | None = None) -> np.ndarray:
    """RDP of Sk(mu) = Pois(mu) - Pois(mu) for sensitivities l2, l1 (Agarwal, Kairouz, Liu 2021).

        eps(alpha) = alpha l2^2 / (4 mu) + min(((2 alpha - 1) l2^2 + 6 l1) / (16 mu^2), 3 l1 / (4 mu)).
    """
    a = np.asarray(alpha, dtype=np.float64)
    l1 = l2 if l1 is None else l1
    return a * l2 * l2 / (4 * mu) + np.minimum(((2 * a - 1) * l2 * l2 + 6 * l1) / (16 * mu * mu), 3 * l1 / (4 * mu))


def rdp_to_dp(rdp, alpha, delta: float) -> float:
    """(eps, delta)-DP from RDP curve: min_alpha rdp + log((a-1)/a) - (log delta + log a)/(a-1).

    Balle, Barthe, Gaboardi, Hsu & Sato (2020); Canonne, Kamath & Steinke (2020) (same bound).
    """
    a = np.asarray(alpha, dtype=np.float64)
    eps = np.asarray(rdp) + np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1)
    return float(np.max([0.0, eps.min()]))


def skellam_epsilon(mus, sensitivities, delta: float) -> float:
    """eps at ``delta`` of independent Skellam noises Sk(mu_i) on coordinates with sensitivities Delta_i."""
    rdp = sum(skellam_rdp(RDP_ORDERS, mu, s) for mu, s in zip(mus, sensitivities))
    return rdp_to_dp(rdp, RDP_ORDERS, delta)


# ---------------------------------------------------------------------------------------------
# budget split
def prior_ratio(prior_auc: float = 0.75, prior_base_rate: float = 0.25) -> float:
    """r = g / Delta_C = 2 |AUC - 1/2| |1 - 2 pi| (M / (M - 1) dropped): weight of the P noise."""
    return 2.0 * abs(prior_auc - 0.5) * abs(1.0 - 2.0 * prior_base_rate)


def laplace_split(ratio: float) -> float:
    """Share of eps on C minimising 1/s^2 + r^2/(1-s)^2 (Laplace noise): 1 / (1 + r^(2/3))."""
    return float(np.clip(1.0 / (1.0 + ratio ** (2.0 / 3.0)), *SPLIT_BOUNDS))


def sqrt_split(ratio: float) -> float:
    """Share of the squared-sensitivity budget on C minimising 1/w + r^2/(1-w) (Gaussian/Skellam): 1/(1+r)."""
    return float(np.clip(1.0 / (1.0 + ratio), *SPLIT_BOUNDS))


@lru_cache(maxsize=256)
def _dlap_split(epsilon: float, ratio: float) -> float:
    # Var(AUC) (P N)^2 / Delta_C^2 = 2/(s eps)^2 (D: Delta = M - 1, Laplace limit) + r^2 Var DLap((1-s) eps)
    def f(s):
        return 2.0 / (s * epsilon) ** 2 + ratio**2 * float(dlap_variance((1.0 - s) * epsilon))

    from scipy.optimize import minimize_scalar  # here, not at import: scipy.optimize adds ~0.15 s to every process's start

    res = minimize_scalar(f, bounds=SPLIT_BOUNDS, method="bounded", options={"xatol": 1e-6})
    return float(res.x)


def optimal_split(epsilon: float, noise: str = "discrete_laplace", *, prior_auc: float = 0.75,
                  prior_base_rate: float = 0.25, honest: int = 1) -> float:
    """Variance-minimising split for the given noise from public priors (see the module docstring)."""
    r = prior_ratio(prior_auc, prior_base_rate)
    if noise == "discrete_laplace":
        return _dlap_split(float(epsilon), r)
    if noise == "skellam":
        return sqrt_split(r)
    if noise == "gaussian":
        return sqrt_split(r)
    raise InputError(f"distributed noise must be one of {NOISES}, got {noise!r}")


# ---------------------------------------------------------------------------------------------
# calibration
@dataclass(frozen=True)
class Calibration:
    """The curator's noise (sum of h honest shares) on C and on P, and how to draw shares.

    ``param_c``/``param_p``: NB success probability p (discrete Laplace, on D = 2C and on P),
    Poisson mean mu (Skellam, on D and on P) or the std s of ONE client's discrete Gaussian share
    N_Z(0, s^2), in grid units (Gaussian: C_GRID on C, P_GRID on P).
    ``var_c``/``var_p``: variance of the curator's noise (h shares) on C and on P.
    """

    noise: str
    honest: int
    param_c: float
    param_p: float
    var_c: float
    var_p: float

    def draw(self, rng: np.random.Generator, shape, shares: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """Noise on (C, P) equal to the sum of ``shares`` client shares, for every entry of ``shape``.

        ``shares=1``: one client's share.  ``shares=K``: the total over K
        clients, exact in distribution for discrete Laplace and Skellam (NB and
        Poisson are closed under sums).  From a ``Generator`` (simulation only)
        the NB and Poisson draws are numpy's; for the Gaussian one share is
        numpy's discrete Gaussian (:func:`.discrete.discrete_gaussian` with
        ``exact=False``) and the sum of K shares, not itself a discrete
        Gaussian, is approximated by N(0, K s^2) rounded to the grid (variance
        K s^2 + 1/12 grid steps^2).  From a :class:`~.streams.Uniforms` source
        (the release) every NB share is an exact :func:`.discrete.negative_binomial`
        (r = shares / h as a fraction, the scale rounded up by :func:`nb_scale`)
        and every Gaussian share an exact discrete Gaussian, each from its
        client's stream.
        """
        f = shares / self.honest
        if isinstance(rng, Uniforms):
            return self._draw_streams(rng, tuple(shape), shares)
        if self.noise == "discrete_laplace":
            out = []
            for p in (self.param_c, self.param_p):
                out.append((rng.negative_binomial(f, p, size=shape) - rng.negative_binomial(f, p, size=shape))
                           .astype(np.float64))
            return out[0] / 2.0, out[1]
        if self.noise == "skellam":
            out = []
            for mu in (self.param_c, self.param_p):
                out.append((rng.poisson(f * mu, size=shape) - rng.poisson(f * mu, size=shape)).astype(np.float64))
            return out[0] / 2.0, out[1]
        out = []
        for s, grid in ((self.param_c, C_GRID), (self.param_p, P_GRID)):
            if shares == 1:
                z = discrete_gaussian(rng, s, shape, exact=False).astype(np.float64)
            else:
                z = np.rint(rng.standard_normal(shape) * (s * math.sqrt(shares)))
            out.append(z * grid)
        return out[0], out[1]


    def share_variances(self) -> tuple[float, float]:
        """Gaussian: s^2 of one client's share on C and on P (grid units), as accounted."""
        return self.var_c / (self.honest * C_GRID**2), self.var_p / (self.honest * P_GRID**2)

    def _draw_streams(self, src: Uniforms, shape: tuple, shares: float) -> tuple[np.ndarray, np.ndarray]:
        """One client's shares from its own streams, many clients at once: exact negative binomials
        (discrete Laplace, :func:`.discrete.negative_binomial`, r = shares / h as a fraction) and
        discrete Gaussians (:func:`.discrete.discrete_gaussian`); Skellam is refused (module
        docstring)."""
        out = []
        if self.noise == "discrete_laplace":
            r = Fraction(shares) / self.honest
            for p in (self.param_c, self.param_p):
                scale = nb_scale(p)
                out.append((negative_binomial(src, r, scale, shape) - negative_binomial(src, r, scale, shape))
                           .astype(np.float64))
            return out[0] / 2.0, out[1]
        if self.noise == "skellam":
            raise InputError(SKELLAM_RELEASE)
        if shares != 1:
            raise ValueError("discrete Gaussian shares are drawn one client's share per entry")
        for s, grid in ((self.param_c, C_GRID), (self.param_p, P_GRID)):
            out.append(discrete_gaussian(src, s, shape).astype(np.float64) * grid)
        return out[0], out[1]


def nb_scale(p: float) -> float:
    """The scale T = 1 / -log(1 - p) of NB(r, p), q = 1 - p = exp(-1 / T), raised by 1e-12 relative so
    that floating-point rounding never undercuts it: the exact sampler's q is then at least 1 - p (the
    noise at least as large as calibrated)."""
    return -1.0 / math.log1p(-p) * (1 + 1e-12)


def ddg_sensitivities(total: int) -> tuple[int, int]:
    """Shift of the sum of the discrete Gaussian shares, in grid steps, when one label changes:
    Delta_C = (M - 1) / 2 / C_GRID on C and 1 / P_GRID on P."""
    return int(round((total - 1) / 2.0 / C_GRID)), int(round(1.0 / P_GRID))


def _smallest_scale(eps_of, epsilon: float, guess: float, rtol: float = 1e-6) -> float:
    """The smallest t (to ``rtol``) with eps_of(t) <= epsilon, eps_of decreasing: a bracket grown
    from ``guess``, then regula falsi in log t (Illinois variant); the result always meets epsilon."""
    def f(t):
        return eps_of(t) - epsilon

    step = 1.05
    lo = hi = guess
    flo = fhi = f(guess)
    if fhi > 0:
        while fhi > 0:
            lo, flo = hi, fhi
            hi *= step
            fhi, step = f(hi), step * step
    else:
        while flo <= 0:
            hi, fhi = lo, flo
            lo /= step
            flo, step = f(lo), step * step
    side = 0
    for _ in range(60):
        if hi / lo - 1 < rtol or -fhi <= rtol * epsilon:
            break
        ul, uh = math.log(lo), math.log(hi)
        if math.isfinite(flo):
            u = uh - fhi * (uh - ul) / (fhi - flo)
            u = min(max(u, ul + 1e-3 * (uh - ul)), uh - 1e-3 * (uh - ul))
        else:  # eps_of(lo) = inf: bisect
            u = (ul + uh) / 2
        mid = math.exp(u)
        fm = f(mid)
        if fm <= 0:
            hi, fhi = mid, fm
            if side == -1:
                flo /= 2
            side = -1
        else:
            lo, flo = mid, fm
            if side == 1:
                fhi /= 2
            side = 1
    return hi


def _tightest_epsilon(events, delta: float) -> float:
    """eps at delta of ``events`` by the tightest accountant (:func:`.events.compose`)."""
    from .events import compose

    return compose(events, delta).epsilon


def _ddg_events(var_c: float, var_p: float, honest: int, sens_c: int, sens_p: int):
    from .events import ddg_event

    return [ddg_event(var_c, honest, sens_c), ddg_event(var_p, honest, sens_p)]


_EPS_CAP = 30.0  # the largest eps per statistic a discrete Laplace is calibrated at
_EPS_CAP_GAUSSIAN = 10.0  # the largest eps the Gaussian and Skellam shares are calibrated at


@lru_cache(maxsize=256)
def _calibrate(noise: str, epsilon: float, delta: float | None, split: float, total: int, honest: int) -> Calibration:
    sens_d = float(total - 1)  # sensitivity of D = 2C
    if noise == "discrete_laplace":
        # calibrated at no more than eps = 30 per statistic: beyond ~36, 1 - exp(-eps) rounds to p = 1;
        # a smaller eps means more noise than charged, never less (at eps = 30 it is 0 but w.p. 2e-13)
        eps_d, eps_p = min(split * epsilon / sens_d, _EPS_CAP), min((1.0 - split) * epsilon, _EPS_CAP)
        return Calibration(noise, honest, -math.expm1(-eps_d), -math.expm1(-eps_p),
                           float(dlap_variance(eps_d)) / 4.0, float(dlap_variance(eps_p)))
    if noise == "skellam":
        # Sk(mu_D) on D with 2 mu_D = sens_d^2 t^2 / split, Sk(mu_P) on P with 2 mu_P = t^2 / (1 - split):
        # find the smallest scale t meeting (eps, delta)
        def mus(t):
            return sens_d**2 * t * t / (2 * split), t * t / (2 * (1 - split))

        def eps_of(t):
            return skellam_epsilon(mus(t), (sens_d, 1.0), delta)

        lo, hi = 1e-3, 1.0
        while eps_of(hi) > epsilon:
            lo, hi = hi, hi * 2
        for _ in range(80):
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if eps_of(mid) <= epsilon else (mid, hi)
        # the RDP bound is loose: the smallest scale by the tightest accountant (the Skellam PLD),
        # below the RDP's, which stays if the PLD fails
        from .events import skellam_event

        try:
            hi = _smallest_scale(lambda t: _tightest_epsilon(
                [skellam_event(mus(t)[0], int(sens_d)), skellam_event(mus(t)[1], 1)], delta), epsilon, hi)
        except ValueError:
            pass
        mu_d, mu_p = mus(hi)
        return Calibration(noise, honest, mu_d, mu_p, 2 * mu_d / 4.0, 2 * mu_p)
    # distributed discrete Gaussian: shares N_Z(0, s^2) in grid steps
    sens_c, sens_p = ddg_sensitivities(total)

    def share_vars(t):
        return (max(sens_c**2 * t * t / (split * honest), MIN_SHARE_STD**2),
                max(sens_p**2 * t * t / ((1.0 - split) * honest), MIN_SHARE_STD**2))

    def eps_of(t):
        return _tightest_epsilon(_ddg_events(*share_vars(t), honest, sens_c, sens_p), delta)

    t = _smallest_scale(eps_of, epsilon, float(analytic_gaussian_sigma(epsilon, delta)))
    var_c, var_p = share_vars(t)
    # std of the sampler 1e-12 above the accounted one (which floating-point rounding could undercut);
    # it rounds s^2 up to a multiple of 2^-20
    s_c, s_p = math.sqrt(var_c) * (1 + 1e-12), math.sqrt(var_p) * (1 + 1e-12)
    return Calibration(noise, honest, s_c, s_p, honest * var_c * C_GRID**2, honest * var_p * P_GRID**2)


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DistributedNoiseMechanism(Mechanism):
    """Noise on the aggregate in shares (MPC protocol only); see the module docstring.

    Client k releases localP'_k = localP_k + e_P,k and
    localSum'_k = localSum_k + e_C,k + rbar e_P,k with its own shares; the
    shares of any h clients sum to the noise a single curator would add.

    Parameters
    ----------
    epsilon : float
        Total budget of the evaluation.
    clients : int, optional
        K, the number of clients (public).  None: taken from the statistics
        passed to :meth:`privatize` (simulations holding all clients).
    noise : {"discrete_laplace", "skellam", "gaussian"}, default "discrete_laplace"
        Discrete Laplace is pure eps; Skellam and Gaussian need ``delta``.
    delta : float, optional
        For Skellam and Gaussian, in (0, 1).
    honest_fraction : float, default 1.0
        Fraction of clients assumed not to collude with the server, in (0, 1];
        h = ceil(honest_fraction * K) honest shares carry the guarantee, and
        the total noise is K / h times the curator's in variance.
    split : float, optional
        Share of the budget on the centred statistic C (eps share for the
        discrete Laplace, squared-sensitivity share for Skellam/Gaussian);
        None = variance-optimal for the public priors.
    prior_auc, prior_base_rate : float, default 0.75 and 0.25
        Public guesses used only for the default split.

    Raises
    ------
    InputError
        On an invalid parameter (the message names it).

    Examples
    --------
    Four clients of which two are trusted not to collude with the server:

    >>> from secure_auc import DistributedNoise, make_mechanism
    >>> mech = DistributedNoise(1.0, clients=4, honest_fraction=0.5)
    >>> mech.needs_secure_sum, mech.honest, mech.cost
    (True, 2, PrivacyCost(epsilon=1.0, delta=0.0))
    >>> round(mech.eps_split, 3)  # from the priors: r = 0.25, close to 1 / (1 + r^(2/3))
    0.716

    Half the clients honest doubles the variance of the total noise:

    >>> all_honest = DistributedNoise(1.0, clients=4)
    >>> mech.noise_variance(total=1000)[1] / all_honest.noise_variance(total=1000)[1]
    2.0
    >>> make_mechanism("distributed", 1.0, clients=4, delta=1e-6).noise  # with a delta: exact discrete Gaussian shares
    'gaussian'
    >>> DistributedNoise(1.0, clients=4, noise="gaussian")
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: gaussian noise needs --delta in (0, 1)
    """

    epsilon: float
    clients: int | None = None
    noise: str = "discrete_laplace"
    delta: float | None = None
    honest_fraction: float = 1.0
    split: float | None = None
    prior_auc: float = 0.75
    prior_base_rate: float = 0.25
    name: str = field(default=NAME, init=False)
    needs_secure_sum = True  # each client adds only a share: only the aggregate may be opened

    def check_release(self) -> None:
        """Skellam noise is for analysis and simulation only: a release refuses it (module
        docstring)."""
        if self.noise == "skellam":
            raise InputError(SKELLAM_RELEASE)

    def for_clients(self, clients: int) -> "DistributedNoiseMechanism":
        """Each share is sized for h = ceil(honest_fraction K) honest clients: a mechanism made for more
        clients than take part would add too little noise, and one made for fewer would not hold the
        trust assumption, so K must be the number present (set from it when None).

        Examples
        --------
        >>> from secure_auc import DistributedNoise
        >>> DistributedNoise(1.0).for_clients(3).clients
        3
        >>> DistributedNoise(1.0, clients=100).for_clients(10)
        Traceback (most recent call last):
            ...
        secure_auc.validation.InputError: distributed noise calibrated for 100 clients but 10 clients take part: ...
        """
        if self.clients is None:
            return replace(self, clients=int(clients))
        if int(clients) != self.clients:
            raise InputError(
                f"distributed noise calibrated for {self.clients} clients but {clients} clients take part: "
                f"each client's share would be sized for the wrong number of honest clients; make the "
                f"mechanism with clients={clients}")
        return self

    def __post_init__(self):
        check_epsilon(self.epsilon)
        if self.clients is not None and (int(self.clients) != self.clients or self.clients < 1):
            raise InputError(f"clients must be a positive integer, got {self.clients}")
        if not (0.0 < self.honest_fraction <= 1.0):
            raise InputError(f"honest fraction must be in (0, 1], got {self.honest_fraction}")
        if self.noise not in NOISES:
            raise InputError(f"distributed noise must be one of {', '.join(NOISES)}; got {self.noise!r}")
        if self.noise in ("skellam", "gaussian"):
            if self.delta is None:
                raise InputError(f"{self.noise} noise needs --delta in (0, 1)")
            check_delta(self.delta)
        elif self.delta not in (None, 0, 0.0):
            raise InputError("delta applies to skellam and gaussian noise only (discrete Laplace is pure eps-DP)")
        if self.split is not None and not (0.0 < self.split < 1.0):
            raise InputError(f"split must be in (0, 1), got {self.split}")
        if not (0.0 <= self.prior_auc <= 1.0) or not (0.0 < self.prior_base_rate < 1.0):
            raise InputError("prior AUC must be in [0, 1] and prior base rate in (0, 1)")

    # -- public parameters ----------------------------------------------------------------------
    def honest_of(self, clients: int) -> int:
        """h = ceil(honest_fraction * K), at least 1."""
        return max(1, math.ceil(self.honest_fraction * clients - 1e-9))

    @property
    def honest(self) -> int:
        if self.clients is None:
            raise ValueError("the number of clients is not set")
        return self.honest_of(self.clients)

    def split_for(self, clients: int | None = None) -> float:
        if self.split is not None:
            return float(self.split)
        k = clients if clients is not None else self.clients
        h = self.honest_of(k) if k is not None else 1
        return optimal_split(self.epsilon, self.noise, prior_auc=self.prior_auc,
                             prior_base_rate=self.prior_base_rate, honest=h)

    @property
    def eps_split(self) -> float:
        """The split used (share of the budget on the centred statistic)."""
        return self.split_for()

    @property
    def cost(self) -> PrivacyCost:
        return PrivacyCost(self.epsilon, self.delta or 0.0)

    def calibration(self, total: int, clients: int | None = None) -> Calibration:
        k = clients if clients is not None else self.clients
        if k is None:
            raise ValueError("distributed noise needs the number of clients")
        if total < 2:
            raise InputError(f"need at least 2 samples, got M = {total}")
        h = self.honest_of(k)
        eps = float(self.epsilon)
        if self.noise != "discrete_laplace":
            # calibrated at no more than eps = 10: more noise than charged, never less (far beyond it the
            # accountant's privacy loss distribution would not fit in memory; the error is already ~1e-5)
            eps = min(eps, _EPS_CAP_GAUSSIAN)
        return _calibrate(self.noise, eps, self.delta, self.split_for(k), int(total), h)

    def privacy_event(self, total: int | None = None) -> dict:
        """The curator's noise on (D, P): two eps-DP events (discrete Laplace), two Skellam events
        (:func:`.events.skellam_event`: Sk(mu_D) on D, sensitivity M - 1, and Sk(mu_P) on P,
        sensitivity 1) or two distributed discrete Gaussian events (:func:`.events.ddg_event`:
        h shares N_Z(0, s^2) with the shift 128 (M - 1) on C and 128 on P, grid steps).  Skellam
        and Gaussian need M: a party's ledger passes the lower bound n_k + K - 1, for which the
        noise per unit of sensitivity and the composed eps agree closely on the built-in data
        (about 1e-9 relative for Skellam, 1e-6 for Gaussian: the calibration's tolerance)."""
        from .events import composed_event, pure_event, skellam_event

        if self.noise == "discrete_laplace":
            s = self.split_for()
            return composed_event([pure_event(s * self.epsilon), pure_event((1.0 - s) * self.epsilon)])
        if total is None:
            raise ValueError(f"the {self.noise} event needs the number of samples M (or a lower bound)")
        cal = self.calibration(int(total), self.clients or 1)
        if self.noise == "gaussian":
            return composed_event(_ddg_events(*cal.share_variances(), cal.honest, *ddg_sensitivities(int(total))))
        return composed_event([skellam_event(cal.param_c, int(total) - 1), skellam_event(cal.param_p, 1)])

    def describe(self) -> dict:
        return {"mechanism": NAME, "epsilon": self.epsilon, "delta": self.delta or 0.0,
                "allocation": f"{self.noise} shares, split {self.eps_split:.3f}, "
                              f"{self.honest} of {self.clients} clients honest", "sensitivity": None}

    def delta_method_std(self, stats: LocalStatistics, total: int, auc: float) -> float:
        """:meth:`linearised_std` with the clients' true number of positives."""
        return self.linearised_std(total, float(stats.local_p.sum()), auc, clients=stats.clients)

    # -- the client's step ------------------------------------------------------------------------
    def _clients_for(self, stats: LocalStatistics) -> int:
        if self.clients is None:
            return stats.clients
        if stats.clients > self.clients:
            raise ValueError(f"mechanism set up for {self.clients} clients, got statistics of {stats.clients}")
        return self.clients

    def privatize(self, stats: LocalStatistics, rng: np.random.Generator, reps: int | None = None,
                  *, total: int | None = None, exact: bool = True) -> NoisyStatistics:
        """Each client's statistics plus its own shares (module docstring); shape (K,) or (reps, K)."""
        if total is None:
            raise ValueError("distributed noise needs the total number of samples M")
        cal = self.calibration(total, self._clients_for(stats))
        shape = (stats.clients,) if reps is None else (reps, stats.clients)
        e_c, e_p = cal.draw(rng, shape)
        rbar = (total - 1) / 2.0
        return NoisyStatistics(local_sum=stats.local_sum + e_c + rbar * e_p, local_p=stats.local_p + e_p, n=stats.n)

    # -- analysis and fast simulation --------------------------------------------------------------
    def aggregate_noise(self, rng: np.random.Generator, total: int, reps: int | None = None,
                        clients: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(E_C, E_P): the total noise of all K clients in one draw (see :meth:`Calibration.draw`)."""
        k = clients if clients is not None else self.clients
        cal = self.calibration(total, k)
        return cal.draw(rng, () if reps is None else (reps,), shares=k)

    def noise_variance(self, total: int, clients: int | None = None) -> tuple[float, float]:
        """Variance of the total noise (K shares) on C and on P: K/h times the curator's."""
        k = clients if clients is not None else self.clients
        cal = self.calibration(total, k)
        inflate = k / cal.honest
        return inflate * cal.var_c, inflate * cal.var_p

    def linearised_std(self, total: int, positives: float, auc: float, clients: int | None = None) -> float:
        """Delta-method std: sqrt(Var E_C + g^2 Var E_P) / (P N), g = (AUC - 1/2)(N - P)."""
        var_c, var_p = self.noise_variance(total, clients)
        p = float(positives)
        n = total - p
        g = (auc - 0.5) * (n - p)
        return math.sqrt(var_c + g * g * var_p) / (p * n)

    def share_epsilon(self, total: int, clients: int | None = None) -> float:
        """The privacy of ONE client's noisy statistics if they were opened (they never are).

        Gaussian / Skellam: the eps (at the mechanism's delta) of a single share,
        noise variance 1/h of the curator's (a discrete Gaussian N_Z(0, s^2) for Gaussian).
        Discrete Laplace: a lower bound on the pure eps of a single share, the
        privacy loss log P(e_P = 0) / P(e_P = 1) of its P coordinate alone
        (exact pmf of NB(1/h) - NB(1/h)); it equals eps_P for h = 1 and grows
        like log h.
        """
        k = clients if clients is not None else self.clients
        cal = self.calibration(total, k)
        h = cal.honest
        if self.noise == "gaussian":
            return _tightest_epsilon(_ddg_events(*cal.share_variances(), 1, *ddg_sensitivities(total)), self.delta)
        if self.noise == "skellam":
            from .events import skellam_event

            return _tightest_epsilon([skellam_event(cal.param_c / h, total - 1), skellam_event(cal.param_p / h, 1)],
                                     self.delta)
        r, p = 1.0 / h, cal.param_p
        from scipy.stats import nbinom  # here, not at import: scipy.stats costs ~1 s of every process's start

        kmax = int(nbinom.ppf(1 - 1e-15, r, p)) + 2
        ks = np.arange(kmax + 1)
        f = nbinom.pmf(ks, r, p)
        p0 = float(f @ f)
        p1 = float(f[1:] @ f[:-1])
        return math.log(p0 / p1)


DistributedNoise = DistributedNoiseMechanism  # the name used by make_mechanism and the simulator


def centred_std(total: int, positives: int, auc: float, epsilon: float, split: float | None = None,
                honest_fraction: float = 1.0, clients: int = 1, noise: str = "discrete_laplace",
                delta: float | None = None) -> float:
    """Delta-method std of the estimate with distributed noise (:meth:`DistributedNoiseMechanism.linearised_std`)."""
    mech = DistributedNoiseMechanism(epsilon, clients, noise=noise, delta=delta, honest_fraction=honest_fraction,
                                     split=split)
    return mech.linearised_std(total, positives, auc)


# -- the family's declaration (:mod:`.family`) ----------------------------------------------------------
def _make(epsilon, delta, clients, honest_fraction, split, noise):
    if clients is None:
        raise InputError("distributed noise needs the number of clients")
    # pure eps: discrete Laplace shares; (eps, delta): exact discrete Gaussian shares
    if noise is None:
        shares = "gaussian" if delta is not None else "discrete_laplace"
    else:
        shares = {"laplace": "discrete_laplace"}.get(noise, noise)
    return DistributedNoise(epsilon, clients, noise=shares, delta=delta, honest_fraction=honest_fraction, split=split)


FAMILY = Family(
    NAME, "noise on the aggregate only, in shares: discrete Laplace, or discrete Gaussian with --delta; MPC protocol "
          "only",
    (EPSILON,
     Option("delta", "delta of one evaluation: discrete Gaussian shares (without it: discrete Laplace "
                     "shares, pure eps-DP)", range="(0, 1)"),
     Option("honest_fraction", "fraction of clients assumed not to collude with the server; the honest clients' "
                               "shares alone give the guarantee", default=1.0, range="(0, 1]"),
     Option("split", "share of the budget on the centred rank statistic (of eps for discrete Laplace; of the "
                     "squared-sensitivity budget for discrete Gaussian shares; without it: variance-optimal from "
                     "public priors AUC 0.75, base rate 0.25, 0.716 for discrete Laplace)", range="(0, 1)"),
     Option("noise", "the shares' noise: laplace (discrete Laplace), gaussian (discrete Gaussian) or skellam "
                     "(analysis only); default: by delta", type=str, cli=False)),
    make=_make, notes={"*": "it divides eps with --split"}, needs_secure_sum=True)
