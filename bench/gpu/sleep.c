/*
 * sleep.c: `gpu sleep`: the pool's sleep and wake of one model on one device (WM_POOL_SLEEP's
 * mechanism, wm__model_sleep and wm__model_wake, without a pool), part by part, with the knobs
 * of its copies (wm__cuda_tune_swap), so that one run on the GPU host compares the choices
 * (main.c has the options).
 */
#include "backend/staged.h" /* wm__model_sleep, wm__model_wake, wm__swap_times, WM__SWAP_* */
#include "gpu.h"

#ifdef WM_HAVE_CUDA
#define MAX_REPEAT 64

/* The kernel's AnonHugePages of this process, in bytes (how much of the host copy the kernel
 * backed with huge pages, read while the model sleeps), or 0. */
static uint64_t anon_huge(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return 0;
    char line[256];
    uint64_t v = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "AnonHugePages: %llu", &kb) == 1) v = (uint64_t)kb * 1024;
    }
    fclose(f);
    return v;
}

typedef struct sleep_run {
    const char *path;
    unsigned repeat, streams, flags;
    uint64_t piece;
    bool check;
    /* measured, per cycle */
    wm__swap_times slept[MAX_REPEAT], woke[MAX_REPEAT];
    uint64_t huge_asleep, huge_awake, pinned_asleep;
} sleep_run;

