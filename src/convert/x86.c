/*
 * x86.c: AVX2/F16C kernels, chosen at run time when the CPU has both.
 *
 * Sections: CPU detection; streaming stores; float widths (half, bfloat16 both ways); simple block
 * types; the kernel table (the k-quants, ternary and IQ codebook kernels are in x86_quants.c, the
 * helpers both files use in x86.h). Off x86-64 (or without GCC/Clang) the file reduces to stubs
 * that report "no kernel".
 *
 * Each kernel computes exactly what its portable twin in dequant.c computes: integer codes are
 * decoded in integer lanes, converted to float, then multiplied and offset with separate
 * multiply and add/subtract instructions (never FMA), so every lane rounds as ggml's scalar
 * reference does. Functions carry target("avx2,f16c") so the rest of the library stays
 * baseline x86-64.
 */
#include "convert.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include "x86.h"

#include <cpuid.h>

/* ---- CPU detection ---- */

/* AVX2 (leaf 7 EBX bit 5), F16C (leaf 1 ECX bit 29), and the OS saving YMM state (OSXSAVE and
 * XCR0 bits 1-2). */
static int detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (!(c & (1u << 29)) || !(c & (1u << 27))) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6u) != 6u) return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b & (1u << 5)) != 0;
}

int wm__x86_usable(void) {
    static int cached = -1; /* racing first calls compute the same answer */
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        v = detect();
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* Whether large outputs should bypass the caches. Measured with bench/convert: on an Intel Xeon
 * (Sapphire Rapids class, 16 cores) non-temporal stores raised one core's f32 output from ~5-6
 * to ~7-12 GB/s; on the AMD EPYC VM this project develops on they were slower than plain stores
 * at 16 and 256 MiB outputs. So: Intel only. */
static int detect_stream(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    return b == 0x756E6547u && d == 0x49656E69u && c == 0x6C65746Eu; /* "GenuineIntel" */
}

int wm__x86_stream_preferred(void) {
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        v = detect_stream();
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* ---- streaming stores ---- */

TARGET void wm__stream_floats_x86(float *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
        _mm256_stream_ps(dst + i + 8, _mm256_loadu_ps(src + i + 8));
        _mm256_stream_ps(dst + i + 16, _mm256_loadu_ps(src + i + 16));
        _mm256_stream_ps(dst + i + 24, _mm256_loadu_ps(src + i + 24));
    }
    for (; i + 8 <= n; i += 8)
        _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
    for (; i < n; i++)
        dst[i] = src[i];
}

void wm__stream_fence_x86(void) { _mm_sfence(); }

/* ---- float widths ---- */

TARGET static void x_f16(const uint8_t *x, float *y, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(x + 2 * i));
        __m128i b = _mm_loadu_si128((const __m128i *)(x + 2 * i + 16));
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(a));
        _mm256_storeu_ps(y + i + 8, _mm256_cvtph_ps(b));
    }
    for (; i < n; i++)
        y[i] = wm__f16_to_f32(wm__rd16(x + 2 * i));
}

TARGET static void x_bf16(const uint8_t *x, float *y, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + 2 * i)));
        __m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + 2 * i + 16)));
        _mm256_storeu_si256((__m256i *)(y + i), _mm256_slli_epi32(a, 16));
        _mm256_storeu_si256((__m256i *)(y + i + 8), _mm256_slli_epi32(b, 16));
    }
    for (; i < n; i++)
        y[i] = wm__bf16_to_f32(wm__rd16(x + 2 * i));
}

/* vcvtps2ph rounds to nearest even like ggml, but keeps NaN payloads where ggml writes 0x7E00:
 * a group of 8 holding a NaN is redone by the scalar rule. */
TARGET void wm__f32_to_f16_x86(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (size_t j = i; j < i + 8; j++)
                dst[j] = wm__f32_to_f16(src[j]);
        } else {
            _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        }
    }
    for (; i < n; i++)
        dst[i] = wm__f32_to_f16(src[i]);
}

TARGET static inline __m256i bf16_round(__m256i u) {
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                     _mm256_set1_epi32(0x7F800000));
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
    return _mm256_blendv_epi8(r, q, nan);
}

TARGET void wm__f32_to_bf16_x86(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = bf16_round(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m256i b = bf16_round(_mm256_loadu_si256((const __m256i *)(src + i + 8)));
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
        _mm256_storeu_si256((__m256i *)(dst + i), p);
    }
    for (; i < n; i++)
        dst[i] = wm__f32_to_bf16(src[i]);
}

/* ---- simple block types ---- */

TARGET static void x_q4_0(const uint8_t *x, float *y, size_t nb) {
    const __m128i m4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    for (size_t i = 0; i < nb; i++, x += 18, y += 32) {
        const __m256 d = _mm256_set1_ps(half_at(x));
        __m128i q = _mm_loadu_si128((const __m128i *)(x + 2));
        st16_i8(y, _mm_sub_epi8(_mm_and_si128(q, m4), eight), d);
        st16_i8(y + 16, _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), eight), d);
    }
}

