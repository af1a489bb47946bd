/*
 * leaky.c: a small weight loader that leaks in the ways `weightmap trace` must see, one per mode
 * (tests/test_trace.c runs each under the tracer and asserts its verdict):
 *
 *     leaky MODE FILE CYCLES [call|signal|none]
 *
 *   clean    a loader thread reads the file through a 32 KiB malloc scratch into page-allocated
 *            memory; the file is also mapped shared read-only and unmapped; all returned
 *   scratch  the same, but the loader thread's scratch is 16 blocks of 100 KiB of malloc (from
 *            the heap, not mmap), freed before the load ends and kept by malloc after it (a
 *            small block allocated after them stays until the next cycle)
 *   rebuilt  the scratch of "scratch", and then 1.6 MiB of 4000-byte blocks (a runtime's model
 *            structures) made in the pages it freed and held until the release frees them:
 *            what stays in the footprint is what the load built, not its scratch (clean)
 *   heap     the weights are read into one malloc'd buffer, held until the release frees it
 *   map      the file is mapped each cycle and never unmapped
 *   private  the file is mapped MAP_PRIVATE with PROT_WRITE (and unmapped)
 *   lock     the file is mapped shared, mlocked, munlocked and unmapped (clean)
 *   split    the file is mapped in two chunks; only the first is unmapped
 *   fork     a forked child maps the file and exits without unmapping (the tracer skips it)
 *   allocator  no file mapped; cycle N takes N+1 MiB of malloc memory from the heap (glibc's
 *            mmap threshold raised first, as a runtime's first free raises it), touched, with
 *            a small block after it, held until the release frees it: malloc keeps it, the
 *            footprint grows at every release by malloc's free memory alone
 *   untouched  the load takes 64 MiB of malloc memory it never touches (address space only),
 *            held until the release
 *   leak     the load takes 2 MiB of malloc memory, touched, and nothing ever frees it: live
 *            memory grows at every release
 *   threads  four threads allocate and free big and small blocks, some freed by another thread
 *   exit     no loading; exits with status CYCLES (the tracer must pass it on)
 *
 * Each cycle's load is one call of load_cycle(), a function internal to this executable (in its
 * .symtab only, called directly: --load-marker load_cycle). After each cycle the program says
 * "released": it calls wmt_rt_release() in libwmtleakrt.so (call, the default), or
 * leaky_release(), internal like load_cycle (direct), or leaky_release() on a thread of its own
 * with every signal blocked (thread: a worker as libuv starts them), raises SIGUSR1 (signal: only
 * under the tracer, which handles it), installs its own SIGUSR1 handler (as Node does for its
 * inspector) and raises the signal the tracer names in WMTRACE_SIGNAL (rtsignal), calls
 * wmt_rt_release with no descriptor left to open (nofd: the process cannot read its figures), or
 * says nothing (none). leaky_release frees what "heap" holds.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

int wmt_rt_release(int cycle);

static const char *mode;
static int fd;
static size_t size;
static volatile unsigned sink;

static void die(const char *what) {
    perror(what);
    exit(3);
}

static void *heap_weights, *pin;

/* The "scratch" loader's scratch: 16 heap blocks of 100 KiB, freed before the load ends; the
 * small block after them keeps malloc from trimming them away. Each pointer escapes through
 * `seen`, so that no compiler drops the malloc/free pairs (clang -O2 does). */
static void *volatile seen;
static void heap_scratch(void) {
    void *b[16];
    for (int i = 0; i < 16; i++) {
        b[i] = malloc(100u << 10);
        if (!b[i]) die("malloc");
        memset(b[i], 1, 100u << 10);
        seen = b[i];
    }
    free(pin);
    pin = malloc(1000);
    for (int i = 0; i < 16; i++)
        free(b[i]);
}

