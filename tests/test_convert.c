/*
 * test_convert.c: conversion between element types, against llama.cpp's own code.
 *
 * Sections: deterministic inputs (a splitmix64 stream; valid blocks of every type are random
 * bytes whose scale fields are made finite); the peer (libggml-base.so from the npm package, or
 * WM_PEER_DIR=dir: to_float and from_float_ref of every type through
 * ggml_get_type_traits, and ggml's own half/bfloat16 rows); peer cases (every type dequantized by
 * both and compared byte for byte, on the AVX2 path and the portable path); the IQ codebook grids
 * (committed hashes, and equality with the grids read back from the peer,
 * tests/oracle/iq_extract.h) and the IQ kernels against the peer; the committed reference checksums
 * (taken once from the peer, so the bit-exactness check also runs where the peer is absent); exact
 * values of the types ggml does not have (float8, integers, F64 rounding); API errors; and the
 * `weightmap cat` command.
 */
#include "wmtest.h"

#include "blocks.h"
#include "convert/convert.h"
#include "gguf_builder.h"

#include "iq_extract.h" /* the peer's traits and location; the IQ grids read back */

#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/wait.h>

/* ---- deterministic inputs: tests/blocks.h ---- */

/* ---- the peer ---- */

static struct {
    void *lib;
    const peer_traits *(*traits)(int type);
    void (*fp16_to_fp32_row)(const uint16_t *x, float *y, int64_t n);
    void (*fp32_to_fp16_row)(const float *x, uint16_t *y, int64_t n);
    void (*bf16_to_fp32_row)(const uint16_t *x, float *y, int64_t n);
    void (*fp32_to_bf16_row)(const float *x, uint16_t *y, int64_t n);
    size_t (*quantize_chunk)(int type, const float *src, void *dst, int64_t start, int64_t nrows,
                             int64_t n_per_row, const float *imatrix);
} peer;

static bool peer_load(void) {
    if (peer.lib) return true;
    char path[1024];
    snprintf(path, sizeof path, "%s/libggml-base.so", peer_dir());
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return false;
    *(void **)&peer.traits = dlsym(lib, "ggml_get_type_traits");
    *(void **)&peer.fp16_to_fp32_row = dlsym(lib, "ggml_fp16_to_fp32_row");
    *(void **)&peer.fp32_to_fp16_row = dlsym(lib, "ggml_fp32_to_fp16_row");
    *(void **)&peer.bf16_to_fp32_row = dlsym(lib, "ggml_bf16_to_fp32_row");
    *(void **)&peer.fp32_to_bf16_row = dlsym(lib, "ggml_fp32_to_bf16_row_ref");
    *(void **)&peer.quantize_chunk = dlsym(lib, "ggml_quantize_chunk");
    if (!peer.traits || !peer.fp16_to_fp32_row || !peer.fp32_to_fp16_row ||
        !peer.bf16_to_fp32_row || !peer.fp32_to_bf16_row || !peer.quantize_chunk)
        return false;
    peer.lib = lib;
    return true;
}

#define NEED_PEER()                                                                                \
    do {                                                                                           \
        if (!peer_load()) WM_SKIP("llama.cpp peer (libggml-base.so) not installed");               \
    } while (0)

/* A type's to_float, or its exported dequantize_row_<name> when the traits leave it out (Q8_K). */
static peer_to_float_fn peer_to_float(const peer_traits *tr) {
    return peer_type_to_float(peer.lib, tr);
}

static bool is_iq_codebook(int t) {
    return t == WM_TYPE_IQ2_XXS || t == WM_TYPE_IQ2_XS || t == WM_TYPE_IQ2_S ||
           t == WM_TYPE_IQ3_XXS || t == WM_TYPE_IQ3_S || t == WM_TYPE_IQ1_S || t == WM_TYPE_IQ1_M;
}

/* The peer quantizes n floats (whole blocks) of type t; false when it has no quantizer for t.
 * The IQ codebook types go through ggml_quantize_chunk, which first sets up their search tables
 * (their from_float_ref would assert without that), with an importance matrix of ones (some of
 * them require one). That set-up costs ggml 2 to 10 s per process for IQ2_XS, IQ2_S, IQ1_S and
 * IQ1_M, so those four are left to random blocks (false here); IQ2_XXS, IQ3_XXS and IQ3_S take
 * about a second together. */
static bool peer_quantize(int t, const float *xs, void *blocks, size_t n) {
    const peer_traits *tr = peer.traits(t);
    if (is_iq_codebook(t)) {
        if (t != WM_TYPE_IQ2_XXS && t != WM_TYPE_IQ3_XXS && t != WM_TYPE_IQ3_S) return false;
        static float ones[256];
        for (int i = 0; i < 256; i++)
            ones[i] = 1.0f;
        peer.quantize_chunk(t, xs, blocks, 0, (int64_t)(n / 256), 256, ones);
        return true;
    }
    if (!tr->from_float_ref) return false;
    tr->from_float_ref(xs, blocks, (int64_t)n);
    return true;
}

/* Runs wm_convert on the portable path (scalar=1) or the default one. */
static wm_status convert_path(int scalar, wm_type from, wm_type to, const void *src, void *dst,
                              uint64_t n) {
    int prev = wm__convert_force_scalar(scalar);
    wm_status st = wm_convert(from, to, src, dst, n);
    wm__convert_force_scalar(prev);
    return st;
}

static size_t first_diff(const void *a, const void *b, size_t n) {
    const uint8_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i]) return i;
    return n;
}

/* ---- peer cases ---- */

#define NB_MAX 512

/* Every ggml type with a to_float: same block geometry as ours, and the same floats from the
 * same blocks (random valid blocks, and blocks the peer quantized from random floats), on both
 * paths. */
