"""Distributed noise on the aggregate: share distributions, calibration, centred estimator, split, target."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import chi2, nbinom, skellam

from secure_auc.data import make_ctr_dataset
from secure_auc.dp.distributed import (
    C_GRID,
    P_GRID,
    MIN_SHARE_STD,
    Calibration,
    DistributedNoise,
    DistributedNoiseMechanism,
    centred_std,
    dlap_pmf,
    dlap_variance,
    laplace_split,
    nb_scale,
    optimal_split,
    prior_ratio,
    rdp_to_dp,
    skellam_epsilon,
    skellam_rdp,
)
from secure_auc.dp.discrete import _rational_up, dgauss_variance, negative_binomial
from secure_auc.dp.events import compose
from secure_auc.dp.noise import analytic_gaussian_sigma
from secure_auc.dp.streams import GeneratorUniforms, KeyStreams, Uniforms
from secure_auc.dp.base import estimate_auc
from secure_auc.evaluate import builtin_clients, evaluate
from secure_auc.local_stats import LocalStatistics
from secure_auc.metrics import auc_from_sums, midranks, rank_auc
from secure_auc.protocol.messages import from_fixed, to_fixed
from secure_auc.simulation.engine import Simulator
from secure_auc.validation import InputError


def chi_square(samples, pmf, support):
    """Pearson statistic over ``support`` plus one tail bin, and its 99.9 % critical value."""
    samples = np.asarray(samples)
    expected = pmf(support) * len(samples)
    observed = np.array([(samples == x).sum() for x in support])
    tail_e, tail_o = len(samples) - expected.sum(), len(samples) - observed.sum()
    stat = ((observed - expected) ** 2 / expected).sum() + (tail_o - tail_e) ** 2 / max(tail_e, 1e-300)
    return stat, chi2.ppf(0.999, len(support))


@pytest.fixture(scope="module")
def builtin():
    scores, labels = make_ctr_dataset()
    r = midranks(scores)
    return dict(m=len(labels), p=int(labels.sum()), s=float(r @ labels), auc=rank_auc(labels, scores))


# ---- the shares ------------------------------------------------------------------------------
@pytest.mark.parametrize("clients, honest_fraction", [(1, 1.0), (7, 1.0), (20, 0.25), (40, 0.1)])
def test_any_h_discrete_laplace_shares_sum_to_the_curators_noise(clients, honest_fraction):
    """The sum of h = ceil(f K) shares is DLap(Delta / eps_i) on D = 2C and on P (chi-square, fixed seed)."""
    mech = DistributedNoiseMechanism(1.0, clients, honest_fraction=honest_fraction, split=0.5)
    h = mech.honest
    assert h == math.ceil(honest_fraction * clients)
    cal = mech.calibration(total=11, clients=clients)  # Delta_D = M - 1 = 10
    draws = 100_000
    e_c, e_p = cal.draw(np.random.default_rng(0), (draws, h))
    d = 2 * e_c.sum(axis=1)
    for noise, eps_unit, support in ((d, 0.5 / 10, np.arange(-60, 61)), (e_p.sum(axis=1), 0.5, np.arange(-10, 11))):
        assert np.all(noise == np.round(noise))  # integers
        stat, crit = chi_square(noise, lambda x: dlap_pmf(x, eps_unit), support)
        assert stat < crit, (stat, crit)


def test_discrete_laplace_shares_stay_exact_for_half_a_million_clients():
    """NB(1/h, p) with h ~ 1e5 and p ~ 1e-6 (numpy's gamma-Poisson mixture): the sum still has the DLap law."""
    mech = DistributedNoiseMechanism(1.0, 100_000)
    m = 458_407
    cal = mech.calibration(m)
    e_c, e_p = cal.draw(np.random.default_rng(1), (100, 100_000))
    d, p = 2 * e_c.sum(axis=1), e_p.sum(axis=1)
    eps_d, eps_p = mech.eps_split / (m - 1), 1 - mech.eps_split
    # DLap on P: chi-square on the small support; on D: |D| is geometric-like, compare mean |D|
    stat, crit = chi_square(p, lambda x: dlap_pmf(x, eps_p), np.arange(-4, 5))
    assert stat < crit
    q = math.exp(-eps_d)
    mean_abs = 2 * q / ((1 - q) * (1 + q))  # E|DLap|
    assert np.abs(d).mean() == pytest.approx(mean_abs, rel=0.3)  # 100 draws: sd of the mean ~ 10 %


def binned_chi_square(samples, dist, bins=40):
    """Pearson statistic on about ``bins`` quantile bins of the discrete ``dist`` (frozen scipy
    distribution on the integers), and its 99.9 % critical value."""
    samples = np.asarray(samples)
    edges = np.unique(dist.ppf(np.linspace(0, 1, bins + 1)[1:-1]))  # bin j holds edges[j-1] < x <= edges[j]
    expected = np.diff(np.concatenate([[0.0], dist.cdf(edges), [1.0]])) * len(samples)
    observed = np.bincount(np.searchsorted(edges, samples, side="left"), minlength=len(edges) + 1)
    stat = ((observed - expected) ** 2 / expected).sum()
    return stat, chi2.ppf(0.999, len(edges))


def _q_of(scale):
    """q = exp(-s / t) of the exact sampler at ``scale`` (t / s: the scale rounded up)."""
    t, s = _rational_up(np.array([scale]))
    return math.exp(-int(s[0]) / int(t[0]))


class IntegerUniforms(Uniforms):
    """Uniform integers from a numpy Generator, recording the bounds; no floating-point uniforms."""

    def __init__(self, seed):
        self.inner, self.highs = GeneratorUniforms(np.random.default_rng(seed)), []

    def below(self, owner, high):
        self.highs.append(np.broadcast_to(np.asarray(high), np.shape(owner)))
        return self.inner.below(owner, high)

    def random(self, owner):
        raise AssertionError("a floating-point uniform was drawn")

    open_unit = random


@pytest.mark.parametrize("r", [Fraction(1, 3), Fraction(1, 10), Fraction(7, 3)])
@pytest.mark.parametrize("mean", [2.0, 50.0, 5000.0])
def test_exact_negative_binomial_has_the_nb_pmf(r, mean):
    """NB(r, q) drawn with integer arithmetic: chi-square on 40 quantile bins against scipy's pmf."""
    q0 = mean / r / (1 + mean / r)  # r q / (1 - q) = mean
    scale = -1 / math.log(q0)
    x = negative_binomial(np.random.default_rng(int(mean) + r.denominator), r, scale, (100_000,))
    assert x.dtype == np.int64 and x.min() >= 0
    stat, crit = binned_chi_square(x, nbinom(float(r), 1 - _q_of(scale)))
    assert stat < crit, (stat, crit)


@pytest.mark.parametrize("h, mean", [(3, 4.0), (7, 300.0)])
def test_h_exact_shares_sum_to_a_geometric_and_differences_to_dlap(h, mean):
    """h NB(1/h) shares from the release path (integer uniforms) sum to the geometric NB(1, q)."""
    q0 = mean / (1 + mean)
    p = 1 - q0
    cal = Calibration("discrete_laplace", h, p, p, 0.0, 0.0)
    e_c, e_p = cal.draw(IntegerUniforms(h), (60_000, h))
    d = (2 * e_c).sum(axis=1)
    q = _q_of(nb_scale(p))
    assert q >= q0  # the scale rounds up: at least the calibrated noise
    stat, crit = chi_square(d, lambda x: dlap_pmf(x, -math.log(q)), np.arange(-int(4 * mean), int(4 * mean) + 1))
    assert stat < crit, (stat, crit)
    # one sign alone: sum of h NB(1/h) is geometric
    plus = negative_binomial(IntegerUniforms(h + 1), Fraction(1, h), nb_scale(p), (60_000, h)).sum(axis=1)
    stat, crit = binned_chi_square(plus, nbinom(1, 1 - q))
    assert stat < crit, (stat, crit)


def test_exact_nb_shares_at_the_builtin_scale_have_the_nb_moments(builtin):
    """--mechanism distributed --epsilon 1 with 10 clients on the built-in data: each share is
    NB(1/10, p) with q / (1 - q) ~ 6.4e5 on D; mean r q / (1 - q) and variance r q / (1 - q)^2
    within 5 standard errors (NB(1/10) has excess kurtosis about 6 / r = 60)."""
    mech = DistributedNoiseMechanism(1.0, 10)
    cal = mech.calibration(builtin["m"])
    r, n = 0.1, 40_000
    for p in (cal.param_c, cal.param_p):
        x = negative_binomial(np.random.default_rng(5), Fraction(1, 10), nb_scale(p), (n,)).astype(np.float64)
        q = 1 - p
        mean, var = r * q / (1 - q), r * q / (1 - q) ** 2
        assert abs(x.mean() - mean) < 5 * math.sqrt(var / n), (x.mean(), mean)
        assert abs(x.var() / var - 1) < 5 * math.sqrt((6 / r + 2) / n), (x.var(), var)
    assert 1 / cal.param_c > 6e5  # the large scale of D is really exercised


def test_release_shares_use_integer_uniforms_only():
    """The release path draws only uniform integers (the old inversion of doubles k / 2^53 fails
    here), and the bounds are exact int64 (geometric scale t, table sizes, h)."""
    cal = DistributedNoiseMechanism(1.0, 10).calibration(458_407)
    src = IntegerUniforms(0)
    e_c, e_p = cal.draw(src, (200, 10))
    assert src.highs and all(h.dtype.kind in "iu" or h.dtype == object for h in src.highs)
    assert np.all(2 * e_c == np.round(2 * e_c)) and np.all(e_p == np.round(e_p))
    assert max(int(np.max(h)) for h in src.highs) > 2**32  # table sizes and scales beyond 32 bits


@pytest.mark.parametrize("clients", [10, 1000, 458_407])
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 10.0])
def test_exact_nb_scale_rounds_towards_more_noise(clients, epsilon):
    """The sampler's q = exp(-s / t) gives (M - 1) s / t <= eps_D and s / t <= eps_P as accounted
    (exact rational comparison): the privacy events' eps are never undercut."""
    mech = DistributedNoiseMechanism(epsilon, clients)
    m = 458_407
    cal = mech.calibration(m)
    split = mech.eps_split
    for p, sens, eps in ((cal.param_c, m - 1, split * epsilon), (cal.param_p, 1, (1 - split) * epsilon)):
        t, s = (int(v[0]) for v in _rational_up(np.array([nb_scale(p)])))
        assert Fraction(sens * s, t) <= Fraction(eps)


