/*
 * fuzz_safetensors.c: libFuzzer harness wm_fuzz_safetensors. The input is written as
 * "in.safetensors" in a private temporary folder, so the name routes it to the safetensors
 * reader whatever its first bytes (only a "GGUF" magic takes it elsewhere); opened, walked
 * through every getter, closed; the ledger must be empty afterwards (also with one OS call or
 * allocation failed, see wmf_with_faults).
 */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void run_path(void *path) { wmf_open_walk_close(path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[400];
    snprintf(path, sizeof path, "%s", wmf_put_file("in.safetensors", data, size));
    wmf_with_faults(run_path, path, data, size);
    return 0;
}
