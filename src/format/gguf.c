/*
 * gguf.c: the GGUF reader (versions 1, 2 and 3), hostile-input safe.
 *
 * It parses bytes: the header's bytes are read or mapped by src/open/header.c, which passes them
 * here (wm__gguf_pass) until they hold the whole header.
 *
 * Sections: the metadata (values, arrays of arrays to a bounded depth, strings
 * referenced in place); the tensor table; validation of the data section (inside the file,
 * aligned, no overlap); the name blob.
 *
 * Every count, length and offset read from the file is checked against the bytes left and
 * against overflow before it is used. A check that fails names the file, the offset and the
 * field. v1 differs from v2/v3 only in width: counts, string and array lengths and dimensions
 * are 32-bit there.
 */
#include "parse.h"

#include <stdio.h>
#include <stdlib.h>

#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_ALIGNMENT (1u << 20)
#define GGUF_MAX_NAME 64 /* bytes including the NUL, as llama.cpp's GGML_MAX_NAME */
#define GGUF_MAX_DEPTH 8 /* arrays of arrays */
static const uint8_t value_size[WM_VALUE_TYPE_COUNT] = {
    [WM_VALUE_U8] = 1,  [WM_VALUE_I8] = 1,  [WM_VALUE_U16] = 2, [WM_VALUE_I16] = 2,
    [WM_VALUE_U32] = 4, [WM_VALUE_I32] = 4, [WM_VALUE_F32] = 4, [WM_VALUE_BOOL] = 1,
    [WM_VALUE_U64] = 8, [WM_VALUE_I64] = 8, [WM_VALUE_F64] = 8,
    /* STRING and ARRAY have no fixed size */
};

static bool fail(wm__gguf_state *s, size_t at, const char *fmt, ...) WM_PRINTF(3, 4);
static bool fail(wm__gguf_state *s, size_t at, const char *fmt, ...) {
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    wm__err(s->r.err, WM_EFORMAT, 0, "%s: at offset %zu (0x%zx): %s", s->r.path, at, at, what);
    return false;
}

/* ---- values ---- */

static bool skip_value(wm__gguf_state *s, uint32_t type, unsigned depth, const char *field);

static bool skip_string(wm__gguf_state *s, const char *field) {
    uint64_t n;
    if (!wm__rd_len(&s->r, s->lenw, &n, field)) return false;
    if (!wm__rd_have(&s->r, n, field)) return false;
    s->r.pos += (size_t)n;
    return true;
}

/* Reads an array header and skips its elements; the header fields go to *elem and *count. */
static bool skip_array(wm__gguf_state *s, unsigned depth, uint32_t *elem_out, uint64_t *count_out,
                       const char *field) {
    size_t at = s->r.pos;
    uint32_t elem;
    uint64_t count;
    if (!wm__rd_u32(&s->r, &elem, "array element type")) return false;
    if (elem >= WM_VALUE_TYPE_COUNT)
        return fail(s, at, "%s: unknown array element type %u", field, elem);
    if (!wm__rd_len(&s->r, s->lenw, &count, "array length")) return false;
    if (elem == WM_VALUE_ARRAY && depth + 1 >= GGUF_MAX_DEPTH)
        return fail(s, at, "%s: arrays nested deeper than %d", field, GGUF_MAX_DEPTH);
    /* Each element takes at least min bytes: a count larger than the bytes left is refused
     * before any loop runs, and the multiplication is overflow-checked. */
    uint64_t min = elem == WM_VALUE_STRING  ? s->lenw
                   : elem == WM_VALUE_ARRAY ? 4u + s->lenw
                                            : value_size[elem];
    uint64_t bytes;
    if (wm__mul_overflow_u64(count, min, &bytes) || bytes > wm__rd_file_left(&s->r))
        return fail(s, at, "%s: array of %llu %s elements is larger than the %llu bytes left",
                    field, (unsigned long long)count, wm_value_type_name((wm_value_type)elem),
                    (unsigned long long)wm__rd_file_left(&s->r));
    if (elem_out) *elem_out = elem;
    if (count_out) *count_out = count;
    if (elem == WM_VALUE_STRING) {
        for (uint64_t i = 0; i < count; i++)
            if (!skip_string(s, field)) return false;
    } else if (elem == WM_VALUE_ARRAY) {
        for (uint64_t i = 0; i < count; i++)
            if (!skip_value(s, WM_VALUE_ARRAY, depth + 1, field)) return false;
    } else if (elem == WM_VALUE_BOOL) {
        if (!wm__rd_have(&s->r, bytes, field)) return false;
        for (uint64_t i = 0; i < count; i++)
            if (s->r.buf[s->r.pos + i] > 1)
                return fail(s, s->r.pos + (size_t)i, "%s: bool element %llu is %u, not 0 or 1",
                            field, (unsigned long long)i, s->r.buf[s->r.pos + i]);
        s->r.pos += (size_t)bytes;
    } else {
        if (!wm__rd_have(&s->r, bytes, field)) return false;
        s->r.pos += (size_t)bytes;
    }
    return true;
}

