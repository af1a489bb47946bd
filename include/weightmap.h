/*
 * weightmap.h: the public interface of weightmap, the only header a user includes.
 *
 * weightmap opens a weight file (GGUF, safetensors), loads its tensors with an explicit load
 * mode, hands them to a compute backend and releases every byte again, with figures that prove
 * it. C11; also compiles as C++.
 *
 * Conventions that hold for every function below:
 *   - A call that can fail returns wm_status; WM_OK is 0.
 *   - A call whose failure depends on a file or the OS takes a last, optional, caller-owned
 *     `wm_error *err`. When it is not NULL and the call fails, it holds the status, the errno
 *     that caused it (0 when none) and a message naming the file, the offset and the field.
 *   - Out-parameters are written only on success; pointer out-parameters are set to NULL on
 *     failure.
 *   - Release functions (wm_file_close, wm_model_release) accept NULL, return nothing and
 *     cannot fail.
 *   - What a getter returns is borrowed from its owner and stays valid until the owner is
 *     released.
 *   - Objects are not locked: one wm_file or wm_model may be read from several threads at once,
 *     but closed or released by one thread, after all other use has ended. Different objects may
 *     be used on different threads freely. The ledger is global and thread-safe.
 */
#ifndef WEIGHTMAP_H
#define WEIGHTMAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) || defined(__CYGWIN__)
#define WM_API
#elif defined(__GNUC__)
#define WM_API __attribute__((visibility("default")))
#else
#define WM_API
#endif

/* ---------------------------------------------------------------------------------------------
 * Version and the ABI promise
 *
 * Runtimes link this library as a shared object, so its binary interface is a contract:
 *   - Within one major version (the shared object's SOVERSION is the major version), a program
 *     built against an older header keeps working with a newer library: no function is removed
 *     or changes its signature, no enum value changes meaning, and no struct field moves.
 *   - Public structs that cross the boundary by value or through a caller-owned pointer
 *     (wm_load_options, wm_cuda_options, wm_ledger, wm_model_stats, wm_read_options, and since
 *     1.7 wm_cost, wm_mem_available, wm_pool_options, wm_pool_stats, since 1.8
 *     wm_pool_owner, wm_pool_counts) start with
 *     `uint32_t size`,
 *     the caller's sizeof, and only ever grow at the end. The library reads (or, for results,
 *     writes) only the first `size` bytes: fields a shorter, older struct lacks read as zero
 *     (their documented default), and results it has no room for are not written. A longer
 *     struct from a newer header is accepted when every byte past the library's own size is
 *     zero; otherwise the call fails with WM_EINVAL, naming the size, rather than ignore a field
 *     the caller set. `size` 0 means the struct as version 1.0 defined it, so a zero-initialised
 *     struct written against 1.0 (`{.mode = WM_MODE_MMAP}`) stays valid; code that sets fields
 *     added later must set `size` (the WM_..._INIT macros do).
 *   - Opaque types (wm_file, wm_model) stay opaque; their layout is not part of the ABI.
 *   - wm_version_number() lets a program check at run time that the library it got is at least
 *     the version whose header it was built with.
 * ------------------------------------------------------------------------------------------- */

/* An initialiser of a sized struct: its size set, every other field zero (C++11: a value). */
#ifdef __cplusplus
#define WM_SIZED_INIT(type)                                                                        \
    ([] {                                                                                          \
        type v_{};                                                                                 \
        v_.size = (uint32_t)sizeof(type);                                                          \
        return v_;                                                                                 \
    }())
#else
#define WM_SIZED_INIT(type)                                                                        \
    { .size = (uint32_t)sizeof(type) }
#endif

#define WM_VERSION_MAJOR 1
#define WM_VERSION_MINOR 8
#define WM_VERSION_PATCH 7
#define WM_VERSION_STRING "1.8.7"
/* MAJOR * 1000000 + MINOR * 1000 + PATCH, e.g. 1000000 for 1.0.0 (as wm_version_number). */
#define WM_VERSION_NUMBER (WM_VERSION_MAJOR * 1000000 + WM_VERSION_MINOR * 1000 + WM_VERSION_PATCH)

/* The library's version as "MAJOR.MINOR.PATCH". */
WM_API const char *wm_version(void);
/* The library's version as a number (WM_VERSION_NUMBER of the library that runs, which may be
 * newer than the header a program was built with: compare with >=). */
WM_API uint32_t wm_version_number(void);

/* ---------------------------------------------------------------------------------------------
 * Status codes and errors
 * ------------------------------------------------------------------------------------------- */

/* X(NAME, value, message): the one list from which the enum, the names and messages come. */
#define WM_STATUS_LIST(X)                                                                          \
    X(OK, 0, "success")                                                                            \
    X(EINVAL, 1, "invalid argument")                                                               \
    X(ENOMEM, 2, "out of memory")                                                                  \
    X(EIO, 3, "input/output error")                                                                \
    X(EFORMAT, 4, "malformed or unsupported file")                                                 \
    X(ENOENT, 5, "no such file, tensor or key")                                                    \
    X(EPERM, 6, "operation not permitted")                                                         \
    X(ETYPE, 7, "value has another type")                                                          \
    X(ERANGE, 8, "index or value out of range")                                                    \
    X(ECANCELED, 9, "canceled by the caller")                                                      \
    X(EUNSUPPORTED, 10, "not supported by this build or platform")                                 \
    X(EDEVICE, 11, "compute device error")

typedef enum wm_status {
#define WM__STATUS_ENUM(name, value, msg) WM_##name = value,
    WM_STATUS_LIST(WM__STATUS_ENUM)
#undef WM__STATUS_ENUM
} wm_status;

/* "WM_EFORMAT" for WM_EFORMAT; "WM_UNKNOWN" for a value outside the list. Never NULL. */
WM_API const char *wm_status_name(wm_status status);
/* A short English description of a status. Never NULL. */
WM_API const char *wm_strerror(wm_status status);

#define WM_ERROR_MSG_SIZE 256

/* Filled by a failing call when the caller passes one. Caller-owned; no cleanup needed. */
typedef struct wm_error {
    wm_status code;              /* the status the call returned */
    int os_errno;                /* errno of the failed system call, or 0 */
    char msg[WM_ERROR_MSG_SIZE]; /* "model.gguf: tensor 'x' at offset 0x1f400 ends ..." */
} wm_error;

/* ---------------------------------------------------------------------------------------------
 * The ledger: what the library holds, exactly, by category
 * ------------------------------------------------------------------------------------------- */

typedef enum wm_ledger_category {
    WM_LEDGER_HEAP = 0,    /* the counted allocator (small blocks from malloc, large from pages) */
    WM_LEDGER_SCRATCH,     /* page-allocated staging and conversion buffers */
    WM_LEDGER_MAP_SHARED,  /* MAP_SHARED, PROT_READ file mappings */
    WM_LEDGER_MAP_PRIVATE, /* MAP_PRIVATE, writable file mappings (commit-charged) */
    WM_LEDGER_LOCKED,      /* bytes under mlock */
    WM_LEDGER_PINNED,      /* host memory registered with or allocated for a device */
    WM_LEDGER_DEVICE,      /* device memory */
    WM_LEDGER_COUNT
} wm_ledger_category;

typedef struct wm_ledger_stat {
    uint64_t current; /* bytes held now */
    uint64_t peak;    /* most bytes held at once since start (or wm_ledger_reset_peaks) */
    uint64_t total;   /* bytes ever acquired */
    uint64_t regions; /* regions (allocations, mappings, ...) held now */
} wm_ledger_stat;

/* Grows only at the end (see "the ABI promise"); set `size` before wm_ledger_get. */
typedef struct wm_ledger {
    uint32_t size; /* sizeof(wm_ledger) as the caller knows it: WM_LEDGER_INIT */
    wm_ledger_stat cat[WM_LEDGER_COUNT];
    uint64_t heap_largest; /* largest single request the counted allocator has served */
    /* Added in 1.7: the host categories together (heap, scratch, map_shared, map_private); its
     * peak is the most host memory held at once (the categories' peaks, reached at different
     * moments, add up to more). */
    wm_ledger_stat host;
} wm_ledger;

#define WM_LEDGER_INIT WM_SIZED_INIT(wm_ledger)

/* A consistent-enough snapshot of the global ledger (each figure is read atomically), written
 * into the first out->size bytes of *out (0: the 1.0 size); out->size is left as it was. */
WM_API void wm_ledger_get(wm_ledger *out);
/* Sets every peak to its current value and heap_largest to 0 (for measuring one phase). */
WM_API void wm_ledger_reset_peaks(void);
/* "heap", "scratch", "map_shared", "map_private", "locked", "pinned", "device"; NULL if out of
 * range. These are the names used in JSON output. */
WM_API const char *wm_ledger_category_name(wm_ledger_category category);
/* Sum of `current` over every category, and of `regions`. Zero when the library holds nothing. */
WM_API uint64_t wm_ledger_bytes(const wm_ledger *ledger);
WM_API uint64_t wm_ledger_regions(const wm_ledger *ledger);
/* Device memory of one device: the part of the ledger's `device` category held on device
 * number `device` (0 .. WM_LEDGER_DEVICES-1); the per-device figures add up to the category
 * (a load on one device numbered past them counts in the category only).
 * WM_EINVAL for NULL out, WM_ERANGE for a device number out of range. */
