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
    "secure_auc.result",
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
