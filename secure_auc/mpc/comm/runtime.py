"""Bringing a party's CrypTen runtime up and down, with bounded waits.

* The communicator rendezvous is torch.distributed's ``env://`` (MASTER_ADDR,
  MASTER_PORT), the same for local processes and torchrun-launched parties.
* Every collective and the rendezvous itself time out after ``timeout``
  seconds (torch's default is 30 minutes): we set torch.distributed's default
  process-group timeout before CrypTen creates its groups.
* ``provider``: "ttp" — a separate dealer process (rank K + 1) deals the
  correlated randomness (:mod:`..primitives.dealer`), no computing party sees
  it; "tfp" — rank 0 (the server) deals it, which lets it unmask every value.
* After the rendezvous, every party authenticates every peer and moves every
  message onto TLS 1.3 links (:mod:`.secure`).
"""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta

from ...validation import InputError

__all__ = ["PartyStartError", "PortBusyError", "explain", "init_party", "shutdown_party", "refuse_roll_call",
           "communication_stats", "reset_communication_stats"]


class PartyStartError(RuntimeError):
    """The parties could not all meet (one never started, or the address is wrong/busy)."""


class PortBusyError(PartyStartError):
    """The run's port, or the next one, is held by another process or run: nothing was computed."""


def _interface_towards(addr: str) -> str | None:
    """Name of the local network interface whose address routes to ``addr`` (Linux).

    Gloo picks the address a party advertises from its hostname, which on many
    machines resolves to a loopback address; other hosts then cannot connect.
    Binding gloo to the interface that actually reaches the server avoids that.
    """
    import socket

    from .transport import interface_address, route_address

    local_ip = route_address(addr)
    if local_ip is None:
        return None
    return next((name for _, name in socket.if_nameindex() if interface_address(name) == local_ip), None)


def bound_store(addr: str, port: int, timeout: float, world_size: int | None = None):
    """Rank 0's torch ``TCPStore`` listening on ``addr`` only (torch's own binds every
    interface): the socket is bound here and handed to the store (``master_listen_fd``).
    Raises :class:`PortBusyError` if the port is taken."""
    import errno
    import socket

    import torch.distributed as dist

    try:
        family, _, _, _, where = socket.getaddrinfo(addr, port, 0, socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError) as exc:
        raise PartyStartError(f"cannot resolve the rendezvous address {addr!r} ({exc})") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(where)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortBusyError(f"port {port} on {addr} is busy: address already in use") from None
        raise PartyStartError(f"cannot listen on {addr}:{port} ({exc.strerror or exc})") from None
    try:
        store = dist.TCPStore(addr, port, world_size, True, timeout=timedelta(seconds=timeout),
                              wait_for_workers=False, master_listen_fd=sock.detach())
    except Exception as exc:  # noqa: BLE001 - torch raises several kinds
        raise PartyStartError(f"cannot open a store on {addr}:{port}: {str(exc).splitlines()[0]}") from None
    return store


