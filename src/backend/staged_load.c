/*
 * staged_load.c: a device load through the staged pipeline (staged.h): the window plan, the
 * pipeline's size within the pinned budget, what it reads from (the ring, or the registered
 * path's shared mappings; the load's reader, src/read/reader.h, reads into the ring), the device
 * buffers, and release. staged.c runs the
 * pipe set up here.
 *
 * Windows are aligned file ranges (so registered windows never share a page); a tensor that
 * crosses a window boundary is copied in pieces. When a load returns, its host memory is gone:
 * the model holds device memory only.
 *
 * Sections: tuning; the window plan; sizing; sources; filling; buffers, release and pointers;
 * sleep and wake (a loaded model's device memory to one pageable host copy and back, through a
 * small registered bounce ring); cost.
 */
#include "staged_pipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_BUDGET ((uint64_t)256 << 20)
#define MAX_WINDOW ((size_t)64 << 20)
#define MIN_WINDOW ((size_t)1 << 20)

/* ---- tuning ---- */

/* The defaults are what measured fastest on an H200 host (16 CPUs; bench/RESULTS.md, gpu):
 * 4 MiB staged windows, two per reader. The readers fault the ring in while the loading thread
 * pins it, so a bigger window costs no serial faulting; it still means fewer, larger copies to
 * overlap. A registered window costs one registration, so there bigger is better (up to
 * MAX_WINDOW). bench/gpu.c changes them through wm__cuda_tune (cuda_tune.h), to measure. */
wm__staged_tuning wm__staged_tuning_now = {.window = (size_t)4 << 20,
                                           .slots = 2,
                                           .swap_piece = WM__SWAP_PIECE,
                                           .swap_streams = WM__SWAP_STREAMS};

static _Atomic(void *) last_ring; /* test hook: base of the last staged ring */

void *wm__staged_last_ring(void) { return atomic_load(&last_ring); }

bool wm__staged_swap_loader_waits;

/* Windows are kept within [MIN_WINDOW, MAX_WINDOW], slots within [1, WM__STAGED_MAX_SLOTS]. */
void wm__staged_tune(size_t wsize, unsigned slots, unsigned flags) {
    wm__staged_tuning *t = &wm__staged_tuning_now;
    if (wsize)
        t->window = wsize < MIN_WINDOW ? MIN_WINDOW : wsize > MAX_WINDOW ? MAX_WINDOW : wsize;
    if (slots) t->slots = slots > WM__STAGED_MAX_SLOTS ? WM__STAGED_MAX_SLOTS : slots;
    t->serial_ring = (flags & WM__STAGED_SERIAL_RING) != 0;
    t->no_reap = (flags & WM__STAGED_NO_REAP) != 0;
}

void wm__staged_tune_swap(size_t piece, unsigned streams, bool pinned_whole, bool no_huge,
                          bool no_prefault) {
    wm__staged_tuning *t = &wm__staged_tuning_now;
    t->swap_pinned_whole = pinned_whole;
    t->swap_piece = piece ? piece : WM__SWAP_PIECE;
    t->swap_streams = !streams                           ? WM__SWAP_STREAMS
                      : streams > WM__STAGED_MAX_STREAMS ? WM__STAGED_MAX_STREAMS
                                                         : streams;
    t->swap_no_huge = no_huge;
    t->swap_no_prefault = no_prefault;
}

/* ---- the window plan ---- */

static int by_window(const void *a, const void *b) {
    const wm__piece *x = a, *y = b;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    if (x->window != y->window) return x->window < y->window ? -1 : 1;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->tensor < y->tensor ? -1 : x->tensor > y->tensor;
}

