/*
 * wmtest.h: the test runner's interface. Each tests/test_*.c holds cases written as
 *
 *     WM_TEST(name) { ... CHECK(x); CHECK_STATUS(call, WM_OK); ... }
 *
 * CMake registers one ctest entry per case (it reads the WM_TEST lines), each run in its own
 * process with a timeout. After every case the runner asserts that the library holds nothing:
 * every ledger `current` and region count is 0. A case that cannot run here calls
 * WM_SKIP("why") (exit 77, reported by ctest as skipped).
 */
#ifndef WM_TEST_H
#define WM_TEST_H

#include "os/os.h" /* wm_os_call, for the fault sweeps */
#include "weightmap.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* WMT_ASAN is 1 in AddressSanitizer builds (gcc and clang), for the few figures it distorts. */
#if defined(__SANITIZE_ADDRESS__)
#define WMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WMT_ASAN 1
#endif
#endif
#ifndef WMT_ASAN
#define WMT_ASAN 0
#endif

typedef void (*wmt_fn)(void);
void wmt_register(const char *name, wmt_fn fn);

#define WM_TEST(name)                                                                              \
    static void wmt_case_##name(void);                                                             \
    __attribute__((constructor)) static void wmt_reg_##name(void) {                                \
        wmt_register(#name, wmt_case_##name);                                                      \
    }                                                                                              \
    static void wmt_case_##name(void)

void wmt_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
void wmt_skip(const char *why) __attribute__((noreturn));

#define WM_SKIP(why) wmt_skip(why)
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) wmt_fail(__FILE__, __LINE__, "CHECK(%s) failed", #c);                            \
    } while (0)
#define CHECK_MSG(c, ...)                                                                          \
    do {                                                                                           \
        if (!(c)) wmt_fail(__FILE__, __LINE__, __VA_ARGS__);                                       \
    } while (0)
#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        uint64_t wmt_a = (uint64_t)(a), wmt_b = (uint64_t)(b);                                     \
        if (wmt_a != wmt_b)                                                                        \
            wmt_fail(__FILE__, __LINE__, "%s == %s: %" PRIu64 " != %" PRIu64, #a, #b, wmt_a,       \
                     wmt_b);                                                                       \
    } while (0)
#define CHECK_STATUS(expr, want)                                                                   \
    do {                                                                                           \
        wm_status wmt_s = (expr);                                                                  \
        if (wmt_s != (want))                                                                       \
            wmt_fail(__FILE__, __LINE__, "%s returned %s, want %s", #expr, wm_status_name(wmt_s),  \
                     wm_status_name(want));                                                        \
    } while (0)
/* err.msg contains `needle` */
#define CHECK_MSG_HAS(err, needle)                                                                 \
    do {                                                                                           \
        if (!strstr((err).msg, (needle)))                                                          \
            wmt_fail(__FILE__, __LINE__, "message \"%s\" lacks \"%s\"", (err).msg, (needle));      \
    } while (0)

/* The ledger holds nothing (bytes and regions), or the case fails with the figures. */
void wmt_check_ledger_empty(const char *file, int line);
#define CHECK_LEDGER_EMPTY() wmt_check_ledger_empty(__FILE__, __LINE__)

/* Absolute path of a fixture: wmt_fixture("gguf/stories260K.gguf"). Static buffer. */
const char *wmt_fixture(const char *rel);
/* The folder of llama.cpp's prebuilt libraries (libggml-base.so, libllama...): $WM_PEER_DIR, else
 * where scripts/peer.sh installs the npm peer (tests/oracle/oracle.h). */
const char *wmt_peer_dir(void);
/* The path of the peer's library `name` in wmt_peer_dir() (static buffer); the case is skipped
 * (WM_SKIP) when it cannot be read there. */
const char *wmt_peer_lib(const char *name);
/* The CPU variants the peer ships (libggml-cpu-NAME.so in wmt_peer_dir(): "x64", "haswell",
 * "zen4"...), sorted, up to cap; their count. */
int wmt_peer_cpu_variants(char (*names)[32], int cap);
/* A folder (in the case's temporary directory) of links to the peer's libraries with exactly one
 * CPU variant, libggml-cpu-VARIANT.so, so that ggml_backend_load_all_from_path(folder) loads that
 * one, or no CPU backend where this CPU cannot run it: a test pins the variant ("x64" runs on
 * every x86-64) instead of taking the one this machine's CPU picks. Static buffer. */
