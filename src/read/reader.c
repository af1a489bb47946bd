/*
 * reader.c: the reading engine (reader.h): the reader context, the policy that picks buffered or
 * direct reads per range, and the reads themselves.
 *
 * Why ask the page cache, and how (bench/RESULTS.md, "cold loads"): a cold file read buffered
 * goes through readahead and a copy, and on the H200 host ran at 1.26 GB/s against 1.6 with
 * O_DIRECT; a warm one read with O_DIRECT is read from the disk again (2 GB/s against 45). So a
 * reader must know which bytes are cached. preadv2(RWF_NOWAIT) answers only by trying, and a
 * miss starts readahead of the range (measured on this kernel: a 4 MiB NOWAIT miss brought
 * 8 MiB into the cache), which then costs the disk twice; mincore costs a lookup per page
 * (94 us for 4 MiB, 40% of a warm 4 MiB pread); cachestat answers for a whole range in about
 * 1.5 us. So: one cachestat per range, and a mixed range halved until each part is one kind.
 *
 * Sections: the reader; deciding; reading a run; the request.
 */
#include "reader.h"

#include <errno.h>
#include <string.h>

#define UNTRIED (-2)
#define ALIGN ((uint64_t)WM_OS_DIRECT_ALIGN)
static uint64_t down(uint64_t x) { return x / ALIGN * ALIGN; }
static uint64_t up(uint64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }
/* Rows of slices shorter than this are read buffered without asking (wm__read_req.rows). Any
 * other short request is asked about like a long one: read buffered, a cold one starts the
 * kernel's readahead (an 8 MiB window on a disk whose read_ahead_kb is 8192), the next ranges
 * find those pages cached and read them buffered, which reaches the next readahead mark, and
 * so on: a cold 24 MiB file read by three threads with a 1 KiB norm between its weights came
 * 4 MiB into the page cache in one run of eight (tests/test_read.c). Read direct instead, a
 * short cold tensor costs the same one request to the disk and leaves nothing behind. */
#define DIRECT_MIN ((size_t)64 << 10)
/* The grid on which a mixed range is cut: the direct-read block, so that every run found is all
 * cached or all not. A buffered read of even a few uncached pages would start readahead (the
 * kernel's, sequential: up to megabytes), pulling into the page cache the very bytes the next
 * direct reads are for, and the disk would read them twice (seen at a 256 KiB grid: a tensor's
 * cold 48 KiB tail read buffered brought the next 8 MiB in). A boundary costs about two
 * questions per halving (some twenty for an 8 MiB range, ~1 us each). */
#define SPLIT_MIN ALIGN
/* A request is decided and read in segments of at most this many bytes. */
#define SEGMENT ((uint64_t)8 << 20)
#define MAX_RUNS 128

/* ---- the reader ---- */

wm_status wm__reader_init(wm__reader *rd, const wm_file *f, wm_direct_io io, wm_error *err) {
    *rd = (wm__reader){.file = f, .io = io};
    atomic_init(&rd->direct_off, false);
    atomic_init(&rd->bytes_read, 0);
    atomic_init(&rd->direct_bytes, 0);
    atomic_init(&rd->buffered_bytes, 0);
    atomic_init(&rd->prefetched_bytes, 0);
    if (io == WM_DIRECT_OFF || !wm__os_caps()->direct_io || !f->n_shards) return WM_OK;
    /* Pages, not the counted allocator: wm_file_read_tensors promises that the calling thread
     * takes nothing from malloc. */
    size_t page = wm__os_page_size();
    size_t len = (f->n_shards * sizeof *rd->direct_fd + page - 1) / page * page;
    void *p;
    int e = wm__scratch_alloc(len, &p);
    if (e)
        return wm__err(err, WM_ENOMEM, e, "%s: allocating the direct descriptors' table: %s",
                       f->path, wm__errno_text(e));
    rd->direct_fd = p;
    rd->table_len = len;
    for (uint32_t s = 0; s < f->n_shards; s++)
        atomic_init(&rd->direct_fd[s], UNTRIED);
    return WM_OK;
}

