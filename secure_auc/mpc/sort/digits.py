"""The radix sort's digits of a key, as an input party computes them (numpy only).

A client host shares, besides its keys, every digit round's digit of each key
(:func:`key_digits`), :data:`DIGIT_BITS` bits each; the radix sort
(:class:`.radix.RadixSort`) reads them round by round.  This module imports neither torch,
CrypTen nor numba, so that a client host never loads them.

Examples
--------
>>> import numpy as np
>>> from secure_auc.mpc.encoding import encode_keys
>>> keys = encode_keys(np.array([-1.0, 0.0, 0.5]), 1)
>>> [key_digits(keys, l, DIGIT_BITS).tolist() for l in (15, 0)]  # the most significant digit, the least
[[1, 2, 2], [3, 0, 0]]
>>> digit_rounds(1), digit_rounds(2)
(16, 32)
"""

from __future__ import annotations

import numpy as np

__all__ = ["DIGIT_BITS", "digit_rounds", "key_digits"]

DIGIT_BITS = 2  # bits per digit of the radix sort (one-hot columns per digit: 2^bits - 1)


def digit_rounds(limbs: int, bits: int = DIGIT_BITS) -> int:
    """The digit rounds of keys of ``limbs`` 32-bit limbs, ``bits`` bits a digit."""
    return -(-32 * limbs // bits)


def key_digits(keys: np.ndarray, digit: int, bits: int) -> np.ndarray:
    """Digit ``digit`` (bits ``digit*bits ..``, least significant first) of the
    unsigned form of integer keys (n, limbs) from :func:`..encoding.encode_keys`: the
    first limb offset by 2^31 (to [0, 2^32)), limbs concatenated most significant
    first.  Returns (n,) int64 values in [0, 2^bits)."""
    limbs = keys.shape[1]
    value = np.zeros(keys.shape[0], dtype=np.int64)
    t = 0
    while t < bits and digit * bits + t < 32 * limbs:  # the digit's bits, a run within one limb at a time
        q = digit * bits + t
        col = limbs - 1 - q // 32
        take = min(bits - t, 32 - q % 32)
        limb = keys[:, col] + ((1 << 31) if col == 0 else 0)
        value |= ((limb >> (q % 32)) & ((1 << take) - 1)) << t
        t += take
    return value
