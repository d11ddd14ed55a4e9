"""Exact, order-preserving integer keys for float scores.

CrypTen's default fixed point keeps 16 fractional bits, so scores closer than
2^-16 would collide.  Instead each score becomes an integer key with the
radix-sort trick on its IEEE-754 bits: view the float as a signed integer b
(int32 for float32, int64 for float64) and flip every bit but the sign of the
negative ones, key = b if b >= 0 else b ^ 0x7F..F.  Then, for all floats but
NaN (which is rejected) and once -0.0 is normalised to +0.0 (x + 0.0),

    x < y  <=>  key(x) < key(y)        x == y  <=>  key(x) == key(y)

(+-inf included).  Keys are shared with CrypTen's integer encoding
(no scaling, exact in Z_2^64), by the project's own sharing
(:class:`.primitives.inputs.SourceSharing`, AES-CTR pads from seeds drawn with
:mod:`secrets`).

Limbs.  The secure comparison (:mod:`.sort.bitonic`) decides [x < y] from the
low ``COMPARE_BITS`` = 33 bits of the shared difference y - x, which is exact
when |y - x| < 2^32, i.e. when every key limb lies in a 32-bit range.  Hence

* float32-exact scores (every score equals its float32 rounding, as a model's
  float32 output does): one limb, the 32-bit key, in [-2^31, 2^31);
* otherwise: two limbs (hi, lo) of the 64-bit key, hi = key >> 32 in
  [-2^31, 2^31) and lo = key & (2^32 - 1) in [0, 2^32), compared
  lexicographically (lt = lt_hi + eq_hi lt_lo).

All parties must use the same number of limbs.  Decision: each client
secret-shares one bit, "my scores are not float32-exact"
(:func:`is_float32_exact`), and the parties open only whether any of these
bits is set (:func:`secure_auc.mpc.ranks.agree_limbs`, one secure equality
test); one limb iff none is (:func:`limbs_for`).  That one bit about all
clients together is all that is revealed about the scores' precision; if
any client's scores are float64, every key has two limbs (twice the radix
rounds) instead of being rounded.

Padding rows (to a power of two) get :func:`pad_keys`: hi limb ``PAD_KEY`` =
2^31 - 1, strictly larger than the key of every float, +inf included (float32
+inf: 0x7F800000; float64 +inf: hi = 0x7FF00000), so padding sorts after every
score and ties only with padding.
"""

from __future__ import annotations

import numpy as np

from ..validation import InputError
from .primitives.widths import COMPARE_BITS

__all__ = ["KEY_BITS", "COMPARE_BITS", "PAD_KEY", "is_float32_exact", "limbs_for", "encode_keys",
           "pad_keys", "share_keys"]

KEY_BITS = 32  # every limb lies in a range of 2^32 values; COMPARE_BITS = KEY_BITS + 1 for their differences
assert COMPARE_BITS == KEY_BITS + 1
PAD_KEY = (1 << 31) - 1  # hi limb of padding: larger than any float's key

_MASK32 = np.int64(0x7FFFFFFF)
_MASK64 = np.int64(0x7FFFFFFFFFFFFFFF)


def _as_scores(scores) -> np.ndarray:
    s = np.asarray(scores)
    if s.ndim != 1:
        raise InputError(f"scores must be one-dimensional, got shape {s.shape}")
    if s.dtype.kind not in "fiub":
        raise InputError(f"scores must be numbers, got dtype {s.dtype}")
    s = s.astype(np.float64)  # exact for float32 / float16 / ints up to 2^53
    nan = np.isnan(s)
    if nan.any():
        i = int(np.flatnonzero(nan)[0])
        raise InputError(f"score {i} is nan: NaN scores cannot be ranked")
    return s + 0.0  # -0.0 -> +0.0


def is_float32_exact(scores) -> bool:
    """True if every score equals its float32 rounding (each client's secret bit;
    only the AND over all clients is opened)."""
    s = _as_scores(scores)
    with np.errstate(over="ignore"):
        return bool(np.all(s.astype(np.float32).astype(np.float64) == s))


def limbs_for(float32_exact_flags) -> int:
    """Key limbs every party uses, from the float32-exact bits (or their AND)."""
    return 1 if all(bool(f) for f in float32_exact_flags) else 2


def encode_keys(scores, limbs: int) -> np.ndarray:
    """Integer keys of shape (n, limbs), int64; order and equality of the scores preserved exactly."""
    s = _as_scores(scores)
    if limbs == 1:
        with np.errstate(over="ignore"):
            f = s.astype(np.float32)
        if not np.all(f.astype(np.float64) == s):
            raise InputError("scores are not float32-exact: they need two key limbs")
        b = f.view(np.int32).astype(np.int64)
        key = np.where(b < 0, b ^ _MASK32, b)
        return key.reshape(-1, 1)
    if limbs == 2:
        b = s.view(np.int64)
        key = np.where(b < 0, b ^ _MASK64, b)
        return np.stack([key >> 32, key & np.int64(0xFFFFFFFF)], axis=1)
    raise ValueError(f"limbs must be 1 or 2, got {limbs}")


def pad_keys(count: int, limbs: int) -> np.ndarray:
    """``count`` padding keys (public), each larger than every score's key."""
    pad = np.zeros((count, limbs), dtype=np.int64)
    pad[:, 0] = PAD_KEY
    return pad


def share_keys(keys, sizes, sources, limbs: int):
    """Secret-share every source's keys and concatenate them in source order.

    ``keys``: this party's (n, limbs) int64 keys (:func:`encode_keys`), or None
    if it is not a source; ``sizes[k]`` rows come from party ``sources[k]``
    (both public).  Integer encoding.  Returns this party's (rows, limbs) int64
    shares.  The shares are AES-CTR pads from seeds each source draws from
    :mod:`secrets` (:class:`.primitives.inputs.SourceSharing`).
    """
    from .comm import backend
    from .primitives.inputs import SourceSharing

    rank = backend.rank()
    if rank in sources:
        n_k = sizes[sources.index(rank)]
        shape = tuple(np.shape(keys))
        if shape != (n_k, limbs):
            raise InputError(f"party {rank} has keys of shape {shape}, expected {(n_k, limbs)}")
    return SourceSharing(sizes, sources).share(keys, limbs, "keys")
