/*
 * test_shards.c: sharded safetensors checkpoints and GGUF split sets: one shard opened alone
 * (wm_file_open on a shard's path), a set opened as one file (wm_file_open on an index,
 * wm_file_open_set on any shard or part, wm_file_open_paths on a list).
 *
 * Sections: helpers (make-model through the CLI, a tiny GGUF part writer, editing an index,
 * patching bytes); good sets (opened through the index, any shard's set or a list: the same
 * tensors and the same bytes as the one-file model of the same seed); a shard alone (its own
 * tensors, metadata and size, as its own JSON header says; four handles on four shards hold and
 * read the set once); explicit lists; broken sets (missing, extra, misplaced and duplicated
 * tensors and shards, inconsistent split keys, unsafe shard names, files listed twice), each
 * refused with a message naming the shard and nothing held; truncation and fault sweeps over
 * every way to open; `weightmap info`, `cat` and `check` with and without --set; llama.cpp (the
 * npm peer, when installed) loading make-model's GGUF split sets.
 */
#include "wmtest.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ---- */

/* Regions of this process that map a weight file of the case's folder (the library's meter:
 * every region of a .gguf or .safetensors file, wm_mem_file_regions). */
static int tmp_maps(void) {
    wm_file_region r[64];
    size_t n = 0;
    wm_error err;
    CHECK_MSG(wm_mem_file_regions(0, NULL, r, 64, &n, &err) == WM_OK, "%s", err.msg);
    CHECK(n <= 64);
    int mine = 0;
    for (size_t i = 0; i < n; i++)
        if (strstr(r[i].path, wmt_tmpdir())) mine++;
    return mine;
}

/* Opening with `open` fails with `want`, the message holds n1 and n2 (each NULL for none), and
 * nothing is held: no descriptor, no ledger bytes, no mapping. */
static void refused_by(wmt_opener open, const char *path, wm_status want, const char *n1,
                       const char *n2) {
    int fds = wmt_count_fds();
    wm_file *f = (wm_file *)(uintptr_t)1;
    wm_error err = {0};
    wm_status st = open(path, &f, &err);
    CHECK_MSG(st == want, "%s: %s, want %s (%s)", path, wm_status_name(st), wm_status_name(want),
              err.msg);
    CHECK(f == NULL);
    CHECK_MSG(n1 == NULL || strstr(err.msg, n1), "\"%s\" lacks \"%s\"", err.msg, n1);
    CHECK_MSG(n2 == NULL || strstr(err.msg, n2), "\"%s\" lacks \"%s\"", err.msg, n2);
    CHECK_EQ(wmt_count_fds(), fds);
    CHECK_EQ(tmp_maps(), 0);
    CHECK_LEDGER_EMPTY();
}

/* Refused by wm_file_open (an index), and by wm_file_open_set (a shard's set). */
static void refused(const char *path, wm_status want, const char *n1, const char *n2) {
    refused_by(wm_file_open, path, want, n1, n2);
}

static void refused_set(const char *path, wm_status want, const char *n1, const char *n2) {
    refused_by(wm_file_open_set, path, want, n1, n2);
}

/* The list a case opens with wm_file_open_paths through an opener (refused_by, the sweeps). */
static const char *g_list[8];
static size_t g_n;

static wm_status open_list(const char *path, wm_file **out, wm_error *err) {
    (void)path;
    return wm_file_open_paths(g_list, g_n, out, err);
}

static void set_list(size_t n, const char *const *paths) {
    static char buf[8][512];
    for (size_t i = 0; i < n; i++) {
        snprintf(buf[i], sizeof buf[i], "%s", paths[i]);
        g_list[i] = buf[i];
    }
    g_n = n;
}

/* The list refused (path: the first file, for the messages). */
static void refused_list(wm_status want, const char *n1, const char *n2) {
    refused_by(open_list, g_n ? g_list[0] : "(empty list)", want, n1, n2);
}

/* Replaces the first `from` in a text file by `to`. */
static void edit_file(const char *path, const char *from, const char *to) {
    size_t len;
    char *s = wmt_read_file(path, &len);
    s = realloc(s, len + 1);
    s[len] = 0;
    char *at = strstr(s, from);
    CHECK_MSG(at != NULL, "%s: no \"%s\"", path, from);
    wmt_buf b = {0};
    wmt_put(&b, s, (size_t)(at - s));
    wmt_put(&b, to, strlen(to));
    wmt_put(&b, at + strlen(from), len - (size_t)(at - s) - strlen(from));
    wmt_write_file(path, b.p, b.len);
    wmt_buf_free(&b);
    free(s);
}

/* Overwrites `n` bytes after the first occurrence of `key` (+ skip) in a binary file. */
static void patch_after(const char *path, const char *key, size_t skip, const void *bytes,
                        size_t n) {
    size_t len;
    unsigned char *s = wmt_read_file(path, &len);
    unsigned char *at = memmem(s, len, key, strlen(key));
    CHECK_MSG(at != NULL, "%s: no \"%s\"", path, key);
    memcpy(at + strlen(key) + skip, bytes, n);
    wmt_write_file(path, s, len);
    free(s);
}

/* A small GGUF v3 part: split.no/count/tensors.count (u16, u16, i32, as llama.cpp writes them)
 * unless count is 0, and one F32 tensor of 4 elements. */
static void gguf_part(const char *path, uint16_t no, uint16_t count, int32_t total,
                      const char *tensor) {
    wmt_buf b = {0};
    wmt_put(&b, "GGUF", 4);
    wmt_put_u32(&b, 3);
    wmt_put_u64(&b, 1);
    wmt_put_u64(&b, count ? 3 : 0);
    if (count) {
        const char *keys[3] = {"split.no", "split.count", "split.tensors.count"};
        for (int k = 0; k < 3; k++) {
            wmt_put_u64(&b, strlen(keys[k]));
            wmt_put(&b, keys[k], strlen(keys[k]));
            wmt_put_u32(&b, k < 2 ? WM_VALUE_U16 : WM_VALUE_I32);
            if (k == 0) wmt_put(&b, &no, 2);
            if (k == 1) wmt_put(&b, &count, 2);
            if (k == 2) wmt_put(&b, &total, 4);
        }
    }
    wmt_put_u64(&b, strlen(tensor));
    wmt_put(&b, tensor, strlen(tensor));
    wmt_put_u32(&b, 1);
    wmt_put_u64(&b, 4);
    wmt_put_u32(&b, WM_TYPE_F32);
    wmt_put_u64(&b, 0);
    while (b.len % 32)
        wmt_put_u8(&b, 0);
    wmt_put_zeros(&b, 16);
    wmt_write_file(path, b.p, b.len);
    wmt_buf_free(&b);
}

/* A one-tensor safetensors file. */
static void st_part(const char *path, const char *tensor) {
    char h[256];
    snprintf(h, sizeof h, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
             tensor);
    wmt_buf b = {0};
    wmt_put_u64(&b, strlen(h));
    wmt_put(&b, h, strlen(h));
    wmt_put_zeros(&b, 4);
    wmt_write_file(path, b.p, b.len);
    wmt_buf_free(&b);
}

/* The set has the tensors of the one-file model, in the same order, with the same bytes: each
 * tensor's bytes are read from its shard's file at its offset. */
