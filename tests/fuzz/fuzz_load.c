/*
 * fuzz_load.c: libFuzzer harness wm_fuzz_load, the whole path. The input is a file (a memfd,
 * opened as /proc/self/fd/N) taken through wm_file_open, then wm_model_load in every mode (heap,
 * mmap, mmap-private, and heap again with every tensor converted to f32 where a conversion
 * exists), every byte of every tensor read, wm_model_release, wm_file_close. The ledger must read
 * zero after each release (but for the open file's own header bytes) and zero at the end: a leak
 * is a crash. The thread count alternates between 1 and 2 with the input's length so that both
 * the inline and the worker paths are fuzzed. Each input runs again with one OS call or allocation
 * failed (see wmf_with_faults).
 */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads every byte of every tensor (and writes one where the mode allows). */
static void touch_all(wm_model *m) {
    const wm_file *f = wm_model_file(m);
    size_t n = wm_file_tensor_count(f);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        wm_type type;
        uint64_t nbytes = 0;
        if (wm_model_tensor_info(m, i, &type, &nbytes) != WM_OK) abort();
        const unsigned char *p = wm_model_tensor_data(m, i);
        if (!p && nbytes) abort();
        for (uint64_t k = 0; k < nbytes; k++)
            sum += p[k];
        unsigned char *w = wm_model_tensor_data_mut(m, i);
        if (w && nbytes) w[nbytes - 1] ^= 1;
    }
    if (wm_model_tensor_data(m, n) != NULL) abort();
    wmf_sink += sum;
}

/* The ledger holds exactly what it held before the load (the open file's bytes). */
static void check_back_to(const wm_ledger *before, const char *where) {
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    for (int k = 0; k < WM_LEDGER_COUNT; k++) {
        if (l.cat[k].current == before->cat[k].current &&
            l.cat[k].regions == before->cat[k].regions)
            continue;
        fprintf(stderr,
                "weightmap fuzz: after %s, ledger %s holds %llu bytes in %llu regions, "
                "before the load %llu in %llu\n",
                where, wm_ledger_category_name((wm_ledger_category)k),
                (unsigned long long)l.cat[k].current, (unsigned long long)l.cat[k].regions,
                (unsigned long long)before->cat[k].current,
                (unsigned long long)before->cat[k].regions);
        abort();
    }
}

typedef struct input {
    const char *path;
    size_t size;
} input;

static void run_input(void *p) {
    const input *in = p;
    wm_file *f = NULL;
    wm_error err;
    wm_status st = wm_file_open(in->path, &f, &err);
    if (st == WM_OK) {
        wm_ledger before = WM_LEDGER_INIT;
        wm_ledger_get(&before);
        static const wm_convert_rule to_f32 = {NULL, WM_TYPE_INVALID, WM_TYPE_F32};
        for (int k = 0; k < 4; k++) {
            wm_load_options o = {.mode = k == 3 ? WM_MODE_HEAP : (wm_mode)(k + 1),
                                 .threads = 1 + (unsigned)(in->size & 1)};
            if (k == 3) {
                o.convert = &to_f32;
                o.n_convert = 1;
            }
            wm_model *m = NULL;
            st = wm_model_load(f, &o, &m, &err);
            if (st == WM_OK) {
                if (wm_model_mode(m) != o.mode) abort();
                touch_all(m);
                wm_model_release(m);
            } else if (m != NULL || err.code != st || err.msg[0] == '\0') {
                abort();
            }
            check_back_to(&before, wm_mode_name(o.mode));
        }
        wm_file_close(f);
    } else if (f != NULL || err.code != st || err.msg[0] == '\0') {
        abort();
    }
    wmf_check_ledger_empty("load/release/close");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = wmf_memfd(data, size, path, sizeof path);
    input in = {path, size};
    wmf_with_faults(run_input, &in, data, size);
    close(fd);
    return 0;
}