void wm__reader_free(wm__reader *rd) {
    if (!rd || !rd->direct_fd) return;
    for (uint32_t s = 0; s < rd->file->n_shards; s++) {
        int fd = atomic_load(&rd->direct_fd[s]);
        if (fd >= 0) wm__os_close(fd);
    }
    wm__scratch_free((void *)rd->direct_fd, rd->table_len);
    rd->direct_fd = NULL;
    rd->table_len = 0;
}

void wm__stage_free(wm__stage *s) {
    if (!s) return;
    wm__scratch_free(s->p, s->len);
    if (s->edge) wm__scratch_free(s->edge, 2 * (size_t)ALIGN);
    *s = (wm__stage){0};
}

/* The shard's O_DIRECT descriptor, opened by the first thread that needs it; -1 where it cannot
 * be opened (the shard is then read buffered). */
static int direct_fd(wm__reader *rd, uint32_t shard) {
    if (!rd->direct_fd || atomic_load(&rd->direct_off)) return -1;
    int fd = atomic_load(&rd->direct_fd[shard]);
    if (fd != UNTRIED) return fd;
    int mine;
    if (wm__os_reopen_direct(rd->file->shards[shard].fd, &mine) != 0) mine = -1;
    int expected = UNTRIED;
    if (atomic_compare_exchange_strong(&rd->direct_fd[shard], &expected, mine)) return mine;
    if (mine >= 0) wm__os_close(mine); /* another thread opened it first */
    return expected;
}

void wm__reader_open(wm__reader *rd, uint32_t shard) { (void)direct_fd(rd, shard); }

/* ---- deciding ---- */

/* File ranges of one segment, each read one way, in file order. */
typedef struct run {
    uint64_t a, b;
    bool direct;
} run;
typedef struct runs {
    run r[MAX_RUNS];
    unsigned n;
} runs;

/* Appends [a, b), merging it into the last run when that is of the same kind (and, when the
 * table is full, whatever its kind: any route reads the same bytes). */
static void push(runs *rs, uint64_t a, uint64_t b, bool direct) {
    run *last = rs->n ? &rs->r[rs->n - 1] : NULL;
    if (last && (last->direct == direct || rs->n == MAX_RUNS)) {
        last->b = b;
        return;
    }
    rs->r[rs->n++] = (run){a, b, direct};
}

/* Splits [a, b) into cached runs (buffered) and uncached ones (direct) by asking the page
 * cache about the whole, then about halves of a mixed range (cut on the SPLIT_MIN grid), down
 * to single blocks (a range within one block is never mixed). A failed question reads buffered
 * (it is a hint). */
static void decide(int fd, uint64_t a, uint64_t b, runs *rs) {
    uint64_t lo = down(a), hi = up(b), cached;
    if (wm__os_cached(fd, lo, hi - lo, &cached) != 0 || cached >= hi - lo) {
        push(rs, a, b, false);
        return;
    }
    if (cached == 0) {
        push(rs, a, b, true);
        return;
    }
    uint64_t mid = (a + (b - a) / 2) / SPLIT_MIN * SPLIT_MIN;
    if (b - a <= SPLIT_MIN || mid <= a || mid >= b) {
        push(rs, a, b, cached * 2 < hi - lo);
        return;
    }
    decide(fd, a, mid, rs);
    decide(fd, mid, b, rs);
}

/* A segment with cold runs reads its short cached runs direct too. Cached pages next to cold
 * ones are typically what readahead brought in (another reader's buffered reads; before 1.4.1
 * the open's header reads too, which src/open/open.c now keeps from reaching the data), and
 * some of them carry the kernel's readahead mark: reading one buffered
 * starts asynchronous readahead of the megabytes after it, which the next ranges then find
 * cached and read buffered, and so on, so that a file opened cold came in through single-stream
 * readahead (the llama.cpp bridge saw 24.6 of 24.8 MB read buffered that way; bench/RESULTS.md,
 * llama). Reading those few pages from the disk instead costs next to nothing. Longer cached
 * runs (a range warmed on purpose) stay buffered. */
