/*
 * host.c: the host-side tools of every backend (host.h): counted regions (file mappings and
 * anonymous pages), locking, and the parallel reader.
 *
 * Sections: threads; regions; locking; descriptors of a reading thread; reading (exact reads and
 * reading threads, which the staged pipeline's readers use too); the parallel reader; jobs for a
 * packed chunk.
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
} run_ctx;

static void fail_run(run_ctx *c, const wm_error *e) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&c->failed, &expected, 1)) c->first = *e;
}

bool wm__progress(wm_model *m, uint64_t done, uint64_t total) {
    return m->opts.progress && m->opts.progress(m->opts.progress_user, done, total) != 0;
}

/* A worker's own: its descriptors, its conversion scratch and its staging for direct reads. */
typedef struct worker_own {
    wm__fds fds;
    unsigned char *scratch;
    wm__stage stage;
} worker_own;

/* Reads [off, off + len) of the job's shard into buf; false (and the failure recorded) on an
 * error or a file shorter than its header says. */
static bool read_part(run_ctx *c, worker_own *w, const wm__job *j, unsigned char *buf, uint64_t off,
                      size_t len) {
    wm_error e;
    wm__read_req q = {.shard = j->shard,
                      .fd = wm__fds_get(&w->fds, c->m->file, j->shard),
                      .off = off,
                      .len = len,
                      .dst = buf,
                      .tensor = j->tensor};
    if (wm__read(&c->m->rd, &q, &w->stage, &e)) {
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
        if (!read_part(c, w, j, scratch, j->file_off + k, n)) return false;
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

static bool do_job(run_ctx *c, worker_own *w, const wm__job *j) {
    if (j->from != j->to) {
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
            if (!read_part(c, w, j, j->dst + r * j->len, j->file_off + r * j->src_stride, j->len))
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
    wm__fds_close(&w.fds);
}

static void work_scope(void *arg) { work(arg, false); }

wm_status wm__run_jobs(wm_model *m, const wm__job *jobs, size_t n, unsigned flags, wm_error *err) {
    if (n == 0) return WM_OK;
    run_ctx c = {.m = m,
                 .jobs = jobs,
                 .n = n,
                 .populate = (flags & WM__JOBS_FRESH_PAGES) != 0,
                 .own_fds = wm__fds_wanted(m)};
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
    if (threads > 1 && wm__crew_start(m, &crew, threads - 1, &ferr)) fail_run(&c, &ferr);
    work(&c, true);
    wm__crew_join(&crew);
    if (atomic_load(&c.failed)) {
        if (err) *err = c.first;
        return c.first.code;
    }
    return WM_OK;
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
