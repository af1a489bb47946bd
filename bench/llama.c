/*
 * llama.c: the llama.cpp bridge (include/weightmap_llama.h) against llama.cpp's own loader, in
 * one run (docs/LLAMA.md, bench/RESULTS.md "llama"):
 *
 *   load    time to loaded of a >= 1 GiB make-model file, warm and cold (cold: fdatasync and
 *           POSIX_FADV_DONTNEED on the file before each run, checked with mincore): wm_llama_load
 *           against llama_model_load_from_file in its read (0), mmap (1) and direct-I/O (4)
 *           modes, beside the limits measured in the same run: parallel O_DIRECT preads of the
 *           tensor data from a cold file into each thread's own block of huge pages (the
 *           disk's own speed), into 4 KiB pages (what a loader reading into malloc'd memory
 *           gets: on a virtio disk 3x slower, the block layer splitting each read into more,
 *           smaller requests) and into one fresh region of huge pages (the ceiling of a loader
 *           that places the weights in new memory: the kernel zeroes each page first), and
 *           parallel buffered preads of it from a warm one into memory faulted in beforehand
 *           (the memory's) and into fresh memory.
 *   decode  tokens/s of greedy decoding (BOS, then 32 tokens, n_threads = nproc) of q4_0 and
 *           q8_0 models (made once from the make-model file with llama.cpp's own quantizer,
 *           llama_model_quantize) loaded by llama.cpp itself (its extra buffer types: the CPU's
 *           repacked weights) and through the bridge with and without them.
 *
 * Every measurement runs in a child process of its own (fork), in rounds whose order rotates.
 *
 *     build/bench/llama [-r ROUNDS] [--load-only | --decode-only] [--warm-memory GIB]
 *                       [--only KEY,KEY...] [--gpu] [--curve] [--disk] [MODEL]
 *
 * --gpu offloads every layer (n_gpu_layers 999) in every load, llama.cpp's and the bridge's, to
 * the GPU of a ggml CUDA backend found beside the prebuilt libraries (bench/llama_cuda.sh builds
 * one): llama.cpp's read mode then uploads through its four 1 MiB pinned staging buffers, the
 * bridge's CUDA buffers are filled by weightmap's staged pipeline (where this build has the CUDA
 * backend), and wm-set (named only) takes them through the window and ggml_backend_tensor_set. Each
 * load of the first round also decodes 8 greedy tokens from BOS on the GPU, outside its time, and
 * prints them, so that the loads are seen to give the same model.
 *
 * --only measures only the load contenders named (wm, wm-prefault, wm-noprefetch, read, mmap,
 * direct, disk, disk-4k, disk-fresh, mem, fresh: the rows in that order), for a quick A/B, and
 * three rows measured only when named: engine (wm_file_read_tensors of every tensor into memory
 * faulted beforehand, no llama.cpp: the reading engine alone), disk-queue (the disk read as
 * that engine orders it: 8 MiB O_DIRECT preads in file order from one shared counter) and
 * wm-norepack (wm_llama_load with WM_LLAMA_REPACK_OFF: no tensor repacked), wm-whole
 * (WM_LLAMA_REPACK_WHOLE: each repacked tensor handed to ggml whole once read, 1.4's way; the
 * default hands it over in row groups as read), wm-embdcpu (with --gpu: token_embd.weight in
 * a plain CPU buffer, not the GPU's pinned host buffer), wm-set (WM_LLAMA_UPLOAD_TENSOR_SET)
 * wm-half (wm_llama_options.threads half the CPUs: with --gpu, whether the read ahead's
 * threads slow the model's making beside them) and wm-auto (the bridge with llama.cpp's default
 * load_mode, AUTO: MMAP where every device maps, as CUDA does; the other bridge rows read,
 * NONE).
 * --curve prints, for each load through the bridge, when it had read each quarter of its bytes;
 * --disk, for each cold load, what the disk did meanwhile (/proc/diskstats, sampled every
 * millisecond).
 *
 * MODEL defaults to bench-llama-1200M.gguf in the working folder, made with
 * `weightmap make-model ... --size 1200M` (the CLI beside this program's folder) when missing.
 * WM_BENCH_THREADS=N sets wm_llama_options.threads for the bridge's loads (default 0: one
 * reading thread per CPU), to measure the reading threads' count. --warm-memory GIB touches GIB
 * of anonymous huge-page memory (2 threads, MADV_POPULATE_WRITE) and frees it before every
 * measurement, the same for every contender: on a VM whose balloon reports free memory to the
 * host (the development VM: virtio_balloon free page reporting), memory freed a few seconds
 * before is the host's again, and faulting 1.1 GiB of it cost 1.1-3.9 s against 0.1-0.26 s
 * right after a warm-up (bench/RESULTS.md, "llama"): without it the loaders that fill fresh
 * memory draw lots.
 */
#include "peer.h"
#include "weightmap_llama.h"

#include <errno.h>
#include <fcntl.h>
#include <ggml-backend.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ROUNDS 16
#define DECODE_TOKENS 32
#define BLOCK ((size_t)8 << 20)

/* When the measurement in this process began (--disk's times are since then). */
static double meas_t0;
static bool fingerprint; /* --gpu, first round: print 8 greedy tokens after each load */

