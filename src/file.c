/*
 * file.c: the wm_file object's public face: open and close, and every getter. The open path runs
 * one way, downwards: wm_file_open, wm_file_open_set, wm_file_open_paths -> open/shards.c (a set
 * of files, or one) -> open/open.c (one file: open, detect, read the header) -> format/gguf.c or
 * safetensors.c (the parse) -> format/index.c (the name and key index). Nothing below calls back
 * up into this file.
 *
 * Sections: open, close and references; file and tensor getters; metadata getters (scalars
 * converted on read, strings and arrays referenced in the header buffer).
 */
#include "internal.h"
#include "read/engine.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* ---- open, close and references ---- */

/* Every open that succeeded ends here: the caller's hold on the file shards.c made. */
static wm_status opened(wm_file *f, wm_file **out) {
    atomic_init(&f->refs, 1); /* the caller's */
    *out = f;
    return WM_OK;
}

/* Every path goes to shards.c: an index opens its set there, any other path the file alone
 * (open/open.c); wm_file_open_set asks for the whole set of a shard or split part too. */
wm_status wm_file_open(const char *path, wm_file **out, wm_error *err) {
    if (out) *out = NULL;
    if (!path || !out) return wm__err(err, WM_EINVAL, 0, "wm_file_open: NULL path or out");
    wm_file *f;
    wm_status st = wm__shards_open(path, false, &f, err);
    return st ? st : opened(f, out);
}

wm_status wm_file_open_set(const char *path, wm_file **out, wm_error *err) {
    if (out) *out = NULL;
    if (!path || !out) return wm__err(err, WM_EINVAL, 0, "wm_file_open_set: NULL path or out");
    wm_file *f;
    wm_status st = wm__shards_open(path, true, &f, err);
    return st ? st : opened(f, out);
}

wm_status wm_file_open_paths(const char *const *paths, size_t n, wm_file **out, wm_error *err) {
    if (out) *out = NULL;
    if (!paths || !n || !out)
        return wm__err(err, WM_EINVAL, 0, "wm_file_open_paths: %s",
                       !out     ? "NULL out"
                       : !paths ? "NULL paths"
                                : "an empty list");
    wm_file *f;
    wm_status st = wm__shards_open_list(paths, n, &f, err);
    return st ? st : opened(f, out);
}

wm_file *wm__file_ref(wm_file *f) {
    atomic_fetch_add(&f->refs, 1);
    return f;
}

void wm__file_unref(wm_file *f) {
    if (f && atomic_fetch_sub(&f->refs, 1) == 1) wm__file_free(f);
}

void wm_file_close(wm_file *file) {
    if (file) wm__file_prefetch_drop(file);
    wm__file_unref(file);
}

/* ---- file and tensor getters ---- */

wm_format wm_file_format(const wm_file *f) { return f->format; }
const char *wm_file_path(const wm_file *f) { return f->path; }
uint32_t wm_file_version(const wm_file *f) { return f->version; }
uint64_t wm_file_size(const wm_file *f) { return f->size; }
uint64_t wm_file_data_offset(const wm_file *f) { return f->data_offset; }
uint32_t wm_file_alignment(const wm_file *f) { return f->alignment; }
uint64_t wm_file_tensor_bytes(const wm_file *f) { return f->tensor_bytes; }
size_t wm_file_tensor_count(const wm_file *f) { return f ? f->n_tensors : 0; }
size_t wm_file_metadata_count(const wm_file *f) { return f ? f->n_kv : 0; }

wm_status wm_file_tensor(const wm_file *f, size_t index, wm_tensor_info *out) {
    if (!f || !out) return WM_EINVAL;
    if (index >= f->n_tensors) return WM_ERANGE;
    const wm__tensor *t = &f->tensors[index];
    out->name = f->names + t->name_off;
    out->type = (wm_type)t->type;
    out->n_dims = t->n_dims;
    for (int d = 0; d < WM_MAX_DIMS; d++)
        out->shape[d] = t->ne[d];
    out->n_elements = t->n_elements;
    out->offset = t->offset;
    out->nbytes = t->nbytes;
    out->shard = t->shard;
    return WM_OK;
}

wm_status wm_file_find_tensor(const wm_file *f, const char *name, size_t *index) {
    if (!f || !name || !index) return WM_EINVAL;
    return wm__index_find_tensor(f, name, strlen(name), index);
}

uint32_t wm_file_shard_count(const wm_file *f) { return f ? f->n_shards : 0; }

const char *wm_file_shard_path(const wm_file *f, uint32_t index) {
    return f && index < f->n_shards ? f->shards[index].path : NULL;
}

/* ---- metadata ---- */

wm_status wm_file_find_metadata(const wm_file *f, const char *key, size_t *index) {
    if (!f || !key || !index) return WM_EINVAL;
    return wm__index_find_kv(f, key, strlen(key), index);
}

