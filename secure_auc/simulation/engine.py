"""Vectorised simulation of FedAUC's mechanisms: K clients, R repetitions, one process.

The simulator runs exactly the library's mechanisms (``secure_auc.dp``) and the
server's estimator (``Mechanism.estimate``); only the transport is skipped.

* Statistics mechanisms (GlobalLaplace, LocalLaplace, orthogonal, adaptive,
  and their Gaussian versions): the clients' exact statistics depend only on
  the data and the partition, so they are computed once
  (:meth:`LocalStatistics.from_owner`) and every repetition draws only the
  noise, with the mechanism's own ``privatize`` on chunks of repetitions at
  once (the fast samplers of the same integer distributions, ``exact=False``).
* Randomized response: every repetition flips all M labels.  With
  w_i = r_i (1 - 2 y_i), the rank sum on flipped labels is
  sum_i r_i y~_i = S + <w, f>, and P~ = P + <1 - 2y, f>, for the flip
  indicator f; one float32 uniform draw and one (2, M) x (M,) product per
  repetition.
* Exact P and N (``exact_p=True``, GlobalLaplace / LocalLaplace only): the
  variant of the paper's appendix ("Standard deviation of estimated AUC with
  accurate P and N", and its closed forms), in which only localSum is released,
  with the whole budget eps and the split mechanism's sensitivity, and the
  server uses the true P and N.

Repetition r uses its own generator, seeded from
``SeedSequence(seed).spawn(R)[r]`` (statistics mechanisms: chunk c of
repetitions uses ``SeedSequence(seed).spawn(C)[c]``), so results are
reproducible and each repetition is independent.  Repetitions with a large draw (K or M of 20,000
and more) run on a thread pool (numpy's generators release the GIL while
filling arrays); each keeps its own generator and its slot in the output, so
the results do not depend on the number of threads.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np

from ..data.partition import partition_owner
from ..dp.base import Mechanism, NoisyStatistics
from ..dp.randomized_response import debias_auc, flip_probability
from ..dp.registry import METHODS, make_mechanism, method_family, paper_noise
from ..dp.variance import (
    global_laplace_std,
    local_laplace_one_sample_std,
    rr_linearised_std,
    rr_paper_std,
)
from ..local_stats import LocalStatistics
from ..metrics import auc_from_sums, midranks, rank_auc
from ..validation import InputError

__all__ = ["METHODS", "Cell", "Simulator", "rep_generators"]



def rep_generators(seed: int, reps: int) -> list[np.random.Generator]:
    return [np.random.Generator(np.random.PCG64(s)) for s in np.random.SeedSequence(seed).spawn(reps)]


# below this many values drawn per repetition, threads cost more than they save
THREAD_MIN_DRAW = 20_000
CHUNK_DRAW = 1 << 16  # values per noise and chunk for the exact integer samplers


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


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
    exact_pn_std: float | None = None  # RR: std of sum r_i y~_i / (P N) with the true P, N (the paper's closed form's quantity)
    exact_p: bool = False  # global/local: P and N exact, the whole eps on localSum (paper's appendix)
    closed_form_std: float | None = None  # the paper's formula, where it gives one
    closed_form_name: str | None = None
    linearised_std: float | None = None  # this project's delta-method std of the full estimator

    def to_dict(self) -> dict:
        return asdict(self)


class Simulator:
    """Holds one dataset (scores, labels) and its global mid-ranks.

    ``groups`` (optional, one client index per sample, e.g. the file each row came
    from) enables the partition ``"files"``: those clients, as given.
    """

    def __init__(self, scores: np.ndarray, labels: np.ndarray, *, partition_seed: int = 0,
                 workers: int | None = None, groups: np.ndarray | None = None):
        self.scores = np.asarray(scores)
        self.labels = np.asarray(labels, dtype=np.int8)
        self.ranks = midranks(self.scores)
        self.m = len(self.labels)
        self.p = int(self.labels.sum())
        self.n = self.m - self.p
        self.true_auc = rank_auc(self.labels, self.scores)
        self.partition_seed = partition_seed
        self.workers = default_workers() if workers is None else max(1, int(workers))
        self.groups = None if groups is None else np.asarray(groups, dtype=np.int64)
        self.group_count = None if groups is None else int(self.groups.max()) + 1
        self._stats: dict = {}
        y = self.labels.astype(np.float64)
        self._rank_sum = float(self.ranks @ y)
        # row 0: change of the rank sum per flipped label, row 1: change of P per flipped label
        self._w = np.stack([self.ranks * (1.0 - 2.0 * y), 1.0 - 2.0 * y])

    def _map_reps(self, fn, seed: int, reps: int, draw_size: int) -> np.ndarray:
        """``[fn(rng_r) for r in range(reps)]`` as an array; threaded when each draw is large."""
        gens = rep_generators(seed, reps)
        if self.workers == 1 or draw_size < THREAD_MIN_DRAW or reps < 2:
            return np.array([fn(g) for g in gens])
        with ThreadPoolExecutor(min(self.workers, reps)) as ex:
            return np.array(list(ex.map(fn, gens)))

    # ---- statistics mechanisms -------------------------------------------------
    def stats(self, clients: int, partition: str) -> LocalStatistics:
        key = (clients, partition)
        if key not in self._stats:
            if partition == "files":
                if self.groups is None or clients != self.group_count:
                    raise InputError(f"partition 'files' needs the clients as given ({self.group_count}), "
                                     f"got K = {clients}")
                owner = self.groups
            else:
                owner = partition_owner(self.scores, clients, partition, seed=self.partition_seed)
            self._stats[key] = LocalStatistics.from_owner(self.ranks, self.labels, owner, clients)
        return self._stats[key]

    def mechanism_estimates(self, mechanism: Mechanism, clients: int, partition: str,
                            reps: int, seed: int, *, exact_p: bool = False) -> np.ndarray:
        st = self.stats(clients, partition)
        if exact_p:
            return self.exact_p_estimates(mechanism, clients, partition, reps, seed)
        if mechanism.needs_secure_sum:
            # noise on the aggregate: the sum of the K shares has a closed-form distribution,
            # drawn in one go (exact in distribution; the protocol draws it share by share)
            rbar = (self.m - 1) / 2.0
            centred = float(st.local_sum.sum() - rbar * st.local_p.sum())
            pos = float(st.local_p.sum())

            def one(rng):
                e_c, e_p = mechanism.aggregate_noise(rng, self.m, clients=clients)
                p = pos + float(e_p)
                return centred + float(e_c) + rbar * p, p
            draw = 1
        else:
            return self._chunked_estimates(lambda rng, r: mechanism.privatize(st, rng, r, total=self.m, exact=False), clients,
                                           reps, seed, exact_p=False)
        sums = self._map_reps(one, seed, reps, draw)
        return auc_from_sums(sums[:, 0], sums[:, 1], self.m - sums[:, 1])

    def exact_p_estimates(self, mechanism: Mechanism, clients: int, partition: str,
                          reps: int, seed: int) -> np.ndarray:
        """Paper's appendix variant: P, N exact; localSum + sensitivity * noise(eps), the whole eps."""
        st = self.stats(clients, partition)
        c2 = mechanism.exact_p_sensitivity(st, self.m)
        fam, eps = mechanism.family, mechanism.epsilon

        def draw(rng, r):
            return NoisyStatistics(st.local_sum + fam.sample(eps, rng, (r, clients), sensitivity=c2, exact=False), st.local_p, st.n)
        return self._chunked_estimates(draw, clients, reps, seed, exact_p=True)

    def _chunked_estimates(self, draw, clients: int, reps: int, seed: int, *, exact_p: bool) -> np.ndarray:
        """Estimates of ``reps`` repetitions of ``draw(rng, r) -> NoisyStatistics`` of shape (r, K).

        The exact integer samplers work on whole arrays, so repetitions are drawn
        in chunks of about CHUNK_DRAW values, chunk c with generator c of
        :func:`rep_generators` (results do not depend on the number of threads).
        """
        per = max(1, CHUNK_DRAW // clients)
        sizes = [min(per, reps - i) for i in range(0, reps, per)]

        def one(args):
            rng, r = args
            noisy = draw(rng, r)
            return noisy.local_sum.sum(axis=-1), np.broadcast_to(noisy.local_p, noisy.local_sum.shape).sum(axis=-1)
        jobs = list(zip(rep_generators(seed, len(sizes)), sizes))
        if self.workers == 1 or len(jobs) < 2:
            parts = [one(j) for j in jobs]
        else:
            with ThreadPoolExecutor(min(self.workers, len(jobs))) as ex:
                parts = list(ex.map(one, jobs))
        sums = np.concatenate([p[0] for p in parts])
        if exact_p:
            return auc_from_sums(sums, self.p, self.n)
        pos = np.concatenate([p[1] for p in parts])
        return auc_from_sums(sums, pos, self.m - pos)

    # ---- randomized response -----------------------------------------------------
    def rr_sums(self, epsilon: float, reps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(sum_i r_i y~_i, P~) for ``reps`` repetitions of randomized response."""
        rho = flip_probability(epsilon)
        if rho == 0:
            return np.full(reps, self._rank_sum), np.full(reps, float(self.p))
        rho32 = np.float32(rho)

        def one(rng):
            f = (rng.random(self.m, dtype=np.float32) < rho32).astype(np.float64)
            return self._w @ f
        delta = self._map_reps(one, seed, reps, self.m)
        return self._rank_sum + delta[:, 0], self.p + delta[:, 1]

    # ---- one cell of a results table -------------------------------------------
    def cell(self, method: str, epsilon: float, *, clients: int | None = None, partition: str | None = None,
             reps: int = 100, seed: int = 0, alpha: float = 0.5, beta: float = 0.5,
             noise: str | None = None, delta: float | None = None, honest_fraction: float = 1.0,
             exact_p: bool = False) -> Cell:
        """One cell: ``reps`` repetitions of the paper's method ``method`` (:data:`.registry.METHODS`)
        with the per-client noise ``noise`` (a family's name; default: the default one)."""
        # the paper's closed forms (and its exact-P variant) describe one noise: the family says which
        paper = paper_noise(noise)
        if method_family(method, noise).flips_labels:
            sums, pos = self.rr_sums(epsilon, reps, seed)
            noisy = auc_from_sums(sums, pos, self.m - pos)
            finite = np.isfinite(epsilon)
            clean = debias_auc(noisy, pos, self.m - pos, epsilon).auc if finite else noisy
            return Cell(method, None, clients, float(epsilon), reps, self.true_auc,
                        float(clean.mean()), float(clean.std(ddof=1)),
                        noisy_mean=float(noisy.mean()), noisy_std=float(noisy.std(ddof=1)),
                        exact_pn_std=float(sums.std(ddof=1) / (self.p * self.n)),
                        closed_form_std=rr_paper_std(self.m, self.p, self.n, epsilon) if finite else 0.0,
                        closed_form_name="paper: RR, sum r_i y~_i / (P N) with exact P and N",
                        linearised_std=rr_linearised_std(self.ranks, self.labels, epsilon) if finite else 0.0)
        mech = make_mechanism(method, epsilon, alpha=alpha, beta=beta, noise=noise, delta=delta,
                              clients=clients, honest_fraction=honest_fraction)
        if exact_p and not paper:
            raise InputError("exact P and N (the paper's appendix variant) is defined for Laplace noise only")
        est = self.mechanism_estimates(mech, clients, partition, reps, seed, exact_p=exact_p)
        # the paper's closed forms assume exact P and N; with exact_p the whole eps is on localSum
        eps_sum = epsilon if exact_p else alpha * epsilon
        cf, cf_name = None, None
        if method == "global" and paper:
            cf, cf_name = global_laplace_std(clients, self.m, self.p, self.n, eps_sum), "paper: GlobalLaplace, exact P and N"
        elif method == "local" and paper and clients == self.m:
            cf, cf_name = local_laplace_one_sample_std(clients, self.p, self.n, eps_sum), "paper: LocalLaplace, 1 sample/client, exact P and N"
        st = self.stats(clients, partition)
        if exact_p:  # linear in the noise: this "delta-method" std is exact
            c2 = mech.exact_p_sensitivity(st, self.m)
            lin = float(np.sqrt(np.sum(mech.family.std(epsilon, sensitivity=c2) ** 2)) / (self.p * self.n))
        else:
            lin = mech.delta_method_std(st, self.m, self.true_auc)
        return Cell(method, partition, clients, float(epsilon), reps, self.true_auc,
                    float(est.mean()), float(est.std(ddof=1)), exact_p=exact_p,
                    closed_form_std=cf, closed_form_name=cf_name, linearised_std=lin)
