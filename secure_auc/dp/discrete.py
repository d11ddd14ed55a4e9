"""Exact integer noise: discrete Laplace and discrete Gaussian (Canonne, Kamath, Steinke 2020).

Floating-point Laplace and Gaussian samplers have a porous support (Mironov
2012): which doubles can come out depends on the value noised, and that leaks
it.  Here every noise is an integer multiple of a grid step g (the protocol's
fixed point, 2^-8), drawn *exactly* with integer arithmetic only from a stream
of uniform integers (the client's own stream, :mod:`.streams`):

* :func:`bernoulli_exp` draws Bernoulli(exp(-gamma)) for a rational gamma
  (CKS Algorithm 1: Bernoulli(gamma / k) for k = 1, 2, ... as long as it
  succeeds; the result is 1 iff the number of trials is odd);
* :func:`discrete_laplace` draws DLap(t / s), P(x) proportional to exp(-|x| s / t)
  on the integers (CKS Algorithm 2);
* :func:`discrete_gaussian` draws N_Z(0, sigma^2), P(x) proportional to
  exp(-x^2 / (2 sigma^2)) on the integers, by rejection from a discrete
  Laplace (CKS Algorithm 3);
* :func:`logistic_bernoulli` draws Bernoulli(1 / (1 + e^eps)), the flip of
  randomized response, as the parity of a geometric with q = exp(-eps);
* :func:`negative_binomial` draws NB(r, q), q = exp(-1 / scale), for a
  rational r > 0 (the shares of a discrete Laplace): geometrics (the one-sided
  part of CKS Algorithm 2) and, for a fractional r, a geometric split by a
  Polya urn drawn as the cycles of a uniform permutation.

Each works on whole arrays (one entry per client and repetition), with the
rejection loops running over the entries not yet accepted.  The uniform
integers come from a :class:`~.streams.Uniforms` source (exactly uniform,
rejection of the low words): a numpy ``Generator`` in analysis, the clients'
own streams (:class:`~.streams.KeyStreams`) in a release, where entry i
of an array with one entry per client draws from client i's stream only.  Every
choice an entry's draws depend on is made per entry, so a client draws the same
noise alone or among any number of clients served together.  Ratios too large
for int64 are compared bit by bit (the lazy binary expansion of num / den),
exactly.

Privacy on the grid.  A statistic x on the grid gZ with sensitivity
Delta = k g (k an integer) plus g DLap(t) with t >= k / eps is eps-DP: the
released value is on the grid for every input, and the ratio of probabilities
of any output is at most exp(k / t).  With g N_Z(0, s^2) it is (eps, delta)-DP
for the delta of :func:`dgauss_delta` (CKS Theorem 7, exact), and
(k^2 / (2 s^2))-zCDP (CKS Theorem 4), the same as the continuous Gaussian.

Parameters are rounded *up* to rationals (scale t / s with s = 2^20 or, for
scales beyond 2^32, the largest power of two keeping t below 2^52; variance a / 2^20): the noise is then at least as large as the calibration asks.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .streams import Uniforms, as_uniforms

__all__ = [
    "DENOMINATOR",
    "bernoulli_exp",
    "discrete_laplace",
    "discrete_gaussian",
    "negative_binomial",
    "logistic_bernoulli",
    "dlap_variance",
    "dgauss_variance",
    "dgauss_delta",
    "dgauss_tail",
    "dgauss_sigma",
]

DENOMINATOR = 1 << 20  # denominators of the rational parameters
_INT64_SAFE = 1 << 62


def _bernoulli_ratio(src: Uniforms, owner: np.ndarray, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Bernoulli(num / den) for integers 0 <= num <= den, exactly (elementwise).

    Entries with den < 2^62 compare one uniform integer below den with num;
    larger ones compare uniform bits with the lazy binary expansion of num / den
    until they differ.  The choice is per entry, so an entry's draws never depend
    on the other entries of the call.
    """
    num = np.asarray(num).ravel()
    den = np.broadcast_to(np.asarray(den), num.shape).ravel()
    out = np.zeros(num.shape, dtype=bool)
    if num.size == 0:
        return out
    if num.dtype != object and den.dtype != object:
        small = den < _INT64_SAFE
    else:
        small = np.fromiter((int(d) < _INT64_SAFE for d in den), dtype=bool, count=den.size)
    idx = np.flatnonzero(small)
    if idx.size:
        d = den[idx].astype(np.int64)
        out[idx] = src.below(owner[idx], d) < num[idx].astype(np.int64)
    big = np.flatnonzero(~small)
    if big.size:
        r = num[big].astype(object).copy()
        d = den[big].astype(object)
        todo = np.arange(big.size)
        res = np.zeros(big.size, dtype=bool)
        while todo.size:
            r2 = r[todo] * 2
            pbit = r2 >= d[todo]
            r[todo] = np.where(pbit, r2 - d[todo], r2)
            bit = src.below(owner[big[todo]], 2).astype(bool)
            decided = bit != pbit
            res[todo[decided]] = pbit[decided]  # uniform bit 0 < p bit 1: U < p
            todo = todo[~decided]
        out[big] = res
    return out


