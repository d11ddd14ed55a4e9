r"""TLS 1.3 for every link: certificates bound to the roster's identity keys and to the run.

Every link (between two computing parties, :mod:`.transport`; between a client
host and a computing party, :mod:`.inlinks`) is a TLS 1.3 connection made with
Python's :mod:`ssl` (OpenSSL), both ends authenticated.

Certificates.  A party's certificate carries its roster identity key (Ed25519)
as its public key and names its role (``"rank 3"``, ``"host 0"``); in the TLS
handshake the party signs the transcript, which includes that certificate, with
its identity key (CertificateVerify), so only the holder of the roster's key
can present it.  Each end then checks, before any data flows, that the peer's
certificate key is the roster's key of the role it claims (:func:`peer`).

The run's binding.  The certificates are issued by a *run authority* whose
Ed25519 key is derived from the run's binding, a hash of the roster and the
run's parameters (:func:`binding`).  This authority is no secret and vouches for
no one (anyone who knows the roster can derive it): it turns OpenSSL's chain
check into "the peer signed a certificate naming the same roster and run", so
two parties that disagree on the roster or the run never complete a handshake.
Identity rests on the pinned keys alone.

Records: TLS 1.3 only (``minimum_version`` = ``maximum_version`` = TLS 1.3),
AEAD records of at most 16 KiB, each authenticated before its plaintext is
released; a modified, replayed, reordered, truncated or foreign record fails.
No session tickets (no resumption).  A link ends with close_notify.

:class:`Session` drives one connection through memory BIOs: the caller owns the
socket (non-blocking in the mesh, with deadlines on the client links), feeds it
the bytes it reads and sends the bytes it produces; one lock serialises the
TLS state between the thread that reads and the one that writes.
"""

from __future__ import annotations

import datetime
import errno
import hashlib
import os
import select
import socket
import ssl
import threading
import time

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.x509.oid import NameOID

__all__ = ["LinkError", "Session", "binding", "context", "handshake", "accept", "read_exact", "send_all",
           "HELLO_LIMIT", "MAX_PENDING"]

HELLO_LIMIT = 5.0  # seconds a new connection has to complete its handshake
MAX_PENDING = 32  # connections in their handshake at once; beyond, the oldest of the busiest source is closed
PER_SOURCE = 8  # connections of one source address in their handshake at once; beyond, its oldest is closed
_WIRE = 1 << 18  # bytes read from a socket at once
_ACCEPTED = b"\x01"  # each end's first record: it accepts the other's key (connecting end first)
_REFUSED = b"\x00"  # the accepting end's first record when it refuses the connecting end's key or role
_NOT_BEFORE = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
_NOT_AFTER = datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=datetime.timezone.utc)


class LinkError(RuntimeError):
    """A TLS link failed (its handshake, a record, or the connection)."""


class Refused(LinkError):
    """The accepting end read this party's certificate and refused it (not a dropped connection)."""


def binding(label: str, *parts) -> bytes:
    """SHA-256 of ``label`` and ``parts`` (str, bytes or int), each length-prefixed: the run's binding."""
    h = hashlib.sha256()
    for part in (label, *parts):
        raw = part if isinstance(part, bytes) else str(part).encode()
        h.update(len(raw).to_bytes(8, "little") + raw)
    return h.digest()


def _authority(bound: bytes) -> tuple[Ed25519PrivateKey, x509.Name]:
    key = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"secure-auc run authority v1" + bound).digest())
    return key, x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "secure-auc"),
                           x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, bound.hex()),
                           x509.NameAttribute(NameOID.COMMON_NAME, "run authority")])


def _certificate(subject: x509.Name, issuer: x509.Name, public, signer, ca: bool) -> x509.Certificate:
    serial = int.from_bytes(hashlib.sha256(subject.public_bytes() + issuer.public_bytes()).digest()[:16], "big") >> 1
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public)
            .serial_number(serial).not_valid_before(_NOT_BEFORE).not_valid_after(_NOT_AFTER)
            .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
            .sign(signer, None))


