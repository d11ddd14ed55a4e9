"""Vectorised simulation of FedAUC's mechanisms: K clients, R repetitions, one process.

The simulator runs exactly the library's mechanisms (``secure_auc.dp``) and the
server's estimator (``secure_auc.estimate``); only the transport is skipped.

* Statistics mechanisms (GlobalLaplace, LocalLaplace, orthogonal, adaptive,
  and their Gaussian versions): the clients' exact statistics depend only on
  the data and the partition, so they are computed once
  (:meth:`LocalStatistics.from_owner`) and every repetition draws only the
  noise, one (K,)-vector per noise, with the mechanism's own ``privatize``.
* Randomized response: every repetition flips all M labels.  With
  w_i = r_i (1 - 2 y_i), the rank sum on flipped labels is
  sum_i r_i y~_i = S + <w, f>, and P~ = P + <1 - 2y, f>, for the flip
  indicator f; one uniform draw and two dot products per repetition.

Repetition r uses its own generator, seeded from
``SeedSequence(seed).spawn(R)[r]``, so results are reproducible and each
repetition is independent.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..data.partition import partition_owner
from ..dp.distributed import DistributedNoise
from ..dp.mechanisms import RandomizedResponse, StatisticsMechanism
from ..dp.randomized_response import debias_auc, flip_probability
from ..dp.variance import (
    global_laplace_std,
    linearised_std,
    local_laplace_one_sample_std,
    rr_linearised_std,
    rr_paper_std,
)
from ..local_stats import LocalStatistics
from ..metrics import auc_from_sums, midranks, rank_auc

__all__ = ["METHODS", "Cell", "Simulator", "rep_generators"]

# name -> (description, needs a partition)
METHODS = {
    "rr": ("randomized response, debiased (FedAUC_RR)", False),
    "global": ("GlobalLaplace: sensitivity M-1, split alpha", True),
    "local": ("LocalLaplace: client's max rank, split alpha", True),
    "orthogonal": ("orthogonal decomposition, shared beta", True),
    "adaptive": ("orthogonal decomposition, per-client adaptive beta", True),
    "distributed": ("noise on the aggregate in shares, centred statistic (this project; MPC only)", True),
}


def rep_generators(seed: int, reps: int) -> list[np.random.Generator]:
    return [np.random.Generator(np.random.PCG64(s)) for s in np.random.SeedSequence(seed).spawn(reps)]


@dataclass
class Cell:
    method: str
    partition: str | None
    clients: int | None
    epsilon: float
    reps: int
    true_auc: float
    mean: float
    std: float
    noisy_mean: float | None = None  # RR: the AUC on flipped labels, before debiasing
    noisy_std: float | None = None
    closed_form_std: float | None = None  # the paper's formula, where it gives one
    closed_form_name: str | None = None
    linearised_std: float | None = None  # this project's delta-method std of the full estimator

    def to_dict(self) -> dict:
        return asdict(self)


class Simulator:
    """Holds one dataset (scores, labels) and its global mid-ranks."""

    def __init__(self, scores: np.ndarray, labels: np.ndarray, *, partition_seed: int = 0):
        self.scores = np.asarray(scores)
        self.labels = np.asarray(labels, dtype=np.int8)
        self.ranks = midranks(self.scores)
        self.m = len(self.labels)
        self.p = int(self.labels.sum())
        self.n = self.m - self.p
        self.true_auc = rank_auc(self.labels, self.scores)
        self.partition_seed = partition_seed
        self._stats: dict = {}
        y = self.labels.astype(np.float64)
        self._rank_sum = float(self.ranks @ y)
        self._w_sum = self.ranks * (1.0 - 2.0 * y)  # change of the rank sum per flipped label
        self._w_p = 1.0 - 2.0 * y  # change of P per flipped label

    # ---- statistics mechanisms -------------------------------------------------
    def stats(self, clients: int, partition: str) -> LocalStatistics:
        key = (clients, partition)
        if key not in self._stats:
            owner = partition_owner(self.scores, clients, partition, seed=self.partition_seed)
            self._stats[key] = LocalStatistics.from_owner(self.ranks, self.labels, owner, clients)
        return self._stats[key]

    def mechanism_estimates(self, mechanism: StatisticsMechanism, clients: int, partition: str,
                            reps: int, seed: int) -> np.ndarray:
        st = self.stats(clients, partition)
        out = np.empty(reps)
        if hasattr(mechanism, "aggregate_noise"):
            # noise on the aggregate: the sum of the K shares has a closed-form distribution,
            # drawn in one go (exact in distribution; the protocol draws it share by share)
            rbar = (self.m - 1) / 2.0
            centred = float(st.local_sum.sum() - rbar * st.local_p.sum())
            for r, rng in enumerate(rep_generators(seed, reps)):
                e_c, e_p = mechanism.aggregate_noise(rng, self.m, clients=clients)
                p = st.local_p.sum() + float(e_p)
                out[r] = auc_from_sums(centred + float(e_c) + rbar * p, p, self.m - p)
            return out
        for r, rng in enumerate(rep_generators(seed, reps)):
            noisy = mechanism.privatize(st, rng, total=self.m)
            p = noisy.local_p.sum()
            out[r] = auc_from_sums(noisy.local_sum.sum(), p, self.m - p)
        return out

    # ---- randomized response -----------------------------------------------------
    def rr_estimates(self, epsilon: float, reps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(debiased, noisy) AUC for ``reps`` repetitions of randomized response."""
        rho = flip_probability(epsilon)
        sums = np.full(reps, self._rank_sum)
        pos = np.full(reps, float(self.p))
        if rho > 0:
            for r, rng in enumerate(rep_generators(seed, reps)):
                f = (rng.random(self.m, dtype=np.float32) < np.float32(rho)).astype(np.float64)
                sums[r] += self._w_sum @ f
                pos[r] += self._w_p @ f
        noisy = auc_from_sums(sums, pos, self.m - pos)
        if rho == 0:
            return noisy, noisy
        return debias_auc(noisy, pos, self.m - pos, epsilon).auc, noisy

    # ---- one cell of a results table -------------------------------------------
    def cell(self, method: str, epsilon: float, *, clients: int | None = None, partition: str | None = None,
             reps: int = 100, seed: int = 0, alpha: float = 0.5, beta: float = 0.5,
             noise: str = "laplace", delta: float | None = None, honest_fraction: float = 1.0) -> Cell:
        if method == "rr":
            clean, noisy = self.rr_estimates(epsilon, reps, seed)
            finite = np.isfinite(epsilon)
            return Cell("rr", None, clients, float(epsilon), reps, self.true_auc,
                        float(clean.mean()), float(clean.std(ddof=1)),
                        noisy_mean=float(noisy.mean()), noisy_std=float(noisy.std(ddof=1)),
                        closed_form_std=rr_paper_std(self.m, self.p, self.n, epsilon) if finite else 0.0,
                        closed_form_name="paper: RR, exact P and N",
                        linearised_std=rr_linearised_std(self.ranks, self.labels, epsilon) if finite else 0.0)
        mech = self.mechanism(method, epsilon, alpha=alpha, beta=beta, noise=noise, delta=delta,
                              clients=clients, honest_fraction=honest_fraction)
        est = self.mechanism_estimates(mech, clients, partition, reps, seed)
        if method == "distributed":
            lin = mech.linearised_std(self.m, self.p, self.true_auc)
            return Cell(method, partition, clients, float(epsilon), reps, self.true_auc,
                        float(est.mean()), float(est.std(ddof=1)), linearised_std=lin)
        cf, cf_name = None, None
        if method == "global" and noise == "laplace":
            cf, cf_name = global_laplace_std(clients, self.m, self.p, self.n, alpha * epsilon), "paper: GlobalLaplace, exact P and N"
        elif method == "local" and noise == "laplace" and clients == self.m:
            cf, cf_name = local_laplace_one_sample_std(clients, self.p, self.n, alpha * epsilon), "paper: LocalLaplace, 1 sample/client, exact P and N"
        return Cell(method, partition, clients, float(epsilon), reps, self.true_auc,
                    float(est.mean()), float(est.std(ddof=1)), closed_form_std=cf, closed_form_name=cf_name,
                    linearised_std=linearised_std(mech, self.stats(clients, partition), self.m, self.true_auc))

    @staticmethod
    def mechanism(method: str, epsilon: float, *, alpha=0.5, beta=0.5, noise="laplace", delta=None,
                  clients=None, honest_fraction=1.0):
        if method == "distributed":
            return DistributedNoise(epsilon, clients, noise={"laplace": "discrete_laplace"}.get(noise, noise),
                                    delta=delta, honest_fraction=honest_fraction)
        if method == "rr":
            return RandomizedResponse(epsilon)
        kw = dict(noise=noise, delta=delta, alpha=alpha, beta=beta)
        if method == "global":
            return StatisticsMechanism(epsilon, allocation="split", sensitivity="global", **kw)
        if method == "local":
            return StatisticsMechanism(epsilon, allocation="split", sensitivity="local", **kw)
        if method in ("orthogonal", "adaptive"):
            return StatisticsMechanism(epsilon, allocation=method, **kw)
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
