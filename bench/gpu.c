/*
 * gpu.c: the GPU benchmark's measuring program (bench/gpu.sh runs it; issue 6). Each
 * subcommand prints one JSON line:
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
 *   gpu pread FILE [--threads N] [--block BYTES] [--repeat R] [--run BYTES]
 *       the ceiling of the page cache: N threads pread the file in blocks, into reused
 *       per-thread buffers and into one buffer the size of the file (both pre-faulted).
 *       --run: each block read as runs of BYTES every 2*BYTES (half the file, a pread each: the
 *       rows of a last-dimension slice); GB/s of the bytes read. With --own-fd each thread
 *       preads through a descriptor of its own; with --mapped the runs are copied from a shared
 *       read-only mapping of the file made and unmapped in each pass.
 *
 * Without a CUDA build, or with no arguments, it says so and exits 77 (skipped), so `make
 * bench` passes over it. Sections: helpers; footprint sampler; load; h2d; pread; cycles;
 * register; ranks; main.
 */
#include "backend/cuda_tune.h" /* wm__cuda_tune: the pipeline's measuring knobs */
#include "weightmap.h"

#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifdef WM_HAVE_CUDA
#include <cuda_runtime_api.h>

/* ---- helpers ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static bool parse_size(const char *s, uint64_t *out) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) return false;
    switch (*end) {
    case 'G': v <<= 30; break;
    case 'M': v <<= 20; break;
    case 'K': v <<= 10; break;
    case 0: break;
    default: return false;
    }
    *out = v;
    return true;
}

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "gpu: %s: %s\n", #call, cudaGetErrorString(e_));                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void *pages(size_t len) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("gpu: mmap");
        exit(1);
    }
    madvise(p, len, MADV_HUGEPAGE);
    memset(p, 1, len);
    return p;
}

/* "0,1,2" into devs (at most 16); the count, or 0 when malformed. */
static unsigned parse_devices(const char *s, int *devs) {
    unsigned n = 0;
    for (const char *p = s; *p && n < 16;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 15) return 0;
        devs[n++] = (int)v;
        if (*end && *end != ',') return 0;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* wm_backend_init on every device of a load. */
static bool init_devices(const wm_load_options *o) {
    wm_error err;
    unsigned n = o->n_devices > 1 ? o->n_devices : 1;
    for (unsigned k = 0; k < n; k++)
        if (wm_backend_init(WM_BACKEND_CUDA, n > 1 ? o->devices[k] : o->device, &err) != WM_OK) {
            fprintf(stderr, "gpu: %s\n", err.msg);
            return false;
        }
    return true;
}

/* ---- footprint sampler ---- */

typedef struct sampler {
    pthread_t th;
    atomic_int stop;
    uint64_t peak;
    unsigned samples;
} sampler;

/* RssAnon + RssShmem + VmSwap from /proc/self/status: the footprint weightmap reports
 * (Anonymous + Swap + RssShmem), from counters the kernel keeps, so that sampling costs the
 * load nothing (smaps_rollup would walk every page of a mapped model each time). */
static uint64_t footprint(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    uint64_t sum = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "RssAnon: %llu", &kb) == 1 || sscanf(line, "RssShmem: %llu", &kb) == 1 ||
            sscanf(line, "VmSwap: %llu", &kb) == 1)
            sum += (uint64_t)kb * 1024;
    }
    fclose(f);
    return sum;
}

static void *sample(void *arg) {
    sampler *s = arg;
    struct timespec d = {0, 2000000};
    while (!atomic_load(&s->stop)) {
        uint64_t f = footprint();
        if (f > s->peak) s->peak = f;
        s->samples++;
        nanosleep(&d, NULL);
    }
    return NULL;
}

static void sampler_start(sampler *s) {
    s->peak = footprint();
    s->samples = 0;
    atomic_store(&s->stop, 0);
    pthread_create(&s->th, NULL, sample, s);
}

static void sampler_stop(sampler *s) {
    atomic_store(&s->stop, 1);
    pthread_join(s->th, NULL);
    uint64_t f = footprint();
    if (f > s->peak) s->peak = f;
}

/* ---- load ---- */

/* Copies every tensor back and compares it with the file, 64 MiB at a time. */
static bool verify(wm_model *m) {
    const wm_file *f = wm_model_file(m);
    size_t cap = (size_t)64 << 20;
    unsigned char *a = malloc(cap), *b = malloc(cap);
    bool ok = a && b;
    for (size_t i = 0; ok && i < wm_file_tensor_count(f); i++) {
        wm_tensor_info ti;
        wm_file_tensor(f, i, &ti);
        const unsigned char *d = (const unsigned char *)(uintptr_t)wm_model_tensor_device_ptr(m, i);
        int fd = open(wm_file_shard_path(f, ti.shard), O_RDONLY);
        if (fd < 0) ok = false;
        for (uint64_t off = 0; ok && off < ti.nbytes; off += cap) {
            size_t n = ti.nbytes - off < cap ? (size_t)(ti.nbytes - off) : cap;
            ok = cudaMemcpy(a, d + off, n, cudaMemcpyDeviceToHost) == cudaSuccess &&
                 pread(fd, b, n, (off_t)(ti.offset + off)) == (ssize_t)n && memcmp(a, b, n) == 0;
            if (!ok)
                fprintf(stderr, "gpu: tensor %s differs near byte %" PRIu64 "\n", ti.name, off);
        }
        if (fd >= 0) close(fd);
    }
    free(a);
    free(b);
    return ok;
}

