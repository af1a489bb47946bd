/*
 * llama_swap.c: `weightmap swap --llama FILE...`, llama.cpp models loaded in rotation through a
 * pool under a budget by the llama.cpp bridge (wm_llama_pool_get, include/weightmap_llama.h): per
 * switch the get's time, the footprint, what the pool holds, the bytes the evictions returned and
 * one decoded token; then the verdict: every eviction (llama_model_free) proven before the next
 * load (the bridge's own buffers and the ledger fell by what the model's load raised them by),
 * the pool's charge never above the budget, and after the pool closes the ledger empty, no
 * mapping of any file and the footprint (after malloc_trim: llama.cpp's own small blocks) back
 * to what it was after a first warm-up load. Every file's cost (wm_llama_cost) is held against
 * the budget before anything is loaded. Built only where the bridge is (WM_CLI_LLAMA).
 */
#include "cli.h"
#include "weightmap_llama.h"

#include <inttypes.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

/* The footprint back within CLI_LLAMA_SLACK (where it is judged). */
static bool footprint_back(int64_t fp) {
    return !CLI_LLAMA_JUDGE_FOOTPRINT || (fp <= CLI_LLAMA_SLACK && fp >= -CLI_LLAMA_SLACK);
}

static int mode_of(const char *name) {
    static const struct {
        const char *name;
        int mode;
    } names[] = {
        {"none", LLAMA_LOAD_MODE_NONE},           {"mmap", LLAMA_LOAD_MODE_MMAP},
        {"mlock", LLAMA_LOAD_MODE_MLOCK},         {"mmap-mlock", LLAMA_LOAD_MODE_MMAP_MLOCK},
        {"direct-io", LLAMA_LOAD_MODE_DIRECT_IO}, {"auto", LLAMA_LOAD_MODE_AUTO}};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        if (strcmp(name, names[k].name) == 0) return names[k].mode;
    return -2;
}

static int64_t footprint_trimmed(void) {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
    wm_mem_figures m;
    return wm_mem_figures_get(0, &m, NULL) == WM_OK ? (int64_t)m.footprint : 0;
}

typedef struct swap_llama {
    const char *const *files;
    unsigned n;
    struct llama_model_params p;
    wm_llama_options o;
    uint64_t cycles, budget;
    bool json;
} swap_llama;

/* Every file's cost against the budget, before anything is loaded; 1 naming the first over. */
static int refuse_early(const swap_llama *s, const char *mode, wm_error *err) {
    for (unsigned i = 0; i < s->n; i++) {
        wm_cost c = WM_COST_INIT;
        if (wm_llama_cost(s->files[i], &s->p, &s->o, &c, err)) return 1;
        if (c.host_peak > s->budget) {
            char b1[32], b2[32];
            snprintf(err->msg, sizeof err->msg,
                     "%s: the budget %s is below what this file needs (%s at its load's peak, in "
                     "load mode %s); nothing was loaded",
                     s->files[i], cli_bytes(s->budget, b1), cli_bytes(c.host_peak, b2), mode);
            return 1;
        }
    }
    return 0;
}

/* One switch: get, decode one token, put; its row. */
static int one_switch(const swap_llama *s, wm_pool *pool, unsigned cyc, unsigned i, int64_t base,
                      bool first, wm_error *err) {
    struct llama_model *m;
    if (wm_llama_pool_get(pool, s->files[i], &s->p, &s->o, &m, err)) return 1;
    int tok = cli_llama_decode_one(m, NULL, 0);
    wm_pool_stats st = WM_POOL_STATS_INIT;
    wm_pool_stats_get(pool, &st);
    if (wm_llama_pool_put(pool, m, err)) return 1;
    if (tok < 0) {
        err->code = WM_EDEVICE;
        snprintf(err->msg, sizeof err->msg, "%s: llama.cpp could not decode a token", s->files[i]);
        return 1;
    }
    int64_t fp = footprint_trimmed() - base;
    const char *slash = strrchr(s->files[i], '/'), *name = slash ? slash + 1 : s->files[i];
    uint64_t back = st.last_returned + st.last_returned_device;
    if (s->json) {
        printf("%s{\"cycle\":%u,\"file\":", first ? "" : ",", cyc);
        cli_json_cstr(stdout, name);
        printf(",\"seconds\":%.6f,\"footprint\":%" PRId64 ",\"held\":%" PRIu64
               ",\"returned\":%" PRIu64 ",\"evicted\":%u,\"token\":%d}",
               st.last_get_seconds, fp, st.held, back, st.last_evicted, tok);
        return 0;
    }
    char b1[32], b2[32], b3[32];
    printf("%5u  %-28.28s %8.3f  %10s  %10s  %10s  %7u  %d\n", cyc, name, st.last_get_seconds,
           fp < 0 ? "-" : cli_bytes((uint64_t)fp, b1), cli_bytes(st.held, b2), cli_bytes(back, b3),
           st.last_evicted, tok);
    return 0;
}

