/* A program that uses an installed weightmap: built against pkg-config and find_package. */
#include <stdio.h>
#include <weightmap.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    wm_file *f;
    wm_error err;
    if (wm_file_open(argv[1], &f, &err) != WM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("%s %zu tensors\n", wm_version(), wm_file_tensor_count(f));
    wm_load_options o = {.mode = WM_MODE_MMAP};
    wm_model *m;
    if (wm_model_load(f, &o, &m, &err) != WM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        wm_file_close(f);
        return 1;
    }
    wm_model_release(m);
    wm_file_close(f);
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    return wm_ledger_bytes(&l) == 0 ? 0 : 1;
}
