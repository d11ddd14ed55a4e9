"""Oblivious sorting of secret-shared keys (the MPC rank step's core).

* :class:`RadixSort` — LSD radix sort composing secret permutations, with
  secret shuffles (:mod:`secure_auc.mpc.primitives.shuffle`); no comparisons.
* :class:`BitonicSort` — Batcher's bitonic network, one batched comparison per
  stage, keeps the secret swap bits so the permutation can be undone.
"""

from .bitonic import BitonicSort, bitonic_stages, n_stages
from .radix import RadixSort, digit_permutation

__all__ = ["RadixSort", "digit_permutation", "BitonicSort", "bitonic_stages", "n_stages"]