static int cmd_load(int argc, char **argv) {
    const char *path = NULL;
    wm_cuda_options cu = WM_CUDA_OPTIONS_INIT;
    wm_load_options o = {.size = sizeof o, .cuda = &cu};
    o.backend = WM_BACKEND_CUDA;
    o.mode = WM_MODE_HEAP;
    unsigned repeat = 3, slots = 0, flags = 0;
    uint64_t window = 0;
    bool check = false;
    int devs[16];
    for (int i = 0; i < argc; i++) {
        uint64_t v;
        unsigned r, w;
        if (!strcmp(argv[i], "--devices") && i + 1 < argc) {
            o.n_devices = parse_devices(argv[++i], devs);
            if (o.n_devices == 0) return 2;
            o.devices = devs;
            o.device = devs[0];
        } else if (!strcmp(argv[i], "--placement") && i + 1 < argc) {
            o.placement = !strcmp(argv[++i], "layers") ? WM_PLACE_LAYERS : WM_PLACE_BALANCE;
        } else if (!strcmp(argv[i], "--tp") && i + 1 < argc &&
                   sscanf(argv[++i], "%u/%u", &r, &w) == 2 && r < w) {
            o.tp_rank = r;
            o.tp_world = w;
            o.tp_split = wm_split_llama;
        } else if (!strcmp(argv[i], "--window") && i + 1 < argc && parse_size(argv[++i], &v)) {
            window = v;
        } else if (!strcmp(argv[i], "--slots") && i + 1 < argc && parse_size(argv[++i], &v)) {
            slots = (unsigned)v;
        } else if (!strcmp(argv[i], "--direct")) {
            cu.direct_io = 1;
        } else if (!strcmp(argv[i], "--serial-ring")) {
            flags |= WM__CUDA_SERIAL_RING;
        } else if (!strcmp(argv[i], "--no-reap")) {
            flags |= WM__CUDA_NO_REAP;
        } else if (!strcmp(argv[i], "--registered")) {
            o.mode = WM_MODE_MMAP;
            cu.registered = 1;
        } else if (!strcmp(argv[i], "--verify")) {
            check = true;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc && parse_size(argv[++i], &v)) {
            o.threads = (unsigned)v;
        } else if (!strcmp(argv[i], "--budget") && i + 1 < argc && parse_size(argv[++i], &v)) {
            cu.pinned_budget = v;
        } else if (!strcmp(argv[i], "--max-buffer") && i + 1 < argc && parse_size(argv[++i], &v)) {
            o.max_buffer_size = v;
        } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            repeat = (unsigned)v;
        } else if (!path && argv[i][0] != '-') {
            path = argv[i];
        } else {
            fprintf(stderr, "gpu load: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!path) return 2;
    wm__cuda_tune((size_t)window, slots, flags);
    wm_error err;
    if (!init_devices(&o)) return 77;
    if (o.tp_world > 1) check = false; /* verify compares whole tensors */
    uint64_t base = footprint();       /* right after CUDA initialisation */
    wm_file *f;
    if (wm_file_open(path, &f, &err) != WM_OK) {
        fprintf(stderr, "gpu: %s\n", err.msg);
        return 1;
    }
    double t[64];
    if (repeat > 64) repeat = 64;
    uint64_t peak_delta = 0, pinned_peak = 0, scratch_peak = 0;
    wm_model_stats st = {0};
    bool verified = false, released = true;
    int64_t left_first = 0, left_last = 0; /* footprint after release, above the base */
    for (unsigned r = 0; r < repeat; r++) {
        sampler s;
        wm_ledger_reset_peaks();
        sampler_start(&s);
        wm_model *m;
        double t0 = now_s();
        wm_status rc = wm_model_load(f, &o, &m, &err);
        double t1 = now_s();
        sampler_stop(&s);
        if (rc != WM_OK) {
            fprintf(stderr, "gpu: %s\n", err.msg);
            return 1;
        }
        t[r] = t1 - t0;
        wm_ledger l = WM_LEDGER_INIT;
        wm_ledger_get(&l);
        if (l.cat[WM_LEDGER_PINNED].peak > pinned_peak) pinned_peak = l.cat[WM_LEDGER_PINNED].peak;
        if (l.cat[WM_LEDGER_SCRATCH].peak > scratch_peak)
            scratch_peak = l.cat[WM_LEDGER_SCRATCH].peak;
        if (s.peak > base && s.peak - base > peak_delta) peak_delta = s.peak - base;
        wm_model_stats_get(m, &st);
        if (check && r == 0) verified = verify(m);
        wm_model_release(m);
        uint64_t after = footprint();
        if (r == 0) left_first = (int64_t)(after - base);
        left_last = (int64_t)(after - base);
        wm_ledger_get(&l);
        released = released && l.cat[WM_LEDGER_DEVICE].current == 0 &&
                   l.cat[WM_LEDGER_PINNED].current == 0;
    }
    wm_file_close(f);
    double sorted[64];
    memcpy(sorted, t, repeat * sizeof *t);
    qsort(sorted, repeat, sizeof *sorted, cmp_double);
    double best = sorted[0], median = sorted[repeat / 2];
    printf(
        "{\"bench\": \"load\", \"file\": \"%s\", \"path\": \"%s\", \"threads\": %u, "
        "\"window\": %" PRIu64
        ", \"slots\": %u, \"serial_ring\": %s, \"reap\": %s, \"direct\": %s, "
        "\"budget\": %" PRIu64 ", \"tensor_bytes\": %" PRIu64 ", \"buffers\": %u, "
        "\"repeat\": %u, \"best_s\": %.4f, \"median_s\": %.4f, \"best_gbps\": %.2f, "
        "\"median_gbps\": %.2f, \"footprint_base\": %" PRIu64 ", \"footprint_peak_delta\": %" PRIu64
        ", \"pinned_peak\": %" PRIu64 ", \"scratch_peak\": %" PRIu64 ", \"verified\": %s, "
        "\"released\": %s, \"footprint_left_first\": %" PRId64 ", \"footprint_left_last\": %" PRId64
        ", \"devices\": %u, \"placement\": \"%s\", \"tp_rank\": %u, \"tp_world\": %u, "
        "\"bytes_read\": %" PRIu64 "}\n",
        path, cu.registered ? "registered" : "staged", st.threads, window, slots,
        flags & WM__CUDA_SERIAL_RING ? "true" : "false",
        flags & WM__CUDA_NO_REAP ? "false" : "true", cu.direct_io ? "true" : "false",
        cu.pinned_budget, st.tensor_bytes, st.buffers, repeat, best, median,
        (double)st.tensor_bytes / best / 1e9, (double)st.tensor_bytes / median / 1e9, base,
        peak_delta, pinned_peak, scratch_peak, check ? (verified ? "true" : "false") : "null",
        released ? "true" : "false", left_first, left_last, o.n_devices > 1 ? o.n_devices : 1,
        o.placement == WM_PLACE_LAYERS ? "layers" : "balance", o.tp_rank,
        o.tp_world > 1 ? o.tp_world : 1, st.bytes_read);
    return (check && !verified) || !released ? 1 : 0;
}

/* ---- h2d ---- */

/* Every device of devs at once: each copies `bytes` from its own registered buffer on four
 * streams; the best aggregate GB/s over `repeat` rounds, timed on the host around all. */
static double h2d_together(const int *devs, unsigned n, uint64_t bytes, unsigned repeat) {
    enum { NS = 4 };
    unsigned char *h[16];
    void *d[16];
    cudaStream_t s[16][NS];
    for (unsigned k = 0; k < n; k++) {
        CUDA_OK(cudaSetDevice(devs[k]));
        h[k] = pages(bytes);
        CUDA_OK(cudaHostRegister(h[k], bytes, cudaHostRegisterDefault));
        CUDA_OK(cudaMalloc(&d[k], bytes));
        for (int j = 0; j < NS; j++)
            CUDA_OK(cudaStreamCreateWithFlags(&s[k][j], cudaStreamNonBlocking));
    }
    double best = 0;
    for (unsigned r = 0; r < repeat; r++) {
        double t0 = now_s();
        for (unsigned k = 0; k < n; k++) {
            CUDA_OK(cudaSetDevice(devs[k]));
            for (int j = 0; j < NS; j++)
                CUDA_OK(cudaMemcpyAsync((char *)d[k] + bytes / NS * j, h[k] + bytes / NS * j,
                                        bytes / NS, cudaMemcpyHostToDevice, s[k][j]));
        }
        for (unsigned k = 0; k < n; k++)
            for (int j = 0; j < NS; j++)
                CUDA_OK(cudaStreamSynchronize(s[k][j]));
        double g = (double)bytes * n / (now_s() - t0) / 1e9;
        if (g > best) best = g;
    }
    for (unsigned k = 0; k < n; k++) {
        CUDA_OK(cudaSetDevice(devs[k]));
        for (int j = 0; j < NS; j++)
            CUDA_OK(cudaStreamDestroy(s[k][j]));
        CUDA_OK(cudaHostUnregister(h[k]));
        CUDA_OK(cudaFree(d[k]));
        munmap(h[k], bytes);
    }
    return best;
}

/* Half of `bytes` from h to d as rows of `width` bytes every 2*width, in one 2D copy, and the
 * same bytes packed in one copy: the best GB/s of each (device 0, events). */
static void h2d_rows(unsigned char *h, void *d, uint64_t bytes, uint64_t width, unsigned repeat,
                     cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1) {
    size_t rows = (size_t)(bytes / (2 * width));
    double best2d = 0, best1d = 0;
    for (unsigned r = 0; r < repeat; r++)
        for (int packed = 0; packed < 2; packed++) {
            float ms;
            CUDA_OK(cudaEventRecord(e0, s));
            if (packed)
                CUDA_OK(cudaMemcpyAsync(d, h, rows * width, cudaMemcpyHostToDevice, s));
            else
                CUDA_OK(cudaMemcpy2DAsync(d, width, h, 2 * width, width, rows,
                                          cudaMemcpyHostToDevice, s));
            CUDA_OK(cudaEventRecord(e1, s));
            CUDA_OK(cudaEventSynchronize(e1));
            CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
            double g = (double)(rows * width) / (ms * 1e-3) / 1e9;
            double *best = packed ? &best1d : &best2d;
            if (g > *best) *best = g;
        }
    printf("{\"bench\": \"h2d-rows\", \"width\": %" PRIu64 ", \"rows\": %zu, "
           "\"rows_2d_gbps\": %.2f, \"packed_gbps\": %.2f}\n",
           width, rows, best2d, best1d);
}

static int cmd_h2d(int argc, char **argv) {
    uint64_t bytes = (uint64_t)1 << 30, v, rows_width = 0;
    unsigned repeat = 8, n_devs = 0;
    int devs[16];
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--devices") && i + 1 < argc) {
            n_devs = parse_devices(argv[++i], devs);
            if (!n_devs) return 2;
        } else if (!strcmp(argv[i], "--bytes") && i + 1 < argc && parse_size(argv[++i], &v)) {
            bytes = v;
        } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            repeat = (unsigned)v;
        } else if (!strcmp(argv[i], "--rows") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            rows_width = v;
        } else {
            fprintf(stderr, "gpu h2d: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return 77;
    CUDA_OK(cudaSetDevice(0));
    unsigned char *h = pages(bytes);
    CUDA_OK(cudaHostRegister(h, bytes, cudaHostRegisterDefault));
    void *d;
    CUDA_OK(cudaMalloc(&d, bytes));
    enum { NS = 4 };
    cudaStream_t s[NS];
    for (int k = 0; k < NS; k++)
        CUDA_OK(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    CUDA_OK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice)); /* warm-up */
    double best1 = 0, best4 = 0;
    for (unsigned r = 0; r < repeat; r++) {
        float ms;
        CUDA_OK(cudaEventRecord(e0, s[0]));
        CUDA_OK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s[0]));
        CUDA_OK(cudaEventRecord(e1, s[0]));
        CUDA_OK(cudaEventSynchronize(e1));
        CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
        double g = (double)bytes / (ms * 1e-3) / 1e9;
        if (g > best1) best1 = g;
        /* Four streams, a quarter each, timed on the host around all of them. */
        CUDA_OK(cudaDeviceSynchronize());
        double t0 = now_s();
        for (int k = 0; k < NS; k++)
            CUDA_OK(cudaMemcpyAsync((char *)d + bytes / NS * k, h + bytes / NS * k, bytes / NS,
                                    cudaMemcpyHostToDevice, s[k]));
        CUDA_OK(cudaDeviceSynchronize());
        g = (double)bytes / (now_s() - t0) / 1e9;
        if (g > best4) best4 = g;
    }
    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    printf("{\"bench\": \"h2d\", \"device\": \"%s\", \"bytes\": %" PRIu64 ", \"repeat\": %u, "
           "\"one_stream_gbps\": %.2f, \"four_streams_gbps\": %.2f, \"best_gbps\": %.2f}\n",
           prop.name, bytes, repeat, best1, best4, best1 > best4 ? best1 : best4);
    if (rows_width && rows_width * 2 <= bytes)
        h2d_rows(h, d, bytes, rows_width, repeat, s[0], e0, e1);
    CUDA_OK(cudaHostUnregister(h));
    CUDA_OK(cudaFree(d));
    munmap(h, bytes);
    /* Each listed device alone, then all of them at once. */
    for (unsigned k = 0; k < n_devs; k++)
        printf("{\"bench\": \"h2d-device\", \"device\": %d, \"bytes\": %" PRIu64
               ", \"best_gbps\": %.2f}\n",
               devs[k], bytes, h2d_together(&devs[k], 1, bytes, repeat));
    if (n_devs > 1)
        printf("{\"bench\": \"h2d-together\", \"devices\": %u, \"bytes\": %" PRIu64
               ", \"best_gbps\": %.2f}\n",
               n_devs, bytes, h2d_together(devs, n_devs, bytes, repeat));
    return 0;
}

