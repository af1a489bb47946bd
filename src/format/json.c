/*
 * json.c: safetensors' JSON (json.h): a strict pre-scan of the text, the tree builder over the
 * same grammar (its nodes and strings in a page-allocated arena per read, through the counted
 * allocator), a compact printer, and the walk's helpers (kinds, doubles, a growable blob). The
 * readers are safetensors.c (the header) and safetensors_index.c (the index of a sharded
 * checkpoint).
 *
 * Two passes. The pre-scan checks the whole text as UTF-8 and every token against the JSON
 * grammar (no control bytes outside strings, no byte-order mark, no numbers such as 01 or 1.),
 * bounds the nesting depth, and refuses \u0000 (names are NUL-terminated here), so that a bad
 * token is named as such wherever it is. The builder then reads the structure (objects, arrays,
 * members), decodes strings (escapes, \uXXXX with surrogate pairs to UTF-8; a lone surrogate is
 * refused) and keeps every number's text and, for a plain integer that fits 64 bits, its exact
 * value. Duplicate keys are refused by the readers' walks and by wm__file_index.
 */
#include "json.h"

#include <locale.h>
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

/* ---- the arena ----
 * While a header or an index is being read on a thread (wm__json_begin to wm__json_end), the
 * tree's nodes and strings and the reader's scratch come from an arena of page-allocated chunks
 * (ledger: scratch) that wm__json_end frees whole. Why: a header of N tensors makes about 12N
 * small nodes, and small blocks freed to malloc stay in the process (glibc keeps its heap top),
 * which `weightmap check` would report as memory not returned. Outside an arena, wm__json_alloc
 * uses the counted allocator. An allocation that fails is reported as WM_ENOMEM, never as bad
 * JSON. The arena is the thread's own (_Thread_local): reads on several threads share nothing. */

#define ARENA_CHUNK ((size_t)64 * 1024)
#define ARENA_MAX_CHUNK ((size_t)64 * 1024 * 1024)
#define ARENA_HDR ((size_t)32)

typedef struct chunk {
    struct chunk *next;
    size_t size, used;
} chunk;

static _Thread_local bool arena_on;
static _Thread_local chunk *arena; /* newest first */

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

void wm__json_begin(void) { arena_on = true; }

void wm__json_end(void) {
    while (arena) {
        chunk *c = arena;
        arena = c->next;
        wm__scratch_free(c, c->size);
    }
    arena_on = false;
}

void *wm__json_alloc(size_t n) { return arena_on ? arena_alloc(n) : wm__alloc(n); }

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

/* A JSON number from s[*ip] to its end; v (when not NULL) gets its magnitude and whether it is a
 * plain integer that fits 64 bits (exact when not negative, neg_int when negative). */
static wm_status scan_number(const unsigned char *s, size_t n, size_t *ip, uint64_t base,
                             const char *path, wm__jval *v, wm_error *err) {
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
    if (v) {
        v->u = u;
        v->exact = exact && !neg;
        v->neg_int = exact && neg;
    }
    *ip = i;
    return WM_OK;
}

/* Checks s[0..n) token by token; `base` is the file offset of s[0] for messages. */
static wm_status prescan(const unsigned char *s, size_t n, uint64_t base, const char *path,
                         wm_error *err) {
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
            wm_status st = scan_number(s, n, &i, base, path, NULL, err);
            if (st) return st;
        }
        }
    }
    return WM_OK;
}

/* ---- the tree builder ----
 * Runs on text the pre-scan passed: every token is well formed, so what is left to refuse is
 * structure (a missing ':' or ',', a value missing, brackets that do not match) and a lone
 * UTF-16 surrogate in a \u escape. The depth is checked again so the recursion stays bounded
 * whatever the pre-scan counted. */

typedef struct jb {
    const unsigned char *s;
    size_t n, i;
    uint64_t base;
    const char *path;
    wm_error *err;
} jb;

static void skip_ws(jb *b) {
    while (b->i < b->n &&
           (b->s[b->i] == ' ' || b->s[b->i] == '\t' || b->s[b->i] == '\n' || b->s[b->i] == '\r'))
        b->i++;
}

static wm_status not_valid(jb *b, size_t at, const char *what) {
    return wm__json_err(b->err, b->path, b->base + at, "not valid JSON (%s)", what);
}

static wm_status no_memory(jb *b) {
    return wm__err(b->err, WM_ENOMEM, 0, "%s: out of memory parsing JSON", b->path);
}

