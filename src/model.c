/*
 * model.c: the lifecycle of a loaded model: options, the load plan, the shared tools backends
 * use (counted regions, locking, the parallel reader), release, and the getters.
 *
 * Sections: options and the plan; regions; locking; the parallel reader; load and release;
 * getters.
 *
 * Why the plan packs heap tensors instead of mirroring the file: conversions change sizes, and a
 * packed layout lets the reader pread each tensor straight into its final place, so heap mode
 * never holds a second copy (peak = tensor bytes + the conversion staging, bounded).
 */
#include "backend/backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TENSOR_ALIGN 64 /* bytes: each tensor in a packed buffer starts on a cache line */
#define MAX_THREADS 64u
#define LOCK_STEP ((size_t)16 << 20)
#define WM_POPULATE_BELOW ((size_t)2 << 20) /* chunks smaller than one huge page */

/* ---- names ---- */

const char *wm_mode_name(wm_mode mode) {
    switch (mode) {
    case WM_MODE_HEAP: return "heap";
    case WM_MODE_MMAP: return "mmap";
    case WM_MODE_MMAP_PRIVATE: return "mmap-private";
    default: return NULL;
    }
}

wm_mode wm_mode_from_name(const char *name) {
    if (!name) return WM_MODE_NONE;
    for (int m = WM_MODE_HEAP; m <= WM_MODE_MMAP_PRIVATE; m++)
        if (strcmp(name, wm_mode_name((wm_mode)m)) == 0) return (wm_mode)m;
    return WM_MODE_NONE;
}

unsigned wm__load_threads(const wm_model *m) {
    unsigned n = m->opts.threads ? m->opts.threads : wm__os_cpu_count();
    return n > MAX_THREADS ? MAX_THREADS : n;
}

/* ---- options and the plan ---- */

static wm_status check_options(const wm_file *f, const wm_load_options *o, wm_error *err) {
    const char *path = f->path;
    if (o->mode < WM_MODE_HEAP || o->mode > WM_MODE_MMAP_PRIVATE)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: no load mode: choose heap, mmap or mmap-private (there is no default)",
                       path);
    if ((unsigned)o->lock > WM_LOCK_BEST_EFFORT)
        return wm__err(err, WM_EINVAL, 0, "%s: unknown lock option %d", path, (int)o->lock);
    if (o->lock != WM_LOCK_OFF && o->mode == WM_MODE_MMAP_PRIVATE)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: refusing to lock a writable private mapping: mlock would privatise "
                       "every page (use mmap or heap with a lock)",
                       path);
    if (o->n_convert && !o->convert)
        return wm__err(err, WM_EINVAL, 0, "%s: n_convert without convert rules", path);
    if (o->n_convert && o->mode != WM_MODE_HEAP)
        return wm__err(err, WM_EINVAL, 0, "%s: conversion on load needs mode heap (mode %s)",
                       path, wm_mode_name(o->mode));
    if (o->direct_io && (o->backend != WM_BACKEND_CUDA || o->cuda_registered))
        return wm__err(err, WM_EINVAL, 0,
                       "%s: direct_io applies to the CUDA backend's staged path only (it reads "
                       "into pinned slots; other loads read into their destination or map)",
                       path);
    if (o->max_buffer_size && o->max_buffer_size < wm__os_page_size())
        return wm__err(err, WM_EINVAL, 0, "%s: max_buffer_size %llu is below the page size", path,
                       (unsigned long long)o->max_buffer_size);
    return WM_OK;
}

typedef struct sort_key {
    uint32_t shard;
    uint64_t offset;
    uint32_t index;
} sort_key;

