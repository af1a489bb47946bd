"""weightmap.loading() loading a sharded checkpoint's next shards ahead (python/weightmap/
_prefetch.py): the first open of a shard starts the set's loads on the block's own thread; the
consumer's handles take those models over, so each byte is still read once (the kernel's rchar),
the tensors equal the shards' own, the loads ahead stop where there is no room, what nobody
claimed is closed at the block's end, and nothing is held after.

The consumer is a stand-in for transformers' loop (a metadata-only open of the first shard, then
each shard opened and every tensor taken), through stand-in safetensors modules (CI has neither
safetensors nor transformers). WM_TEST_DEVICE=cuda:0 runs it on the GPU (the staged path); on
the CPU in mode heap, the mode whose load reads the file.
"""
import json
import os
import sys
import types

import pytest
import torch

import weightmap
from weightmap import _prefetch
from conftest import check_nothing_held, cli, fake_safetensors, held

DEVICE = os.environ.get("WM_TEST_DEVICE", "cpu")
MODE = None if DEVICE != "cpu" else "heap"


def rchar():
    with open("/proc/self/io") as f:
        return int(next(l for l in f if l.startswith("rchar:")).split()[1])


@pytest.fixture
def shard_set(tmp_path):
    """A 3-shard set and its index, made by the CLI; the shards renamed part-a, -b, -c (and the
    index rewritten), which also opens each shard alone where the package opens a whole set
    from a shard named NAME-0000K-of-0000N."""
    cli("make-model", str(tmp_path / "s.safetensors"), "--size", "12M", "--format",
        "safetensors", "--shards", "3")
    made = sorted(tmp_path.glob("s-*-of-00003.safetensors"))
    names = {p.name: f"part-{'abc'[k]}.safetensors" for k, p in enumerate(made)}
    for p in made:
        p.rename(tmp_path / names[p.name])
    index = tmp_path / "s.safetensors.index.json"
    doc = json.loads(index.read_text())
    doc["weight_map"] = {k: names[v] for k, v in doc["weight_map"].items()}
    index.write_text(json.dumps(doc))
    shards = [str(tmp_path / n) for n in sorted(names.values())]
    with weightmap.safe_open(shards[0]) as f:
        assert f.shards() == [shards[0]]
    return shards


@pytest.fixture
def consumer(monkeypatch):
    fake = fake_safetensors(monkeypatch, wm_test_ahead_consumer={"safe_open": "safe_open"})
    return fake.mods["wm_test_ahead_consumer"]


def own_tensors(shards):
    """Every tensor of each shard, loaded alone on the CPU (the reference), as bytes."""
    out = {}
    for s in shards:
        with weightmap.safe_open(s, mode="heap") as f:
            for k in f.keys():
                out[k] = f.get_tensor(k).clone()
    return out


def consume(consumer, shards):
    """transformers' pattern: the first shard's metadata, then each shard's tensors."""
    with consumer.safe_open(shards[0], framework="pt", device="cpu") as f:
        f.metadata()
    got = {}
    for s in shards:
        with consumer.safe_open(s, framework="pt", device="cpu") as f:
            for k in f.keys():
                got[k] = f.get_tensor(k)
    return got


def start_device():
    """The device's runtime started before anything is measured (its start reads files too)."""
    if DEVICE != "cpu":
        weightmap.backend_init(DEVICE)
        torch.cuda.mem_get_info(torch.device(DEVICE))


def open_reads(shards):
    """What an open alone of each shard reads (its header), from the kernel's rchar."""
    opens = []
    for s in shards:
        r0 = rchar()
        weightmap.safe_open(s).close()
        opens.append(rchar() - r0)
    return opens


def test_next_shards_load_ahead_read_once(shard_set, consumer):
    start_device()
    want = own_tensors(shard_set)
    opens = open_reads(shard_set)
    index = os.path.join(os.path.dirname(shard_set[0]), "s.safetensors.index.json")
    with weightmap.loading(device=DEVICE, mode=MODE) as ahead:
        before = rchar()     # after the swap, whose walk over sys.modules may import lazily
        got = consume(consumer, shard_set)
        assert ahead.loaded_ahead == 3 and ahead.claimed == 3
    read = rchar() - before
    # every tensor byte once; the rest is what the opens read (the consumer's 4, the loader's
    # 3) and the index; a shard read twice would be megabytes more
    tensor_bytes = sum(t.numel() * t.element_size() for t in want.values())
    most = tensor_bytes + 2 * sum(opens) + opens[0] + os.path.getsize(index) + 4096
    assert tensor_bytes <= read <= most, (read, tensor_bytes, most)
    assert sorted(got) == sorted(want)
    for k, t in got.items():
        assert t.device.type == torch.device(DEVICE).type
        assert torch.equal(t.cpu(), want[k]), k
    del got, t
    check_nothing_held()