static int by_turn(const void *a, const void *b) {
    const wm__window *x = a, *y = b;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    if (x->device != y->device) return x->device < y->device ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* With several devices, windows take turns by device (the first window of each device, then
 * the second of each, ...), so that every device's link is busy from the start: in file order,
 * a placement by layers or bytes would fill one device after the other. */
static void interleave(const wm_model *m, const wm__piece *ps, wm__window *ws, size_t nw) {
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
static wm_status plan_windows(const wm_model *m, size_t wsize, wm__piece **pieces_out,
                              wm__window **windows_out, size_t *n_windows, wm_error *err) {
    const wm_file *f = m->file;
    size_t n = 0, cap = f->n_tensors + 16;
    wm__piece *ps = wm__alloc(cap * sizeof *ps);
    wm__window *ws = NULL;
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
                    wm__piece *np = wm__realloc(ps, cap * 2 * sizeof *np);
                    if (!np) goto nomem;
                    ps = np;
                    cap *= 2;
                }
                ps[n++] = (wm__piece){.off = off,
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
            ws[nw++] = (wm__window){
                .shard = ps[k].shard, .start = ps[k].off, .end = ps[k].off, .first = k};
        wm__window *w = &ws[nw - 1];
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

/* ---- sizing ---- */

/* Workers and window size from the budget: `slots` (two) slots per worker, windows of at most
 * the tuned window or MAX_WINDOW bytes (and not much more than the model needs), fewer workers
 * rather than windows under MIN_WINDOW. */
static wm_status size_pipe(const wm_model *m, const wm__staged_opts *o, unsigned *workers,
                           size_t *wsize, wm_error *err) {
    uint64_t budget = o->pinned_budget ? o->pinned_budget : DEFAULT_BUDGET;
    size_t page = wm__os_page_size();
    unsigned slots = wm__staged_tuning_now.slots;
    if (budget < (uint64_t)slots * page)
        return wm__err(err, WM_EINVAL, 0, "%s: pinned_budget %llu is below %u pages", m->file->path,
                       (unsigned long long)budget, slots);
    unsigned t = wm__load_threads(m);
    /* By default one reader for every two CPUs (a core, where CPUs are hyperthreads), leaving
     * the rest to the loading thread and the runtime's own threads: on an H200 host with 16
     * CPUs, 8 readers loaded 8 GiB at 43-47 GB/s, 12 at 42-46 and 16 at 36-40 (bench/RESULTS.md).
     */
    if (!m->opts.threads && t >= 4) t = t / 2;
    if (t > WM__STAGED_MAX_WORKERS) t = WM__STAGED_MAX_WORKERS;
    if (t == 0) t = 1;
    if (budget / ((uint64_t)slots * t) < MIN_WINDOW) {
        uint64_t fit = budget / ((uint64_t)slots * MIN_WINDOW);
        t = fit ? (unsigned)fit : 1;
    }
    uint64_t w = budget / ((uint64_t)slots * t);
    uint64_t most = o->registered ? MAX_WINDOW : wm__staged_tuning_now.window;
    if (w > most) w = most;
    /* A small model needs no more staging than about one window per worker. */
    uint64_t each = wm__align_up(m->stats.tensor_bytes / t + 1, page);
    if (w > each) w = each;
    *wsize = (size_t)(w / page * page);
    *workers = t;
    return WM_OK;
}

/* ---- sources ---- */

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
 * each shard, or the staged path's ring. sources_free is its one release. */
typedef struct sources {
    uint32_t n_shards;
    wm__region ring;
    wm__region *maps;
    uint64_t *map_off;
} sources;

static void sources_free(sources *s) {
    wm__region_free(&s->ring);
    for (uint32_t i = 0; s->maps && i < s->n_shards; i++)
        wm__region_free(&s->maps[i]);
    wm__free(s->maps);
    wm__free(s->map_off);
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
    wm_status st = wm__region_pages(m, ring_len, WM_LEDGER_SCRATCH, &s->ring, err);
    if (st) return st;
    /* Registration faults the whole ring in: huge pages make that a few hundred faults. */
    wm__os_advise(s->ring.base, s->ring.len, WM_OS_ADV_HUGEPAGE); /* a hint: failure is harmless */
    atomic_store(&last_ring, s->ring.base);
    return WM_OK;
}

/* ---- filling ---- */

/* Fills the device buffers through the pipeline. Everything it acquires (windows, slots,
 * sources, the pipe's lock) is given back before it returns, on success as on failure:
 * registrations first (wm__pipe_run's close), then host memory. */
static wm_status fill_device(wm_model *m, wm__dev *dv, unsigned char **buf,
                             const wm__staged_opts *o, wm_error *err) {
    const char *path = m->file->path;
    bool registered = o->registered;
    wm__piece *pieces = NULL;
    wm__window *wins = NULL;
    size_t n_win = 0;
    void *work = NULL; /* the slots, the pipe's queues and the reader threads */
    sources src = {0};
    wm__pipe p = {.m = m, .dv = dv, .buf = buf, .registered = registered};

    unsigned n_workers = 1;
    size_t wsize = 0;
    wm_status st = size_pipe(m, o, &n_workers, &wsize, err);
    if (!st) st = plan_windows(m, wsize, &pieces, &wins, &n_win, err);
    if (st) goto out;
    if (n_workers > n_win) n_workers = n_win ? (unsigned)n_win : 1;
    /* Readers pread (staged, more than one thread); the registered path registers windows on
     * the loading thread, so it has none. */
    unsigned n_slots = n_workers * wm__staged_tuning_now.slots;
    unsigned n_readers = registered || n_workers == 1 ? 0 : n_workers;
    m->stats.threads = registered ? 1 : n_workers;
    if (n_win == 0) goto out;

    work = wm__calloc(1, n_slots * sizeof(wm__slot) + n_readers * sizeof(wm_os_thread) +
                             3 * (size_t)n_slots * sizeof(unsigned));
    if (!work) {
        st = wm__err(err, WM_ENOMEM, 0, "%s: out of memory", path);
        goto out;
    }
    wm_os_thread *readers = (wm_os_thread *)((wm__slot *)work + n_slots);
    unsigned *queues = (unsigned *)(readers + n_readers);
    st = wm__pipe_sync_init(&p, err);
    if (!st) st = sources_open(m, registered, (size_t)n_slots * wsize, &src, err);
    if (st) goto out;

    p.win = wins;
    p.n_win = n_win;
    p.pieces = pieces;
    p.wsize = wsize;
    p.ring = src.ring.base;
    p.maps = src.maps;
    p.map_off = src.map_off;
    p.slots = work;
    p.n_slots = n_slots;
    p.free_q = queues;
    p.filled_q = queues + n_slots;
    p.busy_q = queues + 2 * (size_t)n_slots;
    for (size_t k = 0; k < n_win; k++)
        p.total += wins[k].bytes;
    p.own_fds = wm__fds_wanted(m);
    st = wm__pipe_run(&p, readers, n_readers, err);
out:
    wm__pipe_sync_free(&p);
    sources_free(&src);
    wm__free(work);
    wm__free(pieces);
    wm__free(wins);
    return st;
}

/* ---- buffers, release and pointers ---- */

/* The load's state: one device buffer per chunk (NULL for an empty chunk). */
typedef struct staged_state {
    unsigned char **buf;
    uint32_t n_buf; /* entries of buf filled so far (release frees [0, n_buf)) */
    /* Asleep (wm__staged_sleep): buf[] all NULL, and every chunk's bytes in `host`, one after
     * the other in chunk order (host_len: no padding, so the host copy is the device bytes to
     * the byte), pageable; `host` is empty for a model of no bytes. */
    bool asleep;
    wm__region host;
    bool host_pinned; /* the pinned_whole choice: `host` registered whole (and counted pinned) */
} staged_state;

/* Device memory of chunk c, counted as it is made; `what` (or NULL) says what for in the error. */
static wm_status make_buffer(wm_model *m, wm__dev *dv, staged_state *ss, uint32_t c,
                             const char *what, wm_error *err) {
    size_t size = m->chunks[c].size;
    unsigned d = m->chunks[c].device;
    void *b = NULL;
    int ce = dv->ops->alloc(dv, d, size, &b);
    if (ce) {
        char prefix[192];
        snprintf(prefix, sizeof prefix, "%s: %s%sallocating %zu bytes for buffer %u on device %d",
                 m->file->path, what ? what : "", what ? ": " : "", size, c, m->devs[d]);
        return dv->ops->fail(dv, ce, prefix, err);
    }
    ss->buf[c] = b;
    wm__ledger_device_acquire(m->devs[d], size);
    m->stats.device_bytes += size;
    return WM_OK;
}

/* Device memory: one buffer per chunk, counted as it is made; a chunk in the caller's memory
 * (wm__chunk.ext) is that memory, neither made nor counted. */
static wm_status alloc_device(wm_model *m, wm__dev *dv, staged_state *ss, wm_error *err) {
    if (!m->n_chunks) return WM_OK;
    ss->buf = wm__calloc(m->n_chunks, sizeof *ss->buf);
    if (!ss->buf) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory", m->file->path);
    for (uint32_t c = 0; c < m->n_chunks; c++) {
        size_t size = m->chunks[c].size;
        if (size && m->chunks[c].ext) {
            ss->buf[c] = (unsigned char *)(uintptr_t)m->chunks[c].ext;
        } else if (size) {
            wm_status st = make_buffer(m, dv, ss, c, NULL, err);
            if (st) return st;
        }
        ss->n_buf = c + 1;
    }
    return WM_OK;
}

wm_status wm__staged_load(wm_model *m, wm__dev *dv, const wm__staged_opts *o, wm_error *err) {
    staged_state *ss = wm__calloc(1, sizeof *ss);
    if (!ss) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory", m->file->path);
    m->bctx = ss;
    wm_status st = alloc_device(m, dv, ss, err);
    if (!st) st = fill_device(m, dv, ss->buf, o, err);
    return st;
}

/* The device buffers made (not the caller's memory) freed and uncounted, their entries NULL. */
static void device_buffers_free(wm_model *m, wm__dev *dv, staged_state *ss) {
    for (uint32_t c = 0; c < ss->n_buf; c++) {
        if (!ss->buf[c] || m->chunks[c].ext) continue; /* the caller's memory stays */
        unsigned d = m->chunks[c].device;
        dv->ops->free(dv, d, ss->buf[c]);
        wm__ledger_device_release(m->devs[d], m->chunks[c].size);
        m->stats.device_bytes -= m->chunks[c].size;
        ss->buf[c] = NULL;
    }
}

/* The host copy registered whole (the pinned_whole choice) unregistered and uncounted pinned,
 * where it is. A release: cannot fail. */
static void host_unpin(wm__dev *dv, staged_state *ss) {
    if (!ss->host_pinned) return;
    dv->ops->host_unregister(dv, ss->host.base);
    wm__ledger_release(WM_LEDGER_PINNED, ss->host.len);
    ss->host_pinned = false;
}

/* The host copy registered whole with every device (portable) and counted pinned; 0 or the
 * device's code. */
static int host_pin(wm__dev *dv, staged_state *ss) {
    int ce = dv->ops->host_register(dv, ss->host.base, ss->host.len, WM__HOST_PORTABLE);
    if (ce) return ce;
    wm__ledger_acquire(WM_LEDGER_PINNED, ss->host.len);
    ss->host_pinned = true;
    return 0;
}

/* A sleeping model's host copy: unregistered where it is registered (pinned_whole), then its
 * pages freed (registration before pages), timed into t when t is not NULL (added to what t
 * holds). Accepts an empty region; leaves it empty. */
static void host_copy_free(wm__dev *dv, staged_state *ss, wm__swap_times *t) {
    wm__region *r = &ss->host;
    if (!r->base) return;
    double t0 = wm__os_now();
    host_unpin(dv, ss);
    double t1 = wm__os_now();
    wm__region_free(r);
    if (t) {
        t->host_unregister += t1 - t0;
        t->host_free += wm__os_now() - t1;
    }
}

void wm__staged_release(wm_model *m, wm__dev *dv) {
    staged_state *ss = m->bctx;
    if (!ss) return;
    host_copy_free(dv, ss, NULL);
    device_buffers_free(m, dv, ss);
    wm__free(ss->buf);
    wm__free(ss);
    m->bctx = NULL;
}

/* ---- sleep and wake ---- */

/* Why pieces of WM__SWAP_PIECE (64 MiB) over WM__SWAP_STREAMS (2) streams a device: at the bus's
 * ~50 GiB/s a piece takes ~1.3 ms, so a copy call's own cost (microseconds) is under 1% of it,
 * and an 8 GiB model is 128 calls; with two streams the copy engine always has the next piece
 * queued behind the one it runs, whatever a stream does between them, and a chunk of several
 * GiB is not one copy that a failure or a wait must take whole.
 *
 * Why a bounce ring rather than a pinned host copy: pinning 8 GiB took 0.14-0.17 s on the H100
 * host and unpinning it 0.13 s, beside 0.175 s of copies (bench/RESULTS.md, "The wake in
 * parts"); both are CUDA calls, so only the loading thread may make them and nothing overlaps
 * them. A ring of a few pieces is registered and unregistered in milliseconds, and the load's
 * threads move the bytes between it and the pageable host copy at memory speed, beside the
 * copies, as a staged load does from the page cache. */

/* The host copy's bytes: every chunk's, packed in chunk order. */
static size_t host_len(const wm_model *m, const staged_state *ss) {
    size_t len = 0;
    for (uint32_t c = 0; c < ss->n_buf; c++)
        len += m->chunks[c].size;
    return len;
}

/* Faulting host memory in before it is used (the host copy, the bounce ring). The kernel zeroes
 * every page it faults in, at one CPU's memory speed: on one thread, most of a second for 8 GiB.
 * Faulted first by the load's threads (MADV_POPULATE_WRITE, slices of the piece size rounded up
 * to whole huge pages), the copies and the registrations find the pages there. A hint: where a
 * thread cannot start or a slice cannot be faulted, the first touch faults the rest. */
typedef struct prefault_work {
    unsigned char *base;
    size_t len, slice;
    _Atomic size_t next; /* the next slice's offset */
} prefault_work;

static void prefault_slices(void *arg) {
    prefault_work *w = arg;
    for (size_t off; (off = atomic_fetch_add(&w->next, w->slice)) < w->len;) {
        size_t n = w->len - off < w->slice ? w->len - off : w->slice;
        wm__os_advise(w->base + off, n, WM_OS_ADV_POPULATE_WRITE);
    }
}

static void prefault(wm_model *m, unsigned char *base, size_t len) {
    size_t slice = (size_t)wm__align_up(wm__staged_tuning_now.swap_piece, WM_OS_HUGE_PAGE);
    prefault_work w = {.base = base, .len = len, .slice = slice};
    size_t slices = (len + slice - 1) / slice;
    unsigned n = wm__load_threads(m);
    if (n > slices) n = (unsigned)slices;
    wm_os_thread th[WM__MAX_THREADS];
    wm__crew crew = {.fn = prefault_slices, .arg = &w, .th = th};
    if (n > 1) (void)wm__crew_start(m->file->path, &crew, n - 1, NULL); /* fewer: still a hint */
    prefault_slices(&w);                                                /* this thread too */
    wm__crew_join(&crew);
}

/* The host copy of a model going to sleep: one page allocation (huge pages advised: a huge
 * page is one fault where 4 KiB pages are 512), faulted in by the load's threads; pageable,
 * unless the pinned_whole choice registers it with every device (portable) in one call. Times
 * its parts into t (the faulting in host_alloc). On failure nothing is held. */
static wm_status host_copy_make(wm_model *m, wm__dev *dv, staged_state *ss, wm__swap_times *t,
                                wm_error *err) {
    size_t len = host_len(m, ss);
    if (!len) return WM_OK;
    double t0 = wm__os_now();
    wm_status st = wm__region_pages(m, len, WM_LEDGER_HEAP, &ss->host, err);
    if (st) return st;
    if (!wm__staged_tuning_now.swap_no_huge) /* a hint: failure is harmless */
        wm__os_advise(ss->host.base, len, WM_OS_ADV_HUGEPAGE);
    if (!wm__staged_tuning_now.swap_no_prefault) prefault(m, ss->host.base, len);
    double t1 = wm__os_now();
    t->host_alloc += t1 - t0;
    if (!wm__staged_tuning_now.swap_pinned_whole) return WM_OK;
    int ce = host_pin(dv, ss);
    t->host_register += wm__os_now() - t1;
    if (!ce) return WM_OK;
    host_copy_free(dv, ss, NULL);
    char prefix[192];
    snprintf(prefix, sizeof prefix, "%s: putting to sleep: registering the host copy (%zu bytes)",
             m->file->path, len);
    return dv->ops->fail(dv, ce, prefix, err);
}

/* The streams of a sleep's or a wake's copies, n a device (WM__SWAP_STREAMS), an event each. */
typedef struct swap_queues {
    void *stream[WM__STAGED_MAX_DEVS][WM__STAGED_MAX_STREAMS];
    void *ev[WM__STAGED_MAX_DEVS][WM__STAGED_MAX_STREAMS];
    unsigned n;
    unsigned next[WM__STAGED_MAX_DEVS]; /* the stream a device's next piece goes to */
} swap_queues;

/* Waits until what each stream holds has run, then frees streams and events: nothing is freed
 * under a copy still queued. A release: cannot fail. */
static void queues_free(wm__dev *dv, unsigned n_devs, swap_queues *q) {
    for (unsigned d = 0; d < n_devs; d++)
        for (unsigned k = 0; k < q->n; k++) {
            if (q->stream[d][k]) {
                dv->ops->stream_wait(dv, d, q->stream[d][k]);
                dv->ops->stream_free(dv, d, q->stream[d][k]);
            }
            if (q->ev[d][k]) dv->ops->event_free(dv, d, q->ev[d][k]);
            q->stream[d][k] = q->ev[d][k] = NULL;
        }
}

static int queues_make(const wm_model *m, wm__dev *dv, swap_queues *q) {
    int ce = 0;
    for (unsigned d = 0; d < m->n_devs && !ce; d++)
        for (unsigned k = 0; k < q->n && !ce; k++) {
            ce = dv->ops->stream_make(dv, d, &q->stream[d][k]);
            if (!ce) ce = dv->ops->event_make(dv, d, &q->ev[d][k]);
        }
    return ce;
}

/* The stream a piece to device d goes to: the device's streams in turn. */
static void *queue_next(swap_queues *q, unsigned d) { return q->stream[d][q->next[d]++ % q->n]; }

/* A swap's failure said: the chunk whose copy failed (bad), or its copies as a whole. */
static wm_status swap_fail(wm_model *m, wm__dev *dv, bool back, int ce, uint32_t bad,
                           wm_error *err) {
    const staged_state *ss = m->bctx;
    char prefix[192];
    if (bad < ss->n_buf)
        snprintf(prefix, sizeof prefix, "%s: %s buffer %u (%zu bytes) on device %d", m->file->path,
                 back ? "putting to sleep" : "waking", bad, m->chunks[bad].size,
                 m->devs[m->chunks[bad].device]);
    else
        snprintf(prefix, sizeof prefix, "%s: %s the model: its copies", m->file->path,
                 back ? "putting to sleep" : "waking");
    return dv->ops->fail(dv, ce, prefix, err);
}

/* The pinned_whole choice: every chunk's copy between its device buffer and its place in the
 * registered host copy (back: device to host), in pieces that take turns on the device's
 * streams, all queued before the first wait; then each stream's event recorded and waited for.
 * *bad: the chunk whose copy failed (n_buf: a wait). */
static int queue_copies(wm_model *m, wm__dev *dv, staged_state *ss, swap_queues *q, bool back,
                        wm__swap_times *t, uint32_t *bad) {
    unsigned char *h = ss->host.base;
    size_t piece = wm__staged_tuning_now.swap_piece;
    for (uint32_t c = 0; c < ss->n_buf; c++) {
        size_t size = m->chunks[c].size;
        unsigned d = m->chunks[c].device;
        for (size_t off = 0, len; off < size; off += len) {
            len = size - off < piece ? size - off : piece;
            void *s = queue_next(q, d);
            int ce = back ? dv->ops->copy_back(dv, d, s, h + off, ss->buf[c] + off, len)
                          : dv->ops->copy(dv, d, s, ss->buf[c] + off, h + off, len);
            if (ce) {
                *bad = c;
                return ce;
            }
            t->pieces++;
            t->bytes += len;
        }
        h += size;
    }
    *bad = ss->n_buf;
    int ce = 0;
    for (unsigned d = 0; d < m->n_devs && !ce; d++)
        for (unsigned k = 0; k < q->n && !ce; k++)
            ce = dv->ops->event_record(dv, d, q->ev[d][k], q->stream[d][k]);
    for (unsigned d = 0; d < m->n_devs && !ce; d++)
        for (unsigned k = 0; k < q->n && !ce; k++)
            ce = dv->ops->event_wait(dv, d, q->ev[d][k]);
    return ce;
}

/* The pinned_whole choice's copies, queues made and given back; on failure every copy queued
 * has ended before it returns. Times the whole into t->copy. */
static wm_status copy_whole(wm_model *m, wm__dev *dv, staged_state *ss, bool back,
                            wm__swap_times *t, wm_error *err) {
    double t0 = wm__os_now();
    swap_queues q = {.n = wm__staged_tuning_now.swap_streams};
    uint32_t bad = ss->n_buf;
    int ce = queues_make(m, dv, &q);
    if (!ce) ce = queue_copies(m, dv, ss, &q, back, t, &bad);
    queues_free(dv, m->n_devs, &q);
    t->copy += wm__os_now() - t0;
    return ce ? swap_fail(m, dv, back, ce, bad, err) : WM_OK;
}

/* ---- the bounce ring ----
 *
 * The copies of a pageable host copy go through a ring of a few registered slots of a piece
 * each (two per stream and device, no more than the pieces). A wake: the loading thread hands
 * each free slot the next piece, the workers (the load's threads) copy it from the host copy
 * into the slot in grains of BOUNCE_GRAIN, the loading thread queues the filled slot's copy to
 * the device and records the slot's event, and waits for that event before it hands the slot
 * its next piece. A sleep, the reverse: the device's copy into a free slot queued and its event
 * recorded, waited for, then the slot handed to the workers, who copy it into the host copy and
 * give it back free. Only the loading thread calls the device; the workers copy memory and
 * nothing else; the loading thread copies grains too while it has nothing else to do (all of
 * them where no worker could start). Slot states and the hand-over are under one lock. */
#define BOUNCE_GRAIN ((size_t)1 << 20)
#define BOUNCE_MAX_SLOTS 64u

/* FREE: nothing in it; WORK: handed to the workers; READY: filled (a wake's), its copy to be
 * queued; BUSY: its copy queued (its event pending until slot_settle). */
enum { SLOT_FREE, SLOT_WORK, SLOT_READY, SLOT_BUSY };

typedef struct bounce_slot {
    unsigned char *buf;  /* its part of the ring */
    unsigned char *host; /* the piece's place in the host copy */
    unsigned char *dev;  /* and in its device buffer */
    size_t len;
    uint32_t chunk;
    unsigned d;           /* the piece's device */
    int pending;          /* the device whose event follows the slot's copy, or -1 */
    size_t claimed, left; /* under mu: bytes handed to a grain; bytes not yet copied */
    int state;            /* under mu */
    void *ev[WM__STAGED_MAX_DEVS];
} bounce_slot;

/* Where a device's next piece is: its chunk, the offset in it, the chunk's place in the host
 * copy. */
typedef struct bounce_cursor {
    uint32_t c;
    size_t off, at;
} bounce_cursor;

typedef struct bounce {
    wm_model *m;
    wm__dev *dv;
    bool back; /* a sleep's: device to host */
    size_t n_pieces, piece;
    size_t slot_len; /* the longest piece, in whole pages */
    bounce_cursor cur[WM__STAGED_MAX_DEVS];
    unsigned turn; /* the device whose piece is next, where it has one */
    wm__region ring;
    bool pinned, sync_made, stop;
    unsigned n_slots;
    bounce_slot slot[BOUNCE_MAX_SLOTS];
    unsigned work[BOUNCE_MAX_SLOTS]; /* under mu: slots with grains left, oldest first (a ring) */
    unsigned work_head, n_work;
    uint32_t grains, grains_by_workers; /* under mu */
    bool loader_waits;                  /* the loading thread copies no grain (workers exist) */
    swap_queues q;
    wm_os_mutex mu;
    wm_os_cond to_workers, to_loader;
    wm__crew crew;
    wm_os_thread th[WM__MAX_THREADS];
} bounce;

/* Under mu: the next grain of the oldest slot handed over, or false where there is none. */
static bool grain_claim(bounce *b, unsigned *s, size_t *off, size_t *len) {
    if (!b->n_work) return false;
    *s = b->work[b->work_head];
    bounce_slot *sl = &b->slot[*s];
    *off = sl->claimed;
    *len = sl->len - sl->claimed < BOUNCE_GRAIN ? sl->len - sl->claimed : BOUNCE_GRAIN;
    sl->claimed += *len;
    if (sl->claimed == sl->len) {
        b->work_head = (b->work_head + 1) % BOUNCE_MAX_SLOTS;
        b->n_work--;
    }
    return true;
}

/* Called with mu held: copies one grain, if any is left, with mu released meanwhile, or waits to
 * be told that something changed. worker: a worker's call (counted), else the loading thread's. */
static void grain_run_or_wait(bounce *b, wm_os_cond *wait_on, bool worker) {
    unsigned s;
    size_t off, len;
    if ((!worker && b->loader_waits) || !grain_claim(b, &s, &off, &len)) {
        wm__os_cond_wait(wait_on, &b->mu);
        return;
    }
    bounce_slot *sl = &b->slot[s];
    wm__os_mutex_unlock(&b->mu);
    if (b->back)
        memcpy(sl->host + off, sl->buf + off, len);
    else
        memcpy(sl->buf + off, sl->host + off, len);
    wm__os_mutex_lock(&b->mu);
    b->grains++;
    b->grains_by_workers += worker;
    sl->left -= len;
    if (!sl->left) {
        sl->state = b->back ? SLOT_FREE : SLOT_READY;
        wm__os_cond_broadcast(&b->to_loader);
    }
}

static void bounce_worker(void *arg) {
    bounce *b = arg;
    wm__os_mutex_lock(&b->mu);
    while (!b->stop)
        grain_run_or_wait(b, &b->to_workers, true);
    wm__os_mutex_unlock(&b->mu);
}

/* Gives slot sl to the workers. */
static void slot_hand(bounce *b, bounce_slot *sl) {
    wm__os_mutex_lock(&b->mu);
    sl->claimed = 0;
    sl->left = sl->len;
    sl->state = SLOT_WORK;
    b->work[(b->work_head + b->n_work++) % BOUNCE_MAX_SLOTS] = (unsigned)(sl - b->slot);
    wm__os_cond_broadcast(&b->to_workers);
    wm__os_mutex_unlock(&b->mu);
}

static void slot_set(bounce *b, bounce_slot *sl, int state) {
    wm__os_mutex_lock(&b->mu);
    sl->state = state;
    wm__os_mutex_unlock(&b->mu);
}

static bool slot_is(bounce *b, const bounce_slot *sl, int state) {
    wm__os_mutex_lock(&b->mu);
    bool is = sl->state == state;
    wm__os_mutex_unlock(&b->mu);
    return is;
}

/* Until slot sl is in `state`, copying grains meanwhile. */
static void slot_await(bounce *b, const bounce_slot *sl, int state) {
    wm__os_mutex_lock(&b->mu);
    while (sl->state != state)
        grain_run_or_wait(b, &b->to_loader, false);
    wm__os_mutex_unlock(&b->mu);
}

/* Waits for the event after slot sl's copy, where one is pending. */
static int slot_settle(bounce *b, bounce_slot *sl) {
    if (sl->pending < 0) return 0;
    unsigned d = (unsigned)sl->pending;
    int ce = b->dv->ops->event_wait(b->dv, d, sl->ev[d]);
    if (!ce) sl->pending = -1;
    return ce;
}

/* Moves device d's cursor to its next chunk with bytes left; false where it has none. */
static bool cursor_seek(const wm_model *m, bounce_cursor *k, unsigned d) {
    const staged_state *ss = m->bctx;
    while (k->c < ss->n_buf && (m->chunks[k->c].device != d || k->off == m->chunks[k->c].size)) {
        k->at += m->chunks[k->c].size;
        k->c++;
        k->off = 0;
    }
    return k->c < ss->n_buf;
}

/* The next piece given to slot sl: the devices take turns (so that with several, every link
 * is busy), each device's pieces in chunk order. */
static void slot_take_piece(bounce *b, bounce_slot *sl) {
    const wm_model *m = b->m;
    const staged_state *ss = m->bctx;
    unsigned d = b->turn;
    for (unsigned i = 0; i < m->n_devs && !cursor_seek(m, &b->cur[d], d); i++)
        d = (d + 1) % m->n_devs;
    bounce_cursor *k = &b->cur[d];
    size_t size = m->chunks[k->c].size;
    sl->len = size - k->off < b->piece ? size - k->off : b->piece;
    sl->host = (unsigned char *)ss->host.base + k->at + k->off;
    sl->dev = ss->buf[k->c] + k->off;
    sl->chunk = k->c;
    sl->d = d;
    k->off += sl->len;
    b->turn = (d + 1) % m->n_devs;
}

/* Queues slot sl's copy (a wake's: to its device; a sleep's: from it) and records its event. */
static int slot_issue(bounce *b, bounce_slot *sl, wm__swap_times *t, uint32_t *bad) {
    wm__dev *dv = b->dv;
    unsigned d = sl->d;
    void *s = queue_next(&b->q, d);
    int ce = sl->ev[d] ? 0 : dv->ops->event_make(dv, d, &sl->ev[d]);
    if (!ce)
        ce = b->back ? dv->ops->copy_back(dv, d, s, sl->buf, sl->dev, sl->len)
                     : dv->ops->copy(dv, d, s, sl->dev, sl->buf, sl->len);
    if (!ce) ce = dv->ops->event_record(dv, d, sl->ev[d], s);
    if (ce) {
        *bad = sl->chunk;
        return ce;
    }
    sl->pending = (int)d;
    slot_set(b, sl, SLOT_BUSY);
    t->pieces++;
    t->bytes += sl->len;
    return 0;
}

/* A wake: piece i in slot i % n_slots; the next piece's copy queued as soon as its slot is
 * filled, else the oldest slot whose copy is queued handed its next piece once the copy ended,
 * else grains copied until the next piece is filled. */
static int bounce_wake(bounce *b, wm__swap_times *t, uint32_t *bad) {
    size_t handed = 0, issued = 0;
    int ce = 0;
    while (issued < b->n_pieces && !ce) {
        bounce_slot *next = &b->slot[issued % b->n_slots];
        if (issued < handed && slot_is(b, next, SLOT_READY)) {
            ce = slot_issue(b, next, t, bad);
            issued++;
        } else if (handed < b->n_pieces && handed < issued + b->n_slots) {
            bounce_slot *sl = &b->slot[handed % b->n_slots];
            ce = slot_settle(b, sl);
            if (!ce) {
                slot_take_piece(b, sl);
                slot_hand(b, sl);
                handed++;
            }
        } else {
            slot_await(b, next, SLOT_READY);
        }
    }
    for (unsigned k = 0; k < b->n_slots && !ce; k++) /* the last copies ended */
        ce = slot_settle(b, &b->slot[k]);
    return ce;
}

/* A sleep: piece i in slot i % n_slots; the next piece's copy queued as soon as its slot is
 * free, else the oldest slot whose copy is queued handed to the workers once it ended, else
 * grains copied until the next slot is free; then until every slot is. */
static int bounce_sleep(bounce *b, wm__swap_times *t, uint32_t *bad) {
    size_t queued = 0, handed = 0;
    int ce = 0;
    while (handed < b->n_pieces && !ce) {
        bounce_slot *next = &b->slot[queued % b->n_slots];
        if (queued < b->n_pieces && slot_is(b, next, SLOT_FREE)) {
            slot_take_piece(b, next);
            ce = slot_issue(b, next, t, bad);
            queued++;
        } else if (handed < queued) {
            bounce_slot *sl = &b->slot[handed % b->n_slots];
            ce = slot_settle(b, sl);
            if (!ce) {
                slot_hand(b, sl);
                handed++;
            }
        } else {
            slot_await(b, next, SLOT_FREE);
        }
    }
    for (unsigned k = 0; k < b->n_slots && !ce; k++)
        slot_await(b, &b->slot[k], SLOT_FREE);
    return ce;
}

/* The ring's slots, each the longest piece in whole pages (a piece, or the longest chunk where
 * every chunk is shorter): two per stream and device, at most the pieces and BOUNCE_MAX_SLOTS. */
static unsigned bounce_slots(const wm_model *m, size_t n_pieces) {
    size_t n = 2 * (size_t)wm__staged_tuning_now.swap_streams * m->n_devs;
    if (n > n_pieces) n = n_pieces;
    return n > BOUNCE_MAX_SLOTS ? BOUNCE_MAX_SLOTS : (unsigned)n;
}

/* Gives everything of a bounce back: the workers stopped and joined, every queued copy ended
 * (queues_free waits), the slots' events, the ring unregistered (timed into t->host_unregister)
 * and its pages freed (t->host_free), the lock. Accepts a half-made one. Cannot fail. */
static void bounce_free(bounce *b, wm__swap_times *t) {
    wm__dev *dv = b->dv;
    if (b->sync_made) {
        wm__os_mutex_lock(&b->mu);
        b->stop = true;
        wm__os_cond_broadcast(&b->to_workers);
        wm__os_mutex_unlock(&b->mu);
    }
    wm__crew_join(&b->crew);
    queues_free(dv, b->m->n_devs, &b->q);
    for (unsigned k = 0; k < b->n_slots; k++)
        for (unsigned d = 0; d < b->m->n_devs; d++)
            if (b->slot[k].ev[d]) dv->ops->event_free(dv, d, b->slot[k].ev[d]);
    double t0 = wm__os_now();
    if (b->pinned) {
        dv->ops->host_unregister(dv, b->ring.base);
        wm__ledger_release(WM_LEDGER_PINNED, b->ring.len);
    }
    double t1 = wm__os_now();
    wm__region_free(&b->ring);
    t->host_unregister += t1 - t0;
    t->host_free += wm__os_now() - t1;
    if (b->sync_made) {
        wm__os_cond_destroy(&b->to_loader);
        wm__os_cond_destroy(&b->to_workers);
        wm__os_mutex_destroy(&b->mu);
    }
    wm__free(b);
}

/* The lock and its conditions, all or none (0 or the error number). */
static int bounce_sync_init(bounce *b) {
    int e = wm__os_mutex_init(&b->mu);
    if (e) return e;
    e = wm__os_cond_init(&b->to_workers);
    if (!e) {
        e = wm__os_cond_init(&b->to_loader);
        if (e) wm__os_cond_destroy(&b->to_workers);
    }
    if (e) wm__os_mutex_destroy(&b->mu);
    b->sync_made = !e;
    return e;
}

/* The ring's pages (scratch; huge pages advised, faulted in by the load's threads) and their
 * registration (pinned); the times into t->host_alloc and t->host_register. */
static wm_status bounce_ring(bounce *b, wm__swap_times *t, wm_error *err) {
    wm_model *m = b->m;
    size_t slot_len = b->slot_len;
    double t0 = wm__os_now();
    wm_status st = wm__region_pages(m, slot_len * b->n_slots, WM_LEDGER_SCRATCH, &b->ring, err);
    if (st) return st;
    wm__os_advise(b->ring.base, b->ring.len, WM_OS_ADV_HUGEPAGE); /* a hint */
    prefault(m, b->ring.base, b->ring.len); /* else the registration faults it on one thread */
    for (unsigned k = 0; k < b->n_slots; k++)
        b->slot[k] =
            (bounce_slot){.buf = (unsigned char *)b->ring.base + k * slot_len, .pending = -1};
    double t1 = wm__os_now();
    t->host_alloc += t1 - t0;
    int ce = b->dv->ops->host_register(b->dv, b->ring.base, b->ring.len, WM__HOST_PORTABLE);
    t->host_register += wm__os_now() - t1;
    if (ce) {
        char prefix[192];
        snprintf(prefix, sizeof prefix, "%s: %s: registering the bounce ring (%zu bytes)",
                 m->file->path, b->back ? "putting to sleep" : "waking", b->ring.len);
        return b->dv->ops->fail(b->dv, ce, prefix, err);
    }
    wm__ledger_acquire(WM_LEDGER_PINNED, b->ring.len);
    b->pinned = true;
    return WM_OK;
}

/* Sets a bounce up: the ring, the queues, the workers (fewer where some cannot start: the
 * loading thread copies what they do not). On failure the caller runs bounce_free. */
static wm_status bounce_open(bounce *b, wm__swap_times *t, wm_error *err) {
    wm_model *m = b->m;
    int e = bounce_sync_init(b);
    if (e)
        return wm__err(err, WM_ENOMEM, e, "%s: %s: %s", m->file->path,
                       b->back ? "putting to sleep" : "waking", wm__errno_text(e));
    wm_status st = bounce_ring(b, t, err);
    if (st) return st;
    int ce = queues_make(m, b->dv, &b->q);
    if (ce) return swap_fail(m, b->dv, b->back, ce, m->n_chunks, err);
    unsigned n = wm__load_threads(m);
    b->crew = (wm__crew){.fn = bounce_worker, .arg = b, .th = b->th};
    if (n > 1) (void)wm__crew_start(m->file->path, &b->crew, n - 1, NULL); /* fewer: still works */
    b->loader_waits = wm__staged_swap_loader_waits && b->crew.started > 0;
    return WM_OK;
}

/* The pieces of a swap's copies, and (*slot_len) the longest in whole pages. */
static size_t bounce_pieces(const wm_model *m, const staged_state *ss, size_t *slot_len) {
    size_t piece = wm__staged_tuning_now.swap_piece, n_pieces = 0, longest = 0;
    for (uint32_t c = 0; c < ss->n_buf; c++) {
        size_t size = m->chunks[c].size;
        n_pieces += (size + piece - 1) / piece;
        if ((size < piece ? size : piece) > longest) longest = size < piece ? size : piece;
    }
    *slot_len = (size_t)wm__align_up(longest, wm__os_page_size());
    return n_pieces;
}

uint64_t wm__staged_swap_extra(const wm_model *m) {
    const staged_state *ss = m->bctx;
    if (!ss) return 0;
    unsigned threads = wm__load_threads(m);
    uint64_t stacks = (uint64_t)(threads ? threads - 1 : 0) * WM_OS_THREAD_STACK;
    bool whole = ss->asleep ? ss->host_pinned : wm__staged_tuning_now.swap_pinned_whole;
    size_t slot_len, n_pieces = bounce_pieces(m, ss, &slot_len);
    if (whole || !n_pieces) return stacks; /* the prefaulting threads' */
    return stacks + (uint64_t)bounce_slots(m, n_pieces) * slot_len + wm__cost_block(sizeof(bounce));
}

/* A sleep's (back) or a wake's copies through a bounce ring, all of it given back before it
 * returns; on failure every copy queued has ended. Times the copies into t->copy and the ring's
 * parts into host_alloc, host_register, host_unregister and host_free. */
static wm_status copy_bounce(wm_model *m, wm__dev *dv, staged_state *ss, bool back,
                             wm__swap_times *t, wm_error *err) {
    size_t piece = wm__staged_tuning_now.swap_piece, slot_len;
    size_t n_pieces = bounce_pieces(m, ss, &slot_len);
    if (!n_pieces) return WM_OK;
    bounce *b = wm__calloc(1, sizeof *b);
    if (!b) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory", m->file->path);
    *b = (bounce){.m = m,
                  .dv = dv,
                  .back = back,
                  .n_pieces = n_pieces,
                  .piece = piece,
                  .slot_len = slot_len,
                  .n_slots = bounce_slots(m, n_pieces),
                  .q = {.n = wm__staged_tuning_now.swap_streams}};
    wm_status st = bounce_open(b, t, err);
    if (!st) {
        double t0 = wm__os_now();
        uint32_t bad = ss->n_buf;
        int ce = back ? bounce_sleep(b, t, &bad) : bounce_wake(b, t, &bad);
        if (ce) st = swap_fail(m, dv, back, ce, bad, err);
        t->copy += wm__os_now() - t0;
    }
    if (b->sync_made) { /* the workers may still be waiting for more */
        wm__os_mutex_lock(&b->mu);
        t->grains += b->grains;
        t->grains_by_workers += b->grains_by_workers;
        wm__os_mutex_unlock(&b->mu);
    }
    bounce_free(b, t);
    return st;
}

/* A host copy registered whole (made so by the pinned_whole choice at its sleep, whatever the
 * choice is at the wake) is copied directly; any other through a bounce ring. */
static wm_status copy_all(wm_model *m, wm__dev *dv, staged_state *ss, bool back, wm__swap_times *t,
                          wm_error *err) {
    return ss->host_pinned ? copy_whole(m, dv, ss, back, t, err)
                           : copy_bounce(m, dv, ss, back, t, err);
}

wm_status wm__staged_sleep(wm_model *m, wm__dev *dv, wm_error *err) {
    staged_state *ss = m->bctx;
    if (!ss || ss->asleep)
        return wm__err(err, WM_EINVAL, 0, "%s: no model to sleep", m->file->path);
    for (uint32_t c = 0; c < ss->n_buf; c++)
        if (m->chunks[c].ext)
            return wm__err(err, WM_EINVAL, 0,
                           "%s: the model's device memory is the caller's (wm_cuda_options.dst): "
                           "it cannot sleep",
                           m->file->path);
    wm__swap_times t = {0};
    double t0 = wm__os_now();
    wm_status st = host_copy_make(m, dv, ss, &t, err);
    if (!st) st = copy_all(m, dv, ss, true, &t, err);
    if (st) { /* as it was: awake, the host copy given back */
        host_copy_free(dv, ss, NULL);
        dv->ops->settle(dv);
        return st;
    }
    double t1 = wm__os_now();
    device_buffers_free(m, dv, ss);
    t.device_free = wm__os_now() - t1;
    ss->asleep = true;
    dv->ops->settle(dv);
    t.total = wm__os_now() - t0;
    m->slept = t;
    return WM_OK;
}

/* Every device buffer made first, then the copies back, then the host copy given back; on
 * failure the buffers made are freed (the model stays asleep, its host copy whole). */
wm_status wm__staged_wake(wm_model *m, wm__dev *dv, wm_error *err) {
    staged_state *ss = m->bctx;
    if (!ss || !ss->asleep) return wm__err(err, WM_EINVAL, 0, "%s: no model asleep", m->file->path);
    wm__swap_times t = {0};
    double t0 = wm__os_now();
    wm_status st = WM_OK;
    for (uint32_t c = 0; c < ss->n_buf && !st; c++)
        if (m->chunks[c].size) st = make_buffer(m, dv, ss, c, "waking the model", err);
    t.device_alloc = wm__os_now() - t0;
    if (!st) st = copy_all(m, dv, ss, false, &t, err);
    if (st) { /* as it was: asleep, its host copy as it was */
        device_buffers_free(m, dv, ss);
        dv->ops->settle(dv);
        return st;
    }
    host_copy_free(dv, ss, &t);
    ss->asleep = false;
    dv->ops->settle(dv);
    t.total = wm__os_now() - t0;
    m->woke = t;
    return WM_OK;
}

unsigned char *const *wm__staged_buffers(const wm_model *m) {
    const staged_state *ss = m->bctx;
    return ss ? ss->buf : NULL;
}

uint64_t wm__staged_device_ptr(const wm_model *m, size_t t) {
    const staged_state *ss = m->bctx;
    const wm__place *p = &m->place[t];
    if (!ss || p->chunk >= ss->n_buf || !ss->buf[p->chunk]) return 0;
    return (uint64_t)(uintptr_t)(ss->buf[p->chunk] + p->dst_off);
}

/* ---- cost ---- */

/* Windows of `wsize` that the plan's segments fall in, and pieces (plan_windows counts the same
 * way): an upper bound of both, each segment's windows counted on their own. */
static void count_windows(const wm_model *m, size_t wsize, uint64_t *pieces, uint64_t *windows) {
    const wm_file *f = m->file;
    *pieces = *windows = 0;
    for (size_t k = 0; k < f->n_tensors; k++) {
        uint32_t i = m->order[k];
        const wm__place *p = &m->place[i];
        for (uint64_t row = 0; row < p->rows && p->seg_bytes; row++) {
            uint64_t seg = f->tensors[i].offset + p->src_off + row * p->src_stride;
            uint64_t n = (seg + p->seg_bytes - 1) / wsize - seg / wsize + 1;
            *pieces += n;
            *windows += n;
        }
    }
}

/* What wm__staged_load acquires for the plan in m (the same sizing, size_pipe): one device
 * buffer per chunk; the ring of slots (scratch, pinned while registered) or, on the registered
 * path, the shared mappings of each shard and at most the pinned budget registered at once; the
 * readers' stacks; the copy plan's tables. */
wm_status wm__staged_cost(const wm_model *m, const wm__staged_opts *o, wm_cost *c, wm_error *err) {
    unsigned workers = 1;
    size_t wsize = 0;
    wm_status st = size_pipe(m, o, &workers, &wsize, err);
    if (st) return st;
    uint64_t dev_total = 0;
    for (uint32_t k = 0; k < m->n_chunks; k++) {
        uint64_t size = m->chunks[k].ext ? 0 : m->chunks[k].size; /* the caller's: not ours */
        int d = m->devs[m->chunks[k].device];
        dev_total += size;
        if (d >= 0 && d < WM_LEDGER_DEVICES) {
            c->device_peak[d] += size;
            c->device_loaded[d] += size;
        }
    }
    wm__cost_add(c, WM_LEDGER_DEVICE, dev_total, dev_total);
    uint64_t state = wm__cost_block(sizeof(staged_state)) +
                     (m->n_chunks ? wm__cost_block(m->n_chunks * sizeof(unsigned char *)) : 0);
    wm__cost_add(c, WM_LEDGER_HEAP, state, state);
    uint64_t pieces, windows;
    count_windows(m, wsize ? wsize : 1, &pieces, &windows);
    if (windows == 0) return WM_OK;
    if (workers > windows) workers = (unsigned)windows;
    unsigned slots = workers * wm__staged_tuning_now.slots;
    unsigned readers = o->registered || workers == 1 ? 0 : workers;
    c->threads = o->registered ? 1 : workers;
    uint64_t cap = m->file->n_tensors + 16; /* the pieces' table grows by doubling from here */
    while (cap < pieces)
        cap *= 2;
    uint64_t tables = wm__cost_block(cap * sizeof(wm__piece)) +
                      wm__cost_block(cap / 2 * sizeof(wm__piece)) +
                      wm__cost_block(windows * sizeof(wm__window)) +
                      wm__cost_block(slots * sizeof(wm__slot) + readers * sizeof(wm_os_thread) +
                                     3 * (uint64_t)slots * sizeof(unsigned));
    wm__cost_add(c, WM_LEDGER_HEAP, tables, 0);
    wm__cost_add(c, WM_LEDGER_SCRATCH, (uint64_t)readers * WM_OS_THREAD_STACK, 0);
    if (!o->registered) {
        uint64_t ring = (uint64_t)slots * wsize;
        wm__cost_add(c, WM_LEDGER_SCRATCH, ring, 0);
        wm__cost_add(c, WM_LEDGER_PINNED, ring, 0);
        return WM_OK;
    }
    uint64_t page = wm__os_page_size(), mapped = 0, pinned = 0;
    for (uint32_t s = 0; s < m->file->n_shards; s++) {
        uint64_t lo = UINT64_MAX, hi = 0;
        for (size_t i = 0; i < m->file->n_tensors; i++) {
            const wm__tensor *t = &m->file->tensors[i];
            if (t->shard != s || t->nbytes == 0) continue;
            if (t->offset < lo) lo = t->offset;
            if (t->offset + t->nbytes > hi) hi = t->offset + t->nbytes;
        }
        if (hi) mapped += hi - lo / page * page;
        if (hi) pinned += wm__align_up(hi, page) - lo / page * page; /* windows: whole pages */
    }
    wm__cost_add(c, WM_LEDGER_MAP_SHARED, mapped, 0);
    /* at most the budget registered at once, each window rounded out to whole pages */
    uint64_t budget = (o->pinned_budget ? o->pinned_budget : DEFAULT_BUDGET) + 2 * page * slots;
    wm__cost_add(c, WM_LEDGER_PINNED, budget < pinned ? budget : pinned, 0);
    return WM_OK;
}
