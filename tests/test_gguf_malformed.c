/*
 * test_gguf_malformed.c: hand-built GGUF files, one case per defect, each refused with the right
 * status, a message naming the file, the offset and the defect, *out NULL and nothing held
 * (ledger, descriptors, mappings); then the edge cases that must be accepted, and the typed
 * getters and array accessors on a file holding every value type.
 *
 * Sections: header (magic, version, endianness, counts); metadata (keys, strings, value types,
 * arrays, alignment, duplicates); tensor infos (names, dims, types, sizes, the CVE shapes);
 * the data section (offsets, overlap); accepted files; getters.
 */
#include "gguf_builder.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#define U64_MAX UINT64_MAX

/* A v3 file with one string KV and one tensor info given by the caller, padded to 32, then
 * `data` bytes. */
static void one_tensor(ggb *g, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset,
                       size_t data) {
    ggb_begin(g, 3, 1, 1);
    ggb_kv_str(g, "general.architecture", "test");
    ggb_tensor(g, "t", n_dims, ne, type, offset);
    ggb_pad(g, 32);
    ggb_data(g, data);
}

/* The header of a v3 file with no tensors and n_kv metadata entries (the caller writes them). */
static ggb kv_file(uint64_t n_kv) {
    ggb g;
    ggb_begin(&g, 3, 0, n_kv);
    return g;
}

/* A one-dimensional tensor info of n elements. */
typedef struct tensor1 {
    const char *name;
    uint64_t n;
    uint32_t type;
    uint64_t offset;
} tensor1;

/* A v3 file with no metadata and the tensor infos t[0..n_t), padded to 32, then `data` bytes. */
static void tensors_file(ggb *g, const tensor1 *t, size_t n_t, size_t data) {
    ggb_begin(g, 3, n_t, 0);
    for (size_t i = 0; i < n_t; i++)
        ggb_tensor1(g, t[i].name, t[i].n, t[i].type, t[i].offset);
    ggb_pad(g, 32);
    ggb_data(g, data);
}

/* Writes g as `name` (in the case's folder), requires its open to be refused with WM_EFORMAT
 * naming `needle` (CHECK_REFUSED), then frees g. */
#define REFUSE_BUILT(g, name, needle) refuse_built(__FILE__, __LINE__, (g), (name), (needle))
static void refuse_built(const char *file, int line, ggb *g, const char *name, const char *needle) {
    ggb_check_refused(file, line, ggb_write(g, name), WM_EFORMAT, needle);
    ggb_free(g);
}

/* tensors_file(ts, data) written as `name` is refused with WM_EFORMAT naming `needle`. */
#define REFUSE_TENSORS(ts, data, name, needle)                                                     \
    do {                                                                                           \
        ggb g_;                                                                                    \
        tensors_file(&g_, (ts), sizeof(ts) / sizeof(ts)[0], (data));                               \
        refuse_built(__FILE__, __LINE__, &g_, (name), (needle));                                   \
    } while (0)

static void refuse_one_tensor(uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset,
                              size_t data, const char *needle) {
    ggb g;
    one_tensor(&g, n_dims, ne, type, offset, data);
    REFUSE_BUILT(&g, "bad.gguf", needle);
}

/* ---- header ---- */

WM_TEST(bad_magic) {
    ggb g = kv_file(0);
    memcpy(g.b.p, "GGUG", 4);
    REFUSE_BUILT(&g, "magic.gguf", "bad magic");
}

WM_TEST(empty_and_tiny_files) {
    static const char *const prefixes[] = {"", "G", "GG", "GGU", "GGUF", "GGUF\3\0\0"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        const char *p = wmt_tmp("tiny.gguf");
        wmt_write_file(p, prefixes[i], strlen(prefixes[i]) + (i == 5 ? 1 : 0));
        CHECK_REFUSED(p, WM_EFORMAT, "needs");
    }
}

WM_TEST(versions_0_4_max) {
    static const uint32_t versions[] = {0, 4, UINT32_MAX};
    for (size_t i = 0; i < 3; i++) {
        ggb g;
        ggb_begin(&g, versions[i], 0, 0);
        REFUSE_BUILT(&g, "version.gguf", "unsupported GGUF version");
    }
}

WM_TEST(big_endian) {
    /* A v3 header written big-endian: version 0x03000000, counts byte-swapped. */
    ggb g;
    memset(&g, 0, sizeof g);
    wmt_put(&g.b, "GGUF", 4);
    wmt_put_u32(&g.b, __builtin_bswap32(3));
    wmt_put_u64(&g.b, __builtin_bswap64(0));
    wmt_put_u64(&g.b, __builtin_bswap64(1));
    wmt_put_u64(&g.b, __builtin_bswap64(4));
    wmt_put(&g.b, "test", 4);
    wmt_put_u32(&g.b, __builtin_bswap32(WM_VALUE_U32));
    wmt_put_u32(&g.b, __builtin_bswap32(1));
    REFUSE_BUILT(&g, "be.gguf", "big-endian GGUF");
}

WM_TEST(tensor_count_larger_than_file) {
    static const uint64_t counts[] = {1, 1000, (uint64_t)1 << 32, U64_MAX};
    for (size_t i = 0; i < 4; i++) {
        ggb g;
        ggb_begin(&g, 3, counts[i], 0);
        wmt_put_zeros(&g.b, 20); /* less than one tensor info needs */
        REFUSE_BUILT(&g, "nt.gguf", "n_tensors");
    }
}

WM_TEST(kv_count_larger_than_file) {
    static const uint64_t counts[] = {3, 1000, (uint64_t)1 << 32, U64_MAX};
    for (size_t i = 0; i < 4; i++) {
        ggb g;
        ggb_begin(&g, 3, 0, counts[i]);
        ggb_kv_u8(&g, "a", 1); /* 14 bytes: room for one KV, not three */
        wmt_put_zeros(&g.b, 14);
        REFUSE_BUILT(&g, "nkv.gguf", "n_kv");
    }
}

/* A sparse file of 4 GiB whose header claims 200 million entries (fewer than its bytes could
 * hold) is refused at its first entry, having allocated a bounded amount, not ~3x its size. */
WM_TEST(huge_counts_in_sparse_file) {
    for (int t = 0; t < 2; t++) {
        ggb g;
        ggb_begin(&g, 3, t ? 100000000 : 0, t ? 0 : 200000000);
        ggb_len(&g, 0); /* an empty key or tensor name */
        const char *p = ggb_write(&g, "sparse.gguf");
        CHECK(truncate(p, (off_t)4 << 30) == 0);
        wm_ledger_reset_peaks();
        CHECK_REFUSED(p, WM_EFORMAT, "empty");
        wm_ledger l = WM_LEDGER_INIT;
        wm_ledger_get(&l);
        CHECK_MSG(l.cat[WM_LEDGER_HEAP].peak < ((uint64_t)64 << 20), "heap peak %llu bytes",
                  (unsigned long long)l.cat[WM_LEDGER_HEAP].peak);
        ggb_free(&g);
    }
}

