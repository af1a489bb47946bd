/*
 * llama_driver.c: llama.cpp's own loader (the npm peer's prebuilt libllama, through dlopen) in
 * load/free cycles, for `weightmap trace` (tests/test_trace.c, bench/trace.c, docs/TRACE.md):
 *
 *     llama_driver LIBDIR LOAD_MODE CYCLES MODEL
 *
 * LOAD_MODE is llama.cpp's own: 0 reads into buffers, 1 maps the file. llama_model_free is
 * called through the pointer dlsym gives, so `--cycles-marker llama_model_free` sees each free.
 * Prints on stderr the CPU variant ggml loaded from LIBDIR ("llama_driver: cpu variant zen4";
 * exit 4 when none loads: a folder holding one variant this CPU cannot run), then one line: the
 * cycles and the seconds spent inside llama_model_load_from_file (with LLAMA_DRIVER_CYCLES set in
 * the environment, also one line per cycle before it).
 * No llama.cpp header is used: the few prototypes are declared here from its public API
 * (llama.cpp v0.4.0, the layout checked against llama_model_default_params in
 * ../shared/peers/llama-harness.c).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* llama.cpp's types as the benchmarks mirror them (struct bench_llama_model_params: 80 bytes,
 * load_mode instead of use_mmap); only the types are used here, not bench/peer.c. */
#include "peer.h"

static void *lib(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "llama_driver: %s\n", dlerror());
        exit(3);
    }
    return h;
}

static void *sym(void *h, const char *name) {
    void *p = dlsym(h, name);
    if (!p) {
        fprintf(stderr, "llama_driver: %s: %s\n", name, dlerror());
        exit(3);
    }
    return p;
}

static void quiet_log(int level, const char *text, void *user) {
    (void)level;
    (void)text;
    (void)user;
}

/* The CPU variant ggml_backend_load_all_from_path loaded (libggml-cpu-NAME.so, the one mapped
 * now: the others it tried are unloaded again), into name; false when none was. */
static bool cpu_variant(char *name, size_t cap) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        char *p = strstr(line, "/libggml-cpu-");
        if (!p) continue;
        p += 13;
        size_t n = strcspn(p, ".\n");
        snprintf(name, cap, "%.*s", (int)n, p);
        found = true;
    }
    if (f) fclose(f);
    return found;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: llama_driver LIBDIR LOAD_MODE CYCLES MODEL\n");
        return 2;
    }
    const char *dir = argv[1], *model = argv[4];
    int load_mode = atoi(argv[2]), cycles = atoi(argv[3]);
    lib(dir, "libggml-base.so");
    void *g = lib(dir, "libggml.v0.4.0.so");
    void (*load_all)(const char *) =
        (void (*)(const char *))sym(g, "ggml_backend_load_all_from_path");
    load_all(dir);
    char variant[64];
    if (!cpu_variant(variant, sizeof variant)) {
        fprintf(stderr, "llama_driver: no CPU backend loads from %s on this CPU\n", dir);
        return 4;
    }
    fprintf(stderr, "llama_driver: cpu variant %s\n", variant);
    void *l = lib(dir, "libllama.v0.4.0.so");
    void (*log_set)(void (*)(int, const char *, void *), void *) =
        (void (*)(void (*)(int, const char *, void *), void *))sym(l, "llama_log_set");
    void (*backend_init)(void) = (void (*)(void))sym(l, "llama_backend_init");
    void (*backend_free)(void) = (void (*)(void))sym(l, "llama_backend_free");
    struct bench_llama_model_params (*defaults)(void) =
        (struct bench_llama_model_params(*)(void))sym(l, "llama_model_default_params");
    struct llama_model *(*load)(const char *, struct bench_llama_model_params) =
        (struct llama_model * (*)(const char *, struct bench_llama_model_params))
            sym(l, "llama_model_load_from_file");
    void (*model_free)(struct llama_model *) =
        (void (*)(struct llama_model *))sym(l, "llama_model_free");
    log_set(quiet_log, NULL);
    backend_init();
    struct bench_llama_model_params p = defaults();
    p.n_gpu_layers = 0;
    p.load_mode = load_mode;
    double in_load = 0;
    for (int c = 0; c < cycles; c++) {
        double t0 = now();
        struct llama_model *m = load(model, p);
        double dt = now() - t0;
        in_load += dt;
        if (getenv("LLAMA_DRIVER_CYCLES"))
            fprintf(stderr, "llama_driver: cycle %d %.6f s\n", c + 1, dt);
        if (!m) {
            fprintf(stderr, "llama_driver: %s: llama.cpp could not load it (load_mode %d)\n", model,
                    load_mode);
            return 1;
        }
        model_free(m);
    }
    backend_free();
    fprintf(stderr, "llama_driver: %d cycles, load_mode %d, %.6f s in llama_model_load_from_file\n",
            cycles, load_mode, in_load);
    return 0;
}
