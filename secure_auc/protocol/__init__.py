"""Protocol roles (client, server) and the messages they exchange.

The roles know nothing about how messages travel: :mod:`.plain` runs the
plain-sort protocol's steps in one process; :mod:`secure_auc.mpc.party` runs the
same client role among CrypTen parties.
"""

from .client import Client
from .messages import Aggregate, RanksMessage, ScoresMessage, StatisticsMessage
from .server import Server

__all__ = ["Client", "Server", "Aggregate", "RanksMessage", "ScoresMessage", "StatisticsMessage"]
