"""The weightmap Python package: the API, zero-copy views, every byte back, errors.

Run by `make test-python` (pytest under /usr/bin/python3 with Debian's python3-torch and
python3-numpy). Every test ends with conftest.check_nothing_held(): ledger all zero, no mapping
of any weight file in /proc/self/maps. Set WM_TEST_DEVICE=cuda:0 to run the device cases on a GPU
(they are skipped where the build has no CUDA backend or no GPU answers).
"""
import gc
import os
import threading

import numpy as np
import pytest
import torch

import weightmap
from conftest import check_nothing_held, cli, device_or_skip, fixture, held, maps_of

MODES = ["heap", "mmap", "mmap-private"]
CYCLES = 20
DEVICE = os.environ.get("WM_TEST_DEVICE", "cpu")
PAGE = os.sysconf("SC_PAGE_SIZE")


def refused_on_device(path, mode, device):
    """Nothing is refused on a device any more: the package loads every mode to a device
    through the staged path (mmap-private, which the CUDA backend has not, becomes heap)."""
    return False


def raw_bytes(t):
    """The bytes of a tensor or array (copied to the host)."""
    if isinstance(t, torch.Tensor):
        t = t.cpu().contiguous()
        return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return np.ascontiguousarray(t).tobytes()


def byte_sum(t):
    """The sum of a tensor's bytes, computed where it lives (touches every byte)."""
    if isinstance(t, torch.Tensor):
        return int(t.reshape(-1).view(torch.uint8).sum(dtype=torch.int64)) if t.numel() else 0
    return int(t.reshape(-1).view(np.uint8).sum(dtype=np.int64))


# ---- the API ------------------------------------------------------------------------------------

def test_safetensors_values_and_metadata():
    path = fixture("safetensors/hf-sample-overall.safetensors")
    with weightmap.safe_open(path, framework="pt") as f:
        assert f.format == "safetensors"
        assert f.keys() == sorted(["B", "H", "I", "b", "d", "e", "f", "h", "i"])
        assert f.metadata() == {"test": "a"}
        e = f.get_tensor("e")
        assert e.dtype == torch.float16 and list(e.shape) == [6]
        assert e.tolist() == [-3.0, -2.0, -1.0, 0.0, 1.0, 2.0]
        assert f.get_tensor("d").dtype == torch.float64
        assert f.get_tensor("b").tolist() == [-3, -2, -1, 0, 1, 2]
        s = f.get_slice("f")
        assert s.get_shape() == [6] and s.get_dtype() == "F32"
        assert s[2:4].tolist() == [-1.0, 0.0]
        del e, s
    with weightmap.safe_open(path, framework="np") as f:
        a = f.get_tensor("f")
        assert a.dtype == np.float32 and a.tolist() == [-3.0, -2.0, -1.0, 0.0, 1.0, 2.0]
        assert f.get_tensor("B").dtype == np.uint8
        del a


