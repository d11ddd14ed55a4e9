r"""Links between input parties (clients) and the computing parties, over TCP.

In the helpers layout the clients do not compute: each client (or each client
host, a process that hosts several clients on one machine) opens one TCP
connection to each computing party, sends its shares and receives the shares
of its own ranks.  Clients never connect to each other, and the computing
parties' work and traffic do not depend on how many clients there are.

Handshake (per connection; the client host has id :math:`-(h + 1)`, the
computing party its rank :math:`p`): the host sends its id and an ephemeral
X25519 key :math:`E_h`; the computing party answers with :math:`E_p` and its
Ed25519 signature of ``"secure-auc input link v1" || p || h || E_p || E_h``;
the host checks it against the computing party's public key and answers with
its own signature of the transcript with the roles swapped, which the
computing party checks against the host's public key.  Keys and the record
layer are those of the links between computing parties
(:func:`.channel.derive_keys`, :class:`.channel.Link`: AES-128-GCM per
direction, sequence numbers per channel, every message authenticated).

Frames: a 16-byte header (channel, sequence, plaintext length) then the
sealed bytes; the header's fields are also the AEAD's associated data, so a
frame that is modified, replayed or sent on another channel fails.  Every
wait is bounded by the timeout, and a peer that disconnects or stays silent
is named.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time

import numpy as np

from .channel import ChannelError, Link, derive_keys, ephemeral, public_bytes, sealed_size, sign, verify

__all__ = ["InputLinkError", "InputLink", "Heartbeat", "PortBoard", "host_id", "listen", "accept_hosts", "connect",
           "observers"]

_HEADER = struct.Struct("<IIQ")
_HELLO = struct.Struct("<i32s")
_MAX_OBJECT = 1 << 20

observers: list = []  # callables (peer id, channel, decrypted bytes) told of every message received (the audit)


class InputLinkError(RuntimeError):
    """A link between a client host and a computing party failed (names the peer)."""


def host_id(h: int) -> int:
    """The id of client host ``h`` in handshakes and links (negative: never a rank)."""
    return -(h + 1)


def _transcript(signer: int, peer: int, e_signer: bytes, e_peer: bytes) -> bytes:
    return b"secure-auc input link v1" + struct.pack("<ii", signer, peer) + e_signer + e_peer


class InputLink:
    """One end of the link between a client host and a computing party.

    ``send_array`` / ``recv_array`` move int64 arrays whose shape the receiver
    knows; ``send_obj`` / ``recv_obj`` small JSON objects.  ``bytes`` counts
    what went over the wire in both directions (sealed, headers included)."""

    def __init__(self, sock: socket.socket, link: Link, describe_peer: str, timeout: float):
        self.sock, self.link, self.peer = sock, link, describe_peer
        self.timeout = timeout
        self.bytes = 0
        self._sending = threading.Lock()  # one frame at a time (a :class:`Heartbeat` sends from its thread)

    # -- raw frames
    def _send(self, channel: int, payload: bytes | np.ndarray) -> None:
        data = np.frombuffer(payload, dtype=np.uint8) if isinstance(payload, (bytes, bytearray)) else \
            np.ascontiguousarray(payload).view(np.uint8).reshape(-1)
        with self._sending:
            seq = self.link.next_send(channel)
            sealed = self.link.seal(channel, seq, data)
            try:
                self.sock.sendall(_HEADER.pack(channel, seq, data.size))
                self.sock.sendall(memoryview(sealed))
            except OSError as exc:
                raise InputLinkError(f"{self.peer} disconnected ({exc.strerror or exc})") from None
            self.bytes += _HEADER.size + sealed.size

    def _read_exact(self, n: int) -> memoryview:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            try:
                k = self.sock.recv_into(view[got:], n - got)
            except socket.timeout:
                raise InputLinkError(f"no answer from {self.peer} within {self.timeout:g} s") from None
            except OSError as exc:
                raise InputLinkError(f"{self.peer} disconnected ({exc.strerror or exc})") from None
            if k == 0:
                raise InputLinkError(f"{self.peer} disconnected (it crashed or was stopped)")
            got += k
        self.bytes += n
        return view

    def _recv(self, channel: int, expected: int | None, alive: int | None = None) -> np.ndarray:
        ch, seq, n = _HEADER.unpack(self._read_exact(_HEADER.size))
        while alive is not None and ch == alive and n == 0:  # the peer's heartbeat: authenticate it, wait on
            self._open(alive, ch, seq, 0, 0)
            ch, seq, n = _HEADER.unpack(self._read_exact(_HEADER.size))
        return self._open(channel, ch, seq, n, expected)

    def _open(self, channel: int, ch: int, seq: int, n: int, expected: int | None) -> np.ndarray:
        """Check frame (``ch``, ``seq``, ``n`` bytes) is the next on ``channel``, then read and open it."""
        want = self.link.next_recv(channel)
        if ch != channel or seq != want:
            raise ChannelError(f"a message from {self.peer} arrived out of order (channel {ch}, sequence {seq}; "
                               f"expected channel {channel}, sequence {want}); the run stops")
        if expected is not None and n != expected:
            raise InputLinkError(f"{self.peer} sent {n} bytes where {expected} were expected")
        if expected is None and n > _MAX_OBJECT:
            raise InputLinkError(f"{self.peer} sent a {n}-byte control message (limit {_MAX_OBJECT})")
        sealed = np.frombuffer(self._read_exact(sealed_size(n)), dtype=np.uint8)
        out = np.empty(n, dtype=np.uint8)
        self.link.open(channel, seq, sealed, out)
        for observe in observers:
            observe(self.link.peer, channel, out.tobytes())
        return out

    # -- typed messages
    def send_array(self, channel: int, array: np.ndarray, dtype=np.int64) -> None:
        self._send(channel, np.ascontiguousarray(array, dtype=dtype))

    def recv_array(self, channel: int, shape, dtype=np.int64, *, alive: int | None = None) -> np.ndarray:
        """An array on ``channel``; with ``alive``, the peer's heartbeats on that channel
        (:class:`Heartbeat`) are accepted meanwhile, each renewing the timeout."""
        n = int(np.prod(shape, dtype=np.int64))
        size = np.dtype(dtype).itemsize
        return self._recv(channel, size * n, alive).view(dtype).reshape(shape)

    def send_alive(self, channel: int) -> None:
        """An empty authenticated frame on ``channel``: this party is alive and working."""
        self._send(channel, b"")

    def send_obj(self, channel: int, obj) -> None:
        self._send(channel, json.dumps(obj).encode())

    def recv_obj(self, channel: int):
        raw = self._recv(channel, None).tobytes()
        try:
            return json.loads(raw.decode())
        except (UnicodeDecodeError, ValueError):
            raise InputLinkError(f"{self.peer} sent a malformed control message") from None

    def readable(self, seconds: float) -> bool:
        """Whether a message (or the peer's disconnection) has arrived within ``seconds``."""
        import select

        ready, _, _ = select.select([self.sock], [], [], seconds)
        return bool(ready)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Heartbeat:
    """While the block runs, send every link an empty frame on ``channel`` every
    ``interval`` seconds (from a thread), so that a peer waiting for a result of long
    work (``recv_array(..., alive=channel)``) tells a working party from a silent one:
    its wait stays bounded by its timeout, renewed by each heartbeat.  The frames carry
    nothing but their time.  Default interval: a third of the links' shortest timeout."""

    def __init__(self, links, channel: int, interval: float | None = None):
        self.links, self.channel = list(links), channel
        self.interval = interval if interval is not None else max(
            0.5, min((link.timeout for link in self.links), default=3.0) / 3)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="heartbeat")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for link in self.links:
                try:
                    link.send_alive(self.channel)
                except InputLinkError:  # the main thread names the peer when it next uses the link
                    pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


