"""scripts/compare_spu.py without SPU: arguments, the keys both sides get, the summary, the
one-line errors when no SPU interpreter is available, and the worker's output check."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import rankdata

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _load(name):
    sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def cs():
    return _load("compare_spu")


@pytest.fixture(scope="module")
def worker():
    return _load("spu_sort_worker")


def test_arguments(cs):
    a = cs.parse_args([])
    assert a.range_check == 4096
    assert (a.sizes, a.parties, a.fields, a.ops) == ([2**16, 2**20], [2, 3], ["FM32", "FM64"], ["sort"])
    assert a.spu_methods == ["SORT_DEFAULT", "SORT_RADIX", "SORT_QUICK", "SORT_NETWORK"] and a.max_network == 2**16
    a = cs.parse_args(["--sizes", "100", "200", "--parties", "3", "--fields", "FM32", "--spu-python", "/x/python",
                       "--spu-methods", "SORT_RADIX", "--json"])
    assert (a.sizes, a.parties, a.fields, a.spu_python, a.spu_methods, a.json) == (
        [100, 200], [3], ["FM32"], "/x/python", ["SORT_RADIX"], True)
    for bad in (["--parties", "4"], ["--fields", "FM128"], ["--sizes", "1"], ["--spu-methods", "SORT_BUBBLE"]):
        with pytest.raises(SystemExit) as e:
            cs.parse_args(bad)
        assert e.value.code == 2


def test_keys_order_like_the_scores(cs):
    from bench_rank import scores_for

    keys = cs.keys_for(5000, seed=4)
    scores, _ = scores_for(5000, "float32", 4)
    assert keys.dtype == np.int32
    assert np.array_equal(rankdata(keys), rankdata(scores))  # same order, same ties
    assert len(np.unique(keys)) < len(keys)  # the benchmark's scores have ties
    assert not np.array_equal(keys, cs.keys_for(5000, seed=5))


def test_both_sides_get_the_same_keys(cs, monkeypatch):
    """compare() hands SPU exactly the keys of the scores bench_rank.run splits among the
    clients (MPC replaced by clear ranks, SPU by a stub that records its keys)."""
    import secure_auc.mpc.launch as launch
    from secure_auc.mpc.encoding import encode_keys

    seen = {}

    def fake_spawn(job, per_rank, parties, **kw):
        scores = np.concatenate([per_rank[r][0] for r in range(1, parties)])
        seen["ours"] = encode_keys(scores, 1)[:, 0]
        twice = (2 * (rankdata(scores) - 1)).astype(np.int64)
        parts = np.array_split(twice, parties - 1)
        ends = [("start", 0.0, 0.0, 0), ("rank", 2.0, 1.0, 10)]  # (step, seconds, CPU, bytes) as bench_rank._job
        out = {r: {"seconds": 2.0, "cpu": 1.0, "bytes": 10, "messages": 1, "peak_rss": 1, "ends": ends,
                   "cores": "0-1", "twice": parts[r - 1] if r else None} for r in range(parties)}
        out[parties] = {"peak_rss": 1, "cpu": 0.0, "cores": "0-1"}
        return out

    def fake_spu(python, keys, parties, field, methods, op, timeout):
        full_range = keys.min() < 0  # the range check's keys; the benchmark's are positive
        if not full_range:
            seen["spu"] = keys
        times = {"SORT_RADIX": 3.0, "SORT_QUICK": 1.0, "SORT_NETWORK": 0.5}
        right = {"SORT_RADIX": True, "SORT_QUICK": not full_range, "SORT_NETWORK": False}
        return [{"method": m, "op": op, "protocol": "SEMI2K", "field": field, "parties": parties,
                 "samples": len(keys), "seconds": times[m], "correct": right[m]} for m in methods]

    monkeypatch.setattr(launch, "spawn_parties", fake_spawn)
    monkeypatch.setattr(cs, "run_spu", fake_spu)
    res = cs.compare([3000], [3], python="unused", fields=["FM32"], methods=["SORT_RADIX", "SORT_QUICK", "SORT_NETWORK"],
                     ops=["sort"], max_network=2**16, provider="ttp", seed=7)
    assert np.array_equal(seen["spu"], seen["ours"]) and len(seen["spu"]) == 3000
    assert res["ours"][0]["ok"] and res["ours"][0]["seconds"] == 2.0
    assert [s["ratio"] for s in res["spu"]] == [1.5, 0.5, 0.25]
    best = res["summary"][0]  # the fastest *correct* method: the network's wrong output is not taken
    assert best["spu_best"]["method"] == "SORT_QUICK" and best["spu_best"]["ratio"] == 0.5
    # quick sort failed the full-range keys: the fastest that sorts any keys is the radix sort
    assert best["spu_best_any_keys"]["method"] == "SORT_RADIX" and best["spu_best_any_keys"]["ratio"] == 1.5
    assert [(x["samples"], x["method"], x["ok"]) for x in res["full_range"]] == [
        (4096, "SORT_RADIX", True), (4096, "SORT_QUICK", False), (4096, "SORT_NETWORK", False)]
    text = cs.table(res)
    assert "| 3,000 | 3 | SPU | SEMI2K, FM32 | sort, SORT_NETWORK | 0.50 | NO | NO | 0.25 |" in text
    assert "| 3,000 | 3 | SPU | SEMI2K, FM32 | sort, SORT_QUICK | 1.00 | yes | NO | 0.50 |" in text
    assert "SPU's fastest: SEMI2K FM32 sort SORT_QUICK, 1.00 s = 0.50 x ours" in text
    assert "any int32 keys: SEMI2K FM32 sort SORT_RADIX, 3.00 s = 1.50 x ours" in text
    res = cs.compare([3000], [3], python="unused", fields=["FM32"], methods=["SORT_RADIX", "SORT_NETWORK"],
                     ops=["sort"], max_network=2000, provider="ttp", seed=7, range_check=0)
    assert [s["method"] for s in res["spu"]] == ["SORT_RADIX"]  # network above --max-network is skipped
    assert res["full_range"] == [] and res["spu"][0]["any_keys"] is None


def test_missing_spu_python_is_one_line(cs, capsys):
    assert cs.main(["--spu-python", "/nonexistent/bin/python", "--sizes", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "compare_spu: --spu-python /nonexistent/bin/python: no such executable"


def test_python_without_spu(cs):
    with pytest.raises(cs.SetupError, match=r"cannot import spu \(install spu==0.9.5"):
        cs.spu_python(sys.executable)  # the project's environment never has spu


def test_no_python_for_the_wheels(cs, monkeypatch, tmp_path):
    monkeypatch.setattr(cs, "_base_pythons", lambda: [])
    with pytest.raises(cs.SetupError, match=r"no Python 3.10 or 3.11 found for spu==0.9.5"):
        cs.spu_python(None, venv=tmp_path / "venv")
    assert not (tmp_path / "venv").exists()


def test_worker_check(worker):
    keys = np.array([5, -3, 5, 0, 2**31 - 1, -(2**31)], dtype=np.int32)
    assert worker.check("sort", keys, [np.sort(keys)])
    assert not worker.check("sort", keys, [keys])
    perm = np.argsort(keys, kind="stable")
    assert worker.check("argsort", keys, [perm])
    assert not worker.check("argsort", keys, [np.zeros(6, dtype=np.int64)])  # not a permutation
    assert not worker.check("argsort", keys, [perm[::-1]])


def test_spu_crash_is_a_row(cs, monkeypatch):
    def crashing(*a, **kw):
        raise RuntimeError("SPU worker failed (exit -9): ...")

    monkeypatch.setattr(cs, "run_spu", crashing)
    monkeypatch.setattr(cs, "run_ours", lambda m, parties, provider, dtype, **kw: {
        "seconds": 1.0, "exact": True, "cpu_per_party": [0.5], "bytes_per_score": 1.0, "wall_seconds": 2.0})
    res = cs.compare([100], [2], python="unused", fields=["FM64"], methods=["SORT_QUICK"], ops=["sort"],
                     max_network=2**16, provider="tfp", seed=0)
    assert res["spu"][0]["error"].startswith("SPU worker failed (exit -9)") and res["summary"][0]["spu_best"] is None
    assert "| 100 | 2 | SPU | SEMI2K, FM64 | sort, SORT_QUICK | error: SPU worker failed (exit -9)" in cs.table(res)
    assert "SPU's fastest: none; SPU's fastest that also sorts any int32 keys: none" in cs.table(res)


def test_full_range_keys(cs):
    k = cs.full_range_keys(1000, seed=2)
    assert k.dtype == np.int32 and k.min() == -(2**31) and k.max() == 2**31 - 1
    assert (k < -(2**30)).any() and (k > 2**30).any()  # spans far more than 2^31
