"""The compiled kernels (secure_auc.mpc.kernels) against the numpy/torch reference code they
replace, bit for bit, over random shares, every digit width (1 to 4 bits), every party's
rank, round 0 (no tau) and later rounds; where the compiled code is cached; that a party compiles nothing once warmed up; and the threads
option in each place it is given (API, command line, deployment file)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from secure_auc.mpc import MPC_OPTIONS, kernels
from secure_auc.mpc.sort import radix
from secure_auc.validation import InputError


@pytest.fixture(scope="module", autouse=True)
def warm():
    kernels.warm_up()


def _shares(rng, shape):
    return rng.integers(-2**31, 2**31, shape, dtype=np.int64).astype(np.int32)


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_digit_rounds_are_bit_identical_to_the_reference(d):
    rng = np.random.default_rng(d)
    v = 1 << d
    for rank, m, later in ((0, 1, False), (1, 2, True), (2, 5, True), (0, 257, True), (1, 64, False),
                           (2, 130, False)):
        e, e2, b, f = (_shares(rng, (v - 1, m)) for _ in range(4))
        c, zero = _shares(rng, (1, m)), _shares(rng, m)
        u = rng.integers(0, v, m)
        tau = rng.permutation(m) if later else None
        inv = np.argsort(tau) if later else None
        tt, ti = (torch.from_numpy(tau), torch.from_numpy(inv)) if later else (None, None)
        et, ut = torch.from_numpy(e), torch.from_numpy(u)
        # among 2: the differences to open and D'_0, then sigma from the opened f
        base = radix.shuffled_bases(radix.onehot_rows(et, ut, rank), tt, rank, ti)
        d_rot = radix.rotate_rows(base, ut)
        diff = d_rot[1:] - d_rot[0]
        diff -= torch.from_numpy(b)
        got_diff, got_d0 = kernels.beaver_round_bases(e, u, tau, b, rank)
        assert np.array_equal(got_diff, diff.numpy()) and np.array_equal(got_d0, d_rot[0].numpy())
        want = radix.digit_permutation(d_rot, et, torch.from_numpy(c), torch.from_numpy(f), rank)
        assert np.array_equal(kernels.beaver_sum(got_d0, e, f, c), want.numpy())
        # among 3: sigma from the two replicated components, with the sharing of zero
        want = radix.replicated_digit_permutation((et, torch.from_numpy(e2)), ut, tt, rank, torch.from_numpy(zero), ti)
        assert np.array_equal(kernels.replicated_round(e, e2, u, tau, rank, zero), want.numpy())
        # the counts alone (one component's), against the reference's sorted bases
        counts, offsets = kernels.sorted_counts(e, u, inv, 1 if rank == 0 else 0)
        ind = radix.onehot_rows(et, ut, rank)
        if later:
            ind = radix.scatter_rows(ind, ti)
        bases = radix.sorted_bases(ind, rank)
        r0 = 1 if rank == 0 else 0
        assert np.array_equal((counts.T.astype(np.int64) + offsets[:, None] - r0).astype(np.int32), bases[1:].numpy())


def test_the_opened_window_splits_into_tau_u_and_the_inverse():
    rng = np.random.default_rng(5)
    for m, d in ((1, 1), (3, 2), (1000, 2), (1024, 4)):
        k = max(1, (m - 1).bit_length())
        tau, u = rng.permutation(m), rng.integers(0, 1 << d, m)
        opened = torch.from_numpy((tau + (u << k)).astype(np.int32))
        got_tau, got_u, got_inv = kernels.split_opened(opened.numpy(), k)
        assert np.array_equal(got_tau, tau) and np.array_equal(got_u, (opened >> k).numpy())
        assert np.array_equal(got_inv, radix.inverse_permutation(torch.from_numpy(tau)).numpy())
        assert np.array_equal(kernels.inverse_permutation(tau), got_inv)
        if m > 1:  # a repeated destination, or one out of range, is refused
            bad = tau.copy()
            bad[0] = bad[1]
            assert kernels.split_opened((bad + (u << k)).astype(np.int32), k)[2] is None
            assert kernels.inverse_permutation(bad) is None
            bad[0] = m
            assert kernels.inverse_permutation(bad) is None


def test_the_cache_is_in_a_user_folder_and_nothing_compiles_after_the_warm_up(tmp_path, monkeypatch):
    import numba

    site = kernels.__file__.rsplit("/secure_auc/", 1)[0]
    assert numba.config.CACHE_DIR == kernels.cache_dir() and not kernels.cache_dir().startswith(site)
    assert kernels._onehot_rows._cache._cache_path.startswith(kernels.cache_dir())
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert kernels.cache_dir() == str(tmp_path / "secure-auc" / "numba")
    dispatchers = [f for f in vars(kernels).values() if isinstance(f, numba.core.registry.CPUDispatcher)]
    before = {f.__name__: len(f.signatures) for f in dispatchers}
    assert all(before.values())  # every kernel was compiled (or loaded) by the warm-up
    rng = np.random.default_rng(3)
    m = 3000
    for d in (1, 2, 4):  # a round as the protocol runs it: views of the dealer's block, torch's int64 u and tau
        v = 1 << d
        block = torch.from_numpy(_shares(rng, (3 * v - 1, m)))
        tau = torch.from_numpy(rng.permutation(m))
        u = torch.from_numpy(rng.integers(0, v, m))
        diff, d0 = kernels.beaver_round_bases(block[1:v].numpy(), u.numpy(), tau.numpy(), block[v : 2 * v - 1].numpy(),
                                              1)
        kernels.beaver_sum(d0, block[1:v].numpy(), diff, block[2 * v - 1 :].numpy())
        kernels.replicated_round(block[1:v].numpy(), block[v : 2 * v - 1].numpy(), u.numpy(), None, 2,
                                 block[0].numpy())
    assert {f.__name__: len(f.signatures) for f in dispatchers} == before


def test_threads_are_an_option_everywhere(tmp_path, capsys, monkeypatch):
    from secure_auc.cli import main as cli

    assert "threads" in MPC_OPTIONS
    assert kernels.set_threads(2) == 2 and torch.get_num_threads() == 1  # the kernels' threads; torch's would spin
    monkeypatch.setenv("SECURE_AUC_KERNELS", "numpy")  # the reference code: its arithmetic is torch's
    assert kernels.set_threads(2) == 2 and torch.get_num_threads() == 2
    monkeypatch.delenv("SECURE_AUC_KERNELS")
    assert kernels.set_threads(1) == 1 and torch.get_num_threads() == 1
    assert kernels.set_threads(None) == kernels.default_threads()
    for bad in (0, -1, "two", 1.5, True):
        with pytest.raises(InputError, match="threads per computing party must be a whole number at least 1"):
            kernels.check_threads(bad)
    assert cli(["evaluate", "--samples", "100", "--protocol", "mpc", "--threads", "0", "--mechanism", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--threads" in err[0] and "Traceback" not in err[0]
    assert cli(["evaluate", "--samples", "100", "--protocol", "plain", "--threads", "2", "--mechanism", "none"]) == 2
    assert "threads" in capsys.readouterr().err


def test_threads_in_the_deployment_file(tmp_path):
    from secure_auc.deploy import load_config

    from tests.test_deploy_config import CONFIG

    path = tmp_path / "deploy.toml"
    path.write_text(CONFIG.replace("timeout = 30", "timeout = 30\nthreads = 4"))
    assert load_config(path).threads == 4
    path.write_text(CONFIG)
    assert load_config(path).threads is None
    for bad in ("0", "\"four\"", "2.5"):
        path.write_text(CONFIG.replace("timeout = 30", f"timeout = 30\nthreads = {bad}"))
        with pytest.raises(InputError, match="deployment.threads must be a whole number at least 1"):
            load_config(path)


def _threads_job(rank):
    import numba

    return torch.get_num_threads(), numba.get_num_threads(), kernels.enabled()


def test_a_launched_party_gets_its_threads():
    import numba

    from secure_auc.mpc.launch import spawn_parties

    want = min(2, numba.config.NUMBA_NUM_THREADS)  # numba's pool has as many threads as the machine's cores
    done = spawn_parties(_threads_job, {0: (), 1: ()}, 2, provider="tfp", timeout=60, deadline=120, threads=2)
    assert [done[r] for r in (0, 1)] == [(1, want, True)] * 2  # torch keeps one thread: the kernels get them
    with pytest.raises(InputError, match="threads"):
        spawn_parties(_threads_job, {0: (), 1: ()}, 2, provider="tfp", timeout=60, threads=0)


def test_a_process_that_ran_the_kernels_can_still_fork():
    import os

    import numba

    kernels.warm_up()
    assert numba.threading_layer() == "workqueue"  # GNU OpenMP's pool aborts a forked child
    pid = os.fork()
    if pid == 0:  # the child runs a parallel kernel too
        e = np.ones((3, 50_000), np.int32)
        ok = kernels.beaver_round_bases(e, np.zeros(50_000, np.int64), None, e, 0)[1][0] == -3
        os._exit(0 if ok else 1)
    assert os.waitpid(pid, 0)[1] == 0


_ABRUPT_PARTY = '''
import multiprocessing as mp
import os


def party():
    from secure_auc.mpc import kernels

    kernels.warm_up()  # runs the parallel kernels: numba starts its thread pool, under its start-up lock
    os._exit(0)  # as a party stopped by a signal or a fault: no finalizer runs


if __name__ == "__main__":
    p = mp.get_context("forkserver").Process(target=party)  # as the local launcher starts a party
    p.start()
    p.join()
    assert p.exitcode == 0, p.exitcode
'''


def test_a_party_that_ends_abruptly_leaves_no_semaphore_behind(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "abrupt_party.py"
    script.write_text(_ABRUPT_PARTY)
    env = os.environ | {"PYTHONPATH": kernels.__file__.rsplit("/secure_auc/", 1)[0]}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    # a named semaphore of numba's would be reported by the resource tracker on stderr ("leaked semaphore")
    assert (done.returncode, done.stderr) == (0, "")
