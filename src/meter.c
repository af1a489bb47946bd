/*
 * meter.c: the operating system's view of a process's memory (wm_mem_figures_get,
 * wm_mem_file_regions), read from Linux's /proc files.
 *
 * Sections: errors naming the /proc file; a bounded line reader over a /proc file; numbers in
 * /proc lines; the process figures (status and smaps_rollup); the regions of weight files
 * (smaps, region by region).
 *
 * These calls run between load cycles, so they are cheap and hold nothing: no allocation at
 * all (the ledger is untouched), one stack buffer through which a /proc file streams whatever
 * its size, and the descriptor closed on every path.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- errors naming the /proc file ---- */

/* "/proc/123/smaps" or "/proc/self/smaps", for messages. */
static const char *proc_path(int pid, const char *name, char buf[96]) {
    if (pid == 0)
        snprintf(buf, 96, "/proc/self/%s", name);
    else
        snprintf(buf, 96, "/proc/%d/%s", pid, name);
    return buf;
}

/* A process that is gone reads as ENOENT (at open) or ESRCH (mid-read); a process we may not
 * inspect as EACCES. */
static wm_status proc_err(wm_error *err, int e, int pid, const char *name) {
    char path[96];
    proc_path(pid, name, path);
    if (e == ENOENT || e == ESRCH)
        return wm__err(err, WM_ENOENT, e, "%s: %s (no process %d)", path, wm__errno_text(e), pid);
    if (e == EACCES || e == EPERM)
        return wm__err(
            err, WM_EPERM, e,
            "%s: %s (reading another process needs ptrace access: same user or CAP_SYS_PTRACE)",
            path, wm__errno_text(e));
    return wm__err(err, wm__status_io(e), e, "%s: %s", path, wm__errno_text(e));
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
    int e = wm__os_read(r->fd, r->buf + r->end, READ_CHUNK - r->end, &got);
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
        if (wm__mul_overflow_u64(v, 10, &v) || wm__add_overflow_u64(v, (uint64_t)(*s - '0'), &v))
            return 0;
    if (wm__mul_overflow_u64(v, 1024, bytes)) return 0;
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
        if (wm__mul_overflow_u64(v, 10, &v) || wm__add_overflow_u64(v, (uint64_t)(*s - '0'), &v))
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

/* ---- the process figures ---- */

static wm_status emulated_self(int *emulated, wm_error *err);
static wm_status guest_anon_swap(uint64_t *anon, uint64_t *swap, wm_error *err);

/* Opens /proc/PID/NAME into r, or fills err. */
static wm_status reader_open(line_reader *r, int pid, const char *name, wm_error *err) {
    r->fd = -1;
    r->pos = r->end = 0;
    r->eof = 0;
    int e = wm__os_proc_open(pid, name, &r->fd);
    if (e) return proc_err(err, e, pid, name);
    return WM_OK;
}

wm_status wm_mem_figures_get(int pid, wm_mem_figures *out, wm_error *err) {
    if (!out || pid < 0) return wm__err(err, WM_EINVAL, 0, "wm_mem_figures_get: bad argument");
    line_reader r;
    line ln;
    int have, e;
    wm_status st;
    uint64_t shmem = 0, file = 0, lck = 0, data = 0, rss = 0, anon = 0, swap = 0;
    int seen_data = 0, seen_rss = 0;
    const char *name = "status";

    /* status needs no ptrace access, so a missing process is told apart from a forbidden one. */
    if ((st = reader_open(&r, pid, name, err)) != WM_OK) return st;
    while (!(e = next_line(&r, &ln, &have)) && have) {
        if (FIELD_KB(&ln, "RssShmem:", &shmem) || FIELD_KB(&ln, "RssFile:", &file) ||
            FIELD_KB(&ln, "VmLck:", &lck))
            continue;
        if (FIELD_KB(&ln, "VmData:", &data)) seen_data = 1;
    }
    if (e) goto fail_os;
    wm__os_close(r.fd);
    if (!seen_data) {
        char path[96];
        return wm__err(err, WM_ENOENT, 0,
                       "%s: no VmData: the process has exited or is a kernel thread",
                       proc_path(pid, name, path));
    }

    name = "smaps_rollup";
    if ((st = reader_open(&r, pid, name, err)) != WM_OK) return st;
    while (!(e = next_line(&r, &ln, &have)) && have) {
        if (FIELD_KB(&ln, "Rss:", &rss))
            seen_rss = 1;
        else if (!FIELD_KB(&ln, "Anonymous:", &anon))
            FIELD_KB(&ln, "Swap:", &swap);
    }
    if (e) goto fail_os;
    wm__os_close(r.fd);
    if (!seen_rss) {
        char path[96];
        return wm__err(err, WM_ENOENT, 0, "%s: no Rss: the process has exited",
                       proc_path(pid, name, path));
    }

    int emulated = 0;
    if (pid == 0 && (st = emulated_self(&emulated, err)) != WM_OK) return st;
    if (emulated && (st = guest_anon_swap(&anon, &swap, err)) != WM_OK) return st;
    out->footprint = anon + swap + shmem;
    out->resident = rss;
    out->file_resident = file;
    out->locked = lck;
    out->committed = data;
    return WM_OK;

fail_os:
    wm__os_close(r.fd);
    return proc_err(err, e, pid, name);
}

/* ---- the regions of weight files ---- */

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
static wm_status emulated_self(int *emulated, wm_error *err) {
    line_reader r;
    wm_status st = reader_open(&r, 0, "maps", err);
    if (st != WM_OK) return st;
    wm_os_stat fs = {0};
    int e = wm__os_stat(r.fd, &fs);
    wm__os_close(r.fd);
    if (e) return proc_err(err, e, 0, "maps");
    *emulated = fs.size > 0;
    return WM_OK;
}

/* Anonymous and Swap summed over the smaps regions inside a range /proc/self/maps lists (both
 * files are in address order, so they stream side by side). */
static wm_status guest_anon_swap(uint64_t *anon, uint64_t *swap, wm_error *err) {
    line_reader m, r;
    line ml, ln;
    maps_header mh = {0}, h;
    int have, mhave = 1, counting = 0, e;
    uint64_t v;
    wm_status st;
    if ((st = reader_open(&m, 0, "maps", err)) != WM_OK) return st;
    if ((st = reader_open(&r, 0, "smaps", err)) != WM_OK) {
        wm__os_close(m.fd);
        return st;
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
    return e ? proc_err(err, e, 0, "smaps") : WM_OK;
}

static int ends_with(const char *s, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* A weight file by name: the path (or, for an over-long line, its kept tail) ends in .gguf or
 * .safetensors, once a " (deleted)" mark is set aside. */
static int is_weight_path(const line *ln, const maps_header *h) {
    const char *s = ln->truncated ? ln->tail : h->path;
    size_t n = ln->truncated ? ln->tail_len : strlen(h->path);
    if (h->path[0] != '/') return 0;
    if (ends_with(s, n, " (deleted)")) n -= sizeof " (deleted)" - 1;
    return ends_with(s, n, ".gguf") || ends_with(s, n, ".safetensors");
}

wm_status wm_mem_file_regions(int pid, const char *path, wm_file_region *regions, size_t cap,
                              size_t *count, wm_error *err) {
    if (!count || pid < 0 || (cap && !regions))
        return wm__err(err, WM_EINVAL, 0, "wm_mem_file_regions: bad argument");
    wm_os_stat fst = {0};
    if (path) {
        int se = wm__os_stat_path(path, &fst);
        if (se) {
            wm_status st = wm__status_from_errno(se);
            if (st != WM_ENOENT && st != WM_EPERM && st != WM_ENOMEM) st = WM_EIO;
            return wm__err(err, st, se, "%s: %s", path, wm__errno_text(se));
        }
    }
    line_reader r;
    line ln;
    int have, e;
    wm_status st;
    const char *name = "smaps";
    size_t found = 0;
    wm_file_region *cur = NULL; /* the region whose fields follow, when it is kept */

    if ((st = reader_open(&r, pid, name, err)) != WM_OK) return st;
    while (!(e = next_line(&r, &ln, &have)) && have) {
        char c = ln.p[0];
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
            maps_header h;
            cur = NULL;
            if (!parse_header(ln.p, &h) || h.inode == 0) continue;
            int match = path ? h.inode == fst.ino &&
                                   wm__os_dev_id((unsigned)h.major, (unsigned)h.minor) == fst.dev
                             : is_weight_path(&ln, &h);
            if (!match) continue;
            if (found < cap) {
                cur = &regions[found];
                memset(cur, 0, sizeof *cur);
                cur->start = h.start;
                cur->end = h.end;
                cur->offset = h.offset;
                memcpy(cur->perms, h.perms, sizeof cur->perms);
                cur->size = h.end - h.start;
                size_t n = strlen(h.path);
                if (n >= sizeof cur->path) n = sizeof cur->path - 1;
                memcpy(cur->path, h.path, n);
                cur->path[n] = '\0';
            }
            found++;
            continue;
        }
        if (!cur) continue;
        if (!FIELD_KB(&ln, "Rss:", &cur->rss) && !FIELD_KB(&ln, "Anonymous:", &cur->privatised) &&
            !FIELD_KB(&ln, "Private_Dirty:", &cur->private_dirty))
            FIELD_KB(&ln, "Locked:", &cur->locked);
    }
    if (e) goto fail_os;
    wm__os_close(r.fd);
    *count = found;
    return WM_OK;

fail_os:
    wm__os_close(r.fd);
    return proc_err(err, e, pid, name);
}
