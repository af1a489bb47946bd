/*
 * backend.h: the model object and the backend contract (CPU in cpu.c, CUDA in cuda.c).
 *
 * src/model.c builds a load plan: tensors ordered by (shard, offset), grouped into chunks of at
 * most max_buffer_size bytes (no tensor straddles two), each tensor placed at an offset inside
 * its chunk's buffer. A backend then gives every chunk memory and fills it (`load`), and gives it
 * all back (`release`). model.c supplies the shared tools a backend needs: host regions that are
 * counted in the ledger exactly once (file mappings, anonymous pages), locking, and a parallel
 * reader that preads (and converts) file ranges straight into place with progress and cancel.
 *
 * Rules: a backend's load either succeeds or leaves nothing behind (it runs its own release path
 * on failure); release accepts a half-loaded model and cannot fail; a buffer that aliases a
 * mapping owns the unmapping; release order is device views, registrations, locks, mappings and
 * pages (file descriptors belong to the wm_file).
 */
#ifndef WM_BACKEND_H
#define WM_BACKEND_H

#include "../internal.h"

#include <stdatomic.h>

/* One acquisition of host memory: a file mapping or anonymous pages. */
typedef struct wm__region {
    void *base;
    size_t len;
    wm_ledger_category cat; /* HEAP (pages), MAP_SHARED, MAP_PRIVATE, SCRATCH */
    size_t locked;          /* bytes of [base, base+locked) under mlock */
} wm__region;

/* A buffer's worth of tensors. */
typedef struct wm__chunk {
    uint32_t shard;
    uint64_t file_start; /* first byte of the file range (page-aligned for mapped modes) */
    uint64_t file_end;   /* one past the last tensor byte */
    size_t size;         /* bytes of the buffer: the file range (mapped) or the packed layout */
    uint32_t first;      /* tensors model->order[first .. first + count) */
    uint32_t count;
} wm__chunk;

/* Where one tensor lives once loaded. */
typedef struct wm__place {
    uint32_t chunk;
    size_t dst_off;   /* offset inside the chunk's buffer */
    wm_type type;     /* delivered type (after conversion) */
    uint64_t nbytes;  /* delivered bytes */
    bool convert;     /* delivered type differs from the file's */
} wm__place;

typedef struct wm__backend wm__backend;

struct wm_model {
    wm_file *file;
    wm_load_options opts; /* copy; convert rules are not kept */
    const wm__backend *backend;
    void *bctx; /* backend state */

    uint32_t *order; /* tensor indices by (shard, offset) */
    wm__place *place;
    wm__chunk *chunks;
    uint32_t n_chunks;

    wm__region *regions; /* CPU: one per chunk, index = chunk */
    uint32_t n_regions;  /* regions acquired so far (release frees [0, n_regions)) */

    wm_model_stats stats;
};

struct wm__backend {
    const char *name;
    /* Gives every chunk memory and fills it. On failure, everything it acquired is released. */
    wm_status (*load)(wm_model *m, wm_error *err);
    /* Releases everything load acquired (device views, registrations, locks, memory). Accepts a
     * half-loaded model; cannot fail. */
    void (*release)(wm_model *m);
    /* Host pointer of a tensor, or NULL. */
    void *(*host_ptr)(const wm_model *m, size_t tensor);
    /* Device pointer of a tensor, or 0. */
    uint64_t (*device_ptr)(const wm_model *m, size_t tensor);
};

extern const wm__backend wm__backend_cpu;
#ifdef WM_HAVE_CUDA
extern const wm__backend wm__backend_cuda;
#endif

/* ---- shared tools (model.c) ---- */

/* Maps [off, off+len) of a shard (off page-aligned) and counts it; r is filled on success. */
wm_status wm__region_map(wm_model *m, uint32_t shard, uint64_t off, size_t len,
                         wm_os_map_kind kind, wm__region *r, wm_error *err);
/* Anonymous pages of len bytes, counted under `cat` (HEAP for tensor memory). */
wm_status wm__region_pages(wm_model *m, size_t len, wm_ledger_category cat, wm__region *r,
                           wm_error *err);
/* Unlocks, unmaps or frees, and uncounts. Accepts an empty region; leaves it empty. */
void wm__region_free(wm__region *r);
/* Locks the region per m->opts.lock (required: all or WM_EPERM with an RLIMIT_MEMLOCK hint;
 * best-effort: as much as the kernel allows, in 16 MiB steps). Counts LOCKED bytes. */
wm_status wm__region_lock(wm_model *m, wm__region *r, wm_error *err);

/* A piece of work for the parallel reader: read len bytes of a shard at file_off into dst,
 * converting from `from` to `to` when they differ (len then covers whole blocks of `from`). */
typedef struct wm__job {
    uint32_t shard;
    uint64_t file_off;
    size_t len;
    unsigned char *dst;
    wm_type from, to;
    uint32_t tensor;
} wm__job;

/* Runs jobs on m->opts threads (the calling thread works too and reports progress). The first
 * error wins and stops the rest; a cancel from the progress callback gives WM_ECANCELED. Worker
 * threads exist only during this call. A converting job reads and converts WM_CONVERT_STEP
 * source bytes at a time through page-allocated scratch of that size per worker (so the bytes
 * are still in the core's cache when converted), freed before return. */
#define WM_CONVERT_STEP ((size_t)256 << 10)
#define WM_JOB_BYTES ((size_t)8 << 20)
wm_status wm__run_jobs(wm_model *m, const wm__job *jobs, size_t n, wm_error *err);
/* Builds the jobs that fill chunk `c` of a packed (heap or device-staged) layout into host memory
 * at base; *n_out jobs are appended to *jobs (a counted allocation the caller frees). */
wm_status wm__chunk_jobs(wm_model *m, uint32_t c, unsigned char *base, wm__job **jobs,
                         size_t *n, size_t *cap, wm_error *err);
/* Calls the progress callback; true means the caller asked to cancel. */
bool wm__progress(wm_model *m, uint64_t done, uint64_t total);
/* Threads a load uses: opts.threads, or one per online CPU, at most 64. */
unsigned wm__load_threads(const wm_model *m);

/* The CUDA pipeline's measuring knobs (bench/gpu.c; cuda.c says what they do): the staged
 * window size (0: keep), slots per worker (0: keep) and these flags. Not thread-safe: call it
 * between loads. A build without CUDA has no such function. */
#define WM__CUDA_SERIAL_RING 1u /* register the ring before the readers start */
#define WM__CUDA_NO_REAP 2u     /* retire slots only when there is nothing else to do */
void wm__cuda_tune(size_t wsize, unsigned slots, unsigned flags);
/* How much wm_backend_init rehearses a load's CUDA calls (rounds; events and copies a round;
 * bytes registered, 0: keep), for the next wm_backend_init; bench/gpu.c measures with it. */
void wm__cuda_rehearsal(unsigned rounds, unsigned events, unsigned copies, size_t bytes);

#endif /* WM_BACKEND_H */
