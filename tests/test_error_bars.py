"""The standard deviation and 95 % interval reported with every DP estimate, against
simulation: the empirical std of many noisy estimates of the same data, and the share of
intervals that hold the true AUC."""

import numpy as np
import pytest
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score

from secure_auc import builtin_clients, evaluate, make_mechanism
from secure_auc.evaluate import error_bars
from secure_auc.local_stats import LocalStatistics

REPS = 400


def _check(estimates, reported, truth):
    estimates = np.asarray(estimates)
    std, lo, hi = (np.array([r[i] for r in reported], dtype=float) for i in range(3))
    empirical = estimates.std(ddof=1)
    # the std of a std from 400 draws is ~3.5 %; the reported one is the delta method at the noisy estimate
    assert np.median(std) == pytest.approx(empirical, rel=0.15), (np.median(std), empirical)
    coverage = np.mean((lo <= truth) & (truth <= hi))
    assert 0.90 <= coverage <= 0.99, coverage
    return float(np.median(std)), float(empirical), float(coverage)


EVALUATE_SEEDS = range(3)  # real evaluations, each reporting what the vectorised path computes from its estimate


@pytest.fixture(scope="module")
def five_clients():
    """The clients of the std tests, their sizes, and the exact statistics (computed once: each
    repetition below draws only the clients' noise, with the mechanism's own privatize or label flips)."""
    out = {}
    for partition in ("iid", "noniid"):
        clients = builtin_clients(5, partition, samples=6000, data_seed=1)
        scores = np.concatenate([c.scores for c in clients])
        labels = np.concatenate([c.labels for c in clients])
        owner = np.repeat(np.arange(5), [len(c) for c in clients])
        ranks = rankdata(scores) - 1
        out[partition] = dict(clients=clients, labels=labels, ranks=ranks, m=len(labels),
                              sizes=[len(c) for c in clients], truth=roc_auc_score(labels, scores),
                              stats=LocalStatistics.from_owner(ranks, labels, owner, 5))
    return out


def _repetitions(mech, d, reps, seed):
    """``reps`` releases of ``mech`` on the clients of ``d``: the server's estimate and P' of each, the
    noise drawn by the mechanism's own code (privatize with the exact samplers the clients use; RR:
    each label flipped independently, all repetitions in one call), the sums added up and estimated as the server does."""
    rng = np.random.default_rng(seed)
    m = d["m"]
    if mech.name == "rr":
        flipped = mech.prepare_labels(np.tile(d["labels"], reps), rng).reshape(reps, m).astype(np.float64)
        s, p = flipped @ d["ranks"], flipped.sum(axis=1)
    else:
        noisy = mech.privatize(d["stats"], rng, reps=reps, total=m)
        s, p = noisy.local_sum.sum(axis=1), noisy.local_p.sum(axis=1)
    return np.asarray(mech.estimate(s, p, m).auc, dtype=np.float64), p


def _evaluate_reports_the_error_bars_of_its_estimate(mech, d):
    """The public API: evaluate's std and interval are error_bars' at its (estimate, P'), the function
    the statistics below run on (so they hold for what evaluate reports)."""
    for s in EVALUATE_SEEDS:
        r = evaluate(d["clients"], mech, protocol="plain", seed=s, reference=False)
        assert (r.std, r.ci_low, r.ci_high) == error_bars(mech, r.auc, r.estimated_positives, d["m"], d["sizes"])
        assert r.std is not None and r.ci_low <= r.auc <= r.ci_high


@pytest.mark.parametrize("name, kwargs", [
    ("laplace", {"allocation": "adaptive"}),
    ("laplace", {"allocation": "split", "sensitivity": "global"}),
    ("laplace", {"allocation": "split", "sensitivity": "local"}),
    ("laplace", {"allocation": "orthogonal", "beta": 0.3}),
    ("gaussian", {"delta": 1e-6}),
    ("rr", {}),
])
def test_reported_std_matches_the_spread_of_estimates(five_clients, name, kwargs):
    d = five_clients["iid"]
    eps = 2.0 if name == "rr" else 0.2  # noise far above the fixed-point rounding, std 0.01 to 0.1
    mech = make_mechanism(name, eps, **kwargs)
    _evaluate_reports_the_error_bars_of_its_estimate(mech, d)
    est, pos = _repetitions(mech, d, REPS, seed=7)
    reported = [error_bars(mech, a, p, d["m"], d["sizes"]) for a, p in zip(est, pos)]
    print(name, kwargs, _check(est, reported, d["truth"]))
    assert all(lo <= a <= hi for a, (_, lo, hi) in zip(est, reported))


@pytest.mark.parametrize("delta", [None, 1e-6])  # discrete Laplace shares; Skellam shares
def test_distributed_noise_std_matches_simulation(delta):
    clients = builtin_clients(4, samples=6000, data_seed=2)
    scores = np.concatenate([c.scores for c in clients])
    labels = np.concatenate([c.labels for c in clients])
    owner = np.repeat(np.arange(4), [len(c) for c in clients])
    m = len(scores)
    stats = LocalStatistics.from_owner(rankdata(scores) - 1, labels, owner, 4)
    mech = make_mechanism("distributed", 0.05, delta=delta, clients=4)
    noisy = mech.privatize(stats, np.random.default_rng(0), reps=REPS, total=m)
    s, p = noisy.local_sum.sum(axis=1), noisy.local_p.sum(axis=1)
    est = mech.estimate(s, p, m).auc
    reported = [error_bars(mech, a, pp, m, [len(c) for c in clients]) for a, pp in zip(est, p)]
    print("distributed", delta, _check(est, reported, roc_auc_score(labels, scores)))


