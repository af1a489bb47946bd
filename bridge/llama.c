/*
 * llama.c: the llama.cpp bridge (include/weightmap_llama.h; docs/LLAMA.md). Public API only, of
 * weightmap (weightmap.h) and of llama.cpp v0.4.0 and its ggml (llama.h, ggml.h, ggml-backend.h,
 * gguf.h).
 *
 * A load: weightmap's open and the checks ggml would abort on (ggml_check.h), all before
 * llama.cpp is called; the file's metadata and tensor table copied into a gguf_context;
 * llama_model_init_from_user, whose callback only records each tensor llama.cpp made (so that
 * the reads run afterwards, all in parallel, rather than one tensor at a time inside the
 * callback); each recorded tensor checked against the file and given a destination (its host
 * memory, or the window: ggml_backend_tensor_set); one wm_file_read_tensors for all; the
 * model handed over. Every failure after the model exists frees it with llama_model_free. The
 * bridge's own memory (the record, the read items, the metadata's staging, the override
 * patterns) is page-allocated and unmapped before the call returns, so no allocator cache
 * keeps it; what llama.cpp and gguf allocate is theirs.
 *
 * Sections: fault points; pages; options; metadata; repacked weights; the record; the load.
 */
#include "weightmap_llama.h"

#include "ggml_check.h"

#include <ggml-backend.h>
#include <gguf.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#ifdef WM_LLAMA_OWN_BUFFERS
#include <ggml-backend-impl.h> /* internal: scripts/llama.sh's internal/ (see "own buffers") */
#include <ggml-version.h>
#include <pthread.h>
#endif

/* ---- fault points ----
 * The test build (WM_LLAMA_FAULTS, linked with the library's fault table) fails the bridge's own
 * allocations and llama.cpp's constructors as the library fails its calls (src/os/fault.h). */
#ifdef WM_LLAMA_FAULTS
#include "os/os.h"
#define FAULT(kind) (wm__fault_hit(WM_OS_##kind) != 0)
#else
#define FAULT(kind) 0
#endif

/* ---- pages ---- */

