/*
 * internal.h: what the library's files share and nothing outside src/ sees.
 *
 * Sections: errors, the ledger and the counted allocator, the file object (filled by the
 * parsers in src/format/), small helpers. Names that cross files are wm__; file-local ones are
 * static and unprefixed.
 */
#ifndef WM_INTERNAL_H
#define WM_INTERNAL_H

#include "os/os.h"
#include "weightmap.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define WM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define WM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define WM_PRINTF(a, b)
#define WM_UNLIKELY(x) (x)
#endif

/* ---- errors (error.c) ---- */

/* Fills err (when not NULL) and returns code: `return wm__err(err, WM_EFORMAT, 0, "...")`. */
wm_status wm__err(wm_error *err, wm_status code, int os_errno, const char *fmt, ...)
    WM_PRINTF(4, 5);
/* The one errno-to-status mapping. wm__status_io is for a call on something already open (read,
 * map, lock, advise, thread, stat of a descriptor): ENOMEM and EAGAIN (the kernel is out of memory,
 * lockable pages or threads) are WM_ENOMEM, ECANCELED WM_ECANCELED, anything else WM_EIO.
 * wm__status_from_errno adds what naming a path can fail with (ENOENT, ENOTDIR -> WM_ENOENT;
 * EACCES, EPERM -> WM_EPERM; EINVAL -> WM_EINVAL). */
wm_status wm__status_io(int e);
wm_status wm__status_from_errno(int e);
/* "No such file or directory" for an errno; thread-safe. */
const char *wm__errno_text(int e);

/* ---- sized structs (abi.c; include/weightmap.h, "the ABI promise") ---- */

/* The 1.0 size of each sized struct: the end of its last 1.0 field, frozen here so that fields
 * appended later do not change it. */
#define WM__END_OF(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
#define WM__LOAD_OPTIONS_SIZE_1_0 WM__END_OF(wm_load_options, tp_user)
#define WM__CUDA_OPTIONS_SIZE_1_0 WM__END_OF(wm_cuda_options, nccl_comm)
#define WM__LEDGER_SIZE_1_0 WM__END_OF(wm_ledger, heap_largest)
#define WM__MODEL_STATS_SIZE_1_0 WM__END_OF(wm_model_stats, bytes_read)

/* Copies a caller's sized struct `src` into the library's `dst` of lib_size bytes: the caller's
 * first `size` bytes, zeros after them, dst's size set to lib_size. WM_EINVAL (err names `what`
 * and the byte) for a size below the size field, or a longer struct with a non-zero byte past
 * lib_size. */
wm_status wm__struct_in(void *dst, size_t lib_size, const void *src, size_t size_1_0,
                        const char *what, wm_error *err);
/* Writes the library's `src` (lib_size bytes) into the caller's `dst`, as far as dst's size
 * reaches, leaving dst's size field as it is. */
void wm__struct_out(void *dst, const void *src, size_t lib_size, size_t size_1_0);

/* ---- the ledger (ledger.c) ---- */

void wm__ledger_acquire(wm_ledger_category cat, uint64_t bytes);
void wm__ledger_release(wm_ledger_category cat, uint64_t bytes);
/* A region that stays gave `bytes` back (a block shrunk in place). */
void wm__ledger_shrink(wm_ledger_category cat, uint64_t bytes);
void wm__ledger_note_request(uint64_t bytes); /* heap_largest */
/* Device memory on one device (0 .. WM_LEDGER_DEVICES-1): counted in the device category and in
 * that device's own figure, in one call. */
void wm__ledger_device_acquire(int device, uint64_t bytes);
void wm__ledger_device_release(int device, uint64_t bytes);

/* ---- the counted allocator (ledger.c): all heap memory of the library goes through it ---- */

/* Blocks of WM_ALLOC_PAGE_THRESHOLD bytes or more come from wm__os_pages_alloc, never malloc,
 * so that no allocator cache can keep them after release: only blocks smaller than a page ever
 * sit in malloc's heap, and the bytes it may keep after a model is gone stay below its trim
 * threshold. NULL on exhaustion or injected fault. */
