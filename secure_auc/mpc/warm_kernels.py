"""Loads the compiled kernels once in the local launcher's fork server.

The launcher's fork server imports this module with the others every party needs
(:data:`.forkserver.PRELOAD`): :func:`.kernels.warm_up` then loads every kernel from the
user's cache (compiling them into it first, once per machine, where it lacks them), and
each party forked from the server starts with them loaded, instead of spending about 1.5 CPU
seconds of its own on numba and the cache (a party's own :func:`.kernels.warm_up`, in
:func:`.comm.runtime.init_party`, then finds nothing left to do).  numba's ``workqueue``
thread pool, which the warm-up starts, is safe to fork.

Examples
--------
>>> from secure_auc.mpc import kernels, warm_kernels
>>> kernels.warm_up() < 1.0  # already done by the import: nothing left to compile or load
True
"""

from .kernels import warm_up
from .preload_begin import loaded

warm_up()
loaded()  # the last module the fork server preloads
