/*
 * json.h: safetensors' JSON (json.c), shared by the header reader (safetensors.c) and the
 * index reader (safetensors_index.c): a strict pre-scan, cJSON's tree built in a page arena,
 * the exact value of every number, and a growable blob for the strings a reader keeps.
 *
 * A read is one bracket on one thread: wm__json_begin(), then wm__json_load() and the walk
 * over the tree (its nodes, the number list and wm__json_alloc's blocks all in the arena),
 * then wm__json_end(), which frees the arena whole. Nothing from the arena outlives it: what a
 * reader keeps it copies into counted allocations (wm__gbuf).
 */
#ifndef WM_FORMAT_JSON_H
#define WM_FORMAT_JSON_H

#include "../internal.h"

#include <cjson/cJSON.h>

#define WM_JSON_MAX_DEPTH 128 /* serde_json's recursion limit; a valid header needs 3 */

/* A number token of the text, in document order. */
typedef struct wm__jnum {
    uint64_t u;
    bool exact; /* a plain non-negative integer that fits 64 bits: u is its value */
} wm__jnum;

typedef struct wm__jscan {
    wm__jnum *v;
    size_t n, cap, next; /* next: the walk's cursor */
} wm__jscan;

/* A WM_EFORMAT error "PATH: at offset AT: WHAT". */
wm_status wm__json_err(wm_error *err, const char *path, uint64_t at, const char *fmt, ...)
    WM_PRINTF(4, 5);

void wm__json_begin(void);
void wm__json_end(void);
/* n bytes from the arena (NULL when out of memory, which marks the read as such). */
void *wm__json_alloc(size_t n);

/* Pre-scans s[0..n) (UTF-8, every token against the grammar, depth, no \u0000, the numbers
 * into js), parses it with cJSON, and checks that only white space follows the value. `base`
 * is the file offset of s[0], for messages. */
wm_status wm__json_load(const unsigned char *s, size_t n, uint64_t base, const char *path,
                        wm__jscan *js, cJSON **out, wm_error *err);
/* The walk: the exact value of the next number (NULL past the last), and stepping over the
 * numbers inside a node the walk does not read. */
const wm__jnum *wm__json_take_num(wm__jscan *js);
void wm__json_skip_nums(wm__jscan *js, const cJSON *node);
/* "object", "array", "string", "number", "boolean" or "null", for messages. */
const char *wm__json_kind(const cJSON *v);
/* Compact JSON text of v, in the arena; NULL when out of memory. */
char *wm__json_print(const cJSON *v);

/* A growable byte buffer addressed by offsets (pointers are fixed up once it stops growing),
 * a counted allocation; oom is sticky. */
typedef struct wm__gbuf {
    char *p;
    size_t len, cap;
    bool oom;
} wm__gbuf;
size_t wm__gput(wm__gbuf *b, const void *d, size_t n);
size_t wm__gput_str(wm__gbuf *b, const char *s);

#endif /* WM_FORMAT_JSON_H */
