/*
 * llama_place.c: where the llama.cpp bridge sends the weights (llama_bridge.h). Public API only,
 * of weightmap, llama.cpp and ggml (llama.h, ggml-backend.h).
 *
 * llama_model_init_from_user turns params.use_extra_bufts off. Where the caller's params leave
 * it on and the model runs on the CPU, each matrix weight goes back to the first of the CPU
 * device's extra buffer types that takes its matrix product (llama.cpp's own rule for a weight
 * used by GGML_OP_MUL_MAT), through a tensor_buft_override per buffer type whose pattern names
 * exactly those tensors. */
#include "llama_bridge.h"

#include <stdio.h>
#include <string.h>

void wm__llama_cpu_extras(extras *x) {
    memset(x, 0, sizeof *x);
    x->cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!x->cpu) return;
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(x->cpu);
    void *sym =
        reg ? ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts") : NULL;
    ggml_backend_dev_get_extra_bufts_t get = NULL;
    if (sym) memcpy(&get, &sym, sizeof get); /* a proc address is a function's */
    ggml_backend_buffer_type_t *list = get ? get(x->cpu) : NULL;
    for (; list && *list && x->n < MAX_EXTRA; list++)
        x->buft[x->n++] = *list;
}

bool wm__llama_is_extra(const extras *x, ggml_backend_buffer_type_t buft) {
    for (size_t k = 0; k < x->n; k++)
        if (x->buft[k] == buft) return true;
    return false;
}

size_t wm__llama_model_devices(const struct llama_model_params *p, ggml_backend_dev_t *list,
                               size_t cap) {
    size_t n = 0;
    if (p->devices) {
        for (ggml_backend_dev_t *d = p->devices; *d && n < cap; d++)
            list[n++] = *d;
    } else {
        enum ggml_backend_dev_type want = GGML_BACKEND_DEVICE_TYPE_GPU;
        for (int pass = 0; pass < 2 && n == 0; pass++, want = GGML_BACKEND_DEVICE_TYPE_IGPU)
            for (size_t i = 0; i < ggml_backend_dev_count() && n < cap; i++)
                if (ggml_backend_dev_type(ggml_backend_dev_get(i)) == want)
                    list[n++] = ggml_backend_dev_get(i);
    }
    if (p->split_mode == LLAMA_SPLIT_MODE_NONE && n) {
        if (p->main_gpu < 0 || (size_t)p->main_gpu >= n)
            n = 0; /* llama.cpp refuses the latter */
        else
            list[0] = list[p->main_gpu], n = 1;
    }
    return n;
}

/* Whether the model's layers stay on the CPU: no layer offloaded, or no GPU among its devices. */
bool wm__llama_runs_on_cpu(const struct llama_model_params *p) {
    if (p->n_gpu_layers == 0) return true;
    ggml_backend_dev_t list[64];
    size_t n = wm__llama_model_devices(p, list, 64);
    for (size_t k = 0; k < n; k++) {
        enum ggml_backend_dev_type t = ggml_backend_dev_type(list[k]);
        if (t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU) return false;
    }
    return true;
}

/* ---- the layers kept on the CPU with layers on a GPU (llama-model.cpp load_tensors) ----
 * The repeating layers il < i_gpu_start = max(block_count + 1 - n_gpu_layers, 0) and the input
 * layer stay on the CPU; the output layer goes to a GPU from one offloaded layer on. */

int wm__llama_cpu_layers(const wm_file *f, const struct llama_model_params *p) {
    wm_string arch;
    char key[128];
    uint32_t blocks;
    if (wm_file_get_string(f, "general.architecture", &arch) != WM_OK || arch.len > 64) return -1;
    snprintf(key, sizeof key, "%.*s.block_count", (int)arch.len, arch.ptr);
    if (wm_file_get_u32(f, key, &blocks) != WM_OK || blocks == 0 || blocks > 100000) return -1;
    int64_t all = (int64_t)blocks, gpu = p->n_gpu_layers >= 0 ? p->n_gpu_layers : all + 1;
    int64_t start = all + 1 - gpu;
    return start < 0 ? 0 : (int)start;
}

/* llama.cpp's input-layer tensors (LLM_TENSOR_LAYER_INPUT in llama-arch.cpp's table). */
static const char *const input_layer[] = {
    "token_embd",           "position_embd",         "token_types",
    "per_layer_token_embd", "masked_embd_centroids", "masked_embd_ordering"};
