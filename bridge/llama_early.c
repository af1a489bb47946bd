/*
 * llama_early.c: the mapped modes' repacked tensors converted while llama.cpp makes the model
 * (llama_bridge.h).
 *
 * A warm mapped load of a model that runs on the CPU spent its time in two steps, one after the
 * other: llama.cpp's making of the model (its vocabulary, its tensors, its buffers: 40-70 ms for
 * the 1.2 GiB bench model on the GPU host) and the conversion of the tensors an extra buffer type
 * takes (AMX or CPU_REPACK: 836 of its 1086 MiB there, 75-90 ms), which needs the buffers the
 * making ends with. Which tensors those are, their types and shapes, are known before the making
 * (llama_place.c sends them there), and a conversion depends on the file's bytes alone, wherever
 * it writes. So from the start of the making, threads convert them from the mapping into pages of
 * their own (the scratch: each tensor on whole pages, as many bytes as its buffer type asks for
 * it), and as llama.cpp gives each tensor its place, the making's own thread moves those pages
 * there (mremap: page tables, no copy). While this runs, the wrappers of the extra types lay
 * their tensors out on whole pages (llama_own.c).
 *
 * A tensor is converted once: by a thread here (WAITING, CONVERTING, then CONVERTED, or SKIPPED
 * where the page cache lacks some of its bytes), or, where its place came first (TAKEN), after
 * the making as before (wm__llama_from_map, or the read). A place that finds its tensor
 * CONVERTING waits for it. Pages converted but not moved (a tensor llama.cpp placed otherwise
 * than foreseen, a move refused) go with the scratch, and the tensor is converted again, into its
 * place.
 */
#include "llama_bridge.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { WAITING, CONVERTING, CONVERTED, SKIPPED, TAKEN, PLACED };

#define MAX_EARLY_THREADS 64

typedef struct early_tensor {
    struct ggml_tensor t; /* file tensor `index` as the extra type takes it, data in the scratch */
    size_t index;
    size_t len;                      /* its scratch: whole pages */
    ggml_backend_buffer_type_t real; /* the extra type */
    size_t extra;                    /* its index in the extras */
    _Atomic int state;
} early_tensor;

struct wm_llama_early {
    const wm_file *f;
    const struct wm_llama_map *map;
    early_tensor *e; /* pages: e_len bytes */
    size_t n, e_len;
    uint32_t *of; /* per file tensor: its entry plus 1; 0: none (pages: of_len bytes) */
    size_t n_of, of_len;
    char *scratch_map, *scratch; /* the scratch's mapping, and from its first 2 MiB boundary */
    size_t scratch_map_len, scratch_len;  /* (scratch_len: the tensors' pages, from scratch) */
    ggml_backend_buffer_t buf[MAX_EXTRA]; /* the scratch as a buffer of each extra type */
    _Atomic size_t next;
    _Atomic int stop; /* the making reached its buffers (or ended): no conversion begins */
    bool wait;        /* cold: the populate brings the tensors' pages in; wait for them */
    pthread_mutex_t lock;
    pthread_cond_t ended; /* a CONVERTING tensor's end */
    pthread_t th[MAX_EARLY_THREADS];
    unsigned started;
    double t0, end;           /* the start, and the last conversion's end (under lock) */
    size_t placed, converted; /* tensors moved into place; converted here */
    uint64_t bytes_placed;
};

