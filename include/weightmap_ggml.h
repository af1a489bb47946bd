/*
 * weightmap_ggml.h: weightmap's tensors handed to ggml, with their lifetime tied to one handle
 * (library weightmap_ggml, built where ggml is found; the core library never needs it).
 *
 * wm_ggml_load loads a file with weightmap (wm_model_load, every mode) and gives ggml what its
 * own gguf loader would: a no_alloc ggml_context with one ggml_tensor per file tensor, in file
 * order, with the file's name, type, ne and nb, whose data lies in ggml backend buffers made over
 * weightmap's memory with ggml's public API, one buffer per buffer of the model
 * (wm_model_buffer_count): ggml_backend_cpu_buffer_from_ptr over the shared mapping (mode mmap),
 * the private one (mmap-private) or the page-allocated blocks (heap) when `dev` is NULL, and
 * ggml_backend_dev_buffer_from_host_ptr over the same memory for a device that takes host
 * pointers. The buffers borrow the memory: their interface is ggml's own (ggml tells buffers
 * apart by it), so freeing one frees no weights; wm_ggml_free does, in the one order that is
 * safe: the buffers, then the context, then the model (its mappings and pages), after which the
 * ledger holds nothing of the load.
 *
 * Converted tensors (opts->convert, heap mode) appear with their delivered type and a slice
 * under tensor parallelism with its delivered shape. In mode mmap the weights are read-only
 * memory: writing a tensor (ggml_backend_tensor_set) faults, as with ggml's own mmap loader.
 *
 * Conventions are weightmap.h's: WM_OK is 0; `err` is optional and caller-owned; *out is written
 * on success only (NULL on failure); on failure nothing is held; wm_ggml_free accepts NULL.
 * What the getters return is borrowed until wm_ggml_free. One handle may be read from several
 * threads; it is freed by one, after all other use.
 */
#ifndef WEIGHTMAP_GGML_H
#define WEIGHTMAP_GGML_H

#include "weightmap.h"

#include <ggml-backend.h>
#include <ggml.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wm_ggml wm_ggml;

/* Loads `file` with `opts` (as wm_model_load; opts->backend must be WM_BACKEND_CPU: the
 * weights must be host memory) and makes the context and buffers described above, on the CPU
 * (`dev` NULL) or on `dev`. The file stays the caller's (wm_file_close may come before
 * wm_ggml_free, as with a model). Returns WM_OK and *out, or what wm_model_load returns, or:
 *   WM_EINVAL       NULL file, opts or out; a backend other than the CPU's;
 *   WM_EUNSUPPORTED a device that takes no host pointer (its caps.buffer_from_host_ptr);
 *   WM_EFORMAT      a tensor ggml cannot hold (a type ggml lacks, such as safetensors' bool or
 *                   f8 types; a name of GGML_MAX_NAME bytes or more; a byte size other than
 *                   ggml's for its type and shape): err names the file and the tensor;
 *   WM_ENOMEM       ggml could not make the context;
 *   WM_EDEVICE      ggml refused a buffer over the memory (err names the buffer and device).
 * The checks that need no load (arguments, device, every tensor's type and name) run before
 * anything is acquired. Thread safety: as wm_model_load. */
WM_API wm_status wm_ggml_load(wm_file *file, const wm_load_options *opts, ggml_backend_dev_t dev,
                              wm_ggml **out, wm_error *err);

/* The context: one tensor per file tensor, in file order (ggml_get_first_tensor /
 * ggml_get_next_tensor, or ggml_get_tensor by name). Borrowed; do not ggml_free it. NULL for
 * NULL. */
WM_API struct ggml_context *wm_ggml_context(const wm_ggml *g);
/* Tensor `index` of the file (wm_file_tensor's index); NULL when out of range. Borrowed. */
WM_API struct ggml_tensor *wm_ggml_tensor(const wm_ggml *g, size_t index);
/* The backend buffers, in the order of the model's buffers that hold bytes (a buffer of no
 * bytes gets none). Borrowed; do not ggml_backend_buffer_free them. 0 / NULL out of range. */
WM_API size_t wm_ggml_n_buffers(const wm_ggml *g);
WM_API ggml_backend_buffer_t wm_ggml_buffer(const wm_ggml *g, size_t i);
/* The model underneath (borrowed): its ledger, figures and tensors, as wm_model_* read them. */
WM_API const wm_model *wm_ggml_model(const wm_ggml *g);

/* Frees the buffers, then the context, then releases the model: afterwards no mapping of the
 * file is left and the ledger holds nothing of this load. Accepts NULL; cannot fail. */
WM_API void wm_ggml_free(wm_ggml *g_from_wm_ggml_load);

/* Loads ggml's backends, the one call a program makes before its first load: the CPU backend
 * (ggml as built for this bridge keeps it in libggml-cpu-*.so, one per CPU variant, and picks
 * the best for the CPU it runs on) and any device backend beside it, from `dir`, or when `dir`
 * is NULL from the folder ggml's own library was loaded from (installed: LIBDIR/weightmap/,
 * pkg-config --variable=ggml_backend_dir weightmap-ggml; asked of the loader, so a moved install
 * still finds it), as ggml_backend_load_all_from_path(dir) does. Returns WM_OK when ggml has a CPU
 * device afterwards (also when one was loaded before), else WM_ENOENT (err names the folder).
 * Holds nothing of weightmap's; backends stay loaded for the process, as ggml's own. Call it
 * once, from one thread, before any other use of ggml's backends. */
WM_API wm_status wm_ggml_backends_load(const char *dir, wm_error *err);

#ifdef __cplusplus
}
#endif

#endif /* WEIGHTMAP_GGML_H */
