/*
 * dequant.c: the portable kernels that turn every supported element type into floats.
 *
 * Sections: codebooks and scale decoders; simple block types (Q4_0 .. Q8_0, Q1_0, Q2_0, MXFP4,
 * NVFP4); k-quants (Q2_K .. Q8_K); ternary types (TQ1_0, TQ2_0); IQ4 types; IQ codebook types
 * (IQ1_S .. IQ3_S, with the grids of iq_grids.c); plain element types (F16, BF16, F64, the
 * safetensors float8 types, integers, bool); the kernel table.
 *
 * Block layouts and formulas are ggml's (ggml-common.h, ggml-quants.c). Each element is computed
 * with the same operations in the same order as ggml's reference, so the floats are identical:
 * an integer code becomes a float before it is multiplied, a scale and an offset are two
 * roundings (x*d, then + m), and products of three factors group as ggml groups them.
 */
#include "convert.h"

/* ---- codebooks and scale decoders ---- */

/* E2M1 (OCP FP4) code to twice its value: codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6 and
 * 8..15 their negatives. ggml stores them doubled and halves the block scale instead. */
const int8_t wm__kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* The 16 levels of the IQ4_NL / IQ4_XS non-linear codebook. */
const int8_t wm__kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

/* E8M0 is a bare exponent 2^(x-127); MXFP4 wants half of it. 0 and 1 land in the float
 * subnormals; 255 is not treated as NaN (ggml does not). */
float wm__e8m0_half(uint8_t x) {
    uint32_t bits = x < 2 ? 0x00200000u << x : (uint32_t)(x - 1) << 23;
    return wm__f32_from_bits(bits);
}

/* UE4M3: 4 exponent bits (bias 7), 3 mantissa bits, the top bit ignored; 0 and 0x7F read as
 * zero. Returned halved, like the E2M1 table is doubled. */
float wm__ue4m3_half(uint8_t x) {
    if (x == 0 || x == 0x7F) return 0.0f;
    uint32_t e = (x >> 3) & 0xFu, m = x & 7u;
    if (e == 0) return (float)m * wm__f32_from_bits(0x3A800000u); /* m * 2^-9 * 0.5 */
    return wm__f32_from_bits(((e + 119u) << 23) | (m << 20));     /* (1 + m/8) * 2^(e-7) * 0.5 */
}

/* ---- simple block types ---- */

/* Q4_0, 18 bytes: half d, 16 bytes of nibbles (low nibbles are elements 0..15). x = (q-8)*d. */
static void dq_q4_0(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 18, y += 32) {
        const float d = half_at(x);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((x[2 + j] & 0x0F) - 8) * d;
            y[j + 16] = (float)((x[2 + j] >> 4) - 8) * d;
        }
    }
}

/* Q4_1, 20 bytes: half d, half m, 16 bytes of nibbles. x = q*d + m. */
static void dq_q4_1(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 20, y += 32) {
        const float d = half_at(x), m = half_at(x + 2);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(x[4 + j] & 0x0F) * d + m;
            y[j + 16] = (float)(x[4 + j] >> 4) * d + m;
        }
    }
}

/* Q5_0, 22 bytes: half d, 32 high bits, 16 bytes of nibbles. x = (q-16)*d. */
static void dq_q5_0(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 22, y += 32) {
        const float d = half_at(x);
        const uint32_t qh = wm__rd32(x + 2);
        for (int j = 0; j < 16; j++) {
            int lo = (x[6 + j] & 0x0F) | (int)(((qh >> j) & 1u) << 4);
            int hi = (x[6 + j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            y[j] = (float)(lo - 16) * d;
            y[j + 16] = (float)(hi - 16) * d;
        }
    }
}

/* Q5_1, 24 bytes: half d, half m, 32 high bits, 16 bytes of nibbles. x = q*d + m. */
static void dq_q5_1(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 24, y += 32) {
        const float d = half_at(x), m = half_at(x + 2);
        const uint32_t qh = wm__rd32(x + 4);
        for (int j = 0; j < 16; j++) {
            int lo = (x[8 + j] & 0x0F) | (int)(((qh >> j) & 1u) << 4);
            int hi = (x[8 + j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            y[j] = (float)lo * d + m;
            y[j + 16] = (float)hi * d + m;
        }
    }
}

/* Q8_0, 34 bytes: half d, 32 signed bytes. */
static void dq_q8_0(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 34, y += 32) {
        const float d = half_at(x);
        for (int j = 0; j < 32; j++)
            y[j] = (float)(int8_t)x[2 + j] * d;
    }
}

/* Q1_0, 18 bytes for 128 elements: half d, one sign bit per element (set: +d, clear: -d). */
static void dq_q1_0(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 18, y += 128) {
        const float d = half_at(x), nd = -d;
        for (int j = 0; j < 128; j++)
            y[j] = (x[2 + j / 8] >> (j % 8)) & 1 ? d : nd;
    }
}

