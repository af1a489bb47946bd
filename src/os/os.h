/*
 * os.h: the whole operating-system contract of weightmap. Only src/os/ names an OS.
 *
 * Rules that hold for every function here:
 *   - A function that can fail returns 0 or a positive errno value; it never sets errno for the
 *     caller to read and never prints.
 *   - Nothing here counts bytes: the ledger is kept one level up (src/ledger.c for the counted
 *     allocator and scratch, src/backend/host.c for regions), so each acquisition is counted
 *     exactly once.
 *   - Release functions (wm__os_close, wm__os_unmap, wm__os_pages_free, wm__os_unlock) cannot
 *     fail from the caller's point of view and accept a NULL/empty argument.
 *   - With WM_FAULT_INJECTION defined, every fallible call first asks src/os/fault.c whether it
 *     should fail (see fault.h), so tests can fail the k-th call of each kind.
 */
#ifndef WM_OS_H
#define WM_OS_H

#include <stddef.h>
#include <stdint.h>

/* The fallible calls, by kind, for fault injection and call counting. */
#define WM_OS_CALL_LIST(X)                                                                         \
    X(OPEN)                                                                                        \
    X(STAT)                                                                                        \
    X(PREAD)                                                                                       \
    X(MAP)                                                                                         \
    X(PAGES)                                                                                       \
    X(LOCK)                                                                                        \
    X(ADVISE)                                                                                      \
    X(THREAD)                                                                                      \
    X(ALLOC)                                                                                       \
    X(DEVICE)

typedef enum wm_os_call {
#define WM__OS_CALL_ENUM(name) WM_OS_##name,
    WM_OS_CALL_LIST(WM__OS_CALL_ENUM)
#undef WM__OS_CALL_ENUM
        WM_OS_CALL_COUNT,
    WM_OS_ANY = WM_OS_CALL_COUNT /* fault.h: match a call of any kind */
} wm_os_call;

typedef struct wm_os_stat {
    uint64_t size;
    uint64_t dev;
    uint64_t ino;
    int is_regular;
} wm_os_stat;

/* Files. */
int wm__os_open_read(const char *path, int *fd_out);
/* open(path, O_RDONLY | O_CLOEXEC | extra), retried on EINTR, with no fault check: the one
 * open of this layer, under the checked calls (0 or an errno). */
int wm__os_open_raw(const char *path, int extra, int *fd_out);
/* A second descriptor of the file open as `fd`, read-only with O_DIRECT (through /proc/self/fd,
 * so it is the same file even if its path was replaced since). EINVAL where the file system
 * has no direct I/O. Reads through it must be aligned to WM_OS_DIRECT_ALIGN in file offset,
 * length and memory. */
int wm__os_reopen_direct(int fd, int *fd_out);
/* A second descriptor of the file open as `fd`, read-only, with an open file of its own (so
 * that threads reading through their own descriptors share no reference count); through
 * /proc/self/fd, so it is the same file even if its path was replaced since. */
int wm__os_reopen(int fd, int *fd_out);
#define WM_OS_DIRECT_ALIGN 4096u
void wm__os_close(int fd);
int wm__os_stat(int fd, wm_os_stat *out);
int wm__os_stat_path(const char *path, wm_os_stat *out);
/* Reads len bytes at off, retrying short reads and EINTR. *got is the count read; less than len
 * only at end of file (returns 0 then). */
int wm__os_pread(int fd, void *buf, size_t len, uint64_t off, size_t *got);

/* Mappings of a file. */
typedef enum wm_os_map_kind {
    WM_OS_MAP_SHARED_RO = 1, /* MAP_SHARED, PROT_READ */
    WM_OS_MAP_PRIVATE_RW = 2 /* MAP_PRIVATE, PROT_READ|PROT_WRITE */
} wm_os_map_kind;
/* off must be a multiple of the page size. */
int wm__os_map(int fd, uint64_t off, size_t len, wm_os_map_kind kind, void **out);
void wm__os_unmap(void *addr, size_t len);

/* Anonymous, page-aligned, zeroed memory straight from the OS (never malloc). */
int wm__os_pages_alloc(size_t len, void **out);
void wm__os_pages_free(void *addr, size_t len);

/* Locking and advice. */
int wm__os_lock(void *addr, size_t len);
void wm__os_unlock(void *addr, size_t len);
int wm__os_memlock_limit(uint64_t *soft_out); /* RLIMIT_MEMLOCK soft limit; UINT64_MAX = none */

