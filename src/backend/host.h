/*
 * host.h: the host memory every backend loads into (host.c): counted regions (file mappings and
 * anonymous pages) and locking them. Reading into them is the reading engine's (jobs.h).
 *
 * Rule: each region is counted in the ledger exactly once, from acquisition to wm__region_free.
 */
#ifndef WM_HOST_H
#define WM_HOST_H

#include "backend.h"

/* One acquisition of host memory: a file mapping or anonymous pages. */
typedef struct wm__region {
    void *base;
    size_t len;
    wm_ledger_category cat; /* HEAP (pages), MAP_SHARED, MAP_PRIVATE, SCRATCH */
    size_t locked;          /* bytes of [base, base+locked) under mlock */
} wm__region;

/* ---- regions ---- */

/* Maps [off, off+len) of a shard (off page-aligned) and counts it; r is filled on success. */
wm_status wm__region_map(wm_model *m, uint32_t shard, uint64_t off, size_t len, wm_os_map_kind kind,
                         wm__region *r, wm_error *err);
/* Anonymous pages of len bytes, counted under `cat` (HEAP for tensor memory). */
wm_status wm__region_pages(wm_model *m, size_t len, wm_ledger_category cat, wm__region *r,
                           wm_error *err);
/* Unlocks, unmaps or frees, and uncounts. Accepts an empty region; leaves it empty. */
void wm__region_free(wm__region *r);
/* Locks the region per m->opts.lock (required: all or WM_EPERM with an RLIMIT_MEMLOCK hint;
 * best-effort: as much as the kernel allows, in 16 MiB steps). Counts LOCKED bytes. */
wm_status wm__region_lock(wm_model *m, wm__region *r, wm_error *err);

#endif /* WM_HOST_H */
