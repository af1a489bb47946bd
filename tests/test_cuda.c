/*
 * test_cuda.c: the CUDA backend (src/backend/cuda.c).
 *
 * Cases that need a GPU exit 77 (skipped) when cudaGetDeviceCount finds none. With one: the
 * bytes on the device equal the file's (copied back and compared) on the staged and the
 * registered path, with and without chunking, for GGUF and safetensors; 20 load/release cycles
 * give the device's free memory back to its baseline and leave the ledger at 0; the pinned
 * figure never exceeds the budget; after release the old ring is no longer registered; each
 * k-th CUDA call (and each k-th OS call of every kind) failed in turn gives a clean error and
 * holds nothing. A model put to sleep (its device memory to one pinned host copy) and woken holds
 * exactly what the ledger says at each step and the file's bytes after, and every call of a
 * sleep or a wake failed in turn leaves it as it was.
 * Without a GPU the no-device error (library and CLI) and the refused options are checked.
 * Built with -DWM_CUDA_MOCK=ON the same cases run against tests/cuda_mock.c, and one more checks
 * that a load calls CUDA only on the loading thread (the runtime keeps host memory for every
 * thread that ever called it, and workers are new threads on every load). Without the CUDA
 * toolkit the file checks that the backend is reported as missing.
 *
 * Sections: helpers; always (no GPU needed); with a GPU.
 */
#include "cuda_mock.h" /* wm__cuda_mock_violations, _largest_registration (mock builds) */
#include "wmtest.h"

#include "os/fault.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef WM_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda_tune.h" /* wm__cuda_test_last_ring */
#include "backend/staged.h"    /* wm__model_sleep, wm__model_wake, wm__staged_tune_swap */
#endif

/* ---- helpers ---- */

/* The CUDA options of the options cuda_opts made last (the cases run on one thread). */
static wm_cuda_options cuda_o;

static wm_load_options cuda_opts(wm_mode mode) {
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = mode;
    o.backend = WM_BACKEND_CUDA;
    cuda_o = (wm_cuda_options)WM_CUDA_OPTIONS_INIT;
    o.cuda = &cuda_o;
    return o;
}

#ifdef WM_HAVE_CUDA

static bool have_gpu(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    (void)cudaGetLastError();
    return e == cudaSuccess && n > 0;
}

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!have_gpu()) WM_SKIP("no CUDA device");                                                \
        wmt_gpu_lock(false);                                                                       \
    } while (0)

/* Copies every tensor back from the device and compares it with the file's bytes. */
static void check_bytes(wm_model *m) {
    const wm_file *f = wm_model_file(m);
    size_t n = wm_file_tensor_count(f);
    CHECK(n > 0);
    for (size_t i = 0; i < n; i++) {
        wm_tensor_info ti;
        CHECK_STATUS(wm_file_tensor(f, i, &ti), WM_OK);
        CHECK(wm_model_tensor_data(m, i) == NULL);
        uint64_t d = wm_model_tensor_device_ptr(m, i);
        CHECK_MSG(d != 0 || ti.nbytes == 0, "tensor %s has no device pointer", ti.name);
        if (!ti.nbytes) continue;
        unsigned char *got = malloc(ti.nbytes), *want = malloc(ti.nbytes);
        CHECK(got && want);
        memset(got, 0x5A, ti.nbytes);
        CHECK_EQ(cudaMemcpy(got, (void *)(uintptr_t)d, ti.nbytes, cudaMemcpyDeviceToHost),
                 cudaSuccess);
        int fd = open(wm_file_shard_path(f, ti.shard), O_RDONLY);
        CHECK(fd >= 0);
        CHECK_EQ(pread(fd, want, ti.nbytes, (off_t)ti.offset), ti.nbytes);
        close(fd);
        CHECK_MSG(memcmp(got, want, ti.nbytes) == 0, "tensor %s differs on the device", ti.name);
        free(got);
        free(want);
    }
}

/* Loads, compares, releases; checks the pinned peak against the budget and the ledger after. */
static void load_compare(const char *path, wm_load_options o) {
    wm_file *f = OPEN_OK(path);
    wm_error err;
    wm_ledger_reset_peaks();
    wm_model *m;
    wm_status st = wm_model_load(f, &o, &m, &err);
    CHECK_MSG(st == WM_OK, "load: %s", err.msg);
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    uint64_t budget = o.cuda->pinned_budget ? o.cuda->pinned_budget : (uint64_t)256 << 20;
    CHECK(l.cat[WM_LEDGER_PINNED].peak > 0);
    CHECK_MSG(l.cat[WM_LEDGER_PINNED].peak <= budget, "pinned peak %llu over budget %llu",
              (unsigned long long)l.cat[WM_LEDGER_PINNED].peak, (unsigned long long)budget);
    CHECK_EQ(l.cat[WM_LEDGER_PINNED].current, 0);
    CHECK_EQ(l.cat[WM_LEDGER_MAP_SHARED].current, 0);
    wm_model_stats s = WM_MODEL_STATS_INIT;
    wm_model_stats_get(m, &s);
    CHECK_EQ(l.cat[WM_LEDGER_DEVICE].current, s.device_bytes);
    CHECK(s.device_bytes >= s.tensor_bytes);
    check_bytes(m);
    wm_model_release(m);
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
    CHECK_EQ(wmt_count_file_maps(path), 0);
}

/* The staged and registered paths, each whole and chunked, with small budgets so that
 * windows are many, tensors cross window boundaries and several workers share the work. */
static void both_paths(const char *path) {
    for (int reg = 0; reg < 2; reg++) {
        wm_load_options o = cuda_opts(reg ? WM_MODE_MMAP : WM_MODE_HEAP);
        cuda_o.registered = reg;
        load_compare(path, o);
        o.threads = 3;
        cuda_o.pinned_budget = (uint64_t)6 << 20; /* 3 workers x 2 slots of 1 MiB */
        load_compare(path, o);
        o.max_buffer_size = (uint64_t)5 << 20;
        load_compare(path, o);
        o.threads = 1;
        cuda_o.pinned_budget = 2 * 4096; /* one worker, two one-page slots */
        o.max_buffer_size = 0;
        load_compare(path, o);
    }
}

#endif /* WM_HAVE_CUDA */

/* ---- always (no GPU needed) ---- */

/* With no GPU (or no such device), a clear WM_EDEVICE and nothing held; without the backend,
 * WM_EUNSUPPORTED. */
WM_TEST(no_device_error) {
    const char *path = wmt_make_model("m.gguf", "--size 2M --format gguf");
    wm_file *f = OPEN_OK(path);
    wm_error err;
    wm_load_options o = cuda_opts(WM_MODE_HEAP);
    wm_model *m = (wm_model *)1;
#ifdef WM_HAVE_CUDA
    if (have_gpu()) o.device = 999;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EDEVICE);
    CHECK(m == NULL);
    CHECK_MSG_HAS(err, "CUDA");
    CHECK_STATUS(wm_backend_init(WM_BACKEND_CUDA, have_gpu() ? 999 : 0, &err), WM_EDEVICE);
    CHECK_MSG_HAS(err, "CUDA device");
    /* Our errors are cleared; without a driver every runtime call reports that, ours or not. */
    if (have_gpu()) CHECK_EQ(cudaGetLastError(), cudaSuccess);
#else
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EUNSUPPORTED);
    CHECK(m == NULL);
    CHECK_STATUS(wm_backend_init(WM_BACKEND_CUDA, 0, &err), WM_EUNSUPPORTED);
