/*
 * llama_map.c: the llama.cpp bridge's load modes (llama_bridge.h; include/weightmap_llama.h,
 * wm_llama_load_mode): AUTO resolved as llama.cpp v0.4.0 resolves it, the file's mapping (a
 * weightmap WM_MODE_MMAP model, refcounted: the load and each mapped CPU buffer hold it), the
 * populate of the mapped ranges, and the locks. Public API only, of weightmap, llama.cpp and
 * ggml.
 */
#include "llama_bridge.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

/* ---- the mode ---- */

static const char *mode_name(int m) {
    static const char *const names[] = {"AUTO", "NONE", "MMAP", "MLOCK", "MMAP_MLOCK", "DIRECT_IO"};
    return m >= -1 && m <= 4 ? names[m + 1] : "unknown";
}

bool wm__llama_mode_maps(int mode) {
    return mode == LLAMA_LOAD_MODE_MMAP || mode == LLAMA_LOAD_MODE_MMAP_MLOCK;
}

bool wm__llama_mode_locks(int mode) {
    return mode == LLAMA_LOAD_MODE_MLOCK || mode == LLAMA_LOAD_MODE_MMAP_MLOCK;
}

/* Whether device d can map (ggml_backend_dev_props.caps.mmap_support). */
static bool maps(ggml_backend_dev_t d) {
    struct ggml_backend_dev_props props;
    memset(&props, 0, sizeof props);
    ggml_backend_dev_get_props(d, &props);
    return props.caps.mmap_support;
}

/* AUTO as llama.cpp v0.4.0 resolves it (llama.cpp llama_prepare_model_devices, then
 * llama-model.cpp load_tensors): MMAP unless one of the model's devices (wm__llama_model_devices;
 * RPC servers count with the GPUs: they map) cannot map. */
static int resolve_auto(const struct llama_model_params *p) {
    ggml_backend_dev_t list[64];
    size_t n = wm__llama_model_devices(p, list, 64);
    for (size_t k = 0; k < n; k++)
        if (!maps(list[k])) return LLAMA_LOAD_MODE_NONE;
    return LLAMA_LOAD_MODE_MMAP;
}

wm_status wm__llama_mode(const char *path, const struct llama_model_params *p,
                         wm_llama_load_mode chosen, int *asked, int *mode, wm_error *err) {
    if ((unsigned)chosen > WM_LLAMA_LOAD_DIRECT_IO)
        return fail(err, WM_EINVAL,
                    "%s: wm_llama_options.load_mode %d is none of PARAMS (0), AUTO (1), NONE, "
                    "MMAP, MLOCK, MMAP_MLOCK, DIRECT_IO (6)",
                    path, (int)chosen);
    int m = chosen == WM_LLAMA_LOAD_PARAMS ? (int)p->load_mode : (int)chosen - 2;
    if (m < LLAMA_LOAD_MODE_AUTO || m > LLAMA_LOAD_MODE_DIRECT_IO)
        return fail(err, WM_EINVAL,
                    "%s: llama_model_params.load_mode %d is none of llama.cpp's AUTO (-1), NONE "
                    "(0), MMAP (1), MLOCK (2), MMAP_MLOCK (3), DIRECT_IO (4)",
                    path, m);
    *asked = m;
    *mode = m == LLAMA_LOAD_MODE_AUTO ? resolve_auto(p) : m;
    return WM_OK;
}

/* ---- the mapping ---- */

struct wm_llama_map {
    wm_model *model;
    atomic_uint refs;
};

wm_status wm__llama_map_open(const wm_file *f, struct wm_llama_map **out, wm_error *err) {
    *out = NULL;
    struct wm_llama_map *map = wm__llama_pages(sizeof *map);
    if (!map)
        return fail(err, WM_ENOMEM, "%s: out of memory for the file's mapping", wm_file_path(f));
    wm_load_options lo = WM_LOAD_OPTIONS_INIT;
    lo.mode = WM_MODE_MMAP;
    /* the model holds the file (a reference), not this const pointer's owner */
    wm_status st = wm_model_load((wm_file *)(uintptr_t)f, &lo, &map->model, err);
    if (st) {
        wm__llama_pages_free(map, sizeof *map);
        return st;
    }
    atomic_init(&map->refs, 1);
    *out = map;
    return WM_OK;
}

