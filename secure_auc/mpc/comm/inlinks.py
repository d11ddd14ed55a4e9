r"""Links between input parties (clients) and the computing parties: TLS 1.3 over TCP.

In the helpers layout the clients do not compute: each client (or each client
host, a process that hosts several clients on one machine) opens one TCP
connection to each computing party, sends its shares and receives the shares
of its own ranks.  Clients never connect to each other, and the computing
parties' work and traffic do not depend on how many clients there are.

Each connection is a TLS 1.3 link (:mod:`.tls`): the client host (TLS client)
presents a certificate of its identity key for ``"host h"``, the computing party
one of its own for ``"rank p"``; the host checks that the party's key is the one it was given, the
party that the host's key is the roster's key of the host it claims, and then
confirms the link.  A computing party accepts its hosts' connections side by
side, each with :data:`.tls.HELLO_LIMIT` seconds for its handshake and at most
:data:`.tls.MAX_PENDING` at once: a connection that says nothing, is not a
host of the roster, or comes twice is closed (and logged) and the run goes on;
only hosts that never connected are named when the timeout passes.

Frames, inside the TLS stream: a 12-byte header (channel, plaintext length)
then the bytes; a frame on another channel than the one expected, or of
another length, stops the run before anything is allocated for it.  Every wait
is bounded by the timeout, and a peer that disconnects or stays silent is named.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import socket
import struct
import threading
import time

import numpy as np

from ..errors import MPCError
from . import tls
from .channel import ChannelError, public_bytes

__all__ = ["InputLinkError", "ControlMessage", "InputLink", "Heartbeat", "PortBoard", "host_id", "listen",
           "accept_hosts", "tell_hosts", "connect", "observers", "readable_sockets", "ready"]

log = logging.getLogger(__name__)

_HEADER = struct.Struct("<IQ")
_MAX_OBJECT = 1 << 20
_PIECE = 1 << 20  # plaintext encrypted at once for a send

observers: list = []  # callables (peer id, channel, decrypted bytes) told of every message received (the audit)


class InputLinkError(MPCError):
    """A link between a client host and a computing party failed (names the peer); an
    :class:`secure_auc.MPCError`, as every fault of a run or a session is."""


class PartyUnreachable(InputLinkError):
    """Nothing answered at a computing party's address for as long as the host tried."""


class ControlMessage(InputLinkError):
    """A message on the link's :attr:`InputLink.control` channel arrived where another was
    expected (a deployment's end told in the middle of an evaluation): ``message`` holds it."""

    def __init__(self, peer: str, message):
        super().__init__(f"{peer} sent a control message in the middle of a step")
        self.message = message


def host_id(h: int) -> int:
    """The id of client host ``h`` in links (negative: never a rank)."""
    return -(h + 1)


_BOUND = tls.binding("secure-auc input link v2")  # the keys on both ends are pinned: the run adds nothing


