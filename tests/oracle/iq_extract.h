/*
 * iq_extract.h: llama.cpp's ggml library as an oracle (the "peer"), and the recovery of the IQ
 * codebook grids from its own dequantizers. Shared by the generator of src/convert/iq_grids.c
 * (tools/gen/iq_grids.c), by tests/test_convert.c, which checks the committed grids against
 * the peer, and by bench/convert.c; part of the oracle's support library (tests/oracle/, whose
 * oracle.c says where the peer is).
 *
 * Sections: the peer (where it is installed, the layout of its type traits, a type's to_float);
 * the grids (one crafted block per group of entries, read back exactly).
 *
 * Nothing here is ggml source: the grids are observed as the output of the peer's compiled
 * to_float on blocks whose scale is 1 and whose signs are all positive, so that every output
 * float is an exact small multiple of one grid byte. Header-only (static functions); the
 * includer links libdl. ggml type ids are weightmap's wm_type ids.
 */
#ifndef WM_IQ_EXTRACT_H
#define WM_IQ_EXTRACT_H

#include "oracle.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the peer ---- */

/* ggml type ids of the seven codebook types. */
enum {
    IQX_IQ2_XXS = 16,
    IQX_IQ2_XS = 17,
    IQX_IQ3_XXS = 18,
    IQX_IQ1_S = 19,
    IQX_IQ3_S = 21,
    IQX_IQ2_S = 22,
    IQX_IQ1_M = 29,
};

typedef void (*peer_to_float_fn)(const void *x, float *y, int64_t k);

typedef struct peer_traits { /* struct ggml_type_traits of ggml 0.23 (llama.cpp v0.4.0) */
    const char *type_name;
    int64_t blck_size;
    int64_t blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    peer_to_float_fn to_float;
    void (*from_float_ref)(const float *x, void *y, int64_t k);
} peer_traits;

/* The folder holding libggml-base.so (oracle.h). */
static const char *peer_dir(void) { return wm_oracle_dir(); }

/* A type's to_float from the traits, or the exported dequantize_row_<name> when the traits leave
 * it out (Q8_K); NULL when neither exists. */
static peer_to_float_fn peer_type_to_float(void *lib, const peer_traits *tr) {
    if (!tr) return NULL;
    if (tr->to_float) return tr->to_float;
    char sym[64];
    snprintf(sym, sizeof sym, "dequantize_row_%s", tr->type_name);
    peer_to_float_fn f;
    *(void **)&f = dlsym(lib, sym);
    return f;
}

/* ---- the grids ---- */

/* Every grid of the IQ1/IQ2/IQ3 types. Each entry packs 8 (IQ3: 4) byte values, the first in
 * the lowest byte; IQ1_S's bytes are signed (-1, 0, 1) and IQ1_M shares its grid. */
typedef struct iqx_grids {
    uint64_t iq2xxs[256];
    uint64_t iq2xs[512];
    uint64_t iq2s[1024];
    uint32_t iq3xxs[256];
    uint32_t iq3s[512];
    uint64_t iq1s[2048];
} iqx_grids;

/* Dequantizes one block (256 elements) of ggml type `type` into out. */
typedef void (*iqx_block_fn)(void *ctx, int type, const uint8_t *block, float *out);

static void iqx_put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* Packs n outputs y[i] as bytes round(y[i] * mul - sub); -1 when one is not exactly such a byte
 * (a signed byte when sign is set): the crafted block did not isolate one grid entry. */
static int iqx_pack(const float *y, int n, float mul, float sub, int sign, uint64_t *out) {
    uint64_t v = 0;
    for (int j = 0; j < n; j++) {
        float f = y[j] * mul - sub;
        if (!(f >= (sign ? -128.0f : 0.0f) && f <= (sign ? 127.0f : 255.0f))) return -1;
        long b = (long)f;
        if ((float)b != f) return -1;
        v |= (uint64_t)(uint8_t)b << (8 * j);
    }
    *out = v;
    return 0;
}

/* Recovers every grid through dq. Each crafted block holds the half scale 1.0 (0x3C00), zero
 * sub-block scales and no sign bits, so that output element j of grid slot k is grid[k] byte j
 * times a known power of two. Returns 0, or -1 with a message in why. */
