/*
 * ledger.c: exact accounting of what the library holds, by category, and the counted allocator.
 *
 * Sections: the ledger (atomic {current, peak, total, regions} per category); the counted
 * allocator (every heap byte of the library, small blocks from malloc with a size header, large
 * ones from pages); scratch pages.
 */
#include "internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- the ledger ---- */

typedef struct counter {
    _Atomic uint64_t current, peak, total, regions;
} counter;

static counter cats[WM_LEDGER_COUNT];
static _Atomic uint64_t heap_largest;
/* The host categories together (wm_ledger.host): their peak is the most held at once, which the
 * categories' own peaks, reached at different moments, cannot say. */
static counter host;

static bool is_host(wm_ledger_category cat) {
    return cat == WM_LEDGER_HEAP || cat == WM_LEDGER_SCRATCH || cat == WM_LEDGER_MAP_SHARED ||
           cat == WM_LEDGER_MAP_PRIVATE;
}

static void raise_max(_Atomic uint64_t *m, uint64_t v) {
    uint64_t old = atomic_load(m);
    while (v > old && !atomic_compare_exchange_weak(m, &old, v)) {
    }
}

static void count_in(counter *c, uint64_t bytes);
static void count_out(counter *c, uint64_t bytes);

void wm__ledger_acquire(wm_ledger_category cat, uint64_t bytes) {
    count_in(&cats[cat], bytes);
    if (is_host(cat)) count_in(&host, bytes);
}

void wm__ledger_release(wm_ledger_category cat, uint64_t bytes) {
    count_out(&cats[cat], bytes);
    if (is_host(cat)) count_out(&host, bytes);
}

void wm__ledger_shrink(wm_ledger_category cat, uint64_t bytes) {
    atomic_fetch_sub(&cats[cat].current, bytes);
    if (is_host(cat)) atomic_fetch_sub(&host.current, bytes);
}

void wm__ledger_note_request(uint64_t bytes) { raise_max(&heap_largest, bytes); }

static counter devices[WM_LEDGER_DEVICES];

static void count_in(counter *c, uint64_t bytes) {
    uint64_t now = atomic_fetch_add(&c->current, bytes) + bytes;
    atomic_fetch_add(&c->total, bytes);
    atomic_fetch_add(&c->regions, 1);
    raise_max(&c->peak, now);
}

static void count_out(counter *c, uint64_t bytes) {
    atomic_fetch_sub(&c->current, bytes);
    atomic_fetch_sub(&c->regions, 1);
}

/* A device numbered past the per-device figures (one process alone on device 16 or more) is
 * counted in the category only. */
void wm__ledger_device_acquire(int device, uint64_t bytes) {
    wm__ledger_acquire(WM_LEDGER_DEVICE, bytes);
    if (device >= 0 && device < WM_LEDGER_DEVICES) count_in(&devices[device], bytes);
}

void wm__ledger_device_release(int device, uint64_t bytes) {
    wm__ledger_release(WM_LEDGER_DEVICE, bytes);
    if (device >= 0 && device < WM_LEDGER_DEVICES) count_out(&devices[device], bytes);
}

wm_status wm_ledger_device(int device, wm_ledger_stat *out) {
    if (!out) return WM_EINVAL;
    if (device < 0 || device >= WM_LEDGER_DEVICES) return WM_ERANGE;
    const counter *c = &devices[device];
    out->current = atomic_load(&c->current);
    out->peak = atomic_load(&c->peak);
    out->total = atomic_load(&c->total);
    out->regions = atomic_load(&c->regions);
    return WM_OK;
}

void wm_ledger_get(wm_ledger *out) {
    if (!out) return;
    wm_ledger l = WM_LEDGER_INIT;
    for (int i = 0; i < WM_LEDGER_COUNT; i++) {
        l.cat[i].current = atomic_load(&cats[i].current);
        l.cat[i].peak = atomic_load(&cats[i].peak);
        l.cat[i].total = atomic_load(&cats[i].total);
        l.cat[i].regions = atomic_load(&cats[i].regions);
    }
    l.heap_largest = atomic_load(&heap_largest);
    l.host.current = atomic_load(&host.current);
    l.host.peak = atomic_load(&host.peak);
    l.host.total = atomic_load(&host.total);
    l.host.regions = atomic_load(&host.regions);
    wm__struct_out(out, &l, sizeof l, WM__LEDGER_SIZE_1_0);
}

void wm_ledger_reset_peaks(void) {
    for (int i = 0; i < WM_LEDGER_COUNT; i++)
        atomic_store(&cats[i].peak, atomic_load(&cats[i].current));
    for (int i = 0; i < WM_LEDGER_DEVICES; i++)
        atomic_store(&devices[i].peak, atomic_load(&devices[i].current));
    atomic_store(&host.peak, atomic_load(&host.current));
    atomic_store(&heap_largest, 0);
}

