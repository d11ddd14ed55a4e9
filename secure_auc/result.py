"""The one result every evaluation path returns, and its error bars.

:class:`EvaluationResult` is what :func:`secure_auc.evaluate`, a local or deployed
session, the command line and the torchrun entries return; :func:`make_result`
builds it from the server's estimate and aggregate, with the standard deviation
and the 95 % interval of :func:`error_interval` (from public quantities and the
noisy aggregate only).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache

import numpy as np

from .compile_cache import enabled as compiled_enabled
from .dp.mechanisms import NoNoise
from .local_stats import LocalStatistics
from .validation import InputError

__all__ = ["EvaluationResult", "make_result", "privacy_spent", "describe", "error_bars", "error_interval",
           "interval_note", "interval_bounds", "Z95"]

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile


@dataclass
class EvaluationResult:
    """What one evaluation reports.

    Attributes
    ----------
    auc : float
        The server's estimate: eq. (1) on the aggregated statistics, debiased
        for randomized response.  Not clipped to [0, 1].
    reference_auc : float or None
        The exact, non-private AUC of the pooled data (``reference=True`` only).
    abs_error : float or None
        ``|auc - reference_auc|`` when the reference was computed.
    raw_auc : float
        Eq. (1) on the aggregated statistics before any debiasing (for
        randomized response: the AUC of the flipped labels; otherwise ``auc``).
    estimated_positives : float
        P as the server received it: the sum of the released localP'_k (noisy,
        or the number of flipped positives for randomized response).
    epsilon, delta : float or None
        The privacy spent by this evaluation (None for ``none``).
    mechanism, allocation, sensitivity : str or None
        The mechanism's parameters, as :meth:`Mechanism.describe` gives them.
    protocol : str
        ``"plain"`` or ``"mpc"``.
    clients, samples : int
        K and M.
    seconds : float
        Wall time of the protocol (without the reference AUC).
    seed : int or None
        The seed of the clients' noise keys (plain protocol only; an MPC
        result keeps nothing to recompute the noise from).
    std : float or None
        Standard deviation of the DP estimate (:func:`error_bars`: the delta
        method, from public quantities and the noisy aggregate only); None
        without noise or when the noisy P' leaves (0, M).
    ci_low, ci_high : float or None
        The 95 % interval (:func:`error_interval`: from the quantiles of the
        mechanism's noise, not clipped to [0, 1], like ``auc``).
    ci_note : str or None
        How the interval was found (and whether it is conservative by design),
        or why there is none.
    extra : dict
        Protocol-specific details (MPC: seconds, bytes and rounds per party).

    Examples
    --------
    >>> import numpy as np
    >>> from secure_auc import ClientData, evaluate
    >>> from secure_auc import make_mechanism
    >>> result = evaluate([ClientData(np.array([0.2, 0.7]), np.array([0, 1]))], make_mechanism("none"), protocol="plain")
    >>> result.auc, result.mechanism, result.samples
    (1.0, 'none', 2)
    >>> sorted(result.to_dict())[:4]
    ['abs_error', 'allocation', 'auc', 'ci_high']
    """

    auc: float
    reference_auc: float | None
    abs_error: float | None
    raw_auc: float
    estimated_positives: float
    epsilon: float | None
    delta: float | None
    mechanism: str
    allocation: str | None
    sensitivity: str | None
    protocol: str
    clients: int
    samples: int
    seconds: float
    seed: int | None
    std: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    ci_note: str | None = None
    extra: dict = field(default_factory=dict)

    def __float__(self) -> float:
        return self.auc

    def to_dict(self) -> dict:
        """The fields as a flat dict: the entries of ``extra`` replace the key ``extra``.

        Returns
        -------
        dict
            JSON-serialisable when ``extra`` is.

        Examples
        --------
        >>> import numpy as np
        >>> from secure_auc import ClientData, evaluate, make_mechanism
        >>> d = evaluate([ClientData(np.array([0.2, 0.7]), np.array([0, 1]))], make_mechanism("none"), protocol="plain").to_dict()
        >>> d["auc"], "extra" in d
        (1.0, False)
        """
        d = asdict(self)
        extra = d.pop("extra")
        d.update(extra)
        return d


def describe(mechanism) -> dict:
    """The mechanism's parameters as a report shows them.

    Parameters
    ----------
    mechanism : Mechanism

    Returns
    -------
    dict
        ``mechanism``, ``epsilon``, ``delta``, ``allocation`` and ``sensitivity``
        (:meth:`Mechanism.describe`).

    Examples
    --------
    >>> from secure_auc import make_mechanism
    >>> from secure_auc.evaluate import describe
    >>> describe(make_mechanism("global", 1.0))
    {'mechanism': 'laplace', 'epsilon': 1.0, 'delta': 0.0, 'allocation': 'split', 'sensitivity': 'global'}
    """
    return mechanism.describe()


def public_statistics(sizes, positives: float, total: int) -> LocalStatistics:
    """The rank summaries the server can state without any client's data: client k's public
    size n_k, its ranks spread evenly over 0..M-1 (an IID layout: mean rank and largest
    deviation (M-1)/2, largest rank M-1), and P' shared in proportion to n_k."""
    n = np.asarray(sizes, dtype=np.float64)
    half = np.full(len(n), (total - 1) / 2.0)
    return LocalStatistics(local_sum=half * positives * n / n.sum(), local_p=positives * n / n.sum(), n=n,
                           max_rank=np.full(len(n), float(total - 1)), mean_rank=half, max_dev=half)


def error_bars(mechanism, auc: float, positives: float, total: int, sizes) -> tuple[float | None, ...]:
    """Standard deviation and 95 % interval of a DP estimate, from public quantities
    (M, K, the clients' sizes n_k, the mechanism) and the noisy aggregate only.

    ``(std, ci_low, ci_high)`` of :func:`error_interval` (which also says how the
    interval was found, or why there is none).

    Examples
    --------
    >>> from secure_auc import make_mechanism
    >>> from secure_auc.evaluate import error_bars
    >>> std, lo, hi = error_bars(make_mechanism("laplace", 1.0, allocation="split"), 0.75, 25_000.0, 100_000, [50_000, 50_000])
    >>> f"{std:.2e}", round(lo, 4), round(hi, 4)
    ('2.52e-04', 0.7495, 0.7505)
    >>> error_bars(make_mechanism("none"), 0.75, 25_000.0, 100_000, [100_000])
    (None, None, None)
    """
    return error_interval(mechanism, auc, positives, total, sizes)[:3]


def error_interval(mechanism, auc: float, positives: float, total: int, sizes) -> tuple:
    """Standard deviation, 95 % interval and a note on it, from public quantities (M, K, the
    clients' sizes n_k, the mechanism) and the noisy aggregate only.

    The std is the delta method of :mod:`secure_auc.dp.variance` at the estimate.
    The interval comes from the noise's own distribution, not a normal
    approximation: a parametric bootstrap draws the mechanism's noise
    (:data:`~secure_auc.dp.variance.INTERVAL_DRAWS` draws, a fixed seed, so the interval
    is a function of its inputs) on the sums the estimate implies (P' and the
    S that gives the estimate at P'), applies the server's estimator, and takes
    the 2.5 % and 97.5 % quantiles q of the error: ``[auc - q_97.5, auc - q_2.5]``.
    The draws are: for noise on the aggregate, the total of the K shares
    (:meth:`~secure_auc.dp.distributed.DistributedNoiseMechanism.aggregate_noise`);
    for noise per client, each client's two noises as calibrated for ranks
    spread over 0..M-1 (:func:`~secure_auc.dp.variance.statistics_noise_draws`:
    a client's own rank summary is private; for the split allocation with local
    sensitivity that calibration is the largest any layout can have, so the
    interval is conservative by design); for randomized response, the flips'
    noise on the counts (:func:`~secure_auc.dp.variance.rr_noise_draws`), the
    estimate debiased in every draw.

    Parameters
    ----------
    mechanism : Mechanism
    auc : float
        The reported (debiased) estimate.
    positives : float
        P' as the server received it (for RR: the number of flipped positives).
    total : int
        M.
    sizes : sequence of int
        n_k, the number of samples of each client.

    Returns
    -------
    (std, ci_low, ci_high, note)
        ``note`` says how the interval was found or why there is none (then the
        bounds are None); all None without noise.

    Examples
    --------
    >>> from secure_auc import make_mechanism
    >>> from secure_auc.evaluate import error_interval
    >>> std, lo, hi, note = error_interval(make_mechanism("rr", 0.1), 0.7, 1000.0, 2000, [2000])
    >>> lo is None
    True
    >>> note.split(":")[0]
    'no interval'
    """
    from .dp.mechanisms import RandomizedResponse

    if mechanism.cost.epsilon is None or type(mechanism) is NoNoise:
        return None, None, None, None
    a = min(max(float(auc), 0.0), 1.0)
    rr = isinstance(mechanism, RandomizedResponse)
    if rr:
        from .dp.randomized_response import debias_auc
        from .dp.variance import rr_linearised_std

        p = float(debias_auc(0.5, positives, total - positives, mechanism.epsilon).positives)
        if not 0 < p < total:
            return None, None, None, (f"no interval: the debiased number of positives {p:.1f} is outside (0, M = "
                                      f"{total}): the flips' noise on the counts is too large at eps = "
                                      f"{mechanism.epsilon:g}")
        p_int = min(max(int(round(p)), 1), total - 1)
        start = int(round(a * (total - p_int)))  # P positives at ranks start.. give rank sum AUC P N + P(P-1)/2
        labels = np.zeros(total)
        labels[start:start + p_int] = 1.0
        std = rr_linearised_std(np.arange(total, dtype=np.float64), labels, mechanism.epsilon)
    else:
        if not 0 < positives < total:
            return None, None, None, f"no interval: the noisy number of positives {positives:.1f} is outside (0, M = {total})"
        p = float(positives)
        std = mechanism.delta_method_std(public_statistics(sizes, positives, total), total, a)
    std = float(std) if std is not None and np.isfinite(std) else None
    lo, hi, undefined = interval_bounds(mechanism, np.array([float(auc)]), np.array([p]), total, sizes)
    if not np.isfinite(lo[0]):
        why = ("the flips' noise on the counts" if rr else "the noise on the number of positives")
        return std, None, None, (f"no interval: {why} leaves the estimator undefined (the count of positives outside "
                                 f"(0, M = {total})) in {100 * undefined[0]:.1f} % of the noise draws")
    return std, float(lo[0]), float(hi[0]), interval_note(mechanism)


def interval_note(mechanism) -> str:
    """How :func:`error_interval` finds the interval of ``mechanism``'s estimates."""
    from .dp.mechanisms import RandomizedResponse, StatisticsMechanism

    text = "95 % interval from the quantiles of the mechanism's noise (parametric bootstrap at the estimate)"
    if isinstance(mechanism, StatisticsMechanism) and (mechanism.allocation != "split" or mechanism.sensitivity == "local"):
        text += ("; each client's noise as calibrated for ranks spread over 0..M-1 (its own rank summary is private)")
        if mechanism.allocation == "split":
            text += ": the largest that calibration can be, so the interval is conservative by design"
    elif isinstance(mechanism, RandomizedResponse):
        text += "; flips' noise for distinct ranks"
    return text


def _lerp(a, b, t: float):
    """numpy's linear interpolation of ``np.quantile`` (``numpy.lib._function_base_impl._lerp``),
    operation for operation, so that the result has the same bits."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def outer_quantiles(x, q=(0.025, 0.975), *, sample: int = 2048) -> np.ndarray:
    """``np.quantile(x, q, axis=1)`` (linear interpolation) of a 2-D float array, with the same
    values, for a low and a high quantile ``q``: each is two order statistics of its row and
    numpy's interpolation between them.  Rather than partitioning every row (what takes most of
    the time of :func:`interval_bounds`), the order statistics are found among the entries beyond a
    threshold of each row, set from its first ``sample`` entries (the noise draws are i.i.d., so
    they are a random sample) far enough out that the threshold leaves about twice as many
    entries as needed; a row where it leaves too few (or one holding a NaN) is done by np.quantile.

    Examples
    --------
    >>> import numpy as np
    >>> from secure_auc.result import outer_quantiles
    >>> x = np.random.default_rng(0).normal(size=(3, 20_000))
    >>> bool(np.array_equal(outer_quantiles(x), np.quantile(x, [0.025, 0.975], axis=1)))
    True
    """
    x = np.asarray(x, dtype=np.float64)
    rows, n = x.shape
    qs = np.asarray(q, dtype=np.float64)
    virtual = (n - 1) * qs  # numpy's virtual indexes, floors and weights for method="linear"
    below = np.floor(virtual)
    gamma = virtual - below
    lo_at, hi_at = (int(i) for i in below)
    need_lo, need_hi = lo_at + 2, n - hi_at  # the entries at or below the low pair, at or above the high one
    sample = min(sample, n)
    j_lo, j_hi = (min(sample - 1, int(math.ceil(2 * c * sample / n)) + 32) for c in (need_lo, need_hi))
    if rows == 0 or not (qs[0] < 0.5 <= qs[1]) or j_lo + j_hi >= sample - 1 or 4 * sample > n:
        return np.quantile(x, qs, axis=1)
    part = np.partition(x[:, :sample], [j_lo, sample - 1 - j_hi], axis=1)
    good = ~np.isnan(x).any(axis=1)
    tails = []
    for k, need in ((0, need_lo), (1, need_hi)):
        beyond = x <= part[:, j_lo, None] if k == 0 else x >= part[:, sample - 1 - j_hi, None]
        at = np.flatnonzero(beyond)  # row by row, so each row's entries are together
        starts = np.searchsorted(at, np.arange(rows + 1) * n)
        count = np.diff(starts)
        good &= count >= need
        tails.append((at, count))
    out = np.empty((2, rows))
    flat_x = x.ravel()
    for k, (at, count) in enumerate(tails):
        if not good.any():
            break
        if not good.all():
            at = at[good[at // n]]
            count = np.where(good, count, 0)
        width = int(count.max())
        # each row's entries beyond its threshold, then padding that sorts after the low entries and
        # before the high ones
        pad = np.full((rows, width), np.inf if k == 0 else -np.inf)
        first = np.cumsum(count) - count
        pad.ravel()[np.arange(at.size) + np.repeat(np.arange(rows) * width - first, count)] = flat_x[at]
        i = lo_at if k == 0 else width - n + hi_at  # where the order statistics are in the padded rows
        pad.partition([i, i + 1], axis=1)
        out[k, good] = _lerp(pad[good, i], pad[good, i + 1], float(gamma[k]))
    if not good.all():
        out[:, ~good] = np.quantile(x[~good], qs, axis=1)
    return out


@lru_cache(maxsize=32)
def _interval_draws(mechanism, total: int, sizes: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The noise draws (E_S, E_P) of :func:`interval_bounds`: from a fixed seed, a function of the
    mechanism and the public M and sizes only, so drawn once for them (each evaluation of a training
    loop, each repetition of a simulation) and kept read-only."""
    from .dp.distributed import DistributedNoiseMechanism
    from .dp.mechanisms import RandomizedResponse
    from .dp.variance import INTERVAL_DRAWS, INTERVAL_SEED, rr_noise_draws, statistics_noise_draws

    rng = np.random.default_rng(INTERVAL_SEED)
    m = int(total)
    if isinstance(mechanism, RandomizedResponse):
        e_s, e_p = rr_noise_draws(m, mechanism.epsilon, INTERVAL_DRAWS, rng)
    elif isinstance(mechanism, DistributedNoiseMechanism):
        e_s, e_p = mechanism.aggregate_noise(rng, m, reps=INTERVAL_DRAWS, clients=len(sizes))
        e_s = e_s + (m - 1) / 2.0 * e_p  # the released sums carry rbar E_P
    else:
        e_s, e_p = statistics_noise_draws(mechanism, public_statistics(sizes, 1.0, m), m, INTERVAL_DRAWS, rng)
    e_s, e_p = np.array(e_s, dtype=np.float64), np.array(e_p, dtype=np.float64)
    e_s.flags.writeable = e_p.flags.writeable = False
    return e_s, e_p


