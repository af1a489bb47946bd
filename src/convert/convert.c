/*
 * convert.c: the public conversion entry points, wm_convert_supported and wm_convert.
 *
 * Sections: kernel choice (x86 or NEON when usable and not forced off, else portable; large f32
 * outputs streamed past the caches where that is faster); narrowing from float to half and
 * bfloat16; the F64 and wide-integer paths; wm_convert itself.
 *
 * Every conversion goes through float: a source type is first turned into floats by its row
 * kernel (bit-identical to ggml's to_float), then narrowed with ggml's rounding. Sources that
 * would round twice that way (F64, 32- and 64-bit integers) take a double path with round-to-odd
 * into float, so that the final narrowing is a single correct rounding. Nothing here allocates: a
 * staging buffer of 16 KiB lives on the stack.
 */
#include "convert.h"

#include <math.h>

/* Floats staged per step of a two-stage conversion: a multiple of every block size. */
#define STAGE_ELEMS 4096

static int force_scalar, force_stream;

int wm__convert_force_scalar(int on) {
    int prev = force_scalar;
    force_scalar = on;
    return prev;
}

int wm__convert_force_stream(int on) {
    int prev = force_stream;
    force_stream = on;
    return prev;
}

/* ---- kernel choice ---- */

/* The SIMD kernel of this CPU (x86 AVX2/F16C or AArch64 NEON) when it has one for t, else the
 * portable one. */
static wm__to_f32_fn to_f32_kernel(wm_type t) {
    wm__to_f32_fn f = NULL;
    if (!force_scalar && wm__x86_usable()) f = wm__dequant_x86(t);
    if (!force_scalar && !f && wm__neon_usable()) f = wm__dequant_neon(t);
    return f ? f : wm__dequant_scalar(t);
}

/* Output at least this large is written with non-temporal stores where that measured faster
 * (wm__x86_stream_preferred): it is not read again soon (a loaded tensor), and streaming saves
 * the read of every destination line. The threshold stays well above L2 sizes. */
#define STREAM_MIN_BYTES ((size_t)4 << 20)

static bool stream_output(const void *dst, size_t bytes) {
    return bytes >= STREAM_MIN_BYTES && ((uintptr_t)dst & 31) == 0 && !force_scalar &&
           wm__x86_usable() && (force_stream || wm__x86_stream_preferred());
}

/* ---- narrowing from float ---- */

static void f32_to_f16_scalar(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = wm__f32_to_f16(src[i]);
}

static void f32_to_bf16_scalar(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = wm__f32_to_bf16(src[i]);
}

static void narrow(wm_type to, const float *src, void *dst, size_t n) {
    uint16_t *d = dst; /* 2-byte aligned: wm_convert checks */
    wm__from_f32_fn f16 = f32_to_f16_scalar, bf16 = f32_to_bf16_scalar;
    if (!force_scalar && wm__x86_usable()) {
        f16 = wm__f32_to_f16_x86;
        bf16 = wm__f32_to_bf16_x86;
    } else if (!force_scalar && wm__neon_usable()) {
        f16 = wm__f32_to_f16_neon;
        bf16 = wm__f32_to_bf16_neon;
    }
    (to == WM_TYPE_F16 ? f16 : bf16)(src, d, n);
}

/* ---- the double path (F64 and wide integer sources) ---- */

/* Integer types too wide for float's 24-bit significand. */
static bool is_wide_int(wm_type t) {
    return t == WM_TYPE_I32 || t == WM_TYPE_U32 || t == WM_TYPE_I64 || t == WM_TYPE_U64;
}

/* Element i of an F64 or wide integer array as a double (64-bit integers round once, to
 * nearest; 32-bit ones are exact). */
static double load_double(wm_type t, const uint8_t *p, size_t i) {
    union {
        int32_t i32;
        uint32_t u32;
        int64_t i64;
        uint64_t u64;
        double f64;
    } v;
    size_t w = t == WM_TYPE_I32 || t == WM_TYPE_U32 ? 4 : 8;
    memcpy(&v, p + w * i, w);
    switch (t) {
    case WM_TYPE_I32: return v.i32;
    case WM_TYPE_U32: return v.u32;
    case WM_TYPE_F64: return v.f64;
    case WM_TYPE_I64: return (double)v.i64;
    default: return (double)v.u64;
    }
}

/* Double to float rounding to odd: an inexact result gets its last bit set. A later rounding to
 * half or bfloat16 (13 or 16 bits shorter) then equals one direct rounding of the double. */