WM_TEST(peer_dequant_f32) {
    NEED_PEER();
    static uint8_t blocks[NB_MAX * 292];
    static float want[NB_MAX * 256], got[NB_MAX * 256], xs[NB_MAX * 256];
    int checked = 0;
    char done[512] = "";
    for (int t = 0; t < 43; t++) {
        const peer_traits *tr = peer.traits(t);
        if (!tr || tr->blck_size == 0 || t == WM_TYPE_F32) continue;
        void (*to_float)(const void *, float *, int64_t) = peer_to_float(tr);
        if (!to_float) continue;
        CHECK_MSG((uint64_t)tr->blck_size == wm_type_block_elems((wm_type)t) &&
                      tr->type_size == wm_type_block_bytes((wm_type)t),
                  "type %d (%s): peer block %lld elems / %zu bytes", t, tr->type_name,
                  (long long)tr->blck_size, tr->type_size);
        CHECK_MSG(wm_convert_supported((wm_type)t, WM_TYPE_F32),
                  "type %s has a ggml to_float but no conversion here", tr->type_name);
        size_t be = (size_t)tr->blck_size, nb = 8192 / be;
        for (int round = 0; round < 4; round++) {
            bool quantized = false;
            if (round >= 2) { /* realistic blocks: the peer quantizes random floats */
                uint64_t s = 77u * (unsigned)t + (unsigned)round;
                for (size_t i = 0; i < nb * be; i++)
                    xs[i] = (float)((int64_t)(rng_next(&s) % 20001) - 10000) /
                            (round == 2 ? 7000.0f : 3.0f);
                quantized = peer_quantize(t, xs, blocks, nb * be);
            }
            if (!quantized)
                make_blocks((wm_type)t, nb, 1000u * (unsigned)t + (unsigned)round, blocks);
            to_float(blocks, want, (int64_t)(nb * be));
            for (int scalar = 0; scalar < 2; scalar++) {
                memset(got, 0xA5, nb * be * 4);
                CHECK_STATUS(convert_path(scalar, (wm_type)t, WM_TYPE_F32, blocks, got, nb * be),
                             WM_OK);
                size_t at = first_diff(want, got, nb * be * 4);
                CHECK_MSG(at == nb * be * 4,
                          "%s (%s path, round %d): element %zu: peer %a (0x%08x), ours %a",
                          tr->type_name, scalar ? "portable" : "simd", round, at / 4, want[at / 4],
                          (unsigned)wm__f32_bits(want[at / 4]), got[at / 4]);
            }
        }
        checked++;
        snprintf(done + strlen(done), sizeof done - strlen(done), " %s", tr->type_name);
    }
    fprintf(stderr, "bit-identical to ggml:%s\n", done);
    CHECK(checked >= 28);
}

/* ---- IQ codebook grids ---- */

/* A row of iq_tables: the grid wm__NAME_grid, its entry size and hash, its place iqx_grids.NAME. */
#define IQ_TABLE(name, entry, fnv)                                                                 \
    { #name, wm__##name##_grid, sizeof wm__##name##_grid, entry, fnv, offsetof(iqx_grids, name) }

/* The built-in grids (src/convert/iq_grids.c), each with the FNV-1a 64 of its bytes as the
 * generator wrote them from the peer (peer_iq_grids checks these values against the peer), and
 * where the same table sits in iq_extract.h's iqx_grids. */
static const struct iq_table {
    const char *name;
    const void *grid;
    size_t bytes, entry;
    uint64_t fnv;
    size_t at;
} iq_tables[] = {
    IQ_TABLE(iq2xxs, 8, 0xbb4ee025b5ac6e8eull), IQ_TABLE(iq2xs, 8, 0xc9b1ee61e79909bdull),
    IQ_TABLE(iq2s, 8, 0x123edd38a3b62b90ull),   IQ_TABLE(iq3xxs, 4, 0xdfa5dc83d6a155d5ull),
    IQ_TABLE(iq3s, 4, 0xfa37020c25b44829ull),   IQ_TABLE(iq1s, 8, 0x6703ed863501ae2eull),
};

/* Without the peer: every table hashes to its committed value, has pairwise distinct entries
 * (a codebook), and holds only the byte values its type allows. */
WM_TEST(iq_grids_committed) {
    for (size_t k = 0; k < sizeof iq_tables / sizeof iq_tables[0]; k++) {
        const struct iq_table *t = &iq_tables[k];
        const uint8_t *g = t->grid;
        CHECK_MSG(fnv1a(g, t->bytes) == t->fnv, "%s grid: hash %016llx, committed %016llx", t->name,
                  (unsigned long long)fnv1a(g, t->bytes), (unsigned long long)t->fnv);
        size_t n = t->bytes / t->entry;
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++)
                CHECK_MSG(memcmp(g + i * t->entry, g + j * t->entry, t->entry) != 0,
                          "%s grid: entries %zu and %zu are equal", t->name, i, j);
    }
    for (size_t i = 0; i < sizeof wm__iq2xxs_grid; i++) {
        uint8_t v = ((const uint8_t *)wm__iq2xxs_grid)[i];
        CHECK(v == 0x08 || v == 0x19 || v == 0x2b);
    }
    for (size_t i = 0; i < sizeof wm__iq1s_grid; i++) {
        int8_t v = ((const int8_t *)wm__iq1s_grid)[i];
        CHECK(v >= -1 && v <= 1);
    }
}

static void peer_iq_block(void *ctx, int type, const uint8_t *block, float *out) {
    (void)ctx;
    peer_to_float(peer.traits(type))(block, out, 256);
}

/* The committed grids are the ones read back from the peer's own dequantizers, entry for entry
 * (tools/gen/iq_grids.c wrote them the same way). */
WM_TEST(peer_iq_grids) {
    NEED_PEER();
    static iqx_grids g;
    char why[160];
    CHECK_MSG(iqx_extract(peer_iq_block, NULL, &g, why, sizeof why) == 0, "%s", why);
    for (size_t k = 0; k < sizeof iq_tables / sizeof iq_tables[0]; k++) {
        const struct iq_table *t = &iq_tables[k];
        const uint8_t *peer_grid = (const uint8_t *)&g + t->at;
        size_t at = first_diff(peer_grid, t->grid, t->bytes);
        CHECK_MSG(at == t->bytes, "%s grid entry %zu: built in differs from the peer's", t->name,
                  at / t->entry);
        CHECK(fnv1a(peer_grid, t->bytes) == t->fnv);
    }
}

/* The seven IQ codebook types match the peer bit for bit on both paths: random valid blocks
 * (every sign and scale pattern) and, where ggml's set-up is quick (peer_quantize), blocks the
 * peer quantized from random floats. */
