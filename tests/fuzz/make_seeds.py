#!/usr/bin/env python3
"""make_seeds.py: writes the hand-built seed inputs of the fuzz corpora (tests/corpus/).

Small, deliberately varied files: GGUF v1, v2 and v3 with every metadata value type, arrays of
every element type (strings included), tensors of many ggml types with real-sized data, a custom
alignment, split keys; safetensors with every dtype, metadata, an empty header; index files naming
the two shards that wm_fuzz_index writes next to them, a missing shard, a bad name. Malformed
variants (truncated, wrong counts) are left for the fuzzer to reach from these. Deterministic:
run it again and the files are the same.

Usage: tests/fuzz/make_seeds.py [CORPUS_DIR]   (default: tests/corpus next to this script)
"""
import json
import os
import struct
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus")

# ggml type id -> (block elements, block bytes), for the types the seeds use
GGML = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
        10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
        20: (32, 18), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 30: (1, 2),
        34: (256, 54), 35: (256, 66), 39: (32, 17)}


class Gguf:
    def __init__(self, version):
        self.v = version
        self.b = bytearray()

    def len(self, n):
        self.b += struct.pack("<I" if self.v == 1 else "<Q", n)

    def s(self, text):
        raw = text.encode()
        self.len(len(raw))
        self.b += raw

    def scalar(self, t, v):
        fmt = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q",
               11: "<q", 12: "<d"}
        if t == 8:
            self.s(v)
        else:
            self.b += struct.pack(fmt[t], v)

    def kv(self, key, t, v):
        self.s(key)
        self.b += struct.pack("<I", t)
        self.scalar(t, v)

    def arr(self, key, et, values):
        self.s(key)
        self.b += struct.pack("<I", 9)
        self.b += struct.pack("<I", et)
        self.len(len(values))
        for v in values:
            self.scalar(et, v)


def gguf(version, kvs, tensors, align=32, put_align_key=False):
    """tensors: (name, dims, type id). Data: deterministic bytes, each tensor at an aligned offset."""
    g = Gguf(version)
    g.b += b"GGUF" + struct.pack("<I", version)
    n_kv = len(kvs) + (1 if put_align_key else 0)
    g.len(len(tensors))
    g.len(n_kv)
    if put_align_key:
        g.kv("general.alignment", 4, align)
    for k in kvs:
        if k[1] == 9:
            g.arr(k[0], k[2], k[3])
        else:
            g.kv(k[0], k[1], k[2])
    off = 0
    sizes = []
    for name, dims, t in tensors:
        be, bb = GGML[t]
        n = 1
        for d in dims:
            n *= d
        nbytes = n // be * bb
        off = (off + align - 1) // align * align
        g.s(name)
        g.b += struct.pack("<I", len(dims))
        for d in dims:
            g.len(d)
        g.b += struct.pack("<I", t)
        g.b += struct.pack("<Q", off)
        sizes.append((off, nbytes))
        off += nbytes
    g.b += b"\0" * ((-len(g.b)) % align)
    data = bytearray(off)
    for i in range(off):
        data[i] = (i * 131 + 7) & 0xFF
    # f16/bf16/f32 data with small finite values keeps converted floats ordinary
    return bytes(g.b + data)


def every_value_kvs():
    return [("general.architecture", 8, "llama"), ("general.name", 8, "seed"),
            ("k.u8", 0, 200), ("k.i8", 1, -5), ("k.u16", 2, 60000), ("k.i16", 3, -300),
            ("k.u32", 4, 4000000000), ("k.i32", 5, -70000), ("k.f32", 6, 1.5), ("k.bool", 7, 1),
            ("k.u64", 10, 1 << 40), ("k.i64", 11, -(1 << 40)), ("k.f64", 12, 2.25),
            ("k.arr.u8", 9, 0, [1, 2, 3]), ("k.arr.i32", 9, 5, [-1, 0, 1]),
            ("k.arr.f32", 9, 6, [0.5, 1.0]), ("k.arr.u64", 9, 10, [1, 1 << 50]),
            ("k.arr.f64", 9, 12, [3.0]), ("k.arr.bool", 9, 7, [0, 1]),
            ("tokenizer.ggml.tokens", 9, 8, ["<s>", "</s>", "a", "b", ""]),
            ("k.arr.empty", 9, 4, [])]


