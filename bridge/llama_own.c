/*
 * llama_own.c: the llama.cpp bridge's own weight buffers (llama_bridge.h), the one file of the
 * bridges that includes a header of ggml's that is not public: ggml-backend-impl.h (the layout of
 * a buffer and a buffer type), with ggml-version.h (the version of the source it came from), both
 * from scripts/llama.sh's internal/, given to this file alone (CMakeLists.txt) and only where
 * WM_LLAMA_OWN_BUFFERS says they were found; scripts/check-layering.sh refuses them anywhere
 * else. Nothing is relied on before same_ggml() finds the running ggml to be that version.
 *
 * ggml's CPU buffer type (and CPU_REPACK, which allocates through it) takes its memory from
 * posix_memalign. Freed by llama_model_free, a buffer over glibc's mmap threshold is unmapped,
 * and the threshold rises to its size: from the second load of a process on, every weight buffer
 * comes from the heap and stays in the footprint after llama_model_free (+20.9 MiB on a 64 MiB
 * model, bench/RESULTS.md "Under the tracer").
 *
 * So where the model runs on the CPU, every weight tensor is sent (params.tensor_buft_overrides)
 * to a buffer type of the bridge's that wraps the real one, CPU or an extra (repack) type: its
 * name, alignment, max size, alloc size and is_host are the real type's, and its alloc_buffer
 * maps the pages itself (anonymous, 2 MiB aligned, huge pages advised) and makes the buffer
 * with ggml_backend_buffer_init whose type is the REAL one, so that ggml and llama.cpp see the
 * real type everywhere after the load: the scheduler (supports_buft), ggml-cpu's repack kernels
 * (they test buffer->buft == ggml_backend_cpu_repack_buffer_type()), llama.cpp's "model buffer
 * size" lines. Its functions are the real type's buffer's (read from a 64-byte buffer of the
 * real type, freed at once: one small malloc block), but free_buffer, which unmaps. An override
 * that is not ggml_backend_cpu_buffer_type() itself is taken as it is (llama-model-loader.cpp
 * load_tensor's buffer type choice), so llama.cpp allocates the context of each wrapper with it.
 * The wrappers live as long as the process (static; a buffer holds the real type, never one).
 *
 * That layout is ggml's internal one (ggml-backend-impl.h), so it is used only where it is the
 * one the bridge was built with: ggml_version() the header's version, the CPU backend's API
 * version the header's, and a probe buffer of each real type that holds what a CPU buffer does
 * (its type, size and base as asked; for an extra type, the CPU buffer's get_base and
 * free_buffer; or ggml's AMX type, whose buffer has functions of its own over the same layout:
 * ggml-cpu/amx/amx.cpp, at the version checked, makes its buffer from ggml_aligned_malloc's
 * memory, its context that memory, get_base returning it, free_buffer freeing it and nothing
 * else, every other function working on tensor->data or on the context as the base). Where any
 * check fails the type is not wrapped and llama.cpp allocates it, as without the bridge
 * (wm_llama_stats.bytes_own says how many bytes were the bridge's). AMX was not wrapped before
 * 1.8.4 (its buffers were llama.cpp's: posix_memalign). */

#include "llama_bridge.h"

#include <string.h>

#ifdef WM_LLAMA_OWN_BUFFERS
#include <ggml-backend-impl.h> /* internal: scripts/llama.sh's internal/ */
#include <ggml-cpu.h>
#include <ggml-version.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>
typedef struct own_type {
    struct ggml_backend_buffer_type buft; /* first: the wrapper a buft pointer points at */
    ggml_backend_buffer_type_t real;
    struct ggml_backend_buffer_i iface; /* the real type's buffer's, free_buffer: own_free, and
                                           an extra type's init_tensor: own_init_tensor */
    enum ggml_status (*real_init)(ggml_backend_buffer_t, struct ggml_tensor *); /* the real one */
} own_type;

static struct {
    pthread_mutex_t lock;
    int checked; /* 0 not yet, 1 the layout is ours, -1 it is not */
    void (*cpu_free)(ggml_backend_buffer_t);
    void *(*cpu_base)(ggml_backend_buffer_t);
    own_type t[MAX_OWN];
    _Atomic size_t n; /* t[0 .. n) made (each whole before n counts it) and never changed */
} owns = {.lock = PTHREAD_MUTEX_INITIALIZER};

static own_type *own_of(ggml_backend_buffer_type_t w) { return (own_type *)(void *)w; }

