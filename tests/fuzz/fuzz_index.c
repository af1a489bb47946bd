/*
 * fuzz_index.c: libFuzzer harness wm_fuzz_index, for sharded safetensors checkpoints. The input
 * is written as "model.safetensors.index.json" in a private temporary folder that also holds two
 * small, valid shards (model-00001-of-00002.safetensors with tensors "a" and "b",
 * model-00002-of-00002.safetensors with "c"), so an index may name shards that exist (and then
 * agree or disagree with them) or shards that do not. Opened, walked, closed; the ledger must be
 * empty afterwards (also with one OS call or allocation failed, see wmf_with_faults). Inputs whose
 * length is a multiple of 4 are also opened through a shard's name with wm_file_open_set, which
 * finds the index next to it; those of length 1 modulo 4 through a shard's name with the index
 * removed (the reader then opens every K-of-N sibling).
 */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A safetensors file: 8-byte little-endian header length, the JSON header, the data. */
static void put_shard(const char *name, const char *json, size_t data_len) {
    unsigned char buf[512];
    size_t n = strlen(json);
    if (8 + n + data_len > sizeof buf) abort();
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, json, n);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + n + i] = (unsigned char)(i * 7 + 1);
    wmf_put_file(name, buf, 8 + n + data_len);
}

static void make_shards(void) {
    put_shard("model-00001-of-00002.safetensors",
              "{\"__metadata__\":{\"format\":\"pt\"},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
              "\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[16,24]}}",
              24);
    put_shard("model-00002-of-00002.safetensors",
              "{\"c\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]}}", 12);
}

static void run_path(void *path) { wmf_open_walk_close(path); }

/* A shard's path opens its whole set (through the index beside it, or by the names). */
static void run_set_path(void *path) { wmf_open_set_walk_close(path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    if (!ready) {
        make_shards();
        ready = 1;
    }
    char index[400], shard[400];
    snprintf(index, sizeof index, "%s", wmf_put_file("model.safetensors.index.json", data, size));
    snprintf(shard, sizeof shard, "%s/model-00002-of-00002.safetensors", wmf_dir());
    wmf_with_faults(run_path, index, data, size);
    if (size % 4 == 0) wmf_with_faults(run_set_path, shard, data, size);
    if (size % 4 == 1) {
        unlink(index);
        wmf_with_faults(run_set_path, shard, data, size);
    }
    return 0;
}
