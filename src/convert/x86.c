/*
 * x86.c: AVX2/F16C kernels, chosen at run time when the CPU has both.
 *
 * Sections: CPU detection; float widths (half, bfloat16 both ways); simple block types; k-quants;
 * ternary types; IQ codebook types (grids of iq_grids.c); the kernel table. Off x86-64 (or without
 * GCC/Clang) the file reduces to stubs that report "no kernel".
 *
 * Each kernel computes exactly what its portable twin in dequant.c computes: integer codes are
 * decoded in integer lanes, converted to float, then multiplied and offset with separate
 * multiply and add/subtract instructions (never FMA), so every lane rounds as ggml's scalar
 * reference does. Functions carry target("avx2,f16c") so the rest of the library stays
 * baseline x86-64.
 */
#include "convert.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <cpuid.h>
#include <immintrin.h>

#define TARGET __attribute__((target("avx2,f16c")))

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
static inline float half_at(const uint8_t *p) { return wm__f16_to_f32(wm__rd16(p)); }

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

/* ---- k-quants ---- */

static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

TARGET static void x_q2_k(const uint8_t *x, float *y, size_t nb) {
    const __m128i m3 = _mm_set1_epi8(3);
    for (size_t i = 0; i < nb; i++, x += 84) {
        const uint8_t *sc = x, *q = x + 16;
        const float d = half_at(x + 80), dmin = half_at(x + 82);
        int is = 0;
        for (int n = 0; n < 2; n++, q += 32) {
            __m128i qa = _mm_loadu_si128((const __m128i *)q),
                    qb = _mm_loadu_si128((const __m128i *)(q + 16));
            for (int shift = 0; shift < 8; shift += 2) {
                __m128i cnt = _mm_cvtsi32_si128(shift);
                for (int half = 0; half < 2; half++, is++, y += 16) {
                    const __m256 dl = _mm256_set1_ps(d * (float)(sc[is] & 0xF));
                    const __m256 ml = _mm256_set1_ps(dmin * (float)(sc[is] >> 4));
                    __m128i v = _mm_and_si128(_mm_srl_epi16(half ? qb : qa, cnt), m3);
                    st16_u8_dm(y, v, dl, ml);
                }
            }
        }
    }
}

