/*
 * llama.c: the llama.cpp bridge (include/weightmap_llama.h; docs/LLAMA.md): the load. Public API
 * only, of weightmap (weightmap.h) and of llama.cpp v0.4.0 and its ggml (llama.h, ggml.h,
 * ggml-backend.h, gguf.h); the bridge's other files are listed in llama_bridge.h.
 *
 * A load: weightmap's open and the checks ggml would abort on (ggml_check.h), all before
 * llama.cpp is called; the file's metadata and tensor table copied into a gguf_context
 * (llama_meta.c); llama_model_init_from_user, whose callback only records each tensor llama.cpp
 * made (so that the reads run afterwards, all in parallel, rather than one tensor at a time
 * inside the callback); each recorded tensor checked against the file and given a destination
 * (its host memory, or the window: ggml_backend_tensor_set); one wm_file_read_tensors for all;
 * the model handed over. Every failure after the model exists frees it with llama_model_free.
 * The bridge's own memory (the record, the read items, the metadata's staging, the override
 * patterns) is page-allocated and unmapped before the call returns, so no allocator cache
 * keeps it; what llama.cpp and gguf allocate is theirs.
 *
 * Sections: pages; options; the record; repacked in row groups; the load.
 */
#include "llama_bridge.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

/* ---- pages ---- */