/* llama.cpp's log: silent, but with WM_BENCH_TIMELINE=1 the first round's lines (--gpu) go to
 * stderr with the milliseconds since the load's clock started (where the model's making spends
 * its time). */
static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)level, (void)user;
    static int on = -1;
    if (on < 0) on = getenv("WM_BENCH_TIMELINE") && atoi(getenv("WM_BENCH_TIMELINE")) > 0;
    if (on && fingerprint && text) fprintf(stderr, "[%9.2f ms] %s", bench_now_ms() - meas_t0, text);
}

static void llama_init(void) {
    llama_log_set(quiet, NULL);
    ggml_backend_load_all_from_path(WM_LLAMA_LIBDIR);
    llama_backend_init();
}

static int ncpu(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* ---- the page cache ---- */

/* ---- the limits: parallel preads of [lo, hi) ---- */

typedef struct slice {
    int fd;
    uint64_t lo, hi;
    unsigned char *dst; /* NULL: a block buffer of the thread's own */
    bool huge;          /* that block in huge pages (else 4 KiB pages, as malloc gives) */
} slice;

/* len bytes of anonymous memory at a huge-page boundary, advised huge pages; *span: to unmap. */
static unsigned char *huge_region(size_t len, unsigned char **span) {
    const size_t h = (size_t)2 << 20;
    unsigned char *p =
        mmap(NULL, len + h, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    *span = p;
    unsigned char *a = (unsigned char *)(((uintptr_t)p + h - 1) / h * h);
    madvise(a, len, MADV_HUGEPAGE);
    return a;
}

static void *read_slice(void *arg) {
    slice *s = arg;
    unsigned char *span = NULL, *own = NULL;
    if (!s->dst) own = s->huge ? huge_region(BLOCK, &span) : aligned_alloc(4096, BLOCK);
    for (uint64_t off = s->lo; off < s->hi; off += BLOCK) {
        size_t n = s->hi - off < BLOCK ? (size_t)(s->hi - off) : BLOCK;
        size_t want = (n + 4095) / 4096 * 4096; /* the regions have room for it */
        if (pread(s->fd, own ? own : s->dst + (off - s->lo), want, (off_t)off) < (ssize_t)n) break;
    }
    if (span)
        munmap(span, BLOCK + ((size_t)2 << 20));
    else
        free(own);
    return NULL;
}

enum { INTO_BLOCKS, INTO_HUGE_BLOCKS, INTO_FAULTED, INTO_FRESH };

/* ms to read [data, size) with `threads` threads: into each thread's own block (reused: 4 KiB
 * pages or huge pages), or into one region of the whole, faulted in beforehand or fresh
 * (advised huge pages and faulted by the reads: what any loader that fills memory it has just
 * allocated pays, the kernel zeroing each page). */
static double preads(const char *path, uint64_t data, uint64_t size, int threads, bool direct,
                     int into) {
    int fd = open(path, O_RDONLY | (direct ? O_DIRECT : 0));
    if (fd < 0) return -1;
    data = data / 4096 * 4096;
    bool fresh = into == INTO_FRESH;
    unsigned char *mem = NULL, *span = NULL;
    size_t room = size - data + BLOCK;
    if (into == INTO_FAULTED) {
        mem = mmap(NULL, room, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        memset(mem, 1, size - data);
    } else if (fresh) {
        mem = huge_region(room, &span); /* advised again at t0 (no effect: the timing's start) */
    }
    pthread_t th[64];
    slice s[64];
    uint64_t per = ((size - data) / (uint64_t)threads + BLOCK - 1) / BLOCK * BLOCK;
    double t0 = meas_t0 = bench_now_ms();
    if (fresh) madvise(mem, size - data, MADV_HUGEPAGE);
    for (int t = 0; t < threads; t++) {
        uint64_t lo = data + (uint64_t)t * per, hi = lo + per < size ? lo + per : size;
        s[t] = (slice){fd, lo < size ? lo : size, hi, mem ? mem + (lo - data) : NULL,
                       into == INTO_HUGE_BLOCKS};
        pthread_create(&th[t], NULL, read_slice, &s[t]);
    }
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    double ms = bench_now_ms() - t0;
    if (mem) munmap(span ? span : mem, room + (span ? (size_t)2 << 20 : 0));
    close(fd);
    return ms;
}

/* The same bytes as 8 MiB O_DIRECT preads that the threads take in file order from one counter
 * (the order of the bridge's reading engine), each into a huge-page block of its own. */
typedef struct queue {
    int fd;
    uint64_t hi;
    _Atomic uint64_t next;
} queue;

static void *read_queue(void *arg) {
    queue *q = arg;
    unsigned char *span = NULL, *own = huge_region(BLOCK, &span);
    for (uint64_t off; own && (off = atomic_fetch_add(&q->next, BLOCK)) < q->hi;) {
        size_t n = q->hi - off < BLOCK ? (size_t)(q->hi - off) : BLOCK;
        if (pread(q->fd, own, (n + 4095) / 4096 * 4096, (off_t)off) < (ssize_t)n) break;
    }
    if (span) munmap(span, BLOCK + ((size_t)2 << 20));
    return NULL;
}

static double preads_queue(const char *path, uint64_t data, uint64_t size, int threads) {
    int fd = open(path, O_RDONLY | O_DIRECT);
    if (fd < 0) return -1;
    queue q = {.fd = fd, .hi = size};
    atomic_init(&q.next, data / 4096 * 4096);
    pthread_t th[64];
    double t0 = meas_t0 = bench_now_ms();
    for (int t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, read_queue, &q);
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    double ms = bench_now_ms() - t0;
    close(fd);
    return ms;
}

/* The reading engine alone: wm_file_read_tensors of every tensor (defaults: a thread per CPU,
 * direct I/O AUTO) into memory faulted beforehand; the read's own time. */
static double engine_once(const char *path, uint64_t data, uint64_t size) {
    wm_file *f;
    wm_error err;
    if (wm_file_open(path, &f, &err) != WM_OK) return -1;
    size_t n = wm_file_tensor_count(f), len = (size_t)(size - data);
    unsigned char *mem =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    wm_read_item *it = calloc(n, sizeof *it);
    double ms = -1;
    if (mem != MAP_FAILED && it) {
        memset(mem, 1, len);
        for (size_t i = 0; i < n; i++) {
            wm_tensor_info t;
            wm_file_tensor(f, i, &t);
            it[i] = (wm_read_item){.tensor = i, .dst = mem + (t.offset - data)};
        }
        double t0 = meas_t0 = bench_now_ms();
        if (wm_file_read_tensors(f, it, n, NULL, &err) == WM_OK) ms = bench_now_ms() - t0;
    }
    free(it);
    if (mem != MAP_FAILED) munmap(mem, len);
    wm_file_close(f);
    return ms;
}

/* --curve: when a load through the bridge reached each quarter of its bytes (llama.cpp's progress
 * callback, which the bridge feeds with the bytes read), in ms since the call. */
static bool curve;
static int gpu_layers; /* --gpu: 999 */

/* 8 greedy tokens from BOS, printed to stderr after `name` (--gpu: the loads give one model). */
static void print_tokens(struct llama_model *m, const char *name) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 64;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) {
        fprintf(stderr, "  %s: no context\n", name);
        return;
    }
    for (size_t d = 0; d < ggml_backend_dev_count(); d++)
        fprintf(stderr, "  device %zu: %s (%s)\n", d,
                ggml_backend_dev_name(ggml_backend_dev_get(d)),
                ggml_backend_dev_description(ggml_backend_dev_get(d)));
    const struct llama_vocab *v = llama_model_get_vocab(m);
    int nv = llama_vocab_n_tokens(v);
    llama_token tok = llama_vocab_bos(v);
    fprintf(stderr, "  %s: tokens", name);
    for (int i = 0; i < 8; i++) {
        struct llama_batch b = llama_batch_get_one(&tok, 1);
        if (llama_decode(ctx, b) != 0) break;
        const float *lg = llama_get_logits_ith(ctx, -1);
        int best = 0;
        for (int k = 1; k < nv; k++)
            if (lg[k] > lg[best]) best = k;
        tok = best;
        fprintf(stderr, " %d", best);
    }
    fprintf(stderr, "\n");
    llama_free(ctx);
}
static double curve_t0, curve_at[5]; /* first call, 25, 50, 75, 100 % */

static bool on_curve(float progress, void *user) {
    (void)user;
    double t = bench_now_ms() - curve_t0;
    if (curve_at[0] == 0) curve_at[0] = t;
    for (int q = 1; q <= 4; q++)
        if (curve_at[q] == 0 && progress >= q / 4.0f - 1e-6f) curve_at[q] = t;
    return true;
}

/* --disk: what the disk itself did during each cold load, from /proc/diskstats (the sums over
 * the whole disks: nvme*n*, sd*, vd*, xvd*), sampled every millisecond by a thread of the load's
 * child: the bytes it read (against the file's: a byte read twice shows), its requests, and per
 * 25 ms from the measurement's start the MiB it read and the requests in flight (the first bin
 * holds what was read before that start too). */
static bool disk_trace;
static bool cold_now; /* set before the fork: the child samples cold loads only */
#define DISK_SAMPLES 16384
#define DISK_BIN_MS 25.0
typedef struct disk_sample {
    double t;
    uint64_t sectors, reads, inflight;
} disk_sample;
static disk_sample dsamp[DISK_SAMPLES];
static atomic_int dsamp_n;
static atomic_bool dsamp_stop;
static double dsamp_t0;

static bool whole_disk(const char *n) {
    size_t len = strlen(n);
    if (!strncmp(n, "nvme", 4)) return strchr(n, 'n') && !strchr(n + 4, 'p');
    const char *letters = !strncmp(n, "sd", 2) || !strncmp(n, "vd", 2) ? n + 2
                          : !strncmp(n, "xvd", 3)                      ? n + 3
                                                                       : NULL;
    if (!letters || !*letters) return false;
    for (const char *c = letters; c < n + len; c++)
        if (*c < 'a' || *c > 'z') return false;
    return true;
}

static bool disk_now(disk_sample *s) {
    static char buf[1 << 16];
    int fd = open("/proc/diskstats", O_RDONLY);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = 0;
    *s = (disk_sample){.t = bench_now_ms() - dsamp_t0};
    for (char *line = buf, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        unsigned maj, min;
        char name[64];
        unsigned long long rd, rd_merged, sect, ms, wr, wr_merged, wsect, wms, inflight;
        if (sscanf(line, "%u %u %63s %llu %llu %llu %llu %llu %llu %llu %llu %llu", &maj, &min,
                   name, &rd, &rd_merged, &sect, &ms, &wr, &wr_merged, &wsect, &wms,
                   &inflight) == 12 &&
            whole_disk(name)) {
            s->sectors += sect;
            s->reads += rd;
            s->inflight += inflight;
        }
    }
    return true;
}

static void *disk_sampler(void *arg) {
    (void)arg;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!atomic_load(&dsamp_stop)) {
        int i = atomic_load(&dsamp_n);
        if (i >= DISK_SAMPLES || !disk_now(&dsamp[i])) break;
        atomic_store(&dsamp_n, i + 1);
        next.tv_nsec += 1000000;
        if (next.tv_nsec >= 1000000000) next.tv_sec++, next.tv_nsec -= 1000000000;
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    return NULL;
}

static pthread_t disk_thread;
static bool disk_started;

static void disk_start(double t0) {
    if (!disk_trace || !cold_now) return;
    dsamp_t0 = t0;
    atomic_store(&dsamp_n, 0);
    atomic_store(&dsamp_stop, false);
    disk_sample first;
    if (!disk_now(&first)) return;
    dsamp[0] = first;
    atomic_store(&dsamp_n, 1);
    disk_started = pthread_create(&disk_thread, NULL, disk_sampler, NULL) == 0;
}

static void disk_stop(const char *name, double ms) {
    if (!disk_started) return;
    atomic_store(&dsamp_stop, true);
    pthread_join(disk_thread, NULL);
    disk_started = false;
    int n = atomic_load(&dsamp_n);
    if (n < 2) return;
    const disk_sample *a = &dsamp[0], *z = &dsamp[n - 1];
    double since = meas_t0 - dsamp_t0; /* the samples' time of the measurement's start */
    double mib = (double)(z->sectors - a->sectors) * 512 / 1048576.0;
    uint64_t reqs = z->reads - a->reads;
    /* the first and the last millisecond with bytes read */
    double first = -1, last = -1;
    for (int i = 1; i < n; i++)
        if (dsamp[i].sectors != dsamp[i - 1].sectors) {
            if (first < 0) first = dsamp[i - 1].t - since;
            last = dsamp[i].t - since;
        }
    fprintf(stderr,
            "    disk (%s, %.1f ms): %.1f MiB in %llu requests (%.0f KiB each), the first at "
            "%.1f ms, the last at %.1f ms\n      MiB per %.0f ms:",
            name, ms, mib, (unsigned long long)reqs, reqs ? mib * 1024 / (double)reqs : 0, first,
            last, DISK_BIN_MS);
    int bins = (int)((z->t - since) / DISK_BIN_MS) + 1, i = 0;
    uint64_t prev = a->sectors;
    double inflight_sum[64] = {0};
    int inflight_n[64] = {0};
    for (int b = 0; b < bins && b < 64; b++) {
        uint64_t s = prev;
        for (; i < n && dsamp[i].t - since < (b + 1) * DISK_BIN_MS; i++) {
            s = dsamp[i].sectors;
            inflight_sum[b] += (double)dsamp[i].inflight;
            inflight_n[b]++;
        }
        fprintf(stderr, " %.0f", (double)(s - prev) * 512 / 1048576.0);
        prev = s;
    }
    fprintf(stderr, "\n      in flight:");
    for (int b = 0; b < bins && b < 64; b++)
        fprintf(stderr, " %.0f", inflight_n[b] ? inflight_sum[b] / inflight_n[b] : 0);
    fprintf(stderr, "\n      disk-summary|%s|%.1f|%.1f|%.1f|%.1f|%llu\n", name, ms, first, last,
            mib, (unsigned long long)reqs);
}

/* ---- contenders ---- */

enum {
    C_WM,
    C_WM_PF,
    C_WM_NOPFT,
    C_READ,
    C_MMAP,
    C_DIRECT,
    C_DISK,
    C_DISK_4K,
    C_DISK_FRESH,
    C_MEM,
    C_FRESH,
    C_ENGINE, /* the rows below: only when --only names them */
    C_DISK_QUEUE,
    C_WM_NOREPACK,
    C_WM_EMBD_CPU,
    C_WM_WHOLE,
    C_WM_SET,
    C_WM_HALF,
    C_WM_AUTO,
    N_LOAD
};
static const char *const load_names[] = {"wm_llama_load",
                                         "wm_llama_load, prefault on",
                                         "wm_llama_load, prefetch off (no read ahead)",
                                         "llama.cpp read (load_mode 0)",
                                         "llama.cpp mmap (load_mode 1)",
                                         "llama.cpp direct I/O (load_mode 4)",
                                         "O_DIRECT preads into huge pages (the disk)",
                                         "O_DIRECT preads into 4 KiB pages",
                                         "O_DIRECT preads into fresh MADV_HUGEPAGE memory",
                                         "buffered preads into faulted memory",
                                         "buffered preads into fresh MADV_HUGEPAGE memory",
                                         "wm_file_read_tensors into faulted memory",
                                         "O_DIRECT 8 MiB preads in file order, one queue",
                                         "wm_llama_load, repack off",
                                         "wm_llama_load, token_embd in a CPU buffer",
                                         "wm_llama_load, each repacked tensor whole",
                                         "wm_llama_load, device buffers by tensor_set",
                                         "wm_llama_load, half the CPUs' threads",
                                         "wm_llama_load, load_mode AUTO (llama.cpp's default)"};

/* --only: the contenders measured (their keys, comma-separated); all by default */
static const char *const load_keys[] = {
    "wm",         "wm-prefault", "wm-noprefetch", "read",    "mmap",   "direct",     "disk",
    "disk-4k",    "disk-fresh",  "mem",           "fresh",   "engine", "disk-queue", "wm-norepack",
    "wm-embdcpu", "wm-whole",    "wm-set",        "wm-half", "wm-auto"};
_Static_assert(sizeof load_names / sizeof *load_names == N_LOAD, "a name per contender");
_Static_assert(sizeof load_keys / sizeof *load_keys == N_LOAD, "a key per contender");
static bool chosen[N_LOAD];
static bool all_chosen = true;

static void choose(const char *list) {
    all_chosen = false;
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        bool found = false;
        for (int c = 0; c < N_LOAD; c++)
            if (strlen(load_keys[c]) == n && !strncmp(p, load_keys[c], n)) chosen[c] = found = true;
        if (!found) {
            fprintf(stderr, "llama: --only: no contender '%.*s'\n", (int)n, p);
            exit(2);
        }
        p += n + (p[n] == ',');
    }
}

