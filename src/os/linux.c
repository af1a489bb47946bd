/*
 * linux.c: the half of os.h that only Linux has: what this OS can do (wm_os_caps); reopening a
 * descriptor through /proc/self/fd, plain or with O_DIRECT; what of a file is in the page cache
 * (cachestat); anonymous pages (mmap MAP_ANONYMOUS: Darwin's come from the Mach VM instead);
 * mlock by raw system call; madvise advice beyond POSIX; the words for an errno; the per-task
 * scope (nothing here); glibc's malloc_trim; and the memory figures of a process, read from
 * /proc. MADV_POPULATE_READ (Linux 5.14) prefaults a range without privatising a page of a
 * private mapping, unlike MAP_POPULATE or mlock, so it is the prefetch tool of every mapped mode.
 *
 * Sections: capabilities; files; the page cache; pages; locking; advice; errors; tasks and the
 * heap; /proc (a bounded line reader, numbers in /proc lines, the process figures, the file
 * regions, a process under a user-mode emulator); the CPU's features (the auxiliary vector).
 */
#include "os.h"
#include "unix.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* ---- capabilities ---- */

const wm_os_caps *wm__os_caps(void) {
    static const wm_os_caps caps = {
        .name = "linux",
        .reopen = true,
        .direct_io = true,
        .populate = true, /* kernels before 5.14 refuse it with EINVAL */
        .huge_pages = true,
        .process_info = true,
        .other_process = true,
    };
    return &caps;
}

/* ---- files ---- */

static int reopen(int fd, int extra, int *fd_out) {
    int e = wm__fault_hit(WM_OS_OPEN);
    if (e) return e;
    char path[48];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return wm__unix_open(path, extra, fd_out);
}

int wm__os_reopen_direct(int fd, int *fd_out) { return reopen(fd, O_DIRECT, fd_out); }
int wm__os_reopen(int fd, int *fd_out) { return reopen(fd, 0, fd_out); }

/* ---- the page cache ---- */

/* cachestat(2) (Linux 6.5): the page cache's counts over a byte range, in one call and with no
 * mapping. Its number is the same on every architecture (the unified syscall table). */
