/*
 * wmtest_linux.c: the test helpers that read what only Linux shows (/proc/self: maps, fd, io),
 * glibc's malloc statistics, and a file made cold (POSIX_FADV_DONTNEED, O_DIRECT);
 * wmtest_darwin.c is the same for Darwin. tests/CMakeLists.txt links the one for the target.
 */
#include "wmtest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

int wmt_count_file_maps(const char *path) { return wmt_count_file_maps_of(path, NULL); }

int wmt_count_file_maps_of(const char *path, int *not_shared_ro) {
    struct stat st;
    if (stat(path, &st) != 0) wmt_fail(__FILE__, __LINE__, "stat %s: %s", path, strerror(errno));
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) wmt_fail(__FILE__, __LINE__, "open /proc/self/maps");
    char line[1024];
    int n = 0;
    if (not_shared_ro) *not_shared_ro = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long lo, hi, off, ino;
        unsigned maj, min;
        char perms[8];
        if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &lo, &hi, perms, &off, &maj, &min,
                   &ino) == 7 &&
            ino == (unsigned long long)st.st_ino && makedev(maj, min) == st.st_dev) {
            n++;
            if (not_shared_ro && strcmp(perms, "r--s") != 0) (*not_shared_ro)++;
        }
    }
    fclose(f);
    return n;
}

int wmt_count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) wmt_fail(__FILE__, __LINE__, "opendir /proc/self/fd: %s", strerror(errno));
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* Bytes this process has read with read/pread (the kernel's rchar). The figure a read of
 * /proc/self/io shows does not count that read; `and_this_read` adds it, so that
 * wmt_rchar(false) - wmt_rchar(true) is exactly what was read between the two calls. */
uint64_t wmt_rchar(bool and_this_read) {
    int fd = open("/proc/self/io", O_RDONLY);
    CHECK(fd >= 0);
    char buf[512];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    CHECK(n > 0);
    buf[n] = 0;
    const char *p = strstr(buf, "rchar:");
    CHECK(p != NULL);
    return strtoull(p + 6, NULL, 10) + (and_this_read ? (uint64_t)n : 0);
}

wmt_malloc wmt_malloc_stats(void) {
    struct mallinfo2 m = mallinfo2();
    return (wmt_malloc){m.uordblks, m.hblkhd};
}

void wmt_make_cold(const char *path, uint64_t warm_off, uint64_t warm_len) {
    int fd = open(path, O_RDWR);
    CHECK_MSG(fd >= 0, "open %s", path);
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    CHECK(fdatasync(fd) == 0);
    CHECK(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    int direct = open(path, O_RDONLY | O_DIRECT);
    if (direct >= 0) close(direct);
    if (direct < 0 || wmt_cached_bytes(path, 0, (uint64_t)st.st_size) != 0) {
        close(fd);
        WM_SKIP("this file system keeps the file's pages or has no O_DIRECT");
    }
    if (warm_len) {
        CHECK(posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM) == 0);
        unsigned char *buf = malloc((size_t)warm_len);
        CHECK(buf && pread(fd, buf, (size_t)warm_len, (off_t)warm_off) == (ssize_t)warm_len);
        free(buf);
    }
    close(fd);
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t wa = warm_off / page * page, wb = (warm_off + warm_len + page - 1) / page * page;
    uint64_t want = warm_len ? wb - wa : 0;
    if (wmt_cached_bytes(path, 0, (uint64_t)st.st_size) != want ||
        (warm_len && wmt_cached_bytes(path, wa, wb - wa) != want))
        WM_SKIP("the page cache did not take exactly the warmed pages (readahead)");
}