static bool cold_only(int c) {
    return c == C_DISK || c == C_DISK_4K || c == C_DISK_FRESH || c == C_DISK_QUEUE;
}
static bool warm_only(int c) { return c == C_MEM || c == C_FRESH; }

static double load_once(int c, const char *path, uint64_t data, uint64_t size) {
    if (c == C_DISK) return preads(path, data, size, ncpu(), true, INTO_HUGE_BLOCKS);
    if (c == C_DISK_4K) return preads(path, data, size, ncpu(), true, INTO_BLOCKS);
    if (c == C_DISK_FRESH) return preads(path, data, size, ncpu(), true, INTO_FRESH);
    if (c == C_MEM) return preads(path, data, size, ncpu(), false, INTO_FAULTED);
    if (c == C_FRESH) return preads(path, data, size, ncpu(), false, INTO_FRESH);
    if (c == C_ENGINE) return engine_once(path, data, size);
    if (c == C_DISK_QUEUE) return preads_queue(path, data, size, ncpu());
    llama_init();
    struct llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = gpu_layers;
    /* --gpu: the device's context made before the clock starts (its first allocation), the same
     * for every loader, so that the time is the load's alone */
    for (size_t d = 0; gpu_layers && d < ggml_backend_dev_count(); d++) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(d);
        if (ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_GPU) continue;
        ggml_backend_buffer_t b =
            ggml_backend_buft_alloc_buffer(ggml_backend_dev_buffer_type(dev), (size_t)1 << 20);
        if (b) ggml_backend_buffer_free(b);
    }
    struct llama_model *m = NULL;
    double t0 = meas_t0 = bench_now_ms();
    /* wm-embdcpu (--gpu): the input layer's weights, which llama.cpp puts in the GPU's pinned
     * host buffer type when it offloads, in a plain CPU buffer instead */
    static struct llama_model_tensor_buft_override embd_cpu[2];
    if (c == C_WM_EMBD_CPU) {
        embd_cpu[0].pattern = "token_embd\\.weight";
        embd_cpu[0].buft =
            ggml_backend_dev_buffer_type(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
        p.tensor_buft_overrides = embd_cpu;
    }
    if (c == C_WM || c == C_WM_PF || c == C_WM_NOPFT || c == C_WM_NOREPACK || c == C_WM_EMBD_CPU ||
        c == C_WM_WHOLE || c == C_WM_SET || c == C_WM_HALF || c == C_WM_AUTO) {
        wm_error err;
        wm_llama_stats st = WM_LLAMA_STATS_INIT;
        wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
        o.stats = &st;
        const char *th = getenv("WM_BENCH_THREADS");
        if (th) o.threads = (unsigned)atoi(th);
        if (c == C_WM_HALF) o.threads = (unsigned)(ncpu() + 1) / 2;
        if (c == C_WM_PF) o.prefault = WM_LLAMA_PREFAULT_ON;
        if (c == C_WM_NOPFT) o.prefetch = WM_LLAMA_PREFETCH_OFF;
        if (c == C_WM_NOREPACK) o.repack = WM_LLAMA_REPACK_OFF;
        if (c == C_WM_WHOLE) o.repack = WM_LLAMA_REPACK_WHOLE;
        if (c == C_WM_SET) o.upload = WM_LLAMA_UPLOAD_TENSOR_SET; /* 1.6's device upload */
        /* the bridge's reading engine (NONE), as before 1.7: the load modes' rows are
         * bench/llama_modes.c's */
        if (c != C_WM_AUTO) p.load_mode = LLAMA_LOAD_MODE_NONE;
        if (curve) {
            p.progress_callback = on_curve;
            curve_t0 = t0;
        }
        if (wm_llama_load(path, &p, &o, &m, &err) != WM_OK) {
            fprintf(stderr, "llama: %s\n", err.msg);
            return -1;
        }
        wm_ledger led = WM_LEDGER_INIT;
        wm_ledger_get(&led); /* a fresh process: the peak is this load's */
        fprintf(stderr,
                "  %s: model %.1f ms, reads %.1f ms, trim %.2f ms; %.1f MiB in its own buffers, "
                "%.1f MiB prefetched, scratch at most %.1f MiB; tensors %zu in place (%.1f MiB "
                "laid out as the file), %zu "
                "windowed (%zu repacked, %zu in row groups)\n",
                load_names[c], st.seconds_model * 1e3, st.seconds_read * 1e3, st.seconds_trim * 1e3,
                (double)st.bytes_own / 1048576.0, (double)st.bytes_prefetched / 1048576.0,
                (double)led.cat[WM_LEDGER_SCRATCH].peak / 1048576.0, st.in_place,
                (double)st.bytes_laid_out / 1048576.0, st.windowed, st.repacked, st.repacked_rows);
        if (st.staged)
            fprintf(stderr,
                    "    device: %zu tensors staged (%.1f MiB), %zu of them read ahead during the "
                    "making (%.1f MiB in %.1f ms, its device buffer made in the first %.1f ms, "
                    "waited %.1f ms after it, copied in %.1f ms); the fill after the making %.1f "
                    "ms\n",
                    st.staged, (double)st.bytes_staged / 1048576.0, st.ahead,
                    (double)st.bytes_ahead / 1048576.0, st.seconds_ahead * 1e3,
                    st.seconds_ahead_buffer * 1e3, st.seconds_ahead_wait * 1e3,
                    st.seconds_ahead_copy * 1e3, st.seconds_staged * 1e3);
        if (curve)
            fprintf(stderr,
                    "    curve: first %.1f, 25%% %.1f, 50%% %.1f, 75%% %.1f, 100%% %.1f ms\n",
                    curve_at[0], curve_at[1], curve_at[2], curve_at[3], curve_at[4]);
    } else {
        p.load_mode = c == C_READ ? 0 : c == C_MMAP ? 1 : 4;
        m = llama_model_load_from_file(path, p);
    }
    double ms = bench_now_ms() - t0;
    if (!m) return -1;
    if (fingerprint) print_tokens(m, load_names[c]);
    llama_model_free(m);
    return ms;
}