#ifndef SYS_cachestat
#define SYS_cachestat 451
#endif
struct cachestat_range {
    uint64_t off, len;
};
struct cachestat_counts {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

/* cachestat over [off, off + len), whole pages; 0 or the call's errno. */
static int cache_count(int fd, uint64_t off, uint64_t len, uint64_t *cached_out) {
    uint64_t page = wm__os_page_size(), a = off / page * page;
    uint64_t b = (off + len + page - 1) / page * page;
    if (wm__fault_cached_pinned()) {
        *cached_out = b - a;
        return 0;
    }
    if (b == a) { /* len 0 means "to the end of the file" to cachestat: never asked for here */
        *cached_out = 0;
        return 0;
    }
    struct cachestat_range r = {a, b - a};
    struct cachestat_counts c;
    if (syscall(SYS_cachestat, fd, &r, &c, 0) != 0) return errno;
    *cached_out = c.nr_cache * page;
    return 0;
}

int wm__os_cache_count(int fd, uint64_t off, uint64_t len, uint64_t *cached_out) {
    int e = wm__fault_hit(WM_OS_ADVISE);
    if (e) return e;
    e = cache_count(fd, off, len, cached_out);
    return e == EPERM ? ENOSYS : e; /* EPERM: a seccomp filter's refusal */
}

int wm__os_cached(int fd, uint64_t off, uint64_t len, uint64_t *cached_out) {
    int e = wm__fault_hit(WM_OS_ADVISE);
    if (e) return e;
    /* ENOSYS (before 6.5), EPERM (a seccomp filter): the portable way. */
    return cache_count(fd, off, len, cached_out) ? wm__unix_cached(fd, off, len, cached_out) : 0;
}

int wm__os_file_drop(int fd, uint64_t off, uint64_t len) {
    int e = wm__fault_hit(WM_OS_ADVISE);
    return e ? e : posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
}

int wm__os_file_readahead(int fd, bool on) {
    int e = wm__fault_hit(WM_OS_ADVISE);
    return e ? e : posix_fadvise(fd, 0, 0, on ? POSIX_FADV_NORMAL : POSIX_FADV_RANDOM);
}

/* ---- pages ---- */

/* An allocation of a huge page or more starts on a huge-page boundary: mapped with a huge page
 * to spare, the spare cut off at both ends. Linux backs a madvised range with huge pages only
 * where it covers whole aligned 2 MiB ranges, and puts an anonymous mapping on such a boundary
 * by itself only where its length is a multiple of 2 MiB (6.12 on); elsewhere its first and last
 * megabytes were 4 KiB pages, and a direct read into 4 KiB pages is up to 254 segments of 4 KiB
 * a request where huge pages make it a few of 2 MiB (on the H200 host's virtual disk the file
 * read into 4 KiB pages took 20% longer: bench/RESULTS.md, llama "1.6"). */
int wm__os_pages_alloc(size_t len, void **out) {
    int e = wm__fault_hit(WM_OS_PAGES);
    if (e) return e;
    if (len == 0) return EINVAL;
    size_t span =
        len >= WM_OS_HUGE_PAGE && len <= SIZE_MAX - WM_OS_HUGE_PAGE ? len + WM_OS_HUGE_PAGE : len;
    unsigned char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return errno;
    if (span != len) {
        size_t page = wm__os_page_size();
        unsigned char *a = (unsigned char *)(((uintptr_t)p + WM_OS_HUGE_PAGE - 1) /
                                             WM_OS_HUGE_PAGE * WM_OS_HUGE_PAGE);
        unsigned char *end = a + (len + page - 1) / page * page; /* what munmap(a, len) frees */
        if (a > p) munmap(p, (size_t)(a - p));
        if (p + span > end) munmap(end, (size_t)(p + span - end));
        p = a;
    }
    *out = p;
    return 0;
}

void wm__os_pages_free(void *addr, size_t len) {
    if (addr && len) munmap(addr, len);
}

/* ---- locking ---- */

int wm__os_lock(void *addr, size_t len) {
    int e = wm__fault_hit(WM_OS_LOCK);
    if (e) return e;
    /* The raw system call: AddressSanitizer's interceptor makes mlock() a silent no-op, and the
     * sanitizer builds must lock what the others lock. */
    if (syscall(SYS_mlock, addr, len) != 0) return errno;
    return 0;
}

void wm__os_unlock(void *addr, size_t len) {
    if (addr && len) syscall(SYS_munlock, addr, len);
}

/* ---- advice ---- */

int wm__os_advise(void *addr, size_t len, wm_os_advice advice) {
    int e = wm__fault_hit(WM_OS_ADVISE);
    if (e) return e;
    int adv;
    switch (advice) {
    case WM_OS_ADV_POPULATE_READ: adv = MADV_POPULATE_READ; break;
    case WM_OS_ADV_WILLNEED: adv = MADV_WILLNEED; break;
    case WM_OS_ADV_HUGEPAGE: adv = MADV_HUGEPAGE; break;
    case WM_OS_ADV_SEQUENTIAL: adv = MADV_SEQUENTIAL; break;
    case WM_OS_ADV_POPULATE_WRITE: adv = MADV_POPULATE_WRITE; break;
    case WM_OS_ADV_RANDOM: adv = MADV_RANDOM; break;
    default: return EINVAL;
    }
    return wm__unix_madvise(addr, len, adv);
}

/* ---- errors ---- */

/* strerrordesc_np is thread-safe and needs no buffer (glibc 2.32). */
const char *wm__os_strerror(int e) { return strerrordesc_np(e); }

/* ---- tasks and the heap ---- */

void wm__os_task_scope(void (*fn)(void *), void *arg) { fn(arg); }

#if defined(__GLIBC__)
#include <malloc.h>
void wm__os_heap_trim(void) { malloc_trim(0); }
#else
void wm__os_heap_trim(void) {} /* musl gives freed pages back itself */
#endif

/* ---- /proc ----
 * The figures come from /proc/PID/status (RssShmem, RssFile, VmLck, VmData: readable without
 * ptrace access, so a missing process is told apart from a forbidden one), smaps_rollup (Rss,
 * Anonymous, Swap) and smaps (region by region). Nothing is allocated: one stack buffer, through
 * which a /proc file streams whatever its size; the descriptor is closed on every path. */

/* "/proc/123/smaps" or "/proc/self/smaps". */
static void proc_path(int pid, const char *name, char out[96]) {
    if (pid == 0)
        snprintf(out, 96, "/proc/self/%s", name);
    else
        snprintf(out, 96, "/proc/%d/%s", pid, name);
}

/* ---- a bounded line reader ----
 * Lines are handed out in place from one READ_CHUNK buffer that the file streams through. A
 * line longer than the buffer (only a mapped file's path can make one) is not kept whole: the
 * reader keeps its first HEAD_KEEP bytes (every number of a maps line and more of the path than
 * a region reports) and its last TAIL_KEEP bytes (enough to see the path's suffix), and skips
 * the rest. */

#define READ_CHUNK 4096
#define HEAD_KEEP 512
#define TAIL_KEEP 32

typedef struct line_reader {
    int fd;
    size_t pos, end; /* unread bytes: buf[pos, end) */
    int eof;
    char buf[READ_CHUNK + 1];
    char head[HEAD_KEEP + 1];
} line_reader;

typedef struct line {
    const char *p; /* NUL-terminated, no newline */
    size_t len;
    int truncated;            /* p holds only the first HEAD_KEEP bytes of the line */
    char tail[TAIL_KEEP + 1]; /* truncated lines: the last bytes of the line */
    size_t tail_len;
} line;

static void tail_add(line *ln, const char *s, size_t n) {
    if (n >= TAIL_KEEP) {
        memcpy(ln->tail, s + n - TAIL_KEEP, TAIL_KEEP);
        ln->tail_len = TAIL_KEEP;
    } else {
        size_t keep = ln->tail_len + n > TAIL_KEEP ? TAIL_KEEP - n : ln->tail_len;
        memmove(ln->tail, ln->tail + ln->tail_len - keep, keep);
        memcpy(ln->tail + keep, s, n);
        ln->tail_len = keep + n;
    }
    ln->tail[ln->tail_len] = '\0';
}

static int fill(line_reader *r) {
    size_t got;
    int e = wm__unix_read(r->fd, r->buf + r->end, READ_CHUNK - r->end, &got);
    if (e) return e;
    if (got == 0) r->eof = 1;
    r->end += got;
    return 0;
}

/* The rest of an over-long line: read and drop up to its newline, keeping the tail. */
static int skip_rest(line_reader *r, line *ln) {
    while (!r->eof) {
        r->pos = r->end = 0;
        int e = fill(r);
        if (e) return e;
        char *nl = memchr(r->buf, '\n', r->end);
        if (nl) {
            tail_add(ln, r->buf, (size_t)(nl - r->buf));
            r->pos = (size_t)(nl - r->buf) + 1;
            return 0;
        }
        tail_add(ln, r->buf, r->end);
    }
    r->pos = r->end;
    return 0;
}

/* Next line into *ln; *have = 0 at end of file. Returns 0 or an errno. */
static int next_line(line_reader *r, line *ln, int *have) {
    *have = 0;
    for (;;) {
        char *nl = memchr(r->buf + r->pos, '\n', r->end - r->pos);
        if (nl || (r->eof && r->pos < r->end)) {
            char *stop = nl ? nl : r->buf + r->end;
            *stop = '\0';
            ln->p = r->buf + r->pos;
            ln->len = (size_t)(stop - ln->p);
            ln->truncated = 0;
            ln->tail_len = 0;
            r->pos = (size_t)(stop - r->buf) + (nl ? 1 : 0);
            *have = 1;
            return 0;
        }
        if (r->eof) return 0;
        if (r->pos > 0) {
            memmove(r->buf, r->buf + r->pos, r->end - r->pos);
            r->end -= r->pos;
            r->pos = 0;
        }
        if (r->end == READ_CHUNK) {
            memcpy(r->head, r->buf, HEAD_KEEP);
            r->head[HEAD_KEEP] = '\0';
            ln->p = r->head;
            ln->len = HEAD_KEEP;
            ln->truncated = 1;
            ln->tail_len = 0;
            tail_add(ln, r->buf, READ_CHUNK);
            int e = skip_rest(r, ln);
            if (e) return e;
            *have = 1;
            return 0;
        }
        int e = fill(r);
        if (e) return e;
    }
}

/* ---- numbers in /proc lines ---- */

/* If line is "Name:   1234 kB", *bytes = 1234 * 1024 and 1; else 0. */
static int field_kb(const line *ln, const char *name, size_t name_len, uint64_t *bytes) {
    if (ln->len <= name_len || memcmp(ln->p, name, name_len) != 0) return 0;
    const char *s = ln->p + name_len;
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s < '0' || *s > '9') return 0;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++)
        if (__builtin_mul_overflow(v, (uint64_t)10, &v) ||
            __builtin_add_overflow(v, (uint64_t)(*s - '0'), &v))
            return 0;
    if (__builtin_mul_overflow(v, (uint64_t)1024, bytes)) return 0;
    return 1;
}
#define FIELD_KB(ln, lit, out) field_kb((ln), lit, sizeof lit - 1, (out))

