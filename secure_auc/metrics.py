"""Exact AUC from global ranks (the Mann-Whitney form used by FedAUC).

With 0-based ranks ``r_i`` of the M scores sorted in increasing order, P
positives and N negatives,

    AUC = (sum_i r_i y_i - P (P - 1) / 2) / (P N).

Tied scores get their average ("mid") rank: a group of equal scores that would
occupy positions ``a .. b`` all get ``(a + b) / 2``.  With mid-ranks the formula
counts a tied positive/negative pair as one half, which is exactly what
``sklearn.metrics.roc_auc_score`` (the trapezoidal area under the ROC curve)
does, so the two agree on every input.

Mid-ranks are multiples of 1/2, so ``2 r_i`` is an integer; we compute the sum
as an exact integer (``sum_i 2 r_i y_i``) and divide once at the end.
"""

from __future__ import annotations

import numpy as np

from .validation import InputError, check_binary_labels, check_scores

__all__ = ["midranks", "twice_midranks", "rank_auc", "auc_from_sums"]


def twice_midranks(scores: np.ndarray) -> np.ndarray:
    """Return ``2 * r`` as int64, where ``r`` are the 0-based mid-ranks of ``scores``.

    One stable argsort, then the first and last position of each tie group
    from the positions where the sorted values change.  O(M log M), vectorised.

    Parameters
    ----------
    scores : array-like of shape (M,)
        Scores to rank; ties allowed.  Not validated (see :func:`rank_auc`).

    Returns
    -------
    numpy.ndarray of int64, shape (M,)
        Twice the mid-rank of each score, in the input order; always an integer.

    Examples
    --------
    >>> from secure_auc.metrics import twice_midranks
    >>> twice_midranks([0.1, 0.4, 0.35, 0.4])
    array([0, 5, 2, 5])
    """
    scores = np.asarray(scores)
    m = scores.shape[0]
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(scores, kind="stable")
    s = scores[order]
    # starts[g] = first sorted position of tie group g
    change = np.empty(m, dtype=bool)
    change[0] = True
    np.not_equal(s[1:], s[:-1], out=change[1:])
    starts = np.flatnonzero(change)
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:] - 1
    ends[-1] = m - 1
    group = np.cumsum(change) - 1
    twice = (starts + ends)[group].astype(np.int64)
    out = np.empty(m, dtype=np.int64)
    out[order] = twice
    return out


def midranks(scores: np.ndarray) -> np.ndarray:
    """0-based mid-ranks of ``scores`` (ties share their average rank), as float64.

    Parameters
    ----------
    scores : array-like of shape (M,)
        Scores to rank: finite numbers (a column ``(M, 1)`` is flattened); ties allowed.

    Returns
    -------
    numpy.ndarray of float64, shape (M,)
        The mid-rank of each score, in the input order: a multiple of 1/2.

    Raises
    ------
    InputError
        If ``scores`` is not one-dimensional, not numeric, or holds NaN or infinities.

    Examples
    --------
    The two scores 0.4 would occupy positions 2 and 3; both get 2.5:

    >>> from secure_auc import midranks
    >>> midranks([0.1, 0.4, 0.35, 0.4])
    array([0. , 2.5, 1. , 2.5])
    """
    return twice_midranks(check_scores(scores)) / 2.0


def auc_from_sums(rank_sum, positives, negatives):
    """AUC from the global rank sum ``sum r_i y_i`` and the class counts.

    Vectorised: any argument may be an array (e.g. one entry per repetition of
    a simulation, with noisy counts).  This is the estimator the server
    applies to the aggregated statistics:

        AUC = (S - P (P - 1) / 2) / (P N).

    Parameters
    ----------
    rank_sum : float or array-like
        S, the sum of the 0-based (mid-)ranks of the positives over all clients.
    positives : float or array-like
        P, the number of positives (possibly noisy, so not necessarily an integer).
    negatives : float or array-like
        N, the number of negatives.

    Returns
    -------
    numpy.ndarray of float64
        The AUC, broadcast over the arguments (0-d for scalar arguments).  No
        clipping: noisy sums can give values outside [0, 1]; with P N = 0 it is
        inf or nan (no warning).

    Examples
    --------
    Positives at mid-ranks 2, 4, 6 and 7 among M = 8 samples (P = N = 4):

    >>> from secure_auc import auc_from_sums
    >>> float(auc_from_sums(2 + 4 + 6 + 7, 4, 4))
    0.8125
    >>> auc_from_sums([19.0, 17.5], 4, 4)
    array([0.8125 , 0.71875])
    """
    rank_sum = np.asarray(rank_sum, dtype=np.float64)
    p = np.asarray(positives, dtype=np.float64)
    n = np.asarray(negatives, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # no positive or no negative: inf or nan, as documented
        return (rank_sum - p * (p - 1.0) / 2.0) / (p * n)


def rank_auc(y_true, y_score) -> float:
    """Exact ROC AUC via the rank formula, ``roc_auc_score(y_true, y_score)`` style.

    Parameters
    ----------
    y_true : array-like of shape (M,)
        Binary labels, 0/1 or bool.
    y_score : array-like of shape (M,)
        Finite scores; higher means more likely positive.  Ties allowed.

    Returns
    -------
    float
        Equal to ``sklearn.metrics.roc_auc_score(y_true, y_score)`` up to
        floating-point rounding of the final division.

    Raises
    ------
    InputError
        If the labels are not 0/1, a score is not finite, the arrays are not
        one-dimensional or differ in length, or all labels are of one class
        (the AUC is then undefined).

    Examples
    --------
    Three scores 0.4 are tied, one positive and two negatives.  Counting the
    positive/negative pairs in the right order, with a tie as one half: 0.35
    beats 2 negatives, 0.8 and 0.9 beat all 4, the positive 0.4 beats 2 and
    ties with 2; 13 of 16 pairs, which is also ``roc_auc_score``'s value.

    >>> from secure_auc import rank_auc
    >>> y = [0, 0, 1, 1, 0, 1, 1, 0]
    >>> s = [0.1, 0.4, 0.35, 0.8, 0.4, 0.4, 0.9, 0.2]
    >>> rank_auc(y, s)
    0.8125
    >>> rank_auc([1, 1, 1], [0.2, 0.5, 0.9])
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: AUC is undefined when all labels are of one class (3 positives, 0 negatives)
    """
    y = check_binary_labels(y_true, name="y_true")
    s = check_scores(y_score, name="y_score")
    if y.shape[0] != s.shape[0]:
        raise InputError(
            f"y_true has {y.shape[0]} entries but y_score has {s.shape[0]}"
        )
    p = int(y.sum())
    n = y.shape[0] - p
    if p == 0 or n == 0:
        raise InputError(
            "AUC is undefined when all labels are of one class "
            f"({p} positives, {n} negatives)"
        )
    twice = twice_midranks(s)
    # exact integer arithmetic: 2*sum(r y) - P(P-1) over 2PN
    twice_sum = int(twice[y.astype(bool)].sum())
    numerator = twice_sum - p * (p - 1)
    return numerator / (2.0 * p * n)