def test_every_tensor_matches_the_cli_bytes(made):
    """Each tensor's bytes are those `weightmap cat` prints, for every format and a shard set."""
    for kind in ("gguf", "safetensors", "shards", "gguf_split"):
        with weightmap.safe_open(made[kind], framework="pt") as f:
            names = f.keys()
            assert len(names) > 10
            for name in names[:: max(1, len(names) // 8)]:
                # the CLI opens the set of a list's first part with --set
                where = [made[kind]] if isinstance(made[kind], str) else ["--set", made[kind][0]]
                assert raw_bytes(f.get_tensor(name)) == cli("cat", *where, name), (kind, name)
            assert len(f.shards()) == (2 if kind in ("shards", "gguf_split") else 1)


def test_bf16_and_bool():
    path = fixture("safetensors/runai-test.safetensors")
    with weightmap.safe_open(path, framework="pt") as f:
        assert f.metadata() == {"format": "pt"}
        bf = f.get_tensor("tensor1.bfloat16")
        f32 = f.get_tensor("tensor1.float32")
        assert bf.dtype == torch.bfloat16 and bf.shape == f32.shape
        assert torch.equal(bf.float(), f32.to(torch.bfloat16).float())
        b = f.get_tensor("tensor1.bool")
        assert b.dtype == torch.bool
        del bf, f32, b
    with weightmap.safe_open(path, framework="np") as f:
        bits = f.get_tensor("tensor1.bfloat16")     # NumPy has no bfloat16: the raw bits
        assert bits.dtype == np.uint16 and f.get_tensor("tensor1.bool").dtype == np.bool_
        del bits


def test_gguf_metadata_and_quantized_blocks():
    path = fixture("gguf/stories260K-q4_0.gguf")
    with weightmap.safe_open(path, framework="pt") as f:
        md = f.metadata()
        assert md["general.architecture"] == "llama"
        assert md["llama.block_count"] == 5
        assert len(md["tokenizer.ggml.tokens"]) == 512
        t = f.get_tensor("blk.0.attn_q.weight")      # q4_0, 64 x 64: blocks of 32 -> 18 bytes
        assert f.get_slice("blk.0.attn_q.weight").get_dtype() == "Q4_0"
        assert t.dtype == torch.uint8 and tuple(t.shape) == (64, 64 // 32 * 18)
        assert raw_bytes(t) == cli("cat", path, "blk.0.attn_q.weight")
        del t
    with weightmap.safe_open(path, framework="pt", mode="heap", dtype=torch.float32) as f:
        t = f.get_tensor("blk.0.attn_q.weight")
        assert t.dtype == torch.float32 and tuple(t.shape) == (64, 64)
        assert f.get_slice("blk.0.attn_q.weight").get_dtype() == "F32"
        assert raw_bytes(t) == cli("cat", path, "blk.0.attn_q.weight", "--as", "f32")
        del t
    typed = fixture("gguf/ratchet-dummy.gguf")
    with weightmap.safe_open(typed, framework="np") as f:
        md = f.metadata()
        assert md["some.parameter.bool"] is True
        assert md["some.parameter.int64"] == -1311768467463790321
        assert md["some.parameter.arr.str"] == ["hello", "world", "!"]


def test_tensors_in_file_order(made):
    for kind in ("gguf", "safetensors", "shards", "gguf_split"):
        with weightmap.safe_open(made[kind], framework="np") as f:
            table = {t[0]: t for t in f._table()}
            order = [f._h.find(n) for n, _ in f.tensors()]
            places = [(table[i][5], table[i][4]) for i in order]   # (shard, offset)
            assert places == sorted(places) and len(order) == len(f)
            assert f.offset_keys() == [f._h.names()[i] for i in order]


def test_load_file_is_a_dict_of_views(made):
    d = weightmap.load_file(made["safetensors"])
    with weightmap.safe_open(made["safetensors"]) as f:
        assert sorted(d) == f.keys()
    assert held()           # the dict's tensors hold the model
    assert len(maps_of(made["safetensors"])) == 1
    del d
    check_nothing_held()


def test_empty_file():
    path = fixture("safetensors/runai-empty.safetensors")
    assert weightmap.load_file(path) == {}
    with weightmap.safe_open(path) as f:
        assert f.keys() == [] and f.metadata() is None


# ---- every byte back ----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("framework", ["pt", "np"])
def test_cycles_return_everything(made, mode, framework):
    """20 load/close cycles in each mode: while loaded the ledger and the file's mappings show
    the model; after each close (and the views' deletion) the ledger is exactly 0 and no region
    of the process maps the file."""
    device = "cpu" if framework == "np" else device_or_skip()
    path = made["gguf"]
    if refused_on_device(path, mode, device):
        return
    ref = None
    for cycle in range(CYCLES):
        with weightmap.safe_open(path, framework=framework, mode=mode, device=device) as f:
            tensors = dict(f.tensors())
            total = sum(byte_sum(t) for t in tensors.values())   # reads every byte
            ref = total if ref is None else ref
            assert total == ref
            l = weightmap.ledger()
            if device != "cpu":
                assert l["device"]["current"] >= f.stats()["tensor_bytes"]
                assert maps_of(path) == []
            elif mode == "heap":
                assert l["heap"]["current"] >= f.stats()["tensor_bytes"]
                assert maps_of(path) == []
            else:
                cat = "map_shared" if mode == "mmap" else "map_private"
                assert l[cat]["current"] >= f.stats()["tensor_bytes"]
                assert len(maps_of(path)) == 1
        assert not f.released    # the views are alive
        del tensors
        assert f.released
        check_nothing_held()


@pytest.mark.parametrize("mode", MODES)
def test_view_outlives_close(made, mode):
    """A view taken before close() keeps its bytes valid after it; deleting it releases all."""
    device = device_or_skip()
    path = made["safetensors"]
    if refused_on_device(path, mode, device):
        return
    with weightmap.safe_open(path, framework="pt", mode=mode, device=device) as f:
        name = f.keys()[3]
        t = f.get_tensor(name)
        s = f.get_slice(f.keys()[4])[1:3]            # a view of a view
    assert f.closed and not f.released
    gc.collect()
    assert held()
    if device == "cpu" and mode != "heap":
        assert len(maps_of(path)) == 1
    assert raw_bytes(t) == cli("cat", path, name)    # still the file's bytes
    with pytest.raises(ValueError, match="closed"):
        f.get_tensor(name)                           # closed: no new views
    del t
    assert not f.released                            # the slice still holds it
    assert s.numel() > 0
    del s
    assert f.released
    check_nothing_held()


def test_close_without_views_releases_at_once(made):
    f = weightmap.safe_open(made["gguf"], mode="heap")
    f.load()
    assert weightmap.ledger()["heap"]["current"] > 0
    assert f.close() is True and f.released
    check_nothing_held()


def test_numpy_views_of_a_read_only_mapping_are_not_writeable(made):
    with weightmap.safe_open(made["gguf"], framework="np", mode="mmap") as f:
        a = f.get_tensor(f.keys()[0])
        assert not a.flags.writeable
        with pytest.raises(ValueError):
            a[0] = 1
        del a


def test_writes_to_mmap_private_privatise_pages_not_the_file(made):
    path = made["safetensors"]
    with weightmap.safe_open(path, framework="pt", mode="mmap-private") as f:
        name = max(f.keys(), key=lambda n: f.get_tensor(n).numel())
        before = cli("cat", path, name)
        t = f.get_tensor(name)
        t.view(-1)[:4096].zero_()                    # writes: these pages become private
        regions = weightmap.file_regions(path)
        assert len(regions) == 1 and regions[0]["privatised"] > 0
        assert raw_bytes(t) != before
        del t
    assert cli("cat", path, name) == before          # the file is unchanged


def test_default_tensors_are_writable_copy_on_write(made):
    """The default (mmap-private) hands out writable tensors, as safetensors does: reading
    privatises nothing, a write privatises exactly the pages written, the file never changes.
    (Mode "mmap", asked for by name, stays read-only: a PyTorch write to it faults, as
    docs/PYTHON.md says.)"""
    path = made["safetensors"]
    with weightmap.safe_open(path, framework="pt") as f:
        assert f.mode == "mmap-private"
        name = max(f.keys(), key=lambda n: f._info(n)[3])     # the largest tensor
        before = cli("cat", path, name)
        t = f.get_tensor(name)
        byte_sum(t)                                   # reads every page
        assert [r["privatised"] for r in weightmap.file_regions(path)] == [0]
        t.view(-1).view(torch.uint8)[:1].add_(1)      # one byte written: one page copied
        assert [r["privatised"] for r in weightmap.file_regions(path)] == [PAGE]
        assert raw_bytes(t) != before
        del t
    assert cli("cat", path, name) == before           # the file is unchanged
    d = weightmap.load_file(path)
    assert all(t.view(-1)[:1].zero_() is not None for t in d.values() if t.numel())
    del d
    assert cli("cat", path, name) == before


def test_heap_tensors_are_writable(made):
    with weightmap.safe_open(made["gguf"], framework="pt", mode="heap") as f:
        name = f.keys()[0]
        t = f.get_tensor(name)
        t.zero_()
        assert raw_bytes(f.get_tensor(name)) == bytes(t.numel() * t.element_size())
        del t


def test_last_view_deleted_on_another_thread(made):
    """A consumer may drop its tensor on any thread: the deleter takes the GIL and releases."""
    with weightmap.safe_open(made["gguf"], framework="pt", mode="mmap") as f:
        box = [f.get_tensor(f.keys()[0])]
    assert not f.released
    th = threading.Thread(target=box.clear)
    th.start()
    th.join()
    assert f.released
    check_nothing_held()


def test_lock_best_effort(made):
    with weightmap.safe_open(made["gguf"], mode="mmap", lock="best-effort") as f:
        f.load()
        assert f.stats()["locked_bytes"] == weightmap.ledger()["locked"]["current"]
    check_nothing_held()


def test_unconsumed_export_holds_nothing_after_close(made):
    """A DLPack capsule asked for and never consumed is freed with the model."""
    with weightmap.safe_open(made["gguf"], mode="heap") as f:
        f.load()
        cap = f._h.export(0).__dlpack__()
        assert f._h.views == 1
    assert not f.released
    del cap
    assert f.released


# ---- errors carry the C message and leave nothing behind ----------------------------------------

def test_missing_file(tmp_path):
    """safetensors' words for it, exactly (its suite checks them), and the status."""
    missing = str(tmp_path / "nope.safetensors")
    with pytest.raises(weightmap.NotFoundError) as e:
        weightmap.safe_open(missing)
    assert str(e.value) == f"No such file or directory: {missing}"
    assert isinstance(e.value, FileNotFoundError) and e.value.status == "WM_ENOENT"
    with pytest.raises(FileNotFoundError) as e:
        weightmap.safe_open("notafile", framework="pt")
    assert str(e.value) == "No such file or directory: notafile"
    with pytest.raises(FileNotFoundError) as e:      # one file of a list
        weightmap.safe_open([fixture("safetensors/hf-sample-f.safetensors"), missing])
    assert str(e.value) == f"No such file or directory: {missing}"
    with pytest.raises(FileNotFoundError):
        weightmap.load_file(missing)


def test_crafted_files(tmp_path):
    lfs = fixture("malformed/lfs-pointer.gguf")
    with pytest.raises(weightmap.FormatError, match=r"at offset 0 .*Git LFS pointer") as e:
        weightmap.safe_open(lfs)
    assert e.value.status == "WM_EFORMAT" and isinstance(e.value, ValueError)
    with pytest.raises(weightmap.FormatError, match=r"offset \d+ .*tensor 'blk.0.ffn_down.weight'"):
        weightmap.safe_open(fixture("malformed/q8_0-row-172.gguf"))
    # a safetensors header that claims more bytes than the file has
    good = open(fixture("safetensors/hf-sample-overall.safetensors"), "rb").read()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good[:-8])
    with pytest.raises(weightmap.FormatError, match="cut.safetensors") as e:
        weightmap.load_file(str(cut))
    assert "offset" in str(e.value)
    # a file cut after it was opened: the load refuses it (the size changed)
    grow = tmp_path / "grow.safetensors"
    grow.write_bytes(good)
    f = weightmap.safe_open(str(grow), mode="mmap")
    grow.write_bytes(good[:-8])
    with pytest.raises(weightmap.Error, match="grow.safetensors"):
        f.get_tensor("e")
    f.close()


def test_bad_arguments(made):
    path = made["gguf"]
    with pytest.raises(ValueError, match="mode must be 'mmap', 'heap' or 'mmap-private', not 'mlock'"):
        weightmap.safe_open(path, mode="mlock")
    with pytest.raises(ValueError, match="mode must be"):
        weightmap.load_file(path, mode="")
    with pytest.raises(ValueError, match="lock must be"):
        weightmap.safe_open(path, lock="yes")
    with pytest.raises(ValueError, match="framework"):
        weightmap.safe_open(path, framework="tf")
    with pytest.raises(ValueError, match="device"):
        weightmap.safe_open(path, device="gpu0")
    with pytest.raises(ValueError, match="dtype"):
        weightmap.safe_open(path, dtype="int4")
    with pytest.raises(ValueError, match="needs device 'cpu'"):
        weightmap.safe_open(path, framework="np", device="cuda:0")
    # lock with mmap-private and conversion without heap: the C library's own refusal
    with weightmap.safe_open(path, mode="mmap-private", lock="required") as f:
        with pytest.raises(weightmap.Error, match="m.gguf") as e:
            f.load()
        assert e.value.status == "WM_EINVAL"
    # dtype= with a mode that cannot convert, or on a device: refused at open, not at the
    # first get_tensor; every refusal is an ArgumentError (a ValueError and a weightmap.Error)
    with pytest.raises(weightmap.ArgumentError, match="needs mode 'heap' .* not 'mmap'") as e:
        weightmap.safe_open(path, mode="mmap", dtype="f16")
    assert isinstance(e.value, ValueError) and isinstance(e.value, weightmap.Error)
    with pytest.raises(weightmap.ArgumentError, match="not 'mmap-private'"):
        weightmap.safe_open(path, backend="mmap", dtype="f16")
    with pytest.raises(weightmap.ArgumentError, match="needs device 'cpu'"):
        weightmap.safe_open(path, device="cuda:0", dtype="f32")
    for bad in ({"mode": "mlock"}, {"lock": "yes"}, {"framework": "tf"}, {"device": "gpu0"},
                {"dtype": "int4"}, {"backend": "direct"}):
        with pytest.raises(weightmap.ArgumentError):
            weightmap.safe_open(path, **bad)


def test_dtype_without_mode_picks_heap():
    """safe_open(q4_0.gguf, dtype="f32") without mode=: mode heap, every tensor converted (the
    CLI's --as f32 bytes), nothing held after."""
    path = fixture("gguf/stories260K-q4_0.gguf")
    with weightmap.safe_open(path, framework="pt", dtype="f32") as f:
        assert f.mode == "heap"
        t = f.get_tensor("blk.0.attn_q.weight")
        assert t.dtype == torch.float32 and tuple(t.shape) == (64, 64)
        assert raw_bytes(t) == cli("cat", path, "blk.0.attn_q.weight", "--as", "f32")
        del t
    d = weightmap.load_file(path, dtype=torch.float16)
    assert d["blk.0.attn_q.weight"].dtype == torch.float16
    del d


def test_device_names():
    cuda = weightmap._c.BACKEND_CUDA
    assert weightmap._parse_device("cpu") == (weightmap._c.BACKEND_CPU, 0)
    assert weightmap._parse_device("cuda") == (cuda, 0)
    assert weightmap._parse_device("cuda:3") == (cuda, 3)
    assert weightmap._parse_device(2) == (cuda, 2)
    assert weightmap._parse_device(torch.device("cuda", 1)) == (cuda, 1)
    for bad in ("cuda:x", "gpu", -1, True, "cuda:"):
        with pytest.raises(ValueError, match="device must be"):
            weightmap._parse_device(bad)


def test_unknown_tensor(made):
    with weightmap.safe_open(made["safetensors"]) as f:
        with pytest.raises(weightmap.TensorNotFoundError, match="m.safetensors: no tensor named 'nope'") as e:
            f.get_tensor("nope")
        assert isinstance(e.value, KeyError) and e.value.status == "WM_ENOENT"
        with pytest.raises(KeyError):
            f.get_slice("nope")
        assert "nope" not in f


def test_device_without_backend_or_gpu(made):
    """Where this process has no GPU, device='cuda:0' fails with the C library's message."""
    from conftest import cuda_device
    if cuda_device() is not None:
        pytest.skip("a GPU answers here")
    with weightmap.safe_open(made["gguf"], device="cuda:0") as f:
        with pytest.raises(weightmap.Error) as e:
            f.load()
        assert e.value.status in ("WM_EDEVICE", "WM_EUNSUPPORTED") and str(e.value)


def test_cuda_matches_cpu(made):
    """device='cuda:0': the tensors are device memory with the file's bytes; all given back."""
    if DEVICE == "cpu":
        pytest.skip("WM_TEST_DEVICE is not set")
    device = device_or_skip()
    path = made["safetensors"]
    with weightmap.safe_open(path, framework="pt", device=device) as f:
        for name, t in f.tensors():
            assert t.device.type == "cuda"
            assert raw_bytes(t) == cli("cat", path, name), name
        del t
        assert weightmap.ledger()["device"]["current"] > 0
    check_nothing_held()
    d = weightmap.load_file(path, device=device)
    assert all(t.is_cuda for t in d.values())
    del d
    check_nothing_held()