#endif
    CHECK_STATUS(wm_backend_init(WM_BACKEND_CPU, 0, &err), WM_OK);
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
}

/* The CLI: exit 1 and a message naming the problem without a device; a clean load with one. */
WM_TEST(cli_load) {
    const char *path = wmt_make_model("m.gguf", "--size 4M --format gguf");
    char args[600], out[8192];
    snprintf(args, sizeof args, "load '%s' --mode heap --backend cuda", path);
    int rc = wmt_cli(args, out, sizeof out);
#ifdef WM_HAVE_CUDA
    if (have_gpu()) {
        /* The library's figures must read 0 after release, and for the staged path the whole
         * verdict must hold: wm_backend_init rehearses a load's CUDA calls, so the runtime has
         * set up its host state before the CLI's baseline (without the rehearsal it kept 160-200
         * KiB on an H200). The registered path's verdict is not checked: the driver keeps 40-90
         * KiB of its own after registering windows of a file mapping (bench/RESULTS.md, gpu).
         * Nor is any verdict with the mock runtime, whose device memory is host memory. */
        static const char *const modes[] = {"--mode heap", "--mode mmap --registered"};
        for (int k = 0; k < 2; k++) {
            snprintf(args, sizeof args, "load '%s' %s --backend cuda:0 --cycles 3 --json", path,
                     modes[k]);
            rc = wmt_cli(args, out, sizeof out);
#ifndef WM_CUDA_MOCK /* the mock's "device memory" is host memory, counted in the footprint */
            if (k == 0)
                CHECK_MSG(rc == 0 && strstr(out, "\"ok\": true"), "exit %d: %s", rc, out);
            else
#endif
                CHECK_MSG(rc == 0 || (rc == 1 && strstr(out, "\"ok\": false")), "exit %d: %s", rc,
                          out);
            CHECK_MSG(strstr(out, "\"backend\": \"cuda\"") != NULL, "%s", out);
            CHECK_MSG(
                strstr(out, "\"ledger_bytes\": 0, \"ledger_regions\": 0, \"file_regions\": 0") !=
                    NULL,
                "%s", out);
        }
        /* --pinned-budget reaches the library: one below two pages is refused by it. */
        snprintf(args, sizeof args, "load '%s' --mode heap --backend cuda --pinned-budget 100",
                 path);
        rc = wmt_cli(args, out, sizeof out);
        CHECK_MSG(rc == 1 && strstr(out, "pinned_budget 100"), "exit %d: %s", rc, out);
        return;
    }
    CHECK_MSG(strstr(out, "no usable CUDA device") != NULL, "%s", out);
#else
    CHECK_MSG(strstr(out, "no CUDA backend") != NULL, "%s", out);
#endif
    CHECK_MSG(rc == 1, "exit %d: %s", rc, out);
}

#ifdef WM_HAVE_CUDA

/* Options that make no sense on a device are refused before any device is touched. */
WM_TEST(options_refused) {
    const char *path = wmt_make_model("m.gguf", "--size 2M --format gguf");
    wm_file *f = OPEN_OK(path);
    wm_error err;
    wm_model *m;
    wm_load_options o = cuda_opts(WM_MODE_MMAP_PRIVATE);
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "mmap-private");
    o = cuda_opts(WM_MODE_HEAP);
    cuda_o.registered = 1;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "needs mode mmap");
    o = cuda_opts(WM_MODE_MMAP);
    cuda_o.registered = 1;
    o.lock = WM_LOCK_REQUIRED;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    o = cuda_opts(WM_MODE_HEAP);
    wm_convert_rule r = {NULL, WM_TYPE_INVALID, WM_TYPE_F32};
    o.convert = &r;
    o.n_convert = 1;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "conversion");
    o = cuda_opts(WM_MODE_MMAP);
    cuda_o.registered = 1;
    cuda_o.direct_io = 1;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "direct_io");
    o = cuda_opts(WM_MODE_HEAP);
    o.backend = WM_BACKEND_CPU;
    cuda_o.direct_io = 1;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "CUDA options (opts.cuda) given for the cpu backend");
    o = cuda_opts(WM_MODE_HEAP);
    cuda_o.pinned_budget = 100;
    if (have_gpu()) {
        CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
        CHECK_MSG_HAS(err, "pinned_budget");
    }
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
}

/* ---- with a GPU ---- */

WM_TEST(gguf_bytes_equal) {
    NEED_GPU();
    both_paths(wmt_make_model("m.gguf", "--size 12M --format gguf"));
}

/* safetensors data has alignment 1: windows and registrations start inside pages. */
WM_TEST(safetensors_bytes_equal) {
    NEED_GPU();
    both_paths(wmt_make_model("m.safetensors", "--size 12M --format safetensors"));
}

/* Between loads: no device or pinned bytes in the ledger, no mapping of the file. */
static void check_nothing_held(const char *path) {
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    CHECK_EQ(l.cat[WM_LEDGER_DEVICE].current, 0);
    CHECK_EQ(l.cat[WM_LEDGER_PINNED].current, 0);
    CHECK_EQ(wmt_count_file_maps(path), 0);
}

/* A selected row range (wm_load_options.select) on the staged path: the device holds exactly
 * those rows (the ledger's device figure), they equal the file's, and only they were read. */
WM_TEST(row_range_alone_on_the_device) {
    NEED_GPU();
    const char *path = wmt_make_model("m.safetensors", "--size 2M --format safetensors");
    wm_file *f = OPEN_OK(path);
    size_t ti = 0;
    wm_tensor_info t = {0};
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info x;
        CHECK_STATUS(wm_file_tensor(f, i, &x), WM_OK);
        if (x.n_dims == 2 && x.nbytes > t.nbytes) t = x, ti = i;
    }
    uint64_t row = t.nbytes / t.shape[1];
    wm_tensor_select sel = {ti, 2, 5};
    wm_load_options o = cuda_opts(WM_MODE_HEAP);
    o.select = &sel;
    o.n_select = 1;
    wm_model *m = NULL;
    wm_error err;
    CHECK_MSG(wm_model_load(f, &o, &m, &err) == WM_OK, "%s", err.msg);
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    CHECK_EQ(l.cat[WM_LEDGER_DEVICE].current, 3 * row);
    wm_model_stats s = WM_MODEL_STATS_INIT;
    wm_model_stats_get(m, &s);
    CHECK_EQ(s.bytes_read, 3 * row);
    unsigned char *got = malloc(3 * row), *want = malloc(3 * row);
    CHECK(got && want);
    uint64_t d = wm_model_tensor_device_ptr(m, ti);
    CHECK(d != 0 && wm_model_tensor_device_ptr(m, ti == 0 ? 1 : 0) == 0);
    CHECK_EQ(cudaMemcpy(got, (void *)(uintptr_t)d, 3 * row, cudaMemcpyDeviceToHost), cudaSuccess);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    CHECK_EQ(pread(fd, want, 3 * row, (off_t)(t.offset + 2 * row)), 3 * row);
    close(fd);
    CHECK(memcmp(got, want, 3 * row) == 0);
    free(got);
    free(want);
    wm_model_release(m);
    wm_file_close(f);
    check_nothing_held(path);
}

/* A consumer's loop over a set's shards, each loaded alone to the device: together they hold
 * exactly the set's device bytes and regions and read what its load reads (test_shards.c has
 * the CPU modes); with a shard's path opening its whole set they held four sets. */
