/*
 * neon.c: AArch64 Advanced SIMD (NEON) kernels, chosen at run time when the CPU reports it.
 *
 * Sections: CPU detection; helpers; float widths (half, bfloat16 both ways); simple block types
 * (Q4_0 .. Q8_0, MXFP4, IQ4_NL, IQ4_XS); k-quants (Q2_K .. Q6_K); the kernel table. Off AArch64
 * (or without GCC/Clang) the file reduces to stubs that report "no kernel". The types this file
 * has no kernel for take the portable ones (docs/PORTING.md lists them).
 *
 * Only the Advanced SIMD baseline is used: the half-precision conversions (FCVTL, FCVTN) are part
 * of it, so neither the FP16 arithmetic extension nor dotprod is needed for a conversion to
 * float; the one run-time check is the HWCAP_ASIMD bit (wm__os_cpu_has_asimd), which every
 * AArch64 Linux and Android CPU sets.
 *
 * Each kernel computes exactly what its portable twin in dequant.c computes: integer codes are
 * decoded in integer lanes, converted to float, then multiplied and offset with separate FMUL and
 * FADD/FSUB (the vmulq/vaddq intrinsics are plain C operators in GCC's arm_neon.h, and the
 * library is built as ISO C, where GCC does not contract; convert.h turns contraction off for
 * clang), so every lane rounds as ggml's scalar reference does.
 */
#include "convert.h"

#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))

#include "../os/os.h"

#include <arm_neon.h>

/* ---- CPU detection ---- */

int wm__neon_usable(void) {
    static int cached = -1; /* racing first calls compute the same answer */
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        v = wm__os_cpu_has_asimd();
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* ---- helpers ---- */

/* Stores 16 signed bytes times d as 16 floats: (float)code * d, as the portable kernels. */
static inline void st16_i8(float *y, int8x16_t v, float32x4_t d) {
    int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_high_s8(v);
    vst1q_f32(y, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
    vst1q_f32(y + 4, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d));
    vst1q_f32(y + 8, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
    vst1q_f32(y + 12, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d));
}

/* The 16 unsigned bytes of v as 4 vectors of floats. */
static inline void u8x16_f32(uint8x16_t v, float32x4_t f[4]) {
    uint16x8_t lo = vmovl_u8(vget_low_u8(v)), hi = vmovl_high_u8(v);
    f[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo)));
    f[1] = vcvtq_f32_u32(vmovl_high_u16(lo));
    f[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi)));
    f[3] = vcvtq_f32_u32(vmovl_high_u16(hi));
}

/* Stores 16 unsigned bytes as dl*q - ml (k-quants). */
static inline void st16_u8_dm(float *y, uint8x16_t v, float32x4_t dl, float32x4_t ml) {
    float32x4_t f[4];
    u8x16_f32(v, f);
    for (int k = 0; k < 4; k++)
        vst1q_f32(y + 4 * k, vsubq_f32(vmulq_f32(dl, f[k]), ml));
}

/* Stores 16 unsigned bytes as q*d + m (Q4_1, Q5_1). */
static inline void st16_u8_md(float *y, uint8x16_t v, float32x4_t d, float32x4_t m) {
    float32x4_t f[4];
    u8x16_f32(v, f);
    for (int k = 0; k < 4; k++)
        vst1q_f32(y + 4 * k, vaddq_f32(vmulq_f32(f[k], d), m));
}

/* Stores the 32 nibbles of the 16 bytes at q (low nibbles first, then high nibbles) mapped
 * through the 16-entry codebook kv, times d. */
static inline void st32_codebook(float *y, const uint8_t *q, int8x16_t kv, float32x4_t d) {
    uint8x16_t b = vld1q_u8(q);
    st16_i8(y, vqtbl1q_s8(kv, vandq_u8(b, vdupq_n_u8(0x0F))), d);
    st16_i8(y + 16, vqtbl1q_s8(kv, vshrq_n_u8(b, 4)), d);
}

