"""The plain-sort protocol's steps (paper, Algorithm 4), in one process, recording the
server's view.

Every message handed to the server goes through :class:`ServerInbox`, so a
test (or the comparison script's attack) can inspect exactly what the server
received, and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..dp.base import Estimate
from .client import ClientGroup
from .messages import Aggregate
from .server import Server

__all__ = ["ServerInbox", "run_plain"]


@dataclass
class ServerInbox:
    """Every message the server received, in order."""

    messages: list = field(default_factory=list)

    def deliver(self, message):
        self.messages.append(message)
        return message


def run_plain(clients: list[ClientGroup], server: Server, inbox: ServerInbox | None = None) -> tuple[Estimate, Aggregate, ServerInbox]:
    """One evaluation of the plain protocol.

    Parameters
    ----------
    clients : list of Client or ClientGroup
        The label parties, in client order (a group stands for its clients).
    server : Server
    inbox : ServerInbox, optional
        Records every message the server receives.

    Returns
    -------
    (Estimate, Aggregate, ServerInbox)
    """
    inbox = inbox if inbox is not None else ServerInbox()
    # 1. clients -> server: shuffled scores
    scores = [inbox.deliver(m) for group in clients for m in group.scores_messages()]
    # 2. server -> each client: the ranks of that client's scores only
    ranks = server.rank(scores)
    at = 0
    for group in clients:
        group.receive_rank_messages(ranks[at : at + group.clients])
        at += group.clients
    # 3. clients -> server: noisy local statistics
    stats = [inbox.deliver(m) for group in clients for m in group.statistics_messages()]
    # 4. server: aggregate and estimate
    aggregate = server.aggregate(stats)
    return server.estimate(aggregate), aggregate, inbox
