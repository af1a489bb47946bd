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
#define HUGE_WINDOW ((size_t)2 << 20)    /* a sink window of a huge page or more */

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
                      unsigned char *buf, uint64_t off, size_t len) {
    wm_error e;
    wm__read_req q = {.shard = j->shard,
                      .fd = wm__fds_get(&w->fds, c->m->file, j->shard),
                      .off = off,
                      .len = len,
                      .dst = buf,
                      .tensor = j->tensor};
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
        if (!read_part(c, w, NULL, j, scratch, j->file_off + k, n)) return false;
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

/* A job for the sink: read into the thread's window (one of the job's size when it is bigger than
 * the thread's share: a tensor asked for whole), then handed over. The window stays for the
 * thread's next jobs and is given back when the thread's work ends: a window made per tensor
 * would fault its pages in again for every tensor (a 1.1 GiB model with 15 repacked tensors:
 * 1.9 s instead of 0.6; bench/RESULTS.md, llama). Windows of a huge page or more are advised
 * huge pages (a hint: on failure the copy faults 4 KiB pages). */
static bool sink_job(run_ctx *c, worker_own *w, const wm__job *j) {
    const char *path = c->m->file->shards[j->shard].path;
    const char *name = c->m->file->names + c->m->file->tensors[j->tensor].name_off;
    if (w->window_len < j->len) {
        size_t page = wm__os_page_size();
        size_t len = (j->len > c->window_each ? j->len : c->window_each) + page - 1;
        len = len / page * page;
        wm__scratch_free(w->window, w->window_len);
        w->window = NULL;
        w->window_len = 0;
        void *p;
        int e = wm__scratch_alloc(len, &p);
        if (e) {
            wm_error err;
            wm__err(&err, WM_ENOMEM, e, "%s: allocating a window of %zu bytes for tensor '%s': %s",
                    path, len, name, wm__errno_text(e));
            fail_run(c, &err);
            return false;
        }
        w->window = p;
        w->window_len = len;
        if (len >= HUGE_WINDOW) (void)wm__os_advise(p, len, WM_OS_ADV_HUGEPAGE);
    }
    if (!read_part(c, w, &w->stage, j, w->window, j->file_off, j->len)) return false;
    if (c->serial) wm__os_mutex_lock(&c->sink_lock);
    int rc = c->sink(c->sink_user, j->item, j->item_off, w->window, j->len);
    if (c->serial) wm__os_mutex_unlock(&c->sink_lock);
    if (rc) {
        wm_error err;
        wm__err(&err, WM_EDEVICE, 0,
                "%s: tensor '%s': the sink refused %zu bytes at offset %llu of the tensor (it "
                "returned %d)",
                path, name, j->len, (unsigned long long)j->item_off, rc);
        fail_run(c, &err);
        return false;
    }
    return true;
}

static bool do_job(run_ctx *c, worker_own *w, const wm__job *j) {
    if (!j->dst) {
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
                           j->len))
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
 * faults the rest). Only jobs whose bytes the disk must read (not in the page cache): there a
 * reader waits for the disk and a CPU is free, while a cached job's reader copies at memory
 * speed and faults its own pages faster than one thread ahead of many could (on the H200 host,
 * 16 readers of a warm file: 326 ms with every job prefaulted, 235 without). Ends when every job
 * is taken or the read failed; writes no byte. */
#define PREFAULT_STEP ((uintptr_t)2 << 20)

static void prefault(void *arg) {
    run_ctx *c = arg;
    uintptr_t page = wm__os_page_size();
    for (size_t i = atomic_load(&c->next); i < c->n && !atomic_load(&c->failed);) {
        const wm__job *j = &c->jobs[i];
        unsigned char *d = job_dst(j);
        uint64_t cached = 0;
        int fd = c->m->file->shards[j->shard].fd;
        if (d && (wm__os_cached(fd, j->file_off, j->len, &cached) != 0 || cached * 2 >= j->len))
            d = NULL; /* warm (or unknown): the reader is quick there */
        uintptr_t lo = ((uintptr_t)d + page - 1) / page * page;
        uintptr_t hi = ((uintptr_t)d + j->len * j->rows) / page * page;
        for (uintptr_t a = lo; d && a < hi && atomic_load(&c->next) <= i; a += PREFAULT_STEP)
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
 * threads and the progress callback (no plan, no chunks), and a job table of pages, so the
 * calling thread takes nothing from malloc. Jobs with a destination are pieces of at most
 * WM_JOB_BYTES; jobs for the sink are pieces of one thread's window share, or the whole tensor
 * for WM_READ_WHOLE. */

#define DEFAULT_WINDOW ((size_t)64 << 20)
#define MIN_WINDOW_EACH ((size_t)1 << 20)

/* Where the engine reads an item's bytes itself: its dst, unless the sink writes there. */
static unsigned char *read_dst(const wm_read_item *it) {
    return it->flags & WM_READ_SINK_WRITES ? NULL : it->dst;
}

static size_t item_piece(const wm_read_item *it, uint64_t nbytes, size_t window_each) {
    if (read_dst(it)) return WM_JOB_BYTES;
    if (it->flags & WM_READ_WHOLE) return nbytes > SIZE_MAX ? SIZE_MAX : (size_t)nbytes;
    return window_each;
}

static size_t count_jobs(const wm_file *f, const wm_read_item *items, size_t n,
                         size_t window_each) {
    size_t jobs = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t nb = f->tensors[items[i].tensor].nbytes;
        if (nb)
            jobs += (size_t)((nb + item_piece(&items[i], nb, window_each) - 1) /
                             item_piece(&items[i], nb, window_each));
    }
    return jobs;
}

static void fill_jobs(const wm_file *f, const wm_read_item *items, size_t n, size_t window_each,
                      wm__job *jobs) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const wm__tensor *t = &f->tensors[items[i].tensor];
        size_t piece = item_piece(&items[i], t->nbytes, window_each);
        for (uint64_t off = 0; off < t->nbytes; off += piece) {
            size_t len = t->nbytes - off < piece ? (size_t)(t->nbytes - off) : piece;
            jobs[k++] = (wm__job){.shard = t->shard,
                                  .file_off = t->offset + off,
                                  .len = len,
                                  .dst = read_dst(&items[i]) ? read_dst(&items[i]) + off : NULL,
                                  .from = (wm_type)t->type,
                                  .to = (wm_type)t->type,
                                  .tensor = (uint32_t)items[i].tensor,
                                  .rows = 1,
                                  .item = &items[i],
                                  .item_off = off};
        }
    }
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
    size_t nj = count_jobs(f, items, n, each);
    if (nj == 0) return WM_OK;
    if (nj > SIZE_MAX / sizeof(wm__job) - page)
        return wm__err(err, WM_ENOMEM, 0, "%s: %zu read jobs do not fit in memory", f->path, nj);
    size_t table = (nj * sizeof(wm__job) + page - 1) / page * page;
    void *p;
    int e = wm__scratch_alloc(table, &p);
    if (e)
        return wm__err(err, WM_ENOMEM, e, "%s: allocating %zu bytes of read jobs: %s", f->path,
                       table, wm__errno_text(e));
    fill_jobs(f, items, n, each, p);
    wm_status st = wm__reader_init(&m.rd, f, o->direct_io, err);
    if (!st) st = run_jobs(&m, p, nj, 0, o, each, err);
    wm__reader_free(&m.rd);
    wm__scratch_free(p, table);
    return st;
}
