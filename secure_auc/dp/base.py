"""The contract every label-DP mechanism meets, and what it produces.

A mechanism is one privacy event per evaluation (in the style of Google's
dp-accounting: the mechanism says what it spends, an accountant composes):

* :attr:`Mechanism.cost` — the (eps, delta)-label-DP spent by one evaluation;
* :meth:`Mechanism.privacy_event` — the privacy event of one evaluation that
  the accountants compose (:mod:`.events`);
* :meth:`Mechanism.prepare_labels` — what the client does to its labels before
  anything leaves it (randomized response flips them; others keep them);
* :meth:`Mechanism.privatize` — the client's noisy (localSum'_k, localP'_k)
  from its exact statistics (vectorised over clients and repetitions);
* :meth:`Mechanism.estimate` — the server's estimator on the aggregated sums:
  eq. (1) of the paper, AUC = (globalSum - P (P - 1) / 2) / (P N), debiased
  where the mechanism needs it;
* :attr:`Mechanism.needs_secure_sum` — True when the noise protects only the
  aggregate (it must be summed in shares: MPC protocol only);
* :meth:`Mechanism.describe` — the parameters a report shows.

Concrete mechanisms: :mod:`.mechanisms` (none, RR, Laplace/Gaussian with every
allocation of the paper) and :mod:`.distributed` (noise on the aggregate);
:mod:`.registry` builds them by name.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np

from ..local_stats import LocalStatistics
from ..metrics import auc_from_sums
from ..validation import InputError

__all__ = ["PrivacyCost", "NoisyStatistics", "Estimate", "Mechanism", "estimate_auc"]


@dataclass(frozen=True)
class PrivacyCost:
    """(eps, delta)-label-DP spent by one evaluation.

    Parameters
    ----------
    epsilon : float
        eps; ``inf`` for the non-private computation.
    delta : float, default 0.0
        delta; 0 for pure eps-DP (randomized response, Laplace, discrete Laplace).

    Examples
    --------
    >>> from secure_auc import make_mechanism
    >>> make_mechanism("gaussian", 1.0, delta=1e-6).cost
    PrivacyCost(epsilon=1.0, delta=1e-06)
    >>> make_mechanism("none").cost
    PrivacyCost(epsilon=inf, delta=0.0)
    """

    epsilon: float
    delta: float = 0.0


@dataclass(frozen=True)
class NoisyStatistics:
    """What a client releases: localSum'_k, localP'_k and its public size n_k."""

    local_sum: np.ndarray
    local_p: np.ndarray
    n: np.ndarray


@dataclass(frozen=True)
class Estimate:
    """The server's estimate from the aggregated sums (arrays: one per repetition)."""

    auc: np.ndarray  # the estimate reported (debiased for RR)
    raw_auc: np.ndarray  # eq. (1) on the aggregated statistics (the "noisy AUC" for RR)
    global_sum: np.ndarray
    positives: np.ndarray


