"""The shard sets' loads that weightmap.loading() starts ahead of the consumer (_loading.py).

transformers' from_pretrained opens a sharded checkpoint's shards one after the other, and
between two shards it does work of its own (building the model, assigning each shard's
parameters). Loading each shard only when it is asked for puts every load on that path; here,
the loads start ahead, on a loader thread of the block, while the consumer goes on, in one of
two shapes:

- A checkpoint folder that from_pretrained is about to load (folder(): every shard of it will
  be asked for) loads as one set, in one load (SET): one staged pipeline over all its files,
  which moves the bytes faster than loads of the shards side by side (bench/RESULTS.md, "gpu
  loaders"). Each shard's handle, when the consumer asks for its tensors, becomes a _ShardView:
  its own header (names, metadata, the tensor table), its tensors exported from the set's
  model. The set's model is one allocation: its memory goes back when the last view of it is
  closed (or dropped) and the last of its tensors is deleted, not shard by shard.
- The first open of a shard of a set by other code (opened(): the files that a
  NAME.safetensors.index.json beside it lists) loads the shards one by one, in the order
  transformers asks for them (the sorted file names), up to LOADERS at a time; a shard nobody
  claims is closed at the block's end, so it holds nothing. A set too large for the room left
  loads this way too.

When the consumer needs a shard's tensors, its handle takes over what was loaded ahead (or waits
for the load in flight) instead of loading again: each byte is still read once, and the tensors
are the same views of the same memory.

Bounds: a load starts ahead only while the device (CUDA: torch.cuda.mem_get_info) or the host
(heap mode on the CPU: MemAvailable) has room for it, the loads in flight and a margin; past
that the loader stops and the consumer loads what is left as it asks, as without the loader.
What nobody claimed by the end of the block is closed then. A load that fails ahead is
forgotten: the consumer loads that shard itself and sees the error where it would have.
"""
import json
import os
import threading
import time

MARGIN = 1 << 30     # room left free on the device (or the host) beyond a load ahead
# Shard loads ahead in flight at once, each with its own staging ring (its load's pinned budget,
# 256 MiB by default). Two: on the H200 (bench/RESULTS.md "gpu loaders", run E), a warm 3-shard
# from_pretrained took 0.295 s with two at a time and 0.334 s with three (three rings side by
# side moved the same bytes slower than two), against 0.226 s for the set in one load.
LOADERS = 2
# A checkpoint folder's shards load as one set (see above); False: one by one, as other code's
# opens (for comparison: bench/gpu_loaders.py).
SET = True
# Reading threads of each load ahead (safe_open's threads=): 0, the library's default (one per
# two CPUs on the staged path).
THREADS = 0


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
    """Free bytes where a load ahead would go, or None when unknown."""
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


def _checkpoint_files(directory):
    """The weight files a checkpoint folder holds, in transformers' order: the shards of its
    index (the first index with more than one), else a lone model.safetensors; [] otherwise."""
    sets = _index_sets(directory)
    if sets:
        return next(iter(sets.values()))
    one = os.path.join(directory, "model.safetensors")
    return [os.path.realpath(one)] if os.path.isfile(one) else []


class _Load:
    """One load ahead: one shard, or (as_set) every shard of a set as one model."""
    __slots__ = ("paths", "as_set", "done", "obj", "claimed", "refs")

    def __init__(self, paths, as_set):
        self.paths = paths
        self.as_set = as_set
        self.done = threading.Event()
        self.obj = None          # the weightmap.safe_open loaded ahead
        self.claimed = set()     # the paths whose handles took it over (or were told no)
        self.refs = 1            # a set's: the block's, and one for each view not closed


