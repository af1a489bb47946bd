/*
 * host.c: the host-side tools of every backend (host.h): counted regions (file mappings and
 * anonymous pages), locking, and the parallel reader.
 *
 * Sections: threads; regions; locking; descriptors of a reading thread; reading (exact reads and
 * reading threads, which the staged pipeline's readers use too); the parallel reader; jobs for a
 * packed chunk; reading into the caller's memory (wm_file_read_tensors).
 */
#include "host.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define LOCK_STEP ((size_t)16 << 20)
#define POPULATE_BELOW ((size_t)2 << 20) /* chunks smaller than one huge page */

/* ---- threads ---- */

unsigned wm__load_threads(const wm_model *m) {
    unsigned n = m->opts.threads ? m->opts.threads : wm__os_cpu_count();
    return n > WM__MAX_THREADS ? WM__MAX_THREADS : n;
}

/* ---- regions ---- */

wm_status wm__region_map(wm_model *m, uint32_t shard, uint64_t off, size_t len, wm_os_map_kind kind,
                         wm__region *r, wm_error *err) {
    const wm__shard *sh = &m->file->shards[shard];
    void *p;
    int e = wm__os_map(sh->fd, off, len, kind, &p);
    if (e)
        return wm__err(err, wm__status_io(e), e, "%s: mapping %zu bytes at offset %llu: %s",
                       sh->path, len, (unsigned long long)off, wm__errno_text(e));
    r->base = p;
    r->len = len;
    r->cat = kind == WM_OS_MAP_SHARED_RO ? WM_LEDGER_MAP_SHARED : WM_LEDGER_MAP_PRIVATE;
    r->locked = 0;
    wm__ledger_acquire(r->cat, len);
    return WM_OK;
}

wm_status wm__region_pages(wm_model *m, size_t len, wm_ledger_category cat, wm__region *r,
                           wm_error *err) {
    void *p;
    int e = wm__os_pages_alloc(len, &p);
    if (e)
        return wm__err(err, WM_ENOMEM, e, "%s: allocating %zu bytes of pages: %s", m->file->path,
                       len, wm__errno_text(e));
    r->base = p;
    r->len = len;
    r->cat = cat;
    r->locked = 0;
    wm__ledger_acquire(cat, len);
    return WM_OK;
}

void wm__region_free(wm__region *r) {
    if (!r || !r->base) return;
    if (r->locked) {
        wm__os_unlock(r->base, r->locked);
        wm__ledger_release(WM_LEDGER_LOCKED, r->locked);
    }
    if (r->cat == WM_LEDGER_MAP_SHARED || r->cat == WM_LEDGER_MAP_PRIVATE)
        wm__os_unmap(r->base, r->len);
    else
        wm__os_pages_free(r->base, r->len);
    wm__ledger_release(r->cat, r->len);
    *r = (wm__region){0};
}

/* ---- locking ---- */

wm_status wm__region_lock(wm_model *m, wm__region *r, wm_error *err) {
    if (m->opts.lock == WM_LOCK_OFF || !r->base || !r->len) return WM_OK;
    if (m->opts.lock == WM_LOCK_REQUIRED) {
        int e = wm__os_lock(r->base, r->len);
        if (e) {
            uint64_t limit = 0;
            wm__os_memlock_limit(&limit);
            bool perm = e == ENOMEM || e == EPERM || e == EAGAIN;
            char lim[32];
            if (limit == UINT64_MAX)
                snprintf(lim, sizeof lim, "unlimited");
            else
                snprintf(lim, sizeof lim, "%llu bytes", (unsigned long long)limit);
            return wm__err(err, perm ? WM_EPERM : WM_EIO, e,
                           "%s: locking %zu bytes failed (%s); RLIMIT_MEMLOCK is %s: raise it "
                           "(ulimit -l) or ask for --lock=best-effort",
                           m->file->path, r->len, wm__errno_text(e), lim);
        }
        r->locked = r->len;
    } else {
        /* Lock from the start in steps; when a step fails, halve it down to one page, so the
         * locked prefix ends close to what RLIMIT_MEMLOCK allows. */
        size_t done = 0, step = LOCK_STEP, page = wm__os_page_size();
        while (done < r->len) {
            size_t n = r->len - done < step ? r->len - done : step;
            if (wm__os_lock((char *)r->base + done, n) == 0) {
                done += n;
            } else if (step > page) {
                step /= 2;
            } else {
                break;
            }
        }
        r->locked = done;
    }
    if (r->locked) wm__ledger_acquire(WM_LEDGER_LOCKED, r->locked);
    m->stats.locked_bytes += r->locked;
    return WM_OK;
}

/* ---- descriptors of a reading thread ---- */

bool wm__fds_wanted(const wm_model *m) {
    for (size_t i = 0; i < m->file->n_tensors; i++)
        if (m->place[i].rows > 1) return true;
    return false;
}

void wm__fds_open(const wm_file *f, wm__fds *out) {
    *out = (wm__fds){0};
    int *fd = wm__alloc(f->n_shards * sizeof *fd);
    if (!fd) return;
    for (uint32_t i = 0; i < f->n_shards; i++)
        if (wm__os_reopen(f->shards[i].fd, &fd[i]) != 0) fd[i] = -1;
    *out = (wm__fds){.fd = fd, .n = f->n_shards};
}

int wm__fds_get(const wm__fds *fds, const wm_file *f, uint32_t shard) {
    return fds && fds->fd && fds->fd[shard] >= 0 ? fds->fd[shard] : f->shards[shard].fd;
}

void wm__fds_close(wm__fds *fds) {
    for (uint32_t i = 0; fds->fd && i < fds->n; i++)
        wm__os_close(fds->fd[i]);
    wm__free(fds->fd);
    *fds = (wm__fds){0};
}

