/*
 * linux.c: the Linux-only half of os.h: madvise advice that POSIX lacks, /proc files,
 * trimming glibc's heap, and shared libraries loaded at run time.
 * MADV_POPULATE_READ (Linux 5.14) prefaults a range without privatising a page of a private
 * mapping, unlike MAP_POPULATE or mlock, so it is the prefetch tool of every mapped mode.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "os.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
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
    case WM_OS_ADV_POPULATE_WRITE: adv = MADV_POPULATE_WRITE; break;
    default: return EINVAL;
    }
    for (;;) {
        if (madvise(addr, len, adv) == 0) return 0;
        if (errno != EINTR && errno != EAGAIN) return errno;
    }
}

/* ---- /proc: the source of the memory figures (src/meter.c) ---- */

int wm__os_proc_open(int pid, const char *name, int *fd_out) {
    int e = wm__fault_hit(WM_OS_OPEN);
    if (e) return e;
    if (pid < 0 || !name) return EINVAL;
    char path[96];
    int n = pid == 0 ? snprintf(path, sizeof path, "/proc/self/%s", name)
                     : snprintf(path, sizeof path, "/proc/%d/%s", pid, name);
    if (n < 0 || (size_t)n >= sizeof path) return ENAMETOOLONG;
    return wm__os_open_raw(path, 0, fd_out);
}

int wm__os_read(int fd, void *buf, size_t len, size_t *got) {
    *got = 0;
    for (;;) {
        int e = wm__fault_hit(WM_OS_PREAD);
        if (e == EINTR) continue;
        if (e) return e;
        ssize_t n = read(fd, buf, len);
        if (n >= 0) {
            *got = (size_t)n;
            return 0;
        }
        if (errno != EINTR) return errno;
    }
}

uint64_t wm__os_dev_id(unsigned major, unsigned minor) { return (uint64_t)makedev(major, minor); }

/* ---- the C library's heap ---- */

#if defined(__GLIBC__)
#include <malloc.h>
void wm__os_heap_trim(void) { malloc_trim(0); }
#else
void wm__os_heap_trim(void) {}
#endif

/* ---- shared libraries ---- */

void wm__os_library(const char *const *names, size_t n, void **out, const char **why) {
    *out = NULL;
    *why = "no library name";
    for (size_t i = 0; i < n && !*out; i++) {
        *out = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!*out) *why = dlerror();
    }
}

void *wm__os_symbol(void *library, const char *name) { return dlsym(library, name); }
