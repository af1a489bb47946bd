/*
 * test_llama_pool.c: llama models in a wm_pool (include/weightmap_llama.h, "Models under a
 * budget") against the stock prebuilt llama.cpp v0.4.0: models rotated through a pool whose
 * budget holds one or two of them decode the same greedy tokens as a plain wm_llama_load's, every
 * eviction is proven (the pool's unproven count stays 0, which the test checks by the same
 * counts: the bridge's own buffers alive, the ledger), and after the pool closes the ledger, the
 * bridge's own buffers and the process's mappings of the files are as before; the cost of each
 * load holds against what the load then held; bad input (a budget below a model, a model put
 * back twice, a close with a model in use, a file that cannot be loaded) is named and holds
 * nothing; a GPU case (skipped without one) proves evictions by the device's free memory.
 */
#include "weightmap_llama.h"
#include "wmtest.h"

#include <ggml-backend.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* The bridge's count of its own buffers alive (bridge/llama_own.c): what the pool proves by. */
uint64_t wm__llama_own_bytes(void);

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)level, (void)text, (void)user;
}

static void setup(void) {
    static bool done;
    if (done) return;
    done = true;
    llama_log_set(quiet, NULL);
    ggml_backend_load_all_from_path(WM_LLAMA_LIBDIR);
    llama_backend_init();
}

static struct llama_model_params params_of(int load_mode) {
    struct llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = 0;
    p.load_mode = (enum llama_load_mode)load_mode;
    return p;
}

#define N_TOKENS 6
#define N_MODELS 3

/* Greedy tokens from BOS. */
static void greedy(struct llama_model *m, llama_token *out) {
    const struct llama_vocab *v = llama_model_get_vocab(m);
    int n_vocab = llama_vocab_n_tokens(v);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 32;
    cp.n_batch = 32;
    cp.n_threads = cp.n_threads_batch = 1;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    CHECK(ctx != NULL);
    llama_token tok = llama_vocab_bos(v);
    for (int i = 0; i < N_TOKENS; i++) {
        struct llama_batch b = llama_batch_get_one(&tok, 1);
        CHECK_EQ(llama_decode(ctx, b), 0);
        const float *lg = llama_get_logits_ith(ctx, -1);
        int best = 0;
        for (int k = 1; k < n_vocab; k++)
            if (lg[k] > lg[best]) best = k;
        out[i] = tok = best;
    }
    llama_free(ctx);
}

/* Three make-model files of different sizes and seeds (the fixture, stories260K, is too small
 * beside them for a budget of two to hold two and never three: it is the bad-input case's). */
static void models(char paths[N_MODELS][512]) {
    snprintf(paths[0], 512, "%s", wmt_make_model("a.gguf", "--size 8M --seed 1"));
    snprintf(paths[1], 512, "%s", wmt_make_model("b.gguf", "--size 12M --seed 2"));
    snprintf(paths[2], 512, "%s", wmt_make_model("c.gguf", "--size 10M --seed 3"));
}

/* The tokens of a plain wm_llama_load of each, and its cost. */
static void references(char paths[N_MODELS][512], int mode, llama_token tokens[][N_TOKENS],
                       wm_cost *costs) {
    struct llama_model_params p = params_of(mode);
    for (int i = 0; i < N_MODELS; i++) {
        struct llama_model *m = NULL;
        wm_error err;
        CHECK_MSG(wm_llama_load(paths[i], &p, NULL, &m, &err) == WM_OK, "%s", err.msg);
        greedy(m, tokens[i]);
        llama_model_free(m);
        costs[i] = (wm_cost)WM_COST_INIT;
        CHECK_MSG(wm_llama_cost(paths[i], &p, NULL, &costs[i], &err) == WM_OK, "%s", err.msg);
    }
}

static bool maps(int mode) {
    return mode == LLAMA_LOAD_MODE_MMAP || mode == LLAMA_LOAD_MODE_MMAP_MLOCK;
}

/* 20 cycles of the three models through a pool of `budget`: each get's tokens as the reference's,
 * every eviction proven, the held bytes never above the budget, a mapped mode's file mapped
 * (shared, read-only) while resident and not after its eviction; after close nothing held. */