/* ---- reading ---- */

static void *crew_main(void *arg) {
    const wm__crew *crew = arg;
    wm__os_task_scope(crew->fn, crew->arg);
    return NULL;
}

wm_status wm__crew_start(wm_model *m, wm__crew *crew, unsigned n, wm_error *err) {
    for (unsigned t = 0; t < n; t++) {
        wm_os_thread *th = &crew->th[crew->started];
        int e = wm__os_thread_start(th, crew_main, crew);
        if (e)
            return wm__err(err, WM_ENOMEM, e, "%s: cannot start worker thread %u: %s",
                           m->file->path, t + 1, wm__errno_text(e));
        wm__ledger_acquire(WM_LEDGER_SCRATCH, th->stack_len);
        crew->started++;
    }
    return WM_OK;
}

void wm__crew_join(wm__crew *crew) {
    for (unsigned t = 0; t < crew->started; t++) {
        size_t len = crew->th[t].stack_len;
        wm__os_thread_join(&crew->th[t]);
        wm__ledger_release(WM_LEDGER_SCRATCH, len);
    }
    crew->started = 0;
}

/* ---- the parallel reader ---- */

/* A WM_READ_WHOLE item: read in pieces by whichever threads take them, into one window of its
 * whole size, and handed to the sink by the thread that reads its last piece. */
typedef struct wm__whole {
    int slot;                      /* its window in the run's pool (-1: not yet), under win_lock */
    _Atomic(unsigned char *) base; /* that window, once it has one (read without the lock) */
    _Atomic uint64_t left;         /* bytes not read yet */
} wm__whole;

/* A window of the run's pool, for the WM_READ_WHOLE items being read. An item holds one from the
 * start of its first piece to the end of its sink call; pieces are taken in order, so at most
 * one item per thread and the one whose pieces are being handed out hold one at a time. */
typedef struct win_slot {
    unsigned char *p;
    size_t len;
    bool busy;
} win_slot;
#define WIN_SLOTS ((int)WM__MAX_THREADS + 1)

typedef struct run_ctx {
    wm_model *m;
    const wm__job *jobs;
    size_t n;
    size_t scratch_each; /* 0 when no job converts */
    bool populate;       /* fresh pages: prefault each job's destination (MADV_POPULATE_WRITE) */
    bool own_fds;        /* jobs read rows: each worker reads through descriptors of its own */
    _Atomic size_t next;
    _Atomic uint64_t done;
    uint64_t total;
    _Atomic int failed;
    wm_error first; /* written once, by the thread that set failed */
    /* wm__read_items: where jobs without a destination go, and each thread's window for them */
    wm_read_sink_fn sink;
    void *sink_user;
    size_t window_each;
    bool serial;     /* sink calls one at a time, under sink_lock */
    bool report_end; /* wm__read_items: progress once more at the end, from the calling thread */
    bool prefault;   /* WM_READ_PREFAULT: a thread faults the destinations in ahead (prefault) */
    wm_os_mutex sink_lock;
    bool wholes;          /* some jobs are pieces of WM_READ_WHOLE items: the pool below */
    wm_os_mutex win_lock; /* the pool and each wm__whole's slot */
    wm_os_cond win_free;  /* a window of the pool became free */
    win_slot wins[WIN_SLOTS];
    uint64_t win_bytes; /* the pool's windows together, under win_lock */
    uint64_t win_cap;   /* at most (but one window whatever its size, when none is busy) */
} run_ctx;

static void fail_run(run_ctx *c, const wm_error *e) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&c->failed, &expected, 1)) c->first = *e;
}

bool wm__progress(wm_model *m, uint64_t done, uint64_t total) {
    return m->opts.progress && m->opts.progress(m->opts.progress_user, done, total) != 0;
}

/* A worker's own: its descriptors, its conversion scratch, its staging for direct reads and
 * its window for the sink (each made on the first job that needs one). */
typedef struct worker_own {
    wm__fds fds;
    unsigned char *scratch;
    wm__stage stage;
    unsigned char *window;
    size_t window_len;
} worker_own;

/* Reads [off, off + len) of the job's shard into buf; false (and the failure recorded) on an
 * error or a file shorter than its header says. `stage`: the worker's staging for direct reads,
 * or NULL to read buffered whatever the page cache holds. */
static bool read_part(run_ctx *c, worker_own *w, wm__stage *stage, const wm__job *j,
                      unsigned char *buf, uint64_t off, size_t len, bool mirror, bool rows) {
    wm_error e;
    wm__read_req q = {.shard = j->shard,
                      .fd = wm__fds_get(&w->fds, c->m->file, j->shard),
                      .off = off,
                      .len = len,
                      .dst = buf,
                      .tensor = j->tensor,
                      .mirror = mirror,
                      .rows = rows};
    if (wm__read(&c->m->rd, &q, stage, &e)) {
        fail_run(c, &e);
        return false;
    }
    return true;
}

/* A converting job: WM_CONVERT_STEP source bytes at a time (whole blocks), read into the
 * scratch and converted into the destination while they are still in the cache. */
