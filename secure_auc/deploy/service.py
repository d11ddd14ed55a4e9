r"""The deployed parties of the helpers layout, each a service that stays up across evaluations.

``secure-auc serve --config deploy.toml --role ROLE --key KEY.pem`` runs one of:

* the **server** (rank 0) and each **helper** (ranks 1..w-1): a computing party.
  They meet at ``server.rendezvous`` (CrypTen's world, as under torchrun, with
  the roll call naming a party that never starts), accept each client's
  authenticated link on their ``clients`` address, then evaluate whenever the
  platform's session (:class:`.session.DeployedSession`) asks the server;
* the **dealer** (rank w, with ``provider = "ttp"``);
* each **client** (an input party): it holds its labels and its own privacy
  ledger and connects to every computing party.

This module only builds, from the configuration, what the role runs on, and hands it
over: the party's configuration (:func:`service_plan`, a
:class:`secure_auc.mpc.roles.control.ServicePlan`: the roster, the addresses, the timeouts,
the options every party must agree on, the MPC parameters) and a client's own inputs
(:func:`.inputs.client_inputs`).  The services are :mod:`secure_auc.mpc.roles.deployed`'s —
:class:`~secure_auc.mpc.roles.server.ServerService`,
:func:`~secure_auc.mpc.roles.computing.helper_service`, the dealer,
:func:`~secure_auc.mpc.roles.host.client_service` — around the same per-evaluation roles a
local session runs (:class:`~secure_auc.mpc.roles.computing.ComputingRole`,
:class:`~secure_auc.mpc.roles.host.HostRole`).

A party that cannot start but can reach the others (a key the roster does not list, a
labels file it cannot read, a ledger over its budget) joins only to say why, so that
every party and the session name the reason at once.  A fault other than a client's
refusal ends the deployment: every service stops with one line naming the cause.
"""

from __future__ import annotations

import time

from ..mpc.roles.control import ServiceError, ServicePlan
from ..validation import InputError
from .config import DeployConfig, parse_role, reachable_config
from .inputs import ClientInputs, client_inputs

__all__ = ["ServiceError", "ClientInputs", "serve", "service_plan", "run_computing_service", "run_client_service",
           "refuse_at_start", "refuse_to_start", "join_setting", "process_seconds"]


def serve(config: DeployConfig, role: str, identity) -> int:
    """Run the service of ``role`` (``server``, ``helper-1``, ``dealer``, ``client-0``, ...)
    with this party's ``identity`` key until the deployment ends; returns 0 on an orderly
    shutdown (raises :class:`ServiceError` or :class:`InputError` otherwise)."""
    kind, index = parse_role(role, config.computing_parties, len(config.clients), config.dealer)
    if kind == "client":
        return run_client_service(config, index, identity)
    return run_computing_service(config, kind, index, identity)


def join_setting(config: DeployConfig) -> str:
    """The setting that bounds the start-up's waits, as the operator wrote it: ``deployment.join_timeout
    = 30 s`` in a file, ``--timeout = 30 s`` on the command line (:func:`.config.options_config`).

    Examples
    --------
    >>> from secure_auc.deploy.config import options_config
    >>> join_setting(options_config(computing_parties=2, clients=1, mechanism={"name": "none"},
    ...                             roster="roster.json", client_addresses=[("h", 1), ("h", 2)], timeout=30))
    '--timeout = 30 s'
    """
    name = "--timeout" if str(config.path) == "<command line>" else "deployment.join_timeout"
    return f"{name} = {config.join_timeout:g} s"


def process_seconds() -> float:
    """Seconds since this process started (Linux ``/proc``: its imports included), else 0.

    Examples
    --------
    >>> 0.0 <= process_seconds() < 365 * 86400
    True
    """
    import os

    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def service_plan(config: DeployConfig, rank: int, identity, who: str, rendezvous: tuple | None = None) -> ServicePlan:
    """Party ``rank``'s configuration of the deployment (-1 - k: client k), from ``config``; the
    roster checked to list ``identity`` for it (``who`` names it in the error).  ``rendezvous``
    replaces ``server.rendezvous`` (under torchrun: its ``MASTER_ADDR`` and ``MASTER_PORT``)."""
    from ..mpc.comm.channel import public_bytes

    agreed, setting, party, charged = config.agreed(), join_setting(config), config.party_config(), config.charged()
    roster = config.roster()
    if public_bytes(identity) != (roster.key(rank) if rank >= 0 else roster.clients[-1 - rank]):
        raise InputError(f"this key is not the one the roster {config.roster_path} lists for the {who}")
    return ServicePlan(computing=config.computing_parties, clients=len(config.clients), provider=config.provider,
                       rendezvous=rendezvous or config.rendezvous, roster=roster,
                       client_addresses=config.client_addresses, listen=config.listen,
                       session_address=config.session_address, timeout=config.timeout,
                       join_timeout=config.join_timeout, score_timeout=config.score_timeout, agreed=agreed,
                       join_setting=setting, party=party, charged=charged, threads=config.threads)


