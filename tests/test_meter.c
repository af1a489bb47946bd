/*
 * test_meter.c: the memory figures (src/meter.c) against mappings whose cost the test knows
 * exactly: shared read-only pages touched, private pages written, pages locked, anonymous memory
 * touched; the same figures seen from another process; errors for missing and forbidden
 * processes; weight files found by name; over-long smaps lines; fault injection; no allocation;
 * and the `weightmap probe` command.
 *
 * Fault-around and large folios can map more pages than were touched, so a check that expects
 * an exact resident count touches every page of a mapping and maps only part of the file.
 */
#include "wmtest.h"

#include "os/fault.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif
#include <sys/wait.h>
#include <unistd.h>

#define SLACK ((uint64_t)64 * 1024)
#define MAX_REGIONS 16

static size_t page(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* Writes a file of n pages (page i holds bytes i + 1), written back to disk; its path in *out. */
static void make_file(const char *name, size_t n_pages, char out[512]) {
    snprintf(out, 512, "%s", wmt_tmp(name));
    size_t len = n_pages * page();
    unsigned char *b = malloc(len);
    CHECK(b != NULL);
    for (size_t i = 0; i < n_pages; i++)
        memset(b + i * page(), (int)(i + 1), page());
    wmt_write_file(out, b, len);
    free(b);
    /* Dirty page cache mapped by one process counts as Private_Dirty: write it back first, so
     * that dirty pages in a mapping are the ones the test wrote. */
    int fd = open(out, O_RDONLY);
    CHECK(fd >= 0 && fsync(fd) == 0);
    close(fd);
}

static unsigned char *map_file(const char *path, size_t off_pages, size_t n_pages, int prot,
                               int flags) {
    int fd = open(path, prot & PROT_WRITE && flags & MAP_SHARED ? O_RDWR : O_RDONLY);
    CHECK_MSG(fd >= 0, "open %s: %s", path, strerror(errno));
    void *p = mmap(NULL, n_pages * page(), prot, flags, fd, (off_t)(off_pages * page()));
    CHECK_MSG(p != MAP_FAILED, "mmap %s: %s", path, strerror(errno));
    close(fd);
    return p;
}

/* What the figures name as their source in messages (wm_os_why: src/os/linux.c, darwin.c):
 * for another process's figures, its figures when refused, its regions, and this process. */
#ifdef __APPLE__
#define SOURCE_FIGURES "proc_pid_rusage(RUSAGE_INFO_V0) (pid %d)"
#define SOURCE_FIGURES_REFUSED "proc_pid_rusage(RUSAGE_INFO_V0) (pid %d)"
#define SOURCE_REGIONS "proc_pidinfo(PROC_PIDREGIONPATHINFO) (pid %d)"
#define SOURCE_SELF "(this process)"
#else
#define SOURCE_FIGURES "/proc/%d/status"
#define SOURCE_FIGURES_REFUSED "/proc/%d/smaps_rollup"
#define SOURCE_REGIONS "/proc/%d/smaps"
#define SOURCE_SELF "/proc/self/"
#endif
static const char *source(const char *fmt, int pid) {
    static char s[128];
    snprintf(s, sizeof s, fmt, pid);
    return s;
}

/* Reads a byte of each page; not instrumented, so no sanitizer shadow memory is touched. */
__attribute__((no_sanitize("address"))) static unsigned touch(const unsigned char *p,
                                                              size_t n_pages) {
    unsigned sum = 0;
    for (size_t i = 0; i < n_pages; i++)
        sum += ((const volatile unsigned char *)p)[i * page()];
    return sum;
}

/* mlock, mmap and the writes below bypass the sanitizers: AddressSanitizer turns mlock into a
 * no-op and writes shadow memory for each mapping it sees, which would change the figures.
 * (Darwin's build, compiled without sanitizers, calls libSystem: it has no syscall(2) to
 * speak of.) */
#ifdef __linux__
static int raw_mlock(const void *p, size_t n) { return (int)syscall(SYS_mlock, p, (long)n); }
static unsigned char *raw_mmap(size_t n, int prot, int flags, int fd) {
    return (unsigned char *)syscall(SYS_mmap, (long)0, (long)n, (long)prot, (long)flags, (long)fd,
                                    (long)0);
}
static int raw_munlock(const void *p, size_t n) { return (int)syscall(SYS_munlock, p, (long)n); }
static int raw_munmap(void *p, size_t n) { return (int)syscall(SYS_munmap, p, (long)n); }
#else
static int raw_mlock(const void *p, size_t n) { return mlock(p, n); }
static unsigned char *raw_mmap(size_t n, int prot, int flags, int fd) {
    return mmap(NULL, n, prot, flags, fd, 0);
}
static int raw_munlock(const void *p, size_t n) { return munlock(p, n); }
static int raw_munmap(void *p, size_t n) { return munmap(p, n); }
#endif

__attribute__((no_sanitize("address"))) static void write_pages(unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i += page())
        ((volatile unsigned char *)p)[i] = 1;
}