static bool convert_job(run_ctx *c, worker_own *w, const wm__job *j) {
    unsigned char *scratch = w->scratch;
    size_t bb = wm_type_block_bytes(j->from), step = WM_CONVERT_STEP / bb * bb;
    uint64_t be = wm_type_block_elems(j->from);
    size_t out_bb = wm_type_block_bytes(j->to), out_be = wm_type_block_elems(j->to);
    if (step == 0) step = bb;
    for (size_t k = 0; k < j->len; k += step) {
        size_t n = j->len - k < step ? j->len - k : step;
        /* Buffered: a direct read would need the 2 MiB staging besides the conversion's own
         * 256 KiB (the bound on a converting load's scratch, test_model's
         * convert_scratch_is_bounded), and converting, not reading, bounds this path. */
        if (!read_part(c, w, NULL, j, scratch, j->file_off + k, n, false, false)) return false;
        uint64_t n_el = (uint64_t)(n / bb) * be;
        unsigned char *dst = j->dst + (size_t)((uint64_t)(k / bb) * be / out_be * out_bb);
        wm_status st = wm_convert(j->from, j->to, scratch, dst, n_el);
        if (st) {
            wm_error e;
            wm__err(&e, st, 0, "%s: converting tensor '%s' from %s to %s failed",
                    c->m->file->shards[j->shard].path,
                    c->m->file->names + c->m->file->tensors[j->tensor].name_off,
                    wm_type_name(j->from), wm_type_name(j->to));
            fail_run(c, &e);
            return false;
        }
    }
    return true;
}

/* Sink windows mirror the file: a job's bytes start as far into the window as its file offset
 * lies past the direct-I/O grid (with a grid block to spare at each end), so that a direct read
 * lands in the window itself (wm__read_req.mirror), in reads of up to a segment, with no
 * staging copy. */
#define WIN_SLACK ((size_t)2 * WM_OS_DIRECT_ALIGN)

static size_t skew(uint64_t file_off) { return (size_t)(file_off % WM_OS_DIRECT_ALIGN); }

/* Whole huge pages from one on (wm__os_huge_len), so that no byte of a window is read into
 * 4 KiB pages, which a direct read turns into many segments (more, smaller requests). */
static size_t window_len(size_t need) {
    size_t page = wm__os_page_size();
    return wm__os_huge_len((need + WIN_SLACK + page - 1) / page * page);
}

static unsigned char *window_alloc(run_ctx *c, const wm__job *j, size_t len) {
    void *p;
    int e = wm__scratch_alloc(len, &p);
    if (e) {
        wm_error err;
        wm__err(&err, WM_ENOMEM, e, "%s: allocating a window of %zu bytes for tensor '%s': %s",
                c->m->file->shards[j->shard].path, len,
                c->m->file->names + c->m->file->tensors[j->tensor].name_off, wm__errno_text(e));
        fail_run(c, &err);
        return NULL;
    }
    /* a hint: on failure the reads fault 4 KiB pages */
    if (len >= WM_OS_HUGE_PAGE) (void)wm__os_advise(p, len, WM_OS_ADV_HUGEPAGE);
    return p;
}

static bool call_sink(run_ctx *c, const wm__job *j, uint64_t off, const unsigned char *bytes,
                      size_t len) {
    if (c->serial) wm__os_mutex_lock(&c->sink_lock);
    int rc = c->sink(c->sink_user, j->item, off, bytes, len);
    if (c->serial) wm__os_mutex_unlock(&c->sink_lock);
    if (!rc) return true;
    wm_error err;
    wm__err(&err, WM_EDEVICE, 0,
            "%s: tensor '%s': the sink refused %zu bytes at offset %llu of the tensor (it "
            "returned %d)",
            c->m->file->shards[j->shard].path,
            c->m->file->names + c->m->file->tensors[j->tensor].name_off, len,
            (unsigned long long)off, rc);
    fail_run(c, &err);
    return false;
}

/* A job for the sink: read into the thread's window (grown to the job when the job is bigger
 * than the thread's share), then handed over. The window stays for the thread's next jobs and is
 * given back when the thread's work ends: a window made per job would fault its pages in again
 * every time. */
static bool sink_job(run_ctx *c, worker_own *w, const wm__job *j) {
    if (w->window_len < window_len(j->len)) {
        size_t len = window_len(j->len > c->window_each ? j->len : c->window_each);
        wm__scratch_free(w->window, w->window_len);
        w->window_len = 0;
        w->window = window_alloc(c, j, len);
        if (!w->window) return false;
        w->window_len = len;
    }
    unsigned char *at = w->window + skew(j->file_off);
    return read_part(c, w, &w->stage, j, at, j->file_off, j->len, true, false) &&
           call_sink(c, j, j->item_off, at, j->len);
}

/* The pool's byte count follows every change of a slot. */
static void win_set(run_ctx *c, win_slot *s, unsigned char *p, size_t len) {
    c->win_bytes = c->win_bytes - s->len + len;
    s->p = p;
    s->len = len;
}

/* Room for a new window of `need` bytes in slot `keep` (whose window is remade): the pool's
 * other idle windows are given back while the pool would pass its cap; true when it then fits,
 * or when no window is busy (one item's window, whatever its size, always fits alone). */
static bool win_room(run_ctx *c, int keep, size_t need) {
    bool busy = false;
    for (int i = 0; i < WIN_SLOTS; i++)
        busy = busy || c->wins[i].busy;
    for (int i = 0; i < WIN_SLOTS && c->win_bytes - c->wins[keep].len + need > c->win_cap; i++) {
        win_slot *s = &c->wins[i];
        if (i == keep || s->busy || !s->p) continue;
        wm__scratch_free(s->p, s->len);
        win_set(c, s, NULL, 0);
    }
    return !busy || c->win_bytes - c->wins[keep].len + need <= c->win_cap;
}

/* The pool window for a WM_READ_WHOLE item (taken by its first piece): the smallest free one
 * that holds it, else a free one remade at its size, else a new one; windows are reused from
 * item to item (fresh ones per item would fault their pages in again each time: a 1.1 GiB model
 * with 15 repacked tensors, 1.9 s instead of 0.6, bench/RESULTS.md "llama") and given back when
 * the run ends. A new window that would take the pool past its cap (whole_cap) first has the
 * idle ones given back, else waits for a busy one to be. NULL (the failure recorded) when no
 * memory, or when the read failed meanwhile. */
