/*
 * test_budget.c: budgets (include/weightmap.h, "Budgets"): a load's cost against what the load
 * then did, by the ledger and by the kernel; what the system has; the pool under a budget (LRU
 * eviction proven by the ledger, models in use never evicted, refusals before any eviction, bad
 * input) and several threads on one pool (the TSan lane runs the label budget).
 *
 * Sections: the cost; what the system has; the pool; threads.
 */
#include "backend/backend.h" /* wm__model_swap_extra */
#include "os/fault.h"        /* wm__fault_cgroup_files */
#include "wmtest.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#ifdef WM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

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
    /* The host categories together, at their peak: within what the pool is charged. */
    uint64_t host_peak = after.host.peak - before.host.current;
    CHECK_MSG(host_peak <= c.host_peak, "%s, %s: the ledger's host peak rose by %llu, cost %llu",
              path, wm_mode_name(mode), (unsigned long long)host_peak,
              (unsigned long long)c.host_peak);
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

/* A load of f by o beside its cost: the cost, the ledger before the load and after it (its
 * peaks reset between), and the model. */
static wm_model *costed_load(wm_file *f, const wm_load_options *o, wm_cost *c, wm_ledger *before,
                             wm_ledger *after) {
    wm_error err;
    CHECK_STATUS(wm_model_cost(f, o, c, &err), WM_OK);
    wm_ledger_get(before);
    wm_ledger_reset_peaks();
    wm_model *m;
    CHECK_STATUS(wm_model_load(f, o, &m, &err), WM_OK);
    wm_ledger_get(after);
    return m;
}

/* Every category's peak rise within the cost. */
static void peaks_within(const wm_cost *c, const wm_ledger *before, const wm_ledger *after) {
    for (int cat = 0; cat < WM_LEDGER_COUNT; cat++) {
        uint64_t peak = after->cat[cat].peak - before->cat[cat].current;
        CHECK_MSG(peak <= c->ledger_peak[cat], "%s: the ledger's peak rose by %llu, cost %llu",
                  wm_ledger_category_name(cat), (unsigned long long)peak,
                  (unsigned long long)c->ledger_peak[cat]);
    }
}

/* A cold file read with direct I/O: the staging the reader makes then (2 MiB a thread, its edge
 * blocks) is within the cost, which counted it whether the file is warm or not. */
WM_TEST(cost_holds_for_a_cold_heap_load_with_direct_reads) {
    const uint64_t sizes[] = {3u << 20, 5000, 1u << 20, 777777};
    const char *path = wmt_write_u8_tensors("cold.safetensors", sizes, 4);
    wmt_make_cold(path, 0, 0);
    wm_file *f = OPEN_OK(path);
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = WM_MODE_HEAP;
    o.threads = 2;
    o.direct_io = WM_DIRECT_ON;
    wm_cost c = WM_COST_INIT;
    wm_ledger before = WM_LEDGER_INIT, after = WM_LEDGER_INIT;
    wm_model *m = costed_load(f, &o, &c, &before, &after);
    wm_model_stats ms = WM_MODEL_STATS_INIT;
    wm_model_stats_get(m, &ms);
    CHECK(ms.read_direct > 0);
    peaks_within(&c, &before, &after);
    CHECK(after.host.peak - before.host.current <= c.host_peak);
    /* here the staging was made: the scratch prediction is close, not only above */
    uint64_t scratch = after.cat[WM_LEDGER_SCRATCH].peak - before.cat[WM_LEDGER_SCRATCH].current;
    CHECK(c.ledger_peak[WM_LEDGER_SCRATCH] - scratch <= (2u << 20) + 8192 + 4096);
    wm_model_release(m);
    wm_file_close(f);
}

/* A converting heap load (f16 to f32): the conversion buffers, one a thread, within the cost. */
WM_TEST(cost_holds_for_a_converting_load) {
    wm_file *f = OPEN_OK(wmt_fixture("gguf/stories260K-f16.gguf"));
    wm_convert_rule rule = {NULL, WM_TYPE_F16, WM_TYPE_F32};
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = WM_MODE_HEAP;
    o.threads = 2;
    o.convert = &rule;
    o.n_convert = 1;
    o.direct_io = WM_DIRECT_OFF; /* no direct-I/O staging: the scratch is the conversion's */
    wm_cost c = WM_COST_INIT;
    wm_ledger before = WM_LEDGER_INIT, after = WM_LEDGER_INIT;
    wm_model *m = costed_load(f, &o, &c, &before, &after);
    wm_model_stats ms = WM_MODEL_STATS_INIT;
    wm_model_stats_get(m, &ms);
    CHECK(ms.tensor_bytes > wm_file_tensor_bytes(f)); /* converted: wider */
    peaks_within(&c, &before, &after);
    for (int cat = 0; cat < WM_LEDGER_COUNT; cat++)
        CHECK_EQ(after.cat[cat].current - before.cat[cat].current, c.ledger_loaded[cat]);
    CHECK_EQ(c.loaded.anonymous - c.ledger_loaded[WM_LEDGER_SCRATCH] >= ms.tensor_bytes, 1);
    /* the stacks and conversion buffers made are the ones counted: at most one thread's
     * buffer (256 KiB at most) fewer, where a thread finished before another made its own */
    uint64_t scratch = after.cat[WM_LEDGER_SCRATCH].peak - before.cat[WM_LEDGER_SCRATCH].current;
    CHECK(c.ledger_peak[WM_LEDGER_SCRATCH] - scratch <= (uint64_t)(c.threads - 1) * (256u << 10));
    wm_model_release(m);
    wm_file_close(f);
}

/* The CUDA backend's cost (the staged path: the ring, pinned while registered, the device
 * buffers) against the ledger; the cuda-mock lane runs it against tests/cuda_mock.c. */
/* One CUDA load held against its cost: every category's peak within it, the device bytes
 * exact. */
static void hold_cuda_cost(wm_file *f, const wm_load_options *o) {
    wm_cost c = WM_COST_INIT;
    wm_ledger before = WM_LEDGER_INIT, after = WM_LEDGER_INIT;
    wm_model *m = costed_load(f, o, &c, &before, &after);
    CHECK_EQ(c.device_peak[0], c.peak.device);
    CHECK(c.peak.pinned > 0);
    peaks_within(&c, &before, &after);
    CHECK_EQ(after.cat[WM_LEDGER_DEVICE].current - before.cat[WM_LEDGER_DEVICE].current,
             c.loaded.device);
    wm_ledger_stat d0;
    CHECK_STATUS(wm_ledger_device(0, &d0), WM_OK);
    CHECK_EQ(d0.current, c.device_peak[0]);
    CHECK_EQ(d0.current, c.device_loaded[0]);
    wm_model_release(m);
}

