"""The server's side of a report: metrics from the aggregated noisy vector, with error bars.

Post-processing only (no further privacy cost): each noisy count of positives is clipped to
[0, samples of its band or bin]; then the cumulative counts of positives TP_j and of samples
C_j over the bands from the top give, at every band edge j,

    tpr_j = TP_j / P,   fpr_j = (C_j - TP_j) / (M - P),   precision_j = TP_j / C_j,

with P the sum of the clipped counts: both ROC coordinates are nondecreasing and inside
[0, 1], from (0, 0) to (1, 1).  KS = max_j (tpr_j - fpr_j), at the rank fraction C_j / M;
average precision = sum_j (tpr_j - tpr_{j-1}) precision_j (scikit-learn's definition, at the
band edges as thresholds); lift of bin d = (positives / samples in d) / (P / M); gain = tpr at
the bin edges; precision and recall at a top fraction f = at the edge of f.

Error bars come from a parametric bootstrap (a fixed seed, so they are a function of the
released numbers): the aggregate noise is drawn ``draws`` times with its own distribution
around the released counts, every metric is recomputed, and the interval of a metric is
[est - q_97.5, est - q_2.5] of the draws' errors, its std theirs.  Without noise there is none.
"""

from __future__ import annotations

import numpy as np

from ..dp.discrete import dlap_variance
from .stats import SUM_UNIT, Layout

__all__ = ["derive", "curves"]

DRAWS = 400
INTERVAL_SEED = 20261128


def _cum(x):
    return np.cumsum(x, axis=-1)


def curves(pos, n, total: int):
    """ROC and PR coordinates at every band edge (and the end), vectorised over leading axes.

    Parameters
    ----------
    pos, n : arrays (..., B)
        Positives (already clipped to [0, n]) and samples per band, from the top.
    total : int
        M.

    Returns
    -------
    dict of arrays
        ``tp``, ``c`` (cumulative counts), ``tpr``, ``fpr``, ``precision`` (..., B) and ``p``.

    Examples
    --------
    >>> import numpy as np
    >>> from secure_auc.report.derive import curves
    >>> c = curves(np.array([2.0, 1.0, 0.0]), np.array([2, 2, 2]), 6)
    >>> c["tpr"].tolist(), c["fpr"].tolist(), c["precision"].tolist()
    ([0.6666666666666666, 1.0, 1.0], [0.0, 0.3333333333333333, 1.0], [1.0, 0.75, 0.5])
    """
    tp = _cum(pos)
    c = _cum(n).astype(np.float64)
    p = tp[..., -1:]
    neg = total - p
    with np.errstate(divide="ignore", invalid="ignore"):
        tpr = np.where(p > 0, tp / np.where(p > 0, p, 1.0), 0.0)
        fpr = np.where(neg > 0, (c - tp) / np.where(neg > 0, neg, 1.0), 0.0)
        precision = np.where(c > 0, tp / np.where(c > 0, c, 1.0), 1.0)
    return {"tp": tp, "c": c, "tpr": tpr, "fpr": fpr, "precision": precision, "p": p[..., 0]}


def _band_metrics(layout: Layout, pos, n):
    """Every band metric, vectorised over leading axes of ``pos``."""
    total = layout.total
    k = curves(pos, n, total)
    tpr, fpr, prec = k["tpr"], k["fpr"], k["precision"]
    prev = np.concatenate([np.zeros(tpr.shape[:-1] + (1,)), tpr[..., :-1]], axis=-1)
    ap = np.sum((tpr - prev) * prec, axis=-1)
    diff = tpr - fpr
    j = np.argmax(diff, axis=-1)
    ks = np.take_along_axis(diff, j[..., None], axis=-1)[..., 0]
    edges = np.concatenate([layout.edges, [total]])
    spec = layout.spec
    at = lambda f: int(np.searchsorted(edges, int(np.rint(f * total)), side="left"))  # noqa: E731
    lift_idx = [at(d / spec.lift_bins) for d in range(1, spec.lift_bins + 1)]
    lift_idx[-1] = len(edges) - 1
    lo = [-1] + lift_idx[:-1]
    tp_at = k["tp"][..., lift_idx]
    c_at = k["c"][..., lift_idx]
    tp_lo = np.where(np.array(lo) >= 0, k["tp"][..., np.maximum(lo, 0)], 0.0)
    c_lo = np.where(np.array(lo) >= 0, k["c"][..., np.maximum(lo, 0)], 0.0)
    base = k["p"][..., None] / total
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(c_at - c_lo > 0, (tp_at - tp_lo) / np.maximum(c_at - c_lo, 1.0), 0.0)
        lift = np.where(base > 0, rate / np.where(base > 0, base, 1.0), 0.0)
    f_idx = [at(f) for f in spec.fractions]
    return {"tpr": tpr, "fpr": fpr, "precision": prec, "average_precision": ap, "ks": ks,
            "ks_at": np.take_along_axis(k["c"], j[..., None], axis=-1)[..., 0] / total,
            "lift": lift, "gain": tpr[..., lift_idx], "precision_at": prec[..., f_idx], "recall_at": tpr[..., f_idx],
            "_lift_at": c_at / total, "_c": k["c"] / total, "_frac_at": k["c"][..., f_idx] / total}


