/*
 * linux.c: the Linux-only half of os.h: madvise advice that POSIX lacks.
 * MADV_POPULATE_READ (Linux 5.14) prefaults a range without privatising a page of a private
 * mapping, unlike MAP_POPULATE or mlock, so it is the prefetch tool of every mapped mode.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "os.h"

#include <errno.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

int wm__os_advise(void *addr, size_t len, wm_os_advice advice) {
    int e = wm__fault_hit(WM_OS_ADVISE);
    if (e) return e;
    int adv;
    switch (advice) {
    case WM_OS_ADV_POPULATE_READ: adv = MADV_POPULATE_READ; break;
    case WM_OS_ADV_WILLNEED: adv = MADV_WILLNEED; break;
    case WM_OS_ADV_HUGEPAGE: adv = MADV_HUGEPAGE; break;
    case WM_OS_ADV_SEQUENTIAL: adv = MADV_SEQUENTIAL; break;
    default: return EINVAL;
    }
    for (;;) {
        if (madvise(addr, len, adv) == 0) return 0;
        if (errno != EINTR && errno != EAGAIN) return errno;
    }
}
