"""Exact AUC against sklearn, ties included (property-based)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp
from sklearn.metrics import roc_auc_score

from secure_auc import InputError, midranks, rank_auc
from scipy.stats import rankdata


@st.composite
def labelled_scores(draw, max_size=2000):
    m = draw(st.integers(2, max_size))
    # few distinct values -> many ties; or continuous values
    distinct = draw(st.sampled_from([1, 2, 3, 10, 1000, None]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if distinct is None:
        scores = rng.standard_normal(m)
    else:
        scores = rng.integers(0, distinct, m).astype(np.float64) / 7.0
    rate = draw(st.sampled_from([1e-4, 0.01, 0.5, 0.99, 0.9999]))
    labels = (rng.random(m) < rate).astype(np.int8)
    # at least one of each class (AUC defined)
    i, j = rng.choice(m, 2, replace=False)
    labels[i], labels[j] = 1, 0
    return scores, labels


@settings(max_examples=300, deadline=None)
@given(labelled_scores())
def test_rank_auc_equals_sklearn(data):
    scores, labels = data
    assert abs(rank_auc(labels, scores) - roc_auc_score(labels, scores)) <= 1e-12


@settings(max_examples=25, deadline=None)
@given(st.integers(10_000, 100_000), st.integers(0, 2**32 - 1), st.sampled_from([5, 500, None]))
def test_rank_auc_large_inputs(m, seed, distinct):
    rng = np.random.default_rng(seed)
    scores = rng.random(m) if distinct is None else rng.integers(0, distinct, m).astype(float)
    labels = (rng.random(m) < 0.3).astype(int)
    assert abs(rank_auc(labels, scores) - roc_auc_score(labels, scores)) <= 1e-12


@given(hnp.arrays(np.float64, st.integers(1, 300), elements=st.floats(-1e6, 1e6, allow_nan=False)))
@settings(deadline=None)
def test_midranks_match_scipy(scores):
    np.testing.assert_array_equal(midranks(scores), rankdata(scores) - 1)


def test_one_positive_and_extreme_values():
    scores = np.array([0.1, 0.1, 0.1, 0.9, -5.0])
    labels = np.array([0, 1, 0, 0, 0])
    assert rank_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=1e-15)
    assert rank_auc([0, 1], [1.0, 1.0]) == 0.5
    assert rank_auc([True, False], [2.0, 1.0]) == 1.0


@pytest.mark.parametrize(
    "labels, scores, match",
    [
        ([0, 0, 0], [0.1, 0.2, 0.3], "one class"),
        ([1, 1], [0.1, 0.2], "one class"),
        ([0, 2], [0.1, 0.2], r"y_true\[1\] is 2"),
        ([0, 1], [0.1, np.nan], r"y_score\[1\] is nan"),
        ([0, 1], [np.inf, 0.2], r"y_score\[0\] is inf"),
        ([0, 1, 1], [0.1, 0.2], "3 entries"),
        ([0, 1], [2**53 + 1, 2**53], r"y_score\[0\] is 9007199254740993: integer scores beyond 2\^53"),
        ([0, 1], np.array([0, 2**64 - 1], dtype=np.uint64), r"y_score\[1\] is 18446744073709551615"),
        ([0, 1], [-(2**53) - 1, 0], r"y_score\[0\] is -9007199254740993"),
    ],
)
def test_bad_input_named(labels, scores, match):
    with pytest.raises(InputError, match=match):
        rank_auc(labels, scores)


def test_integer_scores_up_to_2_to_the_53_are_ranked_exactly():
    for scores in ([2**53, 2**53 - 1], [-(2**53), 2**53], np.array([2**53, 3], dtype=np.uint64)):
        for labels in ([0, 1], [1, 0]):
            assert rank_auc(labels, scores) == roc_auc_score(labels, scores)


@pytest.mark.parametrize("scores, match", [
    ([np.nan, 0.1], r"scores\[0\] is nan"),
    (["a", "b"], "must be numeric"),
    (np.ones((2, 2)), "one-dimensional"),
])
def test_midranks_checks_its_input(scores, match):
    with pytest.raises(InputError, match=match):
        midranks(scores)