WM_TEST(v1_counts_larger_than_file) {
    ggb g;
    ggb_begin(&g, 1, UINT32_MAX, 0);
    REFUSE_BUILT(&g, "v1nt.gguf", "n_tensors");
    ggb_begin(&g, 1, 0, 2);
    ggb_kv_u8(&g, "a", 1);
    REFUSE_BUILT(&g, "v1nkv.gguf", "n_kv");
}

/* ---- metadata ---- */

WM_TEST(key_length_past_end) {
    static const uint64_t lens[] = {100, ((uint64_t)1 << 32) + 1, U64_MAX - 7, U64_MAX};
    for (size_t i = 0; i < 4; i++) {
        ggb g = kv_file(1);
        ggb_len(&g, lens[i]);
        wmt_put(&g.b, "general.name", 12);
        wmt_put_u32(&g.b, WM_VALUE_U8);
        wmt_put_u8(&g.b, 0);
        REFUSE_BUILT(&g, "klen.gguf", "past the end");
    }
}

WM_TEST(string_length_past_end) {
    static const uint64_t lens[] = {10, 1000, (uint64_t)1 << 63, U64_MAX - 1, U64_MAX};
    for (size_t i = 0; i < 5; i++) {
        ggb g = kv_file(1);
        ggb_key(&g, "general.name", WM_VALUE_STRING);
        ggb_len(&g, lens[i]);
        wmt_put(&g.b, "abcd", 4);
        REFUSE_BUILT(&g, "slen.gguf", "value of 'general.name'");
    }
    /* The same inside a string array, and in v1 (32-bit lengths). */
    ggb g = kv_file(1);
    ggb_kv_arr(&g, "tokens", WM_VALUE_STRING, 2);
    ggb_str(&g, "ok");
    ggb_len(&g, U64_MAX);
    wmt_put(&g.b, "xy", 2);
    REFUSE_BUILT(&g, "alen.gguf", "tokens");
    ggb_begin(&g, 1, 0, 1);
    ggb_key(&g, "general.name", WM_VALUE_STRING);
    ggb_len(&g, UINT32_MAX);
    wmt_put(&g.b, "abcd", 4);
    REFUSE_BUILT(&g, "v1slen.gguf", "general.name");
}

WM_TEST(empty_key) {
    ggb g = kv_file(2);
    ggb_kv_u8(&g, "a", 1);
    ggb_kv_u8(&g, "", 1);
    wmt_put_zeros(&g.b, 8); /* so that n_kv fits the bytes left */
    REFUSE_BUILT(&g, "ekey.gguf", "metadata key 1 is empty");
}

WM_TEST(key_with_nul) {
    ggb g = kv_file(1);
    ggb_strn(&g, "a\0b", 3);
    wmt_put_u32(&g.b, WM_VALUE_U8);
    wmt_put_u8(&g.b, 1);
    REFUSE_BUILT(&g, "nulkey.gguf", "NUL");
}

WM_TEST(unknown_value_type) {
    /* Unknown value types, and an unknown element type inside an array. */
    static const struct {
        uint32_t type;
        bool array;
    } cases[] = {{13, false}, {100, false}, {UINT32_MAX, false}, {13, true}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ggb g = kv_file(1);
        if (cases[i].array)
            ggb_kv_arr(&g, "k", (wm_value_type)cases[i].type, 1);
        else
            ggb_key(&g, "k", (wm_value_type)cases[i].type);
        wmt_put_u64(&g.b, 0);
        if (cases[i].array)
            REFUSE_BUILT(&g, "etype.gguf", "unknown array element type");
        else
            REFUSE_BUILT(&g, "vtype.gguf", "unknown value type");
    }
}

WM_TEST(bool_not_0_or_1) {
    ggb g = kv_file(1);
    ggb_kv_bool(&g, "flag", 2);
    REFUSE_BUILT(&g, "bool.gguf", "not 0 or 1");
    g = kv_file(1);
    ggb_kv_arr(&g, "flags", WM_VALUE_BOOL, 3);
    wmt_put(&g.b, "\1\0\7", 3);
    REFUSE_BUILT(&g, "bools.gguf", "not 0 or 1");
}

/* Counts whose byte size wraps to a small number when multiplied by the element size. */
WM_TEST(array_count_wraps) {
    static const struct {
        wm_value_type elem;
        uint64_t count;
    } cases[] = {
        {WM_VALUE_U64, (uint64_t)1 << 61},          /* 8 * 2^61 = 2^64 -> 0 */
        {WM_VALUE_U32, ((uint64_t)1 << 62) + 1},    /* 4 * (2^62 + 1) -> 4 */
        {WM_VALUE_U16, ((uint64_t)1 << 63) + 2},    /* 2 * (2^63 + 2) -> 4 */
        {WM_VALUE_F64, ((uint64_t)1 << 61) + 1},    /* -> 8 */
        {WM_VALUE_STRING, ((uint64_t)1 << 61) + 1}, /* 8-byte lengths -> 8 */
        {WM_VALUE_ARRAY, 0x1555555555555556u},      /* 12-byte headers: 2^64 + 8 -> 8 */
        {WM_VALUE_U8, U64_MAX},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ggb g = kv_file(1);
        ggb_kv_arr(&g, "arr", cases[i].elem, cases[i].count);
        wmt_put_zeros(&g.b, 64);
        REFUSE_BUILT(&g, "wrap.gguf", "larger than the");
    }
    /* v1: 32-bit counts, 4-byte string lengths. */
    ggb g;
    ggb_begin(&g, 1, 0, 1);
    ggb_kv_arr(&g, "arr", WM_VALUE_STRING, UINT32_MAX);
    wmt_put_zeros(&g.b, 64);
    REFUSE_BUILT(&g, "v1wrap.gguf", "larger than the");
}

WM_TEST(arrays_nested_100000_deep) {
    ggb g = kv_file(1);
    ggb_key(&g, "deep", WM_VALUE_ARRAY);
    for (int i = 0; i < 100000; i++)
        ggb_arr_head(&g, WM_VALUE_ARRAY, 1);
    ggb_arr_head(&g, WM_VALUE_U8, 0);
    CHECK(g.b.len > 1000000); /* past the parser's first read */
    REFUSE_BUILT(&g, "deep.gguf", "nested deeper");
}