def safetensors(tensors, metadata=None):
    """tensors: (name, dtype, shape, element bytes)."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    for name, dt, shape, eb in tensors:
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n * eb]}
        off += n * eb
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((-len(raw)) % 8)
    data = bytes(((i * 37 + 3) & 0x7F) for i in range(off))
    return struct.pack("<Q", len(raw)) + raw + data


def write(sub, name, data):
    d = os.path.join(ROOT, sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    types = [(f"t{t}", [GGML[t][0] * 2], t) for t in sorted(GGML)]
    small = [("tok_embd.weight", [4, 2], 0), ("norm.weight", [8], 1), ("q.weight", [64, 1], 8)]
    seeds = {
        "v3-every-value.gguf": gguf(3, every_value_kvs(), small),
        "v2-every-value.gguf": gguf(2, every_value_kvs(), small),
        "v1-every-value.gguf": gguf(1, every_value_kvs(), small),
        "v3-every-type.gguf": gguf(3, [("general.architecture", 8, "llama")], types),
        "v3-align64.gguf": gguf(3, [], small, align=64, put_align_key=True),
        "v3-4d.gguf": gguf(3, [], [("x", [2, 3, 2, 2], 0), ("y", [32, 2, 1], 2)]),
        "v3-empty.gguf": gguf(3, [], []),
        "v3-split.gguf": gguf(3, [("split.no", 2, 0), ("split.count", 2, 1),
                                  ("split.tensors.count", 5, 1)], [("a", [4], 0)]),
        # part 1 of the two-part set that wm_fuzz_gguf completes with its own part 2
        "v3-split-part1.gguf": gguf(3, [("split.no", 2, 0), ("split.count", 2, 2),
                                        ("split.tensors.count", 5, 1)], [("a", [4], 0)]),
    }
    for name, data in seeds.items():
        write("gguf", name, data)
        write("load", name, data)
    st_types = [("F64", 8), ("F32", 4), ("F16", 2), ("BF16", 2), ("I64", 8), ("I32", 4),
                ("I16", 2), ("I8", 1), ("U8", 1), ("U16", 2), ("U32", 4), ("U64", 8),
                ("BOOL", 1), ("F8_E4M3", 1), ("F8_E5M2", 1), ("F8_E8M0", 1)]
    st = {
        "every-dtype.safetensors": safetensors([(f"t.{d.lower()}", d, [2, 3], eb) for d, eb in st_types],
                                               {"format": "pt", "note": "seed"}),
        "scalar-and-empty.safetensors": safetensors([("s", "F32", [], 4), ("e", "F16", [0, 4], 2),
                                                     ("v", "BF16", [8], 2)]),
        "4d.safetensors": safetensors([("w", "F32", [2, 2, 2, 2], 4)]),
        "empty-header.safetensors": struct.pack("<Q", 8) + b"{}      ",
    }
    for name, data in st.items():
        write("safetensors", name, data)
        write("load", name, data)
    s1 = "model-00001-of-00002.safetensors"
    s2 = "model-00002-of-00002.safetensors"
    idx = {
        "good.json": {"metadata": {"total_size": 52}, "weight_map": {"a": s1, "b": s1, "c": s2}},
        "one-shard.json": {"weight_map": {"a": s1, "b": s1}},
        "missing-shard.json": {"metadata": {}, "weight_map": {"a": s1, "z": "model-00003-of-00003.safetensors"}},
        "wrong-shard.json": {"weight_map": {"a": s2, "b": s1, "c": s2}},
        "bad-name.json": {"weight_map": {"a": "../x.safetensors"}},
        "empty-map.json": {"metadata": {"total_size": 0}, "weight_map": {}},
    }
    for name, obj in idx.items():
        write("index", name, json.dumps(obj, separators=(",", ":")).encode())


if __name__ == "__main__":
    main()
