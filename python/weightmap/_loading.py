"""weightmap.loading(): code written for safetensors (transformers' from_pretrained, or any
that calls safe_open(..., device="cpu") and moves tensors itself) loads through weightmap,
straight to a device.

    with weightmap.loading(device="cuda:0"):
        model = AutoModelForCausalLM.from_pretrained(path, device_map="cuda:0")

While the block runs, safetensors.safe_open, safetensors.torch.safe_open and
safetensors.torch.load_file (and every name another module bound to one of them, as
`from safetensors import safe_open` does) are weightmap's, opening each file for PyTorch on
`device` whatever device the caller asked for: its tensors are device memory already, so the
consumer's own .to(device) is a no-op, and they are read once through the staged path. Opens
for another framework go to the original functions. The names are put back when the block
ends; the tensors stay valid, and their memory goes back when the last of them is deleted.
A module imported inside the block (transformers imports its loading modules at the first
from_pretrained) binds the replacement itself; it too gets the original back at the end. The
replacement is process-wide (every thread sees it); blocks may nest. Where a load reads
the file (CUDA, or mode "heap"), transformers' from_pretrained of a local folder, or the first
open of a shard of a sharded checkpoint, starts the set's loads on a thread of the block
(_prefetch.py): the files load while the consumer works.
"""
import contextlib
import os
import sys
import threading

_patch_lock = threading.Lock()
_NAMES = (("safetensors", "safe_open"), ("safetensors.torch", "safe_open"),
          ("safetensors.torch", "load_file"))


def _originals():
    """{id(original): (original, kind)} for the safetensors functions that are importable."""
    found = {}
    for mod_name, attr in _NAMES:
        mod = sys.modules.get(mod_name)
        if mod is None:
            try:
                __import__(mod_name)
            except ImportError:
                continue
            mod = sys.modules[mod_name]
        fn = getattr(mod, attr, None)
        if fn is not None:
            found[id(fn)] = (fn, attr)
    return found


def _replacement(original, kind, device, mode, ahead):
    from . import load_file, safe_open

    if kind == "load_file":
        def patched_load_file(filename, device_=None, **kw):
            backend = kw.get("backend") if mode is None else None
            return load_file(filename, device=device, mode=mode, backend=backend)
        return patched_load_file

    class patched_safe_open(safe_open):
        def __init__(self, filename, framework="pt", device_=None, *args, **kw):
            backend = kw.get("backend") if mode is None else None
            super().__init__(filename, framework="pt", device=device, mode=mode,
                             backend=backend)
            if ahead is not None:
                ahead.opened(self, filename)

        def __new__(cls, filename, framework="pt", *args, **kw):
            if framework not in ("pt", "torch", "pytorch"):
                return original(filename, framework, *args, **kw)
            return super().__new__(cls)

        # Where a handle would load (the whole model, or rows alone), it first takes over the
        # model the block's loader thread loaded ahead for its file, if any (_prefetch.py).
        def load(self):
            if ahead is not None and not self._h.loaded:
                ahead.claim(self)
            return super().load()

        def _part_of(self, info, index):
            if ahead is not None and not self._h.loaded:
                ahead.claim(self)
            return super()._part_of(info, index)

    patched_safe_open.__name__ = "safe_open"
    return patched_safe_open


# Where transformers' from_pretrained is defined: the model base class, and the Auto classes'
# base (AutoModelForCausalLM.from_pretrained reads the config and picks the class first).
_FROM_PRETRAINED = (("transformers.modeling_utils", "PreTrainedModel"),
                    ("transformers.models.auto.auto_factory", "_BaseAutoModelClass"))


def _start_at_from_pretrained(pre):
    """Where transformers is imported: its from_pretrained (the model base class's and the Auto
    classes'), for the block, tells the loader of a local checkpoint folder at the call, so
    that the files load while transformers reads the config and builds the model (measured on
    the H200, a warm 8.2 GiB checkpoint: the Auto class reached PreTrainedModel.from_pretrained
    0.11 s into the call and opened the three shards, all at once, at 0.14 s). Returns what to
    put back."""
    undo = []
    for mod_name, cls_name in _FROM_PRETRAINED:
        mod = sys.modules.get(mod_name)
        cls = getattr(mod, cls_name, None) if mod is not None else None
        original = cls.__dict__.get("from_pretrained") if cls is not None else None
        if not isinstance(original, classmethod):
            continue
        func = original.__func__

        def from_pretrained(klass, pretrained_model_name_or_path=None, *args, _func=func,
                            **kwargs):
            if isinstance(pretrained_model_name_or_path, (str, os.PathLike)):
                pre.folder(pretrained_model_name_or_path)
            return _func(klass, pretrained_model_name_or_path, *args, **kwargs)

        from_pretrained.__wrapped__ = func
        from_pretrained.__doc__ = func.__doc__
        setattr(cls, "from_pretrained", classmethod(from_pretrained))
        undo.append((cls, "from_pretrained", original))
    return undo


@contextlib.contextmanager
def loading(device="cuda:0", mode=None, ahead=True):
    """Within the block, safetensors' safe_open / load_file (wherever bound) are weightmap's,
    loading every PyTorch open to `device` (default "cuda:0"; "cpu" too) in `mode` (None: the
    device's default, heap through the staged path on CUDA, mmap-private on the CPU).

    With `ahead` (the default), where a load reads the file (a CUDA device, or mode "heap"), the
    first open of a shard of a sharded checkpoint (its NAME.safetensors.index.json beside it),
    or transformers' from_pretrained of a local folder (at the call, before it builds the
    model), starts loading the files on threads of the block's own, while there is room for
    them, so that they are on their way while the consumer works: a from_pretrained folder as
    one set in one load (each shard's handle a view of its part), other opens shard by shard,
    two at a time; each file is still read once (_prefetch.py)."""
    from ._prefetch import Prefetcher
    from . import _parse_device, _parse_mode, _c
    backend, _ = _parse_device(device)
    on_device = backend != _c.BACKEND_CPU
    reads = on_device or _parse_mode(mode, None, on_device) == "heap"
    pre = Prefetcher(device, mode) if ahead and reads else None
    with _patch_lock:
        originals = _originals()
        swaps = {key: _replacement(fn, kind, device, mode, pre)
                 for key, (fn, kind) in originals.items()}
        undo = []
        for d, name, value in _c.bindings(list(sys.modules.values()),
                                          tuple(fn for fn, _ in originals.values())):
            undo.append((d, name, value))
            d[name] = swaps[id(value)]
        if pre is not None:
            undo += _start_at_from_pretrained(pre)
            pre._event("patched", "")
    try:
        yield pre
    finally:
        with _patch_lock:
            for d, name, value in reversed(undo):
                if isinstance(d, dict):
                    d[name] = value
                else:
                    setattr(d, name, value)
            # A module imported inside the block bound the replacement itself (transformers
            # imports its loading modules at the first from_pretrained, `from safetensors import
            # safe_open` then binds what the block put there): it gets the original back too, or
            # it would go on loading through this block's (closed) loader after the block.
            back = {id(new): originals[key][0] for key, new in swaps.items()}
            for d, name, value in _c.bindings(list(sys.modules.values()),
                                              tuple(swaps.values())):
                d[name] = back[id(value)]
        if pre is not None:
            pre.close()
