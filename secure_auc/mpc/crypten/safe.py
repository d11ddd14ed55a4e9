r"""CrypTen made safe to use in a party's process: one call, :func:`install`.

Stock CrypTen 0.4.1 rests its secrets on torch's generators (MT19937: 624
outputs give the state, and its Beaver openings reveal outputs), and opens a
value "to one party" with ``torch.distributed.reduce``, which gloo runs as a
ring that leaves partial sums at every party.  :func:`install` replaces, in
this process and for CrypTen's own operations:

* **Correlated randomness.**  CrypTen's provider (``cfg.mpc.provider``, TFP
  or TTP) becomes :class:`DealerProvider`, which takes every item from the
  project's dealer (:class:`..primitives.dealer.DealerChannel`: AES-128-CTR
  streams keyed by seeds from :mod:`secrets`; the dealer process with TTP, rank
  0 with TFP): Beaver triples (``"mul"``), binary triples (``"binary"``), B2A
  bits (``"b2a"``) and the wrap randomness of CrypTen's truncation among three
  or more parties (``"wraps"``).  The dealer deals element-wise items; a triple
  for a broadcast product or a matrix product is made from element-wise ones
  of the broadcast shape by opening differences of independent uniform values
  (:func:`_broadcast_triple`), and a square from a product triple.
  Convolutions are refused.
* **Pseudo-random zero shares** (``cryptensor(x, src=k)``, ``PRZS``) and every
  other draw of ``crypten.common.rng``'s two functions (imported by name into
  CrypTen's arithmetic, binary and provider modules: each module attribute is
  replaced): AES-128-CTR streams (:func:`..primitives.prg.ring`), one key per
  call.  Each party draws its "next" seed and its local seed with
  :mod:`secrets` and sends the "next" seed to the next rank over its
  encrypted link; rank 0 draws the common seed and sends it to every party.
  ``crypten.generators`` then holds :class:`AesGenerator` objects, not torch
  generators: anything that would hand one to torch fails instead of drawing
  from a Mersenne Twister.
* **Collectives that combine shares.**  ``all_reduce`` (an opening to every
  party) becomes :func:`..primitives.opening.open_all` (one all-gather of the
  shares, or a reduce-scatter and an all-gather, point-to-point).  CrypTen calls
  it for its own openings, each of a value masked by fresh dealer randomness
  (a Beaver product's or AND gate's ``x - a`` and ``y - b``, a square's
  ``x - r``, a B2A's ``x ^ r``; :func:`_broadcast_triple`'s differences of
  uniform values), and for ``get_plain_text()`` / ``reveal()`` without ``dst``,
  which opens the plain value to *every* computing party.  ``reduce`` (CrypTen's
  opening to one party: ``get_plain_text(dst=k)``, ``reveal(dst=k)``) becomes
  :func:`..primitives.opening.open_to`: every other party sends its share to
  party k alone, nothing reaches a third party, and the audit records the value
  as opened at k only.  ``gather`` and ``scatter`` become point-to-point messages
  to or from their one party.  CrypTen's other messages (send, recv, broadcast,
  all_gather) already go over the links (:mod:`..comm.secure`).

The provider's dealer channel is open while CrypTen computes; the project's
own protocols open channels of their own, so :meth:`SafeCrypten.release`
closes it first (the bridge does that; it reopens, with fresh seeds, on the
next draw).  The dealer waits for the next request at most the run's timeout:
release the channel before a pause longer than that.

Examples
--------
Inside each computing party (not run here: it needs the parties)::

    with install():
        x = crypten.cryptensor(features, src=rank)  # zero shares from AES-CTR
        y = model(x).sigmoid()                       # triples from the dealer
        mine = y.get_plain_text(dst=0)               # opened to party 0 only (None elsewhere)
"""

from __future__ import annotations

import contextlib
import logging

import numpy as np
import torch

