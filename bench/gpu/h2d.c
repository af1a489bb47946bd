/*
 * h2d.c: `gpu h2d`: the bus's ceiling: registered host memory to the device, one and four streams,
 * rows in 2-D (main.c has the options).
 */
#include "gpu.h"

#ifdef WM_HAVE_CUDA
/* Every device of devs at once: each copies `bytes` from its own registered buffer on four
 * streams; the best aggregate GB/s over `repeat` rounds, timed on the host around all. */
static double h2d_together(const int *devs, unsigned n, uint64_t bytes, unsigned repeat) {
    enum { NS = 4 };
    unsigned char *h[16];
    void *d[16];
    cudaStream_t s[16][NS];
    for (unsigned k = 0; k < n; k++) {
        CUDA_OK(cudaSetDevice(devs[k]));
        h[k] = pages(bytes);
        CUDA_OK(cudaHostRegister(h[k], bytes, cudaHostRegisterDefault));
        CUDA_OK(cudaMalloc(&d[k], bytes));
        for (int j = 0; j < NS; j++)
            CUDA_OK(cudaStreamCreateWithFlags(&s[k][j], cudaStreamNonBlocking));
    }
    double best = 0;
    for (unsigned r = 0; r < repeat; r++) {
        double t0 = now_s();
        for (unsigned k = 0; k < n; k++) {
            CUDA_OK(cudaSetDevice(devs[k]));
            for (int j = 0; j < NS; j++)
                CUDA_OK(cudaMemcpyAsync((char *)d[k] + bytes / NS * j, h[k] + bytes / NS * j,
                                        bytes / NS, cudaMemcpyHostToDevice, s[k][j]));
        }
        for (unsigned k = 0; k < n; k++)
            for (int j = 0; j < NS; j++)
                CUDA_OK(cudaStreamSynchronize(s[k][j]));
        double g = (double)bytes * n / (now_s() - t0) / 1e9;
        if (g > best) best = g;
    }
    for (unsigned k = 0; k < n; k++) {
        CUDA_OK(cudaSetDevice(devs[k]));
        for (int j = 0; j < NS; j++)
            CUDA_OK(cudaStreamDestroy(s[k][j]));
        CUDA_OK(cudaHostUnregister(h[k]));
        CUDA_OK(cudaFree(d[k]));
        munmap(h[k], bytes);
    }
    return best;
}

/* Half of `bytes` from h to d as rows of `width` bytes every 2*width, in one 2D copy, and the
 * same bytes packed in one copy: the best GB/s of each (device 0, events). */
static void h2d_rows(unsigned char *h, void *d, uint64_t bytes, uint64_t width, unsigned repeat,
                     cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1) {
    size_t rows = (size_t)(bytes / (2 * width));
    double best2d = 0, best1d = 0;
    for (unsigned r = 0; r < repeat; r++)
        for (int packed = 0; packed < 2; packed++) {
            float ms;
            CUDA_OK(cudaEventRecord(e0, s));
            if (packed)
                CUDA_OK(cudaMemcpyAsync(d, h, rows * width, cudaMemcpyHostToDevice, s));
            else
                CUDA_OK(cudaMemcpy2DAsync(d, width, h, 2 * width, width, rows,
                                          cudaMemcpyHostToDevice, s));
            CUDA_OK(cudaEventRecord(e1, s));
            CUDA_OK(cudaEventSynchronize(e1));
            CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
            double g = (double)(rows * width) / (ms * 1e-3) / 1e9;
            double *best = packed ? &best1d : &best2d;
            if (g > *best) *best = g;
        }
    printf("{\"bench\": \"h2d-rows\", \"width\": %" PRIu64 ", \"rows\": %zu, "
           "\"rows_2d_gbps\": %.2f, \"packed_gbps\": %.2f}\n",
           width, rows, best2d, best1d);
}

int gpu_h2d(int argc, char **argv) {
    uint64_t bytes = (uint64_t)1 << 30, v, rows_width = 0;
    unsigned repeat = 8, n_devs = 0;
    int devs[16];
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--devices") && i + 1 < argc) {
            n_devs = parse_devices(argv[++i], devs);
            if (!n_devs) return 2;
        } else if (!strcmp(argv[i], "--bytes") && i + 1 < argc && parse_size(argv[++i], &v)) {
            bytes = v;
        } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            repeat = (unsigned)v;
        } else if (!strcmp(argv[i], "--rows") && i + 1 < argc && parse_size(argv[++i], &v) && v) {
            rows_width = v;
        } else {
            fprintf(stderr, "gpu h2d: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return 77;
    CUDA_OK(cudaSetDevice(0));
    unsigned char *h = pages(bytes);
    CUDA_OK(cudaHostRegister(h, bytes, cudaHostRegisterDefault));
    void *d;
    CUDA_OK(cudaMalloc(&d, bytes));
    enum { NS = 4 };
    cudaStream_t s[NS];
    for (int k = 0; k < NS; k++)
        CUDA_OK(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    CUDA_OK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice)); /* warm-up */
    double best1 = 0, best4 = 0;
    for (unsigned r = 0; r < repeat; r++) {
        float ms;
        CUDA_OK(cudaEventRecord(e0, s[0]));
        CUDA_OK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s[0]));
        CUDA_OK(cudaEventRecord(e1, s[0]));
        CUDA_OK(cudaEventSynchronize(e1));
        CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
        double g = (double)bytes / (ms * 1e-3) / 1e9;
        if (g > best1) best1 = g;
        /* Four streams, a quarter each, timed on the host around all of them. */
        CUDA_OK(cudaDeviceSynchronize());
        double t0 = now_s();
        for (int k = 0; k < NS; k++)
            CUDA_OK(cudaMemcpyAsync((char *)d + bytes / NS * k, h + bytes / NS * k, bytes / NS,
                                    cudaMemcpyHostToDevice, s[k]));
        CUDA_OK(cudaDeviceSynchronize());
        g = (double)bytes / (now_s() - t0) / 1e9;
        if (g > best4) best4 = g;
    }
    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    printf("{\"bench\": \"h2d\", \"device\": \"%s\", \"bytes\": %" PRIu64 ", \"repeat\": %u, "
           "\"one_stream_gbps\": %.2f, \"four_streams_gbps\": %.2f, \"best_gbps\": %.2f}\n",
           prop.name, bytes, repeat, best1, best4, best1 > best4 ? best1 : best4);
    if (rows_width && rows_width * 2 <= bytes)
        h2d_rows(h, d, bytes, rows_width, repeat, s[0], e0, e1);
    CUDA_OK(cudaHostUnregister(h));
    CUDA_OK(cudaFree(d));
    munmap(h, bytes);
    /* Each listed device alone, then all of them at once. */
    for (unsigned k = 0; k < n_devs; k++)
        printf("{\"bench\": \"h2d-device\", \"device\": %d, \"bytes\": %" PRIu64
               ", \"best_gbps\": %.2f}\n",
               devs[k], bytes, h2d_together(&devs[k], 1, bytes, repeat));
    if (n_devs > 1)
        printf("{\"bench\": \"h2d-together\", \"devices\": %u, \"bytes\": %" PRIu64
               ", \"best_gbps\": %.2f}\n",
               n_devs, bytes, h2d_together(devs, n_devs, bytes, repeat));
    return 0;
}
#endif /* WM_HAVE_CUDA */
