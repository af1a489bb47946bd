/*
 * convert.h: what the conversion engine's files share (src/convert/).
 *
 * Sections: scalar float helpers (half, bfloat16, with ggml's exact rounding rules); row kernels
 * (every kernel turns `nb` whole blocks of one type into floats); the kernel tables (portable,
 * x86 AVX2/F16C, AArch64 NEON); the IQ codebook grids; the test hooks that force the portable path
 * and streaming.
 *
 * Every kernel reproduces ggml's to_float bit for bit: the same operations on the same values in
 * the same order (a product and a sum stay two roundings; nothing is fused or reassociated).
 */
#ifndef WM_CONVERT_H
#define WM_CONVERT_H

#include "../internal.h"

#include <string.h>

/* clang contracts a*b+c into an FMA inside functions built for an FMA target unless told not
 * to; ggml's reference rounds the product and the sum separately. GCC in ISO C mode does not
 * contract. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- scalar float helpers ---- */

static inline float wm__f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint32_t wm__f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline uint16_t wm__rd16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2); /* the library targets little-endian hosts, as GGUF data is */
    return v;
}
static inline uint32_t wm__rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* IEEE half to float, exact. A NaN keeps its sign and payload and comes back quiet, as F16C's
 * vcvtph2ps and ggml's software conversion both do. */
static inline float wm__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu, bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (man << 13) | (man ? 0x00400000u : 0);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {
        uint32_t e = 113; /* a subnormal: shift the leading one up to the implicit bit */
        while (!(man & 0x400u)) {
            man <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((man & 0x3FFu) << 13);
    }
    return wm__f32_from_bits(bits);
}

/* The IEEE half at p (little-endian), as a float: the blocks' scales. */
static inline float half_at(const uint8_t *p) { return wm__f16_to_f32(wm__rd16(p)); }

/* Float to IEEE half, round to nearest even (overflow to infinity, subnormals kept). Every NaN
 * becomes 0x7E00 with its sign: that is what ggml's conversion writes (F16C would keep part of
 * the payload instead). */
static inline uint16_t wm__f32_to_f16(float f) {
    uint32_t x = wm__f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);
    if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* 65520 and up round to inf */
    if (ax < 0x38800000u) {                                   /* below 2^-14: half subnormal */
        if (ax < 0x33000000u) return sign;                    /* below 2^-25: zero */
        uint32_t e = ax >> 23, m = (ax & 0x7FFFFFu) | 0x800000u;
        uint32_t shift = 126 - e; /* value / 2^-24 = m * 2^(e - 126) */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ax - 0x38000000u; /* rebias the exponent from 127 to 15 */
    r += 0xFFFu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

static inline float wm__bf16_to_f32(uint16_t h) { return wm__f32_from_bits((uint32_t)h << 16); }

/* Float to bfloat16 as ggml does it: round to nearest even; a NaN is truncated and made quiet. */
static inline uint16_t wm__f32_to_bf16(float f) {
    uint32_t u = wm__f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 64u);
    return (uint16_t)((u + (0x7FFFu + ((u >> 16) & 1u))) >> 16);
}

/* ---- k-quant scale decoders ---- */