static void same_as_single(wm_file *set, const char *single) {
    wm_file *one = OPEN_OK(single);
    CHECK_EQ(wm_file_tensor_count(set), wm_file_tensor_count(one));
    CHECK_EQ(wm_file_tensor_bytes(set), wm_file_tensor_bytes(one));
    uint32_t ns = wm_file_shard_count(set);
    CHECK(ns >= 1 && ns <= 8);
    unsigned char *shard[8];
    size_t slen[8];
    uint64_t total = 0;
    for (uint32_t i = 0; i < ns; i++) {
        shard[i] = wmt_read_file(wm_file_shard_path(set, i), &slen[i]);
        total += slen[i];
    }
    CHECK_EQ(wm_file_size(set), total);
    size_t olen;
    unsigned char *obytes = wmt_read_file(single, &olen);
    bool used[8] = {0};
    for (size_t i = 0; i < wm_file_tensor_count(one); i++) {
        wm_tensor_info a, b;
        CHECK_STATUS(wm_file_tensor(one, i, &a), WM_OK);
        CHECK_STATUS(wm_file_tensor(set, i, &b), WM_OK);
        CHECK(strcmp(a.name, b.name) == 0);
        CHECK_EQ(a.type, b.type);
        CHECK_EQ(a.n_dims, b.n_dims);
        for (int d = 0; d < WM_MAX_DIMS; d++)
            CHECK_EQ(a.shape[d], b.shape[d]);
        CHECK_EQ(a.nbytes, b.nbytes);
        CHECK(b.shard < ns);
        used[b.shard] = true;
        CHECK(b.offset + b.nbytes <= slen[b.shard]);
        CHECK_MSG(memcmp(shard[b.shard] + b.offset, obytes + a.offset, a.nbytes) == 0,
                  "tensor %s: bytes differ", a.name);
        size_t j;
        CHECK_STATUS(wm_file_find_tensor(set, a.name, &j), WM_OK);
        CHECK_EQ(j, i);
    }
    for (uint32_t i = 0; i < ns; i++) {
        CHECK_MSG(used[i], "shard %u holds no tensor", i);
        free(shard[i]);
    }
    free(obytes);
    wm_file_close(one);
}

/* ---- good sets ---- */

WM_TEST(safetensors_index_and_any_shards_set) {
    const char *one = wmt_make_model("one.safetensors", "--size 1M --seed 5");
    wmt_make_model("s.safetensors", "--size 1M --seed 5 --shards 3");
    int fds = wmt_count_fds();
    const char *paths[4] = {
        wmt_tmp("s.safetensors.index.json"), wmt_tmp("s-00001-of-00003.safetensors"),
        wmt_tmp("s-00002-of-00003.safetensors"), wmt_tmp("s-00003-of-00003.safetensors")};
    for (int i = 0; i < 4; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s", paths[i]);
        wm_file *f = i == 0 ? OPEN_OK(p) : OPEN_SET_OK(p); /* the index, or a shard's set */
        CHECK(strcmp(wm_file_path(f), p) == 0);
        CHECK_EQ(wm_file_format(f), WM_FORMAT_SAFETENSORS);
        CHECK_EQ(wm_file_shard_count(f), 3);
        CHECK(strstr(wm_file_shard_path(f, 0), "s-00001-of-00003.safetensors"));
        CHECK(strstr(wm_file_shard_path(f, 2), "s-00003-of-00003.safetensors"));
        CHECK(wm_file_shard_path(f, 3) == NULL);
        /* Metadata: the index's total_size, then shard 0's __metadata__. */
        uint64_t total;
        CHECK_STATUS(wm_file_get_u64(f, "total_size", &total), WM_OK);
        CHECK_EQ(total, wm_file_tensor_bytes(f));
        wm_string s;
        CHECK_STATUS(wm_file_get_string(f, "format", &s), WM_OK);
        CHECK(s.len == 2 && memcmp(s.ptr, "pt", 2) == 0);
        CHECK_STATUS(wm_file_get_string(f, "general.architecture", &s), WM_OK);
        wm_kv kv;
        CHECK_STATUS(wm_file_metadata(f, 0, &kv), WM_OK);
        CHECK(strcmp(kv.key, "total_size") == 0);
        same_as_single(f, one);
        wm_file_close(f);
    }
    CHECK_EQ(wmt_count_fds(), fds);
    /* A single file has one shard, itself. */
    wm_file *f = OPEN_OK(one);
    CHECK_EQ(wm_file_shard_count(f), 1);
    CHECK(strcmp(wm_file_shard_path(f, 0), one) == 0);
    wm_file_close(f);
    CHECK_EQ(wm_file_shard_count(NULL), 0);
}

/* Without the index, the name says how many shards there are. */
WM_TEST(safetensors_shards_without_index) {
    const char *one = wmt_make_model("one.safetensors", "--size 1M --seed 6");
    wmt_make_model("s.safetensors", "--size 1M --seed 6 --shards 2");
    CHECK(unlink(wmt_tmp("s.safetensors.index.json")) == 0);
    wm_file *f = OPEN_SET_OK(wmt_tmp("s-00002-of-00002.safetensors"));
    CHECK_EQ(wm_file_shard_count(f), 2);
    uint64_t total;
    CHECK_STATUS(wm_file_get_u64(f, "total_size", &total), WM_ENOENT);
    wm_file *o = OPEN_OK(one);
    CHECK_EQ(wm_file_metadata_count(f), wm_file_metadata_count(o));
    wm_file_close(o);
    same_as_single(f, one);
    wm_file_close(f);
}

WM_TEST(gguf_split_any_parts_set) {
    const char *one = wmt_make_model("one.gguf", "--size 1M --seed 9");
    wmt_make_model("g.gguf", "--size 1M --seed 9 --shards 3");
    int fds = wmt_count_fds();
    wm_file *o = OPEN_OK(one);
    size_t n_kv = wm_file_metadata_count(o);
    wm_file_close(o);
    for (unsigned k = 1; k <= 3; k++) {
        char name[64];
        snprintf(name, sizeof name, "g-%05u-of-00003.gguf", k);
        wm_file *f = OPEN_SET_OK(wmt_tmp(name));
        CHECK_EQ(wm_file_format(f), WM_FORMAT_GGUF);
        CHECK_EQ(wm_file_shard_count(f), 3);
        CHECK_EQ(wm_file_metadata_count(f), n_kv + 3); /* shard 0's keys: the model's and split.* */
        uint32_t v;
        CHECK_STATUS(wm_file_get_u32(f, "split.count", &v), WM_OK);
        CHECK_EQ(v, 3);
        CHECK_STATUS(wm_file_get_u32(f, "llama.block_count", &v), WM_OK);
        same_as_single(f, one);
        wm_file_close(f);
    }
    CHECK_EQ(wmt_count_fds(), fds);
}

/* A GGUF file with split.count 1 (or none) is a single file, whatever its name. */
WM_TEST(gguf_split_of_one) {
    gguf_part(wmt_tmp("p-00001-of-00001.gguf"), 0, 1, 1, "a");
    wm_file *f = OPEN_SET_OK(wmt_tmp("p-00001-of-00001.gguf"));
    CHECK_EQ(wm_file_shard_count(f), 1);
    wm_file_close(f);
    gguf_part(wmt_tmp("q-00002-of-00003.gguf"), 0, 0, 0, "a");
    f = OPEN_SET_OK(wmt_tmp("q-00002-of-00003.gguf"));
    CHECK_EQ(wm_file_shard_count(f), 1);
    wm_file_close(f);
}

WM_TEST(gguf_split_hand_built) {
    gguf_part(wmt_tmp("h-00001-of-00002.gguf"), 0, 2, 2, "a");
    gguf_part(wmt_tmp("h-00002-of-00002.gguf"), 1, 2, 2, "b");
    wm_file *f = OPEN_SET_OK(wmt_tmp("h-00002-of-00002.gguf"));
    CHECK_EQ(wm_file_tensor_count(f), 2);
    wm_tensor_info t;
    CHECK_STATUS(wm_file_tensor(f, 1, &t), WM_OK);
    CHECK(strcmp(t.name, "b") == 0);
    CHECK_EQ(t.shard, 1);
    CHECK_EQ(t.offset, wm_file_data_offset(f)); /* both parts have the same layout */
    wm_file_close(f);
}

/* ---- a shard alone ---- */

/* `alone` (shard k of `set`, opened by its own path) holds exactly the set's tensors of shard k,
 * in the same order, at the same offsets, with the same bytes; its size is its file's. */
