/*
 * interposer.h: what the files of libwmtrace.so share (internal to the interposer, hidden).
 *
 *   wmtrace.c  state, event lines, the process's figures, start-up, fork and exit
 *   alloc.c    the malloc family, big blocks one by one, and the loads they belong to
 *   io.c       mmap and friends, mlock, opens and reads (which threads load)
 *   probe.c    markers: int3 at a function's entry, its displaced instruction run out of line,
 *              the return hooked; the SIGTRAP handler and the signal calls that could undo it
 *   elfsym.c   the symbols of the loaded objects (.symtab, else .dynsym), read from their files;
 *              the rescan at each dlopen/dlclose (the dynamic linker's debugger hook)
 *
 * Rules the hooks keep: nothing allocates in a hook beyond fixed static tables; events are one
 * write(2) of a stack buffer each (atomic with O_APPEND); a hook re-entered on its own thread (the
 * interposer's own calls) passes straight through; a process other than the traced one (a forked
 * child, anything exec'd by it) stays dormant: every hook only forwards.
 */
#ifndef WMTRACE_INTERPOSER_H
#define WMTRACE_INTERPOSER_H

#define _GNU_SOURCE
#include "wmtrace.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#define EXPORT __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))
#define TLS __thread __attribute__((tls_model("initial-exec")))

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
#define preadv wmtrace_st_preadv
#define preadv64 wmtrace_st_preadv64
#define fread wmtrace_st_fread
#define wmtrace_start wmtrace_selftest_start
#define wmtrace_stop wmtrace_selftest_stop
#define WMTRACE_CTOR
#define WMTRACE_DTOR
#define STATIC_ENTRY EXPORT
#else
#define WMTRACE_CTOR __attribute__((constructor(101)))
#define WMTRACE_DTOR __attribute__((destructor))
#define STATIC_ENTRY static
#endif

/* ---- state (wmtrace.c) ---- */

extern HIDDEN int wt_active;   /* this process traces */
extern HIDDEN int wt_resolved; /* the real functions are known */
extern HIDDEN int wt_initialising;
extern HIDDEN int wt_out_fd;
extern HIDDEN wmtrace_stats *wt_stats; /* the shared block; NULL until set up */

typedef struct wt_thread_state {
    wmtrace_thread *slot;
    int idx; /* slot index + 1; 0: none yet, -1: table full */
    int in_hook;
    int in_load_lock; /* holds the loads' lock (a signal on this thread must not take it) */
    struct {
        void *ret;   /* the caller's return address */
        void **slot; /* where it was on the stack */
        int kind;    /* its probe's kind and spec (the probe's slot may serve another later) */
        int spec;
        int64_t arg;       /* what the entry recorded (the load's index; a release's paired load) */
        uint64_t hval;     /* the handle argument read at the entry (argN, or the pointer *argN) */
        int counted;       /* the outermost load or release on this thread: it is one */
        uint64_t unpaired; /* a release for no live load's handle: the handle */
    } ret_stack[64];       /* the marker returns under way on this thread */
    int ret_depth;
    int loads_open, releases_open; /* counted marker calls under way on this thread */
} wt_thread_state;
extern HIDDEN TLS wt_thread_state wt_tl;

void wt_resolve(void) HIDDEN;
wmtrace_thread *wt_me(void) HIDDEN;
uint64_t wt_now_ns(void) HIDDEN;
pid_t wt_gettid(void) HIDDEN;
void wt_spin_lock(volatile int *l) HIDDEN;
void wt_spin_unlock(volatile int *l) HIDDEN;

/* An event line: begun with its type, fields appended, written with one write(2). */
typedef struct wt_line {
    char b[1024];
    size_t n;
} wt_line;
void wt_begin(wt_line *l, char type) HIDDEN;
void wt_put_s(wt_line *l, const char *s) HIDDEN; /* these four put a space first */
void wt_put_u(wt_line *l, uint64_t v) HIDDEN;
void wt_put_i(wt_line *l, int64_t v) HIDDEN;
void wt_put_x(wt_line *l, uint64_t v) HIDDEN;
void wt_end(wt_line *l) HIDDEN;
void wt_warn(const char *text) HIDDEN;
/* A P line: the process's figures now (the mappings counted when maps_too: a read of
 * /proc/self/maps, some 20 us for 100 mappings, is left out at loads' starts and ends). */
