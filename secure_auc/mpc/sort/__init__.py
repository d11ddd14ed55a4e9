"""Oblivious sorting of secret-shared keys (the MPC rank step's core)."""

from .bitonic import BitonicSort, bitonic_stages

__all__ = ["BitonicSort", "bitonic_stages"]