WM_TEST(peer_iq_kernels) {
    NEED_PEER();
    static const wm_type ts[] = {WM_TYPE_IQ2_XXS, WM_TYPE_IQ2_XS, WM_TYPE_IQ2_S, WM_TYPE_IQ3_XXS,
                                 WM_TYPE_IQ3_S,   WM_TYPE_IQ1_S,  WM_TYPE_IQ1_M};
    enum { NB = 64, N = NB * 256 };
    static uint8_t blocks[NB * 110];
    static float want[N], got[N], xs[N];
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
        CHECK(wm_convert_supported(ts[k], WM_TYPE_F32) && wm_convert_supported(ts[k], WM_TYPE_F16));
        for (int round = 0; round < 6; round++) {
            if (round < 4) {
                make_blocks(ts[k], NB, 555u * (unsigned)ts[k] + (unsigned)round, blocks);
            } else {
                uint64_t s = 91u * (unsigned)ts[k] + (unsigned)round;
                for (size_t i = 0; i < N; i++)
                    xs[i] = (float)((int64_t)(rng_next(&s) % 20001) - 10000) /
                            (round == 4 ? 5000.0f : 2.0f);
                if (!peer_quantize(ts[k], xs, blocks, N))
                    make_blocks(ts[k], NB, 555u * (unsigned)ts[k] + (unsigned)round, blocks);
            }
            peer_to_float(peer.traits(ts[k]))(blocks, want, N);
            for (int scalar = 0; scalar < 2; scalar++) {
                memset(got, 0xA5, sizeof got);
                CHECK_STATUS(convert_path(scalar, ts[k], WM_TYPE_F32, blocks, got, N), WM_OK);
                size_t at = first_diff(want, got, sizeof want);
                CHECK_MSG(at == sizeof want, "%s (%s path, round %d): element %zu: peer %a ours %a",
                          wm_type_name(ts[k]), scalar ? "portable" : "simd", round, at / 4,
                          want[at / 4], got[at / 4]);
            }
        }
    }
}

/* Scales that are not finite numbers, decided by ggml itself: every type with a half scale,
 * each scale field set to each special half (quiet and signalling NaNs of both signs with
 * payloads, infinities, zeros, subnormals, the largest half) in blocks whose other bytes are
 * random, dequantized by the peer and by both of our paths, byte for byte. Where ggml writes an
 * element's sign as a multiply by +-1.0 (the IQ2/IQ3 codebook types), its build flips a NaN's
 * sign bit; our kernels flip it too (src/convert/dequant.c sgn, x86_quants.c iq_store8). */
WM_TEST(peer_special_scales) {
    NEED_PEER();
    static const uint16_t sp[] = {0x7E00, 0xFE00, 0x7C01, 0xFC01, 0x7FFF, 0xFFFF,
                                  0x7D55, 0xFEAA, 0x7C00, 0xFC00, 0x0000, 0x8000,
                                  0x0001, 0x83FF, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00};
    enum { NS = sizeof sp / sizeof sp[0], PER = 8, NB = NS * PER };
    static uint8_t blocks[NB * 292];
    static float want[NB * 256], got[NB * 256];
    int checked = 0;
    for (int t = 0; t < 43; t++) {
        const int *f = half_fields((wm_type)t);
        const peer_traits *tr = peer.traits(t);
        if (f[0] < 0 || !tr || !tr->blck_size || !peer_to_float(tr)) continue;
        size_t bb = wm_type_block_bytes((wm_type)t), be = wm_type_block_elems((wm_type)t);
        for (int which = 0; f[which] >= 0; which++) {
            make_blocks((wm_type)t, NB, 4242u + (unsigned)t, blocks);
            for (size_t b = 0; b < NB; b++)
                put_half(blocks + b * bb + f[which], sp[b % NS]);
            peer_to_float(tr)(blocks, want, (int64_t)(NB * be));
            for (int scalar = 0; scalar < 2; scalar++) {
                memset(got, 0xA5, NB * be * 4);
                CHECK_STATUS(convert_path(scalar, (wm_type)t, WM_TYPE_F32, blocks, got, NB * be),
                             WM_OK);
                size_t at = first_diff(want, got, NB * be * 4);
                CHECK_MSG(at == NB * be * 4,
                          "%s (%s path), scale at byte %d = 0x%04x: element %zu: peer 0x%08x, "
                          "ours 0x%08x",
                          tr->type_name, scalar ? "portable" : "simd", f[which],
                          sp[(at / 4 / be) % NS], at / 4, (unsigned)wm__f32_bits(want[at / 4]),
                          (unsigned)wm__f32_bits(got[at / 4]));
            }
        }
        checked++;
    }
    CHECK(checked >= 20);
}

/* Half and bfloat16: every 16-bit pattern widened, and random 32-bit patterns (NaNs, infinities,
 * subnormals included) narrowed, against ggml's rows, on both paths. */
WM_TEST(peer_half_bfloat16) {
    NEED_PEER();
    enum { N = 1 << 16, M = 1 << 20 };
    static uint16_t h[N], want16[M], got16[M];
    static float want[M], got[M], xs[M];
    for (int i = 0; i < N; i++)
        h[i] = (uint16_t)i;
    uint64_t s = 42;
    for (int i = 0; i < M; i++) {
        uint32_t u = (uint32_t)rng_next(&s);
        if (i % 4 == 1)
            u = (u & 0x80000000u) | (0x38000000u + (u & 0x07FFFFFFu)); /* near half range */
        if (i % 4 == 2) u = (u & 0x8000FFFFu) | 0x47000000u | (u & 0x00FF0000u);
        if (i < 16)
            u = (uint32_t[]){0,           0x80000000u, 0x7F800000u, 0xFF800000u,
                             0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x477FF000u,
                             0x477FEFFFu, 0x33000000u, 0x33000001u, 0x387FC000u,
                             0x7F7FFFFFu, 0x00000001u, 0x3F808000u, 0x3F818000u}[i];
        memcpy(&xs[i], &u, 4);
    }
    for (int scalar = 0; scalar < 2; scalar++) {
        const char *path = scalar ? "portable" : "simd";
        peer.fp16_to_fp32_row(h, want, N);
        CHECK_STATUS(convert_path(scalar, WM_TYPE_F16, WM_TYPE_F32, h, got, N), WM_OK);
        size_t at = first_diff(want, got, (size_t)N * 4);
        CHECK_MSG(at == (size_t)N * 4, "f16->f32 (%s): half 0x%04zx", path, at / 4);
        peer.bf16_to_fp32_row(h, want, N);
        CHECK_STATUS(convert_path(scalar, WM_TYPE_BF16, WM_TYPE_F32, h, got, N), WM_OK);
        at = first_diff(want, got, (size_t)N * 4);
        CHECK_MSG(at == (size_t)N * 4, "bf16->f32 (%s): 0x%04zx", path, at / 4);
        peer.fp32_to_fp16_row(xs, want16, M);
        CHECK_STATUS(convert_path(scalar, WM_TYPE_F32, WM_TYPE_F16, xs, got16, M), WM_OK);
        at = first_diff(want16, got16, (size_t)M * 2);
        CHECK_MSG(at == (size_t)M * 2, "f32->f16 (%s): 0x%08x: peer 0x%04x ours 0x%04x", path,
                  (unsigned)wm__f32_bits(xs[at / 2]), want16[at / 2], got16[at / 2]);
        peer.fp32_to_bf16_row(xs, want16, M);
        CHECK_STATUS(convert_path(scalar, WM_TYPE_F32, WM_TYPE_BF16, xs, got16, M), WM_OK);
        at = first_diff(want16, got16, (size_t)M * 2);
        CHECK_MSG(at == (size_t)M * 2, "f32->bf16 (%s): 0x%08x: peer 0x%04x ours 0x%04x", path,
                  (unsigned)wm__f32_bits(xs[at / 2]), want16[at / 2], got16[at / 2]);
    }
}