@pytest.mark.parametrize("honest", [1, 6])
def test_any_h_skellam_shares_sum_to_skellam(honest):
    mech = DistributedNoiseMechanism(1.0, 12, noise="skellam", delta=1e-6, honest_fraction=honest / 12)
    cal = mech.calibration(total=101)
    assert mech.honest == honest
    _, e_p = cal.draw(np.random.default_rng(2), (50_000, honest))
    mu = cal.param_p
    support = np.arange(-int(4 * math.sqrt(2 * mu)), int(4 * math.sqrt(2 * mu)) + 1)
    stat, crit = chi_square(e_p.sum(axis=1), lambda x: skellam.pmf(x, mu, mu), support)
    assert stat < crit


@pytest.mark.parametrize("noise, delta", [("discrete_laplace", None), ("skellam", 1e-6), ("gaussian", 1e-6)])
def test_total_noise_is_k_over_h_times_the_curators_and_matches_the_fast_path(noise, delta):
    mech = DistributedNoiseMechanism(1.0, 40, noise=noise, delta=delta, honest_fraction=0.25)
    m = 1001
    cal = mech.calibration(m)
    var_c, var_p = mech.noise_variance(m)
    assert var_p == pytest.approx(4 * cal.var_p, rel=1e-3)
    e_c, e_p = cal.draw(np.random.default_rng(3), (40_000, 40))
    f_c, f_p = mech.aggregate_noise(np.random.default_rng(4), m, reps=40_000)
    for per_client, fast, var in ((e_c.sum(axis=1), f_c, var_c), (e_p.sum(axis=1), f_p, var_p)):
        assert per_client.var() == pytest.approx(var, rel=0.04)
        assert fast.var() == pytest.approx(var, rel=0.04)


