/*
 * weightmap_llama.h: llama.cpp models loaded by weightmap's reader through llama.cpp's own public
 * API (library weightmap_llama, built where llama.cpp's headers and libraries are found; the core
 * library never needs it). docs/LLAMA.md is the guide.
 *
 * wm_llama_load is a drop-in for llama_model_load_from_file: the same llama_model_params, a
 * llama_model that llama_model_free frees, as any. Underneath, weightmap opens and checks the
 * GGUF file (a truncated or crafted file is refused with weightmap's message before llama.cpp
 * is called), hands llama.cpp the file's metadata and tensor table as a gguf_context, and lets
 * llama_model_init_from_user (llama.cpp v0.4.0) create the model and allocate its buffers in
 * its own buffer types (CPU, repacked CPU, GPU). Then weightmap's reader
 * (wm_file_read_tensors) fills every tensor in parallel: straight into host buffers, and
 * through a bounded page-allocated window and ggml_backend_tensor_set into any other (device
 * buffers; the CPU's repack buffers, in row groups: wm_llama_repack); in the mapped load modes
 * (params.load_mode MMAP, MMAP_MLOCK, and AUTO where it resolves to MMAP: wm_llama_load_mode)
 * the tensors of the plain CPU buffer point into a shared, read-only mapping of the file instead.
 * When the call returns, nothing of weightmap's is held (its ledger is as before: the file is
 * closed, every thread, window and table is gone) but, in the mapped modes, that mapping, which
 * the model's CPU buffer holds and llama_model_free releases; the model's memory is llama.cpp's,
 * in llama.cpp's buffers. Where the model
 * runs on the CPU those buffers are, by default, pages the bridge maps for llama.cpp's own buffer
 * types and llama_model_free unmaps (wm_llama_buffers: they rely on ggml's internal buffer
 * layout, used only when the ggml the process runs is the version the bridge was built with;
 * otherwise llama.cpp allocates them, as without the bridge), and the load ends with
 * malloc_trim(0) on glibc (wm_llama_trim).
 *
 * What llama_model_init_from_user does differently from llama.cpp's file loader, and what the
 * bridge does about it:
 *   - it checks no tensor against the file (it creates each tensor with the shape the
 *     architecture expects and the file's type): the bridge refuses a load where a tensor's
 *     type, shape or size differs from the file's (WM_EFORMAT, naming both);
 *   - it creates the optional tensors a file lacks (biases, rope frequency factors) instead of
 *     leaving them out: the bridge fills such a bias with zeros and such factors with ones (what
 *     leaving them out computes), and refuses any other tensor the file lacks; a model whose
 *     output head is its token embedding (no output.weight) gets output.weight as a copy of
 *     token_embd.weight of the same type, as llama.cpp's file loader does;
 *   - it turns off the extra buffer types (params.use_extra_bufts, the CPU's repacked weights):
 *     where the caller's params ask for them (the default) and the model runs on the CPU, the
 *     bridge asks for them back per tensor through params.tensor_buft_overrides, choosing as
 *     llama.cpp does (the first extra buffer type whose device supports the tensor's matrix
 *     product), after any overrides of the caller's own.
 *
 * Conventions are weightmap.h's: WM_OK is 0; `err` is optional and caller-owned; *out is written
 * on success only (NULL on failure); on failure nothing is held (no model, no mapping, no
 * ledger byte). llama.cpp's backends must be loaded first (ggml_backend_load_all or
 * ggml_backend_load_all_from_path), as for llama_model_load_from_file.
 */
#ifndef WEIGHTMAP_LLAMA_H
#define WEIGHTMAP_LLAMA_H

#include "weightmap.h"

