"""The computing parties of the helpers layout under torchrun: the deployment's services.

Each torchrun rank runs the service of :mod:`secure_auc.deploy.service` for its role
(rank 0 the server, ranks 1..w-1 the helpers, rank w the dealer with ``--provider
ttp``), meeting at torchrun's ``MASTER_ADDR``:``MASTER_PORT``; the clients run the
client service (``secure-auc client`` or ``secure-auc serve --role client-K``).  The
same code as ``secure-auc serve``, started by torchrun.

Configured by options (one evaluation per start by default)::

    torchrun --nnodes 1 --nproc-per-node 4 -m secure_auc.cli.compute --clients 2 \\
        --roster roster.json --identity-template keys/{role}.pem --client-port 29600

Computing party r accepts its clients' links on ``--listen``:(``--client-port`` + r).
Each client (its own process, on its own machine)::

    secure-auc client c0.csv --client 0 --clients 2 --parties HOST:29600 HOST:29601 HOST:29602 \\
        --roster roster.json --identity keys/client0.pem

Or by a deployment's configuration file (``--config deploy.toml``): without ``--epochs``
the server then waits for the platform's sessions (``MPCSession(deploy=...)``), as
``secure-auc serve --role server`` does; with ``--epochs N`` it asks for N evaluations
itself, and with ``--select-epsilon E`` (``--release-epsilon E2``) then selects the best of
them (:meth:`secure_auc.deploy.session.DeployedSession.select`).  Every party must be
configured alike (mechanism, ``--clients``, ``--provider``, ``--sort``); a difference is
named at connection time.  Only the server prints the report of each evaluation (and of the
selection).
"""

from __future__ import annotations

import argparse
import os
import sys

from . import add_helpers_options, mechanism_option_names, mechanism_options, print_report, setup_logging
from .report import add_report_options, print_report_tables, report_table, split_report
from .output import OneLineParser
from ..dp.registry import flips_labels
from ..interrupts import as_usual
from ..validation import InputError

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m secure_auc.cli.compute",
        description="One computing party of the helpers layout, launched by torchrun (rank 0 = server, "
                    "ranks 1..w-1 = helpers, last rank = dealer with --provider ttp): the deployment's service "
                    "for that role, configured by the options below or by --config.")
    add_helpers_options(p, required=False)
    add_report_options(p)
    p.add_argument("--config", metavar="DEPLOY.toml", default=None,
                   help="a deployment's configuration file instead of the options (its mechanism, layout, "
                        "addresses and timeouts; torchrun's MASTER_ADDR:MASTER_PORT is the rendezvous)")
    p.add_argument("--identity-template", metavar="PATH", required=True,
                   help="this party's identity key; '{role}' is replaced by server, helper1, helper2 or dealer")
    p.add_argument("--epochs", type=int, default=None, metavar="N",
                   help="the server asks for N evaluations (epochs 0..N-1), prints each, then ends the deployment "
                        "(default 1; with --config: none, the server waits for sessions)")
    p.add_argument("--select-epsilon", type=float, default=None, metavar="E",
                   help="with --epochs N: then select the best of the N evaluations (report-noisy-max at eps = E, "
                        "only the epoch released) and print it")
    p.add_argument("--release-epsilon", type=float, default=None, metavar="E2",
                   help="with --select-epsilon: also release the selected epoch's DP AUC at eps = E2")
    p.add_argument("--client-port", type=int, default=29600,
                   help="computing party r accepts the clients' links on this port + r (default 29600)")
    p.add_argument("--listen", default=None,
                   help="address to accept clients on (default: the interface GLOO_SOCKET_IFNAME names, else "
                        "127.0.0.1 when MASTER_ADDR is local, else this host's address towards MASTER_ADDR)")
    p.add_argument("--json", action="store_true", help="the server prints one JSON object per evaluation")
    return p


def listen_address(master: str) -> str:
    """The address computing parties accept clients on by default: the configured interface's
    (that of the mesh, :func:`..mpc.comm.transport.local_address`), never every interface."""
    from ..mpc.comm.transport import local_address

    return local_address(master)


def main(argv: list[str] | None = None) -> int:
    """Run this rank's service; ends the process itself (a CrypTen world cannot be torn down
    safely after a peer's failure), with 0, 1 (a party failed), 2 (bad input), or 130, 143, 129 (stopped
    by SIGINT, SIGTERM, SIGHUP)."""
    from .output import leave_on_stop

    return leave_on_stop(lambda: _main(argv), _stopped_line)


def _stopped_line(name: str) -> str:
    return f"secure-auc compute: {'interrupted' if name == 'SIGINT' else 'stopped by ' + name}"


def _main(argv: list[str] | None) -> int:
    import time

    from .output import end_when_busy, leave_process, stop_on_signals, stop_status

    started = time.perf_counter()
    as_usual()  # Ctrl-C: a KeyboardInterrupt from here on (secure_auc.interrupts)
    setup_logging()
    stop_on_signals()  # the server's SIGTERM ends the deployment in order; torchrun stops the others with it
    rank = os.environ.get("RANK", "?")
    # mid-computation too: the server's orderly end, when its main thread is free for it, comes first
    end_when_busy(1.5 if rank == "0" else 0.5, _stopped_line)
    args = build_parser().parse_args(argv)
    try:
        code = _run_computing(args, started)
    except InputError as exc:
        leave_process(2, f"secure-auc compute: error: {exc}")
    except KeyboardInterrupt as exc:
        code, name = stop_status(exc)
        leave_process(code, _stopped_line(name))
    except Exception as exc:  # noqa: BLE001 - one line naming this party and the cause
        from ..deploy.service import ServiceError
        from ..mpc.comm.runtime import explain

        leave_process(1, f"secure-auc compute (rank {rank}): error: "
                         f"{exc if isinstance(exc, ServiceError) else explain(exc)}")
    leave_process(code, None)
    return code  # pragma: no cover - leave_process does not return


