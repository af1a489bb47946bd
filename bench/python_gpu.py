#!/usr/bin/env python3
"""python_gpu.py: the Python package's GPU benchmark, in one run on one file:

  weightmap.load_file(FILE, device=DEVICE)            the package: staged CUDA load, DLPack views
  safetensors.torch.load_file(FILE, device=DEVICE)    the peer
  weightmap load FILE --mode mmap --backend DEVICE    the C CLI's staged path (a subprocess), the
                                                      ceiling the package should reach

Rounds alternate the three (after one warm-up round, page cache warm), REPEAT rounds; each figure
is the median (and best) of its rounds. The package is timed over the whole call (open, load,
one torch tensor per tensor, torch.cuda.synchronize()); its wm_model_load alone is reported too.
The CLI reports wm_model_load's time of each cycle (after wm_backend_init). During each load of
the package and of safetensors a thread samples the host footprint (RssAnon + RssShmem + VmSwap,
as bench/gpu/common.c and bench/gpu_safetensors.py do) every 2 ms; the peak is reported above the
footprint just before that load (the rounds alternate, so memory that one loader's allocator
keeps after its load is not charged to the next), the largest over the rounds; for the package
also what each load left once its tensors were deleted ("footprint_left", bytes, each round).
After each package round the ledger must read 0 (else the run fails).

Usage: python_gpu.py FILE [--repeat N] [--device cuda:0] [--cli build-gpu/weightmap]
Prints one JSON line per measurement and a Markdown table.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

import weightmap

from hostmem import Sampler, footprint  # bench/hostmem.py, beside this file


def run_weightmap(path, device):
    with Sampler() as s:
        t0 = time.perf_counter()
        with weightmap.safe_open(path, framework="pt", device=device) as f:
            sd = dict(f.tensors())
            load_s = f.stats()["load_seconds"]
        torch.cuda.synchronize()
        t1 = time.perf_counter()
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    assert all(t.is_cuda for t in sd.values())
    del sd
    led = weightmap.ledger()
    if led["bytes"] or led["regions"]:
        sys.exit(f"python_gpu: the ledger holds {led} after the tensors were deleted")
    return t1 - t0, load_s, nbytes, s.peak - s.before, footprint() - s.before


def run_safetensors(path, device):
    from safetensors.torch import load_file
    with Sampler() as s:
        t0 = time.perf_counter()
        sd = load_file(path, device=device)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    del sd
    torch.cuda.empty_cache()
    return t1 - t0, nbytes, s.peak - s.before


def run_cli(cli, path, device):
    out = subprocess.run([cli, "load", path, "--mode", "mmap", "--backend", device, "--cycles", "1",
                          "--json"], check=True, stdout=subprocess.PIPE, text=True).stdout
    r = json.loads(out)
    if not r["ok"]:
        sys.exit(f"python_gpu: the CLI did not return every byte: {out}")
    return r["cycles"][0]["load_seconds"], r["tensor_bytes"]


def summary(name, secs, nbytes, extra=None):
    med, best = statistics.median(secs), min(secs)
    r = {"bench": name, "runs": len(secs), "tensor_bytes": nbytes, "median_s": round(med, 4),
         "best_s": round(best, 4), "median_gbps": round(nbytes / med / 1e9, 2),
         "best_gbps": round(nbytes / best / 1e9, 2), "seconds": [round(x, 4) for x in secs]}
    r.update(extra or {})
    print(json.dumps(r), flush=True)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--cli", default="build-gpu/weightmap")
    a = ap.parse_args()

    torch.zeros(1, device=a.device)
    torch.cuda.synchronize()
    weightmap.backend_init(a.device)
    base = footprint()
    print(json.dumps({"bench": "machine", "device": torch.cuda.get_device_name(0),
                      "torch": torch.__version__, "weightmap": weightmap.__version__,
                      "python": sys.version.split()[0], "footprint_base": base}), flush=True)

    wm_s, wm_load_s, st_s, cli_s = [], [], [], []
    wm_peak = st_peak = 0
    wm_left = []
    nbytes = 0
    for rnd in range(a.repeat + 1):            # round 0 warms everything and is not counted
        t, load_s, nbytes, peak, left = run_weightmap(a.file, a.device)
        ts, nb_st, peak_st = run_safetensors(a.file, a.device)
        tc, nb_cli = run_cli(a.cli, a.file, a.device)
        assert nb_st == nbytes == nb_cli, (nb_st, nbytes, nb_cli)
        if rnd == 0:
            continue
        wm_s.append(t)
        wm_load_s.append(load_s)
        st_s.append(ts)
        cli_s.append(tc)
        wm_peak = max(wm_peak, peak)
        st_peak = max(st_peak, peak_st)
        wm_left.append(left)

    wm = summary("weightmap.load_file", wm_s, nbytes, {"footprint_peak_delta": wm_peak,
                                                        "footprint_left": wm_left})
    wml = summary("weightmap.load_file: its wm_model_load", wm_load_s, nbytes)
    st = summary("safetensors.torch.load_file", st_s, nbytes, {"footprint_peak_delta": st_peak})
    c = summary("weightmap load (C CLI, staged)", cli_s, nbytes)
    MiB = 1 << 20
    print()
    print(f"| what ({nbytes / 2**30:.2f} GiB safetensors, warm cache, {a.device}) | GB/s median | "
          f"GB/s best | x safetensors | x C path | host footprint peak during the load |")
    print("|---|---:|---:|---:|---:|---:|")
    for r, fp in ((wm, wm_peak), (wml, None), (st, st_peak), (c, None)):
        print(f"| {r['bench']} | {r['median_gbps']} | {r['best_gbps']} | "
              f"{r['median_gbps'] / st['median_gbps']:.1f} | {r['median_gbps'] / c['median_gbps']:.2f} | "
              f"{'' if fp is None else f'{fp / MiB:.0f} MiB'} |")
    ok_st = wm["median_gbps"] >= 5 * st["median_gbps"]
    ok_c = wm["median_gbps"] >= 0.9 * c["median_gbps"]
    print(f"\ntargets: >= 5x safetensors: {'met' if ok_st else 'NOT met'}; within 10% of the C "
          f"path: {'met' if ok_c else 'NOT met'}")


if __name__ == "__main__":
    main()
