r"""The helpers layout at a client host: steps 1 to 5 of an evaluation, and a session's kept
statistics and selections (the layout and the computing parties' steps: :mod:`.input_parties`).

A client host (one process holding one or more clients' labels) shares its clients' keys and
digits with the computing parties (:mod:`.primitives.outside`, AES-CTR pads from seeds drawn
with :mod:`secrets`), adds the shares of its own rows' ranks it receives
(:func:`.primitives.observed.reconstruct`), runs each client's role with its own noise
(:mod:`.finish`) and shares the sum of their statistics, over its links to the computing
parties (:mod:`.comm.inlinks`).  It computes nothing in MPC: this module and everything it
imports load neither torch, CrypTen nor numba (``tests/mpc/test_light_host.py``), so that an
advertiser's client service starts in a fraction of a second of CPU.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from ..data.io import ClientData
from ..dp.rng import ClientRngs
from ..dp.selection import noise_share
from .comm.inlinks import connect
from .comm.roster import describe_helpers_rank, describe_host
from .encoding import encode_keys, is_float32_exact
from .party import PartyConfig, ProtocolError
from .primitives.observed import reconstruct
from .primitives.outside import HostSharing
from .sort.digits import DIGIT_BITS, key_digits
from .sort.registry import rank_sort
from . import finish

__all__ = ["CH_HELLO", "CH_PUBLIC", "CH_BIT", "CH_INPUTS", "CH_RANKS", "CH_STATS", "CH_ALIVE", "CH_KEEP",
           "input_columns", "HostResult", "run_client_host", "connected_evaluation", "send_hello", "recv_public",
           "receive_ranks", "release_statistics", "share_and_rank", "host_evaluation", "host_job", "host_keep", "host_session_select"]

CH_HELLO, CH_PUBLIC, CH_BIT, CH_INPUTS, CH_RANKS, CH_STATS, CH_ALIVE = range(1, 8)  # the evaluation's channels
CH_KEEP = 12  # a session's kept statistics and a selection's noise (the links above)


def input_columns(sort: str, limbs: int) -> tuple[int, int]:
    """(number of digit rounds, columns a host shares per row): the key limbs, then for
    a sort by digits each round's digit (one column, :func:`.sort.digits.key_digits`;
    :meth:`.sort.registry.RankSort.columns`)."""
    return rank_sort(sort).columns(limbs)


class HostResult(dict):
    """What a client host reports: ``bytes`` (sent and received over its links),
    ``seconds``, and with ``keep_ranks`` each client's 2 x mid-ranks (tests)."""


def run_client_host(h: int, clients: list[ClientData], first: int, noise_keys: list[int | None], config: PartyConfig,
                    parties: list[tuple[str, int, bytes]], identity, timeout: float, *,
                    keep_ranks: bool = False) -> HostResult:
    """Run one evaluation as client host ``h``, hosting clients ``first ..
    first + len(clients) - 1``: connect to every computing party ``(addr, port, public
    key)``, share, receive the own rows' ranks, run each client's role with its own
    ``noise_keys[k]`` (None: fresh from :mod:`secrets`), share the statistics."""
    me = describe_host(h, range(first, first + len(clients)))
    return connected_evaluation(h, identity, parties, timeout, me,
                                lambda links: host_evaluation(h, clients, first, noise_keys, config, links, keep_ranks))


def connected_evaluation(h: int, identity, parties: list[tuple[str, int, bytes]], timeout: float, me: str,
                         evaluation) -> HostResult:
    """Input party ``h`` (named ``me``) connects to every computing party, runs
    ``evaluation(links)`` and closes its links; the result gains the ``bytes`` sent and
    received and the ``seconds``, connection included."""
    w = len(parties)
    start = time.perf_counter()
    links = connect(h, identity, parties, timeout=timeout, describe_party=lambda p: describe_helpers_rank(p, w - 1),
                    describe_me=me)
    try:
        out = evaluation(links)
    finally:
        for link in links:
            link.close()
    out["bytes"] = int(sum(link.bytes for link in links))
    out["seconds"] = time.perf_counter() - start
    return out