static void same_as_shard_of_set(wm_file *alone, wm_file *set, uint32_t k) {
    const char *path = wm_file_shard_path(set, k);
    CHECK_EQ(wm_file_shard_count(alone), 1);
    CHECK(strcmp(wm_file_shard_path(alone, 0), path) == 0);
    CHECK(strcmp(wm_file_path(alone), path) == 0);
    size_t len;
    unsigned char *bytes = wmt_read_file(path, &len);
    CHECK_EQ(wm_file_size(alone), len);
    size_t j = 0;
    uint64_t sum = 0;
    for (size_t i = 0; i < wm_file_tensor_count(set); i++) {
        wm_tensor_info a, b;
        CHECK_STATUS(wm_file_tensor(set, i, &a), WM_OK);
        if (a.shard != k) continue;
        CHECK_STATUS(wm_file_tensor(alone, j, &b), WM_OK);
        CHECK_MSG(strcmp(a.name, b.name) == 0, "tensor %zu: %s, the set's %s", j, b.name, a.name);
        CHECK_EQ(b.shard, 0);
        CHECK_EQ(a.type, b.type);
        CHECK_EQ(a.n_dims, b.n_dims);
        for (int d = 0; d < WM_MAX_DIMS; d++)
            CHECK_EQ(a.shape[d], b.shape[d]);
        CHECK_EQ(a.offset, b.offset);
        CHECK_EQ(a.nbytes, b.nbytes);
        CHECK(b.offset + b.nbytes <= len);
        size_t idx;
        CHECK_STATUS(wm_file_find_tensor(alone, a.name, &idx), WM_OK);
        CHECK_EQ(idx, j);
        sum += b.nbytes;
        j++;
    }
    CHECK(j > 0);
    CHECK_EQ(wm_file_tensor_count(alone), j);
    CHECK_EQ(wm_file_tensor_bytes(alone), sum);
    /* A tensor of another shard is not there. */
    for (size_t i = 0; i < wm_file_tensor_count(set); i++) {
        wm_tensor_info a;
        size_t idx;
        CHECK_STATUS(wm_file_tensor(set, i, &a), WM_OK);
        if (a.shard != k) CHECK_STATUS(wm_file_find_tensor(alone, a.name, &idx), WM_ENOENT);
    }
    free(bytes);
}

/* A shard's path opens that shard: its tensors, its own __metadata__ (not the index's
 * total_size), its size; the set through the index has them all. */
WM_TEST(safetensors_shard_alone) {
    wmt_make_model("s.safetensors", "--size 1M --seed 5 --shards 3");
    int fds = wmt_count_fds();
    wm_file *set = OPEN_OK(wmt_tmp("s.safetensors.index.json"));
    CHECK_EQ(wm_file_shard_count(set), 3);
    for (uint32_t k = 0; k < 3; k++) {
        wm_file *f = OPEN_OK(wm_file_shard_path(set, k));
        same_as_shard_of_set(f, set, k);
        uint64_t u;
        CHECK_STATUS(wm_file_get_u64(f, "total_size", &u), WM_ENOENT);
        wm_string str;
        CHECK_STATUS(wm_file_get_string(f, "format", &str), WM_OK);
        CHECK(str.len == 2 && memcmp(str.ptr, "pt", 2) == 0);
        wm_file_close(f);
    }
    /* Without the index too: the name no longer matters. */
    CHECK(unlink(wmt_tmp("s.safetensors.index.json")) == 0);
    wm_file *f = OPEN_OK(wmt_tmp("s-00002-of-00003.safetensors"));
    same_as_shard_of_set(f, set, 1);
    wm_file_close(f);
    wm_file_close(set);
    CHECK_EQ(wmt_count_fds(), fds);
}

/* A GGUF split part's path opens that part (its split.* keys and its own tensors). */
WM_TEST(gguf_part_alone) {
    wmt_make_model("g.gguf", "--size 1M --seed 9 --shards 3");
    wm_file *set = OPEN_SET_OK(wmt_tmp("g-00001-of-00003.gguf"));
    for (uint32_t k = 0; k < 3; k++) {
        wm_file *f = OPEN_OK(wm_file_shard_path(set, k));
        same_as_shard_of_set(f, set, k);
        uint32_t v;
        CHECK_STATUS(wm_file_get_u32(f, "split.no", &v), WM_OK);
        CHECK_EQ(v, k);
        CHECK_STATUS(wm_file_get_u32(f, "split.count", &v), WM_OK);
        CHECK_EQ(v, 3);
        wm_file_close(f);
    }
    wm_file_close(set);
}

/* Loading each shard alone, as a consumer's loop does, holds and reads the set once, in every
 * CPU mode (the CUDA backend's case is in test_cuda.c). With a shard's path opening its whole
 * set, the four loads held four sets. */
WM_TEST(four_shards_hold_the_set_once) {
    wmt_make_model("s.safetensors", "--size 2M --seed 3 --shards 4");
    const char *shards[4];
    char buf[4][512];
    for (int k = 0; k < 4; k++) {
        char name[64];
        snprintf(name, sizeof name, "s-%05d-of-00004.safetensors", k + 1);
        snprintf(buf[k], sizeof buf[k], "%s", wmt_tmp(name));
        shards[k] = buf[k];
    }
    static const wm_mode modes[] = {WM_MODE_HEAP, WM_MODE_MMAP, WM_MODE_MMAP_PRIVATE};
    for (int i = 0; i < 3; i++) {
        wm_load_options o = WM_LOAD_OPTIONS_INIT;
        o.mode = modes[i];
        o.threads = 2; /* threads 0 reads the online CPUs from /sys: bytes that are not weights */
        wmt_shards_hold_the_set_once(wmt_tmp("s.safetensors.index.json"), shards, 4, o, 0);
    }
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = WM_MODE_MMAP;
    o.lock = WM_LOCK_BEST_EFFORT;
    wmt_shards_hold_the_set_once(wmt_tmp("s.safetensors.index.json"), shards, 4, o, 0);
}

/* ---- explicit lists ---- */

/* A list of the shards is the set: the same tensors and bytes as the index's, the shards in the
 * list's order, shard 0's metadata (no index is read). */
WM_TEST(list_of_shards_is_the_set) {
    const char *one = wmt_make_model("one.safetensors", "--size 1M --seed 5");
    wmt_make_model("s.safetensors", "--size 1M --seed 5 --shards 3");
    const char *in_order[3] = {wmt_tmp("s-00001-of-00003.safetensors"),
                               wmt_tmp("s-00002-of-00003.safetensors"),
                               wmt_tmp("s-00003-of-00003.safetensors")};
    set_list(3, in_order);
    int fds = wmt_count_fds();
    wm_file *f = NULL;
    wm_error err;
    CHECK_MSG(wm_file_open_paths(g_list, 3, &f, &err) == WM_OK, "%s", err.msg);
    CHECK(strcmp(wm_file_path(f), g_list[0]) == 0);
    CHECK_EQ(wm_file_shard_count(f), 3);
    for (uint32_t k = 0; k < 3; k++)
        CHECK(strcmp(wm_file_shard_path(f, k), g_list[k]) == 0);
    uint64_t u;
    CHECK_STATUS(wm_file_get_u64(f, "total_size", &u), WM_ENOENT);
    same_as_single(f, one);
    wm_file_close(f);
    /* Another order: the shards in that order, the same tensors. */
    const char *rev[3] = {g_list[2], g_list[0], g_list[1]};
    CHECK_MSG(wm_file_open_paths(rev, 3, &f, &err) == WM_OK, "%s", err.msg);
    CHECK(strcmp(wm_file_shard_path(f, 0), g_list[2]) == 0);
    wm_file *set = OPEN_OK(wmt_tmp("s.safetensors.index.json"));
    CHECK_EQ(wm_file_tensor_count(f), wm_file_tensor_count(set));
    CHECK_EQ(wm_file_size(f), wm_file_size(set));
    for (size_t i = 0; i < wm_file_tensor_count(set); i++) {
        wm_tensor_info a, b;
        size_t j;
        CHECK_STATUS(wm_file_tensor(set, i, &a), WM_OK);
        CHECK_STATUS(wm_file_find_tensor(f, a.name, &j), WM_OK);
        CHECK_STATUS(wm_file_tensor(f, j, &b), WM_OK);
        CHECK_EQ(b.offset, a.offset);
        CHECK_EQ(b.shard, (a.shard + 1) % 3);
    }
    wm_file_close(set);
    wm_file_close(f);
    /* A list of one is that file. */
    CHECK_MSG(wm_file_open_paths(g_list + 1, 1, &f, &err) == WM_OK, "%s", err.msg);
    CHECK_EQ(wm_file_shard_count(f), 1);
    CHECK(strcmp(wm_file_path(f), g_list[1]) == 0);
    wm_file_close(f);
    CHECK_EQ(wmt_count_fds(), fds);
}