def _bernoulli_exp_unit(src: Uniforms, owner, num, den) -> np.ndarray:
    """Bernoulli(exp(-num/den)) for 0 <= num <= den (CKS Algorithm 1)."""
    num, den = np.asarray(num).ravel(), np.broadcast_to(np.asarray(den), np.shape(num)).ravel()
    out = np.zeros(num.size, dtype=bool)
    k = np.ones(num.size, dtype=np.int64)
    todo = np.arange(num.size)
    while todo.size:
        d = den[todo]
        if d.dtype != object and int(k[todo].max()) > _INT64_SAFE // max(int(d.max()), 1):
            d = d.astype(object)  # den k beyond int64: Python integers
        a = _bernoulli_ratio(src, owner[todo], num[todo], d * k[todo])
        k[todo[a]] += 1
        stop = todo[~a]
        out[stop] = k[stop] % 2 == 1
        todo = todo[a]
    return out


def _bernoulli_exp(src: Uniforms, owner: np.ndarray, num, den) -> np.ndarray:
    num = np.asarray(num).ravel()
    den = np.broadcast_to(np.asarray(den), num.shape).ravel()
    big = num.dtype == object or den.dtype == object
    whole = num // den
    frac = num - whole * den
    out = np.ones(num.shape, dtype=bool)
    # exp(-gamma) = exp(-1)^floor(gamma) exp(-frac(gamma))
    wmax = int(whole.max()) if whole.size else 0
    for j in range(wmax):
        idx = np.flatnonzero(out & (whole > j))
        if not idx.size:
            break
        one = np.ones(idx.size, dtype=np.int64)
        out[idx] = _bernoulli_exp_unit(src, owner[idx], one, one)
    idx = np.flatnonzero(out)
    if idx.size:
        fn, fd = frac[idx], den[idx]
        if not big:
            fn, fd = fn.astype(np.int64), fd.astype(np.int64)
        out[idx] = _bernoulli_exp_unit(src, owner[idx], fn, fd)
    return out


def bernoulli_exp(rng, num, den) -> np.ndarray:
    """Bernoulli(exp(-num / den)) for integers num >= 0, den >= 1, exactly (CKS Algorithm 1).

    Parameters
    ----------
    rng : numpy.random.Generator or secure_auc.dp.streams.Uniforms
        The source of uniform integers (a :class:`~.streams.KeyStreams` with
        several streams draws entry i from stream ``i mod streams``).
    num, den : array-like of int (int64 or Python ints)
        gamma = num / den, elementwise.

    Returns
    -------
    numpy.ndarray of bool

    Examples
    --------
    >>> import numpy as np
    >>> from secure_auc.dp.discrete import bernoulli_exp
    >>> b = bernoulli_exp(np.random.default_rng(0), np.full(100_000, 1), np.full(100_000, 2))
    >>> bool(abs(b.mean() - np.exp(-0.5)) < 0.005)
    True
    """
    num = np.asarray(num)
    src = as_uniforms(rng)
    return _bernoulli_exp(src, src.owners(num.shape), num, den).reshape(num.shape)