static unsigned char *whole_window(run_ctx *c, const wm__job *j) {
    wm__whole *h = j->whole;
    uint64_t nbytes = c->m->file->tensors[j->tensor].nbytes;
    size_t need = window_len((size_t)nbytes);
    wm__os_mutex_lock(&c->win_lock);
    while (h->slot < 0 && !atomic_load(&c->failed)) {
        int fit = -1, spare = -1, empty = -1;
        for (int i = 0; i < WIN_SLOTS; i++) {
            win_slot *s = &c->wins[i];
            if (s->busy) continue;
            if (!s->p) {
                if (empty < 0) empty = i;
            } else if (s->len >= need) {
                if (fit < 0 || s->len < c->wins[fit].len) fit = i;
            } else if (spare < 0) {
                spare = i;
            }
        }
        int i = fit >= 0 ? fit : spare >= 0 ? spare : empty;
        if (i >= 0 && fit < 0) {
            if (!win_room(c, i, need)) {
                /* over the cap: a busy window's item has every piece taken (pieces are taken
                 * in order), so it ends and frees its window (whole_job), or the read fails */
                wm__os_cond_wait(&c->win_free, &c->win_lock);
                continue;
            }
            win_slot *s = &c->wins[i];
            wm__scratch_free(s->p, s->len);
            win_set(c, s, NULL, 0);
            unsigned char *p = window_alloc(c, j, need);
            if (p) win_set(c, s, p, need);
        }
        /* i < 0 cannot happen (see win_slot); a failure, not a crash, if it did */
        if (i >= 0 && c->wins[i].p) {
            c->wins[i].busy = true;
            h->slot = i;
        } else if (i < 0) {
            wm_error err;
            wm__err(&err, WM_ENOMEM, 0, "%s: no window left for tensor '%s'",
                    c->m->file->shards[j->shard].path,
                    c->m->file->names + c->m->file->tensors[j->tensor].name_off);
            fail_run(c, &err);
        }
        break;
    }
    unsigned char *p = h->slot >= 0 ? c->wins[h->slot].p : NULL;
    if (p) atomic_store_explicit(&h->base, p, memory_order_release);
    wm__os_mutex_unlock(&c->win_lock);
    return p;
}

/* A piece of a WM_READ_WHOLE item: read into the item's window where it lies in the tensor; the
 * thread that reads the last piece hands the whole tensor to the sink and frees the window for
 * the next item. Pieces are cut on the direct-I/O grid (fill_jobs), so no two pieces' aligned
 * reads write the same block. */
static bool whole_job(run_ctx *c, worker_own *w, const wm__job *j) {
    /* the item's other pieces find its window without the lock */
    unsigned char *p = atomic_load_explicit(&j->whole->base, memory_order_acquire);
    if (!p) p = whole_window(c, j);
    if (!p) return false;
    uint64_t start = j->file_off - j->item_off; /* the tensor's offset in its shard */
    unsigned char *t = p + skew(start);
    bool ok = read_part(c, w, &w->stage, j, t + j->item_off, j->file_off, j->len, true, false);
    /* the last piece hands the tensor over; a failed piece frees the window too (the read is
     * over: threads waiting for room must wake to see it), its other pieces still land in it */
    if (ok && atomic_fetch_sub(&j->whole->left, j->len) != j->len) return true;
    if (ok) ok = call_sink(c, j, 0, t, (size_t)c->m->file->tensors[j->tensor].nbytes);
    wm__os_mutex_lock(&c->win_lock);
    c->wins[j->whole->slot].busy = false;
    wm__os_cond_broadcast(&c->win_free);
    wm__os_mutex_unlock(&c->win_lock);
    return ok;
}

/* The pool's cap: twice the biggest whole item's window, or a share of WM_JOB_BYTES per thread
 * where that is more. Without one the pool grew to a window per thread (threads + 1 items in
 * flight at once, each window as big as its item): 600 MiB of scratch for a 1.1 GiB model on 16
 * threads on the H200 host, where ggml's AMX type takes every repacked tensor whole. */
static uint64_t whole_cap(const run_ctx *c, unsigned threads) {
    uint64_t biggest = 0;
    for (size_t i = 0; i < c->n; i++)
        if (c->jobs[i].whole) {
            uint64_t nb = c->m->file->tensors[c->jobs[i].tensor].nbytes;
            if (nb > biggest) biggest = nb;
        }
    uint64_t cap = 2 * (uint64_t)window_len((size_t)biggest),
             each = (uint64_t)threads * WM_JOB_BYTES;
    return cap > each ? cap : each;
}

static bool do_job(run_ctx *c, worker_own *w, const wm__job *j) {
    if (j->whole) {
        if (!whole_job(c, w, j)) return false;
    } else if (!j->dst) {
        if (!sink_job(c, w, j)) return false;
    } else if (j->from != j->to) {
        if (!convert_job(c, w, j)) return false;
    } else {
        if (c->populate && c->m->chunks[c->m->place[j->tensor].chunk].size < POPULATE_BELOW) {
            /* Heap pages are fresh: in a chunk too small for huge pages, faulting the job's 4 KiB
             * pages in with one call before the read costs less than one fault per page inside
             * the copy (about 1.5x, bench/RESULTS.md "load"); with huge pages it gains nothing
             * and the zeroed lines leave the cache before the copy. A hint: on failure the copy
             * faults. */
            uintptr_t page = wm__os_page_size(), lo = (uintptr_t)j->dst / page * page;
            uintptr_t hi = ((uintptr_t)j->dst + j->len * j->rows + page - 1) / page * page;
            wm__os_advise((void *)lo, (size_t)(hi - lo), WM_OS_ADV_POPULATE_WRITE);
        }
        for (uint64_t r = 0; r < j->rows; r++)
            if (!read_part(c, w, &w->stage, j, j->dst + r * j->len, j->file_off + r * j->src_stride,
                           j->len, false, j->rows > 1))
                return false;
    }
    atomic_fetch_add(&c->done, j->len * j->rows);
    return true;
}

