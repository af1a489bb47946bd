/*
 * test_simd.c: the SIMD kernels this build has (x86 AVX2/F16C, or AArch64 NEON under qemu or on
 * an ARM machine) give the portable kernels' bytes, for every type they cover, over random blocks
 * and edge blocks: every half value (NaN, infinities, subnormals, zeros of both signs) in every
 * half scale field, every E8M0 scale byte, every 16-bit pattern widened, and NaN, infinity,
 * subnormal and rounding-tie floats narrowed. The portable kernels are ggml's reference bit for
 * bit (test_convert.c checks them against the peer or its committed checksums), so equality here
 * is equality with ggml on this CPU.
 *
 * Sections: the kernel set of this build; comparing both paths; the cases.
 */
#include "wmtest.h"

#include "blocks.h"
#include "convert/convert.h"

#include <stdbool.h>
#include <string.h>

/* ---- the kernel set of this build ---- */

/* The types the NEON table must cover (docs/PORTING.md lists them; the rest stay portable). */
static const wm_type neon_types[] = {WM_TYPE_F16,    WM_TYPE_BF16,   WM_TYPE_Q8_0, WM_TYPE_Q4_0,
                                     WM_TYPE_Q4_1,   WM_TYPE_Q5_0,   WM_TYPE_Q5_1, WM_TYPE_Q2_K,
                                     WM_TYPE_Q3_K,   WM_TYPE_Q4_K,   WM_TYPE_Q5_K, WM_TYPE_Q6_K,
                                     WM_TYPE_IQ4_NL, WM_TYPE_IQ4_XS, WM_TYPE_MXFP4};
#define N_NEON (sizeof neon_types / sizeof neon_types[0])

/* The SIMD kernel of this build and CPU for t, or NULL. */
static wm__to_f32_fn simd_kernel(wm_type t) {
    if (wm__x86_usable()) return wm__dequant_x86(t);
    if (wm__neon_usable()) return wm__dequant_neon(t);
    return NULL;
}

#define NEED_SIMD()                                                                                \
    do {                                                                                           \
        if (!wm__x86_usable() && !wm__neon_usable())                                               \
            WM_SKIP("no SIMD kernels on this CPU or in this build");                               \
    } while (0)

/* ---- comparing both paths ---- */

/* Runs wm_convert on the portable path (scalar=1) or the default one. */
static wm_status convert_path(int scalar, wm_type from, wm_type to, const void *src, void *dst,
                              uint64_t n) {
    int prev = wm__convert_force_scalar(scalar);
    wm_status st = wm_convert(from, to, src, dst, n);
    wm__convert_force_scalar(prev);
    return st;
}

/* nb blocks of t at src converted to `to` on both paths give the same bytes; `what` names the
 * input in the message. Converted a chunk of blocks at a time. */
static void same_both_paths(wm_type t, wm_type to, const uint8_t *src, size_t nb,
                            const char *what) {
    enum { CAP = 1 << 20 }; /* floats per chunk */
    static float a[CAP], b[CAP];
    size_t be = wm_type_block_elems(t), bb = wm_type_block_bytes(t),
           out = to == WM_TYPE_F32 ? 4 : 2;
    size_t step = CAP / be;
    for (size_t b0 = 0; b0 < nb; b0 += step) {
        size_t cnt = nb - b0 < step ? nb - b0 : step, n = cnt * be;
        memset(a, 0x5A, n * out);
        memset(b, 0xA5, n * out);
        CHECK_STATUS(convert_path(0, t, to, src + b0 * bb, a, n), WM_OK);
        CHECK_STATUS(convert_path(1, t, to, src + b0 * bb, b, n), WM_OK);
        const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
        size_t at = 0;
        while (at < n * out && x[at] == y[at])
            at++;
        CHECK_MSG(at == n * out, "%s -> %s, %s: element %zu (block %zu): simd %08x, portable %08x",
                  wm_type_name(t), wm_type_name(to), what, b0 * be + at / out, b0 + at / out / be,
                  out == 4 ? (unsigned)wm__f32_bits(a[at / 4]) : ((const uint16_t *)a)[at / 2],
                  out == 4 ? (unsigned)wm__f32_bits(b[at / 4]) : ((const uint16_t *)b)[at / 2]);
    }
}

