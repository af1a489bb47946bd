/*
 * test_multi.c: one model over several devices, and tensor-parallel slices.
 *
 * Placement (CUDA, several devices): every tensor lands on the device its rule gives, whole and
 * byte-exact; each device's ledger figure is exactly the buffers placed on it and they add up to
 * the device category; release gives every device's memory back; a fault at each CUDA or OS
 * call leaves nothing on any device. Without a GPU these run against tests/cuda_mock.c with two
 * devices (WM_CUDA_MOCK_DEVICES=2), which refuses a copy to another device than its stream's,
 * an event recorded across devices and a copy from a non-portable registration of another
 * device; the cases require its violation count to stay 0.
 *
 * A model over two devices put to sleep (one pinned host copy, portable) and woken: each
 * device's ledger figure falls to 0 and comes back, and every tensor is the file's again.
 *
 * Tensor parallelism (CPU heap, and the CUDA staged path): rank r of W holds exactly its slice
 * of each split tensor (compared with the file's bytes, slice by slice), and the load reads
 * exactly the slices plus the replicated tensors: the library's own count (stats.bytes_read)
 * and the kernel's (rchar in /proc/self/io) both equal that figure, so split tensors cost 1/W of
 * their bytes per rank.
 *
 * Read once (NCCL): W ranks in W processes together read the model 1.0x, each checks every
 * tensor on its device; against tests/nccl_mock.c in CI and against NCCL on GPU hosts.
 *
 * Files open with wm_file_open_set: the cases on sets name a part ("s-00002-of-00003.gguf").
 */
#include "cuda_mock.h" /* wm__cuda_mock_violations, in -DWM_CUDA_MOCK=ON builds */
#include "wmtest.h"

#include "backend/backend.h" /* wm__model_sleep, wm__model_wake */
#include "os/fault.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#ifdef WM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- helpers ---- */

static unsigned char *file_bytes(const char *path) {
    size_t len;
    return wmt_read_file(path, &len);
}

/* Each shard's bytes, read by the test (a single file is a set of one). */
typedef struct shard_bytes {
    unsigned char *b[8];
    uint32_t n;
} shard_bytes;

static void shards_read(const wm_file *f, shard_bytes *s) {
    s->n = wm_file_shard_count(f);
    CHECK(s->n >= 1 && s->n <= 8);
    for (uint32_t k = 0; k < s->n; k++)
        s->b[k] = file_bytes(wm_file_shard_path(f, k));
}

/* After the release: no mapping of any shard is left; frees the bytes. */
static void shards_done(const wm_file *f, shard_bytes *s) {
    for (uint32_t k = 0; k < s->n; k++) {
        CHECK_EQ(wmt_count_file_maps(wm_file_shard_path(f, k)), 0);
        free(s->b[k]);
    }
}

/* The bytes of rank r's slice of tensor t, from the file's bytes, into out (t's slice size). */
static uint64_t expected_slice(const unsigned char *file, const wm_tensor_info *t, wm_split sp,
                               unsigned r, unsigned w, unsigned char *out) {
    const unsigned char *src = file + t->offset;
    if (sp == WM_SPLIT_NONE) {
        memcpy(out, src, t->nbytes);
        return t->nbytes;
    }
    if (sp == WM_SPLIT_DIM0) {
        uint64_t part = t->nbytes / w;
        memcpy(out, src + r * part, part);
        return part;
    }
    uint64_t row = t->nbytes / t->shape[1], part = row / w;
    for (uint64_t j = 0; j < t->shape[1]; j++)
        memcpy(out + j * part, src + j * row + r * part, part);
    return t->shape[1] * part;
}

/* Where a tensor's loaded bytes are read back from: host memory, or (CUDA) the device. */
static void read_back(wm_model *m, size_t i, unsigned char *out, uint64_t n) {
    const void *h = wm_model_tensor_data(m, i);
    if (h) {
        memcpy(out, h, n);
        return;
    }
#ifdef WM_HAVE_CUDA
    uint64_t d = wm_model_tensor_device_ptr(m, i);
    CHECK(d != 0);
    CHECK_EQ(cudaSetDevice(wm_model_tensor_device(m, i)), cudaSuccess);
    CHECK_EQ(cudaMemcpy(out, (void *)(uintptr_t)d, n, cudaMemcpyDeviceToHost), cudaSuccess);
#else
    CHECK_MSG(0, "tensor %zu has no host data", i);
#endif
}

/* Loads rank r of w with wm_split_llama and checks every tensor's slice, its shape and the bytes
 * the load read (the library's count and the kernel's). */