def send_hello(links, sharing: HostSharing, config: PartyConfig, first: int, sizes: list[int]) -> None:
    """Step 1 at a host: its parameters, its clients (``first`` on, ``sizes`` rows each) and,
    to every computing party but its correction party, a fresh seed."""
    public = config.public()
    for p, link in enumerate(links):
        link.send_obj(CH_HELLO, {"public": public, "first": first, "clients": len(sizes), "samples": sum(sizes),
                                 "seed": sharing.seeds[p].hex() if p in sharing.seeds else None})


def recv_public(links) -> dict:
    """The public parameters every computing party sends a host (the same from each; the
    parties' heartbeats, :data:`CH_ALIVE`, are accepted meanwhile)."""
    answers = [link.recv_obj(CH_PUBLIC, alive=CH_ALIVE) for link in links]
    if any(a != answers[0] for a in answers):
        raise ProtocolError(f"the computing parties disagree on the public parameters: {answers}")
    return answers[0]


def receive_ranks(links, n: int) -> np.ndarray:
    r"""Step 4 at a host: the shares of its ``n`` rows' 2 x mid-ranks from every computing
    party (side by side, each wait renewed by the party's heartbeats), added modulo
    :math:`2^{32}` (:func:`.primitives.observed.reconstruct`); int64."""
    parts: list = [None] * len(links)
    errors: list = []

    def receive(p):
        try:
            parts[p] = links[p].recv_array(CH_RANKS, (n,), np.int32, alive=CH_ALIVE)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=receive, args=(p,), daemon=True) for p in range(len(links))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return reconstruct(parts).astype(np.int64)  # int32 shares: wraps mod 2^32


def release_statistics(clients, first: int, noise_keys, mechanisms, twice: np.ndarray, total: int,
                       sharing: HostSharing, links, report=None) -> None:
    """Step 5 at a host: each hosted client's fixed-point statistics from its labels, its
    rows' mid-ranks (``twice`` / 2, of ``total`` rows) and its own noise key, per mechanism;
    with a ``report`` (:class:`secure_auc.report.release.ReportPlan`), each client's noisy
    report vector from the same ranks, its true labels, its scores and the same key (another
    stream); the host shares their sum (2 values per mechanism, then the report's vector) with
    its correction party."""
    stats = finish.client_statistics(clients, first, noise_keys, mechanisms, twice, total, report)
    width = len(stats)
    links[sharing.corrector].send_array(CH_STATS, sharing.correction(stats.reshape(1, width), "statistics"))


def share_and_rank(h: int, scores: np.ndarray, sizes: list[int], first: int, config: PartyConfig,
                   links) -> tuple[np.ndarray, HostSharing, int]:
    """Steps 1 to 4 at client host ``h`` for its clients' ``scores`` (``sizes`` rows each, the first
    of them client ``first``): the hello, whether the scores are float32-exact, the key limbs and
    digits as shares, and the shares of the own rows' ranks back.  Returns (2 x the 0-based
    mid-ranks of the host's rows, the host's sharing of this round, the number of scores M)."""
    sharing = HostSharing(h, len(links))
    c = sharing.corrector
    send_hello(links, sharing, config, first, sizes)
    bit = np.array([[0 if is_float32_exact(scores) else 1]], dtype=np.int64)
    links[c].send_array(CH_BIT, sharing.correction(bit, "float32-exact"))
    answer = recv_public(links)
    limbs, total = int(answer["limbs"]), int(answer["total"])
    keys = encode_keys(scores, limbs)
    rounds, _ = input_columns(config.sort, limbs)
    blocks = [sharing.correction(keys, "keys")]
    blocks += [sharing.correction(key_digits(keys, l, DIGIT_BITS).reshape(-1, 1), ("digit", l)) for l in range(rounds)]
    links[c].send_array(CH_INPUTS, np.concatenate(blocks, axis=1))
    del blocks
    return receive_ranks(links, len(scores)), sharing, total


