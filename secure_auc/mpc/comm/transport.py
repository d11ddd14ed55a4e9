r"""The links' transport: one TLS 1.3 connection per pair of parties, driven by the
party that waits.

Why not gloo's point-to-point messages: each of them passes through gloo's I/O
thread and a wake-up of the waiting thread, about 0.15 ms of CPU per message at
each end and 0.43 ms per round trip of a small message between two processes
here, against 0.03 ms and 0.06 ms for a plain TCP round trip.  The rank step
among three parties exchanges about 500 messages per party, on two cores shared
by four processes.  Every message goes over this mesh; gloo is used only by
the tests of the unprotected transport.

Set-up (:func:`connect`): every party listens on an ephemeral port of its
address towards the rendezvous host (loopback when that host is local; the
interface ``GLOO_SOCKET_IFNAME`` names, if set), checks in with ``address:port``
at the authenticated rendezvous (:mod:`.rendezvous`), connects to every lower rank and accepts every higher
one.  Each connection is a TLS 1.3 handshake (:mod:`.tls`): both ends present
a certificate of their roster identity key, issued under the run's binding
(the roster, the world size and a run id rank 0 draws), and each end checks
that the peer's key is the roster's key for the rank it claims; the accepting
(lower) rank then confirms the link in its first record.  New connections do
their handshakes side by side, each within :data:`.tls.HELLO_LIMIT` seconds and
at most :data:`.tls.MAX_PENDING` at once, so one that says nothing, or is not a
party, holds up neither the real party nor the deadline; it is closed and set-up
goes on.

Frames, inside the TLS stream: a 12-byte header (channel: u32, length: u64),
then the message.  Every byte is authenticated by TLS before it is read, the
header included.  The header steers the frame to the receive posted for that
(peer, channel), first come first served (the stream keeps each channel in
order), or to a stash until that receive is posted.  A stashed frame's buffer
grows only with the bytes that have arrived (nothing is allocated on a header's
word), a frame longer than :data:`MAX_FRAME` is refused, and the stash holds at
most :data:`MAX_STASHED` frames and :data:`MAX_STASH` bytes per peer.

Progress.  Sockets are non-blocking.  A send encrypts and writes what the
kernel takes at once, in the calling thread (all of a small message: no thread
hand-off, no wake-up); the rest of a large one is queued, and written by a
writer thread while this party computes (which wakes a waiting party through a
pipe when it completes a send), and by the party itself whenever it waits.
Every wait (for a receive, for a send to be written, a barrier) reads every
arriving frame, so two parties that send each other large messages never block
each other.  Every wait is bounded by the timeout and names the party waited
for; a closed connection names the party that closed it.  :meth:`Mesh.close`
ends every link with close_notify.

Rounds.  With :data:`TRACE_ENV` set, a mesh keeps the order of its sends and of
the receives its party waited for (:attr:`Mesh.trace`, :func:`message_depths`):
from the traces of every process, the length of the longest chain of messages
each party waited for, its message rounds.  Tests only: :data:`DELAY_ENV`
holds every message for a fixed number of milliseconds before it is written, a
network's one-way latency on loopback.
"""

from __future__ import annotations

import collections
import contextlib
import os
import secrets
import select
import socket
import struct
import threading
import time

import numpy as np

from ...interrupts import uninterrupted
from . import tls
from .channel import ChannelError

__all__ = ["Mesh", "FAREWELL", "connect", "listen_for_links", "local_address", "route_address", "interface_address", "MAX_FRAME", "MAX_STASH",
           "MAX_STASHED", "taps", "TRACE_ENV", "DELAY_ENV", "message_depths"]

_FRAME = struct.Struct("<IQ")
MAX_FRAME = 1 << 34  # bytes: a frame announcing more is refused
MAX_STASH = 1 << 33  # bytes of frames from one peer waiting for their receive
MAX_STASHED = 1 << 14  # frames from one peer waiting for their receive
_PIECE = 1 << 18  # plaintext encrypted at once for a send
_WIRE = 1 << 20  # bytes read from a socket at once
_IN, _OUT = select.POLLIN | select.POLLPRI, select.POLLOUT
_KEY = "secure-auc/mesh/{}"
FAREWELL = 0xFFFFFFFF  # the channel of a party's last word before it closes its links mid-step (Mesh.farewell)
FAREWELL_MAX = 4096  # bytes of it
_RUN = "secure-auc/mesh/run"

