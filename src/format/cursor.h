/*
 * cursor.h: a bounded little-endian cursor over a byte buffer: the GGUF parser's (gguf.c is its
 * one user; safetensors has 8 binary bytes, read directly, and then JSON, json.c's job).
 *
 * The buffer may hold only a prefix of the file. A read that runs past the buffer while the file
 * has more bytes sets `need_more`; growing the buffer and parsing again is the caller's loop
 * (src/open/header.c, the GGUF header read), not a helper here. A read past the end of the file
 * itself is a format error. Every read checks the bytes left before it touches memory, so no
 * count or length from the file is used unchecked.
 */
#ifndef WM_CURSOR_H
#define WM_CURSOR_H

#include "../internal.h"

#include <string.h>

typedef struct wm__cursor {
    const unsigned char *buf;
    size_t len;         /* bytes in buf (a prefix of the file) */
    size_t pos;         /* absolute file offset == index into buf */
    uint64_t file_size; /* bytes in the whole file */
    const char *path;
    wm_error *err;
    bool need_more; /* a read ran past buf but not past the file */
} wm__cursor;

/* Bytes left in the file from pos, and in the buffer. */
static inline uint64_t wm__rd_file_left(const wm__cursor *r) { return r->file_size - r->pos; }

/* Checks that n bytes can be read at pos. On failure sets need_more or reports a format error
 * naming `field`. */
static inline bool wm__rd_have(wm__cursor *r, uint64_t n, const char *field) {
    if (WM_UNLIKELY(n > r->len - r->pos)) {
        if (n <= wm__rd_file_left(r)) {
            r->need_more = true;
        } else {
            wm__err(r->err, WM_EFORMAT, 0,
                    "%s: %s at offset %zu (0x%zx) needs %llu bytes, %llu left in the file", r->path,
                    field, r->pos, r->pos, (unsigned long long)n,
                    (unsigned long long)wm__rd_file_left(r));
        }
        return false;
    }
    return true;
}

static inline bool wm__rd_u32(wm__cursor *r, uint32_t *v, const char *field) {
    if (!wm__rd_have(r, 4, field)) return false;
    memcpy(v, r->buf + r->pos, 4);
    r->pos += 4;
    return true;
}

static inline bool wm__rd_u64(wm__cursor *r, uint64_t *v, const char *field) {
    if (!wm__rd_have(r, 8, field)) return false;
    memcpy(v, r->buf + r->pos, 8);
    r->pos += 8;
    return true;
}

/* A length or count field of `width` bytes (4 or 8). */
static inline bool wm__rd_len(wm__cursor *r, unsigned width, uint64_t *v, const char *field) {
    if (width == 8) return wm__rd_u64(r, v, field);
    uint32_t v32;
    if (!wm__rd_u32(r, &v32, field)) return false;
    *v = v32;
    return true;
}

#endif /* WM_CURSOR_H */