class InputLink:
    """One end of the link between a client host and a computing party.

    ``send_array`` / ``recv_array`` move int64 arrays whose shape the receiver
    knows; ``send_obj`` / ``recv_obj`` small JSON objects.  ``bytes`` counts
    what went over the wire in both directions once the link was up (TLS records; the
    handshake, about 3 KB, excluded).  ``peer_id``: the peer's rank, or the host's id
    :func:`host_id`.  ``control`` (None unless set): a channel whose message may arrive in place
    of any other (the end of a deployment told in the middle of an evaluation); a wait then
    raises :class:`ControlMessage` with it."""

    def __init__(self, session: tls.Session, peer_id: int, describe_peer: str, timeout: float):
        self.session, self.sock, self.peer_id, self.peer = session, session.sock, peer_id, describe_peer
        self.timeout = timeout
        self.control: int | None = None
        self._sending = threading.Lock()  # one frame at a time (a :class:`Heartbeat` sends from its thread)
        self._handshake = session.wire_in + session.wire_out

    @property
    def bytes(self) -> int:
        return self.session.wire_in + self.session.wire_out - self._handshake

    # -- raw frames
    def _send(self, channel: int, payload: bytes | np.ndarray) -> None:
        data = memoryview(payload) if isinstance(payload, (bytes, bytearray)) else \
            memoryview(np.ascontiguousarray(payload).view(np.uint8).reshape(-1))
        head = _HEADER.pack(channel, len(data))
        with self._sending:
            try:
                if len(data) <= _PIECE:
                    tls.send_all(self.session, head + data.tobytes())
                else:
                    tls.send_all(self.session, head)
                    for i in range(0, len(data), _PIECE):
                        tls.send_all(self.session, data[i : i + _PIECE])
            except OSError as exc:
                raise InputLinkError(f"{self.peer} disconnected ({exc.strerror or exc})") from None

    def _read_exact(self, n: int) -> memoryview:
        """``n`` bytes of plaintext; each wait for the wire is bounded by the timeout."""
        view = memoryview(bytearray(n))
        got, sess = 0, self.session
        while got < n:
            try:
                with sess.lock:
                    k = sess.read_into(view[got:])
            except EOFError:
                raise InputLinkError(f"{self.peer} disconnected (it closed its link)") from None
            except tls.LinkError as exc:
                raise ChannelError(f"a message from {self.peer} failed authentication ({exc}: modified, "
                                   "replayed, reordered, truncated or foreign); the run stops") from None
            if k is not None:
                got += k
                continue
            try:
                raw = self.sock.recv(1 << 18)
            except socket.timeout:
                raise InputLinkError(f"no answer from {self.peer} within {self.timeout:g} s") from None
            except OSError as exc:
                raise InputLinkError(f"{self.peer} disconnected ({exc.strerror or exc})") from None
            if not raw:
                raise InputLinkError(f"{self.peer} disconnected (it crashed or was stopped)")
            with sess.lock:
                sess.feed(raw)
        return view

    def _recv(self, channel: int, expected: int | None, alive: int | None = None) -> np.ndarray:
        ch, n = _HEADER.unpack(self._read_exact(_HEADER.size))
        while alive is not None and ch == alive and n == 0:  # the peer's heartbeat: wait on
            ch, n = _HEADER.unpack(self._read_exact(_HEADER.size))
        if ch != channel and ch == self.control and n <= _MAX_OBJECT:  # the peer says why the step ends
            raw = self._read_exact(n).tobytes()
            for observe in observers:
                observe(self.peer_id, ch, raw)
            try:
                message = json.loads(raw.decode())
            except (UnicodeDecodeError, ValueError):
                raise InputLinkError(f"{self.peer} sent a malformed control message") from None
            raise ControlMessage(self.peer, message)
        if ch != channel:
            raise ChannelError(f"a message from {self.peer} arrived out of order (channel {ch}; expected "
                               f"channel {channel}); the run stops")
        if expected is not None and n != expected:
            raise InputLinkError(f"{self.peer} sent {n} bytes where {expected} were expected")
        if expected is None and n > _MAX_OBJECT:
            raise InputLinkError(f"{self.peer} sent a {n}-byte control message (limit {_MAX_OBJECT})")
        out = np.frombuffer(self._read_exact(n), dtype=np.uint8)
        for observe in observers:
            observe(self.peer_id, channel, out.tobytes())
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
        """An empty frame on ``channel``: this party is alive and working."""
        self._send(channel, b"")

    def send_obj(self, channel: int, obj) -> None:
        self._send(channel, json.dumps(obj).encode())

    def recv_obj(self, channel: int, *, alive: int | None = None):
        """A small JSON object on ``channel``; ``alive`` as in :meth:`recv_array`."""
        raw = self._recv(channel, None, alive).tobytes()
        try:
            return json.loads(raw.decode())
        except (UnicodeDecodeError, ValueError):
            raise InputLinkError(f"{self.peer} sent a malformed control message") from None

    def last_word(self, channel: int, seconds: float):
        """The peer's next message on ``channel``, skipping the frames of other channels (a step's
        messages it sent before), within ``seconds``; None if none came before it closed or the
        time passed (a step that failed elsewhere may have ended because the peer ended it)."""
        end = time.monotonic() + seconds
        try:
            while self.readable(max(0.0, end - time.monotonic())):
                ch, n = _HEADER.unpack(self._read_exact(_HEADER.size))
                if n > 1 << 30:  # not a frame's header: the stream is out of step
                    return None
                raw = self._read_exact(n).tobytes() if n else b""
                if ch == channel and n <= _MAX_OBJECT:
                    return json.loads(raw.decode())
        except Exception:  # noqa: BLE001 - closed, silent or garbled: nothing was said
            return None
        return None

    def readable(self, seconds: float) -> bool:
        """Whether a message (or the peer's disconnection) has arrived within ``seconds``."""
        if self.session.buffered():
            return True
        return bool(readable_sockets([self.sock], seconds))

    def set_timeout(self, seconds: float) -> None:
        """Bound each later wait of this link by ``seconds``."""
        self.timeout = seconds
        self.sock.settimeout(seconds)

    def close(self) -> None:
        """End the link with close_notify."""
        with self._sending:
            self.session.close()


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


