/*
 * cuda_tune.h: the CUDA pipeline's measuring knobs and test hook. Not part of the backend
 * contract: bench/gpu.c measures with the knobs, tests/test_cuda.c reads the hook; the library
 * itself never calls them. Defined in cuda.c only where the CUDA backend is built.
 */
#ifndef WM_CUDA_TUNE_H
#define WM_CUDA_TUNE_H

#include <stddef.h>

/* The staged window size (0: keep), slots per worker (0: keep) and these flags. Not
 * thread-safe: call it between loads. */
#define WM__CUDA_SERIAL_RING 1u /* register the ring before the readers start */
#define WM__CUDA_NO_REAP 2u     /* retire slots only when there is nothing else to do */
void wm__cuda_tune(size_t wsize, unsigned slots, unsigned flags);
/* A sleep's and a wake's copies (the pool's WM_POOL_SLEEP): bytes a piece (0: 64 MiB), streams
 * a device (0: 2; at most 4) and these flags. Not thread-safe: call it between sleeps. */
#define WM__CUDA_SWAP_NO_HUGE 1u      /* no huge-page advice on the host copy */
#define WM__CUDA_SWAP_NO_PREFAULT 2u  /* no threads fault the host copy in first */
#define WM__CUDA_SWAP_PINNED_WHOLE 4u /* the host copy registered whole, no bounce ring */
void wm__cuda_tune_swap(size_t piece, unsigned streams, unsigned flags);
/* How much wm_backend_init rehearses a load's CUDA calls (rounds; events and copies a round;
 * bytes registered, 0: keep), for the next wm_backend_init. */
void wm__cuda_rehearsal(unsigned rounds, unsigned events, unsigned copies, size_t bytes);
/* The base of the last staged ring (tests check that it is not registered after release). */
void *wm__cuda_test_last_ring(void);

#endif /* WM_CUDA_TUNE_H */
