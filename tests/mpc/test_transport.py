"""The mesh of TLS links between computing parties (:mod:`secure_auc.mpc.comm.transport`,
:mod:`secure_auc.mpc.comm.tls`): framing, order, large messages both ways at once,
records that fail authentication, faults named within the timeout, who may join and how
long a stranger may hold set-up, the bounds on what a peer can make this party hold, and,
in a real run, that no message takes gloo."""

import socket
import struct
import threading
import time
import tracemalloc

import numpy as np
import pytest

from secure_auc.mpc.comm import tls, transport
from secure_auc.mpc.comm.channel import ChannelError, public_bytes
from secure_auc.mpc.comm.roster import generate_identity
from secure_auc.mpc.comm.transport import Mesh, connect
from secure_auc.mpc.launch import spawn_parties

BOUND = tls.binding("secure-auc links", "a test roster", 3)


def _name(r):
    return f"party {r}"


class _Store:
    def __init__(self):
        self.kv = {}

    def set(self, k, v):
        self.kv[k] = v.encode() if isinstance(v, str) else v

    def get(self, k):
        deadline = time.monotonic() + 10
        while k not in self.kv:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        return self.kv[k]


class _World:
    """Identity keys of ``n`` ranks, their roster (``key``) and one rendezvous store."""

    def __init__(self, n):
        self.n, self.ids = n, [generate_identity() for _ in range(n)]
        self.pubs = [public_bytes(k) for k in self.ids]
        self.store = _Store()

    def key(self, r):
        return self.pubs[r]

    def connect(self, r, timeout=10.0, identity=None, bound=BOUND):
        return connect(r, self.n, identity or self.ids[r], self.key, bound, self.store, "127.0.0.1", timeout, _name)

    def all(self, timeout=5.0):
        meshes, errors = {}, []

        def run(r):
            try:
                meshes[r] = self.connect(r, timeout)
            except Exception as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(r,)) for r in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        if errors:
            raise errors[0]
        return [meshes[r] for r in range(self.n)]

    def run_address(self):
        """What anyone who reaches the rendezvous store reads: rank 0's address and the run's binding."""
        host, port = self.store.get("secure-auc/mesh/0").decode().rsplit(":", 1)
        return (host, int(port)), tls.binding("secure-auc mesh v2", BOUND, self.store.get("secure-auc/mesh/run").decode())


def _meshes(timeout=5.0):
    return _World(2).all(timeout)