const char *wm_ledger_category_name(wm_ledger_category category) {
    static const char *const names[WM_LEDGER_COUNT] = {
        "heap", "scratch", "map_shared", "map_private", "locked", "pinned", "device"};
    return (unsigned)category < WM_LEDGER_COUNT ? names[category] : NULL;
}

uint64_t wm_ledger_bytes(const wm_ledger *l) {
    uint64_t s = 0;
    for (int i = 0; i < WM_LEDGER_COUNT; i++)
        s += l->cat[i].current;
    return s;
}

uint64_t wm_ledger_regions(const wm_ledger *l) {
    uint64_t s = 0;
    for (int i = 0; i < WM_LEDGER_COUNT; i++)
        s += l->cat[i].regions;
    return s;
}

/* ---- the counted allocator ----
 * Each block carries a 16-byte header holding its size, so wm__free needs no size and the
 * ledger gets back exactly what it was charged. */

#define HDR WM_ALLOC_HEADER
#define WM_ALLOC_HUGE_MIN ((size_t)1024 * 1024)

void *wm__alloc(size_t size) {
    if (size > SIZE_MAX - HDR) return NULL;
    if (wm__fault_hit(WM_OS_ALLOC)) return NULL;
    size_t total = size + HDR;
    unsigned char *p;
    if (total >= WM_ALLOC_PAGE_THRESHOLD) {
        void *pages;
        if (wm__os_pages_alloc(total, &pages)) return NULL;
        /* Blocks of 1 MiB or more are advised huge before their first write (the size header
         * below), so the kernel can back each aligned 2 MiB with one huge page: one fault
         * instead of 512. A hint: its failure changes only the speed. */
        if (total >= WM_ALLOC_HUGE_MIN) (void)wm__os_advise(pages, total, WM_OS_ADV_HUGEPAGE);
        p = pages;
    } else {
        p = malloc(total);
        if (!p) return NULL;
    }
    memcpy(p, &total, sizeof total);
    wm__ledger_note_request(size);
    wm__ledger_acquire(WM_LEDGER_HEAP, total);
    return p + HDR;
}

void *wm__calloc(size_t n, size_t size) {
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes)) return NULL;
    void *p = wm__alloc(bytes);
    if (p) memset(p, 0, bytes); /* page blocks are zero already; small ones are not */
    return p;
}

void wm__free(void *ptr) {
    if (!ptr) return;
    unsigned char *p = (unsigned char *)ptr - HDR;
    size_t total;
    memcpy(&total, p, sizeof total);
    wm__ledger_release(WM_LEDGER_HEAP, total);
    if (total >= WM_ALLOC_PAGE_THRESHOLD)
        wm__os_pages_free(p, total);
    else
        free(p);
}

void *wm__realloc(void *ptr, size_t size) {
    if (!ptr) return wm__alloc(size);
    size_t total;
    memcpy(&total, (unsigned char *)ptr - HDR, sizeof total);
    size_t old = total - HDR;
    if (size <= old) {
        /* In place. A page block whose new end leaves whole pages free unmaps them, as long as
         * it stays a page block (wm__free tells the kinds apart by the size alone). */
        size_t keep = size + HDR, page = wm__os_page_size();
        size_t old_end = (total + page - 1) / page * page,
               new_end = (keep + page - 1) / page * page;
        if (total >= WM_ALLOC_PAGE_THRESHOLD && keep >= WM_ALLOC_PAGE_THRESHOLD &&
            new_end < old_end) {
            unsigned char *p = (unsigned char *)ptr - HDR;
            wm__os_pages_free(p + new_end, old_end - new_end);
            memcpy(p, &keep, sizeof keep);
            wm__ledger_shrink(WM_LEDGER_HEAP, total - keep);
        }
        return ptr;
    }
    void *q = wm__alloc(size);
    if (!q) return NULL;
    memcpy(q, ptr, old);
    wm__free(ptr);
    return q;
}

char *wm__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = wm__alloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* ---- scratch pages ---- */

int wm__scratch_alloc(size_t size, void **out) {
    void *p;
    int e = wm__os_pages_alloc(size, &p);
    if (e) return e;
    wm__ledger_acquire(WM_LEDGER_SCRATCH, size);
    *out = p;
    return 0;
}

void wm__scratch_free(void *p, size_t size) {
    if (!p) return;
    wm__os_pages_free(p, size);
    wm__ledger_release(WM_LEDGER_SCRATCH, size);
}

uint64_t wm__hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}
