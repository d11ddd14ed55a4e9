r"""Correlated randomness from the dealer, for the radix sort's shuffles and products.

Who the dealer is: with ``--provider ttp`` the separate dealer process that
already serves CrypTen's triples (rank :math:`w`); with ``--provider tfp``
rank 0 (the server), which then must be trusted, as for CrypTen's own TFP
triples.  The dealer never holds a share of any data and opens nothing.

Set-up: the dealer draws a 128-bit seed per computing party (:mod:`secrets`)
and sends each party its own.  Afterwards both ends derive every pad,
permutation and triple share from that seed (:mod:`.prg`), and the dealer
sends only corrections, each to one party:

* a shuffle pass of permuter :math:`i`: :math:`\Delta_i` (:mod:`.shuffle`);
* multiplication triples :math:`(a, b, c)`, :math:`c = ab`: every party
  derives its shares :math:`a_p, b_p, c_p` from its stream, except that
  rank 0's :math:`c_0 = ab - \sum_{p \ne 0} c_p` comes from the dealer
  (:math:`a = \sum_p a_p`, :math:`b = \sum_p b_p`): one word per product to
  rank 0, the same as CrypTen's TTP, with a generator about four times faster.

Transport: at the start of a sort rank 0 asks CrypTen's ``TTPServer`` (taught
one more request name by :func:`install_dealer`) to start a thread that sends
the seeds, then takes rank 0's requests (sizes and counters only, sent
point-to-point without waiting for an answer) and sends each correction
point-to-point (:mod:`.p2p`) to the one party it is for, in request order.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from . import p2p
from .prg import new_seed, ring, seed_to_tensor, tensor_to_seed
from .shuffle import deltas, permutation

__all__ = ["DealerChannel", "install_dealer", "triple_shares", "triple_correction"]


def triple_shares(seed: bytes, batch: int, n: int) -> np.ndarray:
    """A party's (a_p, b_p, c_p) for triple batch ``batch`` of ``n`` products: (3, n) int64."""
    return ring(seed, ("mul", batch), (3, n))


def triple_correction(seeds: list[bytes], batch: int, n: int) -> np.ndarray:
    """Rank 0's c_0 = (sum a_p)(sum b_p) - sum_{p != 0} c_p (mod 2^64)."""
    shares = [triple_shares(s, batch, n) for s in seeds]
    a = sum(s[0] for s in shares)
    b = sum(s[1] for s in shares)
    return a * b - sum(s[2] for s in shares[1:])


class _DealerState:
    """Every computing party's seed, and the permutations of the latest shuffles."""

    def __init__(self, world: int):
        self.world = world
        self.seeds = [new_seed() for _ in range(world)]
        self._perms: dict[tuple[int, int], np.ndarray] = {}

    def _perm(self, instance: int, rows: int):
        def get(i: int) -> np.ndarray:
            key = (instance, i)
            if key not in self._perms:
                self._perms[key] = permutation(self.seeds[i], instance, rows)
                while len(self._perms) > 2 * self.world:  # keep the latest two shuffles
                    self._perms.pop(next(iter(self._perms)))
            return self._perms[key]
        return get

    def messages(self, kind: str, args: tuple):
        """(party, tag, correction) for one request, in the order the parties expect them."""
        if kind == "shuffle":
            instance, rows, cols, inverse = args
            for i, d in deltas(self.seeds, instance, rows, cols, inverse, self._perm(instance, rows)):
                yield i, p2p.TAG_DELTA, d
        elif kind == "mul":
            batch, n = args
            yield 0, p2p.TAG_TRIPLE, triple_correction(self.seeds, batch, n)
        else:
            raise ValueError(f"unknown dealer request {kind!r}")


_KINDS = ("stop", "shuffle", "mul")


def _encode(kind: str, args) -> torch.Tensor:
    """A request as 6 int64: the kind and up to 5 integer arguments (all public sizes and counters)."""
    out = torch.zeros(6, dtype=torch.long)
    out[0] = _KINDS.index(kind)
    out[1 : 1 + len(args)] = torch.tensor([int(a) for a in args], dtype=torch.long)
    return out


def _decode(t: torch.Tensor):
    kind = _KINDS[int(t[0])]
    vals = [int(x) for x in t[1:]]
    if kind == "shuffle":
        return kind, (vals[0], vals[1], vals[2], bool(vals[3]))
    if kind == "mul":
        return kind, (vals[0], vals[1])
    return kind, ()


def _worker(state: _DealerState) -> None:
    """The dealer's side of one sort (a thread of the dealer process): send every party
    its seed, then answer rank 0's requests in order, each correction to its party."""
    pending: list = []
    try:
        for p, seed in enumerate(state.seeds):
            t = seed_to_tensor(seed)
            pending.append((t, p2p.isend(t, p, p2p.TAG_SEED)))
        while True:
            kind, args = _decode(p2p.recv((6,), 0, p2p.TAG_REQUEST))
            if kind == "stop":
                p2p.wait_all(w for _, w in pending)
                return
            for party, tag, d in state.messages(kind, args):
                t = torch.from_numpy(d)
                pending.append((t, p2p.isend(t, party, tag)))
                while len(pending) > 2 * state.world:  # bounded memory: a few corrections in flight
                    pending.pop(0)[1].wait()
    except Exception:  # a party went away; the server's terminate message ends the dealer
        return


