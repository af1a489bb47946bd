/*
 * test_safetensors.c: the safetensors reader on real files and on hand-built good ones.
 *
 * Sections: helpers (hand-built files, descriptor count); every fixture in
 * ../shared/fixtures/safetensors with the figures an independent reading (Python's json) gives;
 * hand-built files that must open (every dtype, scalars, zero-size tensors, padding, shape order,
 * exact 64-bit numbers, tensors listed out of offset order); make-model --format safetensors;
 * truncation sweeps; fault sweeps (the k-th OS call or allocation fails, for every k).
 * The malformed files are in test_safetensors_malformed.c.
 */
#include "wmtest.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers ---- */

/* Writes 8-byte length + header + data_len bytes of data (byte value i & 255). */
static const char *st_write(const char *name, const char *header, size_t data_len) {
    wmt_buf b = {0};
    wmt_put_u64(&b, strlen(header));
    wmt_put(&b, header, strlen(header));
    for (size_t i = 0; i < data_len; i++)
        wmt_put_u8(&b, (uint8_t)i);
    const char *path = wmt_tmp(name);
    wmt_write_file(path, b.p, b.len);
    wmt_buf_free(&b);
    return path;
}

static void check_string(wm_file *f, const char *key, const char *want) {
    wm_string s;
    CHECK_STATUS(wm_file_get_string(f, key, &s), WM_OK);
    CHECK_MSG(s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0, "%s is '%.*s', want '%s'",
              key, (int)s.len, s.ptr, want);
}

/* Tensor i of f, which must be named `name` and have type `type`. */
static wm_tensor_info tensor_is(wm_file *f, size_t i, const char *name, wm_type type) {
    wm_tensor_info t;
    CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
    CHECK_MSG(strcmp(t.name, name) == 0, "tensor %zu is '%s', want '%s'", i, t.name, name);
    CHECK_EQ(t.type, type);
    return t;
}

/* The first n dimensions of t (ggml order) are want[0..n). */
static void check_shape(const wm_tensor_info *t, size_t n, const uint64_t *want) {
    for (size_t d = 0; d < n; d++)
        CHECK_MSG(t->shape[d] == want[d], "'%s' shape[%zu] = %llu, want %llu", t->name, d,
                  (unsigned long long)t->shape[d], (unsigned long long)want[d]);
}

/* The first tensor of the file that st_write writes (which must open): name, header, data. */
static wm_file *open_first_tensor(const char *name, const char *header, size_t data_len,
                                  wm_tensor_info *t) {
    wm_file *f = OPEN_OK(st_write(name, header, data_len));
    CHECK_STATUS(wm_file_tensor(f, 0, t), WM_OK);
    return f;
}

/* The file st_write writes opens with a first tensor of n_dims dimensions, shaped `shape` (ggml
 * order), of `nbytes` bytes. */
static void check_first_tensor(const char *name, const char *header, size_t data_len,
                               uint32_t n_dims, const uint64_t *shape, uint64_t nbytes) {
    wm_tensor_info t;
    wm_file *f = open_first_tensor(name, header, data_len, &t);
    CHECK_EQ(t.n_dims, n_dims);
    check_shape(&t, n_dims, shape);
    CHECK_EQ(t.nbytes, nbytes);
    wm_file_close(f);
}

/* ---- fixtures ---- */

typedef struct fixture {
    const char *file;
    size_t n_tensors, n_kv;
    const char *meta_key, *meta_val; /* one metadata entry, or NULL */
    const char *tensor;              /* one tensor, checked in full */
    wm_type type;
    uint32_t n_dims;
    uint64_t ne0, ne1; /* ggml order */
    uint64_t offset, nbytes;
    uint64_t size, data_offset;
} fixture;

