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

from . import add_helpers_options, mechanism_from_args, print_report, setup_logging
from ..validation import InputError

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m secure_auc.cli.compute",
        description="One computing party of the helpers layout, launched by torchrun (rank 0 = server, "
                    "ranks 1..w-1 = helpers, last rank = dealer with --provider ttp).")
    add_helpers_options(p)
    p.add_argument("--identity-template", metavar="PATH", required=True,
                   help="this party's identity key; '{role}' is replaced by server, helper1, helper2 or dealer")
    p.add_argument("--client-port", type=int, default=29600,
                   help="computing party r accepts the clients' links on this port + r (default 29600)")
    p.add_argument("--listen", default=None,
                   help="address to accept clients on (default: the interface GLOO_SOCKET_IFNAME names, else "
                        "127.0.0.1 when MASTER_ADDR is local, else this host's address towards MASTER_ADDR)")
    p.add_argument("--json", action="store_true", help="the server prints one JSON object")
    return p


def listen_address(master: str) -> str:
    """The address computing parties accept clients on by default: the configured interface's
    (that of the mesh, :func:`..mpc.comm.transport.local_address`), never every interface."""
    from ..mpc.comm.transport import local_address

    return local_address(master)


def main(argv: list[str] | None = None) -> int:
    import time

    started = time.perf_counter()
    setup_logging()
    args = build_parser().parse_args(argv)
    try:
        return _run_computing(args, started)
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


def _run_computing(args, started: float) -> int:
    import time

    from ..result import make_result
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
    from ..mpc.comm.roster import Roster

    roster = Roster.load_helpers(args.roster, helpers=w - 1, clients=args.clients, dealer=args.provider == "ttp")
    role = "server" if rank == 0 else ("dealer" if rank == w else f"helper{rank}")
    identity = read_identity(args.identity_template.replace("{role}", role))
    mechanism = mechanism_from_args(args, clients=args.clients)
    master = os.environ["MASTER_ADDR"]
    listen = args.listen or listen_address(master)
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
    report = make_result(mechanism, result.estimate, result.aggregate, result.sizes, protocol="mpc",
                         seconds=time.perf_counter() - start,
                         extra={"startup_seconds": round(start - started, 3), "layout": "helpers",
                                "computing_parties": w, "provider": args.provider, "sort": args.sort,
                                "rank_step_seconds": round(result.rank_seconds, 3),
                                "server_bytes": result.bytes_sent})
    print_report(report, f"{args.clients} clients, {describe_helpers_rank(0, w - 1)} of {w} computing parties", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