void *wm__llama_pages(size_t len) {
    if (FAULT(ALLOC)) return NULL;
    void *p = mmap(NULL, len ? len : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void wm__llama_pages_free(void *p, size_t len) {
    if (p) munmap(p, len ? len : 1);
}

double wm__llama_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- options ---- */

/* The caller's sized options into a full-size copy (its first `size` bytes, zeros after); a
 * longer struct that sets a byte this bridge does not know is refused. */
static wm_status copy_sized(void *dst, size_t full, const void *src, const char *what,
                            wm_error *err) {
    memset(dst, 0, full);
    if (!src) return WM_OK;
    uint32_t n;
    memcpy(&n, src, sizeof n);
    if (n < sizeof n)
        return fail(err, WM_EINVAL, "%s: size %u is smaller than its size field", what, n);
    for (size_t k = full; k < n; k++)
        if (((const unsigned char *)src)[k])
            return fail(err, WM_EINVAL,
                        "%s: size %u sets a field past the %zu bytes this bridge knows (byte %zu)",
                        what, n, full, k);
    memcpy(dst, src, n < full ? n : full);
    return WM_OK;
}

/* ---- the record: the tensors llama.cpp made, in the order it asked ---- */

typedef struct record {
    struct ggml_tensor **t;
    size_t n, cap;
    bool out_of_memory;
} record;

static void record_free(record *r) {
    wm__llama_pages_free(r->t, r->cap * sizeof *r->t);
    memset(r, 0, sizeof *r);
}

/* llama_model_init_from_user's set_tensor_data: only noted here (the reads come after, all at
 * once). The callback cannot fail a load, so running out of room is remembered and the model
 * refused afterwards. */
static void on_tensor(struct ggml_tensor *t, void *user) {
    record *r = user;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 512;
        struct ggml_tensor **grown = wm__llama_pages(cap * sizeof *grown);
        if (!grown) {
            r->out_of_memory = true;
            return;
        }
        if (r->n) memcpy(grown, r->t, r->n * sizeof *grown);
        wm__llama_pages_free(r->t, r->cap * sizeof *r->t);
        r->t = grown;
        r->cap = cap;
    }
    r->t[r->n++] = t;
}

/* ---- repacked in row groups (wm_llama_repack AUTO) ----
 * A repack buffer's set_tensor rewrites a tensor of t->ne[1] rows at t->data from the bytes
 * given; a shallow copy of the tensor's struct whose rows are a run of the tensor's (data at
 * their place in the buffer, the buffer and the repack traits in `extra` the tensor's own) has
 * ggml repack just those rows. That the result is the whole repack's bytes there is a property
 * of ggml's layouts (groups of 4, 8 or 16 rows, in order, each the size of its rows), proven per
 * buffer type, tensor type and row length by the probe below before any tensor relies on it. */

#define ROW_GROUP 16 /* rows: a multiple of every interleave of ggml's repacked layouts */
#define MAX_PROOFS 16

typedef struct group_proof {
    ggml_backend_buffer_type_t buft;
    enum ggml_type type;
    int64_t ne0;
    void *extra;
    bool ok;
} group_proof;

/* `s`: `rows` rows of tensor t as a tensor of their own, its data at `data`. */
static void rows_of(struct ggml_tensor *s, const struct ggml_tensor *t, void *data, int64_t rows) {
    *s = *t;
    s->ne[1] = rows;
    s->ne[2] = s->ne[3] = 1;
    s->nb[2] = s->nb[3] = s->nb[1] * (size_t)rows;
    s->data = data;
    s->view_src = NULL;
    s->view_offs = 0;
}

/* Whether ggml repacks 2 x ROW_GROUP rows of t's kind whole into the same bytes as the two
 * groups one by one (patterned bytes: every byte of the source differs from its neighbours').
 * Only a layout the size of the file's rows can be (the buffer type's alloc size of the tensor,
 * and of the probe's, its nbytes: ggml's AMX type packs q8_0 rows bigger, with sums of their
 * own, and nothing of such a layout lies at a row's file offset). False where memory for the
 * probe is lacking: the tensor is then handed over whole. */
static bool groups_repack_alone(const struct ggml_tensor *t) {
    size_t row = t->nb[1], half = row * ROW_GROUP, n = 2 * half;
    ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(t->buffer);
    struct ggml_tensor s;
    rows_of(&s, t, NULL, 2 * ROW_GROUP);
    if (ggml_backend_buft_get_alloc_size(buft, t) != ggml_nbytes(t) ||
        ggml_backend_buft_get_alloc_size(buft, &s) != n)
        return false;
    rows_of(&s, t, NULL, ROW_GROUP);
    if (ggml_backend_buft_get_alloc_size(buft, &s) != half) return false;
    unsigned char *mem = wm__llama_pages(3 * n);
    if (!mem) return false;
    unsigned char *src = mem, *whole = mem + n, *parts = mem + 2 * n;
    uint32_t x = 0x9e3779b9u;
    for (size_t k = 0; k < n; k++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        src[k] = (unsigned char)(x >> 24);
    }
    rows_of(&s, t, whole, 2 * ROW_GROUP);
    ggml_backend_tensor_set(&s, src, 0, n);
    rows_of(&s, t, parts, ROW_GROUP);
    ggml_backend_tensor_set(&s, src, 0, half);
    rows_of(&s, t, parts + half, ROW_GROUP);
    ggml_backend_tensor_set(&s, src + half, 0, half);
    bool ok = memcmp(whole, parts, n) == 0;
    wm__llama_pages_free(mem, 3 * n);
    return ok;
}

/* ---- the load ---- */

typedef struct load {
    const wm_file *f;
    const char *path;
    wm_llama_options o;
    struct llama_model_params p;
    extras x;
    record rec;
    wm_read_item *items;
    size_t n_items, items_len;
    bool serial; /* some buffer is on a device other than the CPU: one upload at a time */
    group_proof proofs[MAX_PROOFS]; /* repacked in row groups: what was proven, per kind */
    size_t n_proofs;
    wm_file *own_file; /* wm_llama_load's own open of the file (prefetch), else NULL */
    wm_llama_stats stats;
    int mode;                 /* enum llama_load_mode used (never AUTO) */
    struct wm_llama_map *map; /* the mapped modes: the file's mapping (the load's reference) */
    wm_llama_span *spans;     /* the mapped tensors' ranges (pages, rec.n entries) */
    struct wm_llama_populate *populate;      /* the mapping's pages coming in beside the load */
    struct wm_llama_populate *populate_more; /* those of mapped tensors it did not foresee */
    int cpu_layers;      /* mapped with layers on a GPU: the layers kept on the CPU; else -1 */
    bool populate_whole; /* the populate is of the whole mapping (nothing repacked) */
    unsigned char *pop;  /* else per file tensor: POP_MAPPED where the populate has its range,
                            POP_EXTRA + k where extra type k takes it (pages) */
    size_t pop_len;
    size_t unforeseen; /* mapped tensors the populate did not foresee (a caller's override) */
    char why[200];     /* why this load cannot map */
    size_t n_spans, spans_len;
    wm__llama_cuda cuda;   /* the tensors in CUDA buffers, for the staged pipeline (upload AUTO) */
    bool cuda_on;          /* upload AUTO and this weightmap has the CUDA backend */
    wm__llama_ahead ahead; /* those tensors loaded ahead, during the model's making */
    struct wm_llama_early *early; /* the repacked tensors converted during it (llama_early.c) */
    uint64_t progress_base, progress_all; /* progress: bytes before this read, and of all reads */
} load;

/* Bytes of a tensor llama.cpp asks for but the file lacks, where leaving it out would compute
 * the same: a bias added (zeros) or rope frequency factors divided by (ones). */
static bool neutral_value(const struct ggml_tensor *t, float *value) {
    const char *name = ggml_get_name(t);
    if (t->type != GGML_TYPE_F32) return false;
    if (wm__llama_ends_with(name, ".bias")) return *value = 0.0f, true;
    if (strstr(name, "rope_freqs") || strstr(name, "rope_factors")) return *value = 1.0f, true;
    return false;
}

static wm_status fill_neutral(load *l, struct ggml_tensor *t, wm_error *err) {
    float v;
    if (!neutral_value(t, &v))
        return fail(err, WM_EFORMAT,
                    "%s: llama.cpp asks for tensor '%s' (%s), which the file lacks and which has "
                    "no neutral value",
                    l->path, ggml_get_name(t), ggml_type_name(t->type));
    size_t nb = ggml_nbytes(t);
    float *buf = wm__llama_pages(nb);
    if (!buf)
        return fail(err, WM_ENOMEM, "%s: out of memory filling tensor '%s'", l->path,
                    ggml_get_name(t));
    for (size_t k = 0; k < nb / sizeof *buf; k++)
        buf[k] = v;
    ggml_backend_tensor_set(t, buf, 0, nb);
    wm__llama_pages_free(buf, nb);
    l->stats.filled++;
    return WM_OK;
}

/* The file tensor that fills `t` (output.weight: token_embd.weight where the file has no head);
 * its type and shape must be t's. */
static wm_status match_tensor(const load *l, const struct ggml_tensor *t, size_t *index,
                              wm_error *err) {
    const char *name = ggml_get_name(t);
    if (wm_file_find_tensor(l->f, name, index) != WM_OK &&
        (strcmp(name, "output.weight") != 0 ||
         wm_file_find_tensor(l->f, "token_embd.weight", index) != WM_OK))
        return WM_ENOENT;
    wm_tensor_info ti;
    wm_file_tensor(l->f, *index, &ti);
    bool same = (int)ti.type == (int)t->type && ti.nbytes == ggml_nbytes(t);
    for (int d = 0; d < GGML_MAX_DIMS; d++)
        same = same && (int64_t)ti.shape[d] == t->ne[d];
    if (!same)
        return fail(err, WM_EFORMAT,
                    "%s: tensor '%s' is %s [%" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64
                    "] in the file; the model expects %s [%" PRId64 ", %" PRId64 ", %" PRId64
                    ", %" PRId64 "]",
                    l->path, name, wm_type_name(ti.type), ti.shape[0], ti.shape[1], ti.shape[2],
                    ti.shape[3], ggml_type_name(t->type), t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    return WM_OK;
}

/* Whether repacked tensor t may be handed over in row groups as it is read: repack AUTO, a core
 * library that cuts pieces on row groups (1.5), a matrix whose rows are whole groups (at least
 * two), and a probe of its kind that held (run once per load and kind). */
static bool in_row_groups(load *l, const struct ggml_tensor *t) {
    if (l->o.repack != WM_LLAMA_REPACK_AUTO || wm_version_number() < 1005000) return false;
    /* ggml's CPU_REPACK type only, whose set_tensor repacks on the calling thread: the AMX type's
     * conversion starts a thread per CPU for each call (ggml-cpu/amx/common.h, parallel_for), so
     * in pieces a load started a team per piece (on the H200 host, warm 271 ms against 222 with
     * each tensor whole; bench/RESULTS.md, llama) */
    ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(t->buffer);
    if (strcmp(ggml_backend_buft_name(buft), "CPU_REPACK") != 0) return false;
    if (t->ne[2] != 1 || t->ne[3] != 1 || t->ne[1] < 2 * ROW_GROUP || t->ne[1] % ROW_GROUP)
        return false;
    if (t->nb[1] != ggml_row_size(t->type, t->ne[0])) return false; /* not contiguous rows */
    for (size_t k = 0; k < l->n_proofs; k++) {
        const group_proof *q = &l->proofs[k];
        if (q->buft == buft && q->type == t->type && q->ne0 == t->ne[0] && q->extra == t->extra)
            return q->ok;
    }
    bool ok = groups_repack_alone(t);
    if (l->n_proofs < MAX_PROOFS)
        l->proofs[l->n_proofs++] = (group_proof){
            .buft = buft, .type = t->type, .ne0 = t->ne[0], .extra = t->extra, .ok = ok};
    return ok;
}

/* The mapped modes: tensor t (file tensor `index`) of a CPU buffer that holds the mapping lies in
 * the mapping, where its bytes are the file's: its place in the buffer is left unused (never
 * touched: no page of it is ever faulted in). */
static bool map_tensor(load *l, struct ggml_tensor *t, size_t index) {
    if (!l->map || !t->buffer || wm__llama_buffer_map(t->buffer) != l->map) return false;
    t->data = wm__llama_map_tensor(l->map, index);
    if (!l->populate_whole && !(l->pop && l->pop[index] == POP_MAPPED)) l->unforeseen++;
    l->stats.mapped++;
    l->stats.bytes_mapped += ggml_nbytes(t);
    l->spans[l->n_spans++] =
        (wm_llama_span){(uintptr_t)t->data, (uintptr_t)t->data + ggml_nbytes(t)};
    return true;
}

/* A repacked tensor whose pages were converted during the making and moved into its place
 * (llama_early.c): converted from the mapping, as wm__llama_from_map's are; true where it was. */
static bool placed_early(load *l, const struct ggml_tensor *t, size_t index) {
    if (!wm__llama_early_placed(l->early, index)) return false;
    l->stats.windowed++;
    l->stats.repacked++;
    l->stats.repacked_mapped++;
    l->stats.bytes_repacked_mapped += ggml_nbytes(t);
    return true;
}

/* A tensor in a CUDA device's buffer is copied from the ahead buffer where it was loaded ahead
 * (llama_ahead.c), else goes to the staged pipeline (llama_cuda.c), not to the window: true where
 * it was taken. */
static bool staged_tensor(load *l, struct ggml_tensor *t, size_t index) {
    int ordinal;
    if (!l->cuda_on || !wm__llama_cuda_buffer(t->buffer, &ordinal)) return false;
    if (wm__llama_ahead_take(&l->ahead, t, index, ordinal)) {
        l->stats.ahead++;
    } else if (!wm__llama_cuda_add(&l->cuda, index, (uint64_t)(uintptr_t)t->data, ordinal,
                                   ggml_nbytes(t))) {
        return false;
    }
    l->stats.staged++;
    l->stats.bytes_staged += ggml_nbytes(t);
    return true;
}

/* One read item per recorded tensor that the file holds and the mapping does not (others
 * filled); each read in place into host memory or through the window, or (in a CUDA buffer) by
 * the staged pipeline. */
static wm_status make_items(load *l, wm_error *err) {
    l->cuda_on = l->o.upload == WM_LLAMA_UPLOAD_AUTO && wm_backend_available(WM_BACKEND_CUDA);
    if (l->cuda_on) {
        wm_status st = wm__llama_cuda_begin(&l->cuda, l->f, l->rec.n, err);
        if (st) return st;
    }
    l->items_len = (l->rec.n ? l->rec.n : 1) * sizeof *l->items;
    l->items = wm__llama_pages(l->items_len);
    l->spans_len = l->map ? (l->rec.n ? l->rec.n : 1) * sizeof *l->spans : 0;
    l->spans = l->map ? wm__llama_pages(l->spans_len) : NULL;
    if (!l->items || (l->map && !l->spans))
        return fail(err, WM_ENOMEM, "%s: out of memory for %zu read items", l->path, l->rec.n);
    for (size_t i = 0; i < l->rec.n; i++) {
        struct ggml_tensor *t = l->rec.t[i];
        size_t index = 0;
        wm_status st = match_tensor(l, t, &index, err);
        if (st == WM_ENOENT)
            st = fill_neutral(l, t, err);
        else if (!st && ggml_nbytes(t) && !map_tensor(l, t, index) && !placed_early(l, t, index) &&
                 !staged_tensor(l, t, index)) {
            wm_read_item *it = &l->items[l->n_items++];
            ggml_backend_buffer_t buf = t->buffer;
            ggml_backend_buffer_type_t buft = buf ? ggml_backend_buffer_get_type(buf) : NULL;
            *it = (wm_read_item){.tensor = index, .user = t};
            if (buf && ggml_backend_buffer_is_host(buf) && l->o.upload != WM_LLAMA_UPLOAD_WINDOW) {
                it->dst = t->data;
                l->stats.in_place++;
                wm_tensor_info ti;
                if (wm_file_tensor(l->f, index, &ti) == WM_OK &&
                    (uintptr_t)t->data % GRID == ti.offset % GRID)
                    l->stats.bytes_laid_out += ti.nbytes;
            } else {
                l->stats.windowed++;
                if (buft && wm__llama_is_extra(&l->x, buft)) {
                    /* the sink's ggml_backend_tensor_set repacks into t->data (CPU memory) */
                    it->dst = t->data;
                    it->flags = WM_READ_WHOLE | WM_READ_SINK_WRITES;
                    if (in_row_groups(l, t)) {
                        it->flags = WM_READ_SINK_ROWS | WM_READ_SINK_WRITES;
                        l->stats.repacked_rows++;
                    }
                    l->stats.repacked++;
                }
                ggml_backend_dev_t dev = buft ? ggml_backend_buft_get_device(buft) : NULL;
                if (dev && ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_CPU)
                    l->serial = true;
            }
        }
        if (st) return st;
    }
    return WM_OK;
}

/* llama.cpp's host buffers are fresh malloc'd memory: filling them faults a 4 KiB page at a
 * time, which bounds a warm load (docs/LLAMA.md, "Cold loads: prefetch and prefault"). Each buffer
 * an item reads into is advised huge pages first (the whole 2 MiB pages inside it: a hint on memory
 * that the weights fill whole, which llama.cpp frees with the model). */
static void advise_buffers(const load *l) {
    const size_t huge = (size_t)2 << 20;
    ggml_backend_buffer_t done[16];
    size_t n_done = 0;
    for (size_t i = 0; i < l->n_items; i++) {
        if (!l->items[i].dst) continue;
        ggml_backend_buffer_t b = ((struct ggml_tensor *)l->items[i].user)->buffer;
        bool seen = false;
        for (size_t k = 0; k < n_done; k++)
            seen = seen || done[k] == b;
        if (seen) continue;
        if (n_done < sizeof done / sizeof *done) done[n_done++] = b;
        uintptr_t lo = (uintptr_t)ggml_backend_buffer_get_base(b);
        uintptr_t hi = lo + ggml_backend_buffer_get_size(b);
        lo = (lo + huge - 1) / huge * huge;
        hi = hi / huge * huge;
        if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    }
}

/* The sink of the read: a window of a tensor's bytes into its buffer, by ggml's own upload. */
static int to_buffer(void *user, const wm_read_item *item, uint64_t offset, const void *bytes,
                     size_t len) {
    (void)user;
    if (FAULT(DEVICE)) return 1;
    struct ggml_tensor *t = item->user;
    if (item->flags & WM_READ_SINK_ROWS) {
        /* whole groups of rows (wm_read_options.row_group), repacked where they lie */
        size_t row = t->nb[1];
        if (offset % row || len % row) return 2; /* cannot happen: the engine cuts on groups */
        struct ggml_tensor s;
        rows_of(&s, t, (char *)t->data + offset, (int64_t)(len / row));
        ggml_backend_tensor_set(&s, bytes, 0, len);
        return 0;
    }
    ggml_backend_tensor_set(t, bytes, (size_t)offset, len);
    return 0;
}

/* llama.cpp's progress callback, fed with the bytes read: the staged fill's, then the read's,
 * as one count. */
static int on_progress(void *user, uint64_t done, uint64_t total) {
    const load *l = user;
    done += l->progress_base;
    total = l->progress_all ? l->progress_all : total;
    float f = total ? (float)done / (float)total : 1.0f;
    return l->p.progress_callback && !l->p.progress_callback(f, l->p.progress_callback_user_data);
}

/* The tensors in CUDA buffers first (they take what the read ahead brought in, while it lasts),
 * then the read of the rest. */
static wm_status fill_cuda(load *l, wm_error *err) {
    uint64_t rest = 0;
    for (size_t i = 0; i < l->n_items; i++) {
        wm_tensor_info ti;
        if (wm_file_tensor(l->f, l->items[i].tensor, &ti) == WM_OK) rest += ti.nbytes;
    }
    uint64_t ahead = l->ahead.bytes_taken, early = l->stats.bytes_repacked_early; /* done */
    l->progress_all = early + ahead + l->cuda.bytes + rest;
    l->progress_base = early + ahead;
    wm_status st = wm__llama_cuda_fill(&l->cuda, l->f, &l->o, on_progress, l, err);
    l->stats.seconds_staged = l->cuda.seconds;
    if (!st) l->stats.bytes_read += ahead + l->cuda.bytes;
    l->progress_base = early + ahead + l->cuda.bytes;
    return st;
}

/* The mapped modes: the repacked tensors whose bytes are cached, converted straight from the
 * mapping (wm__llama_from_map), and taken off the read's items. */
static wm_status from_map(load *l, wm_error *err) {
    bool any = false;
    for (size_t i = 0; l->map && i < l->n_items && !any; i++)
        any = (l->items[i].flags & WM_READ_SINK_WRITES) != 0;
    if (!any) return WM_OK;
    size_t n = l->n_items;
    unsigned char *done = wm__llama_pages(n);
    if (!done) return WM_OK; /* all of them read: only slower */
    uint64_t before = l->stats.bytes_repacked_mapped;
    wm_status st =
        wm__llama_from_map(l->map, l->items, n, done, wm__llama_populate_brings_more(l->populate),
                           l->o.threads, on_progress, l, &l->stats);
    /* the read's items: those not converted, in their order */
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (!done[i])
            l->items[kept++] = l->items[i];
        else if (l->items[i].flags & WM_READ_SINK_ROWS)
            l->stats.repacked_rows--; /* handed over whole, from the mapping */
    }
    l->n_items = kept;
    l->progress_base += l->stats.bytes_repacked_mapped - before;
    wm__llama_pages_free(done, n);
    if (st) return fail(err, WM_ECANCELED, "%s: the progress callback cancelled the load", l->path);
    return WM_OK;
}

static wm_status read_all(load *l, wm_error *err) {
    wm_read_options ro = WM_READ_OPTIONS_INIT;
    ro.threads = l->o.threads;
    /* mapped: through the page cache, where the populate fills the whole mapping beside the
     * reads; where it fills only the mapped tensors' ranges (layers on a GPU, or tensors
     * repacked) the rest are read as in the read modes (direct I/O for cold bytes) */
    ro.direct_io = l->map && l->populate_whole ? WM_DIRECT_OFF : l->o.direct_io;
    ro.window = l->o.window;
    ro.flags = l->serial ? WM_READ_SINK_SERIAL : 0;
    ro.row_group = ROW_GROUP;
    if (l->o.prefault == WM_LLAMA_PREFAULT_ON) ro.flags |= WM_READ_PREFAULT;
    ro.sink = to_buffer;
    ro.progress = on_progress;
    ro.progress_user = l;
    advise_buffers(l);
    wm_status st = from_map(l, err);
    if (st) return st;
    /* what was converted from the mapping, as progress: during the making (llama_early.c), and
     * by from_map's other threads (its calling thread reported its own); may cancel */
    if (l->stats.bytes_repacked_mapped && on_progress(l, 0, 0))
        return fail(err, WM_ECANCELED, "%s: the progress callback cancelled the load", l->path);
    double t0 = wm__llama_now();
    st = wm_file_read_tensors(l->f, l->items, l->n_items, &ro, err);
    l->stats.seconds_read = wm__llama_now() - t0;
    for (size_t i = 0; !st && i < l->n_items; i++) {
        wm_tensor_info ti;
        wm_file_tensor(l->f, l->items[i].tensor, &ti);
        l->stats.bytes_read += ti.nbytes;
    }
    return st;
}

/* Before llama.cpp is called: a GGUF file whose every tensor ggml can hold. */
static wm_status check_file(const wm_file *f, wm_error *err) {
    if (wm_file_format(f) != WM_FORMAT_GGUF)
        return fail(err, WM_EFORMAT, "%s: llama.cpp loads GGUF files; this one is %s",
                    wm_file_path(f), wm_format_name(wm_file_format(f)));
    return check_tensors(f, err);
}

/* llama.cpp refused the model: its own reason (the last error line of its log, whatever the
 * process's callback does with it), and what to do where the cause is known. */
static wm_status refused(const load *l, const char *why, wm_error *err) {
    const char *hint = "";
    if (!ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU))
        hint = " (no ggml backend is loaded: call ggml_backend_load_all() first)";
    else if (wm_file_tensor_count(l->f) == 0)
        hint = " (the file has no tensors: a vocabulary-only GGUF, no weights to load)";
    return fail(err, WM_EDEVICE, "%s: llama.cpp refused the model%s: %.140s", l->path, hint,
                why[0] ? why : "(no error line in its log)");
}