/* 16 in the lanes whose bit of the 16-bit word h is set (lane j: bit j), else 0. */
static inline uint8x16_t bits16(uint32_t h) {
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint8x16_t v = vcombine_u8(vdup_n_u8((uint8_t)h), vdup_n_u8((uint8_t)(h >> 8)));
    return vandq_u8(vtstq_u8(v, vld1q_u8(bit)), vdupq_n_u8(16));
}

/* ---- float widths ---- */

static void n_f16(const uint8_t *x, float *y, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16x8_t h = vld1q_u16((const uint16_t *)(const void *)(x + 2 * i));
        vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h))));
        vst1q_f32(y + i + 4, vcvt_high_f32_f16(vreinterpretq_f16_u16(h)));
    }
    for (; i < n; i++)
        y[i] = wm__f16_to_f32(wm__rd16(x + 2 * i));
}

static void n_bf16(const uint8_t *x, float *y, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16x8_t h = vld1q_u16((const uint16_t *)(const void *)(x + 2 * i));
        vst1q_u32((uint32_t *)(void *)(y + i), vshll_n_u16(vget_low_u16(h), 16));
        vst1q_u32((uint32_t *)(void *)(y + i + 4), vshll_high_n_u16(h, 16));
    }
    for (; i < n; i++)
        y[i] = wm__bf16_to_f32(wm__rd16(x + 2 * i));
}

/* FCVTN rounds to nearest even (the default FPCR mode) like ggml, overflows to infinity and keeps
 * half subnormals, but keeps part of a NaN's payload where ggml writes 0x7E00: a group of 4
 * holding a NaN is redone by the scalar rule. */
void wm__f32_to_f16_neon(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t v = vld1q_f32(src + i);
        if (vminvq_u32(vceqq_f32(v, v)) == 0) {
            for (size_t j = i; j < i + 4; j++)
                dst[j] = wm__f32_to_f16(src[j]);
        } else {
            vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(v)));
        }
    }
    for (; i < n; i++)
        dst[i] = wm__f32_to_f16(src[i]);
}

/* ggml's bfloat16 rounding in integer lanes: (u + 0x7FFF + lsb) >> 16, a NaN truncated and made
 * quiet. */
static inline uint16x4_t bf16_round(uint32x4_t u) {
    uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    uint32x4_t r = vshrq_n_u32(vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7FFF), lsb)), 16);
    uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7FFFFFFF)), vdupq_n_u32(0x7F800000));
    uint32x4_t q = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(64));
    return vmovn_u32(vbslq_u32(nan, q, r));
}

void wm__f32_to_bf16_neon(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16x4_t a = bf16_round(vld1q_u32((const uint32_t *)(const void *)(src + i)));
        uint16x4_t b = bf16_round(vld1q_u32((const uint32_t *)(const void *)(src + i + 4)));
        vst1q_u16(dst + i, vcombine_u16(a, b));
    }
    for (; i < n; i++)
        dst[i] = wm__f32_to_bf16(src[i]);
}

/* ---- simple block types ---- */

static void n_q4_0(const uint8_t *x, float *y, size_t nb) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t eight = vdupq_n_s8(8);
    for (size_t i = 0; i < nb; i++, x += 18, y += 32) {
        const float32x4_t d = vdupq_n_f32(half_at(x));
        uint8x16_t q = vld1q_u8(x + 2);
        st16_i8(y, vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, m4)), eight), d);
        st16_i8(y + 16, vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), eight), d);
    }
}

static void n_q4_1(const uint8_t *x, float *y, size_t nb) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (size_t i = 0; i < nb; i++, x += 20, y += 32) {
        const float32x4_t d = vdupq_n_f32(half_at(x)), m = vdupq_n_f32(half_at(x + 2));
        uint8x16_t q = vld1q_u8(x + 4);
        st16_u8_md(y, vandq_u8(q, m4), d, m);
        st16_u8_md(y + 16, vshrq_n_u8(q, 4), d, m);
    }
}