#define WM_LEDGER_DEVICES 16
WM_API wm_status wm_ledger_device(int device, wm_ledger_stat *out);

/* ---------------------------------------------------------------------------------------------
 * Tensor element types (ids are ggml's, so GGUF files use them directly)
 * ------------------------------------------------------------------------------------------- */

typedef enum wm_type {
    WM_TYPE_F32 = 0,
    WM_TYPE_F16 = 1,
    WM_TYPE_Q4_0 = 2,
    WM_TYPE_Q4_1 = 3,
    /* 4, 5: removed (Q4_2, Q4_3) */
    WM_TYPE_Q5_0 = 6,
    WM_TYPE_Q5_1 = 7,
    WM_TYPE_Q8_0 = 8,
    WM_TYPE_Q8_1 = 9,
    WM_TYPE_Q2_K = 10,
    WM_TYPE_Q3_K = 11,
    WM_TYPE_Q4_K = 12,
    WM_TYPE_Q5_K = 13,
    WM_TYPE_Q6_K = 14,
    WM_TYPE_Q8_K = 15,
    WM_TYPE_IQ2_XXS = 16,
    WM_TYPE_IQ2_XS = 17,
    WM_TYPE_IQ3_XXS = 18,
    WM_TYPE_IQ1_S = 19,
    WM_TYPE_IQ4_NL = 20,
    WM_TYPE_IQ3_S = 21,
    WM_TYPE_IQ2_S = 22,
    WM_TYPE_IQ4_XS = 23,
    WM_TYPE_I8 = 24,
    WM_TYPE_I16 = 25,
    WM_TYPE_I32 = 26,
    WM_TYPE_I64 = 27,
    WM_TYPE_F64 = 28,
    WM_TYPE_IQ1_M = 29,
    WM_TYPE_BF16 = 30,
    /* 31, 32, 33: removed (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8) */
    WM_TYPE_TQ1_0 = 34,
    WM_TYPE_TQ2_0 = 35,
    /* 36, 37, 38: removed (IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8) */
    WM_TYPE_MXFP4 = 39,
    WM_TYPE_NVFP4 = 40,
    WM_TYPE_Q1_0 = 41,
    WM_TYPE_Q2_0 = 42,
    WM_GGML_TYPE_COUNT = 43,
    /* Types that only safetensors files carry (no ggml id). */
    WM_TYPE_BOOL = 100,
    WM_TYPE_U8 = 101,
    WM_TYPE_U16 = 102,
    WM_TYPE_U32 = 103,
    WM_TYPE_U64 = 104,
    WM_TYPE_F8_E4M3 = 105,
    WM_TYPE_F8_E5M2 = 106,
    WM_TYPE_F8_E8M0 = 107,
    WM_TYPE_F6_E2M3 = 108,
    WM_TYPE_F6_E3M2 = 109,
    WM_TYPE_F4 = 110,
    WM_TYPE_C64 = 111,         /* complex64: two f32 (real, imaginary) per element */
    WM_TYPE_F8_E4M3FNUZ = 112, /* 8-bit floats without infinities or negative zero */
    WM_TYPE_F8_E5M2FNUZ = 113,
    WM_TYPE_INVALID = -1
} wm_type;

/* Lower-case ggml name ("q4_K", "bf16", "f8_e4m3"); NULL for an unknown or removed id. */
WM_API const char *wm_type_name(wm_type type);
/* Case-insensitive lookup by name; WM_TYPE_INVALID when unknown. */
WM_API wm_type wm_type_from_name(const char *name);
/* Elements per block and bytes per block; 0 for an unknown or removed id. Sub-byte types that
 * have no blocks (F4, F6_*) report the number of elements that fill whole bytes. */
WM_API uint32_t wm_type_block_elems(wm_type type);
WM_API uint32_t wm_type_block_bytes(wm_type type);

/* ---------------------------------------------------------------------------------------------
 * Files: the header of a weight file, parsed; nothing loaded
 * ------------------------------------------------------------------------------------------- */

typedef struct wm_file wm_file;

typedef enum wm_format { WM_FORMAT_GGUF = 1, WM_FORMAT_SAFETENSORS = 2 } wm_format;

/* Opens a weight file and parses its header: the tensor table and the metadata. Reads a bounded
 * number of times whatever the file's metadata holds; keeps the header bytes and references
 * metadata strings and arrays in place.
 * A path to one file is that file alone, whatever its name: one shard of a sharded safetensors
 * checkpoint (NAME-0000K-of-0000N.safetensors) opens that shard, with its own tensors, its own
 * __metadata__ and its own size, as safetensors opens it (a consumer's loop over the shards
 * reads and holds each byte once); one part of a GGUF split set opens that part. A path ending
 * in ".safetensors.index.json" opens the set the index describes (see "Sharded checkpoints"
 * below). wm_file_open_set opens the whole set a shard belongs to; wm_file_open_paths a list.
 * (A library before 1.2 opened the whole set from a shard's or a split part's path.)
 * Returns WM_OK and *out, or: WM_EINVAL (NULL path or out), WM_ENOENT (no such file), WM_EPERM,
 * WM_EIO, WM_ENOMEM, WM_EFORMAT (not a weight file, or a malformed one: err names the offset
 * and field). On failure nothing is held (ledger unchanged, no descriptor left open).
 * Thread safety: any number of files may be opened concurrently, on any threads. Parsing a
 * header (GGUF or safetensors JSON) uses no process-wide state: no locks, no global hooks, no
 * library state a program shares; a program may use any JSON library of its own meanwhile.
 * The CLI (`weightmap info|load|check|cat FILE`) opens FILE as this function does; with --set
 * it opens as wm_file_open_set. */
WM_API wm_status wm_file_open(const char *path, wm_file **out, wm_error *err);
/* Opens the whole set that `path` belongs to, as one file (added in 1.2): any shard
 * NAME-0000K-of-0000N.safetensors (through NAME.safetensors.index.json when it exists beside
 * it, else shards 1 to N by name), the index itself, or any part NAME-0000K-of-0000N.gguf of a
 * GGUF split set (split.no, split.count, split.tensors.count); a file that belongs to no set
 * opens alone, as wm_file_open opens it (a GGUF file with split.count 0 or 1 is such a file,
 * whatever its name). Every shard is opened and checked; see "Sharded checkpoints" below.
 * Results, errors, thread safety and the state left on failure are wm_file_open's. For a GGUF
 * split set this is the call that matches llama.cpp, which loads a split set from its first
 * part. */
WM_API wm_status wm_file_open_set(const char *path, wm_file **out, wm_error *err);
/* Opens the files paths[0 .. n) as one set, in that order: shard i is paths[i] (added in 1.2).
 * The list is checked as a set is: every file of one format, none listed twice (the same file
 * by device and inode, whatever its path), no tensor in two files, and for GGUF parts that carry
 * split keys, split.count equal to n, split.no equal to the part's place in the list and
 * split.tensors.count (part 0's) equal to the tensors of all parts. An index file is not a
 * shard (WM_EINVAL: open it with wm_file_open). No index is read: metadata is paths[0]'s, and
 * wm_file_path is paths[0]. A list of one is that file alone. The array and its strings are the
 * caller's and are copied. Returns what wm_file_open returns, and WM_EINVAL for n 0, NULL
 * paths or out, a NULL entry or a file listed twice. On failure nothing is held. */
WM_API wm_status wm_file_open_paths(const char *const *paths, size_t n, wm_file **out,
                                    wm_error *err);
/* Closes a file opened by wm_file_open, wm_file_open_set or wm_file_open_paths: the caller's hold
 * on it ends. Accepts NULL. A model
 * loaded from the file holds it too: closing before releasing is safe, the file (its
 * descriptors, tensor table and metadata, as seen through wm_model_file) stays valid until its
 * last model is released, and that release frees it. Thread safety: a file may be closed on one
 * thread while another releases one of its models. */
WM_API void wm_file_close(wm_file *file_from_wm_file_open);

WM_API wm_format wm_file_format(const wm_file *file);
/* "gguf" or "safetensors". */
WM_API const char *wm_format_name(wm_format format);
/* The path the file was opened with (borrowed). */
WM_API const char *wm_file_path(const wm_file *file);
/* Format version (GGUF 1, 2 or 3; safetensors reports 1). */
WM_API uint32_t wm_file_version(const wm_file *file);
WM_API uint64_t wm_file_size(const wm_file *file);
/* Offset of the tensor data section, and its alignment (GGUF general.alignment, default 32;
 * safetensors: 8 + header length, alignment 1). */
WM_API uint64_t wm_file_data_offset(const wm_file *file);
WM_API uint32_t wm_file_alignment(const wm_file *file);
/* Sum of every tensor's byte size. */
WM_API uint64_t wm_file_tensor_bytes(const wm_file *file);

