/*
 * load.c: `gpu load`: weightmap's CUDA load (staged or registered), over one device, several, or
 * one rank's slice (main.c has the options).
 */
#include "gpu.h"

#ifdef WM_HAVE_CUDA
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

/* The command's options and what its cycles measured. */
typedef struct load_run {
    const char *path;
    wm_cuda_options cu;
    wm_load_options o;
    unsigned repeat, slots, flags;
    uint64_t window;
    bool check;
    int devs[16];
    /* measured */
    uint64_t base, peak_delta, pinned_peak, scratch_peak;
    wm_model_stats st;
    bool verified, released;
    int64_t left_first, left_last; /* footprint after release, above the base */
    double best, median;
} load_run;

/* 0, or the exit status of a bad argument (2). */
static int parse_args(load_run *a, int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        uint64_t v;
        unsigned r, w;
        wm_load_options *o = &a->o;
        if (!strcmp(argv[i], "--devices") && i + 1 < argc) {
            o->n_devices = parse_devices(argv[++i], a->devs);
            if (o->n_devices == 0) return 2;
            o->devices = a->devs;
            o->device = a->devs[0];
        } else if (!strcmp(argv[i], "--placement") && i + 1 < argc) {
            o->placement = !strcmp(argv[++i], "layers") ? WM_PLACE_LAYERS : WM_PLACE_BALANCE;
        } else if (!strcmp(argv[i], "--tp") && i + 1 < argc &&
                   sscanf(argv[++i], "%u/%u", &r, &w) == 2 && r < w) {
            o->tp_rank = r;
            o->tp_world = w;
            o->tp_split = wm_split_llama;
        } else if (!strcmp(argv[i], "--window") && i + 1 < argc && parse_size(argv[++i], &v)) {
            a->window = v;
        } else if (!strcmp(argv[i], "--slots") && i + 1 < argc && parse_size(argv[++i], &v)) {
            a->slots = (unsigned)v;
        } else if (!strcmp(argv[i], "--direct")) {
            a->cu.direct_io = 1;
        } else if (!strcmp(argv[i], "--serial-ring")) {
            a->flags |= WM__CUDA_SERIAL_RING;
        } else if (!strcmp(argv[i], "--no-reap")) {
            a->flags |= WM__CUDA_NO_REAP;
        } else if (!strcmp(argv[i], "--registered")) {
            o->mode = WM_MODE_MMAP;
            a->cu.registered = 1;
        } else if (!strcmp(argv[i], "--verify")) {
            a->check = true;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc && parse_size(argv[++i], &v)) {
            o->threads = (unsigned)v;
        } else if (!strcmp(argv[i], "--budget") && i + 1 < argc && parse_size(argv[++i], &v)) {
            a->cu.pinned_budget = v;
        } else if (!strcmp(argv[i], "--max-buffer") && i + 1 < argc && parse_size(argv[++i], &v)) {
            o->max_buffer_size = v;
        } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            a->repeat = (unsigned)v;
        } else if (!a->path && argv[i][0] != '-') {
            a->path = argv[i];
        } else {
            fprintf(stderr, "gpu load: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    return a->path ? 0 : 2;
}

/* `repeat` load/release cycles of f: their times (the best and the median), peaks and what each
 * release left. 0, or 1 when a load failed. */
static int cycles(load_run *a, wm_file *f) {
    double t[64];
    for (unsigned r = 0; r < a->repeat; r++) {
        sampler s;
        wm_error err;
        wm_ledger_reset_peaks();
        sampler_start(&s);
        wm_model *m;
        double t0 = now_s();
        wm_status rc = wm_model_load(f, &a->o, &m, &err);
        double t1 = now_s();
        sampler_stop(&s);
        if (rc != WM_OK) {
            fprintf(stderr, "gpu: %s\n", err.msg);
            return 1;
        }
        t[r] = t1 - t0;
        wm_ledger l = WM_LEDGER_INIT;
        wm_ledger_get(&l);
        if (l.cat[WM_LEDGER_PINNED].peak > a->pinned_peak)
            a->pinned_peak = l.cat[WM_LEDGER_PINNED].peak;
        if (l.cat[WM_LEDGER_SCRATCH].peak > a->scratch_peak)
            a->scratch_peak = l.cat[WM_LEDGER_SCRATCH].peak;
        if (s.peak > a->base && s.peak - a->base > a->peak_delta) a->peak_delta = s.peak - a->base;
        wm_model_stats_get(m, &a->st);
        if (a->check && r == 0) a->verified = verify(m);
        wm_model_release(m);
        uint64_t after = footprint();
        if (r == 0) a->left_first = (int64_t)(after - a->base);
        a->left_last = (int64_t)(after - a->base);
        wm_ledger_get(&l);
        a->released = a->released && l.cat[WM_LEDGER_DEVICE].current == 0 &&
                      l.cat[WM_LEDGER_PINNED].current == 0;
    }
    qsort(t, a->repeat, sizeof *t, cmp_double);
    a->best = t[0];
    a->median = t[a->repeat / 2];
    return 0;
}

static void print_run(const load_run *a) {
    const wm_load_options *o = &a->o;
    const wm_model_stats *st = &a->st;
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
        a->path, a->cu.registered ? "registered" : "staged", st->threads, a->window, a->slots,
        a->flags & WM__CUDA_SERIAL_RING ? "true" : "false",
        a->flags & WM__CUDA_NO_REAP ? "false" : "true", a->cu.direct_io ? "true" : "false",
        a->cu.pinned_budget, st->tensor_bytes, st->buffers, a->repeat, a->best, a->median,
        (double)st->tensor_bytes / a->best / 1e9, (double)st->tensor_bytes / a->median / 1e9,
        a->base, a->peak_delta, a->pinned_peak, a->scratch_peak,
        a->check ? (a->verified ? "true" : "false") : "null", a->released ? "true" : "false",
        a->left_first, a->left_last, o->n_devices > 1 ? o->n_devices : 1,
        o->placement == WM_PLACE_LAYERS ? "layers" : "balance", o->tp_rank,
        o->tp_world > 1 ? o->tp_world : 1, st->bytes_read);
}

int gpu_load(int argc, char **argv) {
    load_run a = {.cu = WM_CUDA_OPTIONS_INIT, .repeat = 3, .released = true};
    a.o = (wm_load_options){.size = sizeof a.o, .cuda = &a.cu};
    a.o.backend = WM_BACKEND_CUDA;
    a.o.mode = WM_MODE_HEAP;
    int bad = parse_args(&a, argc, argv);
    if (bad) return bad;
    if (a.repeat > 64) a.repeat = 64;
    wm__cuda_tune((size_t)a.window, a.slots, a.flags);
    if (!init_devices(&a.o)) return 77;
    if (a.o.tp_world > 1) a.check = false; /* verify compares whole tensors */
    a.base = footprint();                  /* right after CUDA initialisation */
    wm_file *f;
    wm_error err;
    if (wm_file_open(a.path, &f, &err) != WM_OK) {
        fprintf(stderr, "gpu: %s\n", err.msg);
        return 1;
    }
    int rc = cycles(&a, f);
    wm_file_close(f);
    if (rc) return rc;
    print_run(&a);
    return (a.check && !a.verified) || !a.released ? 1 : 0;
}
#endif /* WM_HAVE_CUDA */