static int parse_args(sleep_run *a, int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        uint64_t v;
        if (!strcmp(argv[i], "--piece") && i + 1 < argc && parse_size(argv[++i], &v)) {
            a->piece = v;
        } else if (!strcmp(argv[i], "--streams") && i + 1 < argc && parse_size(argv[++i], &v)) {
            a->streams = (unsigned)v;
        } else if (!strcmp(argv[i], "--no-huge")) {
            a->flags |= WM__CUDA_SWAP_NO_HUGE;
        } else if (!strcmp(argv[i], "--no-prefault")) {
            a->flags |= WM__CUDA_SWAP_NO_PREFAULT;
        } else if (!strcmp(argv[i], "--pinned-whole")) {
            a->flags |= WM__CUDA_SWAP_PINNED_WHOLE;
        } else if (!strcmp(argv[i], "--verify")) {
            a->check = true;
        } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            a->repeat = v > MAX_REPEAT ? MAX_REPEAT : (unsigned)v;
        } else if (!a->path && argv[i][0] != '-') {
            a->path = argv[i];
        } else {
            fprintf(stderr, "gpu sleep: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    return a->path ? 0 : 2;
}

/* The median of field `off` (a double of wm__swap_times) over n cycles. */
static double median_of(const wm__swap_times *t, unsigned n, size_t off) {
    double v[MAX_REPEAT];
    for (unsigned k = 0; k < n; k++)
        v[k] = *(const double *)(const void *)((const char *)&t[k] + off);
    qsort(v, n, sizeof *v, cmp_double);
    return v[n / 2];
}

#define MED(arr, field) median_of(a->arr, a->repeat, offsetof(wm__swap_times, field))

static void print_run(const sleep_run *a, uint64_t bytes, bool verified) {
    double gib = (double)bytes / (1 << 30);
    printf("{\"bench\": \"sleep\", \"file\": \"%s\", \"bytes\": %" PRIu64 ", \"repeat\": %u, "
           "\"piece\": %" PRIu64 ", \"streams\": %u, \"huge_advised\": %s, \"prefault\": %s, "
           "\"pinned_whole\": %s, \"pieces\": %u, "
           "\"anon_huge_asleep\": %" PRIu64 ", \"anon_huge_awake\": %" PRIu64
           ", \"pinned_asleep\": %" PRIu64 ", \"verified\": %s,\n",
           a->path, bytes, a->repeat, a->piece ? a->piece : (uint64_t)WM__SWAP_PIECE,
           a->streams ? a->streams : WM__SWAP_STREAMS,
           a->flags & WM__CUDA_SWAP_NO_HUGE ? "false" : "true",
           a->flags & WM__CUDA_SWAP_NO_PREFAULT ? "false" : "true",
           a->flags & WM__CUDA_SWAP_PINNED_WHOLE ? "true" : "false", a->woke[0].pieces,
           a->huge_asleep, a->huge_awake, a->pinned_asleep,
           a->check ? (verified ? "true" : "false") : "null");
    printf(" \"wake\": {\"seconds\": %.4f, \"device_alloc\": %.4f, \"host_alloc\": %.4f, "
           "\"host_register\": %.4f, \"copy\": %.4f, \"copy_gibps\": %.1f, "
           "\"host_unregister\": %.4f, \"host_free\": %.4f},\n",
           MED(woke, total), MED(woke, device_alloc), MED(woke, host_alloc),
           MED(woke, host_register), MED(woke, copy), gib / MED(woke, copy),
           MED(woke, host_unregister), MED(woke, host_free));
    printf(" \"sleep\": {\"seconds\": %.4f, \"host_alloc\": %.4f, \"host_register\": %.4f, "
           "\"copy\": %.4f, \"copy_gibps\": %.1f, \"host_unregister\": %.4f, "
           "\"host_free\": %.4f, \"device_free\": %.4f}}\n",
           MED(slept, total), MED(slept, host_alloc), MED(slept, host_register), MED(slept, copy),
           gib / MED(slept, copy), MED(slept, host_unregister), MED(slept, host_free),
           MED(slept, device_free));
}

/* Copies every tensor back and compares it with the file (after the last wake). */
static bool same_as_file(wm_model *m) {
    const wm_file *f = wm_model_file(m);
    bool ok = true;
    for (size_t i = 0; ok && i < wm_file_tensor_count(f); i++) {
        wm_tensor_info ti;
        wm_file_tensor(f, i, &ti);
        unsigned char *a = malloc(ti.nbytes + 1), *b = malloc(ti.nbytes + 1);
        const void *d = (const void *)(uintptr_t)wm_model_tensor_device_ptr(m, i);
        int fd = open(wm_file_shard_path(f, ti.shard), O_RDONLY);
        ok = a && b && fd >= 0 &&
             cudaMemcpy(a, d, ti.nbytes, cudaMemcpyDeviceToHost) == cudaSuccess &&
             pread(fd, b, ti.nbytes, (off_t)ti.offset) == (ssize_t)ti.nbytes &&
             memcmp(a, b, ti.nbytes) == 0;
        if (!ok) fprintf(stderr, "gpu sleep: tensor %s differs after a wake\n", ti.name);
        if (fd >= 0) close(fd);
        free(a);
        free(b);
    }
    return ok;
}

/* `repeat` sleeps and wakes of m. 0, or 1 when one failed. */
static int cycles(sleep_run *a, wm_model *m) {
    wm_error err;
    for (unsigned r = 0; r < a->repeat; r++) {
        if (wm__model_sleep(m, &err) != WM_OK) {
            fprintf(stderr, "gpu sleep: %s\n", err.msg);
            return 1;
        }
        a->slept[r] = m->slept;
        if (r == 0) {
            wm_ledger l = WM_LEDGER_INIT;
            wm_ledger_get(&l);
            a->pinned_asleep = l.cat[WM_LEDGER_PINNED].current;
            a->huge_asleep = anon_huge();
        }
        if (wm__model_wake(m, &err) != WM_OK) {
            fprintf(stderr, "gpu sleep: %s\n", err.msg);
            return 1;
        }
        a->woke[r] = m->woke;
        if (r == 0) a->huge_awake = anon_huge();
    }
    return 0;
}

int gpu_sleep(int argc, char **argv) {
    sleep_run a = {.repeat = 3};
    int bad = parse_args(&a, argc, argv);
    if (bad) return bad;
    wm_cuda_options cu = WM_CUDA_OPTIONS_INIT;
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.backend = WM_BACKEND_CUDA;
    o.mode = WM_MODE_HEAP;
    o.cuda = &cu;
    wm__cuda_tune_swap((size_t)a.piece, a.streams, a.flags);
    if (!init_devices(&o)) return 77;
    wm_file *f;
    wm_model *m;
    wm_error err;
    if (wm_file_open(a.path, &f, &err) != WM_OK || wm_model_load(f, &o, &m, &err) != WM_OK) {
        fprintf(stderr, "gpu sleep: %s\n", err.msg);
        return 1;
    }
    wm_model_stats st = WM_MODEL_STATS_INIT;
    wm_model_stats_get(m, &st);
    int rc = cycles(&a, m);
    bool verified = !rc && a.check && same_as_file(m);
    if (!rc) print_run(&a, st.device_bytes, verified);
    wm_model_release(m);
    wm_file_close(f);
    wm__cuda_tune_swap(0, 0, 0);
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    bool released = l.cat[WM_LEDGER_DEVICE].current == 0 && l.cat[WM_LEDGER_PINNED].current == 0;
    if (!released) fprintf(stderr, "gpu sleep: the ledger holds device or pinned bytes after\n");
    return rc || (a.check && !verified) || !released ? 1 : 0;
}
#endif /* WM_HAVE_CUDA */