static int by_position(const void *a, const void *b) {
    const sort_key *x = a, *y = b;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The delivered type of tensor t under the conversion rules. */
static wm_status target_type(const wm_file *f, const wm__tensor *t, const wm_load_options *o,
                             wm__place *p, wm_error *err) {
    const char *name = f->names + t->name_off;
    p->type = (wm_type)t->type;
    p->nbytes = t->nbytes;
    p->convert = false;
    for (size_t r = 0; r < o->n_convert; r++) {
        const wm_convert_rule *rule = &o->convert[r];
        if (rule->tensor && strcmp(rule->tensor, name) != 0) continue;
        if (rule->from != WM_TYPE_INVALID && rule->from != (wm_type)t->type) continue;
        if (rule->to == (wm_type)t->type) return WM_OK;
        if (!wm_convert_supported((wm_type)t->type, rule->to))
            return wm__err(err, WM_EINVAL, 0, "%s: tensor '%s': no conversion from %s to %s",
                           f->path, name, wm_type_name((wm_type)t->type),
                           wm_type_name(rule->to) ? wm_type_name(rule->to) : "?");
        uint64_t bytes;
        if (wm__mul_overflow_u64(t->n_elements / wm_type_block_elems(rule->to),
                                 wm_type_block_bytes(rule->to), &bytes))
            return wm__err(err, WM_EINVAL, 0, "%s: tensor '%s': converted size overflows",
                           f->path, name);
        p->type = rule->to;
        p->nbytes = bytes;
        p->convert = true;
        return WM_OK;
    }
    return WM_OK;
}

/* Mapped layouts mirror the file (chunks are page-aligned file ranges); packed layouts place
 * tensors one after another (heap and device memory). */
static bool mapped_layout(const wm_model *m) {
    return m->opts.backend == WM_BACKEND_CPU && m->opts.mode != WM_MODE_HEAP;
}

static wm_status build_plan(wm_model *m, const wm_load_options *o, wm_error *err) {
    wm_file *f = m->file;
    size_t n = f->n_tensors;
    if (n == 0) return WM_OK;
    sort_key *keys = wm__alloc(n * sizeof *keys);
    m->order = wm__alloc(n * sizeof *m->order);
    m->place = wm__calloc(n, sizeof *m->place);
    m->chunks = wm__calloc(n, sizeof *m->chunks); /* at most one chunk per tensor */
    if (!keys || !m->order || !m->place || !m->chunks) {
        wm__free(keys);
        return wm__err(err, WM_ENOMEM, 0, "%s: out of memory for the load plan", f->path);
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = (sort_key){f->tensors[i].shard, f->tensors[i].offset, (uint32_t)i};
    qsort(keys, n, sizeof *keys, by_position);
    for (size_t i = 0; i < n; i++) m->order[i] = keys[i].index;
    wm__free(keys);

    bool mapped = mapped_layout(m);
    uint64_t max = o->max_buffer_size ? o->max_buffer_size : UINT64_MAX;
    uint64_t page = wm__os_page_size();
    wm__chunk *c = NULL;
    for (size_t k = 0; k < n; k++) {
        uint32_t i = m->order[k];
        const wm__tensor *t = &f->tensors[i];
        wm__place *p = &m->place[i];
        wm_status st = target_type(f, t, o, p, err);
        if (st) return st;
        uint64_t end = t->offset + t->nbytes;
        /* Would t fit in the open chunk? */
        bool fits = false;
        if (c && c->shard == t->shard) {
            uint64_t size = mapped ? end - c->file_start
                                   : wm__align_up(c->size, TENSOR_ALIGN) + p->nbytes;
            fits = size <= max;
        }
        if (!fits) {
            uint64_t own = mapped ? end - t->offset / page * page : p->nbytes;
            if (own > max)
                return wm__err(err, WM_EINVAL, 0,
                               "%s: tensor '%s' needs %llu bytes, more than max_buffer_size %llu",
                               f->path, f->names + t->name_off, (unsigned long long)own,
                               (unsigned long long)max);
            c = &m->chunks[m->n_chunks++];
            c->shard = t->shard;
            c->file_start = mapped ? t->offset / page * page : t->offset;
            c->file_end = t->offset;
            c->size = 0;
            c->first = (uint32_t)k;
            c->count = 0;
        }
        p->chunk = (uint32_t)(c - m->chunks);
        if (mapped) {
            p->dst_off = (size_t)(t->offset - c->file_start);
            if (end > c->file_end) c->file_end = end;
            c->size = (size_t)(c->file_end - c->file_start);
        } else {
            p->dst_off = c->count ? (size_t)wm__align_up(c->size, TENSOR_ALIGN) : 0;
            c->size = p->dst_off + (size_t)p->nbytes;
            if (end > c->file_end) c->file_end = end;
        }
        c->count++;
        m->stats.tensor_bytes += p->nbytes;
    }
    m->stats.buffers = m->n_chunks;
    return WM_OK;
}

/* ---- regions ---- */

wm_status wm__region_map(wm_model *m, uint32_t shard, uint64_t off, size_t len,
                         wm_os_map_kind kind, wm__region *r, wm_error *err) {
    const wm__shard *sh = &m->file->shards[shard];
    void *p;
    int e = wm__os_map(sh->fd, off, len, kind, &p);
    if (e)
        return wm__err(err, wm__status_from_errno(e) == WM_ENOMEM ? WM_ENOMEM : WM_EIO, e,
                       "%s: mapping %zu bytes at offset %llu: %s", sh->path, len,
                       (unsigned long long)off, wm__errno_text(e));
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

/* ---- the parallel reader ---- */

typedef struct run_ctx {
    wm_model *m;
    const wm__job *jobs;
    size_t n;
    size_t scratch_each; /* 0 when no job converts */
    bool populate;       /* CPU heap: prefault each job's destination (MADV_POPULATE_WRITE) */
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

/* Reads [off, off + len) of the job's shard into buf; false (and the failure recorded) on an
 * error or a file shorter than its header says. */
static bool read_part(run_ctx *c, const wm__job *j, unsigned char *buf, uint64_t off, size_t len) {
    const wm__shard *sh = &c->m->file->shards[j->shard];
    wm_error e;
    size_t got;
    int errn = wm__os_pread(sh->fd, buf, len, off, &got);
    if (errn) {
        wm__err(&e, wm__status_from_errno(errn) == WM_ENOMEM ? WM_ENOMEM : WM_EIO, errn,
                "%s: reading %zu bytes at offset %llu: %s", sh->path, len,
                (unsigned long long)off, wm__errno_text(errn));
        fail_run(c, &e);
        return false;
    }
    if (got != len) {
        wm__err(&e, WM_EFORMAT, 0,
                "%s: tensor '%s' at offset %llu: the file ends %zu bytes early (it is shorter than "
                "its header says)",
                sh->path, c->m->file->names + c->m->file->tensors[j->tensor].name_off,
                (unsigned long long)off, len - got);
        fail_run(c, &e);
        return false;
    }
    return true;
}

/* A converting job: WM_CONVERT_STEP source bytes at a time (whole blocks), read into the
 * scratch and converted into the destination while they are still in the cache. */
static bool convert_job(run_ctx *c, const wm__job *j, unsigned char *scratch) {
    size_t bb = wm_type_block_bytes(j->from), step = WM_CONVERT_STEP / bb * bb;
    uint64_t be = wm_type_block_elems(j->from);
    size_t out_bb = wm_type_block_bytes(j->to), out_be = wm_type_block_elems(j->to);
    if (step == 0) step = bb;
    for (size_t k = 0; k < j->len; k += step) {
        size_t n = j->len - k < step ? j->len - k : step;
        if (!read_part(c, j, scratch, j->file_off + k, n)) return false;
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

static bool do_job(run_ctx *c, const wm__job *j, unsigned char *scratch) {
    if (j->from != j->to) {
        if (!convert_job(c, j, scratch)) return false;
    } else {
        if (c->populate && c->m->chunks[c->m->place[j->tensor].chunk].size < WM_POPULATE_BELOW) {
            /* Heap pages are fresh: in a chunk too small for huge pages, faulting the job's 4 KiB
             * pages in with one call before the read costs less than one fault per page inside
             * the copy (about 1.5x, bench/RESULTS.md "load"); with huge pages it gains nothing
             * and the zeroed lines leave the cache before the copy. A hint: on failure the copy
             * faults. */
            uintptr_t page = wm__os_page_size(), lo = (uintptr_t)j->dst / page * page;
            uintptr_t hi = ((uintptr_t)j->dst + j->len + page - 1) / page * page;
            wm__os_advise((void *)lo, (size_t)(hi - lo), WM_OS_ADV_POPULATE_WRITE);
        }
        if (!read_part(c, j, j->dst, j->file_off, j->len)) return false;
    }
    atomic_fetch_add(&c->done, j->len);
    return true;
}

/* One worker's loop; the loading thread (main) also reports progress and checks cancel. */
static void work(run_ctx *c, bool main) {
    unsigned char *scratch = NULL;
    if (c->scratch_each) {
        void *p;
        int e = wm__scratch_alloc(c->scratch_each, &p);
        if (e) {
            wm_error err;
            wm__err(&err, WM_ENOMEM, e, "%s: allocating %zu bytes of staging: %s",
                    c->m->file->path, c->scratch_each, wm__errno_text(e));
            fail_run(c, &err);
            return;
        }
        scratch = p;
    }
    while (!atomic_load(&c->failed)) {
        size_t i = atomic_fetch_add(&c->next, 1);
        if (i >= c->n) break;
        if (!do_job(c, &c->jobs[i], scratch)) break;
        if (main && wm__progress(c->m, atomic_load(&c->done), c->total)) {
            wm_error err;
            wm__err(&err, WM_ECANCELED, 0, "%s: load canceled by the progress callback",
                    c->m->file->path);
            fail_run(c, &err);
        }
    }
    wm__scratch_free(scratch, c->scratch_each);
}

static void work_scope(void *arg) { work(arg, false); }
static void *worker(void *arg) {
    wm__os_task_scope(work_scope, arg);
    return NULL;
}

wm_status wm__run_jobs(wm_model *m, const wm__job *jobs, size_t n, wm_error *err) {
    if (n == 0) return WM_OK;
    run_ctx c = {.m = m, .jobs = jobs, .n = n,
                 .populate = m->opts.backend == WM_BACKEND_CPU && m->opts.mode == WM_MODE_HEAP};
    atomic_init(&c.next, 0);
    atomic_init(&c.done, 0);
    atomic_init(&c.failed, 0);
    size_t biggest_convert = 0;
    for (size_t i = 0; i < n; i++) {
        c.total += jobs[i].len;
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
    wm_os_thread th[MAX_THREADS];
    unsigned started = 0;
    for (unsigned t = 1; t < threads; t++) {
        int e = wm__os_thread_start(&th[started], worker, &c);
        if (e) {
            wm_error ferr;
            wm__err(&ferr, WM_ENOMEM, e, "%s: cannot start worker thread %u: %s", m->file->path,
                    t, wm__errno_text(e));
            fail_run(&c, &ferr);
            break;
        }
        wm__ledger_acquire(WM_LEDGER_SCRATCH, th[started].stack_len);
        started++;
    }
    work(&c, true);
    for (unsigned t = 0; t < started; t++) {
        size_t len = th[t].stack_len;
        wm__os_thread_join(&th[t]);
        wm__ledger_release(WM_LEDGER_SCRATCH, len);
    }
    if (atomic_load(&c.failed)) {
        if (err) *err = c.first;
        return c.first.code;
    }
    return WM_OK;
}

wm_status wm__chunk_jobs(wm_model *m, uint32_t ci, unsigned char *base, wm__job **jobs,
                         size_t *n, size_t *cap, wm_error *err) {
    const wm__chunk *c = &m->chunks[ci];
    for (uint32_t k = c->first; k < c->first + c->count; k++) {
        uint32_t i = m->order[k];
        const wm__tensor *t = &m->file->tensors[i];
        const wm__place *p = &m->place[i];
        size_t piece = WM_JOB_BYTES;
        size_t out_per_in_num = 1, out_per_in_den = 1;
        if (p->convert) {
            size_t bb = wm_type_block_bytes((wm_type)t->type);
            piece = WM_JOB_BYTES / bb * bb;
            if (piece == 0) piece = bb;
            out_per_in_num = (size_t)wm_type_block_elems((wm_type)t->type) * wm_type_block_bytes(p->type);
            out_per_in_den = bb * wm_type_block_elems(p->type);
        }
        for (uint64_t off = 0; off < t->nbytes; off += piece) {
            if (*n == *cap) {
                size_t nc = *cap ? *cap * 2 : 64;
                wm__job *nj = wm__realloc(*jobs, nc * sizeof *nj);
                if (!nj) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory for read jobs", m->file->path);
                *jobs = nj;
                *cap = nc;
            }
            size_t len = t->nbytes - off < piece ? (size_t)(t->nbytes - off) : piece;
            (*jobs)[(*n)++] = (wm__job){
                .shard = t->shard,
                .file_off = t->offset + off,
                .len = len,
                .dst = base + p->dst_off + (size_t)(off / out_per_in_den * out_per_in_num),
                .from = (wm_type)t->type,
                .to = p->type,
                .tensor = i,
            };
        }
    }
    return WM_OK;
}

/* ---- load and release ---- */

static void model_free(wm_model *m) {
    if (!m) return;
    if (m->backend) m->backend->release(m);
    wm__free(m->order);
    wm__free(m->place);
    wm__free(m->chunks);
    wm__free(m);
}

void wm_model_release(wm_model *m) { model_free(m); }

wm_status wm_model_load(wm_file *file, const wm_load_options *opts, wm_model **out,
                        wm_error *err) {
    if (out) *out = NULL;
    if (!file || !opts || !out)
        return wm__err(err, WM_EINVAL, 0, "wm_model_load: NULL file, options or out");
    wm_status st = check_options(file, opts, err);
    if (st) return st;
    const wm__backend *be = NULL;
    if (opts->backend == WM_BACKEND_CPU) {
        be = &wm__backend_cpu;
    } else if (opts->backend == WM_BACKEND_CUDA) {
#ifdef WM_HAVE_CUDA
        be = &wm__backend_cuda;
#else
        return wm__err(err, WM_EUNSUPPORTED, 0, "%s: this build has no CUDA backend",
                       file->path);
#endif
    } else {
        return wm__err(err, WM_EINVAL, 0, "%s: unknown backend %d", file->path,
                       (int)opts->backend);
    }
    double t0 = wm__os_now();
    wm_model *m = wm__calloc(1, sizeof *m);
    if (!m) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory", file->path);
    m->file = file;
    m->opts = *opts;
    m->opts.convert = NULL;
    m->opts.n_convert = 0;

    /* A file that changed size since it was opened cannot be trusted (a mapping past its end
     * would fault later). */
    for (uint32_t s = 0; s < file->n_shards; s++) {
        wm_os_stat now;
        int e = wm__os_stat(file->shards[s].fd, &now);
        if (e) {
            st = wm__err(err, wm__status_from_errno(e) == WM_ENOMEM ? WM_ENOMEM : WM_EIO, e,
                         "%s: cannot stat: %s", file->shards[s].path, wm__errno_text(e));
            goto fail;
        }
        if (now.size != file->shards[s].st.size) {
            st = wm__err(err, WM_EFORMAT, 0,
                         "%s: the file changed size since it was opened (%llu bytes, now %llu)",
                         file->shards[s].path, (unsigned long long)file->shards[s].st.size,
                         (unsigned long long)now.size);
            goto fail;
        }
    }
    st = build_plan(m, opts, err);
    if (st) goto fail;
    m->backend = be;
    st = be->load(m, err);
    if (st) goto fail;
    m->stats.load_seconds = wm__os_now() - t0;
    *out = m;
    return WM_OK;
fail:
    model_free(m);
    return st;
}

/* ---- getters ---- */

const wm_file *wm_model_file(const wm_model *m) { return m ? m->file : NULL; }
wm_mode wm_model_mode(const wm_model *m) { return m ? m->opts.mode : WM_MODE_NONE; }

wm_status wm_model_tensor_info(const wm_model *m, size_t index, wm_type *type, uint64_t *nbytes) {
    if (!m) return WM_EINVAL;
    if (index >= m->file->n_tensors) return WM_ERANGE;
    if (type) *type = m->place[index].type;
    if (nbytes) *nbytes = m->place[index].nbytes;
    return WM_OK;
}

const void *wm_model_tensor_data(const wm_model *m, size_t index) {
    if (!m || index >= m->file->n_tensors) return NULL;
    return m->backend->host_ptr(m, index);
}

void *wm_model_tensor_data_mut(wm_model *m, size_t index) {
    if (!m || m->opts.mode == WM_MODE_MMAP || index >= m->file->n_tensors) return NULL;
    return m->backend->host_ptr(m, index);
}

uint64_t wm_model_tensor_device_ptr(const wm_model *m, size_t index) {
    if (!m || index >= m->file->n_tensors) return 0;
    return m->backend->device_ptr(m, index);
}

void wm_model_stats_get(const wm_model *m, wm_model_stats *out) {
    if (!m || !out) return;
    *out = m->stats;
}
