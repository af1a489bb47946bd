/*
 * engine.h: the reading engine (src/read/): what its callers (a model's load, src/backend/;
 * wm_file_read_tensors and wm_file_prefetch, src/read.c; the file's close, src/file.c) use.
 *
 * The engine reads file ranges into memory on threads that live only for one run. It knows files
 * (wm_file), readers (reader.h), jobs and threads; it knows nothing of models, plans, backends or
 * devices, and calls nothing above it: what a caller wants to hear of (progress, the bytes of a
 * job with no destination) it passes down as a callback. Its parts:
 *
 *   reader.c    one range at a time: buffered or direct per range (reader.h)
 *   prefetch.c  a read ahead of a file into memory the file holds (wm_file_prefetch)
 *   crew.c      reading threads (a crew), each thread's own descriptors of the shards
 *   run.c       the job runner: jobs on a crew, converting, windows to a sink, prefaulting
 *   items.c     wm_file_read_tensors' items laid out as jobs, and run
 *
 * Rules: a run's threads exist only during wm__run_jobs, and every byte of memory it makes
 * (staging, windows, conversion scratch, thread stacks) is page-allocated, counted as scratch and
 * freed before it returns; the calling thread takes nothing from malloc.
 */
#ifndef WM_READ_ENGINE_H
#define WM_READ_ENGINE_H

#include "reader.h"

/* ---- threads ---- */

/* The most threads a run uses. */
#define WM__MAX_THREADS 64u
/* Threads for a run: `asked`, or one per online CPU when 0; at most WM__MAX_THREADS. */
unsigned wm__read_threads(unsigned asked);

/* Reading threads that run fn(arg) inside the OS task scope, their stacks counted as scratch
 * while they live. The caller owns the crew (th: room for the threads) until wm__crew_join. */
typedef struct wm__crew {
    void (*fn)(void *);
    void *arg;
    wm_os_thread *th;
    unsigned started;
} wm__crew;
/* Starts n threads (crew->started counts them); a thread that cannot start is WM_ENOMEM naming
 * `path` and no more are started. */
wm_status wm__crew_start(const char *path, wm__crew *crew, unsigned n, wm_error *err);
/* Joins and uncounts every started thread; leaves started 0. */
void wm__crew_join(wm__crew *crew);

/* Each reading thread's own descriptors of the shards. Threads that pread many small runs (the
 * rows of last-dimension slices, a few KiB each) through one descriptor all take and drop
 * references on one open file, and that shared count caps them (docs/DECISIONS.md). Opened by
 * the thread that reads, closed by it before it ends. Opening never fails: a shard that cannot be
 * reopened (or no memory for the table) is read through its own descriptor. */
typedef struct wm__fds {
    int *fd; /* one per shard, -1 where the shard's own serves; NULL: all shards' own */
    uint32_t n;
} wm__fds;
void wm__fds_open(const wm_file *f, wm__fds *out);
/* The descriptor to read shard `shard` through; fds NULL: the shard's own. */
int wm__fds_get(const wm__fds *fds, const wm_file *f, uint32_t shard);
/* Closes what wm__fds_open opened; accepts an empty table; leaves it empty. */
void wm__fds_close(wm__fds *fds);

/* ---- jobs and runs ---- */

/* Source bytes a converting job reads and converts at a time, through page-allocated scratch of
 * that size per worker (so the bytes are still in the core's cache when converted). */
#define WM_CONVERT_STEP ((size_t)256 << 10)
/* The largest job: a tensor is read in pieces of at most this many bytes. */
#define WM_JOB_BYTES ((size_t)8 << 20)

/* A piece of work: read len bytes of a shard at file_off into dst, converting from `from` to `to`
 * when they differ (len then covers whole blocks of `from`); `rows` times (a slice's rows), the
 * r-th from file_off + r * src_stride to dst + r * len (rows of a slice are never converted). */
typedef struct wm__job {
    uint32_t shard;
    uint64_t file_off;
    size_t len;
    unsigned char *dst; /* NULL: the bytes go through a window to the run's sink */
    wm_type from, to;
    uint32_t tensor;
    uint64_t rows;
    uint64_t src_stride;
    const wm_read_item *item; /* a job for the sink: the caller's item, and where the job's */
    uint64_t item_off;        /* bytes start in its tensor */
    struct wm__whole *whole;  /* a piece of a WM_READ_WHOLE item (items.c, run.c), or NULL */
    /* dst is fresh anonymous memory too small for huge pages: the job faults it in with one call
     * before reading (one fault per 4 KiB page inside the copy costs more) */
    bool populate;
} wm__job;

/* A WM_READ_WHOLE item: read in pieces by whichever threads take them, into one window of its
 * whole size, and handed to the sink by the thread that reads its last piece. */
typedef struct wm__whole {
    int slot;                      /* its window in the run's pool (-1: not yet), under win_lock */
    _Atomic(unsigned char *) base; /* that window, once it has one (read without the lock) */
    _Atomic uint64_t left;         /* bytes not read yet */
} wm__whole;

/* One run of the engine: the file, the reader every byte goes through, how many threads and whom
 * to tell of progress. The caller fills it; the runner writes `threads_used`. */
typedef struct wm__read_run {
    const wm_file *file;
    wm__reader *rd;
    unsigned threads; /* wm__read_threads(): the calling thread and threads - 1 more */
    wm_progress_fn progress;
    void *progress_user;
    unsigned threads_used; /* out: the threads that read (the calling one included) */
} wm__read_run;

/* Where the jobs without a destination go (wm_file_read_tensors' sink), and how. */
typedef struct wm__sink {
    wm_read_sink_fn fn; /* NULL where every job has a destination */
    void *user;
    size_t window_each; /* a thread's window for such jobs */
    unsigned flags;     /* WM_READ_SINK_SERIAL, WM_READ_PREFAULT */
} wm__sink;

/* Runs the jobs on run->threads threads (the calling thread works too and reports progress).
 * The first error wins and stops the rest; a cancel from the progress callback gives
 * WM_ECANCELED. Where jobs read rows (slices), each worker reads through descriptors of its own
 * (wm__fds) and the calling thread through the shards'. With a sink (NULL: none), the caller also
 * hears of progress once more at the end. */
wm_status wm__run_jobs(wm__read_run *run, const wm__job *jobs, size_t n, const wm__sink *sink,
                       wm_error *err);

/* wm_file_read_tensors on the engine: the items' tensors read straight into their destinations,
 * or through page-allocated windows to o->sink; `o` is the library's full-size copy, checked
 * (src/read.c). */
wm_status wm__read_items(const wm_file *f, const wm_read_item *items, size_t n,
                         const wm_read_options *o, wm_error *err);

/* ---- the read ahead (prefetch.c) ---- */

/* wm_file_prefetch: up to `bytes` of f's tensor data read ahead by threads of its own into
 * memory the file holds, until the next wm_file_read_tensors ends or the file is closed; the
 * bytes asked for (0: none). Every wm__read of the file copies what it holds first, through the
 * hook the read ahead installs on the file (wm_file.ahead_take). */
uint64_t wm__prefetch_start(wm_file *f, uint64_t bytes);
/* stop: its threads take no more chunks (the read that wants the bytes has begun). drop: its
 * threads joined, its memory freed (and whatever it read through the page cache dropped from
 * it); once, whatever came before. wait: its threads joined (every chunk read or refused), its
 * bytes still held: for tests. */
void wm__file_prefetch_stop(wm_file *f);
void wm__file_prefetch_drop(wm_file *f);
void wm__file_prefetch_wait(wm_file *f);

#endif /* WM_READ_ENGINE_H */
