/*
 * llama_bridge.h: what the files of the llama.cpp bridge (include/weightmap_llama.h,
 * docs/LLAMA.md) share. Public API only, of weightmap (weightmap.h) and of llama.cpp v0.4.0 and
 * its ggml (llama.h, ggml.h, ggml-backend.h, gguf.h): the one file that needs ggml's internal
 * buffer layout is llama_own.c, and this header tells nothing of it.
 *
 *   llama.c        the load: options, the record of llama.cpp's tensors, the reads, the modes
 *   llama_meta.c   the file's metadata and tensor table as a gguf_context
 *   llama_place.c  where the weights go: the CPU's extra (repack) buffer types, the overrides
 *   llama_own.c    the bridge's own weight buffers (ggml's internal layout, version-checked)
 */
#ifndef WM_BRIDGE_LLAMA_BRIDGE_H
#define WM_BRIDGE_LLAMA_BRIDGE_H

#include "weightmap_llama.h"

#include "ggml_check.h"

#include <ggml-backend.h>
#include <gguf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- fault points ----
 * The test build (WM_LLAMA_FAULTS, linked with the library's fault table) fails the bridge's own
 * allocations and llama.cpp's constructors as the library fails its calls (src/os/fault.h). */
#ifdef WM_LLAMA_FAULTS
#include "os/os.h"
#define FAULT(kind) (wm__fault_hit(WM_OS_##kind) != 0)
#else
#define FAULT(kind) 0
#endif

#define GRID 4096u /* the direct-read grid (WM_OS_DIRECT_ALIGN) */

/* len bytes of fresh anonymous pages (len 0: one page), or NULL; freed by wm__llama_pages_free
 * with the same len (NULL accepted). The bridge's own memory comes from here, so that no
 * allocator cache keeps it after a load. */
void *wm__llama_pages(size_t len);
void wm__llama_pages_free(void *p, size_t len);
double wm__llama_now(void);
bool wm__llama_ends_with(const char *s, const char *tail);

/* llama_meta.c: the gguf_context llama.cpp reads the model from (gguf_free frees it). */
wm_status wm__llama_metadata(const wm_file *f, struct gguf_context **out, wm_error *err);

/* ---- llama_place.c ---- */

#define MAX_EXTRA 8

/* The CPU device and its extra buffer types (ggml_backend_dev_get_extra_bufts). */
typedef struct extras {
    ggml_backend_dev_t cpu;
    ggml_backend_buffer_type_t buft[MAX_EXTRA];
    size_t n;
} extras;

void wm__llama_cpu_extras(extras *x);
bool wm__llama_is_extra(const extras *x, ggml_backend_buffer_type_t buft);
/* Whether the model's layers stay on the CPU: no GPU among its devices, or no layer offloaded. */
bool wm__llama_runs_on_cpu(const struct llama_model_params *p);

/* The override list handed to llama.cpp, in pages (mem, mem_len: wm__llama_pages_free). */
typedef struct overrides {
    struct llama_model_tensor_buft_override *list;
    void *mem;
    size_t mem_len;
} overrides;

/* The caller's overrides, then own[k] for the tensors extra buffer type k takes, then own_cpu
 * (NULL: none) for every other tensor. */
wm_status wm__llama_overrides(const wm_file *f, const struct llama_model_params *p, const extras *x,
                              ggml_backend_buffer_type_t const *own,
                              ggml_backend_buffer_type_t own_cpu, overrides *ov, wm_error *err);

/* ---- llama_own.c: the bridge's own weight buffers ---- */

#define MAX_OWN (MAX_EXTRA + 1)

/* The wrapper of buffer type `real` (see llama_own.c), made on first use; NULL where the ggml the
 * process runs is not the one the bridge was built with, or the type does not hold its memory as
 * the CPU's does (llama.cpp then allocates it). */
ggml_backend_buffer_type_t wm__llama_own_type(const extras *x, ggml_backend_buffer_type_t real);
/* Whether b is a buffer of the bridge's own pages. */
bool wm__llama_is_own(ggml_backend_buffer_t b);
/* While llama.cpp makes the model on this thread: the sizes ggml asks of the wrappers are noted
 * with the tensors' file offsets, so that each buffer starts where its tensors agree with the
 * file on the grid (a no-op where the notes' pages cannot be had: only slower). */
void wm__llama_notes_begin(const wm_file *f);
void wm__llama_notes_end(void);

#endif /* WM_BRIDGE_LLAMA_BRIDGE_H */
