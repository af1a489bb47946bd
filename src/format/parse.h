/*
 * parse.h: the GGUF parser (gguf.c) as its reader (src/open/header.c) drives it: passes over a
 * growing prefix of the file's bytes until one holds the whole header, then the name blob.
 */
#ifndef WM_FORMAT_PARSE_H
#define WM_FORMAT_PARSE_H

#include "cursor.h"

/* A parse across passes. Fill f, r.path, r.err and r.file_size; each pass sets r.buf and r.len
 * to the bytes it has (a prefix of the file, from offset 0). */
typedef struct wm__gguf_state {
    wm__cursor r;
    wm_file *f;
    unsigned lenw; /* 4 for v1, else 8 */
    uint64_t n_tensors, n_kv;
    size_t kv_cap, t_cap; /* entries allocated in f->kvs and f->tensors (kept across passes) */
} wm__gguf_state;

/* One pass over r.buf[0, r.len) from its first byte: true when the whole header was parsed into
 * s->f (its metadata, tensors and data offset; f->header_len its length); false with r.need_more
 * when the header runs past r.len (pass again over more bytes), else with the error in *r.err
 * (WM_EFORMAT naming the file, offset and field). Tables a pass allocates stay for the next. */
bool wm__gguf_pass(wm__gguf_state *s);
/* After the pass that parsed the header (whose bytes f->header then holds): keys and tensor
 * names copied into one NUL-terminated blob, their offsets rebased. */
wm_status wm__gguf_names(wm_file *f, const char *path, wm_error *err);

#endif /* WM_FORMAT_PARSE_H */