/* Quantized to half and bfloat16 is the peer's to_float followed by its own rounding. */
WM_TEST(peer_quant_to_half) {
    NEED_PEER();
    static uint8_t blocks[NB_MAX * 292];
    static float f[NB_MAX * 256];
    static uint16_t want[NB_MAX * 256], got[NB_MAX * 256];
    for (int t = 2; t < 43; t++) {
        const peer_traits *tr = peer.traits(t);
        if (!tr || tr->blck_size == 0 || !peer_to_float(tr) ||
            !wm_convert_supported((wm_type)t, WM_TYPE_F16))
            continue;
        size_t n = 8192;
        make_blocks((wm_type)t, n / (size_t)tr->blck_size, 31u * (unsigned)t, blocks);
        peer_to_float(tr)(blocks, f, (int64_t)n);
        for (int target = 0; target < 2; target++) {
            wm_type to = target ? WM_TYPE_BF16 : WM_TYPE_F16;
            if (to == (wm_type)t) continue; /* a copy, not a conversion */
            (target ? peer.fp32_to_bf16_row : peer.fp32_to_fp16_row)(f, want, (int64_t)n);
            for (int scalar = 0; scalar < 2; scalar++) {
                CHECK_STATUS(convert_path(scalar, (wm_type)t, to, blocks, got, n), WM_OK);
                size_t at = first_diff(want, got, n * 2);
                CHECK_MSG(at == n * 2, "%s -> %s (%s): element %zu", tr->type_name,
                          wm_type_name(to), scalar ? "portable" : "simd", at / 2);
            }
        }
    }
}

/* ---- committed reference checksums ---- */

#define REF_PATH WM_SOURCE_DIR "/tests/data/convert_ref.txt"

/* The input of a reference line: 8192 elements of `from` built from seed = type id * 7919. For
 * F32 sources the input is random 32-bit patterns (NaNs included). */
static size_t ref_input(wm_type from, uint8_t *buf) {
    size_t n = 8192;
    if (from == WM_TYPE_F32 || from == WM_TYPE_F16 || from == WM_TYPE_BF16) {
        uint64_t s = 7919u * (unsigned)from + 1;
        rng_fill(&s, buf, n * wm_type_block_bytes(from));
    } else {
        make_blocks(from, n / wm_type_block_elems(from), 7919u * (unsigned)from, buf);
    }
    return n;
}

static size_t elem_size(wm_type t) { return t == WM_TYPE_F32 ? 4 : 2; }

/* Writes the reference table from the peer's outputs (not ours). Runs only when asked:
 * WM_CONVERT_WRITE_REF=1 ctest -R convert.write_reference. */
WM_TEST(write_reference) {
    if (!getenv("WM_CONVERT_WRITE_REF"))
        WM_SKIP("set WM_CONVERT_WRITE_REF=1 to regenerate " REF_PATH);
    NEED_PEER();
    static uint8_t in[8192 * 8];
    static float f[8192];
    static uint16_t h[8192];
    FILE *out = fopen(REF_PATH, "w");
    CHECK(out != NULL);
    fprintf(out,
            "# FNV-1a 64 of llama.cpp's output (libggml-base, llama.cpp v0.4.0) for 8192 elements\n"
            "# of each source type built as in tests/test_convert.c ref_input(); lines: FROM TO "
            "HASH\n");
    for (int t = 0; t < 43; t++) {
        const peer_traits *tr = peer.traits(t);
        if (!tr || tr->blck_size == 0 || !wm_convert_supported((wm_type)t, WM_TYPE_F32)) continue;
        if (t != WM_TYPE_F32 && !peer_to_float(tr))
            continue; /* F64, integers: ggml has no to_float */
        size_t n = ref_input((wm_type)t, in);
        if (t == WM_TYPE_F32) {
            memcpy(f, in, n * 4);
        } else {
            peer_to_float(tr)(in, f, (int64_t)n);
            fprintf(out, "%s f32 %016llx\n", tr->type_name, (unsigned long long)fnv1a(f, n * 4));
        }
        peer.fp32_to_fp16_row(f, h, (int64_t)n);
        if (t != WM_TYPE_F16)
            fprintf(out, "%s f16 %016llx\n", tr->type_name, (unsigned long long)fnv1a(h, n * 2));
        peer.fp32_to_bf16_row(f, h, (int64_t)n);
        if (t != WM_TYPE_BF16)
            fprintf(out, "%s bf16 %016llx\n", tr->type_name, (unsigned long long)fnv1a(h, n * 2));
    }
    fclose(out);
}

/* Our output, on both paths, hashes to the committed value for every line of the table. */
WM_TEST(reference_checksums) {
    FILE *in = fopen(REF_PATH, "r");
    CHECK_MSG(in != NULL, "cannot open %s", REF_PATH);
    static uint8_t src[8192 * 8], dst[8192 * 4];
    char line[256], from_name[32], to_name[32];
    unsigned long long want;
    int lines = 0;
    while (fgets(line, sizeof line, in)) {
        if (line[0] == '#') continue;
        CHECK_MSG(sscanf(line, "%31s %31s %llx", from_name, to_name, &want) == 3, "bad line: %s",
                  line);
        wm_type from = wm_type_from_name(from_name), to = wm_type_from_name(to_name);
        CHECK_MSG(from != WM_TYPE_INVALID && to != WM_TYPE_INVALID, "bad types: %s", line);
        size_t n = ref_input(from, src);
        for (int scalar = 0; scalar < 2; scalar++) {
            CHECK_STATUS(convert_path(scalar, from, to, src, dst, n), WM_OK);
            unsigned long long got = fnv1a(dst, n * elem_size(to));
            CHECK_MSG(got == want, "%s -> %s (%s path): %016llx, reference %016llx", from_name,
                      to_name, scalar ? "portable" : "simd", got, want);
        }
        lines++;
    }
    fclose(in);
    CHECK_MSG(lines >= 84, "only %d reference lines", lines);
}

