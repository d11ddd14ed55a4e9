"""Whether the package's compiled code runs, and where it is cached: one folder per user, written once per machine,
never next to the installed package (the rank step's kernels, :mod:`secure_auc.mpc.kernels`,
and the intervals' pass, :mod:`secure_auc.interval_kernels`).  Light: numba is imported only
by :func:`use_cache`, which those modules call before they define anything.

Examples
--------
>>> import os
>>> from secure_auc.compile_cache import cache_dir
>>> cache_dir() == os.environ.get("NUMBA_CACHE_DIR", cache_dir()) and cache_dir().endswith("numba")
True
"""

from __future__ import annotations

import os

__all__ = ["enabled", "cache_dir", "use_cache"]


def enabled() -> bool:
    """Whether the compiled code runs (``SECURE_AUC_KERNELS=numpy``: the numpy/torch reference
    code instead, read at each call)."""
    return os.environ.get("SECURE_AUC_KERNELS", "numba").lower() != "numpy"


def cache_dir() -> str:
    """Where compiled code is cached: ``$NUMBA_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/secure-auc/numba``, else ``~/.cache/secure-auc/numba``."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return os.environ["NUMBA_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "secure-auc", "numba")


def use_cache() -> str:
    """Give numba :func:`cache_dir`, before any compiled function is defined: the environment
    (numba reads ``NUMBA_CACHE_DIR`` when it loads; processes started from here inherit it) and
    numba's configuration (numba loaded earlier by someone else); returns the folder."""
    folder = cache_dir()
    os.environ["NUMBA_CACHE_DIR"] = folder
    import numba

    numba.config.CACHE_DIR = folder
    return folder
