"""safetensors 0.8's safe_open surface, as code written for it uses it (python/tests).

backend= names, get_tensors(), keys() sorted, offset_keys(), metadata(), SafetensorError,
FileNotFoundError; every dtype safetensors 0.8 defines handed over with the framework's type
(raw bytes where it has none); get_slice indexing as PyTorch indexes the whole tensor, with its
errors; a slice in heap mode reads and holds only its rows (the ledger, /proc/self/io); and the
access pattern of transformers' loader (a thread pool of get_slice(...)[...] and get_tensor,
then copy_ and in-place ops), and weightmap.loading() replacing safe_open where it is bound.
"""
import concurrent.futures
import json
import os
import struct
import sys
import types

import numpy as np
import pytest
import torch

import weightmap
from conftest import check_nothing_held, cli, fake_safetensors

DEVICE = os.environ.get("WM_TEST_DEVICE", "cpu")


def write_safetensors(path, entries, metadata=None):
    """entries: [(name, dtype, shape, bytes)] written in order, as safetensors lays them out."""
    header, blobs, off = {}, [], 0
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return str(path)


# (dtype, shape, bytes, torch type name or None (bytes), numpy type name or None (bytes))
DTYPES = [
    ("BOOL", (3,), 3, "bool", "bool_"), ("U8", (3,), 3, "uint8", "uint8"),
    ("U16", (3,), 6, "uint16", "uint16"), ("U32", (3,), 12, "uint32", "uint32"),
    ("U64", (3,), 24, "uint64", "uint64"), ("I8", (3,), 3, "int8", "int8"),
    ("I16", (3,), 6, "int16", "int16"), ("I32", (3,), 12, "int32", "int32"),
    ("I64", (3,), 24, "int64", "int64"), ("F16", (3,), 6, "float16", "float16"),
    ("BF16", (3,), 6, "bfloat16", None), ("F32", (3,), 12, "float32", "float32"),
    ("F64", (3,), 24, "float64", "float64"), ("C64", (3,), 24, "complex64", "complex64"),
    ("F8_E4M3", (4,), 4, "float8_e4m3fn", None), ("F8_E5M2", (4,), 4, "float8_e5m2", None),
    ("F8_E8M0", (4,), 4, "float8_e8m0fnu", None),
    ("F8_E4M3FNUZ", (4,), 4, "float8_e4m3fnuz", None),
    ("F8_E5M2FNUZ", (4,), 4, "float8_e5m2fnuz", None),
    ("F4", (2, 4), 4, "float4_e2m1fn_x2", None), ("F6_E2M3", (2, 4), 6, None, None),
    ("F6_E3M2", (4,), 3, None, None),
]
SIGNED_TWIN = {"uint16": "int16", "uint32": "int32", "uint64": "int64"}


@pytest.fixture
def every_dtype(tmp_path):
    entries = [(d, d, shape, bytes((i * 37 + k) % 256 for k in range(n)))
               for i, (d, shape, n, _, _) in enumerate(DTYPES)]
    for name, _, _, data in entries:
        if name == "BOOL":
            entries[0] = (name, "BOOL", (3,), bytes([1, 0, 1]))
    return write_safetensors(tmp_path / "dtypes.safetensors", entries, {"format": "pt"}), entries


def torch_type(name):
    """The torch type a dtype comes as with this torch (uint8 bytes where it has none)."""
    if name is None:
        return torch.uint8
    t = getattr(torch, name, None)
    if t is None and name in SIGNED_TWIN:       # torch < 2.3: the same bits, signed
        return getattr(torch, SIGNED_TWIN[name])
    return t if t is not None else torch.uint8


