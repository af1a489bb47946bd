/*
 * wmtrace.c: libwmtrace.so, the LD_PRELOAD interposer behind `weightmap trace`. It watches the
 * weight-memory lifecycle of any program: the malloc family per thread, mappings of weight files,
 * anonymous mappings, mlock, and a "released" marker. Its own code only (no weightmap library).
 *
 * Sections: state and the tables; small output helpers (no allocation); weight-file
 * classification; the malloc family; mmap and friends; opens and reads (which threads load);
 * the release marker (SIGUSR1, or a dynamic symbol redirected at its call sites and through
 * dlsym to a trampoline that records its return); start-up, fork and exit.
 *
 * Rules the hooks keep: nothing allocates in a hook beyond fixed static tables; events are one
 * write(2) of a stack buffer each (atomic with O_APPEND); a hook re-entered on its own thread (the
 * interposer's own calls) passes straight through; a process other than the traced one (a forked
 * child, anything exec'd by it) stays dormant: every hook only forwards. Figures per thread live
 * in the shared stats block of the trace file (wmtrace.h), so _exit and signals lose nothing.
 */
#define _GNU_SOURCE
#include "wmtrace.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* WMTRACE_SELFTEST (the TSan lane, tests/trace/tsan_hooks.c) compiles the hooks under other names
 * into a test program, which calls them from several threads: ThreadSanitizer cannot sit under an
 * LD_PRELOAD interposer, but it can check the interposer's own tables this way. */
#ifdef WMTRACE_SELFTEST
#define malloc wmtrace_st_malloc
#define free wmtrace_st_free
#define calloc wmtrace_st_calloc
#define realloc wmtrace_st_realloc
#define posix_memalign wmtrace_st_posix_memalign
#define aligned_alloc wmtrace_st_aligned_alloc
#define memalign wmtrace_st_memalign
#define valloc wmtrace_st_valloc
#define mmap wmtrace_st_mmap
#define mmap64 wmtrace_st_mmap64
#define munmap wmtrace_st_munmap
#define mremap wmtrace_st_mremap
#define mlock wmtrace_st_mlock
#define munlock wmtrace_st_munlock
#define mlockall wmtrace_st_mlockall
#define munlockall wmtrace_st_munlockall
#define open wmtrace_st_open
#define open64 wmtrace_st_open64
#define openat wmtrace_st_openat
#define openat64 wmtrace_st_openat64
#define fopen wmtrace_st_fopen
#define fopen64 wmtrace_st_fopen64
#define close wmtrace_st_close
#define fclose wmtrace_st_fclose
#define read wmtrace_st_read
#define pread wmtrace_st_pread
#define pread64 wmtrace_st_pread64
#define fread wmtrace_st_fread
#define dlsym wmtrace_st_dlsym
#define WMTRACE_CTOR
#define WMTRACE_DTOR
#define wmtrace_start wmtrace_selftest_start
#define wmtrace_stop wmtrace_selftest_stop
#define STATIC_ENTRY EXPORT
#else
#define WMTRACE_CTOR __attribute__((constructor(101)))
#define WMTRACE_DTOR __attribute__((destructor))
#define STATIC_ENTRY static
#endif
#define TLS static __thread __attribute__((tls_model("initial-exec")))

/* ---- state ---- */

static int active;       /* this process traces */
static int initialising; /* resolving the real functions (dlsym may allocate) */
static int resolved;
static int out_fd = -1;
static wmtrace_stats *stats; /* the shared block; NULL until set up */
static uint64_t marker_gen;  /* release markers so far: loading flags are per marker period */

typedef struct thread_local_state {
    wmtrace_thread *slot;
    int idx; /* slot index + 1; 0: none yet, -1: table full */
    int in_hook;
    uint64_t loading_gen;    /* marker_gen + 1 while this thread loads in that period */
    uint64_t period_gen;     /* marker_gen + 1 of the period period_largest is for */
    uint64_t period_largest; /* largest allocation of this thread in that period */
    void *ret_stack[256];    /* the marker trampoline's return addresses */
    int ret_depth;
} thread_local_state;
TLS thread_local_state tl;

/* The real functions. */
static void *(*r_malloc)(size_t);
static void (*r_free)(void *);
static void *(*r_calloc)(size_t, size_t);
static void *(*r_realloc)(void *, size_t);
static int (*r_posix_memalign)(void **, size_t, size_t);
static void *(*r_aligned_alloc)(size_t, size_t);
static void *(*r_memalign)(size_t, size_t);
static void *(*r_valloc)(size_t);
static size_t (*r_usable)(void *);
static void *(*r_mmap)(void *, size_t, int, int, int, off_t);
static int (*r_munmap)(void *, size_t);
static void *(*r_mremap)(void *, size_t, size_t, int, ...);
static int (*r_mlock)(const void *, size_t);
static int (*r_munlock)(const void *, size_t);
static int (*r_mlockall)(int);
static int (*r_munlockall)(void);
static int (*r_open)(const char *, int, ...);
static int (*r_open64)(const char *, int, ...);
static int (*r_openat)(int, const char *, int, ...);
static int (*r_openat64)(int, const char *, int, ...);
static FILE *(*r_fopen)(const char *, const char *);
static FILE *(*r_fopen64)(const char *, const char *);
static int (*r_close)(int);
static int (*r_fclose)(FILE *);
static ssize_t (*r_read)(int, void *, size_t);
static ssize_t (*r_pread)(int, void *, size_t, off_t);
static ssize_t (*r_pread64)(int, void *, size_t, off_t);
static size_t (*r_fread)(void *, size_t, size_t, FILE *);
static void *(*r_dlsym)(void *, const char *);

/* Bootstrap memory for allocations made while dlsym resolves the real functions. */
static unsigned char boot_buf[64 << 10] __attribute__((aligned(64)));
static size_t boot_used;
static bool in_boot(const void *p) {
    return (const unsigned char *)p >= boot_buf &&
           (const unsigned char *)p < boot_buf + sizeof boot_buf;
}