static int parse_hex(const char **ps, uint64_t *out) {
    const char *s = *ps;
    uint64_t v = 0;
    int n = 0;
    for (;; s++, n++) {
        unsigned d;
        if (*s >= '0' && *s <= '9')
            d = (unsigned)(*s - '0');
        else if (*s >= 'a' && *s <= 'f')
            d = (unsigned)(*s - 'a' + 10);
        else if (*s >= 'A' && *s <= 'F')
            d = (unsigned)(*s - 'A' + 10);
        else
            break;
        if (n >= 16) return 0;
        v = v << 4 | d;
    }
    *ps = s;
    *out = v;
    return n > 0;
}

static int parse_dec(const char **ps, uint64_t *out) {
    const char *s = *ps;
    uint64_t v = 0;
    if (*s < '0' || *s > '9') return 0;
    for (; *s >= '0' && *s <= '9'; s++)
        if (__builtin_mul_overflow(v, (uint64_t)10, &v) ||
            __builtin_add_overflow(v, (uint64_t)(*s - '0'), &v))
            return 0;
    *ps = s;
    *out = v;
    return 1;
}

static int expect_char(const char **ps, char c) {
    if (**ps != c) return 0;
    (*ps)++;
    return 1;
}

/* Opens /proc/PID/NAME into r; on failure names it in *why. Open faults count as OPEN, reads
 * (wm__unix_read) as PREAD. */
