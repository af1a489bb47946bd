/*
 * llama_bridge.h: what the files of the llama.cpp bridge (include/weightmap_llama.h,
 * docs/LLAMA.md) share. Public API only, of weightmap (weightmap.h) and of llama.cpp v0.4.0 and
 * its ggml (llama.h, ggml.h, ggml-backend.h, gguf.h): the one file that needs ggml's internal
 * buffer layout is llama_own.c, and this header tells nothing of it.
 *
 *   llama.c        the load: options, the record of llama.cpp's tensors, the reads, the modes
 *   llama_meta.c   the file's metadata and tensor table as a gguf_context
 *   llama_place.c  where the weights go: the CPU's extra (repack) buffer types, the overrides
 *   llama_own.c    the bridge's own weight buffers (ggml's internal layout, version-checked)
 *   llama_early.c  the mapped modes' repacked tensors converted while llama.cpp makes the model
 *   llama_map.c    the load modes: AUTO resolved, the file's mapping, its populate, the locks
 *   llama_log.c    llama.cpp's log during the load: passed on, and its reason for a refusal kept
 *   llama_cuda.c   the tensors in CUDA buffers, filled by the library's staged pipeline
 *   llama_ahead.c  those tensors loaded to the device ahead, while llama.cpp makes the model
 *   llama_pool.c   llama models in a wm_pool: the cost of a load before it runs, get and put
 */
#ifndef WM_BRIDGE_LLAMA_BRIDGE_H
#define WM_BRIDGE_LLAMA_BRIDGE_H

#include "weightmap_llama.h"

#include "ggml_check.h"