static const char *own_name(ggml_backend_buffer_type_t w) {
    return ggml_backend_buft_name(own_of(w)->real);
}
/* The load's early conversions (llama_early.c) while llama.cpp makes its model on this thread. */
static _Thread_local struct wm_llama_early *early_now;

/* An extra type's wrapper during a making with early conversions lays its tensors out on pages
 * (each tensor's place then starts a page and its size is padded to whole pages: at most a page
 * more a tensor), so that the pages converted early can be moved into place whole. */
static bool on_pages(const own_type *o) {
    return early_now && o->real != ggml_backend_cpu_buffer_type();
}

static size_t own_alignment(ggml_backend_buffer_type_t w) {
    size_t a = ggml_backend_buft_get_alignment(own_of(w)->real), pg = (size_t)sysconf(_SC_PAGESIZE);
    return on_pages(own_of(w)) && a < pg ? pg : a;
}
static size_t own_max_size(ggml_backend_buffer_type_t w) {
    return ggml_backend_buft_get_max_size(own_of(w)->real);
}
/* ---- own buffers laid out as the file ----
 * A direct read lands in a tensor's place only where its address and its file offset agree on
 * the 4 KiB grid (src/reader.c, read_direct); elsewhere it goes through a thread's staging and a
 * copy. ggml packs a buffer's tensors at its alignment (32 bytes for the CPU's) in its
 * context's order, so few would agree by chance. But ggml asks the buffer type for each
 * tensor's size, in that order, just before it allocates the buffer that holds them
 * (ggml_backend_alloc_ctx_tensors_from_buft, ggml-alloc.c): while the bridge makes a model, the
 * wrapper notes each size (padded to the alignment) with the tensor's file offset, and its
 * alloc_buffer then knows where each tensor will lie and starts the buffer at the offset within
 * a page that puts the most bytes in agreement with the file (a context whose tensors come as
 * in the file: all of them). A wrong guess costs only speed: the reader checks each
 * destination itself. The notes are the calling thread's (a load on another thread keeps its
 * own), set only inside make_model. */
typedef struct noted {
    uint64_t file_off; /* UINT64_MAX: not a tensor of the file */
    size_t size;       /* padded to the alignment, as ggml adds it up */
} noted;

typedef struct notes {
    const wm_file *f;
    ggml_backend_buffer_type_t w; /* the wrapper whose tensors these are */
    noted *e;                     /* pages, cap entries */
    size_t n, cap, len;
} notes;

static _Thread_local notes *notes_now;
static _Thread_local notes notes_mine;

#define RESIDUE_STEP 32u /* GGUF's and ggml's smallest alignment: offsets agree in its steps */

static void note(notes *ns, ggml_backend_buffer_type_t w, const struct ggml_tensor *t,
                 size_t size) {
    if (ns->w != w) ns->n = 0, ns->w = w;
    if (ns->n == ns->cap) ns->n = 0; /* more than any one buffer: start again */
    size_t align = ggml_backend_buft_get_alignment(w), index;
    noted *e = &ns->e[ns->n++];
    e->size = align ? (size + align - 1) / align * align : size;
    e->file_off = UINT64_MAX;
    wm_tensor_info ti;
    if (wm_file_find_tensor(ns->f, t->name, &index) == WM_OK &&
        wm_file_tensor(ns->f, index, &ti) == WM_OK)
        e->file_off = ti.offset;
}

/* The offset within a page at which a buffer of `size` bytes of w should start: the notes that
 * end at the last one (or the one before: ggml notes the tensor that would not fit before it
 * allocates the buffer of those that do) and add up to size are its tensors, in order; the
 * offset is the one that puts the most of their bytes where their file offsets agree on the
 * grid, among those the alignment allows. 0 where no such notes are. Consumes those notes. */
static size_t own_shift(notes *ns, ggml_backend_buffer_type_t w, size_t size) {
    if (!ns || ns->w != w) return 0;
    size_t align = ggml_backend_buft_get_alignment(w);
    for (size_t drop = 0; drop < 2 && drop < ns->n; drop++) {
        size_t end = ns->n - drop, start = end, sum = 0;
        while (start > 0 && sum < size)
            sum += ns->e[--start].size;
        if (sum != size) continue;
        uint64_t weight[GRID / RESIDUE_STEP] = {0};
        size_t at = 0;
        for (size_t k = start; k < end; k++) {
            const noted *e = &ns->e[k];
            if (e->file_off != UINT64_MAX) {
                size_t r = (size_t)((e->file_off % GRID + GRID - at % GRID) % GRID);
                if (r % RESIDUE_STEP == 0 && (!align || r % align == 0))
                    weight[r / RESIDUE_STEP] += e->size;
            }
            at += e->size;
        }
        size_t best = 0;
        for (size_t r = 1; r < GRID / RESIDUE_STEP; r++)
            if (weight[r] > weight[best]) best = r;
        memmove(ns->e, ns->e + end, (ns->n - end) * sizeof *ns->e);
        ns->n -= end;
        return best * RESIDUE_STEP;
    }
    return 0;
}

