/*
 * cuda.c: the CUDA backend: the staged pipeline's device operations (staged.h) over the CUDA
 * runtime, and what is CUDA's own: device checks, the option checks, read-once's hand-off to
 * NCCL (read_once.c), and starting the runtime for wm_backend_init (backends.c holds
 * wm_backend_init and calls the init slot here).
 *
 * Only the loading thread (the one in wm_model_load) calls CUDA: the runtime keeps host memory
 * for every thread that ever called it, and worker threads are new on every load, so a CUDA
 * call on a worker would leave memory behind on every load (measured on an H200: 12-72 KiB per
 * load with 1 thread, 290-390 KiB with 16). The pipeline keeps to that (staged.h). Its two
 * paths, in CUDA's terms:
 *   - staged (the default; modes heap and mmap): a ring of page-allocated slots of 4 MiB, never
 *     more than opts.cuda->pinned_budget bytes (256 MiB by default; the default 8 readers of a
 *     16-CPU host use 64 MiB), registered whole with cudaHostRegister once per load (portable
 *     with several devices) while the readers already fill it; copies are cudaMemcpyAsync (and
 *     cudaMemcpy2DAsync for a slice's rows) on a few non-blocking streams per device, an event
 *     per slot and device (cudaEventQuery to reap, cudaEventSynchronize to wait).
 *   - registered (opts.cuda->registered, mode mmap): windows of the file's shared read-only
 *     mapping registered with cudaHostRegisterReadOnly and unregistered once their events have
 *     passed, at most pinned_budget bytes at once. A private mapping is never registered: that
 *     would privatise every page.
 * A loaded model's sleep and wake (the pool's) are the pipeline's too (staged_load.c): one host
 * copy registered portable, cudaMemcpyAsync both ways in 64 MiB pieces over two streams a
 * device, an event per stream waited for at the end.
 * Every fallible CUDA call first asks wm__fault_hit(WM_OS_DEVICE), so tests can fail the k-th
 * one; release calls cannot fail and are not counted. After a failure the runtime's last error
 * is cleared (on the loading thread, the only one that saw it), so the caller's next CUDA call
 * does not report ours.
 *
 * Sections: CUDA calls and errors; devices; the device operations; options; load, release and
 * pointers; test hooks; the init slot. Without WM_HAVE_CUDA the table's row only says that this
 * build has no CUDA backend.
 */
#include "cuda_tune.h"
#include "staged.h"
#ifdef WM_HAVE_NCCL
#include "read_once.h"
#endif

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#ifdef WM_HAVE_CUDA
#include <cuda_runtime_api.h>

/* ---- CUDA calls and errors ---- */

/* The errno of the fault just injected on this thread (see CU). */
static _Thread_local int injected_errno;

static bool fault_now(void) {
    injected_errno = wm__fault_hit(WM_OS_DEVICE);
    return injected_errno != 0;
}

static cudaError_t injected(void) {
    return injected_errno == ENOMEM ? cudaErrorMemoryAllocation : cudaErrorUnknown;
}

/* A fallible CUDA call: an injected fault replaces the call (which then does not happen). */
#define CU(call) (fault_now() ? injected() : (call))

/* Fills err for a failed CUDA call: "PREFIX: cudaMalloc: out of memory (cudaErrorMemory...)".
 * Out of device memory is WM_ENOMEM, anything else WM_EDEVICE. Clears this thread's last error. */
static wm_status cu_fail(wm_error *err, cudaError_t ce, const char *what, const char *fmt, ...)
    WM_PRINTF(4, 5);
