"""CrypTen's start-up for one party, written once: join the world, then the dealer serves or
the party runs its job.

Every way of running the computing parties builds a :class:`WorldPlan` and calls
:func:`take_part`: the local launcher (:mod:`secure_auc.mpc.launch`), the deployed
services (:func:`.deployed.run_computing`) and the torchrun
party (:mod:`secure_auc.cli.party`).  The rendezvous and the links themselves are
:func:`secure_auc.mpc.comm.runtime.init_party`'s.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

__all__ = ["WorldPlan", "take_part"]


@dataclass(frozen=True)
class WorldPlan:
    """Where and how one party joins CrypTen's world.

    Parameters
    ----------
    rank : int
        This party's rank: 0 the server, then the other computing parties; ``parties`` the
        dealer (with ``provider="ttp"``).
    parties : int
        The number of computing parties (the dealer not counted).
    address, port : str, int
        The rendezvous.
    provider : {"ttp", "tfp"}
    timeout : float
        Seconds that bound each wait for another party.
    identity, roster
        This party's identity key and the roster of every public key, or ``"exchange"``
        (one host, keys exchanged at the rendezvous), or None with ``insecure``.
    insecure : bool
        Plain gloo links (tests of the unprotected transport only).
    roll_call : bool
        Parties started separately: a party that never starts is named after
        ``roll_call_timeout`` seconds (default ``timeout``).
    on_ready : callable, optional
        Called once this party's modules are loaded, before it waits for the others.
    run_token : str, optional
        A local run's claim on its port.
    threads : int, optional
        A computing party's threads for its local work (the compiled kernels';
        None: the cores the process may use).

    Examples
    --------
    >>> plan = WorldPlan(rank=3, parties=3, address="127.0.0.1", port=29500, roster="exchange")
    >>> plan.dealer, WorldPlan(rank=3, parties=3, address="h", port=1, provider="tfp", roster="exchange").dealer
    (True, False)
    """

    rank: int
    parties: int
    address: str
    port: int
    provider: str = "ttp"
    timeout: float = 60.0
    identity: object = None
    roster: object = None
    insecure: bool = False
    roll_call: bool = False
    roll_call_timeout: float | None = None
    on_ready: object = None
    run_token: str | None = None
    threads: int | None = None

    @property
    def dealer(self) -> bool:
        """Whether this party is the dealer (rank ``parties`` with the TTP provider)."""
        return self.provider == "ttp" and self.rank == self.parties


def take_part(plan: WorldPlan, job, *, during=None, on_joined=None, leave_on_error: bool = False):
    """Join CrypTen's world as ``plan`` says, then: the dealer serves correlated randomness
    until the server ends the run and returns what the server said of the end
    (:func:`..primitives.dealer.run_dealer`); any other party returns ``job()`` and leaves
    the world.  CrypTen's own random generators are refused meanwhile
    (:func:`..audit.forbid_crypten_randomness`).

    Parameters
    ----------
    plan : WorldPlan
    job : callable
        This party's work, called with no argument once every party has joined.
    during : callable, optional
        A context manager's factory entered once joined, around the dealer's service or the
        job (an audit's recording, :func:`..audit.record_received`).
    on_joined : callable, optional
        Called once every party has joined (rendezvous and links).
    leave_on_error : bool
        Leave the world (tell the dealer, close the links) when the job raises too: a service
        that reports its failure after an orderly exit.  A launched process that reports at
        once and exits leaves this False.

    Returns
    -------
    object
        ``job()``'s result, or at the dealer the end as the server told it (or None).

    Raises
    ------
    BaseException
        Whatever the start-up or the job raises; an exception raised before this party met
        the others carries ``started = False`` (nothing was computed: a ledger's reservation
        for the run is withdrawn, :func:`secure_auc.dp.accountant.finishing`).
    """
    from ..audit import forbid_crypten_randomness
    from ..comm.runtime import init_party, shutdown_party

    try:
        if plan.dealer:  # the dealer's compiled kernels, loaded (or compiled) before it meets the parties
            from ..kernels import warm_up

            warm_up()
        init_party(rank=plan.rank, parties=plan.parties, master_addr=plan.address, master_port=plan.port,
                   provider=plan.provider, timeout=plan.timeout, identity=plan.identity, roster=plan.roster,
                   insecure=plan.insecure, roll_call=plan.roll_call, roll_call_timeout=plan.roll_call_timeout,
                   on_ready=plan.on_ready, run_token=plan.run_token, threads=plan.threads)
    except BaseException as exc:
        with contextlib.suppress(AttributeError, TypeError):
            exc.started = False  # the parties never met: nothing was computed
        raise
    if on_joined is not None:
        on_joined()
    with forbid_crypten_randomness(), (during() if during is not None else contextlib.nullcontext()):
        if plan.dealer:
            from ..primitives.dealer import run_dealer

            return run_dealer()
        try:
            result = job()
        except BaseException:
            if leave_on_error:
                shutdown_party()
            raise
        shutdown_party()
        return result
