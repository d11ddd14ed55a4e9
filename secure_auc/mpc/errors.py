"""The error of a failed MPC run: a leaf module, imported by every layer of the package that raises it."""

from __future__ import annotations

__all__ = ["MPCError"]


class MPCError(RuntimeError):
    """The MPC run failed; the message names the party and the cause (one line);
    ``details`` holds that party's traceback when it reported one.

    Defined here, not in a module that imports CrypTen, so that it can be
    caught (``from secure_auc import MPCError``) without loading torch.

    Attributes
    ----------
    details : str
        The failing party's traceback, or ``""``.
    started : bool
        False when the run failed before every computing party had met the others
        (rendezvous and links): nothing was computed, so nothing was released, and a
        ledger's reservation for it is withdrawn (:func:`secure_auc.dp.accountant.finishing`).
    """

    details: str = ""
    started: bool = True
