"""Encrypted, authenticated links: the record layer alone, then faults in real runs.

Every fault must end every party with one clear line naming the link or the rank,
within the timeout, and leave no process behind.
"""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from secure_auc.mpc.comm.channel import CHUNK, ChannelError, Link, derive_keys, ephemeral, sealed_size
from secure_auc.mpc.launch import MPCError, spawn_parties

from .conftest import BIN, PARTY, party_env, write_clients


def _pair():
    (s0, e0), (s1, e1) = ephemeral(), ephemeral()
    k01, k10 = derive_keys(0, 1, s0, e0, e1)
    assert (k10, k01) == derive_keys(1, 0, s1, e1, e0)
    name = lambda r: f"rank {r}"  # noqa: E731
    return Link(0, 1, k01, k10, name), Link(1, 0, k10, k01, name)


def _input_pair(timeout: float):
    import socket

    from secure_auc.mpc.comm.inlinks import InputLink

    a, b = _pair()
    sa, sb = socket.socketpair()
    for sock in (sa, sb):
        sock.settimeout(timeout)
    return InputLink(sa, a, "client host", timeout), InputLink(sb, b, "computing party", timeout)


@pytest.mark.parametrize("beating", [True, False])
def test_a_waiting_host_outlasts_its_timeout_only_on_heartbeats(beating):
    """Long work (three timeouts) with heartbeats: the waiting side gets its array; without
    them, it names the silent peer within its timeout."""
    import threading

    from secure_auc.mpc.comm.inlinks import Heartbeat, InputLinkError

    party, host = _input_pair(timeout=0.6)
    ranks = np.arange(5, dtype=np.int32)

    def work():
        if beating:
            with Heartbeat([party], channel=9):
                time.sleep(1.8)
        else:
            time.sleep(1.8)
        try:
            party.send_array(3, ranks, np.int32)
        except Exception:  # the host has given up and closed its end
            pass

    t = threading.Thread(target=work, daemon=True)
    t.start()
    start = time.monotonic()
    try:
        if beating:
            assert np.array_equal(host.recv_array(3, (5,), np.int32, alive=9), ranks)
            assert time.monotonic() - start > 1.7
        else:
            with pytest.raises(InputLinkError, match="no answer from computing party within 0.6 s"):
                host.recv_array(3, (5,), np.int32, alive=9)
            assert time.monotonic() - start < 1.5
    finally:
        host.close()
        t.join()
        party.close()


@pytest.mark.parametrize("n", [0, 5, CHUNK, 3 * CHUNK + 7])
def test_a_sealed_message_opens_to_the_same_bytes(n):
    a, b = _pair()
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    sealed = a.seal(7, a.next_send(7), data)
    assert sealed.size == sealed_size(n) and (n == 0 or not np.array_equal(sealed[:n], data))
    out = np.empty(n, dtype=np.uint8)
    b.open(7, b.next_recv(7), sealed, out)
    assert np.array_equal(out, data)


def test_modified_replayed_reordered_truncated_and_foreign_messages_fail():
    a, b = _pair()
    msgs = [np.full(100, i, dtype=np.uint8) for i in range(3)]
    sealed = [a.seal(1, a.next_send(1), m) for m in msgs]
    out = np.empty(100, dtype=np.uint8)
    flipped = sealed[0].copy()
    flipped[17] ^= 1
    cases = {
        "modified": (flipped, 0, 1),
        "replayed": (sealed[0], 1, 1),  # the first message again, where the second is expected
        "reordered": (sealed[2], 1, 1),
        "truncated": (sealed[1][:-1], 1, 1),
        "another channel": (sealed[1], 1, 2),
    }
    for what, (msg, seq, channel) in cases.items():
        with pytest.raises(ChannelError, match="failed authentication"):
            b.open(channel, seq, msg, out)
    foreign, _ = _pair()
    with pytest.raises(ChannelError):
        b.open(1, 0, foreign.seal(1, 0, msgs[0]), out)
    b.open(1, 0, sealed[0], out)  # the genuine message still opens
    assert np.array_equal(out, msgs[0])


# ----------------------------------------------------------------- faults in real runs