#include <llama.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a load did (wm_llama_options.stats). Grows only at the end; set `size`. */
typedef struct wm_llama_stats {
    uint32_t size;        /* sizeof(wm_llama_stats) as the caller knows it */
    size_t tensors;       /* tensors llama.cpp asked for (set_tensor_data calls) */
    size_t in_place;      /* read straight into host buffers */
    size_t windowed;      /* through the window and ggml_backend_tensor_set */
    size_t repacked;      /* of those, into an extra (repack) buffer type */
    size_t filled;        /* absent from the file: zeros (biases) or ones (rope factors) */
    uint64_t bytes_read;  /* tensor bytes read from the file */
    double seconds_model; /* llama_model_init_from_user: metadata, model, buffers */
    double seconds_read;  /* wm_file_read_tensors: every tensor's bytes */
    /* added with the bridge's own buffers (a caller of the older header: size says less) */
    uint64_t bytes_own;  /* weight buffer bytes in the bridge's own pages (wm_llama_buffers) */
    double seconds_trim; /* malloc_trim at the end of the load (wm_llama_trim) */
    /* added in 1.3 */
    uint64_t bytes_prefetched; /* asked to be read ahead during the model's making (prefetch) */
    /* added in 1.5 */
    size_t repacked_rows; /* of the repacked, handed over in row groups as read (repack AUTO) */
    /* added in 1.6 */
    uint64_t bytes_laid_out; /* of the in-place tensors' bytes, those whose place agrees with
                                their file offset on the 4 KiB grid (the bridge's own buffers
                                start where most do): read direct into place, no staging copy */
    /* added in 1.7: the load mode (wm_llama_options.load_mode, params.load_mode) */
    int32_t load_mode_asked; /* enum llama_load_mode as asked (LLAMA_LOAD_MODE_AUTO included) */
    int32_t load_mode;       /* enum llama_load_mode the load used: never AUTO */
    uint32_t load_mode_fell_back; /* 1: AUTO resolved to MMAP, which this load could not map (see
                                     wm_llama_load_mode), and it read instead: load_mode NONE */
    uint32_t lock_short;          /* 1: mlock refused some bytes (RLIMIT_MEMLOCK): the load
                                     warned through llama.cpp's log and went on, as llama.cpp does */
    size_t mapped;                /* tensors backed by the file's MAP_SHARED, PROT_READ mapping
                                     (the mapped modes), not read */
    uint64_t bytes_mapped;        /* their bytes */
    uint64_t bytes_mapped_cached; /* of those, in the page cache when the populate began
                                     (1.8.7: the kernel's count, cachestat, where it has one;
                                     else mincore's when the populate came to them, 1 MiB at a
                                     time; 1.8.3: before, when the load began) */
    uint64_t bytes_locked;        /* bytes under mlock (MLOCK, MMAP_MLOCK) */
    double seconds_populate;      /* bringing the mapped pages in (MADV_POPULATE_READ): from
                                     its start to its last piece done (1.8.2; before, to its
                                     join after the reads) */
    unsigned populate_threads;    /* threads that did it (more where the bytes were cold) */
    /* added in 1.7: the tensors in CUDA buffers (upload AUTO) */
    size_t staged;         /* filled by weightmap's staged pipeline into their device addresses */
    uint64_t bytes_staged; /* their bytes */
    double seconds_staged; /* that fill, start to end (before the read seconds_read times) */
    /* added in 1.8: the mapped modes with layers on a GPU */
    int32_t cpu_layers; /* the repeating layers llama.cpp keeps on the CPU, whose tensors (with
                           the input layer's) are mapped, as in llama.cpp's mmap mode
                           (max(block_count + 1 - n_gpu_layers, 0)); -1 where the model runs on
                           the CPU (every tensor of its plain CPU buffer mapped) or nothing is */
    /* added in 1.8: the device's tensors loaded ahead, during the model's making (prefetch AUTO,
     * see wm_llama_prefetch); staged and bytes_staged count them too */
    size_t ahead;              /* tensors copied into place from the ahead buffer */
    uint64_t bytes_ahead;      /* bytes the read ahead loaded to the device */
    double seconds_ahead;      /* the read ahead, start to end (beside seconds_model) */
    double seconds_ahead_wait; /* of it, what the load waited for once the model was made */
    double seconds_ahead_copy; /* the device-to-device copies into llama.cpp's buffers */
    /* added in 1.8.1 */
    double seconds_ahead_buffer; /* of seconds_ahead, the making of its device buffer (a
                                    cudaMalloc of the tensors' bytes), before its first read */
    /* added in 1.8.2: the mapped modes' repacked tensors whose bytes the page cache holds are
     * converted straight from the file's mapping (no read; repacked counts them too) */
    size_t repacked_mapped;         /* tensors */
    uint64_t bytes_repacked_mapped; /* their bytes (not in bytes_read) */
    double seconds_repacked_mapped; /* that conversion, start to end (before seconds_read) */
    /* added in 1.8.4: of those, converted while llama.cpp made the model, into pages moved into
     * their places as it made the buffers (docs/LLAMA.md, "Warm loads: the conversion beside the
     * making"); repacked_mapped and bytes_repacked_mapped count them too */
    size_t repacked_early;
    uint64_t bytes_repacked_early;
    double seconds_early; /* from the making's start to the last of those conversions */
} wm_llama_stats;