/* ---- exact values of types ggml lacks ---- */

static float conv1(wm_type from, const void *src) {
    float f;
    CHECK_STATUS(wm_convert(from, WM_TYPE_F32, src, &f, 1), WM_OK);
    return f;
}

WM_TEST(float8_and_integers) {
    uint8_t b;
    /* F8_E4M3 (fn): bias 7, 448 largest, S.1111.111 NaN, subnormals m * 2^-9 */
    b = 0x38;
    CHECK(conv1(WM_TYPE_F8_E4M3, &b) == 1.0f);
    b = 0x7E;
    CHECK(conv1(WM_TYPE_F8_E4M3, &b) == 448.0f);
    b = 0xFE;
    CHECK(conv1(WM_TYPE_F8_E4M3, &b) == -448.0f);
    b = 0x7F;
    CHECK(isnan(conv1(WM_TYPE_F8_E4M3, &b)));
    b = 0x01;
    CHECK(conv1(WM_TYPE_F8_E4M3, &b) == ldexpf(1, -9));
    b = 0x07;
    CHECK(conv1(WM_TYPE_F8_E4M3, &b) == 7 * ldexpf(1, -9));
    b = 0x08;
    CHECK(conv1(WM_TYPE_F8_E4M3, &b) == ldexpf(1, -6));
    b = 0x80;
    CHECK(wm__f32_bits(conv1(WM_TYPE_F8_E4M3, &b)) == 0x80000000u);
    /* F8_E5M2: the top byte of a half */
    b = 0x3C;
    CHECK(conv1(WM_TYPE_F8_E5M2, &b) == 1.0f);
    b = 0x7B;
    CHECK(conv1(WM_TYPE_F8_E5M2, &b) == 57344.0f);
    b = 0x7C;
    CHECK(isinf(conv1(WM_TYPE_F8_E5M2, &b)));
    b = 0x01;
    CHECK(conv1(WM_TYPE_F8_E5M2, &b) == ldexpf(1, -16));
    /* F8_E8M0: 2^(x-127), 0xFF NaN */
    b = 127;
    CHECK(conv1(WM_TYPE_F8_E8M0, &b) == 1.0f);
    b = 0;
    CHECK(conv1(WM_TYPE_F8_E8M0, &b) == ldexpf(1, -127));
    b = 254;
    CHECK(conv1(WM_TYPE_F8_E8M0, &b) == ldexpf(1, 127));
    b = 255;
    CHECK(isnan(conv1(WM_TYPE_F8_E8M0, &b)));
    /* every float8 code converts to half exactly when it is representable */
    for (int v = 0; v < 256; v++) {
        uint8_t c = (uint8_t)v;
        uint16_t hv;
        float f = conv1(WM_TYPE_F8_E4M3, &c);
        CHECK_STATUS(wm_convert(WM_TYPE_F8_E4M3, WM_TYPE_F16, &c, &hv, 1), WM_OK);
        CHECK(isnan(f) ? (hv & 0x7FFF) == 0x7E00 : wm__f16_to_f32(hv) == f);
    }
    int8_t i8 = -128;
    CHECK(conv1(WM_TYPE_I8, &i8) == -128.0f);
    uint16_t u16 = 65535;
    CHECK(conv1(WM_TYPE_U16, &u16) == 65535.0f);
    int32_t i32 = -16777217;
    CHECK(conv1(WM_TYPE_I32, &i32) == -16777216.0f);
    uint64_t u64 = UINT64_MAX;
    CHECK(conv1(WM_TYPE_U64, &u64) == 18446744073709551616.0f);
    uint8_t bl[3] = {0, 1, 7};
    float fb[3];
    CHECK_STATUS(wm_convert(WM_TYPE_BOOL, WM_TYPE_F32, bl, fb, 3), WM_OK);
    CHECK(fb[0] == 0.0f && fb[1] == 1.0f && fb[2] == 1.0f);
}

/* F64 and 32-bit integers narrow to half/bfloat16 with one rounding: a value just above a tie
 * must round up although the float nearest to it is the tie itself. */
WM_TEST(single_rounding_from_wide_types) {
    double d = 1.0 + ldexp(1, -11) + ldexp(1, -40); /* above the midpoint of 1 and 1+2^-10 */
    uint16_t hv;
    CHECK_STATUS(wm_convert(WM_TYPE_F64, WM_TYPE_F16, &d, &hv, 1), WM_OK);
    CHECK_EQ(hv, 0x3C01);
    d = 1.0 + ldexp(1, -8) + ldexp(1, -50); /* bfloat16: above the midpoint of 1 and 1+2^-7 */
    CHECK_STATUS(wm_convert(WM_TYPE_F64, WM_TYPE_BF16, &d, &hv, 1), WM_OK);
    CHECK_EQ(hv, 0x3F81);
    int32_t i = (1 << 24) + (1 << 16) + 1; /* 2^24 + 2^16 + 1: above a bfloat16 tie */
    CHECK_STATUS(wm_convert(WM_TYPE_I32, WM_TYPE_BF16, &i, &hv, 1), WM_OK);
    CHECK_EQ(hv, 0x4B81);
    double back;
    float one = 1.5f;
    CHECK_STATUS(wm_convert(WM_TYPE_F32, WM_TYPE_F64, &one, &back, 1), WM_OK);
    CHECK(back == 1.5);
    d = 1e300;
    CHECK_STATUS(wm_convert(WM_TYPE_F64, WM_TYPE_F16, &d, &hv, 1), WM_OK);
    CHECK_EQ(hv, 0x7C00);
}

/* ---- API contract ---- */