WM_TEST(four_shards_hold_the_set_once) {
    NEED_GPU();
    wmt_make_model("s.safetensors", "--size 4M --seed 3 --shards 4");
    char buf[4][512];
    const char *shards[4];
    for (int k = 0; k < 4; k++) {
        char name[64];
        snprintf(name, sizeof name, "s-%05d-of-00004.safetensors", k + 1);
        snprintf(buf[k], sizeof buf[k], "%s", wmt_tmp(name));
        shards[k] = buf[k];
    }
#if defined(WM_CUDA_MOCK)
    uint64_t slack = 0;
#else
    uint64_t slack = 64u << 10; /* the runtime reads a few /proc and /sys files of its own */
#endif
    for (int reg = 0; reg < 2; reg++) {
        wm_load_options o = cuda_opts(reg ? WM_MODE_MMAP : WM_MODE_HEAP);
        cuda_o.registered = reg;
        o.threads = 2;
        wmt_shards_hold_the_set_once(wmt_tmp("s.safetensors.index.json"), shards, 4, o, slack);
    }
    check_nothing_held(shards[0]);
}

/* 20 cycles, alternating paths: device free memory back to its baseline, ledger 0, nothing
 * registered, no mapping of the file left. */
WM_TEST(cycles_return_memory) {
    NEED_GPU();
    wmt_gpu_lock(true);
    const char *path = wmt_make_model("m.gguf", "--size 24M --format gguf");
    wm_file *f = OPEN_OK(path);
    wm_error err;
    CHECK_STATUS(wm_backend_init(WM_BACKEND_CUDA, 0, &err), WM_OK);
    size_t base_free, total, now_free;
    /* One warm-up cycle: the runtime keeps what it sets up on first use of streams. */
    wm_load_options o = cuda_opts(WM_MODE_HEAP);
    o.threads = 2;
    cuda_o.pinned_budget = (uint64_t)8 << 20;
    wm_model *m;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_OK);
    wm_model_release(m);
    CHECK_EQ(cudaMemGetInfo(&base_free, &total), cudaSuccess);
    for (int c = 0; c < 20; c++) {
        o = cuda_opts(c % 2 ? WM_MODE_MMAP : WM_MODE_HEAP);
        cuda_o.registered = c % 2;
        o.threads = 2;
        cuda_o.pinned_budget = (uint64_t)8 << 20;
        o.max_buffer_size = c % 4 < 2 ? 0 : (uint64_t)5 << 20;
        CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_OK);
        CHECK_EQ(cudaMemGetInfo(&now_free, &total), cudaSuccess);
        CHECK_MSG(now_free + (20u << 20) <= base_free, "cycle %d: the model takes no device memory",
                  c);
        wm_model_release(m);
        CHECK_EQ(cudaMemGetInfo(&now_free, &total), cudaSuccess);
        /* Device memory comes in 2 MiB pages; a leaked buffer is 5 MiB or more. */
        uint64_t diff = now_free > base_free ? now_free - base_free : base_free - now_free;
        CHECK_MSG(diff <= (2u << 20), "cycle %d: device free %zu, baseline %zu", c, now_free,
                  base_free);
        check_nothing_held(path);
    }
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
}

/* For a case that needs a GPU (skipped without one): writes a GGUF model of `size` ("4M") with
 * make-model and opens it (which must succeed); *path gets its path. */
static wm_file *open_gpu_model(const char *size, const char **path) {
    NEED_GPU();
    char args[64];
    snprintf(args, sizeof args, "--size %s --format gguf", size);
    *path = wmt_make_model("m.gguf", args);
    return OPEN_OK(*path);
}

/* After release the ring is no longer registered (and the caller's last error is clean). */
WM_TEST(ring_unregistered_after_release) {
    const char *path;
    wm_file *f = open_gpu_model("4M", &path);
    wm_error err;
    wm_model *m;
    wm_load_options o = cuda_opts(WM_MODE_HEAP);
    o.threads = 1;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_OK);
    void *ring = wm__cuda_test_last_ring();
    CHECK(ring != NULL);
    wm_model_release(m);
    CHECK_EQ(cudaGetLastError(), cudaSuccess);
    CHECK_EQ(cudaHostUnregister(ring), cudaErrorHostMemoryNotRegistered);
    (void)cudaGetLastError();
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
}

static int cancel_at_first(void *user, uint64_t done, uint64_t total) {
    (void)user;
    (void)total;
    return done > 0;
}

WM_TEST(cancel_holds_nothing) {
    const char *path;
    wm_file *f = open_gpu_model("8M", &path);
    wm_error err;
    wm_model *m;
    for (int reg = 0; reg < 2; reg++) {
        wm_load_options o = cuda_opts(reg ? WM_MODE_MMAP : WM_MODE_HEAP);
        cuda_o.registered = reg;
        cuda_o.pinned_budget = (uint64_t)2 << 20;
        o.progress = cancel_at_first;
        CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_ECANCELED);
        CHECK(m == NULL);
        check_nothing_held(path);
    }
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
}

/* Descriptors of this process that name `path` and were opened with O_DIRECT (fdinfo flags). */
static int direct_fds_of(const char *path) {
    char want[PATH_MAX], link[PATH_MAX], name[300];
    if (!realpath(path, want)) return -1;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        snprintf(name, sizeof name, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(name, link, sizeof link - 1);
        if (len <= 0) continue;
        link[len] = 0;
        if (strcmp(link, want)) continue;
        snprintf(name, sizeof name, "/proc/self/fdinfo/%s", e->d_name);
        FILE *f = fopen(name, "r");
        unsigned flags = 0;
        char line[128];
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "flags: %o", &flags) == 1) break;
        if (f) fclose(f);
        n += (flags & O_DIRECT) != 0;
    }
    closedir(d);
    return n;
}

typedef struct direct_seen {
    const char *path;
    int most; /* the most O_DIRECT descriptors of the file seen during the load */
} direct_seen;

static int note_direct(void *user, uint64_t done, uint64_t total) {
    direct_seen *s = user;
    (void)done;
    (void)total;
    int n = direct_fds_of(s->path);
    if (n > s->most) s->most = n;
    return 0;
}

typedef struct cut {
    const char *path;
    bool done;
} cut;

/* Progress callback: cuts the file 5000 bytes short, once. */
static int cut_short(void *user, uint64_t done, uint64_t total) {
    cut *c = user;
    struct stat st;
    (void)done;
    (void)total;
    if (!c->done && stat(c->path, &st) == 0 && truncate(c->path, st.st_size - 5000) == 0)
        c->done = true;
    return 0;
}

/* direct_io: the readers (and, with one thread, the loading thread) read through an O_DIRECT
 * descriptor of the file where its file system allows one, deliver the file's bytes (windows
 * start and end off the 4 KiB grid: safetensors data has alignment 1), and close it with the
 * load; a failed reopen (injected) falls back to buffered reads; a file cut short after open is
 * refused with WM_EFORMAT holding nothing. */