class Mechanism(abc.ABC):
    """A label-DP mechanism of the evaluation (see the module docstring).

    Subclasses implement :attr:`cost` and :meth:`privatize`; the defaults of
    :meth:`prepare_labels` (labels unchanged) and :meth:`estimate` (eq. (1), no
    debiasing) suit a mechanism that only adds noise, and :meth:`describe`
    reports only the name.

    Attributes
    ----------
    name : str
        The mechanism's family as a report shows it.
    needs_secure_sum : bool
        True when each client's release is not private on its own and only the
        sum over all clients may be opened (MPC protocol only).

    Examples
    --------
    One client holding all eight samples walks through the contract with the
    exact mechanism; the estimate is the exact AUC:

    >>> import numpy as np
    >>> from secure_auc import Mechanism, make_mechanism, midranks
    >>> from secure_auc.dp.rng import make_rng
    >>> from secure_auc.local_stats import LocalStatistics
    >>> scores = np.array([0.1, 0.4, 0.35, 0.8, 0.4, 0.4, 0.9, 0.2])
    >>> labels = np.array([0, 0, 1, 1, 0, 1, 1, 0])
    >>> mech = make_mechanism("none")
    >>> isinstance(mech, Mechanism), mech.needs_secure_sum
    (True, False)
    >>> stats = LocalStatistics.from_client(midranks(scores), mech.prepare_labels(labels, make_rng(0)))
    >>> released = mech.privatize(stats, make_rng(0), total=8)
    >>> released.local_sum, released.local_p
    (array([19.]), array([4.]))
    >>> float(mech.estimate(released.local_sum.sum(), released.local_p.sum(), total=8).auc)
    0.8125

    Laplace noise is centred: over many repetitions the released counts
    average to the true count P = 4.

    >>> noisy = make_mechanism("laplace", 1.0).privatize(stats, make_rng(0), reps=10_000, total=8)
    >>> noisy.local_p.shape, bool(abs(noisy.local_p.mean() - 4) < 0.5)
    ((10000, 1), True)
    """

    name: str = ""
    needs_secure_sum: bool = False

    def check_release(self) -> None:
        """Raise :class:`~secure_auc.validation.InputError` if this mechanism's noise cannot be
        drawn exactly in a release (every release's noise is integer-exact)."""

    def for_clients(self, clients: int) -> "Mechanism":
        """This mechanism as it runs with ``clients`` clients taking part.

        Every path that runs an evaluation (:func:`secure_auc.evaluate`, the MPC
        party configuration) passes the number of clients present through this
        before anything is charged or released.  A mechanism calibrated on a
        number of clients returns itself for that number, itself with the number
        set when it had none, and raises otherwise; the others return themselves.

        Parameters
        ----------
        clients : int
            K, the number of clients taking part.

        Returns
        -------
        Mechanism

        Raises
        ------
        InputError
            If the mechanism was calibrated for another number of clients (the
            message names both).
        """
        return self

    @property
    @abc.abstractmethod
    def cost(self) -> PrivacyCost:
        """The privacy event one evaluation spends."""

    def prepare_labels(self, labels, rng, owner=None) -> np.ndarray:
        """The labels the clients compute their statistics on (default: their own).

        Parameters
        ----------
        labels : array-like of 0/1, shape (n,)
            The clients' true labels.
        rng : numpy.random.Generator or secure_auc.dp.streams.Uniforms
            The clients' label streams (randomized response draws its flips from them).
        owner : array-like of int, optional
            The client (stream) of each label; default: all of one client.

        Returns
        -------
        numpy.ndarray of int8
        """
        return np.asarray(labels, dtype=np.int8)

    @abc.abstractmethod
    def privatize(self, stats: LocalStatistics, rng: np.random.Generator, reps: int | None = None,
                  *, total: int | None = None, exact: bool = True) -> NoisyStatistics:
        """Noisy statistics of every client in ``stats``: shape (K,), or (reps, K).

        Parameters
        ----------
        stats : LocalStatistics
            Exact (localSum_k, localP_k, n_k) and the rank summaries the
            calibration uses, one entry per client.
        rng : numpy.random.Generator
            The noise stream.
        reps : int, optional
            Draw ``reps`` independent releases at once (simulation).
        total : int, optional
            M, for mechanisms whose calibration depends on it.
        exact : bool, default True
            Draw with the exact integer samplers (every release); False:
            faster samplers of the same distributions (simulation only).

        Returns
        -------
        NoisyStatistics
            localSum'_k, localP'_k of shape (K,) or (reps, K), and n_k.
        """

    def privacy_event(self, total: int | None = None) -> dict:
        """The privacy event of one evaluation (:mod:`.events`), known before any data is.

        Parameters
        ----------
        total : int, optional
            M, or a lower bound of it, for events whose calibration depends on it
            (Skellam shares).

        Returns
        -------
        dict
            A privacy event; the default is an eps-DP release of :attr:`cost`.
        """
        from .events import NONE_EVENT, pure_event

        cost = self.cost
        if cost.epsilon == float("inf"):
            return dict(NONE_EVENT)
        if cost.delta:
            raise NotImplementedError(f"{type(self).__name__} must describe its (eps, delta) event")
        return pure_event(cost.epsilon)

    def estimate(self, global_sum, positives, total: int) -> Estimate:
        """Eq. (1) on the aggregated sums (vectorised over repetitions).

        Parameters
        ----------
        global_sum : float or array-like
            sum_k localSum'_k.
        positives : float or array-like
            P' = sum_k localP'_k.
        total : int
            M (public); N' = M - P'.

        Returns
        -------
        Estimate
            ``auc`` (the estimate reported) and ``raw_auc`` (eq. (1) itself),
            with the sums they came from.
        """
        global_sum = np.asarray(global_sum, dtype=np.float64)
        p = np.asarray(positives, dtype=np.float64)
        raw = auc_from_sums(global_sum, p, total - p)
        return Estimate(auc=raw, raw_auc=raw, global_sum=global_sum, positives=p)

    def exact_p_sensitivity(self, stats: LocalStatistics, total: int) -> np.ndarray:
        """Per-client sensitivity of localSum when P and N are released exactly (the paper's
        appendix variant); only the split allocation defines it."""
        raise InputError("exact P and N (the paper's appendix variant) applies to GlobalLaplace and "
                         "LocalLaplace (the split allocation) only")

    def delta_method_std(self, stats: LocalStatistics, total: int, auc: float) -> float | None:
        """This project's delta-method std of the estimate for the clients' exact
        statistics ``stats`` and true ``auc``; None where the mechanism has none."""
        return None

    def describe(self) -> dict:
        """The parameters a report shows: mechanism, epsilon, delta, allocation, sensitivity."""
        return {"mechanism": self.name, "epsilon": None, "delta": None, "allocation": None, "sensitivity": None}


def estimate_auc(global_sum, positives, total: int, mechanism: Mechanism) -> Estimate:
    """The server's estimate from the aggregated sums: :meth:`Mechanism.estimate`."""
    return mechanism.estimate(global_sum, positives, total)