/* Sharded checkpoints and split sets. A set opened as one file (wm_file_open on an index,
 * wm_file_open_set, wm_file_open_paths) has every shard opened and checked (a missing, extra or
 * inconsistent shard fails with a message naming it, a shard whose header disagrees with the
 * index names the tensor and both shards), tensors of all shards listed together, and each
 * tensor says in which shard its data lies. For a set, wm_file_size is the sum of the shards'
 * sizes, and the data offset, alignment and version are those of shard 0; GGUF metadata is
 * shard 0's; safetensors metadata is the index's "metadata" followed by shard 0's __metadata__
 * (keys the index already has are skipped), or shard 0's alone without an index. Shards of an
 * index are in the order of their file names, of a name NAME-0000K-of-0000N in K's order.
 * wm_file_shard_count: 1 for a single file (0 for NULL). wm_file_shard_path: the path of shard
 * `index` (borrowed; shard 0 is the file itself for a single file), NULL when out of range. */
WM_API uint32_t wm_file_shard_count(const wm_file *file);
WM_API const char *wm_file_shard_path(const wm_file *file, uint32_t index);

#define WM_MAX_DIMS 4

typedef struct wm_tensor_info {
    const char *name; /* NUL-terminated, borrowed from the file */
    wm_type type;
    uint32_t n_dims;             /* 0 .. WM_MAX_DIMS */
    uint64_t shape[WM_MAX_DIMS]; /* ggml order: shape[0] is the row (fastest); unused are 1 */
    uint64_t n_elements;
    uint64_t offset; /* absolute offset of the first byte in its file (shard) */
    uint64_t nbytes;
    uint32_t shard; /* the file that holds the data: wm_file_shard_path(shard) */
} wm_tensor_info;

WM_API size_t wm_file_tensor_count(const wm_file *file);
/* Fills *out with tensor `index`. WM_ERANGE if index >= count, WM_EINVAL on NULL. */
WM_API wm_status wm_file_tensor(const wm_file *file, size_t index, wm_tensor_info *out);
/* Finds a tensor by name (hash lookup). WM_ENOENT if absent. */
WM_API wm_status wm_file_find_tensor(const wm_file *file, const char *name, size_t *index);

/* ---------------------------------------------------------------------------------------------
 * Reading tensors into memory the caller owns (added in 1.2)
 *
 * For a runtime that allocates its own weight buffers (llama.cpp's, through
 * include/weightmap_llama.h) and wants weightmap's reader behind them: the bytes of each tensor
 * go from the file straight into the caller's memory, or, for memory the CPU cannot write (a
 * device buffer, a buffer that rearranges what it is given), through a bounded page-allocated
 * window handed to a callback. Nothing is kept: when the call returns, every thread, window and
 * job table it made is gone and the ledger is as it was.
 * ------------------------------------------------------------------------------------------- */

/* Progress: called from the loading thread with bytes done so far and the total. Return
 * non-zero to cancel: the load then fails with WM_ECANCELED and holds nothing. */
typedef int (*wm_progress_fn)(void *user, uint64_t bytes_done, uint64_t bytes_total);

/* wm_read_item.flags: the sink receives the tensor's bytes in one call (offset 0, all nbytes),
 * for a destination that takes a tensor only whole (ggml's CPU repack buffers). The bytes are
 * read in pieces by several threads at once into one window and handed over by the thread that
 * read the last piece; such items are read first, the biggest first. */
#define WM_READ_WHOLE 1u
/* wm_read_item.flags (added in 1.3): dst is set, but names the memory the sink writes the
 * tensor's bytes into (nbytes there, a CPU repack buffer's tensor), not a place to read into: the
 * bytes still go to wm_read_options.sink, and dst is only where WM_READ_PREFAULT faults (not
 * for an item also WM_READ_WHOLE: its sink's own writes fault that memory). */
#define WM_READ_SINK_WRITES 2u
/* wm_read_item.flags (added in 1.5): the sink's calls for this item each start on a row group's
 * boundary and hold whole groups of wm_read_options.row_group rows (a row: shape[0] elements; the
 * last call may hold fewer, the rows left), for a sink that rewrites rows in groups, such as
 * ggml's CPU repack buffers (4, 8 or 16 rows interleaved), which can then take each piece as it
 * is read instead of the tensor whole. The item has no place to read into (dst NULL, or
 * WM_READ_SINK_WRITES); not with WM_READ_WHOLE. A group bigger than a thread's window share
 * grows that thread's window to the group. (A 1.4 library refuses the flag, WM_EINVAL.) */
#define WM_READ_SINK_ROWS 4u

/* One tensor to read. This struct never grows (the stride of an array of them is part of the
 * ABI); per-item behaviour added later comes as flags. */
typedef struct wm_read_item {
    size_t tensor;  /* index in the file, as wm_file_tensor numbers them */
    void *dst;      /* host memory of at least the tensor's nbytes, any alignment; NULL (or
                       WM_READ_SINK_WRITES): the bytes go to wm_read_options.sink */
    void *user;     /* the caller's, handed back with the item (sink) */
    uint32_t flags; /* WM_READ_WHOLE, WM_READ_SINK_WRITES, WM_READ_SINK_ROWS; other bits 0 */
} wm_read_item;

/* Receives `len` bytes of `item`'s tensor starting `offset` bytes into it, in a window that is
 * valid only during the call. Return 0 to go on; non-zero stops the read (WM_EDEVICE). */
typedef int (*wm_read_sink_fn)(void *sink_user, const wm_read_item *item, uint64_t offset,
                               const void *bytes, size_t len);

/* How cold bytes are read (wm_read_options.direct_io). */
typedef enum wm_direct_io {
    WM_DIRECT_AUTO = 0, /* the library's choice: buffered reads of what the page cache holds;
                           bytes it does not hold read with O_DIRECT where the file system
                           allows it (see docs/ARCHITECTURE.md, the reading engine) */
    WM_DIRECT_OFF = 1,  /* every read buffered */
    WM_DIRECT_ON = 2    /* O_DIRECT wherever the file system allows it */
} wm_direct_io;

/* wm_read_options.flags: the sink is called by one thread at a time (reads stay parallel). */
#define WM_READ_SINK_SERIAL 1u
/* wm_read_options.flags (added in 1.3): the destinations are fresh memory (anonymous pages not
 * yet touched, as a runtime's new weight buffers are). One more thread of the engine's faults each
 * item's destination in (MADV_POPULATE_WRITE, 2 MiB a call) ahead of the reading threads, job by
 * job in the order they take them, skipping what a reader has begun: the kernel's zeroing of the
 * new pages runs beside the reads instead of inside their copies. Not a WM_READ_WHOLE item's
 * memory (its sink's writes fault it). A hint: it writes no byte, where the system lacks the call
 * (or the thread cannot start) nothing happens, and the thread is joined before the call
 * returns. */
#define WM_READ_PREFAULT 2u
/* (WM_READ_SINK_WRITES and WM_READ_PREFAULT need a 1.3 library, wm_version_number() >= 1003000:
 * a 1.2 library refuses them as unknown flags, WM_EINVAL, before it reads anything.) */

/* Grows only at the end (see "the ABI promise"); size 0 is the 1.2 layout. */
typedef struct wm_read_options {
    uint32_t size;    /* sizeof(wm_read_options) as the caller knows it: WM_READ_OPTIONS_INIT */
    unsigned threads; /* reading threads, the caller's included; 0 = one per online CPU,
                         at most 64 */
    wm_direct_io direct_io;
    uint32_t flags;       /* WM_READ_SINK_SERIAL, WM_READ_PREFAULT */
    wm_read_sink_fn sink; /* for items whose dst is NULL; called from the reading threads,
                             concurrently for different pieces unless WM_READ_SINK_SERIAL */
    void *sink_user;
    size_t window;           /* page-allocated staging for sink items, all threads together;
                                0 = 64 MiB. Each thread's share is at least 1 MiB and at most
                                8 MiB; besides, the WM_READ_WHOLE items being read have a window
                                of their size each (reused from item to item until the call
                                returns; together at most twice the biggest such item's, or
                                8 MiB a thread where that is more: a piece of a new item waits
                                for a window to be given back) */
    wm_progress_fn progress; /* from the calling thread, after each piece it read and once at
                                the end: bytes read so far, of all items; non-zero cancels */
    void *progress_user;
    /* added in 1.5 (a caller of an older header: 0) */
    uint32_t row_group; /* rows per group of WM_READ_SINK_ROWS items; 0 = 1 (whole rows) */
} wm_read_options;

#define WM_READ_OPTIONS_INIT WM_SIZED_INIT(wm_read_options)

/* Prefetch (added in 1.3; a 1.3 library reads ahead into the page cache instead). Starts reading
 * up to `bytes` of the file's tensor data, from the start of its data (shard by shard, in order),
 * and returns at once: for a caller with other work to do before it can read, such as the
 * llama.cpp bridge while llama.cpp makes the model (the destinations do not exist yet), so that
 * the disk works meanwhile. Only a cold file: where a quarter or more of a shard's tensor data is
 * cached, nothing. The bytes go past the page cache (O_DIRECT where the file system allows it;
 * else through the cache, dropped from it afterwards) into page-allocated memory the file holds,
 * counted in the ledger as scratch (all of `bytes` from this call on; resident only as it is
 * read), read 4 MiB at a time in file order by threads of the library's own (at most 16, their
 * stacks scratch too). The next wm_file_read_tensors (and any other read of the file) copies
 * what is in, waits for a chunk being read and reads the rest itself; its start stops the
 * reading ahead, and its end frees the memory and joins the threads (once every read of the file
 * then running has left it, so that two reads at once are safe); wm_file_close does the same if
 * no read came. Why not the kernel's readahead: docs/DECISIONS.md, "The read ahead". A hint:
 * returns the bytes asked for, 0 for none (a warm file, a second call before the read, no memory
 * or thread, NULL), rounded out to whole pages. Not concurrently with another wm_file_prefetch
 * or a read of the same file. */
