/*
 * unix.h: what unix.c offers the OS file beside it (linux.c; a darwin.c would use the same).
 * Not part of the contract: nothing outside src/os/ includes it.
 */
#ifndef WM_OS_UNIX_H
#define WM_OS_UNIX_H

#include <stddef.h>

/* open(path, O_RDONLY | O_CLOEXEC | extra), retried on EINTR, with no fault check: the one open
 * of this layer, under the checked calls (0 or an errno). */
int wm__unix_open(const char *path, int extra, int *fd_out);

/* read(fd, buf, len) once, retrying EINTR, each try first asking the fault table (PREAD; an
 * injected EINTR is retried like a real one). *got is 0 at end of file. */
int wm__unix_read(int fd, void *buf, size_t len, size_t *got);

#endif /* WM_OS_UNIX_H */
