"""One registry of mechanism families, for the CLI, the deployment file, the accountant, the
simulator and the Python API.

Each family is declared once, in its own module, as a :class:`.family.Family` (its name,
options with defaults and ranges, how to build it; the mechanism it builds brings its noise,
variance and privacy event): :mod:`.families.none`, :mod:`.families.rr`,
:mod:`.families.laplace`, :mod:`.families.gaussian` and :mod:`.distributed`.  This module
collects them (:func:`register` adds one, e.g. in a test) and builds mechanisms by name.

One vocabulary.  A mechanism is named either by its family with options
(``make_mechanism("laplace", 1.0, allocation="split", sensitivity="global")``,
as ``secure-auc evaluate --mechanism`` takes it) or by the paper's method name,
which is a shorthand for a family with options (:data:`METHODS`:
``make_mechanism("global", 1.0)`` is the same GlobalLaplace).

Examples
--------
>>> from secure_auc.dp.registry import family, make_mechanism
>>> make_mechanism("global", 1.0) == make_mechanism("laplace", 1.0, allocation="split", sensitivity="global")
True
>>> make_mechanism("rr", 2.0).cost
PrivacyCost(epsilon=2.0, delta=0.0)
>>> [o.name for o in family("distributed").options if o.cli]
['epsilon', 'delta', 'honest_fraction', 'split']
"""

from __future__ import annotations

from collections.abc import Sequence

from ..validation import InputError
from .base import Mechanism
from .distributed import FAMILY as DISTRIBUTED
from .families.gaussian import FAMILY as GAUSSIAN
from .families.laplace import FAMILY as LAPLACE
from .families.none import FAMILY as NONE
from .families.rr import FAMILY as RR
from .family import Family

__all__ = ["FAMILIES", "METHODS", "DEFAULT_FAMILY", "DEFAULT_NOISE", "DEFAULT_METHODS", "SHARE_NOISES", "make_mechanism",
           "family", "families", "register", "unregister", "method_family", "method_takes", "noises",
           "noise_takes_delta", "paper_noise", "seeded_noise", "flips_labels"]

_REGISTERED: dict[str, Family] = {}


def register(declaration: Family, *, replace: bool = False) -> Family:
    """Add the family ``declaration`` (:class:`.family.Family`): the CLI, a deployment file's
    ``[mechanism]`` table, the accountant and :func:`make_mechanism` take it from then on.

    Raises
    ------
    ValueError
        If a family of that name exists (unless ``replace``) or it names a method of :data:`METHODS`.
    """
    if not replace and declaration.name in _REGISTERED:
        raise ValueError(f"a mechanism family {declaration.name!r} exists")
    if declaration.name in METHODS and METHODS[declaration.name][3] != declaration.name:
        raise ValueError(f"{declaration.name!r} is a method name")
    _REGISTERED[declaration.name] = declaration
    return declaration


def unregister(name: str) -> None:
    """Remove the family ``name`` (added by :func:`register`)."""
    _REGISTERED.pop(name, None)


def families() -> tuple[Family, ...]:
    """Every family, in registration order."""
    return tuple(_REGISTERED.values())


def family(name: str) -> Family:
    """The family ``name``.

    Raises
    ------
    InputError
        On an unknown name (the message lists the families).
    """
    if name not in _REGISTERED:
        raise InputError(f"mechanism must be one of {', '.join(_REGISTERED)}, got {name!r}")
    return _REGISTERED[name]


class _Names(Sequence):
    """The families' names, in registration order (a live view of the registry)."""

    def __getitem__(self, i):
        return tuple(_REGISTERED)[i]

    def __len__(self):
        return len(_REGISTERED)

    def __repr__(self):
        return repr(tuple(_REGISTERED))


FAMILIES = _Names()  # what ``--mechanism`` takes

# the paper's method names: (description, family options, needs a partition of the samples, family;
# None: the family of the noise asked for, the default one's unless told)
METHODS = {
    "rr": ("randomized response, debiased (FedAUC_RR)", {}, False, RR.name),
    "global": ("GlobalLaplace: sensitivity M-1, split alpha", {"allocation": "split", "sensitivity": "global"}, True,
               None),
    "local": ("LocalLaplace: client's max rank, split alpha", {"allocation": "split", "sensitivity": "local"}, True,
              None),
    "orthogonal": ("orthogonal decomposition, shared beta", {"allocation": "orthogonal"}, True, None),
    "adaptive": ("orthogonal decomposition, per-client adaptive beta", {"allocation": "adaptive"}, True, None),
    "distributed": ("noise on the aggregate in shares, centred statistic (this project; MPC only)", {}, True,
                    DISTRIBUTED.name),
}