#define WM_LLAMA_STATS_INIT WM_SIZED_INIT(wm_llama_stats)

/* wm_llama_options.repack. A repack buffer's ggml_backend_tensor_set takes a tensor only whole;
 * since 1.5 AUTO hands it each piece as it is read instead, as a tensor of the piece's rows (a
 * shallow copy of the tensor's struct over its place in the buffer): ggml's CPU_REPACK layouts
 * interleave 4, 8 or 16 rows and lay the groups out in order, each the size of its rows, so 16
 * rows repacked alone land where they lie in the whole. The bridge does not take that on trust.
 * Only CPU_REPACK qualifies (ggml's AMX type, the first extra type on a CPU with AMX, packs q8_0
 * rows bigger than the file's, and converts each call's tensor with a thread per CPU of its own:
 * in pieces, slower), only a layout the size of the file's rows (the buffer type's alloc size is
 * the tensor's nbytes), and for each buffer
 * type, tensor type and row length the bridge first repacks 32 rows of patterned bytes whole and
 * as two halves and compares; where the layout's size differs or the two do, or a tensor's rows
 * are not a multiple of 16, that tensor is handed over whole, as WHOLE does. In pieces no window
 * of a tensor's size is needed and the repack runs beside the reads (docs/LLAMA.md, "Cold
 * loads"). */
typedef enum wm_llama_repack {
    WM_LLAMA_REPACK_AUTO = 0, /* as params.use_extra_bufts says (llama.cpp's default: on) */
    WM_LLAMA_REPACK_OFF = 1,  /* plain CPU buffers whatever params say */
    WM_LLAMA_REPACK_WHOLE = 2 /* as AUTO, each repacked tensor handed over whole once read, in a
                                 window of its size (1.4's way; a 1.4 bridge refuses it) */
} wm_llama_repack;

/* wm_llama_options.upload */
typedef enum wm_llama_upload {
    WM_LLAMA_UPLOAD_AUTO = 0,      /* host buffers read in place; a CUDA device's buffers filled by
                                      weightmap's staged pipeline straight into each tensor's device
                                      address (where this weightmap has the CUDA backend:
                                      wm_backend_available; stats.staged counts them); every other
                                      buffer through the window and ggml_backend_tensor_set */
    WM_LLAMA_UPLOAD_WINDOW = 1,    /* every tensor through the window and ggml_backend_tensor_set,
                                      as device buffers are (to exercise that path on a CPU) */
    WM_LLAMA_UPLOAD_TENSOR_SET = 2 /* host buffers in place, every device buffer (CUDA's too)
                                      through the window and ggml_backend_tensor_set (added in
                                      1.7: AUTO's way before it; a 1.6 bridge refuses it) */
} wm_llama_upload;

/* wm_llama_options.buffers: who allocates the weight buffers of a model that runs on the CPU
 * (n_gpu_layers 0, or no GPU among its devices; with layers on a GPU every buffer is llama.cpp's,
 * but in the mapped modes the CPU's buffer, whose tensors lie in the mapping: wm_llama_load_mode).
 * llama.cpp takes a CPU buffer from posix_memalign: once a first model is freed glibc's mmap
 * threshold rises past its size, and every later model's weights come from the heap and stay in
 * the process's footprint after llama_model_free. The bridge's own buffers are pages it maps and
 * llama_model_free unmaps, of llama.cpp's own buffer types in every other respect (the same
 * types, names, kernels and repacked layouts). They rely on ggml's internal buffer layout, so
 * they are used only where the ggml the process runs is the one the bridge was built with
 * (ggml_version(), the CPU backend's API version, and a probe of each buffer type); elsewhere,
 * and for a buffer type that does not hold its memory as ggml's CPU type does, llama.cpp
 * allocates, as without the bridge (wm_llama_stats.bytes_own: 0). */
typedef enum wm_llama_buffers {
    WM_LLAMA_BUFFERS_AUTO = 0, /* the bridge's own pages where they can be */
    WM_LLAMA_BUFFERS_LLAMA = 1 /* llama.cpp allocates every buffer */
} wm_llama_buffers;

