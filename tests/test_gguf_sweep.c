/*
 * test_gguf_sweep.c: sweeps over real fixtures.
 *
 * Sections: truncation (every prefix of the small fixtures, the whole header and sampled data
 * lengths of the larger ones, opens or fails with WM_EFORMAT, holding nothing afterwards);
 * faults (the k-th OS call or allocation of an open fails, for every k: the documented status,
 * nothing held); EINTR (retried, so the open succeeds); the cost of an open (a bounded number of
 * reads and allocations, whatever the vocabulary length).
 */
#include "gguf_builder.h"
#include "os/fault.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

/* ---- truncation ---- */

typedef struct full_info {
    uint64_t size;
    uint64_t data_offset;
    uint64_t data_end; /* end of the last tensor; data_offset when there are none */
    size_t n_tensors;
} full_info;

static full_info fixture_info(const char *path) {
    full_info fi = {0};
    wm_file *f = OPEN_OK(path);
    fi.size = wm_file_size(f);
    fi.data_offset = wm_file_data_offset(f);
    fi.n_tensors = wm_file_tensor_count(f);
    /* A file without tensors may end right after its metadata, before the aligned offset. */
    fi.data_end = fi.n_tensors ? fi.data_offset : fi.size;
    for (size_t i = 0; i < fi.n_tensors; i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        if (t.offset + t.nbytes > fi.data_end) fi.data_end = t.offset + t.nbytes;
    }
    wm_file_close(f);
    return fi;
}

/* Opens the first `len` bytes (the copy at `path` truncated to len): WM_OK exactly when every
 * tensor's bytes are there, else WM_EFORMAT; nothing held either way. */
static void open_prefix(const char *path, uint64_t len, const full_info *fi, int fds) {
    CHECK_MSG(truncate(path, (off_t)len) == 0, "truncate %s to %llu", path,
              (unsigned long long)len);
    wm_file *f = (wm_file *)(uintptr_t)1;
    wm_error err = {0};
    wm_status st = wm_file_open(path, &f, &err);
    wm_status want = len >= fi->data_end ? WM_OK : WM_EFORMAT;
    CHECK_MSG(st == want, "prefix of %llu bytes: %s (%s), want %s", (unsigned long long)len,
              wm_status_name(st), err.msg, wm_status_name(want));
    if (st == WM_OK) {
        CHECK_EQ(wm_file_tensor_count(f), fi->n_tensors);
        wm_file_close(f);
    } else {
        CHECK(f == NULL);
        CHECK_MSG(strstr(err.msg, "offset") != NULL, "prefix %llu: \"%s\" lacks \"offset\"",
                  (unsigned long long)len, err.msg);
    }
    CHECK_LEDGER_EMPTY();
    /* A leaked descriptor stays counted, so checking every 64th length (and the last, 0) misses
     * none; it only names the length less precisely. */
    if (len % 64 == 0)
        CHECK_MSG(wmt_count_fds() == fds,
                  "prefix %llu or up to 63 longer: a descriptor was left open",
                  (unsigned long long)len);
}

/* Every length from the whole file down to 0 when it is under 64 KiB; otherwise every length
 * through the header and `samples` lengths spread over the data section. The copy is written
 * once and truncated step by step, longest first. */
static void truncation_sweep(const char *fixture, unsigned samples) {
    const char *src = wmt_fixture(fixture);
    full_info fi = fixture_info(src);
    const char *path = wmt_tmp("prefix.gguf");
    CHECK_EQ(wmt_copy_file(src, path), fi.size);
    int fds = wmt_count_fds();
    uint64_t every = fi.size < 64 * 1024 ? fi.size : fi.data_offset + 64;
    if (every > fi.size) every = fi.size;
    if (fi.size > every) {
        /* Sampled lengths above the header, longest first; both sides of the last byte. */
        open_prefix(path, fi.size, &fi, fds);
        open_prefix(path, fi.size - 1, &fi, fds);
        uint64_t span = fi.size - 1 - every;
        for (unsigned k = samples; k >= 1; k--)
            open_prefix(path, every + span * k / (samples + 1), &fi, fds);
    }
    for (uint64_t l = every + 1; l-- > 0;)
        open_prefix(path, l, &fi, fds);
}

WM_TEST(truncate_ratchet_test) { truncation_sweep("gguf/ratchet-test.gguf", 0); }
WM_TEST(truncate_ratchet_dummy) { truncation_sweep("gguf/ratchet-dummy.gguf", 0); }
WM_TEST(truncate_stories260K) { truncation_sweep("gguf/stories260K.gguf", 200); }
WM_TEST(truncate_stories260K_v1) { truncation_sweep("gguf/stories260K-v1.gguf", 200); }
WM_TEST(truncate_superpoint) { truncation_sweep("gguf/superpoint.gguf", 100); }

