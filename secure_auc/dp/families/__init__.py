"""The mechanism families, one module each (:mod:`..family` is their interface; :mod:`..registry`
collects them): :mod:`.none`, :mod:`.rr`, :mod:`.laplace`, :mod:`.gaussian`, and
:mod:`secure_auc.dp.distributed` (noise on the aggregate, in shares)."""
