#!/usr/bin/env python3
"""gpu_loaders.py: the loaders users pick to put safetensors weights on a GPU, side by side with
weightmap on the same files (bench/gpu_loaders.sh drives it, one call on the GPU machine).

  load LOADER INDEX [--rounds N] [--cold] [--warmup FILE]
        one loader in this process: every tensor of the checkpoint INDEX lists (its shards) to
        DEVICE, N timed rounds (after one untimed round on FILE, a small file, that sets the
        loader and CUDA up); --cold: the shards' pages dropped from the page cache before each
        round (fsync, POSIX_FADV_DONTNEED). Per round: seconds from the call to a synchronised
        device, GB/s of tensor bytes; the first round's per-tensor checksums (see sums()).
        LOADER: safetensors (safetensors.torch.load_file per shard), fastsafetensors
        (SafeTensorsFileLoader, nogds), instanttensor (its safe_open over all shards),
        weightmap (weightmap.load_file of the index: the set in one call), weightmap-shards
        (weightmap.load_file per shard, as the serving stacks' loop).
  disk INDEX [--threads T,...] [--block B,...] [--bytes N]
        the disk's own limit: parallel O_DIRECT preads of the same shards (their pages dropped
        first), T threads of B-byte reads each, over the first N bytes of the shards together
        (default all); GB/s for every (T, B) and the best.
  pretrained DIR KIND [--cold] [--rounds N]
        from_pretrained(DIR, device_map=DEVICE), KIND plain or loading (inside
        weightmap.loading(device=DEVICE)), N rounds in this process, cold or warm; checksums of
        the first round's state dict; the ledger after `del model`.
  warm DIR [--rounds N]
        warm, in one process, alternating: from_pretrained plain, inside loading(), inside
        loading(ahead=False), and the files alone (weightmap.load_file of the index); every
        loaded state dict compared (torch.equal) with the plain one's.
  profile DIR [--rounds N] [--depth D]
        where a warm from_pretrained's time goes: N rounds of loading() / plain / the files
        alone untimed by any tool, then one of loading() and plain with every function of
        transformers' loading modules and weightmap's timed on every thread (calls of 1 ms or
        more, nested D deep), then one of each under cProfile.
  drop INDEX
        the shards' pages out of the page cache; prints nothing (bytes still cached: resident()).
  summary OUT
        the table (Markdown) from OUT/*.jsonl, every loader's checksums compared with
        safetensors', the ratios and the targets.

Each command prints one JSON line per measurement.
"""
import argparse
import contextlib
import gc
import glob
import json
import mmap
import os
import statistics
import sys
import threading
import time

DEVICE = os.environ.get("WM_BENCH_DEVICE", "cuda:0")


def emit(**kw):
    print(json.dumps(kw), flush=True)


def shards_of(index):
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    d = os.path.dirname(os.path.abspath(index))
    return [os.path.join(d, x) for x in files]


