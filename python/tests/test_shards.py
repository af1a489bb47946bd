"""Shard sets as safetensors has them: a path to one shard is that shard (its tensors, its
metadata, load_file of it), a set opens through its index or a list; a consumer's loop over the
shards (four handles on four shards, or transformers inside weightmap.loading()) holds and reads
the set once; bad sets are refused naming the file and hold nothing.

Locally each shard is compared with its own JSON header (Python's json module) and bytes read
from the file with Python's open(); where safetensors (and transformers) are installed, as on the
GPU machine, with safetensors' own load_file of the same file, and with sets transformers'
save_pretrained(max_shard_size=...) writes. WM_TEST_DEVICE=cuda:0 runs the device cases there.
"""
import json
import os
import struct

import numpy as np
import pytest
import torch

import weightmap
from conftest import check_nothing_held, cli, device_or_skip

MiB = 1 << 20


# ---- helpers ------------------------------------------------------------------------------------

def header(path):
    """A safetensors file's header as its JSON says: ({name: entry}, __metadata__ or None,
    where its data starts)."""
    with open(path, "rb") as fp:
        n = struct.unpack("<Q", fp.read(8))[0]
        h = json.loads(fp.read(n))
    meta = h.pop("__metadata__", None)
    return h, meta, 8 + n


def file_bytes(path, start, stop):
    with open(path, "rb") as fp:
        fp.seek(start)
        return fp.read(stop - start)


def raw(t):
    """A tensor's or array's bytes, on the host."""
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().contiguous().reshape(-1)
        return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return np.ascontiguousarray(t).tobytes()


def shards_of(index):
    """The shard files an index names, in its order, as paths."""
    with open(index) as fp:
        names = sorted(set(json.load(fp)["weight_map"].values()))
    return [os.path.join(os.path.dirname(index), n) for n in names]


def read_between(fn):
    """(fn's result, bytes this process read while it ran: the kernel's rchar)."""
    before = rchar_exact()
    out = fn()
    return out, rchar_exact()[0] - before[0] - before[1]


def rchar_exact():
    """(rchar, bytes this read of /proc/self/io returned), so that two calls bracket exactly."""
    with open("/proc/self/io", "rb", buffering=0) as fp:
        text = fp.read(4096)
    line = next(l for l in text.split(b"\n") if l.startswith(b"rchar:"))
    return int(line.split()[1]), len(text)


@pytest.fixture(scope="session")
def sets(tmp_path_factory):
    """make-model sets: a 4-shard safetensors checkpoint (8 MiB) with its index, a 3-part GGUF
    split set."""
    d = tmp_path_factory.mktemp("sets")
    cli("make-model", str(d / "s.safetensors"), "--size", "8M", "--format", "safetensors",
        "--shards", "4", "--seed", "7")
    cli("make-model", str(d / "g.gguf"), "--size", "4M", "--shards", "3", "--seed", "7")
    index = str(d / "s.safetensors.index.json")
    return {"index": index, "shards": shards_of(index),
            "gguf": [str(d / f"g-0000{k}-of-00003.gguf") for k in (1, 2, 3)]}


# ---- a shard is that shard ----------------------------------------------------------------------

def test_each_shard_is_its_own_header(sets):
    """safe_open(shard): its keys, dtypes, shapes and metadata are its JSON header's, its bytes
    the file's at the header's offsets, shards() the file itself; the index's set is their
    union."""
    union = {}
    for shard in sets["shards"]:
        h, meta, start = header(shard)
        with weightmap.safe_open(shard, framework="np") as f:
            assert f.keys() == sorted(h) and f.shards() == [shard]
            assert f.metadata() == meta
            for name, e in h.items():
                sl = f.get_slice(name)
                assert sl.get_dtype() == e["dtype"] and sl.get_shape() == e["shape"]
                a, b = e["data_offsets"]
                assert raw(f.get_tensor(name)) == file_bytes(shard, start + a, start + b), name
        union.update(h)
    with weightmap.safe_open(sets["index"], framework="np") as f:
        assert f.keys() == sorted(union) and f.shards() == sets["shards"]
        assert "total_size" in f.metadata()