from ..audit import CryptenRandomnessUsed
from ..comm import backend, p2p
from ..primitives.dealer import DealerChannel
from ..primitives.opening import open_all, open_to
from ..primitives.prg import new_seed, ring, seed_to_tensor, tensor_to_seed
from ..primitives.randomness import Randomness

log = logging.getLogger(__name__)

__all__ = ["install", "SafeCrypten", "DealerProvider", "AesGenerator", "random_ring_element",
           "kbit_random_tensor", "TAG_ZERO_SEED", "TAG_GATHER", "TAG_SCATTER"]

TAG_ZERO_SEED = 0x5C0  # a party's "next" seed for CrypTen's zero shares, or rank 0's common seed
TAG_GATHER = 0x5C1  # a share sent to the one party that gathers (CrypTen's gather)
TAG_SCATTER = 0x5C2  # a tensor scattered by one party to another

_RNG_FUNCTIONS = ("generate_random_ring_element", "generate_kbit_random_tensor")


class AesGenerator:
    """Stands in for a ``torch.Generator`` in ``crypten.generators``: uniform int64 words
    from AES-128-CTR (:func:`..primitives.prg.ring`) under ``seed``, each call under its
    own key (the call's counter), so two parties holding the same seed and making the
    same calls draw the same words."""

    device = torch.device("cpu")

    def __init__(self, seed: bytes):
        self._seed = seed
        self.calls = 0

    def words(self, shape) -> torch.Tensor:
        out = ring(self._seed, ("crypten", self.calls), shape)
        self.calls += 1
        return torch.from_numpy(out)

    def __repr__(self) -> str:
        return f"AesGenerator(calls={self.calls})"


def _shape(size) -> tuple:
    if isinstance(size, int):
        return (size,)
    return tuple(int(s) for s in size)


def _source(generator) -> AesGenerator:
    if generator is None:
        generator = _ACTIVE[-1].local if _ACTIVE else None
    if not isinstance(generator, AesGenerator):
        raise CryptenRandomnessUsed("a CrypTen draw from a torch generator (Mersenne Twister) was refused: "
                                    "CrypTen's randomness is not installed in this process")
    return generator


def random_ring_element(size, ring_size=2**64, generator=None, **kwargs):
    """CrypTen's ``generate_random_ring_element`` on AES-CTR (:class:`AesGenerator`)."""
    if ring_size != 2**64:
        raise ValueError(f"only the ring Z_2^64 is supported, got a ring of size {ring_size}")
    _check_device(kwargs)
    return _source(generator).words(_shape(size))


def kbit_random_tensor(size, bitlength=None, generator=None, **kwargs):
    """CrypTen's ``generate_kbit_random_tensor`` on AES-CTR: the low ``bitlength`` bits
    of uniform words."""
    _check_device(kwargs)
    out = _source(generator).words(_shape(size))
    bits = 64 if bitlength is None else int(bitlength)
    return out if bits >= 64 else out & ((1 << bits) - 1)


def _check_device(kwargs) -> None:
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        raise ValueError(f"CrypTen on {device}: only the CPU is supported")


# ----------------------------------------------------------------------------- correlated randomness


def _reduce_to(t: torch.Tensor, size) -> torch.Tensor:
    """The entries of ``t`` (broadcast shape) at index 0 of every dimension that
    ``size`` broadcasts, shaped ``size``."""
    size = tuple(size)
    lead = t.dim() - len(size)
    out = t[(0,) * lead] if lead else t
    index = tuple(slice(0, 1) if s == 1 and d != 1 else slice(None) for s, d in zip(size, out.shape))
    return out[index].reshape(size)


def _free(shape, size) -> torch.Tensor:
    """The entries of a tensor of broadcast shape ``shape`` that :func:`_reduce_to` does not
    keep for ``size`` (a bool mask): those off index 0 of a dimension that ``size``
    broadcasts (or lacks)."""
    size = tuple(size)
    lead = len(shape) - len(size)
    kept = (0,) * lead + tuple(slice(0, 1) if s == 1 and d != 1 else slice(None) for s, d in zip(size, shape[lead:]))
    free = torch.ones(shape, dtype=torch.bool)
    free[kept] = False
    return free


