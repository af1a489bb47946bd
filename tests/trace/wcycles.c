/*
 * wcycles.c: an app on a runtime dlopen'd after start (tests/trace/fakewhisper.c's
 * libwmtwhisper.so, as Node loads an addon), in load/release cycles:
 *
 *     wcycles LIB MODEL CYCLES [cycles|pairing|nofree]
 *
 *   cycles   CYCLES times: whisper_init_from_file_with_params, whisper_free
 *   pairing  a second model loaded first and kept to the end; then CYCLES times a load, its
 *            whisper_free, and whisper_free(NULL) (whisper.cpp allows it): only the handle
 *            tells which call released which load
 *   nofree   CYCLES loads, none released (the end of the process is the only release)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct params {
    int use_gpu, flash_attn;
};
typedef void *(*init_fn)(const char *, struct params);
typedef void (*free_fn)(void *);

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
    init_fn init = (init_fn)(uintptr_t)dlsym(lib, "whisper_init_from_file_with_params");
    free_fn release = (free_fn)(uintptr_t)dlsym(lib, "whisper_free");
    if (!init || !release) return 2;
    struct params p = {0, 0};
    void *kept = !strcmp(mode, "pairing") ? init(argv[2], p) : NULL;
    for (int c = 0; c < atoi(argv[3]); c++) {
        void *ctx = init(argv[2], p);
        if (!ctx) return 3;
        if (!strcmp(mode, "nofree")) continue;
        release(ctx);
        if (!strcmp(mode, "pairing")) release(NULL);
    }
    if (kept) release(kept);
    printf("wcycles: %s done\n", mode);
    return 0;
}