/* Q5: the 5-bit codes of a block, elements 0..15 (lo) and 16..31 (hi). */
static inline void q5_codes(const uint8_t *qs, uint32_t qh, uint8x16_t *lo, uint8x16_t *hi) {
    uint8x16_t q = vld1q_u8(qs);
    *lo = vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0F)), bits16(qh & 0xFFFFu));
    *hi = vorrq_u8(vshrq_n_u8(q, 4), bits16(qh >> 16));
}

static void n_q5_0(const uint8_t *x, float *y, size_t nb) {
    const int8x16_t sixteen = vdupq_n_s8(16);
    for (size_t i = 0; i < nb; i++, x += 22, y += 32) {
        const float32x4_t d = vdupq_n_f32(half_at(x));
        uint8x16_t lo, hi;
        q5_codes(x + 6, wm__rd32(x + 2), &lo, &hi);
        st16_i8(y, vsubq_s8(vreinterpretq_s8_u8(lo), sixteen), d);
        st16_i8(y + 16, vsubq_s8(vreinterpretq_s8_u8(hi), sixteen), d);
    }
}

static void n_q5_1(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 24, y += 32) {
        const float32x4_t d = vdupq_n_f32(half_at(x)), m = vdupq_n_f32(half_at(x + 2));
        uint8x16_t lo, hi;
        q5_codes(x + 8, wm__rd32(x + 4), &lo, &hi);
        st16_u8_md(y, lo, d, m);
        st16_u8_md(y + 16, hi, d, m);
    }
}

static void n_q8_0(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 34, y += 32) {
        const float32x4_t d = vdupq_n_f32(half_at(x));
        st16_i8(y, vld1q_s8((const int8_t *)(x + 2)), d);
        st16_i8(y + 16, vld1q_s8((const int8_t *)(x + 18)), d);
    }
}

static void n_mxfp4(const uint8_t *x, float *y, size_t nb) {
    const int8x16_t kv = vld1q_s8(wm__kvalues_mxfp4);
    for (size_t i = 0; i < nb; i++, x += 17, y += 32)
        st32_codebook(y, x + 1, kv, vdupq_n_f32(wm__e8m0_half(x[0])));
}

static void n_iq4_nl(const uint8_t *x, float *y, size_t nb) {
    const int8x16_t kv = vld1q_s8(wm__kvalues_iq4nl);
    for (size_t i = 0; i < nb; i++, x += 18, y += 32)
        st32_codebook(y, x + 2, kv, vdupq_n_f32(half_at(x)));
}

static void n_iq4_xs(const uint8_t *x, float *y, size_t nb) {
    const int8x16_t kv = vld1q_s8(wm__kvalues_iq4nl);
    for (size_t i = 0; i < nb; i++, x += 136) {
        const float d = half_at(x);
        const uint16_t sh = wm__rd16(x + 2);
        const uint8_t *sl = x + 4, *qs = x + 8;
        for (int ib = 0; ib < 8; ib++, y += 32, qs += 16) {
            int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
            st32_codebook(y, qs, kv, vdupq_n_f32(d * (float)(ls - 32)));
        }
    }
}

/* ---- k-quants ---- */

static void n_q2_k(const uint8_t *x, float *y, size_t nb) {
    const uint8x16_t m3 = vdupq_n_u8(3);
    for (size_t i = 0; i < nb; i++, x += 84) {
        const uint8_t *sc = x, *q = x + 16;
        const float d = half_at(x + 80), dmin = half_at(x + 82);
        int is = 0;
        for (int n = 0; n < 2; n++, q += 32) {
            const uint8x16_t qs[2] = {vld1q_u8(q), vld1q_u8(q + 16)};
            for (int shift = 0; shift < 8; shift += 2) {
                const int8x16_t cnt = vdupq_n_s8((int8_t)-shift);
                for (int half = 0; half < 2; half++, is++, y += 16) {
                    const float32x4_t dl = vdupq_n_f32(d * (float)(sc[is] & 0xF));
                    const float32x4_t ml = vdupq_n_f32(dmin * (float)(sc[is] >> 4));
                    st16_u8_dm(y, vandq_u8(vshlq_u8(qs[half], cnt), m3), dl, ml);
                }
            }
        }
    }
}