/* One worker's loop; the loading thread (main) also reports progress and checks cancel. */
static void work(run_ctx *c, bool main) {
    worker_own w = {0};
    if (c->own_fds && !main) wm__fds_open(c->m->file, &w.fds);
    if (c->scratch_each) {
        void *p;
        int e = wm__scratch_alloc(c->scratch_each, &p);
        if (e) {
            wm_error err;
            wm__err(&err, WM_ENOMEM, e, "%s: allocating %zu bytes of staging: %s", c->m->file->path,
                    c->scratch_each, wm__errno_text(e));
            fail_run(c, &err);
            wm__fds_close(&w.fds);
            return;
        }
        w.scratch = p;
    }
    while (!atomic_load(&c->failed)) {
        size_t i = atomic_fetch_add(&c->next, 1);
        if (i >= c->n) break;
        if (!do_job(c, &w, &c->jobs[i])) break;
        if (main && wm__progress(c->m, atomic_load(&c->done), c->total)) {
            wm_error err;
            wm__err(&err, WM_ECANCELED, 0, "%s: load canceled by the progress callback",
                    c->m->file->path);
            fail_run(c, &err);
        }
    }
    wm__scratch_free(w.scratch, c->scratch_each);
    wm__stage_free(&w.stage);
    wm__scratch_free(w.window, w.window_len);
    wm__fds_close(&w.fds);
}

static void work_scope(void *arg) { work(arg, false); }

/* WM_READ_PREFAULT: where a job's bytes land in host memory, the engine's or the sink's. */
static unsigned char *job_dst(const wm__job *j) {
    if (j->dst) return j->dst;
    const wm_read_item *it = j->item;
    if (it && (it->flags & WM_READ_SINK_WRITES)) return (unsigned char *)it->dst + j->item_off;
    return NULL;
}

/* The prefaulting thread: job by job from the first no reader has taken, each destination's
 * whole pages faulted in 2 MiB at a time, moving on as soon as a reader takes the job (its copy
 * faults the rest). Not a WM_READ_WHOLE item's memory: its sink (a repack) writes it once every
 * piece is in, on the thread that read the last one, and whole items are read first, so that
 * sink's faults are off the disk's path; one thread faulting the repacked tensors' 835 MiB
 * ahead (1.3.1) slowed the cold reads on the H200 host (paired with the disk round by round,
 * 0.91x with whole items left to their sinks against 0.86x, bench/RESULTS.md, llama). Only jobs
 * whose bytes the disk must read (not in the page cache): there a reader waits for the disk and a
 * CPU is free, while a cached job's reader copies at memory speed and faults its own pages faster
 * than one thread ahead of many could (on the H200 host, 16 readers of a warm file: 326 ms with
 * every job prefaulted, 235 without). Ends when every job is taken or the read failed; writes no
 * byte. */
#define PREFAULT_STEP ((uintptr_t)2 << 20)

/* Whether the prefault of job i's memory may go on. */
static bool fault_on(run_ctx *c, size_t i) {
    return !atomic_load(&c->failed) && atomic_load(&c->next) <= i;
}

static void prefault(void *arg) {
    run_ctx *c = arg;
    uintptr_t page = wm__os_page_size();
    for (size_t i = atomic_load(&c->next); i < c->n && !atomic_load(&c->failed);) {
        const wm__job *j = &c->jobs[i];
        unsigned char *d = j->whole ? NULL : job_dst(j);
        uint64_t len = j->len * j->rows, cached = 0;
        int fd = c->m->file->shards[j->shard].fd;
        if (d && (wm__os_cached(fd, j->file_off, j->len, &cached) != 0 || cached * 2 >= j->len))
            d = NULL; /* warm (or unknown): the reader is quick there */
        /* every page that holds a byte of the job (so mapped): a page a job shares with the next
         * (pieces cut on the file's grid end inside a page) is faulted by both, harmlessly */
        uintptr_t lo = (uintptr_t)d / page * page;
        uintptr_t hi = ((uintptr_t)d + len + page - 1) / page * page;
        for (uintptr_t a = lo; d && a < hi && fault_on(c, i); a += PREFAULT_STEP)
            wm__os_advise((void *)a, (size_t)(hi - a < PREFAULT_STEP ? hi - a : PREFAULT_STEP),
                          WM_OS_ADV_POPULATE_WRITE);
        size_t taken = atomic_load(&c->next);
        i = taken > i + 1 ? taken : i + 1;
    }
}

