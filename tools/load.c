/*
 * load.c: `weightmap load`, `weightmap check` and `weightmap demo`.
 *
 * Sections: one measured cycle (load, touch, figures, release, figures); the progress bar;
 * `load`; `check` (every mode, several cycles, the verdict "all memory returned"); `demo`
 * (check on the default model, made on first use).
 *
 * Figures: `loaded` are deltas from a baseline taken before the first load (footprint, resident)
 * or absolute figures of the weight file's regions (privatised, locked, file_regions);
 * `released` is measured after the last release: the footprint delta, the library's ledger
 * (bytes and regions, which must be 0) and the regions of the process that still map the file.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FOOTPRINT_SLACK ((uint64_t)64 * 1024) /* allocator noise allowed after release */
#define MAX_REGIONS 256

typedef struct figures {
    uint64_t footprint, resident, privatised, locked, file_regions;
    uint64_t ledger_bytes, ledger_regions;
} figures;

typedef struct cycle_result {
    double load_seconds;
    int64_t footprint, resident; /* loaded: deltas from the baseline */
    uint64_t privatised, locked, file_regions, ledger_locked;
    int64_t released_footprint;
    uint64_t ledger_bytes, ledger_regions, released_regions;
    wm_model_stats stats;
} cycle_result;

typedef struct load_args {
    const char *path;
    const struct shard_paths *shards;
    wm_load_options opts;
    bool touch, json;
    unsigned cycles;
    wm_convert_rule rules[8];
    int devices[WM_LEDGER_DEVICES]; /* --backend cuda:0,1 (opts.devices points here) */
    wm_cuda_options cuda;           /* --registered, --direct, --pinned-budget (opts.cuda) */
    bool cuda_set;
} load_args;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The files whose mappings are counted: every shard of a sharded set, else the file itself. */
typedef struct shard_paths {
    char **path;
    unsigned n;
} shard_paths;

static void paths_free(shard_paths *ps) {
    for (unsigned i = 0; i < ps->n; i++)
        free(ps->path[i]);
    free(ps->path);
    ps->path = NULL;
    ps->n = 0;
}

static int paths_collect(const char *path, shard_paths *ps, wm_error *err) {
    wm_file *f;
    if (wm_file_open(path, &f, err) != WM_OK) return 1;
    unsigned n = wm_file_shard_count(f);
    ps->path = calloc(n ? n : 1, sizeof *ps->path);
    for (unsigned i = 0; ps->path && i < n; i++) {
        ps->path[i] = strdup(wm_file_shard_path(f, i));
        if (!ps->path[i]) break;
        ps->n++;
    }
    wm_file_close(f);
    if (ps->n != n) {
        paths_free(ps);
        snprintf(err->msg, sizeof err->msg, "%s: out of memory", path);
        return 1;
    }
    return 0;
}

static int measure(const shard_paths *ps, figures *f, wm_error *err) {
    wm_mem_figures m;
    if (wm_mem_figures_get(0, &m, err) != WM_OK) return 1;
    f->footprint = m.footprint;
    f->resident = m.resident;
    f->privatised = f->locked = 0;
    f->file_regions = 0;
    for (unsigned k = 0; k < ps->n; k++) {
        wm_file_region regs[MAX_REGIONS];
        size_t n = 0;
        if (wm_mem_file_regions(0, ps->path[k], regs, MAX_REGIONS, &n, err) != WM_OK) return 1;
        for (size_t i = 0; i < n && i < MAX_REGIONS; i++) {
            f->privatised += regs[i].privatised;
            f->locked += regs[i].locked;
        }
        f->file_regions += n;
    }
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    f->ledger_bytes = wm_ledger_bytes(&l);
    f->ledger_regions = wm_ledger_regions(&l);
    return 0;
}

/* ---- progress bar ---- */

typedef struct bar {
    bool on;
    double t0, last;
    bool drawn;
} bar;

/* Drawn from the second second on, ten times a second at most. */
static int draw(void *user, uint64_t done, uint64_t total) {
    bar *b = user;
    double t = now_s(), dt = t - b->t0;
    if (!b->on || dt < 1.0 || total == 0 || (t - b->last < 0.1 && done < total)) return 0;
    b->last = t;
    double rate = (double)done / dt;
    double eta = rate > 0 ? (double)(total - done) / rate : 0;
    int w = 30, fill = (int)((double)w * (double)done / (double)total);
    char b1[32], b2[32];
    fprintf(stdout, "\r[%.*s%*s] %s / %s  %.2f GB/s  ETA %.0fs ", fill,
            "##############################", w - fill, "", cli_bytes(done, b1),
            cli_bytes(total, b2), rate / 1e9, eta);
    fflush(stdout);
    b->drawn = true;
    return 0;
}