static const fixture fixtures[] = {
    {"candle-mel-filters.safetensors", 1, 0, NULL, NULL, "mel_80", WM_TYPE_F32, 2, 201, 80, 80,
     64320, 64400, 80},
    {"fastsafetensors-a.safetensors", 1, 1, "fst", "sample", "a0", WM_TYPE_F16, 2, 8, 16, 104, 256,
     360, 104},
    {"hf-sample-B.safetensors", 1, 1, "test", "a", "B", WM_TYPE_U8, 1, 6, 1, 89, 6, 95, 89},
    {"hf-sample-H.safetensors", 1, 1, "test", "a", "H", WM_TYPE_U16, 1, 6, 1, 91, 12, 103, 91},
    {"hf-sample-I.safetensors", 1, 1, "test", "a", "I", WM_TYPE_U32, 1, 6, 1, 91, 24, 115, 91},
    {"hf-sample-b.safetensors", 1, 1, "test", "a", "b", WM_TYPE_I8, 1, 6, 1, 89, 6, 95, 89},
    {"hf-sample-d.safetensors", 1, 1, "test", "a", "d", WM_TYPE_F64, 1, 6, 1, 91, 48, 139, 91},
    {"hf-sample-e.safetensors", 1, 1, "test", "a", "e", WM_TYPE_F16, 1, 6, 1, 91, 12, 103, 91},
    {"hf-sample-f.safetensors", 1, 1, "test", "a", "f", WM_TYPE_F32, 1, 6, 1, 91, 24, 115, 91},
    {"hf-sample-h.safetensors", 1, 1, "test", "a", "h", WM_TYPE_I16, 1, 6, 1, 91, 12, 103, 91},
    {"hf-sample-i.safetensors", 1, 1, "test", "a", "i", WM_TYPE_I32, 1, 6, 1, 91, 24, 115, 91},
    {"hf-sample-overall.safetensors", 9, 1, "test", "a", "d", WM_TYPE_F64, 1, 6, 1, 534 + 48, 48,
     702, 534},
    {"runai-empty.safetensors", 0, 0, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, 16, 16},
    {"runai-test.safetensors", 10, 1, "format", "pt", "tensor1.bfloat16", WM_TYPE_BF16, 2, 2, 3,
     752 + 144, 12, 950, 752},
};

static void check_fixture(const fixture *x) {
    char rel[128];
    snprintf(rel, sizeof rel, "safetensors/%s", x->file);
    wm_file *f = OPEN_OK(wmt_fixture(rel));
    CHECK_EQ(wm_file_format(f), WM_FORMAT_SAFETENSORS);
    CHECK_EQ(wm_file_version(f), 1);
    CHECK_EQ(wm_file_alignment(f), 1);
    CHECK_EQ(wm_file_size(f), x->size);
    CHECK_EQ(wm_file_data_offset(f), x->data_offset);
    CHECK_EQ(wm_file_tensor_count(f), x->n_tensors);
    CHECK_EQ(wm_file_metadata_count(f), x->n_kv);
    CHECK_EQ(wm_file_shard_count(f), 1);
    CHECK(strcmp(wm_file_shard_path(f, 0), wmt_fixture(rel)) == 0);
    if (x->meta_key) check_string(f, x->meta_key, x->meta_val);
    /* The tensors tile the data section exactly. */
    uint64_t sum = 0;
    for (size_t i = 0; i < x->n_tensors; i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        CHECK(t.offset >= x->data_offset && t.offset + t.nbytes <= x->size);
        CHECK_EQ(t.shard, 0);
        sum += t.nbytes;
        size_t j;
        CHECK_STATUS(wm_file_find_tensor(f, t.name, &j), WM_OK);
        CHECK_EQ(j, i);
    }
    CHECK_EQ(sum, x->size - x->data_offset);
    CHECK_EQ(wm_file_tensor_bytes(f), sum);
    if (x->tensor) {
        wm_tensor_info t;
        t = wmt_tensor_named(f, x->tensor);
        CHECK_EQ(t.type, x->type);
        CHECK_EQ(t.n_dims, x->n_dims);
        CHECK_EQ(t.shape[0], x->ne0);
        CHECK_EQ(t.shape[1], x->ne1);
        CHECK_EQ(t.shape[2], 1);
        CHECK_EQ(t.n_elements, x->ne0 * x->ne1);
        CHECK_EQ(t.offset, x->offset);
        CHECK_EQ(t.nbytes, x->nbytes);
    }
    wm_file_close(f);
}

WM_TEST(fixtures_all) {
    int fds = wmt_count_fds();
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
        check_fixture(&fixtures[i]);
    CHECK_EQ(wmt_count_fds(), fds);
}

/* The overall sample holds one tensor of each of nine dtypes; runai-test ten, with BF16 and
 * BOOL, listed out of offset order (bfloat16 lies after int32). */
