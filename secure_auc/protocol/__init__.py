"""Protocol roles (client, server) and the messages they exchange.

The roles know nothing about how messages travel: :mod:`secure_auc.transport`
connects them (in one process for the plain-sort protocol, CrypTen's
communicator for the MPC protocol).
"""

from .client import Client
from .messages import Aggregate, RanksMessage, ScoresMessage, StatisticsMessage
from .server import Server

__all__ = ["Client", "Server", "Aggregate", "RanksMessage", "ScoresMessage", "StatisticsMessage"]