/* A GGUF split set as a list: in order it is the set; out of order, short or with another
 * file it is refused, naming the part and what is wrong. */
WM_TEST(list_of_gguf_parts) {
    const char *one = wmt_make_model("one.gguf", "--size 1M --seed 9");
    wmt_make_model("g.gguf", "--size 1M --seed 9 --shards 3");
    const char *parts[3] = {wmt_tmp("g-00001-of-00003.gguf"), wmt_tmp("g-00002-of-00003.gguf"),
                            wmt_tmp("g-00003-of-00003.gguf")};
    set_list(3, parts);
    wm_file *f = NULL;
    wm_error err;
    CHECK_MSG(wm_file_open_paths(g_list, 3, &f, &err) == WM_OK, "%s", err.msg);
    CHECK_EQ(wm_file_shard_count(f), 3);
    same_as_single(f, one);
    wm_file_close(f);
    char p[3][512];
    for (int i = 0; i < 3; i++)
        snprintf(p[i], sizeof p[i], "%s", g_list[i]);
    const char *swapped[3] = {p[0], p[2], p[1]};
    set_list(3, swapped);
    refused_list(WM_EFORMAT, "g-00003-of-00003.gguf: split.no is 2",
                 "the list makes it part 2 (split.no 1)");
    const char *two[2] = {p[0], p[1]};
    set_list(2, two);
    refused_list(WM_EFORMAT, "g-00001-of-00003.gguf: split.count is 3 in this part, 2 in", NULL);
    /* Files without split keys make a set of their own. */
    gguf_part(wmt_tmp("x.gguf"), 0, 0, 0, "x");
    gguf_part(wmt_tmp("y.gguf"), 0, 0, 0, "y");
    const char *xy[2] = {wmt_tmp("x.gguf"), wmt_tmp("y.gguf")};
    CHECK_MSG(wm_file_open_paths(xy, 2, &f, &err) == WM_OK, "%s", err.msg);
    CHECK_EQ(wm_file_tensor_count(f), 2);
    wm_file_close(f);
    /* ...but not with a part of a split set. */
    const char *mixed[2] = {wmt_tmp("x.gguf"), p[1]};
    set_list(2, mixed);
    refused_list(WM_EFORMAT, "x.gguf: split.count is missing, not 2", NULL);
}

WM_TEST(list_refusals) {
    wmt_make_model("s.safetensors", "--size 1M --seed 5 --shards 2");
    char a[512], b[512];
    snprintf(a, sizeof a, "%s", wmt_tmp("s-00001-of-00002.safetensors"));
    snprintf(b, sizeof b, "%s", wmt_tmp("s-00002-of-00002.safetensors"));
    wm_file *f = (wm_file *)(uintptr_t)1;
    wm_error err;
    CHECK_STATUS(wm_file_open_paths(NULL, 2, &f, &err), WM_EINVAL);
    CHECK(f == NULL);
    const char *none[1] = {NULL};
    f = (wm_file *)(uintptr_t)1;
    CHECK_STATUS(wm_file_open_paths(none, 0, &f, &err), WM_EINVAL);
    CHECK(f == NULL);
    CHECK_MSG_HAS(err, "an empty list");
    const char *with_null[2] = {a, NULL};
    set_list(1, with_null);
    g_list[1] = NULL;
    g_n = 2;
    refused_list(WM_EINVAL, "paths[1] is NULL", NULL);
    /* The same file twice, by one path and by another. */
    const char *twice[2] = {a, a};
    set_list(2, twice);
    refused_list(WM_EINVAL, "listed twice, as paths[0] and paths[1]", NULL);
    CHECK(symlink(a, wmt_tmp("alias.safetensors")) == 0);
    const char *alias[3] = {a, b, wmt_tmp("alias.safetensors")};
    set_list(3, alias);
    refused_list(WM_EINVAL, "listed twice, as paths[0] and paths[2]", "alias.safetensors");
    /* An index is not a shard; a missing file is named; formats do not mix; a tensor in two. */
    const char *ix[2] = {a, wmt_tmp("s.safetensors.index.json")};
    set_list(2, ix);
    refused_list(WM_EINVAL, "s.safetensors.index.json: an index is not a shard", NULL);
    const char *missing[2] = {a, wmt_tmp("nope.safetensors")};
    set_list(2, missing);
    refused_list(WM_ENOENT, "nope.safetensors: cannot open", NULL);
    gguf_part(wmt_tmp("x.gguf"), 0, 0, 0, "x");
    const char *mixed[2] = {a, wmt_tmp("x.gguf")};
    set_list(2, mixed);
    refused_list(WM_EFORMAT, "x.gguf: a gguf file, in a list whose first", "is safetensors");
    st_part(wmt_tmp("t1.safetensors"), "t");
    st_part(wmt_tmp("t2.safetensors"), "t");
    const char *dup[2] = {wmt_tmp("t1.safetensors"), wmt_tmp("t2.safetensors")};
    set_list(2, dup);
    refused_list(WM_EFORMAT, "tensor 't' is in two shards", "t2.safetensors");
}

/* ---- broken safetensors sets ---- */

static void make_st_set(void) { wmt_make_model("s.safetensors", "--size 1M --seed 5 --shards 3"); }

WM_TEST(st_missing_shard) {
    make_st_set();
    CHECK(unlink(wmt_tmp("s-00002-of-00003.safetensors")) == 0);
    refused(wmt_tmp("s.safetensors.index.json"), WM_ENOENT, "s-00002-of-00003.safetensors",
            "missing");
    refused_set(wmt_tmp("s-00001-of-00003.safetensors"), WM_ENOENT, "s-00002-of-00003.safetensors",
                "missing");
    CHECK(unlink(wmt_tmp("s.safetensors.index.json")) == 0);
    refused_set(wmt_tmp("s-00003-of-00003.safetensors"), WM_ENOENT, "s-00002-of-00003.safetensors",
                "missing");
    /* The shards that are there open alone. */
    wm_file *f = OPEN_OK(wmt_tmp("s-00003-of-00003.safetensors"));
    CHECK_EQ(wm_file_shard_count(f), 1);
    wm_file_close(f);
}

WM_TEST(st_extra_tensor) {
    make_st_set();
    /* The index forgets a tensor that shard 1 holds. */
    edit_file(wmt_tmp("s.safetensors.index.json"),
              "    \"blk.0.attn_norm.weight\": \"s-00001-of-00003.safetensors\",\n", "");
    refused(wmt_tmp("s.safetensors.index.json"), WM_EFORMAT,
            "s-00001-of-00003.safetensors holds tensor "
            "'blk.0.attn_norm.weight', which the index does not list",
            NULL);
}

WM_TEST(st_tensor_in_wrong_shard) {
    make_st_set();
    edit_file(wmt_tmp("s.safetensors.index.json"),
              "\"blk.0.attn_norm.weight\": \"s-00001-of-00003.safetensors\"",
              "\"blk.0.attn_norm.weight\": \"s-00002-of-00003.safetensors\"");
    refused_set(wmt_tmp("s-00003-of-00003.safetensors"), WM_EFORMAT,
                "'blk.0.attn_norm.weight' is in shard",
                "but the index puts it in s-00002-of-00003.safetensors");
}

