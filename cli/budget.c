/*
 * budget.c: `weightmap fit` (what a load will cost, against what the system has: exit 0 when it
 * fits, 1 naming what does not and the mode that would) and `weightmap swap` (files loaded in
 * rotation through a pool under a budget, per switch the time, footprint, peak and bytes
 * returned, and the verdict).
 *
 * Sections: options; fit; swap (the switches, the verdict).
 */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- options ---- */

typedef struct budget_args {
    const char *files[64];
    unsigned n_files;
    wm_load_options opts;
    int devices[WM_LEDGER_DEVICES];
    unsigned n_devices;
    bool json, mode_given, sleep, llama;
    const char *mode_name; /* --mode as given (--llama takes llama.cpp's names) */
    uint64_t cycles, budget, device_budget;
} budget_args;

/* The options fit and swap share; 2 after a usage error. */
static int parse(budget_args *a, const char *cmd, int argc, char **argv) {
    *a = (budget_args){.opts = WM_LOAD_OPTIONS_INIT, .cycles = 3};
    a->opts.mode = WM_MODE_HEAP;
    cli_args p;
    cli_args_init(&p, cmd, argc, argv);
    for (int k; (k = cli_next(&p)) != CLI_END;) {
        if (k == CLI_ERROR) return 2;
        const char *v = p.value;
        if (k == CLI_ARG) {
            if (a->n_files == sizeof a->files / sizeof a->files[0])
                return cli_usage("%s: at most 64 files", cmd);
            a->files[a->n_files++] = v;
        } else if (cli_is(&p, "json")) {
            a->json = true;
        } else if (cli_is(&p, "sleep")) {
            a->sleep = true;
        } else if (cli_is(&p, "llama")) {
            a->llama = true;
        } else if (cli_is(&p, "mode")) {
            a->opts.mode = wm_mode_from_name(v);
            a->mode_given = true;
            a->mode_name = v;
            if (a->opts.mode == WM_MODE_NONE && strcmp(cmd, "swap") != 0)
                return cli_bad_value(&p, "heap, mmap or mmap-private");
        } else if (cli_is(&p, "lock")) {
            if (!v || strcmp(v, "required") == 0)
                a->opts.lock = WM_LOCK_REQUIRED;
            else if (strcmp(v, "best-effort") == 0)
                a->opts.lock = WM_LOCK_BEST_EFFORT;
            else
                return cli_bad_value(&p, "best-effort or required");
        } else if (cli_is(&p, "backend")) {
            wm_error err;
            if (wm_backend_from_name(v, &a->opts.backend, a->devices, WM_LEDGER_DEVICES,
                                     &a->n_devices, &err))
                return cli_usage("%s: bad --backend: %s", cmd, err.msg);
            a->opts.device = a->n_devices ? a->devices[0] : 0;
            if (a->n_devices > 1) {
                a->opts.devices = a->devices;
                a->opts.n_devices = a->n_devices;
            }
        } else if (cli_is(&p, "cycles")) {
            if (cli_value_u64(&p, &a->cycles)) return 2;
        } else if (cli_is(&p, "budget")) {
            if (cli_value_u64(&p, &a->budget)) return 2;
        } else if (cli_is(&p, "device-budget")) {
            if (cli_value_u64(&p, &a->device_budget)) return 2;
        } else if (cli_is(&p, "threads")) {
            uint64_t t;
            if (cli_value_u64(&p, &t)) return 2;
            a->opts.threads = (unsigned)t;
        }
    }
    if (a->n_files == 0) return cli_usage("%s: no FILE given", cmd);
    if (!a->llama && a->mode_given && a->opts.mode == WM_MODE_NONE)
        return cli_usage("%s: bad --mode '%s': expected heap, mmap or mmap-private", cmd,
                         a->mode_name);
    return 0;
}

