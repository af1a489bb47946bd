"""trace_python.py: a Python process that loads a model CYCLES times and releases it, for
`weightmap trace` (bench/RESULTS.md, docs/TRACE.md). Each release is marked with the tracer's
release signal, its number in $WMTRACE_SIGNAL (SIGRTMIN+4 unless --release-signal says
otherwise; SIGUSR1 where the variable is not set: the tracer handles that one too when the
program leaves it alone, as Python does).

    python3 bench/trace_python.py torch|weightmap MODEL CYCLES [mmap|heap]

torch: torch.load of a .pt state dict (Debian's python3-torch; `--file MODEL` names it to the
tracer, a .pt is no GGUF/safetensors file); weightmap: weightmap.load_file of a .safetensors or
.gguf (this project's package). Without MODEL's file, torch makes one: a 64 MiB state dict.
"""
import gc
import os
import signal
import sys


def main():
    kind, model, cycles = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mode = sys.argv[4] if len(sys.argv) > 4 else "mmap"
    import torch
    if kind == "torch" and not os.path.exists(model):
        torch.save({f"layer{i}.weight": torch.ones(1024, 1024) for i in range(16)}, model)
    for _ in range(cycles):
        if kind == "torch":
            sd = torch.load(model)
        else:
            import weightmap
            sd = weightmap.load_file(model, mode=mode)
        total = sum(float(t.flatten()[-1]) for t in sd.values())  # touches each, copies none
        del sd
        gc.collect()
        os.kill(os.getpid(), int(os.environ.get("WMTRACE_SIGNAL", signal.SIGUSR1)))
        print(f"trace_python: {kind} cycle done ({total:.0f})", file=sys.stderr)


if __name__ == "__main__":
    main()