WM_TEST(direct_io) {
    NEED_GPU();
    const char *path = wmt_make_model("m.safetensors", "--size 12M --format safetensors");
    int probe = open(path, O_RDONLY | O_DIRECT);
    bool supported = probe >= 0;
    if (probe >= 0) close(probe);
    for (unsigned threads = 1; threads <= 3; threads += 2) {
        wm_load_options o = cuda_opts(WM_MODE_HEAP);
        cuda_o.direct_io = 1;
        o.threads = threads;
        cuda_o.pinned_budget = (uint64_t)6 << 20;
        direct_seen seen = {path, 0};
        o.progress = note_direct;
        o.progress_user = &seen;
        load_compare(path, o);
        CHECK_MSG(seen.most == (supported ? 1 : 0), "%d O_DIRECT descriptors during the load (%s)",
                  seen.most, supported ? "supported" : "unsupported here");
        CHECK_EQ(direct_fds_of(path), 0);
        /* The reopen failed: buffered reads, same bytes. */
        wm_file *f = OPEN_OK(path);
        wm_error err;
        wm_model *m = NULL;
        seen.most = 0;
        wm__fault_arm(WM_OS_OPEN, 1, EINVAL);
        wm_status st = wm_model_load(f, &o, &m, &err);
        unsigned long long hit = wm__fault_injected();
        wm__fault_reset();
        CHECK_MSG(st == WM_OK, "load: %s", err.msg);
        CHECK_MSG(hit == 1, "the load made no reopen to fail");
        CHECK_EQ(seen.most, 0);
        check_bytes(m);
        wm_model_release(m);
        wm_file_close(f);
    }
    /* Cut short during the load (after the first window; the loading thread reads the rest
     * in order): the direct read of the last window comes back short. Refused, nothing held. */
    wm_file *f = OPEN_OK(path);
    wm_error err;
    wm_model *m;
    wm_load_options o = cuda_opts(WM_MODE_HEAP);
    cuda_o.direct_io = 1;
    o.threads = 1;
    cuda_o.pinned_budget = (uint64_t)2 << 20;
    cut c = {path, false};
    o.progress = cut_short;
    o.progress_user = &c;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EFORMAT);
    CHECK(m == NULL);
    CHECK(c.done);
    CHECK_MSG_HAS(err, "ends");
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
    CHECK_EQ(direct_fds_of(path), 0);
}

/* ---- cold and warm (the reading engine, src/read.c, on the staged path) ---- */

#define WARM_OFF WMT_WARM_OFF
#define WARM_LEN WMT_WARM_LEN

/* Tensor bytes of f inside [WARM_OFF, WARM_OFF + len). */
static uint64_t warm_bytes(const wm_file *f, uint64_t len) {
    uint64_t in = 0;
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        uint64_t a = t.offset > WARM_OFF ? t.offset : WARM_OFF;
        uint64_t b = t.offset + t.nbytes < WARM_OFF + len ? t.offset + t.nbytes : WARM_OFF + len;
        in += b > a ? b - a : 0;
    }
    return in;
}

/* By default the staged readers read the windows that are not in the page cache with O_DIRECT
 * into the ring's slots, and the cached one buffered: the model's counts by route are exactly
 * the tensor bytes outside and inside the warm range, the device holds the file's bytes, and
 * the cold pages are still out of the page cache afterwards. With 1 thread (the loading thread
 * fills the slots) and 3 readers; the warm range ending on a window's edge (4 MiB windows), then
 * 2 MiB into one, so that a window's cold run starts past its first block and lands in the slot
 * after the window's start (under UBSan the slot's place was once formed by subtracting a
 * wrapped offset: src/read/reader.c, read_direct). */
WM_TEST(cold_direct_warm_buffered) {
    NEED_GPU();
    const char *path = wmt_cold_file();
    for (int run = 0; run < 4; run++) {
        unsigned threads = run % 2 ? 3 : 1;
        uint64_t warm_len = run < 2 ? WARM_LEN : WARM_LEN + ((uint64_t)2 << 20);
        wm_file *f = OPEN_OK(path);
        uint64_t warm = warm_bytes(f, warm_len), total = wm_file_tensor_bytes(f);
        uint64_t size = wm_file_size(f);
        wmt_make_cold(path, WARM_OFF, warm_len);
        wm_load_options o = cuda_opts(WM_MODE_HEAP);
        o.threads = threads;
        wm_model *m = NULL;
        wm_error err;
        wm_status st = wm_model_load(f, &o, &m, &err);
        CHECK_MSG(st == WM_OK, "load: %s", err.msg);
        wm_model_stats s = WM_MODEL_STATS_INIT;
        wm_model_stats_get(m, &s);
        uint64_t still = wmt_cached_bytes(path, WARM_OFF, warm_len);
        if (s.read_buffered != warm && still < warm_len) {
            /* the kernel let warm pages go between the warming and their read (a host short of
             * memory: a direct read then does not bring them back), which the routes follow:
             * not this test's to judge (once in about 185 runs on a loaded 2-core VM) */
            static char why[128];
            snprintf(why, sizeof why, "the page cache let %llu of the %llu warm bytes go",
                     (unsigned long long)(warm_len - still), (unsigned long long)warm_len);
            wm_model_release(m);
            wm_file_close(f);
            WM_SKIP(why);
        }
        CHECK_MSG(s.read_buffered == warm && s.read_direct == total - warm,
                  "%u thread(s), %llu bytes warm: %llu read buffered, %llu direct (%llu warm)",
                  threads, (unsigned long long)warm_len, (unsigned long long)s.read_buffered,
                  (unsigned long long)s.read_direct, (unsigned long long)warm);
        CHECK_EQ(wmt_cached_bytes(path, 0, WARM_OFF), 0);
        CHECK_EQ(wmt_cached_bytes(path, WARM_OFF + warm_len, size - WARM_OFF - warm_len), 0);
        check_bytes(m); /* reads the file itself: after the page cache was looked at */
        wm_model_release(m);
        wm_file_close(f);
        CHECK_LEDGER_EMPTY();
    }
}

static void cold_check(void *user, const wmt_fault_run *r) {
    (void)user;
    CHECK_MSG(r->st == WM_EIO, "read %llu of %llu: %s: %s", (unsigned long long)r->k,
              (unsigned long long)r->n, wm_status_name(r->st), r->err->msg);
    CHECK_EQ(cudaGetLastError(), cudaSuccess);
}

/* Every read of a half-cold staged load failed in turn (direct and buffered): each load is
 * refused with WM_EIO and holds nothing (ledger, descriptors, O_DIRECT ones included, mappings,
 * no CUDA error left). */
WM_TEST(cold_read_fails_midway) {
    NEED_GPU();
    const char *path = wmt_cold_file();
    wm_error init_err;
    CHECK_STATUS(wm_backend_init(WM_BACKEND_CUDA, 0, &init_err), WM_OK);
    wm_load_options o = cuda_opts(WM_MODE_HEAP);
    o.threads = 3;
    wmt_cold_run c = {.l = {.f = OPEN_OK(path), .o = o, .use = check_bytes}, .path = path};
    wmt_sweep s = {.what = "cold staged load",
                   .real_cache = 1, /* wmt_cold_load sets the page cache up each run */
                   .run = wmt_cold_load,
                   .check = cold_check,
                   .user = &c,
                   .path = path,
                   .shown = "cold.safetensors",
                   .must_hit = 1};
    wmt_sweep_result res = {0};
    wmt_sweep_count(&s, &res);
    CHECK(res.counts[WM_OS_PREAD] >= 4);
    int eio = EIO;
    wmt_sweep_kind(&s, WM_OS_PREAD, res.counts[WM_OS_PREAD], &eio, 1, &res);
    CHECK_EQ(res.failed, res.counts[WM_OS_PREAD]);
    CHECK_MSG(c.direct_failures > 0, "no direct read failed");
    wm_file_close(c.l.f);
    CHECK_LEDGER_EMPTY();
}

/* Fails the k-th call of `kind` for every k of one load: each failure is clean (a status, a
 * message, nothing held, no mapping, no CUDA error left for the caller), and a load past the
 * last call succeeds. */