# ---- calibration ---------------------------------------------------------------------------------
def test_skellam_rdp_bound_holds_against_the_exact_renyi_divergence():
    for mu, d, a in itertools.product([0.5, 5.0, 80.0], [1, 4], [2, 8, 40]):
        x = np.arange(-int(40 * math.sqrt(mu)) - 60, int(40 * math.sqrt(mu)) + 60)
        lp, lq = skellam.logpmf(x, mu, mu), skellam.logpmf(x - d, mu, mu)
        ok = np.isfinite(lp) & np.isfinite(lq)
        exact = logsumexp(a * lp[ok] + (1 - a) * lq[ok]) / (a - 1)
        assert exact <= skellam_rdp(a, mu, d) * (1 + 1e-9)


def test_rdp_conversion_is_conservative_against_the_analytic_gaussian():
    sigma = float(analytic_gaussian_sigma(1.0, 1e-6))
    alphas = np.arange(2, 2000.0)
    eps = rdp_to_dp(alphas / (2 * sigma**2), alphas, 1e-6)
    assert 1.0 < eps < 1.15


@pytest.mark.parametrize("eps, delta", [(1.0, 1e-6), (4.0, 1e-9), (10.0, 1e-6)])
def test_skellam_calibration_is_tight_by_the_tightest_accountant(eps, delta):
    """One evaluation spends its nominal eps by the PLD (not less, as an RDP calibration would)."""
    mech = DistributedNoiseMechanism(eps, 10, noise="skellam", delta=delta)
    m = 10_001
    cal = mech.calibration(m)
    mus = (cal.param_c, cal.param_p)
    c = compose([mech.privacy_event(m)], delta)
    assert c.accountant == "pld" and eps * 0.99 <= c.epsilon <= eps * (1 + 1e-9)
    assert skellam_epsilon(mus, (m - 1, 1), delta) > eps  # the RDP bound alone would not allow this noise
    # the squared-sensitivity budget is split as asked: Delta^2/(2 mu) in proportion split : 1 - split
    w = (m - 1) ** 2 / (2 * mus[0]) / ((m - 1) ** 2 / (2 * mus[0]) + 1 / (2 * mus[1]))
    assert w == pytest.approx(mech.eps_split, rel=1e-9)