static size_t page(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* The tensor as the file holds it (its name, type and shape; contiguous, no data yet). */
static void file_tensor(struct ggml_tensor *t, const wm_tensor_info *ti) {
    memset(t, 0, sizeof *t);
    t->type = (enum ggml_type)ti->type;
    for (int d = 0; d < GGML_MAX_DIMS; d++)
        t->ne[d] = (int64_t)ti->shape[d];
    t->nb[0] = ggml_type_size(t->type);
    t->nb[1] = t->nb[0] * (size_t)(t->ne[0] / ggml_blck_size(t->type));
    for (int d = 2; d < GGML_MAX_DIMS; d++)
        t->nb[d] = t->nb[d - 1] * (size_t)t->ne[d - 1];
    snprintf(t->name, sizeof t->name, "%s", ti->name);
}

static void early_free(struct wm_llama_early *e) {
    for (size_t k = 0; k < MAX_EXTRA; k++)
        wm__llama_own_scratch_free(e->buf[k]);
    wm__llama_pages_free(e->scratch_map, e->scratch_map_len);
    wm__llama_pages_free(e->e, e->e_len);
    wm__llama_pages_free(e->of, e->of_len);
    pthread_cond_destroy(&e->ended);
    pthread_mutex_destroy(&e->lock);
    wm__llama_pages_free(e, sizeof *e);
}

/* The entries (the tensors extra type k takes, per `pop`: POP_EXTRA + k, where own[k] wraps it)
 * and their places in the scratch; false where there is none or no room. */
static bool plan(struct wm_llama_early *e, const unsigned char *pop, const extras *x,
                 ggml_backend_buffer_type_t const *own) {
    size_t nt = wm_file_tensor_count(e->f), pg = page(), at = 0;
    e->e_len = nt * sizeof *e->e;
    e->of_len = nt * sizeof *e->of;
    e->e = wm__llama_pages(e->e_len);
    e->of = e->e ? wm__llama_pages(e->of_len) : NULL;
    if (!e->of) return false;
    e->n_of = nt;
    for (size_t i = 0; i < nt; i++) {
        wm_tensor_info ti;
        if (pop[i] < POP_EXTRA || pop[i] - (size_t)POP_EXTRA >= x->n ||
            wm_file_tensor(e->f, i, &ti) != WM_OK || !ti.nbytes)
            continue;
        size_t k = pop[i] - (size_t)POP_EXTRA;
        if (wm__llama_own_real(own[k]) != x->buft[k]) continue; /* not the bridge's: no pages */
        early_tensor *t = &e->e[e->n];
        file_tensor(&t->t, &ti);
        t->index = i;
        t->real = x->buft[k];
        t->extra = k;
        size_t size = ggml_backend_buft_get_alloc_size(t->real, &t->t);
        t->len = (size + pg - 1) / pg * pg;
        t->t.data = (void *)(uintptr_t)at; /* an offset until the scratch exists */
        at += t->len;
        atomic_init(&t->state, WAITING);
        e->of[i] = (uint32_t)(++e->n);
    }
    if (!e->n) return false;
    const size_t huge = (size_t)2 << 20;
    e->scratch_map_len = at + huge;
    e->scratch_map = wm__llama_pages(e->scratch_map_len);
    if (!e->scratch_map) return false;
    e->scratch = (char *)(((uintptr_t)e->scratch_map + huge - 1) / huge * huge);
    e->scratch_len = at;
    if (at >= huge) (void)madvise(e->scratch, at / huge * huge, MADV_HUGEPAGE);
    for (size_t j = 0; j < e->n; j++) {
        early_tensor *t = &e->e[j];
        size_t k = t->extra;
        if (!e->buf[k] && !(e->buf[k] = wm__llama_own_scratch(own[k], e->scratch, at)))
            return false;
        t->t.buffer = e->buf[k];
        t->t.data = e->scratch + (uintptr_t)t->t.data;
        if (ggml_backend_buffer_init_tensor(e->buf[k], &t->t) != GGML_STATUS_SUCCESS) return false;
    }
    return true;
}

/* Entry j converted from the mapping into the scratch, unless its place took it first. */
static void convert(struct wm_llama_early *e, size_t j) {
    early_tensor *t = &e->e[j];
    int s = WAITING;
    if (!atomic_compare_exchange_strong(&t->state, &s, CONVERTING)) return;
    size_t nb = ggml_nbytes(&t->t);
    const void *src = wm__llama_map_bring(e->map, t->index, nb, e->wait);
    if (src) {
        ggml_backend_tensor_set(&t->t, src, 0, nb);
        wm__llama_map_drop(src, nb);
    }
    pthread_mutex_lock(&e->lock);
    atomic_store(&t->state, src ? CONVERTED : SKIPPED);
    if (src) e->converted++, e->end = wm__llama_now();
    pthread_cond_broadcast(&e->ended);
    pthread_mutex_unlock(&e->lock);
}

static void *early_thread(void *arg) {
    struct wm_llama_early *e = arg;
    for (size_t j; !atomic_load(&e->stop) && (j = atomic_fetch_add(&e->next, 1)) < e->n;)
        if (!atomic_load(&e->stop)) convert(e, j);
    return NULL;
}

struct wm_llama_early *wm__llama_early_start(const wm_file *f, const struct wm_llama_map *map,
                                             const unsigned char *pop, const extras *x,
                                             ggml_backend_buffer_type_t const *own, bool wait,
                                             unsigned threads) {
#ifndef __linux__
    (void)f, (void)map, (void)pop, (void)x, (void)own, (void)wait, (void)threads;
    return NULL; /* the move is mremap's */
#else
    if (!map || !pop || !x->n || !wm_file_tensor_count(f)) return NULL;
    struct wm_llama_early *e = wm__llama_pages(sizeof *e);
    if (!e) return NULL;
    e->f = f;
    e->map = map;
    e->wait = wait;
    e->t0 = wm__llama_now();
    atomic_init(&e->next, 0);
    atomic_init(&e->stop, 0);
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->ended, NULL);
    if (!plan(e, pop, x, own)) {
        early_free(e);
        return NULL; /* every repacked tensor converted after the making: only slower */
    }
    /* the making has the calling thread */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned want = threads ? threads : (unsigned)(cpus > 0 ? cpus : 1);
    want = want > 1 ? want - 1 : 1;
    if (want > MAX_EARLY_THREADS) want = MAX_EARLY_THREADS;
    if (want > e->n) want = (unsigned)e->n;
    while (e->started < want && !FAULT(THREAD) &&
           pthread_create(&e->th[e->started], NULL, early_thread, e) == 0)
        e->started++;
    if (!e->started) {
        early_free(e);
        return NULL;
    }
    return e;
#endif
}