static float round_to_odd(double v) {
    float f = (float)v;
    if (isnan(v) || isinf(f) || (double)f == v) return f;
    if (fabs((double)f) > fabs(v)) f = nextafterf(f, 0.0f);
    return wm__f32_from_bits(wm__f32_bits(f) | 1u);
}

/* ---- public entry points ---- */

static bool is_target(wm_type t) {
    return t == WM_TYPE_F32 || t == WM_TYPE_F16 || t == WM_TYPE_BF16 || t == WM_TYPE_F64;
}

int wm_convert_supported(wm_type from, wm_type to) {
    if (!is_target(to)) return 0;
    return from == to || wm__dequant_scalar(from) != NULL;
}

wm_status wm_convert(wm_type from, wm_type to, const void *src, void *dst, uint64_t n_elements) {
    if (!wm_convert_supported(from, to)) return WM_EINVAL;
    uint64_t be = wm_type_block_elems(from), bb = wm_type_block_bytes(from);
    if (be == 0 || n_elements % be != 0) return WM_EINVAL;
    if (n_elements == 0) return WM_OK;
    if (!src || !dst) return WM_EINVAL;
    size_t out_size = to == WM_TYPE_F64 ? 8 : to == WM_TYPE_F32 ? 4 : 2;
    if ((uintptr_t)dst % out_size != 0) return WM_EINVAL; /* kernels store whole elements */
    uint64_t nb64 = n_elements / be;
    if (n_elements > SIZE_MAX / 8 || nb64 > SIZE_MAX / bb) return WM_EINVAL;
    size_t n = (size_t)n_elements, nb = (size_t)nb64;
    const uint8_t *s = src;

    if (from == to) {
        memcpy(dst, src, nb * (size_t)bb);
        return WM_OK;
    }
    if (to == WM_TYPE_F32) {
        wm__to_f32_fn k = to_f32_kernel(from);
        if (!stream_output(dst, n * 4)) {
            k(s, dst, nb);
            return WM_OK;
        }
        /* Large output: dequantize a stage at a time in L1, then stream it out. */
        float stage[STAGE_ELEMS] __attribute__((aligned(32)));
        float *d = dst;
        size_t step = STAGE_ELEMS / (size_t)be;
        for (size_t b = 0; b < nb; b += step) {
            size_t cnt = nb - b < step ? nb - b : step;
            k(s + b * (size_t)bb, stage, cnt);
            wm__stream_floats_x86(d + b * (size_t)be, stage, cnt * (size_t)be);
        }
        wm__stream_fence_x86();
        return WM_OK;
    }
    if (to == WM_TYPE_F64) {
        double *d = dst;
        if (is_wide_int(from)) {
            for (size_t i = 0; i < n; i++)
                d[i] = load_double(from, s, i);
            return WM_OK;
        }
        float stage[STAGE_ELEMS];
        wm__to_f32_fn k = to_f32_kernel(from);
        size_t step = STAGE_ELEMS / (size_t)be; /* blocks per stage */
        for (size_t b = 0; b < nb; b += step) {
            size_t cnt = nb - b < step ? nb - b : step;
            k(s + b * (size_t)bb, stage, cnt);
            for (size_t i = 0; i < cnt * (size_t)be; i++)
                d[b * (size_t)be + i] = (double)stage[i];
        }
        return WM_OK;
    }
    /* to F16 or BF16 */
    uint16_t *d = dst;
    if (from == WM_TYPE_F32) {
        narrow(to, src, d, n);
        return WM_OK;
    }
    float stage[STAGE_ELEMS];
    if (from == WM_TYPE_F64 || is_wide_int(from)) {
        for (size_t i = 0; i < n; i += STAGE_ELEMS) {
            size_t cnt = n - i < STAGE_ELEMS ? n - i : STAGE_ELEMS;
            for (size_t j = 0; j < cnt; j++)
                stage[j] = round_to_odd(load_double(from, s, i + j));
            narrow(to, stage, d + i, cnt);
        }
        return WM_OK;
    }
    wm__to_f32_fn k = to_f32_kernel(from);
    size_t step = STAGE_ELEMS / (size_t)be;
    for (size_t b = 0; b < nb; b += step) {
        size_t cnt = nb - b < step ? nb - b : step;
        k(s + b * (size_t)bb, stage, cnt);
        narrow(to, stage, d + b * (size_t)be, cnt * (size_t)be);
    }
    return WM_OK;
}
