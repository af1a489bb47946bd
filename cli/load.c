/*
 * load.c: `weightmap load` and `weightmap check` (demo.c runs check too, through
 * cli_check_file).
 *
 * Sections: one measured cycle (load, touch, figures, release, figures); the progress bar;
 * options; `load` (with --hold, the last model stays loaded until a signal); `check` (every
 * mode, several cycles, the verdict "all memory returned").
 *
 * Figures: `loaded` are deltas from a baseline taken before the first load (footprint, resident)
 * or absolute figures of the weight file's regions (privatised, locked, file_regions);
 * `released` is measured after the last release: the footprint delta, the library's ledger
 * (bytes and regions, which must be 0) and the regions of the process that still map the file.
 */
#include "cli.h"

#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
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
    bool set;         /* --set: a shard opens its whole set (cli_open) */
    bool hold;        /* --hold: the last cycle waits for a signal before its release */
    sigset_t signals; /* the signals --hold waits for, blocked from the start of the command */
    unsigned cycles;
    wm_convert_rule rules[8];
    int devices[WM_LEDGER_DEVICES]; /* --backend cuda:0,1 (opts.devices points here) */
    wm_cuda_options cuda;           /* --registered, --direct, --pinned-budget (opts.cuda) */
    bool cuda_set;
    const cli_via *via; /* check --ggml: load, verify and release that way */
    bool ggml;          /* check --ggml was given */
    bool llama;         /* check --llama was given */
} load_args;

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