def readable_sockets(socks, seconds: float | None) -> list:
    """Those of ``socks`` that have something to read (or were closed) within ``seconds``
    (None: as long as it takes).  ``poll``, not ``select``: ``select`` refuses a descriptor
    above 1023, which a party holding many connections (a stranger's) may be given.

    >>> a, b = socket.socketpair()
    >>> readable_sockets([a], 0.0)
    []
    >>> _ = b.send(b"x")
    >>> readable_sockets([a, b], 1.0) == [a]
    True
    >>> a.close(); b.close()
    """
    import select

    poll, by_fd = select.poll(), {}
    for sock in socks:
        by_fd[sock.fileno()] = sock
        poll.register(sock, select.POLLIN)
    events = poll.poll(None if seconds is None else max(0.0, seconds) * 1000)
    return [by_fd[fd] for fd, _ in events if fd in by_fd]


def ready(links, seconds: float | None, listeners=()) -> list:
    """Those of ``links`` with a message (or the peer's disconnection) to read, then those of
    ``listeners`` (sockets) with a connection waiting, within ``seconds``; a message already
    decrypted into a link's buffer (two arrived together) shows in no ``poll``, so such links
    come back at once."""
    buffered = [link for link in links if link.session.buffered()]
    if buffered:
        return buffered
    by_sock = {link.sock: link for link in links}
    return [by_sock.get(s, s) for s in readable_sockets([*by_sock, *listeners], seconds)]


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
                 describe_me: str, describe_host, farewell=None,
                 setting: str | None = None) -> dict[int, InputLink]:
    """Accept one authenticated link from each of the client hosts whose public keys are
    ``host_keys`` (side by side, each connection within its own time limit; any other
    connection is closed and logged, and the run goes on); return the links by host index.
    Hosts that have not connected within ``timeout`` seconds are named in the error (with
    ``setting``, the setting that set it, as the operator wrote it); ``farewell(link, error)`` (optional) is first called on the link of each host that did
    connect, to tell it why (:func:`part`)."""
    ctx = tls.context(identity, f"rank {me}", _BOUND, server_side=True)

    def admit(c: tls.Session):
        h = _host_of(c, host_keys, taken, describe_host)
        if isinstance(h, int):
            taken.add(h)
        return h

    taken: set[int] = set()
    accepted, refused = tls.accept(server, ctx, lambda c: _logged(admit(c), describe_me), len(host_keys),
                                   time.monotonic() + timeout)
    if len(accepted) < len(host_keys):
        missing = [h for h in range(len(host_keys)) if h not in accepted]
        names = ", ".join(describe_host(h) for h in missing[:5]) + (" and others" if len(missing) > 5 else "")
        closed = f" ({len(refused)} connection(s) that did not authenticate as a client host were closed)" \
            if refused else ""
        error = InputLinkError(f"{names} never connected to {describe_me} within {setting or f'{timeout:g} s'}{closed}")
        joined = [InputLink(c, host_id(h), describe_host(h), 2.0) for h, c in accepted.items()]
        for link in joined if farewell is not None else ():
            with contextlib.suppress(Exception):  # that host is gone too
                farewell(link, error)
        part(joined, wait=2.0 if farewell is not None else 0.0)
        raise error
    links = {}
    for h, c in accepted.items():
        _tune(c.sock, timeout)
        links[h] = InputLink(c, host_id(h), describe_host(h), timeout)
    return links