#define NEAR_COLD ((uint64_t)1 << 20)

static void read_near_cold_direct(runs *rs) {
    bool cold = false;
    for (unsigned i = 0; i < rs->n; i++)
        cold |= rs->r[i].direct;
    if (!cold) return;
    unsigned n = 0;
    for (unsigned i = 0; i < rs->n; i++) {
        run r = rs->r[i];
        if (!r.direct && r.b - r.a < NEAR_COLD) r.direct = true;
        if (n && rs->r[n - 1].direct == r.direct)
            rs->r[n - 1].b = r.b;
        else
            rs->r[n++] = r;
    }
    rs->n = n;
}

/* ---- reading a run ---- */

/* One read of [lo, lo + n) into the buffers of iov in turn (their lengths add up to n); at least
 * `need` bytes must come. */
static wm_status preadv_exact(wm__reader *rd, const wm__read_req *q, int fd, const wm_os_iov *iov,
                              int n_iov, uint64_t lo, size_t n, size_t need, bool direct,
                              wm_error *err) {
    const wm_file *f = rd->file;
    const char *path = f->shards[q->shard].path;
    size_t got;
    int e = n_iov == 1 ? wm__os_pread(fd, iov[0].p, iov[0].len, lo, &got)
                       : wm__os_preadv(fd, iov, n_iov, lo, &got);
    if (e)
        return wm__err(err, wm__status_io(e), e, "%s: reading %zu bytes at offset %llu%s: %s", path,
                       n, (unsigned long long)lo, direct ? " (direct)" : "", wm__errno_text(e));
    atomic_fetch_add(&rd->bytes_read, got);
    if (got < need)
        return wm__err(err, WM_EFORMAT, 0,
                       "%s: tensor '%s' at offset %llu: the file ends %zu bytes early (it is "
                       "shorter than its header says)",
                       path, f->names + f->tensors[q->tensor].name_off, (unsigned long long)lo,
                       need - got);
    return WM_OK;
}

/* One pread into buf of [lo, lo + n); at least `need` bytes must come. */
static wm_status pread_exact(wm__reader *rd, const wm__read_req *q, int fd, unsigned char *buf,
                             uint64_t lo, size_t n, size_t need, bool direct, wm_error *err) {
    wm_os_iov v = {buf, n};
    return preadv_exact(rd, q, fd, &v, 1, lo, n, need, direct, err);
}

static wm_status read_buffered(wm__reader *rd, const wm__read_req *q, uint64_t a, uint64_t b,
                               wm_error *err) {
    size_t n = (size_t)(b - a);
    wm_status st = pread_exact(rd, q, q->fd, q->dst + (a - q->off), a, n, n, false, err);
    if (!st) atomic_fetch_add(&rd->buffered_bytes, n);
    return st;
}

/* [a, b) with O_DIRECT: the aligned blocks that cover it, in place (a mirror) or through the
 * thread's staging, a staging's worth at a time, copied into place. A direct read may end past
 * the end of the file (short), which is fine as long as [a, b) came. A destination that agrees
 * with the file on the block grid but may not be written past [dst, dst + len) (a tensor's
 * place in a buffer laid out as the file: the llama.cpp bridge's own buffers) reads the whole
 * blocks inside [a, b) in place and its partial first and last blocks into the thread's two
 * edge blocks, all in one call (one request to the disk where separate reads of those two
 * blocks made two more: on a virtual disk whose every request costs, as the H200 host's does,
 * they add up), and copies the two blocks' bytes into place. A range of one or two blocks goes
 * into the edge blocks whole, whatever its destination (no 2 MiB staging for a norm). */
static wm_status read_staged(wm__reader *rd, const wm__read_req *q, int dfd, uint64_t a, uint64_t b,
                             wm__stage *stage, wm_error *err);

/* len bytes of pages (scratch) for a thread's staging, into *out. */
static wm_status stage_pages(wm__reader *rd, size_t len, unsigned char **out, wm_error *err) {
    void *p;
    int e = wm__scratch_alloc(len, &p);
    if (e)
        return wm__err(err, WM_ENOMEM, e,
                       "%s: allocating %zu bytes of staging for direct reads: %s", rd->file->path,
                       len, wm__errno_text(e));
    *out = p;
    return WM_OK;
}