def _dgauss_pmf(s):
    ks = np.arange(-int(40 * s) - 40, int(40 * s) + 41)
    w = np.exp(-ks.astype(float) ** 2 / (2 * s * s))
    z = w.sum()
    return lambda x: np.exp(-np.asarray(x, dtype=float) ** 2 / (2 * s * s)) / z


def test_gaussian_shares_from_the_streams_are_exact_discrete_gaussians_on_the_grid():
    """Release path: each share is C_GRID N_Z(0, s_c^2) and P_GRID N_Z(0, s_p^2) (chi-square against
    the discrete Gaussian pmf at s = 3 and s = 40), never off the grid; and at s = 1 its variance is
    the discrete Gaussian's, not that of a rounded continuous Gaussian (1 + 1/12)."""
    n = 1000
    src = KeyStreams(list(range(1, n + 1)), "noise|0")
    cal = Calibration("gaussian", 1, 3.0, 40.0, 9.0 * C_GRID**2, 1600.0 * P_GRID**2)
    e_c, e_p = cal.draw(src, (60, n))
    for e, grid, s in ((e_c, C_GRID, 3.0), (e_p, P_GRID, 40.0)):
        k = e / grid
        assert np.all(k == np.round(k))
        support = np.arange(-int(3 * s), int(3 * s) + 1)
        stat, crit = chi_square(k.ravel(), _dgauss_pmf(s), support)
        assert stat < crit, s
    one = Calibration("gaussian", 1, 1.0, 1.0, C_GRID**2, P_GRID**2)
    e_c, _ = one.draw(KeyStreams(list(range(1, n + 1)), "noise|1"), (150, n))
    k = (e_c / C_GRID).ravel()
    assert k.var() == pytest.approx(float(dgauss_variance(1.0)), rel=0.025)  # rounded N(0, 1): +8 %
    stat, crit = chi_square(k, _dgauss_pmf(1.0), np.arange(-4, 5))
    assert stat < crit