static wm_status cu_fail(wm_error *err, cudaError_t ce, const char *what, const char *fmt, ...) {
    char prefix[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    (void)cudaGetLastError();
    return wm__err(err, ce == cudaErrorMemoryAllocation ? WM_ENOMEM : WM_EDEVICE, 0,
                   "%s: %s: %s (%s)", prefix, what, cudaGetErrorString(ce), cudaGetErrorName(ce));
}

/* ---- devices ---- */

/* Checks that `device` exists and makes it current on this thread; *prev gets the device that
 * was current, for restore_device. */
static wm_status use_device(int device, const char *who, int *prev, wm_error *err) {
    int n = 0;
    cudaError_t ce = CU(cudaGetDeviceCount(&n));
    if (ce) {
        (void)cudaGetLastError();
        return wm__err(err, WM_EDEVICE, 0,
                       "%s: no usable CUDA device: cudaGetDeviceCount: %s (%s); is there a GPU "
                       "and an NVIDIA driver?",
                       who, cudaGetErrorString(ce), cudaGetErrorName(ce));
    }
    if (n <= 0) return wm__err(err, WM_EDEVICE, 0, "%s: no CUDA device is present", who);
    if (device < 0 || device >= n)
        return wm__err(err, WM_EDEVICE, 0, "%s: CUDA device %d does not exist (%d device%s)", who,
                       device, n, n == 1 ? "" : "s");
    ce = CU(cudaGetDevice(prev));
    if (ce) return cu_fail(err, ce, "cudaGetDevice", "%s: CUDA device %d", who, device);
    ce = CU(cudaSetDevice(device));
    if (ce) return cu_fail(err, ce, "cudaSetDevice", "%s: CUDA device %d", who, device);
    return WM_OK;
}

static void restore_device(int prev) {
    if (prev >= 0) cudaSetDevice(prev);
    (void)cudaGetLastError();
}

/* ---- the device operations ---- */

/* Makes device index d current on the loading thread, if it is not already (counted). */
static int make_current(wm__dev *dv, unsigned d) {
    if (dv->cur == (int)d) return 0;
    cudaError_t ce = CU(cudaSetDevice(dv->m->devs[d]));
    if (ce) {
        dv->call = "cudaSetDevice";
        return (int)ce;
    }
    dv->cur = (int)d;
    return 0;
}

/* The same for a release (not counted, cannot fail). */
static void make_current_quiet(wm__dev *dv, unsigned d) {
    if (dv->cur == (int)d) return;
    cudaSetDevice(dv->m->devs[d]);
    dv->cur = (int)d;
}

/* The result of a fallible call named `name`. */
static int said(wm__dev *dv, cudaError_t ce, const char *name) {
    if (ce) dv->call = name;
    return (int)ce;
}

/* Device memory: the device is made current every time (a load's first calls). */
static int op_alloc(wm__dev *dv, unsigned d, size_t len, void **out) {
    cudaError_t ce = CU(cudaSetDevice(dv->m->devs[d]));
    if (ce) return said(dv, ce, "cudaMalloc");
    return said(dv, CU(cudaMalloc(out, len)), "cudaMalloc");
}

static void op_free(wm__dev *dv, unsigned d, void *p) {
    cudaSetDevice(dv->m->devs[d]);
    cudaFree(p);
}

static int op_host_register(wm__dev *dv, void *p, size_t len, unsigned flags) {
    unsigned f = flags & WM__HOST_READ_ONLY  ? cudaHostRegisterReadOnly
                 : flags & WM__HOST_PORTABLE ? cudaHostRegisterPortable
                                             : cudaHostRegisterDefault;
    return said(dv, CU(cudaHostRegister(p, len, f)), "cudaHostRegister");
}

static void op_host_unregister(wm__dev *dv, void *p) {
    (void)dv;
    cudaHostUnregister(p);
}

static int op_stream_make(wm__dev *dv, unsigned d, void **out) {
    int e = make_current(dv, d);
    if (e) return e;
    cudaStream_t s;
    cudaError_t ce = CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (!ce) *out = s;
    return said(dv, ce, "cudaStreamCreateWithFlags");
}

static void op_stream_wait(wm__dev *dv, unsigned d, void *s) {
    make_current_quiet(dv, d);
    cudaStreamSynchronize((cudaStream_t)s);
}

static void op_stream_free(wm__dev *dv, unsigned d, void *s) {
    make_current_quiet(dv, d);
    cudaStreamDestroy((cudaStream_t)s);
}

static int op_event_make(wm__dev *dv, unsigned d, void **out) {
    int e = make_current(dv, d);
    if (e) return e;
    cudaEvent_t ev;
    cudaError_t ce =
        CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventBlockingSync));
    if (!ce) *out = ev;
    return said(dv, ce, "cudaEventCreateWithFlags");
}

static void op_event_free(wm__dev *dv, unsigned d, void *ev) {
    (void)dv;
    (void)d;
    cudaEventDestroy((cudaEvent_t)ev);
}

static int op_copy(wm__dev *dv, unsigned d, void *s, void *dst, const void *src, size_t len) {
    int e = make_current(dv, d);
    if (e) return e;
    return said(dv, CU(cudaMemcpyAsync(dst, src, len, cudaMemcpyHostToDevice, (cudaStream_t)s)),
                "cudaMemcpyAsync");
}

