"""The shard sets' loads that weightmap.loading() starts ahead of the consumer (_loading.py).

transformers' from_pretrained opens a sharded checkpoint's shards one after the other, and
between two shards it does work of its own (building the model, assigning each shard's
parameters). Loading each shard only when it is asked for puts every load on that path; here,
the first open of any shard of a set (the files that a NAME.safetensors.index.json beside it
lists) starts a loader thread that loads every shard of the set, in the order transformers asks
for them (the sorted file names), up to LOADERS at a time, while the consumer goes on. When the consumer
then needs a shard's tensors, its handle takes over the model already loaded (or waits for the
load in flight) instead of loading again: each byte is still read once, and the tensors are the
same views of the same memory.

Bounds: LOADERS loads at a time (a staging ring each: the pinned budget of one load); a shard is loaded
ahead only while the device (CUDA: torch.cuda.mem_get_info) or the host (heap mode on the CPU:
MemAvailable) has room for it and a margin; past that the loader stops and the consumer loads
what is left as it asks, as without the loader. A shard loaded ahead that nobody claims by the
end of the block is closed then, so nothing is held that no tensor uses. A load that fails ahead
is forgotten: the consumer loads that shard itself and sees the error where it would have.
"""
import json
import os
import threading
import time

MARGIN = 1 << 30     # room left free on the device (or the host) beyond a shard loaded ahead
# Loads ahead in flight at once, each with its own staging ring (its load's pinned budget, 256
# MiB by default). Two: on the H200 (bench/RESULTS.md "gpu loaders", run E), a warm 3-shard
# from_pretrained took 0.295 s with two at a time and 0.334 s with three (three rings side by
# side moved the same bytes slower than two), against 0.226 s for the set in one load.
LOADERS = 2


def _index_sets(directory):
    """{realpath of a shard: [realpaths of its set's shards, sorted by name]} for every
    *.safetensors.index.json in `directory`."""
    sets = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return sets
    for name in names:
        if not name.endswith(".safetensors.index.json"):
            continue
        try:
            with open(os.path.join(directory, name)) as f:
                weight_map = json.load(f).get("weight_map") or {}
        except (OSError, ValueError, AttributeError):
            continue
        files = sorted({v for v in weight_map.values() if isinstance(v, str)})
        shards = [os.path.realpath(os.path.join(directory, v)) for v in files]
        if len(shards) > 1 and all(os.path.isfile(s) for s in shards):
            for s in shards:
                sets.setdefault(s, shards)
    return sets


def _room(device_index, on_device):
    """Free bytes where a shard loaded ahead would go, or None when unknown."""
    try:
        if on_device:
            import torch
            return torch.cuda.mem_get_info(device_index)[0]
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except Exception:                # noqa: B902 (no figure: no loading ahead)
        return None
    return None


class _Entry:
    __slots__ = ("done", "obj", "claimed")

    def __init__(self):
        self.done = threading.Event()
        self.obj = None          # the weightmap.safe_open loaded ahead, until claimed
        self.claimed = False


def _checkpoint_files(directory):
    """The weight files a checkpoint folder holds, in transformers' order: the shards of its
    index (the first index with more than one), else a lone model.safetensors; [] otherwise."""
    sets = _index_sets(directory)
    if sets:
        return next(iter(sets.values()))
    one = os.path.join(directory, "model.safetensors")
    return [os.path.realpath(one)] if os.path.isfile(one) else []