static int paths_collect(const char *path, bool set, shard_paths *ps, wm_error *err) {
    wm_file *f;
    if (cli_open(path, set, &f, err) != WM_OK) return 1;
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
    double t = cli_now_s(), dt = t - b->t0;
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

/* --hold: says which process holds the model, then waits for SIGINT, SIGTERM or SIGUSR1. They
 * were blocked before the first load (so the load's worker threads inherit the mask and none of
 * them takes the signal): one sent before this point is pending, and sigwait returns at once. */
static void hold(const load_args *a) {
    FILE *o = a->json ? stderr : stdout;
    fprintf(o, "pid %d holds %s loaded (mode %s); SIGINT, SIGTERM or SIGUSR1 releases it\n",
            (int)getpid(), a->path, wm_mode_name(a->opts.mode));
    fflush(o);
    int sig;
    sigwait(&a->signals, &sig);
}

static int run_cycles(const load_args *a, wm_file *f, cycle_result *res, unsigned cycles,
                      const figures *base, wm_error *err) {
    bar b = {.on = !a->json && isatty(1)};
    for (unsigned c = 0; c < cycles; c++) {
        wm_load_options o = a->opts;
        b.t0 = cli_now_s();
        o.progress = draw;
        o.progress_user = &b;
        wm_model *own = NULL;
        const wm_model *m = NULL;
        void *handle = NULL;
        double t0 = cli_now_s();
        wm_status st =
            a->via ? a->via->load(f, &o, &handle, &m, err) : wm_model_load(f, &o, &own, err);
        double t1 = cli_now_s();
        bar_end(&b);
        if (st != WM_OK) return 1;
        if (own) m = own;
        cycle_result *r = &res[c];
        r->load_seconds = t1 - t0;
        if (a->via && a->via->verify(handle, err)) {
            a->via->release(handle);
            return 1;
        }
        if (own && a->touch) touch_all(own);
        r->stats = (wm_model_stats)WM_MODEL_STATS_INIT;
        wm_model_stats_get(m, &r->stats);
        figures loaded;
        if (measure(a->shards, &loaded, err)) {
            a->via ? a->via->release(handle) : wm_model_release(own);
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
        if (a->hold && c + 1 == cycles) hold(a);
        a->via ? a->via->release(handle) : wm_model_release(own);
        figures after;
        if (measure(a->shards, &after, err)) return 1;
        /* the open file's own header bytes are in base; the model must leave nothing */
        r->released_footprint = (int64_t)(after.footprint - base->footprint);
        r->ledger_bytes = after.ledger_bytes - base->ledger_bytes;
        r->ledger_regions = after.ledger_regions - base->ledger_regions;
        /* a header large enough to be mapped (file.c) is the open file's too, like its bytes */
        r->released_regions = after.file_regions - base->file_regions;
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

/* One option of load or check (p holds it); 0, or 2 after a usage error. */
static int load_option(load_args *a, const cli_args *p) {
    const char *v = p->value, *cmd = p->cmd->name;
    uint64_t n;
    if (cli_is(p, "set")) {
        a->set = true;
    } else if (cli_is(p, "mode")) {
        a->opts.mode = wm_mode_from_name(v);
        if (a->opts.mode == WM_MODE_NONE) return cli_bad_value(p, "heap, mmap or mmap-private");
    } else if (cli_is(p, "lock")) {
        if (!v || !strcmp(v, "required"))
            a->opts.lock = WM_LOCK_REQUIRED;
        else if (!strcmp(v, "best-effort"))
            a->opts.lock = WM_LOCK_BEST_EFFORT;
        else
            return cli_bad_value(p, "best-effort or required");
    } else if (cli_is(p, "prefetch")) {
        a->opts.prefetch = 1;
    } else if (cli_is(p, "touch")) {
        a->touch = true;
    } else if (cli_is(p, "json")) {
        a->json = true;
    } else if (cli_is(p, "hold")) {
        a->hold = true;
    } else if (cli_is(p, "ggml")) {
        a->ggml = true;
    } else if (cli_is(p, "llama")) {
        a->llama = true;
    } else if (cli_is(p, "cycles") || cli_is(p, "threads")) {
        if (cli_value_u64(p, &n)) return 2;
        *(cli_is(p, "cycles") ? &a->cycles : &a->opts.threads) = (unsigned)n;
    } else if (cli_is(p, "max-buffer")) {
        return cli_value_u64(p, &a->opts.max_buffer_size);
    } else if (cli_is(p, "pinned-budget")) {
        a->cuda_set = true;
        return cli_value_u64(p, &a->cuda.pinned_budget);
    } else if (cli_is(p, "convert")) {
        return parse_convert(a, v);
    } else if (cli_is(p, "backend")) {
        return parse_backend(a, v, cmd);
    } else if (cli_is(p, "placement")) {
        if (!strcmp(v, "balance"))
            a->opts.placement = WM_PLACE_BALANCE;
        else if (!strcmp(v, "layers"))
            a->opts.placement = WM_PLACE_LAYERS;
        else
            return cli_bad_value(p, "balance or layers");
    } else if (cli_is(p, "registered")) {
        a->cuda.registered = 1;
        a->cuda_set = true;
    } else if (cli_is(p, "direct")) {
        a->cuda.direct_io = 1;
        a->cuda_set = true;
    } else if (cli_is(p, "direct-io")) {
        if (!strcmp(v, "auto"))
            a->opts.direct_io = WM_DIRECT_AUTO;
        else if (!strcmp(v, "off"))
            a->opts.direct_io = WM_DIRECT_OFF;
        else if (!strcmp(v, "on"))
            a->opts.direct_io = WM_DIRECT_ON;
        else
            return cli_bad_value(p, "auto, off or on");
    }
    return 0;
}

/* The arguments of load or check (the table lists which options each takes). */
static int parse_common(load_args *a, int argc, char **argv, const char *cmd) {
    cli_args p;
    cli_args_init(&p, cmd, argc, argv);
    for (int k; (k = cli_next(&p)) != CLI_END;) {
        if (k == CLI_ERROR) return 2;
        if (k == CLI_ARG) {
            if (a->path) return cli_usage("%s: one FILE only", cmd);
            a->path = p.value;
            continue;
        }
        int rc = load_option(a, &p);
        if (rc) return rc;
    }
    if (!a->path) return cli_usage("%s: FILE missing", cmd);
    a->opts.size = sizeof a->opts;
    a->cuda.size = sizeof a->cuda;
    if (a->cuda_set || a->opts.backend == WM_BACKEND_CUDA) a->opts.cuda = &a->cuda;
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

/* load's report: the table, or one line of JSON. */
static void load_report(const load_args *a, const cycle_result *res, uint64_t size, bool ok) {
    if (a->json) {
        printf("{\"file\": ");
        cli_json_cstr(stdout, a->path);
        printf(", \"size\": %" PRIu64 ", \"mode\": \"%s\", \"lock\": \"%s\", \"backend\": \"%s\", "
               "\"threads\": %u, \"tensor_bytes\": %" PRIu64 ", \"buffers\": %u, \"ok\": %s, "
               "\"cycles\": [",
               size, wm_mode_name(a->opts.mode),
               a->opts.lock == WM_LOCK_OFF        ? "off"
               : a->opts.lock == WM_LOCK_REQUIRED ? "required"
                                                  : "best-effort",
               wm_backend_name(a->opts.backend), res[0].stats.threads, res[0].stats.tensor_bytes,
               res[0].stats.buffers, ok ? "true" : "false");
        for (unsigned c = 0; c < a->cycles; c++) {
            printf("%s{\"cycle\": %u, \"load_seconds\": %.6f, \"committed\": %" PRIu64
                   ", \"read_direct\": %" PRIu64 ", \"read_buffered\": %" PRIu64 ", ",
                   c ? ", " : "", c + 1, res[c].load_seconds, res[c].stats.committed,
                   res[c].stats.read_direct, res[c].stats.read_buffered);
            json_figs(stdout, &res[c]);
            putchar('}');
        }
        printf("]}\n");
    } else {
        char b[8][32];
        printf("%s: mode %s, %u buffer(s), %s of tensors, %u thread(s)\n", a->path,
               wm_mode_name(a->opts.mode), res[0].stats.buffers,
               cli_bytes(res[0].stats.tensor_bytes, b[0]), res[0].stats.threads);
        printf("%5s %9s %9s | %11s %11s %11s %11s %7s | %11s %11s %7s\n", "cycle", "load s", "GB/s",
               "footprint", "resident", "privatised", "locked", "regions", "left", "ledger",
               "regions");
        /* GB/s only where the load itself moves the bytes: heap mode, --prefetch, a device; a
         * mapping is made at once and read later (--touch reads it after the timed load) */
        bool moved =
            a->opts.mode == WM_MODE_HEAP || a->opts.prefetch || a->opts.backend != WM_BACKEND_CPU;
        for (unsigned c = 0; c < a->cycles; c++) {
            const cycle_result *r = &res[c];
            char rate[16] = "-";
            if (moved && r->load_seconds > 0)
                snprintf(rate, sizeof rate, "%.2f",
                         (double)r->stats.tensor_bytes / r->load_seconds / 1e9);
            printf("%5u %9.4f %9s | %11s %11s %11s %11s %7" PRIu64 " | %11s %11s %7" PRIu64 "\n",
                   c + 1, r->load_seconds, rate, sbytes(r->footprint, b[1]),
                   sbytes(r->resident, b[2]), cli_bytes(r->privatised, b[3]),
                   cli_bytes(r->locked, b[4]), r->file_regions, sbytes(r->released_footprint, b[5]),
                   cli_bytes(r->ledger_bytes, b[6]), r->released_regions);
        }
        if (!moved)
            printf("(GB/s -: mode %s maps the file and reads nothing during the load; --prefetch "
                   "reads it in)\n",
                   wm_mode_name(a->opts.mode));
        printf("%s\n", ok ? "all memory returned" : "MEMORY NOT RETURNED");
    }
}

int cmd_load(int argc, char **argv) {
    load_args a = {.cycles = 1};
    int rc = parse_common(&a, argc, argv, "load");
    if (rc) return rc;
    if (a.opts.mode == WM_MODE_NONE)
        return cli_usage("load: --mode is required (heap, mmap or mmap-private): there is no "
                         "default");
    if (a.hold) {
        sigemptyset(&a.signals);
        sigaddset(&a.signals, SIGINT);
        sigaddset(&a.signals, SIGTERM);
        sigaddset(&a.signals, SIGUSR1);
        sigprocmask(SIG_BLOCK, &a.signals, NULL);
    }
    wm_file *f;
    wm_error err;
    figures before_open;
    /* A device runtime's own memory stays until exit: start it before the first figures. */
    if (init_backend(&a, &err) != WM_OK) return cli_fail(&err);
    shard_paths sp = {0};
    if (paths_collect(a.path, a.set, &sp, &err)) return cli_fail(&err);
    a.shards = &sp;
    if (measure(&sp, &before_open, &err) || cli_open(a.path, a.set, &f, &err) != WM_OK) {
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
    load_report(&a, res, size, ok);
    free(res);
    return ok ? 0 : 1;
}

/* ---- check ---- */

int cli_check_file(const char *path, bool set, unsigned cycles, bool json, unsigned threads,
                   const cli_via *via) {
    static const wm_mode modes[] = {WM_MODE_HEAP, WM_MODE_MMAP, WM_MODE_MMAP_PRIVATE};
    enum { NM = 3 };
    wm_error err;
    shard_paths sp = {0};
    if (paths_collect(path, set, &sp, &err)) return cli_fail(&err);
    cycle_result *res = calloc((size_t)NM * cycles, sizeof *res);
    if (!res) {
        paths_free(&sp);
        return 1;
    }
    bool all_ok = true, mode_ok[NM];
    double best[NM];
    uint64_t size = 0, tensor_bytes = 0;
    size_t n_tensors = 0;
    for (int k = 0; k < NM; k++) {
        /* Each mode: open, cycles, close; `released` is measured with the file closed. */
        figures before_open, base, closed;
        wm_file *f;
        if (measure(&sp, &before_open, &err) || cli_open(path, set, &f, &err) != WM_OK) {
            free(res);
            paths_free(&sp);
            return cli_fail(&err);
        }
        size = wm_file_size(f);
        tensor_bytes = wm_file_tensor_bytes(f);
        n_tensors = wm_file_tensor_count(f);
        load_args a = {.path = path, .shards = &sp, .touch = !via, .json = json, .cycles = cycles};
        a.via = via;
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
        printf("%s: %s of tensors in %zu tensors, %u cycles per mode%s (best load time shown)\n\n",
               path, cli_bytes(tensor_bytes, b[0]), n_tensors, cycles,
               via ? ", through ggml (every tensor read back and compared)" : "");
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
    load_args a = {.cycles = 3};
    int rc = parse_common(&a, argc, argv, "check");
    if (rc) return rc;
    if (a.ggml && !CLI_HAVE_GGML)
        return cli_usage("check: --ggml needs the ggml bridge, which this build lacks: run "
                         "scripts/ggml.sh (or make ggml), then configure again (WM_GGML=AUTO)");
    if (a.llama && !CLI_HAVE_LLAMA)
        return cli_usage("check: --llama needs the llama.cpp bridge, which this build lacks: run "
                         "scripts/llama.sh (or make llama), then configure again (WM_LLAMA=AUTO)");
    if (a.llama && a.ggml) return cli_usage("check: --ggml and --llama exclude each other");
    if (a.llama && a.set)
        return cli_usage("check: --llama opens FILE as wm_llama_load does; --set does not apply");
    if (a.llama) return cli_check_llama(a.path, a.cycles, a.json, a.opts.threads);
    return cli_check_file(a.path, a.set, a.cycles, a.json, a.opts.threads,
                          a.ggml ? CLI_GGML_VIA : NULL);
}
