/*
 * fuzz_gguf.c: libFuzzer harness wm_fuzz_gguf. The input is a GGUF file: written to a memfd,
 * opened through wm_file_open (which dispatches by content, so inputs that look like safetensors
 * reach that reader too), walked through every getter, closed. An input that holds the key
 * "split.count" is also opened as part 1 of a two-part split set, "x-00001-of-00002.gguf" in a
 * private folder whose part 2 is a small valid part (split.no 1, split.count 2, no tensors),
 * through wm_file_open_set (the whole set of a part) and as the list of the two parts
 * (wm_file_open_paths).
 * Fails on any sanitizer report, on an open that succeeds with inconsistent answers or fails
 * without saying why, and when the ledger is not empty afterwards (also with one OS call or
 * allocation failed, see wmf_with_faults).
 */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void open_walk_close(const char *path) { wmf_open_walk_close(path); }

static void run_path(void *path) { open_walk_close(path); }

static void run_set_path(void *path) { wmf_open_set_walk_close(path); }

/* The two parts as a list (wm_file_open_paths): the input first, the valid part 2 after it. */
static wm_status open_parts(const char *path, wm_file **out, wm_error *err) {
    char part2[400];
    snprintf(part2, sizeof part2, "%s/x-00002-of-00002.gguf", wmf_dir());
    const char *list[2] = {path, part2};
    return wm_file_open_paths(list, 2, out, err);
}

static void run_list(void *path) { wmf_open_with_walk_close(open_parts, path); }

/* Part 2 of the split set: GGUF v3, no tensors, split.no = 1 and split.count = 2 (u16). */
static void put_part2(void) {
    unsigned char b[96] = {0};
    size_t n = 0;
#define PUT(p, len) (memcpy(b + n, (p), (len)), n += (len))
    uint32_t v3 = 3, t_u16 = 2;
    uint64_t zero = 0, two = 2, l_no = 8, l_count = 11;
    uint16_t one16 = 1, two16 = 2;
    PUT("GGUF", 4);
    PUT(&v3, 4);
    PUT(&zero, 8);
    PUT(&two, 8);
    PUT(&l_no, 8);
    PUT("split.no", 8);
    PUT(&t_u16, 4);
    PUT(&one16, 2);
    PUT(&l_count, 8);
    PUT("split.count", 11);
    PUT(&t_u16, 4);
    PUT(&two16, 2);
#undef PUT
    n = (n + 31) / 32 * 32;
    wmf_put_file("x-00002-of-00002.gguf", b, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = wmf_memfd(data, size, path, sizeof path);
    wmf_with_faults(run_path, path, data, size);
    close(fd);
    if (memmem(data, size, "split.count", 11)) {
        static int ready;
        if (!ready) {
            put_part2();
            ready = 1;
        }
        char part1[400];
        snprintf(part1, sizeof part1, "%s", wmf_put_file("x-00001-of-00002.gguf", data, size));
        wmf_with_faults(run_set_path, part1, data, size);
        wmf_with_faults(run_list, part1, data, size);
    }
    return 0;
}
