r"""Words of several widths carried in one int64 message.

The project's messages (:mod:`..comm.p2p`, CrypTen's ``all_gather``) carry int64
tensors.  Shares in :math:`\mathbb{Z}_{2^{32}}` (int32) or in a small ring
:math:`\mathbb{Z}_{2^8}` (uint8) travel as their bytes, concatenated and padded
to whole int64 words (:func:`pack`), and are read back by views
(:func:`unpack`): a message of :math:`b` bytes of shares is
:math:`\lceil b / 8 \rceil` words, so int32 shares cost half as many bytes as
int64 ones.  Sums of shares wrap in each tensor's own ring
(:func:`add_into`).  :class:`LowBytes` carries int32 words as their low bytes only,
for values needed modulo :math:`2^{8b}` (openings and shuffles of a window),
and int64 words likewise.

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

import functools
import sys

import numpy as np
import torch

__all__ = ["pack", "unpack", "words_for", "add_into", "LowBytes"]


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


class LowBytes:
    """int32 (or int64) words on the wire as their low ``nbytes`` bytes (rows of an
    (n, nbytes) uint8 tensor; :meth:`wire`), read back as values in [0, 2^(8 nbytes))
    (:meth:`summed`): shares summed in Z_2^32 (Z_2^64) keep the value's low bytes,
    whatever was dropped.

    Widths of a whole unsigned type (1 or 2 bytes of int32 words, 1, 2 or 4 of int64 ones)
    are one conversion each way (numpy's ``astype`` to that unsigned type keeps the low
    bytes; back, its values are the low bytes' value).  Other widths: packing writes each
    value's ``itemsize`` bytes at a stride of ``nbytes`` in increasing order (each write's
    high bytes are overwritten by the next value's low bytes), unpacking reads ``itemsize``
    bytes at that stride and masks (the last values from a padded copy): one pass each
    (numpy's unaligned strided copy).  The order of the writes is checked once
    (:func:`_ordered_strided_writes`); without it, a byte-wise copy.

    Examples
    --------
    >>> import torch
    >>> low = LowBytes(2)
    >>> w = low.wire(torch.tensor([1, -1, 70000], dtype=torch.int32))
    >>> w.shape, low.summed(w).tolist()
    (torch.Size([3, 2]), [1, 65535, 4464])
    >>> total = torch.tensor([5, 5, 5], dtype=torch.int32)
    >>> low.add_summed(total, w)
    >>> total.tolist()
    [6, 65540, 4469]
    """

    def __init__(self, nbytes: int, itemsize: int = 4):
        if sys.byteorder != "little":
            raise RuntimeError("low-bits openings assume a little-endian machine")
        if itemsize not in (4, 8) or not 1 <= nbytes <= itemsize:
            raise ValueError(f"{nbytes} low bytes of {itemsize}-byte words")
        self.nbytes, self.itemsize = nbytes, itemsize
        self.dtype = np.dtype(f"<i{itemsize}")
        self.mask = self.dtype.type((1 << (8 * nbytes)) - 1 if nbytes < itemsize else -1)
        self.unsigned = np.dtype(f"<u{nbytes}") if nbytes in (1, 2, 4) and nbytes < itemsize else None

    def like(self, n: int) -> torch.Tensor:
        """The wire form of ``n`` words (to size a receive; its values are not meant to be read)."""
        if self.nbytes < self.itemsize:
            return torch.empty((n, self.nbytes), dtype=torch.uint8)
        return self.wire(torch.zeros(n, dtype=torch.int32 if self.itemsize == 4 else torch.int64))

    def wire(self, t: torch.Tensor) -> torch.Tensor:
        n, nb, size = t.numel(), self.nbytes, self.itemsize
        if nb == size:
            return t.contiguous()
        if self.unsigned is not None:
            low = t.numpy().reshape(-1).astype(self.unsigned)  # (C's conversion to unsigned: modulo 2^(8 nb))
            return torch.from_numpy(low.view(np.uint8)).view(n, nb)
        if not _ordered_strided_writes(size):
            return t.new_empty(t.shape).copy_(t).view(torch.uint8).view(-1, size)[:, :nb].contiguous()
        buf = np.empty(nb * n + size, dtype=np.uint8)
        np.ndarray((n,), dtype=self.dtype, buffer=buf, strides=(nb,))[...] = t.numpy()
        return torch.from_numpy(buf[: nb * n]).view(n, nb)

    def summed(self, w: torch.Tensor) -> torch.Tensor:
        if self.nbytes == self.itemsize:
            return w.clone()
        n, nb, size = w.shape[0], self.nbytes, self.itemsize
        raw = np.ascontiguousarray(w.numpy()).reshape(-1)
        if self.unsigned is not None:
            return torch.from_numpy(raw.view(self.unsigned).astype(self.dtype))
        out = np.empty(n, dtype=self.dtype)
        inside = max(0, (nb * n - size) // nb + 1)  # reads of `size` bytes at a stride of nb inside the bytes
        if inside:
            np.bitwise_and(np.ndarray((inside,), dtype=self.dtype, buffer=raw, strides=(nb,)), self.mask,
                           out=out[:inside])
        if inside < n:  # the last few, from a padded copy
            tail = np.zeros(nb * (n - inside) + size, dtype=np.uint8)
            tail[: nb * (n - inside)] = raw[nb * inside :]
            out[inside:] = np.ndarray((n - inside,), dtype=self.dtype, buffer=tail, strides=(nb,)) & self.mask
        return torch.from_numpy(out)


    def add_summed(self, total: torch.Tensor, w: torch.Tensor) -> None:
        """``total += summed(w)`` (wrapping), in place; ``total`` a contiguous (n,) tensor of
        this codec's words."""
        if self.unsigned is not None and self.nbytes < self.itemsize and total.is_contiguous():
            raw = np.ascontiguousarray(w.numpy()).reshape(-1)
            out = total.numpy()
            np.add(out, raw.view(self.unsigned), out=out, casting="unsafe")
            return
        total += self.summed(w)


@functools.cache
def _ordered_strided_writes(itemsize: int = 4) -> bool:
    """Whether numpy writes an unaligned strided int32 (int64) view in increasing order (so
    that overlapping writes leave each value's low bytes)."""
    dtype = np.dtype(f"<i{itemsize}")
    x = np.arange(1, 40, dtype=dtype) * dtype.type(int("01" * itemsize, 16))
    nb = itemsize - 1
    buf = np.zeros(nb * x.size + itemsize, dtype=np.uint8)
    np.ndarray((x.size,), dtype=dtype, buffer=buf, strides=(nb,))[...] = x
    return bool(np.array_equal(buf[: nb * x.size], x.view(np.uint8).reshape(-1, itemsize)[:, :nb].reshape(-1)))
