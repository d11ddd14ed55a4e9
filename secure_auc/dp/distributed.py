"""Noise on the aggregate, added in shares by the clients (beyond the paper).

In the MPC protocol the server opens only the sums over all clients, so the
noise has to protect only those sums: it can be added once in total instead of
once per client, and then the accuracy no longer depends on the number of
clients K.  Each client adds a *share*; the shares are drawn from an infinitely
divisible distribution so that their sum has exactly the distribution a single
trusted curator would add.

Centred statistic.  With rbar = (M - 1) / 2 (public) and mid-ranks,

    AUC = (S - P (P - 1) / 2) / (P N) = 1/2 + C / (P N),   C = <r - rbar, y>,

because sum_i r_i = M (M - 1) / 2 for any ties.  Changing one label moves C by
|r_i - rbar| <= (M - 1) / 2 (half the sensitivity M - 1 of S) and P by 1.  We
release D = 2C = <2r - (M - 1), y>, an integer (sensitivity M - 1), and P.

Budget split (derivation in docs/distributed-noise.md).  To first order,
dAUC = (dC - g dP) / (P N) with g = (AUC - 1/2)(N - P).  With noise variances
proportional to (Delta_C / eps_C)^2 and (1 / eps_P)^2, the variance
a / eps_C^2 + b / eps_P^2 (a = Delta_C^2, b = g^2) under eps_C + eps_P = eps is
smallest at

    eps_C / eps = a^(1/3) / (a^(1/3) + b^(1/3)) = 1 / (1 + (2 |AUC - 1/2| |1 - 2 pi|)^(2/3)),

using Delta_C = M / 2 and N - P = M (1 - 2 pi).  The split may not depend on
the private data, so it is computed from *public priors* (``prior_auc``,
``prior_base_rate``; defaults 0.75 and 0.25 give 0.716, the paper's data
would give 0.72); any fixed split is eps-DP.

Noise families (each client k draws the shares; h clients are assumed honest):

* ``discrete_laplace`` (pure eps, integers, the default): DLap with
  P(x) proportional to exp(-eps |x| / Delta) is eps-DP for an integer statistic with
  sensitivity Delta.  DLap = G1 - G2 with G geometric, and a geometric is a
  negative binomial NB(1, p) with p = 1 - exp(-eps / Delta), so each share is
  NB(1/h, p) - NB(1/h, p) and any h shares sum to exactly DLap (Goryczka &
  Xiong 2015; Balle, Bell, Gascon, Nissim 2020).  Integer noise is exact in
  CrypTen's integer ring and avoids the floating-point attacks on textbook
  Laplace sampling (Mironov 2012).
* ``gaussian`` ((eps, delta)): shares N(0, sigma^2 / h), sigma from the
  analytic Gaussian mechanism for the l2 sensitivity sqrt(Delta_C'^2 + 1)
  (both statistics in one release, with D scaled by the split).  The shares
  are rounded to the 2^-8 fixed-point grid by each client; to stay exact we add
  K * 2^-8 to the sensitivity of each statistic.  (Skellam shares, the
  integer alternative of Agarwal, Kairouz and Liu 2021, are not implemented.)

Trust.  The guarantee holds if at least h = ceil(honest_fraction * K) clients
do not collude with the server (colluders can subtract their own shares); the
total noise is then K/h times the curator's in variance.  A single client's
noisy statistics are *not* private on their own — one share of DLap is almost
always 0 for large h — which is why they are never opened: the MPC opens only
the sum, and the plain protocol refuses this mechanism.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..local_stats import LocalStatistics
from ..validation import InputError, check_delta, check_epsilon
from .mechanisms import NoisyStatistics, PrivacyCost
from .noise import analytic_gaussian_sigma

__all__ = ["DistributedNoise", "optimal_split", "centred_std", "FIXED_POINT_STEP"]

FIXED_POINT_STEP = 2.0**-8  # the protocol's fixed-point grid (protocol.messages.FRACTION_BITS)


def optimal_split(prior_auc: float = 0.75, prior_base_rate: float = 0.25) -> float:
    """Share of eps on the centred statistic that minimises the estimate's variance."""
    ratio = (2 * abs(prior_auc - 0.5) * abs(1 - 2 * prior_base_rate)) ** (2 / 3)
    return 1.0 / (1.0 + ratio)


def centred_std(total: int, positives: int, auc: float, epsilon: float, split: float, honest_fraction: float = 1.0,
                clients: int = 1) -> float:
    """Delta-method std of the estimate under discrete-Laplace noise on (2C, P)."""
    m, p = float(total), float(positives)
    n = m - p
    h = max(1, math.ceil(honest_fraction * clients))
    inflate = clients / h

    def dlap_var(eps, delta_sens):
        q = math.exp(-eps / delta_sens)
        return 2 * q / (1 - q) ** 2

    var_d = dlap_var(split * epsilon, m - 1) * inflate  # noise on D = 2C
    var_p = dlap_var((1 - split) * epsilon, 1.0) * inflate
    g = (auc - 0.5) * (n - p)
    return math.sqrt(var_d / 4 + g * g * var_p) / (p * n)