void wm__llama_map_hold(struct wm_llama_map *map) { atomic_fetch_add(&map->refs, 1); }

void wm__llama_map_release(struct wm_llama_map *map) {
    if (!map || atomic_fetch_sub(&map->refs, 1) != 1) return;
    wm_model_release(map->model);
    wm__llama_pages_free(map, sizeof *map);
}

void *wm__llama_map_tensor(const struct wm_llama_map *map, size_t index) {
    return (void *)(uintptr_t)wm_model_tensor_data(map->model, index);
}

/* ---- populate ----
 * Started as soon as the file is mapped, before llama.cpp makes the model (which takes tens of
 * milliseconds with the disk idle otherwise), over the whole mapping (llama.cpp's own mmap mode
 * populates the whole file: MAP_POPULATE); joined before the load returns or fails (the threads
 * touch the mapping: nothing is unmapped before). */

#define PIECE ((size_t)1 << 20)
#define MAX_POPULATE_THREADS 64

struct wm_llama_populate {
    const struct wm_llama_map *map;
    wm_llama_span *span;   /* the ranges, merged (pages: span_len bytes), in order_spans's order */
    uint64_t *before;      /* per span, the bytes of the spans before it */
    unsigned char *more;   /* per span, 1 where it is of the `more` ranges (not counted) */
    unsigned char *beside; /* per span: BESIDE_BEFORE, BESIDE_AFTER where a span abuts it */
    size_t n, span_len;
    uint64_t total;
    bool cold;                       /* under three quarters cached when it began (find_cold) */
    bool brings_more;                /* the `more` spans are among them (cold) */
    atomic_size_t next_edge;         /* edges handed out (populate_edges): 2 a span */
    atomic_uint_fast64_t next;       /* bytes handed out, over the spans in order (each from a
                                        multiple of PIECE: before) */
    atomic_int error;                /* the first errno */
    atomic_int stop;                 /* the load failed: hand out no more */
    atomic_uint_fast64_t in_cache;   /* bytes the pieces found cached before bringing them in */
    atomic_uint_fast64_t next_count; /* count_pieces: bytes handed out */
    atomic_uint_fast64_t prepared;   /* edges and counts done (prepare) */
    uint64_t to_prepare;             /* edges (cold: 2 a span) and pieces (count) */
    pthread_mutex_t lock;
    pthread_cond_t all_prepared;
    bool report;  /* in_cache goes to the stats' bytes_mapped_cached */
    bool count;   /* the threads count the pieces for it (count_pieces) */
    bool counted; /* the kernel counted the spans at the start (find_cold): in_cache already */
    pthread_t th[MAX_POPULATE_THREADS];
    struct populate_worker {
        struct wm_llama_populate *p;
        double end; /* when the thread found nothing left to do */
    } worker[MAX_POPULATE_THREADS];
    unsigned started, asked;
    double t0;
};

static int span_cmp(const void *a, const void *b) {
    uintptr_t x = ((const wm_llama_span *)a)->lo, y = ((const wm_llama_span *)b)->lo;
    return x < y ? -1 : x > y;
}

size_t wm__llama_merge(wm_llama_span *s, size_t n) {
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (size_t k = 0; k < n; k++)
        s[k].lo = s[k].lo / pg * pg, s[k].hi = (s[k].hi + pg - 1) / pg * pg;
    qsort(s, n, sizeof *s, span_cmp);
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        if (m && s[k].lo <= s[m - 1].hi) {
            if (s[k].hi > s[m - 1].hi) s[m - 1].hi = s[k].hi;
        } else {
            s[m++] = s[k];
        }
    }
    return m;
}

/* Bytes of the spans in the page cache (mincore of the mapping, 1 MiB of pages a call); with
 * `whole`, 0 at the first page that is not (the caller asks whether all of them are, to read them
 * now from the mapping: mincore counts a page once it is in, where cachestat counts one still
 * being read in, a readahead's or a neighbour's fault's). */
