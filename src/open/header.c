/*
 * header.c: a file's header bytes, read or mapped for its parser (src/format/): the open's I/O.
 *
 * GGUF: a header's length is known only once it is parsed, so the parser passes over a growing
 * prefix (a bounded number of reads: the buffer grows 8x until the header fits, or is mapped
 * past GGUF_MAP_ABOVE). safetensors: the 8-byte length, then exactly the header.
 */
#include "open.h"

#include "../format/json.h"
#include "../format/parse.h"

#include <string.h>

/* ---- GGUF ---- */

/* The first read stays under WM_ALLOC_PAGE_THRESHOLD, so it comes from malloc's warm heap (no
 * mmap, fault or munmap for a small header); the buffer then grows 8x, and from GGUF_HUGE_MIN on
 * it is made of whole 2 MiB huge pages (see header_alloc). */
#define GGUF_FIRST_READ (WM_ALLOC_PAGE_THRESHOLD - 64)
#define GGUF_HUGE_MIN ((size_t)128 * 1024)
#define GGUF_HUGE_PAGE ((size_t)2 * 1024 * 1024)
/* Where the next buffer would be larger than this, the header is parsed from a mapping instead
 * (see parse_mapped). */
#define GGUF_MAP_ABOVE GGUF_HUGE_PAGE
/* The first prefix of a mapped header that is read ahead and parsed (see parse_mapped): 4x the
 * last buffer read, which held less than the header. */
#define GGUF_MAPPED_FIRST (4 * GGUF_MAP_ABOVE)

/* Why whole huge pages: filling fresh memory costs one page fault per 4 KiB, and on this kind of
 * VM a fault costs ~15 us: reading a 7.8 MB vocab header into 4 KiB pages took 28 ms, into
 * 2 MiB pages 1.4 ms. The counted allocator advises MADV_HUGEPAGE on blocks of 1 MiB or more;
 * the kernel aligns an anonymous mapping to 2 MiB only when its length is a multiple of 2 MiB,
 * so a buffer of GGUF_HUGE_MIN or more is rounded up to whole huge pages (less the allocator's
 * block header, WM_ALLOC_HEADER, so that header and buffer together fill whole huge pages). *cap
 * then grows to what the buffer holds, up to the file size, so those bytes are read now rather than
 * in a later pass. */
/* The bytes a buffer of n bytes gets: whole huge pages less the allocator's block header. */
static uint64_t huge_size(uint64_t n) {
    return (n + WM_ALLOC_HEADER + GGUF_HUGE_PAGE - 1) / GGUF_HUGE_PAGE * GGUF_HUGE_PAGE -
           WM_ALLOC_HEADER;
}

static unsigned char *header_alloc(size_t *cap, uint64_t file_size) {
    size_t n = *cap;
    bool huge = n >= GGUF_HUGE_MIN && n <= SIZE_MAX - 2 * GGUF_HUGE_PAGE;
    if (huge) n = (size_t)huge_size(n);
    unsigned char *p = wm__alloc(n ? n : 1);
    if (!p) return NULL;
    if (huge) *cap = n < file_size ? n : (size_t)file_size;
    return p;
}

/* Why a mapping for headers of megabytes (a 262k-token vocabulary is 16 MB): read into memory,
 * every byte is copied by the kernel out of the page cache into fresh pages, and that copy was
 * most of the time a whole `weightmap info` took on such a file. Mapped, the parser reads the
 * page-cache pages in place. The file then keeps a read-only shared mapping of its header,
 * rounded to pages (page cache: evictable, never private), counted as map_shared; the rest of
 * the file is unmapped as soon as the header is parsed. The buffers of the passes before are
 * freed first, so the ledger holds the mapping alone. */
static wm_status parse_mapped(wm_file *f, wm__gguf_state *s, wm_error *err) {
    wm__free(f->header);
    f->header = NULL;
    if (f->size > SIZE_MAX)
        return wm__err(err, WM_ENOMEM, 0, "%s: a %llu-byte file cannot be mapped here", f->path,
                       (unsigned long long)f->size);
    size_t len = (size_t)f->size;
    void *p;
    int e = wm__os_map(f->shards[0].fd, 0, len, WM_OS_MAP_SHARED_RO, &p);
    if (e)
        return wm__err(err, wm__status_io(e), e,
                       "%s: mapping the header (%zu bytes at offset 0): %s", f->path, len,
                       wm__errno_text(e));
    f->header = p;
    f->header_map = len;
    wm__ledger_acquire(WM_LEDGER_MAP_SHARED, len);
    /* Read exactly what is parsed, all of it in before the open returns. A fault left to read
     * around (cold, an 8 MiB window where read_ahead_kb is 8192) reads on past the header into
     * the tensor data, asynchronously, so that the open cannot drop those pages (open.c: they
     * are still being read when it does), and marks a page to start the next window when it
     * is read: the load's first reads found megabytes of the data cached, and came in buffered
     * (tests/test_gguf_mapped.c, big_header_cold_file_stays_cold_past_it). So the faults read
     * no more than their page (RANDOM), and a prefix of the file is read ahead explicitly
     * (WILLNEED: what is asked, with no mark) and awaited (POPULATE_READ), then parsed; then
     * a prefix 4x longer, until one holds the header. All are hints: without them, the pass
     * over the whole mapping reads the same bytes. */
    (void)wm__os_advise(p, len, WM_OS_ADV_RANDOM);
    s->r.buf = p;
    size_t have = 0, want = GGUF_MAPPED_FIRST;
    for (;;) {
        size_t n = want < len ? want : len;
        unsigned char *next = (unsigned char *)p + have;
        (void)wm__os_advise(next, n - have, WM_OS_ADV_WILLNEED);
        (void)wm__os_advise(next, n - have, WM_OS_ADV_POPULATE_READ);
        s->r.len = n;
        if (wm__gguf_pass(s)) break;
        if (!s->r.need_more || n == len) return err->code;
        have = n;
        want = n > len / 4 ? len : n * 4;
    }
    size_t page = wm__os_page_size();
    size_t keep = f->header_len > len - page ? len : (f->header_len + page - 1) / page * page;
    if (keep < len) {
        wm__os_unmap((unsigned char *)p + keep, len - keep);
        wm__ledger_shrink(WM_LEDGER_MAP_SHARED, len - keep);
        f->header_map = keep;
    }
    return WM_OK;
}

