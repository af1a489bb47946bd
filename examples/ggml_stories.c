/*
 * ggml_stories.c: a ggml program whose loader is weightmap (include/weightmap_ggml.h,
 * docs/GGML.md). It loads a llama GGUF (stories260K) through the bridge, runs the model's
 * forward pass for the first token (BOS) on ggml's CPU backend, prints the likeliest next
 * tokens, frees everything and shows that the ledger is back to zero.
 *
 * At position 0 attention is exact without a cache: RoPE is the identity and the softmax over
 * one key is 1, so each head's output is its value vector. Each layer is then
 *     h = x + Wo (repeat_kv (Wv rms(x) * attn_norm))
 *     x = h + Wdown (silu (Wgate n) * (Wup n)),   n = rms(h) * ffn_norm
 * and the logits are Wout (rms(x) * output_norm).
 *
 *     ggml_stories MODEL.gguf GGML_BACKEND_DIR [heap|mmap|mmap-private]
 *
 * GGML_BACKEND_DIR holds ggml's CPU backend libraries (libggml-cpu-*.so: scripts/ggml.sh).
 */
#include "weightmap_ggml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct hparams {
    uint32_t n_embd, n_layer, n_head, n_head_kv, bos;
    float eps;
} hparams;

static int read_hparams(const wm_file *f, hparams *hp) {
    double eps = 0;
    if (wm_file_get_u32(f, "llama.embedding_length", &hp->n_embd) ||
        wm_file_get_u32(f, "llama.block_count", &hp->n_layer) ||
        wm_file_get_u32(f, "llama.attention.head_count", &hp->n_head) ||
        wm_file_get_u32(f, "llama.attention.head_count_kv", &hp->n_head_kv) ||
        wm_file_get_f64(f, "llama.attention.layer_norm_rms_epsilon", &eps))
        return 1;
    if (wm_file_get_u32(f, "tokenizer.ggml.bos_token_id", &hp->bos)) hp->bos = 1;
    hp->eps = (float)eps;
    return !hp->n_head_kv || hp->n_head % hp->n_head_kv;
}

/* A weight by name (the bridge's context is ggml's, so ggml_get_tensor finds it). */
static struct ggml_tensor *w(const wm_ggml *g, const char *fmt, int layer) {
    char name[GGML_MAX_NAME];
    snprintf(name, sizeof name, fmt, layer);
    struct ggml_tensor *t = ggml_get_tensor(wm_ggml_context(g), name);
    if (!t) fprintf(stderr, "ggml_stories: the model has no tensor %s\n", name);
    return t;
}

static struct ggml_tensor *norm(struct ggml_context *c, struct ggml_tensor *x,
                                struct ggml_tensor *weight, float eps) {
    return ggml_mul(c, ggml_rms_norm(c, x, eps), weight);
}

/* The graph of the forward pass of token `tok` at position 0: the logits. */
static struct ggml_tensor *forward(struct ggml_context *c, const wm_ggml *g, const hparams *hp,
                                   struct ggml_tensor *tok) {
    struct ggml_tensor *x = ggml_get_rows(c, w(g, "token_embd.weight", 0), tok);
    uint32_t head_dim = hp->n_embd / hp->n_head, group = hp->n_head / hp->n_head_kv;
    for (int l = 0; l < (int)hp->n_layer; l++) {
        struct ggml_tensor *n = norm(c, x, w(g, "blk.%d.attn_norm.weight", l), hp->eps);
        struct ggml_tensor *v = ggml_mul_mat(c, w(g, "blk.%d.attn_v.weight", l), n);
        /* every query head of a group takes its kv head's value */
        v = ggml_reshape_3d(c, v, head_dim, 1, hp->n_head_kv);
        v = ggml_repeat(c, v, ggml_new_tensor_3d(c, GGML_TYPE_F32, head_dim, group, hp->n_head_kv));
        v = ggml_reshape_2d(c, ggml_cont(c, v), hp->n_embd, 1);
        x = ggml_add(c, x, ggml_mul_mat(c, w(g, "blk.%d.attn_output.weight", l), v));
        n = norm(c, x, w(g, "blk.%d.ffn_norm.weight", l), hp->eps);
        struct ggml_tensor *gate =
            ggml_silu(c, ggml_mul_mat(c, w(g, "blk.%d.ffn_gate.weight", l), n));
        struct ggml_tensor *up = ggml_mul_mat(c, w(g, "blk.%d.ffn_up.weight", l), n);
        x = ggml_add(c, x,
                     ggml_mul_mat(c, w(g, "blk.%d.ffn_down.weight", l), ggml_mul(c, gate, up)));
    }
    x = norm(c, x, w(g, "output_norm.weight", 0), hp->eps);
    return ggml_mul_mat(c, w(g, "output.weight", 0), x);
}

