"""Command line: ``secure-auc evaluate`` (and the other subcommands)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from ..data.partition import SCHEMES
from ..dp.family import UNIVERSAL, MechanismChoice
from ..dp.registry import DEFAULT_FAMILY, FAMILIES, families, family
from ..mpc import RANK_METHODS, MPCError, rank_method_help
from ..interrupts import as_usual, is_command_line
from ..validation import InputError, check_run_numbers
from .ledger import add_ledger_options, add_planning_options, check_ledger_options
from .ledger import add_parser as add_ledger_parser
from .output import (OneLineParser, add_output_options, json_safe, apply_verbosity, check_writable_dir, human_bytes,
                     progress_bar, progress_enabled, stop_on_signals, stop_status)

__all__ = ["main", "build_parser"]

def _mechanism_option_table() -> dict:
    """Every option a family takes on the command line, in declaration order: name -> [(family, Option)]."""
    table: dict = {}
    for fam in families():
        for opt in fam.options:
            if opt.cli:
                table.setdefault(opt.name, []).append((fam, opt))
    return table


def mechanism_option_names() -> list[str]:
    """The names of the mechanism options (``--epsilon`` ... as ``epsilon``), from the families' declarations."""
    return list(_mechanism_option_table())


def add_mechanism_options(p: argparse.ArgumentParser, planning: bool = False) -> None:
    """The mechanism options, as the families declare them (:mod:`secure_auc.dp.family`); ``planning``:
    the command also takes --evaluations T (add_planning_options)."""
    # every option defaults to None, so that one given where it has no effect is refused
    # (mechanism_choice) instead of silently ignored; the family's defaults are filled in there
    g = p.add_argument_group("label differential privacy")
    g.add_argument("--mechanism", choices=list(FAMILIES), default=DEFAULT_FAMILY,
                   help=", ".join(f"{f.name} ({f.summary})" for f in families()) + f". Default: {DEFAULT_FAMILY}")
    private = [f.name for f in families() if f.private]
    for name, decl in _mechanism_option_table().items():
        takers = [f.name for f, _ in decl]
        if len({o for _, o in decl}) > 1:  # declared differently by each family that takes it
            text = "; ".join(f"{f.name}: {o.describe()}" for f, o in decl)
        elif set(takers) >= set(private):
            others = [f.name for f in families() if f.name not in takers]
            text = decl[0][1].describe() + (f" (not with {', '.join(others)})" if others else "")
        else:
            text = f"{', '.join(takers)} only: {decl[0][1].describe()}"
        if planning and name in UNIVERSAL:
            text += "; with --evaluations T, the total of the T"
        opt = decl[0][1]
        g.add_argument(opt.flag, type=opt.type, choices=opt.choices or None, default=None, help=text)


def mechanism_choice(args) -> MechanismChoice:
    """``args`` -> the family's declaration -> the options checked and completed (one pass, nothing
    written on ``args``): an option the family does not take, or that does not apply with the
    others (``--alpha`` without ``--allocation split``), is refused in one line."""
    fam = family(args.mechanism)
    table = _mechanism_option_table()
    planning = getattr(args, "evaluations", None) is not None  # --epsilon/--delta: the totals of the T
    given = {n: getattr(args, n) for n in table if getattr(args, n, None) is not None}
    for name in given:
        if fam.takes(name) or (planning and fam.private and name in UNIVERSAL):
            continue
        reason = fam.refusal(name, {})
        if "*" not in fam.notes:
            reason += f", only to {', '.join(f.name for f, _ in table[name])}"
        raise InputError(f"--{name.replace('_', '-')} does not apply {reason}")
    values = fam.resolve(given)
    for opt in fam.options:
        if opt.name in given and not opt.applies(values):
            raise InputError(f"{opt.flag} does not apply {opt.refusal(values)}")
    total = (values.get("epsilon"), given.get("delta") or 0.0) if planning and fam.private else None
    return MechanismChoice(fam, values, given, total, args.evaluations if total else None)


DATA_DEFAULTS = {"clients": 10, "partition": "iid", "data_seed": 0}


