"""A report's tables (CSV) and figures (PNG: ROC, PR, lift and calibration with their
uncertainty bands), from the metrics :func:`secure_auc.evaluate` puts in ``extra``."""

from __future__ import annotations

import csv
from pathlib import Path

__all__ = ["REPORT_KEYS", "write_tables", "write_figures", "summary_rows"]

REPORT_KEYS = ("roc", "pr", "ks", "ks_at", "ks_std", "ks_interval", "average_precision", "average_precision_std",
               "average_precision_interval", "lift", "lift_std", "lift_interval", "gain", "lift_fraction",
               "precision_at", "recall_at", "top_fraction", "precision_at_std", "recall_at_std", "calibration",
               "log_loss", "log_loss_std", "log_loss_interval", "brier", "brier_std", "brier_interval", "privacy",
               "report_seconds")


def summary_rows(extra: dict) -> list[tuple[str, str]]:
    """One line per scalar metric (estimate, std, 95 % interval) and per table, for a terminal.

    Examples
    --------
    >>> from secure_auc.report.output import summary_rows
    >>> summary_rows({"ks": 0.41, "ks_at": 0.3, "ks_std": 0.002, "ks_interval": [0.406, 0.414]})
    [('KS', '0.410000  std 2.00e-03  95% [0.406000, 0.414000]  at top 30.00%')]
    """
    rows = []

    def scalar(label, key, suffix=""):
        if key not in extra:
            return
        text = f"{extra[key]:.6f}"
        if f"{key}_std" in extra and not isinstance(extra[f"{key}_std"], list):
            lo, hi = extra[f"{key}_interval"]
            text += f"  std {extra[f'{key}_std']:.2e}  95% [{lo:.6f}, {hi:.6f}]"
        rows.append((label, text + suffix))

    scalar("KS", "ks", f"  at top {100 * extra.get('ks_at', 0):.2f}%" if "ks_at" in extra else "")
    scalar("average precision", "average_precision")
    scalar("log-loss", "log_loss")
    scalar("Brier score", "brier")
    if "roc" in extra:
        rows.append(("ROC curve", f"{len(extra['roc']['fpr'])} points (--json, --csv, --plot)"))
    if "lift" in extra:
        rows.append(("lift per bin", ", ".join(f"{v:.2f}" for v in extra["lift"])))
    for key, label in (("precision_at", "precision at top"), ("recall_at", "recall at top")):
        if key in extra:
            rows.append((label, ", ".join(f"{float(f):g}: {v:.4f}" for f, v in extra[key].items())))
    if "calibration" in extra:
        rates = extra["calibration"]["positive_rate"]
        rows.append(("calibration", ", ".join("-" if v is None else f"{v:.3f}" for v in rates)))
    if "privacy" in extra:
        rows.append(("eps per release", ", ".join(f"{k} {v:g}" for k, v in extra["privacy"].items()
                                                  if v is not None)))
    return rows