TARGET static void x_q4_1(const uint8_t *x, float *y, size_t nb) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (size_t i = 0; i < nb; i++, x += 20, y += 32) {
        const __m256 d = _mm256_set1_ps(half_at(x)), m = _mm256_set1_ps(half_at(x + 2));
        __m128i q = _mm_loadu_si128((const __m128i *)(x + 4));
        __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
        _mm256_storeu_ps(y, _mm256_add_ps(_mm256_mul_ps(u8x8_ps(lo), d), m));
        _mm256_storeu_ps(y + 8, _mm256_add_ps(_mm256_mul_ps(u8x8_ps(_mm_srli_si128(lo, 8)), d), m));
        _mm256_storeu_ps(y + 16, _mm256_add_ps(_mm256_mul_ps(u8x8_ps(hi), d), m));
        _mm256_storeu_ps(y + 24,
                         _mm256_add_ps(_mm256_mul_ps(u8x8_ps(_mm_srli_si128(hi, 8)), d), m));
    }
}

/* The 5-bit codes of a Q5 block as 32 ints, 8 per group: group g holds elements 8g..8g+7,
 * whose high bit is bit (8g + k) of qh. */
TARGET static inline __m256i q5_group(__m128i nib8, uint32_t qh, int g) {
    const __m256i sh = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i hb = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)(qh >> (8 * g))), sh),
                                  _mm256_set1_epi32(1));
    return _mm256_or_si256(_mm256_cvtepu8_epi32(nib8), _mm256_slli_epi32(hb, 4));
}

TARGET static void x_q5_0(const uint8_t *x, float *y, size_t nb) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m256i sixteen = _mm256_set1_epi32(16);
    for (size_t i = 0; i < nb; i++, x += 22, y += 32) {
        const __m256 d = _mm256_set1_ps(half_at(x));
        const uint32_t qh = wm__rd32(x + 2);
        __m128i q = _mm_loadu_si128((const __m128i *)(x + 6));
        __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
        __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int g = 0; g < 4; g++) {
            __m256i v = _mm256_sub_epi32(q5_group(parts[g], qh, g), sixteen);
            _mm256_storeu_ps(y + 8 * g, _mm256_mul_ps(_mm256_cvtepi32_ps(v), d));
        }
    }
}

TARGET static void x_q5_1(const uint8_t *x, float *y, size_t nb) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (size_t i = 0; i < nb; i++, x += 24, y += 32) {
        const __m256 d = _mm256_set1_ps(half_at(x)), m = _mm256_set1_ps(half_at(x + 2));
        const uint32_t qh = wm__rd32(x + 4);
        __m128i q = _mm_loadu_si128((const __m128i *)(x + 8));
        __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
        __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int g = 0; g < 4; g++) {
            __m256 v = _mm256_cvtepi32_ps(q5_group(parts[g], qh, g));
            _mm256_storeu_ps(y + 8 * g, _mm256_add_ps(_mm256_mul_ps(v, d), m));
        }
    }
}

TARGET static void x_q8_0(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 34, y += 32) {
        const __m256 d = _mm256_set1_ps(half_at(x));
        st16_i8(y, _mm_loadu_si128((const __m128i *)(x + 2)), d);
        st16_i8(y + 16, _mm_loadu_si128((const __m128i *)(x + 18)), d);
    }
}

TARGET static void x_q1_0(const uint8_t *x, float *y, size_t nb) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (size_t i = 0; i < nb; i++, x += 18) {
        const float df = half_at(x);
        const __m256 d = _mm256_set1_ps(df), nd = _mm256_set1_ps(-df);
        for (int k = 0; k < 16; k++, y += 8) {
            __m256i set =
                _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(x[2 + k]), bit), bit);
            _mm256_storeu_ps(y, _mm256_blendv_ps(nd, d, _mm256_castsi256_ps(set)));
        }
    }
}

TARGET static void x_q2_0(const uint8_t *x, float *y, size_t nb) {
    const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i three = _mm256_set1_epi32(3), one = _mm256_set1_epi32(1);
    for (size_t i = 0; i < nb; i++, x += 18) {
        const __m256 d = _mm256_set1_ps(half_at(x));
        for (int k = 0; k < 8; k++, y += 8) {
            __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32(wm__rd16(x + 2 + 2 * k)), sh);
            v = _mm256_sub_epi32(_mm256_and_si256(v, three), one);
            _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(v), d));
        }
    }
}

/* MXFP4, IQ4_NL and IQ4_XS: blocks of codebook nibbles (st32_codebook). */
TARGET static void x_mxfp4(const uint8_t *x, float *y, size_t nb) {
    const __m128i kv = _mm_loadu_si128((const __m128i *)wm__kvalues_mxfp4);
    for (size_t i = 0; i < nb; i++, x += 17, y += 32)
        st32_codebook(y, _mm_loadu_si128((const __m128i *)(x + 1)), kv,
                      _mm256_set1_ps(wm__e8m0_half(x[0])));
}

