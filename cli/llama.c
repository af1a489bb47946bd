/*
 * llama.c: `weightmap check FILE --llama`, the file loaded into llama.cpp through the llama.cpp
 * bridge (include/weightmap_llama.h) in each of llama.cpp's load modes (NONE, MMAP, MLOCK,
 * MMAP_MLOCK, DIRECT_IO; AUTO is one of them, said in the first line): for each, a first load
 * and release that llama.cpp's own one-time set-up may use, then each cycle loads with
 * wm_llama_load, runs one decode step (BOS, the likeliest next token), frees the context and the
 * model, and measures: weightmap's ledger (nothing may be held once the load returned but, in
 * the mapped modes, the file's mapping), the file's mappings while loaded (in the mapped modes
 * r--s only, else none) and after the release (none), and the process's
 * footprint after the release against the one before the cycles, twice: as llama_model_free
 * leaves it, and after malloc_trim(0). llama.cpp allocates its model's structures and its
 * context's buffers with malloc (and its weight buffers, where the bridge cannot give its own
 * pages: wm_llama_stats.bytes_own 0), and glibc keeps what they free (its mmap threshold rises
 * with the first large free), so the first figure shows those bytes still in the footprint after
 * every release; the second says whether any of them is still in use (1 MiB of allocator
 * fragmentation allowed: CLI_LLAMA_SLACK, cli.h). The verdict is on the ledger, the mappings
 * and the second figure. Built only where the bridge is (CMake defines WM_CLI_LLAMA then; cli.h's
 * CLI_HAVE_LLAMA is 0 otherwise). llama.cpp's log is silenced; WM_LLAMA_LOG=1 lets it through (a
 * refused model's error carries llama.cpp's reason either way: the bridge keeps its last error
 * line).
 */
#include "cli.h"
#include "weightmap_llama.h"

#include <dlfcn.h>
#include <ggml-backend.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)level, (void)text, (void)user;
}

void cli_llama_log_quiet(void) {
    const char *log = getenv("WM_LLAMA_LOG");
    if (!log || strcmp(log, "1") != 0) llama_log_set(quiet, NULL);
}

typedef struct llama_cycle {
    int mode; /* enum llama_load_mode */
    double load_seconds;
    wm_llama_stats stats;
    int token;
    char piece[32];
    uint64_t ledger_bytes, ledger_regions; /* with the model loaded, and after its release */
    uint64_t left_bytes, left_regions;
    size_t maps, maps_not_rs; /* the file's regions with the model loaded, those not r--s */
    size_t file_regions;      /* after the release */
    int64_t footprint;        /* after the release, from the footprint before the cycles */
    int64_t trimmed;          /* the same after malloc_trim(0) */
} llama_cycle;

static uint64_t footprint(void) {
    wm_mem_figures m;
    return wm_mem_figures_get(0, &m, NULL) == WM_OK ? m.footprint : 0;
}

static size_t file_regions(const char *path) {
    size_t n = 0;
    wm_mem_file_regions(0, path, NULL, 0, &n, NULL);
    return n;
}

/* The file's regions, and of those the ones that are not r--s (shared, read-only). */
static size_t file_maps(const char *path, size_t *not_rs) {
    wm_file_region r[64];
    size_t n = 0;
    *not_rs = 0;
    if (wm_mem_file_regions(0, path, r, 64, &n, NULL) != WM_OK) return 0;
    for (size_t k = 0; k < n && k < 64; k++)
        *not_rs += strcmp(r[k].perms, "r--s") != 0;
    return n;
}

static bool mapped_mode(int mode) {
    return mode == LLAMA_LOAD_MODE_MMAP || mode == LLAMA_LOAD_MODE_MMAP_MLOCK;
}

int cli_llama_decode_one(struct llama_model *m, char *piece, size_t cap) {
    const struct llama_vocab *v = llama_model_get_vocab(m);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 16;
    cp.n_batch = 16;
    cp.n_threads = cp.n_threads_batch = 1;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    llama_token tok = llama_vocab_bos(v);
    struct llama_batch b = llama_batch_get_one(&tok, 1);
    int best = -1;
    if (ctx && llama_decode(ctx, b) == 0) {
        const float *lg = llama_get_logits_ith(ctx, -1);
        best = 0;
        for (int k = 1; k < llama_vocab_n_tokens(v); k++)
            if (lg[k] > lg[best]) best = k;
        if (piece && cap) {
            int len = llama_token_to_piece(v, best, piece, (int32_t)cap - 1, 0, true);
            piece[len > 0 ? len : 0] = 0;
        }
    }
    if (ctx) llama_free(ctx);
    return best;
}

/* One decode step from BOS: the likeliest next token and its text. */
static int decode_one(struct llama_model *m, llama_cycle *c, wm_error *err) {
    c->token = cli_llama_decode_one(m, c->piece, sizeof c->piece);
    if (c->token >= 0) return 0;
    err->code = WM_EDEVICE;
    snprintf(err->msg, sizeof err->msg, "llama.cpp could not decode a token with the model");
    return 1;
}