#define N_INPUT (sizeof input_layer / sizeof *input_layer)

bool wm__llama_host_tensor(const char *name, int cpu_layers) {
    if (strncmp(name, "blk.", 4) == 0) {
        const char *d = name + 4;
        long n = 0;
        while (*d >= '0' && *d <= '9' && n < 1000000)
            n = n * 10 + (*d++ - '0');
        return d > name + 4 && *d == '.' && (d - name == 5 || name[4] != '0') && n < cpu_layers;
    }
    for (size_t k = 0; k < N_INPUT; k++) {
        size_t m = strlen(input_layer[k]);
        if (strncmp(name, input_layer[k], m) == 0 && name[m] == '.') return true;
    }
    return false;
}

/* Appends to out an alternation (no group) that matches the decimal numbers 0 to k - 1 as
 * llama.cpp writes layer numbers (no leading zero), k >= 1: each digit position of k - 1 below its
 * digit with any digits after, the shorter lengths whole, then k - 1 itself. */
size_t wm__llama_below_pattern(unsigned k, char *out) {
    char m[16], *o = out;
    int n = snprintf(m, sizeof m, "%u", k - 1);
    for (int len = 1; len < n; len++) { /* every number shorter than k - 1 */
        o += sprintf(o, "%s%s", o == out ? "" : "|", len == 1 ? "[0-9]" : "[1-9]");
        for (int r = 1; r < len; r++)
            o += sprintf(o, "[0-9]");
    }
    for (int i = 0; i < n; i++) { /* k - 1's length: a smaller digit at position i */
        int lo = i == 0 && n > 1 ? 1 : 0, hi = m[i] - '0' - 1;
        if (hi < lo) continue;
        o += sprintf(o, "%s%.*s[%d-%d]", o == out ? "" : "|", i, m, lo, hi);
        for (int r = i + 1; r < n; r++)
            o += sprintf(o, "[0-9]");
    }
    o += sprintf(o, "%s%s", o == out ? "" : "|", m);
    return (size_t)(o - out);
}

bool wm__llama_ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && memcmp(s + n - m, tail, m) == 0;
}

/* The weights llama.cpp multiplies by (GGML_OP_MUL_MAT in its tensor table) in llama-family
 * models: the output head and each layer's attention and feed-forward matrices. */
static bool matmul_weight(const wm_tensor_info *ti, const char *name) {
    static const char *const layer[] = {
        ".attn_q.weight",      ".attn_k.weight",   ".attn_v.weight", ".attn_qkv.weight",
        ".attn_output.weight", ".ffn_gate.weight", ".ffn_up.weight", ".ffn_down.weight"};
    if (ti->n_dims != 2) return false;
    if (strcmp(name, "output.weight") == 0) return true;
    if (strncmp(name, "blk.", 4) != 0) return false;
    for (size_t k = 0; k < sizeof layer / sizeof *layer; k++)
        if (wm__llama_ends_with(name, layer[k])) return true;
    return false;
}

/* Whether buffer type `buft` of the CPU device takes a matrix product by this weight (the
 * device is asked with a product of 512 columns over a weight in an empty buffer of it). */
static bool takes_matmul(const extras *x, ggml_backend_buffer_type_t buft,
                         const wm_tensor_info *ti) {
    struct ggml_init_params ip = {.mem_size = ggml_tensor_overhead() * 4, .no_alloc = true};
    struct ggml_context *ctx = ggml_init(ip);
    if (!ctx) return false;
    int64_t ne[GGML_MAX_DIMS];
    for (int d = 0; d < GGML_MAX_DIMS; d++)
        ne[d] = (int64_t)ti->shape[d];
    struct ggml_tensor *w = ggml_new_tensor(ctx, (enum ggml_type)ti->type, GGML_MAX_DIMS, ne);
    struct ggml_tensor *b = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, ne[0], 512, ne[2], ne[3]);
    struct ggml_tensor *op = ggml_mul_mat(ctx, w, b);
    ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(buft, 0);
    bool ok = false;
    if (buf) {
        w->buffer = buf;
        ok = ggml_backend_dev_supports_op(x->cpu, op);
        ggml_backend_buffer_free(buf);
    }
    ggml_free(ctx);
    return ok;
}

