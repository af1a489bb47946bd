/*
 * os.h: the whole operating-system contract of weightmap. Only src/os/ names an OS or includes
 * an OS header; everything above this file is written against it alone.
 *
 * The files behind it, chosen by CMake from CMAKE_SYSTEM_NAME (CMakeLists.txt):
 *   unix.c   what POSIX gives every Unix: files, pread, mappings of files, threads (and their
 *            stacks), clocks, shared libraries. unix.h is what it offers the OS file below.
 *   linux.c  what only Linux has: /proc (the process figures, reopening through /proc/self/fd),
 *            O_DIRECT, anonymous pages (mmap), madvise beyond POSIX (populate, transparent huge
 *            pages), the raw mlock, glibc's strerrordesc_np and malloc_trim, the CPU's features
 *            (the auxiliary vector).
 *   darwin.c what only Darwin has (macOS; iOS where its headers allow): F_GETPATH and
 *            F_NOCACHE, pages from vm_allocate, the autorelease pool of the task scope, the
 *            figures from task_info, proc_pid_rusage, proc_pidinfo, vm_region_recurse_64.
 *            Built and checked for aarch64-macos in make test, not run here (docs/PORTING.md).
 *   fault.c  fault injection (fault.h), for every OS.
 * A port writes one file in linux.c's place and fills every call below; each says what Linux
 * and Darwin use. What an OS lacks is said in wm_os_caps, not by #ifdef above this layer: a
 * call it cannot make returns ENOSYS (or, for a hint, EINVAL).
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

#include <stdbool.h>
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

/* ---- what this OS can do ----
 * Fixed for the build (the OS file fills it); a kernel that is older than the OS file expects
 * still refuses a call at run time (EINVAL for advice, for instance), and callers handle that. */
typedef struct wm_os_caps {
    const char *name;   /* "linux" */
    bool reopen;        /* wm__os_reopen gives an open file of its own (Linux: /proc/self/fd) */
    bool direct_io;     /* wm__os_reopen_direct can succeed (Linux: O_DIRECT) */
    bool populate;      /* WM_OS_ADV_POPULATE_READ/WRITE exist (Linux 5.14+) */
    bool huge_pages;    /* WM_OS_ADV_HUGEPAGE exists (Linux: transparent huge pages) */
    bool process_info;  /* wm__os_process_info and wm__os_file_regions work */
    bool other_process; /* ... also for another process's pid, not only 0 */
} wm_os_caps;
/* darwin.c: reopen via fcntl(F_GETPATH) then open(); direct_io via F_NOCACHE on that descriptor
 * (no alignment rule, so WM_OS_DIRECT_ALIGN still holds); populate and huge_pages false;
 * process_info and other_process true (task_info, proc_pid_rusage: the same user). */
const wm_os_caps *wm__os_caps(void);

/* ---- files ---- */

typedef struct wm_os_stat {
    uint64_t size;
    uint64_t dev;
    uint64_t ino;
    int is_regular;
    uint64_t mtime_ns; /* last modification, nanoseconds since the epoch */
} wm_os_stat;

/* open(path, O_RDONLY | O_CLOEXEC), retried on EINTR (unix.c; Darwin the same). */
int wm__os_open_read(const char *path, int *fd_out);
/* A second descriptor of the file open as `fd`, read-only, with an open file of its own (so
 * that threads reading through their own descriptors share no reference count); the same file
 * even if its path was replaced since. Linux: /proc/self/fd/N. Darwin: fcntl(F_GETPATH), then
 * open and a check that dev and inode agree. ENOSYS where caps.reopen is false. */
int wm__os_reopen(int fd, int *fd_out);
/* As wm__os_reopen, for reads that bypass the page cache. Linux: O_DIRECT; EINVAL where the
 * file system has no direct I/O. Reads through it must be aligned to WM_OS_DIRECT_ALIGN in file
 * offset, length and memory. Darwin: fcntl(F_NOCACHE, 1) on the reopened descriptor. */
int wm__os_reopen_direct(int fd, int *fd_out);
#define WM_OS_DIRECT_ALIGN 4096u
void wm__os_close(int fd);
/* fstat / stat (unix.c; Darwin the same). */
int wm__os_stat(int fd, wm_os_stat *out);
int wm__os_stat_path(const char *path, wm_os_stat *out);
/* Reads len bytes at off, retrying short reads and EINTR. *got is the count read; less than len
 * only at end of file (returns 0 then). pread (unix.c; Darwin the same). */