static inline void q3k_scales(const uint8_t *s12, int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? s12[j] & 0xF : s12[j - 8] >> 4;
        int hi = (s12[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

TARGET static void x_q3_k(const uint8_t *x, float *y, size_t nb) {
    const __m128i m3 = _mm_set1_epi8(3), four = _mm_set1_epi8(4);
    for (size_t i = 0; i < nb; i++, x += 110) {
        const uint8_t *q = x + 32;
        const float d = half_at(x + 108);
        const __m128i hma = _mm_loadu_si128((const __m128i *)x),
                      hmb = _mm_loadu_si128((const __m128i *)(x + 16));
        int8_t sc[16];
        q3k_scales(x + 96, sc);
        int is = 0, bitn = 0;
        for (int n = 0; n < 2; n++, q += 32) {
            __m128i qa = _mm_loadu_si128((const __m128i *)q),
                    qb = _mm_loadu_si128((const __m128i *)(q + 16));
            for (int shift = 0; shift < 8; shift += 2, bitn++) {
                const __m128i m = _mm_set1_epi8((char)(1u << bitn));
                __m128i cnt = _mm_cvtsi32_si128(shift);
                for (int half = 0; half < 2; half++, is++, y += 16) {
                    const __m256 dl = _mm256_set1_ps(d * (float)sc[is]);
                    __m128i v = _mm_and_si128(_mm_srl_epi16(half ? qb : qa, cnt), m3);
                    __m128i hset = _mm_cmpeq_epi8(_mm_and_si128(half ? hmb : hma, m), m);
                    v = _mm_sub_epi8(v, _mm_andnot_si128(hset, four));
                    st16_i8(y, v, dl);
                }
            }
        }
    }
}

/* 32 unsigned bytes as d*q - m. */
TARGET static inline void st32_u8_dm(float *y, __m128i a, __m128i b, __m256 d, __m256 m) {
    st16_u8_dm(y, a, d, m);
    st16_u8_dm(y + 16, b, d, m);
}

TARGET static void x_q4_k(const uint8_t *x, float *y, size_t nb) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (size_t i = 0; i < nb; i++, x += 144) {
        const float d = half_at(x), dmin = half_at(x + 2);
        const uint8_t *s = x + 4, *q = x + 16;
        for (int j = 0; j < 8; j += 2, q += 32, y += 64) {
            uint8_t sc, m;
            scale_min_k4(j, s, &sc, &m);
            const __m256 d1 = _mm256_set1_ps(d * (float)sc), m1 = _mm256_set1_ps(dmin * (float)m);
            scale_min_k4(j + 1, s, &sc, &m);
            const __m256 d2 = _mm256_set1_ps(d * (float)sc), m2 = _mm256_set1_ps(dmin * (float)m);
            __m128i qa = _mm_loadu_si128((const __m128i *)q),
                    qb = _mm_loadu_si128((const __m128i *)(q + 16));
            st32_u8_dm(y, _mm_and_si128(qa, m4), _mm_and_si128(qb, m4), d1, m1);
            st32_u8_dm(y + 32, _mm_and_si128(_mm_srli_epi16(qa, 4), m4),
                       _mm_and_si128(_mm_srli_epi16(qb, 4), m4), d2, m2);
        }
    }
}

TARGET static void x_q5_k(const uint8_t *x, float *y, size_t nb) {
    const __m128i m4 = _mm_set1_epi8(0x0F), sixteen = _mm_set1_epi8(16);
    for (size_t i = 0; i < nb; i++, x += 176) {
        const float d = half_at(x), dmin = half_at(x + 2);
        const uint8_t *s = x + 4, *ql = x + 48;
        const __m128i ha = _mm_loadu_si128((const __m128i *)(x + 16)),
                      hb = _mm_loadu_si128((const __m128i *)(x + 32));
        int bitn = 0;
        for (int j = 0; j < 8; j += 2, ql += 32, y += 64, bitn += 2) {
            uint8_t sc, m;
            scale_min_k4(j, s, &sc, &m);
            const __m256 d1 = _mm256_set1_ps(d * (float)sc), m1 = _mm256_set1_ps(dmin * (float)m);
            scale_min_k4(j + 1, s, &sc, &m);
            const __m256 d2 = _mm256_set1_ps(d * (float)sc), m2 = _mm256_set1_ps(dmin * (float)m);
            const __m128i u1 = _mm_set1_epi8((char)(1u << bitn)),
                          u2 = _mm_set1_epi8((char)(2u << bitn));
            __m128i qa = _mm_loadu_si128((const __m128i *)ql),
                    qb = _mm_loadu_si128((const __m128i *)(ql + 16));
            __m128i la =
                _mm_add_epi8(_mm_and_si128(qa, m4),
                             _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(ha, u1), u1), sixteen));
            __m128i lb =
                _mm_add_epi8(_mm_and_si128(qb, m4),
                             _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(hb, u1), u1), sixteen));
            st32_u8_dm(y, la, lb, d1, m1);
            la = _mm_add_epi8(_mm_and_si128(_mm_srli_epi16(qa, 4), m4),
                              _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(ha, u2), u2), sixteen));
            lb = _mm_add_epi8(_mm_and_si128(_mm_srli_epi16(qb, 4), m4),
                              _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(hb, u2), u2), sixteen));
            st32_u8_dm(y + 32, la, lb, d2, m2);
        }
    }
}

/* Q6_K: 16 codes (bytes, 0..63) minus 32, times (d*sc). */
TARGET static inline void q6_store16(float *y, __m128i codes, __m256 ds) {
    st16_i8(y, _mm_sub_epi8(codes, _mm_set1_epi8(32)), ds);
}

