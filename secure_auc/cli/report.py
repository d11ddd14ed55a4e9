"""``secure-auc evaluate --metrics ...``: the options of the whole evaluation and its output."""

from __future__ import annotations

import argparse

from ..validation import InputError

__all__ = ["add_report_options", "add_report_spec_options", "report_arguments", "report_table",
           "check_report_options", "show_report", "write_report_files", "split_report", "print_report_tables"]


def add_report_options(p: argparse.ArgumentParser) -> None:
    g = add_report_spec_options(p)
    g.add_argument("--plot", default=None, metavar="DIR", help="write roc.png, pr.png, lift.png, calibration.png there")
    g.add_argument("--csv", default=None, metavar="DIR", help="write the report's tables as CSV files there")


def add_report_spec_options(p: argparse.ArgumentParser):
    """--metrics, --metric-split, --rank-bands, --top-fractions (every party of a deployment
    started from options gives the same: they are compared at connection time)."""
    from ..report.spec import METRICS

    g = p.add_argument_group("the whole evaluation")
    g.add_argument("--metrics", nargs="+", default=None, metavar="METRIC",
                   help=f"also release these metrics under the same eps: {', '.join(METRICS)} (the AUC is always "
                        "released; default: the AUC only)")
    g.add_argument("--metric-split", nargs="+", default=None, metavar="RELEASE=SHARE",
                   help="shares of eps by release (auc, bands, calibration, log_loss, brier); default: half to "
                        "the AUC, the rest equally")
    g.add_argument("--rank-bands", type=int, default=None, help="equal-frequency rank bands of the curves (default 100)")
    g.add_argument("--top-fractions", type=float, nargs="+", default=None, metavar="FRACTION",
                   help="top fractions for precision and recall at k (default 0.01 0.05 0.1 0.2)")
    return g


def report_table(args) -> dict:
    """The report options as a deployment configuration's ``[report]`` table (empty without
    --metrics; the options without --metrics refused), checked now."""
    from .output import check_not_given

    if args.metrics is None:
        check_not_given(args, ["metric_split", "rank_bands", "top_fractions"], "without --metrics")
        return {}
    spec, _ = report_arguments(args)
    table = {"metrics": list(args.metrics)}
    if args.metric_split:
        table["split"] = dict(spec.budget)
    if args.rank_bands is not None:
        table["bands"] = int(args.rank_bands)
    if args.top_fractions is not None:
        table["top_fractions"] = [float(f) for f in args.top_fractions]
    return table


def print_report_tables(report: dict) -> None:
    """The report's table (its entries as :func:`split_report` takes them out of a result)."""
    from ..report.output import summary_rows

    if report:
        rows = summary_rows(report)
        width = max(len(k) for k, _ in rows)
        for k, v in rows:
            print(f"{k:<{width}}  {v}")


def check_report_options(args) -> None:
    """Report options without --metrics are refused before any work."""
    from .output import check_not_given, check_writable_dir

    if args.metrics is None:
        check_not_given(args, ["metric_split", "rank_bands", "top_fractions", "plot", "csv"], "without --metrics")
        return
    report_arguments(args)  # the names and numbers, checked now
    for folder in (args.plot, args.csv):
        if folder is not None:
            check_writable_dir(folder)


def report_arguments(args):
    """``(metrics, budget)`` for :func:`secure_auc.evaluate` from the options."""
    from ..report.spec import ReportSpec

    if args.metrics is None:
        return None, None
    budget = {}
    for item in args.metric_split or []:
        name, eq, share = item.partition("=")
        if not eq:
            raise InputError(f"--metric-split takes RELEASE=SHARE, got {item!r}")
        try:
            budget[name] = float(share)
        except ValueError:
            raise InputError(f"--metric-split: the share of {name!r} must be a number, got {share!r}") from None
    kwargs = {}
    if args.rank_bands is not None:
        kwargs["bands"] = args.rank_bands
    if args.top_fractions is not None:
        kwargs["fractions"] = tuple(args.top_fractions)
    return ReportSpec(args.metrics, budget=budget or None, **kwargs), None


def split_report(result) -> dict:
    """Take the report's entries out of ``result.extra`` (for the table view)."""
    from ..report.output import REPORT_KEYS

    return {k: result.extra.pop(k) for k in REPORT_KEYS if k in result.extra}


def show_report(args, report: dict) -> list:
    """The whole evaluation's ``report`` (its entries of ``extra``): its table printed (not with
    --json, where the result's JSON holds it), its CSV and PNG files written (--csv, --plot)."""
    from ..report.output import summary_rows, write_figures, write_tables

    written = []
    if args.metrics is None:
        return written
    if not args.json and report:
        rows = summary_rows(report)
        width = max(len(k) for k, _ in rows)
        for k, v in rows:
            print(f"{k:<{width}}  {v}")
    if args.csv is not None:
        written += write_tables(report, args.csv)
    if args.plot is not None:
        written += write_figures(report, args.plot)
    return written


def write_report_files(args, extra: dict) -> list:
    from ..report.output import write_figures, write_tables

    written = []
    if args.csv is not None:
        written += write_tables(extra, args.csv)
    if args.plot is not None:
        written += write_figures(extra, args.plot)
    return written