#define WM_ALLOC_PAGE_THRESHOLD ((size_t)4096)
/* Bytes in front of every block: its size (so wm__free needs none), rounded for alignment. */
#define WM_ALLOC_HEADER ((size_t)16)
void *wm__alloc(size_t size);
void *wm__calloc(size_t n, size_t size); /* zeroed; NULL on overflow */
/* Growing moves the block; shrinking keeps it where it is, and a block from pages gives the
 * whole pages past its new end back to the system (and their bytes back to the ledger). */
void *wm__realloc(void *ptr, size_t size);
void wm__free(void *ptr);
char *wm__strdup(const char *s);

/* Page-allocated scratch (ledger: scratch). 0 or an errno. */
int wm__scratch_alloc(size_t size, void **out);
void wm__scratch_free(void *p, size_t size);

/* ---- the file object ---- */

typedef struct wm__tensor {
    uint32_t name_off; /* into wm_file.names, NUL-terminated */
    uint32_t name_len;
    int32_t type;
    uint32_t n_dims;
    uint32_t shard; /* index into wm_file.shards */
    uint64_t ne[WM_MAX_DIMS];
    uint64_t n_elements;
    uint64_t offset; /* absolute offset in its shard */
    uint64_t nbytes;
} wm__tensor;

typedef struct wm__kv {
    uint32_t key_off; /* into wm_file.names, NUL-terminated */
    uint32_t key_len;
    uint8_t type;      /* wm_value_type */
    uint8_t elem_type; /* arrays */
    uint8_t lenw;      /* width in bytes of string lengths inside the value: 4 (GGUF v1) or 8 */
    uint64_t length;   /* array: elements; string: bytes; else 1 */
    const unsigned char *val; /* scalar bytes, string bytes, or the first array element */
} wm__kv;

typedef struct wm__shard {
    char *path; /* counted allocation */
    int fd;
    wm_os_stat st;
    uint64_t data_offset;
} wm__shard;

struct wm_file {
    wm_format format;
    uint32_t version;
    char *path;
    uint64_t size;
    uint64_t data_offset;
    uint32_t alignment;
    uint64_t tensor_bytes;

    wm__shard *shards; /* shards[0] is the file itself */
    uint32_t n_shards;

    unsigned char *header; /* header bytes; metadata points into it */
    size_t header_len;     /* bytes valid in header */
    /* 0: header is a counted allocation. Else header is a read-only shared mapping of the first
     * header_map bytes of shards[0] (GGUF headers of megabytes: gguf.c says why), counted as
     * map_shared. */
    size_t header_map;
    void *aux; /* format-private state (safetensors: the parsed JSON) */
    void (*aux_free)(void *aux);

    wm__tensor *tensors;
    size_t n_tensors;
    wm__kv *kvs;
    size_t n_kv;
    char *names; /* tensor names and keys, each NUL-terminated */
    size_t names_len;

    uint32_t *tensor_hash; /* open addressing: index + 1, 0 = empty */
    uint32_t *kv_hash;
    size_t hash_cap; /* power of two, for both tables */

    /* Holders: the opener (until wm_file_close) and each loaded model (until its release). The
     * last to let go frees the file, so closing before releasing is safe. */
    _Atomic unsigned refs;

    /* wm_file_prefetch's read ahead (src/read/prefetch.c): live from the call until the next
     * wm_file_read_tensors ends or the file is closed (wm__file_prefetch_drop), else NULL. Every
     * wm__read of the file takes what it holds from it first, through ahead_take: the read ahead
     * sets it before it publishes `pre`, so that the reader (below the read ahead, which reads
     * through it) names nothing of it. ahead_take returns the length n (0 < n <= len) of the
     * first part of [off, off + len) of shard `shard` and whether its bytes were copied into
     * dst (true) or are the caller's to read (false: outside every chunk, or a chunk not read);
     * a chunk being read is awaited. */
    struct wm__pre *_Atomic pre;
    size_t (*ahead_take)(struct wm__pre *p, uint32_t shard, uint64_t off, size_t len,
                         unsigned char *dst, bool *copied);
    _Atomic unsigned pre_users;
};

