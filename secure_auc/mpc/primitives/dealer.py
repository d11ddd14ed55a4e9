r"""Correlated randomness from the dealer, for the radix sort's shuffles and products.

Who the dealer is: with ``--provider ttp`` the separate dealer process that
takes part in CrypTen's TTP mode (rank :math:`w`); with ``--provider tfp``
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

Transport: at the start of a sort rank 0 asks the dealer, through CrypTen's
TTP channel, to start (:func:`serve`); the dealer sends the seeds, then takes
rank 0's requests (sizes and counters only, sent point-to-point without
waiting for an answer) and sends each correction point-to-point (:mod:`.p2p`)
to the one party it is for, in request order, until rank 0's stop.
"""

from __future__ import annotations

import numpy as np
import torch

from ..comm import backend, p2p
from .prg import new_seed, ring, seed_to_tensor, tensor_to_seed
from .shuffle import deltas, permutation

__all__ = ["DealerChannel", "serve", "run_dealer", "ping_dealer", "triple_shares", "triple_correction"]


def triple_shares(seed: bytes, batch: int, n: int, kind: str = "mul") -> np.ndarray:
    """A party's shares of batch ``batch`` of ``n`` items of correlated randomness, int64:
    ``"mul"`` and ``"binary"`` (a_p, b_p, c_p), shape (3, n); ``"b2a"`` (y_p, x_p),
    shape (2, n), the bit's XOR share being bit 0 of x_p."""
    return ring(seed, (kind, batch), (2 if kind == "b2a" else 3, n))


def triple_correction(seeds: list[bytes], batch: int, n: int, kind: str = "mul") -> np.ndarray:
    """Rank 0's corrected share, replacing its own stream's (index :data:`CORRECTED`):

    * ``"mul"``: c_0 = (sum a_p)(sum b_p) - sum_{p != 0} c_p (mod 2^64);
    * ``"binary"``: c_0 = (xor a_p) AND (xor b_p) XOR (xor_{p != 0} c_p), bitwise;
    * ``"b2a"``: for the random bit r = xor_p (x_p AND 1), y_0 = r - sum_{p != 0} y_p,
      so the y_p are additive shares of the same bit the x_p share by XOR.
    """
    shares = [triple_shares(s, batch, n, kind) for s in seeds]
    if kind == "mul":
        a = sum(s[0] for s in shares)
        b = sum(s[1] for s in shares)
        return a * b - sum(s[2] for s in shares[1:])
    if kind == "binary":
        a = np.bitwise_xor.reduce([s[0] for s in shares])
        b = np.bitwise_xor.reduce([s[1] for s in shares])
        return (a & b) ^ np.bitwise_xor.reduce([s[2] for s in shares[1:]] + [np.zeros(n, dtype=np.int64)])
    if kind == "b2a":
        r = np.bitwise_xor.reduce([s[1] & 1 for s in shares])
        return r - sum((s[0] for s in shares[1:]), np.zeros(n, dtype=np.int64))
    raise ValueError(f"unknown kind of randomness {kind!r}")


CORRECTED = {"mul": 2, "binary": 2, "b2a": 0}  # which of rank 0's shares the dealer corrects


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
        elif kind in CORRECTED:
            batch, n = args
            yield 0, p2p.TAG_TRIPLE, triple_correction(self.seeds, batch, n, kind)
        else:
            raise ValueError(f"unknown dealer request {kind!r}")


_KINDS = ("stop", "shuffle", "mul", "binary", "b2a")


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
    if kind in CORRECTED:
        return kind, (vals[0], vals[1])
    return kind, ()


def _worker(state: _DealerState) -> None:
    """The dealer's side of one sort: send every party its seed, then answer rank 0's
    requests in order, each correction to its party, until rank 0's stop.  Waits for a
    request at most the process group's timeout, like any party waiting for another."""
    pending: list = []
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


SETUP = "sa_setup"  # the request name rank 0 sends through CrypTen's TTP channel to start a sort
PING = "sa_ping"  # rank 0's keep-alive while a session waits between evaluations


