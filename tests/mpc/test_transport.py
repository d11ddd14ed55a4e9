"""The mesh that carries the sealed messages (:mod:`secure_auc.mpc.comm.transport`):
framing, order, large messages both ways at once, faults named within the timeout,
the connection's authentication, and, in a real run, that no message takes gloo."""

import socket
import struct
import threading
import time

import numpy as np
import pytest

from secure_auc.mpc.comm.channel import ChannelError, Link, derive_keys, ephemeral
from secure_auc.mpc.comm.transport import HELLO, Mesh, connect
from secure_auc.mpc.launch import spawn_parties


def _name(r):
    return f"party {r}"


def _tcp_pair():
    with socket.create_server(("127.0.0.1", 0)) as lst:
        a = socket.create_connection(lst.getsockname())
        b, _ = lst.accept()
    return a, b


def _meshes(timeout=5.0):
    a, b = _tcp_pair()
    return Mesh(0, {1: a}, timeout, _name), Mesh(1, {0: b}, timeout, _name)


def _data(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def test_frames_arrive_whole_in_order_per_channel_posted_before_or_after():
    m0, m1 = _meshes()
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


def test_a_frame_no_receive_takes_is_listed_as_unclaimed():
    """The audit adds these to what the receives recorded; a complete record has none."""
    m0, m1 = _meshes()
    m0.isend(1, 11, _data(5, 0)).wait()
    m0.isend(1, 12, _data(7, 1)).wait()
    out = np.empty(7, dtype=np.uint8)
    m1.irecv(0, 12, out).wait()  # reads the frame of channel 11 on the way
    assert m1.unclaimed() == [(0, 11, _data(5, 0).tobytes())]
    m1.irecv(0, 11, np.empty(5, dtype=np.uint8)).wait()
    assert m1.unclaimed() == []


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


def test_a_closed_link_and_a_silent_peer_are_named_within_the_timeout():
    m0, m1 = _meshes(timeout=0.5)
    start = time.monotonic()
    with pytest.raises(ChannelError, match=r"no answer from another party within the timeout: party 1 sent "
                                           r"nothing for 0.5 s"):
        m0.irecv(1, 2, np.empty(4, dtype=np.uint8)).wait()
    assert time.monotonic() - start < 2
    m1.socks[0].close()
    with pytest.raises(ChannelError, match=r"another party disconnected: party 1 closed its link"):
        m0.irecv(1, 2, np.empty(4, dtype=np.uint8)).wait()


def test_a_peer_that_leaves_is_no_error_for_a_party_waiting_on_another():
    """A party that has sent its last message and exits closes its links; the others go on
    with the rest and hear of it only if they wait on that party."""
    a1, b1 = _tcp_pair()
    a2, b2 = _tcp_pair()
    m0 = Mesh(0, {1: a1, 2: a2}, 2.0, _name)
    m1, m2 = Mesh(1, {0: b1}, 2.0, _name), Mesh(2, {0: b2}, 2.0, _name)
    m1.isend(0, 1, _data(10, 0)).wait()
    m1.socks[0].close()
    time.sleep(0.1)
    threading.Timer(0.3, lambda: m2.isend(0, 1, _data(10, 2)).wait()).start()
    out = np.empty(10, dtype=np.uint8)
    m0.irecv(2, 1, out).wait()  # rank 1's hang-up is seen here, and is not rank 2's problem
    assert np.array_equal(out, _data(10, 2))
    m0.irecv(1, 1, out).wait()  # rank 1's last message is still there
    assert np.array_equal(out, _data(10, 0))
    with pytest.raises(ChannelError, match=r"another party disconnected: party 1 closed its link"):
        m0.irecv(1, 1, out).wait()


def test_a_frame_of_the_wrong_size_is_refused():
    m0, m1 = _meshes()
    m0.socks[1].sendall(struct.pack("<IQ", 4, 7) + bytes(7))
    with pytest.raises(ChannelError, match=r"party 0 to party 1 failed authentication \(a frame of 7 bytes where 8"):
        m1.irecv(0, 4, np.empty(8, dtype=np.uint8)).wait()


def test_a_header_announcing_a_huge_frame_is_refused_before_any_allocation():
    m0, m1 = _meshes()
    m0.socks[1].sendall(struct.pack("<IQ", 9, 1 << 62))  # nobody waits on channel 9: it would be stashed
    with pytest.raises(ChannelError, match=r"party 0 to party 1 failed authentication \(a frame of 4611686018427387904"):
        m1.irecv(0, 4, np.empty(8, dtype=np.uint8)).wait()


def test_an_empty_message_arrives_only_when_sent():
    m0, m1 = _meshes(timeout=0.3)
    h = m1.irecv(0, 6, np.empty(0, dtype=np.uint8))
    with pytest.raises(ChannelError, match="party 0 sent nothing"):
        h.wait()
    m0.isend(1, 6, np.empty(0, dtype=np.uint8)).wait()
    h.wait()
    assert h.is_completed()


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


def _exchange(sender: Mesh, receiver: Mesh) -> None:
    data = _data(1000, sender.me)
    sender.isend(receiver.me, 5, data).wait()
    out = np.empty(1000, dtype=np.uint8)
    receiver.irecv(sender.me, 5, out).wait()
    assert np.array_equal(out, data)


def _links():
    (s0, e0), (s1, e1) = ephemeral(), ephemeral()
    k01, k10 = derive_keys(0, 1, s0, e0, e1)
    return Link(0, 1, k01, k10, _name), Link(1, 0, k10, k01, _name)


def test_a_connection_is_kept_only_from_the_party_whose_key_sealed_its_token():
    """An intruder that connects first, claiming rank 1 with a token under another key, is
    closed; the real rank 1 then joins and messages flow."""
    l0, l1 = _links()
    intruder, _ = _links()
    store = _Store()
    meshes = {}
    t = threading.Thread(target=lambda: meshes.setdefault(0, connect(0, 2, {1: l0}, store, "127.0.0.1", 10, _name)))
    t.start()
    host, port = store.get("secure-auc/mesh/0").decode().rsplit(":", 1)
    token = np.frombuffer(b"secure-auc mesh v1" + struct.pack("<ii", 1, 0), dtype=np.uint8)
    fake = socket.create_connection((host, int(port)))
    fake.sendall(struct.pack("<i", 1) + intruder.seal(HELLO, 0, token).tobytes())
    assert fake.recv(1) == b""  # closed by rank 0
    meshes[1] = connect(1, 2, {0: l1}, store, "127.0.0.1", 10, _name)
    t.join(10)
    _exchange(meshes[1], meshes[0])


def test_a_connection_that_says_nothing_neither_holds_up_the_real_party_nor_the_deadline():
    """One connection drips its first bytes; the real rank 1 connects after it, is taken at
    once, and set-up returns, closing the unfinished connection."""
    l0, l1 = _links()
    store = _Store()
    meshes, took = {}, {}

    def rank0():
        t = time.monotonic()
        meshes[0] = connect(0, 2, {1: l0}, store, "127.0.0.1", 10, _name)
        took[0] = time.monotonic() - t

    t = threading.Thread(target=rank0)
    t.start()
    host, port = store.get("secure-auc/mesh/0").decode().rsplit(":", 1)
    drip = socket.create_connection((host, int(port)))
    drip.sendall(struct.pack("<i", 1))
    threading.Thread(target=lambda: [drip.send(b"x") or time.sleep(0.1) for _ in range(30)], daemon=True).start()
    time.sleep(0.2)
    meshes[1] = connect(1, 2, {0: l1}, store, "127.0.0.1", 10, _name)
    t.join(10)
    assert took[0] < 2.0, took
    drip.settimeout(5)
    try:
        assert drip.recv(1) == b""  # closed by rank 0
    except ConnectionResetError:
        pass
    _exchange(meshes[0], meshes[1])


def test_a_silent_peer_at_set_up_is_named():
    l0, _ = _links()
    with pytest.raises(ChannelError, match=r"party 1 did not open its link within 0.5 s"):
        connect(0, 2, {1: l0}, _Store(), "127.0.0.1", 0.5, _name)


# ----------------------------------------------------------------- a real run


def _job_counting_gloo(rank):
    """The rank step among 3 parties, counting every data call that reaches gloo itself."""
    import torch.distributed.distributed_c10d as c10d

    from secure_auc.mpc.ranks import rank_step

    calls = []
    for name in ("send", "recv", "isend", "irecv", "broadcast", "all_gather", "barrier", "all_reduce", "reduce"):
        original = getattr(c10d, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        setattr(c10d, name, counted)
    scores = np.random.default_rng(rank).random(2000) if rank else None
    twice = rank_step(scores, [2000, 2000], rank)
    return calls, None if twice is None else twice.tolist()


def test_after_the_handshake_no_message_takes_gloo():
    """gloo still brings the group up and carries the handshake; every message after that
    (CrypTen's, the dealer's, the project's) goes over the mesh.  The rank step's result
    is checked against scipy."""
    from scipy.stats import rankdata

    done = spawn_parties(_job_counting_gloo, {0: (), 1: (), 2: ()}, 3, provider="ttp", timeout=30)
    scores = np.concatenate([np.random.default_rng(r).random(2000) for r in (1, 2)])
    expected = 2 * (rankdata(scores) - 1)
    for r in (0, 1, 2):
        assert done[r][0] == [], done[r][0]
    assert np.array_equal(np.array(done[1][1] + done[2][1]), expected)