COMPILED_FROM_ROWS = 256  # from this many estimates, :func:`interval_bounds` runs the compiled pass


def interval_bounds(mechanism, auc, positives, total: int, sizes, *, chunk: int = 64):
    """Vectorised core of :func:`error_interval`: for estimates ``auc`` with P' (RR: debiased P)
    ``positives`` (arrays of the same length), the bounds (-inf/+inf where more than
    :data:`~secure_auc.dp.variance.UNDEFINED_LIMIT` of the draws leave the estimator undefined) and
    the share of undefined draws."""
    from .dp.mechanisms import RandomizedResponse
    from .dp.variance import UNDEFINED_LIMIT

    auc = np.asarray(auc, dtype=np.float64)
    p0 = np.asarray(positives, dtype=np.float64)
    m = int(total)
    key = (m, tuple(np.asarray(sizes, dtype=np.float64).tolist()))  # the public sizes, as public_statistics reads them
    try:
        hash(mechanism)
    except TypeError:  # a mechanism that is no cache key (a field that is a list or an array)
        e_s, e_p = _interval_draws.__wrapped__(mechanism, *key)
    else:
        e_s, e_p = _interval_draws(mechanism, *key)
    rr = isinstance(mechanism, RandomizedResponse)
    if rr:
        from .dp.randomized_response import debias_auc

        rho = float(debias_auc(0.5, 1.0, 1.0, mechanism.epsilon).rho)
    if auc.ndim == 1 and auc.size >= COMPILED_FROM_ROWS and p0.shape == auc.shape and compiled_enabled():
        from .interval_kernels import bounds  # many rows (a coverage study): one compiled pass, the same bits

        lo, hi, undefined, done = bounds(auc, p0, e_s, e_p, m, rr_rho=rho if rr else -1.0, limit=UNDEFINED_LIMIT)
        if not done.all():  # an estimate or P' that is not finite: the numpy code below
            rest = np.flatnonzero(~done)
            lo[rest], hi[rest], undefined[rest] = _numpy_bounds(mechanism, auc[rest], p0[rest], m, e_s, e_p,
                                                                rho if rr else None, chunk)
        return lo, hi, undefined
    return _numpy_bounds(mechanism, auc, p0, m, e_s, e_p, rho if rr else None, chunk)


