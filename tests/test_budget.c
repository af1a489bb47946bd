/*
 * test_budget.c: budgets (include/weightmap.h, "Budgets"): a load's cost against what the load
 * then did, by the ledger and by the kernel; what the system has; the pool under a budget (LRU
 * eviction proven by the ledger, models in use never evicted, refusals before any eviction, bad
 * input) and several threads on one pool (the TSan lane runs the label budget).
 *
 * Sections: the cost; what the system has; the pool; threads.
 */
#include "wmtest.h"

#include <dirent.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

/* ---- the cost ---- */

static const wm_mode modes[] = {WM_MODE_HEAP, WM_MODE_MMAP, WM_MODE_MMAP_PRIVATE};

/* The bound the prediction may be above the ledger's peak, per category (docs/ARCHITECTURE.md,
 * "Budgets"): the staging a load makes only when a read needs it (a direct read of a cold range:
 * WM_STAGE per thread with its 8 KiB of edges, the descriptors' table) and the job table's
 * doubling (one spare half); nothing else. Heap: the job table's spare half and the sort keys,
 * which the plan frees before the reader's tables exist (counted as if held together). */
#define STAGE_BYTES ((uint64_t)2 << 20)

static uint64_t slack(const wm_cost *c, wm_ledger_category cat, uint64_t n_tensors) {
    if (cat == WM_LEDGER_SCRATCH) return (uint64_t)c->threads * (STAGE_BYTES + 8192) + 4096;
    if (cat == WM_LEDGER_HEAP) return n_tensors * 24 + 16 + 64 * 1024;
    return 0;
}

/* Resident bytes of the regions that map `path`, and how many there are. */
static uint64_t file_rss(const char *path, size_t *n) {
    wm_file_region regs[8];
    *n = 0;
    CHECK_STATUS(wm_mem_file_regions(0, path, regs, 8, n, NULL), WM_OK);
    uint64_t rss = 0;
    for (size_t i = 0; i < *n && i < 8; i++)
        rss += regs[i].rss;
    return rss;
}

/* Loads f in mode m and holds the cost against the ledger (peaks and currents) and the kernel
 * (footprint, file regions). */
static void hold_cost(const char *path, wm_mode mode) {
    wm_file *f = OPEN_OK(path);
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = mode;
    o.threads = 2;
    wm_cost c = WM_COST_INIT;
    wm_error err;
    CHECK_STATUS(wm_model_cost(f, &o, &c, &err), WM_OK);
    wm_ledger before = WM_LEDGER_INIT, after = WM_LEDGER_INIT;
    wm_ledger_get(&before);
    wm_ledger_reset_peaks();
    wm_mem_figures k0, k1;
    CHECK_STATUS(wm_mem_figures_get(0, &k0, NULL), WM_OK);
    size_t nreg0;
    uint64_t rss0 = file_rss(path, &nreg0);
    wm_model *m;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_OK);
    wm_ledger_get(&after);
    CHECK_STATUS(wm_mem_figures_get(0, &k1, NULL), WM_OK);
    uint64_t n = wm_file_tensor_count(f);
    for (int cat = 0; cat < WM_LEDGER_COUNT; cat++) {
        uint64_t peak = after.cat[cat].peak - before.cat[cat].current;
        uint64_t now = after.cat[cat].current - before.cat[cat].current;
        CHECK_MSG(peak <= c.ledger_peak[cat] && c.ledger_peak[cat] - peak <= slack(&c, cat, n),
                  "%s, %s, %s: the ledger's peak rose by %llu, the cost said %llu (slack %llu)",
                  path, wm_mode_name(mode), wm_ledger_category_name(cat), (unsigned long long)peak,
                  (unsigned long long)c.ledger_peak[cat], (unsigned long long)slack(&c, cat, n));
        CHECK_MSG(now == c.ledger_loaded[cat],
                  "%s, %s, %s: the model holds %llu by the ledger, the cost said %llu", path,
                  wm_mode_name(mode), wm_ledger_category_name(cat), (unsigned long long)now,
                  (unsigned long long)c.ledger_loaded[cat]);
    }
    /* The kernel: the footprint (private memory) rose by at most the anonymous bytes the model
     * holds, pages rounded up (one 2 MiB huge page per region at most, the plan's tables in
     * malloc's heap up to a page each), and a shared mapping's resident pages are within it. */
    wm_model_stats ms = WM_MODEL_STATS_INIT;
    wm_model_stats_get(m, &ms);
    uint64_t rounding = (uint64_t)(ms.buffers + 8) * (2u << 20);
    int64_t grew = (int64_t)k1.footprint - (int64_t)k0.footprint;
    CHECK_MSG(grew <= (int64_t)(c.loaded.anonymous + rounding),
              "%s, %s: the footprint grew %lld bytes, the cost said %llu anonymous (+%llu)", path,
              wm_mode_name(mode), (long long)grew, (unsigned long long)c.loaded.anonymous,
              (unsigned long long)rounding);
    size_t nreg = 0;
    uint64_t rss = file_rss(path, &nreg) - rss0; /* the file's header mapping is the file's */
    CHECK_MSG(rss <= c.loaded.file_shared + c.loaded.file_private,
              "%s, %s: the file's regions hold %llu bytes more, the cost said %llu", path,
              wm_mode_name(mode), (unsigned long long)rss,
              (unsigned long long)(c.loaded.file_shared + c.loaded.file_private));
    CHECK(c.host_loaded == c.loaded.anonymous + c.loaded.file_shared + c.loaded.file_private);
    wm_model_release(m);
    wm_file_close(f);
}

/* Every fixture (gguf/, safetensors/), every mode. */
WM_TEST(cost_holds_against_ledger_and_kernel_every_fixture_every_mode) {
    const char *dirs[] = {"gguf", "safetensors"};
    int files = 0;
    for (int d = 0; d < 2; d++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", wmt_fixture(dirs[d]));
        DIR *dp = opendir(dir);
        CHECK(dp != NULL);
        struct dirent *de;
        while ((de = readdir(dp))) {
            if (de->d_name[0] == '.') continue;
            char path[8192];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++)
                hold_cost(path, modes[k]);
            files++;
        }
        closedir(dp);
    }
    CHECK(files >= 30);
}
