"""``secure-auc select``: choose the best of T candidates, releasing only which one it is.

    secure-auc select FILES... --candidates COL... --epsilon E [--release-epsilon E2] [--json]

Each client file holds the label column and one score column per candidate (one
checkpoint, one model); ``--candidates`` names those columns.
"""

from __future__ import annotations

import argparse
import json
import math

from ..dp.selection import METHODS
from ..mpc import RANK_METHODS, rank_method_help
from ..validation import InputError, check_timeout
from .output import add_output_options, json_safe

__all__ = ["add_parser", "cmd_select"]


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return v


def add_parser(sub) -> None:
    from .ledger import add_ledger_options

    p = sub.add_parser(
        "select", help="choose the best of T candidates (checkpoints) for the privacy cost of one release",
        description="Report-noisy-max on the candidates' rank sums in MPC: the statistics stay in shares, the "
                    "clients add their shares of the noise, a secure argmax opens only the selected candidate's "
                    "index, to the server. eps-DP whatever the number of candidates (docs/selection.md).")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="one file per client (CSV, gzip CSV or Parquet): the label column and one score column "
                        "per candidate")
    p.add_argument("--candidates", nargs="+", required=True, metavar="COL",
                   help="the score columns, one per candidate (at least one)")
    p.add_argument("--label-column", default="label", help="the label column (default label)")
    p.add_argument("--epsilon", type=_positive, required=True, help="eps of the selection")
    p.add_argument("--release-epsilon", type=_positive, default=None, metavar="E2",
                   help="also release the selected candidate's DP AUC, std and 95%% interval at this extra eps")
    p.add_argument("--method", choices=METHODS, default=METHODS[0],
                   help="noisy-max: report-noisy-max in MPC over every candidate (default); repeat-and-select: a "
                        "geometric number of DP evaluations of candidates drawn at random, the best released "
                        "(Papernot & Steinke 2022; RDP accounting at --delta)")
    p.add_argument("--mean", type=_positive, default=None,
                   help="repeat-and-select: mean number of evaluations (default: the number of candidates)")
    p.add_argument("--delta", type=float, default=None,
                   help="repeat-and-select: delta of --epsilon (default 1e-6); noisy-max is pure eps-DP")
    p.add_argument("--protocol", choices=("mpc", "plain"), default="mpc",
                   help="mpc (default) or plain: the same mechanism in this process (a reference: it sees every "
                        "statistic)")
    p.add_argument("--computing", type=int, choices=(2, 3), default=3, help="computing parties (default 3)")
    p.add_argument("--provider", choices=("ttp", "tfp"), default="ttp", help="correlated randomness (default ttp)")
    p.add_argument("--sort", choices=RANK_METHODS, default=RANK_METHODS[0], help=rank_method_help())
    p.add_argument("--timeout", default=60.0, type=float, help="seconds a party waits for another (default 60)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_ledger_options(p)
    add_output_options(p)
    p.set_defaults(handler=cmd_select)


def cmd_select(args) -> int:
    from ..selection import load_candidates, select
    from .ledger import check_ledger_options

    for option in ("mean", "delta"):
        if args.method != "repeat-and-select" and getattr(args, option) is not None:
            raise InputError(f"--{option} applies to --method repeat-and-select only (noisy-max is pure eps-DP)")
    if args.delta is None:
        args.delta = 1e-6
    if not 0 < args.delta < 1:
        raise InputError(f"--delta must be in (0, 1), got {args.delta}")
    check_timeout(args.timeout, name="--timeout")
    if args.protocol == "plain" and (args.computing != 3 or args.provider != "ttp" or args.sort != RANK_METHODS[0]):
        raise InputError("--computing, --provider and --sort apply to --protocol mpc only")
    check_ledger_options(args)
    if args.protocol == "mpc":  # the options are checked: the parties' fork server imports while the files are read
        from ..mpc.forkserver import prestart

        prestart()
    clients = load_candidates(args.files, args.candidates, label_column=args.label_column, id_column=args.id_column)
    ledger = None
    if args.ledger is not None:
        from ..dp.accountant import Ledger

        ledger = Ledger(args.ledger)
        if args.budget is not None:
            ledger.set_budget(args.budget, args.budget_delta or 0.0)
    opts = None
    if args.protocol == "mpc":
        opts = {"computing": args.computing, "provider": args.provider, "sort": args.sort, "timeout": args.timeout,
                "progress": False}
    res = select(clients, args.candidates, epsilon=args.epsilon, release_epsilon=args.release_epsilon,
                 method=args.method, mean=args.mean, delta=args.delta, protocol=args.protocol, ledger=ledger,
                 dataset_name=args.dataset, mpc_options=opts)
    print_selection(res, args.json)
    return 0


def print_selection(res, as_json: bool, indent: int | None = 2) -> None:
    """Print a :class:`secure_auc.SelectionResult`: JSON (``indent``; None: one line) or text."""
    if as_json:
        print(json.dumps(json_safe(res.to_dict()), indent=indent))
        return
    print(f"selected: {res.selected} (candidate {res.index + 1} of {len(res.candidates)}, {res.method})")
    print(f"privacy spent: eps = {res.epsilon:.6g}" + (f", delta = {res.delta:g}" if res.delta else ""))
    if res.auc is not None:
        print(f"DP AUC of {res.selected}: {res.auc:.6f} (std {res.std:.2e}, 95% interval "
              f"[{res.ci_low:.6f}, {res.ci_high:.6f}], eps = {res.release_epsilon:g})")
    if "mpc_seconds" in res.extra:
        e = res.extra
        print(f"cost: {e['mpc_seconds']:.1f} s in all, rank steps {e['rank_step_seconds']:.1f} s, secure argmax "
              f"{e['argmax_seconds']:.3f} s, {max(e['argmax_rounds_per_party'])} rounds, "
              f"{max(e['argmax_bytes_per_party']):,} bytes per party")
    if "privacy_spent" in res.extra:
        print(f"ledger: {res.extra['privacy_spent']}")