def _numpy_bounds(mechanism, auc, p0, m, e_s, e_p, rho, chunk):
    """:func:`interval_bounds` in numpy, ``chunk`` estimates at a time (``rho``: randomized
    response's flip probability, else None)."""
    from .dp.variance import UNDEFINED_LIMIT
    from .metrics import auc_from_sums

    rr = rho is not None
    if rr:
        from .dp.randomized_response import debias_auc
    lo = np.full(auc.shape, -np.inf)
    hi = np.full(auc.shape, np.inf)
    undefined = np.ones(auc.shape)
    for at in range(0, auc.size, chunk):
        a, p = auc[at:at + chunk, None], np.clip(p0[at:at + chunk, None], 0.5, m - 0.5)
        s = np.clip(a, 0.0, 1.0) * p * (m - p) + p * (p - 1) / 2.0  # the S that gives the estimate at P
        with np.errstate(divide="ignore", invalid="ignore"):
            if rr:
                s_noisy = (1 - 2 * rho) * s + rho * m * (m - 1) / 2.0 + e_s
                p_noisy = (1 - 2 * rho) * p + rho * m + e_p
                d = debias_auc(auc_from_sums(s_noisy, p_noisy, m - p_noisy), p_noisy, m - p_noisy, mechanism.epsilon)
                est, ok = d.auc, (d.positives > 0) & (d.positives < m) & (p_noisy > 0) & (p_noisy < m)
            else:
                p_noisy = p + e_p
                est, ok = auc_from_sums(s + e_s, p_noisy, m - p_noisy), (p_noisy > 0) & (p_noisy < m)
        bad = 1.0 - ok.mean(axis=1)
        if ok.all():
            q = outer_quantiles(est - a, (0.025, 0.975))
        else:
            q = np.nanquantile(np.where(ok, est - a, np.nan), [0.025, 0.975], axis=1)
        good = bad <= UNDEFINED_LIMIT
        lo[at:at + chunk] = np.where(good, auc[at:at + chunk] - q[1], -np.inf)
        hi[at:at + chunk] = np.where(good, auc[at:at + chunk] - q[0], np.inf)
        undefined[at:at + chunk] = bad
    return lo, hi, undefined


