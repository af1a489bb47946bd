/*
 * gguf_builder.h: a tiny writer of hand-made GGUF files for tests, on top of wmt_buf.
 *
 * Header-only (static inline) because every tests/test_*.c links only wmtest.c. Sections: the
 * builder (header, strings, KVs of every type, array headers, tensor infos, padding, data);
 * writing to a temporary file; checks shared by the GGUF tests (open descriptors, "refused
 * cleanly").
 *
 * Nothing here validates: the point is to write exactly the bytes a test asks for, including
 * wrong ones. Lengths and counts are 32-bit for version 1 and 64-bit otherwise, as in GGUF.
 */
#ifndef WM_GGUF_BUILDER_H
#define WM_GGUF_BUILDER_H

#include "wmtest.h"

#include <dirent.h>
#include <string.h>

/* ---- the builder ---- */

typedef struct ggb {
    wmt_buf b;
    uint32_t version;
    unsigned lenw; /* 4 for v1, 8 otherwise */
} ggb;

static inline void ggb_len(ggb *g, uint64_t n) {
    if (g->lenw == 4)
        wmt_put_u32(&g->b, (uint32_t)n);
    else
        wmt_put_u64(&g->b, n);
}

/* Magic, version and the two counts. */
static inline void ggb_begin(ggb *g, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    memset(g, 0, sizeof *g);
    g->version = version;
    g->lenw = version == 1 ? 4 : 8;
    wmt_put(&g->b, "GGUF", 4);
    wmt_put_u32(&g->b, version);
    ggb_len(g, n_tensors);
    ggb_len(g, n_kv);
}

static inline void ggb_free(ggb *g) { wmt_buf_free(&g->b); }

/* A length-prefixed string of n bytes. */
static inline void ggb_strn(ggb *g, const char *s, size_t n) {
    ggb_len(g, n);
    wmt_put(&g->b, s, n);
}
static inline void ggb_str(ggb *g, const char *s) { ggb_strn(g, s, strlen(s)); }

/* Key and value type; the caller writes the value. */
static inline void ggb_key(ggb *g, const char *key, wm_value_type type) {
    ggb_str(g, key);
    wmt_put_u32(&g->b, (uint32_t)type);
}

/* A key with a scalar value, one writer per value type (ggb_kv_u8 ... ggb_kv_f64): the value's
 * bytes as the host (little-endian) holds them. */
#define GGB_KV_SCALAR(name, ctype, vtype)                                                          \
    static inline void ggb_kv_##name(ggb *g, const char *k, ctype v) {                             \
        ggb_key(g, k, vtype);                                                                      \
        wmt_put(&g->b, &v, sizeof v);                                                              \
    }
GGB_KV_SCALAR(u8, uint8_t, WM_VALUE_U8)
GGB_KV_SCALAR(i8, int8_t, WM_VALUE_I8)
GGB_KV_SCALAR(u16, uint16_t, WM_VALUE_U16)
GGB_KV_SCALAR(i16, int16_t, WM_VALUE_I16)
GGB_KV_SCALAR(u32, uint32_t, WM_VALUE_U32)
GGB_KV_SCALAR(i32, int32_t, WM_VALUE_I32)
GGB_KV_SCALAR(f32, float, WM_VALUE_F32)
GGB_KV_SCALAR(bool, uint8_t, WM_VALUE_BOOL)
GGB_KV_SCALAR(u64, uint64_t, WM_VALUE_U64)
GGB_KV_SCALAR(i64, int64_t, WM_VALUE_I64)
GGB_KV_SCALAR(f64, double, WM_VALUE_F64)

static inline void ggb_kv_str(ggb *g, const char *k, const char *v) {
    ggb_key(g, k, WM_VALUE_STRING);
    ggb_str(g, v);
}

/* An array header (element type and count) without its key: for nested arrays. */
static inline void ggb_arr_head(ggb *g, wm_value_type elem, uint64_t count) {
    wmt_put_u32(&g->b, (uint32_t)elem);
    ggb_len(g, count);
}
/* Key, type ARRAY and the array header; the caller writes `count` elements. */
static inline void ggb_kv_arr(ggb *g, const char *k, wm_value_type elem, uint64_t count) {
    ggb_key(g, k, WM_VALUE_ARRAY);
    ggb_arr_head(g, elem, count);
}

/* A tensor info: name, n_dims, dims (lenw wide), type, relative data offset. */
static inline void ggb_tensor(ggb *g, const char *name, uint32_t n_dims, const uint64_t *ne,
                              uint32_t type, uint64_t offset) {
    ggb_str(g, name);
    wmt_put_u32(&g->b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        ggb_len(g, ne[d]);
    wmt_put_u32(&g->b, type);
    wmt_put_u64(&g->b, offset);
}
/* A one-dimensional tensor of n elements. */
static inline void ggb_tensor1(ggb *g, const char *name, uint64_t n, uint32_t type,
                               uint64_t offset) {
    ggb_tensor(g, name, 1, &n, type, offset);
}

/* Zeros up to the next multiple of `align` (the start of the data section). */
static inline void ggb_pad(ggb *g, size_t align) {
    size_t r = g->b.len % align;
    if (r) wmt_put_zeros(&g->b, align - r);
}
/* n data bytes (a recognisable pattern, not zeros). */
static inline void ggb_data(ggb *g, size_t n) {
    for (size_t i = 0; i < n; i++)
        wmt_put_u8(&g->b, (uint8_t)(i * 7 + 1));
}

/* Writes the file to the case's temporary folder and returns its path (rotating buffer). */
static inline const char *ggb_write(const ggb *g, const char *name) {
    const char *p = wmt_tmp(name);
    wmt_write_file(p, g->b.p, g->b.len);
    return p;
}

/* ---- checks ---- */

/* Opens `path` expecting `want` (not WM_OK): *out is NULL afterwards, err names the file, says
 * "offset" and contains `needle`; no descriptor, mapping or ledger byte is left. */
#define CHECK_REFUSED(path, want, needle) ggb_check_refused(__FILE__, __LINE__, path, want, needle)
static inline void ggb_check_refused(const char *file, int line, const char *path, wm_status want,
                                     const char *needle) {
    int fds = wmt_count_fds();
    wm_file *f = (wm_file *)(uintptr_t)1; /* must be overwritten with NULL */
    wm_error err;
    memset(&err, 0x5a, sizeof err);
    wm_status st = wm_file_open(path, &f, &err);
    if (st != want)
        wmt_fail(file, line, "open returned %s, want %s (%s)", wm_status_name(st),
                 wm_status_name(want), st == WM_OK ? "accepted" : err.msg);
    if (f != NULL) wmt_fail(file, line, "*out is not NULL after a failed open");
    if (err.code != want) wmt_fail(file, line, "err.code %d != status %d", err.code, want);
    if (!memchr(err.msg, 0, sizeof err.msg)) wmt_fail(file, line, "err.msg is not terminated");
    if (!strstr(err.msg, path)) wmt_fail(file, line, "message \"%s\" lacks the path", err.msg);
    if (!strstr(err.msg, "offset"))
        wmt_fail(file, line, "message \"%s\" lacks \"offset\"", err.msg);
    if (needle && !strstr(err.msg, needle))
        wmt_fail(file, line, "message \"%s\" lacks \"%s\"", err.msg, needle);
    if (wmt_count_fds() != fds) wmt_fail(file, line, "a descriptor was left open");
    if (wmt_count_file_maps(path) != 0) wmt_fail(file, line, "the file is still mapped");
    wmt_check_ledger_empty(file, line);
}

#endif /* WM_GGUF_BUILDER_H */