void wt_point(bool maps_too) HIDDEN;

/* ---- raw system calls (wmtrace.c) ----
 * The interposer's own calls, past every hook. syscall(2) is variadic: each argument is read back
 * as a long, so an int given where the kernel reads 64 bits leaves the upper half of its slot to
 * chance (an int 0 as mmap's offset, its seventh word, goes on the stack; clang stores 4 bytes
 * there and the kernel read the rest of a path as the offset). These take the kernel's types and
 * pass every argument widened to long. */
long wt_sys_openat(int dirfd, const char *path, int flags) HIDDEN;
long wt_sys_close(int fd) HIDDEN;
long wt_sys_read(int fd, void *buf, size_t n) HIDDEN;
long wt_sys_write(int fd, const void *buf, size_t n) HIDDEN;
long wt_sys_pread(int fd, void *buf, size_t n, off_t off) HIDDEN;
long wt_sys_pwrite(int fd, const void *buf, size_t n, off_t off) HIDDEN;
long wt_sys_fstat(int fd, struct stat *st) HIDDEN;
long wt_sys_readlink(const char *path, char *buf, size_t n) HIDDEN;
void *wt_sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) HIDDEN;
long wt_sys_munmap(void *addr, size_t len) HIDDEN;
long wt_sys_mprotect(void *addr, size_t len, int prot) HIDDEN;

/* ---- the real functions (resolved in wmtrace.c) ---- */

#define WT_REAL_LIST(X)                                                                            \
    X(void *, malloc, (size_t))                                                                    \
    X(void, free, (void *))                                                                        \
    X(void *, calloc, (size_t, size_t))                                                            \
    X(void *, realloc, (void *, size_t))                                                           \
    X(int, posix_memalign, (void **, size_t, size_t))                                              \
    X(void *, aligned_alloc, (size_t, size_t))                                                     \
    X(void *, memalign, (size_t, size_t))                                                          \
    X(void *, valloc, (size_t))                                                                    \
    X(size_t, malloc_usable_size, (void *))                                                        \
    X(void *, mmap, (void *, size_t, int, int, int, off_t))                                        \
    X(int, munmap, (void *, size_t))                                                               \
    X(void *, mremap, (void *, size_t, size_t, int, ...))                                          \
    X(int, mlock, (const void *, size_t))                                                          \
    X(int, munlock, (const void *, size_t))                                                        \
    X(int, mlockall, (int))                                                                        \
    X(int, munlockall, (void))                                                                     \
    X(int, open, (const char *, int, ...))                                                         \
    X(int, open64, (const char *, int, ...))                                                       \
    X(int, openat, (int, const char *, int, ...))                                                  \
    X(int, openat64, (int, const char *, int, ...))                                                \
    X(FILE *, fopen, (const char *, const char *))                                                 \
    X(FILE *, fopen64, (const char *, const char *))                                               \
    X(int, close, (int))                                                                           \
    X(int, fclose, (FILE *))                                                                       \
    X(ssize_t, read, (int, void *, size_t))                                                        \
    X(ssize_t, pread, (int, void *, size_t, off_t))                                                \
    X(ssize_t, pread64, (int, void *, size_t, off_t))                                              \
    X(ssize_t, preadv, (int, const struct iovec *, int, off_t))                                    \
    X(ssize_t, preadv64, (int, const struct iovec *, int, off_t))                                  \
    X(size_t, fread, (void *, size_t, size_t, FILE *))                                             \
    X(int, sigaction, (int, const void *, void *))                                                 \
    X(void *, signal, (int, void *))                                                               \
    X(int, sigprocmask, (int, const void *, void *))                                               \
    X(int, pthread_sigmask, (int, const void *, void *))
#define WT_REAL_DECL(ret, name, args) extern HIDDEN ret(*wt_r_##name) args;
WT_REAL_LIST(WT_REAL_DECL)

/* ---- alloc.c ---- */