static size_t own_alloc_size(ggml_backend_buffer_type_t w, const struct ggml_tensor *t) {
    size_t size = ggml_backend_buft_get_alloc_size(own_of(w)->real, t);
    if (notes_now) note(notes_now, w, t, size);
    return size;
}
static bool own_is_host(ggml_backend_buffer_type_t w) {
    return ggml_backend_buft_is_host(own_of(w)->real);
}

static const size_t huge_page = (size_t)2 << 20;

static size_t own_len(size_t size) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (size + pg - 1) / pg * pg;
}

/* A buffer's pages: a header page (what the buffer holds), then from a 2 MiB boundary its
 * bytes, which start `shift` bytes into their first page (b->context): own_len(shift + size). */
typedef struct own_header {
    struct wm_llama_map *map; /* the file's mapping its tensors lie in (mapped modes), or NULL */
    size_t counted;           /* its bytes in own_live (0: a mapped buffer, whose pages stay
                                 untouched: the mapping holds its tensors, the ledger counts it) */
} own_header;

/* Bytes of the own buffers alive in the process that hold their tensors (not a mapping's): what
 * a pool proves an eviction by (wm__llama_own_bytes). */
static _Atomic uint64_t own_live;

static _Thread_local struct wm_llama_map *map_now; /* the load's mapping, during its making */

static own_header *header_of(ggml_backend_buffer_t b) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), shift = (uintptr_t)b->context % pg;
    return (own_header *)(void *)((char *)b->context - shift - pg);
}

static void forget_early(ggml_backend_buffer_t b);

static void own_free(ggml_backend_buffer_t b) {
    forget_early(b); /* (a making that failed after this buffer was made) */
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), shift = (uintptr_t)b->context % pg;
    own_header *h = header_of(b);
    struct wm_llama_map *map = h->map;
    atomic_fetch_sub(&own_live, (uint64_t)h->counted);
    munmap(h, pg + own_len(shift + b->size));
    if (map) wm__llama_map_release(map); /* the buffer's reference: the last unmaps the file */
}

/* size bytes of pages at a 2 MiB boundary (the whole huge pages inside advised) after a header
 * page, or NULL. */
static char *own_map(size_t size) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = own_len(size), span = pg + len + huge_page;
    if (len < size || span < len) return NULL;
    char *p = wm__llama_pages(span);
    if (!p) return NULL;
    uintptr_t at = ((uintptr_t)p + pg + huge_page - 1) / huge_page * huge_page;
    char *base = (char *)at, *head = base - pg;
    if (head > p) munmap(p, (size_t)(head - p));
    if (p + span > base + len) munmap(base + len, (size_t)(p + span - (base + len)));
    if (len >= huge_page) (void)madvise(base, len / huge_page * huge_page, MADV_HUGEPAGE);
    *(own_header *)(void *)head = (own_header){.map = NULL};
    return base;
}

/* The buffers made with the wrapper's type during a making with early conversions (ggml's
 * allocator takes a buffer's alignment from its type: ggml-alloc.c ggml_tallocr_new), given the
 * real type by wm__llama_own_early_end. */
#define MAX_EARLY_BUFFERS 64
static _Thread_local ggml_backend_buffer_t early_bufs[MAX_EARLY_BUFFERS];
static _Thread_local size_t early_n;

static void forget_early(ggml_backend_buffer_t b) {
    for (size_t k = early_n; k-- > 0;)
        if (early_bufs[k] == b) early_bufs[k] = early_bufs[--early_n];
}

