/*
 * ggml_check.h: what ggml refuses of a tensor, checked before ggml would abort on it; shared by
 * the ggml bridge (ggml.c) and the llama.cpp bridge (its files, through llama_bridge.h): static
 * inline, so that a file that uses none of them compiles them not. Public API only (weightmap.h,
 * ggml.h).
 */
#ifndef WM_BRIDGE_GGML_CHECK_H
#define WM_BRIDGE_GGML_CHECK_H

#include "weightmap.h"

#include <ggml.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Fills err (when not NULL) with code and the message; returns code. */
static inline wm_status fail(wm_error *err, wm_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline wm_status fail(wm_error *err, wm_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        err->os_errno = 0;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* What ggml's gguf loader refuses, said before ggml would abort: a type outside ggml's table or
 * removed from it, a row that is not whole blocks, a name ggml cannot hold, and a byte size that
 * is not ggml's for the type and shape. */
static inline wm_status check_tensor(const char *path, const char *name, wm_type type,
                                     const uint64_t ne[WM_MAX_DIMS], uint64_t nbytes,
                                     wm_error *err) {
    if ((int)type < 0 || (int)type >= (int)GGML_TYPE_COUNT ||
        ggml_blck_size((enum ggml_type)type) == 0)
        return fail(err, WM_EFORMAT, "%s: tensor '%s' has type %s (%d), which ggml lacks", path,
                    name, wm_type_name(type) ? wm_type_name(type) : "unknown", (int)type);
    if (strlen(name) >= GGML_MAX_NAME)
        return fail(err, WM_EFORMAT,
                    "%s: tensor '%s' has a name of %zu bytes; ggml holds at most %d", path, name,
                    strlen(name), GGML_MAX_NAME - 1);
    int64_t blck = ggml_blck_size((enum ggml_type)type);
    uint64_t rows = 1;
    for (int d = 1; d < WM_MAX_DIMS; d++)
        rows *= ne[d];
    if (ne[0] % (uint64_t)blck != 0 || ne[0] > INT64_MAX)
        return fail(err, WM_EFORMAT,
                    "%s: tensor '%s' (%s) has rows of %" PRIu64
                    " elements, not whole blocks of %" PRId64,
                    path, name, ggml_type_name((enum ggml_type)type), ne[0], blck);
    uint64_t want = ne[0] / (uint64_t)blck * ggml_type_size((enum ggml_type)type) * rows;
    if (want != nbytes)
        return fail(err, WM_EFORMAT,
                    "%s: tensor '%s' holds %" PRIu64
                    " bytes; ggml's %s of that shape holds %" PRIu64,
                    path, name, nbytes, ggml_type_name((enum ggml_type)type), want);
    return WM_OK;
}

/* check_tensor for every tensor of the file, as stored: a file ggml cannot hold is refused before
 * ggml (or llama.cpp) is asked for anything. */
static inline wm_status check_tensors(const wm_file *f, wm_error *err) {
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info ti;
        wm_status st = wm_file_tensor(f, i, &ti);
        if (!st) st = check_tensor(wm_file_path(f), ti.name, ti.type, ti.shape, ti.nbytes, err);
        if (st) return st;
    }
    return WM_OK;
}

#endif /* WM_BRIDGE_GGML_CHECK_H */