def test_sum_of_h_discrete_gaussian_shares_has_variance_h_s2():
    """The clients' shares, drawn together from their own streams, sum to variance h s^2 (s = 1, h = 4)."""
    h = 4
    cal = Calibration("gaussian", h, 1.0, 2.0, h * C_GRID**2, 4 * h * P_GRID**2)
    e_c, e_p = cal.draw(KeyStreams(list(range(1, h + 1)), "noise|2"), (40_000, h))
    tot_c, tot_p = e_c.sum(axis=1) / C_GRID, e_p.sum(axis=1) / P_GRID
    assert tot_c.var() == pytest.approx(h * float(dgauss_variance(1.0)), rel=0.03)
    assert tot_p.var() == pytest.approx(h * 4.0, rel=0.03)
    assert abs(tot_c.mean()) < 0.03 and abs(tot_p.mean()) < 0.05
    # any h: one share per entry (h = 49, where 1 / h * h is not 1 in floating point)
    e_c, _ = Calibration("gaussian", 49, 3.0, 3.0, 1.0, 1.0).draw(KeyStreams(list(range(1, 50)), "noise|3"), (2, 49))
    assert e_c.shape == (2, 49) and np.all(e_c / C_GRID == np.round(e_c / C_GRID))


@pytest.mark.parametrize("clients", [5, 458_407])
def test_gaussian_calibration_is_tight_by_the_ddg_accountant(clients):
    """Shares N_Z(0, s^2) sum to (eps, delta) exactly at the nominal budget (PLD of the distributed
    discrete Gaussian, Kairouz, Liu & Steinke 2021): 2 % less noise would exceed it.  With many
    clients the P shares stay at least MIN_SHARE_STD grid steps."""
    mech = DistributedNoiseMechanism(1.0, clients, noise="gaussian", delta=1e-5)
    m = 2001
    cal = mech.calibration(m)
    ev = mech.privacy_event(m)
    c = compose([ev], 1e-5)
    assert c.accountant == "pld" and 0.999 <= c.epsilon <= 1.0 + 1e-9
    assert [e["sensitivity"] for e in ev["events"]] == [128 * (m - 1), 128]
    v_c, v_p = cal.share_variances()
    assert cal.param_c**2 >= v_c and cal.param_p**2 >= v_p and min(cal.param_c, cal.param_p) >= MIN_SHARE_STD
    smaller = [dict(e, variance=e["variance"] * 0.98) for e in ev["events"]]
    assert compose(smaller, 1e-5).epsilon > 1.0
    assert mech.noise_variance(m) == pytest.approx((clients * v_c * C_GRID**2, clients * v_p * P_GRID**2))
    if clients == 5:  # few clients: about the Gaussian with the analytic sigma (Mahalanobis 1 / sigma1)
        sigma1 = float(analytic_gaussian_sigma(1.0, 1e-5))
        maha = (128 * (m - 1)) ** 2 / (clients * v_c) + 128**2 / (clients * v_p)
        assert maha == pytest.approx(1 / sigma1**2, rel=0.01)
    else:
        assert cal.param_p == pytest.approx(MIN_SHARE_STD)