/* The "rebuilt" loader's model structures: small blocks over the pages the scratch freed. */
#define BUILT 400
static void *built[BUILT];
static void build(void) {
    for (int i = 0; i < BUILT; i++) {
        built[i] = malloc(4000);
        if (!built[i]) die("malloc");
        memset(built[i], 2, 4000);
        seen = built[i];
    }
}
static void unbuild(void) {
    for (int i = 0; i < BUILT; i++) {
        free(built[i]);
        built[i] = NULL;
    }
}

/* The loader thread: pread through a malloc'd scratch buffer into page-allocated memory, every
 * other chunk with preadv into the scratch's two halves (a vectored read is a weight read too). */
static void *load_thread(void *arg) {
    (void)arg;
    size_t scratch_len = 32u << 10;
    if (!strcmp(mode, "scratch") || !strcmp(mode, "rebuilt")) heap_scratch();
    if (!strcmp(mode, "rebuilt")) build();
    unsigned char *dst =
        mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *scratch = malloc(scratch_len);
    if (dst == MAP_FAILED || !scratch) die("alloc");
    for (size_t off = 0, k = 0; off < size; k++) {
        struct iovec v[2] = {{scratch, scratch_len / 2},
                             {scratch + scratch_len / 2, scratch_len - scratch_len / 2}};
        ssize_t r =
            k % 2 ? preadv(fd, v, 2, (off_t)off) : pread(fd, scratch, scratch_len, (off_t)off);
        if (r <= 0) die("pread");
        memcpy(dst + off, scratch, (size_t)r);
        off += (size_t)r;
    }
    free(scratch);
    sink += dst[size / 2];
    munmap(dst, size);
    return NULL;
}

static void touch(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i += 4096)
        sink += p[i];
}

static void *churn(void *arg) {
    void **shared = arg;
    for (int i = 0; i < 3000; i++) {
        void *big = malloc((100u << 10) + (size_t)i);
        void *small = malloc(48);
        if (!big || !small) die("malloc");
        /* Used, so that no compiler drops the pair (clang removes an unused malloc/free). */
        ((volatile char *)big)[0] = 1;
        ((volatile char *)small)[0] = 1;
        free(big);
        free(small);
    }
    for (int i = 0; i < 16; i++)
        free(shared[i]); /* blocks another thread allocated */
    return NULL;
}

static int threads(void) {
    static void *blocks[4][16];
    pthread_t th[4];
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 16; i++)
            blocks[k][i] = malloc((200u << 10) + (size_t)i);
    for (int k = 0; k < 4; k++)
        pthread_create(&th[k], NULL, churn, blocks[k]);
    for (int k = 0; k < 4; k++)
        pthread_join(th[k], NULL);
    return 0;
}