static const wm_file_region *find_region(const wm_file_region *r, size_t n, const void *start) {
    for (size_t i = 0; i < n; i++)
        if (r[i].start == (uint64_t)(uintptr_t)start) return &r[i];
    wmt_fail(__FILE__, __LINE__, "no region starts at %p", start);
}

static size_t regions_of(int pid, const char *path, wm_file_region *r) {
    size_t n = 0;
    wm_error err = {0};
    wm_status st = wm_mem_file_regions(pid, path, r, MAX_REGIONS, &n, &err);
    CHECK_MSG(st == WM_OK, "wm_mem_file_regions: %s", err.msg);
    CHECK(n <= MAX_REGIONS);
    return n;
}

static wm_mem_figures figures(int pid) {
    wm_mem_figures f;
    wm_error err = {0};
    wm_status st = wm_mem_figures_get(pid, &f, &err);
    CHECK_MSG(st == WM_OK, "wm_mem_figures_get: %s", err.msg);
    return f;
}

/* A shared read-only mapping: resident exactly the pages touched, nothing privatised; an
 * untouched mapping of the same file is a second region with nothing resident. */
WM_TEST(shared_readonly) {
    char path[512];
    make_file("w.gguf", 64, path);
    size_t ps = page();
    unsigned char *part = map_file(path, 4, 16, PROT_READ, MAP_SHARED);
    unsigned char *whole = map_file(path, 0, 64, PROT_READ, MAP_SHARED);
    CHECK_EQ(touch(part, 16), 16 * 17 / 2 + 4 * 16); /* page i holds i + 1 */

    wm_file_region r[MAX_REGIONS];
    CHECK_EQ(regions_of(0, path, r), 2);
    const wm_file_region *a = find_region(r, 2, part);
    CHECK_EQ(a->end, (uintptr_t)part + 16 * ps);
    CHECK_EQ(a->size, 16 * ps);
    CHECK_EQ(a->offset, 4 * ps);
    CHECK(strcmp(a->perms, "r--s") == 0);
    CHECK_EQ(a->rss, 16 * ps);
    CHECK_EQ(a->privatised, 0);
    CHECK_EQ(a->private_dirty, 0);
    CHECK_EQ(a->locked, 0);
    CHECK_MSG(strcmp(a->path, path) == 0, "path %s, want %s", a->path, path);
    const wm_file_region *b = find_region(r, 2, whole);
    CHECK_EQ(b->size, 64 * ps);
    CHECK_EQ(b->rss, 0);
    /* The same regions for the process by its number. */
    wm_file_region q[MAX_REGIONS];
    CHECK_EQ(regions_of((int)getpid(), path, q), 2);
    CHECK_EQ(find_region(q, 2, part)->rss, 16 * ps);

    munmap(part, 16 * ps);
    munmap(whole, 64 * ps);
    CHECK_EQ(regions_of(0, path, r), 0);
    CHECK_EQ(wmt_count_file_maps(path), 0);
}

/* A writable private mapping: written pages are privatised and dirty, read pages are not, and
 * the whole mapping is commit-charged at map time. */
/* Whether this process runs under qemu-user, which answers an open of /proc/self/maps with a
 * file of its own (it has a size; procfs files report 0): the process-wide figures of status are
 * then the emulator's. */
