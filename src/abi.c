/*
 * abi.c: the binary interface's moving parts (include/weightmap.h, "the ABI promise"): the
 * version as a number, and the copying of the caller's sized structs in and out, so that an
 * older, shorter struct keeps working and a newer, longer one is refused only when it sets a
 * field this library does not know.
 *
 * Sections: version; sized structs.
 */
#include "internal.h"

#include <string.h>

/* ---- version ---- */

uint32_t wm_version_number(void) { return WM_VERSION_NUMBER; }

/* ---- sized structs ---- */

/* Every sized struct begins with `uint32_t size`; 0 stands for the 1.0 size. */
static size_t caller_size(const void *s, size_t size_1_0) {
    uint32_t n;
    memcpy(&n, s, sizeof n);
    return n ? n : size_1_0;
}

wm_status wm__struct_in(void *dst, size_t lib_size, const void *src, size_t size_1_0,
                        const char *what, wm_error *err) {
    size_t n = caller_size(src, size_1_0);
    if (n < sizeof(uint32_t))
        return wm__err(err, WM_EINVAL, 0, "%s: size %zu is smaller than its size field", what, n);
    const unsigned char *tail = (const unsigned char *)src + lib_size;
    for (size_t k = 0; n > lib_size && k < n - lib_size; k++)
        if (tail[k])
            return wm__err(err, WM_EINVAL, 0,
                           "%s: size %zu sets a field past the %zu bytes this library (weightmap "
                           "%s) knows (at byte %zu)",
                           what, n, lib_size, WM_VERSION_STRING, lib_size + k);
    memset(dst, 0, lib_size);
    memcpy(dst, src, n < lib_size ? n : lib_size);
    uint32_t full = (uint32_t)lib_size;
    memcpy(dst, &full, sizeof full);
    return WM_OK;
}

void wm__struct_out(void *dst, const void *src, size_t lib_size, size_t size_1_0) {
    size_t n = caller_size(dst, size_1_0);
    if (n > lib_size) n = lib_size;
    if (n > sizeof(uint32_t))
        memcpy((unsigned char *)dst + sizeof(uint32_t),
               (const unsigned char *)src + sizeof(uint32_t), n - sizeof(uint32_t));
}
