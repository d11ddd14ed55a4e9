"""Label-DP mechanisms (randomized response, Laplace, Gaussian), their noise and variances."""

from .mechanisms import (
    ALLOCATIONS,
    SENSITIVITIES,
    NoisyStatistics,
    NoNoise,
    PrivacyCost,
    RandomizedResponse,
    StatisticsMechanism,
    make_mechanism,
)
from .noise import LAPLACE, NoiseFamily, analytic_gaussian_sigma, gaussian
from .randomized_response import debias_auc, flip_probability, randomized_response
from .rng import ClientRngs, client_rngs, make_rng

__all__ = [
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
