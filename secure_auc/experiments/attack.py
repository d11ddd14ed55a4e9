"""The label-guessing attack of the paper's appendix, run on a server's recorded view.

The server marks the k samples with the highest scores it has seen as positive
(paper, Table "Top-k analysis on Criteo data").  Its precision is the fraction
of true positives among them.

The attacker is given only what the server recorded:

* plain-sort protocol: the :class:`~secure_auc.protocol.ScoresMessage` list.
  The server knows the score values (in vertical FL it computed them from its
  own features, so a score identifies the sample); each client's message is
  shuffled, which hides nothing about which scores are high.
* MPC protocol: every buffer the server's process received
  (:func:`secure_auc.mpc.audit.record_received`).  The attacker
  (:func:`rank_values_from_received`) reads each buffer as int64 words,
  discards the shuffled permutations (uniformly random by design), and takes
  every word that could be a sample's rank (in [0, 2M)) from the buffers whose
  length matches a client's sample count or M, as that sample's score; the
  samples with no such value rank below, in random order.  On a correct run
  this finds nothing and the precision is the base rate; a run that leaks
  ranks to the server (as a ring reduce does) shows up as a precision above it.

The evaluation of the guesses (which guessed samples are really positive) is
done by the harness, which knows the ground truth; the attacker never sees it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["top_k_guess_from_scores", "precision_at_k", "rank_values_from_received"]


def top_k_guess_from_scores(per_sample_scores: np.ndarray | None, k: int, total: int,
                            rng: np.random.Generator) -> np.ndarray:
    """Indices (into the server's sample numbering) the attacker marks positive.

    ``per_sample_scores`` is the per-sample information in the server's view, or
    None when the view has none (then k samples are guessed uniformly at random).
    """
    k = min(k, total)
    if per_sample_scores is None:
        return rng.choice(total, size=k, replace=False)
    # highest scores first (unknown ones, NaN, last); ties broken at random (the attacker has nothing better)
    values = np.asarray(per_sample_scores, dtype=np.float64)
    jitter = rng.random(len(values))
    order = np.lexsort((jitter, -np.where(np.isnan(values), -np.inf, values)))
    return order[:k]


def _is_permutation(v: np.ndarray) -> bool:
    if v.size == 0 or v.min() < 0 or v.max() >= v.size:
        return False
    return bool((np.bincount(v, minlength=v.size) == 1).all())


def rank_values_from_received(received, sizes) -> np.ndarray | None:
    """Per-sample values an attacker at the server reads off the buffers it received.

    ``received``: the server's :class:`secure_auc.mpc.audit.Received` records;
    ``sizes``: the clients' public sample counts (samples numbered client by
    client).  Returns an (M,) float array, NaN where nothing was found, or None
    if nothing was found at all."""
    sizes = [int(n) for n in sizes]
    m = sum(sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)
    best = np.full(m, np.nan)
    found = np.zeros(m, dtype=int)  # plausible values in the buffer chosen for each client's samples
    for rec in received:
        if len(rec.data) % 8:
            continue
        v = np.frombuffer(rec.data, dtype=np.int64)
        if _is_permutation(v):
            continue
        plausible = (v >= 0) & (v < 2 * m)
        count = int(plausible.sum())
        if count == 0:
            continue
        segments = [(0, m)] if v.size == m else []
        segments += [(int(o), n) for o, n in zip(offsets, sizes) if n == v.size and v.size != m]
        for start, n in segments:
            if count > found[start : start + n].max():
                found[start : start + n] = count
                best[start : start + n] = np.where(plausible, v, np.nan).astype(np.float64)
    return best if np.isfinite(best).any() else None


def precision_at_k(guesses: np.ndarray, true_labels: np.ndarray) -> float:
    return float(np.mean(true_labels[guesses])) if len(guesses) else float("nan")