def _host_of(c: tls.Session, host_keys: list[bytes], taken: set[int], describe_host):
    """The index of the client host that connection ``c`` authenticated as, or why it is refused: a
    role no host has, a key other than the host's in ``host_keys``, a host already in ``taken``."""
    role = c.role or ""
    h = int(role[5:]) if role.startswith("host ") and role[5:].isdigit() else -1
    if not 0 <= h < len(host_keys):
        return f"a connection claiming {role!r}"
    if c.key != host_keys[h]:
        return f"a connection claiming to be {describe_host(h)} with another key"
    return h if h not in taken else f"a second connection from {describe_host(h)}"


def tell_hosts(server: socket.socket, me: int, identity, host_keys: list[bytes], channel: int, message, *,
               deadline: float, quiet: float, describe_me: str, describe_host) -> set[int]:
    """Send ``message`` (on ``channel``) to each client host of ``host_keys`` that connects to
    ``server`` (authenticated as :func:`accept_hosts` does), and close its link: a computing party
    that cannot take part tells the hosts waiting for it why.  Ends once every host has been
    told, at ``deadline``, or after ``quiet`` seconds with no new host; returns the hosts told."""
    ctx = tls.context(identity, f"rank {me}", _BOUND, server_side=True)
    told: set[int] = set()

    def admit(c: tls.Session):
        return _host_of(c, host_keys, told, describe_host)

    last = time.monotonic()
    while len(told) < len(host_keys) and time.monotonic() < min(deadline, last + quiet):
        accepted, _ = tls.accept(server, ctx, lambda c: _logged(admit(c), describe_me), len(host_keys) - len(told),
                                 min(deadline, last + quiet), stop=lambda: True)  # each told as it comes
        for h, c in accepted.items():
            told.add(h)
            link = InputLink(c, host_id(h), describe_host(h), 2.0)
            with contextlib.suppress(Exception):  # it is gone already
                link.send_obj(channel, message)
            part([link])
            last = time.monotonic()
    return told


def part(links: list[InputLink], wait: float = 2.0) -> None:
    """Close ``links`` so that what was last sent on each is read: stop sending (FIN), then
    drop what the peers still send until they close their ends (at most ``wait`` seconds in
    all).  Closing at once with unread bytes from a peer would reset the connection, and the
    peer could lose the last message instead of reading it."""
    socks = [link.sock for link in links]
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
    end = time.monotonic() + wait
    for sock in socks:
        with contextlib.suppress(OSError):
            while (left := end - time.monotonic()) > 0:
                sock.settimeout(left)
                if not sock.recv(1 << 16):
                    break
        sock.close()


def _logged(verdict, describe_me: str):
    if isinstance(verdict, str):
        log.warning("%s closed %s", describe_me, verdict)
    return verdict


def _connect_to_another(address: tuple[str, int], timeout: float) -> socket.socket:
    """A TCP connection to ``address``, never to this socket itself: while nothing listens on a
    port of this host in the system's ephemeral range, a retried connect may be given that same
    port as its own and meet itself (TCP's simultaneous open); that counts as refused."""
    sock = socket.create_connection(address, timeout=timeout)
    if sock.getsockname() == sock.getpeername():
        sock.close()
        raise ConnectionRefusedError(f"{address[0]}:{address[1]}: connected to itself (nothing listens there)")
    return sock


