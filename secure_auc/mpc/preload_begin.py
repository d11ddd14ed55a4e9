"""The first module the local launcher's fork server preloads (:data:`.forkserver.PRELOAD`).

A Ctrl-C reaches every process of the terminal's process group, the fork server too, which
may then be importing torch for seconds: it would print a ``KeyboardInterrupt`` traceback
from the middle of an import above the launcher's one line.  From this import until the last
preloaded module (:mod:`.warm_kernels`, which calls :func:`loaded`), SIGINT ends the fork
server silently with status 130; the launcher stops the run and says so.  A SIGINT that is
ignored (a background job) stays ignored.
"""

from __future__ import annotations

import os
import signal

__all__ = ["loaded"]


def _end_quietly(signum, frame):  # pragma: no cover - runs in the fork server only
    os._exit(128 + signum)


def loaded() -> None:
    """Every preloaded module is imported: SIGINT raises KeyboardInterrupt again (the fork server then
    ignores it while it serves, and each party forked from it gets Python's usual handler back)."""
    if signal.getsignal(signal.SIGINT) is _end_quietly:
        signal.signal(signal.SIGINT, signal.default_int_handler)


if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _end_quietly)