static uint64_t cached(const wm_llama_span *s, size_t n, bool whole) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char vec[256];
    uint64_t bytes = 0;
    for (size_t k = 0; k < n; k++)
        for (uintptr_t at = s[k].lo; at < s[k].hi;) {
            size_t len = s[k].hi - at < sizeof vec * pg ? s[k].hi - at : sizeof vec * pg;
            if (mincore((void *)at, len, vec) != 0) return whole ? 0 : bytes;
            for (size_t p = 0; p < (len + pg - 1) / pg; p++) {
                if (whole && !(vec[p] & 1)) return 0;
                bytes += (vec[p] & 1) ? pg : 0;
            }
            at += len;
        }
    return bytes;
}

/* The spans' bytes in the page cache by the kernel's own count (wm_model_cached: cachestat on
 * Linux 6.5+, which walks the cache by folio: 0.06 ms for a warm 1.3 GB file on the development
 * VM, where mincore on a fresh mapping looks each page up, 9 ms), in *bytes; false where the
 * kernel has none, or a span is not inside one of the mapping's buffers. */
static bool kernel_cached(const struct wm_llama_map *map, const wm_llama_span *s, size_t n,
                          uint64_t *bytes) {
    *bytes = 0;
    for (size_t k = 0; k < n; k++) {
        uint64_t in, len = s[k].hi - s[k].lo;
        if (wm_model_cached(map->model, (const void *)s[k].lo, (size_t)len, &in) != WM_OK)
            return false;
        *bytes += in < len ? in : len; /* (whole pages: the spans are) */
    }
    return true;
}

/* One piece: MADV_POPULATE_READ (faults the pages in, reading what is not cached, privatising
 * nothing); where the kernel lacks it (EINVAL), MADV_WILLNEED, and the first touches come later.
 * 0 or an errno (EFAULT: a page past the file's end, which a touch would have taken as SIGBUS). */
static int populate_piece(void *at, size_t len) {
    int e = FAULT_ERRNO(ADVISE);
    if (e) return e;
    if (madvise(at, len, MADV_POPULATE_READ) == 0) return 0;
    e = errno;
    if (e == EINTR || e == EAGAIN) return madvise(at, len, MADV_POPULATE_READ) ? errno : 0;
    if (e == EINVAL) return madvise(at, len, MADV_WILLNEED), 0;
    return e;
}

/* Whether under three quarters of the spans are in the page cache. Where the kernel counts a
 * range in one call (wm_model_cached) every span is counted, and that count, taken before the
 * populate asks for any page, is the populate's (counted, in_cache): no piece is counted again.
 * Else from a sample, the first 64 KiB of each 1 MiB (mincore costs a page-cache lookup a page: 7
 * ms over the 723 MiB that stay mapped of the 1.2 GiB bench model on the development VM, before
 * llama.cpp could begin), and the populate's threads count the pieces (count_pieces). */
static bool find_cold(struct wm_llama_populate *p) {
    const wm_llama_span *s = p->span;
    const uintptr_t every = PIECE, look = (uintptr_t)64 << 10;
    uint64_t seen = 0, in = 0;
    if (p->n && kernel_cached(p->map, s, p->n, &in)) {
        for (size_t k = 0; k < p->n; k++)
            seen += s[k].hi - s[k].lo;
        atomic_store(&p->in_cache, in);
        p->counted = true;
        return in * 4 < seen * 3;
    }
    for (size_t k = 0; k < p->n; k++)
        for (uintptr_t at = s[k].lo; at < s[k].hi; at += every) {
            wm_llama_span one = {at, s[k].hi - at < look ? s[k].hi : at + look};
            seen += one.hi - one.lo;
            in += cached(&one, 1, false);
        }
    return in * 4 < seen * 3;
}

/* One edge or count done (prepare): the last wakes the threads that wait for it. */
static void prepared(struct wm_llama_populate *p) {
    if (atomic_fetch_add(&p->prepared, 1) + 1 < p->to_prepare) return;
    pthread_mutex_lock(&p->lock);
    pthread_cond_broadcast(&p->all_prepared);
    pthread_mutex_unlock(&p->lock);
}

