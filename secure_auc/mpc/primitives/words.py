r"""Words of several widths carried in one int64 message.

The project's messages (:mod:`..comm.p2p`, CrypTen's ``all_gather``) carry int64
tensors.  Shares in :math:`\mathbb{Z}_{2^{32}}` (int32) or in a small ring
:math:`\mathbb{Z}_{2^8}` (uint8) travel as their bytes, concatenated and padded
to whole int64 words (:func:`pack`), and are read back by views
(:func:`unpack`): a message of :math:`b` bytes of shares is
:math:`\lceil b / 8 \rceil` words, so int32 shares cost half as many bytes as
int64 ones.  Sums of shares wrap in each tensor's own ring
(:func:`add_into`).

Examples
--------
>>> import torch
>>> from secure_auc.mpc.primitives.words import pack, unpack
>>> parts = [torch.tensor([1, -2, 3], dtype=torch.int32), torch.tensor([7], dtype=torch.uint8)]
>>> w = pack(parts)
>>> w.dtype, w.numel()
(torch.int64, 2)
>>> [t.tolist() for t in unpack(w, parts)]
[[1, -2, 3], [7]]
"""

from __future__ import annotations

import torch

__all__ = ["pack", "unpack", "words_for", "add_into"]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def words_for(like) -> int:
    """int64 words that carry tensors shaped and typed like ``like``."""
    return -(-sum(_nbytes(t) for t in like) // 8)


def pack(tensors) -> torch.Tensor:
    """The bytes of ``tensors`` (any integer dtypes) concatenated, as an int64 vector."""
    tensors = list(tensors)
    if len(tensors) == 1:
        t = tensors[0]
        if t.dtype == torch.int64:
            return t.reshape(-1).contiguous()
        if _nbytes(t) % 8 == 0 and t.is_contiguous() and t.numel() and t.storage_offset() * t.element_size() % 8 == 0:
            # a view of the same bytes, no copy
            return t.reshape(-1).view(torch.int64)
    total = 8 * words_for(tensors)
    out = torch.empty(total, dtype=torch.uint8)
    offset = 0
    for t in tensors:
        n = _nbytes(t)
        if offset % t.element_size() == 0:  # straight into place
            out[offset : offset + n].view(t.dtype).copy_(t.reshape(-1))
        else:
            flat = torch.empty(t.numel(), dtype=t.dtype).copy_(t.reshape(-1))  # unit stride, even for one element
            out[offset : offset + n] = flat.view(torch.uint8)
        offset += n
    out[offset:].zero_()  # the padding of the last word
    return out.view(torch.int64)


def unpack(words: torch.Tensor, like) -> list[torch.Tensor]:
    """Tensors shaped and typed like ``like`` from :func:`pack`'s words (views, no copy)."""
    like = list(like)
    if len(like) == 1 and like[0].dtype == torch.int64:
        return [words.view(like[0].shape)]
    raw = words.view(torch.uint8)
    out, offset = [], 0
    for t in like:
        n = _nbytes(t)
        out.append(raw[offset : offset + n].view(t.dtype).view(t.shape))
        offset += n
    return out


def add_into(totals: list[torch.Tensor], parts: list[torch.Tensor], xor: int = 0) -> None:
    """``totals[i] += parts[i]`` (wrapping in the tensor's ring), or ``^=`` for the
    first ``xor`` tensors (XOR shares)."""
    for i, (t, p) in enumerate(zip(totals, parts)):
        if i < xor:
            t ^= p
        else:
            t += p