static void *pages(size_t len) {
    if (FAULT(ALLOC)) return NULL;
    void *p = mmap(NULL, len ? len : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void pages_free(void *p, size_t len) {
    if (p) munmap(p, len ? len : 1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- options ---- */

/* The caller's sized options into a full-size copy (its first `size` bytes, zeros after); a
 * longer struct that sets a byte this bridge does not know is refused. */
static wm_status copy_sized(void *dst, size_t full, const void *src, const char *what,
                            wm_error *err) {
    memset(dst, 0, full);
    if (!src) return WM_OK;
    uint32_t n;
    memcpy(&n, src, sizeof n);
    if (n < sizeof n)
        return fail(err, WM_EINVAL, "%s: size %u is smaller than its size field", what, n);
    for (size_t k = full; k < n; k++)
        if (((const unsigned char *)src)[k])
            return fail(err, WM_EINVAL,
                        "%s: size %u sets a field past the %zu bytes this bridge knows (byte %zu)",
                        what, n, full, k);
    memcpy(dst, src, n < full ? n : full);
    return WM_OK;
}

/* ---- metadata: the file's entries and tensor table as a gguf_context ---- */

/* Bytes of one number of GGUF type t; 0 for one that is not a number. */
static size_t value_size(wm_value_type t) {
    switch (t) {
    case WM_VALUE_U8:
    case WM_VALUE_I8:
    case WM_VALUE_BOOL: return 1;
    case WM_VALUE_U16:
    case WM_VALUE_I16: return 2;
    case WM_VALUE_U32:
    case WM_VALUE_I32:
    case WM_VALUE_F32: return 4;
    case WM_VALUE_U64:
    case WM_VALUE_I64:
    case WM_VALUE_F64: return 8;
    default: return 0;
    }
}

/* A numeric array entry copied element by element into pages of its GGUF type. */
static wm_status set_num_array(struct gguf_context *g, const wm_file *f, size_t i, const wm_kv *kv,
                               wm_error *err) {
    size_t es = value_size(kv->elem_type);
    if (es == 0 || kv->length > SIZE_MAX / es)
        return fail(err, WM_EFORMAT, "%s: metadata '%s' is an array of %s, which GGUF lacks",
                    wm_file_path(f), kv->key, wm_value_type_name(kv->elem_type));
    size_t len = (size_t)kv->length * es;
    unsigned char *buf = pages(len);
    if (!buf)
        return fail(err, WM_ENOMEM, "%s: out of memory for metadata '%s'", wm_file_path(f),
                    kv->key);
    wm_status st = WM_OK;
    for (uint64_t e = 0; !st && e < kv->length; e++) {
        unsigned char *p = buf + e * es;
        uint64_t u = 0;
        int64_t s = 0;
        double d = 0;
        switch (kv->elem_type) {
        case WM_VALUE_F32:
        case WM_VALUE_F64:
            st = wm_file_array_f64(f, i, e, &d);
            if (kv->elem_type == WM_VALUE_F32) {
                float x = (float)d;
                memcpy(p, &x, 4);
            } else {
                memcpy(p, &d, 8);
            }
            break;
        case WM_VALUE_I8:
        case WM_VALUE_I16:
        case WM_VALUE_I32:
        case WM_VALUE_I64:
            st = wm_file_array_i64(f, i, e, &s);
            memcpy(p, &s, es); /* little-endian: the low bytes */
            break;
        default:
            st = wm_file_array_u64(f, i, e, &u);
            memcpy(p, &u, es);
            break;
        }
    }
    if (!st) gguf_set_arr_data(g, kv->key, (enum gguf_type)kv->elem_type, buf, (size_t)kv->length);
    pages_free(buf, len);
    return st ? fail(err, WM_EFORMAT, "%s: metadata '%s' could not be read (%s)", wm_file_path(f),
                     kv->key, wm_status_name(st))
              : WM_OK;
}

/* A string array entry: NUL-terminated copies and their pointers, in pages. */
static wm_status set_str_array(struct gguf_context *g, const wm_file *f, size_t i, const wm_kv *kv,
                               wm_error *err) {
    wm_array_iter it;
    wm_string s;
    size_t bytes = 0;
    wm_status st = wm_file_array_iter(f, i, &it);
    while (!st && (st = wm_array_iter_next(&it, &s)) == WM_OK)
        bytes += s.len + 1;
    if (st != WM_ERANGE)
        return fail(err, WM_EFORMAT, "%s: metadata '%s' could not be read", wm_file_path(f),
                    kv->key);
    size_t n = (size_t)kv->length, len = n * sizeof(char *) + bytes;
    unsigned char *buf = pages(len);
    if (!buf)
        return fail(err, WM_ENOMEM, "%s: out of memory for metadata '%s'", wm_file_path(f),
                    kv->key);
    const char **ptrs = (const char **)(void *)buf;
    char *text = (char *)(buf + n * sizeof(char *));
    wm_file_array_iter(f, i, &it);
    for (size_t e = 0; e < n && wm_array_iter_next(&it, &s) == WM_OK; e++) {
        memcpy(text, s.ptr, s.len);
        text[s.len] = 0;
        ptrs[e] = text;
        text += s.len + 1;
    }
    gguf_set_arr_str(g, kv->key, ptrs, n);
    pages_free(buf, len);
    return WM_OK;
}

/* A scalar entry, of the same GGUF type. */
static wm_status set_scalar(struct gguf_context *g, const wm_file *f, size_t i, const wm_kv *kv,
                            wm_error *err) {
    uint64_t u = 0;
    int64_t s = 0;
    double d = 0;
    int b = 0;
    wm_string str;
    wm_status st = WM_OK;
    switch (kv->type) {
    case WM_VALUE_U8: st = wm_file_kv_u64(f, i, &u), gguf_set_val_u8(g, kv->key, (uint8_t)u); break;
    case WM_VALUE_U16:
        st = wm_file_kv_u64(f, i, &u), gguf_set_val_u16(g, kv->key, (uint16_t)u);
        break;
    case WM_VALUE_U32:
        st = wm_file_kv_u64(f, i, &u), gguf_set_val_u32(g, kv->key, (uint32_t)u);
        break;
    case WM_VALUE_U64: st = wm_file_kv_u64(f, i, &u), gguf_set_val_u64(g, kv->key, u); break;
    case WM_VALUE_I8: st = wm_file_kv_i64(f, i, &s), gguf_set_val_i8(g, kv->key, (int8_t)s); break;
    case WM_VALUE_I16:
        st = wm_file_kv_i64(f, i, &s), gguf_set_val_i16(g, kv->key, (int16_t)s);
        break;
    case WM_VALUE_I32:
        st = wm_file_kv_i64(f, i, &s), gguf_set_val_i32(g, kv->key, (int32_t)s);
        break;
    case WM_VALUE_I64: st = wm_file_kv_i64(f, i, &s), gguf_set_val_i64(g, kv->key, s); break;
    case WM_VALUE_F32: st = wm_file_kv_f64(f, i, &d), gguf_set_val_f32(g, kv->key, (float)d); break;
    case WM_VALUE_F64: st = wm_file_kv_f64(f, i, &d), gguf_set_val_f64(g, kv->key, d); break;
    case WM_VALUE_BOOL:
        st = wm_file_get_bool(f, kv->key, &b), gguf_set_val_bool(g, kv->key, b != 0);
        break;
    case WM_VALUE_STRING: {
        st = wm_file_kv_string(f, i, &str);
        char *c = st ? NULL : pages(str.len + 1);
        if (!st && !c)
            return fail(err, WM_ENOMEM, "%s: out of memory for metadata '%s'", wm_file_path(f),
                        kv->key);
        if (c) {
            memcpy(c, str.ptr, str.len);
            c[str.len] = 0;
            gguf_set_val_str(g, kv->key, c);
            pages_free(c, str.len + 1);
        }
        break;
    }
    default:
        return fail(err, WM_EFORMAT, "%s: metadata '%s' has type %d, which GGUF lacks",
                    wm_file_path(f), kv->key, (int)kv->type);
    }
    return st ? fail(err, WM_EFORMAT, "%s: metadata '%s' could not be read (%s)", wm_file_path(f),
                     kv->key, wm_status_name(st))
              : WM_OK;
}

/* A tensor's description for gguf_add_tensor (name, type, ne and ggml's strides; no data). */
static void add_tensor(struct gguf_context *g, const char *name, const wm_tensor_info *ti) {
    struct ggml_tensor t;
    memset(&t, 0, sizeof t);
    t.type = (enum ggml_type)ti->type;
    for (int d = 0; d < GGML_MAX_DIMS; d++)
        t.ne[d] = (int64_t)ti->shape[d];
    t.nb[0] = ggml_type_size(t.type);
    t.nb[1] = t.nb[0] * (size_t)(t.ne[0] / ggml_blck_size(t.type));
    for (int d = 2; d < GGML_MAX_DIMS; d++)
        t.nb[d] = t.nb[d - 1] * (size_t)t.ne[d - 1];
    ggml_set_name(&t, name);
    gguf_add_tensor(g, &t);
}

/* The gguf_context llama.cpp reads the model from: every metadata entry with its GGUF type, and
 * every tensor's description (with output.weight as token_embd.weight's twin where the file ties
 * the output head to the embedding). Nested arrays are refused (GGUF has none that ggml reads). */
static wm_status make_metadata(const wm_file *f, struct gguf_context **out, wm_error *err) {
    *out = NULL;
    struct gguf_context *g = FAULT(DEVICE) ? NULL : gguf_init_empty();
    if (!g) return fail(err, WM_ENOMEM, "%s: gguf_init_empty failed", wm_file_path(f));
    wm_status st = WM_OK;
    for (size_t i = 0; !st && i < wm_file_metadata_count(f); i++) {
        wm_kv kv;
        wm_file_metadata(f, i, &kv);
        if (kv.type != WM_VALUE_ARRAY)
            st = set_scalar(g, f, i, &kv, err);
        else if (kv.elem_type == WM_VALUE_STRING)
            st = set_str_array(g, f, i, &kv, err);
        else if (kv.elem_type == WM_VALUE_ARRAY)
            st = fail(err, WM_EFORMAT,
                      "%s: metadata '%s' is an array of arrays, which ggml's GGUF "
                      "reader refuses",
                      wm_file_path(f), kv.key);
        else
            st = set_num_array(g, f, i, &kv, err);
    }
    for (size_t i = 0; !st && i < wm_file_tensor_count(f); i++) {
        wm_tensor_info ti;
        wm_file_tensor(f, i, &ti);
        add_tensor(g, ti.name, &ti);
    }
    size_t e;
    if (!st && wm_file_find_tensor(f, "output.weight", &e) != WM_OK &&
        wm_file_find_tensor(f, "token_embd.weight", &e) == WM_OK) {
        wm_tensor_info ti;
        wm_file_tensor(f, e, &ti);
        add_tensor(g, "output.weight", &ti);
    }
    if (st) {
        gguf_free(g);
        return st;
    }
    *out = g;
    return WM_OK;
}

/* ---- repacked weights (llama.cpp's extra buffer types) ----
 * llama_model_init_from_user turns params.use_extra_bufts off. Where the caller's params leave
 * it on and the model runs on the CPU, each matrix weight goes back to the first of the CPU
 * device's extra buffer types that takes its matrix product (llama.cpp's own rule for a weight
 * used by GGML_OP_MUL_MAT), through a tensor_buft_override per buffer type whose pattern names
 * exactly those tensors. */

#define MAX_EXTRA 8

typedef struct extras {
    ggml_backend_dev_t cpu;
    ggml_backend_buffer_type_t buft[MAX_EXTRA];
    size_t n;
} extras;

static void cpu_extras(extras *x) {
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

static bool is_extra(const extras *x, ggml_backend_buffer_type_t buft) {
    for (size_t k = 0; k < x->n; k++)
        if (x->buft[k] == buft) return true;
    return false;
}

/* Whether the model's layers stay on the CPU: no GPU among its devices, or no layer offloaded. */
static bool runs_on_cpu(const struct llama_model_params *p) {
    if (p->n_gpu_layers == 0) return true;
    if (p->devices) {
        for (ggml_backend_dev_t *d = p->devices; *d; d++) {
            enum ggml_backend_dev_type t = ggml_backend_dev_type(*d);
            if (t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU)
                return false;
        }
        return true;
    }
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        enum ggml_backend_dev_type t = ggml_backend_dev_type(ggml_backend_dev_get(i));
        if (t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU) return false;
    }
    return true;
}

static bool ends_with(const char *s, const char *tail) {
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
        if (ends_with(name, layer[k])) return true;
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
 * 64 MiB model, cost 16.5 MiB of malloc scratch in 164 blocks and 40 ms per load). */
typedef struct overrides {
    struct llama_model_tensor_buft_override *list;
    void *mem;
    size_t mem_len;
} overrides;

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

/* The role of a layer tensor "blk.N.ROLE.weight" (its bytes ROLE, n of them), or NULL. */
static const char *layer_role(const char *name, size_t *n) {
    if (strncmp(name, "blk.", 4) != 0) return NULL;
    const char *r = name + 4;
    while (*r >= '0' && *r <= '9')
        r++;
    if (r == name + 4 || *r != '.' || !ends_with(r, ".weight")) return NULL;
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
    for (size_t r = 0; r < rs->n; r++) {
        if (rs->pick[r] != k) continue;
        add_text(out, alts ? "|" : "", alts ? 1 : 0, false);
        add_text(out, "^blk\\.[0-9]+\\.", 14, false);
        add_text(out, rs->name[r], rs->len[r], true);
        add_text(out, "\\.weight$", 9, false);
        alts++;
    }
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

/* own[k]: the buffer type extra buffer type k's tensors go to (its wrapper, or itself); own_cpu:
 * where every other tensor goes (the CPU type's wrapper), or NULL (llama.cpp's choice). */
static wm_status make_overrides(const wm_file *f, const struct llama_model_params *p,
                                const extras *x, ggml_backend_buffer_type_t const *own,
                                ggml_backend_buffer_type_t own_cpu, overrides *ov, wm_error *err) {
    memset(ov, 0, sizeof *ov);
    size_t nt = wm_file_tensor_count(f), nc = caller_overrides(p), text = 64;
    for (size_t i = 0; i < nt; i++) {
        wm_tensor_info ti;
        wm_file_tensor(f, i, &ti);
        text += 2 * strlen(ti.name) + 32;
    }
    text += x->n * (MAX_ROLES * 160 + 64);
    size_t list = (nc + x->n + 2) * sizeof *ov->list, picks = (nt + 1) * sizeof(int);
    ov->mem_len = list + picks + text;
    ov->mem = pages(ov->mem_len);
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
    char *out = (char *)ov->mem + list + picks;
    size_t n = nc;
    for (size_t k = 0; k < x->n; k++) {
        char *pat = out;
        if (pattern_of(f, pick, &rs, (int)k, &out))
            ov->list[n++] = (struct llama_model_tensor_buft_override){pat, own[k]};
    }
    if (own_cpu) { /* every tensor no pattern before took */
        char *pat = out;
        add_text(&out, ".", 1, false);
        *out++ = 0;
        ov->list[n++] = (struct llama_model_tensor_buft_override){pat, own_cpu};
    }
    ov->list[n] = (struct llama_model_tensor_buft_override){NULL, NULL};
    return WM_OK;
}

/* ---- own buffers: weight buffers of the bridge's own pages ----
 * ggml's CPU buffer type (and CPU_REPACK, which allocates through it) takes its memory from
 * posix_memalign. Freed by llama_model_free, a buffer over glibc's mmap threshold is unmapped,
 * and the threshold rises to its size: from the second load of a process on, every weight buffer
 * comes from the heap and stays in the footprint after llama_model_free (+20.9 MiB on a 64 MiB
 * model, bench/RESULTS.md "Under the tracer").
 *
 * So where the model runs on the CPU, every weight tensor is sent (params.tensor_buft_overrides)
 * to a buffer type of the bridge's that wraps the real one, CPU or an extra (repack) type: its
 * name, alignment, max size, alloc size and is_host are the real type's, and its alloc_buffer
 * maps the pages itself (anonymous, 2 MiB aligned, huge pages advised) and makes the buffer
 * with ggml_backend_buffer_init whose type is the REAL one, so that ggml and llama.cpp see the
 * real type everywhere after the load: the scheduler (supports_buft), ggml-cpu's repack kernels
 * (they test buffer->buft == ggml_backend_cpu_repack_buffer_type()), llama.cpp's "model buffer
 * size" lines. Its functions are the real type's buffer's (read from a 64-byte buffer of the
 * real type, freed at once: one small malloc block), but free_buffer, which unmaps. An override
 * that is not ggml_backend_cpu_buffer_type() itself is taken as it is (llama-model-loader.cpp
 * load_tensor's buffer type choice), so llama.cpp allocates the context of each wrapper with it.
 * The wrappers live as long as the process (static; a buffer holds the real type, never one).
 *
 * That layout is ggml's internal one (ggml-backend-impl.h), so it is used only where it is the
 * one the bridge was built with: ggml_version() the header's version, the CPU backend's API
 * version the header's, and a probe buffer of each real type that holds what a CPU buffer does
 * (its type, size and base as asked; for an extra type, the CPU buffer's get_base and
 * free_buffer). Where any check fails the type is not wrapped and llama.cpp allocates it, as
 * without the bridge (wm_llama_stats.bytes_own says how many bytes were the bridge's). */

#define MAX_OWN (MAX_EXTRA + 1)
#define GRID 4096u /* the direct-read grid (WM_OS_DIRECT_ALIGN) */

#ifdef WM_LLAMA_OWN_BUFFERS
typedef struct own_type {
    struct ggml_backend_buffer_type buft; /* first: the wrapper a buft pointer points at */
    ggml_backend_buffer_type_t real;
    struct ggml_backend_buffer_i iface; /* the real type's buffer's, free_buffer: own_free */
} own_type;

static struct {
    pthread_mutex_t lock;
    int checked; /* 0 not yet, 1 the layout is ours, -1 it is not */
    void (*cpu_free)(ggml_backend_buffer_t);
    void *(*cpu_base)(ggml_backend_buffer_t);
    own_type t[MAX_OWN];
    size_t n;
} owns = {.lock = PTHREAD_MUTEX_INITIALIZER};

static own_type *own_of(ggml_backend_buffer_type_t w) { return (own_type *)(void *)w; }

static const char *own_name(ggml_backend_buffer_type_t w) {
    return ggml_backend_buft_name(own_of(w)->real);
}
static size_t own_alignment(ggml_backend_buffer_type_t w) {
    return ggml_backend_buft_get_alignment(own_of(w)->real);
}
static size_t own_max_size(ggml_backend_buffer_type_t w) {
    return ggml_backend_buft_get_max_size(own_of(w)->real);
}
/* ---- own buffers laid out as the file ----
 * A direct read lands in a tensor's place only where its address and its file offset agree on
 * the 4 KiB grid (src/reader.c, read_direct); elsewhere it goes through a thread's staging and a
 * copy. ggml packs a buffer's tensors at its alignment (32 bytes for the CPU's) in its
 * context's order, so few would agree by chance. But ggml asks the buffer type for each
 * tensor's size, in that order, just before it allocates the buffer that holds them
 * (ggml_backend_alloc_ctx_tensors_from_buft, ggml-alloc.c): while the bridge makes a model, the
 * wrapper notes each size (padded to the alignment) with the tensor's file offset, and its
 * alloc_buffer then knows where each tensor will lie and starts the buffer at the offset within
 * a page that puts the most bytes in agreement with the file (a context whose tensors come as
 * in the file: all of them). A wrong guess costs only speed: the reader checks each
 * destination itself. The notes are the calling thread's (a load on another thread keeps its
 * own), set only inside make_model. */
typedef struct noted {
    uint64_t file_off; /* UINT64_MAX: not a tensor of the file */
    size_t size;       /* padded to the alignment, as ggml adds it up */
} noted;

typedef struct notes {
    const wm_file *f;
    ggml_backend_buffer_type_t w; /* the wrapper whose tensors these are */
    noted *e;                     /* pages, cap entries */
    size_t n, cap, len;
} notes;

static _Thread_local notes *notes_now;

#define RESIDUE_STEP 32u /* GGUF's and ggml's smallest alignment: offsets agree in its steps */

static void note(notes *ns, ggml_backend_buffer_type_t w, const struct ggml_tensor *t,
                 size_t size) {
    if (ns->w != w) ns->n = 0, ns->w = w;
    if (ns->n == ns->cap) ns->n = 0; /* more than any one buffer: start again */
    size_t align = ggml_backend_buft_get_alignment(w), index;
    noted *e = &ns->e[ns->n++];
    e->size = align ? (size + align - 1) / align * align : size;
    e->file_off = UINT64_MAX;
    wm_tensor_info ti;
    if (wm_file_find_tensor(ns->f, t->name, &index) == WM_OK &&
        wm_file_tensor(ns->f, index, &ti) == WM_OK)
        e->file_off = ti.offset;
}

/* The offset within a page at which a buffer of `size` bytes of w should start: the notes that
 * end at the last one (or the one before: ggml notes the tensor that would not fit before it
 * allocates the buffer of those that do) and add up to size are its tensors, in order; the
 * offset is the one that puts the most of their bytes where their file offsets agree on the
 * grid, among those the alignment allows. 0 where no such notes are. Consumes those notes. */
static size_t own_shift(notes *ns, ggml_backend_buffer_type_t w, size_t size) {
    if (!ns || ns->w != w) return 0;
    size_t align = ggml_backend_buft_get_alignment(w);
    for (size_t drop = 0; drop < 2 && drop < ns->n; drop++) {
        size_t end = ns->n - drop, start = end, sum = 0;
        while (start > 0 && sum < size)
            sum += ns->e[--start].size;
        if (sum != size) continue;
        uint64_t weight[GRID / RESIDUE_STEP] = {0};
        size_t at = 0;
        for (size_t k = start; k < end; k++) {
            const noted *e = &ns->e[k];
            if (e->file_off != UINT64_MAX) {
                size_t r = (size_t)((e->file_off % GRID + GRID - at % GRID) % GRID);
                if (r % RESIDUE_STEP == 0 && (!align || r % align == 0))
                    weight[r / RESIDUE_STEP] += e->size;
            }
            at += e->size;
        }
        size_t best = 0;
        for (size_t r = 1; r < GRID / RESIDUE_STEP; r++)
            if (weight[r] > weight[best]) best = r;
        memmove(ns->e, ns->e + end, (ns->n - end) * sizeof *ns->e);
        ns->n -= end;
        return best * RESIDUE_STEP;
    }
    return 0;
}

static size_t own_alloc_size(ggml_backend_buffer_type_t w, const struct ggml_tensor *t) {
    size_t size = ggml_backend_buft_get_alloc_size(own_of(w)->real, t);
    if (notes_now) note(notes_now, w, t, size);
    return size;
}
static bool own_is_host(ggml_backend_buffer_type_t w) {
    return ggml_backend_buft_is_host(own_of(w)->real);
}

static const size_t huge_page = (size_t)2 << 20;

static size_t own_len(size_t size) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (size + pg - 1) / pg * pg;
}

/* A buffer's pages: from its start (b->context, `shift` bytes into its first page) back to the
 * page, then own_len(shift + size). */
static void own_free(ggml_backend_buffer_t b) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), shift = (uintptr_t)b->context % pg;
    munmap((char *)b->context - shift, own_len(shift + b->size));
}

/* size bytes of pages at a 2 MiB boundary (the whole huge pages inside advised), or NULL. */
static void *own_map(size_t size) {
    size_t len = own_len(size), span = len + huge_page;
    if (len < size || span < len) return NULL;
    char *p = pages(span);
    if (!p) return NULL;
    uintptr_t at = ((uintptr_t)p + huge_page - 1) / huge_page * huge_page;
    char *base = (char *)at;
    if (base > p) munmap(p, (size_t)(base - p));
    if (p + span > base + len) munmap(base + len, (size_t)(p + span - (base + len)));
    if (len >= huge_page) (void)madvise(base, len / huge_page * huge_page, MADV_HUGEPAGE);
    return base;
}

static ggml_backend_buffer_t own_alloc(ggml_backend_buffer_type_t w, size_t size) {
    own_type *o = own_of(w);
    size_t shift = own_shift(notes_now, w, size);
    if (shift + size < size) return NULL;
    char *map = own_map(shift + size);
    if (!map) return NULL;
    ggml_backend_buffer_t b = ggml_backend_buffer_init(o->real, o->iface, map + shift, size);
    if (!b) munmap(map, own_len(shift + size));
    return b;
}

/* The real type's buffer functions, read from a small buffer of it, if it holds what a CPU
 * buffer holds (see above). */
static bool probe(ggml_backend_buffer_type_t real, struct ggml_backend_buffer_i *iface) {
    const size_t n = 64;
    ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(real, n);
    if (!b) return false;
    bool ok = b->buft == real && b->size == n && ggml_backend_buffer_get_size(b) == n &&
              b->iface.get_base && b->iface.free_buffer && b->context &&
              ggml_backend_buffer_get_base(b) == b->context;
    if (ok && !owns.cpu_free) {
        owns.cpu_free = b->iface.free_buffer;
        owns.cpu_base = b->iface.get_base;
    } else if (ok) {
        ok = b->iface.free_buffer == owns.cpu_free && b->iface.get_base == owns.cpu_base;
    }
    if (ok) *iface = b->iface;
    ggml_backend_buffer_free(b);
    return ok;
}

/* Whether this ggml is the one whose layout the bridge was built with. */
static bool same_ggml(const extras *x) {
    if (strcmp(ggml_version(), WM_GGML_HEADER_VERSION) != 0) return false;
    ggml_backend_reg_t reg = x->cpu ? ggml_backend_dev_backend_reg(x->cpu) : NULL;
    return reg && reg->api_version == GGML_BACKEND_API_VERSION;
}

/* The wrapper of `real`, made on first use; NULL where it cannot be (the type is then
 * llama.cpp's to allocate). The CPU type is probed first: the others are checked against it. */
static ggml_backend_buffer_type_t own_type_of(const extras *x, ggml_backend_buffer_type_t real) {
    ggml_backend_buffer_type_t w = NULL;
    pthread_mutex_lock(&owns.lock);
    if (!owns.checked) {
        struct ggml_backend_buffer_i cpu;
        owns.checked = same_ggml(x) && probe(ggml_backend_cpu_buffer_type(), &cpu) ? 1 : -1;
    }
    for (size_t k = 0; owns.checked > 0 && !w && k < owns.n; k++)
        if (owns.t[k].real == real) w = &owns.t[k].buft;
    if (owns.checked > 0 && !w && owns.n < MAX_OWN) {
        own_type *o = &owns.t[owns.n];
        if (probe(real, &o->iface)) {
            o->real = real;
            o->iface.free_buffer = own_free;
            o->buft.iface = (struct ggml_backend_buffer_type_i){
                .get_name = own_name,
                .alloc_buffer = own_alloc,
                .get_alignment = own_alignment,
                .get_max_size = own_max_size,
                .get_alloc_size = own_alloc_size,
                .is_host = own_is_host,
            };
            o->buft.device = real->device;
            o->buft.context = real->context;
            w = &o->buft;
            owns.n++;
        }
    }
    pthread_mutex_unlock(&owns.lock);
    return w;
}

static bool is_own(ggml_backend_buffer_t b) { return b && b->iface.free_buffer == own_free; }

/* The notes of one model's making on this thread: an entry for each tensor of the file and
 * some; none where their pages cannot be had (the buffers then start on a page: only slower). */
static void notes_begin(notes *ns, const wm_file *f) {
    *ns = (notes){.f = f};
    size_t cap = wm_file_tensor_count(f) + 64;
    ns->len = cap * sizeof *ns->e;
    ns->e = pages(ns->len);
    if (!ns->e) return;
    ns->cap = cap;
    notes_now = ns;
}

static void notes_end(notes *ns) {
    notes_now = NULL;
    pages_free(ns->e, ns->len);
    ns->e = NULL;
}
#else
typedef struct notes {
    int none;
} notes;
static void notes_begin(notes *ns, const wm_file *f) { (void)ns, (void)f; }
static void notes_end(notes *ns) { (void)ns; }

static ggml_backend_buffer_type_t own_type_of(const extras *x, ggml_backend_buffer_type_t real) {
    (void)x, (void)real;
    return NULL;
}

static bool is_own(ggml_backend_buffer_t b) {
    (void)b;
    return false;
}
#endif

/* ---- the record: the tensors llama.cpp made, in the order it asked ---- */

typedef struct record {
    struct ggml_tensor **t;
    size_t n, cap;
    bool out_of_memory;
} record;

static void record_free(record *r) {
    pages_free(r->t, r->cap * sizeof *r->t);
    memset(r, 0, sizeof *r);
}

/* llama_model_init_from_user's set_tensor_data: only noted here (the reads come after, all at
 * once). The callback cannot fail a load, so running out of room is remembered and the model
 * refused afterwards. */
static void on_tensor(struct ggml_tensor *t, void *user) {
    record *r = user;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 512;
        struct ggml_tensor **grown = pages(cap * sizeof *grown);
        if (!grown) {
            r->out_of_memory = true;
            return;
        }
        if (r->n) memcpy(grown, r->t, r->n * sizeof *grown);
        pages_free(r->t, r->cap * sizeof *r->t);
        r->t = grown;
        r->cap = cap;
    }
    r->t[r->n++] = t;
}

/* ---- repacked in row groups (wm_llama_repack AUTO) ----
 * A repack buffer's set_tensor rewrites a tensor of t->ne[1] rows at t->data from the bytes
 * given; a shallow copy of the tensor's struct whose rows are a run of the tensor's (data at
 * their place in the buffer, the buffer and the repack traits in `extra` the tensor's own) has
 * ggml repack just those rows. That the result is the whole repack's bytes there is a property
 * of ggml's layouts (groups of 4, 8 or 16 rows, in order, each the size of its rows), proven per
 * buffer type, tensor type and row length by the probe below before any tensor relies on it. */

#define ROW_GROUP 16 /* rows: a multiple of every interleave of ggml's repacked layouts */
#define MAX_PROOFS 16

typedef struct group_proof {
    ggml_backend_buffer_type_t buft;
    enum ggml_type type;
    int64_t ne0;
    void *extra;
    bool ok;
} group_proof;

/* `s`: `rows` rows of tensor t as a tensor of their own, its data at `data`. */
static void rows_of(struct ggml_tensor *s, const struct ggml_tensor *t, void *data, int64_t rows) {
    *s = *t;
    s->ne[1] = rows;
    s->ne[2] = s->ne[3] = 1;
    s->nb[2] = s->nb[3] = s->nb[1] * (size_t)rows;
    s->data = data;
    s->view_src = NULL;
    s->view_offs = 0;
}

/* Whether ggml repacks 2 x ROW_GROUP rows of t's kind whole into the same bytes as the two
 * groups one by one (patterned bytes: every byte of the source differs from its neighbours').
 * Only a layout the size of the file's rows can be (the buffer type's alloc size of the tensor,
 * and of the probe's, its nbytes: ggml's AMX type packs q8_0 rows bigger, with sums of their
 * own, and nothing of such a layout lies at a row's file offset). False where memory for the
 * probe is lacking: the tensor is then handed over whole. */
static bool groups_repack_alone(const struct ggml_tensor *t) {
    size_t row = t->nb[1], half = row * ROW_GROUP, n = 2 * half;
    ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(t->buffer);
    struct ggml_tensor s;
    rows_of(&s, t, NULL, 2 * ROW_GROUP);
    if (ggml_backend_buft_get_alloc_size(buft, t) != ggml_nbytes(t) ||
        ggml_backend_buft_get_alloc_size(buft, &s) != n)
        return false;
    rows_of(&s, t, NULL, ROW_GROUP);
    if (ggml_backend_buft_get_alloc_size(buft, &s) != half) return false;
    unsigned char *mem = pages(3 * n);
    if (!mem) return false;
    unsigned char *src = mem, *whole = mem + n, *parts = mem + 2 * n;
    uint32_t x = 0x9e3779b9u;
    for (size_t k = 0; k < n; k++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        src[k] = (unsigned char)(x >> 24);
    }
    rows_of(&s, t, whole, 2 * ROW_GROUP);
    ggml_backend_tensor_set(&s, src, 0, n);
    rows_of(&s, t, parts, ROW_GROUP);
    ggml_backend_tensor_set(&s, src, 0, half);
    rows_of(&s, t, parts + half, ROW_GROUP);
    ggml_backend_tensor_set(&s, src + half, 0, half);
    bool ok = memcmp(whole, parts, n) == 0;
    pages_free(mem, 3 * n);
    return ok;
}

/* ---- the load ---- */

typedef struct load {
    const wm_file *f;
    const char *path;
    wm_llama_options o;
    struct llama_model_params p;
    extras x;
    record rec;
    wm_read_item *items;
    size_t n_items, items_len;
    bool serial; /* some buffer is on a device other than the CPU: one upload at a time */
    group_proof proofs[MAX_PROOFS]; /* repacked in row groups: what was proven, per kind */
    size_t n_proofs;
    wm_file *own_file; /* wm_llama_load's own open of the file (prefetch), else NULL */
    wm_llama_stats stats;
} load;

/* Bytes of a tensor llama.cpp asks for but the file lacks, where leaving it out would compute
 * the same: a bias added (zeros) or rope frequency factors divided by (ones). */
static bool neutral_value(const struct ggml_tensor *t, float *value) {
    const char *name = ggml_get_name(t);
    if (t->type != GGML_TYPE_F32) return false;
    if (ends_with(name, ".bias")) return *value = 0.0f, true;
    if (strstr(name, "rope_freqs") || strstr(name, "rope_factors")) return *value = 1.0f, true;
    return false;
}

static wm_status fill_neutral(load *l, struct ggml_tensor *t, wm_error *err) {
    float v;
    if (!neutral_value(t, &v))
        return fail(err, WM_EFORMAT,
                    "%s: llama.cpp asks for tensor '%s' (%s), which the file lacks and which has "
                    "no neutral value",
                    l->path, ggml_get_name(t), ggml_type_name(t->type));
    size_t nb = ggml_nbytes(t);
    float *buf = pages(nb);
    if (!buf)
        return fail(err, WM_ENOMEM, "%s: out of memory filling tensor '%s'", l->path,
                    ggml_get_name(t));
    for (size_t k = 0; k < nb / sizeof *buf; k++)
        buf[k] = v;
    ggml_backend_tensor_set(t, buf, 0, nb);
    pages_free(buf, nb);
    l->stats.filled++;
    return WM_OK;
}

/* The file tensor that fills `t` (output.weight: token_embd.weight where the file has no head);
 * its type and shape must be t's. */
static wm_status match_tensor(const load *l, const struct ggml_tensor *t, size_t *index,
                              wm_error *err) {
    const char *name = ggml_get_name(t);
    if (wm_file_find_tensor(l->f, name, index) != WM_OK &&
        (strcmp(name, "output.weight") != 0 ||
         wm_file_find_tensor(l->f, "token_embd.weight", index) != WM_OK))
        return WM_ENOENT;
    wm_tensor_info ti;
    wm_file_tensor(l->f, *index, &ti);
    bool same = (int)ti.type == (int)t->type && ti.nbytes == ggml_nbytes(t);
    for (int d = 0; d < GGML_MAX_DIMS; d++)
        same = same && (int64_t)ti.shape[d] == t->ne[d];
    if (!same)
        return fail(err, WM_EFORMAT,
                    "%s: tensor '%s' is %s [%" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64
                    "] in the file; the model expects %s [%" PRId64 ", %" PRId64 ", %" PRId64
                    ", %" PRId64 "]",
                    l->path, name, wm_type_name(ti.type), ti.shape[0], ti.shape[1], ti.shape[2],
                    ti.shape[3], ggml_type_name(t->type), t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    return WM_OK;
}

/* Whether repacked tensor t may be handed over in row groups as it is read: repack AUTO, a core
 * library that cuts pieces on row groups (1.5), a matrix whose rows are whole groups (at least
 * two), and a probe of its kind that held (run once per load and kind). */
static bool in_row_groups(load *l, const struct ggml_tensor *t) {
    if (l->o.repack != WM_LLAMA_REPACK_AUTO || wm_version_number() < 1005000) return false;
    /* ggml's CPU_REPACK type only, whose set_tensor repacks on the calling thread: the AMX type's
     * conversion starts a thread per CPU for each call (ggml-cpu/amx/common.h, parallel_for), so
     * in pieces a load started a team per piece (on the H200 host, warm 271 ms against 222 with
     * each tensor whole; bench/RESULTS.md, llama) */
    ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(t->buffer);
    if (strcmp(ggml_backend_buft_name(buft), "CPU_REPACK") != 0) return false;
    if (t->ne[2] != 1 || t->ne[3] != 1 || t->ne[1] < 2 * ROW_GROUP || t->ne[1] % ROW_GROUP)
        return false;
    if (t->nb[1] != ggml_row_size(t->type, t->ne[0])) return false; /* not contiguous rows */
    for (size_t k = 0; k < l->n_proofs; k++) {
        const group_proof *q = &l->proofs[k];
        if (q->buft == buft && q->type == t->type && q->ne0 == t->ne[0] && q->extra == t->extra)
            return q->ok;
    }
    bool ok = groups_repack_alone(t);
    if (l->n_proofs < MAX_PROOFS)
        l->proofs[l->n_proofs++] = (group_proof){
            .buft = buft, .type = t->type, .ne0 = t->ne[0], .extra = t->extra, .ok = ok};
    return ok;
}

/* One read item per recorded tensor that the file holds (others filled); each read in place
 * into host memory or through the window. */
static wm_status make_items(load *l, wm_error *err) {
    l->items_len = (l->rec.n ? l->rec.n : 1) * sizeof *l->items;
    l->items = pages(l->items_len);
    if (!l->items)
        return fail(err, WM_ENOMEM, "%s: out of memory for %zu read items", l->path, l->rec.n);
    for (size_t i = 0; i < l->rec.n; i++) {
        struct ggml_tensor *t = l->rec.t[i];
        size_t index = 0;
        wm_status st = match_tensor(l, t, &index, err);
        if (st == WM_ENOENT)
            st = fill_neutral(l, t, err);
        else if (!st && ggml_nbytes(t)) {
            wm_read_item *it = &l->items[l->n_items++];
            ggml_backend_buffer_t buf = t->buffer;
            ggml_backend_buffer_type_t buft = buf ? ggml_backend_buffer_get_type(buf) : NULL;
            *it = (wm_read_item){.tensor = index, .user = t};
            if (buf && ggml_backend_buffer_is_host(buf) && l->o.upload != WM_LLAMA_UPLOAD_WINDOW) {
                it->dst = t->data;
                l->stats.in_place++;
                wm_tensor_info ti;
                if (wm_file_tensor(l->f, index, &ti) == WM_OK &&
                    (uintptr_t)t->data % GRID == ti.offset % GRID)
                    l->stats.bytes_laid_out += ti.nbytes;
            } else {
                l->stats.windowed++;
                if (buft && is_extra(&l->x, buft)) {
                    /* the sink's ggml_backend_tensor_set repacks into t->data (CPU memory) */
                    it->dst = t->data;
                    it->flags = WM_READ_WHOLE | WM_READ_SINK_WRITES;
                    if (in_row_groups(l, t)) {
                        it->flags = WM_READ_SINK_ROWS | WM_READ_SINK_WRITES;
                        l->stats.repacked_rows++;
                    }
                    l->stats.repacked++;
                }
                ggml_backend_dev_t dev = buft ? ggml_backend_buft_get_device(buft) : NULL;
                if (dev && ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_CPU)
                    l->serial = true;
            }
        }
        if (st) return st;
    }
    return WM_OK;
}

/* llama.cpp's host buffers are fresh malloc'd memory: filling them faults a 4 KiB page at a
 * time, which bounds a warm load (docs/DESIGN.md, "measured facts"). Each buffer an item reads
 * into is advised huge pages first (the whole 2 MiB pages inside it: a hint on memory that the
 * weights fill whole, which llama.cpp frees with the model). */
static void advise_buffers(const load *l) {
    const size_t huge = (size_t)2 << 20;
    ggml_backend_buffer_t done[16];
    size_t n_done = 0;
    for (size_t i = 0; i < l->n_items; i++) {
        if (!l->items[i].dst) continue;
        ggml_backend_buffer_t b = ((struct ggml_tensor *)l->items[i].user)->buffer;
        bool seen = false;
        for (size_t k = 0; k < n_done; k++)
            seen = seen || done[k] == b;
        if (seen) continue;
        if (n_done < sizeof done / sizeof *done) done[n_done++] = b;
        uintptr_t lo = (uintptr_t)ggml_backend_buffer_get_base(b);
        uintptr_t hi = lo + ggml_backend_buffer_get_size(b);
        lo = (lo + huge - 1) / huge * huge;
        hi = hi / huge * huge;
        if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    }
}

/* The sink of the read: a window of a tensor's bytes into its buffer, by ggml's own upload. */
static int to_buffer(void *user, const wm_read_item *item, uint64_t offset, const void *bytes,
                     size_t len) {
    (void)user;
    if (FAULT(DEVICE)) return 1;
    struct ggml_tensor *t = item->user;
    if (item->flags & WM_READ_SINK_ROWS) {
        /* whole groups of rows (wm_read_options.row_group), repacked where they lie */
        size_t row = t->nb[1];
        if (offset % row || len % row) return 2; /* cannot happen: the engine cuts on groups */
        struct ggml_tensor s;
        rows_of(&s, t, (char *)t->data + offset, (int64_t)(len / row));
        ggml_backend_tensor_set(&s, bytes, 0, len);
        return 0;
    }
    ggml_backend_tensor_set(t, bytes, (size_t)offset, len);
    return 0;
}

/* llama.cpp's progress callback, fed with the bytes read. */
static int on_progress(void *user, uint64_t done, uint64_t total) {
    const load *l = user;
    float f = total ? (float)done / (float)total : 1.0f;
    return l->p.progress_callback && !l->p.progress_callback(f, l->p.progress_callback_user_data);
}

static wm_status read_all(load *l, wm_error *err) {
    wm_read_options ro = WM_READ_OPTIONS_INIT;
    ro.threads = l->o.threads;
    ro.direct_io = l->o.direct_io;
    ro.window = l->o.window;
    ro.flags = l->serial ? WM_READ_SINK_SERIAL : 0;
    ro.row_group = ROW_GROUP;
    if (l->o.prefault == WM_LLAMA_PREFAULT_ON) ro.flags |= WM_READ_PREFAULT;
    ro.sink = to_buffer;
    ro.progress = on_progress;
    ro.progress_user = l;
    advise_buffers(l);
    double t0 = now_s();
    wm_status st = wm_file_read_tensors(l->f, l->items, l->n_items, &ro, err);
    l->stats.seconds_read = now_s() - t0;
    for (size_t i = 0; !st && i < l->n_items; i++) {
        wm_tensor_info ti;
        wm_file_tensor(l->f, l->items[i].tensor, &ti);
        l->stats.bytes_read += ti.nbytes;
    }
    return st;
}

/* Before llama.cpp is called: a GGUF file whose every tensor ggml can hold. */
static wm_status check_file(const wm_file *f, wm_error *err) {
    if (wm_file_format(f) != WM_FORMAT_GGUF)
        return fail(err, WM_EFORMAT, "%s: llama.cpp loads GGUF files; this one is %s",
                    wm_file_path(f), wm_format_name(wm_file_format(f)));
    return check_tensors(f, err);
}

/* llama.cpp's model over the file's metadata, its buffers allocated, the tensors recorded. */
static wm_status make_model(load *l, struct llama_model **model, wm_error *err) {
    struct gguf_context *g = NULL;
    overrides ov = {0};
    wm_status st = make_metadata(l->f, &g, err);
    bool cpu = runs_on_cpu(&l->p);
    bool repack = l->o.repack != WM_LLAMA_REPACK_OFF && l->p.use_extra_bufts && cpu;
    if (repack) cpu_extras(&l->x);
    /* (no_alloc, llama.cpp's memory-fit pass, makes dummy buffers of the type asked for: those
     * must be of llama.cpp's own types, which the scheduler knows) */
    bool mine = l->o.buffers == WM_LLAMA_BUFFERS_AUTO && cpu && !l->p.no_alloc;
    ggml_backend_buffer_type_t own[MAX_EXTRA], own_cpu = NULL;
    if (mine) {
        extras probe_x = l->x;
        if (!probe_x.cpu) probe_x.cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        own_cpu = own_type_of(&probe_x, ggml_backend_cpu_buffer_type());
    }
    for (size_t k = 0; k < l->x.n; k++) {
        own[k] = own_cpu ? own_type_of(&l->x, l->x.buft[k]) : NULL;
        if (!own[k]) own[k] = l->x.buft[k];
    }
    if (!st && (l->x.n || own_cpu)) st = make_overrides(l->f, &l->p, &l->x, own, own_cpu, &ov, err);
    if (!st) {
        struct llama_model_params p = l->p;
        if (ov.list) p.tensor_buft_overrides = ov.list;
        notes ns;
        if (own_cpu) notes_begin(&ns, l->f); /* own buffers laid out as the file */
        double t0 = now_s();
        *model = FAULT(DEVICE) ? NULL : llama_model_init_from_user(g, on_tensor, &l->rec, p);
        l->stats.seconds_model = now_s() - t0;
        if (own_cpu) notes_end(&ns);
        if (!*model)
            st = fail(err, WM_EDEVICE,
                      "%s: llama.cpp refused the model (llama_model_init_from_user; "
                      "its log says why)",
                      l->path);
        else if (l->rec.out_of_memory)
            st = fail(err, WM_ENOMEM, "%s: out of memory recording llama.cpp's tensors", l->path);
    }
    pages_free(ov.mem, ov.mem_len);
    if (g) gguf_free(g);
    return st;
}

/* The weight buffers' bytes in the bridge's own pages. */
static uint64_t own_bytes(const load *l) {
    ggml_backend_buffer_t seen[MAX_OWN * 4];
    size_t n = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < l->rec.n; i++) {
        ggml_backend_buffer_t b = l->rec.t[i]->buffer;
        bool known = !is_own(b);
        for (size_t k = 0; !known && k < n; k++)
            known = seen[k] == b;
        if (known) continue;
        if (n < sizeof seen / sizeof *seen) seen[n++] = b;
        bytes += ggml_backend_buffer_get_size(b);
    }
    return bytes;
}

/* The process's free malloc memory back to the system (wm_llama_trim); seconds it took. */
static double trim(const wm_llama_options *o) {
    double t0 = now_s();
#ifdef __GLIBC__
    if (o->trim == WM_LLAMA_TRIM_AUTO) malloc_trim(0);
#else
    (void)o;
#endif
    return now_s() - t0;
}

static void give_stats(const load *l, double seconds_trim) {
    if (!l->o.stats || l->o.stats->size <= sizeof(uint32_t)) return;
    wm_llama_stats st = l->stats;
    st.seconds_trim = seconds_trim;
    uint32_t n = l->o.stats->size;
    memcpy((char *)l->o.stats + sizeof n, (char *)&st + sizeof n,
           (n < sizeof st ? n : sizeof st) - sizeof n);
}

/* One of wm_llama_options' enums: 0 (AUTO) to last, or WM_EINVAL naming the field. */
static wm_status choice(const load *l, const char *field, int v, int last, const char *names,
                        wm_error *err) {
    if ((unsigned)v <= (unsigned)last) return WM_OK;
    return fail(err, WM_EINVAL, "%s: wm_llama_options.%s %d is none of %s", l->path, field, v,
                names);
}

/* The load up to the model handed over (or freed); the trim and the stats are the caller's. */
static wm_status load_model(load *l, const wm_file *file, const struct llama_model_params *params,
                            const wm_llama_options *opts, struct llama_model **out, wm_error *err) {
    l->f = file;
    l->path = wm_file_path(file);
    wm_status st = copy_sized(&l->o, sizeof l->o, opts, "wm_llama_options", err);
    if (!st)
        st = choice(l, "repack", (int)l->o.repack, WM_LLAMA_REPACK_WHOLE, "AUTO, OFF, WHOLE", err);
    if (!st)
        st = choice(l, "upload", (int)l->o.upload, WM_LLAMA_UPLOAD_WINDOW, "AUTO, WINDOW", err);
    if (!st)
        st = choice(l, "buffers", (int)l->o.buffers, WM_LLAMA_BUFFERS_LLAMA, "AUTO, LLAMA", err);
    if (!st) st = choice(l, "trim", (int)l->o.trim, WM_LLAMA_TRIM_OFF, "AUTO, OFF", err);
    if (!st)
        st = choice(l, "prefault", (int)l->o.prefault, WM_LLAMA_PREFAULT_ON, "AUTO, OFF, ON", err);
    if (!st)
        st = choice(l, "prefetch", (int)l->o.prefetch, WM_LLAMA_PREFETCH_OFF, "AUTO, OFF", err);
    if (!st) st = check_file(file, err);
    if (st) return st;
    if (l->own_file && l->o.prefetch == WM_LLAMA_PREFETCH_AUTO && l->o.direct_io != WM_DIRECT_OFF) {
        /* the disk's work while llama.cpp makes the model, into the file's own memory until
         * read_all's read begins (which copies what came and frees it), or wm_llama_load's close
         * on a failure. 256 MiB: on the H200 host the model's making outlasts 128 MiB (the read
         * ahead idle for 10-20 ms; paired with the disk round by round, 0.96x at 256 against
         * 0.86x at 128, bench/RESULTS.md, llama); only what is read before the stop is memory. */
        uint64_t want = wm_file_tensor_bytes(file) / 4, most = (uint64_t)256 << 20;
        l->stats.bytes_prefetched = wm_file_prefetch(l->own_file, want < most ? want : most);
    }
    l->p = params ? *params : llama_model_default_params();
    l->stats.size = sizeof l->stats;
    struct llama_model *model = NULL;
    st = make_model(l, &model, err);
    if (!st) st = make_items(l, err);
    if (!st) st = read_all(l, err);
    l->stats.tensors = l->rec.n;
    if (!st) l->stats.bytes_own = own_bytes(l);
    record_free(&l->rec);
    pages_free(l->items, l->items_len);
    if (st) {
        if (model) llama_model_free(model);
        return st;
    }
    *out = model;
    return WM_OK;
}

/* A refused options struct trims nothing (its trim field is not to be trusted). */
static bool options_read(const load *l) { return l->stats.size != 0; }

wm_status wm_llama_load_file(const wm_file *file, const struct llama_model_params *params,
                             const wm_llama_options *opts, struct llama_model **out,
                             wm_error *err) {
    if (out) *out = NULL;
    if (!file || !out) return fail(err, WM_EINVAL, "wm_llama_load_file: NULL file or out");
    load l;
    memset(&l, 0, sizeof l);
    wm_status st = load_model(&l, file, params, opts, out, err);
    double t = options_read(&l) ? trim(&l.o) : 0;
    if (!st) give_stats(&l, t);
    return st;
}

wm_status wm_llama_load(const char *path, const struct llama_model_params *params,
                        const wm_llama_options *opts, struct llama_model **out, wm_error *err) {
    if (out) *out = NULL;
    if (!path || !out) return fail(err, WM_EINVAL, "wm_llama_load: NULL path or out");
    wm_file *f = NULL;
    wm_status st = wm_file_open_set(path, &f, err); /* a split set whole, from any part */
    if (st) return st;
    load l;
    memset(&l, 0, sizeof l);
    l.own_file = f;
    st = load_model(&l, f, params, opts, out, err);
    wm_file_close(f);
    double t = options_read(&l) ? trim(&l.o) : 0;
    if (!st) give_stats(&l, t);
    return st;
}