static unsigned hex4(const unsigned char *p) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++)
        v = v * 16 + (unsigned)hexval(p[k]);
    return v;
}

static char *put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xc0 | cp >> 6);
        *o++ = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xe0 | cp >> 12);
        *o++ = (char)(0x80 | (cp >> 6 & 0x3f));
        *o++ = (char)(0x80 | (cp & 0x3f));
    } else {
        *o++ = (char)(0xf0 | cp >> 18);
        *o++ = (char)(0x80 | (cp >> 12 & 0x3f));
        *o++ = (char)(0x80 | (cp >> 6 & 0x3f));
        *o++ = (char)(0x80 | (cp & 0x3f));
    }
    return o;
}

/* One \uXXXX escape at s[*ip] (a surrogate pair takes two) to a code point. */
static wm_status read_u_escape(jb *b, size_t *ip, uint32_t *cp) {
    const unsigned char *s = b->s;
    size_t at = *ip;
    uint32_t hi = hex4(s + at + 2);
    *ip += 6;
    if (hi >= 0xdc00 && hi <= 0xdfff) return not_valid(b, at, "a lone UTF-16 low surrogate");
    if (hi < 0xd800 || hi > 0xdbff) {
        *cp = hi;
        return WM_OK;
    }
    if (b->n - *ip < 6 || s[*ip] != '\\' || s[*ip + 1] != 'u')
        return not_valid(b, at, "a lone UTF-16 high surrogate");
    uint32_t lo = hex4(s + *ip + 2);
    if (lo < 0xdc00 || lo > 0xdfff) return not_valid(b, at, "a lone UTF-16 high surrogate");
    *ip += 6;
    *cp = 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
    return WM_OK;
}

/* The string at s[i] (its opening quote), decoded into the arena: *out, *len. */
static wm_status build_string(jb *b, const char **out, size_t *len) {
    const unsigned char *s = b->s;
    size_t i = b->i + 1, end = i;
    while (end < b->n && s[end] != '"')
        end += s[end] == '\\' ? 2 : 1;
    if (end >= b->n) return not_valid(b, b->i, "an unterminated string");
    char *o = wm__json_alloc(end - i + 1), *start = o; /* decoded is never longer */
    if (!o) return no_memory(b);
    while (i < end) {
        unsigned char c = s[i];
        if (c != '\\') {
            *o++ = (char)c;
            i++;
            continue;
        }
        unsigned char e = s[i + 1];
        if (e == 'u') {
            uint32_t cp = 0;
            wm_status st = read_u_escape(b, &i, &cp);
            if (st) return st;
            o = put_utf8(o, cp);
            continue;
        }
        *o++ = e == 'b'   ? '\b'
               : e == 'f' ? '\f'
               : e == 'n' ? '\n'
               : e == 'r' ? '\r'
               : e == 't' ? '\t'
                          : (char)e;
        i += 2;
    }
    *o = 0;
    *out = start;
    *len = (size_t)(o - start);
    b->i = end + 1;
    return WM_OK;
}

static wm_status build_value(jb *b, wm__jval *v, unsigned depth);

/* The members of an object or the elements of an array, from past its opening bracket. */
static wm_status build_list(jb *b, wm__jval *v, unsigned depth) {
    bool obj = v->type == WM_JOBJECT;
    unsigned char close = obj ? '}' : ']';
    wm__jval **tail = &v->child;
    skip_ws(b);
    if (b->i < b->n && b->s[b->i] == close) {
        b->i++;
        return WM_OK;
    }
    for (;;) {
        wm__jval *c = wm__json_alloc(sizeof *c);
        if (!c) return no_memory(b);
        memset(c, 0, sizeof *c);
        skip_ws(b);
        if (obj) {
            size_t kl;
            if (b->i >= b->n || b->s[b->i] != '"')
                return not_valid(b, b->i, "a member name expected");
            wm_status st = build_string(b, &c->key, &kl);
            if (st) return st;
            skip_ws(b);
            if (b->i >= b->n || b->s[b->i] != ':') return not_valid(b, b->i, "':' expected");
            b->i++;
        }
        wm_status st = build_value(b, c, depth + 1);
        if (st) return st;
        *tail = c;
        tail = &c->next;
        skip_ws(b);
        if (b->i < b->n && b->s[b->i] == ',') {
            b->i++;
            continue;
        }
        if (b->i < b->n && b->s[b->i] == close) {
            b->i++;
            return WM_OK;
        }
        return not_valid(b, b->i, obj ? "',' or '}' expected" : "',' or ']' expected");
    }
}

