"""Giving freed memory back to the operating system between the sort's rounds.

Every party process keeps freed large blocks in glibc's heap
(:mod:`..comm.runtime`: high mmap and trim thresholds, so that a round reuses
the previous round's pages instead of mapping and zeroing new ones).  The
blocks of one round do not always fit the next round's requests, so the heap
grows round after round.  :func:`release_free_memory` (glibc's
``malloc_trim(0)``, which also returns whole free pages inside the heap) is
called once per round: the peak is then one round's working set, not the sum
of the rounds' fragments.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["release_free_memory"]

_libc = None


def release_free_memory() -> bool:
    """Return the heap's free pages to the OS; False where glibc's ``malloc_trim`` is missing."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _libc = False
    if not _libc:
        return False
    _libc.malloc_trim(0)
    return True