DEFAULT_FAMILY = LAPLACE.name  # ``--mechanism``'s default, and :func:`secure_auc.evaluate`'s without one
DEFAULT_NOISE = LAPLACE.name  # the noise of the paper's methods when none is named
DEFAULT_METHODS = ("rr", "global", "local", "adaptive")  # what ``secure-auc simulate`` runs by default
SHARE_NOISES = ("skellam",)  # noise= values for the aggregate's shares only (analysis and simulation)

for _declared in (NONE, RR, LAPLACE, GAUSSIAN, DISTRIBUTED):  # each in its own module
    register(_declared)


def method_family(method: str, noise: str | None = None) -> Family:
    """The family behind the paper's method ``method`` (or a family's name) with the per-client noise
    ``noise`` (default: the default noise); an unknown noise is refused as the mechanism refuses it."""
    if method in _REGISTERED:
        return _REGISTERED[method]
    if method not in METHODS:
        raise InputError(f"mechanism must be one of {', '.join(tuple(_REGISTERED) + tuple(m for m in METHODS if m not in _REGISTERED))}; "
                         f"got {method!r}")
    if METHODS[method][3] is not None:
        return family(METHODS[method][3])
    match = [f for f in _REGISTERED.values() if f.noise is not None and f.noise == (noise or DEFAULT_NOISE)]
    if not match:
        from .noise import noise_kind

        noise_kind(noise)  # raises: the noises a statistics mechanism takes
    return match[0]


def noises() -> tuple[str, ...]:
    """What ``noise=`` takes (:func:`make_mechanism`, the simulator): each family's per-client noise,
    then :data:`SHARE_NOISES`."""
    return tuple(f.noise for f in _REGISTERED.values() if f.noise is not None) + SHARE_NOISES


def noise_takes_delta(noise: str) -> bool:
    """Whether the noise ``noise`` (of :func:`noises`) is (eps, delta)-DP (needs a delta)."""
    return noise in SHARE_NOISES or (noise in _REGISTERED and _REGISTERED[noise].takes("delta"))


def paper_noise(noise: str | None) -> bool:
    """Whether the paper's closed forms (and its exact-P variant) describe the noise ``noise``
    (None: the default noise)."""
    name = DEFAULT_NOISE if noise is None else noise
    return name in _REGISTERED and _REGISTERED[name].paper_closed_forms


def method_takes(method: str, option: str, noise: str | None = None) -> bool:
    """Whether the paper's method ``method`` (:data:`METHODS`) takes the option ``option`` (its
    family declares it and it applies with the method's own options)."""
    fam = method_family(method, noise if noise in _REGISTERED else None)
    opt = fam.option(option)
    return opt is not None and opt.applies(fam.resolve(METHODS[method][1] if method in METHODS else {}))


def seeded_noise(name: str) -> bool:
    """Whether the releases a ledger recorded under ``name`` drew noise from the seeded noise keys
    (a seed used for such noise is never used again).  ``X+report``: the family X with a report's
    noise, always seeded; an unknown name: no."""
    if name.endswith("+report"):
        return True
    return name in _REGISTERED and _REGISTERED[name].private and _REGISTERED[name].seeded_noise


def flips_labels(name: str) -> bool:
    """Whether the family ``name`` flips labels (randomized response: one seed's flips at one eps
    may be reused for free); an unknown name: no."""
    return name in _REGISTERED and _REGISTERED[name].flips_labels


def make_mechanism(
    mechanism: str,
    epsilon: float | None = None,
    *,
    noise: str | None = None,
    delta: float | None = None,
    allocation: str | None = None,
    sensitivity: str | None = None,
    alpha: float | None = None,
    beta: float | None = None,
    clients: int | None = None,
    honest_fraction: float | None = None,
    split: float | None = None,
    **options,
) -> Mechanism:
    """Build a mechanism by family or by the paper's method name.

    Parameters
    ----------
    mechanism : str
        A family of :data:`FAMILIES` (``none``, ``rr``, ``laplace``, ``gaussian``, ``distributed``,
        and any :func:`register` added) or a method of :data:`METHODS` (``global``, ``local``,
        ``orthogonal``, ``adaptive``).
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
        None: the family's declared default (``allocation`` ``adaptive``, as on the command
        line and in :func:`secure_auc.evaluate`; ``split`` with ``alpha`` is LocalLaplace).
    clients : int, optional
        K, required for ``distributed``.
    honest_fraction, split
        Options of ``distributed`` (:class:`.distributed.DistributedNoiseMechanism`).
    **options
        The options of a family added with :func:`register`.

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
    fam = method_family(mechanism, noise if mechanism not in _REGISTERED else None)
    if fam.private and epsilon is None:
        raise InputError(f"mechanism {mechanism!r} needs --epsilon")
    values = {"noise": noise, "allocation": allocation, "sensitivity": sensitivity, "alpha": alpha, "beta": beta,
              "honest_fraction": honest_fraction, "split": split} | options
    if mechanism not in _REGISTERED:
        values |= METHODS[mechanism][1]
    return fam.build(epsilon, delta=delta, clients=clients, **values)
