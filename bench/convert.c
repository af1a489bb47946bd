/*
 * convert.c: dequantization throughput, weightmap's wm_convert against ggml's own to_float
 * (libggml-base of llama.cpp v0.4.0, loaded with dlopen), both in this process and this run.
 *
 * Sections: inputs (valid random blocks of each type: tests/blocks.h, as the tests build them);
 * the peer's to_float; timing one thread and all threads (rows split into contiguous slices of
 * whole blocks, one slice per thread); the load with and without F16->F32 conversion; main.
 *
 * Usage: build/bench/convert [-m MIB] [-r REPS] [-t THREADS] [--types A,B,...] [--model FILE]
 *                            [--no-load] [--md]
 *   -m: f32 output per type and run (default 64 MiB, well past the caches); -r: rounds, each
 *   timing weightmap then ggml, medians reported (default 5); -t: threads for the parallel column
 * (default: online CPUs); --types: only these types (names as `weightmap info` prints them, e.g.
 * iq2_xxs,q4_k); --model: the file for the load comparison (default: a 256 MiB safetensors
 * model with F16 matrices made by `weightmap make-model`); --md: print Markdown table rows.
 */
#include "peer.h"

#include "../tests/blocks.h"
#include "iq_extract.h" /* the peer's type traits and to_float */
#include "weightmap.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- inputs: valid random blocks of each type, tests/blocks.h ---- */

/* ---- the peer's to_float ---- */

typedef peer_to_float_fn to_float_fn;

/* ggml's to_float of type t (tools/gen/iq_extract.h knows the traits' layout), or NULL. */
static to_float_fn peer_to_float(void *base, wm_type t) {
    const peer_traits *(*traits)(int);
    *(void **)&traits = dlsym(base, "ggml_get_type_traits");
    if (!traits) return NULL;
    const peer_traits *tr = traits((int)t);
    return tr && tr->blck_size ? peer_type_to_float(base, tr) : NULL;
}

/* ---- timing ---- */

typedef struct job {
    int who; /* 0 weightmap, 1 ggml */
    wm_type type;
    to_float_fn ggml;
    const uint8_t *src;
    float *dst;
    size_t nb; /* blocks in this slice */
} job;

static void run_job(const job *j) {
    size_t be = wm_type_block_elems(j->type);
    if (j->who == 0)
        wm_convert(j->type, WM_TYPE_F32, j->src, j->dst, (uint64_t)j->nb * be);
    else
        j->ggml(j->src, j->dst, (int64_t)(j->nb * be));
}

static void *thread_main(void *arg) {
    run_job(arg);
    return NULL;
}

/* Seconds for one conversion of nb blocks split over `threads` threads. */
static double time_once(int who, wm_type t, to_float_fn ggml, const uint8_t *src, float *dst,
                        size_t nb, unsigned threads) {
    size_t be = wm_type_block_elems(t), bb = wm_type_block_bytes(t);
    job jobs[64];
    pthread_t tid[64];
    if (threads > 64) threads = 64;
    if (threads == 0) threads = 1;
    size_t per = nb ? (nb + threads - 1) / threads : 1;
    unsigned used = 0;
    size_t b = 0;
    do { /* at least one job (of 0 blocks when nb is 0): jobs[0] is always set */
        jobs[used++] = (job){who, t, ggml, src + b * bb, dst + b * be, nb - b < per ? nb - b : per};
        b += per;
    } while (b < nb);
    double t0 = bench_now_ms();
    if (used == 1) {
        run_job(&jobs[0]);
    } else {
        for (unsigned i = 1; i < used; i++)
            pthread_create(&tid[i], NULL, thread_main, &jobs[i]);
        run_job(&jobs[0]);
        for (unsigned i = 1; i < used; i++)
            pthread_join(tid[i], NULL);
    }
    return (bench_now_ms() - t0) / 1000.0;
}

/* Medians of weightmap's and ggml's times, measured alternately (one of each per round) so that
 * load from other processes falls on both alike. */
static void median_pair(wm_type t, to_float_fn ggml, const uint8_t *src, float *dst, size_t nb,
                        unsigned threads, int reps, double *wm_s, double *ggml_s) {
    double a[64], b[64];
    if (reps > 64) reps = 64;
    time_once(0, t, ggml, src, dst, nb, threads); /* warm: pages of dst faulted, code cached */
    time_once(1, t, ggml, src, dst, nb, threads);
    for (int r = 0; r < reps; r++) {
        a[r] = time_once(0, t, ggml, src, dst, nb, threads);
        b[r] = time_once(1, t, ggml, src, dst, nb, threads);
    }
    *wm_s = bench_stats_of(a, (size_t)reps).median;
    *ggml_s = bench_stats_of(b, (size_t)reps).median;
}