def test_no_noise_has_no_error_bar():
    r = evaluate(builtin_clients(2, samples=500), make_mechanism("none"), protocol="plain")
    assert (r.std, r.ci_low, r.ci_high) == (None, None, None)


def test_interval_has_the_noise_quantiles():
    # one client, global sensitivity, P noise negligible next to the rank sum's: the error is one Laplace
    # variable, whose 97.5 % quantile is b ln 20 = 2.118 std, not the normal's 1.960 std
    std, lo, hi = error_bars(make_mechanism("global", 1e-3), 0.75, 20_000.0, 100_000, [100_000])
    assert (hi - lo) / 2 == pytest.approx(np.log(20) / np.sqrt(2) * std, rel=0.02)
    # 100 clients: the sum of their noises is close to normal
    std, lo, hi = error_bars(make_mechanism("global", 0.1), 0.75, 20_000.0, 100_000, [1000] * 100)
    assert (hi - lo) / 2 == pytest.approx(1.959963984540054 * std, rel=0.02)


def test_randomized_response_on_few_samples_says_why_there_is_no_interval():
    clients = builtin_clients(1, samples=2000)
    for seed in range(3):
        r = evaluate(clients, make_mechanism("rr", 0.1), protocol="plain", seed=seed)
        assert r.ci_low is None and r.ci_high is None
        assert r.ci_note.startswith("no interval: ") and "outside (0, M = 2000)" in r.ci_note, r.ci_note


def test_conservative_interval_says_so():
    r = evaluate(builtin_clients(3, samples=3000), make_mechanism("local", 1.0), protocol="plain", seed=0)
    assert r.ci_low < r.auc < r.ci_high and "conservative by design" in r.ci_note
    r = evaluate(builtin_clients(3, samples=3000), make_mechanism("global", 1.0), protocol="plain", seed=0)
    assert "conservative" not in r.ci_note


def test_std_is_undefined_when_noisy_positives_leave_the_range():
    assert error_bars(make_mechanism("laplace", 1.0), 0.7, -3.0, 1000, [1000]) == (None, None, None)
    assert error_bars(make_mechanism("laplace", 1.0), 0.7, 1000.5, 1000, [1000]) == (None, None, None)


@pytest.mark.parametrize("kwargs", [{"allocation": "adaptive"}, {"allocation": "split", "sensitivity": "local"}])
def test_clients_holding_score_bands_get_a_conservative_std(five_clients, kwargs):
    # a client's rank summary is private, so the server calibrates as for spread-out ranks; clients holding
    # bands of scores add less noise than that, and the reported std is then larger than the true one
    d = five_clients["noniid"]
    mech = make_mechanism("laplace", 0.2, **kwargs)
    _evaluate_reports_the_error_bars_of_its_estimate(mech, d)
    est, pos = _repetitions(mech, d, REPS, seed=8)
    stds = [error_bars(mech, a, p, d["m"], d["sizes"])[0] for a, p in zip(est, pos)]
    ratio = np.median(stds) / np.std(est, ddof=1)
    assert 1.0 < ratio < 1.7, ratio


def test_the_intervals_quantiles_are_numpys():
    """outer_quantiles (the interval's 2.5 % and 97.5 % quantiles of the noise draws, found among
    the entries beyond a threshold of each row) gives np.quantile's values, bit for bit: with ties,
    infinities, a NaN, rows whose first entries are no random sample (the threshold leaves too few
    entries), rows too short for the shortcut, and other quantile pairs."""
    from secure_auc.result import outer_quantiles

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 20_000))
    x[1] = rng.integers(-3, 3, 20_000)  # ties
    x[2, rng.random(20_000) < 0.01] = np.inf
    x[3, rng.random(20_000) < 0.01] = -np.inf
    x[4, 17] = np.nan
    x[5, :5000] = np.sort(x[5, :5000])  # the sample is the row's lowest entries
    x[6] = rng.standard_cauchy(20_000)
    x[7] = 1.0  # constant
    for row, sign in ((8, 1), (9, -1)):  # the threshold leaves one entry too few: 136 in the sample, 364 after it
        x[row] = sign * rng.random(20_000)
        x[row, :136] = -sign * (5 + np.arange(136))
        x[row, 2048:2048 + 364] = -sign * (6 + np.arange(364))
    for q in ((0.025, 0.975), (0.01, 0.99), (0.2, 0.5)):
        with np.errstate(invalid="ignore"):  # inf - inf between two infinite order statistics, as numpy's
            assert np.array_equal(outer_quantiles(x, q), np.quantile(x, q, axis=1), equal_nan=True), q
    short = x[:, :5000]
    assert np.array_equal(outer_quantiles(short), np.quantile(short, (0.025, 0.975), axis=1), equal_nan=True)


def test_the_intervals_noise_draws_are_kept_per_mechanism_and_sizes():
    """The bootstrap's draws (a fixed seed: a function of the mechanism, M and the sizes) are made
    once for each and kept read-only: the same interval after other mechanisms and sizes."""
    from secure_auc.result import _interval_draws

    cases = [(make_mechanism("laplace", 0.5, allocation="adaptive"), [3000, 3000]),
             (make_mechanism("laplace", 0.5, allocation="adaptive"), [1000, 5000]),
             (make_mechanism("gaussian", 0.5, delta=1e-6), [3000, 3000]), (make_mechanism("rr", 2.0), [6000])]
    first = [error_bars(mech, 0.7, 1500.0, 6000, sizes) for mech, sizes in cases]
    assert len(set(first)) == len(first)
    _interval_draws.cache_clear()
    assert [error_bars(mech, 0.7, 1500.0, 6000, sizes) for mech, sizes in cases[::-1]] == first[::-1]
    e_s, e_p = _interval_draws(cases[0][0], 6000, (3000.0, 3000.0))
    assert not e_s.flags.writeable and not e_p.flags.writeable