def _shape(shape) -> tuple:
    return tuple(int(n) for n in shape) if isinstance(shape, (tuple, list)) else (int(shape),)


def _rational_up(x) -> tuple[np.ndarray, np.ndarray]:
    """(t, s) int64 with t / s >= x: s = 2^20, or a smaller power of two keeping t below 2^52."""
    x = np.asarray(x, dtype=np.float64)
    if np.any(~np.isfinite(x)) or np.any(x >= 2.0**52):
        raise ValueError("noise scale too large for exact sampling")
    bits = np.clip(52 - np.ceil(np.log2(np.maximum(x, 1.0))), 0, 20)
    s = np.exp2(bits)
    return np.ceil(x * s).astype(np.int64), s.astype(np.int64)


def _geometric_ts(src: Uniforms, owner: np.ndarray, t: np.ndarray, s) -> np.ndarray:
    """G with P(G = n) = (1 - q) q^n on {0, 1, ...}, q = exp(-s / t), for int64 arrays t, s >= 1.

    The one-sided part of CKS Algorithm 2: U uniform in [0, t) accepted with
    probability exp(-U / t) (else drawn again), V the number of Bernoulli(exp(-1))
    successes before the first failure; X = U + t V has P(X = x) proportional to
    exp(-x / t), and G = floor(X / s).
    """
    t = t.ravel()
    s = np.broadcast_to(np.asarray(s, dtype=np.int64), t.shape)
    u = np.zeros(t.size, dtype=np.int64)
    todo = np.arange(t.size)
    while todo.size:
        tt, who = t[todo], owner[todo]
        uu = src.below(who, tt)
        ok = _bernoulli_exp(src, who, uu, tt)
        u[todo[ok]] = uu[ok]
        todo = todo[~ok]
    # V: number of Bernoulli(exp(-1)) successes before the first failure (geometric)
    v = np.zeros(t.size, dtype=np.int64)
    live = np.arange(t.size)
    while live.size:
        one = np.ones(live.size, dtype=np.int64)
        a = _bernoulli_exp_unit(src, owner[live], one, one)
        v[live[a]] += 1
        live = live[a]
    return (u + t * v) // s


def _dlap_ts(src: Uniforms, owner: np.ndarray, t: np.ndarray, s) -> np.ndarray:
    """DLap(t / s) for int64 arrays t >= 1 and s >= 1 (CKS Algorithm 2): a geometric
    (:func:`_geometric_ts`) with a uniform sign, drawn again on (-, 0)."""
    t = t.ravel()
    s = np.broadcast_to(np.asarray(s, dtype=np.int64), t.shape)
    out = np.zeros(t.size, dtype=np.int64)
    todo = np.arange(t.size)
    while todo.size:
        who = owner[todo]
        y = _geometric_ts(src, who, t[todo], s[todo])
        neg = src.below(who, 2).astype(bool)
        ok = ~(neg & (y == 0))
        out[todo[ok]] = np.where(neg, -y, y)[ok]
        todo = todo[~ok]
    return out


