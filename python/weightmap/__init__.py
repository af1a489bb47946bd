"""weightmap: weight files (safetensors, GGUF, their shard sets) for PyTorch and NumPy, loaded
with an explicit mode, handed over without a copy (DLPack), and every byte given back.

    import weightmap
    with weightmap.safe_open("model.safetensors", framework="pt") as f:   # mode="mmap-private"
        w = f.get_tensor("lm_head.weight")        # a view of the file's mapping, no copy
    del w                                         # the last view gone: the mapping is gone
    assert weightmap.ledger()["bytes"] == 0       # the C library holds nothing

Every tensor is a view of memory the C library owns (a file mapping, page-allocated heap, or
CUDA device memory). A view keeps its model alive: ``close()`` (or leaving the ``with``)
releases the model at once when no view is alive, or when the last view is deleted.

Modes (``mode=``): "mmap-private" (the default on the CPU: a private copy-on-write mapping, as
safetensors' own; tensors are writable, reading privatises nothing, a written page becomes a
private copy and the file never changes; the whole mapping is commit-charged), "mmap" (one
shared read-only mapping: NumPy arrays are not writeable, and writing a PyTorch tensor of this
mode faults the process), and "heap" (page-aligned private memory filled by parallel reads;
the default on CUDA devices, where every mode stages through pinned memory).

``with weightmap.loading(device="cuda:0"):`` makes code written for safetensors (transformers'
``from_pretrained``) load straight to the device through weightmap.
"""

import os as _os

from . import _weightmap as _c
from ._weightmap import (ArgumentError, ClosedError, Error, FormatError, NotFoundError,
                         SliceError, TensorNotFoundError)
from ._loading import loading

__all__ = ["safe_open", "load_file", "loading", "ledger", "file_regions", "mem_figures",
           "backend_init", "Error", "SafetensorError", "FormatError", "NotFoundError",
           "TensorNotFoundError", "ClosedError", "ArgumentError", "SliceError", "MODES",
           "BACKENDS", "Pool", "PooledModel"]
__version__ = _c.version()

# safetensors' name for its errors: the same class. Where safetensors is installed, Error is a
# subclass of safetensors.SafetensorError itself, so `except safetensors.SafetensorError` catches
# every error this package raises (the module says which: _c.ERROR_IS_SAFETENSORS).
SafetensorError = Error
MODES = ("mmap-private", "mmap", "heap")
# safetensors 0.8's backend= names and the mode each is here: its "mmap" maps the file
# copy-on-write (writable tensors, the file untouched), its "pread" reads into private memory.
BACKENDS = {"mmap": "mmap-private", "pread": "heap"}
_LOCKS = {None: 0, "required": _c.LOCK_REQUIRED, "best-effort": _c.LOCK_BEST_EFFORT}
_FRAMEWORKS = {"pt": "pt", "torch": "pt", "pytorch": "pt", "np": "np", "numpy": "np"}
_DTYPES = {"f32": "f32", "float32": "f32", "float": "f32", "f16": "f16", "float16": "f16",
           "half": "f16", "bf16": "bf16", "bfloat16": "bf16", "f64": "f64", "float64": "f64",
           "double": "f64"}


def ledger():
    """The C library's ledger (wm_ledger_get) as a dict: for each category ("heap", "scratch",
    "map_shared", "map_private", "locked", "pinned", "device") a dict {current, peak, total,
    regions} in bytes; "bytes" and "regions", the sums of current and regions over every
    category (both 0 when the library holds nothing), and "heap_largest"."""
    return _c.ledger()


def file_regions(path=None, pid=0):
    """The regions of process `pid` (0: this one) that map the weight file `path` (matched by
    device and inode), or every region of a .gguf/.safetensors file when path is None: a list of
    dicts (start, end, offset, perms, size, rss, privatised, private_dirty, locked, path)."""
    if path is None:
        return _c.file_regions(pid=pid)
    return _c.file_regions(_os.fspath(path), pid)


