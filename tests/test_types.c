/*
 * test_types.c: the element-type table: 43 ggml ids with their block sizes, removed ids without
 * a name or size, names both ways; and, when llama.cpp's libggml-base is installed (the npm peer
 * as scripts/peer.sh installs it, or in the folder named by WM_PEER_DIR), the same figures from
 * ggml itself.
 */
#include "wmtest.h"

#include <dlfcn.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const int removed[] = {4, 5, 31, 32, 33, 36, 37, 38};

static int is_removed(int id) {
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++)
        if (removed[i] == id) return 1;
    return 0;
}

WM_TEST(table_ids_and_removed) {
    CHECK_EQ(WM_GGML_TYPE_COUNT, 43);
    int named = 0;
    for (int id = 0; id < WM_GGML_TYPE_COUNT; id++) {
        const char *name = wm_type_name((wm_type)id);
        uint32_t elems = wm_type_block_elems((wm_type)id), bytes = wm_type_block_bytes((wm_type)id);
        if (is_removed(id)) {
            CHECK_MSG(name == NULL && elems == 0 && bytes == 0, "removed id %d has %s %u %u", id,
                      name ? name : "(null)", elems, bytes);
            continue;
        }
        named++;
        CHECK_MSG(name != NULL && elems > 0 && bytes > 0, "id %d", id);
        CHECK_EQ(wm_type_from_name(name), id);
    }
    CHECK_EQ(named, 43 - 8);
    static const int outside[] = {-1, 43, 44, 99, 114, 1000, -100};
    for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
        CHECK(wm_type_name((wm_type)outside[i]) == NULL);
        CHECK_EQ(wm_type_block_elems((wm_type)outside[i]), 0);
        CHECK_EQ(wm_type_block_bytes((wm_type)outside[i]), 0);
    }
}

