"""Randomized response flips each label with probability exactly 1/(1 + e^eps), for every accepted eps."""

import math

import numpy as np
import pytest
from scipy.stats import binomtest
from sklearn.metrics import roc_auc_score

from secure_auc import builtin_clients, evaluate, make_mechanism
from secure_auc.dp.discrete import _geometric_parity, logistic_bernoulli
from secure_auc.dp.randomized_response import flip_probability, randomized_response
from secure_auc.dp.streams import KeyStreams, Uniforms, as_uniforms
from secure_auc.validation import InputError


def _exact(eps):
    return math.exp(-eps) / (1 + math.exp(-eps))  # 1 / (1 + e^eps) without overflow


@pytest.mark.parametrize("eps", [0.05, 1.0, math.log(3), 4.0])
def test_flip_rate_is_the_exact_pmf(eps):
    n = 100_000
    flips = randomized_response(np.zeros(n, dtype=np.int8), eps, np.random.default_rng(7))
    assert binomtest(int(flips.sum()), n, _exact(eps)).pvalue > 1e-3


def test_flip_rate_from_the_clients_streams():
    n, k = 40_000, 4
    owner = np.repeat(np.arange(k), n // k)
    flips = randomized_response(np.ones(n, dtype=np.int8), 0.5, KeyStreams(range(k), "labels"), owner) == 0
    assert binomtest(int(flips.sum()), n, _exact(0.5)).pvalue > 1e-3


def test_large_integers_give_the_same_probability():
    # q = exp(-s / t) with s / t = 1/2 as small integers and as integers beyond int64 (the path of eps < 2^-10)
    src, n = as_uniforms(np.random.default_rng(3)), 40_000
    owner = np.zeros(n, dtype=np.int64)
    for s, t in [(1, 2), (1 << 70, 1 << 71)]:
        odd = _geometric_parity(src, owner, s, t)
        assert binomtest(int(odd.sum()), n, _exact(0.5)).pvalue > 1e-3, (s, t)


def test_smallest_eps_flips_about_half():
    f = logistic_bernoulli(np.random.default_rng(4), 1e-6, (20_000,))
    assert binomtest(int(f.sum()), f.size, 0.5).pvalue > 1e-3


class Tape(Uniforms):
    """A scripted source: uniform integers that make every Bernoulli(exp(-1)) trial succeed
    ``successes`` times and then fail, and every other Bernoulli trial succeed."""

    def __init__(self, successes):
        self.left = successes

    def below(self, owner, high):
        high = int(np.broadcast_to(np.asarray(high), np.shape(owner)).ravel()[0])
        n = np.size(owner)
        if high == 2:  # the second trial of a Bernoulli(exp(-1)): success while some are left
            value = 0 if self.left > 0 else 1
        elif high == 3:  # its third trial fails: the trial ends after an odd number, a success
            self.left -= 1
            value = 2
        else:
            value = 0
        return np.full(n, value, dtype=np.int64)


@pytest.mark.parametrize("eps", [710.0, 1e4])
def test_flips_beyond_the_float_underflow(eps):
    # 1/(1+e^eps) underflows to 0 as a float above 709.78, so no label was ever flipped; the exact sampler
    # flips when the geometric reaches eps Bernoulli(exp(-1)) successes (probability about e^-eps, not 0)
    assert 1.0 / (1.0 + np.exp(min(eps, 709.0))) > 0 and 1.0 / (1.0 + math.exp(709.0) * math.exp(1.0)) == 0
    flipped = randomized_response(np.array([1], dtype=np.int8), eps, Tape(int(eps)))
    assert flipped.tolist() == [0]
    kept = randomized_response(np.array([1], dtype=np.int8), eps, Tape(int(eps) - 1))
    assert kept.tolist() == [1]


def test_no_privacy_is_the_mechanism_none_not_eps_inf():
    """eps = inf is refused, naming the mechanism ``none``: that one keeps every label and gives the exact AUC.
    The debiasing's flip probability at inf stays 0 (the no-noise limit ``simulate`` plots)."""
    with pytest.raises(InputError, match="mechanism 'none'"):
        randomized_response(np.array([0, 1], dtype=np.int8), float("inf"), np.random.default_rng(0))
    clients = builtin_clients(2, samples=500)
    exact = roc_auc_score(np.concatenate([c.labels for c in clients]), np.concatenate([c.scores for c in clients]))
    assert evaluate(clients, make_mechanism("none")).auc == pytest.approx(exact, abs=1e-12)
    assert flip_probability(float("inf")) == 0.0
