"""What each client computes for a report, and its noise: one int64 vector per client.

A client knows its own scores, its labels and the global mid-ranks of its scores (the rank
step).  Its report vector holds, per release asked (:class:`~.spec.ReportSpec`):

* ``bands``: its positives per band of ranks (label-dependent, sensitivity 1) and its samples
  per band (label-free);
* ``calibration``: its positives per score bin (sensitivity 1) and its samples per bin;
* ``log_loss``: sum of y round(logit(q) 2^20) (sensitivity ceil(logit(1 - clip) 2^20)) and
  sum of round(log(1 - q) 2^20) (label-free), q the score clipped to [clip, 1 - clip];
* ``brier``: sum of y round((1 - 2 q) 2^20) (sensitivity 2^20) and sum of round(q^2 2^20).

Every entry is an integer (fixed point with :data:`SUM_BITS` fractional bits for the sums), so
the vectors add exactly, in the clear or in shares.  Changing one label changes each
label-dependent entry of one release by at most its sensitivity, and the entries of a histogram
are disjoint (one sample, one band): a histogram with noise DLap(sensitivity / eps) on every
entry is eps-DP (parallel composition), whatever the number of bands.

Noise, per release of budget eps:

* ``client``: every client adds its own DLap(Delta / eps) to each label-dependent entry
  (eps-DP for the client's labels against everyone, the server included);
* ``aggregate``: every client adds a share NB(1/K, q) - NB(1/K, q), q = exp(-eps / Delta):
  the K shares add up to one DLap(Delta / eps) on the aggregate (noise on the aggregate in
  shares, as the ``distributed`` AUC mechanism; it protects only the sum, so only the MPC
  protocol may use it).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..dp.discrete import discrete_laplace, dlap_variance, negative_binomial
from .spec import ReportSpec

__all__ = ["SUM_BITS", "Layout", "client_vectors", "noise_vectors"]

SUM_BITS = 20
SUM_UNIT = float(1 << SUM_BITS)


class Layout:
    """Where each part of the report vector lies, and each entry's sensitivity and release.

    Parameters
    ----------
    spec : ReportSpec
    total : int
        M (the band edges depend on it).

    Examples
    --------
    >>> from secure_auc.report import ReportSpec
    >>> from secure_auc.report.stats import Layout
    >>> lay = Layout(ReportSpec(["roc", "logloss"], bands=4, head=(), fractions=(), lift_bins=2), 100)
    >>> lay.edges.tolist(), lay.width, sorted(lay.parts)
    ([25, 50, 75], 10, ['band_n', 'band_pos', 'll_free', 'll_label'])
    """

    def __init__(self, spec: ReportSpec, total: int):
        self.spec, self.total = spec, int(total)
        self.edges = spec.edges(self.total)
        self.cal_edges = np.asarray(spec.calibration_bins, dtype=np.float64)
        self.parts: dict[str, slice] = {}
        self.sens: list[np.ndarray] = []
        self.group: list[str] = []
        clip = float(spec.clip)
        self.ll_sens = int(np.ceil(np.log((1.0 - clip) / clip) * SUM_UNIT)) + 1  # a rounded term is at most this
        at = 0

        def add(name, n, sens, group):
            nonlocal at
            self.parts[name] = slice(at, at + n)
            self.sens.append(np.full(n, sens, dtype=np.int64))
            self.group += [group] * n
            at += n

        groups = spec.groups
        if "bands" in groups:
            b = len(self.edges) + 1
            add("band_pos", b, 1, "bands")
            add("band_n", b, 0, "bands")
        if "calibration" in groups:
            c = len(self.cal_edges) + 1
            add("cal_pos", c, 1, "calibration")
            add("cal_n", c, 0, "calibration")
        if "log_loss" in groups:
            add("ll_label", 1, self.ll_sens, "log_loss")
            add("ll_free", 1, 0, "log_loss")
        if "brier" in groups:
            add("br_label", 1, int(SUM_UNIT), "brier")
            add("br_free", 1, 0, "brier")
        self.width = at
        self.sensitivity = np.concatenate(self.sens) if self.sens else np.zeros(0, dtype=np.int64)
        self.groups = np.array(self.group, dtype=object)

    def band_of(self, twice_ranks) -> np.ndarray:
        """The band of each sample from twice its 0-based ascending mid-rank (the tie rule of
        :mod:`.spec`: the band that holds the group's middle position from the top)."""
        twice_pos = 2 * (self.total - 1) - np.asarray(twice_ranks, dtype=np.int64)  # twice the position from the top
        return np.searchsorted(2 * self.edges, twice_pos, side="right")

    def scales(self, epsilons: dict) -> np.ndarray:
        """DLap scale of every entry (0 for the label-free ones) for the releases' eps."""
        eps = np.array([epsilons.get(g, np.inf) for g in self.group], dtype=np.float64)
        with np.errstate(divide="ignore"):
            return np.where(self.sensitivity > 0, self.sensitivity / eps, 0.0)

    def variances(self, epsilons: dict, clients: int, kind: str) -> np.ndarray:
        """The variance of the aggregate noise on every entry: K DLap variances (``client``) or one
        (``aggregate``)."""
        scale = self.scales(epsilons)
        with np.errstate(divide="ignore"):
            v = np.where(scale > 0, dlap_variance(1.0 / np.where(scale > 0, scale, 1.0)), 0.0)
        return v * (clients if kind == "client" else 1)


def client_vectors(layout: Layout, twice_ranks, labels, scores, owner, clients: int) -> np.ndarray:
    """The exact report vector of every client, shape (K, width), int64.

    Parameters
    ----------
    layout : Layout
    twice_ranks : array of int
        Twice the global 0-based mid-rank of every sample held.
    labels, scores : arrays
        The true labels (0/1) and scores of the same samples.
    owner : array of int
        The client (0 .. K - 1) of every sample.
    clients : int
        K.

    Examples
    --------
    >>> import numpy as np
    >>> from secure_auc.report import ReportSpec
    >>> from secure_auc.report.stats import Layout, client_vectors
    >>> lay = Layout(ReportSpec(["roc"], bands=2, head=(), fractions=(), lift_bins=1), 4)
    >>> # scores 0.9, 0.8 (client 0), 0.1, 0.5 (client 1): ranks 3, 2, 0, 1
    >>> client_vectors(lay, [6, 4, 0, 2], [1, 0, 0, 1], [0.9, 0.8, 0.1, 0.5], [0, 0, 1, 1], 2).tolist()
    [[1, 0, 2, 0], [0, 1, 0, 2]]
    """
    y = np.asarray(labels, dtype=np.int64)
    owner = np.asarray(owner, dtype=np.int64)
    out = np.zeros((clients, layout.width), dtype=np.int64)
    parts = layout.parts

    def hist(name_pos, name_n, bins, count):
        idx = owner * count + bins
        out[:, parts[name_pos]] = np.bincount(idx, weights=y, minlength=clients * count).reshape(clients, count)
        out[:, parts[name_n]] = np.bincount(idx, minlength=clients * count).reshape(clients, count)

    if "band_pos" in parts:
        hist("band_pos", "band_n", layout.band_of(twice_ranks), len(layout.edges) + 1)
    s = np.asarray(scores, dtype=np.float64)
    if "cal_pos" in parts:
        hist("cal_pos", "cal_n", np.searchsorted(layout.cal_edges, s, side="right"), len(layout.cal_edges) + 1)
    clip = float(layout.spec.clip)
    q = np.clip(s, clip, 1.0 - clip)

    def sums(name, per_sample, weights=None):
        terms = np.rint(per_sample * SUM_UNIT).astype(np.int64)
        if weights is not None:
            terms = terms * weights
        # int64 sums per client (np.bincount would go through float64)
        order = np.argsort(owner, kind="stable")
        cuts = np.searchsorted(owner[order], np.arange(clients + 1))
        c = np.concatenate(([0], np.cumsum(terms[order])))
        out[:, parts[name]] = (c[cuts[1:]] - c[cuts[:-1]]).reshape(clients, 1)

    if "ll_label" in parts:
        sums("ll_label", np.log(q) - np.log1p(-q), y)
        sums("ll_free", np.log1p(-q))
    if "br_label" in parts:
        sums("br_label", 1.0 - 2.0 * q, y)
        sums("br_free", q * q)
    return out


def noise_vectors(layout: Layout, epsilons: dict, src, clients: int, kind: str = "client", *,
                  shares: int | None = None, exact: bool = True) -> np.ndarray:
    """Each client's noise on its report vector, shape (K, width), int64.

    Parameters
    ----------
    layout : Layout
    epsilons : dict
        Each release's eps (a release absent, or with eps = inf, gets no noise).
    src : KeyStreams or numpy.random.Generator
        The clients' own streams (one per client, entries on the last axis), or a
        Generator (simulation).
    clients : int
        K, the clients drawn for here.
    kind : {"client", "aggregate"}
        Per-client noise, or shares of one noise on the aggregate.
    shares : int, optional
        With ``aggregate``: the number of shares that add up to one noise (default ``clients``).
    exact : bool, default True
        False: fast floating-point samplers of the same distributions (simulation only).
    """
    scale = layout.scales(epsilons)
    live = np.flatnonzero(scale > 0)
    out = np.zeros((clients, layout.width), dtype=np.int64)
    if not live.size:
        return out
    shape = (live.size, clients)  # the clients on the last axis: one stream each
    sc = np.broadcast_to(scale[live][:, None], shape)
    if kind == "client":
        out[:, live] = discrete_laplace(src, sc, shape, exact=exact).T
    elif kind == "aggregate":
        r = Fraction(1, int(shares or clients))
        if exact:
            a = negative_binomial(src, r, sc, shape)
            b = negative_binomial(src, r, sc, shape)
        else:  # NB(r, q) as a Poisson with a gamma mean
            q = np.exp(-1.0 / sc)
            lam = lambda: src.gamma(float(r), q / (1.0 - q), shape)  # noqa: E731
            a, b = src.poisson(lam()), src.poisson(lam())
        out[:, live] = (a - b).T
    else:
        raise ValueError(f"noise kind must be 'client' or 'aggregate', got {kind!r}")
    return out
