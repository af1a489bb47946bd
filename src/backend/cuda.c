/*
 * cuda.c: the CUDA backend, and wm_backend_init.
 *
 * A load gives every chunk of the plan (the packed layout) one cudaMalloc buffer and fills it
 * from the file through a ring of host slots, two per worker. Only the loading thread (the one
 * in wm_model_load) calls CUDA: the runtime keeps host memory for every thread that ever called
 * it, and worker threads are new on every load, so a CUDA call on a worker would leave memory
 * behind on every load (measured on an H200: 12-72 KiB per load with 1 thread, 290-390 KiB
 * with 16). The loading thread owns a few streams and one event per slot:
 *   - staged (the default; modes heap and mmap): the slots are a ring of page-allocated memory
 *     of 4 MiB slots, never more than opts.cuda->pinned_budget bytes (256 MiB by default; the
 * default 8 readers of a 16-CPU host use 64 MiB), registered whole with cudaHostRegister once per
 *     load by the loading thread while the readers already fill it (their preads fault it in).
 *     Reader threads (none with one thread: then the loading thread reads) take a free slot and
 *     the next file window, pread the window into the slot and hand the slot to the loading
 *     thread through a queue (a mutex and two condition variables). The loading thread queues
 *     one cudaMemcpyAsync per tensor piece in the window, records the slot's event, and gives
 *     the slot back to the readers once its copies are done: right after queueing it asks
 *     (cudaEventQuery) for the oldest slots, and it waits (cudaEventSynchronize) only when it
 *     has nothing else to do.
 *   - registered (opts.cuda->registered, mode mmap): the source is the file's shared read-only
 *     mapping. The loading thread registers one window of it per slot
 *     (cudaHostRegisterReadOnly), queues the same copies, and unregisters the window once its
 *     event has passed, so that at most pinned_budget bytes are registered at once. There are
 *     no readers. A private mapping is never registered: that would privatise every page.
 * Windows are aligned file ranges (so registered windows never share a page); a tensor that
 * crosses a window boundary is copied in pieces. When a load returns, its host memory is gone:
 * the model holds device memory only. Every fallible CUDA call first asks
 * wm__fault_hit(WM_OS_DEVICE), so tests can fail the k-th one; release calls cannot fail and
 * are not counted. After a failure the runtime's last error is cleared (on the loading thread,
 * the only one that saw it), so the caller's next CUDA call does not report ours.
 *
 * Sections: CUDA calls and errors; devices; the window plan; the pipeline; options; load;
 * release and pointers; test hooks; the init slot. Without WM_HAVE_CUDA the table's row only
 * says that this build has no CUDA backend.
 */
#include "cuda_tune.h"
#include "host.h"
#ifdef WM_HAVE_NCCL
#include "read_once.h"
#endif

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef WM_HAVE_CUDA
#include <cuda_runtime_api.h>

#define DEFAULT_BUDGET ((uint64_t)256 << 20)
#define MAX_WINDOW ((size_t)64 << 20)
#define MIN_WINDOW ((size_t)1 << 20)
#define MAX_WORKERS 64u
#define MAX_SLOTS 8u

/* How the pipeline runs. The defaults are what measured fastest on an H200 host (16 CPUs;
 * bench/RESULTS.md, gpu): 4 MiB staged windows, two per reader (46-47 GB/s on 8 GiB, against
 * 42-45 for 2 MiB windows). The readers fault the ring in while the loading thread pins it, so
 * a bigger window costs no serial faulting; it still means fewer, larger copies to overlap. A
 * registered window costs one cudaHostRegister, so there bigger is better (up to MAX_WINDOW).
 * bench/gpu.c changes them through wm__cuda_tune (cuda_tune.h), to measure; nothing else does. */
static struct {
    size_t window;    /* staged window (slot) size */
    unsigned slots;   /* slots per worker */
    bool serial_ring; /* register the ring before the readers start (they fault it in otherwise) */
    bool no_reap;     /* never retire finished slots early with cudaEventQuery */
} tuning = {(size_t)4 << 20, 2, false, false};

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

/* ---- the window plan ---- */

/* File bytes [off, off + len) of one tensor segment (backend.h, wm__place), inside one window,
 * and where they land: dst bytes into the buffer of the tensor's chunk. */
typedef struct piece {
    uint64_t off;
    size_t len;
    uint32_t tensor;
    uint32_t shard;
    uint64_t window; /* off / window size */
    size_t dst;
} piece;

/* A file range of one shard and the pieces that lie in it. */
typedef struct window {
    uint32_t shard;
    uint64_t start, end; /* from the first piece's start to the last piece's end */
    size_t first, count; /* pieces[first .. first + count) */
    uint64_t bytes;      /* tensor bytes (what progress counts) */
    bool gaps;           /* the pieces leave holes (slices): read piece by piece */
    uint32_t device;     /* the device of its first piece (the order interleaves devices) */
    uint64_t seq;        /* its rank among that device's windows */
} window;

static int by_window(const void *a, const void *b) {
    const piece *x = a, *y = b;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    if (x->window != y->window) return x->window < y->window ? -1 : 1;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->tensor < y->tensor ? -1 : x->tensor > y->tensor;
}