# ---- the centred release ---------------------------------------------------------------------------
@pytest.mark.parametrize("noise, delta", [("discrete_laplace", None), ("skellam", 1e-6), ("gaussian", 1e-6)])
def test_release_is_exact_in_fixed_point_and_the_estimator_is_the_centred_one(noise, delta):
    scores, labels = make_ctr_dataset(3000, seed=2)
    scores = np.round(scores, 2)  # ties: mid-ranks are half-integers
    r = midranks(scores)
    owner = np.arange(3000) % 7
    stats = LocalStatistics.from_owner(r, labels, owner, 7)
    mech = DistributedNoiseMechanism(2.0, 7, noise=noise, delta=delta)
    noisy = mech.privatize(stats, np.random.default_rng(0), total=3000)
    for x in (noisy.local_sum, noisy.local_p):
        assert np.array_equal(from_fixed(to_fixed(x)), x)  # the protocol's rounding changes nothing
    # the server's eq. (1) on the sums equals 1/2 + C' / (P' N'), C' = sum localSum' - rbar P'
    s, p = noisy.local_sum.sum(), noisy.local_p.sum()
    c = s - 1499.5 * p
    assert auc_from_sums(s, p, 3000 - p) == pytest.approx(0.5 + c / (p * (3000 - p)), abs=1e-12)
    # and without noise it is the exact AUC
    zero = LocalStatistics.from_owner(r, labels, owner, 7)
    assert auc_from_sums(zero.local_sum.sum(), zero.local_p.sum(), 3000 - zero.local_p.sum()) == pytest.approx(
        rank_auc(labels, scores), abs=1e-12)


def test_one_client_at_a_time_as_in_the_protocol():
    """privatize on one client's statistics (shape (1,)), or on a host's share of the clients,
    uses the mechanism's K; more clients than K are refused."""
    mech = DistributedNoiseMechanism(1.0, 1000)
    one = LocalStatistics.from_client(np.arange(10.0), np.array([0, 1] * 5))
    draws = np.array([mech.privatize(one, np.random.default_rng(i), total=2000).local_p[0] for i in range(3000)])
    assert (draws == one.local_p[0]).mean() > 0.99  # a share of 1/1000 of DLap is almost always 0
    two = LocalStatistics.from_owner(np.arange(10.0), np.ones(10), np.arange(10) % 2, 2)
    assert DistributedNoiseMechanism(1.0, 3).privatize(two, np.random.default_rng(0), total=10).local_p.shape == (2,)
    with pytest.raises(ValueError, match="1 clients"):
        DistributedNoiseMechanism(1.0, 1).privatize(two, np.random.default_rng(0), total=10)


# ---- accuracy ------------------------------------------------------------------------------------------
def simulated_std(mech, d, reps, seed):
    e_c, e_p = mech.aggregate_noise(np.random.default_rng(seed), d["m"], reps=reps)
    rbar = (d["m"] - 1) / 2
    est = estimate_auc(d["s"] + e_c + rbar * e_p, d["p"] + e_p, d["m"], mech).auc
    return est.std(ddof=1), est.mean()


