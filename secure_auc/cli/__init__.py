"""Command line: ``secure-auc evaluate`` (and the other subcommands)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from ..data.partition import SCHEMES
from ..dp.mechanisms import ALLOCATIONS, SENSITIVITIES
from ..dp.registry import make_mechanism
from ..mpc import RANK_METHODS, MPCError, rank_method_help
from ..validation import InputError
from .ledger import add_ledger_options, add_planning_options
from .ledger import add_parser as add_ledger_parser

__all__ = ["main", "build_parser"]

MECHANISMS = ("none", "rr", "laplace", "gaussian", "distributed")


def add_mechanism_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("label differential privacy")
    g.add_argument("--mechanism", choices=MECHANISMS, default="laplace",
                   help="none (exact, non-private), rr (randomized response on labels, debiased), "
                        "laplace or gaussian (noise on each client's localSum and localP, as in the paper), "
                        "distributed (noise on the aggregate only, in shares: discrete Laplace, or Skellam "
                        "with --delta; MPC protocol only). Default: laplace")
    g.add_argument("--epsilon", type=float, default=1.0, help="privacy budget eps per evaluation (default 1.0); with --evaluations T, the total of the T")
    g.add_argument("--delta", type=float, default=None,
                   help="delta in (0, 1) for --mechanism gaussian, or for distributed with Skellam shares; "
                        "with --evaluations T, the total delta of the T")
    g.add_argument("--allocation", choices=ALLOCATIONS, default="adaptive",
                   help="how laplace/gaussian split eps between localSum and localP: split (alpha), "
                        "orthogonal (shared beta) or adaptive (per-client beta). Default: adaptive")
    g.add_argument("--sensitivity", choices=SENSITIVITIES, default="local",
                   help="with --allocation split: local (client's max rank, LocalLaplace) or "
                        "global (M-1, GlobalLaplace). Default: local")
    g.add_argument("--alpha", type=float, default=0.5, help="share of eps on localSum for --allocation split (default 0.5)")
    g.add_argument("--beta", type=float, default=0.5, help="share of eps on localP for --allocation orthogonal (default 0.5)")
    g.add_argument("--honest-fraction", type=float, default=1.0,
                   help="distributed: fraction of clients assumed not to collude with the server; the honest "
                        "clients' shares alone give the guarantee (default 1.0)")
    g.add_argument("--split", type=float, default=None,
                   help="distributed: share of the budget on the centred rank statistic (of eps for discrete "
                        "Laplace; of the squared-sensitivity budget for Skellam). Default: variance-optimal from "
                        "public priors AUC 0.75, base rate 0.25 (0.716 for discrete Laplace)")


def add_data_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("built-in dataset (used when no client file is given)")
    g.add_argument("--clients", type=int, default=10, help="number of clients K (default 10)")
    g.add_argument("--partition", choices=SCHEMES, default="iid", help="iid (uniform) or noniid (by score)")
    g.add_argument("--samples", type=int, default=None, help="M (default 458,407 as the paper's small Criteo set)")
    g.add_argument("--base-rate", type=float, default=None, help="P/M (default 117,317/458,407)")
    g.add_argument("--data-auc", type=float, default=None, help="population AUC of the generator (default 0.7494)")
    g.add_argument("--data-seed", type=int, default=0, help="seed of the generator and the IID split (default 0)")


def add_mpc_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("MPC protocol (--protocol mpc)")
    g.add_argument("--provider", choices=("ttp", "tfp"), default="ttp",
                   help="who deals the correlated randomness (triples, shuffle corrections): ttp, a separate "
                        "dealer process that sees no input and must collude with no party (default); tfp, the "
                        "server (rank 0), which could then unmask every score: single-operator testing only")
    g.add_argument("--sort", choices=RANK_METHODS, default=RANK_METHODS[0], help=rank_method_help())
    g.add_argument("--layout", choices=("helpers", "clients"), default="helpers",
                   help="helpers: the server and --computing-parties - 1 helpers compute, the clients only send "
                        "shares and receive their own ranks (cost independent of the number of clients; default); "
                        "clients: every client is a computing party (no helper to trust, for a few clients)")
    g.add_argument("--computing-parties", type=int, choices=(2, 3), default=3,
                   help="with --layout helpers: the number of computing parties, the server included (default 3)")
    g.add_argument("--timeout", type=float, default=60.0,
                   help="seconds a party waits for the others before the run fails (default 60)")
    g.add_argument("--port", type=int, default=None,
                   help="TCP port on 127.0.0.1 where the local parties meet (default, or 0: a free one)")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="secure-auc",
        description="Label-differentially-private AUC for vertical federated learning (FedAUC).",
    )
    parser.add_argument("--version", action="version", version=f"secure-auc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser(
        "evaluate",
        help="evaluate the AUC over clients' private labels",
        description="Run one FedAUC evaluation. Each CLIENT.csv holds one client's data "
        "(columns 'score' and 'label'; other columns ignored). With no file, the built-in "
        "Criteo-like dataset is split into --clients parts.",
    )
    ev.add_argument("files", nargs="*", metavar="CLIENT.csv", help="one CSV file per client")
    ev.add_argument("--protocol", choices=("plain", "mpc"), default="plain",
                    help="plain: the paper's plain-sort protocol (the server sees every score); "
                         "mpc: CrypTen secret-shared ranks (the server sees only the aggregate). Default: plain")
    add_mechanism_options(ev)
    add_data_options(ev)
    ev.add_argument("--seed", type=int, default=None,
                    help="fix the DP randomness for reproducibility (default: a fresh key from the OS's "
                         "cryptographic source for every client). Client k's noise key is derived from (seed, k) "
                         "by a one-way hash; with --protocol mpc each key is handed to its client's process only, "
                         "but whoever knows the seed can recompute every client's noise")
    ev.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    add_mpc_options(ev)
    add_ledger_options(ev)
    add_planning_options(ev)

    cmp = sub.add_parser(
        "compare",
        help="compare the plain-sort and the MPC protocol (AUC, cost, what the server can learn)",
        description="Run the plain-sort protocol and the MPC protocol on the same built-in data for every "
        "M and number of parties; print AUCs (exact and DP, which must agree), seconds, bytes and rounds "
        "per party, the slowdown, and the precision of the paper's top-k label-guessing attack on the "
        "server's recorded view. Writes compare.csv, compare.json and compare.png to --out.",
    )
    cmp.add_argument("--sizes", type=int, nargs="+", default=None,
                     help="numbers of samples M (default 1024 2048 ... 65536)")
    cmp.add_argument("--parties", type=int, nargs="+", default=None,
                     help="computing parties: the server + (parties-1) clients (default 2 3 5)")
    cmp.add_argument("--quick", action="store_true", help="a small sweep (M = 300, 1000; 2 and 3 parties), under 2 minutes")
    cmp.add_argument("--launcher", choices=("local", "torchrun", "both"), default="local",
                     help="local multi-process launcher; with torchrun/both, each point also runs under torchrun "
                          "and the DP estimates are compared")
    add_mechanism_options(cmp)
    cmp.add_argument("--provider", choices=("ttp", "tfp"), default="ttp", help="MPC triple provider (default ttp)")
    cmp.add_argument("--sort", choices=RANK_METHODS, default=RANK_METHODS[0], help=rank_method_help())
    cmp.add_argument("--seed", type=int, default=0, help="seed of the DP noise, the same for both protocols (default 0)")
    cmp.add_argument("--out", default="results/compare", help="folder for compare.csv/.json/.png (default results/compare)")
    cmp.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    cmp.set_defaults(handler=cmd_compare)

    from .simulate import add_parser as add_simulate_parser

    add_simulate_parser(sub)
    add_ledger_parser(sub, add_mechanism_options, planned_mechanism)

    from .compute import add_client_parser

    add_client_parser(sub)

    kg = sub.add_parser(
        "keygen",
        help="write a party's identity key (mode 0600) and print its public key for the roster",
        description="Write a new Ed25519 identity key to FILE (PKCS#8 PEM, created with mode 0600, never "
        "overwritten) and print its public key (64 hex digits), which goes into the roster of every party "
        "under this party's role.",
    )
    kg.add_argument("file", metavar="FILE", help="where to write the private key")
    kg.set_defaults(handler=cmd_keygen)
    return parser


def _print_table(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def _fmt(x, spec=".6f"):
    return "-" if x is None else format(x, spec)


def mechanism_from_args(args, clients: int | None = None, *, epsilon: float | None = None,
                        delta: float | None = None):
    """The mechanism the options describe (``epsilon``/``delta``: a planned evaluation's own)."""
    return make_mechanism(
        args.mechanism, args.epsilon if epsilon is None else epsilon,
        delta=args.delta if epsilon is None else delta, allocation=args.allocation,
        sensitivity=args.sensitivity, alpha=args.alpha, beta=args.beta, clients=clients,
        honest_fraction=args.honest_fraction, split=args.split,
    )


def planned_mechanism(args, clients: int, total: int | None):
    """With --evaluations T: the plan (--epsilon/--delta the total); otherwise None."""
    if getattr(args, "evaluations", None) is None:
        return None
    from ..dp.planning import plan_evaluations

    takes_delta = args.mechanism in ("gaussian", "distributed") and args.delta is not None
    return plan_evaluations(
        lambda e, d: mechanism_from_args(args, clients, epsilon=e, delta=d if takes_delta else None),
        args.evaluations, args.epsilon, args.delta or 0.0, total=total)


def json_safe(value):
    """Non-finite floats (an estimate that noise pushed out of range) as null: strict JSON."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def print_report(result, source: str, as_json: bool) -> None:
    """Print an EvaluationResult as a table (or one JSON object)."""
    if as_json:
        print(json.dumps(json_safe(result.to_dict()), allow_nan=False))
        return
    r = result
    privacy = ("none (exact, non-private)" if r.epsilon is None
               else f"eps = {r.epsilon:g}" + (f", delta = {r.delta:g}" if r.delta else "") + " label-DP per evaluation")
    mech = r.mechanism + (f", allocation {r.allocation}" if r.allocation else "") + (
        f", sensitivity {r.sensitivity}" if r.sensitivity else "")
    rows = [
        ("data", source),
        ("protocol", r.protocol),
        ("clients", str(r.clients)),
        ("samples", str(r.samples)),
        ("mechanism", mech),
        ("privacy spent", privacy),
        ("AUC (DP estimate)", _fmt(r.auc)),
    ]
    if r.mechanism == "rr":
        rows.append(("AUC on flipped labels", _fmt(r.raw_auc)))
    rows.append(("seconds", f"{r.seconds:.3f}"))
    for key, value in r.extra.items():
        if isinstance(value, list):
            value = ", ".join(f"{v:,}" if isinstance(v, int) else str(v) for v in value)
        rows.append((key.replace("_", " "), str(value)))
    if r.reference_auc is not None:
        rows.append(("reference AUC*", _fmt(r.reference_auc)))
        rows.append(("absolute error*", _fmt(r.abs_error, ".2e")))
    _print_table(rows)
    if r.reference_auc is not None:
        print("* non-private reference, computed because all data is at hand in this local run; "
              "a real deployment would not have it.")


def check_run_options(args) -> None:
    """Numbers that would fail (or overflow) only after the parties started: checked first."""
    import math

    seed = getattr(args, "seed", None)
    if seed is not None and not 0 <= seed < 2**63:
        raise InputError(f"--seed must be between 0 and 2^63 - 1, got {seed}")
    timeout = getattr(args, "timeout", None)
    if timeout is not None and not (math.isfinite(timeout) and 0 < timeout <= 86400):
        raise InputError(f"--timeout must be a number of seconds in (0, 86400], got {timeout}")
    port = getattr(args, "port", None)
    if port is not None and not 0 <= port <= 65535:
        raise InputError(f"--port must be in 1..65535 (or 0 for a free one), got {port}")


def cmd_evaluate(args) -> int:
    from ..evaluate import builtin_clients, evaluate, load_clients

    check_run_options(args)

    if args.budget is not None and not args.ledger:
        raise InputError("--budget needs --ledger (the file where the budget and the releases are kept)")
    if args.files:
        clients = load_clients(args.files)
        source = f"{len(args.files)} client file(s)"
    else:
        clients = builtin_clients(args.clients, args.partition, samples=args.samples,
                                  auc=args.data_auc, base_rate=args.base_rate, data_seed=args.data_seed)
        source = f"built-in Criteo-like dataset, {args.partition} split"
    total = sum(len(c) for c in clients)
    plan = planned_mechanism(args, len(clients), total)
    mechanism = plan.mechanism if plan else mechanism_from_args(args, clients=len(clients))
    ledger = None
    if args.ledger:
        from ..dp.accountant import Ledger, label_commitment

        ledger = Ledger(args.ledger)
        budget = (args.budget, args.budget_delta) if args.budget is not None else (
            (args.epsilon, args.delta or 0.0) if plan else None)
        if budget is not None:
            for c in clients:
                ledger.set_budget(label_commitment(c.labels), *budget, name=args.dataset)
    mpc_options = None
    if args.protocol == "mpc":
        mpc_options = {"provider": args.provider, "sort": args.sort, "timeout": args.timeout,
                       "port": args.port or None, "progress": True,
                       "computing": args.computing_parties if args.layout == "helpers" else 0}
        if args.seed is not None:
            print(f"[secure-auc] --seed {args.seed} with --protocol mpc: client k's noise key is derived from "
                  "(seed, k) and handed to client k's process only; the server and the dealer never receive it. "
                  "Whoever knows the seed can recompute every client's noise: use it for tests and reproductions, "
                  "never in a deployment", file=sys.stderr)
    result = evaluate(clients, mechanism, protocol=args.protocol, seed=args.seed, mpc_options=mpc_options,
                      ledger=ledger, dataset_name=args.dataset)
    if plan:
        result.extra["plan"] = plan.summary()
    print_report(result, source, args.json)
    return 0


def cmd_keygen(args) -> int:
    from ..mpc.comm.roster import generate_identity, write_identity

    print(write_identity(args.file, generate_identity()))
    return 0


def cmd_compare(args) -> int:
    from pathlib import Path

    from ..experiments.compare import compare, format_table, write_outputs

    sizes = args.sizes or ([300, 1000] if args.quick else [2**e for e in range(10, 17)])
    parties = args.parties or ([2, 3] if args.quick else [2, 3, 5])
    for n in parties:
        if n < 2:
            raise InputError(f"parties must be at least 2 (the server and a client), got {n}")
    for m in sizes:
        if m < max(parties) * 2:
            raise InputError(f"M = {m} is too small for {max(parties) - 1} clients")
    if args.mechanism == "distributed":
        raise InputError("compare runs both protocols, and distributed noise runs only in the MPC protocol; "
                         "choose rr, laplace or gaussian")
    mechanism = mechanism_from_args(args)
    margs = ["--mechanism", args.mechanism, "--epsilon", str(args.epsilon), "--allocation", args.allocation,
             "--sensitivity", args.sensitivity, "--alpha", str(args.alpha), "--beta", str(args.beta)]
    if args.delta is not None:
        margs += ["--delta", str(args.delta)]
    rows = compare(sizes, parties, mechanism, margs, seed=args.seed, provider=args.provider, sort=args.sort,
                   launcher=args.launcher, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    paths = write_outputs(rows, Path(args.out))
    if args.json:
        from dataclasses import asdict

        print(json.dumps(json_safe([asdict(r) | {"exact_equal": r.exact_equal, "dp_equal": r.dp_equal} for r in rows]),
                         allow_nan=False))
    else:
        print(format_table(rows))
        print(f"\nwrote {paths['csv']}, {paths['json']}, {paths['png']}")
    bad = [r for r in rows if not (r.exact_equal and r.dp_equal)
           or (r.torchrun_dp_auc is not None and r.torchrun_dp_auc != r.mpc_dp_auc)]
    if bad:
        print("secure-auc: error: the protocols disagree for " + ", ".join(
            f"M={r.samples} parties={r.parties}" for r in bad), file=sys.stderr)
        return 1
    return 0


class _StderrHandler(logging.Handler):
    """Writes the package's log records to whatever ``sys.stderr`` is at the time."""

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(self.format(record) + "\n")
        sys.stderr.flush()


def setup_logging() -> None:
    """The library reports through ``logging``; the CLI shows its records on stderr
    (debug records with SECURE_AUC_DEBUG set)."""
    logger = logging.getLogger("secure_auc")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())
    logger.setLevel(logging.DEBUG if os.environ.get("SECURE_AUC_DEBUG") else logging.INFO)
    logger.propagate = False


def _terminate_as_interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    import signal

    setup_logging()
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate_as_interrupt)  # a scheduler's stop: the same clean exit
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "evaluate":
            return cmd_evaluate(args)
        handler = getattr(args, "handler", None)
        if handler is None:
            parser.error(f"unknown command {args.command}")
        return handler(args)
    except InputError as exc:
        print(f"secure-auc: error: {exc}", file=sys.stderr)
        return 2
    except MPCError as exc:
        print(f"secure-auc: error: MPC run failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("secure-auc: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