/* Q2_0, 18 bytes for 64 elements: half d, 2 bits per element (code-1 in -1..2). */
static void dq_q2_0(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 18, y += 64) {
        const float d = half_at(x);
        for (int j = 0; j < 64; j++)
            y[j] = (float)(((x[2 + j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
    }
}

/* MXFP4, 17 bytes: E8M0 scale, 16 bytes of E2M1 nibbles. */
static void dq_mxfp4(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 17, y += 32) {
        const float d = wm__e8m0_half(x[0]);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)wm__kvalues_mxfp4[x[1 + j] & 0x0F] * d;
            y[j + 16] = (float)wm__kvalues_mxfp4[x[1 + j] >> 4] * d;
        }
    }
}

/* NVFP4, 36 bytes for 64 elements: four UE4M3 scales (one per 16), 32 bytes of E2M1 nibbles;
 * within a sub-block, byte j holds elements j (low) and j+8 (high). */
static void dq_nvfp4(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 36) {
        for (int s = 0; s < 4; s++, y += 16) {
            const float d = wm__ue4m3_half(x[s]);
            const uint8_t *q = x + 4 + 8 * s;
            for (int j = 0; j < 8; j++) {
                y[j] = (float)wm__kvalues_mxfp4[q[j] & 0x0F] * d;
                y[j + 8] = (float)wm__kvalues_mxfp4[q[j] >> 4] * d;
            }
        }
    }
}

/* ---- k-quants (256 elements a block) ---- */

/* Q2_K, 84 bytes: 16 scale/min nibble pairs, 64 bytes of 2-bit codes, half d, half dmin.
 * x = (d*sc)*q - (dmin*m), 16 elements per scale. */
static void dq_q2_k(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 84) {
        const uint8_t *sc = x, *q = x + 16;
        const float d = half_at(x + 80), dmin = half_at(x + 82);
        int is = 0;
        for (int n = 0; n < 2; n++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++, is++) {
                    const float dl = d * (float)(sc[is] & 0xF), ml = dmin * (float)(sc[is] >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
                }
            }
        }
    }
}

/* Q3_K, 110 bytes: 32 bytes of high bits, 64 bytes of 2-bit codes, 12 bytes of scales, half d.
 * x = (d*sc) * (q - (high bit clear ? 4 : 0)). */
static void dq_q3_k(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 110) {
        const uint8_t *hm = x, *q = x + 32;
        const float d = half_at(x + 108);
        int8_t sc[16];
        wm__q3k_scales(x + 96, sc);
        int is = 0;
        uint8_t m = 1;
        for (int n = 0; n < 2; n++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1)) {
                for (int half = 0; half < 2; half++, is++) {
                    const float dl = d * (float)sc[is];
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
                        *y++ = dl * (float)v;
                    }
                }
            }
        }
    }
}

/* Q4_K, 144 bytes: half d, half dmin, 12 bytes of scales/mins, 128 bytes of nibbles; each 64
 * elements take the low nibbles of 32 bytes, then their high nibbles. x = (d*sc)*q - dmin*m. */
