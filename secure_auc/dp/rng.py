"""Randomness for DP noise.

Real runs draw noise from generators seeded with 128 bits from the operating
system's cryptographic source (``secrets``); a fixed seed is used only when the
user asks for reproducibility (``--seed``, simulations, tests).

Each client has three independent streams derived from ``(seed, client)``: one
for flipping its labels (randomized response), one for shuffling the scores it
sends, one for the noise on its statistics.  Keeping them apart is what makes
the plain and the MPC protocol, which shuffle differently, add exactly the
same noise for the same seed.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np

__all__ = ["make_rng", "ClientRngs", "client_rngs"]


def make_rng(seed: int | None = None) -> np.random.Generator:
    """A PCG64 generator: cryptographically seeded when ``seed`` is None."""
    if seed is None:
        seed = secrets.randbits(128)
    return np.random.Generator(np.random.PCG64(seed))


@dataclass(frozen=True)
class ClientRngs:
    labels: np.random.Generator
    shuffle: np.random.Generator
    noise: np.random.Generator


def client_rngs(seed: int | None, client: int) -> ClientRngs:
    """Client ``client``'s own streams (independent of every other client's)."""
    root = np.random.SeedSequence(secrets.randbits(128) if seed is None else [int(seed), int(client)])
    a, b, c = (np.random.Generator(np.random.PCG64(s)) for s in root.spawn(3))
    return ClientRngs(labels=a, shuffle=b, noise=c)