static void bar_end(bar *b) {
    if (b->drawn) fputs("\r\033[K", stdout);
    b->drawn = false;
}

/* ---- one cycle ---- */

static volatile uint64_t touch_sink;

static void touch_all(wm_model *m) {
    const wm_file *f = wm_model_file(m);
    uint64_t s = 0;
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        const unsigned char *p = wm_model_tensor_data(m, i);
        uint64_t n = 0;
        wm_model_tensor_info(m, i, NULL, &n);
        if (!p) continue;
        for (uint64_t k = 0; k < n; k += 4096)
            s += p[k];
        if (n) s += p[n - 1];
    }
    touch_sink += s;
}

static int run_cycles(const load_args *a, wm_file *f, cycle_result *res, unsigned cycles,
                      const figures *base, wm_error *err) {
    bar b = {.on = !a->json && isatty(1)};
    for (unsigned c = 0; c < cycles; c++) {
        wm_load_options o = a->opts;
        b.t0 = now_s();
        o.progress = draw;
        o.progress_user = &b;
        wm_model *m;
        double t0 = now_s();
        wm_status st = wm_model_load(f, &o, &m, err);
        double t1 = now_s();
        bar_end(&b);
        if (st != WM_OK) return 1;
        cycle_result *r = &res[c];
        r->load_seconds = t1 - t0;
        if (a->touch) touch_all(m);
        wm_model_stats_get(m, &r->stats);
        figures loaded;
        if (measure(a->shards, &loaded, err)) {
            wm_model_release(m);
            return 1;
        }
        wm_ledger l = WM_LEDGER_INIT;
        wm_ledger_get(&l);
        r->ledger_locked = l.cat[WM_LEDGER_LOCKED].current;
        (void)l;
        r->footprint = (int64_t)(loaded.footprint - base->footprint);
        r->resident = (int64_t)(loaded.resident - base->resident);
        r->privatised = loaded.privatised;
        r->locked = r->stats.locked_bytes;
        r->file_regions = loaded.file_regions;
        wm_model_release(m);
        figures after;
        if (measure(a->shards, &after, err)) return 1;
        /* the open file's own header bytes are in base; the model must leave nothing */
        r->released_footprint = (int64_t)(after.footprint - base->footprint);
        r->ledger_bytes = after.ledger_bytes - base->ledger_bytes;
        r->ledger_regions = after.ledger_regions - base->ledger_regions;
        r->released_regions = after.file_regions;
    }
    return 0;
}

static bool cycle_ok(const cycle_result *r) {
    return r->ledger_bytes == 0 && r->ledger_regions == 0 && r->released_regions == 0 &&
           r->released_footprint <= (int64_t)FOOTPRINT_SLACK;
}

/* ---- option parsing shared by load and check ---- */

static int parse_convert(load_args *a, const char *spec) {
    /* SPEC: TYPE (everything to TYPE) or FROM:TO, comma-separated: "f32", "f16:f32,bf16:f32" */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    size_t n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == sizeof a->rules / sizeof a->rules[0])
            return cli_usage("--convert: too many rules");
        char *colon = strchr(tok, ':');
        wm_type from = WM_TYPE_INVALID, to;
        if (colon) {
            *colon = 0;
            from = wm_type_from_name(tok);
            if (from == WM_TYPE_INVALID) return cli_usage("--convert: unknown type '%s'", tok);
            to = cli_target_type(colon + 1);
        } else {
            to = cli_target_type(tok);
        }
        if (to == WM_TYPE_INVALID)
            return cli_usage("--convert: '%s': the target must be one of " CLI_TARGETS, spec);
        a->rules[n++] = (wm_convert_rule){NULL, from, to};
    }
    a->opts.convert = a->rules;
    a->opts.n_convert = n;
    return 0;
}

/* "cpu", "cuda", "cuda:N" or "cuda:N,M,..." (wm_backend_from_name): several devices fill
 * opts.devices. */