WM_TEST(st_listed_tensor_absent) {
    make_st_set();
    edit_file(wmt_tmp("s.safetensors.index.json"), "\"weight_map\": {",
              "\"weight_map\": {\"ghost\": \"s-00002-of-00003.safetensors\",");
    refused(wmt_tmp("s.safetensors.index.json"), WM_EFORMAT, "tensor 'ghost' is listed for shard",
            "s-00002-of-00003.safetensors, which does not hold it");
    /* A shard the index names that does not exist at all. */
    make_st_set();
    edit_file(wmt_tmp("s.safetensors.index.json"), "\"weight_map\": {",
              "\"weight_map\": {\"ghost\": \"s-00009-of-00003.safetensors\",");
    refused(wmt_tmp("s.safetensors.index.json"), WM_ENOENT, "s-00009-of-00003.safetensors",
            "missing");
}

/* A shard's set through the index beside it: that index must name the shard. */
WM_TEST(st_index_does_not_name_the_shard) {
    make_st_set();
    st_part(wmt_tmp("s-00004-of-00004.safetensors"), "stray");
    /* s-00004-of-00004 looks for s.safetensors.index.json, which lists shards of 3. */
    refused_set(wmt_tmp("s-00004-of-00004.safetensors"), WM_EFORMAT,
                "s-00004-of-00004.safetensors: the index beside it",
                "does not name this shard in its weight_map");
    /* Alone it opens. */
    wm_file *f = OPEN_OK(wmt_tmp("s-00004-of-00004.safetensors"));
    CHECK_EQ(wm_file_tensor_count(f), 1);
    wm_file_close(f);
}

WM_TEST(st_tensor_listed_twice) {
    make_st_set();
    edit_file(wmt_tmp("s.safetensors.index.json"), "\"weight_map\": {",
              "\"weight_map\": {\"token_embd.weight\": \"s-00001-of-00003.safetensors\",");
    refused(wmt_tmp("s.safetensors.index.json"), WM_EFORMAT,
            "lists tensor 'token_embd.weight' twice", NULL);
}

WM_TEST(st_unsafe_shard_names) {
    make_st_set();
    wmt_copy_file(wmt_tmp("s.safetensors.index.json"), wmt_tmp("u.safetensors.index.json"));
    edit_file(wmt_tmp("u.safetensors.index.json"), "\"weight_map\": {",
              "\"weight_map\": {\"x\": \"../s-00001-of-00003.safetensors\",");
    refused(wmt_tmp("u.safetensors.index.json"), WM_EFORMAT, "'../s-00001-of-00003.safetensors'",
            "not a file name below");
    wmt_copy_file(wmt_tmp("s.safetensors.index.json"), wmt_tmp("v.safetensors.index.json"));
    edit_file(wmt_tmp("v.safetensors.index.json"), "\"weight_map\": {",
              "\"weight_map\": {\"x\": \"/etc/passwd\",");
    refused(wmt_tmp("v.safetensors.index.json"), WM_EFORMAT, "not a file name below", NULL);
    wmt_copy_file(wmt_tmp("s.safetensors.index.json"), wmt_tmp("w.safetensors.index.json"));
    edit_file(wmt_tmp("w.safetensors.index.json"), "\"weight_map\": {",
              "\"weight_map\": {\"x\": \"\",");
    refused(wmt_tmp("w.safetensors.index.json"), WM_EFORMAT, "empty string, not a file name", NULL);
}

WM_TEST(st_bad_index) {
    static const struct {
        const char *json, *n1, *n2;
    } cases[] = {
        {"{\"weight_map\": {", "not valid JSON", "b.safetensors.index.json"},
        {"{\"metadata\": {}}", "no weight_map object", NULL},
        {"{\"weight_map\": []}", "no weight_map object", NULL},
        {"{\"weight_map\": {}}", "names no tensors", NULL},
        {"{\"weight_map\": {\"a\": 3}}", "maps to a JSON number", NULL},
        {"{\"weight_map\": {\"a\": \"x\"}, \"weight_map\": {}}", "'weight_map' appears twice",
         NULL},
        {"[1]", "not an object", NULL},
    };
    const char *ip = wmt_tmp("b.safetensors.index.json");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wmt_write_file(ip, cases[i].json, strlen(cases[i].json));
        refused(ip, WM_EFORMAT, cases[i].n1, cases[i].n2);
    }
    refused(wmt_tmp("nope.safetensors.index.json"), WM_ENOENT, "nope.safetensors.index.json", NULL);
}

/* Index metadata of every kind is kept: integers exact, others as floats, booleans, JSON text. */
WM_TEST(st_index_metadata_kinds) {
    st_part(wmt_tmp("k-00001-of-00001.safetensors"), "a");
    const char *ip = wmt_tmp("k.safetensors.index.json");
    const char *txt =
        "{\"metadata\": {\"total_size\": 18446744073709551615, \"neg\": -3, \"f\": 0.5,"
        " \"b\": true, \"o\": {\"x\": [1, 2]}, \"s\": \"str\", \"min\": -9223372036854775808,"
        " \"nested\": [null, false, \"q\\\"\\n\\u0001\\u00e9\", {}, [], -1.5e3]},"
        " \"weight_map\": {\"a\": \"k-00001-of-00001.safetensors\"}}";
    wmt_write_file(ip, txt, strlen(txt));
    wm_file *f = OPEN_OK(ip);
    uint64_t u;
    int64_t i;
    double d;
    int b;
    wm_string s;
    CHECK_STATUS(wm_file_get_u64(f, "total_size", &u), WM_OK);
    CHECK_EQ(u, UINT64_MAX);
    CHECK_STATUS(wm_file_get_i64(f, "neg", &i), WM_OK);
    CHECK(i == -3);
    CHECK_STATUS(wm_file_get_f64(f, "f", &d), WM_OK);
    CHECK(d == 0.5);
    CHECK_STATUS(wm_file_get_bool(f, "b", &b), WM_OK);
    CHECK(b == 1);
    CHECK_STATUS(wm_file_get_string(f, "o", &s), WM_OK);
    CHECK(s.len == 11 && memcmp(s.ptr, "{\"x\":[1,2]}", 11) == 0);
    CHECK_STATUS(wm_file_get_i64(f, "min", &i), WM_OK); /* exact, not through a double */
    CHECK(i == INT64_MIN);
    /* Compact text: escapes as JSON needs them, UTF-8 as is, numbers as written. */
    const char *want = "[null,false,\"q\\\"\\n\\u0001\xc3\xa9\",{},[],-1.5e3]";
    CHECK_STATUS(wm_file_get_string(f, "nested", &s), WM_OK);
    CHECK_MSG(s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0, "nested: %.*s", (int)s.len,
              s.ptr);
    CHECK_STATUS(wm_file_get_string(f, "s", &s), WM_OK);
    CHECK_EQ(wm_file_shard_count(f), 1);
    wm_file_close(f);
}

WM_TEST(st_shard_of_wrong_format) {
    gguf_part(wmt_tmp("m-00001-of-00001.gguf"), 0, 0, 0, "a");
    const char *ip = wmt_tmp("m.safetensors.index.json");
    const char *txt = "{\"weight_map\": {\"a\": \"m-00001-of-00001.gguf\"}}";
    wmt_write_file(ip, txt, strlen(txt));
    refused(ip, WM_EFORMAT, "m-00001-of-00001.gguf is a gguf file, not safetensors", NULL);
}

WM_TEST(st_duplicate_across_shards) {
    st_part(wmt_tmp("d-00001-of-00002.safetensors"), "t");
    st_part(wmt_tmp("d-00002-of-00002.safetensors"), "t");
    refused_set(wmt_tmp("d-00001-of-00002.safetensors"), WM_EFORMAT, "tensor 't' is in two shards",
                "d-00002-of-00002.safetensors");
}

