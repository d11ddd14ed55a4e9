"""Oblivious sorting of secret-shared keys (the MPC rank step's core).

* :class:`BitonicSort` — Batcher's bitonic network, one batched comparison per
  stage, keeps the secret swap bits so the permutation can be undone.
* :class:`RadixSort` — LSD radix sort composing secret permutations, with
  secret shuffles (:mod:`secure_auc.mpc.shuffle`); no comparisons.
* :func:`secure_less`, :func:`secure_eq`, :func:`sign_bits` — comparisons of
  integer-encoded keys on the few bits they need (33 for 32-bit limbs).
"""

from .radix import RadixSort, digit_permutation
from .bitonic import (BitonicSort, Randomness, bitonic_stages, n_stages, open_masked, secure_eq, secure_less,
                      sign_bits)

__all__ = ["RadixSort", "digit_permutation", "BitonicSort", "Randomness", "open_masked", "bitonic_stages", "n_stages", "secure_eq", "secure_less", "sign_bits"]
