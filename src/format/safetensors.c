/*
 * safetensors.c: the safetensors reader, and the reader of a sharded checkpoint's index
 * (*.safetensors.index.json).
 *
 * Sections: cJSON through the counted allocator (a page-allocated arena per parse); a strict
 * pre-scan of the JSON text; the walk over cJSON's tree (exact numbers); the header (tensor table
 * and __metadata__, with every check of the reference implementation); the index of a sharded
 * checkpoint.
 *
 * Against the reference (huggingface/safetensors 0.8, checked file by file): the same files are
 * accepted and refused, except where this reader is stricter on purpose: a name, key or value
 * holding \u0000, a repeated __metadata__ key (the reference keeps the last) and more than
 * WM_MAX_DIMS dimensions are refused. Every dtype of the reference has a wm_type. Tensors keep the
 * header's order; safetensors shapes (outermost first) are reversed into ggml order.
 *
 * Why a pre-scan before cJSON: cJSON accepts text that is not JSON (control bytes as white space,
 * a byte-order mark, numbers such as 01 or 1.), keeps both of two equal keys, reads every number
 * as a double (inexact above 2^53), and recurses once per nesting level. The pre-scan checks the
 * whole text as UTF-8 and every token against the JSON grammar, bounds the nesting depth before
 * cJSON recurses, refuses \u0000 (names are NUL-terminated here), and records the exact value of
 * every number token in document order. cJSON's tree keeps document order, so the walk takes each
 * number's exact value from that list as it meets the number. Duplicate keys are refused by the
 * walk and by wm__file_index.
 */
#include "../internal.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER 100000000ull /* the reference's MAX_HEADER_SIZE */
#define ST_MAX_DEPTH 128           /* serde_json's recursion limit; a valid header needs 3 */

static wm_status ferr(wm_error *err, const char *path, uint64_t at, const char *fmt, ...)
    WM_PRINTF(4, 5);
static wm_status ferr(wm_error *err, const char *path, uint64_t at, const char *fmt, ...) {
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return wm__err(err, WM_EFORMAT, 0, "%s: at offset %llu: %s", path, (unsigned long long)at,
                   what);
}

/* ---- cJSON through the counted allocator ----
 * cJSON's hooks are global and its parser writes a global error position, so every call into
 * cJSON runs under one spin lock (headers parse in milliseconds), with our hooks set for the call
 * and cJSON's defaults (malloc and free) put back after it: a program that uses cJSON itself keeps
 * malloc'd trees outside our calls (it must not call cJSON on another thread during one).
 * While a header or an index is being read on a thread (json_begin to json_end), cJSON's nodes
 * and the reader's scratch come from an arena of page-allocated chunks (ledger: scratch) that
 * json_end frees whole; cJSON's frees are no-ops then. Why: a header of N tensors makes about 12N
 * small nodes, and small blocks freed to malloc stay in the process (glibc keeps its heap top),
 * which `weightmap check` would report as memory not returned. Outside an arena the hooks use the
 * counted allocator. An allocation that fails marks the read as out of memory, so that it is
 * not reported as bad JSON. */

#define ARENA_CHUNK ((size_t)64 * 1024)
#define ARENA_MAX_CHUNK ((size_t)64 * 1024 * 1024)
#define ARENA_HDR ((size_t)32)

typedef struct chunk {
    struct chunk *next;
    size_t size, used;
} chunk;

static _Thread_local bool json_oom;
static _Thread_local bool arena_on;
static _Thread_local chunk *arena; /* newest first */
static atomic_flag json_lock = ATOMIC_FLAG_INIT;