/* Whether the model runs on the CPU alone, its weights offered to the CPU's extra buffer types
 * (repacked: llama.cpp's use_extra_bufts, which the bridge applies itself: llama_place.c). */
static bool runs_on_cpu(const load *l) { return wm__llama_runs_on_cpu(&l->p) && l->cpu_layers < 0; }
static bool repacks(const load *l) {
    return l->o.repack != WM_LLAMA_REPACK_OFF && l->p.use_extra_bufts && runs_on_cpu(l);
}

/* llama.cpp's model over the file's metadata, its buffers allocated, the tensors recorded. */
static wm_status make_model(load *l, struct llama_model **model, wm_error *err) {
    struct gguf_context *g = NULL;
    overrides ov = {0};
    wm_status st = wm__llama_metadata(l->f, &g, err);
    /* a cached file's populate from here, beside llama.cpp's making: begun with the mapping, its
     * threads (holding the address space's lock a piece at a time) held the metadata's
     * allocations back 10-15 ms on the GPU host, 20 on the development VM */
    if (!st) wm__llama_populate_go(l->populate);
    bool cpu = runs_on_cpu(l);
    bool repack = repacks(l);
    if (repack && !l->x.cpu) wm__llama_cpu_extras(&l->x); /* unless start_populate did */
    /* (no_alloc, llama.cpp's memory-fit pass, makes dummy buffers of the type asked for: those
     * must be of llama.cpp's own types, which the scheduler knows) */
    bool mine =
        l->o.buffers == WM_LLAMA_BUFFERS_AUTO && (cpu || l->cpu_layers >= 0) && !l->p.no_alloc;
    ggml_backend_buffer_type_t own[MAX_EXTRA], own_cpu = NULL;
    if (mine) {
        extras probe_x = l->x;
        if (!probe_x.cpu) probe_x.cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        own_cpu = wm__llama_own_type(&probe_x, ggml_backend_cpu_buffer_type());
    }
    for (size_t k = 0; k < l->x.n; k++) {
        own[k] = own_cpu ? wm__llama_own_type(&l->x, l->x.buft[k]) : NULL;
        if (!own[k]) own[k] = l->x.buft[k];
    }
    if (!st && (l->x.n || own_cpu))
        st = wm__llama_overrides(l->f, &l->p, &l->x, own, own_cpu, l->cpu_layers, &ov, err);
    if (!st) {
        struct llama_model_params p = l->p;
        if (ov.list) p.tensor_buft_overrides = ov.list;
        /* mapped with layers on a GPU: the CPU's tensors in its own type, not the GPU's host
         * (pinned) type, as llama.cpp's mmap mode does (llama-model-loader.cpp create_tensor:
         * "avoid using a host buffer when using mmap") */
        if (l->cpu_layers >= 0) p.no_host = true;
        if (own_cpu) wm__llama_notes_begin(l->f, l->map); /* laid out as the file; mapped */
        /* the repacked tensors converted meanwhile, moved into their places (llama_early.c): a
         * cached file's, or a cold one's as the populate brings their pages in */
        bool wait = wm__llama_populate_brings_more(l->populate);
        if (own_cpu && repack && l->map && !l->populate_whole && l->populate &&
            (wait || !wm__llama_populate_cold(l->populate)) && wm__llama_test_early != 0)
            l->early = wm__llama_early_start(l->f, l->map, l->pop, &l->x, own, wait, l->o.threads);
        wm__llama_own_early_begin(l->early);
        char why[200];
        double t0 = wm__llama_now();
        wm__llama_log_begin(why, sizeof why);
        *model = FAULT(DEVICE) ? NULL : llama_model_init_from_user(g, on_tensor, &l->rec, p);
        wm__llama_log_end();
        l->stats.seconds_model = wm__llama_now() - t0;
        wm__llama_own_early_end();
        wm__llama_early_join(l->early, &l->stats); /* stopped; the pages not moved unmapped */
        if (own_cpu) wm__llama_notes_end();
        if (!*model)
            st = refused(l, why, err);
        else if (l->rec.out_of_memory)
            st = fail(err, WM_ENOMEM, "%s: out of memory recording llama.cpp's tensors", l->path);
    }
    wm__llama_pages_free(ov.mem, ov.mem_len);
    if (g) gguf_free(g);
    return st;
}