static void dq_q4_k(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 144) {
        const float d = half_at(x), dmin = half_at(x + 2);
        const uint8_t *s = x + 4, *q = x + 16;
        for (int j = 0; j < 8; j += 2, q += 32) {
            uint8_t sc, m;
            wm__scale_min_k4(j, s, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            wm__scale_min_k4(j + 1, s, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* Q5_K, 176 bytes: half d, half dmin, 12 bytes of scales/mins, 32 bytes of fifth bits, 128
 * bytes of nibbles. */
static void dq_q5_k(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 176) {
        const float d = half_at(x), dmin = half_at(x + 2);
        const uint8_t *s = x + 4, *qh = x + 16, *ql = x + 48;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < 8; j += 2, ql += 32) {
            uint8_t sc, m;
            wm__scale_min_k4(j, s, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            wm__scale_min_k4(j + 1, s, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

/* Q6_K, 210 bytes: 128 bytes of low nibbles, 64 bytes of 2-bit high parts, 16 signed scales,
 * half d. x = (d*sc) * (q-32). */
static void dq_q6_k(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 210) {
        const float d = half_at(x + 208);
        const uint8_t *ql = x, *qh = x + 128;
        const int8_t *sc = (const int8_t *)(x + 192);
        for (int n = 0; n < 2; n++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

/* Q8_K, 292 bytes: float d, 256 signed bytes, 16 block sums (unused here). */
static void dq_q8_k(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 292, y += 256) {
        const float d = wm__f32_from_bits(wm__rd32(x));
        for (int j = 0; j < 256; j++)
            y[j] = d * (float)(int8_t)x[4 + j];
    }
}

/* ---- ternary types ---- */

/* One base-3 digit out of a byte that holds five (or four) of them scaled to 0..255: multiply
 * by 3^n modulo 256 to bring digit n to the top, then take the top trit. */
static inline int trit(uint8_t byte, uint8_t pow3) {
    uint8_t q = (uint8_t)(byte * pow3);
    return (int)(((uint16_t)q * 3) >> 8);
}

/* TQ1_0, 54 bytes: 48 bytes of five trits each, 4 bytes of four trits each, half d. */
static void dq_tq1_0(const uint8_t *x, float *y, size_t nb) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    for (size_t i = 0; i < nb; i++, x += 54) {
        const float d = half_at(x + 52);
        for (int n = 0; n < 5; n++)
            for (int m = 0; m < 32; m++)
                *y++ = (float)(trit(x[m], pow3[n]) - 1) * d;
        for (int n = 0; n < 5; n++)
            for (int m = 0; m < 16; m++)
                *y++ = (float)(trit(x[32 + m], pow3[n]) - 1) * d;
        for (int n = 0; n < 4; n++)
            for (int j = 0; j < 4; j++)
                *y++ = (float)(trit(x[48 + j], pow3[n]) - 1) * d;
    }
}

/* TQ2_0, 66 bytes: 64 bytes of 2-bit codes (code-1 in -1..1), half d. */
static void dq_tq2_0(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 66) {
        const float d = half_at(x + 64);
        for (int j = 0; j < 64; j += 32)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++)
                    *y++ = (float)(((x[j + m] >> (2 * l)) & 3) - 1) * d;
    }
}

/* ---- IQ4 types ---- */

/* IQ4_NL, 18 bytes for 32 elements: half d, 16 bytes of codebook nibbles. */
static void dq_iq4_nl(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 18, y += 32) {
        const float d = half_at(x);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)wm__kvalues_iq4nl[x[2 + j] & 0xF];
            y[j + 16] = d * (float)wm__kvalues_iq4nl[x[2 + j] >> 4];
        }
    }
}

/* IQ4_XS, 136 bytes: half d, 16 bits of scale high parts, 4 bytes of scale low nibbles, 128
 * bytes of codebook nibbles; 6-bit scale per 32 elements, biased by 32. */
static void dq_iq4_xs(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 136) {
        const float d = half_at(x);
        const uint16_t sh = wm__rd16(x + 2);
        const uint8_t *sl = x + 4, *q = x + 8;
        for (int ib = 0; ib < 8; ib++, y += 32, q += 16) {
            int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)wm__kvalues_iq4nl[q[j] & 0xF];
                y[j + 16] = dl * (float)wm__kvalues_iq4nl[q[j] >> 4];
            }
        }
    }
}

/* ---- IQ codebook types (grids in iq_grids.c) ---- */

/* v with the sign of element j applied: negated (its sign bit flipped) when bit j of signs is
 * set. ggml writes a multiply by +-1.0f, which its build compiles to this flip; the two agree on
 * every value but a NaN (a scale that is NaN), where a multiply may keep the NaN's sign. The
 * oracle (ggml's own libggml-base, tests/test_convert.c peer_special_scales) flips it, so the
 * flip is written out here and in the SIMD kernels, whatever a compiler would do. */
static inline float sgn(float v, uint8_t signs, int j) { return (signs >> j) & 1 ? -v : v; }
static inline uint8_t gbyte64(const uint64_t *g, unsigned i, int j) {
    return (uint8_t)(g[i] >> (8 * j));
}
static inline uint8_t gbyte32(const uint32_t *g, unsigned i, int j) {
    return (uint8_t)(g[i] >> (8 * j));
}