def add_data_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("built-in dataset (used when no client file is given)")
    g.add_argument("--clients", type=int, default=None, help="number of clients K (default 10)")
    g.add_argument("--partition", choices=SCHEMES, default=None,
                   help="iid (uniform) or noniid (consecutive blocks by score). Default: iid")
    g.add_argument("--samples", type=int, default=None, help="M (default 458,407 as the paper's small Criteo set)")
    g.add_argument("--large", action="store_true", default=None,
                   help="the paper's large Criteo set instead: M = 4,584,062, P = 1,173,981, AUC 0.7505")
    g.add_argument("--base-rate", type=float, default=None, help="P/M (default 117,317/458,407)")
    g.add_argument("--data-auc", type=float, default=None, help="population AUC of the generator (default 0.7494)")
    g.add_argument("--data-seed", type=int, default=None, help="seed of the generator and the IID split (default 0)")


MPC_DEFAULTS = {"provider": "ttp", "sort": RANK_METHODS[0], "timeout": 60.0, "layout": "helpers"}


def add_mpc_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("MPC protocol (--protocol mpc only)")
    g.add_argument("--provider", choices=("ttp", "tfp"), default=None,
                   help="who deals the correlated randomness (triples, shuffle corrections): ttp, a separate "
                        "dealer process that sees no input and must collude with no party (default); tfp, the "
                        "server (rank 0), which could then unmask every score: single-operator testing only")
    g.add_argument("--sort", choices=RANK_METHODS, default=None, help=rank_method_help())
    g.add_argument("--layout", choices=("helpers", "clients"), default=None,
                   help="helpers: the server and --computing-parties - 1 helpers compute, the clients only send "
                        "shares and receive their own ranks (cost independent of the number of clients; default); "
                        "clients: every client is a computing party (no helper to trust, for a few clients)")
    g.add_argument("--computing-parties", type=int, choices=(2, 3), default=None,
                   help="with --layout helpers: the number of computing parties, the server included (default 3)")
    g.add_argument("--timeout", type=float, default=None,
                   help="seconds a party waits for the others before the run fails, in (0, 86400] (default 60)")
    g.add_argument("--port", type=int, default=None,
                   help="TCP port on 127.0.0.1 where the local parties meet, and the next port, 1..65534 (default, or 0: a free pair)")
    g.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads each computing party uses for its local work (its compiled kernels), at least 1 (default: the cores the process may use)")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = OneLineParser(
        prog="secure-auc",
        description="Label-differentially-private AUC for vertical federated learning (FedAUC).",
    )
    parser.add_argument("--version", action="version", version=f"secure-auc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser(
        "evaluate",
        help="evaluate the AUC over clients' private labels",
        description="Run one FedAUC evaluation. Each CLIENT.csv holds one client's data "
        "(columns 'score' and 'label', or --score-column/--label-column; other columns ignored). With no "
        "file, the built-in Criteo-like dataset is split into --clients parts. The DP estimate comes with "
        "its standard deviation and a 95% interval, computed from public quantities and the noisy "
        "aggregate only.",
    )
    ev.add_argument("files", nargs="*", metavar="CLIENT.csv",
                    help="one file per client: CSV (UTF-8, with or without BOM), CSV.gz, or Parquet")
    add_column_options(ev, "every client file")
    ev.add_argument("--protocol", choices=("plain", "mpc"), default="mpc",
                    help="plain: the paper's plain-sort protocol (the server sees every score); "
                         "mpc: CrypTen secret-shared ranks (the server sees only the aggregate). Default: mpc")
    add_mechanism_options(ev, planning=True)
    add_data_options(ev)
    ev.add_argument("--seed", type=int, default=None,
                    help="fix the DP randomness for reproducibility (default: a fresh key from the OS's "
                         "cryptographic source for every client). Client k's noise key is derived from (seed, k) "
                         "by a one-way hash; with --protocol mpc each key is handed to its client's process only, "
                         "and the seed must be a secret in [2^128, 2^256) (python3 -c 'import secrets; "
                         "print(secrets.randbits(256))'): whoever knows or guesses it can recompute every client's "
                         "noise")
    ev.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    add_output_options(ev)
    from .report import add_report_options

    add_report_options(ev)
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
    cmp.add_argument("--quick", action="store_true", help="a small sweep (M = 300, 1000; 2 and 3 parties): about 30 s on an idle 2-core machine")
    cmp.add_argument("--launcher", choices=("local", "torchrun", "both"), default="local",
                     help="local multi-process launcher (default); with torchrun/both, each point also runs under "
                          "torchrun and the DP estimates are compared")
    add_mechanism_options(cmp)
    cmp.add_argument("--provider", choices=("ttp", "tfp"), default="ttp", help="MPC triple provider (default ttp)")
    cmp.add_argument("--sort", choices=RANK_METHODS, default=RANK_METHODS[0], help=rank_method_help())
    cmp.add_argument("--seed", type=int, default=0, help="seed of the DP noise, the same for both protocols (default 0)")
    cmp.add_argument("--out", default="results/compare", help="folder for compare.csv/.json/.png (default results/compare)")
    cmp.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    add_output_options(cmp)
    cmp.set_defaults(handler=cmd_compare)

    from .simulate import add_parser as add_simulate_parser

    add_simulate_parser(sub)
    add_ledger_parser(sub, add_mechanism_options, planned_mechanism)

    from .select import add_parser as add_select_parser

    add_select_parser(sub)

    add_client_parser(sub)

    from .deploy import add_parsers as add_deploy_parsers

    add_deploy_parsers(sub)

    md = sub.add_parser(
        "make-data",
        help="write client files from the built-in dataset (to try the commands on files)",
        description="Split the built-in Criteo-like dataset over as many clients as files are named and write "
        "one file per client with columns 'score' and 'label': CSV, gzip-compressed CSV for names ending in "
        ".gz, Parquet for .parquet (needs pyarrow). Existing files are not overwritten without --force.",
    )
    md.add_argument("files", nargs="+", metavar="CLIENT.csv", help="the files to write, one per client")
    md.add_argument("--samples", type=int, default=30_000, help="M, in total over the files (default 30,000)")
    md.add_argument("--partition", choices=SCHEMES, default="iid",
                    help="iid (uniform) or noniid (consecutive blocks by score). Default: iid")
    md.add_argument("--base-rate", type=float, default=None, help="P/M (default 117,317/458,407)")
    md.add_argument("--data-auc", type=float, default=None, help="population AUC of the generator (default 0.7494)")
    md.add_argument("--data-seed", type=int, default=0, help="seed of the generator and the IID split (default 0)")
    md.add_argument("--force", action="store_true", help="overwrite existing files")
    add_output_options(md)
    md.set_defaults(handler=cmd_make_data)

    kg = sub.add_parser(
        "keygen",
        help="write a party's identity key (mode 0600) and print its public key for the roster",
        description="Write a new Ed25519 identity key to FILE (PKCS#8 PEM, created with mode 0600, never "
        "overwritten; a missing folder is made with mode 0700) and print its public key (64 hex digits), which goes into the roster of every party "
        "under this party's role.",
    )
    kg.add_argument("file", metavar="FILE", help="where to write the private key")
    kg.set_defaults(handler=cmd_keygen)
    return parser


