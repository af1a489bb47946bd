/*
 * cost.c: what a load will cost, from its plan (wm_model_cost in model.c builds the plan as
 * wm_model_load does, then asks the backend's cost slot). Each figure is what the load's own
 * code acquires, category by category of the ledger, computed from the same plan and the same
 * sizing rules: the chunks' memory, the plan's tables, the reader's threads (stacks), their
 * direct-I/O staging and conversion buffers, and for a device backend the staging ring and the
 * device buffers (staged_load.c, wm__staged_cost).
 *
 * Sections: adding up; the host backend (CPU); the kinds.
 *
 * Why upper bounds and not exact figures: some staging is made only when a read needs it (a
 * direct read of a cold range into a destination that does not mirror the file takes a 2 MiB
 * staging per thread; a warm file takes none), and the job table grows by doubling. The cost
 * counts each such buffer as if it were made, so the prediction is never below what the ledger
 * sees; docs/ARCHITECTURE.md ("Budgets") states by how much it can be above.
 */
#include "host.h"
#include "jobs.h"

/* ---- adding up ---- */

/* What the counted allocator charges for a block of n bytes (ledger.c: its size header). */
uint64_t wm__cost_block(uint64_t n) { return n + WM_ALLOC_HEADER; }

void wm__cost_add(wm_cost *c, wm_ledger_category cat, uint64_t peak, uint64_t loaded) {
    c->ledger_peak[cat] += peak;
    c->ledger_loaded[cat] += loaded;
}

/* The plan's own tables, held by every load from the plan to the release: the model, order,
 * place and chunks, and the sort keys the plan makes and frees while they are held. */
void wm__cost_plan_tables(const wm_model *m, wm_cost *c) {
    uint64_t n = m->file->n_tensors;
    uint64_t held = wm__cost_block(sizeof(wm_model));
    if (n)
        held += wm__cost_block(n * sizeof *m->order) + wm__cost_block(n * sizeof *m->place) +
                wm__cost_block(n * sizeof *m->chunks);
    /* sort keys: {uint32 left_out, uint32 shard, uint64 offset, uint32 index}, 24 bytes */
    uint64_t keys = n ? wm__cost_block(n * 24) : 0;
    wm__cost_add(c, WM_LEDGER_HEAP, held + keys, held);
}

/* The load's reader (reader.c, wm__reader_init): a page-rounded table of the shards' direct
 * descriptors, for the load only, where the policy reads anything directly. */
void wm__cost_reader(const wm_model *m, wm_direct_io io, wm_cost *c) {
    if (io == WM_DIRECT_OFF || !wm__os_caps()->direct_io || !m->file->n_shards) return;
    uint64_t table = wm__align_up(m->file->n_shards * sizeof(int), wm__os_page_size());
    wm__cost_add(c, WM_LEDGER_SCRATCH, table, 0);
}

/* ---- the host backend (CPU) ---- */

/* The jobs wm__chunk_jobs makes for one tensor (host.c, tensor_jobs), and the biggest source
 * run a converting job reads. */
static uint64_t tensor_jobs(const wm__tensor *t, const wm__place *p, uint64_t *convert_len) {
    if (p->rows > 1) {
        uint64_t per = WM_JOB_BYTES / p->seg_bytes ? WM_JOB_BYTES / p->seg_bytes : 1;
        return (p->rows + per - 1) / per;
    }
    uint64_t piece = WM_JOB_BYTES;
    if (p->convert) {
        uint64_t bb = wm_type_block_bytes((wm_type)t->type);
        piece = WM_JOB_BYTES / bb * bb;
        if (piece == 0) piece = bb;
        uint64_t first = p->seg_bytes < piece ? p->seg_bytes : piece;
        if (first > *convert_len) *convert_len = first;
    }
    return (p->seg_bytes + piece - 1) / piece;
}

/* Heap mode's reader (host.c, run_jobs): the job table (grown by doubling from 64, old and new
 * held at once while it moves), worker stacks, and per thread the conversion scratch and the
 * direct-I/O staging with its edge blocks. */