/* Metadata entry `index`: WM_EINVAL without a file, WM_ERANGE past the last entry. */
static wm_status entry(const wm_file *f, size_t index, const wm__kv **kv) {
    if (!f) return WM_EINVAL;
    if (index >= f->n_kv) return WM_ERANGE;
    *kv = &f->kvs[index];
    return WM_OK;
}

wm_status wm_file_metadata(const wm_file *f, size_t index, wm_kv *out) {
    const wm__kv *kv;
    if (!out) return WM_EINVAL;
    wm_status st = entry(f, index, &kv);
    if (st) return st;
    out->key = f->names + kv->key_off;
    out->type = (wm_value_type)kv->type;
    out->elem_type = (wm_value_type)kv->elem_type;
    out->length = kv->length;
    return WM_OK;
}

/* A number read from the file, or why there is none (st). The numeric getters are each one
 * reader (scalar, keyed, element) producing a num and one conversion (to_u64, to_i64, to_f64)
 * delivering it as the caller's type; a reader's failure passes through the conversion. */
typedef struct num {
    wm_status st;
    int kind; /* 0 unsigned, 1 signed, 2 float */
    uint64_t u;
    int64_t i;
    double d;
} num;

static num num_u(uint64_t u) { return (num){WM_OK, 0, u, 0, 0}; }
static num num_i(int64_t i) { return (num){WM_OK, 1, 0, i, 0}; }
static num num_d(double d) { return (num){WM_OK, 2, 0, 0, d}; }
static num num_fail(wm_status st) { return (num){.st = st}; }

/* The number of `type` at p; WM_ETYPE for a type that is not a number. */
static num decode(wm_value_type type, const unsigned char *p) {
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        float f32;
        uint64_t u64;
        int64_t i64;
        double f64;
    } v;
    switch (type) {
    case WM_VALUE_U8:
    case WM_VALUE_BOOL: memcpy(&v.u8, p, 1); return num_u(v.u8);
    case WM_VALUE_U16: memcpy(&v.u16, p, 2); return num_u(v.u16);
    case WM_VALUE_U32: memcpy(&v.u32, p, 4); return num_u(v.u32);
    case WM_VALUE_U64: memcpy(&v.u64, p, 8); return num_u(v.u64);
    case WM_VALUE_I8: memcpy(&v.i8, p, 1); return num_i(v.i8);
    case WM_VALUE_I16: memcpy(&v.i16, p, 2); return num_i(v.i16);
    case WM_VALUE_I32: memcpy(&v.i32, p, 4); return num_i(v.i32);
    case WM_VALUE_I64: memcpy(&v.i64, p, 8); return num_i(v.i64);
    case WM_VALUE_F32: memcpy(&v.f32, p, 4); return num_d(v.f32);
    case WM_VALUE_F64: memcpy(&v.f64, p, 8); return num_d(v.f64);
    default: return num_fail(WM_ETYPE);
    }
}

static wm_status to_u64(num n, uint64_t *out) {
    if (n.st) return n.st;
    if (n.kind == 2) return WM_ETYPE;
    if (n.kind == 1 && n.i < 0) return WM_ERANGE;
    if (!out) return WM_EINVAL;
    *out = n.kind == 0 ? n.u : (uint64_t)n.i;
    return WM_OK;
}

static wm_status to_i64(num n, int64_t *out) {
    if (n.st) return n.st;
    if (n.kind == 2) return WM_ETYPE;
    if (n.kind == 0 && n.u > (uint64_t)INT64_MAX) return WM_ERANGE;
    if (!out) return WM_EINVAL;
    *out = n.kind == 1 ? n.i : (int64_t)n.u;
    return WM_OK;
}

static wm_status to_f64(num n, double *out) {
    if (n.st) return n.st;
    if (n.kind != 2) return WM_ETYPE;
    if (!out) return WM_EINVAL;
    *out = n.d;
    return WM_OK;
}

/* Metadata entry `index` as a number (a bool is not one). */
static num scalar(const wm_file *f, size_t index) {
    const wm__kv *kv;
    wm_status st = entry(f, index, &kv);
    if (st) return num_fail(st);
    if (kv->type == WM_VALUE_BOOL) return num_fail(WM_ETYPE);
    return decode((wm_value_type)kv->type, kv->val);
}

/* The metadata entry named `key` as a number. */
static num keyed(const wm_file *f, const char *key) {
    size_t i;
    wm_status st = wm_file_find_metadata(f, key, &i);
    return st ? num_fail(st) : scalar(f, i);
}

wm_status wm_file_kv_u64(const wm_file *f, size_t index, uint64_t *out) {
    return to_u64(scalar(f, index), out);
}
wm_status wm_file_kv_i64(const wm_file *f, size_t index, int64_t *out) {
    return to_i64(scalar(f, index), out);
}
wm_status wm_file_kv_f64(const wm_file *f, size_t index, double *out) {
    return to_f64(scalar(f, index), out);
}

