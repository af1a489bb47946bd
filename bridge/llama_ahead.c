/*
 * llama_ahead.c: the weights llama.cpp will place in a CUDA device's buffers, loaded ahead while
 * llama_model_init_from_user makes the model. The making (metadata, vocabulary, tensors,
 * buffers) takes about 115 ms on the H100 host whatever the model's size, and only then does a
 * tensor have a device address to be filled at: the bus sat idle for it. So the bridge loads those
 * tensors meanwhile, through the library's staged pipeline (wm_cuda_options.dst: the pinned ring,
 * direct reads of cold bytes, copies in flight), into a device buffer of its own (ggml's CUDA
 * buffer type, the process's runtime); once the model is made each tensor is copied device to
 * device into its place (ggml_backend_tensor_copy: the device's own memory speed, milliseconds for
 * gigabytes) and the buffer is freed before the load returns. Public API only, of weightmap and of
 * llama.cpp's ggml (ggml-backend.h).
 *
 * Which tensors: llama.cpp v0.4.0's own rule (llama-model.cpp, load_tensors), applied to the
 * file's block_count and the params as the mapped modes apply it (wm__llama_cpu_layers,
 * wm__llama_host_tensor): every tensor but the input layer's and those of the layers kept on the
 * CPU (below block_count + 1 - n_gpu_layers; n_gpu_layers negative: none), and token_embd.weight
 * too where the file has no output.weight and llama.cpp makes the head from it. Only where that
 * rule is the whole story: the model's devices are one device, a CUDA device's own buffer type
 * ("CUDA<n>"), with no tensor_buft_overrides and split_mode not ROW. A wrong guess moves bytes for
 * nothing; it never puts a wrong byte anywhere: a tensor loaded ahead that llama.cpp placed
 * elsewhere is read as usual, and one on the GPU that was not loaded ahead goes to the staged fill
 * after the making.
 *
 * Room: the buffer doubles the model's device bytes during the load. It is made (by the thread,
 * beside the making, as its first step) only where the device's free memory
 * (ggml_backend_dev_memory) holds the tensors twice and a reserve besides (AHEAD_RESERVE or a
 * sixteenth of the device, the larger), so that llama.cpp's own buffers still fit; otherwise the
 * load runs as without it. wm_llama_options.prefetch OFF turns it off.
 */
#include "llama_bridge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AHEAD_ALIGN 4096u                 /* each tensor's place in the buffer */
#define AHEAD_RESERVE ((uint64_t)1 << 30) /* left free on the device, at least */
#define AHEAD_LEAST ((uint64_t)64 << 20)  /* less than this is not worth a thread */

/* The CUDA device the model's offloaded layers all go to, and its number; NULL where the
 * model's devices are not exactly one such device. */
static ggml_backend_dev_t one_cuda_device(const struct llama_model_params *p, int *ordinal) {
    ggml_backend_dev_t list[8];
    if (wm__llama_model_devices(p, list, 8) != 1) return NULL;
    ggml_backend_dev_t dev = list[0];
    if (ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_GPU) return NULL;
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    const char *rname = reg ? ggml_backend_reg_name(reg) : NULL;
    const char *name = ggml_backend_dev_name(dev);
    if (!rname || strcmp(rname, "CUDA") != 0 || !name || strncmp(name, "CUDA", 4) != 0) return NULL;
    char *end;
    long n = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end || n < 0 || n >= WM_LEDGER_DEVICES) return NULL;
    *ordinal = (int)n;
    return dev;
}

/* The tensors to load ahead (sel, off) and their bytes; false where there are none. By
 * llama.cpp's rule (wm__llama_cpu_layers, wm__llama_host_tensor): every tensor but the input
 * layer's and those of the layers kept on the CPU, and token_embd.weight where the head is made
 * from it (the file has no output.weight). */