/* A vocab file has no tensors: its header is the whole file (707 KiB here). Every length of its
 * first 16 KiB, then lengths about 8 KiB apart over the rest, which cross each pass of the
 * growing read buffer. */
WM_TEST(truncate_vocab_llama_spm) {
    const char *src = wmt_fixture("gguf/ggml-vocab-llama-spm.gguf");
    full_info fi = fixture_info(src);
    const char *path = wmt_tmp("prefix.gguf");
    wmt_copy_file(src, path);
    int fds = wmt_count_fds();
    open_prefix(path, fi.size, &fi, fds);
    for (uint64_t l = fi.size - 1; l > 16384; l -= 1 + l % 16381)
        open_prefix(path, l, &fi, fds);
    for (uint64_t l = 16385; l-- > 0;)
        open_prefix(path, l, &fi, fds);
}

/* ---- corrupted bytes ---- */

/* Every byte of the header in [from, upto) replaced in turn by each of a few values:
 * the open succeeds or fails with WM_EFORMAT (never a crash, an over-read under ASan, or
 * another status), and holds nothing afterwards. */
static void corrupt_sweep(const char *fixture, size_t from, size_t upto, const uint8_t *vals,
                          size_t n_vals) {
    const char *src = wmt_fixture(fixture);
    size_t len;
    unsigned char *bytes = wmt_read_file(src, &len);
    const char *path = wmt_tmp("corrupt.gguf");
    wmt_write_file(path, bytes, len);
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    int fds = wmt_count_fds();
    if (upto > len) upto = len;
    unsigned ok = 0, refused = 0;
    for (size_t pos = from; pos < upto; pos++) {
        for (size_t v = 0; v < n_vals; v++) {
            uint8_t b = vals[v] == 0x5a ? (uint8_t)(bytes[pos] ^ 0x80) : vals[v];
            if (b == bytes[pos]) continue;
            CHECK(pwrite(fd, &b, 1, (off_t)pos) == 1);
            wm_file *f = (wm_file *)(uintptr_t)1;
            wm_error err = {0};
            wm_status st = wm_file_open(path, &f, &err);
            CHECK_MSG(st == WM_OK || st == WM_EFORMAT, "byte %zu = 0x%02x: %s (%s)", pos, b,
                      wm_status_name(st), err.msg);
            if (st == WM_OK) {
                ok++;
                wm_file_close(f);
            } else {
                refused++;
                CHECK(f == NULL);
            }
            CHECK_LEDGER_EMPTY();
        }
        CHECK(pwrite(fd, &bytes[pos], 1, (off_t)pos) == 1);
    }
    close(fd);
    CHECK_EQ(wmt_count_fds(), fds - 1);
    fprintf(stderr, "%s: %u corrupted files opened, %u refused\n", fixture, ok, refused);
    CHECK(refused > 0);
    free(bytes);
}

static const uint8_t corrupt_vals[] = {0x00, 0xff, 0x5a /* flip the top bit */, 0x01};

WM_TEST(corrupt_ratchet_dummy) {
    corrupt_sweep("gguf/ratchet-dummy.gguf", 0, 1184, corrupt_vals, 4);
}
WM_TEST(corrupt_stories260K_v1) {
    corrupt_sweep("gguf/stories260K-v1.gguf", 0, 2048, corrupt_vals, 2);
}
WM_TEST(corrupt_stories260K_tensor_infos) {
    /* The tensor infos of stories260K: the last 2.6 KiB of its 14176-byte header. */
    const uint8_t vals[] = {0xff, 0x5a};
    corrupt_sweep("gguf/stories260K.gguf", 11500, 14176, vals, 2);
}

/* ---- faults ---- */

static void fault_sweep(const char *fixture) {
    char path[1024];
    snprintf(path, sizeof path, "%s", wmt_fixture(fixture));
    /* A failed madvise is harmless: that open succeeds. */
    uint64_t n = wmt_open_fault_sweep(path, path);
    CHECK(n >= 4); /* open, stat, reads, allocations */
}

WM_TEST(faults_stories260K) { fault_sweep("gguf/stories260K.gguf"); }
WM_TEST(faults_vocab_llama_bpe) { fault_sweep("gguf/ggml-vocab-llama-bpe.gguf"); }
WM_TEST(faults_ratchet_dummy) { fault_sweep("gguf/ratchet-dummy.gguf"); }
WM_TEST(faults_stories260K_v1) { fault_sweep("gguf/stories260K-v1.gguf"); }

