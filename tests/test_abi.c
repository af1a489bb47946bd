/*
 * test_abi.c: the binary interface's promise (include/weightmap.h, "the ABI promise"). A caller
 * built with an older, shorter struct still loads and reads its figures; the library reads and
 * writes only the `size` bytes the caller says it has (the bytes past them are filled with a
 * pattern that would be refused or would show if they were touched); a newer, longer struct is
 * accepted only when the fields this library does not know are zero. The version number and
 * the one backend-spec parser.
 */
#include "wmtest.h"

#include <string.h>

#define STORIES "gguf/stories260K.gguf"
#define JUNK 0xA5

/* A caller's struct of `size` bytes in a buffer of `room`, the rest JUNK: what a caller built
 * against an older header hands over, followed by whatever memory lies after it. */
static unsigned char *caller_struct(size_t room, uint32_t size) {
    unsigned char *b = malloc(room);
    CHECK(b != NULL);
    memset(b, JUNK, room);
    memset(b, 0, size);
    memcpy(b, &size, sizeof size);
    return b;
}

static void load_release(const unsigned char *opts) {
    wm_file *f = OPEN_OK(wmt_fixture(STORIES));
    wm_model *m = NULL;
    wm_error err;
    wm_status st = wm_model_load(f, (const wm_load_options *)(const void *)opts, &m, &err);
    CHECK_MSG(st == WM_OK, "load: %s", err.msg);
    CHECK(wm_model_tensor_data(m, 0) != NULL);
    wm_model_release(m);
    wm_file_close(f);
}

/* The shortest useful options: size and mode. Past them JUNK, which as `lock` (0xA5A5A5A5) or
 * `threads` would be refused, so the load passes only if the library stops at `size`. */
WM_TEST(older_shorter_options_still_load) {
    uint32_t sizes[] = {(uint32_t)(offsetof(wm_load_options, mode) + sizeof(wm_mode)),
                        (uint32_t)offsetof(wm_load_options, max_buffer_size),
                        (uint32_t)offsetof(wm_load_options, cuda)};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        unsigned char *b = caller_struct(sizeof(wm_load_options), sizes[k]);
        wm_mode mode = WM_MODE_MMAP;
        memcpy(b + offsetof(wm_load_options, mode), &mode, sizeof mode);
        load_release(b);
        free(b);
    }
    CHECK_LEDGER_EMPTY();
}

/* Size 0 is the 1.0 struct: `{.mode = ...}` written against 1.0 stays valid. */
WM_TEST(zero_size_is_the_first_struct) {
    wm_load_options o = {.mode = WM_MODE_HEAP, .threads = 2};
    load_release((const unsigned char *)&o);
    wm_load_options tiny = {.size = 2, .mode = WM_MODE_HEAP};
    wm_file *f = OPEN_OK(wmt_fixture(STORIES));
    wm_model *m;
    wm_error err;
    CHECK_STATUS(wm_model_load(f, &tiny, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "smaller than its size field");
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
}

/* A newer header's longer struct: zeros past the library's size load; a set byte there is
 * refused, naming the size and the byte, not ignored. */
WM_TEST(newer_longer_options) {
    size_t lib = sizeof(wm_load_options), room = lib + 24;
    unsigned char *b = caller_struct(room, (uint32_t)room);
    wm_mode mode = WM_MODE_MMAP_PRIVATE;
    memcpy(b + offsetof(wm_load_options, mode), &mode, sizeof mode);
    load_release(b);
    b[lib + 9] = 1;
    wm_file *f = OPEN_OK(wmt_fixture(STORIES));
    wm_model *m = (wm_model *)b;
    wm_error err;
    CHECK_STATUS(wm_model_load(f, (const wm_load_options *)(const void *)b, &m, &err), WM_EINVAL);
    CHECK(m == NULL);
    char want[64];
    snprintf(want, sizeof want, "at byte %zu", lib + 9);
    CHECK_MSG_HAS(err, want);
    CHECK_MSG_HAS(err, "wm_load_options");
    wm_file_close(f);
    free(b);
    CHECK_LEDGER_EMPTY();
}

/* The CUDA options struct follows the same promise, and belongs to the CUDA backend only. */
WM_TEST(cuda_options_are_the_cuda_backends) {
    wm_file *f = OPEN_OK(wmt_fixture(STORIES));
    wm_model *m;
    wm_error err;
    wm_cuda_options cu = WM_CUDA_OPTIONS_INIT;
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = WM_MODE_MMAP;
    o.cuda = &cu;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "CUDA options (opts.cuda) given for the cpu backend");
    unsigned char *b = caller_struct(sizeof cu + 8, (uint32_t)(sizeof cu + 8));
    b[sizeof cu + 3] = 7;
    o.backend = WM_BACKEND_CUDA;
    o.cuda = (const wm_cuda_options *)(const void *)b;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "wm_cuda_options");
    free(b);
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
}

