"""A computing party of the helpers layout across evaluations, written once.

:class:`ComputingRole` is what a computing party (the server or a helper) does in each
evaluation and selection over its open links to the client hosts, whatever drives it:
the local session's hosts (:func:`session_computing_job`, a loop over the hosts' next
messages), or the deployed services: the server's (:class:`.server.ServerService`, a loop
over the platform's requests) and a helper's (:func:`helper_service`, a loop over the
server's broadcasts), whose clients join through :func:`accept_clients`.  Between
evaluations it keeps each one's rank statistic in shares (never opened) for a later
selection.  The steps themselves are :mod:`..input_parties`'.
"""

from __future__ import annotations

import logging
import time

from ..comm import backend
from ..input_parties import (CH_HELLO, compute_evaluation, join_hosts, party_keep, party_session_select)
from ..party import PartyConfig, PartyResult
from .control import CH_CONTROL, CH_JOIN, READY, ended, escape

log = logging.getLogger(__name__)

__all__ = ["ComputingRole", "READY", "session_computing_job", "accept_clients", "helper_service"]


class ComputingRole:
    """Computing party ``rank`` (``config.computing`` of them, CrypTen initialised) over its open
    ``links`` to the client hosts, by host; ``describe(r)`` names a computing party in errors.

    Attributes
    ----------
    kept : list
        Each evaluation's rank statistic, this party's share (never opened), in order.
    """

    def __init__(self, rank: int, config: PartyConfig, links: dict, describe):
        self.rank, self.config, self.links, self.describe = rank, config, links, describe
        self.kept: list = []

    def hellos(self) -> dict:
        """Every host's first message of the next evaluation or selection, by host."""
        return {h: self.links[h].recv_obj(CH_HELLO) for h in range(len(self.links))}

    def evaluate(self, hellos: dict | None = None) -> PartyResult:
        """One evaluation (:func:`..input_parties.compute_evaluation`; ``hellos``: the hosts' first
        messages, if already read), then its rank statistic kept in shares; this party's result
        (the estimates at the server; ``sizes``: each host's rows)."""
        hellos = self.hellos() if hellos is None else hellos
        backend.reset_communication_stats()
        result = compute_evaluation(self.rank, self.config, self.links, self.describe, self.rank == 0,
                                    time.perf_counter(), hellos)
        self.kept.append(party_keep(self.links, self.rank, self.config.computing))
        return result

    def select(self, hellos: dict | None = None):
        """A selection among the kept evaluations the hosts announced
        (:func:`..input_parties.party_session_select`, with a release under the configured mechanism)."""
        hellos = self.hellos() if hellos is None else hellos
        return party_session_select(self.rank, self.config.computing, self.links, hellos, self.kept, self.describe,
                                    self.config.mechanisms[0])


def _next_hellos(links, *, keep_dealer_alive: bool, interval: float) -> dict:
    """Wait, without a time limit, for every host's next message (a session between
    evaluations); the server pings the dealer every ``interval`` seconds meanwhile, so
    that the dealer's wait for requests never times out."""
    from ..primitives.dealer import ping_dealer

    out = {}
    for h in range(len(links)):
        while not links[h].readable(interval):
            if keep_dealer_alive:
                ping_dealer()
        out[h] = links[h].recv_obj(CH_HELLO)
    return out


