/*
 * json.c: safetensors' JSON (json.h): cJSON through the counted allocator (a page-allocated
 * arena per read), a strict pre-scan of the text, and the walk's helpers (exact numbers, kinds,
 * a growable blob). The readers are safetensors.c (the header) and safetensors_index.c (the
 * index of a sharded checkpoint).
 *
 * Why a pre-scan before cJSON: cJSON accepts text that is not JSON (control bytes as white space,
 * a byte-order mark, numbers such as 01 or 1.), keeps both of two equal keys, reads every number
 * as a double (inexact above 2^53), and recurses once per nesting level. The pre-scan checks the
 * whole text as UTF-8 and every token against the JSON grammar, bounds the nesting depth before
 * cJSON recurses, refuses \u0000 (names are NUL-terminated here), and records the exact value of
 * every number token in document order. cJSON's tree keeps document order, so the walk takes each
 * number's exact value from that list as it meets the number. Duplicate keys are refused by the
 * readers' walks and by wm__file_index.
 */
#include "json.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

wm_status wm__json_err(wm_error *err, const char *path, uint64_t at, const char *fmt, ...) {
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
 * While a header or an index is being read on a thread (wm__json_begin to wm__json_end), cJSON's
 * nodes and the reader's scratch come from an arena of page-allocated chunks (ledger: scratch) that
 * wm__json_end frees whole; cJSON's frees are no-ops then. Why: a header of N tensors makes about
 * 12N small nodes, and small blocks freed to malloc stay in the process (glibc keeps its heap top),
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

void wm__json_begin(void) {
    arena_on = true;
    json_oom = false;
}

void wm__json_end(void) {
    while (arena) {
        chunk *c = arena;
        arena = c->next;
        wm__scratch_free(c, c->size);
    }
    arena_on = false;
}

void *wm__json_alloc(size_t n) {
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
    cJSON_Hooks h = {wm__json_alloc, json_free};
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

static bool push_num(wm__jscan *js, uint64_t u, bool exact) {
    if (js->n == js->cap) {
        size_t cap = js->cap ? js->cap * 2 : 64;
        wm__jnum *v =
            wm__json_alloc(cap * sizeof *v); /* arena: the old array stays until wm__json_end */
        if (!v) return false;
        if (js->n) memcpy(v, js->v, js->n * sizeof *v);
        js->v = v;
        js->cap = cap;
    }
    js->v[js->n++] = (wm__jnum){u, exact};
    return true;
}

/* A JSON string from s[*ip] (its opening quote) to past its closing quote. */
static wm_status scan_string(const unsigned char *s, size_t n, size_t *ip, uint64_t base,
                             const char *path, wm_error *err) {
    size_t at = *ip;
    unsigned char c;
    for ((*ip)++;;) {
        if (*ip >= n) return wm__json_err(err, path, base + at, "unterminated JSON string");
        c = s[*ip];
        if (c == '"') break;
        if (c < 0x20)
            return wm__json_err(err, path, base + *ip, "control byte 0x%02x inside a JSON string",
                                c);
        if (c != '\\') {
            (*ip)++;
            continue;
        }
        if (*ip + 1 >= n) return wm__json_err(err, path, base + at, "unterminated JSON string");
        unsigned char e = s[*ip + 1];
        if (e == 'u') {
            unsigned v = 0;
            for (size_t k = 2; k < 6; k++) {
                int h = *ip + k < n ? hexval(s[*ip + k]) : -1;
                if (h < 0) return wm__json_err(err, path, base + *ip, "malformed \\u escape");
                v = v * 16 + (unsigned)h;
            }
            if (v == 0)
                return wm__json_err(err, path, base + *ip,
                                    "a JSON string holds \\u0000 (a NUL character)");
            *ip += 6;
        } else if (e && strchr("\"\\/bfnrt", e)) {
            *ip += 2;
        } else {
            return wm__json_err(err, path, base + *ip, "invalid escape in a JSON string");
        }
    }
    (*ip)++;
    return WM_OK;
}

/* A JSON number from s[*ip] to its end; its value goes to js (exact: a whole number that fits in
 * 64 bits). */
static wm_status scan_number(const unsigned char *s, size_t n, size_t *ip, uint64_t base,
                             const char *path, wm__jscan *js, wm_error *err) {
    size_t at = *ip, i = *ip;
    unsigned char c = s[i];
    bool neg = c == '-', exact = true;
    if (neg) i++;
    if (i >= n || !is_digit(s[i]))
        return wm__json_err(err, path, base + at, "malformed JSON number");
    uint64_t u = 0;
    if (s[i] == '0') {
        i++;
        if (i < n && is_digit(s[i]))
            return wm__json_err(err, path, base + at, "JSON number with a leading zero");
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
        if (++i >= n || !is_digit(s[i]))
            return wm__json_err(err, path, base + at, "malformed JSON number");
        while (i < n && is_digit(s[i]))
            i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        exact = false;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || !is_digit(s[i]))
            return wm__json_err(err, path, base + at, "malformed JSON number");
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
                         wm__jscan *js, wm_error *err) {
    size_t bad = utf8_bad(s, n);
    if (bad < n)
        return wm__json_err(err, path, base + bad, "the JSON text is not valid UTF-8 (byte 0x%02x)",
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
            if (++depth > WM_JSON_MAX_DEPTH)
                return wm__json_err(err, path, base + at, "JSON nested deeper than %d levels",
                                    WM_JSON_MAX_DEPTH);
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
                return wm__json_err(err, path, base + at, "unexpected text: not JSON");
            i += l;
            break;
        }
        default: {
            if (c != '-' && !is_digit(c))
                return wm__json_err(err, path, base + at, "unexpected byte 0x%02x: not JSON", c);
            wm_status st = scan_number(s, n, &i, base, path, js, err);
            if (st) return st;
        }
        }
    }
    return WM_OK;
}