/* Big blocks (>= WMTRACE_BIG), one by one: open addressing, key = address, value = size << 12 |
 * thread slot. Keys go empty -> address -> tombstone -> address ..., never back to empty, so a
 * lookup of a live block always finds it. */
#define BLOCKS (1u << 14)
#define TOMB ((uintptr_t)1)
static struct block {
    uintptr_t key;
    uint64_t val;
} blocks[BLOCKS];

/* Mappings made by the program (weight files and anonymous), under a spin lock. */
#define MAPS 4096
typedef struct map_entry {
    uintptr_t addr;
    size_t len;
    int used, fidx, tidx, id; /* fidx -1: anonymous */
} map_entry;
static map_entry maps[MAPS];
static uint64_t map_left[MAPS]; /* bytes of weight mapping ID still mapped */
static int next_map_id;
static volatile int map_lock;

/* Weight files, by device and inode. */
#define FILES 64
static struct wfile { uint64_t dev, ino; } files[FILES];
static int n_files;
static struct wfile named[FILES]; /* from WMTRACE_FILES */
static int n_named;
static volatile int file_lock;
#define FDS 65536
static signed char fd_weight[FDS]; /* fd -> weight file index + 1 (atomic: the
                                      kernel's fd reuse is a synchronisation TSan cannot see) */

static char marker_name[64];
static void *marker_target;

static void spin_lock(volatile int *l) {
    while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE)) {
        while (__atomic_load_n(l, __ATOMIC_RELAXED)) {
        }
    }
}
static void spin_unlock(volatile int *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

static void resolve(void);

/* ---- output helpers (no allocation) ---- */

typedef struct line {
    char b[1024];
    size_t n;
} line;
static void put_s(line *l, const char *s) {
    while (*s && l->n < sizeof l->b - 2)
        l->b[l->n++] = *s++;
}
static void put_u(line *l, uint64_t v) {
    char t[24];
    int i = 0;
    do
        t[i++] = (char)('0' + v % 10);
    while ((v /= 10));
    while (i && l->n < sizeof l->b - 2)
        l->b[l->n++] = t[--i];
}
static void put_i(line *l, int64_t v) {
    if (v < 0) {
        put_s(l, "-");
        put_u(l, (uint64_t)0 - (uint64_t)v);
    } else
        put_u(l, (uint64_t)v);
}
static void put_x(line *l, uint64_t v) {
    char t[20];
    int i = 0;
    do
        t[i++] = "0123456789abcdef"[v & 15];
    while ((v >>= 4));
    put_s(l, "0x");
    while (i && l->n < sizeof l->b - 2)
        l->b[l->n++] = t[--i];
}
static pid_t gettid_raw(void) { return (pid_t)syscall(SYS_gettid); }
static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
static void begin(line *l, char type) {
    l->n = 0;
    put_u(l, now_ns());
    put_s(l, " ");
    put_u(l, (uint64_t)gettid_raw());
    put_s(l, " ");
    l->b[l->n++] = type;
}
static void end(line *l) {
    l->b[l->n++] = '\n';
    if (out_fd >= 0) {
        int e = errno;
        ssize_t w = syscall(SYS_write, out_fd, l->b, l->n);
        (void)w;
        errno = e;
    }
}

/* Reads a /proc file of this process into buf (raw syscalls). */
static size_t read_proc(const char *path, char *buf, size_t cap) {
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = syscall(SYS_read, fd, buf + n, cap - 1 - n);
        if (r <= 0) break;
        n += (size_t)r;
    }
    syscall(SYS_close, fd);
    buf[n] = 0;
    return n;
}
static uint64_t field_kb(const char *buf, const char *key) {
    const char *p = strstr(buf, key);
    if (!p) return 0;
    p += strlen(key);
    while (*p == ' ' || *p == '\t')
        p++;
    uint64_t v = 0;
    while (*p >= '0' && *p <= '9')
        v = v * 10 + (uint64_t)(*p++ - '0');
    return v * 1024;
}
/* An S line: footprint (RssAnon + VmSwap + RssShmem) and resident bytes (VmRSS), now. From
 * /proc/self/status, whose figures are the kernel's counters: smaps_rollup would be exact to the
 * page but walks every page table under the mmap lock, which cost a traced llama.cpp mmap load
 * several per cent. */
static void sample(void) {
    char buf[4096];
    line l;
    read_proc("/proc/self/status", buf, sizeof buf);
    uint64_t anon = field_kb(buf, "\nRssAnon:"), swap = field_kb(buf, "\nVmSwap:");
    uint64_t rss = field_kb(buf, "\nVmRSS:"), shmem = field_kb(buf, "\nRssShmem:");
    begin(&l, 'S');
    put_s(&l, " ");
    put_u(&l, anon + swap + shmem);
    put_s(&l, " ");
    put_u(&l, rss);
    end(&l);
}

/* This thread's slot in the shared block (NULL when the table is full or not set up). */
static wmtrace_thread *me(void) {
    if (tl.idx > 0) return tl.slot;
    if (tl.idx < 0 || !stats) return NULL;
    uint64_t i = __atomic_fetch_add(&stats->n_threads, 1, __ATOMIC_RELAXED);
    if (i >= WMTRACE_MAX_THREADS) {
        __atomic_store_n(&stats->n_threads, WMTRACE_MAX_THREADS, __ATOMIC_RELAXED);
        __atomic_fetch_add(&stats->dropped_threads, 1, __ATOMIC_RELAXED);
        tl.idx = -1;
        return NULL;
    }
    wmtrace_thread *t = &stats->threads[i];
    t->tid = gettid_raw();
    prctl(PR_GET_NAME, t->name);
    tl.slot = t;
    tl.idx = (int)i + 1;
    return t;
}

