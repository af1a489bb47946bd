"""weightmap: weight files (safetensors, GGUF, their shard sets) for PyTorch and NumPy, loaded
with an explicit mode, handed over without a copy (DLPack), and every byte given back.

    import weightmap
    with weightmap.safe_open("model.safetensors", framework="pt") as f:   # mode="mmap"
        w = f.get_tensor("lm_head.weight")        # a view of the file's mapping, no copy
    del w                                         # the last view gone: the mapping is gone
    assert weightmap.ledger()["bytes"] == 0       # the C library holds nothing

Every tensor is a view of memory the C library owns (a read-only file mapping, page-allocated
heap, or CUDA device memory). A view keeps its model alive: ``close()`` (or leaving the ``with``)
releases the model at once when no view is alive, or when the last view is deleted.

Modes (``mode=``): "mmap" (the default: one shared read-only mapping, no private memory; the
tensors are read-only: NumPy arrays are not writeable, and writing a PyTorch tensor of this
mode faults), "heap" (page-aligned private memory filled by parallel reads; writable), and
"mmap-private" (a private writable mapping: written pages become private). The C library has no
default; this package chooses "mmap".
"""

import os as _os

from . import _weightmap as _c
from ._weightmap import Error, FormatError, NotFoundError, TensorNotFoundError

__all__ = ["safe_open", "load_file", "ledger", "file_regions", "mem_figures", "backend_init",
           "Error", "FormatError", "NotFoundError", "TensorNotFoundError", "MODES"]
__version__ = _c.version()

MODES = ("mmap", "heap", "mmap-private")
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
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', not {device!r} ({e})") from None