static wm_status read_direct(wm__reader *rd, const wm__read_req *q, int dfd, uint64_t a, uint64_t b,
                             wm__stage *stage, wm_error *err) {
    if (q->mirror) {
        uint64_t lo = down(a), hi = up(b);
        /* The block at lo lies after dst's byte (a run past the request's first block: a later
         * segment, or a cold run after a cached one) or before it (in the blocks the mirror
         * may write): the offset is added or subtracted as what it is, never wrapped. */
        unsigned char *buf = lo >= q->off ? q->dst + (lo - q->off) : q->dst - (q->off - lo);
        wm_status st =
            pread_exact(rd, q, dfd, buf, lo, (size_t)(hi - lo), (size_t)(b - lo), true, err);
        if (!st) atomic_fetch_add(&rd->direct_bytes, b - a);
        return st;
    }
    uint64_t lo = down(a), hi = up(b), in_lo = up(a), in_hi = down(b);
    bool agrees = (uintptr_t)q->dst % ALIGN == q->off % ALIGN;
    bool small = hi - lo <= 2 * ALIGN; /* one block or two: read into the edge blocks */
    if (!small && (!agrees || in_hi <= in_lo)) return read_staged(rd, q, dfd, a, b, stage, err);
    bool head = !small && a < in_lo, tail = !small && in_hi < b;
    if ((small || head || tail) && !stage->edge) {
        wm_status made = stage_pages(rd, 2 * (size_t)ALIGN, &stage->edge, err);
        if (made) return made;
    }
    unsigned char *first = stage->edge, *last = first ? first + ALIGN : NULL;
    wm_os_iov v[3];
    int n = 0;
    if (small) {
        v[n++] = (wm_os_iov){first, (size_t)(hi - lo)};
    } else {
        if (head) v[n++] = (wm_os_iov){first, ALIGN};
        v[n++] = (wm_os_iov){q->dst + (in_lo - q->off), (size_t)(in_hi - in_lo)};
        if (tail) v[n++] = (wm_os_iov){last, ALIGN};
        lo = head ? lo : in_lo;
        hi = tail ? hi : in_hi;
    }
    wm_status st =
        preadv_exact(rd, q, dfd, v, n, lo, (size_t)(hi - lo), (size_t)(b - lo), true, err);
    if (st) return st;
    if (small) memcpy(q->dst + (a - q->off), first + (a - lo), (size_t)(b - a));
    if (head) memcpy(q->dst + (a - q->off), first + (a - lo), (size_t)(in_lo - a));
    if (tail) memcpy(q->dst + (in_hi - q->off), last, (size_t)(b - in_hi));
    atomic_fetch_add(&rd->direct_bytes, b - a);
    return WM_OK;
}

/* The thread's staging, made at its first use. */
static wm_status stage_make(wm__reader *rd, wm__stage *stage, wm_error *err) {
    if (stage->p) return WM_OK;
    wm_status st = stage_pages(rd, WM__STAGE_BYTES, &stage->p, err);
    if (st) return st;
    stage->len = WM__STAGE_BYTES;
    /* A hint: a direct read into huge pages is a few scatter-gather segments where 4 KiB pages
     * are 512 per 2 MiB, so the block layer splits it into fewer, larger requests (virtio-blk:
     * 254 segments, 4 MiB a request); on the development VM 2 MiB reads came 3x faster that way
     * (bench/RESULTS.md, llama). Linux aligns a 2 MiB anonymous mapping to a huge page (6.7+);
     * elsewhere the advice covers no whole huge page and does nothing. */
    (void)wm__os_advise(stage->p, WM__STAGE_BYTES, WM_OS_ADV_HUGEPAGE);
    return WM_OK;
}