static int reader_open(line_reader *r, int pid, const char *name, wm_os_why *why) {
    r->fd = -1;
    r->pos = r->end = 0;
    r->eof = 0;
    proc_path(pid, name, why->source);
    why->detail = NULL;
    if (pid < 0) return EINVAL;
    int e = wm__fault_hit(WM_OS_OPEN);
    return e ? e : wm__unix_open(why->source, 0, &r->fd);
}

/* The figures of status, then of smaps_rollup. */
static int read_status(line_reader *r, wm_os_process_info *out, wm_os_why *why) {
    line ln;
    int have, e;
    uint64_t data = 0;
    int seen_data = 0;
    while (!(e = next_line(r, &ln, &have)) && have) {
        if (FIELD_KB(&ln, "RssShmem:", &out->footprint) ||
            FIELD_KB(&ln, "RssFile:", &out->file_resident) || FIELD_KB(&ln, "VmLck:", &out->locked))
            continue;
        if (FIELD_KB(&ln, "VmData:", &data)) seen_data = 1;
    }
    if (e) return e;
    if (!seen_data) {
        why->detail = "no VmData: the process has exited or is a kernel thread";
        return ENOENT;
    }
    out->committed = data;
    return 0;
}

static int read_rollup(line_reader *r, wm_os_process_info *out, uint64_t *anon, uint64_t *swap,
                       wm_os_why *why) {
    line ln;
    int have, e, seen_rss = 0;
    while (!(e = next_line(r, &ln, &have)) && have) {
        if (FIELD_KB(&ln, "Rss:", &out->resident))
            seen_rss = 1;
        else if (!FIELD_KB(&ln, "Anonymous:", anon))
            FIELD_KB(&ln, "Swap:", swap);
    }
    if (e) return e;
    if (!seen_rss) {
        why->detail = "no Rss: the process has exited";
        return ENOENT;
    }
    return 0;
}

static int emulated_self(int *emulated, wm_os_why *why);
static int guest_anon_swap(uint64_t *anon, uint64_t *swap, wm_os_why *why);