static void tp_rank(const char *path, wm_load_options o, unsigned r, unsigned w) {
    wm_file *f;
    wm_error err;
    CHECK_STATUS(wm_file_open_set(path, &f, &err), WM_OK);
    shard_bytes file;
    shards_read(f, &file);
    o.tp_rank = r;
    o.tp_world = w;
    o.tp_split = wm_split_llama;
    uint64_t want_read = 0, split_whole = 0, split_read = 0;
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        wm_split sp = wm_split_llama(NULL, i, &t);
        uint64_t part = sp == WM_SPLIT_NONE ? t.nbytes : t.nbytes / w;
        want_read += part;
        if (sp != WM_SPLIT_NONE) {
            split_whole += t.nbytes;
            split_read += part;
        }
    }
    CHECK(split_whole > 0);
    uint64_t before = wmt_rchar(true);
    wm_model *m = NULL;
    wm_status st = wm_model_load(f, &o, &m, &err);
    uint64_t read_by_kernel = wmt_rchar(false) - before;
    CHECK_MSG(st == WM_OK, "load rank %u/%u: %s", r, w, err.msg);
    wm_model_stats s = WM_MODEL_STATS_INIT;
    wm_model_stats_get(m, &s);
    CHECK_EQ(s.bytes_read, want_read);
#if defined(WM_HAVE_CUDA) && !defined(WM_CUDA_MOCK)
    /* The real CUDA runtime reads a few /proc and /sys files of its own during a load (a few
     * hundred bytes seen on an H200): the kernel's count is the weights plus those. */
    if (o.backend == WM_BACKEND_CUDA)
        CHECK_MSG(read_by_kernel >= want_read && read_by_kernel - want_read < (64u << 10),
                  "the kernel counted %llu bytes read, the weights are %llu",
                  (unsigned long long)read_by_kernel, (unsigned long long)want_read);
    else
#endif
        CHECK_EQ(read_by_kernel, want_read);
    CHECK_EQ(split_read * w, split_whole); /* split tensors: 1/W of their bytes read */
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        wm_split sp = wm_split_llama(NULL, i, &t), got_sp;
        unsigned char *want = malloc(t.nbytes + 1), *got = malloc(t.nbytes + 1);
        CHECK(want && got);
        uint64_t n = expected_slice(file.b[t.shard], &t, sp, r, w, want), nbytes;
        wm_type type;
        CHECK_STATUS(wm_model_tensor_info(m, i, &type, &nbytes), WM_OK);
        CHECK_EQ(nbytes, n);
        uint64_t shape[WM_MAX_DIMS];
        uint32_t nd;
        CHECK_STATUS(wm_model_tensor_shape(m, i, shape, &nd, &got_sp), WM_OK);
        CHECK_EQ(got_sp, sp);
        CHECK_EQ(nd, t.n_dims);
        if (sp == WM_SPLIT_DIM0) CHECK_EQ(shape[1] * w, t.shape[1]);
        if (sp == WM_SPLIT_LAST) CHECK_EQ(shape[0] * w, t.shape[0]);
        if (n) read_back(m, i, got, n);
        CHECK_MSG(memcmp(got, want, n) == 0, "rank %u: tensor '%s' (split %d) differs", r, t.name,
                  (int)sp);
        free(want);
        free(got);
    }
    wm_model_release(m);
    shards_done(f, &file);
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
}

/* The library's llama rule, which the cases below split by: GGUF and Hugging Face names, 2-D
 * only. */
WM_TEST(split_llama_rule) {
    static const struct {
        const char *name;
        uint32_t n_dims;
        wm_split want;
    } rows[] = {
        {"blk.3.attn_q.weight", 2, WM_SPLIT_DIM0},
        {"blk.3.attn_k.weight", 2, WM_SPLIT_DIM0},
        {"blk.3.attn_v.weight", 2, WM_SPLIT_DIM0},
        {"blk.3.ffn_gate.weight", 2, WM_SPLIT_DIM0},
        {"blk.3.ffn_up.weight", 2, WM_SPLIT_DIM0},
        {"blk.3.attn_output.weight", 2, WM_SPLIT_LAST},
        {"blk.3.ffn_down.weight", 2, WM_SPLIT_LAST},
        {"model.layers.3.self_attn.q_proj.weight", 2, WM_SPLIT_DIM0},
        {"model.layers.3.mlp.up_proj.weight", 2, WM_SPLIT_DIM0},
        {"model.layers.3.self_attn.o_proj.weight", 2, WM_SPLIT_LAST},
        {"model.layers.3.mlp.down_proj.weight", 2, WM_SPLIT_LAST},
        {"blk.3.attn_norm.weight", 1, WM_SPLIT_NONE},
        {"blk.3.attn_q.bias", 1, WM_SPLIT_NONE},
        {"token_embd.weight", 2, WM_SPLIT_NONE},
        {"output.weight", 2, WM_SPLIT_NONE},
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        wm_tensor_info t = {.name = rows[k].name, .n_dims = rows[k].n_dims};
        CHECK_MSG(wm_split_llama(NULL, k, &t) == rows[k].want, "%s", rows[k].name);
    }
}

/* ---- tensor parallelism on the CPU ---- */

WM_TEST(tp_heap_slices_and_reads) {
    const char *path = wmt_make_model("m.gguf", "--size 8M --format gguf");
    wm_load_options o = {.mode = WM_MODE_HEAP, .threads = 3};
    for (unsigned r = 0; r < 2; r++)
        tp_rank(path, o, r, 2);
    for (unsigned r = 0; r < 4; r++)
        tp_rank(path, o, r, 4);
}