static int iqx_extract(iqx_block_fn dq, void *ctx, iqx_grids *g, char *why, size_t why_cap) {
    uint8_t b[128];
    float y[256];
    uint64_t v;
#define IQX_FAIL(name, idx)                                                                        \
    do {                                                                                           \
        snprintf(why, why_cap, "%s entry %d: the output is not an exact grid byte", name, idx);    \
        return -1;                                                                                 \
    } while (0)
    for (int base = 0; base < 256; base += 32) { /* IQ2_XXS: element = grid/8 */
        memset(b, 0, sizeof b);
        iqx_put16(b, 0x3C00);
        for (int k = 0; k < 32; k++)
            b[2 + 8 * (k / 4) + k % 4] = (uint8_t)(base + k);
        dq(ctx, IQX_IQ2_XXS, b, y);
        for (int k = 0; k < 32; k++) {
            if (iqx_pack(y + 8 * k, 8, 8, 0, 0, &v)) IQX_FAIL("iq2_xxs", base + k);
            g->iq2xxs[base + k] = v;
        }
    }
    for (int base = 0; base < 512; base += 32) { /* IQ2_XS: 9-bit index, sign index 0 */
        memset(b, 0, sizeof b);
        iqx_put16(b, 0x3C00);
        for (int k = 0; k < 32; k++)
            iqx_put16(b + 2 + 2 * k, (uint16_t)(base + k));
        dq(ctx, IQX_IQ2_XS, b, y);
        for (int k = 0; k < 32; k++) {
            if (iqx_pack(y + 8 * k, 8, 8, 0, 0, &v)) IQX_FAIL("iq2_xs", base + k);
            g->iq2xs[base + k] = v;
        }
    }
    for (int base = 0; base < 1024; base += 32) { /* IQ2_S: 8 low bits + 2 high bits in qh */
        memset(b, 0, sizeof b);
        iqx_put16(b, 0x3C00);
        for (int k = 0; k < 32; k++) {
            int idx = base + k;
            b[2 + k] = (uint8_t)idx;
            b[66 + k / 4] |= (uint8_t)(((idx >> 8) & 3) << (2 * (k % 4)));
        }
        dq(ctx, IQX_IQ2_S, b, y);
        for (int k = 0; k < 32; k++) {
            if (iqx_pack(y + 8 * k, 8, 8, 0, 0, &v)) IQX_FAIL("iq2_s", base + k);
            g->iq2s[base + k] = v;
        }
    }
    for (int base = 0; base < 256; base += 64) { /* IQ3_XXS: element = grid/4, 64 per block */
        memset(b, 0, sizeof b);
        iqx_put16(b, 0x3C00);
        for (int k = 0; k < 64; k++)
            b[2 + k] = (uint8_t)(base + k);
        dq(ctx, IQX_IQ3_XXS, b, y);
        for (int k = 0; k < 64; k++) {
            if (iqx_pack(y + 4 * k, 4, 4, 0, 0, &v)) IQX_FAIL("iq3_xxs", base + k);
            g->iq3xxs[base + k] = (uint32_t)v;
        }
    }
    for (int base = 0; base < 512; base += 64) { /* IQ3_S: element = grid, ninth bit in qh */
        memset(b, 0, sizeof b);
        iqx_put16(b, 0x3C00);
        for (int k = 0; k < 64; k++) {
            int idx = base + k;
            b[2 + k] = (uint8_t)idx;
            if (idx & 256) b[66 + k / 8] |= (uint8_t)(1u << (k % 8));
        }
        dq(ctx, IQX_IQ3_S, b, y);
        for (int k = 0; k < 64; k++) {
            if (iqx_pack(y + 4 * k, 4, 1, 0, 0, &v)) IQX_FAIL("iq3_s", base + k);
            g->iq3s[base + k] = (uint32_t)v;
        }
    }
    for (int base = 0; base < 2048; base += 32) { /* IQ1_S: element = grid + 1/8 (scale 1) */
        memset(b, 0, sizeof b);
        iqx_put16(b, 0x3C00);
        for (int k = 0; k < 32; k++) {
            int idx = base + k;
            b[2 + k] = (uint8_t)idx;
            uint16_t q;
            memcpy(&q, b + 34 + 2 * (k / 4), 2);
            iqx_put16(b + 34 + 2 * (k / 4), (uint16_t)(q | ((idx >> 8) & 7) << (3 * (k % 4))));
        }
        dq(ctx, IQX_IQ1_S, b, y);
        for (int k = 0; k < 32; k++) {
            if (iqx_pack(y + 8 * k, 8, 1, 0.125f, 1, &v)) IQX_FAIL("iq1_s", base + k);
            g->iq1s[base + k] = v;
        }
    }
#undef IQX_FAIL
    return 0;
}

#endif /* WM_IQ_EXTRACT_H */