def _clip_hist(pos, n):
    return np.clip(pos, 0, n).astype(np.float64)


def _all(layout: Layout, agg):
    """Every metric from aggregate vectors (..., width), vectorised over leading axes."""
    p = layout.parts
    out = {}
    if "band_pos" in p:
        n = agg[..., p["band_n"]]
        out.update(_band_metrics(layout, _clip_hist(agg[..., p["band_pos"]], n), n))
    if "cal_pos" in p:
        n = agg[..., p["cal_n"]]
        pos = _clip_hist(agg[..., p["cal_pos"]], n)
        with np.errstate(divide="ignore", invalid="ignore"):
            out["calibration"] = np.where(n > 0, pos / np.maximum(n, 1), np.nan)
    m = layout.total
    if "ll_label" in p:
        out["log_loss"] = np.maximum(-(agg[..., p["ll_label"]][..., 0] + agg[..., p["ll_free"]][..., 0]) / SUM_UNIT / m,
                                     0.0)  # post-processing: a log-loss is never negative
    if "br_label" in p:
        out["brier"] = np.clip((agg[..., p["br_label"]][..., 0] + agg[..., p["br_free"]][..., 0]) / SUM_UNIT / m,
                               0.0, 1.0)
    return out


def derive(layout: Layout, aggregate, epsilons: dict, clients: int, kind: str = "client", *,
           draws: int = DRAWS, shares: int | None = None) -> dict:
    """The report's metrics from the aggregated (noisy) vector, as the result shows them.

    Parameters
    ----------
    layout : Layout
    aggregate : array of int (width,)
        The sum of the clients' noisy report vectors (what the server opens).
    epsilons : dict
        Each release's eps (inf or absent: no noise, no error bars).
    clients : int
        K (the per-client noise's variance adds up over the clients).
    kind : {"client", "aggregate"}
    draws : int, default 400
        Bootstrap draws of the error bars.
    shares : int, optional
        With ``aggregate``: the shares that make one noise (default K); K shares then add
        K / shares noises' variance.

    Returns
    -------
    dict
        JSON-able: ``roc`` ({fpr, tpr, tpr_low, tpr_high, fraction}), ``pr`` ({recall,
        precision, ...}), ``ks``, ``ks_at``, ``average_precision``, ``lift``, ``gain``,
        ``precision_at``, ``recall_at``, ``calibration``, ``log_loss``, ``brier`` (those asked)
        and ``<metric>_std`` / ``<metric>_interval`` where noise was added.
    """
    agg = np.asarray(aggregate, dtype=np.int64)
    est = _all(layout, agg)
    var = layout.variances(epsilons, clients, kind)
    if kind == "aggregate" and shares:
        var = var * (clients / shares)
    noisy = var > 0
    boot = None
    if noisy.any():
        rng = np.random.Generator(np.random.PCG64(INTERVAL_SEED))
        scale = np.sqrt(var[noisy] / 2.0)  # a Laplace of the same variance, fine for the bands' error bars
        if kind == "client" and clients > 8:  # a sum of K Laplace noises: normal to within its tails
            eps_draw = rng.normal(0.0, np.sqrt(var[noisy]), (draws, noisy.sum()))
        elif kind == "client":
            eps_draw = rng.laplace(0.0, 1.0, (draws, clients, noisy.sum())) * (scale / np.sqrt(clients))
            eps_draw = eps_draw.sum(axis=1)
        else:
            eps_draw = rng.laplace(0.0, scale, (draws, noisy.sum()))
        sims = np.broadcast_to(agg.astype(np.float64), (draws, agg.size)).copy()
        sims[:, noisy] += np.rint(eps_draw)
        boot = _all(layout, sims)
    spec = layout.spec
    out: dict = {}

    def bars(name, key=None):
        key = key or name
        if boot is None or key not in boot:
            return {}
        err = boot[key] - est[key]
        lo, hi = np.nanpercentile(err, [97.5, 2.5], axis=0)
        return {f"{name}_std": _j(np.nanstd(err, axis=0)), f"{name}_interval": [_j(est[key] - lo), _j(est[key] - hi)]}

    asked = set(spec.metrics)
    if "band_pos" in layout.parts:
        fraction = est["_c"]  # the actual fraction above each edge (the tie rule may move it)
        if "roc" in asked:
            roc = {"fpr": [0.0] + _j(est["fpr"]), "tpr": [0.0] + _j(est["tpr"]), "fraction": [0.0] + _j(fraction)}
            if boot is not None:
                err = boot["tpr"] - est["tpr"]
                q = np.percentile(err, [97.5, 2.5], axis=0)
                roc["tpr_low"] = [0.0] + _j(np.clip(est["tpr"] - q[0], 0, 1))
                roc["tpr_high"] = [0.0] + _j(np.clip(est["tpr"] - q[1], 0, 1))
            out["roc"] = roc
        if "pr" in asked:
            pr = {"recall": [0.0] + _j(est["tpr"]), "precision": [1.0] + _j(est["precision"])}
            if boot is not None:
                err = boot["precision"] - est["precision"]
                q = np.percentile(err, [97.5, 2.5], axis=0)
                pr["precision_low"] = [1.0] + _j(np.clip(est["precision"] - q[0], 0, 1))
                pr["precision_high"] = [1.0] + _j(np.clip(est["precision"] - q[1], 0, 1))
            out["pr"] = pr
            out["average_precision"] = float(est["average_precision"])
            out |= bars("average_precision")
        if "ks" in asked:
            out["ks"], out["ks_at"] = float(est["ks"]), float(est["ks_at"])
            out |= bars("ks")
        if "lift" in asked:
            out["lift"] = _j(est["lift"])
            out["gain"] = _j(est["gain"])
            out["lift_fraction"] = _j(est["_lift_at"])
            out |= bars("lift")
        if "precision-at" in asked:
            out["precision_at"] = dict(zip(map(_key, spec.fractions), _j(est["precision_at"])))
            out["recall_at"] = dict(zip(map(_key, spec.fractions), _j(est["recall_at"])))
            out["top_fraction"] = dict(zip(map(_key, spec.fractions), _j(est["_frac_at"])))
            b = bars("precision_at")
            if b:
                out["precision_at_std"] = dict(zip(map(_key, spec.fractions), b["precision_at_std"]))
            b = bars("recall_at")
            if b:
                out["recall_at_std"] = dict(zip(map(_key, spec.fractions), b["recall_at_std"]))
    if "calibration" in est:
        p = layout.parts
        edges = [-np.inf] + list(layout.cal_edges) + [np.inf]
        n = agg[p["cal_n"]]
        cal = {"low": [None if not np.isfinite(e) else float(e) for e in edges[:-1]],
               "high": [None if not np.isfinite(e) else float(e) for e in edges[1:]],
               "samples": [int(x) for x in n], "positive_rate": [None if not np.isfinite(x) else float(x)
                                                                 for x in est["calibration"]]}
        if noisy[p["cal_pos"]].any():
            v = var[p["cal_pos"]]
            cal["positive_rate_std"] = [None if k == 0 else float(np.sqrt(s) / k) for s, k in zip(v, n)]
        out["calibration"] = cal
    for name, part in (("log_loss", "ll_label"), ("brier", "br_label")):
        if name in est:
            out[name] = float(est[name])
            v = var[layout.parts[part]][0]
            if v > 0:
                sd = float(np.sqrt(v) / SUM_UNIT / layout.total)
                out[f"{name}_std"] = sd
                out[f"{name}_interval"] = [out[name] - 1.959963984540054 * sd, out[name] + 1.959963984540054 * sd]
    return out


def _key(f: float) -> str:
    return f"{f:g}"


def _j(x):
    x = np.asarray(x, dtype=np.float64)
    return float(x) if x.ndim == 0 else [float(v) for v in x]


def band_variance(epsilon: float, clients: int, kind: str) -> float:
    """The variance of the aggregate noise on one band's count (sensitivity 1)."""
    return float(dlap_variance(epsilon)) * (clients if kind == "client" else 1)