/* IQ2_XXS, 66 bytes: half d, then per 32 elements 4 grid indices (bytes) and a 32-bit word of
 * four 7-bit sign indices and a 4-bit scale. */
static void dq_iq2_xxs(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 66) {
        const float d = half_at(x);
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t a0 = wm__rd32(x + 2 + 8 * ib), a1 = wm__rd32(x + 6 + 8 * ib);
            const float db = d * (0.5f + (float)(a1 >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8) {
                const unsigned gi = (a0 >> (8 * l)) & 0xFF;
                const uint8_t signs = wm__iq_ksign((a1 >> (7 * l)) & 127);
                for (int j = 0; j < 8; j++)
                    y[j] = sgn(db * (float)gbyte64(wm__iq2xxs_grid, gi, j), signs, j);
            }
        }
    }
}

/* IQ2_XS, 74 bytes: half d, 32 16-bit codes (9-bit grid index, 7-bit sign index), 8 bytes of
 * two 4-bit scales. */
static void dq_iq2_xs(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 74) {
        const float d = half_at(x);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t sc = x[66 + ib];
            const float db[2] = {d * (0.5f + (float)(sc & 0xF)) * 0.25f,
                                 d * (0.5f + (float)(sc >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, y += 8) {
                const uint16_t q = wm__rd16(x + 2 + 2 * (4 * ib + l));
                const uint8_t signs = wm__iq_ksign(q >> 9);
                for (int j = 0; j < 8; j++)
                    y[j] = sgn(db[l / 2] * (float)gbyte64(wm__iq2xs_grid, q & 511, j), signs, j);
            }
        }
    }
}

/* IQ2_S, 82 bytes: half d, 32 bytes of grid index low bits, 32 sign bytes, 8 bytes of index
 * high bits, 8 bytes of two 4-bit scales. */
static void dq_iq2_s(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 82) {
        const float d = half_at(x);
        const uint8_t *qs = x + 2, *signs = x + 34, *qh = x + 66, *scales = x + 74;
        for (int ib = 0; ib < 8; ib++, qs += 4, signs += 4) {
            const float db[2] = {d * (0.5f + (float)(scales[ib] & 0xF)) * 0.25f,
                                 d * (0.5f + (float)(scales[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, y += 8) {
                const unsigned gi = qs[l] | ((unsigned)(qh[ib] << (8 - 2 * l)) & 0x300u);
                for (int j = 0; j < 8; j++)
                    y[j] = sgn(db[l / 2] * (float)gbyte64(wm__iq2s_grid, gi, j), signs[l], j);
            }
        }
    }
}

/* IQ3_XXS, 98 bytes: half d, 64 grid index bytes, 8 words of four 7-bit sign indices and a
 * 4-bit scale. */
static void dq_iq3_xxs(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 98) {
        const float d = half_at(x);
        const uint8_t *qs = x + 2;
        for (int ib = 0; ib < 8; ib++, qs += 8) {
            const uint32_t a = wm__rd32(x + 66 + 4 * ib);
            const float db = d * (0.5f + (float)(a >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint8_t signs = wm__iq_ksign((a >> (7 * l)) & 127);
                for (int j = 0; j < 4; j++) {
                    y[j] = sgn(db * (float)gbyte32(wm__iq3xxs_grid, qs[2 * l], j), signs, j);
                    y[j + 4] =
                        sgn(db * (float)gbyte32(wm__iq3xxs_grid, qs[2 * l + 1], j), signs, j + 4);
                }
            }
        }
    }
}

/* IQ3_S, 110 bytes: half d, 64 grid index bytes, 8 bytes of index ninth bits, 32 sign bytes,
 * 4 bytes of two 4-bit scales (odd scales 1..31). */
static void dq_iq3_s(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 110) {
        const float d = half_at(x);
        const uint8_t *qs = x + 2, *qh = x + 66, *signs = x + 74, *scales = x + 106;
        for (int ib = 0; ib < 8; ib += 2, qh += 2) {
            for (int h = 0; h < 2; h++, qs += 8, signs += 4) {
                const int s = h ? scales[ib / 2] >> 4 : scales[ib / 2] & 0xF;
                const float db = d * (float)(1 + 2 * s);
                for (int l = 0; l < 4; l++, y += 8) {
                    const unsigned g1 = qs[2 * l] | ((unsigned)(qh[h] << (8 - 2 * l)) & 256u);
                    const unsigned g2 = qs[2 * l + 1] | ((unsigned)(qh[h] << (7 - 2 * l)) & 256u);
                    for (int j = 0; j < 4; j++) {
                        y[j] = sgn(db * (float)gbyte32(wm__iq3s_grid, g1, j), signs[l], j);
                        y[j + 4] = sgn(db * (float)gbyte32(wm__iq3s_grid, g2, j), signs[l], j + 4);
                    }
                }
            }
        }
    }
}

/* IQ1_S, 50 bytes: half d, 32 grid index low bytes, 8 16-bit words (index high bits, a 3-bit
 * scale, the sign of the shift). x = (d*(2s+1)) * (grid + delta), delta = +-1/8. */
static void dq_iq1_s(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 50) {
        const float d = half_at(x);
        const uint8_t *qs = x + 2;
        for (int ib = 0; ib < 8; ib++, qs += 4) {
            const uint16_t q = wm__rd16(x + 34 + 2 * ib);
            const float dl = d * (float)(2 * ((q >> 12) & 7) + 1);
            const float delta = q & 0x8000 ? -0.125f : 0.125f;
            for (int l = 0; l < 4; l++, y += 8) {
                const unsigned gi = qs[l] | (((unsigned)(q >> (3 * l)) & 7u) << 8);
                for (int j = 0; j < 8; j++)
                    y[j] = dl * ((float)(int8_t)gbyte64(wm__iq1s_grid, gi, j) + delta);
            }
        }
    }
}