static bool skip_value(wm__gguf_state *s, uint32_t type, unsigned depth, const char *field) {
    switch (type) {
    case WM_VALUE_STRING: return skip_string(s, field);
    case WM_VALUE_ARRAY: return skip_array(s, depth, NULL, NULL, field);
    case WM_VALUE_BOOL:
        if (!wm__rd_have(&s->r, 1, field)) return false;
        if (s->r.buf[s->r.pos] > 1)
            return fail(s, s->r.pos, "%s: bool value is %u, not 0 or 1", field, s->r.buf[s->r.pos]);
        s->r.pos += 1;
        return true;
    default:
        if (!wm__rd_have(&s->r, value_size[type], field)) return false;
        s->r.pos += value_size[type];
        return true;
    }
}

/* Reads the length-prefixed name of metadata entry i (a key) or of tensor i: not empty, within
 * its limit (a key inside the file, a tensor name below GGUF_MAX_NAME), no NUL byte. *off is its
 * header offset (a blob offset after build_names), *len its length. */
static bool read_name(wm__gguf_state *s, bool tensor, uint64_t i, uint32_t *off, uint32_t *len) {
    size_t at = s->r.pos;
    unsigned long long li = i;
    uint64_t n;
    if (!wm__rd_len(&s->r, s->lenw, &n, tensor ? "tensor name length" : "key length")) return false;
    if (n == 0)
        return tensor ? fail(s, at, "tensor %llu has an empty name", li)
                      : fail(s, at, "metadata key %llu is empty", li);
    if (tensor && n >= GGUF_MAX_NAME)
        return fail(s, at, "tensor %llu: name length %llu is not below the limit of %d bytes", li,
                    (unsigned long long)n, GGUF_MAX_NAME);
    if (!tensor && (n > UINT32_MAX || n > wm__rd_file_left(&s->r)))
        return fail(s, at, "metadata key %llu: length %llu runs past the end of the file", li,
                    (unsigned long long)n);
    if (!wm__rd_have(&s->r, n, tensor ? "tensor name" : "key")) return false;
    if (memchr(s->r.buf + s->r.pos, 0, (size_t)n))
        return tensor ? fail(s, at, "tensor %llu: name contains a NUL byte", li)
                      : fail(s, at, "metadata key %llu contains a NUL byte", li);
    *off = (uint32_t)s->r.pos;
    *len = (uint32_t)n;
    s->r.pos += (size_t)n;
    return true;
}

static bool parse_kv(wm__gguf_state *s, uint64_t i) {
    wm__kv *kv = &s->f->kvs[i];
    if (!read_name(s, false, i, &kv->key_off, &kv->key_len)) return false;

    char field[96];
    snprintf(field, sizeof field, "value of '%.*s'", (int)(kv->key_len < 60 ? kv->key_len : 60),
             (const char *)s->r.buf + kv->key_off);
    size_t tat = s->r.pos;
    uint32_t type;
    if (!wm__rd_u32(&s->r, &type, "value type")) return false;
    if (type >= WM_VALUE_TYPE_COUNT) return fail(s, tat, "%s: unknown value type %u", field, type);
    kv->type = (uint8_t)type;
    kv->lenw = (uint8_t)s->lenw;
    kv->length = 1;
    if (type == WM_VALUE_ARRAY) {
        uint32_t elem;
        uint64_t count;
        if (!skip_array(s, 0, &elem, &count, field)) return false;
        kv->elem_type = (uint8_t)elem;
        kv->length = count;
        kv->val = s->r.buf + tat + 4 + 4 + s->lenw;
    } else if (type == WM_VALUE_STRING) {
        uint64_t n;
        if (!wm__rd_len(&s->r, s->lenw, &n, field)) return false;
        if (!wm__rd_have(&s->r, n, field)) return false;
        kv->length = n;
        kv->val = s->r.buf + s->r.pos;
        s->r.pos += (size_t)n;
    } else {
        kv->val = s->r.buf + s->r.pos;
        if (!skip_value(s, type, 0, field)) return false;
    }
    return true;
}