static void cuda_fault_check(void *user, const wmt_fault_run *r) {
    (void)user;
    if (r->st == WM_OK) /* Advice is a hint (MADV_HUGEPAGE on the ring): its failure is harmless. */
        CHECK_MSG(!r->injected || r->kind == WM_OS_ADVISE,
                  "%s call %llu of %llu failed but the load succeeded",
                  wm__fault_call_name(r->kind), (unsigned long long)r->k, (unsigned long long)r->n);
    else
        CHECK_MSG(r->st == WM_EDEVICE || r->st == WM_ENOMEM || r->st == WM_EIO,
                  "call %llu: status %s: %s", (unsigned long long)r->k, wm_status_name(r->st),
                  r->err->msg);
    CHECK_EQ(cudaGetLastError(), cudaSuccess);
}

static void sweep(const char *path, wm_load_options o, wm_os_call kind) {
    /* The runtime opens its device files once and keeps them: started first, so the sweep's
     * descriptor count sees only what a load holds. */
    wm_error init_err;
    CHECK_STATUS(wm_backend_init(WM_BACKEND_CUDA, o.device, &init_err), WM_OK);
    wmt_load_run c = {OPEN_OK(path), o, check_bytes};
    /* the ledger before the sweep (the open file's) is what each run must leave */
    wmt_sweep s = {.what = path,
                   .run = wmt_load_release,
                   .check = cuda_fault_check,
                   .user = &c,
                   .path = path,
                   .past_end = 1,
                   .cycle = 1};
    wmt_sweep_result res = {0};
    wmt_sweep_count(&s, &res);
    CHECK(res.counts[kind] > 0);
    static const int eio_eio_enomem[] = {EIO, EIO, ENOMEM}; /* call k: ENOMEM when k % 3 == 0 */
    wmt_sweep_kind(&s, kind, res.counts[kind], eio_eio_enomem, 3, &res);
    wm_file_close(c.f);
    CHECK_LEDGER_EMPTY();
}

static wm_load_options sweep_opts(int registered) {
    wm_load_options o = cuda_opts(registered ? WM_MODE_MMAP : WM_MODE_HEAP);
    cuda_o.registered = registered;
    o.threads = 2;
    cuda_o.pinned_budget = (uint64_t)4 << 20;
    o.max_buffer_size = (uint64_t)2 << 20;
    return o;
}

WM_TEST(fault_sweep_device_staged) {
    NEED_GPU();
    sweep(wmt_make_model("m.gguf", "--size 6M --format gguf"), sweep_opts(0), WM_OS_DEVICE);
}

WM_TEST(fault_sweep_device_registered) {
    NEED_GPU();
    sweep(wmt_make_model("m.safetensors", "--size 6M --format safetensors"), sweep_opts(1),
          WM_OS_DEVICE);
}

/* Every other kind of OS call a load makes (reads, mappings, pages, threads, allocations). */
static void sweep_os(const char *path, wm_load_options o) {
    for (int kind = 0; kind < WM_OS_CALL_COUNT; kind++) {
        if (kind == WM_OS_DEVICE) continue;
        wm_file *f = OPEN_OK(path);
        wm_error err;
        wm_model *m;
        wm__fault_reset();
        CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_OK);
        uint64_t n = wm__fault_count((wm_os_call)kind);
        wm_model_release(m);
        wm_file_close(f);
        if (n) sweep(path, o, (wm_os_call)kind);
    }
}

WM_TEST(fault_sweep_os_staged) {
    NEED_GPU();
    sweep_os(wmt_make_model("m.gguf", "--size 4M --format gguf"), sweep_opts(0));
}

/* ---- the caller's device memory (wm_cuda_options.dst) ---- */

/* A device buffer of the caller's per tensor, as a runtime that placed the tensors itself holds
 * (llama.cpp's CUDA buffers): dst hands out p[i]; `host` (when set) for tensor `bad` instead. */
typedef struct caller_mem {
    void **p;
    size_t n;
    size_t bad;
    void *host;
    bool zero; /* tensor `bad` gets address 0 */
} caller_mem;

static uint64_t caller_dst(void *user, size_t i, const wm_tensor_info *ti) {
    (void)ti;
    caller_mem *cm = user;
    if (i == cm->bad && cm->zero) return 0;
    if (i == cm->bad && cm->host) return (uint64_t)(uintptr_t)cm->host;
    return (uint64_t)(uintptr_t)cm->p[i];
}

/* cudaMalloc'd buffers for every tensor of f, each filled with `fill`. */
static caller_mem caller_alloc(const wm_file *f, unsigned char fill) {
    caller_mem cm = {.n = wm_file_tensor_count(f), .bad = SIZE_MAX};
    cm.p = calloc(cm.n, sizeof *cm.p);
    CHECK(cm.p != NULL);
    for (size_t i = 0; i < cm.n; i++) {
        wm_tensor_info ti;
        CHECK_STATUS(wm_file_tensor(f, i, &ti), WM_OK);
        if (!ti.nbytes) continue;
        CHECK_EQ(cudaMalloc(&cm.p[i], ti.nbytes), cudaSuccess);
        unsigned char *b = malloc(ti.nbytes);
        CHECK(b != NULL);
        memset(b, fill, ti.nbytes);
        CHECK_EQ(cudaMemcpy(cm.p[i], b, ti.nbytes, cudaMemcpyHostToDevice), cudaSuccess);
        free(b);
    }
    return cm;
}

static void caller_free(caller_mem *cm) {
    for (size_t i = 0; i < cm->n; i++)
        if (cm->p[i]) CHECK_EQ(cudaFree(cm->p[i]), cudaSuccess);
    free(cm->p);
}

/* Whether each tensor's caller buffer holds the file's bytes (want_file) or still `fill`. */
static void caller_check(const wm_file *f, const caller_mem *cm, bool want_file,
                         unsigned char fill) {
    for (size_t i = 0; i < cm->n; i++) {
        wm_tensor_info ti;
        CHECK_STATUS(wm_file_tensor(f, i, &ti), WM_OK);
        if (!ti.nbytes) continue;
        unsigned char *got = malloc(ti.nbytes), *want = malloc(ti.nbytes);
        CHECK(got && want);
        CHECK_EQ(cudaMemcpy(got, cm->p[i], ti.nbytes, cudaMemcpyDeviceToHost), cudaSuccess);
        if (want_file) {
            int fd = open(wm_file_shard_path(f, ti.shard), O_RDONLY);
            CHECK(fd >= 0);
            CHECK_EQ(pread(fd, want, ti.nbytes, (off_t)ti.offset), ti.nbytes);
            close(fd);
        } else {
            memset(want, fill, ti.nbytes);
        }
        CHECK_MSG(memcmp(got, want, ti.nbytes) == 0, "tensor %s: the caller's buffer holds %s",
                  ti.name, want_file ? "other bytes than the file's" : "bytes written to it");
        free(got);
        free(want);
    }
}

static wm_load_options caller_opts(caller_mem *cm) {
    wm_load_options o = cuda_opts(WM_MODE_HEAP);
    o.threads = 2;
    cuda_o.pinned_budget = (uint64_t)4 << 20; /* many windows: tensors cross them */
    cuda_o.dst = caller_dst;
    cuda_o.dst_user = cm;
    return o;
}

/* The staged pipeline fills the caller's device memory, tensor by tensor at the address dst
 * gives: the bytes are the file's, the model counts none of it (ledger, device_bytes) and its
 * release frees none of it: the bytes stay where they are after the release. */