static void rotate(int mode, bool two) {
    setup();
    char paths[N_MODELS][512];
    models(paths);
    llama_token want[N_MODELS][N_TOKENS];
    wm_cost c[N_MODELS];
    references(paths, mode, want, c);
    uint64_t peak = 0, loaded = 0;
    for (int i = 0; i < N_MODELS; i++) {
        if (c[i].host_peak > peak) peak = c[i].host_peak;
        if (c[i].host_loaded > loaded) loaded = c[i].host_loaded;
    }
    uint64_t own0 = wm__llama_own_bytes();
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    po.budget = two ? peak + loaded : peak; /* holds two, or one at a time */
    wm_pool *pool;
    wm_error err;
    CHECK_STATUS(wm_pool_open(&po, &pool, &err), WM_OK);
    struct llama_model_params p = params_of(mode);
    for (int cyc = 0; cyc < 20; cyc++)
        for (int i = 0; i < N_MODELS; i++) {
            struct llama_model *m = NULL;
            CHECK_MSG(wm_llama_pool_get(pool, paths[i], &p, NULL, &m, &err) == WM_OK,
                      "cycle %d, %s: %s", cyc, paths[i], err.msg);
            llama_token got[N_TOKENS];
            greedy(m, got);
            for (int t = 0; t < N_TOKENS; t++)
                CHECK_MSG(got[t] == want[i][t], "cycle %d, %s: token %d is %d, not %d", cyc,
                          paths[i], t, got[t], want[i][t]);
            int not_ro = 0;
            CHECK_EQ(wmt_count_file_maps_of(paths[i], &not_ro) >= 1, maps(mode));
            CHECK_EQ(not_ro, 0);
            wm_pool_stats s = WM_POOL_STATS_INIT;
            wm_pool_stats_get(pool, &s);
            CHECK(s.resident <= (two ? 2u : 1u));
            CHECK_STATUS(wm_llama_pool_put(pool, m, &err), WM_OK);
            wm_pool_stats_get(pool, &s);
            CHECK_EQ(s.unproven, 0);
            CHECK_MSG(s.held_peak <= po.budget, "held %llu of a budget of %llu",
                      (unsigned long long)s.held_peak, (unsigned long long)po.budget);
            for (int j = 0; maps(mode) && j < N_MODELS && s.resident == 1; j++)
                CHECK_EQ(wmt_count_file_maps(paths[j]) >= 1, j == i);
        }
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(pool, &s);
    CHECK_EQ(s.loads, s.evictions + s.resident);
    /* three models in turn, room for two (one): every get but the first two (one) evicts */
    CHECK_EQ(s.evictions, two ? 58 : 59);
    CHECK(s.returned > 0);
    fprintf(stderr, "budget %llu: %llu loads, %llu evictions returned %llu bytes, %llu hits\n",
            (unsigned long long)po.budget, (unsigned long long)s.loads,
            (unsigned long long)s.evictions, (unsigned long long)s.returned,
            (unsigned long long)s.hits);
    CHECK_STATUS(wm_pool_close(pool, &err), WM_OK);
    CHECK_LEDGER_EMPTY();
    CHECK_EQ(wm__llama_own_bytes(), own0);
    for (int i = 0; i < N_MODELS; i++)
        CHECK_EQ(wmt_count_file_maps_of(paths[i], NULL), 0);
}

WM_TEST(rotate_none_budget_of_one) { rotate(LLAMA_LOAD_MODE_NONE, false); }
WM_TEST(rotate_none_budget_of_two) { rotate(LLAMA_LOAD_MODE_NONE, true); }
WM_TEST(rotate_mmap_budget_of_one) { rotate(LLAMA_LOAD_MODE_MMAP, false); }

/* The cost holds against what the load then held: the bridge's own buffers and the ledger (the
 * mapping) within host_loaded; the mapping exactly the cost's file_shared; in every mode. */