/* The thread touches a weight file: it is a loader, loading in this marker period. */
static void loading(void) {
    wmtrace_thread *t = me();
    if (!t) return;
    if (!t->loader) {
        t->loader = 1;
        prctl(PR_GET_NAME, t->name);
    }
    uint64_t gen = __atomic_load_n(&marker_gen, __ATOMIC_RELAXED) + 1;
    tl.loading_gen = gen;
    /* What it allocated earlier in this period (its scratch, say) counts as loading too. */
    if (tl.period_gen == gen && tl.period_largest > t->largest_loading)
        __atomic_store_n(&t->largest_loading, tl.period_largest, __ATOMIC_RELAXED);
}

/* ---- weight files ---- */

static bool is_weight_header(int fd, uint64_t size) {
    unsigned char h[16];
    if (syscall(SYS_pread64, fd, h, sizeof h, (off_t)0) != (ssize_t)sizeof h) return false;
    if (!memcmp(h, "GGUF", 4)) return true;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | h[i];
    return n >= 2 && n <= size - 8 && h[8] == '{';
}

/* Index + 1 of the weight file open on fd, registering it (F line) when first seen; 0 if fd is
 * not a weight file: one named with --file, or a regular file over 1 MiB with a GGUF or
 * safetensors header. */
static int classify(int fd) {
    struct stat st;
    if (fd < 0 || syscall(SYS_fstat, fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    for (int i = 0; i < __atomic_load_n(&n_files, __ATOMIC_ACQUIRE); i++)
        if (files[i].dev == (uint64_t)st.st_dev && files[i].ino == (uint64_t)st.st_ino)
            return i + 1;
    const char *kind = NULL;
    for (int i = 0; i < n_named; i++)
        if (named[i].dev == (uint64_t)st.st_dev && named[i].ino == (uint64_t)st.st_ino)
            kind = "named";
    if (!kind && st.st_size > (1 << 20) && is_weight_header(fd, (uint64_t)st.st_size)) {
        unsigned char m[4];
        kind = syscall(SYS_pread64, fd, m, 4, (off_t)0) == 4 && !memcmp(m, "GGUF", 4)
                   ? "gguf"
                   : "safetensors";
    }
    if (!kind) return 0;
    spin_lock(&file_lock);
    int idx = 0;
    for (int i = 0; i < n_files; i++)
        if (files[i].dev == (uint64_t)st.st_dev && files[i].ino == (uint64_t)st.st_ino) idx = i + 1;
    if (!idx && n_files < FILES) {
        files[n_files].dev = (uint64_t)st.st_dev;
        files[n_files].ino = (uint64_t)st.st_ino;
        idx = n_files + 1;
        char link[64], path[700];
        line l;
        memcpy(link, "/proc/self/fd/", 14);
        line num = {.n = 0};
        put_u(&num, (uint64_t)fd);
        memcpy(link + 14, num.b, num.n);
        link[14 + num.n] = 0;
        ssize_t pn = syscall(SYS_readlinkat, AT_FDCWD, link, path, sizeof path - 1);
        path[pn > 0 ? pn : 0] = 0;
        begin(&l, 'F');
        put_s(&l, " ");
        put_u(&l, (uint64_t)n_files);
        put_s(&l, " ");
        put_u(&l, (uint64_t)st.st_size);
        put_s(&l, " ");
        put_s(&l, kind);
        put_s(&l, " ");
        put_s(&l, path);
        end(&l);
        __atomic_store_n(&n_files, n_files + 1, __ATOMIC_RELEASE);
    }
    spin_unlock(&file_lock);
    return idx;
}

/* ---- the malloc family ---- */

static int size_class(uint64_t n) {
    return n < WMTRACE_BIG ? 0 : n < ((uint64_t)1 << 20) ? 1 : n < ((uint64_t)16 << 20) ? 2 : 3;
}
static uint32_t block_hash(uintptr_t p) {
    return (uint32_t)(((uint64_t)p >> 4) * 0x9E3779B97F4A7C15ull >> 50) & (BLOCKS - 1);
}

static void note_alloc(void *p, size_t asked) {
    if (!p || !active || tl.in_hook || in_boot(p)) return;
    wmtrace_thread *t = me();
    if (!t) return;
    __atomic_store_n(&t->n_alloc, t->n_alloc + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&t->bytes_alloc, t->bytes_alloc + asked, __ATOMIC_RELAXED);
    if (asked > t->largest) __atomic_store_n(&t->largest, asked, __ATOMIC_RELAXED);
    uint64_t gen = __atomic_load_n(&marker_gen, __ATOMIC_RELAXED) + 1;
    if (tl.period_gen != gen) {
        tl.period_gen = gen;
        tl.period_largest = 0;
    }
    if (asked > tl.period_largest) tl.period_largest = asked;
    if (tl.loading_gen == gen && asked > t->largest_loading)
        __atomic_store_n(&t->largest_loading, asked, __ATOMIC_RELAXED);
    size_t us = r_usable(p);
    if (us < WMTRACE_BIG) {
        /* held[0] has one writer, its own thread (a small block freed elsewhere counts there):
         * a plain store, no locked add, on the path every small malloc takes. */
        __atomic_store_n(&t->held[0], t->held[0] + (int64_t)us, __ATOMIC_RELAXED);
        return;
    }
    uint32_t h = block_hash((uintptr_t)p);
    for (int probe = 0; probe < 64; probe++, h = (h + 1) & (BLOCKS - 1)) {
        uintptr_t k = __atomic_load_n(&blocks[h].key, __ATOMIC_ACQUIRE);
        if (k != 0 && k != TOMB) continue;
        __atomic_store_n(&blocks[h].val, (uint64_t)us << 12 | (uint64_t)(tl.idx - 1),
                         __ATOMIC_RELAXED);
        if (__atomic_compare_exchange_n(&blocks[h].key, &k, (uintptr_t)p, false, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED)) {
            __atomic_fetch_add(&t->held[size_class(us)], (int64_t)us, __ATOMIC_RELAXED);
            return;
        }
    }
    __atomic_fetch_add(&stats->dropped_blocks, 1, __ATOMIC_RELAXED);
}

static void note_free(void *p) {
    if (!p || !active || tl.in_hook || in_boot(p) || !stats) return;
    size_t us = r_usable(p);
    if (us < WMTRACE_BIG) {
        wmtrace_thread *t = me();
        if (t) __atomic_store_n(&t->held[0], t->held[0] - (int64_t)us, __ATOMIC_RELAXED);
        return;
    }
    uint32_t h = block_hash((uintptr_t)p);
    for (int probe = 0; probe < 64; probe++, h = (h + 1) & (BLOCKS - 1)) {
        uintptr_t k = __atomic_load_n(&blocks[h].key, __ATOMIC_ACQUIRE);
        if (k == 0) return;
        if (k != (uintptr_t)p) continue;
        uint64_t v = __atomic_load_n(&blocks[h].val, __ATOMIC_RELAXED);
        if (!__atomic_compare_exchange_n(&blocks[h].key, &k, TOMB, false, __ATOMIC_ACQ_REL,
                                         __ATOMIC_RELAXED))
            return;
        uint64_t sz = v >> 12;
        __atomic_fetch_sub(&stats->threads[v & 0xfff].held[size_class(sz)], (int64_t)sz,
                           __ATOMIC_RELAXED);
        return;
    }
}

EXPORT void *malloc(size_t n) {
    if (!resolved) {
        if (initialising) {
            size_t at = (boot_used + 15) & ~(size_t)15;
            if (at + n > sizeof boot_buf) return NULL;
            boot_used = at + n;
            return boot_buf + at;
        }
        resolve();
    }
    void *p = r_malloc(n);
    note_alloc(p, n);
    return p;
}

EXPORT void free(void *p) {
    if (!p || in_boot(p)) return;
    if (!resolved) resolve();
    note_free(p);
    r_free(p);
}

EXPORT void *calloc(size_t n, size_t m) {
    if (!resolved) {
        if (initialising) {
            if (m && n > SIZE_MAX / m) return NULL;
            return malloc(n * m); /* boot_buf is zero and never reused */
        }
        resolve();
    }
    void *p = r_calloc(n, m);
    note_alloc(p, n * m);
    return p;
}

EXPORT void *realloc(void *p, size_t n) {
    if (!resolved && !initialising) resolve();
    if (!p) return malloc(n);
    if (in_boot(p) || !resolved) {
        void *q = malloc(n);
        size_t room = in_boot(p) ? (size_t)(boot_buf + sizeof boot_buf - (unsigned char *)p) : n;
        if (q) memcpy(q, p, n < room ? n : room);
        return q;
    }
    size_t old = r_usable(p);
    note_free(p);
    void *q = r_realloc(p, n);
    if (!q && n) {
        /* The old block is still there: count it again. */
        note_alloc(p, old);
        return NULL;
    }
    note_alloc(q, n);
    return q;
}

EXPORT int posix_memalign(void **out, size_t align, size_t n) {
    if (!resolved) resolve();
    int rc = r_posix_memalign(out, align, n);
    if (rc == 0) note_alloc(*out, n);
    return rc;
}
EXPORT void *aligned_alloc(size_t align, size_t n) {
    if (!resolved) resolve();
    void *p = r_aligned_alloc(align, n);
    note_alloc(p, n);
    return p;
}
EXPORT void *memalign(size_t align, size_t n) {
    if (!resolved) resolve();
    void *p = r_memalign(align, n);
    note_alloc(p, n);
    return p;
}
EXPORT void *valloc(size_t n) {
    if (!resolved) resolve();
    void *p = r_valloc(n);
    note_alloc(p, n);
    return p;
}

/* ---- mappings ---- */

static bool overlaps_weight(uintptr_t a, size_t n) {
    bool hit = false;
    spin_lock(&map_lock);
    for (int i = 0; i < MAPS; i++)
        if (maps[i].used && maps[i].fidx >= 0 && maps[i].addr < a + n &&
            a < maps[i].addr + maps[i].len)
            hit = true;
    spin_unlock(&map_lock);
    return hit;
}

static void add_map(uintptr_t a, size_t len, int fidx, int id) {
    wmtrace_thread *t = me();
    spin_lock(&map_lock);
    for (int i = 0; i < MAPS; i++) {
        if (maps[i].used) continue;
        maps[i] = (map_entry){a, len, 1, fidx, t ? tl.idx - 1 : -1, id};
        break;
    }
    spin_unlock(&map_lock);
    if (fidx < 0 && t) {
        __atomic_store_n(&t->anon_maps, t->anon_maps + 1, __ATOMIC_RELAXED);
        if (len > t->anon_largest)
            __atomic_store_n(&t->anon_largest, (uint64_t)len, __ATOMIC_RELAXED);
        __atomic_fetch_add(&t->anon_held, (int64_t)len, __ATOMIC_RELAXED);
    }
}

/* Takes [a, a+len) out of the table: trims, splits or drops entries; U lines for weight maps. */
static void remove_range(uintptr_t a, size_t len) {
    uintptr_t e = a + len;
    int ids[16], nid = 0;
    uint64_t gone[16];
    spin_lock(&map_lock);
    for (int i = 0; i < MAPS; i++) {
        map_entry *m = &maps[i];
        if (!m->used || m->addr >= e || a >= m->addr + m->len) continue;
        uintptr_t ms = m->addr, me_ = m->addr + m->len;
        uintptr_t lo = ms > a ? ms : a, hi = me_ < e ? me_ : e;
        uint64_t cut = hi - lo;
        if (lo == ms && hi == me_) {
            m->used = 0;
        } else if (lo == ms) {
            m->addr = hi;
            m->len = me_ - hi;
        } else if (hi == me_) {
            m->len = lo - ms;
        } else {
            m->len = lo - ms;
            for (int j = 0; j < MAPS; j++)
                if (!maps[j].used) {
                    maps[j] = (map_entry){hi, me_ - hi, 1, m->fidx, m->tidx, m->id};
                    break;
                }
        }
        if (m->fidx < 0) {
            if (m->tidx >= 0 && stats)
                __atomic_fetch_sub(&stats->threads[m->tidx].anon_held, (int64_t)cut,
                                   __ATOMIC_RELAXED);
        } else {
            map_left[m->id] -= cut;
            int k = 0;
            while (k < nid && ids[k] != m->id)
                k++;
            if (k == nid && nid < 16) {
                ids[nid] = m->id;
                gone[nid++] = 0;
            }
            if (k < 16) gone[k] += cut;
        }
    }
    uint64_t left[16];
    for (int k = 0; k < nid; k++)
        left[k] = map_left[ids[k]];
    spin_unlock(&map_lock);
    for (int k = 0; k < nid; k++) {
        line l;
        begin(&l, 'U');
        put_s(&l, " ");
        put_u(&l, (uint64_t)ids[k]);
        put_s(&l, " ");
        put_u(&l, gone[k]);
        put_s(&l, " ");
        put_u(&l, left[k]);
        end(&l);
    }
}

static void note_map(void *p, size_t len, int prot, int flags, int fd, off_t off) {
    if (p == MAP_FAILED || !active || tl.in_hook || !stats) return;
    tl.in_hook = 1;
    /* MAP_FIXED over an existing range replaces it. */
    if (flags & MAP_FIXED) remove_range((uintptr_t)p, len);
    int w = (flags & MAP_ANONYMOUS) ? 0 : classify(fd);
    if (w) {
        loading();
        spin_lock(&map_lock);
        int id = next_map_id < MAPS ? next_map_id++ : MAPS - 1;
        map_left[id] = len;
        spin_unlock(&map_lock);
        add_map((uintptr_t)p, len, w - 1, id);
        line l;
        begin(&l, 'M');
        put_s(&l, " ");
        put_u(&l, (uint64_t)id);
        put_s(&l, " ");
        put_u(&l, (uint64_t)(w - 1));
        put_s(&l, " ");
        put_x(&l, (uint64_t)(uintptr_t)p);
        put_s(&l, " ");
        put_u(&l, len);
        put_s(&l, " ");
        put_u(&l, (uint64_t)off);
        put_s(&l, " ");
        put_u(&l, (uint64_t)prot);
        put_s(&l, " ");
        put_u(&l, (uint64_t)flags);
        end(&l);
    } else if (flags & MAP_ANONYMOUS) {
        add_map((uintptr_t)p, len, -1, 0);
    }
    tl.in_hook = 0;
}

EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    if (!resolved) resolve();
    void *p = r_mmap(addr, len, prot, flags, fd, off);
    note_map(p, len, prot, flags, fd, off);
    return p;
}
EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return mmap(addr, len, prot, flags, fd, off);
}

