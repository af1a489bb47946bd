/* A llama.cpp program that loads through the installed bridge (weightmap-llama.pc,
 * weightmap::llama): ggml's backends by the bridge's one call, the model by wm_llama_load in
 * place of llama_model_load_from_file, freed by llama_model_free; weightmap's ledger is empty
 * after. Usage: consumer_llama MODEL.gguf */
#include <llama.h>
#include <stdio.h>
#include <weightmap_llama.h>

static void quiet(enum ggml_log_level level, const char *text, void *ud) {
    (void)level, (void)text, (void)ud;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    wm_error err;
    llama_log_set(quiet, NULL);
    if (wm_llama_backends_load(NULL, &err) != WM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    llama_backend_init();
    struct llama_model_params p = llama_model_default_params();
    struct llama_model *model;
    if (wm_llama_load(argv[1], &p, NULL, &model, &err) != WM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("llama: %d layers\n", llama_model_n_layer(model));
    llama_model_free(model);
    llama_backend_free();
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    return wm_ledger_bytes(&l) == 0 ? 0 : 1;
}