/* A byte figure in JSON: null where unknown (UINT64_MAX). */
static void json_u64(FILE *o, const char *name, uint64_t v, bool comma) {
    if (v == UINT64_MAX)
        fprintf(o, "\"%s\":null%s", name, comma ? "," : "");
    else
        fprintf(o, "\"%s\":%" PRIu64 "%s", name, v, comma ? "," : "");
}

static const char *bytes_or(uint64_t v, char buf[32], const char *unknown) {
    return v == UINT64_MAX ? unknown : cli_bytes(v, buf);
}

/* ---- fit ---- */

/* What does not fit, written into why (empty when it fits). */
static bool judge(const budget_args *a, const wm_cost *c, const wm_mem_available *av,
                  const wm_mem_available *dev, char *why, size_t cap) {
    char b1[32], b2[32];
    why[0] = 0;
    if (av->host != UINT64_MAX && c->host_needed > av->host) {
        snprintf(why, cap, "host memory: needs %s at the load's peak, the system has %s",
                 cli_bytes(c->host_needed, b1), cli_bytes(av->host, b2));
        return false;
    }
    unsigned nd = a->n_devices ? a->n_devices : 1;
    for (unsigned k = 0; a->opts.backend != WM_BACKEND_CPU && k < nd; k++) {
        int d = a->n_devices ? a->devices[k] : a->opts.device;
        if (dev[k].device_free != UINT64_MAX && c->device_peak[d] > dev[k].device_free) {
            snprintf(why, cap, "device %d: needs %s, has %s free", d,
                     cli_bytes(c->device_peak[d], b1), cli_bytes(dev[k].device_free, b2));
            return false;
        }
    }
    return true;
}

static int cost_of(wm_file *f, const budget_args *a, wm_mode mode, wm_cost *c, wm_error *err) {
    wm_load_options o = a->opts;
    o.mode = mode;
    if (mode == WM_MODE_MMAP_PRIVATE) o.lock = WM_LOCK_OFF;
    *c = (wm_cost)WM_COST_INIT;
    return wm_model_cost(f, &o, c, err) != WM_OK;
}

/* The first other mode whose cost fits (mmap first: it needs the least), or NULL. */
static const char *mode_that_fits(wm_file *f, const budget_args *a, const wm_mem_available *av,
                                  const wm_mem_available *dev) {
    static const wm_mode order[] = {WM_MODE_MMAP, WM_MODE_MMAP_PRIVATE, WM_MODE_HEAP};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        if (order[k] == a->opts.mode) continue;
        wm_cost c;
        wm_error err;
        char why[256];
        if (cost_of(f, a, order[k], &c, &err)) continue;
        if (judge(a, &c, av, dev, why, sizeof why)) return wm_mode_name(order[k]);
    }
    return NULL;
}

static void print_kinds_json(FILE *o, const char *name, const wm_cost_bytes *b, bool comma) {
    fprintf(o,
            "\"%s\":{\"anonymous\":%" PRIu64 ",\"file_shared\":%" PRIu64
            ",\"file_private\":%" PRIu64 ",\"locked\":%" PRIu64 ",\"pinned\":%" PRIu64
            ",\"device\":%" PRIu64 "}%s",
            name, b->anonymous, b->file_shared, b->file_private, b->locked, b->pinned, b->device,
            comma ? "," : "");
}