@dataclass(frozen=True)
class DistributedNoise:
    """Noise on the aggregate in shares (MPC protocol only); see the module docstring.

    Parameters
    ----------
    epsilon : total budget of the evaluation.
    clients : K, the number of clients (public).
    noise : "discrete_laplace" (pure eps) or "gaussian" (needs delta).
    honest_fraction : fraction of clients assumed not to collude with the server.
    split : share of eps on the centred statistic; None = from the priors.
    """

    epsilon: float
    clients: int
    noise: str = "discrete_laplace"
    delta: float | None = None
    honest_fraction: float = 1.0
    split: float | None = None
    prior_auc: float = 0.75
    prior_base_rate: float = 0.25
    name: str = field(default="distributed", init=False)

    def __post_init__(self):
        check_epsilon(self.epsilon)
        if self.clients < 1:
            raise InputError(f"clients must be at least 1, got {self.clients}")
        if not (0.0 < self.honest_fraction <= 1.0):
            raise InputError(f"honest fraction must be in (0, 1], got {self.honest_fraction}")
        if self.noise not in ("discrete_laplace", "gaussian"):
            raise InputError(f"distributed noise must be 'discrete_laplace' or 'gaussian', got {self.noise!r}")
        if self.noise == "gaussian":
            if self.delta is None:
                raise InputError("Gaussian noise needs --delta in (0, 1)")
            check_delta(self.delta)
        elif self.delta not in (None, 0, 0.0):
            raise InputError("delta applies to Gaussian noise only (discrete Laplace is pure eps-DP)")
        if self.split is not None and not (0.0 < self.split < 1.0):
            raise InputError(f"split must be in (0, 1), got {self.split}")

    @property
    def honest(self) -> int:
        return max(1, math.ceil(self.honest_fraction * self.clients))

    @property
    def eps_split(self) -> float:
        return self.split if self.split is not None else optimal_split(self.prior_auc, self.prior_base_rate)

    @property
    def cost(self) -> PrivacyCost:
        return PrivacyCost(self.epsilon, self.delta or 0.0)

    def prepare_labels(self, labels, rng):
        return np.asarray(labels, dtype=np.int8)

    def _shares(self, rng, shape, total: int):
        """Noise shares (on D = 2C, on P) for ``shape`` = (..., clients in this call)."""
        h = self.honest
        if self.noise == "discrete_laplace":
            out = []
            for eps, sens in ((self.eps_split * self.epsilon, total - 1), ((1 - self.eps_split) * self.epsilon, 1)):
                p = -math.expm1(-eps / sens)  # 1 - exp(-eps/Delta)
                out.append((rng.negative_binomial(1.0 / h, p, size=shape)
                            - rng.negative_binomial(1.0 / h, p, size=shape)).astype(np.float64))
            return out
        # Gaussian: one (eps, delta) release of (D / w_D, P / w_P) with l2 sensitivity sqrt(2) after
        # scaling each coordinate by its sensitivity (rounding margin included) and budget weight
        k = self.clients
        sens_d = (total - 1) + 2 * k * FIXED_POINT_STEP  # D = 2C: rounding of C moves D by 2 * step
        sens_p = 1 + k * FIXED_POINT_STEP
        s = self.eps_split
        # weights: D gets share s of the noise budget, P share 1 - s (std inversely proportional)
        w_d, w_p = sens_d / s, sens_p / (1 - s)
        l2 = math.hypot(sens_d / w_d, sens_p / w_p)
        sigma = float(analytic_gaussian_sigma(self.epsilon, self.delta)) * l2
        scale = sigma / math.sqrt(h)
        return [rng.standard_normal(shape) * scale * w_d, rng.standard_normal(shape) * scale * w_p]

    def privatize(self, stats: LocalStatistics, rng: np.random.Generator, reps: int | None = None,
                  *, total: int | None = None) -> NoisyStatistics:
        """Each client's statistics plus its shares, expressed as (localSum', localP').

        The released pair is localP' = P_k + e_P and
        localSum' = C_k + e_D / 2 + rbar localP', so that the server's usual
        estimator (eq. 1) on the sums equals the centred estimator
        1/2 + C' / (P' N') exactly.
        """
        if total is None:
            raise ValueError("distributed noise needs the total number of samples M")
        shape = (stats.clients,) if reps is None else (reps, stats.clients)
        rbar = (total - 1) / 2.0
        centred = stats.local_sum - rbar * stats.local_p
        e_d, e_p = self._shares(rng, shape, total)
        local_p = stats.local_p + e_p
        return NoisyStatistics(local_sum=centred + e_d / 2.0 + rbar * local_p, local_p=local_p, n=stats.n)
