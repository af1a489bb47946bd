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
#include <sys/syscall.h>
#include <unistd.h>

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

/* The loads' scratch, block by block: every big block freed while its load was under way (or
 * paused) is remembered, address, usable size and load, in a ring, so that after a release the
 * process can say how many bytes of the last load's scratch are still resident and not inside a
 * live big block (wt_scratch_resident): the part of the footprint that can really be that
 * scratch (rule `scratch`, docs/TRACE.md). A block glibc had mapped on its own (its chunk's
 * IS_MMAPPED bit) went back to the system when it was freed, and is not remembered. */
#define SCRATCH_RING (1u << 13)
static struct srange {
    uintptr_t addr;
    uint64_t len;
    uint32_t load; /* index + 1; written last */
} sring[SCRATCH_RING];
static uint64_t sring_next;                     /* ranges ever recorded */
static uint64_t sring_first[WMTRACE_MAX_LOADS]; /* sring_next when each load began */

/* The pages of the last load's scratch blocks, each with what has been put on it since it became
 * scratch: `live`, the blocks (any size) allocated over it and not freed; `kept`, whether one of
 * them was still there when the load ended. A page some block of the load kept is the load's
 * memory after the release (what the load built, freed by the release, or still held), not its
 * scratch; a page nothing took again, or only blocks freed before the load ended, is scratch.
 * Open addressing on the key page << 9 | load (index + 1), cleared when another load's first
 * scratch block comes. Full: the load's figure is not known. */
#define SPAGES (1u << 15)
#define SPAGE 4096u
static struct spage {
    uint64_t key;
    int32_t live;
    uint32_t kept;
} spages[SPAGES];
static uint32_t spages_load; /* the load (index + 1) whose pages the set holds; 0 none */
static bool spages_full[WMTRACE_MAX_LOADS];
static volatile int spages_lock;

static uint32_t spage_hash(uint64_t key) {
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 49) & (SPAGES - 1);
}