WM_TEST(arrays_nested_within_limit) {
    /* Depth 4 is read; its elements are arrays, which the numeric accessors refuse. */
    ggb g = kv_file(1);
    ggb_kv_arr(&g, "nest", WM_VALUE_ARRAY, 2);
    for (int i = 0; i < 2; i++) {
        ggb_arr_head(&g, WM_VALUE_ARRAY, 1);
        ggb_arr_head(&g, WM_VALUE_ARRAY, 1);
        ggb_arr_head(&g, WM_VALUE_U32, 2);
        wmt_put_u32(&g.b, 7);
        wmt_put_u32(&g.b, 8);
    }
    wm_file *f = OPEN_OK(ggb_write(&g, "nest.gguf"));
    wm_kv kv;
    CHECK_STATUS(wm_file_metadata(f, 0, &kv), WM_OK);
    CHECK_EQ(kv.type, WM_VALUE_ARRAY);
    CHECK_EQ(kv.elem_type, WM_VALUE_ARRAY);
    CHECK_EQ(kv.length, 2);
    uint64_t u;
    wm_string s;
    wm_array_iter it;
    CHECK_STATUS(wm_file_array_u64(f, 0, 0, &u), WM_ETYPE);
    CHECK_STATUS(wm_file_array_string(f, 0, 0, &s), WM_ETYPE);
    CHECK_STATUS(wm_file_array_iter(f, 0, &it), WM_ETYPE);
    CHECK_STATUS(wm_file_array_u64(f, 0, 2, &u), WM_ERANGE);
    wm_file_close(f);
    ggb_free(&g);
}

WM_TEST(alignment_bad_values) {
    static const uint32_t aligns[] = {0, 3, 48, (uint32_t)1 << 31, UINT32_MAX};
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
        ggb g = kv_file(1);
        ggb_kv_u32(&g, "general.alignment", aligns[i]);
        REFUSE_BUILT(&g, "align.gguf", "general.alignment");
    }
}

WM_TEST(alignment_wrong_type) {
    for (int t = 0; t < 4; t++) {
        ggb g = kv_file(1);
        if (t == 0) ggb_kv_u64(&g, "general.alignment", 32);
        if (t == 1) ggb_kv_i32(&g, "general.alignment", 32);
        if (t == 2) ggb_kv_str(&g, "general.alignment", "32");
        if (t == 3) {
            ggb_kv_arr(&g, "general.alignment", WM_VALUE_U32, 1);
            wmt_put_u32(&g.b, 32);
        }
        REFUSE_BUILT(&g, "atype.gguf", "general.alignment has type");
    }
}

WM_TEST(duplicate_key) {
    ggb g = kv_file(3);
    ggb_kv_u32(&g, "llama.block_count", 5);
    ggb_kv_str(&g, "general.name", "x");
    ggb_kv_u32(&g, "llama.block_count", 6);
    REFUSE_BUILT(&g, "dupkey.gguf", "duplicate metadata key 'llama.block_count'");
}

/* ---- tensor infos ---- */

WM_TEST(tensor_name_64_refused_63_accepted) {
    char name[65];
    memset(name, 'n', 64);
    name[64] = 0;
    uint64_t ne = 8;
    for (int len = 63; len <= 64; len++) {
        memset(name, 'n', 64);
        name[len] = 0;
        ggb g;
        ggb_begin(&g, 3, 1, 0);
        ggb_tensor(&g, name, 1, &ne, WM_TYPE_F32, 0);
        ggb_pad(&g, 32);
        ggb_data(&g, 32);
        const char *p = ggb_write(&g, "name.gguf");
        if (len == 64) {
            CHECK_REFUSED(p, WM_EFORMAT, "name length 64");
        } else {
            wm_file *f = OPEN_OK(p);
            wm_tensor_info t;
            CHECK_STATUS(wm_file_tensor(f, 0, &t), WM_OK);
            CHECK_EQ(strlen(t.name), 63);
            size_t idx;
            CHECK_STATUS(wm_file_find_tensor(f, name, &idx), WM_OK);
            wm_file_close(f);
        }
        ggb_free(&g);
    }
}

WM_TEST(tensor_name_empty_or_nul_or_long_length) {
    static const uint64_t lens[] = {0, 200, U64_MAX};
    for (size_t i = 0; i < 3; i++) {
        ggb g;
        ggb_begin(&g, 3, 1, 0);
        ggb_len(&g, lens[i]);
        wmt_put_zeros(&g.b, 64);
        REFUSE_BUILT(&g, "tname.gguf", "tensor 0");
    }
    ggb g;
    uint64_t ne = 8;
    ggb_begin(&g, 3, 1, 0);
    ggb_strn(&g, "a\0b", 3);
    wmt_put_u32(&g.b, 1);
    ggb_len(&g, ne);
    wmt_put_u32(&g.b, WM_TYPE_F32);
    wmt_put_u64(&g.b, 0);
    ggb_pad(&g, 32);
    ggb_data(&g, 32);
    REFUSE_BUILT(&g, "nulname.gguf", "NUL");
}

WM_TEST(n_dims_5_and_max) {
    static const uint32_t dims[] = {5, 64, UINT32_MAX};
    uint64_t ne[5] = {1, 1, 1, 1, 1};
    refuse_one_tensor(5, ne, WM_TYPE_F32, 0, 32, "n_dims 5");
    for (size_t i = 0; i < 3; i++) {
        ggb g;
        ggb_begin(&g, 3, 1, 0);
        ggb_str(&g, "t");
        wmt_put_u32(&g.b, dims[i]);
        for (int d = 0; d < 5; d++)
            wmt_put_u64(&g.b, 1);
        wmt_put_u32(&g.b, 0);
        wmt_put_u64(&g.b, 0);
        ggb_pad(&g, 32);
        ggb_data(&g, 32);
        REFUSE_BUILT(&g, "ndims.gguf", "n_dims");
    }
}

WM_TEST(negative_dims) {
    uint64_t a[2] = {(uint64_t)-1, 1};
    refuse_one_tensor(2, a, WM_TYPE_F32, 0, 64, "negative");
    uint64_t b[4] = {4, 1, (uint64_t)INT64_MIN, 1};
    refuse_one_tensor(4, b, WM_TYPE_F32, 0, 64, "dimension 2 is negative");
}