WM_TEST(st_corrupt_shard) {
    make_st_set();
    CHECK(truncate(wmt_tmp("s-00002-of-00003.safetensors"), 100) == 0);
    refused(wmt_tmp("s.safetensors.index.json"), WM_EFORMAT, "s-00002-of-00003.safetensors",
            "offset");
}

/* ---- broken GGUF split sets ---- */

static void make_gguf_set(void) { wmt_make_model("g.gguf", "--size 1M --seed 9 --shards 3"); }

WM_TEST(gguf_missing_part) {
    make_gguf_set();
    CHECK(unlink(wmt_tmp("g-00003-of-00003.gguf")) == 0);
    refused_set(wmt_tmp("g-00001-of-00003.gguf"), WM_ENOENT, "g-00003-of-00003.gguf", "missing");
}

WM_TEST(gguf_split_count_mismatch) {
    make_gguf_set();
    uint16_t four = 4;
    patch_after(wmt_tmp("g-00002-of-00003.gguf"), "split.count", 4, &four, 2);
    refused_set(wmt_tmp("g-00001-of-00003.gguf"), WM_EFORMAT,
                "g-00002-of-00003.gguf: split.count is 4 in this part", NULL);
    refused_set(wmt_tmp("g-00002-of-00003.gguf"), WM_EFORMAT,
                "split.count is 4, but the name says 3 parts", NULL);
}

WM_TEST(gguf_split_no_mismatch) {
    make_gguf_set();
    CHECK(rename(wmt_tmp("g-00002-of-00003.gguf"), wmt_tmp("x")) == 0);
    CHECK(rename(wmt_tmp("g-00003-of-00003.gguf"), wmt_tmp("g-00002-of-00003.gguf")) == 0);
    CHECK(rename(wmt_tmp("x"), wmt_tmp("g-00003-of-00003.gguf")) == 0);
    refused_set(wmt_tmp("g-00001-of-00003.gguf"), WM_EFORMAT,
                "g-00002-of-00003.gguf: split.no is 2", "part 2 (split.no 1)");
    /* A part without split.no. */
    gguf_part(wmt_tmp("n-00001-of-00002.gguf"), 0, 2, 2, "a");
    gguf_part(wmt_tmp("n-00002-of-00002.gguf"), 1, 2, 2, "b");
    patch_after(wmt_tmp("n-00002-of-00002.gguf"), "split.n", 0, "X", 1);
    refused_set(wmt_tmp("n-00001-of-00002.gguf"), WM_EFORMAT, "split.no is missing", NULL);
}

WM_TEST(gguf_split_tensor_count_mismatch) {
    make_gguf_set();
    int32_t n = 101;
    patch_after(wmt_tmp("g-00001-of-00003.gguf"), "split.tensors.count", 4, &n, 4);
    refused_set(wmt_tmp("g-00003-of-00003.gguf"), WM_EFORMAT,
                "split.tensors.count is 101, but the 3 parts hold 102", "g-00001-of-00003.gguf");
}

WM_TEST(gguf_split_bad_names) {
    make_gguf_set();
    wmt_copy_file(wmt_tmp("g-00001-of-00003.gguf"), wmt_tmp("plain.gguf"));
    refused_set(wmt_tmp("plain.gguf"), WM_EFORMAT, "does not end in -0000K-of-0000N.gguf", NULL);
    wmt_copy_file(wmt_tmp("g-00001-of-00003.gguf"), wmt_tmp("g-00001-of-00004.gguf"));
    refused_set(wmt_tmp("g-00001-of-00004.gguf"), WM_EFORMAT, "the name says 4 parts", NULL);
    /* split.count negative (an i16 of -1) */
    gguf_part(wmt_tmp("t-00001-of-00002.gguf"), 0, 2, 2, "a");
    unsigned char i16[6] = {WM_VALUE_I16, 0, 0, 0, 0xff, 0xff};
    patch_after(wmt_tmp("t-00001-of-00002.gguf"), "split.count", 0, i16, 6);
    refused_set(wmt_tmp("t-00001-of-00002.gguf"), WM_EFORMAT,
                "split.count is not a non-negative integer", NULL);
}

WM_TEST(gguf_duplicate_across_parts) {
    gguf_part(wmt_tmp("d-00001-of-00002.gguf"), 0, 2, 2, "same");
    gguf_part(wmt_tmp("d-00002-of-00002.gguf"), 1, 2, 2, "same");
    refused_set(wmt_tmp("d-00002-of-00002.gguf"), WM_EFORMAT, "tensor 'same' is in two shards",
                "d-00001-of-00002.gguf");
}

WM_TEST(gguf_part_of_wrong_format) {
    gguf_part(wmt_tmp("w-00001-of-00002.gguf"), 0, 2, 2, "a");
    st_part(wmt_tmp("w-00002-of-00002.gguf"), "b");
    refused_set(wmt_tmp("w-00001-of-00002.gguf"), WM_EFORMAT,
                "w-00002-of-00002.gguf is a safetensors file, not gguf", NULL);
}

/* ---- truncation sweeps ---- */

/* Prefixes of the index: every length through 256 bytes, then every third (the full file and
 * the one without its final newline open). */
WM_TEST(truncate_index) {
    wmt_make_model("s.safetensors", "--size 1M --seed 5 --shards 2");
    const char *ip = wmt_tmp("s.safetensors.index.json");
    size_t len;
    char *txt = wmt_read_file(ip, &len);
    int fds = wmt_count_fds();
    for (size_t l = len + 1; l-- > 0;) {
        if (l > 256 && l < len - 1 && l % 3) continue;
        wmt_write_file(ip, txt, l);
        wm_file *f = (wm_file *)(uintptr_t)1;
        wm_error err = {0};
        wm_status st = wm_file_open(ip, &f, &err);
        if (l >= len - 1) {
            CHECK_STATUS(st, WM_OK);
            wm_file_close(f);
        } else {
            CHECK_MSG(st == WM_EFORMAT, "%zu of %zu: %s (%s)", l, len, wm_status_name(st), err.msg);
            CHECK(f == NULL && strstr(err.msg, "offset") && strstr(err.msg, "index.json"));
        }
        CHECK_LEDGER_EMPTY();
        CHECK_EQ(wmt_count_fds(), fds);
    }
    free(txt);
}

/* A shard cut short, at every length through its header and sampled lengths of its data, opened
 * with `open` at `open_path` (the shard itself, a set it is in, or a list). */
static void truncate_shard(wmt_opener open, const char *open_path, const char *shard) {
    size_t len;
    void *bytes = wmt_read_file(shard, &len);
    int fds = wmt_count_fds();
    wm_file *f = NULL;
    wm_error err0 = {0};
    CHECK_MSG(open(open_path, &f, &err0) == WM_OK, "%s: %s", open_path, err0.msg);
    wm_file_close(f);
    uint64_t lens[600];
    size_t n = 0;
    for (uint64_t l = 0; l < 256 && l < len; l++)
        lens[n++] = l;
    for (uint64_t l = 256; l < 4096 && l < len; l += 61)
        lens[n++] = l; /* GGUF headers run longer */
    for (unsigned k = 1; k < 40; k++)
        lens[n++] = 4096 + (len - 4097) * k / 40;
    lens[n++] = len - 1;
    for (size_t i = 0; i < n; i++) {
        CHECK(truncate(shard, (off_t)lens[i]) == 0);
        f = (wm_file *)(uintptr_t)1;
        wm_error err = {0};
        wm_status st = open(open_path, &f, &err);
        CHECK_MSG(st == WM_EFORMAT, "%llu of %zu: %s (%s)", (unsigned long long)lens[i], len,
                  wm_status_name(st), err.msg);
        CHECK(f == NULL && strstr(err.msg, "offset"));
        CHECK_MSG(strstr(err.msg, shard) || lens[i] < 8, "\"%s\" lacks %s", err.msg, shard);
        CHECK_LEDGER_EMPTY();
        CHECK_EQ(wmt_count_fds(), fds);
        CHECK_EQ(tmp_maps(), 0);
    }
    wmt_write_file(shard, bytes, len);
    CHECK_MSG(open(open_path, &f, &err0) == WM_OK, "%s: %s", open_path, err0.msg);
    wm_file_close(f);
    free(bytes);
}

