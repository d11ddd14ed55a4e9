"""Every message between two parties over an encrypted, authenticated link.

:func:`establish` runs the handshake of :mod:`.channel` with every peer (the
dealer included) right after the process group is up, checks every peer
against the roster, opens the mesh of TCP connections that carries the
messages from then on (:mod:`.transport`), and then replaces, in this
process, the functions of ``torch.distributed`` that carry data:

* ``send``/``recv``/``isend``/``irecv`` seal each message on its link
  (:class:`.channel.Link`), send it over the mesh and open it on arrival;
* ``broadcast`` and ``all_gather`` become point-to-point messages on the
  links (one sealed message per peer, each on its own tag);
* ``barrier`` is one sealed zero byte to and from every member;
* ``reduce``, ``all_reduce``, ``gather`` and ``scatter`` are refused: nothing
  in the protocol uses them, and a ring reduce would leave partial sums
  at every party.

CrypTen's communicator and the project's own messages both call these
functions, so nothing travels in the clear after the handshake, and nothing
but the handshake travels over gloo.  Byte and round counters count the
plaintext, as before.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from .channel import ChannelError, Link, derive_keys, ephemeral, public_bytes, sealed_size, sign, transcript, verify
from .p2p import AfterWait
from .transport import connect

__all__ = ["establish", "unclaimed_frames", "ChannelError", "TAG_HELLO", "TAG_BCAST", "TAG_GATHER", "TAG_BARRIER"]

TAG_HELLO = 0x5B0  # handshake: ephemeral keys, then signatures
TAG_BCAST = 0x5B1  # a broadcast, as one sealed message per peer
TAG_GATHER = 0x5B2  # an all_gather, likewise
TAG_BARRIER = 0x5B3  # a barrier: one zero byte to and from every member


_MESH: list = []  # this process's mesh, once established


def unclaimed_frames() -> list[tuple[int, int, bytes]]:
    """Frames this process received that no receive took (:meth:`.transport.Mesh.unclaimed`)."""
    return _MESH[0].unclaimed() if _MESH else []


class _Done:
    def wait(self, *args, **kwargs):
        return True

    def is_completed(self):
        return True


def _as_bytes(tensor: torch.Tensor) -> np.ndarray:
    """A uint8 view of a contiguous CPU tensor's storage (writes go through)."""
    if not tensor.is_contiguous():
        raise ChannelError("a non-contiguous tensor cannot be sent on a secure link")
    return tensor.detach().numpy().reshape(-1).view(np.uint8)


def _handshake(dist, identity, roster, describe) -> dict[int, Link]:
    """Every message of the handshake is sent and received before anything is checked, so
    that every party reaches the same verdict and names the same rank."""
    me, world = dist.get_rank(), dist.get_world_size()
    if roster.ranks() != world:
        raise ChannelError(f"the roster lists {roster.ranks()} parties but {world} joined")
    secret, mine = ephemeral()
    peers = [r for r in range(world) if r != me]
    sending = [dist.isend(torch.frombuffer(bytearray(mine), dtype=torch.uint8), r, tag=TAG_HELLO) for r in peers]
    theirs = {}
    for r in peers:
        buf = torch.empty(32, dtype=torch.uint8)
        dist.recv(buf, r, tag=TAG_HELLO)
        theirs[r] = bytes(buf.numpy())
    sigs = {r: torch.frombuffer(bytearray(sign(identity, transcript(me, r, mine, theirs[r]))), dtype=torch.uint8)
            for r in peers}
    sending += [dist.isend(sigs[r], r, tag=TAG_HELLO) for r in peers]
    received = {}
    for r in peers:
        buf = torch.empty(64, dtype=torch.uint8)
        dist.recv(buf, r, tag=TAG_HELLO)
        received[r] = bytes(buf.numpy())
    for w in sending:
        w.wait()
    if public_bytes(identity) != roster.key(me):
        raise ChannelError(f"this party's identity key is not the roster's key for {describe(me)}")
    links = {}
    for r in peers:
        if not verify(roster.key(r), received[r], transcript(r, me, theirs[r], mine)):
            raise ChannelError(f"{describe(r)} failed authentication: its key is not the roster's key for that "
                               "role (a process that is not in the roster, or one claiming another's rank)")
        send_key, recv_key = derive_keys(me, r, secret, mine, theirs[r])
        links[r] = Link(me, r, send_key, recv_key, describe)
    return links


def establish(identity, roster, describe, timeout: float | None = None) -> None:
    """Authenticate every peer against ``roster`` and route this process's messages over
    encrypted links on the mesh of :mod:`.transport` (module docstring); every wait is
    bounded by ``timeout`` seconds (default: the process group's).  Call once, right
    after the process group is up."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    links = _handshake(dist, identity, roster, describe)
    me = dist.get_rank()
    if timeout is None:
        timeout = c10d.default_pg_timeout.total_seconds()
    mesh = connect(me, dist.get_world_size(), links, c10d._get_default_store(),
                   os.environ.get("MASTER_ADDR", "127.0.0.1"), timeout, describe)
    _MESH[:] = [mesh]
    names: dict = {}

    def channel(group, tag: int) -> int:
        g = group if group is not None else dist.group.WORLD
        if g not in names:
            name = str(getattr(g, "group_name", "0"))
            names[g] = (int(name) if name.isdigit() else len(names) + 1000) & 0xFFFF
        if not 0 <= tag < 0xFFFF:  # 0xFFFF never: channel 0xFFFFFFFF is the mesh's HELLO (its nonces)
            raise ChannelError(f"tag {tag} out of range for a secure link")
        return names[g] << 16 | tag

    def link(peer) -> Link:
        if peer is None or peer not in links:
            raise ChannelError(f"no secure link to rank {peer}")
        return links[peer]

    def isend(tensor, dst=None, group=None, tag=0, **kw):
        ln, ch = link(dst), channel(group, tag)
        return mesh.isend(dst, ch, ln.seal(ch, ln.next_send(ch), _as_bytes(tensor)))

    def irecv(tensor, src=None, group=None, tag=0, **kw):
        ln, ch = link(src), channel(group, tag)
        seq = ln.next_recv(ch)
        out = _as_bytes(tensor)
        buf = np.empty(sealed_size(out.size), dtype=np.uint8)
        return AfterWait(mesh.irecv(src, ch, buf), lambda: ln.open(ch, seq, buf, out))

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
