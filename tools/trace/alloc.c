/*
 * alloc.c: the malloc family of libwmtrace.so, and the loads its big blocks belong to.
 *
 * Blocks under 64 KiB are counted per thread (allocated minus freed); blocks of 64 KiB and more
 * are kept one by one in an open-addressing table (key = address; value = usable size << 12 |
 * thread slot; and the load under way when it was allocated, index + 1). A free then says what
 * the block was: freed before its load ended is scratch; held past the end is what the load
 * built, freed later inside a release or elsewhere (wmtrace.h, wmtrace_load).
 */
#include "interposer.h"

#include <errno.h>
#include <string.h>

int wt_have_load_markers;
int wt_cur_load;
int wt_last_load;
int wt_releasing;

/* Bootstrap memory for allocations made while dlsym resolves the real functions. */
static unsigned char boot_buf[64 << 10] __attribute__((aligned(64)));
static size_t boot_used;
bool wt_in_boot(const void *p) {
    return (const unsigned char *)p >= boot_buf &&
           (const unsigned char *)p < boot_buf + sizeof boot_buf;
}

/* Keys go empty -> address -> tombstone -> address ..., never back to empty, so a lookup of a
 * live block always finds it. */
#define BLOCKS (1u << 14)
#define TOMB ((uintptr_t)1)
static struct block {
    uintptr_t key;
    uint64_t val;
    uint32_t load; /* index + 1 of the load under way at its allocation; 0 none */
} blocks[BLOCKS];

