"""Input checks at the library boundary, with errors that name the problem."""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "InputError",
    "as_vector",
    "check_scores",
    "check_binary_labels",
    "check_epsilon",
    "check_delta",
    "check_fraction",
    "check_real",
    "check_timeout",
    "check_threads",
    "check_secret_seed",
    "check_run_numbers",
]


class InputError(ValueError):
    """Bad user input (a file, a column, a row or a parameter); the message says which.

    A :class:`ValueError`, so code that catches ``ValueError`` catches it too.

    Examples
    --------
    >>> from secure_auc import InputError, rank_auc
    >>> issubclass(InputError, ValueError)
    True
    >>> rank_auc([0, 2], [0.1, 0.9])
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: y_true[1] is 2: labels must be 0 or 1
    """


def as_vector(values, *, name: str) -> np.ndarray:
    """``values`` as a 1-D numpy array: torch tensors detached and moved to the CPU,
    pandas objects and lists converted, a column ``(n, 1)`` or a row ``(1, n)`` flattened.

    Examples
    --------
    >>> import numpy as np
    >>> from secure_auc.validation import as_vector
    >>> as_vector(np.array([[0.2], [0.7]]), name="scores")
    array([0.2, 0.7])
    >>> as_vector(np.zeros((2, 2)), name="client 1: scores")
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: client 1: scores must be one-dimensional (or one column), got shape (2, 2)
    """
    if hasattr(values, "detach") and hasattr(values, "cpu"):  # a torch tensor, maybe requiring grad or on a GPU
        values = values.detach().cpu().numpy()
    elif hasattr(values, "to_numpy"):  # pandas Series / one-column DataFrame
        values = values.to_numpy()
    arr = np.asarray(values)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    if arr.ndim != 1:
        raise InputError(f"{name} must be one-dimensional (or one column), got shape {arr.shape}")
    return arr


def check_scores(scores, *, name: str = "scores") -> np.ndarray:
    """Return ``scores`` as a 1-D float array (:func:`as_vector`); reject NaN and infinities."""
    arr = as_vector(scores, name=name)
    if arr.dtype.kind not in "fiub":
        raise InputError(f"{name} must be numeric, got dtype {arr.dtype}")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"{name}[{i}] is {arr[i].item()}: scores must be finite")
    else:
        if arr.dtype.kind in "iu" and arr.size:  # float64 holds integers exactly up to 2^53 only
            big = (arr > 1 << 53) | (arr < -(1 << 53)) if arr.dtype.kind == "i" else arr > np.uint64(1 << 53)
            if big.any():
                i = int(np.flatnonzero(big)[0])
                raise InputError(f"{name}[{i}] is {arr[i].item()}: integer scores beyond 2^53 in size would be "
                                 "rounded, creating ties the data does not have; rescale them")
        arr = arr.astype(np.float64)
    return arr


def check_binary_labels(labels, *, name: str = "labels") -> np.ndarray:
    """Return ``labels`` as a 1-D int8 array of 0/1 (:func:`as_vector`); reject anything else."""
    arr = as_vector(labels, name=name)
    if arr.dtype == bool:
        return arr.astype(np.int8)
    if arr.dtype.kind not in "fiu":
        raise InputError(f"{name} must be 0/1 or boolean, got dtype {arr.dtype}")
    bad = (arr != 0) & (arr != 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"{name}[{i}] is {arr[i].item()!r}: labels must be 0 or 1")
    return arr.astype(np.int8)


EPSILON_RANGE = (1e-6, 1e4)  # smaller budgets give noise beyond any float's precision; larger are no privacy


def check_epsilon(epsilon: float, *, name: str = "epsilon") -> float:
    """Return ``epsilon`` as a float in :data:`EPSILON_RANGE`; refuse anything else, inf and
    NaN included (the exact, non-private computation is the mechanism ``none``).

    Examples
    --------
    >>> from secure_auc.validation import check_epsilon
    >>> check_epsilon(2)
    2.0
    >>> check_epsilon(float("inf"))
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: epsilon must be a finite number between 1e-06 and 10000 (the mechanism 'none' is the exact, non-private computation), got inf
    """
    eps = check_real(epsilon, name)
    lo, hi = EPSILON_RANGE
    if math.isnan(eps) or math.isinf(eps):
        raise InputError(f"{name} must be a finite number between {lo:g} and {hi:g} (the mechanism 'none' is the "
                         f"exact, non-private computation), got {epsilon}")
    if not eps > 0:
        raise InputError(f"{name} must be > 0, got {epsilon}")
    if not (lo <= eps <= hi):
        why = ("smaller budgets need noise beyond the range of the released fixed-point statistics, "
               "which would give a meaningless estimate" if eps < lo else "larger ones protect nothing")
        raise InputError(f"{name} must be between {lo:g} and {hi:g} ({why}), got {epsilon}")
    return eps