def test_every_safetensors_dtype(every_dtype):
    path, entries = every_dtype
    raw = {name: data for name, _, _, data in entries}
    with weightmap.safe_open(path, framework="pt") as f:
        for dtype, shape, n, tname, _ in DTYPES:
            t = f.get_tensor(dtype)
            assert f.get_slice(dtype).get_dtype() == dtype
            assert t.dtype == torch_type(tname), (dtype, t.dtype)
            assert t.contiguous().view(torch.uint8).numpy().tobytes() == raw[dtype], dtype
            if tname is not None and torch_type(tname) != torch.uint8:
                # float4_e2m1fn_x2 holds two F4 values an element: the last dimension halves
                want = shape[:-1] + (shape[-1] // 2,) if dtype == "F4" else shape
                assert tuple(t.shape) == want, (dtype, tuple(t.shape))
        del t
    with weightmap.safe_open(path, framework="np") as f:
        for dtype, shape, n, _, nname in DTYPES:
            a = f.get_tensor(dtype)
            want = {"BF16": np.uint16}.get(dtype, np.dtype(nname) if nname else np.uint8)
            assert a.dtype == want, (dtype, a.dtype)
            assert a.tobytes() == raw[dtype]
        del a


def test_surface(made, tmp_path):
    path = made["safetensors"]
    assert weightmap.SafetensorError is weightmap.Error
    with weightmap.safe_open(path, "pt", "cpu", backend="pread") as f:
        assert f.mode == "heap"
        got = f.get_tensors()
        assert list(got) == f.offset_keys() and sorted(got) == f.keys()
        for name in f.keys()[:5]:
            assert torch.equal(got[name], f.get_tensor(name))
        del got
    with weightmap.safe_open(path, "pt", backend="mmap") as f:
        assert f.mode == "mmap-private"
    for bad in ("io_uring", "MMAP"):
        with pytest.raises(ValueError, match="backend must be"):
            weightmap.safe_open(path, "pt", backend=bad)
    with pytest.raises(ValueError, match="is mode 'heap'"):
        weightmap.safe_open(path, "pt", backend="pread", mode="mmap")
    with pytest.raises(FileNotFoundError):
        weightmap.safe_open(str(tmp_path / "missing.safetensors"), "pt")
    with pytest.raises(weightmap.SafetensorError):
        weightmap.safe_open(write_safetensors(tmp_path / "bad.safetensors",
                                              [("t", "F33", (1,), b"1234")]), "pt")
    d = weightmap.load_file(path, backend="pread")
    assert len(d) == len(weightmap.safe_open(path).keys())
    del d


INDICES = [0, -1, 3, slice(1, 5), slice(None, None, 2), slice(-3, None), slice(2, 100),
           slice(5, 2), (slice(1, 4), 0), (2, slice(None, None, 3)), (-2, -1), Ellipsis,
           (Ellipsis, 1), (1, Ellipsis), (), [], [0, 2], (None, 1), (slice(0, 8, 3), Ellipsis),
           slice(1, 2)]


@pytest.mark.parametrize("mode", ["mmap-private", "mmap", "heap"])
def test_get_slice_indexes_as_torch_does(made, mode):
    """Every index gives what indexing the whole tensor gives (values, shape, dtype), whether
    the slice loaded alone (heap: before the whole model) or from the loaded model."""
    path = made["safetensors"]
    with weightmap.safe_open(path, mode="heap") as f:
        full = {n: f.get_tensor(n).clone() for n in f.keys()}
    names = [n for n in sorted(full) if full[n].dim() == 2][:2] + \
        [n for n in sorted(full) if full[n].dim() == 1][:1]
    for load_first in (False, True):
        with weightmap.safe_open(path, mode=mode) as f:
            if load_first:
                f.load()
            for name in names:
                for index in INDICES:
                    try:
                        want = full[name][index]
                    except IndexError:                  # and torch's own error for the slice
                        with pytest.raises(IndexError):
                            f.get_slice(name)[index]
                        continue
                    got = f.get_slice(name)[index]
                    assert got.dtype == want.dtype and got.shape == want.shape, (name, index)
                    assert torch.equal(got, want), (name, index)
                n = full[name].shape[0]
                with pytest.raises(IndexError, match="out of bounds"):
                    f.get_slice(name)[n]
                with pytest.raises(IndexError):
                    f.get_slice(name)[-n - 1]
                with pytest.raises(ValueError, match="step must be greater than zero"):
                    f.get_slice(name)[::-1]
            del got, want
    check_nothing_held()


def rchar():
    with open("/proc/self/io") as fp:
        return int(next(l for l in fp if l.startswith("rchar:")).split()[1])


def test_a_slice_reads_and_holds_only_its_rows(made):
    """Heap mode: get_slice(name)[a:b] before anything is loaded reads and holds the rows a:b of
    that tensor (a model of their own), not the file; the ledger says so, and so does the
    kernel's count of bytes read."""
    path = made["safetensors"]
    with weightmap.safe_open(path, mode="heap") as f:
        name = max(f.keys(), key=lambda n: f._info(n)[3])
        info = f._info(name)
        rows, nbytes = info[2][0], info[3]
        part = 3 * (nbytes // rows)                 # rows 5:8
        heap0, read0 = weightmap.ledger()["heap"]["current"], rchar()
        t = f.get_slice(name)[5:8]
        read = rchar() - read0
        held = weightmap.ledger()["heap"]["current"] - heap0
        assert part <= held < part + (64 << 10), (held, part, nbytes)
        assert part <= read < part + (64 << 10), (read, part)
        assert held < nbytes // 4 and not f._h.loaded
        assert t.contiguous().view(torch.uint8).numpy().tobytes() == \
            cli("cat", path, name)[5 * (nbytes // rows):8 * (nbytes // rows)]
        cols = f.get_slice(name)[2:4, 1:3]           # rows 2:4, then a view of two columns
        assert tuple(cols.shape) == (2, 2)
    assert not f.released                             # the slices hold their own models
    del t, cols
    check_nothing_held()


def test_transformers_access_pattern(made):
    """What transformers' loader does with a safe_open handle: a thread pool materialises
    get_slice(name)[...] (and get_tensor) for every key, converts some to another dtype, then
    copies into the model's parameters and runs in-place ops on the loaded tensors (weight
    folding). The state dict equals a plain heap load; the file never changes; all is given
    back when the tensors go."""
    device = DEVICE if DEVICE != "cpu" else "cpu"
    path = made["safetensors"]
    with weightmap.safe_open(path, mode="heap") as f:
        ref = {n: f.get_tensor(n).clone() for n in f.keys()}
    before = cli("cat", path, sorted(ref)[0])
    params = {n: torch.empty_like(t, device=device) for n, t in ref.items()}
    with weightmap.safe_open(path, framework="pt", device=device) as f:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futures = {}
            for k, name in enumerate(f.keys()):
                if k % 3 == 0:
                    futures[name] = pool.submit(lambda n=name: f.get_tensor(n))
                else:
                    sl = f.get_slice(name)
                    futures[name] = pool.submit(lambda s=sl: s[...].to(device=device))
            loaded = {n: fu.result() for n, fu in futures.items()}
    for name, t in loaded.items():
        params[name].copy_(t)
        assert torch.equal(params[name].cpu(), ref[name])
        if t.is_floating_point():
            t.mul_(2).add_(1)                         # in place, on the loaded memory
            assert torch.equal(t.cpu(), ref[name] * 2 + 1)
    assert cli("cat", path, sorted(ref)[0]) == before
    del loaded, t, futures
    check_nothing_held()


def test_loading_replaces_safe_open_where_it_is_bound(made, monkeypatch):
    """weightmap.loading() swaps safetensors' safe_open/load_file for weightmap's in every
    module that bound them (as `from safetensors import safe_open` does), loads to the device
    it names, passes other frameworks to the original, and puts everything back after."""
    fake = fake_safetensors(monkeypatch, wm_test_consumer={"safe_open": "safe_open",
                                                           "safe_load_file": "load_file"})
    st, st_torch, consumer = fake.st, fake.st_torch, fake.mods["wm_test_consumer"]
    original_safe_open, original_load_file = fake.safe_open, fake.load_file
    path = made["safetensors"]
    device = DEVICE
    with weightmap.loading(device=device):
        assert consumer.safe_open is not original_safe_open and st.safe_open is consumer.safe_open
        with consumer.safe_open(path, framework="pt", device="cpu") as f:
            assert isinstance(f, weightmap.safe_open)
            t = f.get_tensor(f.keys()[0])
            assert t.device.type == torch.device(device).type
            assert t.to(device).data_ptr() == t.data_ptr()     # the consumer's .to(): a no-op
        assert consumer.safe_open(path, "np") == ("original", "np")
        d = consumer.safe_load_file(path)
        assert all(v.device.type == torch.device(device).type for v in d.values())
        with weightmap.loading(device="cpu"):                  # nested
            assert consumer.safe_open(path, "pt").mode == "mmap-private"
    assert consumer.safe_open is original_safe_open and st_torch.load_file is original_load_file
    del t, d
    check_nothing_held()


def test_a_module_imported_inside_the_block_gets_the_original_back(made, monkeypatch):
    """A module imported while the block runs (transformers imports its loading modules at the
    first from_pretrained) binds what `from safetensors import safe_open` finds then: the
    block's replacement. When the block ends it gets safetensors' own back, and so do the
    modules an inner block's import bound to the inner replacement (the outer one's then)."""
    fake = fake_safetensors(monkeypatch)
    st, original_safe_open = fake.st, fake.safe_open

    def late_import(name):             # as `from safetensors import safe_open` in a new module
        mod = types.ModuleType(name)
        mod.safe_open = sys.modules["safetensors"].safe_open
        monkeypatch.setitem(sys.modules, name, mod)
        return mod

    with weightmap.loading(device="cpu", ahead=False):
        outer = late_import("wm_test_late_outer")
        assert outer.safe_open is not original_safe_open
        outer_replacement = outer.safe_open
        with weightmap.loading(device="cpu", ahead=False):
            inner = late_import("wm_test_late_inner")
            assert inner.safe_open not in (original_safe_open, outer_replacement)
        assert inner.safe_open is outer_replacement and outer.safe_open is outer_replacement
        with outer.safe_open(made["safetensors"], framework="pt") as f:
            assert isinstance(f, weightmap.safe_open)
    assert outer.safe_open is original_safe_open and inner.safe_open is original_safe_open
    assert st.safe_open is original_safe_open
    assert outer.safe_open(made["safetensors"], "pt") == ("original", "pt")
    check_nothing_held()