/* ---- tensors ---- */

static bool parse_tensor(wm__gguf_state *s, uint64_t i) {
    wm__tensor *t = &s->f->tensors[i];
    if (!read_name(s, true, i, &t->name_off, &t->name_len)) return false;
    const char *name = (const char *)s->r.buf + t->name_off;
    int nl = (int)t->name_len;

    size_t dat = s->r.pos;
    uint32_t n_dims;
    if (!wm__rd_u32(&s->r, &n_dims, "n_dims")) return false;
    if (n_dims > WM_MAX_DIMS)
        return fail(s, dat, "tensor '%.*s': n_dims %u is more than %d", nl, name, n_dims,
                    WM_MAX_DIMS);
    t->n_dims = n_dims;
    uint64_t n_el = 1;
    for (unsigned d = 0; d < WM_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (unsigned d = 0; d < n_dims; d++) {
        size_t eat = s->r.pos;
        uint64_t ne;
        if (!wm__rd_len(&s->r, s->lenw, &ne, "dimension")) return false;
        if (ne > (uint64_t)INT64_MAX)
            return fail(s, eat, "tensor '%.*s': dimension %u is negative (%lld)", nl, name, d,
                        (long long)ne);
        t->ne[d] = ne;
        if (wm__mul_overflow_u64(n_el, ne, &n_el) || n_el > (uint64_t)INT64_MAX)
            return fail(s, eat, "tensor '%.*s': element count overflows at dimension %u", nl, name,
                        d);
    }
    t->n_elements = n_el;

    size_t tat = s->r.pos;
    uint32_t type;
    if (!wm__rd_u32(&s->r, &type, "tensor type")) return false;
    uint32_t blk = wm_type_block_elems((wm_type)type);
    if (type >= WM_GGML_TYPE_COUNT || blk == 0)
        return fail(s, tat, "tensor '%.*s': type id %u is %s", nl, name, type,
                    type < WM_GGML_TYPE_COUNT ? "a removed ggml type" : "unknown");
    t->type = (int32_t)type;
    if (t->ne[0] % blk != 0)
        return fail(s, tat,
                    "tensor '%.*s': row of %llu elements is not a multiple of the %s block "
                    "of %u",
                    nl, name, (unsigned long long)t->ne[0], wm_type_name((wm_type)type), blk);
    /* bytes = ne0 / blk * block_bytes * ne1 * ne2 * ne3, each step overflow-checked */
    uint64_t bytes = t->ne[0] / blk;
    bool over = wm__mul_overflow_u64(bytes, wm_type_block_bytes((wm_type)type), &bytes);
    for (unsigned d = 1; d < WM_MAX_DIMS && !over; d++)
        over = wm__mul_overflow_u64(bytes, t->ne[d], &bytes);
    if (over || bytes > (uint64_t)INT64_MAX)
        return fail(s, tat, "tensor '%.*s': byte size overflows", nl, name);
    t->nbytes = bytes;

    uint64_t off;
    if (!wm__rd_u64(&s->r, &off, "tensor offset")) return false;
    t->offset = off; /* relative until the data offset is known */
    return true;
}

/* Overlap check: tensors sorted by offset. */
typedef struct span {
    uint64_t off, end;
    uint32_t i;
} span;
static int by_offset(const void *a, const void *b) {
    uint64_t x = ((const span *)a)->off, y = ((const span *)b)->off;
    return x < y ? -1 : x > y;
}

static bool check_data(wm__gguf_state *s, size_t infos_end) {
    wm_file *f = s->f;
    uint64_t data_off = wm__align_up(infos_end, f->alignment);
    f->data_offset = data_off;
    if (f->n_tensors == 0) {
        /* A file without tensors may end right after its metadata (no padding). */
        return true;
    }
    if (data_off > f->size)
        return fail(s, infos_end,
                    "data section starts at %llu (aligned to %u), past the end of the "
                    "%llu-byte file",
                    (unsigned long long)data_off, f->alignment, (unsigned long long)f->size);
    uint64_t data_len = f->size - data_off, sum = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        wm__tensor *t = &f->tensors[i];
        const char *name = (const char *)s->r.buf + t->name_off;
        int nl = (int)t->name_len;
        if (t->offset % f->alignment != 0)
            return fail(s, infos_end,
                        "tensor '%.*s': data offset %llu is not a multiple of the "
                        "alignment %u",
                        nl, name, (unsigned long long)t->offset, f->alignment);
        uint64_t end;
        if (wm__add_overflow_u64(t->offset, t->nbytes, &end) || end > data_len)
            return fail(s, infos_end,
                        "tensor '%.*s' at data offset %llu (file offset %llu) with %llu "
                        "bytes ends past the end of the file (%llu data bytes)",
                        nl, name, (unsigned long long)t->offset,
                        (unsigned long long)(data_off + t->offset), (unsigned long long)t->nbytes,
                        (unsigned long long)data_len);
        if (wm__add_overflow_u64(sum, t->nbytes, &sum) || sum > data_len)
            return fail(s, infos_end, "tensor sizes add up to more than the %llu data bytes",
                        (unsigned long long)data_len);
        t->offset += data_off;
    }
    f->tensor_bytes = sum;
    /* Overlap: sort by offset and compare neighbours (padding between tensors is legal). */
    span *sp = wm__alloc(f->n_tensors * sizeof *sp);
    if (!sp) {
        wm__err(s->r.err, WM_ENOMEM, 0, "%s: out of memory sorting %zu tensors", s->r.path,
                f->n_tensors);
        return false;
    }
    for (size_t i = 0; i < f->n_tensors; i++)
        sp[i] =
            (span){f->tensors[i].offset, f->tensors[i].offset + f->tensors[i].nbytes, (uint32_t)i};
    qsort(sp, f->n_tensors, sizeof *sp, by_offset);
    /* Each non-empty tensor is compared with the one reaching furthest before it, not just its
     * neighbour: an empty tensor sorted in between must not hide an overlap. */
    bool ok = true;
    size_t last = SIZE_MAX; /* the non-empty tensor with the largest end so far */
    for (size_t i = 0; i < f->n_tensors && ok; i++) {
        if (sp[i].end == sp[i].off) continue;
        if (last == SIZE_MAX || sp[last].end <= sp[i].off) {
            if (last == SIZE_MAX || sp[i].end > sp[last].end) last = i;
            continue;
        }
        const wm__tensor *a = &f->tensors[sp[last].i], *b = &f->tensors[sp[i].i];
        ok = fail(s, infos_end,
                  "tensor '%.*s' (offset %llu, %llu bytes) overlaps tensor '%.*s' "
                  "(offset %llu)",
                  (int)a->name_len, (const char *)s->r.buf + a->name_off,
                  (unsigned long long)a->offset, (unsigned long long)a->nbytes, (int)b->name_len,
                  (const char *)s->r.buf + b->name_off, (unsigned long long)b->offset);
    }
    wm__free(sp);
    return ok;
}