/* The page's slot, or NULL; add: make it (live 0, kept 0) if absent. */
static struct spage *spage_find(uintptr_t page, uint32_t lidx, bool add) {
    uint64_t key = (uint64_t)page << 9 | lidx;
    uint32_t h = spage_hash(key);
    for (int probe = 0; probe < 256; probe++, h = (h + 1) & (SPAGES - 1)) {
        uint64_t k = __atomic_load_n(&spages[h].key, __ATOMIC_ACQUIRE);
        if (k == key) return &spages[h];
        if (k != 0) continue;
        if (!add) return NULL;
        if (__atomic_compare_exchange_n(&spages[h].key, &k, key, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return &spages[h];
        if (k == key) return &spages[h];
    }
    return NULL;
}

/* A block [p, p + n) is allocated (+1) or freed (-1): the scratch pages under it are told. */
static void spages_touch(const void *p, uint64_t n, int d) {
    uint32_t lidx = __atomic_load_n(&spages_load, __ATOMIC_ACQUIRE);
    if (!lidx || !n) return;
    bool ended = __atomic_load_n(&wt_stats->loads[lidx - 1].end_ns, __ATOMIC_ACQUIRE) != 0;
    for (uintptr_t pg = (uintptr_t)p / SPAGE; pg <= ((uintptr_t)p + n - 1) / SPAGE; pg++) {
        struct spage *s = spage_find(pg, lidx, false);
        if (!s) continue;
        if (d > 0) {
            __atomic_fetch_add(&s->live, 1, __ATOMIC_RELAXED);
        } else if (__atomic_load_n(&s->live, __ATOMIC_RELAXED) > 0) {
            __atomic_fetch_sub(&s->live, 1, __ATOMIC_RELAXED);
            if (ended) __atomic_store_n(&s->kept, 1, __ATOMIC_RELAXED);
        }
    }
}

/* The whole pages of a scratch block [p, p + n) of load lidx join the set, as scratch again. */
static void spages_add(uint32_t lidx, const void *p, uint64_t n) {
    if (__atomic_load_n(&spages_load, __ATOMIC_ACQUIRE) != lidx) {
        wt_spin_lock(&spages_lock);
        if (spages_load != lidx) {
            __atomic_store_n(&spages_load, 0, __ATOMIC_RELEASE);
            for (uint32_t h = 0; h < SPAGES; h++) {
                __atomic_store_n(&spages[h].key, 0, __ATOMIC_RELAXED);
                __atomic_store_n(&spages[h].live, 0, __ATOMIC_RELAXED);
                __atomic_store_n(&spages[h].kept, 0, __ATOMIC_RELAXED);
            }
            __atomic_store_n(&spages_load, lidx, __ATOMIC_RELEASE);
        }
        wt_spin_unlock(&spages_lock);
    }
    uintptr_t lo = ((uintptr_t)p + SPAGE - 1) / SPAGE, hi = ((uintptr_t)p + n) / SPAGE;
    for (uintptr_t pg = lo; pg < hi; pg++) {
        struct spage *s = spage_find(pg, lidx, true);
        if (!s) {
            __atomic_store_n(&spages_full[lidx - 1], true, __ATOMIC_RELAXED);
            return;
        }
        __atomic_store_n(&s->live, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&s->kept, 0, __ATOMIC_RELAXED);
    }
}

/* The load ended: a page with a block on it now holds what the load kept. */
static void spages_load_ended(uint32_t lidx) {
    if (__atomic_load_n(&spages_load, __ATOMIC_ACQUIRE) != lidx) return;
    for (uint32_t h = 0; h < SPAGES; h++)
        if (__atomic_load_n(&spages[h].key, __ATOMIC_RELAXED) &&
            __atomic_load_n(&spages[h].live, __ATOMIC_RELAXED) > 0)
            __atomic_store_n(&spages[h].kept, 1, __ATOMIC_RELAXED);
}

static void scratch_note(uint32_t lidx, const void *p, uint64_t sz) {
#if defined(__GLIBC__) && !defined(WMTRACE_SELFTEST) /* the self-test's malloc is TSan's */
    size_t head;
    memcpy(&head, (const char *)p - sizeof head, sizeof head);
    if (head & 2) return; /* IS_MMAPPED: munmapped by this free */
#endif
    spages_add(lidx, p, sz);
    uint64_t i = __atomic_fetch_add(&sring_next, 1, __ATOMIC_RELAXED);
    struct srange *r = &sring[i % SCRATCH_RING];
    __atomic_store_n(&r->load, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&r->addr, (uintptr_t)p, __ATOMIC_RELAXED);
    __atomic_store_n(&r->len, sz, __ATOMIC_RELAXED);
    __atomic_store_n(&r->load, lidx, __ATOMIC_RELEASE);
}

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
static struct pause {
    uint64_t since_ns, freed, largest, blocks;
    uint64_t resident; /* what the load held was resident then (its end, if no touch comes) */
} pauses[WMTRACE_MAX_LOADS];

void wt_load_pause(int idx) {
    if (idx < 0 || idx >= WMTRACE_MAX_LOADS) return;
    __atomic_store_n(&pauses[idx].resident, wt_load_kept_resident(idx), __ATOMIC_RELAXED);
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
    __atomic_store_n(&sring_first[i], __atomic_load_n(&sring_next, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
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
    spages_load_ended((uint32_t)idx + 1);
    wt_tl.in_load_lock = 0;
    wt_spin_unlock(&load_lock);
    /* ended at its pause: what it held was measured then (the release may have freed it) */
    __atomic_store_n(&ld->kept_resident,
                     end ? __atomic_load_n(&p->resident, __ATOMIC_RELAXED)
                         : wt_load_kept_resident(idx),
                     __ATOMIC_RELAXED);
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

int wt_load_by_handle(uint64_t h) {
    if (!wt_stats || !h) return -1;
    int n = (int)__atomic_load_n(&wt_stats->n_loads, __ATOMIC_ACQUIRE);
    for (int i = n - 1; i >= 0; i--) {
        wmtrace_load *ld = &wt_stats->loads[i];
        if (__atomic_load_n(&ld->handle, __ATOMIC_ACQUIRE) != h) continue;
        uint64_t no = 0;
        if (__atomic_compare_exchange_n(&ld->released, &no, 1, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            return i;
    }
    return -1;
}

uint64_t wt_load_kept(int idx) {
    if (!wt_stats || idx < 0 || idx >= WMTRACE_MAX_LOADS) return 0;
    return __atomic_load_n(&wt_stats->loads[idx].kept, __ATOMIC_RELAXED);
}

/* A big block p of the load `lidx` (index + 1) is freed. */
static void load_free(uint32_t lidx, const void *p0, uint64_t sz) {
    if (!lidx || lidx > WMTRACE_MAX_LOADS) return;
    wmtrace_load *ld = &wt_stats->loads[lidx - 1];
    __atomic_fetch_sub(&ld->kept, sz, __ATOMIC_RELAXED);
    struct pause *p = &pauses[lidx - 1];
    if (!__atomic_load_n(&ld->end_ns, __ATOMIC_ACQUIRE) &&
        __atomic_load_n(&p->since_ns, __ATOMIC_ACQUIRE)) {
        __atomic_fetch_add(&p->freed, sz, __ATOMIC_RELAXED);
        __atomic_fetch_add(&p->blocks, 1, __ATOMIC_RELAXED);
        atomic_max(&p->largest, sz);
        scratch_note(lidx, p0, sz);
    } else if (!__atomic_load_n(&ld->end_ns, __ATOMIC_ACQUIRE)) {
        scratch_note(lidx, p0, sz);
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
    spages_touch(p, us, 1);
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
    spages_touch(p, us, -1);
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
        load_free(lidx, p, sz);
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

/* ---- what of a load's scratch is still there ---- */

/* Resident bytes of the whole pages inside [p, p + n) (mincore, 256 pages a call). */
static uint64_t resident_in(uintptr_t p, uint64_t n) {
    enum { PIECE = 256 };
    unsigned char vec[PIECE];
    uintptr_t lo = (p + SPAGE - 1) / SPAGE * SPAGE, hi = (p + n) / SPAGE * SPAGE;
    uint64_t bytes = 0;
    for (uintptr_t a = lo; a < hi;) {
        size_t pages = (hi - a) / SPAGE < PIECE ? (size_t)((hi - a) / SPAGE) : PIECE;
        if (syscall(SYS_mincore, (void *)a, pages * SPAGE, vec) == 0)
            for (size_t q = 0; q < pages; q++)
                bytes += (vec[q] & 1) ? SPAGE : 0;
        a += pages * SPAGE;
    }
    return bytes;
}

uint64_t wt_load_kept_resident(int idx) {
    if (!wt_stats || idx < 0 || idx >= WMTRACE_MAX_LOADS) return 0;
    uint64_t bytes = 0;
    for (uint32_t h = 0; h < BLOCKS; h++) {
        uintptr_t k = __atomic_load_n(&blocks[h].key, __ATOMIC_ACQUIRE);
        if (k == 0 || k == TOMB ||
            __atomic_load_n(&blocks[h].load, __ATOMIC_RELAXED) != (uint32_t)idx + 1)
            continue;
        bytes += resident_in(k, __atomic_load_n(&blocks[h].val, __ATOMIC_RELAXED) >> 12);
    }
    return bytes;
}

static struct srange merged[SCRATCH_RING]; /* wt_scratch_resident's work, under measure_lock */
static volatile int measure_lock;

/* Resident bytes of the whole pages in [lo, hi) that the set holds as scratch still (nothing
 * live on them, nothing the load kept); mincore: an unmapped page is not resident. */
static uint64_t resident_scratch(uintptr_t lo, uintptr_t hi, uint32_t lidx) {
    enum { PIECE = 256 };
    unsigned char vec[PIECE];
    uint64_t bytes = 0;
    for (uintptr_t a = lo; a < hi;) {
        size_t pages = (hi - a) / SPAGE < PIECE ? (size_t)((hi - a) / SPAGE) : PIECE;
        if (syscall(SYS_mincore, (void *)a, pages * SPAGE, vec) != 0) {
            for (size_t q = 0; q < pages; q++) /* a hole in the piece: page by page */
                if (syscall(SYS_mincore, (void *)(a + q * SPAGE), SPAGE, &vec[q]) != 0) vec[q] = 0;
        }
        for (size_t q = 0; q < pages; q++) {
            if (!(vec[q] & 1)) continue;
            const struct spage *sp = spage_find(a / SPAGE + q, lidx, false);
            if (!sp || (__atomic_load_n(&sp->live, __ATOMIC_RELAXED) <= 0 &&
                        !__atomic_load_n(&sp->kept, __ATOMIC_RELAXED)))
                bytes += SPAGE;
        }
        a += pages * SPAGE;
    }
    return bytes;
}

int64_t wt_scratch_resident(int load) {
    if (load < 0 || load >= WMTRACE_MAX_LOADS ||
        (uint64_t)load >= __atomic_load_n(&wt_stats->n_loads, __ATOMIC_ACQUIRE))
        return -1;
    uint64_t first = __atomic_load_n(&sring_first[load], __ATOMIC_RELAXED),
             end = __atomic_load_n(&sring_next, __ATOMIC_ACQUIRE);
    if (end - first > SCRATCH_RING || __atomic_load_n(&spages_full[load], __ATOMIC_RELAXED))
        return -1; /* not known */
    if (end > first && __atomic_load_n(&spages_load, __ATOMIC_ACQUIRE) != (uint32_t)load + 1)
        return -1; /* a later load's scratch took the page set */
    wt_spin_lock(&measure_lock);
    size_t n = 0;
    for (uint64_t i = first; i < end; i++) {
        const struct srange *r = &sring[i % SCRATCH_RING];
        uint32_t l = __atomic_load_n(&r->load, __ATOMIC_ACQUIRE);
        if (l != (uint32_t)load + 1) continue;
        merged[n++] = (struct srange){__atomic_load_n(&r->addr, __ATOMIC_RELAXED),
                                      __atomic_load_n(&r->len, __ATOMIC_RELAXED), l};
    }
    /* by address (shell sort: no allocation), then overlapping or adjacent ranges (a chunk's
     * header apart) as one, so that a place reused by the load's next scratch counts once */
    for (size_t gap = n / 2; gap > 0; gap /= 2)
        for (size_t i = gap; i < n; i++)
            for (size_t j = i; j >= gap && merged[j - gap].addr > merged[j].addr; j -= gap) {
                struct srange x = merged[j];
                merged[j] = merged[j - gap];
                merged[j - gap] = x;
            }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && merged[i].addr <= merged[m - 1].addr + merged[m - 1].len + 64) {
            uintptr_t e = merged[i].addr + merged[i].len;
            if (e > merged[m - 1].addr + merged[m - 1].len)
                merged[m - 1].len = e - merged[m - 1].addr;
        } else {
            merged[m++] = merged[i];
        }
    }
    uint64_t bytes = 0;
    for (size_t i = 0; i < m; i++) {
        uintptr_t lo = (merged[i].addr + SPAGE - 1) / SPAGE * SPAGE;
        uintptr_t hi = (merged[i].addr + merged[i].len) / SPAGE * SPAGE;
        if (hi > lo) bytes += resident_scratch(lo, hi, (uint32_t)load + 1);
    }
    wt_spin_unlock(&measure_lock);
    return (int64_t)bytes;
}

size_t wt_tables_bytes_alloc(void) HIDDEN;
size_t wt_tables_bytes_alloc(void) {
    return sizeof blocks + sizeof boot_buf + sizeof sring + sizeof sring_first + sizeof merged +
           sizeof spages;
}