WM_TEST(api_errors) {
    float f[256];
    uint8_t q[144] = {0};
    CHECK(wm_convert_supported(WM_TYPE_Q4_K, WM_TYPE_F32));
    CHECK(wm_convert_supported(WM_TYPE_Q4_K, WM_TYPE_BF16));
    CHECK(wm_convert_supported(WM_TYPE_F16, WM_TYPE_F64));
    CHECK(!wm_convert_supported(WM_TYPE_F32, WM_TYPE_Q4_0));
    CHECK(!wm_convert_supported(WM_TYPE_F6_E2M3, WM_TYPE_F32));
    CHECK(!wm_convert_supported((wm_type)4, WM_TYPE_F32));
    CHECK(!wm_convert_supported((wm_type)999, WM_TYPE_F32));
    CHECK_STATUS(wm_convert(WM_TYPE_F32, WM_TYPE_Q4_0, f, q, 32), WM_EINVAL);
    CHECK_STATUS(wm_convert(WM_TYPE_Q4_K, WM_TYPE_F32, q, f, 255), WM_EINVAL);
    CHECK_STATUS(wm_convert(WM_TYPE_Q4_K, WM_TYPE_F32, NULL, f, 256), WM_EINVAL);
    CHECK_STATUS(wm_convert(WM_TYPE_Q4_K, WM_TYPE_F32, q, NULL, 256), WM_EINVAL);
    CHECK_STATUS(wm_convert(WM_TYPE_Q4_K, WM_TYPE_F32, NULL, NULL, 0), WM_OK);
    CHECK_STATUS(wm_convert(WM_TYPE_Q4_K, WM_TYPE_F32, q, (char *)f + 2, 256), WM_EINVAL);
    CHECK_STATUS(wm_convert(WM_TYPE_F32, WM_TYPE_F16, f, (char *)f + 1, 1), WM_EINVAL);
    CHECK_STATUS(wm_convert(WM_TYPE_Q4_K, WM_TYPE_F32, q, f, 256), WM_OK);
    for (int i = 0; i < 256; i++)
        CHECK(f[i] == 0.0f);
    uint16_t h[4] = {0x3C00, 0xC000, 0x7C00, 0x0001}, h2[4];
    CHECK_STATUS(wm_convert(WM_TYPE_F16, WM_TYPE_F16, h, h2, 4), WM_OK);
    CHECK(memcmp(h, h2, sizeof h) == 0);
}

/* Tails shorter than a vector and unaligned buffers give the same bytes on both paths. */
WM_TEST(simd_tails_and_alignment) {
    static uint8_t raw[4096 + 64];
    static float a[2048 + 8], b[2048 + 8];
    uint64_t s = 5;
    rng_fill(&s, raw, sizeof raw);
    for (size_t n = 1; n < 70; n++) {
        for (int off = 0; off < 3; off++) {
            CHECK_STATUS(convert_path(0, WM_TYPE_F16, WM_TYPE_F32, raw + 2 * off + 1, a + off, n),
                         WM_OK);
            CHECK_STATUS(convert_path(1, WM_TYPE_F16, WM_TYPE_F32, raw + 2 * off + 1, b + off, n),
                         WM_OK);
            CHECK(memcmp(a + off, b + off, n * 4) == 0);
            uint16_t *ha = (uint16_t *)(raw + 2048), *hb = (uint16_t *)(raw + 3072);
            CHECK_STATUS(convert_path(0, WM_TYPE_F32, WM_TYPE_BF16, a + off, ha, n), WM_OK);
            CHECK_STATUS(convert_path(1, WM_TYPE_F32, WM_TYPE_BF16, a + off, hb, n), WM_OK);
            CHECK(memcmp(ha, hb, n * 2) == 0);
        }
    }
}

/* Outputs of 4 MiB and more go through a stage and non-temporal stores when dst is 32-byte
 * aligned: same bytes as the portable path, aligned or not, for every block size. */
WM_TEST(large_output_streams) {
    static const wm_type ts[] = {WM_TYPE_F16,  WM_TYPE_Q4_0,  WM_TYPE_Q4_K,
                                 WM_TYPE_Q1_0, WM_TYPE_NVFP4, WM_TYPE_Q6_K};
    size_t n = (1u << 20) + 256 * 3 + 13; /* 4 MiB of floats, a partial stage, a partial vector */
    int prev_stream = wm__convert_force_stream(1); /* Intel only by default; test it everywhere */
    size_t cap = (n * 4 + 64 + 63) / 64 * 64; /* aligned_alloc wants a multiple of the alignment */
    uint8_t *src = malloc(n * 2);
    float *a = aligned_alloc(64, cap), *b = aligned_alloc(64, cap);
    CHECK(src && a && b);
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
        size_t be = wm_type_block_elems(ts[k]), m = n / be * be;
        make_blocks(ts[k], m / be, 99 + k, src);
        for (int off = 0; off < 2; off++) {
            memset(a, 0x5A, cap);
            memset(b, 0xA5, cap);
            CHECK_STATUS(convert_path(0, ts[k], WM_TYPE_F32, src, a + off, m), WM_OK);
            CHECK_STATUS(convert_path(1, ts[k], WM_TYPE_F32, src, b + off, m), WM_OK);
            size_t at = first_diff(a + off, b + off, m * 4);
            CHECK_MSG(at == m * 4, "%s offset %d: element %zu differs", wm_type_name(ts[k]), off,
                      at / 4);
            CHECK(((uint8_t *)a)[(m + (size_t)off) * 4] == 0x5A); /* nothing written past the end */
        }
    }
    wm__convert_force_stream(prev_stream);
    free(src);
    free(a);
    free(b);
}

/* ---- weightmap cat ---- */

/* Runs a shell command, captures up to cap bytes of stdout; returns the exit status. */
static int run_capture(const char *cmd, uint8_t *buf, size_t cap, size_t *len) {
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    *len = fread(buf, 1, cap, p);
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* `weightmap cat PATH NAME OPTS` exits 0 and writes exactly the `len` bytes at `want`. */
static void check_cat(const char *path, const char *name, const char *opts, const void *want,
                      size_t len) {
    static uint8_t out[1 << 20];
    char cmd[1024];
    size_t got;
    snprintf(cmd, sizeof cmd, "'%s' cat '%s' '%s' %s", WM_CLI, path, name, opts);
    CHECK_EQ(run_capture(cmd, out, sizeof out, &got), 0);
    CHECK_MSG(got == len && memcmp(out, want, len) == 0, "%s: %zu bytes, want %zu, or not equal",
              cmd, got, len);
}

/* Opens the file at `path` (which must succeed) and reads its bytes into *bytes (malloc'd). */
static wm_file *open_with_bytes(const char *path, uint8_t **bytes) {
    wm_file *f;
    CHECK_STATUS(wm_file_open(path, &f, NULL), WM_OK);
    size_t len;
    *bytes = wmt_read_file(path, &len);
    return f;
}

/* Every tensor of a safetensors file raw, and four dtypes as f32, against the file's bytes. */
WM_TEST(cli_cat_safetensors) {
    const char *path = wmt_fixture("safetensors/hf-sample-overall.safetensors");
    uint8_t *file;
    wm_file *f = open_with_bytes(path, &file);
    uint8_t want[4096];
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        check_cat(path, t.name, "", file + t.offset, t.nbytes);
        if (t.type != WM_TYPE_F16 && t.type != WM_TYPE_F64 && t.type != WM_TYPE_I32 &&
            t.type != WM_TYPE_U8)
            continue; /* a process launch each: a few dtypes are enough for --as */
        CHECK_STATUS(wm_convert(t.type, WM_TYPE_F32, file + t.offset, want, t.n_elements), WM_OK);
        check_cat(path, t.name, "--as=f32", want, t.n_elements * 4);
    }
    free(file);
    wm_file_close(f);
}

