/*
 * io.c: the weight files of libwmtrace.so and what the program does with them: opens and reads
 * (which threads load), mappings of weight files and anonymous mappings, mlock.
 *
 * A weight file is one named with --file, or a regular file over 1 MiB with a GGUF or safetensors
 * header; files are known by device and inode, descriptors by a table fd -> file.
 */
#include "interposer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
static int weight_fds;             /* descriptors of weight files open now */
static signed char fd_weight[FDS]; /* fd -> weight file index + 1 (atomic: the
                                      kernel's fd reuse is a synchronisation TSan cannot see) */

/* ---- weight files ---- */

static bool is_weight_header(int fd, uint64_t size) {
    unsigned char h[16];
    if (wt_sys_pread(fd, h, sizeof h, 0) != (long)sizeof h) return false;
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
    if (fd < 0 || wt_sys_fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    for (int i = 0; i < __atomic_load_n(&n_files, __ATOMIC_ACQUIRE); i++)
        if (files[i].dev == (uint64_t)st.st_dev && files[i].ino == (uint64_t)st.st_ino)
            return i + 1;
    const char *kind = NULL;
    for (int i = 0; i < n_named; i++)
        if (named[i].dev == (uint64_t)st.st_dev && named[i].ino == (uint64_t)st.st_ino)
            kind = "named";
    if (!kind && st.st_size > (1 << 20) && is_weight_header(fd, (uint64_t)st.st_size)) {
        unsigned char m[4];
        kind = wt_sys_pread(fd, m, 4, 0) == 4 && !memcmp(m, "GGUF", 4) ? "gguf" : "safetensors";
    }
    if (!kind) return 0;
    wt_spin_lock(&file_lock);
    int idx = 0;
    for (int i = 0; i < n_files; i++)
        if (files[i].dev == (uint64_t)st.st_dev && files[i].ino == (uint64_t)st.st_ino) idx = i + 1;
    if (!idx && n_files < FILES) {
        files[n_files].dev = (uint64_t)st.st_dev;
        files[n_files].ino = (uint64_t)st.st_ino;
        idx = n_files + 1;
        char link[64], path[700];
        wt_line l;
        int ln = 0;
        char digits[16];
        memcpy(link, "/proc/self/fd/", 14);
        for (int v = fd; ln == 0 || v; v /= 10)
            digits[ln++] = (char)('0' + v % 10);
        for (int i = 0; i < ln; i++)
            link[14 + i] = digits[ln - 1 - i];
        link[14 + ln] = 0;
        long pn = wt_sys_readlink(link, path, sizeof path - 1);
        path[pn > 0 ? pn : 0] = 0;
        wt_begin(&l, 'F');
        wt_put_u(&l, (uint64_t)n_files);
        wt_put_u(&l, (uint64_t)st.st_size);
        wt_put_s(&l, kind);
        wt_put_s(&l, path);
        wt_end(&l);
        __atomic_store_n(&n_files, n_files + 1, __ATOMIC_RELEASE);
    }
    wt_spin_unlock(&file_lock);
    return idx;
}

/* ---- mappings ---- */

static bool overlaps_weight(uintptr_t a, size_t n) {
    bool hit = false;
    wt_spin_lock(&map_lock);
    for (int i = 0; i < MAPS; i++)
        if (maps[i].used && maps[i].fidx >= 0 && maps[i].addr < a + n &&
            a < maps[i].addr + maps[i].len)
            hit = true;
    wt_spin_unlock(&map_lock);
    return hit;
}

static void add_map(uintptr_t a, size_t len, int fidx, int id) {
    wmtrace_thread *t = wt_me();
    wt_spin_lock(&map_lock);
    for (int i = 0; i < MAPS; i++) {
        if (maps[i].used) continue;
        maps[i] = (map_entry){a, len, 1, fidx, t ? wt_tl.idx - 1 : -1, id};
        break;
    }
    wt_spin_unlock(&map_lock);
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
    wt_spin_lock(&map_lock);
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
            if (m->tidx >= 0 && wt_stats)
                __atomic_fetch_sub(&wt_stats->threads[m->tidx].anon_held, (int64_t)cut,
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
    wt_spin_unlock(&map_lock);
    for (int k = 0; k < nid; k++) {
        wt_line l;
        wt_begin(&l, 'U');
        wt_put_u(&l, (uint64_t)ids[k]);
        wt_put_u(&l, gone[k]);
        wt_put_u(&l, left[k]);
        wt_end(&l);
    }
}

static void note_map(void *p, size_t len, int prot, int flags, int fd, off_t off) {
    if (p == MAP_FAILED || !wt_active || wt_tl.in_hook || !wt_stats) return;
    wt_tl.in_hook = 1;
    /* MAP_FIXED over an existing range replaces it. */
    if (flags & MAP_FIXED) remove_range((uintptr_t)p, len);
    int w = (flags & MAP_ANONYMOUS) ? 0 : classify(fd);
    if (w) {
        wt_loading();
        wt_spin_lock(&map_lock);
        int id = next_map_id < MAPS ? next_map_id++ : MAPS - 1;
        map_left[id] = len;
        wt_spin_unlock(&map_lock);
        add_map((uintptr_t)p, len, w - 1, id);
        wt_line l;
        wt_begin(&l, 'M');
        wt_put_u(&l, (uint64_t)id);
        wt_put_u(&l, (uint64_t)(w - 1));
        wt_put_x(&l, (uint64_t)(uintptr_t)p);
        wt_put_u(&l, len);
        wt_put_u(&l, (uint64_t)off);
        wt_put_u(&l, (uint64_t)prot);
        wt_put_u(&l, (uint64_t)flags);
        wt_put_i(&l, (int64_t)__atomic_load_n(&wt_cur_load, __ATOMIC_ACQUIRE) - 1);
        wt_end(&l);
    } else if (flags & MAP_ANONYMOUS) {
        add_map((uintptr_t)p, len, -1, 0);
    }
    wt_tl.in_hook = 0;
}

EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    if (!wt_resolved) wt_resolve();
    void *p = wt_r_mmap(addr, len, prot, flags, fd, off);
    note_map(p, len, prot, flags, fd, off);
    return p;
}
EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return mmap(addr, len, prot, flags, fd, off);
}