/* ---- pread ---- */

typedef struct pread_job {
    int fd;
    uint64_t size, block, run; /* run: read runs of `run` bytes every 2*run, or whole blocks */
    const char *path;          /* own_fd: each thread opens it */
    bool own_fd;               /* each thread its own descriptor (its own struct file) */
    const unsigned char *map;  /* runs copied from this shared mapping of the file, or NULL */
    atomic_uint_least64_t next;
    unsigned char *big; /* NULL: each thread reads into its own reused buffer */
    atomic_int failed;
} pread_job;

typedef struct pread_thread {
    pthread_t th;
    pread_job *j;
    unsigned char *buf;
} pread_thread;

static void *pread_main(void *arg) {
    pread_thread *t = arg;
    pread_job *j = t->j;
    int fd = j->own_fd ? open(j->path, O_RDONLY) : j->fd;
    if (fd < 0) atomic_store(&j->failed, 1);
    for (unsigned turn = 0; fd >= 0; turn ^= 1) {
        uint64_t off = atomic_fetch_add(&j->next, j->block);
        if (off >= j->size) break;
        size_t n = j->size - off < j->block ? (size_t)(j->size - off) : (size_t)j->block;
        unsigned char *dst = j->big ? j->big + off : t->buf + turn * j->block;
        if (!j->run) {
            if (pread(fd, dst, n, (off_t)off) != (ssize_t)n) atomic_store(&j->failed, 1);
            continue;
        }
        for (size_t at = 0; at + j->run <= n; at += 2 * j->run)
            if (j->map)
                memcpy(dst + at, j->map + off + at, j->run);
            else if (pread(fd, dst + at, j->run, (off_t)(off + at)) != (ssize_t)j->run)
                atomic_store(&j->failed, 1);
    }
    if (j->own_fd && fd >= 0) close(fd);
    return NULL;
}

