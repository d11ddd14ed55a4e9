"""The one place that touches CrypTen: its import shim and every CrypTen call the
project makes, each behind one named function.

CrypTen 0.4.1 (the last release) fails to import on torch 2.x:
``crypten/nn/onnx_converter.py`` imports ``torch.onnx._internal.registration``,
which torch 2.x removed.  The MPC core never uses the ONNX converter, so a
stand-in module with ``registry = None`` registered under that name before
``import crypten`` is enough (measured: init, sharing, arithmetic,
comparisons all work).

The project uses CrypTen's communicator (torch.distributed process groups,
``broadcast_obj``, ``all_gather``, byte and round counters) and the dealer
process and channel of its TTP mode; never its tensors' randomness (see
:func:`secure_auc.mpc.audit.forbid_crypten_randomness`).
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

__all__ = ["crypten", "comm", "rank", "world_size", "all_gather", "broadcast_obj", "barrier", "init", "uninit",
           "log_communication", "communication_stats", "reset_communication_stats", "uses_ttp", "ttp_rank",
           "ttp_request", "ttp_server_base", "ttp_release_parties", "random_generator_modules"]


def comm():
    """CrypTen's communicator of this process."""
    return crypten.comm.get()


def rank() -> int:
    return comm().get_rank()


def world_size() -> int:
    """The number of computing parties (the dealer excluded)."""
    return comm().get_world_size()


def all_gather(tensor):
    """Every party's ``tensor`` (int64, same shape everywhere), in rank order.

    CrypTen's ``all_gather`` without its logging wrapper (which reads the omegaconf
    configuration twice per call: about half a millisecond, a tenth of the time of a
    small opening); counted the same way: 2 (w - 1) tensors sent and received, one round."""
    import torch
    import torch.distributed as dist

    c = comm()
    world = c.get_world_size()
    if world < 2:
        return [tensor]
    c._log_communication(2 * (world - 1) * tensor.nelement())
    result = [torch.empty(tensor.size(), dtype=torch.long) for _ in range(world)]
    dist.all_gather(result, tensor, group=c.main_group)
    return result


def broadcast_obj(obj, src: int):
    return comm().broadcast_obj(obj, src)


def barrier() -> None:
    comm().barrier()


def init(provider: str) -> None:
    """Initialise CrypTen's communicator from the environment (RANK, WORLD_SIZE, ...),
    with byte and round counting on, and ``provider`` ("TTP" or "TFP") as its mode."""
    crypten.cfg.mpc.provider = provider
    crypten.cfg.communicator.verbose = True  # count bytes and rounds
    crypten.init()


def uninit() -> None:
    crypten.uninit()


def log_communication(numel: int) -> None:
    """Add ``numel`` int64 words to the communicator's byte and round counters."""
    comm()._log_communication(numel)


def communication_stats() -> dict:
    return comm().get_communication_stats()


def reset_communication_stats() -> None:
    comm().reset_communication_stats()


def uses_ttp() -> bool:
    """True when a separate dealer process (CrypTen's TTP rank) takes part."""
    return crypten.mpc.get_default_provider().NAME == "TTP"


def ttp_rank() -> int:
    return comm().get_ttp_rank()


def ttp_request(name: str, *args) -> None:
    """Send request ``name`` to the dealer through CrypTen's TTP channel (rank 0 only)."""
    crypten.mpc.provider.ttp_provider.TTPClient.get().ttp_request(name, None, *args)


def ttp_server_base():
    """CrypTen's TTP server class, which the dealer's loop extends."""
    return crypten.mpc.provider.TTPServer


def ttp_release_parties() -> None:
    """The dealer's half of CrypTen's TTP start-up: the computing parties wait in
    ``crypten.init`` for a seed of a generator the project never draws from (the
    guard refuses it); send it, so that they can go on to the handshake."""
    import types

    ttp_server_base()._setup_generators(types.SimpleNamespace(ttp_group=comm().ttp_group))


def random_generator_modules():
    """Every loaded CrypTen module (where its random generators may have been imported)."""
    return [(name, mod) for name, mod in list(sys.modules.items()) if mod is not None and name.startswith("crypten")]
