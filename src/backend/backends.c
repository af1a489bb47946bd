/*
 * backends.c: the backend table (backend.h) and wm_backend_init. A backend is chosen by
 * looking its kind up here; nothing else in the library names a backend.
 */
#include "backend.h"

static const wm__backend *const table[] = {
    [WM_BACKEND_CPU] = &wm__backend_cpu,
    [WM_BACKEND_CUDA] = &wm__backend_cuda,
};

wm_status wm__backend_get(wm_backend_kind kind, const char *who, const wm__backend **out,
                          wm_error *err) {
    *out = NULL;
    if ((unsigned)kind >= sizeof table / sizeof table[0] || !table[kind])
        return wm__err(err, WM_EINVAL, 0, "%s: unknown backend %d", who, (int)kind);
    const wm__backend *be = table[kind];
    if (be->absent) return wm__err(err, WM_EUNSUPPORTED, 0, "%s: %s", who, be->absent);
    *out = be;
    return WM_OK;
}

wm_status wm_backend_init(wm_backend_kind backend, int device, wm_error *err) {
    const wm__backend *be;
    wm_status st = wm__backend_get(backend, "wm_backend_init", &be, err);
    if (st) return st;
    return be->init ? be->init(device, err) : WM_OK;
}