static void fit_json(const char *path, const budget_args *a, const wm_cost *c,
                     const wm_mem_available *av, bool fits, const char *why, const char *other) {
    FILE *o = stdout;
    fputs("{\"file\":", o);
    cli_json_cstr(o, path);
    fprintf(o, ",\"mode\":\"%s\",\"backend\":\"%s\",\"device\":%d,\"fits\":%s,",
            wm_mode_name(a->opts.mode), wm_backend_name(a->opts.backend), a->opts.device,
            fits ? "true" : "false");
    print_kinds_json(o, "peak", &c->peak, true);
    print_kinds_json(o, "loaded", &c->loaded, true);
    fprintf(o, "\"host_peak\":%" PRIu64 ",\"host_needed\":%" PRIu64 ",\"threads\":%u,",
            c->host_peak, c->host_needed, c->threads);
    fputs("\"devices\":{", o);
    bool first = true;
    for (int d = 0; d < WM_LEDGER_DEVICES; d++) {
        if (!c->device_peak[d]) continue;
        fprintf(o, "%s\"%d\":{\"peak\":%" PRIu64 ",\"loaded\":%" PRIu64 "}", first ? "" : ",", d,
                c->device_peak[d], c->device_loaded[d]);
        first = false;
    }
    fputs("},", o);
    fputs("\"available\":{", o);
    json_u64(o, "host", av->host, true);
    json_u64(o, "mem_available", av->mem_available, true);
    json_u64(o, "cgroup_limit", av->cgroup_limit, true);
    json_u64(o, "cgroup_current", av->cgroup_limit == UINT64_MAX ? UINT64_MAX : av->cgroup_current,
             true);
    json_u64(o, "device_free", av->device_free, true);
    json_u64(o, "device_total", av->device_total, false);
    fputs("},\"does_not_fit\":", o);
    if (fits)
        fputs("null", o);
    else
        cli_json_cstr(o, why);
    fputs(",\"mode_that_fits\":", o);
    if (other)
        cli_json_cstr(o, other);
    else
        fputs("null", o);
    fputs("}\n", o);
}

static void fit_text(const char *path, const budget_args *a, const wm_cost *c,
                     const wm_mem_available *av, bool fits, const char *why, const char *other) {
    char b1[32], b2[32], b3[32];
    printf("%s: mode %s%s on %s\n", path, wm_mode_name(a->opts.mode),
           a->opts.lock ? " (locked)" : "", wm_backend_name(a->opts.backend));
    printf("  %-14s %12s %12s\n", "bytes", "at peak", "loaded");
    const char *names[] = {"anonymous", "file shared", "file private",
                           "locked",    "pinned",      "device"};
    const uint64_t *pk = &c->peak.anonymous, *ld = &c->loaded.anonymous;
    for (int k = 0; k < 6; k++)
        printf("  %-14s %12s %12s\n", names[k], cli_bytes(pk[k], b1), cli_bytes(ld[k], b2));
    printf("  host needed    %12s  (what must be available: anonymous, private, locked)\n",
           cli_bytes(c->host_needed, b1));
    printf("system: %s available for a load (MemAvailable %s", bytes_or(av->host, b1, "unknown"),
           bytes_or(av->mem_available, b2, "unknown"));
    if (av->cgroup_limit == UINT64_MAX)
        printf("; no cgroup memory limit)\n");
    else
        printf("; cgroup: %s of memory.max %s used)\n", cli_bytes(av->cgroup_current, b3),
               cli_bytes(av->cgroup_limit, b1));
    if (a->opts.backend != WM_BACKEND_CPU)
        printf("device %d: %s free of %s\n", a->opts.device,
               bytes_or(av->device_free, b1, "unknown"), bytes_or(av->device_total, b2, "?"));
    if (fits)
        printf("fits\n");
    else if (other)
        printf("does not fit: %s\nmode %s would fit\n", why, other);
    else
        printf("does not fit: %s\nno other mode fits\n", why);
}