/* Runs fn in a child; returns what it wrote (a double) or -1. */
typedef double (*child_fn)(const void *arg);
static double in_child(child_fn fn, const void *arg) {
    int pfd[2];
    if (pipe(pfd) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        double v = fn(arg);
        if (write(pfd[1], &v, sizeof v) != (ssize_t)sizeof v) _exit(1);
        _exit(0);
    }
    close(pfd[1]);
    double v = -1;
    if (read(pfd[0], &v, sizeof v) != (ssize_t)sizeof v) v = -1;
    close(pfd[0]);
    int status;
    waitpid(pid, &status, 0);
    return v;
}

typedef struct load_arg {
    int c;
    const char *path;
    uint64_t data, size;
} load_arg;

static double load_child(const void *arg) {
    const load_arg *a = arg;
    disk_start(bench_now_ms());
    double ms = load_once(a->c, a->path, a->data, a->size);
    disk_stop(load_names[a->c], ms);
    return ms;
}

/* The median of the rounds' own cold ratios, the disk's time over c's (the two measured in the
 * same round, minutes apart at most): steadier than a ratio of medians where the disk's own
 * speed drifts from round to round. 0 where either was not measured. */
static double paired(double v[2][N_LOAD][MAX_ROUNDS], int c, int rounds) {
    if (!chosen[C_DISK] || !chosen[c] || c == C_DISK || warm_only(c)) return 0;
    double r[MAX_ROUNDS];
    for (int k = 0; k < rounds; k++)
        r[k] = v[1][C_DISK][k] / v[1][c][k];
    return bench_stats_of(r, (size_t)rounds).median;
}