int wm__os_process_info(int pid, wm_os_process_info *out, wm_os_why *why) {
    line_reader r;
    wm_os_process_info info = {0};
    uint64_t anon = 0, swap = 0;
    int emulated = 0;
    int e = reader_open(&r, pid, "status", why);
    if (!e) e = read_status(&r, &info, why);
    wm__os_close(r.fd);
    if (e) return e;
    e = reader_open(&r, pid, "smaps_rollup", why);
    if (!e) e = read_rollup(&r, &info, &anon, &swap, why);
    wm__os_close(r.fd);
    if (!e && pid == 0) e = emulated_self(&emulated, why);
    if (!e && emulated) e = guest_anon_swap(&anon, &swap, why);
    if (e) return e;
    info.footprint += anon + swap; /* RssShmem is already there */
    *out = info;
    return 0;
}

/* ---- memory the system has (wm__os_mem_room) ---- */

/* Reads a small file whole (NUL-terminated) into buf of cap bytes: 0 or an errno. */
static int read_small(const char *path, char *buf, size_t cap) {
    int e = wm__fault_hit(WM_OS_OPEN);
    int fd = -1;
    if (!e) e = wm__unix_open(path, 0, &fd);
    if (e) return e;
    size_t len = 0, got = 0;
    while (len + 1 < cap && !(e = wm__unix_read(fd, buf + len, cap - 1 - len, &got)) && got)
        len += got;
    wm__os_close(fd);
    buf[len] = 0;
    return e;
}

/* A cgroup file's number ("max" is UINT64_MAX): 0, or an errno (ENOENT: no such file). */
static int cgroup_number(const char *dir, const char *name, uint64_t *out) {
    char path[512], buf[64];
    if (snprintf(path, sizeof path, "%s%s/%s", wm__fault_cgroup_file(1, "/sys/fs/cgroup"), dir,
                 name) >= (int)sizeof path)
        return ENAMETOOLONG;
    int e = read_small(path, buf, sizeof buf);
    if (e) return e;
    const char *s = buf;
    if (strncmp(s, "max", 3) == 0) {
        *out = UINT64_MAX;
        return 0;
    }
    return parse_dec(&s, out) ? 0 : EINVAL;
}

/* This process's cgroup path in the hierarchy whose /proc/self/cgroup line starts with `tag`
 * ("0::" for v2, the v1 memory controller's "N:memory:"), or "" where there is none (or it is the
 * root, which has no limit). */
static int cgroup_path(const char *tag, char *out, size_t cap) {
    char buf[2048];
    out[0] = 0;
    int e = read_small(wm__fault_cgroup_file(0, "/proc/self/cgroup"), buf, sizeof buf);
    if (e) return e == ENOENT ? 0 : e;
    for (char *ln = buf; ln && *ln; ln = strchr(ln, '\n') ? strchr(ln, '\n') + 1 : NULL) {
        const char *at = ln;
        if (tag[0] == ':') { /* v1: any hierarchy number */
            while (*at >= '0' && *at <= '9')
                at++;
        }
        if (strncmp(at, tag, strlen(tag)) != 0) continue;
        at += strlen(tag);
        size_t n = strcspn(at, "\n");
        if (n >= cap) return ENAMETOOLONG;
        memcpy(out, at, n);
        out[n] = 0;
        if (n == 1 && out[0] == '/') out[0] = 0;
        return 0;
    }
    return 0;
}

/* The cgroup and its ancestors: the one with the least room under its limit. v2: memory.max
 * and memory.current under /sys/fs/cgroup; v1 (where v2 has no memory controller for this
 * process): memory.limit_in_bytes and memory.usage_in_bytes under /sys/fs/cgroup/memory, a limit
 * of 2^62 or more meaning none (v1 writes "no limit" as a page-rounded LONG_MAX). */
