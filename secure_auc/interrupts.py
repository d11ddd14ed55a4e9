"""Ctrl-C while one of the package's commands starts: one line and status 130, not a traceback.

A command (``secure-auc ...``, ``python -m secure_auc ...``, a torchrun party started as
``python -m secure_auc.cli.compute``) spends about a second importing NumPy, SciPy and the
package before its own code runs.  A KeyboardInterrupt raised in there prints the imports'
traceback, and one raised inside an extension's start-up may even come out as an
ImportError.  So while such a process starts, SIGINT ends it at once: ``secure-auc:
interrupted`` on stderr (from rank 0 only under torchrun) and exit status 130, as a Ctrl-C
during a run ends it.  Each command's ``main`` gives SIGINT back to Python
(:func:`as_usual`) before it does anything, so its own handling of a stop (every party
stopped, nothing charged) is unchanged.

A program that imports the library is not a command (:func:`is_command_line`): nothing is
installed then, and a Ctrl-C during ``import secure_auc`` raises KeyboardInterrupt as usual.
An ignored SIGINT (a background job) stays ignored.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

__all__ = ["INTERRUPTED", "is_command_line", "while_starting", "as_usual", "uninterrupted", "raise_when_safe"]

INTERRUPTED = 130  # 128 + SIGINT: what the shell reports for a program that Ctrl-C ended


def is_command_line(orig_argv: list[str] | None = None) -> bool:
    """Whether this process is one of the package's commands: ``python -m secure_auc`` (or one
    of its modules, as torchrun starts ``secure_auc.cli.compute``), the ``secure-auc`` script or
    the torchrun entry script ``parties/mpc_party.py``.
    ``orig_argv``: the interpreter's own command line (default ``sys.orig_argv``).

    Examples
    --------
    >>> is_command_line(["python", "-u", "-m", "secure_auc", "evaluate"])
    True
    >>> is_command_line(["python", "-X", "importtime", "-m", "secure_auc.cli.compute", "--epochs", "2"])
    True
    >>> is_command_line(["/venv/bin/python", "/venv/bin/secure-auc", "serve"])
    True
    >>> is_command_line(["python", "-u", "parties/mpc_party.py", "c0.csv", "c1.csv"])
    True
    >>> is_command_line(["python", "-m", "pytest", "-m", "secure_auc"])
    False
    >>> is_command_line(["python", "train.py", "-m", "secure_auc"])
    False
    >>> is_command_line(["python", "-c", "import secure_auc"])
    False
    """
    argv = list(getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv)
    rest = iter(argv[1:])
    for arg in rest:  # the interpreter's own options, up to the module, the code or the script
        if arg.startswith("-m"):
            target = arg[2:] or next(rest, "")
            return target == "secure_auc" or target.startswith("secure_auc.")
        if arg in ("-X", "-W"):
            next(rest, None)
        elif arg in ("-c", "-", "--") or not arg.startswith("-"):
            return os.path.basename(arg) in ("secure-auc", "mpc_party.py")  # a script run by this interpreter
    return False


def _interrupted(signum, frame) -> None:
    if os.environ.get("RANK", "0") == "0":  # torchrun's Ctrl-C reaches every rank: one line in all
        os.write(2, b"secure-auc: interrupted\n")
    os._exit(INTERRUPTED)  # nothing is open yet: no clean-up to run


def while_starting() -> bool:
    """In a command's process, where SIGINT has Python's default handling: end the process at
    once on SIGINT until :func:`as_usual`.  Returns whether it did (never for a program that
    imports the library)."""
    if not is_command_line() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return False
    try:
        signal.signal(signal.SIGINT, _interrupted)
    except ValueError:  # not the main thread
        return False
    return True


def as_usual() -> None:
    """Give SIGINT back to Python (KeyboardInterrupt) if :func:`while_starting` had taken it
    (a no-op otherwise)."""
    if signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class _Uninterrupted:
    """``with uninterrupted:`` a few steps of the main thread that must happen together (a TLS
    record made, then queued: a record made and never sent breaks the link's sequence, and the
    peer reads the next one as forged).  A stop that :func:`raise_when_safe` raises meanwhile is
    raised when the block ends.  Other threads pass through (a signal's handler runs in the
    main thread only)."""

    depth = 0
    pending: BaseException | None = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            _Uninterrupted.depth += 1

    def __exit__(self, *exc_info):
        if threading.current_thread() is threading.main_thread():
            _Uninterrupted.depth -= 1
            if not _Uninterrupted.depth and _Uninterrupted.pending is not None:
                stop, _Uninterrupted.pending = _Uninterrupted.pending, None
                raise stop
        return False


uninterrupted = _Uninterrupted()


def raise_when_safe(stop: BaseException) -> None:
    """Raise ``stop`` (from a signal's handler) now, or at the end of the
    :data:`uninterrupted` block the main thread is in."""
    if _Uninterrupted.depth:
        _Uninterrupted.pending = stop
        return
    raise stop