/* Parsers (src/format/): bytes in, a wm_file's tables out; no I/O. Each fills a zeroed wm_file
 * whose header bytes src/open/ read; on failure the caller runs wm__file_free on the half-built
 * file. GGUF: format/parse.h (passes over a growing prefix). safetensors: the 8 bytes of the
 * header's length checked against the limit and the file (*hlen), then the header's JSON text of
 * hlen bytes (it starts at file offset 8) into the tensor table and metadata. */
wm_status wm__safetensors_header_len(const wm_file *f, const unsigned char lb[8], uint64_t *hlen,
                                     wm_error *err);
wm_status wm__safetensors_header(wm_file *f, const unsigned char *text, uint64_t hlen,
                                 wm_error *err);
/* What a file that is neither GGUF nor safetensors is, from its first n bytes (sniff.c): true with
 * "it is KIND; WHAT TO DO" in out (a PyTorch checkpoint, a pickle, a Git LFS pointer, JSON, HTML,
 * ONNX, ...), false when the bytes say nothing known. Pure; allocates nothing. */
#define WM__SNIFF_BYTES 512
bool wm__sniff_foreign(const unsigned char *head, size_t n, char *out, size_t cap);

/* A parsed *.safetensors.index.json (safetensors_index.c). Every string lies NUL-terminated in
 * blob: map[i] holds the blob offsets of a tensor name and of its shard's file name; kvs are the
 * "metadata" entries (key_off into blob, val into blob). */
typedef struct wm__st_index {
    char *blob;
    size_t blob_len;
    uint32_t (*map)[2];
    size_t n_map;
    wm__kv *kvs;
    size_t n_kv;
} wm__st_index;
wm_status wm__safetensors_index_parse(const char *path, const unsigned char *text, size_t len,
                                      wm__st_index *out, wm_error *err);
void wm__st_index_free(wm__st_index *ix);

/* The open path, downwards (file.c says why), in src/open/, the layer that does a file's open's
 * I/O: wm_file_open, wm_file_open_set -> wm__shards_open (shards.c: an index's set, its index
 * read there; with whole_set, the whole set of any shard or split part too; any other file
 * alone), wm_file_open_paths -> wm__shards_open_list (shards.c: a list as one set) ->
 * wm__file_open_one (open.c: one file, its header read or mapped by header.c, parsed by the
 * parsers above and indexed by wm__file_index, src/format/index.c). */
wm_status wm__shards_open(const char *path, bool whole_set, wm_file **out, wm_error *err);
wm_status wm__shards_open_list(const char *const *paths, size_t n, wm_file **out, wm_error *err);
wm_status wm__file_open_one(const char *path, wm_file **out, wm_error *err);
/* Builds the name and key hash tables, refusing duplicates (index.c). */
wm_status wm__file_index(wm_file *f, wm_error *err);
/* Index lookups of a name or key of n bytes: WM_OK and *index, or WM_ENOENT (index.c). */
wm_status wm__index_find_tensor(const wm_file *f, const char *name, size_t n, size_t *index);
wm_status wm__index_find_kv(const wm_file *f, const char *key, size_t n, size_t *index);
/* Frees everything a (possibly half-built) file holds, and the file (src/open/open.c). */
void wm__file_free(wm_file *f);
/* A model's hold on its file (file.c): ref returns f; unref frees the file with its last
 * holder. Accepts NULL. */
wm_file *wm__file_ref(wm_file *f);
void wm__file_unref(wm_file *f);
/* ---- helpers ---- */

uint64_t wm__hash(const void *p, size_t n); /* FNV-1a */

/* Whether s ends with suffix. */
static inline bool wm__ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static inline bool wm__add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}
static inline bool wm__mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline uint64_t wm__align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

#endif /* WM_INTERNAL_H */
