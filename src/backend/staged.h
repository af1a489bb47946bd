/*
 * staged.h: the staged pipeline of every device backend (staged.c, staged_load.c), over a small
 * table of device operations that each device fills (cuda.c for CUDA).
 *
 * The pipeline gives every chunk of the plan (the packed layout) one device buffer and fills it
 * from the file through a ring of host slots: reader threads pread file windows into free slots
 * (the load's reader, src/read/reader.h: buffered or direct per range; the engine's descriptors
 * of their own and counted threads, src/read/engine.h); the loading
 * thread queues each window's copies to its tensors' devices, records an event per device after
 * them, and gives the slot back once the events have passed. Only the loading thread calls the
 * device operations. A device backend writes the table, not a pipeline: memory, host
 * registration, queues (streams), events, copies and how to say a failure.
 *
 * Rules for every operation: it runs on the loading thread; `d` is an index into the load's
 * devices (m->devs); a fallible one returns 0 or the device's own error code, and on failure
 * sets dv->call to the name of the device call that failed (for `fail`); the void ones are
 * releases: they cannot fail and accept what their maker made. Handles (streams, events) are
 * the device's own pointers.
 */
#ifndef WM_STAGED_H
#define WM_STAGED_H

#include "backend.h"

/* Limits of the pipeline (the rehearsal in cuda.c makes as many events). */
#define WM__STAGED_MAX_WORKERS 64u
#define WM__STAGED_MAX_SLOTS 8u
#define WM__STAGED_MAX_STREAMS 4u /* queues per device */

/* host_register flags */
#define WM__HOST_READ_ONLY 1u /* the device only reads it (a file's shared mapping) */
#define WM__HOST_PORTABLE 2u  /* every device of the load copies from it */

typedef struct wm__dev wm__dev;

typedef struct wm__dev_ops {
    /* Device memory of len bytes on device d; free gives it back. */
    int (*alloc)(wm__dev *dv, unsigned d, size_t len, void **out);
    void (*free)(wm__dev *dv, unsigned d, void *p);
    /* Makes host memory a source the devices copy from (pins it); unregister undoes it. */
    int (*host_register)(wm__dev *dv, void *p, size_t len, unsigned flags);
    void (*host_unregister)(wm__dev *dv, void *p);
    /* A queue of device d; wait: until what it holds has run; free: gives it back. */
    int (*stream_make)(wm__dev *dv, unsigned d, void **out);
    void (*stream_wait)(wm__dev *dv, unsigned d, void *stream);
    void (*stream_free)(wm__dev *dv, unsigned d, void *stream);
    /* An event of device d. */
    int (*event_make)(wm__dev *dv, unsigned d, void **out);
    void (*event_free)(wm__dev *dv, unsigned d, void *ev);
    /* Queues a host-to-device copy of len bytes; copy_2d: `rows` rows of `width` bytes,
     * spitch apart in the source and dpitch in the destination. */
    int (*copy)(wm__dev *dv, unsigned d, void *stream, void *dst, const void *src, size_t len);
    int (*copy_2d)(wm__dev *dv, unsigned d, void *stream, void *dst, size_t dpitch, const void *src,
                   size_t spitch, size_t width, size_t rows);
    /* Queues a device-to-host copy of len bytes from device d's memory into host memory
     * registered with host_register (a sleeping model's weights). */
    int (*copy_back)(wm__dev *dv, unsigned d, void *stream, void *dst, const void *src, size_t len);
    /* Records ev after what the stream holds; query: whether it has passed (*done, without
     * waiting); wait: until it has. */
    int (*event_record)(wm__dev *dv, unsigned d, void *ev, void *stream);
    int (*event_query)(wm__dev *dv, unsigned d, void *ev, bool *done);
    int (*event_wait)(wm__dev *dv, unsigned d, void *ev);
    /* After the pipeline has given everything back: forget cached state (the current device)
     * and any error the device still reports. */
    void (*settle)(wm__dev *dv);
    /* Fills err for a failed operation: "PREFIX: call: what the device says". */
    wm_status (*fail)(wm__dev *dv, int code, const char *prefix, wm_error *err);
} wm__dev_ops;

/* One load's devices: the table and what the operations keep between calls. */
struct wm__dev {
    const wm__dev_ops *ops;
    const wm_model *m;
    int cur;          /* the operations' own: the device index current now, or -1 */
    const char *call; /* the device call that failed last */
};

/* The pipeline's options, from the device backend's own (for CUDA: wm_cuda_options). */
typedef struct wm__staged_opts {
    bool registered;        /* mode mmap: copy from registered windows of the file's mapping */
    uint64_t pinned_budget; /* host bytes pinned at once (0: 256 MiB) */
} wm__staged_opts;