def _broadcast_triple(rnd: Randomness, size0, size1, xor: bool):
    r"""Shares (a, b, c) with a of ``size0``, b of ``size1`` and c = a b (elementwise with
    broadcasting; AND for ``xor``), from element-wise triples (a', b', c') of the broadcast
    shape S.  With A, B the broadcasts of a = a' and b = b' at index 0 of each broadcast
    dimension, d = a' - A and e = b' - B are differences of independent uniform values,
    zero where a', b' are a, b (:func:`_free`: only the other entries are opened, each
    uniform and independent of a and b).  Then c' = (A + d)(B + e), so
    AB = c' - d b' - e a' + d e (XOR: c' ^ d b' ^ e a' ^ d e)."""
    shape = torch.broadcast_shapes(tuple(size0), tuple(size1))
    n = int(np.prod(shape, dtype=np.int64))
    a1, b1, c1 = (t.view(shape) for t in rnd.take("binary" if xor else "mul", n))
    a, b = _reduce_to(a1, size0), _reduce_to(b1, size1)
    if tuple(size0) == tuple(shape) and tuple(size1) == tuple(shape):
        return a, b, c1
    first = backend.rank() == 0
    free = _free(shape, size0), _free(shape, size1)
    diffs = (a1 ^ a, b1 ^ b) if xor else (a1 - a, b1 - b)
    opened = open_all([t[m] for t, m in zip(diffs, free)], xor=2 if xor else 0)
    d, e = torch.zeros(shape, dtype=torch.long), torch.zeros(shape, dtype=torch.long)
    d[free[0]], e[free[1]] = opened
    if xor:
        c = c1 ^ (d & b1) ^ (e & a1)
        return a, b, (c ^ (d & e) if first else c)
    c = c1 - d * b1 - e * a1
    return a, b, (c + d * e if first else c)


def _matmul_triple(rnd: Randomness, size0, size1):
    """A matrix-product triple (a @ b = c) from a broadcast product triple: a (..., n, k)
    and b (..., k, m) as (..., n, k, 1) and (..., 1, k, m), c summed over k."""
    size0, size1 = tuple(size0), tuple(size1)
    if len(size0) < 2 or len(size1) < 2:
        raise NotImplementedError("CrypTen matmul triples need operands of two or more dimensions "
                                  f"(got {size0} and {size1})")
    a, b, c = _broadcast_triple(rnd, size0 + (1,), size1[:-2] + (1,) + size1[-2:], xor=False)
    return a.reshape(size0), b.reshape(size1), c.sum(dim=-2)


class DealerProvider:
    """CrypTen's tuple provider on the project's dealer (module docstring).

    Built as a subclass of CrypTen's ``TupleProvider`` by :func:`_provider_class`
    (CrypTen is imported lazily); ``NAME`` stays that of the provider it replaces
    (``"TTP"``: a dealer process; ``"TFP"``: rank 0 deals)."""


