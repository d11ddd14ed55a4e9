"""DP mechanisms against the paper's formulas and against simulation.

Tolerances: the sample standard deviation of R independent, near-normal
estimates has a relative standard error of about 1/sqrt(2R) (R = 2000: 1.6 %;
R = 4000: 1.1 %).  Sums of Laplace variables are heavier-tailed (kurtosis 6 for
a single one), which at worst makes it sqrt(5/(4R)) (R = 2000: 2.5 %).  We
allow 10 %, four or more standard errors, so a wrong formula (off by a factor
sqrt(2) or more) fails and a correct one passes with a fixed seed.
"""

import numpy as np
import pytest
from scipy.stats import norm

from secure_auc.data import make_ctr_dataset, partition_owner
from secure_auc.dp import (
    NoNoise,
    StatisticsMechanism,
    analytic_gaussian_sigma,
    debias_auc,
    flip_probability,
    randomized_response,
)
from secure_auc.dp.variance import (
    global_laplace_std,
    linearised_std,
    local_laplace_one_sample_std,
    rr_paper_std,
    rr_rank_sum_std,
)
from secure_auc.dp.base import estimate_auc
from secure_auc.local_stats import LocalStatistics
from secure_auc.metrics import auc_from_sums, midranks, rank_auc
from secure_auc.validation import InputError

TOL = 0.10


@pytest.fixture(scope="module")
def data():
    scores, labels = make_ctr_dataset(20_000, seed=11)
    return scores, labels, midranks(scores)


def test_flip_probability_and_rate():
    assert flip_probability(1.0) == pytest.approx(1 / (1 + np.e))
    assert flip_probability(float("inf")) == 0.0
    rng = np.random.default_rng(0)
    y = (rng.random(1_000_000) < 0.3).astype(np.int8)
    flipped = randomized_response(y, 1.0, rng)
    rho = 1 / (1 + np.e)
    rate = np.mean(flipped != y)
    assert abs(rate - rho) < 5 * np.sqrt(rho * (1 - rho) / 1e6)
    # flips are symmetric: the same rate for positives and negatives
    assert abs(np.mean(flipped[y == 1] != 1) - rho) < 0.005


def test_debias_inverts_the_expected_corruption():
    """With the expected noisy counts, pi' is exact and AUC_clean recovers the AUC."""
    p, n, eps, auc = 3000.0, 7000.0, 1.0, 0.8
    rho = flip_probability(eps)
    pb = p * (1 - rho) + n * rho
    nb = p + n - pb
    pi = p / (p + n)
    a = (1 - pi) * rho / (pi * (1 - rho) + (1 - pi) * rho)
    b = pi * rho / (pi * rho + (1 - pi) * (1 - rho))
    noisy = (a + b) / 2 + (1 - a - b) * auc  # Menon et al. (2015) forward relation
    d = debias_auc(noisy, pb, nb, eps)
    assert d.positives == pytest.approx(p)
    assert d.base_rate == pytest.approx(pi)
    assert d.auc == pytest.approx(auc)