static int op_copy_2d(wm__dev *dv, unsigned d, void *s, void *dst, size_t dpitch, const void *src,
                      size_t spitch, size_t width, size_t rows) {
    int e = make_current(dv, d);
    if (e) return e;
    return said(dv,
                CU(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyHostToDevice,
                                     (cudaStream_t)s)),
                "cudaMemcpy2DAsync");
}

/* A device-to-host copy, queued (a sleeping model's weights, into its registered host copy). */
static int op_copy_back(wm__dev *dv, unsigned d, void *s, void *dst, const void *src, size_t len) {
    int e = make_current(dv, d);
    if (e) return e;
    return said(dv, CU(cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToHost, (cudaStream_t)s)),
                "cudaMemcpyAsync");
}

static int op_event_record(wm__dev *dv, unsigned d, void *ev, void *s) {
    int e = make_current(dv, d);
    if (e) return e;
    return said(dv, CU(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)s)), "cudaEventRecord");
}

static int op_event_query(wm__dev *dv, unsigned d, void *ev, bool *done) {
    (void)d;
    cudaError_t ce = CU(cudaEventQuery((cudaEvent_t)ev));
    *done = ce != cudaErrorNotReady;
    return ce == cudaErrorNotReady ? 0 : said(dv, ce, "cudaEventQuery");
}

static int op_event_wait(wm__dev *dv, unsigned d, void *ev) {
    (void)d;
    return said(dv, CU(cudaEventSynchronize((cudaEvent_t)ev)), "cudaEventSynchronize");
}

static void op_settle(wm__dev *dv) {
    dv->cur = -1;
    (void)cudaGetLastError();
}

static wm_status op_fail(wm__dev *dv, int code, const char *prefix, wm_error *err) {
    return cu_fail(err, (cudaError_t)code, dv->call ? dv->call : "CUDA", "%s", prefix);
}

static const wm__dev_ops cuda_ops = {
    .alloc = op_alloc,
    .free = op_free,
    .host_register = op_host_register,
    .host_unregister = op_host_unregister,
    .stream_make = op_stream_make,
    .stream_wait = op_stream_wait,
    .stream_free = op_stream_free,
    .event_make = op_event_make,
    .event_free = op_event_free,
    .copy = op_copy,
    .copy_2d = op_copy_2d,
    .copy_back = op_copy_back,
    .event_record = op_event_record,
    .event_query = op_event_query,
    .event_wait = op_event_wait,
    .settle = op_settle,
    .fail = op_fail,
};

/* ---- options ---- */

/* The options the CUDA backend refuses (its check slot: before anything is acquired). */
static wm_status cuda_check(const wm_file *f, const wm_load_options *o, wm_error *err) {
    const char *path = f->path;
    if (o->mode == WM_MODE_MMAP_PRIVATE)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: mode mmap-private makes no sense on the CUDA backend (and a private "
                       "mapping is never registered): use heap (staged) or mmap",
                       path);
    if (o->cuda->registered && o->mode != WM_MODE_MMAP)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: the registered CUDA path needs mode mmap (it registers the shared "
                       "read-only mapping), not %s",
                       path, wm_mode_name(o->mode));
    if (o->cuda->direct_io && o->cuda->registered)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: direct_io applies to the CUDA backend's staged path only (it reads "
                       "into pinned slots; the registered path maps the file)",
                       path);
    if (o->lock != WM_LOCK_OFF)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: lock applies to host memory; the CUDA backend keeps none after the "
                       "load (its staging is pinned anyway)",
                       path);
    if (o->n_convert)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: conversion on load is not supported by the CUDA backend", path);
    if (o->cuda->registered && (o->n_devices > 1 || o->tp_world > 1))
        return wm__err(err, WM_EINVAL, 0,
                       "%s: several devices and tensor parallelism use the staged path, not the "
                       "registered one",
                       path);
    if (o->cuda->nccl_comm) {
#ifndef WM_HAVE_NCCL
        return wm__err(err, WM_EUNSUPPORTED, 0,
                       "%s: read-once (nccl_comm) needs a build with NCCL (nccl.h was not found "
                       "at build time)",
                       path);
#endif
        if (o->n_devices > 1 || o->cuda->registered)
            return wm__err(err, WM_EINVAL, 0,
                           "%s: read-once runs one device per process on the staged path", path);
    }
    if (o->cuda->dst && (o->cuda->registered || o->cuda->nccl_comm || o->tp_world > 1))
        return wm__err(err, WM_EINVAL, 0,
                       "%s: the caller's device memory (wm_cuda_options.dst) is filled by the "
                       "staged path, one whole tensor each: not with %s",
                       path,
                       o->cuda->registered  ? "the registered path"
                       : o->cuda->nccl_comm ? "read-once (nccl_comm)"
                                            : "tensor parallelism");
    if (o->cuda->direct_io && o->tp_world > 1)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: direct_io reads whole aligned windows; a tensor-parallel slice is "
                       "read piece by piece, buffered",
                       path);
    return WM_OK;
}

