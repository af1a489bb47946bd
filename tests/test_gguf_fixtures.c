/*
 * test_gguf_fixtures.c: every GGUF fixture opens with the figures its README and an independent
 * reading give; the malformed fixtures are refused with a message naming the defect.
 */
#include "wmtest.h"

#include <string.h>

typedef struct expect {
    const char *file;
    uint32_t version;
    size_t n_tensors, n_kv;
} expect;

static void open_and_check(const expect *e) {
    wm_file *f = NULL;
    wm_error err = {0};
    wm_status st = wm_file_open(wmt_fixture(e->file), &f, &err);
    CHECK_MSG(st == WM_OK, "%s: %s", e->file, err.msg);
    CHECK_EQ(wm_file_format(f), WM_FORMAT_GGUF);
    CHECK_EQ(wm_file_version(f), e->version);
    CHECK_EQ(wm_file_tensor_count(f), e->n_tensors);
    CHECK_EQ(wm_file_metadata_count(f), e->n_kv);
    /* Every tensor lies inside the file, aligned; find-by-name agrees with get-by-index. */
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        CHECK(t.offset >= wm_file_data_offset(f));
        CHECK((t.offset - wm_file_data_offset(f)) % wm_file_alignment(f) == 0);
        CHECK(t.offset + t.nbytes <= wm_file_size(f));
        size_t j;
        CHECK_STATUS(wm_file_find_tensor(f, t.name, &j), WM_OK);
        CHECK_EQ(j, i);
    }
    wm_file_close(f);
}

WM_TEST(stories260K) {
    expect e = {"gguf/stories260K.gguf", 3, 48, 19};
    open_and_check(&e);
    wm_file *f;
    CHECK_STATUS(wm_file_open(wmt_fixture(e.file), &f, NULL), WM_OK);
    wm_string s;
    CHECK_STATUS(wm_file_get_string(f, "general.architecture", &s), WM_OK);
    CHECK(s.len == 5 && memcmp(s.ptr, "llama", 5) == 0);
    uint32_t n;
    CHECK_STATUS(wm_file_get_u32(f, "llama.block_count", &n), WM_OK);
    CHECK_EQ(n, 5);
    CHECK_STATUS(wm_file_get_string(f, "llama.block_count", &s), WM_ETYPE);
    CHECK_STATUS(wm_file_get_u32(f, "no.such.key", &n), WM_ENOENT);
    size_t idx;
    CHECK_STATUS(wm_file_find_metadata(f, "tokenizer.ggml.tokens", &idx), WM_OK);
    wm_kv kv;
    CHECK_STATUS(wm_file_metadata(f, idx, &kv), WM_OK);
    CHECK_EQ(kv.type, WM_VALUE_ARRAY);
    CHECK_EQ(kv.elem_type, WM_VALUE_STRING);
    CHECK_EQ(kv.length, 512);
    CHECK_STATUS(wm_file_array_string(f, idx, 0, &s), WM_OK);
    CHECK(s.len == 5 && memcmp(s.ptr, "<unk>", 5) == 0);
    CHECK_STATUS(wm_file_array_string(f, idx, 512, &s), WM_ERANGE);
    CHECK_STATUS(wm_file_array_u64(f, idx, 0, NULL), WM_ETYPE);
    wm_tensor_info t;
    CHECK_STATUS(wm_file_tensor(f, 48, &t), WM_ERANGE);
    t = wmt_tensor_named(f, "token_embd.weight");
    CHECK_EQ(t.type, WM_TYPE_F32);
    CHECK_EQ(t.n_dims, 2);
    CHECK_EQ(t.shape[0], 64);
    CHECK_EQ(t.shape[1], 512);
    CHECK_EQ(t.nbytes, 64 * 512 * 4);
    wm_file_close(f);
}

WM_TEST(stories260K_quantized) {
    static const expect es[] = {
        {"gguf/stories260K-f16.gguf", 3, 48, 21},    {"gguf/stories260K-bf16.gguf", 3, 48, 21},
        {"gguf/stories260K-q8_0.gguf", 3, 48, 21},   {"gguf/stories260K-q4_0.gguf", 3, 48, 21},
        {"gguf/stories260K-q4_k_m.gguf", 3, 48, 21},
    };
    for (size_t i = 0; i < sizeof es / sizeof es[0]; i++)
        open_and_check(&es[i]);
}

WM_TEST(version1) {
    expect e = {"gguf/stories260K-v1.gguf", 1, 48, 18};
    open_and_check(&e);
}

WM_TEST(vocab_only_files) {
    static const expect es[] = {
        {"gguf/ggml-vocab-llama-spm.gguf", 3, 0, 22}, {"gguf/ggml-vocab-bert-bge.gguf", 3, 0, 20},
        {"gguf/ggml-vocab-gpt-2.gguf", 3, 0, 16},     {"gguf/ggml-vocab-phi-3.gguf", 3, 0, 26},
        {"gguf/ggml-vocab-aquila.gguf", 2, 0, 18},    {"gguf/ggml-vocab-llama-bpe.gguf", 3, 0, 20},
    };
    for (size_t i = 0; i < sizeof es / sizeof es[0]; i++)
        open_and_check(&es[i]);
    wm_file *f;
    CHECK_STATUS(wm_file_open(wmt_fixture("gguf/ggml-vocab-llama-bpe.gguf"), &f, NULL), WM_OK);
    size_t idx;
    CHECK_STATUS(wm_file_find_metadata(f, "tokenizer.ggml.tokens", &idx), WM_OK);
    wm_array_iter it;
    CHECK_STATUS(wm_file_array_iter(f, idx, &it), WM_OK);
    wm_string s;
    uint64_t n = 0;
    while (wm_array_iter_next(&it, &s) == WM_OK)
        n++;
    CHECK_EQ(n, 128256);
    wm_file_close(f);
}

WM_TEST(other_models) {
    static const expect es[] = {
        {"gguf/superpoint.gguf", 3, 24, 1},
        {"gguf/ratchet-dummy.gguf", 3, 10, 15},
        {"gguf/ratchet-test.gguf", 3, 1, 3},
    };
    for (size_t i = 0; i < sizeof es / sizeof es[0]; i++)
        open_and_check(&es[i]);
}

WM_TEST(malformed_lfs_pointer) {
    wm_file *f = (wm_file *)1;
    wm_error err;
    CHECK_STATUS(wm_file_open(wmt_fixture("malformed/lfs-pointer.gguf"), &f, &err), WM_EFORMAT);
    CHECK(f == NULL);
    CHECK_MSG_HAS(err, "lfs-pointer.gguf");
    CHECK_MSG_HAS(err, "not a GGUF file");
    CHECK_MSG_HAS(err, "offset 0");
}

WM_TEST(malformed_q8_0_row_172) {
    wm_file *f;
    wm_error err;
    CHECK_STATUS(wm_file_open(wmt_fixture("malformed/q8_0-row-172.gguf"), &f, &err), WM_EFORMAT);
    CHECK_MSG_HAS(err, "q8_0-row-172.gguf");
    CHECK_MSG_HAS(err, "row of 172 elements is not a multiple of the q8_0 block of 32");
}

WM_TEST(missing_file) {
    wm_file *f;
    wm_error err;
    CHECK_STATUS(wm_file_open(wmt_tmp("nope.gguf"), &f, &err), WM_ENOENT);
    CHECK_EQ(err.os_errno, 2);
    CHECK_MSG_HAS(err, "nope.gguf");
}