int wm__os_pread(int fd, void *buf, size_t len, uint64_t off, size_t *got);
/* The same into n buffers in turn (n at most WM_OS_IOV_MAX), as one call where it can be: one
 * direct read into a destination and the staging of its partial blocks goes to the disk as one
 * request, not three. preadv (unix.c; Darwin the same). */
#define WM_OS_IOV_MAX 4
typedef struct wm_os_iov {
    void *p;
    size_t len;
} wm_os_iov;
int wm__os_preadv(int fd, const wm_os_iov *iov, int n, uint64_t off, size_t *got);

/* ---- the page cache ---- */

/* How many bytes of the file open as fd are in the page cache now, over the whole pages that
 * cover [off, off + len): *cached_out, a multiple of the page size, at most those pages' bytes.
 * Nothing is read, faulted in or kept: a snapshot for choosing how to read a range (buffered,
 * from memory; or with O_DIRECT, from the disk), never a promise. A hint for fault injection
 * (ADVISE): callers treat a failure as "all cached" and read buffered.
 * Linux: cachestat(2) (6.5+; one call for the range, ~1.5 us for 4 MiB of large folios), or
 * where the kernel refuses it, unix.c's mincore. unix.c (POSIX): mincore(2) over a transient
 * read-only shared mapping of the range, unmapped before returning (about 60x slower: a lookup
 * per page). Darwin: unix.c's (mincore reports file pages there too). */
int wm__os_cached(int fd, uint64_t off, uint64_t len, uint64_t *cached_out);
/* The page cache's own count of [off, off + len) of fd, as wm__os_cached, but only where the kernel
 * answers for the whole range in one call (Linux 6.5+: cachestat(2)): ENOSYS where it has none
 * (older Linux, Darwin) or refuses it (EPERM: a seccomp filter), and no mincore fallback, so that a
 * caller who would rather sample than pay a lookup per page can tell. ADVISE for fault injection.
 */
int wm__os_cache_count(int fd, uint64_t off, uint64_t len, uint64_t *cached_out);
/* A hint on a file's page cache, ADVISE for fault injection: the range's clean, unmapped cached
 * pages are dropped (Linux: POSIX_FADV_DONTNEED; Darwin: nothing, ENOTSUP). For reads that went
 * through the cache where the file was cold (wm_file_prefetch's without O_DIRECT), so that the
 * cache is left as it was found. */
int wm__os_file_drop(int fd, uint64_t off, uint64_t len);
/* A hint on reads through fd's open file, ADVISE for fault injection: on false the kernel's
 * readahead is off for them (a buffered read brings in the pages it asks for and no more, and
 * marks none of them to start a next window), on true it is as a fresh open has it. Linux:
 * POSIX_FADV_RANDOM / POSIX_FADV_NORMAL. Darwin: fcntl(F_RDAHEAD, 0 / 1). */
int wm__os_file_readahead(int fd, bool on);

/* ---- mappings of a file (mmap, unix.c; Darwin the same) ---- */
typedef enum wm_os_map_kind {
    WM_OS_MAP_SHARED_RO = 1, /* MAP_SHARED, PROT_READ */
    WM_OS_MAP_PRIVATE_RW = 2 /* MAP_PRIVATE, PROT_READ|PROT_WRITE */
} wm_os_map_kind;
/* off must be a multiple of the page size. */
int wm__os_map(int fd, uint64_t off, size_t len, wm_os_map_kind kind, void **out);
void wm__os_unmap(void *addr, size_t len);

/* Anonymous, page-aligned, zeroed memory straight from the OS, never malloc (linux.c: mmap
 * MAP_ANONYMOUS, an allocation of WM_OS_HUGE_PAGE or more starting on a multiple of it;
 * darwin.c: vm_allocate and vm_deallocate, tagged for vmmap). */
int wm__os_pages_alloc(size_t len, void **out);
void wm__os_pages_free(void *addr, size_t len);
/* The huge page Linux backs a madvised range with where the range covers it whole. */
#define WM_OS_HUGE_PAGE ((size_t)2 << 20)
/* What to ask wm__os_pages_alloc for to have len bytes in whole huge pages (from one on): such
 * an allocation starts on a huge page, so no byte of it is left in 4 KiB pages. */
