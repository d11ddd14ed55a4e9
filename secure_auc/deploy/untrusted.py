r"""What a deployed party accepts from another, and what it tells it back.

A client's service runs on its organisation's host, next to its labels and its
model's scores; the server (and the platform's session behind it) is another
organisation.  So:

* **The epoch is a number, never a path.**  :func:`check_epoch` accepts a
  non-negative integer only (not ``True``, ``"1"``, ``1.0``, a list); the session,
  the server and every client each check it, and a client formats its
  configured file name with the checked ``int`` alone.
* **A refusal is a reason from a fixed list plus numbers.**  A client that
  cannot take part in an evaluation sends :func:`refusal` (a code of
  :data:`REASONS` and a few counts), never an exception's text, a path, a file's
  content, a score or a label; it writes the full detail in its own log.  The
  server turns the code into its own sentence (:func:`describe_refusal`) and
  refuses anything else it receives.
* **Remote strings are escaped in every log line** (:func:`escape`): a newline
  or another control character sent by a peer cannot forge a line.
* **A scoring hook's code is the operator's own** (:func:`check_private_code`):
  a module, or a folder on the import path, that another local user may write
  is refused, as ssh refuses a key file others can write.

Examples
--------
>>> check_epoch(3)
3
>>> check_epoch("0/../../secret")
Traceback (most recent call last):
...
secure_auc.validation.InputError: the epoch must be a non-negative integer, got '0/../../secret'
>>> refusal("scores-shape", got=3, expected=5)
{'refused': 'scores-shape', 'numbers': {'got': 3, 'expected': 5}}
>>> describe_refusal({'refused': 'scores-shape', 'numbers': {'got': 3, 'expected': 5}})
'its scores: 3 values for 5 labels (scores-shape)'
>>> describe_refusal({'refused': "/etc/passwd: 'AKIA' is not a number"})
'a malformed refusal (its reason is not one of the protocol)'
>>> escape("epoch 1\nforged line")
'epoch 1\\nforged line'
"""

from __future__ import annotations

import numbers
import os
import re
import stat
from pathlib import Path

from ..validation import InputError

__all__ = ["MAX_EPOCH", "REASONS", "check_epoch", "refusal", "describe_refusal", "escape", "check_private_code"]

MAX_EPOCH = 2**53  # exact in every JSON reader

#: The reasons a client may give for not taking part, each with the numbers it may add
#: (``{name}`` in the sentence) and the sentence the server and the session read.
REASONS: dict[str, tuple[tuple[str, ...], str]] = {
    "epoch": ((), "the epoch it was sent is not a non-negative integer"),
    "scores-unavailable": ((), "its scores for this epoch could not be read or computed"),
    "scores-shape": (("got", "expected"), "its scores: {got} values for {expected} labels"),
    "scores-not-finite": (("count",), "its scores: {count} value(s) that are not finite"),
    "budget": ((), "its privacy budget would be exceeded"),
    "ledger": ((), "its privacy ledger refused the charge"),
    "inputs": ((), "it could not read its own inputs"),
}

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def check_epoch(epoch, where: str = "the epoch") -> int:
    """``epoch`` as an ``int`` if it is a non-negative integer (a Python or NumPy integer,
    not a bool, at most :data:`MAX_EPOCH`); else an :class:`~secure_auc.validation.InputError`
    naming ``where`` (the value escaped and shortened)."""
    if isinstance(epoch, numbers.Integral) and not isinstance(epoch, bool) and 0 <= int(epoch) <= MAX_EPOCH:
        return int(epoch)
    shown = escape(repr(epoch))
    raise InputError(f"{where} must be a non-negative integer, got {shown[:60]}{'...' if len(shown) > 60 else ''}")


def refusal(code: str, **counts: int) -> dict:
    """The message a client sends for not taking part: ``code`` (one of :data:`REASONS`) and
    its integer ``counts``."""
    names, _ = REASONS[code]
    if set(counts) != set(names):
        raise ValueError(f"reason {code!r} takes the numbers {names}, got {sorted(counts)}")
    return {"refused": code, "numbers": {k: int(v) for k, v in counts.items()}}


def describe_refusal(msg) -> str:
    """The server's sentence for a client's refusal ``msg``; anything but a reason of
    :data:`REASONS` with exactly its integer numbers reads as malformed (nothing of it is
    repeated)."""
    code = msg.get("refused") if isinstance(msg, dict) else None
    if not isinstance(code, str) or code not in REASONS:
        return "a malformed refusal (its reason is not one of the protocol)"
    names, sentence = REASONS[code]
    got = msg.get("numbers") or {}
    if not isinstance(got, dict) or set(got) != set(names) or not all(
            isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**63 for v in got.values()):
        return f"a malformed refusal ({code} without its numbers)"
    return f"{sentence.format(**got)} ({code})"


def escape(text) -> str:
    """``text`` with every control character (newline, carriage return, escape, ...) written
    as its Python escape, for a log line that holds a string another party sent."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))


def _writable_by_others(st: os.stat_result) -> bool:
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) or st.st_uid not in (0, os.getuid())


def check_private_code(module_file: Path, folder: Path, what: str) -> None:
    """Refuse ``module_file`` (a hook's module) if it, or ``folder`` (put first on the
    import path) or a folder between them, is writable by another user or owned by one
    (root may own them): any of those could put its own code in the hook.  One line
    naming the file and its mode, as ssh names a key file others can read."""
    module_file, folder = Path(module_file), Path(folder)
    chain = [module_file] + [p for p in module_file.parents if p == folder or folder in p.parents]
    for path in chain:
        try:
            st = path.stat()
        except OSError as exc:
            raise InputError(f"{what}: cannot check {path} ({exc.strerror or exc})") from None
        if _writable_by_others(st):
            raise InputError(f"{what}: {path} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}, "
                             f"owner uid {st.st_uid}); its code would run as this client: chmod go-w it")