/* A set of shards: slices of tensors in every shard, read from each. */
WM_TEST(tp_heap_sharded_set) {
    wmt_make_model("s.gguf", "--size 8M --format gguf --shards 3");
    const char *path = wmt_tmp("s-00002-of-00003.gguf");
    wm_load_options o = {.mode = WM_MODE_HEAP, .threads = 3};
    for (unsigned r = 0; r < 2; r++)
        tp_rank(path, o, r, 2);
}

WM_TEST(tp_heap_safetensors) {
    const char *path = wmt_make_model("m.safetensors", "--size 8M --format safetensors");
    /* threads set: the default asks glibc for the CPU count, which reads /sys (rchar). */
    wm_load_options o = {.mode = WM_MODE_HEAP, .threads = 2};
    for (unsigned r = 0; r < 2; r++)
        tp_rank(path, o, r, 2);
}

static wm_split split_everything_last(void *user, size_t index, const wm_tensor_info *t) {
    (void)user;
    (void)index;
    (void)t;
    return WM_SPLIT_LAST;
}

WM_TEST(tp_refusals_name_the_tensor_and_hold_nothing) {
    const char *path = wmt_make_model("m.gguf", "--size 8M --format gguf");
    wm_file *f;
    wm_error err;
    CHECK_STATUS(wm_file_open_set(path, &f, &err), WM_OK);
    wm_model *m = (wm_model *)(uintptr_t)1;
    /* 256 columns of q8_0 (32 a block) do not split into 16 parts of whole blocks. */
    wm_load_options o = {.mode = WM_MODE_HEAP, .tp_world = 16, .tp_split = split_everything_last};
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK(m == NULL);
    CHECK_MSG_HAS(err, "does not split into 16 equal parts");
    CHECK_MSG_HAS(err, "tensor '");
    o = (wm_load_options){.mode = WM_MODE_MMAP, .tp_world = 2, .tp_split = wm_split_llama};
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "needs mode heap");
    o = (wm_load_options){
        .mode = WM_MODE_HEAP, .tp_world = 2, .tp_rank = 2, .tp_split = wm_split_llama};
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "tp_rank 2 of tp_world 2");
    o = (wm_load_options){.mode = WM_MODE_HEAP, .tp_world = 2};
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    int devs[2] = {0, 1};
    o = (wm_load_options){.mode = WM_MODE_HEAP, .devices = devs, .n_devices = 2};
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "not the CPU");
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
}

/* Every fallible call of a sliced heap load fails in turn: the documented status, and nothing
 * held. */
WM_TEST(tp_heap_fault_sweep) {
#ifndef WM_FAULT_INJECTION
    WM_SKIP("needs -DWM_FAULT_INJECTION=ON");
#else
    const char *path = wmt_make_model("m.gguf", "--size 8M --format gguf");
    wmt_load_run l = {OPEN_OK(path),
                      {.mode = WM_MODE_HEAP,
                       .threads = 2,
                       .tp_world = 2,
                       .tp_rank = 1,
                       .tp_split = wm_split_llama},
                      NULL};
    /* a load that succeeds had a hint (advice) failed: harmless */
    wmt_sweep s = {.what = path,
                   .run = wmt_load_release,
                   .check = wmt_check_io_status,
                   .user = &l,
                   .path = path};
    wmt_sweep_result res = {0};
    static const int eio[] = {EIO};
    wmt_sweep_any(&s, eio, 1, &res);
    CHECK(res.counts[WM_OS_ANY] > 0);
    wm_file_close(l.f);
#endif
}

/* Descriptors opened by one load with `o` (the OS layer's open calls, counted by the fault
 * table) and the threads it read with; every descriptor is closed again when it returns. */
static uint64_t opens_of_load(const char *path, wm_load_options o, unsigned *threads) {
    wm_file *f;
    wm_error err;
    CHECK_STATUS(wm_file_open_set(path, &f, &err), WM_OK);
    int fds = wmt_count_fds();
    wm__fault_reset();
    wm_model *m;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_OK);
    uint64_t opens = wm__fault_count(WM_OS_OPEN);
    CHECK_EQ(wmt_count_fds(), fds);
    wm_model_stats st = WM_MODEL_STATS_INIT;
    wm_model_stats_get(m, &st);
    *threads = st.threads;
    wm_model_release(m);
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
    return opens;
}

/* The reading threads of a sliced load read through descriptors of their own (wm__fds: one
 * descriptor shared by all caps reads of a few KiB, bench/RESULTS.md multigpu): each worker
 * opens one per shard, the calling thread reads through the shard's, and none is left open
 * after the load. A load without rows to read opens none. */
static void readers_own_descriptors(wm_load_options o, unsigned first_reader) {
#ifndef WM_FAULT_INJECTION
    (void)o;
    (void)first_reader;
    WM_SKIP("needs -DWM_FAULT_INJECTION=ON (the open calls are counted there)");
#else
    const char *path = wmt_make_model("m.gguf", "--size 8M --format gguf");
    unsigned whole_threads, sliced_threads;
    /* A first load: the real CUDA runtime opens descriptors of its own when it starts. */
    wmt_load_run first = {OPEN_OK(path), o, NULL};
    wm_error err;
    CHECK_STATUS(wmt_load_release(&first, &err), WM_OK);
    wm_file_close(first.f);
    uint64_t whole = opens_of_load(path, o, &whole_threads);
    o.tp_world = 2;
    o.tp_rank = 1;
    o.tp_split = wm_split_llama;
    uint64_t sliced = opens_of_load(path, o, &sliced_threads);
    CHECK(sliced_threads > 1);
    CHECK_MSG(sliced - whole == sliced_threads - first_reader,
              "%llu descriptors opened for %u reading threads (%llu without slices)",
              (unsigned long long)sliced, sliced_threads, (unsigned long long)whole);
#endif
}

