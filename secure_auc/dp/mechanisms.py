"""Label-DP mechanisms of FedAUC, each a named unit with explicit parameters.

Two families (paper, Sections 4 and 5):

* :class:`RandomizedResponse` (FedAUC_RR): the client flips its labels once,
  computes its statistics on the flipped labels and sends them without further
  noise; the server debiases the AUC.
* :class:`StatisticsMechanism` (FedAUC_Lap / Gaussian): the client computes
  (localSum_k, localP_k) on its true labels and adds noise.  Every allocation
  the paper describes has the same linear form, with two independent
  unit-sensitivity noises s1 (budget eps1) and s2 (budget eps2):

      localP'_k   = localP_k   + s1
      localSum'_k = localSum_k + c1_k s1 + c2_k s2

  - ``split`` (LocalLaplace / GlobalLaplace, budget split alpha):
        eps1 = (1 - alpha) eps, c1 = 0, eps2 = alpha eps,
        c2 = max rank of the client (local) or M - 1 (global).
  - ``orthogonal`` (shared beta): write r = rbar 1 + v with v orthogonal to 1;
        localSum = rbar localP + <v, y>.  Release localP with budget beta eps
        and <v, y> (sensitivity ||v||_inf) with (1 - beta) eps; then
        c1 = rbar, eps1 = beta eps, c2 = ||v||_inf, eps2 = (1 - beta) eps.
  - ``adaptive``: orthogonal with each client's own beta minimising
        Var(localSum'_k) proportional to rbar^2 / beta^2 + ||v||^2 / (1 - beta)^2,
        i.e.  beta_k = rbar^(2/3) / (rbar^(2/3) + ||v||_inf^(2/3))
        (beta_k = 1 when all the client's ranks are equal: then <v, y> = 0).

  Each client's release is (eps, delta)-DP for its labels by basic composition
  of the two noises (for Gaussian noise each spends delta / 2); since every
  label belongs to exactly one client, the whole run is (eps, delta)-label-DP.
  For Gaussian noise the adaptive beta uses the same closed form (exact for
  noise whose std is proportional to 1/eps, a close heuristic for the
  analytic Gaussian).

* :class:`NoNoise`: the exact, non-private computation (for references/tests).

All implement :class:`.base.Mechanism`; :mod:`.registry` builds them by name.  :class:`NoNoise` and
:class:`RandomizedResponse` are declared with their families (:mod:`.families.none`,
:mod:`.families.rr`), the noises in :mod:`.families.laplace` and :mod:`.families.gaussian`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..local_stats import LocalStatistics
from ..validation import InputError, check_epsilon, check_fraction
from .base import Mechanism, NoisyStatistics, PrivacyCost
from .families.none import NoNoise
from .family import EPSILON, Family, Option
from .families.rr import RandomizedResponse
from .noise import GRID, NoiseFamily, default_noise, noise_kind

__all__ = [
    "ALLOCATIONS",
    "SENSITIVITIES",
    "STATISTICS_OPTIONS",
    "statistics_family",
    "NoNoise",
    "RandomizedResponse",
    "Allocation",
    "StatisticsMechanism",
    "orthogonal_statistic",
    "noisy_quotient",
]


def orthogonal_statistic(stats: LocalStatistics) -> list[int]:
    """2 X = 2 n_k <v, y> = n_k (2 localSum_k) - (2 sum_i r_i) localP_k per client, as exact Python integers.

    Every factor is an integer (mid-ranks are half-integers); the products reach
    M^3 / 2 and leave float64's exact range (2^53) from M of about 2^18, so they
    are formed in integer arithmetic.  2 sum_i r_i is recovered from
    n_k rbar_k, exact while it stays below 2^50 (M below about 3 x 10^7).

    Examples
    --------
    >>> from secure_auc.local_stats import LocalStatistics
    >>> from secure_auc.dp.mechanisms import orthogonal_statistic
    >>> orthogonal_statistic(LocalStatistics.from_client([0.0, 3.0, 5.0], [0, 1, 1]))  # 2 * 3 * <r - 8/3, y>
    [16]
    """
    n = np.rint(stats.n).astype(np.int64).tolist()
    twice_sum = np.rint(2.0 * stats.local_sum).astype(np.int64).tolist()
    twice_total = np.rint(2.0 * stats.n * stats.mean_rank).astype(np.int64).tolist()
    positives = np.rint(stats.local_p).astype(np.int64).tolist()
    return [a * b - c * d for a, b, c, d in zip(n, twice_sum, twice_total, positives)]


def noisy_quotient(twice_x: list[int], units: np.ndarray, n) -> np.ndarray:
    """(X + GRID units) / n_k as the correctly rounded double of the exact value, per client.

    ``twice_x`` from :func:`orthogonal_statistic`, ``units`` the integer noise in grid
    steps (shape (K,) or (reps, K)).  The numerator X / GRID + units is an exact integer;
    one division rounds it, so the result depends on the noisy value only (float64 where
    the numerator is below 2^53, Python integers beyond).
    """
    half_steps = int(round(0.5 / GRID))  # X / GRID = 2X * half_steps
    den = np.asarray(n, dtype=np.float64) / GRID
    top = max(abs(v) for v in twice_x) * half_steps + int(np.abs(units).max(initial=0))
    if top < 2**53:
        return (np.asarray(twice_x, dtype=np.float64) * half_steps + units) / den
    num = np.asarray([v * half_steps for v in twice_x], dtype=object) + units.astype(object)
    d = np.asarray([int(v) for v in den], dtype=object)
    return np.asarray(num / d, dtype=np.float64)  # Python's int / int: correctly rounded


ALLOCATIONS = ("split", "orthogonal", "adaptive")
SENSITIVITIES = ("local", "global")

# the options of every family built on StatisticsMechanism (their noise apart)
STATISTICS_OPTIONS = (
    EPSILON,
    Option("allocation", "how eps is split between localSum and localP: split (alpha), orthogonal (shared beta) "
           "or adaptive (per-client beta)", type=str, default="adaptive", choices=ALLOCATIONS),
    Option("sensitivity", "local (client's max rank, LocalLaplace) or global (M-1, GlobalLaplace)", type=str,
           default="local", choices=SENSITIVITIES, when=("allocation", ("split",))),
    Option("alpha", "share of eps on localSum", default=0.5, range="(0, 1)", when=("allocation", ("split",))),
    Option("beta", "share of eps on localP", default=0.5, range="(0, 1)", when=("allocation", ("orthogonal",))),
)


def statistics_family(noise: str, options=STATISTICS_OPTIONS, **declaration):
    """The declaration (:class:`.family.Family`) of the family that adds the noise ``noise``
    (:func:`.noise.noise_kind`) with :class:`StatisticsMechanism`."""
    def make(epsilon, delta, clients, allocation, sensitivity, alpha, beta):
        return StatisticsMechanism(epsilon=epsilon, noise=noise, delta=delta, allocation=allocation,
                                   sensitivity=sensitivity, alpha=alpha, beta=beta)
    return Family(noise, options=options, make=make, noise=noise, **declaration)


@dataclass(frozen=True)
class Allocation:
    """Per-client budgets and coefficients of the two noises (see module doc)."""

    eps1: np.ndarray
    eps2: np.ndarray
    c1: np.ndarray
    c2: np.ndarray
    scale2: np.ndarray | None = None  # the second noise is on scale2 x its statistic (n_k for <v, y>)


@dataclass(frozen=True)
class StatisticsMechanism(Mechanism):
    """Laplace or Gaussian noise on (localSum_k, localP_k).

    Every allocation releases localP'_k = localP_k + s1 and
    localSum'_k = localSum_k + c1_k s1 + c2_k s2 (see the module docstring).

    Parameters
    ----------
    epsilon : float
        Total budget per evaluation (eps-label-DP, or (eps, delta)).
    noise : {"laplace", "gaussian"}, optional
        The per-client noise (:func:`.noise.noise_kind`); default: discrete Laplace.
    delta : float, optional
        Required for Gaussian noise, in (0, 1); each of the two noises spends
        delta / 2.  Not allowed for Laplace noise.
    allocation : {"split", "orthogonal", "adaptive"}, default "split"
        ``split`` (alpha), ``orthogonal`` (shared beta) or ``adaptive``
        (per-client beta).
    sensitivity : {"local", "global"}, default "local"
        For ``split``: the client's max rank (local) or M - 1 (global).
    alpha : float, default 0.5
        Share of eps on localSum for ``split`` (paper default 0.5), in (0, 1).
    beta : float, default 0.5
        Share of eps on localP for ``orthogonal``, in (0, 1).

    Raises
    ------
    InputError
        On an invalid parameter (the message names it).

    Examples
    --------
    A client with ranks 0, 3, 5 and labels 0, 1, 1.  ``split`` with local
    sensitivity puts alpha eps on localSum with the client's max rank as
    coefficient; ``adaptive`` finds rbar = ||v||_inf = 8/3, hence beta = 1/2:

    >>> from secure_auc import StatisticsMechanism
    >>> from secure_auc.local_stats import LocalStatistics
    >>> stats = LocalStatistics.from_client([0.0, 3.0, 5.0], [0, 1, 1])
    >>> al = StatisticsMechanism(1.0).allocate(stats)
    >>> al.eps1, al.eps2, al.c1, al.c2
    (array([0.5]), array([0.5]), array([0.]), array([5.]))
    >>> al = StatisticsMechanism(1.0, allocation="adaptive").allocate(stats)
    >>> al.eps1, al.c1.round(4), al.c2.round(4)
    (array([0.5]), array([2.6667]), array([2.6667]))
    >>> StatisticsMechanism(1.0, noise="gaussian", delta=1e-6).cost
    PrivacyCost(epsilon=1.0, delta=1e-06)
    >>> StatisticsMechanism(1.0, noise="gaussian")
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: Gaussian noise needs --delta in (0, 1)
    """

    epsilon: float
    noise: str | None = None  # None: the default noise (discrete Laplace)
    delta: float | None = None
    allocation: str = "split"
    sensitivity: str = "local"
    alpha: float = 0.5
    beta: float = 0.5

    def __post_init__(self):
        check_epsilon(self.epsilon)
        if self.noise is None:
            object.__setattr__(self, "noise", default_noise())
        noise_kind(self.noise, self.delta)  # a known noise, with the delta it needs (or none)
        if self.allocation not in ALLOCATIONS:
            raise InputError(f"allocation must be one of {ALLOCATIONS}, got {self.allocation!r}")
        if self.sensitivity not in SENSITIVITIES:
            raise InputError(f"sensitivity must be one of {SENSITIVITIES}, got {self.sensitivity!r}")
        check_fraction(self.alpha, name="alpha")
        check_fraction(self.beta, name="beta")

    @property
    def name(self) -> str:
        return self.noise

    @property
    def cost(self) -> PrivacyCost:
        return PrivacyCost(self.epsilon, self.delta or 0.0)

    @property
    def family(self) -> NoiseFamily:
        """The noise of each of the two releases (each spends half of delta)."""
        return noise_kind(self.noise, self.delta)

    def describe(self) -> dict:
        return {
            "mechanism": self.noise,
            "epsilon": self.epsilon,
            "delta": self.delta or 0.0,
            "allocation": self.allocation,
            "sensitivity": self.sensitivity if self.allocation == "split" else None,
        }

    def privacy_event(self, total: int | None = None) -> dict:
        """Two releases per evaluation, s1 with eps1 and s2 with eps2 (see :meth:`allocate`).

        Laplace: an eps_i-DP event each (the adaptive allocation, whose split is
        each client's own, is bounded by one eps-DP event).  Gaussian: each
        discrete Gaussian noise is at least the continuous analytic Gaussian's
        sigma_c(eps_i, delta / 2), hence (1 / (2 sigma_c^2))-zCDP; for the
        adaptive allocation the largest total rho over the per-client split.
        """
        from .events import composed_event

        eps = self.epsilon
        if eps == float("inf"):
            return super().privacy_event(total)
        if self.allocation == "split":
            shares = [1.0 - self.alpha, self.alpha]
        elif self.allocation == "orthogonal":
            shares = [self.beta, 1.0 - self.beta]
        else:
            return self.family.adaptive_event(eps)
        return composed_event([self.family.event(s * eps) for s in shares])

    def delta_method_std(self, stats: LocalStatistics, total: int, auc: float) -> float:
        """:func:`.variance.linearised_std` (noisy P included)."""
        from .variance import linearised_std

        return linearised_std(self, stats, total, auc)

    def exact_p_sensitivity(self, stats: LocalStatistics, total: int) -> np.ndarray:
        if self.allocation != "split":
            return super().exact_p_sensitivity(stats, total)
        return self.allocate(stats, total).c2  # M - 1 (global) or the client's max rank (local)

    def allocate(self, stats: LocalStatistics, total: int | None = None) -> Allocation:
        """Per-client budgets (eps1, eps2) and coefficients (c1, c2) of the two noises.

        Parameters
        ----------
        stats : LocalStatistics
            The clients' rank summaries (max rank, mean rank rbar, ||v||_inf).
        total : int, optional
            M; required for ``split`` with global sensitivity.

        Returns
        -------
        Allocation
        """
        eps = self.epsilon
        k = stats.clients
        if self.allocation == "split":
            if self.sensitivity == "global":
                if total is None:
                    raise ValueError("global sensitivity needs the total number of samples M")
                c2 = np.full(k, float(total - 1))
            else:
                c2 = stats.max_rank.astype(np.float64)
            return Allocation(
                eps1=np.full(k, (1.0 - self.alpha) * eps),
                eps2=np.full(k, self.alpha * eps),
                c1=np.zeros(k),
                c2=c2,
            )
        rbar = stats.mean_rank.astype(np.float64)
        vmax = stats.max_dev.astype(np.float64)
        if self.allocation == "orthogonal":
            beta = np.full(k, self.beta)
        else:
            a, b = np.cbrt(rbar**2), np.cbrt(vmax**2)
            with np.errstate(invalid="ignore", divide="ignore"):
                beta = np.where(b == 0, 1.0, a / (a + b))
        return Allocation(eps1=beta * eps, eps2=(1.0 - beta) * eps, c1=rbar, c2=vmax, scale2=stats.n.astype(np.float64))

    def privatize(
        self, stats: LocalStatistics, rng: np.random.Generator, reps: int | None = None, *, total: int | None = None,
        exact: bool = True,
    ) -> NoisyStatistics:
        """Add integer noise on the fixed-point grid; with ``reps`` the result has shape (reps, clients).

        ``split``: localP' = localP + s1 and localSum' = localSum + s2, each
        statistic on the grid (localSum is a sum of half-integer mid-ranks) with
        its own sensitivity (1 and c2).  ``orthogonal``/``adaptive``: the
        released pair is (localP + s1, X + s2) with X = n_k <v, y> =
        n_k localSum - (sum_i r_i) localP, a multiple of 1/2 with sensitivity
        n_k ||v||_inf; localSum' = rbar (localP + s1) + (X + s2) / n_k is
        computed from the released pair only (post-processing).
        """
        al = self.allocate(stats, total)
        shape = (stats.clients,) if reps is None else (reps, stats.clients)
        fam = self.family
        s1 = fam.sample(al.eps1, rng, shape, sensitivity=1.0, exact=exact)
        p_noisy = stats.local_p + s1
        if al.scale2 is None:
            return NoisyStatistics(local_sum=stats.local_sum + fam.sample(al.eps2, rng, shape, sensitivity=al.c2, exact=exact),
                                   local_p=p_noisy, n=stats.n)
        n = al.scale2
        units = fam.sample_units(al.eps2, rng, shape, sensitivity=np.rint(2.0 * n * al.c2) / 2.0, exact=exact)
        return NoisyStatistics(local_sum=al.c1 * p_noisy + noisy_quotient(orthogonal_statistic(stats), units, n),
                               local_p=p_noisy, n=stats.n)
