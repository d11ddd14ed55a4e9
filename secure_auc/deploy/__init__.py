"""Deployed parties: each role as a long-lived service, one configuration file.

* :mod:`.config` — the deployment configuration (TOML): roster, addresses,
  layout, mechanism, timeouts, and each client's labels, scoring hook and ledger.
* :mod:`.service` — the services of the computing parties (server, helpers), the
  dealer and the clients, which stay up across evaluations: each role's plan built from
  the file and handed to :mod:`secure_auc.mpc.roles`.
* :mod:`.inputs` — a client's own inputs on its host: labels, scoring hook, ledger.
* :mod:`.session` — :class:`.session.DeployedSession`, the platform's end
  (:meth:`secure_auc.session.MPCSession.connect`): it asks the server
  service for evaluations and holds no client's labels or scores.
"""

from .config import DeployConfig, load_config

__all__ = ["DeployConfig", "load_config"]