/* A cold span's outer edges, asked for ahead of its pieces. A fault that finds no page reads a
 * window around it: where the mapping is advised huge pages (load_mapped), two 2 MiB folios from
 * the 2 MiB line of the file at or below it (Linux 6.x's fault path), else the readahead window
 * around it. At an edge with no span beside it that reads into the neighbouring tensors (on a
 * GPU, or repacked and warm: read apart, past the page cache), and the next async readahead
 * further; on the development VM a cold load of the 1.2 GiB bench model read 1147-1155 MiB from
 * the disk for its 1086. So the first 2 MiB and the last 4 MiB of each such span are asked for
 * first (MADV_WILLNEED: exactly those pages, in small folios), and the faults' own windows stop
 * there; an async readahead begun inside may still carry past (1120 MiB). Only the edges: 1.8.4 so
 * asked for every piece, so that the page cache held the file in small folios: a fill of 1.35-1.75
 * GB/s against 1.97-2.27 (the same VM, 1.2 GiB, 16 threads, 1 MiB pieces), and a populate of the
 * warm file later mapped it a page an entry (40-48 ms for 1086 MiB, against 0.3-0.6). */
#define EDGE_HEAD ((uintptr_t)2 << 20)
#define EDGE_TAIL ((uintptr_t)4 << 20)

#define BESIDE_BEFORE 1
#define BESIDE_AFTER 2

static void populate_edges(struct wm_llama_populate *p) {
    for (;;) {
        size_t e = atomic_fetch_add(&p->next_edge, 1), k = e / 2;
        if (e >= 2 * p->n) return;
        const wm_llama_span *s = &p->span[k];
        bool tail = e % 2;
        /* (a span beside it, in the file, is brought in too: no neighbour's bytes there) */
        bool beside = (p->beside[k] & (tail ? BESIDE_AFTER : BESIDE_BEFORE)) != 0;
        uintptr_t head = s->hi - s->lo > EDGE_HEAD ? s->lo + EDGE_HEAD : s->hi;
        uintptr_t lo = tail ? (s->hi - head > EDGE_TAIL ? s->hi - EDGE_TAIL : head) : s->lo;
        uintptr_t hi = tail ? s->hi : head;
        if (!beside && hi > lo) (void)madvise((void *)lo, hi - lo, MADV_WILLNEED);
        prepared(p);
    }
}

/* The piece at byte `at` of the spans, in span *k; false in the gap before a span. */
static bool piece_at(const struct wm_llama_populate *p, uint64_t at, wm_llama_span *piece,
                     size_t *k) {
    size_t lo = 0, hi = p->n; /* the last span that starts at or before `at` */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (p->before[mid] <= at)
            lo = mid;
        else
            hi = mid;
    }
    at -= p->before[lo];
    if (at >= p->span[lo].hi - p->span[lo].lo) return false;
    size_t left = p->span[lo].hi - p->span[lo].lo - (size_t)at;
    piece->lo = p->span[lo].lo + (uintptr_t)at;
    piece->hi = piece->lo + (left < PIECE ? left : PIECE);
    *k = lo;
    return true;
}

/* count_cached where the kernel did not count the spans at the start (find_cold): their cached
 * bytes, every piece's looked at (mincore) before any piece is brought in: a fault reads around it
 * (two 2 MiB folios, and ahead), into pieces that another thread has yet to count. */
static void count_pieces(struct wm_llama_populate *p) {
    for (;;) {
        uint64_t at = atomic_fetch_add(&p->next_count, PIECE);
        if (at >= p->total) return;
        wm_llama_span piece;
        size_t k;
        if (piece_at(p, at, &piece, &k) && !p->more[k])
            atomic_fetch_add(&p->in_cache, cached(&piece, 1, false));
        prepared(p);
    }
}

/* The edges asked for and the pieces counted (where the kernel did not count them at the start),
 * by every thread, before any thread faults: a fault's read around would both read past an edge
 * not yet asked for and into a piece not yet counted. */
