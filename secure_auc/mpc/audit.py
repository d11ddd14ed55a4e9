"""What each party process actually receives, and a guard on CrypTen's randomness.

:func:`record_received` wraps every receiving function of ``torch.distributed``
(the lowest layer this project controls: CrypTen's communicator and the
project's own point-to-point messages both go through it) for the duration
of a block, and logs a copy of every buffer this process ends up holding
from another party, with the sender.  Installed after the encrypted links
(:mod:`.comm.secure`), it records the decrypted bytes, i.e. what the process
can read:

* ``recv`` / ``irecv``: the buffer, after the transfer completes;
* ``broadcast``: the buffer at every party but the source;
* ``all_gather``: every other party's contribution;
* ``gather`` / ``scatter``: what the root (resp. a non-root) receives;
* ``unclaimed frame``: at the end of the block, every frame the mesh of
  :mod:`.comm.transport` received that no receive took (still sealed: a
  complete record has none, which ``tests/mpc/test_leakage.py`` checks);
* ``input link``: every message a computing party receives from a client
  host, or a client host from a computing party (:mod:`.comm.inlinks`), after
  decryption (the sender is then the host's id :math:`-(h+1)` or the party's rank);
* ``reduce`` and ``all_reduce``: the buffer *after* the collective at every
  party, root or not: gloo's ring reduce leaves a fully summed chunk of the
  vector at every party, which is what such a party really holds (the sender
  is then ``None``, "several parties").

Received bytes are shares, masked values and public parameters; what a party
*learns* is what it computes from them.  So the recorder also logs every value
the process obtains by an opening (:data:`.primitives.observed.observers`), as a
record whose operation is the opening's kind, whose sender is ``None`` and whose
tag counts the process's openings (0, 1, ...), in the opened tensor's own dtype:

* ``open_all``: every value opened to every party (Beaver-masked values, the
  radix sort's digits and permutations, the one-bit key width);
* ``open_to`` / ``open_to_owners``: what the receiving party obtains (the
  server's aggregate, each client's ranks);
* ``rank shares``: the ranks a client host adds up from the computing parties'
  shares (:func:`.primitives.observed.reconstruct`).

``tests/mpc/test_leakage.py`` and ``tests/mpc/test_input_parties.py`` run the
protocol with this recorder in every process (the dealer and the client hosts
included), search each process's received bytes and opened values for any
fragment of another party's scores, keys, ranks, statistics or noise, in every
encoding they take, and test that the opened permutations and masked values
are independent of the scores.

:func:`forbid_crypten_randomness` makes any draw from CrypTen's random
generators (its triple providers, its pseudo-random zero shares; all torch
Mersenne Twisters) raise, so a test proves that no secret rests on them.

This module imports neither torch nor CrypTen itself: a client host, which never loads
them, runs its service inside :func:`forbid_crypten_randomness` too.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass

__all__ = ["Received", "record_received", "OPENINGS", "forbid_crypten_randomness", "CryptenRandomnessUsed"]

OPENINGS = ("open_all", "open_to", "open_to_owners", "rank shares")  # the operations of opened-value records


@dataclass(frozen=True)
class Received:
    """One buffer a process received, or values it opened: the operation (one of
    :data:`OPENINGS` for an opening), the sender's rank (None when several parties
    contributed to it, as in a reduce or an opening), the tag and the raw bytes."""

    op: str
    src: int | None
    tag: int
    dtype: str
    data: bytes


@contextlib.contextmanager
def record_received(log: list):
    """Append a :class:`Received` to ``log`` for every buffer this process receives
    inside the block (see the module docstring for what counts)."""
    import torch.distributed as dist

    from .comm.p2p import AfterWait

    me = dist.get_rank() if dist.is_initialized() else None
    pending: dict = {}  # id -> (op, src, tensor, tag) of receives not yet waited for

    def keep(op, src, tensor, tag=0):
        t = tensor.detach().contiguous()
        log.append(Received(op, src, int(tag), str(t.dtype).replace("torch.", ""), t.numpy().tobytes()))

    def later(op, src, tensor, tag, work):
        token = object()
        pending[id(token)] = (op, src, tensor, tag)

        def done():
            if pending.pop(id(token), None) is not None:
                keep(op, src, tensor, tag)

        done.token = token  # keeps the id unique while the work is alive
        return AfterWait(work, done)

    saved = {}

    def patch(name, make):
        saved[name] = getattr(dist, name)
        setattr(dist, name, make(saved[name]))

    def rank():
        return me if me is not None else dist.get_rank()

    def recv_(orig):
        def recv(tensor, src=None, group=None, tag=0, **kw):
            sender = orig(tensor, src=src, group=group, tag=tag, **kw)
            keep("recv", src if src is not None else sender, tensor, tag)
            return sender
        return recv

    def irecv_(orig):
        def irecv(tensor, src=None, group=None, tag=0, **kw):
            return later("irecv", src, tensor, tag, orig(tensor, src=src, group=group, tag=tag, **kw))
        return irecv

    def broadcast_(orig):
        def broadcast(tensor, src=None, group=None, async_op=False, **kw):
            work = orig(tensor, src, group=group, async_op=async_op, **kw)
            if src == rank():
                return work
            if async_op:
                return later("broadcast", src, tensor, 0, work)
            keep("broadcast", src, tensor)
            return work
        return broadcast

    def reduce_(name):
        def make(orig):
            def reduce(tensor, *args, async_op=False, **kw):
                work = orig(tensor, *args, async_op=async_op, **kw)
                if async_op:
                    return later(name, None, tensor, 0, work)
                keep(name, None, tensor)
                return work
            return reduce
        return make

    def all_gather_(orig):
        def all_gather(tensor_list, tensor, group=None, async_op=False, **kw):
            work = orig(tensor_list, tensor, group=group, async_op=async_op, **kw)
            ranks = dist.get_process_group_ranks(group) if group is not None else list(range(len(tensor_list)))
            if async_op:
                raise NotImplementedError("asynchronous all_gather is not recorded")
            for r, t in zip(ranks, tensor_list):
                if r != rank():
                    keep("all_gather", r, t)
            return work
        return all_gather

    def gather_(orig):
        def gather(tensor, gather_list=None, dst=0, group=None, async_op=False, **kw):
            work = orig(tensor, gather_list, dst, group=group, async_op=async_op, **kw)
            if dst == rank() and gather_list:
                ranks = dist.get_process_group_ranks(group) if group is not None else list(range(len(gather_list)))
                for r, t in zip(ranks, gather_list):
                    if r != rank():
                        keep("gather", r, t)
            return work
        return gather

    def scatter_(orig):
        def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False, **kw):
            work = orig(tensor, scatter_list, src, group=group, async_op=async_op, **kw)
            if src != rank():
                keep("scatter", src, tensor)
            return work
        return scatter

    def link_received(peer, channel, data):
        log.append(Received("input link", peer, int(channel), "uint8", data))

    openings = [0]

    def opened(kind, tensor):
        keep(kind, None, tensor, openings[0])
        openings[0] += 1

    from .comm import inlinks
    from .primitives import observed

    inlinks.observers.append(link_received)
    observed.observers.append(opened)
    patch("recv", recv_)
    patch("irecv", irecv_)
    patch("broadcast", broadcast_)
    patch("reduce", reduce_("reduce"))
    patch("all_reduce", reduce_("all_reduce"))
    patch("all_gather", all_gather_)
    patch("gather", gather_)
    patch("scatter", scatter_)
    try:
        yield log
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)
        inlinks.observers.remove(link_received)
        observed.observers.remove(opened)
        for op, src, tensor, tag in list(pending.values()):  # never waited for: what the buffer holds now
            keep(op, src, tensor, tag)
        pending.clear()
        from .comm.secure import unclaimed_frames

        for src, channel, data in unclaimed_frames():
            log.append(Received("unclaimed frame", src, channel, "sealed", data))


class CryptenRandomnessUsed(RuntimeError):
    """Something drew from CrypTen's (torch's Mersenne Twister) random generators."""


@contextlib.contextmanager
def forbid_crypten_randomness():
    """Inside the block, any call of CrypTen's random ring or bit generators (its
    TFP/TTP providers, the pseudo-random zero shares of ``cryptensor(src=...)``)
    raises :class:`CryptenRandomnessUsed`.

    The generators of the CrypTen modules loaded when the block starts are replaced; a process
    that has not loaded CrypTen (a client host, which never does) has none to replace, and
    CrypTen is not loaded for it."""
    names = ("generate_random_ring_element", "generate_kbit_random_tensor")
    saved = []
    if "crypten" in sys.modules:
        from .comm import backend

        modules = backend.random_generator_modules()
    else:
        modules = []

    def refuse(name):
        def refused(*args, **kwargs):
            raise CryptenRandomnessUsed(f"crypten's {name} was called: a secret would rest on torch's Mersenne Twister")
        return refused

    for _, mod in modules:
        for name in names:
            if hasattr(mod, name):
                saved.append((mod, name, getattr(mod, name)))
                setattr(mod, name, refuse(name))
    try:
        yield
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
