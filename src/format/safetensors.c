/*
 * safetensors.c: the safetensors header reader: the 8-byte length, then the JSON (json.h) walked
 * into the tensor table and __metadata__, with every check of the reference implementation.
 *
 * Against the reference (huggingface/safetensors 0.8, checked file by file): the same files are
 * accepted and refused, except where this reader is stricter on purpose: a name, key or value
 * holding \u0000, a repeated __metadata__ key (the reference keeps the last) and more than
 * WM_MAX_DIMS dimensions are refused. Every dtype of the reference has a wm_type. Tensors keep the
 * header's order; safetensors shapes (outermost first) are reversed into ggml order.
 */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER 100000000ull /* the reference's MAX_HEADER_SIZE */

typedef struct dtype_row {
    const char *name;
    wm_type type; /* WM_TYPE_INVALID: known to the format, not supported here */
} dtype_row;

static const dtype_row dtypes[] = {
    {"BOOL", WM_TYPE_BOOL},
    {"U8", WM_TYPE_U8},
    {"I8", WM_TYPE_I8},
    {"F8_E4M3", WM_TYPE_F8_E4M3},
    {"F8_E5M2", WM_TYPE_F8_E5M2},
    {"F8_E8M0", WM_TYPE_F8_E8M0},
    {"I16", WM_TYPE_I16},
    {"U16", WM_TYPE_U16},
    {"F16", WM_TYPE_F16},
    {"BF16", WM_TYPE_BF16},
    {"I32", WM_TYPE_I32},
    {"U32", WM_TYPE_U32},
    {"F32", WM_TYPE_F32},
    {"F64", WM_TYPE_F64},
    {"I64", WM_TYPE_I64},
    {"U64", WM_TYPE_U64},
    {"F4", WM_TYPE_F4},
    {"F6_E2M3", WM_TYPE_F6_E2M3},
    {"F6_E3M2", WM_TYPE_F6_E3M2},
    {"C64", WM_TYPE_C64},
    {"F8_E4M3FNUZ", WM_TYPE_F8_E4M3FNUZ},
    {"F8_E5M2FNUZ", WM_TYPE_F8_E5M2FNUZ},
};

typedef struct span {
    uint64_t begin, end;
    size_t i; /* tensor index */
} span;

