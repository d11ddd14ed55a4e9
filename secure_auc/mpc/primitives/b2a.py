r"""From XOR-shared bits to additive shares (B2A) with a random bit shared both ways.

With :math:`[r]^A` and :math:`[r]^B` for a uniformly random bit :math:`r` (from
the dealer), open :math:`z = c \oplus r` (uniformly random, independent of
:math:`c`) and set :math:`c = z + (1 - 2z)\,r`.
"""

from __future__ import annotations

import torch

from ..comm import backend
from .beaver import beaver_round
from .bits import bitslice, unslice
from .randomness import Randomness

__all__ = ["open_bits", "bit_to_arithmetic"]


def open_bits(packed: torch.Tensor, r_binary: torch.Tensor, n: int, rnd: Randomness) -> torch.Tensor:
    """z = c XOR r for packed XOR-shared bits c (W,) and r's bit shares (n,): opened, unpacked."""
    masked = packed ^ bitslice(r_binary.view(1, -1), 1)[0, 0]
    _, _, (z,) = beaver_round(rnd, masked_bits=[masked])
    return unslice(z, n)


def bit_to_arithmetic(packed: torch.Tensor, n: int, rnd: Randomness) -> torch.Tensor:
    """Additive shares of n packed XOR-shared bits: open z = c XOR r, c = z + (1 - 2z) r."""
    r_arith, r_binary = rnd.take("b2a", n)
    z = open_bits(packed, r_binary, n, rnd)
    c = (1 - 2 * z) * r_arith
    return c + z if backend.rank() == 0 else c