/* The registered path needs a device that registers read-only memory. */
static wm_status check_registered(const wm_model *m, int device, wm_error *err) {
    int ok = 0;
    cudaError_t ce =
        CU(cudaDeviceGetAttribute(&ok, cudaDevAttrHostRegisterReadOnlySupported, device));
    if (ce)
        return cu_fail(err, ce, "cudaDeviceGetAttribute", "%s: device %d", m->file->path, device);
    if (!ok)
        return wm__err(err, WM_EUNSUPPORTED, 0,
                       "%s: CUDA device %d cannot register read-only memory: use the staged "
                       "path (no --registered)",
                       m->file->path, device);
    return WM_OK;
}

/* ---- load, release and pointers ---- */

static void cuda_release(wm_model *m);

/* Every chunk in the caller's memory (wm_cuda_options.dst) is device memory of its chunk's
 * device, as the runtime sees the address. */
static wm_status check_caller_memory(const wm_model *m, wm_error *err) {
    for (uint32_t c = 0; c < m->n_chunks; c++) {
        const wm__chunk *ch = &m->chunks[c];
        if (!ch->ext) continue;
        const wm__tensor *t = &m->file->tensors[m->order[ch->first]];
        const char *name = m->file->names + t->name_off;
        struct cudaPointerAttributes a;
        cudaError_t ce = CU(cudaPointerGetAttributes(&a, (const void *)(uintptr_t)ch->ext));
        if (ce == cudaErrorInvalidValue) { /* an address the runtime does not know */
            (void)cudaGetLastError();
            a.type = cudaMemoryTypeUnregistered;
        } else if (ce) {
            return cu_fail(err, ce, "cudaPointerGetAttributes", "%s: tensor '%s'", m->file->path,
                           name);
        }
        int want = m->devs[ch->device];
        if (a.type != cudaMemoryTypeDevice || a.device != want)
            return wm__err(err, WM_EINVAL, 0,
                           "%s: tensor '%s': wm_cuda_options.dst gave 0x%llx, which is not device "
                           "memory of CUDA device %d (%s)",
                           m->file->path, name, (unsigned long long)ch->ext, want,
                           a.type == cudaMemoryTypeDevice    ? "it is another device's"
                           : a.type == cudaMemoryTypeHost    ? "it is pinned host memory"
                           : a.type == cudaMemoryTypeManaged ? "it is managed memory"
                                                             : "the runtime does not know it");
    }
    return WM_OK;
}

/* The devices exist and can do what the load asks (all current in turn; *prev: the caller's). */
static wm_status check_devices(wm_model *m, int *prev, wm_error *err) {
    wm_status st = use_device(m->devs[0], m->file->path, prev, err);
    for (unsigned d = 1; d < m->n_devs && !st; d++) {
        int ignored;
        st = use_device(m->devs[d], m->file->path, &ignored, err);
    }
    if (!st && m->cuda.registered) st = check_registered(m, m->devs[0], err);
#ifdef WM_HAVE_NCCL
    if (!st && m->cuda.nccl_comm) st = wm__read_once_check(m, err);
#endif
    return st;
}

static wm_status cuda_load(wm_model *m, wm_error *err) {
    int prev = -1;
    wm_status st = check_devices(m, &prev, err);
    if (!st && m->cuda.dst) st = check_caller_memory(m, err);
    wm__dev dv = {.ops = &cuda_ops, .m = m, .cur = -1};
    wm__staged_opts so = {.registered = m->cuda.registered != 0,
                          .pinned_budget = m->cuda.pinned_budget};
    if (!st) st = wm__staged_load(m, &dv, &so, err);
#ifdef WM_HAVE_NCCL
    if (!st && m->cuda.nccl_comm) {
        cudaError_t ce = CU(cudaSetDevice(m->devs[0]));
        st = ce ? cu_fail(err, ce, "cudaSetDevice", "%s: device %d", m->file->path, m->devs[0])
                : wm__read_once_complete(m, wm__staged_buffers(m), err);
    }
#endif
    if (st) {
        cuda_release(m);
        wm__os_heap_trim();
    }
    restore_device(prev);
    return st;
}