static void n_q3_k(const uint8_t *x, float *y, size_t nb) {
    const uint8x16_t m3 = vdupq_n_u8(3), four = vdupq_n_u8(4);
    for (size_t i = 0; i < nb; i++, x += 110) {
        const uint8_t *q = x + 32;
        const float d = half_at(x + 108);
        const uint8x16_t hm[2] = {vld1q_u8(x), vld1q_u8(x + 16)};
        int8_t sc[16];
        wm__q3k_scales(x + 96, sc);
        int is = 0, bitn = 0;
        for (int n = 0; n < 2; n++, q += 32) {
            const uint8x16_t qs[2] = {vld1q_u8(q), vld1q_u8(q + 16)};
            for (int shift = 0; shift < 8; shift += 2, bitn++) {
                const uint8x16_t m = vdupq_n_u8((uint8_t)(1u << bitn));
                const int8x16_t cnt = vdupq_n_s8((int8_t)-shift);
                for (int half = 0; half < 2; half++, is++, y += 16) {
                    const float32x4_t dl = vdupq_n_f32(d * (float)sc[is]);
                    uint8x16_t v = vandq_u8(vshlq_u8(qs[half], cnt), m3);
                    uint8x16_t clear = vbicq_u8(four, vtstq_u8(hm[half], m)); /* 4 if bit clear */
                    st16_i8(y, vreinterpretq_s8_u8(vsubq_u8(v, clear)), dl);
                }
            }
        }
    }
}

/* Q4_K and Q5_K: the float scale d*sc and offset dmin*m of sub-block j. */
static inline void k4_scale(const uint8_t *s, int j, float d, float dmin, float32x4_t *dl,
                            float32x4_t *ml) {
    uint8_t sc, m;
    wm__scale_min_k4(j, s, &sc, &m);
    *dl = vdupq_n_f32(d * (float)sc);
    *ml = vdupq_n_f32(dmin * (float)m);
}

static void n_q4_k(const uint8_t *x, float *y, size_t nb) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (size_t i = 0; i < nb; i++, x += 144) {
        const float d = half_at(x), dmin = half_at(x + 2);
        const uint8_t *s = x + 4, *q = x + 16;
        for (int j = 0; j < 8; j += 2, q += 32, y += 64) {
            float32x4_t d1, m1, d2, m2;
            k4_scale(s, j, d, dmin, &d1, &m1);
            k4_scale(s, j + 1, d, dmin, &d2, &m2);
            const uint8x16_t qa = vld1q_u8(q), qb = vld1q_u8(q + 16);
            st16_u8_dm(y, vandq_u8(qa, m4), d1, m1);
            st16_u8_dm(y + 16, vandq_u8(qb, m4), d1, m1);
            st16_u8_dm(y + 32, vshrq_n_u8(qa, 4), d2, m2);
            st16_u8_dm(y + 48, vshrq_n_u8(qb, 4), d2, m2);
        }
    }
}

static void n_q5_k(const uint8_t *x, float *y, size_t nb) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), sixteen = vdupq_n_u8(16);
    for (size_t i = 0; i < nb; i++, x += 176) {
        const float d = half_at(x), dmin = half_at(x + 2);
        const uint8_t *s = x + 4, *ql = x + 48;
        const uint8x16_t ha = vld1q_u8(x + 16), hb = vld1q_u8(x + 32);
        int bitn = 0;
        for (int j = 0; j < 8; j += 2, ql += 32, y += 64, bitn += 2) {
            float32x4_t d1, m1, d2, m2;
            k4_scale(s, j, d, dmin, &d1, &m1);
            k4_scale(s, j + 1, d, dmin, &d2, &m2);
            const uint8x16_t u1 = vdupq_n_u8((uint8_t)(1u << bitn)),
                             u2 = vdupq_n_u8((uint8_t)(2u << bitn));
            const uint8x16_t qa = vld1q_u8(ql), qb = vld1q_u8(ql + 16);
            st16_u8_dm(y, vaddq_u8(vandq_u8(qa, m4), vandq_u8(vtstq_u8(ha, u1), sixteen)), d1, m1);
            st16_u8_dm(y + 16, vaddq_u8(vandq_u8(qb, m4), vandq_u8(vtstq_u8(hb, u1), sixteen)), d1,
                       m1);
            st16_u8_dm(y + 32, vaddq_u8(vshrq_n_u8(qa, 4), vandq_u8(vtstq_u8(ha, u2), sixteen)), d2,
                       m2);
            st16_u8_dm(y + 48, vaddq_u8(vshrq_n_u8(qb, 4), vandq_u8(vtstq_u8(hb, u2), sixteen)), d2,
                       m2);
        }
    }
}

