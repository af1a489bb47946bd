/*
 * cpu.c: the CPU backend. Host memory per chunk: a file mapping (mmap, mmap-private) that the
 * buffer owns and unmaps, or anonymous pages filled by the parallel reader (heap).
 *
 * Sections: options; mapped modes; heap mode; load, release and pointers.
 */
#include "host.h"
#include "jobs.h"

#include <errno.h>

/* The backend's state: one region per chunk (index = chunk). */
typedef struct cpu_state {
    wm__region *regions;
    uint32_t n_regions; /* regions acquired so far (release frees [0, n_regions)) */
} cpu_state;

/* ---- options ---- */

static wm_status cpu_check(const wm_file *f, const wm_load_options *o, wm_error *err) {
    /* CUDA options (direct_io, nccl_comm) given with this backend were refused already. */
    if (o->n_devices > 1)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: several devices (n_devices %u) are for a device backend, not the CPU",
                       f->path, o->n_devices);
    return WM_OK;
}

/* ---- mapped modes ---- */

/* mmap and mmap-private: one mapping per chunk (one per file without a buffer limit). Prefetch
 * uses MADV_POPULATE_READ, which faults pages in without privatising any; kernels before 5.14
 * lack it (EINVAL) and get MADV_WILLNEED, a hint. */
static wm_status load_mapped(wm_model *m, cpu_state *cs, wm_error *err) {
    wm_os_map_kind kind = m->opts.mode == WM_MODE_MMAP ? WM_OS_MAP_SHARED_RO : WM_OS_MAP_PRIVATE_RW;
    uint64_t total = 0, done = 0;
    for (uint32_t c = 0; c < m->n_chunks; c++)
        total += m->chunks[c].size;
    for (uint32_t c = 0; c < m->n_chunks; c++) {
        const wm__chunk *ch = &m->chunks[c];
        if (ch->size == 0) {
            cs->n_regions++;
            continue;
        }
        wm__region *r = &cs->regions[c];
        wm_status st = wm__region_map(m, ch->shard, ch->file_start, ch->size, kind, r, err);
        if (st) return st;
        cs->n_regions++;
        m->stats.mapped_bytes += r->len;
        if (kind == WM_OS_MAP_PRIVATE_RW)
            m->stats.committed += r->len;
        else /* a hint (failure is harmless): a fault brings in a whole huge folio where the
              * filesystem's page cache holds large folios, and maps it with one entry */
            wm__os_advise(r->base, r->len, WM_OS_ADV_HUGEPAGE);
        if (m->opts.prefetch) {
            int e = wm__os_advise(r->base, r->len, WM_OS_ADV_POPULATE_READ);
            if (e == EINVAL) e = wm__os_advise(r->base, r->len, WM_OS_ADV_WILLNEED);
            if (e)
                return wm__err(err, wm__status_io(e), e,
                               "%s: prefetching %zu bytes at offset %llu: %s",
                               m->file->shards[ch->shard].path, r->len,
                               (unsigned long long)ch->file_start, wm__errno_text(e));
        }
        st = wm__region_lock(m, r, err);
        if (st) return st;
        done += ch->size;
        if (wm__progress(m, done, total))
            return wm__err(err, WM_ECANCELED, 0, "%s: load canceled by the progress callback",
                           m->file->path);
    }
    return WM_OK;
}

/* ---- heap mode ---- */

/* heap: page-allocated chunks (MADV_HUGEPAGE first: faults, not copies, bound this mode), then
 * every tensor pread straight into place by the parallel reader. */
static wm_status load_heap(wm_model *m, cpu_state *cs, wm_error *err) {
    wm__job *jobs = NULL;
    size_t n = 0, cap = 0;
    wm_status st = WM_OK;
    for (uint32_t c = 0; c < m->n_chunks; c++) {
        const wm__chunk *ch = &m->chunks[c];
        wm__region *r = &cs->regions[c];
        if (ch->size) {
            st = wm__region_pages(m, ch->size, WM_LEDGER_HEAP, r, err);
            if (st) goto done;
            m->stats.heap_bytes += r->len;
            wm__os_advise(r->base, r->len, WM_OS_ADV_HUGEPAGE); /* a hint: failure is harmless */
        }
        cs->n_regions++;
        st = wm__chunk_jobs(m, c, r->base, WM__JOBS_FRESH_PAGES, &jobs, &n, &cap, err);
        if (st) goto done;
    }
    wm__read_run run = wm__model_run(m);
    st = wm__run_jobs(&run, jobs, n, NULL, err);
    m->stats.threads = run.threads_used;
    if (st) goto done;
    for (uint32_t c = 0; c < m->n_chunks && !st; c++)
        st = wm__region_lock(m, &cs->regions[c], err);
done:
    wm__free(jobs);
    return st;
}

/* ---- load, release and pointers ---- */

static void cpu_release(wm_model *m) {
    cpu_state *cs = m->bctx;
    if (!cs) return;
    for (uint32_t c = 0; c < cs->n_regions; c++)
        wm__region_free(&cs->regions[c]);
    wm__free(cs->regions);
    wm__free(cs);
    m->bctx = NULL;
}

static wm_status cpu_load(wm_model *m, wm_error *err) {
    cpu_state *cs = wm__calloc(1, sizeof *cs);
    if (!cs) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory", m->file->path);
    m->bctx = cs;
    wm_status st = WM_OK;
    if (m->n_chunks) {
        cs->regions = wm__calloc(m->n_chunks, sizeof *cs->regions);
        if (!cs->regions) st = wm__err(err, WM_ENOMEM, 0, "%s: out of memory", m->file->path);
    }
    m->stats.threads = 1;
    if (!st) st = m->opts.mode == WM_MODE_HEAP ? load_heap(m, cs, err) : load_mapped(m, cs, err);
    if (st) cpu_release(m);
    return st;
}

static void *cpu_host_ptr(const wm_model *m, size_t t) {
    const cpu_state *cs = m->bctx;
    const wm__place *p = &m->place[t];
    if (!cs || p->chunk >= cs->n_regions || !cs->regions[p->chunk].base) return NULL;
    return (char *)cs->regions[p->chunk].base + p->dst_off;
}

static uint64_t cpu_device_ptr(const wm_model *m, size_t t) {
    (void)m;
    (void)t;
    return 0;
}

static wm_status cpu_cost(const wm_model *m, wm_direct_io io, wm_cost *c, wm_error *err) {
    (void)err;
    wm__cost_host(m, io, c);
    return WM_OK;
}

const wm__backend wm__backend_cpu = {
    .kind = WM_BACKEND_CPU,
    .name = "cpu",
    .maps_file = true,
    .check = cpu_check,
    .load = cpu_load,
    .release = cpu_release,
    .host_ptr = cpu_host_ptr,
    .device_ptr = cpu_device_ptr,
    .cost = cpu_cost,
};