static bool choose(wm__llama_ahead *a, const struct llama_model_params *p) {
    int cpu_layers = wm__llama_cpu_layers(a->f, p);
    if (cpu_layers < 0 || p->n_gpu_layers == 0) return false;
    size_t nt = wm_file_tensor_count(a->f), dummy;
    bool head_from_embd = wm_file_find_tensor(a->f, "output.weight", &dummy) != WM_OK;
    a->sel_len = (nt ? nt : 1) * sizeof *a->sel;
    a->off_len = (nt ? nt : 1) * sizeof *a->off;
    a->sel = wm__llama_pages(a->sel_len);
    a->off = wm__llama_pages(a->off_len);
    if (!a->sel || !a->off) return false;
    uint64_t at = 0;
    for (size_t i = 0; i < nt; i++) {
        wm_tensor_info ti;
        if (wm_file_tensor(a->f, i, &ti) != WM_OK || !ti.nbytes) continue;
        if (wm__llama_host_tensor(ti.name, cpu_layers) &&
            !(head_from_embd && strcmp(ti.name, "token_embd.weight") == 0))
            continue;
        a->sel[a->n++] = (wm_tensor_select){.tensor = i};
        a->off[i] = at + 1;
        at += (ti.nbytes + AHEAD_ALIGN - 1) / AHEAD_ALIGN * AHEAD_ALIGN;
    }
    a->bytes = at;
    return at > 0;
}

static uint64_t ahead_dst(void *user, size_t index, const wm_tensor_info *t) {
    (void)t;
    const wm__llama_ahead *a = user;
    return (uint64_t)(uintptr_t)ggml_backend_buffer_get_base(a->buf) + a->off[index] - 1;
}

/* When the copies of each quarter of the bytes were queued (told in llama.cpp's log at the join);
 * and whether to stop. */
static int ahead_progress(void *user, uint64_t done, uint64_t total) {
    wm__llama_ahead *a = user;
    while (total && a->quarters < 4 && done >= total / 4 * (a->quarters + 1u)) {
        a->quarter_at[a->quarters] = wm__llama_now() - a->t0;
        a->quarter_bytes[a->quarters++] = done;
        a->progress_total = total;
    }
    return atomic_load(&a->stop);
}

static void *ahead_run(void *arg) {
    wm__llama_ahead *a = arg;
    /* the buffer made here, beside the making (a cudaMalloc of the model's size) */
    if (!FAULT(DEVICE)) a->buf = ggml_backend_buft_alloc_buffer(a->buft, a->bytes);
    a->seconds_buffer = wm__llama_now() - a->t0;
    if (!a->buf) {
        a->st = WM_ENOMEM;
        a->seconds = wm__llama_now() - a->t0;
        return NULL;
    }
    wm_cuda_options cu;
    wm_load_options lo;
    wm__llama_cuda_options(&lo, &cu, ahead_dst, a, a->sel, a->n, a->threads, a->direct_io);
    lo.device = a->ordinal;
    lo.progress = ahead_progress;
    lo.progress_user = a;
    wm_model *m = NULL;
    a->st = wm_model_load((wm_file *)(uintptr_t)a->f, &lo, &m, NULL);
    if (!a->st) {
        wm_model_stats s = WM_MODEL_STATS_INIT;
        wm_model_stats_get(m, &s);
        a->bytes_read = s.bytes_read;
    }
    wm_model_release(m); /* the bytes stay: the buffer is the bridge's */
    a->seconds = wm__llama_now() - a->t0;
    return NULL;
}