static bool emulated(void) {
    struct stat st;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    bool e = fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0;
    if (fd >= 0) close(fd);
    return e;
}

WM_TEST(private_write) {
    char path[512];
    make_file("w.safetensors", 32, path);
    size_t ps = page();
    wm_mem_figures f0 = figures(0);
    unsigned char *p = map_file(path, 0, 32, PROT_READ | PROT_WRITE, MAP_PRIVATE);
    wm_mem_figures f1 = figures(0);
    if (!emulated()) /* under qemu, VmData is the emulator's and grows with its own bookkeeping */
        CHECK_MSG(f1.committed - f0.committed >= 32 * ps &&
                      f1.committed - f0.committed <= 32 * ps + SLACK,
                  "committed grew by %" PRIu64 ", want %zu", f1.committed - f0.committed, 32 * ps);
    touch(p + 20 * ps, 4);
    for (size_t i = 1; i <= 9; i += 2)
        p[i * ps] = 0xee; /* K = 5 pages */

    wm_file_region r[MAX_REGIONS];
    CHECK_EQ(regions_of(0, path, r), 1);
    CHECK(strcmp(r[0].perms, "rw-p") == 0);
    CHECK_EQ(r[0].privatised, 5 * ps);
    CHECK_EQ(r[0].private_dirty, 5 * ps);
    CHECK(r[0].rss >= 9 * ps);
    wm_mem_figures f2 = figures(0);
    CHECK_MSG(f2.footprint - f0.footprint >= 5 * ps, "footprint grew by %" PRIu64,
              f2.footprint - f0.footprint);
    munmap(p, 32 * ps);
}

/* Locked pages of a mapping show in its region and in the process's VmLck. */
WM_TEST(locked) {
    char path[512];
    make_file("w.gguf", 16, path);
    size_t ps = page();
    unsigned char *p = map_file(path, 0, 16, PROT_READ, MAP_SHARED);
    wm_mem_figures f0 = figures(0);
    if (raw_mlock(p, 16 * ps) != 0) {
        munmap(p, 16 * ps);
        WM_SKIP("mlock refused (RLIMIT_MEMLOCK)");
    }
    wm_file_region r[MAX_REGIONS];
    CHECK_EQ(regions_of(0, path, r), 1);
    CHECK_EQ(r[0].locked, 16 * ps);
    CHECK_EQ(r[0].rss, 16 * ps);
    wm_mem_figures f1 = figures(0);
    CHECK_EQ(f1.locked - f0.locked, 16 * ps);
    raw_munlock(p, 16 * ps);
    CHECK_EQ(regions_of(0, path, r), 1);
    CHECK_EQ(r[0].locked, 0);
    CHECK_EQ(figures(0).locked, f0.locked);
    munmap(p, 16 * ps);
}

/* 8 MiB of touched anonymous memory: the footprint grows by exactly that (smaps_rollup walks the
 * page tables) and falls back once it is unmapped; touched shared file pages are resident but
 * cost no footprint. */