static ggml_backend_buffer_t own_alloc(ggml_backend_buffer_type_t w, size_t size) {
    own_type *o = own_of(w);
    size_t shift = own_shift(notes_now, w, size), pg = (size_t)sysconf(_SC_PAGESIZE);
    if (shift + size < size) return NULL;
    bool pages = on_pages(o) && early_n < MAX_EARLY_BUFFERS;
    if (pages) shift = 0; /* (a page-aligned type's notes can shift nothing anyway) */
    char *map = own_map(shift + size);
    if (!map) return NULL;
    ggml_backend_buffer_t b =
        ggml_backend_buffer_init(pages ? w : o->real, o->iface, map + shift, size);
    if (b && pages) early_bufs[early_n++] = b;
    if (!b) {
        munmap(map - pg, pg + own_len(shift + size));
        return NULL;
    }
    if (map_now && o->real == ggml_backend_cpu_buffer_type()) { /* its tensors may be mapped */
        wm__llama_map_hold(map_now);
        header_of(b)->map = map_now;
    } else {
        header_of(b)->counted = pg + own_len(shift + size);
        atomic_fetch_add(&own_live, (uint64_t)header_of(b)->counted);
    }
    return b;
}

/* An extra type's tensor just given its place: the real type's init_tensor (its repack traits),
 * then, during a making with early conversions, its pages moved in where they were converted
 * early (wm__llama_early_place). */
/* The wrapper whose buffer type (or real type) t is, or NULL. */
static const own_type *own_find(ggml_backend_buffer_type_t t) {
    for (size_t k = 0, n = atomic_load(&owns.n); k < n; k++)
        if (t == &owns.t[k].buft || t == owns.t[k].real) return &owns.t[k];
    return NULL;
}

static enum ggml_status own_init_tensor(ggml_backend_buffer_t b, struct ggml_tensor *t) {
    const own_type *o = own_find(b->buft);
    if (!o) return GGML_STATUS_FAILED; /* cannot be: only the wrappers' buffers call it */
    enum ggml_status st = o->real_init ? o->real_init(b, t) : GGML_STATUS_SUCCESS;
    if (st == GGML_STATUS_SUCCESS && early_now && b->buft == &o->buft &&
        !wm__llama_early_place(early_now, o->real, b, t))
        st = GGML_STATUS_ALLOC_FAILED; /* its place lost its pages */
    return st;
}

/* The real type's buffer functions, read from a small buffer of it, if it holds what a CPU
 * buffer holds (see above). */
static bool probe(ggml_backend_buffer_type_t real, struct ggml_backend_buffer_i *iface) {
    const size_t n = 64;
    ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(real, n);
    if (!b) return false;
    bool ok = b->buft == real && b->size == n && ggml_backend_buffer_get_size(b) == n &&
              b->iface.get_base && b->iface.free_buffer && b->context &&
              ggml_backend_buffer_get_base(b) == b->context;
    if (ok && !owns.cpu_free) {
        owns.cpu_free = b->iface.free_buffer;
        owns.cpu_base = b->iface.get_base;
    } else if (ok) {
        ok = (b->iface.free_buffer == owns.cpu_free && b->iface.get_base == owns.cpu_base) ||
             strcmp(ggml_backend_buft_name(real), "AMX") == 0;
    }
    if (ok) *iface = b->iface;
    ggml_backend_buffer_free(b);
    return ok;
}

/* Whether this ggml is the one whose layout the bridge was built with. */
static bool same_ggml(const extras *x) {
    if (strcmp(ggml_version(), WM_GGML_HEADER_VERSION) != 0) return false;
    ggml_backend_reg_t reg = x->cpu ? ggml_backend_dev_backend_reg(x->cpu) : NULL;
    return reg && reg->api_version == GGML_BACKEND_API_VERSION;
}

/* The wrapper of `real`, made on first use; NULL where it cannot be (the type is then
 * llama.cpp's to allocate). The CPU type is probed first: the others are checked against it. */
ggml_backend_buffer_type_t wm__llama_own_type(const extras *x, ggml_backend_buffer_type_t real) {
    ggml_backend_buffer_type_t w = NULL;
    pthread_mutex_lock(&owns.lock);
    if (!owns.checked) {
        struct ggml_backend_buffer_i cpu;
        owns.checked = same_ggml(x) && probe(ggml_backend_cpu_buffer_type(), &cpu) ? 1 : -1;
    }
    for (size_t k = 0; owns.checked > 0 && !w && k < owns.n; k++)
        if (owns.t[k].real == real) w = &owns.t[k].buft;
    if (owns.checked > 0 && !w && owns.n < MAX_OWN) {
        own_type *o = &owns.t[owns.n];
        if (probe(real, &o->iface)) {
            o->real = real;
            o->iface.free_buffer = own_free;
            o->real_init = o->iface.init_tensor;
            if (real != ggml_backend_cpu_buffer_type()) o->iface.init_tensor = own_init_tensor;
            o->buft.iface = (struct ggml_backend_buffer_type_i){
                .get_name = own_name,
                .alloc_buffer = own_alloc,
                .get_alignment = own_alignment,
                .get_max_size = own_max_size,
                .get_alloc_size = own_alloc_size,
                .is_host = own_is_host,
            };
            o->buft.device = real->device;
            o->buft.context = real->context;
            w = &o->buft;
            owns.n++;
        }
    }
    pthread_mutex_unlock(&owns.lock);
    return w;
}