/* ---- load with and without conversion ---- */

/* Median seconds of a heap-mode load of `path` (warm page cache), with F16->F32 if convert. */
static int load_time(const char *path, int convert, unsigned threads, int reps, double *sec,
                     uint64_t *bytes_out) {
    wm_file *f;
    wm_error err = {0};
    if (wm_file_open(path, &f, &err) != WM_OK) {
        fprintf(stderr, "convert: %s\n", err.msg);
        return -1;
    }
    wm_convert_rule rule = {NULL, WM_TYPE_F16, WM_TYPE_F32};
    wm_load_options o = {0};
    o.mode = WM_MODE_HEAP;
    o.threads = threads;
    if (convert) {
        o.convert = &rule;
        o.n_convert = 1;
    }
    double v[64];
    if (reps > 63) reps = 63;
    for (int r = 0; r <= reps; r++) {
        wm_model *m;
        double t0 = bench_now_ms();
        wm_status st = wm_model_load(f, &o, &m, &err);
        double dt = (bench_now_ms() - t0) / 1000.0;
        if (st != WM_OK) {
            fprintf(stderr, "convert: load%s: %s\n", convert ? " --convert f16:f32" : "", err.msg);
            wm_file_close(f);
            return -1;
        }
        wm_model_stats s = WM_MODEL_STATS_INIT;
        wm_model_stats_get(m, &s);
        *bytes_out = s.tensor_bytes;
        wm_model_release(m);
        if (r > 0) v[r - 1] = dt; /* the first load warms the page cache */
    }
    wm_file_close(f);
    *sec = bench_stats_of(v, (size_t)reps).median;
    return 0;
}

/* The CLI next to this executable (build/bench/convert -> build/weightmap). */
static void cli_path(char *buf, size_t cap) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(buf, cap, "%s/../weightmap", exe);
}

/* ---- main ---- */

static const wm_type types[] = {
    WM_TYPE_F16,     WM_TYPE_BF16,  WM_TYPE_Q4_0,  WM_TYPE_Q4_1,    WM_TYPE_Q5_0,   WM_TYPE_Q5_1,
    WM_TYPE_Q8_0,    WM_TYPE_Q2_K,  WM_TYPE_Q3_K,  WM_TYPE_Q4_K,    WM_TYPE_Q5_K,   WM_TYPE_Q6_K,
    WM_TYPE_Q8_K,    WM_TYPE_TQ1_0, WM_TYPE_TQ2_0, WM_TYPE_IQ4_NL,  WM_TYPE_IQ4_XS, WM_TYPE_MXFP4,
    WM_TYPE_NVFP4,   WM_TYPE_Q1_0,  WM_TYPE_Q2_0,  WM_TYPE_IQ2_XXS, WM_TYPE_IQ2_XS, WM_TYPE_IQ2_S,
    WM_TYPE_IQ3_XXS, WM_TYPE_IQ3_S, WM_TYPE_IQ1_S, WM_TYPE_IQ1_M,
};

/* Non-zero when `name` is in the comma-separated list (NULL: every type). */
static int type_listed(const char *list, const char *name) {
    if (!list) return 1;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncasecmp(p, name, n)) return 1;
        p += len + (end != NULL);
    }
    return 0;
}

/* The load rows: a heap load of `model` (made with the CLI when NULL) plain and converting
 * f16 to f32. 1 when no model could be made. */