/* wm_llama_options.trim: llama.cpp's model construction frees malloc scratch during the load
 * (vocabulary tables, the gguf_context: 2.8 MiB in 17 blocks for a 64 MiB model), which the
 * allocator keeps cached. AUTO returns the process's free malloc memory to the system once the
 * load is done (glibc's malloc_trim(0): it walks every arena; docs/LLAMA.md says what it costs);
 * elsewhere than glibc, nothing. */
typedef enum wm_llama_trim {
    WM_LLAMA_TRIM_AUTO = 0, /* malloc_trim(0) at the end of every load, success or failure */
    WM_LLAMA_TRIM_OFF = 1   /* leave the allocator's caches as they are */
} wm_llama_trim;

/* wm_llama_options.prefault (added in 1.3; ON and AUTO's meaning since 1.4): the weight buffers
 * are fresh memory, which the kernel zeroes page by page as the reads first write it. ON has one
 * more thread of the reading engine fault the host buffers in ahead of the reads (wm_read_options'
 * WM_READ_PREFAULT: MADV_POPULATE_WRITE, 2 MiB a call, only where the bytes come from the disk),
 * so that the zeroing runs beside the disk's reads instead of inside the copies. It writes no
 * byte and holds nothing after the load. AUTO does not (1.3's AUTO did): it gained nothing that
 * could be measured (on the 16-CPU H200 host, cold loads as medians of the rounds' ratios to the
 * disk, off against on: 0.99x/0.95x, 0.87x/0.83x, 0.93x/0.92x, 0.96x/1.01x; bench/RESULTS.md,
 * llama, 1.4; on the 2-CPU development VM nothing beyond the noise), warm loads never use it
 * (cached bytes are not prefaulted), and without it a load starts one thread fewer. */
typedef enum wm_llama_prefault {
    WM_LLAMA_PREFAULT_AUTO = 0, /* as OFF (since 1.4) */
    WM_LLAMA_PREFAULT_OFF = 1,  /* the reads' copies fault them, as llama.cpp's own loader does */
    WM_LLAMA_PREFAULT_ON = 2    /* fault host buffers in ahead of the reads (1.4; 1.3's AUTO; a 1.3
                                   library refuses it, WM_EINVAL) */
} wm_llama_prefault;

/* wm_llama_options.prefetch (added in 1.3): llama.cpp makes the model (metadata, vocabulary,
 * buffers: 40-110 ms for a 1.1 GiB model) before the first tensor has a place to be read into.
 * AUTO has weightmap read the start of a cold file's tensor data meanwhile (wm_file_prefetch:
 * since 1.4 into memory of its own, past the page cache, until the reads begin; at most a
 * quarter of the tensor data and 256 MiB, 1.3: an eighth and 128 MiB into the page cache); the
 * reads copy those bytes and the memory is freed before wm_llama_load returns. So a load's peak
 * holds the weights plus what the disk read during the model's making. wm_llama_load only (a
 * file the caller opened is not touched), and not with direct_io OFF.
 * Since 1.8, with layers on one CUDA device (upload AUTO, this weightmap's CUDA backend, no
 * tensor_buft_overrides, split_mode not ROW), AUTO loads the tensors llama.cpp will put on that
 * device instead (by llama.cpp's own rule of which layers it offloads), during the making, into
 * a device buffer of the bridge's, and copies each into place device to device once the model is
 * made (stats.ahead; wm_llama_load and wm_llama_load_file alike). That buffer is freed before the
 * load returns, but during the load the device holds those bytes twice: it is made only where
 * the device's free memory holds them twice and keeps max(1 GiB, a sixteenth of the device)
 * besides; otherwise the load goes on without it. */
typedef enum wm_llama_prefetch {
    WM_LLAMA_PREFETCH_AUTO = 0, /* during the model's making: the device's tensors to the device
                                   (1.8), else the start of a cold file into memory */
    WM_LLAMA_PREFETCH_OFF = 1   /* the first read starts after llama.cpp has made the model */
} wm_llama_prefetch;