@pytest.mark.parametrize("noise, delta", [("discrete_laplace", None), ("skellam", 1e-6)])
def test_variance_optimal_split_against_a_grid_search(builtin, noise, delta):
    """Simulated std over a grid of splits: the formula's split (with the data's true AUC and base rate)
    is the minimum, the curve follows the delta-method variance, and the default split from the public
    priors loses < 0.5 %."""
    d = builtin
    truth = dict(prior_auc=d["auc"], prior_base_rate=d["p"] / d["m"])
    best = DistributedNoiseMechanism(1.0, 100, noise=noise, delta=delta, **truth).eps_split
    grid = [round(best + off, 4) for off in (-0.3, -0.15, -0.07, 0.0, 0.07, 0.15) if 0 < best + off < 0.98]
    reps = 30_000  # relative standard error of a std: 1 / sqrt(2R) = 0.4 %
    sims, lins = [], []
    for i, sp in enumerate(grid):
        mech = DistributedNoiseMechanism(1.0, 100, noise=noise, delta=delta, split=sp)
        sims.append(simulated_std(mech, d, reps, 10 + i)[0])
        lins.append(mech.linearised_std(d["m"], d["p"], d["auc"]))
    i_best = grid.index(round(best, 4))
    assert np.argmin(lins) == i_best
    assert sims[i_best] <= min(sims) * 1.012
    for sp, sd, lin in zip(grid, sims, lins):
        assert sd == pytest.approx(lin, rel=0.02), sp
    # the closed form matches the numerical minimiser (Laplace limit) and the priors are close enough
    if noise == "discrete_laplace":
        assert best == pytest.approx(laplace_split(prior_ratio(**{"prior_auc": d["auc"],
                                                                   "prior_base_rate": d["p"] / d["m"]})), abs=0.005)
    default = DistributedNoiseMechanism(1.0, 100, noise=noise, delta=delta)
    assert default.linearised_std(d["m"], d["p"], d["auc"]) <= lins[i_best] * 1.005


def test_target_std_at_most_1_5e_5_for_every_k(builtin):
    """eps = 1, all clients honest: std <= 1.5e-5 for K from 10 to 458,407 (R = 20,000 each: 0.5 % error)."""
    d = builtin
    for k in (10, 458, 4584, 45840, 458407):
        mech = DistributedNoise(1.0, k)
        sd, mean = simulated_std(mech, d, 20_000, k)
        assert sd <= 1.5e-5, k
        assert sd == pytest.approx(mech.linearised_std(d["m"], d["p"], d["auc"]), rel=0.02)
        assert abs(mean - d["auc"]) < 4 * sd / math.sqrt(20_000)
    assert centred_std(d["m"], d["p"], d["auc"], 1.0, None, 1.0, 458407) < 1.35e-5


def test_per_client_shares_through_the_simulator_give_the_same_std():
    """The protocol's path (every client's privatize, summed) agrees with the fast path and the target."""
    sim = Simulator(*make_ctr_dataset(20_000, seed=3))
    mech = DistributedNoise(1.0, 50, honest_fraction=0.5)
    est = sim.mechanism_estimates(mech, 50, "iid", reps=2000, seed=6)
    lin = mech.linearised_std(sim.m, sim.p, sim.true_auc)
    assert est.std(ddof=1) == pytest.approx(lin, rel=0.05)  # 1/sqrt(2R) = 1.6 %
    assert abs(est.mean() - sim.true_auc) < 4 * lin / math.sqrt(2000)


def test_honest_fraction_costs_sqrt_k_over_h_in_std(builtin):
    d = builtin
    full = DistributedNoise(1.0, 100).linearised_std(d["m"], d["p"], d["auc"])
    for f, h in ((0.5, 50), (0.1, 10), (0.013, 2)):
        mech = DistributedNoise(1.0, 100, honest_fraction=f)
        assert mech.honest == h
        assert mech.linearised_std(d["m"], d["p"], d["auc"]) == pytest.approx(full * math.sqrt(100 / h))


# ---- a single client's share -------------------------------------------------------------------------------
def test_a_single_share_is_not_private_on_its_own():
    m = 458_407
    one = DistributedNoise(1.0, 1)
    assert one.share_epsilon(m) == pytest.approx(1 - one.eps_split)  # h = 1: the share is the whole DLap on P
    losses = [DistributedNoise(1.0, k).share_epsilon(m) for k in (10, 1000, 100_000)]
    assert 1 < losses[0] < losses[1] < losses[2]
    sk = DistributedNoise(1.0, 1000, noise="skellam", delta=1e-6)
    assert DistributedNoise(1.0, 1, noise="skellam", delta=1e-6).share_epsilon(m) == pytest.approx(1.0, rel=1e-3)
    assert sk.share_epsilon(m) > 50  # 1/1000 of the variance: (eps, 1e-6) with eps ~ 76
    ga = DistributedNoise(1.0, 1000, noise="gaussian", delta=1e-6)
    assert DistributedNoise(1.0, 1, noise="gaussian", delta=1e-6).share_epsilon(m) == pytest.approx(1.0, rel=1e-3)
    assert ga.share_epsilon(m) > 50