EXPORT int munmap(void *addr, size_t len) {
    if (!resolved) resolve();
    int rc = r_munmap(addr, len);
    if (rc == 0 && active && !tl.in_hook && stats) {
        tl.in_hook = 1;
        size_t pg = 4096;
        remove_range((uintptr_t)addr, (len + pg - 1) & ~(pg - 1));
        tl.in_hook = 0;
    }
    return rc;
}

EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
    if (!resolved) resolve();
    void *want = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        want = va_arg(ap, void *);
        va_end(ap);
    }
    void *p = r_mremap(old, old_len, new_len, flags, want);
    if (p != MAP_FAILED && active && !tl.in_hook && stats) {
        tl.in_hook = 1;
        int fidx = -2;
        spin_lock(&map_lock);
        for (int i = 0; i < MAPS; i++)
            if (maps[i].used && maps[i].addr == (uintptr_t)old) fidx = maps[i].fidx;
        spin_unlock(&map_lock);
        if (fidx != -2) {
            remove_range((uintptr_t)old, old_len);
            if (fidx < 0) {
                add_map((uintptr_t)p, new_len, -1, 0);
            } else {
                line l;
                begin(&l, 'W');
                put_s(&l, " mremap of a weight mapping: its new range is not followed");
                end(&l);
            }
        }
        tl.in_hook = 0;
    }
    return p;
}