/* wm_llama_options.load_mode (added in 1.7): llama.cpp v0.4.0's enum llama_load_mode, which
 * params.load_mode carries, as the load does it:
 *   AUTO (-1, llama_model_default_params()'s): resolved as llama.cpp v0.4.0 resolves it
 *       (llama-model.cpp load_tensors): MMAP, unless a device of the model (params.devices, or
 *       else every GPU, or every integrated GPU where there is no discrete one; none with
 *       split_mode NONE and main_gpu < 0; that GPU alone with split_mode NONE) says it cannot map
 *       (ggml_backend_dev_props.caps.mmap_support false: CUDA and Vulkan integrated GPUs,
 *       OpenCL, Hexagon), then NONE. So: MMAP on a CPU, with layers on a discrete CUDA GPU
 *       (since 1.8 also with layers on a GPU, mapped: below), on Metal and on a discrete Vulkan
 * GPU; NONE on an integrated CUDA or Vulkan GPU, OpenCL and Hexagon. Where it resolves to MMAP but
 * this load cannot map (below), it reads (NONE), says so in wm_llama_stats (load_mode_fell_back)
 * and warns in llama.cpp's log. MMAP: every tensor llama.cpp keeps in a plain CPU buffer is backed
 * by one MAP_SHARED, PROT_READ mapping of the file (weightmap's WM_MODE_MMAP model, made before
 * llama.cpp is called; counted in the ledger while the model lives): never private, never written.
 * Its pages are brought in before the call returns (MADV_POPULATE_READ over the mapped tensors'
 * ranges, by more threads where the page cache holds under three quarters of them), so that
 * decoding does not fault them one at a time. Repacked (extra buffer type) tensors are read as NONE
 * reads them. The CPU buffer's free (llama_model_free) drops the mapping. With layers on a GPU
 * (n_gpu_layers != 0 and a GPU among the model's devices), as llama.cpp's mmap mode: the input
 * layer's tensors and those of the repeating layers below max(block_count + 1 - n_gpu_layers, 0)
 * stay on the CPU in the CPU's own buffer type (not the GPU's pinned host type: params.no_host is
 * set for llama.cpp) and are mapped, with any other tensor llama.cpp puts in a CPU buffer (a
 * caller's override to ggml's CPU type among them); the device buffers are filled as in NONE (CUDA:
 * weightmap's staged pipeline, cold bytes with O_DIRECT; other devices: the window and
 * ggml_backend_tensor_set), not through the page cache as llama.cpp's mmap mode fills them;
 * wm_llama_stats.cpu_layers says how many layers stayed. It needs the bridge's own CPU buffer type
 * (wm_llama_buffers: the ggml the bridge was built with, buffers AUTO, params.no_alloc false) and,
 * with layers on a GPU, the file's <arch>.block_count and no device of the model that makes its own
 * buffers from the mapping (caps.buffer_from_host_ptr: Metal, whose buffers llama.cpp's mmap mode
 *       maps too); elsewhere an explicit MMAP fails with WM_EUNSUPPORTED naming the mode and the
 *       reason, before llama.cpp is called.
 *   MLOCK: NONE, then each host buffer of the bridge's own pages locked (mlock), as llama.cpp
 *       locks each host buffer (the repacked types' buffers are not host: neither locks them;
 *       1.8.3 locked them; a buffer llama.cpp allocates is not locked: wm_llama_stats.bytes_locked
 *       counts what is).
 *   MMAP_MLOCK: MMAP, the mapped tensors' ranges locked (no repacked buffer, as in MLOCK).
 *       Over RLIMIT_MEMLOCK both lock what they can, warn in llama.cpp's log (as llama.cpp does)
 *       and go on: wm_llama_stats.lock_short.
 *   NONE, DIRECT_IO: weightmap's reader, as before 1.7 (wm_llama_options.direct_io: AUTO reads
 *       cold bytes with O_DIRECT).
 * Another value of params.load_mode is refused (WM_EINVAL) before llama.cpp is called. */
typedef enum wm_llama_load_mode {
    WM_LLAMA_LOAD_PARAMS = 0, /* as params.load_mode says (llama.cpp's default: AUTO) */
    WM_LLAMA_LOAD_AUTO = 1,   /* these choose, whatever params say: LLAMA_LOAD_MODE_X + 2 */
    WM_LLAMA_LOAD_NONE = 2,
    WM_LLAMA_LOAD_MMAP = 3,
    WM_LLAMA_LOAD_MLOCK = 4,
    WM_LLAMA_LOAD_MMAP_MLOCK = 5,
    WM_LLAMA_LOAD_DIRECT_IO = 6
} wm_llama_load_mode;

