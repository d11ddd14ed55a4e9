"""A deployed party's service from its plan: how each role starts, and how it says it cannot.

The deployment's layer (:mod:`secure_auc.deploy.service`) builds a party's
:class:`.control.ServicePlan` from the configuration and hands it here with the party's
identity key (and a client's inputs):

* :func:`run_computing` — the server, a helper or the dealer: CrypTen's world
  (:func:`.world.take_part`, with the roll call that names a party that never starts), then
  :class:`.server.ServerService`, :func:`.computing.helper_service` or the dealer's service;
* :func:`run_client` — a client: its inputs read first, then :func:`.host.client_service`.

A party that cannot start but can reach the others joins only to say why (:func:`refuse`,
and :func:`secure_auc.mpc.comm.runtime.refuse_roll_call` for the computing parties), so that
every party and the session name the reason at once instead of waiting out ``join_timeout``.
"""

from __future__ import annotations

import logging

from ...validation import InputError
from .control import ServiceError

log = logging.getLogger(__name__)

__all__ = ["run_computing", "open_listeners", "run_client", "refuse"]


def run_computing(plan, rank: int, identity, *, started: float, epochs: int | None = None, on_reply=None,
                  select: tuple | None = None) -> int:
    """Computing party ``rank`` of the deployment ``plan`` (0 the server, 1.. the helpers,
    ``plan.computing`` the dealer) until the deployment ends; 0 on an orderly end.

    ``started``: ``time.perf_counter()`` at the process's start (the server reports its start-up
    from it).  With ``epochs`` = N the server asks for N evaluations itself, with no session, and
    hands each reply to ``on_reply``; ``select`` = (eps, release eps or None) then a selection
    among them (:class:`.server.ServerService`)."""
    # the server listens for its clients and the session from its start (before the imports of the computing
    # world), and answers them once the others have joined, or to say why they did not: a party that never
    # joins is named to them, not the server
    listeners = open_listeners(plan, session=epochs is None) if rank == 0 else None
    from ..comm.roster import describe_helpers_rank
    from ..comm.runtime import PartyStartError
    from ..party import agree_public
    from .world import WorldPlan, take_part

    w = plan.computing

    def describe(r):
        return describe_helpers_rank(r, w - 1)

    host, port = plan.rendezvous
    log.info("[%s] joining the deployment at %s:%d (%d computing parties%s, %d clients)",
             describe(rank).split(" (")[0], host, port, w, " and the dealer" if plan.dealer else "", plan.clients)
    # the start-up may take as long as join_timeout; every wait of the computing world is bounded by it
    # (the server keeps the others' waits alive between evaluations, every third of the timeout)
    place = WorldPlan(rank=rank, parties=w, address=host, port=port, provider=plan.provider,
                      timeout=plan.join_timeout + plan.timeout, identity=identity, roster=plan.roster,
                      roll_call=True, roll_call_timeout=plan.join_timeout, threads=plan.threads)

    def job():
        agree_public(plan.party, rank, describe)
        if rank == 0:
            from .server import ServerService

            return ServerService(plan, identity, describe, started, epochs, on_reply, select, listeners).run()
        from .computing import helper_service

        return helper_service(plan, rank, identity, describe)

    try:
        outcome = take_part(place, job, leave_on_error=True)
    except Exception as exc:  # noqa: BLE001 - the world never stood: the setting that expired, named
        if getattr(exc, "started", True):
            raise
        error = exc
        if isinstance(exc, PartyStartError):
            error = ServiceError(f"{exc}" + ("" if "cannot start" in str(exc) else f" ({plan.join_setting})"))
        if rank == 0:  # the clients (and a session) waiting for the server are told why, not left waiting
            from ..comm.runtime import explain
            from .server import tell_who_waits

            tell_who_waits(plan, identity, str(error) if isinstance(error, (ServiceError, InputError))
                           else explain(error), session=epochs is None, listeners=listeners)
        if error is exc:
            raise
        raise error from None
    finally:
        for sock in (listeners or {}).values():
            sock.close()
    if not place.dealer:
        return outcome
    if outcome is not None and not outcome[1]:
        raise ServiceError(f"the deployment ended: {outcome[0]}")
    log.info("[dealer] %s", outcome[0] if outcome is not None else "the server ended the deployment")
    return 0


def open_listeners(plan, *, session: bool) -> dict:
    """The server's listening sockets for its clients (``"clients"``) and, with ``session``, the
    session (``"session"``), open from its start: those who connect wait in them until the server
    answers, once the other computing parties have joined (:class:`.server.ServerService`), or to say why
    they did not (:func:`.server.tell_who_waits`).  An address it cannot listen on is left out (the
    service names it when it needs it, once the others have joined and can be told)."""
    from ..comm.inlinks import listen

    listeners = {}
    addresses = {"clients": (plan.listen[0], plan.client_addresses[0][1])}
    if session:
        addresses["session"] = plan.session_address
    for name, address in addresses.items():
        try:
            listeners[name] = listen(*address)
        except Exception as exc:  # noqa: BLE001 - named later, see above
            log.debug("[server] cannot listen on %s:%d yet: %s", *address, exc)
    return listeners


def run_client(plan, k: int, identity, read_inputs) -> int:
    """Client ``k`` of the deployment ``plan``: its inputs from ``read_inputs()`` (its labels,
    scoring hook and ledger, read now), then :func:`.host.client_service` until the deployment
    ends.  Inputs it cannot read (an :class:`~secure_auc.validation.InputError`) are refused at
    once (:func:`refuse`), then raised."""
    from .host import client_service

    try:
        inputs = read_inputs()
    except InputError as exc:  # its labels, its hook, its ledger: the others are told at once
        refuse(plan, k, identity, str(exc))
        raise
    return client_service(plan, k, identity, inputs)


def refuse(plan, k: int, identity, reason: str) -> None:
    """Client ``k`` cannot take part (``reason``: a code of :data:`.control.REASONS`; any other
    text counts as ``"inputs"`` and stays here): it joins only to say why, so that every party
    and the session name the reason within seconds instead of waiting out ``join_timeout``
    (best effort: computing parties that cannot be reached within ``join_timeout`` learn it from
    their own wait)."""
    from .host import client_service

    try:
        client_service(plan, k, identity, None, refusal=reason)
    except Exception as unreachable:  # noqa: BLE001 - the refusal stands anyway
        log.debug("[client %d] the refusal did not reach the computing parties: %s", k, unreachable)
