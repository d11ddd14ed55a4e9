"""Privacy-loss distribution (PLD) of the Skellam mechanism, for dp-accounting's PLD accountant.

The server sees a statistic f plus Sk(mu) = Pois(mu) - Pois(mu) noise (the sum
of the clients' Poisson shares); neighbouring datasets move f by at most an
integer Delta.  With p the Skellam pmf,

    p(x) = e^{-2 mu} I_|x|(2 mu),   L(x) = log p(x) - log p(x - Delta),

the privacy loss of output x.  p is log-concave (a convolution of two
log-concave Poisson pmfs), so L is non-increasing in x, and p is symmetric, so
the add and remove directions have the same PLD.  Sampling x ~ p and reporting
L(x) gives the PLD; :func:`skellam_pld` builds a *pessimistic* discretisation
of it on the grid h Z (h = ``value_discretization_interval``):

* integers are grouped in blocks (c_{j-1}, c_j]; block j's mass is put on
  ceil((L(c_{j-1} + 1) + tol) / h) h, at least the largest loss in the block
  (L is non-increasing), so the result dominates the true PLD whatever the cut
  points; they are placed where L crosses the grid values, so that the
  rounding costs at most one grid step h;
* the mass below the lowest block (x < lo) goes to +infinity, counted with the
  Chernoff bound P(X <= -t) <= exp(-2 mu phi(t / (2 mu))),
  phi(s) = s asinh(s) - sqrt(1 + s^2) + 1 (from E exp(lambda X) =
  exp(2 mu (cosh lambda - 1))), plus a margin ``err`` for floating-point
  errors; the mass above the highest block (lowest losses) goes to the loss
  just above it, rounded up; outputs x with p(x - Delta) below the
  floating-point range (Delta >> sqrt(mu)) count as loss +infinity.  The cumulative masses so computed are upper bounds of the true
  P(L >= l) at every grid value l, which is what the pessimistic PLD needs
  (the hockey-stick divergence is increasing in the loss, also after
  composition).

Numerics.  log I_v(z) for z = 2 mu >= 2000 comes from Debye's uniform
expansion (DLMF 10.41.3) written so that it holds for every v >= 0 (v = 0
included), with r = 1 / sqrt(v^2 + z^2), t = v r:

    log p(v) = v^2 / (sqrt(v^2 + z^2) + z) - v asinh(v / z) + (1/2) log(r / (2 pi))
               + log(1 + sum_{k=1..4} r^k P_k(t^2)),

(u_k(t) / v^k = r^k P_k(t^2)); the first omitted term is O(r^5) <= 3e-17 times a
moderate constant.  Below, ``scipy.special.ive`` (accurate there) is used.
The pmf of the noise on the centred statistic has a std of 1e5 to 1e7 grid
units: rather than summing 1e7 terms, each block's mass is then the integral
of the smooth, even extension exp(log p(v)) over [c_{j-1} + 1/2, c_j + 1/2]
(8-point Gauss-Legendre on sub-blocks of at most sigma / 100) with the
Euler-Maclaurin midpoint correction -f'(c + 1/2) / 24 on the cumulative sums;
the omitted terms are O(f / sigma^3).  Small supports (at most 2^21 integers)
are summed exactly.  Checks against mpmath, against the exact pmf summed
term by term, against a brute-force PLD and against the Gaussian PLD:
``tests/test_accountant.py``.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.special import ive

__all__ = ["skellam_logpmf", "skellam_privacy_loss", "skellam_tail_bound", "skellam_pld", "capped_masses", "pessimistic_pld"]

_DEBYE_MIN_Z = 2000.0  # 2 mu at and above which the uniform expansion is used
_ENUMERATE_MAX = 2**21  # supports up to this many integers are summed term by term
_TAIL = 1e-20  # Chernoff bound on the mass left out on each side
_ERR = 1e-12  # margin for floating-point error in the cumulative masses (added to the +inf mass)
_TOL = 1e-12  # margin (times 1 + |L|) for floating-point error in a privacy-loss value, added before rounding up
_GL_X, _GL_W = np.polynomial.legendre.leggauss(8)

# Debye polynomials: u_k(t) / v^k = r^k P_k(t^2), coefficients of P_k in powers of t^2 (DLMF 10.41.10)
_P = [np.array([3.0, -5.0]) / 24.0,
      np.array([81.0, -462.0, 385.0]) / 1152.0,
      np.array([30375.0, -369603.0, 765765.0, -425425.0]) / 414720.0,
      np.array([4465125.0, -94121676.0, 349922430.0, -446185740.0, 185910725.0]) / 39813120.0]


def _debye_logpmf(v, z: float) -> np.ndarray:
    # the expression of the module docstring, evaluated in place (the same operations in the same
    # order as the plain numpy expression, so the same bits: P_k by Horner's rule as numpy's polyval)
    v = np.abs(np.asarray(v, dtype=np.float64))
    shape = v.shape
    v = v.reshape(-1)
    s = np.hypot(v, z)
    r = 1.0 / s
    t2 = v * r
    t2 *= t2
    series = rk = None
    for coef in _P:
        rk = r if rk is None else rk * r
        term = coef[-1] * t2
        term += coef[-2]
        for c in coef[-3::-1]:
            term *= t2
            term += c
        term *= rk
        if series is None:
            series = term
        else:
            series += term
    s += z
    out = v * v
    out /= s
    w = v / z
    asinh = np.arcsinh(w)
    asinh *= v
    out -= asinh
    out -= 0.5 * math.log(2 * math.pi * z)
    w *= w
    np.log1p(w, out=w)
    w *= 0.25
    out -= w
    np.log1p(series, out=series)
    out += series
    return out.reshape(shape)[()]


def skellam_logpmf(x, mu: float) -> np.ndarray:
    """log P(X = x) for X ~ Sk(mu) = Pois(mu) - Pois(mu): log(e^{-2 mu} I_|x|(2 mu)).

    For 2 mu >= 2000 the even, smooth extension to real x (Debye's expansion,
    module docstring); below, ``scipy.special.ive`` at integers.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import skellam
    >>> from secure_auc.dp.skellam_pld import skellam_logpmf
    >>> x = np.array([-3, 0, 5])
    >>> bool(np.allclose(skellam_logpmf(x, 2.5), skellam.logpmf(x, 2.5, 2.5), rtol=1e-12))
    True
    >>> round(float(np.exp(skellam_logpmf(0, 1e12)) * np.sqrt(4 * np.pi * 1e12)), 9)  # N(0, 2 mu) at 0
    1.0
    """
    z = 2.0 * float(mu)
    if z >= _DEBYE_MIN_Z:
        return _debye_logpmf(x, z)
    with np.errstate(divide="ignore"):
        return np.log(ive(np.abs(np.asarray(x, dtype=np.float64)), z))


def skellam_privacy_loss(x, mu: float, sensitivity: int) -> np.ndarray:
    """L(x) = log p(x) - log p(x - Delta) for Sk(mu) noise and a shift Delta (non-increasing in x)."""
    x = np.asarray(x, dtype=np.float64)
    return skellam_logpmf(x, mu) - skellam_logpmf(x - sensitivity, mu)


def _dlogpmf(v, z: float) -> np.ndarray:
    """d/dv log p(v), to O(r^2): -asinh(v / z) - v / (2 (v^2 + z^2))."""
    v = np.asarray(v, dtype=np.float64)
    return -np.arcsinh(v / z) - v / (2.0 * (v * v + z * z))


def skellam_tail_bound(t: float, mu: float) -> float:
    """Chernoff bound on P(X >= t) = P(X <= -t), X ~ Sk(mu), t >= 0: exp(-2 mu phi(t / (2 mu)))."""
    z = 2.0 * mu
    s = t / z
    return math.exp(-z * (s * math.asinh(s) - math.hypot(1.0, s) + 1.0))


def _tail_point(mu: float, target: float) -> int:
    """The smallest integer t >= 1 with skellam_tail_bound(t, mu) <= target."""
    lo, hi = 0, max(8, int(8 * math.sqrt(2 * mu)))
    while skellam_tail_bound(hi, mu) > target:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if skellam_tail_bound(mid, mu) <= target else (mid, hi)
    return hi


def _cuts(mu: float, d: int, lo: int, hi: int, h: float) -> np.ndarray:
    """Cut points: for every grid value k h in the range of L on [lo, hi], the largest x with L(x) >= k h."""
    top, bottom = float(skellam_privacy_loss(lo, mu, d)), float(skellam_privacy_loss(hi, mu, d))
    levels = np.arange(math.ceil(bottom / h), math.floor(top / h) + 1, dtype=np.float64) * h
    # bracket [a, b) around x(l) ~ Delta / 2 - 2 mu sinh(l / Delta) (L(x) ~ -Delta asinh((x - Delta/2) / (2 mu)))
    guess = np.floor(d / 2.0 - 2.0 * mu * np.sinh(levels / d)).astype(np.int64)
    # the guess is nearly always the cut itself (else one off): first the bracket [guess, guess + 1],
    # where it fails [guess - 64, guess + 64], else the whole range; L(a) >= level > L(b) (b = hi + 1:
    # beyond the support), and the bisection below leaves a valid bracket of width 1 as it is
    a = np.empty_like(guess)
    b = np.empty_like(guess)
    todo = np.arange(levels.size)
    for below, above in ((0, 1), (64, 64)):
        ta = np.clip(guess[todo] - below, lo, hi + 1)
        tb = np.clip(guess[todo] + above, lo, hi + 1)
        lv = levels[todo]
        bad = (skellam_privacy_loss(ta, mu, d) < lv) | ((tb <= hi) & (skellam_privacy_loss(tb, mu, d) >= lv))
        a[todo], b[todo] = ta, tb
        todo = todo[bad]
    a[todo], b[todo] = lo, hi + 1
    while True:
        idx = np.nonzero(b - a > 1)[0]
        if idx.size == 0:
            break
        mid = (a[idx] + b[idx]) // 2
        ok = skellam_privacy_loss(mid, mu, d) >= levels[idx]
        a[idx[ok]] = mid[ok]
        b[idx[~ok]] = mid[~ok]
    sigma = math.sqrt(2 * mu)
    grid = np.arange(lo - 1, hi + 1, max(1, int(sigma / 100)), dtype=np.int64)
    cuts = np.sort(np.concatenate([a, grid, [lo - 1, hi]]))
    # np.unique of the sorted integers, by hand: numpy's unique of integers hashes them, ~20 times slower
    return cuts[np.concatenate([[True], cuts[1:] != cuts[:-1]])]


@lru_cache(maxsize=16)
def skellam_pld(mu: float, sensitivity: int, value_discretization_interval: float = 1e-4,
                enumerate_max: int = _ENUMERATE_MAX):
    """Pessimistic ``dp_accounting`` PLD of Sk(mu) noise on an integer statistic of sensitivity Delta.

    Parameters
    ----------
    mu : float
        Poisson mean of each side: the noise has variance 2 mu.
    sensitivity : int
        Delta >= 1, the largest change of the statistic between neighbours.
    value_discretization_interval : float, default 1e-4
        Grid h of the privacy-loss values (losses are rounded up to it).
    enumerate_max : int
        Supports of at most this many integers are summed term by term;
        larger ones by quadrature (module docstring).

    Returns
    -------
    dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution

    Examples
    --------
    For a large mu the Skellam is close to the Gaussian of the same variance:

    >>> from dp_accounting.pld import privacy_loss_distribution as pld
    >>> from secure_auc.dp.skellam_pld import skellam_pld
    >>> mu, d = 2e6, 1000
    >>> sk = skellam_pld(mu, d).get_epsilon_for_delta(1e-6)
    >>> ga = pld.from_gaussian_mechanism((2 * mu) ** 0.5 / d).get_epsilon_for_delta(1e-6)
    >>> bool(abs(sk - ga) < 2e-3)
    True
    """
    mu, d, h = float(mu), int(sensitivity), float(value_discretization_interval)
    if not (mu > 0 and math.isfinite(mu)) or d < 1 or d != sensitivity:
        raise ValueError(f"need mu > 0 and an integer sensitivity >= 1, got mu = {mu}, sensitivity = {sensitivity}")
    t = _tail_point(mu, _TAIL)
    lo, hi = -t, t  # x < lo: mass <= _TAIL (losses highest); x > hi: mass <= _TAIL (lowest)
    if hi - lo + 1 <= enumerate_max:
        first = np.arange(lo, hi + 1)  # block j = {first[j]}
        mass = np.exp(skellam_logpmf(first, mu))
    else:
        cuts = _cuts(mu, d, lo, hi, h)
        a, b = cuts[:-1] + 0.5, cuts[1:] + 0.5
        half = (b - a)[:, None] / 2.0
        nodes = (a + b)[:, None] / 2.0 + half * _GL_X[None, :]
        integrals = (np.exp(skellam_logpmf(nodes, mu)) @ _GL_W) * half[:, 0]
        first = cuts[:-1] + 1
        # Euler-Maclaurin (midpoint form): the sum of f over c' < x <= c is the integral of f over
        # [c' + 1/2, c + 1/2] minus (f'(c + 1/2) - f'(c' + 1/2)) / 24, up to O(f''') terms
        fprime = np.exp(skellam_logpmf(cuts + 0.5, mu)) * _dlogpmf(cuts + 0.5, 2.0 * mu)
        mass = np.maximum(0.0, integrals - np.diff(fprime) / 24.0)
    infinity = skellam_tail_bound(t, mu) + _ERR
    mass, rest = capped_masses(mass, infinity)  # rest: x > hi, losses below L(hi + 1)
    losses = skellam_privacy_loss(first, mu, d)
    if np.isnan(losses).any() or (losses == -np.inf).any():
        raise ValueError(f"Skellam privacy loss out of floating-point range (mu = {mu}, sensitivity = {d})")
    beyond = np.isinf(losses)  # p(x - Delta) underflows (Delta >> sqrt(mu)): the loss counts as +infinity
    if beyond.any():
        infinity += float(mass[beyond].sum())
        first, mass, losses = first[~beyond], mass[~beyond], losses[~beyond]
    last = float(skellam_privacy_loss(hi + 1, mu, d))
    if math.isinf(last):
        infinity += rest
        rest, last = 0.0, float(losses.min()) if losses.size else 0.0
    return pessimistic_pld(losses, mass, last, rest, infinity, h)


def capped_masses(mass: np.ndarray, infinity: float) -> tuple[np.ndarray, float]:
    """Block masses (highest losses first) after the mass ``infinity`` at +infinity, and the rest.

    The cumulative masses infinity + sum_{i <= j} mass_i are upper bounds of P(X <= c_j) (their
    margin is in ``infinity``); where they pass 1 (rounding), the masses of the lowest losses are cut
    so that the total is 1.  The rest, 1 minus the total, belongs to the losses beyond the last block.
    """
    cum = infinity + np.cumsum(mass.astype(np.longdouble))
    over = cum > 1
    if over.any():
        upper = np.minimum(cum, 1)
        mass = np.where(over, np.diff(np.concatenate([[infinity], upper])).astype(np.float64), mass)
    return mass, float(max(0, 1 - min(cum[-1], 1)))


def pessimistic_pld(losses, mass, last: float, rest: float, infinity: float, h: float):
    """dp-accounting PLD with each block's ``mass`` on its largest loss ``losses`` rounded up to the
    grid h (margin _TOL for floating-point error), ``rest`` on ``last`` and ``infinity`` on +infinity."""
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

    rounded = np.ceil((losses + _TOL * (1 + np.abs(losses))) / h).astype(np.int64)
    keys = np.concatenate([rounded, [math.ceil((last + _TOL * (1 + abs(last))) / h)]])
    vals = np.concatenate([mass, [rest]])
    base = keys.min()
    acc = np.bincount(keys - base, weights=vals)
    nz = np.nonzero(acc)[0]
    if nz.size > getattr(pld_pmf, "_MAX_PMF_SPARSE_SIZE", math.inf):
        # the dense pmf that create_from_rounded_probability makes of the dict below (from its lowest
        # to its highest key, zeros between), made from the array without the dict of 1e4..1e6 entries
        dense = pld_pmf.DensePLDPmf(h, int(base + nz[0]), acc[nz[0]:nz[-1] + 1], infinity, True)
        return PrivacyLossDistribution(dense)
    pmf = {int(k + base): float(acc[k]) for k in nz}
    return PrivacyLossDistribution.create_from_rounded_probability(pmf, infinity, h, pessimistic_estimate=True)