/* The reader, with the sink of wm__read_items (sink NULL: every job has a destination). */
static wm_status run_jobs(wm_model *m, const wm__job *jobs, size_t n, unsigned flags,
                          const wm_read_options *sink, size_t window_each, wm_error *err) {
    if (n == 0) return WM_OK;
    run_ctx c = {.m = m,
                 .jobs = jobs,
                 .n = n,
                 .populate = (flags & WM__JOBS_FRESH_PAGES) != 0,
                 .own_fds = m->place && wm__fds_wanted(m)};
    if (sink) {
        c.sink = sink->sink;
        c.sink_user = sink->sink_user;
        c.window_each = window_each;
        c.serial = (sink->flags & WM_READ_SINK_SERIAL) != 0;
        c.report_end = true;
        c.prefault = (sink->flags & WM_READ_PREFAULT) != 0;
        int e = c.serial ? wm__os_mutex_init(&c.sink_lock) : 0;
        if (e)
            return wm__err(err, WM_ENOMEM, e, "%s: cannot make the sink's lock: %s", m->file->path,
                           wm__errno_text(e));
    }
    atomic_init(&c.next, 0);
    atomic_init(&c.done, 0);
    atomic_init(&c.failed, 0);
    size_t biggest_convert = 0;
    for (size_t i = 0; i < n; i++) {
        c.total += jobs[i].len * jobs[i].rows;
        if (jobs[i].from != jobs[i].to && jobs[i].len > biggest_convert)
            biggest_convert = jobs[i].len;
        c.wholes |= jobs[i].whole != NULL;
    }
    if (c.wholes) {
        int e = wm__os_mutex_init(&c.win_lock);
        if (!e) {
            e = wm__os_cond_init(&c.win_free);
            if (e) wm__os_mutex_destroy(&c.win_lock);
        }
        if (e) {
            if (c.serial) wm__os_mutex_destroy(&c.sink_lock);
            return wm__err(err, WM_ENOMEM, e, "%s: cannot make the windows' lock: %s",
                           m->file->path, wm__errno_text(e));
        }
        c.win_cap = whole_cap(&c, wm__load_threads(m));
    }
    unsigned threads = wm__load_threads(m);
    if (threads > n) threads = (unsigned)n;
    m->stats.threads = threads;
    if (biggest_convert) {
        size_t page = wm__os_page_size();
        if (biggest_convert > WM_CONVERT_STEP) biggest_convert = WM_CONVERT_STEP;
        c.scratch_each = (biggest_convert + page - 1) / page * page;
    }
    wm_os_thread th[WM__MAX_THREADS];
    wm__crew crew = {.fn = work_scope, .arg = &c, .th = th};
    wm_error ferr;
    wm_os_thread pth[1];
    wm__crew ahead = {.fn = prefault, .arg = &c, .th = pth};
    if (c.prefault && wm__crew_start(m, &ahead, 1, &ferr)) wm__crew_join(&ahead); /* a hint */
    if (threads > 1 && wm__crew_start(m, &crew, threads - 1, &ferr)) fail_run(&c, &ferr);
    work(&c, true);
    wm__crew_join(&crew);
    wm__crew_join(&ahead); /* every job taken (or the read failed): it has stopped or will */
    /* The calling thread reports progress after each job it did; where the workers took every
     * job it did none, so the caller hears the end (and may still cancel) once more here. */
    if (c.report_end && !atomic_load(&c.failed) && wm__progress(m, c.total, c.total)) {
        wm_error e;
        wm__err(&e, WM_ECANCELED, 0, "%s: read canceled by the progress callback", m->file->path);
        fail_run(&c, &e);
    }
    if (c.serial) wm__os_mutex_destroy(&c.sink_lock);
    if (c.wholes) {
        for (int i = 0; i < WIN_SLOTS; i++)
            wm__scratch_free(c.wins[i].p, c.wins[i].len);
        wm__os_cond_destroy(&c.win_free);
        wm__os_mutex_destroy(&c.win_lock);
    }
    if (atomic_load(&c.failed)) {
        if (err) *err = c.first;
        return c.first.code;
    }
    return WM_OK;
}

wm_status wm__run_jobs(wm_model *m, const wm__job *jobs, size_t n, unsigned flags, wm_error *err) {
    return run_jobs(m, jobs, n, flags, NULL, 0, err);
}

/* Appends a job, growing the array (a counted allocation). */
static wm_status push_job(wm_model *m, const wm__job *job, wm__job **jobs, size_t *n, size_t *cap,
                          wm_error *err) {
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        wm__job *nj = wm__realloc(*jobs, nc * sizeof *nj);
        if (!nj)
            return wm__err(err, WM_ENOMEM, 0, "%s: out of memory for read jobs", m->file->path);
        *jobs = nj;
        *cap = nc;
    }
    (*jobs)[(*n)++] = *job;
    return WM_OK;
}

/* A tensor's segments (backend.h, wm__place) as jobs of at most WM_JOB_BYTES: pieces of one
 * segment, or (one segment per row) runs of whole rows. A converting job covers whole blocks of
 * the source type and lands at the converted offset. */
static wm_status tensor_jobs(wm_model *m, uint32_t i, unsigned char *base, wm__job **jobs,
                             size_t *n, size_t *cap, wm_error *err) {
    const wm__tensor *t = &m->file->tensors[i];
    const wm__place *p = &m->place[i];
    wm__job job = {
        .shard = t->shard, .from = (wm_type)t->type, .to = p->type, .tensor = i, .rows = 1};
    if (p->rows > 1) {
        uint64_t per = WM_JOB_BYTES / p->seg_bytes ? WM_JOB_BYTES / p->seg_bytes : 1;
        for (uint64_t r = 0; r < p->rows; r += per) {
            job.rows = p->rows - r < per ? p->rows - r : per;
            job.file_off = t->offset + p->src_off + r * p->src_stride;
            job.src_stride = p->src_stride;
            job.len = (size_t)p->seg_bytes;
            job.dst = base + p->dst_off + (size_t)(p->dst_lo + r * p->seg_bytes);
            wm_status st = push_job(m, &job, jobs, n, cap, err);
            if (st) return st;
        }
        return WM_OK;
    }
    size_t piece = WM_JOB_BYTES;
    size_t out_num = 1, out_den = 1; /* delivered bytes per source byte */
    if (p->convert) {
        size_t bb = wm_type_block_bytes((wm_type)t->type);
        piece = WM_JOB_BYTES / bb * bb;
        if (piece == 0) piece = bb;
        out_num = (size_t)wm_type_block_elems((wm_type)t->type) * wm_type_block_bytes(p->type);
        out_den = bb * wm_type_block_elems(p->type);
    }
    for (uint64_t off = 0; off < p->seg_bytes; off += piece) {
        job.file_off = t->offset + p->src_off + off;
        job.len = p->seg_bytes - off < piece ? (size_t)(p->seg_bytes - off) : piece;
        job.dst = base + p->dst_off + (size_t)(p->dst_lo + off / out_den * out_num);
        wm_status st = push_job(m, &job, jobs, n, cap, err);
        if (st) return st;
    }
    return WM_OK;
}