def _write(path: Path, header, rows) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def write_tables(extra: dict, folder) -> list[Path]:
    """``roc.csv``, ``pr.csv``, ``lift.csv``, ``calibration.csv`` and ``summary.csv`` (those asked)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    if "roc" in extra:
        r = extra["roc"]
        cols = ["fraction", "fpr", "tpr"] + [c for c in ("tpr_low", "tpr_high") if c in r]
        out.append(_write(folder / "roc.csv", cols, zip(*(r[c] for c in cols))))
    if "pr" in extra:
        r = extra["pr"]
        cols = ["recall", "precision"] + [c for c in ("precision_low", "precision_high") if c in r]
        out.append(_write(folder / "pr.csv", cols, zip(*(r[c] for c in cols))))
    if "lift" in extra:
        std = extra.get("lift_std", [None] * len(extra["lift"]))
        out.append(_write(folder / "lift.csv", ["top_fraction", "lift", "lift_std", "gain"],
                          zip(extra["lift_fraction"], extra["lift"], std, extra["gain"])))
    if "calibration" in extra:
        c = extra["calibration"]
        std = c.get("positive_rate_std", [None] * len(c["samples"]))
        out.append(_write(folder / "calibration.csv", ["low", "high", "samples", "positive_rate", "positive_rate_std"],
                          zip(c["low"], c["high"], c["samples"], c["positive_rate"], std)))
    rows = []
    for key in ("ks", "ks_at", "average_precision", "log_loss", "brier"):
        if key in extra:
            lo, hi = extra.get(f"{key}_interval", [None, None])
            rows.append([key, extra[key], extra.get(f"{key}_std"), lo, hi])
    for key in ("precision_at", "recall_at"):
        for f, v in extra.get(key, {}).items():
            rows.append([f"{key}_{f}", v, extra.get(f"{key}_std", {}).get(f), None, None])
    if rows:
        out.append(_write(folder / "summary.csv", ["metric", "estimate", "std", "low95", "high95"], rows))
    return out


def write_figures(extra: dict, folder) -> list[Path]:
    """``roc.png``, ``pr.png``, ``lift.png``, ``calibration.png`` (those asked), each with its
    95 % band or error bars when noise was added (matplotlib, the ``plots`` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []

    def save(fig, name):
        path = folder / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append(path)

    if "roc" in extra:
        r = extra["roc"]
        fig, ax = plt.subplots(figsize=(4.5, 4.2))
        ax.plot(r["fpr"], r["tpr"], lw=1.5, label="DP ROC")
        if "tpr_low" in r:
            ax.fill_between(r["fpr"], r["tpr_low"], r["tpr_high"], alpha=0.3, step=None, label="95% band")
        ax.plot([0, 1], [0, 1], ls=":", c="grey")
        ax.set(xlabel="false positive rate", ylabel="true positive rate", title="ROC", xlim=(0, 1), ylim=(0, 1))
        ax.legend(loc="lower right")
        save(fig, "roc.png")
    if "pr" in extra:
        r = extra["pr"]
        fig, ax = plt.subplots(figsize=(4.5, 4.2))
        ax.plot(r["recall"], r["precision"], lw=1.5, label="DP PR")
        if "precision_low" in r:
            ax.fill_between(r["recall"], r["precision_low"], r["precision_high"], alpha=0.3, label="95% band")
        ax.set(xlabel="recall", ylabel="precision", title="precision-recall", xlim=(0, 1), ylim=(0, 1.02))
        ax.legend(loc="upper right")
        save(fig, "pr.png")
    if "lift" in extra:
        fig, ax = plt.subplots(figsize=(5, 3.6))
        x = list(range(1, len(extra["lift"]) + 1))
        ax.bar(x, extra["lift"], yerr=[1.96 * s for s in extra["lift_std"]] if "lift_std" in extra else None,
               capsize=3)
        ax.axhline(1.0, ls=":", c="grey")
        ax.set(xlabel="bin from the top", ylabel="lift", title="lift per bin")
        save(fig, "lift.png")
    if "calibration" in extra:
        c = extra["calibration"]
        lows = [0.0 if v is None else v for v in c["low"]]
        highs = [1.0 if v is None else v for v in c["high"]]
        mids = [(a + b) / 2 for a, b in zip(lows, highs)]
        keep = [i for i, v in enumerate(c["positive_rate"]) if v is not None]
        fig, ax = plt.subplots(figsize=(4.5, 4.2))
        std = c.get("positive_rate_std")
        ax.errorbar([mids[i] for i in keep], [c["positive_rate"][i] for i in keep],
                    yerr=None if std is None else [1.96 * (std[i] or 0.0) for i in keep], fmt="o-", capsize=3)
        ax.plot([0, 1], [0, 1], ls=":", c="grey")
        ax.set(xlabel="score", ylabel="positive rate", title="calibration", xlim=(0, 1), ylim=(0, 1))
        save(fig, "calibration.png")
    return out
