"""Giving freed memory back to the operating system between the rank step's phases.

Every party process keeps freed large blocks in glibc's heap
(:mod:`..comm.runtime`: high mmap and trim thresholds, so that a round reuses
the previous round's pages instead of mapping and zeroing new ones).
:func:`release_free_memory` (glibc's ``malloc_trim(0)``, which also returns
whole free pages inside the heap) is called once, between the sort and the
mid-rank scan, and only from :data:`TRIM_MIN_ROWS` rows on: every trimmed page
is faulted in and zeroed again by the next step, which costs time, and below
that size the memory it saves is small.  Measured (this machine, radix rank
step): 2^20 scores among 3 parties, 7.0-7.5 s without the trim against 8.0-9.1 s
with it, peak 794-804 against 735-766 bytes per score; 2^22 scores, peak 671
(2 parties) and 646 (3) bytes per score without it, 564 and 614 with it.  A
trim after every radix round cost more (2^20 among 2 parties: 6.4-6.8 s against
5.0 s) and lowered the peak, reached after the rounds, by less than 5 %.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["release_free_memory", "TRIM_MIN_ROWS"]

TRIM_MIN_ROWS = 1 << 21  # trim between the sort and the scan from this many rows on

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