WM_TEST(fixtures_dtypes) {
    static const struct {
        const char *name;
        wm_type type;
    } overall[] = {{"B", WM_TYPE_U8},  {"H", WM_TYPE_U16}, {"I", WM_TYPE_U32},
                   {"b", WM_TYPE_I8},  {"d", WM_TYPE_F64}, {"e", WM_TYPE_F16},
                   {"f", WM_TYPE_F32}, {"h", WM_TYPE_I16}, {"i", WM_TYPE_I32}};
    wm_file *f = OPEN_OK(wmt_fixture("safetensors/hf-sample-overall.safetensors"));
    uint64_t off = 534;
    for (size_t i = 0; i < 9; i++) {
        wm_tensor_info t = tensor_is(f, i, overall[i].name, overall[i].type);
        CHECK_EQ(t.n_elements, 6);
        CHECK_EQ(t.offset, off);
        off += t.nbytes;
    }
    wm_file_close(f);
    static const struct {
        const char *name;
        wm_type type;
        uint64_t rel;
    } runai[] = {{"tensor1.int64", WM_TYPE_I64, 0},    {"tensor1.float64", WM_TYPE_F64, 48},
                 {"tensor1.float32", WM_TYPE_F32, 96}, {"tensor1.bfloat16", WM_TYPE_BF16, 144},
                 {"tensor1.int32", WM_TYPE_I32, 120},  {"tensor1.float16", WM_TYPE_F16, 156},
                 {"tensor1.int16", WM_TYPE_I16, 168},  {"tensor1.int8", WM_TYPE_I8, 180},
                 {"tensor1.uint8", WM_TYPE_U8, 186},   {"tensor1.bool", WM_TYPE_BOOL, 192}};
    f = OPEN_OK(wmt_fixture("safetensors/runai-test.safetensors"));
    for (size_t i = 0; i < 10; i++) {
        wm_tensor_info t = tensor_is(f, i, runai[i].name, runai[i].type);
        CHECK_EQ(t.n_dims, 2);
        check_shape(&t, 2, (const uint64_t[]){2, 3});
        CHECK_EQ(t.offset, 752 + runai[i].rel);
    }
    wm_file_close(f);
}

/* The bytes at a tensor's reported offset are its data: in hf-sample-overall (read with Python),
 * B (u8) is [253, 254, 255, 0, 1, 2] and f (f32) is [-3, -2, -1, 0, 1, 2]. */
WM_TEST(fixture_data_at_offset) {
    const char *path = wmt_fixture("safetensors/hf-sample-overall.safetensors");
    wm_file *f = OPEN_OK(path);
    size_t len;
    unsigned char *bytes = wmt_read_file(path, &len);
    wm_tensor_info t;
    t = wmt_tensor_named(f, "B");
    static const unsigned char b[6] = {253, 254, 255, 0, 1, 2};
    CHECK(memcmp(bytes + t.offset, b, 6) == 0);
    t = wmt_tensor_named(f, "f");
    for (int k = 0; k < 6; k++) {
        float v;
        memcpy(&v, bytes + t.offset + 4 * k, 4);
        CHECK(v == (float)(k - 3));
    }
    free(bytes);
    wm_file_close(f);
}

/* ---- hand-built files that must open ---- */

WM_TEST(every_dtype) {
    static const struct {
        const char *dtype;
        wm_type type;
        const char *shape;
        uint64_t n, bytes;
    } d[] = {
        {"BOOL", WM_TYPE_BOOL, "[3]", 3, 3},
        {"U8", WM_TYPE_U8, "[3]", 3, 3},
        {"I8", WM_TYPE_I8, "[3]", 3, 3},
        {"F8_E4M3", WM_TYPE_F8_E4M3, "[3]", 3, 3},
        {"F8_E5M2", WM_TYPE_F8_E5M2, "[3]", 3, 3},
        {"F8_E8M0", WM_TYPE_F8_E8M0, "[3]", 3, 3},
        {"I16", WM_TYPE_I16, "[3]", 3, 6},
        {"U16", WM_TYPE_U16, "[3]", 3, 6},
        {"F16", WM_TYPE_F16, "[3]", 3, 6},
        {"BF16", WM_TYPE_BF16, "[3]", 3, 6},
        {"I32", WM_TYPE_I32, "[3]", 3, 12},
        {"U32", WM_TYPE_U32, "[3]", 3, 12},
        {"F32", WM_TYPE_F32, "[3]", 3, 12},
        {"F64", WM_TYPE_F64, "[3]", 3, 24},
        {"I64", WM_TYPE_I64, "[3]", 3, 24},
        {"U64", WM_TYPE_U64, "[3]", 3, 24},
        {"F4", WM_TYPE_F4, "[3,2]", 6, 3},
        {"F6_E2M3", WM_TYPE_F6_E2M3, "[2,4]", 8, 6},
        {"F6_E3M2", WM_TYPE_F6_E3M2, "[4]", 4, 3},
        {"C64", WM_TYPE_C64, "[3]", 3, 24},
        {"F8_E4M3FNUZ", WM_TYPE_F8_E4M3FNUZ, "[3]", 3, 3},
        {"F8_E5M2FNUZ", WM_TYPE_F8_E5M2FNUZ, "[2,2]", 4, 4},
    };
    size_t n = sizeof d / sizeof d[0];
    char hdr[4096];
    size_t p = (size_t)snprintf(hdr, sizeof hdr, "{");
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        p += (size_t)snprintf(
            hdr + p, sizeof hdr - p,
            "%s\"t%zu\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%llu,%llu]}", i ? "," : "",
            i, d[i].dtype, d[i].shape, (unsigned long long)off,
            (unsigned long long)(off + d[i].bytes));
        off += d[i].bytes;
    }
    snprintf(hdr + p, sizeof hdr - p, "}");
    wm_file *f = OPEN_OK(st_write("all.safetensors", hdr, off));
    CHECK_EQ(wm_file_tensor_count(f), n);
    for (size_t i = 0; i < n; i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        CHECK_MSG(t.type == d[i].type, "%s: type %d", d[i].dtype, (int)t.type);
        CHECK_EQ(t.n_elements, d[i].n);
        CHECK_EQ(t.nbytes, d[i].bytes);
        CHECK(wm_type_name(t.type) != NULL);
    }
    wm_file_close(f);
}