def _provider_class():
    from crypten.mpc.primitives import ArithmeticSharedTensor, BinarySharedTensor
    from crypten.mpc.provider.provider import TupleProvider

    def arith(t):
        return ArithmeticSharedTensor.from_shares(t.contiguous(), precision=0)

    def binary(t):
        return BinarySharedTensor.from_shares(t.contiguous())

    class Provider(TupleProvider, DealerProvider):
        def __init__(self, name: str):
            super().__init__()
            self.NAME = name
            self._rnd: Randomness | None = None

        def randomness(self) -> Randomness:
            if self._rnd is None:
                self._rnd = Randomness(DealerChannel())
            return self._rnd

        def release(self) -> None:
            if self._rnd is not None:
                rnd, self._rnd = self._rnd, None
                rnd.channel.close()

        def generate_additive_triple(self, size0, size1, op, device=None, *args, **kwargs):
            if args or kwargs:
                raise NotImplementedError(f"CrypTen's {op} with arguments {args} {kwargs} is not supported")
            if op == "mul":
                a, b, c = _broadcast_triple(self.randomness(), size0, size1, xor=False)
            elif op == "matmul":
                a, b, c = _matmul_triple(self.randomness(), size0, size1)
            else:
                raise NotImplementedError(f"CrypTen's {op} has no triples from the dealer (mul and matmul have)")
            return arith(a), arith(b), arith(c)

        def square(self, size, device=None):
            """r and r^2 from a product triple (a, b, ab): open e = b - a, r^2 = ab - e a."""
            n = int(np.prod(_shape(size), dtype=np.int64))
            a, b, c = self.randomness().take("mul", n)
            (e,) = open_all([b - a])
            return arith(a.view(_shape(size))), arith((c - e * a).view(_shape(size)))

        def generate_binary_triple(self, size0, size1, device=None):
            a, b, c = _broadcast_triple(self.randomness(), size0, size1, xor=True)
            return binary(a), binary(b), binary(c)

        def wrap_rng(self, size, device=None):
            n = int(np.prod(_shape(size), dtype=np.int64))
            r, theta = self.randomness().take("wraps", n)
            return arith(r.view(_shape(size))), arith(theta.view(_shape(size)))

        def B2A_rng(self, size, device=None):
            n = int(np.prod(_shape(size), dtype=np.int64))
            r_arith, r_bit = self.randomness().take("b2a", n)
            return arith(r_arith.view(_shape(size))), binary(r_bit.view(_shape(size)))

    return Provider


# ----------------------------------------------------------------------------- collectives


def _communicator_class(base):
    from torch.distributed import ReduceOp

    def xor_of(op) -> bool:
        if op == ReduceOp.SUM:
            return False
        if op == ReduceOp.BXOR:
            return True
        raise ValueError(f"CrypTen collective with {op}: only sums and XORs of shares are opened")

    class SafeCommunicator(base):
        """CrypTen's communicator whose share-combining collectives are openings on the
        encrypted links (module docstring)."""

        def all_reduce(self, input, op=ReduceOp.SUM, batched=False):
            """An opening to every party (:func:`..primitives.opening.open_all`): CrypTen's
            masked values, or a ``get_plain_text()`` without ``dst`` (the plain value, to
            every party)."""
            tensors = list(input) if batched else [input]
            opened = open_all([t.contiguous() for t in tensors], xor=len(tensors) if xor_of(op) else 0)
            return opened if batched else opened[0]

        def reduce(self, input, dst, op=ReduceOp.SUM, batched=False):
            """An opening to party ``dst`` only (:func:`..primitives.opening.open_to`,
            point-to-point): the values at ``dst``, None elsewhere."""
            xor = xor_of(op)
            tensors = list(input) if batched else [input]
            out = [open_to(t.data, dst, xor=xor) for t in tensors]
            if self.get_rank() != dst:
                return None
            return out if batched else out[0]

        def gather(self, tensor, dst):
            me = self.get_rank()
            t = tensor.data.contiguous()
            if me != dst:
                p2p.isend(t, dst, TAG_GATHER).wait()
                return [None]
            works = [p2p.irecv(tuple(t.shape), r, TAG_GATHER) if r != me else (t.clone(), None)
                     for r in range(self.get_world_size())]
            p2p.wait_all(w for _, w in works if w is not None)
            return [x for x, _ in works]

        def scatter(self, scatter_list, src, size=None, device=None):
            me = self.get_rank()
            if me == src:
                sending = [(x, p2p.isend(x.data.contiguous(), r, TAG_SCATTER))
                           for r, x in enumerate(scatter_list) if r != me]
                p2p.wait_all(w for _, w in sending)
                return scatter_list[me].data
            if size is None:
                size = scatter_list[me].size()
            return p2p.recv(tuple(size), src, TAG_SCATTER)

    return SafeCommunicator


# ----------------------------------------------------------------------------- installing


