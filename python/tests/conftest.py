"""Shared fixtures of the Python tests (python/tests/, run by `make test-python`).

Every test ends in check_nothing_held(): after a garbage collection, the C library's ledger reads
0 bytes and 0 regions in every category, and no region of this process maps a weight file
(/proc/self/maps read directly, and the library's own wm_mem_file_regions).
"""
import gc
import os
import subprocess
import sys
import types

import pytest

import weightmap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.environ.get("WM_FIXTURES", os.path.join(ROOT, "..", "shared", "fixtures"))
CLI = os.environ.get("WM_CLI", os.path.join(ROOT, "build-py", "weightmap"))
WEIGHT_SUFFIXES = (".gguf", ".safetensors")


def fixture(rel):
    path = os.path.join(FIXTURES, rel)
    if not os.path.exists(path):
        pytest.skip(f"fixture {rel} not found under {FIXTURES}")
    return path


def weight_maps():
    """Lines of /proc/self/maps that map a weight file."""
    with open("/proc/self/maps") as f:
        return [l for l in f if l.rstrip().endswith(WEIGHT_SUFFIXES)]


def maps_of(path):
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        return [l for l in f if l.rstrip().endswith(real)]


def held():
    l = weightmap.ledger()
    return {k: v["current"] for k, v in l.items() if isinstance(v, dict) and
            (v["current"] or v["regions"])}


def check_nothing_held():
    gc.collect()
    l = weightmap.ledger()
    assert l["bytes"] == 0 and l["regions"] == 0, f"ledger holds {held()}"
    for name, stat in l.items():
        if isinstance(stat, dict):
            assert stat["current"] == 0 and stat["regions"] == 0, (name, stat)
    assert weight_maps() == [], weight_maps()
    assert weightmap.file_regions() == []


@pytest.fixture(autouse=True)
def nothing_held_after():
    check_nothing_held()  # the test starts from nothing too
    yield
    check_nothing_held()


def cli(*args, **kw):
    if not os.access(CLI, os.X_OK):
        pytest.skip(f"the weightmap CLI is not built at {CLI}")
    return subprocess.run([CLI, *args], check=True, stdout=subprocess.PIPE, **kw).stdout


@pytest.fixture(scope="session")
def made(tmp_path_factory):
    """A 6 MiB llama-shaped model made by the CLI, as GGUF, safetensors, a 2-shard safetensors
    set (opened by its index) and a 2-part GGUF split set (opened as the list of its parts)."""
    d = tmp_path_factory.mktemp("models")
    out = {"gguf": str(d / "m.gguf"), "safetensors": str(d / "m.safetensors"),
           "shards": str(d / "s.safetensors.index.json"),
           "gguf_split": [str(d / "g-00001-of-00002.gguf"), str(d / "g-00002-of-00002.gguf")]}
    cli("make-model", out["gguf"], "--size", "6M")
    cli("make-model", out["safetensors"], "--size", "6M", "--format", "safetensors")
    cli("make-model", str(d / "s.safetensors"), "--size", "6M", "--format", "safetensors",
        "--shards", "2")
    cli("make-model", str(d / "g.gguf"), "--size", "6M", "--shards", "2")
    return out


def cuda_device():
    """'cuda:0' when this build has the CUDA backend and a GPU answers, else None."""
    try:
        weightmap.backend_init("cuda:0")
    except weightmap.Error:
        return None
    return "cuda:0"


def device_or_skip():
    """The device the tests run on: WM_TEST_DEVICE ("cpu" by default); a CUDA one skips the test
    where this build or this machine has none."""
    device = os.environ.get("WM_TEST_DEVICE", "cpu")
    if device == "cpu":
        return "cpu"
    if cuda_device() is None:
        pytest.skip("no CUDA backend or no GPU")
    return device


def fake_safetensors(monkeypatch, **consumers):
    """Stand-in `safetensors` and `safetensors.torch` modules in sys.modules (for the test's
    length), so that weightmap.loading() has originals to swap where safetensors is not
    installed. Each keyword NAME={attr: "safe_open" | "load_file"} adds a consumer module NAME
    that bound that original under attr, as `from safetensors import ...` would. Returns a
    namespace: safe_open and load_file (the originals: made here, so that no module of the
    tests binds them, which the swap would replace too), st, st_torch and mods ({NAME: module})."""
    def safe_open(filename, framework, device="cpu"):
        return ("original", framework)

    def load_file(filename, device="cpu"):
        return "original"

    originals = {"safe_open": safe_open, "load_file": load_file}
    st = types.ModuleType("safetensors")
    st.safe_open = safe_open
    st_torch = types.ModuleType("safetensors.torch")
    st_torch.safe_open, st_torch.load_file = safe_open, load_file
    mods = {}
    for name, attrs in consumers.items():
        mods[name] = types.ModuleType(name)
        for attr, which in attrs.items():
            setattr(mods[name], attr, originals[which])
    for name, mod in (("safetensors", st), ("safetensors.torch", st_torch), *mods.items()):
        monkeypatch.setitem(sys.modules, name, mod)
    return types.SimpleNamespace(safe_open=safe_open, load_file=load_file, st=st,
                                 st_torch=st_torch, mods=mods)
