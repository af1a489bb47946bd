/*
 * llama_meta.c: the llama.cpp bridge's metadata: the file's entries and tensor table as the
 * gguf_context llama_model_init_from_user reads the model from (llama_bridge.h). Public API
 * only, of weightmap and of ggml (gguf.h).
 */
#include "llama_bridge.h"
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

/* A numeric array entry copied element by element, in its GGUF type, into buf (cap bytes). */
static wm_status set_num_array(struct gguf_context *g, const wm_file *f, size_t i, const wm_kv *kv,
                               unsigned char *buf, size_t cap, wm_error *err) {
    size_t es = value_size(kv->elem_type);
    if (es == 0)
        return fail(err, WM_EFORMAT, "%s: metadata '%s' is an array of %s, which GGUF lacks",
                    wm_file_path(f), kv->key, wm_value_type_name(kv->elem_type));
    if (kv->length > cap / es) /* cannot be: cap is at least its size, unless that overflows */
        return fail(err, WM_EFORMAT, "%s: metadata '%s' has %llu elements, too many to copy",
                    wm_file_path(f), kv->key, (unsigned long long)kv->length);
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
    return st ? fail(err, WM_EFORMAT, "%s: metadata '%s' could not be read (%s)", wm_file_path(f),
                     kv->key, wm_status_name(st))
              : WM_OK;
}

/* A string array entry: NUL-terminated copies and their pointers, in buf (cap bytes). */
static wm_status set_str_array(struct gguf_context *g, const wm_file *f, size_t i, const wm_kv *kv,
                               unsigned char *buf, size_t cap, wm_error *err) {
    wm_array_iter it;
    wm_string s;
    size_t n = (size_t)kv->length, e = 0;
    const char **ptrs = (const char **)(void *)buf;
    char *text = (char *)buf + (n <= cap / sizeof(char *) ? n * sizeof(char *) : cap);
    char *end = (char *)buf + cap;
    if (text < end && wm_file_array_iter(f, i, &it) == WM_OK)
        for (; e < n && wm_array_iter_next(&it, &s) == WM_OK && s.len < (size_t)(end - text); e++) {
            memcpy(text, s.ptr, s.len);
            text[s.len] = 0;
            ptrs[e] = text;
            text += s.len + 1;
        }
    if (e != n)
        return fail(err, WM_EFORMAT, "%s: metadata '%s' could not be read", wm_file_path(f),
                    kv->key);
    gguf_set_arr_str(g, kv->key, ptrs, n);
    return WM_OK;
}

/* A scalar entry, of the same GGUF type. */
static wm_status set_scalar(struct gguf_context *g, const wm_file *f, size_t i, const wm_kv *kv,
                            char *buf, size_t cap, wm_error *err) {
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
        if (!st && str.len >= cap) st = WM_ERANGE; /* cannot be: cap is at least its size */
        if (!st) {
            memcpy(buf, str.ptr, str.len);
            buf[str.len] = 0;
            gguf_set_val_str(g, kv->key, buf);
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

/* The scratch bytes entry i needs (a copy in its GGUF form: NUL-terminated strings and their
 * pointers, numbers in their type); 0 where it cannot be read (its setter says why). */
static size_t entry_bytes(const wm_file *f, size_t i, const wm_kv *kv) {
    if (kv->type == WM_VALUE_STRING) {
        wm_string str;
        return wm_file_kv_string(f, i, &str) == WM_OK ? str.len + 1 : 0;
    }
    if (kv->type != WM_VALUE_ARRAY) return 0;
    if (kv->elem_type != WM_VALUE_STRING) {
        size_t es = value_size(kv->elem_type);
        return es && kv->length <= SIZE_MAX / es ? (size_t)kv->length * es : 0;
    }
    wm_array_iter it;
    wm_string s;
    size_t bytes = (size_t)kv->length * sizeof(char *);
    wm_status st = wm_file_array_iter(f, i, &it);
    while (!st && (st = wm_array_iter_next(&it, &s)) == WM_OK)
        bytes += s.len + 1;
    return st == WM_ERANGE ? bytes : 0;
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
wm_status wm__llama_metadata(const wm_file *f, struct gguf_context **out, wm_error *err) {
    *out = NULL;
    struct gguf_context *g = FAULT(DEVICE) ? NULL : gguf_init_empty();
    if (!g) return fail(err, WM_ENOMEM, "%s: gguf_init_empty failed", wm_file_path(f));
    /* one scratch for every entry, the largest one's size: one mapping, not one an entry (each
     * waits for the mapped modes' populate, which holds the address space's lock a piece at a
     * time: 15-20 ms on the GPU host, 20-35 ms on the development VM, before llama.cpp could
     * begin) */
    size_t most = 1;
    for (size_t i = 0; i < wm_file_metadata_count(f); i++) {
        wm_kv kv;
        wm_file_metadata(f, i, &kv);
        size_t b = entry_bytes(f, i, &kv);
        if (b > most) most = b;
    }
    unsigned char *buf = wm__llama_pages(most);
    wm_status st = buf ? WM_OK
                       : fail(err, WM_ENOMEM, "%s: out of memory for the metadata (%zu bytes)",
                              wm_file_path(f), most);
    for (size_t i = 0; !st && i < wm_file_metadata_count(f); i++) {
        wm_kv kv;
        wm_file_metadata(f, i, &kv);
        if (kv.type != WM_VALUE_ARRAY)
            st = set_scalar(g, f, i, &kv, (char *)buf, most, err);
        else if (kv.elem_type == WM_VALUE_STRING)
            st = set_str_array(g, f, i, &kv, buf, most, err);
        else if (kv.elem_type == WM_VALUE_ARRAY)
            st = fail(err, WM_EFORMAT,
                      "%s: metadata '%s' is an array of arrays, which ggml's GGUF "
                      "reader refuses",
                      wm_file_path(f), kv.key);
        else
            st = set_num_array(g, f, i, &kv, buf, most, err);
    }
    wm__llama_pages_free(buf, most);
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