/* The weight buffers' bytes in the bridge's own pages. */
static uint64_t own_bytes(const load *l) {
    ggml_backend_buffer_t seen[MAX_OWN * 4];
    size_t n = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < l->rec.n; i++) {
        ggml_backend_buffer_t b = l->rec.t[i]->buffer;
        bool known = !wm__llama_is_own(b);
        for (size_t k = 0; !known && k < n; k++)
            known = seen[k] == b;
        if (known) continue;
        if (n < sizeof seen / sizeof *seen) seen[n++] = b;
        bytes += ggml_backend_buffer_get_size(b);
    }
    return bytes;
}

/* The process's free malloc memory back to the system (wm_llama_trim); seconds it took. */
static double trim(const wm_llama_options *o) {
    double t0 = wm__llama_now();
#ifdef __GLIBC__
    if (o->trim == WM_LLAMA_TRIM_AUTO) malloc_trim(0);
#else
    (void)o;
#endif
    return wm__llama_now() - t0;
}

static void give_stats(const load *l, double seconds_trim) {
    if (!l->o.stats || l->o.stats->size <= sizeof(uint32_t)) return;
    wm_llama_stats st = l->stats;
    st.seconds_trim = seconds_trim;
    uint32_t n = l->o.stats->size;
    memcpy((char *)l->o.stats + sizeof n, (char *)&st + sizeof n,
           (n < sizeof st ? n : sizeof st) - sizeof n);
}