/* IQ1_M, 56 bytes: 32 grid index low bytes, 16 bytes of index high bits and shift signs, 4
 * 16-bit words of 3-bit scales whose top nibbles together hold the half d. */
static void dq_iq1_m(const uint8_t *x, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 56) {
        uint16_t sc[4];
        const float d = wm__iq1m_scales(x, sc);
        const uint8_t *qs = x, *qh = x + 32;
        for (int ib = 0; ib < 8; ib++, qs += 4, qh += 2) {
            const float dl1 = d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1);
            const float dl2 = d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1);
            const unsigned idx[4] = {qs[0] | ((unsigned)(qh[0] << 8) & 0x700u),
                                     qs[1] | ((unsigned)(qh[0] << 4) & 0x700u),
                                     qs[2] | ((unsigned)(qh[1] << 8) & 0x700u),
                                     qs[3] | ((unsigned)(qh[1] << 4) & 0x700u)};
            const float delta[4] = {
                qh[0] & 0x08 ? -0.125f : 0.125f, qh[0] & 0x80 ? -0.125f : 0.125f,
                qh[1] & 0x08 ? -0.125f : 0.125f, qh[1] & 0x80 ? -0.125f : 0.125f};
            for (int l = 0; l < 4; l++, y += 8) {
                const float dl = l < 2 ? dl1 : dl2;
                for (int j = 0; j < 8; j++)
                    y[j] = dl * ((float)(int8_t)gbyte64(wm__iq1s_grid, idx[l], j) + delta[l]);
            }
        }
    }
}

/* ---- plain element types (a "block" is one element) ---- */

static void dq_f32(const uint8_t *x, float *y, size_t n) { memcpy(y, x, n * 4); }

static void dq_f16(const uint8_t *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = wm__f16_to_f32(wm__rd16(x + 2 * i));
}

static void dq_bf16(const uint8_t *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = wm__bf16_to_f32(wm__rd16(x + 2 * i));
}

static void dq_f64(const uint8_t *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double v;
        memcpy(&v, x + 8 * i, 8);
        y[i] = (float)v;
    }
}

/* F8_E4M3 ("fn": no infinities, S.1111.111 is NaN, largest 448), exact in float. */
static void dq_f8_e4m3(const uint8_t *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t s = (uint32_t)(x[i] & 0x80u) << 24, e = (x[i] >> 3) & 0xFu, m = x[i] & 7u;
        if (e == 15 && m == 7)
            y[i] = wm__f32_from_bits(s | 0x7FC00000u);
        else if (e == 0)
            y[i] = wm__f32_from_bits(s | wm__f32_bits((float)m * wm__f32_from_bits(0x3B000000u)));
        else
            y[i] = wm__f32_from_bits(s | ((e + 120u) << 23) | (m << 20));
    }
}

