"""The computing parties' authenticated rendezvous (:mod:`secure_auc.mpc.comm.rendezvous`), in
process (threads, no CrypTen world): a stranger at the rendezvous port during the start-up
(silent and garbage connections, writes as a client of torch's store, check-ins and refusals
made with keys that are not the roster's) neither stalls nor changes the meeting, names no
party, and does not grow the host's memory; a party that never checks in, or one that cannot
start, is named by the roster's layout."""

import os
import socket
import threading
import time

import pytest

from secure_auc.mpc.comm import rendezvous, tls
from secure_auc.mpc.comm.channel import public_bytes
from secure_auc.mpc.comm.rendezvous import PartyStartError
from secure_auc.mpc.comm.roster import Roster, generate_identity

from .stranger import resident_mb, start as stranger


def _roster(n_helpers=2):
    ids = [generate_identity() for _ in range(3 + n_helpers)]
    keys = [public_bytes(k) for k in ids]
    roster = Roster(server=keys[0], clients=tuple(keys[n_helpers + 2:]), dealer=keys[n_helpers + 1],
                    helpers=tuple(keys[1:n_helpers + 1]))
    return ids, roster


def _start(ids, roster, port, total, wait, skip=(), refuse=None):
    """Rank 0's rendezvous and every other rank's check-in, each in a thread: {rank: Meeting or
    the PartyStartError's text}."""
    outcome = {}
    bound = rendezvous.binding(total)
    listener = rendezvous.listen("127.0.0.1", port)

    def run(r):
        try:
            if r == 0:
                outcome[r] = rendezvous.host(listener, ids[0], total, bound, "127.0.0.1:40000", wait=wait,
                                             describe=roster.describe, keys=roster.key, members=roster.members())
            else:
                outcome[r] = rendezvous.join(r, total, ids[r], bound, "127.0.0.1", port, wait=wait,
                                             describe=roster.describe, server_key=roster.key(0),
                                             mesh_address=f"127.0.0.1:{40000 + r}",
                                             refusal=refuse[1] if refuse and refuse[0] == r else None)
        except PartyStartError as exc:
            outcome[r] = str(exc)

    threads = {r: threading.Thread(target=run, args=(r,), daemon=True) for r in range(total) if r not in skip}
    return outcome, threads


def _forged(port, claim, hello):
    """A stranger's TLS check-in: a key of its own (the run's certificate authority is no secret)."""
    ctx = tls.context(generate_identity(), claim, rendezvous.binding(4), server_side=False)
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        tls.handshake(tls.Session(s, ctx, server_side=False), time.monotonic() + 5, None,
                      rendezvous._frame(hello))
    except (tls.LinkError, EOFError, OSError, TimeoutError) as exc:
        return type(exc).__name__
    return "accepted"


def test_a_stranger_at_the_rendezvous_port_during_the_start_up(free_port):
    """Started before rank 0 listens and kept up until every party met: the meeting is the one
    without the stranger (every party's link address, one run id for all), within seconds, no
    party named, the host's memory within 50 MB; the stranger's own check-ins are refused."""
    ids, roster = _roster()
    port = free_port + 1
    attacker = stranger([("127.0.0.1", port)], writes=True)
    try:
        time.sleep(0.5)  # its store clients are up (torch imported) and retrying
        before = resident_mb(os.getpid())
        outcome, threads = _start(ids, roster, port, 4, wait=20.0)
        began = time.monotonic()
        threads[0].start()
        time.sleep(1.0)  # the stranger works on the open port; then forged check-ins, then the parties
        forged = [_forged(port, "rank 2", {"address": "10.9.9.9:1"}),
                  _forged(port, "rank 3", {"refused": "forged: the dealer cannot start"}),
                  _forged(port, "rank 0", {"address": "10.9.9.9:1"})]
        for r in (1, 2, 3):
            threads[r].start()
        for t in threads.values():
            t.join(30)
        took = time.monotonic() - began
        grown = resident_mb(os.getpid()) - before
    finally:
        attacker.kill()
        attacker.wait()
    assert forged == ["Refused", "Refused", "Refused"], forged
    meetings = [outcome[r] for r in range(4)]
    assert all(isinstance(m, rendezvous.Meeting) for m in meetings), meetings
    assert len({m.run for m in meetings}) == 1
    expected = {0: "127.0.0.1:40000"} | {r: f"127.0.0.1:{40000 + r}" for r in (1, 2, 3)}
    assert all(m.addresses == expected for m in meetings)
    assert took < 10.0, took
    assert grown < 50, grown


def test_a_missing_party_and_a_refusal_are_named_by_the_rosters_layout(free_port, monkeypatch):
    """Rank 0 names, after the roll call's time, the ranks that never checked in, and every party
    that did names them too; a rostered party that cannot start (it holds another rostered key)
    is named by every party at once."""
    ids, roster = _roster()
    port = free_port + 1
    outcome, threads = _start(ids, roster, port, 4, wait=1.0, skip=(2, 3))
    for t in threads.values():
        t.start()
    for t in threads.values():
        t.join(20)
    said = "helper 2 (rank 2), dealer (rank 3) never joined within 1 s"
    assert outcome == {0: said, 1: said}

    ids[1] = ids[4]  # helper 1 was given client 0's key: it checks in only to say so
    monkeypatch.setattr(rendezvous, "LATE", 0.3)  # (rank 0 then still tells the late ones, 2 s by default)
    outcome, threads = _start(ids, roster, port, 4, wait=30.0, refuse=(1, "its key is not the roster's"))
    began = time.monotonic()
    for r in (0, 2, 3):
        threads[r].start()
    time.sleep(0.5)
    threads[1].start()
    for t in threads.values():
        t.join(20)
    said = "helper 1 (rank 1) cannot start: its key is not the roster's"
    assert outcome == {0: said, 1: None, 2: said, 3: said}
    assert time.monotonic() - began < 5.0


def test_a_party_of_another_run_stops_naming_the_port(free_port):
    """Two runs given one port (local launcher): the run's token is in the certificates'
    authority, so a party of the other run never completes a handshake with this server."""
    ids, roster = _roster()
    port = free_port + 1
    listener = rendezvous.listen("127.0.0.1", port)
    host = threading.Thread(target=lambda: pytest.raises(PartyStartError, rendezvous.host, listener, ids[0], 4,
                                                         rendezvous.binding(4, "run a"), "127.0.0.1:1", wait=2.0,
                                                         describe=roster.describe, keys=roster.key,
                                                         members=roster.members()), daemon=True)
    host.start()
    with pytest.raises(rendezvous.PortBusyError, match=f"port {port - 1} on 127.0.0.1 is in use by another run"):
        rendezvous.join(1, 4, ids[1], rendezvous.binding(4, "run b"), "127.0.0.1", port, wait=5.0,
                        describe=roster.describe, server_key=roster.key(0), mesh_address="127.0.0.1:1",
                        another_run=True)
    with pytest.raises(rendezvous.PortBusyError, match=f"port {port} on 127.0.0.1 is busy"):
        rendezvous.listen("127.0.0.1", port)
    host.join(10)