def mem_figures(pid=0):
    """The operating system's figures for a process (bytes): footprint (anonymous + swap +
    shared memory), resident, file_resident, locked, committed."""
    return _c.mem_figures(pid)


def backend_init(device="cuda:0"):
    """Start a backend's runtime ahead of a load (wm_backend_init), so that memory figures taken
    after it do not count the runtime's own memory. Optional."""
    backend, index = _parse_device(device)
    _c.backend_init(backend, index)


def _parse_device(device):
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        return _c.BACKEND_CUDA, device     # safetensors' device=0 means cuda:0
    d = str(device)                        # "cpu", "cuda:1", torch.device("cuda", 1)
    try:
        return _c.backend_from_name(d)     # the C library's parser (wm_backend_from_name)
    except ValueError as e:
        raise ArgumentError(f"device must be 'cpu', 'cuda' or 'cuda:N', not {device!r} ({e})") \
            from None


def _parse_dtype(dtype):
    if dtype is None:
        return None
    name = str(dtype).rsplit(".", 1)[-1].lower()   # torch.float16, numpy.float32, "F16"
    if name not in _DTYPES:
        raise ArgumentError(f"dtype must be one of f32, f16, bf16, f64 (or their torch/numpy "
                         f"names), not {dtype!r}")
    return _DTYPES[name]


class _Framework:
    """Turns an Export (a DLPack producer) into a framework's tensor, viewing its memory."""

    def __init__(self, name, read_only):
        self.name = name
        self.read_only = read_only
        if name == "pt":
            import torch
            self.torch = torch
        else:
            import numpy
            self.np = numpy

    def tensor(self, export, type_name):
        if self.name == "pt":
            return self._torch(export, type_name)
        return self._numpy(export, type_name)

    def _torch(self, make, type_name):
        torch = self.torch
        try:
            t = torch.from_dlpack(make())
        except (RuntimeError, TypeError, BufferError):
            if type_name not in ("u16", "u32", "u64"):
                raise
            # A torch without unsigned 16/32/64-bit tensors: the same bits as signed integers.
            t = torch.from_dlpack(make(code=_c.DL_INT))
        if type_name == "bool":
            t = t.view(torch.bool)
        elif type_name in _TORCH_VIEWS:
            dt = getattr(torch, _TORCH_VIEWS[type_name], None)
            if dt is not None:
                t = t.view(dt)
        return t

    def _numpy(self, make, type_name):
        np = self.np
        # NumPy has no bfloat16: the raw bits as uint16
        export = make(code=_c.DL_UINT) if type_name == "bf16" else make()
        a = np.from_dlpack(export)
        if type_name == "bool":
            a = a.view(np.bool_)
        if self.read_only:
            a.flags.writeable = False  # NumPy < 2.1 marks every DLPack import read-only itself
        return a


# Types handed over as bytes (uint8) and viewed as torch's own type where the installed torch
# has it (float8_* from 2.1/2.2/2.7, float4_e2m1fn_x2 from 2.8: two F4 values a byte, so the
# bytes' shape (..., n/2) is that type's shape). F6_E2M3 and F6_E3M2 have no torch type.
_TORCH_VIEWS = {"f8_e4m3": "float8_e4m3fn", "f8_e5m2": "float8_e5m2",
                "f8_e8m0": "float8_e8m0fnu", "f8_e4m3fnuz": "float8_e4m3fnuz",
                "f8_e5m2fnuz": "float8_e5m2fnuz", "f4": "float4_e2m1fn_x2"}


