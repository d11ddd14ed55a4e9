"""DP selection in MPC (:mod:`secure_auc.mpc.selection`): the selected index against the plain
reference, and what every process receives and opens (:mod:`secure_auc.mpc.audit`): the
server opens exactly one value, the index; no process receives or opens any candidate's
statistic, noisy or not.  A canary that opens the noisy statistics to the server is caught.
The deployed session's selection is tested with the deployed services (tests/mpc/test_services.py)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from secure_auc.dp.rng import ClientRngs
from secure_auc.dp.selection import doubled_rank_sums, noise_share

EPS = 1e5  # noise of scale 2 (M - 1) / eps < 0.02: the noisy statistics equal the exact ones (checked)
KEYS = [101, 202, 303]


def data(m=600, t_count=3, seed=0):
    rng = np.random.default_rng(seed)
    y = (rng.random(m) < 0.5).astype(np.int8)
    s = np.stack([rng.random(m) + 0.2 * t * y for t in (1, 3, 2)][:t_count], axis=1).astype(np.float32)
    parts = np.array_split(np.arange(m), 3)
    return y, s, [y[p] for p in parts], [s[p] for p in parts]


def noisy_statistics(y, s):
    d = doubled_rank_sums(y, s)
    noise = sum(noise_share(ClientRngs.from_key(k).stream("select"), s.shape[1], len(y), EPS, 3) for k in KEYS)
    return d, d + noise


def leaks(received: dict, secrets_: list[int]) -> list[str]:
    """Where any of the int64 values ``secrets_`` appears in what a process received or opened,
    and every opening to one party that holds more than one value."""
    pats = {struct.pack("<q", int(v)): int(v) for v in secrets_}
    found = []
    for who, records in received.items():
        for r in records:
            for p, v in pats.items():
                if p in r.data:
                    found.append(f"process {who}: {v} in {r.op} from {r.src}")
            if r.op in ("open_to", "open_to_owners") and len(r.data) != 8:
                found.append(f"process {who}: {r.op} of {len(r.data) // 8} values")
    return found


def leaky_computing_job(rank, *args):
    """The canary: before the argmax, the noisy statistics are opened to the server."""
    import secure_auc.mpc.selection as sel
    from secure_auc.mpc.primitives.opening import open_to

    real = sel.secure_argmax

    def argmax(values):
        open_to(values, 0)
        return real(values)

    sel.secure_argmax = argmax
    return sel.selection_computing_job(rank, *args)


def _run(monkeypatch=None, leaky=False):
    from secure_auc.mpc import selection as sel

    y, s, labels, scores = data()
    received: dict = {}
    if leaky:
        monkeypatch.setattr(sel, "selection_computing_job", leaky_computing_job)
    index, cost = sel.run_selection_local(labels, scores, epsilon=EPS, noise_keys=KEYS, received=received)
    return y, s, index, cost, received


def test_selection_opens_only_the_index_and_a_canary_is_caught(monkeypatch):
    y, s, index, cost, received = _run()
    exact, noisy = noisy_statistics(y, s)
    assert (noisy == exact).all() and len(set(exact.tolist())) == len(exact) and exact.min() > 1 << 16
    assert index == int(np.argmax(exact))  # the plain reference without noise: the exact argmax
    assert set(received) >= {0, 1, 2, -1}  # the computing parties and the client host
    server_opened = [r for r in received[0] if r.op == "open_to"]
    assert len(server_opened) == 1 and len(server_opened[0].data) == 8  # one value: the index's position
    assert not any(r.op == "open_to" for who in (1, 2) for r in received[who])
    assert leaks(received, list(noisy)) == []
    assert cost["argmax_levels"] == 2 and min(cost["argmax_rounds_per_party"]) > 0

    _, _, index2, _, received = _run(monkeypatch, leaky=True)
    found = leaks(received, list(noisy))
    assert index2 == index and any("process 0" in f for f in found)


def test_a_session_selects_among_its_evaluations_whose_statistics_stay_in_shares(monkeypatch, tmp_path):
    """``session.select``: the exact argmax without noise among all or some of the session's
    evaluations, charged once per selection; what every process received and opened
    (:mod:`secure_auc.mpc.audit`): the server opens each evaluation's aggregate and each
    selection's index, nothing else; no process sees any evaluation's rank statistic D."""
    from secure_auc import Ledger, make_mechanism
    from secure_auc.metrics import rank_auc
    from secure_auc.session import MPCSession
    from secure_auc.training import FederatedAUC
    from secure_auc.validation import InputError

    y, s, labels, _ = data(m=600, t_count=3, seed=2)
    parts = np.array_split(np.arange(len(y)), 3)
    audit: dict = {}
    monkeypatch.setattr(MPCSession, "_audit", audit)
    ledger = Ledger(tmp_path / "l.db")
    d = doubled_rank_sums(y, s)
    best = int(np.argmax(d))
    others = [e for e in range(3) if e != best]
    with MPCSession(labels, make_mechanism("distributed", 1.0, clients=3), ledger=ledger) as session:
        for t in range(3):
            session.evaluate([s[p, t] for p in parts])
        res = session.select(epsilon=50.0)  # noise of scale 24 on D_t thousands apart
        assert res.selected == str(best) and res.candidates == ["0", "1", "2"] and res.epsilon == 50.0
        res = session.select(others, epsilon=50.0)
        assert res.selected == str(others[int(np.argmax(d[others]))])
        with pytest.raises(InputError, match="epochs"):
            session.select([0, 5])
        metric = FederatedAUC(session=session)  # the metric object delegates to the session
        res = metric.select(others, epsilon=50.0)
        assert res.selected == str(others[int(np.argmax(d[others]))])
        before = res.extra["total_epsilon_spent"]
        rel = session.select(others, epsilon=50.0, release_epsilon=20.0)  # and the selected's DP AUC
        exact = rank_auc(y, s[:, int(rel.selected)])
        assert rel.selected == str(others[int(np.argmax(d[others]))]) and rel.release_epsilon == 20.0
        assert rel.epsilon == 70.0 and rel.extra["total_epsilon_spent"] == before + 70.0  # charged once, composed
        assert 0 < rel.std < 2e-3 and rel.ci_low < rel.auc < rel.ci_high and abs(rel.auc - exact) < 5 * rel.std
        assert 3 * rel.std < rel.ci_high - rel.ci_low < 5 * rel.std  # a 95 % interval
        for k, p in enumerate(parts):  # the session goes on
            metric.update(s[p, 0], client=k)
        after = metric.compute()
        assert abs(after.auc - rank_auc(y, s[:, 0])) < 0.05 and after.samples == len(y)
    mechs = [r["mechanism"] for r in ledger.releases()]
    assert mechs.count("select-noisy-max") == 3 * 3 and mechs.count("select-noisy-max+distributed") == 3
    assert d.min() > 1 << 16 and set(audit) >= {0, 1, 2, -1}
    opened = [len(r.data) // 8 for r in audit[0] if r.op == "open_to"]
    assert opened == [2, 2, 2, 1, 1, 1, 1, 2, 2]  # 3 aggregates (sum, P), 4 indices, the release, one aggregate
    assert not any(r.op == "open_to" for who in (1, 2) for r in audit[who])
    pats = [struct.pack("<q", int(v)) for v in d] + [struct.pack("<q", int(v) // 2) for v in d]
    for who, records in audit.items():
        for r in records:
            if who == 0 and r.op == "open_to":
                # the server's openings, counted above: noisy aggregates, which equal the exact sum
                # whenever the noise draw is 0 (about 1 % of runs at the release's eps = 20)
                continue
            assert not any(p in r.data for p in pats), (who, r.op, r.src)