def host_evaluation(h, clients, first, noise_keys, config, links, keep_ranks=False, on_labels=None) -> HostResult:
    """One evaluation at client host ``h`` over its open ``links`` to the computing parties:
    steps 1 to 5 (:class:`HostResult`).  ``on_labels()`` (optional) is called just before the
    clients' labels are first used (their statistics, after the rank step): nothing of them has
    left the host before."""
    sizes = [len(d) for d in clients]
    scores = np.concatenate([d.scores for d in clients]) if len(clients) > 1 else clients[0].scores
    twice, sharing, total = share_and_rank(h, scores, sizes, first, config, links)
    out = HostResult()
    if keep_ranks:
        out["ranks"] = np.split(twice, np.cumsum(sizes)[:-1])
    if on_labels is not None:
        on_labels()
    release_statistics(clients, first, noise_keys, config.mechanisms, twice, total, sharing, links, config.report)
    return out


def host_job(h: int, clients, first: int, noise_keys, config: PartyConfig, parties, identity_raw: bytes,
             timeout: float, keep_ranks: bool = False) -> HostResult:
    """:func:`run_client_host` with the identity key as raw bytes (a spawned process's arguments)."""
    from .comm.roster import identity_from_bytes

    return run_client_host(h, clients, first, noise_keys, config, parties, identity_from_bytes(identity_raw), timeout,
                           keep_ranks=keep_ranks)


# --------------------------------------------------------------------------- a session's selections

def host_keep(links, h: int, labels, ranks) -> None:
    """After each evaluation of a session, at host ``h``: share D = the sum of its clients'
    positives' 2 x mid-ranks (``ranks``: each client's, from the evaluation) with the computing
    parties, which keep it in shares (:func:`party_keep`); never opened."""
    d = sum(int(np.asarray(r)[np.asarray(y).astype(bool)].sum()) for r, y in zip(ranks, labels))
    sharing = HostSharing(h, len(links))
    for p, link in enumerate(links):
        if p == sharing.corrector:
            link.send_array(CH_KEEP, sharing.correction(np.array([[d]], dtype=np.int64), "kept"))
        else:
            link.send_obj(CH_KEEP, {"seed": sharing.seeds[p].hex()})


def host_session_select(links, h: int, epochs: list[int], epsilon: float, honest: int, total: int, noise_keys,
                        release=None) -> None:
    """A session's selection at host ``h``: announce it with fresh seeds, share the sum of its
    clients' noise shares for the ``epochs`` (one per candidate, each from its client's key).

    ``release``: ``(release_epsilon, mechanism, first, kept)`` to release the selected
    evaluation's DP AUC too: the server names the selected evaluation (the selection's output),
    and the host shares its clients' statistics of it (:func:`release_statistics`
    with ``mechanism`` at ``release_epsilon``, fresh noise) from ``kept[e]``, that evaluation's
    ``(labels of each client, 2 x mid-ranks of the host's rows)``; opened to the server only."""
    from ..dp.selection import release_mechanism

    sharing = HostSharing(h, len(links))
    for p, link in enumerate(links):
        link.send_obj(CH_HELLO, {"select": list(epochs), "epsilon": epsilon, "honest": honest, "total": int(total),
                                 "release": None if release is None else float(release[0]),
                                 "seed": sharing.seeds[p].hex() if p in sharing.seeds else None})
    noise = np.zeros(len(epochs), dtype=np.int64)
    for key in noise_keys:
        noise += noise_share(ClientRngs.from_key(key).stream("select"), len(epochs), total, epsilon, honest)
    links[sharing.corrector].send_array(CH_KEEP, sharing.correction(noise.reshape(1, -1), "selection noise"))
    if release is None:
        return
    release_epsilon, mechanism, first, kept = release
    e = links[0].recv_obj(CH_KEEP).get("release")
    if e not in epochs:
        raise ProtocolError(f"the server asked for the release of evaluation {e!r}, not among {epochs}")
    labels, twice = kept[e]
    datas = [ClientData(np.zeros(len(y), dtype=np.float32), y) for y in labels]
    keys = list(noise_keys) if len(noise_keys) == len(datas) else [None] * len(datas)
    release_statistics(datas, first, keys, [release_mechanism(mechanism, release_epsilon)],
                       np.asarray(twice, dtype=np.int64), total, sharing, links)
