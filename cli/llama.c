/*
 * llama.c: `weightmap check FILE --llama`, the file loaded into llama.cpp through the llama.cpp
 * bridge (include/weightmap_llama.h): a first load and release that llama.cpp's own one-time
 * set-up may use, then each cycle loads with wm_llama_load, runs one decode step (BOS, the
 * likeliest next token), frees the context and the model, and measures: weightmap's ledger
 * (nothing may be held once the load returned), the file's mappings (none), and the process's
 * footprint after the release against the one before the cycles, twice: as llama_model_free
 * leaves it, and after malloc_trim(0). llama.cpp allocates its model's structures and its
 * context's buffers with malloc (and its weight buffers, where the bridge cannot give its own
 * pages: wm_llama_stats.bytes_own 0), and glibc keeps what they free (its mmap threshold rises
 * with the first large free), so the first figure shows those bytes still in the footprint after
 * every release; the second says
 * whether any of them is still in use (1 MiB of allocator fragmentation allowed: SLACK). The
 * verdict is on the ledger, the mappings and the second figure. Built only where the bridge is
 * (CMake defines WM_CLI_LLAMA then; cli.h's CLI_HAVE_LLAMA is 0 otherwise). llama.cpp's log is
 * silenced; WM_LLAMA_LOG=1 lets it through.
 */
#include "cli.h"
#include "weightmap_llama.h"

#include <dlfcn.h>
#include <ggml-backend.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

/* What the trimmed footprint may grow over the cycles: llama.cpp's own small blocks fragment
 * glibc's heap by a few KiB a cycle (measured the same with llama_model_load_from_file); a weight
 * buffer left behind is the model's size. */
#define SLACK ((int64_t)1 << 20)

/* Under AddressSanitizer freed memory sits in its quarantine, which malloc_trim cannot give
 * back: the footprint is not judged there (said in the output). */
#if defined(__SANITIZE_ADDRESS__)
#define JUDGE_FOOTPRINT 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define JUDGE_FOOTPRINT 0
#endif
#endif
#ifndef JUDGE_FOOTPRINT
#define JUDGE_FOOTPRINT 1
#endif

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)level, (void)text, (void)user;
}