WM_API uint64_t wm_file_prefetch(wm_file *file, uint64_t bytes);

/* Reads the tensors items[0 .. n) names, each into item.dst or through opts->sink, in parallel
 * (pieces of at most 8 MiB, opts->threads threads: the calling thread and workers that live
 * only during the call, with stacks the library maps itself). The calling thread allocates
 * nothing from malloc; the job table, the windows and the stacks are page-allocated (ledger:
 * scratch) and given back before the call returns. Tensors of no bytes cost nothing. opts NULL:
 * every default (then an item with dst NULL is WM_EINVAL).
 * Returns WM_OK, or: WM_EINVAL (NULL file, items with n > 0, a tensor index out of range, a NULL
 * dst without a sink, unknown flags, a bad options struct), WM_ENOMEM, WM_EIO (a read failed:
 * err names the file, offset and tensor), WM_EFORMAT (the file is shorter than its header says),
 * WM_ECANCELED (the progress callback asked), WM_EDEVICE (the sink returned non-zero). On
 * failure some destinations may hold part of their bytes; nothing of the library's is held.
 * Thread safety: as any reader of a wm_file (several calls on one file may run at once). */
WM_API wm_status wm_file_read_tensors(const wm_file *file, const wm_read_item *items, size_t n,
                                      const wm_read_options *opts, wm_error *err);

/* Metadata value types; ids are GGUF's. */
typedef enum wm_value_type {
    WM_VALUE_U8 = 0,
    WM_VALUE_I8 = 1,
    WM_VALUE_U16 = 2,
    WM_VALUE_I16 = 3,
    WM_VALUE_U32 = 4,
    WM_VALUE_I32 = 5,
    WM_VALUE_F32 = 6,
    WM_VALUE_BOOL = 7,
    WM_VALUE_STRING = 8,
    WM_VALUE_ARRAY = 9,
    WM_VALUE_U64 = 10,
    WM_VALUE_I64 = 11,
    WM_VALUE_F64 = 12,
    WM_VALUE_TYPE_COUNT = 13
} wm_value_type;

/* "u8", "i8", ..., "string", "array"; NULL when out of range. */
WM_API const char *wm_value_type_name(wm_value_type type);

/* A string referenced in place in the file's header: not NUL-terminated. */
typedef struct wm_string {
    const char *ptr;
    size_t len;
} wm_string;

/* One metadata entry. For an array, elem_type and length describe it; elements are read with
 * wm_file_array_* below. For safetensors, __metadata__ entries are strings. */
typedef struct wm_kv {
    const char *key; /* NUL-terminated, borrowed */
    wm_value_type type;
    wm_value_type elem_type; /* arrays only */
    uint64_t length;         /* arrays: element count; strings: byte length; else 1 */
} wm_kv;

WM_API size_t wm_file_metadata_count(const wm_file *file);
/* Entry `index`, in file order. WM_ERANGE past the end. */
WM_API wm_status wm_file_metadata(const wm_file *file, size_t index, wm_kv *out);
/* Index of a key. WM_ENOENT if absent. */
WM_API wm_status wm_file_find_metadata(const wm_file *file, const char *key, size_t *index);

/* Typed getters by key. WM_ENOENT: no such key; WM_ETYPE: the value has another type (the
 * integer getters accept any integer type whose value fits, WM_ERANGE when it does not; the
 * float getter accepts F32 and F64). */
WM_API wm_status wm_file_get_u64(const wm_file *file, const char *key, uint64_t *out);
WM_API wm_status wm_file_get_i64(const wm_file *file, const char *key, int64_t *out);
WM_API wm_status wm_file_get_u32(const wm_file *file, const char *key, uint32_t *out);
WM_API wm_status wm_file_get_f64(const wm_file *file, const char *key, double *out);
WM_API wm_status wm_file_get_bool(const wm_file *file, const char *key, int *out);
WM_API wm_status wm_file_get_string(const wm_file *file, const char *key, wm_string *out);

/* Scalar value of entry `index` converted as the getters above do. */
WM_API wm_status wm_file_kv_u64(const wm_file *file, size_t index, uint64_t *out);
WM_API wm_status wm_file_kv_i64(const wm_file *file, size_t index, int64_t *out);
WM_API wm_status wm_file_kv_f64(const wm_file *file, size_t index, double *out);
WM_API wm_status wm_file_kv_string(const wm_file *file, size_t index, wm_string *out);

/* Array access for entry `index`. WM_ETYPE if it is not an array (or elements have another
 * type), WM_ERANGE if elem >= length. Numeric elements convert as the getters above.
 * A string element costs O(elem) for random access; iterate with wm_array_iter for O(1) a step. */
WM_API wm_status wm_file_array_u64(const wm_file *file, size_t index, uint64_t elem, uint64_t *out);
WM_API wm_status wm_file_array_i64(const wm_file *file, size_t index, uint64_t elem, int64_t *out);
WM_API wm_status wm_file_array_f64(const wm_file *file, size_t index, uint64_t elem, double *out);
WM_API wm_status wm_file_array_string(const wm_file *file, size_t index, uint64_t elem,
                                      wm_string *out);

/* Sequential access to a string array: init, then next until it returns WM_ERANGE. */
typedef struct wm_array_iter {
    const unsigned char *pos_;
    uint64_t left_;
    uint32_t lenw_;
} wm_array_iter;
WM_API wm_status wm_file_array_iter(const wm_file *file, size_t index, wm_array_iter *it);
WM_API wm_status wm_array_iter_next(wm_array_iter *it, wm_string *out);

/* ---------------------------------------------------------------------------------------------
 * Conversion between element types (dequantization and float widths)
 * ------------------------------------------------------------------------------------------- */

/* Non-zero when wm_convert can turn `from` into `to`. Targets are F32, F16, BF16 and F64; sources
 * are every float type and every quantized type that llama.cpp can turn into floats. */
WM_API int wm_convert_supported(wm_type from, wm_type to);
/* Converts n_elements (a multiple of from's block size) from src to dst, bit-identical to ggml's
 * to_float (and its float conversions). Single-threaded; uses SIMD when the CPU has it.
 * src may have any alignment; dst must be aligned for the target element (4 bytes for F32).
 * Half and bfloat16 results round to nearest even, NaN written as ggml does. Allocates nothing.
 * WM_EINVAL: unsupported pair, n_elements not a whole number of blocks, NULL or misaligned dst. */
WM_API wm_status wm_convert(wm_type from, wm_type to, const void *src, void *dst,
                            uint64_t n_elements);

/* A conversion asked for at load time: tensors matching `tensor` (exact name, or NULL for any)
 * and `from` (WM_TYPE_INVALID for any) are delivered as `to`. The first matching rule wins. */
typedef struct wm_convert_rule {
    const char *tensor;
    wm_type from;
    wm_type to;
} wm_convert_rule;

/* ---------------------------------------------------------------------------------------------
 * Models: tensors loaded on a backend with an explicit mode
 * ------------------------------------------------------------------------------------------- */

typedef struct wm_model wm_model;

/* No default: a zeroed options struct is refused with WM_EINVAL. */
typedef enum wm_mode {
    WM_MODE_NONE = 0,
    WM_MODE_HEAP = 1,        /* page-aligned anonymous memory, filled by parallel pread */
    WM_MODE_MMAP = 2,        /* one MAP_SHARED, PROT_READ mapping: zero private bytes */
    WM_MODE_MMAP_PRIVATE = 3 /* MAP_PRIVATE, read-write: commit-charged, writes privatise */
} wm_mode;

typedef enum wm_lock {
    WM_LOCK_OFF = 0,
    WM_LOCK_REQUIRED = 1,   /* mlock every loaded byte or fail with WM_EPERM */
    WM_LOCK_BEST_EFFORT = 2 /* lock what can be locked; the model reports how much */
} wm_lock;

typedef enum wm_backend_kind { WM_BACKEND_CPU = 0, WM_BACKEND_CUDA = 1 } wm_backend_kind;

/* "cpu", "cuda"; NULL for another value. These are the names wm_backend_from_name reads. */
WM_API const char *wm_backend_name(wm_backend_kind backend);
/* Whether this build has the backend (added in 1.7): 1, or 0 where a load on it would be
 * WM_EUNSUPPORTED (CUDA in a build without the toolkit) or the value is no backend. It starts
 * nothing and says nothing of devices (wm_backend_init does). Thread-safe. */