static int cgroup_room_in(bool v1, wm_os_mem_room *out, wm_os_why *why) {
    char dir[512];
    int e = cgroup_path(v1 ? ":memory:" : "0::", dir, sizeof dir);
    if (e) {
        snprintf(why->source, sizeof why->source, "/proc/self/cgroup");
        return e;
    }
    uint64_t best = UINT64_MAX;
    while (dir[0]) {
        char at[600];
        snprintf(at, sizeof at, "%s%s", v1 ? "/memory" : "", dir);
        uint64_t max = UINT64_MAX, cur = 0;
        e = cgroup_number(at, v1 ? "memory.limit_in_bytes" : "memory.max", &max);
        if (!e) e = cgroup_number(at, v1 ? "memory.usage_in_bytes" : "memory.current", &cur);
        if (e && e != ENOENT && e != EACCES) {
            snprintf(why->source, sizeof why->source, "/sys/fs/cgroup%.60s", at);
            return e;
        }
        if (!e && max < ((uint64_t)1 << 62)) {
            uint64_t room = max > cur ? max - cur : 0;
            if (room < best) {
                best = room;
                out->cgroup_limit = max;
                out->cgroup_current = cur;
            }
        }
        char *slash = strrchr(dir, '/');
        if (!slash) break;
        *slash = 0;
    }
    return 0;
}

static int cgroup_room(wm_os_mem_room *out, wm_os_why *why) {
    int e = cgroup_room_in(false, out, why);
    if (!e && out->cgroup_limit == UINT64_MAX) e = cgroup_room_in(true, out, why);
    return e;
}

int wm__os_mem_room(wm_os_mem_room *out, wm_os_why *why) {
    wm_os_mem_room r = {UINT64_MAX, UINT64_MAX, 0};
    why->detail = NULL;
    snprintf(why->source, sizeof why->source, "/proc/meminfo");
    line_reader lr;
    int e = wm__fault_hit(WM_OS_OPEN);
    lr.fd = -1;
    lr.pos = lr.end = 0;
    lr.eof = 0;
    if (!e) e = wm__unix_open("/proc/meminfo", 0, &lr.fd);
    line ln;
    int have;
    while (!e && !(e = next_line(&lr, &ln, &have)) && have)
        if (FIELD_KB(&ln, "MemAvailable:", &r.available)) break;
    wm__os_close(lr.fd);
    if (!e) e = cgroup_room(&r, why);
    if (e) return e;
    *out = r;
    return 0;
}

typedef struct maps_header {
    uint64_t start, end, offset, major, minor, inode;
    char perms[5];
    const char *path; /* into the line; "" when the region maps no file */
} maps_header;

/* "start-end perms offset major:minor inode   path" (the path may hold spaces and end in
 * " (deleted)"). Returns 0 for any other line. */
static int parse_header(const char *s, maps_header *h) {
    if (!parse_hex(&s, &h->start) || !expect_char(&s, '-') || !parse_hex(&s, &h->end) ||
        !expect_char(&s, ' '))
        return 0;
    for (int i = 0; i < 4; i++) {
        if (!s[i] || s[i] == ' ') return 0;
        h->perms[i] = s[i];
    }
    h->perms[4] = '\0';
    s += 4;
    if (!expect_char(&s, ' ') || !parse_hex(&s, &h->offset) || !expect_char(&s, ' ') ||
        !parse_hex(&s, &h->major) || !expect_char(&s, ':') || !parse_hex(&s, &h->minor) ||
        !expect_char(&s, ' ') || !parse_dec(&s, &h->inode))
        return 0;
    if (h->end < h->start || h->major > UINT32_MAX || h->minor > UINT32_MAX) return 0;
    while (*s == ' ' || *s == '\t')
        s++;
    h->path = s;
    return 1;
}

/* The name's last bytes (the path, or for an over-long line its kept tail), with the kernel's
 * " (deleted)" mark set aside. */
static void name_tail(const line *ln, const maps_header *h, char out[33]) {
    const char *s = ln->truncated ? ln->tail : h->path;
    size_t n = ln->truncated ? ln->tail_len : strlen(h->path);
    static const char deleted[] = " (deleted)";
    if (n >= sizeof deleted - 1 &&
        memcmp(s + n - (sizeof deleted - 1), deleted, sizeof deleted - 1) == 0)
        n -= sizeof deleted - 1;
    size_t k = n > 32 ? 32 : n;
    memcpy(out, s + n - k, k);
    out[k] = '\0';
}