WM_TEST(element_count_overflows) {
    uint64_t a[2] = {(uint64_t)1 << 32, (uint64_t)1 << 32}; /* 2^64 wraps to 0 */
    refuse_one_tensor(2, a, WM_TYPE_I8, 0, 64, "element count overflows");
    uint64_t b[4] = {(uint64_t)1 << 16, (uint64_t)1 << 16, (uint64_t)1 << 16,
                     ((uint64_t)1 << 16) + 1}; /* wraps to 2^48 */
    refuse_one_tensor(4, b, WM_TYPE_I8, 0, 64, "element count overflows");
    uint64_t c[2] = {(uint64_t)1 << 32, (uint64_t)1 << 31}; /* 2^63: over INT64_MAX */
    refuse_one_tensor(2, c, WM_TYPE_I8, 0, 64, "element count overflows");
}

/* CVE-2026-33298 (GHSA-96jg-mvhq-q7q7): the element count fits in int64 but the byte size does
 * not, and wraps to a small number (the "exabytes of tensor on 4 bytes" shape). */
WM_TEST(byte_size_overflows_cve_2026_33298) {
    uint64_t a[2] = {(uint64_t)1 << 31, (uint64_t)1 << 31}; /* 2^62 f32 = 2^64 bytes -> 0 */
    refuse_one_tensor(2, a, WM_TYPE_F32, 0, 64, "byte size overflows");
    uint64_t b[1] = {((uint64_t)1 << 62) + 1}; /* 4 * (2^62 + 1) -> 4 bytes */
    refuse_one_tensor(1, b, WM_TYPE_F32, 0, 64, "byte size overflows");
    uint64_t c[2] = {1024, ((uint64_t)1 << 51) + 1}; /* f64: 8 KiB rows, 2^64 + 8 KiB */
    refuse_one_tensor(2, c, WM_TYPE_F64, 0, 8192, "byte size overflows");
    uint64_t d[2] = {((uint64_t)1 << 62) + 8, 1}; /* i64 over INT64_MAX bytes, no wrap */
    refuse_one_tensor(2, d, WM_TYPE_I16, 0, 64, "byte size overflows");
}

/* CVE-2025-53630: tensors whose sizes each fit but whose sum wraps past 2^64, so a loader that
 * sizes one buffer by the sum gets a tiny one. Offsets are the running sum, as llama.cpp
 * requires; three tensors because each must stay below 2^63 bytes. */
WM_TEST(sum_of_sizes_wraps_cve_2025_53630) {
    uint64_t big = ((uint64_t)1 << 63) - 32; /* a multiple of 32; 3 * big wraps to 2^63 - 96 */
    const tensor1 ts[] = {
        {"a", big, WM_TYPE_I8, 0}, {"b", big, WM_TYPE_I8, big}, {"c", big, WM_TYPE_I8, 2 * big}};
    REFUSE_TENSORS(ts, 96, "sum.gguf", "past the end");
}

/* CVE-2026-27940 (GHSA-3p4r-fq3f-q74v), the bypass of the fix above: the sum of sizes stays just
 * below 2^64, so the sum check passes, and it is adding the per-tensor overhead that wraps. */
WM_TEST(sum_near_max_bypass_cve_2026_27940) {
    uint64_t a = ((uint64_t)1 << 63) - 64, b = ((uint64_t)1 << 63) - 32; /* a + b = 2^64 - 96 */
    const tensor1 ts[] = {{"a", a, WM_TYPE_I8, 0}, {"b", b, WM_TYPE_I8, a}};
    REFUSE_TENSORS(ts, 96, "bypass.gguf", "past the end");
}

/* Tensors that each fit but together claim more bytes than the data section has. */
WM_TEST(sum_of_sizes_exceeds_data) {
    const tensor1 ts[] = {
        {"a", 64, WM_TYPE_I8, 0}, {"b", 64, WM_TYPE_I8, 0}, {"c", 64, WM_TYPE_I8, 0}};
    REFUSE_TENSORS(ts, 128, "sum2.gguf", "add up to more than");
}

WM_TEST(unknown_and_removed_types) {
    static const uint32_t types[] = {4, 5, 31, 32, 33, 36, 37, 38, 43, 99, 100, UINT32_MAX};
    uint64_t ne = 256;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        bool removed = types[i] < 43;
        refuse_one_tensor(1, &ne, types[i], 0, 1024, removed ? "removed ggml type" : "unknown");
    }
}

WM_TEST(row_not_multiple_of_block) {
    static const struct {
        uint32_t type;
        uint64_t ne0;
    } cases[] = {{WM_TYPE_Q8_0, 172}, {WM_TYPE_Q4_K, 128}, {WM_TYPE_Q4_0, 33},
                 {WM_TYPE_Q1_0, 64},  {WM_TYPE_NVFP4, 32}, {WM_TYPE_IQ2_XXS, 255}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t ne[2] = {cases[i].ne0, 2};
        refuse_one_tensor(2, ne, cases[i].type, 0, 4096, "not a multiple of the");
    }
}

WM_TEST(duplicate_tensor_name) {
    const tensor1 ts[] = {
        {"w", 8, WM_TYPE_F32, 0}, {"v", 8, WM_TYPE_F32, 32}, {"w", 8, WM_TYPE_F32, 64}};
    REFUSE_TENSORS(ts, 96, "dupt.gguf", "duplicate tensor name 'w'");
}

/* ---- the data section ---- */

WM_TEST(offset_misaligned) {
    uint64_t ne = 8;
    refuse_one_tensor(1, &ne, WM_TYPE_F32, 4, 64, "not a multiple of the alignment 32");
    /* With general.alignment 64, an offset of 32 is misaligned too. */
    ggb g;
    ggb_begin(&g, 3, 1, 1);
    ggb_kv_u32(&g, "general.alignment", 64);
    ggb_tensor1(&g, "t", 8, WM_TYPE_F32, 32);
    ggb_pad(&g, 64);
    ggb_data(&g, 128);
    REFUSE_BUILT(&g, "mis64.gguf", "alignment 64");
}

WM_TEST(offset_past_end) {
    uint64_t ne = 8;
    refuse_one_tensor(1, &ne, WM_TYPE_F32, 64, 64, "past the end");
    refuse_one_tensor(1, &ne, WM_TYPE_F32, (uint64_t)1 << 40, 64, "past the end");
}

WM_TEST(offset_wraps_near_2_64) {
    uint64_t ne = 16; /* 64 bytes */
    static const uint64_t offs[] = {U64_MAX - 31, U64_MAX - 63, ((uint64_t)1 << 63) + 32};
    for (size_t i = 0; i < 3; i++)
        refuse_one_tensor(1, &ne, WM_TYPE_F32, offs[i], 64, NULL);
    /* U64_MAX - 31 is aligned to 32 and wraps to 32 when the size is added. */
    refuse_one_tensor(1, &ne, WM_TYPE_F32, U64_MAX - 31, 64, "past the end");
}