/* Gives every chunk a device buffer (counted per device in the ledger) and fills it. The state
 * lives in m->bctx; on failure the caller runs wm__staged_release. */
wm_status wm__staged_load(wm_model *m, wm__dev *dv, const wm__staged_opts *o, wm_error *err);
/* Frees every buffer made so far and the state; accepts a half-loaded model; cannot fail. */
void wm__staged_release(wm_model *m, wm__dev *dv);
/* What wm__staged_load would acquire for the plan in m, added into c (cost.c's categories).
 * Acquires nothing; WM_EINVAL for a pinned budget the load would refuse. */
wm_status wm__staged_cost(const wm_model *m, const wm__staged_opts *o, wm_cost *c, wm_error *err);
/* Sleep: the model's device buffers copied into one host copy (one page allocation of them all,
 * huge pages advised, faulted in by the load's threads; ledger: heap, never pinned) through a
 * bounce ring: a few slots of WM__SWAP_PIECE (two per stream and device, no more than the
 * pieces; ledger: scratch, and pinned while registered: once per sleep or wake, on the loading
 * thread). The loading thread queues each piece's device-to-host copy into a free slot (the
 * devices' pieces in turn) over WM__SWAP_STREAMS streams per device and waits for its event; the
 * load's threads copy the slot into the host copy and give it back. Then the device buffers freed
 * (the devices' bytes back). Wake: every device buffer made first, then the reverse: the threads
 * fill free slots from the host copy, the loading thread queues each filled slot's copy to the
 * device and waits for its event before the slot is filled again; then the ring and the host copy
 * freed; the tensors' device pointers are new. Where no thread can start, the loading thread copies
 * the slots itself. The pinned_whole choice (wm__staged_tune_swap, to measure) instead registers
 * the host copy whole at the sleep and unregisters it after the wake's copies, and copies from it
 * directly. Each either completes or leaves the model as it was (awake, or asleep) with nothing
 * else held, and writes its parts' times into m->slept or m->woke (wm__swap_times: host_alloc,
 * the host copy's pages and the ring's; host_register and host_unregister, the ring's, or the
 * host copy's with pinned_whole; host_free, the ring's pages and at a wake the host copy's).
 * Only a loaded model; wm__staged_release frees a sleeping one's host copy. */
#define WM__SWAP_PIECE ((size_t)64 << 20)
#define WM__SWAP_STREAMS 2u
wm_status wm__staged_sleep(wm_model *m, wm__dev *dv, wm_error *err);
wm_status wm__staged_wake(wm_model *m, wm__dev *dv, wm_error *err);
/* Host bytes the next sleep (or, asleep, the next wake) of m holds beside the model's own while
 * it runs, at most: the bounce ring, its state and the threads' stacks (with pinned_whole, the
 * prefaulting threads' stacks alone). The pool counts them before it lets a model sleep or wake. */
uint64_t wm__staged_swap_extra(const wm_model *m);
/* The chunks' buffers (index = chunk; NULL for an empty chunk), or NULL before a load. */
unsigned char *const *wm__staged_buffers(const wm_model *m);
/* A tensor's device address, or 0. */
uint64_t wm__staged_device_ptr(const wm_model *m, size_t tensor);

/* The measuring knobs behind cuda_tune.h: window size (0: keep), slots per worker (0: keep),
 * WM__STAGED_SERIAL_RING, WM__STAGED_NO_REAP. Not thread-safe: between loads. */
#define WM__STAGED_SERIAL_RING 1u
#define WM__STAGED_NO_REAP 2u
void wm__staged_tune(size_t wsize, unsigned slots, unsigned flags);
/* A sleep's and a wake's copies: bytes a piece and a bounce slot (0: WM__SWAP_PIECE), streams
 * a device (0: WM__SWAP_STREAMS; at most WM__STAGED_MAX_STREAMS); with pinned_whole, no bounce
 * ring: the host copy registered whole, copied from directly, unregistered after the wake's
 * copies (as in 1.8); with no_huge, no huge-page advice on the host copy; with no_prefault,
 * no threads fault the host copy in first (at a sleep the workers' copies into it do, beside
 * the device's copies; with pinned_whole, its registration, on one thread). The
 * tests' small models copy in many pieces, some not a page long, and bench/gpu measures the choices
 * (cuda_tune.h). Not thread-safe: between sleeps. */
void wm__staged_tune_swap(size_t piece, unsigned streams, bool pinned_whole, bool no_huge,
                          bool no_prefault);
/* The base of the last staged ring (tests check that it is not registered after release). */
void *wm__staged_last_ring(void);
/* Test hook: where a sleep's or a wake's bounce ring has workers, the loading thread leaves every
 * grain to them (it only queues the copies and waits), so that a test can tell the workers copy. */
extern bool wm__staged_swap_loader_waits;

#endif /* WM_STAGED_H */