WM_TEST(tp_heap_readers_own_descriptors) {
    /* The calling thread is the first of the heap's readers and keeps the shard's. */
    readers_own_descriptors((wm_load_options){.mode = WM_MODE_HEAP, .threads = 4}, 1);
}

/* ---- several devices (CUDA) ---- */

#ifdef WM_HAVE_CUDA

static int n_gpus(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    (void)cudaGetLastError();
    return n;
}

#define NEED_GPUS(n)                                                                               \
    do {                                                                                           \
        if (n_gpus() < (n)) WM_SKIP("fewer than " #n " CUDA devices");                             \
        wmt_gpu_lock(false);                                                                       \
    } while (0)

static void no_violations(void) {
#ifdef WM_CUDA_MOCK
    CHECK_EQ(wm__cuda_mock_violations(), 0);
#endif
}

static unsigned by_parity(void *user, size_t index, const wm_tensor_info *t) {
    (void)user;
    (void)t;
    return (unsigned)(index % 2);
}

/* Options of a load on the CUDA backend over devices 0 and 1 with `placement`. */
static wm_load_options two_devices(wm_mode mode, wm_placement placement) {
    static int devs[2] = {0, 1};
    return (wm_load_options){.mode = mode,
                             .backend = WM_BACKEND_CUDA,
                             .devices = devs,
                             .n_devices = 2,
                             .placement = placement};
}

/* Puts a model over two devices to sleep and wakes it (the pool's WM_POOL_SLEEP): asleep, both
 * devices' ledger figures are 0 and the one host copy holds their bytes, not pinned (the bounce
 * ring, portable: both devices copy through it, is gone); awake, each device holds what it held
 * and every tensor the file's bytes again. The mock refuses a copy from a registration another
 * device may not use. */
static void sleep_and_wake_two(wm_model *m, const wm_file *f, const shard_bytes *file) {
    wm_ledger_stat d0, d1, a0, a1;
    CHECK_STATUS(wm_ledger_device(0, &d0), WM_OK);
    CHECK_STATUS(wm_ledger_device(1, &d1), WM_OK);
    wm_error err;
    CHECK_MSG(wm__model_sleep(m, &err) == WM_OK, "sleep: %s", err.msg);
    no_violations();
    CHECK_STATUS(wm_ledger_device(0, &a0), WM_OK);
    CHECK_STATUS(wm_ledger_device(1, &a1), WM_OK);
    CHECK(a0.current == 0 && a1.current == 0);
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    CHECK_EQ(l.cat[WM_LEDGER_PINNED].current, 0);
    CHECK(l.cat[WM_LEDGER_HEAP].current >= d0.current + d1.current);
    CHECK_MSG(wm__model_wake(m, &err) == WM_OK, "wake: %s", err.msg);
    no_violations();
    CHECK_STATUS(wm_ledger_device(0, &a0), WM_OK);
    CHECK_STATUS(wm_ledger_device(1, &a1), WM_OK);
    CHECK(a0.current == d0.current && a1.current == d1.current);
    wm_ledger_get(&l);
    CHECK_EQ(l.cat[WM_LEDGER_PINNED].current, 0);
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        if (!t.nbytes) continue;
        unsigned char *got = malloc(t.nbytes);
        CHECK(got);
        read_back(m, i, got, t.nbytes);
        CHECK_MSG(memcmp(got, file->b[t.shard] + t.offset, t.nbytes) == 0,
                  "tensor '%s' differs on device %d after a wake", t.name,
                  wm_model_tensor_device(m, i));
        free(got);
    }
}

/* Loads over devices 0 and 1 with `placement`; every tensor whole on its device, the per-device
 * ledger exactly its buffers, everything back after release; in mode heap the model sleeps and
 * wakes too. Returns tensors on device 1. */
