"""secure-auc: label-differentially-private AUC for vertical federated learning.

Where things live:

* :mod:`secure_auc.metrics` — exact AUC from mid-ranks (``rank_auc``).
* :mod:`secure_auc.data` — built-in Criteo-like data, partitions, client files.
* :mod:`secure_auc.dp` — DP mechanisms (randomized response, Laplace, Gaussian),
  noise, closed-form variances, randomness.
* :mod:`secure_auc.protocol` — client and server roles and their messages.
* :mod:`secure_auc.transport` — how the roles' messages travel (plain, in-process).
* :mod:`secure_auc.mpc` — the CrypTen protocol (secret-shared ranks).
* :mod:`secure_auc.evaluate` — one evaluation end to end; :mod:`secure_auc.cli`.
"""

from .metrics import auc_from_sums, midranks, rank_auc
from .validation import InputError

__version__ = "0.1.0"
__all__ = ["rank_auc", "midranks", "auc_from_sums", "InputError", "__version__"]
