/*
 * register.c: `gpu register`: what registering the page cache window by window and copying from it
 * could reach (main.c has the options).
 */
#include "gpu.h"

#ifdef WM_HAVE_CUDA
/* What a design that sends the page cache straight to the device could reach: the file's shared
 * read-only mapping registered window by window (cudaHostRegisterReadOnly) by N threads at
 * once, each copying its window to the device on its own stream, waiting, and unregistering it
 * (the "pipelined" figure); and, for the parts of it, registering every window with N threads,
 * copying them all from the loading thread, and unregistering with N threads. */
typedef struct reg_job {
    unsigned char *map;
    unsigned char *dev;
    uint64_t size, window;
    atomic_uint_least64_t next;
    int mode; /* 0: register, 1: unregister, 2: pipelined */
    atomic_int failed;
} reg_job;

typedef struct reg_thread {
    pthread_t th;
    reg_job *j;
    cudaStream_t s;
} reg_thread;

static void *reg_main(void *arg) {
    reg_thread *t = arg;
    reg_job *j = t->j;
    if (cudaSetDevice(0) != cudaSuccess) atomic_store(&j->failed, 1);
    if (j->mode == 2 && !t->s && cudaStreamCreateWithFlags(&t->s, cudaStreamNonBlocking))
        atomic_store(&j->failed, 1);
    for (;;) {
        uint64_t off = atomic_fetch_add(&j->next, j->window);
        if (off >= j->size) break;
        size_t n = j->size - off < j->window ? (size_t)(j->size - off) : (size_t)j->window;
        cudaError_t e = cudaSuccess;
        if (j->mode == 0 || j->mode == 2)
            e = cudaHostRegister(j->map + off, n, cudaHostRegisterReadOnly);
        if (!e && j->mode == 2) {
            e = cudaMemcpyAsync(j->dev + off, j->map + off, n, cudaMemcpyHostToDevice, t->s);
            if (!e) e = cudaStreamSynchronize(t->s);
        }
        if (!e && (j->mode == 1 || j->mode == 2)) e = cudaHostUnregister(j->map + off);
        if (e) atomic_store(&j->failed, 1);
    }
    return NULL;
}

static double reg_pass(reg_job *j, reg_thread *ts, unsigned n, int mode) {
    j->mode = mode;
    atomic_store(&j->next, 0);
    double t0 = now_s();
    for (unsigned k = 0; k < n; k++)
        pthread_create(&ts[k].th, NULL, reg_main, &ts[k]);
    for (unsigned k = 0; k < n; k++)
        pthread_join(ts[k].th, NULL);
    return now_s() - t0;
}

int gpu_register(int argc, char **argv) {
    const char *path = NULL;
    uint64_t threads = 8, window = (uint64_t)16 << 20, v;
    unsigned repeat = 2;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            threads = v;
        } else if (!strcmp(argv[i], "--window") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            window = v;
        } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            repeat = (unsigned)v;
        } else if (!path && argv[i][0] != '-') {
            path = argv[i];
        } else {
            fprintf(stderr, "gpu register: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!path || threads > 256 || window % 4096) return 2;
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) return 77;
    CUDA_OK(cudaSetDevice(0));
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    uint64_t size = (uint64_t)lseek(fd, 0, SEEK_END) / 4096 * 4096;
    unsigned char *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        perror("gpu: mmap");
        return 1;
    }
    reg_job j = {.map = map, .size = size, .window = window};
    CUDA_OK(cudaMalloc((void **)&j.dev, size));
    reg_thread ts[256];
    memset(ts, 0, sizeof ts);
    for (unsigned k = 0; k < threads; k++)
        ts[k].j = &j;
    double best_reg = 1e30, best_copy = 1e30, best_unreg = 1e30, best_pipe = 1e30;
    for (unsigned r = 0; r < repeat; r++) {
        double t = reg_pass(&j, ts, (unsigned)threads, 0);
        if (t < best_reg) best_reg = t;
        cudaStream_t s[4];
        for (int k = 0; k < 4; k++)
            CUDA_OK(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
        double t0 = now_s();
        for (uint64_t off = 0, k = 0; off < size; off += window, k++)
            CUDA_OK(cudaMemcpyAsync(j.dev + off, map + off,
                                    size - off < window ? size - off : window,
                                    cudaMemcpyHostToDevice, s[k % 4]));
        CUDA_OK(cudaDeviceSynchronize());
        t = now_s() - t0;
        if (t < best_copy) best_copy = t;
        for (int k = 0; k < 4; k++)
            CUDA_OK(cudaStreamDestroy(s[k]));
        t = reg_pass(&j, ts, (unsigned)threads, 1);
        if (t < best_unreg) best_unreg = t;
        t = reg_pass(&j, ts, (unsigned)threads, 2);
        if (t < best_pipe) best_pipe = t;
    }
    for (unsigned k = 0; k < threads; k++)
        if (ts[k].s) cudaStreamDestroy(ts[k].s);
    CUDA_OK(cudaFree(j.dev));
    munmap(map, size);
    close(fd);
    printf("{\"bench\": \"register\", \"file\": \"%s\", \"bytes\": %" PRIu64
           ", \"threads\": %" PRIu64 ", \"window\": %" PRIu64
           ", \"register_gbps\": %.2f, \"copy_from_registered_gbps\": %.2f, "
           "\"unregister_gbps\": %.2f, \"pipelined_gbps\": %.2f, \"failed\": %s}\n",
           path, size, threads, window, (double)size / best_reg / 1e9,
           (double)size / best_copy / 1e9, (double)size / best_unreg / 1e9,
           (double)size / best_pipe / 1e9, atomic_load(&j.failed) ? "true" : "false");
    return atomic_load(&j.failed) ? 1 : 0;
}
#endif /* WM_HAVE_CUDA */