typedef struct llama_cycle {
    double load_seconds;
    wm_llama_stats stats;
    int token;
    char piece[32];
    uint64_t ledger_bytes, ledger_regions; /* with the model loaded, and after its release */
    uint64_t left_bytes, left_regions;
    size_t file_regions; /* after the release */
    int64_t footprint;   /* after the release, from the footprint before the cycles */
    int64_t trimmed;     /* the same after malloc_trim(0) */
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

/* One decode step from BOS: the likeliest next token and its text. */
static int decode_one(struct llama_model *m, llama_cycle *c, wm_error *err) {
    const struct llama_vocab *v = llama_model_get_vocab(m);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 16;
    cp.n_batch = 16;
    cp.n_threads = cp.n_threads_batch = 1;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    llama_token tok = llama_vocab_bos(v);
    struct llama_batch b = llama_batch_get_one(&tok, 1);
    if (!ctx || llama_decode(ctx, b) != 0) {
        if (ctx) llama_free(ctx);
        err->code = WM_EDEVICE;
        snprintf(err->msg, sizeof err->msg, "llama.cpp could not decode a token with the model");
        return 1;
    }
    const float *lg = llama_get_logits_ith(ctx, -1);
    int n = llama_vocab_n_tokens(v), best = 0;
    for (int k = 1; k < n; k++)
        if (lg[k] > lg[best]) best = k;
    c->token = best;
    int len = llama_token_to_piece(v, best, c->piece, (int32_t)sizeof c->piece - 1, 0, true);
    c->piece[len > 0 ? len : 0] = 0;
    llama_free(ctx);
    return 0;
}

static int one_cycle(const char *path, unsigned threads, uint64_t base, llama_cycle *c,
                     wm_error *err) {
    struct llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = 0;
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

static bool cycle_ok(const llama_cycle *c) {
    return c->ledger_bytes == 0 && c->ledger_regions == 0 && c->left_bytes == 0 &&
           c->left_regions == 0 && c->file_regions == 0 &&
           (!JUDGE_FOOTPRINT || c->trimmed <= SLACK);
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

static void report(const char *path, const llama_cycle *cs, unsigned cycles, bool ok, bool json) {
    char b[4][32];
    if (json) {
        printf("{\"file\": ");
        cli_json_cstr(stdout, path);
        printf(", \"via\": \"llama\", \"ok\": %s, \"cycles\": [", ok ? "true" : "false");
        for (unsigned i = 0; i < cycles; i++) {
            const llama_cycle *c = &cs[i];
            printf("%s{\"load_seconds\": %.6f, \"model_seconds\": %.6f, \"read_seconds\": %.6f, "
                   "\"tensors\": %zu, \"in_place\": %zu, \"windowed\": "
                   "%zu, \"repacked\": %zu, \"filled\": %zu, \"bytes_read\": %" PRIu64
                   ", \"token\": %d, \"ledger_bytes\": %" PRIu64 ", \"left_bytes\": %" PRIu64
                   ", \"file_regions\": %zu, \"footprint_delta\": %" PRId64
                   ", \"footprint_delta_trimmed\": %" PRId64 ", \"ok\": %s}",
                   i ? ", " : "", c->load_seconds, c->stats.seconds_model, c->stats.seconds_read,
                   c->stats.tensors, c->stats.in_place, c->stats.windowed, c->stats.repacked,
                   c->stats.filled, c->stats.bytes_read, c->token, c->ledger_bytes, c->left_bytes,
                   c->file_regions, c->footprint, c->trimmed, cycle_ok(c) ? "true" : "false");
        }
        printf("]}\n");
        return;
    }
    printf("%s: %zu tensors through llama.cpp's llama_model_init_from_user (%zu in place, %zu "
           "windowed, %zu repacked, %zu filled), %s read, %u cycles\n\n",
           path, cs[0].stats.tensors, cs[0].stats.in_place, cs[0].stats.windowed,
           cs[0].stats.repacked, cs[0].stats.filled, cli_bytes(cs[0].stats.bytes_read, b[0]),
           cycles);
    printf("%-5s %8s %8s %8s | %-20s | %9s %10s %7s | %11s %11s | %s\n", "cycle", "load s",
           "read s", "GB/s", "next token after BOS", "ledger", "after free", "regions", "footprint",
           "trimmed", "verdict");
    for (unsigned i = 0; i < cycles; i++) {
        const llama_cycle *c = &cs[i];
        char tok[40];
        snprintf(tok, sizeof tok, "%d '%s'", c->token, c->piece);
        char t[32];
        printf("%-5u %8.4f %8.4f %8.2f | %-20s | %9s %10s %7zu | %11s %11s | %s\n", i + 1,
               c->load_seconds, c->stats.seconds_read,
               c->load_seconds > 0 ? (double)c->stats.bytes_read / c->load_seconds / 1e9 : 0.0, tok,
               cli_bytes(c->ledger_bytes, b[1]), cli_bytes(c->left_bytes, b[2]), c->file_regions,
               sdelta(c->footprint, b[3]), sdelta(c->trimmed, t), cycle_ok(c) ? "ok" : "LEAK");
    }
    if (!JUDGE_FOOTPRINT)
        printf("\nfootprint not judged: AddressSanitizer's allocator keeps freed memory in its "
               "quarantine");
    else if (ok && cs[cycles - 1].footprint > SLACK && cs[cycles - 1].stats.bytes_own)
        printf("\nthe weight buffers were the bridge's own pages (%s), unmapped by "
               "llama_model_free; llama.cpp's own malloc memory (the model's structures, the "
               "context's buffers): malloc kept %s of it as free memory (glibc; malloc_trim(0) "
               "gave it back)",
               cli_bytes(cs[cycles - 1].stats.bytes_own, b[1]),
               sdelta(cs[cycles - 1].footprint, b[0]));
    else if (ok && cs[cycles - 1].footprint > SLACK)
        printf(
            "\nllama.cpp's weight buffers are malloc's: after llama_model_free, malloc kept %s of "
            "them as free memory (glibc; malloc_trim(0) gave it back)",
            sdelta(cs[cycles - 1].footprint, b[0]));
    printf("\n%s\n", ok ? "all memory returned: weightmap held nothing once each load returned, "
                          "and llama_model_free gave every byte back"
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

int cli_check_llama(const char *path, unsigned cycles, bool json, unsigned threads) {
    const char *log = getenv("WM_LLAMA_LOG");
    if (!log || strcmp(log, "1") != 0) llama_log_set(quiet, NULL);
    load_backends();
    llama_backend_init();
    llama_cycle *cs = calloc(cycles + 1, sizeof *cs);
    if (!cs) return 1;
    wm_error err;
    /* the warm-up cycle: llama.cpp's own one-time set-up (backends, thread pools) */
    if (one_cycle(path, threads, footprint(), &cs[cycles], &err)) {
        free(cs);
        return cli_fail(&err);
    }
    uint64_t base = footprint();
    bool ok = true;
    for (unsigned i = 0; i < cycles; i++) {
        if (one_cycle(path, threads, base, &cs[i], &err)) {
            free(cs);
            return cli_fail(&err);
        }
        ok = ok && cycle_ok(&cs[i]);
    }
    report(path, cs, cycles, ok, json);
    free(cs);
    return ok ? 0 : 1;
}
