/*
 * wmtrace.c: libwmtrace.so, the LD_PRELOAD interposer behind `weightmap trace`. It watches the
 * weight-memory lifecycle of any program: the malloc family per thread and per load, mappings of
 * weight files, anonymous mappings, mlock, and the load and release markers. Its own code only
 * (no weightmap library); interposer.h says which file holds what and the rules every hook keeps.
 *
 * This file: the state, the event lines (no allocation), the process's figures (P lines), the
 * real functions, start-up, fork and exit. Figures per thread and per load live in the shared
 * stats block of the trace file (wmtrace.h), so _exit and signals lose nothing.
 */
#include "interposer.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int wt_active;
int wt_resolved;
int wt_initialising;
int wt_out_fd = -1;
wmtrace_stats *wt_stats;
TLS wt_thread_state wt_tl;

#define WT_REAL_DEF(ret, name, args) ret(*wt_r_##name) args;
WT_REAL_LIST(WT_REAL_DEF)
static struct mallinfo2 (*r_mallinfo2)(void);

void wt_spin_lock(volatile int *l) {
    while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE)) {
        while (__atomic_load_n(l, __ATOMIC_RELAXED)) {
        }
    }
}
void wt_spin_unlock(volatile int *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

/* ---- event lines ---- */

static void put_raw(wt_line *l, const char *s) {
    while (*s && l->n < sizeof l->b - 2)
        l->b[l->n++] = *s++;
}
void wt_put_s(wt_line *l, const char *s) {
    put_raw(l, " ");
    put_raw(l, s);
}
static void put_digits(wt_line *l, uint64_t v, unsigned base) {
    char t[24];
    int i = 0;
    do
        t[i++] = "0123456789abcdef"[v % base];
    while ((v /= base));
    while (i && l->n < sizeof l->b - 2)
        l->b[l->n++] = t[--i];
}
void wt_put_u(wt_line *l, uint64_t v) {
    put_raw(l, " ");
    put_digits(l, v, 10);
}
void wt_put_i(wt_line *l, int64_t v) {
    put_raw(l, v < 0 ? " -" : " ");
    put_digits(l, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v, 10);
}
void wt_put_x(wt_line *l, uint64_t v) {
    put_raw(l, " 0x");
    put_digits(l, v, 16);
}
pid_t wt_gettid(void) { return (pid_t)syscall(SYS_gettid); }
uint64_t wt_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
void wt_begin(wt_line *l, char type) {
    l->n = 0;
    put_digits(l, wt_now_ns(), 10);
    wt_put_u(l, (uint64_t)wt_gettid());
    put_raw(l, " ");
    l->b[l->n++] = type;
}
void wt_end(wt_line *l) {
    l->b[l->n++] = '\n';
    if (wt_out_fd >= 0) {
        int e = errno;
        long w = wt_sys_write(wt_out_fd, l->b, l->n);
        (void)w;
        errno = e;
    }
}
void wt_warn(const char *text) {
    wt_line l;
    wt_begin(&l, 'W');
    wt_put_s(&l, text);
    wt_end(&l);
}

/* ---- raw system calls ---- */

long wt_sys_openat(int dirfd, const char *path, int flags) {
    return syscall(SYS_openat, (long)dirfd, (long)(uintptr_t)path, (long)flags, 0L);
}
long wt_sys_close(int fd) { return syscall(SYS_close, (long)fd); }
long wt_sys_read(int fd, void *buf, size_t n) {
    return syscall(SYS_read, (long)fd, (long)(uintptr_t)buf, (long)n);
}
long wt_sys_write(int fd, const void *buf, size_t n) {
    return syscall(SYS_write, (long)fd, (long)(uintptr_t)buf, (long)n);
}
long wt_sys_pread(int fd, void *buf, size_t n, off_t off) {
    return syscall(SYS_pread64, (long)fd, (long)(uintptr_t)buf, (long)n, (long)off);
}
long wt_sys_pwrite(int fd, const void *buf, size_t n, off_t off) {
    return syscall(SYS_pwrite64, (long)fd, (long)(uintptr_t)buf, (long)n, (long)off);
}
long wt_sys_fstat(int fd, struct stat *st) {
    return syscall(SYS_fstat, (long)fd, (long)(uintptr_t)st);
}
long wt_sys_readlink(const char *path, char *buf, size_t n) {
    return syscall(SYS_readlinkat, (long)AT_FDCWD, (long)(uintptr_t)path, (long)(uintptr_t)buf,
                   (long)n);
}
void *wt_sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return (void *)syscall(SYS_mmap, (long)(uintptr_t)addr, (long)len, (long)prot, (long)flags,
                           (long)fd, (long)off);
}
long wt_sys_munmap(void *addr, size_t len) {
    return syscall(SYS_munmap, (long)(uintptr_t)addr, (long)len);
}
long wt_sys_mprotect(void *addr, size_t len, int prot) {
    return syscall(SYS_mprotect, (long)(uintptr_t)addr, (long)len, (long)prot);
}