static void cuda_release(wm_model *m) {
    if (!m->bctx) return;
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
    wm__dev dv = {.ops = &cuda_ops, .m = m, .cur = -1};
    wm__staged_release(m, &dv);
    restore_device(prev);
    wm__os_heap_trim();
}

static void *cuda_host_ptr(const wm_model *m, size_t t) {
    (void)m;
    (void)t;
    return NULL;
}

static wm_status cuda_init(int device, wm_error *err);

/* Sleep and wake (wm__model_sleep): the staged pipeline's, with the devices current in turn
 * and the caller's current device left as it was. */
static wm_status cuda_sleep_wake(wm_model *m, bool wake, wm_error *err) {
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
    wm__dev dv = {.ops = &cuda_ops, .m = m, .cur = -1};
    wm_status st = wake ? wm__staged_wake(m, &dv, err) : wm__staged_sleep(m, &dv, err);
    restore_device(prev);
    return st;
}

static wm_status cuda_sleep(wm_model *m, wm_error *err) { return cuda_sleep_wake(m, false, err); }
static wm_status cuda_wake(wm_model *m, wm_error *err) { return cuda_sleep_wake(m, true, err); }

static wm_status cuda_cost(const wm_model *m, wm_direct_io io, wm_cost *c, wm_error *err) {
    (void)io; /* the staged readers read into ring slots that mirror the file: no staging */
    wm__staged_opts so = {.registered = m->cuda.registered != 0,
                          .pinned_budget = m->cuda.pinned_budget};
    return wm__staged_cost(m, &so, c, err);
}

/* Free and total memory of a device, as the runtime says (cudaMemGetInfo on it); the calling
 * thread's current device is left as it was. */
static wm_status cuda_mem_info(int device, uint64_t *free_bytes, uint64_t *total, wm_error *err) {
    int prev = -1;
    wm_status st = use_device(device, "wm_mem_available_get", &prev, err);
    size_t fr = 0, tot = 0;
    if (!st) {
        cudaError_t ce = CU(cudaMemGetInfo(&fr, &tot));
        if (ce) st = cu_fail(err, ce, "cudaMemGetInfo", "device %d", device);
    }
    restore_device(prev);
    if (st) return st;
    *free_bytes = fr;
    *total = tot;
    return WM_OK;
}

const wm__backend wm__backend_cuda = {
    .kind = WM_BACKEND_CUDA,
    .name = "cuda",
    .init = cuda_init,
    .check = cuda_check,
    .load = cuda_load,
    .release = cuda_release,
    .host_ptr = cuda_host_ptr,
    .device_ptr = wm__staged_device_ptr,
    .cost = cuda_cost,
    .mem_info = cuda_mem_info,
    .sleep = cuda_sleep,
    .wake = cuda_wake,
    .swap_extra = wm__staged_swap_extra,
};

/* ---- test hooks ---- */

void *wm__cuda_test_last_ring(void) { return wm__staged_last_ring(); }

/* bench/gpu.c's measuring knobs (cuda_tune.h), kept by the pipeline (wm__staged_tune). */
void wm__cuda_tune(size_t wsize, unsigned slots, unsigned flags) {
    wm__staged_tune(wsize, slots,
                    (flags & WM__CUDA_SERIAL_RING ? WM__STAGED_SERIAL_RING : 0) |
                        (flags & WM__CUDA_NO_REAP ? WM__STAGED_NO_REAP : 0));
}

/* bench/gpu.c's knobs of a sleep's and a wake's copies (cuda_tune.h). */
void wm__cuda_tune_swap(size_t piece, unsigned streams, unsigned flags) {
    wm__staged_tune_swap(piece, streams, (flags & WM__CUDA_SWAP_PINNED_WHOLE) != 0,
                         (flags & WM__CUDA_SWAP_NO_HUGE) != 0,
                         (flags & WM__CUDA_SWAP_NO_PREFAULT) != 0);
}

/* ---- the init slot: starting the runtime ---- */

/* How much wm_backend_init rehearses (wm__cuda_rehearsal changes it, to measure). */
static struct {
    unsigned rounds, events, copies;
    size_t bytes; /* the host buffer registered (both ways) and copied from */
} rehearsal = {3, 64, 1024, (size_t)2 << 20};

