/*
 * host.h: the host-side tools every backend loads with (host.c): counted regions of host memory
 * (file mappings and anonymous pages), locking them, and the parallel reader that preads (and
 * converts) file ranges straight into place, with progress and cancel.
 *
 * Rules: each region is counted in the ledger exactly once, from acquisition to wm__region_free;
 * the reader's worker threads exist only during wm__run_jobs, and every byte of staging it
 * allocates is freed before it returns.
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

/* ---- descriptors of a reading thread ---- */

/* Each reading thread's own descriptors of the shards. Threads that pread many small runs (the
 * rows of last-dimension slices, a few KiB each) through one descriptor all take and drop
 * references on one open file, and that shared count caps them: 2176-byte runs on 16 threads
 * went from 11.7 to 25.2 GB/s with a descriptor each (bench/RESULTS.md, multigpu). Used by the
 * reading threads of a load for which wm__fds_wanted holds; opened by the thread that reads,
 * closed by it before it ends. Opening never fails: a shard that cannot be reopened (or no
 * memory for the table) is read through its own descriptor. */
typedef struct wm__fds {
    int *fd; /* one per shard, -1 where the shard's own serves; NULL: all shards' own */
    uint32_t n;
} wm__fds;

/* Whether the load reads rows (a tensor's place has rows > 1: last-dimension slices). */
bool wm__fds_wanted(const wm_model *m);
void wm__fds_open(const wm_file *f, wm__fds *out);
/* The descriptor to read shard `shard` through; fds NULL: the shard's own. */
int wm__fds_get(const wm__fds *fds, const wm_file *f, uint32_t shard);
/* Closes what wm__fds_open opened; accepts an empty table; leaves it empty. */
void wm__fds_close(wm__fds *fds);

/* ---- reading ---- */

/* Every read goes through the load's reader (m->rd, src/reader.h: buffered or direct per range,
 * counted by route), from the threads below. */

/* Reading threads that run fn(arg) inside the OS task scope, their stacks counted as scratch
 * while they live. The caller owns the crew (th: room for the threads) until wm__crew_join. */
typedef struct wm__crew {
    void (*fn)(void *);
    void *arg;
    wm_os_thread *th;
    unsigned started;
} wm__crew;
/* Starts n threads (crew->started counts them); a thread that cannot start is WM_ENOMEM and no
 * more are started. */
wm_status wm__crew_start(wm_model *m, wm__crew *crew, unsigned n, wm_error *err);
/* Joins and uncounts every started thread; leaves started 0. */
void wm__crew_join(wm__crew *crew);

/* ---- the parallel reader ---- */

/* A piece of work for the parallel reader: read len bytes of a shard at file_off into dst,
 * converting from `from` to `to` when they differ (len then covers whole blocks of `from`);
 * `rows` times (a slice's rows), the r-th from file_off + r * src_stride to dst + r * len (rows
 * of a slice are never converted). */
typedef struct wm__job {
    uint32_t shard;
    uint64_t file_off;
    size_t len;
    unsigned char *dst; /* NULL: the bytes go through a window to the sink (wm__read_items) */
    wm_type from, to;
    uint32_t tensor;
    uint64_t rows;
    uint64_t src_stride;
    const wm_read_item *item; /* wm__read_items: the caller's item, and where the job's bytes */
    uint64_t item_off;        /* start in its tensor */
    struct wm__whole *whole;  /* a piece of a WM_READ_WHOLE item (host.c), or NULL */
} wm__job;

/* Source bytes a converting job reads and converts at a time, through page-allocated scratch of
 * that size per worker (so the bytes are still in the core's cache when converted). */
#define WM_CONVERT_STEP ((size_t)256 << 10)
/* The largest job: a tensor is read in pieces of at most this many bytes. */
#define WM_JOB_BYTES ((size_t)8 << 20)

/* wm__run_jobs flags. FRESH_PAGES: the destinations are fresh anonymous pages (CPU heap), so a
 * job in a chunk too small for huge pages prefaults its destination in one call first. */
#define WM__JOBS_FRESH_PAGES 1u

/* Runs jobs on wm__load_threads(m) threads (the calling thread works too and reports progress).
 * The first error wins and stops the rest; a cancel from the progress callback gives
 * WM_ECANCELED. Worker threads exist only during this call; their stacks are counted as
 * scratch while they live. Where jobs read rows (slices), each worker reads through
 * descriptors of its own (wm__fds) and the calling thread through the shards'. */
wm_status wm__run_jobs(wm_model *m, const wm__job *jobs, size_t n, unsigned flags, wm_error *err);
/* wm_file_read_tensors (include/weightmap.h) on the same engine: the items' tensors read
 * straight into their destinations, or through page-allocated windows to o->sink, by the
 * reading threads of wm__run_jobs; `o` is the library's full-size copy, checked. */
wm_status wm__read_items(wm_file *f, const wm_read_item *items, size_t n, const wm_read_options *o,
                         wm_error *err);
/* Builds the jobs that fill chunk `c` of a packed (heap or device-staged) layout into host memory
 * at base; the jobs are appended to *jobs (a counted allocation of *cap entries, *n used, that
 * the caller frees). */
wm_status wm__chunk_jobs(wm_model *m, uint32_t c, unsigned char *base, wm__job **jobs, size_t *n,
                         size_t *cap, wm_error *err);
/* Calls the progress callback; true means the caller asked to cancel. */
bool wm__progress(wm_model *m, uint64_t done, uint64_t total);
/* Threads a load uses: opts.threads, or one per online CPU, at most WM__MAX_THREADS. */
#define WM__MAX_THREADS 64u
unsigned wm__load_threads(const wm_model *m);

#endif /* WM_HOST_H */