def session_computing_job(rank: int, config: PartyConfig, endpoint, identity_raw: bytes, host_keys: list[bytes],
                          timeout: float, host_names: list[str], results) -> PartyResult:
    """A computing party of a :class:`..session.LocalSession`: accept the hosts' links, then
    evaluate (or select) each time the hosts send new inputs, until they say stop; ``results``
    (the launcher's queue) receives ``(rank, result)`` of each, and from the server
    :data:`READY` once every link is up."""
    from ..comm.roster import identity_from_bytes

    links, describe = join_hosts(rank, config, tuple(endpoint), identity_from_bytes(identity_raw), host_keys, timeout,
                                 host_names)
    role = ComputingRole(rank, config, links, describe)
    try:
        if rank == 0:
            results.put(READY)  # every link is up: the session's start-up ends here
        while True:
            hellos = _next_hellos(links, keep_dealer_alive=rank == 0, interval=max(1.0, timeout / 3))
            if any(hello.get("stop") for hello in hellos.values()):
                return PartyResult(rank=rank, role=describe(rank).split(" (")[0], seconds=0.0, bytes_sent=0,
                                   rounds=len(role.kept))
            if any("select" in hello for hello in hellos.values()):
                results.put((rank, role.select(hellos)))
                continue
            results.put((rank, role.evaluate(hellos)))
    finally:
        for link in links.values():
            link.close()


def accept_clients(plan, rank: int, identity, describe, listener=None) -> tuple[dict, dict]:
    """Computing party ``rank``'s links to every client of the deployment (:class:`.control.ServicePlan`
    ``plan``), each client's join message (its configuration, or its refusal), by client; the links'
    waits then bounded by the plan's ``timeout``.  A client that joined is told why, if this party
    cannot start (:func:`.control.next_message` reads it).  ``listener``: its listening socket, if
    open already (closed here)."""
    from ..comm.inlinks import accept_hosts, listen

    def tell_the_end(link, error: Exception) -> None:
        link.send_obj(CH_CONTROL, {"op": "end", "reason": str(error), "shutdown": False})

    listener = listener or listen(plan.listen[rank], plan.client_addresses[rank][1])
    try:
        links = accept_hosts(listener, rank, identity, list(plan.roster.clients), timeout=plan.join_timeout,
                             describe_me=describe(rank), describe_host=lambda h: f"client {h}",
                             farewell=tell_the_end, setting=plan.join_setting)
    finally:
        listener.close()
    joins = {h: links[h].recv_obj(CH_JOIN) for h in range(len(links))}
    for link in links.values():
        link.set_timeout(plan.timeout)
    return links, joins


def _last_word_of_the_server(seconds: float = 2.0):
    """The server's farewell on the computing world's links (:meth:`..comm.transport.Mesh.last_word`), or None."""
    from ..comm import secure

    mesh = secure.mesh()
    try:
        return None if mesh is None else mesh.last_word(0, seconds)
    except Exception:  # noqa: BLE001
        return None


def helper_service(plan, rank: int, identity, describe) -> int:
    """Helper ``rank``'s service of a deployment (CrypTen initialised): accept the clients, then
    evaluate or select each time the server says so (its broadcasts), until it ends the
    deployment; 0 on an orderly end (else a :class:`.control.ServiceError` with its reason)."""
    me = describe(rank).split(" (")[0]
    links, _ = accept_clients(plan, rank, identity, describe)
    role = ComputingRole(rank, plan.party, links, describe)  # keeps each evaluation's rank statistic for a selection
    try:
        while True:
            msg = backend.broadcast_obj(None, 0)
            op = msg.get("op")
            if op == "joined":
                log.info("[%s] every client joined; waiting for evaluations", me)
            elif op == "cancel":
                log.warning("[%s] %s", me, escape(msg["reason"]))
            elif op in ("evaluate", "select"):
                try:
                    role.evaluate() if op == "evaluate" else role.select()
                except Exception as exc:  # noqa: BLE001 - the server may have ended the deployment meanwhile
                    # (its last word read from its closed link, or waiting there while a client's closed first)
                    said = getattr(exc, "farewell", None) if getattr(exc, "farewell_from", None) == 0 else \
                        _last_word_of_the_server()
                    if not isinstance(said, dict) or said.get("op") != "end" or "reason" not in said:
                        raise
                    return ended(said, me, log)
            elif op == "end":
                return ended(msg, me, log)
    finally:
        for link in links.values():
            link.close()
