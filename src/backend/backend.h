/*
 * backend.h: the model object and the backend contract. A backend is one row of the table in
 * backends.c (CPU in cpu.c, CUDA in cuda.c); host.h has the host-side tools they share, staged.h
 * the staged pipeline a device backend loads through (it writes a table of device operations).
 *
 * src/model.c builds a load plan: tensors ordered by (shard, offset), grouped into chunks of at
 * most max_buffer_size bytes (no tensor straddles two), each tensor placed at an offset inside
 * its chunk's buffer. The chosen backend then checks the options (`check`, before anything is
 * acquired), gives every chunk memory and fills it (`load`), answers for each tensor's pointers,
 * and gives everything back (`release`).
 *
 * Rules: `check` acquires nothing; a backend's `load` either succeeds or leaves nothing behind
 * (it runs its own release on failure); `release` accepts a half-loaded model and cannot fail;
 * a buffer that aliases a mapping owns the unmapping; release order is device views,
 * registrations, locks, mappings and pages (file descriptors belong to the wm_file). Backend
 * state lives behind m->bctx; the plan (order, place, chunks) is shared and read-only to it.
 */
#ifndef WM_BACKEND_H
#define WM_BACKEND_H

#include "../internal.h"
#include "../read/reader.h"

#include <stdatomic.h>

/* A buffer's worth of tensors: one shard's, for one device. */
typedef struct wm__chunk {
    uint32_t shard;
    uint32_t device;     /* index into the load's devices (opts.devices; 0 with one device) */
    uint64_t file_start; /* first byte of the file range (page-aligned for mapped layouts) */
    uint64_t file_end;   /* one past the last tensor byte */
    size_t size;         /* bytes of the buffer: the file range (mapped) or the packed layout */
    uint32_t first;      /* tensors model->order[first .. first + count) */
    uint32_t count;
    /* The caller's device memory for the chunk's one tensor (wm_cuda_options.dst), or 0: the
     * backend makes the buffer. */
    uint64_t ext;
} wm__chunk;

/* Where one tensor lives once loaded, and which of its bytes are read. Its source is `rows`
 * segments of seg_bytes each: segment j starts at file offset
 * tensor.offset + src_off + j * src_stride and lands at dst_off + j * seg_bytes of its chunk's
 * buffer. A whole tensor is one segment of all its bytes; a slice under tensor parallelism is
 * one contiguous segment (WM_SPLIT_DIM0) or one per row (WM_SPLIT_LAST). A converted tensor is
 * one segment of source bytes whose delivered size is nbytes. */
#define WM__NOT_LOADED UINT32_MAX /* wm__place.chunk of a tensor the selection left out */

typedef struct wm__place {
    uint32_t chunk;  /* WM__NOT_LOADED: not selected, no bytes, no segment */
    uint32_t device; /* index into the load's devices */
    size_t dst_off;  /* offset inside the chunk's buffer */
    wm_type type;    /* delivered type (after conversion) */
    uint64_t nbytes; /* delivered bytes */
    bool convert;    /* delivered type differs from the file's */
    wm_split split;
    uint32_t n_dims;
    uint64_t ne[WM_MAX_DIMS]; /* delivered shape, ggml order */
    uint64_t src_off, rows, src_stride, seg_bytes;
    /* Read once across ranks (opts.nccl_comm): the segment is this rank's byte range of the
     * whole tensor, landing dst_lo bytes into it; the rest comes from the other ranks. */
    bool read_once;
    uint64_t dst_lo;
} wm__place;

typedef struct wm__backend wm__backend;

/* Where a backend's sleep or wake (wm__model_sleep, wm__model_wake) spent its time, in seconds,
 * part by part (staged_load.c fills them; the pool's stats report them). CUDA copies through a
 * bounce ring (staged.h): host_alloc, host_register, host_unregister and host_free are the
 * ring's at both (and the host copy's pages: made at a sleep, in host_alloc; freed at a wake,
 * in host_free); with the pinned_whole choice the registration is the host copy's, made at the
 * sleep and undone at the wake. A sleep fills host_alloc, host_register, copy, host_unregister,
 * host_free and device_free; a wake device_alloc and the same host parts and copy. */
typedef struct wm__swap_times {
    double host_alloc;      /* host pages mapped, advised (huge pages), faulted in */
    double host_register;   /* the ring (or the host copy) registered with the devices */
    double device_alloc;    /* the device buffers made */
    double copy;            /* the copies: pieces issued (and moved through the ring), until
                               the last has ended */
    double device_free;     /* the device buffers freed */
    double host_unregister; /* the ring (or the host copy) unregistered */
    double host_free;       /* host pages given back (the ring's; the host copy's at a wake) */
    double total;           /* the whole call */
    uint64_t bytes;         /* bytes copied */
    uint32_t pieces;        /* copies issued */
    uint32_t grains;        /* through a bounce ring: the grains copied between ring and host
                               copy, and of them by the workers (the rest by the loading thread) */
    uint32_t grains_by_workers;
} wm__swap_times;

struct wm_model {
    wm_file *file;
    wm_load_options opts;        /* copy, for the load only: convert rules, devices, select and
                                    the plan's callbacks (place_tensor, tp_split) are cleared;
                                    progress and progress_user stay (the readers report through
                                    them during the load); opts.cuda points to `cuda` */
    wm_cuda_options cuda;        /* the CUDA options, zero-extended: defaults when none given */
    int devs[WM_LEDGER_DEVICES]; /* the devices (opts.devices, or opts.device alone) */
    unsigned n_devs;
    const wm__backend *backend;
    void *bctx; /* the backend's state */

