/*
 * llama_cuda.c: the tensors llama.cpp places in CUDA buffers, filled by weightmap's staged
 * pipeline (wm_cuda_options.dst: the pinned ring, direct reads for cold bytes, several copies in
 * flight) straight into each tensor's device address, instead of one ggml_backend_tensor_set at
 * a time from pageable memory.
 *
 * What the bridge knows of a buffer it learns through ggml's public API: the buffer is not host
 * memory, its type's device is a GPU of ggml's CUDA registry ("CUDA"), and the type is that
 * device's own (named as the device, "CUDA<n>": not a split or host type), whose number is the
 * CUDA device's. The library then asks the CUDA runtime whether each address is device memory of
 * that device (cudaPointerGetAttributes) before it reads a byte: a wrong guess is an error, never
 * a write to the wrong place. The runtime is the process's: the library's CUDA backend and
 * ggml-cuda share the driver's primary context, so llama.cpp's device addresses are the
 * library's too. Any other device keeps ggml_backend_tensor_set (llama.c).
 */
#include "llama_bridge.h"

#include <stdlib.h>
#include <string.h>

bool wm__llama_cuda_buffer(ggml_backend_buffer_t buf, int *ordinal) {
    if (!buf || ggml_backend_buffer_is_host(buf)) return false;
    ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(buf);
    ggml_backend_dev_t dev = buft ? ggml_backend_buft_get_device(buft) : NULL;
    if (!dev || ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_GPU) return false;
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    const char *rname = reg ? ggml_backend_reg_name(reg) : NULL;
    const char *dname = ggml_backend_dev_name(dev), *bname = ggml_backend_buft_name(buft);
    if (!rname || strcmp(rname, "CUDA") != 0 || !dname || !bname || strcmp(dname, bname) != 0 ||
        strncmp(dname, "CUDA", 4) != 0)
        return false;
    char *end;
    long n = strtol(dname + 4, &end, 10);
    if (end == dname + 4 || *end || n < 0 || n >= WM_LEDGER_DEVICES) return false;
    *ordinal = (int)n;
    return true;
}

wm_status wm__llama_cuda_begin(wm__llama_cuda *c, const wm_file *f, size_t most, wm_error *err) {
    size_t nt = wm_file_tensor_count(f);
    *c = (wm__llama_cuda){0};
    c->sel_len = (most ? most : 1) * sizeof *c->sel;
    c->per_len = (nt ? nt : 1) * (sizeof *c->addr + sizeof *c->dev);
    c->sel = wm__llama_pages(c->sel_len);
    c->addr = wm__llama_pages(c->per_len);
    if (!c->sel || !c->addr) {
        wm__llama_cuda_free(c);
        return fail(err, WM_ENOMEM, "%s: out of memory for %zu device tensors", wm_file_path(f),
                    most);
    }
    c->dev = (unsigned char *)(c->addr + (nt ? nt : 1));
    return WM_OK;
}

bool wm__llama_cuda_add(wm__llama_cuda *c, size_t index, uint64_t addr, int ordinal,
                        uint64_t nbytes) {
    unsigned d = 0;
    while (d < c->n_devs && c->devs[d] != ordinal)
        d++;
    if (d == c->n_devs) {
        if (c->n_devs == WM_LEDGER_DEVICES) return false;
        c->devs[c->n_devs++] = ordinal;
    }
    c->sel[c->n] = (wm_tensor_select){.tensor = index};
    c->n++;
    c->addr[index] = addr;
    c->dev[index] = (unsigned char)d;
    c->bytes += nbytes;
    return true;
}

static uint64_t dst_of(void *user, size_t index, const wm_tensor_info *t) {
    (void)t;
    return ((const wm__llama_cuda *)user)->addr[index];
}

static unsigned dev_of(void *user, size_t index, const wm_tensor_info *t) {
    (void)t;
    return ((const wm__llama_cuda *)user)->dev[index];
}

void wm__llama_cuda_options(wm_load_options *lo, wm_cuda_options *cu, wm_dst_fn dst, void *user,
                            const wm_tensor_select *sel, size_t n, unsigned threads,
                            wm_direct_io direct_io) {
    *cu = (wm_cuda_options)WM_CUDA_OPTIONS_INIT;
    cu->dst = dst;
    cu->dst_user = user;
    *lo = (wm_load_options)WM_LOAD_OPTIONS_INIT;
    lo->mode = WM_MODE_HEAP;
    lo->backend = WM_BACKEND_CUDA;
    lo->cuda = cu;
    lo->threads = threads;
    lo->direct_io = direct_io;
    lo->select = sel;
    lo->n_select = n;
}

wm_status wm__llama_cuda_fill(wm__llama_cuda *c, const wm_file *f, const wm_llama_options *o,
                              wm_progress_fn progress, void *progress_user, wm_error *err) {
    if (!c->n) return WM_OK;
    wm_cuda_options cu;
    wm_load_options lo;
    wm__llama_cuda_options(&lo, &cu, dst_of, c, c->sel, c->n, o->threads, o->direct_io);
    lo.devices = c->devs;
    lo.n_devices = c->n_devs;
    lo.device = c->devs[0];
    lo.placement = c->n_devs > 1 ? WM_PLACE_CALLBACK : WM_PLACE_BALANCE;
    lo.place_tensor = dev_of;
    lo.place_user = c;
    lo.progress = progress;
    lo.progress_user = progress_user;
    /* The model holds the file while it lives (a reference of its own, nothing of the caller's
     * handle changes), and nothing of the device: its release leaves the bytes where they are. */
    wm_model *m = NULL;
    double t0 = wm__llama_now();
    wm_status st = wm_model_load((wm_file *)(uintptr_t)f, &lo, &m, err);
    if (!st) {
        wm_model_stats s = WM_MODEL_STATS_INIT;
        wm_model_stats_get(m, &s);
        c->bytes_read = s.bytes_read;
        c->read_direct = s.read_direct;
    }
    wm_model_release(m);
    c->seconds = wm__llama_now() - t0;
    return st;
}

void wm__llama_cuda_free(wm__llama_cuda *c) {
    wm__llama_pages_free(c->sel, c->sel_len);
    wm__llama_pages_free(c->addr, c->per_len);
    c->sel = NULL;
    c->addr = NULL;
    c->dev = NULL;
}