def test_load_file_of_a_shard_on_the_device(sets):
    """load_file(shard, device=...) returns that shard's tensors only, with its bytes, on the CPU
    and on CUDA devices (WM_TEST_DEVICE)."""
    device = device_or_skip()
    for shard in sets["shards"]:
        h, _, start = header(shard)
        d = weightmap.load_file(shard, device=device)
        assert sorted(d) == sorted(h)
        for name, t in d.items():
            assert t.device.type == torch.device(device).type
            a, b = h[name]["data_offsets"]
            assert raw(t) == file_bytes(shard, start + a, start + b), name
        del d, t


def test_gguf_part_alone_and_its_list(sets):
    """A GGUF split part opens alone (its split.* keys, its tensors); the list of the parts is
    the set, with the same bytes as the CLI's `cat --set`."""
    parts = sets["gguf"]
    seen = []
    for k, part in enumerate(parts):
        with weightmap.safe_open(part, framework="np") as f:
            assert f.metadata()["split.no"] == k and f.shards() == [part]
            seen += f.keys()
    with weightmap.safe_open(parts, framework="np") as f:
        assert f.keys() == sorted(seen) and f.shards() == parts
        for name in f.keys()[::7]:
            assert raw(f.get_tensor(name)) == cli("cat", "--set", parts[0], name), name
    with pytest.raises(weightmap.FormatError, match=r"split.no is 2, but the list makes it"):
        weightmap.safe_open([parts[0], parts[2], parts[1]])


def test_a_list_of_shards_is_the_set(sets):
    """safe_open([shards...]): the set, in the list's order, the same bytes as the index's, the
    first shard's metadata (no index is read); a tuple too."""
    with weightmap.safe_open(sets["index"], framework="np") as f:
        want = {n: raw(f.get_tensor(n)) for n in f.keys()}
    rev = list(reversed(sets["shards"]))
    with weightmap.safe_open(tuple(rev), framework="np") as f:
        assert f.shards() == rev and sorted(want) == f.keys()
        assert "total_size" not in (f.metadata() or {})
        assert all(raw(f.get_tensor(n)) == b for n, b in want.items())


# ---- held and read once -------------------------------------------------------------------------

def hold_once(paths_alone, set_path, device, mode):
    """Loads the set (one handle), then each shard on a handle of its own, all held at once;
    returns {what: (set's figure, the shards' figure)}."""
    def figures(handles):
        before = weightmap.ledger()
        _, read = read_between(lambda: [h.load() for h in handles])
        after = weightmap.ledger()
        stats = [h.stats() for h in handles]
        cats = {c: after[c]["current"] - before[c]["current"]
                for c in ("map_shared", "map_private", "pinned", "device", "heap")}
        regions = {c: after[c]["regions"] - before[c]["regions"]
                   for c in ("map_shared", "map_private", "device")}
        return cats, regions, read, sum(s["heap_bytes"] for s in stats), \
            sum(s["device_bytes"] for s in stats), sum(s["mapped_bytes"] for s in stats)

    kw = dict(framework="pt", device=device, mode=mode, threads=2)
    with weightmap.safe_open(set_path, **kw) as one:
        set_fig = figures([one])
    handles = [weightmap.safe_open(p, **kw) for p in paths_alone]
    shards_fig = figures(handles)
    for h in handles:
        h.close()
    return set_fig, shards_fig, len(handles)


@pytest.mark.parametrize("mode", ["heap", "mmap-private", "mmap"])
def test_four_handles_on_four_shards_hold_the_set_once(sets, mode):
    """A consumer's `for f in shards: load_file(f)`: four handles on the four shards hold exactly
    the set's mappings and device memory (ledger bytes and regions), its heap tensor pages, and
    read exactly its bytes (rchar; plus a few KiB a load of the CUDA runtime's own files). With a
    shard opening its whole set, they held four sets."""
    device = device_or_skip()
    if device != "cpu" and mode != "heap":
        pytest.skip("a device stages every mode through the heap path")
    (cats1, reg1, read1, heap1, dev1, map1), (cats4, reg4, read4, heap4, dev4, map4), n = \
        hold_once(sets["shards"], sets["index"], device, mode)
    assert n == 4
    for c in ("map_shared", "map_private", "pinned", "device"):
        assert cats4[c] == cats1[c], (c, cats4[c], cats1[c])
    assert reg4 == reg1
    assert (heap4, dev4, map4) == (heap1, dev1, map1)
    # heap besides the tensor pages: each model's tables, of a subset of the set's tensors
    assert cats4["heap"] - heap4 <= n * (cats1["heap"] - heap1)
    slack = 0 if device == "cpu" else 64 << 10
    assert read1 <= read4 <= read1 + n * slack, (read4, read1)
    if mode == "heap":
        total = sum(os.path.getsize(p) for p in sets["shards"])
        assert read1 <= total