static void print_load(const char *path, uint64_t bytes, double v[2][N_LOAD][MAX_ROUNDS],
                       int rounds) {
    double pr[N_LOAD]; /* before the stats, which sort each row in place */
    for (int c = 0; c < N_LOAD; c++)
        pr[c] = paired(v, c, rounds);
    bench_stats s[2][N_LOAD];
    for (int w = 0; w < 2; w++)
        for (int c = 0; c < N_LOAD; c++)
            s[w][c] = bench_stats_of(v[w][c], (size_t)rounds);
    printf("\n#### load: %s (%.1f MiB of tensor data), median (p10-p90) of %d rounds\n\n", path,
           (double)bytes / 1048576.0, rounds);
    printf("| contender | warm ms | warm GB/s | cold ms | cold GB/s | cold: the disk / it, paired "
           "|\n|---|---:|---:|---:|---:|---:|\n");
    for (int c = 0; c < N_LOAD; c++) {
        if (!chosen[c]) continue;
        char pair[16] = "-";
        if (pr[c] > 0) snprintf(pair, sizeof pair, "%.3f", pr[c]);
        if (warm_only(c)) {
            printf("| %s | %.1f (%.1f-%.1f) | %.2f | - | - | - |\n", load_names[c], s[0][c].median,
                   s[0][c].p10, s[0][c].p90, (double)bytes / s[0][c].median / 1e6);
            continue;
        }
        if (cold_only(c)) {
            printf("| %s | - | - | %.1f (%.1f-%.1f) | %.2f | %s |\n", load_names[c], s[1][c].median,
                   s[1][c].p10, s[1][c].p90, (double)bytes / s[1][c].median / 1e6, pair);
            continue;
        }
        printf("| %s | %.1f (%.1f-%.1f) | %.2f | %.1f (%.1f-%.1f) | %.2f | %s |\n", load_names[c],
               s[0][c].median, s[0][c].p10, s[0][c].p90, (double)bytes / s[0][c].median / 1e6,
               s[1][c].median, s[1][c].p10, s[1][c].p90, (double)bytes / s[1][c].median / 1e6,
               pair);
    }
    double warm = s[0][C_READ].median / s[0][C_WM].median;
    double cold = s[1][C_DISK].median / s[1][C_WM].median;
    if (!all_chosen) {
        if (chosen[C_WM] && chosen[C_DISK])
            printf("\n- cold: wm_llama_load %.2fx the disk (target >= 0.95x: %s), %.3fx paired\n",
                   cold, cold >= 0.95 ? "met" : "NOT met", pr[C_WM]);
        return;
    }
    printf("\n- warm: wm_llama_load %.2fx llama.cpp's read mode (target >= 2x: %s), %.2fx its "
           "mmap mode, %.2fx its direct-I/O mode; %.2fx the fresh-memory limit, %.2fx the "
           "faulted-memory one\n",
           warm, warm >= 2 ? "met" : "NOT met", s[0][C_MMAP].median / s[0][C_WM].median,
           s[0][C_DIRECT].median / s[0][C_WM].median, s[0][C_FRESH].median / s[0][C_WM].median,
           s[0][C_MEM].median / s[0][C_WM].median);
    printf("- cold: wm_llama_load %.2fx the disk (target >= 0.95x: %s; %.3fx paired: the median "
           "of the rounds' own ratios), %.2fx with prefault on, "
           "%.2fx with prefetch off, %.2fx the disk read into fresh memory, %.2fx the disk read "
           "into 4 KiB pages; llama.cpp read %.2fx, mmap %.2fx, direct I/O %.2fx of the disk\n",
           cold, cold >= 0.95 ? "met" : "NOT met", pr[C_WM],
           s[1][C_DISK].median / s[1][C_WM_PF].median,
           s[1][C_DISK].median / s[1][C_WM_NOPFT].median,
           s[1][C_DISK_FRESH].median / s[1][C_WM].median,
           s[1][C_DISK_4K].median / s[1][C_WM].median, s[1][C_DISK].median / s[1][C_READ].median,
           s[1][C_DISK].median / s[1][C_MMAP].median, s[1][C_DISK].median / s[1][C_DIRECT].median);
}

