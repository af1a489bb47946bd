/*
 * main.c: the GPU benchmark's measuring program, bench/gpu (bench/gpu.sh runs it), one file per
 * subcommand beside this one. Each subcommand prints one JSON line:
 *
 *   gpu load FILE [--registered] [--threads N] [--budget BYTES] [--repeat R] [--verify]
 *            [--window BYTES] [--slots N] [--serial-ring] [--no-reap] [--direct]
 *       weightmap's CUDA load (staged, or registered with --registered): wall time of
 *       wm_model_load, the host footprint (RssAnon + RssShmem + VmSwap) sampled every 2 ms
 *       from a thread during each load (peak above its value right after CUDA initialisation),
 *       the ledger's pinned peak, the footprint left after the first and the last release, and
 *       with --verify every byte copied back and compared with the file. --window, --slots,
 *       --serial-ring and --no-reap change the staged pipeline (wm__cuda_tune), to measure;
 *       --direct reads with O_DIRECT (direct_io).
 *   gpu load ... [--devices LIST] [--placement balance|layers] [--tp R/W]
 *       the same over several devices (LIST: "0,1"), or rank R of W of a tensor-parallel load
 *       (the llama rule: attention q/k/v and ffn up/gate split along dim 0, attention output
 *       and ffn down along the last dimension, the rest whole); bytes_read says what was read.
 *   gpu h2d [--bytes BYTES] [--repeat R] [--devices LIST] [--rows WIDTH]
 *       the ceiling of the bus: cudaMemcpyAsync of a registered (cudaHostRegister) buffer to
 *       the device, timed with events, on one stream and on four; with --devices, each device
 *       alone and then all at once (each from its own registered buffer), timed on the host.
 *       --rows: also half the buffer as rows of WIDTH bytes every 2*WIDTH (a last-dimension
 *       tensor-parallel slice), in one cudaMemcpy2DAsync, against the same bytes packed.
 *   gpu ranks FILE --ranks W [--tp] [--nccl] [--repeat R] [--threads N]
 *       W processes at once, rank r on device r (r mod the device count without --nccl), each
 *       loading the model: whole (neither flag), its tensor-parallel slice (--tp), or reading
 *       once with NCCL (--nccl: replicated tensors read 1/W by each rank and broadcast); the
 *       slowest rank's time, every rank's bytes read, and their sum against the file.
 *   gpu cycles FILE [--registered] [--threads N] [--cycles N] [--rehearse
 * ROUNDS,EVENTS,COPIES[,MIB]]
 *              [--malloc-info FILE]
 *       where host memory goes over load+release cycles: the footprint left after each
 *       release (above its value right after CUDA initialisation), malloc's figures, and the
 *       mappings whose anonymous memory changed (first cycle; first to last).
 *   gpu register FILE [--threads N] [--window BYTES] [--repeat R]
 *       what sending the page cache straight to the device could reach: N threads register
 *       the file's shared mapping window by window (cudaHostRegisterReadOnly), copy and
 *       unregister; figures for each part and for the three pipelined per thread.
 *   gpu sleep FILE [--repeat R] [--piece BYTES] [--streams N] [--no-huge] [--no-prefault]
 *       [--pinned-whole] [--verify]
 *       the pool's sleep and wake (WM_POOL_SLEEP) of FILE loaded on device 0 (heap), R times:
 *       the median of each part (wake: device buffers, ring pages, ring registered, copies
 *       and their GiB/s, ring unregistered, ring and host copy freed; sleep: host copy and
 *       ring pages, ring registered, copies, ring unregistered and freed, device buffers
 *       freed), how much of the host copy the kernel gave huge pages (AnonHugePages asleep and
 *       awake), with --verify every byte after the last wake. --piece (64M: a bounce slot),
 *       --streams (2), --no-huge, --no-prefault (no threads fault the host copy in first: at
 *       a sleep the ring's workers fault it as they copy into it) and --pinned-whole (no
 *       bounce ring: the host copy registered whole at the sleep, copied from directly,
 *       unregistered after the wake's copies, as in 1.8) change the copies
 *       (wm__cuda_tune_swap), to measure.
 *   gpu pread FILE [--threads N] [--block BYTES] [--repeat R] [--run BYTES]
 *       the ceiling of the page cache: N threads pread the file in blocks, into reused
 *       per-thread buffers and into one buffer the size of the file (both pre-faulted).
 *       --run: each block read as runs of BYTES every 2*BYTES (half the file, a pread each: the
 *       rows of a last-dimension slice); GB/s of the bytes read. With --own-fd each thread
 *       preads through a descriptor of its own; with --mapped the runs are copied from a shared
 *       read-only mapping of the file made and unmapped in each pass.
 *
 * Without a CUDA build, or with no arguments, it says so and exits 77 (skipped), so `make
 * bench` passes over it.
 */
#include "gpu.h"

int main(int argc, char **argv) {
#ifdef WM_HAVE_CUDA
    if (argc >= 2 && !strcmp(argv[1], "load")) return gpu_load(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "h2d")) return gpu_h2d(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "pread")) return gpu_pread(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "cycles")) return gpu_cycles(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "register")) return gpu_register(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "sleep")) return gpu_sleep(argc - 2, argv + 2);
#ifdef WM_HAVE_NCCL
    if (argc >= 2 && !strcmp(argv[1], "ranks")) return gpu_ranks(argc - 2, argv + 2);
#endif
    fprintf(stderr, "bench/gpu: run bench/gpu.sh on a machine with a GPU (usage: gpu load FILE "
                    "[--registered] ... | gpu h2d | gpu pread FILE); skipped\n");
#else
    (void)argc;
    (void)argv;
    fprintf(stderr, "bench/gpu: this build has no CUDA backend; skipped\n");
#endif
    return 77;
}