taps: list = []  # callables (peer, bytes): every plaintext byte this process reads from a peer (the audit)
TRACE_ENV = "SECURE_AUC_MESH_TRACE"  # set (to anything but "" or "0"): every mesh keeps its trace (benchmarks)
DELAY_ENV = "SECURE_AUC_TEST_LINK_DELAY_MS"  # tests only: milliseconds every message waits before it is written


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


class _Slot:
    """One message being received: its size, its buffer (the receive's, or for a stashed
    frame the list of the pieces that have arrived), the bytes so far, whether complete (set
    only once its frame has arrived, even for an empty one)."""

    __slots__ = ("size", "buf", "got", "done", "stashed")

    def __init__(self, size: int, buf: memoryview | list):
        self.size, self.buf, self.got, self.done = size, buf, 0, False
        self.stashed = isinstance(buf, list)  # counted in the stash's bounds

    def data(self) -> bytes:
        """The bytes received so far."""
        return b"".join(self.buf) if isinstance(self.buf, list) else bytes(self.buf[: self.got])


class _Send:
    """A send's handle: complete once every byte is in the kernel's socket buffer.  ``wire``:
    the message's TLS records not yet written (encrypted when it was sent, as a copy, so
    that the caller's buffer is free at once)."""

    __slots__ = ("mesh", "peer", "wire", "done")

    def __init__(self, mesh: "Mesh", peer: int, wire: list):
        self.mesh, self.peer, self.wire, self.done = mesh, peer, wire, False

    def is_completed(self) -> bool:
        return self.done

    def wait(self, *args, **kwargs) -> bool:
        if not self.done:
            self.mesh._progress(lambda: self.done, self.peer, "take")
        return True


class _Recv:
    """A receive's handle: complete once the frame is in ``out`` (copied from the stash if it
    arrived before the receive was posted)."""

    __slots__ = ("mesh", "peer", "slot", "out", "seq")

    def __init__(self, mesh: "Mesh", peer: int, slot: _Slot, out: np.ndarray | None, seq=None):
        self.mesh, self.peer, self.slot, self.out, self.seq = mesh, peer, slot, out, seq

    def is_completed(self) -> bool:
        return self.slot.done

    def wait(self, *args, **kwargs) -> bool:
        if not self.slot.done:
            self.mesh._progress(lambda: self.slot.done, self.peer, "send")
        self.mesh._unwaited.pop(id(self.slot), None)
        if self.seq is not None:  # the first wait for it, traced
            if self.mesh.trace is not None:
                self.mesh.trace.append(("r", self.peer, *self.seq))
            self.seq = None
        if self.out is not None:  # it came before it was asked for
            if self.slot.size != self.out.size:
                raise self.mesh._mismatch(self.peer, self.slot.size, self.out.size)
            at = 0
            for piece in self.slot.buf:
                self.out[at : at + len(piece)] = np.frombuffer(piece, dtype=np.uint8)
                at += len(piece)
            self.out = None
        return True