int cmd_fit(int argc, char **argv) {
    budget_args a;
    int u = parse(&a, "fit", argc, argv);
    if (u) return u;
    if (a.n_files != 1) return cli_usage("fit: one FILE");
    if (!a.mode_given) return cli_usage("fit: --mode is required (heap, mmap or mmap-private)");
    const char *path = a.files[0];
    wm_error err = {0};
    wm_file *f;
    if (cli_open(path, false, &f, &err)) return cli_fail(&err);
    wm_cost c;
    wm_mem_available av = WM_MEM_AVAILABLE_INIT, dev[WM_LEDGER_DEVICES];
    int rc = cost_of(f, &a, a.opts.mode, &c, &err);
    if (!rc) rc = wm_mem_available_get(a.opts.backend, a.opts.device, &av, &err) != WM_OK;
    unsigned nd = a.n_devices ? a.n_devices : 1;
    for (unsigned k = 0; !rc && k < nd; k++) {
        dev[k] = (wm_mem_available)WM_MEM_AVAILABLE_INIT;
        rc = wm_mem_available_get(a.opts.backend, a.n_devices ? a.devices[k] : a.opts.device,
                                  &dev[k], &err) != WM_OK;
    }
    if (rc) {
        wm_file_close(f);
        return cli_fail(&err);
    }
    char why[256];
    bool fits = judge(&a, &c, &av, dev, why, sizeof why);
    const char *other = fits ? NULL : mode_that_fits(f, &a, &av, dev);
    wm_file_close(f);
    if (a.json)
        fit_json(path, &a, &c, &av, fits, why, other);
    else
        fit_text(path, &a, &c, &av, fits, why, other);
    if (!fits)
        fprintf(stderr, "weightmap: %s: does not fit in mode %s: %s; %s%s%s\n", path,
                wm_mode_name(a.opts.mode), why, other ? "mode " : "no other mode fits",
                other ? other : "", other ? " would fit" : "");
    return fits ? 0 : 1;
}

/* ---- swap ---- */

/* The verdict's bounds (docs/ARCHITECTURE.md, "Budgets"): the ledger's peak may pass the budget
 * by the pool's own bookkeeping (an entry and a path per file, counted in the ledger's heap but
 * not charged to the budget); the footprint after the pool is closed may differ from before the
 * first load by the allocator's noise, as `check` allows (FOOTPRINT_SLACK in load.c). */
#define PEAK_SLACK ((uint64_t)64 * 1024)
#define FOOTPRINT_SLACK ((uint64_t)64 * 1024)

typedef struct swap_row {
    unsigned cycle;
    const char *file;
    double seconds, wake_seconds;
    /* the get's wake and sleeps, part by part (wm_pool_stats' last_wake_* and last_sleep_*) */
    double wake_alloc, wake_copy, wake_unregister, wake_free;
    double sleep_seconds, sleep_alloc, sleep_register, sleep_copy, sleep_free;
    uint64_t wake_bytes, sleep_bytes;
    int64_t footprint; /* from before the first load */
    uint64_t peak;     /* the ledger's host peak during the switch */
    uint64_t returned, returned_device;
    unsigned evicted;
    bool hit, woke;
} swap_row;

/* The ledger's host bytes (what the budget counts) at their peak since the last reset: the most
 * held at once. */
static uint64_t host_peak(void) {
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    return l.host.peak;
}

static int64_t footprint_now(void) {
    wm_mem_figures m;
    return wm_mem_figures_get(0, &m, NULL) == WM_OK ? (int64_t)m.footprint : 0;
}

/* Every file opens and its load's need fits the budget; else the file is named. */
static int refuse_early(const budget_args *a, wm_error *err) {
    for (unsigned i = 0; i < a->n_files; i++) {
        wm_file *f;
        if (cli_open(a->files[i], false, &f, err)) return 1;
        wm_cost c = WM_COST_INIT;
        wm_status st = wm_model_cost(f, &a->opts, &c, err);
        uint64_t size = wm_file_size(f);
        wm_file_close(f);
        if (st) return 1;
        uint64_t need = c.host_peak;
        if (a->opts.backend == WM_BACKEND_CPU && size > need) need = size;
        uint64_t dev_need = 0;
        for (int d = 0; d < WM_LEDGER_DEVICES; d++)
            if (c.device_peak[d] > dev_need) dev_need = c.device_peak[d];
        if (a->device_budget && a->device_budget < dev_need) {
            char b1[32], b2[32];
            snprintf(err->msg, sizeof err->msg,
                     "%s: the device budget %s is below what this file needs on a device (%s); "
                     "nothing was loaded",
                     a->files[i], cli_bytes(a->device_budget, b1), cli_bytes(dev_need, b2));
            return 1;
        }
        if (a->budget < need) {
            char b1[32], b2[32];
            snprintf(err->msg, sizeof err->msg,
                     "%s: the budget %s is below what this file needs (%s at its load's peak, in "
                     "mode %s); nothing was loaded",
                     a->files[i], cli_bytes(a->budget, b1), cli_bytes(need, b2),
                     wm_mode_name(a->opts.mode));
            return 1;
        }
    }
    return 0;
}

