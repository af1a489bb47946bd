/*
 * ggml.c: the ggml bridge (include/weightmap_ggml.h). Public API only, of weightmap and of ggml
 * (ggml.h, ggml-backend.h): a model loaded by wm_model_load, a no_alloc context with one tensor
 * per file tensor, and one ggml backend buffer made over each of the model's buffers.
 *
 * ggml aborts (GGML_ASSERT) on a misaligned buffer pointer, a tensor outside its buffer, an
 * unknown type or a row that is not whole blocks, so each of those is checked here first and
 * refused with an error. Buffers are made with ggml's own constructors and keep ggml's own
 * interface (ggml classifies buffers by iface.free_buffer): they borrow the memory, and
 * wm_ggml_free returns it by releasing the model after the buffers and the context are gone.
 *
 * Sections: fault points; the handle; checks; load; getters.
 */
#include "weightmap_ggml.h"

#include "ggml_check.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- fault points ----
 * The test build (WM_GGML_FAULTS, linked with the library's fault table) fails the bridge's own
 * allocations and ggml's constructors as the library fails its calls (src/os/fault.h). */
#ifdef WM_GGML_FAULTS
#include "os/os.h"
#define FAULT(kind) (wm__fault_hit(WM_OS_##kind) != 0)
#else
#define FAULT(kind) 0
#endif

/* The alignment ggml_backend_cpu_buffer_from_ptr asserts (ggml's TENSOR_ALIGNMENT). */
#define GGML_BUFFER_ALIGN 32u

/* ---- the handle ---- */

struct wm_ggml {
    wm_model *model;
    struct ggml_context *ctx;
    void *ctx_mem; /* the context's memory: pages of our own, unmapped after ggml_free, so that
                      no allocator keeps the tensors' metadata once the handle is gone */
    size_t ctx_size;
    struct ggml_tensor **tensors; /* by file index */
    size_t n_tensors;
    ggml_backend_buffer_t *bufs; /* n_bufs made, of the model's buffers that hold bytes */
    size_t n_bufs;
    size_t *buf_of; /* model buffer -> index into bufs, or SIZE_MAX for one of no bytes */
};

void wm_ggml_free(wm_ggml *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_bufs; i++)
        ggml_backend_buffer_free(g->bufs[i]);
    if (g->ctx) ggml_free(g->ctx);
    if (g->ctx_mem) munmap(g->ctx_mem, g->ctx_size);
    wm_model_release(g->model);
    free(g->bufs);
    free(g->buf_of);
    free(g->tensors);
    free(g);
}

/* ---- checks ---- */

/* Every file tensor, before the load, where it is delivered as stored (no conversion, no
 * slices): a file ggml cannot hold costs no load. */
static wm_status check_file(const wm_file *f, const wm_load_options *o, wm_error *err) {
    if (o->n_convert || o->tp_world > 1) return WM_OK; /* checked as delivered, after the load */
    return check_tensors(f, err);
}

static wm_status check_device(const char *path, ggml_backend_dev_t dev, const wm_load_options *o,
                              wm_error *err) {
    if (!dev) return WM_OK;
    struct ggml_backend_dev_props props;
    memset(&props, 0, sizeof props);
    ggml_backend_dev_get_props(dev, &props);
    if (!props.caps.buffer_from_host_ptr)
        return fail(err, WM_EUNSUPPORTED,
                    "%s: ggml device %s takes no host pointer (buffer_from_host_ptr), and mode %s "
                    "hands it host memory",
                    path, ggml_backend_dev_name(dev), wm_mode_name(o->mode));
    return WM_OK;
}

/* ---- load ---- */

/* One ggml buffer over each model buffer that holds bytes. */
static wm_status make_buffers(wm_ggml *g, const char *path, ggml_backend_dev_t dev, wm_error *err) {
    size_t n = wm_model_buffer_count(g->model);
    g->bufs = calloc(n ? n : 1, sizeof *g->bufs);
    g->buf_of = calloc(n ? n : 1, sizeof *g->buf_of);
    if (FAULT(ALLOC) || !g->bufs || !g->buf_of)
        return fail(err, WM_ENOMEM, "%s: out of memory for %zu ggml buffers", path, n);
    size_t max_tensor = 0;
    for (size_t i = 0; i < g->n_tensors; i++) {
        uint64_t nb = 0;
        wm_model_tensor_info(g->model, i, NULL, &nb);
        if (nb > max_tensor) max_tensor = (size_t)nb;
    }
    for (size_t b = 0; b < n; b++) {
        void *base = (void *)(uintptr_t)wm_model_buffer_data(g->model, b);
        size_t size = wm_model_buffer_size(g->model, b);
        g->buf_of[b] = SIZE_MAX;
        if (!base || !size) continue;
        if ((uintptr_t)base % GGML_BUFFER_ALIGN)
            return fail(err, WM_EDEVICE, "%s: buffer %zu at %p is not aligned to %u bytes for ggml",
                        path, b, base, GGML_BUFFER_ALIGN);
        ggml_backend_buffer_t buf = NULL;
        if (!FAULT(DEVICE))
            buf = dev ? ggml_backend_dev_buffer_from_host_ptr(dev, base, size, max_tensor)
                      : ggml_backend_cpu_buffer_from_ptr(base, size);
        if (!buf)
            return fail(err, WM_EDEVICE, "%s: ggml %s refused a buffer over buffer %zu (%zu bytes)",
                        path, dev ? ggml_backend_dev_name(dev) : "CPU", b, size);
        ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        g->buf_of[b] = g->n_bufs;
        g->bufs[g->n_bufs++] = buf;
    }
    return WM_OK;
}

