"""``secure-auc ledger``: show a privacy ledger, change a dataset's budget, plan T evaluations.

    secure-auc ledger show LEDGER.json
    secure-auc ledger budget LEDGER.json DATASET --epsilon E [--delta D]
    secure-auc ledger plan --evaluations T --epsilon E [--delta D] --mechanism ... [--clients K]

``python -m secure_auc.cli.ledger LEDGER.json`` still prints the totals.
"""

from __future__ import annotations

import argparse
import sys

from ..validation import InputError

__all__ = ["main", "add_parser", "add_ledger_options", "add_planning_options"]


def add_ledger_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("privacy accounting across runs")
    g.add_argument("--ledger", default=None, metavar="FILE",
                   help="JSON file (mode 0600) where each client's labels are charged, before the run, for what "
                        "it releases; a dataset is identified by a hash of its labels (created if missing)")
    g.add_argument("--dataset", default=None,
                   help="a name for the clients' datasets in the ledger's report (the identity is the label hash)")
    g.add_argument("--budget", type=float, default=None,
                   help="total eps allowed for each client's labels, set once (with --ledger); a run that would "
                        "exceed it is refused; change it with: secure-auc ledger budget")
    g.add_argument("--budget-delta", type=float, default=0.0, help="total delta allowed (default 0)")


def add_planning_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--evaluations", type=int, default=None, metavar="T",
                   help="planning: --epsilon/--delta are the total for T evaluations; each evaluation gets the "
                        "largest budget whose T-fold composition (tightest of basic, RDP and PLD accounting) fits")


def add_parser(sub, add_mechanism_options, planned_mechanism) -> None:
    """The ``ledger`` subcommands; the mechanism options and the planner come from :mod:`secure_auc.cli`."""
    lp = sub.add_parser("ledger", help="show a privacy ledger, change a budget, plan T evaluations",
                        description="The label owners' privacy ledger (see docs/privacy-accounting.md).")
    lsub = lp.add_subparsers(dest="ledger_command", required=True)
    show = lsub.add_parser("show", help="the spent budget per dataset")
    show.add_argument("ledger", metavar="LEDGER.json")
    show.set_defaults(handler=cmd_show)
    bud = lsub.add_parser("budget", help="set or change (raise or lower) a dataset's budget explicitly")
    bud.add_argument("ledger", metavar="LEDGER.json")
    bud.add_argument("dataset", help="the dataset's name or the beginning of its label hash")
    bud.add_argument("--epsilon", type=float, required=True)
    bud.add_argument("--delta", type=float, default=0.0)
    bud.set_defaults(handler=cmd_budget)
    plan = lsub.add_parser("plan", help="per-evaluation budget and noise for T evaluations within a total")
    add_mechanism_options(plan)
    add_planning_options(plan)
    plan.add_argument("--clients", type=int, default=3, help="K (default 3)")
    plan.add_argument("--samples", type=int, default=20000, help="M (default 20000)")
    plan.set_defaults(handler=lambda args: cmd_plan(args, planned_mechanism))


def cmd_show(args) -> int:
    from ..dp.accountant import Ledger

    print(Ledger(args.ledger).report())
    return 0


def cmd_budget(args) -> int:
    from ..dp.accountant import Ledger

    ledger = Ledger(args.ledger)
    ds = ledger.find(args.dataset)
    ledger.set_budget(ds, args.epsilon, args.delta, change=True)
    print(Ledger(args.ledger).report())
    return 0


def cmd_plan(args, planned_mechanism) -> int:
    if args.evaluations is None:
        raise InputError("ledger plan needs --evaluations T")
    print(planned_mechanism(args, args.clients, args.samples).summary())
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m secure_auc.cli.ledger LEDGER.json (or: secure-auc ledger ...)", file=sys.stderr)
        return 2
    from ..dp.accountant import Ledger

    try:
        print(Ledger(argv[0]).report())
    except InputError as exc:
        print(f"secure-auc: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
