/*
 * test_gguf_mapped.c: GGUF headers of megabytes are parsed from a read-only shared mapping of
 * the file (src/format/gguf.c, parse_mapped), and the open file keeps a mapping of its header
 * pages alone. These cases check that mechanism, not a time: the ledger's map_shared figure
 * while open (exactly the header's pages, one region) and after close (0), the process's
 * regions of the file (one while open, none after), that a small header is still read into
 * memory (no mapping), that the values read through the mapping are the file's, and that every
 * failure on the mapped path (a truncated big header, a failed mmap) leaves nothing behind.
 */
#include "gguf_builder.h"

#include "os/fault.h"

#include <errno.h>
#include <unistd.h>

#define BIG_VOCAB "gguf/ggml-vocab-llama-bpe.gguf" /* 7.8 MB, all header: 128256 tokens */
#define SMALL "gguf/stories260K.gguf"

static wm_ledger_stat shared_now(void) {
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    return l.cat[WM_LEDGER_MAP_SHARED];
}

/* A vocab-only file of n tokens (every token "tok<k>"), n large enough for a mapped header. */
static const char *big_vocab(const char *name, uint64_t n, size_t cut) {
    ggb g;
    ggb_begin(&g, 3, 0, 2);
    ggb_kv_str(&g, "general.architecture", "llama");
    ggb_kv_arr(&g, "tokenizer.ggml.tokens", WM_VALUE_STRING, n);
    char tok[32];
    for (uint64_t k = 0; k < n; k++) {
        snprintf(tok, sizeof tok, "tok%llu", (unsigned long long)k);
        ggb_str(&g, tok);
    }
    if (cut) g.b.len -= cut;
    const char *path = ggb_write(&g, name);
    ggb_free(&g);
    return path;
}

WM_TEST(big_header_is_mapped_pages_only_and_returned_at_close) {
    const char *path = wmt_fixture(BIG_VOCAB);
    wm_file *f = OPEN_OK(path);
    wm_ledger_stat c = shared_now();
    long page = sysconf(_SC_PAGESIZE);
    uint64_t header = wm_file_size(f); /* a vocab-only file is all header */
    CHECK_EQ(c.regions, 1);
    /* The file's length, not rounded up: a mapping of the whole file ends where the file does. */
    CHECK_EQ(c.current, header);
    CHECK(header % (uint64_t)page != 0);
    CHECK_EQ(wmt_count_file_maps(path), 1);
    wm_file_close(f);
    CHECK_EQ(shared_now().current, 0);
    CHECK_EQ(wmt_count_file_maps(path), 0);
    CHECK_LEDGER_EMPTY();
}

/* A header of about 3.3 MB (400000 tokens "t<k>") and one tensor "w" of 16 MiB of f32 after it;
 * *header_end: where the header ends. */
static const char *big_header_with_data(size_t *header_end) {
    ggb g;
    ggb_begin(&g, 3, 1, 2);
    ggb_kv_str(&g, "general.architecture", "llama");
    uint64_t n = 400000;
    ggb_kv_arr(&g, "tokenizer.ggml.tokens", WM_VALUE_STRING, n);
    char tok[32];
    for (uint64_t k = 0; k < n; k++) {
        snprintf(tok, sizeof tok, "t%llu", (unsigned long long)k);
        ggb_str(&g, tok);
    }
    uint64_t ne = (uint64_t)4 << 20;
    ggb_tensor1(&g, "w", ne, 0, 0);
    *header_end = g.b.len;
    ggb_pad(&g, 32);
    ggb_data(&g, (size_t)ne * 4);
    const char *path = ggb_write(&g, "data.gguf");
    ggb_free(&g);
    return path;
}

