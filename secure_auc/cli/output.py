"""What the command line shares between subcommands: output options, progress bars,
units, and the options that apply only to some mechanisms."""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import sys

from ..validation import InputError

__all__ = ["OneLineParser", "add_output_options", "progress_bar", "step_progress", "human_bytes", "resolve_defaults",
           "check_not_given", "apply_verbosity", "check_writable_dir", "json_safe", "Stopped", "stop_on_signals",
           "end_when_busy", "leave_on_stop", "stop_status"]


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser with a usage error in one line that names the command's --help (exit
    code 2), not the whole usage block first; its subcommands' parsers are of this class too."""

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        if message.startswith("the following arguments are required"):  # a mistyped option is the cause to name
            unknown = self._unknown_option()
            if unknown is not None:
                message = f"unrecognized arguments: {unknown}"
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _unknown_option(self) -> str | None:
        """The first of the given words that looks like an option and is none of this parser's
        (argparse names the missing required arguments first; a command with subcommands is
        left to them)."""
        if self._subparsers is not None:
            return None
        known = self._option_string_actions
        for word in getattr(self, "_given", ()):
            if word == "--":
                break
            if not word.startswith("-") or word == "-" or self._negative_number_matcher.match(word):
                continue
            name = word.split("=", 1)[0]
            if name in known or (not name.startswith("--") and name[:2] in known):  # -q, -qv, -n3
                continue
            if name.startswith("--") and self.allow_abbrev and any(o.startswith(name) for o in known):
                continue
            return word
        return None


def add_output_options(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true",
                   help="print only the result (and errors): no progress, no notes on stderr")
    g.add_argument("-v", "--verbose", action="store_true", help="also print the library's debug log on stderr")


def apply_verbosity(args) -> None:
    """--quiet: warnings and errors only; --verbose: debug records too.  NumPy's and SciPy's
    RuntimeWarnings (a division by zero where noise leaves an estimator undefined, which the
    report says in words) are shown with --verbose only."""
    import warnings

    logger = logging.getLogger("secure_auc")
    if getattr(args, "quiet", False):
        logger.setLevel(logging.WARNING)
    elif getattr(args, "verbose", False):
        logger.setLevel(logging.DEBUG)
    if not getattr(args, "verbose", False):
        warnings.simplefilter("ignore", RuntimeWarning)


def progress_enabled(args) -> bool:
    """Progress bars only for a person watching: not with --json or --quiet, and only on a terminal."""
    return not (getattr(args, "json", False) or getattr(args, "quiet", False)) and sys.stderr.isatty()


class _NoBar:
    def update(self, n=1):
        pass

    def set_postfix_str(self, s):
        pass

    def close(self):
        pass


@contextlib.contextmanager
def progress_bar(args, total: int, desc: str):
    """A tqdm bar on stderr, or a silent stand-in when :func:`progress_enabled` is false."""
    if not progress_enabled(args):
        yield _NoBar()
        return
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, file=sys.stderr, unit="step", leave=False, dynamic_ncols=True)
    try:
        yield bar
    finally:
        bar.close()


def step_progress(args, desc: str):
    """A ``progress(step, steps)`` callable for the library (:func:`secure_auc.dp.planning.plan_evaluations`):
    a tqdm bar on stderr opened at the first step and closed at the last, or None when
    :func:`progress_enabled` is false."""
    if not progress_enabled(args):
        return None
    bars = []

    def progress(step: int, steps: int) -> None:
        if not bars:
            from tqdm import tqdm

            bars.append(tqdm(total=steps, desc=desc, file=sys.stderr, unit="step", leave=False, dynamic_ncols=True))
        bars[0].update()
        if step >= steps:
            bars[0].close()

    return progress


def human_bytes(n: float) -> str:
    """``1234567`` -> ``'1.2 MB'`` (SI units, as network tools report)."""
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} TB"  # pragma: no cover


def resolve_defaults(args, defaults: dict) -> None:
    """Replace the options left unset (None) by their defaults."""
    for name, value in defaults.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)


def check_not_given(args, names, reason: str) -> None:
    """Refuse an option the user gave where it has no effect (instead of ignoring it silently)."""
    for name in names:
        if getattr(args, name, None) is not None:
            flag = "--" + name.replace("_", "-")
            raise InputError(f"{flag} does not apply {reason}")


