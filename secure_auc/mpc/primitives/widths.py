"""The bit widths the comparison circuits work on (:mod:`.circuits`), apart from them: the key
encoding (:mod:`secure_auc.mpc.encoding`), which a client host runs, reads them without
loading torch.

Examples
--------
>>> COMPARE_BITS, EQ_BITS
(33, 32)
"""

__all__ = ["COMPARE_BITS", "EQ_BITS"]

COMPARE_BITS = 33  # differences of limbs in a 32-bit range: two's complement on 33 bits
EQ_BITS = 32  # such a difference is 0 exactly when it is 0 mod 2^32 (|d| < 2^32)