WM_API int wm_backend_available(wm_backend_kind backend);
/* Parses a backend spec, the one grammar the CLI and the Python package share: "cpu", "cuda"
 * (device 0), "cuda:N", or "cuda:N,M,..." (several devices, each 0 .. WM_LEDGER_DEVICES-1, none
 * twice). Writes *backend and the devices listed (cpu: none; "cuda": device 0) into
 * devices[0 .. *n_devices), of room max_devices (at most WM_LEDGER_DEVICES are ever written).
 * Returns WM_OK, or WM_EINVAL with err->msg saying what is wrong with which part of the spec
 * (NULL arguments, an unknown name, a bad or repeated device number, more than max_devices).
 * Out-parameters are written only on success. Thread-safe. */
WM_API wm_status wm_backend_from_name(const char *spec, wm_backend_kind *backend, int *devices,
                                      unsigned max_devices, unsigned *n_devices, wm_error *err);

/* Progress (wm_progress_fn): declared with wm_file_read_tensors above. */

/* Several devices (CUDA): how tensors are placed on opts.devices. Each tensor goes whole to one
 * device; a device's tensors lie in buffers of its own. */
typedef enum wm_placement {
    WM_PLACE_BALANCE = 0, /* the file's tensors, in file order, cut into n_devices runs of about
                             equal bytes */
    WM_PLACE_LAYERS = 1,  /* by the layer number in the name ("blk.N.", "layers.N.", "h.N."):
                             layers in n_devices contiguous groups of about equal count; tensors
                             before the first layer in the file go to the first device, the
                             rest to the last */
    WM_PLACE_CALLBACK = 2 /* opts.place_tensor chooses */
} wm_placement;

/* Tensor parallelism: how one tensor is cut over tp_world ranks. Dimensions as PyTorch numbers
 * them (dim 0 is the outermost, slowest-varying; in ggml order that is shape[n_dims - 1]). */
typedef enum wm_split {
    WM_SPLIT_NONE = 0, /* every rank loads the whole tensor (replicated) */
    WM_SPLIT_DIM0 = 1, /* rank r loads rows [r*R/W, (r+1)*R/W) of dim 0: one contiguous range */
    WM_SPLIT_LAST = 2  /* rank r loads its 1/W of the last (innermost) dimension of every row:
                          the slice of each row is read as such, not the whole row */
} wm_split;

/* One tensor to load (wm_load_options.select): tensor `tensor` (an index, as wm_file_tensor
 * numbers them), whole (row_begin and row_end both 0) or only rows [row_begin, row_end) of its
 * dimension 0 (the outermost, as PyTorch numbers dimensions; a 1-D tensor's rows are its
 * elements, whole blocks of a quantized type). */
typedef struct wm_tensor_select {
    size_t tensor;
    uint64_t row_begin, row_end;
} wm_tensor_select;

/* Chooses a device for tensor `index`: an index into opts.devices (0 .. n_devices-1). */
typedef unsigned (*wm_place_fn)(void *user, size_t index, const wm_tensor_info *tensor);
/* Where tensor `index` goes in the caller's own device memory (wm_cuda_options.dst): a device
 * address, as an integer. */
typedef uint64_t (*wm_dst_fn)(void *user, size_t index, const wm_tensor_info *tensor);
/* Chooses how tensor `index` is split over the ranks. */
typedef wm_split (*wm_split_fn)(void *user, size_t index, const wm_tensor_info *tensor);
/* A ready tp_split for llama-family models (the Megatron layout, as vLLM shards them): the
 * column-parallel weights split along dim 0 (GGUF attn_q, attn_k, attn_v, ffn_gate, ffn_up;
 * Hugging Face q_proj, k_proj, v_proj, gate_proj, up_proj), the row-parallel ones along the last
 * dimension (attn_output, ffn_down; o_proj, down_proj), every other tensor whole (embeddings,
 * norms, the output head). Only 2-D tensors are split. `user` is unused. */
WM_API wm_split wm_split_llama(void *user, size_t index, const wm_tensor_info *tensor);

/* Options of the CUDA backend, pointed to by wm_load_options.cuda (NULL: every default). Given
 * with another backend, the load fails with WM_EINVAL. Grows only at the end. */
typedef struct wm_cuda_options {
    uint32_t size;  /* sizeof(wm_cuda_options) as the caller knows it: WM_CUDA_OPTIONS_INIT */
    int registered; /* register the mmap-mode mapping instead of staging */
    uint64_t pinned_budget; /* pinned staging bytes, 0 = 256 MiB */
    int direct_io;          /* staged: read everything with O_DIRECT, past the page cache,
                               even what is cached (for models larger than the memory that would
                               cache them), where the file system allows it; buffered reads
                               otherwise. The same as wm_load_options.direct_io = WM_DIRECT_ON;
                               without it the default (WM_DIRECT_AUTO) already reads what is not
                               cached with O_DIRECT */
    /* Read once (staged path, one device per process; builds with NCCL): an ncclComm_t
     * whose ranks all load this file with the same options but their own tp_rank (its rank in
     * the communicator, of tp_world = its size). Each rank reads only its 1/tp_world byte range
     * of every tensor that is not split (tp_split NULL: all of them), and the ranks complete
     * those tensors on every device with ncclBroadcast, so that storage is read once in all,
     * not tp_world times. NCCL is loaded at run time (libnccl.so.2); where it is absent, or in
     * a build without NCCL, the load fails with WM_EUNSUPPORTED. The communicator stays the
     * caller's; the load makes collective calls on it, so every rank must call wm_model_load. */
    void *nccl_comm;
    /* Fields added after 1.0 go here, at the end, each with the version that added it. */
    /* The caller's device memory (added in 1.7; the staged path): with `dst` set, the load
     * allocates no device memory. Each tensor it loads is copied to dst(dst_user, index, info)
     * instead: an address of device memory on the device that placement gives the tensor (use
     * WM_PLACE_CALLBACK where that is not the default's), with room for the bytes the load
     * delivers of it (info->nbytes; a selection's rows where rows are selected). The memory
     * stays the caller's: the model counts none of it (ledger, device_bytes), its release frees
     * none of it (the bytes stay), and wm_model_tensor_device_ptr gives the address back. An
     * address that is 0, or not device memory of that device (as cudaPointerGetAttributes says),
     * is WM_EINVAL naming the tensor, before anything is read. Not with the registered path,
     * read-once or tensor parallelism (WM_EINVAL). A 1.6 library refuses a struct that sets
     * them (WM_EINVAL: the ABI promise). */
    wm_dst_fn dst;
    void *dst_user;
} wm_cuda_options;

#define WM_CUDA_OPTIONS_INIT WM_SIZED_INIT(wm_cuda_options)

/* What to load and how. Grows only at the end (see "the ABI promise"): start from
 * WM_LOAD_OPTIONS_INIT, or write `{.size = sizeof(wm_load_options), .mode = ...}`. Every field
 * but `mode` defaults to zero. */
typedef struct wm_load_options {
    uint32_t size; /* sizeof(wm_load_options) as the caller knows it; 0: the 1.0 struct */
    wm_mode mode;  /* required */
    wm_lock lock;
    int prefetch;             /* mmap modes: MADV_POPULATE_READ (or WILLNEED) the data */
    unsigned threads;         /* worker threads for heap reads; 0 = one per online CPU, max 64 */
    uint64_t max_buffer_size; /* chunk limit for one buffer; 0 = no limit */
    wm_progress_fn progress;
    void *progress_user;
    wm_backend_kind backend;
    int device;                     /* backend device index (CUDA) */
    const wm_convert_rule *convert; /* conversions (heap mode only); NULL for none */
    size_t n_convert;
    const wm_cuda_options *cuda; /* backend CUDA: its options; NULL for the defaults */
    /* Several devices (CUDA, staged path): devices[0 .. n_devices) replace `device`, placed by
     * `placement` (place_tensor and place_user for WM_PLACE_CALLBACK). All are filled at once
     * through one pinned staging ring (registered portable, so every device copies from it)
     * within the CUDA pinned_budget. A list of one device is that device; n_devices 0: `device`. */
    const int *devices;
    unsigned n_devices;
    wm_placement placement;
    wm_place_fn place_tensor;
    void *place_user;
    /* Tensor parallelism (heap mode, and the CUDA staged path): this process is rank tp_rank of
     * tp_world and loads only its slice of each tensor tp_split says is split, and the whole of
     * the others. tp_world 0 or 1: off. A split needs the split dimension to divide by
     * tp_world, and for WM_SPLIT_LAST a slice of whole blocks of a quantized type; otherwise
     * WM_EINVAL names the tensor. The model's tensors are then the slices
     * (wm_model_tensor_shape). */
    unsigned tp_rank, tp_world;
    wm_split_fn tp_split;
    void *tp_user;
    /* Fields added after 1.0 go here, at the end, each with the version that added it. */
    /* Selection (added in 1.1; set `size`, as WM_LOAD_OPTIONS_INIT does): n_select 0 loads
     * every tensor. Otherwise only select[0 .. n_select) are loaded, and of each only
     * the rows it names, read into a packed buffer: a model of one row range holds and reads
     * those rows' bytes. The other tensors are not loaded (wm_model_tensor_info and
     * wm_model_tensor_shape say WM_ENOENT, their pointers are NULL and 0). WM_EINVAL naming the
     * tensor for an index out of range, a tensor listed twice, a row range that is empty, ends
     * past the last row, cuts a block or is asked of a scalar; row ranges also need a packed
     * layout (mode heap, or a device backend) and no conversion; a selection does not combine
     * with tensor parallelism or read-once. */
    const wm_tensor_select *select;
    size_t n_select;
    /* How the file is read (added in 1.2; wm_direct_io): WM_DIRECT_AUTO (0, the default) reads
     * what the page cache holds through it and the rest with O_DIRECT, per range, so a cold
     * load runs at the disk's speed and a warm one at memory's; WM_DIRECT_OFF reads everything
     * buffered; WM_DIRECT_ON everything with O_DIRECT, cached or not (for files that must not
     * enter the page cache; cuda.direct_io asks the same). Whatever the route, the bytes are the
     * file's; wm_model_stats.read_direct and read_buffered count them by route. For the modes
     * that read (heap, and the CUDA backend's staged path); another value, or OFF or ON with a
     * mode that only maps the file (mmap, mmap-private, the registered CUDA path), or OFF with
     * cuda.direct_io, is WM_EINVAL. */
    wm_direct_io direct_io;
} wm_load_options;