TARGET static void x_q6_k(const uint8_t *x, float *y, size_t nb) {
    const __m128i m4 = _mm_set1_epi8(0x0F), m3 = _mm_set1_epi8(3);
    for (size_t i = 0; i < nb; i++, x += 210) {
        const float d = half_at(x + 208);
        const uint8_t *ql = x, *qh = x + 128;
        const int8_t *sc = (const int8_t *)(x + 192);
        for (int n = 0; n < 2; n++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int h = 0; h < 2; h++) { /* l in 16h .. 16h+15 */
                __m128i l0 = _mm_loadu_si128((const __m128i *)(ql + 16 * h));
                __m128i l1 = _mm_loadu_si128((const __m128i *)(ql + 32 + 16 * h));
                __m128i hh = _mm_loadu_si128((const __m128i *)(qh + 16 * h));
                __m128i q1 =
                    _mm_or_si128(_mm_and_si128(l0, m4), _mm_slli_epi16(_mm_and_si128(hh, m3), 4));
                __m128i q2 =
                    _mm_or_si128(_mm_and_si128(l1, m4),
                                 _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(hh, 2), m3), 4));
                __m128i q3 =
                    _mm_or_si128(_mm_and_si128(_mm_srli_epi16(l0, 4), m4),
                                 _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(hh, 4), m3), 4));
                __m128i q4 =
                    _mm_or_si128(_mm_and_si128(_mm_srli_epi16(l1, 4), m4),
                                 _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(hh, 6), m3), 4));
                q6_store16(y + 16 * h, q1, _mm256_set1_ps(d * (float)sc[h]));
                q6_store16(y + 32 + 16 * h, q2, _mm256_set1_ps(d * (float)sc[h + 2]));
                q6_store16(y + 64 + 16 * h, q3, _mm256_set1_ps(d * (float)sc[h + 4]));
                q6_store16(y + 96 + 16 * h, q4, _mm256_set1_ps(d * (float)sc[h + 6]));
            }
        }
    }
}

TARGET static void x_q8_k(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 292, y += 256) {
        const __m256 d = _mm256_set1_ps(wm__f32_from_bits(wm__rd32(x)));
        for (int j = 0; j < 256; j += 16)
            st16_i8(y + j, _mm_loadu_si128((const __m128i *)(x + 4 + j)), d);
    }
}

/* ---- ternary types ---- */

TARGET static void x_tq2_0(const uint8_t *x, float *y, size_t nb) {
    const __m128i m3 = _mm_set1_epi8(3), one = _mm_set1_epi8(1);
    for (size_t i = 0; i < nb; i++, x += 66) {
        const __m256 d = _mm256_set1_ps(half_at(x + 64));
        for (int j = 0; j < 64; j += 32) {
            __m128i qa = _mm_loadu_si128((const __m128i *)(x + j)),
                    qb = _mm_loadu_si128((const __m128i *)(x + j + 16));
            for (int l = 0; l < 4; l++, y += 32) {
                __m128i cnt = _mm_cvtsi32_si128(2 * l);
                st16_i8(y, _mm_sub_epi8(_mm_and_si128(_mm_srl_epi16(qa, cnt), m3), one), d);
                st16_i8(y + 16, _mm_sub_epi8(_mm_and_si128(_mm_srl_epi16(qb, cnt), m3), one), d);
            }
        }
    }
}

/* 16 trits: (((byte * pow3) mod 256) * 3) >> 8, minus one, in 16-bit lanes. */
TARGET static inline void tq1_store16(float *y, __m256i bytes16, int pow3, __m256 d) {
    __m256i q = _mm256_and_si256(_mm256_mullo_epi16(bytes16, _mm256_set1_epi16((short)pow3)),
                                 _mm256_set1_epi16(0xFF));
    __m256i t = _mm256_sub_epi16(_mm256_srli_epi16(_mm256_mullo_epi16(q, _mm256_set1_epi16(3)), 8),
                                 _mm256_set1_epi16(1));
    __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(t)));
    __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(t, 1)));
    _mm256_storeu_ps(y, _mm256_mul_ps(lo, d));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(hi, d));
}

TARGET static void x_tq1_0(const uint8_t *x, float *y, size_t nb) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    for (size_t i = 0; i < nb; i++, x += 54) {
        const float df = half_at(x + 52);
        const __m256 d = _mm256_set1_ps(df);
        __m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)x));
        __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(x + 16)));
        __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(x + 32)));
        for (int n = 0; n < 5; n++, y += 32) {
            tq1_store16(y, a, pow3[n], d);
            tq1_store16(y + 16, b, pow3[n], d);
        }
        for (int n = 0; n < 5; n++, y += 16)
            tq1_store16(y, c, pow3[n], d);
        for (int n = 0; n < 4; n++) {
            for (int j = 0; j < 4; j++) {
                uint8_t q = (uint8_t)(x[48 + j] * pow3[n]);
                *y++ = (float)((int)(((uint16_t)q * 3) >> 8) - 1) * df;
            }
        }
    }
}