WM_TEST(anonymous_footprint) {
    const size_t n = (size_t)8 << 20;
    char path[512];
    make_file("w.gguf", 256, path); /* before the baseline: sanitizers keep freed memory */
    wm_mem_figures f0 = figures(0);
    unsigned char *p = raw_mmap(n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
    CHECK(p != MAP_FAILED);
    write_pages(p, n);
    wm_mem_figures f1 = figures(0);
    uint64_t d = f1.footprint - f0.footprint;
    CHECK_MSG(f1.footprint >= f0.footprint + n && d <= n + SLACK,
              "footprint grew by %" PRIu64 ", want %zu", d, n);
    CHECK(f1.resident >= f0.resident + n);
    CHECK(f1.committed >= f0.committed + n);
    CHECK(raw_munmap(p, n) == 0);
    wm_mem_figures f2 = figures(0);
    CHECK_MSG(f2.footprint <= f0.footprint + SLACK,
              "footprint %" PRIu64 " after unmap, was %" PRIu64, f2.footprint, f0.footprint);

    /* A shared file mapping, touched: resident grows, the footprint does not. */
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    unsigned char *m = raw_mmap(256 * page(), PROT_READ, MAP_SHARED, fd);
    CHECK(m != MAP_FAILED);
    close(fd);
    touch(m, 256);
    wm_mem_figures f3 = figures(0);
    CHECK(f3.resident >= f2.resident + 256 * page());
    CHECK_MSG(f3.footprint <= f2.footprint + SLACK, "footprint grew by %" PRIu64,
              f3.footprint - f2.footprint);
    CHECK(raw_munmap(m, 256 * page()) == 0);
}

static void *idle_thread(void *arg) { return arg; }

/* Threads started and joined cost the footprint nothing once the C library has cached a stack
 * (a first round warms it). Under qemu-user (make test-arm64) this holds only because the meter
 * sums the guest's own regions: the emulator keeps about 280 KiB of its own per guest thread,
 * which the process-wide smaps_rollup counts (the case fails that way without it). */
WM_TEST(joined_threads_cost_nothing) {
    if (WMT_ASAN) WM_SKIP("AddressSanitizer keeps state of its own per thread (96 KiB for 16)");
    for (int round = 0; round < 2; round++) {
        wm_mem_figures f0 = figures(0);
        for (int i = 0; i < 16; i++) {
            pthread_t t;
            CHECK(pthread_create(&t, NULL, idle_thread, NULL) == 0);
            CHECK(pthread_join(t, NULL) == 0);
        }
        wm_mem_figures f1 = figures(0);
        if (round == 1)
            CHECK_MSG(f1.footprint <= f0.footprint + SLACK,
                      "16 threads joined: footprint grew by %" PRId64 " bytes",
                      (int64_t)(f1.footprint - f0.footprint));
    }
}

/* Another process, probed by its number, gives the figures it sees itself. */
typedef struct child_view {
    size_t n;
    wm_file_region r[4];
    wm_mem_figures f;
    void *shared, *priv;
} child_view;

static pid_t spawn_mapper(const char *path, int ready_fd[2], int hold_fd[2]) {
    CHECK(pipe(ready_fd) == 0 && pipe(hold_fd) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(ready_fd[0]);
        close(hold_fd[1]);
        child_view v;
        memset(&v, 0, sizeof v);
        unsigned char *s = map_file(path, 0, 16, PROT_READ, MAP_SHARED);
        unsigned char *w = map_file(path, 0, 16, PROT_READ | PROT_WRITE, MAP_PRIVATE);
        touch(s, 16);
        for (size_t i = 0; i < 3; i++)
            w[i * page()] = 1;
        v.shared = s;
        v.priv = w;
        if (wm_mem_file_regions(0, path, v.r, 4, &v.n, NULL) != WM_OK ||
            wm_mem_figures_get(0, &v.f, NULL) != WM_OK)
            _exit(3);
        if (write(ready_fd[1], &v, sizeof v) != (ssize_t)sizeof v) _exit(4);
        char c;
        while (read(hold_fd[0], &c, 1) < 0 && errno == EINTR) {
        }
        _exit(0);
    }
    close(ready_fd[1]);
    close(hold_fd[0]);
    return pid;
}

static void reap(pid_t pid, int ready_rd, int hold_wr) {
    close(hold_wr);
    close(ready_rd);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
}

WM_TEST(other_process) {
    char path[512];
    make_file("w.gguf", 16, path);
    size_t ps = page();
    int ready[2], hold[2];
    pid_t pid = spawn_mapper(path, ready, hold);
    child_view v;
    CHECK(read(ready[0], &v, sizeof v) == (ssize_t)sizeof v);
    CHECK_EQ(v.n, 2);

    wm_file_region r[MAX_REGIONS];
    CHECK_EQ(regions_of((int)pid, path, r), 2);
    wm_mem_figures f = figures((int)pid);
    for (size_t i = 0; i < 2; i++) {
        const wm_file_region *a = &v.r[i], *b = find_region(r, 2, (void *)(uintptr_t)a->start);
        CHECK_EQ(a->end, b->end);
        CHECK_EQ(a->offset, b->offset);
        CHECK(strcmp(a->perms, b->perms) == 0);
        CHECK_EQ(a->rss, b->rss);
        CHECK_EQ(a->privatised, b->privatised);
        CHECK_EQ(a->private_dirty, b->private_dirty);
        CHECK_EQ(a->locked, b->locked);
        CHECK(strcmp(a->path, b->path) == 0);
    }
    const wm_file_region *s = find_region(r, 2, v.shared), *w = find_region(r, 2, v.priv);
    CHECK_EQ(s->rss, 16 * ps);
    CHECK_EQ(s->privatised, 0);
    CHECK_EQ(w->privatised, 3 * ps);
    CHECK_EQ(w->private_dirty, 3 * ps);
    CHECK_EQ(f.committed, v.f.committed);
    CHECK_EQ(f.locked, v.f.locked);
    CHECK(f.footprint + SLACK >= v.f.footprint && f.footprint <= v.f.footprint + SLACK);
    CHECK(f.file_resident >= 16 * ps);
    reap(pid, ready[0], hold[1]);
}

/* A process that does not exist: WM_ENOENT naming what was read; a negative one: WM_EINVAL. */
WM_TEST(missing_process) {
    wm_mem_figures f;
    wm_file_region r[1];
    size_t n = 99;
    wm_error err = {0};
    CHECK_STATUS(wm_mem_figures_get(INT_MAX, &f, &err), WM_ENOENT);
    CHECK_MSG_HAS(err, source(SOURCE_FIGURES, INT_MAX));
    CHECK_STATUS(wm_mem_file_regions(INT_MAX, NULL, r, 1, &n, &err), WM_ENOENT);
    CHECK_MSG_HAS(err, source(SOURCE_REGIONS, INT_MAX));
    CHECK_EQ(n, 99); /* out-parameters are written only on success */

    pid_t pid = fork(); /* a process that existed a moment ago */
    CHECK(pid >= 0);
    if (pid == 0) _exit(0);
    CHECK(waitpid(pid, NULL, 0) == pid);
    CHECK_STATUS(wm_mem_figures_get((int)pid, &f, &err), WM_ENOENT);
    CHECK_STATUS(wm_mem_file_regions((int)pid, NULL, r, 1, &n, &err), WM_ENOENT);

    CHECK_STATUS(wm_mem_figures_get(-1, &f, NULL), WM_EINVAL);
    CHECK_STATUS(wm_mem_figures_get(0, NULL, NULL), WM_EINVAL);
    CHECK_STATUS(wm_mem_file_regions(0, NULL, NULL, 1, &n, NULL), WM_EINVAL);
    CHECK_STATUS(wm_mem_file_regions(0, wmt_tmp("absent.gguf"), r, 1, &n, &err), WM_ENOENT);
    CHECK_MSG_HAS(err, "absent.gguf");
}

/* A process we may not inspect: WM_EPERM naming what was read. As root, a child that drops to
 * nobody probes this process; otherwise this process probes pid 1. */
WM_TEST(forbidden_process) {
    if (getuid() != 0) {
        wm_mem_figures f;
        wm_error err = {0};
        wm_status st = wm_mem_figures_get(1, &f, &err);
        if (st == WM_OK) WM_SKIP("pid 1 is inspectable by this user");
        CHECK_STATUS(st, WM_EPERM);
        CHECK_MSG_HAS(err, source(SOURCE_FIGURES_REFUSED, 1));
        return;
    }
    int out[2];
    CHECK(pipe(out) == 0);
    pid_t target = getpid();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(out[0]);
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(5);
        wm_error err[2];
        wm_mem_figures f;
        wm_file_region r[1];
        size_t n;
        memset(err, 0, sizeof err);
        wm_status a = wm_mem_figures_get((int)target, &f, &err[0]);
        wm_status b = wm_mem_file_regions((int)target, NULL, r, 1, &n, &err[1]);
        if (a != WM_EPERM || b != WM_EPERM) _exit(6);
        if (write(out[1], err, sizeof err) != (ssize_t)sizeof err) _exit(7);
        _exit(0);
    }
    close(out[1]);
    wm_error err[2];
    CHECK(read(out[0], err, sizeof err) == (ssize_t)sizeof err);
    close(out[0]);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    CHECK_MSG_HAS(err[0], source(SOURCE_FIGURES_REFUSED, (int)target));
    CHECK_MSG_HAS(err[1], source(SOURCE_REGIONS, (int)target));
}

