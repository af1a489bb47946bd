#!/usr/bin/env python3
"""python_transformers.py: transformers' from_pretrained through weightmap, as a user runs it
(bench/python_transformers.sh drives it on the GPU machine).

  models DIR                 small random-init llama, qwen2, gpt2, bert and t5 models made and
                             saved by transformers itself, each as one file and sharded
                             (save_pretrained max_shard_size); DIR/models.json lists them
  check DIR DEVICE MODE      for each model: from_pretrained plain, then inside
                             weightmap.loading(device=DEVICE, mode=MODE); outputs and state dicts
                             must be identical, the tensors on DEVICE, and after `del model` the
                             ledger must read 0. One JSON line per model; exit 1 on any mismatch
  write-llama DIR GIB        a llama-shaped bf16 checkpoint of at least GIB GiB (config.json from
                             LlamaConfig, --shards N shards (2) and an index; values random, made
                             on the GPU)
  bench DIR [--repeat N]     from_pretrained(DIR, device_map="cuda:0") plain and inside
                             weightmap.loading(device="cuda:0"), alternating, after a warm-up
                             round each; time to a synchronised model, host footprint peak above
                             the footprint before the load (sampled every 2 ms), every tensor of
                             each accelerated load compared with the plain load's; ledger 0 after
                             each `del model`. JSON lines and a Markdown table.

Everything but `models`/`check`/`bench` needs torch alone (`write-llama` without transformers
writes the standard llama names itself), so the pieces run on a CPU machine too.
"""
import argparse
import gc
import json
import os
import statistics
import struct
import sys
import time
import traceback

import torch

import weightmap

MiB = 1 << 20


from hostmem import Sampler, footprint  # bench/hostmem.py, beside this file


def ledger_bytes():
    led = weightmap.ledger()
    return led["bytes"] + led["regions"]


def emit(**kw):
    print(json.dumps(kw), flush=True)


# ---- small models made by transformers ------------------------------------------------------

def small_configs():
    import transformers as tf
    common = dict(vocab_size=256)
    return {
        "llama": (tf.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=64, **common), "AutoModelForCausalLM"),
        "qwen2": (tf.Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=64, **common), "AutoModelForCausalLM"),
        "gpt2": (tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64, **common),
                 "AutoModelForCausalLM"),
        "bert": (tf.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=128, max_position_embeddings=64, **common),
                 "AutoModel"),
        "t5": (tf.T5Config(d_model=64, d_ff=128, d_kv=16, num_layers=2, num_heads=4, **common),
               "AutoModelForSeq2SeqLM"),
    }


def cmd_models(args):
    import transformers as tf
    os.makedirs(args.dir, exist_ok=True)
    listing = []
    for name, (cfg, cls) in small_configs().items():
        torch.manual_seed(0)
        model = getattr(tf, cls).from_config(cfg)
        for layout in ("single", "sharded"):
            out = os.path.join(args.dir, f"{name}-{layout}")
            kw = {"max_shard_size": "100KB"} if layout == "sharded" else {}
            model.save_pretrained(out, **kw)
            files = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
            listing.append({"name": name, "layout": layout, "path": os.path.abspath(out), "cls": cls,
                            "files": len(files)})
            emit(stage="models", model=name, layout=layout, files=len(files))
        del model
    with open(os.path.join(args.dir, "models.json"), "w") as f:
        json.dump(listing, f)


def pretrained(cls, path, device, **kw):
    """cls.from_pretrained(path, device_map=device); where device_map needs the accelerate
    package and it is absent, from_pretrained(path).to(device), said on stderr."""
    try:
        return cls.from_pretrained(path, device_map=device, **kw)
    except (ImportError, ValueError) as e:
        if "accelerate" not in str(e):
            raise
        print(f"python_transformers: device_map needs accelerate ({e}): .to({device!r})",
              file=sys.stderr)
        return cls.from_pretrained(path, **kw).to(device)


def outputs(model, name):
    ids = torch.arange(1, 17, device=model.device).reshape(2, 8) % 250
    with torch.no_grad():
        if name == "t5":
            return model(input_ids=ids, decoder_input_ids=ids[:, :4]).logits
        out = model(input_ids=ids)
        return out.logits if hasattr(out, "logits") else out.last_hidden_state


def same_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    if sorted(sa) != sorted(sb):
        return f"keys differ: {sorted(set(sa) ^ set(sb))[:4]}"
    for k in sa:
        x, y = sa[k], sb[k]
        if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x.cpu(), y.cpu()):
            return f"tensor {k} differs"
    return None


