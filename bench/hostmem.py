"""bench/hostmem.py: the host footprint the Python benchmarks sample, in one place.

footprint() is RssAnon + RssShmem + VmSwap of this process in bytes (the figure bench/gpu/common.c
samples too); Sampler is a `with` block that records the footprint before it and its peak while
it runs, read every 2 ms from a thread. The benchmarks beside this file import it (their folder
is on sys.path when they run as scripts)."""

import threading
import time


def footprint():
    total = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("RssAnon:", "RssShmem:", "VmSwap:")):
                total += int(line.split()[1]) * 1024
    return total


class Sampler:
    """The footprint before a block and its peak while the block runs."""

    def __enter__(self):
        self.before = self.peak = footprint()
        self.stop = threading.Event()
        self.th = threading.Thread(target=self._run)
        self.th.start()
        return self

    def _run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, footprint())
            time.sleep(0.002)

    def __exit__(self, *exc):
        self.stop.set()
        self.th.join()
        self.peak = max(self.peak, footprint())
        return False