static void *arena_alloc(size_t n) {
    if (n > SIZE_MAX - ARENA_HDR - 15) return NULL;
    n = (n + 15) & ~(size_t)15;
    chunk *c = arena;
    if (!c || c->size - c->used < n) {
        size_t size = c ? c->size * 2 : ARENA_CHUNK;
        if (size > ARENA_MAX_CHUNK) size = ARENA_MAX_CHUNK;
        if (size < n + ARENA_HDR)
            size = (n + ARENA_HDR + ARENA_CHUNK - 1) / ARENA_CHUNK * ARENA_CHUNK;
        void *p;
        if (wm__scratch_alloc(size, &p)) return NULL;
        c = p;
        c->next = arena;
        c->size = size;
        c->used = ARENA_HDR;
        arena = c;
    }
    void *r = (char *)c + c->used;
    c->used += n;
    return r;
}

static void json_begin(void) {
    arena_on = true;
    json_oom = false;
}

static void json_end(void) {
    while (arena) {
        chunk *c = arena;
        arena = c->next;
        wm__scratch_free(c, c->size);
    }
    arena_on = false;
}

static void *json_alloc(size_t n) {
    void *p = arena_on ? arena_alloc(n) : wm__alloc(n);
    if (!p) json_oom = true;
    return p;
}

static void json_free(void *p) {
    if (!arena_on) wm__free(p);
}

static void json_enter(void) {
    while (atomic_flag_test_and_set_explicit(&json_lock, memory_order_acquire)) {
    }
    cJSON_Hooks h = {json_alloc, json_free};
    cJSON_InitHooks(&h);
}

static void json_leave(void) {
    cJSON_InitHooks(NULL); /* malloc and free again */
    atomic_flag_clear_explicit(&json_lock, memory_order_release);
}

/* Parses len bytes of text. Returns the tree, or NULL with *oom or *end (the error offset). */
static cJSON *json_parse(const unsigned char *text, size_t len, size_t *end, bool *oom) {
    json_enter();
    const char *stop = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)text, len, &stop, 0);
    json_leave();
    *oom = json_oom;
    *end = stop ? (size_t)(stop - (const char *)text) : 0;
    if (*end > len) *end = len;
    return *oom ? NULL : root; /* the arena holds whatever was built */
}

/* ---- the pre-scan ---- */

typedef struct jnum {
    uint64_t u;
    bool exact; /* a plain non-negative integer that fits 64 bits: u is its value */
} jnum;

typedef struct jscan {
    jnum *v;
    size_t n, cap, next; /* next: the walk's cursor */
} jscan;

/* Index of the first byte that is not part of valid UTF-8 (no overlong forms, no surrogates,
 * nothing above U+10FFFF), or n. */
static size_t utf8_bad(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0)
            len = 2, cp = c & 0x1f, min = 0x80;
        else if ((c & 0xf0) == 0xe0)
            len = 3, cp = c & 0x0f, min = 0x800;
        else if ((c & 0xf8) == 0xf0)
            len = 4, cp = c & 0x07, min = 0x10000;
        else
            return i;
        if (n - i < len) return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return i;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
        i += len;
    }
    return n;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static bool push_num(jscan *js, uint64_t u, bool exact) {
    if (js->n == js->cap) {
        size_t cap = js->cap ? js->cap * 2 : 64;
        jnum *v = json_alloc(cap * sizeof *v); /* arena: the old array stays until json_end */
        if (!v) return false;
        if (js->n) memcpy(v, js->v, js->n * sizeof *v);
        js->v = v;
        js->cap = cap;
    }
    js->v[js->n++] = (jnum){u, exact};
    return true;
}