def _rows_of(index, shape, pt):
    """The smallest covering rows [lo, hi) of dimension 0 (size n) that `index` reads, and the
    index to apply to those rows so that the result is the tensor's own [index]; None when the
    index is not one of these forms (the whole tensor is read then)."""
    n = shape[0]
    items = index if isinstance(index, tuple) else (index,)
    if items and items[0] is Ellipsis:
        rest = items[1:]
        if not rest or sum(1 for x in rest if x is not None) < len(shape):
            return None            # the Ellipsis covers dimension 0: every row
        items = rest               # it stands for no dimension: rest[0] indexes dimension 0
    if not items:
        return None
    first, rest = items[0], items[1:]
    if isinstance(first, bool) or not isinstance(first, (int, slice)):
        if hasattr(first, "__index__") and not isinstance(first, bool) and \
                not hasattr(first, "shape"):
            first = int(first.__index__())
        else:
            return None
    if isinstance(first, int):
        i = first + n if first < 0 else first
        if not 0 <= i < n:
            raise IndexError(f"index {first} is out of bounds for dimension 0 with size {n}")
        return i, i + 1, (0,) + rest
    start, stop, step = first.indices(n)
    if step < 0:
        if pt:
            raise ValueError("step must be greater than zero")
        count = len(range(start, stop, step))
        if count == 0:
            return None
        lo, hi = start + step * (count - 1), start + 1
        return lo, hi, (slice(start - lo, None if stop - lo < 0 else stop - lo, step),) + rest
    count = len(range(start, stop, step))
    if count == 0:
        return None
    lo, hi = start, start + step * (count - 1) + 1
    return lo, hi, (slice(0, hi - lo, step),) + rest


def _np_index(index, shape):
    """safetensors' indexer for framework "np", on a tensor of `shape`: ints (negative ones
    counted from the end), slices with steps, and an empty list (no rows); its errors, as
    SliceError, in its words. Returns the index for NumPy to apply. Beyond what safetensors
    takes: negative slice bounds (Python's meaning), `...` and None (NumPy's)."""
    if isinstance(index, list):
        if index:
            raise SliceError("Non empty lists are not implemented")
        return (slice(0, 0),)
    items = index if isinstance(index, tuple) else (index,)
    n_dims = sum(1 for x in items if x is not None and x is not Ellipsis)
    if sum(1 for x in items if x is Ellipsis) > 1:
        raise SliceError("an index can only have a single ellipsis ('...')")
    expanded, used = [], 0
    for x in items:                      # each item with the dimension it indexes (None: none)
        if x is Ellipsis:
            width = max(0, len(shape) - n_dims)
            expanded += [(slice(None), used + k) for k in range(width)]
            used += width
        elif x is None:
            expanded.append((None, None))
        else:
            expanded.append((x, used))
            used += 1
    out, shown = [], []
    for x, d in expanded:                # safetensors' first pass: each item to an indexer
        if x is None:
            out.append(None)
            continue
        size = shape[d] if d < len(shape) else 0
        if isinstance(x, slice):
            step = 1 if x.step is None else _int(x.step, d)
            if step <= 0:
                raise SliceError(f"Invalid step {step} for dimension {d}: steps must be "
                                 f"greater than zero")
            start = None if x.start is None else _bound(_int(x.start, d), size)
            stop = None if x.stop is None else _bound(_int(x.stop, d), size)
            out.append(slice(start, stop, step))
            shown.append(("" if start is None else str(start)) + ":" +
                         ("" if stop is None else str(stop)) + ("" if step == 1 else f":{step}"))
        else:
            i = _int(x, d)
            if i < 0:
                if i + size < 0:
                    raise SliceError(f"Invalid index {i} for dimension {d} of size {size}")
                i += size
            out.append(i)
            shown.append(str(i))
    where = f"Error during slicing [{', '.join(shown)}] with shape {list(shape)}:"
    if used > len(shape):
        raise SliceError(f"{where} more slicing indexes than dimensions in tensor")
    for (x, d), y in reversed(list(zip(expanded, out))):   # its bounds check, innermost first
        if x is None:
            continue
        size = shape[d]
        if isinstance(y, int):
            lo, hi = y, y + 1
        else:
            lo = 0 if y.start is None else y.start
            hi = size if y.stop is None else y.stop
        if lo > size or hi > size or (isinstance(y, int) and lo >= size):
            asked = lo if lo >= size and (isinstance(y, int) or lo > size) else hi - 1
            raise SliceError(f"{where} index {asked} out of bounds for tensor dimension #{d} "
                             f"of size {size}")
    return tuple(out)