def _flips(labels, eps, rng, reps):
    """``reps`` independent randomized responses of ``labels`` (rows): the exact sampler flips each label
    independently, so repetitions are drawn together, in calls of about 800,000 labels."""
    per = max(1, 800_000 // len(labels))
    return np.concatenate([randomized_response(np.tile(labels, min(per, reps - at)), eps, rng).reshape(-1, len(labels))
                           for at in range(0, reps, per)])


def test_rr_debiased_estimate_is_unbiased(data):
    scores, labels, ranks = data
    true = rank_auc(labels, scores)
    rng = np.random.default_rng(1)
    # 100 repetitions: an unbiased mean is more than 4 se away with probability 6e-5 (normal), while debiasing
    # with a wrong epsilon (2.2 for 2) is 40 se away (seed 1); the raw AUC is 0.08 below the true one
    eps, reps = 2.0, 100
    flipped = _flips(labels, eps, rng, reps)
    s = flipped @ ranks
    p = flipped.sum(axis=1)
    est = estimate_auc(s, p, len(labels), NoNoise())  # raw AUC on flipped labels
    clean = debias_auc(est.raw_auc, p, len(labels) - p, eps).auc
    se = clean.std() / np.sqrt(reps)
    assert abs(clean.mean() - true) < 4 * se
    # and the undebiased AUC is badly biased towards 1/2
    assert est.raw_auc.mean() < true - 0.05


def test_rr_closed_form_variance(data):
    # both closed forms hold for any M, and the sample std's precision depends on the repetitions only:
    # the first 5,000 of the 20,000 samples check them as well with a quarter of the exact flips
    scores, labels, _ = data
    scores, labels = scores[:5000], labels[:5000]
    ranks = midranks(scores)
    m, p = len(labels), int(labels.sum())
    n = m - p
    # 800 repetitions: the sample std's relative sd is 1/sqrt(2 * 799) = 2.5 %, so TOL = 10 % is 4 sd (fixed seed)
    eps, reps = 1.0, 800
    rng = np.random.default_rng(2)
    stat = _flips(labels, eps, rng, reps) @ ranks / (p * n)
    expected = rr_rank_sum_std(ranks, p, n, eps)
    assert stat.std(ddof=1) == pytest.approx(expected, rel=TOL)
    # the paper's closed form is the same quantity for distinct ranks 0..M-1
    assert rr_paper_std(m, p, n, eps) == pytest.approx(rr_rank_sum_std(np.arange(m), p, n, eps), rel=1e-9)


def _sum_noise_std(mech, stats, total, p, n, reps, seed):
    noisy = mech.privatize(stats, np.random.default_rng(seed), reps, total=total, exact=False)
    return ((noisy.local_sum - stats.local_sum).sum(axis=1) / (p * n)).std(ddof=1)


def test_global_laplace_closed_form(data):
    scores, labels, ranks = data
    m, p = len(labels), int(labels.sum())
    k = 50
    owner = partition_owner(scores, k, "iid", seed=0)
    stats = LocalStatistics.from_owner(ranks, labels, owner, k)
    mech = StatisticsMechanism(1.0, allocation="split", sensitivity="global", alpha=0.5)
    got = _sum_noise_std(mech, stats, m, p, m - p, 4000, 3)
    assert got == pytest.approx(global_laplace_std(k, m, p, m - p, 0.5), rel=TOL)


def test_local_laplace_one_sample_per_client_closed_form():
    m = 3000
    rng = np.random.default_rng(4)
    scores = rng.random(m)
    labels = (rng.random(m) < 0.3).astype(np.int8)
    p = int(labels.sum())
    stats = LocalStatistics.from_owner(midranks(scores), labels, np.arange(m), m)
    mech = StatisticsMechanism(2.0, allocation="split", sensitivity="local", alpha=0.5)
    got = _sum_noise_std(mech, stats, m, p, m - p, 4000, 5)
    assert got == pytest.approx(local_laplace_one_sample_std(m, p, m - p, 1.0), rel=TOL)
    # GlobalLaplace / LocalLaplace -> sqrt(3) with one sample per client (paper, Sec. 6.2.2)
    ratio = global_laplace_std(m, m, p, m - p, 1.0) / local_laplace_one_sample_std(m, p, m - p, 1.0)
    assert ratio == pytest.approx(np.sqrt(3), rel=1e-3)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(allocation="split", sensitivity="local", alpha=0.5),
        dict(allocation="split", sensitivity="global", alpha=0.3),
        dict(allocation="orthogonal", beta=0.7),
        dict(allocation="adaptive"),
        dict(allocation="adaptive", noise="gaussian", delta=1e-6),
        dict(allocation="split", noise="gaussian", delta=1e-5, alpha=0.6),
    ],
)
@pytest.mark.parametrize("scheme", ["iid", "noniid"])
def test_full_estimator_matches_linearised_variance(data, kwargs, scheme):
    scores, labels, ranks = data
    m = len(labels)
    k = 200
    owner = partition_owner(scores, k, scheme, seed=0)
    stats = LocalStatistics.from_owner(ranks, labels, owner, k)
    mech = StatisticsMechanism(1.0, **kwargs)
    # the fast samplers of the same integer noise (exact=False, as the simulator draws): the pmf tests below
    # check them and the exact samplers against the same pmfs, and privatize gives both the same scales
    noisy = mech.privatize(stats, np.random.default_rng(6), 2000, total=m, exact=False)
    est = auc_from_sums(noisy.local_sum.sum(axis=1), noisy.local_p.sum(axis=1), m - noisy.local_p.sum(axis=1))
    true = rank_auc(labels, scores)
    assert est.std(ddof=1) == pytest.approx(linearised_std(mech, stats, m, true), rel=TOL)
    assert abs(est.mean() - true) < 5 * est.std() / np.sqrt(2000)


