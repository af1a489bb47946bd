/*
 * gpu.h: what the files of the GPU benchmark's program share (bench/gpu/: main.c says what each
 * subcommand measures; one file per subcommand, common.c the helpers and the footprint sampler).
 */
#ifndef WM_BENCH_GPU_H
#define WM_BENCH_GPU_H

#include "backend/cuda_tune.h" /* wm__cuda_tune: the pipeline's measuring knobs */
#include "weightmap.h"

#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifdef WM_HAVE_CUDA
#include <cuda_runtime_api.h>

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "gpu: %s: %s\n", #call, cudaGetErrorString(e_));                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct sampler {
    pthread_t th;
    atomic_int stop;
    uint64_t peak;
    unsigned samples;
} sampler;

/* ---- common.c ---- */

double now_s(void);
int cmp_double(const void *a, const void *b);
bool parse_size(const char *s, uint64_t *out);
void *pages(size_t len);
unsigned parse_devices(const char *s, int *devs);
bool init_devices(const wm_load_options *o);
uint64_t footprint(void);
void sampler_start(sampler *s);
void sampler_stop(sampler *s);

/* ---- the subcommands (argv: the arguments after the subcommand's name) ---- */

int gpu_load(int argc, char **argv);     /* load.c */
int gpu_h2d(int argc, char **argv);      /* h2d.c */
int gpu_pread(int argc, char **argv);    /* pread.c */
int gpu_cycles(int argc, char **argv);   /* cycles.c */
int gpu_register(int argc, char **argv); /* register.c */
int gpu_sleep(int argc, char **argv);    /* sleep.c */
#ifdef WM_HAVE_NCCL
int gpu_ranks(int argc, char **argv); /* ranks.c */
#endif
#endif /* WM_HAVE_CUDA */

#endif