static size_t load_two(const char *path, wm_placement placement, wm_mode mode) {
    wm_file *f;
    wm_error err;
    CHECK_STATUS(wm_file_open_set(path, &f, &err), WM_OK);
    shard_bytes file;
    shards_read(f, &file);
    wm_load_options o = two_devices(mode, placement);
    o.place_tensor = by_parity;
    o.cuda = &(wm_cuda_options){.pinned_budget = (uint64_t)8 << 20};
    wm_model *m;
    wm_status st = wm_model_load(f, &o, &m, &err);
    CHECK_MSG(st == WM_OK, "load: %s", err.msg);
    no_violations();
    uint64_t on[2] = {0, 0};
    size_t count[2] = {0, 0};
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        int d = wm_model_tensor_device(m, i);
        if (!t.nbytes) continue;
        CHECK_MSG(d == 0 || d == 1, "tensor '%s' on device %d", t.name, d);
        if (placement == WM_PLACE_CALLBACK) CHECK_EQ(d, (int)(i % 2));
        count[d]++;
        on[d] += t.nbytes;
        unsigned char *got = malloc(t.nbytes);
        CHECK(got);
        read_back(m, i, got, t.nbytes);
        CHECK_MSG(memcmp(got, file.b[t.shard] + t.offset, t.nbytes) == 0,
                  "tensor '%s' differs on device %d", t.name, d);
        free(got);
    }
    CHECK(count[0] > 0 && count[1] > 0);
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    wm_ledger_stat d0, d1;
    CHECK_STATUS(wm_ledger_device(0, &d0), WM_OK);
    CHECK_STATUS(wm_ledger_device(1, &d1), WM_OK);
    CHECK_EQ(d0.current + d1.current, l.cat[WM_LEDGER_DEVICE].current);
    CHECK(d0.current >= on[0] && d1.current >= on[1]);
    CHECK(d0.current < on[0] + 64 * (count[0] + 1) && d1.current < on[1] + 64 * (count[1] + 1));
    CHECK_EQ(l.cat[WM_LEDGER_PINNED].current, 0);
    if (mode == WM_MODE_HEAP) sleep_and_wake_two(m, f, &file);
    wm_model_release(m);
    CHECK_STATUS(wm_ledger_device(0, &d0), WM_OK);
    CHECK_STATUS(wm_ledger_device(1, &d1), WM_OK);
    CHECK_EQ(d0.current, 0);
    CHECK_EQ(d1.current, 0);
    shards_done(f, &file);
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
    no_violations();
    return count[1];
}

WM_TEST(two_devices_balance) {
    NEED_GPUS(2);
    load_two(wmt_make_model("m.gguf", "--size 16M --format gguf"), WM_PLACE_BALANCE, WM_MODE_HEAP);
    load_two(wmt_make_model("m.safetensors", "--size 16M --format safetensors"), WM_PLACE_BALANCE,
             WM_MODE_MMAP);
    /* A set of shards: tensors of every shard on both devices. */
    wmt_make_model("s.gguf", "--size 16M --format gguf --shards 3");
    load_two(wmt_tmp("s-00002-of-00003.gguf"), WM_PLACE_BALANCE, WM_MODE_HEAP);
}

WM_TEST(two_devices_layers) {
    NEED_GPUS(2);
    const char *path = wmt_make_model("m.gguf", "--size 16M --format gguf");
    load_two(path, WM_PLACE_LAYERS, WM_MODE_HEAP);
    /* blk.0 on device 0, blk.1 on device 1 (two layers), token_embd first, output last. */
    wm_file *f = OPEN_OK(path);
    wm_error err;
    wm_load_options o = two_devices(WM_MODE_HEAP, WM_PLACE_LAYERS);
    wm_model *m;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_OK);
    uint32_t layers = 0;
    CHECK_STATUS(wm_file_get_u32(f, "llama.block_count", &layers), WM_OK);
    CHECK(layers >= 2);
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        int d = wm_model_tensor_device(m, i);
        unsigned l;
        if (sscanf(t.name, "blk.%u.", &l) == 1)
            CHECK_MSG(d == (int)(l * 2 / layers), "'%s' on device %d", t.name, d);
        if (!strcmp(t.name, "token_embd.weight")) CHECK_EQ(d, 0);
        if (!strncmp(t.name, "output", 6)) CHECK_EQ(d, 1);
    }
    wm_model_release(m);
    wm_file_close(f);
    no_violations();
}

WM_TEST(two_devices_callback) {
    NEED_GPUS(2);
    load_two(wmt_make_model("m.gguf", "--size 8M --format gguf"), WM_PLACE_CALLBACK, WM_MODE_HEAP);
}

/* A list of one device is that device, not opts.device: every tensor and every byte of the
 * ledger's device figure on device 1. */
WM_TEST(one_device_list_is_that_device) {
    NEED_GPUS(2);
    wm_file *f = OPEN_OK(wmt_make_model("m.gguf", "--size 8M --format gguf"));
    static int one[1] = {1};
    wm_load_options o = {.mode = WM_MODE_HEAP,
                         .backend = WM_BACKEND_CUDA,
                         .device = 0,
                         .devices = one,
                         .n_devices = 1};
    wm_model *m;
    wm_error err;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_OK);
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        if (t.nbytes) CHECK_EQ(wm_model_tensor_device(m, i), 1);
    }
    wm_ledger_stat d0, d1;
    CHECK_STATUS(wm_ledger_device(0, &d0), WM_OK);
    CHECK_STATUS(wm_ledger_device(1, &d1), WM_OK);
    CHECK_EQ(d0.current, 0);
    CHECK(d1.current > 0);
    wm_model_release(m);
    wm_file_close(f);
    no_violations();
}