static void lock_line(char type, const void *a, size_t n, int rc) {
    if (!active || tl.in_hook || !stats) return;
    tl.in_hook = 1;
    line l;
    begin(&l, type);
    put_s(&l, " ");
    put_x(&l, (uint64_t)(uintptr_t)a);
    put_s(&l, " ");
    put_u(&l, n);
    put_s(&l, " ");
    put_i(&l, rc);
    put_s(&l, overlaps_weight((uintptr_t)a, n) ? " 1" : " 0");
    end(&l);
    tl.in_hook = 0;
}
EXPORT int mlock(const void *a, size_t n) {
    if (!resolved) resolve();
    int rc = r_mlock(a, n);
    lock_line('L', a, n, rc);
    return rc;
}
EXPORT int munlock(const void *a, size_t n) {
    if (!resolved) resolve();
    int rc = r_munlock(a, n);
    lock_line('K', a, n, rc);
    return rc;
}
EXPORT int mlockall(int flags) {
    if (!resolved) resolve();
    int rc = r_mlockall(flags);
    if (active && stats) {
        line l;
        begin(&l, 'A');
        put_s(&l, " ");
        put_u(&l, (uint64_t)flags);
        put_s(&l, " ");
        put_i(&l, rc);
        end(&l);
    }
    return rc;
}
EXPORT int munlockall(void) {
    if (!resolved) resolve();
    int rc = r_munlockall();
    if (active && stats) {
        line l;
        begin(&l, 'Z');
        put_s(&l, " ");
        put_i(&l, rc);
        end(&l);
    }
    return rc;
}

/* ---- opens and reads ---- */

static void rescan_marker(void);