/* A header of a few MB inside a bigger file: the tail past the header is unmapped at once. */
WM_TEST(big_header_with_data_keeps_only_the_header_pages) {
    size_t header_end;
    const char *path = big_header_with_data(&header_end);
    uint64_t n = 400000;
    wm_file *f = OPEN_OK(path);
    long page = sysconf(_SC_PAGESIZE);
    wm_ledger_stat c = shared_now();
    CHECK_EQ(c.regions, 1);
    CHECK_EQ(c.current, (header_end + (size_t)page - 1) / (size_t)page * (size_t)page);
    CHECK_MSG(c.current < wm_file_size(f) / 2, "the mapping kept %llu of %llu bytes",
              (unsigned long long)c.current, (unsigned long long)wm_file_size(f));
    /* Values read through the mapping are the file's. */
    size_t i;
    CHECK_STATUS(wm_file_find_metadata(f, "tokenizer.ggml.tokens", &i), WM_OK);
    wm_string s;
    CHECK_STATUS(wm_file_array_string(f, i, n - 1, &s), WM_OK);
    CHECK_MSG(s.len == 7 && memcmp(s.ptr, "t399999", 7) == 0, "last token '%.*s'", (int)s.len,
              s.ptr);
    /* A model loads and releases beside the header mapping. */
    wm_load_options o = {.mode = WM_MODE_MMAP};
    wm_model *m = NULL;
    wm_error err;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_OK);
    CHECK_EQ(wmt_count_file_maps(path), 2);
    wm_model_release(m);
    CHECK_EQ(wmt_count_file_maps(path), 1);
    wm_file_close(f);
    CHECK_EQ(wmt_count_file_maps(path), 0);
}

/* A file cold before its open: parsing the mapped header faults its pages in, and the kernel
 * reads around each fault (megabytes past the header's end, marked to start more readahead when
 * read); the open drops what it brought in past the header (src/open/open.c), so the tensor
 * data is still cold when the open returns, and a load reads it direct, leaving none of it in
 * the page cache. */
WM_TEST(big_header_cold_file_stays_cold_past_it) {
    size_t header_end;
    const char *path = big_header_with_data(&header_end);
    wmt_make_cold(path, 0, 0);
    wm_file *f = OPEN_OK(path);
    uint64_t data = wm_file_data_offset(f), size = wm_file_size(f);
    long page = sysconf(_SC_PAGESIZE);
    uint64_t cached = wmt_cached_bytes(path, data, size - data);
    CHECK_MSG(cached <= (uint64_t)page, "%llu bytes of the tensor data cached by the open",
              (unsigned long long)cached);
    float *w = malloc((size_t)(size - data));
    CHECK(w != NULL);
    wm_read_item it = {.tensor = 0, .dst = w};
    wm_error err;
    CHECK_MSG(wm_file_read_tensors(f, &it, 1, NULL, &err) == WM_OK, "%s", err.msg);
    CHECK_EQ(wmt_cached_bytes(path, data, size - data), cached);
    free(w);
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
}

WM_TEST(small_header_is_read_not_mapped) {
    const char *path = wmt_fixture(SMALL);
    wm_file *f = OPEN_OK(path);
    CHECK_EQ(shared_now().regions, 0);
    CHECK_EQ(wmt_count_file_maps(path), 0);
    wm_file_close(f);
}

/* A big header cut short: refused with the field and offset, nothing mapped or counted after. */
WM_TEST(truncated_big_header_refused_cleanly) {
    const char *path = big_vocab("cut.gguf", 300000, 3);
    CHECK_REFUSED(path, WM_EFORMAT, "token");
}

/* Every fallible call of a mapped open fails in turn (the mmap among them): each failure is
 * reported, or was a hint whose failure changes nothing (the open then succeeds), and either
 * way no mapping, descriptor or ledger byte is left after close. The mmap itself must fail the
 * open. */
WM_TEST(fault_sweep_mapped_open) {
#ifndef WM_FAULT_INJECTION
    WM_SKIP("needs -DWM_FAULT_INJECTION=ON");
#else
    char path[1024];
    snprintf(path, sizeof path, "%s", wmt_fixture(BIG_VOCAB));
    wm__fault_reset();
    wm_file *f = OPEN_OK(path);
    wm_file_close(f);
    CHECK(wm__fault_count(WM_OS_MAP) == 1);
    wm_error err;
    wm__fault_reset();
    wm__fault_arm(WM_OS_MAP, 1, ENOMEM);
    f = NULL;
    CHECK_STATUS(wm_file_open(path, &f, &err), WM_ENOMEM);
    CHECK_MSG_HAS(err, "mapping the header");
    CHECK_EQ(wmt_count_file_maps(path), 0);
    CHECK_LEDGER_EMPTY();
    wm__fault_reset();
    /* every call, with EIO and with ENOMEM; only advice may fail without failing the open */
    CHECK(wmt_open_fault_sweep(path, path) > 0);
#endif
}