def test_adaptive_beta_minimises_local_sum_variance(data):
    scores, labels, ranks = data
    owner = partition_owner(scores, 20, "noniid")
    stats = LocalStatistics.from_owner(ranks, labels, owner, 20)
    ad = StatisticsMechanism(1.0, allocation="adaptive").allocate(stats)
    beta = ad.eps1 / 1.0
    grid = np.linspace(0.001, 0.999, 999)[:, None]
    var = stats.mean_rank**2 / grid**2 + stats.max_dev**2 / (1 - grid) ** 2
    best = var.min(axis=0)
    at_beta = stats.mean_rank**2 / beta**2 + stats.max_dev**2 / (1 - beta) ** 2
    assert np.all(at_beta <= best * (1 + 1e-9))


def test_parallel_ranks_put_all_budget_on_p():
    stats = LocalStatistics.from_client([5.0, 5.0, 5.0], [1, 0, 1])
    al = StatisticsMechanism(1.0, allocation="adaptive").allocate(stats)
    assert al.eps1[0] == 1.0 and al.c2[0] == 0.0
    noisy = StatisticsMechanism(1.0, allocation="adaptive").privatize(stats, np.random.default_rng(0))
    # localSum' = rbar * localP' exactly (paper's one-sample case)
    assert noisy.local_sum[0] == pytest.approx(5.0 * noisy.local_p[0])


@pytest.mark.parametrize("eps, delta", [(0.5, 1e-5), (1.0, 1e-5), (4.0, 1e-6), (10.0, 1e-3)])
def test_analytic_gaussian_is_tight(eps, delta):
    sigma = float(analytic_gaussian_sigma(eps, delta))

    def privacy_profile(s):  # Balle & Wang (2018), Theorem 8, with scipy's norm
        return norm.cdf(0.5 / s - eps * s) - np.exp(eps) * norm.cdf(-0.5 / s - eps * s)

    assert privacy_profile(sigma) <= delta * (1 + 1e-9)
    assert privacy_profile(sigma * 0.999) > delta
    if eps < 1:
        assert sigma < np.sqrt(2 * np.log(1.25 / delta)) / eps  # tighter than the classical bound


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(epsilon=0), "epsilon must be > 0"),
        (dict(epsilon=-1), "epsilon must be > 0"),
        (dict(epsilon=1, noise="gaussian"), "delta"),
        (dict(epsilon=1, noise="gaussian", delta=1.5), r"delta must be in \(0, 1\)"),
        (dict(epsilon=1, noise="gaussian", delta=0), r"delta must be in \(0, 1\)"),
        (dict(epsilon=1, alpha=1.0), r"alpha must be in \(0, 1\)"),
        (dict(epsilon=1, beta=0.0), r"beta must be in \(0, 1\)"),
    ],
)
def test_parameters_checked(kwargs, match):
    with pytest.raises(InputError, match=match):
        StatisticsMechanism(**kwargs)


# ---- integer noise on the fixed-point grid ----------------------------------------------------
from scipy.stats import chisquare  # noqa: E402

from secure_auc.dp.discrete import (  # noqa: E402
    bernoulli_exp,
    dgauss_delta,
    dgauss_sigma,
    discrete_gaussian,
    discrete_laplace,
)
from secure_auc.dp.noise import GRID  # noqa: E402
from secure_auc.dp.rng import ClientRngs, make_rng  # noqa: E402
from secure_auc.protocol.messages import FRACTION_BITS  # noqa: E402


def _chi2_against(x, pmf_of, lo, hi):
    ks = np.arange(lo, hi + 1)
    counts = np.array([(x == k).sum() for k in ks] + [((x < lo) | (x > hi)).sum()])
    probs = pmf_of(ks)
    expected = np.append(probs, 1 - probs.sum()) * len(x)
    return chisquare(counts, expected).pvalue


@pytest.mark.parametrize("exact", [True, False])
def test_discrete_laplace_has_the_geometric_pmf(exact):
    t = 2.5
    q = np.exp(-1 / t)
    x = discrete_laplace(ClientRngs.from_key(5).noise if exact else make_rng(5), t, (60_000,), exact=exact)
    assert x.dtype == np.int64
    assert _chi2_against(x, lambda k: (1 - q) / (1 + q) * q ** np.abs(k), -8, 8) > 1e-3