#define WM_LOAD_OPTIONS_INIT WM_SIZED_INIT(wm_load_options)

/* Starts a backend's runtime on `device` ahead of a load (CUDA: creates the device's primary
 * context, which stays until the process exits, and rehearses each kind of call a load makes,
 * a few thousand small copies, so that the host memory the runtime keeps is set up now), so
 * that memory figures taken afterwards do not count the runtime's own memory and load/release
 * cycles return to them. Optional: a load starts the runtime itself. Leaves the
 * calling thread's current CUDA device as it was. WM_OK for the CPU backend; WM_EUNSUPPORTED
 * when this build lacks the backend; WM_EDEVICE (err names the problem) when there is no such
 * device or no driver. Thread-safe. */
WM_API wm_status wm_backend_init(wm_backend_kind backend, int device, wm_error *err);

/* Loads every tensor of `file` by opts->mode. The model holds the file until it is released
 * (wm_file_close may come first: see there). Worker threads exist only during this call.
 * Returns WM_OK and *out, or WM_EINVAL (bad options, including mode NONE and lock with
 * mmap-private), WM_EPERM (lock required over RLIMIT_MEMLOCK), WM_ENOMEM, WM_EIO, WM_EFORMAT
 * (the file changed or is shorter than its header says), WM_ECANCELED, WM_EUNSUPPORTED, WM_EDEVICE.
 * On failure nothing is held. */
WM_API wm_status wm_model_load(wm_file *file, const wm_load_options *opts, wm_model **out,
                               wm_error *err);
/* Releases every mapping, buffer, lock, registration and device allocation of a model, in the
 * order device views, registrations, locks, mappings and pages; where its file was closed
 * already and this was its last model, the file too. Synchronous; may run on any thread.
 * Accepts NULL. */
WM_API void wm_model_release(wm_model *model_from_wm_model_load);

/* The file a model was loaded from; borrowed, valid until the model is released (even after
 * wm_file_close). */
WM_API const wm_file *wm_model_file(const wm_model *model);
WM_API wm_mode wm_model_mode(const wm_model *model);
/* "heap", "mmap", "mmap-private"; NULL for another value. */
WM_API const char *wm_mode_name(wm_mode mode);
/* Parses a mode name; WM_MODE_NONE when unknown. */
WM_API wm_mode wm_mode_from_name(const char *name);

/* The tensor's type and byte size as loaded (after any conversion, of its slice under tensor
 * parallelism or a row selection). WM_ENOENT for a tensor the selection left out. */
WM_API wm_status wm_model_tensor_info(const wm_model *model, size_t index, wm_type *type,
                                      uint64_t *nbytes);
/* The tensor's shape as loaded, in ggml order like wm_tensor_info.shape (a slice's under tensor
 * parallelism or a row selection), and how it was split. WM_EINVAL for NULL model or shape,
 * WM_ERANGE for an index out of range, WM_ENOENT for a tensor the selection left out. */
WM_API wm_status wm_model_tensor_shape(const wm_model *model, size_t index,
                                       uint64_t shape[WM_MAX_DIMS], uint32_t *n_dims,
                                       wm_split *split);
/* The device a tensor was placed on (CUDA: a device number, as in opts.devices); -1 for a host
 * backend or an index out of range. */
WM_API int wm_model_tensor_device(const wm_model *model, size_t index);
/* Host pointer of tensor `index` (CPU backend). Const for mmap mode; wm_model_tensor_data_mut
 * returns NULL for mmap mode. Both NULL when out of range or on a device backend. Borrowed. */
WM_API const void *wm_model_tensor_data(const wm_model *model, size_t index);
WM_API void *wm_model_tensor_data_mut(wm_model *model, size_t index);
/* Device pointer of tensor `index` (CUDA backend), as an integer; 0 when not on a device. */
WM_API uint64_t wm_model_tensor_device_ptr(const wm_model *model, size_t index);

/* Grows only at the end (see "the ABI promise"); set `size` before wm_model_stats_get. */
typedef struct wm_model_stats {
    uint32_t size;         /* sizeof(wm_model_stats) as the caller knows it: WM_MODEL_STATS_INIT */
    uint64_t tensor_bytes; /* bytes of tensor data */
    uint32_t buffers;      /* buffers (chunks) the tensors live in */
    uint64_t mapped_bytes; /* bytes of file mappings held */
    uint64_t heap_bytes;   /* bytes of page-allocated tensor memory held */
    uint64_t committed;    /* commit charge (mmap-private: whole mapping) */
    uint64_t locked_bytes; /* bytes actually under mlock */
    uint64_t device_bytes; /* bytes of device memory */
    unsigned threads;      /* worker threads the load used */
    double load_seconds;   /* wall time of wm_model_load */
    uint64_t bytes_read;   /* bytes the load read from the file with pread (0 for mappings;
                              a direct read counts the aligned blocks it covered) */
    /* Added in 1.2: the tensor bytes the load read by route (wm_load_options.direct_io): with
     * O_DIRECT, past the page cache, and through it. Their sum is the bytes asked of the file. */
    uint64_t read_direct;
    uint64_t read_buffered;
} wm_model_stats;

#define WM_MODEL_STATS_INIT WM_SIZED_INIT(wm_model_stats)

/* The model's figures, written into the first out->size bytes of *out (0: the 1.0 size);
 * out->size is left as it was. A NULL model writes zeros. */
WM_API void wm_model_stats_get(const wm_model *model, wm_model_stats *out);

/* The model's buffers: the host memory its tensors lie in, as the load laid it out, one buffer
 * per chunk (wm_model_stats.buffers of them): in the mmap modes one file mapping per shard, or
 * per max_buffer_size piece of one, starting at a page boundary of the file (so a buffer may
 * begin with header bytes before its first tensor); in heap mode one page-allocated block per
 * chunk. For handing the memory to a runtime that wants whole buffers (ggml:
 * include/weightmap_ggml.h). wm_model_buffer_data is NULL on a device backend, for an index out
 * of range and for a buffer of no bytes; the memory is the model's (borrowed), read-only in mode
 * mmap. wm_model_tensor_buffer says in which buffer tensor `index` lies and at which byte offset
 * from its start: WM_EINVAL for NULL model or out-parameters, WM_ERANGE for an index out of
 * range. */
WM_API size_t wm_model_buffer_count(const wm_model *model);
WM_API const void *wm_model_buffer_data(const wm_model *model, size_t index);
WM_API size_t wm_model_buffer_size(const wm_model *model, size_t index);
WM_API wm_status wm_model_tensor_buffer(const wm_model *model, size_t index, size_t *buffer,
                                        uint64_t *offset);

/* Added in 1.8.7: of [at, at + len), a range inside one buffer of a model in mode mmap or
 * mmap-private (wm_model_buffer_data; to the end of its last page), the bytes whose file pages the
 * page cache holds now, in *bytes: whole pages (a page the range only partly covers counts whole;
 * an empty range, 0), nothing faulted in, read or kept. The kernel's own count over the range in
 * one call (Linux 6.5 and later: cachestat(2), which walks the cache by folio: 0.06 ms for a warm
 * 1.3 GB file where mincore on a fresh mapping looks each page up, 9 ms, on the development VM);
 * WM_EUNSUPPORTED where the kernel has none (Linux before 6.5 or a seccomp filter refusing it;
 * Darwin), so that a caller can sample with mincore instead of paying a lookup per page. A
 * snapshot, never a promise. WM_EINVAL for a NULL model, at or bytes, another mode, or a range not
 * inside one buffer; a failing call's errno as a status otherwise (WM_EIO, WM_ENOMEM). */
WM_API wm_status wm_model_cached(const wm_model *model, const void *at, size_t len,
                                 uint64_t *bytes);

/* ---------------------------------------------------------------------------------------------
 * Memory figures: the operating system's view
 * ------------------------------------------------------------------------------------------- */