EXPORT int munmap(void *addr, size_t len) {
    if (!wt_resolved) wt_resolve();
    int rc = wt_r_munmap(addr, len);
    if (rc == 0 && wt_active && !wt_tl.in_hook && wt_stats) {
        wt_tl.in_hook = 1;
        size_t pg = 4096;
        remove_range((uintptr_t)addr, (len + pg - 1) & ~(pg - 1));
        wt_tl.in_hook = 0;
    }
    return rc;
}

EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
    if (!wt_resolved) wt_resolve();
    void *want = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        want = va_arg(ap, void *);
        va_end(ap);
    }
    void *p = wt_r_mremap(old, old_len, new_len, flags, want);
    if (p != MAP_FAILED && wt_active && !wt_tl.in_hook && wt_stats) {
        wt_tl.in_hook = 1;
        int fidx = -2;
        wt_spin_lock(&map_lock);
        for (int i = 0; i < MAPS; i++)
            if (maps[i].used && maps[i].addr == (uintptr_t)old) fidx = maps[i].fidx;
        wt_spin_unlock(&map_lock);
        if (fidx != -2) {
            remove_range((uintptr_t)old, old_len);
            if (fidx < 0) {
                add_map((uintptr_t)p, new_len, -1, 0);
            } else {
                wt_warn("mremap of a weight mapping: its new range is not followed");
            }
        }
        wt_tl.in_hook = 0;
    }
    return p;
}

static void lock_line(char type, const void *a, size_t n, int rc) {
    if (!wt_active || wt_tl.in_hook || !wt_stats) return;
    wt_tl.in_hook = 1;
    wt_line l;
    wt_begin(&l, type);
    wt_put_x(&l, (uint64_t)(uintptr_t)a);
    wt_put_u(&l, n);
    wt_put_i(&l, rc);
    wt_put_s(&l, overlaps_weight((uintptr_t)a, n) ? "1" : "0");
    wt_end(&l);
    wt_tl.in_hook = 0;
}
EXPORT int mlock(const void *a, size_t n) {
    if (!wt_resolved) wt_resolve();
    int rc = wt_r_mlock(a, n);
    lock_line('L', a, n, rc);
    return rc;
}
EXPORT int munlock(const void *a, size_t n) {
    if (!wt_resolved) wt_resolve();
    int rc = wt_r_munlock(a, n);
    lock_line('K', a, n, rc);
    return rc;
}
EXPORT int mlockall(int flags) {
    if (!wt_resolved) wt_resolve();
    int rc = wt_r_mlockall(flags);
    if (wt_active && wt_stats) {
        wt_line l;
        wt_begin(&l, 'A');
        wt_put_u(&l, (uint64_t)flags);
        wt_put_i(&l, rc);
        wt_end(&l);
    }
    return rc;
}
EXPORT int munlockall(void) {
    if (!wt_resolved) wt_resolve();
    int rc = wt_r_munlockall();
    if (wt_active && wt_stats) {
        wt_line l;
        wt_begin(&l, 'Z');
        wt_put_i(&l, rc);
        wt_end(&l);
    }
    return rc;
}

/* ---- opens and reads ---- */

static void note_open(int fd) {
    if (fd < 0 || !wt_active || wt_tl.in_hook || !wt_stats) return;
    wt_tl.in_hook = 1;
    int w = classify(fd);
    if (fd < FDS) __atomic_store_n(&fd_weight[fd], (signed char)w, __ATOMIC_RELAXED);
    if (w) {
        if (fd < FDS) __atomic_fetch_add(&weight_fds, 1, __ATOMIC_RELAXED);
        wt_loading();
        wt_line l;
        wt_begin(&l, 'O');
        wt_put_u(&l, (uint64_t)(w - 1));
        wt_end(&l);
    }
    wt_tl.in_hook = 0;
}

