"""Launching parties: torchrun, separate hosts, and every way a run can fail."""

import json
import shutil
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from secure_auc.data import ClientData, read_client_csv
from secure_auc.dp import NoNoise
from secure_auc.metrics import rank_auc
from secure_auc.mpc.launch import MPCError, launch_local
from secure_auc.mpc.party import PartyConfig
from secure_auc.validation import InputError

from .conftest import BIN, PARTY, party_env, write_clients


def reference(paths):
    data = [read_client_csv(p) for p in paths]
    return rank_auc(np.concatenate([d.labels for d in data]), np.concatenate([d.scores for d in data]))


def test_wrong_number_of_processes_is_named(tmp_path, free_port):
    paths = write_clients(tmp_path, [5, 5])
    res = subprocess.run([sys.executable, str(PARTY), *paths], env=party_env(0, 3, free_port),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "need 4 processes (server + 2 clients + dealer), torchrun started 3" in res.stderr


def _start(rank, world, port, paths, extra=()):
    return subprocess.Popen(
        [sys.executable, str(PARTY), *paths, "--provider", "tfp", "--mechanism", "none", *extra],
        env=party_env(rank, world, port), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_party_or_the_server_that_never_starts_is_named_within_the_timeout(tmp_path):
    """Two runs at once, each missing a party: in one, client 1 (rank 2) never starts, and the
    server and client 0 both name it; in the other the server never starts, and the client
    that did names it (another client would wait for the same rendezvous in the same way)."""
    from secure_auc.mpc.launch import free_port

    paths = write_clients(tmp_path, [5, 5])
    without_client = without_server = free_port()
    while abs(without_server - without_client) < 2:  # each run uses its port and the next
        without_server = free_port()
    start = time.monotonic()
    procs = [_start(r, 3, without_client, paths, ("--timeout", "5")) for r in (0, 1)]  # rank 2 never starts
    procs.append(_start(1, 3, without_server, paths, ("--timeout", "5")))  # the server never starts
    outs = [p.communicate(timeout=90) for p in procs]
    elapsed = time.monotonic() - start
    for p, (_, err) in zip(procs[:2], outs):
        assert p.returncode != 0
        assert "client 1 (rank 2) never joined within 5 s" in err, err[-1000:]  # named, by every party
        assert len([ln for ln in err.splitlines() if "error" in ln]) == 1
    assert elapsed < 60
    assert procs[2].returncode != 0
    assert "the server (rank 0) never joined" in outs[2][1], outs[2][1][-1000:]


def test_parties_started_with_different_parameters_are_named(tmp_path, free_port):
    paths = write_clients(tmp_path, [5, 5])
    procs = [_start(r, 3, free_port, paths, ("--timeout", "20") + (("--sort", "network") if r == 2 else ()))
             for r in (0, 1, 2)]
    outs = [p.communicate(timeout=90) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode != 0
        assert "started with different parameters than the server: client 1 (rank 2): " \
               "sort='network' (server: 'radix')" in err, err[-1500:]


@pytest.mark.parametrize("sort, sizes", [("network", [600, 600]), ("radix", [60_000, 60_000])])
def test_party_killed_mid_protocol_ends_the_run_with_a_clear_error(tmp_path, free_port, sort, sizes):
    paths = write_clients(tmp_path, sizes)
    procs = [_start(r, 3, free_port, paths, ("--timeout", "20", "--sort", sort)) for r in (0, 1, 2)]
    # wait until the server reports sorting progress, then kill client 1 (rank 2)
    seen = threading.Event()
    server_err: list[str] = []

    def read_server():
        for line in procs[0].stderr:
            server_err.append(line)
            if "rank step: stage" in line:
                seen.set()

    t = threading.Thread(target=read_server, daemon=True)
    t.start()
    assert seen.wait(120), "".join(server_err)
    killed_at = time.monotonic()
    procs[2].kill()
    for p in procs[:2]:
        p.wait(timeout=60)
    t.join(timeout=10)
    assert time.monotonic() - killed_at < 40
    assert procs[0].returncode != 0 and procs[1].returncode != 0
    err0 = "".join(server_err)
    assert "secure-auc party (rank 0): error: another party disconnected" in err0 or "no answer from another party" in err0, err0[-1500:]
    err1 = procs[1].stderr.read()
    assert "secure-auc party (rank 1): error:" in err1


def test_local_launcher_names_the_failing_party():
    good = ClientData(np.array([0.1, 0.2, 0.3]), np.array([0, 1, 1], dtype=np.int8), "good")
    bad = ClientData(np.array([0.5, 0.7]), np.array([1, 0], dtype=np.int8), "bad")
    object.__setattr__(bad, "scores", np.array([0.5, np.nan]))  # malformed past the boundary's check: the party's own
    config = PartyConfig(mechanisms=(NoNoise(),), clients=2, provider="tfp", progress=False)
    start = time.monotonic()
    with pytest.raises(MPCError, match=r"client 1 \(rank 2\) failed: .*score 1 is nan"):
        launch_local([good, bad], config, timeout=10)
    assert time.monotonic() - start < 60


def test_busy_port_is_reported():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        c = ClientData(np.array([0.1, 0.2]), np.array([0, 1], dtype=np.int8))
        with pytest.raises(InputError, match=f"port {port} on 127.0.0.1 is busy"):
            launch_local([c], PartyConfig(mechanisms=(NoNoise(),), clients=1), port=port)


_TAG = f"{__import__('os').getpid() % 100000}"  # concurrent test runs never share a namespace or a link
NS = [f"sa{_TAG}h{i}" for i in range(4)]  # server, client 0, client 1, dealer
_BR, _VETH, _PEER = f"sab{_TAG}", f"sav{_TAG}", f"sap{_TAG}"


def _communicate_all(procs, timeout):
    """Wait for every process; on a timeout stop every one (and its children) and fail."""
    import os
    import signal

    try:
        return [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    p.kill()
                p.wait()


def _netns_available():
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    try:
        import os

        if os.geteuid() != 0:
            return "needs root to create network namespaces"
    except AttributeError:
        return "no geteuid on this platform"
    probe = subprocess.run(["ip", "netns", "add", f"sa{_TAG}probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create network namespaces here: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", f"sa{_TAG}probe"], capture_output=True)
    return None


@pytest.fixture
def four_hosts():
    reason = _netns_available()
    if reason:
        pytest.skip(reason)

    def sh(*args):
        subprocess.run(list(args), check=True, capture_output=True, text=True)

    addrs = []
    try:
        sh("ip", "link", "add", _BR, "type", "bridge")
        sh("ip", "link", "set", _BR, "up")
        for i, ns in enumerate(NS):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", f"{_VETH}{i}", "type", "veth", "peer", "name", f"{_PEER}{i}")
            sh("ip", "link", "set", f"{_PEER}{i}", "netns", ns)
            sh("ip", "link", "set", f"{_VETH}{i}", "master", _BR)
            sh("ip", "link", "set", f"{_VETH}{i}", "up")
            addr = f"10.231.0.{i + 1}"
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{addr}/24", "dev", f"{_PEER}{i}")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", f"{_PEER}{i}", "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            addrs.append(addr)
        yield addrs
    finally:
        for i, ns in enumerate(NS):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            subprocess.run(["ip", "link", "del", f"{_VETH}{i}"], capture_output=True)
        subprocess.run(["ip", "link", "del", _BR], capture_output=True)


@pytest.fixture(scope="module")
def roster_deployment(tmp_path_factory):
    """The 2-client deployment's keys and roster, made once for the tests that use it (each
    keygen is a CLI start): they only read the keys and the roster."""
    return _roster_deployment(tmp_path_factory.mktemp("roster"), 2)


def _roster_deployment(tmp_path, clients: int):
    """One identity key per role (secure-auc keygen) and the roster of their public keys."""
    roles = ["server"] + [f"client{k}" for k in range(clients)] + ["dealer"]
    pubs = {}
    procs = {role: subprocess.Popen([str(BIN / "secure-auc"), "keygen", str(tmp_path / f"{role}.pem")],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for role in roles}  # independent, so at once
    for role, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert ((tmp_path / f"{role}.pem").stat().st_mode & 0o777) == 0o600
        pubs[role] = out.strip()
    roster = tmp_path / "roster.json"
    roster.write_text(json.dumps({"server": pubs["server"], "clients": [pubs[f"client{k}"] for k in range(clients)],
                                  "dealer": pubs["dealer"]}))
    return roster, [tmp_path / f"{role}.pem" for role in roles]


def test_parties_on_separate_hosts(tmp_path, four_hosts, roster_deployment):
    """Server, two clients and the dealer, each in its own network namespace with its own
    address, launched as the README's multi-organisation torchrun command (one node per
    host, a roster and one identity key per host)."""
    paths = write_clients(tmp_path, [9, 14], distinct=5)
    roster, keys = roster_deployment
    master = four_hosts[0]
    procs = []
    for node, ns in enumerate(NS):
        cmd = ["ip", "netns", "exec", ns, str(BIN / "torchrun"), "--nnodes", str(len(NS)), "--node-rank", str(node),
               "--nproc-per-node", "1", "--master-addr", master, "--master-port", "29533",
               str(PARTY), *paths, "--roster", str(roster), "--identity", str(keys[node]),
               "--mechanism", "none", "--json", "--timeout", "30"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    outs = _communicate_all(procs, 240)
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    report = json.loads(outs[0][0].strip().splitlines()[-1])
    assert report["auc"] == pytest.approx(reference(paths), abs=1e-12)


def test_a_host_that_never_joins_ends_every_other_within_the_timeout(tmp_path, four_hosts, roster_deployment):
    """The dealer's host never starts: with torchrun's rendezvous bounded as the README
    says (--rdzv-conf timeout=, 10 s here: far above the hosts' start-up skew, as they start
    together), every other host's torchrun ends with an error about the rendezvous within that
    bound, and leaves no process behind."""
    paths = write_clients(tmp_path, [9, 14], distinct=5)
    roster, keys = roster_deployment
    start = time.monotonic()
    procs = []
    for node, ns in enumerate(NS[:3]):
        cmd = ["ip", "netns", "exec", ns, str(BIN / "torchrun"), "--nnodes", str(len(NS)), "--node-rank", str(node),
               "--nproc-per-node", "1", "--master-addr", four_hosts[0], "--master-port", "29535",
               "--rdzv-conf", "timeout=10", str(PARTY), *paths, "--roster", str(roster), "--identity", str(keys[node]),
               "--mechanism", "none", "--json", "--timeout", "10"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    outs = _communicate_all(procs, 120)
    assert time.monotonic() - start < 45
    for p, (_, err) in zip(procs, outs):
        assert p.returncode != 0
        assert "clients joined" in err or "wait timeout" in err, err[-1000:]
    ps = subprocess.run(["ps", "-eo", "sid="], capture_output=True, text=True).stdout.split()
    assert not set(ps) & {str(p.pid) for p in procs}


def test_a_host_that_never_joins_is_named_when_parties_start_by_hand(tmp_path, four_hosts, roster_deployment):
    """Parties started directly (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set by hand,
    no torchrun agent): every party that started names the dealer, which never did."""
    paths = write_clients(tmp_path, [9, 14], distinct=5)
    roster, keys = roster_deployment
    start = time.monotonic()
    procs = []
    for rank, ns in enumerate(NS[:3]):
        cmd = ["ip", "netns", "exec", ns, str(BIN / "python"), str(PARTY), *paths, "--roster", str(roster),
               "--identity", str(keys[rank]), "--mechanism", "none", "--timeout", "10"]
        procs.append(subprocess.Popen(cmd, env=party_env(rank, 4, 29537, addr=four_hosts[0]),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    outs = _communicate_all(procs, 120)
    assert time.monotonic() - start < 30
    for p, (_, err) in zip(procs, outs):
        assert p.returncode != 0
        assert "dealer (rank 3) never joined within 10 s" in err, err[-1000:]


def test_separate_hosts_without_a_roster_are_refused(tmp_path, four_hosts):
    paths = write_clients(tmp_path, [9, 14], distinct=5)
    cmd = ["ip", "netns", "exec", NS[1], str(BIN / "python"), str(PARTY), *paths, "--mechanism", "none"]
    env = party_env(1, 4, 29534, addr=four_hosts[0])
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2
    assert "--roster is required when the parties are on several hosts" in out.stderr


def test_a_rank_step_longer_than_the_timeout_succeeds():
    """The timeout bounds each wait for another party, not the whole run: a radix sort
    that takes longer than it (the dealer answering requests all along) completes."""
    rng = np.random.default_rng(5)
    m = 2**20
    scores = np.round(rng.random(m), 3).astype(np.float32).astype(np.float64)
    labels = (rng.random(m) < 0.3).astype(np.int8)
    config = PartyConfig(mechanisms=(NoNoise(),), clients=1, provider="ttp", progress=False)
    start = time.monotonic()
    results = launch_local([ClientData(scores, labels, "big")], config, timeout=4)
    assert time.monotonic() - start > 4  # the run outlasted the timeout
    assert float(results[0].estimates[0].auc) == pytest.approx(rank_auc(labels, scores), abs=1e-12)


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_the_parties_die_with_the_launcher(tmp_path, how):
    """However the launcher ends, no party goes on computing on the private data."""
    import os
    import signal

    cmd = [str(BIN / "secure-auc"), "evaluate", "--protocol", "mpc", "--samples", "262144", "--clients", "2",
           "--mechanism", "none"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    for line in proc.stderr:  # the parties are running once the rank step reports
        if "rank step: stage" in line:
            break
    children = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert len(children) >= 4  # launcher, server, 2 clients, dealer
    os.kill(proc.pid, getattr(signal, how))
    proc.wait(timeout=30)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        alive = [pid for pid in children if pid != str(proc.pid) and os.path.exists(f"/proc/{pid}")
                 and "Z" not in open(f"/proc/{pid}/stat").read().split()[2]]
        if not alive:
            break
        time.sleep(0.1)
    assert alive == []
    if how == "SIGTERM":
        assert "secure-auc: stopped by SIGTERM" in proc.stderr.read() and proc.returncode == 143


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("setpriv") is None, reason="needs setpriv")
@pytest.mark.parametrize("owner", ["this user", "another user"])
def test_a_run_folder_made_by_someone_else_is_not_used(tmp_path, monkeypatch, owner):
    """Another local user who made the launcher's folder first (mode 0777, or owned by them)
    must not get to write, read or swap the script the parties start with."""
    import os
    import stat
    import tempfile

    from secure_auc.mpc import forkserver

    trap = tmp_path / f"secure-auc-{os.getuid()}"
    trap.mkdir()
    trap.chmod(0o777)
    if owner == "another user":
        if os.geteuid() != 0:
            pytest.skip("only root can make a folder owned by another user")
        os.chown(trap, 4242, 4242)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(forkserver, "_WRAPPERS", {})
    path = forkserver.spawn_executable()
    assert list(trap.iterdir()) == []  # nothing written into the folder someone else made
    folder = os.path.dirname(path)
    st = os.stat(folder, follow_symlinks=False)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700
    assert os.stat(path).st_uid == os.geteuid() and not os.stat(path).st_mode & 0o077
    assert forkserver.spawn_executable() == path  # made once per process
    out = subprocess.run([path, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == sys.executable


UNGUARDED_SCRIPT = '''
import json
import sys

from sklearn.metrics import roc_auc_score

from secure_auc import Ledger, builtin_clients, evaluate, make_mechanism
from secure_auc.session import MPCSession

print("the script's body ran", flush=True)
ledger = Ledger(sys.argv[1])
clients = builtin_clients(2, samples=300)
mech = make_mechanism("none")
once = evaluate(clients, mech, protocol="mpc", ledger=ledger,
                mpc_options={"computing": 2, "provider": "tfp", "progress": False, "timeout": 30})
with MPCSession([c.labels for c in clients], mech, computing=2, provider="tfp", timeout=30, ledger=ledger) as s:
    result = s.evaluate([c.scores for c in clients])
truth = roc_auc_score([y for c in clients for y in c.labels], [x for c in clients for x in c.scores])
print(json.dumps({"evaluate": once.auc, "session": result.auc, "truth": truth}))
'''


def test_a_script_without_the_main_guard_runs_once(tmp_path):
    """A user's script without ``if __name__ == "__main__":`` that runs ``evaluate(protocol="mpc")``
    and an MPC session with a ledger: no party runs the script again (no second run of its body,
    no extra charge on the ledger), and both evaluations give the exact AUC."""
    from secure_auc import Ledger

    script = tmp_path / "epoch.py"
    script.write_text(UNGUARDED_SCRIPT)
    ledger = tmp_path / "ledger.json"
    res = subprocess.run([sys.executable, str(script), str(ledger)], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    assert lines.count("the script's body ran") == 1, res.stdout[-3000:]
    out = json.loads(lines[-1])
    assert out["evaluate"] == pytest.approx(out["truth"], abs=1e-12)
    assert out["session"] == pytest.approx(out["truth"], abs=1e-12)
    book = Ledger(ledger)
    assert len(book.releases()) == 4  # each of the two clients once by evaluate, once by the session
    assert book.spent().releases == 2  # the most charged labels: one evaluate, one session evaluation
    assert {h["kind"] for h in book.histories()} == {"dataset"}  # without identifiers: each client's labels
