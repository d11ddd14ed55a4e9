r"""A compiled pass for many intervals at once (:func:`secure_auc.result.interval_bounds` over
thousands of estimates, as a coverage study asks): for each estimate, the errors of the
parametric bootstrap's 20,000 draws are computed, their undefined share counted and the
two outer quantiles found in one pass over the draws, with the arithmetic of the numpy code
operation for operation (the same bits: no reassociation, no fused multiply-add, numpy's
``linear`` interpolation between the same two order statistics).

The quantiles' order statistics are found as :func:`secure_auc.result.outer_quantiles` finds
them: a threshold from the first ``SAMPLE`` errors leaves about twice the entries needed
beyond it; those are selected in place (quickselect), and a row where the threshold leaves
too few is sorted whole.  Rows whose estimate or P' is not finite are left to the numpy code
(``done`` is False there).

Compiled code is cached where the rank step's kernels are (:func:`secure_auc.compile_cache.cache_dir`;
``tests/test_interval_kernels.py`` checks that the two folders are one).

Examples
--------
>>> import numpy as np
>>> from secure_auc.interval_kernels import bounds
>>> rng = np.random.default_rng(0)
>>> e_s, e_p = rng.normal(0, 50, 20_000), rng.normal(0, 1, 20_000)
>>> lo, hi, undefined, done = bounds(np.array([0.7]), np.array([40.0]), e_s, e_p, 100, rr_rho=-1.0,
...                                  limit=0.01)
>>> bool(done[0]) and bool(lo[0] < 0.7 < hi[0]) and float(undefined[0]) == 0.0
True
"""

from __future__ import annotations

import math

import numpy as np

from .compile_cache import use_cache

CACHE = use_cache()  # the user's cache folder, the rank step's kernels' too, before anything below is defined

from numba import njit  # noqa: E402

__all__ = ["bounds", "SAMPLE"]

SAMPLE = 512  # errors of each row that set its thresholds


