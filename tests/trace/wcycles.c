/*
 * wcycles.c: an app on a runtime dlopen'd after start (tests/trace/fakewhisper.c's
 * libwmtwhisper.so, as Node loads an addon), in load/release cycles:
 *
 *     wcycles LIB MODEL CYCLES [cycles|pairing|nofree|sd|ggml|both]
 *
 *   cycles   CYCLES times: whisper_init_from_file_with_params, whisper_free
 *   pairing  a second model loaded first and kept to the end; then CYCLES times a load, its
 *            whisper_free, and whisper_free(NULL) (whisper.cpp allows it): only the handle
 *            tells which call released which load
 *   nofree   CYCLES loads, none released (the end of the process is the only release)
 *   sd       LIB is libwmtsd.so (tests/trace/fakeggml.c): new_sd_ctx, free_sd_ctx
 *   ggml     LIB is libwmtggml.so: a 1 MiB ggml backend buffer allocated and freed
 *   both     LIB is libwmtwhisper.so, and libwmtggml.so beside it is loaded too: whisper's
 *            load and release, with a ggml buffer allocated and freed between them
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct params {
    int use_gpu, flash_attn;
};
typedef void *(*init_fn)(const char *, struct params);
typedef void (*free_fn)(void *);
typedef void *(*alloc_fn)(void *, size_t);
typedef void (*buf_free_fn)(void *);
typedef void *(*sd_new_fn)(const void *);

/* sd: stable-diffusion.cpp's context; ggml: a ggml backend buffer; CYCLES of each. */
static int other(void *lib, const char *mode, int cycles) {
    bool sd = !strcmp(mode, "sd");
    void *make = dlsym(lib, sd ? "new_sd_ctx" : "ggml_backend_buft_alloc_buffer");
    free_fn drop = (free_fn)(uintptr_t)dlsym(lib, sd ? "free_sd_ctx" : "ggml_backend_buffer_free");
    if (!make || !drop) return 2;
    for (int c = 0; c < cycles; c++) {
        void *h =
            sd ? ((sd_new_fn)(uintptr_t)make)(NULL) : ((alloc_fn)(uintptr_t)make)(NULL, 1u << 20);
        if (!h) return 3;
        drop(h);
    }
    printf("wcycles: %s done\n", mode);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: wcycles LIB MODEL CYCLES [cycles|pairing|nofree]\n");
        return 2;
    }
    const char *mode = argc > 4 ? argv[4] : "cycles";
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "wcycles: %s\n", dlerror());
        return 2;
    }
    if (!strcmp(mode, "sd") || !strcmp(mode, "ggml")) return other(lib, mode, atoi(argv[3]));
    void *gg = NULL;
    if (!strcmp(mode, "both")) { /* libwmtggml.so beside LIB */
        char path[4096];
        snprintf(path, sizeof path, "%s", argv[1]);
        char *slash = strrchr(path, '/');
        snprintf(slash ? slash + 1 : path, sizeof path - (size_t)(slash ? slash + 1 - path : 0),
                 "libwmtggml.so");
        if (!(gg = dlopen(path, RTLD_NOW | RTLD_LOCAL))) return 2;
    }
    init_fn init = (init_fn)(uintptr_t)dlsym(lib, "whisper_init_from_file_with_params");
    free_fn release = (free_fn)(uintptr_t)dlsym(lib, "whisper_free");
    if (!init || !release) return 2;
    struct params p = {0, 0};
    void *kept = !strcmp(mode, "pairing") ? init(argv[2], p) : NULL;
    for (int c = 0; c < atoi(argv[3]); c++) {
        void *ctx = init(argv[2], p);
        if (!ctx) return 3;
        if (!strcmp(mode, "nofree")) continue;
        if (gg) { /* a compute buffer, outside the runtime's load and release */
            buf_free_fn bf = (buf_free_fn)(uintptr_t)dlsym(gg, "ggml_backend_buffer_free");
            alloc_fn ba = (alloc_fn)(uintptr_t)dlsym(gg, "ggml_backend_buft_alloc_buffer");
            if (!ba || !bf) return 2;
            bf(ba(NULL, 1u << 20));
        }
        release(ctx);
        if (!strcmp(mode, "pairing")) release(NULL);
    }
    if (kept) release(kept);
    printf("wcycles: %s done\n", mode);
    return 0;
}
