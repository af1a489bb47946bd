/*
 * peer.h: what every benchmark shares: llama.cpp's loader opened with dlopen (the peer we
 * measure against), a monotonic clock, percentiles, the process's memory figures and paths.
 *
 * The peer is the prebuilt llama.cpp v0.4.0 (commit 5b4ebc5, ggml 0.23.0) from the npm package
 * @node-llama-cpp/linux-x64@3.21.1, installed by scripts/peer.sh (into the npm cache, linked from
 * bench/peers/). No llama.cpp header ships with it, so the few types and prototypes used are
 * declared here from the public API of that release (ggml/include/gguf.h, include/llama.h).
 */
#ifndef WM_BENCH_PEER_H
#define WM_BENCH_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- llama.cpp's types, mirrored ---- */

struct ggml_context;
struct gguf_context;
struct llama_model;

/* struct gguf_init_params: no_alloc=true and ctx=NULL parse the header only. */
struct bench_gguf_init_params {
    bool no_alloc;
    struct ggml_context **ctx;
};

/* llama_load_mode of this release (it has no use_mmap/use_mlock). */
enum {
    BENCH_LLAMA_LOAD_AUTO = -1,
    BENCH_LLAMA_LOAD_READ = 0, /* read into buffers */
    BENCH_LLAMA_LOAD_MMAP = 1,
    BENCH_LLAMA_LOAD_MLOCK = 2,
    BENCH_LLAMA_LOAD_MMAP_MLOCK = 3,
    BENCH_LLAMA_LOAD_DIRECT_IO = 4
};

/* struct llama_model_params of llama.cpp v0.4.0 (80 bytes). Always start from
 * peer.llama_model_default_params() and change fields, never build one from zero. */
struct bench_llama_model_params {
    void *devices;
    const void *tensor_buft_overrides;
    int32_t n_gpu_layers;
    int32_t split_mode;
    int32_t load_mode; /* BENCH_LLAMA_LOAD_* */
    int32_t lazy_mode;
    int32_t main_gpu;
    const float *tensor_split;
    void *progress_callback;
    void *progress_callback_user_data;
    const void *kv_overrides;
    bool vocab_only, check_tensors, use_extra_bufts, no_host, no_alloc, load_mtp;
};

/* ---- the peer ---- */

typedef struct bench_peer {
    char dir[4096];
    void *base, *ggml, *llama; /* dlopen handles; NULL until opened */
    /* libggml-base.so: the GGUF parser */
    struct gguf_context *(*gguf_init_from_file)(const char *fname, struct bench_gguf_init_params);
    void (*gguf_free)(struct gguf_context *ctx);
    int64_t (*gguf_get_n_tensors)(const struct gguf_context *ctx);
    int64_t (*gguf_get_n_kv)(const struct gguf_context *ctx);
    size_t (*gguf_get_data_offset)(const struct gguf_context *ctx);
    const char *(*ggml_version)(void);
    const char *(*ggml_commit)(void);
    void (*ggml_log_set)(void (*cb)(int level, const char *text, void *user), void *user);
    /* libggml + libllama: the model loader (bench_peer_open_llama) */
    void (*ggml_backend_load_all_from_path)(const char *dir);
    void (*llama_backend_init)(void);
    void (*llama_backend_free)(void);
    struct bench_llama_model_params (*llama_model_default_params)(void);
    struct llama_model *(*llama_model_load_from_file)(const char *path,
                                                      struct bench_llama_model_params params);
    void (*llama_model_free)(struct llama_model *model);
    uint64_t (*llama_model_size)(const struct llama_model *model);
    uint64_t (*llama_model_n_params)(const struct llama_model *model);
    void (*llama_log_set)(void (*cb)(int level, const char *text, void *user), void *user);
} bench_peer;

/* The peer's library folder: $WM_PEER_DIR if set, else the one scripts/peer.sh installs into
 * (tests/oracle/oracle.h: wm_oracle_dir). */
const char *bench_peer_default_dir(void);

/* Opens libggml-base.so from dir (NULL: the default) and fills the gguf_* pointers. Returns 0,
 * or -1 with a message on stderr that says to run scripts/peer.sh. The peer's log is silenced
 * (both openers) unless WM_PEER_LOG=1. */
int bench_peer_open_gguf(bench_peer *p, const char *dir);

/* Also opens libggml and libllama, loads the CPU backends from the same folder
 * (ggml_backend_load_all_from_path) and calls llama_backend_init. Returns 0 or -1. */
int bench_peer_open_llama(bench_peer *p, const char *dir);

/* Calls llama_backend_free if the loader was opened. The libraries stay loaded (their static
 * destructors are not safe to run twice); the struct is zeroed. Accepts NULL. */
void bench_peer_close(bench_peer *p);

/* ---- time and statistics ---- */

/* CLOCK_MONOTONIC in milliseconds. */
double bench_now_ms(void);

typedef struct bench_stats {
    double p10, median, p90, min, max, mean;
    size_t n;
} bench_stats;

/* Percentiles of v[0..n) (sorted in place; nearest rank with linear interpolation). */
bench_stats bench_stats_of(double *v, size_t n);

/* ---- memory ---- */

typedef struct bench_mem {
    uint64_t footprint; /* anonymous + swap + shmem: what the process costs the machine */
    uint64_t anonymous; /* Anonymous (smaps_rollup) */
    uint64_t swap;      /* Swap (smaps_rollup) */
    uint64_t shmem;     /* RssShmem (status) */
    uint64_t rss;       /* Rss (smaps_rollup, exact) */
    uint64_t rss_file;  /* RssFile (status) */
    uint64_t locked;    /* Locked (smaps_rollup) */
} bench_mem;

/* Reads this process's figures from /proc/self/smaps_rollup and /proc/self/status, in bytes.
 * Returns 0, or -1 (errno set) when /proc cannot be read. */
int bench_mem_get(bench_mem *out);

/* ---- the page cache ---- */

/* Bytes of `path` in the page cache (mincore over a shared mapping of it); 0 when it cannot be
 * read. */
uint64_t bench_cached_bytes(const char *path);
/* Drops `path` from the page cache (fdatasync, POSIX_FADV_DONTNEED): a cold load follows. */
void bench_make_cold(const char *path);
/* Reads `path` whole, so that the page cache holds it: a warm load follows. */
void bench_make_warm(const char *path);

/* ---- the guest's memory ---- */

/* Touches and frees `gib` GiB of fresh memory (huge pages advised, two threads), before a
 * measurement (--warm-memory): on a VM whose balloon hands freed memory back to the host,
 * faulting fresh memory costs seconds; touched and freed just before, it costs what it does on a
 * host. */
void bench_warm_memory(double gib);

/* ---- paths and output ---- */

/* Writes "<fixtures>/<rel>" into buf (fixtures: $WM_FIXTURES if set, else the compiled-in
 * ../shared/fixtures) and returns buf. */
const char *bench_fixture(char *buf, size_t cap, const char *rel);

/* One line for a result file: date (UTC), nproc, the CPU model from /proc/cpuinfo and the load
 * average (1, 5, 15 minutes). */
void bench_machine_line(char *buf, size_t cap);

#endif