static inline size_t wm__os_huge_len(size_t len) {
    return len >= WM_OS_HUGE_PAGE ? (len + WM_OS_HUGE_PAGE - 1) / WM_OS_HUGE_PAGE * WM_OS_HUGE_PAGE
                                  : len;
}

/* ---- locking (linux.c: the raw system calls; Darwin: mlock, munlock, getrlimit) ---- */
int wm__os_lock(void *addr, size_t len);
void wm__os_unlock(void *addr, size_t len);
int wm__os_memlock_limit(uint64_t *soft_out); /* RLIMIT_MEMLOCK soft limit; UINT64_MAX = none */

/* ---- advice (linux.c: madvise; Darwin: madvise with MADV_WILLNEED, MADV_SEQUENTIAL and
 * MADV_RANDOM, EINVAL for the rest, as caps says) ---- */
typedef enum wm_os_advice {
    WM_OS_ADV_POPULATE_READ = 1, /* prefault readable pages, privatising nothing */
    WM_OS_ADV_WILLNEED,
    WM_OS_ADV_HUGEPAGE,
    WM_OS_ADV_SEQUENTIAL,
    WM_OS_ADV_POPULATE_WRITE, /* prefault writable anonymous pages about to be filled */
    WM_OS_ADV_RANDOM          /* a fault of a file mapping reads its page alone (no read around) */
} wm_os_advice;
/* Advice is a hint: EINVAL for an advice the kernel lacks is returned, callers decide. */
int wm__os_advise(void *addr, size_t len, wm_os_advice advice);

/* ---- threads (pthreads, unix.c; Darwin the same) ----
 * Worker threads live only for the duration of one call. */
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
/* Runs fn(arg) inside the OS's per-task scope (nothing on Linux; Darwin: an autorelease pool,
 * objc_autoreleasePoolPush/Pop found at run time, so that Metal objects made on a worker are
 * freed with it). Every worker task runs in one, and so does wm_model_release. */
void wm__os_task_scope(void (*fn)(void *), void *arg);

/* A mutex and a condition variable, for handing work between the threads of one call. The
 * storage is opaque (unix.c checks that a pthread object fits). Only init can fail (counted
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
/* Gives the CPU to another runnable thread (for a wait of a few microseconds on an atomic). */
void wm__os_yield(void);

/* ---- the memory figures of a process (src/meter.c turns them into the public API) ----
 * pid 0 is this process. On failure the call returns an errno (ENOENT or ESRCH: no such
 * process; EACCES or EPERM: not allowed to inspect it; ENOSYS: caps.process_info is false) and
 * fills *why: the source the OS read (for messages: "/proc/123/status") and, where the OS
 * answered but without the figure, a sentence saying so (then the errno is ENOENT).
 * Linux: /proc/PID/status and smaps_rollup, smaps; opens count as OPEN, reads as PREAD; no
 * allocation (one stack buffer streams each file). Darwin (docs/PORTING.md): task_info
 * (TASK_VM_INFO: phys_footprint, resident_size, external) and a vm_region_recurse_64 walk
 * (locked, committed) for this process, proc_pid_rusage for another, and
 * proc_pidinfo(PROC_PIDREGIONPATHINFO) walked region by region for the file regions; each
 * query counts as PREAD; no allocation either. */
typedef struct wm_os_why {
    char source[96];
    const char *detail; /* static text, or NULL: the errno says it */
} wm_os_why;

typedef struct wm_os_process_info {
    uint64_t footprint; /* what the process costs: private anonymous + swapped + shared memory */
    uint64_t resident;  /* every resident page */
    uint64_t file_resident; /* resident pages of files */
    uint64_t locked;        /* locked bytes */
    uint64_t committed;     /* the data segment: heap and private mappings */
} wm_os_process_info;
int wm__os_process_info(int pid, wm_os_process_info *out, wm_os_why *why);

/* What the system has for this process now (wm_mem_available_get). UINT64_MAX: unknown or no
 * limit. Linux: MemAvailable from /proc/meminfo; cgroup v2 from /proc/self/cgroup's "0::" path
 * under /sys/fs/cgroup, the cgroup and each ancestor up to the root, the one with the least room
 * (memory.max - memory.current) reported; where v2 gives none, the v1 memory controller's
 * (memory.limit_in_bytes - memory.usage_in_bytes under /sys/fs/cgroup/memory) the same way.
 * Darwin: os_proc_available_memory where the SDK declares it (iOS, tvOS, watchOS: the room before
 * jetsam, which is the limit that kills there); macOS has no such call and no per-process limit,
 * so its figure is unknown, said in why. Reads count as OPEN and PREAD for fault injection. */
