"""How many threads a computing party uses for its local work: light to import (no numba, no
torch), so that a launcher can size its parties without loading the kernels itself."""

from __future__ import annotations

import os

from ..validation import check_threads  # a check of the input, with the others

__all__ = ["default_threads", "check_threads"]


def default_threads() -> int:
    """The cores this process may use (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