static void note_open(int fd) {
    if (fd < 0 || !active || tl.in_hook || !stats) return;
    tl.in_hook = 1;
    int w = classify(fd);
    if (fd < FDS) __atomic_store_n(&fd_weight[fd], (signed char)w, __ATOMIC_RELAXED);
    if (w) {
        loading();
        line l;
        begin(&l, 'O');
        put_s(&l, " ");
        put_u(&l, (uint64_t)(w - 1));
        end(&l);
        rescan_marker();
    }
    tl.in_hook = 0;
}

static int open_mode_needed(int flags) {
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

/* The four open entry points differ only in the call they pass on: OPEN_HOOK(name, the call's
 * leading parameters and arguments) defines one that reads the optional mode the C library
 * passes with O_CREAT or O_TMPFILE, calls the real function and notes the descriptor. */
#define OPEN_HOOK(name, real, params, args)                                                        \
    EXPORT int name params {                                                                       \
        if (!resolved) resolve();                                                                  \
        mode_t mode = 0;                                                                           \
        if (open_mode_needed(flags)) {                                                             \
            va_list ap;                                                                            \
            va_start(ap, flags);                                                                   \
            mode = va_arg(ap, mode_t);                                                             \
            va_end(ap);                                                                            \
        }                                                                                          \
        int fd = real args;                                                                        \
        note_open(fd);                                                                             \
        return fd;                                                                                 \
    }
OPEN_HOOK(open, r_open, (const char *path, int flags, ...), (path, flags, mode))
OPEN_HOOK(open64, r_open64, (const char *path, int flags, ...), (path, flags, mode))
OPEN_HOOK(openat, r_openat, (int dir, const char *path, int flags, ...), (dir, path, flags, mode))
OPEN_HOOK(openat64, r_openat64, (int dir, const char *path, int flags, ...),
          (dir, path, flags, mode))

EXPORT FILE *fopen(const char *path, const char *mode) {
    if (!resolved) resolve();
    FILE *f = r_fopen(path, mode);
    if (f) note_open(fileno(f));
    return f;
}
EXPORT FILE *fopen64(const char *path, const char *mode) {
    if (!resolved) resolve();
    FILE *f = r_fopen64(path, mode);
    if (f) note_open(fileno(f));
    return f;
}
EXPORT int close(int fd) {
    if (!resolved) resolve();
    if (fd == out_fd && out_fd >= 0) return 0; /* the trace file stays open for the tracer */
    if (fd >= 0 && fd < FDS) __atomic_store_n(&fd_weight[fd], 0, __ATOMIC_RELAXED);
    return r_close(fd);
}
EXPORT int fclose(FILE *f) {
    if (!resolved) resolve();
    int fd = f ? fileno(f) : -1;
    if (fd >= 0 && fd < FDS) __atomic_store_n(&fd_weight[fd], 0, __ATOMIC_RELAXED);
    return r_fclose(f);
}

static void note_read(int fd, ssize_t n) {
    if (n <= 0 || fd < 0 || fd >= FDS || !__atomic_load_n(&fd_weight[fd], __ATOMIC_RELAXED) ||
        !active || tl.in_hook)
        return;
    loading();
    wmtrace_thread *t = me();
    if (t) __atomic_store_n(&t->weight_read, t->weight_read + (uint64_t)n, __ATOMIC_RELAXED);
}
EXPORT ssize_t read(int fd, void *b, size_t n) {
    if (!resolved) resolve();
    ssize_t r = r_read(fd, b, n);
    note_read(fd, r);
    return r;
}
EXPORT ssize_t pread(int fd, void *b, size_t n, off_t off) {
    if (!resolved) resolve();
    ssize_t r = r_pread(fd, b, n, off);
    note_read(fd, r);
    return r;
}
EXPORT ssize_t pread64(int fd, void *b, size_t n, off_t off) {
    if (!resolved) resolve();
    ssize_t r = r_pread64(fd, b, n, off);
    note_read(fd, r);
    return r;
}
EXPORT size_t fread(void *b, size_t size, size_t n, FILE *f) {
    if (!resolved) resolve();
    size_t r = r_fread(b, size, n, f);
    if (r) note_read(fileno(f), (ssize_t)(r * size));
    return r;
}

/* ---- the release marker ---- */

static void released(const char *source) {
    if (!active || !stats) return;
    __atomic_fetch_add(&marker_gen, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&stats->markers, 1, __ATOMIC_RELAXED);
    line l;
    begin(&l, 'R');
    put_s(&l, " ");
    put_s(&l, source);
    end(&l);
    sample();
}

static void on_sigusr1(int sig) {
    (void)sig;
    int e = errno;
    released("SIGUSR1");
    errno = e;
}

#if defined(__x86_64__)
/* The trampoline that the marker symbol's callers reach instead of it. On entry it keeps the
 * caller's return address on a per-thread stack and replaces it with tramp_exit, then jumps to
 * the real function with every argument register and the stack untouched; tramp_exit records
 * the release and returns to the caller with the return registers untouched. */
__attribute__((visibility("hidden"))) void *wmtrace_enter(void *ret);
__attribute__((visibility("hidden"))) void *wmtrace_exit(void);
void wmtrace_tramp(void);
__asm__(".text\n"
        ".p2align 4\n"
        ".type wmtrace_tramp,@function\n"
        "wmtrace_tramp:\n"
        "  push %rdi\n  push %rsi\n  push %rdx\n  push %rcx\n  push %r8\n  push %r9\n  push %rax\n"
        "  sub $128, %rsp\n"
        "  movdqu %xmm0, 0(%rsp)\n  movdqu %xmm1, 16(%rsp)\n  movdqu %xmm2, 32(%rsp)\n"
        "  movdqu %xmm3, 48(%rsp)\n  movdqu %xmm4, 64(%rsp)\n  movdqu %xmm5, 80(%rsp)\n"
        "  movdqu %xmm6, 96(%rsp)\n  movdqu %xmm7, 112(%rsp)\n"
        "  mov 184(%rsp), %rdi\n"
        "  call wmtrace_enter\n"
        "  mov %rax, %r11\n"
        "  movdqu 0(%rsp), %xmm0\n  movdqu 16(%rsp), %xmm1\n  movdqu 32(%rsp), %xmm2\n"
        "  movdqu 48(%rsp), %xmm3\n  movdqu 64(%rsp), %xmm4\n  movdqu 80(%rsp), %xmm5\n"
        "  movdqu 96(%rsp), %xmm6\n  movdqu 112(%rsp), %xmm7\n"
        "  add $128, %rsp\n"
        "  pop %rax\n  pop %r9\n  pop %r8\n  pop %rcx\n  pop %rdx\n  pop %rsi\n  pop %rdi\n"
        "  lea wmtrace_tramp_exit(%rip), %r10\n"
        "  mov %r10, (%rsp)\n"
        "  jmp *%r11\n"
        "wmtrace_tramp_exit:\n"
        "  sub $8, %rsp\n  push %rax\n  push %rdx\n  sub $40, %rsp\n"
        "  movdqu %xmm0, 0(%rsp)\n  movdqu %xmm1, 16(%rsp)\n"
        "  call wmtrace_exit\n"
        "  mov %rax, 56(%rsp)\n"
        "  movdqu 0(%rsp), %xmm0\n  movdqu 16(%rsp), %xmm1\n"
        "  add $40, %rsp\n  pop %rdx\n  pop %rax\n"
        "  ret\n"
        ".size wmtrace_tramp, .-wmtrace_tramp\n");

void *wmtrace_enter(void *ret) {
    if (tl.ret_depth < (int)(sizeof tl.ret_stack / sizeof tl.ret_stack[0]))
        tl.ret_stack[tl.ret_depth] = ret;
    tl.ret_depth++;
    return __atomic_load_n(&marker_target, __ATOMIC_ACQUIRE);
}
void *wmtrace_exit(void) {
    int e = errno;
    tl.ret_depth--;
    void *ret = tl.ret_stack[tl.ret_depth];
    int saved = tl.in_hook;
    tl.in_hook = 1;
    released(marker_name);
    tl.in_hook = saved;
    errno = e;
    return ret;
}
#define HAVE_TRAMP 1
#else
#define HAVE_TRAMP 0
#endif

/* Points every GOT slot (JUMP_SLOT, GLOB_DAT) that names the marker symbol in one loaded object
 * at the trampoline. Slots in RELRO are made writable for the store and read-only again. */
static int patch_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
#if HAVE_TRAMP
    if (!info->dlpi_name || strstr(info->dlpi_name, "libwmtrace") ||
        strstr(info->dlpi_name, "linux-vdso"))
        return 0;
    const ElfW(Dyn) *dyn = NULL;
    uintptr_t relro = 0, relro_len = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
            relro = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
            relro_len = info->dlpi_phdr[i].p_memsz;
        }
    }
    if (!dyn) return 0;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) * rel[2] = {NULL, NULL};
    size_t rel_sz[2] = {0, 0};
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        uintptr_t v = d->d_un.d_ptr;
        /* glibc relocates these entries in place for loaded objects; not for every one. */
        if (v < info->dlpi_addr) v += info->dlpi_addr;
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)v; break;
        case DT_STRTAB: strtab = (const char *)v; break;
        case DT_JMPREL: rel[0] = (const ElfW(Rela) *)v; break;
        case DT_PLTRELSZ: rel_sz[0] = d->d_un.d_val; break;
        case DT_RELA: rel[1] = (const ElfW(Rela) *)v; break;
        case DT_RELASZ: rel_sz[1] = d->d_un.d_val; break;
        }
    }
    if (!symtab || !strtab) return 0;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    for (int r = 0; r < 2; r++) {
        if (!rel[r]) continue;
        for (size_t i = 0; i < rel_sz[r] / sizeof(ElfW(Rela)); i++) {
            uint32_t type = (uint32_t)ELF64_R_TYPE(rel[r][i].r_info);
            if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
            const ElfW(Sym) *s = &symtab[ELF64_R_SYM(rel[r][i].r_info)];
            if (strcmp(strtab + s->st_name, marker_name) != 0) continue;
            void **slot = (void **)(info->dlpi_addr + rel[r][i].r_offset);
            if (*slot == (void *)wmtrace_tramp) continue;
            uintptr_t page = (uintptr_t)slot & ~(pg - 1);
            bool ro = (uintptr_t)slot >= relro && (uintptr_t)slot < relro + relro_len;
            if (ro && syscall(SYS_mprotect, page, pg, PROT_READ | PROT_WRITE) != 0) continue;
            *slot = (void *)wmtrace_tramp;
            if (ro) syscall(SYS_mprotect, page, pg, PROT_READ);
            if (stats) __atomic_fetch_add(&stats->marker_patched, 1, __ATOMIC_RELAXED);
        }
    }