typedef struct wm_os_mem_room {
    uint64_t available;
    uint64_t cgroup_limit, cgroup_current;
} wm_os_mem_room;
int wm__os_mem_room(wm_os_mem_room *out, wm_os_why *why);

/* One mapping of a file in a process, with its figures. */
typedef struct wm_os_region {
    uint64_t start, end, offset; /* virtual addresses; file offset of start */
    uint64_t dev, ino;           /* the file, as wm__os_stat reports it */
    char perms[5];               /* "r--s", "rw-p", ... */
    char path[256];              /* the path as the OS names it (Linux: with " (deleted)"),
                                    truncated */
    char name_tail[33];          /* the last bytes of the file's name (without any mark of a
                                    deleted file), however long the path */
    uint64_t rss, privatised, private_dirty, locked; /* resident, copied from the file into
                                    private memory, privately dirtied, locked */
} wm_os_region;
/* Calls each(user, r) for every file-backed mapping of process pid, in address order, once its
 * figures are read; a nonzero return from `each` stops the walk and is returned. */
int wm__os_file_regions(int pid, int (*each)(void *user, const wm_os_region *r), void *user,
                        wm_os_why *why);

/* ---- the rest ---- */

/* Hands the free memory of every malloc arena back to the OS (linux.c: glibc's malloc_trim;
 * Darwin: malloc_zone_pressure_relief(NULL, 0)). The CUDA backend calls it after its worker
 * threads are gone: the runtime mallocs per-thread state in them, and what it frees would
 * otherwise stay in their arenas. */
void wm__os_heap_trim(void);

/* A shared library loaded once and kept until exit (dlopen with RTLD_NOW | RTLD_LOCAL, unix.c;
 * Darwin the same; never closed: libraries such as NCCL keep threads). Each name of
 * names[0 .. n) is tried in turn; *out is the handle, or NULL with *why set to the loader's last
 * message (static storage). wm__os_symbol: the address of `name` in it, or NULL. */
void wm__os_library(const char *const *names, size_t n, void **out, const char **why);
void *wm__os_symbol(void *library, const char *name);

/* The words for errno value e, safe on any thread, or NULL for a value the OS has none for.
 * linux.c: glibc's strerrordesc_np (static text). darwin.c: strerror_r into a buffer of the
 * calling thread's own, valid until that thread's next call. */
const char *wm__os_strerror(int e);

/* sysconf and clock_gettime (unix.c; Darwin the same). */
size_t wm__os_page_size(void);
unsigned wm__os_cpu_count(void);
double wm__os_now(void); /* monotonic seconds */

/* ---- the CPU (linux.c; Darwin: 1 on arm64, where sysctlbyname("hw.optional.neon") says so) ----
 */

/* Non-zero when the CPU runs AArch64 Advanced SIMD (NEON): the HWCAP_ASIMD bit of the auxiliary
 * vector on Linux and Android (getauxval(AT_HWCAP)); 0 on any other architecture or system. */
int wm__os_cpu_has_asimd(void);

/* Counts calls and asks the fault table; returns the errno to inject or 0. Inline no-op when
 * fault injection is compiled out. */
#ifdef WM_FAULT_INJECTION
int wm__fault_hit(wm_os_call call);
/* Non-zero while a test pins the page cache's answer (wm__fault_pin_cached): wm__os_cached then
 * reports every byte of the range cached without asking the kernel, so that a scenario run again
 * and again (a fault sweep) takes the same route each time, whatever the previous run left in
 * the page cache. */
int wm__fault_cached_pinned(void);
#else
static inline int wm__fault_hit(wm_os_call call) {
    (void)call;
    return 0;
}
static inline int wm__fault_cached_pinned(void) { return 0; }
#endif
/* The file wm__os_mem_room reads for /proc/self/cgroup (which 0) or the cgroup tree's root
 * (which 1): `real`, unless a test re-pointed it (fault.h, wm__fault_cgroup_files). */
#ifdef WM_FAULT_INJECTION
const char *wm__fault_cgroup_file(int which, const char *real);
#else
static inline const char *wm__fault_cgroup_file(int which, const char *real) {
    (void)which;
    return real;
}
#endif

#endif /* WM_OS_H */