@pytest.mark.parametrize("exact", [True, False])
def test_discrete_gaussian_has_its_pmf(exact):
    sigma = 2.2
    k = np.arange(-60, 61)
    w = np.exp(-k**2 / (2 * sigma**2))
    z = w.sum()
    x = discrete_gaussian(ClientRngs.from_key(6).noise if exact else make_rng(6), sigma, (60_000,), exact=exact)
    assert _chi2_against(x, lambda ks: np.exp(-ks**2 / (2 * sigma**2)) / z, -6, 6) > 1e-3


def test_bernoulli_exp_with_big_integers_is_exact_in_mean():
    rng = np.random.default_rng(3)
    num = np.array([3 * 10**30] * 40_000, dtype=object)
    den = np.array([2 * 10**30] * 40_000, dtype=object)
    assert abs(bernoulli_exp(rng, num, den).mean() - np.exp(-1.5)) < 0.01


def test_discrete_gaussian_delta_against_a_direct_sum():
    sigma, sens = 5.5, 3
    k = np.arange(-400, 401)
    p = np.exp(-k**2 / (2 * sigma**2))
    p /= p.sum()
    # privacy loss of x vs x + sens at each output: delta = sum max(0, P(o) - e^eps P'(o))
    shifted = np.exp(-(k - sens) ** 2 / (2 * sigma**2))
    shifted /= shifted.sum()
    for eps in (0.5, 1.0, 2.0):
        direct = np.maximum(0, p - np.exp(eps) * shifted).sum()
        assert float(dgauss_delta(sigma, sens, eps)) == pytest.approx(direct, rel=1e-9, abs=1e-15)
    # large sigma (tail approximation) against the direct sum, too
    sigma, sens = 40.0, 64
    k = np.arange(-2000, 2001)
    p, shifted = np.exp(-k**2 / (2 * sigma**2)), np.exp(-(k - sens) ** 2 / (2 * sigma**2))
    p, shifted = p / p.sum(), shifted / shifted.sum()
    direct = np.maximum(0, p - np.exp(1.0) * shifted).sum()
    assert float(dgauss_delta(sigma, sens, 1.0)) == pytest.approx(direct, rel=1e-6)
    s = float(dgauss_sigma(sens, 1.0, direct))
    assert s == pytest.approx(sigma, rel=1e-6)


class _NoFloatNoise:
    """A generator that refuses the floating-point Laplace / normal samplers."""

    def __init__(self, rng):
        self._rng = rng

    def __getattr__(self, name):
        if name in ("laplace", "normal", "standard_normal", "exponential", "random", "standard_exponential"):
            raise AssertionError(f"floating-point sampler {name} used in a release")
        return getattr(self._rng, name)


@pytest.mark.parametrize("kwargs", [dict(allocation="split", sensitivity="local"),
                                    dict(allocation="split", sensitivity="global"),
                                    dict(allocation="orthogonal"), dict(allocation="adaptive"),
                                    dict(allocation="adaptive", noise="gaussian", delta=1e-6),
                                    dict(allocation="split", noise="gaussian", delta=1e-6)])
def test_release_noise_is_integer_on_the_fixed_point_grid(data, kwargs):
    scores, labels, ranks = data
    assert GRID == 2.0**-FRACTION_BITS
    k = 20
    stats = LocalStatistics.from_owner(ranks, labels, partition_owner(scores, k, "noniid", seed=0), k)
    mech = StatisticsMechanism(1.0, **kwargs)
    mech.privatize(stats, _NoFloatNoise(make_rng(9)), 3, total=len(labels))
    noisy = mech.privatize(stats, ClientRngs.from_key(9).noise, 3, total=len(labels))  # a client's AES stream
    e_p = (noisy.local_p - stats.local_p) / GRID
    assert np.array_equal(e_p, np.rint(e_p)) and np.any(e_p != 0)
    if kwargs["allocation"] == "split":
        e_s = (noisy.local_sum - stats.local_sum) / GRID
    else:  # the noise on n_k <v, y> is on the grid
        n = stats.n
        x = n * stats.local_sum - n * stats.mean_rank * stats.local_p
        e_s = (n * (noisy.local_sum - stats.mean_rank * noisy.local_p) - x) / GRID
    assert np.allclose(e_s, np.rint(e_s), rtol=0, atol=1e-3)