/* F8_E5M2 is the top byte of an IEEE half. */
static void dq_f8_e5m2(const uint8_t *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = wm__f16_to_f32((uint16_t)(x[i] << 8));
}

/* F8_E8M0: 2^(x-127); 0xFF is NaN (OCP microscaling). */
static void dq_f8_e8m0(const uint8_t *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t b = x[i] == 0xFF ? 0x7FC00000u : x[i] == 0 ? 0x00400000u : (uint32_t)x[i] << 23;
        y[i] = wm__f32_from_bits(b);
    }
}

#define INT_KERNEL(name, T)                                                                        \
    static void name(const uint8_t *x, float *y, size_t n) {                                       \
        for (size_t i = 0; i < n; i++) {                                                           \
            T v;                                                                                   \
            memcpy(&v, x + sizeof(T) * i, sizeof(T));                                              \
            y[i] = (float)v;                                                                       \
        }                                                                                          \
    }
INT_KERNEL(dq_i8, int8_t)
INT_KERNEL(dq_u8, uint8_t)
INT_KERNEL(dq_i16, int16_t)
INT_KERNEL(dq_u16, uint16_t)
INT_KERNEL(dq_i32, int32_t)
INT_KERNEL(dq_u32, uint32_t)
INT_KERNEL(dq_i64, int64_t)
INT_KERNEL(dq_u64, uint64_t)

static void dq_bool(const uint8_t *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] ? 1.0f : 0.0f;
}

/* ---- the kernel table ---- */

wm__to_f32_fn wm__dequant_scalar(wm_type type) {
    switch (type) {
    case WM_TYPE_F32: return dq_f32;
    case WM_TYPE_F16: return dq_f16;
    case WM_TYPE_BF16: return dq_bf16;
    case WM_TYPE_F64: return dq_f64;
    case WM_TYPE_Q4_0: return dq_q4_0;
    case WM_TYPE_Q4_1: return dq_q4_1;
    case WM_TYPE_Q5_0: return dq_q5_0;
    case WM_TYPE_Q5_1: return dq_q5_1;
    case WM_TYPE_Q8_0: return dq_q8_0;
    case WM_TYPE_Q1_0: return dq_q1_0;
    case WM_TYPE_Q2_0: return dq_q2_0;
    case WM_TYPE_MXFP4: return dq_mxfp4;
    case WM_TYPE_NVFP4: return dq_nvfp4;
    case WM_TYPE_Q2_K: return dq_q2_k;
    case WM_TYPE_Q3_K: return dq_q3_k;
    case WM_TYPE_Q4_K: return dq_q4_k;
    case WM_TYPE_Q5_K: return dq_q5_k;
    case WM_TYPE_Q6_K: return dq_q6_k;
    case WM_TYPE_Q8_K: return dq_q8_k;
    case WM_TYPE_TQ1_0: return dq_tq1_0;
    case WM_TYPE_TQ2_0: return dq_tq2_0;
    case WM_TYPE_IQ4_NL: return dq_iq4_nl;
    case WM_TYPE_IQ4_XS: return dq_iq4_xs;
    case WM_TYPE_IQ2_XXS: return dq_iq2_xxs;
    case WM_TYPE_IQ2_XS: return dq_iq2_xs;
    case WM_TYPE_IQ2_S: return dq_iq2_s;
    case WM_TYPE_IQ3_XXS: return dq_iq3_xxs;
    case WM_TYPE_IQ3_S: return dq_iq3_s;
    case WM_TYPE_IQ1_S: return dq_iq1_s;
    case WM_TYPE_IQ1_M: return dq_iq1_m;
    case WM_TYPE_F8_E4M3: return dq_f8_e4m3;
    case WM_TYPE_F8_E5M2: return dq_f8_e5m2;
    case WM_TYPE_F8_E8M0: return dq_f8_e8m0;
    case WM_TYPE_I8: return dq_i8;
    case WM_TYPE_U8: return dq_u8;
    case WM_TYPE_I16: return dq_i16;
    case WM_TYPE_U16: return dq_u16;
    case WM_TYPE_I32: return dq_i32;
    case WM_TYPE_U32: return dq_u32;
    case WM_TYPE_I64: return dq_i64;
    case WM_TYPE_U64: return dq_u64;
    case WM_TYPE_BOOL: return dq_bool;
    default: return NULL;
    }
}