class _ShardView:
    """A claimed shard's handle (safe_open._h) where its set was loaded ahead as one model:
    the shard's own header from its own (unloaded) handle, its tensors from the set's model.
    stats() and mode are the set's model's."""

    def __init__(self, pre, load, own):
        self._pre, self._load, self._own = pre, load, own
        self._set = load.obj._h
        self._to_set = [self._set.find(n) for n in own.names()]
        self._closed = False

    # the lifecycle
    def close(self):
        if not self._closed:
            self._closed = True
            self._own.close()
            self._pre._drop(self._load)
        return self._set.released

    @property
    def closed(self):
        return self._closed

    @property
    def released(self):
        return self._set.released

    @property
    def loaded(self):
        return not self._closed

    @property
    def mode(self):
        return self._set.mode

    @property
    def views(self):
        return self._set.views

    def load(self, *args, **kw):
        self._usable()

    def stats(self):
        self._usable()
        return self._set.stats()

    def export(self, index, *args, **kw):
        self._usable()
        return self._set.export(self._to_set[index], *args, **kw)

    def load_part(self, *args, **kw):      # a loaded handle reads no part alone
        self._usable()
        raise RuntimeError("weightmap: load_part of a loaded shard")

    def _usable(self):
        if self._closed:
            from . import ClosedError
            raise ClosedError(f"{self._own.path}: the file is closed")

    # the shard's own header
    @property
    def format(self):
        return self._own.format

    @property
    def path(self):
        return self._own.path

    def names(self):
        return self._own.names()

    def tensors(self):
        return self._own.tensors()

    def metadata(self):
        return self._own.metadata()

    def shards(self):
        return self._own.shards()

    def find(self, name):
        return self._own.find(name)