static wm_status build_value(jb *b, wm__jval *v, unsigned depth) {
    skip_ws(b);
    if (b->i >= b->n) return not_valid(b, b->i, "a value expected");
    const unsigned char *s = b->s;
    unsigned char c = s[b->i];
    size_t at = b->i;
    switch (c) {
    case '{':
    case '[':
        if (depth >= WM_JSON_MAX_DEPTH) return not_valid(b, at, "nested too deep");
        v->type = c == '{' ? WM_JOBJECT : WM_JARRAY;
        b->i++;
        return build_list(b, v, depth);
    case '"': v->type = WM_JSTRING; return build_string(b, &v->str, &v->len);
    case 't':
    case 'f':
    case 'n': {
        const char *lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
        size_t l = strlen(lit);
        if (b->n - at < l || memcmp(s + at, lit, l) != 0)
            return not_valid(b, at, "a value expected");
        v->type = c == 't' ? WM_JTRUE : c == 'f' ? WM_JFALSE : WM_JNULL;
        b->i += l;
        return WM_OK;
    }
    default:
        if (c != '-' && !is_digit(c)) return not_valid(b, at, "a value expected");
        v->type = WM_JNUMBER;
        wm_status st = scan_number(s, b->n, &b->i, b->base, b->path, v, b->err);
        v->str = (const char *)s + at;
        v->len = b->i - at;
        return st;
    }
}

/* Pre-scan, build, and check that only white space follows the value. */
wm_status wm__json_load(const unsigned char *s, size_t n, uint64_t base, const char *path,
                        const wm__jval **out, wm_error *err) {
    *out = NULL;
    wm_status st = prescan(s, n, base, path, err);
    if (st) return st;
    jb b = {s, n, 0, base, path, err};
    wm__jval *root = wm__json_alloc(sizeof *root);
    if (!root) return no_memory(&b);
    memset(root, 0, sizeof *root);
    st = build_value(&b, root, 0);
    if (st) return st;
    for (size_t i = b.i; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
            return wm__json_err(err, path, base + i, "trailing bytes after the JSON object");
    *out = root;
    return WM_OK;
}

/* ---- the walk ---- */

const char *wm__json_kind(const wm__jval *v) {
    static const char *const kinds[] = {"null",   "boolean", "boolean", "number",
                                        "string", "array",   "object"};
    return kinds[v->type];
}

/* strtod reads the decimal point of the C library's locale (LC_NUMERIC): the '.' of the text is
 * put in its place, in a copy. */
bool wm__json_f64(const wm__jval *v, double *out) {
    char small[64], *t = v->len < sizeof small ? small : wm__json_alloc(v->len + 1);
    if (!t) return false;
    memcpy(t, v->str, v->len);
    t[v->len] = 0;
    const char *dp = localeconv()->decimal_point;
    char *dot = strchr(t, '.');
    if (dot && dp && dp[0] && !dp[1]) *dot = dp[0];
    *out = strtod(t, NULL);
    return true;
}

static void print_string(wm__gbuf *b, const char *s) {
    wm__gput(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        const char *e = c == '"'    ? "\\\""
                        : c == '\\' ? "\\\\"
                        : c == '\b' ? "\\b"
                        : c == '\f' ? "\\f"
                        : c == '\n' ? "\\n"
                        : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t"
                                    : NULL;
        char u[8];
        if (!e && c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            e = u;
        }
        if (e)
            wm__gput(b, e, strlen(e));
        else
            wm__gput(b, p, 1);
    }
    wm__gput(b, "\"", 1);
}

/* Recursion is bounded by the tree's depth (WM_JSON_MAX_DEPTH). */
void wm__json_print(wm__gbuf *b, const wm__jval *v) {
    switch (v->type) {
    case WM_JNULL: wm__gput(b, "null", 4); return;
    case WM_JFALSE: wm__gput(b, "false", 5); return;
    case WM_JTRUE: wm__gput(b, "true", 4); return;
    case WM_JNUMBER: wm__gput(b, v->str, v->len); return;
    case WM_JSTRING: print_string(b, v->str); return;
    default: break;
    }
    bool obj = v->type == WM_JOBJECT;
    wm__gput(b, obj ? "{" : "[", 1);
    for (const wm__jval *c = v->child; c; c = c->next) {
        if (c != v->child) wm__gput(b, ",", 1);
        if (obj) {
            print_string(b, c->key);
            wm__gput(b, ":", 1);
        }
        wm__json_print(b, c);
    }
    wm__gput(b, obj ? "}" : "]", 1);
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
