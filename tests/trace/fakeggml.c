/*
 * fakeggml.c: stand-ins for two more runtimes whose load and release `weightmap trace` knows by
 * name (tests/trace/wcycles.c dlopens them after start), one library each: libwmtsd.so
 * (FAKE_SD: stable-diffusion.cpp's new_sd_ctx / free_sd_ctx, a context holding 512 KiB of
 * malloc memory) and libwmtggml.so (ggml's backend buffers, ggml_backend_buft_alloc_buffer /
 * ggml_backend_buffer_free, a buffer of the size asked from malloc: the fallback markers, used
 * only where no other runtime's marker is hooked).
 */
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

struct sd_ctx {
    void *weights;
};
struct ggml_backend_buffer {
    void *data;
    size_t size;
};

#ifdef FAKE_SD
API struct sd_ctx *new_sd_ctx(const void *params);
API void free_sd_ctx(struct sd_ctx *ctx);
#else
API struct ggml_backend_buffer *ggml_backend_buft_alloc_buffer(void *buft, size_t size);
API void ggml_backend_buffer_free(struct ggml_backend_buffer *buf);
#endif

#ifdef FAKE_SD

struct sd_ctx *new_sd_ctx(const void *params) {
    (void)params;
    struct sd_ctx *c = malloc(sizeof *c);
    if (!c) return NULL;
    c->weights = malloc(512u << 10);
    if (c->weights) memset(c->weights, 7, 512u << 10);
    return c;
}

void free_sd_ctx(struct sd_ctx *c) {
    if (!c) return;
    free(c->weights);
    free(c);
}

#else
struct ggml_backend_buffer *ggml_backend_buft_alloc_buffer(void *buft, size_t size) {
    (void)buft;
    struct ggml_backend_buffer *b = malloc(sizeof *b);
    if (!b) return NULL;
    b->size = size;
    b->data = malloc(size);
    if (b->data) memset(b->data, 8, size);
    return b;
}

void ggml_backend_buffer_free(struct ggml_backend_buffer *b) {
    if (!b) return;
    free(b->data);
    free(b);
}
#endif
