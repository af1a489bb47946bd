/*
 * run.c: the job runner of the reading engine (engine.h): jobs taken in order by a crew of
 * threads and the calling thread, each read (converted, or handed to a sink through a window)
 * through the run's reader; the first error stops the rest.
 *
 * Sections: the run and its workers; converting; windows for the sink; WM_READ_WHOLE items'
 * windows; one job; a worker; prefaulting ahead; the run.
 */
#include "engine.h"

#include <string.h>

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
    wm__read_run *run;
    const wm_file *f;
    const wm__job *jobs;
    size_t n;
    size_t scratch_each; /* 0 when no job converts */
    bool own_fds;        /* jobs read rows: each worker reads through descriptors of its own */
    _Atomic size_t next;
    _Atomic uint64_t done;
    uint64_t total;
    _Atomic int failed;
    wm_error first; /* written once, by the thread that set failed */
    /* a sink (wm__read_items): where jobs without a destination go, and each thread's window */
    wm_read_sink_fn sink;
    void *sink_user;
    size_t window_each;
    bool serial;     /* sink calls one at a time, under sink_lock */
    bool report_end; /* with a sink: progress once more at the end, from the calling thread */
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

/* Tells the caller of progress; true means it asked to cancel. */
static bool progress(const run_ctx *c, uint64_t done, uint64_t total) {
    return c->run->progress && c->run->progress(c->run->progress_user, done, total) != 0;
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
                      .fd = wm__fds_get(&w->fds, c->f, j->shard),
                      .off = off,
                      .len = len,
                      .dst = buf,
                      .tensor = j->tensor,
                      .mirror = mirror,
                      .rows = rows};
    if (wm__read(c->run->rd, &q, stage, &e)) {
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
                    c->f->shards[j->shard].path, c->f->names + c->f->tensors[j->tensor].name_off,
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
                c->f->shards[j->shard].path, len, c->f->names + c->f->tensors[j->tensor].name_off,
                wm__errno_text(e));
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
            c->f->shards[j->shard].path, c->f->names + c->f->tensors[j->tensor].name_off, len,
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
    uint64_t nbytes = c->f->tensors[j->tensor].nbytes;
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
                    c->f->shards[j->shard].path, c->f->names + c->f->tensors[j->tensor].name_off);
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
    if (ok) ok = call_sink(c, j, 0, t, (size_t)c->f->tensors[j->tensor].nbytes);
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
            uint64_t nb = c->f->tensors[c->jobs[i].tensor].nbytes;
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
        if (j->populate) {
            /* one call faults the job's 4 KiB pages in (wm__job.populate); a hint: on failure
             * the copy faults */
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
    if (c->own_fds && !main) wm__fds_open(c->f, &w.fds);
    if (c->scratch_each) {
        void *p;
        int e = wm__scratch_alloc(c->scratch_each, &p);
        if (e) {
            wm_error err;
            wm__err(&err, WM_ENOMEM, e, "%s: allocating %zu bytes of staging: %s", c->f->path,
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
        if (main && progress(c, atomic_load(&c->done), c->total)) {
            wm_error err;
            wm__err(&err, WM_ECANCELED, 0, "%s: load canceled by the progress callback",
                    c->f->path);
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
        int fd = c->f->shards[j->shard].fd;
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

wm_status wm__run_jobs(wm__read_run *run, const wm__job *jobs, size_t n, const wm__sink *sink,
                       wm_error *err) {
    const wm_file *f = run->file;
    run->threads_used = 0;
    if (n == 0) return WM_OK;
    run_ctx c = {.run = run, .f = f, .jobs = jobs, .n = n};
    if (sink) {
        c.sink = sink->fn;
        c.sink_user = sink->user;
        c.window_each = sink->window_each;
        c.serial = (sink->flags & WM_READ_SINK_SERIAL) != 0;
        c.report_end = true;
        c.prefault = (sink->flags & WM_READ_PREFAULT) != 0;
        int e = c.serial ? wm__os_mutex_init(&c.sink_lock) : 0;
        if (e)
            return wm__err(err, WM_ENOMEM, e, "%s: cannot make the sink's lock: %s", f->path,
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
        c.own_fds |= jobs[i].rows > 1;
    }
    if (c.wholes) {
        int e = wm__os_mutex_init(&c.win_lock);
        if (!e) {
            e = wm__os_cond_init(&c.win_free);
            if (e) wm__os_mutex_destroy(&c.win_lock);
        }
        if (e) {
            if (c.serial) wm__os_mutex_destroy(&c.sink_lock);
            return wm__err(err, WM_ENOMEM, e, "%s: cannot make the windows' lock: %s", f->path,
                           wm__errno_text(e));
        }
        c.win_cap = whole_cap(&c, run->threads);
    }
    unsigned threads = run->threads ? run->threads : 1;
    if (threads > n) threads = (unsigned)n;
    run->threads_used = threads;
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
    if (c.prefault && wm__crew_start(f->path, &ahead, 1, &ferr)) wm__crew_join(&ahead); /* a hint */
    if (threads > 1 && wm__crew_start(f->path, &crew, threads - 1, &ferr)) fail_run(&c, &ferr);
    work(&c, true);
    wm__crew_join(&crew);
    wm__crew_join(&ahead); /* every job taken (or the read failed): it has stopped or will */
    /* The calling thread reports progress after each job it did; where the workers took every
     * job it did none, so the caller hears the end (and may still cancel) once more here. */
    if (c.report_end && !atomic_load(&c.failed) && progress(&c, c.total, c.total)) {
        wm_error e;
        wm__err(&e, WM_ECANCELED, 0, "%s: read canceled by the progress callback", f->path);
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