def _below_int(src: Uniforms, owner: np.ndarray, high: int) -> np.ndarray:
    """Uniform integers in [0, high) for one Python int ``high`` >= 1 of any size: int64 up to
    2^62, else an object array of Python ints built from 62-bit words (rejection above ``high``)."""
    if high <= _INT64_SAFE:
        return src.below(owner, high)
    bits = high.bit_length()
    words = -(-bits // 62)
    out = np.empty(owner.size, dtype=object)
    todo = np.arange(owner.size)
    while todo.size:
        x = np.zeros(todo.size, dtype=object)
        for _ in range(words):
            x = x * (1 << 62) + src.below(owner[todo], 1 << 62).astype(object)
        x = x >> (62 * words - bits)  # uniform on [0, 2^bits), 2^bits < 2 high
        ok = np.array(x < high, dtype=bool)
        out[todo[ok]] = x[ok]
        todo = todo[~ok]
    return out


def _geometric_parity(src: Uniforms, owner: np.ndarray, s: int, t: int) -> np.ndarray:
    """Whether G is odd, for G with P(G = n) = (1 - q) q^n, q = exp(-s / t), Python ints s, t >= 1.

    G = floor(X / s) with P(X = x) proportional to exp(-x / t) on {0, 1, ...}, drawn as in
    :func:`_geometric_ts` (U uniform in [0, t) accepted with probability exp(-U / t), V the
    number of Bernoulli(exp(-1)) successes before the first failure, X = U + t V), with
    Python integers where t is beyond int64's safe range.
    """
    kind = np.int64 if t < _INT64_SAFE else object
    u = np.zeros(owner.size, dtype=kind)
    todo = np.arange(owner.size)
    while todo.size:
        who = owner[todo]
        uu = _below_int(src, who, t).astype(kind)
        ok = _bernoulli_exp(src, who, uu, np.full(todo.size, t, dtype=kind))
        u[todo[ok]] = uu[ok]
        todo = todo[~ok]
    v = np.zeros(owner.size, dtype=np.int64)
    live = np.arange(owner.size)
    while live.size:
        one = np.ones(live.size, dtype=np.int64)
        a = _bernoulli_exp_unit(src, owner[live], one, one)
        v[live[a]] += 1
        live = live[a]
    if kind is np.int64 and int(v.max(initial=0)) < _INT64_SAFE // t - 1:  # U + t V < 2^62
        return (u + t * v) // s % 2 == 1
    g = (u.astype(object) + t * v.astype(object)) // s
    return np.array(g % 2 == 1, dtype=bool)


def logistic_bernoulli(rng, epsilon: float, shape=None, *, owner=None) -> np.ndarray:
    """Bernoulli(1 / (1 + e^eps)) exactly, for every eps > 0 (the flip of randomized response).

    With G geometric, P(G = n) = (1 - q) q^n and q = exp(-eps),
    P(G odd) = q / (1 + q) = 1 / (1 + e^eps).  G is drawn with integer
    arithmetic only (the one-sided part of CKS Algorithm 2) at eps = s / t, the
    float's exact binary value, so the probability is exact for every eps: no
    floating-point 1 / (1 + e^eps) that rounds, or underflows to 0 above eps = 709.78.
    The expected work per entry is bounded for every eps (about three
    Bernoulli(exp(-gamma)) trials for U and 1.6 for V).

    Parameters
    ----------
    rng : numpy.random.Generator or secure_auc.dp.streams.Uniforms
        The source of uniform integers.
    epsilon : float
        eps > 0; ``inf`` gives no flip.
    shape : tuple, optional
        Output shape; default: the shape of ``owner``.
    owner : array-like of int, optional
        With a :class:`~.streams.KeyStreams` of several streams, the stream of
        each entry (default: :meth:`~.streams.Uniforms.owners` of ``shape``).

    Returns
    -------
    numpy.ndarray of bool

    Examples
    --------
    >>> import math
    >>> import numpy as np
    >>> from secure_auc.dp.discrete import logistic_bernoulli
    >>> f = logistic_bernoulli(np.random.default_rng(0), math.log(3), (100_000,))
    >>> bool(abs(f.mean() - 0.25) < 0.005)
    True
    """
    src = as_uniforms(rng)
    if owner is None:
        shape = _shape(shape)
        who = src.owners(shape)
    else:
        who = np.asarray(owner, dtype=np.int64).ravel()
        shape = np.shape(owner) if shape is None else _shape(shape)
    if math.isinf(epsilon) and epsilon > 0:
        return np.zeros(shape, dtype=bool)
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    frac = Fraction(float(epsilon))
    return _geometric_parity(src, who, frac.numerator, frac.denominator).reshape(shape)


def _beta_binomial_ts(src: Uniforms, owner: np.ndarray, n: np.ndarray, num: int, den: int) -> np.ndarray:
    """BetaBinomial(n, rho, 1 - rho) for an int64 array n >= 0 and rho = num / den in [0, 1].

    A Polya urn with initial weights rho and 1 - rho is the Chinese restaurant
    with concentration 1 whose tables are white with probability rho each
    (Blackwell & MacQueen 1973).  Its tables' sizes are the cycle lengths of a
    uniform permutation of n, drawn by stick breaking: L_1 uniform on {1..n},
    L_2 uniform on {1..n - L_1}, ... (about ln n + 0.58 steps); the result is
    the total size of the white tables.
    """
    n = n.ravel().copy()
    out = np.zeros(n.size, dtype=np.int64)
    kind = np.int64 if den < _INT64_SAFE else object
    todo = np.flatnonzero(n > 0)
    while todo.size:
        who = owner[todo]
        size = 1 + src.below(who, n[todo])
        white = _bernoulli_ratio(src, who, np.full(todo.size, num, dtype=kind), np.full(todo.size, den, dtype=kind))
        out[todo[white]] += size[white]
        n[todo] -= size
        todo = todo[n[todo] > 0]
    return out


def _negative_binomial_ts(src: Uniforms, owner: np.ndarray, r: Fraction, t: np.ndarray, s) -> np.ndarray:
    """NB(r, q), q = exp(-s / t): floor(r) geometrics plus NB(frac(r)), the white part of
    a geometric split by :func:`_beta_binomial_ts` (if X ~ NB(rho), Y ~ NB(1 - rho),
    X + Y ~ NB(1) and X given X + Y = n is BetaBinomial(n, rho, 1 - rho))."""
    t = t.ravel()
    out = np.zeros(t.size, dtype=np.int64)
    for _ in range(int(r)):
        out += _geometric_ts(src, owner, t, s)
    rho = r - int(r)
    if rho:
        out += _beta_binomial_ts(src, owner, _geometric_ts(src, owner, t, s), rho.numerator, rho.denominator)
    return out


def _dlap_fast(rng, scale: np.ndarray) -> np.ndarray:
    # floor(t E) for E ~ Exp(1) is geometric: P(floor(t E) >= k) = exp(-k / t)
    g1 = np.floor(rng.standard_exponential(scale.shape) * scale)
    g2 = np.floor(rng.standard_exponential(scale.shape) * scale)
    return (g1 - g2).astype(np.int64)


def discrete_laplace(rng, scale, shape=None, *, exact: bool = True) -> np.ndarray:
    """Exact DLap(scale): P(x) = (1 - q) / (1 + q) q^|x| on the integers, q = exp(-1 / scale).

    Parameters
    ----------
    rng : numpy.random.Generator or secure_auc.dp.streams.Uniforms
        The source of uniform integers; with ``exact=False`` a ``Generator``.
    scale : float or array-like
        t > 0 (rounded up to a multiple of 2^-20), broadcast against ``shape``;
        ``inf`` is not allowed, 0 gives 0.
    shape : tuple, optional
        Output shape (default: the shape of ``scale``).
    exact : bool, default True
        False: the same distribution as floor(t E1) - floor(t E2) with E1, E2
        standard exponentials from numpy (floating point; analysis and
        simulation only, much faster).

    Returns
    -------
    numpy.ndarray of int64

    Examples
    --------
    The variance is 2 q / (1 - q)^2:

    >>> import numpy as np
    >>> from secure_auc.dp.discrete import discrete_laplace, dlap_variance
    >>> x = discrete_laplace(np.random.default_rng(1), 3.0, (200_000,))
    >>> x.dtype, bool(abs(x.var() / dlap_variance(1 / 3.0) - 1) < 0.03)
    (dtype('int64'), True)
    """
    scale = np.asarray(scale, dtype=np.float64)
    shape = scale.shape if shape is None else _shape(shape)
    scale = np.broadcast_to(scale, shape)
    if not exact and scale.size and scale.min() > 0:
        return _dlap_fast(rng, scale)
    out = np.zeros(shape, dtype=np.int64)
    live = np.flatnonzero(scale.ravel() > 0)
    if live.size:
        flat = out.ravel()
        if exact:
            src = as_uniforms(rng)
            flat[live] = _dlap_ts(src, src.owners(shape)[live], *_rational_up(scale.ravel()[live]))
        else:
            flat[live] = _dlap_fast(rng, scale.ravel()[live])
        out = flat.reshape(shape)
    return out


def negative_binomial(rng, r, scale, shape=None) -> np.ndarray:
    """Exact NB(r, q): P(X = n) = C(n + r - 1, n) (1 - q)^r q^n on {0, 1, ...}, q = exp(-1 / scale).

    The sum of independent NB(r_i, q) is NB(sum r_i, q); NB(1, q) is the
    geometric, so h draws of NB(1/h, q) sum to a geometric and two such sums
    differ by DLap(scale).  Drawn with integer arithmetic only: floor(r)
    geometrics (the one-sided part of CKS Algorithm 2) plus, for the fractional
    part rho of r, a geometric G split by a Polya urn: the cycle lengths of a
    uniform permutation of G (stick breaking, L_1 uniform on {1..G}, L_2 on
    {1..G - L_1}, ...) are the tables of a Chinese restaurant, each white with
    probability rho, and X is the total size of the white tables
    (BetaBinomial(G, rho, 1 - rho) given G, which makes X ~ NB(rho, q)).
    Expected work per draw: floor(r) + 1 geometrics and about ln E[G] + 0.58
    uniform integers and Bernoulli(rho) trials.

    Parameters
    ----------
    rng : numpy.random.Generator or secure_auc.dp.streams.Uniforms
        The source of uniform integers.
    r : int, fractions.Fraction or float
        r > 0, used exactly (a float as its exact binary value).
    scale : float or array-like
        T > 0 (rounded up as in :func:`discrete_laplace`: q is at least
        exp(-1 / T)), broadcast against ``shape``.
    shape : tuple, optional
        Output shape (default: the shape of ``scale``).

    Returns
    -------
    numpy.ndarray of int64

    Examples
    --------
    The mean is r q / (1 - q):

    >>> import numpy as np
    >>> from fractions import Fraction
    >>> from secure_auc.dp.discrete import negative_binomial
    >>> x = negative_binomial(np.random.default_rng(3), Fraction(1, 3), 20.0, (100_000,))
    >>> q = np.exp(-1 / 20.0)
    >>> x.dtype, bool(abs(x.mean() / (q / (1 - q) / 3) - 1) < 0.02)
    (dtype('int64'), True)
    """
    r = Fraction(r)
    if r <= 0:
        raise ValueError(f"the negative binomial needs r > 0, got {r}")
    scale = np.asarray(scale, dtype=np.float64)
    shape = scale.shape if shape is None else _shape(shape)
    scale = np.broadcast_to(scale, shape)
    if scale.size and not scale.min() > 0:
        raise ValueError("the negative binomial needs a scale > 0")
    src = as_uniforms(rng)
    t, s = _rational_up(scale.ravel())
    return _negative_binomial_ts(src, src.owners(shape), r, t, s).reshape(shape)


def discrete_gaussian(rng, sigma, shape=None, *, exact: bool = True) -> np.ndarray:
    """Exact N_Z(0, sigma^2): P(x) proportional to exp(-x^2 / (2 sigma^2)) on the integers.

    CKS Algorithm 3: draw Y ~ DLap(t) with t = floor(sigma) + 1, accept with
    probability exp(-(|Y| - sigma^2 / t)^2 / (2 sigma^2)) (exactly, with
    sigma^2 rounded up to a multiple of 2^-20).

    Parameters
    ----------
    rng : numpy.random.Generator or secure_auc.dp.streams.Uniforms
        The source of uniform integers; with ``exact=False`` a ``Generator``.
    sigma : float or array-like
        sigma >= 0, broadcast against ``shape``; 0 gives 0.
    shape : tuple, optional
    exact : bool, default True
        False: the same algorithm with the fast discrete Laplace and a
        floating-point acceptance test (analysis and simulation only).

    Returns
    -------
    numpy.ndarray of int64

    Examples
    --------
    >>> import numpy as np
    >>> from secure_auc.dp.discrete import discrete_gaussian
    >>> x = discrete_gaussian(np.random.default_rng(2), 4.0, (100_000,))
    >>> bool(abs(x.mean()) < 0.05), bool(abs(x.std() / 4.0 - 1) < 0.01)
    (True, True)
    """
    sigma = np.asarray(sigma, dtype=np.float64)
    shape = sigma.shape if shape is None else _shape(shape)
    sigma = np.broadcast_to(sigma, shape)
    out = np.zeros(shape, dtype=np.int64)
    live = np.flatnonzero(sigma > 0)
    if not live.size:
        return out
    s2 = np.ceil(sigma.ravel()[live] ** 2 * DENOMINATOR)  # sigma^2 = a / DENOMINATOR
    a = np.array([int(v) for v in s2], dtype=object)
    t = np.floor(np.sqrt(s2 / DENOMINATOR)).astype(np.int64) + 1
    todo = np.arange(live.size)
    res = np.zeros(live.size, dtype=np.int64)
    if exact:
        src = as_uniforms(rng)
        owner = src.owners(shape)[live]
    else:
        s2f = s2 / DENOMINATOR
        while todo.size:
            tt = t[todo]
            y = _dlap_fast(rng, tt.astype(np.float64))
            ok = rng.random(tt.size) < np.exp(-((np.abs(y) - s2f[todo] / tt) ** 2) / (2 * s2f[todo]))
            res[todo[ok]] = y[ok]
            todo = todo[~ok]
    while todo.size:
        tt, who = t[todo], owner[todo]
        y = _dlap_ts(src, who, tt, 1)
        at, tobj = a[todo], tt.astype(object)
        # gamma = (|y| - sigma^2/t)^2 / (2 sigma^2) = (|y| t D - a)^2 / (2 a D t^2)
        diff = np.abs(y).astype(object) * tobj * DENOMINATOR - at
        ok = _bernoulli_exp(src, who, diff * diff, 2 * at * DENOMINATOR * tobj * tobj)
        res[todo[ok]] = y[ok]
        todo = todo[~ok]
    out.ravel()[live] = res
    return out


# ---------------------------------------------------------------------------------------------
# moments and privacy
def dlap_variance(eps_per_unit) -> np.ndarray:
    """Variance 2q/(1-q)^2 of DLap with q = exp(-eps_per_unit) (eps_per_unit = 1 / scale = eps / Delta).

    Examples
    --------
    >>> from secure_auc.dp.discrete import dlap_variance
    >>> round(float(dlap_variance(1e-3) * 1e-6), 6)  # the Laplace limit 2 / a^2
    2.0
    """
    a = np.asarray(eps_per_unit, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return 2.0 * np.exp(-a) / np.expm1(-a) ** 2


def _dgauss_brute(sigma: float):
    r = int(math.ceil(40 * sigma)) + 40
    k = np.arange(-r, r + 1, dtype=np.float64)
    w = np.exp(-k * k / (2 * sigma * sigma))
    return k, w / w.sum()


def dgauss_variance(sigma) -> np.ndarray:
    """Variance of N_Z(0, sigma^2): sigma^2 up to exp(-2 pi^2 sigma^2) for sigma >= 1 (exact sum below).

    Examples
    --------
    >>> from secure_auc.dp.discrete import dgauss_variance
    >>> float(dgauss_variance(10.0))
    100.0
    >>> bool(dgauss_variance(0.3) < 0.3**2)
    True
    """
    s = np.asarray(sigma, dtype=np.float64)
    flat = (s * s).ravel()
    for i in np.flatnonzero(((s > 0) & (s < 1.5)).ravel()):
        k, p = _dgauss_brute(float(s.ravel()[i]))
        flat[i] = float(p @ (k * k))
    return flat.reshape(s.shape)


_SQRT2PI = math.sqrt(2 * math.pi)


def dgauss_tail(a: np.ndarray, s: np.ndarray) -> np.ndarray:
    """P[Y >= a] for integer a, Y ~ N_Z(0, s^2), s >= 16: Euler-Maclaurin to the third derivative.

    sum_{k >= a} f(k) = int_a^inf f + f(a)/2 - f'(a)/12 + f'''(a)/720 - ...,
    f(x) = exp(-x^2 / (2 s^2)), and sum_k f(k) = s sqrt(2 pi) (1 + O(exp(-2 pi^2 s^2))).
    The next term is O(f(a) / s^5) relative to f(a) / s.

    Examples
    --------
    >>> import numpy as np
    >>> from secure_auc.dp.discrete import dgauss_tail
    >>> k = np.arange(-2000, 2001)
    >>> p = np.exp(-k * k / 800.0) / np.exp(-k * k / 800.0).sum()
    >>> bool(abs(dgauss_tail(np.array([30.0]), 20.0)[0] / p[k >= 30].sum() - 1) < 1e-9)
    True
    """
    from scipy.special import log_ndtr  # here, not at import: a process without Gaussian noise never loads scipy

    x = a / s
    phi_over = np.exp(-0.5 * x * x) / (_SQRT2PI * s)  # f(a) / Z
    upper = np.exp(log_ndtr(-x))
    return upper + phi_over * (0.5 + x / (12 * s) + (3 * x - x**3) / (720 * s**3))


def dgauss_delta(sigma, sensitivity, epsilon) -> np.ndarray:
    """delta(eps) of N_Z(0, sigma^2) for an integer sensitivity (CKS 2020, Theorem 7, exact):

        delta = P[Y > eps sigma^2 / Delta - Delta / 2] - e^eps P[Y > eps sigma^2 / Delta + Delta / 2].

    Parameters
    ----------
    sigma, sensitivity, epsilon : float or array-like
        In grid units (sensitivity an integer >= 1).

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    Close to the continuous Gaussian's delta once sigma is many grid steps:

    >>> from secure_auc.dp.discrete import dgauss_delta
    >>> from secure_auc.dp.noise import analytic_gaussian_sigma
    >>> s = float(analytic_gaussian_sigma(1.0, 1e-6))
    >>> round(float(dgauss_delta(256 * s, 256, 1.0)) * 1e6, 4)
    1.0
    """
    s, d, e = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (sigma, sensitivity, epsilon)))
    shape = s.shape
    lo = np.floor(e * s * s / d - d / 2) + 1  # P[Y > x] = P[Y >= floor(x) + 1]
    hi = np.floor(e * s * s / d + d / 2) + 1
    s, lo, hi, e = (v.ravel() for v in (s, lo, hi, e))
    out = np.empty(s.shape)
    big = s >= 16
    out[big] = dgauss_tail(lo[big], s[big]) - np.exp(e[big]) * dgauss_tail(hi[big], s[big])
    for i in np.flatnonzero(~big):
        k, p = _dgauss_brute(float(s[i]))
        out[i] = p[k >= lo[i]].sum() - math.exp(e[i]) * p[k >= hi[i]].sum()
    return np.maximum(out, 0.0).reshape(shape)


def dgauss_sigma(sensitivity, epsilon, delta: float) -> np.ndarray:
    """Smallest sigma (grid units) making N_Z(0, sigma^2) (eps, delta)-DP for an integer sensitivity.

    Bisection on :func:`dgauss_delta` (decreasing in sigma), vectorised over
    arrays of sensitivities and budgets.

    Examples
    --------
    >>> from secure_auc.dp.discrete import dgauss_sigma, dgauss_delta
    >>> s = dgauss_sigma(256, 1.0, 1e-6)
    >>> bool(dgauss_delta(s, 256, 1.0) <= 1e-6 < dgauss_delta(s * 0.999, 256, 1.0))
    True
    """
    d, e = np.broadcast_arrays(np.asarray(sensitivity, dtype=np.float64), np.asarray(epsilon, dtype=np.float64))
    lo = np.full(d.shape, 1e-3)
    hi = d * (1 + np.sqrt(2 * math.log(1.25 / delta)) / e)  # classical bound, loose: private
    while np.any(bad := dgauss_delta(hi, d, e) > delta):
        hi = np.where(bad, hi * 2, hi)
    for _ in range(80):
        mid = np.sqrt(lo * hi)
        ok = dgauss_delta(mid, d, e) <= delta
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
    return hi