def _int(x, d):
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        raise SliceError(f"Unsupported index {x!r} for dimension {d}: ints, slices, '...', "
                         f"None and an empty list are")
    return int(x.__index__())


def _bound(b, size):
    """A slice bound as safetensors reads it; a negative one (which it cannot take) as Python
    reads it, counted from the end and clamped at 0."""
    return b if b >= 0 else max(0, b + size)


class _Slice:
    """What get_slice() returns: the tensor's shape and dtype without touching its data, and
    indexing (``[...]``) as PyTorch (or NumPy) indexes the whole tensor. In modes heap and on
    CUDA devices, while the whole model is not loaded, an index that reads part of dimension 0
    (an int, a slice, either first in a tuple) loads only the rows it covers; any other index
    reads the whole tensor, through the whole model. The result views the loaded memory."""

    def __init__(self, owner, name):
        self._owner = owner
        self._name = name
        self._info = owner._info(name)

    def get_shape(self):
        return list(self._owner._delivered_shape(self._info))

    def get_dtype(self):
        return self._owner._dtype_name(self._info)

    def __getitem__(self, index):
        owner = self._owner
        if owner._framework_name == "np":
            # safetensors' own indexer and its words; what it takes, NumPy then applies
            index = _np_index(index, owner._delivered_shape(self._info))
        try:
            part = owner._part_of(self._info, index)
            if part is not None:
                return part
            return owner.get_tensor(self._name)[index]
        except Error:
            raise
        except IndexError as e:       # the framework's own words, as a weightmap.Error too
            raise SliceError(str(e)) from None
        except ValueError as e:       # torch: a negative step
            raise ArgumentError(str(e)) from None


