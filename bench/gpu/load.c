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

int gpu_load(int argc, char **argv) {
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
#endif /* WM_HAVE_CUDA */
