/*
 * tsan_hooks.c: the interposer's hooks (tools/trace/wmtrace.c compiled with WMTRACE_SELFTEST, so
 * under other names) called from four threads at once under ThreadSanitizer: big and small
 * blocks, some freed by another thread; opens, reads and maps of a weight file; mlock; SIGUSR1
 * releases; and releases through an int3 probe (the marker is tsan_release, a function of this
 * program that the threads call directly: its entry and return hooks run on every thread), while
 * one more thread dlopens libwmtabi.so, calls its abi_so_fn (a marker: armed at each dlopen by the
 * rescan in the dynamic linker's hook, forgotten at each dlclose, its probe slot reused) and
 * dlcloses it. The test (ctest trace_tsan.hooks, `make test-tsan`) passes when TSan reports no
 * race, every big block is accounted back to zero and every call through a probe was seen.
 *
 *     tsan_hooks WEIGHT_FILE LIBWMTABI
 */
#define _GNU_SOURCE
#include "../../tools/trace/wmtrace.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void *wmtrace_st_malloc(size_t n);
void wmtrace_st_free(void *p);
void *wmtrace_st_realloc(void *p, size_t n);
void *wmtrace_st_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int wmtrace_st_munmap(void *addr, size_t len);
int wmtrace_st_open(const char *path, int flags, ...);
int wmtrace_st_close(int fd);
ssize_t wmtrace_st_pread(int fd, void *b, size_t n, off_t off);
int wmtrace_st_mlock(const void *a, size_t n);
int wmtrace_st_munlock(const void *a, size_t n);
void wmtrace_selftest_start(void);

#define THREADS 4
#define ROUNDS 300

static const char *file;

/* The release marker: internal to this program, called directly. */
__attribute__((noinline)) int tsan_release(int x);
__attribute__((noinline)) int tsan_release(int x) {
    __asm__ volatile("" ::: "memory");
    return x + 1;
}
static void *handoff[THREADS][ROUNDS];

static void *worker(void *arg) {
    int me = (int)(long)arg;
    char buf[4096];
    for (int i = 0; i < ROUNDS; i++) {
        void *big = wmtrace_st_malloc((size_t)(100 << 10) + (size_t)i);
        void *small = wmtrace_st_malloc(32);
        big = wmtrace_st_realloc(big, (size_t)(300 << 10));
        __atomic_store_n(&handoff[me][i], wmtrace_st_malloc((size_t)(70 << 10)), __ATOMIC_RELEASE);
        wmtrace_st_free(small);
        wmtrace_st_free(big);
        if (i % 10 == 0) {
            int fd = wmtrace_st_open(file, O_RDONLY);
            if (fd < 0) abort();
            if (wmtrace_st_pread(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf) abort();
            void *m = wmtrace_st_mmap(NULL, 1 << 20, PROT_READ, MAP_SHARED, fd, 0);
            if (m == MAP_FAILED) abort();
            wmtrace_st_mlock(m, 4096);
            wmtrace_st_munlock(m, 4096);
            wmtrace_st_munmap(m, 1 << 20);
            wmtrace_st_close(fd);
            raise(SIGUSR1);
            if (tsan_release(i) != i + 1) abort(); /* through the probe: a release */
        }
    }
    return NULL;
}

#define SO_ROUNDS 160 /* more than the 128 probe slots: dead ones must be reused */
static const char *abi_lib;

/* dlopen, one call through the armed probe, dlclose: SO_ROUNDS times. */
static void *so_cycles(void *arg) {
    (void)arg;
    struct mixed {
        long l;
        double d;
    };
    for (int i = 0; i < SO_ROUNDS; i++) {
        void *so = dlopen(abi_lib, RTLD_NOW | RTLD_LOCAL);
        if (!so) abort();
        double (*fn)(long, double, struct mixed) =
            (double (*)(long, double, struct mixed))dlsym(so, "abi_so_fn");
        if (!fn || fn(i, 2.0, (struct mixed){1, 0.5}) != 2.0 * i + 0.5) abort();
        dlclose(so);
    }
    return NULL;
}

static void *reaper(void *arg) {
    int of = (int)(long)arg; /* frees the blocks another thread made */
    for (int i = 0; i < ROUNDS; i++) {
        while (!__atomic_load_n(&handoff[of][i], __ATOMIC_ACQUIRE)) {
        }
        wmtrace_st_free(handoff[of][i]);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    file = argv[1];
    abi_lib = argv[2];
    char out[] = "/tmp/wmtrace-tsan-XXXXXX", pid[24];
    int fd = mkstemp(out);
    if (fd < 0 || ftruncate(fd, (off_t)sizeof(wmtrace_stats)) != 0) return 1;
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    setenv(WMTRACE_ENV_OUT, out, 1);
    setenv(WMTRACE_ENV_PID, pid, 1);
    setenv(WMTRACE_ENV_MARKERS, "R tsan_release\nR libwmtabi:abi_so_fn", 1);
    wmtrace_selftest_start();
    pthread_t w[THREADS], r[THREADS], so;
    pthread_create(&so, NULL, so_cycles, NULL);
    for (long k = 0; k < THREADS; k++)
        pthread_create(&w[k], NULL, worker, (void *)k);
    for (long k = 0; k < THREADS; k++)
        pthread_create(&r[k], NULL, reaper, (void *)((k + 1) % THREADS));
    for (int k = 0; k < THREADS; k++)
        pthread_join(w[k], NULL);
    for (int k = 0; k < THREADS; k++)
        pthread_join(r[k], NULL);
    pthread_join(so, NULL);
    wmtrace_stats *st = mmap(NULL, sizeof *st, PROT_READ, MAP_SHARED, fd, 0);
    int bad = 0;
    for (uint64_t i = 0; i < st->n_threads; i++)
        for (int c = 1; c < WMTRACE_CLASSES; c++)
            if (st->threads[i].held[c] != 0) {
                fprintf(stderr, "tsan_hooks: thread %d holds %lld in class %d\n", (int)i,
                        (long long)st->threads[i].held[c], c);
                bad = 1;
            }
    if (st->specs[0].sites != 1 || st->specs[1].sites != SO_ROUNDS ||
        st->specs[1].hits != SO_ROUNDS ||
        st->markers != (uint64_t)THREADS * (ROUNDS / 10) * 2 + SO_ROUNDS) {
        fprintf(stderr,
                "tsan_hooks: %llu releases, tsan_release at %llu sites, abi_so_fn at %llu sites "
                "with %llu calls\n",
                (unsigned long long)st->markers, (unsigned long long)st->specs[0].sites,
                (unsigned long long)st->specs[1].sites, (unsigned long long)st->specs[1].hits);
        bad = 1;
    }
    unlink(out);
    printf("tsan_hooks: %llu threads, %llu releases, %s\n", (unsigned long long)st->n_threads,
           (unsigned long long)st->markers, bad ? "FAILED" : "ok");
    return bad;
}