@njit(cache=True, nogil=True, error_model="numpy")
def _select(x, n, k):
    """Move the k-th smallest of x[:n] to x[k], smaller ones before it, larger after (quickselect)."""
    lo, hi = 0, n - 1
    while hi > lo:
        pivot = x[(lo + hi) // 2]
        i, j = lo, hi
        while i <= j:
            while x[i] < pivot:
                i += 1
            while x[j] > pivot:
                j -= 1
            if i <= j:
                x[i], x[j] = x[j], x[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            return


@njit(cache=True, nogil=True, error_model="numpy")
def _pair(x, n, k):
    """The k-th and (k + 1)-th smallest of x[:n] (0-based; x[:n] is reordered)."""
    _select(x, n, k)
    if k + 1 >= n:  # numpy clips the next index to the last
        return x[k], x[k]
    nxt = x[k + 1]
    for j in range(k + 2, n):
        if x[j] < nxt:
            nxt = x[j]
    return x[k], nxt


@njit(cache=True, nogil=True, error_model="numpy")
def _lerp(a, b, t):
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


@njit(cache=True, nogil=True, error_model="numpy")
def _errors(a, p, e_s, e_p, m, rr_rho, d):
    """d[j] = estimate(draw j) - a for every draw; returns how many draws leave it defined
    (then d[:k] holds those, in order, when k < n)."""
    n = e_s.size
    ca = min(max(a, 0.0), 1.0)
    s = ca * p * (m - p) + p * (p - 1) / 2.0  # the S that gives the estimate at P
    k = 0
    if rr_rho < 0:
        for j in range(n):
            pn = p + e_p[j]
            d[j] = (s + e_s[j] - pn * (pn - 1.0) / 2.0) / (pn * (m - pn)) - a
            k += (pn > 0) & (pn < m)
    else:
        rho = rr_rho
        c1 = 1 - 2 * rho
        c2 = rho * m * (m - 1) / 2.0
        c3 = rho * m
        for j in range(n):
            sn = c1 * s + c2 + e_s[j]
            pn = c1 * p + c3 + e_p[j]
            nn = m - pn
            noisy = (sn - pn * (pn - 1.0) / 2.0) / (pn * nn)
            p_est = (pn * (1.0 - rho) - nn * rho) / (1.0 - 2.0 * rho)
            n_est = pn + nn - p_est
            pi = p_est / (p_est + n_est)
            fa = (1.0 - pi) * rho / (pi * (1.0 - rho) + (1.0 - pi) * rho)
            fb = pi * rho / (pi * rho + (1.0 - pi) * (1.0 - rho))
            d[j] = (noisy - (fa + fb) / 2.0) / (1.0 - fa - fb) - a
            k += (p_est > 0) & (p_est < m) & (pn > 0) & (pn < m)
    if k < n:  # keep the defined ones, in order
        kept = 0
        for j in range(n):
            if rr_rho < 0:
                pn = p + e_p[j]
                ok = (pn > 0) & (pn < m)
            else:
                pn = (1 - 2 * rr_rho) * p + rr_rho * m + e_p[j]
                nn = m - pn
                p_est = (pn * (1.0 - rr_rho) - nn * rr_rho) / (1.0 - 2.0 * rr_rho)
                ok = (p_est > 0) & (p_est < m) & (pn > 0) & (pn < m)
            if ok:
                d[kept] = d[j]
                kept += 1
    return k


@njit(cache=True, nogil=True, error_model="numpy")
def _bounds(auc, positives, e_s, e_p, m, rr_rho, limit, q_lo, q_hi, sample):
    rows, n = auc.size, e_s.size
    lo = np.full(rows, -np.inf)
    hi = np.full(rows, np.inf)
    undefined = np.ones(rows)
    done = np.zeros(rows, dtype=np.bool_)
    d = np.empty(n)
    head = np.empty(sample)
    low = np.empty(n)
    high = np.empty(n)
    for i in range(rows):
        a, p0 = auc[i], positives[i]
        if not (math.isfinite(a) and math.isfinite(p0)):
            continue
        done[i] = True
        p = min(max(p0, 0.5), m - 0.5)
        k = _errors(a, p, e_s, e_p, m, rr_rho, d)
        bad = 1.0 - k / n
        undefined[i] = bad
        if not bad <= limit:
            continue
        v_lo, v_hi = (k - 1) * q_lo, (k - 1) * q_hi  # numpy's virtual indexes (method "linear")
        at_lo, at_hi = math.floor(v_lo), math.floor(v_hi)
        g_lo, g_hi = v_lo - at_lo, v_hi - at_hi
        i_lo, i_hi = int(at_lo), int(at_hi)
        need_lo, need_hi = i_lo + 2, k - i_hi
        smp = min(sample, k)
        j_lo = min(smp - 1, int(math.ceil(2 * need_lo * smp / k)) + 32)
        j_hi = min(smp - 1, int(math.ceil(2 * need_hi * smp / k)) + 32)
        found = False
        if j_lo + j_hi < smp - 1 and 4 * smp <= k:
            head[:smp] = d[:smp]
            _select(head, smp, j_lo)
            t_lo = head[j_lo]
            _select(head, smp, smp - 1 - j_hi)
            t_hi = head[smp - 1 - j_hi]
            c_lo = c_hi = 0
            for j in range(k):
                x = d[j]
                if x <= t_lo:
                    low[c_lo] = x
                    c_lo += 1
                if x >= t_hi:
                    high[c_hi] = x
                    c_hi += 1
            if c_lo >= need_lo and c_hi >= need_hi:
                x0, x1 = _pair(low, c_lo, i_lo)
                y0, y1 = _pair(high, c_hi, c_hi - k + i_hi)
                found = True
        if not found:
            x0, x1 = _pair(d, k, i_lo)
            y0, y1 = _pair(d, k, i_hi)
        lo[i] = a - _lerp(y0, y1, g_hi)
        hi[i] = a - _lerp(x0, x1, g_lo)
    return lo, hi, undefined, done


def bounds(auc, positives, e_s, e_p, total: int, *, rr_rho: float, limit: float,
           q=(0.025, 0.975)):
    """Bounds, undefined shares and which rows were done (the others: estimate or P' not finite)
    of :func:`secure_auc.result.interval_bounds` for estimates ``auc`` with P' ``positives``, from
    the noise draws ``e_s``, ``e_p``; ``rr_rho``: randomized response's flip probability, or
    -1 for the other mechanisms; ``limit``: the largest undefined share that gives an interval.

    Parameters
    ----------
    auc, positives : numpy.ndarray of float64
    e_s, e_p : numpy.ndarray of float64
    total : int
    rr_rho : float
    limit : float
    q : tuple of float

    Returns
    -------
    tuple of numpy.ndarray
        lo, hi, undefined share, done (bool).
    """
    return _bounds(np.ascontiguousarray(auc, dtype=np.float64), np.ascontiguousarray(positives, dtype=np.float64),
                   np.ascontiguousarray(e_s, dtype=np.float64), np.ascontiguousarray(e_p, dtype=np.float64),
                   float(int(total)), float(rr_rho), float(limit), float(q[0]), float(q[1]), SAMPLE)


def warm_up() -> None:
    """Compile the pass (or load it from the cache) for the types :func:`bounds` gives it."""
    x = np.linspace(-1.0, 1.0, 64)
    bounds(np.array([0.5]), np.array([20.0]), x, x, 40, rr_rho=-1.0, limit=0.01)
