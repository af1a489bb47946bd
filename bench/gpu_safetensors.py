#!/usr/bin/env python3
"""gpu_safetensors.py: the peer of bench/gpu.sh: safetensors.torch.load_file(path, device="cuda:0").

Times each load (CUDA already initialised, torch.cuda.synchronize() before the clock stops),
samples the host footprint (RssAnon + RssShmem + VmSwap, as bench/gpu/common.c does) every 2 ms from a
thread during the load, and prints one JSON line like `gpu load`.

Usage: gpu_safetensors.py FILE [REPEAT]
"""
import json
import sys
import threading
import time

import torch


from hostmem import footprint  # RssAnon + RssShmem + VmSwap (bench/hostmem.py)


def main():
    from safetensors.torch import load_file  # here: python_gpu.py imports footprint alone

    path = sys.argv[1]
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    torch.zeros(1, device="cuda:0")
    torch.cuda.synchronize()
    base = footprint()
    times, peak_delta, nbytes = [], 0, 0
    for _ in range(repeat):
        stop = threading.Event()
        peak = [footprint()]

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], footprint())
                time.sleep(0.002)

        th = threading.Thread(target=sample)
        th.start()
        t0 = time.perf_counter()
        sd = load_file(path, device="cuda:0")
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        stop.set()
        th.join()
        times.append(t1 - t0)
        peak_delta = max(peak_delta, peak[0] - base)
        nbytes = sum(t.numel() * t.element_size() for t in sd.values())
        del sd
        torch.cuda.empty_cache()
    times.sort()
    best, median = times[0], times[len(times) // 2]
    print(json.dumps({
        "bench": "safetensors.torch.load_file", "file": path, "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__, "tensor_bytes": nbytes, "repeat": repeat,
        "best_s": round(best, 4), "median_s": round(median, 4),
        "best_gbps": round(nbytes / best / 1e9, 2), "median_gbps": round(nbytes / median / 1e9, 2),
        "footprint_base": base, "footprint_peak_delta": peak_delta,
    }))


if __name__ == "__main__":
    main()