static void prepare(struct wm_llama_populate *p) {
    if (p->cold) populate_edges(p);
    if (p->count) count_pieces(p);
    pthread_mutex_lock(&p->lock);
    while (atomic_load(&p->prepared) < p->to_prepare)
        pthread_cond_wait(&p->all_prepared, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

int64_t wm__llama_test_populate_bytes = -1;

static void populate_pieces(struct wm_llama_populate *p) {
    prepare(p);
    uint64_t total = p->total;
    if (wm__llama_test_populate_bytes >= 0 && (uint64_t)wm__llama_test_populate_bytes < total)
        total = (uint64_t)wm__llama_test_populate_bytes;
    for (;;) {
        uint64_t at = atomic_fetch_add(&p->next, PIECE);
        if (at >= total || atomic_load(&p->error) || atomic_load(&p->stop)) return;
        wm_llama_span piece;
        size_t k;
        if (!piece_at(p, at, &piece, &k)) continue; /* the gap before the next span */
        if (p->more[k] && wm__llama_test_populate_more == 0) continue;
        int e = populate_piece((void *)piece.lo, piece.hi - piece.lo);
        int none = 0;
        if (e) atomic_compare_exchange_strong(&p->error, &none, e);
    }
}

static void *populate_thread(void *arg) {
    struct populate_worker *w = arg;
    populate_pieces(w->p);
    w->end = wm__llama_now();
    return NULL;
}

/* Threads for the populate: cold bytes want requests in flight (the disk's queue, not the
 * CPUs, bounds them), cached ones only page tables. */
static unsigned populate_threads(unsigned asked, uint64_t total, bool cold) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned n = asked ? asked : (unsigned)(cpus > 16 ? cpus : 16);
    if (!cold) { /* three quarters cached: page tables only, beside the model's making: half the
                    CPUs, at most 4 */
        unsigned half = cpus > 1 ? (unsigned)(cpus / 2) : 1;
        n = half < 4 ? half : 4;
    }
    if (n > MAX_POPULATE_THREADS) n = MAX_POPULATE_THREADS;
    uint64_t pieces = (total + PIECE - 1) / PIECE;
    return pieces < n ? (unsigned)(pieces ? pieces : 1) : n;
}

static void populate_free(struct wm_llama_populate *p) {
    pthread_cond_destroy(&p->all_prepared);
    pthread_mutex_destroy(&p->lock);
    wm__llama_pages_free(p->span, p->span_len);
    wm__llama_pages_free(p, sizeof *p);
}

/* The order the spans come in (from `all`, in the file's order, into p->span, their flags with
 * them; `scratch`: 2 x p->n bytes): the `more` ones (repacked, cold) first, then the mapped ones,
 * each in the file's order. A repacked tensor's bytes have a conversion to go through once they
 * are in, a mapped tensor's are done: the conversions of the last repacked tensors then run while
 * the mapped ones come in. In the file's order the last tensor of the 256 MiB bench model, the
 * output head (34 MiB of q8_0, which the GPU host's AMX type converts only whole), came last and
 * its conversion began when the fill was over: 6-16 ms past it. On the GPU host, alternated in
 * one call: 0.941x and 0.899x the disk against 0.871x and 0.841x at 256 MiB, 0.951-1.004x against
 * 0.959-0.985x at 1.2 GiB (bench/RESULTS.md, llama, "1.8.6"). */
static void order_spans(struct wm_llama_populate *p, const wm_llama_span *all,
                        unsigned char *scratch) {
    memcpy(scratch, p->more, p->n);
    memcpy(scratch + p->n, p->beside, p->n);
    size_t at = 0;
    for (int more = 1; more >= 0; more--)
        for (size_t x = 0; x < p->n; x++)
            if (scratch[x] == more) {
                p->span[at] = all[x];
                p->more[at] = scratch[x];
                p->beside[at++] = scratch[p->n + x];
            }
}

/* The ranges to bring in: the spans given (and, cold, the `more` ones), else the mapping's
 * buffers (one per shard); each list merged apart (the `more` ones are not counted), then in the
 * order the pieces follow (order_spans: the `more` ones first, each list in the file's order). */
static bool populate_spans(struct wm_llama_populate *p, const wm_llama_span *spans, size_t n,
                           const wm_llama_span *more, size_t n_more) {
    size_t nb = wm_model_buffer_count(p->map->model), c1 = spans ? n : nb, cap = c1 + n_more;
    cap = cap ? cap : 1;
    /* the spans, then room for the `more` ones and for the two merged (pages) */
    p->span_len = cap * (3 * sizeof *p->span + sizeof *p->before + 2);
    p->span = wm__llama_pages(p->span_len);
    if (!p->span) return false;
    wm_llama_span *m = p->span + cap, *all = p->span + 2 * cap;
    p->before = (uint64_t *)(void *)(p->span + 3 * cap);
    p->more = (unsigned char *)(p->before + cap);
    p->beside = p->more + cap;
    for (size_t b = 0; b < c1; b++) {
        uintptr_t lo = spans ? spans[b].lo : (uintptr_t)wm_model_buffer_data(p->map->model, b);
        uintptr_t hi = spans ? spans[b].hi : lo + wm_model_buffer_size(p->map->model, b);
        if (lo && hi > lo) p->span[p->n++] = (wm_llama_span){lo, hi};
    }
    p->n = wm__llama_merge(p->span, p->n);
    p->cold = find_cold(p); /* of the counted spans alone */
    size_t n2 = 0;
    for (size_t b = 0; p->cold && b < n_more; b++)
        if (more[b].hi > more[b].lo) m[n2++] = more[b];
    n2 = wm__llama_merge(m, n2);
    p->brings_more = n2 > 0;
    /* the two lists (each in address order) merged, each span's flag with it, and which spans
     * abut another in the file (populate_edges) */
    size_t i = 0, j = 0, k = 0;
    while (i < p->n || j < n2) {
        bool from_more = j < n2 && (i == p->n || m[j].lo < p->span[i].lo);
        all[k] = from_more ? m[j++] : p->span[i++];
        p->more[k++] = from_more;
    }
    for (size_t x = 0; x < k; x++)
        p->beside[x] =
            (unsigned char)((x > 0 && all[x - 1].hi >= all[x].lo ? BESIDE_BEFORE : 0) |
                            (x + 1 < k && all[x + 1].lo <= all[x].hi ? BESIDE_AFTER : 0));
    p->n = k;
    order_spans(p, all, (unsigned char *)m); /* (m: spare since the merge) */
    for (size_t x = 0; x < p->n; x++) { /* each span from a piece's start: none straddles two */
        p->before[x] = (p->total + PIECE - 1) / PIECE * PIECE;
        p->total = p->before[x] + (p->span[x].hi - p->span[x].lo);
    }
    return true;
}

struct wm_llama_populate *wm__llama_populate_start(const struct wm_llama_map *map,
                                                   const wm_llama_span *spans, size_t n,
                                                   const wm_llama_span *more, size_t n_more,
                                                   unsigned threads, bool count_cached) {
    struct wm_llama_populate *p = wm__llama_pages(sizeof *p);
    if (!p) return NULL; /* the pages come in as they are touched: only slower */
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->all_prepared, NULL);
    p->map = map;
    p->t0 = wm__llama_now();
    atomic_init(&p->in_cache, 0); /* (find_cold may count into it) */
    if (!populate_spans(p, spans, n, more, n_more)) {
        populate_free(p);
        return NULL;
    }
    atomic_init(&p->next, 0);
    atomic_init(&p->next_edge, 0);
    atomic_init(&p->error, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->next_count, 0);
    atomic_init(&p->prepared, 0);
    p->report = count_cached;
    p->count = count_cached && !p->counted;
    p->to_prepare =
        (p->cold ? 2 * (uint64_t)p->n : 0) + (p->count ? (p->total + PIECE - 1) / PIECE : 0);
    p->asked = threads;
    if (p->cold) wm__llama_populate_go(p);
    return p;
}

