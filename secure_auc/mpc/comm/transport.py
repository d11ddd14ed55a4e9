r"""The sealed messages' transport: one TCP connection per pair of parties, driven by
the party that waits.

Why not gloo's point-to-point messages: each of them passes through gloo's I/O
thread and a wake-up of the waiting thread, about 0.15 ms of CPU per message at
each end and 0.43 ms per round trip of a small message between two processes
here, against 0.03 ms and 0.06 ms for a plain TCP round trip.  The rank step
among three parties exchanges about 500 messages per party, on two cores shared
by four processes.  Gloo still brings the process group up (torch's
rendezvous) and carries the handshake of :mod:`.secure`; after that every
message goes over this mesh.

Set-up (:func:`connect`, right after the handshake): every party listens on an
ephemeral port of its address towards the rendezvous host (loopback when that
host is local; the interface ``GLOO_SOCKET_IFNAME`` names, if set), publishes ``address:port`` in torch's rendezvous store,
connects to every lower rank and accepts every higher one.  The first bytes on
a connection are the connecting party's rank and a token sealed under the
link's key from the handshake (channel :data:`HELLO`): a connection is kept
only from the party whose key sealed it, anything else is closed.  New
connections are read side by side, each with :data:`HELLO_LIMIT` seconds to
present its token, so one that says nothing holds up neither the real party
nor the deadline.

Frames: a 12-byte header (channel: u32, length: u64), then the sealed message
(:class:`.channel.Link`).  The header steers the frame to the receive posted
for that (peer, channel), first come first served (TCP keeps each connection
in order), or to a stash until that receive is posted (a header announcing
more than :data:`MAX_FRAME` bytes is refused before anything is allocated).
The channel and the length are also in the message's associated data, so a
frame whose header was changed fails authentication.

Progress.  Sockets are non-blocking.  A send writes what the kernel takes at
once, in the calling thread (all of a small message: no thread hand-off, no
wake-up); the rest of a large one is queued, and written by a writer thread
while this party computes (which wakes a waiting party through a pipe when it
completes a send), and by the party itself whenever it waits.  Every
wait (for a receive, for a send to be written, a barrier) reads every arriving
frame, so two parties that send each other large messages never block each
other.  Every wait is bounded by the timeout and names the party waited for; a
closed connection names the party that closed it.
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import socket
import struct
import threading
import time

import numpy as np

from .channel import ChannelError, sealed_size

__all__ = ["Mesh", "connect", "local_address", "route_address", "interface_address", "HELLO", "MAX_FRAME"]

_FRAME = struct.Struct("<IQ")
MAX_FRAME = 1 << 34  # bytes: a frame announcing more is refused before anything is allocated
HELLO = 0xFFFFFFFF  # the channel of the connection's first message (never a data channel: tag 0xFFFF is unused)
_TOKEN = b"secure-auc mesh v1"
_IN, _OUT = select.POLLIN | select.POLLPRI, select.POLLOUT
_KEY = "secure-auc/mesh/{}"


class _Slot:
    """One message being received: its buffer, the bytes so far, whether complete (set
    only once its frame has arrived, even for an empty one)."""

    __slots__ = ("buf", "got", "done")

    def __init__(self, buf: memoryview):
        self.buf, self.got, self.done = buf, 0, False


class _Send:
    """A send's handle: complete once every byte is in the kernel's socket buffer."""

    __slots__ = ("mesh", "peer", "views", "done")

    def __init__(self, mesh: "Mesh", peer: int, views: list):
        self.mesh, self.peer, self.views, self.done = mesh, peer, views, False

    def is_completed(self) -> bool:
        return self.done

    def wait(self, *args, **kwargs) -> bool:
        if not self.done:
            self.mesh._progress(lambda: self.done, self.peer, "take")
        return True


class _Recv:
    """A receive's handle: complete once the frame is in ``out`` (copied from the stash if it
    arrived before the receive was posted)."""

    __slots__ = ("mesh", "peer", "slot", "out")

    def __init__(self, mesh: "Mesh", peer: int, slot: _Slot, out: np.ndarray | None):
        self.mesh, self.peer, self.slot, self.out = mesh, peer, slot, out

    def is_completed(self) -> bool:
        return self.slot.done

    def wait(self, *args, **kwargs) -> bool:
        if not self.slot.done:
            self.mesh._progress(lambda: self.slot.done, self.peer, "send")
        self.mesh._unwaited.pop(id(self.slot), None)
        if self.out is not None:  # it came before it was asked for
            if len(self.slot.buf) != self.out.size:
                raise self.mesh._mismatch(self.peer, len(self.slot.buf), self.out.size)
            self.out[:] = np.frombuffer(self.slot.buf, dtype=np.uint8)
            self.out = None
        return True


class Mesh:
    """This party's connections to every peer (``socks``: rank -> connected socket)."""

    def __init__(self, me: int, socks: dict[int, socket.socket], timeout: float, describe):
        self.me, self.socks, self.timeout, self.describe = me, socks, timeout, describe
        self._peer = {s.fileno(): p for p, s in socks.items()}
        self._poll = select.poll()
        for s in socks.values():
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._poll.register(s, _IN)
        self._out: dict[int, collections.deque] = {p: collections.deque() for p in socks}
        self._posted: dict[tuple[int, int], collections.deque] = collections.defaultdict(collections.deque)
        self._stash: dict[tuple[int, int], collections.deque] = collections.defaultdict(collections.deque)
        self._head = {p: memoryview(bytearray(_FRAME.size)) for p in socks}
        self._head_got = dict.fromkeys(socks, 0)
        self._reading: dict[int, _Slot | None] = dict.fromkeys(socks)
        self._events = dict.fromkeys(socks, _IN)  # what the poll watches per peer
        self._lock = threading.Lock()  # the send queues and writing on the sockets
        self._pending = threading.Condition(self._lock)
        self._failed: dict[int, ChannelError] = {}  # peers whose link broke (closed, or a write failed)
        self._unwaited: dict[int, tuple[int, int, _Slot]] = {}  # posted receives not waited for yet
        # the writer thread wakes a waiting main thread through this pipe when it completes a send
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poll.register(self._wake_r, select.POLLIN)
        threading.Thread(target=self._writer, name="secure-auc mesh writer", daemon=True).start()

    # ------------------------------------------------------------- messages

    def isend(self, peer: int, channel: int, data: np.ndarray) -> _Send:
        """Start sending the bytes ``data`` (uint8, contiguous; kept alive by the handle)."""
        self._check(peer)
        h = _Send(self, peer, [memoryview(_FRAME.pack(channel, data.size)), memoryview(data).cast("B")])
        with self._lock:
            q = self._out[peer]
            q.append(h)
            if len(q) == 1:
                self._write(peer)
            if q:
                self._pending.notify()
        return h

    def irecv(self, peer: int, channel: int, out: np.ndarray) -> _Recv:
        """Start receiving the next frame of ``channel`` from ``peer`` into ``out`` (uint8)."""
        early = self._stash.get((peer, channel))
        if early:  # (even from a peer that has left since: it arrived whole)
            return _Recv(self, peer, early.popleft(), out)
        self._check(peer)
        slot = _Slot(memoryview(out).cast("B"))
        self._posted[(peer, channel)].append(slot)
        self._unwaited[id(slot)] = (peer, channel, slot)
        return _Recv(self, peer, slot, None)

    def unclaimed(self) -> list[tuple[int, int, bytes]]:
        """(peer, channel, sealed bytes) of every frame received, whole or in part, that no
        waited-for receive has taken (after reading what the sockets hold now): what the
        audit must add to what the receives recorded."""
        for p in self.socks:
            if p not in self._failed:
                try:
                    self._read(p)
                except ChannelError as exc:
                    self._failed.setdefault(p, exc)
        early = [(p, ch, bytes(slot.buf[: slot.got])) for (p, ch), q in self._stash.items() for slot in q]
        return early + [(p, ch, bytes(slot.buf[: slot.got])) for p, ch, slot in self._unwaited.values() if slot.got]

    def _check(self, peer: int) -> None:
        if peer not in self.socks:
            raise ChannelError(f"no link to rank {peer}")
        if peer in self._failed:
            raise self._failed[peer]

    # ------------------------------------------------------------- progress

    def _progress(self, done, peer: int, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        poll, peers = self._poll.poll, self._peer
        while not done():
            if peer in self._failed:  # a link that broke matters only to whoever waits on it: a peer
                raise self._failed[peer]  # that is done and gone is no error for the others
            left = deadline - time.monotonic()
            if left <= 0:
                verb = "took no message" if what == "take" else "sent nothing"
                raise ChannelError(f"no answer from another party within the timeout: {self.describe(peer)} "
                                   f"{verb} for {self.timeout:g} s; the run cannot continue")
            for p, q in self._out.items():  # watch for room only where something waits to be written
                want = 0 if p in self._failed else _IN | (_OUT if q else 0)
                if self._events[p] != want:
                    if want:
                        self._poll.modify(self.socks[p], want)
                    else:  # a broken link is not watched any more (it would report a hang-up forever)
                        self._poll.unregister(self.socks[p])
                    self._events[p] = want
            for fd, ev in poll(min(left, 1.0) * 1000):
                if fd == self._wake_r:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                    continue
                p = peers[fd]
                try:
                    if ev & _OUT:
                        with self._lock:
                            self._write(p)
                    if ev & ~_OUT:
                        self._read(p)
                except ChannelError as exc:
                    if not exc.args[0].startswith("another party disconnected"):
                        raise  # a frame that fails: the run stops
                    self._failed.setdefault(p, exc)

    def _writer(self) -> None:
        """The writer thread: writes the queued rest of large messages while the party computes
        (it re-reads which peers have queued bytes at least every 20 ms)."""
        wait = select.poll()
        watched: set[int] = set()
        while True:
            with self._lock:
                while not any(q for p, q in self._out.items() if p not in self._failed):
                    self._pending.wait()
                busy = {self.socks[p].fileno(): p for p, q in self._out.items() if q and p not in self._failed}
            for fd in watched - busy.keys():
                wait.unregister(fd)
            for fd in busy.keys() - watched:
                wait.register(fd, _OUT)
            watched = set(busy)
            ready = wait.poll(20)
            with self._lock:
                for fd, _ in ready:
                    p = busy[fd]
                    try:
                        if self._write(p):
                            with contextlib.suppress(BlockingIOError):
                                os.write(self._wake_w, b"w")
                    except ChannelError as exc:
                        self._failed[p] = exc

    def _write(self, p: int) -> bool:
        """Write what the kernel takes of ``p``'s queue (the caller holds the lock); True if a
        send completed."""
        q, s = self._out[p], self.socks[p]
        completed = False
        while q:
            h = q[0]
            try:
                n = s.sendmsg(h.views)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                raise self._gone(p, exc) from None
            views = h.views
            while views and n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            if views:
                views[0] = views[0][n:]
                break
            h.done = True
            completed = True
            q.popleft()
        return completed

    def _read(self, p: int) -> None:
        s = self.socks[p]
        while True:
            slot = self._reading[p]
            if slot is None:
                head, got = self._head[p], self._head_got[p]
                n = self._recv_into(p, s, head[got:])
                if n is None:
                    return
                got += n
                self._head_got[p] = got
                if got < _FRAME.size:
                    continue
                self._head_got[p] = 0
                channel, length = _FRAME.unpack(head)
                posted = self._posted.get((p, channel))
                if posted:
                    slot = posted.popleft()
                    if len(slot.buf) != length:
                        raise self._mismatch(p, length, len(slot.buf))
                else:  # the header is not authenticated yet: no allocation beyond any message's size
                    if length > MAX_FRAME:
                        raise self._mismatch(p, length, f"at most {MAX_FRAME}")
                    slot = _Slot(memoryview(bytearray(length)))
                    self._stash[(p, channel)].append(slot)
                if length == 0:
                    slot.done = True
                    continue
                self._reading[p] = slot
            n = self._recv_into(p, s, slot.buf[slot.got :])
            if n is None:
                return
            slot.got += n
            if slot.got == len(slot.buf):
                slot.done = True
                self._reading[p] = None

    def _recv_into(self, p: int, s: socket.socket, view: memoryview) -> int | None:
        try:
            n = s.recv_into(view)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            raise self._gone(p, exc) from None
        if n == 0:
            raise self._gone(p, None)
        return n

    def _gone(self, p: int, exc: OSError | None) -> ChannelError:
        why = f" ({exc.strerror or exc})" if exc is not None else ""
        return ChannelError(f"another party disconnected: {self.describe(p)} closed its link{why} "
                            "(it crashed or was stopped); the run cannot continue")

    def _mismatch(self, p: int, length: int, expected: int | str) -> ChannelError:
        return ChannelError(f"a message from {self.describe(p)} to {self.describe(self.me)} failed authentication "
                            f"(a frame of {length} bytes where {expected} were expected); the run stops")


# ----------------------------------------------------------------- set-up


def interface_address(name: str) -> str | None:
    """The IPv4 address of network interface ``name`` (Linux), or None."""
    import fcntl

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
        return socket.inet_ntoa(packed[20:24])
    except (OSError, ImportError):
        return None


def route_address(addr: str) -> str | None:
    """This machine's address on the route to ``addr`` (no packet is sent), or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))
            return s.getsockname()[0]
    except OSError:
        return None


def local_address(master_addr: str) -> str:
    """The address this party listens on: that of the interface ``GLOO_SOCKET_IFNAME`` names
    (as gloo's), else loopback if ``master_addr`` is this machine, else this machine's
    address on the route to ``master_addr``."""
    named = os.environ.get("GLOO_SOCKET_IFNAME")
    address = interface_address(named.split(",")[0]) if named else None
    if address:
        return address
    if master_addr in ("localhost", "::1") or master_addr.startswith("127."):
        return "127.0.0.1"
    return route_address(master_addr) or socket.gethostbyname(socket.gethostname())


def _token(src: int, dst: int) -> np.ndarray:
    return np.frombuffer(_TOKEN + struct.pack("<ii", src, dst), dtype=np.uint8)


HELLO_LIMIT = 5.0  # seconds a new connection has to present its rank and token


def _hello_from(buf: bytes, me: int, world: int, links: dict, socks: dict) -> int | None:
    """The rank whose link key sealed this connection's first bytes, or None."""
    r = struct.unpack("<i", buf[:4])[0]
    if not me < r < world or r in socks:
        return None
    token = _token(r, me)
    out = np.empty(token.size, dtype=np.uint8)
    try:
        links[r].open(HELLO, 0, np.frombuffer(buf[4:], dtype=np.uint8), out)
    except ChannelError:
        return None
    return r if np.array_equal(out, token) else None


def _accept(listener: socket.socket, me: int, world: int, links: dict, socks: dict, deadline: float,
            timeout: float, describe) -> None:
    """Accept every higher rank's connection.  Connections are read side by side, each with
    :data:`HELLO_LIMIT` seconds to present its rank and token, so one that says nothing (or
    drips bytes) neither holds up the real party nor outlasts the deadline."""
    need = 4 + sealed_size(_token(0, 0).size)
    listener.setblocking(False)
    poll = select.poll()
    poll.register(listener, select.POLLIN)
    pending: dict[int, list] = {}  # fd -> [socket, bytes so far, its own deadline]
    refused = 0
    try:
        while len(socks) < world - 1:
            now = time.monotonic()
            for fd, (c, _, until) in list(pending.items()):
                if now >= until:
                    poll.unregister(fd)
                    c.close()
                    del pending[fd]
                    refused += 1
            if now >= deadline:
                missing = ", ".join(describe(r) for r in range(me + 1, world) if r not in socks)
                closed = f" ({refused} connection(s) that did not authenticate as a party were closed)" if refused else ""
                raise ChannelError(f"no answer from another party within the timeout: {missing} did not open "
                                   f"its link within {timeout:g} s{closed}; the run cannot continue")
            until = min([deadline] + [u for _, _, u in pending.values()])
            for fd, _ in poll.poll(max(1.0, (until - now) * 1000)):
                if fd == listener.fileno():
                    try:
                        c, _ = listener.accept()
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError as exc:
                        raise ChannelError(f"this party's link listener failed ({exc.strerror or exc}); "
                                           "the run cannot continue") from None
                    c.setblocking(False)
                    pending[c.fileno()] = [c, b"", min(deadline, time.monotonic() + HELLO_LIMIT)]
                    poll.register(c, select.POLLIN)
                    continue
                entry = pending[fd]
                try:
                    chunk = entry[0].recv(need - len(entry[1]))
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                entry[1] += chunk
                if chunk and len(entry[1]) < need:
                    continue
                poll.unregister(fd)
                del pending[fd]
                r = _hello_from(entry[1], me, world, links, socks) if chunk else None
                if r is None:  # closed early, or not the party it claims to be: the real one may still come
                    entry[0].close()
                    refused += 1
                else:
                    socks[r] = entry[0]
    finally:
        for c, _, _ in pending.values():
            c.close()


def connect(me: int, world: int, links: dict, store, master_addr: str, timeout: float, describe) -> Mesh:
    """Open this party's connections to every peer (module docstring) and return the mesh.
    ``links``: rank -> :class:`.channel.Link` from the handshake; ``store``: torch's
    rendezvous store."""
    host = local_address(master_addr)
    try:
        listener = socket.create_server((host, 0), backlog=max(1, world))
    except OSError as exc:
        raise ChannelError(f"cannot listen for links on {host} ({exc.strerror or exc}); "
                           "the run cannot continue") from None
    store.set(_KEY.format(me), f"{host}:{listener.getsockname()[1]}")
    deadline = time.monotonic() + timeout
    socks: dict[int, socket.socket] = {}
    try:
        for r in range(me):
            try:
                addr = store.get(_KEY.format(r)).decode()  # waits up to the store's timeout
            except Exception:  # noqa: BLE001 - torch raises several kinds
                raise ChannelError(f"no answer from another party within the timeout: {describe(r)} did not "
                                   f"publish its link address; the run cannot continue") from None
            try:
                h, port = addr.rsplit(":", 1)
                s = socket.create_connection((h, int(port)), timeout=max(0.1, deadline - time.monotonic()))
                socks[r] = s
                s.sendall(struct.pack("<i", me) + links[r].seal(HELLO, 0, _token(me, r)).tobytes())
            except (OSError, ValueError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise ChannelError(f"cannot reach {describe(r)} at {addr!r} ({why}); "
                                   "the run cannot continue") from None
        _accept(listener, me, world, links, socks, deadline, timeout, describe)
    except BaseException:
        for s in socks.values():
            s.close()
        raise
    finally:
        listener.close()
    return Mesh(me, socks, timeout, describe)