WM_TEST(truncate_st_shard) {
    wmt_make_model("s.safetensors", "--size 1M --seed 5 --shards 3");
    /* Through the index, through another shard's set, the shard alone, and a list. */
    truncate_shard(wm_file_open, wmt_tmp("s.safetensors.index.json"),
                   wmt_tmp("s-00002-of-00003.safetensors"));
    truncate_shard(wm_file_open_set, wmt_tmp("s-00001-of-00003.safetensors"),
                   wmt_tmp("s-00002-of-00003.safetensors"));
    truncate_shard(wm_file_open, wmt_tmp("s-00002-of-00003.safetensors"),
                   wmt_tmp("s-00002-of-00003.safetensors"));
    const char *list[3] = {wmt_tmp("s-00001-of-00003.safetensors"),
                           wmt_tmp("s-00002-of-00003.safetensors"),
                           wmt_tmp("s-00003-of-00003.safetensors")};
    set_list(3, list);
    truncate_shard(open_list, g_list[0], g_list[2]);
    CHECK(unlink(wmt_tmp("s.safetensors.index.json")) == 0);
    truncate_shard(wm_file_open_set, wmt_tmp("s-00001-of-00003.safetensors"),
                   wmt_tmp("s-00003-of-00003.safetensors"));
}

WM_TEST(truncate_gguf_part) {
    wmt_make_model("g.gguf", "--size 1M --seed 9 --shards 3");
    truncate_shard(wm_file_open_set, wmt_tmp("g-00001-of-00003.gguf"),
                   wmt_tmp("g-00003-of-00003.gguf"));
    truncate_shard(wm_file_open, wmt_tmp("g-00003-of-00003.gguf"),
                   wmt_tmp("g-00003-of-00003.gguf"));
}

/* ---- fault sweeps ---- */

/* Every fault but advice fails the open (the message need not name `path`); the clean open makes at
 * least `calls` fallible calls. */
static void fault_sweep(wmt_opener open, const char *path, uint64_t calls) {
    CHECK(wmt_open_fault_sweep_by(open, path, NULL) >= calls);
}

WM_TEST(faults_st_index) {
    wmt_make_model("s.safetensors", "--size 1M --seed 5 --shards 2");
    /* stat of the index, index, shards */
    fault_sweep(wm_file_open_set, wmt_tmp("s-00002-of-00002.safetensors"), 12);
    fault_sweep(wm_file_open, wmt_tmp("s.safetensors.index.json"), 12);
}

WM_TEST(faults_st_no_index) {
    wmt_make_model("s.safetensors", "--size 1M --seed 5 --shards 2");
    CHECK(unlink(wmt_tmp("s.safetensors.index.json")) == 0);
    fault_sweep(wm_file_open_set, wmt_tmp("s-00001-of-00002.safetensors"), 12);
}

WM_TEST(faults_gguf_split) {
    gguf_part(wmt_tmp("h-00001-of-00003.gguf"), 0, 3, 3, "a");
    gguf_part(wmt_tmp("h-00002-of-00003.gguf"), 1, 3, 3, "b");
    gguf_part(wmt_tmp("h-00003-of-00003.gguf"), 2, 3, 3, "c");
    fault_sweep(wm_file_open_set, wmt_tmp("h-00002-of-00003.gguf"), 12);
}

/* One shard alone: its own open's calls only (open, stat, reads, the parse's allocations). */
WM_TEST(faults_shard_alone) {
    wmt_make_model("s.safetensors", "--size 1M --seed 5 --shards 2");
    fault_sweep(wm_file_open, wmt_tmp("s-00002-of-00002.safetensors"), 6);
    gguf_part(wmt_tmp("h-00001-of-00002.gguf"), 0, 2, 2, "a");
    gguf_part(wmt_tmp("h-00002-of-00002.gguf"), 1, 2, 2, "b");
    fault_sweep(wm_file_open, wmt_tmp("h-00002-of-00002.gguf"), 6);
}

WM_TEST(faults_lists) {
    wmt_make_model("s.safetensors", "--size 1M --seed 5 --shards 3");
    const char *st[3] = {wmt_tmp("s-00001-of-00003.safetensors"),
                         wmt_tmp("s-00002-of-00003.safetensors"),
                         wmt_tmp("s-00003-of-00003.safetensors")};
    set_list(3, st);
    fault_sweep(open_list, g_list[0], 18);
    gguf_part(wmt_tmp("h-00001-of-00002.gguf"), 0, 2, 2, "a");
    gguf_part(wmt_tmp("h-00002-of-00002.gguf"), 1, 2, 2, "b");
    const char *gg[2] = {wmt_tmp("h-00001-of-00002.gguf"), wmt_tmp("h-00002-of-00002.gguf")};
    set_list(2, gg);
    fault_sweep(open_list, g_list[0], 12);
}

/* ---- the CLI ---- */

WM_TEST(cli_info_on_sets) {
    wmt_make_model("s.safetensors", "--size 1M --seed 5 --shards 3");
    char *out;
    char args[1024];
    /* A shard is that file; --set, its set; an index, its set. */
    snprintf(args, sizeof args, "'%s' info --json %s", WM_CLI,
             wmt_tmp("s-00002-of-00003.safetensors"));
    CHECK_EQ(wmt_run(args, &out), 0);
    CHECK(strstr(out, "\"format\": \"safetensors\""));
    CHECK(strstr(out, "\"shards\": [\""));
    CHECK(strstr(out, "s-00002-of-00003.safetensors\"]"));
    CHECK(!strstr(out, "s-00003-of-00003.safetensors"));
    CHECK(!strstr(out, "\"total_size\": "));
    free(out);
    snprintf(args, sizeof args, "'%s' info --json --set %s", WM_CLI,
             wmt_tmp("s-00002-of-00003.safetensors"));
    CHECK_EQ(wmt_run(args, &out), 0);
    CHECK(strstr(out, "s-00003-of-00003.safetensors\"]"));
    CHECK(strstr(out, "\"shard\": 2}"));
    CHECK(strstr(out, "\"total_size\": "));
    free(out);
    snprintf(args, sizeof args, "'%s' info %s", WM_CLI, wmt_tmp("s.safetensors.index.json"));
    CHECK_EQ(wmt_run(args, &out), 0);
    CHECK(strstr(out, "shards:      1/3 "));
    CHECK(strstr(out, "format:      safetensors v1"));
    free(out);
    /* A broken set: exit 1, one line naming the missing shard; the other shards open alone. */
    CHECK(unlink(wmt_tmp("s-00003-of-00003.safetensors")) == 0);
    snprintf(args, sizeof args, "'%s' info %s", WM_CLI, wmt_tmp("s.safetensors.index.json"));
    CHECK_EQ(wmt_run(args, &out), 1);
    free(out);
    char *text = wmt_stderr_text();
    CHECK(strstr(text, "s-00003-of-00003.safetensors") && strstr(text, "missing"));
    free(text);
    snprintf(args, sizeof args, "'%s' info --set %s", WM_CLI,
             wmt_tmp("s-00001-of-00003.safetensors"));
    CHECK_EQ(wmt_run(args, &out), 1);
    free(out);
    snprintf(args, sizeof args, "'%s' info %s", WM_CLI, wmt_tmp("s-00001-of-00003.safetensors"));
    CHECK_EQ(wmt_run(args, &out), 0);
    free(out);
}