typedef struct wm_mem_figures {
    uint64_t footprint;     /* Anonymous + Swap + RssShmem (smaps_rollup): what the process costs */
    uint64_t resident;      /* Rss */
    uint64_t file_resident; /* RssFile */
    uint64_t locked;        /* VmLck */
    uint64_t committed;     /* VmData */
} wm_mem_figures;

/* Figures for `pid` (0 = this process). WM_ENOENT: no such process; WM_EPERM; WM_EIO. */
WM_API wm_status wm_mem_figures_get(int pid, wm_mem_figures *out, wm_error *err);

typedef struct wm_file_region {
    uint64_t start, end; /* virtual addresses */
    uint64_t offset;     /* file offset of start */
    char perms[5];       /* "r--s", "rw-p", ... */
    uint64_t size;       /* end - start */
    uint64_t rss;        /* Rss */
    uint64_t privatised; /* Anonymous: pages copied from the file into private memory */
    uint64_t private_dirty;
    uint64_t locked; /* Locked */
    char path[256];  /* mapped file path (truncated) */
} wm_file_region;

/* Regions of process `pid` (0 = self) that map the file at `path` (matched by device and inode),
 * or every file-backed region whose path ends in ".gguf" or ".safetensors" when path is NULL.
 * Writes at most `cap` entries, and the number found to *count (which may exceed cap).
 * WM_ENOENT: no such process or file. */
WM_API wm_status wm_mem_file_regions(int pid, const char *path, wm_file_region *regions, size_t cap,
                                     size_t *count, wm_error *err);

/* ---------------------------------------------------------------------------------------------
 * Budgets (added in 1.7): what a load will cost before it runs, what the system has, and a pool
 * of models under a budget
 * ------------------------------------------------------------------------------------------- */

/* Bytes of one load by kind (wm_cost). pinned and locked are parts of the other host kinds, not
 * added to them. */
typedef struct wm_cost_bytes {
    uint64_t anonymous;    /* private anonymous host memory: heap-mode tensor pages, staging rings
                              and windows, worker stacks, conversion buffers, the plan's tables
                              (ledger: heap + scratch) */
    uint64_t file_shared;  /* MAP_SHARED read-only file mappings: page-cache pages, evictable
                              unless locked (ledger: map_shared) */
    uint64_t file_private; /* MAP_PRIVATE writable mappings, commit-charged in full
                              (ledger: map_private) */
    uint64_t locked;       /* of the above, the bytes under mlock */
    uint64_t pinned;       /* of the above, the bytes registered with or allocated for a device */
    uint64_t device;       /* device memory, every device together (per device: device_peak) */
} wm_cost_bytes;

/* What a load will cost (wm_model_cost). Grows only at the end (the ABI promise). */
typedef struct wm_cost {
    uint32_t size;        /* sizeof(wm_cost) as the caller knows it: WM_COST_INIT */
    wm_cost_bytes peak;   /* at the load's peak: an upper bound of what the load holds at once */
    wm_cost_bytes loaded; /* once the load has returned, while the model is held */
    /* Host bytes the model may hold resident (anonymous + file_shared + file_private), at the
     * peak and while loaded: what a wm_pool budget is charged. */
    uint64_t host_peak, host_loaded;
    /* Of host_peak, what the system must have available (MemAvailable, the cgroup's room):
     * anonymous + file_private + the locked part of file_shared; a shared mapping's other pages
     * are page cache the kernel can drop. */
    uint64_t host_needed;
    /* Device memory per device number (0 .. WM_LEDGER_DEVICES-1), at the peak. */
    uint64_t device_peak[WM_LEDGER_DEVICES];
    /* The same load as the ledger counts it, per category (wm_ledger_category): the load raises
     * each category's peak by at most ledger_peak[c] above its current when the load starts,
     * and leaves its current raised by at most ledger_loaded[c]. */
    uint64_t ledger_peak[WM_LEDGER_COUNT];
    uint64_t ledger_loaded[WM_LEDGER_COUNT];
    unsigned threads; /* threads the load would run (the plan's worker count) */
    /* Device memory per device number while loaded (the device buffers: the same as at the
     * peak, since no staging lives on a device). */
    uint64_t device_loaded[WM_LEDGER_DEVICES];
} wm_cost;

#define WM_COST_INIT WM_SIZED_INIT(wm_cost)

/* What loading `file` with `opts` will cost, computed from the load plan wm_model_load would run
 * (the same checks, the same plan, the backend's staging: reader threads and their stacks,
 * direct-I/O staging, conversion buffers, the CUDA staging ring), without loading anything: no
 * tensor byte is read, nothing is mapped or allocated on a device. The figures are upper
 * bounds (docs/ARCHITECTURE.md, "Budgets", says by how much and why). Writes the first
 * out->size bytes of *out (out->size is left as it was).
 * Returns WM_OK, or what wm_model_load would return before it acquires anything: WM_EINVAL (bad
 * options), WM_EFORMAT (the file changed since it was opened), WM_EUNSUPPORTED (no such
 * backend in this build), WM_ENOMEM. Holds nothing afterwards. Thread-safe as a reader of
 * `file`. */
WM_API wm_status wm_model_cost(wm_file *file, const wm_load_options *opts, wm_cost *out,
                               wm_error *err);

/* What the system has now (wm_mem_available_get). UINT64_MAX: unknown or unlimited. Grows only
 * at the end. */
typedef struct wm_mem_available {
    uint32_t size;           /* sizeof(wm_mem_available): WM_MEM_AVAILABLE_INIT */
    uint64_t host;           /* what a load may take: the least of mem_available and the cgroup's
                                room (cgroup_limit - cgroup_current) */
    uint64_t mem_available;  /* Linux: MemAvailable (/proc/meminfo); Darwin:
                                os_proc_available_memory where the SDK has it (iOS, tvOS,
                                watchOS), unknown on macOS */
    uint64_t cgroup_limit;   /* Linux cgroup v2: the tightest memory.max from this process's
                                cgroup up to the root (v1's memory.limit_in_bytes where v2 has
                                none); UINT64_MAX: none */
    uint64_t cgroup_current; /* memory.current of that cgroup */
    uint64_t device_free;    /* the device asked for: free memory (CUDA: cudaMemGetInfo) */
    uint64_t device_total;
} wm_mem_available;

#define WM_MEM_AVAILABLE_INIT WM_SIZED_INIT(wm_mem_available)

/* Fills *out (its first out->size bytes) with what the system has now, and for backend CUDA
 * what device `device` has free (through the backend; for WM_BACKEND_CPU device_free and
 * device_total are UINT64_MAX). Returns WM_OK, or WM_EIO (a figure could not be read: err names
 * the source), WM_EUNSUPPORTED (no CUDA backend in this build), WM_EDEVICE (no such device).
 * Thread-safe. */
WM_API wm_status wm_mem_available_get(wm_backend_kind backend, int device, wm_mem_available *out,
                                      wm_error *err);

/* A pool of models under a budget. get() returns the model resident for (path, mode, lock,
 * backend, device) or loads it; before a load, idle models (put back, not in use) are evicted,
 * least recently used first, until the load's cost (wm_model_cost: host_peak and device_peak,
 * plus the bytes the opened file holds) fits beside what stays; an eviction is proven by the
 * ledger (its categories fell by every byte the ledger rose by when that model came) before the
 * next load starts: an eviction the ledger does not prove stops the get (WM_EIO). A model in use is
 * never evicted. A load that cannot fit, even with every idle model gone, is refused before
 * anything is evicted. Evicting a mapped (mmap) CPU model leaves its pages in the page cache, so
 * its next get is a warm load (the pool counts it a wake). All calls are thread-safe; gets, puts
 * and evictions are serialised by the pool's lock (a load runs under it, so that the ledger's proof
 * is the pool's alone: a load elsewhere in the process during an eviction can make it unproven,
 * counted in wm_pool_stats.unproven). */
typedef struct wm_pool wm_pool;

typedef struct wm_pool_options {
    uint32_t size;          /* sizeof(wm_pool_options): WM_POOL_OPTIONS_INIT */
    uint64_t budget;        /* host bytes (wm_cost.host_peak) the pool's models may hold; 0: none */
    uint64_t device_budget; /* device bytes per device (wm_cost.device_peak); 0: no limit */
    uint32_t flags;         /* WM_POOL_SLEEP */
} wm_pool_options;

#define WM_POOL_OPTIONS_INIT WM_SIZED_INIT(wm_pool_options)

/* wm_pool_options.flags: where a device needs room and an idle model of a backend that can
 * sleep (CUDA) holds it, the model sleeps rather than goes, if the host budget has room for it:
 * its device memory copied into one page-allocated host copy of exactly its device bytes (ledger:
 * heap; never pinned: since 1.8.1 the copies go through a small registered bounce ring, which
 * the host budget must have room for too), and freed on the device (proven by the ledger as an
 * eviction is); its next get wakes it, copying the weights back through the ring (pieces
 * queued over a few streams a device, every device buffer made first), with new device
 * pointers (ask wm_model_tensor_device_ptr again after every get), and gives the host copy
 * back. A sleeping model holds its host copy, charged to the budget, until it wakes or is
 * evicted. wm_pool_stats' last_wake_* and last_sleep_* say where the time went. */
#define WM_POOL_SLEEP 1u

