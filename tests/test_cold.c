/*
 * test_cold.c: the reading engine (src/read/reader.c) on the heap path: by default (WM_DIRECT_AUTO)
 * bytes in the page cache are read buffered and the rest with O_DIRECT, without the caller
 * choosing.
 *
 * The file is made cold by the test itself (fdatasync, POSIX_FADV_DONTNEED) after it is opened
 * (the open's header read would warm its first pages), then one 1 MiB-aligned range is warmed
 * with reads that start no readahead; the test's own mincore says the pages are as asked (the
 * case skips where the file system cannot drop pages or has no O_DIRECT). Then the model's
 * counts by route (wm_model_stats.read_direct, read_buffered) must be exactly the tensor bytes
 * outside and inside the warm range, every byte must equal the file's, and the cold pages must
 * still be out of the page cache after the load (direct reads leave it as it was). The explicit
 * policies do what they say; a cold read that fails midway is refused and holds nothing.
 * The same on the CUDA staged path: test_cuda.c, cold_direct_warm_buffered.
 */
#include "wmtest.h"

#include "os/fault.h"

#include <errno.h>
#include <string.h>

#define N_TENSORS WMT_COLD_N
#define WARM_OFF WMT_WARM_OFF
#define WARM_LEN WMT_WARM_LEN

/* The tensor bytes of f inside [lo, hi) of the file, and outside it. */
static void split_bytes(const wm_file *f, uint64_t lo, uint64_t hi, uint64_t *in, uint64_t *out) {
    *in = *out = 0;
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        uint64_t a = t.offset, b = t.offset + t.nbytes;
        uint64_t ia = a > lo ? a : lo, ib = b < hi ? b : hi;
        uint64_t inside = ib > ia ? ib - ia : 0;
        *in += inside;
        *out += t.nbytes - inside;
    }
}

/* Every tensor's bytes are the file's. */
static void check_bytes(wm_model *m) {
    const wm_file *f = wm_model_file(m);
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        const unsigned char *p = wm_model_tensor_data(m, i);
        CHECK(p != NULL);
        uint64_t data = t.offset - wm_file_data_offset(f);
        for (uint64_t k = 0; k < t.nbytes; k++)
            if (p[k] != wmt_cold_byte(data + k))
                wmt_fail(__FILE__, __LINE__, "tensor %zu byte %llu differs from the file", i,
                         (unsigned long long)k);
    }
}

static wm_load_options heap_opts(unsigned threads, wm_direct_io io) {
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = WM_MODE_HEAP;
    o.threads = threads;
    o.direct_io = io;
    return o;
}

static wm_model_stats load_stats(wm_file *f, wm_load_options o) {
    wm_model *m = NULL;
    wm_error err;
    wm_status st = wm_model_load(f, &o, &m, &err);
    CHECK_MSG(st == WM_OK, "load: %s", err.msg);
    check_bytes(m);
    wm_model_stats s = WM_MODEL_STATS_INIT;
    wm_model_stats_get(m, &s);
    wm_model_release(m);
    return s;
}

/* Cold ranges went direct, the warm one buffered, to the byte; the cold pages stayed out of the
 * page cache. With 1 and 3 threads. */
WM_TEST(heap_cold_direct_warm_buffered) {
    const char *path = wmt_cold_file();
    for (unsigned threads = 1; threads <= 3; threads += 2) {
        wm_file *f = OPEN_OK(path);
        uint64_t warm, cold, size = wm_file_size(f);
        split_bytes(f, WARM_OFF, WARM_OFF + WARM_LEN, &warm, &cold);
        /* The kernel may evict some of the warm range under memory pressure before the load
         * reads it (seen once in CI under qemu: 185 pages). A direct read does not drop cached
         * pages, so a warm range still whole after the load means the engine chose: only a
         * range that lost pages is tried again (at most 3 times). */
        wm_model_stats s;
        for (int attempt = 0;; attempt++) {
            wmt_make_cold(path, WARM_OFF, WARM_LEN);
            s = load_stats(f, heap_opts(threads, WM_DIRECT_AUTO));
            if (s.read_buffered == warm || attempt == 2 ||
                wmt_cached_bytes(path, WARM_OFF, WARM_LEN) == WARM_LEN)
                break;
        }
        CHECK_EQ(s.read_buffered, warm);
        CHECK_EQ(s.read_direct, cold);
        CHECK_EQ(wmt_cached_bytes(path, 0, WARM_OFF), 0);
        CHECK_EQ(wmt_cached_bytes(path, WARM_OFF + WARM_LEN, size - WARM_OFF - WARM_LEN), 0);
        wm_file_close(f);
        CHECK_LEDGER_EMPTY();
    }
}

/* The policies the caller can fix: buffered reads a cold file through the page cache, direct
 * reads a warm one past it; auto reads a warm file buffered. Where
 * nothing is read (the mapped modes) a fixed policy is refused, as is an unknown one. */
