r"""The computing parties' rendezvous: one TLS 1.3 listener at rank 0, every party
authenticated before anything it says is read.

Rank 0 (the server) listens on the rendezvous port (``master_port + 1``: under torchrun,
``master_port`` is the agent's own store) of the configured address only.  Every other
party (the helpers or clients, the dealer) connects there and makes a TLS 1.3 handshake
with its identity key (:mod:`.tls`), its certificate naming its role (``"rank r"``); in
the same record as its confirmation it sends its check-in: the address of its link
listener (:mod:`.transport`), or the reason why it cannot start.  Admission is
:func:`.tls.accept`'s: each connection has :data:`.tls.HELLO_LIMIT` seconds for its
handshake, at most :data:`.tls.PER_SOURCE` from one source address and
:data:`.tls.MAX_PENDING` in all are in their handshake at once, and nothing is kept for
a connection before its key is checked: a stranger can neither write nor read anything,
nor make a party wait longer than a handshake.

Who may check in.  With a roster: the holder of the roster's key for the rank its
certificate names (the other end checks that rank 0's key is the roster's key of rank 0);
a refusal ("this party cannot start") counts if any key of the roster made the connection
(a party may have been given another party's key: that is the reason it refuses).  On one
host without a roster (``exchange``): the run authority of the certificates is derived
from this OS user's local link key (:func:`.roster.local_link_key`), so only processes of
the same user complete a handshake; each party's key is then taken from its certificate and
rank 0 hands every party the roster of these keys.

Rank 0's answer, once every party has checked in, over the same authenticated channel: the
run's id (the mesh's binding), every party's link address (and, without a roster, the
keys).  A refusal is told to every party at once (and to the ones that check in within
2 s after it); if some party has not checked in after the roll call's time, rank 0 tells
the others who, and every party stops naming them.  No signatures are needed: every message
comes over a channel whose end is authenticated.

Two runs started on one port (local launcher): each binds the run's token into the
certificates' authority, so a party of one run never completes a handshake with the other
run's server, and stops naming the port (:class:`PortBusyError`).
"""

from __future__ import annotations

import errno
import json
import secrets
import socket
import struct
import time
from dataclasses import dataclass

from . import tls

__all__ = ["PartyStartError", "PortBusyError", "Meeting", "binding", "listen", "claim", "host", "join",
           "HELLO_MAX", "ANSWER_MAX", "LATE"]

HELLO_MAX = 4096  # bytes of a check-in
ANSWER_MAX = 1 << 20  # bytes of rank 0's answer
LATE = 2.0  # seconds rank 0 still tells a refusal to the parties that check in after it
_LEN = struct.Struct("<I")


class PartyStartError(RuntimeError):
    """The parties could not all meet (one never started, or the address is wrong/busy)."""


class PortBusyError(PartyStartError):
    """The run's port, or the next one, is held by another process or run: nothing was computed."""


@dataclass
class Meeting:
    """What every party knows after the rendezvous: the run's id, every party's link address
    (rank -> ``"host:port"``), and without a roster every party's key (else None)."""

    run: str
    addresses: dict
    keys: list | None = None


