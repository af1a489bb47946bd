/*
 * error.c: status names and messages (from WM_STATUS_LIST), and the wm_error filler.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

const char *wm_version(void) { return WM_VERSION_STRING; }

const char *wm_status_name(wm_status status) {
    switch (status) {
#define WM__STATUS_NAME(name, value, msg)                                                          \
    case WM_##name: return "WM_" #name;
        WM_STATUS_LIST(WM__STATUS_NAME)
#undef WM__STATUS_NAME
    }
    return "WM_UNKNOWN";
}

const char *wm_strerror(wm_status status) {
    switch (status) {
#define WM__STATUS_MSG(name, value, msg)                                                           \
    case WM_##name: return msg;
        WM_STATUS_LIST(WM__STATUS_MSG)
#undef WM__STATUS_MSG
    }
    return "unknown status";
}

wm_status wm__err(wm_error *err, wm_status code, int os_errno, const char *fmt, ...) {
    if (err) {
        err->code = code;
        err->os_errno = os_errno;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

wm_status wm__status_io(int e) {
    switch (e) {
    case 0: return WM_OK;
    case ENOMEM:
    case EAGAIN: return WM_ENOMEM; /* the kernel is out of a resource: memory, locks, threads */
    case ECANCELED: return WM_ECANCELED;
    default: return WM_EIO;
    }
}

wm_status wm__status_from_errno(int e) {
    switch (e) {
    case ENOENT:
    case ENOTDIR: return WM_ENOENT;
    case EACCES:
    case EPERM: return WM_EPERM;
    case EINVAL: return WM_EINVAL;
    default: return wm__status_io(e);
    }
}

const char *wm__errno_text(int e) {
    const char *s = wm__os_strerror(e);
    return s ? s : "unknown error";
}