def ping_dealer() -> None:
    """Rank 0: tell the dealer the run goes on (its wait for a request would time out)."""
    if backend.uses_ttp():
        backend.ttp_request(PING)


def serve() -> None:
    """The dealer process: CrypTen's ``TTPServer`` loop (triples for CrypTen's own
    protocols, asked by rank 0 through its TTP channel), plus the sorts: on the
    request :data:`SETUP` the dealer answers at once and then runs :func:`_worker`
    in the same thread until the sort's stop, so it is never idle on the TTP
    channel (whose wait would time out) while a long sort runs.  Returns on rank
    0's ``terminate``; raises if a party goes away (CrypTen's loop would swallow
    that and exit as if all were well)."""
    base = backend.ttp_server_base()

    class DealerServer(base):
        def __init__(self):  # CrypTen's TTPServer.__init__, with the sort's hook and errors raised
            comm = backend.comm()
            self.ttp_group = comm.ttp_group
            self.comm_group = comm.ttp_comm_group
            self.device = "cpu"
            self.generators = None  # CrypTen's generators are never drawn from (see backend.ttp_release_parties)
            ttp_rank = comm.get_ttp_rank()
            while True:
                message = comm.recv_obj(0, self.ttp_group)
                if message == "terminate":
                    return
                if message["function"] == SETUP:
                    result, state = torch.zeros(1, dtype=torch.long), _DealerState(comm.get_world_size())
                elif message["function"] == PING:
                    result, state = torch.zeros(1, dtype=torch.long), None
                else:
                    self.device = message["device"]
                    result, state = getattr(self, message["function"])(*message["args"], **message["kwargs"]), None
                comm.send_obj(result.size(), 0, self.ttp_group)
                comm.broadcast(result, ttp_rank, self.comm_group)
                if state is not None:
                    _worker(state)

    DealerServer()


def run_dealer() -> None:
    """The dealer process's whole life: :func:`serve` until the server's shutdown message
    (CrypTen's warnings silenced)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        serve()


class DealerChannel:
    """A computing party's end: its seed, requests (made by rank 0) and corrections."""

    def __init__(self):
        self.rank, self.world = backend.rank(), backend.world_size()
        self.ttp = backend.uses_ttp()
        self.dealer = backend.ttp_rank() if self.ttp else 0
        self._state: _DealerState | None = None
        self._own: dict[int, list[torch.Tensor]] = {p2p.TAG_DELTA: [], p2p.TAG_TRIPLE: []}
        self._sending: list = []
        self._batches = 0
        self._kind_batches: dict[str, int] = {}
        self._plan: list[int] = []  # sizes of the next triple batches (rank 0 prefetches them)
        self._prefetched = None  # (batch, n, tensor, work)
        if self.ttp:
            if self.rank == 0:
                self._ttp(SETUP)
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
        backend.ttp_request(name, *args)

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
        if not self.ttp and self.rank == 0:
            return self._own[tag].pop(0)
        return p2p.recv(shape, self.dealer, tag)

    def plan_triples(self, sizes: list[int]) -> None:
        """Announce the sizes of the next triple batches, so rank 0 can ask for each one
        while the previous is in use (the dealer computes during the parties' work)."""
        self._plan = [int(n) for n in sizes]

    def triples(self, n: int) -> list[torch.Tensor]:
        """This party's shares [a, b, c] of ``n`` fresh multiplication triples."""
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

    def correlated(self, kind: str, n: int) -> list[torch.Tensor]:
        """This party's shares of ``n`` fresh items of ``"binary"`` triples (a, b, c) or
        ``"b2a"`` pairs (y, x) (:func:`triple_correction`)."""
        batch = self._kind_batches.get(kind, 0)
        self._kind_batches[kind] = batch + 1
        shares = list(torch.from_numpy(triple_shares(self.seed, batch, n, kind)))
        if self.rank == 0:
            self.request(kind, batch, n)
            shares[CORRECTED[kind]] = self.receive((n,), p2p.TAG_TRIPLE)
        return shares

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