wm_status wm__chunk_jobs(wm_model *m, uint32_t ci, unsigned char *base, wm__job **jobs, size_t *n,
                         size_t *cap, wm_error *err) {
    const wm__chunk *c = &m->chunks[ci];
    for (uint32_t k = c->first; k < c->first + c->count; k++) {
        wm_status st = tensor_jobs(m, m->order[k], base, jobs, n, cap, err);
        if (st) return st;
    }
    return WM_OK;
}

/* ---- reading into the caller's memory (wm_file_read_tensors) ----
 * The same reader with no model: a model object on the stack that carries only the file, the
 * threads and the progress callback (no plan, no chunks), and page allocations for the order of
 * the items and for the job table with the WM_READ_WHOLE items' states, so the calling thread
 * takes nothing from malloc. Jobs with a destination and a WM_READ_WHOLE item's pieces are cut
 * where the file offset crosses a multiple of WM_JOB_BYTES (so that a destination laid out as
 * the file reads every block but its first and last in place, direct: reader.c); a whole item's
 * pieces are read into one window (whole_job); jobs for the sink are pieces of one thread's
 * window share.
 *
 * Order: the WM_READ_WHOLE items come first, the biggest first, then the rest in the caller's
 * order. A whole item is handed over only once its last piece is in and its sink (a repack, say)
 * then works on one thread, so the biggest one last would leave the disk with one reader, or
 * none, at the end (on the H200 host, llama.cpp's 133 MiB output matrix last in the file).
 *
 * The tail: the last threads x WM_JOB_BYTES bytes, in that order, are cut into pieces of at most
 * TAIL_PIECE (whole items' on a TAIL_PIECE file grid). Each thread's last job ends when it ends,
 * and with 8 MiB jobs on a disk that 16 threads share a job takes 80 ms or so: the threads that
 * finish first leave the disk with fewer readers for up to that long. Smaller last jobs even the
 * ends out; earlier ones stay big (fewer calls, fewer sink calls). */

#define DEFAULT_WINDOW ((size_t)64 << 20)
#define MIN_WINDOW_EACH ((size_t)1 << 20)
#define TAIL_PIECE ((size_t)2 << 20)

/* Where the engine reads an item's bytes itself: its dst, unless the sink writes there. */
static unsigned char *read_dst(const wm_read_item *it) {
    return it->flags & WM_READ_SINK_WRITES ? NULL : it->dst;
}

static bool is_whole(const wm_read_item *it) {
    return !read_dst(it) && (it->flags & WM_READ_WHOLE);
}

/* A WM_READ_SINK_ROWS item's group: row_group rows (at least 1) of its bytes, or the whole
 * tensor where that is less (or the rows cannot be told: a tensor of no elements). */
static uint64_t group_bytes(const wm__tensor *t, uint32_t row_group) {
    uint64_t rows = t->ne[0] ? t->n_elements / t->ne[0] : 0;
    if (rows == 0 || t->nbytes % rows) return t->nbytes;
    uint64_t row = t->nbytes / rows, g = row_group ? row_group : 1;
    return g >= rows ? t->nbytes : row * g;
}

/* The end of the piece that starts `off` bytes into the tensor: (a whole item's, or one read
 * into its dst) the next file offset on a multiple of the piece's size, so that the pieces of a
 * destination laid out as the file meet on whole direct-read blocks (reader.c, read_direct);
 * else `piece` bytes on (a WM_READ_SINK_ROWS item's: rounded down to whole groups, at least
 * one); at most the tensor's end. */
static uint64_t piece_end(const wm_read_item *it, const wm__tensor *t, uint64_t off, bool tail,
                          size_t window_each, uint32_t row_group) {
    uint64_t at;
    if (is_whole(it) || read_dst(it)) {
        uint64_t grid = tail ? TAIL_PIECE : WM_JOB_BYTES, file = t->offset + off;
        at = (file / grid + 1) * grid - t->offset;
    } else {
        size_t piece = window_each;
        uint64_t len = tail && piece > TAIL_PIECE ? TAIL_PIECE : piece;
        if (it->flags & WM_READ_SINK_ROWS) {
            uint64_t g = group_bytes(t, row_group);
            len = len > g ? len / g * g : g;
        }
        at = off + len;
    }
    return at < t->nbytes ? at : t->nbytes;
}

/* Whether item a goes before item b: whole items first, the bigger first, then by index. */
static bool before(const wm_file *f, const wm_read_item *items, size_t a, size_t b) {
    bool wa = is_whole(&items[a]), wb = is_whole(&items[b]);
    if (wa != wb) return wa;
    uint64_t na = wa ? f->tensors[items[a].tensor].nbytes : 0;
    uint64_t nb = wb ? f->tensors[items[b].tensor].nbytes : 0;
    return na != nb ? na > nb : a < b;
}