def _data(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def _raw(mesh: Mesh, peer: int, wire: bytes) -> None:
    """Write ``wire`` on ``mesh``'s link to ``peer`` as it is, past the mesh's framing."""
    s = mesh.socks[peer]
    s.setblocking(True)
    s.sendall(wire)
    s.setblocking(False)


def _records(mesh: Mesh, peer: int, plain: bytes) -> bytes:
    """The TLS records ``mesh`` would send ``peer`` for the plaintext ``plain`` (advances its
    record counter, as a real send does)."""
    with mesh.links[peer].lock:
        return mesh.links[peer].encrypt(plain)


def _frame(channel: int, data: bytes) -> bytes:
    return struct.pack("<IQ", channel, len(data)) + data


def _exchange(sender: Mesh, receiver: Mesh) -> None:
    data = _data(1000, sender.me)
    sender.isend(receiver.me, 5, data).wait()
    out = np.empty(1000, dtype=np.uint8)
    receiver.irecv(sender.me, 5, out).wait()
    assert np.array_equal(out, data)


def test_frames_arrive_whole_in_order_per_channel_posted_before_or_after():
    m0, m1 = _meshes()
    assert m0.links[1].tls.version() == "TLSv1.3"
    sizes = [0, 1, 17, 70_000, 3 << 20, 5]
    sent = {(ch, i): _data(n, 10 * ch + i) for ch in (3, 9) for i, n in enumerate(sizes)}
    # channel 3 posted before anything is sent (straight into the buffers), channel 9 after (from the stash)
    early = {i: np.empty(n, dtype=np.uint8) for i, n in enumerate(sizes)}
    posted = [(i, m1.irecv(0, 3, early[i])) for i in range(len(sizes))]
    works = [m0.isend(1, ch, sent[(ch, i)]) for i in range(len(sizes)) for ch in (9, 3)]
    for i, w in posted:
        w.wait()
        assert np.array_equal(early[i], sent[(3, i)])
    for i, n in enumerate(sizes):
        out = np.empty(n, dtype=np.uint8)
        m1.irecv(0, 9, out).wait()
        assert np.array_equal(out, sent[(9, i)])
    for w in works:
        w.wait()
        assert w.is_completed()


def test_a_send_copies_the_message_so_the_caller_may_reuse_its_buffer():
    m0, m1 = _meshes()
    data = _data(2 << 20, 4)
    sent = data.copy()
    h = m0.isend(1, 2, data)
    data[:] = 0  # before the send has completed
    out = np.empty(data.size, dtype=np.uint8)
    m1.irecv(0, 2, out).wait()
    h.wait()
    assert np.array_equal(out, sent)


def test_a_frame_no_receive_takes_is_listed_as_unclaimed():
    """The audit adds these (decrypted) to what the receives recorded; a complete record has none."""
    m0, m1 = _meshes()
    m0.isend(1, 11, _data(5, 0)).wait()
    m0.isend(1, 12, _data(7, 1)).wait()
    out = np.empty(7, dtype=np.uint8)
    m1.irecv(0, 12, out).wait()  # reads the frame of channel 11 on the way
    assert m1.unclaimed() == [(0, 11, _data(5, 0).tobytes())]
    m1.irecv(0, 11, np.empty(5, dtype=np.uint8)).wait()
    assert m1.unclaimed() == []


def test_the_taps_see_every_plaintext_byte_received():
    m0, m1 = _meshes()
    seen = []
    transport.taps.append(lambda peer, data: seen.append((peer, data)))
    try:
        data = _data(600_000, 3)
        m0.isend(1, 4, data).wait()
        m1.irecv(0, 4, np.empty(data.size, dtype=np.uint8)).wait()
    finally:
        transport.taps.clear()
    assert {p for p, _ in seen} == {0}
    assert b"".join(d for _, d in seen) == _frame(4, data.tobytes())


def test_large_messages_both_ways_at_once_do_not_block():
    """Each side sends 3 x 16 MB before it posts a receive: more than the kernel buffers hold."""
    m0, m1 = _meshes()
    msgs = {r: [_data(16 << 20, 3 * r + i) for i in range(3)] for r in (0, 1)}
    got = {}

    def side(me, mesh, peer):
        works = [mesh.isend(peer, 1, x) for x in msgs[me]]
        outs = [np.empty(16 << 20, dtype=np.uint8) for _ in range(3)]
        for out in outs:
            mesh.irecv(peer, 1, out).wait()
        for w in works:
            w.wait()
        got[me] = outs

    t = threading.Thread(target=side, args=(1, m1, 0))
    t.start()
    side(0, m0, 1)
    t.join(30)
    assert not t.is_alive()
    assert all(np.array_equal(x, y) for x, y in zip(got[0], msgs[1]))
    assert all(np.array_equal(x, y) for x, y in zip(got[1], msgs[0]))


# ----------------------------------------------------------------- records that fail


@pytest.mark.parametrize("case", ["modified", "replayed", "reordered", "foreign"])
def test_a_record_that_is_modified_replayed_reordered_or_foreign_fails_authentication(case):
    m0, m1 = _meshes()
    first = _records(m0, 1, _frame(3, b"a" * 100))
    second = _records(m0, 1, _frame(3, b"b" * 100))
    if case == "modified":
        wire = bytearray(first)
        wire[len(wire) // 2] ^= 1
    elif case == "replayed":
        wire = first + second + first  # the first record again, where a third is expected
    elif case == "reordered":
        wire = second + first
    else:
        other, _ = _meshes()
        wire = _records(other, 1, _frame(3, b"a" * 100))  # a record of another link
    _raw(m0, 1, bytes(wire))
    out = np.empty(100, dtype=np.uint8)
    with pytest.raises(ChannelError, match=r"a message from party 0 to party 1 failed authentication"):
        for _ in range(3):
            m1.irecv(0, 3, out).wait()


def test_a_truncated_message_is_never_delivered_and_its_sender_is_named():
    m0, m1 = _meshes(timeout=2.0)
    wire = _records(m0, 1, _frame(3, bytes(range(100))))
    _raw(m0, 1, wire[:-5])
    m0.socks[1].close()
    h = m1.irecv(0, 3, np.empty(100, dtype=np.uint8))
    with pytest.raises(ChannelError, match=r"another party disconnected: party 0 closed its link"):
        h.wait()
    assert not h.is_completed()


def test_a_closed_link_and_a_silent_peer_are_named_within_the_timeout():
    m0, m1 = _meshes(timeout=0.5)
    start = time.monotonic()
    with pytest.raises(ChannelError, match=r"no answer from another party within the timeout: party 1 sent "
                                           r"nothing for 0.5 s"):
        m0.irecv(1, 2, np.empty(4, dtype=np.uint8)).wait()
    assert time.monotonic() - start < 2
    m1.close()  # close_notify
    with pytest.raises(ChannelError, match=r"another party disconnected: party 1 closed its link"):
        m0.irecv(1, 2, np.empty(4, dtype=np.uint8)).wait()


def test_a_peer_that_leaves_is_no_error_for_a_party_waiting_on_another():
    """A party that has sent its last message and exits closes its links; the others go on
    with the rest and hear of it only if they wait on that party."""
    m0, m1, m2 = _World(3).all(timeout=2.0)
    m1.isend(0, 1, _data(10, 0)).wait()
    m1.close()
    time.sleep(0.1)
    threading.Timer(0.3, lambda: m2.isend(0, 1, _data(10, 2)).wait()).start()
    out = np.empty(10, dtype=np.uint8)
    m0.irecv(2, 1, out).wait()  # rank 1's hang-up is seen here, and is not rank 2's problem
    assert np.array_equal(out, _data(10, 2))
    m0.irecv(1, 1, out).wait()  # rank 1's last message is still there
    assert np.array_equal(out, _data(10, 0))
    with pytest.raises(ChannelError, match=r"another party disconnected: party 1 closed its link"):
        m0.irecv(1, 1, out).wait()


def test_an_empty_message_arrives_only_when_sent():
    m0, m1 = _meshes(timeout=0.3)
    h = m1.irecv(0, 6, np.empty(0, dtype=np.uint8))
    with pytest.raises(ChannelError, match="party 0 sent nothing"):
        h.wait()
    m0.isend(1, 6, np.empty(0, dtype=np.uint8)).wait()
    h.wait()
    assert h.is_completed()


# ----------------------------------------------------------------- what a peer can make this party hold


def test_a_frame_of_the_wrong_size_is_refused():
    m0, m1 = _meshes()
    _raw(m0, 1, _records(m0, 1, _frame(4, bytes(7))))
    with pytest.raises(ChannelError, match=r"party 0 to party 1 does not fit \(a frame of 7 bytes where 8"):
        m1.irecv(0, 4, np.empty(8, dtype=np.uint8)).wait()


def test_a_header_announcing_a_huge_frame_is_refused():
    m0, m1 = _meshes()
    _raw(m0, 1, _records(m0, 1, struct.pack("<IQ", 9, 1 << 62)))  # nobody waits on channel 9: it would be stashed
    with pytest.raises(ChannelError, match=r"party 0 to party 1 does not fit \(a frame of 4611686018427387904"):
        m1.irecv(0, 4, np.empty(8, dtype=np.uint8)).wait()


def test_a_stashed_frame_takes_memory_only_for_the_bytes_that_arrived():
    """A header announcing 8 GiB for a channel nobody waits on, then 1,000 bytes: the stash
    holds those bytes, not a buffer of the announced size."""
    m0, m1 = _meshes()
    _raw(m0, 1, _records(m0, 1, struct.pack("<IQ", 9, 1 << 33) + bytes(1000)))
    time.sleep(0.2)
    tracemalloc.start()
    try:
        m1.unclaimed()  # reads what has arrived
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert m1._stash[(0, 9)][0].got == 1000
    assert peak < 1 << 20, peak


@pytest.mark.parametrize("bound", ["frames", "bytes"])
def test_the_stash_is_bounded(monkeypatch, bound):
    monkeypatch.setattr(transport, "MAX_STASHED" if bound == "frames" else "MAX_STASH", 3 if bound == "frames" else 1000)
    m0, m1 = _meshes()
    for i in range(4):
        m0.isend(1, 9, _data(400, i)).wait()  # nobody waits on channel 9
    m0.isend(1, 4, _data(8, 5)).wait()
    what = "messages" if bound == "frames" else "bytes"
    with pytest.raises(ChannelError, match=rf"party 0 sent more than (3|1000) {what} that no receive of party 1"):
        m1.irecv(0, 4, np.empty(8, dtype=np.uint8)).wait()


def test_a_stashed_frame_claimed_while_it_arrives_is_completed_in_place():
    m0, m1 = _meshes()
    data = _data(5 << 20, 7)
    h = m0.isend(1, 9, data)
    m0.isend(1, 3, _data(1, 0))
    m1.irecv(0, 3, np.empty(1, dtype=np.uint8))  # posted, never waited for: reading stops somewhere in channel 9
    m1.unclaimed()
    out = np.empty(data.size, dtype=np.uint8)
    m1.irecv(0, 9, out).wait()
    h.wait()
    assert np.array_equal(out, data)
    assert m1._stashed[0] == [0, 0]


# ----------------------------------------------------------------- set-up: who joins


def test_set_up_checks_the_key_of_every_rank_both_ways():
    """A stranger at rank 0's published address (its key not the roster's) is named by the
    rank that connects to it; a stranger claiming rank 1 is refused by rank 0, and learns it."""
    w = _World(2)
    intruder = generate_identity()
    got = {}
    t = threading.Thread(target=lambda: got.setdefault(0, _catch(lambda: w.connect(0, timeout=2, identity=intruder))))
    t.start()
    with pytest.raises(ChannelError, match=r"party 0 failed authentication: its key is not the roster's key"):
        w.connect(1, timeout=2)
    t.join(10)
    assert "party 1 did not open its link" in str(got[0])  # rank 1 did not confirm the stranger's link

    w = _World(2)
    t = threading.Thread(target=lambda: got.setdefault(1, _catch(lambda: w.connect(0, timeout=2))))
    t.start()
    with pytest.raises(ChannelError, match=r"party 0 refused the link from party 1"):
        w.connect(1, timeout=2, identity=intruder)
    t.join(10)
    assert "party 1 failed authentication (a connection claiming it presented another key)" in str(got[1])


def _catch(fn):
    try:
        return fn()
    except ChannelError as exc:
        return exc


def test_a_party_of_another_roster_or_run_is_refused():
    w = _World(2)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault(0, _catch(lambda: w.connect(0, timeout=2))))
    t.start()
    with pytest.raises(ChannelError, match=r"party 0 refused the link from party 1"):
        w.connect(1, timeout=2, bound=tls.binding("secure-auc links", "another roster", 3))
    t.join(10)
    assert isinstance(got[0], ChannelError)


def test_an_intruders_connection_is_closed_and_the_real_party_then_joins():
    """An intruder that connects first, claiming rank 1 with another key (a certificate of
    the right run, read from the store), is closed; the real rank 1 then joins."""
    w = _World(2)
    meshes = {}
    t = threading.Thread(target=lambda: meshes.setdefault(0, w.connect(0)))
    t.start()
    addr, bound = w.run_address()
    fake = tls.Session(socket.create_connection(addr), tls.context(generate_identity(), "rank 1", bound, False), False)
    with pytest.raises((EOFError, tls.LinkError)):
        tls.handshake(fake, time.monotonic() + 5)
    meshes[1] = w.connect(1)
    t.join(10)
    _exchange(meshes[1], meshes[0])


def test_a_connection_that_says_nothing_neither_holds_up_the_real_party_nor_the_deadline():
    """One connection drips bytes; the real rank 1 connects after it, is taken at once, and
    set-up returns, closing the unfinished connection."""
    w = _World(2)
    meshes, took = {}, {}

    def rank0():
        t = time.monotonic()
        meshes[0] = w.connect(0)
        took[0] = time.monotonic() - t

    t = threading.Thread(target=rank0)
    t.start()
    addr, _ = w.run_address()
    drip = socket.create_connection(addr)

    def dripping():  # one byte every 0.1 s until rank 0 closes the connection
        try:
            for _ in range(30):
                drip.send(b"\x16")
                time.sleep(0.1)
        except OSError:  # reset or closed by rank 0: what the test expects
            pass

    threading.Thread(target=dripping, daemon=True).start()
    time.sleep(0.2)
    meshes[1] = w.connect(1)
    t.join(10)
    assert took[0] < 2.0, took
    drip.settimeout(5)
    try:
        assert drip.recv(1) == b""  # closed by rank 0
    except ConnectionResetError:
        pass
    _exchange(meshes[0], meshes[1])


def test_connections_waiting_for_their_handshake_are_bounded(monkeypatch):
    """With room for 4, ten silent connections: the six oldest are closed at once (not after
    their time limit), and the real party still joins."""
    monkeypatch.setattr(tls, "MAX_PENDING", 4)
    w = _World(2)
    meshes = {}
    t = threading.Thread(target=lambda: meshes.setdefault(0, w.connect(0)))
    t.start()
    addr, _ = w.run_address()
    silent = [socket.create_connection(addr) for _ in range(10)]
    time.sleep(0.5)
    closed = 0
    for s in silent:
        s.settimeout(0.05)
        try:
            closed += s.recv(1) == b""
        except socket.timeout:
            pass
        except ConnectionResetError:
            closed += 1
    assert closed == 6
    meshes[1] = w.connect(1)
    t.join(10)
    _exchange(meshes[1], meshes[0])


def test_a_silent_peer_at_set_up_is_named():
    with pytest.raises(ChannelError, match=r"party 1 did not open its link within 0.5 s"):
        _World(2).connect(0, timeout=0.5)


# ----------------------------------------------------------------- a real run


def _job_counting_gloo(rank):
    """The rank step among 3 parties, counting every data call that reaches the process group
    itself; and the process group's backend and this party's listening sockets."""
    import os

    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    from secure_auc.mpc.ranks import rank_step

    from .listeners import listening

    started = (dist.get_backend(), listening(os.getpid()))

    calls = []
    for name in ("send", "recv", "isend", "irecv", "broadcast", "all_gather", "barrier", "all_reduce", "reduce"):
        original = getattr(c10d, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        setattr(c10d, name, counted)
    scores = np.random.default_rng(rank).random(2000) if rank else None
    twice = rank_step(scores, [2000, 2000], rank)
    return calls, None if twice is None else twice.tolist(), started


def test_after_the_rendezvous_no_message_takes_gloo():
    """No gloo: the process group is one that opens no socket, every message (CrypTen's set-up,
    the dealer's, the project's) goes over the TLS mesh, and once a party runs its job it
    listens on nothing.  The rank step's result is checked against scipy."""
    from scipy.stats import rankdata

    done = spawn_parties(_job_counting_gloo, {0: (), 1: (), 2: ()}, 3, provider="ttp", timeout=30)
    scores = np.concatenate([np.random.default_rng(r).random(2000) for r in (1, 2)])
    expected = 2 * (rankdata(scores) - 1)
    for r in (0, 1, 2):
        assert done[r][0] == [], done[r][0]
        assert done[r][2] == ("secureauclinks", []), done[r][2]
    assert np.array_equal(np.array(done[1][1] + done[2][1]), expected)


def test_the_delay_holds_every_message_and_the_traces_count_the_rounds(monkeypatch):
    """With the test-only delay, each message waits its milliseconds before it is written; the
    traces count a chain of messages, each sent after the previous one arrived, as one round
    per message, and messages sent side by side as one."""
    monkeypatch.setenv(transport.DELAY_ENV, "5")
    monkeypatch.setenv(transport.TRACE_ENV, "1")
    meshes = _World(3).all()
    laps, one = 6, np.zeros(1, dtype=np.uint8)

    def party(r):
        m = meshes[r]
        for lap in range(laps):
            if r == 0:  # to both at once: one round for each, then the chain 1 -> 2 -> 0
                works = [m.isend(1, 3, one), m.isend(2, 4, one)]
                m.irecv(2, 3, np.empty(1, dtype=np.uint8)).wait()
            elif r == 1:
                m.irecv(0, 3, np.empty(1, dtype=np.uint8)).wait()
                works = [m.isend(2, 3, one)]
            else:
                for src in (0, 1):
                    m.irecv(src, 4 if src == 0 else 3, np.empty(1, dtype=np.uint8)).wait()
                works = [m.isend(0, 3, one)]
            for w in works:
                w.wait()
            m.mark(f"lap {lap}")

    start = time.monotonic()
    threads = [threading.Thread(target=party, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    elapsed = time.monotonic() - start
    depths = transport.message_depths({r: m.trace for r, m in enumerate(meshes)})
    assert depths[0][-1] == ("end", 3 * laps)  # 0 -> 1 -> 2 -> 0 per lap; 0 -> 2 is in step with 0 -> 1
    assert depths[1][0] == ("lap 0", 1) and depths[2][0] == ("lap 0", 2)
    assert 3 * laps * 0.005 <= elapsed < 3 * laps * 0.005 * 1.5 + 0.2
    monkeypatch.delenv(transport.DELAY_ENV)
    monkeypatch.delenv(transport.TRACE_ENV)
    quiet = _meshes()  # without the variables: no trace
    assert quiet[0].trace is None and quiet[0]._delay == 0
