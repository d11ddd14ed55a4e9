"""Deployment of the helpers layout: the computing parties under torchrun, each client on its own.

Computing parties (one torchrun rank each: rank 0 the server, ranks 1..w-1 the
helpers, rank w the dealer with ``--provider ttp``)::

    torchrun --nnodes 1 --nproc-per-node 4 -m secure_auc.cli.compute --clients 2 \\
        --roster roster.json --identity-template keys/{role}.pem --client-port 29600

Computing party r accepts its clients' links on ``--listen``:(``--client-port`` + r).
Each client (its own process, on its own machine)::

    secure-auc client c0.csv --client 0 --clients 2 --parties HOST:29600 HOST:29601 HOST:29602 \\
        --roster roster.json --identity keys/client0.pem

The roster lists ``"server"``, ``"helpers"``, ``"dealer"`` and the clients' keys under
``"clients"`` (``secure-auc keygen`` makes each key).  Every party must be started with
the same mechanism options, ``--clients``, ``--provider`` and ``--sort``; a difference
is named.  Only the server prints the report.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import add_mechanism_options, mechanism_from_args, print_report, setup_logging
from ..mpc import RANK_METHODS, rank_method_help
from ..validation import InputError

__all__ = ["main", "add_client_parser", "cmd_client"]


def _common(p: argparse.ArgumentParser) -> None:
    add_mechanism_options(p)
    p.add_argument("--clients", type=int, required=True, help="the number of clients K")
    p.add_argument("--provider", choices=("ttp", "tfp"), default="ttp",
                   help="ttp: a separate dealer deals the correlated randomness (default); tfp: the server does "
                        "(single-operator testing only)")
    p.add_argument("--sort", choices=RANK_METHODS, default=RANK_METHODS[0], help=rank_method_help())
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for another party (default 60)")
    p.add_argument("--roster", metavar="ROSTER.json", required=True,
                   help="public keys of the server, the helpers, the dealer and the clients")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m secure_auc.cli.compute",
        description="One computing party of the helpers layout, launched by torchrun (rank 0 = server, "
                    "ranks 1..w-1 = helpers, last rank = dealer with --provider ttp).")
    _common(p)
    p.add_argument("--identity-template", metavar="PATH", required=True,
                   help="this party's identity key; '{role}' is replaced by server, helper1, helper2 or dealer")
    p.add_argument("--client-port", type=int, default=29600,
                   help="computing party r accepts the clients' links on this port + r (default 29600)")
    p.add_argument("--listen", default=None,
                   help="address to accept clients on (default: 127.0.0.1 when MASTER_ADDR is local, else 0.0.0.0)")
    p.add_argument("--json", action="store_true", help="the server prints one JSON object")
    return p


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    args = build_parser().parse_args(argv)
    try:
        return _run_computing(args)
    except InputError as exc:
        print(f"secure-auc compute: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("secure-auc compute: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line naming this party
        from ..mpc.comm.runtime import explain

        print(f"secure-auc compute (rank {os.environ.get('RANK', '?')}): error: {explain(exc)}", file=sys.stderr)
        return 1


def _roster(args, helpers: int):
    from ..mpc.comm.roster import Roster

    roster = Roster.load(args.roster)
    if roster.helpers is None or len(roster.helpers) != helpers:
        raise InputError(f"roster {args.roster}: the helpers layout with {helpers + 1} computing parties needs "
                         f"'helpers' with {helpers} key(s)")
    if len(roster.clients) != args.clients:
        raise InputError(f"roster {args.roster} lists {len(roster.clients)} clients; --clients is {args.clients}")
    if (roster.dealer is not None) != (args.provider == "ttp"):
        raise InputError(f"roster {args.roster}: a dealer key is needed with --provider ttp and only then")
    return roster


def _run_computing(args) -> int:
    import time

    from ..evaluate import EvaluationResult, describe
    from ..mpc.audit import forbid_crypten_randomness
    from ..mpc.comm.roster import describe_helpers_rank, read_identity
    from ..mpc.comm.runtime import init_party, shutdown_party
    from ..mpc.input_parties import run_computing_party
    from ..mpc.party import PartyConfig
    from ..mpc.primitives.dealer import run_dealer

    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if key not in os.environ:
            raise InputError(f"environment variable {key} is not set: start this module with torchrun")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    w = world - (1 if args.provider == "ttp" else 0)
    if w not in (2, 3):
        raise InputError(f"torchrun started {world} processes: the helpers layout has 2 or 3 computing parties"
                         f"{' plus the dealer' if args.provider == 'ttp' else ''}")
    if not 1 <= args.client_port <= 65535 - w:
        raise InputError(f"--client-port must leave room for {w} ports below 65536, got {args.client_port}")
    roster = _roster(args, w - 1)
    role = "server" if rank == 0 else ("dealer" if rank == w else f"helper{rank}")
    identity = read_identity(args.identity_template.replace("{role}", role))
    mechanism = mechanism_from_args(args, clients=args.clients)
    master = os.environ["MASTER_ADDR"]
    listen = args.listen or ("127.0.0.1" if master.startswith(("127.", "localhost")) else "0.0.0.0")
    init_party(rank=rank, parties=w, master_addr=master, master_port=int(os.environ["MASTER_PORT"]),
               provider=args.provider, timeout=args.timeout, identity=identity, roster=roster, roll_call=True)
    if rank == w:
        with forbid_crypten_randomness():
            run_dealer()
        return 0
    start = time.perf_counter()
    config = PartyConfig(mechanisms=(mechanism,), clients=args.clients, provider=args.provider, sort=args.sort,
                         computing=w)
    names = [f"client {h}" for h in range(args.clients)]
    with forbid_crypten_randomness():
        result = run_computing_party(rank, config, (listen, args.client_port + rank), identity, list(roster.clients),
                                     args.timeout, names)
    shutdown_party()
    if rank != 0:
        return 0
    est = result.estimate
    report = EvaluationResult(
        auc=float(est.auc), reference_auc=None, abs_error=None, raw_auc=float(est.raw_auc),
        estimated_positives=float(result.aggregate.positives), protocol="mpc", clients=args.clients,
        samples=result.aggregate.total, seconds=time.perf_counter() - start, seed=None,
        extra={"layout": "helpers", "computing_parties": w, "provider": args.provider, "sort": args.sort,
               "rank_step_seconds": round(result.rank_seconds, 3), "server_bytes": result.bytes_sent},
        **describe(mechanism),
    )
    print_report(report, f"{args.clients} clients, {describe_helpers_rank(0, w - 1)} of {w} computing parties", args.json)
    return 0


# --------------------------------------------------------------------------- the client command

def add_client_parser(sub) -> None:
    c = sub.add_parser(
        "client",
        help="one client of the helpers layout: connect to the computing parties, share, get its own ranks",
        description="Run one client (an input party) of an MPC evaluation whose computing parties run "
                    "'python -m secure_auc.cli.compute' under torchrun. The client reads only its own file, "
                    "sends only shares, and receives only the shares of its own ranks.")
    c.add_argument("file", metavar="CLIENT.csv", help="this client's scores and labels")
    c.add_argument("--client", type=int, required=True, help="this client's index (0..K-1), its place in the roster")
    _common(c)
    c.add_argument("--parties", nargs="+", required=True, metavar="HOST:PORT",
                   help="the computing parties' client addresses in rank order (server, helpers)")
    c.add_argument("--identity", metavar="KEY.pem", required=True, help="this client's identity key")
    c.add_argument("--noise-key-file", metavar="PATH", default=None,
                   help="reproducible runs: this client's 128-bit noise key (32 hex digits) from PATH "
                        "(default: a fresh key from the OS's cryptographic source)")
    c.set_defaults(handler=cmd_client)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InputError(f"--parties: expected HOST:PORT, got {text!r}")
    return host, int(port)


def cmd_client(args) -> int:
    import logging

    from ..data.io import read_client_csv
    from ..mpc.comm.roster import read_identity
    from ..mpc.input_parties import run_client_host
    from ..mpc.party import PartyConfig
    from .party import noise_key_from_file

    w = len(args.parties)
    if w not in (2, 3):
        raise InputError(f"--parties: the helpers layout has 2 or 3 computing parties, got {w}")
    if not 0 <= args.client < args.clients:
        raise InputError(f"--client must be in 0..{args.clients - 1}, got {args.client}")
    roster = _roster(args, w - 1)
    parties = [(*_address(a), roster.key(r)) for r, a in enumerate(args.parties)]
    identity = read_identity(args.identity)
    if identity.public_key().public_bytes_raw() != roster.clients[args.client]:
        raise InputError(f"{args.identity} is not the key the roster lists for client {args.client}")
    data = read_client_csv(args.file)
    key = noise_key_from_file(args.noise_key_file, args.client)
    mechanism = mechanism_from_args(args, clients=args.clients)
    config = PartyConfig(mechanisms=(mechanism,), clients=args.clients, provider=args.provider, sort=args.sort,
                         computing=w)
    try:
        out = run_client_host(args.client, [data], args.client, [key], config, parties, identity, args.timeout)
    except Exception as exc:  # noqa: BLE001 - one line naming the cause
        from ..mpc import MPCError
        from ..mpc.comm.runtime import explain

        raise MPCError(f"client {args.client}: {explain(exc)}") from None
    logging.getLogger("secure_auc").info("[client %d] done: %d samples shared, %s sent and received, %.1f s",
                                         args.client, len(data), f"{out['bytes']:,} bytes", out["seconds"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