/* Grows only at the end (weightmap.h, "the ABI promise"); NULL for every default, or start from
 * WM_LLAMA_OPTIONS_INIT. */
typedef struct wm_llama_options {
    uint32_t size;          /* sizeof(wm_llama_options) as the caller knows it */
    unsigned threads;       /* reading threads; 0 = one per online CPU, at most 64 */
    wm_direct_io direct_io; /* as wm_read_options.direct_io */
    size_t window;          /* staging for tensors not in host buffers, all threads; 0 = 64 MiB
                               (a repacked tensor handed over whole takes a window of its own
                               size) */
    wm_llama_repack repack;
    wm_llama_upload upload;
    wm_llama_stats *stats; /* NULL, or filled on success (as far as its size reaches) */
    /* added with the bridge's own buffers (a caller of the older header: both AUTO) */
    wm_llama_buffers buffers;
    wm_llama_trim trim;
    /* added in 1.3 (a caller of an older header: both AUTO) */
    wm_llama_prefault prefault;
    wm_llama_prefetch prefetch;
    /* added in 1.7 (a caller of an older header: PARAMS) */
    wm_llama_load_mode load_mode;
} wm_llama_options;

#define WM_LLAMA_OPTIONS_INIT WM_SIZED_INIT(wm_llama_options)

/* Loads the GGUF model at `path` as llama_model_load_from_file(path, *params) would (params NULL:
 * llama_model_default_params(); load_mode as wm_llama_load_mode says). A split set loads from
 * any of its parts (weightmap opens the whole set). The model is the caller's, freed by
 * llama_model_free; nothing else is held after the call but, in the mapped modes, the file's
 * mapping, which the model's CPU buffer holds and llama_model_free releases.
 * Returns WM_OK and *out, or: WM_EINVAL (NULL path or out, a bad options struct or load_mode),
 * WM_EUNSUPPORTED (MMAP or MMAP_MLOCK asked where the bridge cannot map), WM_ENOENT,
 * WM_EPERM, WM_EIO, WM_ENOMEM, WM_EFORMAT (not GGUF, malformed, cut short, a tensor of a type or
 * shape llama.cpp cannot hold, or other than the model expects, or absent where it has no
 * neutral value: err names the file, the tensor and the field), WM_ECANCELED (the progress
 * callback returned false), WM_EDEVICE (llama.cpp refused the model: err carries the last error
 * line of llama.cpp's log, kept whatever the process's log callback does with it, e.g. a missing
 * hyperparameter, and says what to do where the cause is known: no ggml backend loaded, a
 * vocabulary-only file; or a buffer refused its bytes). */
WM_API wm_status wm_llama_load(const char *path, const struct llama_model_params *params,
                               const wm_llama_options *opts, struct llama_model **out,
                               wm_error *err);

/* The same from a file the caller opened (wm_file_open); the file stays the caller's (open
 * after the call, and may be closed at once: the model holds nothing of it). */
WM_API wm_status wm_llama_load_file(const wm_file *file, const struct llama_model_params *params,
                                    const wm_llama_options *opts, struct llama_model **out,
                                    wm_error *err);

/* ---- Models under a budget (added in 1.8; docs/LLAMA.md, "Models under a budget") ----
 *
 * What a load will cost before it runs, and llama models held in a wm_pool (weightmap.h) beside
 * weightmap's own models, under the pool's budget. */

