/*
 * fuzz_gguf.c: libFuzzer harness wm_fuzz_gguf. The input is a GGUF file: written to a memfd,
 * opened through wm_file_open (which dispatches by content, so inputs that look like safetensors
 * reach that reader too), walked through every getter, closed. Fails on any sanitizer report, on
 * an open that succeeds with inconsistent answers, and when the ledger is not empty afterwards.
 */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = wmf_memfd(data, size, path, sizeof path);
    wm_file *f = NULL;
    wm_error err;
    wm_status st = wm_file_open(path, &f, &err);
    if (st == WM_OK) {
        wmf_walk_file(f);
        wm_file_close(f);
    } else if (f != NULL || err.code != st || err.msg[0] == '\0') {
        fprintf(stderr, "failed open left out=%p, err.code %d for status %d, msg '%s'\n",
                (void *)f, err.code, st, err.msg);
        abort();
    }
    close(fd);
    wmf_check_ledger_empty("wm_file_open/wm_file_close");
    return 0;
}