int wm__llama_test_populate_more = -1;

bool wm__llama_populate_brings_more(const struct wm_llama_populate *p) {
    return p && p->brings_more;
}

bool wm__llama_populate_cold(const struct wm_llama_populate *p) { return p && p->cold; }

void wm__llama_populate_go(struct wm_llama_populate *p) {
    if (!p || p->started) return;
    p->t0 = wm__llama_now();
    unsigned want = populate_threads(p->asked, p->total, p->cold);
    while (p->started < want && !FAULT(THREAD) &&
           (p->worker[p->started].p = p,
            pthread_create(&p->th[p->started], NULL, populate_thread, &p->worker[p->started])) == 0)
        p->started++; /* a thread refused: fewer do it (none: the join does it all) */
}

wm_status wm__llama_populate_finish(struct wm_llama_populate *p, bool stop, const char *path,
                                    wm_llama_stats *s, wm_error *err) {
    if (!p) return WM_OK;
    if (stop) atomic_store(&p->stop, 1);
    double end = 0;
    if (!stop && !p->started) populate_pieces(p), end = wm__llama_now(); /* no thread could */
    for (unsigned k = 0; k < p->started; k++) {
        pthread_join(p->th[k], NULL);
        if (p->worker[k].end > end) end = p->worker[k].end;
    }
    unsigned threads = p->started ? p->started : 1;
    double seconds = (end > 0 ? end : wm__llama_now()) - p->t0;
    if (threads > s->populate_threads) s->populate_threads = threads;
    if (seconds > s->seconds_populate) s->seconds_populate = seconds;
    if (p->report) s->bytes_mapped_cached += atomic_load(&p->in_cache);
    int e = stop ? 0 : atomic_load(&p->error);
    populate_free(p);
    if (!e) return WM_OK;
    wm_status st =
        fail(err, e == ENOMEM ? WM_ENOMEM : WM_EIO,
             "%s: the mapped file's pages could not be brought in (%s)%s", path, strerror(e),
             e == EFAULT ? ": the file is shorter than when it was mapped" : "");
    if (err) err->os_errno = e;
    return st;
}

