"""Point-to-point messages between parties, outside CrypTen's own protocols.

The shuffle (:mod:`..primitives.shuffle`), the input sharing (:mod:`..primitives.inputs`) and the
openings to one party (:mod:`..primitives.opening`) send tensors from one party to one
other party, and the dealer sends each party its own correlated randomness.  These go over torch.distributed's default
group (every computing party and, with TTP, the dealer), with one tag per
purpose so they never match another message.  Every send and receive is
added to CrypTen's communication counters (bytes and rounds), so benchmark
figures include them.  Shapes are always public: the receiver allocates.
"""

from __future__ import annotations

import torch

__all__ = ["TAG_SEED", "TAG_DELTA", "TAG_PAD", "TAG_TRIPLE", "TAG_REQUEST", "TAG_OPEN", "TAG_SCATTER", "TAG_SUMS", "AfterWait", "isend", "recv", "irecv", "wait_all"]

TAG_SEED = 0x5A1  # a party's PRG seed (from the dealer, or from a source)
TAG_DELTA = 0x5A2  # the dealer's correction for a shuffle pass
TAG_PAD = 0x5A3  # a share masked with a one-time pad, sent to the pass's permuter
TAG_TRIPLE = 0x5A4  # the dealer's correction for a batch of multiplication triples (to rank 0)
TAG_REQUEST = 0x5A5  # rank 0's request to the dealer (sizes only)
TAG_OPEN = 0x5A6  # a share sent to the one party a value is opened to (:mod:`..primitives.opening`)
TAG_SCATTER = 0x5A7  # a slice of a share sent to the party that opens that slice for everyone
TAG_SUMS = 0x5A8  # an opened slice, sent to every other party


def _log(numel: int) -> None:
    from . import backend

    try:
        backend.log_communication(numel)
    except Exception:  # the dealer process counts nothing
        pass


def isend(tensor: torch.Tensor, dst: int, tag: int):
    """Start sending ``tensor`` (int64, contiguous) to rank ``dst``; returns the work handle.
    The caller keeps ``tensor`` alive until the handle's ``wait()``."""
    import torch.distributed as dist

    _log(tensor.numel())
    return dist.isend(tensor.contiguous(), dst=dst, tag=tag)


def irecv(shape, src: int, tag: int):
    """Start receiving an int64 tensor of ``shape`` from ``src``; returns (tensor, handle)."""
    import torch.distributed as dist

    out = torch.empty(shape, dtype=torch.long)
    _log(out.numel())
    return out, dist.irecv(out, src=src, tag=tag)


def recv(shape, src: int, tag: int) -> torch.Tensor:
    """Receive an int64 tensor of ``shape`` from ``src`` (blocks up to the process group's timeout)."""
    out, work = irecv(shape, src, tag)
    work.wait()
    return out


class AfterWait:
    """A torch.distributed work handle that runs ``then`` once, when its transfer has
    completed, and keeps ``keep`` (a buffer in flight) alive until then."""

    def __init__(self, work, then=None, keep=None):
        self._work, self._then, self._keep = work, then, keep

    def wait(self, *args, **kwargs):
        out = self._work.wait(*args, **kwargs)
        if self._then is not None:
            then, self._then = self._then, None
            then()
        self._keep = None
        return out

    def __getattr__(self, name):
        return getattr(self._work, name)


def wait_all(works) -> None:
    for w in works:
        w.wait()
