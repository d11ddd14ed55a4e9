"""The one place that imports CrypTen.

CrypTen 0.4.1 (the last release) fails to import on torch 2.x:
``crypten/nn/onnx_converter.py`` imports ``torch.onnx._internal.registration``,
which torch 2.x removed.  The MPC core never uses the ONNX converter, so a
stand-in module with ``registry = None`` registered under that name before
``import crypten`` is enough (measured: init, sharing, arithmetic,
comparisons, ``get_plain_text(dst=...)`` all work).  Everything else in this
project imports CrypTen as ``from secure_auc.mpc._crypten import crypten``.
"""

from __future__ import annotations

import os
import sys
import types
import warnings

_SHIM = "torch.onnx._internal.registration"

try:  # pragma: no cover - depends on the installed torch
    import torch.onnx._internal.registration  # noqa: F401
except Exception:
    if _SHIM not in sys.modules:
        stand_in = types.ModuleType(_SHIM)
        stand_in.registry = None
        sys.modules[_SHIM] = stand_in

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import crypten  # noqa: E402

__all__ = ["crypten", "use_env_rendezvous"]


def use_env_rendezvous(backend: str = "gloo") -> bool:
    """Point CrypTen's communicator at torchrun's rendezvous, if there is one.

    torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT but not the two
    variables CrypTen's ``DistributedCommunicator`` also reads.  When
    MASTER_ADDR and MASTER_PORT are set, set ``RENDEZVOUS=env://`` and
    ``DISTRIBUTED_BACKEND`` (unless already set) and return True; otherwise
    change nothing and return False.  Call before ``crypten.init()``.
    """
    if not (os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT")):
        return False
    os.environ.setdefault("RENDEZVOUS", "env://")
    os.environ.setdefault("DISTRIBUTED_BACKEND", backend)
    return True
