"""The plain-sort protocol's steps (paper, Algorithm 4), in one process, recording the
server's view.

Every message handed to the server goes through :class:`ServerInbox`, so a
test (or the comparison script's attack) can inspect exactly what the server
received, and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..dp.base import Estimate
from .client import Client
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


def run_plain(clients: list[Client], server: Server, inbox: ServerInbox | None = None) -> tuple[Estimate, Aggregate, ServerInbox]:
    inbox = inbox if inbox is not None else ServerInbox()
    # 1. clients -> server: shuffled scores
    scores = [inbox.deliver(c.scores_message()) for c in clients]
    # 2. server -> each client: the ranks of that client's scores only
    for client, ranks in zip(clients, server.rank(scores)):
        client.receive_ranks(ranks)
    # 3. clients -> server: noisy local statistics
    stats = [inbox.deliver(c.statistics_message()) for c in clients]
    # 4. server: aggregate and estimate
    aggregate = server.aggregate(stats)
    return server.estimate(aggregate), aggregate, inbox