/* Q6_K: 16 codes (0..63) minus 32, times (d*sc) (the portable kernel's grouping). */
static inline void q6_store16(float *y, uint8x16_t codes, float d, int8_t sc) {
    st16_i8(y, vsubq_s8(vreinterpretq_s8_u8(codes), vdupq_n_s8(32)), vdupq_n_f32(d * (float)sc));
}

static void n_q6_k(const uint8_t *x, float *y, size_t nb) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(3);
    for (size_t i = 0; i < nb; i++, x += 210) {
        const float d = half_at(x + 208);
        const uint8_t *ql = x, *qh = x + 128;
        const int8_t *sc = (const int8_t *)(x + 192);
        for (int n = 0; n < 2; n++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int h = 0; h < 2; h++) { /* l in 16h .. 16h+15 */
                uint8x16_t l0 = vld1q_u8(ql + 16 * h), l1 = vld1q_u8(ql + 32 + 16 * h);
                uint8x16_t hh = vld1q_u8(qh + 16 * h);
                uint8x16_t q1 = vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(hh, m3), 4));
                uint8x16_t q2 =
                    vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hh, 2), m3), 4));
                uint8x16_t q3 =
                    vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hh, 4), m3), 4));
                uint8x16_t q4 = vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(hh, 6), 4));
                q6_store16(y + 16 * h, q1, d, sc[h]);
                q6_store16(y + 32 + 16 * h, q2, d, sc[h + 2]);
                q6_store16(y + 64 + 16 * h, q3, d, sc[h + 4]);
                q6_store16(y + 96 + 16 * h, q4, d, sc[h + 6]);
            }
        }
    }
}

/* ---- the kernel table ---- */

wm__to_f32_fn wm__dequant_neon(wm_type type) {
    switch (type) {
    case WM_TYPE_F16: return n_f16;
    case WM_TYPE_BF16: return n_bf16;
    case WM_TYPE_Q4_0: return n_q4_0;
    case WM_TYPE_Q4_1: return n_q4_1;
    case WM_TYPE_Q5_0: return n_q5_0;
    case WM_TYPE_Q5_1: return n_q5_1;
    case WM_TYPE_Q8_0: return n_q8_0;
    case WM_TYPE_MXFP4: return n_mxfp4;
    case WM_TYPE_IQ4_NL: return n_iq4_nl;
    case WM_TYPE_IQ4_XS: return n_iq4_xs;
    case WM_TYPE_Q2_K: return n_q2_k;
    case WM_TYPE_Q3_K: return n_q3_k;
    case WM_TYPE_Q4_K: return n_q4_k;
    case WM_TYPE_Q5_K: return n_q5_k;
    case WM_TYPE_Q6_K: return n_q6_k;
    default: return NULL;
    }
}

#else /* not AArch64 with GCC or Clang */

int wm__neon_usable(void) { return 0; }
wm__to_f32_fn wm__dequant_neon(wm_type type) {
    (void)type;
    return NULL;
}
void wm__f32_to_f16_neon(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = wm__f32_to_f16(src[i]);
}
void wm__f32_to_bf16_neon(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = wm__f32_to_bf16(src[i]);
}

#endif