/* With no path, every region of a .gguf or .safetensors file, whatever its name holds
 * (spaces) and even when the file was deleted; nothing else. */
WM_TEST(weight_files_by_name) {
    static const char *const names[] = {"a.gguf",   "b.safetensors", "c.bin",
                                        "d e.gguf", "gone.gguf",     "x.gguf.bak"};
    char paths[6][512];
    unsigned char *maps[6];
    for (int i = 0; i < 6; i++) {
        make_file(names[i], 2, paths[i]);
        maps[i] = map_file(paths[i], 0, 2, PROT_READ, MAP_SHARED);
        touch(maps[i], 2);
    }
    CHECK(unlink(paths[4]) == 0);
    wm_file_region r[MAX_REGIONS];
    CHECK_EQ(regions_of(0, NULL, r), 4);
    CHECK(strcmp(find_region(r, 4, maps[0])->path, paths[0]) == 0);
    CHECK(strcmp(find_region(r, 4, maps[1])->path, paths[1]) == 0);
    CHECK(strcmp(find_region(r, 4, maps[3])->path, paths[3]) == 0);
    char gone[600];
    snprintf(gone, sizeof gone, "%s (deleted)", paths[4]);
    CHECK_MSG(strcmp(find_region(r, 4, maps[4])->path, gone) == 0, "path %s",
              find_region(r, 4, maps[4])->path);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(r[i].rss, 2 * page());
    /* By path, the name with a space matches by device and inode. */
    CHECK_EQ(regions_of(0, paths[3], r), 1);
    CHECK_EQ(r[0].start, (uintptr_t)maps[3]);
    for (int i = 0; i < 6; i++)
        munmap(maps[i], 2 * page());
    CHECK_EQ(regions_of(0, NULL, r), 0);
}