bool wm__llama_ahead_start(wm__llama_ahead *a, const wm_file *f, const struct llama_model_params *p,
                           const wm_llama_options *o) {
    memset(a, 0, sizeof *a);
    a->f = f;
    a->threads = o->threads;
    a->direct_io = o->direct_io;
    ggml_backend_dev_t dev;
    if (o->prefetch != WM_LLAMA_PREFETCH_AUTO || o->upload != WM_LLAMA_UPLOAD_AUTO || p->no_alloc ||
        p->vocab_only || p->split_mode == LLAMA_SPLIT_MODE_ROW ||
        (p->tensor_buft_overrides && p->tensor_buft_overrides[0].pattern) ||
        !wm_backend_available(WM_BACKEND_CUDA) || !(dev = one_cuda_device(p, &a->ordinal)) ||
        !choose(a, p))
        return false;
    size_t free_b = 0, total = 0;
    ggml_backend_dev_memory(dev, &free_b, &total);
    uint64_t reserve = total / 16 > AHEAD_RESERVE ? total / 16 : AHEAD_RESERVE;
    if ((uint64_t)free_b < 2 * a->bytes + reserve) return false;
    a->buft = ggml_backend_dev_buffer_type(dev);
    a->t0 = wm__llama_now();
    atomic_init(&a->stop, 0);
    a->running = !FAULT(THREAD) && pthread_create(&a->thread, NULL, ahead_run, a) == 0;
    return a->running;
}

/* What the read ahead did, as DEBUG lines in llama.cpp's log, from the loading thread once the
 * thread is joined (llama_log_get and llama_log_set, which the load's log capture calls, are not
 * safe beside each other on two threads): its buffer, and when the copies of each quarter of its
 * bytes were queued to the device, in milliseconds since the load began (bench/llama's
 * WM_BENCH_TIMELINE prints them beside the making's own lines, whose stamps are their own). */
static void tell(const wm__llama_ahead *a) {
    wm__llama_say(GGML_LOG_LEVEL_DEBUG,
                  "wm_llama_load: read ahead: its device buffer (%.1f MiB) %s at %.1f ms\n",
                  (double)a->bytes / 1048576.0, a->buf ? "made" : "refused",
                  a->seconds_buffer * 1e3);
    for (unsigned q = 0; q < a->quarters; q++)
        wm__llama_say(
            GGML_LOG_LEVEL_DEBUG,
            "wm_llama_load: read ahead: %.1f of %.1f MiB queued to the device at %.1f ms\n",
            (double)a->quarter_bytes[q] / 1048576.0, (double)a->progress_total / 1048576.0,
            a->quarter_at[q] * 1e3);
}

bool wm__llama_ahead_join(wm__llama_ahead *a, bool stop) {
    if (!a->running) return false;
    double t0 = wm__llama_now();
    if (stop) atomic_store(&a->stop, 1);
    pthread_join(a->thread, NULL);
    a->running = false;
    tell(a);
    a->seconds_wait = wm__llama_now() - t0;
    a->ready = a->st == WM_OK;
    return a->ready;
}

bool wm__llama_ahead_take(wm__llama_ahead *a, struct ggml_tensor *t, size_t index, int ordinal) {
    if (!a->ready || ordinal != a->ordinal || !a->off[index] || t->view_src) return false;
    wm_tensor_info ti;
    if (wm_file_tensor(a->f, index, &ti) != WM_OK || ti.nbytes != ggml_nbytes(t)) return false;
    double t0 = wm__llama_now();
    struct ggml_tensor s = *t; /* the same tensor, its bytes in the ahead buffer */
    s.buffer = a->buf;
    s.data = (char *)ggml_backend_buffer_get_base(a->buf) + a->off[index] - 1;
    s.extra = NULL;
    ggml_backend_tensor_copy(&s, t);
    a->seconds_copy += wm__llama_now() - t0;
    a->taken++;
    a->bytes_taken += ti.nbytes;
    return true;
}

void wm__llama_ahead_free(wm__llama_ahead *a) {
    wm__llama_ahead_join(a, true);
    if (a->buf) ggml_backend_buffer_free(a->buf);
    wm__llama_pages_free(a->sel, a->sel_len);
    wm__llama_pages_free(a->off, a->off_len);
    a->buf = NULL;
    a->sel = NULL;
    a->off = NULL;
    a->ready = false;
}