WM_TEST(caller_memory_filled_and_kept) {
    NEED_GPU();
    const char *paths[] = {wmt_make_model("m.gguf", "--size 12M --format gguf"),
                           wmt_make_model("m.safetensors", "--size 12M --format safetensors")};
    for (int k = 0; k < 2; k++) {
        wm_file *f = OPEN_OK(paths[k]);
        caller_mem cm = caller_alloc(f, 0x3C);
        wm_load_options o = caller_opts(&cm);
        wm_error err;
        wm_model *m;
        CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_OK);
        wm_ledger l = WM_LEDGER_INIT;
        wm_ledger_get(&l);
        CHECK_EQ(l.cat[WM_LEDGER_DEVICE].current, 0);
        CHECK_EQ(l.cat[WM_LEDGER_PINNED].current, 0);
        wm_model_stats s = WM_MODEL_STATS_INIT;
        wm_model_stats_get(m, &s);
        CHECK_EQ(s.device_bytes, 0);
        CHECK(s.tensor_bytes > 0);
        for (size_t i = 0; i < cm.n; i++)
            if (cm.p[i]) CHECK_EQ(wm_model_tensor_device_ptr(m, i), (uint64_t)(uintptr_t)cm.p[i]);
        check_bytes(m);
        wm_model_release(m);
        check_nothing_held(paths[k]);
        caller_check(f, &cm, true, 0);
        caller_free(&cm);
        wm_file_close(f);
        CHECK_LEDGER_EMPTY();
        CHECK_EQ(wmt_count_file_maps(paths[k]), 0);
    }
}

/* An address that is not device memory of the tensor's device (host memory, pinned or not, or
 * 0) is refused naming the tensor, before anything is read: every caller buffer keeps its
 * bytes and nothing is held. dst is refused with the registered path. */
WM_TEST(caller_memory_refused) {
    NEED_GPU();
    const char *path = wmt_make_model("m.gguf", "--size 4M --format gguf");
    wm_file *f = OPEN_OK(path);
    caller_mem cm = caller_alloc(f, 0x3C);
    cm.bad = cm.n / 2;
    wm_tensor_info bad;
    CHECK_STATUS(wm_file_tensor(f, cm.bad, &bad), WM_OK);
    CHECK(bad.nbytes > 0);
    unsigned char host[64];
    for (int how = 0; how < 2; how++) {
        cm.host = how == 0 ? host : NULL;
        cm.zero = how == 1;
        wm_load_options o = caller_opts(&cm);
        wm_error err;
        wm_model *m = NULL;
        CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
        CHECK(m == NULL);
        CHECK_MSG(strstr(err.msg, bad.name) != NULL, "the error names no tensor: %s", err.msg);
        CHECK_EQ(cudaGetLastError(), cudaSuccess);
        check_nothing_held(path);
    }
    caller_check(f, &cm, false, 0x3C);
    cm.host = NULL;
    cm.zero = false;
    wm_load_options o = caller_opts(&cm);
    o.mode = WM_MODE_MMAP;
    cuda_o.registered = 1;
    wm_error err;
    wm_model *m = NULL;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK(strstr(err.msg, "registered") != NULL);
    caller_free(&cm);
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
}

/* Every CUDA call of a load into the caller's memory failed in turn: a clean error, nothing
 * held, and a load past the last call fills the buffers. */
WM_TEST(fault_sweep_caller_memory) {
    NEED_GPU();
    const char *path = wmt_make_model("m.gguf", "--size 6M --format gguf");
    wm_file *f = OPEN_OK(path);
    caller_mem cm = caller_alloc(f, 0x3C);
    wm_file_close(f); /* the sweep opens the file itself and wants the ledger empty after */
    wm_load_options o = caller_opts(&cm);
    sweep(path, o, WM_OS_DEVICE);
    caller_free(&cm);
    CHECK_LEDGER_EMPTY();
}

/* Staged loads with 4 threads (and registered ones) make every CUDA call on the loading
 * thread: the mock counts a call from any other thread as a violation (and fails it). */
WM_TEST(cuda_calls_only_on_loading_thread) {
#ifndef WM_CUDA_MOCK
    WM_SKIP("the calling thread is checked by the mock runtime (-DWM_CUDA_MOCK=ON)");
#else
    NEED_GPU(); /* the mock's first caller, and so its owner, is this (the main) thread */
    const char *path = wmt_make_model("m.gguf", "--size 12M --format gguf");
    for (int reg = 0; reg < 2; reg++) {
        for (int chunked = 0; chunked < 2; chunked++) {
            wm_file *f = OPEN_OK(path);
            wm_error err;
            wm_model *m = NULL;
            wm_load_options o = cuda_opts(reg ? WM_MODE_MMAP : WM_MODE_HEAP);
            cuda_o.registered = reg;
            o.threads = 4;
            cuda_o.pinned_budget = (uint64_t)8 << 20; /* 4 workers x 2 slots of 1 MiB */
            o.max_buffer_size = chunked ? (uint64_t)5 << 20 : 0;
            unsigned long before = wm__cuda_mock_violations();
            wm_status st = wm_model_load(f, &o, &m, &err);
            CHECK_MSG(wm__cuda_mock_violations() == before,
                      "%lu CUDA calls from threads other than the loading thread (%s path)",
                      wm__cuda_mock_violations() - before, reg ? "registered" : "staged");
            CHECK_MSG(st == WM_OK, "load: %s", err.msg);
            check_bytes(m);
            wm_model_release(m);
            CHECK_EQ(wm__cuda_mock_violations(), before);
            wm_file_close(f);
        }
    }
    CHECK_LEDGER_EMPTY();
#endif
}

WM_TEST(fault_sweep_os_registered) {
    NEED_GPU();
    sweep_os(wmt_make_model("m.gguf", "--size 4M --format gguf"), sweep_opts(1));
}

/* ---- sleep and wake (the pool's WM_POOL_SLEEP, src/backend/staged_load.c) ---- */

/* The ledger's host, pinned and device bytes and regions now. */
typedef struct held {
    uint64_t bytes[WM_LEDGER_COUNT], regions[WM_LEDGER_COUNT];
} held;

static held held_now(void) {
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    held h;
    for (int c = 0; c < WM_LEDGER_COUNT; c++) {
        h.bytes[c] = l.cat[c].current;
        h.regions[c] = l.cat[c].regions;
    }
    return h;
}

static void check_held(const held *want, const char *when) {
    held h = held_now();
    for (int c = 0; c < WM_LEDGER_COUNT; c++)
        CHECK_MSG(h.bytes[c] == want->bytes[c] && h.regions[c] == want->regions[c],
                  "%s: ledger category %d holds %llu bytes in %llu regions, not %llu in %llu", when,
                  c, (unsigned long long)h.bytes[c], (unsigned long long)h.regions[c],
                  (unsigned long long)want->bytes[c], (unsigned long long)want->regions[c]);
}

/* The sleeps' and wakes' pieces in the tests: a little over 1 MiB, so that pieces end inside
 * pages and a bounce slot is not a whole number of pages. */
#define SLEEP_PIECE (((size_t)1 << 20) + 333)

/* The bounce ring of a sleep or a wake (staged_load.c's rule): two slots of a piece (whole
 * pages) per stream, one device, no more than the pieces. */
static uint64_t ring_bytes(uint64_t pieces) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint64_t slots = 2 * WM__SWAP_STREAMS < pieces ? 2 * WM__SWAP_STREAMS : pieces;
    return slots * ((SLEEP_PIECE + page - 1) / page * page);
}

/* A model on the device in chunks of up to 5 MiB (so several buffers, each copied in pieces of
 * SLEEP_PIECE), its device bytes (*dev) and its pieces (*pieces); pinned_whole: the host copy
 * registered whole, no bounce ring. */