const char *wmt_peer_variant_dir(const char *variant);
/* A fresh per-case temporary directory (removed by the runner after the case). */
const char *wmt_tmpdir(void);
/* Path inside the temporary directory. Returns a static rotating buffer (8 slots). */
const char *wmt_tmp(const char *name);
/* Writes bytes to a file; aborts the case on error. */
void wmt_write_file(const char *path, const void *data, size_t len);
/* Reads a whole file into malloc'd memory; *len gets its size. */
void *wmt_read_file(const char *path, size_t *len);
/* Copies the file `from` to `to` (created or replaced); returns its size. */
size_t wmt_copy_file(const char *from, const char *to);
/* Number of regions of this process that map `path` (matched by device and inode, from
 * /proc/self/maps; Darwin: proc_pidinfo's regions). wmtest_linux.c or wmtest_darwin.c, with
 * wmt_count_fds and wmt_rchar. */
int wmt_count_file_maps(const char *path);
/* The same, and in *not_shared_ro (NULL: not asked) how many of them are not a shared read-only
 * mapping (Linux: not "r--s"; Darwin: writable, or private or copy-on-write). */
int wmt_count_file_maps_of(const char *path, int *not_shared_ro);

/* Opens `path`, which must succeed (else the case fails, naming the file and the status); the
 * caller closes the file. */
#define OPEN_OK(path) wmt_open_ok(__FILE__, __LINE__, (path))
wm_file *wmt_open_ok(const char *file, int line, const char *path);
/* A way to open a file: wm_file_open, wm_file_open_set, or a case's own. */
typedef wm_status (*wmt_opener)(const char *path, wm_file **out, wm_error *err);
/* The same through wm_file_open_set (the whole set of a shard or split part). */
#define OPEN_SET_OK(path) wmt_open_set_ok(__FILE__, __LINE__, (path))
wm_file *wmt_open_set_ok(const char *file, int line, const char *path);

/* Writes a model with the CLI's make-model (`args`: its options) into the case's temporary
 * folder as `name`; returns its path (wmt_tmp's buffer). */
const char *wmt_make_model(const char *name, const char *args);

/* The tensor named `name` of f (found by wm_file_find_tensor); the case fails when there is none.
 */
wm_tensor_info wmt_tensor_named(const wm_file *f, const char *name);

/* Runs a shell command line: returns its exit code (-1 when it did not exit), its stdout in *out
 * (malloc'd, NUL-terminated: the caller frees it); its stderr goes to wmt_tmp("stderr.txt"), which
 * wmt_stderr_text() reads back (malloc'd, NUL-terminated). */
int wmt_run(const char *cmdline, char **out);
char *wmt_stderr_text(void);
/* Runs the CLI (WM_CLI) with `args`, its stdout and stderr together in out (at most cap - 1
 * bytes, NUL-terminated); returns its exit code, -1 when it did not exit. */
int wmt_cli(const char *args, char *out, size_t cap);

/* Test processes that ctest runs at once share the GPU: a case that measures the device's free
 * memory holds this lock (a file lock on /tmp/weightmap-test-cuda.lock) exclusively, every
 * other GPU case holds it shared, until it exits. */
void wmt_gpu_lock(bool exclusive);

/* Open descriptors of this process (entries of /proc/self/fd; Darwin: PROC_PIDLISTFDS): compare
 * two counts to see whether a call left one open. */
int wmt_count_fds(void);

/* ---- the page cache (cold and warm files, for the reading engine's tests) ----
 * Measured by the test itself, not through the library: mincore over the test's own mapping. */

/* A safetensors file of n U8 tensors "t0", "t1", ... of sizes[i] bytes, back to back (no
 * alignment: the data starts right after the header, so tensors begin off any 4 KiB grid); byte
 * k of the data is wmt_cold_byte(k). Returns its path (wmt_tmp's buffer). */
const char *wmt_write_u8_tensors(const char *name, const uint64_t *sizes, size_t n);
#define wmt_cold_byte(k) ((unsigned char)(((k)*2654435761u) >> 13))
/* Writes the file back and drops it from the page cache (fdatasync, POSIX_FADV_DONTNEED); then
 * warms [warm_off, warm_off + warm_len) of it (0, 0: nothing) with reads that start no
 * readahead (POSIX_FADV_RANDOM). Skips the case (WM_SKIP) where this file system cannot drop
 * its pages or has no O_DIRECT, or where the pages are not exactly as asked afterwards.
 * wmtest_linux.c; Darwin has no user call that drops a file's cached pages (purge(8) is root's
 * and whole-system): the case is skipped there. */