/* More regions than room: all are counted, only cap are written. */
WM_TEST(count_beyond_cap) {
    char path[512];
    make_file("w.gguf", 4, path);
    unsigned char *m[3];
    for (int i = 0; i < 3; i++)
        m[i] = map_file(path, (size_t)i, 1, PROT_READ, MAP_SHARED);
    wm_file_region r[2];
    memset(r, 0x5a, sizeof r);
    size_t n = 0;
    CHECK_STATUS(wm_mem_file_regions(0, path, r, 1, &n, NULL), WM_OK);
    CHECK_EQ(n, 3);
    CHECK_EQ(r[1].start, 0x5a5a5a5a5a5a5a5aull);
    CHECK(r[0].size == page());
    n = 0;
    CHECK_STATUS(wm_mem_file_regions(0, path, NULL, 0, &n, NULL), WM_OK);
    CHECK_EQ(n, 3);
    for (int i = 0; i < 3; i++)
        munmap(m[i], page());
}

/* A mapped file whose path is longer than the reader's buffer: its line is cut and skipped
 * to the newline; the region is still found by its suffix, its figures read, and the lines
 * after it parse. */
WM_TEST(overlong_line) {
    char seg[201];
    memset(seg, 'd', 200);
    seg[200] = '\0';
    int top = open(".", O_RDONLY | O_DIRECTORY);
    CHECK(top >= 0);
    CHECK(chdir(wmt_tmpdir()) == 0);
    const int depth = 24; /* about 4.8 KiB of path */
    for (int i = 0; i < depth; i++)
        CHECK(mkdir(seg, 0700) == 0 && chdir(seg) == 0);
    int fd = open("deep.gguf", O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, (off_t)(8 * page())) == 0);
    unsigned char *deep = mmap(NULL, 8 * page(), PROT_READ, MAP_SHARED, fd, 0);
    CHECK(deep != MAP_FAILED);
    close(fd);
    touch(deep, 8);
    CHECK(unlink("deep.gguf") == 0);
    for (int i = 0; i < depth; i++)
        CHECK(chdir("..") == 0 && rmdir(seg) == 0);
    CHECK(fchdir(top) == 0);
    close(top);
    /* Two ordinary weight files around it, mapped before and after. */
    char a[512], b[512];
    make_file("a.gguf", 2, a);
    make_file("b.gguf", 3, b);
    unsigned char *ma = map_file(a, 0, 2, PROT_READ, MAP_SHARED);
    touch(ma, 2);
    unsigned char *mb = map_file(b, 0, 3, PROT_READ, MAP_SHARED);
    touch(mb, 3);

    wm_file_region r[MAX_REGIONS];
    CHECK_EQ(regions_of(0, NULL, r), 3);
    const wm_file_region *d = find_region(r, 3, deep);
    CHECK_EQ(d->rss, 8 * page());
    CHECK_EQ(d->size, 8 * page());
    CHECK_EQ(strlen(d->path), sizeof d->path - 1);
    CHECK(strncmp(d->path, wmt_tmpdir(), strlen(wmt_tmpdir())) == 0);
    CHECK_EQ(find_region(r, 3, ma)->rss, 2 * page());
    CHECK_EQ(find_region(r, 3, mb)->rss, 3 * page());
    CHECK_EQ(regions_of(0, b, r), 1);
    munmap(deep, 8 * page());
    munmap(ma, 2 * page());
    munmap(mb, 3 * page());
}