/* A scalar (shape []), zero-size tensors (data_offsets [x, x]), a header padded with spaces and
 * ending in JSON white space, metadata with escapes, a null __metadata__ elsewhere. */
WM_TEST(scalar_zero_size_padding) {
    const char *h = "{\"__metadata__\":{\"k\":\"a\\\"b\\u00e9\\n\",\"empty\":\"\"},"
                    "\"z\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[0,0]},"
                    "\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]},"
                    "\"z2\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,8]}}  \t\r\n      ";
    wm_file *f = OPEN_OK(st_write("scalar.safetensors", h, 8));
    CHECK_EQ(wm_file_tensor_count(f), 3);
    wm_tensor_info t;
    t = wmt_tensor_named(f, "s");
    CHECK_EQ(t.n_dims, 0);
    CHECK_EQ(t.n_elements, 1);
    CHECK_EQ(t.nbytes, 8);
    CHECK_EQ(t.shape[0], 1);
    CHECK_EQ(t.offset, 8 + strlen(h));
    t = wmt_tensor_named(f, "z");
    CHECK_EQ(t.n_dims, 2);
    check_shape(&t, 2, (const uint64_t[]){5, 0});
    CHECK_EQ(t.n_elements, 0);
    CHECK_EQ(t.nbytes, 0);
    check_string(f, "k", "a\"b\xc3\xa9\n");
    check_string(f, "empty", "");
    CHECK_EQ(wm_file_metadata_count(f), 2);
    wm_file_close(f);

    f = OPEN_OK(st_write(
        "nullmeta.safetensors",
        "{\"__metadata__\":null,\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}",
        2));
    CHECK_EQ(wm_file_metadata_count(f), 0);
    CHECK_EQ(wm_file_tensor_count(f), 1);
    wm_file_close(f);
}

/* Shapes are outermost first in the file and ggml order here; unknown fields are ignored (with
 * numbers in them, which must not shift the exact values of the numbers that follow). */
WM_TEST(shape_order_and_unknown_fields) {
    const char *h = "{\"x\":{\"extra\":[1.5,-2,{\"n\":7}],\"dtype\":\"U8\",\"shape\":[2,3,4,5],"
                    "\"more\":3,\"data_offsets\":[0,120]}}";
    check_first_tensor("order.safetensors", h, 120, 4, (const uint64_t[]){5, 4, 3, 2}, 120);
}

/* Numbers are read exactly: a dimension of 2^64 - 1 and one of 2^53 + 1 (both next to a zero
 * dimension, so the tensor is empty) come back unrounded. */
WM_TEST(exact_64bit_numbers) {
    const char *h = "{\"x\":{\"dtype\":\"U8\",\"shape\":[0,18446744073709551615,9007199254740993],"
                    "\"data_offsets\":[0,0]}}";
    check_first_tensor("exact.safetensors", h, 0, 3,
                       (const uint64_t[]){9007199254740993ull, UINT64_MAX, 0}, 0);
}

