/*
 * cuda_mock.h: what the tests read from the mock CUDA runtime, tests/cuda_mock.c (linked into the
 * library instead of the runtime with -DWM_CUDA_MOCK=ON). Call it only in such builds.
 */
#ifndef WM_CUDA_MOCK_H
#define WM_CUDA_MOCK_H

#include <stddef.h>

/* CUDA calls from threads other than the first caller so far (each one refused by the mock). */
unsigned long wm__cuda_mock_violations(void);
/* The longest host registration (bytes) made since the last call, and starts counting again. */
size_t wm__cuda_mock_largest_registration(void);

#endif /* WM_CUDA_MOCK_H */
