/*
 * blocks.h: deterministic inputs for conversion, shared by tests/test_convert.c (whose committed
 * reference checksums, tests/data/convert_ref.txt, are taken over exactly these bytes: change
 * nothing here without regenerating them) and bench/convert.c. A splitmix64 stream; valid
 * blocks of every type are random bytes whose scale fields are made finite.
 */
#ifndef WM_TEST_BLOCKS_H
#define WM_TEST_BLOCKS_H

#include "weightmap.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void rng_fill(uint64_t *s, uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = rng_next(s);
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

/* A finite half: a random one with the top exponent bit cleared when it would be inf/NaN, and
 * scaled down so that products with codes stay well inside float range. */
static inline uint16_t finite_half(uint64_t *s) {
    uint16_t h = (uint16_t)rng_next(s);
    if ((h & 0x7C00) == 0x7C00) h &= (uint16_t)~0x4000;
    return h;
}

static inline void put_half(uint8_t *p, uint16_t h) { memcpy(p, &h, 2); }

/* Offsets of the half-precision scale fields of a block type (-1 ends the list). */
static inline const int *half_fields(wm_type t) {
    static const int at0[] = {0, -1}, at02[] = {0, 2, -1}, q2k[] = {80, 82, -1}, q3k[] = {108, -1},
                     q6k[] = {208, -1}, tq1[] = {52, -1}, tq2[] = {64, -1}, none[] = {-1};
    switch (t) {
    case WM_TYPE_Q4_0:
    case WM_TYPE_Q5_0:
    case WM_TYPE_Q8_0:
    case WM_TYPE_IQ4_NL:
    case WM_TYPE_Q1_0:
    case WM_TYPE_Q2_0:
    case WM_TYPE_IQ4_XS:
    case WM_TYPE_IQ2_XXS:
    case WM_TYPE_IQ2_XS:
    case WM_TYPE_IQ2_S:
    case WM_TYPE_IQ3_XXS:
    case WM_TYPE_IQ3_S:
    case WM_TYPE_IQ1_S: return at0;
    case WM_TYPE_Q4_1:
    case WM_TYPE_Q5_1:
    case WM_TYPE_Q4_K:
    case WM_TYPE_Q5_K:
    case WM_TYPE_Q8_1: return at02;
    case WM_TYPE_Q2_K: return q2k;
    case WM_TYPE_Q3_K: return q3k;
    case WM_TYPE_Q6_K: return q6k;
    case WM_TYPE_TQ1_0: return tq1;
    case WM_TYPE_TQ2_0: return tq2;
    default: return none;
    }
}

/* nb valid blocks of type t: random bytes, every scale field finite. */
static inline void make_blocks(wm_type t, size_t nb, uint64_t seed, uint8_t *out) {
    uint64_t s = seed;
    size_t bb = wm_type_block_bytes(t);
    rng_fill(&s, out, nb * bb);
    for (size_t i = 0; i < nb; i++) {
        uint8_t *b = out + i * bb;
        for (const int *f = half_fields(t); *f >= 0; f++)
            put_half(b + *f, finite_half(&s));
        if (t == WM_TYPE_Q8_K) { /* float d: a modest finite value */
            float d = (float)((int64_t)(rng_next(&s) % 2001) - 1000) / 4096.0f;
            memcpy(b, &d, 4);
        } else if (t == WM_TYPE_MXFP4) {
            b[0] = (uint8_t)(100 + rng_next(&s) % 50); /* E8M0 around 2^-27 .. 2^22 */
        } else if (t == WM_TYPE_IQ1_M) {
            /* the half scale is spread over the top nibbles of the four 16-bit scale words */
            uint16_t h = finite_half(&s);
            for (int k = 0; k < 4; k++)
                b[48 + 2 * k + 1] =
                    (uint8_t)((b[48 + 2 * k + 1] & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
        }
    }
}

static uint64_t fnv1a(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

#endif /* WM_TEST_BLOCKS_H */
