"""Canaries: party jobs that put a leak into the protocol, for the secrecy tests to catch.

Each is a drop-in for a launcher's job (``secure_auc.mpc.launch.run_party`` in the
clients layout, ``input_parties.computing_job`` / ``host_job`` in the helpers layout),
installed by the test with ``monkeypatch`` (the launcher looks the job up when it
starts the processes); the change happens inside the party's process only:

* :func:`identity_shuffle_job` / :func:`identity_shuffle_computing_job`: the radix
  sort's shuffles are the identity, so every opened permutation is the sort so far
  and the last one is every row's rank;
* :func:`unmasked_keys_host_job`: a client host sends its correction party its
  encoded keys unmasked;
* :func:`ranks_to_everyone_job`: the ranks are opened to every computing party
  (``open_all``) instead of each client's slice to that client only;
* :func:`one_report_opened_job`: the computing parties open client host 0's shares of
  the report vector to the server in place of the sum of every host's;
  :func:`one_client_report_opened_job` is the same leak with every client computing.

The reduce-based opening (CrypTen's ``get_plain_text(dst)``) is
``test_leakage._reduce_opening_job``.
"""

from __future__ import annotations

import numpy as np


class IdentityShuffle:
    """A stand-in for :class:`secure_auc.mpc.primitives.shuffle.Shuffle` that permutes
    nothing (and asks the dealer for nothing)."""

    def __init__(self, channel):
        self.ch = channel
        self.count = 0

    def prepare(self, *args, **kwargs):
        pass

    def forward(self, x, bits=None, carry=False):  # no forward_to_last: the sort then never carries
        self.count += 1
        return x.reshape(x.shape[0], -1).clone(), self.count - 1

    def inverse(self, y, instance, bits=None, carry=False):
        return y.reshape(y.shape[0], -1).clone()


def _identity_shuffles():
    import secure_auc.mpc.sort.radix as radix

    radix.Shuffle = IdentityShuffle


def identity_shuffle_job(rank, *args, **kwargs):
    from secure_auc.mpc.party import run_party

    _identity_shuffles()
    return run_party(rank, *args, **kwargs)


def identity_shuffle_computing_job(rank, *args, **kwargs):
    import secure_auc.mpc.input_parties as ip

    _identity_shuffles()
    return ip.computing_job(rank, *args, **kwargs)


def unmasked_keys_host_job(*args, **kwargs):
    """A client host whose correction for the keys block is the keys themselves."""
    import secure_auc.mpc.input_parties as ip
    from secure_auc.mpc.primitives.outside import HostSharing

    original = HostSharing.correction

    def correction(self, x, block):
        return np.array(x, dtype=np.int64) if block == "keys" else original(self, x, block)

    HostSharing.correction = correction
    return ip.host_job(*args, **kwargs)


def ranks_to_everyone_job(rank, *args, **kwargs):
    """The clients' ranks opened to every party, each client keeping its own slice."""
    import torch

    import secure_auc.mpc.ranks as ranks
    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.party import run_party
    from secure_auc.mpc.primitives.opening import open_all

    def open_to_owners(share, sizes, owners, *, shape=None, kind=None, bits=None):
        (opened,) = open_all([share.reshape(-1)], bits=bits)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        mine = [opened[bounds[k] : bounds[k + 1]] for k, owner in enumerate(owners) if owner == backend.rank()]
        return torch.cat(mine) if mine else None

    ranks.open_to_owners = open_to_owners
    return run_party(rank, *args, **kwargs)


def one_report_opened_job(rank, *args, **kwargs):
    """The statistics step opens, in the report's columns, host 0's shares alone (one
    client's noisy report vector) to the server instead of the sum over the hosts; the
    AUC's statistics are summed as before.  Deterministic: the same keys give the same
    opened values, whatever the shares."""
    import secure_auc.mpc.input_parties as ip
    from secure_auc.mpc.primitives.opening import open_to

    def open_statistics(links, shares, mine, mechanisms, dst=0, report_width=0):
        width = 2 * len(mechanisms) + int(report_width)
        corr = {h: links[h].recv_array(ip.CH_STATS, (1, width)) for h in mine}
        rows = shares.shares("statistics", [1] * len(links), width, corr)
        opened = rows.sum(dim=0)
        opened[2 * len(mechanisms):] = rows[0, 2 * len(mechanisms):]
        out = open_to(opened, dst)
        return None if out is None else out.numpy().astype(np.int64)

    ip.open_statistics = open_statistics
    return ip.computing_job(rank, *args, **kwargs)


def one_client_report_opened_job(rank, config, data, noise_key=None):
    """Clients layout: the statistics step opens, in the report's columns, client 0's shares
    alone (its noisy report vector) to the server instead of the sum over the clients; the
    AUC's statistics are summed as before."""
    import secure_auc.mpc.party as party
    import secure_auc.mpc.finish as finish
    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.primitives.inputs import SourceSharing
    from secure_auc.mpc.primitives.opening import open_to

    def sum_and_open(values, n, sources, *, dst):
        local = np.asarray(values, dtype=np.int64).reshape(n, 1) if backend.rank() in sources else None
        rows = SourceSharing([n] * len(sources), sources).share(local, 1, "statistics").reshape(len(sources), n)
        total = rows.sum(dim=0)
        w = 2 * len(config.mechanisms)
        total[w:] = rows[0, w:]
        opened = open_to(total, dst)
        return None if opened is None else opened.numpy().astype(np.int64)

    finish.sum_and_open = sum_and_open
    return party.run_party(rank, config, data, noise_key)