def _escape(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")[:1000]


def _frame(obj) -> bytes:
    raw = json.dumps(obj, separators=(",", ":")).encode()
    return _LEN.pack(len(raw)) + raw


def binding(total: int, run_token: str | None = None, secret: bytes = b"") -> bytes:
    """The rendezvous's binding (:func:`.tls.binding`): the number of parties, the run's token
    (local launcher) and, without a roster, the local link key (then the certificates'
    authority is a secret of this user).

    >>> binding(4) == binding(4) != binding(4, "a run") != binding(4, "a run", b"key")
    True
    """
    return tls.binding("secure-auc rendezvous v1", total, run_token or "", secret)


def _bind(addr: str, port: int, listening: bool) -> socket.socket:
    try:
        family, _, _, _, where = socket.getaddrinfo(addr, port, 0, socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError) as exc:
        raise PartyStartError(f"cannot resolve the rendezvous address {addr!r} ({exc})") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    if listening:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(where)
        if listening:
            sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortBusyError(f"port {port} on {addr} is busy: address already in use") from None
        raise PartyStartError(f"cannot listen on {addr}:{port} ({exc.strerror or exc})") from None
    return sock


def listen(addr: str, port: int) -> socket.socket:
    """Rank 0's rendezvous listener on ``addr:port`` (never a wildcard unless ``addr`` is one);
    raises :class:`PortBusyError` if the port is taken."""
    return _bind(addr, port, True)


def claim(addr: str, port: int) -> socket.socket:
    """``addr:port`` bound and not listening (nobody can connect): the run's configured port is
    this run's while it starts, so that a port in use, or two runs given one port, are named
    at once; raises :class:`PortBusyError` if it is taken."""
    return _bind(addr, port, False)


def _read_hello(sess: tls.Session) -> dict | None:
    """The check-in that came in the record of the connecting end's confirmation (already
    decrypted: nothing is waited for), or None."""
    head = bytearray(_LEN.size)
    if sess.read_into(memoryview(head)) != _LEN.size:
        return None
    n = _LEN.unpack(head)[0]
    if not 0 < n <= HELLO_MAX:
        return None
    body, got = bytearray(n), 0
    while got < n:
        k = sess.read_into(memoryview(body)[got:])
        if not k:
            return None
        got += k
    try:
        hello = json.loads(body.decode())
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return hello if isinstance(hello, dict) else None


def _address_ok(value) -> bool:
    if not isinstance(value, str) or len(value) > 300 or ":" not in value:
        return False
    port = value.rsplit(":", 1)[1]
    return port.isdigit() and 0 < int(port) < 65536


def _tell(sessions, message: dict, seconds: float = 5.0) -> None:
    """Send ``message`` to every session, then close each (best effort: a party gone is no error)."""
    wire = _frame(message)
    deadline = time.monotonic() + seconds
    for sess in sessions:
        try:
            tls.send_all(sess, wire, deadline)
        except (OSError, TimeoutError, tls.LinkError, ValueError):
            pass
    for sess in sessions:
        sess.close()


def host(listener: socket.socket, identity, total: int, bound: bytes, mesh_address: str, *, wait: float,
         describe, keys=None, members=(), refusal: str | None = None) -> Meeting:
    """Rank 0's side: admit every other party's check-in on ``listener`` (module docstring)
    for up to ``wait`` seconds, then answer each.  ``keys(rank)``: the roster's key of each
    rank (None: no roster, keys taken from the certificates); ``members``: every key of the
    roster (a refusal made with one of them counts).  ``refusal``: rank 0 itself cannot
    start: it tells every party that checks in within ``wait`` why, then raises.  Raises
    :class:`PartyStartError` naming the party that refused, or the ones missing."""
    ctx = tls.context(identity, "rank 0", bound, server_side=True)
    hellos: dict[int, dict] = {}
    got_keys: dict[int, bytes] = {}
    refused: list[tuple[int, str]] = []
    seen: dict = {}
    impostors: set[int] = set()  # ranks a connection claimed with a key that is not the roster's

    def admit(sess: tls.Session):
        role = sess.role or ""
        r = int(role[5:]) if role.startswith("rank ") and role[5:].isdigit() else -1
        if not 0 < r < total:
            return f"a connection claiming {role[:40]!r}"
        hello = _read_hello(sess)
        if hello is None:
            return f"a connection claiming {describe(r)} whose check-in is not one"
        if "refused" in hello:
            if keys is not None and sess.key not in members:
                return f"a refusal for {describe(r)} made with a key that is not the roster's"
            refused.append((r, _escape(hello["refused"])))
            return ("refused", r)
        if keys is not None and sess.key != keys(r):
            impostors.add(r)
            return f"a connection claiming {describe(r)} with another key"
        if not _address_ok(hello.get("address")):
            return f"a connection claiming {describe(r)} without a link address"
        if r in seen:  # the same party again (its first connection broke): the new one counts
            seen.pop(r).close()
        hellos[r], got_keys[r] = hello, sess.key
        seen[r] = sess
        return r

    start = time.monotonic()
    try:
        if refusal is not None:  # tell whoever of the roster checks in, until every party has been told
            told, _ = tls.accept(listener, ctx, admit, total - 1, start + wait)
            _tell(told.values(), {"refused": [0, _escape(refusal)]})
            return None
        links, closed = tls.accept(listener, ctx, admit, total - 1, start + wait, stop=lambda: bool(refused))
        if refused:
            r, reason = refused[0]
            others = [s for who, s in links.items() if who != ("refused", r)]
            _tell(others, {"refused": [r, reason]})
            for who, s in links.items():
                if who == ("refused", r):
                    s.close()
            seen.clear()  # (closed above)
            def admit_late(sess: tls.Session):  # a party of the roster that checks in after the refusal
                return ("late", secrets.token_hex(8)) if keys is None or sess.key in members else "not a party"

            late, _ = tls.accept(listener, ctx, admit_late, total, time.monotonic() + LATE)
            _tell(late.values(), {"refused": [r, reason]})
            raise PartyStartError(f"{describe(r)} cannot start: {reason}")
        missing = [r for r in range(1, total) if r not in hellos]
        if missing:
            names = ", ".join(describe(r) for r in missing)
            bad = [describe(r) for r in missing if r in impostors]
            said = (f"{', '.join(bad)} failed authentication (a connection claiming it presented a key that is "
                    "not the roster's); " if bad else "") + f"{names} never joined within {wait:g} s"
            _tell(links.values(), {"missing": names, "after": wait, "said": said})
            unknown = len(closed)
            raise PartyStartError(said + (
                f" ({unknown} connection(s) that did not authenticate as a party were closed: "
                + ("processes of another user, or " if keys is None else "another deployment's parties, or ")
                + "strangers)" if unknown else ""))
        run = secrets.token_hex(16)
        addresses = {0: mesh_address} | {r: hellos[r]["address"] for r in hellos}
        pubs = None if keys is not None else [b""] + [got_keys[r] for r in range(1, total)]
        from .channel import public_bytes

        if pubs is not None:
            pubs[0] = public_bytes(identity)
        _tell([seen[r] for r in range(1, total)],
              {"run": run, "addresses": {str(r): a for r, a in addresses.items()},
               "keys": None if pubs is None else [k.hex() for k in pubs]})
        return Meeting(run, addresses, pubs)
    except tls.LinkError as exc:
        raise PartyStartError(f"the rendezvous listener failed ({exc})") from None
    finally:
        listener.close()


def join(rank: int, total: int, identity, bound: bytes, addr: str, port: int, *, wait: float, describe,
         server_key: bytes | None, mesh_address: str | None = None, refusal: str | None = None,
         another_run: bool = False, local: bool = False) -> Meeting | None:
    """A party's side: check in at rank 0's rendezvous ``addr:port`` with its link address
    (or, with ``refusal``, only to say why it cannot start; returns None once said), trying
    again (a connection refused, or closed unread in a flood) for up to ``wait`` seconds, and
    wait for rank 0's answer (``wait`` + 10 s more).  ``server_key``: the roster's key of rank
    0 (None: no roster, or a party that refuses without one).  ``another_run``: the binding
    holds a run's token; a server whose certificate does not verify is another run's
    (:class:`PortBusyError`).  ``local``: no roster, the binding holds this user's local link
    key.  Raises :class:`PartyStartError` naming who failed."""
    ctx = tls.context(identity, f"rank {rank}", bound, server_side=False)
    hello = _frame({"refused": refusal} if refusal is not None else {"address": mesh_address})
    if len(hello) > HELLO_MAX:
        hello = _frame({"refused": refusal[: HELLO_MAX // 2]}) if refusal is not None else hello

    class WrongServer(Exception):
        pass

    def check(sess: tls.Session) -> None:
        if sess.role != "rank 0" or (server_key is not None and sess.key != server_key):
            raise WrongServer

    deadline = time.monotonic() + wait
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise PartyStartError(f"the server (rank 0) never joined: no rendezvous at {addr}:{port} within "
                                  f"{wait:g} s")
        try:
            s = socket.create_connection((addr, port), timeout=min(left, 2.0))
        except OSError:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            continue
        sess = tls.Session(s, ctx, server_side=False)
        try:
            tls.handshake(sess, min(deadline, time.monotonic() + 2 * tls.HELLO_LIMIT), check, hello)
            break
        except WrongServer:
            s.close()
            if another_run:
                raise PortBusyError(f"port {port - 1} on {addr} is in use by another run started on the same "
                                    "port; this run stops (give each run its own --port, or none)") from None
            raise PartyStartError(f"the party listening at {addr}:{port} is not the server of this roster (its "
                                  "key is not the roster's key for the server, rank 0)") from None
        except tls.Refused:
            s.close()
            raise PartyStartError(f"this party's identity key is not the roster's key for {describe(rank)} (the "
                                  "server, rank 0, refused it at the rendezvous)") from None
        except tls.LinkError as exc:
            s.close()
            if local and not another_run:
                raise PartyStartError(f"the server (rank 0) at {addr}:{port} is not a process of this user, or "
                                      f"{describe(rank)} is not (the TLS handshake failed: their certificates "
                                      "are not vouched for by the same local link key); the run stops") from None
            if another_run:
                raise PortBusyError(f"port {port - 1} on {addr} is in use by another run started on the same "
                                    "port; this run stops (give each run its own --port, or none)") from None
            raise PartyStartError(f"the TLS handshake with the rendezvous at {addr}:{port} failed ({exc}): "
                                  "a server of another deployment, or another number of parties") from None
        except (EOFError, TimeoutError, OSError):  # closed unread (a flood), or not up yet: again
            s.close()
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    if refusal is not None:
        sess.close()
        return None
    answered = time.monotonic() + wait + 10.0
    try:
        head = bytearray(_LEN.size)
        tls.read_exact(sess, memoryview(head), answered)
        n = _LEN.unpack(head)[0]
        if not 0 < n <= ANSWER_MAX:
            raise tls.LinkError(f"an answer of {n} bytes")
        body = bytearray(n)
        tls.read_exact(sess, memoryview(body), answered)
        answer = json.loads(body.decode())
    except TimeoutError:
        raise PartyStartError(f"the server (rank 0) did not answer at the rendezvous {addr}:{port} within "
                              f"{wait + 10:g} s") from None
    except (EOFError, OSError):
        raise PartyStartError(f"the server (rank 0) stopped during the rendezvous at {addr}:{port}") from None
    except (tls.LinkError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise PartyStartError(f"the server (rank 0) sent an answer that is not one at the rendezvous ({exc})") \
            from None
    finally:
        sess.close()
    return _meeting(answer, total, describe)


def _meeting(answer, total: int, describe) -> Meeting:
    if isinstance(answer, dict) and isinstance(answer.get("refused"), list) and len(answer["refused"]) == 2:
        r, reason = answer["refused"]
        who = describe(r) if isinstance(r, int) and 0 <= r < total else "a party"
        raise PartyStartError(f"{who} cannot start: {_escape(reason)}")
    if isinstance(answer, dict) and isinstance(answer.get("said"), str):
        raise PartyStartError(_escape(answer["said"]))
    if isinstance(answer, dict) and isinstance(answer.get("missing"), str):
        after = answer.get("after")
        after = f"{after:g}" if isinstance(after, (int, float)) else "?"
        raise PartyStartError(f"{_escape(answer['missing'])} never joined within {after} s")
    try:
        run = answer["run"]
        addresses = {int(r): a for r, a in answer["addresses"].items()}
        keys = None if answer.get("keys") is None else [bytes.fromhex(k) for k in answer["keys"]]
        if not (isinstance(run, str) and sorted(addresses) == list(range(total))
                and all(_address_ok(a) for a in addresses.values())
                and (keys is None or (len(keys) == total and all(len(k) == 32 for k in keys)))):
            raise ValueError
    except (KeyError, TypeError, ValueError, AttributeError):
        raise PartyStartError("the server (rank 0) sent an answer that is not one at the rendezvous") from None
    return Meeting(run, addresses, keys)