/* One switch: get the file through the pool, read a byte of every tensor, put it back. */
static int one_switch(wm_pool *p, const budget_args *a, unsigned i, int64_t base, swap_row *r,
                      wm_error *err) {
    wm_ledger_reset_peaks();
    wm_pool_stats before = WM_POOL_STATS_INIT, s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(p, &before);
    wm_model *m;
    if (wm_pool_get(p, a->files[i], &a->opts, &m, err)) return 1;
    const wm_file *f = wm_model_file(m);
    volatile unsigned sum = 0;
    for (size_t t = 0; t < wm_file_tensor_count(f); t++) {
        const unsigned char *d = wm_model_tensor_data(m, t);
        if (d) sum += d[0];
    }
    (void)sum;
    wm_pool_stats_get(p, &s);
    r->seconds = s.last_get_seconds;
    r->wake_seconds = s.last_wake_seconds;
    r->wake_alloc = s.last_wake_alloc_seconds;
    r->wake_copy = s.last_wake_copy_seconds;
    r->wake_unregister = s.last_wake_unregister_seconds;
    r->wake_free = s.last_wake_free_seconds;
    r->wake_bytes = s.last_wake_bytes;
    r->sleep_seconds = s.last_sleep_seconds;
    r->sleep_alloc = s.last_sleep_alloc_seconds;
    r->sleep_register = s.last_sleep_register_seconds;
    r->sleep_copy = s.last_sleep_copy_seconds;
    r->sleep_free = s.last_sleep_free_seconds;
    r->sleep_bytes = s.last_sleep_bytes;
    r->returned = s.last_returned;
    r->returned_device = s.last_returned_device;
    r->evicted = s.last_evicted;
    r->hit = s.hits > before.hits;
    r->woke = s.wakes > before.wakes;
    r->footprint = footprint_now() - base;
    r->peak = host_peak();
    return wm_pool_put(p, m, err) != WM_OK;
}

/* GiB/s of `bytes` in `seconds` (0 when either is 0). */
static double gib_per_s(uint64_t bytes, double seconds) {
    return bytes && seconds > 0 ? (double)bytes / (1 << 30) / seconds : 0;
}

static void row_text(const swap_row *r) {
    char b1[32], b2[32], b3[32];
    printf("%5u  %-28.28s %8.3f  %10s  %10s  %10s  %u%s\n", r->cycle, r->file, r->seconds,
           r->footprint < 0 ? "-" : cli_bytes((uint64_t)r->footprint, b1), cli_bytes(r->peak, b2),
           cli_bytes(r->returned + r->returned_device, b3), r->evicted,
           r->hit    ? " (resident)"
           : r->woke ? " (woke)"
                     : "");
    if (r->sleep_bytes)
        printf("       sleep %.3f s: host pages %.3f, registered %.3f, copies %.3f (%.1f GiB/s), "
               "device freed %.3f\n",
               r->sleep_seconds, r->sleep_alloc, r->sleep_register, r->sleep_copy,
               gib_per_s(r->sleep_bytes, r->sleep_copy), r->sleep_free);
    if (r->wake_bytes)
        printf("       wake  %.3f s: device buffers %.3f, copies %.3f (%.1f GiB/s), unregistered "
               "%.3f, host pages freed %.3f\n",
               r->wake_seconds, r->wake_alloc, r->wake_copy, gib_per_s(r->wake_bytes, r->wake_copy),
               r->wake_unregister, r->wake_free);
}

