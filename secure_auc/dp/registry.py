"""One registry of mechanisms, for the CLI, the simulator and the Python API.

One vocabulary.  A mechanism is named either by its family with options
(``make_mechanism("laplace", 1.0, allocation="split", sensitivity="global")``,
as ``secure-auc evaluate --mechanism`` takes it) or by the paper's method name,
which is a shorthand for a family with options (:data:`METHODS`:
``make_mechanism("global", 1.0)`` is the same GlobalLaplace).

Examples
--------
>>> from secure_auc.dp.registry import make_mechanism
>>> make_mechanism("global", 1.0) == make_mechanism("laplace", 1.0, allocation="split", sensitivity="global")
True
>>> make_mechanism("rr", 2.0).cost
PrivacyCost(epsilon=2.0, delta=0.0)
"""

from __future__ import annotations

from ..validation import InputError, check_epsilon
from .base import Mechanism
from .distributed import DistributedNoise
from .mechanisms import NoNoise, RandomizedResponse, StatisticsMechanism

__all__ = ["FAMILIES", "METHODS", "make_mechanism"]

FAMILIES = ("none", "rr", "laplace", "gaussian", "distributed")  # what ``--mechanism`` takes

# the paper's method names: (description, family options, needs a partition of the samples)
METHODS = {
    "rr": ("randomized response, debiased (FedAUC_RR)", {}, False),
    "global": ("GlobalLaplace: sensitivity M-1, split alpha", {"allocation": "split", "sensitivity": "global"}, True),
    "local": ("LocalLaplace: client's max rank, split alpha", {"allocation": "split", "sensitivity": "local"}, True),
    "orthogonal": ("orthogonal decomposition, shared beta", {"allocation": "orthogonal"}, True),
    "adaptive": ("orthogonal decomposition, per-client adaptive beta", {"allocation": "adaptive"}, True),
    "distributed": ("noise on the aggregate in shares, centred statistic (this project; MPC only)", {}, True),
}


def make_mechanism(
    mechanism: str,
    epsilon: float | None = None,
    *,
    noise: str | None = None,
    delta: float | None = None,
    allocation: str = "adaptive",
    sensitivity: str = "local",
    alpha: float = 0.5,
    beta: float = 0.5,
    clients: int | None = None,
    honest_fraction: float = 1.0,
    split: float | None = None,
) -> Mechanism:
    """Build a mechanism by family or by the paper's method name.

    Parameters
    ----------
    mechanism : str
        A family (``none``, ``rr``, ``laplace``, ``gaussian``, ``distributed``) or a
        method of :data:`METHODS` (``global``, ``local``, ``orthogonal``, ``adaptive``).
    epsilon : float, optional
        The budget of one evaluation; required except for ``none``.
    noise : str, optional
        For a paper method name: ``laplace`` (default) or ``gaussian`` noise.  For
        ``distributed``: ``laplace`` means discrete Laplace shares, also
        ``skellam`` and ``gaussian`` (the distributed discrete Gaussian); default:
        discrete Laplace, or the distributed discrete Gaussian when ``delta`` is
        given (exact shares; Skellam is for analysis and simulation only: a release
        refuses it).
    delta : float, optional
        For Gaussian noise, and for discrete Gaussian or Skellam shares with ``distributed``.
    allocation, sensitivity, alpha, beta
        Options of the Laplace/Gaussian family (:class:`.mechanisms.StatisticsMechanism`);
        ``allocation`` defaults to ``adaptive``, as on the command line and in
        :func:`secure_auc.evaluate` (``split`` with ``alpha`` is LocalLaplace).
    clients : int, optional
        K, required for ``distributed``.
    honest_fraction, split
        Options of ``distributed`` (:class:`.distributed.DistributedNoiseMechanism`).

    Returns
    -------
    Mechanism
        :class:`.mechanisms.NoNoise`, :class:`.mechanisms.RandomizedResponse`,
        :class:`.mechanisms.StatisticsMechanism` or
        :class:`.distributed.DistributedNoiseMechanism`.  Options of the other
        families are ignored (but ``delta`` with Laplace noise is refused).

    Raises
    ------
    InputError
        On an unknown name, a missing ``epsilon`` (or ``clients`` for
        ``distributed``) or an invalid parameter.

    Examples
    --------
    >>> make_mechanism("adaptive", 1.0).describe()["allocation"]
    'adaptive'
    >>> make_mechanism("local", 1.0, noise="gaussian", delta=1e-6).describe()
    {'mechanism': 'gaussian', 'epsilon': 1.0, 'delta': 1e-06, 'allocation': 'split', 'sensitivity': 'local'}
    >>> make_mechanism("laplace")
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: mechanism 'laplace' needs --epsilon
    >>> make_mechanism("exponential", 1.0)
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: mechanism must be one of none, rr, laplace, ..., adaptive; got 'exponential'
    """
    if mechanism == "none":
        return NoNoise()
    if mechanism not in FAMILIES and mechanism not in METHODS:
        raise InputError(f"mechanism must be one of {', '.join(FAMILIES + tuple(m for m in METHODS if m not in FAMILIES))}; "
                         f"got {mechanism!r}")
    if epsilon is None:
        raise InputError(f"mechanism {mechanism!r} needs --epsilon")
    if mechanism == "rr":
        return RandomizedResponse(epsilon=check_epsilon(epsilon))
    if mechanism == "distributed":
        if clients is None:
            raise InputError("distributed noise needs the number of clients")
        # pure eps: discrete Laplace shares; (eps, delta): exact discrete Gaussian shares
        if noise is None:
            family = "gaussian" if delta is not None else "discrete_laplace"
        else:
            family = {"laplace": "discrete_laplace"}.get(noise, noise)
        return DistributedNoise(epsilon, clients, noise=family, delta=delta, honest_fraction=honest_fraction,
                                split=split)
    if mechanism in METHODS:
        options = METHODS[mechanism][1]
        return StatisticsMechanism(epsilon, noise=noise or "laplace", delta=delta, alpha=alpha, beta=beta,
                                   **({"sensitivity": sensitivity} | options))
    return StatisticsMechanism(epsilon=epsilon, noise=mechanism, delta=delta, allocation=allocation,
                               sensitivity=sensitivity, alpha=alpha, beta=beta)
