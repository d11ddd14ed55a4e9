"""``secure-auc ledger``: show a privacy ledger, change its budget, plan T evaluations.

    secure-auc ledger show LEDGER.db
    secure-auc ledger budget LEDGER.db --epsilon E [--delta D]
    secure-auc ledger plan --evaluations T --epsilon E [--delta D] --mechanism ... [--clients K]

``python -m secure_auc.cli.ledger LEDGER.db`` still prints the totals.
"""

from __future__ import annotations

import argparse
import sys

from ..validation import InputError

__all__ = ["main", "add_parser", "add_ledger_options", "add_planning_options"]


def add_ledger_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("privacy accounting across runs")
    g.add_argument("--ledger", default=None, metavar="FILE",
                   help="privacy ledger (SQLite, mode 0600, created if missing) where every release is charged, "
                        "before the run, to each record it contains (--id-column), or else to each client's "
                        "labels as one dataset")
    g.add_argument("--id-column", default=None, metavar="NAME",
                   help="with --ledger: the column of record identifiers in every client file; each record is "
                        "charged for every release that contains it, whatever the file's order or other rows "
                        "(default: none, each client's labels are one dataset)")
    g.add_argument("--dataset", default=None,
                   help="a name for the clients' datasets in the ledger's report (default: none, each named by "
                        "its client)")
    g.add_argument("--budget", type=float, default=None,
                   help="total eps allowed for each record, set once (with --ledger); a run that would take any "
                        "record past it is refused; change it with: secure-auc ledger budget")
    g.add_argument("--budget-delta", type=float, default=None, help="total delta allowed, with --budget (default 0)")


def add_planning_options(p: argparse.ArgumentParser, required: bool = False) -> None:
    p.add_argument("--evaluations", type=int, default=None, metavar="T",
                   help="planning: --epsilon/--delta are the total for T evaluations; each evaluation gets the "
                        "largest budget whose T-fold composition (tightest of basic, RDP and PLD accounting) fits"
                        + (" (required)" if required else " (default: no planning, --epsilon/--delta are this "
                                                          "evaluation's own)"))


def add_parser(sub, add_mechanism_options, planned_mechanism) -> None:
    """The ``ledger`` subcommands; the mechanism options and the planner come from :mod:`secure_auc.cli`."""
    lp = sub.add_parser("ledger", help="show a privacy ledger, change a budget, plan T evaluations",
                        description="The label owners' privacy ledger (see docs/privacy-accounting.md).")
    lsub = lp.add_subparsers(dest="ledger_command", required=True)
    show = lsub.add_parser("show", help="the spent budget per record",
                           description="Print the budget and, per release history (the most charged first), how "
                                       "many records (or datasets without identifiers) have it and what they spent.")
    show.add_argument("ledger", metavar="LEDGER.db", help="the privacy ledger (SQLite) to read")
    show.add_argument("--json", action="store_true",
                      help="print one JSON object: path, budget (null if none), evaluations, client_releases, "
                           "histories (kind, count, names, epsilon, delta, releases, accountant, basic_epsilon, "
                           "basic_delta, left_epsilon), releases (one per client and evaluation: id, evaluation, "
                           "client, time, mechanism, state, epsilon, delta, event, ...)")
    show.set_defaults(handler=cmd_show)
    bud = lsub.add_parser("budget", help="set or change (raise or lower) the budget of every record explicitly",
                          description="Set the total (eps, delta) allowed for every record of the ledger; a budget "
                                      "already set is replaced (raised or lowered). Prints the ledger afterwards.")
    bud.add_argument("ledger", metavar="LEDGER.db", help="the privacy ledger (SQLite) to change; it must exist")
    bud.add_argument("--epsilon", type=float, required=True, help="the total eps allowed for each record")
    bud.add_argument("--delta", type=float, default=0.0, help="the total delta allowed for each record (default 0)")
    bud.set_defaults(handler=cmd_budget)
    plan = lsub.add_parser("plan", help="per-evaluation budget and noise for T evaluations within a total",
                           description="The largest budget of one evaluation such that --evaluations T of them fit "
                                       "the total --epsilon/--delta (tightest of basic composition, RDP and PLD "
                                       "accounting), and the noise it gives for --clients K and --samples M.")
    add_mechanism_options(plan, planning=True)
    add_planning_options(plan, required=True)
    plan.add_argument("--clients", type=int, default=3, help="K (default 3)")
    plan.add_argument("--samples", type=int, default=20000, help="M (default 20000)")
    plan.set_defaults(handler=lambda args: cmd_plan(args, planned_mechanism))