class Mesh:
    """This party's TLS connections to every peer (``links``: rank -> :class:`.tls.Session`
    whose handshake is complete).

    ``trace`` (with :data:`TRACE_ENV` set, else None): this party's messages in the order
    it sent them and waited for them, ``("s", peer, channel, k, bytes)`` for its k-th
    message to ``peer`` on ``channel`` and ``("r", peer, channel, k, bytes)`` when it first
    waited for its k-th from ``peer`` there; :meth:`mark` adds ``("m", name)``."""

    def __init__(self, me: int, links: dict[int, tls.Session], timeout: float, describe):
        self.me, self.links, self.timeout, self.describe = me, links, timeout, describe
        self.socks = {p: c.sock for p, c in links.items()}
        self._peer = {s.fileno(): p for p, s in self.socks.items()}
        self._poll = select.poll()
        for s in self.socks.values():
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._poll.register(s, _IN)
        self._out: dict[int, collections.deque] = {p: collections.deque() for p in links}
        self._posted: dict[tuple[int, int], collections.deque] = collections.defaultdict(collections.deque)
        self._stash: dict[tuple[int, int], collections.deque] = collections.defaultdict(collections.deque)
        self._stashed = {p: [0, 0] for p in links}  # frames, bytes waiting in the stash per peer
        self._head = {p: memoryview(bytearray(_FRAME.size)) for p in links}
        self._head_got = dict.fromkeys(links, 0)
        self._reading: dict[int, _Slot | None] = dict.fromkeys(links)
        self._scratch = memoryview(bytearray(1 << 20))  # a stashed frame's pieces pass through here
        self._wire = memoryview(bytearray(_WIRE))  # what a socket gives, fed to its link's TLS at once
        self._events = dict.fromkeys(links, _IN)  # what the poll watches per peer
        self._lock = threading.Lock()  # the send queues and writing on the sockets (each link's TLS state: its own lock)
        self._pending = threading.Condition(self._lock)
        self._failed: dict[int, ChannelError] = {}  # peers whose link broke (closed, or a write failed)
        self._unwaited: dict[int, tuple[int, int, _Slot]] = {}  # posted receives not waited for yet
        self._fresh = True  # the handshakes may have left bytes in the links' buffers
        self._count: collections.Counter = collections.Counter()  # messages so far per (direction, peer, channel)
        self.trace: list | None = [] if _env_flag(TRACE_ENV) else None
        self._delay = float(os.environ.get(DELAY_ENV, "0") or 0) / 1000  # seconds (tests only)
        self._later: collections.deque = collections.deque()  # (due, peer, send) held back by the delay
        if self._delay:
            threading.Thread(target=self._delayer, name="secure-auc mesh delay", daemon=True).start()
        # the writer thread wakes a waiting main thread through this pipe when it completes a send
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poll.register(self._wake_r, select.POLLIN)
        threading.Thread(target=self._writer, name="secure-auc mesh writer", daemon=True).start()

    # ------------------------------------------------------------- messages

    def isend(self, peer: int, channel: int, data: np.ndarray) -> _Send:
        """Start sending the bytes ``data`` (uint8, contiguous; encrypted at once, so the
        caller may reuse it)."""
        self._check(peer)
        head, body, c = _FRAME.pack(channel, data.size), memoryview(data).cast("B"), self.links[peer]
        key = ("s", peer, channel)
        with uninterrupted, c.lock:  # the link's TLS state (the writer thread meanwhile writes what is queued);
            # a stop signal waits until the records made are queued: one made and never sent would break the link
            if len(body) <= _PIECE:  # a small message and its header: one record
                wire = [memoryview(c.encrypt(head + body.tobytes()))]
            else:
                wire = [memoryview(c.encrypt(head))]
                wire += [memoryview(c.encrypt(body[i : i + _PIECE])) for i in range(0, len(body), _PIECE)]
            h = _Send(self, peer, wire)
            with self._lock:
                self._count[key] += 1
                if self.trace is not None:
                    self.trace.append((*key, self._count[key], data.size))
                if self._delay:  # written by the delay thread when due; the caller's send is done at once
                    self._later.append((time.monotonic() + self._delay, peer, h))
                    self._pending.notify_all()
                    held = _Send(self, peer, [])
                    held.done = True
                    return held
                q = self._out[peer]
                q.append(h)
                if len(q) == 1:
                    self._write(peer)
                if q:
                    self._pending.notify_all()
        return h

    def irecv(self, peer: int, channel: int, out: np.ndarray) -> _Recv:
        """Start receiving the next frame of ``channel`` from ``peer`` into ``out`` (uint8)."""
        key = ("r", peer, channel)
        self._count[key] += 1
        seq = (channel, self._count[key], out.size)
        early = self._stash.get((peer, channel))
        if early:  # (even from a peer that has left since: it arrived whole, or its bytes go on arriving)
            slot = early.popleft()
            slot.stashed = False
            self._stashed[peer][0] -= 1
            self._stashed[peer][1] -= slot.got
            return _Recv(self, peer, slot, out, seq)
        self._check(peer)
        slot = _Slot(out.size, memoryview(out).cast("B"))
        self._posted[(peer, channel)].append(slot)
        self._unwaited[id(slot)] = (peer, channel, slot)
        return _Recv(self, peer, slot, None, seq)

    def mark(self, name: str) -> None:
        """Add ``("m", name)`` to the trace (if kept): where a step of this party ends."""
        if self.trace is not None:
            self.trace.append(("m", name))

    def unclaimed(self) -> list[tuple[int, int, bytes]]:
        """(peer, channel, plaintext) of every frame received, whole or in part, that no
        waited-for receive has taken (after reading what the sockets hold now): what the
        audit must add to what the receives recorded."""
        for p in self.links:
            if p not in self._failed:
                try:
                    self._read(p)
                except ChannelError as exc:
                    self._failed.setdefault(p, exc)
        early = [(p, ch, slot.data()) for (p, ch), q in self._stash.items() for slot in q]
        return early + [(p, ch, slot.data()) for p, ch, slot in self._unwaited.values() if slot.got]

    def wire_bytes(self) -> int:
        """Bytes sent and received on the wire (TLS records and handshakes) over every link."""
        return sum(c.wire_in + c.wire_out for c in self.links.values())

    def close(self) -> None:
        """Write what is queued (within the timeout), then end every link with close_notify
        and close it."""
        end = time.monotonic() + self.timeout
        while self._later and time.monotonic() < end:  # messages the delay still holds
            time.sleep(0.001)
        for p, q in self._out.items():
            with contextlib.suppress(ChannelError):
                if q and p not in self._failed:
                    self._progress(lambda q=q: not q, p, "take")
        with self._lock:
            self._out = {p: collections.deque() for p in self.links}
        for c in self.links.values():
            c.close()

    def _check(self, peer: int) -> None:
        if peer not in self.links:
            raise ChannelError(f"no link to rank {peer}")
        if peer in self._failed:
            raise self._failed[peer]

    # ------------------------------------------------------------- progress

    def _progress(self, done, peer: int, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        poll, peers = self._poll.poll, self._peer
        if self._fresh:
            self._fresh = False
            for p in self.links:
                self._read_or_fail(p)
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
                if ev & _OUT:
                    try:
                        with uninterrupted, self._lock:  # bytes written are counted before a stop
                            self._write(p)
                    except ChannelError as exc:
                        self._failed.setdefault(p, exc)
                if ev & ~_OUT:
                    self._read_or_fail(p)

    def _read_or_fail(self, p: int) -> None:
        try:
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

    def _delayer(self) -> None:
        """The delay thread (tests only, :data:`DELAY_ENV`): queues each held message for
        writing once its delay has passed, in the order they were sent."""
        while True:
            with self._lock:
                while not self._later:
                    self._pending.wait()
                due = self._later[0][0]
            time.sleep(max(0.0, due - time.monotonic()))
            with self._lock:
                now = time.monotonic()
                while self._later and self._later[0][0] <= now:
                    _, peer, h = self._later.popleft()
                    q = self._out[peer]
                    q.append(h)
                    if len(q) == 1 and peer not in self._failed:
                        try:
                            self._write(peer)
                        except ChannelError as exc:
                            self._failed[peer] = exc
                    if q:
                        self._pending.notify_all()

    def _write(self, p: int) -> bool:
        """Write what the kernel takes of ``p``'s queue (the caller holds the lock); True if a
        send completed."""
        q, s = self._out[p], self.socks[p]
        completed = False
        while q:
            h = q[0]
            try:
                n = s.sendmsg(h.wire[:64])
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                raise self._gone(p, exc) from None
            wire = h.wire
            while wire and n >= len(wire[0]):
                n -= len(wire[0])
                wire.pop(0)
            if wire:
                wire[0] = wire[0][n:]
                break
            h.done = True
            completed = True
            q.popleft()
        return completed

    def _read(self, p: int) -> None:
        """Read every frame byte ``p``'s link holds now (decrypting what the socket gives)."""
        c = self.links[p]
        while True:
            slot = self._reading[p]
            if slot is None:
                head, got = self._head[p], self._head_got[p]
                n = self._plain(p, c, head[got:])
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
                    if slot.size != length:
                        raise self._mismatch(p, length, slot.size)
                else:
                    if length > MAX_FRAME:
                        raise self._mismatch(p, length, f"at most {MAX_FRAME}")
                    count = self._stashed[p]
                    if count[0] >= MAX_STASHED:
                        raise ChannelError(f"{self.describe(p)} sent more than {MAX_STASHED} messages that no "
                                           f"receive of {self.describe(self.me)} was waiting for; the run stops")
                    count[0] += 1
                    slot = _Slot(length, [])  # grows as its bytes arrive
                    self._stash[(p, channel)].append(slot)
                if length == 0:
                    slot.done = True
                    continue
                self._reading[p] = slot
            if isinstance(slot.buf, list):  # a stashed frame: a piece is kept as it arrives
                view = self._scratch[: min(len(self._scratch), slot.size - slot.got)]
                n = self._plain(p, c, view)
                if n is None:
                    return
                count = self._stashed[p] if slot.stashed else [0, 0]
                count[1] += n
                if count[1] > MAX_STASH:
                    raise ChannelError(f"{self.describe(p)} sent more than {MAX_STASH} bytes that no receive of "
                                       f"{self.describe(self.me)} was waiting for; the run stops")
                slot.buf.append(bytes(view[:n]))
            else:
                n = self._plain(p, c, slot.buf[slot.got :])
                if n is None:
                    return
            slot.got += n
            if slot.got == slot.size:
                slot.done = True
                self._reading[p] = None

    def _plain(self, p: int, c: tls.Session, view: memoryview) -> int | None:
        """Plaintext from ``p``'s link into ``view`` (every record fed, as far as ``view``
        goes): the number of bytes, None if nothing is there."""
        while True:
            with c.lock:
                try:
                    n = c.read_many(view)
                except EOFError:  # close_notify
                    raise self._gone(p, None) from None
                except tls.LinkError as exc:
                    raise ChannelError(f"a message from {self.describe(p)} to {self.describe(self.me)} failed "
                                       f"authentication ({exc}: modified, replayed, reordered, truncated or "
                                       "foreign); the run stops") from None
            if n is not None:
                for tap in taps:
                    tap(p, bytes(view[:n]))
                return n
            try:
                got = c.sock.recv_into(self._wire)
            except (BlockingIOError, InterruptedError):
                return None
            except OSError as exc:
                raise self._gone(p, exc) from None
            if not got:
                raise self._gone(p, None)
            with c.lock:
                c.feed(self._wire[:got])

    def _gone(self, p: int, exc: OSError | None) -> ChannelError:
        said = self._farewell_of(p)
        if said is not None:  # it said why before it closed its link
            err = ChannelError(f"another party disconnected: {self.describe(p)} ended the run "
                               f"({_printable(said.get('reason'))}); the run cannot continue")
            err.farewell, err.farewell_from = said, p
            return err
        why = f" ({exc.strerror or exc})" if exc is not None else ""
        return ChannelError(f"another party disconnected: {self.describe(p)} closed its link{why} "
                            "(it crashed or was stopped); the run cannot continue")

    def farewell(self, message: dict) -> None:
        """Tell every peer why this party ends the run in the middle of a step (``message``, a
        small JSON object): a peer waiting for it then reads it in the error its closed link
        raises (``farewell``), instead of "closed its link".  Best effort: sent before
        :meth:`close`, which writes it."""
        import json

        data = np.frombuffer(json.dumps(message).encode()[:FAREWELL_MAX], dtype=np.uint8)
        for p in self.links:
            if p not in self._failed:
                with contextlib.suppress(ChannelError, OSError):
                    self.isend(p, FAREWELL, data)

    def last_word(self, p: int, seconds: float) -> dict | None:
        """``p``'s farewell (:meth:`farewell`), reading what its link brings for up to ``seconds``
        until it closes; None if it said none (a step that failed elsewhere may have ended
        because ``p`` ended the run: this tells)."""
        end = time.monotonic() + seconds
        while True:
            said = self._farewell_of(p)
            if said is not None or p in self._failed:
                return said if said is not None else getattr(self._failed[p], "farewell", None)
            try:
                self._read(p)
            except ChannelError as exc:
                self._failed.setdefault(p, exc)
                return getattr(exc, "farewell", None)
            left = end - time.monotonic()
            if left <= 0:
                return None
            select.select([self.socks[p]], [], [], min(left, 0.05))

    def _farewell_of(self, p: int) -> dict | None:
        import json

        for slot in self._stash.get((p, FAREWELL), ()):
            if slot.done and slot.size <= FAREWELL_MAX:
                try:
                    said = json.loads(slot.data().decode())
                except (UnicodeDecodeError, ValueError):
                    return None
                return said if isinstance(said, dict) else None
        return None

    def _mismatch(self, p: int, length: int, expected: int | str) -> ChannelError:
        return ChannelError(f"a message from {self.describe(p)} to {self.describe(self.me)} does not fit "
                            f"(a frame of {length} bytes where {expected} were expected); the run stops")


def _printable(text) -> str:
    """``text`` (another party's) with its control characters escaped, for one log line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))[:500]


def message_depths(traces: dict[int, list]) -> dict[int, list[tuple[str, int]]]:
    """Message rounds from the processes' traces (:attr:`Mesh.trace`, by rank): per rank,
    ``(name, depth)`` at each of its marks and ``("end", depth)`` at the end of its trace.

    A party's depth is the length of the longest chain of messages, each sent by a party
    after it had waited for the previous one, that ends with a message it has waited for
    (Lamport's clock, counting a hop per message): with every message taking the same
    one-way latency and no computation, a party reaches each point of its trace after
    depth x latency.  A message from a process without a trace counts as already there.
    Raises ValueError if a trace waits for a message its sender's trace never sends."""
    sent: dict[tuple, int] = {}
    at, depth = dict.fromkeys(traces, 0), dict.fromkeys(traces, 0)
    out: dict[int, list] = {r: [] for r in traces}
    moved = True
    while moved:
        moved = False
        for r, trace in traces.items():
            i, d = at[r], depth[r]
            while i < len(trace):
                e = trace[i]
                if e[0] == "s":
                    sent[(r, e[1], e[2], e[3])] = d
                elif e[0] == "r":
                    key = (e[1], r, e[2], e[3])
                    if key in sent:
                        d = max(d, sent.pop(key) + 1)
                    elif e[1] in traces:
                        break  # its sender's trace has not got there yet
                else:
                    out[r].append((e[1], d))
                i += 1
            moved |= i != at[r]
            at[r], depth[r] = i, d
    stuck = [r for r, trace in traces.items() if at[r] < len(trace)]
    if stuck:
        r = stuck[0]
        raise ValueError(f"rank {r} waited for a message that rank {traces[r][at[r]][1]}'s trace never sends")
    for r in traces:
        out[r].append(("end", depth[r]))
    return out


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


def listen_for_links(master_addr: str, world: int) -> socket.socket:
    """This party's link listener: an ephemeral port of :func:`local_address`."""
    host = local_address(master_addr)
    try:
        return socket.create_server((host, 0), backlog=max(1, world))
    except OSError as exc:
        raise ChannelError(f"cannot listen for links on {host} ({exc.strerror or exc}); "
                           "the run cannot continue") from None


def connect(me: int, world: int, identity, keys, bound: bytes, store, master_addr: str, timeout: float,
            describe, *, listener: socket.socket | None = None, run: str | None = None) -> Mesh:
    """Open this party's TLS links to every peer (module docstring) and return the mesh.
    ``identity``: this party's Ed25519 private key; ``keys(rank)``: the roster's public key
    of ``rank``; ``bound``: the run's binding without its run id (:func:`.tls.binding` of
    the roster and the world size); ``store``: where each party's link address is read
    (``get``, ``set``: the rendezvous's addresses, :mod:`.rendezvous`); ``listener``: this
    party's link listener (:func:`listen_for_links`) if its address was given already;
    ``run``: the run's id if given already (else rank 0 draws it and puts it in ``store``)."""
    if run is None:
        if me == 0:
            store.set(_RUN, secrets.token_hex(16))
        try:
            run = store.get(_RUN).decode()  # waits up to the store's timeout
        except Exception:  # noqa: BLE001 - torch raises several kinds
            raise ChannelError(f"no answer from another party within the timeout: {describe(0)} did not publish "
                               "the run's id; the run cannot continue") from None
    bound = tls.binding("secure-auc mesh v2", bound, run)
    if listener is None:
        listener = listen_for_links(master_addr, world)
        host, port = listener.getsockname()[:2]
        store.set(_KEY.format(me), f"{host}:{port}")
    deadline = time.monotonic() + timeout
    links: dict[int, tls.Session] = {}
    try:
        failed: list[ChannelError] = []  # a link to a lower rank that failed: the higher ones are still
        if me:  # served, so that every party names the same culprit, and then the first failure is raised
            client = tls.context(identity, f"rank {me}", bound, server_side=False)
        for r in range(me):
            try:
                links[r] = _dial(r, me, client, keys, store, deadline, timeout, describe)
            except ChannelError as exc:
                if str(exc).startswith("no answer"):
                    raise
                failed.append(exc)
        if me < world - 1:
            server = tls.context(identity, f"rank {me}", bound, server_side=True)
            try:
                links.update(_accept(listener, server, me, world, keys, deadline, timeout, describe))
            except ChannelError as exc:
                failed.append(exc)
        if failed:
            raise failed[0]
    except BaseException:
        for c in links.values():
            c.sock.close()
        raise
    finally:
        listener.close()
    return Mesh(me, links, timeout, describe)


def _dial(r: int, me: int, ctx, keys, store, deadline: float, timeout: float, describe) -> tls.Session:
    """Connect to rank ``r`` (lower), check its key, and wait for its confirmation."""
    try:
        addr = store.get(_KEY.format(r)).decode()  # waits up to the store's timeout
    except Exception:  # noqa: BLE001 - torch raises several kinds
        raise ChannelError(f"no answer from another party within the timeout: {describe(r)} did not "
                           f"publish its link address; the run cannot continue") from None
    try:
        h, port = addr.rsplit(":", 1)
        s = socket.create_connection((h, int(port)), timeout=max(0.1, deadline - time.monotonic()))
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ChannelError(f"cannot reach {describe(r)} at {addr!r} ({why}); the run cannot continue") from None
    c = tls.Session(s, ctx, server_side=False)

    def check(c: tls.Session) -> None:
        if c.key != keys(r) or c.role != f"rank {r}":
            raise ChannelError(f"{describe(r)} failed authentication: its key is not the roster's key for that "
                               "role (a process that is not in the roster, or one claiming another's rank)")

    try:
        s.settimeout(max(0.1, deadline - time.monotonic()))
        tls.handshake(c, deadline, check)
    except ChannelError:
        s.close()
        raise
    except TimeoutError:
        s.close()
        raise ChannelError(f"no answer from another party within the timeout: {describe(r)} did not complete "
                           f"its link within {timeout:g} s; the run cannot continue") from None
    except (EOFError, tls.LinkError, OSError) as exc:
        s.close()
        raise ChannelError(f"{describe(r)} refused the link from {describe(me)} ({str(exc) or 'it closed the connection'}: its roster "
                           "or run is not this party's, or this party's key is not the roster's key for its "
                           "rank); the run cannot continue") from None
    return c


def _accept(listener: socket.socket, ctx, me: int, world: int, keys, deadline: float, timeout: float,
            describe) -> dict[int, tls.Session]:
    """Accept every higher rank's link (:func:`.tls.accept`: handshakes side by side, each
    within a time limit; a connection that is not a party is closed, the real one may still
    come)."""
    impostors: set[int] = set()

    def admit(c: tls.Session):
        role = c.role or ""
        r = int(role[5:]) if role.startswith("rank ") and role[5:].isdigit() else -1
        if not me < r < world:
            return f"a connection claiming {role!r}"
        if c.key != keys(r):
            impostors.add(r)
            return f"a connection claiming {describe(r)} with another key"
        return r

    try:
        links, refused = tls.accept(listener, ctx, admit, world - 1 - me, deadline)
    except tls.LinkError as exc:
        raise ChannelError(f"this party's link listener failed ({exc}); the run cannot continue") from None
    if len(links) < world - 1 - me:
        for c in links.values():
            c.sock.close()
        missing = [r for r in range(me + 1, world) if r not in links]
        bad = [describe(r) for r in missing if r in impostors]
        failed = f"{', '.join(bad)} failed authentication (a connection claiming it presented another key); " \
            if bad else ""
        closed = f" ({len(refused)} connection(s) that did not authenticate as a party were closed)" if refused else ""
        raise ChannelError(f"{failed}no answer from another party within the timeout: "
                           f"{', '.join(describe(r) for r in missing)} did not open its link within {timeout:g} s"
                           f"{closed}; the run cannot continue")
    return links