/* The seven IQ codebook types through the whole library: a GGUF with one tensor of each loads
 * with conversion to F32 (the load's worker threads), and `weightmap cat --as bf16` writes what
 * wm_convert gives. */
WM_TEST(iq_types_load_and_cat) {
    static const wm_type ts[] = {WM_TYPE_IQ2_XXS, WM_TYPE_IQ2_XS, WM_TYPE_IQ2_S, WM_TYPE_IQ3_XXS,
                                 WM_TYPE_IQ3_S,   WM_TYPE_IQ1_S,  WM_TYPE_IQ1_M};
    enum { NT = sizeof ts / sizeof ts[0], NB = 8, N = NB * 256 };
    static uint8_t data[NT][NB * 110];
    static float want[N];
    static uint16_t want16[N];
    ggb g;
    ggb_begin(&g, 3, NT, 0);
    uint64_t off = 0;
    for (size_t k = 0; k < NT; k++) {
        ggb_tensor1(&g, wm_type_name(ts[k]), N, (uint32_t)ts[k], off);
        off += (NB * wm_type_block_bytes(ts[k]) + 31) / 32 * 32;
    }
    ggb_pad(&g, 32);
    for (size_t k = 0; k < NT; k++) {
        size_t bytes = NB * wm_type_block_bytes(ts[k]);
        make_blocks(ts[k], NB, 4242u + (unsigned)k, data[k]);
        wmt_put(&g.b, data[k], bytes);
        ggb_pad(&g, 32);
    }
    const char *path = ggb_write(&g, "iq.gguf");
    ggb_free(&g);

    wm_file *f;
    CHECK_STATUS(wm_file_open(path, &f, NULL), WM_OK);
    wm_convert_rule rule = {NULL, WM_TYPE_INVALID, WM_TYPE_F32};
    wm_load_options o = {.mode = WM_MODE_HEAP, .threads = 2, .convert = &rule, .n_convert = 1};
    wm_model *m;
    wm_error err;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_OK);
    for (size_t k = 0; k < NT; k++) {
        wm_type type;
        uint64_t nbytes;
        CHECK_STATUS(wm_model_tensor_info(m, k, &type, &nbytes), WM_OK);
        CHECK(type == WM_TYPE_F32 && nbytes == N * 4);
        CHECK_STATUS(wm_convert(ts[k], WM_TYPE_F32, data[k], want, N), WM_OK);
        CHECK_MSG(memcmp(wm_model_tensor_data(m, k), want, sizeof want) == 0,
                  "%s converted on load differs", wm_type_name(ts[k]));
        CHECK_STATUS(wm_convert(ts[k], WM_TYPE_BF16, data[k], want16, N), WM_OK);
        check_cat(path, wm_type_name(ts[k]), "--as bf16", want16, sizeof want16);
    }
    wm_model_release(m);
    wm_file_close(f);
}

WM_TEST(cli_cat) {
    const char *path = wmt_fixture("gguf/stories260K-q8_0.gguf");
    uint8_t *file;
    wm_file *f = open_with_bytes(path, &file);
    static uint8_t out[1 << 20], want[1 << 20];
    char cmd[1024];
    size_t len;
    int tested = 0, per_type[3] = {0, 0, 0}; /* two tensors of each of Q8_0, F16, F32 */
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        if (t.type != WM_TYPE_Q8_0 && t.type != WM_TYPE_F16 && t.type != WM_TYPE_F32) continue;
        int *seen = &per_type[t.type == WM_TYPE_Q8_0 ? 0 : t.type == WM_TYPE_F16 ? 1 : 2];
        if (*seen >= 2) continue;
        (*seen)++;
        check_cat(path, t.name, "", file + t.offset, t.nbytes);
        const char *as[3] = {"f32", "f16", "bf16"};
        for (int k = 0; k < 3; k++) {
            wm_type to = wm_type_from_name(as[k]);
            size_t wlen = (size_t)t.n_elements * elem_size(to);
            if (wlen > sizeof want) continue;
            CHECK_STATUS(wm_convert(t.type, to, file + t.offset, want, t.n_elements), WM_OK);
            char opts[16];
            snprintf(opts, sizeof opts, "--as %s", as[k]);
            check_cat(path, t.name, opts, want, wlen);
        }
        tested++;
    }
    CHECK_EQ(tested, 6);
    snprintf(cmd, sizeof cmd, "'%s' cat '%s' no.such.tensor 2>&1", WM_CLI, path);
    CHECK_EQ(run_capture(cmd, out, sizeof out - 1, &len), 1);
    out[len] = 0;
    CHECK_MSG(strstr((char *)out, "no tensor 'no.such.tensor'") != NULL, "stderr: %s", (char *)out);
    snprintf(cmd, sizeof cmd, "'%s' cat '%s' output.weight --as q4_0 2>/dev/null", WM_CLI, path);
    CHECK_EQ(run_capture(cmd, out, sizeof out, &len), 2);
    snprintf(cmd, sizeof cmd, "'%s' cat '%s' 2>/dev/null", WM_CLI, path);
    CHECK_EQ(run_capture(cmd, out, sizeof out, &len), 2);
    snprintf(cmd, sizeof cmd, "'%s' cat /no/such/file.gguf x 2>/dev/null", WM_CLI);
    CHECK_EQ(run_capture(cmd, out, sizeof out, &len), 1);
    /* a terminal on stdout is refused (usage error) unless --force; `script` provides one */
    if (system("command -v script >/dev/null 2>&1") == 0) {
        snprintf(cmd, sizeof cmd,
                 "script -qec \"'%s' cat '%s' output_norm.weight\" /dev/null >/dev/null 2>&1",
                 WM_CLI, path);
        int rc = system(cmd);
        CHECK_EQ(WEXITSTATUS(rc), 2);
        snprintf(
            cmd, sizeof cmd,
            "script -qec \"'%s' cat '%s' output_norm.weight --force\" /dev/null >/dev/null 2>&1",
            WM_CLI, path);
        rc = system(cmd);
        CHECK_EQ(WEXITSTATUS(rc), 0);
    }
    free(file);
    wm_file_close(f);
}

/* ---- the AArch64 CLI against the peer ---- */

