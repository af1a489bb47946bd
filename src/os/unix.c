/*
 * unix.c: the POSIX half of os.h, for every Unix: files, pread, mappings of files, threads
 * (their stacks anonymous mappings), mutexes, clocks and shared libraries. Nothing here is Linux's:
 * what is (/proc, O_DIRECT, madvise beyond POSIX, the raw mlock) lives in linux.c, and a Darwin
 * port links this file unchanged beside its darwin.c. The one name outside POSIX.1-2008 is
 * _SC_NPROCESSORS_ONLN, which Linux, the BSDs and Darwin all have.
 *
 * Every fallible function first asks wm__fault_hit() so tests can fail it (fault.h).
 */
#include "unix.h"
#include "os.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef MAP_STACK
#define MAP_STACK 0 /* a hint where it exists (Linux, the BSDs); Darwin has none */
#endif

/* ---- files ---- */

int wm__unix_open(const char *path, int extra, int *fd_out) {
    int fd;
    do {
        fd = open(path, O_RDONLY | O_CLOEXEC | extra);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return errno;
    *fd_out = fd;
    return 0;
}

int wm__os_open_read(const char *path, int *fd_out) {
    int e = wm__fault_hit(WM_OS_OPEN);
    return e ? e : wm__unix_open(path, 0, fd_out);
}

void wm__os_close(int fd) {
    /* EINTR on close: the descriptor is gone on Linux and Darwin alike; do not retry */
    if (fd >= 0) close(fd);
}

int wm__unix_read(int fd, void *buf, size_t len, size_t *got) {
    *got = 0;
    for (;;) {
        int e = wm__fault_hit(WM_OS_PREAD);
        if (e == EINTR) continue;
        if (e) return e;
        ssize_t n = read(fd, buf, len);
        if (n >= 0) {
            *got = (size_t)n;
            return 0;
        }
        if (errno != EINTR) return errno;
    }
}

/* fstat(fd), or stat(path) where path is not NULL. */
static int stat_of(int fd, const char *path, wm_os_stat *out) {
    int e = wm__fault_hit(WM_OS_STAT);
    if (e) return e;
    struct stat st;
    if ((path ? stat(path, &st) : fstat(fd, &st)) != 0) return errno;
    out->size = (uint64_t)st.st_size;
    out->dev = (uint64_t)st.st_dev;
    out->ino = (uint64_t)st.st_ino;
    out->is_regular = S_ISREG(st.st_mode);
#if defined(__APPLE__)
    out->mtime_ns =
        (uint64_t)st.st_mtimespec.tv_sec * 1000000000u + (uint64_t)st.st_mtimespec.tv_nsec;
#else
    out->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
#endif
    return 0;
}

int wm__os_stat(int fd, wm_os_stat *out) { return stat_of(fd, NULL, out); }
int wm__os_stat_path(const char *path, wm_os_stat *out) { return stat_of(-1, path, out); }

int wm__os_pread(int fd, void *buf, size_t len, uint64_t off, size_t *got) {
    size_t done = 0;
    *got = 0;
    while (done < len) {
        int e = wm__fault_hit(WM_OS_PREAD);
        if (e == EINTR) continue; /* an injected EINTR is retried like a real one */
        if (e) return e;
        size_t want = len - done;
        if (want > ((size_t)1 << 30)) want = (size_t)1 << 30; /* Linux caps a read at ~2 GiB */
        ssize_t n = pread(fd, (char *)buf + done, want, (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) break; /* end of file */
        done += (size_t)n;
        *got = done;
    }
    return 0;
}

int wm__os_preadv(int fd, const wm_os_iov *iov, int n, uint64_t off, size_t *got) {
    struct iovec v[WM_OS_IOV_MAX];
    size_t len = 0, done = 0;
    *got = 0;
    if (n < 0 || n > WM_OS_IOV_MAX) return EINVAL;
    for (int i = 0; i < n; i++) {
        v[i] = (struct iovec){.iov_base = iov[i].p, .iov_len = iov[i].len};
        len += iov[i].len;
    }
    int first = 0; /* v[first..n) is what is left, v[first] advanced past what came */
    while (done < len) {
        int e = wm__fault_hit(WM_OS_PREAD);
        if (e == EINTR) continue; /* an injected EINTR is retried like a real one */
        if (e) return e;
        ssize_t r = preadv(fd, v + first, n - first, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (r == 0) break; /* end of file */
        done += (size_t)r;
        *got = done;
        size_t k = (size_t)r;
        while (first < n && k >= v[first].iov_len)
            k -= v[first++].iov_len;
        if (first < n && k) {
            v[first].iov_base = (char *)v[first].iov_base + k;
            v[first].iov_len -= k;
        }
    }
    return 0;
}

/* ---- mappings (anonymous pages are the OS file's: linux.c maps them, darwin.c asks the Mach
 * VM) ---- */

int wm__os_map(int fd, uint64_t off, size_t len, wm_os_map_kind kind, void **out) {
    int e = wm__fault_hit(WM_OS_MAP);
    if (e) return e;
    if (len == 0) return EINVAL;
    int prot = kind == WM_OS_MAP_SHARED_RO ? PROT_READ : PROT_READ | PROT_WRITE;
    int flags = kind == WM_OS_MAP_SHARED_RO ? MAP_SHARED : MAP_PRIVATE;
    void *p = mmap(NULL, len, prot, flags, fd, (off_t)off);
    if (p == MAP_FAILED) return errno;
    *out = p;
    return 0;
}

void wm__os_unmap(void *addr, size_t len) {
    if (addr && len) munmap(addr, len);
}

/* ---- the page cache ---- */

/* mincore over a transient shared read-only mapping, a bounded piece at a time: the mapping is
 * never touched, so it faults nothing in, and it is gone before this returns. mincore is not
 * POSIX.1 but every Unix this targets has it (Linux, the BSDs, Darwin). */
int wm__unix_cached(int fd, uint64_t off, uint64_t len, uint64_t *cached_out) {
    enum { VEC = 2048 };
    unsigned char vec[VEC];
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), a = off / page * page;
    uint64_t b = (off + len + page - 1) / page * page, cached = 0;
    if (wm__fault_cached_pinned()) {
        *cached_out = b - a;
        return 0;
    }
    while (a < b) {
        uint64_t n = b - a < VEC * page ? b - a : VEC * page;
        void *p = mmap(NULL, (size_t)n, PROT_READ, MAP_SHARED, fd, (off_t)a);
        if (p == MAP_FAILED) return errno;
        int r = mincore(p, (size_t)n, (void *)vec);
        int e = r ? errno : 0;
        munmap(p, (size_t)n);
        if (e) return e;
        for (uint64_t i = 0; i < n / page; i++)
            cached += (vec[i] & 1) ? page : 0;
        a += n;
    }
    *cached_out = cached;
    return 0;
}

/* ---- threads ---- */

void wm__os_yield(void) { (void)sched_yield(); }

int wm__os_thread_start(wm_os_thread *t, void *(*fn)(void *), void *arg) {
    int e = wm__fault_hit(WM_OS_THREAD);
    if (e) return e;
    size_t len = WM_OS_THREAD_STACK;
    void *stack =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) return errno;
    pthread_attr_t attr;
    e = pthread_attr_init(&attr);
    if (!e) e = pthread_attr_setstack(&attr, stack, len);
    pthread_t th;
    if (!e) e = pthread_create(&th, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (e) {
        munmap(stack, len);
        return e;
    }
    t->handle = (unsigned long)th;
    t->stack = stack;
    t->stack_len = len;
    return 0;
}

void wm__os_thread_join(wm_os_thread *t) {
    pthread_join((pthread_t)t->handle, NULL);
    munmap(t->stack, t->stack_len);
    t->stack = NULL;
}

_Static_assert(sizeof(pthread_mutex_t) <= sizeof(((wm_os_mutex *)0)->opaque) &&
                   _Alignof(pthread_mutex_t) <= 16,
               "pthread_mutex_t does not fit wm_os_mutex");
_Static_assert(sizeof(pthread_cond_t) <= sizeof(((wm_os_cond *)0)->opaque) &&
                   _Alignof(pthread_cond_t) <= 16,
               "pthread_cond_t does not fit wm_os_cond");

static pthread_mutex_t *pmutex(wm_os_mutex *m) { return (pthread_mutex_t *)(void *)m->opaque; }
static pthread_cond_t *pcond(wm_os_cond *c) { return (pthread_cond_t *)(void *)c->opaque; }

int wm__os_mutex_init(wm_os_mutex *m) {
    int e = wm__fault_hit(WM_OS_THREAD);
    return e ? e : pthread_mutex_init(pmutex(m), NULL);
}
void wm__os_mutex_destroy(wm_os_mutex *m) { pthread_mutex_destroy(pmutex(m)); }
void wm__os_mutex_lock(wm_os_mutex *m) { pthread_mutex_lock(pmutex(m)); }
void wm__os_mutex_unlock(wm_os_mutex *m) { pthread_mutex_unlock(pmutex(m)); }

int wm__os_cond_init(wm_os_cond *c) {
    int e = wm__fault_hit(WM_OS_THREAD);
    return e ? e : pthread_cond_init(pcond(c), NULL);
}
void wm__os_cond_destroy(wm_os_cond *c) { pthread_cond_destroy(pcond(c)); }
void wm__os_cond_wait(wm_os_cond *c, wm_os_mutex *m) { pthread_cond_wait(pcond(c), pmutex(m)); }
void wm__os_cond_signal(wm_os_cond *c) { pthread_cond_signal(pcond(c)); }
void wm__os_cond_broadcast(wm_os_cond *c) { pthread_cond_broadcast(pcond(c)); }

/* ---- shared libraries ---- */

void wm__os_library(const char *const *names, size_t n, void **out, const char **why) {
    *out = NULL;
    *why = "no library name";
    for (size_t i = 0; i < n && !*out; i++) {
        *out = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!*out) *why = dlerror();
    }
}

void *wm__os_symbol(void *library, const char *name) { return dlsym(library, name); }

/* ---- misc ---- */

size_t wm__os_page_size(void) {
    static size_t page;
    if (!page) page = (size_t)sysconf(_SC_PAGESIZE);
    return page;
}

unsigned wm__os_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1u : (unsigned)n;
}

double wm__os_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- locking limits and advice: POSIX calls every Unix file shares ---- */

int wm__os_memlock_limit(uint64_t *soft_out) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return errno;
    *soft_out = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
    return 0;
}

int wm__unix_madvise(void *addr, size_t len, int adv) {
    for (;;) {
        if (madvise(addr, len, adv) == 0) return 0;
        if (errno != EINTR && errno != EAGAIN) return errno;
    }
}