/* Every failing OS call fails the call with its status and leaves no descriptor open; an
 * interrupted read is retried. */
typedef struct meter_call {
    int which; /* 0 wm_mem_figures_get, 1 wm_mem_file_regions */
    const char *path;
} meter_call;

static wm_status meter_run(void *user, wm_error *err) {
    const meter_call *c = user;
    wm_mem_figures f;
    wm_file_region r[MAX_REGIONS];
    size_t n;
    return c->which == 0 ? wm_mem_figures_get(0, &f, err)
                         : wm_mem_file_regions(0, c->path, r, MAX_REGIONS, &n, err);
}

static void meter_fault_check(void *user, const wmt_fault_run *r) {
    const meter_call *c = user;
    CHECK_MSG(r->st == WM_EIO, "call %" PRIu64 " of %" PRIu64 ": %s", r->k, r->n,
              wm_status_name(r->st));
    CHECK(strstr(r->err->msg, SOURCE_SELF) || strstr(r->err->msg, c->path));
}

WM_TEST(fault_sweep) {
#ifndef WM_FAULT_INJECTION
    WM_SKIP("built without fault injection");
#else
    char path[512];
    make_file("w.gguf", 2, path);
    unsigned char *p = map_file(path, 0, 2, PROT_READ, MAP_SHARED);
    int fds = wmt_count_fds();
    for (int which = 0; which < 2; which++) {
        meter_call c = {which, path};
        wmt_sweep s = {.what = which == 0 ? "wm_mem_figures_get" : "wm_mem_file_regions",
                       .run = meter_run,
                       .check = meter_fault_check,
                       .user = &c};
        wmt_sweep_result res = {0};
        static const int eio[] = {EIO};
        wmt_sweep_any(&s, eio, 1, &res);
        /* opens, reads to end of file, a stat */
        CHECK(res.counts[WM_OS_ANY] >= (which == 0 ? 4u : 3u));
        wm__fault_arm(WM_OS_PREAD, 1, EINTR);
        CHECK_STATUS(meter_run(&c, NULL), WM_OK);
        CHECK_EQ(wm__fault_injected(), 1);
        wm__fault_reset();
    }
    CHECK_EQ(wmt_count_fds(), fds);
    munmap(p, 2 * page());
#endif
}