static double warm_gib; /* --warm-memory */

static void bench_load(const char *path, int rounds) {
    wm_file *f;
    wm_error err;
    if (wm_file_open(path, &f, &err) != WM_OK) {
        fprintf(stderr, "llama: %s\n", err.msg);
        exit(1);
    }
    load_arg a = {.path = path, .data = wm_file_data_offset(f), .size = wm_file_size(f)};
    uint64_t bytes = wm_file_tensor_bytes(f);
    wm_file_close(f);
    static double v[2][N_LOAD][MAX_ROUNDS];
    uint64_t worst_cached = 0;
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < N_LOAD; k++) {
            int c = (k + r) % N_LOAD;
            if (!chosen[c]) continue;
            for (int w = 0; w < 2; w++) {
                if ((cold_only(c) && !w) || (warm_only(c) && w)) continue;
                if (w) {
                    bench_make_cold(path);
                    uint64_t cached = bench_cached_bytes(path);
                    if (cached > worst_cached) worst_cached = cached;
                } else {
                    bench_make_warm(path);
                }
                a.c = c;
                fingerprint = gpu_layers && r == 0 && !w;
                cold_now = w;
                bench_warm_memory(warm_gib);
                v[w][c][r] = in_child(load_child, &a);
                fprintf(stderr, "round %d %s %s: %.1f ms\n", r + 1, load_names[c],
                        w ? "cold" : "warm", v[w][c][r]);
            }
        }
    print_load(path, bytes, v, rounds);
    printf("- cold runs: at most %llu bytes of the file in the page cache after the drop "
           "(mincore)\n",
           (unsigned long long)worst_cached);
}

