"""Every message between two parties over an authenticated TLS 1.3 link.

:func:`establish` opens, right after the process group is up, the mesh of TLS
links with every peer (the dealer included; :mod:`.transport`), each peer
authenticated against the roster and bound to this run (:mod:`.tls`), and then
replaces, in this process, the functions of ``torch.distributed`` that carry
data:

* ``send``/``recv``/``isend``/``irecv`` send each message over the mesh, on the
  channel (process group, tag), and receive it straight into the tensor;
* ``broadcast`` and ``all_gather`` become point-to-point messages on the
  links (one message per peer, each on its own tag);
* ``barrier`` is one zero byte to and from every member;
* ``reduce``, ``all_reduce``, ``gather`` and ``scatter`` are refused: nothing
  in the protocol uses them, and a ring reduce would leave partial sums
  at every party.

The links stand before the process group is made: the process group
(:func:`process_group`) is one that opens no socket and holds an in-memory
store, and every message of CrypTen's own set-up (its seeds, the dealer's
start) already goes over the links.  CrypTen's communicator and the project's
own messages both call these functions, so nothing travels in the clear, and
no listener but the rendezvous (:mod:`.rendezvous`) and the links' own waits
for peers.  Byte and round counters count the plaintext, as before.
"""

from __future__ import annotations


import torch
import torch.distributed

from . import tls
from .channel import ChannelError, public_bytes
from .transport import connect

__all__ = ["establish", "process_group", "BACKEND", "close", "mesh", "unclaimed_frames", "ChannelError", "TAG_BCAST", "TAG_GATHER", "TAG_BARRIER"]

TAG_BCAST = 0x5B1  # a broadcast, as one message per peer
TAG_GATHER = 0x5B2  # an all_gather, likewise
TAG_BARRIER = 0x5B3  # a barrier: one zero byte to and from every member


_MESH: list = []  # this process's mesh, once established


def unclaimed_frames() -> list[tuple[int, int, bytes]]:
    """Frames this process received that no receive took (:meth:`.transport.Mesh.unclaimed`)."""
    return _MESH[0].unclaimed() if _MESH else []


def mesh():
    """This process's :class:`.transport.Mesh`, or None (no secure links)."""
    return _MESH[0] if _MESH else None


def close() -> None:
    """End this process's links with close_notify (at shut-down)."""
    if _MESH:
        _MESH.pop().close()


class _Addresses:
    """The rendezvous's link addresses, read as :func:`.transport.connect` reads a store."""

    def __init__(self, addresses: dict):
        self._kv = {f"secure-auc/mesh/{r}": a.encode() for r, a in addresses.items()}

    def set(self, key, value) -> None:
        self._kv.setdefault(key, value.encode() if isinstance(value, str) else value)

    def get(self, key) -> bytes:
        return self._kv[key]


BACKEND = "secureauclinks"  # the process group's backend (and rendezvous scheme): no socket, no store


class _LinksGroup(torch.distributed.ProcessGroup):
    """A process group that opens no socket and carries nothing: every operation of
    ``torch.distributed`` that carries data is replaced by the links (:func:`establish`);
    an operation that reaches the group itself is refused."""

    def __init__(self, rank: int, size: int):
        super().__init__(rank, size)

    def getBackendName(self) -> str:
        return BACKEND


def _refuse(name):
    def op(self, *args, **kwargs):
        raise ChannelError(f"{name} reached the process group: every message goes over the secure links")
    return op


for _op in ("broadcast", "allreduce", "allreduce_coalesced", "reduce", "allgather", "allgather_coalesced",
            "_allgather_base", "gather", "scatter", "reduce_scatter", "_reduce_scatter_base", "alltoall",
            "alltoall_base", "send", "recv", "recv_anysource", "barrier", "monitored_barrier"):
    setattr(_LinksGroup, _op, _refuse(_op))


def process_group() -> None:
    """Make ``torch.distributed``'s rendezvous scheme and backend :data:`BACKEND` known (once
    per process): the process group CrypTen initialises then holds an in-memory store
    (``HashStore``) and a :class:`_LinksGroup`; it opens no socket.  Set
    ``RENDEZVOUS=secureauclinks://`` and ``DISTRIBUTED_BACKEND=secureauclinks``."""
    import sys
    from urllib.parse import parse_qs, urlparse

    import torch.distributed as dist

    if _REGISTERED:
        return

    def create(common, backend_options=None):
        return _LinksGroup(common.group_rank, common.group_size)

    def rendezvous(url, **kwargs):
        query = parse_qs(urlparse(url).query)
        yield dist.HashStore(), int(query["rank"][0]), int(query["world_size"][0])

    dist.Backend.register_backend(BACKEND, create, extended_api=True, devices=["cpu"])
    sys.modules["torch.distributed.rendezvous"].register_rendezvous_handler(BACKEND, rendezvous)
    _REGISTERED.append(True)


_REGISTERED: list = []