def test_discrete_laplace_variance_formula():
    rng = np.random.default_rng(7)
    q = math.exp(-0.3)
    x = rng.geometric(1 - q, 400_000) - rng.geometric(1 - q, 400_000)
    assert x.var() == pytest.approx(float(dlap_variance(0.3)), rel=0.02)


def test_default_split_for_each_noise():
    assert optimal_split(1.0) == pytest.approx(0.716, abs=0.001)  # priors AUC 0.75, base rate 0.25: r = 0.25
    assert optimal_split(1.0, "skellam") == pytest.approx(0.8)
    assert optimal_split(8.0) > optimal_split(1.0)  # the discrete P noise is cheaper at large eps
    assert optimal_split(1.0, "gaussian", honest=1) == optimal_split(1.0, "gaussian", honest=100_000) == pytest.approx(0.8)


# ---- protocol and parameters -------------------------------------------------------------------------------
def test_plain_protocol_refuses_distributed_noise():
    clients = builtin_clients(3, samples=500)
    with pytest.raises(InputError, match="use --protocol mpc"):
        evaluate(clients, DistributedNoise(1.0, 3), protocol="plain")


@pytest.mark.parametrize("kwargs, match", [
    (dict(epsilon=0, clients=3), "epsilon must be > 0"),
    (dict(epsilon=1, clients=0), "clients must be a positive integer"),
    (dict(epsilon=1, clients=3, honest_fraction=0), r"honest fraction must be in \(0, 1\]"),
    (dict(epsilon=1, clients=3, honest_fraction=1.5), r"honest fraction must be in \(0, 1\]"),
    (dict(epsilon=1, clients=3, noise="gaussian"), "gaussian noise needs --delta"),
    (dict(epsilon=1, clients=3, noise="skellam"), "skellam noise needs --delta"),
    (dict(epsilon=1, clients=3, delta=1e-6), "delta applies to skellam and gaussian"),
    (dict(epsilon=1, clients=3, noise="laplace"), "must be one of discrete_laplace, skellam, gaussian"),
    (dict(epsilon=1, clients=3, split=1.0), r"split must be in \(0, 1\)"),
])
def test_parameters_checked(kwargs, match):
    with pytest.raises(InputError, match=match):
        DistributedNoise(**kwargs)


def test_a_very_large_epsilon_is_calibrated_at_the_cap_with_more_noise_never_less():
    """eps up to the accepted 10^4: discrete Laplace shares are calibrated at eps <= 30 per statistic
    (beyond ~36, 1 - exp(-eps) rounds to 1 and the sampler's scale was a math domain error), the
    Gaussian at eps <= 10 (its accountant's PLD would not fit in memory): each at least as noisy as
    the requested eps needs, and the draws still work."""
    lap = DistributedNoiseMechanism(epsilon=1e4, clients=2)
    cal = lap.calibration(1000)
    split = lap.split_for(2)
    assert 0 < cal.param_c < 1 and 0 < cal.param_p < 1
    assert cal.var_c >= float(dlap_variance(split * 1e4 / 999)) / 4 and cal.var_p >= float(dlap_variance((1 - split) * 1e4))
    c, p = cal.draw(GeneratorUniforms(np.random.default_rng(7)), (4,))
    assert np.all(np.isfinite(c)) and np.all(np.isfinite(p))
    gauss = DistributedNoiseMechanism(epsilon=1e4, clients=2, noise="gaussian", delta=1e-6)
    capped = DistributedNoiseMechanism(epsilon=10.0, clients=2, noise="gaussian", delta=1e-6)
    assert gauss.calibration(1000) == capped.calibration(1000)
