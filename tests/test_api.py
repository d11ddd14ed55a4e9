"""The public API: what ``secure_auc`` exports, its documentation, its examples and its import cost."""

import doctest
import importlib
import inspect
import subprocess
import sys

import pytest

import secure_auc

DOCTEST_MODULES = [
    "secure_auc",
    "secure_auc.metrics",
    "secure_auc.validation",
    "secure_auc.evaluate",
    "secure_auc.request",
    "secure_auc.result",
    "secure_auc.interval_kernels",
    "secure_auc.compile_cache",
    "secure_auc.training",
    "secure_auc.data.io",
    "secure_auc.dp.base",
    "secure_auc.dp.registry",
    "secure_auc.dp.mechanisms",
    "secure_auc.dp.distributed",
    "secure_auc.dp.accountant",
    "secure_auc.dp.rng",
    "secure_auc.mpc.primitives.scan",
    "secure_auc.mpc.sort.radix",
    "secure_auc.mpc.sort.registry",
    "secure_auc.mpc.finish",
    "secure_auc.mpc.roles.world",
    "secure_auc.mpc.launch",
    "secure_auc.mpc.kernels",
    "secure_auc.mpc.warm_kernels",
]
CONSTANTS = {"__version__", "METHODS", "FAMILIES"}


@pytest.mark.parametrize("name", DOCTEST_MODULES)
def test_examples_run(name):
    # import_module, not attribute access: ``secure_auc.evaluate`` is the function
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


@pytest.mark.parametrize("name", secure_auc.__all__)
def test_exported(name):
    namespace: dict = {}
    exec(f"from secure_auc import {name}", namespace)
    assert namespace[name] is getattr(secure_auc, name)


@pytest.mark.parametrize("name", sorted(set(secure_auc.__all__) - CONSTANTS))
def test_documented(name):
    obj = getattr(secure_auc, name)
    doc = inspect.getdoc(obj) or ""
    assert doc, f"{name} has no docstring"
    if isinstance(obj, type) and issubclass(obj, Exception):
        return
    assert "Examples" in doc, f"{name}'s docstring has no Examples"
    if inspect.signature(obj).parameters:  # a record's fields may be documented as Attributes
        assert "Parameters" in doc or "Attributes" in doc, f"{name}'s docstring has no Parameters"
    if inspect.isfunction(obj):
        assert "Returns" in doc, f"{name}'s docstring has no Returns"


def test_constants():
    assert secure_auc.__version__
    assert "none" in secure_auc.FAMILIES
    assert {"global", "local", "orthogonal", "adaptive"} <= set(secure_auc.METHODS)


def test_import_is_cheap():
    code = ("import sys, secure_auc; from secure_auc import MPCError; "
            "print(sorted(m for m in ('torch', 'crypten') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _two_clients():
    import numpy as np

    from secure_auc import ClientData

    return [ClientData(np.array([0.1, 0.8, 0.6]), np.array([0, 1, 1])), ClientData(np.array([0.3, 0.9]), np.array([0, 1]))]


@pytest.mark.parametrize("call, match", [
    (lambda m: secure_auc.dp_roc_auc_score([0, 1, 1, 0], [0.1, 0.8, 0.6, 0.3], mechanism="none"),
     r"mechanism must come from secure_auc.make_mechanism \(e.g. make_mechanism\('none'\)\), got 'none'"),
    (lambda m: secure_auc.dp_roc_auc_score([0, 1, 1, 0], [0.1, 0.8, 0.6, 0.3], mechanism=m, ledger="x.db",
                                           protocol="plain"), r"ledger must be a secure_auc.Ledger"),
    (lambda m: secure_auc.evaluate(_two_clients(), m, protocol="plain", mpc_options={"timeout": 3}),
     r"mpc_options apply to protocol='mpc' only"),
    (lambda m: secure_auc.evaluate(_two_clients(), m, mpc_options={"bogus": 5}),
     r"mpc_options: unknown option\(s\) bogus \(known: provider, sort, timeout"),
    (lambda m: secure_auc.evaluate([([0.1, 0.9], [0, 1])], m, protocol="plain"),
     r"clients\[0\] must be a ClientData\(scores, labels\), got tuple"),
    (lambda m: secure_auc.load_clients("a.csv"), r"load_clients takes a list of paths, one per client"),
    (lambda m: secure_auc.FederatedAUC(m, protocol="bogus"), r"protocol must be 'plain' or 'mpc', got 'bogus'"),
    (lambda m: secure_auc.evaluate(_two_clients(), secure_auc.make_mechanism("laplace", 1.0), protocol="plain",
                                   seed=1.5), r"seed must be an integer, got 1.5"),
    (lambda m: secure_auc.evaluate(_two_clients(), m, protocol="plain", dataset_name="x"),
     r"dataset_name .* needs a ledger"),
    (lambda m: secure_auc.make_mechanism("laplace", "1"), r"epsilon must be a number, got '1'"),
    (lambda m: secure_auc.make_mechanism("laplace", True), r"epsilon must be a number, got True"),
    (lambda m: secure_auc.make_mechanism("gaussian", 1.0, delta="1e-5"), r"delta must be a number, got '1e-5'"),
])
def test_an_argument_of_the_wrong_kind_is_one_clear_error(call, match):
    with pytest.raises(secure_auc.InputError, match=match):
        call(secure_auc.make_mechanism("none"))


def test_the_mpc_options_checked_are_the_local_runs_keywords():
    import inspect

    from secure_auc.mpc import MPC_OPTIONS
    from secure_auc.mpc.session import run_mpc_local

    assert list(inspect.signature(run_mpc_local).parameters)[3:] == list(MPC_OPTIONS)