static bool same_shape(const struct ggml_tensor *a, const struct ggml_tensor *b) {
    if (a->type != b->type) return false;
    for (int d = 0; d < GGML_MAX_DIMS; d++)
        if (a->ne[d] != b->ne[d] || a->nb[d] != b->nb[d]) return false;
    return true;
}

bool wm__llama_early_place(struct wm_llama_early *e, ggml_backend_buffer_type_t real,
                           ggml_backend_buffer_t b, struct ggml_tensor *t) {
#ifdef __linux__
    size_t index = 0;
    if (wm_file_find_tensor(e->f, t->name, &index) != WM_OK || index >= e->n_of || !e->of[index])
        return true;
    early_tensor *x = &e->e[e->of[index] - 1];
    size_t pg = page(), size = ggml_backend_buft_get_alloc_size(real, t);
    uintptr_t at = (uintptr_t)t->data, base = (uintptr_t)ggml_backend_buffer_get_base(b);
    uintptr_t end = base + (ggml_backend_buffer_get_size(b) + pg - 1) / pg * pg;
    bool fits = x->real == real && same_shape(&x->t, t) && at % pg == 0 && at >= base &&
                (size + pg - 1) / pg * pg == x->len && x->len <= end - at;
    bool wait_all = wm__llama_test_early == 1 && fits;
    /* The places come in llama.cpp's order, much the file's: a conversion begun now would be the
     * next place's, which would wait for it, and so on (the making then waits for every
     * conversion left, one at a time). Those left are converted after the making, by every
     * thread at once. */
    if (!wait_all) atomic_store(&e->stop, 1);
    int s = WAITING;
    if ((!wait_all && atomic_compare_exchange_strong(&x->state, &s, TAKEN)) || !fits) return true;
    pthread_mutex_lock(&e->lock); /* its conversion (or, wait_all, any to come) ends */
    while ((s = atomic_load(&x->state)) == CONVERTING || s == WAITING)
        pthread_cond_wait(&e->ended, &e->lock);
    pthread_mutex_unlock(&e->lock);
    if (s != CONVERTED) return true; /* skipped: not all cached; converted after the making */
    if (!FAULT(MAP) &&
        mremap(x->t.data, x->len, x->len, MREMAP_MAYMOVE | MREMAP_FIXED, t->data) == t->data) {
        atomic_store(&x->state, PLACED);
        e->placed++;
        e->bytes_placed += ggml_nbytes(t);
        return true;
    }
    /* Refused (ENOMEM: the process's mappings at their limit): the place may have lost its pages
     * (the kernel unmaps the destination first), so fresh ones there, or the buffer fails. The
     * tensor is converted after the making, into its place. */
    void *p = FAULT(PAGES) ? MAP_FAILED
                           : mmap(t->data, x->len, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    return p == t->data;
#else
    (void)e, (void)real, (void)b, (void)t;
    return true;
#endif
}

/* The scratch but the pages moved out of it: their ranges are the process's free address space
 * since, which a mapping made meanwhile (malloc's, a thread's stack) may have taken. */
static void unmap_scratch(struct wm_llama_early *e) {
    if (!e->scratch_map) return;
    char *from = e->scratch_map; /* the start of a run of the scratch's own pages */
    for (size_t j = 0; j < e->n; j++) {
        early_tensor *t = &e->e[j];
        if (atomic_load(&t->state) != PLACED) continue;
        if ((char *)t->t.data > from) munmap(from, (size_t)((char *)t->t.data - from));
        from = (char *)t->t.data + t->len;
    }
    char *end = e->scratch_map + e->scratch_map_len;
    if (end > from) munmap(from, (size_t)(end - from));
    e->scratch_map = NULL;
}

void wm__llama_early_join(struct wm_llama_early *e, wm_llama_stats *s) {
    if (!e || !e->started) return;
    atomic_store(&e->stop, 1);
    for (unsigned k = 0; k < e->started; k++)
        pthread_join(e->th[k], NULL);
    e->started = 0;
    unmap_scratch(e);
    s->repacked_early = e->placed;
    s->bytes_repacked_early = e->bytes_placed;
    s->seconds_early = e->converted ? e->end - e->t0 : 0;
}

bool wm__llama_early_placed(const struct wm_llama_early *e, size_t index) {
    return e && index < e->n_of && e->of[index] &&
           atomic_load(&e->e[e->of[index] - 1].state) == PLACED;
}

void wm__llama_early_free(struct wm_llama_early *e) {
    if (!e) return;
    wm_llama_stats ignored;
    wm__llama_early_join(e, &ignored); /* (a making that never returned: cannot be) */
    early_free(e);
}
