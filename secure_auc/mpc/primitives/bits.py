"""Bit slicing (local): 64 elements' bit i packed into one word, and back.

Examples
--------
>>> import torch
>>> from secure_auc.mpc.primitives.bits import bitslice, unslice
>>> x = torch.tensor([[1, 2, 3, -1]])
>>> planes = bitslice(x, 2)
>>> planes.shape, planes[:, 0, 0].tolist()
(torch.Size([2, 1, 1]), [13, 14])
>>> unslice(planes[0, 0], 4).tolist()
[1, 0, 1, 1]
"""

from __future__ import annotations

import sys

import numpy as np
import torch

__all__ = ["bitslice", "unslice"]

_SHIFTS = torch.arange(64, dtype=torch.long)


_CHUNK = 1 << 12  # words per chunk: bounded temporaries (k x 2^18 elements)


def bitslice(x: torch.Tensor, bits: int) -> torch.Tensor:
    """(k, n) int64 -> (bits, k, W) planes, W = ceil(n / 64): bit j of word w of
    plane i (row r) is bit i of x[r, 64 w + j].

    Per chunk of 2^18 elements and per byte of the elements' low ``ceil(bits / 8)``: that
    byte of every element in a row (one strided copy), then per bit of it the bit of every
    element (one AND) packed 8 to a byte by numpy's ``packbits`` (least significant bit
    first): 8 bytes of a plane, read little-endian, are its word."""
    k, n = x.shape
    if sys.byteorder != "little" or not 1 <= bits <= 64 or x.dtype != torch.int64:
        return _bitslice_words(x, bits)
    words = max(1, (n + 63) // 64)
    src = np.ascontiguousarray(x.numpy()).view(np.uint8).reshape(k, n, 8)
    out = np.empty((bits, k, words * 8), dtype=np.uint8)
    byte = np.zeros((k, 64 * min(words, _CHUNK)), dtype=np.uint8)
    bit = np.empty_like(byte)
    for lo in range(0, words, _CHUNK):
        hi = min(words, lo + _CHUNK)
        rows, width = min(n, 64 * hi) - 64 * lo, 64 * (hi - lo)
        for b in range(-(-bits // 8)):
            byte[:, :rows] = src[:, 64 * lo : 64 * lo + rows, b]
            byte[:, rows:width] = 0  # the last word's missing elements count as 0
            for j in range(min(8, bits - 8 * b)):
                np.bitwise_and(byte[:, :width], np.uint8(1 << j), out=bit[:, :width])
                out[8 * b + j, :, 8 * lo : 8 * hi] = np.packbits(bit[:, :width], axis=-1, bitorder="little")
    return torch.from_numpy(out.view(np.int64))


def _bitslice_words(x: torch.Tensor, bits: int) -> torch.Tensor:
    """:func:`bitslice` with word arithmetic (any byte order, the reference)."""
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
    if sys.byteorder != "little" or planes.dtype != torch.int64:
        return ((planes.unsqueeze(-1) >> _SHIFTS) & 1).reshape(-1)[:n]
    raw = np.ascontiguousarray(planes.numpy()).reshape(-1).view(np.uint8)
    return torch.from_numpy(np.unpackbits(raw, count=n, bitorder="little").astype(np.int64))