static wm_status read_staged(wm__reader *rd, const wm__read_req *q, int dfd, uint64_t a, uint64_t b,
                             wm__stage *stage, wm_error *err) {
    wm_status made = stage_make(rd, stage, err);
    if (made) return made;
    for (uint64_t pos = a; pos < b;) {
        uint64_t lo = down(pos), hi = up(b);
        if (hi - lo > stage->len) hi = lo + stage->len;
        uint64_t end = hi < b ? hi : b;
        wm_status st =
            pread_exact(rd, q, dfd, stage->p, lo, (size_t)(hi - lo), (size_t)(end - lo), true, err);
        if (st) return st;
        memcpy(q->dst + (pos - q->off), stage->p + (pos - lo), (size_t)(end - pos));
        atomic_fetch_add(&rd->direct_bytes, end - pos);
        pos = end;
    }
    return WM_OK;
}

/* ---- the request ---- */

/* One segment [a, b) of the request: decided (AUTO), then read run by run. */
static wm_status read_segment(wm__reader *rd, const wm__read_req *q, uint64_t a, uint64_t b,
                              wm__stage *stage, wm_error *err) {
    runs rs = {.n = 0};
    bool can_direct = rd->direct_fd && (q->mirror || stage) && !atomic_load(&rd->direct_off);
    if (!can_direct || rd->io == WM_DIRECT_OFF)
        push(&rs, a, b, false);
    else if (rd->io == WM_DIRECT_ON)
        push(&rs, a, b, true);
    else {
        decide(rd->file->shards[q->shard].fd, a, b, &rs);
        read_near_cold_direct(&rs);
    }
    for (unsigned i = 0; i < rs.n; i++) {
        const run *r = &rs.r[i];
        int dfd = r->direct ? direct_fd(rd, q->shard) : -1;
        wm_error e;
        wm_status st = dfd >= 0 ? read_direct(rd, q, dfd, r->a, r->b, stage, &e)
                                : read_buffered(rd, q, r->a, r->b, &e);
        if (st && dfd >= 0 && st != WM_ENOMEM && e.os_errno == EINVAL) {
            /* The file system refuses O_DIRECT after all: buffered from now on. */
            atomic_store(&rd->direct_off, true);
            st = read_buffered(rd, q, r->a, r->b, &e);
        }
        if (st) {
            if (err) *err = e;
            return st;
        }
    }
    return WM_OK;
}

/* The request by the policy alone. */
static wm_status read_range(wm__reader *rd, const wm__read_req *q, wm__stage *stage,
                            wm_error *err) {
    uint64_t end = q->off + q->len;
    if (q->rows && q->len < DIRECT_MIN && rd->io == WM_DIRECT_AUTO)
        return read_buffered(rd, q, q->off, end, err);
    for (uint64_t a = q->off; a < end;) {
        uint64_t b = end - a > SEGMENT ? down(a + SEGMENT) : end;
        if (b <= a) b = end;
        wm_status st = read_segment(rd, q, a, b, stage, err);
        if (st) return st;
        a = b;
    }
    return WM_OK;
}

wm_status wm__read(wm__reader *rd, const wm__read_req *q, wm__stage *stage, wm_error *err) {
    wm_file *f = (wm_file *)(uintptr_t)rd->file;
    if (rd->no_prefetch || !atomic_load_explicit(&f->pre, memory_order_acquire))
        return read_range(rd, q, stage, err);
    atomic_fetch_add(&f->pre_users, 1); /* before `pre` is loaded (wm__file_prefetch_drop) */
    struct wm__pre *pre = atomic_load_explicit(&f->pre, memory_order_acquire);
    wm_status st = WM_OK;
    for (size_t at = 0; !st && at < q->len;) {
        bool copied = false;
        size_t n = q->len - at;
        if (pre) n = f->ahead_take(pre, q->shard, q->off + at, n, q->dst + at, &copied);
        if (copied) {
            atomic_fetch_add(&rd->prefetched_bytes, n);
        } else {
            wm__read_req part = *q; /* (a mirror stays one: dst and off move together) */
            part.off += at;
            part.len = n;
            part.dst += at;
            st = read_range(rd, &part, stage, err);
        }
        at += n;
    }
    atomic_fetch_sub(&f->pre_users, 1);
    return st;
}
