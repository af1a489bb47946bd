/*
 * first_touch.c: what the first write to fresh anonymous memory costs on this machine, the way the
 * bridge's own weight buffers get it (bridge/llama_own.c: anonymous, 2 MiB aligned, huge pages
 * advised). Each round maps MIB MiB, advises huge pages (or not), and times MADV_POPULATE_WRITE
 * (the kernel zeroing every page, as a conversion's first stores would), then a memset of the same
 * bytes (the pages already there), then unmaps:
 *
 *     build/bench/first_touch [MIB] [ROUNDS] [--small-pages] [--pause SECONDS]
 *
 * MIB defaults to 363 (the development VM's repacked bytes of the 1.2 GiB bench model), ROUNDS to
 * 4; --pause sleeps that long before each round. On a virtual machine whose balloon reports free
 * memory to its host (virtio_balloon's free page reporting, of free blocks of 2 MiB and up), a
 * huge page freed a few seconds before costs a fault on the host at its first touch: the first
 * round, or every round with --pause 5, runs an order of magnitude slower than the rounds that
 * reuse the pages the round before freed (bench/RESULTS.md, llama, "1.8.3 ... first touch").
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t mib = 363, huge = (size_t)2 << 20;
    int rounds = 4, small = 0, pause = 0, pos = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--small-pages") == 0)
            small = 1;
        else if (strcmp(argv[i], "--pause") == 0 && i + 1 < argc)
            pause = atoi(argv[++i]);
        else if (pos++ == 0)
            mib = (size_t)strtoul(argv[i], NULL, 10);
        else
            rounds = atoi(argv[i]);
    }
    size_t n = mib << 20;
    if (!n || rounds < 1) {
        fprintf(stderr, "usage: first_touch [MIB] [ROUNDS] [--small-pages] [--pause SECONDS]\n");
        return 2;
    }
    printf("%zu MiB, %s pages, %d rounds%s\n", mib, small ? "4 KiB" : "huge (advised)", rounds,
           pause ? ", a pause before each" : "");
    for (int r = 0; r < rounds; r++) {
        if (pause) sleep((unsigned)pause);
        char *map =
            mmap(NULL, n + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED) {
            perror("first_touch: mmap");
            return 1;
        }
        char *at = (char *)(((uintptr_t)map + huge - 1) / huge * huge);
        if (!small) (void)madvise(at, n, MADV_HUGEPAGE);
        double t0 = now();
        if (madvise(at, n, MADV_POPULATE_WRITE) != 0) {
            perror("first_touch: MADV_POPULATE_WRITE");
            return 1;
        }
        double t1 = now();
        memset(at, 1, n);
        double t2 = now();
        printf("round %d: first touch %.1f ms (%.2f GB/s), a write after %.1f ms\n", r + 1,
               (t1 - t0) * 1e3, (double)n / (t1 - t0) / 1e9, (t2 - t1) * 1e3);
        munmap(map, n + huge);
    }
    return 0;
}