/* ---- decode ---- */

enum { D_READ, D_WM, D_WM_NOREPACK, N_DECODE };
static const char *const decode_names[N_DECODE] = {
    "llama.cpp's own load (read, extra buffer types)", "wm_llama_load (repack kept)",
    "wm_llama_load, repack off (WM_LLAMA_REPACK_OFF)"};

typedef struct decode_arg {
    int c;
    const char *path;
} decode_arg;

static double decode_child(const void *arg) {
    const decode_arg *a = arg;
    llama_init();
    struct llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = gpu_layers;
    p.load_mode = 0;
    struct llama_model *m = NULL;
    if (a->c == D_READ) {
        m = llama_model_load_from_file(a->path, p);
    } else {
        wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
        o.repack = a->c == D_WM ? WM_LLAMA_REPACK_AUTO : WM_LLAMA_REPACK_OFF;
        wm_llama_load(a->path, &p, &o, &m, NULL);
    }
    if (!m) return -1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 128;
    cp.n_batch = 128;
    cp.n_threads = cp.n_threads_batch = ncpu();
    struct llama_context *ctx = llama_init_from_model(m, cp);
    const struct llama_vocab *v = llama_model_get_vocab(m);
    int nv = llama_vocab_n_tokens(v);
    llama_token tok = llama_vocab_bos(v);
    double t0 = 0;
    for (int i = 0; i <= DECODE_TOKENS; i++) {
        if (i == 1) t0 = bench_now_ms(); /* the first step warms the graph */
        struct llama_batch b = llama_batch_get_one(&tok, 1);
        if (llama_decode(ctx, b) != 0) return -1;
        const float *lg = llama_get_logits_ith(ctx, -1);
        int best = 0;
        for (int k = 1; k < nv; k++)
            if (lg[k] > lg[best]) best = k;
        tok = best;
    }
    double tps = DECODE_TOKENS / ((bench_now_ms() - t0) / 1000.0);
    llama_free(ctx);
    llama_model_free(m);
    return tps;
}

