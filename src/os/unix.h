/*
 * unix.h: what unix.c offers the OS file beside it (linux.c; a darwin.c would use the same).
 * Not part of the contract: nothing outside src/os/ includes it.
 */
#ifndef WM_OS_UNIX_H
#define WM_OS_UNIX_H

#include <stddef.h>
#include <stdint.h>

/* open(path, O_RDONLY | O_CLOEXEC | extra), retried on EINTR, with no fault check: the one open
 * of this layer, under the checked calls (0 or an errno). */
int wm__unix_open(const char *path, int extra, int *fd_out);

/* read(fd, buf, len) once, retrying EINTR, each try first asking the fault table (PREAD; an
 * injected EINTR is retried like a real one). *got is 0 at end of file. */
int wm__unix_read(int fd, void *buf, size_t len, size_t *got);

/* wm__os_cached by POSIX alone (mincore over a transient mapping of the range), with no fault
 * check: the fallback of an OS file whose own way is missing, and Darwin's whole answer. */
int wm__unix_cached(int fd, uint64_t off, uint64_t len, uint64_t *cached_out);

/* madvise(addr, len, adv), retried on EINTR and EAGAIN, with no fault check (the OS file's
 * wm__os_advise asks the fault table and maps the advice to its own value): 0 or an errno. */
int wm__unix_madvise(void *addr, size_t len, int adv);

#endif /* WM_OS_UNIX_H */