void wmt_make_cold(const char *path, uint64_t warm_off, uint64_t warm_len);
/* Bytes of the file's pages over [off, off + len) in the page cache now. */
uint64_t wmt_cached_bytes(const char *path, uint64_t off, uint64_t len);

/* ---- fault sweeps (STYLE.md): count the calls of a scenario, then fail each in turn ----
 *
 * A scenario is one run of what is under test (an open, a load, ...): `run` does it, checks its
 * own out-pointers and, on success, uses and releases what it made; it returns the status and
 * fills *err on failure. The sweep runs it once clean (it must succeed) to count its OS calls and
 * allocations, then again with the k-th call of one kind failed, for each k. After every run,
 * clean or faulted, it requires:
 *   - the ledger as it was before the sweep (every category's bytes and regions: empty unless the
 *     caller holds something across the sweep, such as the open file of a load sweep),
 *   - as many descriptors open as before, and no mapping of `path` (when set);
 * and after a faulted run that failed: a fault was injected, err.code is the status, and the
 * message contains `shown` (when set). With `must_hit`, every faulted run must meet its fault
 * (the scenario is repeatable). `check`, when set, then adds the scenario's own rules on the
 * outcome (which statuses are allowed, ...). */
typedef struct wmt_fault_run {
    wm_os_call kind; /* the kind failed (WM_OS_ANY: the k-th call of any kind) */
    uint64_t k, n;   /* the k-th call failed, of the n the clean run made */
    int errn;        /* with this errno */
    wm_status st;    /* what the scenario returned */
    const wm_error *err;
    uint64_t injected; /* faults the run met */
} wmt_fault_run;
/* A sweep's check (wmt_sweep.check) for calls whose every injected fault must come back as an
 * I/O, memory or device failure (WM_EIO, WM_ENOMEM, WM_EDEVICE), or not at all. */
void wmt_check_io_failure(void *user, const wmt_fault_run *r);

typedef struct wmt_sweep {
    const char *what;                                  /* names the scenario in failure messages */
    wm_status (*run)(void *user, wm_error *err);       /* one run of the scenario */
    void (*check)(void *user, const wmt_fault_run *r); /* NULL: only the common checks */
    void *user;
    const char *path;  /* NULL, or a file no region may map after a run */
    const char *shown; /* NULL, or what every failure's message names */
    int must_hit;      /* every faulted run meets its fault */
    int past_end;      /* also fail call n+1 (none: the scenario must then succeed) */
    int cycle;         /* errs[(k-1) % n_errs] for call k, instead of every errno for every k */
    int real_cache;    /* route reads by what the page cache really holds; by default a sweep's
                          runs see every range cached (wm__fault_pin_cached), so that each run
                          makes the counted run's calls whatever the last one left cached: set it
                          for a scenario that sets the page cache up itself in every run */
} wmt_sweep;

/* What a sweep saw: the clean run's calls of each kind (WM_OS_ANY: all), the faulted runs, those
 * that failed, and those that failed with WM_ENOMEM. */
typedef struct wmt_sweep_result {
    uint64_t counts[WM_OS_CALL_COUNT + 1];
    uint64_t runs, failed, enomem;
} wmt_sweep_result;

/* Runs the scenario clean, checks it, and fills res->counts (the runs so far are kept). */
void wmt_sweep_count(const wmt_sweep *s, wmt_sweep_result *res);
/* Fails the k-th call of `kind` for k in 1..n (n+1 with past_end), each time with every errno of
 * errs[0..n_errs) (with `cycle`, call k with errs[(k-1) % n_errs]), runs the scenario and checks
 * it; adds to res's runs, failed and enomem. The fault table is reset afterwards. */
void wmt_sweep_kind(const wmt_sweep *s, wm_os_call kind, uint64_t n, const int *errs, int n_errs,
                    wmt_sweep_result *res);
/* Both: counts, then fails every call of any kind (WM_OS_ANY) with each errno of errs. */
void wmt_sweep_any(const wmt_sweep *s, const int *errs, int n_errs, wmt_sweep_result *res);
/* The usual scenario: wm_file_open(user, a path), then close; a failure leaves *out NULL. */
wm_status wmt_open_close(void *path, wm_error *err);
/* The same with `open` instead of wm_file_open. */
wm_status wmt_open_close_by(wmt_opener open, const char *path, wm_error *err);

/* The load scenario: loads `f` with `o`; on success `use` (when set) reads the model, which is
 * then released; a failed load must leave the out-pointer NULL. `user` of wmt_sweep is the
 * wmt_load_run. */