/* The figures allocate nothing: neither the library's counted allocator nor malloc. */
WM_TEST(no_allocation) {
    char path[512];
    make_file("w.gguf", 2, path);
    wm_ledger l0 = WM_LEDGER_INIT, l1 = WM_LEDGER_INIT;
    wm_mem_figures f;
    wm_file_region r[MAX_REGIONS];
    size_t n;
    CHECK_STATUS(wm_mem_figures_get(0, &f, NULL), WM_OK); /* first-use costs outside the library */
    wm_ledger_get(&l0);
    wmt_malloc m0 = wmt_malloc_stats();
    for (int i = 0; i < 10; i++) {
        CHECK_STATUS(wm_mem_figures_get(0, &f, NULL), WM_OK);
        CHECK_STATUS(wm_mem_file_regions(0, path, r, MAX_REGIONS, &n, NULL), WM_OK);
        CHECK_STATUS(wm_mem_file_regions(0, NULL, r, MAX_REGIONS, &n, NULL), WM_OK);
    }
    wmt_malloc m1 = wmt_malloc_stats();
    wm_ledger_get(&l1);
    CHECK_EQ(l1.cat[WM_LEDGER_HEAP].total, l0.cat[WM_LEDGER_HEAP].total);
    CHECK_EQ(m1.in_use, m0.in_use);
    CHECK_EQ(m1.mapped, m0.mapped);
}

/* ---- weightmap probe ---- */

static void check_has(const char *out, const char *needle) {
    CHECK_MSG(strstr(out, needle) != NULL, "output lacks %s:\n%s", needle, out);
}

WM_TEST(cli_probe) {
    char path[512];
    make_file("w.gguf", 16, path);
    int ready[2], hold[2];
    pid_t pid = spawn_mapper(path, ready, hold);
    child_view v;
    CHECK(read(ready[0], &v, sizeof v) == (ssize_t)sizeof v);

    static char out[65536];
    char args[700], want[700];
    snprintf(args, sizeof args, "probe --pid %d --json", (int)pid);
    CHECK_EQ(wmt_cli(args, out, sizeof out), 0);
    const char *s = out;
    while (*s == ' ' || *s == '\n')
        s++;
    CHECK_MSG(*s == '{', "not a JSON object:\n%s", out);
    size_t len = strlen(out);
    while (len && (out[len - 1] == '\n' || out[len - 1] == ' '))
        len--;
    CHECK(len && out[len - 1] == '}');
    static const char *const keys[] = {
        "\"footprint\": ",    "\"resident\": ",      "\"file_resident\": ", "\"locked\": ",
        "\"committed\": ",    "\"file_regions\": [", "\"start\": ",         "\"end\": ",
        "\"offset\": ",       "\"perms\": \"r--s\"", "\"size\": ",          "\"privatised\": ",
        "\"private_dirty\": "};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        check_has(out, keys[i]);
    snprintf(want, sizeof want, "\"pid\": %d,", (int)pid);
    check_has(out, want);
    snprintf(want, sizeof want, "\"path\": \"%s\"", path);
    check_has(out, want);
    snprintf(want, sizeof want, "\"rss\": %zu,", 16 * page());
    check_has(out, want);
    snprintf(want, sizeof want, "\"privatised\": %zu,", 3 * page());
    check_has(out, want);
    snprintf(want, sizeof want, "\"committed\": %" PRIu64 ",", v.f.committed);
    check_has(out, want);

    /* --file: the file's regions only; the human table names the file. */
    snprintf(args, sizeof args, "probe --pid %d --file '%s'", (int)pid, path);
    CHECK_EQ(wmt_cli(args, out, sizeof out), 0);
    check_has(out, path);
    check_has(out, "footprint");
    check_has(out, "r--s");
    check_has(out, "rw-p");
    reap(pid, ready[0], hold[1]);

    /* This process itself, and failures. */
    CHECK_EQ(wmt_cli("probe --json", out, sizeof out), 0);
    check_has(out, "\"file_regions\": [");
    CHECK_EQ(wmt_cli("probe --pid 2147483647", out, sizeof out), 1);
    char missing[160];
    snprintf(missing, sizeof missing, "weightmap: %s: ", source(SOURCE_FIGURES, INT_MAX));
    check_has(out, missing);
    snprintf(args, sizeof args, "probe --file '%s'", wmt_tmp("absent.gguf"));
    CHECK_EQ(wmt_cli(args, out, sizeof out), 1);
    check_has(out, "absent.gguf: ");
    CHECK_EQ(wmt_cli("probe --pid nope", out, sizeof out), 2);
    CHECK_EQ(wmt_cli("probe --bogus", out, sizeof out), 2);
    CHECK_EQ(wmt_cli("probe extra", out, sizeof out), 2);
}
