"""Oblivious sorting of secret-shared keys (the MPC rank step's core).

* :mod:`.registry` — the sorts by name (:class:`.registry.RankSort`, the interface each
  implements: sort, unsort, what it opens, its rounds); the one place a sort is chosen.
  It imports no torch: the command line reads the names.
* :class:`RadixSort` — LSD radix sort composing secret permutations, with
  secret shuffles (:mod:`secure_auc.mpc.primitives.shuffle`); no comparisons.
* :class:`BitonicSort` — Batcher's bitonic network, one batched comparison per
  stage, keeps the secret swap bits so the permutation can be undone.
* :mod:`.midranks` — the rank step's core over either: sort, mid-ranks in sorted order, unsort.
* :mod:`.digits` — the radix sort's digits of a key, as a client host computes them (numpy only).

The sorts' classes are imported when first named (``from secure_auc.mpc.sort import
RadixSort``), so that importing the registry does not load torch.
"""

__all__ = ["RadixSort", "digit_permutation", "BitonicSort", "bitonic_stages", "n_stages"]


def __getattr__(name):
    if name in ("BitonicSort", "bitonic_stages", "n_stages"):
        from . import bitonic

        return getattr(bitonic, name)
    if name in ("RadixSort", "digit_permutation"):
        from . import radix

        return getattr(radix, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
