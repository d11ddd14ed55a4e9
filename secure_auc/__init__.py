"""secure-auc: label-differentially-private AUC for vertical federated learning.

Where things live:

* :mod:`secure_auc.metrics` — exact AUC from mid-ranks (``rank_auc``).
* :mod:`secure_auc.validation` — input checks at the library boundary and
  :class:`InputError`.
* :mod:`secure_auc.local_stats` — what a client computes from its ranks and labels.
* :mod:`secure_auc.data` — built-in Criteo-like data (``synthetic``), partitions
  over clients (``partition``), client files (``io``).
* :mod:`secure_auc.dp` — label differential privacy:

  - ``base`` — the mechanism contract (:class:`Mechanism`, :class:`PrivacyCost`);
  - ``registry`` — mechanisms by name (:func:`make_mechanism`);
  - ``mechanisms`` — none, randomized response, Laplace/Gaussian on the statistics;
  - ``distributed`` — noise on the aggregate, in shares (MPC protocol only);
  - ``noise``, ``randomized_response`` — the noise primitives and RR's debiasing;
  - ``variance`` — closed-form variances of the estimates;
  - ``accountant`` — the privacy ledger across evaluations (:class:`Ledger`);
  - ``rng`` — the clients' noise keys and AES-CTR streams.

* :mod:`secure_auc.protocol` — the client and server roles (``client``,
  ``server``), their ``messages``, and ``plain`` (the plain-sort protocol's steps).
* :mod:`secure_auc.mpc` — the secret-shared protocol over CrypTen, imported only
  when used: ``comm/`` (how parties talk), ``primitives/``, ``sort/``,
  ``encoding``, ``ranks``, ``party``, ``launch``, ``audit``.
* :mod:`secure_auc.deploy` — every party as a long-lived service from one
  configuration file (``secure-auc serve``), and the session that connects to them.
* :mod:`secure_auc.simulation` — vectorised simulation of the mechanisms.
* :mod:`secure_auc.evaluate` — one evaluation end to end (:func:`evaluate`) and the
  result every path returns (:class:`EvaluationResult`).
* :mod:`secure_auc.selection` — the best of T candidates for the privacy cost of one
  release (:func:`select`: report-noisy-max in MPC, or repeat-and-select).
* :mod:`secure_auc.training` — the same in a training loop: a metric object
  (:class:`FederatedAUC`: update / compute / reset) and :func:`dp_roc_auc_score`
  (scikit-learn's argument order, a client grouping), locally or on a session.
* :mod:`secure_auc.experiments` — the protocol comparison, the label-guessing
  attack, the paper's published tables.
* :mod:`secure_auc.cli` — the command line, the only place that parses argv or
  prints; ``cli/party.py`` is the torchrun entry of one MPC party.

``import secure_auc`` loads neither torch nor CrypTen.

Examples
--------
>>> import numpy as np
>>> import secure_auc
>>> clients = [secure_auc.ClientData(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])),
...            secure_auc.ClientData(np.array([0.4, 0.4, 0.9, 0.2]), np.array([0, 1, 1, 0]))]
>>> secure_auc.evaluate(clients, secure_auc.make_mechanism("none"), protocol="plain").auc
0.8125
"""

from .interrupts import while_starting as _while_starting

_while_starting()  # a command's process only: Ctrl-C during the imports ends it in one line (interrupts.py)

from .data.io import ClientData, read_client_csv  # noqa: E402
from .dp.accountant import Ledger
from .dp.base import Mechanism, PrivacyCost
from .dp.distributed import DistributedNoise
from .dp.mechanisms import NoNoise, RandomizedResponse, StatisticsMechanism
from .dp.registry import FAMILIES, METHODS, make_mechanism
from .evaluate import EvaluationResult, builtin_clients, evaluate, load_clients
from .metrics import auc_from_sums, midranks, rank_auc
from .selection import CandidateScores, SelectionResult, load_candidates, select
from .training import FederatedAUC, dp_roc_auc_score
from .mpc import MPCError
from .validation import InputError

__version__ = "0.1.0"
__all__ = [
    "evaluate",
    "EvaluationResult",
    "select",
    "SelectionResult",
    "CandidateScores",
    "load_candidates",
    "dp_roc_auc_score",
    "FederatedAUC",
    "load_clients",
    "read_client_csv",
    "ClientData",
    "builtin_clients",
    "make_mechanism",
    "METHODS",
    "FAMILIES",
    "Mechanism",
    "NoNoise",
    "RandomizedResponse",
    "StatisticsMechanism",
    "DistributedNoise",
    "PrivacyCost",
    "Ledger",
    "rank_auc",
    "midranks",
    "auc_from_sums",
    "InputError",
    "MPCError",
    "__version__",
]