bool wt_in_boot(const void *p) HIDDEN;
/* Loads: one begins (spec -1: from a weight file's first touch), ends. */
int wt_load_begin(int64_t spec) HIDDEN;
void wt_load_end(int idx) HIDDEN;
void wt_load_pause(int idx) HIDDEN;  /* its last weight file was closed */
void wt_load_resume(int idx) HIDDEN; /* a weight file is touched again */
/* A weight file was touched: without load markers, the first touch after a release begins a
 * load. */
void wt_loading(void) HIDDEN;
extern HIDDEN int wt_have_load_markers;
extern HIDDEN int wt_cur_load;  /* the load under way: index + 1, 0 none */
extern HIDDEN int wt_last_load; /* the last load begun: index + 1, 0 none */
extern HIDDEN int wt_releasing; /* release markers under way */
uint64_t wt_load_kept(int idx) HIDDEN;
/* Resident bytes (whole pages) of the big blocks of load idx still held. */
uint64_t wt_load_kept_resident(int idx) HIDDEN;
/* The latest load not yet released whose handle is h (index), -1 none; marks it released. */
int wt_load_by_handle(uint64_t h) HIDDEN;
/* Whether any load marker says where its handle is (a release can be paired by it). */
extern HIDDEN int wt_load_handles;
/* Bytes of load idx's scratch blocks (big blocks it freed before it ended, other than glibc's own
 * mappings) that are resident and in no live big block now, their whole pages; -1 when the ring
 * that remembers them was overwritten since the load began. */
int64_t wt_scratch_resident(int idx) HIDDEN;

/* ---- io.c ---- */

int wt_weight_maps_live(void) HIDDEN;
/* The interposer's own tables, for tracer_bytes: io.c's (with alloc.c's), probe.c's (with the
 * pages of the out-of-line copies), elfsym.c's. */
size_t wt_tables_bytes_probe(void) HIDDEN;
size_t wt_tables_bytes_elf(void) HIDDEN;
size_t wt_tables_bytes_io(void) HIDDEN;
void wt_named_files(const char *list) HIDDEN;

/* ---- probe.c, elfsym.c ---- */

/* Reads WMTRACE_MARKERS; arms the dynamic linker's hook and every site loaded now. */
void wt_probes_start(const char *specs) HIDDEN;
/* A release at a signal: ends the load under way, records the release. */
void wt_release_now(const char *source) HIDDEN;
/* Arms an int3 probe of kind ('L', 'R', 'D': the dynamic linker's hook) at addr; -1 if it
 * cannot (the message is a W line). */
int wt_probe_arm(uintptr_t addr, int kind, int spec, uint64_t size) HIDDEN;
void wt_probes_forget(uintptr_t lo, uintptr_t hi) HIDDEN;
/* Rescans the loaded objects for the specs' sites (start-up, and each dlopen/dlclose). */
void wt_rescan(void) HIDDEN;
typedef struct wt_spec {
    int kind;         /* 'L' or 'R' */
    char object[64];  /* "" any */
    char symbol[128]; /* "" when by offset */
    uint64_t offset;  /* with object and no symbol: the address inside it */
    int known;        /* 0 the user's, 1 a known runtime's, 2 a fallback (wmtrace_spec.known) */
    int handle;       /* where the handle is (wmtrace_spec.handle) */
    int table;        /* 1 + its index in ONNX Runtime's OrtApi table (hooked through the
                         table OrtGetApiBase gives); 0: not one */
} wt_spec;
/* Known runtimes' markers hooked so far (a fallback is used only while this is 0). */
extern HIDDEN int wt_known_sites;
extern HIDDEN wt_spec wt_specs[WMTRACE_MAX_SPECS];
extern HIDDEN int wt_n_specs;
/* The dynamic linker's debugger interface (struct r_debug *): DT_DEBUG of the program. */
void *wt_r_debug_get(void) HIDDEN;
/* The bytes from vaddr to the end of the executable segment of the ELF file at path that holds
 * it; 0: none does. */
uint64_t wt_elf_text_left(const char *path, uint64_t vaddr) HIDDEN;
/* Calls fn for each defined function symbol of the ELF file at path (no allocation); returns 1
 * when they came from its .symtab, 2 from its .dynsym, -1 when it could not be read. */
int wt_elf_symbols(const char *path, void (*fn)(void *, const char *, uint64_t, uint64_t),
                   void *arg) HIDDEN;

#endif