bool wm__llama_is_own(ggml_backend_buffer_t b) { return b && b->iface.free_buffer == own_free; }

uint64_t wm__llama_own_bytes(void) { return atomic_load(&own_live); }

struct wm_llama_map *wm__llama_buffer_map(ggml_backend_buffer_t b) {
    return wm__llama_is_own(b) ? header_of(b)->map : NULL;
}

/* The notes of one model's making on this thread: an entry for each tensor of the file and
 * some; none where their pages cannot be had (the buffers then start on a page: only slower). */
void wm__llama_notes_begin(const wm_file *f, struct wm_llama_map *map) {
    map_now = map;
    notes *ns = &notes_mine;
    *ns = (notes){.f = f};
    size_t cap = wm_file_tensor_count(f) + 64;
    ns->len = cap * sizeof *ns->e;
    ns->e = wm__llama_pages(ns->len);
    if (!ns->e) return;
    ns->cap = cap;
    notes_now = ns;
}

void wm__llama_notes_end(void) {
    notes *ns = &notes_mine;
    map_now = NULL;
    notes_now = NULL;
    wm__llama_pages_free(ns->e, ns->len);
    ns->e = NULL;
}

void wm__llama_own_early_begin(struct wm_llama_early *e) {
    early_now = e;
    early_n = 0;
}

void wm__llama_own_early_end(void) {
    for (size_t k = 0; k < early_n; k++)
        early_bufs[k]->buft = own_of(early_bufs[k]->buft)->real;
    early_n = 0;
    early_now = NULL;
}

ggml_backend_buffer_type_t wm__llama_own_real(ggml_backend_buffer_type_t w) {
    const own_type *o = own_find(w);
    return o ? o->real : w;
}

/* A buffer struct of ggml's (its internal layout) in a page of the bridge's, over pages that are
 * not its own: the real type's, with its functions but free_buffer (never called). */
ggml_backend_buffer_t wm__llama_own_scratch(ggml_backend_buffer_type_t w, void *base, size_t size) {
    const own_type *o = own_find(w);
    ggml_backend_buffer_t b = o ? wm__llama_pages(sizeof *b) : NULL;
    if (!b) return NULL;
    *b = (struct ggml_backend_buffer){.iface = o->iface,
                                      .buft = o->real,
                                      .context = base,
                                      .size = size,
                                      .usage = GGML_BACKEND_BUFFER_USAGE_WEIGHTS};
    b->iface.init_tensor = o->real_init;
    b->iface.free_buffer = NULL;
    return b;
}

void wm__llama_own_scratch_free(ggml_backend_buffer_t b) { wm__llama_pages_free(b, sizeof *b); }
#else
void wm__llama_notes_begin(const wm_file *f, struct wm_llama_map *map) { (void)f, (void)map; }
void wm__llama_notes_end(void) {}

struct wm_llama_map *wm__llama_buffer_map(ggml_backend_buffer_t b) {
    (void)b;
    return NULL;
}

ggml_backend_buffer_type_t wm__llama_own_type(const extras *x, ggml_backend_buffer_type_t real) {
    (void)x, (void)real;
    return NULL;
}

bool wm__llama_is_own(ggml_backend_buffer_t b) {
    (void)b;
    return false;
}

void wm__llama_own_early_begin(struct wm_llama_early *e) { (void)e; }
void wm__llama_own_early_end(void) {}
ggml_backend_buffer_type_t wm__llama_own_real(ggml_backend_buffer_type_t w) { return w; }

ggml_backend_buffer_t wm__llama_own_scratch(ggml_backend_buffer_type_t w, void *base, size_t size) {
    (void)w, (void)base, (void)size;
    return NULL;
}

void wm__llama_own_scratch_free(ggml_backend_buffer_t b) { (void)b; }

uint64_t wm__llama_own_bytes(void) { return 0; }
#endif