def _parse_dtype(dtype):
    if dtype is None:
        return None
    name = str(dtype).rsplit(".", 1)[-1].lower()   # torch.float16, numpy.float32, "F16"
    if name not in _DTYPES:
        raise ValueError(f"dtype must be one of f32, f16, bf16, f64 (or their torch/numpy "
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

    def tensor(self, handle, index, type_name):
        if self.name == "pt":
            return self._torch(handle, index, type_name)
        return self._numpy(handle, index, type_name)

    def _torch(self, handle, index, type_name):
        torch = self.torch
        export = handle.export(index)
        try:
            t = torch.from_dlpack(export)
        except (RuntimeError, TypeError, BufferError):
            if type_name not in ("u16", "u32", "u64"):
                raise
            # A torch without unsigned 16/32/64-bit tensors: the same bits as signed integers.
            t = torch.from_dlpack(handle.export(index, code=_c.DL_INT))
        if type_name == "bool":
            t = t.view(torch.bool)
        elif type_name in _TORCH_F8:
            dt = getattr(torch, _TORCH_F8[type_name], None)
            if dt is not None:
                t = t.view(dt)
        return t

    def _numpy(self, handle, index, type_name):
        np = self.np
        if type_name == "bf16":       # NumPy has no bfloat16: the raw bits as uint16
            export = handle.export(index, code=_c.DL_UINT)
        else:
            export = handle.export(index)
        a = np.from_dlpack(export)
        if type_name == "bool":
            a = a.view(np.bool_)
        if self.read_only:
            a.flags.writeable = False  # NumPy < 2.1 marks every DLPack import read-only itself
        return a


_TORCH_F8 = {"f8_e4m3": "float8_e4m3fn", "f8_e5m2": "float8_e5m2", "f8_e8m0": "float8_e8m0fnu"}


class _Slice:
    """What get_slice() returns: the tensor's shape and dtype without touching its data, and
    indexing (``[...]``) that returns a view of the indexed part."""

    def __init__(self, owner, name):
        self._owner = owner
        self._name = name
        self._info = owner._info(name)

    def get_shape(self):
        return list(self._owner._delivered_shape(self._info))

    def get_dtype(self):
        return self._owner._dtype_name(self._info)

    def __getitem__(self, index):
        return self._owner.get_tensor(self._name)[index]


class safe_open:
    """safe_open(path, framework="pt", device="cpu", mode="mmap", lock=None, dtype=None)

    Opens a safetensors or GGUF file, a safetensors index (NAME.safetensors.index.json) or any
    shard of a shard set, as safetensors.safe_open does, and reads its header; the tensors are
    loaded by `mode` at the first tensor asked for. A context manager: leaving it calls close().

    framework  "pt" (PyTorch tensors) or "np" (NumPy arrays)
    device     "cpu", "cuda", "cuda:N", N or a torch.device (CUDA: every tensor is copied once
               to device memory at load)
    mode       "mmap" (default; read-only shared mapping), "heap" or "mmap-private"
    lock       None, "required" (mlock every byte or fail) or "best-effort"
    dtype      None, or "f32"/"f16"/"bf16"/"f64" (or torch/numpy dtypes): convert every tensor
               whose type converts (GGUF quantized blocks included) on load; needs mode "heap"
               and device "cpu". Without it, quantized GGUF tensors come as their raw blocks
               (uint8, shape (..., bytes of a row)).

    Tensors view the loaded memory without a copy and keep it alive; close() gives everything
    back as soon as no tensor is alive. Errors of the library raise weightmap.Error (or its
    subclasses FormatError, NotFoundError, TensorNotFoundError) with the library's message.
    """

    def __init__(self, path, framework="pt", device="cpu", mode="mmap", lock=None, dtype=None,
                 prefetch=False, threads=0):
        if framework not in _FRAMEWORKS:
            raise ValueError(f"framework must be 'pt' or 'np', not {framework!r}")
        if not isinstance(mode, str) or mode not in MODES:
            raise ValueError(f"mode must be 'mmap', 'heap' or 'mmap-private', not {mode!r}")
        if lock not in _LOCKS:
            raise ValueError(f"lock must be None, 'required' or 'best-effort', not {lock!r}")
        self._backend, self._device = _parse_device(device)
        self._framework_name = _FRAMEWORKS[framework]
        if self._framework_name == "np" and self._backend != _c.BACKEND_CPU:
            raise ValueError("framework 'np' needs device 'cpu' (NumPy arrays live in host memory)")
        self._to = _parse_dtype(dtype)
        self._mode = mode
        self._lock = _LOCKS[lock]
        self._prefetch = bool(prefetch)
        self._threads = int(threads)
        self._fw = _Framework(self._framework_name, read_only=(mode == "mmap"))
        self._h = _c.Handle(_os.fspath(path))
        self._by_name = None

    # -- the context manager and the lifecycle --
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """No further use of this object; the model and the file are released now when no
        tensor from it is alive (returns True), or when the last one is deleted (False)."""
        return self._h.close()

    @property
    def closed(self):
        return self._h.closed

    @property
    def released(self):
        """True once the C library holds nothing for this file."""
        return self._h.released

    def load(self):
        """Load now (otherwise the first tensor asked for loads). Returns self."""
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
        """Tensor names in file order (shard, then offset)."""
        return [self._names[t[0]] for t in self._file_order()]

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
        return self._fw.tensor(self._h, info[0], self._delivered_type(info))

    def get_slice(self, name):
        """A slice object: get_shape(), get_dtype(), and [index] for a view of a part."""
        return _Slice(self, name)

    def tensors(self):
        """(name, tensor) for every tensor in file order (shard, then offset), for consumers
        that stream; each tensor is made when asked for."""
        self.load()
        for t in self._file_order():
            yield self._names[t[0]], self._fw.tensor(self._h, t[0], self._delivered_type(t))

    def __len__(self):
        return len(self._h.names())

    def __contains__(self, name):
        return name in self._index()

    # -- helpers --
    @property
    def _names(self):
        return self._h.names()

    def _index(self):
        if self._by_name is None:
            self._by_name = {n: i for i, n in enumerate(self._h.names())}
        return self._by_name

    def _info(self, name):
        return self._table()[self._h.find(name)]

    def _table(self):
        # (index, type, shape in C order, nbytes, offset, shard, n_elements) for every tensor
        if self._all is None:
            self._all = self._h.tensors()
        return self._all

    _all = None

    def _file_order(self):
        return sorted(self._table(), key=lambda t: (t[5], t[4]))

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


def load_file(path, device="cpu", *, framework="pt", mode="mmap", lock=None, dtype=None):
    """{name: tensor} for every tensor of the file (or shard set), like
    safetensors.torch.load_file; the tensors view the loaded memory (mode "mmap" by default:
    read-only) and keep it alive; the model is released when the last of them is deleted."""
    with safe_open(path, framework=framework, device=device, mode=mode, lock=lock,
                   dtype=dtype) as f:
        return dict(f.tensors())