def _handshake(ctx, p: int, addr: str, port: int, key: bytes, deadline: float, timeout: float, describe_party,
               describe_me: str, dropped: int, waiting=None, answer_within: tuple[float, str] | None = None
               ) -> tls.Session | None:
    """One connection to computing party ``p`` and its handshake: the session, or None if the
    party closed it unread (a flood of connections at it: try again); a refusal of this
    party's key, a party with another key, or no answer by ``deadline`` raise (``answer_within``:
    the seconds from the connection the party may take to answer, if that ends later, and the
    setting that sets them, named if they expire).  ``waiting()``
    (optional) is called between tries while nothing listens at the party's address."""
    while True:
        try:
            sock = _connect_to_another((addr, port), max(0.1, min(2.0, deadline - time.monotonic())))
            break
        except OSError:
            if time.monotonic() > deadline:
                raise PartyUnreachable(f"{describe_party(p)} is not reachable at {addr}:{port} "
                                       f"(tried for {timeout:g} s)") from None
            if waiting is not None:
                waiting()
            time.sleep(0.1)
    setting = ""
    if answer_within is not None and time.monotonic() + answer_within[0] > deadline:
        (timeout, setting), deadline = answer_within, time.monotonic() + answer_within[0]
        setting = f" ({setting})"
    _tune(sock, max(0.1, deadline - time.monotonic()))
    sess = tls.Session(sock, ctx, False)

    def check(c: tls.Session) -> None:
        if c.key != key:
            raise ChannelError(f"the process at {addr}:{port} is not {describe_party(p)} (its identity key "
                               "is not that party's); the run stops")

    try:
        tls.handshake(sess, deadline, check)
        _tune(sock, timeout)
        return sess
    except ChannelError:
        sock.close()
        raise
    except TimeoutError:
        sock.close()
        raise InputLinkError(f"no answer from {describe_party(p)} within {timeout:g} s{setting}") from None
    except tls.Refused:
        sock.close()
        raise InputLinkError(f"{describe_party(p)} closed the connection during the handshake "
                             f"(does its roster list {describe_me}?)") from None
    except tls.LinkError as exc:  # a TLS alert: its roster or run is not this one's
        sock.close()
        raise InputLinkError(f"{describe_party(p)} closed the connection during the handshake "
                             f"(does its roster list {describe_me}? {exc})") from None
    except (EOFError, OSError):  # closed unread: it had too many connections waiting
        sock.close()
        if time.monotonic() >= deadline:
            raise InputLinkError(f"{describe_party(p)} closed each of this party's {dropped + 1} connection(s) "
                                 f"before its handshake for {timeout:g} s (too many connections waiting at "
                                 "it: a flood?)") from None
        return None


def connect(h: int, identity, parties: list[tuple[str, int, bytes]], *, timeout: float, describe_party,
            describe_me: str, waiting=None, answer_within: tuple[float, str] | None = None) -> list[InputLink]:
    """Client host ``h``: connect to every computing party ``(addr, port, public key)``
    (retrying until ``timeout`` while a party is not yet listening, or closes a connection
    unread, as it does in a flood of connections; ``port`` may be a :class:`PortBoard`) and
    authenticate it.  A party that reads this host's key and refuses it is named at once.
    ``answer_within``: (seconds, setting): the seconds a party that listens may take to answer a
    connection, if that ends after ``timeout`` (a deployment's server listens from its start and
    answers once the others have joined, or to say why they did not), and the setting named if
    they expire.
    ``waiting(links)`` (optional) is called with the links made so far between tries while a
    party is not listening yet: it may raise to stop (a party already reached says why)."""
    links = []
    try:
        for p, (addr, port, key) in enumerate(parties):
            if isinstance(port, PortBoard):
                port = port.wait(p, timeout, describe_party(p))
            deadline = time.monotonic() + timeout
            ctx = tls.context(identity, f"host {h}", _BOUND, server_side=False)
            dropped = 0
            while True:
                sess = _handshake(ctx, p, addr, port, key, deadline, timeout, describe_party, describe_me, dropped,
                                  None if waiting is None else lambda: waiting(links), answer_within)
                if sess is not None:
                    break
                dropped += 1
                time.sleep(min(0.05 * 2 ** min(dropped, 4), max(0.0, deadline - time.monotonic())) * (
                    0.5 + secrets.randbelow(1000) / 1000))
            links.append(InputLink(sess, p, describe_party(p), timeout))
    except BaseException:
        for link in links:
            link.sock.close()
        raise
    return links


def public_key(identity) -> bytes:
    return public_bytes(identity)
