"""The rank step's message rounds and the benchmark's network model, checked against a run
whose every message is held for 5 ms (the mesh's test-only delay)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from secure_auc.mpc.comm.transport import DELAY_ENV, TRACE_ENV

ROOT = Path(__file__).resolve().parents[2]
STEPS = ["sharing", "digit rounds", "mid-rank scan", "unsort", "opening to owners"]


def test_a_run_with_5_ms_per_message_takes_at_least_its_rounds_and_the_model_counts_them(rows):
    """A fresh process (the delay reaches the parties through the fork server's environment):
    every run of the rank step in it (1,024 float64 scores among 3 parties twice, 2^15 float32
    scores among 3 and 2), every message held 5 ms, takes at least rounds x 5 ms (each round is
    a message waited for after the previous one), its steps' rounds add up to each party's, and
    the benchmark's network model is rounds x RTT / 2 + bytes / bandwidth + the slowest party's
    CPU.  How close the model comes to a measured run is the benchmark's to report
    (``scripts/bench_rank.py``), not a timed test's."""
    twice = rows["float64"]
    assert len(twice) == 2 and all(r["dtype"] == "float64" and r["samples"] == 1024 for r in twice)
    assert len({r["rounds"] for r in twice}) == 1  # the rounds do not depend on timing
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_rank import modelled_seconds

    for row in [*twice, *rows["float32"].values()]:
        assert [s["step"] for s in row["steps"]] == STEPS
        for r in range(row["parties"]):
            assert sum(s["rounds"][r] for s in row["steps"]) == row["rounds_per_party"][r]
        rounds = row["rounds"]
        assert rounds == max(row["rounds_per_party"]) and rounds > (100 if row["parties"] == 3 else 50)
        assert row["seconds"] >= rounds * 0.005
        model = rounds * 0.005 + max(row["bytes_per_party"]) * 8 / 1e12 + max(row["cpu_per_party"])
        assert abs(modelled_seconds(row, rtt_ms=10, gbit=1000) - model) < 1e-9


DIGIT_ROUND_ROUNDS_3 = 6  # message rounds per digit round of the radix sort among 3 parties
RANK_STEP_ROUNDS_3 = 130  # message rounds of the whole rank step of 2^15 float32 scores among 3 parties
RANK_STEP_BYTES_3 = 728  # at most this many bytes per score at the busiest party (sent plus received), same run
RANK_STEP_BYTES_2 = 795  # the same among 2 parties


_RUNS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from bench_rank import run
runs = [(1 << 15, 3, "float32"), (1 << 15, 2, "float32"), (1024, 3, "float64"), (1024, 3, "float64")]
print(json.dumps([run(m, parties, "ttp", dtype) for m, parties, dtype in runs]))
"""


@pytest.fixture(scope="module")
def rows():
    """The benchmark's runs (``scripts/bench_rank.py``'s :func:`run`) in one fresh process, every
    message held 5 ms: 2^15 float32 scores among 3 and 2 parties, and 1,024 float64 scores among
    3 parties twice (the rounds and the bytes depend on neither the delay nor M)."""
    env = dict(os.environ, **{DELAY_ENV: "5", TRACE_ENV: "1"})
    out = subprocess.run([sys.executable, "-c", _RUNS, str(ROOT / "scripts")], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(row["exact"] for row in rows)
    return {"float32": {row["parties"]: row for row in rows[:2]}, "float64": rows[2:]}


def _digit_rounds(row: dict) -> int:
    (step,) = [s for s in row["steps"] if s["step"] == "digit rounds"]
    return max(step["rounds"])


def test_a_digit_round_among_three_parties_takes_six_message_rounds(rows):
    """Keys of two limbs take 16 more digit rounds than keys of one; among 3 parties each takes
    6 message rounds: the inverse shuffle's 3 passes, the forward shuffle's last 2 (its first
    waits for no message) and the shuffle's opening by its last permuter; the digit products
    open nothing (replicated randomness).  The whole rank step of 2^15 float32 scores takes
    130 message rounds and 728 bytes per score at the busiest party, among 2 parties 795
    (a regression fails here)."""
    single, double = rows["float32"], {3: rows["float64"][0]}
    assert single[3]["samples"] == single[2]["samples"] == 1 << 15 and single[3]["dtype"] == "float32"
    assert (_digit_rounds(double[3]) - _digit_rounds(single[3])) == 16 * DIGIT_ROUND_ROUNDS_3
    assert single[3]["rounds"] == RANK_STEP_ROUNDS_3
    assert single[3]["bytes_per_score"] <= RANK_STEP_BYTES_3  # the same bytes in every run: a regression fails
    assert single[2]["bytes_per_score"] <= RANK_STEP_BYTES_2
