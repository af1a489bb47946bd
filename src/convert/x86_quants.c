/*
 * x86_quants.c: the AVX2/F16C kernels of the k-quants, the ternary types and the IQ codebook
 * types (grids of iq_grids.c), for the table in x86.c. Empty off x86-64 (or without GCC/Clang).
 *
 * Each computes exactly what its portable twin in dequant.c computes (x86.h says how).
 */
#include "convert.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include "x86.h"

/* ---- k-quants ---- */

TARGET WM_X86_KERNEL(q2_k) {
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

TARGET WM_X86_KERNEL(q3_k) {
    const __m128i m3 = _mm_set1_epi8(3), four = _mm_set1_epi8(4);
    for (size_t i = 0; i < nb; i++, x += 110) {
        const uint8_t *q = x + 32;
        const float d = half_at(x + 108);
        const __m128i hma = _mm_loadu_si128((const __m128i *)x),
                      hmb = _mm_loadu_si128((const __m128i *)(x + 16));
        int8_t sc[16];
        wm__q3k_scales(x + 96, sc);
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

TARGET WM_X86_KERNEL(q4_k) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (size_t i = 0; i < nb; i++, x += 144) {
        const float d = half_at(x), dmin = half_at(x + 2);
        const uint8_t *s = x + 4, *q = x + 16;
        for (int j = 0; j < 8; j += 2, q += 32, y += 64) {
            uint8_t sc, m;
            wm__scale_min_k4(j, s, &sc, &m);
            const __m256 d1 = _mm256_set1_ps(d * (float)sc), m1 = _mm256_set1_ps(dmin * (float)m);
            wm__scale_min_k4(j + 1, s, &sc, &m);
            const __m256 d2 = _mm256_set1_ps(d * (float)sc), m2 = _mm256_set1_ps(dmin * (float)m);
            __m128i qa = _mm_loadu_si128((const __m128i *)q),
                    qb = _mm_loadu_si128((const __m128i *)(q + 16));
            st32_u8_dm(y, _mm_and_si128(qa, m4), _mm_and_si128(qb, m4), d1, m1);
            st32_u8_dm(y + 32, _mm_and_si128(_mm_srli_epi16(qa, 4), m4),
                       _mm_and_si128(_mm_srli_epi16(qb, 4), m4), d2, m2);
        }
    }
}

TARGET WM_X86_KERNEL(q5_k) {
    const __m128i m4 = _mm_set1_epi8(0x0F), sixteen = _mm_set1_epi8(16);
    for (size_t i = 0; i < nb; i++, x += 176) {
        const float d = half_at(x), dmin = half_at(x + 2);
        const uint8_t *s = x + 4, *ql = x + 48;
        const __m128i ha = _mm_loadu_si128((const __m128i *)(x + 16)),
                      hb = _mm_loadu_si128((const __m128i *)(x + 32));
        int bitn = 0;
        for (int j = 0; j < 8; j += 2, ql += 32, y += 64, bitn += 2) {
            uint8_t sc, m;
            wm__scale_min_k4(j, s, &sc, &m);
            const __m256 d1 = _mm256_set1_ps(d * (float)sc), m1 = _mm256_set1_ps(dmin * (float)m);
            wm__scale_min_k4(j + 1, s, &sc, &m);
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

TARGET WM_X86_KERNEL(q6_k) {
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

TARGET WM_X86_KERNEL(q8_k) {
    for (size_t i = 0; i < nb; i++, x += 292, y += 256) {
        const __m256 d = _mm256_set1_ps(wm__f32_from_bits(wm__rd32(x)));
        for (int j = 0; j < 256; j += 16)
            st16_i8(y + j, _mm_loadu_si128((const __m128i *)(x + 4 + j)), d);
    }
}

/* ---- ternary types ---- */

TARGET WM_X86_KERNEL(tq2_0) {
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

TARGET WM_X86_KERNEL(tq1_0) {
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

/* Eight outputs from one packed grid entry (8 unsigned bytes): db * g[j], its sign bit flipped
 * where bit j of `signs` is set (an XOR, as the portable kernel's negation and ggml's build do:
 * a NaN scale's sign flips too, where a multiply by -1.0 would keep it). */
TARGET static inline void iq_store8(float *y, uint64_t g, __m256 db, unsigned signs) {
    const __m256i shift = _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24),
                  top = _mm256_set1_epi32((int)0x80000000u);
    __m256 v = _mm256_mul_ps(db, u8x8_ps(_mm_cvtsi64_si128((long long)g)));
    __m256i bit = _mm256_and_si256(_mm256_sllv_epi32(_mm256_set1_epi32((int)signs), shift), top);
    _mm256_storeu_ps(y, _mm256_xor_ps(v, _mm256_castsi256_ps(bit)));
}

/* Eight IQ1 outputs: dl * (g[j] + delta), g a packed entry of signed bytes. */
TARGET static inline void iq1_store8(float *y, uint64_t g, __m256 dl, float delta) {
    __m256 v = _mm256_add_ps(i8x8_ps(_mm_cvtsi64_si128((long long)g)), _mm256_set1_ps(delta));
    _mm256_storeu_ps(y, _mm256_mul_ps(dl, v));
}

static inline uint64_t iq3_pair(const uint32_t *grid, unsigned a, unsigned b) {
    return (uint64_t)grid[a] | (uint64_t)grid[b] << 32;
}

TARGET WM_X86_KERNEL(iq2_xxs) {
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

TARGET WM_X86_KERNEL(iq2_xs) {
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

TARGET WM_X86_KERNEL(iq2_s) {
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

TARGET WM_X86_KERNEL(iq3_xxs) {
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

TARGET WM_X86_KERNEL(iq3_s) {
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

TARGET WM_X86_KERNEL(iq1_s) {
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

TARGET WM_X86_KERNEL(iq1_m) {
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

#endif
