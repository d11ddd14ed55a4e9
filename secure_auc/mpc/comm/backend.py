"""CrypTen's import shim and every call the protocol makes to CrypTen's runtime (its
communicator, its dealer), each behind one named function.  The CrypTen-facing code in
:mod:`secure_auc.mpc.crypten` (``bridge``, ``safe``, ``vfl``) also imports CrypTen's tensor
classes, after this module's shim has made CrypTen importable.

CrypTen 0.4.1 (the last release) fails to import on torch 2.x:
``crypten/nn/onnx_converter.py`` imports ``torch.onnx._internal.registration``,
which torch 2.x removed.  The MPC core never uses the ONNX converter, so a
stand-in module with ``registry = None`` registered under that name before
``import crypten`` is enough (measured: init, sharing, arithmetic,
comparisons all work).

The project uses CrypTen's communicator (torch.distributed process groups,
``all_gather``, byte and round counters) and the dealer process and channel of
its TTP mode; never its tensors' randomness (see
:func:`secure_auc.mpc.audit.forbid_crypten_randomness`).

No party unpickles what another sends.  CrypTen's ``broadcast_obj``,
``send_obj`` and ``recv_obj`` pickle (and unpickle with CrypTen's restricted
unpickler, which still builds torch modules and storages); the project's
objects between parties (:func:`broadcast_obj`, the requests to the dealer
:func:`ttp_request` and its answers) are JSON instead, framed as CrypTen frames
them, at most :data:`MAX_OBJECT` bytes, and read by :func:`decode_obj`, which
accepts JSON and nothing else.  The one pickle left on the wire is CrypTen's
own ``"terminate"`` that rank 0's ``crypten.uninit`` sends the dealer: the
dealer compares those bytes with the pickles of that one string and never
unpickles them.
"""

from __future__ import annotations

import json
import os
import pickle
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

