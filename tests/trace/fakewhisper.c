/*
 * fakewhisper.c: libwmtwhisper.so, a stand-in for whisper.cpp as a Node addon ships it: the
 * load and release entry points of whisper.cpp's C API under their own names (so that
 * `weightmap trace` hooks them as a known runtime's markers, with no --load-marker), loaded by
 * dlopen after the program started (tests/trace/wcycles.c), as Node loads an addon.
 *
 *   whisper_init_from_file_with_params       maps the model file shared read-only, reads nothing
 *                                            more, keeps a 256 KiB malloc buffer (its "weights")
 *                                            and a 96 KiB state; calls the _no_state twin, as
 *                                            whisper.cpp does (a marker inside a marker's call)
 *   whisper_free                             unmaps and frees all of it; NULL is allowed
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

struct whisper_context_params {
    int use_gpu, flash_attn;
};

struct whisper_context {
    unsigned char *map;
    size_t len;
    void *weights, *state;
};

static volatile unsigned sink;

API struct whisper_context *
whisper_init_from_file_with_params_no_state(const char *path, struct whisper_context_params p);
API struct whisper_context *whisper_init_from_file_with_params(const char *path,
                                                               struct whisper_context_params p);
API void whisper_free(struct whisper_context *ctx);

struct whisper_context *
whisper_init_from_file_with_params_no_state(const char *path, struct whisper_context_params p) {
    (void)p;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return NULL;
    struct whisper_context *c = calloc(1, sizeof *c);
    c->len = (size_t)st.st_size;
    c->map = mmap(NULL, c->len, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (c->map == MAP_FAILED) {
        free(c);
        return NULL;
    }
    for (size_t i = 0; i < c->len; i += 4096)
        sink += c->map[i];
    c->weights = malloc(256u << 10);
    memset(c->weights, 3, 256u << 10);
    return c;
}

struct whisper_context *whisper_init_from_file_with_params(const char *path,
                                                           struct whisper_context_params p) {
    struct whisper_context *c = whisper_init_from_file_with_params_no_state(path, p);
    if (c) {
        c->state = malloc(96u << 10);
        memset(c->state, 4, 96u << 10);
    }
    return c;
}

void whisper_free(struct whisper_context *c) {
    if (!c) return;
    munmap(c->map, c->len);
    free(c->weights);
    free(c->state);
    free(c);
}
