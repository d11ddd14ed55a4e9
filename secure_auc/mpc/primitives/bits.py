"""Bit slicing (local): 64 elements' bit i packed into one word, and back."""

from __future__ import annotations

import torch

__all__ = ["bitslice", "unslice"]

_SHIFTS = torch.arange(64, dtype=torch.long)


_CHUNK = 1 << 12  # words per chunk: bounded temporaries (k x 2^18 elements)


def bitslice(x: torch.Tensor, bits: int) -> torch.Tensor:
    """(k, n) int64 -> (bits, k, W) planes, W = ceil(n / 64): bit j of word w of
    plane i (row r) is bit i of x[r, 64 w + j]."""
    k, n = x.shape
    words = max(1, (n + 63) // 64)
    out = torch.empty((bits, k, words), dtype=torch.long)
    for lo in range(0, words, _CHUNK):
        hi = min(words, lo + _CHUNK)
        part = x[:, 64 * lo : 64 * hi]
        if part.shape[1] != 64 * (hi - lo):
            part = torch.cat([part, part.new_zeros((k, 64 * (hi - lo) - part.shape[1]))], dim=1)
        part = part.reshape(k, hi - lo, 64)
        for i in range(bits):
            # distinct powers of two: the int64 sum (wrapping at bit 63) is their OR
            out[i, :, lo:hi] = (((part >> i) & 1) << _SHIFTS).sum(-1)
    return out


def unslice(planes: torch.Tensor, n: int) -> torch.Tensor:
    """(W,) packed words -> (n,) bits (0/1 int64)."""
    return ((planes.unsqueeze(-1) >> _SHIFTS) & 1).reshape(-1)[:n]