def add_party_options(p: argparse.ArgumentParser) -> None:
    """Options every separately started party takes: the dealer, the rank method, the timeout."""
    p.add_argument("--provider", choices=("ttp", "tfp"), default="ttp",
                   help="ttp: a separate dealer process (the last rank) deals the correlated randomness (default); "
                        "tfp: the server deals it and could unmask every score (single-operator testing only)")
    p.add_argument("--sort", choices=RANK_METHODS, default=RANK_METHODS[0], help=rank_method_help())
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for another party (default 60)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads each computing party uses for its local work (its compiled kernels), at least 1 (default: the cores the process may use)")


def add_column_options(p: argparse.ArgumentParser, where: str) -> None:
    p.add_argument("--score-column", default=None, metavar="NAME",
                   help=f"the column holding the scores in {where} (default: score)")
    p.add_argument("--label-column", default=None, metavar="NAME",
                   help=f"the column holding the labels in {where} (default: label)")


def add_helpers_options(p: argparse.ArgumentParser, required: bool = True) -> None:
    add_mechanism_options(p)
    without = "" if required else " (required without --config)"
    p.add_argument("--clients", type=int, required=required, help="the number of clients K" + without)
    add_party_options(p)
    p.add_argument("--roster", metavar="ROSTER.json", required=required,
                   help="public keys of the server, the helpers, the dealer and the clients" + without)