static int open_mode_needed(int flags) {
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

/* The four open entry points differ only in the call they pass on: OPEN_HOOK(name, the call's
 * leading parameters and arguments) defines one that reads the optional mode the C library
 * passes with O_CREAT or O_TMPFILE, calls the real function and notes the descriptor. */
#define OPEN_HOOK(name, real, params, args)                                                        \
    EXPORT int name params {                                                                       \
        if (!wt_resolved) wt_resolve();                                                            \
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
OPEN_HOOK(open, wt_r_open, (const char *path, int flags, ...), (path, flags, mode))
OPEN_HOOK(open64, wt_r_open64, (const char *path, int flags, ...), (path, flags, mode))
OPEN_HOOK(openat, wt_r_openat, (int dir, const char *path, int flags, ...),
          (dir, path, flags, mode))
OPEN_HOOK(openat64, wt_r_openat64, (int dir, const char *path, int flags, ...),
          (dir, path, flags, mode))

EXPORT FILE *fopen(const char *path, const char *mode) {
    if (!wt_resolved) wt_resolve();
    FILE *f = wt_r_fopen(path, mode);
    if (f) note_open(fileno(f));
    return f;
}
EXPORT FILE *fopen64(const char *path, const char *mode) {
    if (!wt_resolved) wt_resolve();
    FILE *f = wt_r_fopen64(path, mode);
    if (f) note_open(fileno(f));
    return f;
}
/* A weight file's descriptor is closed. Without load markers, a load pauses when the last weight
 * file it opened is closed: it ends there if a release comes before the next touch. */
static void note_close(int fd) {
    if (fd < 0 || fd >= FDS || !__atomic_exchange_n(&fd_weight[fd], 0, __ATOMIC_RELAXED)) return;
    if (__atomic_sub_fetch(&weight_fds, 1, __ATOMIC_RELAXED) > 0 || !wt_active || wt_tl.in_hook ||
        wt_have_load_markers)
        return;
    int cur = __atomic_load_n(&wt_cur_load, __ATOMIC_ACQUIRE);
    if (!cur) return;
    wt_load_pause(cur - 1);
}

EXPORT int close(int fd) {
    if (!wt_resolved) wt_resolve();
    if (fd == wt_out_fd && wt_out_fd >= 0) return 0; /* the trace file stays open for the tracer */
    note_close(fd);
    return wt_r_close(fd);
}
EXPORT int fclose(FILE *f) {
    if (!wt_resolved) wt_resolve();
    note_close(f ? fileno(f) : -1);
    return wt_r_fclose(f);
}

static void note_read(int fd, ssize_t n) {
    if (n <= 0 || fd < 0 || fd >= FDS || !__atomic_load_n(&fd_weight[fd], __ATOMIC_RELAXED) ||
        !wt_active || wt_tl.in_hook)
        return;
    wt_loading();
    wmtrace_thread *t = wt_me();
    if (t) __atomic_store_n(&t->weight_read, t->weight_read + (uint64_t)n, __ATOMIC_RELAXED);
}
EXPORT ssize_t read(int fd, void *b, size_t n) {
    if (!wt_resolved) wt_resolve();
    ssize_t r = wt_r_read(fd, b, n);
    note_read(fd, r);
    return r;
}
EXPORT ssize_t pread(int fd, void *b, size_t n, off_t off) {
    if (!wt_resolved) wt_resolve();
    ssize_t r = wt_r_pread(fd, b, n, off);
    note_read(fd, r);
    return r;
}
EXPORT ssize_t pread64(int fd, void *b, size_t n, off_t off) {
    if (!wt_resolved) wt_resolve();
    ssize_t r = wt_r_pread64(fd, b, n, off);
    note_read(fd, r);
    return r;
}
/* Vectored reads too: a reader that scatters one read over several buffers (weightmap's
 * engine, a tensor's place and its partial blocks' staging) reads the weight file all the same. */
EXPORT ssize_t preadv(int fd, const struct iovec *v, int n, off_t off) {
    if (!wt_resolved) wt_resolve();
    ssize_t r = wt_r_preadv(fd, v, n, off);
    note_read(fd, r);
    return r;
}
EXPORT ssize_t preadv64(int fd, const struct iovec *v, int n, off_t off) {
    if (!wt_resolved) wt_resolve();
    ssize_t r = wt_r_preadv64(fd, v, n, off);
    note_read(fd, r);
    return r;
}
EXPORT size_t fread(void *b, size_t size, size_t n, FILE *f) {
    if (!wt_resolved) wt_resolve();
    size_t r = wt_r_fread(b, size, n, f);
    if (r) note_read(fileno(f), (ssize_t)(r * size));
    return r;
}

int wt_weight_maps_live(void) {
    int n = 0;
    wt_spin_lock(&map_lock);
    for (int i = 0; i < MAPS; i++)
        if (maps[i].used && maps[i].fidx >= 0) n++;
    wt_spin_unlock(&map_lock);
    return n;
}

size_t wt_tables_bytes_alloc(void) HIDDEN;
size_t wt_tables_bytes_io(void) {
    return sizeof maps + sizeof map_left + sizeof fd_weight + wt_tables_bytes_alloc();
}

/* The files named with --file (WMTRACE_FILES: paths separated by '\n'). */
void wt_named_files(const char *fl) {
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
}