/* Prints the 5 likeliest tokens of `logits` with their text from the vocabulary. */
static void print_top(const wm_file *f, const float *logits, int n_vocab) {
    size_t vocab;
    int have_vocab = wm_file_find_metadata(f, "tokenizer.ggml.tokens", &vocab) == WM_OK;
    int top[5] = {-1, -1, -1, -1, -1};
    for (int i = 0; i < n_vocab; i++)
        for (int k = 0; k < 5; k++)
            if (top[k] < 0 || logits[i] > logits[top[k]]) {
                memmove(top + k + 1, top + k, (size_t)(4 - k) * sizeof *top);
                top[k] = i;
                break;
            }
    printf("likeliest tokens after BOS:");
    for (int k = 0; k < 5; k++) {
        wm_string s = {"?", 1};
        if (have_vocab) wm_file_array_string(f, vocab, (uint64_t)top[k], &s);
        printf(" %d '%.*s' (%.3f)", top[k], (int)s.len, s.ptr, logits[top[k]]);
    }
    printf("\n");
}

/* Loads, computes, frees; 0 on success. */
static int run(wm_file *f, wm_mode mode, ggml_backend_t be) {
    hparams hp;
    if (read_hparams(f, &hp)) {
        fprintf(stderr, "ggml_stories: %s is not a llama model\n", wm_file_path(f));
        return 1;
    }
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = mode;
    wm_ggml *g;
    wm_error err;
    if (wm_ggml_load(f, &o, NULL, &g, &err) != WM_OK) {
        fprintf(stderr, "ggml_stories: %s\n", err.msg);
        return 1;
    }
    printf("%s: mode %s, %zu tensors in %zu ggml buffer(s)\n", wm_file_path(f), wm_mode_name(mode),
           wm_file_tensor_count(f), wm_ggml_n_buffers(g));
    struct ggml_init_params ip = {
        .mem_size = 16 * 1024 * 1024, .mem_buffer = NULL, .no_alloc = false};
    struct ggml_context *c = ggml_init(ip);
    int rc = 1;
    if (c) {
        struct ggml_tensor *tok = ggml_new_tensor_1d(c, GGML_TYPE_I32, 1);
        ((int32_t *)tok->data)[0] = (int32_t)hp.bos;
        struct ggml_tensor *logits = forward(c, g, &hp, tok);
        struct ggml_cgraph *gf = ggml_new_graph(c);
        ggml_build_forward_expand(gf, logits);
        if (ggml_backend_graph_compute(be, gf) == GGML_STATUS_SUCCESS) {
            print_top(f, (const float *)logits->data, (int)logits->ne[0]);
            rc = 0;
        }
        ggml_free(c);
    }
    wm_ggml_free(g); /* buffers, context, then the model: every mapping and page returned */
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr,
                "usage: ggml_stories MODEL.gguf GGML_BACKEND_DIR [heap|mmap|mmap-private]\n");
        return 2;
    }
    wm_mode mode = argc > 3 ? wm_mode_from_name(argv[3]) : WM_MODE_MMAP;
    if (mode == WM_MODE_NONE) {
        fprintf(stderr, "ggml_stories: unknown mode %s\n", argv[3]);
        return 2;
    }
    ggml_backend_load_all_from_path(argv[2]);
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_t be = dev ? ggml_backend_dev_init(dev, NULL) : NULL;
    if (!be) {
        fprintf(stderr, "ggml_stories: no ggml CPU backend in %s\n", argv[2]);
        return 1;
    }
    wm_file *f;
    wm_error err;
    int rc = 1;
    if (wm_file_open(argv[1], &f, &err) == WM_OK) {
        rc = run(f, mode, be);
        wm_file_close(f);
    } else
        fprintf(stderr, "ggml_stories: %s\n", err.msg);
    ggml_backend_free(be);
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    printf("ledger after free: %llu bytes in %llu regions: %s\n",
           (unsigned long long)wm_ledger_bytes(&l), (unsigned long long)wm_ledger_regions(&l),
           wm_ledger_bytes(&l) || wm_ledger_regions(&l) ? "MEMORY NOT RETURNED"
                                                        : "all memory returned");
    return rc || wm_ledger_bytes(&l) || wm_ledger_regions(&l);
}