@pytest.mark.parametrize("ahead", [False, True])
def test_loading_reads_each_byte_once(sets, monkeypatch, ahead):
    """What transformers does inside weightmap.loading(): for each shard of the index, open it
    with safetensors' safe_open (a stand-in module here; the real one on the GPU machine) and
    take every tensor. Without loads ahead, rchar is exactly what opening the shards alone reads
    plus the set's tensor bytes; with them (the default: the block's loader thread opens each
    shard once more and reads the index beside it), the tensor bytes are still read once. The
    ledger holds the set once."""
    import sys
    import types
    device = device_or_skip()
    mode = "heap"                                 # the CPU's mapped modes read nothing
    st = sys.modules.get("safetensors")
    if st is None or not hasattr(st, "safe_open"):
        st = types.ModuleType("safetensors")
        st.safe_open = lambda *a, **k: ("original", a, k)
        monkeypatch.setitem(sys.modules, "safetensors", st)
    shards = sets["shards"]
    headers = 0
    for s in shards:                              # what opening each shard alone reads
        f, read = read_between(lambda s=s: weightmap.safe_open(s))
        f.close()
        headers += read
    with weightmap.safe_open(sets["index"], mode=mode, threads=2) as f:
        tensor_bytes = sum(t[3] for t in f._table())
        f.load()
        set_heap = f.stats()["heap_bytes"]
    sd = {}

    def loop(files):
        with weightmap.loading(device=device, mode=None if device != "cpu" else mode,
                               ahead=ahead):
            for shard in files:
                with st.safe_open(shard, framework="pt", device="cpu") as g:
                    for k in g.keys():
                        sd[k] = g.get_tensor(k)
    loop(shards[:1])              # once before: what Python and the device runtime import
    sd.clear()
    _, read = read_between(lambda: loop(shards))
    # each load (threads 0) also asks glibc for the online CPUs, which reads this file once
    with open("/sys/devices/system/cpu/online", "rb") as fp:
        want = headers + tensor_bytes + len(shards) * len(fp.read())
    slack = 0 if device == "cpu" else len(shards) * (64 << 10)
    if ahead:   # the loader's own opens (headers again), the index, its room checks (/proc)
        slack += headers + os.path.getsize(sets["index"]) + len(shards) * 4096
    assert want <= read <= want + slack, (read, headers, tensor_bytes)
    held = weightmap.ledger()
    if device == "cpu":
        assert held["heap"]["current"] >= set_heap
        assert held["heap"]["current"] < 2 * set_heap
    else:
        assert held["device"]["current"] >= tensor_bytes
        assert held["device"]["current"] < 2 * tensor_bytes
    del sd
    check_nothing_held()


# ---- against safetensors itself (installed on the GPU machine) -----------------------------------

def same_as_safetensors(path, device):
    st_torch = pytest.importorskip("safetensors.torch")
    want = st_torch.load_file(path)
    got = weightmap.load_file(path, device=device)
    assert sorted(got) == sorted(want), path
    for name, t in want.items():
        g = got[name]
        assert g.dtype == t.dtype and tuple(g.shape) == tuple(t.shape), name
        assert raw(g) == raw(t), name
    import safetensors
    with safetensors.safe_open(path, framework="pt") as a, weightmap.safe_open(path) as b:
        assert a.metadata() == b.metadata() and sorted(a.keys()) == b.keys()
    del got, want, g


def test_every_make_model_shard_equals_safetensors_load_file(sets):
    """Each shard `weightmap make-model --shards 4` wrote: weightmap.load_file equals
    safetensors.torch.load_file of that file (keys, dtypes, shapes, bytes, metadata)."""
    device = device_or_skip()
    for shard in sets["shards"]:
        same_as_safetensors(shard, device)


