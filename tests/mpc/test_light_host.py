"""A client host loads neither torch, CrypTen nor numba (nor scipy): an advertiser's client service
pays seconds of CPU and hundreds of MB for them at every start, and computes nothing in MPC.

In a fresh interpreter (pytest's own process has loaded torch long before): the command line's
``client`` and ``serve`` commands, the deployed client's service, the local session's and the
launcher's host jobs are imported, and a client host's whole evaluation, its kept statistic and a
selection with a release run for real (:class:`secure_auc.mpc.roles.host.HostRole` over stand-ins
for its links, which answer as three computing parties would); then none of those modules is
loaded.  The ranks the host reconstructs are scipy's, and what it sent its correction party adds up
with its seeds' pads to its keys (a host that shares nothing would pass the import check too).
A real ``secure-auc client`` process through a deployed evaluation is checked from
``/proc/<pid>/maps`` in ``tests/mpc/test_deploy.py``.
"""

import doctest
import importlib
import json
import subprocess
import sys

import numpy as np
import pytest
from scipy.stats import rankdata

HEAVY = ("torch", "crypten", "numba", "scipy", "sklearn")

SCRIPT = r"""
import contextlib, io, json, sys

import numpy as np

from secure_auc.cli import main
from secure_auc.deploy.service import run_client_service, serve  # secure-auc serve --role client-K, secure-auc client
from secure_auc.mpc.input_hosts import CH_INPUTS, CH_KEEP, CH_PUBLIC, CH_RANKS, CH_STATS, host_job  # the launcher's
from secure_auc.mpc.primitives.prg import ring
from secure_auc.mpc.roles.deployed import refuse, run_client
from secure_auc.mpc.roles.host import HostRole, client_service, session_host_job
from secure_auc.mpc.audit import forbid_crypten_randomness
from secure_auc.mpc.party import PartyConfig
from secure_auc import ClientData, make_mechanism

for command in (["client", "--help"], ["serve", "--help"]):  # their parsers built as the commands build them
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(command)

scores, labels, twice = json.loads(sys.argv[1])
n, w = len(scores), 3
rng = np.random.default_rng(5)
pads = [rng.integers(-2**31, 2**31, n, dtype=np.int32) for _ in range(w - 1)]
rank_shares = pads + [(np.array(twice, dtype=np.int32) - pads[0] - pads[1]).astype(np.int32)]


class Party:
    # computing party p's end of the host's link: what the host sends is kept, the answers are a party's
    def __init__(self, p):
        self.p, self.sent, self.bytes = p, [], 0

    def send_obj(self, channel, obj):
        self.sent.append((channel, obj))

    def send_array(self, channel, array, dtype=np.int64):
        self.sent.append((channel, np.asarray(array, dtype=dtype)))

    def recv_obj(self, channel, *, alive=None):
        return {"limbs": 1, "total": n} if channel == CH_PUBLIC else {"release": 0}

    def recv_array(self, channel, shape, dtype=np.int64, *, alive=None):
        assert channel == CH_RANKS
        return rank_shares[self.p].astype(dtype).reshape(shape)


links = [Party(p) for p in range(w)]
config = PartyConfig(mechanisms=(make_mechanism("laplace", 1.0),), clients=1, computing=w, progress=False)
role = HostRole(0, 0, config, links)
with forbid_crypten_randomness():
    out = role.evaluate([ClientData(np.array(scores, dtype=np.float32), np.array(labels))], [7])
    role.select([0], 1.0, 1, n, [7], release_epsilon=1.0)
hello = links[1].sent[0][1]  # host 0's corrections go to party 0; parties 1 and 2 get seeds
seeds = [bytes.fromhex(links[p].sent[0][1]["seed"]) for p in (1, 2)]
inputs = next(a for c, a in links[0].sent if c == CH_INPUTS)
keys = inputs[:, :1] + sum(ring(s, ("outside input", "keys"), (n, 1)) for s in seeds)
print(json.dumps({"loaded": sorted(m for m in sys.argv[2:] if m in sys.modules),
                  "ranks": out["ranks"][0].tolist(), "keys": keys.reshape(-1).tolist(),
                  "torch_version": hello["public"]["torch"],
                  "stats": sum(c == CH_STATS for c, _ in links[0].sent), "kept": sum(c == CH_KEEP for c, _ in links[0].sent)}))
"""


def test_a_client_host_runs_without_torch_crypten_numba_or_scipy():
    import torch

    from secure_auc.mpc.encoding import encode_keys

    rng = np.random.default_rng(3)
    scores = np.round(rng.random(40), 2).astype(np.float32)  # ties
    labels = (rng.random(40) < 0.4).astype(int)
    twice = (2 * rankdata(scores) - 2).astype(int)
    run = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps([scores.tolist(), labels.tolist(), twice.tolist()]),
                          *HEAVY], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["loaded"] == [], f"a client host loaded {got['loaded']}"
    assert got["ranks"] == twice.tolist()  # reconstructed from the three parties' shares
    assert got["keys"] == encode_keys(scores, 1).reshape(-1).tolist()  # shared, not sent: the pads add them up
    assert got["torch_version"] == ".".join(torch.__version__.split(".")[:2])  # what the computing parties compare
    assert got["stats"] == 2 and got["kept"] == 2  # the evaluation's and the release's statistics; D, the noise


@pytest.mark.parametrize("name", ["secure_auc.mpc.sort.digits", "secure_auc.mpc.primitives.observed",
                                  "secure_auc.mpc.primitives.widths", "secure_auc.mpc.party"])
def test_the_light_modules_examples_run(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0, (name, result)
