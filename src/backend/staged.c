/*
 * staged.c: running the staged pipeline (staged.h) once staged_load.c has set a pipe up.
 *
 * Reader threads (none with one thread, or on the registered path: then the loading thread
 * fills the slots) take a free slot and the next file window, pread the window into the slot
 * and hand it to the loading thread through a queue (a mutex and two condition variables). The
 * loading thread queues one copy per tensor piece in the window (one 2-D copy for the rows of
 * a strided slice), records the slot's event on every device it copied to, and gives the slot
 * back to the readers once its copies are done: right after queueing it asks (event_query) for
 * the oldest slots, and it waits (event_wait) only when it has nothing else to do. On the
 * registered path a slot is a window of the file's shared mapping, registered by the loading
 * thread and unregistered once its events have passed. Only the loading thread calls the
 * device operations.
 *
 * Sections: failures; filling a slot; queueing and retiring copies; readers; the loading
 * thread; opening and closing the device side; running.
 */
#include "staged_pipe.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

/* ---- failures ---- */

/* Fills err for a failed device operation: the prefix, then what the device says. */
static wm_status dev_fail(const wm__pipe *p, int code, wm_error *err, const char *fmt, ...)
    WM_PRINTF(4, 5);
static wm_status dev_fail(const wm__pipe *p, int code, wm_error *err, const char *fmt, ...) {
    char prefix[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    return p->dv->ops->fail(p->dv, code, prefix, err);
}

/* Records the first failure and stops everyone. The caller holds mu. */
static void fail_locked(wm__pipe *p, const wm_error *e) {
    if (!p->failed) p->first = *e;
    p->failed = true;
    p->stop = true;
    wm__os_cond_broadcast(&p->to_readers);
    wm__os_cond_broadcast(&p->to_loader);
}

static bool pipe_failed(wm__pipe *p) {
    wm__os_mutex_lock(&p->mu);
    bool f = p->failed;
    wm__os_mutex_unlock(&p->mu);
    return f;
}

static void fail_pipe(wm__pipe *p, const wm_error *e) {
    wm__os_mutex_lock(&p->mu);
    fail_locked(p, e);
    wm__os_mutex_unlock(&p->mu);
}

/* ---- filling a slot ---- */

/* Staged: preads a window into its slot (readers run this) through the load's reader (reader.h),
 * which reads each range buffered or with O_DIRECT by what the page cache holds (or by the
 * policy the caller fixed). The slot mirrors the window's file range from the aligned block
 * that holds its start (windows are aligned file ranges of a multiple of WM_OS_DIRECT_ALIGN, so
 * every aligned cover fits the page-aligned slot), so a direct read lands in place. A window
 * with holes (tensor-parallel slices) is read run by run (each run of file-contiguous pieces at
 * its place in the slot), so that only the slices' bytes are read. `fds`: the reading thread's
 * descriptors (wm__fds, NULL: the shards'). */
static wm_status read_window(wm__pipe *p, const wm__fds *fds, wm__slot *s, const wm__window *win,
                             wm_error *err) {
    uint64_t base = win->start / WM_OS_DIRECT_ALIGN * WM_OS_DIRECT_ALIGN;
    wm__read_req q = {.shard = win->shard,
                      .fd = wm__fds_get(fds, p->m->file, win->shard),
                      .mirror = true,
                      .rows = win->gaps};
    size_t end = win->first + win->count;
    for (size_t i = win->first; i < end;) {
        uint64_t a = p->pieces[i].off, b = a + p->pieces[i].len;
        q.tensor = p->pieces[i].tensor;
        if (win->gaps)
            for (i++; i < end && p->pieces[i].off == b; i++)
                b += p->pieces[i].len;
        else
            b = win->end, i = end;
        q.off = a;
        q.len = (size_t)(b - a);
        q.dst = s->host + (a - base);
        wm_status st = wm__read(&p->m->rd, &q, NULL, err);
        if (st) return st;
    }
    s->src = s->host + (win->start - base);
    return WM_OK;
}

/* Registered: registers the pages of the mapping under a window (loading thread). */
static wm_status register_window(wm__pipe *p, wm__slot *s, const wm__window *win, wm_error *err) {
    const wm__shard *sh = &p->m->file->shards[win->shard];
    size_t page = wm__os_page_size();
    uint64_t a = win->start / page * page, b = wm__align_up(win->end, page);
    unsigned char *base = (unsigned char *)p->maps[win->shard].base + (a - p->map_off[win->shard]);
    int ce = p->dv->ops->host_register(p->dv, base, (size_t)(b - a), WM__HOST_READ_ONLY);
    if (ce)
        return dev_fail(p, ce, err, "%s: registering %llu bytes at offset %llu", sh->path,
                        (unsigned long long)(b - a), (unsigned long long)a);
    wm__ledger_acquire(WM_LEDGER_PINNED, b - a);
    s->reg = base;
    s->reg_len = (size_t)(b - a);
    s->src = base + (win->start - a);
    return WM_OK;
}

/* ---- queueing and retiring copies ---- */

/* How many pieces from pieces[i] on are whole rows of one slice at its stride (the rows of a
 * WM_SPLIT_LAST slice in one window): one 2D copy moves them all. 1 for any other piece. */
static size_t strided_rows(const wm__pipe *p, size_t i, size_t end) {
    const wm__piece *pc = &p->pieces[i];
    const wm__place *pl = &p->m->place[pc->tensor];
    if (pl->rows <= 1 || pc->len != pl->seg_bytes) return 1;
    size_t n = 1;
    while (i + n < end) {
        const wm__piece *q = &p->pieces[i + n];
        if (q->tensor != pc->tensor || q->len != pc->len ||
            q->off != pc->off + n * pl->src_stride || q->dst != pc->dst + n * pc->len)
            break;
        n++;
    }
    return n;
}

/* Queues a filled slot's copies, each to its tensor's device (the rows of a strided slice in
 * one 2D copy), and records the slot's event on every device it copied to (loading thread). */
static wm_status issue(wm__pipe *p, unsigned k, wm_error *err) {
    const wm_model *m = p->m;
    wm__dev *dv = p->dv;
    wm__slot *s = &p->slots[k];
    const wm__window *win = &p->win[s->win];
    const char *path = m->file->shards[win->shard].path;
    size_t end = win->first + win->count;
    for (size_t i = win->first; i < end;) {
        const wm__piece *pc = &p->pieces[i];
        const wm__place *pl = &m->place[pc->tensor];
        unsigned d = m->chunks[pl->chunk].device;
        size_t rows = strided_rows(p, i, end);
        unsigned char *dst = p->buf[pl->chunk] + pc->dst;
        const unsigned char *src = s->src + (pc->off - win->start);
        void *stream = p->streams[d][k % p->streams_each];
        int ce = rows == 1 ? dv->ops->copy(dv, d, stream, dst, src, pc->len)
                           : dv->ops->copy_2d(dv, d, stream, dst, pc->len, src,
                                              (size_t)pl->src_stride, pc->len, rows);
        if (ce)
            return dev_fail(p, ce, err, "%s: tensor '%s': copying %zu bytes to device %d", path,
                            m->file->names + m->file->tensors[pc->tensor].name_off, pc->len * rows,
                            m->devs[d]);
        s->pending |= 1u << d;
        i += rows;
    }
    for (unsigned d = 0; d < m->n_devs; d++) {
        if (!(s->pending & (1u << d))) continue;
        int ce = dv->ops->event_record(dv, d, s->ev[d], p->streams[d][k % p->streams_each]);
        if (ce) return dev_fail(p, ce, err, "%s: copies to device %d", path, m->devs[d]);
    }
    p->busy_q[(p->busy_head + p->n_busy++) % p->n_slots] = k;
    p->issued++;
    p->done += win->bytes;
    return WM_OK;
}

/* Whether the slot's copies to every device have passed: waits for them (`wait`), or only asks
 * and sets *done. A device whose copies passed leaves `pending`. */
static wm_status slot_passed(wm__pipe *p, wm__slot *s, bool wait, bool *done, wm_error *err) {
    wm__dev *dv = p->dv;
    for (unsigned d = 0; d < p->m->n_devs; d++) {
        if (!(s->pending & (1u << d))) continue;
        bool passed = true;
        int ce = wait ? dv->ops->event_wait(dv, d, s->ev[d])
                      : dv->ops->event_query(dv, d, s->ev[d], &passed);
        if (ce)
            return dev_fail(p, ce, err, "%s: waiting for copies to device %d", p->m->file->path,
                            p->m->devs[d]);
        if (!passed) {
            *done = false;
            return WM_OK;
        }
        s->pending &= ~(1u << d);
    }
    *done = true;
    return WM_OK;
}

/* Gives the oldest busy slot back once its copies are done: unregisters its window (registered
 * path) and hands it to the readers (loading thread). With `wait` it waits for the copies;
 * without, it only asks and sets *done to whether the slot was retired. */
static wm_status retire_oldest(wm__pipe *p, bool wait, bool *done, wm_error *err) {
    unsigned k = p->busy_q[p->busy_head];
    wm__slot *s = &p->slots[k];
    wm_status st = slot_passed(p, s, wait, done, err);
    if (st || !*done) return st;
    if (s->reg) {
        p->dv->ops->host_unregister(p->dv, s->reg);
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
static wm_status reap(wm__pipe *p, wm_error *err) {
    if (wm__staged_tuning_now.no_reap) return WM_OK;
    bool done = true;
    while (done && p->n_busy) {
        wm_status st = retire_oldest(p, false, &done, err);
        if (st) return st;
    }
    return WM_OK;
}

/* ---- readers ---- */

/* A reader: takes a free slot and the next window, preads, hands the slot to the loading
 * thread; until the windows run out or the pipe stops. */
static void read_loop(void *arg) {
    wm__pipe *p = arg;
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

/* ---- the loading thread ---- */

enum act { END, WAITED, ISSUE, FILL, RETIRE };

/* What the loading thread does next, taken under mu: *k the slot and *i the window it acts on. */
static enum act next_act(wm__pipe *p, bool self_fill, unsigned *k, size_t *i) {
    enum act act;
    wm__os_mutex_lock(&p->mu);
    if (p->failed || (!p->n_filled && p->issued == p->n_win)) {
        act = END;
    } else if (p->n_filled) {
        *k = p->filled_q[p->filled_head];
        p->filled_head = (p->filled_head + 1) % p->n_slots;
        p->n_filled--;
        act = ISSUE;
    } else if (self_fill && p->n_free && p->next < p->n_win) {
        *k = p->free_q[--p->n_free];
        *i = p->next++;
        act = FILL;
    } else if (p->n_busy) {
        act = RETIRE;
    } else {
        wm__os_cond_wait(&p->to_loader, &p->mu);
        act = WAITED;
    }
    wm__os_mutex_unlock(&p->mu);
    return act;
}

/* The loading thread's part: queue copies for filled slots, retire busy slots when there is
 * nothing else to do, and fill slots itself when no reader does (one thread, or the registered
 * path); until every window's copies are queued or the pipe fails. */
static void drive(wm__pipe *p, bool self_fill) {
    for (;;) {
        unsigned k = 0;
        size_t i = 0;
        enum act act = next_act(p, self_fill, &k, &i);
        wm_error e;
        wm_status st = WM_OK;
        if (act == END) break;
        if (act == FILL) {
            wm__slot *s = &p->slots[k];
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

/* ---- opening and closing the device side ---- */

/* The loading thread's streams and one event per slot, on every device. */
static wm_status pipe_open(wm__pipe *p, wm_error *err) {
    const wm_model *m = p->m;
    wm__dev *dv = p->dv;
    p->streams_each = p->n_slots < WM__STAGED_MAX_STREAMS ? p->n_slots : WM__STAGED_MAX_STREAMS;
    for (unsigned d = 0; d < m->n_devs; d++) {
        while (p->n_streams[d] < p->streams_each) {
            int ce = dv->ops->stream_make(dv, d, &p->streams[d][p->n_streams[d]]);
            if (ce) return dev_fail(p, ce, err, "%s: device %d", m->file->path, m->devs[d]);
            p->n_streams[d]++;
        }
        for (unsigned k = 0; k < p->n_slots; k++) {
            wm__slot *s = &p->slots[k];
            int ce = dv->ops->event_make(dv, d, &s->ev[d]);
            if (ce) return dev_fail(p, ce, err, "%s: device %d", m->file->path, m->devs[d]);
            s->ev_made |= 1u << d;
        }
    }
    return WM_OK;
}

/* Staged: registers the whole ring, once (portable where several devices copy from it). The
 * readers may be writing into it already: pinning keeps the pages they fault in, and no copy is
 * queued from the ring before this returns. */
static wm_status pin_ring(wm__pipe *p, wm_error *err) {
    size_t len = (size_t)p->n_slots * p->wsize;
    unsigned flags = p->m->n_devs > 1 ? WM__HOST_PORTABLE : 0;
    int ce = p->dv->ops->host_register(p->dv, p->ring, len, flags);
    if (ce)
        return dev_fail(p, ce, err, "%s: pinning %zu bytes of staging for device %d",
                        p->m->file->path, len, p->m->devs[0]);
    wm__ledger_acquire(WM_LEDGER_PINNED, len);
    p->ring_registered = true;
    return WM_OK;
}

/* Waits for every queued copy, then gives back registrations, events and streams. Cannot
 * fail: after a device error the copies are dead and nothing waits on them. */
static void pipe_close(wm__pipe *p) {
    const wm_model *m = p->m;
    wm__dev *dv = p->dv;
    for (unsigned d = 0; d < m->n_devs; d++)
        for (unsigned t = 0; t < p->n_streams[d]; t++)
            dv->ops->stream_wait(dv, d, p->streams[d][t]);
    for (unsigned k = 0; k < p->n_slots; k++) {
        wm__slot *s = &p->slots[k];
        if (s->reg) {
            dv->ops->host_unregister(dv, s->reg);
            wm__ledger_release(WM_LEDGER_PINNED, s->reg_len);
            s->reg = NULL;
        }
        for (unsigned d = 0; d < m->n_devs; d++)
            if (s->ev_made & (1u << d)) dv->ops->event_free(dv, d, s->ev[d]);
        s->ev_made = 0;
        s->pending = 0;
    }
    if (p->ring_registered) {
        dv->ops->host_unregister(dv, p->ring);
        wm__ledger_release(WM_LEDGER_PINNED, (size_t)p->n_slots * p->wsize);
        p->ring_registered = false;
    }
    for (unsigned d = 0; d < m->n_devs; d++) {
        for (unsigned t = 0; t < p->n_streams[d]; t++)
            dv->ops->stream_free(dv, d, p->streams[d][t]);
        p->n_streams[d] = 0;
    }
    dv->ops->settle(dv);
}

/* ---- running ---- */

wm_status wm__pipe_sync_init(wm__pipe *p, wm_error *err) {
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

void wm__pipe_sync_free(wm__pipe *p) {
    if (!p->sync_made) return;
    wm__os_cond_destroy(&p->to_loader);
    wm__os_cond_destroy(&p->to_readers);
    wm__os_mutex_destroy(&p->mu);
    p->sync_made = false;
}

/* The readers start before the ring is registered: their first preads fault the ring in, in
 * parallel, while this thread pins it (registering a ring nobody touched yet means faulting in
 * all of it on one thread first). */
wm_status wm__pipe_run(wm__pipe *p, wm_os_thread *th, unsigned n_readers, wm_error *err) {
    wm_error e;
    if (!p->registered)
        for (unsigned k = 0; k < p->n_slots; k++)
            p->slots[k].host = p->ring + k * p->wsize;
    wm_status st = pipe_open(p, &e);
    if (!st && !p->registered && (wm__staged_tuning_now.serial_ring || !n_readers))
        st = pin_ring(p, &e);
    if (st) {
        fail_pipe(p, &e);
    } else {
        for (unsigned k = 0; k < p->n_slots; k++)
            p->free_q[p->n_free++] = k;
    }
    wm__crew crew = {.fn = read_loop, .arg = p, .th = th};
    if (!pipe_failed(p) && n_readers && wm__crew_start(p->m->file->path, &crew, n_readers, &e))
        fail_pipe(p, &e);
    if (!pipe_failed(p) && !p->registered && !p->ring_registered && pin_ring(p, &e))
        fail_pipe(p, &e);
    if (!pipe_failed(p)) drive(p, n_readers == 0);
    wm__os_mutex_lock(&p->mu);
    p->stop = true;
    wm__os_cond_broadcast(&p->to_readers);
    wm__os_mutex_unlock(&p->mu);
    wm__crew_join(&crew);
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