/* What wm_llama_load(path, params, opts) will cost, into the first out->size bytes of *out (set
 * out->size: WM_COST_INIT), from the load's plan without loading anything: the file's tensor
 * table placed as the load places it (the load mode resolved as the load resolves it, AUTO's
 * fallback included; each tensor on the plain CPU buffer, an extra (repack) buffer type by
 * llama.cpp's rule at that type's own alloc size, or a GPU by n_gpu_layers as llama.cpp v0.4.0
 * offloads layers), by kind:
 *   - NONE, MLOCK, DIRECT_IO: anonymous, every tensor's bytes (llama.cpp's or the bridge's own
 *     buffers; MLOCK: locked too);
 *   - MMAP, MMAP_MLOCK: file_shared, the file's shared mapping (what wm_model_cost says of a
 *     WM_MODE_MMAP load of it: the ledger's map_shared while the model lives; MMAP_MLOCK: locked),
 *     and anonymous for the repacked tensors only;
 *   - device: the offloaded layers' bytes, charged to every GPU the model may use (split_mode
 *     NONE: main_gpu alone), an upper bound per device;
 *   - anonymous also holds a bound of what llama.cpp creates that the file lacks (a bias of f32
 *     rows per matrix and 64 KiB), the own buffers' page overhead, and an estimate of llama.cpp's
 *     own structures (the vocabulary: the file's header size while loaded, twice that at the
 *     peak); at the peak, the reading engine's staging (wm_model_cost's plan of a heap load of
 *     the file), the window where a tensor goes through it, the prefetch's most (a quarter of the
 *     tensor data, at most 256 MiB) and what the open file holds.
 * host_peak is what a pool charges. Upper bounds but for the vocabulary's estimate (which the
 * tests hold against the measured bytes: docs/LLAMA.md). Returns WM_OK, or what wm_llama_load
 * returns before llama.cpp is called (WM_EINVAL, WM_EUNSUPPORTED, the file's open and check
 * failures); holds nothing afterwards. llama.cpp's backends must be loaded first. */
WM_API wm_status wm_llama_cost(const char *path, const struct llama_model_params *params,
                               const wm_llama_options *opts, wm_cost *out, wm_error *err);

/* The llama model for (path, params, opts) resident in `pool`, or loaded by wm_llama_load after
 * idle models (weightmap's own and llama models alike) are evicted, least recently used first,
 * until wm_llama_cost's host_peak (and device_peak) fits the pool's budget beside what stays.
 * The pool keys a model by the path and the parameters and options that shape it (n_gpu_layers,
 * split_mode, the load mode as asked, main_gpu, the devices, tensor_split, the buffer type and kv
 * overrides, the flags; repack, upload, buffers): the same path asked with other parameters is
 * another model, loaded beside it. Threads, staging, trim, prefetch and the progress callback are
 * taken from the get that loads (opts->stats is filled by a get that loads). An eviction is
 * llama_model_free, proven before the next load starts (wm_pool_get_object): weightmap's ledger
 * fell by what the load left in it (a mapped mode's mapping), the bridge's own weight buffers
 * alive in the process fell by the model's, and each GPU's memory in use (total - free) fell by
 * what it rose by across the load. Buffers llama.cpp allocates itself (WM_LLAMA_BUFFERS_LLAMA, a
 * ggml other than the bridge's) are outside those counts: charged by the cost, not proven. A
 * model in use is never evicted; each get needs one wm_llama_pool_put, after the contexts made
 * from the model are freed (llama_free); never llama_model_free a pool's model. Returns WM_OK and
 * *out, or what wm_pool_get_object and wm_llama_load return: WM_ENOMEM naming the file when its
 * cost exceeds the budget (nothing evicted), WM_EIO when an eviction was not proven, the load's
 * own failures (nothing held). Thread-safe (the pool's lock is held across the load). */
WM_API wm_status wm_llama_pool_get(wm_pool *pool, const char *path,
                                   const struct llama_model_params *params,
                                   const wm_llama_options *opts, struct llama_model **out,
                                   wm_error *err);
/* Gives back one use of a model from wm_llama_pool_get (wm_pool_put_object): WM_EINVAL for a
 * model not in use (put back twice) or not this pool's; nothing changes then. */
WM_API wm_status wm_llama_pool_put(wm_pool *pool, struct llama_model *model, wm_error *err);

/* Loads ggml's backends, the one call a program makes before its first load: the CPU backend
 * (ggml as built for this bridge keeps it in libggml-cpu-*.so, one per CPU variant, and picks
 * the best for the CPU it runs on) and any device backend beside it, from `dir`, or when `dir`
 * is NULL from the folder ggml's own library was loaded from (installed: LIBDIR/weightmap/,
 * pkg-config --variable=ggml_backend_dir weightmap-llama; asked of the loader, so a moved install
 * still finds it), as ggml_backend_load_all_from_path(dir) does. Returns WM_OK when ggml has a CPU
 * device afterwards (also when one was loaded before), else WM_ENOENT (err names the folder).
 * Holds nothing of weightmap's; backends stay loaded for the process, as ggml's own. Call it
 * once, from one thread, before any other use of ggml's backends. */
WM_API wm_status wm_llama_backends_load(const char *dir, wm_error *err);

#ifdef __cplusplus
}
#endif

#endif /* WEIGHTMAP_LLAMA_H */