/* Results: the library writes only as far as the caller's size, and leaves size as it was. */
WM_TEST(results_written_only_as_far_as_size) {
    uint32_t lsize = (uint32_t)offsetof(wm_ledger, cat[1]);
    unsigned char *lb = caller_struct(sizeof(wm_ledger), lsize);
    wm_file *f = OPEN_OK(wmt_fixture(STORIES));
    wm_ledger_get((wm_ledger *)(void *)lb);
    uint32_t seen;
    memcpy(&seen, lb, sizeof seen);
    CHECK_EQ(seen, lsize);
    wm_ledger_stat heap;
    memcpy(&heap, lb + offsetof(wm_ledger, cat[0]), sizeof heap);
    CHECK(heap.current > 0); /* the open file's table */
    for (size_t k = lsize; k < sizeof(wm_ledger); k++)
        CHECK_MSG(lb[k] == JUNK, "ledger byte %zu written past size %u", k, lsize);
    free(lb);

    wm_load_options o = {.size = sizeof o, .mode = WM_MODE_HEAP};
    wm_model *m;
    wm_error err;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_OK);
    uint32_t ssize = (uint32_t)offsetof(wm_model_stats, mapped_bytes);
    unsigned char *sb = caller_struct(sizeof(wm_model_stats), ssize);
    wm_model_stats_get(m, (wm_model_stats *)(void *)sb);
    uint64_t tensor_bytes;
    memcpy(&tensor_bytes, sb + offsetof(wm_model_stats, tensor_bytes), sizeof tensor_bytes);
    CHECK_EQ(tensor_bytes, wm_file_tensor_bytes(f));
    for (size_t k = ssize; k < sizeof(wm_model_stats); k++)
        CHECK_MSG(sb[k] == JUNK, "stats byte %zu written past size %u", k, ssize);
    free(sb);
    wm_model_stats full = WM_MODEL_STATS_INIT;
    wm_model_stats_get(m, &full);
    CHECK_EQ(full.size, sizeof full);
    CHECK_EQ(full.heap_bytes >= full.tensor_bytes, 1);
    wm_model_release(m);
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
}

WM_TEST(version_number) {
    CHECK_EQ(wm_version_number(), WM_VERSION_NUMBER);
    char s[32];
    snprintf(s, sizeof s, "%u.%u.%u", wm_version_number() / 1000000,
             wm_version_number() / 1000 % 1000, wm_version_number() % 1000);
    CHECK_MSG(strcmp(s, wm_version()) == 0, "%s vs %s", s, wm_version());
}

static void spec_ok(const char *spec, wm_backend_kind kind, unsigned n, const int *want) {
    wm_backend_kind k = (wm_backend_kind)99;
    int devs[WM_LEDGER_DEVICES];
    unsigned got = 99;
    wm_error err;
    wm_status st = wm_backend_from_name(spec, &k, devs, WM_LEDGER_DEVICES, &got, &err);
    CHECK_MSG(st == WM_OK, "%s: %s", spec, err.msg);
    CHECK_EQ(k, kind);
    CHECK_EQ(got, n);
    for (unsigned i = 0; i < n; i++)
        CHECK_EQ(devs[i], want[i]);
    CHECK_MSG(strcmp(wm_backend_name(k), spec) == 0 || strncmp(spec, "cuda", 4) == 0, "%s", spec);
}

static void spec_bad(const char *spec, unsigned room, const char *needle) {
    wm_backend_kind k = (wm_backend_kind)99;
    int devs[WM_LEDGER_DEVICES];
    unsigned n = 99;
    wm_error err;
    CHECK_STATUS(wm_backend_from_name(spec, &k, devs, room, &n, &err), WM_EINVAL);
    CHECK_MSG(k == 99 && n == 99, "%s: out-parameters written on failure", spec);
    CHECK_MSG_HAS(err, needle);
}

WM_TEST(backend_from_name) {
    spec_ok("cpu", WM_BACKEND_CPU, 0, NULL);
    spec_ok("cuda", WM_BACKEND_CUDA, 1, (const int[]){0});
    spec_ok("cuda:3", WM_BACKEND_CUDA, 1, (const int[]){3});
    spec_ok("cuda:1,0,15", WM_BACKEND_CUDA, 3, (const int[]){1, 0, 15});
    spec_bad("gpu", WM_LEDGER_DEVICES, "unknown backend 'gpu'");
    spec_bad("cudax", WM_LEDGER_DEVICES, "unknown backend");
    spec_bad("cuda:", WM_LEDGER_DEVICES, "expected a device number");
    spec_bad("cuda:1,", WM_LEDGER_DEVICES, "expected a device number");
    spec_bad("cuda:-1", WM_LEDGER_DEVICES, "expected a device number");
    spec_bad("cuda:16", WM_LEDGER_DEVICES, "0..15");
    spec_bad("cuda:99999999999999999999", WM_LEDGER_DEVICES, "0..15");
    spec_bad("cuda:1,1", WM_LEDGER_DEVICES, "listed twice");
    spec_bad("cuda:1x", WM_LEDGER_DEVICES, "unexpected 'x'");
    spec_bad("cuda:0,1", 1, "more than 1 devices");
    CHECK_EQ(wm_backend_from_name(NULL, NULL, NULL, 0, NULL, NULL), WM_EINVAL);
    CHECK(wm_backend_name((wm_backend_kind)7) == NULL);
    CHECK(strcmp(wm_backend_name(WM_BACKEND_CUDA), "cuda") == 0);
}