static int by_turn(const void *a, const void *b) {
    const window *x = a, *y = b;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    if (x->device != y->device) return x->device < y->device ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* With several devices, windows take turns by device (the first window of each device, then
 * the second of each, ...), so that every device's link is busy from the start: in file order,
 * a placement by layers or bytes would fill one device after the other. */
static void interleave(const wm_model *m, const piece *ps, window *ws, size_t nw) {
    if (m->n_devs <= 1) return;
    uint64_t seq[WM_LEDGER_DEVICES] = {0};
    for (size_t k = 0; k < nw; k++) {
        const wm__place *p = &m->place[ps[ws[k].first].tensor];
        ws[k].device = m->chunks[p->chunk].device;
        ws[k].seq = seq[ws[k].device]++;
    }
    qsort(ws, nw, sizeof *ws, by_turn);
}

/* Cuts every tensor segment at multiples of `wsize` (file offsets) and groups the pieces by
 * window. */
static wm_status plan_windows(const wm_model *m, size_t wsize, piece **pieces_out,
                              window **windows_out, size_t *n_windows, wm_error *err) {
    const wm_file *f = m->file;
    size_t n = 0, cap = f->n_tensors + 16;
    piece *ps = wm__alloc(cap * sizeof *ps);
    window *ws = NULL;
    if (!ps) goto nomem;
    for (size_t k = 0; k < f->n_tensors; k++) {
        uint32_t i = m->order[k];
        const wm__tensor *t = &f->tensors[i];
        const wm__place *p = &m->place[i];
        for (uint64_t row = 0; row < p->rows && p->seg_bytes; row++) {
            uint64_t seg = t->offset + p->src_off + row * p->src_stride;
            uint64_t seg_end = seg + p->seg_bytes;
            size_t dst = p->dst_off + (size_t)(p->dst_lo + row * p->seg_bytes);
            for (uint64_t off = seg; off < seg_end;) {
                uint64_t w = off / wsize, wend = (w + 1) * wsize, end = seg_end;
                if (end > wend) end = wend;
                if (n == cap) {
                    piece *np = wm__realloc(ps, cap * 2 * sizeof *np);
                    if (!np) goto nomem;
                    ps = np;
                    cap *= 2;
                }
                ps[n++] = (piece){.off = off,
                                  .len = (size_t)(end - off),
                                  .tensor = i,
                                  .shard = t->shard,
                                  .window = w,
                                  .dst = dst + (size_t)(off - seg)};
                off = end;
            }
        }
    }
    qsort(ps, n, sizeof *ps, by_window);
    size_t nw = 0;
    for (size_t k = 0; k < n; k++)
        if (k == 0 || ps[k].shard != ps[k - 1].shard || ps[k].window != ps[k - 1].window) nw++;
    ws = wm__calloc(nw ? nw : 1, sizeof *ws);
    if (!ws) goto nomem;
    nw = 0;
    for (size_t k = 0; k < n; k++) {
        if (k == 0 || ps[k].shard != ps[k - 1].shard || ps[k].window != ps[k - 1].window)
            ws[nw++] =
                (window){.shard = ps[k].shard, .start = ps[k].off, .end = ps[k].off, .first = k};
        window *w = &ws[nw - 1];
        if (w->count && ps[k].off != w->end) w->gaps = true;
        if (ps[k].off + ps[k].len > w->end) w->end = ps[k].off + ps[k].len;
        w->count++;
        w->bytes += ps[k].len;
    }
    interleave(m, ps, ws, nw);
    *pieces_out = ps;
    *windows_out = ws;
    *n_windows = nw;
    return WM_OK;
nomem:
    wm__free(ps);
    wm__free(ws);
    return wm__err(err, WM_ENOMEM, 0, "%s: out of memory for the copy plan", f->path);
}

/* ---- the pipeline ---- */

/* The backend's state. Devices are m->devs[0 .. m->n_devs); a chunk's buffer is on
 * m->devs[chunk.device]. */
typedef struct cuda_state {
    unsigned char **dev; /* one buffer per chunk (NULL for an empty chunk) */
    uint32_t n_dev;      /* entries of dev filled so far (release frees [0, n_dev)) */
} cuda_state;

#define MAX_DEVS WM_LEDGER_DEVICES

/* A slot's copies may go to several devices: an event on each device it queued copies to
 * (`pending`, a bit per device index), all of which must pass before the slot is free. */
typedef struct slot {
    unsigned char *host; /* staged: the slot's part of the ring */
    unsigned char *reg;  /* registered: the window of the mapping registered now, or NULL */
    size_t reg_len;
    const unsigned char *src; /* where the window's bytes are, once filled */
    size_t win;               /* the window it holds */
    cudaEvent_t ev[MAX_DEVS];
    uint32_t ev_made; /* bit d: ev[d] exists */
    uint32_t pending; /* bit d: ev[d] was recorded after this slot's copies to device d */
} slot;

#define MAX_STREAMS 4u

typedef struct pipe {
    wm_model *m;
    cuda_state *cs;
    const window *win;
    size_t n_win;
    const piece *pieces;
    size_t wsize;    /* window size (a slot's bytes) */
    bool registered; /* the registered path */
    unsigned char *ring;
    const wm__region *maps; /* registered: one shared mapping per shard */
    const uint64_t *map_off;
    const int *direct_fd;   /* staged with direct_io: an O_DIRECT descriptor per shard, or -1 */
    atomic_bool direct_off; /* a direct read was refused: buffered reads from then on */
    bool own_fds;           /* rows to read: each reader reads through its own (wm__fds) */
    slot *slots;
    unsigned n_slots;
    cudaStream_t streams[MAX_DEVS][MAX_STREAMS];
    unsigned n_streams[MAX_DEVS]; /* streams made so far, per device */
    unsigned streams_each;        /* streams a device gets */
    int cur;                      /* the device index current on the loading thread, or -1 */
    bool ring_registered;
    bool sync_made; /* mu, to_readers and to_loader exist (pipe_sync_init) */

    /* The hand-over between readers and the loading thread, under mu. */
    wm_os_mutex mu;
    wm_os_cond to_readers; /* a slot was freed, or stop */
    wm_os_cond to_loader;  /* a slot was filled, or a failure */
    unsigned *free_q;      /* free slots (a stack) */
    size_t n_free;
    unsigned *filled_q; /* filled slots (a ring of n_slots) */
    size_t filled_head, n_filled;
    size_t next; /* the next window to fill */
    bool stop;   /* readers leave */
    bool failed;
    wm_error first; /* the first failure */

    /* The loading thread's own. */
    unsigned *busy_q; /* slots with copies queued, oldest first (a ring of n_slots) */
    size_t busy_head, n_busy;
    size_t issued; /* windows whose copies are queued */
    uint64_t done, total;
} pipe;

static _Atomic(void *) last_ring; /* test hook: base of the last staged ring */

/* Records the first failure and stops everyone. The caller holds mu. */
static void fail_locked(pipe *p, const wm_error *e) {
    if (!p->failed) p->first = *e;
    p->failed = true;
    p->stop = true;
    wm__os_cond_broadcast(&p->to_readers);
    wm__os_cond_broadcast(&p->to_loader);
}

static bool pipe_failed(pipe *p) {
    wm__os_mutex_lock(&p->mu);
    bool f = p->failed;
    wm__os_mutex_unlock(&p->mu);
    return f;
}

static void fail_pipe(pipe *p, const wm_error *e) {
    wm__os_mutex_lock(&p->mu);
    fail_locked(p, e);
    wm__os_mutex_unlock(&p->mu);
}

/* Staged: preads a window into its slot. No CUDA call: readers run this. With direct_io the
 * read goes through the shard's O_DIRECT descriptor and covers the window's aligned range
 * (windows are aligned file ranges of a multiple of WM_OS_DIRECT_ALIGN, so the cover fits the
 * page-aligned slot; past the end of the file a direct read is short, which is fine). A file
 * system that refuses a direct read (EINVAL) turns direct reads off for the rest of the load and
 * the window is read buffered. */
/* A window with holes (tensor-parallel slices): each run of file-contiguous pieces is read on
 * its own, to its place in the slot (the slot mirrors the window's file range), so that only
 * the slices' bytes are read. */
static wm_status read_runs(pipe *p, const wm__fds *fds, slot *s, const window *win, wm_error *err) {
    const wm__shard *sh = &p->m->file->shards[win->shard];
    int fd = wm__fds_get(fds, p->m->file, win->shard);
    for (size_t i = win->first; i < win->first + win->count;) {
        uint64_t a = p->pieces[i].off, b = a + p->pieces[i].len;
        for (i++; i < win->first + win->count && p->pieces[i].off == b; i++)
            b += p->pieces[i].len;
        size_t len = (size_t)(b - a), got;
        int e = wm__os_pread(fd, s->host + (a - win->start), len, a, &got);
        if (e)
            return wm__err(err, wm__status_io(e), e, "%s: reading %zu bytes at offset %llu: %s",
                           sh->path, len, (unsigned long long)a, wm__errno_text(e));
        atomic_fetch_add(&p->m->bytes_read, got);
        if (got < len)
            return wm__err(err, WM_EFORMAT, 0,
                           "%s: tensor data at offset %llu: the file ends %llu bytes early (it is "
                           "shorter than its header says)",
                           sh->path, (unsigned long long)a, (unsigned long long)(len - got));
    }
    s->src = s->host;
    return WM_OK;
}

/* `fds`: the reading thread's descriptors (wm__fds, NULL: the shards'), for the runs of windows
 * with holes. */
static wm_status read_window(pipe *p, const wm__fds *fds, slot *s, const window *win,
                             wm_error *err) {
    if (win->gaps) return read_runs(p, fds, s, win, err);
    const wm__shard *sh = &p->m->file->shards[win->shard];
    bool direct = p->direct_fd && p->direct_fd[win->shard] >= 0 && !atomic_load(&p->direct_off);
    int fd = direct ? p->direct_fd[win->shard] : sh->fd;
    uint64_t a = direct ? win->start / WM_OS_DIRECT_ALIGN * WM_OS_DIRECT_ALIGN : win->start;
    uint64_t b = direct ? wm__align_up(win->end, WM_OS_DIRECT_ALIGN) : win->end;
    size_t len = (size_t)(b - a), got;
    int e = wm__os_pread(fd, s->host, len, a, &got);
    if (e == EINVAL && direct) {
        atomic_store(&p->direct_off, true);
        return read_window(p, fds, s, win, err);
    }
    if (e)
        return wm__err(err, wm__status_io(e), e, "%s: reading %zu bytes at offset %llu%s: %s",
                       sh->path, len, (unsigned long long)a, direct ? " (direct)" : "",
                       wm__errno_text(e));
    atomic_fetch_add(&p->m->bytes_read, got);
    if (got < win->end - a)
        return wm__err(err, WM_EFORMAT, 0,
                       "%s: tensor data at offset %llu: the file ends %llu bytes early (it is "
                       "shorter than its header says)",
                       sh->path, (unsigned long long)win->start,
                       (unsigned long long)(win->end - a - got));
    s->src = s->host + (win->start - a);
    return WM_OK;
}

/* Registered: registers the pages of the mapping under a window (loading thread). */
static wm_status register_window(pipe *p, slot *s, const window *win, wm_error *err) {
    const wm__shard *sh = &p->m->file->shards[win->shard];
    size_t page = wm__os_page_size();
    uint64_t a = win->start / page * page, b = wm__align_up(win->end, page);
    unsigned char *base = (unsigned char *)p->maps[win->shard].base + (a - p->map_off[win->shard]);
    cudaError_t ce = CU(cudaHostRegister(base, (size_t)(b - a), cudaHostRegisterReadOnly));
    if (ce)
        return cu_fail(err, ce, "cudaHostRegister", "%s: registering %llu bytes at offset %llu",
                       sh->path, (unsigned long long)(b - a), (unsigned long long)a);
    wm__ledger_acquire(WM_LEDGER_PINNED, b - a);
    s->reg = base;
    s->reg_len = (size_t)(b - a);
    s->src = base + (win->start - a);
    return WM_OK;
}

/* Makes device index d current on the loading thread, if it is not already. */
static wm_status switch_device(pipe *p, unsigned d, wm_error *err) {
    if (p->cur == (int)d) return WM_OK;
    int dev = p->m->devs[d];
    cudaError_t ce = CU(cudaSetDevice(dev));
    if (ce) return cu_fail(err, ce, "cudaSetDevice", "%s: device %d", p->m->file->path, dev);
    p->cur = (int)d;
    return WM_OK;
}

/* How many pieces from pieces[i] on are whole rows of one slice at its stride (the rows of a
 * WM_SPLIT_LAST slice in one window): one 2D copy moves them all. 1 for any other piece. */
static size_t strided_rows(const pipe *p, size_t i, size_t end) {
    const piece *pc = &p->pieces[i];
    const wm__place *pl = &p->m->place[pc->tensor];
    if (pl->rows <= 1 || pc->len != pl->seg_bytes) return 1;
    size_t n = 1;
    while (i + n < end) {
        const piece *q = &p->pieces[i + n];
        if (q->tensor != pc->tensor || q->len != pc->len ||
            q->off != pc->off + n * pl->src_stride || q->dst != pc->dst + n * pc->len)
            break;
        n++;
    }
    return n;
}

/* Queues a filled slot's copies, each to its tensor's device (the rows of a strided slice in
 * one 2D copy), and records the slot's event on every device it copied to (loading thread). */
static wm_status issue(pipe *p, unsigned k, wm_error *err) {
    const wm_model *m = p->m;
    slot *s = &p->slots[k];
    const window *win = &p->win[s->win];
    const char *path = m->file->shards[win->shard].path;
    cudaError_t ce;
    size_t end = win->first + win->count;
    for (size_t i = win->first; i < end;) {
        const piece *pc = &p->pieces[i];
        const wm__place *pl = &m->place[pc->tensor];
        unsigned d = m->chunks[pl->chunk].device;
        wm_status st = switch_device(p, d, err);
        if (st) return st;
        size_t rows = strided_rows(p, i, end);
        unsigned char *dst = p->cs->dev[pl->chunk] + pc->dst;
        const unsigned char *src = s->src + (pc->off - win->start);
        cudaStream_t stream = p->streams[d][k % p->streams_each];
        ce = rows == 1 ? CU(cudaMemcpyAsync(dst, src, pc->len, cudaMemcpyHostToDevice, stream))
                       : CU(cudaMemcpy2DAsync(dst, pc->len, src, (size_t)pl->src_stride, pc->len,
                                              rows, cudaMemcpyHostToDevice, stream));
        if (ce)
            return cu_fail(err, ce, rows == 1 ? "cudaMemcpyAsync" : "cudaMemcpy2DAsync",
                           "%s: tensor '%s': copying %zu bytes to device %d", path,
                           m->file->names + m->file->tensors[pc->tensor].name_off, pc->len * rows,
                           m->devs[d]);
        s->pending |= 1u << d;
        i += rows;
    }
    for (unsigned d = 0; d < m->n_devs; d++) {
        if (!(s->pending & (1u << d))) continue;
        wm_status st = switch_device(p, d, err);
        if (st) return st;
        ce = CU(cudaEventRecord(s->ev[d], p->streams[d][k % p->streams_each]));
        if (ce)
            return cu_fail(err, ce, "cudaEventRecord", "%s: copies to device %d", path, m->devs[d]);
    }
    p->busy_q[(p->busy_head + p->n_busy++) % p->n_slots] = k;
    p->issued++;
    p->done += win->bytes;
    return WM_OK;
}

/* Whether the slot's copies to every device have passed: waits for them (`wait`), or only asks
 * and sets *done. A device whose copies passed leaves `pending`. */
static wm_status slot_passed(pipe *p, slot *s, bool wait, bool *done, wm_error *err) {
    for (unsigned d = 0; d < p->m->n_devs; d++) {
        if (!(s->pending & (1u << d))) continue;
        cudaError_t ce = wait ? CU(cudaEventSynchronize(s->ev[d])) : CU(cudaEventQuery(s->ev[d]));
        if (ce == cudaErrorNotReady && !wait) {
            *done = false;
            return WM_OK;
        }
        if (ce)
            return cu_fail(err, ce, wait ? "cudaEventSynchronize" : "cudaEventQuery",
                           "%s: waiting for copies to device %d", p->m->file->path, p->m->devs[d]);
        s->pending &= ~(1u << d);
    }
    *done = true;
    return WM_OK;
}

/* Gives the oldest busy slot back once its copies are done: unregisters its window (registered
 * path) and hands it to the readers (loading thread). With `wait` it waits for the copies
 * (cudaEventSynchronize); without, it only asks (cudaEventQuery) and sets *done to whether the
 * slot was retired. */
static wm_status retire_oldest(pipe *p, bool wait, bool *done, wm_error *err) {
    unsigned k = p->busy_q[p->busy_head];
    slot *s = &p->slots[k];
    wm_status st = slot_passed(p, s, wait, done, err);
    if (st || !*done) return st;
    if (s->reg) {
        cudaHostUnregister(s->reg);
        wm__ledger_release(WM_LEDGER_PINNED, s->reg_len);
        s->reg = NULL;
        s->reg_len = 0;
    }
    p->busy_head = (p->busy_head + 1) % p->n_slots;
    p->n_busy--;
    wm__os_mutex_lock(&p->mu);
    p->free_q[p->n_free++] = k;
    wm__os_cond_broadcast(&p->to_readers);
    wm__os_mutex_unlock(&p->mu);
    return WM_OK;
}

/* Retires every busy slot whose copies are already done, oldest first, without waiting: the
 * readers get their slots back as soon as possible, not only when the loading thread has
 * nothing else to do. */
static wm_status reap(pipe *p, wm_error *err) {
    if (tuning.no_reap) return WM_OK;
    bool done = true;
    while (done && p->n_busy) {
        wm_status st = retire_oldest(p, false, &done, err);
        if (st) return st;
    }
    return WM_OK;
}

/* A reader: takes a free slot and the next window, preads, hands the slot to the loading
 * thread; until the windows run out or the pipe stops. */
static void read_loop(void *arg) {
    pipe *p = arg;
    wm__fds fds = {0};
    if (p->own_fds) wm__fds_open(p->m->file, &fds);
    wm__os_mutex_lock(&p->mu);
    while (!p->stop && p->next < p->n_win) {
        if (!p->n_free) {
            wm__os_cond_wait(&p->to_readers, &p->mu);
            continue;
        }
        unsigned k = p->free_q[--p->n_free];
        size_t i = p->next++;
        wm__os_mutex_unlock(&p->mu);
        wm_error e;
        wm_status st = read_window(p, &fds, &p->slots[k], &p->win[i], &e);
        wm__os_mutex_lock(&p->mu);
        if (st) {
            fail_locked(p, &e);
            break;
        }
        p->slots[k].win = i;
        p->filled_q[(p->filled_head + p->n_filled++) % p->n_slots] = k;
        wm__os_cond_signal(&p->to_loader);
    }
    wm__os_mutex_unlock(&p->mu);
    wm__fds_close(&fds);
}

static void *reader_main(void *arg) {
    wm__os_task_scope(read_loop, arg);
    return NULL;
}

/* The loading thread's part: queue copies for filled slots, retire busy slots when there is
 * nothing else to do, and fill slots itself when no reader does (one thread, or the registered
 * path); until every window's copies are queued or the pipe fails. */
static void drive(pipe *p, bool self_fill) {
    enum { END, WAITED, ISSUE, FILL, RETIRE } act;
    for (;;) {
        unsigned k = 0;
        size_t i = 0;
        wm__os_mutex_lock(&p->mu);
        if (p->failed || (!p->n_filled && p->issued == p->n_win)) {
            act = END;
        } else if (p->n_filled) {
            k = p->filled_q[p->filled_head];
            p->filled_head = (p->filled_head + 1) % p->n_slots;
            p->n_filled--;
            act = ISSUE;
        } else if (self_fill && p->n_free && p->next < p->n_win) {
            k = p->free_q[--p->n_free];
            i = p->next++;
            act = FILL;
        } else if (p->n_busy) {
            act = RETIRE;
        } else {
            wm__os_cond_wait(&p->to_loader, &p->mu);
            act = WAITED;
        }
        wm__os_mutex_unlock(&p->mu);
        wm_error e;
        wm_status st = WM_OK;
        if (act == END) break;
        if (act == FILL) {
            slot *s = &p->slots[k];
            s->win = i;
            st = p->registered ? register_window(p, s, &p->win[i], &e)
                               : read_window(p, NULL, s, &p->win[i], &e);
        }
        if (!st && (act == ISSUE || act == FILL)) {
            st = issue(p, k, &e);
            if (!st && wm__progress(p->m, p->done, p->total))
                st = wm__err(&e, WM_ECANCELED, 0, "%s: load canceled by the progress callback",
                             p->m->file->path);
        }
        if (!st && act == ISSUE && !self_fill) st = reap(p, &e);
        if (!st && act == RETIRE) {
            bool done;
            st = retire_oldest(p, true, &done, &e);
        }
        if (st) {
            fail_pipe(p, &e);
            break;
        }
    }
}

/* The loading thread's streams and one event per slot, on every device. */
static wm_status pipe_open(pipe *p, wm_error *err) {
    const wm_model *m = p->m;
    p->streams_each = p->n_slots < MAX_STREAMS ? p->n_slots : MAX_STREAMS;
    cudaError_t ce;
    for (unsigned d = 0; d < m->n_devs; d++) {
        wm_status st = switch_device(p, d, err);
        if (st) return st;
        while (p->n_streams[d] < p->streams_each) {
            ce = CU(
                cudaStreamCreateWithFlags(&p->streams[d][p->n_streams[d]], cudaStreamNonBlocking));
            if (ce)
                return cu_fail(err, ce, "cudaStreamCreateWithFlags", "%s: device %d", m->file->path,
                               m->devs[d]);
            p->n_streams[d]++;
        }
        for (unsigned k = 0; k < p->n_slots; k++) {
            slot *s = &p->slots[k];
            ce = CU(cudaEventCreateWithFlags(&s->ev[d],
                                             cudaEventDisableTiming | cudaEventBlockingSync));
            if (ce)
                return cu_fail(err, ce, "cudaEventCreateWithFlags", "%s: device %d", m->file->path,
                               m->devs[d]);
            s->ev_made |= 1u << d;
        }
    }
    return WM_OK;
}

/* Staged: registers the whole ring, once (portable where several devices copy from it). The
 * readers may be writing into it already: pinning keeps the pages they fault in, and no copy is
 * queued from the ring before this returns. */
static wm_status pin_ring(pipe *p, wm_error *err) {
    size_t len = (size_t)p->n_slots * p->wsize;
    unsigned flags = p->m->n_devs > 1 ? cudaHostRegisterPortable : cudaHostRegisterDefault;
    cudaError_t ce = CU(cudaHostRegister(p->ring, len, flags));
    if (ce)
        return cu_fail(err, ce, "cudaHostRegister",
                       "%s: pinning %zu bytes of staging for device %d", p->m->file->path, len,
                       p->m->devs[0]);
    wm__ledger_acquire(WM_LEDGER_PINNED, len);
    p->ring_registered = true;
    return WM_OK;
}

/* Waits for every queued copy, then gives back registrations, events and streams. Cannot
 * fail: after a device error the copies are dead and nothing waits on them. */
static void pipe_close(pipe *p) {
    const wm_model *m = p->m;
    for (unsigned d = 0; d < m->n_devs; d++) {
        if (!p->n_streams[d]) continue;
        cudaSetDevice(m->devs[d]);
        for (unsigned t = 0; t < p->n_streams[d]; t++)
            cudaStreamSynchronize(p->streams[d][t]);
    }
    for (unsigned k = 0; k < p->n_slots; k++) {
        slot *s = &p->slots[k];
        if (s->reg) {
            cudaHostUnregister(s->reg);
            wm__ledger_release(WM_LEDGER_PINNED, s->reg_len);
            s->reg = NULL;
        }
        for (unsigned d = 0; d < m->n_devs; d++)
            if (s->ev_made & (1u << d)) cudaEventDestroy(s->ev[d]);
        s->ev_made = 0;
        s->pending = 0;
    }
    if (p->ring_registered) {
        cudaHostUnregister(p->ring);
        wm__ledger_release(WM_LEDGER_PINNED, (size_t)p->n_slots * p->wsize);
        p->ring_registered = false;
    }
    for (unsigned d = 0; d < m->n_devs; d++) {
        if (!p->n_streams[d]) continue;
        cudaSetDevice(m->devs[d]);
        for (unsigned t = 0; t < p->n_streams[d]; t++)
            cudaStreamDestroy(p->streams[d][t]);
        p->n_streams[d] = 0;
    }
    p->cur = -1;
    (void)cudaGetLastError();
}

/* Runs the pipeline with `n_readers` reader threads (0: the loading thread fills the slots
 * itself). Every CUDA call is made here, on the loading thread. The readers start before the
 * ring is registered: their first preads fault the ring in, in parallel, while this thread pins
 * it (registering a ring nobody touched yet means faulting in all of it on one thread first). */
static wm_status run_pipe(pipe *p, wm_os_thread *th, unsigned n_readers, wm_error *err) {
    wm_error e;
    if (!p->registered)
        for (unsigned k = 0; k < p->n_slots; k++)
            p->slots[k].host = p->ring + k * p->wsize;
    wm_status st = pipe_open(p, &e);
    if (!st && !p->registered && (tuning.serial_ring || !n_readers)) st = pin_ring(p, &e);
    if (st) {
        fail_pipe(p, &e);
    } else {
        for (unsigned k = 0; k < p->n_slots; k++)
            p->free_q[p->n_free++] = k;
    }
    unsigned started = 0;
    for (unsigned t = 0; t < n_readers && !pipe_failed(p); t++) {
        int oe = wm__os_thread_start(&th[t], reader_main, p);
        if (oe) {
            wm__err(&e, WM_ENOMEM, oe, "%s: cannot start worker thread %u: %s", p->m->file->path,
                    t + 1, wm__errno_text(oe));
            fail_pipe(p, &e);
            break;
        }
        wm__ledger_acquire(WM_LEDGER_SCRATCH, th[t].stack_len);
        started++;
    }
    if (!pipe_failed(p) && !p->registered && !p->ring_registered && pin_ring(p, &e))
        fail_pipe(p, &e);
    if (!pipe_failed(p)) drive(p, n_readers == 0);
    wm__os_mutex_lock(&p->mu);
    p->stop = true;
    wm__os_cond_broadcast(&p->to_readers);
    wm__os_mutex_unlock(&p->mu);
    for (unsigned t = 0; t < started; t++) {
        size_t len = th[t].stack_len;
        wm__os_thread_join(&th[t]);
        wm__ledger_release(WM_LEDGER_SCRATCH, len);
    }
    /* The last windows' copies must be done before the load reports success. The readers are
     * gone: the pipe is this thread's alone now. */
    bool done;
    while (!p->failed && p->n_busy)
        if (retire_oldest(p, true, &done, &e)) fail_pipe(p, &e);
    pipe_close(p);
    if (p->failed) {
        if (err) *err = p->first;
        return p->first.code;
    }
    return WM_OK;
}

/* ---- load ---- */

static void cuda_release(wm_model *m);

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
    if (o->cuda->direct_io && o->tp_world > 1)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: direct_io reads whole aligned windows; a tensor-parallel slice is "
                       "read piece by piece, buffered",
                       path);
    return WM_OK;
}