class safe_open:
    """safe_open(filename, framework="pt", device="cpu", *, backend=None, mode=None, lock=None,
    dtype=None)

    Opens a safetensors or GGUF file as safetensors.safe_open does (a path to one shard of a
    sharded checkpoint is that shard alone: its tensors, its metadata), a shard set through its
    index (NAME.safetensors.index.json), or a list or tuple of files as one set (a GGUF split set
    as the list of its parts, in order), and reads the header; the tensors are loaded by `mode`
    at the first tensor asked for. A context manager: leaving it calls close().
    Safe to use from any number of threads: the load runs once, the others wait for it.

    framework  "pt" (PyTorch tensors) or "np" (NumPy arrays)
    device     "cpu", "cuda", "cuda:N", N or a torch.device (CUDA: every tensor is copied once
               to device memory at load, through the staged path)
    backend    safetensors 0.8's: "mmap" (mode "mmap-private") or "pread" (mode "heap")
    mode       "mmap-private" (the CPU's default: writable copy-on-write tensors; the file never
               changes; the mapping is commit-charged), "mmap" (shared and read-only: a PyTorch
               write faults), "heap" (private memory read with pread; the default on CUDA)
    lock       None, "required" (mlock every byte or fail) or "best-effort"
    dtype      None, or "f32"/"f16"/"bf16"/"f64" (or torch/numpy dtypes): convert every tensor
               whose type converts (GGUF quantized blocks included) on load, into private
               memory: without mode= it picks "heap"; another mode or a device other than
               "cpu" raises ArgumentError (a ValueError) here. Without it, quantized GGUF tensors come as their raw blocks
               (uint8, shape (..., bytes of a row)).

    Tensors view the loaded memory without a copy and keep it alive; close() gives everything
    back as soon as no tensor is alive. Every error raised is a weightmap.Error (alias
    SafetensorError; a subclass of safetensors.SafetensorError where safetensors is installed):
    FormatError (also a ValueError), NotFoundError (a FileNotFoundError; a missing file says
    "No such file or directory: PATH", as safetensors), TensorNotFoundError (a KeyError),
    ClosedError (a ValueError), ArgumentError (a ValueError: a bad argument), SliceError (an
    IndexError: an index a slice cannot take), with the library's message; an argument of the
    wrong Python type raises Python's own TypeError.
    """

    def __init__(self, filename, framework="pt", device="cpu", *, backend=None, mode=None,
                 lock=None, dtype=None, prefetch=False, threads=0):
        if framework not in _FRAMEWORKS:
            raise ArgumentError(f"framework must be 'pt' or 'np', not {framework!r}")
        self._backend, self._device = _parse_device(device)
        on_device = self._backend != _c.BACKEND_CPU
        to = _parse_dtype(dtype)
        if to is not None:
            # Conversion happens on load, into private memory: dtype= without mode= picks heap
            # (decided: not an error at the first get_tensor); any other mode, or a device, is
            # refused here, at open.
            if on_device:
                raise ArgumentError(f"dtype={dtype!r} converts on load on the CPU: it needs "
                                    f"device 'cpu', not {device!r}")
            if mode is None and backend is None:
                mode = "heap"
        mode = _parse_mode(mode, backend, on_device)
        if to is not None and mode != "heap":
            raise ArgumentError(f"dtype={dtype!r} converts on load, which needs mode 'heap' "
                                f"(or no mode), not {mode!r}")
        if lock not in _LOCKS:
            raise ArgumentError(f"lock must be None, 'required' or 'best-effort', not {lock!r}")
        self._framework_name = _FRAMEWORKS[framework]
        if self._framework_name == "np" and on_device:
            raise ArgumentError("framework 'np' needs device 'cpu' (NumPy arrays live in host memory)")
        self._to = to
        self._mode = mode
        self._lock = _LOCKS[lock]
        self._prefetch = bool(prefetch)
        self._threads = int(threads)
        self._fw = _Framework(self._framework_name, read_only=(mode == "mmap"))
        self._h = _c.Handle(_paths(filename))

    # -- the context manager and the lifecycle --
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """No further use of this object; the model and the file are released now when no
        tensor from it is alive (returns True), or when the last one is deleted (False). Other
        threads using the object meanwhile finish what they were doing or get ClosedError."""
        return self._h.close()

    @property
    def closed(self):
        return self._h.closed

    @property
    def released(self):
        """True once the C library holds nothing for this file."""
        return self._h.released

    @property
    def mode(self):
        """The load mode ("mmap-private", "mmap" or "heap")."""
        return self._mode

    def load(self):
        """Load the whole model now (otherwise the first tensor asked for loads). Returns
        self. From many threads at once: one loads, the others wait for it."""
        if not self._h.loaded:
            self._h.load(self._mode, lock=self._lock, backend=self._backend,
                         device=self._device, to=self._to, prefetch=self._prefetch,
                         threads=self._threads)
        return self

    # -- the header --
    @property
    def format(self):
        """'safetensors' or 'gguf'."""
        return self._h.format

    def keys(self):
        """Tensor names, sorted (as safetensors does)."""
        return sorted(self._h.names())

    def offset_keys(self):
        """Tensor names in file order (shard, then offset), as safetensors' offset_keys()."""
        names = self._h.names()
        return [names[t[0]] for t in self._file_order()]

    def metadata(self):
        """safetensors: the __metadata__ dict of str (None when the file has none); GGUF: every
        key-value pair, typed (str, int, float, bool, list)."""
        md = self._h.metadata()
        if self.format == "safetensors" and not md:
            return None
        return md

    def shards(self):
        """The files of the set (one for a single file)."""
        return self._h.shards()

    def stats(self):
        """The loaded model's figures (wm_model_stats): tensor_bytes, mapped_bytes, heap_bytes,
        committed, locked_bytes, device_bytes, load_seconds, ...; None before the load."""
        return self._h.stats()

    # -- tensors --
    def get_tensor(self, name):
        """The tensor `name` as a framework tensor viewing the loaded memory (no copy)."""
        info = self._info(name)
        self.load()
        return self._fw.tensor(_maker(self._h.export(info[0])), self._delivered_type(info))

    def get_slice(self, name):
        """A slice object: get_shape(), get_dtype(), and [index] for a view of a part."""
        return _Slice(self, name)

    def get_tensors(self):
        """{name: tensor} for every tensor, in file order (safetensors 0.8's get_tensors())."""
        return dict(self.tensors())

    def tensors(self):
        """(name, tensor) for every tensor in file order (shard, then offset), for consumers
        that stream; each tensor is made when asked for."""
        self.load()
        h, names = self._h, self._h.names()
        for t in self._file_order():
            yield names[t[0]], self._fw.tensor(_maker(h.export(t[0])), self._delivered_type(t))

    def __len__(self):
        return len(self._table())

    def __contains__(self, name):
        return name in self._index()

    # -- helpers --
    def _index(self):
        idx = self.__dict__.get("_by_name")
        if idx is None:
            idx = {n: i for i, n in enumerate(self._h.names())}
            self._by_name = idx
        return idx

    def _info(self, name):
        return self._table()[self._h.find(name)]

    def _table(self):
        # (index, type, shape in C order, nbytes, offset, shard, n_elements) for every tensor;
        # made once (two threads making it at once make the same list)
        table = self.__dict__.get("_all")
        if table is None:
            table = self._h.tensors()
            self._all = table
        return table

    def _file_order(self):
        return sorted(self._table(), key=lambda t: (t[5], t[4]))

    def _part_of(self, info, index):
        """The rows of one tensor that `index` reads, loaded alone (see _Slice); None when the
        whole tensor is to be read instead."""
        partial = self._mode == "heap" or self._backend != _c.BACKEND_CPU
        shape = info[2]
        if not partial or self._h.loaded or not shape or self._to is not None or \
                _c.type_info(info[1])[0] != 1:
            return None
        rows = _rows_of(index, shape, self._framework_name == "pt")
        if rows is None or (rows[0] == 0 and rows[1] == shape[0]):
            return None
        lo, hi, rest = rows
        export = self._h.load_part(info[0], lo, hi, self._mode, lock=self._lock,
                                   backend=self._backend, device=self._device,
                                   threads=self._threads)
        return self._fw.tensor(_maker(export), self._delivered_type(info))[rest]

    def _delivered_type(self, info):
        # The rule Handle.load gives the C library: every type that converts to the target.
        t = info[1]
        if self._to is not None and t != self._to and _c.convert_supported(t, self._to):
            return self._to
        return t

    def _delivered_shape(self, info):
        t = self._delivered_type(info)
        shape = tuple(info[2])
        elems, nbytes = _c.type_info(t)
        if elems > 1:                 # blocks: bytes, (..., bytes of a row) when rows are whole
            if shape and shape[-1] % elems == 0:
                return shape[:-1] + (shape[-1] // elems * nbytes,)
            return (info[3],)
        return shape

    def _dtype_name(self, info):
        return self._delivered_type(info).upper()


def _paths(filename):
    """What Handle opens: one path (a shard is that shard, an index its set), or a list or tuple
    of paths opened as one set."""
    if isinstance(filename, (list, tuple)):
        return [_os.fspath(p) for p in filename]
    return _os.fspath(filename)


def _maker(export):
    """What _Framework.tensor calls for the DLPack producer: the Export itself, or with
    code=N a copy of it whose elements are read as another type of the same width."""
    return lambda code=None: export if code is None else export.recode(code)


def _parse_mode(mode, backend, on_device):
    if backend is not None:
        if backend not in BACKENDS:
            raise ArgumentError(f"backend must be 'mmap' or 'pread', not {backend!r}")
        if mode is not None and mode != BACKENDS[backend]:
            raise ArgumentError(f"backend {backend!r} is mode {BACKENDS[backend]!r}, not {mode!r}")
        mode = BACKENDS[backend]
    if mode is None:
        return "heap" if on_device else "mmap-private"
    if not isinstance(mode, str) or mode not in MODES:
        raise ArgumentError(f"mode must be 'mmap', 'heap' or 'mmap-private', not {mode!r}")
    if on_device and mode == "mmap-private":
        return "heap"   # a device holds its own copy: every mode stages through pinned memory
    return mode


def load_file(filename, device="cpu", *, framework="pt", backend=None, mode=None, lock=None,
              dtype=None):
    """{name: tensor} for every tensor of the file, like safetensors.torch.load_file (a path
    to one shard: that shard's tensors; an index or a list of files: the whole set); the
    tensors view the loaded memory (on the CPU mode "mmap-private" by default: writable,
    copy-on-write) and keep it alive; the model is released when the last of them is
    deleted."""
    with safe_open(filename, framework=framework, device=device, backend=backend, mode=mode,
                   lock=lock, dtype=dtype) as f:
        return f.get_tensors()


class PooledModel:
    """One use of a model of a :class:`Pool` (``Pool.get``). ``put()`` (or leaving the
    ``with``) gives the use back: the model stays resident, idle, until the pool needs its room.
    ``buffer(name)`` is a memoryview of a tensor's bytes (read-only in mode "mmap"); while one is
    alive the use is not back (its last release gives it back), so no view outlives its bytes."""

    def __init__(self, c_model):
        self._m = c_model

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._m.in_use:
            self.put()

    def put(self):
        """Gives the use back; a second put() raises ArgumentError naming the file."""
        self._m.put()

    @property
    def path(self):
        return self._m.path

    @property
    def mode(self):
        return self._m.mode

    @property
    def in_use(self):
        return self._m.in_use

    def keys(self):
        return self._m.names()

    def buffer(self, name):
        return self._m.buffer(name)


class Pool:
    """Models under a budget (the C library's wm_pool): ``get(path)`` returns the resident model
    or loads it, first evicting the least recently used idle models until the new one's cost
    (wm_model_cost) fits in ``budget`` host bytes (and ``device_budget`` per device); every
    eviction is proven by the ledger; a model in use is never evicted; a model that cannot fit
    is refused (Error naming the file) before anything is evicted. ::

        with weightmap.Pool(budget=2 << 30) as pool:
            with pool.get("a.gguf", mode="mmap") as m:
                emb = m.buffer("token_embd.weight")
                ...
                del emb

    ``close()`` (or leaving the ``with``) releases every model; it raises Error naming a model
    still in use and leaves the pool open. ``sleep=True``: an idle device model that must make
    room sleeps in host memory (within the budget) instead of going, and its next get
    wakes it (WM_POOL_SLEEP). Thread-safe: gets and puts from several threads."""

    def __init__(self, budget=0, *, device_budget=0, sleep=False):
        self._p = _c.Pool(int(budget), int(device_budget), bool(sleep))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def get(self, filename, *, mode=None, device="cpu", lock=None, threads=0):
        """A :class:`PooledModel` of `filename` loaded with `mode` (default "mmap-private" on the
        CPU, "heap" on a device) on `device` ("cpu", "cuda:N")."""
        backend, index = _parse_device(device)
        on_device = backend != _c.BACKEND_CPU
        m = _parse_mode(mode, None, on_device)
        if lock not in _LOCKS:
            raise ArgumentError(f"lock must be None, 'required' or 'best-effort', not {lock!r}")
        return PooledModel(self._p.get(_os.fspath(filename), m, _LOCKS[lock], backend, index,
                                       threads))

    def put(self, model):
        """The same as ``model.put()``."""
        model.put()

    def stats(self):
        """wm_pool_stats as a dict: resident, in_use, held, held_peak, loads, hits, wakes,
        evictions, returned, unproven, last_get_seconds, last_returned, last_evicted,
        returned_device, sleeps, asleep; and (1.8) the last get's wake and sleeps part by part,
        last_wake (alloc_seconds, copy_seconds, unregister_seconds, free_seconds, bytes) and
        last_sleep (seconds, alloc_seconds, register_seconds, copy_seconds, free_seconds, bytes):
        zeros where there was none."""
        return self._p.stats()

    def trim(self):
        """Evicts every idle model now; the bytes returned."""
        return self._p.trim()

    def close(self):
        self._p.close()
