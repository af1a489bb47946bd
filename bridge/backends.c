/*
 * backends.c: the bridges' one-call loader of ggml's backends (wm_llama_backends_load in
 * weightmap_llama.h, wm_ggml_backends_load in weightmap_ggml.h). Compiled into each bridge with
 * WM_BACKENDS_LLAMA or WM_BACKENDS_GGML, which picks the header and the public name; the body is
 * the same.
 *
 * ggml as built for these bridges (GGML_BACKEND_DL) has no backend of its own: its CPU backend is
 * a library per CPU variant (libggml-cpu-haswell.so, ...) that ggml_backend_load_all_from_path
 * picks from a folder. That folder is the one ggml itself was loaded from: installed,
 * LIBDIR/weightmap/ (pkg-config's variable ggml_backend_dir), where CMakeLists.txt installs
 * them with the bridge; in the build tree, the folder scripts/llama.sh or scripts/ggml.sh made.
 * It is asked of the loader, so an installed tree that was moved still finds them.
 */
#if defined(WM_BACKENDS_LLAMA)
#include "weightmap_llama.h"
#define WM_BACKENDS_NAME wm_llama_backends_load
#define WM_BACKENDS_PC "weightmap-llama"
#elif defined(WM_BACKENDS_GGML)
#include "weightmap_ggml.h"
#define WM_BACKENDS_NAME wm_ggml_backends_load
#define WM_BACKENDS_PC "weightmap-ggml"
#else
#error "backends.c: define WM_BACKENDS_LLAMA or WM_BACKENDS_GGML"
#endif

#include <dlfcn.h>
#include <ggml-backend.h>
#include <stdio.h>
#include <string.h>

/* The folder of the library that holds ggml's backend registry, as the loader found it. */
static int registry_dir(char *dir, size_t cap) {
    Dl_info info;
    void (*fn)(const char *) = ggml_backend_load_all_from_path;
    void *addr; /* a function's address as dladdr takes it (ISO C has no cast for that) */
    memcpy(&addr, &fn, sizeof addr);
    if (!dladdr(addr, &info) || !info.dli_fname) return -1;
    const char *slash = strrchr(info.dli_fname, '/');
    if (!slash || (size_t)(slash - info.dli_fname) >= cap) return -1;
    memcpy(dir, info.dli_fname, (size_t)(slash - info.dli_fname));
    dir[slash - info.dli_fname] = 0;
    return 0;
}

WM_API wm_status WM_BACKENDS_NAME(const char *dir, wm_error *err) {
    char found[4096];
    if (!dir) {
        if (registry_dir(found, sizeof found) != 0) {
            if (err) {
                err->code = WM_ENOENT;
                err->os_errno = 0;
                snprintf(err->msg, sizeof err->msg,
                         "the loader does not say where ggml's library was loaded from: pass the "
                         "folder of ggml's backends (pkg-config --variable=ggml_backend_dir %s)",
                         WM_BACKENDS_PC);
            }
            return WM_ENOENT;
        }
        dir = found;
    }
    ggml_backend_load_all_from_path(dir);
    if (ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU)) return WM_OK;
    if (err) {
        err->code = WM_ENOENT;
        err->os_errno = 0;
        snprintf(err->msg, sizeof err->msg,
                 "%.120s: no ggml CPU backend there (libggml-cpu-*.so); an install's: "
                 "pkg-config --variable=ggml_backend_dir %s",
                 dir, WM_BACKENDS_PC);
    }
    return WM_ENOENT;
}