/* Workers and window size from the budget: tuning.slots (two) slots per worker, windows of at most
 * tuning.window or MAX_WINDOW bytes (and not much more than the model needs), fewer workers
 * rather than windows under MIN_WINDOW. */
static wm_status size_pipe(const wm_model *m, unsigned *workers, size_t *wsize, wm_error *err) {
    uint64_t budget = m->cuda.pinned_budget ? m->cuda.pinned_budget : DEFAULT_BUDGET;
    size_t page = wm__os_page_size();
    unsigned slots = tuning.slots;
    if (budget < (uint64_t)slots * page)
        return wm__err(err, WM_EINVAL, 0, "%s: pinned_budget %llu is below %u pages", m->file->path,
                       (unsigned long long)budget, slots);
    unsigned t = wm__load_threads(m);
    /* By default one reader for every two CPUs (a core, where CPUs are hyperthreads), leaving
     * the rest to the loading thread and the runtime's own threads: on an H200 host with 16
     * CPUs, 8 readers loaded 8 GiB at 43-47 GB/s, 12 at 42-46 and 16 at 36-40 (bench/RESULTS.md).
     */
    if (!m->opts.threads && t >= 4) t = t / 2;
    if (t > MAX_WORKERS) t = MAX_WORKERS;
    if (t == 0) t = 1;
    if (budget / ((uint64_t)slots * t) < MIN_WINDOW) {
        uint64_t fit = budget / ((uint64_t)slots * MIN_WINDOW);
        t = fit ? (unsigned)fit : 1;
    }
    uint64_t w = budget / ((uint64_t)slots * t);
    uint64_t most = m->cuda.registered ? MAX_WINDOW : tuning.window;
    if (w > most) w = most;
    /* A small model needs no more staging than about one window per worker. */
    uint64_t each = wm__align_up(m->stats.tensor_bytes / t + 1, page);
    if (w > each) w = each;
    *wsize = (size_t)(w / page * page);
    *workers = t;
    return WM_OK;
}

