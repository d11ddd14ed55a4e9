"""How many threads a computing party uses for its local work: light to import (no numba, no
torch), so that a launcher can size its parties without loading the kernels itself."""

from __future__ import annotations

import os

__all__ = ["default_threads", "check_threads"]


def default_threads() -> int:
    """The cores this process may use (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def check_threads(value, where: str = "threads") -> int:
    """``value`` as a thread count (a whole number, at least 1), else :class:`..validation.InputError`
    naming ``where``."""
    from ..validation import InputError

    try:
        n = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        n = None
    if n is None or n < 1 or (isinstance(value, float) and value != n):
        raise InputError(f"{where}: the threads per computing party must be a whole number at least 1, got {value!r}")
    return n