def test_no_room_no_loads_ahead(shard_set, consumer, monkeypatch):
    monkeypatch.setattr(_prefetch, "MARGIN", 1 << 62)
    want = own_tensors(shard_set)
    with weightmap.loading(device=DEVICE, mode=MODE) as ahead:
        got = consume(consumer, shard_set)
        assert ahead.loaded_ahead == 0 and ahead.claimed == 0
    assert all(torch.equal(got[k].cpu(), want[k]) for k in want)
    del got
    check_nothing_held()


def test_unclaimed_loads_are_closed_at_the_end(shard_set, consumer):
    with weightmap.loading(device=DEVICE, mode=MODE) as ahead:
        with consumer.safe_open(shard_set[0], framework="pt", device="cpu") as f:
            t = f.get_tensor(f.keys()[0])
    assert ahead.claimed == 1
    assert weightmap.ledger()["bytes"] > 0           # t's model
    del t
    check_nothing_held()


def test_mapped_modes_and_opt_out_load_nothing_ahead(shard_set, consumer):
    if DEVICE == "cpu":
        with weightmap.loading(device="cpu") as ahead:      # mmap-private: nothing to read
            assert ahead is None
    with weightmap.loading(device=DEVICE, mode=MODE, ahead=False) as ahead:
        assert ahead is None
        got = consume(consumer, shard_set)
    del got
    check_nothing_held()


def test_from_pretrained_starts_the_loads_at_the_call(shard_set, consumer, monkeypatch):
    """With transformers imported, its from_pretrained of a local folder (the Auto class's, which
    then calls the model class's) queues the folder's files at the call, before any open
    (stand-in transformers modules here); the originals are back after the block."""
    start_device()
    folder = os.path.dirname(shard_set[0])
    seen = {}

    class PreTrainedModel:
        @classmethod
        def from_pretrained(cls, path, *args, **kwargs):
            seen["queued at the call"] = [w for _, w, _ in ahead_of[0].events]
            seen["cls"] = cls
            return consume(consumer, shard_set)

    class LlamaForCausalLM(PreTrainedModel):
        pass

    class _BaseAutoModelClass:            # the Auto classes: the config first, then the class
        @classmethod
        def from_pretrained(cls, path, *args, **kwargs):
            seen["queued at the Auto call"] = [w for _, w, _ in ahead_of[0].events]
            return LlamaForCausalLM.from_pretrained(path, *args, **kwargs)

    class AutoModelForCausalLM(_BaseAutoModelClass):
        pass

    mu = types.ModuleType("transformers.modeling_utils")
    mu.PreTrainedModel = PreTrainedModel
    af = types.ModuleType("transformers.models.auto.auto_factory")
    af._BaseAutoModelClass = _BaseAutoModelClass
    monkeypatch.setitem(sys.modules, "transformers.modeling_utils", mu)
    monkeypatch.setitem(sys.modules, "transformers.models.auto.auto_factory", af)
    originals = (PreTrainedModel.__dict__["from_pretrained"],
                 _BaseAutoModelClass.__dict__["from_pretrained"])
    want = own_tensors(shard_set)
    ahead_of = []
    with weightmap.loading(device=DEVICE, mode=MODE) as ahead:
        ahead_of.append(ahead)
        got = AutoModelForCausalLM.from_pretrained(folder, dtype="auto")
    assert seen["cls"] is LlamaForCausalLM
    assert seen["queued at the Auto call"][:3] == ["block", "patched", "folder"], seen
    assert ahead.loaded_ahead == 3 and ahead.claimed == 3
    assert (PreTrainedModel.__dict__["from_pretrained"],
            _BaseAutoModelClass.__dict__["from_pretrained"]) == originals
    assert all(torch.equal(got[k].cpu(), want[k]) for k in want)
    del got
    check_nothing_held()


def set_ledger(shards):
    """The ledger's bytes while the set is loaded once, in one load (what a set ahead holds)."""
    with weightmap.safe_open(shards, device=DEVICE, mode=MODE) as f:
        f.load()
        return weightmap.ledger()["bytes"]