static void heap_reader(const wm_model *m, wm_direct_io io, wm_cost *c) {
    const wm_file *f = m->file;
    uint64_t jobs = 0, convert_len = 0;
    for (uint32_t k = 0; k < m->n_placed; k++) {
        uint32_t i = m->order[k];
        jobs += tensor_jobs(&f->tensors[i], &m->place[i], &convert_len);
    }
    uint64_t cap = 0, table = 0;
    while (cap < jobs) {
        uint64_t next = cap ? cap * 2 : 64;
        uint64_t moving = wm__cost_block(next * sizeof(wm__job)) +
                          (cap ? wm__cost_block(cap * sizeof(wm__job)) : 0);
        if (moving > table) table = moving;
        cap = next;
    }
    wm__cost_add(c, WM_LEDGER_HEAP, table, 0);
    if (jobs == 0) return;
    unsigned threads = wm__load_threads(m);
    if (threads > jobs) threads = (unsigned)jobs;
    c->threads = threads;
    uint64_t page = wm__os_page_size(), scratch = (uint64_t)(threads - 1) * WM_OS_THREAD_STACK;
    if (convert_len) {
        if (convert_len > WM_CONVERT_STEP) convert_len = WM_CONVERT_STEP;
        scratch += threads * wm__align_up(convert_len, page);
    }
    if (io != WM_DIRECT_OFF && wm__os_caps()->direct_io)
        scratch += threads * (WM__STAGE_BYTES + 2 * (uint64_t)WM_OS_DIRECT_ALIGN);
    wm__cost_add(c, WM_LEDGER_SCRATCH, scratch, 0);
}

void wm__cost_host(const wm_model *m, wm_direct_io io, wm_cost *c) {
    bool heap = m->opts.mode == WM_MODE_HEAP;
    wm_ledger_category cat = heap                           ? WM_LEDGER_HEAP
                             : m->opts.mode == WM_MODE_MMAP ? WM_LEDGER_MAP_SHARED
                                                            : WM_LEDGER_MAP_PRIVATE;
    uint64_t bytes = 0;
    for (uint32_t k = 0; k < m->n_chunks; k++)
        bytes += m->chunks[k].size;
    wm__cost_add(c, cat, bytes, bytes);
    if (m->opts.lock != WM_LOCK_OFF) wm__cost_add(c, WM_LEDGER_LOCKED, bytes, bytes);
    /* cpu.c's state: the backend's struct and one region per chunk */
    uint64_t state = wm__cost_block(2 * sizeof(void *)) +
                     (m->n_chunks ? wm__cost_block(m->n_chunks * sizeof(wm__region)) : 0);
    wm__cost_add(c, WM_LEDGER_HEAP, state, state);
    c->threads = 1;
    if (heap) heap_reader(m, io, c);
}

/* ---- the kinds ---- */

void wm__cost_finish(const wm_model *m, wm_cost *c) {
    const uint64_t *p = c->ledger_peak, *l = c->ledger_loaded;
    c->peak = (wm_cost_bytes){.anonymous = p[WM_LEDGER_HEAP] + p[WM_LEDGER_SCRATCH],
                              .file_shared = p[WM_LEDGER_MAP_SHARED],
                              .file_private = p[WM_LEDGER_MAP_PRIVATE],
                              .locked = p[WM_LEDGER_LOCKED],
                              .pinned = p[WM_LEDGER_PINNED],
                              .device = p[WM_LEDGER_DEVICE]};
    c->loaded = (wm_cost_bytes){.anonymous = l[WM_LEDGER_HEAP] + l[WM_LEDGER_SCRATCH],
                                .file_shared = l[WM_LEDGER_MAP_SHARED],
                                .file_private = l[WM_LEDGER_MAP_PRIVATE],
                                .locked = l[WM_LEDGER_LOCKED],
                                .pinned = l[WM_LEDGER_PINNED],
                                .device = l[WM_LEDGER_DEVICE]};
    c->host_peak = c->peak.anonymous + c->peak.file_shared + c->peak.file_private;
    c->host_loaded = c->loaded.anonymous + c->loaded.file_shared + c->loaded.file_private;
    /* A locked shared mapping's pages cannot be dropped: they need room like private memory. */
    uint64_t locked_shared = m->opts.mode == WM_MODE_MMAP ? c->peak.locked : 0;
    c->host_needed = c->peak.anonymous + c->peak.file_private + locked_shared;
}