/* One of wm_llama_options' enums: 0 (AUTO) to last, or WM_EINVAL naming the field. */
static wm_status choice(const load *l, const char *field, int v, int last, const char *names,
                        wm_error *err) {
    if ((unsigned)v <= (unsigned)last) return WM_OK;
    return fail(err, WM_EINVAL, "%s: wm_llama_options.%s %d is none of %s", l->path, field, v,
                names);
}

/* The options, each of wm_llama_options' enums 0 (AUTO) to its last, and the load mode. */
static wm_status check_options(load *l, const struct llama_model_params *params,
                               const wm_llama_options *opts, wm_error *err) {
    wm_status st = copy_sized(&l->o, sizeof l->o, opts, "wm_llama_options", err);
    if (!st)
        st = choice(l, "repack", (int)l->o.repack, WM_LLAMA_REPACK_WHOLE, "AUTO, OFF, WHOLE", err);
    if (!st)
        st = choice(l, "upload", (int)l->o.upload, WM_LLAMA_UPLOAD_TENSOR_SET,
                    "AUTO, WINDOW, TENSOR_SET", err);
    if (!st)
        st = choice(l, "buffers", (int)l->o.buffers, WM_LLAMA_BUFFERS_LLAMA, "AUTO, LLAMA", err);
    if (!st) st = choice(l, "trim", (int)l->o.trim, WM_LLAMA_TRIM_OFF, "AUTO, OFF", err);
    if (!st)
        st = choice(l, "prefault", (int)l->o.prefault, WM_LLAMA_PREFAULT_ON, "AUTO, OFF, ON", err);
    if (!st)
        st = choice(l, "prefetch", (int)l->o.prefetch, WM_LLAMA_PREFETCH_OFF, "AUTO, OFF", err);
    l->p = params ? *params : llama_model_default_params();
    if (!st)
        st = wm__llama_mode(l->path, &l->p, l->o.load_mode, &l->stats.load_mode_asked, &l->mode,
                            err);
    return st;
}

