"""What a running process has loaded, read from ``/proc/<pid>/maps`` while it runs: a client host
must never map torch's libraries nor numba's (and so never run CrypTen, which needs torch)."""

import threading
import time

HEAVY_LIBRARIES = ("/torch/", "/numba/", "/llvmlite/")  # the folders of torch's, numba's and LLVM's libraries


class MappedFiles:
    """The files mapped into process ``pid``, sampled every ``every`` seconds from a thread until
    the process ends: a library loaded at any time stays mapped, so the last sample (taken at most
    ``every`` seconds before the process ended) holds everything it loaded."""

    def __init__(self, pid: int, every: float = 0.05):
        self.pid, self.every = pid, every
        self.paths: set = set()
        self.samples = 0
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self):
        while True:
            try:
                with open(f"/proc/{self.pid}/maps") as f:
                    text = f.read()
            except OSError:  # ended and reaped
                return
            if not text:  # ended, not yet reaped
                return
            self.samples += 1
            self.paths |= {line.split(None, 5)[5] for line in text.splitlines() if len(line.split(None, 5)) == 6}
            time.sleep(self.every)

    def heavy(self, timeout: float = 5.0) -> list:
        """Once the process has ended: the heavy libraries it mapped at any sample (sorted)."""
        self._thread.join(timeout)
        assert self.samples > 0, f"process {self.pid} ended before its maps could be read"
        return sorted(p for p in self.paths if any(name in p for name in HEAVY_LIBRARIES))
