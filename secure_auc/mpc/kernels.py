r"""Compiled kernels for the rank step's local work (numba, from its wheel: no compiler).

A digit round's local work (what the reference code of :mod:`.sort.radix` does in many
numpy/torch passes: the one-hot's rotation by the opened u, the move to the order sorted
so far, the prefix counts, the bases, their move back and rotation, the products) runs in
a few compiled passes, with the same arithmetic: every value is reduced modulo
:math:`2^{32}` exactly as the wrapping int32 operations reduce it, so the results are
bit-identical (``tests/mpc/test_kernels.py`` checks each kernel against the reference
over random shares, every digit width and every party).  The passes over the rows in
order are separate from the random moves by tau: a row (the indicators, or the bases, of
one or two components, V int32 words each) moves as whole int64 words in a tight loop
of its own, so that many loads and stores are in flight; the indicators go to the
sorted order by a scatter by tau, so tau^-1 is never formed.  The loops over the digit
values have a length numba compiles in (:func:`_consts`), and are unrolled.

The shuffles' one-word rows move by a compiled gather or scatter (:func:`permute_words`),
and the dealer's one-hot and replicated corrections are one pass each
(:func:`onehot_correction`, :func:`rep_correction`); the low-byte codecs are left to numpy.

Compiled code is cached per machine in a folder the user can write
(:func:`cache_dir`: ``$NUMBA_CACHE_DIR``, else ``$XDG_CACHE_HOME/secure-auc/numba``, else
``~/.cache/secure-auc/numba``), never next to the installed package.  A computing party
compiles (or loads from the cache) every kernel in :func:`warm_up`, called when it starts,
before it joins the others, so no party compiles while the others wait for it.

``SECURE_AUC_KERNELS=numpy`` selects the reference code instead (:func:`enabled`), to
measure both in one run.  :func:`set_threads` sets the threads of the parallel kernels: a
computing party's ``threads`` option, by default the cores the process may use
(:func:`default_threads`).  Torch then keeps one thread: with the kernels its share of the
work is small, and its idle threads spin (on 16 cores, 2^20 scores among 2 with 4 threads per
party: 9.0 CPU s at the busiest party with torch's 4 threads, 3.5 with one, and the rank step
no slower).  The reference code's arithmetic is torch's, so there torch gets the threads.

Examples
--------
The stable sort destinations of the digits 1, 0, 1, 0 (one party, whose shares are the
values), as :func:`.sort.radix.sorted_bases` gives them:

>>> import numpy as np
>>> from secure_auc.mpc import kernels
>>> e = np.array([[1, 0, 1, 0]], dtype=np.int32)  # the one-hot of r mod 2 (u = 0: I_1 = E_1)
>>> u = np.zeros(4, dtype=np.int64)
>>> counts, offsets = kernels.sorted_counts(e, u, None, 1)
>>> offsets.tolist()  # O_1 = T_0 = 2 zeros before the ones
[2]
>>> (counts[:, 0] + offsets[0] - 1).tolist()  # B_1 = O_1 + C_1 - 1: where each 1 goes
[2, 2, 3, 3]
>>> kernels.default_threads() >= 1
True
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from ..compile_cache import cache_dir, enabled, use_cache
from .threads import check_threads, default_threads

__all__ = ["cache_dir", "enabled", "warm_up", "set_threads", "check_threads", "default_threads", "sorted_counts",
           "beaver_round_bases", "beaver_sum", "replicated_round", "split_window", "split_opened", "inverse_permutation",
           "permute_words", "keyed_rows", "sorted_rows", "onehot_correction", "rep_correction"]


use_cache()  # the user's cache folder, before the kernels below are defined

import numba  # noqa: E402
from numba import njit, prange  # noqa: E402

if not os.environ.get("NUMBA_THREADING_LAYER"):
    # numba's own pool: unlike GNU OpenMP's (torch's libgomp, numba's default here), a process that has
    # run a parallel kernel can still fork (multiprocessing's fork start method); it takes one caller at a
    # time, hence the lock of warm_up (a launcher may start parties from several threads)
    numba.config.THREADING_LAYER = "workqueue"


def _unnamed_start_lock() -> None:
    """Give numba's start-up lock of its thread pool as an unnamed semaphore.

    When the process's start method is ``forkserver`` (a party forked by the launcher's fork
    server: any method with "fork" in its name), numba creates that lock with the
    process's multiprocessing context: a *named* POSIX semaphore, registered with the
    launcher's resource tracker and unlinked only at a normal exit.  A party stopped by a
    signal, or ending with ``os._exit``, then leaves it behind, and the tracker prints
    "There appear to be N leaked semaphore objects" on the launcher's stderr.  A lock of
    the ``fork`` context is unlinked when created (nothing to leak, nothing registered) and
    still orders the pool's start among the processes forked after it, which is all the
    lock is for."""
    import multiprocessing

    from numba.np.ufunc import parallel

    if getattr(parallel, "_backend_init_process_lock", False) is None:
        try:
            parallel._backend_init_process_lock = multiprocessing.get_context("fork").RLock()
        except (OSError, ValueError):  # no /dev/shm, or no fork: numba's own choice stands
            pass


_unnamed_start_lock()

_JIT = {"cache": True, "nogil": True}
_PAR = {"cache": True, "nogil": True, "parallel": True}


def set_threads(threads: int | None = None) -> int:
    """Threads for the parallel kernels (``None``: :func:`default_threads`), torch keeping one
    (the reference code's torch all of them, :func:`enabled`); returns the count set."""
    import torch

    n = default_threads() if threads is None else check_threads(threads)
    n_numba = min(n, numba.config.NUMBA_NUM_THREADS)  # numba's pool is sized at its start
    numba.set_num_threads(n_numba)
    torch.set_num_threads(n if not enabled() else 1)  # torch's idle threads spin: CPU for nothing
    return n


# ----------------------------------------------------------------- digit rounds


_CHUNK = 4096  # rows per chunk of the parallel loops


def _consts(v: int, comps: int = 1) -> tuple[tuple, tuple]:
    """Tuples whose lengths numba compiles in as constants, V - 1 and the components: the
    loops over the digit values are then unrolled (a loop whose length is known only at
    run time took twice as long)."""
    return (0,) * (v - 1), (0,) * comps


_NO_TAU = np.zeros(0, np.int32)


@njit(**_PAR)
def _onehot_rows(e0, e1, u, r0, out, totals, vt, ct):
    """Shuffled order: each component c's indicators I_v = E_{(v - u) mod V}, v >= 1
    (E_0 = r0[c] - sum_t E_t), from its E (``e0``, and ``e1`` with two components: (V - 1, M)),
    into out[j, c V + v] (column c V is left for the bases); each chunk's column sums go to
    totals[chunk] (int64, exact)."""
    v1 = len(vt)
    two = len(ct) == 2
    v = v1 + 1
    mask = v1
    m = u.shape[0]
    for chunk in prange((m + _CHUNK - 1) // _CHUNK):
        lo = chunk * _CHUNK
        hi = min(m, lo + _CHUNK)
        full = np.empty(v, np.int64)
        acc = np.zeros(2 * v1, np.int64)
        for j in range(lo, hi):
            uu = u[j]
            s = np.int64(r0[0])
            for t in range(v1):
                x = np.int64(e0[t, j])
                full[t + 1] = x
                s -= x
            full[0] = s
            for t in range(v1):
                y = full[(t + 1 - uu) & mask]
                out[j, 1 + t] = y
                acc[t] += y
            if two:  # the second component (a branch numba compiles in or out)
                s = np.int64(r0[1])
                for t in range(v1):
                    x = np.int64(e1[t, j])
                    full[t + 1] = x
                    s -= x
                full[0] = s
                for t in range(v1):
                    y = full[(t + 1 - uu) & mask]
                    out[j, v + 1 + t] = y
                    acc[v1 + t] += y
        for t in range(totals.shape[1]):
            totals[chunk, t] = acc[t]


@njit(**_PAR)
def _scatter_rows(x, index, out, wt):
    """out[index[j]] = x[j] for rows of len(wt) int64 words (a constant to numba: the copy
    is unrolled): a tight loop of its own, so that many stores are in flight (fused into
    the loop that computes the rows it took twice as long)."""
    w = len(wt)
    for j in prange(index.shape[0]):
        i = index[j]
        for c in range(w):
            out[i, c] = x[j, c]


def _offsets(totals: np.ndarray, m: int, r0: int) -> np.ndarray:
    """O_v, v = 1..V-1 (int64, exact mod 2^32): T_0 + ... + T_{v-1}, T_0 = r0 M - sum T_v."""
    t0 = r0 * m - int(totals.sum())
    return (t0 + np.cumsum(totals) - totals).astype(np.int64)


def _scattered(es, u, tau, r0s):
    """(out, offsets): out (M, comps V) int32 holding each component's indicators in the
    order sorted so far (:func:`_onehot_rows`, then moved by tau: out[tau[j]] = row j;
    ``tau`` None: the identity), and each component's O_1..O_{V-1}."""
    v1, m = es[0].shape
    nc = len(es)
    vt, ct = _consts(v1 + 1, nc)
    rows = np.empty((m, nc * (v1 + 1)), np.int32)
    totals = np.empty(((m + _CHUNK - 1) // _CHUNK, nc * v1), np.int64)
    _onehot_rows(np.ascontiguousarray(es[0], dtype=np.int32), np.ascontiguousarray(es[-1], dtype=np.int32),
                 np.ascontiguousarray(u, dtype=np.int32), np.asarray(r0s, dtype=np.int64), rows, totals, vt, ct)
    sums = totals.sum(axis=0)
    offsets = [_offsets(sums[c * v1 : (c + 1) * v1], m, r0) for c, r0 in enumerate(r0s)]
    if tau is None:
        return rows, offsets
    out = np.empty_like(rows)
    w = rows.shape[1] // 2  # V even: each row is V / 2 (or V) int64 words
    _scatter_rows(rows.view(np.int64), np.ascontiguousarray(tau, dtype=np.int32), out.view(np.int64), (0,) * w)
    return out, offsets


def sorted_counts(e, u, inverse, r0: int):
    """Counts (M, V - 1) int32 in the order sorted so far (row k: shuffled row inverse[k])
    and the offsets O_1..O_{V-1} (int64) from the shares ``e`` (V - 1, M) int32 of the
    one-hot in shuffled order, the opened ``u`` (M,) and ``inverse`` = tau^-1 (None:
    round 0); ``r0``: 1 for the party (component) that adds the public terms."""
    tau = None if inverse is None else inverse_permutation(inverse)
    out, (offsets,) = _scattered([e], u, tau, [r0])
    counts = np.cumsum(out[:, 1:], axis=0, dtype=np.int64).astype(np.int32)
    return counts, offsets


@njit(**_JIT)
def _bases_sorted(s, offsets, r0, vt):
    """In the order sorted so far, in place: s[k, v] = B_v = O_v + C_{k,v} - r0 (v >= 1; C the
    inclusive prefix counts of the indicators s[:, v]) and s[k, 0] = B_0 = r0 k - sum_v C_{k,v}."""
    v1 = len(vt)
    m = s.shape[0]
    acc = np.zeros(v1, np.int64)
    for k in range(m):
        tot = np.int64(0)
        for t in range(v1):
            acc[t] += s[k, t + 1]
            tot += acc[t]
            s[k, t + 1] = acc[t] + offsets[t] - r0
        s[k, 0] = r0 * k - tot


@njit(**_PAR)
def _gather_rows(x, index, out, wt):
    """out[j] = x[index[j]] for rows of len(wt) int64 words (a constant to numba: the copy
    is unrolled): a tight loop, many loads in flight."""
    w = len(wt)
    for j in prange(index.shape[0]):
        i = index[j]
        for c in range(w):
            out[j, c] = x[i, c]


@njit(**_PAR)
def _beaver_diffs(g, u, b, diff, d0, vt):
    """Shuffled order, from row j's bases g[j] (gathered by tau): diff[t, j] =
    B_{(t + 1 + u) mod V} - B_{u mod V} - b[t, j], d0[j] = B_{u mod V}."""
    v1 = len(vt)
    mask = v1
    for j in prange(u.shape[0]):
        uu = u[j]
        z = np.int64(g[j, uu & mask])
        d0[j] = z
        for t in range(v1):
            diff[t, j] = np.int64(g[j, (t + 1 + uu) & mask]) - z - np.int64(b[t, j])


def _gather_by(s: np.ndarray, tau) -> np.ndarray:
    """s[tau] for an (M, 2w) int32 array (None: s), each row moved as w int64 words."""
    if tau is None:
        return s
    out = np.empty_like(s)
    w = s.shape[1] // 2
    _gather_rows(s.view(np.int64), np.ascontiguousarray(tau, dtype=np.int32), out.view(np.int64), (0,) * w)
    return out


def beaver_round_bases(e, u, tau, b, rank: int):
    """Among 2 parties (Beaver's products): the differences to open, (V - 1, M) int32
    D'_t - D'_0 - b_t (t >= 1), and D'_0 (M,) int32, as :func:`.sort.radix.onehot_rows`,
    :func:`.sort.radix.shuffled_bases` and :func:`.sort.radix.rotate_rows` give them
    (``tau`` None in round 0).  The indicators are scattered to the order sorted so far by
    tau, counted there into the bases (one row of V words each), and the rows gathered
    back by tau."""
    r0 = 1 if rank == 0 else 0
    v1, m = e.shape
    s, (offsets,) = _scattered([e], u, tau, [r0])
    vt, _ = _consts(v1 + 1)
    _bases_sorted(s, offsets, r0, vt)
    g = _gather_by(s, tau)
    diff = np.empty((v1, m), np.int32)
    d0 = np.empty(m, np.int32)
    _beaver_diffs(g, np.ascontiguousarray(u, dtype=np.int32), np.ascontiguousarray(b, dtype=np.int32), diff, d0, vt)
    return diff, d0


@njit(**_PAR)
def _beaver_sum(d0, e, f, c, out, vt):
    v1 = len(vt)
    for j in prange(d0.shape[0]):
        s = np.int64(d0[j]) + np.int64(c[j])
        for t in range(v1):
            s += np.int64(e[t, j]) * np.int64(f[t, j])
        out[j] = s


def beaver_sum(d0, e, f, c):
    """sigma in shuffled order, D'_0 + sum_t f_t E_t + c (int32), as
    :func:`.sort.radix.digit_permutation`."""
    out = np.empty(d0.shape[0], np.int32)
    vt, _ = _consts(e.shape[0] + 1)
    _beaver_sum(np.ascontiguousarray(d0, dtype=np.int32), np.ascontiguousarray(e, dtype=np.int32),
                np.ascontiguousarray(f, dtype=np.int32), np.ascontiguousarray(c, dtype=np.int32).reshape(-1), out, vt)
    return out


@njit(**_JIT)
def _rep_sorted(s, off0, off1, r00, r01, out, vt):
    """In the order sorted so far, one pass over both components' indicators (s[:, 1..V-1] and
    s[:, V+1..2V-1], :func:`_scattered`): their counts (prefix sums), the bases
    B_v - B_0 (v >= 1; B_0 = r0 k - sum C_v), and sigma = B_0^(own) + sum_v I^own_v
    (D^own_v + D^next_v) + I^next_v D^own_v, as :func:`.sort.radix.replicated_sum_of_products`."""
    m = s.shape[0]
    v1 = len(vt)
    v = v1 + 1
    acc0 = np.zeros(v1, np.int64)
    acc1 = np.zeros(v1, np.int64)
    for k in range(m):
        s0 = np.int64(0)
        s1 = np.int64(0)
        for t in range(v1):
            acc0[t] += s[k, 1 + t]
            acc1[t] += s[k, v + 1 + t]
            s0 += acc0[t]
            s1 += acc1[t]
        z0 = r00 * k - s0
        z1 = r01 * k - s1
        total = z0
        for t in range(v1):
            y0 = np.int32(acc0[t] + off0[t] - r00 - z0)  # B_v - B_0, mod 2^32 as the int32 rows
            y1 = np.int32(acc1[t] + off1[t] - r01 - z1)
            total += np.int64(s[k, 1 + t]) * (np.int64(y0) + np.int64(y1)) + np.int64(s[k, v + 1 + t]) * np.int64(y0)
        out[k] = total


@njit(**_PAR)
def _gather_add(x, index, has_index, add, out):
    """out[j] = x[index[j]] + add[j] (int32, wrapping)."""
    for j in prange(out.shape[0]):
        i = np.int64(index[j]) if has_index else np.int64(j)
        out[j] = np.int64(x[i]) + np.int64(add[j])


def replicated_round(e_own, e_next, u, tau, rank: int, zero):
    """Among 3 parties: party ``rank``'s additive share (M,) int32 of sigma in shuffled order,
    as :func:`.sort.radix.replicated_digit_permutation` gives it, from its components
    ``e_own`` = E^(rank) and ``e_next`` = E^(rank+1), each (V - 1, M) int32 (``tau`` None
    in round 0).  Three passes: both components' indicators scattered to the order sorted
    so far by tau, sigma there, its gather back by tau."""
    r00, r01 = (1 if rank == 0 else 0), (1 if (rank + 1) % 3 == 0 else 0)
    v1, m = e_own.shape
    s, (off0, off1) = _scattered([e_own, e_next], u, tau, [r00, r01])
    vt, _ = _consts(v1 + 1)
    sigma = np.empty(m, np.int32)
    _rep_sorted(s, off0, off1, r00, r01, sigma, vt)
    out = np.empty(m, np.int32)
    _gather_add(sigma, _NO_TAU if tau is None else np.ascontiguousarray(tau, dtype=np.int32), tau is not None,
                np.ascontiguousarray(zero, dtype=np.int32).reshape(-1), out)
    return out


@njit(**_JIT)
def _split_window(opened, k, tau, u, seen):
    """tau and u from the opened words in one pass, checking that tau is a permutation (every
    destination in range and none twice: m distinct values below m)."""
    m = opened.shape[0]
    low = (np.int64(1) << k) - 1
    for j in range(m):
        seen[j] = 0
    for j in range(m):
        x = np.int64(opened[j]) & np.int64(0xFFFFFFFF)
        t = x & low
        if t >= m or seen[t]:
            return False
        seen[t] = 1
        tau[j] = t
        u[j] = x >> k
    return True


def split_window(opened, k: int):
    """(tau, u), both int32: tau = opened mod 2^k, u = opened >> k (the opened word read as
    unsigned 32 bits, as the reference's int32 ``>>`` of a window below 2^31); None when
    tau is not a permutation."""
    o = np.ascontiguousarray(opened, dtype=np.int32)
    m = o.shape[0]
    tau, u = np.empty(m, np.int32), np.empty(m, np.int32)
    return (tau, u) if _split_window(o, k, tau, u, np.empty(m, np.uint8)) else None


def split_opened(opened, k: int):
    """tau, u (as :func:`split_window`, int64) and tau^-1 (int64); ``None`` for tau^-1 when
    tau is not a permutation."""
    got = split_window(opened, k)
    if got is None:
        o = np.ascontiguousarray(opened, dtype=np.int32).astype(np.int64) & 0xFFFFFFFF
        return o & ((1 << k) - 1), o >> k, None
    tau, u = (a.astype(np.int64) for a in got)
    return tau, u, inverse_permutation(tau)


@njit(**_JIT)
def _inverse_permutation(t, out):
    m = t.shape[0]
    for j in range(m):
        out[j] = -1
    for j in range(m):
        x = t[j]
        if x < 0 or x >= m:
            return False
        out[x] = j
    for j in range(m):
        if out[j] < 0:
            return False
    return True


def inverse_permutation(tau):
    """tau^-1 (int64), or None when ``tau`` is not a permutation of 0..M-1."""
    t = np.ascontiguousarray(tau, dtype=np.int64)
    out = np.empty(t.shape[0], np.int64)
    return out if _inverse_permutation(t, out) else None


# ----------------------------------------------------------------- shuffles and the dealer


@njit(**_PAR)
def _take(x, p, out):
    for j in prange(p.shape[0]):
        out[j] = x[p[j]]


@njit(**_PAR)
def _put(x, p, out):
    for j in prange(p.shape[0]):
        out[p[j]] = x[j]


def permute_words(x: np.ndarray, p: np.ndarray, inverse: bool = False) -> np.ndarray:
    """x[p] (one word per row, int32 or int64), or with ``inverse`` the scatter out[p] = x,
    for a permutation ``p`` (int64) of the rows, as :func:`.primitives.shuffle.permute_rows`."""
    out = np.empty_like(x)
    (_put if inverse else _take)(x, np.ascontiguousarray(p, dtype=np.int64), out)
    return out


@njit(**_PAR)
def _onehot_correction(shares, q, out, vt):
    """The dealer's correction of party q's one-hot block (:func:`.primitives.dealer.triple_correction`):
    for r = sum_p r_p, t = r mod V, E_t = [t' = t] (t' = 1..V-1): out[t' - 1] = E_t' - sum_{p != q} E_t',p
    and out[V - 1] = sum_t' E_t' b_t' - sum_{p != q} c_p, b = sum_p b_p (int32, wrapping)."""
    v1 = len(vt)
    v = v1 + 1
    mask = v1
    w = len(shares)
    for j in prange(out.shape[1]):
        r = np.int64(0)
        crest = np.int64(0)
        for p in range(w):
            r += shares[p][0, j]
            if p != q:
                crest += shares[p][2 * v - 1, j]
        t = r & mask
        csum = np.int64(0)
        for tt in range(v1):
            b = np.int64(0)
            rest = np.int64(0)
            for p in range(w):
                b += shares[p][v + tt, j]
                if p != q:
                    rest += shares[p][1 + tt, j]
            if t == tt + 1:
                out[tt, j] = 1 - rest
                csum += b
            else:
                out[tt, j] = -rest
        out[v1, j] = csum - crest


@njit(**_JIT)
def _keyed_rows(keys, out):
    for j in range(keys.shape[0]):
        out[j] = (np.uint64(keys[j]) << np.uint64(32)) | np.uint64(j)


def keyed_rows(keys: np.ndarray) -> np.ndarray:
    """(M,) uint64 words ``key << 32 | row`` from (M,) uint32 ``keys`` (M <= 2^32), as
    :func:`.primitives.shuffle.sort_permutation` sorts them; one pass."""
    out = np.empty(keys.shape[0], np.uint64)
    _keyed_rows(np.ascontiguousarray(keys, dtype=np.uint32), out)
    return out


@njit(**_JIT)
def _sorted_rows(words, p, runs):
    """p[j] = the row of sorted word j (``p`` may be ``words`` itself, viewed as int64: each
    word is read before its slot is written); runs: the (first, last) positions of each run
    of equal keys (two or more rows), flat; returns the number of runs."""
    m = words.shape[0]
    low = np.uint64(0xFFFFFFFF)
    sh = np.uint64(32)
    count = 0
    lo = 0
    prev = np.uint64(0)
    for j in range(m):
        w = words[j]
        key = w >> sh
        if j and key != prev:
            if j - 1 > lo:
                runs[2 * count] = lo
                runs[2 * count + 1] = j - 1
                count += 1
            lo = j
        prev = key
        p[j] = np.int64(w & low)
    if m - 1 > lo:
        runs[2 * count] = lo
        runs[2 * count + 1] = m - 1
        count += 1
    return count


def sorted_rows(words: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """From sorted ``key << 32 | row`` words (:func:`keyed_rows`, uint64): the rows in that
    order (int64, written over ``words``) and the (first, last) positions of every run of
    two or more equal keys; one pass."""
    words = np.ascontiguousarray(words, dtype=np.uint64)
    p = words.view(np.int64)
    runs = np.empty(words.shape[0] + 1, np.int64)  # at most m / 2 runs; pages never written are never touched
    count = _sorted_rows(words, p, runs)
    flat = runs[: 2 * count].tolist()
    return p, list(zip(flat[::2], flat[1::2]))


KERNEL_WORLDS = (2, 4)  # the numbers of parties whose one-hot corrections the warm-up compiles


def onehot_correction(shares: list, q: int) -> np.ndarray:
    """(V, n) int32: party ``q``'s corrected rows of a ``"onehot<d>"`` batch from every party's
    (2V, n) int32 block ``shares``, as :func:`.primitives.dealer.triple_correction` computes them."""
    v = shares[0].shape[0] // 2
    out = np.empty((v, shares[0].shape[1]), np.int32)
    _onehot_correction(tuple(np.ascontiguousarray(s, dtype=np.int32) for s in shares), q, out, _consts(v)[0])
    return out


@njit(**_PAR)
def _rep_correction(comps, component, out, vt):
    """E^(component) = onehot(r mod V) - the other components' E (:func:`.primitives.dealer.rep_correction`)."""
    v1 = len(vt)
    mask = v1
    w = len(comps)
    for j in prange(out.shape[1]):
        r = np.int64(0)
        for c in range(w):
            r += comps[c][0, j]
        t = r & mask
        for tt in range(v1):
            x = np.int64(1) if t == tt + 1 else np.int64(0)
            for c in range(w):
                if c != component:
                    x -= comps[c][1 + tt, j]
            out[tt, j] = x


def rep_correction(comps: list, component: int) -> np.ndarray:
    """(V - 1, n) int32: the corrected E rows of ``component`` from the three components'
    (V, n) int32 blocks (row 0 r^(c), rows 1.. E^(c)), as :func:`.primitives.dealer.rep_correction`."""
    v = comps[0].shape[0]
    out = np.empty((v - 1, comps[0].shape[1]), np.int32)
    _rep_correction(tuple(np.ascontiguousarray(c, dtype=np.int32) for c in comps), component, out, _consts(v)[0])
    return out


# ----------------------------------------------------------------- start-up


_WARM = threading.Lock()


def warm_up() -> float:
    """Compile (or load from the cache) every kernel for the types the rank step uses;
    returns the seconds it took.  Called by a computing party when it starts, before it
    joins the others."""
    start = time.perf_counter()
    if not enabled():
        return 0.0
    with _WARM:
        _warm_up()
    return time.perf_counter() - start


def _warm_up() -> None:
    m = 8
    rng = np.random.default_rng(0)
    for v in (2, 4, 8, 16):
        e = rng.integers(0, 2, (v - 1, m)).astype(np.int32)
        u = rng.integers(0, v, m).astype(np.int64)
        tau = rng.permutation(m).astype(np.int64)
        for t in (None, tau):
            d, d0 = beaver_round_bases(e, u, t, e, 0)
            beaver_sum(d0, e, d, d0)
            replicated_round(e, e, u, t, 0, d0)
    split_opened(np.arange(m, dtype=np.int32), 3)
    inverse_permutation(np.arange(m, dtype=np.int64))
    p = rng.permutation(m).astype(np.int64)
    for dtype in (np.int32, np.int64):
        for inverse in (False, True):
            permute_words(np.arange(m, dtype=dtype), p, inverse)
    words = keyed_rows(np.array([3, 1, 3, 0, 1, 2, 0, 5], np.uint32))
    words.sort()
    sorted_rows(words)
    for v in (2, 4, 8, 16):
        for world in KERNEL_WORLDS:  # the dealer's corrections: one-hot batches among 2 or 4, replicated among 3
            onehot_correction([rng.integers(0, 9, (2 * v, m)).astype(np.int32)] * world, 0)
        rep_correction([rng.integers(0, 9, (v, m)).astype(np.int32)] * 3, 1)