static int by_offsets(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

typedef struct hdr {
    wm_file *f;
    const char *path;
    wm_error *err;
    span *spans;
    const wm__jval **names; /* the member of each tensor */
} hdr;

/* One tensor member: dtype, shape (reversed into ggml order) and data_offsets; other fields are
 * ignored, as the reference does. */
static wm_status parse_tensor(hdr *h, const wm__jval *m, size_t ti) {
    const char *name = m->key, *path = h->path;
    wm__tensor *t = &h->f->tensors[ti];
    if (m->type != WM_JOBJECT)
        return wm__json_err(h->err, path, 8, "tensor '%s' is a JSON %s, not an object", name,
                            wm__json_kind(m));
    const wm__jval *dt = NULL, *sh = NULL, *off = NULL;
    uint64_t dims[WM_MAX_DIMS], n_el = 1;
    size_t n_dims = 0;
    uint64_t ob[2] = {0, 0};
    for (const wm__jval *c = m->child; c; c = c->next) {
        const char *k = c->key;
        const wm__jval **slot = !strcmp(k, "dtype")          ? &dt
                                : !strcmp(k, "shape")        ? &sh
                                : !strcmp(k, "data_offsets") ? &off
                                                             : NULL;
        if (!slot) continue;
        if (*slot)
            return wm__json_err(h->err, path, 8, "tensor '%s': field '%s' appears twice", name, k);
        *slot = c;
        if (slot == &dt) {
            if (c->type != WM_JSTRING)
                return wm__json_err(h->err, path, 8,
                                    "tensor '%s': dtype is a JSON %s, not a string", name,
                                    wm__json_kind(c));
            continue;
        }
        if (c->type != WM_JARRAY)
            return wm__json_err(h->err, path, 8, "tensor '%s': %s is a JSON %s, not an array", name,
                                k, wm__json_kind(c));
        size_t j = 0;
        for (const wm__jval *e = c->child; e; e = e->next, j++) {
            if (e->type != WM_JNUMBER || !e->exact)
                return wm__json_err(h->err, path, 8,
                                    "tensor '%s': %s[%zu] is not a non-negative integer that "
                                    "fits 64 bits",
                                    name, k, j);
            if (slot == &sh) {
                if (j < WM_MAX_DIMS) dims[j] = e->u;
                if (wm__mul_overflow_u64(n_el, e->u, &n_el))
                    return wm__json_err(h->err, path, 8,
                                        "tensor '%s': the element count of the shape "
                                        "overflows 64 bits",
                                        name);
            } else if (j < 2) {
                ob[j] = e->u;
            }
        }
        if (slot == &sh)
            n_dims = j;
        else if (j != 2)
            return wm__json_err(h->err, path, 8, "tensor '%s': data_offsets has %zu entries, not 2",
                                name, j);
    }
    if (!dt || !sh || !off)
        return wm__json_err(h->err, path, 8, "tensor '%s' has no %s field", name,
                            !dt   ? "dtype"
                            : !sh ? "shape"
                                  : "data_offsets");
    const dtype_row *row = NULL;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(dtypes[i].name, dt->str)) row = &dtypes[i];
    if (!row)
        return wm__json_err(h->err, path, 8, "tensor '%s': unknown dtype '%.40s'", name, dt->str);
    if (row->type == WM_TYPE_INVALID)
        return wm__err(h->err, WM_EUNSUPPORTED, 0, "%s: tensor '%s': dtype %s is not supported",
                       path, name, row->name);
    if (n_dims > WM_MAX_DIMS)
        return wm__json_err(h->err, path, 8,
                            "tensor '%s' has %zu dimensions; at most %d are supported", name,
                            n_dims, WM_MAX_DIMS);
    /* Sub-byte types must fill whole bytes: the reference's bit count % 8 check. */
    uint32_t be = wm_type_block_elems(row->type), bb = wm_type_block_bytes(row->type);
    if (n_el % be)
        return wm__json_err(h->err, path, 8,
                            "tensor '%s': %llu elements of %s do not fill whole bytes", name,
                            (unsigned long long)n_el, row->name);
    uint64_t nbytes;
    if (wm__mul_overflow_u64(n_el / be, bb, &nbytes))
        return wm__json_err(h->err, path, 8, "tensor '%s': the byte size overflows 64 bits", name);
    t->type = (int32_t)row->type;
    t->n_dims = (uint32_t)n_dims;
    for (int d = 0; d < WM_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (size_t d = 0; d < n_dims; d++)
        t->ne[d] = dims[n_dims - 1 - d];
    t->n_elements = n_el;
    t->nbytes = nbytes;
    h->spans[ti] = (span){ob[0], ob[1], ti};
    h->names[ti] = m;
    return WM_OK;
}

/* Sorted by offsets, the tensors must tile the data section exactly (the reference's validate). */
static wm_status check_layout(hdr *h, uint64_t data_start, uint64_t data_len) {
    wm_file *f = h->f;
    if (f->n_tensors) qsort(h->spans, f->n_tensors, sizeof *h->spans, by_offsets);
    uint64_t at = 0;
    const char *prev = NULL;
    for (size_t k = 0; k < f->n_tensors; k++) {
        const span *s = &h->spans[k];
        const char *name = h->names[s->i]->key;
        wm__tensor *t = &f->tensors[s->i];
        if (s->end < s->begin)
            return wm__json_err(h->err, h->path, data_start + s->begin,
                                "tensor '%s': data_offsets [%llu, %llu] end before they begin",
                                name, (unsigned long long)s->begin, (unsigned long long)s->end);
        if (s->begin < at)
            return wm__json_err(
                h->err, h->path, data_start + s->begin,
                "tensor '%s' (data_offsets [%llu, %llu]) overlaps tensor '%s', which ends "
                "at %llu",
                name, (unsigned long long)s->begin, (unsigned long long)s->end, prev,
                (unsigned long long)at);
        if (s->begin > at)
            return wm__json_err(
                h->err, h->path, data_start + at,
                "%llu bytes at data offset %llu belong to no tensor (gap before tensor '%s')",
                (unsigned long long)(s->begin - at), (unsigned long long)at, name);
        if (s->end - s->begin != t->nbytes)
            return wm__json_err(
                h->err, h->path, data_start + s->begin,
                "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, but its shape and "
                "dtype need %llu",
                name, (unsigned long long)s->begin, (unsigned long long)s->end,
                (unsigned long long)(s->end - s->begin), (unsigned long long)t->nbytes);
        if (s->end > data_len)
            return wm__json_err(
                h->err, h->path, data_start + s->begin,
                "tensor '%s' (data_offsets [%llu, %llu]) ends past the end of the file "
                "(%llu data bytes)",
                name, (unsigned long long)s->begin, (unsigned long long)s->end,
                (unsigned long long)data_len);
        t->offset = data_start + s->begin;
        at = s->end;
        prev = name;
    }
    if (at != data_len)
        return wm__json_err(h->err, h->path, data_start + at,
                            "%llu bytes follow the last tensor's data; the data must end the file",
                            (unsigned long long)(data_len - at));
    return WM_OK;
}

static void free_blob(void *p) { wm__free(p); }

/* Everything after the JSON is parsed: members to tensors and metadata, names and values. */
static wm_status parse_members(hdr *h, const wm__jval *root, uint64_t hlen) {
    wm_file *f = h->f;
    const char *path = h->path;
    if (root->type != WM_JOBJECT)
        return wm__json_err(h->err, path, 8, "the header is a JSON %s, not an object",
                            wm__json_kind(root));
    const wm__jval *meta = NULL;
    size_t n_members = 0;
    for (const wm__jval *m = root->child; m; m = m->next) {
        n_members++;
        if (strcmp(m->key, "__metadata__") != 0) continue;
        if (meta) return wm__json_err(h->err, path, 8, "__metadata__ appears twice");
        meta = m;
    }
    size_t nt = n_members - (meta ? 1 : 0), nk = 0;
    if (meta && meta->type != WM_JNULL) {
        if (meta->type != WM_JOBJECT)
            return wm__json_err(h->err, path, 8,
                                "__metadata__ is a JSON %s, not an object of strings",
                                wm__json_kind(meta));
        for (const wm__jval *c = meta->child; c; c = c->next, nk++)
            if (c->type != WM_JSTRING)
                return wm__json_err(h->err, path, 8, "__metadata__ '%s' is a JSON %s, not a string",
                                    c->key, wm__json_kind(c));
    }
    if (nt) {
        f->tensors = wm__calloc(nt, sizeof *f->tensors);
        h->spans = nt <= SIZE_MAX / sizeof *h->spans ? wm__json_alloc(nt * sizeof *h->spans) : NULL;
        h->names = nt <= SIZE_MAX / sizeof *h->names ? wm__json_alloc(nt * sizeof *h->names) : NULL;
        if (!f->tensors || !h->spans || !h->names)
            return wm__err(h->err, WM_ENOMEM, 0, "%s: out of memory for %zu tensors", path, nt);
    }
    if (nk && !(f->kvs = wm__calloc(nk, sizeof *f->kvs)))
        return wm__err(h->err, WM_ENOMEM, 0, "%s: out of memory for %zu metadata entries", path,
                       nk);
    f->n_tensors = nt;
    f->n_kv = nk;
    size_t ti = 0;
    for (const wm__jval *m = root->child; m; m = m->next) {
        if (m == meta) continue;
        wm_status st = parse_tensor(h, m, ti++);
        if (st) return st;
    }
    uint64_t data_start = 8 + hlen, data_len = f->size - data_start;
    wm_status st = check_layout(h, data_start, data_len);
    if (st) return st;

    /* Names blob: keys, then tensor names. Values blob (aux): metadata strings. */
    wm__gbuf names = {0}, vals = {0};
    wm__gput(&names, "", 1);
    size_t k = 0;
    if (nk)
        for (const wm__jval *c = meta->child; c; c = c->next, k++) {
            wm__kv *kv = &f->kvs[k];
            kv->key_off = (uint32_t)wm__gput_str(&names, c->key);
            kv->key_len = (uint32_t)strlen(c->key);
            kv->type = WM_VALUE_STRING;
            kv->lenw = 8;
            kv->length = c->len;
            kv->val = (const unsigned char *)(uintptr_t)wm__gput_str(&vals, c->str);
        }
    for (size_t i = 0; i < nt; i++) {
        const char *nm = h->names[i]->key;
        f->tensors[i].name_off = (uint32_t)wm__gput_str(&names, nm);
        f->tensors[i].name_len = (uint32_t)strlen(nm);
    }
    if (names.oom || vals.oom || names.len > UINT32_MAX) {
        wm__free(names.p);
        wm__free(vals.p);
        return wm__err(h->err, WM_ENOMEM, 0, "%s: out of memory for names", path);
    }
    f->names = names.p;
    f->names_len = names.len;
    f->aux = vals.p;
    f->aux_free = free_blob;
    for (size_t i = 0; i < nk; i++)
        f->kvs[i].val = (const unsigned char *)vals.p + (uintptr_t)f->kvs[i].val;
    uint64_t sum = 0;
    for (size_t i = 0; i < nt; i++)
        sum += f->tensors[i].nbytes;
    f->tensor_bytes = sum;
    f->version = 1;
    f->alignment = 1;
    f->data_offset = data_start;
    f->shards[0].data_offset = data_start;
    return WM_OK;
}

wm_status wm__safetensors_header_len(const wm_file *f, const unsigned char lb[8], uint64_t *hlen,
                                     wm_error *err) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | lb[i];
    if (n > ST_MAX_HEADER)
        return wm__json_err(err, f->path, 0,
                            "header length %llu is more than the limit of %llu bytes",
                            (unsigned long long)n, ST_MAX_HEADER);
    if (n > f->size - 8)
        return wm__json_err(err, f->path, 0,
                            "a header of %llu bytes runs past the end of the %llu-byte file",
                            (unsigned long long)n, (unsigned long long)f->size);
    *hlen = n;
    return WM_OK;
}

wm_status wm__safetensors_header(wm_file *f, const unsigned char *text, uint64_t hlen,
                                 wm_error *err) {
    hdr h = {.f = f, .path = f->path, .err = err};
    const wm__jval *root = NULL;
    wm__json_begin();
    wm_status st = wm__json_load(text, (size_t)hlen, 8, f->path, &root, err);
    if (!st) st = parse_members(&h, root, hlen);
    wm__json_end(); /* the tree, the number list, spans and names */
    return st;
}