def tensor_bytes(files):
    total = 0
    for p in files:
        with open(p, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        total += sum(v["data_offsets"][1] - v["data_offsets"][0]
                     for k, v in header.items() if k != "__metadata__")
    return total


def resident(files):
    """Bytes of the files in the page cache (mincore over a read-only shared mapping of each)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for p in files:
        size = os.path.getsize(p)
        if size == 0:
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), "mmap " + p)
            try:
                vec = ctypes.create_string_buffer((size + page - 1) // page)
                if libc.mincore(addr, size, vec) != 0:
                    raise OSError(ctypes.get_errno(), "mincore " + p)
                total += sum(b & 1 for b in vec.raw) * page
            finally:
                libc.munmap(addr, size)
        finally:
            os.close(fd)
    return total


def drop(files):
    """The files' pages out of the page cache (written back first); returns the bytes of them
    still cached after (0 when the drop worked: a page mapped by a live process stays)."""
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return resident(files)


def sync():
    import torch
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def sums(tensors):
    """{name: [sum, sum of every 3rd from the 2nd, sum of every 7th]} of each tensor's 32-bit (or
    16- or 8-bit) words as int64, on the device: equal sums for equal bytes, and a tensor
    misplaced, shifted or corrupted changes them."""
    import torch
    out = {}
    for name, t in tensors.items():
        b = t.detach().contiguous().view(-1).view(torch.uint8)
        n = b.numel()
        w = b.view(torch.int32) if n % 4 == 0 else b.view(torch.int16) if n % 2 == 0 else b
        out[name] = [int(w.sum(dtype=torch.int64)), int(w[1::3].sum(dtype=torch.int64)),
                     int(w[::7].sum(dtype=torch.int64))]
    return out


# ---- the loaders: each returns ({name: tensor on DEVICE}, what to call to let them go) ----

def load_safetensors(index, files):
    from safetensors.torch import load_file
    out = {}
    for f in files:
        out.update(load_file(f, device=DEVICE))
    return out, None


def load_fastsafetensors(index, files):
    from fastsafetensors import SafeTensorsFileLoader, SingleGroup
    loader = SafeTensorsFileLoader(SingleGroup(), DEVICE, nogds=True)
    loader.add_filenames({0: files})
    fb = loader.copy_files_to_device()
    out = {k: fb.get_tensor(k) for k in loader.get_keys()}

    def close():
        fb.close()
        loader.close()
    return out, close


def load_instanttensor(index, files):
    from instanttensor import safe_open
    out = {}
    dev = int(DEVICE.split(":")[1]) if ":" in DEVICE else 0
    with safe_open(files, framework="pt", device=dev) as f:
        for name, t in f.tensors():
            out[name] = t.clone()      # the yielded tensor is its reused buffer
    return out, None


STATS = {}


def load_weightmap(index, files):
    import weightmap
    f = weightmap.safe_open(index, device=DEVICE)
    out = f.get_tensors()
    STATS.update(f.stats() or {})
    f.close()                         # released with the last view
    return out, None


def load_weightmap_shards(index, files):
    import weightmap
    out = {}
    for f in files:
        out.update(weightmap.load_file(f, device=DEVICE))
    return out, None


def load_weightmap_parallel(index, files):
    """Every shard at once, each weightmap.load_file on a thread of its own (as loading() loads
    ahead): whether loads side by side read the disk faster than one load of the set."""
    import weightmap
    parts, errors = [None] * len(files), []

    def one(i, f):
        try:
            parts[i] = weightmap.load_file(f, device=DEVICE)
        except Exception as e:          # noqa: B902 (re-raised below, on the caller's thread)
            errors.append(e)
    ths = [threading.Thread(target=one, args=(i, f)) for i, f in enumerate(files)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    if errors:
        raise errors[0]
    out = {}
    for p in parts:
        out.update(p)
    return out, None


LOADERS = {"safetensors": load_safetensors, "fastsafetensors": load_fastsafetensors,
           "instanttensor": load_instanttensor, "weightmap": load_weightmap,
           "weightmap-shards": load_weightmap_shards,
           "weightmap-parallel": load_weightmap_parallel}


def release(out, close):
    import torch
    if close is not None:
        close()
    out.clear()
    gc.collect()
    sync()
    if DEVICE.startswith("cuda"):
        torch.cuda.empty_cache()


def cmd_load(args):
    import torch
    files = shards_of(args.index)
    nbytes = tensor_bytes(files)
    torch.zeros(1, device=DEVICE)
    if args.loader.startswith("weightmap") and DEVICE.startswith("cuda"):
        import weightmap
        weightmap.backend_init(DEVICE)
    fn = LOADERS[args.loader]
    if args.warmup:
        wi = args.warmup
        out, close = fn(wi, shards_of(wi))
        release(out, close)
    for r in range(args.rounds):
        cached = drop(files) if args.cold else None
        gc.collect()
        sync()
        t0 = time.perf_counter()
        out, close = fn(args.index, files)
        sync()
        secs = time.perf_counter() - t0
        rec = dict(stage="load", loader=args.loader, scenario=args.scenario, round=r,
                   seconds=secs, gbps=nbytes / secs / 1e9, bytes=nbytes, tensors=len(out),
                   cached_before=cached)
        if r == 0:
            rec["sums"] = sums(out)
        if args.loader.startswith("weightmap"):
            import weightmap
            led = weightmap.ledger()
            rec["ledger_device_while_loaded"] = led["device"]["current"]
            for k in ("read_direct", "read_buffered", "load_seconds"):
                if k in STATS:
                    rec[k] = STATS[k]
        release(out, close)
        if args.loader.startswith("weightmap"):
            import weightmap
            rec["ledger_after"] = weightmap.ledger()["bytes"]
        emit(**rec)


def cmd_disk(args):
    files = shards_of(args.index)
    sizes = [os.path.getsize(f) for f in files]
    limit = args.bytes or sum(sizes)
    best = 0.0
    for threads in [int(x) for x in args.threads.split(",")]:
        for block in [int(x) << 20 for x in args.block.split(",")]:
            # blocks of every file, round robin over the files, the first `limit` bytes in all
            work, left = [], limit
            per = [s // block * block for s in sizes]
            off = 0
            while left > 0 and any(off < p for p in per):
                for k, p in enumerate(per):
                    if off < p and left > 0:
                        work.append((k, off))
                        left -= block
                off += block
            drop(files)
            fds = [os.open(f, os.O_RDONLY | os.O_DIRECT) for f in files]
            nxt = [0]
            lock = threading.Lock()
            done = [0] * threads

            def run(i):
                buf = mmap.mmap(-1, block)
                while True:
                    with lock:
                        j = nxt[0]
                        nxt[0] += 1
                    if j >= len(work):
                        break
                    k, o = work[j]
                    done[i] += os.preadv(fds[k], [buf], o)
                buf.close()
            ths = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
            t0 = time.perf_counter()
            for t in ths:
                t.start()
            for t in ths:
                t.join()
            secs = time.perf_counter() - t0
            for fd in fds:
                os.close(fd)
            gbps = sum(done) / secs / 1e9
            best = max(best, gbps)
            emit(stage="disk", when=args.when, threads=threads, block_mib=block >> 20,
                 bytes=sum(done), seconds=secs, gbps=gbps)
    emit(stage="disk-best", when=args.when, gbps=best)


def pretrained(path):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(path, device_map=DEVICE, dtype="auto")


def ledger_bytes():
    import weightmap
    led = weightmap.ledger()
    return led["bytes"] + led["regions"]


def cmd_pretrained(args):
    import torch
    import weightmap
    files = shards_of(os.path.join(args.dir, "model.safetensors.index.json"))
    nbytes = tensor_bytes(files)
    torch.zeros(1, device=DEVICE)
    weightmap.backend_init(DEVICE)
    import transformers  # noqa: F401 (imported before the clock starts)
    if args.warmup:      # the first from_pretrained of a process imports and sets up much more
        del_model = pretrained(args.warmup)
        del del_model
        gc.collect()
    for r in range(args.rounds):
        cached = drop(files) if args.cold else None
        gc.collect()
        sync()
        t0 = time.perf_counter()
        if args.kind == "plain":
            model = pretrained(args.dir)
        else:
            shards = args.kind == "loading-shards-ahead"
            threads = 16 if args.kind == "loading-16-readers" else 0
            with prefetch_set(not shards, 2, threads), \
                    weightmap.loading(device=DEVICE, ahead=args.kind != "loading-no-ahead") as ahead:
                model = pretrained(args.dir)
        sync()
        secs = time.perf_counter() - t0
        rec = dict(stage="pretrained", kind=args.kind, cold=args.cold, round=r, seconds=secs,
                   gbps=nbytes / secs / 1e9, bytes=nbytes, cached_before=cached, tag=args.tag)
        if args.kind.startswith("loading") and ahead is not None:
            rec.update(loaded_ahead=ahead.loaded_ahead, claimed=ahead.claimed,
                       events=[(round(t - t0, 4), w, n) for t, w, n in ahead.events])
        if r == 0:
            rec["sums"] = sums(model.state_dict())
        del model
        gc.collect()
        sync()
        rec["ledger_after_del"] = ledger_bytes()
        emit(**rec)


def warm_kinds(folder, index):
    """The warm from_pretrained kinds, in the order cmd_warm measures them (plain first:
    transformers imports its loading modules at its first from_pretrained, which then is not
    inside a block): {kind: () -> (model or state dict, the block's loader or None)}."""
    import weightmap

    def plain():
        return pretrained(folder), None

    def inside():
        with weightmap.loading(device=DEVICE) as ahead:
            model = pretrained(folder)
        return model, ahead

    def shards_ahead(loaders):       # the folder's shards loaded ahead one by one (not as a set)
        def run():
            with prefetch_set(False, loaders):
                return inside()
        return run

    def inside_no_ahead():
        with weightmap.loading(device=DEVICE, ahead=False):
            return pretrained(folder), None

    def alone():
        return weightmap.load_file(index, device=DEVICE), None

    return {"plain": plain, "loading": inside, "loading-shards-ahead": shards_ahead(2),
            "loading-one-ahead": shards_ahead(1), "loading-no-ahead": inside_no_ahead,
            "files-alone": alone}


@contextlib.contextmanager
def prefetch_set(as_set, loaders, threads=0):
    """loading()'s loads ahead of a checkpoint folder as one set (the default) or shard by
    shard, `loaders` at a time, each with `threads` readers (0: the default), within the block
    (weightmap._prefetch's SET, LOADERS and THREADS)."""
    from weightmap import _prefetch
    was = _prefetch.SET, _prefetch.LOADERS, _prefetch.THREADS
    _prefetch.SET, _prefetch.LOADERS, _prefetch.THREADS = as_set, loaders, threads
    try:
        yield
    finally:
        _prefetch.SET, _prefetch.LOADERS, _prefetch.THREADS = was


def cmd_warm(args):
    import torch
    import weightmap
    index = os.path.join(args.dir, "model.safetensors.index.json")
    files = shards_of(index)
    nbytes = tensor_bytes(files)
    torch.zeros(1, device=DEVICE)
    weightmap.backend_init(DEVICE)
    import transformers  # noqa: F401

    kinds = warm_kinds(args.dir, index)
    ref = {k: v.clone() for k, v in kinds["plain"]()[0].state_dict().items()}
    gc.collect()
    for fn in kinds.values():            # warm-up round, not counted
        m, _ = fn()
        del m, _
        gc.collect()
    names = list(kinds)
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for kind in order:
            gc.collect()
            sync()
            t0 = time.perf_counter()
            m, ahead = kinds[kind]()
            sync()
            secs = time.perf_counter() - t0
            trace = ahead.events if ahead is not None else []
            del ahead
            sd = m if kind == "files-alone" else m.state_dict()
            equal = sorted(sd) == sorted(ref) and all(
                sd[k].dtype == ref[k].dtype and torch.equal(sd[k], ref[k]) for k in ref)
            del m, sd
            gc.collect()
            sync()
            emit(stage="warm", kind=kind, round=r, seconds=secs, gbps=nbytes / secs / 1e9,
                 bytes=nbytes, equal=equal, ledger_after_del=ledger_bytes())
            if kind == "loading" and r == 0:
                emit(stage="warm-trace", events=[(round(t - t0, 4), w, n) for t, w, n in trace])


class _Timeline:
    """Wraps every function and method (one class level deep) of the given modules so that each
    call records (thread, depth, start, end, name): where from_pretrained's time goes, per phase,
    on every thread (transformers' own loading threads too). undo() puts everything back."""

    def __init__(self, module_names):
        import inspect
        self.calls, self.undo_list, self.local = [], [], threading.local()
        self.lock = threading.Lock()
        for mod_name in module_names:
            mod = sys.modules.get(mod_name)
            if mod is None:
                continue
            for name, value in list(vars(mod).items()):
                if inspect.isfunction(value) and value.__module__ == mod_name:
                    self._wrap(vars(mod), name, value, mod_name.split(".")[-1] + "." + name)
                elif inspect.isclass(value) and value.__module__ == mod_name:
                    for attr, v in list(vars(value).items()):
                        if attr.startswith("__") and attr != "__init__":
                            continue
                        self._wrap_attr(value, attr, v, value.__name__ + "." + attr)

    def _wrapper(self, func, label):
        tl = self

        def wrapped(*a, **kw):
            depth = getattr(tl.local, "depth", 0)
            tl.local.depth = depth + 1
            t0 = time.perf_counter()
            try:
                return func(*a, **kw)
            finally:
                t1 = time.perf_counter()
                tl.local.depth = depth
                if t1 - t0 >= 0.001:
                    with tl.lock:
                        tl.calls.append((threading.get_ident(), depth, t0, t1, label))
        wrapped.__wrapped__ = func
        wrapped.__name__ = getattr(func, "__name__", label)
        wrapped.__qualname__ = getattr(func, "__qualname__", label)
        wrapped.__doc__ = getattr(func, "__doc__", None)
        return wrapped

    def _wrap(self, d, name, func, label):
        d[name] = self._wrapper(func, label)
        self.undo_list.append((d, name, func))

    def _wrap_attr(self, cls, attr, v, label):
        import inspect
        if isinstance(v, classmethod):
            new = classmethod(self._wrapper(v.__func__, label))
        elif isinstance(v, staticmethod):
            new = staticmethod(self._wrapper(v.__func__, label))
        elif inspect.isfunction(v):
            new = self._wrapper(v, label)
        else:
            return
        try:
            setattr(cls, attr, new)
        except (AttributeError, TypeError):
            return
        self.undo_list.append((cls, attr, v))

    def undo(self):
        for d, name, v in reversed(self.undo_list):
            if isinstance(d, dict):
                d[name] = v
            else:
                setattr(d, name, v)
        self.undo_list = []


PROFILED = ("transformers.modeling_utils", "transformers.core_model_loading",
            "transformers.configuration_utils", "transformers.models.auto.auto_factory",
            "transformers.models.auto.configuration_auto", "transformers.utils.hub",
            "transformers.integrations.accelerate", "transformers.integrations.tensor_parallel",
            "transformers.generation.configuration_utils", "transformers.initialization",
            "transformers.models.llama.modeling_llama", "transformers.modeling_rope_utils",
            "transformers.utils.import_utils", "transformers.utils.generic",
            "transformers.dynamic_module_utils", "transformers.safetensors_conversion",
            "weightmap", "weightmap._loading", "weightmap._prefetch")


def cmd_profile(args):
    """Where a warm from_pretrained's time goes: after warm-up rounds, one round of each kind
    with every function of transformers' loading modules (and weightmap's) timed on every
    thread, and one under cProfile (the calling thread)."""
    import cProfile
    import io
    import pstats
    import torch
    import weightmap
    import transformers  # noqa: F401
    from transformers import AutoModelForCausalLM  # noqa: F401 (the lazy modules imported)
    index = os.path.join(args.dir, "model.safetensors.index.json")
    nbytes = tensor_bytes(shards_of(index))
    torch.zeros(1, device=DEVICE)
    weightmap.backend_init(DEVICE)

    every = warm_kinds(args.dir, index)
    kinds = {k: every[k] for k in ("plain", "loading", "files-alone")}
    for _ in range(2):
        for fn in kinds.values():
            m, _a = fn()
            del m
            gc.collect()
            sync()
    for kind, fn in kinds.items():
        for r in range(args.rounds):
            gc.collect()
            sync()
            t0 = time.perf_counter()
            m, _a = fn()
            sync()
            emit(stage="profile-plain-round", kind=kind, round=r,
                 seconds=time.perf_counter() - t0)
            del m
            gc.collect()
            sync()
    main_ident = threading.get_ident()
    for kind in ("loading", "plain"):
        tl = _Timeline(PROFILED)
        gc.collect()
        sync()
        t0 = time.perf_counter()
        try:
            m, ahead = kinds[kind]()
            sync()
        finally:
            tl.undo()
        secs = time.perf_counter() - t0
        threads = {}
        rows = []
        for ident, depth, a, b, label in sorted(tl.calls, key=lambda c: (c[2], c[1])):
            th = "main" if ident == main_ident else threads.setdefault(ident, "t%d" % len(threads))
            if depth <= args.depth:
                rows.append((round(a - t0, 4), round(b - t0, 4), round(b - a, 4), th, depth, label))
        emit(stage="profile-timeline", kind=kind, seconds=secs, gbps=nbytes / secs / 1e9,
             calls=rows, events=[(round(t - t0, 4), w, n) for t, w, n in ahead.events]
             if ahead is not None else [])
        del m
        gc.collect()
        sync()
    for kind in ("loading", "plain"):
        prof = cProfile.Profile()
        gc.collect()
        sync()
        t0 = time.perf_counter()
        prof.enable()
        m, _a = kinds[kind]()
        sync()
        prof.disable()
        secs = time.perf_counter() - t0
        buf = io.StringIO()
        st = pstats.Stats(prof, stream=buf)
        st.sort_stats("cumulative").print_stats(45)
        st.sort_stats("tottime").print_stats(30)
        emit(stage="profile-cprofile", kind=kind, seconds=secs, text=buf.getvalue())
        del m
        gc.collect()
        sync()


# ---- the summary ----

def median(xs):
    return statistics.median(xs) if xs else float("nan")


def listed(v, key, fmt="{:.2f}"):
    return " ".join(fmt.format(r[key]) for r in v)


def print_cli_tables(recs, limit):
    """The CLI's cold and warm rows and the warm one-process rows of cmd_summary."""
    cold_cli = [r for r in recs if r.get("stage") == "cli-cold"]
    if cold_cli:
        print("\n| CLI staged load of the set, cold (weightmap load --backend cuda:0, one cycle "
              "each) | GB/s | x disk limit | bytes read direct |\n|---|---:|---:|---:|")
        for r in cold_cli:
            print(f"| --threads {r['threads'] or 'default'} --direct-io {r['io']} | "
                  f"{r['gbps']:.2f} | "
                  f"{r['gbps'] / limit:.2f} | {r['read_direct']} |")
    cli = {}
    for r in recs:
        if r.get("stage") == "cli-warm":
            cli.setdefault(r["io"], []).append(r)
    if cli:
        off = median([r["gbps"] for r in cli.get("off", [])])
        print("\n| CLI staged load of the set, warm (weightmap load --backend cuda:0 --cycles 5, "
              "alternating rounds) | GB/s median | x --direct-io off | bytes read direct |\n"
              "|---|---:|---:|---:|")
        for io, v in cli.items():
            m = median([r["gbps"] for r in v])
            print(f"| --direct-io {io} | {m:.2f} | {m / off:.3f} | "
                  f"{max(r['read_direct'] for r in v)} |")
    warm = {}
    for r in recs:
        if r.get("stage") == "warm":
            warm.setdefault(r["kind"], []).append(r)
    if warm:
        alone = median([r["gbps"] for r in warm.get("files-alone", [])])
        print("\n| warm, one process, alternating | GB/s median | seconds (rounds) | "
              "x the files alone | equal to plain | ledger after del |\n"
              "|---|---:|---|---:|---|---|")
        for kind, v in warm.items():
            m = median([r["gbps"] for r in v])
            print(f"| {kind} | {m:.2f} | {listed(v, 'seconds', '{:.3f}')} | "
                  f"{m / alone:.2f} | {all(r['equal'] for r in v)} | "
                  f"{max(r['ledger_after_del'] for r in v)} |")



def cmd_summary(args):
    recs = []
    for p in sorted(glob.glob(os.path.join(args.out, "*.jsonl"))):
        with open(p) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        recs.append(json.loads(line))
                    except ValueError:
                        pass
    disk = [r["gbps"] for r in recs if r.get("stage") == "disk-best"]
    limit = max(disk) if disk else float("nan")
    ref = next((r["sums"] for r in recs if r.get("stage") == "load" and
                r["loader"] == "safetensors" and "sums" in r), None)

    def verified(r):
        if ref is None or "sums" not in r:
            return "?"
        return "yes" if r["sums"] == ref else "NO"

    loads = {}
    for r in recs:
        if r.get("stage") == "load":
            loads.setdefault((r["scenario"], r["loader"]), []).append(r)
    print(f"disk limit (parallel O_DIRECT, best of each measurement): "
          f"{', '.join(f'{x:.2f}' for x in disk)} GB/s; ceiling used: {limit:.2f} GB/s\n")
    print("| scenario | loader | GB/s median | rounds (GB/s) | x disk limit | x safetensors | "
          "x fastsafetensors | x InstantTensor | tensors equal safetensors' |")
    print("|---|---|---:|---|---:|---:|---:|---:|---|")
    med = {k: median([r["gbps"] for r in v]) for k, v in loads.items()}
    for scen in ("tmpfs", "disk-warm", "cold"):
        for loader in LOADERS:
            v = loads.get((scen, loader))
            if not v:
                continue
            m = med[(scen, loader)]

            def ratio(peer):
                p = med.get((scen, peer))
                return f"{m / p:.2f}" if p else ""
            first = next((r for r in v if "sums" in r), v[0])
            if "read_direct" in first:
                loader += f" (read direct: {first['read_direct'] / max(1, first['bytes']):.0%})"
            print(f"| {scen} | {loader} | {m:.2f} | {listed(v, 'gbps')} | "
                  f"{m / limit:.2f} | {ratio('safetensors')} | {ratio('fastsafetensors')} | "
                  f"{ratio('instanttensor')} | {verified(first)} |")
    pre = {}
    for r in recs:
        if r.get("stage") == "pretrained":
            pre.setdefault((r["cold"], r["kind"]), []).append(r)
    # the limit measured right before a round (`disk --when TAG`, `pretrained --tag TAG`)
    limit_of = {r["when"]: r["gbps"] for r in recs if r.get("stage") == "disk-best"}

    def of_round(v):
        x = [r["gbps"] / limit_of[r["tag"]] for r in v if r.get("tag") in limit_of]
        return f"{median(x):.2f} ({listed([{'x': y} for y in x], 'x')})" if x else ""
    if ref is None:         # no loader's reference in this run: plain from_pretrained's
        ref = next((r["sums"] for r in recs if r.get("stage") == "pretrained" and
                    r["kind"] == "plain" and "sums" in r), None)
    if pre:
        print("\n| from_pretrained | GB/s median | seconds (rounds) | x disk limit | "
              "x the limit of its round (rounds) | state dict equals safetensors' | "
              "ledger after del |\n|---|---:|---|---:|---|---|---|")
        for (cold, kind), v in sorted(pre.items()):
            m = median([r["gbps"] for r in v])
            first = next((r for r in v if "sums" in r), v[0])
            ok = "?" if ref is None or "sums" not in first else (
                "yes" if all(first["sums"].get(k) == s for k, s in ref.items()) and
                len(first["sums"]) >= len(ref) else "NO")
            print(f"| {'cold' if cold else 'warm'} {kind} | {m:.2f} | "
                  f"{listed(v, 'seconds', '{:.3f}')} | "
                  f"{m / limit if cold else float('nan'):.2f} | {of_round(v)} | {ok} | "
                  f"{max(r['ledger_after_del'] for r in v)} |")
    print_cli_tables(recs, limit)

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("load")
    p.add_argument("loader", choices=sorted(LOADERS))
    p.add_argument("index")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cold", action="store_true")
    p.add_argument("--scenario", default="warm")
    p.add_argument("--warmup")
    p = sub.add_parser("disk")
    p.add_argument("index")
    p.add_argument("--threads", default="16,32")
    p.add_argument("--block", default="4,16")
    p.add_argument("--bytes", type=int, default=0)
    p.add_argument("--when", default="before")
    p = sub.add_parser("pretrained")
    p.add_argument("dir")
    p.add_argument("kind", choices=("plain", "loading", "loading-shards-ahead",
                                      "loading-16-readers", "loading-no-ahead"))
    p.add_argument("--cold", action="store_true")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--warmup", help="a small checkpoint loaded first, untimed")
    p.add_argument("--tag", default="", help="the `disk --when` measured just before, to pair")
    p = sub.add_parser("warm")
    p.add_argument("dir")
    p.add_argument("--rounds", type=int, default=3)
    p = sub.add_parser("profile")
    p.add_argument("dir")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--depth", type=int, default=3)
    p = sub.add_parser("drop")
    p.add_argument("index")
    p = sub.add_parser("summary")
    p.add_argument("out")
    args = ap.parse_args()
    {"load": cmd_load, "disk": cmd_disk, "pretrained": cmd_pretrained, "warm": cmd_warm,
     "profile": cmd_profile, "drop": lambda a: drop(shards_of(a.index)), "summary": cmd_summary}[args.cmd](args)


if __name__ == "__main__":
    main()