/* The 6-bit scale and min of sub-block j packed in 12 bytes (Q4_K, Q5_K). */
static inline void wm__scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* The 16 six-bit scales of Q3_K (12 bytes: low nibbles, then 2-bit high parts), unbiased. */
static inline void wm__q3k_scales(const uint8_t *s12, int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? s12[j] & 0xF : s12[j - 8] >> 4;
        int hi = (s12[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* ---- row kernels ---- */

/* Turns nb blocks at src into nb * block_elems floats at dst. */
typedef void (*wm__to_f32_fn)(const uint8_t *src, float *dst, size_t nb);
/* Turns n floats into n halves or bfloat16s. */
typedef void (*wm__from_f32_fn)(const float *src, uint16_t *dst, size_t n);

/* The portable kernel for a type, or NULL when the type has no conversion to float
 * (dequant.c). */
wm__to_f32_fn wm__dequant_scalar(wm_type type);
/* The AVX2/F16C kernel for a type, or NULL when there is none (x86.c; NULL off x86). Callers
 * check wm__x86_usable() first. */
wm__to_f32_fn wm__dequant_x86(wm_type type);
void wm__f32_to_f16_x86(const float *src, uint16_t *dst, size_t n);
void wm__f32_to_bf16_x86(const float *src, uint16_t *dst, size_t n);
/* Copies n floats to a 32-byte aligned dst with non-temporal stores (no read of the destination
 * lines, no cache pollution), then fences them; for outputs far larger than the caches. */
void wm__stream_floats_x86(float *dst, const float *src, size_t n);
void wm__stream_fence_x86(void);
/* Non-zero on CPUs where streaming large outputs measured faster than plain stores (Intel). */
int wm__x86_stream_preferred(void);
/* Non-zero when this build has the x86 kernels and the CPU runs AVX2 and F16C. */
int wm__x86_usable(void);
/* The AArch64 Advanced SIMD kernel for a type, or NULL when there is none (neon.c; NULL off
 * AArch64). Callers check wm__neon_usable() first: non-zero when this build has the NEON kernels
 * and the CPU reports Advanced SIMD. */
wm__to_f32_fn wm__dequant_neon(wm_type type);
void wm__f32_to_f16_neon(const float *src, uint16_t *dst, size_t n);
void wm__f32_to_bf16_neon(const float *src, uint16_t *dst, size_t n);
int wm__neon_usable(void);

/* ggml's E2M1 code table doubled (element value x2, the block scale halved to match), and the
 * 16 levels of the IQ4 non-linear codebook. */
extern const int8_t wm__kvalues_mxfp4[16];
extern const int8_t wm__kvalues_iq4nl[16];
/* UE4M3 scale byte of NVFP4 to float (already halved, as ggml's kernels expect). */
float wm__ue4m3_half(uint8_t x);
/* E8M0 scale byte to float, halved (MXFP4). */
float wm__e8m0_half(uint8_t x);

/* ---- IQ codebooks ---- */

/* The codebook grids of the IQ1/IQ2/IQ3 types (iq_grids.c, generated by tools/gen/iq_grids.c
 * from llama.cpp's ggml library; data under ggml's MIT license, THIRD_PARTY.md). Each entry packs
 * 8 (iq3: 4) byte values, the first in the lowest byte. */
extern const uint64_t wm__iq2xxs_grid[256]; /* bytes 0x08/0x19/0x2b */
extern const uint64_t wm__iq2xs_grid[512];
extern const uint64_t wm__iq2s_grid[1024];
extern const uint32_t wm__iq3xxs_grid[256];
extern const uint32_t wm__iq3s_grid[512];
extern const uint64_t wm__iq1s_grid[2048]; /* signed bytes -1/0/1; IQ1_M uses it too */

/* Sign byte k of the IQ2/IQ3 types (bit j set: element j is negated): 7 stored bits, the eighth
 * makes the count of set bits even. */
static inline uint8_t wm__iq_ksign(unsigned k) {
    return (uint8_t)(k | ((unsigned)__builtin_popcount(k) & 1u) << 7);
}

/* IQ1_M's block header: the four 16-bit scale words at byte 48 (3-bit scales, two per word for
 * each 32-element half) and the half d their top nibbles spell, as a float. */
static inline float wm__iq1m_scales(const uint8_t *x, uint16_t sc[4]) {
    for (int k = 0; k < 4; k++)
        sc[k] = wm__rd16(x + 48 + 2 * k);
    return wm__f16_to_f32((uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                     ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)));
}

/* ---- test hook ---- */

/* Non-zero: wm_convert uses only the portable kernels (tests compare both paths). Returns the
 * previous setting. Not thread-safe against concurrent conversions; tests only. */
int wm__convert_force_scalar(int on);
/* Non-zero: large outputs are streamed on any x86 CPU with AVX2 (tests cover that path on
 * every machine). Returns the previous setting. Tests only. */
int wm__convert_force_stream(int on);

#endif /* WM_CONVERT_H */