#else
    (void)info;
#endif
    return 0;
}

static int count_adds(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    *(unsigned long long *)data = info->dlpi_adds;
    return 1;
}

/* Re-patches when objects were loaded since the last scan (dlopen is not hooked: see TRACE.md). */
static void set_target(void *p) {
    void *none = NULL;
    __atomic_compare_exchange_n(&marker_target, &none, p, false, __ATOMIC_RELEASE,
                                __ATOMIC_RELAXED);
}

/* One thread at a time; a thread that finds another scanning leaves it to that one. */
static void rescan_marker(void) {
    static unsigned long long seen;
    static volatile int busy;
    if (!marker_name[0] || !HAVE_TRAMP || __atomic_exchange_n(&busy, 1, __ATOMIC_ACQUIRE)) return;
    unsigned long long adds = 0;
    dl_iterate_phdr(count_adds, &adds);
    if (adds != seen || !__atomic_load_n(&marker_target, __ATOMIC_ACQUIRE)) {
        seen = adds;
        if (!__atomic_load_n(&marker_target, __ATOMIC_ACQUIRE))
            set_target(r_dlsym(RTLD_DEFAULT, marker_name));
        if (__atomic_load_n(&marker_target, __ATOMIC_ACQUIRE)) dl_iterate_phdr(patch_object, NULL);
    }
    __atomic_store_n(&busy, 0, __ATOMIC_RELEASE);
}