/* Registered path: one shared read-only mapping per shard, over its tensor data. */
static wm_status map_shards(wm_model *m, wm__region *maps, uint64_t *map_off, wm_error *err) {
    size_t page = wm__os_page_size();
    const wm_file *f = m->file;
    for (uint32_t s = 0; s < f->n_shards; s++) {
        uint64_t lo = UINT64_MAX, hi = 0;
        for (size_t i = 0; i < f->n_tensors; i++) {
            const wm__tensor *t = &f->tensors[i];
            if (t->shard != s || t->nbytes == 0) continue;
            if (t->offset < lo) lo = t->offset;
            if (t->offset + t->nbytes > hi) hi = t->offset + t->nbytes;
        }
        if (hi == 0) continue;
        map_off[s] = lo / page * page;
        wm_status st = wm__region_map(m, s, map_off[s], (size_t)(hi - map_off[s]),
                                      WM_OS_MAP_SHARED_RO, &maps[s], err);
        if (st) return st;
    }
    return WM_OK;
}

/* What the pipeline reads from, held for one load: the registered path's shared mapping of
 * each shard, or the staged path's ring (and, with direct_io, an O_DIRECT descriptor per shard,
 * -1 where that shard is read buffered). sources_free is its one release. */
typedef struct sources {
    uint32_t n_shards;
    wm__region ring;
    wm__region *maps;
    uint64_t *map_off;
    int *direct_fd;
} sources;