def privacy_spent(reservation) -> dict:
    """What a finished ledger reservation spent, as a result's ``extra`` reports it: the most
    charged client's total and every client's (``privacy_spent_per_client``: eps per client).

    Parameters
    ----------
    reservation : secure_auc.dp.accountant.Reservation

    Returns
    -------
    dict
    """
    worst = max(reservation.spent, key=lambda sp: sp.epsilon)
    return {"privacy_spent": (f"eps = {worst.epsilon:.6g}, delta = {worst.delta:g} ({worst.accountant}) "
                              f"by the most charged record (or dataset), {worst.releases} release(s)"),
            "total_epsilon_spent": round(worst.epsilon, 12), "total_delta_spent": worst.delta,
            "privacy_spent_per_client": [round(sp.epsilon, 12) for sp in reservation.spent]}


def make_result(mechanism, estimate, aggregate, sizes, *, protocol: str, seconds: float, seed: int | None = None,
                reference_auc: float | None = None, extra: dict | None = None) -> EvaluationResult:
    """The one result of every path (:func:`evaluate`, a session, the command line, the
    torchrun entries): the server's estimate with its standard deviation and 95 % interval
    (:func:`error_interval`, from public quantities and the aggregate only) and the run's details.

    Parameters
    ----------
    mechanism : Mechanism
    estimate : secure_auc.protocol.messages.Estimate
    aggregate : secure_auc.protocol.messages.Aggregate
        What the server opened: the summed noisy statistics and M.
    sizes : list of int
        Each client's number of samples (public).
    protocol : {"plain", "mpc"}
    seconds : float
        Wall time of the evaluation (a session's start-up is reported apart, in ``extra``).
    seed, reference_auc, extra
        As in :class:`EvaluationResult`.

    Returns
    -------
    EvaluationResult
    """
    extra = dict(extra or {})
    auc = float(estimate.auc)
    std, lo, hi, note = error_interval(mechanism, auc, float(aggregate.positives), aggregate.total, sizes)
    if "bytes_sent_per_party" in extra:  # each party's counter holds what it sent and what it received
        extra["bytes_sent_received_per_party"] = extra.pop("bytes_sent_per_party")
    return EvaluationResult(
        auc=auc,
        reference_auc=reference_auc,
        abs_error=None if reference_auc is None else abs(auc - reference_auc),
        raw_auc=float(estimate.raw_auc),
        estimated_positives=float(aggregate.positives),
        protocol=protocol,
        clients=len(sizes),
        samples=aggregate.total,
        seconds=seconds,
        seed=seed,
        std=std,
        ci_low=lo,
        ci_high=hi,
        ci_note=note,
        extra=extra,
        **describe(mechanism),
    )