/* ---- repacked from the mapping ----
 * In the mapped modes a tensor that an extra buffer type takes (repacked) is not used through
 * the mapping, yet its bytes lie there. Where the page cache holds every one of them, the
 * conversion reads them straight from the mapping, as llama.cpp's mmap mode does: no read into a
 * window first. Each tensor's pages are mapped in by one MADV_POPULATE_READ (no fault per 64 KiB;
 * a page past the end of a file cut short is EFAULT there, not a SIGBUS: the tensor is then left
 * to the read, which says what is wrong), handed to ggml_backend_tensor_set whole, and their
 * page-table entries dropped again (MADV_DONTNEED: on a shared file mapping the page cache keeps
 * the pages), so that what the mapping holds resident stays the tensors that stay mapped. */

struct from_map {
    const struct wm_llama_map *map;
    const wm_read_item *items; /* the read's: only the repacked (WM_READ_SINK_WRITES) are taken */
    unsigned char *done;
    size_t n;
    uint64_t total;             /* bytes of the items */
    atomic_size_t next;         /* items handed out */
    atomic_uint_fast64_t bytes; /* bytes converted */
    atomic_size_t converted;    /* tensors converted */
    atomic_int stop;            /* the progress callback cancelled */
    bool wait;                  /* the populate brings every item's pages in: wait for them */
};

const void *wm__llama_map_bring(const struct wm_llama_map *map, size_t index, size_t nb,
                                bool wait) {
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t at = (uintptr_t)wm__llama_map_tensor(map, index);
    wm_llama_span span = {at / pg * pg, (at + nb + pg - 1) / pg * pg};
    if (!nb || (!wait && cached(&span, 1, true) != span.hi - span.lo) ||
        populate_piece((void *)span.lo, span.hi - span.lo) != 0)
        return NULL;
    return (const void *)at;
}

void wm__llama_map_drop(const void *at, size_t nb) {
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), lo = ((uintptr_t)at + pg - 1) / pg * pg;
    uintptr_t hi = ((uintptr_t)at + nb) / pg * pg;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void wm__llama_map_keep_only(const struct wm_llama_map *map, const wm_llama_span *spans, size_t n) {
    for (size_t b = 0; b < wm_model_buffer_count(map->model); b++) {
        uintptr_t at = (uintptr_t)wm_model_buffer_data(map->model, b);
        uintptr_t end = at + wm_model_buffer_size(map->model, b);
        if (!at) continue;
        for (size_t k = 0; k <= n && at < end; k++) {
            uintptr_t lo = k < n ? spans[k].lo : end, hi = k < n ? spans[k].hi : end;
            if (hi <= at) continue;
            if (lo > end) lo = end;
            if (lo > at) (void)madvise((void *)at, lo - at, MADV_DONTNEED);
            at = hi;
        }
    }
}