def add_client_parser(sub) -> None:
    c = sub.add_parser(
        "client",
        help="one client of the helpers layout: connect to the computing parties, share, get its own ranks",
        description="Run one client (an input party) of a deployment whose computing parties run "
                    "'python -m secure_auc.cli.compute' under torchrun: the client service of 'secure-auc serve' "
                    "with these options as its configuration and the file's scores for every evaluation the "
                    "server asks for. The client reads only its own file, charges its own ledger before it "
                    "releases anything, sends only shares, and receives only the shares of its own ranks.")
    c.add_argument("file", metavar="CLIENT.csv", help="this client's scores and labels (CSV, CSV.gz or Parquet)")
    add_column_options(c, "the file")
    c.add_argument("--client", type=int, required=True, help="this client's index (0..K-1), its place in the roster")
    add_helpers_options(c)
    from .report import add_report_spec_options

    add_report_spec_options(c)
    c.add_argument("--parties", nargs="+", required=True, metavar="HOST:PORT",
                   help="the computing parties' client addresses in rank order (server, helpers)")
    c.add_argument("--identity", metavar="KEY.pem", required=True, help="this client's identity key")
    c.add_argument("--noise-key-file", metavar="PATH", default=None,
                   help="reproducible runs: this client's 128-bit noise key (32 hex digits) from PATH "
                        "(default: a fresh key from the OS's cryptographic source)")
    add_ledger_options(c)
    c.set_defaults(handler=cmd_client)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InputError(f"--parties: expected HOST:PORT, got {text!r}")
    return host, int(port)