/* A JSON string from s[*ip] (its opening quote) to past its closing quote. */
static wm_status scan_string(const unsigned char *s, size_t n, size_t *ip, uint64_t base,
                             const char *path, wm_error *err) {
    size_t at = *ip;
    unsigned char c;
    for ((*ip)++;;) {
        if (*ip >= n) return ferr(err, path, base + at, "unterminated JSON string");
        c = s[*ip];
        if (c == '"') break;
        if (c < 0x20)
            return ferr(err, path, base + *ip, "control byte 0x%02x inside a JSON string", c);
        if (c != '\\') {
            (*ip)++;
            continue;
        }
        if (*ip + 1 >= n) return ferr(err, path, base + at, "unterminated JSON string");
        unsigned char e = s[*ip + 1];
        if (e == 'u') {
            unsigned v = 0;
            for (size_t k = 2; k < 6; k++) {
                int h = *ip + k < n ? hexval(s[*ip + k]) : -1;
                if (h < 0) return ferr(err, path, base + *ip, "malformed \\u escape");
                v = v * 16 + (unsigned)h;
            }
            if (v == 0)
                return ferr(err, path, base + *ip, "a JSON string holds \\u0000 (a NUL character)");
            *ip += 6;
        } else if (e && strchr("\"\\/bfnrt", e)) {
            *ip += 2;
        } else {
            return ferr(err, path, base + *ip, "invalid escape in a JSON string");
        }
    }
    (*ip)++;
    return WM_OK;
}

/* A JSON number from s[*ip] to its end; its value goes to js (exact: a whole number that fits in
 * 64 bits). */
static wm_status scan_number(const unsigned char *s, size_t n, size_t *ip, uint64_t base,
                             const char *path, jscan *js, wm_error *err) {
    size_t at = *ip, i = *ip;
    unsigned char c = s[i];
    bool neg = c == '-', exact = true;
    if (neg) i++;
    if (i >= n || !is_digit(s[i])) return ferr(err, path, base + at, "malformed JSON number");
    uint64_t u = 0;
    if (s[i] == '0') {
        i++;
        if (i < n && is_digit(s[i]))
            return ferr(err, path, base + at, "JSON number with a leading zero");
    } else {
        for (; i < n && is_digit(s[i]); i++) {
            unsigned d = s[i] - '0';
            if (u > (UINT64_MAX - d) / 10)
                exact = false;
            else
                u = u * 10 + d;
        }
    }
    if (i < n && s[i] == '.') {
        exact = false;
        if (++i >= n || !is_digit(s[i])) return ferr(err, path, base + at, "malformed JSON number");
        while (i < n && is_digit(s[i]))
            i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        exact = false;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || !is_digit(s[i])) return ferr(err, path, base + at, "malformed JSON number");
        while (i < n && is_digit(s[i]))
            i++;
    }
    if (!push_num(js, u, exact && !neg))
        return wm__err(err, WM_ENOMEM, 0, "%s: out of memory scanning JSON", path);
    *ip = i;
    return WM_OK;
}

/* Checks s[0..n) token by token; `base` is the file offset of s[0] for messages. */
static wm_status prescan(const unsigned char *s, size_t n, uint64_t base, const char *path,
                         jscan *js, wm_error *err) {
    size_t bad = utf8_bad(s, n);
    if (bad < n)
        return ferr(err, path, base + bad, "the JSON text is not valid UTF-8 (byte 0x%02x)",
                    s[bad]);
    unsigned depth = 0;
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t at = i;
        switch (c) {
        case ' ':
        case '\t':
        case '\n':
        case '\r':
        case ':':
        case ',': i++; break;
        case '{':
        case '[':
            if (++depth > ST_MAX_DEPTH)
                return ferr(err, path, base + at, "JSON nested deeper than %d levels",
                            ST_MAX_DEPTH);
            i++;
            break;
        case '}':
        case ']':
            if (depth) depth--;
            i++;
            break;
        case '"': {
            wm_status st = scan_string(s, n, &i, base, path, err);
            if (st) return st;
            break;
        }
        case 't':
        case 'f':
        case 'n': {
            const char *lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
            size_t l = strlen(lit);
            if (n - i < l || memcmp(s + i, lit, l) != 0)
                return ferr(err, path, base + at, "unexpected text: not JSON");
            i += l;
            break;
        }
        default: {
            if (c != '-' && !is_digit(c))
                return ferr(err, path, base + at, "unexpected byte 0x%02x: not JSON", c);
            wm_status st = scan_number(s, n, &i, base, path, js, err);
            if (st) return st;
        }
        }
    }
    return WM_OK;
}

