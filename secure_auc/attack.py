"""The label-guessing attack of the paper's appendix, run on a server's recorded view.

The server marks the k samples with the highest scores it has seen as positive
(paper, Table "Top-k analysis on Criteo data").  Its precision is the fraction
of true positives among them.

The attacker is given only what the server recorded:

* plain-sort protocol: the :class:`~secure_auc.protocol.ScoresMessage` list.
  The server knows the score values (in vertical FL it computed them from its
  own features, so a score identifies the sample); each client's message is
  shuffled, which hides nothing about which scores are high.
* MPC protocol: the values opened to the server (:mod:`secure_auc.mpc.audit`):
  two aggregated numbers and masked Beaver openings, no per-sample value.  With
  no per-sample information the best the attacker can do is guess k samples
  at random, so its precision is the base rate.

The evaluation of the guesses (which guessed samples are really positive) is
done by the harness, which knows the ground truth; the attacker never sees it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["top_k_guess_from_scores", "precision_at_k"]


def top_k_guess_from_scores(per_sample_scores: np.ndarray | None, k: int, total: int,
                            rng: np.random.Generator) -> np.ndarray:
    """Indices (into the server's sample numbering) the attacker marks positive.

    ``per_sample_scores`` is the per-sample information in the server's view, or
    None when the view has none (then k samples are guessed uniformly at random).
    """
    k = min(k, total)
    if per_sample_scores is None:
        return rng.choice(total, size=k, replace=False)
    # highest scores first; ties broken at random (the attacker has nothing better)
    jitter = rng.random(len(per_sample_scores))
    order = np.lexsort((jitter, -np.asarray(per_sample_scores, dtype=np.float64)))
    return order[:k]


def precision_at_k(guesses: np.ndarray, true_labels: np.ndarray) -> float:
    return float(np.mean(true_labels[guesses])) if len(guesses) else float("nan")
