"""Oblivious sorting of secret-shared keys (the MPC rank step's core).

* :class:`BitonicSort` — Batcher's bitonic network, one batched comparison per
  stage, keeps the secret swap bits so the permutation can be undone.
* :func:`secure_less`, :func:`secure_eq`, :func:`sign_bits` — comparisons of
  integer-encoded keys on the few bits they need (33 for 32-bit limbs).
"""

from .bitonic import (BitonicSort, Randomness, bitonic_stages, n_stages, open_masked, secure_eq, secure_less,
                      sign_bits)

__all__ = ["BitonicSort", "Randomness", "open_masked", "bitonic_stages", "n_stages", "secure_eq", "secure_less", "sign_bits"]
