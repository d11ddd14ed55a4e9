"""The local launcher's fork server: one process that imports torch, CrypTen, this package and
the compiled kernels once, from which every party of a local run is forked.

Kept apart from :mod:`.launch` and light to import (the standard library only), so that a
command can start the fork server first (:func:`prestart`) and let it import while the
command itself reads its input: the two imports then share the machine's cores instead of
running one after the other.

The fork server holds no secret (it only imports modules; every key, seed and pad is drawn
in the party, from :mod:`secrets`).  It starts under :func:`spawn_executable`, so the
kernel kills it when the launcher dies; :func:`interrupt_starts` kills it when a start that
waits on it is stopped.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import signal
import threading

log = logging.getLogger("secure_auc.mpc.launch")

# what every party imports: loaded once by the fork server, so a party starts in milliseconds
PRELOAD = ["secure_auc.mpc.preload_begin", "secure_auc.mpc.launch", "secure_auc.mpc.input_parties",
           "secure_auc.mpc.primitives.dealer", "secure_auc.mpc.audit", "secure_auc.mpc.comm.runtime",
           "secure_auc.mpc.roles.world", "secure_auc.mpc.roles.computing", "secure_auc.mpc.roles.host",
           "secure_auc.mpc.finish", "secure_auc.mpc.warm_kernels"]


def context():
    """The processes' start method: the fork server, where the platform has one (each party is
    a fork of it: no import per party, which costs seconds of CPU each); otherwise ``spawn``."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


_KEEPER_LOCK = threading.Lock()
_keeper: threading.Thread | None = None


def ensure_running(ctx) -> None:
    """Start the fork server (under the executable set now) from a thread that lives as long as
    this process.  The kernel's parent-death signal (``setpriv --pdeathsig``) fires when the
    *thread* that started a child ends: a fork server started from a session's own thread died
    when that session closed, and the next session in the process could not start a party."""
    global _keeper
    if ctx.get_start_method() != "forkserver":
        return
    from multiprocessing import forkserver

    with _KEEPER_LOCK:
        if _keeper is not None and _keeper.is_alive():
            forkserver.ensure_running()  # restarts it (from here) only if it died
            return
        started: list = []
        ready = threading.Event()

        def keep():
            try:
                forkserver.ensure_running()
            except BaseException as exc:  # noqa: BLE001 - re-raised by the caller below
                started.append(exc)
            ready.set()
            threading.Event().wait()  # never ends: the fork server's parent thread

        _keeper = threading.Thread(target=keep, name="secure-auc-fork-server", daemon=True)
        _keeper.start()
        ready.wait()
        if started:
            raise started[0]


_STARTING = 0  # spawns between their first and last process start (a start waits on the fork server)
_STARTING_LOCK = threading.Lock()


def interrupt_starts() -> bool:
    """Stop a start that waits on the fork server (still importing, or forking a long start
    message), from another thread: the fork server is killed, with it every party forked from it
    (each asks the kernel to die with its parent), and the waiting start fails at once.  A thread
    that runs :func:`.launch.spawn_parties` checks its ``stop`` event only between the starts; this is
    what a session's ``abort`` adds so that Ctrl-C during start-up ends the run within a second.
    Returns whether a start was interrupted (a later run starts a new fork server)."""
    with _STARTING_LOCK:
        if not _STARTING:
            return False
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid is None:
        return False
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    return True


PARTY = "secure-auc-"  # the name of every party's process; "...+main": one that needs the caller's __main__