def run_computing_service(config: DeployConfig, kind: str, index: int, identity, *,
                          rendezvous: tuple[str, int] | None = None, epochs: int | None = None,
                          on_reply=None, select: tuple | None = None) -> int:
    """The server, a helper or the dealer (see the module docstring).

    ``rendezvous`` replaces ``server.rendezvous`` (under torchrun: its ``MASTER_ADDR`` and
    ``MASTER_PORT``).  With ``epochs`` = N the server asks for N evaluations itself
    (epochs 0..N-1), with no session, hands each reply to ``on_reply`` (as
    :func:`.session.evaluation_result` reads it), then shuts the deployment down; a refusal
    then ends it, naming the client and its reason.  ``select`` = (eps, release eps or None)
    with ``epochs``: then a selection among the N evaluations, its reply to ``on_reply``
    (:func:`.session.selection_result`)."""
    from ..mpc.roles.deployed import run_computing

    started = time.perf_counter() - process_seconds()  # the start-up is reported from the process's start
    rank = {"server": 0, "dealer": config.computing_parties}.get(kind, index)
    try:
        plan = service_plan(config, rank, identity, kind if kind != "helper" else f"helper {index}", rendezvous)
    except InputError as exc:  # it checks in at the roll-call only to say why: the others stop at once
        _refuse_roll_call(config, rank, identity, str(exc), rendezvous)
        raise
    return run_computing(plan, rank, identity, started=started, epochs=epochs, on_reply=on_reply, select=select)


def run_client_service(config: DeployConfig, k: int, identity, inputs: ClientInputs | None = None) -> int:
    """Client ``k``'s service (see the module docstring), with ``inputs`` (default: from its
    entry of the configuration, :func:`.inputs.client_inputs`; inputs it cannot read are told
    to the others at once)."""
    from ..mpc.roles.deployed import run_client

    plan = service_plan(config, -1 - k, identity, f"client {k}")
    return run_client(plan, k, identity, (lambda: inputs) if inputs is not None else lambda: client_inputs(config, k))


def refuse_at_start(config: DeployConfig, k: int, identity, reason: str) -> None:
    """Client ``k`` cannot take part (``reason``, a code of
    :data:`secure_auc.mpc.roles.control.REASONS`): it joins only to say why
    (:func:`secure_auc.mpc.roles.deployed.refuse`; best effort)."""
    from ..mpc.roles.deployed import refuse

    try:
        plan = service_plan(config, -1 - k, identity, f"client {k}")
    except InputError:  # nobody to tell: the others name this client after their wait
        return
    refuse(plan, k, identity, reason)


def refuse_to_start(path, role: str, identity, reason: str) -> None:
    """A party whose configuration file ``path`` fails its checks (``reason``) but whose layout and
    addresses can be read (:func:`.config.reachable_config`) joins only to say why, as a party
    that cannot start does: a computing party at the roll call (the reason), a client to the
    computing parties (the code ``"configuration"``; the detail stays here).  A file that does
    not parse tells nobody: the others name this party when ``join_timeout`` expires.  Best effort."""
    config = reachable_config(path)
    if config is None:
        return
    try:
        kind, index = parse_role(role, config.computing_parties, len(config.clients), config.dealer)
    except InputError:
        return
    if kind == "client":
        refuse_at_start(config, index, identity, "configuration")
    elif kind == "server":
        _refuse_as_the_server(config, identity, reason)
    else:
        _refuse_roll_call(config, {"server": 0, "dealer": config.computing_parties}.get(kind, index), identity, reason)


def _refuse_as_the_server(config: DeployConfig, identity, reason: str) -> None:
    """The server cannot start (``reason``): the other computing parties and the dealer hear it
    at the roll call and the clients from its client port, without the detail (its paths and
    errors stay in its own log, as a client's do), and a waiting session (the server's own
    operator) hears the reason itself; for the whole ``join_timeout``
    (:func:`secure_auc.mpc.roles.server.tell_who_waits`).  With another party's key it can tell
    only the roll call (the clients would not believe it).  Best effort."""
    import threading

    from ..mpc.roles.server import tell_who_waits

    roll_call = threading.Thread(target=_refuse_roll_call, args=(config, 0, identity, reason),
                                 name="secure-auc tell the roll call", daemon=True)
    roll_call.start()
    try:
        plan = service_plan(config, 0, identity, "server")
    except InputError:  # another party's key
        plan = None
    if plan is not None:
        tell_who_waits(plan, identity, "the server cannot start: its configuration file is not valid (the detail "
                       "is in its own log)", session=True, patient=True,
                       session_reason=f"the server cannot start: {reason}")
    roll_call.join()


def _refuse_roll_call(config: DeployConfig, rank: int, identity, reason: str, rendezvous=None) -> None:
    """Computing party (or dealer) ``rank`` checks in at the roll call only to say why it cannot
    start: the others stop at once, naming it.  It keeps trying for the whole ``join_timeout``
    (the others may be started that much later)."""
    from ..mpc.comm.runtime import refuse_roll_call

    host, port = rendezvous or config.rendezvous
    refuse_roll_call(rank, config.computing_parties + config.dealer, host, port + 1, reason, config.join_timeout,
                     identity=identity)  # the others may start as late as join_timeout after it