/* The header order is kept; offsets may come in any order. */
WM_TEST(out_of_order_offsets) {
    const char *h = "{\"late\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
                    "\"early\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    wm_tensor_info t;
    wm_file *f = open_first_tensor("order2.safetensors", h, 12, &t);
    CHECK(strcmp(t.name, "late") == 0);
    CHECK_EQ(t.offset, 8 + strlen(h) + 4);
    CHECK_STATUS(wm_file_tensor(f, 1, &t), WM_OK);
    CHECK(strcmp(t.name, "early") == 0);
    CHECK_EQ(t.offset, 8 + strlen(h));
    wm_file_close(f);
}

/* Escapes in names decode to UTF-8: a \u escape pair (a UTF-16 surrogate pair) to one 4-byte
 * character, \u00e9 to two bytes, \/ and \t to their characters. */
WM_TEST(escaped_names_decode_to_utf8) {
    const char *h = "{\"caf\\u00e9.\\ud83d\\ude00\\/\\t\":{\"dtype\":\"U8\",\"shape\":[1],"
                    "\"data_offsets\":[0,1]}}";
    wm_file *f = OPEN_OK(st_write("escaped.safetensors", h, 1));
    size_t i;
    CHECK_STATUS(wm_file_find_tensor(f, "caf\xc3\xa9.\xf0\x9f\x98\x80/\t", &i), WM_OK);
    wm_file_close(f);
}

/* Names are any UTF-8; a file need not end in .safetensors to be recognised by content. */
WM_TEST(utf8_names_and_detection) {
    const char *h = "{\"caf\xc3\xa9.\xf0\x9f\x98\x80\":{\"dtype\":\"U8\",\"shape\":[1],\"data_"
                    "offsets\":[0,1]}}";
    wm_file *f = OPEN_OK(st_write("model.bin", h, 1));
    CHECK_EQ(wm_file_format(f), WM_FORMAT_SAFETENSORS);
    size_t i;
    CHECK_STATUS(wm_file_find_tensor(f, "caf\xc3\xa9.\xf0\x9f\x98\x80", &i), WM_OK);
    wm_file_close(f);
}

/* ---- make-model --format safetensors ---- */

WM_TEST(make_model_safetensors) {
    char cmd[1024];
    const char *a = wmt_tmp("a.safetensors"), *b = wmt_tmp("b.safetensors");
    snprintf(cmd, sizeof cmd,
             "%s make-model %s --size 4M --seed 7 --format safetensors && "
             "%s make-model %s --size 4M --seed 7",
             WM_CLI, a, WM_CLI, b);
    CHECK_EQ(system(cmd), 0);
    size_t la, lb;
    void *pa = wmt_read_file(a, &la), *pb = wmt_read_file(b, &lb);
    CHECK(la == lb && memcmp(pa, pb, la) == 0); /* deterministic; format from the extension */
    CHECK(la <= 4u << 20);
    CHECK(la > 2u << 20);
    free(pa);
    free(pb);
    wm_file *f = OPEN_OK(a);
    CHECK_EQ(wm_file_format(f), WM_FORMAT_SAFETENSORS);
    CHECK_EQ((wm_file_data_offset(f) - 8) % 8, 0); /* header padded to 8 as the reference does */
    check_string(f, "general.architecture", "llama");
    wm_tensor_info t;
    t = wmt_tensor_named(f, "blk.0.attn_q.weight");
    CHECK_EQ(t.type, WM_TYPE_F16);
    CHECK_EQ(t.n_dims, 2);
    t = wmt_tensor_named(f, "blk.0.ffn_down.weight");
    CHECK_EQ(t.type, WM_TYPE_F16);
    CHECK(t.shape[0] > t.shape[1]); /* ffn_down: n_ff along the row, as in GGUF */
    t = wmt_tensor_named(f, "blk.0.attn_norm.weight");
    CHECK_EQ(t.type, WM_TYPE_F32);
    CHECK_EQ(t.n_dims, 1);
    wm_file_close(f);
}

/* ---- truncation ---- */

/* The file cut to l bytes opens only at its full length; every shorter prefix is refused with
 * WM_EFORMAT naming the file and an offset, holding nothing. */
