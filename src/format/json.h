/*
 * json.h: safetensors' JSON (json.c), shared by the header reader (safetensors.c) and the
 * index reader (safetensors_index.c): a strict pre-scan, then the project's own tree builder
 * over the same grammar, with the exact value of every integer, all in a page arena; a compact
 * printer; and a growable blob for the strings a reader keeps.
 *
 * A read is one bracket on one thread: wm__json_begin(), then wm__json_load() and the walk
 * over the tree (its nodes, its strings and wm__json_alloc's blocks all in the arena), then
 * wm__json_end(), which frees the arena whole. Nothing from the arena outlives it: what a
 * reader keeps it copies into counted allocations (wm__gbuf). There is no process-wide state:
 * the arena and its out-of-memory mark are the calling thread's.
 */
#ifndef WM_FORMAT_JSON_H
#define WM_FORMAT_JSON_H

#include "../internal.h"

#define WM_JSON_MAX_DEPTH 128 /* serde_json's recursion limit; a valid header needs 3 */

typedef enum wm__jtype {
    WM_JNULL,
    WM_JFALSE,
    WM_JTRUE,
    WM_JNUMBER,
    WM_JSTRING,
    WM_JARRAY,
    WM_JOBJECT,
} wm__jtype;

/* One value of the tree. Members of an object and elements of an array are a list in document
 * order (child, then next); a member's name is `key`. */
typedef struct wm__jval {
    struct wm__jval *next, *child;
    const char *key; /* the member's name, decoded, NUL-terminated; NULL outside an object */
    const char *str; /* a string: decoded, NUL-terminated; a number: its text (len bytes) */
    size_t len;      /* the string's bytes (without the NUL), or the number's text length */
    uint64_t u;      /* a number: the magnitude of a plain integer (see exact, neg_int) */
    uint8_t type;    /* wm__jtype */
    bool exact;      /* a plain non-negative integer that fits 64 bits: u is its value */
    bool neg_int;    /* a plain negative integer whose magnitude fits 64 bits: -u */
} wm__jval;

/* A WM_EFORMAT error "PATH: at offset AT: WHAT". */
wm_status wm__json_err(wm_error *err, const char *path, uint64_t at, const char *fmt, ...)
    WM_PRINTF(4, 5);

void wm__json_begin(void);
void wm__json_end(void);
/* n bytes from the arena (NULL when out of memory, which marks the read as such). */
void *wm__json_alloc(size_t n);

/* Pre-scans s[0..n) (UTF-8, every token against the grammar, depth, no \u0000), builds the tree
 * in the arena, and checks that only white space follows the value. `base` is the file offset
 * of s[0], for messages. */
wm_status wm__json_load(const unsigned char *s, size_t n, uint64_t base, const char *path,
                        const wm__jval **out, wm_error *err);
/* "object", "array", "string", "number", "boolean" or "null", for messages. */
const char *wm__json_kind(const wm__jval *v);
/* The value of a number as a double (strtod's rounding); false when out of memory. */
bool wm__json_f64(const wm__jval *v, double *out);

/* A growable byte buffer addressed by offsets (pointers are fixed up once it stops growing),
 * a counted allocation; oom is sticky. */
typedef struct wm__gbuf {
    char *p;
    size_t len, cap;
    bool oom;
} wm__gbuf;
size_t wm__gput(wm__gbuf *b, const void *d, size_t n);
size_t wm__gput_str(wm__gbuf *b, const char *s);
/* Appends the compact JSON text of v (no NUL): no white space, strings escaped as JSON needs
 * (", \, \b \f \n \r \t, other control bytes as \u00XX), numbers as their text. */
void wm__json_print(wm__gbuf *b, const wm__jval *v);

#endif /* WM_FORMAT_JSON_H */
