/*
 * safetensors.c: the safetensors reader (placeholder until the safetensors issue lands).
 */
#include "../internal.h"

wm_status wm__safetensors_parse(wm_file *f, wm_error *err) {
    return wm__err(err, WM_EUNSUPPORTED, 0, "%s: safetensors is not read yet", f->path);
}