class Prefetcher:
    """One loading() block's loads ahead: opened() and folder() are told of the consumer's
    opens and checkpoint folders, claim() before a handle loads, close() at the block's end."""

    def __init__(self, device, mode):
        from . import _parse_device, _c
        self.device, self.mode = device, mode
        backend, self.device_index = _parse_device(device)
        self.on_device = backend != _c.BACKEND_CPU
        self.lock = threading.Lock()
        self.entries = {}        # realpath -> its _Load
        self.queue = []          # _Loads to run, in order
        self.seen_dirs = set()
        self.threads = []        # the loader threads running (at most LOADERS)
        self.stop_rest = False   # no room was left: the rest loads as the consumer asks
        self.in_flight = 0       # bytes of the loads ahead running now
        self.stopping = False
        self.loaded_ahead = 0    # shards loaded ahead (for tests and benchmarks)
        self.claimed = 0         # of those, taken over by a consumer's handle
        self.sets = 0            # sets loaded ahead as one model
        # (time.perf_counter(), what, file name) of every open, load ahead and take-over: where
        # the consumer's time goes (bench/gpu_loaders.py prints it)
        self.events = []
        self._event("block", "")      # the block's start: "patched" follows when its swap is done

    def _event(self, what, path):
        self.events.append((time.perf_counter(), what, os.path.basename(path)))

    def opened(self, obj, filename):
        """obj (a safe_open of the block) was opened on filename: the first open of a shard of a
        set queues every shard of that set, one load each."""
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
        self._queue(_index_sets(directory).get(path) or [], as_set=False)

    def folder(self, directory):
        """A consumer is about to load the checkpoint in `directory` (transformers'
        from_pretrained of a local folder): its files are queued now, before its first open, as
        one set (SET)."""
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
        self._queue(_checkpoint_files(directory), as_set=SET)

    def _queue(self, files, as_set, front=False):
        with self.lock:
            files = [s for s in files if s not in self.entries]
            if as_set and len(files) > 1:
                loads = [_Load(files, True)]
            else:
                loads = [_Load([s], False) for s in files]
            for ld in loads:
                for s in ld.paths:
                    self.entries[s] = ld
            self.queue = loads + self.queue if front else self.queue + loads
            self._start_threads()

    def _start_threads(self):        # under self.lock
        while len(self.threads) < LOADERS and self.queue and not self.stopping:
            t = threading.Thread(target=self._run, name="weightmap-ahead", daemon=True)
            self.threads.append(t)
            t.start()

    def _run(self):
        me = threading.current_thread()
        while True:
            with self.lock:
                if self.stopping or self.stop_rest or not self.queue:
                    self.threads.remove(me)
                    if self.stopping or self.stop_rest:
                        rest, self.queue = self.queue, []
                        for ld in rest:
                            ld.done.set()
                    return
                ld = self.queue.pop(0)
            try:
                self._load(ld)
            except Exception:                  # noqa: B902 (the consumer loads it and sees why)
                pass
            finally:
                ld.done.set()

    def _load(self, ld):
        from . import safe_open
        files = ld.paths if ld.as_set else ld.paths[0]
        obj = safe_open(files, framework="pt", device=self.device, mode=self.mode,
                        threads=THREADS)
        if not ld.as_set and len(obj.shards()) != 1:
            # A path that opens a whole set (a GGUF split's part): loading each ahead would read
            # the set once per part.
            obj.close()
            self.stop_rest = True
            return
        size = sum(t[3] for t in obj._table())
        with self.lock:              # room for it and for the loads in flight
            room = _room(self.device_index, self.on_device)
            fits = room is not None and room >= size + self.in_flight + MARGIN
            if fits:
                self.in_flight += size
            elif not ld.as_set:
                self.stop_rest = True  # the rest loads as the consumer asks
        if not fits:
            obj.close()
            if ld.as_set:              # too big as one: its shards one by one, while they fit
                with self.lock:
                    for s in ld.paths:
                        del self.entries[s]
                self._queue(ld.paths, as_set=False, front=True)
            return
        what = ld.paths[0] + (f" (+{len(ld.paths) - 1})" if ld.as_set else "")
        self._event("load", what)
        try:
            obj.load()
        finally:
            with self.lock:
                self.in_flight -= size
        self._event("loaded", what)
        with self.lock:
            ld.obj = obj
            self.loaded_ahead += len(ld.paths)
            self.sets += ld.as_set

    def claim(self, target):
        """Before target (a safe_open of the block) loads: if its file was loaded ahead (or is
        being loaded), target takes that over (waiting for it): a shard's model, its own
        unloaded handle closed; or a view of its set's model."""
        path = target.__dict__.get("_wm_ahead_path")
        while True:
            with self.lock:
                ld = self.entries.get(path)
                if ld is None or self._taken(ld, path):
                    return
            self._event("wait", path)
            ld.done.wait()
            with self.lock:
                if self.entries.get(path) is not ld:
                    continue          # the set was too big as one: wait for the shard's load
                if self._taken(ld, path) or ld.obj is None:
                    ld.claimed.add(path)
                    return
                self._event("took", path)
                if path not in ld.claimed:
                    ld.claimed.add(path)
                    self.claimed += 1
                own = target._h
                if ld.as_set:         # every handle on a shard of the set: a view of it
                    ld.refs += 1
                    target._h = _ShardView(self, ld, own)
                    return
                target._h, ld.obj = ld.obj._h, None
            own.close()

    def _taken(self, ld, path):       # under self.lock
        """Nothing (more) to take over: the block ended, or a shard's own load was taken."""
        return self.stopping or not ld.as_set and path in ld.claimed

    def _drop(self, ld):
        """One reference to a set loaded ahead is gone; the last closes its model."""
        with self.lock:
            ld.refs -= 1
            last = ld.refs == 0
            obj = ld.obj if last else None
            if last:
                ld.obj = None
        if obj is not None:
            obj.close()

    def close(self):
        """The block ends: no more loads ahead; the shards nobody claimed are closed, and each
        set's model is closed when its last view is."""
        with self.lock:
            self.stopping = True
            threads = list(self.threads)
        for t in threads:
            t.join()
        with self.lock:
            loads = {id(ld): ld for ld in self.entries.values()}.values()
            left = []
            for ld in loads:
                ld.claimed.update(ld.paths)
                if not ld.as_set and ld.obj is not None:
                    left.append(ld.obj)
                    ld.obj = None
            sets = [ld for ld in loads if ld.as_set]
        for obj in left:
            obj.close()
        for ld in sets:
            self._drop(ld)