wm_status wm__gguf_read(wm_file *f, wm_error *err) {
    wm_error local;
    if (!err) err = &local; /* the status travels in err->code */
    wm__shard *sh = &f->shards[0];
    wm__gguf_state s = {.f = f};
    s.r.path = f->path;
    s.r.err = err;
    s.r.file_size = f->size;

    size_t cap = f->size < GGUF_FIRST_READ ? (size_t)f->size : GGUF_FIRST_READ;
    size_t have = 0;
    for (;;) {
        unsigned char *nb = header_alloc(&cap, f->size);
        if (!nb)
            return wm__err(err, WM_ENOMEM, 0, "%s: out of memory for a %zu-byte header", f->path,
                           cap);
        if (have) memcpy(nb, f->header, have);
        wm__free(f->header);
        f->header = nb;
        size_t got;
        int e = wm__os_pread(sh->fd, nb + have, cap - have, have, &got);
        if (e)
            return wm__err(err, wm__status_io(e), e, "%s: reading the header at offset %zu: %s",
                           f->path, have, wm__errno_text(e));
        if (got != cap - have)
            return wm__err(err, WM_EIO, 0, "%s: file shrank while reading its header (offset %zu)",
                           f->path, have + got);
        have = cap;
        s.r.buf = nb;
        s.r.len = have;
        if (wm__gguf_pass(&s)) {
            /* The buffer is made of whole huge pages and may hold megabytes past the header
             * (tensor data, or nothing): give those pages back, the file keeps its header. */
            (void)wm__realloc(f->header, f->header_len);
            break;
        }
        if (!s.r.need_more) return err->code;
        /* 8x (in whole huge pages from GGUF_HUGE_MIN on), then a mapping; a buffer that would
         * hold a quarter of a small file takes all of it: a vocab-only file is all header, and
         * one more pass over a partial buffer costs more than it saves. */
        uint64_t want = (uint64_t)cap * 8;
        /* Rounded here as header_alloc will (whole huge pages less the allocator's block
         * header), so that the quarter-of-the-file test sees the buffer's real size. */
        if (want >= GGUF_HUGE_MIN) want = huge_size(want);
        if (want > GGUF_MAP_ABOVE) {
            wm_status st = parse_mapped(f, &s, err);
            if (st) return st;
            break;
        }
        cap = want >= f->size / 4 && f->size <= GGUF_MAP_ABOVE ? (size_t)f->size : (size_t)want;
    }
    return wm__gguf_names(f, f->path, err);
}

/* ---- safetensors ---- */

wm_status wm__safetensors_read(wm_file *f, wm_error *err) {
    const char *path = f->path;
    wm__shard *sh = &f->shards[0];
    if (f->size < 8)
        return wm__json_err(err, path, 0,
                            "a file of %llu bytes is too short for the 8-byte header length",
                            (unsigned long long)f->size);
    unsigned char lb[8];
    size_t got;
    int e = wm__os_pread(sh->fd, lb, 8, 0, &got);
    if (e)
        return wm__err(err, wm__status_io(e), e, "%s: reading the header length at offset 0: %s",
                       path, wm__errno_text(e));
    if (got != 8) return wm__err(err, WM_EIO, 0, "%s: file shrank while reading its header", path);
    uint64_t hlen;
    wm_status st = wm__safetensors_header_len(f, lb, &hlen, err);
    if (st) return st;
    unsigned char *text = wm__alloc(hlen ? (size_t)hlen : 1);
    if (!text)
        return wm__err(err, WM_ENOMEM, 0, "%s: out of memory for a %llu-byte header", path,
                       (unsigned long long)hlen);
    e = wm__os_pread(sh->fd, text, (size_t)hlen, 8, &got);
    if (e)
        st = wm__err(err, wm__status_io(e), e, "%s: reading the header at offset 8: %s", path,
                     wm__errno_text(e));
    else if (got != hlen)
        st = wm__err(err, WM_EIO, 0, "%s: file shrank while reading its header", path);
    else
        st = wm__safetensors_header(f, text, hlen, err);
    wm__free(text);
    return st;
}