class PortBoard:
    """The ports the computing parties' listeners got from the OS (port 0), published to the
    client hosts of the same machine (a local run): no port is chosen ahead and then
    raced for.  Shared memory; pass it to the processes when they are started."""

    def __init__(self, parties: int):
        import multiprocessing as mp

        self._ports = mp.get_context("spawn").RawArray("i", parties)

    def publish(self, p: int, port: int) -> None:
        self._ports[p] = port

    def wait(self, p: int, timeout: float, who: str) -> int:
        deadline = time.monotonic() + timeout
        while self._ports[p] == 0:
            if time.monotonic() > deadline:
                raise InputLinkError(f"{who} did not open its port for the clients within {timeout:g} s")
            time.sleep(0.02)
        return int(self._ports[p])


def listen(addr: str, port: int) -> socket.socket:
    """The computing party's listening socket for client hosts."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((addr, port))
    except OSError as exc:
        sock.close()
        raise InputLinkError(f"cannot listen for clients on {addr}:{port} ({exc.strerror})") from None
    sock.listen(128)
    return sock


def _tune(sock: socket.socket, timeout: float) -> None:
    sock.settimeout(timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def accept_hosts(server: socket.socket, me: int, identity, host_keys: list[bytes], *, timeout: float,
                 describe_me: str, describe_host) -> dict[int, InputLink]:
    """Accept one authenticated connection from each of the client hosts whose public
    keys are ``host_keys``; return the links by host index.  Hosts that have not
    connected within ``timeout`` seconds are named in the error."""
    links: dict[int, InputLink] = {}
    deadline = time.monotonic() + timeout
    while len(links) < len(host_keys):
        left = deadline - time.monotonic()
        if left <= 0:
            missing = [h for h in range(len(host_keys)) if h not in links]
            names = ", ".join(describe_host(h) for h in missing[:5]) + (" and others" if len(missing) > 5 else "")
            raise InputLinkError(f"{names} never connected to {describe_me} within {timeout:g} s")
        server.settimeout(min(left, 1.0))
        try:
            sock, _ = server.accept()
        except socket.timeout:
            continue
        _tune(sock, timeout)
        try:
            link = _answer(sock, me, identity, host_keys, timeout, describe_host)
        except (InputLinkError, ChannelError, OSError, struct.error) as exc:
            sock.close()
            if isinstance(exc, ChannelError):
                raise
            continue  # a stray connection (a port scan, a host that gave up): keep waiting for the real ones
        h = -link.link.peer - 1
        if h in links:
            sock.close()
            raise ChannelError(f"{describe_host(h)} connected twice to {describe_me}; the run stops")
        links[h] = link
    return links


def _answer(sock, me: int, identity, host_keys, timeout, describe_host) -> InputLink:
    raw = _recv_exact(sock, _HELLO.size)
    peer, e_peer = _HELLO.unpack(raw)
    h = -peer - 1
    if not 0 <= h < len(host_keys):
        raise InputLinkError("unknown host")
    secret, e_me = ephemeral()
    sock.sendall(e_me + sign(identity, _transcript(me, peer, e_me, e_peer)))
    signature = _recv_exact(sock, 64)
    if not verify(host_keys[h], signature, _transcript(peer, me, e_peer, e_me)):
        raise ChannelError(f"a process claiming to be {describe_host(h)} is not ({describe_host(h)}'s identity "
                           "key did not sign the handshake); the run stops")
    send_key, recv_key = derive_keys(me, peer, secret, e_me, e_peer)
    names = {peer: describe_host(h)}
    return InputLink(sock, Link(me, peer, send_key, recv_key, lambda r: names.get(r, f"rank {r}")),
                     describe_host(h), timeout)


def _recv_exact(sock, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise InputLinkError("connection closed during the handshake")
        buf += part
    return buf


def connect(h: int, identity, parties: list[tuple[str, int, bytes]], *, timeout: float, describe_party,
            describe_me: str) -> list[InputLink]:
    """Client host ``h``: connect to every computing party ``(addr, port, public key)``
    (retrying until ``timeout`` while a party is not yet listening; ``port`` may be a
    :class:`PortBoard`) and authenticate it."""
    me = host_id(h)
    links = []
    for p, (addr, port, key) in enumerate(parties):
        if isinstance(port, PortBoard):
            port = port.wait(p, timeout, describe_party(p))
        deadline = time.monotonic() + timeout
        while True:
            try:
                sock = socket.create_connection((addr, port), timeout=max(0.1, min(2.0, deadline - time.monotonic())))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise InputLinkError(f"{describe_party(p)} is not reachable at {addr}:{port} "
                                         f"(tried for {timeout:g} s)") from None
                time.sleep(0.1)
        _tune(sock, timeout)
        secret, e_me = ephemeral()
        try:
            sock.sendall(_HELLO.pack(me, e_me))
            answer = _recv_exact(sock, 32 + 64)
        except (OSError, InputLinkError):
            sock.close()
            raise InputLinkError(f"{describe_party(p)} closed the connection during the handshake "
                                 f"(does its roster list {describe_me}?)") from None
        e_peer, signature = answer[:32], answer[32:]
        if not verify(key, signature, _transcript(p, me, e_peer, e_me)):
            sock.close()
            raise ChannelError(f"the process at {addr}:{port} is not {describe_party(p)} (its identity key did "
                               "not sign the handshake); the run stops")
        sock.sendall(sign(identity, _transcript(me, p, e_me, e_peer)))
        send_key, recv_key = derive_keys(me, p, secret, e_me, e_peer)
        names = {p: describe_party(p)}
        links.append(InputLink(sock, Link(me, p, send_key, recv_key, lambda r, names=names: names.get(r, f"rank {r}")),
                               describe_party(p), timeout))
    return links


def public_key(identity) -> bytes:
    return public_bytes(identity)
