"""Keyed pseudo-random streams shared between two parties (or a party and the dealer).

Every use (a shuffle's pads, a batch of triples, an input share, a
permutation) has its own 128-bit key, derived by BLAKE2b (keyed with the
party's 128-bit seed from :mod:`secrets`) from the use's tags, so the two ends
regenerate the same stream and no stream is ever reused.

* :func:`ring` — uniform elements of Z_2^64 (pads, triples, shares): the
  AES-128-CTR keystream (the ``cryptography`` package, AES-NI), a
  cryptographic PRG, about 2 ms for 2^20 words here.
* :func:`stream` — a numpy Generator over AES-128 in counter mode
  (``randomgen.AESCounter``, AES-NI, keyed the same way) for the shuffles'
  permutations (``Generator.permutation``, Fisher-Yates, up to 2^16 rows; above,
  :func:`.shuffle.sort_permutation` sorts 32-bit :func:`ring` keys and shuffles only
  the runs of equal keys with it).  :func:`ring` draws a part of a stream (some rows,
  ``skip``; :func:`ring_part`) without the bytes before it: the counter starts there.

Nothing secret in this project draws from CrypTen's generators or torch's
(both Mersenne Twister, whose state is recovered from 624 outputs):
:func:`secure_auc.mpc.audit.forbid_crypten_randomness` makes a run fail if any
of them is used.  Parties on different machines should run the same numpy and
randomgen: the radix sort checks that every opened permutation is one.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import TYPE_CHECKING

import numpy as np
from randomgen import AESCounter
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

if TYPE_CHECKING:  # the seeds as tensors are a computing party's; a client host draws seeds without torch
    import torch

__all__ = ["new_seed", "stream", "ring", "ring_part", "seed_to_tensor", "tensor_to_seed"]

def new_seed() -> bytes:
    return secrets.token_bytes(16)


def _key(seed: bytes, tags: tuple) -> bytes:
    return hashlib.blake2b(repr(tags).encode(), key=seed, digest_size=16).digest()


def stream(seed: bytes, *tags) -> np.random.Generator:
    """A numpy Generator over the AES-128-CTR stream keyed by (``seed``, ``tags``)."""
    return np.random.Generator(AESCounter(key=int.from_bytes(_key(seed, tags), "little")))


_zeros = bytearray()


def _zero_bytes(nbytes: int) -> memoryview:
    global _zeros
    if len(_zeros) < nbytes:  # grown at least twofold: its pages are written once per growth
        _zeros = bytearray(max(nbytes, 2 * len(_zeros)))
    return memoryview(_zeros)[:nbytes]


def _fill(key: bytes, offset: int, out: np.ndarray) -> None:
    """Bytes ``offset`` to ``offset + out.nbytes`` of the AES-128-CTR keystream of ``key``
    into the contiguous ``out``: the counter starts at block ``offset // 16`` (the 128-bit
    big-endian counter of the stream that starts at 0), so a part of a stream is drawn
    without the bytes before it."""
    if not out.flags.c_contiguous:
        raise ValueError("a part of a stream is drawn into a contiguous array")
    skip = offset % 16
    enc = Cipher(algorithms.AES(key), modes.CTR((offset // 16).to_bytes(16, "big"))).encryptor()
    if skip:
        enc.update(bytes(skip))
    dst = memoryview(out.reshape(-1)).cast("B")  # a view: ``out`` is contiguous
    try:
        enc.update_into(_zero_bytes(out.nbytes), dst)
    except ValueError:  # an older ``cryptography`` that wants 15 bytes of room after the data
        dst[:] = enc.update(_zero_bytes(out.nbytes))


def ring(seed: bytes, tags: tuple, shape, dtype=np.int64, skip=()) -> np.ndarray:
    """Uniform elements of Z_2^64 (int64 array of ``shape``), or of Z_2^32 with
    ``dtype=np.int32``: the AES-128-CTR keystream under the key of ``tags``.

    ``skip``: rows (indices of the first axis) not drawn and left unset (the stream's
    other rows are the same as without ``skip``), for rows that the caller replaces or
    never reads.

    >>> s = bytes(16)
    >>> full = ring(s, ("x",), (3, 5), np.int32)
    >>> part = ring(s, ("x",), (3, 5), np.int32, skip=[1])
    >>> bool((part[[0, 2]] == full[[0, 2]]).all())
    True
    """
    dtype = np.dtype(dtype)
    key = _key(seed, tags)
    if len(skip):
        out = np.empty(shape, dtype=dtype)  # the skipped rows: not set
        drawn = np.setdiff1d(np.arange(out.shape[0]), np.asarray(skip, dtype=np.int64))
        row = out[0].nbytes if out.ndim else 0
        runs = np.split(drawn, np.flatnonzero(np.diff(drawn) != 1) + 1) if drawn.size else []
        for run in runs:  # each run of consecutive rows: one part of the stream
            _fill(key, int(run[0]) * row, out[int(run[0]) : int(run[-1]) + 1])
        return out
    n = int(np.prod(shape, dtype=np.int64))
    out = np.empty(n + 16 // dtype.itemsize, dtype=dtype)  # update_into may want len(data) + 15 bytes of room
    enc = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
    enc.update_into(_zero_bytes(dtype.itemsize * n), memoryview(out).cast("B"))
    return out[:n].reshape(shape)


def ring_part(seed: bytes, tags: tuple, start: int, out: np.ndarray) -> np.ndarray:
    """Words ``start`` to ``start + out.size`` of :func:`ring`'s stream of (``seed``, ``tags``)
    in ``out``'s dtype, into the contiguous ``out`` (the same values as that slice of a
    longer :func:`ring`, without drawing the words before it); returns ``out``.

    >>> s = bytes(16)
    >>> part = ring_part(s, ("x",), 7, np.empty(3, np.int32))
    >>> bool((part == ring(s, ("x",), (10,), np.int32)[7:]).all())
    True
    """
    _fill(_key(seed, tags), start * out.dtype.itemsize, out)
    return out


def seed_to_tensor(seed: bytes) -> torch.Tensor:
    import torch

    return torch.from_numpy(np.frombuffer(seed, dtype=np.int64).copy())


def tensor_to_seed(t: torch.Tensor) -> bytes:
    return t.numpy().astype(np.int64).tobytes()