static void row_json(const swap_row *r, bool first) {
    printf("%s{\"cycle\":%u,\"file\":", first ? "" : ",", r->cycle);
    cli_json_cstr(stdout, r->file);
    printf(",\"seconds\":%.6f,\"wake_seconds\":%.6f,\"footprint\":%" PRId64 ",\"peak\":%" PRIu64
           ",\"returned\":%" PRIu64 ",\"returned_device\":%" PRIu64
           ",\"evicted\":%u,\"resident\":%s,\"woke\":%s",
           r->seconds, r->wake_seconds, r->footprint, r->peak, r->returned, r->returned_device,
           r->evicted, r->hit ? "true" : "false", r->woke ? "true" : "false");
    if (r->wake_bytes) /* a device model woken from host memory (not a mapped one's reload) */
        printf(",\"wake\":{\"seconds\":%.6f,\"alloc_seconds\":%.6f,\"copy_seconds\":%.6f,"
               "\"unregister_seconds\":%.6f,\"free_seconds\":%.6f,\"bytes\":%" PRIu64 "}",
               r->wake_seconds, r->wake_alloc, r->wake_copy, r->wake_unregister, r->wake_free,
               r->wake_bytes);
    if (r->sleep_bytes)
        printf(",\"sleep\":{\"seconds\":%.6f,\"alloc_seconds\":%.6f,\"register_seconds\":%.6f,"
               "\"copy_seconds\":%.6f,\"free_seconds\":%.6f,\"bytes\":%" PRIu64 "}",
               r->sleep_seconds, r->sleep_alloc, r->sleep_register, r->sleep_copy, r->sleep_free,
               r->sleep_bytes);
    printf("}");
}

typedef struct swap_verdict {
    uint64_t peak_max, evictions, sleeps, unproven, returned, returned_device, ledger_after;
    int64_t footprint_after;
    bool peak_ok, proven, back, judged;
} swap_verdict;

static void verdict_print(const budget_args *a, const swap_verdict *v) {
    char b1[32], b2[32], b3[32];
    bool ok = v->peak_ok && v->proven && v->back;
    if (a->json) {
        printf("],\"budget\":%" PRIu64 ",\"peak\":%" PRIu64 ",\"peak_slack\":%" PRIu64
               ",\"evictions\":%" PRIu64 ",\"sleeps\":%" PRIu64 ",\"unproven\":%" PRIu64
               ",\"returned\":%" PRIu64 ",\"returned_device\":%" PRIu64
               ",\"footprint_after\":%" PRId64 ",\"footprint_slack\":%" PRIu64
               ",\"ledger_after\":%" PRIu64 ",\"peak_ok\":%s,\"every_eviction_returned\":%s,"
               "\"footprint_back\":%s,\"judged\":%s,\"ok\":%s}\n",
               a->budget, v->peak_max, PEAK_SLACK, v->evictions, v->sleeps, v->unproven,
               v->returned, v->returned_device, v->footprint_after, FOOTPRINT_SLACK,
               v->ledger_after, v->peak_ok ? "true" : "false", v->proven ? "true" : "false",
               v->back ? "true" : "false", v->judged ? "true" : "false",
               ok && v->judged ? "true" : "false");
        return;
    }
    printf("peak %s of a budget of %s (+%s for the pool's own entries): %s\n",
           cli_bytes(v->peak_max, b1), cli_bytes(a->budget, b2), cli_bytes(PEAK_SLACK, b3),
           v->peak_ok ? "within" : "ABOVE");
    char sl[48] = "";
    if (v->sleeps) snprintf(sl, sizeof sl, " and %" PRIu64 " sleeps", v->sleeps);
    if (v->returned_device)
        printf("%" PRIu64 " evictions%s returned %s (host) and %s (device), every byte by the "
               "ledger: %s\n",
               v->evictions, sl, cli_bytes(v->returned, b1), cli_bytes(v->returned_device, b3),
               v->proven ? "yes" : "NO");
    else
        printf("%" PRIu64 " evictions%s returned %s, every byte by the ledger: %s\n", v->evictions,
               sl, cli_bytes(v->returned, b1), v->proven ? "yes" : "NO");
    int64_t fa = v->footprint_after;
    printf("after the pool closed: footprint %s%s (bound %s), ledger %" PRIu64 " bytes: %s\n",
           fa < 0 ? "-" : "+", cli_bytes((uint64_t)(fa < 0 ? -fa : fa), b1),
           cli_bytes(FOOTPRINT_SLACK, b2), v->ledger_after,
           v->back ? "as before" : "NOT as before");
    if (!v->judged)
        printf("verdict: not judged: no switch evicted a model (raise --cycles or add a file)\n");
    else
        printf("verdict: %s\n", ok ? "within budget, every byte returned" : "FAILED");
}