WM_TEST(heap_io_policies) {
    const char *path = wmt_cold_file();
    wm_file *f = OPEN_OK(path);
    uint64_t total = wm_file_tensor_bytes(f), size = wm_file_size(f), data = wm_file_data_offset(f);
    wmt_make_cold(path, 0, 0);
    wm_model_stats s = load_stats(f, heap_opts(2, WM_DIRECT_OFF));
    CHECK_EQ(s.read_direct, 0);
    CHECK_EQ(s.read_buffered, total);
    wmt_make_cold(path, data, size - data); /* warm: every tensor page, checked */
    s = load_stats(f, heap_opts(2, WM_DIRECT_AUTO));
    CHECK_EQ(s.read_direct, 0);
    CHECK_EQ(s.read_buffered, total);
    s = load_stats(f, heap_opts(2, WM_DIRECT_ON)); /* warm, but direct asked for */
    CHECK_EQ(s.read_direct, total);
    CHECK_EQ(s.read_buffered, 0);
    wm_model *m = NULL;
    wm_error err;
    wm_load_options o = heap_opts(2, WM_DIRECT_ON);
    o.mode = WM_MODE_MMAP;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "direct_io on");
    o = heap_opts(2, (wm_direct_io)7);
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "unknown direct_io");
    CHECK(m == NULL);
    wm_file_close(f);
}

/* The O_DIRECT descriptor cannot be opened (injected): the cold file is read buffered, the same
 * bytes, and the load says so in its counts. */
WM_TEST(heap_cold_without_direct_reads_buffered) {
    const char *path = wmt_cold_file();
    wm_file *f = OPEN_OK(path);
    uint64_t total = wm_file_tensor_bytes(f);
    wmt_make_cold(path, 0, 0);
    wm__fault_arm_sticky(WM_OS_OPEN, 1, EINVAL);
    wm_model_stats s = load_stats(f, heap_opts(3, WM_DIRECT_AUTO));
    CHECK(wm__fault_injected() >= 1);
    wm__fault_reset();
    CHECK_EQ(s.read_direct, 0);
    CHECK_EQ(s.read_buffered, total);
    wm_file_close(f);
}

/* A file opened cold: the open's header read brings the first pages of the data into the page
 * cache by readahead, some with the kernel's readahead mark. The load reads those pages direct
 * too (they border cold ones), so no buffered read starts readahead of the rest: the load reads
 * buffered no more than the open left cached, and leaves the page cache as the open left it. */
WM_TEST(heap_opened_cold_reads_direct) {
    const char *path = wmt_cold_file();
    wmt_make_cold(path, 0, 0);
    wm_file *f = OPEN_OK(path);
    uint64_t size = wm_file_size(f), total = wm_file_tensor_bytes(f);
    uint64_t head = wmt_cached_bytes(path, 0, size); /* what the open brought in */
    wm_model_stats s = load_stats(f, heap_opts(3, WM_DIRECT_AUTO));
    uint64_t after = wmt_cached_bytes(path, 0, size);
    CHECK_MSG(s.read_buffered <= head && after <= head,
              "opened with %llu bytes cached: %llu read buffered, %llu cached after the load "
              "(of %llu)",
              (unsigned long long)head, (unsigned long long)s.read_buffered,
              (unsigned long long)after, (unsigned long long)total);
    CHECK_EQ(s.read_direct + s.read_buffered, total);
    wm_file_close(f);
}

/* ---- a cold read that fails midway ---- */

static void use_bytes(wm_model *m) { check_bytes(m); }

static void cold_check(void *user, const wmt_fault_run *r) {
    (void)user;
    CHECK_MSG(r->st != WM_OK, "%s call %llu of %llu failed but the load succeeded",
              wm__fault_call_name(r->kind), (unsigned long long)r->k, (unsigned long long)r->n);
    CHECK_MSG(r->st == (r->kind == WM_OS_PREAD ? WM_EIO : WM_ENOMEM), "call %llu: %s: %s",
              (unsigned long long)r->k, wm_status_name(r->st), r->err->msg);
}

/* Every read of a half-cold load on three threads failed in turn (direct and buffered ones),
 * and every page allocation of one on a thread (the tensors' and the staging for direct
 * reads): each load is refused
 * with the read's error or WM_ENOMEM, holds nothing (ledger, descriptors, mappings: the sweep's
 * checks) and leaves no O_DIRECT descriptor open. */
WM_TEST(heap_cold_read_fails_midway) {
    const char *path = wmt_cold_file();
    wmt_cold_run c = {
        .l = {.f = OPEN_OK(path), .o = heap_opts(3, WM_DIRECT_AUTO), .use = use_bytes},
        .path = path};
    wmt_sweep s = {.what = "cold heap load",
                   .real_cache = 1, /* wmt_cold_load sets the page cache up each run */
                   .run = wmt_cold_load,
                   .check = cold_check,
                   .user = &c,
                   .path = path,
                   .shown = "cold.safetensors",
                   .must_hit = 1};
    wmt_sweep_result res = {0};
    wmt_sweep_count(&s, &res);
    CHECK(res.counts[WM_OS_PREAD] >= N_TENSORS);
    int eio = EIO, enomem = ENOMEM;
    uint64_t preads = res.counts[WM_OS_PREAD];
    wmt_sweep_kind(&s, WM_OS_PREAD, preads, &eio, 1, &res);
    CHECK_MSG(c.direct_failures > 0, "no direct read failed");
    /* One thread for the allocations: with three, whether a worker makes its staging depends
     * on which jobs it happens to take, so their count is not repeatable. */
    c.l.o.threads = 1;
    wmt_sweep_count(&s, &res);
    uint64_t pages = res.counts[WM_OS_PAGES];
    wmt_sweep_kind(&s, WM_OS_PAGES, pages, &enomem, 1, &res);
    CHECK_EQ(res.failed, preads + pages);
    wm_file_close(c.l.f);
}