/* order[0 .. n): the items' indices sorted by `before` (a heap sort: in place, no allocation). */
static void sift(const wm_file *f, const wm_read_item *items, size_t *order, size_t root,
                 size_t n) {
    for (size_t child; (child = 2 * root + 1) < n; root = child) {
        if (child + 1 < n && before(f, items, order[child], order[child + 1])) child++;
        if (!before(f, items, order[root], order[child])) return;
        size_t t = order[root];
        order[root] = order[child];
        order[child] = t;
    }
}

static void sort_items(const wm_file *f, const wm_read_item *items, size_t n, size_t *order) {
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = n / 2; i-- > 0;)
        sift(f, items, order, i, n);
    for (size_t end = n; end > 1; end--) {
        size_t t = order[0];
        order[0] = order[end - 1];
        order[end - 1] = t;
        sift(f, items, order, 0, end - 1);
    }
}

/* The items cut into jobs, in order; the tail (the bytes from tail_from on) in small pieces.
 * Counts only (the jobs and the whole items) when jobs is NULL, else fills jobs and wholes. */
typedef struct layout {
    const wm_file *f;
    const wm_read_item *items;
    const size_t *order;
    size_t n, window_each;
    uint32_t row_group; /* wm_read_options.row_group */
    uint64_t tail_from;
    size_t jobs, wholes; /* counted */
} layout;

static void lay_jobs(layout *lo, wm__job *jobs, wm__whole *wholes) {
    uint64_t at = 0; /* bytes before the item, in order */
    lo->jobs = lo->wholes = 0;
    for (size_t o = 0; o < lo->n; o++) {
        const wm_read_item *it = &lo->items[lo->order[o]];
        const wm__tensor *t = &lo->f->tensors[it->tensor];
        wm__whole *h = NULL;
        if (t->nbytes && is_whole(it)) {
            if (wholes) {
                h = &wholes[lo->wholes];
                h->slot = -1;
                atomic_init(&h->base, NULL);
                atomic_init(&h->left, t->nbytes);
            }
            lo->wholes++;
        }
        for (uint64_t off = 0, end; off < t->nbytes; off = end) {
            end = piece_end(it, t, off, at + off >= lo->tail_from, lo->window_each, lo->row_group);
            if (jobs)
                jobs[lo->jobs] = (wm__job){.shard = t->shard,
                                           .file_off = t->offset + off,
                                           .len = (size_t)(end - off),
                                           .dst = read_dst(it) ? read_dst(it) + off : NULL,
                                           .from = (wm_type)t->type,
                                           .to = (wm_type)t->type,
                                           .tensor = (uint32_t)it->tensor,
                                           .rows = 1,
                                           .item = it,
                                           .item_off = off,
                                           .whole = h};
            lo->jobs++;
        }
        at += t->nbytes;
    }
}

static wm_status pages(const wm_file *f, size_t len, const char *what, void **p, wm_error *err) {
    int e = wm__scratch_alloc(len, p);
    return e ? wm__err(err, WM_ENOMEM, e, "%s: allocating %zu bytes of %s: %s", f->path, len, what,
                       wm__errno_text(e))
             : WM_OK;
}

wm_status wm__read_items(wm_file *f, const wm_read_item *items, size_t n, const wm_read_options *o,
                         wm_error *err) {
    wm_model m;
    memset(&m, 0, sizeof m);
    m.file = f;
    m.opts.threads = o->threads;
    m.opts.progress = o->progress;
    m.opts.progress_user = o->progress_user;
    size_t page = wm__os_page_size();
    unsigned threads = wm__load_threads(&m);
    size_t each = (o->window ? o->window : DEFAULT_WINDOW) / (threads ? threads : 1);
    if (each < MIN_WINDOW_EACH) each = MIN_WINDOW_EACH;
    if (each > WM_JOB_BYTES) each = WM_JOB_BYTES;
    each = each / page * page;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += f->tensors[items[i].tensor].nbytes;
    if (total == 0) return WM_OK;
    if (n > (SIZE_MAX - page) / sizeof(size_t))
        return wm__err(err, WM_ENOMEM, 0, "%s: %zu read items do not fit in memory", f->path, n);
    size_t order_len = (n * sizeof(size_t) + page - 1) / page * page;
    void *order;
    wm_status st = pages(f, order_len, "read order", &order, err);
    if (st) return st;
    sort_items(f, items, n, order);
    uint64_t tail = (uint64_t)(threads ? threads : 1) * WM_JOB_BYTES;
    layout lo = {.f = f,
                 .items = items,
                 .order = order,
                 .n = n,
                 .window_each = each,
                 .row_group = o->row_group,
                 .tail_from = total > tail ? total - tail : 0};
    lay_jobs(&lo, NULL, NULL);
    /* the table: the jobs, then the whole items' states */
    size_t nj = lo.jobs, nw = lo.wholes, room = SIZE_MAX - page;
    size_t table = 0;
    void *p = NULL;
    if (nj > room / sizeof(wm__job) || nw > (room - nj * sizeof(wm__job)) / sizeof(wm__whole))
        st = wm__err(err, WM_ENOMEM, 0, "%s: %zu read jobs do not fit in memory", f->path, nj);
    else
        table = (nj * sizeof(wm__job) + nw * sizeof(wm__whole) + page - 1) / page * page;
    if (!st) st = pages(f, table, "read jobs", &p, err);
    if (!st) {
        lay_jobs(&lo, p, (wm__whole *)(void *)((unsigned char *)p + nj * sizeof(wm__job)));
        st = wm__reader_init(&m.rd, f, o->direct_io, err);
        if (!st) st = run_jobs(&m, p, nj, 0, o, each, err);
        wm__reader_free(&m.rd);
    }
    wm__scratch_free(p, table);
    wm__scratch_free(order, order_len);
    return st;
}
