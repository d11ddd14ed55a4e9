"""The label-guessing attack of the paper's appendix, run on a server's recorded view.

The server marks the k samples with the highest scores it has seen as positive
(paper, Table "Top-k analysis on Criteo data").  Its precision is the fraction
of true positives among them.

The attacker is given only what the server recorded:

* plain-sort protocol: the :class:`~secure_auc.protocol.ScoresMessage` list.
  The server knows the score values (in vertical FL it computed them from its
  own features, so a score identifies the sample); each client's message is
  shuffled, which hides nothing about which scores are high.
* MPC protocol: every buffer the server's process received and every value
  it opened (:func:`secure_auc.mpc.audit.record_received`).  The attacker
  (:func:`rank_values_from_received`) reads each received buffer as int64
  words and each opened one as its values, cut into columns of a client's
  sample count or of M (a buffer of c such columns: whole rows one after the
  other, or, for a received one, the columns of a table of c values per
  sample, as a host sends its keys and digits).  A value is *plausible* in a
  received buffer if it fits 32 bits (a share is a uniformly random 64-bit
  word; a rank, a sort key or a digit sent in the clear is not), in an opened
  one if it could be a rank (in [0, 2M)).  For each sample it takes, among
  the columns with a plausible value for that sample, the most telling: a
  received one before an opened one, then the largest share of plausible
  values, then the most distinct ones, then the latest; those values are the
  samples' scores, the samples with none rank below, in random order.  On a correct run every opened
  permutation and masked value is uniformly random and the precision is the
  base rate; a run that leaks ranks or keys to the server (a ring reduce,
  identity shuffles, a host's unmasked keys) shows up as a precision above it.

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


MAX_COLUMNS = 64  # the widest table of per-sample values the attacker reads a buffer as


def _columns(v: np.ndarray, n: int, table: bool) -> list[np.ndarray]:
    """The buffer ``v`` as columns of ``n`` values: whole rows one after the other, and
    with ``table`` the columns of an (n, c) table."""
    c = v.size // n
    out = list(v.reshape(c, n))
    if table and c > 1:
        out += list(v.reshape(n, c).T)
    return out


def rank_values_from_received(received, sizes) -> np.ndarray | None:
    """Per-sample values an attacker at the server reads off the buffers it received and
    the values it opened (module docstring).

    ``received``: the server's :class:`secure_auc.mpc.audit.Received` records;
    ``sizes``: the clients' public sample counts (samples numbered client by
    client).  Returns an (M,) float array, NaN where nothing was found, or None
    if nothing was found at all."""
    from ..mpc.audit import OPENINGS

    sizes = [int(n) for n in sizes]
    m = sum(sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)
    segments = {m: [0]}
    for o, n in zip(offsets, sizes):
        if n != m:
            segments.setdefault(n, []).append(int(o))
    best = np.full(m, np.nan)
    priority = np.full(m, -1.0)  # of the column chosen for each sample
    for rec in received:
        opened = rec.op in OPENINGS
        if opened:
            v = np.frombuffer(rec.data, dtype=np.dtype(rec.dtype)).astype(np.int64)
        elif len(rec.data) % 8 == 0:
            v = np.frombuffer(rec.data, dtype=np.int64)
        else:
            continue
        for n, starts in segments.items():
            if v.size == 0 or v.size % n or v.size // n > MAX_COLUMNS or (n != m and v.size % m == 0):
                continue  # a buffer of rows of M is read as such: its slices are the clients' rows
            for col in _columns(v, n, table=not opened):
                plausible = (col >= 0) & (col < 2 * m) if opened else np.abs(col) < 1 << 32
                share = plausible.mean()
                if share == 0:
                    continue
                distinct = np.unique(col[plausible]).size / n
                p = (0.0 if opened else 4.0) + 2.0 * share + distinct
                for start in starts:  # each sample: the most telling column with a plausible value for it
                    seg = slice(start, start + n)
                    take = plausible & (p >= priority[seg])  # later columns win ties
                    priority[seg] = np.where(take, p, priority[seg])
                    best[seg] = np.where(take, col, best[seg])
    return best if np.isfinite(best).any() else None


def precision_at_k(guesses: np.ndarray, true_labels: np.ndarray) -> float:
    return float(np.mean(true_labels[guesses])) if len(guesses) else float("nan")
