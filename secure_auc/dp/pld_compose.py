"""dp-accounting's T-fold self-composition of a PLD, with the same result in a fraction of the time.

``PrivacyLossDistribution.self_compose(T)`` convolves the pmf of the privacy loss with itself by
FFT, on the range that a Chernoff bound says holds all but 1e-15 of the composed mass
(``dp_accounting.pld.common.compute_self_convolve_bounds``).  The bound needs log E exp(t L) at 40
orders t, each a ``scipy.special.logsumexp`` call whose checks and copies cost ~20 times the
arithmetic: about 30 ms for a pmf of 3e4 losses, more than the FFT, and the calibration of one
evaluation composes dozens of PLDs (the planner hundreds).  :func:`self_compose` does the same
steps with the same arithmetic (scipy 1.17's logsumexp: the largest term set apart, log1p of
the rest over it), so the composed PLD is the one dp-accounting makes, bit for bit
(``tests/test_accountant.py`` compares them); were a later scipy to sum in another order, the
bound would move by a rounding error, as valid a Chernoff bound as dp-accounting's own.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["self_compose", "self_convolve_bounds"]

_TRUNCATION = 1e-15  # dp-accounting's default tail_mass_truncation of self_compose


def _log_mgf(probs: np.ndarray, index: np.ndarray, zero: np.ndarray, order: float) -> float:
    """``scipy.special.logsumexp(index * order, b=probs)``, the same operations in the same order."""
    a = index * order
    a[zero] = -np.inf  # a zero weight adds nothing, whatever its exponent
    a_max = a.max()
    top = a == a_max
    a[top] = -np.inf
    m = np.sum(probs * top.astype(np.float64))  # the largest terms' weights, set apart
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s = np.sum(probs * np.exp(a - a_max))
        if s != 0:
            s = s / m
        sign = np.sign(s + 1) * np.sign(m)
        if s < -1:
            s = -s - 2
        out = np.log1p(s) + np.log(abs(m)) + a_max
        if sign < 0:
            out = np.nan
        if not np.isfinite(out):  # scipy's fallback: the sum taken directly
            out = np.log(np.sum(probs * np.exp(index * order)))
    return out


def self_convolve_bounds(probs, num_times: int, tail_mass_truncation: float = _TRUNCATION) -> tuple[int, int]:
    """``dp_accounting.pld.common.compute_self_convolve_bounds``: the index range of the
    ``num_times``-fold self-convolution of ``probs`` outside which the Chernoff bound at 40 orders
    leaves at most ``tail_mass_truncation``."""
    probs = np.asarray(probs, dtype=np.float64)
    upper, lower = (len(probs) - 1) * num_times, 0
    if tail_mass_truncation == 0:
        return lower, upper
    orders = np.concatenate((np.arange(-20, 0), np.arange(1, 21))) / len(probs)
    index = np.arange(len(probs)).astype(np.float64)
    zero = probs == 0
    log_two_over = math.log(2 / tail_mass_truncation)
    for order in orders:
        bound = (num_times * _log_mgf(probs, index, zero, order) + log_two_over) / order
        if not math.isfinite(bound):
            continue
        if order > 0:
            upper = min(upper, math.ceil(bound))
        else:
            lower = max(lower, math.floor(bound))
    return lower, upper


def _dense_self_compose(pmf, num_times: int, tail_mass_truncation: float):
    """``DensePLDPmf.self_compose`` (with ``common.self_convolve``), the bounds from :func:`self_convolve_bounds`."""
    from dp_accounting.pld import pld_pmf
    from scipy import fft

    probs = pmf._probs
    lower, upper = self_convolve_bounds(probs, num_times, tail_mass_truncation)
    length = upper - lower + 1
    fast = fft.next_fast_len(max(length, len(probs)))
    convolved = np.real(fft.ifft(fft.fft(probs, fast) ** num_times))
    out = np.array(np.roll(convolved, -lower)[:length])
    infinity = tail_mass_truncation - math.expm1(num_times * math.log1p(-pmf._infinity_mass))
    return pld_pmf.DensePLDPmf(pmf._discretization, pmf._lower_loss * num_times + lower, out, infinity,
                               pmf._pessimistic_estimate)


def _pmf_self_compose(pmf, num_times: int, tail_mass_truncation: float):
    from dp_accounting.pld import pld_pmf

    if num_times <= 0:
        raise ValueError(f"num_times should be >= 1, num_times={num_times}")
    if isinstance(pmf, pld_pmf.SparsePLDPmf):
        if num_times == 1 or pmf.size**num_times <= pld_pmf._MAX_PMF_SPARSE_SIZE:
            return pmf.self_compose(num_times, tail_mass_truncation)  # no Chernoff bound on this path
        pmf = pmf.to_dense_pmf()
    if type(pmf) is not pld_pmf.DensePLDPmf:
        return pmf.self_compose(num_times, tail_mass_truncation)
    return _dense_self_compose(pmf, num_times, tail_mass_truncation)


def self_compose(pld, num_times: int, tail_mass_truncation: float = _TRUNCATION):
    """``pld.self_compose(num_times, tail_mass_truncation)`` for a dp-accounting
    ``PrivacyLossDistribution``: the same PLD, faster (module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> from dp_accounting.pld.privacy_loss_distribution import from_gaussian_mechanism
    >>> from secure_auc.dp.pld_compose import self_compose
    >>> pld = from_gaussian_mechanism(2.0, value_discretization_interval=1e-3)
    >>> ours, theirs = self_compose(pld, 10)._pmf_remove, pld.self_compose(10)._pmf_remove
    >>> ours._lower_loss == theirs._lower_loss and bool(np.array_equal(ours._probs, theirs._probs))
    True
    """
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

    remove = _pmf_self_compose(pld._pmf_remove, num_times, tail_mass_truncation)
    if pld._symmetric:
        return PrivacyLossDistribution(remove)
    return PrivacyLossDistribution(remove, _pmf_self_compose(pld._pmf_add, num_times, tail_mass_truncation))