static void sources_free(sources *s) {
    wm__region_free(&s->ring);
    for (uint32_t i = 0; s->maps && i < s->n_shards; i++)
        wm__region_free(&s->maps[i]);
    for (uint32_t i = 0; s->direct_fd && i < s->n_shards; i++)
        wm__os_close(s->direct_fd[i]);
    wm__free(s->maps);
    wm__free(s->map_off);
    wm__free(s->direct_fd);
    *s = (sources){0};
}

/* On failure the caller runs sources_free on the half-built sources. */
static wm_status sources_open(wm_model *m, bool registered, size_t ring_len, sources *s,
                              wm_error *err) {
    const wm_file *f = m->file;
    s->n_shards = f->n_shards;
    if (registered) {
        s->maps = wm__calloc(f->n_shards, sizeof *s->maps);
        s->map_off = wm__calloc(f->n_shards, sizeof *s->map_off);
        if (!s->maps || !s->map_off)
            return wm__err(err, WM_ENOMEM, 0, "%s: out of memory", f->path);
        return map_shards(m, s->maps, s->map_off, err);
    }
    if (m->cuda.direct_io) {
        /* Where a shard's file system has no direct I/O (or the reopen fails at all), that
         * shard is read buffered: the option asks for direct reads where possible. */
        s->direct_fd = wm__alloc(f->n_shards * sizeof *s->direct_fd);
        if (!s->direct_fd) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory", f->path);
        for (uint32_t i = 0; i < f->n_shards; i++)
            if (wm__os_reopen_direct(f->shards[i].fd, &s->direct_fd[i]) != 0) s->direct_fd[i] = -1;
    }
    wm_status st = wm__region_pages(m, ring_len, WM_LEDGER_SCRATCH, &s->ring, err);
    if (st) return st;
    /* Registration faults the whole ring in: huge pages make that a few hundred faults. */
    wm__os_advise(s->ring.base, s->ring.len, WM_OS_ADV_HUGEPAGE); /* a hint: failure is harmless */
    atomic_store(&last_ring, s->ring.base);
    return WM_OK;
}