/* ---- IQ codebook types ---- */

/* Eight outputs from one packed grid entry (8 unsigned bytes): (db * g[j]) * (+-1.0), the sign
 * of lane j from bit j of `signs`. The sign is a multiply, as in the portable kernel (a NaN scale
 * keeps its sign through it, as the scalar code's does). */
TARGET static inline void iq_store8(float *y, uint64_t g, __m256 db, unsigned signs) {
    const __m256i shift = _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24),
                  top = _mm256_set1_epi32((int)0x80000000u);
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 v = _mm256_mul_ps(db, u8x8_ps(_mm_cvtsi64_si128((long long)g)));
    __m256i bit = _mm256_and_si256(_mm256_sllv_epi32(_mm256_set1_epi32((int)signs), shift), top);
    _mm256_storeu_ps(y, _mm256_mul_ps(v, _mm256_or_ps(_mm256_castsi256_ps(bit), one)));
}

/* Eight IQ1 outputs: dl * (g[j] + delta), g a packed entry of signed bytes. */
TARGET static inline void iq1_store8(float *y, uint64_t g, __m256 dl, float delta) {
    __m256 v = _mm256_add_ps(i8x8_ps(_mm_cvtsi64_si128((long long)g)), _mm256_set1_ps(delta));
    _mm256_storeu_ps(y, _mm256_mul_ps(dl, v));
}

static inline uint64_t iq3_pair(const uint32_t *grid, unsigned a, unsigned b) {
    return (uint64_t)grid[a] | (uint64_t)grid[b] << 32;
}

TARGET static void x_iq2_xxs(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 66) {
        const float d = half_at(x);
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t a0 = wm__rd32(x + 2 + 8 * ib), a1 = wm__rd32(x + 6 + 8 * ib);
            const __m256 db = _mm256_set1_ps(d * (0.5f + (float)(a1 >> 28)) * 0.25f);
            for (int l = 0; l < 4; l++, y += 8)
                iq_store8(y, wm__iq2xxs_grid[(a0 >> (8 * l)) & 0xFF], db,
                          wm__iq_ksign((a1 >> (7 * l)) & 127));
        }
    }
}

TARGET static void x_iq2_xs(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 74) {
        const float d = half_at(x);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t sc = x[66 + ib];
            const __m256 db[2] = {_mm256_set1_ps(d * (0.5f + (float)(sc & 0xF)) * 0.25f),
                                  _mm256_set1_ps(d * (0.5f + (float)(sc >> 4)) * 0.25f)};
            for (int l = 0; l < 4; l++, y += 8) {
                const uint16_t q = wm__rd16(x + 2 + 2 * (4 * ib + l));
                iq_store8(y, wm__iq2xs_grid[q & 511], db[l / 2], wm__iq_ksign(q >> 9));
            }
        }
    }
}

TARGET static void x_iq2_s(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 82) {
        const float d = half_at(x);
        const uint8_t *qs = x + 2, *signs = x + 34, *qh = x + 66, *scales = x + 74;
        for (int ib = 0; ib < 8; ib++, qs += 4, signs += 4) {
            const __m256 db[2] = {_mm256_set1_ps(d * (0.5f + (float)(scales[ib] & 0xF)) * 0.25f),
                                  _mm256_set1_ps(d * (0.5f + (float)(scales[ib] >> 4)) * 0.25f)};
            for (int l = 0; l < 4; l++, y += 8) {
                const unsigned gi = qs[l] | ((unsigned)(qh[ib] << (8 - 2 * l)) & 0x300u);
                iq_store8(y, wm__iq2s_grid[gi], db[l / 2], signs[l]);
            }
        }
    }
}

TARGET static void x_iq3_xxs(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 98) {
        const float d = half_at(x);
        const uint8_t *qs = x + 2;
        for (int ib = 0; ib < 8; ib++, qs += 8) {
            const uint32_t a = wm__rd32(x + 66 + 4 * ib);
            const __m256 db = _mm256_set1_ps(d * (0.5f + (float)(a >> 28)) * 0.5f);
            for (int l = 0; l < 4; l++, y += 8)
                iq_store8(y, iq3_pair(wm__iq3xxs_grid, qs[2 * l], qs[2 * l + 1]), db,
                          wm__iq_ksign((a >> (7 * l)) & 127));
        }
    }
}