/* ---- the process's figures ---- */

/* Reads a /proc file of this process into buf (raw syscalls); calls each(chunk) when given, for
 * files larger than buf. Returns the bytes of the last chunk. */
static size_t read_proc(const char *path, char *buf, size_t cap, uint64_t *newlines) {
    int fd = (int)wt_sys_openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t n = 0;
    for (;;) {
        long r = wt_sys_read(fd, buf + n, cap - 1 - n);
        if (r <= 0) break;
        if (newlines) {
            for (ssize_t i = 0; i < r; i++)
                *newlines += buf[n + (size_t)i] == '\n';
            continue; /* counting only: the buffer is reused */
        }
        n += (size_t)r;
        if (n + 1 >= cap) break;
    }
    wt_sys_close(fd);
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

/* From /proc/self/status (the kernel's counters: smaps_rollup would be exact to the page but
 * walks every page table under the mmap lock, which cost a traced llama.cpp mmap load several
 * per cent), /proc/self/maps (its lines) and mallinfo2. */
static void put_read(wt_line *l, bool read, uint64_t v) {
    if (read)
        wt_put_u(l, v);
    else
        wt_put_s(l, "-");
}

void wt_point(bool maps_too) {
    char buf[4096];
    uint64_t maps = 0;
    bool status = read_proc("/proc/self/status", buf, sizeof buf, NULL) > 0 &&
                  strstr(buf, "\nRssAnon:") != NULL;
    uint64_t fp =
        field_kb(buf, "\nRssAnon:") + field_kb(buf, "\nVmSwap:") + field_kb(buf, "\nRssShmem:");
    uint64_t rss = field_kb(buf, "\nVmRSS:"), file = field_kb(buf, "\nRssFile:");
    uint64_t locked = field_kb(buf, "\nVmLck:");
    char chunk[4096];
    bool maps_read = false; /* not read at a load's start and end */
    if (maps_too) {
        read_proc("/proc/self/maps", chunk, sizeof chunk, &maps);
        maps_read = maps > 0;
    }
    uint64_t mfree = 0;
    if (r_mallinfo2) {
        int saved = wt_tl.in_hook;
        wt_tl.in_hook = 1;
        mfree = (uint64_t)r_mallinfo2().fordblks;
        wt_tl.in_hook = saved;
    }
    wt_line l;
    wt_begin(&l, 'P');
    put_read(&l, status, fp);
    put_read(&l, status, rss);
    put_read(&l, status, file);
    put_read(&l, status, locked);
    put_read(&l, maps_read, maps);
    wt_put_u(&l, (uint64_t)wt_weight_maps_live());
    put_read(&l, r_mallinfo2 != NULL, mfree);
    wt_end(&l);
}

/* This thread's slot in the shared block (NULL when the table is full or not set up). */
wmtrace_thread *wt_me(void) {
    if (wt_tl.idx > 0) return wt_tl.slot;
    if (wt_tl.idx < 0 || !wt_stats) return NULL;
    uint64_t i = __atomic_fetch_add(&wt_stats->n_threads, 1, __ATOMIC_RELAXED);
    if (i >= WMTRACE_MAX_THREADS) {
        __atomic_store_n(&wt_stats->n_threads, WMTRACE_MAX_THREADS, __ATOMIC_RELAXED);
        __atomic_fetch_add(&wt_stats->dropped_threads, 1, __ATOMIC_RELAXED);
        wt_tl.idx = -1;
        return NULL;
    }
    wmtrace_thread *t = &wt_stats->threads[i];
    t->tid = wt_gettid();
    prctl(PR_GET_NAME, t->name);
    wt_tl.slot = t;
    wt_tl.idx = (int)i + 1;
    return t;
}

/* ---- the real functions ---- */

void wt_resolve(void) {
    if (wt_resolved || wt_initialising) return;
    wt_initialising = 1;
#define WT_REAL_GET(ret, name, args) wt_r_##name = (ret(*) args)dlsym(RTLD_NEXT, #name);
    WT_REAL_LIST(WT_REAL_GET)
    r_mallinfo2 = (struct mallinfo2(*)(void))dlsym(RTLD_NEXT, "mallinfo2");
    wt_initialising = 0;
    wt_resolved = 1;
}

/* ---- start-up, fork and exit ---- */

static const char *env(const char *name) {
    extern char **environ;
    size_t n = strlen(name);
    for (char **e = environ; e && *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

static void on_fork_child(void) { wt_active = 0; }

/* The release signals: WMTRACE_SIGNAL (the tracer's default, a real-time signal runtimes leave
 * alone: Node owns SIGUSR1 for its inspector), and SIGUSR1 too, each where the program left it
 * at its default. */
static int release_sig = -1;
static char release_sig_name[24];

static void on_release_signal(int sig) {
    int e = errno;
    wt_release_now(sig == SIGUSR1 ? "SIGUSR1" : release_sig_name);
    errno = e;
}

static void signal_name(int sig, char out[24]) {
    if (sig >= SIGRTMIN && sig <= SIGRTMAX) {
        wt_line l = {.n = 0};
        wt_put_u(&l, (uint64_t)(sig - SIGRTMIN));
        l.b[l.n] = 0;
        snprintf(out, 24, "SIGRTMIN+%s", l.b + 1);
    } else if (sig == SIGUSR2) {
        snprintf(out, 24, "SIGUSR2");
    } else {
        snprintf(out, 24, "signal-%d", sig);
    }
}

static void take_signal(int sig) {
    struct sigaction old;
    if (sig <= 0 || sig >= 65 || wt_r_sigaction(sig, NULL, &old) != 0 || old.sa_handler != SIG_DFL)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_release_signal;
    sa.sa_flags = SA_RESTART;
    wt_r_sigaction(sig, &sa, NULL);
}

static void release_signals_start(const char *num) {
    int sig = 0;
    for (const char *p = num; p && *p >= '0' && *p <= '9'; p++)
        sig = sig * 10 + (*p - '0');
    if (sig > 0 && sig < 65) {
        release_sig = sig;
        signal_name(sig, release_sig_name);
        take_signal(sig);
    }
    if (sig != SIGUSR1) take_signal(SIGUSR1);
}

/* Maps the shared block of the trace file `out` and starts this image's figures. */
static bool open_stats(const char *out) {
    int fd = (int)wt_sys_openat(AT_FDCWD, out, O_RDWR | O_APPEND | O_CLOEXEC);
    if (fd < 0) return false;
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, 900);
    if (hi >= 0) {
        wt_sys_close(fd);
        fd = hi;
    }
    void *m = wt_r_mmap(NULL, sizeof(wmtrace_stats), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        wt_sys_close(fd);
        return false;
    }
    wt_out_fd = fd;
    wt_stats = m;
    uint64_t gen = wt_stats->generation + 1;
    memset(wt_stats, 0, sizeof *wt_stats);
    wt_stats->magic = WMTRACE_MAGIC;
    wt_stats->version = WMTRACE_VERSION;
    wt_stats->size = sizeof(wmtrace_stats);
    wt_stats->pid = getpid();
    wt_stats->generation = gen;
    return true;
}

WMTRACE_CTOR STATIC_ENTRY void wmtrace_start(void) {
    wt_resolve();
    const char *out = env(WMTRACE_ENV_OUT), *pid = env(WMTRACE_ENV_PID);
    if (!out || !pid) return;
    int64_t want = 0;
    for (const char *p = pid; *p >= '0' && *p <= '9'; p++)
        want = want * 10 + (*p - '0');
    if (want != (int64_t)getpid()) return; /* not the traced process: dormant */
    if (!open_stats(out)) return;
    wt_named_files(env(WMTRACE_ENV_FILES));
    pthread_atfork(NULL, NULL, on_fork_child);
    release_signals_start(env(WMTRACE_ENV_SIGNAL));
    wt_active = 1;
    wt_line l;
    wt_begin(&l, 'X');
    wt_put_u(&l, wt_stats->generation);
    wt_put_u(&l, (uint64_t)getpid());
    wt_end(&l);
    wt_me();
    wt_tl.in_hook = 1;
    wt_probes_start(env(WMTRACE_ENV_MARKERS));
    wt_tl.in_hook = 0;
    wt_stats->tracer_bytes = wt_tables_bytes_io() + wt_tables_bytes_probe() + wt_tables_bytes_elf();
    wt_point(true);
}

WMTRACE_DTOR STATIC_ENTRY void wmtrace_stop(void) {
    if (!wt_active || !wt_stats) return;
    wt_point(true);
    wt_line l;
    wt_begin(&l, 'Q');
    wt_end(&l);
}