WM_TEST(device_refusals) {
    NEED_GPUS(2);
    const char *path = wmt_make_model("m.gguf", "--size 8M --format gguf");
    wm_file *f;
    wm_error err;
    CHECK_STATUS(wm_file_open_set(path, &f, &err), WM_OK);
    int twice[2] = {1, 1}, far[2] = {0, 40}, missing[2] = {0, 15};
    wm_load_options o = {
        .mode = WM_MODE_HEAP, .backend = WM_BACKEND_CUDA, .devices = twice, .n_devices = 2};
    wm_model *m;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "listed twice");
    o.devices = far;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "out of range");
    o.devices = missing;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EDEVICE);
    CHECK_MSG_HAS(err, "does not exist");
    o.devices = twice;
    o.n_devices = 2;
    o.devices = (int[2]){0, 1};
    o.mode = WM_MODE_MMAP;
    o.cuda = &(wm_cuda_options){.registered = 1};
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "staged path");
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
    no_violations();
}

/* After each run of the sweep below: neither device holds a byte. */
static void devices_empty(void *user, const wmt_fault_run *r) {
    (void)user;
    (void)r;
    for (int d = 0; d < 2; d++) {
        wm_ledger_stat st;
        CHECK_STATUS(wm_ledger_device(d, &st), WM_OK);
        CHECK_EQ(st.current, 0);
    }
}

/* Every fallible CUDA and OS call of a two-device load fails in turn: the load fails (or a hint
 * did), and no device, pinned, scratch or mapped byte is left. */
WM_TEST(two_devices_fault_sweep) {
#ifndef WM_FAULT_INJECTION
    WM_SKIP("needs -DWM_FAULT_INJECTION=ON");
#else
    NEED_GPUS(2);
    const char *path = wmt_make_model("m.gguf", "--size 8M --format gguf");
    int devs[2] = {0, 1};
    wmt_load_run l = {OPEN_OK(path),
                      {.mode = WM_MODE_HEAP,
                       .backend = WM_BACKEND_CUDA,
                       .devices = devs,
                       .n_devices = 2,
                       .threads = 4,
                       .cuda = &(wm_cuda_options){.pinned_budget = (uint64_t)8 << 20}},
                      NULL};
    wmt_sweep s = {
        .what = path, .run = wmt_load_release, .check = devices_empty, .user = &l, .path = path};
    wmt_sweep_result res = {0};
    static const int enomem[] = {ENOMEM};
    wmt_sweep_any(&s, enomem, 1, &res);
    CHECK(res.counts[WM_OS_DEVICE] > 0);
    CHECK(res.failed > 0);
    wm_file_close(l.f);
    no_violations();
#endif
}

/* Tensor parallelism on the CUDA staged path: both ranks' slices on the device, and the reads. */
WM_TEST(tp_cuda_slices_and_reads) {
    NEED_GPUS(1);
    const char *path = wmt_make_model("m.gguf", "--size 16M --format gguf");
    wm_load_options o = {.mode = WM_MODE_HEAP,
                         .backend = WM_BACKEND_CUDA,
                         .threads = 4,
                         .cuda = &(wm_cuda_options){.pinned_budget = (uint64_t)8 << 20}};
    for (unsigned r = 0; r < 2; r++)
        tp_rank(path, o, r, 2);
    o.mode = WM_MODE_MMAP; /* staged from the page cache as well */
    tp_rank(path, o, 1, 2);
    /* A set of shards: windows of each shard, slices of tensors in every one. */
    wmt_make_model("s.gguf", "--size 16M --format gguf --shards 3");
    o.mode = WM_MODE_HEAP;
    tp_rank(wmt_tmp("s-00003-of-00003.gguf"), o, 0, 2);
    no_violations();
}

WM_TEST(tp_cuda_readers_own_descriptors) {
    NEED_GPUS(1);
    /* Every reader thread opens its own; the loading thread reads nothing. */
    readers_own_descriptors(
        (wm_load_options){.mode = WM_MODE_HEAP, .backend = WM_BACKEND_CUDA, .threads = 3}, 0);
}

#endif /* WM_HAVE_CUDA */

#ifdef WM_HAVE_CUDA
/* The CLI over two devices: every cycle's ledger is back at 0 and no region maps the file; the
 * verdict "all memory returned" where footprints mean something: with the real runtime (the
 * mock's device memory is host memory, as in test_cuda's cli_load) and not under a sanitizer
 * (ASan's quarantine and TSan's shadow keep memory of their own). */
WM_TEST(cli_two_devices_cycles_return_memory) {
    NEED_GPUS(2);
    const char *path = wmt_make_model("m.gguf", "--size 16M --format gguf");
    char args[1024], out[1 << 16];
#ifdef WM_CUDA_MOCK
    const bool footprints_mean_something = false;
#else
    const bool footprints_mean_something = !WMT_ASAN;
#endif
    for (int layers = 0; layers < 2; layers++) {
        snprintf(args, sizeof args,
                 "load '%s' --mode heap --backend cuda:0,1 --placement %s "
                 "--cycles 3 --json",
                 path, layers ? "layers" : "balance");
        int rc = wmt_cli(args, out, sizeof out);
        CHECK_MSG(strstr(out, "\"ledger_bytes\": 0,") != NULL, "%s", out);
        CHECK_MSG(strstr(out, "\"file_regions\": 0}") != NULL, "%s", out);
        if (footprints_mean_something) {
            CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
            CHECK_MSG(strstr(out, "\"ok\": true") != NULL, "%s", out);
        }
    }
    /* A device listed twice is a bad spec (wm_backend_from_name): a usage error. */
    snprintf(args, sizeof args, "load '%s' --mode heap --backend cuda:0,0", path);
    CHECK_EQ(wmt_cli(args, out, sizeof out), 2);
    CHECK_MSG(strstr(out, "listed twice") != NULL, "%s", out);
    snprintf(args, sizeof args, "load '%s' --mode heap --backend cuda:0,x", path);
    CHECK_EQ(wmt_cli(args, out, sizeof out), 2);
    snprintf(args, sizeof args, "load '%s' --mode heap --backend cuda:0,1 --placement rows", path);
    CHECK_EQ(wmt_cli(args, out, sizeof out), 2);
}
#endif

