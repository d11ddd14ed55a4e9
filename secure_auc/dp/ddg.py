"""Privacy of a sum of discrete Gaussian shares (the distributed discrete Gaussian).

Each of h honest clients adds X_j ~ N_Z(0, s^2) (grid units) to an integer
statistic; the server sees the statistic plus S = X_1 + ... + X_h.  S is *not*
a discrete Gaussian, but it is close to Y ~ N_Z(0, h s^2), and two bounds say
how close.

Pointwise (max-divergence) bound, used with the PLD accountant.  For
independent A ~ N_Z(0, a), B ~ N_Z(0, b), completing the square,

    P[A + B = z] = exp(-z^2 / (2 (a + b))) Theta(z) / (Z_a Z_b),
    Theta(z) = sum_x exp(-(x - c_z)^2 / (2 v)),   v = a b / (a + b),

and by Poisson summation Theta(z) = sqrt(2 pi v) sum_k exp(-2 pi^2 v k^2) cos(2 pi k c_z)
lies within sqrt(2 pi v) (1 +- eta(v)), eta(v) = 2 sum_{k >= 1} exp(-2 pi^2 v k^2).
Adding the shares one at a time (a = j s^2, b = s^2, v_j = s^2 j / (j + 1),
j = 1 .. h - 1), the pmf of S is exp(-z^2 / (2 h s^2)) r(z) / const with
r(z) in [prod (1 - eta_j), prod (1 + eta_j)], hence (normalising)

    |log P[S = z] - log P[Y = z]| <= L = sum_{j=1}^{h-1} log((1 + eta_j) / (1 - eta_j))

for every integer z (:func:`ddg_max_divergence`; it needs eta_j < 1, true for
s >= 1/2).  For a shift Delta, P[S + Delta = x] - e^eps P[S = x] <=
rho_max (P[Y + Delta = x] - e^(eps - L) P[Y = x]) with rho = P_S / P_Y in
[e^-L, e^L], so delta_S(eps) <= e^L delta_Y(eps - L), and the same holds for
any composition (products of pmfs): if the T releases' corrections sum to
L_T, eps_S(delta) <= eps_Y(delta e^-L_T) + L_T.  Y's privacy-loss distribution
is built by :func:`dgauss_pld`.  L is of the order of 4 sum_j exp(-2 pi^2 s^2 j / (j + 1)):
about 4 exp(-pi^2 s^2) whatever h up to 10^6: 3e-17 at s = 2, 2e-154 at s = 6, zero in floating
point from s = 8.7.

Renyi bound, used with the RDP accountant (Kairouz, Liu & Steinke 2021,
Proposition 14, one dimension, l1 = l2 = Delta, s >= 1/2):

    D_alpha(S + Delta || S) <= min(alpha Delta^2 / (2 h s^2) + tau,
                                   alpha / 2 (Delta / (sqrt(h) s) + tau)^2),
    tau = 10 sum_{k=1}^{h-1} exp(-2 pi^2 s^2 k / (k + 1))   (:func:`ddg_tau`, :func:`ddg_rdp`).

PLD of the discrete Gaussian.  For X ~ N_Z(0, sigma^2) and an integer shift
Delta the privacy loss of output x is L(x) = log p(x) - log p(x - Delta)
= (Delta^2 - 2 x Delta) / (2 sigma^2), linear and decreasing in x.  The
integers are cut where L crosses the grid values k h (h the discretisation
interval); each block's mass goes to its largest loss rounded up, so the
result is pessimistic whatever the cut points.  Block masses are differences of
the cdf P[X <= c]: summed term by term on supports of up to 2^21 integers
(sigma up to ~87,000), else from :func:`.discrete.dgauss_tail`
(Euler-Maclaurin, absolute error about 1e-4 sigma^-5, below 1e-28 there);
the mass beyond +-t (t = 10 sigma, tail ~ 1e-23) goes to +infinity (high
losses) and to the loss just above it (low losses), plus a margin of 1e-12 on
the +infinity mass for floating-point error.  dp-accounting's own
``DiscreteGaussianPrivacyLoss`` allocates arrays of 23 sigma entries, which is
out of reach at sigma ~ 1e6 .. 1e9 grid units; it is the reference for this
one at small sigma in ``tests/test_accountant.py``.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .discrete import dgauss_tail
from .skellam_pld import capped_masses, pessimistic_pld

__all__ = ["ddg_eta", "ddg_max_divergence", "ddg_tau", "ddg_rdp", "dgauss_pld"]

_ERR = 1e-12
_ENUMERATE_MAX = 2**21


def ddg_eta(v) -> np.ndarray:
    """eta(v) = 2 sum_{k >= 1} exp(-2 pi^2 v k^2): the Poisson-summation error of a Gaussian theta sum
    (terms k <= 8, and for k >= 9 the bound exp(-2 pi^2 v 81) / (1 - exp(-2 pi^2 v 18)), since
    k^2 - 81 >= 18 (k - 9))."""
    v = np.asarray(v, dtype=np.float64)
    k = np.arange(1, 9, dtype=np.float64)
    c = 2.0 * math.pi**2 * v
    rest = np.exp(-81.0 * c) / -np.expm1(-18.0 * c)
    return 2.0 * (np.exp(-c[..., None] * k * k).sum(axis=-1) + rest)


def _check_shares(variance: float, shares: int) -> tuple[float, int]:
    s2, h = float(variance), int(shares)
    if h < 1 or h != shares:
        raise ValueError(f"the number of shares must be a positive integer, got {shares}")
    if not (s2 >= 0.25 and math.isfinite(s2)):
        raise ValueError(f"the distributed discrete Gaussian needs a share std of at least 1/2, got s^2 = {s2}")
    return s2, h


def ddg_max_divergence(variance: float, shares: int) -> float:
    """L: the largest |log P[S = z] / P[N_Z(0, h s^2) = z]| for S a sum of h iid N_Z(0, s^2) (module docstring).

    Examples
    --------
    >>> from secure_auc.dp.ddg import ddg_max_divergence
    >>> ddg_max_divergence(1.0, 1), ddg_max_divergence(100.0, 10**6)
    (0.0, 0.0)
    >>> round(ddg_max_divergence(1.0, 3), 6)  # s = 1, three shares: about 4 (e^-pi^2 + e^-4pi^2/3)
    0.000215
    """
    s2, h = _check_shares(variance, shares)
    if h == 1:
        return 0.0
    j = np.arange(1, h, dtype=np.float64)
    eta = ddg_eta(s2 * j / (j + 1))
    return float(np.sum(np.log1p(eta) - np.log1p(-eta)))


def ddg_tau(variance: float, shares: int) -> float:
    """tau = 10 sum_{k=1}^{h-1} exp(-2 pi^2 s^2 k / (k + 1)) (Kairouz, Liu & Steinke 2021)."""
    s2, h = _check_shares(variance, shares)
    k = np.arange(1, h, dtype=np.float64)
    return float(10.0 * np.exp(-2.0 * math.pi**2 * s2 * k / (k + 1)).sum())


def ddg_rdp(alpha, variance: float, shares: int, sensitivity: float) -> np.ndarray:
    """Renyi divergence bound of Proposition 14 (one dimension, l1 = l2 = Delta), per order alpha.

    Examples
    --------
    With many grid steps of noise tau vanishes and this is the Gaussian's alpha Delta^2 / (2 h s^2):

    >>> from secure_auc.dp.ddg import ddg_rdp
    >>> float(ddg_rdp(2.0, 100.0, 4, 10.0))
    0.25
    """
    s2, h = _check_shares(variance, shares)
    a = np.asarray(alpha, dtype=np.float64)
    tau = ddg_tau(s2, h)
    scale = float(sensitivity) / math.sqrt(h * s2)
    return np.minimum(a * scale * scale / 2.0 + tau, a / 2.0 * (scale + tau) ** 2)


def _cdf(c: np.ndarray, sigma: float) -> np.ndarray:
    """P[X <= c] for integers c, X ~ N_Z(0, sigma^2), sigma large, from the upper tail on the far side."""
    c = np.asarray(c, dtype=np.float64)
    out = np.empty(c.shape)
    neg = c < 0
    out[neg] = dgauss_tail(-c[neg], sigma)  # P[X <= c] = P[X >= -c]
    out[~neg] = 1.0 - dgauss_tail(c[~neg] + 1.0, sigma)
    return out


@lru_cache(maxsize=64)
def dgauss_pld(sigma: float, sensitivity: int, value_discretization_interval: float = 1e-4):
    """Pessimistic ``dp_accounting`` PLD of N_Z(0, sigma^2) noise on an integer statistic of sensitivity Delta.

    Parameters
    ----------
    sigma : float
        Scale of the discrete Gaussian, in grid units (> 0).
    sensitivity : int
        Delta >= 1.
    value_discretization_interval : float, default 1e-4
        Grid of the privacy-loss values (rounded up to it).

    Returns
    -------
    dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution

    Examples
    --------
    At many grid steps it is the continuous Gaussian's:

    >>> from dp_accounting.pld import privacy_loss_distribution as pld
    >>> from secure_auc.dp.ddg import dgauss_pld
    >>> dg = dgauss_pld(3e8, 10**8).get_epsilon_for_delta(1e-6)
    >>> ga = pld.from_gaussian_mechanism(3.0).get_epsilon_for_delta(1e-6)
    >>> bool(abs(dg - ga) < 2e-3)
    True
    """
    sigma, d, h = float(sigma), int(sensitivity), float(value_discretization_interval)
    if not (sigma > 0 and math.isfinite(sigma)) or d < 1 or d != sensitivity:
        raise ValueError(f"need sigma > 0 and an integer sensitivity >= 1, got sigma = {sigma}, sensitivity = {sensitivity}")
    s2 = sigma * sigma

    def loss(x):
        x = np.asarray(x, dtype=np.float64)
        return (d * d - 2.0 * x * d) / (2.0 * s2)

    t = int(math.ceil(12 * sigma)) + 40
    if 2 * t + 1 <= _ENUMERATE_MAX:  # sigma up to ~87,000: the pmf term by term, one integer per block
        xs = np.arange(-t, t + 1, dtype=np.float64)
        w = np.exp(-xs * xs / (2 * s2))
        cuts = np.arange(-t - 1, t + 1, dtype=np.float64)
        cdf = np.concatenate([[0.0], np.cumsum(w / w.sum())])
        lo_mass = 0.0  # the mass beyond +-t, below exp(-72), is within the margin _ERR
    else:  # the cdf at the cut points from the Euler-Maclaurin tails (error O(sigma^-5) <= 1e-28)
        t = int(math.ceil(10 * sigma))  # P[X > 10 sigma] ~ 8e-24
        lo_mass = float(dgauss_tail(np.array([t + 1.0]), sigma)[0])  # P[X < -t]
        top, bottom = float(loss(-t)), float(loss(t))
        k = np.arange(math.ceil(bottom / h), math.floor(top / h) + 1, dtype=np.float64)
        x_of = np.floor((d * d - 2.0 * s2 * k * h) / (2.0 * d))  # the largest x with L(x) >= k h (up to rounding)
        cuts = np.unique(np.clip(np.concatenate([x_of, [-t - 1.0, float(t)]]), -t - 1.0, float(t)))
        cdf = _cdf(cuts, sigma)
    first = cuts[:-1] + 1  # block j = (cuts[j], cuts[j + 1]]
    mass = np.maximum(0.0, np.diff(cdf))
    infinity = lo_mass + _ERR
    mass, rest = capped_masses(mass, infinity)  # rest: x > t, the lowest losses
    return pessimistic_pld(loss(first), mass, float(loss(t + 1)), rest, infinity, h)