@dataclass
class SelectionResult:
    """What :func:`select` returns (and ``secure-auc select --json`` prints).

    Attributes
    ----------
    selected : str
        The selected candidate's name; ``index`` its position in ``candidates``.
    epsilon, delta : float
        The privacy spent in all: the selection's plus the release's.
    method : str
        ``noisy-max`` or ``repeat-and-select``.
    auc, std, ci_low, ci_high : float or None
        With ``release_epsilon``: the selected candidate's DP AUC, its std and 95 % interval.
    selection_epsilon, release_epsilon : float or None
        The two parts of ``epsilon``.
    reference_aucs : list of float or None
        With ``reference=True`` (local experiments only): every candidate's exact AUC.
    extra : dict
        Cost (MPC: the rank steps, the argmax's seconds, bytes and rounds) and ledger details.

    Examples
    --------
    >>> import numpy as np
    >>> from secure_auc import select
    >>> y = [np.array([0, 1, 1, 0])]
    >>> res = select(y, {"a": [np.array([.1, .8, .9, .2])], "b": [np.array([.9, .1, .2, .8])]}, epsilon=1.0,
    ...              protocol="plain", seed=0)
    >>> res.selected in ("a", "b"), res.to_dict()["epsilon"], res.delta
    (True, 1.0, 0.0)
    """

    selected: str
    index: int
    candidates: list
    method: str
    epsilon: float
    delta: float
    protocol: str
    clients: int
    samples: int
    seconds: float
    selection_epsilon: float | None = None
    release_epsilon: float | None = None
    auc: float | None = None
    std: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    reference_aucs: list | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = asdict(self)
        for k in ("epsilon", "selection_epsilon"):
            if out[k] is not None and math.isinf(out[k]):
                out[k] = None  # JSON has no infinity: the exact (non-private) selection
        return out


def check_epsilon(value, what: str, allow_none: bool = False):
    """``value`` as a float if it is a finite number > 0 (None too with ``allow_none``), else an
    :class:`~secure_auc.validation.InputError` naming ``what``."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not math.isfinite(float(value)) or not float(value) > 0:
        raise InputError(f"{what} must be a finite number > 0, got {value!r}")
    return float(value)


def release_result(out: SelectionResult, res, release_epsilon: float) -> None:
    """Fill ``out`` (a selection) with ``res``, the selected candidate's released
    :class:`~secure_auc.EvaluationResult` at ``release_epsilon``: the AUC, std, interval and
    the privacy spent in all."""
    out.release_epsilon = release_epsilon
    out.auc, out.std, out.ci_low, out.ci_high = res.auc, res.std, res.ci_low, res.ci_high
    out.epsilon = out.selection_epsilon + float(res.epsilon)
    out.delta = out.delta + float(res.delta or 0.0)
    out.extra["release"] = {"mechanism": res.mechanism, "epsilon": res.epsilon, "seconds": res.seconds}
    for key in ("privacy_spent", "total_epsilon_spent", "total_delta_spent", "privacy_spent_per_client"):
        if key in res.extra:
            out.extra[key] = res.extra[key]