static int load_rows(const char *model, unsigned threads, int reps) {
    char made[256] = "", cli[4200], cmd[8600];
    if (!model) {
        snprintf(made, sizeof made, "/tmp/wm-bench-convert-%d.safetensors", (int)getpid());
        cli_path(cli, sizeof cli);
        snprintf(cmd, sizeof cmd,
                 "'%s' make-model '%s' --size 256M --format safetensors >/dev/null", cli, made);
        if (system(cmd) != 0) {
            fprintf(stderr, "convert: could not make a model with %s\n", cli);
            return 1;
        }
        model = made;
    }
    double s0, s1;
    uint64_t b0, b1;
    if (load_time(model, 0, threads, reps, &s0, &b0) == 0 &&
        load_time(model, 1, threads, reps, &s1, &b1) == 0) {
        double r0 = (double)b0 / s0 / 1e9, r1 = (double)b1 / s1 / 1e9;
        printf("# load (heap, %u threads, warm cache) of %s:\n"
               "#   plain:      %.3f s, %.2f GB out, %.2f GB/s out\n"
               "#   f16->f32:   %.3f s, %.2f GB out, %.2f GB/s out (%.0f%% of plain)\n",
               threads, model, s0, (double)b0 / 1e9, r0, s1, (double)b1 / 1e9, r1, 100 * r1 / r0);
    } else {
        printf("# load with conversion: not measured (wm_model_load failed; see above)\n");
    }
    if (made[0]) unlink(made);
    return 0;
}

int main(int argc, char **argv) {
    size_t mib = 64;
    int reps = 5, md = 0, do_load = 1;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads = ncpu > 0 ? (unsigned)ncpu : 1;
    const char *model = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            mib = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            threads = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--types") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--no-load"))
            do_load = 0;
        else if (!strcmp(argv[i], "--md"))
            md = 1;
        else {
            fprintf(stderr, "usage: convert [-m MIB] [-r REPS] [-t THREADS] [--types A,B,...] "
                            "[--model FILE] [--no-load] [--md]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    if (threads < 1) threads = 1;
    bench_peer p = {0};
    if (bench_peer_open_gguf(&p, NULL) != 0) return 1;

    size_t n_max = mib << 18; /* floats */
    n_max -= n_max % 256;
    uint8_t *src =
        mmap(NULL, n_max * 4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    float *dst = mmap(NULL, n_max * 4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (src == MAP_FAILED || dst == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    char machine[512];
    bench_machine_line(machine, sizeof machine);
    printf(
        "# %s\n# %zu MiB of f32 out per run, median of %d, %u threads for the parallel columns\n",
        machine, mib, reps, threads);
    if (md)
        printf("| type | weightmap 1T GB/s | ggml 1T GB/s | ratio 1T | weightmap %uT GB/s | ggml "
               "%uT GB/s | ratio %uT |\n"
               "|---|---:|---:|---:|---:|---:|---:|\n",
               threads, threads, threads);
    else
        printf("%-8s %10s %10s %7s %10s %10s %7s\n", "type", "wm 1T", "ggml 1T", "ratio", "wm NT",
               "ggml NT", "ratio");
    double worst = 1e9;
    const char *worst_name = "";
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        wm_type t = types[k];
        to_float_fn g = peer_to_float(p.base, t);
        if (!type_listed(only, wm_type_name(t))) continue;
        if (!g || !wm_convert_supported(t, WM_TYPE_F32)) {
            printf("%-8s not measured: %s\n", wm_type_name(t),
                   g ? "no conversion in weightmap" : "no to_float in the peer");
            continue;
        }
        size_t nb = n_max / wm_type_block_elems(t);
        make_blocks(t, nb, 1234 + (uint64_t)t, src);
        double out_gb = (double)nb * wm_type_block_elems(t) * 4 / 1e9;
        double ws, gs;
        median_pair(t, g, src, dst, nb, 1, reps, &ws, &gs);
        double w1 = out_gb / ws, g1 = out_gb / gs;
        median_pair(t, g, src, dst, nb, threads, reps, &ws, &gs);
        double wn = out_gb / ws, gn = out_gb / gs;
        if (w1 / g1 < worst) {
            worst = w1 / g1;
            worst_name = wm_type_name(t);
        }
        if (md)
            printf("| %s | %.2f | %.2f | %.2fx | %.2f | %.2f | %.2fx |\n", wm_type_name(t), w1, g1,
                   w1 / g1, wn, gn, wn / gn);
        else
            printf("%-8s %10.2f %10.2f %6.2fx %10.2f %10.2f %6.2fx\n", wm_type_name(t), w1, g1,
                   w1 / g1, wn, gn, wn / gn);
        fflush(stdout);
    }
    printf("# lowest single-thread ratio: %.2fx (%s)\n", worst, worst_name);

    if (do_load && load_rows(model, threads, reps) != 0) return 1;
    munmap(src, n_max * 4);
    munmap(dst, n_max * 4);
    bench_peer_close(&p);
    return 0;
}
