/*
 * types.c: the element-type table: every ggml type id (0..42) with its block size and bytes per
 * block, removed ids marked, and the types only safetensors carries.
 * Values are ggml's (checked against libggml-base's ggml_type_size/ggml_blck_size in
 * tests/test_types.c when the peer is installed).
 */
#include "internal.h"

typedef struct type_row {
    const char *name; /* NULL: unknown or removed */
    uint32_t elems;
    uint32_t bytes;
} type_row;

static const type_row ggml_types[WM_GGML_TYPE_COUNT] = {
    [WM_TYPE_F32] = {"f32", 1, 4},
    [WM_TYPE_F16] = {"f16", 1, 2},
    [WM_TYPE_Q4_0] = {"q4_0", 32, 18},
    [WM_TYPE_Q4_1] = {"q4_1", 32, 20},
    [WM_TYPE_Q5_0] = {"q5_0", 32, 22},
    [WM_TYPE_Q5_1] = {"q5_1", 32, 24},
    [WM_TYPE_Q8_0] = {"q8_0", 32, 34},
    [WM_TYPE_Q8_1] = {"q8_1", 32, 36},
    [WM_TYPE_Q2_K] = {"q2_K", 256, 84},
    [WM_TYPE_Q3_K] = {"q3_K", 256, 110},
    [WM_TYPE_Q4_K] = {"q4_K", 256, 144},
    [WM_TYPE_Q5_K] = {"q5_K", 256, 176},
    [WM_TYPE_Q6_K] = {"q6_K", 256, 210},
    [WM_TYPE_Q8_K] = {"q8_K", 256, 292},
    [WM_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66},
    [WM_TYPE_IQ2_XS] = {"iq2_xs", 256, 74},
    [WM_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98},
    [WM_TYPE_IQ1_S] = {"iq1_s", 256, 50},
    [WM_TYPE_IQ4_NL] = {"iq4_nl", 32, 18},
    [WM_TYPE_IQ3_S] = {"iq3_s", 256, 110},
    [WM_TYPE_IQ2_S] = {"iq2_s", 256, 82},
    [WM_TYPE_IQ4_XS] = {"iq4_xs", 256, 136},
    [WM_TYPE_I8] = {"i8", 1, 1},
    [WM_TYPE_I16] = {"i16", 1, 2},
    [WM_TYPE_I32] = {"i32", 1, 4},
    [WM_TYPE_I64] = {"i64", 1, 8},
    [WM_TYPE_F64] = {"f64", 1, 8},
    [WM_TYPE_IQ1_M] = {"iq1_m", 256, 56},
    [WM_TYPE_BF16] = {"bf16", 1, 2},
    [WM_TYPE_TQ1_0] = {"tq1_0", 256, 54},
    [WM_TYPE_TQ2_0] = {"tq2_0", 256, 66},
    [WM_TYPE_MXFP4] = {"mxfp4", 32, 17},
    [WM_TYPE_NVFP4] = {"nvfp4", 64, 36},
    [WM_TYPE_Q1_0] = {"q1_0", 128, 18},
    [WM_TYPE_Q2_0] = {"q2_0", 64, 18},
};

/* Types with no ggml id, from safetensors; indexed from WM_TYPE_BOOL. */
static const type_row st_types[] = {
    {"bool", 1, 1},        {"u8", 1, 1},          {"u16", 1, 2},     {"u32", 1, 4},
    {"u64", 1, 8},         {"f8_e4m3", 1, 1},     {"f8_e5m2", 1, 1}, {"f8_e8m0", 1, 1},
    {"f6_e2m3", 4, 3},     {"f6_e3m2", 4, 3},     {"f4", 2, 1},      {"c64", 1, 8},
    {"f8_e4m3fnuz", 1, 1}, {"f8_e5m2fnuz", 1, 1},
};

static const type_row *row(wm_type t) {
    if ((unsigned)t < WM_GGML_TYPE_COUNT) return ggml_types[t].name ? &ggml_types[t] : NULL;
    unsigned i = (unsigned)t - WM_TYPE_BOOL;
    if ((int)t >= WM_TYPE_BOOL && i < sizeof st_types / sizeof st_types[0]) return &st_types[i];
    return NULL;
}

const char *wm_type_name(wm_type type) {
    const type_row *r = row(type);
    return r ? r->name : NULL;
}

uint32_t wm_type_block_elems(wm_type type) {
    const type_row *r = row(type);
    return r ? r->elems : 0;
}

uint32_t wm_type_block_bytes(wm_type type) {
    const type_row *r = row(type);
    return r ? r->bytes : 0;
}

/* a and b equal but for the case of ASCII letters (the C locale's strcasecmp, without the POSIX
 * header: only src/os/ includes those) */
static bool same_name(const char *a, const char *b) {
    for (;; a++, b++) {
        int x = *a >= 'A' && *a <= 'Z' ? *a + 32 : *a, y = *b >= 'A' && *b <= 'Z' ? *b + 32 : *b;
        if (x != y) return false;
        if (!x) return true;
    }
}

wm_type wm_type_from_name(const char *name) {
    if (!name) return WM_TYPE_INVALID;
    for (int i = 0; i < WM_GGML_TYPE_COUNT; i++)
        if (ggml_types[i].name && same_name(ggml_types[i].name, name)) return (wm_type)i;
    for (unsigned i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
        if (same_name(st_types[i].name, name)) return (wm_type)(WM_TYPE_BOOL + (int)i);
    return WM_TYPE_INVALID;
}

/* ---- names of formats and metadata value types ---- */

const char *wm_format_name(wm_format format) {
    switch (format) {
    case WM_FORMAT_GGUF: return "gguf";
    case WM_FORMAT_SAFETENSORS: return "safetensors";
    }
    return "unknown";
}

const char *wm_value_type_name(wm_value_type type) {
    static const char *const names[WM_VALUE_TYPE_COUNT] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                                           "i32", "f32", "bool", "string", "array",
                                                           "u64", "i64", "f64"};
    return (unsigned)type < WM_VALUE_TYPE_COUNT ? names[type] : NULL;
}