def check_writable_dir(path) -> None:
    """The folder ``path`` exists (or can be created) and a file can be written in it: checked
    before long work whose results go there."""
    import os
    import tempfile
    from pathlib import Path

    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{p}: exists and is not a folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise InputError(f"{p}: cannot write there ({exc.strerror or exc})") from None
    if not os.access(p, os.W_OK):  # pragma: no cover - the test file above already failed
        raise InputError(f"{p}: cannot write there")


def json_safe(value):
    """Non-finite floats (an estimate that noise pushed out of range) as null: strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


_LEAVING: list = []  # not empty once leave_process has begun: a stop signal then changes nothing


def leave_process(code: int, message: str | None) -> None:
    """Print ``message`` and end the process at once with ``code``: no interpreter shutdown,
    whose destructors of a half-open process group (gloo threads still waiting) abort with
    SIGABRT and a C++ stack, and no traceback from a second signal meanwhile."""
    _LEAVING.append(code)
    import signal

    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
    except KeyboardInterrupt:  # Ctrl-C came first: this process leaves anyway, as it meant to
        pass
    if message:
        print(message, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class Stopped(KeyboardInterrupt):
    """A stop asked for by SIGTERM or SIGHUP (a scheduler's stop, a closed terminal), raised where the
    program is, as Ctrl-C raises KeyboardInterrupt: the same clean end, with the signal's exit status."""

    def __init__(self, signum: int):
        import signal

        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


def _raise_stopped(signum, frame):
    """SIGINT: KeyboardInterrupt, as Python's own handler; SIGTERM, SIGHUP: :class:`Stopped`.  Not
    between a TLS record's making and its sending (:func:`~secure_auc.interrupts.raise_when_safe`)."""
    if not _LEAVING:
        import signal

        from ..interrupts import raise_when_safe

        raise_when_safe(KeyboardInterrupt() if signum == signal.SIGINT else Stopped(signum))


def stop_on_signals(only_default: bool = False) -> None:
    """SIGTERM and SIGHUP raise :class:`Stopped` in the main thread (``only_default``: where the
    signal is not already ignored or handled, e.g. under ``nohup``); SIGINT, where Python handles
    it (not in a background job), still raises KeyboardInterrupt.  Each waits for the end of an
    :data:`~secure_auc.interrupts.uninterrupted` block."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if not only_default or signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _raise_stopped)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _raise_stopped)


def leave_on_stop(body, line):
    """``body()``'s result; a stop signal that escapes it (one that came while it reported an error:
    torchrun stops the other ranks when one fails) ends the process with the signal's status and
    ``line(name)`` (None: no line), never a traceback."""
    try:
        return body()
    except KeyboardInterrupt as exc:
        code, name = stop_status(exc)
        leave_process(code, line(name))


def end_when_busy(grace: float, line) -> None:
    """A stop signal (SIGINT, SIGTERM, SIGHUP) that the main thread has not acted on within
    ``grace`` seconds ends the process from a thread of its own, with the status the main
    thread would give (128 + the signal's number) and ``line(name)`` on stderr (None: no line).

    Python runs a signal's handler only between two bytecodes of the main thread, which can be
    inside one computation in native code (a compiled kernel, a sort of a million rows) for
    seconds while torchrun's agent waits for the process; the signal's number still reaches a
    pipe at once (:func:`signal.set_wakeup_fd`), where this thread reads it."""
    import signal
    import threading
    import time

    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    stops = {int(signal.SIGINT), int(signal.SIGTERM), int(signal.SIGHUP)}

    def watch():
        while True:
            got = [b for b in os.read(read, 64) if b in stops]
            if got:
                time.sleep(grace)  # the main thread's own end comes first, when it can
                name = signal.Signals(got[0]).name
                text = line(name)
                if text:
                    os.write(2, (text + "\n").encode())
                os._exit(128 + got[0])

    threading.Thread(target=watch, name="secure-auc stop when busy", daemon=True).start()


def stop_status(exc: BaseException) -> tuple[int, str]:
    """The exit status of a run ended by ``exc`` (KeyboardInterrupt or :class:`Stopped`), as the
    shell gives a program killed by the signal: 128 + its number (130 SIGINT, 143 SIGTERM, 129
    SIGHUP), and the signal's name."""
    import signal

    signum = getattr(exc, "signum", int(signal.SIGINT))
    return 128 + signum, signal.Signals(signum).name