/* `CLI cat PATH NAME OPTS` (CLI: the AArch64 build's qemu wrapper) exits 0 and writes exactly
 * the `len` bytes at `want`; names the first differing element. */
static void check_cat_with(const char *cli, const char *path, const char *name, const char *opts,
                           const void *want, size_t len, size_t elem) {
    static uint8_t out[1 << 20];
    char cmd[2048];
    size_t got;
    snprintf(cmd, sizeof cmd, "'%s' cat '%s' '%s' %s", cli, path, name, opts);
    CHECK_EQ(run_capture(cmd, out, sizeof out, &got), 0);
    size_t at = first_diff(out, want, got < len ? got : len);
    CHECK_MSG(got == len && at == len, "%s %s: %zu bytes (want %zu), element %zu differs", name,
              opts, got, len, at / elem);
}

/* The types with NEON kernels (src/convert/neon.c), then the two float widths. */
static const wm_type arm64_types[] = {WM_TYPE_Q8_0,  WM_TYPE_Q4_0, WM_TYPE_Q4_1,   WM_TYPE_Q5_0,
                                      WM_TYPE_Q5_1,  WM_TYPE_Q2_K, WM_TYPE_Q3_K,   WM_TYPE_Q4_K,
                                      WM_TYPE_Q5_K,  WM_TYPE_Q6_K, WM_TYPE_IQ4_NL, WM_TYPE_IQ4_XS,
                                      WM_TYPE_MXFP4, WM_TYPE_F16,  WM_TYPE_BF16,   WM_TYPE_F32};
enum { ARM64_NT = sizeof arm64_types / sizeof arm64_types[0], ARM64_N = 65536 };

/* Tensor k's bytes: quantized types half random valid blocks, half blocks the peer quantized
 * from random floats; F16 and BF16 every 16-bit pattern; F32 random patterns with the narrowing
 * edges (NaNs, infinities, subnormals, ties) spread through them. */
static size_t arm64_tensor(size_t k, uint8_t *out) {
    wm_type t = arm64_types[k];
    if (t == WM_TYPE_F16 || t == WM_TYPE_BF16) {
        for (uint32_t i = 0; i < ARM64_N; i++)
            memcpy(out + 2 * i, &(uint16_t){(uint16_t)i}, 2);
        return ARM64_N * 2;
    }
    if (t == WM_TYPE_F32) {
        static const uint32_t edge[] = {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u,
                                        0xFFFFFFFFu, 0x477FF000u, 0x477FEFFFu, 0x33000000u,
                                        0x33000001u, 0x387FC000u, 0x00000001u, 0x3F808000u,
                                        0x3F818000u, 0x80000000u, 0x7F7FFFFFu, 0x38800000u};
        uint64_t s = 64;
        for (uint32_t i = 0; i < ARM64_N; i++) {
            uint32_t u = (uint32_t)rng_next(&s);
            if (i % 3 == 1) u = edge[(u >> 4) % 16];
            if (i % 3 == 2) u = (u & 0x80000000u) | (0x33000000u + (u & 0x07FFFFFFu) % 0x14800000u);
            memcpy(out + 4 * i, &u, 4);
        }
        return ARM64_N * 4;
    }
    size_t be = wm_type_block_elems(t), bb = wm_type_block_bytes(t), n = 8192, nb = n / be;
    static float xs[8192];
    make_blocks(t, nb, 2100u + (unsigned)k, out);
    uint64_t s = 4200u + k;
    for (size_t i = 0; i < n / 2; i++)
        xs[i] = (float)((int64_t)(rng_next(&s) % 20001) - 10000) / 700.0f;
    if (!peer_quantize((int)t, xs, out + nb / 2 * bb, n / 2))
        make_blocks(t, nb / 2, 2200u + (unsigned)k, out + nb / 2 * bb);
    return nb * bb;
}

/* The AArch64 CLI (WM_ARM64_CLI, run under qemu by make test-arm64) writes, for every type with
 * a NEON kernel, the floats llama.cpp's own dequantizers (the x86-64 peer) give, and narrows
 * floats to f16 and bf16 as ggml's rows do: its NEON path bit-identical to ggml's reference. */
WM_TEST(arm64_cli_matches_peer) {
    const char *cli = getenv("WM_ARM64_CLI");
    if (!cli) WM_SKIP("set WM_ARM64_CLI to the AArch64 CLI (make test-arm64 does)");
    NEED_PEER();
    static uint8_t data[ARM64_NT][ARM64_N * 4];
    static size_t bytes[ARM64_NT];
    static float want[ARM64_N];
    static uint16_t want16[ARM64_N];
    ggb g;
    ggb_begin(&g, 3, ARM64_NT, 0);
    uint64_t off = 0;
    for (size_t k = 0; k < ARM64_NT; k++) {
        bytes[k] = arm64_tensor(k, data[k]);
        uint64_t n =
            bytes[k] / wm_type_block_bytes(arm64_types[k]) * wm_type_block_elems(arm64_types[k]);
        ggb_tensor1(&g, wm_type_name(arm64_types[k]), n, (uint32_t)arm64_types[k], off);
        off += (bytes[k] + 31) / 32 * 32;
    }
    ggb_pad(&g, 32);
    for (size_t k = 0; k < ARM64_NT; k++) {
        wmt_put(&g.b, data[k], bytes[k]);
        ggb_pad(&g, 32);
    }
    const char *path = ggb_write(&g, "arm64.gguf");
    ggb_free(&g);
    for (size_t k = 0; k < ARM64_NT; k++) {
        wm_type t = arm64_types[k];
        const char *name = wm_type_name(t);
        size_t n = bytes[k] / wm_type_block_bytes(t) * wm_type_block_elems(t);
        if (t == WM_TYPE_F32) {
            peer.fp32_to_fp16_row((const float *)data[k], want16, (int64_t)n);
            check_cat_with(cli, path, name, "--as f16", want16, n * 2, 2);
            peer.fp32_to_bf16_row((const float *)data[k], want16, (int64_t)n);
            check_cat_with(cli, path, name, "--as bf16", want16, n * 2, 2);
            continue;
        }
        if (t == WM_TYPE_F16)
            peer.fp16_to_fp32_row((const uint16_t *)data[k], want, (int64_t)n);
        else if (t == WM_TYPE_BF16)
            peer.bf16_to_fp32_row((const uint16_t *)data[k], want, (int64_t)n);
        else
            peer_to_float(peer.traits((int)t))(data[k], want, (int64_t)n);
        check_cat_with(cli, path, name, "--as f32", want, n * 4, 4);
    }
}