_FILE_OPTIONS = ("clients", "roster", "mechanism", *mechanism_option_names(), "provider", "sort", "timeout",
                 "client_port", "listen", "metrics", "metric_split", "rank_bands", "top_fractions")


def _config(args, world: int, master: str):
    """The deployment: the file's, or the options' (computing party r listens on --client-port + r)."""
    from ..deploy.config import load_config, options_config

    if args.config is not None:
        defaults = build_parser()
        given = [n for n in _FILE_OPTIONS if getattr(args, n) != defaults.get_default(n)]
        if given:
            raise InputError(f"--{given[0].replace('_', '-')} does not apply with --config (the file configures "
                             "the deployment)")
        config = load_config(args.config)
    else:
        config = None
    dealer = config.dealer if config is not None else args.provider == "ttp"
    w = world - (1 if dealer else 0)
    if w not in (2, 3) or (config is not None and w != config.computing_parties):
        raise InputError(f"torchrun started {world} processes: the helpers layout has "
                         f"{config.computing_parties if config is not None else '2 or 3'} computing parties"
                         f"{' plus the dealer' if dealer else ''}")
    if config is not None:
        return config
    for name in ("clients", "roster"):
        if getattr(args, name) is None:
            raise InputError(f"--{name} is required (or --config)")
    if not 1 <= args.client_port <= 65535 - w:
        raise InputError(f"--client-port must leave room for {w} ports below 65536, got {args.client_port}")
    listen = args.listen or listen_address(master)
    return options_config(computing_parties=w, clients=args.clients, mechanism=mechanism_options(args, args.clients),
                          roster=args.roster, client_addresses=[(listen, args.client_port + r) for r in range(w)],
                          provider=args.provider, sort=args.sort, timeout=args.timeout, report=report_table(args),
                          threads=getattr(args, "threads", None))


def _run_computing(args, started: float) -> int:
    from ..deploy.service import run_computing_service
    from ..mpc.comm.roster import read_identity

    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if key not in os.environ:
            raise InputError(f"environment variable {key} is not set: start this module with torchrun")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    master = os.environ["MASTER_ADDR"]
    select = None
    if args.select_epsilon is not None or args.release_epsilon is not None:
        from ..result import check_epsilon

        if args.select_epsilon is None:
            raise InputError("--release-epsilon needs --select-epsilon")
        if args.epochs is None:
            raise InputError("--select-epsilon needs --epochs N (the evaluations to select among)")
        select = (check_epsilon(args.select_epsilon, "--select-epsilon"),
                  check_epsilon(args.release_epsilon, "--release-epsilon", allow_none=True))
    config = _config(args, world, master)
    folders = [f for f in (args.csv, args.plot) if f is not None]
    if folders and config.report() is None:
        raise InputError(f"--{'csv' if args.csv is not None else 'plot'} needs a report: --metrics, or a [report] "
                         "table in the configuration")
    if rank == 0:
        from .output import check_writable_dir

        for folder in folders:
            check_writable_dir(folder)
    w = config.computing_parties
    epochs = args.epochs if args.epochs is not None else (None if args.config else 1)
    if epochs is not None and epochs < 1:
        raise InputError(f"--epochs must be at least 1, got {epochs}")
    if select is not None and select[1] is not None:
        from ..dp.selection import release_mechanism

        release_mechanism(config.mechanism(), select[1])  # a private mechanism, before anything starts
    kind, index = ("server", 0) if rank == 0 else (("dealer", 0) if rank == w else ("helper", rank))
    role = {"server": "server", "dealer": "dealer"}.get(kind, f"helper{index}")
    identity = read_identity(args.identity_template.replace("{role}", role))
    source = f"{len(config.clients)} clients, server of {w} computing parties"

    def report(result):
        from ..result import SelectionResult
        from .select import print_selection

        if isinstance(result, SelectionResult):
            print_selection(result, args.json, indent=None)
            sys.stdout.flush()
            return
        from pathlib import Path

        from ..report.output import write_figures, write_tables

        epoch = f"epoch-{result.extra['epoch']}"  # one folder per evaluation
        if args.csv is not None:
            write_tables(result.extra, Path(args.csv) / epoch)
        if args.plot is not None:
            write_figures(result.extra, Path(args.plot) / epoch)
        # the report's entries as their own table after the AUC's (JSON: one object, as evaluate --json)
        tables = split_report(result) if config.report() is not None and not args.json else None
        print_report(result, source, args.json, flips=flips_labels(result.mechanism))
        if tables:
            print_report_tables(tables)
        sys.stdout.flush()

    def on_reply(reply):
        from ..deploy.session import reply_result

        report(reply_result(config, reply, select))

    return run_computing_service(config, kind, index, identity, rendezvous=(master, int(os.environ["MASTER_PORT"])),
                                 epochs=epochs, on_reply=on_reply, select=select)


if __name__ == "__main__":
    sys.exit(main())
