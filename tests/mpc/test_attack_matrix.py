"""The attack matrix: a stranger against every listener of every role of a deployment, at its
start-up, between evaluations and during them.

One deployment of services (2 computing parties, the dealer, 2 clients; each service started with
at most 512 open files), each in its own network namespace; the stranger in a
namespace of its own, running as another local user (uid 65534).  From before the services start
until the session shuts them down, it connects to every socket a service listens on (the
configured ports, and every other listener read from ``/proc`` as it appears: the start-up's link
listeners, the computing parties' rendezvous, and gloo's where a party has them),
cycling through silent connections, a TLS ClientHello sent one byte at a time, garbage, an
oversized record and frame header followed by a MiB, and the replay of a real link's recorded
bytes; and it floods with 600 connections each listener as it appears (gloo's keep them: the
server holds over 1,023 descriptors once the start-up is over), with 300 the clients' ports again as
the clients connect, the session port while no session is connected, and every listener during
each evaluation.  Meanwhile a session evaluates epoch 0 and leaves, another connects through the
flood and evaluates epochs 1 and 2, idle between them.

It must hold: the deployment starts; the three results equal the plain protocol's with the same
noise keys (what the deployment gives without the stranger); after every client joined, no
service's resident memory grows by 50 MB nor its descriptors by 64, and no connection reaches
gloo's listeners; no service names a party for what the stranger did, and each ends with status
0; nothing the server, the helper, the dealer or the session received or logged holds a client's
path, file name, score or labels.  Then, alone: a party holding more than 1,023 descriptors still
waits on its links.
"""

import contextlib
import importlib.util
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from secure_auc.data import ClientData
from secure_auc.dp import StatisticsMechanism
from secure_auc.dp.rng import ClientRngs, client_key, release_key
from secure_auc.protocol import Client, Server
from secure_auc.protocol.plain import run_plain

from .listeners import listening
from .stranger import resident_mb

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_deploy", ROOT / "scripts" / "bench_deploy.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

TAG = f"{os.getpid() % 100000}"
SIZES = [40, 30]
ROLES = bench.roles(2, len(SIZES))
TIMEOUT = 6.0
PORTS = (29520, 29620, 29720)  # rendezvous (and roll call + 1), first client port, session port
DESCRIPTORS = 512  # the services' open files at most (RLIMIT_NOFILE) when they start: fewer than a start-up's flood takes
NET = "10.234.7"  # the services at .1.., the stranger at .50, the test process (the session) at .254

# The stranger: as uid 65534 in its own namespace.  On stdin: "target HOST:PORT" (attack it from now on)
# and "flood HOST:PORT" (300 connections at once, kept open); on stdout, each half second, what it did.
ATTACKER = r"""
import json, os, socket, ssl, sys, time
os.setgroups([]); os.setgid(65534); os.setuid(65534)
replay = bytes.fromhex(sys.argv[1])
os.set_blocking(0, False)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
out = ssl.MemoryBIO()
client = ctx.wrap_bio(ssl.MemoryBIO(), out)
try:
    client.do_handshake()
except ssl.SSLWantReadError:
    pass
hello = out.read()  # a TLS ClientHello, sent one byte per round
# a TLS record header announcing the largest record, a frame header announcing 2**62 bytes, then a MiB
oversized = b"\x16\x03\x01\xff\xff" + (21).to_bytes(4, "little") + (1 << 62).to_bytes(8, "little") + b"\0" * (1 << 20)
KINDS = ["silent", "slow-hello", "garbage", "oversized", "replay"]
targets, floods, held, slow, counts, n, pending = [], [], [], [], {}, 0, b""
last_report = time.monotonic()
def connect(host, port):
    s = socket.socket()
    s.settimeout(0.3)
    s.connect((host, port))
    s.setblocking(False)
    return s
def count(key):
    counts[key] = counts.get(key, 0) + 1
while True:
    try:
        got = os.read(0, 1 << 16)
        if not got:  # the test is over: the last counts, then stop
            print(json.dumps(counts), flush=True)
            break
        pending += got
    except BlockingIOError:
        pass
    *lines, pending = pending.split(b"\n")
    for line in lines:
        what, address = line.decode().split()
        host, port = address.rsplit(":", 1)
        (targets if what == "target" else floods).append((host, int(port)))
    for host, port in targets:
        kind = KINDS[n % len(KINDS)]
        n += 1
        count(f"{host}:{port} {kind}")
        try:
            s = connect(host, port)
        except OSError:
            continue
        count(f"{host}:{port} connected")
        try:
            if kind == "garbage":
                s.send(os.urandom(4096))
            elif kind == "oversized":
                s.send(oversized)
            elif kind == "replay":
                s.send(replay)
            elif kind == "slow-hello":
                slow.append([s, 0])
        except OSError:
            pass
        held.append(s)
    for entry in slow:  # one more byte of the ClientHello on each
        try:
            entry[0].send(hello[entry[1]:entry[1] + 1])
        except OSError:
            pass
        entry[1] += 1
    slow[:] = [e for e in slow if e[1] < len(hello)][-50:]
    for host, port in floods:  # SYNs as fast as they go (non-blocking), each connection then kept open
        for _ in range(300):
            s = socket.socket()
            s.setblocking(False)
            count(f"{host}:{port} flood")
            if s.connect_ex((host, port)) in (0, 115):  # connected, or in progress
                held.append(s)
            else:
                s.close()
    floods.clear()
    while len(held) > 4000:
        held.pop(0).close()
    if time.monotonic() - last_report > 0.5:
        print(json.dumps(counts), flush=True)
        last_report = time.monotonic()
    time.sleep(0.2)
"""