static int one_cycle(const char *path, int mode, unsigned threads, uint64_t base, llama_cycle *c,
                     wm_error *err) {
    struct llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = 0;
    p.load_mode = (enum llama_load_mode)mode;
    c->mode = mode;
    wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
    o.threads = threads;
    c->stats = (wm_llama_stats)WM_LLAMA_STATS_INIT;
    o.stats = &c->stats;
    struct llama_model *m = NULL;
    double t0 = cli_now_s();
    if (wm_llama_load(path, &p, &o, &m, err) != WM_OK) return 1;
    c->load_seconds = cli_now_s() - t0;
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    c->ledger_bytes = wm_ledger_bytes(&l);
    c->ledger_regions = wm_ledger_regions(&l);
    c->maps = file_maps(path, &c->maps_not_rs);
    int rc = decode_one(m, c, err);
    llama_model_free(m);
    wm_ledger_get(&l);
    c->left_bytes = wm_ledger_bytes(&l);
    c->left_regions = wm_ledger_regions(&l);
    c->file_regions = file_regions(path);
    c->footprint = (int64_t)(footprint() - base);
#ifdef __GLIBC__
    malloc_trim(0);
#endif
    c->trimmed = (int64_t)(footprint() - base);
    return rc;
}

/* Loaded: the ledger empty and no mapping of the file, or in a mapped mode the file's mapping
 * (in the ledger) and r--s regions only; released: nothing. */
static bool cycle_ok(const llama_cycle *c) {
    bool mapped = mapped_mode(c->mode);
    bool loaded = mapped ? c->maps >= 1 && c->maps_not_rs == 0 && c->ledger_bytes > 0
                         : c->maps == 0 && c->ledger_bytes == 0 && c->ledger_regions == 0;
    return loaded && c->left_bytes == 0 && c->left_regions == 0 && c->file_regions == 0 &&
           (!CLI_LLAMA_JUDGE_FOOTPRINT || c->trimmed <= CLI_LLAMA_SLACK);
}

static const char *sdelta(int64_t d, char buf[32]) {
    char v[32];
    cli_bytes((uint64_t)(d < 0 ? -d : d), v);
    size_t n = strnlen(v, 30);
    buf[0] = d < 0 ? '-' : '+';
    memcpy(buf + 1, v, n);
    buf[n + 1] = 0;
    return buf;
}

static const int modes[] = {LLAMA_LOAD_MODE_NONE, LLAMA_LOAD_MODE_MMAP, LLAMA_LOAD_MODE_MLOCK,
                            LLAMA_LOAD_MODE_MMAP_MLOCK, LLAMA_LOAD_MODE_DIRECT_IO};
#define N_MODES (sizeof modes / sizeof *modes)

static const char *mode_name(int mode) { return llama_load_mode_name((enum llama_load_mode)mode); }

static void report_json(const char *path, const llama_cycle *cs, unsigned n, bool ok,
                        int automode) {
    printf("{\"file\": ");
    cli_json_cstr(stdout, path);
    printf(", \"via\": \"llama\", \"auto\": \"%s\", \"ok\": %s, \"cycles\": [", mode_name(automode),
           ok ? "true" : "false");
    for (unsigned i = 0; i < n; i++) {
        const llama_cycle *c = &cs[i];
        printf("%s{\"mode\": \"%s\", \"load_seconds\": %.6f, \"model_seconds\": %.6f, "
               "\"read_seconds\": %.6f, \"tensors\": %zu, \"in_place\": %zu, \"windowed\": "
               "%zu, \"repacked\": %zu, \"filled\": %zu, \"mapped\": %zu, \"bytes_read\": %" PRIu64
               ", \"bytes_mapped\": %" PRIu64 ", \"bytes_locked\": %" PRIu64
               ", \"lock_short\": %s, \"token\": %d, \"ledger_bytes\": %" PRIu64
               ", \"left_bytes\": %" PRIu64 ", \"maps_loaded\": %zu, \"maps_not_rs\": %zu, "
               "\"file_regions\": %zu, \"footprint_delta\": %" PRId64
               ", \"footprint_delta_trimmed\": %" PRId64 ", \"ok\": %s}",
               i ? ", " : "", mode_name(c->mode), c->load_seconds, c->stats.seconds_model,
               c->stats.seconds_read, c->stats.tensors, c->stats.in_place, c->stats.windowed,
               c->stats.repacked, c->stats.filled, c->stats.mapped, c->stats.bytes_read,
               c->stats.bytes_mapped, c->stats.bytes_locked, c->stats.lock_short ? "true" : "false",
               c->token, c->ledger_bytes, c->left_bytes, c->maps, c->maps_not_rs, c->file_regions,
               c->footprint, c->trimmed, cycle_ok(c) ? "true" : "false");
    }
    printf("]}\n");
}