def _existing(path: str):
    """The ledger at ``path``, which must exist (showing or changing a missing ledger is a mistake)."""
    import os

    from ..dp.accountant import Ledger

    if not os.path.lexists(path):
        raise InputError(f"{path}: no such privacy ledger")
    return Ledger(path)


def cmd_show(args) -> int:
    ledger = _existing(args.ledger)
    if not args.json:
        print(ledger.report())
        return 0
    import json

    from .output import json_safe

    budget = ledger.budget()
    releases = [{k: v for k, v in r.items() if k not in ("seed_tag", "rr_key")} for r in ledger.releases()]
    histories = [h | {"left_epsilon": None if budget is None else max(0.0, budget["epsilon"] - h["epsilon"])}
                 for h in ledger.histories()]
    print(json.dumps(json_safe({
        "path": str(ledger.path), "budget": budget, "evaluations": len({r["evaluation"] for r in releases}),
        "client_releases": len(releases), "histories": histories, "releases": releases}), allow_nan=False))
    return 0


def cmd_budget(args) -> int:
    ledger = _existing(args.ledger)
    ledger.set_budget(args.epsilon, args.delta, change=True)
    print(ledger.report())
    return 0


def cmd_plan(args, planned_mechanism) -> int:
    if args.evaluations is None:
        raise InputError("ledger plan needs --evaluations T")
    from ..dp.registry import family

    if not family(args.mechanism).private:
        raise InputError(f"ledger plan: --mechanism {args.mechanism} adds no noise and spends an infinite budget; "
                         "nothing to plan")
    if args.clients < 1:
        raise InputError(f"--clients must be at least 1, got {args.clients}")
    if args.samples < max(2, args.clients):
        raise InputError(f"--samples must be at least 2 and at least --clients ({args.clients}), got {args.samples}")
    print(planned_mechanism(args, args.clients, args.samples).summary())
    return 0


def main(argv=None) -> int:
    from ..interrupts import as_usual

    as_usual()  # Ctrl-C: a KeyboardInterrupt from here on (secure_auc.interrupts)
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m secure_auc.cli.ledger LEDGER.db (or: secure-auc ledger ...)", file=sys.stderr)
        return 2
    try:
        print(_existing(argv[0]).report())
    except InputError as exc:
        print(f"secure-auc: error: {exc}", file=sys.stderr)
        return 2
    return 0



def check_ledger_options(args) -> None:
    """Refuse the ledger's options where they would have no effect: without --ledger, and
    --budget-delta without --budget."""
    for option in ("budget", "budget_delta", "id_column", "dataset"):
        if getattr(args, option, None) is not None and not args.ledger:
            raise InputError(f"--{option.replace('_', '-')} needs --ledger (the file where the budget and the "
                             "releases are kept)")
    if getattr(args, "budget_delta", None) is not None and args.budget is None:
        raise InputError("--budget-delta needs --budget (it is the budget's delta)")


def reserve_client_ledger(args, mechanism, data, client: int, clients: int, noise_key: int | None = None,
                          via: str = "torchrun"):
    """Client ``client`` charges its own records in its own ledger before the run: (ledger, reservation).

    M is not known yet: the client uses the lower bound n_k + K - 1 (every
    other client holds a sample), which only makes size-dependent events looser.
    A fixed noise key is recorded by its tag under the ledger's key, so that its reuse is refused.
    """
    check_ledger_options(args)
    if not args.ledger:
        return None, None
    from ..dp.accountant import Ledger

    ledger = Ledger(args.ledger.replace("{client}", str(client)))
    if args.budget is not None:
        ledger.set_budget(args.budget, args.budget_delta or 0.0)
    # sizes=None: a client does not know its index in another run's layout, so RR is charged every run
    return ledger, ledger.reserve([data], mechanism, seed=noise_key, total=len(data.labels) + clients - 1,
                                  note=f"MPC client {client} of {clients} ({via})", clients=[client],
                                  name=getattr(args, "dataset", None))


if __name__ == "__main__":
    sys.exit(main())