static int parse_backend(load_args *a, const char *v, const char *cmd) {
    wm_error err;
    unsigned n;
    if (wm_backend_from_name(v, &a->opts.backend, a->devices, WM_LEDGER_DEVICES, &n, &err))
        return cli_usage("%s: bad --backend: %s", cmd, err.msg);
    a->opts.device = n ? a->devices[0] : 0;
    a->opts.devices = n > 1 ? a->devices : NULL;
    a->opts.n_devices = n > 1 ? n : 0;
    return 0;
}

/* Starts the backend's runtime on every device of the load (wm_backend_init). */
static wm_status init_backend(const load_args *a, wm_error *err) {
    unsigned n = a->opts.n_devices > 1 ? a->opts.n_devices : 1;
    for (unsigned k = 0; k < n; k++) {
        wm_status st =
            wm_backend_init(a->opts.backend, n > 1 ? a->devices[k] : a->opts.device, err);
        if (st) return st;
    }
    return WM_OK;
}

static int parse_common(load_args *a, int argc, char **argv, bool need_mode, const char *cmd) {
    a->cycles = 1;
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t n;
        if (!strcmp(s, "--mode") && v) {
            a->opts.mode = wm_mode_from_name(v);
            if (a->opts.mode == WM_MODE_NONE)
                return cli_usage("%s: unknown mode '%s' (heap, mmap, mmap-private)", cmd, v);
            i++;
        } else if (!strcmp(s, "--lock")) {
            a->opts.lock = WM_LOCK_REQUIRED;
        } else if (!strcmp(s, "--lock=best-effort")) {
            a->opts.lock = WM_LOCK_BEST_EFFORT;
        } else if (!strcmp(s, "--lock=required")) {
            a->opts.lock = WM_LOCK_REQUIRED;
        } else if (!strcmp(s, "--prefetch")) {
            a->opts.prefetch = 1;
        } else if (!strcmp(s, "--touch")) {
            a->touch = true;
        } else if (!strcmp(s, "--json")) {
            a->json = true;
        } else if (!strcmp(s, "--cycles") && v) {
            if (!cli_parse_u64(v, &n) || n == 0 || n > 100000)
                return cli_usage("%s: bad --cycles '%s'", cmd, v);
            a->cycles = (unsigned)n;
            i++;
        } else if (!strcmp(s, "--threads") && v) {
            if (!cli_parse_u64(v, &n) || n > 64) return cli_usage("%s: bad --threads '%s'", cmd, v);
            a->opts.threads = (unsigned)n;
            i++;
        } else if (!strcmp(s, "--max-buffer") && v) {
            if (!cli_parse_u64(v, &n)) return cli_usage("%s: bad --max-buffer '%s'", cmd, v);
            a->opts.max_buffer_size = n;
            i++;
        } else if (!strcmp(s, "--pinned-budget") && v) {
            if (!cli_parse_u64(v, &n) || !n)
                return cli_usage("%s: bad --pinned-budget '%s'", cmd, v);
            a->cuda.pinned_budget = n;
            a->cuda_set = true;
            i++;
        } else if (!strcmp(s, "--convert") && v) {
            int rc = parse_convert(a, v);
            if (rc) return rc;
            i++;
        } else if (!strcmp(s, "--backend") && v) {
            int rc = parse_backend(a, v, cmd);
            if (rc) return rc;
            i++;
        } else if (!strcmp(s, "--placement") && v) {
            if (!strcmp(v, "balance"))
                a->opts.placement = WM_PLACE_BALANCE;
            else if (!strcmp(v, "layers"))
                a->opts.placement = WM_PLACE_LAYERS;
            else
                return cli_usage("%s: unknown placement '%s' (balance, layers)", cmd, v);
            i++;
        } else if (!strcmp(s, "--registered")) {
            a->cuda.registered = 1;
            a->cuda_set = true;
        } else if (!strcmp(s, "--direct")) {
            a->cuda.direct_io = 1;
            a->cuda_set = true;
        } else if (s[0] == '-') {
            return cli_usage("%s: unknown option %s", cmd, s);
        } else if (!a->path) {
            a->path = s;
        } else {
            return cli_usage("%s: one FILE only", cmd);
        }
    }
    if (!a->path) return cli_usage("%s: FILE missing", cmd);
    a->opts.size = sizeof a->opts;
    a->cuda.size = sizeof a->cuda;
    if (a->cuda_set || a->opts.backend == WM_BACKEND_CUDA) a->opts.cuda = &a->cuda;
    if (need_mode && a->opts.mode == WM_MODE_NONE)
        return cli_usage("%s: --mode is required (heap, mmap or mmap-private): there is no default",
                         cmd);
    return 0;
}

