"""Exact, order-preserving integer keys for float scores.

CrypTen's default fixed point keeps 16 fractional bits, so scores closer than
2^-16 would collide.  Instead each score is mapped to an integer key with the
radix-sort trick on its IEEE-754 bits: view the float as a signed integer b;
for negative floats flip every bit but the sign (b ^ 0x7FF..F).  Then

    x < y  <=>  key(x) < key(y)   and   x == y  <=>  key(x) == key(y)

for all finite floats, once -0.0 is normalised to +0.0 (x + 0.0).

CrypTen compares two shared integers by the sign of their difference in
Z_2^64, so a key must stay well inside +-2^62:

* float32-exact scores (every score equals its float32 rounding, as a model's
  float32 output does): one limb, the 32-bit key, |key| < 2^31.
* otherwise: two limbs (hi, lo) of the 64-bit key, hi = key >> 32 in
  [-2^31, 2^31), lo = key & (2^32 - 1) in [0, 2^32), compared lexicographically.

The number of limbs must be the same for every party; each client publishes
one bit ("my scores are float32-exact") and the parties use one limb only if
all are (:func:`limbs_needed`).
"""

from __future__ import annotations

import numpy as np

from ..validation import InputError

__all__ = ["is_float32_exact", "encode_keys", "PAD_KEY"]

# larger than any key limb (|limb| < 2^32): padding sorts after every real score
PAD_KEY = 1 << 40


def is_float32_exact(scores: np.ndarray) -> bool:
    s = np.asarray(scores, dtype=np.float64)
    return bool(np.all(s.astype(np.float32).astype(np.float64) == s))


def encode_keys(scores: np.ndarray, limbs: int) -> np.ndarray:
    """Integer keys of shape (n, limbs), int64; order and equality preserved exactly."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise InputError(f"scores must be one-dimensional, got shape {s.shape}")
    if not np.all(np.isfinite(s)):
        i = int(np.flatnonzero(~np.isfinite(s))[0])
        raise InputError(f"score {i} is {s[i]}: scores must be finite")
    s = s + 0.0  # -0.0 -> +0.0
    if limbs == 1:
        f = s.astype(np.float32)
        if not np.all(f.astype(np.float64) == s):
            raise InputError("scores are not float32-exact; use two limbs")
        b = f.view(np.int32).astype(np.int64)
        key = np.where(b < 0, b ^ 0x7FFFFFFF, b)
        return key.reshape(-1, 1)
    if limbs == 2:
        b = s.view(np.int64)
        key = np.where(b < 0, b ^ 0x7FFFFFFFFFFFFFFF, b)
        hi = key >> 32
        lo = key & 0xFFFFFFFF
        return np.stack([hi, lo], axis=1)
    raise ValueError(f"limbs must be 1 or 2, got {limbs}")