def _load_chain(ctx: ssl.SSLContext, pem: bytes) -> None:
    """``ssl`` reads a certificate and key only from a file: an anonymous memory file (Linux),
    else a private temporary folder, removed at once."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("secure-auc-link", os.MFD_CLOEXEC)
        try:
            os.write(fd, pem)
            ctx.load_cert_chain(f"/proc/self/fd/{fd}")
            return
        except OSError:
            pass
        finally:
            os.close(fd)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="secure-auc-link-") as folder:
        path = os.path.join(folder, "chain.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        ctx.load_cert_chain(path)


def context(identity: Ed25519PrivateKey, role: str, bound: bytes, server_side: bool) -> ssl.SSLContext:
    """A TLS 1.3 context that presents ``identity``'s certificate for ``role`` under the run
    ``bound`` (:func:`binding`) and requires the peer's, issued under the same binding."""
    ca_key, ca_name = _authority(bound)
    ca = _certificate(ca_name, ca_name, ca_key.public_key(), ca_key, True)
    leaf = _certificate(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "secure-auc"),
                                   x509.NameAttribute(NameOID.COMMON_NAME, role)]),
                        ca_name, identity.public_key(), ca_key, False)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server_side else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    if server_side:
        ctx.num_tickets = 0
    ctx.load_verify_locations(cadata=ca.public_bytes(serialization.Encoding.PEM).decode())
    key = identity.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
    _load_chain(ctx, key + leaf.public_bytes(serialization.Encoding.PEM))
    return ctx


class Session:
    """One end of a TLS connection over ``sock``, through memory BIOs (module docstring).
    ``wire_in`` / ``wire_out`` count the bytes on the wire (handshake included)."""

    def __init__(self, sock: socket.socket, ctx: ssl.SSLContext, server_side: bool):
        self.sock = sock
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self._in, self._out, server_side=server_side)
        self.lock = threading.Lock()
        self._error: Exception | None = None  # a failure that :meth:`read_many` met after some bytes
        self.wire_in = self.wire_out = 0
        self.key: bytes | None = None  # the peer's certificate key, once the handshake is done
        self.role: str | None = None  # the role its certificate claims

    def step(self) -> bool:
        """Advance the handshake with the bytes fed so far; True once it is complete."""
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            return False
        except ssl.SSLError as exc:
            raise LinkError(f"TLS handshake failed ({exc.reason or exc})") from None
        cert = x509.load_der_x509_certificate(self.tls.getpeercert(binary_form=True))
        public = cert.public_key()
        self.key = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw) \
            if isinstance(public, Ed25519PublicKey) else b""
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        self.role = str(names[0].value) if names else ""
        return True

    def feed(self, data) -> None:
        self.wire_in += len(data)
        self._in.write(data)

    def buffered(self) -> bool:
        """Whether bytes already fed (or plaintext already decrypted) wait to be read."""
        return self._in.pending > 0 or self.tls.pending() > 0

    def read_into(self, view: memoryview) -> int | None:
        """Decrypt into ``view`` what the fed bytes hold (one record at most): the number of
        bytes, None if more must be fed; raises :class:`EOFError` on close_notify and
        :class:`LinkError` on a record that fails authentication."""
        if not len(view):
            return 0
        try:
            n = self.tls.read(min(len(view), 1 << 30), view)
        except ssl.SSLWantReadError:
            return None
        except ssl.SSLZeroReturnError:
            raise EOFError from None
        except ssl.SSLError as exc:
            raise LinkError(exc.reason or str(exc)) from None
        if not n:  # ssl's answer to close_notify
            raise EOFError
        return n

    def read_many(self, view: memoryview) -> int | None:
        """Decrypt into ``view`` every record the fed bytes hold, as far as ``view`` goes (as
        :meth:`read_into` does for one record): the number of bytes, None if more must be
        fed; raises as :meth:`read_into` does, a failure after some bytes at the next call."""
        if self._error is not None:
            raise self._error
        size = len(view)
        if not size:
            return 0
        read = getattr(self.tls, "_sslobj", self.tls).read  # ssl.SSLObject.read without its wrapper
        got = 0
        while got < size:
            try:
                n = read(size - got, view[got:] if got else view)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                exc: Exception = EOFError()
            except ssl.SSLError as e:
                exc = LinkError(e.reason or str(e))
            else:
                if n:
                    got += n
                    continue
                exc = EOFError()  # ssl's answer to close_notify
            if got:
                self._error = exc
                break
            raise exc
        return got or None

    def encrypt(self, data) -> bytes:
        """The records carrying ``data`` (and any handshake bytes due)."""
        if len(data):
            self.tls.write(data)
        out = self._out.read()
        self.wire_out += len(out)
        return out

    def outgoing(self) -> bytes:
        out = self._out.read()
        self.wire_out += len(out)
        return out

    def close(self) -> None:
        """Send close_notify (as far as the socket takes it at once) and close the socket."""
        try:
            with self.lock:
                try:
                    self.tls.unwrap()
                except ssl.SSLError:
                    pass
                tail = self.outgoing()
            if tail:
                self.sock.setblocking(False)
                self.sock.send(tail)
        except OSError:
            pass
        finally:
            self.sock.close()