def test_a_folder_loads_as_one_set_each_shard_its_own_part(shard_set, consumer):
    """A checkpoint folder (from_pretrained's) loads ahead as one set, in one load; each
    shard's handle then shows that shard alone (its names, its tensors, equal to its own load),
    the four handles hold the set once (the ledger of one set load) and read each byte once."""
    start_device()
    want = own_tensors(shard_set)
    once = set_ledger(shard_set)
    opens = open_reads(shard_set)
    index = os.path.join(os.path.dirname(shard_set[0]), "s.safetensors.index.json")
    with weightmap.loading(device=DEVICE, mode=MODE) as ahead:
        before = rchar()
        ahead.folder(os.path.dirname(shard_set[0]))
        got = {}
        for s in [shard_set[0]] + shard_set:
            with consumer.safe_open(s, framework="pt", device="cpu") as f:
                own = weightmap.safe_open(s)
                assert f.keys() == own.keys() and f.metadata() == own.metadata()
                assert f.shards() == [s] and len(f) == len(own)
                own.close()
                got.update((k, f.get_tensor(k)) for k in f.keys())
            assert weightmap.ledger()["bytes"] == once, held()
        assert ahead.sets == 1 and ahead.loaded_ahead == 3 and ahead.claimed == 3
        assert [w for _, w, _ in ahead.events].count("load") == 1
    read = rchar() - before
    tensor_bytes = sum(t.numel() * t.element_size() for t in want.values())
    # every tensor byte once; the rest: the loader's opens of the 3 shards, the consumer's 4
    # and the test's own 4, the index (twice: the folder's and the set's); a shard read twice
    # would be megabytes more
    most = tensor_bytes + 3 * sum(opens) + 2 * opens[0] + 2 * os.path.getsize(index) + 4096
    assert tensor_bytes <= read <= most, (read, tensor_bytes, most)
    assert sorted(got) == sorted(want)
    for k, t in got.items():
        assert torch.equal(t.cpu(), want[k]), k
    assert 0 < weightmap.ledger()["bytes"] <= once     # the set, held by its tensors
    del got, t
    check_nothing_held()


def test_a_set_too_big_as_one_loads_shard_by_shard(shard_set, consumer, monkeypatch):
    """Where the set does not fit as one (room for each shard, not for all), its shards load
    ahead one by one, as other code's opens do; each is claimed, nothing is held after."""
    start_device()
    want = own_tensors(shard_set)
    total = sum(t.numel() * t.element_size() for t in want.values())
    monkeypatch.setattr(_prefetch, "_room", lambda *a: _prefetch.MARGIN + total - 1)
    with weightmap.loading(device=DEVICE, mode=MODE) as ahead:
        ahead.folder(os.path.dirname(shard_set[0]))
        got = consume(consumer, shard_set)
        assert ahead.sets == 0 and ahead.claimed == ahead.loaded_ahead >= 1
    assert all(torch.equal(got[k].cpu(), want[k]) for k in want)
    del got
    check_nothing_held()


def test_a_shard_view_closes_as_a_handle_and_the_set_goes_with_its_last_tensor(shard_set,
                                                                             consumer):
    """A shard's view of its set: after close() it raises ClosedError as any closed handle; the
    set's model stays while a tensor of it lives (after the block, after every close), and goes
    back with the last one; a shard nobody claimed holds nothing of its own."""
    start_device()
    with weightmap.loading(device=DEVICE, mode=MODE) as ahead:
        ahead.folder(os.path.dirname(shard_set[0]))
        f = consumer.safe_open(shard_set[1], framework="pt", device="cpu")
        name = f.keys()[0]
        t = f.get_tensor(name)
        assert isinstance(f._h, _prefetch._ShardView)
        assert f.stats()["tensor_bytes"] > sum(v[3] for v in f._table())   # the set's model
        assert f.close() is False and f.closed
        with pytest.raises(weightmap.ClosedError, match="closed"):
            f.get_tensor(name)
    assert ahead.claimed == 1 and not f.released
    assert weightmap.ledger()["bytes"] > 0
    with weightmap.safe_open(shard_set[1], mode="heap") as own:
        assert torch.equal(t.cpu(), own.get_tensor(name))
    del t
    assert f.released
    check_nothing_held()


def test_a_set_whose_shard_is_truncated_fails_where_the_consumer_asks(shard_set, consumer):
    """The set ahead fails on a truncated shard: the load ahead is forgotten, the consumer's
    own loads of the whole shards give their tensors, the truncated one raises its own error
    (naming the file), and nothing is held after."""
    start_device()
    want = own_tensors(shard_set[:2])
    with open(shard_set[2], "r+b") as f:
        f.truncate(os.path.getsize(shard_set[2]) - 4096)
    with weightmap.loading(device=DEVICE, mode=MODE) as ahead:
        ahead.folder(os.path.dirname(shard_set[0]))
        got = consume(consumer, shard_set[:2])
        with pytest.raises(weightmap.Error, match="part-c"):
            with consumer.safe_open(shard_set[2], framework="pt", device="cpu") as f:
                f.get_tensor(f.keys()[0])
        assert ahead.sets == 0 and ahead.claimed == 0
    assert all(torch.equal(got[k].cpu(), want[k]) for k in want)
    del got
    check_nothing_held()
