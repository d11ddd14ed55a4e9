"""MPC primitives over additive (and XOR) shares, one module each.

* :mod:`.prg` — AES-CTR streams keyed from :mod:`secrets`.
* :mod:`.randomness`, :mod:`.dealer` — correlated randomness (triples, binary
  triples, B2A bits, shuffle corrections): the interface and its dealer.
* :mod:`.beaver` — Beaver products and AND gates, one round at a time.
* :mod:`.bits`, :mod:`.circuits`, :mod:`.b2a` — bit slicing, comparison circuits,
  bit-to-arithmetic conversion.
* :mod:`.inputs` — secret-sharing the sources' rows.
* :mod:`.shuffle` — secret shuffles; :mod:`.scan` — segmented scans;
  :mod:`.argmax` — the index of the largest of shared values.
* :mod:`.opening` — opening to one party, to owners, or to everyone.
* :mod:`.words` — int32 and byte shares carried in int64 messages;
  :mod:`.memory` — freed heap pages back to the OS between rounds.
"""
