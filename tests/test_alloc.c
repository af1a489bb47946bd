/*
 * test_alloc.c: the counted allocator gives memory back exactly, and an open GGUF file keeps
 * only its header.
 *
 * The header is read in whole 2 MiB pages (fast to fill) that can hold megabytes of tensor data
 * past it; after parsing, the file shrinks the buffer in place and the pages past the header go
 * back to the system. Checked by the ledger's exact figure and, for the allocator, by mincore()
 * on the pages given back (ENOMEM: nothing is mapped there any more).
 */
#include "wmtest.h"

#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static uint64_t heap_now(void) {
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    return l.cat[WM_LEDGER_HEAP].current;
}

/* Whether [p, p + len) (page-aligned) is unmapped: mincore fails with ENOMEM there. */
static bool unmapped(const void *p, size_t len) {
    unsigned char vec[64];
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (len / page > sizeof vec) len = sizeof vec * page;
    return mincore((void *)p, len, (void *)vec) != 0 && errno == ENOMEM; /* Darwin: char * */
}

/* Shrinking a page block keeps its address and bytes, unmaps the whole pages past its new end
 * and charges the ledger exactly the new size; growing moves it; a block that would drop under
 * the page threshold keeps its pages (wm__free tells the kinds apart by the size). */
WM_TEST(realloc_shrinks_in_place) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint64_t base = heap_now();
    unsigned char *p = wm__alloc((size_t)1 << 20);
    CHECK(p != NULL);
    memset(p, 0xA5, (size_t)1 << 20);
    uint64_t full = heap_now() - base;
    CHECK(full >= (uint64_t)1 << 20);
    unsigned char *q = wm__realloc(p, 10000);
    CHECK(q == p);
    for (size_t i = 0; i < 10000; i++)
        if (q[i] != 0xA5) CHECK_MSG(false, "byte %zu changed", i);
    uint64_t small = heap_now() - base;
    CHECK_MSG(small < 10000 + 64, "ledger %llu after shrinking to 10000",
              (unsigned long long)small);
    /* The block starts 16 bytes before q, on a page: its pages end at 3 pages (10016 bytes). */
    const unsigned char *start = q - 16;
    CHECK((uintptr_t)start % page == 0);
    CHECK(unmapped(start + 3 * page, 8 * page));
    CHECK(!unmapped(start, 3 * page));
    /* Down to under a page: stays a page block, pages kept. */
    CHECK(wm__realloc(q, 100) == q);
    CHECK_EQ(heap_now() - base, small);
    /* Grow: a new block, the bytes carried over. */
    unsigned char *r = wm__realloc(q, (size_t)2 << 20);
    CHECK(r != NULL);
    CHECK_EQ(r[9999], 0xA5);
    wm__free(r);
    CHECK_EQ(heap_now(), base);
}

/* An open file costs its header and tables, not the 2 MiB pages its header was read into. A
 * make-model file has a 400 KB header (its vocabulary) before 16 MB of tensors: the header is
 * read in 2 MiB, 1.6 MiB of it tensor data, which the open gives back. The fixtures have headers
 * under the first 32 KiB read, or are all header (vocabularies): they cost about their size. */
WM_TEST(open_file_keeps_only_its_header) {
    const char *made = wmt_make_model("m.gguf", "--size 16M");
    const char *files[] = {made, wmt_fixture("gguf/stories260K.gguf"),
                           wmt_fixture("gguf/superpoint.gguf"),
                           wmt_fixture("gguf/ggml-vocab-llama-spm.gguf")};
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        uint64_t base = heap_now();
        wm_file *f;
        wm_error err;
        CHECK_STATUS(wm_file_open(files[k], &f, &err), WM_OK);
        uint64_t cost = heap_now() - base, header = wm_file_data_offset(f);
        /* The header's bytes, the tensor and key tables and the names: within 2x the header
         * and 64 KiB (this was the header rounded up to 2 MiB). */
        CHECK_MSG(cost <= 2 * header + 64 * 1024,
                  "%s: open holds %llu bytes for a %llu-byte header", files[k],
                  (unsigned long long)cost, (unsigned long long)header);
        wm_file_close(f);
        CHECK_EQ(heap_now(), base);
    }
}