def cmd_client(args) -> int:
    """One client of a deployment started with ``python -m secure_auc.cli.compute``: the client
    service of :mod:`secure_auc.deploy.service` with the options as its configuration and the
    file's scores as its hook (the same code as ``secure-auc serve --role client-K``)."""

    from ..data.io import read_client_file
    from ..deploy.config import options_config
    from ..deploy.service import ClientInputs, ServiceError, refuse_at_start, run_client_service
    from ..dp.rng import read_noise_key_file
    from ..mpc.comm.roster import read_identity
    from .ledger import reserve_client_ledger
    from .report import report_table

    w = len(args.parties)
    if w not in (2, 3):
        raise InputError(f"--parties: the helpers layout has 2 or 3 computing parties, got {w}")
    if args.clients < 1:
        raise InputError(f"--clients must be at least 1, got {args.clients}")
    if not 0 <= args.client < args.clients:
        raise InputError(f"--client must be in 0..{args.clients - 1}, got {args.client}")
    config = options_config(computing_parties=w, clients=args.clients, mechanism=mechanism_options(args, args.clients),
                            roster=args.roster, client_addresses=[_address(a) for a in args.parties],
                            provider=args.provider, sort=args.sort, timeout=args.timeout,
                            report=report_table(args))
    roster = config.roster()
    identity = read_identity(args.identity)
    if identity.public_key().public_bytes_raw() != roster.clients[args.client]:
        raise InputError(f"{args.identity} is not the key the roster lists for client {args.client}")
    data = read_client_file(args.file, score_column=args.score_column or "score",
                            label_column=args.label_column or "label", id_column=args.id_column)
    key = read_noise_key_file(args.noise_key_file, args.client)
    mechanism = config.charged()  # with --metrics: the AUC's and the report's releases composed
    try:  # the client's own budget, checked before it joins (each evaluation is charged when it is asked for)
        ledger, reservation = reserve_client_ledger(args, mechanism, data, args.client, args.clients, key,
                                                    via="secure-auc client")
    except InputError as exc:
        from ..dp.accountant import BudgetExceeded

        # the computing parties are told why: a reason code, never the text (the detail stays here)
        refuse_at_start(config, args.client, identity, "budget" if isinstance(exc, BudgetExceeded) else "ledger")
        raise
    if reservation is not None:
        ledger.cancel(reservation)

    def from_file(epoch, *, client, evaluation):
        if key is not None and evaluation > 1:
            raise InputError("a noise key file serves one evaluation only: the next needs fresh noise")
        return data.scores if key is None else (data.scores, key)

    inputs = ClientInputs(data.labels, from_file, ledger, data, getattr(args, "dataset", None))
    try:
        run_client_service(config, args.client, identity, inputs)
    except ServiceError as exc:
        raise MPCError(f"client {args.client}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - one line naming the cause
        from ..mpc.comm.runtime import explain

        raise MPCError(f"client {args.client}: {explain(exc)}") from None
    logging.getLogger("secure_auc").info("[client %d] done: %d samples", args.client, len(data))
    return 0


def mechanism_options(args, clients: int) -> dict:
    """The mechanism options given on the command line (defaults filled in), as a deployment
    configuration's ``[mechanism]`` table: what every party compares at connection time."""
    choice = mechanism_choice(args)
    choice.mechanism(clients)  # the mechanism's own checks, now
    return choice.table()


def _print_table(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def _fmt(x, spec=".6f"):
    return "-" if x is None else format(x, spec)


def mechanism_from_args(args, clients: int | None = None, *, epsilon: float | None = None,
                        delta: float | None = None):
    """The mechanism the options describe (``epsilon``/``delta``: a planned evaluation's own)."""
    return mechanism_choice(args).mechanism(clients, epsilon=epsilon, delta=delta)


def planned_mechanism(args, clients: int, total: int | None, choice: MechanismChoice | None = None):
    """With --evaluations T: the plan (--epsilon/--delta the total); otherwise None."""
    if getattr(args, "evaluations", None) is None:
        return None
    choice = choice or mechanism_choice(args)
    with progress_bar(args, 14, f"planning {args.evaluations} evaluations") as bar:  # on a terminal only
        return choice.plan(clients, total=total, progress=lambda step, steps: bar.update())


def print_report(result, source: str, as_json: bool, report=(), flips: bool = False) -> None:
    """Print an EvaluationResult as a table (or one JSON object); the table leaves out the
    entries of ``extra`` named in ``report`` (the whole evaluation's, printed apart); ``flips``:
    whether its mechanism flips labels (randomized response: the AUC on the flipped labels is shown)."""
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
    if r.std is not None:
        rows.append(("standard deviation", _fmt(r.std, ".2e") + "  (delta method, from public quantities and "
                     "the noisy aggregate)"))
    if r.ci_low is not None:
        rows.append(("95% interval", f"[{r.ci_low:.6f}, {r.ci_high:.6f}]  ({r.ci_note})"))
    elif r.ci_note is not None:
        rows.append(("95% interval", r.ci_note))
    if r.std is None and r.epsilon is not None:
        rows.append(("standard deviation", "undefined: the noisy count of positives is outside (0, M)"))
    if flips:
        rows.append(("AUC on flipped labels", _fmt(r.raw_auc)))
    rows.append(("seconds", f"{r.seconds:.3f}"))
    for key, value in r.extra.items():
        if key in report:
            continue
        if "bytes" in key.split("_"):  # every byte counter holds what was sent plus what was received
            label = key.replace("_", " ")
            for old in ("bytes sent received", "bytes sent", "bytes"):
                label = label.replace(old, "data sent+received")
            values = value if isinstance(value, list) else [value]
            rows.append((label, ", ".join(human_bytes(v) for v in values)))
            continue
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
    check_run_numbers(data_seed=getattr(args, "data_seed", None), seed=getattr(args, "seed", None),
                      secret=getattr(args, "protocol", None) == "mpc", timeout=getattr(args, "timeout", None),
                      port=getattr(args, "port", None))


def evaluation_request(args):
    """``secure-auc evaluate``'s options -> one :class:`secure_auc.request.EvaluationRequest`, every
    check done first: an option given where it has no effect is refused, the defaults filled in
    (nothing written on ``args``)."""
    from ..request import DataRequest, EvaluationRequest
    from .output import check_not_given
    from .report import check_report_options, report_arguments

    if args.files:
        check_not_given(args, ["clients", "partition", "samples", "large", "base_rate", "data_auc", "data_seed"],
                        "to client files, only to the built-in dataset")
    elif args.large:
        check_not_given(args, ["samples", "base_rate", "data_auc"], "with --large (it fixes M, P and the AUC)")
    if not args.files:
        check_not_given(args, ["score_column", "label_column", "id_column"], "without client files")
    if args.protocol == "plain":
        check_not_given(args, ["provider", "sort", "timeout", "port", "layout", "computing_parties", "threads"],
                        "to --protocol plain, only to --protocol mpc")
    if args.layout == "clients":
        check_not_given(args, ["computing_parties"], "to --layout clients (every client computes)")
    check_report_options(args)
    check_ledger_options(args)
    metrics, _ = report_arguments(args)
    choice = mechanism_choice(args)  # the families' declarations, read once
    if args.seed is not None and not choice.family.private:
        raise InputError(f"--seed does not apply to --mechanism {args.mechanism} (there is no noise to seed)")
    if args.evaluations is not None and not choice.family.private:
        raise InputError(f"--evaluations does not apply to --mechanism {args.mechanism} (it adds no noise and "
                         "spends no budget: nothing to plan)")
    given = {k: v for k, v in vars(args).items() if v is not None}
    opt = DATA_DEFAULTS | MPC_DEFAULTS | given
    data = DataRequest(tuple(args.files or ()), args.score_column, args.label_column, args.id_column,
                       clients=opt["clients"], partition=opt["partition"], samples=args.samples, auc=args.data_auc,
                       base_rate=args.base_rate, data_seed=opt["data_seed"], large=bool(args.large))
    mpc_options = None
    if args.protocol == "mpc":
        computing = opt.get("computing_parties", 3) if opt["layout"] == "helpers" else 0
        mpc_options = {"provider": opt["provider"], "sort": opt["sort"], "timeout": opt["timeout"],
                       "port": args.port or None, "progress": not args.quiet, "computing": computing}
        if computing and is_command_line():  # this process is the command: its start-up from its own start
            import time

            from ..deploy.service import process_seconds

            mpc_options["started"] = time.perf_counter() - process_seconds()
        if args.threads is not None:
            from ..validation import check_threads

            mpc_options["threads"] = check_threads(args.threads, "--threads")
    budget = (args.budget, args.budget_delta or 0.0) if args.budget is not None else None
    check_run_numbers(data_seed=args.data_seed, seed=args.seed, secret=args.protocol == "mpc", timeout=args.timeout,
                      port=args.port)
    return EvaluationRequest(data, choice, protocol=args.protocol, seed=args.seed, mpc_options=mpc_options,
                             evaluations=args.evaluations, ledger=args.ledger, budget=budget, dataset=args.dataset,
                             metrics=metrics)


def cmd_evaluate(args) -> int:
    from ..request import run_request
    from .output import step_progress
    from .report import show_report

    progress = step_progress(args, f"planning {args.evaluations} evaluations")  # on a terminal only
    request = evaluation_request(args)
    if request.protocol == "mpc" and request.seed is not None and not args.quiet:
        print(f"[secure-auc] --seed {args.seed} with --protocol mpc: client k's noise key is derived from "
              "(seed, k) and handed to client k's process only; the server and the dealer never receive it. "
              "Whoever knows the seed can recompute every client's noise: use it for tests and reproductions, "
              "never in a deployment", file=sys.stderr)
    if request.protocol == "mpc":  # options checked: the parties' fork server imports while the data is read
        from ..mpc.forkserver import prestart

        prestart()
    outcome = run_request(request, progress=progress)
    print_report(outcome.result, outcome.source, args.json, report=outcome.report, flips=outcome.flips)
    show_report(args, outcome.report)
    return 0


def cmd_make_data(args) -> int:
    from pathlib import Path

    from ..data.io import same_files, write_client_file
    from ..evaluate import builtin_clients

    same_files(args.files)
    if len(set(map(str, args.files))) != len(args.files):
        raise InputError("each file may be named once")
    check_run_options(args)
    for f in args.files:
        p = Path(f)
        if p.exists() and not args.force:
            raise InputError(f"{f}: exists; give --force to overwrite it")
        if not p.parent.is_dir():
            raise InputError(f"{f}: folder {p.parent} does not exist")
    clients = builtin_clients(len(args.files), args.partition, samples=args.samples, auc=args.data_auc,
                              base_rate=args.base_rate, data_seed=args.data_seed)
    for f, c in zip(args.files, clients):
        try:
            write_client_file(f, c.scores, c.labels)
        except OSError as exc:
            raise InputError(f"{f}: cannot write ({exc.strerror or exc})") from None
        if not args.quiet:
            print(f"wrote {f}: {len(c):,} samples, {int(c.labels.sum()):,} positive")
    return 0


def cmd_keygen(args) -> int:
    from pathlib import Path

    from ..mpc.comm.roster import generate_identity, write_identity

    folder = Path(args.file).parent
    if not folder.exists():  # keys/server.pem: keys/ made for this user only
        try:
            folder.mkdir(mode=0o700, parents=True)
        except OSError as exc:
            raise InputError(f"cannot make the folder {folder} for {args.file}: {exc.strerror or exc}") from None
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
    if family(args.mechanism).needs_secure_sum:
        raise InputError(f"compare runs both protocols, and {args.mechanism} noise runs only in the MPC protocol; "
                         "choose " + ", ".join(f.name for f in families() if f.private and not f.needs_secure_sum))
    if not 0 <= args.seed < 2**63:
        raise InputError(f"--seed must be between 0 and 2^63 - 1, got {args.seed}")
    choice = mechanism_choice(args)
    mechanism = choice.mechanism()
    margs = choice.argv()
    check_writable_dir(args.out)  # before the sweep, not after it
    from ..mpc.forkserver import prestart

    prestart()
    with progress_bar(args, len(sizes) * len(parties), "compare") as bar:
        if progress_enabled(args):
            def progress(msg):
                bar.set_postfix_str(msg.split("] ", 1)[-1])
        elif args.quiet or args.json:
            def progress(msg):
                pass
        else:
            def progress(msg):
                print(msg, file=sys.stderr, flush=True)
        rows = compare(sizes, parties, mechanism, margs, seed=args.seed, provider=args.provider, sort=args.sort,
                       launcher=args.launcher, progress=progress, point_done=bar.update)
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


BROKEN_PIPE = 141  # the shell's status of a program ended by SIGPIPE (128 + 13), as `yes | head` gives


def _quiet_after_broken_pipe() -> int:
    """The reader of our output went away (``secure-auc ... | head``): no traceback, nothing
    more written (the interpreter's last flush would raise again), exit status 141."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError, AttributeError):  # a stream without a descriptor (captured)
            pass
    os.close(devnull)
    return BROKEN_PIPE


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit status (0 done, 1 an MPC run failed, 2 bad input,
    130, 143 or 129 stopped by SIGINT, SIGTERM or SIGHUP, 141 the reader of the output went away)."""
    as_usual()  # Ctrl-C: a KeyboardInterrupt from here on (it ended the process at once while it started)
    try:
        try:
            code = _main(argv)
        except SystemExit:  # --help, --version, a usage error: their text flushed here too
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # a broken pipe shows here, not in the interpreter's last flush
        if argv is None:  # the process's own command: it ends now (a stopped one too, every party stopped)
            _leave_at_once(code)
        return code
    except BrokenPipeError:
        return _quiet_after_broken_pipe()
    except KeyboardInterrupt as exc:  # before the command ran (its parser, its logging): the same one line
        code, name = stop_status(exc)
        print("secure-auc: interrupted" if name == "SIGINT" else f"secure-auc: stopped by {name}", file=sys.stderr)
        if argv is None:
            _leave_at_once(code)
        return code


_STOPPED = (129, 130, 143)  # SIGHUP, SIGINT, SIGTERM (stop_status): every party stopped, nothing waited for


def _leave_at_once(code: int) -> None:
    """End the process without the interpreter's finalisation, which takes 1-2 s with torch
    loaded (more on a busy machine), once every party is stopped and the result or the line
    printed; the command's other threads are waited for (unless it was stopped by a signal) and
    the ``atexit`` functions (temporary files, logging, multiprocessing's) run, as at the
    interpreter's own exit."""
    import atexit
    import threading

    if code not in _STOPPED:  # as the interpreter's own exit: the command's other threads end first
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _main(argv: list[str] | None) -> int:
    setup_logging()
    stop_on_signals(only_default=True)  # a scheduler's stop, a closed terminal: the same clean end as Ctrl-C
    parser = build_parser()
    args = parser.parse_args(argv)
    apply_verbosity(args)
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
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: every party already stopped
        code, name = stop_status(exc)
        print("secure-auc: interrupted" if name == "SIGINT" else f"secure-auc: stopped by {name}", file=sys.stderr)
        return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
