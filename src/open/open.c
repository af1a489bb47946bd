/*
 * open.c: one file, opened alone: open and stat it, tell its format by its content, have its
 * header read (header.c) and parsed (src/format/gguf.c, safetensors.c), then index its names
 * (src/format/index.c); and wm__file_free, the one release of a (possibly half-built) wm_file.
 */
#include "open.h"

#include <string.h>

/* How much of a file's start an open looks at to tell whether the file is cold, and drops
 * past the header when it is (wm__file_open_one): more than any header read and the kernel's
 * readahead around it reach, short of a look at the whole file (cachestat costs about 0.1 ms
 * per warm GiB, its mincore fallback 60x more). */
#define OPEN_COLD_SPAN ((uint64_t)64 << 20)

void wm__file_free(wm_file *f) {
    if (!f) return;
    if (f->aux_free) f->aux_free(f->aux);
    for (uint32_t i = 0; i < f->n_shards; i++) {
        wm__os_close(f->shards[i].fd);
        if (f->shards[i].path != f->path) wm__free(f->shards[i].path);
    }
    wm__free(f->shards);
    wm__free(f->tensor_hash);
    wm__free(f->kv_hash);
    wm__free(f->names);
    wm__free(f->kvs);
    wm__free(f->tensors);
    if (f->header_map) {
        wm__os_unmap(f->header, f->header_map);
        wm__ledger_release(WM_LEDGER_MAP_SHARED, f->header_map);
    } else {
        wm__free(f->header);
    }
    wm__free(f->path);
    wm__free(f);
}

/* Reads and parses the header of the file open as sh (shards[0] of f), by its format. */
static wm_status parse_header(wm_file *f, wm__shard *sh, const char *path, wm_error *err) {
    /* Format by content: "GGUF" magic; else a safetensors header (an 8-byte length that fits
     * the file, then '{'); else what the first bytes say the file is, when they say (sniff.c:
     * a PyTorch checkpoint, a Git LFS pointer, ...), refused naming it; else a name that says
     * safetensors goes to that parser and anything else to the GGUF reader, which names the
     * bad magic. */
    unsigned char head[WM__SNIFF_BYTES];
    size_t got = 0;
    int e = wm__os_pread(sh->fd, head, sizeof head, 0, &got);
    if (e)
        return wm__err(err, wm__status_io(e), e, "%s: reading at offset 0: %s", path,
                       wm__errno_text(e));
    bool is_gguf = got >= 4 && memcmp(head, "GGUF", 4) == 0;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0 && got >= 8; i--)
        hlen = hlen << 8 | head[i];
    bool st_header = !is_gguf && got >= 9 && head[8] == '{' && hlen >= 2 && hlen <= f->size - 8;
    bool st_name = wm__ends_with(path, ".safetensors") || wm__ends_with(path, ".json");
    char kind[200];
    if (!is_gguf && !st_header && wm__sniff_foreign(head, got, kind, sizeof kind))
        return wm__err(err, WM_EFORMAT, 0, "%s: at offset 0 (0x0): not a %s file: %s", path,
                       st_name ? "safetensors" : "GGUF", kind);
    bool is_st = !is_gguf && (st_header || (got >= 9 && head[8] == '{') || st_name);
    f->format = is_st ? WM_FORMAT_SAFETENSORS : WM_FORMAT_GGUF;
    return is_st ? wm__safetensors_read(f, err) : wm__gguf_read(f, err);
}

wm_status wm__file_open_one(const char *path, wm_file **out, wm_error *err) {
    *out = NULL;
    wm_status st;
    wm_file *f = wm__calloc(1, sizeof *f);
    if (!f) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory", path);
    f->path = wm__strdup(path);
    f->shards = wm__calloc(1, sizeof *f->shards);
    if (!f->path || !f->shards) {
        st = wm__err(err, WM_ENOMEM, 0, "%s: out of memory", path);
        goto fail;
    }
    f->n_shards = 1;
    wm__shard *sh = &f->shards[0];
    sh->fd = -1;
    sh->path = f->path;
    int e = wm__os_open_read(path, &sh->fd);
    if (e) {
        st = wm__err(err, wm__status_from_errno(e), e, "%s: cannot open: %s", path,
                     wm__errno_text(e));
        goto fail;
    }
    e = wm__os_stat(sh->fd, &sh->st);
    if (e) {
        st = wm__err(err, wm__status_io(e), e, "%s: cannot stat: %s", path, wm__errno_text(e));
        goto fail;
    }
    if (!sh->st.is_regular) {
        st = wm__err(err, WM_EINVAL, 0, "%s: not a regular file", path);
        goto fail;
    }
    f->size = sh->st.size;

    /* A cold file stays cold past its header. The kernel's readahead would bring in a window
     * past a header of a few KiB (8 MiB where read_ahead_kb is 8192) and mark a page of it; the
     * load then finds those pages cached, reads them buffered, reaches the mark, which starts
     * the next window, and so on to the end: a 24 MiB file cold before its open came into the
     * page cache whole, none of it read direct (tests/test_read.c,
     * cold_before_open_read_direct). So the header is read with readahead off (the reads bring
     * in what they ask for), and where nothing of the file's start was cached before the open,
     * what the open brought in past the header (a mapped header's faults read around them,
     * gguf.c) is dropped after it. Both are hints: where they fail, the open is as it was. */
    uint64_t span = f->size < OPEN_COLD_SPAN ? f->size : OPEN_COLD_SPAN, was_cached = 1;
    if (wm__os_cached(sh->fd, 0, span, &was_cached) != 0) was_cached = 1;
    (void)wm__os_file_readahead(sh->fd, false);
    st = parse_header(f, sh, path, err);
    (void)wm__os_file_readahead(sh->fd, true);
    if (st != WM_OK) goto fail;
    uint64_t past = wm__align_up(f->data_offset, wm__os_page_size());
    if (was_cached == 0 && past < span) (void)wm__os_file_drop(sh->fd, past, span - past);
    st = wm__file_index(f, err);
    if (st != WM_OK) goto fail;
    *out = f;
    return WM_OK;
fail:
    wm__file_free(f);
    return st;
}