/* Pre-scan, parse, and check that only white space follows the value. */
wm_status wm__json_load(const unsigned char *s, size_t n, uint64_t base, const char *path,
                        wm__jscan *js, cJSON **out, wm_error *err) {
    *out = NULL;
    wm_status st = prescan(s, n, base, path, js, err);
    if (st) return st;
    size_t end;
    bool oom;
    cJSON *root = json_parse(s, n, &end, &oom);
    if (!root) {
        if (oom) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory parsing JSON", path);
        return wm__json_err(err, path, base + end, "not valid JSON");
    }
    for (size_t i = end; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
            return wm__json_err(err, path, base + i, "trailing bytes after the JSON object");
    *out = root;
    return WM_OK;
}

char *wm__json_print(const cJSON *v) {
    json_enter();
    char *txt = cJSON_PrintUnformatted(v);
    json_leave();
    return txt;
}

/* ---- the walk ---- */

const wm__jnum *wm__json_take_num(wm__jscan *js) {
    return js->next < js->n ? &js->v[js->next++] : NULL;
}

/* Steps the cursor over every number inside node (depth is bounded by the pre-scan). */
void wm__json_skip_nums(wm__jscan *js, const cJSON *node) {
    if (cJSON_IsNumber(node)) {
        js->next++;
        return;
    }
    if (cJSON_IsArray(node) || cJSON_IsObject(node))
        for (const cJSON *c = node->child; c; c = c->next)
            wm__json_skip_nums(js, c);
}

const char *wm__json_kind(const cJSON *v) {
    if (cJSON_IsObject(v)) return "object";
    if (cJSON_IsArray(v)) return "array";
    if (cJSON_IsString(v)) return "string";
    if (cJSON_IsNumber(v)) return "number";
    if (cJSON_IsBool(v)) return "boolean";
    return "null";
}

/* A growable byte buffer addressed by offsets (pointers are fixed up once it stops growing). */
size_t wm__gput(wm__gbuf *b, const void *d, size_t n) {
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

size_t wm__gput_str(wm__gbuf *b, const char *s) { return wm__gput(b, s, strlen(s) + 1); }
