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
 * buffers; the CPU's repack buffers, which take a tensor whole). When the call returns, nothing
 * of weightmap's is held (its ledger is as before: the file is closed, every thread, window and
 * table is gone); the model's memory is llama.cpp's, in llama.cpp's buffers.
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
} wm_llama_stats;

#define WM_LLAMA_STATS_INIT WM_SIZED_INIT(wm_llama_stats)

/* wm_llama_options.repack */
typedef enum wm_llama_repack {
    WM_LLAMA_REPACK_AUTO = 0, /* as params.use_extra_bufts says (llama.cpp's default: on) */
    WM_LLAMA_REPACK_OFF = 1   /* plain CPU buffers whatever params say */
} wm_llama_repack;

/* wm_llama_options.upload */
typedef enum wm_llama_upload {
    WM_LLAMA_UPLOAD_AUTO = 0,  /* host buffers read in place, every other through the window */
    WM_LLAMA_UPLOAD_WINDOW = 1 /* every tensor through the window and ggml_backend_tensor_set,
                                  as device buffers are (to exercise that path on a CPU) */
} wm_llama_upload;

/* Grows only at the end (weightmap.h, "the ABI promise"); NULL for every default, or start from
 * WM_LLAMA_OPTIONS_INIT. */
typedef struct wm_llama_options {
    uint32_t size;          /* sizeof(wm_llama_options) as the caller knows it */
    unsigned threads;       /* reading threads; 0 = one per online CPU, at most 64 */
    wm_direct_io direct_io; /* as wm_read_options.direct_io */
    size_t window;          /* staging for tensors not in host buffers, all threads; 0 = 64 MiB
                               (a repacked tensor takes a window of its own size) */
    wm_llama_repack repack;
    wm_llama_upload upload;
    wm_llama_stats *stats; /* NULL, or filled on success (as far as its size reaches) */
} wm_llama_options;

#define WM_LLAMA_OPTIONS_INIT WM_SIZED_INIT(wm_llama_options)

/* Loads the GGUF model at `path` as llama_model_load_from_file(path, *params) would (params NULL:
 * llama_model_default_params(); load_mode is ignored: weightmap reads). A split set loads from
 * any of its parts (weightmap opens the whole set). The model is the caller's, freed by
 * llama_model_free; nothing else is held after the call.
 * Returns WM_OK and *out, or: WM_EINVAL (NULL path or out, a bad options struct), WM_ENOENT,
 * WM_EPERM, WM_EIO, WM_ENOMEM, WM_EFORMAT (not GGUF, malformed, cut short, a tensor of a type or
 * shape llama.cpp cannot hold, or other than the model expects, or absent where it has no
 * neutral value: err names the file, the tensor and the field), WM_ECANCELED (the progress
 * callback returned false), WM_EDEVICE (llama.cpp refused the model: its log says why, e.g. a
 * missing hyperparameter or no backend loaded; or a buffer refused its bytes). */
WM_API wm_status wm_llama_load(const char *path, const struct llama_model_params *params,
                               const wm_llama_options *opts, struct llama_model **out,
                               wm_error *err);

/* The same from a file the caller opened (wm_file_open); the file stays the caller's (open
 * after the call, and may be closed at once: the model holds nothing of it). */
WM_API wm_status wm_llama_load_file(const wm_file *file, const struct llama_model_params *params,
                                    const wm_llama_options *opts, struct llama_model **out,
                                    wm_error *err);

#ifdef __cplusplus
}
#endif

#endif /* WEIGHTMAP_LLAMA_H */
