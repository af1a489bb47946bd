/* A ggml program that takes its weights through the installed bridge (weightmap-ggml.pc,
 * weightmap::ggml): ggml's backends by the bridge's one call, a context of the file's tensors on
 * the CPU device, freed in one call; weightmap's ledger is empty after.
 * Usage: consumer_ggml MODEL.gguf */
#include <ggml-backend.h>
#include <stdio.h>
#include <weightmap_ggml.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    wm_error err;
    if (wm_ggml_backends_load(NULL, &err) != WM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    wm_file *f;
    if (wm_file_open(argv[1], &f, &err) != WM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    wm_load_options o = {.mode = WM_MODE_MMAP};
    wm_ggml *g;
    wm_status st = wm_ggml_load(f, &o, NULL, &g, &err);
    wm_file_close(f);
    if (st != WM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("ggml: %s, %zu buffers, CPU device %s\n", ggml_get_name(wm_ggml_tensor(g, 0)),
           wm_ggml_n_buffers(g),
           ggml_backend_dev_name(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU)));
    wm_ggml_free(g);
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    return wm_ledger_bytes(&l) == 0 ? 0 : 1;
}