# ----------------------------------------------------------------- blocking use, with a deadline


def _wait(sock: socket.socket, events: int, deadline: float) -> bool:
    left = deadline - time.monotonic()
    if left <= 0:
        return False
    p = select.poll()
    p.register(sock, events)
    return bool(p.poll(left * 1000))


def _recv(sess: Session, deadline: float) -> None:
    """Feed what the socket holds (waits until ``deadline``): raises TimeoutError, EOFError."""
    if not _wait(sess.sock, select.POLLIN, deadline):
        raise TimeoutError
    try:
        raw = sess.sock.recv(_WIRE)
    except (BlockingIOError, InterruptedError, socket.timeout):
        return
    except OSError as exc:
        raise EOFError(exc.strerror or str(exc)) from None
    if not raw:
        raise EOFError
    with sess.lock:
        sess.feed(raw)


def send_all(sess: Session, data, deadline: float | None = None) -> None:
    """Encrypt ``data`` and write it (raises OSError, TimeoutError)."""
    with sess.lock:
        wire = sess.encrypt(data)
    if deadline is None:
        sess.sock.sendall(wire)
        return
    view = memoryview(wire)
    while view:
        if not _wait(sess.sock, select.POLLOUT, deadline):
            raise TimeoutError
        try:
            n = sess.sock.send(view)
        except (BlockingIOError, InterruptedError):
            continue
        view = view[n:]


def read_exact(sess: Session, view: memoryview, deadline: float) -> None:
    """Fill ``view`` with plaintext (raises TimeoutError, EOFError, LinkError)."""
    got = 0
    while got < len(view):
        with sess.lock:
            n = sess.read_into(view[got:])
        if n is None:
            _recv(sess, deadline)
        else:
            got += n


def handshake(sess: Session, deadline: float, check=None, first: bytes = b"") -> None:
    """The connecting end's handshake, then ``check(sess)`` (which raises if the peer is not
    who it should be), this end's confirmation, and the accepting end's (raises
    TimeoutError, EOFError, LinkError: the accepting end refused this party).  ``first``
    (at most 16 KiB - 1): bytes sent in the same record as the confirmation, so that the
    accepting end reads them, already authenticated, when it admits the link."""
    while True:
        with sess.lock:
            done = sess.step()
            out = sess.outgoing()
        if out:
            sess.sock.sendall(out)
        if done:
            break
        _recv(sess, deadline)
    if check is not None:
        check(sess)
    send_all(sess, _ACCEPTED + first, deadline)
    got = bytearray(1)
    read_exact(sess, memoryview(got), deadline)
    if bytes(got) == _REFUSED:
        raise Refused("the accepting end refused this party's key or role")
    if bytes(got) != _ACCEPTED:
        raise LinkError("the accepting end's first record is not its confirmation")