def install_dealer(server_cls) -> None:
    """Teach CrypTen's ``TTPServer`` (the dealer process) to start the dealer's side of
    a sort: ``sa_setup`` (asked by rank 0 through CrypTen's TTP channel) starts
    :func:`_worker`, which then takes rank 0's requests point-to-point."""

    def sa_setup(self):
        from ._crypten import crypten

        state = _DealerState(crypten.comm.get().get_world_size())
        threading.Thread(target=_worker, args=(state,), daemon=True).start()
        return torch.zeros(1, dtype=torch.long)

    server_cls.sa_setup = sa_setup


class DealerChannel:
    """A computing party's end: its seed, requests (made by rank 0) and corrections."""

    def __init__(self):
        from ._crypten import crypten

        comm = crypten.comm.get()
        self.rank, self.world = comm.get_rank(), comm.get_world_size()
        self.ttp = crypten.mpc.get_default_provider().NAME == "TTP"
        self.dealer = comm.get_ttp_rank() if self.ttp else 0
        self._state: _DealerState | None = None
        self._own: dict[int, list[torch.Tensor]] = {p2p.TAG_DELTA: [], p2p.TAG_TRIPLE: []}
        self._sending: list = []
        self._batches = 0
        self._plan: list[int] = []  # sizes of the next triple batches (rank 0 prefetches them)
        self._prefetched = None  # (batch, n, tensor, work)
        if self.ttp:
            if self.rank == 0:
                self._ttp("sa_setup")
            self.seed = tensor_to_seed(p2p.recv((2,), self.dealer, p2p.TAG_SEED))
        elif self.rank == 0:
            self._state = _DealerState(self.world)
            for p in range(1, self.world):
                t = seed_to_tensor(self._state.seeds[p])
                self._sending.append((t, p2p.isend(t, p, p2p.TAG_SEED)))
            self.seed = self._state.seeds[0]
        else:
            self.seed = tensor_to_seed(p2p.recv((2,), 0, p2p.TAG_SEED))

    @staticmethod
    def _ttp(name: str, *args):
        from ._crypten import crypten

        crypten.mpc.provider.ttp_provider.TTPClient.get().ttp_request(name, None, *args)

    def request(self, kind: str, *args) -> None:
        """Ask for the corrections of one shuffle or one batch of triples (every party calls it;
        only rank 0 sends the request)."""
        if self.rank != 0:
            return
        if self.ttp:
            t = _encode(kind, args)
            self._sending.append((t, p2p.isend(t, self.dealer, p2p.TAG_REQUEST)))
            return
        p2p.wait_all(w for _, w in self._sending)  # earlier corrections: long received
        self._sending = []
        for party, tag, d in self._state.messages(kind, args):
            t = torch.from_numpy(d)
            if party == 0:
                self._own[tag].append(t)
            else:
                self._sending.append((t, p2p.isend(t, party, tag)))

    def receive(self, shape, tag: int = p2p.TAG_DELTA) -> torch.Tensor:
        """The next correction of this kind for this party (in request order)."""
        from .audit import observe

        if not self.ttp and self.rank == 0:
            return self._own[tag].pop(0)
        d = p2p.recv(shape, self.dealer, tag)
        observe(self.rank, d.numel(), "masked", "dealer correction")
        return d

    def plan_triples(self, sizes: list[int]) -> None:
        """Announce the sizes of the next triple batches, so rank 0 can ask for each one
        while the previous is in use (the dealer computes during the parties' work)."""
        self._plan = [int(n) for n in sizes]

    def triples(self, n: int) -> list[torch.Tensor]:
        """This party's shares [a, b, c] of ``n`` fresh multiplication triples."""
        from .audit import observe

        batch = self._batches
        self._batches += 1
        if self._plan and self._plan[0] == n:
            self._plan.pop(0)
        else:
            self._plan = []
        abc = torch.from_numpy(triple_shares(self.seed, batch, n))
        a, b, c = abc[0], abc[1], abc[2]
        if self.rank == 0:
            pre, self._prefetched = self._prefetched, None
            if pre is not None and pre[:2] == (batch, n):
                pre[3].wait()
                c = pre[2]
                observe(0, n, "masked", "dealer correction")
            else:
                if pre is not None:
                    pre[3].wait()  # asked for a batch of another size: drop it
                self.request("mul", batch, n)
                c = self.receive((n,), p2p.TAG_TRIPLE)
            if self.ttp and self._plan:
                nxt = self._plan[0]
                self.request("mul", batch + 1, nxt)
                t, work = p2p.irecv((nxt,), self.dealer, p2p.TAG_TRIPLE)
                self._prefetched = (batch + 1, nxt, t, work)
        return [a, b, c]

    def close(self) -> None:
        """Wait for everything in flight (a prefetched batch nobody used, sends)."""
        if self._prefetched is not None:
            self._prefetched[3].wait()
            self._prefetched = None
        if self.ttp and self.rank == 0:
            t = _encode("stop", ())
            self._sending.append((t, p2p.isend(t, self.dealer, p2p.TAG_REQUEST)))
        p2p.wait_all(w for _, w in self._sending)
        self._sending = []
