/*
 * pread.c: `gpu pread`: the page cache's ceiling: N threads pread the file (blocks, or the runs of
 * a slice) (main.c has the options).
 */
#include "gpu.h"

#ifdef WM_HAVE_CUDA
typedef struct pread_job {
    int fd;
    uint64_t size, block, run; /* run: read runs of `run` bytes every 2*run, or whole blocks */
    const char *path;          /* own_fd: each thread opens it */
    bool own_fd;               /* each thread its own descriptor (its own struct file) */
    const unsigned char *map;  /* runs copied from this shared mapping of the file, or NULL */
    atomic_uint_least64_t next;
    unsigned char *big; /* NULL: each thread reads into its own reused buffer */
    atomic_int failed;
} pread_job;

typedef struct pread_thread {
    pthread_t th;
    pread_job *j;
    unsigned char *buf;
} pread_thread;

static void *pread_main(void *arg) {
    pread_thread *t = arg;
    pread_job *j = t->j;
    int fd = j->own_fd ? open(j->path, O_RDONLY) : j->fd;
    if (fd < 0) atomic_store(&j->failed, 1);
    for (unsigned turn = 0; fd >= 0; turn ^= 1) {
        uint64_t off = atomic_fetch_add(&j->next, j->block);
        if (off >= j->size) break;
        size_t n = j->size - off < j->block ? (size_t)(j->size - off) : (size_t)j->block;
        unsigned char *dst = j->big ? j->big + off : t->buf + turn * j->block;
        if (!j->run) {
            if (pread(fd, dst, n, (off_t)off) != (ssize_t)n) atomic_store(&j->failed, 1);
            continue;
        }
        for (size_t at = 0; at + j->run <= n; at += 2 * j->run)
            if (j->map)
                memcpy(dst + at, j->map + off + at, j->run);
            else if (pread(fd, dst + at, j->run, (off_t)(off + at)) != (ssize_t)j->run)
                atomic_store(&j->failed, 1);
    }
    if (j->own_fd && fd >= 0) close(fd);
    return NULL;
}

/* One pass; with `mapped`, the file is mapped (shared, read-only) for the pass and unmapped
 * after it, inside the time. */
static double pread_once(pread_job *j, pread_thread *ts, unsigned n, bool mapped) {
    atomic_store(&j->next, 0);
    double t0 = now_s();
    if (mapped) {
        void *p = mmap(NULL, j->size, PROT_READ, MAP_SHARED, j->fd, 0);
        if (p == MAP_FAILED) {
            atomic_store(&j->failed, 1);
            return 1e30;
        }
        j->map = p;
    }
    for (unsigned k = 0; k < n; k++)
        pthread_create(&ts[k].th, NULL, pread_main, &ts[k]);
    for (unsigned k = 0; k < n; k++)
        pthread_join(ts[k].th, NULL);
    if (mapped) {
        munmap((void *)j->map, j->size);
        j->map = NULL;
    }
    return now_s() - t0;
}

int gpu_pread(int argc, char **argv) {
    const char *path = NULL;
    uint64_t threads = (uint64_t)sysconf(_SC_NPROCESSORS_ONLN), block = (uint64_t)8 << 20, v;
    uint64_t run = 0;
    bool own_fd = false, mapped = false;
    unsigned repeat = 3;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            threads = v;
        } else if (!strcmp(argv[i], "--block") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            block = v;
        } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            repeat = (unsigned)v;
        } else if (!strcmp(argv[i], "--run") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            run = v;
        } else if (!strcmp(argv[i], "--own-fd")) {
            own_fd = true;
        } else if (!strcmp(argv[i], "--mapped")) {
            mapped = true;
        } else if (!path && argv[i][0] != '-') {
            path = argv[i];
        } else {
            fprintf(stderr, "gpu pread: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!path || threads > 256) return 2;
    if (mapped && !run) return 2;
    pread_job j = {
        .fd = open(path, O_RDONLY), .block = block, .run = run, .path = path, .own_fd = own_fd};
    if (j.fd < 0) {
        perror(path);
        return 1;
    }
    j.size = (uint64_t)lseek(j.fd, 0, SEEK_END);
    pread_thread ts[256];
    for (unsigned k = 0; k < threads; k++)
        ts[k] = (pread_thread){.j = &j, .buf = pages(2 * block)};
    double best_reused = 1e30, best_big = 1e30;
    for (unsigned r = 0; r < repeat; r++) {
        double t = pread_once(&j, ts, (unsigned)threads, mapped);
        if (t < best_reused) best_reused = t;
    }
    j.big = pages(j.size);
    for (unsigned r = 0; r < repeat; r++) {
        double t = pread_once(&j, ts, (unsigned)threads, mapped);
        if (t < best_big) best_big = t;
    }
    munmap(j.big, j.size);
    for (unsigned k = 0; k < threads; k++)
        munmap(ts[k].buf, 2 * block);
    close(j.fd);
    /* With runs, the bytes read: half of each whole block (the tail's runs are close enough). */
    double got = run ? (double)j.size / 2 : (double)j.size;
    double g1 = got / best_reused / 1e9, g2 = got / best_big / 1e9;
    printf("{\"bench\": \"pread\", \"file\": \"%s\", \"bytes\": %" PRIu64 ", \"threads\": %" PRIu64
           ", \"run\": %" PRIu64 ", \"how\": \"%s\", \"block\": %" PRIu64
           ", \"reused_buffers_gbps\": %.2f, \"file_sized_buffer_gbps\": %.2f, "
           "\"best_gbps\": %.2f, \"failed\": %s}\n",
           path, j.size, threads, run,
           mapped   ? "mapped"
           : own_fd ? "own_fd"
                    : "pread",
           block, g1, g2, g1 > g2 ? g1 : g2, atomic_load(&j.failed) ? "true" : "false");
    return atomic_load(&j.failed) ? 1 : 0;
}
#endif /* WM_HAVE_CUDA */
