r"""Correlated randomness: one interface, the dealer as its implementation.

:class:`Randomness` hands out this party's shares of multiplication triples,
binary (AND) triples and B2A bits, fetched in batches from a
:class:`.dealer.DealerChannel` (AES-CTR streams keyed by the dealer's seeds from
:mod:`secrets`; only rank 0's corrected share travels).
"""

from __future__ import annotations

import contextlib

import torch

from .dealer import CORRECTED, DealerChannel

__all__ = ["Randomness", "dealer_randomness"]


class Randomness:
    """Correlated randomness from the dealer (:class:`..dealer.DealerChannel`), in batches.

    ``take(kind, numel)`` returns this party's flat shares: kind ``"binary"``
    (a, b, c) XOR-shared with c = a AND b; ``"mul"`` (a, b, c) additively
    shared with c = a b; ``"b2a"`` (r additive, r XOR-shared in bit 0) for a
    uniformly random bit r.  Every share comes from the party's AES-CTR stream
    keyed by the dealer's seed (:mod:`..prg`); only rank 0's corrected share
    travels.  When the stock runs short it is refilled by one request of
    ``max(needed, reserve)`` words, the reserve being set with
    :meth:`reserve`.  Every slice is handed out once.  All parties must make
    the same calls (they do: sizes depend only on public values).
    """

    def __init__(self, channel):
        self.channel = channel
        self.stock: dict[str, list[torch.Tensor]] = {}
        self.used: dict[str, int] = {}
        self._reserve: dict[str, int] = {}

    def reserve(self, words: dict[str, int]) -> None:
        """Size the next refill of each kind (words of randomness still to come)."""
        self._reserve = dict(words)

    def take(self, kind: str, numel: int) -> list[torch.Tensor]:
        have = self.stock[kind][0].numel() if kind in self.stock else 0
        if have < numel:
            self._fetch(kind, max(numel - have, self._reserve.get(kind, 0) - have))
        parts = self.stock[kind]
        self.stock[kind] = [p[numel:] for p in parts]
        self.used[kind] = self.used.get(kind, 0) + numel
        self._reserve[kind] = max(0, self._reserve.get(kind, 0) - numel)
        return [p[:numel] for p in parts]

    def _fetch(self, kind: str, numel: int) -> None:
        if kind not in CORRECTED:
            raise ValueError(f"unknown kind of randomness {kind!r}")
        new = self.channel.shares(kind, numel)
        if kind == "b2a":
            new[1] = new[1] & 1  # the bit is bit 0 of the XOR sharing
        if kind in self.stock and self.stock[kind][0].numel():
            new = [torch.cat([old, fresh]) for old, fresh in zip(self.stock[kind], new)]
        self.stock[kind] = new


@contextlib.contextmanager
def dealer_randomness():
    """A :class:`Randomness` on a fresh dealer channel, closed at the end of the block."""
    channel = DealerChannel()
    try:
        yield Randomness(channel)
    finally:
        channel.close()