_ACTIVE: list["SafeCrypten"] = []


class SafeCrypten:
    """What :func:`install` changed in this process; :meth:`uninstall` puts it back.

    Attributes
    ----------
    provider : DealerProvider
        CrypTen's provider for the block (its dealer channel opens on the first draw).
    local : AesGenerator
        This party's own stream (CrypTen's ``"local"`` generator).
    """

    def __init__(self):
        crypten = backend.crypten
        import crypten.mpc as cmpc

        self._saved: list = []
        rank, world = backend.rank(), backend.world_size()
        self._set_seeds(crypten, rank, world)
        self._replace_functions()
        providers = cmpc.__dict__["__SUPPORTED_PROVIDERS"]
        name = crypten.cfg.mpc.provider
        self.provider = _provider_class()(name)
        self._saved.append((providers, name, providers[name], True))
        providers[name] = self.provider
        comm = backend.comm()
        self._comm, self._comm_class = comm, type(comm)
        comm.__class__ = _communicator_class(type(comm))
        _ACTIVE.append(self)

    def _set_seeds(self, crypten, rank: int, world: int) -> None:
        mine, self.local = new_seed(), AesGenerator(new_seed())
        common = new_seed() if rank == 0 else None
        sending = []
        if world > 1:
            t = seed_to_tensor(mine)
            sending.append((t, p2p.isend(t, (rank + 1) % world, TAG_ZERO_SEED)))
            if rank == 0:
                sending += [(c, p2p.isend(c, r, TAG_ZERO_SEED)) for r in range(1, world)
                            for c in [seed_to_tensor(common)]]
            prev = tensor_to_seed(p2p.recv((2,), (rank - 1) % world, TAG_ZERO_SEED))
            if rank != 0:
                common = tensor_to_seed(p2p.recv((2,), 0, TAG_ZERO_SEED))
            p2p.wait_all(w for _, w in sending)
        else:
            prev = mine
        streams = {"prev": AesGenerator(prev), "next": AesGenerator(mine), "local": self.local,
                   "global": AesGenerator(common)}
        for key, by_device in crypten.generators.items():
            self._saved.append((crypten.generators, key, dict(by_device), True))
            crypten.generators[key] = {torch.device("cpu"): streams[key]}

    def _replace_functions(self) -> None:
        new = {"generate_random_ring_element": random_ring_element, "generate_kbit_random_tensor": kbit_random_tensor}
        for _, mod in backend.random_generator_modules():
            for name in _RNG_FUNCTIONS:
                if hasattr(mod, name):
                    self._saved.append((mod, name, getattr(mod, name), False))
                    setattr(mod, name, new[name])

    def release(self) -> None:
        """Close the provider's dealer channel (before the project's own protocols, which
        open theirs; a later CrypTen draw opens a new one with fresh seeds)."""
        self.provider.release()

    def uninstall(self) -> None:
        """Release the dealer channel and put CrypTen's functions, generators, provider and
        communicator back (idempotent)."""
        if self not in _ACTIVE:
            return
        self.release()
        _ACTIVE.remove(self)
        self._comm.__class__ = self._comm_class
        for holder, name, value, item in reversed(self._saved):
            if item:
                holder[name] = value
            else:
                setattr(holder, name, value)
        self._saved = []

    def __enter__(self) -> "SafeCrypten":
        return self

    def __exit__(self, *exc) -> None:
        self.uninstall()


def install() -> SafeCrypten:
    """Make CrypTen's operations in this party's process safe (module docstring).

    Every computing party calls it at the same point (it agrees seeds over the
    links); CrypTen must be initialised (:func:`..comm.runtime.init_party`).  Returns
    a :class:`SafeCrypten`, usable as a context manager that uninstalls at the end."""
    return SafeCrypten()


@contextlib.contextmanager
def released():
    """The active installation's dealer channel closed for the block (the project's own
    protocols run inside it)."""
    for s in _ACTIVE:
        s.release()
    yield