class Prefetcher:
    """One loading() block's loads ahead: opened() is told of every open, claim() before a
    handle loads, close() at the block's end."""

    def __init__(self, device, mode):
        from . import _parse_device, _c
        self.device, self.mode = device, mode
        backend, self.device_index = _parse_device(device)
        self.on_device = backend != _c.BACKEND_CPU
        self.lock = threading.Lock()
        self.entries = {}        # realpath -> _Entry
        self.queue = []          # realpaths to load ahead, in order
        self.seen_dirs = set()
        self.threads = []        # the loader threads running (at most LOADERS)
        self.stop_rest = False   # no room was left: the rest loads as the consumer asks
        self.in_flight = 0       # bytes of the loads ahead running now
        self.stopping = False
        self.loaded_ahead = 0    # shards loaded ahead (for tests and benchmarks)
        self.claimed = 0         # of those, taken over by a consumer's handle
        # (time.perf_counter(), what, file name) of every open, load ahead and take-over: where
        # the consumer's time goes (bench/gpu_loaders.py prints it)
        self.events = []
        self._event("block", "")      # the block's start: "patched" follows when its swap is done

    def _event(self, what, path):
        self.events.append((time.perf_counter(), what, os.path.basename(path)))

    def opened(self, obj, filename):
        """obj (a safe_open of the block) was opened on filename: the first open of a shard of a
        set queues every shard of that set."""
        try:
            path = os.path.realpath(os.fspath(filename))
        except TypeError:
            return
        obj._wm_ahead_path = path
        self._event("open", path)
        directory = os.path.dirname(path)
        with self.lock:
            if self.stopping or directory in self.seen_dirs or path in self.entries:
                return
            self.seen_dirs.add(directory)
        self._queue(_index_sets(directory).get(path) or [])

    def folder(self, directory):
        """A consumer is about to load the checkpoint in `directory` (transformers'
        from_pretrained of a local folder): its files are queued now, before its first open."""
        try:
            directory = os.path.realpath(os.fspath(directory))
        except TypeError:
            return
        if not os.path.isdir(directory):
            return
        self._event("folder", directory)
        with self.lock:
            if self.stopping or directory in self.seen_dirs:
                return
            self.seen_dirs.add(directory)
        self._queue(_checkpoint_files(directory))

    def _queue(self, files):
        with self.lock:
            for s in files:
                if s not in self.entries:
                    self.entries[s] = _Entry()
                    self.queue.append(s)
            while len(self.threads) < LOADERS and self.queue and not self.stopping:
                t = threading.Thread(target=self._run, name="weightmap-ahead", daemon=True)
                self.threads.append(t)
                t.start()

    def _run(self):
        from . import safe_open
        me = threading.current_thread()
        while True:
            with self.lock:
                if self.stopping or self.stop_rest or not self.queue:
                    self.threads.remove(me)
                    if self.stopping or self.stop_rest:
                        rest, self.queue = self.queue, []
                        for p in rest:
                            self.entries[p].done.set()
                    return
                path = self.queue.pop(0)
                entry = self.entries[path]
            try:
                if not self.stop_rest:
                    obj = safe_open(path, framework="pt", device=self.device, mode=self.mode)
                    if len(obj.shards()) != 1:
                        # This package opens a shard's whole set from one shard's path: loading
                        # each ahead would read the set once per shard.
                        obj.close()
                        self.stop_rest = True
                        continue
                    size = sum(t[3] for t in obj._table())
                    with self.lock:              # room for it and for the loads in flight
                        room = _room(self.device_index, self.on_device)
                        fits = room is not None and room >= size + self.in_flight + MARGIN
                        if fits:
                            self.in_flight += size
                        else:
                            self.stop_rest = True  # the rest loads as the consumer asks
                    if not fits:
                        obj.close()
                        continue
                    self._event("load", path)
                    try:
                        obj.load()
                    finally:
                        with self.lock:
                            self.in_flight -= size
                    self._event("loaded", path)
                    with self.lock:
                        entry.obj = obj
                        self.loaded_ahead += 1
            except Exception:                  # noqa: B902 (the consumer loads it and sees why)
                pass
            finally:
                entry.done.set()

    def claim(self, target):
        """Before target (a safe_open of the block) loads: if its file was loaded ahead (or is
        being loaded), target takes that model over (waiting for it) and its own unloaded handle
        is closed."""
        path = target.__dict__.get("_wm_ahead_path")
        with self.lock:
            entry = self.entries.get(path)
            if entry is None or entry.claimed:
                return
        self._event("wait", path)
        entry.done.wait()
        self._event("took", path)
        with self.lock:
            if entry.claimed or entry.obj is None:
                entry.claimed = True
                return
            entry.claimed = True
            ahead, entry.obj = entry.obj, None
            own, target._h = target._h, ahead._h
            self.claimed += 1
        own.close()

    def close(self):
        """The block ends: no more loads ahead; the ones nobody claimed are closed."""
        with self.lock:
            self.stopping = True
            threads = list(self.threads)
        for t in threads:
            t.join()
        with self.lock:
            left = [e.obj for e in self.entries.values() if e.obj is not None]
            for e in self.entries.values():
                e.obj = None
                e.claimed = True
        for obj in left:
            obj.close()