def _radix_job(rank, fault):
    """The rank step among 3 parties; ``fault`` tampers with this process's outgoing messages."""
    from secure_auc.mpc.comm import channel
    from secure_auc.mpc.ranks import rank_step

    if fault is not None:
        original = channel.Link.seal
        state = {"count": 0, "seen": {}}

        def seal(self, ch, seq, data):
            out = original(self, ch, seq, data)
            state["count"] += 1
            if fault == "flip" and state["count"] == 40:
                out = out.copy()
                out[out.size // 2] ^= 0x10
            if fault == "replay":
                key = (self.peer, ch, out.size)
                if key in state["seen"] and state["count"] > 40 and not state.get("done"):
                    state["done"] = True
                    return state["seen"][key]
                state["seen"].setdefault(key, out)
            return out

        channel.Link.seal = seal
    scores = np.random.default_rng(rank).random(3000) if rank else None
    return rank_step(scores, [3000, 3000], rank)


@pytest.mark.parametrize("fault", ["flip", "replay"])
def test_a_tampered_link_ends_every_party_with_an_error_naming_it(fault):
    per_rank = {0: (None,), 1: (fault,), 2: (None,)}
    start = time.monotonic()
    with pytest.raises(MPCError, match=r"client 0 \(rank 1\) to .* failed authentication"):
        spawn_parties(_radix_job, per_rank, 3, provider="ttp", timeout=20)
    assert time.monotonic() - start < 20


def _torchrun_like(tmp_path, roster, keys, identities, port, files, timeout=20):
    """Start the 4 parties of a 2-client TTP run by hand (as torchrun would), with the given keys."""
    procs = []
    for rank in range(4):
        cmd = [sys.executable, str(PARTY), *files, "--roster", str(roster), "--identity", str(identities[rank]),
               "--mechanism", "none", "--json", "--timeout", str(timeout)]
        procs.append(subprocess.Popen(cmd, env=party_env(rank, 4, port), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    return procs, outs


def _keys(tmp_path, names):
    from secure_auc.mpc.comm.roster import generate_identity, write_identity

    pubs = {}
    for name in names:
        pubs[name] = write_identity(tmp_path / f"{name}.pem", generate_identity())
    return pubs


@pytest.mark.parametrize("case", ["foreign key", "claims another's rank", "roster keys"])
def test_only_the_rosters_keys_join(tmp_path, free_port, case):
    files = write_clients(tmp_path, [6, 7])
    pubs = _keys(tmp_path, ["server", "client0", "client1", "dealer", "intruder"])
    roster = tmp_path / "roster.json"
    roster.write_text(json.dumps({"server": pubs["server"], "clients": [pubs["client0"], pubs["client1"]],
                                  "dealer": pubs["dealer"]}))
    identities = [tmp_path / f"{n}.pem" for n in ("server", "client0", "client1", "dealer")]
    if case == "foreign key":
        identities[1] = tmp_path / "intruder.pem"
    elif case == "claims another's rank":
        identities[1] = tmp_path / "client1.pem"  # a listed key, but client 1's, at client 0's rank
    start = time.monotonic()
    procs, outs = _torchrun_like(tmp_path, roster, None, identities, free_port, files)
    if case == "roster keys":
        assert [p.returncode for p in procs] == [0, 0, 0, 0], outs[0][1][-2000:]
        return
    assert time.monotonic() - start < 60
    assert all(p.returncode != 0 for p in procs)
    errors = [err.strip().splitlines()[-1] for _, err in outs]
    # the intruder knows it is not who the roster says; every other party names rank 1
    assert "this party's identity key is not the roster's key for client 0 (rank 1)" in errors[1]
    for r in (0, 2, 3):
        assert "client 0 (rank 1) failed authentication" in errors[r], errors[r]


def test_without_a_roster_only_this_users_processes_join(tmp_path, free_port):
    """Single host, no roster: a party whose local link key differs (another user's, here
    another config directory) is named by every party."""
    files = write_clients(tmp_path, [6, 7])
    procs = []
    for rank in range(4):
        env = party_env(rank, 4, free_port)
        env["XDG_CONFIG_HOME"] = str(tmp_path / ("other" if rank == 1 else "mine"))
        procs.append(subprocess.Popen([sys.executable, str(PARTY), *files, "--mechanism", "none", "--timeout", "20"],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode != 0 for p in procs)
    for rank, (_, err) in enumerate(outs):
        last = err.strip().splitlines()[-1]
        assert "is not a process of this user" in last
        if rank != 1:  # the odd one out names the first party it cannot vouch for
            assert "client 0 (rank 1) is not a process of this user" in last
    key = tmp_path / "mine" / "secure-auc" / "local-link.key"
    assert (key.stat().st_mode & 0o777) == 0o600