/* The pipe's lock and condition variables, all or none; pipe_sync_free accepts a pipe without
 * them. */
static wm_status pipe_sync_init(pipe *p, wm_error *err) {
    int e = wm__os_mutex_init(&p->mu);
    if (!e) {
        e = wm__os_cond_init(&p->to_readers);
        if (!e) {
            e = wm__os_cond_init(&p->to_loader);
            if (e) wm__os_cond_destroy(&p->to_readers);
        }
        if (e) wm__os_mutex_destroy(&p->mu);
    }
    if (e)
        return wm__err(err, WM_ENOMEM, e, "%s: cannot make a lock for the load: %s",
                       p->m->file->path, wm__errno_text(e));
    p->sync_made = true;
    return WM_OK;
}

static void pipe_sync_free(pipe *p) {
    if (!p->sync_made) return;
    wm__os_cond_destroy(&p->to_loader);
    wm__os_cond_destroy(&p->to_readers);
    wm__os_mutex_destroy(&p->mu);
    p->sync_made = false;
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

/* Device memory: one buffer per chunk, counted as it is made (cuda_release frees [0, n_dev)). */
static wm_status alloc_device(wm_model *m, cuda_state *cs, wm_error *err) {
    if (!m->n_chunks) return WM_OK;
    cs->dev = wm__calloc(m->n_chunks, sizeof *cs->dev);
    if (!cs->dev) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory", m->file->path);
    for (uint32_t c = 0; c < m->n_chunks; c++) {
        size_t size = m->chunks[c].size;
        int dev = m->devs[m->chunks[c].device];
        if (size) {
            void *d = NULL;
            cudaError_t ce = CU(cudaSetDevice(dev));
            if (!ce) ce = CU(cudaMalloc(&d, size));
            if (ce)
                return cu_fail(err, ce, "cudaMalloc",
                               "%s: allocating %zu bytes for buffer %u on device %d", m->file->path,
                               size, c, dev);
            cs->dev[c] = d;
            wm__ledger_device_acquire(dev, size);
            m->stats.device_bytes += size;
        }
        cs->n_dev = c + 1;
    }
    return WM_OK;
}

/* Fills the device buffers through the pipeline. Everything it acquires (windows, slots,
 * sources, the pipe's lock) is given back before it returns, on success as on failure:
 * registrations first (run_pipe's pipe_close), then host memory. */
static wm_status fill_device(wm_model *m, cuda_state *cs, wm_error *err) {
    const char *path = m->file->path;
    bool registered = m->cuda.registered != 0;
    piece *pieces = NULL;
    window *wins = NULL;
    size_t n_win = 0;
    void *work = NULL; /* the slots, the pipe's queues and the reader threads */
    sources src = {0};
    pipe p = {.m = m, .cs = cs, .registered = registered, .cur = -1};

    unsigned n_workers = 1;
    size_t wsize = 0;
    wm_status st = size_pipe(m, &n_workers, &wsize, err);
    if (!st) st = plan_windows(m, wsize, &pieces, &wins, &n_win, err);
    if (st) goto out;
    if (n_workers > n_win) n_workers = n_win ? (unsigned)n_win : 1;
    /* Readers pread (staged, more than one thread); the registered path registers windows on
     * the loading thread, so it has none. */
    unsigned n_slots = n_workers * tuning.slots;
    unsigned n_readers = registered || n_workers == 1 ? 0 : n_workers;
    m->stats.threads = registered ? 1 : n_workers;
    if (n_win == 0) goto out;

    work = wm__calloc(1, n_slots * sizeof(slot) + n_readers * sizeof(wm_os_thread) +
                             3 * (size_t)n_slots * sizeof(unsigned));
    if (!work) {
        st = wm__err(err, WM_ENOMEM, 0, "%s: out of memory", path);
        goto out;
    }
    wm_os_thread *readers = (wm_os_thread *)((slot *)work + n_slots);
    unsigned *queues = (unsigned *)(readers + n_readers);
    st = pipe_sync_init(&p, err);
    if (!st) st = sources_open(m, registered, (size_t)n_slots * wsize, &src, err);
    if (st) goto out;

    p.win = wins;
    p.n_win = n_win;
    p.pieces = pieces;
    p.wsize = wsize;
    p.ring = src.ring.base;
    p.maps = src.maps;
    p.map_off = src.map_off;
    p.direct_fd = src.direct_fd;
    p.slots = work;
    p.n_slots = n_slots;
    p.free_q = queues;
    p.filled_q = queues + n_slots;
    p.busy_q = queues + 2 * (size_t)n_slots;
    for (size_t k = 0; k < n_win; k++)
        p.total += wins[k].bytes;
    p.own_fds = wm__fds_wanted(m);
    st = run_pipe(&p, readers, n_readers, err);
out:
    pipe_sync_free(&p);
    sources_free(&src);
    wm__free(work);
    wm__free(pieces);
    wm__free(wins);
    return st;
}

static wm_status cuda_load(wm_model *m, wm_error *err) {
    cuda_state *cs = wm__calloc(1, sizeof *cs);
    if (!cs) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory", m->file->path);
    m->bctx = cs;
    int prev = -1;
    wm_status st = use_device(m->devs[0], m->file->path, &prev, err);
    for (unsigned d = 1; d < m->n_devs && !st; d++) {
        int ignored;
        st = use_device(m->devs[d], m->file->path, &ignored, err);
    }
    if (!st && m->cuda.registered) st = check_registered(m, m->devs[0], err);
#ifdef WM_HAVE_NCCL
    if (!st && m->cuda.nccl_comm) st = wm__read_once_check(m, err);
#endif
    if (!st) st = alloc_device(m, cs, err);
    if (!st) st = fill_device(m, cs, err);
#ifdef WM_HAVE_NCCL
    if (!st && m->cuda.nccl_comm) {
        cudaError_t ce = CU(cudaSetDevice(m->devs[0]));
        st = ce ? cu_fail(err, ce, "cudaSetDevice", "%s: device %d", m->file->path, m->devs[0])
                : wm__read_once_complete(m, cs->dev, err);
    }
#endif
    if (st) cuda_release(m);
    restore_device(prev);
    return st;
}

/* ---- release and pointers ---- */

static void cuda_release(wm_model *m) {
    cuda_state *cs = m->bctx;
    if (!cs) return;
    if (cs->n_dev) {
        int prev = -1;
        if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
        for (uint32_t c = 0; c < cs->n_dev; c++) {
            if (!cs->dev[c]) continue;
            int dev = m->devs[m->chunks[c].device];
            cudaSetDevice(dev);
            cudaFree(cs->dev[c]);
            wm__ledger_device_release(dev, m->chunks[c].size);
            m->stats.device_bytes -= m->chunks[c].size;
        }
        restore_device(prev);
    }
    (void)cudaGetLastError();
    wm__free(cs->dev);
    wm__free(cs);
    m->bctx = NULL;
    wm__os_heap_trim();
}

static void *cuda_host_ptr(const wm_model *m, size_t t) {
    (void)m;
    (void)t;
    return NULL;
}

static uint64_t cuda_device_ptr(const wm_model *m, size_t t) {
    const cuda_state *cs = m->bctx;
    const wm__place *p = &m->place[t];
    if (!cs || p->chunk >= cs->n_dev || !cs->dev[p->chunk]) return 0;
    return (uint64_t)(uintptr_t)(cs->dev[p->chunk] + p->dst_off);
}

static wm_status cuda_init(int device, wm_error *err);

const wm__backend wm__backend_cuda = {
    .kind = WM_BACKEND_CUDA,
    .name = "cuda",
    .init = cuda_init,
    .check = cuda_check,
    .load = cuda_load,
    .release = cuda_release,
    .host_ptr = cuda_host_ptr,
    .device_ptr = cuda_device_ptr,
};

/* ---- test hooks ---- */

void *wm__cuda_test_last_ring(void) { return atomic_load(&last_ring); }

/* bench/gpu.c's measuring knobs (cuda_tune.h). Windows are kept within [MIN_WINDOW, MAX_WINDOW],
 * slots within [1, MAX_SLOTS]. */
void wm__cuda_tune(size_t wsize, unsigned slots, unsigned flags) {
    if (wsize)
        tuning.window = wsize < MIN_WINDOW ? MIN_WINDOW : wsize > MAX_WINDOW ? MAX_WINDOW : wsize;
    if (slots) tuning.slots = slots > MAX_SLOTS ? MAX_SLOTS : slots;
    tuning.serial_ring = (flags & WM__CUDA_SERIAL_RING) != 0;
    tuning.no_reap = (flags & WM__CUDA_NO_REAP) != 0;
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
    cudaStream_t st[MAX_STREAMS];
    enum { MAX_EV = MAX_WORKERS * MAX_SLOTS };
    cudaEvent_t ev[MAX_EV];
    unsigned n_events = rehearsal.events < MAX_EV ? rehearsal.events : MAX_EV;
    if (wm__scratch_alloc(len, &host) != 0) return;
    for (unsigned round = 0; round < rehearsal.rounds; round++) {
        unsigned n_st = 0, n_ev = 0;
        bool reg = cudaHostRegister(host, len, cudaHostRegisterDefault) == cudaSuccess;
        if (cudaMalloc(&dev, len) != cudaSuccess) dev = NULL;
        while (n_st < MAX_STREAMS &&
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
