"""Entry point of one torchrun-launched party (``parties/mpc_party.py``).

    torchrun --nproc-per-node K+2 parties/mpc_party.py c0.csv ... c{K-1}.csv [options]

torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.  Rank 0 is the
server, rank k (1..K) is client k - 1 and reads only the k-th file, and with
the default ``--provider ttp`` the last rank (K + 1) is the dealer; with
``--provider tfp`` there is no dealer and torchrun starts K + 1 processes.
Only the server prints the report.  With ``--metrics`` (the same options on every party)
each client adds its report vector to the statistics it shares and the server derives the
curves, KS, ... from the opened sum (:func:`secure_auc.mpc.party.run_party`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from . import add_mechanism_options, add_party_options, mechanism_from_args, print_report, setup_logging
from .ledger import reserve_client_ledger
from .output import OneLineParser, end_when_busy, leave_on_stop, leave_process, stop_on_signals, stop_status
from .report import add_report_options, check_report_options, report_arguments, split_report, write_report_files
from ..data.io import read_client_csv
from ..dp.accountant import finishing
from ..dp.registry import flips_labels
from ..dp.rng import read_noise_key_file
from ..interrupts import as_usual
from ..validation import InputError, check_timeout

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="mpc_party.py",
        description="One party of the secure-auc MPC protocol, launched by torchrun "
        "(rank 0 = server, rank k = client k-1 reading the k-th file, last rank = dealer with --provider ttp).",
    )
    p.add_argument("files", nargs="+", metavar="CLIENT.csv",
                   help="one file per client, in client order; each client reads only its own "
                        "(on other machines the other paths need not exist)")
    add_mechanism_options(p)
    add_party_options(p)
    p.add_argument("--noise-key-file", metavar="PATH", default=None,
                   help="reproducible runs: a client reads its 128-bit noise key (32 hex digits) from PATH; "
                        "'{client}' in PATH is replaced by the client's index (keys/client{client}.key). "
                        "Only client ranks read it. Default: a fresh key from the OS's cryptographic source")
    p.add_argument("--roster", metavar="ROSTER.json", default=None,
                   help="the public identity key of every role (server, clients, dealer); every party checks "
                        "every peer against it before any data flows. Required when the parties are on "
                        "several hosts. Without it (one host only), keys are exchanged over the local "
                        "rendezvous, vouched for by this OS user's local link key: only this user's "
                        "processes can take a rank")
    p.add_argument("--identity", metavar="KEY.pem", default=None,
                   help="this party's identity key (secure-auc keygen KEY.pem), with --roster")
    p.add_argument("--ledger", metavar="PATH", default=None,
                   help="a client charges its own labels in its own privacy ledger before the run "
                        "('{client}' in PATH is replaced by the client's index); refused releases never start")
    p.add_argument("--budget", type=float, default=None, help="with --ledger: the client's total eps (set once)")
    p.add_argument("--budget-delta", type=float, default=None,
                   help="with --ledger and --budget: the client's total delta (default 0)")
    p.add_argument("--id-column", metavar="NAME", default=None,
                   help="with --ledger: the column of record identifiers; every release is charged to each record")
    p.add_argument("--seed", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="the server prints one JSON object")
    add_report_options(p)  # the same on every party (compared at start); only the server writes --csv/--plot
    return p


def main(argv: list[str] | None = None) -> int:
    """Run this rank (see the module docstring); ends the process itself."""
    return leave_on_stop(lambda: _main(argv), _stopped_line)


def _main(argv: list[str] | None) -> int:
    import time

    from ..deploy.service import process_seconds

    started = time.perf_counter() - process_seconds()  # the start-up from the process's start, imports included
    as_usual()  # Ctrl-C: a KeyboardInterrupt from here on (secure_auc.interrupts)
    setup_logging()
    stop_on_signals()  # torchrun stops the other ranks with SIGTERM: a clean exit
    end_when_busy(STOP_GRACE, _stopped_line)  # mid-computation too
    args = build_parser().parse_args(argv)
    try:
        check_timeout(args.timeout)
        return _run(args, started)
    except InputError as exc:
        leave_process(2, f"secure-auc party: error: {exc}")
    except KeyboardInterrupt as exc:  # Ctrl-C reaches every rank: one line, from the server only
        code, name = stop_status(exc)
        leave_process(code, _stopped_line(name))
    except Exception as exc:  # one line, naming this party; the others fail on their own timeout
        from ..mpc.comm.runtime import explain

        rank = os.environ.get("RANK", "?")
        leave_process(1, f"secure-auc party (rank {rank}): error: {explain(exc)}")


STOP_GRACE = 0.5  # seconds a stop signal waits for the main thread before a watcher ends the process


def _stopped_line(name: str) -> str | None:
    """The line of a rank stopped by signal ``name``: from the server only (Ctrl-C reaches every rank)."""
    if os.environ.get("RANK", "0") != "0":
        return None
    return f"secure-auc party: {'interrupted' if name == 'SIGINT' else 'stopped by ' + name}"


def _is_loopback(addr: str) -> bool:
    import ipaddress
    import socket

    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback
                   for info in socket.getaddrinfo(addr, None))
    except (OSError, ValueError):
        return False


def _identity_and_roster(args, rank: int, clients: int):
    """(identity key, roster) from --identity/--roster; without them, on one host only,
    keys exchanged over the local rendezvous (said on stderr)."""
    from ..mpc.comm.roster import Roster, read_identity

    if args.roster is None:
        if args.identity is not None:
            raise InputError("--identity needs --roster (the other parties' public keys)")
        if not _is_loopback(os.environ["MASTER_ADDR"]):
            raise InputError(f"--roster is required when the parties are on several hosts (MASTER_ADDR "
                             f"{os.environ['MASTER_ADDR']} is not this host's loopback): make a key per party "
                             "with secure-auc keygen and list their public keys in a roster")
        if rank == 0:
            print("secure-auc party: no --roster: single host; identity keys are exchanged over the local "
                  "rendezvous, vouched for by this user's local link key (~/.config/secure-auc/local-link.key): "
                  "only this user's processes can take a rank", file=sys.stderr)
        return None, "exchange"
    if args.identity is None:
        raise InputError("--roster needs --identity (this party's key, from secure-auc keygen)")
    roster = Roster.load(args.roster)
    expected = 1 + clients + (1 if args.provider == "ttp" else 0)
    if roster.ranks() != expected or (args.provider == "ttp") != (roster.dealer is not None):
        raise InputError(f"roster {args.roster} lists {len(roster.clients)} clients"
                         f"{' and a dealer' if roster.dealer is not None else ''}; this run has {clients} clients"
                         f"{' and a dealer (--provider ttp)' if args.provider == 'ttp' else ''}")
    return read_identity(args.identity), roster


@contextlib.contextmanager
def _marking_stops(labels_used: list):
    """A stop meanwhile says whether this client had used its labels (``started``): its ledger
    charges the run only then (:func:`secure_auc.dp.accountant.finishing`)."""
    try:
        yield
    except KeyboardInterrupt as exc:
        exc.started = bool(labels_used)
        raise


def _run(args, started: float) -> int:
    import time

    from ..result import make_result
    from ..mpc.party import PartyConfig, run_party
    from ..mpc.roles.world import WorldPlan, take_part

    if args.seed is not None:
        raise InputError("--seed is refused for MPC parties: every party would hold it and could recompute "
                         "every client's noise; give each client its own key with --noise-key-file")
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if key not in os.environ:
            raise InputError(f"environment variable {key} is not set: start this script with torchrun")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    k = len(args.files)
    expected = k + 1 + (1 if args.provider == "ttp" else 0)
    if world != expected:
        raise InputError(
            f"{k} client files with --provider {args.provider} need {expected} processes "
            f"(server + {k} clients" + (" + dealer" if args.provider == "ttp" else "") + f"), torchrun started {world}"
        )
    mechanism = mechanism_from_args(args, clients=len(args.files))
    check_report_options(args)
    if rank != 0:
        args.plot = args.csv = None  # only the server writes the report's files
    auc_mechanism, cost, plan = mechanism, mechanism, None
    spec, _ = report_arguments(args)
    if spec is not None and spec.groups != ("auc",):
        from ..report.release import plan_report, report_plan

        auc_mechanism, epsilons, kind, cost = plan_report(mechanism, spec)
        plan = report_plan(spec, epsilons, kind, mechanism, k)
    config = PartyConfig(mechanisms=(auc_mechanism,), clients=k, provider=args.provider, sort=args.sort, report=plan)
    data = read_client_csv(args.files[rank - 1], id_column=args.id_column) if 1 <= rank <= k else None
    noise_key = read_noise_key_file(args.noise_key_file, rank - 1) if 1 <= rank <= k else None
    identity, roster = _identity_and_roster(args, rank, k)
    ledger, reservation = reserve_client_ledger(args, cost, data, rank - 1, k, noise_key) if 1 <= rank <= k else (None, None)
    place = WorldPlan(rank=rank, parties=k + 1, address=os.environ["MASTER_ADDR"],
                      port=int(os.environ["MASTER_PORT"]), provider=args.provider, timeout=args.timeout,
                      identity=identity, roster=roster, roll_call=True,
                      threads=args.threads)
    joined: list = []  # when every party had met: the start-up ends, the evaluation starts
    labels_used: list = []  # a client's labels enter only its statistics, after the rank step
    # a failure before the parties met withdraws the reservation (nothing was computed), and so does
    # a stop (Ctrl-C, SIGTERM, SIGHUP) before this client used its labels (nothing of them was released)
    with finishing(ledger, reservation), _marking_stops(labels_used):
        result = take_part(place, lambda: run_party(rank, config, data, noise_key,
                                                    on_labels=lambda: labels_used.append(True)),
                           on_joined=lambda: joined.append(time.perf_counter()))
    if place.dealer:
        return 0
    start = joined[0]
    if rank != 0:
        return 0
    extra = {"startup_seconds": round(start - started, 3), "provider": args.provider, "sort": args.sort,
             "rank_step_seconds": round(result.rank_seconds, 3), "server_bytes_sent_received": result.bytes_sent,
             "server_rounds": result.rounds}
    if plan is not None:
        from ..report.release import attach_report

        extra |= attach_report(plan, result.report, result.aggregate.total, k, config.mechanisms[0])
    report = make_result(config.mechanisms[0], result.estimate, result.aggregate, [result.aggregate.total / k] * k,
                         protocol="mpc", seconds=time.perf_counter() - start, extra=extra)
    if plan is not None:  # the evaluation's eps and delta: the AUC's and the report's releases together
        total = mechanism.cost
        report.epsilon = None if total.epsilon == float("inf") else float(total.epsilon)
        report.delta = None if report.epsilon is None else float(total.delta)
        write_report_files(args, report.extra)
    tables = split_report(report) if plan is not None and not args.json else None
    print_report(report, f"{k} client files (torchrun)", args.json, flips=flips_labels(report.mechanism))
    if tables:
        from .report import print_report_tables

        print_report_tables(tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