static void bench_decode(const char *model, int rounds) {
    static const struct {
        const char *name;
        enum llama_ftype ftype;
    } q[] = {{"q4_0", LLAMA_FTYPE_MOSTLY_Q4_0}, {"q8_0", LLAMA_FTYPE_MOSTLY_Q8_0}};
    for (size_t k = 0; k < 2; k++) {
        char out[4096];
        snprintf(out, sizeof out, "%.*s-%s.gguf", (int)(strlen(model) - 5), model, q[k].name);
        if (access(out, R_OK) != 0) {
            llama_init();
            llama_model_quantize_params qp = llama_model_quantize_default_params();
            qp.ftype = q[k].ftype;
            qp.allow_requantize = true;
            qp.nthread = ncpu();
            if (llama_model_quantize(model, out, &qp) != 0) {
                fprintf(stderr, "llama: quantizing %s to %s failed\n", model, q[k].name);
                exit(1);
            }
        }
        double v[N_DECODE][MAX_ROUNDS];
        for (int r = 0; r < rounds; r++)
            for (int j = 0; j < N_DECODE; j++) {
                int c = (j + r) % N_DECODE;
                decode_arg a = {c, out};
                bench_make_warm(out);
                v[c][r] = in_child(decode_child, &a);
                fprintf(stderr, "round %d %s %s: %.2f tokens/s\n", r + 1, q[k].name,
                        decode_names[c], v[c][r]);
            }
        printf(
            "\n#### decode: %s, greedy from BOS, %d tokens, %d threads; tokens/s, median "
            "(p10-p90) of %d rounds\n\n| load | tokens/s | / llama.cpp's own |\n|---|---:|---:|\n",
            out, DECODE_TOKENS, ncpu(), rounds);
        bench_stats s[N_DECODE];
        for (int c = 0; c < N_DECODE; c++)
            s[c] = bench_stats_of(v[c], (size_t)rounds);
        for (int c = 0; c < N_DECODE; c++)
            printf("| %s | %.2f (%.2f-%.2f) | %.3fx |\n", decode_names[c], s[c].median, s[c].p10,
                   s[c].p90, s[c].median / s[D_READ].median);
    }
}

int main(int argc, char **argv) {
    int rounds = 3;
    bool load = true, decode = true;
    const char *model = "bench-llama-1200M.gguf";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-r") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--load-only"))
            decode = false;
        else if (!strcmp(argv[i], "--decode-only"))
            load = false;
        else if (!strcmp(argv[i], "--warm-memory") && i + 1 < argc)
            warm_gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            choose(argv[++i]);
        else if (!strcmp(argv[i], "--curve"))
            curve = true;
        else if (!strcmp(argv[i], "--disk"))
            disk_trace = true;
        else if (!strcmp(argv[i], "--gpu"))
            gpu_layers = 999;
        else
            model = argv[i];
    }
    if (rounds < 1 || rounds > MAX_ROUNDS) rounds = 3;
    for (int c = 0; all_chosen && c < C_ENGINE; c++)
        chosen[c] = true;
    if (access(model, R_OK) != 0) {
        char cli[4096], cmd[8192];
        snprintf(cli, sizeof cli, "%s", argv[0]);
        char *slash = strrchr(cli, '/');
        if (slash) *slash = 0;
        snprintf(cmd, sizeof cmd, "'%s/../weightmap' make-model '%s' --size 1200M >/dev/null", cli,
                 model);
        fprintf(stderr, "llama: making %s\n", model);
        if (system(cmd) != 0) return 1;
    }
    char machine[512];
    bench_machine_line(machine, sizeof machine);
    printf("> %s\n", machine);
    if (warm_gib > 0)
        printf("> %.1f GiB of memory touched and freed before each measurement\n", warm_gib);
    if (load) bench_load(model, rounds);
    if (decode) bench_decode(model, rounds);
    return 0;
}