TARGET static void x_iq3_s(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 110) {
        const float d = half_at(x);
        const uint8_t *qs = x + 2, *qh = x + 66, *signs = x + 74, *scales = x + 106;
        for (int ib = 0; ib < 8; ib += 2, qh += 2) {
            for (int h = 0; h < 2; h++, qs += 8, signs += 4) {
                const int sc = h ? scales[ib / 2] >> 4 : scales[ib / 2] & 0xF;
                const __m256 db = _mm256_set1_ps(d * (float)(1 + 2 * sc));
                for (int l = 0; l < 4; l++, y += 8) {
                    const unsigned g1 = qs[2 * l] | ((unsigned)(qh[h] << (8 - 2 * l)) & 256u);
                    const unsigned g2 = qs[2 * l + 1] | ((unsigned)(qh[h] << (7 - 2 * l)) & 256u);
                    iq_store8(y, iq3_pair(wm__iq3s_grid, g1, g2), db, signs[l]);
                }
            }
        }
    }
}

TARGET static void x_iq1_s(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 50) {
        const float d = half_at(x);
        const uint8_t *qs = x + 2;
        for (int ib = 0; ib < 8; ib++, qs += 4) {
            const uint16_t q = wm__rd16(x + 34 + 2 * ib);
            const __m256 dl = _mm256_set1_ps(d * (float)(2 * ((q >> 12) & 7) + 1));
            const float delta = q & 0x8000 ? -0.125f : 0.125f;
            for (int l = 0; l < 4; l++, y += 8)
                iq1_store8(y, wm__iq1s_grid[qs[l] | (((unsigned)(q >> (3 * l)) & 7u) << 8)], dl,
                           delta);
        }
    }
}

TARGET static void x_iq1_m(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 56) {
        uint16_t sc[4];
        const float d = wm__iq1m_scales(x, sc);
        const uint8_t *qs = x, *qh = x + 32;
        for (int ib = 0; ib < 8; ib++, qs += 4, qh += 2) {
            const __m256 dl1 =
                _mm256_set1_ps(d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1));
            const __m256 dl2 =
                _mm256_set1_ps(d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1));
            iq1_store8(y, wm__iq1s_grid[qs[0] | ((unsigned)(qh[0] << 8) & 0x700u)], dl1,
                       qh[0] & 0x08 ? -0.125f : 0.125f);
            iq1_store8(y + 8, wm__iq1s_grid[qs[1] | ((unsigned)(qh[0] << 4) & 0x700u)], dl1,
                       qh[0] & 0x80 ? -0.125f : 0.125f);
            iq1_store8(y + 16, wm__iq1s_grid[qs[2] | ((unsigned)(qh[1] << 8) & 0x700u)], dl2,
                       qh[1] & 0x08 ? -0.125f : 0.125f);
            iq1_store8(y + 24, wm__iq1s_grid[qs[3] | ((unsigned)(qh[1] << 4) & 0x700u)], dl2,
                       qh[1] & 0x80 ? -0.125f : 0.125f);
            y += 32;
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
    case WM_TYPE_Q2_K: return x_q2_k;
    case WM_TYPE_Q3_K: return x_q3_k;
    case WM_TYPE_Q4_K: return x_q4_k;
    case WM_TYPE_Q5_K: return x_q5_k;
    case WM_TYPE_Q6_K: return x_q6_k;
    case WM_TYPE_Q8_K: return x_q8_k;
    case WM_TYPE_TQ1_0: return x_tq1_0;
    case WM_TYPE_TQ2_0: return x_tq2_0;
    case WM_TYPE_IQ2_XXS: return x_iq2_xxs;
    case WM_TYPE_IQ2_XS: return x_iq2_xs;
    case WM_TYPE_IQ2_S: return x_iq2_s;
    case WM_TYPE_IQ3_XXS: return x_iq3_xxs;
    case WM_TYPE_IQ3_S: return x_iq3_s;
    case WM_TYPE_IQ1_S: return x_iq1_s;
    case WM_TYPE_IQ1_M: return x_iq1_m;
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