/* One pass; with `mapped`, the file is mapped (shared, read-only) for the pass and unmapped
 * after it, inside the time. */
static double pread_once(pread_job *j, pread_thread *ts, unsigned n, bool mapped) {
    atomic_store(&j->next, 0);
    double t0 = now_s();
    if (mapped) {
        void *p = mmap(NULL, j->size, PROT_READ, MAP_SHARED, j->fd, 0);
        if (p == MAP_FAILED) {
            atomic_store(&j->failed, 1);
            return 1e30;
        }
        j->map = p;
    }
    for (unsigned k = 0; k < n; k++)
        pthread_create(&ts[k].th, NULL, pread_main, &ts[k]);
    for (unsigned k = 0; k < n; k++)
        pthread_join(ts[k].th, NULL);
    if (mapped) {
        munmap((void *)j->map, j->size);
        j->map = NULL;
    }
    return now_s() - t0;
}

static int cmd_pread(int argc, char **argv) {
    const char *path = NULL;
    uint64_t threads = (uint64_t)sysconf(_SC_NPROCESSORS_ONLN), block = (uint64_t)8 << 20, v;
    uint64_t run = 0;
    bool own_fd = false, mapped = false;
    unsigned repeat = 3;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            threads = v;
        } else if (!strcmp(argv[i], "--block") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            block = v;
        } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            repeat = (unsigned)v;
        } else if (!strcmp(argv[i], "--run") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            run = v;
        } else if (!strcmp(argv[i], "--own-fd")) {
            own_fd = true;
        } else if (!strcmp(argv[i], "--mapped")) {
            mapped = true;
        } else if (!path && argv[i][0] != '-') {
            path = argv[i];
        } else {
            fprintf(stderr, "gpu pread: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!path || threads > 256) return 2;
    if (mapped && !run) return 2;
    pread_job j = {
        .fd = open(path, O_RDONLY), .block = block, .run = run, .path = path, .own_fd = own_fd};
    if (j.fd < 0) {
        perror(path);
        return 1;
    }
    j.size = (uint64_t)lseek(j.fd, 0, SEEK_END);
    pread_thread ts[256];
    for (unsigned k = 0; k < threads; k++)
        ts[k] = (pread_thread){.j = &j, .buf = pages(2 * block)};
    double best_reused = 1e30, best_big = 1e30;
    for (unsigned r = 0; r < repeat; r++) {
        double t = pread_once(&j, ts, (unsigned)threads, mapped);
        if (t < best_reused) best_reused = t;
    }
    j.big = pages(j.size);
    for (unsigned r = 0; r < repeat; r++) {
        double t = pread_once(&j, ts, (unsigned)threads, mapped);
        if (t < best_big) best_big = t;
    }
    munmap(j.big, j.size);
    for (unsigned k = 0; k < threads; k++)
        munmap(ts[k].buf, 2 * block);
    close(j.fd);
    /* With runs, the bytes read: half of each whole block (the tail's runs are close enough). */
    double got = run ? (double)j.size / 2 : (double)j.size;
    double g1 = got / best_reused / 1e9, g2 = got / best_big / 1e9;
    printf("{\"bench\": \"pread\", \"file\": \"%s\", \"bytes\": %" PRIu64 ", \"threads\": %" PRIu64
           ", \"run\": %" PRIu64 ", \"how\": \"%s\", \"block\": %" PRIu64
           ", \"reused_buffers_gbps\": %.2f, \"file_sized_buffer_gbps\": %.2f, "
           "\"best_gbps\": %.2f, \"failed\": %s}\n",
           path, j.size, threads, run,
           mapped   ? "mapped"
           : own_fd ? "own_fd"
                    : "pread",
           block, g1, g2, g1 > g2 ? g1 : g2, atomic_load(&j.failed) ? "true" : "false");
    return atomic_load(&j.failed) ? 1 : 0;
}

/* ---- cycles ---- */

/* One mapping of /proc/self/smaps: its start, name and Anonymous kB. */
typedef struct anon_map {
    uint64_t start;
    uint64_t anon_kb;
    char name[48];
} anon_map;

static size_t anon_maps(anon_map *out, size_t cap) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return 0;
    char line[512];
    size_t n = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long a, b, kb;
        int name_at = 0;
        if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %n", &a, &b, &name_at) == 2 && name_at > 0) {
            if (n == cap) break;
            out[n] = (anon_map){.start = a};
            snprintf(out[n].name, sizeof out[n].name, "%s", line + name_at);
            out[n].name[strcspn(out[n].name, "\n")] = 0;
            n++;
        } else if (n && sscanf(line, "Anonymous: %llu kB", &kb) == 1) {
            out[n - 1].anon_kb = kb;
        }
    }
    fclose(f);
    return n;
}

