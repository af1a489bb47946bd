/*
 * cycles.c: `gpu cycles`: where host memory goes over load and release cycles (main.c has the
 * options).
 */
#include "gpu.h"

#ifdef WM_HAVE_CUDA
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
int gpu_cycles(int argc, char **argv) {
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
#endif /* WM_HAVE_CUDA */