int wm__llama_test_cpu_layers = -1;
int wm__llama_test_early = -1;

/* A device of the model that makes its buffers from the mapping itself (Metal): llama.cpp maps
 * its tensors too, which the bridge does not. NULL where there is none; else the reason, in why. */
static const char *device_maps(const struct llama_model_params *p, char *why, size_t why_len) {
    ggml_backend_dev_t list[64];
    size_t n = wm__llama_model_devices(p, list, 64);
    for (size_t k = 0; k < n; k++) {
        struct ggml_backend_dev_props props;
        memset(&props, 0, sizeof props);
        ggml_backend_dev_get_props(list[k], &props);
        if (!props.caps.buffer_from_host_ptr) continue;
        snprintf(why, why_len,
                 "device %s: llama.cpp makes its buffers from the mapping (buffer_from_host_ptr), "
                 "which the bridge does not",
                 ggml_backend_dev_name(list[k]));
        return why;
    }
    return NULL;
}

const char *wm__llama_cannot_map(const wm_file *f, const struct llama_model_params *p,
                                 const wm_llama_options *o, int *cpu_layers, char *why,
                                 size_t why_len) {
    *cpu_layers = -1;
    if (o->buffers != WM_LLAMA_BUFFERS_AUTO) return "wm_llama_options.buffers is LLAMA";
    if (p->no_alloc) return "params.no_alloc";
    extras x = {.cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU)};
    if (!wm__llama_own_type(&x, ggml_backend_cpu_buffer_type()))
        return "the ggml this process runs is not the one the bridge was built with";
    if (wm__llama_runs_on_cpu(p)) {
        *cpu_layers = wm__llama_test_cpu_layers; /* -1 but in test_llama's cases */
        return NULL;
    }
    const char *dev = device_maps(p, why, why_len);
    if (dev) return dev;
    *cpu_layers = wm__llama_cpu_layers(f, p);
    if (*cpu_layers < 0)
        return "layers on a GPU, and no <general.architecture>.block_count in the file to tell "
               "which stay on the CPU";
    return NULL;
}

/* Whether a cold file's repacked tensors may come through the page cache: where the system has
 * room (wm_mem_available_get: MemAvailable, the cgroup's room, which counts the page cache) for
 * the whole file's pages beside the repacked tensors' converted copies. Else they are read past
 * it, with direct I/O, after the making (1.8.4's way: slower, no page cache of theirs to be
 * reclaimed on a machine that has none to spare). Unknown (macOS): room. */
int64_t wm__llama_test_room = -1;
static bool room_for_more(const load *l, const wm_llama_span *more, size_t n_more) {
    uint64_t repacked = 0;
    for (size_t k = 0; k < n_more; k++)
        repacked += more[k].hi - more[k].lo;
    if (!repacked) return false;
    wm_mem_available a = WM_MEM_AVAILABLE_INIT;
    if (wm__llama_test_room >= 0)
        a.host = (uint64_t)wm__llama_test_room;
    else if (wm_mem_available_get(WM_BACKEND_CPU, 0, &a, NULL) != WM_OK)
        return false;
    return a.host == UINT64_MAX || a.host >= wm_file_tensor_bytes(l->f) + repacked;
}