static int swap_run(const budget_args *a, wm_pool *p, int64_t base, swap_verdict *v,
                    wm_error *err) {
    if (a->json)
        printf("{\"switches\":[");
    else
        printf("%5s  %-28s %8s  %10s  %10s  %10s  %s\n", "cycle", "file", "seconds", "footprint",
               "peak", "returned", "evicted");
    bool first = true;
    for (unsigned cyc = 1; cyc <= a->cycles; cyc++)
        for (unsigned i = 0; i < a->n_files; i++) {
            const char *slash = strrchr(a->files[i], '/');
            swap_row r = {.cycle = cyc, .file = slash ? slash + 1 : a->files[i]};
            if (one_switch(p, a, i, base, &r, err)) return 1;
            if (r.peak > v->peak_max) v->peak_max = r.peak;
            a->json ? row_json(&r, first) : row_text(&r);
            first = false;
        }
    return 0;
}

int cmd_swap(int argc, char **argv) {
    budget_args a;
    int u = parse(&a, "swap", argc, argv);
    if (u) return u;
    if (!a.budget) return cli_usage("swap: --budget is required");
    if (a.llama && !CLI_HAVE_LLAMA)
        return cli_usage("swap: --llama needs the llama.cpp bridge, which this build lacks: run "
                         "scripts/llama.sh (or make llama), then configure again (WM_LLAMA=AUTO)");
    if (a.llama && (a.opts.backend != WM_BACKEND_CPU || a.sleep || a.opts.lock))
        return cli_usage("swap: --llama runs llama.cpp on the CPU: --backend, --sleep and --lock "
                         "do not apply");
    if (a.llama)
        return cli_swap_llama(a.files, a.n_files, a.mode_name, a.cycles, a.budget, a.json,
                              a.opts.threads);
    wm_error err = {0};
    if (a.opts.backend != WM_BACKEND_CPU &&
        wm_backend_init(a.opts.backend, a.opts.device, &err) != WM_OK)
        return cli_fail(&err);
    if (refuse_early(&a, &err)) return cli_fail(&err);
    int64_t base = footprint_now();
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    po.budget = a.budget;
    po.device_budget = a.device_budget;
    po.flags = a.sleep ? WM_POOL_SLEEP : 0;
    wm_pool *p;
    if (wm_pool_open(&po, &p, &err)) return cli_fail(&err);
    swap_verdict v = {0};
    int rc = swap_run(&a, p, base, &v, &err);
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(p, &s);
    wm_pool_close(p, NULL); /* every model was put back */
    if (rc) {
        if (a.json) printf("]}\n");
        return cli_fail(&err);
    }
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    v.evictions = s.evictions;
    v.sleeps = s.sleeps;
    v.unproven = s.unproven;
    v.returned = s.returned;
    v.returned_device = s.returned_device;
    v.ledger_after = wm_ledger_bytes(&l);
    v.footprint_after = footprint_now() - base;
    v.peak_ok = v.peak_max <= a.budget + PEAK_SLACK;
    v.proven = v.unproven == 0;
    v.back = v.ledger_after == 0 && v.footprint_after <= (int64_t)FOOTPRINT_SLACK &&
             v.footprint_after >= -(int64_t)FOOTPRINT_SLACK;
    v.judged = v.evictions + v.sleeps > 0;
    verdict_print(&a, &v);
    return v.peak_ok && v.proven && v.back && v.judged ? 0 : 1;
}
