"""Deployed services: the helpers layout with every role a long-lived `secure-auc serve` process,
each in its own network namespace (a host of its own), and the platform's session connecting to them.

One deployment evaluates three epochs (each client scoring its samples with the epoch's model
file through its hook) and must give the local session's and the plain protocol's results bit for
bit with the same noise keys; a selection among the three epochs (and the selected's DP AUC);
then a client over its budget refuses an evaluation (named at the
server, at the session and at the client; the deployment goes on), then a client is killed
between epochs (named by every service, the dealer too, and every service stops). A second
deployment has a client configured with another mechanism: named with the option by every
service. Nothing is left running.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from secure_auc.data import ClientData
from secure_auc.dp import StatisticsMechanism
from secure_auc.dp.accountant import Ledger, label_commitment
from secure_auc.dp.rng import ClientRngs, client_key, release_key
from secure_auc.protocol import Client, Server
from secure_auc.protocol.plain import run_plain
from secure_auc.deploy.config import load_config
from secure_auc.validation import InputError

from .listeners import check_listeners
from .stranger import resident_mb, start as stranger

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_deploy", ROOT / "scripts" / "bench_deploy.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

TAG = f"{os.getpid() % 100000}"
SIZES = [150, 90, 61]
TIMEOUT = 20.0
BUDGET = 53.5  # client 2's: three evaluations at eps = 1, two selections (eps 20, then 20 + 10), then refusals


def _netns_unavailable():
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    probe = subprocess.run(["ip", "netns", "add", f"sd{TAG}probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create network namespaces here: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", f"sd{TAG}probe"], capture_output=True)
    return None


@pytest.fixture
def hosts():
    """Fourteen network namespaces on one bridge (10.233.0.1..14), the test process at 10.233.0.254."""
    reason = _netns_unavailable()
    if reason:
        pytest.skip(reason)
    names = [f"sd{TAG}n{i}" for i in range(14)]
    bridge = f"sdb{TAG}"

    def sh(*args):
        subprocess.run(list(args), check=True, capture_output=True, text=True)

    try:
        sh("ip", "link", "add", bridge, "type", "bridge")
        sh("ip", "addr", "add", "10.233.0.254/24", "dev", bridge)
        sh("ip", "link", "set", bridge, "up")
        for i, ns in enumerate(names):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", f"sdv{TAG}{i}", "type", "veth", "peer", "name", f"sdp{TAG}{i}")
            sh("ip", "link", "set", f"sdp{TAG}{i}", "netns", ns)
            sh("ip", "link", "set", f"sdv{TAG}{i}", "master", bridge)
            sh("ip", "link", "set", f"sdv{TAG}{i}", "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"10.233.0.{i + 1}/24", "dev", f"sdp{TAG}{i}")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", f"sdp{TAG}{i}", "up")
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
            subprocess.run(["ip", "link", "del", f"sdv{TAG}{i}"], capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        assert not any(left.values()), f"processes left running in the namespaces: {left}"


class Services:
    """The seven services of one deployment, each in its namespace; their stderr lines with times."""

    def __init__(self, folder, namespaces, config_name="deploy.toml", config_of=None):
        self.procs, self.lines = {}, {}
        for role, ns in zip(bench.ROLES, namespaces):
            name = (config_of or {}).get(role, config_name)
            self.procs[role] = bench.start_service(folder, role, netns=ns, config_name=name)
            self.lines[role] = []
            threading.Thread(target=self._read, args=(role,), daemon=True).start()

    def _read(self, role):
        for line in self.procs[role].stderr:
            self.lines[role].append((time.monotonic(), line.rstrip()))

    def first(self, role, pattern, after=0.0, wait=5.0):
        """The time of ``role``'s first stderr line after ``after`` that matches ``pattern``, waiting up
        to ``wait`` seconds for it; None if there is none."""
        end = time.monotonic() + wait
        while True:
            found = next((t for t, line in list(self.lines[role]) if t >= after and re.search(pattern, line)), None)
            if found is not None or time.monotonic() > end:
                return found
            time.sleep(0.05)

    def text(self, role):
        return "\n".join(line for _, line in self.lines[role])

    def wait(self, timeout):
        end = time.monotonic() + timeout
        for p in self.procs.values():
            p.wait(timeout=max(0.1, end - time.monotonic()))
        time.sleep(0.2)  # the readers take the last lines

    def stop(self):
        bench.stop(self.procs.values())


def _expected(folder, labels, mechanism, epoch):
    scores = [bench.model_scores(folder, k, epoch) for k in range(len(labels))]
    keys = [client_key(1000 + epoch, k) for k in range(len(labels))]
    # the hooks' keys; evaluation i of a service (and of a session) draws from release_key(key, i)
    roles = [Client(k, ClientData(s, y), mechanism, ClientRngs.from_key(release_key(keys[k], epoch)))
             for k, (s, y) in enumerate(zip(scores, labels))]
    estimate, aggregate, _ = run_plain(roles, Server(mechanism))
    return scores, keys, estimate, aggregate


def _select(session, folder, labels, spend):
    """The deployed session's selection (:meth:`secure_auc.deploy.session.DeployedSession.select`)
    among the epochs evaluated so far, whose statistics the services kept: the exact argmax (noise
    of scale 2 (M - 1) / eps < 31 on rank sums 2,000 apart), a subset in another order, an unknown
    epoch refused before any charge, and the selected's DP AUC at ``release_epsilon``; each client
    charged eps (+ E2) once per selection, ``spend`` in all."""
    from secure_auc.deploy.session import EvaluationRefused
    from secure_auc.metrics import rank_auc

    y = np.concatenate(labels)
    aucs = [rank_auc(y, np.concatenate([bench.model_scores(folder, k, e) for k in range(3)])) for e in range(3)]
    best, worst = int(np.argmax(aucs)), int(np.argmin(aucs))
    eps = (spend - 10.0) / 2
    res = session.select([e for e in range(3) if e != worst][::-1], epsilon=eps)
    assert res.selected == str(best) and res.samples == sum(SIZES) and res.extra["argmax_rounds"] > 0
    with pytest.raises(EvaluationRefused, match="epochs must be distinct epochs evaluated"):
        session.select([7])
    res = session.select(epsilon=eps, release_epsilon=10.0)
    assert res.selected == str(best) and res.candidates == ["0", "1", "2"] and res.epsilon == eps + 10.0
    assert 0 < res.std < 0.05 and res.ci_low < res.auc < res.ci_high and abs(res.auc - aucs[best]) < 5 * res.std
    for k in range(3):
        ledger = Ledger(folder / f"ledger-{k}.db")
        assert [r["mechanism"] for r in ledger.releases()][-2:] == ["select-noisy-max", "select-noisy-max+laplace"]


def test_deployed_services_across_epochs_and_their_faults(tmp_path, hosts):
    from secure_auc.mpc import MPCError
    from secure_auc.session import MPCSession
    from secure_auc.deploy.session import EvaluationRefused

    addresses = [f"10.233.0.{i + 1}" for i in range(14)]
    main, other = tmp_path / "main", tmp_path / "other"
    data = bench.write_deployment(main, SIZES, epochs=4, addresses=addresses[:7], ports=(29510, 29610, 29710),
                                  budgets={2: BUDGET}, timeout=TIMEOUT)
    bench.write_deployment(main, SIZES, epochs=4, addresses=addresses[:7], ports=(29510, 29610, 29710),
                           budgets={2: BUDGET}, timeout=TIMEOUT, config_name="session-eps2.toml",
                           mechanism='name = "laplace"\nepsilon = 2.0\nallocation = "adaptive"')
    # the second deployment: client 2 was given eps = 2
    bench.write_deployment(other, SIZES, epochs=1, addresses=addresses[7:], ports=(29510, 29610, 29710),
                           timeout=TIMEOUT)
    bench.write_deployment(other, SIZES, epochs=1, addresses=addresses[7:], ports=(29510, 29610, 29710),
                           timeout=TIMEOUT, config_name="eps2.toml",
                           mechanism='name = "laplace"\nepsilon = 2.0\nallocation = "adaptive"')
    started = time.monotonic()
    # a stranger (another host) at the computing parties' rendezvous during the whole start-up: silent
    # and garbage connections, and 1 MB writes and a forged verdict as a client of torch's store
    early = stranger([(addresses[0], 29510), (addresses[0], 29511)], writes=True)
    deployed = Services(main, hosts[:7])
    mismatched = Services(other, hosts[7:], config_of={"client-2": "eps2.toml"})
    waiting: dict = {}  # a session waiting for the mismatched deployment hears the services' cause

    def wait_for_mismatched():
        try:
            MPCSession.connect(other / "deploy.toml", key=other / "keys" / "server.pem")
        except BaseException as exc:  # noqa: BLE001 - checked below
            waiting["error"] = exc

    waiter = threading.Thread(target=wait_for_mismatched, daemon=True)
    waiter.start()
    try:
        mechanism = StatisticsMechanism(1.0, allocation="adaptive")
        expected = [_expected(main, data["labels"], mechanism, e) for e in range(3)]
        with MPCSession(data["labels"], mechanism, computing=3, hosts=3, timeout=60) as local:
            local_results = [local.evaluate(scores, noise_keys=keys) for scores, keys, _, _ in expected]

        # a session configured otherwise is refused, naming the option; the services wait for the next
        with pytest.raises(InputError, match=r"the session's configuration differs from the server's: "
                                             r"mechanism.epsilon = 2.0 \(server: 1.0\)"):
            MPCSession.connect(main / "session-eps2.toml", key=main / "keys" / "server.pem")

        # three epochs of one deployed session: the local session's and the plain protocol's results, bit for bit
        session = MPCSession.connect(main / "deploy.toml", key=main / "keys" / "server.pem")
        assert session.startup["services_seconds"] > 0
        first_startup = dict(session.startup)
        for epoch, (_, _, plain_estimate, plain_aggregate) in enumerate(expected):
            if epoch == 2:  # a session may leave and another connect: the services stay up
                session.close()
                # meanwhile a stranger (another host, another user) holds silent connections and sends
                # garbage to the session port and the rendezvous stores: the next session still connects,
                # the result is the same, no service grows by 50 MB, and no party is named
                before = {role: resident_mb(p.pid) for role, p in deployed.procs.items()}
                attacked = time.monotonic()
                attacker = stranger([(addresses[0], 29710), (addresses[0], 29510), (addresses[0], 29511)])
                time.sleep(3.0)
                reconnect = time.monotonic()
                session = MPCSession(deploy=main / "deploy.toml", key=main / "keys" / "server.pem")
                # a reconnect: the services' start-up as before (not the idle time since), its own connection's
                assert session.startup["services_seconds"] == first_startup["services_seconds"]
                assert session.startup["connect_seconds"] <= time.monotonic() - reconnect + 0.01
            result = session.evaluate(epoch=epoch)
            if epoch == 0:  # the start-up under the stranger: nobody named, the result below as without it
                early.kill()
                early.wait()
                for role in bench.ROLES:
                    named = deployed.first(role, r"error|disconnected|refused|never|ended|failed", started, wait=0)
                    assert not named, deployed.text(role)
            if epoch == 2:
                attacker.kill()
                attacker.wait()
                grown = {role: resident_mb(p.pid) - before[role] for role, p in deployed.procs.items()}
                assert max(grown.values()) < 50, grown
                for role in bench.ROLES:
                    named = deployed.first(role, r"error|client \d+ disconnected|refused|never|ended", attacked, wait=0)
                    assert not named, deployed.text(role)
            local_result = local_results[epoch]
            assert result.estimated_positives == float(plain_aggregate.positives) == local_result.estimated_positives
            assert result.auc == float(plain_estimate.auc) == local_result.auc
            # one result type: the same std and interval as the local session's
            assert (result.std, result.ci_low, result.ci_high) == (local_result.std, local_result.ci_low,
                                                                   local_result.ci_high)
            assert result.extra["sizes"] == SIZES and result.extra["rank_step_seconds"] > 0
            assert ("startup_seconds" in result.extra) == (epoch in (0, 2))  # each session's first evaluation
            if epoch == 0:  # every listener of every role is the documented one, none on a wildcard
                check_listeners(load_config(main / "deploy.toml"), deployed.procs, dict(zip(bench.ROLES, addresses)))
        for k in range(3):  # each client charged its own ledger once per evaluation
            assert Ledger(main / f"ledger-{k}.db").spent(label_commitment(data["labels"][k])).releases == 3
        _select(session, main, data["labels"], BUDGET - 3.5)  # among the three epochs, over both sessions

        # client 2 is over its budget (3 evaluations at eps = 1, two selections: 0.5 left): refused before
        # anything is released
        asked = time.monotonic()
        with pytest.raises(EvaluationRefused,
                           match=r"client 2 refused: its privacy budget would be exceeded \(budget\)$"):
            session.evaluate(epoch=3)
        refused = time.monotonic() - asked
        assert deployed.first("client-2", r"refused evaluation 4 \(epoch 3\): privacy budget", asked)
        assert deployed.first("server", r"evaluation 4 \(epoch 3\) did not run: client 2 refused", asked)
        for role in ("helper-1", "helper-2", "client-0", "client-1"):
            assert deployed.first(role, "did not run: client 2 refused", asked), deployed.text(role)
        for k in range(3):  # the others' reservations were withdrawn
            assert Ledger(main / f"ledger-{k}.db").spent(label_commitment(data["labels"][k])).releases == 5
        with pytest.raises(EvaluationRefused, match=r"did not run: client 2 refused: its privacy budget .*") as again:
            session.evaluate(epoch=3)  # the deployment goes on; only client 2 refuses
        assert "client 0" not in str(again.value) and "client 1" not in str(again.value)

        # a hook that fails (no model file for the epoch) refuses too: a reason code to the server, the
        # exception in the client's own log
        asked = time.monotonic()
        with pytest.raises(EvaluationRefused, match=r"client 0 refused: its scores for this epoch could not be read "
                                                    r"or computed \(scores-unavailable\)"):
            session.evaluate(epoch=99)
        assert deployed.first("client-0", r"refused evaluation \d+ \(epoch 99\): its scoring hook failed: "
                                          "FileNotFoundError", asked)

        # client 0's service is killed between epochs: the server names it at once, every service stops
        killed = time.monotonic()
        deployed.procs["client-0"].kill()
        with pytest.raises(MPCError, match="client 0"):
            session.evaluate(epoch=1)
        deployed.wait(4 * TIMEOUT)
        known = {role: deployed.first(role, "client 0", killed) for role in bench.ROLES if role != "client-0"}
        assert all(known.values()), {r: deployed.text(r)[-500:] for r in known}
        assert max(known.values()) - killed < TIMEOUT
        for role, p in deployed.procs.items():
            if role != "client-0":
                assert p.returncode in (0, 1), (role, deployed.text(role)[-500:])
        assert deployed.procs["server"].returncode == 1

        # the other deployment: client 2's mechanism differs, named with the option at the server and at client 2
        mismatched.wait(8 * TIMEOUT)
        option = r"client 2 was configured differently: mechanism.epsilon = 2.0 \(server: 1.0\)"
        assert mismatched.first("server", option), mismatched.text("server")[-1000:]
        assert mismatched.first("client-2", option), mismatched.text("client-2")[-1000:]
        for role, p in mismatched.procs.items():  # every service stopped, naming the cause (the dealer told by the server)
            assert p.returncode == 1, (role, mismatched.text(role)[-500:])
            assert mismatched.first(role, option.split(": ", 1)[1]), (role, mismatched.text(role)[-500:])
        waiter.join(timeout=30)
        assert isinstance(waiting.get("error"), MPCError), waiting  # not an InputLinkError about the handshake
        assert str(waiting["error"]) == ("the deployment did not start: client 2 was configured differently: "
                                         "mechanism.epsilon = 2.0 (server: 1.0)")
        stopped = max(t for role in bench.ROLES for t, _ in mismatched.lines[role][-1:])
        named = mismatched.first("client-2", option)
        print(f"\nrefusal named after {refused:.2f} s; kill named by every party after "
              f"{max(known.values()) - killed:.2f} s; mismatch named at client 2 {named - started:.1f} s after the "
              f"start, every service stopped {stopped - named:.2f} s later; whole test "
              f"{time.monotonic() - started:.0f} s")
        for role in bench.ROLES:
            print(role, "|", deployed.text(role).splitlines()[-1], "|", mismatched.text(role).splitlines()[-1])
    finally:
        if early.poll() is None:
            early.kill()
            early.wait()
        deployed.stop()
        mismatched.stop()
