"""``secure-auc serve`` (one party of a deployment, as a service) and ``secure-auc roster``."""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..deploy.config import DEPLOYMENT_DEFAULTS as _DEFAULTS
from ..validation import InputError
from .output import add_output_options, leave_process, stop_on_signals, stop_status

__all__ = ["add_parsers"]


def add_parsers(sub) -> None:
    s = sub.add_parser(
        "serve",
        help="run one party of a deployment (server, helper, dealer or client) as a service",
        description="Run one role of the deployment described by --config as a service that stays up across "
                    "evaluations: the server and the helpers compute, the dealer deals, each client holds its "
                    "labels and its ledger and scores every evaluation with its hook. The platform's "
                    "MPCSession.connect(config, key=...) asks the server for evaluations. A fault ends every "
                    "service with one line naming the party. The waits are set in the file's [deployment] "
                    f"table: join_timeout (default {_DEFAULTS['join_timeout']:g} s), how long the services wait "
                    f"for each other at start-up; timeout (default {_DEFAULTS['timeout']:g} s), how long a party "
                    f"waits for another during an evaluation; score_timeout (default {_DEFAULTS['score_timeout']:g} "
                    "s), how long a client's scoring hook may take.")
    s.add_argument("--config", required=True, metavar="DEPLOY.toml", help="the deployment's configuration file")
    s.add_argument("--role", required=True,
                   help="server, helper-1, helper-2, dealer, or client-K (K = 0..clients-1)")
    s.add_argument("--key", required=True, metavar="KEY.pem", help="this party's identity key (secure-auc keygen)")
    from .. import __version__

    s.add_argument("--version", action="version", version=f"secure-auc {__version__}")
    add_output_options(s)
    s.set_defaults(handler=cmd_serve)

    r = sub.add_parser(
        "roster",
        help="write the roster of public keys that every party of a deployment checks its peers against",
        description="Write ROSTER.json from the parties' public keys. Each KEY is the 64 hex digits that "
                    "secure-auc keygen printed, a file holding them, or an identity key file (its public "
                    "half is taken).")
    r.add_argument("out", metavar="ROSTER.json", help="where to write the roster (never overwritten without --force)")
    r.add_argument("--server", required=True, metavar="KEY", help="the server (the platform's computing party)")
    r.add_argument("--helpers", nargs="*", default=[], metavar="KEY", help="helper 1, helper 2 (helpers layout)")
    r.add_argument("--dealer", default=None, metavar="KEY", help="the dealer (provider ttp)")
    r.add_argument("--clients", nargs="+", required=True, metavar="KEY", help="client 0, client 1, ... in order")
    r.add_argument("--force", action="store_true", help="overwrite an existing roster")
    add_output_options(r)
    r.set_defaults(handler=cmd_roster)


def _public_key(text: str, role: str) -> bytes:
    """A public key given as hex, a file of hex, or an identity key file."""
    value = text.strip()
    if len(value) == 64:
        try:
            return bytes.fromhex(value)
        except ValueError:
            pass
    path = Path(text)
    if not path.is_file():
        raise InputError(f"{role}: {text!r} is neither 64 hex digits nor a key file")
    raw = path.read_bytes()
    if b"PRIVATE KEY" in raw:
        from ..mpc.comm.channel import public_bytes
        from ..mpc.comm.roster import read_identity

        return public_bytes(read_identity(path))
    try:
        key = bytes.fromhex(raw.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != 32:
        raise InputError(f"{role}: {path} does not hold a public key (64 hex digits)")
    return key


def cmd_roster(args) -> int:
    from ..mpc.comm.roster import Roster, distinct_keys

    if len(args.helpers) > 2:
        raise InputError(f"--helpers: at most 2 helpers (3 computing parties), got {len(args.helpers)}")
    roster = Roster(_public_key(args.server, "--server"),
                    tuple(_public_key(c, f"--clients[{i}]") for i, c in enumerate(args.clients)),
                    _public_key(args.dealer, "--dealer") if args.dealer else None,
                    tuple(_public_key(h, f"--helpers[{i}]") for i, h in enumerate(args.helpers)) or None)
    distinct_keys(roster.server, roster.clients, roster.helpers, roster.dealer)
    out = Path(args.out)
    if out.exists() and not args.force:
        raise InputError(f"{out} exists; give --force to overwrite it")
    try:
        out.write_text(roster.to_json() + "\n", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror or exc}") from None
    if not args.quiet:
        print(f"wrote {out}: server, {len(roster.helpers or ())} helper(s), "
              f"{'a dealer, ' if roster.dealer else ''}{len(roster.clients)} client(s)")
    return 0


def cmd_serve(args) -> int:
    """Run the service; ends the process itself (a CrypTen world cannot be torn down safely
    after a peer's failure: no interpreter shutdown, as for the torchrun parties)."""
    from ..deploy.config import load_config
    from ..deploy.service import serve
    from ..mpc.comm.roster import read_identity

    import os

    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # torch's C++ warnings (a peer's host name, ...)
    role = args.role
    try:
        config = load_config(args.config)
    except InputError as exc:  # the others are told why, when the file's addresses can be read
        from ..deploy.service import refuse_to_start

        with contextlib.suppress(InputError):  # a key it cannot read: nobody to tell
            refuse_to_start(args.config, role, read_identity(args.key), str(exc))
        leave_process(2, f"secure-auc serve ({role}): error: {exc}")
    try:
        identity = read_identity(args.key)
    except InputError as exc:
        leave_process(2, f"secure-auc serve ({role}): error: {exc}")
    stop_on_signals()
    try:
        code = serve(config, role, identity)
    except InputError as exc:
        leave_process(2, f"secure-auc serve ({role}): error: {exc}")
    except KeyboardInterrupt as exc:  # the server's SIGTERM is the deployment's orderly end: status 0
        code, name = stop_status(exc)
        ends = role == "server"
        leave_process(0 if ends and name == "SIGTERM" else code,
                      f"secure-auc serve ({role}): stopped by {name}" + ("; every service was told to end" if ends
                                                                        else ""))
    except Exception as exc:  # noqa: BLE001 - one line naming the cause
        from ..deploy.service import ServiceError
        from ..mpc.comm.runtime import explain

        leave_process(1, f"secure-auc serve ({role}): error: {exc if isinstance(exc, ServiceError) else explain(exc)}")
    leave_process(code, None)
    return code  # pragma: no cover - _leave does not return