def accept(listener: socket.socket, ctx: ssl.SSLContext, admit, count: int, deadline: float,
           limit: float | None = None, stop=None) -> tuple[dict, list[str]]:
    """Accept connections on ``listener`` until ``count`` are admitted, ``deadline``, or
    ``stop()`` (optional) is true after an admission.
    New connections do their handshake side by side, each within ``limit`` seconds
    (default :data:`HELLO_LIMIT`), at most :data:`PER_SOURCE` of one source address (beyond,
    that source's oldest is closed) and :data:`MAX_PENDING` in all (beyond, the oldest of the
    source with the most is closed): a flood from one address does not push out a party
    connecting from another, and a party whose connection was closed unread tries again
    (:func:`handshake` tells it apart from a refusal).  Once a connection's handshake is
    complete and the connecting end has confirmed the link (it accepted this party's key),
    ``admit(session)`` returns the id to keep it under, or a string saying why it is refused
    (the connecting end is told, it is closed, and the run goes on); an admitted link is
    confirmed in turn.  Returns the admitted sessions by id and the refusals."""
    limit = HELLO_LIMIT if limit is None else limit
    listener.setblocking(False)
    poll = select.poll()
    poll.register(listener, select.POLLIN)
    pending: dict[int, list] = {}  # fd -> [session, its own deadline, source address], oldest first
    admitted: dict = {}
    refused: list[str] = []

    def drop(fd: int, why: str | None) -> None:
        sess, _, _ = pending.pop(fd)
        poll.unregister(fd)
        sess.sock.close()
        if why:
            refused.append(why)

    def make_room(source) -> None:
        """Close the oldest connection of ``source`` if it has :data:`PER_SOURCE` waiting, else
        the oldest of the busiest source if :data:`MAX_PENDING` wait."""
        counts: dict = {}
        for _, _, src in pending.values():
            counts[src] = counts.get(src, 0) + 1
        if counts.get(source, 0) >= PER_SOURCE:
            busiest = source
        elif len(pending) >= MAX_PENDING:
            busiest = max(counts, key=lambda s: counts[s])
        else:
            return
        fd = next(fd for fd, (_, _, src) in pending.items() if src == busiest)
        drop(fd, f"a connection closed to keep at most {PER_SOURCE} waiting from one address and "
                 f"{MAX_PENDING} in all")

    stopped = False
    try:
        while len(admitted) < count and not stopped:
            now = time.monotonic()
            for fd in [fd for fd, (_, until, _) in pending.items() if now >= until]:
                drop(fd, f"a connection that did not complete its handshake within {limit:g} s")
            if now >= deadline:
                break
            until = min([deadline] + [u for _, u, _ in pending.values()])
            for fd, _ in poll.poll(max(1.0, (until - now) * 1000)):
                if fd == listener.fileno():
                    try:
                        c, address = listener.accept()
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError as exc:
                        if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM,
                                         errno.ECONNABORTED):  # out of descriptors, or it left: go on
                            continue
                        raise LinkError(f"the listener failed ({exc.strerror or exc})") from None
                    c.setblocking(False)
                    source = address[0] if isinstance(address, tuple) else address
                    make_room(source)
                    pending[c.fileno()] = [Session(c, ctx, server_side=True), min(deadline, now + limit), source]
                    poll.register(c, select.POLLIN)
                    continue
                if fd not in pending:
                    continue
                sess = pending[fd][0]
                try:
                    raw = sess.sock.recv(_WIRE)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    raw = b""
                if not raw:
                    drop(fd, "a connection closed during its handshake")
                    continue
                try:
                    sess.feed(raw)
                    if sess.key is None and not sess.step():
                        out = sess.outgoing()
                        if out and sess.sock.send(out) != len(out):  # a flight fits a fresh socket's buffer
                            raise LinkError("its handshake stalled")
                        continue
                    out = sess.outgoing()
                    if out and sess.sock.send(out) != len(out):
                        raise LinkError("its handshake stalled")
                    got = bytearray(1)
                    n = sess.read_into(memoryview(got))
                except (LinkError, OSError, EOFError) as exc:
                    drop(fd, f"a connection whose handshake failed ({str(exc) or 'closed'})")
                    continue
                if n is None:  # the connecting end's confirmation is still to come
                    continue
                if bytes(got) != _ACCEPTED:
                    drop(fd, "a connection that did not confirm its link")
                    continue
                who = admit(sess)
                if isinstance(who, str):
                    try:  # it is told: a refusal, not a connection dropped in a flood (it would try again)
                        sess.sock.send(sess.encrypt(_REFUSED))
                    except (ssl.SSLError, OSError):
                        pass
                    drop(fd, who)
                    continue
                try:
                    wire = sess.encrypt(_ACCEPTED)
                    if sess.sock.send(wire) != len(wire):
                        raise LinkError("its confirmation stalled")
                except (LinkError, OSError):
                    drop(fd, "a connection closed during its handshake")
                    continue
                poll.unregister(fd)
                del pending[fd]
                admitted[who] = sess
                if stop is not None and stop():
                    stopped = True
                    break
    except BaseException:
        for sess in admitted.values():
            sess.sock.close()
        raise
    finally:
        for sess, _, _ in pending.values():
            sess.sock.close()
    return admitted, refused
