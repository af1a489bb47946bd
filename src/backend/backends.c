/*
 * backends.c: the backend table (backend.h), wm_backend_init, and the backend names
 * (wm_backend_name, wm_backend_from_name: the one parser of "cpu", "cuda:N,M"). A backend is chosen
 * by looking its kind up here; nothing else in the library names a backend.
 */
#include "backend.h"

#include <string.h>

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

int wm_backend_available(wm_backend_kind backend) {
    return (unsigned)backend < sizeof table / sizeof table[0] && table[backend] &&
           !table[backend]->absent;
}

/* ---- names ---- */

const char *wm_backend_name(wm_backend_kind backend) {
    switch (backend) {
    case WM_BACKEND_CPU: return "cpu";
    case WM_BACKEND_CUDA: return "cuda";
    default: return NULL;
    }
}

/* The device list after "cuda:": numbers 0 .. WM_LEDGER_DEVICES-1, comma-separated, none twice. */
static wm_status parse_devices(const char *spec, const char *list, int *devs, unsigned room,
                               unsigned *n, wm_error *err) {
    *n = 0;
    for (const char *p = list;; p++) {
        if (*p < '0' || *p > '9')
            return wm__err(err, WM_EINVAL, 0, "backend '%s': expected a device number at '%s'",
                           spec, p);
        long d = 0;
        while (*p >= '0' && *p <= '9' && d < WM_LEDGER_DEVICES)
            d = d * 10 + (*p++ - '0');
        if (d >= WM_LEDGER_DEVICES || (*p >= '0' && *p <= '9'))
            return wm__err(err, WM_EINVAL, 0, "backend '%s': device numbers are 0..%d", spec,
                           WM_LEDGER_DEVICES - 1);
        for (unsigned k = 0; k < *n; k++)
            if (devs[k] == (int)d)
                return wm__err(err, WM_EINVAL, 0, "backend '%s': device %ld is listed twice", spec,
                               d);
        if (*n == room)
            return wm__err(err, WM_EINVAL, 0, "backend '%s': more than %u devices", spec, room);
        devs[(*n)++] = (int)d;
        if (*p == '\0') return WM_OK;
        if (*p != ',')
            return wm__err(err, WM_EINVAL, 0, "backend '%s': unexpected '%c' after device %ld",
                           spec, *p, d);
    }
}

wm_status wm_backend_from_name(const char *spec, wm_backend_kind *backend, int *devices,
                               unsigned max_devices, unsigned *n_devices, wm_error *err) {
    if (!spec || !backend || !n_devices || (max_devices && !devices))
        return wm__err(err, WM_EINVAL, 0, "wm_backend_from_name: NULL argument");
    if (strcmp(spec, "cpu") == 0) {
        *backend = WM_BACKEND_CPU;
        *n_devices = 0;
        return WM_OK;
    }
    if (strncmp(spec, "cuda", 4) != 0 || (spec[4] != '\0' && spec[4] != ':'))
        return wm__err(err, WM_EINVAL, 0,
                       "unknown backend '%s' (cpu, cuda, cuda:N or cuda:N,M,...)", spec);
    int devs[WM_LEDGER_DEVICES] = {0};
    unsigned n = 1, room = max_devices < WM_LEDGER_DEVICES ? max_devices : WM_LEDGER_DEVICES;
    if (room == 0) return wm__err(err, WM_EINVAL, 0, "backend '%s': no room for a device", spec);
    if (spec[4] == ':') {
        wm_status st = parse_devices(spec, spec + 5, devs, room, &n, err);
        if (st) return st;
    }
    memcpy(devices, devs, n * sizeof *devs);
    *backend = WM_BACKEND_CUDA;
    *n_devices = n;
    return WM_OK;
}