/* One load, by mode (a marker: called directly, not exported). 1 for an unknown mode. */
__attribute__((noinline)) static int load_cycle(long pg) {
    if (!strcmp(mode, "clean") || !strcmp(mode, "scratch") || !strcmp(mode, "rebuilt")) {
        pthread_t th;
        pthread_create(&th, NULL, load_thread, NULL);
        pthread_join(th, NULL);
        unsigned char *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) die("mmap");
        touch(p, size);
        munmap(p, size);
    } else if (!strcmp(mode, "heap")) {
        heap_weights = malloc(size);
        if (!heap_weights || pread(fd, heap_weights, size, 0) != (ssize_t)size) die("heap");
    } else if (!strcmp(mode, "map")) {
        unsigned char *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) die("mmap");
        touch(p, size); /* and never unmapped */
    } else if (!strcmp(mode, "lock")) {
        unsigned char *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) die("mmap");
        int locked = mlock(p, size) == 0; /* may be refused (RLIMIT_MEMLOCK): still traced */
        touch(p, size);
        if (locked) munlock(p, size);
        munmap(p, size);
    } else if (!strcmp(mode, "private")) {
        unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) die("mmap");
        touch(p, size);
        munmap(p, size);
    } else if (!strcmp(mode, "split")) {
        size_t half = (size / 2) & ~(size_t)(pg - 1);
        unsigned char *a = mmap(NULL, half, PROT_READ, MAP_SHARED, fd, 0);
        unsigned char *b = mmap(NULL, size - half, PROT_READ, MAP_SHARED, fd, (off_t)half);
        if (a == MAP_FAILED || b == MAP_FAILED) die("mmap");
        touch(a, half);
        touch(b, size - half);
        munmap(a, half); /* the second chunk is forgotten */
    } else if (!strcmp(mode, "allocator")) {
        static int cycle;
        static void *pins[64];
        if (!cycle) { /* a mapped block freed raises glibc's mmap threshold to its size */
            void *big = malloc(16u << 20);
            seen = big;
            free(big);
        }
        size_t n = (size_t)(cycle + 1) << 20;
        heap_weights = malloc(n);
        if (!heap_weights) die("malloc");
        memset(heap_weights, 5, n);
        pins[cycle % 64] = malloc(64); /* after it: the heap cannot be trimmed below it */
        seen = pins[cycle % 64];
        cycle++;
    } else if (!strcmp(mode, "leak")) {
        void *lost = malloc(2u << 20);
        if (!lost) die("malloc");
        memset(lost, 6, 2u << 20);
        seen = lost; /* and never freed */
    } else if (!strcmp(mode, "untouched")) {
        heap_weights = malloc(64u << 20); /* glibc maps it; nothing touches its pages */
        if (!heap_weights) die("malloc");
        seen = heap_weights;
    } else if (!strcmp(mode, "fork")) {
        pid_t pid = fork();
        if (pid == 0) {
            unsigned char *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
            if (p == MAP_FAILED) _exit(3);
            touch(p, size);
            _exit(0);
        }
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
            die("child");
    } else {
        fprintf(stderr, "leaky: unknown mode %s\n", mode);
        return 1;
    }
    return 0;
}

/* The release of the "direct" marker (called directly, not exported). */
__attribute__((noinline)) static void leaky_release(void) {
    free(heap_weights);
    heap_weights = NULL;
    unbuild();
    __asm__ volatile("" ::: "memory");
}

static void *release_thread(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    leaky_release();
    return NULL;
}

static void on_usr1(int sig) { (void)sig; } /* Node's: its inspector */

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr,
                "usage: leaky MODE FILE CYCLES [call|direct|thread|signal|rtsignal|nofd|none]\n");
        return 2;
    }
    mode = argv[1];
    int cycles = atoi(argv[3]);
    const char *marker = argc > 4 ? argv[4] : "call";
    if (!strcmp(marker, "rtsignal")) signal(SIGUSR1, on_usr1);
    if (!strcmp(mode, "exit")) return cycles;
    if (!strcmp(mode, "threads")) return threads();
    long pg = sysconf(_SC_PAGESIZE);
    for (int c = 0; c < cycles; c++) {
        fd = open(argv[2], O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) die(argv[2]);
        size = (size_t)st.st_size;
        if (load_cycle(pg) != 0) return 2;
        close(fd);
        if (!strcmp(marker, "call"))
            wmt_rt_release(c);
        else if (!strcmp(marker, "direct"))
            leaky_release();
        else if (!strcmp(marker, "thread")) {
            pthread_t th;
            pthread_create(&th, NULL, release_thread, NULL);
            pthread_join(th, NULL);
        } else if (!strcmp(marker, "signal")) {
            raise(SIGUSR1);
        } else if (!strcmp(marker, "rtsignal")) {
            const char *sig = getenv("WMTRACE_SIGNAL");
            if (sig) raise(atoi(sig));
        } else if (!strcmp(marker, "nofd")) {
            struct rlimit old, none;
            getrlimit(RLIMIT_NOFILE, &old);
            none = old;
            none.rlim_cur = 3; /* stdin, stdout, stderr: no descriptor left to open */
            setrlimit(RLIMIT_NOFILE, &none);
            wmt_rt_release(c);
            setrlimit(RLIMIT_NOFILE, &old);
        }
        if (strcmp(marker, "direct") && strcmp(marker, "thread")) {
            free(heap_weights);
            heap_weights = NULL;
            unbuild();
        }
    }
    return 0;
}