WM_TEST(cost_holds_against_the_load) {
    setup();
    char paths[N_MODELS][512];
    models(paths);
    static const int all[] = {LLAMA_LOAD_MODE_NONE, LLAMA_LOAD_MODE_MMAP, LLAMA_LOAD_MODE_MLOCK,
                              LLAMA_LOAD_MODE_MMAP_MLOCK, LLAMA_LOAD_MODE_DIRECT_IO};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++)
        for (int i = 0; i < N_MODELS; i++) {
            struct llama_model_params p = params_of(all[k]);
            wm_cost c = WM_COST_INIT;
            wm_error err;
            CHECK_MSG(wm_llama_cost(paths[i], &p, NULL, &c, &err) == WM_OK, "%s", err.msg);
            CHECK_LEDGER_EMPTY();
            uint64_t own0 = wm__llama_own_bytes();
            struct llama_model *m = NULL;
            CHECK_MSG(wm_llama_load(paths[i], &p, NULL, &m, &err) == WM_OK, "%s", err.msg);
            wm_ledger l = WM_LEDGER_INIT;
            wm_ledger_get(&l);
            uint64_t own = wm__llama_own_bytes() - own0;
            uint64_t mapped = l.cat[WM_LEDGER_MAP_SHARED].current;
            fprintf(stderr, "mode %d %s: own %llu + mapped %llu, cost loaded %llu peak %llu\n",
                    all[k], paths[i], (unsigned long long)own, (unsigned long long)mapped,
                    (unsigned long long)c.host_loaded, (unsigned long long)c.host_peak);
            CHECK(maps(all[k]) || own > 0);
            CHECK_EQ(mapped, c.loaded.file_shared);
            CHECK_EQ(mapped > 0, maps(all[k]));
            CHECK(own + mapped <= c.host_loaded);
            CHECK(c.host_loaded <= c.host_peak);
            CHECK_EQ(c.loaded.locked > 0,
                     all[k] == LLAMA_LOAD_MODE_MLOCK || all[k] == LLAMA_LOAD_MODE_MMAP_MLOCK);
            llama_model_free(m);
            CHECK_EQ(wm__llama_own_bytes(), own0);
            CHECK_LEDGER_EMPTY();
        }
}

/* The same path with other parameters (another load mode) is another model, beside the first. */
WM_TEST(same_path_other_mode_is_another_model) {
    setup();
    const char *path = wmt_fixture("gguf/stories260K-q8_0.gguf");
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    wm_pool *pool;
    wm_error err;
    CHECK_STATUS(wm_pool_open(&po, &pool, &err), WM_OK);
    struct llama_model_params a = params_of(LLAMA_LOAD_MODE_NONE),
                              b = params_of(LLAMA_LOAD_MODE_MMAP);
    struct llama_model *ma, *mb, *ma2;
    CHECK_STATUS(wm_llama_pool_get(pool, path, &a, NULL, &ma, &err), WM_OK);
    CHECK_STATUS(wm_llama_pool_get(pool, path, &b, NULL, &mb, &err), WM_OK);
    CHECK_STATUS(wm_llama_pool_get(pool, path, &a, NULL, &ma2, &err), WM_OK);
    CHECK(ma != mb);
    CHECK(ma == ma2);
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(pool, &s);
    CHECK_EQ(s.resident, 2);
    CHECK_EQ(s.hits, 1);
    CHECK_STATUS(wm_llama_pool_put(pool, ma, &err), WM_OK);
    CHECK_STATUS(wm_llama_pool_put(pool, ma2, &err), WM_OK);
    CHECK_STATUS(wm_llama_pool_put(pool, mb, &err), WM_OK);
    CHECK_STATUS(wm_pool_close(pool, &err), WM_OK);
    CHECK_LEDGER_EMPTY();
    CHECK_EQ(wmt_count_file_maps(path), 0);
}