/* dlsym hands out the trampoline for the marker symbol. Other names resolve as before, except
 * that RTLD_NEXT is taken relative to this library (TRACE.md says what that changes). */
EXPORT void *dlsym(void *handle, const char *name) {
    if (!resolved) resolve();
    void *p = r_dlsym(handle, name);
#if HAVE_TRAMP
    if (p && active && marker_name[0] && !strcmp(name, marker_name)) {
        set_target(p);
        int saved = tl.in_hook;
        tl.in_hook = 1;
        rescan_marker();
        tl.in_hook = saved;
        if (p == __atomic_load_n(&marker_target, __ATOMIC_ACQUIRE)) return (void *)wmtrace_tramp;
    }
#endif
    return p;
}

/* ---- start-up, fork and exit ---- */

#define REAL(var, name) var = (__typeof__(var))r_dlsym(RTLD_NEXT, name)
static void resolve(void) {
    if (resolved || initialising) return;
    initialising = 1;
    r_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!r_dlsym)
        r_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    REAL(r_malloc, "malloc");
    REAL(r_free, "free");
    REAL(r_calloc, "calloc");
    REAL(r_realloc, "realloc");
    REAL(r_posix_memalign, "posix_memalign");
    REAL(r_aligned_alloc, "aligned_alloc");
    REAL(r_memalign, "memalign");
    REAL(r_valloc, "valloc");
    REAL(r_usable, "malloc_usable_size");
    REAL(r_mmap, "mmap");
    REAL(r_munmap, "munmap");
    REAL(r_mremap, "mremap");
    REAL(r_mlock, "mlock");
    REAL(r_munlock, "munlock");
    REAL(r_mlockall, "mlockall");
    REAL(r_munlockall, "munlockall");
    REAL(r_open, "open");
    REAL(r_open64, "open64");
    REAL(r_openat, "openat");
    REAL(r_openat64, "openat64");
    REAL(r_fopen, "fopen");
    REAL(r_fopen64, "fopen64");
    REAL(r_close, "close");
    REAL(r_fclose, "fclose");
    REAL(r_read, "read");
    REAL(r_pread, "pread");
    REAL(r_pread64, "pread64");
    REAL(r_fread, "fread");
    initialising = 0;
    resolved = 1;
}

static const char *env(const char *name) {
    extern char **environ;
    size_t n = strlen(name);
    for (char **e = environ; e && *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

static void on_fork_child(void) { active = 0; }

WMTRACE_CTOR STATIC_ENTRY void wmtrace_start(void) {
    resolve();
    const char *out = env(WMTRACE_ENV_OUT), *pid = env(WMTRACE_ENV_PID);
    if (!out || !pid) return;
    int64_t want = 0;
    for (const char *p = pid; *p >= '0' && *p <= '9'; p++)
        want = want * 10 + (*p - '0');
    if (want != (int64_t)getpid()) return; /* not the traced process: dormant */
    int fd = (int)syscall(SYS_openat, AT_FDCWD, out, O_RDWR | O_APPEND | O_CLOEXEC);
    if (fd < 0) return;
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, 900);
    if (hi >= 0) {
        syscall(SYS_close, fd);
        fd = hi;
    }
    void *m = r_mmap(NULL, sizeof(wmtrace_stats), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        syscall(SYS_close, fd);
        return;
    }
    out_fd = fd;
    stats = m;
    uint64_t gen = stats->generation + 1;
    memset(stats->threads, 0, sizeof stats->threads);
    stats->n_threads = stats->dropped_threads = stats->dropped_blocks = 0;
    stats->marker_patched = 0;
    stats->magic = WMTRACE_MAGIC;
    stats->version = WMTRACE_VERSION;
    stats->size = sizeof(wmtrace_stats);
    stats->pid = getpid();
    stats->generation = gen;
    stats->tracer_bytes =
        sizeof blocks + sizeof maps + sizeof map_left + sizeof fd_weight + sizeof boot_buf;
    const char *mk = env(WMTRACE_ENV_MARKER);
    if (mk && *mk) {
        size_t n = strlen(mk);
        if (n >= sizeof marker_name) n = sizeof marker_name - 1;
        memcpy(marker_name, mk, n);
        memcpy(stats->marker, mk, n);
        stats->marker[n] = 0;
    }
    const char *fl = env(WMTRACE_ENV_FILES);
    while (fl && *fl && n_named < FILES) {
        char path[1024];
        size_t n = strcspn(fl, "\n");
        if (n < sizeof path) {
            memcpy(path, fl, n);
            path[n] = 0;
            struct stat st;
            if (stat(path, &st) == 0) {
                named[n_named].dev = (uint64_t)st.st_dev;
                named[n_named++].ino = (uint64_t)st.st_ino;
            }
        }
        fl += n + (fl[n] == '\n');
    }
    pthread_atfork(NULL, NULL, on_fork_child);
    struct sigaction old;
    if (sigaction(SIGUSR1, NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigusr1;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGUSR1, &sa, NULL);
    }
    active = 1;
    line l;
    begin(&l, 'X');
    put_s(&l, " ");
    put_u(&l, gen);
    put_s(&l, " ");
    put_u(&l, (uint64_t)getpid());
    end(&l);
    if (marker_name[0] && !HAVE_TRAMP) {
        begin(&l, 'W');
        put_s(&l, " --cycles-marker is not supported on this architecture");
        end(&l);
    }
    me();
    rescan_marker();
    sample();
}

WMTRACE_DTOR STATIC_ENTRY void wmtrace_stop(void) {
    if (!active || !stats) return;
    sample();
    line l;
    begin(&l, 'Q');
    end(&l);
}