__all__ = ["MAX_OBJECT", "ObjectRefused", "encode_obj", "decode_obj", "ttp_next_request", "ttp_answer",
           "crypten", "comm", "rank", "world_size", "all_gather", "broadcast_obj", "barrier", "init", "uninit",
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


MAX_OBJECT = 1 << 20  # bytes of one object between parties
TERMINATE = "terminate"  # CrypTen's own last message to the dealer (crypten.uninit)
_TERMINATE_PICKLES = frozenset(pickle.dumps(TERMINATE, protocol=p) for p in range(2, pickle.HIGHEST_PROTOCOL + 1))


class ObjectRefused(RuntimeError):
    """A party sent an object that is not a JSON message of the project (a pickle, say)."""


def encode_obj(obj) -> bytes:
    """``obj`` (JSON types: dict, list, str, int, float, bool, None) as the bytes sent."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()


def decode_obj(buf: bytes, who: str = "a party", *, terminate: bool = False):
    """The object in ``buf``: JSON only (never unpickled); with ``terminate``, also CrypTen's
    pickled ``"terminate"``, recognised by its bytes.  Anything else raises
    :class:`ObjectRefused`.

    >>> decode_obj(encode_obj({"op": "idle"}))
    {'op': 'idle'}
    >>> decode_obj(pickle.dumps(TERMINATE), terminate=True)
    'terminate'
    >>> decode_obj(pickle.dumps({"op": "idle"}))
    Traceback (most recent call last):
    ...
    secure_auc.mpc.comm.backend.ObjectRefused: a party sent 27 bytes that are not a JSON message (refused unread)
    """
    buf = bytes(buf)
    if terminate and buf in _TERMINATE_PICKLES:
        return TERMINATE
    try:
        return json.loads(buf.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ObjectRefused(f"{who} sent {len(buf)} bytes that are not a JSON message (refused unread)") from None


def _send_bytes(buf: bytes, dst: int, group) -> None:
    import numpy
    import torch
    import torch.distributed as dist

    size = torch.tensor(len(buf), dtype=torch.int32)
    arr = torch.from_numpy(numpy.frombuffer(buf, dtype=numpy.int8).copy())
    r0 = dist.isend(size, dst=dst, group=group)
    r1 = dist.isend(arr, dst=dst, group=group)
    r0.wait()
    r1.wait()


def _recv_bytes(src: int, group, who: str) -> bytes:
    import torch
    import torch.distributed as dist

    size = torch.tensor(1, dtype=torch.int32)
    dist.irecv(size, src=src, group=group).wait()
    n = int(size)
    if not 0 <= n <= MAX_OBJECT:
        raise ObjectRefused(f"{who} announced a {n}-byte object (limit {MAX_OBJECT})")
    data = torch.empty(size=(n,), dtype=torch.int8)
    dist.irecv(data, src=src, group=group).wait()
    return data.numpy().tobytes()


def broadcast_obj(obj, src: int):
    """``obj`` of party ``src`` at every computing party, as JSON (:func:`decode_obj`): every
    party, ``src`` too, gets the decoded copy (tuples become lists)."""
    import numpy
    import torch
    import torch.distributed as dist

    c = comm()
    group = c.main_group
    if c.get_rank() == src:
        buf = encode_obj(obj)
        if len(buf) > MAX_OBJECT:
            raise ObjectRefused(f"an object of {len(buf)} bytes is over the limit of {MAX_OBJECT}")
        dist.broadcast(torch.tensor(len(buf), dtype=torch.int32), src, group=group)
        dist.broadcast(torch.from_numpy(numpy.frombuffer(buf, dtype=numpy.int8).copy()), src, group=group)
        c._log_communication(sys.getsizeof(obj) / 8 * (c.get_world_size() - 1))  # as CrypTen counts it
        return json.loads(buf)
    size = torch.tensor(1, dtype=torch.int32)
    dist.broadcast(size, src, group=group)
    n = int(size)
    if not 0 <= n <= MAX_OBJECT:
        raise ObjectRefused(f"party {src} announced a {n}-byte object (limit {MAX_OBJECT})")
    data = torch.empty(size=(n,), dtype=torch.int8)
    dist.broadcast(data, src, group=group)
    c._log_communication(sys.getsizeof(None) / 8 * (c.get_world_size() - 1))
    return decode_obj(data.numpy().tobytes(), f"party {src}")


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
    """Send request ``name`` with JSON ``args`` to the dealer through CrypTen's TTP channel
    (rank 0 only), as JSON; the dealer answers with its result's shape (JSON) and the
    result (a tensor), as CrypTen's own requests go."""
    import torch

    client = crypten.mpc.provider.ttp_provider.TTPClient.get()
    c = comm()
    dealer = c.get_ttp_rank()
    _send_bytes(encode_obj({"function": str(name), "args": list(args)}), dealer, client.ttp_group)
    shape = decode_obj(_recv_bytes(dealer, client.ttp_group, "the dealer"), "the dealer")
    if not (isinstance(shape, list) and len(shape) <= 8
            and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= 1 << 40 for d in shape)):
        raise ObjectRefused("the dealer answered with something that is not a shape")
    result = torch.empty(shape, dtype=torch.long)
    c.broadcast(result, dealer, client.comm_group)
    return result


def ttp_next_request(ttp_group) -> dict | str:
    """The dealer's next request from rank 0: ``{"function": name, "args": [...]}`` (JSON), or
    ``"terminate"`` (CrypTen's last message); anything else raises :class:`ObjectRefused`."""
    msg = decode_obj(_recv_bytes(0, ttp_group, "the server"), "the server", terminate=True)
    if msg == TERMINATE:
        return msg
    if not (isinstance(msg, dict) and isinstance(msg.get("function"), str) and isinstance(msg.get("args"), list)):
        raise ObjectRefused("the server sent the dealer a request that is not one of the protocol")
    return msg


def ttp_answer(result, ttp_group, comm_group) -> None:
    """The dealer's answer to a request: the result's shape (JSON) to rank 0, then the result."""
    c = comm()
    _send_bytes(encode_obj(list(result.size())), 0, ttp_group)
    c.broadcast(result, c.get_ttp_rank(), comm_group)


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
