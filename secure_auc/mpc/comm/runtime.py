"""Bringing a party's CrypTen runtime up and down, with bounded waits.

* The parties meet at rank 0's authenticated rendezvous (:mod:`.rendezvous`, a TLS 1.3
  listener on ``master_port + 1`` of the configured address; rank 0 also holds
  ``master_port`` bound, not listening, unless torchrun's agent holds it), open their
  TLS links (:mod:`.secure`), and only then CrypTen makes its process group, one that
  opens no socket: every message of its set-up already goes over the links.
  ``insecure=True`` (tests of the unprotected transport only): torch's ``env://``
  rendezvous (a ``TCPStore``) and gloo, as CrypTen does by itself.
* Every wait, the rendezvous's included, is bounded by ``timeout`` seconds (torch's
  default is 30 minutes).
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

from .rendezvous import PartyStartError, PortBusyError

__all__ = ["PartyStartError", "PortBusyError", "explain", "init_party", "shutdown_party", "refuse_roll_call",
           "communication_stats", "reset_communication_stats"]


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
    import torch.distributed as dist

    from .rendezvous import listen

    sock = listen(addr, port)
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
               provider: str = "ttp", timeout: float = 60.0, threads: int | None = None,
               identity=None, roster=None, insecure: bool = False, roll_call: bool = False,
               on_ready=None, run_token: str | None = None, roll_call_timeout: float | None = None) -> None:
    """Initialise CrypTen for party ``rank`` of ``parties`` computing parties (+ dealer),
    every peer authenticated against ``roster`` with this party's ``identity`` (an Ed25519
    private key) and every message routed over encrypted links (:mod:`.secure`).

    The parties first meet at rank 0's authenticated rendezvous on ``master_port + 1``
    (:mod:`.rendezvous`): a party that never checks in is named by every party after
    ``roll_call_timeout`` seconds (default ``timeout``), one that cannot start and says so
    (:func:`refuse_roll_call`) at once.  ``roster="exchange"`` (one host only, no roster
    given): every party draws an identity key, and the rendezvous admits only processes of
    this OS user (its local link key) and hands every party the keys: the links are encrypted
    but authenticate no one beyond that.  ``insecure=True`` skips all this: torch's ``env://``
    rendezvous and plain gloo TCP, only for tests that need to see the unprotected transport.
    ``roll_call``: kept for the callers (parties started separately); every secure start has
    its roll call.  ``on_ready()`` (optional) is called once this party's modules are loaded,
    just before it waits for the others: a launcher uses it to name the parties that never got
    that far.  ``run_token`` (local launcher): this run's secret, bound into the rendezvous's
    certificates, so that two runs started on one port never meet at each other's rendezvous
    (a party of the other run stops naming the port, :class:`PortBusyError`).  ``threads``: this
    party's threads for the compiled kernels and torch (:func:`..kernels.set_threads`; None:
    the cores the process may use); a computing party then compiles or loads the kernels
    (:func:`..kernels.warm_up`) before it meets the others."""
    import torch.distributed.distributed_c10d as c10d

    from . import backend

    if provider not in ("ttp", "tfp"):
        raise InputError(f"provider must be 'tfp' or 'ttp', got {provider!r}")
    if roster is None and not insecure:
        raise InputError("no roster: every party must know every other party's identity key")
    from .. import kernels

    kernels.set_threads(threads)  # the compiled kernels' (None: the cores this process may use)
    if not (provider == "ttp" and rank == parties):  # a computing party compiles (or loads) its kernels now,
        kernels.warm_up()  # before it meets the others: never while they wait for it
    _keep_freed_memory()
    import faulthandler

    faulthandler.enable()  # a crash in native code (gloo, torch) still shows where each thread was
    os.environ.update({
        "RANK": str(rank),
        "WORLD_SIZE": str(parties),
        "MASTER_ADDR": str(master_addr),
        "MASTER_PORT": str(master_port),
    })
    if "GLOO_SOCKET_IFNAME" not in os.environ and not str(master_addr).startswith(("127.", "localhost")):
        iface = _interface_towards(str(master_addr))
        if iface:
            os.environ["GLOO_SOCKET_IFNAME"] = iface
    c10d.default_pg_timeout = timedelta(seconds=timeout)
    total = parties + (1 if provider == "ttp" else 0)
    if insecure:
        _init_insecure(rank, total, str(master_addr), int(master_port), provider, timeout, on_ready, run_token)
        return
    from . import rendezvous, secure
    from .descriptors import more_descriptors
    from .roster import Roster, describe_rank, generate_identity, local_link_key
    from .transport import listen_for_links

    more_descriptors()  # a flood at a listener during the start-up does not use up this party's descriptors

    exchange = roster == "exchange"
    describe = (lambda r: describe_rank(r, parties - 1)) if exchange else roster.describe
    if exchange:
        identity = generate_identity()
    elif roster.ranks() != total:
        raise PartyStartError(f"the roster lists {roster.ranks()} parties but this run has {total}")
    bound = rendezvous.binding(total, run_token, local_link_key() if exchange else b"")
    wait = timeout if roll_call_timeout is None else roll_call_timeout
    addr, port = str(master_addr), int(master_port) + 1
    held = []
    try:
        if rank == 0:
            if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":  # (torchrun's agent holds it)
                held.append(rendezvous.claim(addr, int(master_port)))
            listener = rendezvous.listen(addr, port)
            held.append(listener)
        links = listen_for_links(addr, total)
        held.append(links)
        mesh_address = "{}:{}".format(*links.getsockname()[:2])
        if on_ready is not None:
            on_ready()
        if rank == 0:
            meeting = rendezvous.host(listener, identity, total, bound, mesh_address, wait=wait, describe=describe,
                                      keys=None if exchange else roster.key,
                                      members=() if exchange else roster.members())
        else:
            meeting = rendezvous.join(rank, total, identity, bound, addr, port, wait=wait, describe=describe,
                                      server_key=None if exchange else roster.key(0), mesh_address=mesh_address,
                                      another_run=run_token is not None, local=exchange)
        if exchange:
            roster = Roster.from_ranks(meeting.keys, parties - 1, provider == "ttp")
        secure.establish(identity, roster, describe, timeout, me=rank, world=total, addresses=meeting.addresses,
                         run=meeting.run, master_addr=addr, listener=links)
    finally:
        for sock in held:
            sock.close()
    secure.process_group()
    os.environ.update({"RENDEZVOUS": f"{secure.BACKEND}://", "DISTRIBUTED_BACKEND": secure.BACKEND})
    try:
        backend.init(provider.upper())
    except Exception as exc:  # noqa: BLE001 - a link failed during CrypTen's set-up
        from .channel import ChannelError

        if isinstance(exc, ChannelError):
            raise
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PartyStartError(f"rank {rank}: CrypTen's set-up failed ({text})") from None
    if provider == "ttp" and rank == parties:
        backend.ttp_release_parties()


def _init_insecure(rank: int, total: int, master_addr: str, master_port: int, provider: str, timeout: float,
                   on_ready, run_token) -> None:
    """torch's ``env://`` rendezvous at rank 0's ``TCPStore`` and gloo (tests of the unprotected
    transport only)."""
    from . import backend

    os.environ.update({"RENDEZVOUS": "env://", "DISTRIBUTED_BACKEND": "gloo"})
    if run_token is not None:
        _claim_port(rank, master_addr, master_port, run_token, timeout)
    if rank == 0 and (_HOSTED or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"):
        _HOSTED[:] = [bound_store(master_addr, master_port, timeout, total)]
        os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    if on_ready is not None:
        on_ready()
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
    if provider == "ttp" and rank == total - 1:
        backend.ttp_release_parties()


_ROLL_CALL: list = []  # rank 0's run claim (insecure runs)
_HOSTED: list = []  # rank 0's rendezvous store (insecure runs)


def _close_stores() -> None:
    """Close the stores this process hosts or holds (insecure runs)."""
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


def refuse_roll_call(rank: int, total: int, addr: str, port: int, reason: str, timeout: float,
                     identity=None) -> None:
    """Party ``rank`` cannot start (``reason``) but can reach the rendezvous at ``addr:port``
    (``master_port + 1``): it checks in only to say why, so that every other party stops at
    once naming it instead of waiting out the roll call (:mod:`.rendezvous`).  ``identity``:
    the key it holds; rank 0 believes a refusal made with any key of its roster.  Rank 0
    itself (it may hold no roster) tells every party that checks in within ``timeout`` that it
    cannot start, without the detail (it cannot tell a party from a stranger).  Best effort:
    raises nothing."""
    from . import rendezvous
    from .roster import describe_rank, generate_identity

    identity = identity or generate_identity()
    bound = rendezvous.binding(total)

    def describe(r):
        return describe_rank(r, total - 2)

    try:
        if rank == 0:
            listener = rendezvous.listen(addr, port)
            rendezvous.host(listener, identity, total, bound, "", wait=timeout, describe=describe,
                            refusal="its key or configuration is not valid (the detail is in its own log)")
        else:
            rendezvous.join(rank, total, identity, bound, addr, port, wait=timeout, describe=describe,
                            server_key=None, refusal=reason)
    except Exception:  # noqa: BLE001 - nobody to tell: the others name this party after their wait
        return


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