/* Pre-scan, parse, and check that only white space follows the value. */
static wm_status json_load(const unsigned char *s, size_t n, uint64_t base, const char *path,
                           jscan *js, cJSON **out, wm_error *err) {
    *out = NULL;
    wm_status st = prescan(s, n, base, path, js, err);
    if (st) return st;
    size_t end;
    bool oom;
    cJSON *root = json_parse(s, n, &end, &oom);
    if (!root) {
        if (oom) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory parsing JSON", path);
        return ferr(err, path, base + end, "not valid JSON");
    }
    for (size_t i = end; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
            return ferr(err, path, base + i, "trailing bytes after the JSON object");
    *out = root;
    return WM_OK;
}

/* ---- the walk ---- */

static const jnum *take_num(jscan *js) { return js->next < js->n ? &js->v[js->next++] : NULL; }

/* Steps the cursor over every number inside node (depth is bounded by the pre-scan). */
static void skip_nums(jscan *js, const cJSON *node) {
    if (cJSON_IsNumber(node)) {
        js->next++;
        return;
    }
    if (cJSON_IsArray(node) || cJSON_IsObject(node))
        for (const cJSON *c = node->child; c; c = c->next)
            skip_nums(js, c);
}

static const char *json_kind(const cJSON *v) {
    if (cJSON_IsObject(v)) return "object";
    if (cJSON_IsArray(v)) return "array";
    if (cJSON_IsString(v)) return "string";
    if (cJSON_IsNumber(v)) return "number";
    if (cJSON_IsBool(v)) return "boolean";
    return "null";
}

/* A growable byte buffer addressed by offsets (pointers are fixed up once it stops growing). */
typedef struct gbuf {
    char *p;
    size_t len, cap;
    bool oom;
} gbuf;

static size_t gput(gbuf *b, const void *d, size_t n) {
    size_t at = b->len;
    if (b->oom) return at;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n)
            cap *= 2;
        char *q = wm__realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return at;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
    return at;
}

static size_t gput_str(gbuf *b, const char *s) { return gput(b, s, strlen(s) + 1); }

/* ---- the header ---- */

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
    jscan js;
    span *spans;
    const cJSON **names; /* the member of each tensor */
} hdr;

/* One tensor member: dtype, shape (reversed into ggml order) and data_offsets; other fields are
 * ignored, as the reference does. */