#include <ggml-backend.h>
#include <gguf.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- fault points ----
 * The test build (WM_LLAMA_FAULTS, linked with the library's fault table) fails the bridge's own
 * allocations and llama.cpp's constructors as the library fails its calls (src/os/fault.h). */
#ifdef WM_LLAMA_FAULTS
#include "os/os.h"
#define FAULT(kind) (wm__fault_hit(WM_OS_##kind) != 0)
#define FAULT_ERRNO(kind) wm__fault_hit(WM_OS_##kind)
#else
#define FAULT(kind) 0
#define FAULT_ERRNO(kind) 0
#endif

#define GRID 4096u /* the direct-read grid (WM_OS_DIRECT_ALIGN) */

/* len bytes of fresh anonymous pages (len 0: one page), or NULL; freed by wm__llama_pages_free
 * with the same len (NULL accepted). The bridge's own memory comes from here, so that no
 * allocator cache keeps it after a load. */
void *wm__llama_pages(size_t len);
void wm__llama_pages_free(void *p, size_t len);
double wm__llama_now(void);
bool wm__llama_ends_with(const char *s, const char *tail);

/* llama_meta.c: the gguf_context llama.cpp reads the model from (gguf_free frees it). */
wm_status wm__llama_metadata(const wm_file *f, struct gguf_context **out, wm_error *err);

/* ---- llama_place.c ---- */

#define MAX_EXTRA 8

/* The CPU device and its extra buffer types (ggml_backend_dev_get_extra_bufts). */
typedef struct extras {
    ggml_backend_dev_t cpu;
    ggml_backend_buffer_type_t buft[MAX_EXTRA];
    size_t n;
} extras;

void wm__llama_cpu_extras(extras *x);
bool wm__llama_is_extra(const extras *x, ggml_backend_buffer_type_t buft);
/* The model's devices as llama.cpp v0.4.0 picks them (llama.cpp llama_prepare_model_devices):
 * params.devices, or else every GPU, or every integrated GPU where there is no GPU; with
 * split_mode NONE main_gpu's alone (none where it is negative). At most cap; returns how many. */
size_t wm__llama_model_devices(const struct llama_model_params *p, ggml_backend_dev_t *list,
                               size_t cap);
/* Whether the model's layers stay on the CPU: no GPU among its devices, or no layer offloaded. */
bool wm__llama_runs_on_cpu(const struct llama_model_params *p);
/* Which extra buffer type (index into x) llama.cpp's rule sends file tensor i (named `name`) to,
 * or -1: the plain CPU buffer. */
int wm__llama_extra_for(const extras *x, const wm_file *f, size_t i, const char *name);

/* With layers on a GPU, the repeating layers llama.cpp keeps on the CPU: those below
 * max(block_count + 1 - n_gpu_layers, 0) (n_gpu_layers < 0: all offloaded); -1 where the file
 * has no <general.architecture>.block_count. */
int wm__llama_cpu_layers(const wm_file *f, const struct llama_model_params *p);
/* Whether llama.cpp keeps tensor `name` on the CPU with only layers below cpu_layers there:
 * "blk.N." with N < cpu_layers, or a tensor of the input layer (token_embd and the like). The
 * overrides (cpu_layers >= 0) send exactly these to own_cpu. */
bool wm__llama_host_tensor(const char *name, int cpu_layers);
/* Writes at out an alternation matching the numbers 0 to k - 1 (k >= 1) as llama.cpp writes
 * layer numbers, unterminated (at most 200 bytes); returns its length. */
size_t wm__llama_below_pattern(unsigned k, char *out);

/* The override list handed to llama.cpp, in pages (mem, mem_len: wm__llama_pages_free). */
typedef struct overrides {
    struct llama_model_tensor_buft_override *list;
    void *mem;
    size_t mem_len;
} overrides;

/* The caller's overrides, then own[k] for the tensors extra buffer type k takes, then own_cpu
 * (NULL: none) for every other tensor (cpu_layers < 0), or (cpu_layers >= 0, layers on a GPU)
 * for those wm__llama_host_tensor names and those the caller sent to ggml's CPU buffer type. */
wm_status wm__llama_overrides(const wm_file *f, const struct llama_model_params *p, const extras *x,
                              ggml_backend_buffer_type_t const *own,
                              ggml_backend_buffer_type_t own_cpu, int cpu_layers, overrides *ov,
                              wm_error *err);
/* For test_llama (linked with the static library; hidden in the shared one): >= 0 has a mapped
 * load whose model runs on the CPU place its tensors as with layers on a GPU from this layer on
 * (the GPU path on a host without one). -1, its value, changes nothing. */
extern int wm__llama_test_cpu_layers;
/* For test_llama, likewise: 0 has no load convert early (llama_early.c); 1 has each place wait
 * for its tensor's early conversion, begun or not (every cached one then moved into place: the
 * same outcome on any machine); -1, its value, is the bridge as built. */
extern int wm__llama_test_early;
/* For test_llama, likewise: 0 has a cold populate leave the repacked tensors' ranges (its `more`
 * ones) to the conversions' own faults, so that those conversions wait for pages nobody else
 * brings; -1, its value, is the bridge as built. */
extern int wm__llama_test_populate_more;
/* For test_llama, likewise: >= 0 has a populate hand out only its first that many bytes (of
 * its spans, in the order it brings them: order_spans), so that what it brings first shows in the
 * page cache; -1, its value, is the bridge as built. */
extern int64_t wm__llama_test_populate_bytes;
/* For test_llama, likewise: >= 0 is the room (bytes) start_populate finds instead of
 * wm_mem_available_get's; -1, its value, is the bridge as built. */
extern int64_t wm__llama_test_room;

/* ---- llama_own.c: the bridge's own weight buffers ---- */

#define MAX_OWN (MAX_EXTRA + 1)

/* The wrapper of buffer type `real` (see llama_own.c), made on first use; NULL where the ggml the
 * process runs is not the one the bridge was built with, or the type does not hold its memory as
 * the CPU's does (llama.cpp then allocates it). */
ggml_backend_buffer_type_t wm__llama_own_type(const extras *x, ggml_backend_buffer_type_t real);
/* Whether b is a buffer of the bridge's own pages. */
bool wm__llama_is_own(ggml_backend_buffer_t b);
/* Bytes (pages) of the own buffers alive in the process, but those whose tensors lie in a
 * mapping (the ledger counts that): what the pool's proof counts (llama_pool.c). */
uint64_t wm__llama_own_bytes(void);
/* While llama.cpp makes the model on this thread: the sizes ggml asks of the wrappers are noted
 * with the tensors' file offsets, so that each buffer starts where its tensors agree with the
 * file on the grid (a no-op where the notes' pages cannot be had: only slower); and, with a
 * mapping (NULL: none), each buffer of the CPU type's wrapper made meanwhile holds a reference to
 * it (wm__llama_map_hold), which the buffer's free drops after unmapping its own pages. */
struct wm_llama_map;
void wm__llama_notes_begin(const wm_file *f, struct wm_llama_map *map);
void wm__llama_notes_end(void);
/* The mapping own buffer b holds (NULL: none, or not an own buffer). */
struct wm_llama_map *wm__llama_buffer_map(ggml_backend_buffer_t b);
/* From begin to end, while llama.cpp makes the model on this thread with early conversions under
 * way (e; NULL: none, a no-op): the extra types' wrappers lay their tensors out on whole pages
 * (their alignment the page), their buffers have the wrapper's type until _end gives them the
 * real one (ggml's allocator takes a buffer's alignment from its type), and each tensor given its
 * place in one is offered to wm__llama_early_place. */
struct wm_llama_early;
void wm__llama_own_early_begin(struct wm_llama_early *e);
void wm__llama_own_early_end(void);
/* The real type of wrapper w (w itself where it is not one). */
ggml_backend_buffer_type_t wm__llama_own_real(ggml_backend_buffer_type_t w);
/* A buffer struct of wrapper w's real type over [base, base + size), pages the caller keeps
 * (ggml_backend_tensor_set converts into them), in a page of its own; NULL where w is not a
 * wrapper or the page cannot be had. wm__llama_own_scratch_free frees the struct (NULL accepted),
 * never base. */
ggml_backend_buffer_t wm__llama_own_scratch(ggml_backend_buffer_type_t w, void *base, size_t size);
void wm__llama_own_scratch_free(ggml_backend_buffer_t b);

/* ---- llama_early.c: the repacked tensors converted during the model's making ---- */

/* llama.c's plan of a mapped load, per file tensor (load.pop): */
#define POP_MAPPED 1 /* it stays in the mapping: the populate brings its range in */
#define POP_EXTRA 2  /* POP_EXTRA + k: extra buffer type k takes it (repacked) */

/* Threads (threads - 1 of them, 0: the online CPUs less one; at least one) converting, from the
 * mapping, every tensor pop gives an extra type whose wrapper own[k] is, each whose bytes are all
 * cached (wait: each, its pages faulted in: a cold file's, which the populate brings in), into
 * pages of their own; NULL where none is (nothing held then). Linux only. */
struct wm_llama_early *wm__llama_early_start(const wm_file *f, const struct wm_llama_map *map,
                                             const unsigned char *pop, const extras *x,
                                             ggml_backend_buffer_type_t const *own, bool wait,
                                             unsigned threads);
/* Tensor t just given its place in own buffer b of extra type `real` (its init_tensor, on the
 * making's thread): its converted pages moved there, waiting for its conversion where one runs;
 * one not yet begun is left to after the making. false where its place lost its pages (the
 * buffer cannot be used). */
bool wm__llama_early_place(struct wm_llama_early *e, ggml_backend_buffer_type_t real,
                           ggml_backend_buffer_t b, struct ggml_tensor *t);
/* After the making: the threads stopped and joined, the pages not moved unmapped, s's
 * repacked_early fields filled (NULL e: a no-op). */
void wm__llama_early_join(struct wm_llama_early *e, wm_llama_stats *s);
/* Whether file tensor `index` was moved into its place converted. */
bool wm__llama_early_placed(const struct wm_llama_early *e, size_t index);
void wm__llama_early_free(struct wm_llama_early *e);

/* ---- llama_map.c: the load modes ---- */

/* params->load_mode, or the options' choice, checked (WM_EINVAL naming the value) and AUTO
 * resolved as llama.cpp v0.4.0 resolves it: *asked and *mode are enum llama_load_mode values. */
wm_status wm__llama_mode(const char *path, const struct llama_model_params *p,
                         wm_llama_load_mode chosen, int *asked, int *mode, wm_error *err);
bool wm__llama_mode_maps(int mode);
bool wm__llama_mode_locks(int mode);

/* The file's MAP_SHARED, PROT_READ mapping (a weightmap WM_MODE_MMAP model of f), refcounted:
 * wm__llama_map_open's reference and each hold are dropped by wm__llama_map_release, the last
 * of which releases the model (unmaps, ledger back). */
wm_status wm__llama_map_open(const wm_file *f, struct wm_llama_map **out, wm_error *err);
void wm__llama_map_hold(struct wm_llama_map *map);
void wm__llama_map_release(struct wm_llama_map *map);
/* Where tensor `index` of the file lies in the mapping. */
void *wm__llama_map_tensor(const struct wm_llama_map *map, size_t index);

/* A range of mapped bytes (to lock). */
typedef struct wm_llama_span {
    uintptr_t lo, hi;
} wm_llama_span;
/* Sorts the spans, rounds them to pages and merges those that overlap or touch; returns how many
 * are left. */
size_t wm__llama_merge(wm_llama_span *s, size_t n);

/* The mapping's pages brought in by threads beside the load (a cold file's from the moment it is
 * mapped, a cached one's from _go): MADV_POPULATE_READ in 1 MiB pieces, by as many threads as
 * `threads` (0: the online CPUs, at least 16, at most 64) where most of the bytes are out of the
 * page cache (the kernel's count, wm_model_cached; where it has none, mincore over a sample, 64 KiB
 * a MiB), else half the CPUs, at most 4. count_cached: the bytes found cached go to _finish's
 * bytes_mapped_cached (the kernel's count of them all as it began; mincore's, each piece's before
 * it was brought in). NULL
 * where its pages cannot be had (the pages then come in as they are touched). _finish joins the
 * threads (stop: the load failed, hand out no more), fills seconds_populate and populate_threads,
 * and returns WM_EIO where a page could not be read (the file cut short under the mapping: said
 * where a touch would have been a SIGBUS). Every start is finished before the mapping can go. */
struct wm_llama_populate;
/* spans (n of them; NULL: the whole mapping): the ranges to bring in, copied; the sample is of
 * them. more (n_more, may be NULL): ranges brought in too where the sample finds the spans cold
 * (the repacked tensors', converted from the mapping as their pages come: a cold file's bytes
 * all come through the page cache, once; brought in before the spans, each list in the file's
 * order), never counted. */
struct wm_llama_populate *wm__llama_populate_start(const struct wm_llama_map *map,
                                                   const wm_llama_span *spans, size_t n,
                                                   const wm_llama_span *more, size_t n_more,
                                                   unsigned threads, bool count_cached);
/* Whether the populate brings the `more` ranges in (NULL: false). */
bool wm__llama_populate_brings_more(const struct wm_llama_populate *p);
/* Where the sample found the spans cached, _start starts no thread: _go does (a no-op once they
 * run; _finish does the pieces itself where no thread ever started). */
void wm__llama_populate_go(struct wm_llama_populate *p);
/* Whether the sample found the spans cold (NULL: false). */
bool wm__llama_populate_cold(const struct wm_llama_populate *p);
wm_status wm__llama_populate_finish(struct wm_llama_populate *p, bool stop, const char *path,
                                    wm_llama_stats *s, wm_error *err);
/* The mapped modes' repacked tensors (those of items[0 .. n), the read's, flagged
 * WM_READ_SINK_WRITES: ggml tensors in .user, file tensors in .tensor) whose bytes the page cache
 * holds (wait: every one, its pages faulted in: those the populate brings), each converted
 * straight from the mapping by
 * ggml_backend_tensor_set (its pages mapped in for the call and their entries dropped after), on
 * `threads` threads (0: the online CPUs) with the calling thread among them; done[k] set for each
 * one converted. The rest are the read's. progress (from the calling thread, may be NULL): bytes
 * converted of all the items', non-zero cancels (WM_ECANCELED). Fills s's repacked_mapped
 * fields. */
wm_status wm__llama_from_map(const struct wm_llama_map *map, const wm_read_item *items, size_t n,
                             unsigned char *done, bool wait, unsigned threads,
                             wm_progress_fn progress, void *progress_user, wm_llama_stats *s);
/* File tensor `index` (nb bytes) in the mapping, its pages mapped in (one MADV_POPULATE_READ),
 * where the page cache holds every one of them (wait: in any case, reading or waiting for what
 * is not): where its bytes lie; else NULL (EFAULT: the file cut short). */
const void *wm__llama_map_bring(const struct wm_llama_map *map, size_t index, size_t nb, bool wait);
/* The page-table entries of the pages wholly inside [at, at + nb) dropped again (on a shared file
 * mapping the page cache keeps the pages; the first and last may hold a mapped neighbour's bytes,
 * and stay). */
void wm__llama_map_drop(const void *at, size_t nb);
/* The page-table entries of the mapping dropped but those of the spans (merged: sorted, on
 * pages): a fault or a populate maps the page cache's pages around it too (the kernel's fault
 * around, 64 KiB), into the ranges of the tensors that are not used from the mapping. */
void wm__llama_map_keep_only(const struct wm_llama_map *map, const wm_llama_span *spans, size_t n);
/* mlock of [addr, addr + len), as llama.cpp's llama_mlock: on a refusal the first warns in
 * llama.cpp's log and sets s->lock_short, and the load goes on; bytes_locked counts the rest. */
void wm__llama_lock(void *addr, size_t len, wm_llama_stats *s);
/* The warning (llama.cpp's log) of an AUTO that resolved to MMAP where this load cannot map. */
void wm__llama_warn_fallback(const char *path, const char *why);

/* ---- llama_log.c ---- */

/* From begin to end, on this thread: every line of llama.cpp's log still goes to the callback
 * the process set (llama_log_set), and the last ERROR line that says why (not llama.cpp's closing
 * "failed to load model") is kept in buf (cap bytes, NUL-terminated; "" when none). Loads on
 * several threads at once each keep their own. */
void wm__llama_log_begin(char *buf, size_t cap);
void wm__llama_log_end(void);
/* One line (fmt's, printf's rules) to llama.cpp's log at level: the callback llama_log_set gave,
 * else llama.cpp's default (stderr). */
void wm__llama_say(enum ggml_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- llama_cuda.c: the tensors in CUDA buffers ---- */

/* Whether buf is a CUDA device's own buffer, as ggml's public API tells (not host memory; its
 * type is its device's, a GPU of the "CUDA" registry named "CUDA<n>"), and its device number. */
bool wm__llama_cuda_buffer(ggml_backend_buffer_t buf, int *ordinal);

/* The tensors the staged pipeline fills, by file index: sel (pages, room for `most`), and per
 * file tensor its device address (addr, 0: none) and its device's index in devs (dev). */
typedef struct wm__llama_cuda {
    wm_tensor_select *sel;
    size_t n, sel_len;
    uint64_t *addr;
    unsigned char *dev;
    size_t per_len;
    int devs[WM_LEDGER_DEVICES];
    unsigned n_devs;
    uint64_t bytes;                   /* the tensors' bytes */
    uint64_t bytes_read, read_direct; /* what the fill read, and of it with O_DIRECT */
    double seconds;                   /* the fill, wm_model_load to its release */
} wm__llama_cuda;
/* Room for `most` tensors of f (WM_ENOMEM, nothing held); wm__llama_cuda_free is its release. */
wm_status wm__llama_cuda_begin(wm__llama_cuda *c, const wm_file *f, size_t most, wm_error *err);
/* Adds file tensor `index` at device address addr of CUDA device `ordinal`; false when that would
 * be a device more than WM_LEDGER_DEVICES (the tensor then goes by ggml_backend_tensor_set). */
bool wm__llama_cuda_add(wm__llama_cuda *c, size_t index, uint64_t addr, int ordinal,
                        uint64_t nbytes);
/* One load of the library's CUDA backend (staged path, heap mode) of exactly those tensors into
 * those addresses (wm_cuda_options.dst), released at once: the bytes stay in llama.cpp's
 * buffers, nothing stays with the library. Reads by o->threads and o->direct_io. */
wm_status wm__llama_cuda_fill(wm__llama_cuda *c, const wm_file *f, const wm_llama_options *o,
                              wm_progress_fn progress, void *progress_user, wm_error *err);
void wm__llama_cuda_free(wm__llama_cuda *c);
/* A load of the tensors sel[0 .. n) in heap mode to the CUDA backend into caller memory (dst,
 * user: wm_cuda_options.dst), with the bridge's reading options; the caller adds the devices and
 * the progress. */
void wm__llama_cuda_options(wm_load_options *lo, wm_cuda_options *cu, wm_dst_fn dst, void *user,
                            const wm_tensor_select *sel, size_t n, unsigned threads,
                            wm_direct_io direct_io);

/* ---- llama.c ---- */

/* Why a load of f with p and o cannot map the file (its CPU buffers must be the bridge's own),
 * or NULL (why: room for a reason that names a device). *cpu_layers: -1 where the model runs on
 * the CPU, else the layers llama.cpp keeps there (wm__llama_cpu_layers). wm_llama_load's rule,
 * which wm_llama_cost follows. */
const char *wm__llama_cannot_map(const wm_file *f, const struct llama_model_params *p,
                                 const wm_llama_options *o, int *cpu_layers, char *why,
                                 size_t why_len);

/* ---- llama_ahead.c: the device's tensors loaded ahead, during the model's making ---- */

typedef struct wm__llama_ahead {
    const wm_file *f;
    unsigned threads;
    wm_direct_io direct_io;
    int ordinal;                     /* the CUDA device */
    ggml_backend_buffer_type_t buft; /* the device's own buffer type */
    ggml_backend_buffer_t buf; /* ggml's CUDA buffer the tensors are loaded into (the thread's) */
    wm_tensor_select *sel;     /* the tensors (pages) */
    uint64_t *off;             /* per file tensor: its offset in buf plus 1; 0: not ahead */
    size_t n, sel_len, off_len;
    uint64_t bytes;      /* buf's size */
    uint64_t bytes_read; /* what the ahead load read */
    pthread_t thread;
    bool running; /* the thread is to be joined */
    bool ready;   /* joined, and every tensor is in buf */
    atomic_int stop;
    wm_status st; /* the ahead load's outcome */
    double t0, seconds, seconds_wait, seconds_copy;
    double seconds_buffer; /* of seconds, its device buffer's allocation */
    size_t taken;          /* tensors copied into place */
    unsigned quarters;     /* of the bytes, those on the device: when, and how many bytes then */
    double quarter_at[4];
    uint64_t quarter_bytes[4], progress_total;
    uint64_t bytes_taken;
} wm__llama_ahead;

/* Starts loading ahead the tensors llama.cpp will place on the model's one CUDA device (see
 * llama_ahead.c for when); false where it does not (nothing held then but what
 * wm__llama_ahead_free frees). */
bool wm__llama_ahead_start(wm__llama_ahead *a, const wm_file *f, const struct llama_model_params *p,
                           const wm_llama_options *o);
/* Waits for the ahead load (stop: have it stop early); whether every tensor is in the buffer. */
bool wm__llama_ahead_join(wm__llama_ahead *a, bool stop);
/* Tensor t (file tensor `index`, in a CUDA buffer of device `ordinal`) copied into place from the
 * ahead buffer, where it is there: true. */
bool wm__llama_ahead_take(wm__llama_ahead *a, struct ggml_tensor *t, size_t index, int ordinal);
/* Joins (stopping it), frees the buffer and the tables; accepts one never started. */
void wm__llama_ahead_free(wm__llama_ahead *a);

#endif /* WM_BRIDGE_LLAMA_BRIDGE_H */