typedef struct wmt_load_run {
    wm_file *f;
    wm_load_options o;
    void (*use)(wm_model *m);
} wmt_load_run;
wm_status wmt_load_release(void *load_run, wm_error *err);

/* The half-cold scenario of the cold-read tests (test_cold.c on the heap path, test_cuda.c on the
 * staged one): WMT_COLD_N u8 tensors of WMT_COLD_TENSOR bytes each (off the 4 KiB grid, one job
 * each) in "cold.safetensors", of which [WMT_WARM_OFF, +WMT_WARM_LEN) is left in the page cache. */
#define WMT_COLD_N 7
#define WMT_COLD_TENSOR ((uint64_t)(3 << 20) + 12345)
#define WMT_WARM_OFF ((uint64_t)4 << 20)
#define WMT_WARM_LEN ((uint64_t)8 << 20)
const char *wmt_cold_file(void);
/* A sweep's scenario over that file (wmt_sweep.user, with real_cache): each run makes the file
 * half cold again, then loads and releases `l`; a failure whose message says the read was direct
 * ("(direct)") is counted. */
typedef struct wmt_cold_run {
    wmt_load_run l;
    const char *path;
    unsigned direct_failures;
} wmt_cold_run;
wm_status wmt_cold_load(void *cold_run, wm_error *err);

/* A `check` for wmt_sweep: a run that failed returned WM_EIO or WM_ENOMEM (what an OS failure
 * of an open or a load may give). */
void wmt_check_io_status(void *user, const wmt_fault_run *r);

/* The fault sweep of an open (wm_file_open, then close): every call of any kind failed in turn,
 * first with EIO, then with ENOMEM. Beyond the common checks (wmt_sweep, with `shown`, NULL for
 * none, and no mapping of `path` left): a failure is WM_ENOMEM for ENOMEM, WM_EIO or WM_ENOMEM
 * for EIO, and under EIO exactly the failed allocations give WM_ENOMEM; the open succeeds
 * exactly when the failed call was advice (every open asks some: whether the file is cold, no
 * readahead for its header, src/open/open.c). Returns the clean open's calls. */
uint64_t wmt_open_fault_sweep(const char *path, const char *shown);
/* The same sweep over another way to open (wm_file_open_set, or a function of the case's own
 * that opens a list and ignores `path`; `path` is then a file no region may map afterwards). */
uint64_t wmt_open_fault_sweep_by(wmt_opener open, const char *path, const char *shown);

/* A growable byte buffer for hand-built files. */
typedef struct wmt_buf {
    unsigned char *p;
    size_t len, cap;
} wmt_buf;
void wmt_put(wmt_buf *b, const void *data, size_t n);
void wmt_put_u8(wmt_buf *b, uint8_t v);
void wmt_put_u32(wmt_buf *b, uint32_t v);
void wmt_put_u64(wmt_buf *b, uint64_t v);
void wmt_put_zeros(wmt_buf *b, size_t n);
void wmt_buf_free(wmt_buf *b);

/* Bytes this process has read with read/pread (the kernel's rchar, /proc/self/io); with
 * `and_this_read` plus the read of /proc/self/io itself, so that wmt_rchar(false) -
 * wmt_rchar(true) is exactly what was read between the two calls. Darwin has no such count:
 * the case is skipped there. */
uint64_t wmt_rchar(bool and_this_read);

/* What malloc holds for the process: in_use, the bytes of live blocks (glibc: mallinfo2's
 * uordblks, Darwin: malloc_zone_statistics' size_in_use over every zone); mapped, those of
 * blocks glibc mapped apart (hblkhd; 0 on Darwin, whose in_use counts them). */
typedef struct wmt_malloc {
    size_t in_use, mapped;
} wmt_malloc;
wmt_malloc wmt_malloc_stats(void);

/* The errno's name ("EIO"), or "errno N" for one the table lacks (static storage for those). */
const char *wmt_errno_name(int e);

/* A consumer's loop over the shards of a set: loads the set (opened at `set_path`: its index)
 * with `o` and releases it, then opens shards[0 .. n) each alone (wm_file_open) and loads them
 * all at once with `o`. Together they must hold what the set held, exactly, in the mapping,
 * lock and device categories of the ledger (bytes and regions) and in heap tensor pages, and
 * read what it read (the library's bytes_read exactly; the kernel's rchar within `slack` bytes a
 * load: 0 but on a real CUDA runtime, which reads a few files of its own). Then nothing held. */
void wmt_shards_hold_the_set_once(const char *set_path, const char *const *shards, size_t n,
                                  wm_load_options o, uint64_t slack);

#endif