static void verdict(const swap_llama *s, const wm_pool_stats *st, uint64_t ledger, size_t regions,
                    int64_t fp) {
    bool peak_ok = st->held_peak <= s->budget, proven = st->unproven == 0;
    bool back = ledger == 0 && regions == 0 && footprint_back(fp);
    bool judged = st->evictions > 0, ok = peak_ok && proven && back && judged;
    char b1[32], b2[32], b3[32];
    if (s->json) {
        printf("],\"budget\":%" PRIu64 ",\"held_peak\":%" PRIu64 ",\"evictions\":%" PRIu64
               ",\"unproven\":%" PRIu64 ",\"returned\":%" PRIu64 ",\"returned_device\":%" PRIu64
               ",\"footprint_after\":%" PRId64 ",\"footprint_slack\":%" PRId64
               ",\"ledger_after\":%" PRIu64 ",\"file_regions_after\":%zu,\"peak_ok\":%s,"
               "\"every_eviction_returned\":%s,\"footprint_back\":%s,\"judged\":%s,\"ok\":%s}\n",
               s->budget, st->held_peak, st->evictions, st->unproven, st->returned,
               st->returned_device, fp, CLI_LLAMA_SLACK, ledger, regions,
               peak_ok ? "true" : "false", proven ? "true" : "false", back ? "true" : "false",
               judged ? "true" : "false", ok ? "true" : "false");
        return;
    }
    printf("held at most %s of a budget of %s (each load charged its wm_llama_cost peak): %s\n",
           cli_bytes(st->held_peak, b1), cli_bytes(s->budget, b2), peak_ok ? "within" : "ABOVE");
    printf("%" PRIu64 " evictions (llama_model_free) returned %s, every byte by the bridge's "
           "own buffers and the ledger: %s\n",
           st->evictions, cli_bytes(st->returned + st->returned_device, b1), proven ? "yes" : "NO");
    printf("after the pool closed: footprint %s%s after malloc_trim (bound %s%s), ledger %" PRIu64
           " bytes, %zu regions of the files: %s\n",
           fp < 0 ? "-" : "+", cli_bytes((uint64_t)(fp < 0 ? -fp : fp), b1),
           cli_bytes((uint64_t)CLI_LLAMA_SLACK, b3),
           CLI_LLAMA_JUDGE_FOOTPRINT ? "" : "; not judged under AddressSanitizer", ledger, regions,
           back ? "as before" : "NOT as before");
    if (!judged)
        printf("verdict: not judged: no switch evicted a model (raise --cycles or add a file)\n");
    else
        printf("verdict: %s\n", ok ? "within budget, every byte returned" : "FAILED");
}

static int rotate(const swap_llama *s, wm_pool *pool, int64_t base, wm_error *err) {
    if (s->json)
        printf("{\"switches\":[");
    else
        printf("%5s  %-28s %8s  %10s  %10s  %10s  %7s  %s\n", "cycle", "file", "seconds",
               "footprint", "held", "returned", "evicted", "token");
    bool first = true;
    for (unsigned cyc = 1; cyc <= s->cycles; cyc++)
        for (unsigned i = 0; i < s->n; i++, first = false)
            if (one_switch(s, pool, cyc, i, base, first, err)) return 1;
    return 0;
}

int cli_swap_llama(const char *const *files, unsigned n, const char *mode, uint64_t cycles,
                   uint64_t budget, bool json, unsigned threads) {
    swap_llama s = {.files = files, .n = n, .cycles = cycles, .budget = budget, .json = json};
    int m = mode_of(mode ? mode : "none");
    if (m == -2)
        return cli_usage("swap: bad --mode '%s': expected none, mmap, mlock, mmap-mlock, "
                         "direct-io or auto (llama.cpp's load modes, with --llama)",
                         mode);
    cli_llama_log_quiet();
    wm_error err = {0};
    if (wm_llama_backends_load(NULL, &err)) return cli_fail(&err);
    llama_backend_init();
    s.p = llama_model_default_params();
    s.p.n_gpu_layers = 0;
    s.p.load_mode = (enum llama_load_mode)m;
    s.o = (wm_llama_options)WM_LLAMA_OPTIONS_INIT;
    s.o.threads = threads;
    if (refuse_early(&s, mode ? mode : "none", &err)) return cli_fail(&err);
    struct llama_model *warm; /* llama.cpp's one-time set-up, before the footprint's base */
    if (wm_llama_load(files[0], &s.p, &s.o, &warm, &err)) return cli_fail(&err);
    cli_llama_decode_one(warm, NULL, 0);
    llama_model_free(warm);
    int64_t base = footprint_trimmed();
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    po.budget = budget;
    wm_pool *pool;
    if (wm_pool_open(&po, &pool, &err)) return cli_fail(&err);
    int rc = rotate(&s, pool, base, &err);
    wm_pool_stats st = WM_POOL_STATS_INIT;
    wm_pool_stats_get(pool, &st);
    wm_pool_close(pool, NULL); /* every model was put back */
    if (rc) {
        if (json) printf("]}\n");
        return cli_fail(&err);
    }
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    size_t regions = 0;
    for (unsigned i = 0; i < n; i++) {
        size_t r = 0;
        wm_mem_file_regions(0, files[i], NULL, 0, &r, NULL);
        regions += r;
    }
    int64_t fp = footprint_trimmed() - base;
    verdict(&s, &st, wm_ledger_bytes(&l), regions, fp);
    return st.evictions && !st.unproven && st.held_peak <= budget && !wm_ledger_bytes(&l) &&
                   !regions && footprint_back(fp)
               ? 0
               : 1;
}