/* ---- read once across ranks (NCCL) ---- */

/* Against tests/nccl_mock.c and the mock runtime in CI; against the real NCCL and GPUs on a
 * GPU host, a rank per device. Real CUDA and NCCL must not start before fork: there the parent
 * touches neither, the device count comes from a child, and rank 0 makes the communicator's id
 * and hands it to the others through a pipe. The mock's id is made by the parent, since its
 * "interconnect" is a shared mapping that the ranks inherit. */
#if defined(WM_HAVE_CUDA) && defined(WM_HAVE_NCCL)
#include <nccl.h>
#include <sys/wait.h>

#ifdef WM_CUDA_MOCK
unsigned long wm__nccl_mock_violations(ncclComm_t comm);
#define NCCL_VIOLATIONS(comm) wm__nccl_mock_violations(comm)
#else
#define NCCL_VIOLATIONS(comm) ((void)(comm), 0ul)
#endif

/* The CUDA device count, asked in a child so that this process starts no CUDA. */
static int gpus_from_child(void) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) _exit(n_gpus() & 0x7f);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

/* The communicator's id: `id_in` holds the parent's (mock); else rank 0 makes it and writes it
 * for each other rank to `id_pipe`. */
static void rank_comm(ncclComm_t *comm, const ncclUniqueId *id_in, const int id_pipe[2], unsigned r,
                      unsigned w) {
    ncclUniqueId id;
    if (id_in) {
        id = *id_in;
    } else if (r == 0) {
        CHECK_EQ(ncclGetUniqueId(&id), ncclSuccess);
        for (unsigned k = 1; k < w; k++)
            CHECK_EQ(write(id_pipe[1], &id, sizeof id), sizeof id); /* < PIPE_BUF: whole */
    } else {
        CHECK_EQ(read(id_pipe[0], &id, sizeof id), sizeof id);
    }
    close(id_pipe[0]);
    close(id_pipe[1]);
    CHECK_EQ(ncclCommInitRank(comm, (int)w, id, (int)r), ncclSuccess);
}

/* One rank, in a child process, on device `dev`: loads with the communicator, checks every
 * tensor on its device (whole where replicated, its slice where split), releases, and writes
 * the bytes it read to `out`. Exit 0 when all holds. */
static int read_once_rank(const char *path, const ncclUniqueId *id_in, const int id_pipe[2],
                          unsigned r, unsigned w, int dev, bool split, int out) {
    CHECK_EQ(cudaSetDevice(dev), cudaSuccess);
    ncclComm_t comm;
    rank_comm(&comm, id_in, id_pipe, r, w);
    unsigned char *file = file_bytes(path);
    wm_file *f;
    wm_error err;
    CHECK_STATUS(wm_file_open_set(path, &f, &err), WM_OK);
    wm_load_options o = {
        .mode = WM_MODE_HEAP,
        .backend = WM_BACKEND_CUDA,
        .device = dev,
        .threads = 3,
        .tp_rank = r,
        .tp_world = w,
        .tp_split = split ? wm_split_llama : NULL,
        .cuda = &(wm_cuda_options){.pinned_budget = (uint64_t)4 << 20, .nccl_comm = comm}};
    wm_model *m;
    wm_status st = wm_model_load(f, &o, &m, &err);
    CHECK_MSG(st == WM_OK, "rank %u: %s", r, err.msg);
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        wm_split sp = split ? wm_split_llama(NULL, i, &t) : WM_SPLIT_NONE;
        unsigned char *want = malloc(t.nbytes + 1), *got = malloc(t.nbytes + 1);
        CHECK(want && got);
        uint64_t n = expected_slice(file, &t, sp, r, w, want);
        if (n) read_back(m, i, got, n);
        CHECK_MSG(memcmp(got, want, n) == 0, "rank %u: tensor '%s' differs", r, t.name);
        free(want);
        free(got);
    }
    wm_model_stats s = WM_MODEL_STATS_INIT;
    wm_model_stats_get(m, &s);
    CHECK_EQ(write(out, &s.bytes_read, sizeof s.bytes_read), sizeof s.bytes_read);
    wm_model_release(m);
    wm_file_close(f);
    free(file);
    CHECK_LEDGER_EMPTY();
    CHECK_EQ(NCCL_VIOLATIONS(comm), 0);
    no_violations();
    ncclCommDestroy(comm);
    return 0;
}

