/*
 * x86.h: what the AVX2/F16C kernel files share (x86.c, x86_quants.c): the target attribute, the
 * store helpers, and the kernels x86_quants.c defines for x86.c's table. Included only on x86-64
 * with GCC or Clang.
 *
 * Every helper multiplies and offsets with separate instructions (never FMA), so each lane rounds
 * as the portable kernels in dequant.c do.
 */
#ifndef WM_CONVERT_X86_H
#define WM_CONVERT_X86_H

#include "convert.h"

#include <immintrin.h>

#define TARGET __attribute__((target("avx2,f16c")))

/* ---- helpers ---- */
TARGET static inline __m256 i8x8_ps(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}
TARGET static inline __m256 u8x8_ps(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}
/* Stores 16 signed bytes times d as 16 floats. */
TARGET static inline void st16_i8(float *y, __m128i v, __m256 d) {
    _mm256_storeu_ps(y, _mm256_mul_ps(i8x8_ps(v), d));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(i8x8_ps(_mm_srli_si128(v, 8)), d));
}
/* Stores the 32 nibbles of 16 bytes q (each byte's low nibble in the first 16, its high nibble
 * in the next 16) mapped through the codebook kv (16 signed bytes), times d. */
TARGET static inline void st32_codebook(float *y, __m128i q, __m128i kv, __m256 d) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    st16_i8(y, _mm_shuffle_epi8(kv, _mm_and_si128(q, m4)), d);
    st16_i8(y + 16, _mm_shuffle_epi8(kv, _mm_and_si128(_mm_srli_epi16(q, 4), m4)), d);
}
/* Stores 16 unsigned bytes as dl*q - ml. */
TARGET static inline void st16_u8_dm(float *y, __m128i v, __m256 dl, __m256 ml) {
    _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(dl, u8x8_ps(v)), ml));
    _mm256_storeu_ps(y + 8, _mm256_sub_ps(_mm256_mul_ps(dl, u8x8_ps(_mm_srli_si128(v, 8))), ml));
}

/* ---- the kernels of x86_quants.c (k-quants, ternary and IQ codebook types) ---- */

#define WM_X86_KERNEL(name) void wm__x86_##name(const uint8_t *x, float *y, size_t nb)
WM_X86_KERNEL(q2_k);
WM_X86_KERNEL(q3_k);
WM_X86_KERNEL(q4_k);
WM_X86_KERNEL(q5_k);
WM_X86_KERNEL(q6_k);
WM_X86_KERNEL(q8_k);
WM_X86_KERNEL(tq1_0);
WM_X86_KERNEL(tq2_0);
WM_X86_KERNEL(iq2_xxs);
WM_X86_KERNEL(iq2_xs);
WM_X86_KERNEL(iq2_s);
WM_X86_KERNEL(iq3_xxs);
WM_X86_KERNEL(iq3_s);
WM_X86_KERNEL(iq1_s);
WM_X86_KERNEL(iq1_m);

#endif /* WM_CONVERT_X86_H */