WM_TEST(data_one_byte_short) {
    uint64_t ne[2] = {8, 4}; /* 128 bytes */
    refuse_one_tensor(2, ne, WM_TYPE_F32, 0, 127, "past the end");
    ggb g;
    one_tensor(&g, 2, ne, WM_TYPE_F32, 0, 128);
    wm_file *f = OPEN_OK(ggb_write(&g, "exact.gguf"));
    wm_file_close(f);
    ggb_free(&g);
}

WM_TEST(data_section_past_end) {
    /* Tensor infos end 8 bytes before the end of the file, so the aligned data section starts
     * past it, even for a tensor of zero bytes. */
    ggb g;
    ggb_begin(&g, 3, 1, 0);
    ggb_tensor1(&g, "z", 0, WM_TYPE_F32, 0);
    CHECK(g.b.len % 32 != 0);
    REFUSE_BUILT(&g, "dsec.gguf", "data section");
}

WM_TEST(overlapping_tensors) {
    const tensor1 ts[] = {
        {"a", 16, WM_TYPE_F32, 0},  /* [0, 64) */
        {"b", 16, WM_TYPE_F32, 32}, /* [32, 96) */
    };
    REFUSE_TENSORS(ts, 256, "overlap.gguf", "overlaps");
}

/* A tensor of zero bytes sorted between two overlapping ones must not hide their overlap. */
WM_TEST(overlap_behind_empty_tensor) {
    const tensor1 behind[] = {
        {"a", 96, WM_TYPE_I8, 0}, /* [0, 96) */
        {"e", 0, WM_TYPE_I8, 32},
        {"c", 32, WM_TYPE_I8, 64}, /* [64, 96) inside a */
    };
    /* 128 bytes of data: room for the sum, so only the overlap check can refuse */
    REFUSE_TENSORS(behind, 128, "overlap0.gguf", "overlaps");
    /* And a tensor inside a larger one, with a third after both. */
    const tensor1 inside[] = {
        {"a", 128, WM_TYPE_I8, 0}, {"b", 32, WM_TYPE_I8, 32}, {"c", 32, WM_TYPE_I8, 64}};
    REFUSE_TENSORS(inside, 256, "overlap1.gguf", "overlaps");
}

/* ---- files that must be accepted ---- */

WM_TEST(no_tensors_ends_after_metadata) {
    ggb g = kv_file(2);
    ggb_kv_str(&g, "general.architecture", "llama");
    ggb_kv_u8(&g, "x", 1);
    CHECK(g.b.len % 32 != 0);
    const char *p = ggb_write(&g, "vocab.gguf");
    wm_file *f = OPEN_OK(p);
    CHECK_EQ(wm_file_tensor_count(f), 0);
    CHECK_EQ(wm_file_metadata_count(f), 2);
    CHECK_EQ(wm_file_size(f), g.b.len);
    CHECK_EQ(wm_file_tensor_bytes(f), 0);
    wm_file_close(f);
    ggb_free(&g);
    /* No metadata and no tensors at all: 24 bytes. */
    g = kv_file(0);
    f = OPEN_OK(ggb_write(&g, "empty.gguf"));
    CHECK_EQ(wm_file_tensor_count(f) + wm_file_metadata_count(f), 0);
    wm_file_close(f);
    ggb_free(&g);
}

WM_TEST(padding_between_tensors) {
    ggb g;
    ggb_begin(&g, 3, 4, 1);
    ggb_kv_u32(&g, "general.alignment", 16);
    ggb_tensor1(&g, "c", 4, WM_TYPE_F32, 96); /* out of order, gaps between */
    ggb_tensor1(&g, "a", 4, WM_TYPE_F32, 0);
    ggb_tensor1(&g, "b", 4, WM_TYPE_F32, 48);
    ggb_tensor1(&g, "e", 0, WM_TYPE_F32, 16);
    ggb_pad(&g, 16);
    size_t data_off = g.b.len;
    ggb_data(&g, 112 + 16); /* trailing bytes after the last tensor are legal too */
    wm_file *f = OPEN_OK(ggb_write(&g, "pad.gguf"));
    CHECK_EQ(wm_file_alignment(f), 16);
    CHECK_EQ(wm_file_data_offset(f), data_off);
    CHECK_EQ(wm_file_tensor_bytes(f), 48);
    wm_tensor_info t;
    CHECK_STATUS(wm_file_tensor(f, 0, &t), WM_OK);
    CHECK(strcmp(t.name, "c") == 0);
    CHECK_EQ(t.offset, data_off + 96);
    CHECK_EQ(t.nbytes, 16);
    CHECK_STATUS(wm_file_tensor(f, 3, &t), WM_OK);
    CHECK_EQ(t.nbytes, 0);
    CHECK_EQ(t.n_elements, 0);
    wm_file_close(f);
    ggb_free(&g);
}