/* ---- the cases ---- */

/* On AArch64 the NEON table covers exactly the listed types and the CPU (or qemu) reports
 * Advanced SIMD, so the other cases compare NEON against the portable path. */
WM_TEST(neon_table) {
#if defined(__aarch64__)
    CHECK_MSG(wm__neon_usable(), "AT_HWCAP has no ASIMD bit");
    int covered = 0;
    for (int t = 0; t < 64; t++) {
        bool listed = false;
        for (size_t k = 0; k < N_NEON; k++)
            listed |= neon_types[k] == (wm_type)t;
        CHECK_MSG((wm__dequant_neon((wm_type)t) != NULL) == listed, "type %d (%s): %s", t,
                  wm_type_name((wm_type)t) ? wm_type_name((wm_type)t) : "?",
                  listed ? "listed but no NEON kernel" : "a NEON kernel not listed");
        covered += listed;
    }
    CHECK_EQ(covered, (int)N_NEON);
#else
    CHECK(!wm__neon_usable() && wm__dequant_neon(WM_TYPE_Q4_0) == NULL);
    WM_SKIP("not AArch64: the NEON table is empty here");
#endif
}

/* Random blocks (finite scales, every code pattern) of every type with a SIMD kernel, to f32,
 * f16 and bf16. */
WM_TEST(random_blocks) {
    NEED_SIMD();
    static uint8_t blocks[256 * 292];
    int types = 0;
    for (int t = 0; t < 64; t++) {
        if (!simd_kernel((wm_type)t)) continue;
        size_t nb = 4096 / wm_type_block_elems((wm_type)t);
        for (int round = 0; round < 4; round++) {
            make_blocks((wm_type)t, nb, 313u * (unsigned)t + (unsigned)round, blocks);
            same_both_paths((wm_type)t, WM_TYPE_F32, blocks, nb, "random blocks");
            if (t != WM_TYPE_F16) same_both_paths((wm_type)t, WM_TYPE_F16, blocks, nb, "random");
            if (t != WM_TYPE_BF16) same_both_paths((wm_type)t, WM_TYPE_BF16, blocks, nb, "random");
        }
        types++;
    }
    CHECK(types >= (int)N_NEON);
}

/* Every 16-bit pattern in each half scale field of a block (the other fields random, so NaN and
 * infinite scales meet every code): 65536 blocks per field. MXFP4: every E8M0 byte. */
WM_TEST(every_scale_value) {
    NEED_SIMD();
    static uint8_t blocks[65536 * 210];
    int fields = 0;
    for (int t = 0; t < 64; t++) {
        if (!simd_kernel((wm_type)t)) continue;
        size_t bb = wm_type_block_bytes((wm_type)t);
        if (t == WM_TYPE_MXFP4) {
            make_blocks((wm_type)t, 256, 17, blocks);
            for (int v = 0; v < 256; v++)
                blocks[(size_t)v * bb] = (uint8_t)v;
            same_both_paths((wm_type)t, WM_TYPE_F32, blocks, 256, "every E8M0 scale");
            fields++;
            continue;
        }
        for (const int *f = half_fields((wm_type)t); *f >= 0; f++) {
            make_blocks((wm_type)t, 65536, 1000u + (unsigned)t, blocks);
            for (size_t v = 0; v < 65536; v++) /* NaNs of both signs included, every type */
                put_half(blocks + v * bb + *f, (uint16_t)v);
            char what[64];
            snprintf(what, sizeof what, "every half at byte %d", *f);
            same_both_paths((wm_type)t, WM_TYPE_F32, blocks, 65536, what);
            fields++;
        }
    }
    CHECK(fields >= 16);
}

/* Both half scales of a block special at once (NaN, infinities, zeros, subnormals, the largest
 * half, in every pairing), the other bytes random. */