/* The populate, from the moment the file is mapped: the whole mapping where the model runs on the
 * CPU and nothing is repacked, else the ranges of the tensors that stay mapped (stays_mapped;
 * llama.cpp's mmap mode populates the whole file, device and repacked tensors too) and, where
 * those are cold, the repacked tensors' ranges, brought in before them (llama_map.c order_spans:
 * their conversions then run while the mapped tensors come in), each in the file's order.
 *
 * Warm, the repacked tensors' pages are not mapped in beside the making: on the 16-CPU GPU host,
 * whose CPU repacks 836 of a 1086 MiB model, the whole mapping's populate outlasted the load (200
 * ms against llama.cpp's 111 for the whole load); they are converted from the mapping by threads
 * of their own (llama_early.c, wm__llama_from_map). Cold, every byte comes through the page cache
 * once, from the load's start, and the repacked tensors are converted from the mapping as their
 * pages come (the conversions fault them in, waiting on the populate's reads): until 1.8.4 they
 * were read after the making, with direct I/O, and the disk idled while the making ran (the
 * development VM, 1.2 GiB: 0.70x the disk against 0.81-0.83x, at the page cache's own speed there;
 * 256 MiB: 0.66x against 0.89x; bench/RESULTS.md). */
static void start_populate(load *l) {
    if (repacks(l)) wm__llama_cpu_extras(&l->x); /* make_model's too */
    if (l->cpu_layers < 0 && !l->x.n) {
        l->populate_whole = true;
        l->populate = wm__llama_populate_start(l->map, NULL, 0, NULL, 0, l->o.threads, true);
        return;
    }
    size_t nt = wm_file_tensor_count(l->f), n = 0, n_more = 0;
    size_t len = (nt ? nt : 1) * sizeof(wm_llama_span);
    wm_llama_span *spans = wm__llama_pages(2 * len), *more = spans ? spans + (nt ? nt : 1) : NULL;
    l->pop_len = nt ? nt : 1;
    l->pop = spans ? wm__llama_pages(l->pop_len) : NULL;
    if (!l->pop) { /* the pages come in as they are touched (populate_unforeseen): only slower */
        wm__llama_pages_free(spans, 2 * len);
        return;
    }
    for (size_t i = 0; i < nt; i++) {
        wm_tensor_info ti;
        if (wm_file_tensor(l->f, i, &ti) != WM_OK || !ti.nbytes) continue;
        int k = l->cpu_layers < 0 ? wm__llama_extra_for(&l->x, l->f, i, ti.name) : -1;
        uintptr_t lo = (uintptr_t)wm__llama_map_tensor(l->map, i);
        wm_llama_span range = {lo, lo + (uintptr_t)ti.nbytes};
        if (k >= 0) {
            l->pop[i] = (unsigned char)(POP_EXTRA + k);
            more[n_more++] = range;
        }
        if (l->cpu_layers >= 0 ? !wm__llama_host_tensor(ti.name, l->cpu_layers) : k >= 0) continue;
        spans[n++] = range;
        l->pop[i] = POP_MAPPED;
    }
    if (!room_for_more(l, more, n_more)) n_more = 0;
    l->populate = wm__llama_populate_start(l->map, spans, n, more, n_more, l->o.threads, true);
    wm__llama_pages_free(spans, 2 * len);
}

/* The mapped modes, before llama.cpp is called: the file mapped (or AUTO read instead, where
 * this load cannot map; an explicit mode is refused). */
static wm_status open_map(load *l, wm_error *err) {
    l->cpu_layers = -1;
    if (!wm__llama_mode_maps(l->mode)) return WM_OK;
    const char *why =
        wm__llama_cannot_map(l->f, &l->p, &l->o, &l->cpu_layers, l->why, sizeof l->why);
    if (why && l->stats.load_mode_asked == LLAMA_LOAD_MODE_AUTO) {
        wm__llama_warn_fallback(l->path, why);
        l->mode = LLAMA_LOAD_MODE_NONE;
        l->stats.load_mode_fell_back = 1;
        l->cpu_layers = -1;
        return WM_OK;
    }
    if (why)
        return fail(err, WM_EUNSUPPORTED, "%s: load_mode %s: the bridge cannot map here (%s)",
                    l->path, l->mode == LLAMA_LOAD_MODE_MMAP ? "MMAP" : "MMAP_MLOCK", why);
    wm_status st = wm__llama_map_open(l->f, &l->map, err);
    if (!st) start_populate(l);
    return st;
}

/* Mapped tensors the populate did not foresee (a caller's override to the CPU type): their pages
 * too, beside the reads. */
static void populate_unforeseen(load *l) {
    if (!l->unforeseen || !l->n_spans) return;
    /* (their cached bytes not counted again: the spans include the foreseen ones) */
    l->populate_more =
        wm__llama_populate_start(l->map, l->spans, l->n_spans, NULL, 0, l->o.threads, false);
    wm__llama_populate_go(l->populate_more);
}

/* The mapping's pages in (the populate joined), then what the mode locks: the mapped tensors'
 * ranges, and each of the bridge's own host buffers that is not mapped, as llama.cpp locks each
 * host buffer it reads (llama-model.cpp load_tensors: `use_mlock && ggml_backend_buffer_is_host`;
 * the extra types, CPU_REPACK and AMX, are not host, so it locks no repacked buffer; 1.8.3 did). */
