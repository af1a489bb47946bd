/*
 * wmtest_darwin.c: the test helpers that ask the OS for what /proc shows on Linux
 * (wmtest_linux.c): the regions of this process that map a file and its open descriptors, from
 * libproc (proc_pidinfo), and libmalloc's statistics. Darwin keeps no count of the bytes a process
 * has read (Linux's rchar): a case that needs it is skipped. Compiled and linked for aarch64-macos
 * in `make test`, not run there (docs/PORTING.md).
 */
#include "wmtest.h"

#include <errno.h>
#include <libproc.h>
#include <mach/vm_prot.h>
#include <malloc/malloc.h>
#include <string.h>
#include <sys/proc_info.h>
#include <sys/stat.h>
#include <unistd.h>

/* Walks the regions from address 0: each answer is the region at or after the address asked
 * for; past the last one the kernel answers nothing. */
int wmt_count_file_maps(const char *path) { return wmt_count_file_maps_of(path, NULL); }

int wmt_count_file_maps_of(const char *path, int *not_shared_ro) {
    struct stat st;
    if (stat(path, &st) != 0) wmt_fail(__FILE__, __LINE__, "stat %s: %s", path, strerror(errno));
    struct proc_regionwithpathinfo ri;
    uint64_t addr = 0;
    int n = 0;
    if (not_shared_ro) *not_shared_ro = 0;
    for (;;) {
        int got = proc_pidinfo(getpid(), PROC_PIDREGIONPATHINFO, addr, &ri, (int)sizeof ri);
        if (got < (int)sizeof ri) break;
        if (ri.prp_vip.vip_vi.vi_stat.vst_ino == (uint64_t)st.st_ino &&
            (dev_t)ri.prp_vip.vip_vi.vi_stat.vst_dev == st.st_dev) {
            n++;
            if (not_shared_ro && ((ri.prp_prinfo.pri_protection & VM_PROT_WRITE) ||
                                  ri.prp_prinfo.pri_share_mode == SM_PRIVATE ||
                                  ri.prp_prinfo.pri_share_mode == SM_COW))
                (*not_shared_ro)++;
        }
        uint64_t end = ri.prp_prinfo.pri_address + ri.prp_prinfo.pri_size;
        if (end <= addr) break;
        addr = end;
    }
    return n;
}

int wmt_count_fds(void) {
    struct proc_fdinfo fds[1024];
    int got = proc_pidinfo(getpid(), PROC_PIDLISTFDS, 0, fds, (int)sizeof fds);
    if (got <= 0)
        wmt_fail(__FILE__, __LINE__, "proc_pidinfo(PROC_PIDLISTFDS): %s", strerror(errno));
    return got / (int)sizeof fds[0];
}

uint64_t wmt_rchar(bool and_this_read) {
    (void)and_this_read;
    WM_SKIP("Darwin keeps no count of the bytes a process has read (Linux's rchar)");
}

wmt_malloc wmt_malloc_stats(void) {
    malloc_statistics_t st;
    malloc_zone_statistics(NULL, &st);
    return (wmt_malloc){st.size_in_use, 0};
}

void wmt_make_cold(const char *path, uint64_t warm_off, uint64_t warm_len) {
    (void)path;
    (void)warm_off;
    (void)warm_len;
    WM_SKIP("Darwin has no call that drops one file's pages from the cache (purge(8) is root's)");
}
