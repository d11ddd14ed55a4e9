"""Record every value a party opens, to check what each party learns.

Every opening in CrypTen goes through ``reveal``/``reveal_batch`` of
``ArithmeticSharedTensor`` or ``BinarySharedTensor``.  :func:`record_openings`
wraps those four methods for the duration of a run and logs, for each call,
who receives the result (``dst``; None = every party), how many values, and
whether it is

* ``masked``: opened inside CrypTen's Beaver protocol (``x - a`` with a
  uniformly random one-time mask ``a`` from the triple provider): the result is
  uniformly distributed and independent of the data; or
* ``plaintext``: a real value, with the label the project's code gave it
  (:func:`label`).

``tests/mpc/test_protocol.py`` asserts on these logs that the server receives
exactly the aggregated noisy statistics and nothing else, and that each client
receives only the ranks of its own samples.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass

__all__ = ["Opening", "record_openings", "label", "open_to", "observe"]

_current_label: list[str] = ["unlabelled"]
_active_logs: list[list] = []  # the logs of the record_openings blocks now running


@dataclass(frozen=True)
class Opening:
    dst: int | None
    values: int
    kind: str  # "masked" or "plaintext"
    label: str

    def learned_by(self, rank: int) -> bool:
        return self.dst is None or self.dst == rank


@contextlib.contextmanager
def label(name: str):
    """Name the plaintext openings made inside this block."""
    _current_label.append(name)
    try:
        yield
    finally:
        _current_label.pop()


def open_to(tensor, dst: int, name: str):
    """Open a secret-shared tensor to party ``dst`` only; everyone else gets None."""
    from ._crypten import crypten

    with label(name):
        value = tensor.get_plain_text(dst=dst)
    return value if crypten.comm.get().get_rank() == dst else None


def observe(dst: int | None, values: int, kind: str, name: str) -> None:
    """Log an opening made outside CrypTen's ``reveal`` (the project's own gates,
    :func:`.sort.bitonic.open_masked`, and the shuffle's openings in
    :mod:`.shuffle`): ``kind`` is ``"masked"`` (one-time mask or secret shuffle,
    independent of the data) or ``"plaintext"``.  No-op unless a
    :func:`record_openings` block is running."""
    for log in _active_logs:
        log.append(Opening(dst, int(values), kind, name))


def _caller_is_beaver() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        mod = frame.f_globals.get("__name__", "")
        if mod == "crypten.mpc.primitives.beaver":
            return True
        if not mod.startswith("crypten.mpc.primitives") and not mod.startswith(__name__):
            return False
        frame = frame.f_back
    return False


@contextlib.contextmanager
def record_openings(log: list):
    from ._crypten import crypten

    prims = crypten.mpc.primitives
    classes = (prims.arithmetic.ArithmeticSharedTensor, prims.binary.BinarySharedTensor)
    saved = []

    def note(dst, values):
        kind = "masked" if _caller_is_beaver() else "plaintext"
        log.append(Opening(dst, int(values), kind, "beaver" if kind == "masked" else _current_label[-1]))

    for cls in classes:
        reveal, batch = cls.reveal, cls.__dict__["reveal_batch"]
        saved.append((cls, reveal, batch))

        def make_reveal(original):
            def reveal_wrapper(self, dst=None):
                note(dst, self.share.numel())
                return original(self, dst=dst)
            return reveal_wrapper

        def make_batch(original, cls=cls):
            def batch_wrapper(tensor_or_list, dst=None):
                if isinstance(tensor_or_list, cls):
                    return tensor_or_list.reveal(dst=dst)  # logged by reveal
                note(dst, sum(t.share.numel() for t in tensor_or_list))
                return original.__func__(tensor_or_list, dst=dst)
            return staticmethod(batch_wrapper)

        cls.reveal = make_reveal(reveal)
        cls.reveal_batch = make_batch(batch)
    _active_logs.append(log)
    try:
        yield log
    finally:
        _active_logs.remove(log)
        for cls, reveal, batch in saved:
            cls.reveal = reveal
            cls.reveal_batch = batch