/* cat and check open FILE as info does: a tensor of shard 3 is not in shard 1 alone, but is in
 * shard 1's set; check --set on a shard checks the whole set. */
WM_TEST(cli_cat_and_check_with_set) {
    wmt_make_model("s.safetensors", "--size 1M --seed 5 --shards 3");
    wm_file *third = OPEN_OK(wmt_tmp("s-00003-of-00003.safetensors"));
    wm_tensor_info t;
    CHECK_STATUS(wm_file_tensor(third, 0, &t), WM_OK);
    char name[128];
    snprintf(name, sizeof name, "%s", t.name);
    uint64_t nbytes = t.nbytes;
    wm_file_close(third);
    char args[1024], *out;
    snprintf(args, sizeof args, "'%s' cat %s %s", WM_CLI, wmt_tmp("s-00001-of-00003.safetensors"),
             name);
    CHECK_EQ(wmt_run(args, &out), 1);
    free(out);
    char *text = wmt_stderr_text();
    CHECK_MSG(strstr(text, "no tensor"), "%s", text);
    free(text);
    snprintf(args, sizeof args, "'%s' cat --set %s %s > %s", WM_CLI,
             wmt_tmp("s-00001-of-00003.safetensors"), name, wmt_tmp("t.bin"));
    CHECK_EQ(wmt_run(args, &out), 0);
    free(out);
    size_t len;
    free(wmt_read_file(wmt_tmp("t.bin"), &len));
    CHECK_EQ(len, nbytes);
    /* check's verdict (exit 0) compares footprints, which ASan's allocator keeps: under ASan
     * exit 1 passes, as in test_cli.c. The ledger must read 0 either way. */
    snprintf(args, sizeof args, "'%s' check --json --cycles 1 --set %s", WM_CLI,
             wmt_tmp("s-00002-of-00003.safetensors"));
    int rc = wmt_run(args, &out);
    CHECK_MSG(rc == 0 || (WMT_ASAN && rc == 1), "exit %d", rc);
    CHECK(strstr(out, "\"ledger_bytes\": 0, \"ledger_regions\": 0, \"file_regions\": 0}"));
    wm_file *set = OPEN_OK(wmt_tmp("s.safetensors.index.json"));
    char size[64];
    snprintf(size, sizeof size, "\"size\": %llu,", (unsigned long long)wm_file_size(set));
    CHECK_MSG(strstr(out, size), "%s lacks %s", out, size);
    wm_file_close(set);
    free(out);
    /* load --set: the set's tensors, each shard mapped (mmap: three regions while loaded). */
    snprintf(args, sizeof args, "'%s' load --json --mode mmap --set %s", WM_CLI,
             wmt_tmp("s-00003-of-00003.safetensors"));
    rc = wmt_run(args, &out);
    CHECK_MSG(rc == 0 || (WMT_ASAN && rc == 1), "exit %d", rc);
    set = OPEN_OK(wmt_tmp("s.safetensors.index.json"));
    snprintf(size, sizeof size, "\"tensor_bytes\": %llu,",
             (unsigned long long)wm_file_tensor_bytes(set));
    CHECK_MSG(strstr(out, size) && strstr(out, "\"file_regions\": 3}"), "%s lacks %s", out, size);
    wm_file_close(set);
    free(out);
    snprintf(args, sizeof args, "'%s' check --json --cycles 1 %s", WM_CLI,
             wmt_tmp("s-00002-of-00003.safetensors"));
    rc = wmt_run(args, &out);
    CHECK_MSG(rc == 0 || (WMT_ASAN && rc == 1), "exit %d", rc);
    snprintf(size, sizeof size, "\"size\": %llu,",
             (unsigned long long)wmt_copy_file(wmt_tmp("s-00002-of-00003.safetensors"),
                                               wmt_tmp("copy")));
    CHECK_MSG(strstr(out, size), "%s lacks %s", out, size);
    free(out);
}

/* ---- llama.cpp loads the split sets make-model writes ---- */

/* llama.cpp refuses a file by throwing a C++ exception, which AddressSanitizer's __cxa_throw
 * interceptor cannot pass on in this C program (no libstdc++ at start-up): under ASan only the
 * loads that succeed are tried. */
#if defined(__SANITIZE_ADDRESS__)
#define PEER_NO_THROW 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PEER_NO_THROW 1
#endif
#endif

/* struct llama_model_params of llama.cpp v0.4.0 (node-llama-cpp 3.21.1), as bench/peer.h mirrors
 * it (80 bytes; started from llama_model_default_params()). */
struct peer_model_params {
    void *devices;
    const void *tensor_buft_overrides;
    int32_t n_gpu_layers, split_mode, load_mode, lazy_mode, main_gpu;
    const float *tensor_split;
    void *progress_callback, *progress_callback_user_data;
    const void *kv_overrides;
    bool vocab_only, check_tensors, use_extra_bufts, no_host, no_alloc, load_mtp;
};

/* In a child process (llama.cpp's allocations stay out of this process and its leak check), with
 * the libraries of dir (a folder holding ggml's baseline CPU variant only: wmt_peer_variant_dir):
 * loads the one-file model and the set (by its first part), exits 0 when both load with the same
 * parameter count and size, 3 when the set is refused, 4 on a mismatch. */
static int peer_load_pair(const char *dir, const char *single, const char *first_part) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid > 0) {
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
        return WEXITSTATUS(st);
    }
    char lib[1200];
    snprintf(lib, sizeof lib, "%s/libggml.v0.4.0.so", dir);
    void *g = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
    snprintf(lib, sizeof lib, "%s/libllama.v0.4.0.so", dir);
    void *l = g ? dlopen(lib, RTLD_NOW | RTLD_GLOBAL) : NULL;
    if (!l) _exit(2);
    void (*load_all)(const char *);
    void (*backend_init)(void);
    struct peer_model_params (*defaults)(void);
    void *(*load)(const char *, struct peer_model_params);
    void (*model_free)(void *);
    uint64_t (*n_params)(const void *), (*size)(const void *);
    *(void **)&load_all = dlsym(g, "ggml_backend_load_all_from_path");
    *(void **)&backend_init = dlsym(l, "llama_backend_init");
    *(void **)&defaults = dlsym(l, "llama_model_default_params");
    *(void **)&load = dlsym(l, "llama_model_load_from_file");
    *(void **)&model_free = dlsym(l, "llama_model_free");
    *(void **)&n_params = dlsym(l, "llama_model_n_params");
    *(void **)&size = dlsym(l, "llama_model_size");
    if (!load_all || !backend_init || !defaults || !load || !model_free || !n_params || !size)
        _exit(2);
    load_all(dir);
    backend_init();
    struct peer_model_params p = defaults();
    p.n_gpu_layers = 0;
    p.load_mode = 1; /* mmap */
    void *a = load(single, p), *b = load(first_part, p);
    if (!a) _exit(2);
    if (!b) _exit(3);
    _exit(n_params(a) == n_params(b) && size(a) == size(b) ? 0 : 4);
}

WM_TEST(gguf_split_loads_in_llama_cpp) {
    wmt_peer_lib("libllama.v0.4.0.so"); /* skips the case when the peer is not installed */
    const char *one = wmt_make_model("one.gguf", "--size 1M --seed 9");
    wmt_make_model("g.gguf", "--size 1M --seed 9 --shards 3");
    int rc = peer_load_pair(wmt_peer_variant_dir("x64"), one, wmt_tmp("g-00001-of-00003.gguf"));
    CHECK_MSG(rc == 0,
              "llama.cpp: %d (2: the one-file model failed, 3: the set was refused, 4: "
              "they differ)",
              rc);
#ifndef PEER_NO_THROW
    /* The peer refuses the set without its last part, as we do. */
    CHECK(unlink(wmt_tmp("g-00003-of-00003.gguf")) == 0);
    CHECK_EQ(peer_load_pair(wmt_peer_variant_dir("x64"), one, wmt_tmp("g-00001-of-00003.gguf")), 3);
#endif
}