def _netns_unavailable():
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    probe = subprocess.run(["ip", "netns", "add", f"sa{TAG}probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create network namespaces here: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", f"sa{TAG}probe"], capture_output=True)
    return None


@pytest.fixture
def hosts():
    """A namespace per service and one for the stranger, on one bridge; the test at NET.254."""
    reason = _netns_unavailable()
    if reason:
        pytest.skip(reason)
    names = [f"sa{TAG}n{i}" for i in range(len(ROLES) + 1)]
    bridge = f"sab{TAG}"

    def sh(*args):
        subprocess.run(list(args), check=True, capture_output=True, text=True)

    try:
        sh("ip", "link", "add", bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{NET}.254/24", "dev", bridge)
        sh("ip", "link", "set", bridge, "up")
        for i, ns in enumerate(names):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", f"sav{TAG}{i}", "type", "veth", "peer", "name", f"sap{TAG}{i}")
            sh("ip", "link", "set", f"sap{TAG}{i}", "netns", ns)
            sh("ip", "link", "set", f"sav{TAG}{i}", "master", bridge)
            sh("ip", "link", "set", f"sav{TAG}{i}", "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{NET}.{i + 1 if i < len(ROLES) else 50}/24",
               "dev", f"sap{TAG}{i}")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", f"sap{TAG}{i}", "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield names
    finally:
        left = {ns: subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
                for ns in names}
        for ns, pids in left.items():
            for pid in pids:
                subprocess.run(["kill", "-9", pid], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for i in range(len(names)):
            subprocess.run(["ip", "link", "del", f"sav{TAG}{i}"], capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        assert not any(left[ns] for ns in names[:-1]), f"processes left running in the namespaces: {left}"


def _recorded_link(folder) -> bytes:
    """The bytes a real party sends on a link (a session's handshake, hello and request),
    recorded as an eavesdropper would, to be replayed."""
    from secure_auc.mpc.comm import inlinks, tls
    from secure_auc.mpc.comm.channel import public_bytes
    from secure_auc.mpc.comm.roster import read_identity

    server = read_identity(folder / "keys" / "server.pem")
    listener = inlinks.listen("127.0.0.1", 0)
    wire = bytearray()
    taken = []
    accepting = threading.Thread(target=lambda: taken.append(inlinks.accept_hosts(
        listener, 0, server, [public_bytes(server)], timeout=10, describe_me="s", describe_host=str)), daemon=True)
    accepting.start()
    encrypt, outgoing = tls.Session.encrypt, tls.Session.outgoing

    def recorded(method):
        def record(self, *args):
            out = method(self, *args)
            if not self.tls.server_side:  # what the connecting end put on the wire
                wire.extend(out)
            return out
        return record

    tls.Session.encrypt, tls.Session.outgoing = recorded(encrypt), recorded(outgoing)
    try:
        link = inlinks.connect(0, server, [(*listener.getsockname(), public_bytes(server))], timeout=10,
                               describe_party=str, describe_me="the session")[0]
        link.send_obj(21, {"op": "hello"})
        link.send_obj(21, {"op": "evaluate", "epoch": 0})
    finally:
        tls.Session.encrypt, tls.Session.outgoing = encrypt, outgoing
    accepting.join(10)
    link.close()
    taken[0][0].close()
    listener.close()
    return bytes(wire)


def _expected(folder, labels, mechanism, epoch):
    scores = [bench.model_scores(folder, k, epoch) for k in range(len(labels))]
    keys = [client_key(1000 + epoch, k) for k in range(len(labels))]
    roles = [Client(k, ClientData(s, y), mechanism, ClientRngs.from_key(release_key(keys[k], epoch)))
             for k, (s, y) in enumerate(zip(scores, labels))]
    estimate, aggregate, _ = run_plain(roles, Server(mechanism))
    return scores, estimate, aggregate


class _Watch:
    """The services' stderr lines, their resident memory and descriptors, their listeners (each
    given to the stranger as it appears) and what the stranger did."""

    def __init__(self, stranger, skip):
        self.procs, self.lines, self.use = {}, {}, {}
        self.stranger, self.skip, self.seen, self.counts, self.history = stranger, skip, set(), {}, []
        self.stop = threading.Event()
        threading.Thread(target=self._counts, daemon=True).start()
        threading.Thread(target=self._scan, daemon=True).start()

    def start(self, folder, role, ns):
        """``role``'s service, with at most :data:`DESCRIPTORS` open files (a common default limit)."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(DESCRIPTORS, hard), hard))
        try:
            self.add(role, bench.start_service(folder, role, netns=ns))
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    def add(self, role, proc):
        self.lines[role], self.use[role] = [], []
        self.procs[role] = proc
        threading.Thread(target=self._read, args=(role,), daemon=True).start()

    def tell(self, what, addresses):
        with contextlib.suppress(OSError):
            self.stranger.stdin.write("".join(f"{what} {h}:{p}\n" for h, p in addresses))
            self.stranger.stdin.flush()

    def _read(self, role):
        for line in self.procs[role].stderr:
            self.lines[role].append((time.monotonic(), line.rstrip()))

    def _counts(self):
        for line in self.stranger.stdout:
            self.counts = json.loads(line)
            self.history.append((time.monotonic(), self.counts))

    def _scan(self):
        while not self.stop.is_set():
            for role, p in list(self.procs.items()):
                try:
                    held = listening(p.pid)
                    self.use[role].append((time.monotonic(), resident_mb(p.pid), len(os.listdir(f"/proc/{p.pid}/fd"))))
                except (OSError, StopIteration):  # it has ended
                    continue
                new = {a for a in held if a not in self.skip} - self.seen
                self.seen |= new
                self.tell("target", sorted(new))
                self.tell("flood", sorted(new) * 2)  # each listener flooded (600) as soon as it appears
            self.stop.wait(0.1)

    def attacked(self, address, kind="flood", at=None):
        """How many connections of ``kind`` the stranger tried at ``address`` (by time ``at``)."""
        counts = self.counts if at is None else next((c for t, c in self.history if t >= at), self.counts)
        return counts.get(f"{address[0]}:{address[1]} {kind}", 0)

    def first(self, role, pattern, wait=0.0):
        end = time.monotonic() + wait
        while True:
            found = next((t for t, line in list(self.lines[role]) if re.search(pattern, line)), None)
            if found is not None or time.monotonic() > end:
                return found
            time.sleep(0.05)

    def text(self, role):
        return "\n".join(line for _, line in self.lines[role])

    def grown(self, since):
        """Per role: (resident MB, descriptors) at ``since``, and their largest growth after it."""
        out = {}
        for role, use in self.use.items():
            base = next(((m, f) for t, m, f in use if t >= since), use[-1][1:])
            out[role] = (round(base[0]), base[1], round(max(m for t, m, _ in use if t >= since) - base[0], 1),
                         max(f for t, _, f in use if t >= since) - base[1])
        return out


KINDS = ("silent", "slow-hello", "garbage", "oversized", "replay", "flood")
# a line in which a service names a party as the cause of a fault
BLAME = re.compile(r"disconnected|never|did not|failed|refused|error|ended:|crash|sent .* outside|not reachable|closed")


def test_a_stranger_on_every_port_in_every_phase(tmp_path, hosts):
    from secure_auc.deploy.config import load_config
    from secure_auc.deploy.session import DeployedSession
    from secure_auc.mpc.comm import inlinks

    prepared = time.monotonic()
    addresses = [f"{NET}.{i + 1}" for i in range(len(ROLES))]
    folder = tmp_path / "deployment"
    data = bench.write_deployment(folder, SIZES, epochs=3, addresses=addresses, ports=PORTS, timeout=TIMEOUT,
                                  computing=2)
    config = load_config(folder / "deploy.toml")
    mechanism = StatisticsMechanism(1.0, allocation="adaptive")
    expected = [_expected(folder, data["labels"], mechanism, e) for e in range(3)]
    replay = _recorded_link(folder)
    print(f"\nprepared in {time.monotonic() - prepared:.1f} s")
    started = time.monotonic()
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable  # one uid 65534 may run
    stranger = subprocess.Popen(["ip", "netns", "exec", hosts[-1], python, "-c", ATTACKER, replay.hex()],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd="/")
    watch = _Watch(stranger, set())  # every listener, the computing parties' rendezvous included
    fixed = [*config.client_addresses, config.session_address]  # the configured ports, known to anyone
    watch.tell("target", fixed)
    received = []  # every message the session received
    inlinks.observers.append(lambda peer, channel, raw: received.append(raw))
    results = []
    try:
        for role, ns in zip(ROLES, hosts):  # the computing parties and the dealer first
            if not role.startswith("client"):
                watch.start(folder, role, ns)
        # at start-up: the clients' ports flooded as soon as they open, and again as the clients connect
        end, flooded = time.monotonic() + 60, set()
        while (time.monotonic() < end and len(flooded) < len(config.client_addresses)
               and all(p.poll() is None for p in watch.procs.values())):
            new = [a for a in config.client_addresses if a in watch.seen and a not in flooded]
            watch.tell("flood", new)
            flooded |= set(new)
            time.sleep(0.1)
        for role, ns in zip(ROLES, hosts):
            if role.startswith("client"):
                watch.start(folder, role, ns)
        watch.first("client-0", "connecting to the", wait=60)
        watch.tell("flood", config.client_addresses)
        assert stranger.poll() is None, f"the stranger did not start: {stranger.stderr.read()[-500:]}"
        joined = watch.first("server", "every client joined", wait=60)
        assert joined, "\n".join(f"{r}: {watch.text(r)[-1500:]}" for r in watch.procs)
        listening_at_join = {role: listening(p.pid) for role, p in watch.procs.items()}
        phases = {"start-up": time.monotonic() - started}
        watch.tell("flood", [config.session_address])
        session = DeployedSession(config, key=folder / "keys" / "server.pem")
        results.append(session.evaluate(epoch=0))
        session.close()
        # between evaluations, no session connected: the stranger alone on the session port, then a flood at it
        time.sleep(TIMEOUT / 2)
        watch.tell("flood", [config.session_address])
        time.sleep(0.5)
        session = DeployedSession(config, key=folder / "keys" / "server.pem")
        for epoch in (1, 2):
            time.sleep(TIMEOUT / 2)  # between evaluations, the session connected and idle
            watch.tell("flood", sorted(watch.seen))  # during the evaluation: a flood at every listener
            results.append(session.evaluate(epoch=epoch))
        phases["evaluations"] = time.monotonic() - started - phases["start-up"]
        grown = watch.grown(joined)
        session.shutdown()
        for p in watch.procs.values():
            p.wait(timeout=3 * TIMEOUT)
        time.sleep(0.2)
    finally:
        inlinks.observers.pop()
        watch.stop.set()
        time.sleep(0.2)  # the scan ends (it writes to the stranger's stdin)
        stranger.stdin.close()
        try:
            stranger.wait(10)
        except subprocess.TimeoutExpired:
            stranger.kill()
        time.sleep(0.1)  # the reader takes the last counts
        bench.stop(watch.procs.values())
    counts = watch.counts
    tried = {f"{h}:{p}": (sum(watch.attacked((h, p), k) for k in KINDS), watch.attacked((h, p), "connected"))
             for h, p in sorted(watch.seen | set(fixed))}
    print(f"\nwhole test {time.monotonic() - started:.1f} s; (MB, descriptors) at join and their growth after: "
          f"{grown}; phases {phases}; connections (tried, made) per listener {tried}")

    # the stranger tried every listener that lasted (the configured ports, gloo's) with every kind of
    # connection, and flooded them (the start-up's link listeners live a moment only: counted, not asserted);
    # once the parties had their links, no connection reached gloo's listeners any more
    gloo = {a for role in ("server", "helper-1", "dealer") for a in listening_at_join[role]} - set(fixed)
    for address in set(fixed) | gloo:
        for kind in KINDS:
            assert watch.attacked(address, kind), (address, kind, counts)
    for address in gloo:
        assert watch.attacked(address, "connected", joined) == watch.attacked(address, "connected"), address
    # every evaluation gave what the deployment gives without the stranger (the plain protocol, same keys)
    assert len(results) == 3
    for (_, estimate, aggregate), result in zip(expected, results):
        assert result.auc == float(estimate.auc) and result.estimated_positives == float(aggregate.positives)
    # no service grew by 50 MB, nor kept the stranger's connections
    assert all(mb < 50 and fds < 64 for _, _, mb, fds in grown.values()), grown
    # no service named a party, or stopped, for what the stranger did
    for role, p in watch.procs.items():
        assert p.returncode == 0, (role, watch.text(role)[-1500:])
        blamed = [line for _, line in watch.lines[role] if BLAME.search(line) and "session disconnected" not in line]
        assert not blamed, (role, blamed)
    # nothing the server side received or logged holds a client's path, file name, score or labels
    server_side = "\n".join(watch.text(r) for r in ("server", "helper-1", "dealer")) + "".join(
        raw.decode("latin-1") for raw in received)
    leaks = [str(tmp_path), "labels-", "features-", "scoring.py", "scoring:", "ledger-", ".csv", ".npy"]
    for scores, _, _ in expected:
        leaks += [repr(float(x)) for s in scores for x in s] + [str(np.float32(x)) for s in scores for x in s]
    for y in data["labels"]:  # a client's labels in any of the forms a message or a line would hold them
        leaks += [json.dumps(y.tolist()), ",".join(map(str, y)), " ".join(map(str, y)), "".join(map(str, y))]
    found = [leak for leak in leaks if leak in server_side]
    assert not found, found


def test_a_party_holding_many_descriptors_still_waits_on_its_links():
    """A stranger's connections made during the start-up stay open at gloo's listeners: the links a
    party opens afterwards get descriptors above 1023, which ``select`` refuses (the server's loop,
    a client's and the session's waits); they wait with ``poll``."""
    import socket
    from types import SimpleNamespace

    from secure_auc.mpc.comm.inlinks import ready

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"at most {hard} open files here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = []
    try:
        while not held or held[-1] < 1100:  # what the stranger's connections hold
            held.append(os.open(os.devnull, os.O_RDONLY))
        a, b = socket.socketpair()
        link = SimpleNamespace(sock=a, session=SimpleNamespace(buffered=lambda: False))
        assert a.fileno() > 1023
        assert ready([link], 0.05) == []
        b.send(b"x")
        assert ready([link], 1.0) == [link]
        a.close()
        b.close()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