/* Tensor `i` as delivered, in the context, placed in its buffer. */
static wm_status make_tensor(wm_ggml *g, const wm_file *f, size_t i, wm_error *err) {
    const char *path = wm_file_path(f);
    wm_tensor_info ti;
    uint64_t shape[WM_MAX_DIMS], nbytes = 0, off = 0;
    wm_type type = WM_TYPE_INVALID;
    size_t b = 0;
    wm_file_tensor(f, i, &ti);
    wm_model_tensor_info(g->model, i, &type, &nbytes);
    wm_model_tensor_shape(g->model, i, shape, NULL, NULL);
    wm_model_tensor_buffer(g->model, i, &b, &off);
    wm_status st = check_tensor(path, ti.name, type, shape, nbytes, err);
    if (st) return st;
    int64_t ne[GGML_MAX_DIMS];
    for (int d = 0; d < GGML_MAX_DIMS; d++)
        ne[d] = (int64_t)shape[d];
    struct ggml_tensor *t = ggml_new_tensor(g->ctx, (enum ggml_type)type, GGML_MAX_DIMS, ne);
    if (!t) return fail(err, WM_ENOMEM, "%s: ggml's context is full at tensor '%s'", path, ti.name);
    ggml_set_name(t, ti.name);
    g->tensors[i] = t;
    if (nbytes == 0) return WM_OK; /* no bytes, no buffer (ggml's loader gives it no data either) */
    ggml_backend_buffer_t buf = b < wm_model_buffer_count(g->model) && g->buf_of[b] != SIZE_MAX
                                    ? g->bufs[g->buf_of[b]]
                                    : NULL;
    size_t size = buf ? ggml_backend_buffer_get_size(buf) : 0;
    if (!buf || off > size || ggml_backend_buffer_get_alloc_size(buf, t) > size - off)
        return fail(err, WM_EDEVICE,
                    "%s: tensor '%s' (%" PRIu64 " bytes at %" PRIu64
                    ") does not lie inside its ggml buffer %zu",
                    path, ti.name, nbytes, off, b);
    char *addr = (char *)ggml_backend_buffer_get_base(buf) + off;
    if (ggml_backend_tensor_alloc(buf, t, addr) != GGML_STATUS_SUCCESS)
        return fail(err, WM_EDEVICE, "%s: ggml refused to place tensor '%s' in buffer %zu", path,
                    ti.name, b);
    return WM_OK;
}

wm_status wm_ggml_load(wm_file *file, const wm_load_options *opts, ggml_backend_dev_t dev,
                       wm_ggml **out, wm_error *err) {
    if (out) *out = NULL;
    if (!file || !opts || !out)
        return fail(err, WM_EINVAL, "wm_ggml_load: NULL file, options or out");
    const char *path = wm_file_path(file);
    /* The fields read here (mode, backend, n_convert, tp_world) are in every layout of the
     * sized options struct (1.0 on); wm_model_load checks opts->size itself. */
    if (opts->backend != WM_BACKEND_CPU)
        return fail(err, WM_EINVAL,
                    "%s: the ggml bridge hands ggml host memory: load with the CPU backend (a "
                    "ggml device that takes host pointers is passed as `dev`)",
                    path);
    wm_status st = check_device(path, dev, opts, err);
    if (!st) st = check_file(file, opts, err);
    if (st) return st;
    wm_ggml *g = FAULT(ALLOC) ? NULL : calloc(1, sizeof *g);
    if (!g) return fail(err, WM_ENOMEM, "%s: out of memory", path);
    st = wm_model_load(file, opts, &g->model, err);
    if (st) goto done;
    g->n_tensors = wm_file_tensor_count(file);
    g->tensors = FAULT(ALLOC) ? NULL : calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    if (!g->tensors) {
        st = fail(err, WM_ENOMEM, "%s: out of memory for %zu tensors", path, g->n_tensors);
        goto done;
    }
    g->ctx_size = ggml_tensor_overhead() * (g->n_tensors + 1);
    void *mem = FAULT(ALLOC) ? MAP_FAILED
                             : mmap(NULL, g->ctx_size, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem != MAP_FAILED) {
        g->ctx_mem = mem;
        struct ggml_init_params ip = {.mem_size = g->ctx_size, .mem_buffer = mem, .no_alloc = true};
        g->ctx = ggml_init(ip);
    }
    if (!g->ctx) {
        st = fail(err, WM_ENOMEM, "%s: no memory for a ggml context of %zu tensors", path,
                  g->n_tensors);
        goto done;
    }
    st = make_buffers(g, path, dev, err);
    for (size_t i = 0; !st && i < g->n_tensors; i++)
        st = make_tensor(g, file, i, err);
done:
    if (st) {
        wm_ggml_free(g);
        return st;
    }
    *out = g;
    return WM_OK;
}

/* ---- getters ---- */

struct ggml_context *wm_ggml_context(const wm_ggml *g) {
    return g ? g->ctx : NULL;
}

struct ggml_tensor *wm_ggml_tensor(const wm_ggml *g, size_t index) {
    return g && index < g->n_tensors ? g->tensors[index] : NULL;
}

size_t wm_ggml_n_buffers(const wm_ggml *g) { return g ? g->n_bufs : 0; }

ggml_backend_buffer_t wm_ggml_buffer(const wm_ggml *g, size_t i) {
    return g && i < g->n_bufs ? g->bufs[i] : NULL;
}

const wm_model *wm_ggml_model(const wm_ggml *g) { return g ? g->model : NULL; }