static void json_figs(FILE *o, const cycle_result *r) {
    fprintf(o,
            "\"loaded\": {\"footprint\": %" PRId64 ", \"resident\": %" PRId64
            ", \"privatised\": %" PRIu64 ", \"locked\": %" PRIu64 ", \"file_regions\": %" PRIu64
            "}, \"released\": {\"footprint_delta\": %" PRId64 ", \"ledger_bytes\": %" PRIu64
            ", \"ledger_regions\": %" PRIu64 ", \"file_regions\": %" PRIu64 "}",
            r->footprint, r->resident, r->privatised, r->locked, r->file_regions,
            r->released_footprint, r->ledger_bytes, r->ledger_regions, r->released_regions);
}

static const char *sbytes(int64_t v, char buf[32]) {
    if (v >= 0) return cli_bytes((uint64_t)v, buf);
    char t[32];
    cli_bytes((uint64_t)-v, t);
    snprintf(buf, 32, "-%.24s", t);
    return buf;
}

/* The released figures of the last cycle, taken again once the file is closed: the ledger must
 * then read exactly 0 and the footprint be back at its value before the file was opened. */
static void final_figures(cycle_result *r, const figures *closed, const figures *before_open) {
    r->released_footprint = (int64_t)(closed->footprint - before_open->footprint);
    r->ledger_bytes = closed->ledger_bytes;
    r->ledger_regions = closed->ledger_regions;
    r->released_regions = closed->file_regions;
}

/* ---- load ---- */

int cmd_load(int argc, char **argv) {
    load_args a = {0};
    int rc = parse_common(&a, argc, argv, true, "load");
    if (rc) return rc;
    wm_file *f;
    wm_error err;
    figures before_open;
    /* A device runtime's own memory stays until exit: start it before the first figures. */
    if (init_backend(&a, &err) != WM_OK) return cli_fail(&err);
    shard_paths sp = {0};
    if (paths_collect(a.path, &sp, &err)) return cli_fail(&err);
    a.shards = &sp;
    if (measure(&sp, &before_open, &err) || wm_file_open(a.path, &f, &err) != WM_OK) {
        paths_free(&sp);
        return cli_fail(&err);
    }
    figures base;
    cycle_result *res = calloc(a.cycles, sizeof *res);
    if (!res || measure(&sp, &base, &err) || run_cycles(&a, f, res, a.cycles, &base, &err)) {
        free(res);
        wm_file_close(f);
        paths_free(&sp);
        return res ? cli_fail(&err) : 1;
    }
    /* After the last release, close the file too: then the ledger must read exactly 0. */
    uint64_t size = wm_file_size(f);
    wm_file_close(f);
    f = NULL;
    figures closed;
    int mrc = measure(&sp, &closed, &err);
    paths_free(&sp);
    if (mrc) {
        free(res);
        return cli_fail(&err);
    }
    final_figures(&res[a.cycles - 1], &closed, &before_open);
    bool ok = true;
    for (unsigned c = 0; c < a.cycles; c++)
        ok = ok && cycle_ok(&res[c]);
    if (a.json) {
        printf("{\"file\": ");
        cli_json_cstr(stdout, a.path);
        printf(", \"size\": %" PRIu64 ", \"mode\": \"%s\", \"lock\": \"%s\", \"backend\": \"%s\", "
               "\"threads\": %u, \"tensor_bytes\": %" PRIu64 ", \"buffers\": %u, \"ok\": %s, "
               "\"cycles\": [",
               size, wm_mode_name(a.opts.mode),
               a.opts.lock == WM_LOCK_OFF        ? "off"
               : a.opts.lock == WM_LOCK_REQUIRED ? "required"
                                                 : "best-effort",
               wm_backend_name(a.opts.backend), res[0].stats.threads, res[0].stats.tensor_bytes,
               res[0].stats.buffers, ok ? "true" : "false");
        for (unsigned c = 0; c < a.cycles; c++) {
            printf("%s{\"cycle\": %u, \"load_seconds\": %.6f, \"committed\": %" PRIu64 ", ",
                   c ? ", " : "", c + 1, res[c].load_seconds, res[c].stats.committed);
            json_figs(stdout, &res[c]);
            putchar('}');
        }
        printf("]}\n");
    } else {
        char b[8][32];
        printf("%s: mode %s, %u buffer(s), %s of tensors, %u thread(s)\n", a.path,
               wm_mode_name(a.opts.mode), res[0].stats.buffers,
               cli_bytes(res[0].stats.tensor_bytes, b[0]), res[0].stats.threads);
        printf("%5s %9s %9s | %11s %11s %11s %11s %7s | %11s %11s %7s\n", "cycle", "load s", "GB/s",
               "footprint", "resident", "privatised", "locked", "regions", "left", "ledger",
               "regions");
        for (unsigned c = 0; c < a.cycles; c++) {
            const cycle_result *r = &res[c];
            printf("%5u %9.4f %9.2f | %11s %11s %11s %11s %7" PRIu64 " | %11s %11s %7" PRIu64 "\n",
                   c + 1, r->load_seconds,
                   (double)r->stats.tensor_bytes / (r->load_seconds > 0 ? r->load_seconds : 1) /
                       1e9,
                   sbytes(r->footprint, b[1]), sbytes(r->resident, b[2]),
                   cli_bytes(r->privatised, b[3]), cli_bytes(r->locked, b[4]), r->file_regions,
                   sbytes(r->released_footprint, b[5]), cli_bytes(r->ledger_bytes, b[6]),
                   r->released_regions);
        }
        printf("%s\n", ok ? "all memory returned" : "MEMORY NOT RETURNED");
    }
    free(res);
    return ok ? 0 : 1;
}

