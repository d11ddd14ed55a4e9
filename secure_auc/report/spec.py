"""What a report asks for: the metrics, the bands of ranks and score bins, and the budget split.

Metrics and the releases they come from (each release spends its own share of the total eps):

==================  =====================  ==============================================
metric              release (group)        what is noised
==================  =====================  ==============================================
``auc``             ``auc``                the AUC's own mechanism (rank sum and P)
``roc``, ``pr``,    ``bands``              positives per band of global ranks: one
``ks``, ``lift``,                          histogram over disjoint bands, sensitivity 1
``precision-at``                           (parallel composition), every curve from it
``calibration``     ``calibration``        positives per score bin, sensitivity 1
``logloss``         ``log_loss``           sum of y logit(q) over clipped scores q
``brier``           ``brier``              sum of y (1 - 2 q)
==================  =====================  ==============================================

Default split of the total eps: the AUC takes half (all of it when asked alone); the other
releases asked share the rest in the weights 7 (``bands``) : 1 (``calibration``) : 1
(``log_loss``) : 1 (``brier``) -- with every metric asked: 0.5, 0.35, 0.05, 0.05, 0.05.
``budget`` sets any of the shares (the unset share the remainder equally; all shares must add
up to 1).

Bands.  The M samples in decreasing order of score take positions 0 .. M - 1 (a tied group
spans consecutive positions).  The band edges are the positions round(f M) for f in: the
``bands`` equal-frequency fractions j / bands, the head fractions (default 0.1 %, 0.5 %, 1 %,
2 %, 5 %), the ``lift_bins`` fractions j / lift_bins and the user's top fractions (for
precision and recall at k).  **Tie rule**: a tied group goes wholly to the band that holds its
middle position; a middle position exactly on an edge belongs to the band that starts there.
So every band edge falls between two distinct scores, each curve point is the
(fpr, tpr) of a real threshold, and the actual fraction of samples above an edge can differ
from its nominal fraction when a tie group straddles it (the report gives both).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..validation import InputError

__all__ = ["METRICS", "GROUPS", "HEAD_FRACTIONS", "ReportSpec", "band_edges", "split_budget"]

# metric name (as the command line takes it) -> the release it comes from
METRICS = {"auc": "auc", "roc": "bands", "pr": "bands", "ks": "bands", "lift": "bands", "precision-at": "bands",
           "calibration": "calibration", "logloss": "log_loss", "brier": "brier"}
ALIASES = {"precision_at": "precision-at", "recall-at": "precision-at", "recall_at": "precision-at",
           "log_loss": "logloss", "log-loss": "logloss", "average_precision": "pr", "ap": "pr", "gain": "lift"}
GROUPS = ("auc", "bands", "calibration", "log_loss", "brier")
HEAD_FRACTIONS = (0.001, 0.005, 0.01, 0.02, 0.05)
# the default split of what the AUC leaves: the curves' histogram needs most (its error adds up over
# the bands); the rank-free sums are over all M samples and need little
DEFAULT_WEIGHTS = {"bands": 7.0, "calibration": 1.0, "log_loss": 1.0, "brier": 1.0}


def split_budget(groups, budget: dict | None = None) -> dict:
    """Each release's share of the total eps.

    Parameters
    ----------
    groups : iterable of str
        The releases asked (names of :data:`GROUPS`).
    budget : dict, optional
        Shares set by the user, by release name (or a metric name that maps to it).

    Returns
    -------
    dict
        Release name -> share; the shares add up to 1.

    Raises
    ------
    InputError
        If a share is not in (0, 1], names no release asked, or the shares cannot add up to 1.

    Examples
    --------
    >>> from secure_auc.report.spec import split_budget
    >>> split_budget(["auc", "bands"])
    {'auc': 0.5, 'bands': 0.5}
    >>> {k: round(v, 4) for k, v in split_budget(["auc", "bands", "calibration", "log_loss", "brier"]).items()}
    {'auc': 0.5, 'bands': 0.35, 'calibration': 0.05, 'log_loss': 0.05, 'brier': 0.05}
    >>> split_budget(["auc", "bands", "log_loss"], {"auc": 0.6})
    {'auc': 0.6, 'bands': 0.2, 'log_loss': 0.2}
    >>> split_budget(["auc"])
    {'auc': 1.0}
    """
    groups = [g for g in GROUPS if g in set(groups)]
    fixed = {}
    for name, share in (budget or {}).items():
        key = METRICS.get(ALIASES.get(name, name), name)
        if key not in groups:
            raise InputError(f"budget: {name!r} is not a release of this report (asked: {', '.join(groups)})")
        try:
            share = float(share)
        except (TypeError, ValueError):
            raise InputError(f"budget: the share of {name!r} must be a number, got {share!r}") from None
        if not 0.0 < share <= 1.0:
            raise InputError(f"budget: the share of {name!r} must be in (0, 1], got {share:g}")
        fixed[key] = share
    rest = [g for g in groups if g not in fixed]
    left = 1.0 - sum(fixed.values())
    if left < -1e-9 or (not rest and abs(left) > 1e-9) or (rest and left <= 1e-12):
        raise InputError(f"budget: the shares must add up to 1 (set: {fixed}; releases: {', '.join(groups)})")
    if not fixed:  # the default: the AUC first, then the curves
        if groups == ["auc"]:
            return {"auc": 1.0}
        out = {"auc": 0.5} if "auc" in groups else {}
        others = [g for g in groups if g != "auc"]
        weight = sum(DEFAULT_WEIGHTS[g] for g in others)
        return out | {g: (1.0 - sum(out.values())) * DEFAULT_WEIGHTS[g] / weight for g in others}
    return {g: fixed[g] if g in fixed else left / len(rest) for g in groups}


def band_edges(total: int, fractions) -> np.ndarray:
    """The distinct positions round(f M), 0 < position < M, of the fractions f (sorted).

    Examples
    --------
    >>> from secure_auc.report.spec import band_edges
    >>> band_edges(1000, [0.001, 0.25, 0.5, 0.5004, 1.0]).tolist()
    [1, 250, 500]
    """
    pos = np.rint(np.asarray(fractions, dtype=np.float64) * total).astype(np.int64)
    return np.unique(pos[(pos > 0) & (pos < total)])


def _fractions(values, name: str) -> tuple:
    try:
        out = tuple(float(v) for v in np.atleast_1d(np.asarray(values, dtype=np.float64)))
    except (TypeError, ValueError):
        raise InputError(f"{name} must be numbers in (0, 1), got {values!r}") from None
    if any(not 0.0 < v < 1.0 for v in out):
        raise InputError(f"{name} must be in (0, 1), got {list(out)}")
    return out


@dataclass(frozen=True)
class ReportSpec:
    """The metrics of one report and their parameters (public: every party knows them).

    Parameters
    ----------
    metrics : sequence of str
        Names of :data:`METRICS` (aliases such as ``log_loss`` or ``precision_at`` accepted);
        ``auc`` is always added (the AUC is always released).
    bands : int, default 100
        Equal-frequency bands of ranks.
    head : sequence of float, default (0.001, 0.005, 0.01, 0.02, 0.05)
        Extra band edges at these top fractions.
    fractions : sequence of float, default (0.01, 0.05, 0.1, 0.2)
        Top fractions for ``precision_at`` and ``recall_at``.
    lift_bins : int, default 10
        Bins of the lift table (deciles).
    calibration_bins : int or sequence of float, default 10
        Equal-width bins of the score on [0, 1], or the inner edges themselves.
    clip : float, default 1e-4
        Scores are clipped to [clip, 1 - clip] for the log-loss and the Brier score.
    budget : dict, optional
        Shares of the total eps by release (:func:`split_budget`).

    Examples
    --------
    >>> from secure_auc.report import ReportSpec
    >>> spec = ReportSpec(["auc", "roc", "logloss"])
    >>> spec.groups, spec.shares
    (('auc', 'bands', 'log_loss'), {'auc': 0.5, 'bands': 0.4375, 'log_loss': 0.0625})
    >>> ReportSpec(["auc", "f1"])
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: unknown metric 'f1' (known: auc, roc, pr, ks, lift, precision-at, calibration, logloss, brier)
    """

    metrics: tuple = ("auc",)
    bands: int = 100
    head: tuple = HEAD_FRACTIONS
    fractions: tuple = (0.01, 0.05, 0.1, 0.2)
    lift_bins: int = 10
    calibration_bins: object = 10
    clip: float = 1e-4
    budget: dict | None = field(default=None, compare=False)

    def __post_init__(self):
        names = [self.metrics] if isinstance(self.metrics, str) else list(self.metrics)
        out = []
        for m in names:
            key = ALIASES.get(str(m).lower(), str(m).lower())
            if key not in METRICS:
                raise InputError(f"unknown metric {m!r} (known: {', '.join(METRICS)})")
            if key not in out:
                out.append(key)
        if "auc" not in out:  # the AUC is always released: the rank step is its protocol
            out.insert(0, "auc")
        object.__setattr__(self, "metrics", tuple(out))
        for name in ("bands", "lift_bins"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise InputError(f"{name} must be a positive integer, got {v!r}")
        object.__setattr__(self, "head", _fractions(self.head, "head fractions") if len(self.head) else ())
        object.__setattr__(self, "fractions", _fractions(self.fractions, "top fractions") if len(self.fractions) else ())
        if not 0.0 < float(self.clip) < 0.5:
            raise InputError(f"clip must be in (0, 0.5), got {self.clip!r}")
        object.__setattr__(self, "calibration_bins", self.calibration_edges())
        object.__setattr__(self, "budget", split_budget(self.groups, self.budget))

    @property
    def groups(self) -> tuple:
        """The releases asked, in the order of :data:`GROUPS`."""
        asked = {METRICS[m] for m in self.metrics}
        return tuple(g for g in GROUPS if g in asked)

    @property
    def shares(self) -> dict:
        """Each release's share of the total eps."""
        return dict(self.budget)

    def calibration_edges(self) -> tuple:
        """The inner edges of the calibration bins (scores below the first edge are in bin 0)."""
        c = self.calibration_bins
        if isinstance(c, (int, np.integer)) and not isinstance(c, bool):
            if c < 1:
                raise InputError(f"calibration_bins must be >= 1, got {c}")
            return tuple(float(x) for x in np.linspace(0.0, 1.0, int(c) + 1)[1:-1])
        try:
            edges = tuple(float(x) for x in c)
        except (TypeError, ValueError):
            raise InputError(f"calibration_bins must be a count or a list of edges, got {c!r}") from None
        if any(not np.isfinite(e) for e in edges) or list(edges) != sorted(set(edges)):
            raise InputError(f"calibration bin edges must be finite and increasing, got {list(edges)}")
        return edges

    def edges(self, total: int) -> np.ndarray:
        """The band edges (positions from the top) for M = ``total`` samples."""
        fr = [j / self.bands for j in range(1, self.bands)] + list(self.head) \
            + [j / self.lift_bins for j in range(1, self.lift_bins)] + list(self.fractions)
        return band_edges(total, fr)