/* Per kind: the k-th call of each kind fails, and the status is exactly the one for that kind. */
static void by_kind_check(void *user, const wmt_fault_run *r) {
    (void)user;
    wm_status want = r->kind == WM_OS_ALLOC || r->kind == WM_OS_PAGES ? WM_ENOMEM
                     : r->kind == WM_OS_ADVISE                        ? WM_OK
                                                                      : WM_EIO;
    CHECK_MSG(r->st == want, "%s call %llu: %s, want %s (%s)", wm__fault_call_name(r->kind),
              (unsigned long long)r->k, wm_status_name(r->st), wm_status_name(want), r->err->msg);
    if (r->st != WM_OK && r->kind != WM_OS_ALLOC && r->kind != WM_OS_PAGES)
        CHECK_EQ(r->err->os_errno, EIO);
}

WM_TEST(faults_by_kind) {
    char path[1024];
    snprintf(path, sizeof path, "%s", wmt_fixture("gguf/ggml-vocab-llama-spm.gguf"));
    wmt_sweep s = {
        .what = path, .run = wmt_open_close, .check = by_kind_check, .user = path, .path = path};
    wmt_sweep_result res = {0};
    wmt_sweep_count(&s, &res);
    CHECK(res.counts[WM_OS_OPEN] == 1 && res.counts[WM_OS_STAT] >= 1 &&
          res.counts[WM_OS_PREAD] >= 2);
    static const int eio[] = {EIO};
    for (int c = 0; c < WM_OS_CALL_COUNT; c++)
        wmt_sweep_kind(&s, (wm_os_call)c, res.counts[c], eio, 1, &res);
}

/* An interrupted read is retried: whichever read of an open is interrupted, the open succeeds. */
static wm_status open_count_close(void *path, wm_error *err) {
    wm_file *f = NULL;
    wm_status st = wm_file_open(path, &f, err);
    if (st != WM_OK) return st;
    CHECK_EQ(wm_file_tensor_count(f), 48);
    wm_file_close(f);
    return st;
}

static void eintr_check(void *user, const wmt_fault_run *r) {
    (void)user;
    CHECK_MSG(r->st == WM_OK, "EINTR at read %llu: %s", (unsigned long long)r->k, r->err->msg);
}

WM_TEST(eintr_retried) {
    char path[1024];
    snprintf(path, sizeof path, "%s", wmt_fixture("gguf/stories260K.gguf"));
    wmt_sweep s = {.what = path,
                   .run = open_count_close,
                   .check = eintr_check,
                   .user = path,
                   .path = path,
                   .must_hit = 1};
    wmt_sweep_result res = {0};
    wmt_sweep_count(&s, &res);
    CHECK(res.counts[WM_OS_PREAD] >= 2);
    static const int eintr[] = {EINTR};
    wmt_sweep_kind(&s, WM_OS_PREAD, res.counts[WM_OS_PREAD], eintr, 1, &res);
}

/* ---- the cost of an open ---- */

typedef struct open_cost {
    uint64_t reads, allocs, any;
} open_cost;

static open_cost cost_of_open(const char *fixture) {
    wm_file *f = NULL;
    wm__fault_reset();
    CHECK_STATUS(wm_file_open(wmt_fixture(fixture), &f, NULL), WM_OK);
    open_cost c = {wm__fault_count(WM_OS_PREAD), wm__fault_count(WM_OS_ALLOC),
                   wm__fault_count(WM_OS_ANY)};
    wm_file_close(f);
    wm__fault_reset();
    return c;
}

WM_TEST(open_cost_bounded) {
    /* 128,256 tokens, 7.8 MB: a bounded number of reads and allocations, not one per token. */
    open_cost big = cost_of_open("gguf/ggml-vocab-llama-bpe.gguf");
    fprintf(stderr, "ggml-vocab-llama-bpe: %llu reads, %llu allocations, %llu calls\n",
            (unsigned long long)big.reads, (unsigned long long)big.allocs,
            (unsigned long long)big.any);
    CHECK_MSG(big.reads <= 8, "%llu reads", (unsigned long long)big.reads);
    CHECK_MSG(big.allocs <= 16, "%llu allocations", (unsigned long long)big.allocs);
    /* 32,000 tokens and 512 tokens cost no fewer calls of either kind than 4x and 250x fewer
     * tokens would suggest: the count depends on the header size in 8x steps, not the tokens. */
    open_cost spm = cost_of_open("gguf/ggml-vocab-llama-spm.gguf");
    open_cost small = cost_of_open("gguf/stories260K.gguf");
    CHECK(big.allocs <= spm.allocs + 2 && spm.allocs <= small.allocs + 2);
    CHECK(big.reads <= spm.reads + 2 && spm.reads <= small.reads + 2);
}