def _keep_freed_memory() -> None:
    """Let glibc reuse freed large blocks instead of returning them to the OS.

    The sorts allocate and free arrays of tens of MB many times per round; by
    default glibc maps the largest afresh each time and the kernel zeroes every
    page again.  Raising the mmap and trim thresholds keeps them in the heap:
    the radix sort of 2^20 scores runs about a quarter faster (2 parties, TFP:
    19.2 s -> 14.1 s), at a higher peak (2.3 -> 2.6 GiB).  No-op where glibc's
    ``mallopt`` is missing or refuses the values."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        libc.mallopt(m_mmap_threshold, 1 << 30)
        libc.mallopt(m_trim_threshold, 2**31 - 1)
    except (OSError, AttributeError):
        pass


def init_party(*, rank: int, parties: int, master_addr: str, master_port: int,
               provider: str = "ttp", timeout: float = 60.0, threads: int = 1,
               identity=None, roster=None, insecure: bool = False, roll_call: bool = False,
               on_ready=None, run_token: str | None = None, roll_call_timeout: float | None = None) -> None:
    """Initialise CrypTen for party ``rank`` of ``parties`` computing parties (+ dealer),
    then authenticate every peer against ``roster`` with this party's ``identity``
    (an Ed25519 private key) and route every message over encrypted links
    (:mod:`.secure`).  ``roster="exchange"`` (one host only, no roster given): every
    party draws an identity key and the public keys are exchanged over the local
    process group, which encrypts the links but authenticates no one.
    ``insecure=True`` skips the links: plain gloo TCP, only for tests that need to
    see the unprotected transport.  ``roll_call=True`` (parties started separately, as
    under torchrun): first every party checks in at a store on ``master_port + 1`` run
    by rank 0, so that a party that never starts is named (:func:`roll_call`) after
    ``roll_call_timeout`` seconds (default ``timeout``).  ``on_ready()``
    (optional) is called once this party's modules are loaded, just before it waits for the
    others: a launcher uses it to name the parties that never got that far.  ``run_token``
    (local launcher): this run's secret; rank 0 claims ``master_port + 1`` with it before the
    rendezvous and every other party checks it there first (:func:`_claim_port`), so that two
    runs started on one port never meet at each other's rendezvous."""
    import torch
    import torch.distributed.distributed_c10d as c10d

    from . import backend

    if provider not in ("ttp", "tfp"):
        raise InputError(f"provider must be 'tfp' or 'ttp', got {provider!r}")
    if roster is None and not insecure:
        raise InputError("no roster: every party must know every other party's identity key")
    torch.set_num_threads(threads)
    _keep_freed_memory()
    import faulthandler

    faulthandler.enable()  # a crash in native code (gloo, torch) still shows where each thread was
    os.environ.update({
        "RANK": str(rank),
        "WORLD_SIZE": str(parties),
        "RENDEZVOUS": "env://",
        "DISTRIBUTED_BACKEND": "gloo",
        "MASTER_ADDR": str(master_addr),
        "MASTER_PORT": str(master_port),
    })
    if "GLOO_SOCKET_IFNAME" not in os.environ and not str(master_addr).startswith(("127.", "localhost")):
        iface = _interface_towards(str(master_addr))
        if iface:
            os.environ["GLOO_SOCKET_IFNAME"] = iface
    c10d.default_pg_timeout = timedelta(seconds=timeout)
    total = parties + (1 if provider == "ttp" else 0)
    if roll_call:
        describe = getattr(roster, "describe", None)  # a Roster's names for its layout (not "exchange")
        signer = members = None  # rank 0 signs the roll call's verdict; the others check it with the roster's key
        if identity is not None and hasattr(roster, "key"):
            signer = identity if rank == 0 else roster.key(0)
            members = roster.members()  # a refusal counts only if a rostered party signed it
        _ROLL_CALL.append(_roll_call(rank, total, parties - 1, str(master_addr), int(master_port) + 1,
                                     timeout if roll_call_timeout is None else roll_call_timeout, describe, signer,
                                     members))
    if run_token is not None:
        _claim_port(rank, str(master_addr), int(master_port), run_token, timeout)
    if rank == 0 and (_HOSTED or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"):
        # the rendezvous store on the configured address only; CrypTen's env:// rendezvous then
        # connects to it as every other party does (as under torchrun, whose agent hosts it)
        _HOSTED[:] = [bound_store(str(master_addr), int(master_port), timeout, total)]
        os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    if on_ready is not None:
        on_ready()
    from .deafen import deafen, listening_sockets, more_descriptors

    more_descriptors()  # gloo's listeners keep every connection until they are made deaf
    before = set(listening_sockets())  # gloo's listeners are those backend.init opens
    try:
        backend.init(provider.upper())
    except Exception as exc:  # torch raises RuntimeError/DistStoreError/DistNetworkError
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "address already in use" in text.lower() or "EADDRINUSE" in text:
            raise PortBusyError(f"port {master_port} on {master_addr} is busy: {text}") from None
        raise PartyStartError(
            f"rank {rank}: not all {total} parties joined at {master_addr}:{master_port} "
            f"within {timeout:g} s ({text})"
        ) from None
    if provider == "ttp" and rank == parties:
        backend.ttp_release_parties()
    if not insecure:
        from .secure import establish

        if roster == "exchange":
            identity, roster = _exchange_roster(parties - 1, provider == "ttp")
        establish(identity, roster, roster.describe, timeout)
        # every party has its links: rank 0's stores (the rendezvous, the roll call), which
        # authenticate no one, are no longer needed; they close once every party is past them
        import torch.distributed as dist

        dist.barrier()
        _close_stores()
        deafen(set(listening_sockets()) - before)  # nothing travels over gloo now: no one may reach it


def _exchange_roster(clients: int, dealer: bool):
    """Ephemeral identity keys for single-host runs without a roster file: every party
    sends every other its public key with an HMAC under this OS user's local link key
    (:func:`.roster.local_link_key`), so only processes of the same user can take a rank."""
    import hashlib
    import hmac

    import torch
    import torch.distributed as dist

    from .channel import ChannelError, public_bytes
    from .roster import Roster, describe_rank, generate_identity, local_link_key

    secret = local_link_key()
    me, world = dist.get_rank(), dist.get_world_size()

    def tag(rank: int, pub: bytes) -> bytes:
        return hmac.new(secret, b"secure-auc local roster" + rank.to_bytes(4, "little") + pub, hashlib.sha256).digest()

    identity = generate_identity()
    pub = public_bytes(identity)
    mine = torch.frombuffer(bytearray(pub + tag(me, pub)), dtype=torch.uint8)
    got = [torch.empty(64, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(got, mine)
    pubs = []
    for r, t in enumerate(got):
        raw = bytes(t.numpy())
        if not hmac.compare_digest(raw[32:], tag(r, raw[:32])):
            raise ChannelError(f"{describe_rank(r, clients)} is not a process of this user (its key is not "
                               "vouched for by this user's local link key); the run stops")
        pubs.append(raw[:32])
    return identity, Roster.from_ranks(pubs, clients, dealer)


_ROLL_CALL: list = []  # rank 0's store lives as long as its process
_HOSTED: list = []  # rank 0's rendezvous store (until every party has its links)


def _close_stores() -> None:
    """Close the stores this process hosts or holds (the rendezvous, the roll call)."""
    if _HOSTED:
        _HOSTED.clear()
        os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    _ROLL_CALL.clear()

_RUN_KEY = "secure-auc/run"


def _claim_port(rank: int, addr: str, port: int, token: str, timeout: float) -> None:
    """Rank 0 opens a store on ``port + 1`` holding this run's token, before anyone meets on
    ``port``; every other party reads the token there first and stops if it is another run's.
    Of two runs started on one port, only the one whose server holds ``port + 1`` goes on to
    its rendezvous, and no party of the other ever reaches it."""
    import torch.distributed as dist

    def first_line(exc):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__

    if rank == 0:
        try:
            store = bound_store(addr, port + 1, timeout)
        except PartyStartError as exc:
            raise PortBusyError(f"port {port + 1} on {addr} is busy (another run on port {port}?): "
                                  f"{first_line(exc)}") from None
        store.set(_RUN_KEY, token)
        _ROLL_CALL.append(store)
        return
    try:
        store = dist.TCPStore(addr, port + 1, None, False, timeout=timedelta(seconds=timeout))
        theirs = store.get(_RUN_KEY).decode()
    except Exception:  # noqa: BLE001
        raise PartyStartError(f"the server (rank 0) of this run did not open {addr}:{port + 1} within "
                              f"{timeout:g} s") from None
    if theirs != token:
        raise PortBusyError(f"port {port} on {addr} is in use by another run started on the same port; "
                              "this run stops (give each run its own --port, or none)")


_REFUSED = "secure-auc/refused/{}"  # the roll-call store's key where party r leaves why it cannot start
_REFUSAL_CONTEXT = b"secure-auc roll call refusal v1\0"


def refuse_roll_call(rank: int, total: int, addr: str, port: int, reason: str, timeout: float,
                     identity=None) -> None:
    """Party ``rank`` cannot start (``reason``) but can reach the roll-call at ``addr:port``: it
    checks in only to say why, so that every other party stops at once naming it
    (:func:`_roll_call`) instead of waiting out the roll-call.  Rank 0 hosts the store and
    keeps it until every party has checked in (or ``timeout``); best effort: raises nothing.
    ``identity``: the party's key; the refusal is signed with it, and the others believe only a
    refusal that a key of their roster signed (the store has no authentication: a stranger's
    refusal is ignored)."""
    import time

    import torch.distributed as dist

    try:
        store = bound_store(addr, port, timeout, total) if rank == 0 else \
            dist.TCPStore(addr, port, total, False, timeout=timedelta(seconds=timeout), wait_for_workers=False)
        said = reason.encode()
        if identity is not None:
            said = identity.sign(_REFUSAL_CONTEXT + str(rank).encode() + b"\0" + said) + said
        store.set(_REFUSED.format(rank), said)
        if rank == 0:
            keys = [f"secure-auc/joined/{r}" for r in range(1, total)]
            deadline = time.monotonic() + timeout
            while not all(store.check([k]) or store.check([_REFUSED.format(r + 1)]) for r, k in enumerate(keys)):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            time.sleep(2.0)  # the others read the reason before this store closes
    except Exception:  # noqa: BLE001 - nobody to tell: the others name this party after their wait
        return


def _verdict_signature(signer, text: str) -> bytes:
    return signer.sign(b"secure-auc roll call verdict v1\0" + text.encode())


def _signed_verdict(raw: bytes, server_key: bytes | None) -> str | None:
    """The roll call's verdict if rank 0 signed it (``server_key``: the roster's key of rank 0;
    None: a run without a roster, nothing checked); else None (a stranger wrote it)."""
    if server_key is None:
        return raw.decode(errors="replace")
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    signature, text = raw[:64], raw[64:].decode(errors="replace")
    try:
        Ed25519PublicKey.from_public_bytes(server_key).verify(signature, b"secure-auc roll call verdict v1\0"
                                                               + text.encode())
    except (InvalidSignature, ValueError):
        return None
    return text


def _signed_refusal(raw: bytes, rank: int, members) -> str | None:
    """Party ``rank``'s reason for not starting if a key of the roster (``members``) signed it
    (None: a run without a roster, nothing checked); else None (a stranger wrote it)."""
    if members is None:
        return raw.decode(errors="replace")
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    signature, text = raw[:64], raw[64:]
    for key in members:
        try:
            Ed25519PublicKey.from_public_bytes(key).verify(signature, _REFUSAL_CONTEXT + str(rank).encode() + b"\0"
                                                           + text)
        except (InvalidSignature, ValueError):
            continue
        return text.decode(errors="replace")
    return None


def _roll_call(rank: int, total: int, clients: int, addr: str, port: int, timeout: float, describe=None,
               signer=None, members=None):
    """Every party checks in at rank 0's store on ``port``.  If some party has not checked
    in after ``timeout`` seconds, rank 0 writes down who, waits a moment for the others to
    read it, and every party stops naming the missing ones.  Returns the store (rank 0
    keeps it alive).  ``describe(rank)``: the names of the ranks (default: the layout where
    every client computes, :func:`.roster.describe_rank`).  ``signer``: rank 0's identity
    key (at rank 0) or the roster's public key of rank 0 (elsewhere): the verdict is signed,
    and one that is not (a stranger's, written into the unauthenticated store) is ignored."""
    import time

    import torch.distributed as dist

    from .roster import describe_rank

    try:
        store = bound_store(addr, port, timeout, total) if rank == 0 else \
            dist.TCPStore(addr, port, total, False, timeout=timedelta(seconds=timeout), wait_for_workers=False)
    except Exception as exc:  # noqa: BLE001 - torch raises several kinds
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if rank == 0:
            raise PartyStartError(f"cannot open the roll-call port {port} on {addr}: {text}") from None
        raise PartyStartError(f"the server (rank 0) never joined: no roll-call at {addr}:{port} within "
                              f"{timeout:g} s") from None
    keys = [f"secure-auc/joined/{r}" for r in range(total)]
    verdict = "secure-auc/missing"
    try:
        store.set(keys[rank], "1")
        deadline = time.monotonic() + timeout + (0 if rank == 0 else 10)
        name = describe or (lambda r: describe_rank(r, clients))
        while not store.check(keys):
            refused = [(r, _signed_refusal(store.get(_REFUSED.format(r)), r, members)) for r in range(total)
                       if r != rank and store.check([_REFUSED.format(r)])]
            refused = [(r, reason) for r, reason in refused if reason is not None]  # a stranger's: ignored
            if refused:  # a party that cannot start checked in to say why
                if rank == 0:
                    time.sleep(2.0)  # the others read it before this store closes
                raise PartyStartError(f"{name(refused[0][0])} cannot start: {refused[0][1]}")
            if rank != 0 and store.check([verdict]):
                said = _signed_verdict(store.get(verdict), signer)
                if said is not None:
                    raise PartyStartError(f"{said} never joined within {timeout:g} s")
            if time.monotonic() > deadline:
                missing = ", ".join(name(r) for r, k in enumerate(keys) if not store.check([k]))
                if rank == 0:
                    store.set(verdict, missing.encode() if signer is None else
                              _verdict_signature(signer, missing) + missing.encode())
                    time.sleep(2.0)  # the others read the verdict before this store closes
                raise PartyStartError(f"{missing} never joined within {timeout:g} s")
            time.sleep(0.05)
    except PartyStartError:
        raise
    except Exception:  # noqa: BLE001 - the store went away: rank 0 stopped
        raise PartyStartError(f"the server (rank 0) stopped during the roll-call at {addr}:{port}") from None
    return store


def explain(exc: BaseException) -> str:
    """One clear line for an exception raised during a run (torch's are pages long)."""
    text = str(exc)
    low = text.lower()
    from .channel import ChannelError
    from .inlinks import InputLinkError

    if isinstance(exc, (PartyStartError, InputError, ChannelError, InputLinkError)):
        return text
    if "connection closed by peer" in low or "connection reset" in low or "broken pipe" in low:
        return "another party disconnected (it crashed or was stopped); the run cannot continue"
    if "timed out" in low or "timeout" in low:
        return "no answer from another party within the timeout; the run cannot continue"
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(exc).__name__}: {first[:300]}"


def shutdown_party() -> None:
    from . import backend, secure

    with contextlib.suppress(Exception):
        backend.uninit()  # (tells the dealer to stop, over the links)
    with contextlib.suppress(Exception):
        secure.close()
    _close_stores()


def communication_stats() -> dict:
    from . import backend

    return backend.communication_stats()


def reset_communication_stats() -> None:
    from . import backend

    backend.reset_communication_stats()