static int size_class(uint64_t n) {
    return n < WMTRACE_BIG ? 0 : n < ((uint64_t)1 << 20) ? 1 : n < ((uint64_t)16 << 20) ? 2 : 3;
}
static uint32_t block_hash(uintptr_t p) {
    return (uint32_t)(((uint64_t)p >> 4) * 0x9E3779B97F4A7C15ull >> 50) & (BLOCKS - 1);
}
static void atomic_max(uint64_t *at, uint64_t v) {
    uint64_t cur = __atomic_load_n(at, __ATOMIC_RELAXED);
    while (v > cur &&
           !__atomic_compare_exchange_n(at, &cur, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

/* ---- loads ---- */

static volatile int load_lock;

/* A load from a weight file's first touch pauses when its last weight file is closed: what it
 * frees then is set aside, scratch if the load goes on (a reopen), freed after its end if a
 * release comes first (the load then ended at the pause). */
static struct pause { uint64_t since_ns, freed, largest, blocks; } pauses[WMTRACE_MAX_LOADS];

void wt_load_pause(int idx) {
    if (idx < 0 || idx >= WMTRACE_MAX_LOADS) return;
    __atomic_store_n(&pauses[idx].since_ns, wt_now_ns(), __ATOMIC_RELEASE);
}

void wt_load_resume(int idx) {
    if (idx < 0 || idx >= WMTRACE_MAX_LOADS ||
        !__atomic_load_n(&pauses[idx].since_ns, __ATOMIC_ACQUIRE))
        return;
    wmtrace_load *ld = &wt_stats->loads[idx];
    struct pause *p = &pauses[idx];
    __atomic_store_n(&p->since_ns, 0, __ATOMIC_RELEASE);
    __atomic_fetch_add(&ld->scratch, __atomic_exchange_n(&p->freed, 0, __ATOMIC_RELAXED),
                       __ATOMIC_RELAXED);
    __atomic_fetch_add(&ld->scratch_blocks, __atomic_exchange_n(&p->blocks, 0, __ATOMIC_RELAXED),
                       __ATOMIC_RELAXED);
    atomic_max(&ld->scratch_largest, __atomic_exchange_n(&p->largest, 0, __ATOMIC_RELAXED));
}

int wt_load_begin(int64_t spec) {
    if (!wt_stats || wt_tl.in_load_lock) return -1;
    wt_tl.in_load_lock = 1;
    wt_spin_lock(&load_lock);
    uint64_t i = wt_stats->n_loads;
    if (i >= WMTRACE_MAX_LOADS) {
        wt_stats->dropped_loads++;
        wt_tl.in_load_lock = 0;
        wt_spin_unlock(&load_lock);
        return -1;
    }
    wmtrace_load *ld = &wt_stats->loads[i];
    ld->begin_ns = wt_now_ns();
    ld->tid = wt_gettid();
    ld->spec = spec;
    ld->release_tid = -1;
    __atomic_store_n(&wt_stats->n_loads, i + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&wt_cur_load, (int)i + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&wt_last_load, (int)i + 1, __ATOMIC_RELEASE);
    wt_tl.in_load_lock = 0;
    wt_spin_unlock(&load_lock);
    wt_line l;
    wt_begin(&l, 'B');
    wt_put_u(&l, i);
    wt_put_i(&l, spec);
    wt_end(&l);
    wt_point(false);
    return (int)i;
}

void wt_load_end(int idx) {
    if (!wt_stats || idx < 0 || idx >= WMTRACE_MAX_LOADS || wt_tl.in_load_lock) return;
    wmtrace_load *ld = &wt_stats->loads[idx];
    wt_tl.in_load_lock = 1;
    wt_spin_lock(&load_lock);
    if (ld->end_ns) {
        wt_tl.in_load_lock = 0;
        wt_spin_unlock(&load_lock);
        return;
    }
    int me = idx + 1;
    __atomic_compare_exchange_n(&wt_cur_load, &me, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    struct pause *p = &pauses[idx];
    uint64_t end = __atomic_exchange_n(&p->since_ns, 0, __ATOMIC_ACQ_REL);
    uint64_t after = __atomic_exchange_n(&p->freed, 0, __ATOMIC_RELAXED);
    __atomic_fetch_add(&ld->freed_other, after, __ATOMIC_RELAXED);
    __atomic_store_n(&ld->kept_at_end, __atomic_load_n(&ld->kept, __ATOMIC_RELAXED) + after,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&ld->end_ns, end ? end : wt_now_ns(), __ATOMIC_RELEASE);
    wt_tl.in_load_lock = 0;
    wt_spin_unlock(&load_lock);
    wt_line l;
    wt_begin(&l, 'E');
    wt_put_u(&l, (uint64_t)idx);
    wt_put_u(&l, ld->end_ns);
    wt_end(&l);
    wt_point(false);
}

void wt_loading(void) {
    wmtrace_thread *t = wt_me();
    if (t && !t->loader) __atomic_store_n(&t->loader, 1, __ATOMIC_RELAXED);
    if (wt_have_load_markers) return;
    int cur = __atomic_load_n(&wt_cur_load, __ATOMIC_ACQUIRE);
    if (cur)
        wt_load_resume(cur - 1);
    else
        wt_load_begin(-1);
}

uint64_t wt_load_kept(int idx) {
    if (!wt_stats || idx < 0 || idx >= WMTRACE_MAX_LOADS) return 0;
    return __atomic_load_n(&wt_stats->loads[idx].kept, __ATOMIC_RELAXED);
}

/* A big block of the load `lidx` (index + 1) is freed. */
static void load_free(uint32_t lidx, uint64_t sz) {
    if (!lidx || lidx > WMTRACE_MAX_LOADS) return;
    wmtrace_load *ld = &wt_stats->loads[lidx - 1];
    __atomic_fetch_sub(&ld->kept, sz, __ATOMIC_RELAXED);
    struct pause *p = &pauses[lidx - 1];
    if (!__atomic_load_n(&ld->end_ns, __ATOMIC_ACQUIRE) &&
        __atomic_load_n(&p->since_ns, __ATOMIC_ACQUIRE)) {
        __atomic_fetch_add(&p->freed, sz, __ATOMIC_RELAXED);
        __atomic_fetch_add(&p->blocks, 1, __ATOMIC_RELAXED);
        atomic_max(&p->largest, sz);
    } else if (!__atomic_load_n(&ld->end_ns, __ATOMIC_ACQUIRE)) {
        __atomic_fetch_add(&ld->scratch, sz, __ATOMIC_RELAXED);
        __atomic_fetch_add(&ld->scratch_blocks, 1, __ATOMIC_RELAXED);
        atomic_max(&ld->scratch_largest, sz);
    } else if (__atomic_load_n(&wt_releasing, __ATOMIC_RELAXED)) {
        __atomic_fetch_add(&ld->freed_in_release, sz, __ATOMIC_RELAXED);
        __atomic_store_n(&ld->release_tid, (int64_t)wt_gettid(), __ATOMIC_RELAXED);
    } else {
        __atomic_fetch_add(&ld->freed_other, sz, __ATOMIC_RELAXED);
    }
}

/* ---- counting ---- */

static void note_big(wmtrace_thread *t, void *p, size_t us) {
    uint32_t lidx = (uint32_t)__atomic_load_n(&wt_cur_load, __ATOMIC_ACQUIRE);
    uint32_t h = block_hash((uintptr_t)p);
    for (int probe = 0; probe < 64; probe++, h = (h + 1) & (BLOCKS - 1)) {
        uintptr_t k = __atomic_load_n(&blocks[h].key, __ATOMIC_ACQUIRE);
        if (k != 0 && k != TOMB) continue;
        __atomic_store_n(&blocks[h].val, (uint64_t)us << 12 | (uint64_t)(wt_tl.idx - 1),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&blocks[h].load, lidx, __ATOMIC_RELAXED);
        if (__atomic_compare_exchange_n(&blocks[h].key, &k, (uintptr_t)p, false, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED)) {
            __atomic_fetch_add(&t->held[size_class(us)], (int64_t)us, __ATOMIC_RELAXED);
            if (lidx) {
                wmtrace_load *ld = &wt_stats->loads[lidx - 1];
                __atomic_fetch_add(&ld->blocks, 1, __ATOMIC_RELAXED);
                __atomic_fetch_add(&ld->bytes, us, __ATOMIC_RELAXED);
                __atomic_fetch_add(&ld->kept, us, __ATOMIC_RELAXED);
                atomic_max(&ld->kept_largest, us);
                atomic_max(&t->largest_loading, us);
            }
            return;
        }
    }
    __atomic_fetch_add(&wt_stats->dropped_blocks, 1, __ATOMIC_RELAXED);
}

static void note_alloc(void *p, size_t asked) {
    if (!p || !wt_active || wt_tl.in_hook || wt_in_boot(p)) return;
    wmtrace_thread *t = wt_me();
    if (!t) return;
    __atomic_store_n(&t->n_alloc, t->n_alloc + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&t->bytes_alloc, t->bytes_alloc + asked, __ATOMIC_RELAXED);
    if (asked > t->largest) __atomic_store_n(&t->largest, asked, __ATOMIC_RELAXED);
    size_t us = wt_r_malloc_usable_size(p);
    if (us < WMTRACE_BIG) {
        /* held[0] has one writer, its own thread (a small block freed elsewhere counts there):
         * a plain store, no locked add, on the path every small malloc takes. */
        __atomic_store_n(&t->held[0], t->held[0] + (int64_t)us, __ATOMIC_RELAXED);
        return;
    }
    note_big(t, p, us);
}

static void note_free(void *p) {
    if (!p || !wt_active || wt_tl.in_hook || wt_in_boot(p) || !wt_stats) return;
    size_t us = wt_r_malloc_usable_size(p);
    wmtrace_thread *t = wt_me();
    if (us < WMTRACE_BIG) {
        if (t) __atomic_store_n(&t->held[0], t->held[0] - (int64_t)us, __ATOMIC_RELAXED);
        return;
    }
    uint32_t h = block_hash((uintptr_t)p);
    for (int probe = 0; probe < 64; probe++, h = (h + 1) & (BLOCKS - 1)) {
        uintptr_t k = __atomic_load_n(&blocks[h].key, __ATOMIC_ACQUIRE);
        if (k == 0) return;
        if (k != (uintptr_t)p) continue;
        uint64_t v = __atomic_load_n(&blocks[h].val, __ATOMIC_RELAXED);
        uint32_t lidx = __atomic_load_n(&blocks[h].load, __ATOMIC_RELAXED);
        if (!__atomic_compare_exchange_n(&blocks[h].key, &k, TOMB, false, __ATOMIC_ACQ_REL,
                                         __ATOMIC_RELAXED))
            return;
        uint64_t sz = v >> 12;
        int owner = (int)(v & 0xfff);
        __atomic_fetch_sub(&wt_stats->threads[owner].held[size_class(sz)], (int64_t)sz,
                           __ATOMIC_RELAXED);
        if (t && owner != wt_tl.idx - 1) __atomic_fetch_add(&t->freed_others, sz, __ATOMIC_RELAXED);
        load_free(lidx, sz);
        return;
    }
}

/* ---- the hooks ---- */

EXPORT void *malloc(size_t n) {
    if (!wt_resolved) {
        if (wt_initialising) {
            size_t at = (boot_used + 15) & ~(size_t)15;
            if (at + n > sizeof boot_buf) return NULL;
            boot_used = at + n;
            return boot_buf + at;
        }
        wt_resolve();
    }
    void *p = wt_r_malloc(n);
    note_alloc(p, n);
    return p;
}

EXPORT void free(void *p) {
    if (!p || wt_in_boot(p)) return;
    if (!wt_resolved) wt_resolve();
    note_free(p);
    wt_r_free(p);
}

EXPORT void *calloc(size_t n, size_t m) {
    if (!wt_resolved) {
        if (wt_initialising) {
            if (m && n > SIZE_MAX / m) return NULL;
            return malloc(n * m); /* boot_buf is zero and never reused */
        }
        wt_resolve();
    }
    void *p = wt_r_calloc(n, m);
    note_alloc(p, n * m);
    return p;
}

EXPORT void *realloc(void *p, size_t n) {
    if (!wt_resolved && !wt_initialising) wt_resolve();
    if (!p) return malloc(n);
    if (wt_in_boot(p) || !wt_resolved) {
        void *q = malloc(n);
        size_t room = wt_in_boot(p) ? (size_t)(boot_buf + sizeof boot_buf - (unsigned char *)p) : n;
        if (q) memcpy(q, p, n < room ? n : room);
        return q;
    }
    size_t old = wt_r_malloc_usable_size(p);
    note_free(p);
    void *q = wt_r_realloc(p, n);
    if (!q && n) {
        /* The old block is still there: count it again. */
        note_alloc(p, old);
        return NULL;
    }
    note_alloc(q, n);
    return q;
}

EXPORT int posix_memalign(void **out, size_t align, size_t n) {
    if (!wt_resolved) wt_resolve();
    int rc = wt_r_posix_memalign(out, align, n);
    if (rc == 0) note_alloc(*out, n);
    return rc;
}
EXPORT void *aligned_alloc(size_t align, size_t n) {
    if (!wt_resolved) wt_resolve();
    void *p = wt_r_aligned_alloc(align, n);
    note_alloc(p, n);
    return p;
}
EXPORT void *memalign(size_t align, size_t n) {
    if (!wt_resolved) wt_resolve();
    void *p = wt_r_memalign(align, n);
    note_alloc(p, n);
    return p;
}
EXPORT void *valloc(size_t n) {
    if (!wt_resolved) wt_resolve();
    void *p = wt_r_valloc(n);
    note_alloc(p, n);
    return p;
}

size_t wt_tables_bytes_alloc(void) HIDDEN;
size_t wt_tables_bytes_alloc(void) { return sizeof blocks + sizeof boot_buf; }