wm_status wm_file_kv_string(const wm_file *f, size_t index, wm_string *out) {
    const wm__kv *kv;
    if (!out) return WM_EINVAL;
    wm_status st = entry(f, index, &kv);
    if (st) return st;
    if (kv->type != WM_VALUE_STRING) return WM_ETYPE;
    out->ptr = (const char *)kv->val;
    out->len = (size_t)kv->length;
    return WM_OK;
}

wm_status wm_file_get_u64(const wm_file *f, const char *key, uint64_t *out) {
    return to_u64(keyed(f, key), out);
}
wm_status wm_file_get_i64(const wm_file *f, const char *key, int64_t *out) {
    return to_i64(keyed(f, key), out);
}
wm_status wm_file_get_f64(const wm_file *f, const char *key, double *out) {
    return to_f64(keyed(f, key), out);
}

wm_status wm_file_get_u32(const wm_file *f, const char *key, uint32_t *out) {
    uint64_t v;
    wm_status st = wm_file_get_u64(f, key, &v);
    if (st) return st;
    if (v > UINT32_MAX) return WM_ERANGE;
    if (!out) return WM_EINVAL;
    *out = (uint32_t)v;
    return WM_OK;
}

wm_status wm_file_get_bool(const wm_file *f, const char *key, int *out) {
    size_t i;
    wm_status st = wm_file_find_metadata(f, key, &i);
    if (st) return st;
    const wm__kv *kv = &f->kvs[i];
    if (kv->type != WM_VALUE_BOOL) return WM_ETYPE;
    if (!out) return WM_EINVAL;
    *out = kv->val[0] != 0;
    return WM_OK;
}

wm_status wm_file_get_string(const wm_file *f, const char *key, wm_string *out) {
    size_t i;
    wm_status st = wm_file_find_metadata(f, key, &i);
    return st ? st : wm_file_kv_string(f, i, out);
}

/* ---- arrays ---- */

static wm_status array_kv(const wm_file *f, size_t index, uint64_t elem, const wm__kv **out) {
    const wm__kv *kv;
    wm_status st = entry(f, index, &kv);
    if (st) return st;
    if (kv->type != WM_VALUE_ARRAY) return WM_ETYPE;
    if (elem >= kv->length) return WM_ERANGE;
    *out = kv;
    return WM_OK;
}

/* Element `elem` of array entry `index` as a number. */
static num element(const wm_file *f, size_t index, uint64_t elem) {
    const wm__kv *kv;
    wm_status st = array_kv(f, index, elem, &kv);
    if (st) return num_fail(st);
    static const uint8_t size[WM_VALUE_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (kv->elem_type >= WM_VALUE_TYPE_COUNT || !size[kv->elem_type]) return num_fail(WM_ETYPE);
    return decode((wm_value_type)kv->elem_type, kv->val + elem * size[kv->elem_type]);
}

wm_status wm_file_array_u64(const wm_file *f, size_t index, uint64_t elem, uint64_t *out) {
    return to_u64(element(f, index, elem), out);
}
wm_status wm_file_array_i64(const wm_file *f, size_t index, uint64_t elem, int64_t *out) {
    return to_i64(element(f, index, elem), out);
}
wm_status wm_file_array_f64(const wm_file *f, size_t index, uint64_t elem, double *out) {
    return to_f64(element(f, index, elem), out);
}

wm_status wm_file_array_iter(const wm_file *f, size_t index, wm_array_iter *it) {
    const wm__kv *kv;
    if (!it) return WM_EINVAL;
    wm_status st = entry(f, index, &kv);
    if (st) return st;
    if (kv->type != WM_VALUE_ARRAY || kv->elem_type != WM_VALUE_STRING) return WM_ETYPE;
    it->pos_ = kv->val;
    it->left_ = kv->length;
    it->lenw_ = kv->lenw;
    return WM_OK;
}

/* The parser checked every length of the array, so stepping needs no bounds here. */
wm_status wm_array_iter_next(wm_array_iter *it, wm_string *out) {
    if (!it || !out) return WM_EINVAL;
    if (it->left_ == 0) return WM_ERANGE;
    uint64_t n;
    if (it->lenw_ == 4) {
        uint32_t n32;
        memcpy(&n32, it->pos_, 4);
        n = n32;
    } else {
        memcpy(&n, it->pos_, 8);
    }
    out->ptr = (const char *)it->pos_ + it->lenw_;
    out->len = (size_t)n;
    it->pos_ += it->lenw_ + n;
    it->left_--;
    return WM_OK;
}

wm_status wm_file_array_string(const wm_file *f, size_t index, uint64_t elem, wm_string *out) {
    const wm__kv *kv;
    wm_status st = array_kv(f, index, elem, &kv);
    if (st) return st;
    wm_array_iter it;
    st = wm_file_array_iter(f, index, &it);
    if (st) return st;
    if (!out) return WM_EINVAL;
    wm_string s = {0};
    for (uint64_t i = 0; i <= elem; i++)
        wm_array_iter_next(&it, &s);
    *out = s;
    return WM_OK;
}