static void region_start(wm_os_region *g, const line *ln, const maps_header *h) {
    memset(g, 0, sizeof *g);
    g->start = h->start;
    g->end = h->end;
    g->offset = h->offset;
    g->dev = (uint64_t)makedev((unsigned)h->major, (unsigned)h->minor);
    g->ino = h->inode;
    memcpy(g->perms, h->perms, sizeof g->perms);
    size_t n = strlen(h->path);
    if (n >= sizeof g->path) n = sizeof g->path - 1;
    memcpy(g->path, h->path, n);
    g->path[n] = '\0';
    name_tail(ln, h, g->name_tail);
}

int wm__os_file_regions(int pid, int (*each)(void *user, const wm_os_region *r), void *user,
                        wm_os_why *why) {
    line_reader r;
    line ln;
    int have, e, open = 0; /* open: g holds a region whose fields follow */
    wm_os_region g;
    if ((e = reader_open(&r, pid, "smaps", why))) return e;
    while (!(e = next_line(&r, &ln, &have)) && have) {
        char c = ln.p[0];
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
            if (open && (e = each(user, &g))) break;
            maps_header h;
            open = parse_header(ln.p, &h) && h.inode != 0;
            if (open) region_start(&g, &ln, &h);
            continue;
        }
        if (open && !FIELD_KB(&ln, "Rss:", &g.rss) && !FIELD_KB(&ln, "Anonymous:", &g.privatised) &&
            !FIELD_KB(&ln, "Private_Dirty:", &g.private_dirty))
            FIELD_KB(&ln, "Locked:", &g.locked);
    }
    if (!e && open) e = each(user, &g);
    wm__os_close(r.fd);
    return e;
}

/* ---- a process under a user-mode emulator ----
 * qemu-user (how the AArch64 build is tested on x86-64 hosts, docs/TESTING.md) answers the
 * guest's /proc/self/maps itself, listing only the guest's regions, but passes smaps and
 * smaps_rollup through from the kernel: those describe the emulator's whole process, whose own
 * memory grows with the guest's work (measured: about 280 KiB per guest thread started, never
 * returned, and page bookkeeping for every new mapping). So when this process's maps is the
 * emulator's own answer, its footprint is summed over the smaps regions that maps
 * lists. Natively both list the same regions. */

/* Whether /proc/self/maps is the emulator's answer: procfs files report a size of 0, the copy
 * qemu-user writes for the guest reports its length. One open and fstat per figures call. */
static int emulated_self(int *emulated, wm_os_why *why) {
    line_reader r;
    int e = reader_open(&r, 0, "maps", why);
    if (e) return e;
    wm_os_stat fs = {0};
    e = wm__os_stat(r.fd, &fs);
    wm__os_close(r.fd);
    if (!e) *emulated = fs.size > 0;
    return e;
}

/* Anonymous and Swap summed over the smaps regions inside a range /proc/self/maps lists (both
 * files are in address order, so they stream side by side). */
static int guest_anon_swap(uint64_t *anon, uint64_t *swap, wm_os_why *why) {
    line_reader m, r;
    line ml, ln;
    maps_header mh = {0}, h;
    int have, mhave = 1, counting = 0, e;
    uint64_t v;
    if ((e = reader_open(&m, 0, "maps", why))) return e;
    if ((e = reader_open(&r, 0, "smaps", why))) {
        wm__os_close(m.fd);
        return e;
    }
    *anon = *swap = 0;
    while (!(e = next_line(&r, &ln, &have)) && have) {
        if (parse_header(ln.p, &h)) {
            while (mhave && mh.end <= h.start) {
                if ((e = next_line(&m, &ml, &mhave)) != 0) break;
                if (mhave && !parse_header(ml.p, &mh)) mh.start = mh.end = 0;
            }
            if (e) break;
            counting = mhave && mh.start <= h.start && h.end <= mh.end;
        } else if (counting && FIELD_KB(&ln, "Anonymous:", &v)) {
            *anon += v;
        } else if (counting && FIELD_KB(&ln, "Swap:", &v)) {
            *swap += v;
        }
    }
    wm__os_close(m.fd);
    wm__os_close(r.fd);
    return e;
}

/* ---- the CPU ---- */

#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1UL << 1)
#endif
int wm__os_cpu_has_asimd(void) { return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0; }
#else
int wm__os_cpu_has_asimd(void) { return 0; }
#endif