def test_save_pretrained_shards_equal_safetensors(tmp_path):
    """A tiny llama built from a config (no download) and saved by transformers'
    save_pretrained(max_shard_size=...): every shard equals safetensors' load_file of it; the
    index opens the whole state dict; from_pretrained inside weightmap.loading() reads each byte
    once and gives the same parameters as a plain load."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    device = device_or_skip()
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                                      num_hidden_layers=4, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=128)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(str(tmp_path), max_shard_size="300KB")   # safetensors, sharded
    index = str(tmp_path / "model.safetensors.index.json")
    shards = shards_of(index)
    assert len(shards) >= 3, shards
    for shard in shards:
        same_as_safetensors(shard, device)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    with weightmap.safe_open(index) as f:
        for name in f.keys():
            assert torch.equal(f.get_tensor(name), state[name]), name
    tensor_bytes = sum(os.path.getsize(s) for s in shards)
    # once before, plainly: what from_pretrained imports (accelerate, ...) is read then, not below
    transformers.LlamaForCausalLM.from_pretrained(str(tmp_path), device_map=device)

    def load():
        with weightmap.loading(device=device):
            return transformers.LlamaForCausalLM.from_pretrained(str(tmp_path),
                                                                 device_map=device)
    loaded, read = read_between(load)
    # the shards' bytes once (headers included), beside config.json and the index
    assert read <= tensor_bytes + MiB, (read, tensor_bytes)
    for k, v in loaded.state_dict().items():
        if k in state:
            assert torch.equal(v.cpu(), state[k]), k
    del loaded, v, model, state
    check_nothing_held()


# ---- bad sets: refused naming the file, nothing held --------------------------------------------

def copy_set(sets, tmp_path):
    for p in sets["shards"] + [sets["index"]]:
        with open(p, "rb") as src, open(tmp_path / os.path.basename(p), "wb") as dst:
            dst.write(src.read())
    return str(tmp_path / os.path.basename(sets["index"])), \
        [str(tmp_path / os.path.basename(p)) for p in sets["shards"]]


def test_missing_shard_of_an_index(sets, tmp_path):
    index, shards = copy_set(sets, tmp_path)
    os.unlink(shards[2])
    with pytest.raises(weightmap.NotFoundError) as e:
        weightmap.safe_open(index)
    assert os.path.basename(shards[2]) in str(e.value) and "missing" in str(e.value)
    assert index in str(e.value)
    with weightmap.safe_open(shards[1]) as f:        # the shards that are there open alone
        assert f.keys()


def test_shard_disagrees_with_the_index(sets, tmp_path):
    index, shards = copy_set(sets, tmp_path)
    with open(index) as fp:
        ix = json.load(fp)
    name = next(k for k, v in ix["weight_map"].items() if v == os.path.basename(shards[0]))
    ix["weight_map"][name] = os.path.basename(shards[1])
    with open(index, "w") as fp:
        json.dump(ix, fp)
    with pytest.raises(weightmap.FormatError) as e:
        weightmap.safe_open(index)
    msg = str(e.value)
    assert f"'{name}'" in msg and os.path.basename(shards[0]) in msg and \
        os.path.basename(shards[1]) in msg, msg


def test_truncated_shard(sets, tmp_path):
    """A shard cut inside its header or its data: refused through the index, alone and in a
    list, with the shard, the offset and the field named."""
    index, shards = copy_set(sets, tmp_path)
    full = os.path.getsize(shards[1])
    _, _, start = header(shards[1])
    for cut in (20, start + 100, full - 1):
        os.truncate(shards[1], cut)
        for spec in (index, shards[1], [shards[0], shards[1]]):
            with pytest.raises(weightmap.FormatError) as e:
                weightmap.safe_open(spec)
            msg = str(e.value)
            assert shards[1] in msg and "offset" in msg, (cut, spec, msg)
            assert e.value.status == "WM_EFORMAT"
            check_nothing_held()


def test_bad_lists(sets, tmp_path):
    s = sets["shards"]
    with pytest.raises(weightmap.ArgumentError, match="listed twice"):
        weightmap.safe_open([s[0], s[1], s[0]])
    with pytest.raises(weightmap.ArgumentError, match="an index is not a shard"):
        weightmap.safe_open([s[0], sets["index"]])
    with pytest.raises(weightmap.ArgumentError, match="empty list"):
        weightmap.safe_open([])
    with pytest.raises(weightmap.FormatError, match="a gguf file, in a list"):
        weightmap.safe_open([s[0], sets["gguf"][0]])
    with pytest.raises(FileNotFoundError, match="No such file or directory: "):
        weightmap.safe_open([s[0], str(tmp_path / "gone.safetensors")])