typedef struct wm_pool_stats {
    uint32_t size;      /* sizeof(wm_pool_stats): WM_POOL_STATS_INIT */
    uint32_t resident;  /* models held (idle and in use) */
    uint32_t in_use;    /* of them, in use (got and not yet put back) */
    uint64_t held;      /* bytes the resident models hold, as the ledger counted them at load */
    uint64_t held_peak; /* the most held at once, loads' peaks included (charged at host_peak) */
    uint64_t loads;     /* loads (wakes included) */
    uint64_t hits;      /* gets served by a resident model */
    uint64_t wakes;     /* models asleep brought back: a mapped CPU model reloaded from the page
                           cache, a device model's weights copied back from host memory */
    uint64_t evictions;
    uint64_t returned;        /* bytes the evictions returned, by the ledger */
    uint64_t unproven;        /* evictions after which the ledger did not show every byte back */
    double last_get_seconds;  /* wall time of the last get (its evictions and load) */
    uint64_t last_returned;   /* bytes the last get's evictions returned */
    uint32_t last_evicted;    /* models the last get evicted */
    uint64_t returned_device; /* device bytes the evictions and sleeps returned, by the ledger */
    uint64_t last_returned_device; /* device bytes the last get's evictions returned */
    uint64_t sleeps;               /* device models put to sleep in host memory */
    uint32_t asleep;               /* of the resident models, asleep in host memory */
    double last_wake_seconds;      /* the last get's wake from host memory alone (0: none) */
    /* Added in 1.8. The last get's wake from host memory (WM_POOL_SLEEP), part by part, in
     * seconds (0: none): the device buffers made; the copies back (through a small pinned
     * bounce ring, pieces queued over a few streams a device, until the last has ended); the
     * ring unregistered (unpinned; in 1.8, the whole host copy); its pages and the
     * host copy's given back. And the bytes it copied. */
    double last_wake_alloc_seconds;
    double last_wake_copy_seconds;
    double last_wake_unregister_seconds;
    double last_wake_free_seconds;
    uint64_t last_wake_bytes;
    /* The last get's sleeps (the idle models it put to sleep to make room; summed when several),
     * whole and part by part, in seconds (0: none): the host copy's pages (and the bounce
     * ring's) mapped and faulted in (by the load's threads, at once); the ring registered with
     * the devices (pinned; in 1.8, the whole host copy); the copies from the devices
     * (through the ring, until the last is in the host copy); the device buffers freed. And the
     * bytes they copied. */
    double last_sleep_seconds;
    double last_sleep_alloc_seconds;
    double last_sleep_register_seconds;
    double last_sleep_copy_seconds;
    double last_sleep_free_seconds;
    uint64_t last_sleep_bytes;
} wm_pool_stats;

#define WM_POOL_STATS_INIT WM_SIZED_INIT(wm_pool_stats)

/* Opens an empty pool. WM_EINVAL for NULL out or a bad options struct; WM_ENOMEM. */
WM_API wm_status wm_pool_open(const wm_pool_options *opts, wm_pool **out, wm_error *err);
/* The model for `path` loaded with `opts` (opts->size as for wm_model_load; the pool keys a
 * model by path, mode, lock, backend and device, and takes the other options from the load that
 * made it), marked in use (each get needs one put). The model stays the pool's: never release
 * it; wm_pool_put gives it back. Returns WM_OK and *out, or: what wm_file_open, wm_model_cost
 * and wm_model_load return; WM_ENOMEM naming the file and the bytes when its cost is larger
 * than the budget, or than the budget less the models in use (nothing is evicted then);
 * WM_EFORMAT when the file changed (size, modification time, inode of the path asked for: a set's
 * index) since its resident model was loaded (the stale model is evicted once idle; the next get
 * loads the file anew); WM_EIO when the ledger did not show every byte of an evicted (or slept)
 * model back, naming it and the bytes (the load does not start). On failure nothing of the call is
 * held (models evicted to make room stay evicted). */
WM_API wm_status wm_pool_get(wm_pool *pool, const char *path, const wm_load_options *opts,
                             wm_model **out, wm_error *err);
/* Gives back one use of a model from wm_pool_get; the model stays resident, idle once its last
 * use is back. WM_EINVAL naming the file for a model that is not in use (put back twice) or is
 * not this pool's; nothing changes then. */
WM_API wm_status wm_pool_put(wm_pool *pool, wm_model *model, wm_error *err);
/* The pool's figures, into the first out->size bytes of *out. NULL pool: zeros. */
WM_API void wm_pool_stats_get(wm_pool *pool, wm_pool_stats *out);
/* Evicts every idle model now (each proven as at a get). Returns the bytes returned. */
WM_API uint64_t wm_pool_trim(wm_pool *pool);
/* Closes the pool: every model released, then the pool. Refuses while a model is in use:
 * WM_EINVAL naming its file and its uses, and the pool stays open and whole (put the models
 * back, then close again). NULL: WM_OK. Not to be called while another thread uses the pool. */
WM_API wm_status wm_pool_close(wm_pool *pool, wm_error *err);

/* ---- objects of other libraries in a pool (added in 1.8) ----
 * A pool can hold, beside weightmap's own models, objects that another library loads and frees
 * (a bridge's: wm_llama_pool_get in weightmap_llama.h holds llama.cpp models this way). The
 * object's owner hands the pool four functions (wm_pool_owner): what a load will cost, the
 * load, the object's one release function, and what the owner holds now outside the ledger. The
 * pool treats such an object as one of its models: keyed by (owner, path, the caller's key
 * bytes), charged by its cost before the load and refused before anything is evicted when it
 * cannot fit, evicted least recently used first (models and objects alike) only when idle, and
 * each eviction proven before the next load starts: the ledger's categories fell by what they
 * rose by across the object's load (the bytes weightmap holds for it, such as a file's mapping),
 * and the owner's counts (wm_pool_counts) fell by what they rose by then. What neither the ledger
 * nor the owner's counts see cannot be proven and is not claimed. */

/* What an owner holds now, process-wide, outside weightmap's ledger (wm_pool_owner.count). */
typedef struct wm_pool_counts {
    uint32_t size;                      /* sizeof(wm_pool_counts): set by the pool */
    uint64_t host;                      /* host bytes the owner accounts for (its own pages) */
    uint64_t device[WM_LEDGER_DEVICES]; /* device memory in use per device number, by the
                                           device's own figure (total - free): 0 where none */
} wm_pool_counts;

/* An owner's functions (wm_pool_get_object). The pool copies the struct into each entry; `name`
 * must outlive the pool. Called with the pool's lock held: none may call into the same pool. */
typedef struct wm_pool_owner {
    uint32_t size;    /* sizeof(wm_pool_owner): WM_POOL_OWNER_INIT */
    const char *name; /* names the owner in messages ("llama.cpp") */
    /* What loading `path` with `args` will cost (host_peak and device_peak are charged, as a
     * model's wm_model_cost is); on failure nothing is held and nothing is evicted. */
    wm_status (*cost)(void *args, const char *path, wm_cost *out, wm_error *err);
    /* Loads: WM_OK and a non-NULL *object, or a failure that holds nothing. */
    wm_status (*load)(void *args, const char *path, void **object, wm_error *err);
    /* The object's one release function: frees every byte load acquired; cannot fail. */
    void (*release)(void *object);
    /* What the owner holds now (NULL: nothing outside the ledger; the ledger alone proves). */
    void (*count)(wm_pool_counts *out);
} wm_pool_owner;

#define WM_POOL_OWNER_INIT WM_SIZED_INIT(wm_pool_owner)

/* The object for (owner, path, key) resident in the pool, or loaded by owner->load after idle
 * models and objects are evicted, least recently used first, until owner->cost's host_peak (and
 * device_peak per device) fits the budget beside what stays; marked in use (each get needs one
 * wm_pool_put_object). `key` (key_len bytes, copied; NULL with 0) is what makes two loads of the
 * same path different objects (the owner's load parameters, as bytes); `args` is handed to cost
 * and load during this call only. Returns WM_OK and *out, or: WM_EINVAL (NULL pool, path, owner,
 * function or out; a bad owner struct); what cost and load return (nothing evicted when cost
 * fails); WM_ENOMEM naming the file and the bytes where the cost exceeds the budget, or the
 * budget less what is in use (nothing evicted); WM_EFORMAT where the file changed since its
 * resident object was loaded (as wm_pool_get); WM_EIO where an eviction was not proven (the
 * ledger or the owner's counts did not fall by what they rose by), naming it and the bytes: the
 * load does not start. The object stays the pool's: never release it yourself. Thread-safe. */
WM_API wm_status wm_pool_get_object(wm_pool *pool, const char *path, const wm_pool_owner *owner,
                                    const void *key, size_t key_len, void *args, void **out,
                                    wm_error *err);
/* Gives back one use of an object from wm_pool_get_object; WM_EINVAL naming the file for an object
 * not in use (put back twice), or one that is not this pool's; nothing changes then. */
WM_API wm_status wm_pool_put_object(wm_pool *pool, void *object, wm_error *err);

#ifdef __cplusplus
}
#endif

#endif /* WEIGHTMAP_H */