static wm_model *sleep_model(const char *path, bool pinned_whole, wm_file **f, uint64_t *dev,
                             uint64_t *pieces) {
    wm__staged_tune_swap(SLEEP_PIECE, 0, pinned_whole, false, false);
    *f = OPEN_OK(path);
    wm_load_options o = cuda_opts(WM_MODE_HEAP);
    o.threads = 2;
    o.max_buffer_size = (uint64_t)5 << 20;
    wm_model *m = NULL;
    wm_error err;
    CHECK_MSG(wm_model_load(*f, &o, &m, &err) == WM_OK, "load: %s", err.msg);
    wm_model_stats s = WM_MODEL_STATS_INIT;
    wm_model_stats_get(m, &s);
    CHECK(s.buffers >= 2);
    *dev = s.device_bytes;
    *pieces = 0; /* each chunk's in turn */
    for (uint32_t c = 0; c < m->n_chunks; c++)
        *pieces += (m->chunks[c].size + SLEEP_PIECE - 1) / SLEEP_PIECE;
    CHECK(*pieces > s.buffers);
    return m;
}

/* The CUDA backend up and a make-model file of `args` for a sleep test. */
static const char *sleep_file(const char *args) {
    wm_error err;
    CHECK_STATUS(wm_backend_init(WM_BACKEND_CUDA, 0, &err), WM_OK);
    return wmt_make_model("m.gguf", args);
}

/* A sleep test's end: the copies' choices back to their defaults, nothing held, no CUDA error
 * left. */
static void sleep_done(void) {
    wm__staged_tune_swap(0, 0, false, false, false);
    CHECK_LEDGER_EMPTY();
    CHECK_EQ(cudaGetLastError(), cudaSuccess);
}

/* The ledger's pinned peak and the mock's longest registration begin again. */
static void pinned_reset(void) {
    wm_ledger_reset_peaks();
#ifdef WM_CUDA_MOCK
    (void)wm__cuda_mock_largest_registration();
#endif
}

/* The most host memory registered at once since pinned_reset (the ledger's pinned peak), and
 * *longest, the longest registration made since (the mock's; on a GPU, the peak). Begins again. */
static uint64_t pinned_peak(uint64_t *longest) {
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    *longest = l.cat[WM_LEDGER_PINNED].peak;
#ifdef WM_CUDA_MOCK
    *longest = wm__cuda_mock_largest_registration();
#endif
    pinned_reset();
    return l.cat[WM_LEDGER_PINNED].peak;
}

/* The ledger's host figure now and its peak since the last reset. */
static uint64_t host_now(uint64_t *peak) {
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    *peak = l.host.peak;
    return l.host.current;
}

/* Sleep and wake, twice, through the bounce ring: asleep, the device's bytes are back and the
 * host copy holds exactly them, in one page allocation that is never registered (heap, pinned
 * 0); during each, the most registered at once is the ring (four slots of a piece: a third of
 * this 12 MiB model), registered in one call (the mock's longest registration), and the host
 * peak no more than the host copy and what wm__model_swap_extra said (the pool counts it);
 * awake, the device holds the file's bytes again and the host copy is gone; each part of each
 * is timed. */
WM_TEST(sleep_and_wake_bytes_and_ledger) {
    NEED_GPU();
    wm_error err;
    const char *path = sleep_file("--size 12M --format gguf");
    wm_file *f;
    uint64_t dev, pieces;
    wm_model *m = sleep_model(path, false, &f, &dev, &pieces);
    held awake = held_now(), asleep = awake;
    CHECK_EQ(awake.bytes[WM_LEDGER_DEVICE], dev);
    CHECK_EQ(awake.bytes[WM_LEDGER_PINNED], 0);
    asleep.bytes[WM_LEDGER_DEVICE] = 0;
    asleep.regions[WM_LEDGER_DEVICE] = 0;
    asleep.bytes[WM_LEDGER_HEAP] += dev; /* the host copy, to the byte, not pinned */
    asleep.regions[WM_LEDGER_HEAP] += 1; /* one page allocation */
    uint64_t ring = ring_bytes(pieces);
    CHECK(ring < dev / 2);
    for (int cycle = 0; cycle < 2; cycle++) {
        pinned_reset();
        uint64_t extra = wm__model_swap_extra(m), hpeak, host = host_now(&hpeak);
        CHECK(extra >= ring);
        CHECK_MSG(wm__model_sleep(m, &err) == WM_OK, "sleep: %s", err.msg);
        check_held(&asleep, "asleep");
        (void)host_now(&hpeak);
        CHECK_MSG(hpeak <= host + dev + extra,
                  "a sleep's host peak %llu is above %llu held + %llu copy + %llu extra",
                  (unsigned long long)hpeak, (unsigned long long)host, (unsigned long long)dev,
                  (unsigned long long)extra);
        uint64_t longest, peak = pinned_peak(&longest);
        CHECK_MSG(peak == ring && longest == ring,
                  "a sleep registered %llu bytes at once (%llu in one call), not the ring's %llu",
                  (unsigned long long)peak, (unsigned long long)longest, (unsigned long long)ring);
        CHECK_EQ(wm_model_tensor_device_ptr(m, 0), 0);
        CHECK_EQ(m->slept.bytes, dev);
        CHECK_EQ(m->slept.pieces, pieces);
        CHECK(m->slept.total > 0 && m->slept.copy > 0 && m->slept.host_register > 0);
        CHECK(m->slept.host_alloc > 0 && m->slept.host_unregister > 0);
        CHECK_STATUS(wm__model_sleep(m, &err), WM_EINVAL); /* asleep already */
        extra = wm__model_swap_extra(m);
        host = host_now(&hpeak);
        CHECK(extra >= ring);
        CHECK_MSG(wm__model_wake(m, &err) == WM_OK, "wake: %s", err.msg);
        (void)host_now(&hpeak);
        CHECK_MSG(hpeak <= host + extra, "a wake's host peak %llu is above %llu held + %llu extra",
                  (unsigned long long)hpeak, (unsigned long long)host, (unsigned long long)extra);
        peak = pinned_peak(&longest);
        CHECK_MSG(peak == ring && longest == ring,
                  "a wake registered %llu bytes at once (%llu in one call), not the ring's %llu",
                  (unsigned long long)peak, (unsigned long long)longest, (unsigned long long)ring);
        check_held(&awake, "awake");
        CHECK_EQ(m->woke.bytes, dev);
        CHECK_EQ(m->woke.pieces, pieces);
        CHECK(m->woke.total > 0 && m->woke.copy > 0 && m->woke.device_alloc > 0);
        CHECK(m->woke.host_register > 0 && m->woke.host_unregister > 0 && m->woke.host_free > 0);
        check_bytes(m);
    }
    CHECK_STATUS(wm__model_wake(m, &err), WM_EINVAL); /* awake already */
    /* released asleep: the host copy goes with the model */
    CHECK_MSG(wm__model_sleep(m, &err) == WM_OK, "sleep: %s", err.msg);
    wm_model_release(m);
    wm_file_close(f);
    sleep_done();
}

/* The pinned_whole choice (bench/gpu sleep --pinned-whole): asleep, the host copy is registered
 * whole (pinned to the byte, one registration), and woken from itself even with the choice
 * changed back meanwhile; woken, the file's bytes and nothing held. And the bounce ring with
 * one thread (no worker), so that the ring's copies are the loading thread's alone. */