def check_one(tf, m, device, mode):
    """from_pretrained plain and inside weightmap.loading(): outputs, state dict, device, and
    the ledger after `del model`."""
    cls = getattr(tf, m["cls"])
    plain = pretrained(cls, m["path"], device).eval()
    want = outputs(plain, m["name"])
    with weightmap.loading(device=device, mode=mode):
        model = pretrained(cls, m["path"], device).eval()
    on_device = all(p.device.type == torch.device(device).type for p in model.parameters())
    held_loaded = weightmap.ledger()["bytes"]
    got = outputs(model, m["name"])
    diff = same_state(plain, model)
    equal = torch.equal(want, got)
    del model, got
    gc.collect()
    if device != "cpu":
        torch.cuda.synchronize()
    left = ledger_bytes()
    return {"outputs_equal": equal, "state_dict": diff or "equal", "on_device": on_device,
            "ledger_while_loaded": held_loaded, "ledger_after_del": left,
            "ok": equal and diff is None and on_device and left == 0 and held_loaded > 0}


def cmd_check(args):
    import transformers as tf
    with open(os.path.join(args.dir, "models.json")) as f:
        listing = json.load(f)
    failed = 0
    mode = None if args.mode == "default" else args.mode
    for m in listing:
        emit(stage="check", model=m["name"], layout=m["layout"], device=args.device,
             mode=args.mode, step="start")
        try:
            result = check_one(tf, m, args.device, mode)
        except Exception as e:              # noqa: B902 (reported, and the next model runs)
            traceback.print_exc()
            result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        gc.collect()
        failed += not result["ok"]
        emit(stage="check", model=m["name"], layout=m["layout"], files=m["files"],
             device=args.device, mode=args.mode, **result)
    sys.exit(1 if failed else 0)


# ---- a large llama-shaped checkpoint ---------------------------------------------------------

def llama_shapes(layers, hidden=4096, inter=14336, vocab=32000, kv=1024):
    """The names and shapes of a Hugging Face llama checkpoint (untied head)."""
    shapes = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes += [(p + "self_attn.q_proj.weight", (hidden, hidden)),
                   (p + "self_attn.k_proj.weight", (kv, hidden)),
                   (p + "self_attn.v_proj.weight", (kv, hidden)),
                   (p + "self_attn.o_proj.weight", (hidden, hidden)),
                   (p + "mlp.gate_proj.weight", (inter, hidden)),
                   (p + "mlp.up_proj.weight", (inter, hidden)),
                   (p + "mlp.down_proj.weight", (hidden, inter)),
                   (p + "input_layernorm.weight", (hidden,)),
                   (p + "post_attention_layernorm.weight", (hidden,))]
    shapes += [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]
    return shapes


def write_shard(path, entries, device):
    """entries: [(name, shape)], bf16 values made on `device` and streamed to the file."""
    header, off = {}, 0
    for name, shape in entries:
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    gen = torch.Generator(device=device).manual_seed(len(entries))
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape in entries:
            t = torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * 0.02
            f.write(t.to(torch.bfloat16).cpu().view(torch.uint8).numpy().tobytes())
    return off


LLAMA = {"hidden": 4096, "inter": 14336, "vocab": 32000, "kv": 1024, "heads": 32, "kv_heads": 8}
LLAMA_SMALL = {"hidden": 256, "inter": 512, "vocab": 1000, "kv": 64, "heads": 4, "kv_heads": 1}