static void report(const char *path, const llama_cycle *cs, unsigned cycles, bool ok, bool json,
                   int automode) {
    unsigned n = (unsigned)N_MODES * cycles;
    if (json) {
        report_json(path, cs, n, ok, automode);
        return;
    }
    char b[6][32];
    printf("%s: %zu tensors through llama.cpp's llama_model_init_from_user, in each load mode "
           "(AUTO is %s here), %u cycles each\n\n",
           path, cs[0].stats.tensors, mode_name(automode), cycles);
    printf("%-10s %5s %8s %10s %10s | %-20s | %9s %10s | %7s %5s | %11s %11s | %s\n", "mode",
           "cycle", "load s", "mapped", "read", "next token after BOS", "ledger", "after free",
           "regions", "after", "footprint", "trimmed", "verdict");
    for (unsigned i = 0; i < n; i++) {
        const llama_cycle *c = &cs[i];
        char tok[40], t[32];
        snprintf(tok, sizeof tok, "%d '%s'", c->token, c->piece);
        printf("%-10s %5u %8.4f %10s %10s | %-20s | %9s %10s | %7zu %5zu | %11s %11s | %s%s\n",
               mode_name(c->mode), i % cycles + 1, c->load_seconds,
               cli_bytes(c->stats.bytes_mapped, b[0]), cli_bytes(c->stats.bytes_read, b[1]), tok,
               cli_bytes(c->ledger_bytes, b[2]), cli_bytes(c->left_bytes, b[3]), c->maps,
               c->file_regions, sdelta(c->footprint, b[4]), sdelta(c->trimmed, t),
               cycle_ok(c) ? "ok" : "LEAK", c->stats.lock_short ? " (mlock short)" : "");
    }
    printf("\nregions: the file's mappings with the model loaded (r--s only in the mapped modes, "
           "whose mapping is the ledger's while loaded), and after llama_model_free");
    if (!CLI_LLAMA_JUDGE_FOOTPRINT)
        printf("\nfootprint not judged: AddressSanitizer's allocator keeps freed memory in its "
               "quarantine");
    else if (ok)
        printf("\nfootprint: after llama_model_free, then after malloc_trim(0): what malloc kept "
               "free of llama.cpp's own memory (the model's structures, the context's buffers) "
               "shows in the first");
    printf("\n%s\n", ok ? "all memory returned: weightmap held nothing once each load returned "
                          "but the mapped modes' mapping, and llama_model_free gave every byte back"
                        : "MEMORY NOT RETURNED: see the rows marked LEAK");
}

/* ggml's CPU backends (libggml-cpu-*.so) lie beside libllama: in the build tree the folder
 * scripts/llama.sh made, installed LIBDIR/weightmap/ (CMakeLists.txt installs them with the
 * bridge). Asked of the loader (the folder libllama was loaded from), so that an installed tree
 * that was moved still finds them. */
static void load_backends(void) {
    Dl_info info;
    char dir[4096];
    const char *slash;
    void (*fn)(void) = llama_backend_init;
    void *addr; /* a function's address as dladdr takes it (ISO C has no cast for that) */
    memcpy(&addr, &fn, sizeof addr);
    if (dladdr(addr, &info) && info.dli_fname && (slash = strrchr(info.dli_fname, '/')) &&
        (size_t)(slash - info.dli_fname) < sizeof dir) {
        memcpy(dir, info.dli_fname, (size_t)(slash - info.dli_fname));
        dir[slash - info.dli_fname] = 0;
        ggml_backend_load_all_from_path(dir);
    } else {
        ggml_backend_load_all();
    }
}

/* The cycles of one mode, after a warm-up cycle (llama.cpp's own one-time set-up). */
static int mode_cycles(const char *path, int mode, unsigned cycles, unsigned threads,
                       llama_cycle *cs, bool *ok, wm_error *err) {
    llama_cycle warm;
    if (one_cycle(path, mode, threads, footprint(), &warm, err)) return 1;
    uint64_t base = footprint();
    for (unsigned i = 0; i < cycles; i++) {
        if (one_cycle(path, mode, threads, base, &cs[i], err)) return 1;
        *ok = *ok && cycle_ok(&cs[i]);
    }
    return 0;
}

int cli_check_llama(const char *path, unsigned cycles, bool json, unsigned threads) {
    cli_llama_log_quiet();
    load_backends();
    llama_backend_init();
    llama_cycle *cs = calloc(N_MODES * cycles, sizeof *cs);
    if (!cs) return 1;
    wm_error err;
    bool ok = true;
    for (size_t k = 0; k < N_MODES; k++)
        if (mode_cycles(path, modes[k], cycles, threads, cs + k * cycles, &ok, &err)) {
            free(cs);
            return cli_fail(&err);
        }
    /* what AUTO resolves to: a load with llama.cpp's default params says it */
    llama_cycle a;
    if (one_cycle(path, LLAMA_LOAD_MODE_AUTO, threads, footprint(), &a, &err)) {
        free(cs);
        return cli_fail(&err);
    }
    report(path, cs, cycles, ok, json, a.stats.load_mode);
    free(cs);
    return ok ? 0 : 1;
}