/* Makes every kind of call a load makes, as many times as a load makes the per-slot ones
 * (device memory, registrations of both kinds, streams, an event per slot recorded again and
 * again behind host-to-device copies, queries and waits), in a few rounds, so that the
 * runtime sets up and fills its lazy host state (which it keeps until exit: caches of events,
 * command queues, registration records) here, before a caller takes its baseline, and not in
 * the first loads. Best effort and not fault-counted: a failure here shows again in the load. */
static void rehearse(void) {
    size_t len = rehearsal.bytes;
    void *host = NULL, *dev = NULL;
    cudaStream_t st[WM__STAGED_MAX_STREAMS];
    enum { MAX_EV = WM__STAGED_MAX_WORKERS * WM__STAGED_MAX_SLOTS };
    cudaEvent_t ev[MAX_EV];
    unsigned n_events = rehearsal.events < MAX_EV ? rehearsal.events : MAX_EV;
    if (wm__scratch_alloc(len, &host) != 0) return;
    for (unsigned round = 0; round < rehearsal.rounds; round++) {
        unsigned n_st = 0, n_ev = 0;
        bool reg = cudaHostRegister(host, len, cudaHostRegisterDefault) == cudaSuccess;
        if (cudaMalloc(&dev, len) != cudaSuccess) dev = NULL;
        while (n_st < WM__STAGED_MAX_STREAMS &&
               cudaStreamCreateWithFlags(&st[n_st], cudaStreamNonBlocking) == cudaSuccess)
            n_st++;
        while (n_st && n_ev < n_events &&
               cudaEventCreateWithFlags(&ev[n_ev], cudaEventDisableTiming |
                                                       cudaEventBlockingSync) == cudaSuccess)
            n_ev++;
        for (unsigned k = 0; n_ev && k < rehearsal.copies; k++) {
            size_t part = len / n_ev, off = (k % n_ev) * part;
            cudaStream_t s = st[k % n_st];
            if (reg && dev)
                cudaMemcpyAsync((char *)dev + off, (char *)host + off, part, cudaMemcpyHostToDevice,
                                s);
            cudaEventRecord(ev[k % n_ev], s);
            if (cudaEventQuery(ev[(k + 1) % n_ev]) != cudaSuccess) (void)cudaGetLastError();
            if (k + 1 >= n_ev) cudaEventSynchronize(ev[(k + 1) % n_ev]);
        }
        for (unsigned k = 0; k < n_st; k++)
            cudaStreamSynchronize(st[k]);
        for (unsigned k = 0; k < n_ev; k++)
            cudaEventDestroy(ev[k]);
        if (reg) cudaHostUnregister(host);
        /* The registered path's kind of registration too. */
        if (cudaHostRegister(host, len, cudaHostRegisterReadOnly) == cudaSuccess)
            cudaHostUnregister(host);
        for (unsigned k = 0; k < n_st; k++)
            cudaStreamDestroy(st[k]);
        if (dev) cudaFree(dev);
        (void)cudaGetLastError();
        wm__os_heap_trim();
    }
    wm__scratch_free(host, len);
}

/* bench/gpu.c's knob for the rehearsal (cuda_tune.h): rounds, events, copies, buffer bytes (0:
 * keep); takes effect at the next wm_backend_init. */
void wm__cuda_rehearsal(unsigned rounds, unsigned events, unsigned copies, size_t bytes) {
    rehearsal.rounds = rounds;
    rehearsal.events = events;
    rehearsal.copies = copies;
    if (bytes) rehearsal.bytes = wm__align_up(bytes, wm__os_page_size());
}

/* The backend's init slot (wm_backend_init): the device's primary context, then the
 * rehearsal. */
static wm_status cuda_init(int device, wm_error *err) {
    int prev = -1;
    const char *who = "wm_backend_init";
    wm_status st = use_device(device, who, &prev, err);
    if (st) {
        restore_device(prev);
        return st;
    }
    cudaError_t ce = CU(cudaFree(NULL)); /* creates the primary context */
    if (ce) {
        st = cu_fail(err, ce, "cudaFree", "%s: starting the runtime", who);
    } else {
        rehearse();
        (void)cudaGetLastError();
    }
    restore_device(prev);
    return st;
}

#else /* no CUDA toolkit at build time: the table's row says so */

const wm__backend wm__backend_cuda = {
    .kind = WM_BACKEND_CUDA,
    .name = "cuda",
    .absent = "this build has no CUDA backend (the CUDA toolkit was not found at build time)",
};

#endif /* WM_HAVE_CUDA */