def cmd_write_llama(args):
    c = LLAMA_SMALL if args.small else LLAMA
    h, i, kv = c["hidden"], c["inter"], c["kv"]
    per_layer = 2 * (2 * h * h + 2 * kv * h + 3 * h * i + 2 * h)
    fixed = 2 * (2 * c["vocab"] * h + h)
    layers = max(1, -(-(int(args.gib * (1 << 30)) - fixed) // per_layer))
    shapes = llama_shapes(layers, h, i, c["vocab"], kv)
    os.makedirs(args.dir, exist_ok=True)
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    n = max(1, args.shards)
    cut = [len(shapes) * k // n for k in range(n + 1)]
    parts = [shapes[cut[k]:cut[k + 1]] for k in range(n)]
    weight_map, total = {}, 0
    for k, part in enumerate(parts):
        fname = f"model-{k + 1:05d}-of-{len(parts):05d}.safetensors"
        total += write_shard(os.path.join(args.dir, fname), part, device)
        weight_map.update({name: fname for name, _ in part})
    with open(os.path.join(args.dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
              "intermediate_size": i, "num_hidden_layers": layers,
              "num_attention_heads": c["heads"], "num_key_value_heads": c["kv_heads"],
              "vocab_size": c["vocab"],
              "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
              "torch_dtype": "bfloat16", "dtype": "bfloat16"}
    with open(os.path.join(args.dir, "config.json"), "w") as f:
        json.dump(config, f)
    emit(stage="write-llama", dir=args.dir, layers=layers, bytes=total, gib=total / (1 << 30),
         tensors=len(shapes))


# ---- the benchmark ---------------------------------------------------------------------------

def load_once(path, accelerated):
    from transformers import AutoModelForCausalLM
    gc.collect()
    torch.cuda.synchronize()
    with Sampler() as s:
        t0 = time.perf_counter()
        if accelerated:
            with weightmap.loading(device="cuda:0"):
                model = pretrained(AutoModelForCausalLM, path, "cuda:0", dtype="auto")
        else:
            model = pretrained(AutoModelForCausalLM, path, "cuda:0", dtype="auto")
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    return model, seconds, s.peak - s.before


def verify(model, ref):
    """Every tensor of model's state dict equals the reference's (on the GPU)."""
    sd = model.state_dict()
    if sorted(sd) != sorted(ref):
        return False
    return all(sd[k].dtype == ref[k].dtype and torch.equal(sd[k], ref[k]) for k in ref)


def cmd_bench(args):
    torch.zeros(1, device="cuda:0")
    weightmap.backend_init("cuda:0")
    nbytes = sum(os.path.getsize(os.path.join(args.dir, f)) for f in os.listdir(args.dir)
                 if f.endswith(".safetensors"))
    plain_ref, _, _ = load_once(args.dir, False)           # warm-up, and the reference
    ref = {k: v for k, v in plain_ref.state_dict().items()}
    model, _, _ = load_once(args.dir, True)                # warm-up
    assert verify(model, ref), "the accelerated load differs from the plain one"
    del model
    gc.collect()
    assert ledger_bytes() == 0, weightmap.ledger()
    rounds = {"plain": [], "weightmap": []}
    for r in range(args.repeat):
        order = ("plain", "weightmap") if r % 2 == 0 else ("weightmap", "plain")
        for kind in order:
            model, secs, peak = load_once(args.dir, kind == "weightmap")
            ok = verify(model, ref)
            del model
            gc.collect()
            torch.cuda.synchronize()
            left = ledger_bytes()
            rounds[kind].append((secs, peak, ok, left))
            emit(stage="bench", round=r, kind=kind, seconds=secs, gbps=nbytes / secs / 1e9,
                 footprint_peak_mib=peak / MiB, verified=ok, ledger_after_del=left)
            if not ok or (kind == "weightmap" and left):
                sys.exit(f"bench: round {r} {kind}: verified {ok}, ledger {left}")
    med = {k: statistics.median(s for s, _, _, _ in v) for k, v in rounds.items()}
    peak = {k: max(p for _, p, _, _ in v) / MiB for k, v in rounds.items()}
    emit(stage="bench-summary", bytes=nbytes, repeat=args.repeat, median_plain_s=med["plain"],
         median_weightmap_s=med["weightmap"], speedup=med["plain"] / med["weightmap"],
         footprint_peak_mib=peak, all_verified=True)
    print(f"\n| from_pretrained of {nbytes / (1 << 30):.2f} GiB bf16 llama to cuda:0 | median of "
          f"{args.repeat} (s) | GB/s | host footprint peak above before (MiB) |\n|---|---|---|---|")
    for k in ("plain", "weightmap"):
        print(f"| {'plain transformers' if k == 'plain' else 'inside weightmap.loading()'} | "
              f"{med[k]:.3f} | {nbytes / med[k] / 1e9:.1f} | {peak[k]:.0f} |")
    print(f"\nspeedup {med['plain'] / med['weightmap']:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("models")
    p.add_argument("dir")
    p = sub.add_parser("check")
    p.add_argument("dir")
    p.add_argument("device")
    p.add_argument("mode")
    p = sub.add_parser("write-llama")
    p.add_argument("dir")
    p.add_argument("gib", type=float)
    p.add_argument("--small", action="store_true", help="small dimensions (a CPU try-out)")
    p.add_argument("--shards", type=int, default=2, help="files the tensors are cut into")
    p = sub.add_parser("bench")
    p.add_argument("dir")
    p.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    {"models": cmd_models, "check": cmd_check, "write-llama": cmd_write_llama,
     "bench": cmd_bench}[args.cmd](args)


if __name__ == "__main__":
    main()