/* Item k converted from the mapping, if it is repacked and its bytes are all cached: true where
 * it was. */
static bool convert_one(struct from_map *c, size_t k) {
    const wm_read_item *it = &c->items[k];
    if (!(it->flags & WM_READ_SINK_WRITES)) return false;
    struct ggml_tensor *t = it->user;
    size_t nb = ggml_nbytes(t);
    const void *src = wm__llama_map_bring(c->map, it->tensor, nb, c->wait);
    if (!src) return false;
    ggml_backend_tensor_set(t, src, 0, nb);
    wm__llama_map_drop(src, nb);
    c->done[k] = 1;
    atomic_fetch_add(&c->bytes, nb);
    atomic_fetch_add(&c->converted, 1);
    return true;
}

static void *from_map_thread(void *arg) {
    struct from_map *c = arg;
    for (size_t k; !atomic_load(&c->stop) && (k = atomic_fetch_add(&c->next, 1)) < c->n;)
        convert_one(c, k);
    return NULL;
}

wm_status wm__llama_from_map(const struct wm_llama_map *map, const wm_read_item *items, size_t n,
                             unsigned char *done, bool wait, unsigned threads,
                             wm_progress_fn progress, void *progress_user, wm_llama_stats *s) {
    struct from_map c = {.map = map, .items = items, .done = done, .n = n, .wait = wait};
    atomic_init(&c.next, 0);
    atomic_init(&c.bytes, 0);
    atomic_init(&c.converted, 0);
    atomic_init(&c.stop, 0);
    for (size_t k = 0; k < n; k++)
        if (items[k].flags & WM_READ_SINK_WRITES)
            c.total += ggml_nbytes((const struct ggml_tensor *)items[k].user);
    double t0 = wm__llama_now();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned want = threads ? threads : (unsigned)(cpus > 0 ? cpus : 1);
    if (want > MAX_POPULATE_THREADS) want = MAX_POPULATE_THREADS;
    if (want > n) want = (unsigned)(n ? n : 1);
    pthread_t th[MAX_POPULATE_THREADS];
    unsigned started = 0;
    while (started + 1 < want && !FAULT(THREAD) &&
           pthread_create(&th[started], NULL, from_map_thread, &c) == 0)
        started++; /* the calling thread is one more (and reports the progress) */
    for (size_t k; !atomic_load(&c.stop) && (k = atomic_fetch_add(&c.next, 1)) < n;)
        if (convert_one(&c, k) && progress &&
            progress(progress_user, atomic_load(&c.bytes), c.total) != 0)
            atomic_store(&c.stop, 1);
    for (unsigned k = 0; k < started; k++)
        pthread_join(th[k], NULL);
    s->repacked_mapped += atomic_load(&c.converted);
    s->bytes_repacked_mapped += atomic_load(&c.bytes);
    s->seconds_repacked_mapped += wm__llama_now() - t0;
    return atomic_load(&c.stop) ? WM_ECANCELED : WM_OK;
}

/* ---- locks ---- */

void wm__llama_lock(void *addr, size_t len, wm_llama_stats *s) {
    if (!len || s->lock_short) return; /* llama.cpp warns once, then locks no more */
    int e = FAULT_ERRNO(LOCK);
    if (!e && mlock(addr, len) == 0) {
        s->bytes_locked += len;
        return;
    }
    if (!e) e = errno;
    s->lock_short = 1;
    wm__llama_say(GGML_LOG_LEVEL_WARN,
                  "wm_llama_load: warning: failed to mlock %zu-byte buffer (after previously "
                  "locking %llu bytes): %s\nTry increasing RLIMIT_MEMLOCK ('ulimit -l' as root).\n",
                  len, (unsigned long long)s->bytes_locked, strerror(e));
}

void wm__llama_warn_fallback(const char *path, const char *why) {
    wm__llama_say(GGML_LOG_LEVEL_WARN,
                  "wm_llama_load: %s: load_mode AUTO resolves to %s, which the bridge cannot map "
                  "here (%s): it reads the model (NONE) instead\n",
                  path, mode_name(LLAMA_LOAD_MODE_MMAP), why);
}