    uint32_t *order;   /* tensor indices by (shard, offset), the selected ones first */
    uint32_t n_placed; /* order[0 .. n_placed) are loaded; the rest the selection left out */
    wm__place *place;
    wm__chunk *chunks;
    uint32_t n_chunks;

    wm_model_stats stats;
    bool asleep;                /* the backend's sleep moved its device memory to host memory */
    wm__swap_times slept, woke; /* the last sleep's and the last wake's parts */
    wm__reader rd; /* the load's reader (read/reader.h): its policy, direct descriptors and
                      counts (stats.bytes_read, read_direct, read_buffered at the load's end) */
};

/* A loaded model of a backend that can sleep (its sleep slot): its device memory moved to
 * host memory (sleep) and back (wake), for the pool (pool.c). WM_EUNSUPPORTED where the
 * backend cannot; WM_EINVAL for a model already in that state. The model's tensors' device
 * pointers change at wake. Each completes or leaves the model as it was. */
bool wm__model_can_sleep(const wm_model *m);
bool wm__model_asleep(const wm_model *m);
wm_status wm__model_sleep(wm_model *m, wm_error *err);
wm_status wm__model_wake(wm_model *m, wm_error *err);
/* Host bytes the next sleep (asleep: the next wake) holds beside the model's own while it runs
 * (CUDA: the bounce ring, its state, the threads' stacks); 0 where the backend holds none. */
uint64_t wm__model_swap_extra(const wm_model *m);

/* Builds the plan (plan.c): order, place and chunks. On failure the caller frees what it holds
 * (model_free). */
wm_status wm__plan_build(wm_model *m, const wm_load_options *o, wm_error *err);
/* Read once: the bytes [lo, hi) of an nbytes tensor that rank `rank` of `ranks` reads (equal
 * parts, the last rank also the remainder). */
void wm__read_once_range(uint64_t nbytes, unsigned rank, unsigned ranks, uint64_t *lo,
                         uint64_t *hi);

struct wm__backend {
    wm_backend_kind kind;
    const char *name;
    /* NULL where the backend is built; else the error's words: "this build has no ... backend
     * (why)". */
    const char *absent;
    /* Mapped modes (mmap, mmap-private) hand the file's mappings out as the buffers: chunks are
     * page-aligned file ranges. Otherwise every mode gets the packed layout. */
    bool maps_file;
    /* Starts the runtime on `device` (wm_backend_init); NULL: nothing to start. */
    wm_status (*init)(int device, wm_error *err);
    /* The options this backend refuses, said with the file's path; acquires nothing. Runs
     * after the checks every backend shares (model.c) and before the plan. */
    wm_status (*check)(const wm_file *f, const wm_load_options *o, wm_error *err);
    /* Gives every chunk memory and fills it. On failure, everything it acquired is released. */
    wm_status (*load)(wm_model *m, wm_error *err);
    /* Releases everything load acquired (device views, registrations, locks, memory). Accepts a
     * half-loaded model; cannot fail. */
    void (*release)(wm_model *m);
    /* Host pointer of a tensor, or NULL. */
    void *(*host_ptr)(const wm_model *m, size_t tensor);
    /* Device pointer of a tensor, or 0. */
    uint64_t (*device_ptr)(const wm_model *m, size_t tensor);
    /* What load would acquire for the plan in m, added into c per ledger category (cost.c);
     * io is the reading policy the load would run. Acquires nothing. */
    wm_status (*cost)(const wm_model *m, wm_direct_io io, wm_cost *c, wm_error *err);
    /* Free and total memory of device `device` (wm_mem_available_get); NULL: no device. */
    wm_status (*mem_info)(int device, uint64_t *free_bytes, uint64_t *total, wm_error *err);
    /* A loaded model's device memory to host memory and back (wm__model_sleep); NULL:
     * the backend cannot sleep a model. Each completes or leaves the model as it was. */
    wm_status (*sleep)(wm_model *m, wm_error *err);
    wm_status (*wake)(wm_model *m, wm_error *err);
    /* Host bytes the next sleep (asleep: the next wake) holds beside the model's own while it
     * runs, at most; NULL: none. */
    uint64_t (*swap_extra)(const wm_model *m);
};

/* ---- costs (cost.c): what a load will acquire, per ledger category ---- */

/* What the counted allocator charges for a block of n bytes. */
uint64_t wm__cost_block(uint64_t n);
void wm__cost_add(wm_cost *c, wm_ledger_category cat, uint64_t peak, uint64_t loaded);
/* The plan's tables every load holds (the model, order, place, chunks; the plan's sort keys). */
void wm__cost_plan_tables(const wm_model *m, wm_cost *c);
/* The load's reader: its direct descriptors' table under policy io. */
void wm__cost_reader(const wm_model *m, wm_direct_io io, wm_cost *c);
/* The host backend's load (cpu.c): its chunks, state and heap-mode reader. */
void wm__cost_host(const wm_model *m, wm_direct_io io, wm_cost *c);
/* The kinds and totals of wm_cost from its ledger figures. */
void wm__cost_finish(const wm_model *m, wm_cost *c);

/* The rows of the table (backends.c). Every build defines both; a backend not built has only
 * kind, name and absent. */
extern const wm__backend wm__backend_cpu;
extern const wm__backend wm__backend_cuda;

/* The backend of `kind`, ready to use, or an error naming `who` (a path, or the API function):
 * WM_EINVAL for an unknown kind, WM_EUNSUPPORTED for one this build lacks. */
wm_status wm__backend_get(wm_backend_kind kind, const char *who, const wm__backend **out,
                          wm_error *err);

#endif /* WM_BACKEND_H */