/* Prints the mappings whose Anonymous kB differ between two snapshots (new, gone or changed). */
static void anon_diff(const char *what, const anon_map *a, size_t na, const anon_map *b,
                      size_t nb) {
    for (size_t j = 0; j < nb; j++) {
        uint64_t before = 0;
        for (size_t i = 0; i < na; i++)
            if (a[i].start == b[j].start) before = a[i].anon_kb;
        if (before != b[j].anon_kb)
            printf("{\"bench\": \"cycles-map\", \"between\": \"%s\", \"start\": \"%" PRIx64
                   "\", \"name\": \"%s\", \"kb_before\": %" PRIu64 ", \"kb_after\": %" PRIu64 "}\n",
                   what, b[j].start, b[j].name, before, b[j].anon_kb);
    }
    for (size_t i = 0; i < na; i++) {
        bool kept = false;
        for (size_t j = 0; j < nb && !kept; j++)
            kept = a[i].start == b[j].start;
        if (!kept && a[i].anon_kb)
            printf("{\"bench\": \"cycles-map\", \"between\": \"%s\", \"start\": \"%" PRIx64
                   "\", \"name\": \"%s\", \"kb_before\": %" PRIu64 ", \"kb_after\": 0}\n",
                   what, a[i].start, a[i].name, a[i].anon_kb);
    }
}

/* Threads of this process now (the CUDA runtime's own included). */
static unsigned threads_now(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    unsigned n = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %u", &n) == 1) break;
    fclose(f);
    return n;
}

/* gpu cycles FILE [--registered] [--threads N] [--cycles N] [--rehearse R,E,C[,MIB]] [--malloc-info
 * FILE]: the host footprint left after each
 * load+release (above its value right after wm_backend_init), malloc's own figures, and which
 * mappings hold what is left (after the first cycle, and what grew from the first to the last):
 * where the CUDA runtime keeps host memory. --rehearse sets how much wm_backend_init rehearses
 * (wm__cuda_rehearsal); --malloc-info writes glibc's malloc_info before the first load and after
 * the last release. */