/* The override list: the caller's, then one entry per extra buffer type, then the terminator; in
 * pages (*mem, *mem_len). llama.cpp compiles every pattern (std::regex) anew for each tensor it
 * creates until one matches, so the patterns are kept few and short: a layer role (attn_q, ...)
 * whose every tensor picks the same buffer type is one alternative for all layers; only a tensor
 * that differs from the rest of its role is named (a pattern of every name, 150 tensors of a
 * 64 MiB model, cost 16.5 MiB of malloc scratch in 164 blocks and 40 ms per load). The roles share
 * one "[0-9]+": libstdc++ builds a 256-entry table for each bracket it compiles, and one a role
 * was a tenth of the CPU time of a 256 MiB model's warm mapped load on the development VM (1.8.3,
 * perf). */
static size_t caller_overrides(const struct llama_model_params *p) {
    size_t n = 0;
    while (p->tensor_buft_overrides && p->tensor_buft_overrides[n].pattern)
        n++;
    return n;
}

/* Which extra buffer type (index) takes file tensor i (named `name`), or -1. */
static int pick_extra(const extras *x, const wm_file *f, size_t i, const char *name) {
    wm_tensor_info ti;
    wm_file_tensor(f, i, &ti);
    if (!matmul_weight(&ti, name)) return -1;
    for (size_t k = 0; k < x->n; k++)
        if (takes_matmul(x, x->buft[k], &ti)) return (int)k;
    return -1;
}

int wm__llama_extra_for(const extras *x, const wm_file *f, size_t i, const char *name) {
    return pick_extra(x, f, i, name);
}

/* The role of a layer tensor "blk.N.ROLE.weight" (its bytes ROLE, n of them), or NULL. */
static const char *layer_role(const char *name, size_t *n) {
    if (strncmp(name, "blk.", 4) != 0) return NULL;
    const char *r = name + 4;
    while (*r >= '0' && *r <= '9')
        r++;
    if (r == name + 4 || *r != '.' || !wm__llama_ends_with(r, ".weight")) return NULL;
    *n = strlen(r + 1) - strlen(".weight");
    return r + 1;
}

/* For each role, the extra buffer type all its tensors pick (-1: they differ, or none). */
#define MAX_ROLES 16
typedef struct roles {
    const char *name[MAX_ROLES];
    size_t len[MAX_ROLES];
    int pick[MAX_ROLES];
    size_t n;
} roles;

static int role_index(roles *rs, const char *r, size_t n, bool add, int pick) {
    for (size_t k = 0; k < rs->n; k++)
        if (rs->len[k] == n && memcmp(rs->name[k], r, n) == 0) return (int)k;
    if (!add || rs->n == MAX_ROLES) return -1;
    rs->name[rs->n] = r, rs->len[rs->n] = n, rs->pick[rs->n] = pick;
    return (int)rs->n++;
}

static void add_text(char **out, const char *s, size_t n, bool escape) {
    for (size_t k = 0; k < n; k++) {
        if (escape && s[k] == '.') *(*out)++ = '\\';
        *(*out)++ = s[k];
    }
}

/* The pattern of extra buffer type k: roles all of whose tensors pick it, the tensors that pick
 * it alone, the output head. Returns the number of alternatives. */
static size_t pattern_of(const wm_file *f, const int *pick, const roles *rs, int k, char **out) {
    size_t alts = 0, nt = wm_file_tensor_count(f);
    const char *begin = *out;
    for (size_t r = 0; r < rs->n; r++) { /* the roles in one group: one bracket to compile */
        if (rs->pick[r] != k) continue;
        add_text(out, alts ? "|" : "^blk\\.[0-9]+\\.(", alts ? 1 : 15, false);
        add_text(out, rs->name[r], rs->len[r], true);
        alts++;
    }
    if (alts) add_text(out, ")\\.weight$", 10, false);
    for (size_t i = 0; i <= nt; i++) {
        if (pick[i] != k) continue;
        wm_tensor_info ti = {.name = "output.weight"};
        if (i < nt) wm_file_tensor(f, i, &ti);
        size_t n;
        const char *r = layer_role(ti.name, &n);
        int ri = r ? role_index((roles *)rs, r, n, false, 0) : -1;
        if (ri >= 0 && rs->pick[ri] == k) continue; /* its role's alternative has it */
        add_text(out, alts ? "|^" : "^", alts ? 2 : 1, false);
        add_text(out, ti.name, strlen(ti.name), true);
        add_text(out, "$", 1, false);
        alts++;
    }
    (void)begin;
    *(*out)++ = 0;
    return alts;
}