static wm_status populate_and_lock(load *l, wm_error *err) {
    wm_status st = wm__llama_populate_finish(l->populate, false, l->path, &l->stats, err);
    wm_status more =
        wm__llama_populate_finish(l->populate_more, false, l->path, &l->stats, st ? NULL : err);
    l->populate = l->populate_more = NULL;
    if (!st) st = more;
    if (st) return st;
    l->n_spans = l->map ? wm__llama_merge(l->spans, l->n_spans) : 0;
    /* what the repacked (or device) tensors' conversions and the populate's faults mapped around
     * their ranges, in the ranges of tensors not used from the mapping: unmapped again */
    if (l->map && !l->populate_whole) wm__llama_map_keep_only(l->map, l->spans, l->n_spans);
    if (!wm__llama_mode_locks(l->mode)) return st;
    for (size_t k = 0; l->map && k < l->n_spans; k++)
        wm__llama_lock((void *)l->spans[k].lo, l->spans[k].hi - l->spans[k].lo, &l->stats);
    ggml_backend_buffer_t seen[MAX_OWN * 4];
    size_t n = 0;
    for (size_t i = 0; i < l->rec.n; i++) {
        ggml_backend_buffer_t b = l->rec.t[i]->buffer;
        bool skip = !wm__llama_is_own(b) || wm__llama_buffer_map(b) ||
                    !ggml_backend_buffer_is_host(b); /* (the repacked types are not host) */
        for (size_t k = 0; !skip && k < n; k++)
            skip = seen[k] == b;
        if (skip) continue;
        if (n < sizeof seen / sizeof *seen) seen[n++] = b;
        wm__llama_lock(ggml_backend_buffer_get_base(b), ggml_backend_buffer_get_size(b), &l->stats);
    }
    return WM_OK;
}

/* What the read ahead to the device did (llama_ahead.c). */
static void ahead_stats(load *l) {
    const wm__llama_ahead *a = &l->ahead;
    l->stats.bytes_ahead = a->bytes_read;
    l->stats.seconds_ahead = a->seconds;
    l->stats.seconds_ahead_wait = a->seconds_wait;
    l->stats.seconds_ahead_copy = a->seconds_copy;
    l->stats.seconds_ahead_buffer = a->seconds_buffer;
}

/* The load up to the model handed over (or freed); the trim and the stats are the caller's. */
static wm_status load_model(load *l, const wm_file *file, const struct llama_model_params *params,
                            const wm_llama_options *opts, struct llama_model **out, wm_error *err) {
    l->f = file;
    l->path = wm_file_path(file);
    wm_status st = check_options(l, params, opts, err);
    if (!st) st = check_file(file, err);
    if (!st) st = open_map(l, err);
    if (st) return st;
    /* the device's tensors to the device meanwhile, where they can be known (llama_ahead.c);
     * else the start of a cold file into memory */
    bool ahead = wm__llama_ahead_start(&l->ahead, file, &l->p, &l->o);
    if (l->own_file && l->o.prefetch == WM_LLAMA_PREFETCH_AUTO && l->o.direct_io != WM_DIRECT_OFF &&
        !l->map && !ahead) {
        /* the disk's work while llama.cpp makes the model, into the file's own memory until
         * read_all's read begins (which copies what came and frees it), or wm_llama_load's close
         * on a failure. 256 MiB: on the H200 host the model's making outlasts 128 MiB (the read
         * ahead idle for 10-20 ms; paired with the disk round by round, 0.96x at 256 against
         * 0.86x at 128, bench/RESULTS.md, llama); only what is read before the stop is memory. */
        uint64_t want = wm_file_tensor_bytes(file) / 4, most = (uint64_t)256 << 20;
        l->stats.bytes_prefetched = wm_file_prefetch(l->own_file, want < most ? want : most);
    }
    l->stats.size = sizeof l->stats;
    l->stats.load_mode = l->mode;
    l->stats.cpu_layers = l->cpu_layers;
    struct llama_model *model = NULL;
    st = make_model(l, &model, err);
    if (ahead) wm__llama_ahead_join(&l->ahead, st != WM_OK);
    if (!st) st = make_items(l, err);
    if (!st) populate_unforeseen(l);
    if (!st) st = fill_cuda(l, err);
    if (!st) st = read_all(l, err);
    if (!st) st = populate_and_lock(l, err);
    l->stats.tensors = l->rec.n;
    if (!st) l->stats.bytes_own = own_bytes(l);
    record_free(&l->rec);
    wm__llama_pages_free(l->items, l->items_len);
    wm__llama_pages_free(l->spans, l->spans_len);
    wm__llama_pages_free(l->pop, l->pop_len);
    wm__llama_cuda_free(&l->cuda);
    ahead_stats(l);
    wm__llama_ahead_free(&l->ahead);
    wm__llama_early_free(l->early);
    wm__llama_populate_finish(l->populate, true, l->path, &l->stats, NULL); /* a failure's */
    wm__llama_populate_finish(l->populate_more, true, l->path, &l->stats, NULL);
    if (st && model) llama_model_free(model); /* drops its buffers' references to the mapping */
    wm__llama_map_release(l->map);            /* the load's: the last unmaps */
    if (st) return st;
    *out = model;
    return WM_OK;
}

/* A refused options struct trims nothing (its trim field is not to be trusted). */
static bool options_read(const load *l) { return l->stats.size != 0; }

wm_status wm_llama_load_file(const wm_file *file, const struct llama_model_params *params,
                             const wm_llama_options *opts, struct llama_model **out,
                             wm_error *err) {
    if (out) *out = NULL;
    if (!file || !out) return fail(err, WM_EINVAL, "wm_llama_load_file: NULL file or out");
    load l;
    memset(&l, 0, sizeof l);
    wm_status st = load_model(&l, file, params, opts, out, err);
    double t = options_read(&l) ? trim(&l.o) : 0;
    if (!st) give_stats(&l, t);
    return st;
}

wm_status wm_llama_load(const char *path, const struct llama_model_params *params,
                        const wm_llama_options *opts, struct llama_model **out, wm_error *err) {
    if (out) *out = NULL;
    if (!path || !out) return fail(err, WM_EINVAL, "wm_llama_load: NULL path or out");
    wm_file *f = NULL;
    wm_status st = wm_file_open_set(path, &f, err); /* a split set whole, from any part */
    if (st) return st;
    load l;
    memset(&l, 0, sizeof l);
    l.own_file = f;
    st = load_model(&l, f, params, opts, out, err);
    wm_file_close(f);
    double t = options_read(&l) ? trim(&l.o) : 0;
    if (!st) give_stats(&l, t);
    return st;
}