/* Bad input: each named, nothing held, nothing evicted that was not to be. */
WM_TEST(bad_input_is_named_and_holds_nothing) {
    setup();
    char paths[N_MODELS][512];
    models(paths);
    snprintf(paths[2], 512, "%s", wmt_fixture("gguf/stories260K-q8_0.gguf"));
    struct llama_model_params p = params_of(LLAMA_LOAD_MODE_NONE);
    wm_cost c = WM_COST_INIT;
    wm_error err;
    CHECK_STATUS(wm_llama_cost(paths[1], &p, NULL, &c, &err), WM_OK); /* the largest */
    uint64_t own0 = wm__llama_own_bytes();
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    po.budget = c.host_peak - 1;
    wm_pool *pool;
    CHECK_STATUS(wm_pool_open(&po, &pool, &err), WM_OK);
    struct llama_model *m = (struct llama_model *)(uintptr_t)1, *small;
    /* a budget below the model: refused, named, before anything is evicted */
    CHECK_STATUS(wm_llama_pool_get(pool, paths[2], &p, NULL, &small, &err), WM_OK);
    CHECK_STATUS(wm_llama_pool_put(pool, small, &err), WM_OK);
    CHECK_STATUS(wm_llama_pool_get(pool, paths[1], &p, NULL, &m, &err), WM_ENOMEM);
    CHECK(m == NULL);
    CHECK_MSG_HAS(err, "b.gguf");
    CHECK_MSG_HAS(err, "budget");
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(pool, &s);
    CHECK_EQ(s.resident, 1);
    CHECK_EQ(s.evictions, 0);
    /* a file that cannot be loaded: named, nothing evicted, nothing held */
    const char *cut = wmt_tmp("cut.gguf");
    size_t len;
    void *bytes = wmt_read_file(paths[2], &len);
    wmt_write_file(cut, bytes, len / 2);
    free(bytes);
    m = (struct llama_model *)(uintptr_t)1;
    CHECK_STATUS(wm_llama_pool_get(pool, cut, &p, NULL, &m, &err), WM_EFORMAT);
    CHECK(m == NULL);
    CHECK_MSG_HAS(err, "cut.gguf");
    wm_pool_stats_get(pool, &s);
    CHECK_EQ(s.resident, 1);
    CHECK_EQ(s.evictions, 0);
    CHECK_EQ(wmt_count_file_maps(cut), 0);
    /* a model put back twice */
    CHECK_STATUS(wm_llama_pool_get(pool, paths[2], &p, NULL, &small, &err), WM_OK);
    CHECK_STATUS(wm_llama_pool_put(pool, small, &err), WM_OK);
    CHECK_STATUS(wm_llama_pool_put(pool, small, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "put back twice");
    CHECK_MSG_HAS(err, "stories260K-q8_0.gguf");
    /* a model not the pool's */
    struct llama_model *own = NULL;
    CHECK_STATUS(wm_llama_load(paths[0], &p, NULL, &own, &err), WM_OK);
    CHECK_STATUS(wm_llama_pool_put(pool, own, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "not this pool's");
    llama_model_free(own);
    /* a close with a model in use: refused, the pool whole; then put back and closed */
    CHECK_STATUS(wm_llama_pool_get(pool, paths[2], &p, NULL, &small, &err), WM_OK);
    CHECK_STATUS(wm_pool_close(pool, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "in use");
    CHECK_MSG_HAS(err, "stories260K-q8_0.gguf");
    llama_token t[N_TOKENS];
    greedy(small, t); /* still the pool's, still whole */
    CHECK_STATUS(wm_llama_pool_put(pool, small, &err), WM_OK);
    CHECK_STATUS(wm_pool_close(pool, &err), WM_OK);
    CHECK_LEDGER_EMPTY();
    CHECK_EQ(wm__llama_own_bytes(), own0);
    for (int i = 0; i < N_MODELS; i++)
        CHECK_EQ(wmt_count_file_maps(paths[i]), 0);
}

/* A file that changes between gets: named (WM_EFORMAT), its idle model freed at once (proven, as
 * an eviction), and the next get loads the file as it is now, with its tokens. */
WM_TEST(file_changed_between_gets_is_named_and_released) {
    setup();
    const char *path = wmt_tmp("m.gguf");
    wmt_copy_file(wmt_make_model("a.gguf", "--size 8M --seed 1"), path);
    const char *other = wmt_make_model("b.gguf", "--size 12M --seed 2");
    struct llama_model_params p = params_of(LLAMA_LOAD_MODE_NONE);
    llama_token want[N_TOKENS], got[N_TOKENS];
    struct llama_model *m = NULL;
    wm_error err;
    CHECK_STATUS(wm_llama_load(other, &p, NULL, &m, &err), WM_OK);
    greedy(m, want);
    llama_model_free(m);
    uint64_t own0 = wm__llama_own_bytes();
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    wm_pool *pool;
    CHECK_STATUS(wm_pool_open(&po, &pool, &err), WM_OK);
    CHECK_STATUS(wm_llama_pool_get(pool, path, &p, NULL, &m, &err), WM_OK);
    CHECK_STATUS(wm_llama_pool_put(pool, m, &err), WM_OK);
    wmt_copy_file(other, wmt_tmp("m.gguf.new"));
    CHECK(rename(wmt_tmp("m.gguf.new"), path) == 0);
    m = (struct llama_model *)(uintptr_t)1;
    CHECK_STATUS(wm_llama_pool_get(pool, path, &p, NULL, &m, &err), WM_EFORMAT);
    CHECK(m == NULL);
    CHECK_MSG_HAS(err, "m.gguf: the file changed");
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(pool, &s);
    CHECK_EQ(s.resident, 0);
    CHECK_EQ(s.evictions, 1);
    CHECK_EQ(s.unproven, 0);
    CHECK_EQ(wm__llama_own_bytes(), own0);
    CHECK_STATUS(wm_llama_pool_get(pool, path, &p, NULL, &m, &err), WM_OK);
    greedy(m, got);
    for (int t = 0; t < N_TOKENS; t++)
        CHECK_EQ(got[t], want[t]);
    CHECK_STATUS(wm_llama_pool_put(pool, m, &err), WM_OK);
    CHECK_STATUS(wm_pool_close(pool, &err), WM_OK);
    CHECK_LEDGER_EMPTY();
    CHECK_EQ(wmt_count_file_maps(path), 0);
}

/* swap --llama: the verdict on three models through a budget of about two (in NONE and MMAP), and
 * a budget below a file refused at once, naming it, before anything is loaded. */
WM_TEST(cli_swap_llama_verdict_and_a_budget_below_refused) {
    setup();
    char paths[N_MODELS][512];
    models(paths);
    static const char *const modes[] = {"none", "mmap"};
    static const int mode_of[] = {LLAMA_LOAD_MODE_NONE, LLAMA_LOAD_MODE_MMAP};
    for (int k = 0; k < 2; k++) {
        uint64_t peak = 0, loaded = 0;
        for (int i = 0; i < N_MODELS; i++) {
            struct llama_model_params p = params_of(mode_of[k]);
            wm_cost c = WM_COST_INIT;
            CHECK_STATUS(wm_llama_cost(paths[i], &p, NULL, &c, NULL), WM_OK);
            if (c.host_peak > peak) peak = c.host_peak;
            if (c.host_loaded > loaded) loaded = c.host_loaded;
        }
        char args[2048], out[16384];
        snprintf(args, sizeof args, "swap --llama %s %s %s --cycles 3 --budget %llu --mode %s",
                 paths[0], paths[1], paths[2], (unsigned long long)(peak + loaded),
                 modes[k]); /* room for two */
        int rc = wmt_cli(args, out, sizeof out);
        CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
        CHECK_MSG(strstr(out, "verdict: within budget, every byte returned") &&
                      strstr(out, "own buffers and the ledger: yes") &&
                      strstr(out, "0 regions of the files: as before"),
                  "%s", out);
    }
    char args[2048], out[4096];
    snprintf(args, sizeof args, "swap --llama %s %s --budget 4M", paths[0], paths[1]);
    CHECK_EQ(wmt_cli(args, out, sizeof out), 1);
    CHECK_MSG(strstr(out, "a.gguf: the budget 4.0 MiB is below what this file needs") &&
                  strstr(out, "nothing was loaded") && !strstr(out, "cycle"),
              "%s", out);
}

/* ---- threads: two share one pool (the pool's lock serialises gets, loads and evictions) ---- */

typedef struct shared {
    wm_pool *pool;
    char (*paths)[512];
    llama_token (*want)[N_TOKENS];
    int first;
} shared;

static void *worker(void *arg) {
    shared *sh = arg;
    struct llama_model_params p = params_of(LLAMA_LOAD_MODE_NONE);
    for (int k = 0; k < 10; k++) {
        int i = (sh->first + k) % N_MODELS;
        struct llama_model *m = NULL;
        wm_error err;
        CHECK_MSG(wm_llama_pool_get(sh->pool, sh->paths[i], &p, NULL, &m, &err) == WM_OK, "%s",
                  err.msg);
        llama_token got[N_TOKENS];
        greedy(m, got);
        for (int t = 0; t < N_TOKENS; t++)
            CHECK_EQ(got[t], sh->want[i][t]);
        CHECK_STATUS(wm_llama_pool_put(sh->pool, m, &err), WM_OK);
    }
    return NULL;
}

WM_TEST(threads_share_one_pool) {
    setup();
    char paths[N_MODELS][512];
    models(paths);
    llama_token want[N_MODELS][N_TOKENS];
    wm_cost c[N_MODELS];
    references(paths, LLAMA_LOAD_MODE_NONE, want, c);
    uint64_t peak = 0, loaded = 0;
    for (int i = 0; i < N_MODELS; i++) {
        if (c[i].host_peak > peak) peak = c[i].host_peak;
        if (c[i].host_loaded > loaded) loaded = c[i].host_loaded;
    }
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    po.budget = peak + loaded; /* one in use beside one loading: never a refusal */
    shared sh[2] = {{.paths = paths, .want = want, .first = 0},
                    {.paths = paths, .want = want, .first = 1}};
    wm_error err;
    CHECK_STATUS(wm_pool_open(&po, &sh[0].pool, &err), WM_OK);
    sh[1].pool = sh[0].pool;
    pthread_t th[2];
    for (int t = 0; t < 2; t++)
        CHECK(pthread_create(&th[t], NULL, worker, &sh[t]) == 0);
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(sh[0].pool, &s);
    CHECK_EQ(s.in_use, 0);
    CHECK_EQ(s.unproven, 0);
    CHECK(s.evictions > 0);
    CHECK(s.held_peak <= po.budget);
    CHECK_STATUS(wm_pool_close(sh[0].pool, &err), WM_OK);
    CHECK_LEDGER_EMPTY();
    for (int i = 0; i < N_MODELS; i++)
        CHECK_EQ(wmt_count_file_maps(paths[i]), 0);
}

/* ---- a GPU (skipped without one): evictions proven by the device's free memory ---- */

WM_TEST(rotate_on_the_gpu) {
    setup();
    bool gpu = false;
    for (size_t i = 0; i < ggml_backend_dev_count(); i++)
        gpu |= ggml_backend_dev_type(ggml_backend_dev_get(i)) == GGML_BACKEND_DEVICE_TYPE_GPU;
    if (!gpu) WM_SKIP("no GPU device in ggml");
    wmt_gpu_lock(true); /* the device's free memory is this case's to measure */
    char paths[2][512];
    snprintf(paths[0], 512, "%s", wmt_make_model("ga.gguf", "--size 64M --seed 1"));
    snprintf(paths[1], 512, "%s", wmt_make_model("gb.gguf", "--size 64M --seed 2"));
    struct llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = -1;
    p.split_mode = LLAMA_SPLIT_MODE_NONE;
    p.main_gpu = 0;
    p.load_mode = LLAMA_LOAD_MODE_NONE;
    wm_cost c = WM_COST_INIT;
    wm_error err;
    CHECK_MSG(wm_llama_cost(paths[0], &p, NULL, &c, &err) == WM_OK, "%s", err.msg);
    CHECK(c.device_peak[0] > 0);
    /* The process's first load and decode on the device set up what stays for the process (the
     * runtimes' modules, ggml's compute pool and cuBLAS), which no eviction gives back: once
     * before the pool, as a runtime's first model would. */
    struct llama_model *w = NULL;
    CHECK_MSG(wm_llama_load(paths[0], &p, NULL, &w, &err) == WM_OK, "%s", err.msg);
    llama_token wt[N_TOKENS];
    greedy(w, wt);
    llama_model_free(w);
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    po.device_budget = c.device_peak[0] + c.device_peak[0] / 2; /* one model on the device */
    wm_pool *pool;
    CHECK_STATUS(wm_pool_open(&po, &pool, &err), WM_OK);
    for (int cyc = 0; cyc < 5; cyc++)
        for (int i = 0; i < 2; i++) {
            struct llama_model *m = NULL;
            CHECK_MSG(wm_llama_pool_get(pool, paths[i], &p, NULL, &m, &err) == WM_OK,
                      "cycle %d: %s", cyc, err.msg);
            llama_token t[N_TOKENS];
            greedy(m, t);
            CHECK_STATUS(wm_llama_pool_put(pool, m, &err), WM_OK);
        }
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(pool, &s);
    fprintf(stderr, "%llu evictions, %llu device bytes returned, %llu unproven\n",
            (unsigned long long)s.evictions, (unsigned long long)s.returned_device,
            (unsigned long long)s.unproven);
    CHECK_EQ(s.unproven, 0);
    CHECK(s.evictions >= 9);
    CHECK(s.returned_device >= 9 * (c.device_peak[0] / 2));
    CHECK_STATUS(wm_pool_close(pool, &err), WM_OK);
    CHECK_LEDGER_EMPTY();
}