/* A small model by hand in v1 (32-bit counts, lengths and dims) and v2 (64-bit). */
static void hand_model(uint32_t version) {
    ggb g;
    uint64_t ne[2] = {32, 3};
    ggb_begin(&g, version, 2, 4);
    ggb_kv_str(&g, "general.architecture", "llama");
    ggb_kv_u32(&g, "llama.block_count", 2);
    ggb_kv_arr(&g, "tokenizer.ggml.tokens", WM_VALUE_STRING, 3);
    ggb_str(&g, "<unk>");
    ggb_str(&g, "");
    ggb_str(&g, "hello");
    ggb_kv_arr(&g, "scores", WM_VALUE_F32, 2);
    float sc[2] = {0.5f, -1.25f};
    wmt_put(&g.b, sc, 8);
    ggb_tensor(&g, "token_embd.weight", 2, ne, WM_TYPE_Q8_0, 0); /* 3 blocks of 34 = 102 */
    ggb_tensor1(&g, "norm", 32, WM_TYPE_F32, 128);
    ggb_pad(&g, 32);
    size_t data_off = g.b.len;
    ggb_data(&g, 128 + 128);
    wm_file *f = OPEN_OK(ggb_write(&g, "hand.gguf"));
    CHECK_EQ(wm_file_version(f), version);
    CHECK_EQ(wm_file_tensor_count(f), 2);
    CHECK_EQ(wm_file_metadata_count(f), 4);
    CHECK_EQ(wm_file_data_offset(f), data_off);
    wm_tensor_info t;
    size_t idx;
    t = wmt_tensor_named(f, "token_embd.weight");
    CHECK_EQ(t.type, WM_TYPE_Q8_0);
    CHECK_EQ(t.n_dims, 2);
    CHECK_EQ(t.shape[0], 32);
    CHECK_EQ(t.shape[1], 3);
    CHECK_EQ(t.shape[2], 1);
    CHECK_EQ(t.nbytes, 102);
    CHECK_EQ(t.offset, data_off);
    wm_string s;
    CHECK_STATUS(wm_file_get_string(f, "general.architecture", &s), WM_OK);
    CHECK(s.len == 5 && memcmp(s.ptr, "llama", 5) == 0);
    CHECK_STATUS(wm_file_find_metadata(f, "tokenizer.ggml.tokens", &idx), WM_OK);
    CHECK_STATUS(wm_file_array_string(f, idx, 2, &s), WM_OK);
    CHECK(s.len == 5 && memcmp(s.ptr, "hello", 5) == 0);
    CHECK_STATUS(wm_file_array_string(f, idx, 1, &s), WM_OK);
    CHECK_EQ(s.len, 0);
    wm_array_iter it;
    CHECK_STATUS(wm_file_array_iter(f, idx, &it), WM_OK);
    int n = 0;
    while (wm_array_iter_next(&it, &s) == WM_OK)
        n++;
    CHECK_EQ(n, 3);
    CHECK_STATUS(wm_file_find_metadata(f, "scores", &idx), WM_OK);
    double d;
    CHECK_STATUS(wm_file_array_f64(f, idx, 1, &d), WM_OK);
    CHECK(d == -1.25);
    uint32_t u;
    CHECK_STATUS(wm_file_get_u32(f, "llama.block_count", &u), WM_OK);
    CHECK_EQ(u, 2);
    wm_file_close(f);
    ggb_free(&g);
}

WM_TEST(hand_built_v1) { hand_model(1); }
WM_TEST(hand_built_v2) { hand_model(2); }
WM_TEST(hand_built_v3) { hand_model(3); }

/* ---- typed getters and array accessors ---- */

static wm_file *every_type_file(ggb *g) {
    ggb_begin(g, 3, 0, 22);
    ggb_kv_u8(g, "u8", 200);
    ggb_kv_i8(g, "i8", -100);
    ggb_kv_u16(g, "u16", 60000);
    ggb_kv_i16(g, "i16", -30000);
    ggb_kv_u32(g, "u32", 4000000000u);
    ggb_kv_i32(g, "i32", -2000000000);
    ggb_kv_f32(g, "f32", 1.5f);
    ggb_kv_bool(g, "bool", 1);
    ggb_kv_str(g, "str", "hello");
    ggb_kv_u64(g, "u64", U64_MAX);
    ggb_kv_i64(g, "i64", INT64_MIN);
    ggb_kv_f64(g, "f64", -2.75);
    ggb_kv_i8(g, "i8pos", 7);
    ggb_kv_u64(g, "u64small", 42);
    ggb_kv_arr(g, "a_u8", WM_VALUE_U8, 3);
    wmt_put(&g->b, "\1\2\377", 3);
    ggb_kv_arr(g, "a_i16", WM_VALUE_I16, 2);
    int16_t i16s[2] = {-5, 300};
    wmt_put(&g->b, i16s, 4);
    ggb_kv_arr(g, "a_u64", WM_VALUE_U64, 2);
    wmt_put_u64(&g->b, 1);
    wmt_put_u64(&g->b, U64_MAX);
    ggb_kv_arr(g, "a_i64", WM_VALUE_I64, 2);
    int64_t i64s[2] = {-1, INT64_MAX};
    wmt_put(&g->b, i64s, 16);
    ggb_kv_arr(g, "a_f64", WM_VALUE_F64, 1);
    double f64 = 0.25;
    wmt_put(&g->b, &f64, 8);
    ggb_kv_arr(g, "a_str", WM_VALUE_STRING, 3);
    ggb_str(g, "a");
    ggb_str(g, "bc");
    ggb_str(g, "def");
    ggb_kv_arr(g, "a_empty", WM_VALUE_U32, 0);
    ggb_kv_arr(g, "a_nest", WM_VALUE_ARRAY, 1);
    ggb_arr_head(g, WM_VALUE_STRING, 1);
    ggb_str(g, "inner");
    return OPEN_OK(ggb_write(g, "types.gguf"));
}