def never_import_main() -> None:
    """Party processes never import the caller's ``__main__`` script.

    multiprocessing's ``spawn`` and ``forkserver`` start methods run the parent's main
    script again in each new process (as ``__mp_main__``) so that functions defined there
    can be unpickled; a script without ``if __name__ == "__main__":`` would then run its
    whole body again in every party: start parties of its own, charge its ledger, and fail.
    A party needs nothing from it (its job and every argument come from this package), so
    for the processes named ``secure-auc-...`` the preparation data sent to the new process
    leaves the main script out (the other processes of the program are left as they were).
    Only a job defined in the caller's script itself (``job.__module__ == "__main__"``,
    e.g. ``scripts/bench_rank.py``) keeps it: such a script needs the guard, as with
    multiprocessing.  Installed once; idempotent."""
    from multiprocessing import spawn as mp_spawn

    original = mp_spawn.get_preparation_data
    if getattr(original, "_secure_auc", False):
        return

    def get_preparation_data(name):
        data = original(name)
        if name.startswith(PARTY) and not name.endswith("+main"):
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
        return data

    get_preparation_data._secure_auc = True
    mp_spawn.get_preparation_data = get_preparation_data


_WRAPPERS: dict = {}  # (setpriv, python) -> the wrapper script of this process


def spawn_executable() -> str | None:
    """A wrapper that starts the party's Python under ``setpriv --pdeathsig KILL`` (util-linux),
    so that the kernel kills the party when the launcher dies even while the party is still
    importing its modules (seconds on a busy machine), before :func:`.launch._die_with_parent` runs.
    None where there is no ``setpriv`` (not Linux); the parties then rely on
    :func:`.launch._die_with_parent` alone.

    The script is written, once per launcher process, into a folder of its own made by
    :func:`tempfile.mkdtemp` (a new name, created by this process with mode 0700, so no
    other local user can have made it first, nor replace the script in it), and removed
    when the process exits.  No fixed, guessable path is ever used."""
    import atexit
    import shutil
    import sys
    import tempfile

    setpriv = shutil.which("setpriv")
    if not sys.platform.startswith("linux") or setpriv is None:
        return None
    key = (setpriv, sys.executable)
    path = _WRAPPERS.get(key)
    if path is not None and os.path.isfile(path):
        return path
    folder = tempfile.mkdtemp(prefix="secure-auc-")
    atexit.register(shutil.rmtree, folder, True)
    path = os.path.join(folder, "party-python")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700)
    with os.fdopen(fd, "w") as f:
        f.write(f"#!/bin/sh\nexec {setpriv} --pdeathsig KILL -- {sys.executable} \"$@\"\n")
    _WRAPPERS[key] = path
    return path


@contextlib.contextmanager
def starting(debug: bool | None = None):
    """The process starts of one run: under the :func:`spawn_executable` wrapper, with torch's
    C++ log quiet unless ``debug`` (default: the launcher's log at DEBUG), and counted, so that
    :func:`interrupt_starts` can stop a start that waits on the fork server."""
    global _STARTING
    from multiprocessing import spawn as mp_spawn

    python = mp_spawn.get_executable()
    wrapper = spawn_executable()
    never_import_main()
    cpp_log = os.environ.get("TORCH_CPP_LOG_LEVEL")
    if debug is None:
        debug = log.isEnabledFor(logging.DEBUG)
    try:
        if cpp_log is None:  # torch's C++ log (pages of frames when a peer goes away, a line per connect that
            # times out): only with the debug log; the launcher names every failure in one line itself
            os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR" if debug else "FATAL"
        if wrapper is not None:
            mp_spawn.set_executable(wrapper)  # only for these starts (restored below)
        with _STARTING_LOCK:
            _STARTING += 1
        yield
    finally:
        with _STARTING_LOCK:
            _STARTING -= 1
        mp_spawn.set_executable(python)
        if cpp_log is None:
            os.environ.pop("TORCH_CPP_LOG_LEVEL", None)


def prestart() -> bool:
    """Start the fork server now, without waiting for its imports (it imports in the background,
    about 6 CPU seconds with torch and CrypTen, compiling the kernels first where the user's cache
    lacks them); the next local run forks its parties from it.  A command that will run parties
    calls this before it imports anything heavy itself.  Returns whether a fork server was started
    or was already running (False where the platform has none).

    Examples
    --------
    >>> from secure_auc.mpc import forkserver
    >>> forkserver.prestart() in (True, False)
    True
    """
    ctx = context()
    if ctx.get_start_method() != "forkserver":
        return False
    with starting():
        ensure_running(ctx)
    return True
