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
  :func:`.shuffle.sort_permutation` sorts :func:`ring` keys and shuffles only
  the runs of equal keys with it).

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

__all__ = ["new_seed", "stream", "ring", "seed_to_tensor", "tensor_to_seed"]

def new_seed() -> bytes:
    return secrets.token_bytes(16)


def _key(seed: bytes, tags: tuple) -> bytes:
    return hashlib.blake2b(repr(tags).encode(), key=seed, digest_size=16).digest()


def stream(seed: bytes, *tags) -> np.random.Generator:
    """A numpy Generator over the AES-128-CTR stream keyed by (``seed``, ``tags``)."""
    return np.random.Generator(AESCounter(key=int.from_bytes(_key(seed, tags), "little")))


_zeros = bytearray()


def ring(seed: bytes, tags: tuple, shape, dtype=np.int64) -> np.ndarray:
    """Uniform elements of Z_2^64 (int64 array of ``shape``), or of Z_2^32 with
    ``dtype=np.int32``: the AES-128-CTR keystream under the key of ``tags``."""
    global _zeros
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    nbytes = dtype.itemsize * n
    if len(_zeros) < nbytes:
        _zeros = bytearray(nbytes)
    out = np.empty(n + 16 // dtype.itemsize, dtype=dtype)  # update_into may want len(data) + 15 bytes of room
    enc = Cipher(algorithms.AES(_key(seed, tags)), modes.CTR(bytes(16))).encryptor()
    enc.update_into(memoryview(_zeros)[:nbytes], memoryview(out).cast("B"))
    return out[:n].reshape(shape)


def seed_to_tensor(seed: bytes) -> torch.Tensor:
    import torch

    return torch.from_numpy(np.frombuffer(seed, dtype=np.int64).copy())


def tensor_to_seed(t: torch.Tensor) -> bytes:
    return t.numpy().astype(np.int64).tobytes()