TARGET static void x_nvfp4(const uint8_t *x, float *y, size_t nb) {
    const __m128i kv = _mm_loadu_si128((const __m128i *)wm__kvalues_mxfp4),
                  m4 = _mm_set1_epi8(0x0F);
    for (size_t i = 0; i < nb; i++, x += 36) {
        for (int s = 0; s < 4; s++, y += 16) {
            const __m256 d = _mm256_set1_ps(wm__ue4m3_half(x[s]));
            __m128i q = _mm_loadl_epi64((const __m128i *)(x + 4 + 8 * s));
            __m128i lo = _mm_shuffle_epi8(kv, _mm_and_si128(q, m4));
            __m128i hi = _mm_shuffle_epi8(kv, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
            _mm256_storeu_ps(y, _mm256_mul_ps(i8x8_ps(lo), d));
            _mm256_storeu_ps(y + 8, _mm256_mul_ps(i8x8_ps(hi), d));
        }
    }
}

TARGET static void x_iq4_nl(const uint8_t *x, float *y, size_t nb) {
    const __m128i kv = _mm_loadu_si128((const __m128i *)wm__kvalues_iq4nl);
    for (size_t i = 0; i < nb; i++, x += 18, y += 32)
        st32_codebook(y, _mm_loadu_si128((const __m128i *)(x + 2)), kv, _mm256_set1_ps(half_at(x)));
}

TARGET static void x_iq4_xs(const uint8_t *x, float *y, size_t nb) {
    const __m128i kv = _mm_loadu_si128((const __m128i *)wm__kvalues_iq4nl);
    for (size_t i = 0; i < nb; i++, x += 136) {
        const float d = half_at(x);
        const uint16_t sh = wm__rd16(x + 2);
        const uint8_t *sl = x + 4, *qs = x + 8;
        for (int ib = 0; ib < 8; ib++, y += 32, qs += 16) {
            int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
            st32_codebook(y, _mm_loadu_si128((const __m128i *)qs), kv,
                          _mm256_set1_ps(d * (float)(ls - 32)));
        }
    }
}

/* ---- the kernel table ---- */

wm__to_f32_fn wm__dequant_x86(wm_type type) {
    switch (type) {
    case WM_TYPE_F16: return x_f16;
    case WM_TYPE_BF16: return x_bf16;
    case WM_TYPE_Q4_0: return x_q4_0;
    case WM_TYPE_Q4_1: return x_q4_1;
    case WM_TYPE_Q5_0: return x_q5_0;
    case WM_TYPE_Q5_1: return x_q5_1;
    case WM_TYPE_Q8_0: return x_q8_0;
    case WM_TYPE_Q1_0: return x_q1_0;
    case WM_TYPE_Q2_0: return x_q2_0;
    case WM_TYPE_MXFP4: return x_mxfp4;
    case WM_TYPE_NVFP4: return x_nvfp4;
    case WM_TYPE_IQ4_NL: return x_iq4_nl;
    case WM_TYPE_IQ4_XS: return x_iq4_xs;
    case WM_TYPE_Q2_K: return wm__x86_q2_k;
    case WM_TYPE_Q3_K: return wm__x86_q3_k;
    case WM_TYPE_Q4_K: return wm__x86_q4_k;
    case WM_TYPE_Q5_K: return wm__x86_q5_k;
    case WM_TYPE_Q6_K: return wm__x86_q6_k;
    case WM_TYPE_Q8_K: return wm__x86_q8_k;
    case WM_TYPE_TQ1_0: return wm__x86_tq1_0;
    case WM_TYPE_TQ2_0: return wm__x86_tq2_0;
    case WM_TYPE_IQ2_XXS: return wm__x86_iq2_xxs;
    case WM_TYPE_IQ2_XS: return wm__x86_iq2_xs;
    case WM_TYPE_IQ2_S: return wm__x86_iq2_s;
    case WM_TYPE_IQ3_XXS: return wm__x86_iq3_xxs;
    case WM_TYPE_IQ3_S: return wm__x86_iq3_s;
    case WM_TYPE_IQ1_S: return wm__x86_iq1_s;
    case WM_TYPE_IQ1_M: return wm__x86_iq1_m;
    default: return NULL;
    }
}

#else /* not x86-64 with GCC or Clang */

int wm__x86_usable(void) { return 0; }
int wm__x86_stream_preferred(void) { return 0; }
wm__to_f32_fn wm__dequant_x86(wm_type type) {
    (void)type;
    return NULL;
}
void wm__f32_to_f16_x86(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = wm__f32_to_f16(src[i]);
}
void wm__stream_floats_x86(float *dst, const float *src, size_t n) { memcpy(dst, src, n * 4); }
void wm__stream_fence_x86(void) {}
void wm__f32_to_bf16_x86(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = wm__f32_to_bf16(src[i]);
}

#endif