typedef enum wm_os_advice {
    WM_OS_ADV_POPULATE_READ = 1, /* prefault readable pages, privatising nothing */
    WM_OS_ADV_WILLNEED,
    WM_OS_ADV_HUGEPAGE,
    WM_OS_ADV_SEQUENTIAL,
    WM_OS_ADV_POPULATE_WRITE /* prefault writable anonymous pages about to be filled */
} wm_os_advice;
/* Advice is a hint: EINVAL for an advice the kernel lacks is returned, callers decide. */
int wm__os_advise(void *addr, size_t len, wm_os_advice advice);

/* Threads (worker threads live only for the duration of one call). */
/* A worker thread. Its stack is anonymous memory the thread owns (not glibc's stack cache,
 * which keeps the stacks of joined threads resident): joining unmaps it. */
#define WM_OS_THREAD_STACK ((size_t)256 * 1024)
typedef struct wm_os_thread {
    unsigned long handle;
    void *stack;
    size_t stack_len;
} wm_os_thread;
int wm__os_thread_start(wm_os_thread *t, void *(*fn)(void *), void *arg);
void wm__os_thread_join(wm_os_thread *t);
/* Runs fn(arg) inside the OS's per-task scope (an autorelease pool on Darwin; nothing here). */
void wm__os_task_scope(void (*fn)(void *), void *arg);

/* A mutex and a condition variable, for handing work between the threads of one call. The
 * storage is opaque (posix.c checks that a pthread object fits). Only init can fail (counted
 * as THREAD); destroy only what init made. */
typedef struct wm_os_mutex {
    _Alignas(16) unsigned char opaque[64];
} wm_os_mutex;
typedef struct wm_os_cond {
    _Alignas(16) unsigned char opaque[64];
} wm_os_cond;
int wm__os_mutex_init(wm_os_mutex *m);
void wm__os_mutex_destroy(wm_os_mutex *m);
void wm__os_mutex_lock(wm_os_mutex *m);
void wm__os_mutex_unlock(wm_os_mutex *m);
int wm__os_cond_init(wm_os_cond *c);
void wm__os_cond_destroy(wm_os_cond *c);
void wm__os_cond_wait(wm_os_cond *c, wm_os_mutex *m);
void wm__os_cond_signal(wm_os_cond *c);
void wm__os_cond_broadcast(wm_os_cond *c);

/* /proc (Linux): opens /proc/PID/NAME for reading (pid 0 = this process), and reads it
 * sequentially. wm__os_read reads at most len bytes, retrying EINTR; *got is 0 at end of file.
 * Open faults count as OPEN, reads as PREAD. */
int wm__os_proc_open(int pid, const char *name, int *fd_out);
int wm__os_read(int fd, void *buf, size_t len, size_t *got);
/* The device number that stat() reports for a "major:minor" pair as /proc/PID/maps prints it. */
uint64_t wm__os_dev_id(unsigned major, unsigned minor);

/* Hands the free memory of every malloc arena back to the OS (glibc's malloc_trim; nothing
 * elsewhere). The CUDA backend calls it after its worker threads are gone: the runtime mallocs
 * per-thread state in them, and what it frees would otherwise stay in their arenas. */
void wm__os_heap_trim(void);

/* A shared library loaded once and kept until exit (dlopen with RTLD_NOW | RTLD_LOCAL; never
 * closed: libraries such as NCCL keep threads). Each name of names[0 .. n) is tried in turn;
 * *out is the handle, or NULL with *why set to the loader's last message (static storage).
 * wm__os_symbol: the address of `name` in it, or NULL. */
void wm__os_library(const char *const *names, size_t n, void **out, const char **why);
void *wm__os_symbol(void *library, const char *name);

size_t wm__os_page_size(void);
unsigned wm__os_cpu_count(void);
double wm__os_now(void); /* monotonic seconds */

/* ---- the CPU (cpu.c) ---- */

/* Non-zero when the CPU runs AArch64 Advanced SIMD (NEON): the HWCAP_ASIMD bit of the auxiliary
 * vector on Linux and Android (getauxval(AT_HWCAP)); 0 on any other architecture or system. */
int wm__os_cpu_has_asimd(void);

/* Counts calls and asks the fault table; returns the errno to inject or 0. Inline no-op when
 * fault injection is compiled out. */
#ifdef WM_FAULT_INJECTION
int wm__fault_hit(wm_os_call call);
#else
static inline int wm__fault_hit(wm_os_call call) {
    (void)call;
    return 0;
}
#endif

#endif /* WM_OS_H */
