r"""The control channel of the deployed services, and what a party accepts on it.

The roles run as services (:mod:`.deployed`: :class:`.server.ServerService`,
:func:`.computing.helper_service`, :func:`.host.client_service`) take their settings
from a :class:`ServicePlan`, which the deployment's layer (:mod:`secure_auc.deploy.service`)
builds from its configuration.  Between evaluations the server drives them with small JSON
messages on :data:`CH_CONTROL` of the clients' links (and on the computing world's
broadcast for the helpers).  A client's service runs on its organisation's host,
next to its labels and its model's scores; the server (and the platform's session
behind it) is another organisation.  So:

* **The epoch is a number, never a path.**  :func:`check_epoch` accepts a
  non-negative integer only (not ``True``, ``"1"``, ``1.0``, a list); the session,
  the server and every client each check it, and a client formats its
  configured file name with the checked ``int`` alone.
* **A refusal is a reason from a fixed list plus numbers.**  A client that
  cannot take part in an evaluation sends :func:`refusal` (a code of
  :data:`REASONS` and a few counts), never an exception's text, a path, a file's
  content, a score or a label; it writes the full detail in its own log.  The
  server turns the code into its own sentence (:func:`describe_refusal`) and
  refuses anything else it receives.
* **Remote strings are escaped in every log line** (:func:`escape`): a newline
  or another control character sent by a peer cannot forge a line.

Examples
--------
>>> check_epoch(3)
3
>>> check_epoch("0/../../secret")
Traceback (most recent call last):
...
secure_auc.validation.InputError: the epoch must be a non-negative integer, got '0/../../secret'
>>> refusal("scores-shape", got=3, expected=5)
{'refused': 'scores-shape', 'numbers': {'got': 3, 'expected': 5}}
>>> describe_refusal({'refused': 'scores-shape', 'numbers': {'got': 3, 'expected': 5}})
'its scores: 3 values for 5 labels (scores-shape)'
>>> describe_refusal({'refused': "/etc/passwd: 'AKIA' is not a number"})
'a malformed refusal (its reason is not one of the protocol)'
>>> escape("epoch 1\nforged line")
'epoch 1\\nforged line'
"""

from __future__ import annotations

import numbers
import re
import time
from dataclasses import dataclass

from ...validation import InputError

__all__ = ["CH_JOIN", "CH_CONTROL", "ServiceError", "ServicePlan", "MAX_EPOCH", "REASONS", "check_epoch", "refusal",
           "describe_refusal", "escape", "differences", "next_message", "ended", "READY"]

CH_JOIN, CH_CONTROL = 20, 21  # beyond the evaluation's channels (secure_auc.mpc.input_parties)
READY = "ready"  # what the server of a local session puts on its queue once every link is up
MAX_EPOCH = 2**53  # exact in every JSON reader
# seconds, after twice join_timeout, that a client or a session waits for the answer to its connection from a
# server that listens: the server listens from its start and answers once its computing world stands (its imports,
# then the others join within join_timeout), a session once the clients have joined too, or to say why not
ANSWER_MARGIN = 10.0


def answer_within(join_timeout: float, join_setting: str) -> tuple[float, str]:
    """The seconds a client or a session waits for the answer of a server that listens (see
    :data:`ANSWER_MARGIN`), and the setting named if they expire (``join_setting``: how the
    operator wrote ``join_timeout``).

    >>> answer_within(30.0, "deployment.join_timeout = 30 s")
    (70.0, 'twice deployment.join_timeout = 30 s, and 10 s to say why')
    """
    return 2 * join_timeout + ANSWER_MARGIN, f"twice {join_setting}, and {ANSWER_MARGIN:g} s to say why"

#: The reasons a client may give for not taking part, each with the numbers it may add
#: (``{name}`` in the sentence) and the sentence the server and the session read.
REASONS: dict[str, tuple[tuple[str, ...], str]] = {
    "epoch": ((), "the epoch it was sent is not a non-negative integer"),
    "scores-unavailable": ((), "its scores for this epoch could not be read or computed"),
    "scores-shape": (("got", "expected"), "its scores: {got} values for {expected} labels"),
    "scores-not-finite": (("count",), "its scores: {count} value(s) that are not finite"),
    "budget": ((), "its privacy budget would be exceeded"),
    "ledger": ((), "its privacy ledger refused the charge"),
    "inputs": ((), "it could not read its own inputs"),
    "configuration": ((), "its configuration file is not valid"),
}

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class ServiceError(RuntimeError):
    """A fault that ends the deployment (names the party and the cause)."""