static void open_cut(const char *path, uint64_t l, uint64_t full, int fds) {
    CHECK(truncate(path, (off_t)l) == 0);
    wm_error err = {0};
    wm_file *f = (wm_file *)(uintptr_t)1;
    wm_status st = wm_file_open(path, &f, &err);
    if (l == full) {
        CHECK_STATUS(st, WM_OK);
        wm_file_close(f);
    } else {
        CHECK_MSG(st == WM_EFORMAT, "%llu bytes of %llu: %s (%s)", (unsigned long long)l,
                  (unsigned long long)full, wm_status_name(st), err.msg);
        CHECK(f == NULL);
        CHECK_MSG(strstr(err.msg, "offset") && strstr(err.msg, path), "%s", err.msg);
    }
    CHECK_LEDGER_EMPTY();
    CHECK_EQ(wmt_count_fds(), fds);
}

/* Every length through the header and 16 bytes beyond, and `samples` lengths over the data. */
static void truncation_sweep(const char *src, unsigned samples) {
    const char *path = wmt_tmp("cut.safetensors");
    size_t len = wmt_copy_file(src, path);
    int fds = wmt_count_fds();
    wm_file *f = OPEN_OK(path);
    uint64_t every = wm_file_data_offset(f) + 16;
    wm_file_close(f);
    if (every > len) every = len;
    open_cut(path, len, len, fds);
    if (len > every)
        for (unsigned k = samples; k >= 1; k--)
            open_cut(path, every + (len - 1 - every) * k / (samples + 1), len, fds);
    for (uint64_t l = every + 1; l-- > 0;)
        if (l < len) open_cut(path, l, len, fds);
}

WM_TEST(truncate_runai_test) {
    /* every length of the 950-byte file, longest first (each cut shortens the copy) */
    const char *path = wmt_tmp("cut.safetensors");
    size_t len = wmt_copy_file(wmt_fixture("safetensors/runai-test.safetensors"), path);
    int fds = wmt_count_fds();
    for (size_t l = len + 1; l-- > 0;)
        open_cut(path, l, len, fds);
}

WM_TEST(truncate_overall_and_mel) {
    truncation_sweep(wmt_fixture("safetensors/hf-sample-overall.safetensors"), 50);
    truncation_sweep(wmt_fixture("safetensors/candle-mel-filters.safetensors"), 100);
}

/* ---- faults ---- */

static void fault_sweep(const char *path) {
    /* Every fault but advice fails the open. At least: open, stat, two reads, allocations (the
     * tree's). */
    CHECK(wmt_open_fault_sweep(path, path) >= 6);
}

WM_TEST(faults_runai_test) { fault_sweep(wmt_fixture("safetensors/runai-test.safetensors")); }
WM_TEST(faults_overall) { fault_sweep(wmt_fixture("safetensors/hf-sample-overall.safetensors")); }
WM_TEST(faults_empty) { fault_sweep(wmt_fixture("safetensors/runai-empty.safetensors")); }

/* A header of 3,000 tensors: the tree's nodes outgrow the first arena chunk, so faults land inside
 * the tree builder too (they must come back as WM_ENOMEM, not as bad JSON). */
WM_TEST(faults_many_tensors) {
    wmt_buf h = {0};
    wmt_put(&h, "{", 1);
    for (int i = 0; i < 3000; i++) {
        char e[128];
        int n =
            snprintf(e, sizeof e,
                     "%s\"tensor.%d\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%d,%d]}",
                     i ? "," : "", i, i, i + 1);
        wmt_put(&h, e, (size_t)n);
    }
    wmt_put(&h, "}", 2); /* with the NUL, for st_write */
    const char *path = st_write("many.safetensors", (const char *)h.p, 3000);
    wmt_buf_free(&h);
    wm_file *f = OPEN_OK(path);
    CHECK_EQ(wm_file_tensor_count(f), 3000);
    wm_file_close(f);
    fault_sweep(path);
}

/* ---- threads ---- */

/* Opens on several threads at once parse correctly and hold nothing afterwards (each thread's
 * JSON arena is its own; the parser has no process-wide state). */
static void *open_many(void *arg) {
    const char *path = arg;
    for (int i = 0; i < 200; i++) {
        wm_file *f = NULL;
        if (wm_file_open(path, &f, NULL) != WM_OK || wm_file_tensor_count(f) != 10)
            return (void *)1;
        wm_file_close(f);
    }
    return NULL;
}

WM_TEST(concurrent_opens) {
    pthread_t t[4];
    char *path = strdup(wmt_fixture("safetensors/runai-test.safetensors"));
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, open_many, path) == 0);
    for (int i = 0; i < 4; i++) {
        void *r;
        CHECK(pthread_join(t[i], &r) == 0);
        CHECK(r == NULL);
    }
    free(path);
}