class _Done:
    def wait(self, *args, **kwargs):
        return True

    def is_completed(self):
        return True


def _as_bytes(tensor: torch.Tensor):
    """A uint8 view of a contiguous CPU tensor's storage (writes go through)."""
    import numpy as np

    if not tensor.is_contiguous():
        raise ChannelError("a non-contiguous tensor cannot be sent on a secure link")
    return tensor.detach().numpy().reshape(-1).view(np.uint8)


def establish(identity, roster, describe, timeout: float, *, me: int, world: int, addresses: dict, run: str,
              master_addr: str, listener) -> None:
    """Authenticate every peer against ``roster`` and route this process's messages over
    TLS links on the mesh of :mod:`.transport` (module docstring); every wait is bounded
    by ``timeout`` seconds.  ``addresses`` (rank -> ``"host:port"``), ``run``: what the
    rendezvous gave (:mod:`.rendezvous`); ``listener``: this party's link listener, whose
    address it checked in with.  Call once, before the process group is made
    (:func:`process_group`): every message of the process group's set-up goes over the links."""
    if roster.ranks() != world:
        raise ChannelError(f"the roster lists {roster.ranks()} parties but {world} joined")
    impostor = public_bytes(identity) != roster.key(me)
    try:
        mesh = connect(me, world, identity, roster.key, tls.binding("secure-auc links", roster.to_json(), world),
                       _Addresses(addresses), master_addr, timeout, describe, listener=listener, run=run)
    except ChannelError:
        if impostor:  # what every peer saw
            raise ChannelError(f"this party's identity key is not the roster's key for {describe(me)}") from None
        raise
    if impostor:  # (no peer should have accepted it)
        mesh.close()
        raise ChannelError(f"this party's identity key is not the roster's key for {describe(me)}")
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    _MESH[:] = [mesh]
    names: dict = {}

    def channel(group, tag: int) -> int:
        g = group if group is not None else dist.group.WORLD
        if g not in names:
            name = str(c10d._world.pg_names.get(g, "0"))
            names[g] = (int(name) if name.isdigit() else len(names) + 1000) & 0xFFFF
        if not 0 <= tag <= 0xFFFF:
            raise ChannelError(f"tag {tag} out of range for a secure link")
        return names[g] << 16 | tag

    def peer_of(peer) -> int:
        if peer is None or peer not in mesh.links:
            raise ChannelError(f"no secure link to rank {peer}")
        return peer

    def isend(tensor, dst=None, group=None, tag=0, **kw):
        return mesh.isend(peer_of(dst), channel(group, tag), _as_bytes(tensor))

    def irecv(tensor, src=None, group=None, tag=0, **kw):
        return mesh.irecv(peer_of(src), channel(group, tag), _as_bytes(tensor))

    def send(tensor, dst=None, group=None, tag=0, **kw):
        isend(tensor, dst, group=group, tag=tag).wait()

    def recv(tensor, src=None, group=None, tag=0, **kw):
        irecv(tensor, src, group=group, tag=tag).wait()
        return src

    def members(group) -> list[int]:
        if group is None or group is dist.group.WORLD:
            return list(range(dist.get_world_size()))
        return list(dist.get_process_group_ranks(group))

    def broadcast(tensor, src=None, group=None, async_op=False, **kw):
        if me == src:
            works = [isend(tensor, r, group=group, tag=TAG_BCAST) for r in members(group) if r != me]
            for w in works:
                w.wait()
        else:
            irecv(tensor, src, group=group, tag=TAG_BCAST).wait()
        return _Done() if async_op else None

    def all_gather(tensor_list, tensor, group=None, async_op=False, **kw):
        ranks = members(group)
        works = []
        for r, out in zip(ranks, tensor_list):
            if r == me:
                out.copy_(tensor)
            else:
                works.append(irecv(out, r, group=group, tag=TAG_GATHER))
        works += [isend(tensor.contiguous(), r, group=group, tag=TAG_GATHER) for r in ranks if r != me]
        for w in works:
            w.wait()
        return _Done() if async_op else None

    def barrier(group=None, async_op=False, **kw):
        others = [r for r in members(group) if r != me]
        works = [irecv(torch.empty(1, dtype=torch.uint8), r, group=group, tag=TAG_BARRIER) for r in others]
        works += [isend(torch.zeros(1, dtype=torch.uint8), r, group=group, tag=TAG_BARRIER) for r in others]
        for w in works:
            w.wait()
        return _Done() if async_op else None

    def refused(name):
        def op(*args, **kwargs):
            raise ChannelError(f"torch.distributed.{name} is not available on secure links: "
                               "a collective would mix shares outside the links")
        return op

    dist.isend, dist.irecv, dist.send, dist.recv = isend, irecv, send, recv
    dist.broadcast, dist.all_gather, dist.barrier = broadcast, all_gather, barrier
    for name in ("reduce", "all_reduce", "gather", "scatter", "reduce_scatter", "all_to_all"):
        setattr(dist, name, refused(name))