@dataclass(frozen=True)
class ServicePlan:
    """One party's configuration of a deployment: what its service runs on, besides its links,
    its identity key and (a client) its inputs.

    Parameters
    ----------
    computing : int
        Computing parties (the server and ``computing - 1`` helpers).
    clients : int
        Clients (one host each).
    provider : {"ttp", "tfp"}
        With ``"ttp"`` the dealer is a party of its own (rank ``computing``).
    rendezvous : (str, int)
        Where the computing parties and the dealer meet (and on its port + 1, the roll call).
    roster : secure_auc.mpc.comm.roster.Roster
        Every party's public key.
    client_addresses : tuple of (str, int)
        Computing party r's address for the clients.
    listen : tuple of str
        Computing party r's listening host.
    session_address : (str, int)
        Where the platform's session reaches the server.
    timeout, join_timeout, score_timeout : float
        Seconds: a wait for another party during an evaluation; at start-up; a client's
        scoring hook.
    agreed : dict
        What every party must have in common (option -> value), compared at connection time.
    join_setting : str
        The setting that bounds the start-up's waits, as the operator wrote it (in errors).
    party : secure_auc.mpc.party.PartyConfig
        The MPC parties' public parameters.
    charged : object
        What a client's ledger charges per evaluation (the mechanism, or with a report the
        releases composed).
    threads : int, optional
        A computing party's threads for its local work (None: the cores it may use).

    Examples
    --------
    >>> plan = ServicePlan(computing=2, clients=1, provider="tfp", rendezvous=("h", 0), roster=None,
    ...                    client_addresses=(("h", 1), ("h", 2)), listen=("h", "h"), session_address=("h", 3),
    ...                    timeout=30.0, join_timeout=60.0, score_timeout=600.0, agreed={},
    ...                    join_setting="deployment.join_timeout = 60 s", party=None, charged=None)
    >>> plan.interval, plan.dealer
    (10.0, False)
    """

    computing: int
    clients: int
    provider: str
    rendezvous: tuple
    roster: object
    client_addresses: tuple
    listen: tuple
    session_address: tuple
    timeout: float
    join_timeout: float
    score_timeout: float
    agreed: dict
    join_setting: str
    party: object
    charged: object
    threads: int | None = None

    @property
    def dealer(self) -> bool:
        """Whether the dealer is a party of its own (the TTP provider)."""
        return self.provider == "ttp"

    @property
    def interval(self) -> float:
        """How often the server keeps the others' waits alive between evaluations."""
        return max(0.5, self.timeout / 3)


def check_epoch(epoch, where: str = "the epoch") -> int:
    """``epoch`` as an ``int`` if it is a non-negative integer (a Python or NumPy integer,
    not a bool, at most :data:`MAX_EPOCH`); else an :class:`~secure_auc.validation.InputError`
    naming ``where`` (the value escaped and shortened)."""
    if isinstance(epoch, numbers.Integral) and not isinstance(epoch, bool) and 0 <= int(epoch) <= MAX_EPOCH:
        return int(epoch)
    shown = escape(repr(epoch))
    raise InputError(f"{where} must be a non-negative integer, got {shown[:60]}{'...' if len(shown) > 60 else ''}")


def refusal(code: str, **counts: int) -> dict:
    """The message a client sends for not taking part: ``code`` (one of :data:`REASONS`) and
    its integer ``counts``."""
    names, _ = REASONS[code]
    if set(counts) != set(names):
        raise ValueError(f"reason {code!r} takes the numbers {names}, got {sorted(counts)}")
    return {"refused": code, "numbers": {k: int(v) for k, v in counts.items()}}


def describe_refusal(msg) -> str:
    """The server's sentence for a client's refusal ``msg``; anything but a reason of
    :data:`REASONS` with exactly its integer numbers reads as malformed (nothing of it is
    repeated)."""
    code = msg.get("refused") if isinstance(msg, dict) else None
    if not isinstance(code, str) or code not in REASONS:
        return "a malformed refusal (its reason is not one of the protocol)"
    names, sentence = REASONS[code]
    got = msg.get("numbers") or {}
    if not isinstance(got, dict) or set(got) != set(names) or not all(
            isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**63 for v in got.values()):
        return f"a malformed refusal ({code} without its numbers)"
    return f"{sentence.format(**got)} ({code})"


def escape(text) -> str:
    """``text`` with every control character (newline, carriage return, escape, ...) written
    as its Python escape, for a log line that holds a string another party sent."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))


def differences(theirs: dict, mine: dict) -> list[str]:
    """Each option where another party's configuration ``theirs`` differs from the server's.

    >>> differences({"mechanism.epsilon": 2.0, "clients": 3}, {"mechanism.epsilon": 1.0, "clients": 3})
    ['mechanism.epsilon = 2.0 (server: 1.0)']
    """
    keys = sorted(set(theirs) | set(mine))
    return [f"{k} = {theirs.get(k)!r} (server: {mine.get(k)!r})" for k in keys if theirs.get(k) != mine.get(k)]


def ended(msg: dict, me: str, log) -> int:
    """A party's end on the server's ``end``: 0 (logged) when the deployment was shut down in order,
    else a :class:`ServiceError` with the server's reason."""
    if msg.get("shutdown"):
        log.info("[%s] %s", me, escape(msg["reason"]))
        return 0
    raise ServiceError(f"the deployment ended: {escape(msg.get('reason'))}")


def next_message(links, timeout: float | None, describe_party) -> dict:
    """A client's next control message from the server (``links[0]``); a computing party's link
    that closes meanwhile is named (``timeout``: None waits as long as every link stays open).
    Another computing party that could not start says why (its ``end``) and is heard too."""
    from ..comm.inlinks import ready
    from ..comm.runtime import explain

    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        got = ready(links, 1.0)
        for link in got:
            p = links.index(link)
            if p != 0 and links[0] not in got:  # the server's message first: it says why
                try:
                    msg = link.recv_obj(CH_CONTROL)
                except Exception as exc:  # noqa: BLE001
                    raise ServiceError(explain(exc)) from None  # names the party
                if isinstance(msg, dict) and msg.get("op") == "end":  # it could not start either
                    return msg
                raise ServiceError(f"{describe_party(p)} sent a message outside an evaluation")
        if got:
            try:
                return links[0].recv_obj(CH_CONTROL)
            except Exception as exc:  # noqa: BLE001
                raise ServiceError(explain(exc)) from None
        if deadline is not None and time.monotonic() > deadline:
            raise ServiceError(f"the server did not answer within {timeout:g} s")
