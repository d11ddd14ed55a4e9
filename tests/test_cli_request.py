"""``secure-auc evaluate``'s options become one checked request, and the request one result."""

import json
import re

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from secure_auc import builtin_clients
from secure_auc.cli import build_parser, evaluation_request, main
from secure_auc.mpc import RANK_METHODS


def _args(*argv):
    return build_parser().parse_args(["evaluate", *argv])


def test_request_is_made_without_writing_on_the_options():
    args = _args("--protocol", "mpc", "--samples", "500", "--clients", "2", "--epsilon", "2",
                 "--evaluations", "4", "--delta", "1e-6")
    before = dict(vars(args))
    request = evaluation_request(args)
    assert vars(args) == before  # defaults filled in the request, not on the namespace
    assert (request.data.clients, request.data.partition, request.data.samples, request.data.data_seed) == \
        (2, "iid", 500, 0)
    assert request.mpc_options == {"provider": "ttp", "sort": RANK_METHODS[0], "timeout": 60.0, "port": None,
                                   "progress": True, "computing": 3}
    assert request.choice.family.name == "laplace" and request.choice.total == (2.0, 1e-6)
    assert request.choice.evaluations == 4 and request.evaluations == 4


def test_request_runs_to_the_reference_auc(capsys):
    # the exact computation: the printed AUC is sklearn's on the same built-in clients
    assert main(["evaluate", "--protocol", "plain", "--samples", "600", "--clients", "3", "--mechanism", "none",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    clients = builtin_clients(3, samples=600)
    y = np.concatenate([c.labels for c in clients])
    s = np.concatenate([c.scores for c in clients])
    assert out["auc"] == roc_auc_score(y, s) and out["samples"] == 600 and out["clients"] == 3


def test_planning_the_exact_computation_is_refused(capsys):
    assert main(["evaluate", "--protocol", "plain", "--samples", "600", "--clients", "2", "--mechanism", "none",
                 "--evaluations", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--evaluations does not apply to --mechanism none" in err


def test_a_planned_choice_is_checked_when_made_and_plans_as_the_planner():
    from secure_auc.dp.family import MechanismChoice
    from secure_auc.dp.planning import plan_evaluations
    from secure_auc.dp.registry import family
    from secure_auc.validation import InputError

    laplace = family("laplace")
    values = laplace.resolve({"epsilon": 2.0})
    for total, t, message in [((2.0, 0.0), 0, "--evaluations must be a positive integer, got 0"),
                              ((2.0, 1.5), 3, "--delta must be in [0, 1), got 1.5")]:
        with pytest.raises(InputError, match=re.escape(message)):
            MechanismChoice(laplace, values, {"epsilon": 2.0}, total, t)
    choice = MechanismChoice(laplace, values, {"epsilon": 2.0}, (2.0, 0.0), 3)
    plan = choice.plan(3, total=1000)
    reference = plan_evaluations(lambda e, d: laplace.build(e, delta=d, clients=3), 3, 2.0, 0.0, total=1000)
    assert plan.summary() == reference.summary() and plan.per_epsilon == reference.per_epsilon