/* ---- check ---- */

static int check_file(const char *path, unsigned cycles, bool json, unsigned threads) {
    static const wm_mode modes[] = {WM_MODE_HEAP, WM_MODE_MMAP, WM_MODE_MMAP_PRIVATE};
    enum { NM = 3 };
    wm_error err;
    shard_paths sp = {0};
    if (paths_collect(path, &sp, &err)) return cli_fail(&err);
    cycle_result *res = calloc((size_t)NM * cycles, sizeof *res);
    if (!res) {
        paths_free(&sp);
        return 1;
    }
    bool all_ok = true;
    bool mode_ok[NM];
    double best[NM];
    uint64_t size = 0, tensor_bytes = 0;
    size_t n_tensors = 0;
    for (int k = 0; k < NM; k++) {
        /* Each mode: open, cycles, close; `released` is measured with the file closed. */
        figures before_open, base, closed;
        wm_file *f;
        if (measure(&sp, &before_open, &err) || wm_file_open(path, &f, &err) != WM_OK) {
            free(res);
            paths_free(&sp);
            return cli_fail(&err);
        }
        size = wm_file_size(f);
        tensor_bytes = wm_file_tensor_bytes(f);
        n_tensors = wm_file_tensor_count(f);
        load_args a = {.path = path, .shards = &sp, .touch = true, .json = json, .cycles = cycles};
        a.opts.mode = modes[k];
        a.opts.threads = threads;
        cycle_result *r = res + (size_t)k * cycles;
        if (measure(&sp, &base, &err) || run_cycles(&a, f, r, cycles, &base, &err)) {
            free(res);
            wm_file_close(f);
            paths_free(&sp);
            return cli_fail(&err);
        }
        wm_file_close(f);
        if (measure(&sp, &closed, &err)) {
            free(res);
            paths_free(&sp);
            return cli_fail(&err);
        }
        final_figures(&r[cycles - 1], &closed, &before_open);
        mode_ok[k] = true;
        best[k] = 1e30;
        for (unsigned c = 0; c < cycles; c++) {
            mode_ok[k] = mode_ok[k] && cycle_ok(&r[c]);
            if (r[c].load_seconds < best[k]) best[k] = r[c].load_seconds;
        }
        all_ok = all_ok && mode_ok[k];
    }
    if (json) {
        printf("{\"file\": ");
        cli_json_cstr(stdout, path);
        printf(", \"size\": %" PRIu64 ", \"ok\": %s, \"modes\": [", size,
               all_ok ? "true" : "false");
        for (int k = 0; k < NM; k++) {
            /* loaded: the first cycle; released: after the last release */
            const cycle_result *first = &res[(size_t)k * cycles];
            cycle_result r = *first;
            const cycle_result *last = &res[(size_t)k * cycles + cycles - 1];
            r.released_footprint = last->released_footprint;
            r.ledger_bytes = last->ledger_bytes;
            r.ledger_regions = last->ledger_regions;
            r.released_regions = last->released_regions;
            printf("%s{\"mode\": \"%s\", \"cycles\": %u, \"load_seconds\": %.6f, \"ok\": %s, ",
                   k ? ", " : "", wm_mode_name(modes[k]), cycles, best[k],
                   mode_ok[k] ? "true" : "false");
            json_figs(stdout, &r);
            putchar('}');
        }
        printf("]}\n");
    } else {
        char b[8][32];
        printf("%s: %s of tensors in %zu tensors, %u cycles per mode (best load time shown)\n\n",
               path, cli_bytes(tensor_bytes, b[0]), n_tensors, cycles);
        printf("%-13s %8s %8s | %11s %11s %11s %7s | %11s %9s %7s | %s\n", "mode", "load s", "GB/s",
               "footprint", "privatised", "locked", "regions", "left", "ledger", "regions",
               "verdict");
        for (int k = 0; k < NM; k++) {
            const cycle_result *r = &res[(size_t)k * cycles];
            const cycle_result *last = &res[(size_t)k * cycles + cycles - 1];
            /* GB/s only where the load moves the bytes (heap); a mapping is ready at once */
            char rate[16] = "-";
            if (modes[k] == WM_MODE_HEAP && best[k] > 0)
                snprintf(rate, sizeof rate, "%.2f", (double)tensor_bytes / best[k] / 1e9);
            printf("%-13s %8.4f %8s | %11s %11s %11s %7" PRIu64 " | %11s %9s %7" PRIu64 " | %s\n",
                   wm_mode_name(modes[k]), best[k], rate, sbytes(r->footprint, b[1]),
                   cli_bytes(r->privatised, b[2]), cli_bytes(r->locked, b[3]), r->file_regions,
                   sbytes(last->released_footprint, b[4]), cli_bytes(last->ledger_bytes, b[5]),
                   last->released_regions, mode_ok[k] ? "ok" : "LEAK");
        }
        printf("\n%s\n", all_ok ? "all memory returned: every mode gave every byte back"
                                : "MEMORY NOT RETURNED: see the rows marked LEAK");
    }
    free(res);
    paths_free(&sp);
    return all_ok ? 0 : 1;
}

