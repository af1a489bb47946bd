/*
 * jobs.c: a model's load as work for the reading engine (jobs.h): its run (file, reader, threads,
 * progress), the jobs that fill a packed chunk of its plan, and the questions about the plan
 * that the readers ask.
 */
#include "jobs.h"

#define POPULATE_BELOW ((size_t)2 << 20) /* chunks smaller than one huge page */

unsigned wm__load_threads(const wm_model *m) { return wm__read_threads(m->opts.threads); }

wm__read_run wm__model_run(wm_model *m) {
    return (wm__read_run){.file = m->file,
                          .rd = &m->rd,
                          .threads = wm__load_threads(m),
                          .progress = m->opts.progress,
                          .progress_user = m->opts.progress_user};
}

bool wm__progress(wm_model *m, uint64_t done, uint64_t total) {
    return m->opts.progress && m->opts.progress(m->opts.progress_user, done, total) != 0;
}

bool wm__fds_wanted(const wm_model *m) {
    for (size_t i = 0; i < m->file->n_tensors; i++)
        if (m->place[i].rows > 1) return true;
    return false;
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
static wm_status tensor_jobs(wm_model *m, uint32_t i, unsigned char *base, bool populate,
                             wm__job **jobs, size_t *n, size_t *cap, wm_error *err) {
    const wm__tensor *t = &m->file->tensors[i];
    const wm__place *p = &m->place[i];
    wm__job job = {.shard = t->shard,
                   .from = (wm_type)t->type,
                   .to = p->type,
                   .tensor = i,
                   .rows = 1,
                   .populate = populate};
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

wm_status wm__chunk_jobs(wm_model *m, uint32_t ci, unsigned char *base, unsigned flags,
                         wm__job **jobs, size_t *n, size_t *cap, wm_error *err) {
    const wm__chunk *c = &m->chunks[ci];
    /* Fresh pages in a chunk too small for huge pages: faulting a job's 4 KiB pages in with one
     * call before the read costs less than one fault per page inside the copy (about 1.5x,
     * bench/RESULTS.md "load"); with huge pages it gains nothing and the zeroed lines leave the
     * cache before the copy. */
    bool populate = (flags & WM__JOBS_FRESH_PAGES) && c->size < POPULATE_BELOW;
    for (uint32_t k = c->first; k < c->first + c->count; k++) {
        wm_status st = tensor_jobs(m, m->order[k], base, populate, jobs, n, cap, err);
        if (st) return st;
    }
    return WM_OK;
}