WM_TEST(table_known_sizes) {
    static const struct {
        wm_type t;
        const char *name;
        uint32_t elems, bytes;
    } rows[] = {
        {WM_TYPE_F32, "f32", 1, 4},
        {WM_TYPE_F16, "f16", 1, 2},
        {WM_TYPE_Q4_0, "q4_0", 32, 18},
        {WM_TYPE_Q4_1, "q4_1", 32, 20},
        {WM_TYPE_Q5_0, "q5_0", 32, 22},
        {WM_TYPE_Q5_1, "q5_1", 32, 24},
        {WM_TYPE_Q8_0, "q8_0", 32, 34},
        {WM_TYPE_Q8_1, "q8_1", 32, 36},
        {WM_TYPE_Q2_K, "q2_K", 256, 84},
        {WM_TYPE_Q3_K, "q3_K", 256, 110},
        {WM_TYPE_Q4_K, "q4_K", 256, 144},
        {WM_TYPE_Q5_K, "q5_K", 256, 176},
        {WM_TYPE_Q6_K, "q6_K", 256, 210},
        {WM_TYPE_Q8_K, "q8_K", 256, 292},
        {WM_TYPE_IQ2_XXS, "iq2_xxs", 256, 66},
        {WM_TYPE_IQ2_XS, "iq2_xs", 256, 74},
        {WM_TYPE_IQ3_XXS, "iq3_xxs", 256, 98},
        {WM_TYPE_IQ1_S, "iq1_s", 256, 50},
        {WM_TYPE_IQ4_NL, "iq4_nl", 32, 18},
        {WM_TYPE_IQ3_S, "iq3_s", 256, 110},
        {WM_TYPE_IQ2_S, "iq2_s", 256, 82},
        {WM_TYPE_IQ4_XS, "iq4_xs", 256, 136},
        {WM_TYPE_I8, "i8", 1, 1},
        {WM_TYPE_I16, "i16", 1, 2},
        {WM_TYPE_I32, "i32", 1, 4},
        {WM_TYPE_I64, "i64", 1, 8},
        {WM_TYPE_F64, "f64", 1, 8},
        {WM_TYPE_IQ1_M, "iq1_m", 256, 56},
        {WM_TYPE_BF16, "bf16", 1, 2},
        {WM_TYPE_TQ1_0, "tq1_0", 256, 54},
        {WM_TYPE_TQ2_0, "tq2_0", 256, 66},
        {WM_TYPE_MXFP4, "mxfp4", 32, 17},
        {WM_TYPE_NVFP4, "nvfp4", 64, 36},
        {WM_TYPE_Q1_0, "q1_0", 128, 18},
        {WM_TYPE_Q2_0, "q2_0", 64, 18},
        {WM_TYPE_BOOL, "bool", 1, 1},
        {WM_TYPE_U64, "u64", 1, 8},
        {WM_TYPE_F8_E4M3, "f8_e4m3", 1, 1},
        {WM_TYPE_F4, "f4", 2, 1},
        {WM_TYPE_F6_E2M3, "f6_e2m3", 4, 3},
        {WM_TYPE_C64, "c64", 1, 8},
        {WM_TYPE_F8_E4M3FNUZ, "f8_e4m3fnuz", 1, 1},
        {WM_TYPE_F8_E5M2FNUZ, "f8_e5m2fnuz", 1, 1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        CHECK_MSG(wm_type_name(rows[i].t) && strcmp(wm_type_name(rows[i].t), rows[i].name) == 0,
                  "type %d is named %s, want %s", rows[i].t,
                  wm_type_name(rows[i].t) ? wm_type_name(rows[i].t) : "(null)", rows[i].name);
        CHECK_EQ(wm_type_block_elems(rows[i].t), rows[i].elems);
        CHECK_EQ(wm_type_block_bytes(rows[i].t), rows[i].bytes);
    }
    CHECK_EQ(wm_type_from_name("Q4_K"), WM_TYPE_Q4_K);
    CHECK_EQ(wm_type_from_name("BF16"), WM_TYPE_BF16);
    CHECK_EQ(wm_type_from_name("q4_0_4_4"), WM_TYPE_INVALID);
    CHECK_EQ(wm_type_from_name(""), WM_TYPE_INVALID);
    CHECK_EQ(wm_type_from_name(NULL), WM_TYPE_INVALID);
}

WM_TEST(table_matches_ggml) {
    const char *lib = wmt_peer_lib("libggml-base.so");
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    CHECK_MSG(h != NULL, "dlopen %s: %s", lib, dlerror());
    size_t (*type_size)(int);
    int64_t (*blck_size)(int);
    const char *(*type_name)(int);
    *(void **)&type_size = dlsym(h, "ggml_type_size");
    *(void **)&blck_size = dlsym(h, "ggml_blck_size");
    *(void **)&type_name = dlsym(h, "ggml_type_name");
    CHECK(type_size && blck_size && type_name);
    /* Only ids 0..42: ggml reads its trait table without a bound. */
    for (int id = 0; id < WM_GGML_TYPE_COUNT; id++) {
        uint64_t bytes = type_size(id);
        int64_t elems = blck_size(id);
        const char *name = type_name(id);
        if (elems == 0) {
            /* Removed in ggml: "DEPRECATED" or "TYPE_..._REMOVED, use ...". */
            CHECK_MSG(wm_type_name((wm_type)id) == NULL, "id %d is removed in ggml (%s)", id,
                      name ? name : "(null)");
            CHECK_EQ(wm_type_block_bytes((wm_type)id), 0);
            CHECK(is_removed(id));
            continue;
        }
        CHECK_MSG(wm_type_name((wm_type)id) && name && strcmp(wm_type_name((wm_type)id), name) == 0,
                  "id %d: ours %s, ggml %s", id,
                  wm_type_name((wm_type)id) ? wm_type_name((wm_type)id) : "(null)", name);
        CHECK_EQ(wm_type_block_elems((wm_type)id), (uint64_t)elems);
        CHECK_EQ(wm_type_block_bytes((wm_type)id), bytes);
    }
    dlclose(h);
}