WM_TEST(getters_scalars) {
    ggb g;
    wm_file *f = every_type_file(&g);
    uint64_t u;
    int64_t i;
    uint32_t u32;
    double d;
    int b;
    wm_string s;
    CHECK_STATUS(wm_file_get_u64(f, "u8", &u), WM_OK);
    CHECK_EQ(u, 200);
    CHECK_STATUS(wm_file_get_u64(f, "u16", &u), WM_OK);
    CHECK_EQ(u, 60000);
    CHECK_STATUS(wm_file_get_u64(f, "u32", &u), WM_OK);
    CHECK_EQ(u, 4000000000u);
    CHECK_STATUS(wm_file_get_u64(f, "u64", &u), WM_OK);
    CHECK_EQ(u, U64_MAX);
    CHECK_STATUS(wm_file_get_u64(f, "i8pos", &u), WM_OK);
    CHECK_EQ(u, 7);
    CHECK_STATUS(wm_file_get_i64(f, "i8", &i), WM_OK);
    CHECK(i == -100);
    CHECK_STATUS(wm_file_get_i64(f, "i16", &i), WM_OK);
    CHECK(i == -30000);
    CHECK_STATUS(wm_file_get_i64(f, "i32", &i), WM_OK);
    CHECK(i == -2000000000);
    CHECK_STATUS(wm_file_get_i64(f, "i64", &i), WM_OK);
    CHECK(i == INT64_MIN);
    CHECK_STATUS(wm_file_get_i64(f, "u32", &i), WM_OK);
    CHECK(i == 4000000000);
    CHECK_STATUS(wm_file_get_u32(f, "u32", &u32), WM_OK);
    CHECK_EQ(u32, 4000000000u);
    CHECK_STATUS(wm_file_get_u32(f, "u64small", &u32), WM_OK);
    CHECK_EQ(u32, 42);
    CHECK_STATUS(wm_file_get_f64(f, "f32", &d), WM_OK);
    CHECK(d == 1.5);
    CHECK_STATUS(wm_file_get_f64(f, "f64", &d), WM_OK);
    CHECK(d == -2.75);
    CHECK_STATUS(wm_file_get_bool(f, "bool", &b), WM_OK);
    CHECK_EQ(b, 1);
    CHECK_STATUS(wm_file_get_string(f, "str", &s), WM_OK);
    CHECK(s.len == 5 && memcmp(s.ptr, "hello", 5) == 0);

    /* Out of range: negative to unsigned, too large for the target. */
    CHECK_STATUS(wm_file_get_u64(f, "i8", &u), WM_ERANGE);
    CHECK_STATUS(wm_file_get_u64(f, "i64", &u), WM_ERANGE);
    CHECK_STATUS(wm_file_get_u32(f, "i32", &u32), WM_ERANGE);
    CHECK_STATUS(wm_file_get_u32(f, "u64", &u32), WM_ERANGE);
    CHECK_STATUS(wm_file_get_i64(f, "u64", &i), WM_ERANGE);

    /* Wrong type. */
    CHECK_STATUS(wm_file_get_u64(f, "f32", &u), WM_ETYPE);
    CHECK_STATUS(wm_file_get_u64(f, "str", &u), WM_ETYPE);
    CHECK_STATUS(wm_file_get_u64(f, "bool", &u), WM_ETYPE);
    CHECK_STATUS(wm_file_get_u64(f, "a_u8", &u), WM_ETYPE);
    CHECK_STATUS(wm_file_get_i64(f, "f64", &i), WM_ETYPE);
    CHECK_STATUS(wm_file_get_u32(f, "str", &u32), WM_ETYPE);
    CHECK_STATUS(wm_file_get_f64(f, "u32", &d), WM_ETYPE);
    CHECK_STATUS(wm_file_get_f64(f, "i64", &d), WM_ETYPE);
    CHECK_STATUS(wm_file_get_bool(f, "u8", &b), WM_ETYPE);
    CHECK_STATUS(wm_file_get_string(f, "u8", &s), WM_ETYPE);
    CHECK_STATUS(wm_file_get_string(f, "a_str", &s), WM_ETYPE);

    /* Missing keys. */
    CHECK_STATUS(wm_file_get_u64(f, "nope", &u), WM_ENOENT);
    CHECK_STATUS(wm_file_get_bool(f, "nope", &b), WM_ENOENT);
    CHECK_STATUS(wm_file_get_string(f, "u8 ", &s), WM_ENOENT);

    /* By index, and every index's key finds itself. */
    CHECK_EQ(wm_file_metadata_count(f), 22);
    for (size_t k = 0; k < wm_file_metadata_count(f); k++) {
        wm_kv kv;
        size_t j;
        CHECK_STATUS(wm_file_metadata(f, k, &kv), WM_OK);
        CHECK_STATUS(wm_file_find_metadata(f, kv.key, &j), WM_OK);
        CHECK_EQ(j, k);
    }
    wm_kv kv;
    CHECK_STATUS(wm_file_metadata(f, 22, &kv), WM_ERANGE);
    CHECK_STATUS(wm_file_kv_u64(f, 22, &u), WM_ERANGE);
    CHECK_STATUS(wm_file_kv_i64(f, 22, &i), WM_ERANGE);
    CHECK_STATUS(wm_file_kv_f64(f, 22, &d), WM_ERANGE);
    CHECK_STATUS(wm_file_kv_string(f, 22, &s), WM_ERANGE);
    CHECK_STATUS(wm_file_kv_u64(f, 0, &u), WM_OK);
    CHECK_EQ(u, 200);
    CHECK_STATUS(wm_file_kv_i64(f, 1, &i), WM_OK);
    CHECK(i == -100);
    CHECK_STATUS(wm_file_kv_f64(f, 6, &d), WM_OK);
    CHECK(d == 1.5);
    CHECK_STATUS(wm_file_kv_string(f, 8, &s), WM_OK);
    CHECK_EQ(s.len, 5);
    CHECK_STATUS(wm_file_metadata(f, 8, &kv), WM_OK);
    CHECK_EQ(kv.type, WM_VALUE_STRING);
    CHECK_EQ(kv.length, 5);
    CHECK_STATUS(wm_file_metadata(f, 0, &kv), WM_OK);
    CHECK_EQ(kv.length, 1);
    /* A NULL out is refused (after the type is checked), never written through. */
    CHECK_STATUS(wm_file_get_u64(f, "u8", NULL), WM_EINVAL);
    CHECK_STATUS(wm_file_get_i64(f, "i8", NULL), WM_EINVAL);
    CHECK_STATUS(wm_file_get_u32(f, "u32", NULL), WM_EINVAL);
    CHECK_STATUS(wm_file_get_f64(f, "f64", NULL), WM_EINVAL);
    CHECK_STATUS(wm_file_get_bool(f, "bool", NULL), WM_EINVAL);
    CHECK_STATUS(wm_file_get_string(f, "str", NULL), WM_EINVAL);
    CHECK_STATUS(wm_file_get_u64(f, "str", NULL), WM_ETYPE);
    CHECK_STATUS(wm_file_get_u64(NULL, "u8", &u), WM_EINVAL);
    CHECK_STATUS(wm_file_get_u64(f, NULL, &u), WM_EINVAL);
    wm_file_close(f);
    ggb_free(&g);
}