/* ---- driver ---- */

/* Why entries are allocated as they are parsed rather than all at once: the counts are bounded
 * only by the bytes left in the file, so a sparse file of a few GiB claiming hundreds of
 * millions of entries would cost ~3x its size in memory before its first entry is read. The
 * array starts at up to 1024 zeroed entries and doubles, never past `max`. Returns the (possibly
 * moved) array, or NULL with err filled. */
static void *reserve(wm__gguf_state *s, void *arr, size_t *cap, uint64_t max, size_t elem,
                     const char *what) {
    size_t n = *cap ? *cap * 2 : 1024;
    if (n > max) n = (size_t)max; /* max < UINT32_MAX: n * elem cannot overflow */
    unsigned char *p = wm__realloc(arr, n * elem);
    if (!p) {
        wm__err(s->r.err, WM_ENOMEM, 0, "%s: out of memory for %zu %s", s->r.path, n, what);
        return NULL;
    }
    memset(p + *cap * elem, 0, (n - *cap) * elem);
    *cap = n;
    return p;
}

/* One pass over the buffer. Returns true on success; false with need_more set when the buffer
 * was too short, or with err filled. */
bool wm__gguf_pass(wm__gguf_state *s) {
    wm_file *f = s->f;
    wm__cursor *r = &s->r;
    r->pos = 0;
    r->need_more = false;

    if (!wm__rd_have(r, 4, "magic")) return false;
    if (memcmp(r->buf, "GGUF", 4) != 0) {
        if (r->len >= 7 && memcmp(r->buf, "version", 7) == 0)
            return fail(s, 0,
                        "not a GGUF file: it is a text file starting with \"version\" "
                        "(a Git LFS pointer?)");
        /* open.c sends here what it found no format in: say both were looked for */
        return fail(s, 0,
                    "bad magic %02x %02x %02x %02x: not a GGUF file (no \"GGUF\" magic) nor "
                    "safetensors (no 8-byte header length then '{'), the formats weightmap reads",
                    r->buf[0], r->buf[1], r->buf[2], r->buf[3]);
    }
    r->pos = 4;
    uint32_t version;
    if (!wm__rd_u32(r, &version, "version")) return false;
    if (version < 1 || version > 3) {
        uint32_t sw = __builtin_bswap32(version);
        if (sw >= 1 && sw <= 3)
            return fail(s, 4, "big-endian GGUF (version %u byte-swapped) is not supported", sw);
        return fail(s, 4, "unsupported GGUF version %u (1, 2 and 3 are read)", version);
    }
    f->version = version;
    s->lenw = version == 1 ? 4 : 8;

    size_t cat = r->pos;
    uint64_t nt, nk;
    if (!wm__rd_len(r, s->lenw, &nt, "n_tensors")) return false;
    if (!wm__rd_len(r, s->lenw, &nk, "n_kv")) return false;
    /* The smallest tensor info and KV bound the counts by the bytes left. */
    uint64_t left = wm__rd_file_left(r);
    if (nt > left / (s->lenw + 1 + 4 + 4 + 8) || nt >= UINT32_MAX)
        return fail(s, cat, "n_tensors %llu is larger than the %llu bytes left could hold",
                    (unsigned long long)nt, (unsigned long long)left);
    if (nk > left / (s->lenw + 1 + 4 + 1) || nk >= UINT32_MAX)
        return fail(s, cat + s->lenw, "n_kv %llu is larger than the %llu bytes left could hold",
                    (unsigned long long)nk, (unsigned long long)left);
    f->n_kv = (size_t)nk;
    f->n_tensors = (size_t)nt;

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < nk; i++) {
        size_t at = r->pos;
        if (i >= s->kv_cap) {
            void *p = reserve(s, f->kvs, &s->kv_cap, nk, sizeof *f->kvs, "metadata entries");
            if (!p) return false;
            f->kvs = p;
        }
        if (!parse_kv(s, i)) return false;
        wm__kv *kv = &f->kvs[i];
        if (kv->key_len == 17 && memcmp(r->buf + kv->key_off, "general.alignment", 17) == 0) {
            if (kv->type != WM_VALUE_U32)
                return fail(s, at, "general.alignment has type %s, not u32",
                            wm_value_type_name((wm_value_type)kv->type));
            uint32_t a;
            memcpy(&a, kv->val, 4);
            if (a == 0 || (a & (a - 1)) != 0 || a > GGUF_MAX_ALIGNMENT)
                return fail(s, at, "general.alignment %u is not a power of two from 1 to %u", a,
                            GGUF_MAX_ALIGNMENT);
            f->alignment = a;
        }
    }
    for (uint64_t i = 0; i < nt; i++) {
        if (i >= s->t_cap) {
            void *p = reserve(s, f->tensors, &s->t_cap, nt, sizeof *f->tensors, "tensors");
            if (!p) return false;
            f->tensors = p;
        }
        if (!parse_tensor(s, i)) return false;
    }
    f->header_len = r->pos;
    return check_data(s, r->pos);
}

