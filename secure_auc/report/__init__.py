"""The whole evaluation: DP ROC and PR curves, KS, lift, precision at k, log-loss, Brier score
and calibration from the same secure ranks, under one budget.

* :mod:`.spec`: what a report asks (metrics, bands, bins, the budget split, the tie rule);
* :mod:`.stats`: each client's report vector and its noise (per client, or shares of one
  noise on the aggregate);
* :mod:`.derive`: the server's metrics from the aggregate, post-processed into monotone
  curves inside [0, 1], with bootstrap error bars;
* :mod:`.release`: one report in the plain protocol and its composed privacy cost.
"""

from .spec import GROUPS, METRICS, ReportSpec, split_budget  # noqa: F401
from .stats import Layout, client_vectors, noise_vectors  # noqa: F401
from .derive import curves, derive  # noqa: F401

__all__ = ["GROUPS", "METRICS", "ReportSpec", "split_budget", "Layout", "client_vectors", "noise_vectors",
           "curves", "derive"]