WM_TEST(sleep_and_wake_pinned_whole_and_one_thread) {
    NEED_GPU();
    wm_error err;
    const char *path = sleep_file("--size 8M --format gguf");
    for (int whole = 0; whole < 2; whole++) {
        wm_file *f;
        uint64_t dev, pieces;
        wm_model *m = sleep_model(path, whole, &f, &dev, &pieces);
        m->opts.threads = 1;
        held awake = held_now(), asleep = awake;
        asleep.bytes[WM_LEDGER_DEVICE] = asleep.regions[WM_LEDGER_DEVICE] = 0;
        asleep.bytes[WM_LEDGER_HEAP] += dev;
        asleep.regions[WM_LEDGER_HEAP] += 1;
        asleep.bytes[WM_LEDGER_PINNED] = whole ? dev : 0;
        asleep.regions[WM_LEDGER_PINNED] = whole ? 1 : 0;
        pinned_reset();
        CHECK_MSG(wm__model_sleep(m, &err) == WM_OK, "sleep: %s", err.msg);
        check_held(&asleep, whole ? "asleep, pinned whole" : "asleep, one thread");
        uint64_t longest, want = whole ? dev : ring_bytes(pieces);
        CHECK_EQ(pinned_peak(&longest), want);
        CHECK_EQ(longest, want);
        /* the choice back to the ring: a host copy pinned whole still wakes from itself */
        wm__staged_tune_swap(SLEEP_PIECE, 0, false, false, false);
        CHECK_MSG(wm__model_wake(m, &err) == WM_OK, "wake: %s", err.msg);
        CHECK_EQ(pinned_peak(&longest), want); /* whole: registered since the sleep */
#ifdef WM_CUDA_MOCK
        CHECK_EQ(longest, whole ? 0 : want);
#endif
        check_held(&awake, "awake");
        CHECK_EQ(m->woke.bytes, dev);
        check_bytes(m);
        wm_model_release(m);
        wm_file_close(f);
    }
    sleep_done();
}

/* The bounce ring's workers do the copying between the host copy and the ring: with the loading
 * thread kept out of it (wm__staged_swap_loader_waits), every grain of a sleep and of a wake is a
 * worker's, and the bytes are the file's after the wake; with one thread (no worker), every
 * grain is the loading thread's. With the workers not started, the first case fails (0 grains of
 * theirs: the loading thread copies all where none exists). */
WM_TEST(sleep_and_wake_workers_copy) {
    NEED_GPU();
    wm_error err;
    const char *path = sleep_file("--size 8M --format gguf");
    for (unsigned threads = 2; threads >= 1; threads--) {
        wm_file *f;
        uint64_t dev, pieces;
        wm_model *m = sleep_model(path, false, &f, &dev, &pieces);
        m->opts.threads = threads;
        wm__staged_swap_loader_waits = true;
        CHECK_MSG(wm__model_sleep(m, &err) == WM_OK, "sleep: %s", err.msg);
        CHECK_MSG(wm__model_wake(m, &err) == WM_OK, "wake: %s", err.msg);
        wm__staged_swap_loader_waits = false;
        const wm__swap_times *ts[2] = {&m->slept, &m->woke};
        for (int k = 0; k < 2; k++) {
            CHECK(ts[k]->grains >= ts[k]->pieces && ts[k]->pieces > 1);
            CHECK_MSG(ts[k]->grains_by_workers == (threads > 1 ? ts[k]->grains : 0),
                      "%s, %u threads: %u of %u grains by the workers", k ? "wake" : "sleep",
                      threads, ts[k]->grains_by_workers, ts[k]->grains);
        }
        check_bytes(m);
        wm_model_release(m);
        wm_file_close(f);
    }
    sleep_done();
}

/* Fails the k-th call of `kind` in a sleep (wake: a wake) for every k: a failed sleep leaves
 * the model awake with its bytes, a failed wake leaves it asleep, and either holds exactly what
 * it held before (the ledger, category by category); only a failed hint (advice) may succeed.
 * Returns the calls of that kind the clean run made. */
static uint64_t sweep_swap(wm_model *m, bool wake, wm_os_call kind) {
    wm_error err;
    wm__fault_reset();
    CHECK_STATUS(wake ? wm__model_wake(m, &err) : wm__model_sleep(m, &err), WM_OK);
    uint64_t n = wm__fault_count(kind);
    wm__fault_reset();
    CHECK_STATUS(wake ? wm__model_sleep(m, &err) : wm__model_wake(m, &err), WM_OK);
    held before = held_now();
    for (uint64_t k = 1; k <= n; k++) {
        wm__fault_reset();
        wm__fault_arm(kind, k, k % 3 ? EIO : ENOMEM);
        wm_status st = wake ? wm__model_wake(m, &err) : wm__model_sleep(m, &err);
        uint64_t injected = wm__fault_injected();
        wm__fault_reset();
        CHECK_MSG(injected == 1, "%s call %llu of %llu was not met", wm__fault_call_name(kind),
                  (unsigned long long)k, (unsigned long long)n);
        CHECK_EQ(cudaGetLastError(), cudaSuccess);
        if (st == WM_OK) { /* a hint's failure (advice, a prefaulting thread): done anyway */
            CHECK_MSG(kind == WM_OS_ADVISE || kind == WM_OS_THREAD,
                      "%s: %s call %llu failed but it succeeded", wake ? "wake" : "sleep",
                      wm__fault_call_name(kind), (unsigned long long)k);
            CHECK_STATUS(wake ? wm__model_sleep(m, &err) : wm__model_wake(m, &err), WM_OK);
            continue;
        }
        CHECK_MSG(st == WM_EDEVICE || st == WM_ENOMEM, "%s call %llu: %s: %s",
                  wm__fault_call_name(kind), (unsigned long long)k, wm_status_name(st), err.msg);
        CHECK_EQ(wm__model_asleep(m), wake);
        check_held(&before, wake ? "after a failed wake" : "after a failed sleep");
        if (!wake) check_bytes(m);
    }
    return n;
}

/* Every call of a sleep and of a wake, of every kind (CUDA, pages, allocations, advice,
 * threads), failed in turn, through the bounce ring and with the host copy pinned whole: the
 * model is as it was and nothing more is held; then it wakes with the file's bytes and its
 * release leaves nothing. */
WM_TEST(fault_sweep_sleep_and_wake) {
    NEED_GPU();
    wm_error err;
    const char *path = sleep_file("--size 6M --format gguf");
    for (int whole = 0; whole < 2; whole++) {
        wm_file *f;
        uint64_t dev, pieces;
        wm_model *m = sleep_model(path, whole, &f, &dev, &pieces);
        uint64_t device_calls = 0;
        for (int kind = 0; kind < WM_OS_CALL_COUNT; kind++) {
            uint64_t n = sweep_swap(m, false, (wm_os_call)kind);
            if (kind == WM_OS_DEVICE) device_calls = n;
        }
        /* a sleep: register, per device two streams and two events, every piece, and at least
         * two records and two waits (the current device is set once) */
        CHECK_MSG(device_calls >= 1 + 4 + pieces + 4, "%llu CUDA calls in a sleep",
                  (unsigned long long)device_calls);
        CHECK_MSG(wm__model_sleep(m, &err) == WM_OK, "sleep: %s", err.msg);
        for (int kind = 0; kind < WM_OS_CALL_COUNT; kind++)
            (void)sweep_swap(m, true, (wm_os_call)kind);
        CHECK_MSG(wm__model_wake(m, &err) == WM_OK, "wake: %s", err.msg);
        check_bytes(m);
        wm_model_release(m);
        wm_file_close(f);
    }
    wm__staged_tune_swap(0, 0, false, false, false);
    CHECK_LEDGER_EMPTY();
}
#endif /* WM_HAVE_CUDA */