def check_real(value, name: str) -> float:
    """``value`` as a float if it is a real number (not a bool, a string or None), else an InputError."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{name} must be a number, got {value!r}")
    return float(value)


def check_delta(delta: float, *, name: str = "delta") -> float:
    d = check_real(delta, name)
    if not (0.0 < d < 1.0):
        raise InputError(f"{name} must be in (0, 1), got {delta}")
    if d < 1e-300:
        raise InputError(f"{name} must be at least 1e-300, got {delta}")
    return d


def check_timeout(value, *, name: str = "--timeout") -> float:
    """Seconds to wait for another party: a finite number in (0, 86400]."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 < value <= 86400
    if not ok:
        raise InputError(f"{name} must be a number of seconds in (0, 86400], got {value!r}")
    return float(value)


def check_fraction(value: float, *, name: str) -> float:
    v = check_real(value, name)
    if not (0.0 < v < 1.0):
        raise InputError(f"{name} must be in (0, 1), got {value}")
    return v


SEED_BOUND = 2**256  # seeds of the clients' noise keys are below it
SECRET_SEED_MIN = 2**128  # a seed of an MPC run is at least this: more than 128 bits


def check_secret_seed(seed, *, name: str = "seed") -> int:
    """Return ``seed`` if it can seed the noise of a release that another party sees (the MPC
    protocol): an integer in [2^128, 2^256), as drawn by ``secrets.randbits(256)``.

    The server of an MPC run sees the noisy aggregate; the noise comes from the clients' keys,
    which a seed determines.  A small seed (1234, a date, any number someone might pick) can be
    found by trying candidates until the aggregate minus their noise is consistent, and gives
    the exact rank sum and P.  A value cannot show its entropy; refusing every seed below
    2^128 refuses the seeds people pick, and one drawn from 256 random bits is never refused.

    Examples
    --------
    >>> import secrets
    >>> from secure_auc.validation import check_secret_seed
    >>> s = secrets.randbits(256) | 1 << 255
    >>> check_secret_seed(s) == s
    True
    >>> check_secret_seed(1234)
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: seed must be a secret of more than 128 bits with the MPC protocol, ...
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InputError(f"{name} must be an integer, got {seed!r}")
    seed = int(seed)
    if not SECRET_SEED_MIN <= seed < SEED_BOUND:
        raise InputError(
            f"{name} must be a secret of more than 128 bits with the MPC protocol, an integer in [2^128, 2^256) "
            "(e.g. secrets.randbits(256) in Python): a smaller seed can be found by trying "
            "candidates against the noisy aggregate, which then gives the server the exact rank sum and P; got "
            + (str(seed) if seed < SECRET_SEED_MIN else f"a number of {seed.bit_length()} bits"))
    return seed


def check_run_numbers(*, data_seed=None, seed=None, secret: bool = False, timeout=None, port=None) -> None:
    """The numbers of a run's options (None: not given) that would fail, or overflow, only after
    the parties started: checked first, each refusal naming its command-line option.

    ``secret``: the run is an MPC run, whose seed must be a secret (:func:`check_secret_seed`).

    Examples
    --------
    >>> from secure_auc.validation import check_run_numbers
    >>> check_run_numbers(data_seed=0, timeout=60.0, port=0)
    >>> check_run_numbers(port=65535)
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: --port must be in 1..65534 (a local run uses it and the next port), or 0 for a free one, got 65535
    """
    if data_seed is not None and not 0 <= data_seed < 2**63:
        raise InputError(f"--data-seed must be between 0 and 2^63 - 1, got {data_seed}")
    if seed is not None:
        if not 0 <= seed < SEED_BOUND:
            raise InputError(f"--seed must be between 0 and 2^256 - 1, got {seed if seed < 0 else 'a larger number'}")
        if secret:
            check_secret_seed(seed, name="--seed")
    if timeout is not None:
        check_timeout(timeout)
    if port is not None and not 0 <= port <= 65534:
        raise InputError(f"--port must be in 1..65534 (a local run uses it and the next port), or 0 for a free one, got {port}")


def check_threads(value, where: str = "threads") -> int:
    """``value`` as a thread count (a whole number, at least 1), else :class:`InputError`
    naming ``where``.

    >>> check_threads("4")
    4
    >>> check_threads(0, "--threads")
    Traceback (most recent call last):
    ...
    secure_auc.validation.InputError: --threads: the threads per computing party must be a whole number at least 1, got 0
    """
    try:
        n = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        n = None
    if n is None or n < 1 or (isinstance(value, float) and value != n):
        raise InputError(f"{where}: the threads per computing party must be a whole number at least 1, got {value!r}")
    return n