WM_TEST(special_scale_pairs) {
    NEED_SIMD();
    static const uint16_t sp[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF,
                                  0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7C01,
                                  0x7E00, 0xFE00, 0x7FFF, 0xFFFF, 0x3C00, 0xBC00};
    enum { NS = sizeof sp / sizeof sp[0] };
    static uint8_t blocks[NS * NS * 292];
    for (int t = 0; t < 64; t++) {
        const int *f = half_fields((wm_type)t);
        if (!simd_kernel((wm_type)t) || f[0] < 0 || f[1] < 0) continue;
        size_t bb = wm_type_block_bytes((wm_type)t);
        make_blocks((wm_type)t, NS * NS, 99u + (unsigned)t, blocks);
        for (size_t i = 0; i < NS; i++)
            for (size_t j = 0; j < NS; j++) {
                put_half(blocks + (i * NS + j) * bb + f[0], sp[i]);
                put_half(blocks + (i * NS + j) * bb + f[1], sp[j]);
            }
        same_both_paths((wm_type)t, WM_TYPE_F32, blocks, NS * NS, "special scale pairs");
    }
}

/* Every 16-bit pattern widened as half and as bfloat16, at every alignment and tail length. */
WM_TEST(every_16bit_pattern) {
    NEED_SIMD();
    static uint16_t h[65536 + 16];
    for (int i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    same_both_paths(WM_TYPE_F16, WM_TYPE_F32, (const uint8_t *)h, 65536, "every half");
    same_both_paths(WM_TYPE_BF16, WM_TYPE_F32, (const uint8_t *)h, 65536, "every bfloat16");
    for (size_t n = 1; n < 40; n++)
        for (size_t off = 0; off < 3; off++) {
            same_both_paths(WM_TYPE_F16, WM_TYPE_F32, (const uint8_t *)(h + 0x7BF0 + off), n,
                            "half tail");
            same_both_paths(WM_TYPE_BF16, WM_TYPE_F32, (const uint8_t *)(h + 0x7F70 + off), n,
                            "bfloat16 tail");
        }
}

/* Floats narrowed to half and bfloat16: NaNs of every kind (quiet, signalling, payloads, both
 * signs), infinities, float subnormals, half subnormals, the overflow edge, rounding ties, and
 * random patterns, in groups that mix them with ordinary values. */
WM_TEST(narrowing_edges) {
    NEED_SIMD();
    enum { M = 1 << 18 };
    static float xs[M];
    static const uint32_t edge[] = {
        0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu,
        0x7FBFFFFFu, 0xFFC00001u, 0x477FF000u, 0x477FEFFFu, 0x477FE000u, 0x33000000u, 0x33000001u,
        0x387FC000u, 0x38800000u, 0x387FFFFFu, 0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu, 0x3F808000u,
        0x3F818000u, 0x3F800FFFu, 0x3F801000u, 0x3F803000u, 0xC77FF000u, 0x33800000u, 0x2F800000u};
    enum { NE = sizeof edge / sizeof edge[0] };
    uint64_t s = 2026;
    for (int i = 0; i < M; i++) {
        uint32_t u = (uint32_t)rng_next(&s);
        if (i % 4 == 1) u = (u & 0x80000000u) | (0x33000000u + (u & 0x07FFFFFFu) % 0x14800000u);
        if (i % 4 == 2) u = edge[(u >> 8) % NE];
        if (i < NE) u = edge[i];
        memcpy(&xs[i], &u, 4);
    }
    same_both_paths(WM_TYPE_F32, WM_TYPE_F16, (const uint8_t *)xs, M, "edge floats");
    same_both_paths(WM_TYPE_F32, WM_TYPE_BF16, (const uint8_t *)xs, M, "edge floats");
    for (size_t n = 1; n < 24; n++) {
        same_both_paths(WM_TYPE_F32, WM_TYPE_F16, (const uint8_t *)(xs + 1), n, "float tail");
        same_both_paths(WM_TYPE_F32, WM_TYPE_BF16, (const uint8_t *)(xs + 3), n, "float tail");
    }
}