WM_TEST(getters_arrays) {
    ggb g;
    wm_file *f = every_type_file(&g);
    size_t a_u8, a_i16, a_u64, a_i64, a_f64, a_str, a_empty, a_nest, str;
    CHECK_STATUS(wm_file_find_metadata(f, "a_u8", &a_u8), WM_OK);
    CHECK_STATUS(wm_file_find_metadata(f, "a_i16", &a_i16), WM_OK);
    CHECK_STATUS(wm_file_find_metadata(f, "a_u64", &a_u64), WM_OK);
    CHECK_STATUS(wm_file_find_metadata(f, "a_i64", &a_i64), WM_OK);
    CHECK_STATUS(wm_file_find_metadata(f, "a_f64", &a_f64), WM_OK);
    CHECK_STATUS(wm_file_find_metadata(f, "a_str", &a_str), WM_OK);
    CHECK_STATUS(wm_file_find_metadata(f, "a_empty", &a_empty), WM_OK);
    CHECK_STATUS(wm_file_find_metadata(f, "a_nest", &a_nest), WM_OK);
    CHECK_STATUS(wm_file_find_metadata(f, "str", &str), WM_OK);
    uint64_t u;
    int64_t i;
    double d;
    wm_string s;
    wm_array_iter it;
    wm_kv kv;

    CHECK_STATUS(wm_file_array_u64(f, a_u8, 2, &u), WM_OK);
    CHECK_EQ(u, 255);
    CHECK_STATUS(wm_file_array_i64(f, a_i16, 0, &i), WM_OK);
    CHECK(i == -5);
    CHECK_STATUS(wm_file_array_u64(f, a_i16, 1, &u), WM_OK);
    CHECK_EQ(u, 300);
    CHECK_STATUS(wm_file_array_u64(f, a_i16, 0, &u), WM_ERANGE); /* negative to u64 */
    CHECK_STATUS(wm_file_array_u64(f, a_u64, 1, &u), WM_OK);
    CHECK_EQ(u, U64_MAX);
    CHECK_STATUS(wm_file_array_i64(f, a_u64, 1, &i), WM_ERANGE); /* over INT64_MAX */
    CHECK_STATUS(wm_file_array_i64(f, a_i64, 1, &i), WM_OK);
    CHECK(i == INT64_MAX);
    CHECK_STATUS(wm_file_array_u64(f, a_i64, 0, &u), WM_ERANGE);
    CHECK_STATUS(wm_file_array_f64(f, a_f64, 0, &d), WM_OK);
    CHECK(d == 0.25);
    CHECK_STATUS(wm_file_array_string(f, a_str, 2, &s), WM_OK);
    CHECK(s.len == 3 && memcmp(s.ptr, "def", 3) == 0);
    CHECK_STATUS(wm_file_array_string(f, a_str, 0, &s), WM_OK);
    CHECK(s.len == 1 && s.ptr[0] == 'a');

    /* Out of range elements. */
    CHECK_STATUS(wm_file_array_u64(f, a_u8, 3, &u), WM_ERANGE);
    CHECK_STATUS(wm_file_array_i64(f, a_u8, U64_MAX, &i), WM_ERANGE);
    CHECK_STATUS(wm_file_array_f64(f, a_f64, 1, &d), WM_ERANGE);
    CHECK_STATUS(wm_file_array_string(f, a_str, 3, &s), WM_ERANGE);
    CHECK_STATUS(wm_file_array_u64(f, a_empty, 0, &u), WM_ERANGE);
    CHECK_STATUS(wm_file_array_u64(f, 999, 0, &u), WM_ERANGE);

    /* Wrong types: a scalar, floats as integers, strings as numbers, numbers as strings. */
    CHECK_STATUS(wm_file_array_u64(f, str, 0, &u), WM_ETYPE);
    CHECK_STATUS(wm_file_array_string(f, str, 0, &s), WM_ETYPE);
    CHECK_STATUS(wm_file_array_iter(f, str, &it), WM_ETYPE);
    CHECK_STATUS(wm_file_array_u64(f, a_f64, 0, &u), WM_ETYPE);
    CHECK_STATUS(wm_file_array_f64(f, a_u8, 0, &d), WM_ETYPE);
    CHECK_STATUS(wm_file_array_i64(f, a_str, 0, &i), WM_ETYPE);
    CHECK_STATUS(wm_file_array_string(f, a_u8, 0, &s), WM_ETYPE);
    CHECK_STATUS(wm_file_array_iter(f, a_u64, &it), WM_ETYPE);
    CHECK_STATUS(wm_file_kv_u64(f, a_u8, &u), WM_ETYPE);
    CHECK_STATUS(wm_file_kv_string(f, a_str, &s), WM_ETYPE);

    /* Nested: the outer array is described, its elements are not numbers or strings. */
    CHECK_STATUS(wm_file_metadata(f, a_nest, &kv), WM_OK);
    CHECK_EQ(kv.type, WM_VALUE_ARRAY);
    CHECK_EQ(kv.elem_type, WM_VALUE_ARRAY);
    CHECK_EQ(kv.length, 1);
    CHECK_STATUS(wm_file_array_u64(f, a_nest, 0, &u), WM_ETYPE);
    CHECK_STATUS(wm_file_array_string(f, a_nest, 0, &s), WM_ETYPE);
    CHECK_STATUS(wm_file_array_iter(f, a_nest, &it), WM_ETYPE);

    /* A NULL out is refused once the element is known to exist and to have the right type. */
    CHECK_STATUS(wm_file_array_u64(f, a_u8, 0, NULL), WM_EINVAL);
    CHECK_STATUS(wm_file_array_i64(f, a_i64, 0, NULL), WM_EINVAL);
    CHECK_STATUS(wm_file_array_f64(f, a_f64, 0, NULL), WM_EINVAL);
    CHECK_STATUS(wm_file_array_string(f, a_str, 0, NULL), WM_EINVAL);
    CHECK_STATUS(wm_file_array_u64(f, a_str, 0, NULL), WM_ETYPE);
    CHECK_STATUS(wm_file_array_iter(f, a_str, NULL), WM_EINVAL);

    /* The iterator walks every string, then says WM_ERANGE, and stays there. */
    CHECK_STATUS(wm_file_array_iter(f, a_str, &it), WM_OK);
    static const char *const want[] = {"a", "bc", "def"};
    for (int k = 0; k < 3; k++) {
        CHECK_STATUS(wm_array_iter_next(&it, &s), WM_OK);
        CHECK(s.len == strlen(want[k]) && memcmp(s.ptr, want[k], s.len) == 0);
    }
    CHECK_STATUS(wm_array_iter_next(&it, &s), WM_ERANGE);
    CHECK_STATUS(wm_array_iter_next(&it, &s), WM_ERANGE);
    CHECK_STATUS(wm_file_metadata(f, a_empty, &kv), WM_OK);
    CHECK_EQ(kv.elem_type, WM_VALUE_U32);
    CHECK_EQ(kv.length, 0);
    wm_file_close(f);
    ggb_free(&g);
}

WM_TEST(getters_tensor_lookup) {
    const tensor1 ts[] = {{"x", 8, WM_TYPE_F32, 0}, {"y", 8, WM_TYPE_F16, 32}};
    ggb g;
    tensors_file(&g, ts, 2, 64);
    wm_file *f = OPEN_OK(ggb_write(&g, "look.gguf"));
    size_t idx;
    wm_tensor_info t;
    CHECK_STATUS(wm_file_find_tensor(f, "y", &idx), WM_OK);
    CHECK_EQ(idx, 1);
    CHECK_STATUS(wm_file_find_tensor(f, "z", &idx), WM_ENOENT);
    CHECK_STATUS(wm_file_find_tensor(f, "", &idx), WM_ENOENT);
    CHECK_STATUS(wm_file_tensor(f, 2, &t), WM_ERANGE);
    CHECK_STATUS(wm_file_tensor(f, 1, NULL), WM_EINVAL);
    CHECK_STATUS(wm_file_tensor(f, 1, &t), WM_OK);
    CHECK_EQ(t.nbytes, 16);
    CHECK_EQ(t.type, WM_TYPE_F16);
    wm_file_close(f);
    ggb_free(&g);
}