static int cmd_cycles(int argc, char **argv) {
    const char *path = NULL;
    wm_cuda_options cu = WM_CUDA_OPTIONS_INIT;
    wm_load_options o = {.size = sizeof o, .cuda = &cu};
    o.backend = WM_BACKEND_CUDA;
    o.mode = WM_MODE_HEAP;
    unsigned cycles = 10, rr = 0, re = 0, rc = 0, rmib = 0;
    const char *info = NULL, *rehearse_arg = "default";
    bool rehearse_set = false;
    for (int i = 0; i < argc; i++) {
        uint64_t v;
        if (!strcmp(argv[i], "--rehearse") && i + 1 < argc &&
            sscanf(argv[++i], "%u,%u,%u,%u", &rr, &re, &rc, &rmib) >= 3) {
            rehearse_set = true;
            rehearse_arg = argv[i];
        } else if (!strcmp(argv[i], "--malloc-info") && i + 1 < argc) {
            info = argv[++i];
        } else if (!strcmp(argv[i], "--registered")) {
            o.mode = WM_MODE_MMAP;
            cu.registered = 1;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc && parse_size(argv[++i], &v)) {
            o.threads = (unsigned)v;
        } else if (!strcmp(argv[i], "--cycles") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            cycles = (unsigned)v;
        } else if (!path && argv[i][0] != '-') {
            path = argv[i];
        } else {
            fprintf(stderr, "gpu cycles: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!path) return 2;
    enum { CAP = 4096 };
    static anon_map m0[CAP], m1[CAP], mn[CAP];
    if (rehearse_set) wm__cuda_rehearsal(rr, re, rc, (size_t)rmib << 20);
    wm_error err;
    if (wm_backend_init(WM_BACKEND_CUDA, 0, &err) != WM_OK) {
        fprintf(stderr, "gpu: %s\n", err.msg);
        return 77;
    }
    wm_file *f;
    if (wm_file_open(path, &f, &err) != WM_OK) {
        fprintf(stderr, "gpu: %s\n", err.msg);
        return 1;
    }
    size_t n0 = anon_maps(m0, CAP), n1 = 0, nn = 0;
    uint64_t base = footprint();
    FILE *mi_out = info ? fopen(info, "w") : NULL;
    if (mi_out) {
        fprintf(mi_out, "<!-- after wm_backend_init and wm_file_open -->\n");
        malloc_info(0, mi_out);
    }
    for (unsigned c = 1; c <= cycles; c++) {
        wm_model *m;
        if (wm_model_load(f, &o, &m, &err) != WM_OK) {
            fprintf(stderr, "gpu: %s\n", err.msg);
            return 1;
        }
        wm_model_release(m);
        uint64_t now = footprint();
        struct mallinfo2 mi = mallinfo2();
        wm_ledger l = WM_LEDGER_INIT;
        wm_ledger_get(&l);
        printf("{\"bench\": \"cycles\", \"path\": \"%s\", \"threads\": %u, \"rehearsal\": \"%s\", "
               "\"cycle\": %u, \"left\": %" PRId64
               ", \"malloc_in_use\": %zu, \"malloc_arena\": %zu, "
               "\"malloc_mmapped\": %zu, \"process_threads\": %u, \"ledger\": %" PRIu64 "}\n",
               cu.registered ? "registered" : "staged", o.threads, rehearse_arg, c,
               (int64_t)(now - base), mi.uordblks, mi.arena, mi.hblkhd, threads_now(),
               wm_ledger_bytes(&l));
        if (c == 1) n1 = anon_maps(m1, CAP);
    }
    nn = anon_maps(mn, CAP);
    if (mi_out) {
        fprintf(mi_out, "<!-- after the last release -->\n");
        malloc_info(0, mi_out);
        fclose(mi_out);
    }
    anon_diff("base..first", m0, n0, m1, n1);
    anon_diff("first..last", m1, n1, mn, nn);
    wm_file_close(f);
    return 0;
}

/* ---- register ---- */

/* What a design that sends the page cache straight to the device could reach: the file's shared
 * read-only mapping registered window by window (cudaHostRegisterReadOnly) by N threads at
 * once, each copying its window to the device on its own stream, waiting, and unregistering it
 * (the "pipelined" figure); and, for the parts of it, registering every window with N threads,
 * copying them all from the loading thread, and unregistering with N threads. */
typedef struct reg_job {
    unsigned char *map;
    unsigned char *dev;
    uint64_t size, window;
    atomic_uint_least64_t next;
    int mode; /* 0: register, 1: unregister, 2: pipelined */
    atomic_int failed;
} reg_job;

typedef struct reg_thread {
    pthread_t th;
    reg_job *j;
    cudaStream_t s;
} reg_thread;

static void *reg_main(void *arg) {
    reg_thread *t = arg;
    reg_job *j = t->j;
    if (cudaSetDevice(0) != cudaSuccess) atomic_store(&j->failed, 1);
    if (j->mode == 2 && !t->s && cudaStreamCreateWithFlags(&t->s, cudaStreamNonBlocking))
        atomic_store(&j->failed, 1);
    for (;;) {
        uint64_t off = atomic_fetch_add(&j->next, j->window);
        if (off >= j->size) break;
        size_t n = j->size - off < j->window ? (size_t)(j->size - off) : (size_t)j->window;
        cudaError_t e = cudaSuccess;
        if (j->mode == 0 || j->mode == 2)
            e = cudaHostRegister(j->map + off, n, cudaHostRegisterReadOnly);
        if (!e && j->mode == 2) {
            e = cudaMemcpyAsync(j->dev + off, j->map + off, n, cudaMemcpyHostToDevice, t->s);
            if (!e) e = cudaStreamSynchronize(t->s);
        }
        if (!e && (j->mode == 1 || j->mode == 2)) e = cudaHostUnregister(j->map + off);
        if (e) atomic_store(&j->failed, 1);
    }
    return NULL;
}

static double reg_pass(reg_job *j, reg_thread *ts, unsigned n, int mode) {
    j->mode = mode;
    atomic_store(&j->next, 0);
    double t0 = now_s();
    for (unsigned k = 0; k < n; k++)
        pthread_create(&ts[k].th, NULL, reg_main, &ts[k]);
    for (unsigned k = 0; k < n; k++)
        pthread_join(ts[k].th, NULL);
    return now_s() - t0;
}

static int cmd_register(int argc, char **argv) {
    const char *path = NULL;
    uint64_t threads = 8, window = (uint64_t)16 << 20, v;
    unsigned repeat = 2;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            threads = v;
        } else if (!strcmp(argv[i], "--window") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            window = v;
        } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            repeat = (unsigned)v;
        } else if (!path && argv[i][0] != '-') {
            path = argv[i];
        } else {
            fprintf(stderr, "gpu register: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!path || threads > 256 || window % 4096) return 2;
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) return 77;
    CUDA_OK(cudaSetDevice(0));
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    uint64_t size = (uint64_t)lseek(fd, 0, SEEK_END) / 4096 * 4096;
    unsigned char *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        perror("gpu: mmap");
        return 1;
    }
    reg_job j = {.map = map, .size = size, .window = window};
    CUDA_OK(cudaMalloc((void **)&j.dev, size));
    reg_thread ts[256];
    memset(ts, 0, sizeof ts);
    for (unsigned k = 0; k < threads; k++)
        ts[k].j = &j;
    double best_reg = 1e30, best_copy = 1e30, best_unreg = 1e30, best_pipe = 1e30;
    for (unsigned r = 0; r < repeat; r++) {
        double t = reg_pass(&j, ts, (unsigned)threads, 0);
        if (t < best_reg) best_reg = t;
        cudaStream_t s[4];
        for (int k = 0; k < 4; k++)
            CUDA_OK(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
        double t0 = now_s();
        for (uint64_t off = 0, k = 0; off < size; off += window, k++)
            CUDA_OK(cudaMemcpyAsync(j.dev + off, map + off,
                                    size - off < window ? size - off : window,
                                    cudaMemcpyHostToDevice, s[k % 4]));
        CUDA_OK(cudaDeviceSynchronize());
        t = now_s() - t0;
        if (t < best_copy) best_copy = t;
        for (int k = 0; k < 4; k++)
            CUDA_OK(cudaStreamDestroy(s[k]));
        t = reg_pass(&j, ts, (unsigned)threads, 1);
        if (t < best_unreg) best_unreg = t;
        t = reg_pass(&j, ts, (unsigned)threads, 2);
        if (t < best_pipe) best_pipe = t;
    }
    for (unsigned k = 0; k < threads; k++)
        if (ts[k].s) cudaStreamDestroy(ts[k].s);
    CUDA_OK(cudaFree(j.dev));
    munmap(map, size);
    close(fd);
    printf("{\"bench\": \"register\", \"file\": \"%s\", \"bytes\": %" PRIu64
           ", \"threads\": %" PRIu64 ", \"window\": %" PRIu64
           ", \"register_gbps\": %.2f, \"copy_from_registered_gbps\": %.2f, "
           "\"unregister_gbps\": %.2f, \"pipelined_gbps\": %.2f, \"failed\": %s}\n",
           path, size, threads, window, (double)size / best_reg / 1e9,
           (double)size / best_copy / 1e9, (double)size / best_unreg / 1e9,
           (double)size / best_pipe / 1e9, atomic_load(&j.failed) ? "true" : "false");
    return atomic_load(&j.failed) ? 1 : 0;
}

#endif /* WM_HAVE_CUDA */

/* ---- main ---- */

/* ---- ranks ---- */

#ifdef WM_HAVE_NCCL
#include <dirent.h>
#include <dlfcn.h>
#include <nccl.h>
#include <sys/wait.h>

#define MAX_RANKS 8
#define MAX_ROUNDS 16

/* What the ranks share (a shared anonymous mapping made before they fork). */
typedef struct ranks_shared {
    _Atomic unsigned arrived, generation;
    double t0[MAX_ROUNDS][MAX_RANKS], t1[MAX_ROUNDS][MAX_RANKS];
    uint64_t bytes_read[MAX_RANKS], tensor_bytes[MAX_RANKS];
    int failed;
    ncclUniqueId id; /* rank 0 makes it (NCCL and CUDA start in the ranks, never before fork) */
} ranks_shared;

static void ranks_barrier(ranks_shared *s, unsigned n) {
    unsigned gen = atomic_load(&s->generation);
    if (atomic_fetch_add(&s->arrived, 1) + 1 == n) {
        atomic_store(&s->arrived, 0);
        atomic_fetch_add(&s->generation, 1);
    } else {
        while (atomic_load(&s->generation) == gen)
            sched_yield();
    }
}

typedef ncclResult_t (*get_id_fn)(ncclUniqueId *);
typedef ncclResult_t (*init_rank_fn)(ncclComm_t *, int, ncclUniqueId, int);

static void *nccl_lib(void) {
    void *h = dlopen("libnccl.so.2", RTLD_NOW);
#ifdef WM_NCCL_DIR
    if (!h) h = dlopen(WM_NCCL_DIR "/libnccl.so.2", RTLD_NOW);
#endif
    return h;
}

/* One rank: loads `rounds` times with the others, between barriers. */
static int rank_main(ranks_shared *sh, const char *path, unsigned r, unsigned w, int dev, bool tp,
                     bool nccl, unsigned rounds, unsigned threads) {
    wm_error err;
    if (wm_backend_init(WM_BACKEND_CUDA, dev, &err) != WM_OK) {
        fprintf(stderr, "gpu ranks: %s\n", err.msg);
        return 1;
    }
    ncclComm_t comm = NULL;
    void *lib = nccl ? nccl_lib() : NULL;
    if (nccl) {
        get_id_fn get = lib ? (get_id_fn)(uintptr_t)dlsym(lib, "ncclGetUniqueId") : NULL;
        init_rank_fn init = lib ? (init_rank_fn)(uintptr_t)dlsym(lib, "ncclCommInitRank") : NULL;
        if (r == 0 && (!get || get(&sh->id) != ncclSuccess)) sh->failed = 1;
        ranks_barrier(sh, w);
        CUDA_OK(cudaSetDevice(dev));
        if (sh->failed || !init || init(&comm, (int)w, sh->id, (int)r) != ncclSuccess) {
            fprintf(stderr, "gpu ranks: ncclCommInitRank failed\n");
            return 1;
        }
    }
    wm_file *f;
    if (wm_file_open(path, &f, &err) != WM_OK) {
        fprintf(stderr, "gpu ranks: %s\n", err.msg);
        return 1;
    }
    wm_load_options o = {.mode = WM_MODE_HEAP,
                         .backend = WM_BACKEND_CUDA,
                         .device = dev,
                         .threads = threads,
                         .tp_rank = r,
                         .tp_world = tp || nccl ? w : 0,
                         .tp_split = tp ? wm_split_llama : NULL,
                         .cuda = &(wm_cuda_options){.nccl_comm = comm}};
    for (unsigned k = 0; k < rounds; k++) {
        ranks_barrier(sh, w);
        wm_model *m;
        sh->t0[k][r] = now_s();
        wm_status st = wm_model_load(f, &o, &m, &err);
        sh->t1[k][r] = now_s();
        if (st) {
            fprintf(stderr, "gpu ranks: rank %u: %s\n", r, err.msg);
            sh->failed = 1;
            return 1;
        }
        wm_model_stats s = WM_MODEL_STATS_INIT;
        wm_model_stats_get(m, &s);
        sh->bytes_read[r] = s.bytes_read;
        sh->tensor_bytes[r] = s.tensor_bytes;
        wm_model_release(m);
        ranks_barrier(sh, w);
    }
    wm_file_close(f);
    return 0;
}

static int cmd_ranks(int argc, char **argv) {
    const char *path = NULL;
    unsigned w = 2, rounds = 5, threads = 0;
    bool tp = false, nccl = false;
    for (int i = 0; i < argc; i++) {
        uint64_t v;
        if (!strcmp(argv[i], "--ranks") && i + 1 < argc && parse_size(argv[++i], &v) && v &&
            v <= MAX_RANKS)
            w = (unsigned)v;
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc && parse_size(argv[++i], &v) && v &&
                 v <= MAX_ROUNDS)
            rounds = (unsigned)v;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc && parse_size(argv[++i], &v))
            threads = (unsigned)v;
        else if (!strcmp(argv[i], "--tp"))
            tp = true;
        else if (!strcmp(argv[i], "--nccl"))
            nccl = true;
        else if (!path && argv[i][0] != '-')
            path = argv[i];
        else
            return 2;
    }
    /* The devices, counted without starting CUDA here: a process must not fork after it. */
    int n_dev = 0;
    DIR *gpus = opendir("/proc/driver/nvidia/gpus");
    for (struct dirent *e; gpus && (e = readdir(gpus));)
        n_dev += e->d_name[0] != '.';
    if (gpus) closedir(gpus);
    if (!path || n_dev == 0) return 77;
    if (nccl && (unsigned)n_dev < w) {
        fprintf(stderr, "gpu ranks: --nccl needs a device per rank (%d devices)\n", n_dev);
        return 77;
    }
    ranks_shared *sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return 1;
    memset(sh, 0, sizeof *sh);
    pid_t pid[MAX_RANKS];
    for (unsigned r = 0; r < w; r++) {
        pid[r] = fork();
        if (pid[r] == 0)
            _exit(rank_main(sh, path, r, w, (int)(r % (unsigned)n_dev), tp, nccl, rounds, threads));
    }
    int bad = 0;
    for (unsigned r = 0; r < w; r++) {
        int status;
        waitpid(pid[r], &status, 0);
        bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    if (bad || sh->failed) return 1;
    double t[MAX_ROUNDS];
    for (unsigned k = 0; k < rounds; k++) {
        double lo = sh->t0[k][0], hi = sh->t1[k][0];
        for (unsigned r = 1; r < w; r++) {
            if (sh->t0[k][r] < lo) lo = sh->t0[k][r];
            if (sh->t1[k][r] > hi) hi = sh->t1[k][r];
        }
        t[k] = hi - lo;
    }
    qsort(t, rounds, sizeof *t, cmp_double);
    uint64_t read = 0, delivered = 0, file_bytes = 0;
    for (unsigned r = 0; r < w; r++) {
        read += sh->bytes_read[r];
        delivered += sh->tensor_bytes[r];
    }
    wm_file *f;
    wm_error err;
    if (wm_file_open(path, &f, &err) != WM_OK) return 1;
    file_bytes = wm_file_tensor_bytes(f);
    wm_file_close(f);
    double med = t[rounds / 2];
    printf("{\"bench\": \"ranks\", \"file\": \"%s\", \"ranks\": %u, \"devices\": %d, "
           "\"mode\": \"%s%s\", \"repeat\": %u, \"best_s\": %.4f, \"median_s\": %.4f, "
           "\"delivered_bytes\": %" PRIu64
           ", \"delivered_gbps_median\": %.2f, \"bytes_read\": %" PRIu64
           ", \"read_x_file\": %.3f}\n",
           path, w, n_dev < (int)w ? n_dev : (int)w,
           tp     ? "tp"
           : nccl ? ""
                  : "whole",
           nccl ? (tp ? "+nccl" : "nccl") : "", rounds, t[0], med, delivered,
           (double)delivered / med / 1e9, read, (double)read / (double)file_bytes);
    munmap(sh, sizeof *sh);
    return 0;
}
#endif

int main(int argc, char **argv) {
#ifdef WM_HAVE_CUDA
    if (argc >= 2 && !strcmp(argv[1], "load")) return cmd_load(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "h2d")) return cmd_h2d(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "pread")) return cmd_pread(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "cycles")) return cmd_cycles(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "register")) return cmd_register(argc - 2, argv + 2);
#ifdef WM_HAVE_NCCL
    if (argc >= 2 && !strcmp(argv[1], "ranks")) return cmd_ranks(argc - 2, argv + 2);
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
