/*
 * wm_llama_driver.c: llama.cpp models loaded through the llama.cpp bridge (wm_llama_load,
 * include/weightmap_llama.h) and freed by llama_model_free, in cycles, for `weightmap trace`
 * (tests/test_trace.c, bench/RESULTS.md "llama"); the twin of llama_driver.c, which loads with
 * llama.cpp's own loader:
 *
 *     wm_llama_driver LIBDIR CYCLES MODEL
 *
 * LIBDIR is the folder llama.cpp's backends are loaded from (ggml_backend_load_all_from_path).
 * Prints one line on stderr: the cycles, the seconds spent inside wm_llama_load (and of them in
 * malloc_trim), and the bytes of the last load's weight buffers in the bridge's own pages.
 * The environment can turn the bridge's two mechanisms for the tracer off (the contrast of
 * trace.llama_bridge_5_cycles, bench/RESULTS.md "Under the tracer"): WM_LLAMA_BUFFERS=llama
 * (wm_llama_options.buffers WM_LLAMA_BUFFERS_LLAMA), WM_LLAMA_TRIM=off (WM_LLAMA_TRIM_OFF); and
 * choose the load mode: WM_LLAMA_LOAD_MODE=N sets params.load_mode to N (llama.cpp's enum: 0
 * NONE, 1 MMAP, ...; unset: llama_model_default_params()'s AUTO).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "weightmap_llama.h"

#include <ggml-backend.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)level, (void)text, (void)user;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: wm_llama_driver LIBDIR CYCLES MODEL\n");
        return 2;
    }
    int cycles = atoi(argv[2]);
    llama_log_set(quiet, NULL);
    ggml_backend_load_all_from_path(argv[1]);
    llama_backend_init();
    struct llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = 0;
    wm_llama_stats stats = WM_LLAMA_STATS_INIT;
    wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
    o.stats = &stats;
    const char *b = getenv("WM_LLAMA_BUFFERS"), *t = getenv("WM_LLAMA_TRIM");
    const char *mode = getenv("WM_LLAMA_LOAD_MODE"); /* params.load_mode (default: AUTO) */
    if (mode) p.load_mode = (enum llama_load_mode)atoi(mode);
    if (b && !strcmp(b, "llama")) o.buffers = WM_LLAMA_BUFFERS_LLAMA;
    if (t && !strcmp(t, "off")) o.trim = WM_LLAMA_TRIM_OFF;
    double in_load = 0, in_trim = 0;
    for (int c = 0; c < cycles; c++) {
        struct llama_model *m = NULL;
        wm_error err;
        double t0 = now();
        if (wm_llama_load(argv[3], &p, &o, &m, &err) != WM_OK) {
            fprintf(stderr, "wm_llama_driver: %s\n", err.msg);
            return 1;
        }
        in_load += now() - t0;
        in_trim += stats.seconds_trim;
        llama_model_free(m);
    }
    llama_backend_free();
    fprintf(stderr,
            "wm_llama_driver: %d cycles, %.6f s in wm_llama_load (%.6f s in malloc_trim), %llu "
            "bytes of weight buffers in its own pages\n",
            cycles, in_load, in_trim, (unsigned long long)stats.bytes_own);
    return 0;
}