/* The bytes of all the file's tensors. */
static uint64_t tensor_bytes(const char *path) {
    wm_file *f;
    wm_error err;
    CHECK_STATUS(wm_file_open_set(path, &f, &err), WM_OK);
    uint64_t n = 0;
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        n += t.nbytes;
    }
    wm_file_close(f);
    return n;
}

/* W ranks in W processes, rank r on device r mod `gpus`: together they read every replicated
 * byte once (1.0x), and each rank its 1/W of the split tensors. */
static void read_once(const char *path, unsigned w, int gpus, bool split) {
    /* Replicated: once in all; split: 1/W per rank, W ranks. */
    uint64_t want_total = tensor_bytes(path);
    const ncclUniqueId *id_in = NULL;
#ifdef WM_CUDA_MOCK
    static ncclUniqueId id;
    CHECK_EQ(ncclGetUniqueId(&id), ncclSuccess);
    id_in = &id;
#endif
    int fds[2], id_pipe[2];
    CHECK(pipe(fds) == 0 && pipe(id_pipe) == 0);
    pid_t pids[8];
    for (unsigned r = 0; r < w; r++) {
        pids[r] = fork();
        CHECK(pids[r] >= 0);
        if (pids[r] == 0) {
            close(fds[0]);
            _exit(read_once_rank(path, id_in, id_pipe, r, w, (int)(r % (unsigned)gpus), split,
                                 fds[1]));
        }
    }
    close(fds[1]);
    close(id_pipe[0]);
    close(id_pipe[1]);
    uint64_t total = 0, one;
    unsigned got = 0;
    while (read(fds[0], &one, sizeof one) == sizeof one) {
        total += one;
        got++;
    }
    close(fds[0]);
    for (unsigned r = 0; r < w; r++) {
        int status;
        CHECK(waitpid(pids[r], &status, 0) == pids[r]);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %u failed", r);
    }
    CHECK_EQ(got, w);
    CHECK_MSG(total == want_total, "the ranks read %llu bytes in all, the model has %llu",
              (unsigned long long)total, (unsigned long long)want_total);
}

/* Real NCCL refuses two ranks on one GPU: there, W ranks need W devices. The mock's ranks
 * share its two. */
static bool ranks_fit(unsigned w, int gpus) {
#ifdef WM_CUDA_MOCK
    return gpus >= 1 && w > 0;
#else
    return (unsigned)gpus >= w;
#endif
}

static void read_once_cases(void) {
    int gpus = gpus_from_child();
    if (!ranks_fit(2, gpus)) WM_SKIP("read-once ranks need two CUDA devices (real NCCL)");
    wmt_gpu_lock(false);
    const char *path = wmt_make_model("m.gguf", "--size 16M --format gguf");
    read_once(path, 2, gpus, false);
    if (ranks_fit(3, gpus)) read_once(path, 3, gpus, false);
    read_once(path, 2, gpus, true);
}

/* In this process: a communicator of one rank (NCCL's own, on a GPU host). */
static void read_once_refusal_cases(void) {
    if (n_gpus() < 1) WM_SKIP("no CUDA device");
    wmt_gpu_lock(false);
    const char *path = wmt_make_model("m.gguf", "--size 8M --format gguf");
    ncclUniqueId id;
    CHECK_EQ(ncclGetUniqueId(&id), ncclSuccess);
    ncclComm_t comm;
    CHECK_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
    wm_file *f;
    wm_error err;
    CHECK_STATUS(wm_file_open_set(path, &f, &err), WM_OK);
    wm_model *m;
    /* The communicator is rank 0 of 1; the load says rank 1 of 2. */
    wm_load_options o = {.mode = WM_MODE_HEAP,
                         .backend = WM_BACKEND_CUDA,
                         .tp_rank = 1,
                         .tp_world = 2,
                         .cuda = &(wm_cuda_options){.nccl_comm = comm}};
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "rank 0 of 1");
    o = (wm_load_options){.mode = WM_MODE_HEAP, .cuda = &(wm_cuda_options){.nccl_comm = comm}};
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "CUDA backend");
    /* One rank: the load checks the communicator and reads everything itself. */
    o = (wm_load_options){.mode = WM_MODE_HEAP,
                          .backend = WM_BACKEND_CUDA,
                          .threads = 2,
                          .cuda = &(wm_cuda_options){.nccl_comm = comm}};
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_OK);
    wm_model_stats s = WM_MODEL_STATS_INIT;
    wm_model_stats_get(m, &s);
    CHECK_EQ(s.bytes_read, tensor_bytes(path));
    wm_model_release(m);
    wm_file_close(f);
    ncclCommDestroy(comm);
    CHECK_LEDGER_EMPTY();
}

#endif

WM_TEST(read_once_across_ranks) {
#if defined(WM_HAVE_CUDA) && defined(WM_HAVE_NCCL)
    read_once_cases();
#else
    WM_SKIP("read-once needs the CUDA backend with NCCL");
#endif
}

WM_TEST(read_once_refusals) {
#if defined(WM_HAVE_CUDA) && defined(WM_HAVE_NCCL)
    read_once_refusal_cases();
#else
    WM_SKIP("read-once needs the CUDA backend with NCCL");
#endif
}