int cmd_check(int argc, char **argv) {
    const char *path = NULL;
    uint64_t cycles = 3, threads = 0;
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--cycles") && i + 1 < argc) {
            if (!cli_parse_u64(argv[++i], &cycles) || !cycles || cycles > 100000)
                return cli_usage("check: bad --cycles '%s'", argv[i]);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (!cli_parse_u64(argv[++i], &threads) || threads > 64)
                return cli_usage("check: bad --threads '%s'", argv[i]);
        } else if (argv[i][0] == '-')
            return cli_usage("check: unknown option %s", argv[i]);
        else if (!path)
            path = argv[i];
        else
            return cli_usage("check: one FILE only");
    }
    if (!path) return cli_usage("check: FILE missing");
    return check_file(path, (unsigned)cycles, json, (unsigned)threads);
}

/* ---- demo ---- */

int cmd_demo(int argc, char **argv) {
    const char *model = NULL;
    uint64_t cycles = 3;
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--cycles") && i + 1 < argc) {
            if (!cli_parse_u64(argv[++i], &cycles) || !cycles)
                return cli_usage("demo: bad --cycles");
        } else
            return cli_usage("demo: unknown option %s", argv[i]);
    }
    char def[4096];
    if (!model) {
        const char *cache = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (cache && *cache)
            snprintf(def, sizeof def, "%s/weightmap", cache);
        else
            snprintf(def, sizeof def, "%s/.cache/weightmap", home && *home ? home : "/tmp");
        mkdir(def, 0755);
        size_t n = strlen(def);
        snprintf(def + n, sizeof def - n, "/default-512M.gguf");
        model = def;
    }
    struct stat st;
    if (stat(model, &st) != 0) {
        if (!json) fprintf(stderr, "weightmap: making the default model %s (512 MiB)\n", model);
        char *args[] = {(char *)model, "--size", "512M", NULL};
        int rc = cmd_make_model(3, args);
        if (rc) return rc;
    }
    return check_file(model, (unsigned)cycles, json, 0);
}
