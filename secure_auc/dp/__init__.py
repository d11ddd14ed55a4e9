"""Label-DP mechanisms (randomized response, Laplace, Gaussian, noise on the aggregate):
the contract (:mod:`.base`), the mechanisms, their registry, noise, variances and accounting."""

from .base import Estimate, Mechanism, NoisyStatistics, PrivacyCost
from .distributed import DistributedNoise
from .mechanisms import ALLOCATIONS, SENSITIVITIES, NoNoise, RandomizedResponse, StatisticsMechanism
from .registry import FAMILIES, METHODS, make_mechanism
from .families.gaussian import gaussian
from .families.laplace import LAPLACE
from .noise import NoiseFamily, analytic_gaussian_sigma
from .randomized_response import debias_auc, flip_probability, randomized_response
from .rng import ClientRngs, client_rngs, make_rng

__all__ = [
    "Estimate",
    "Mechanism",
    "DistributedNoise",
    "FAMILIES",
    "METHODS",
    "ALLOCATIONS",
    "SENSITIVITIES",
    "NoisyStatistics",
    "NoNoise",
    "PrivacyCost",
    "RandomizedResponse",
    "StatisticsMechanism",
    "make_mechanism",
    "LAPLACE",
    "NoiseFamily",
    "analytic_gaussian_sigma",
    "gaussian",
    "debias_auc",
    "flip_probability",
    "randomized_response",
    "ClientRngs",
    "client_rngs",
    "make_rng",
]