/* Appends the name of `len` bytes at header offset *off to the blob at *p, NUL-terminated, and
 * makes *off its blob offset. */
static void put_name(wm_file *f, size_t *p, uint32_t *off, uint32_t len) {
    memcpy(f->names + *p, f->header + *off, len);
    *off = (uint32_t)*p;
    *p += len;
    f->names[(*p)++] = 0;
}

/* Copies keys and tensor names into one NUL-terminated blob and rebases their offsets. */
wm_status wm__gguf_names(wm_file *f, const char *path, wm_error *err) {
    size_t total = 1;
    for (size_t i = 0; i < f->n_kv; i++)
        total += (size_t)f->kvs[i].key_len + 1;
    for (size_t i = 0; i < f->n_tensors; i++)
        total += (size_t)f->tensors[i].name_len + 1;
    f->names = wm__alloc(total);
    if (!f->names) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory for names", path);
    size_t p = 0;
    f->names[p++] = 0;
    for (size_t i = 0; i < f->n_kv; i++)
        put_name(f, &p, &f->kvs[i].key_off, f->kvs[i].key_len);
    for (size_t i = 0; i < f->n_tensors; i++)
        put_name(f, &p, &f->tensors[i].name_off, f->tensors[i].name_len);
    f->names_len = p;
    return WM_OK;
}