/* The pattern of the tensors own_cpu takes: every one no pattern before took ("."), or (cpu_layers
 * >= 0: layers on a GPU) the layers below cpu_layers and the input layer's, as
 * wm__llama_host_tensor names them. */
static void own_cpu_pattern(char **out, int cpu_layers) {
    if (cpu_layers < 0) {
        add_text(out, ".", 1, false);
    } else {
        if (cpu_layers > 0) {
            add_text(out, "^blk\\.(", 7, false);
            *out += wm__llama_below_pattern((unsigned)cpu_layers, *out);
            add_text(out, ")\\.|", 4, false);
        }
        add_text(out, "^(", 2, false);
        for (size_t k = 0; k < N_INPUT; k++) {
            add_text(out, "|", k ? 1 : 0, false);
            add_text(out, input_layer[k], strlen(input_layer[k]), false);
        }
        add_text(out, ")\\.", 3, false);
    }
    *(*out)++ = 0;
}

/* own[k]: the buffer type extra buffer type k's tensors go to (its wrapper, or itself); own_cpu:
 * where the tensors own_cpu_pattern names go (the CPU type's wrapper), or NULL (llama.cpp's
 * choice). With cpu_layers >= 0 a caller's override to ggml's CPU buffer type goes to own_cpu:
 * llama.cpp's mmap mode maps such a tensor (its choice among the CPU's types is the host buffer
 * type, which it replaces with the CPU's where it maps). */
wm_status wm__llama_overrides(const wm_file *f, const struct llama_model_params *p, const extras *x,
                              ggml_backend_buffer_type_t const *own,
                              ggml_backend_buffer_type_t own_cpu, int cpu_layers, overrides *ov,
                              wm_error *err) {
    memset(ov, 0, sizeof *ov);
    size_t nt = wm_file_tensor_count(f), nc = caller_overrides(p), text = 512;
    for (size_t i = 0; i < nt; i++) {
        wm_tensor_info ti;
        wm_file_tensor(f, i, &ti);
        text += 2 * strlen(ti.name) + 32;
    }
    text += x->n * (MAX_ROLES * 160 + 64);
    size_t list = (nc + x->n + 2) * sizeof *ov->list, picks = (nt + 1) * sizeof(int);
    ov->mem_len = list + picks + text;
    ov->mem = wm__llama_pages(ov->mem_len);
    if (!ov->mem)
        return fail(err, WM_ENOMEM, "%s: out of memory for buffer overrides", wm_file_path(f));
    ov->list = ov->mem;
    int *pick = (int *)(void *)((char *)ov->mem + list);
    roles rs = {.n = 0};
    size_t e;
    bool twin = wm_file_find_tensor(f, "output.weight", &e) != WM_OK &&
                wm_file_find_tensor(f, "token_embd.weight", &e) == WM_OK;
    for (size_t i = 0; i <= nt; i++) {
        wm_tensor_info ti = {.name = "output.weight"};
        if (i < nt) wm_file_tensor(f, i, &ti);
        pick[i] = i < nt ? pick_extra(x, f, i, ti.name) : twin ? pick_extra(x, f, e, ti.name) : -1;
        size_t n;
        const char *r = i < nt ? layer_role(ti.name, &n) : NULL;
        int ri = r ? role_index(&rs, r, n, true, pick[i]) : -1;
        if (ri >= 0 && rs.pick[ri] != pick[i]) rs.pick[ri] = -1; /* the role's tensors differ */
    }
    memcpy(ov->list, p->tensor_buft_overrides ? p->tensor_buft_overrides : ov->list,
           nc * sizeof *ov->list);
    for (size_t k = 0; own_cpu && cpu_layers >= 0 && k < nc; k++)
        if (ov->list[k].buft == ggml_backend_cpu_buffer_type()) ov->list[k].buft = own_cpu;
    char *out = (char *)ov->mem + list + picks;
    size_t n = nc;
    for (size_t k = 0; k < x->n; k++) {
        char *pat = out;
        if (pattern_of(f, pick, &rs, (int)k, &out))
            ov->list[n++] = (struct llama_model_tensor_buft_override){pat, own[k]};
    }
    if (own_cpu) {
        char *pat = out;
        own_cpu_pattern(&out, cpu_layers);
        ov->list[n++] = (struct llama_model_tensor_buft_override){pat, own_cpu};
    }
    ov->list[n] = (struct llama_model_tensor_buft_override){NULL, NULL};
    return WM_OK;
}