static wm_status parse_tensor(hdr *h, const cJSON *m, size_t ti) {
    const char *name = m->string, *path = h->path;
    wm__tensor *t = &h->f->tensors[ti];
    if (!cJSON_IsObject(m))
        return ferr(h->err, path, 8, "tensor '%s' is a JSON %s, not an object", name, json_kind(m));
    const cJSON *dt = NULL, *sh = NULL, *off = NULL;
    uint64_t dims[WM_MAX_DIMS], n_el = 1;
    size_t n_dims = 0;
    uint64_t ob[2] = {0, 0};
    for (const cJSON *c = m->child; c; c = c->next) {
        const char *k = c->string;
        const cJSON **slot = !strcmp(k, "dtype")          ? &dt
                             : !strcmp(k, "shape")        ? &sh
                             : !strcmp(k, "data_offsets") ? &off
                                                          : NULL;
        if (!slot) {
            skip_nums(&h->js, c);
            continue;
        }
        if (*slot) return ferr(h->err, path, 8, "tensor '%s': field '%s' appears twice", name, k);
        *slot = c;
        if (slot == &dt) {
            if (!cJSON_IsString(c))
                return ferr(h->err, path, 8, "tensor '%s': dtype is a JSON %s, not a string", name,
                            json_kind(c));
            continue;
        }
        if (!cJSON_IsArray(c))
            return ferr(h->err, path, 8, "tensor '%s': %s is a JSON %s, not an array", name, k,
                        json_kind(c));
        size_t j = 0;
        for (const cJSON *e = c->child; e; e = e->next, j++) {
            const jnum *v = cJSON_IsNumber(e) ? take_num(&h->js) : NULL;
            if (!v || !v->exact)
                return ferr(h->err, path, 8,
                            "tensor '%s': %s[%zu] is not a non-negative integer that "
                            "fits 64 bits",
                            name, k, j);
            if (slot == &sh) {
                if (j < WM_MAX_DIMS) dims[j] = v->u;
                if (wm__mul_overflow_u64(n_el, v->u, &n_el))
                    return ferr(h->err, path, 8,
                                "tensor '%s': the element count of the shape "
                                "overflows 64 bits",
                                name);
            } else if (j < 2) {
                ob[j] = v->u;
            }
        }
        if (slot == &sh)
            n_dims = j;
        else if (j != 2)
            return ferr(h->err, path, 8, "tensor '%s': data_offsets has %zu entries, not 2", name,
                        j);
    }
    if (!dt || !sh || !off)
        return ferr(h->err, path, 8, "tensor '%s' has no %s field", name,
                    !dt   ? "dtype"
                    : !sh ? "shape"
                          : "data_offsets");
    const dtype_row *row = NULL;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(dtypes[i].name, dt->valuestring)) row = &dtypes[i];
    if (!row)
        return ferr(h->err, path, 8, "tensor '%s': unknown dtype '%.40s'", name, dt->valuestring);
    if (row->type == WM_TYPE_INVALID)
        return wm__err(h->err, WM_EUNSUPPORTED, 0, "%s: tensor '%s': dtype %s is not supported",
                       path, name, row->name);
    if (n_dims > WM_MAX_DIMS)
        return ferr(h->err, path, 8, "tensor '%s' has %zu dimensions; at most %d are supported",
                    name, n_dims, WM_MAX_DIMS);
    /* Sub-byte types must fill whole bytes: the reference's bit count % 8 check. */
    uint32_t be = wm_type_block_elems(row->type), bb = wm_type_block_bytes(row->type);
    if (n_el % be)
        return ferr(h->err, path, 8, "tensor '%s': %llu elements of %s do not fill whole bytes",
                    name, (unsigned long long)n_el, row->name);
    uint64_t nbytes;
    if (wm__mul_overflow_u64(n_el / be, bb, &nbytes))
        return ferr(h->err, path, 8, "tensor '%s': the byte size overflows 64 bits", name);
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
        const char *name = h->names[s->i]->string;
        wm__tensor *t = &f->tensors[s->i];
        if (s->end < s->begin)
            return ferr(h->err, h->path, data_start + s->begin,
                        "tensor '%s': data_offsets [%llu, %llu] end before they begin", name,
                        (unsigned long long)s->begin, (unsigned long long)s->end);
        if (s->begin < at)
            return ferr(h->err, h->path, data_start + s->begin,
                        "tensor '%s' (data_offsets [%llu, %llu]) overlaps tensor '%s', which ends "
                        "at %llu",
                        name, (unsigned long long)s->begin, (unsigned long long)s->end, prev,
                        (unsigned long long)at);
        if (s->begin > at)
            return ferr(
                h->err, h->path, data_start + at,
                "%llu bytes at data offset %llu belong to no tensor (gap before tensor '%s')",
                (unsigned long long)(s->begin - at), (unsigned long long)at, name);
        if (s->end - s->begin != t->nbytes)
            return ferr(h->err, h->path, data_start + s->begin,
                        "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, but its shape and "
                        "dtype need %llu",
                        name, (unsigned long long)s->begin, (unsigned long long)s->end,
                        (unsigned long long)(s->end - s->begin), (unsigned long long)t->nbytes);
        if (s->end > data_len)
            return ferr(h->err, h->path, data_start + s->begin,
                        "tensor '%s' (data_offsets [%llu, %llu]) ends past the end of the file "
                        "(%llu data bytes)",
                        name, (unsigned long long)s->begin, (unsigned long long)s->end,
                        (unsigned long long)data_len);
        t->offset = data_start + s->begin;
        at = s->end;
        prev = name;
    }
    if (at != data_len)
        return ferr(h->err, h->path, data_start + at,
                    "%llu bytes follow the last tensor's data; the data must end the file",
                    (unsigned long long)(data_len - at));
    return WM_OK;
}