WM_TEST(cost_holds_for_the_cuda_staged_path) {
    wm_error err;
    wm_status st = wm_backend_init(WM_BACKEND_CUDA, 0, &err);
    if (st == WM_EUNSUPPORTED || st == WM_EDEVICE) WM_SKIP("no CUDA backend or device here");
    CHECK_STATUS(st, WM_OK);
    wm_file *f = OPEN_OK(wmt_fixture("gguf/stories260K.gguf"));
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = WM_MODE_HEAP;
    o.backend = WM_BACKEND_CUDA;
    o.threads = 2;
    hold_cuda_cost(f, &o); /* staged: the ring */
    wm_cuda_options cu = WM_CUDA_OPTIONS_INIT;
    cu.registered = 1;
    o.mode = WM_MODE_MMAP;
    o.cuda = &cu;
    hold_cuda_cost(f, &o); /* registered: the file's mapping, windows pinned */
    wm_mem_available a = WM_MEM_AVAILABLE_INIT;
    CHECK_STATUS(wm_mem_available_get(WM_BACKEND_CUDA, 0, &a, &err), WM_OK);
    CHECK(a.device_free != UINT64_MAX && a.device_free <= a.device_total);
    wm_file_close(f);
}

/* The cost of a load that fails: nothing held, the file named. */
WM_TEST(cost_refuses_what_cannot_load_and_holds_nothing) {
    const char *path = wmt_tmp("changing.gguf");
    wmt_copy_file(wmt_fixture("gguf/stories260K.gguf"), path);
    wm_file *f = OPEN_OK(path);
    wm_ledger before = WM_LEDGER_INIT, after = WM_LEDGER_INIT;
    wm_ledger_get(&before);
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    wm_cost c = WM_COST_INIT;
    wm_error err;
    CHECK_STATUS(wm_model_cost(f, &o, &c, &err), WM_EINVAL); /* no mode */
    CHECK_MSG_HAS(err, path);
    o.mode = WM_MODE_MMAP_PRIVATE;
    o.lock = WM_LOCK_REQUIRED;
    CHECK_STATUS(wm_model_cost(f, &o, &c, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "lock");
    o.lock = WM_LOCK_OFF;
    FILE *fp = fopen(path, "ab");
    CHECK(fp && fputs("grown", fp) >= 0 && fclose(fp) == 0);
    CHECK_STATUS(wm_model_cost(f, &o, &c, &err), WM_EFORMAT);
    CHECK_MSG_HAS(err, "changed size");
    wm_ledger_get(&after);
    CHECK_EQ(wm_ledger_bytes(&after), wm_ledger_bytes(&before));
    CHECK_EQ(wm_ledger_regions(&after), wm_ledger_regions(&before));
    CHECK_STATUS(wm_model_cost(NULL, &o, &c, &err), WM_EINVAL);
    wm_file_close(f);
}

/* ---- what the system has ---- */

WM_TEST(mem_available_reads_the_system) {
    wm_mem_available a = WM_MEM_AVAILABLE_INIT;
    wm_error err;
    CHECK_STATUS(wm_mem_available_get(WM_BACKEND_CPU, 0, &a, &err), WM_OK);
    CHECK(a.mem_available > 0 && a.mem_available != UINT64_MAX);
    CHECK(a.host <= a.mem_available);
    if (a.cgroup_limit != UINT64_MAX) CHECK(a.host <= a.cgroup_limit - a.cgroup_current);
    CHECK_EQ(a.device_free, UINT64_MAX);
    CHECK_STATUS(wm_mem_available_get(WM_BACKEND_CPU, 0, NULL, &err), WM_EINVAL);
}

/* The cgroup's room, from a cgroup tree of the test's own making (fault.h re-points the files
 * wm__os_mem_room reads): v2 (the cgroup and its ancestors, the least room wins) and v1. */
static void put_file(const char *dir, const char *name, const char *text) {
    char path[2200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    wmt_write_file(path, text, strlen(text));
}

static wm_mem_available room_with(const char *proc) {
    char pc[1024];
    snprintf(pc, sizeof pc, "%s", wmt_tmp("proc_cgroup"));
    wmt_write_file(pc, proc, strlen(proc));
    static char root[1024];
    snprintf(root, sizeof root, "%s", wmt_tmp("cg"));
    wm__fault_cgroup_files(pc, root);
    wm_mem_available a = WM_MEM_AVAILABLE_INIT;
    wm_status st = wm_mem_available_get(WM_BACKEND_CPU, 0, &a, NULL);
    wm__fault_cgroup_files(NULL, NULL);
    CHECK_STATUS(st, WM_OK);
    return a;
}

WM_TEST(mem_available_reads_the_cgroups_room) {
#ifndef WM_FAULT_INJECTION
    WM_SKIP("needs a build with fault injection (the test's own cgroup tree)");
#endif
    const char *cg = wmt_tmp("cg");
    char a[1024], b[1024], v1[1024];
    snprintf(a, sizeof a, "%s/a", cg);
    snprintf(b, sizeof b, "%s/a/b", cg);
    snprintf(v1, sizeof v1, "%s/memory/x", cg);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s'", b, v1);
    CHECK(system(cmd) == 0);
    put_file(b, "memory.max", "1000000\n");
    put_file(b, "memory.current", "400000\n");
    put_file(a, "memory.max", "max\n");
    put_file(a, "memory.current", "500000\n");
    wm_mem_available r = room_with("0::/a/b\n");
    CHECK_EQ(r.cgroup_limit, 1000000);
    CHECK_EQ(r.cgroup_current, 400000);
    CHECK_EQ(r.host, 600000);
    put_file(a, "memory.max", "800000\n"); /* the parent has less room: 100000 */
    put_file(a, "memory.current", "700000\n");
    r = room_with("0::/a/b\n");
    CHECK_EQ(r.cgroup_limit, 800000);
    CHECK_EQ(r.host, 100000);
    /* cgroup v1's memory controller where v2 has none; its "no limit" is none */
    put_file(v1, "memory.limit_in_bytes", "2000000\n");
    put_file(v1, "memory.usage_in_bytes", "1500000\n");
    r = room_with("4:memory:/x\n0::/\n");
    CHECK_EQ(r.cgroup_limit, 2000000);
    CHECK_EQ(r.host, 500000);
    put_file(v1, "memory.limit_in_bytes", "9223372036854771712\n");
    r = room_with("4:memory:/x\n0::/\n");
    CHECK_EQ(r.cgroup_limit, UINT64_MAX);
    CHECK_EQ(r.host, r.mem_available);
}

/* ---- the pool ---- */

/* Three copies of one model under three names (a, b, c): the same cost each. */
static const char *copy_named(const char *name) {
    const char *p = wmt_tmp(name);
    wmt_copy_file(wmt_fixture("gguf/stories260K.gguf"), p);
    return p;
}

static wm_load_options heap_opts(void) {
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = WM_MODE_HEAP;
    o.threads = 1;
    o.direct_io = WM_DIRECT_OFF;
    return o;
}

/* What a model of the copies holds (by the ledger) and needs at its load's peak (cost, with the
 * file's own bytes), measured through a pool of no budget. */
static void measure(const char *path, uint64_t *held, uint64_t *need) {
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    wm_pool *p;
    CHECK_STATUS(wm_pool_open(&po, &p, NULL), WM_OK);
    wm_load_options o = heap_opts();
    wm_model *m;
    CHECK_STATUS(wm_pool_get(p, path, &o, &m, NULL), WM_OK);
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(p, &s);
    *held = s.held;
    *need = s.held_peak;
    CHECK_STATUS(wm_pool_put(p, m, NULL), WM_OK);
    CHECK_STATUS(wm_pool_close(p, NULL), WM_OK);
    CHECK(*held > 1000000 && *need >= *held);
}

static char paths[3][512];
static uint64_t pool_budget;

static wm_pool *pool_for_two(uint64_t *held) {
    const char *names[3] = {"a.gguf", "b.gguf", "c.gguf"};
    for (int i = 0; i < 3; i++)
        snprintf(paths[i], sizeof paths[i], "%s", copy_named(names[i]));
    uint64_t need;
    measure(paths[0], held, &need);
    /* one held beside one loading fits; two held beside one loading does not */
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    po.budget = *held + need + *held / 2;
    wm_pool *p;
    CHECK_STATUS(wm_pool_open(&po, &p, NULL), WM_OK);
    return p;
}

static void get_put(wm_pool *p, int i) {
    wm_load_options o = heap_opts();
    wm_model *m;
    wm_error err;
    CHECK_STATUS(wm_pool_get(p, paths[i], &o, &m, &err), WM_OK);
    CHECK(wm_model_tensor_data(m, 0) != NULL);
    CHECK_STATUS(wm_pool_put(p, m, &err), WM_OK);
}

WM_TEST(pool_evicts_least_recently_used_and_proves_every_byte_back) {
    uint64_t held;
    wm_pool *p = pool_for_two(&held);
    get_put(p, 0);
    get_put(p, 1);
    get_put(p, 0); /* a is now the most recent: b goes first */
    get_put(p, 2);
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(p, &s);
    CHECK_EQ(s.loads, 3);
    CHECK_EQ(s.hits, 1);
    CHECK_EQ(s.evictions, 1);
    CHECK_EQ(s.last_evicted, 1);
    CHECK_EQ(s.unproven, 0);
    CHECK_EQ(s.returned, held); /* every byte the ledger counted at its load */
    CHECK_EQ(s.resident, 2);
    get_put(p, 0); /* still resident: a hit */
    wm_pool_stats_get(p, &s);
    CHECK_EQ(s.hits, 2);
    get_put(p, 1); /* b was evicted: a load, evicting c (least recent) */
    wm_pool_stats_get(p, &s);

    CHECK_EQ(s.loads, 4);
    CHECK_EQ(s.evictions, 2);
    CHECK_EQ(s.unproven, 0);
    CHECK(s.held <= s.held_peak);
    CHECK_STATUS(wm_pool_close(p, NULL), WM_OK);
}

WM_TEST(pool_never_evicts_a_model_in_use_and_refuses_before_evicting) {
    uint64_t held;
    wm_pool *p = pool_for_two(&held);
    wm_load_options o = heap_opts();
    wm_model *a, *b, *c;
    wm_error err;
    CHECK_STATUS(wm_pool_get(p, paths[0], &o, &a, &err), WM_OK);
    CHECK_STATUS(wm_pool_get(p, paths[1], &o, &b, &err), WM_OK);
    /* both in use: c cannot fit, and nothing is evicted */
    CHECK_STATUS(wm_pool_get(p, paths[2], &o, &c, &err), WM_ENOMEM);
    CHECK_MSG_HAS(err, paths[2]);
    CHECK_MSG_HAS(err, "in use");
    CHECK(c == NULL);
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(p, &s);
    CHECK_EQ(s.evictions, 0);
    CHECK_EQ(s.resident, 2);
    CHECK_STATUS(wm_pool_put(p, b, &err), WM_OK);
    CHECK_STATUS(wm_pool_get(p, paths[2], &o, &c, &err), WM_OK); /* b idle now: b goes */
    wm_pool_stats_get(p, &s);
    CHECK_EQ(s.evictions, 1);
    CHECK(wm_model_tensor_data(a, 0) != NULL); /* a, in use, is still loaded */
    CHECK_STATUS(wm_pool_put(p, a, &err), WM_OK);
    CHECK_STATUS(wm_pool_put(p, c, &err), WM_OK);
    CHECK_STATUS(wm_pool_close(p, NULL), WM_OK);
}

WM_TEST(pool_refuses_a_budget_below_the_model_before_anything) {
    uint64_t held;
    wm_pool *p = pool_for_two(&held);
    get_put(p, 0);
    wm_pool_close(p, NULL);
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    po.budget = held / 2;
    CHECK_STATUS(wm_pool_open(&po, &p, NULL), WM_OK);
    wm_ledger before = WM_LEDGER_INIT, after = WM_LEDGER_INIT;
    wm_ledger_get(&before);
    wm_load_options o = heap_opts();
    wm_model *m;
    wm_error err;
    CHECK_STATUS(wm_pool_get(p, paths[0], &o, &m, &err), WM_ENOMEM);
    CHECK_MSG_HAS(err, paths[0]);
    CHECK_MSG_HAS(err, "budget");
    wm_ledger_get(&after);
    CHECK_EQ(wm_ledger_bytes(&after), wm_ledger_bytes(&before));
    CHECK_EQ(wmt_count_file_maps(paths[0]), 0);
    CHECK_STATUS(wm_pool_close(p, NULL), WM_OK);
}

WM_TEST(pool_bad_input_is_named_and_changes_nothing) {
    uint64_t held;
    wm_pool *p = pool_for_two(&held);
    wm_load_options o = heap_opts();
    wm_model *m, *own;
    wm_error err;
    CHECK_STATUS(wm_pool_get(p, paths[0], &o, &m, &err), WM_OK);
    /* closed with a model in use: refused, the pool whole */
    CHECK_STATUS(wm_pool_close(p, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, paths[0]);
    CHECK_MSG_HAS(err, "in use");
    CHECK(wm_model_tensor_data(m, 0) != NULL);
    CHECK_STATUS(wm_pool_put(p, m, &err), WM_OK);
    /* put back twice */
    CHECK_STATUS(wm_pool_put(p, m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, paths[0]);
    CHECK_MSG_HAS(err, "put back twice");
    /* a model that is not the pool's */
    wm_file *f = OPEN_OK(paths[1]);
    CHECK_STATUS(wm_model_load(f, &o, &own, &err), WM_OK);
    CHECK_STATUS(wm_pool_put(p, own, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "not this pool's");
    wm_model_release(own);
    wm_file_close(f);
    /* a file that cannot be loaded */
    CHECK_STATUS(wm_pool_get(p, wmt_fixture("malformed/lfs-pointer.gguf"), &o, &m, &err),
                 WM_EFORMAT);
    CHECK_MSG_HAS(err, "lfs-pointer.gguf");
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(p, &s);
    CHECK_EQ(s.resident, 1);
    CHECK_EQ(s.in_use, 0);
    CHECK_STATUS(wm_pool_close(p, &err), WM_OK);
}

WM_TEST(pool_file_changed_between_loads_is_named_and_released) {
    uint64_t held;
    wm_pool *p = pool_for_two(&held);
    get_put(p, 0);
    /* rewritten with other bytes (same size, another inode and time) */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.new", paths[0]);
    wmt_copy_file(wmt_fixture("gguf/stories260K-f16.gguf"), tmp);
    CHECK(rename(tmp, paths[0]) == 0);
    wm_load_options o = heap_opts();
    wm_model *m;
    wm_error err;
    CHECK_STATUS(wm_pool_get(p, paths[0], &o, &m, &err), WM_EFORMAT);
    CHECK_MSG_HAS(err, paths[0]);
    CHECK_MSG_HAS(err, "changed");
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(p, &s);
    CHECK_EQ(s.resident, 0);
    CHECK_EQ(s.unproven, 0);
    CHECK_EQ(s.returned, held);
    CHECK_STATUS(wm_pool_get(p, paths[0], &o, &m, &err), WM_OK); /* the file as it is now */
    CHECK_EQ(wm_file_size(wm_model_file(m)), 601248);
    CHECK_STATUS(wm_pool_put(p, m, &err), WM_OK);
    CHECK_STATUS(wm_pool_close(p, NULL), WM_OK);
}

/* A set opened by its index: a second get is the resident model (the index's own file is what
 * the pool watches for a change, not the first shard's). */
WM_TEST(pool_set_by_its_index_is_resident) {
    const char *one = wmt_make_model("set.safetensors", "--size 2M --shards 2");
    (void)one;
    const char *index = wmt_tmp("set.safetensors.index.json");
    char ix[1024];
    snprintf(ix, sizeof ix, "%s", index);
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    wm_pool *p;
    CHECK_STATUS(wm_pool_open(&po, &p, NULL), WM_OK);
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = WM_MODE_MMAP;
    wm_model *m;
    wm_error err;
    for (int k = 0; k < 2; k++) {
        CHECK_STATUS(wm_pool_get(p, ix, &o, &m, &err), WM_OK);
        CHECK_EQ(wm_file_shard_count(wm_model_file(m)), 2);
        CHECK_STATUS(wm_pool_put(p, m, &err), WM_OK);
    }
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(p, &s);
    CHECK_EQ(s.loads, 1);
    CHECK_EQ(s.hits, 1);
    CHECK_STATUS(wm_pool_close(p, &err), WM_OK);
}

WM_TEST(pool_mapped_model_sleeps_in_the_page_cache) {
    uint64_t held;
    wm_pool *p = pool_for_two(&held);
    wm_pool_close(p, NULL);
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    po.budget = 1; /* every get evicts every idle model first */
    CHECK_STATUS(wm_pool_open(&po, &p, NULL), WM_OK);
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = WM_MODE_MMAP;
    wm_model *m;
    wm_error err;
    CHECK_STATUS(wm_pool_get(p, paths[0], &o, &m, &err), WM_ENOMEM); /* budget 1 byte */
    wm_pool_close(p, NULL);
    po.budget = 2 * held + (4u << 20);
    CHECK_STATUS(wm_pool_open(&po, &p, NULL), WM_OK);
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 3; i++) {
            CHECK_STATUS(wm_pool_get(p, paths[i], &o, &m, &err), WM_OK);
            CHECK_STATUS(wm_pool_put(p, m, &err), WM_OK);
            CHECK_EQ(wm_pool_trim(p) > 0, 1); /* evicted: unmapped, asleep */
            CHECK_EQ(wmt_count_file_maps(paths[i]), 0);
            CHECK(wmt_cached_bytes(paths[i], 0, 1185376) > 0); /* its pages stay cached */
        }
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(p, &s);
    CHECK_EQ(s.loads, 6);
    CHECK_EQ(s.wakes, 3);
    CHECK_EQ(s.unproven, 0);
    CHECK_STATUS(wm_pool_close(p, NULL), WM_OK);
}

/* Every tensor of m on the device equals the file's bytes (read back with cudaMemcpy). */
static void device_equals_file(wm_model *m) {
#ifdef WM_HAVE_CUDA
    const wm_file *f = wm_model_file(m);
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info ti;
        CHECK_STATUS(wm_file_tensor(f, i, &ti), WM_OK);
        uint64_t d = wm_model_tensor_device_ptr(m, i);
        CHECK(d != 0);
        unsigned char *got = malloc(ti.nbytes), *want = malloc(ti.nbytes);
        wm_read_item it = {.tensor = i, .dst = want};
        CHECK_STATUS(wm_file_read_tensors(f, &it, 1, NULL, NULL), WM_OK);
        CHECK_EQ(cudaMemcpy(got, (void *)(uintptr_t)d, ti.nbytes, cudaMemcpyDeviceToHost),
                 cudaSuccess);
        CHECK_MSG(memcmp(got, want, ti.nbytes) == 0, "tensor %s differs after a wake", ti.name);
        free(got);
        free(want);
    }
#else
    (void)m;
#endif
}

/* WM_POOL_SLEEP: with room on the device for one model, getting the other puts the idle one to
 * sleep in host memory (its device bytes back by the ledger; pageable, copied through a small
 * pinned bounce ring that is gone once the sleep is done), and getting it again wakes
 * it with every byte as the file has it. The cuda-mock lane runs it against tests/cuda_mock.c. */
WM_TEST(pool_device_model_sleeps_in_host_memory_and_wakes) {
    wm_error err;
    wm_status st = wm_backend_init(WM_BACKEND_CUDA, 0, &err);
    if (st == WM_EUNSUPPORTED || st == WM_EDEVICE) WM_SKIP("no CUDA backend or device here");
    CHECK_STATUS(st, WM_OK);
    uint64_t held;
    wm_pool_close(pool_for_two(&held), NULL); /* the three copies */
    (void)held;
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = WM_MODE_HEAP;
    o.backend = WM_BACKEND_CUDA;
    o.threads = 2;
    wm_file *f = OPEN_OK(paths[0]);
    wm_cost c = WM_COST_INIT;
    CHECK_STATUS(wm_model_cost(f, &o, &c, &err), WM_OK);
    wm_file_close(f);
    uint64_t dev = c.device_peak[0];
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    po.budget = 1ull << 30;
    po.device_budget = dev + dev / 2; /* one model on the device at a time */
    po.flags = WM_POOL_SLEEP;
    wm_pool *p;
    CHECK_STATUS(wm_pool_open(&po, &p, &err), WM_OK);
    wm_model *a, *b;
    CHECK_STATUS(wm_pool_get(p, paths[0], &o, &a, &err), WM_OK);
    CHECK_STATUS(wm_pool_put(p, a, &err), WM_OK);
    CHECK_STATUS(wm_pool_get(p, paths[1], &o, &b, &err), WM_OK); /* a sleeps */
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(p, &s);
    CHECK_EQ(s.sleeps, 1);
    CHECK_EQ(s.asleep, 1);
    CHECK_EQ(s.evictions, 0);
    CHECK_EQ(s.unproven, 0);
    CHECK_EQ(s.last_returned_device, dev);
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    CHECK_EQ(l.cat[WM_LEDGER_DEVICE].current, dev); /* b alone on the device */
    CHECK(l.cat[WM_LEDGER_HEAP].current >= dev);    /* a's copy, in host memory */
    CHECK_EQ(l.cat[WM_LEDGER_PINNED].current, 0);   /* not pinned: the bounce ring is gone */
    CHECK_EQ(wm_model_tensor_device_ptr(a, 0), 0);  /* asleep: no device pointer */
    CHECK_STATUS(wm_pool_put(p, b, &err), WM_OK);
    CHECK_STATUS(wm_pool_get(p, paths[0], &o, &a, &err), WM_OK); /* a wakes, b sleeps */
    wm_pool_stats_get(p, &s);
    CHECK_EQ(s.wakes, 1);
    CHECK_EQ(s.sleeps, 2);
    CHECK_EQ(s.unproven, 0);
    device_equals_file(a);
    CHECK_STATUS(wm_pool_put(p, a, &err), WM_OK);
    /* without the host room for a copy, the idle model goes instead */
    CHECK_STATUS(wm_pool_close(p, &err), WM_OK);
    po.budget = 1ull << 30;
    CHECK_STATUS(wm_pool_open(&po, &p, &err), WM_OK);
    CHECK_STATUS(wm_pool_get(p, paths[0], &o, &a, &err), WM_OK);
    uint64_t extra = wm__model_swap_extra(a); /* the bounce ring a would sleep through */
    CHECK(extra > 0);
    CHECK_STATUS(wm_pool_put(p, a, &err), WM_OK);
    wm_pool_stats_get(p, &s);
    uint64_t a_host = s.held, need = s.held_peak; /* a's host bytes; a load's need */
    CHECK_STATUS(wm_pool_close(p, &err), WM_OK);
    /* b fits beside a, a's copy would not; then a's copy would, but not the ring beside it */
    uint64_t budgets[2] = {a_host + need + dev / 2, a_host + need + dev + extra / 2};
    for (int k = 0; k < 2; k++) {
        po.budget = budgets[k];
        CHECK_STATUS(wm_pool_open(&po, &p, &err), WM_OK);
        CHECK_STATUS(wm_pool_get(p, paths[0], &o, &a, &err), WM_OK);
        CHECK_STATUS(wm_pool_put(p, a, &err), WM_OK);
        CHECK_STATUS(wm_pool_get(p, paths[1], &o, &b, &err), WM_OK);
        CHECK_STATUS(wm_pool_put(p, b, &err), WM_OK);
        wm_pool_stats_get(p, &s);
        CHECK_MSG(s.sleeps == 0 && s.evictions == 1,
                  "budget %d: %llu sleeps and %llu evictions, not 0 and 1", k,
                  (unsigned long long)s.sleeps, (unsigned long long)s.evictions);
        CHECK_EQ(s.unproven, 0);
        CHECK_STATUS(wm_pool_close(p, &err), WM_OK);
    }
}

/* Every OS call and allocation of a pool's life failed in turn (a get that loads, a put, a get
 * that evicts the first to load the second, a put, the close): each run leaves the ledger as it
 * was, no mapping and no descriptor. */
static wm_status pool_scenario(void *user, wm_error *err) {
    (void)user;
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    po.budget = pool_budget;
    wm_pool *p;
    wm_status st = wm_pool_open(&po, &p, err);
    if (st) return st;
    wm_load_options o = heap_opts();
    for (int i = 0; i < 2 && !st; i++) {
        wm_model *m;
        st = wm_pool_get(p, paths[i], &o, &m, err);
        if (!st) wm_pool_put(p, m, NULL);
    }
    CHECK_STATUS(wm_pool_close(p, NULL), WM_OK);
    return st;
}

WM_TEST(pool_fault_sweep_leaves_nothing) {
    uint64_t held, need;
    wm_pool *p = pool_for_two(&held);
    wm_pool_close(p, NULL);
    measure(paths[0], &held, &need);
    pool_budget = need + held / 2; /* one load fits, a held beside b's load does not */
    wmt_sweep s = {.what = "pool", .run = pool_scenario, .path = paths[0]};
    wmt_sweep_result res = {0};
    const int errs[] = {EIO, ENOMEM};
    wmt_sweep_any(&s, errs, 2, &res);
    CHECK(res.counts[WM_OS_ANY] > 10);
    CHECK(res.failed > 0);
    CHECK_EQ(wmt_count_file_maps(paths[1]), 0);
    /* the clean run evicted a to load b */
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    po.budget = pool_budget;
    CHECK_STATUS(wm_pool_open(&po, &p, NULL), WM_OK);
    wm_load_options o = heap_opts();
    wm_model *m;
    for (int i = 0; i < 2; i++) {
        CHECK_STATUS(wm_pool_get(p, paths[i], &o, &m, NULL), WM_OK);
        CHECK_STATUS(wm_pool_put(p, m, NULL), WM_OK);
    }
    wm_pool_stats st = WM_POOL_STATS_INIT;
    wm_pool_stats_get(p, &st);
    CHECK_EQ(st.evictions, 1);
    CHECK_STATUS(wm_pool_close(p, NULL), WM_OK);
}

/* The same sweep over sleeps and wakes (WM_POOL_SLEEP, CUDA; the cuda-mock lane): a failed
 * sleep leaves the model to be evicted, a failed wake leaves it asleep, and nothing leaks. */
static wm_load_options sleep_opts;
static uint64_t sleep_dev_budget;

static wm_status sleep_scenario(void *user, wm_error *err) {
    (void)user;
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    po.budget = 1ull << 30;
    po.device_budget = sleep_dev_budget;
    po.flags = WM_POOL_SLEEP;
    wm_pool *p;
    wm_status st = wm_pool_open(&po, &p, err);
    if (st) return st;
    const int order[] = {0, 1, 0};
    for (int k = 0; k < 3 && !st; k++) {
        wm_model *m;
        st = wm_pool_get(p, paths[order[k]], &sleep_opts, &m, err);
        if (!st) wm_pool_put(p, m, NULL);
    }
    CHECK_STATUS(wm_pool_close(p, NULL), WM_OK);
    return st;
}

WM_TEST(pool_sleep_fault_sweep_leaves_nothing) {
    wm_error err;
    wm_status st = wm_backend_init(WM_BACKEND_CUDA, 0, &err);
    if (st == WM_EUNSUPPORTED || st == WM_EDEVICE) WM_SKIP("no CUDA backend or device here");
    CHECK_STATUS(st, WM_OK);
    uint64_t held;
    wm_pool_close(pool_for_two(&held), NULL);
    sleep_opts = (wm_load_options)WM_LOAD_OPTIONS_INIT;
    sleep_opts.mode = WM_MODE_HEAP;
    sleep_opts.backend = WM_BACKEND_CUDA;
    sleep_opts.threads = 2;
    wm_file *f = OPEN_OK(paths[0]);
    wm_cost c = WM_COST_INIT;
    CHECK_STATUS(wm_model_cost(f, &sleep_opts, &c, &err), WM_OK);
    wm_file_close(f);
    sleep_dev_budget = c.device_peak[0] + c.device_peak[0] / 2;
    wmt_sweep s = {.what = "pool sleep", .run = sleep_scenario, .path = paths[0]};
    wmt_sweep_result res = {0};
    const int errs[] = {EIO, ENOMEM};
    wmt_sweep_any(&s, errs, 2, &res);
    CHECK(res.counts[WM_OS_DEVICE] > 4);
    CHECK(res.failed > 0);
}

/* `swap --sleep` on the CUDA backend (the cuda-mock lane) says where each wake and sleep spent
 * its time, and what they copied: the model's device bytes. */
WM_TEST(cli_swap_sleep_prints_the_wake_and_the_sleep_part_by_part) {
    wm_error err;
    wm_status st = wm_backend_init(WM_BACKEND_CUDA, 0, &err);
    if (st == WM_EUNSUPPORTED || st == WM_EDEVICE) WM_SKIP("no CUDA backend or device here");
    CHECK_STATUS(st, WM_OK);
    char names[2][512];
    for (int i = 0; i < 2; i++) {
        char nm[32], opts[64];
        snprintf(nm, sizeof nm, "w%d.gguf", i);
        snprintf(opts, sizeof opts, "--size 4M --seed %d", i + 1);
        snprintf(names[i], sizeof names[i], "%s", wmt_make_model(nm, opts));
    }
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = WM_MODE_HEAP;
    o.backend = WM_BACKEND_CUDA;
    wm_file *f = OPEN_OK(names[0]);
    wm_cost c = WM_COST_INIT;
    CHECK_STATUS(wm_model_cost(f, &o, &c, &err), WM_OK);
    wm_file_close(f);
    uint64_t dev = c.device_peak[0];
    static char out[1 << 16];
    char args[2048], want[128];
    snprintf(args, sizeof args,
             "swap %s %s --cycles 2 --budget 1G --device-budget %llu --backend cuda --sleep "
             "--threads 2 --json",
             names[0], names[1], (unsigned long long)(dev + dev / 2));
    CHECK_EQ(wmt_cli(args, out, sizeof out) <= 1, 1); /* 1: ASan's quarantine (see above) */
    const char *w = strstr(out, "\"wake\":{\"seconds\":");
    const char *sl = strstr(out, "\"sleep\":{\"seconds\":");
    CHECK_MSG(w && sl && strstr(out, "\"sleeps\":3") && strstr(out, "\"unproven\":0"), "%s", out);
    snprintf(want, sizeof want, "\"bytes\":%llu}", (unsigned long long)dev);
    CHECK_MSG(strstr(w, want) && strstr(sl, want), "no %s in %s", want, out);
    CHECK_MSG(strstr(w, "\"unregister_seconds\":") && strstr(sl, "\"register_seconds\":"), "%s",
              out);
}

/* ---- threads ---- */

#define THREADS 4
static wm_pool *shared_pool;
static int cycles(void) {
    const char *s = getenv("WM_STRESS_CYCLES");
    return s && atoi(s) > 0 ? atoi(s) : 100;
}

static void *worker(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    wm_load_options o = heap_opts();
    for (int k = 0; k < cycles(); k++) {
        int i = (int)(rand_r(&seed) % 3);
        wm_model *m;
        wm_error err;
        wm_status st = wm_pool_get(shared_pool, paths[i], &o, &m, &err);
        if (st == WM_ENOMEM) continue; /* the others hold it all now */
        CHECK_STATUS(st, WM_OK);
        const unsigned char *d = wm_model_tensor_data(m, 0);
        CHECK(d != NULL);
        volatile unsigned char x = d[0];
        (void)x;
        CHECK_STATUS(wm_pool_put(shared_pool, m, &err), WM_OK);
    }
    return NULL;
}

WM_TEST(pool_threads_share_one_pool) {
    uint64_t held;
    shared_pool = pool_for_two(&held);
    pthread_t th[THREADS];
    for (uintptr_t t = 0; t < THREADS; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)(t + 1)) == 0);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(shared_pool, &s);
    CHECK_EQ(s.in_use, 0);
    CHECK_EQ(s.unproven, 0);
    CHECK(s.resident <= 2);
    CHECK(s.loads >= 1);
    CHECK_STATUS(wm_pool_close(shared_pool, NULL), WM_OK);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(wmt_count_file_maps(paths[i]), 0);
}

/* ---- objects of other libraries (wm_pool_get_object) ----
 * A fake owner whose objects hold `bytes` each in a count of its own (the owner's counts, as a
 * bridge's own buffers): the pool charges its cost, evicts it least recently used beside
 * weightmap's models, and proves each eviction by that count; a release that keeps its bytes
 * (leaks) makes the next load stop, unstarted. */

static _Atomic uint64_t fake_live;
static int fake_loads;
static bool fake_leaks;

typedef struct fake_args {
    uint64_t bytes;
    bool cost_fails, load_gives_nothing;
} fake_args;

static wm_status fake_cost(void *args, const char *path, wm_cost *out, wm_error *err) {
    const fake_args *a = args;
    if (a->cost_fails) {
        err->code = WM_EFORMAT;
        snprintf(err->msg, sizeof err->msg, "%s: the fake cannot cost this", path);
        return WM_EFORMAT;
    }
    out->host_peak = out->host_loaded = a->bytes;
    return WM_OK;
}

static wm_status fake_load(void *args, const char *path, void **object, wm_error *err) {
    (void)path, (void)err;
    const fake_args *a = args;
    fake_loads++;
    if (a->load_gives_nothing) return WM_OK;
    uint64_t *o = malloc(sizeof *o);
    CHECK(o != NULL);
    *o = a->bytes;
    fake_live += a->bytes;
    *object = o;
    return WM_OK;
}

static void fake_release(void *object) {
    uint64_t *o = object;
    if (!fake_leaks) fake_live -= *o;
    free(o);
}

static void fake_count(wm_pool_counts *c) { c->host = fake_live; }

static const wm_pool_owner fake_owner = {.size = sizeof(wm_pool_owner),
                                         .name = "fake",
                                         .cost = fake_cost,
                                         .load = fake_load,
                                         .release = fake_release,
                                         .count = fake_count};

/* pool_for_two's pool and its budget. */
static wm_pool *objects_pool(uint64_t *held, uint64_t *budget) {
    uint64_t need;
    wm_pool_close(pool_for_two(held), NULL);
    measure(paths[0], held, &need);
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    po.budget = *budget = *held + need + *held / 2;
    wm_pool *p;
    CHECK_STATUS(wm_pool_open(&po, &p, NULL), WM_OK);
    return p;
}

static void *fake_get(wm_pool *p, const char *path, int key, uint64_t bytes, wm_status want,
                      wm_error *err) {
    fake_args a = {.bytes = bytes};
    void *o = (void *)(uintptr_t)1;
    CHECK_STATUS(wm_pool_get_object(p, path, &fake_owner, &key, sizeof key, &a, &o, err), want);
    CHECK(want != WM_OK || o != NULL);
    CHECK(want == WM_OK || o == NULL);
    return o;
}

WM_TEST(pool_objects_share_the_budget_with_models_and_are_proven) {
    uint64_t held, budget;
    wm_pool *p = objects_pool(&held, &budget); /* room for one model held beside one loading */
    wm_error err;
    get_put(p, 0);                    /* a model, idle */
    uint64_t big = budget - held / 2; /* an object that needs more than the budget less it */
    void *x = fake_get(p, paths[1], 1, big, WM_OK, &err); /* evicts the model */
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(p, &s);
    CHECK_EQ(s.evictions, 1);
    CHECK_EQ(s.returned, held);
    CHECK_EQ(s.held, big);
    CHECK_STATUS(wm_pool_put_object(p, x, &err), WM_OK);
    /* the same path and key: the resident object; another key: another object, evicting it */
    CHECK(fake_get(p, paths[1], 1, big, WM_OK, &err) == x);
    CHECK_STATUS(wm_pool_put_object(p, x, &err), WM_OK);
    int loads = fake_loads;
    void *y = fake_get(p, paths[1], 2, big, WM_OK, &err);
    CHECK_EQ(fake_loads, loads + 1); /* loaded anew (its address may be x's, freed: malloc's) */
    wm_pool_stats_get(p, &s);
    CHECK_EQ(s.evictions, 2);
    CHECK_EQ(s.returned, held + big); /* the owner's count fell by the object's bytes */
    CHECK_EQ(s.unproven, 0);
    CHECK_EQ(fake_live, big);
    CHECK_STATUS(wm_pool_put_object(p, y, &err), WM_OK);
    /* an eviction whose release keeps its bytes: not proven, and the next load does not start */
    fake_leaks = true;
    loads = fake_loads;
    CHECK(fake_get(p, paths[2], 1, big, WM_EIO, &err) == NULL);
    CHECK_EQ(fake_loads, loads);
    CHECK_MSG_HAS(err, paths[2]);
    CHECK_MSG_HAS(err, paths[1]);
    CHECK_MSG_HAS(err, "fake's counts");
    CHECK_MSG_HAS(err, "did not start");
    wm_pool_stats_get(p, &s);
    CHECK_EQ(s.unproven, 1);
    fake_leaks = false;
    fake_live = 0;
    CHECK_STATUS(wm_pool_close(p, &err), WM_OK);
}

WM_TEST(pool_object_bad_input_is_named_and_changes_nothing) {
    uint64_t held, budget;
    wm_pool *p = objects_pool(&held, &budget);
    wm_error err;
    int key = 1;
    void *o = NULL;
    fake_args a = {.bytes = 4096};
    /* an owner without its release, a longer owner struct with a field this library lacks */
    wm_pool_owner bad = fake_owner;
    bad.release = NULL;
    CHECK_STATUS(wm_pool_get_object(p, paths[0], &bad, &key, sizeof key, &a, &o, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "release");
    struct {
        wm_pool_owner o;
        uint64_t more;
    } longer = {fake_owner, 1};
    longer.o.size = sizeof longer;
    CHECK_STATUS(wm_pool_get_object(p, paths[0], &longer.o, &key, sizeof key, &a, &o, &err),
                 WM_EINVAL);
    CHECK_STATUS(wm_pool_get_object(p, paths[0], NULL, NULL, 0, &a, &o, &err), WM_EINVAL);
    /* a cost that fails: nothing evicted, nothing loaded */
    get_put(p, 0);
    a.cost_fails = true;
    int loads = fake_loads;
    CHECK_STATUS(wm_pool_get_object(p, paths[1], &fake_owner, &key, sizeof key, &a, &o, &err),
                 WM_EFORMAT);
    CHECK_MSG_HAS(err, paths[1]);
    CHECK_EQ(fake_loads, loads);
    /* a load that gives no object */
    a.cost_fails = false;
    a.load_gives_nothing = true;
    CHECK_STATUS(wm_pool_get_object(p, paths[1], &fake_owner, &key, sizeof key, &a, &o, &err),
                 WM_EINVAL);
    CHECK_MSG_HAS(err, "no object");
    /* more than the budget: refused before anything is evicted */
    a.load_gives_nothing = false;
    a.bytes = budget + 1;
    CHECK_STATUS(wm_pool_get_object(p, paths[1], &fake_owner, &key, sizeof key, &a, &o, &err),
                 WM_ENOMEM);
    CHECK_MSG_HAS(err, paths[1]);
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(p, &s);
    CHECK_EQ(s.resident, 1);
    CHECK_EQ(s.evictions, 0);
    /* put back twice, an object not the pool's, a close with one in use */
    a.bytes = 4096;
    o = fake_get(p, paths[1], 1, 4096, WM_OK, &err);
    CHECK_STATUS(wm_pool_close(p, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, paths[1]);
    CHECK_MSG_HAS(err, "in use");
    CHECK_STATUS(wm_pool_put_object(p, o, &err), WM_OK);
    CHECK_STATUS(wm_pool_put_object(p, o, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "put back twice");
    CHECK_STATUS(wm_pool_put_object(p, &key, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "not this pool's");
    CHECK_STATUS(wm_pool_close(p, &err), WM_OK);
    CHECK_EQ(fake_live, 0);
}

/* ---- the commands ---- */

/* A safetensors file of one 64 GiB U8 tensor, sparse (no byte written): more than any test
 * machine has, so heap mode cannot fit and mmap (page cache, nothing private) can. */
static const char *sparse_big(void) {
    const char *path = wmt_tmp("big.safetensors");
    const uint64_t n = (uint64_t)64 << 30;
    char hdr[256];
    int len = snprintf(hdr, sizeof hdr,
                       "{\"big\":{\"dtype\":\"U8\",\"shape\":[%llu],\"data_offsets\":[0,%llu]}}",
                       (unsigned long long)n, (unsigned long long)n);
    FILE *f = fopen(path, "wb");
    uint64_t l = (uint64_t)len;
    CHECK(f && fwrite(&l, 8, 1, f) == 1 && fwrite(hdr, 1, (size_t)len, f) == (size_t)len);
    CHECK(fclose(f) == 0);
    CHECK(truncate(path, (off_t)(8 + l + n)) == 0);
    return path;
}

WM_TEST(cli_fit_says_what_does_not_fit_and_the_mode_that_would) {
    const char *big = sparse_big();
    char out[8192], args[1024];
    snprintf(args, sizeof args, "fit %s --mode heap", big);
    CHECK_EQ(wmt_cli(args, out, sizeof out), 1);
    CHECK_MSG(strstr(out, "does not fit: host memory") && strstr(out, "mode mmap would fit"), "%s",
              out);
    snprintf(args, sizeof args, "fit %s --mode mmap --json", big);
    CHECK_EQ(wmt_cli(args, out, sizeof out), 0);
    CHECK_MSG(strstr(out, "\"fits\":true") && strstr(out, "\"file_shared\":687194768"), "%s", out);
    snprintf(args, sizeof args, "fit %s --mode heap", wmt_fixture("gguf/stories260K.gguf"));
    CHECK_EQ(wmt_cli(args, out, sizeof out), 0);
    snprintf(args, sizeof args, "fit %s --mode heap", wmt_fixture("malformed/lfs-pointer.gguf"));
    CHECK_EQ(wmt_cli(args, out, sizeof out), 1);
    CHECK_MSG(strstr(out, "lfs-pointer.gguf"), "%s", out);
    snprintf(args, sizeof args, "fit %s", wmt_fixture("gguf/stories260K.gguf"));
    CHECK_EQ(wmt_cli(args, out, sizeof out), 2); /* no mode */
}

WM_TEST(cli_swap_verdict_and_a_budget_below_a_file_refused_at_once) {
    const char *m[3];
    char names[3][512];
    for (int i = 0; i < 3; i++) {
        char nm[32], opts[64];
        snprintf(nm, sizeof nm, "s%d.gguf", i);
        snprintf(opts, sizeof opts, "--size 4M --seed %d", i + 1);
        snprintf(names[i], sizeof names[i], "%s", wmt_make_model(nm, opts));
        m[i] = names[i];
    }
    static char out[1 << 16];
    char args[2048];
    /* two of them (4 MiB each, a load's peak 4 MiB + 2 threads' staging) fit, three do not */
    snprintf(args, sizeof args, "swap %s %s %s --cycles 2 --budget 14M --threads 2 --json", m[0],
             m[1], m[2]);
    int rc = wmt_cli(args, out, sizeof out);
    CHECK_MSG(strstr(out, "\"peak_ok\":true") && strstr(out, "\"unproven\":0") &&
                  strstr(out, "\"every_eviction_returned\":true") &&
                  strstr(out, "\"ledger_after\":0") && strstr(out, "\"evictions\":4"),
              "%s", out);
    /* ASan's allocator keeps freed blocks in quarantine: the footprint is not back there */
    if (!WMT_ASAN) CHECK_MSG(rc == 0 && strstr(out, "\"ok\":true"), "%s", out);
    snprintf(args, sizeof args, "swap %s %s --budget 3M", m[0], m[1]);
    CHECK_EQ(wmt_cli(args, out, sizeof out), 1);
    CHECK_MSG(strstr(out, m[0]) && strstr(out, "below what this file needs") &&
                  strstr(out, "nothing was loaded") && !strstr(out, "cycle"),
              "%s", out);
}