static void free_blob(void *p) { wm__free(p); }

/* Everything after the JSON is parsed: members to tensors and metadata, names and values. */
static wm_status parse_members(hdr *h, const cJSON *root, uint64_t hlen) {
    wm_file *f = h->f;
    const char *path = h->path;
    if (!cJSON_IsObject(root))
        return ferr(h->err, path, 8, "the header is a JSON %s, not an object", json_kind(root));
    const cJSON *meta = NULL;
    size_t n_members = 0;
    for (const cJSON *m = root->child; m; m = m->next) {
        n_members++;
        if (strcmp(m->string, "__metadata__") != 0) continue;
        if (meta) return ferr(h->err, path, 8, "__metadata__ appears twice");
        meta = m;
    }
    size_t nt = n_members - (meta ? 1 : 0), nk = 0;
    if (meta && !cJSON_IsNull(meta)) {
        if (!cJSON_IsObject(meta))
            return ferr(h->err, path, 8, "__metadata__ is a JSON %s, not an object of strings",
                        json_kind(meta));
        for (const cJSON *c = meta->child; c; c = c->next, nk++)
            if (!cJSON_IsString(c))
                return ferr(h->err, path, 8, "__metadata__ '%s' is a JSON %s, not a string",
                            c->string, json_kind(c));
    }
    if (nt) {
        f->tensors = wm__calloc(nt, sizeof *f->tensors);
        h->spans = nt <= SIZE_MAX / sizeof *h->spans ? json_alloc(nt * sizeof *h->spans) : NULL;
        h->names = nt <= SIZE_MAX / sizeof *h->names ? json_alloc(nt * sizeof *h->names) : NULL;
        if (!f->tensors || !h->spans || !h->names)
            return wm__err(h->err, WM_ENOMEM, 0, "%s: out of memory for %zu tensors", path, nt);
    }
    if (nk && !(f->kvs = wm__calloc(nk, sizeof *f->kvs)))
        return wm__err(h->err, WM_ENOMEM, 0, "%s: out of memory for %zu metadata entries", path,
                       nk);
    f->n_tensors = nt;
    f->n_kv = nk;
    size_t ti = 0;
    for (const cJSON *m = root->child; m; m = m->next) {
        if (m == meta) {
            skip_nums(&h->js, m);
            continue;
        }
        wm_status st = parse_tensor(h, m, ti++);
        if (st) return st;
    }
    uint64_t data_start = 8 + hlen, data_len = f->size - data_start;
    wm_status st = check_layout(h, data_start, data_len);
    if (st) return st;

    /* Names blob: keys, then tensor names. Values blob (aux): metadata strings. */
    gbuf names = {0}, vals = {0};
    gput(&names, "", 1);
    size_t k = 0;
    if (nk)
        for (const cJSON *c = meta->child; c; c = c->next, k++) {
            wm__kv *kv = &f->kvs[k];
            kv->key_off = (uint32_t)gput_str(&names, c->string);
            kv->key_len = (uint32_t)strlen(c->string);
            kv->type = WM_VALUE_STRING;
            kv->lenw = 8;
            kv->length = strlen(c->valuestring);
            kv->val = (const unsigned char *)(uintptr_t)gput_str(&vals, c->valuestring);
        }
    for (size_t i = 0; i < nt; i++) {
        const char *nm = h->names[i]->string;
        f->tensors[i].name_off = (uint32_t)gput_str(&names, nm);
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

wm_status wm__safetensors_parse(wm_file *f, wm_error *err) {
    const char *path = f->path;
    wm__shard *sh = &f->shards[0];
    if (f->size < 8)
        return ferr(err, path, 0, "a file of %llu bytes is too short for the 8-byte header length",
                    (unsigned long long)f->size);
    unsigned char lb[8];
    size_t got;
    int e = wm__os_pread(sh->fd, lb, 8, 0, &got);
    if (e)
        return wm__err(err, wm__status_io(e), e, "%s: reading the header length at offset 0: %s",
                       path, wm__errno_text(e));
    if (got != 8) return wm__err(err, WM_EIO, 0, "%s: file shrank while reading its header", path);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | lb[i];
    if (hlen > ST_MAX_HEADER)
        return ferr(err, path, 0, "header length %llu is more than the limit of %llu bytes",
                    (unsigned long long)hlen, ST_MAX_HEADER);
    if (hlen > f->size - 8)
        return ferr(err, path, 0, "a header of %llu bytes runs past the end of the %llu-byte file",
                    (unsigned long long)hlen, (unsigned long long)f->size);
    unsigned char *text = wm__alloc(hlen ? (size_t)hlen : 1);
    if (!text)
        return wm__err(err, WM_ENOMEM, 0, "%s: out of memory for a %llu-byte header", path,
                       (unsigned long long)hlen);
    hdr h = {.f = f, .path = path, .err = err};
    cJSON *root = NULL;
    wm_status st;
    e = wm__os_pread(sh->fd, text, (size_t)hlen, 8, &got);
    if (e) {
        st = wm__err(err, wm__status_io(e), e, "%s: reading the header at offset 8: %s", path,
                     wm__errno_text(e));
        goto done;
    }
    if (got != hlen) {
        st = wm__err(err, WM_EIO, 0, "%s: file shrank while reading its header", path);
        goto done;
    }
    json_begin();
    st = json_load(text, (size_t)hlen, 8, path, &h.js, &root, err);
    if (!st) st = parse_members(&h, root, hlen);
    json_end(); /* the tree, the number list, spans and names */
done:
    wm__free(text);
    return st;
}

/* ---- the index of a sharded checkpoint ---- */

void wm__st_index_free(wm__st_index *ix) {
    if (!ix) return;
    wm__free(ix->blob);
    wm__free(ix->map);
    wm__free(ix->kvs);
    memset(ix, 0, sizeof *ix);
}

/* One "metadata" value: strings, integers (u64 or i64), other numbers (f64), booleans; anything
 * else is kept as its compact JSON text. Returns the blob offset; sets the kv's type and length. */
static size_t index_value(gbuf *b, const cJSON *v, const jnum *num, wm__kv *kv, bool *oom) {
    kv->length = 1;
    if (cJSON_IsString(v)) {
        kv->type = WM_VALUE_STRING;
        kv->length = strlen(v->valuestring);
        return gput_str(b, v->valuestring);
    }
    if (cJSON_IsNumber(v)) {
        if (num && num->exact) {
            kv->type = WM_VALUE_U64;
            return gput(b, &num->u, 8);
        }
        double d = v->valuedouble;
        if (d >= -9007199254740992.0 && d < 0 && d == (double)(int64_t)d) {
            int64_t i = (int64_t)d;
            kv->type = WM_VALUE_I64;
            return gput(b, &i, 8);
        }
        kv->type = WM_VALUE_F64;
        return gput(b, &d, 8);
    }
    if (cJSON_IsBool(v)) {
        unsigned char t = cJSON_IsTrue(v) ? 1 : 0;
        kv->type = WM_VALUE_BOOL;
        return gput(b, &t, 1);
    }
    json_enter();
    char *txt = cJSON_PrintUnformatted(v); /* in the arena */
    json_leave();
    if (!txt) {
        *oom = true;
        return 0;
    }
    kv->type = WM_VALUE_STRING;
    kv->length = strlen(txt);
    return gput_str(b, txt);
}

wm_status wm__safetensors_index_parse(const char *path, const unsigned char *text, size_t len,
                                      wm__st_index *ix, wm_error *err) {
    memset(ix, 0, sizeof *ix);
    jscan js = {0};
    cJSON *root = NULL;
    gbuf b = {0};
    bool oom = false;
    json_begin();
    wm_status st = json_load(text, len, 0, path, &js, &root, err);
    if (st) goto fail;
    if (!cJSON_IsObject(root)) {
        st = ferr(err, path, 0, "the index is a JSON %s, not an object", json_kind(root));
        goto fail;
    }
    const cJSON *wmap = NULL, *meta = NULL;
    for (const cJSON *m = root->child; m; m = m->next) {
        const cJSON **slot = !strcmp(m->string, "weight_map") ? &wmap
                             : !strcmp(m->string, "metadata") ? &meta
                                                              : NULL;
        if (!slot) continue;
        if (*slot) {
            st = ferr(err, path, 0, "'%s' appears twice", m->string);
            goto fail;
        }
        *slot = m;
    }
    if (!wmap || !cJSON_IsObject(wmap)) {
        st = ferr(err, path, 0, "the index has no weight_map object");
        goto fail;
    }
    if (meta && !cJSON_IsObject(meta) && !cJSON_IsNull(meta)) {
        st = ferr(err, path, 0, "metadata is a JSON %s, not an object", json_kind(meta));
        goto fail;
    }
    size_t n_map = 0, n_kv = 0;
    for (const cJSON *c = wmap->child; c; c = c->next)
        n_map++;
    if (meta && cJSON_IsObject(meta))
        for (const cJSON *c = meta->child; c; c = c->next)
            n_kv++;
    if ((n_map && !(ix->map = wm__calloc(n_map, sizeof *ix->map))) ||
        (n_kv && !(ix->kvs = wm__calloc(n_kv, sizeof *ix->kvs)))) {
        st = wm__err(err, WM_ENOMEM, 0, "%s: out of memory for the index", path);
        goto fail;
    }
    gput(&b, "", 1);
    /* Members in document order, so that the number cursor stays in step. */
    size_t mi = 0, ki = 0;
    for (const cJSON *m = root->child; m; m = m->next) {
        if (m == wmap) {
            for (const cJSON *c = m->child; c; c = c->next, mi++) {
                if (!cJSON_IsString(c) || !c->valuestring[0]) {
                    st = ferr(err, path, 0,
                              "weight_map: tensor '%s' maps to a JSON %s, not a file "
                              "name",
                              c->string, cJSON_IsString(c) ? "empty string" : json_kind(c));
                    goto fail;
                }
                ix->map[mi][0] = (uint32_t)gput_str(&b, c->string);
                ix->map[mi][1] = (uint32_t)gput_str(&b, c->valuestring);
            }
        } else if (m == meta && n_kv) {
            for (const cJSON *c = m->child; c; c = c->next, ki++) {
                wm__kv *kv = &ix->kvs[ki];
                const jnum *num = NULL;
                if (cJSON_IsNumber(c))
                    num = take_num(&js);
                else
                    skip_nums(&js, c);
                kv->key_off = (uint32_t)gput_str(&b, c->string);
                kv->key_len = (uint32_t)strlen(c->string);
                kv->lenw = 8;
                kv->val = (const unsigned char *)(uintptr_t)index_value(&b, c, num, kv, &oom);
            }
        } else {
            skip_nums(&js, m);
        }
    }
    if (oom || b.oom || b.len > UINT32_MAX) {
        st = wm__err(err, WM_ENOMEM, 0, "%s: out of memory for the index", path);
        goto fail;
    }
    ix->blob = b.p;
    ix->blob_len = b.len;
    ix->n_map = n_map;
    ix->n_kv = n_kv;
    for (size_t i = 0; i < n_kv; i++)
        ix->kvs[i].val = (const unsigned char *)b.p + (uintptr_t)ix->kvs[i].val;
    json_end();
    return WM_OK;
fail:
    json_end();
    wm__free(b.p);
    wm__st_index_free(ix);
    return st;
}
