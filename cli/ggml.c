/*
 * ggml.c: `weightmap check FILE --ggml`, the loads of check made through the ggml bridge
 * (include/weightmap_ggml.h): each cycle loads with wm_ggml_load, reads every tensor back through
 * ggml (ggml_backend_tensor_get) and compares it with the file's bytes, then frees with
 * wm_ggml_free; load.c measures and judges the cycles as for any check. Built only where the
 * bridge is (CMake defines WM_CLI_GGML then; cli.h's CLI_GGML_VIA is NULL otherwise).
 */
#include "cli.h"
#include "weightmap_ggml.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static wm_status ggml_load(wm_file *f, const wm_load_options *o, void **handle,
                           const wm_model **model, wm_error *err) {
    wm_ggml *g;
    wm_status st = wm_ggml_load(f, o, NULL, &g, err);
    if (st) return st;
    *handle = g;
    *model = wm_ggml_model(g);
    return WM_OK;
}

static void ggml_release(void *handle) { wm_ggml_free(handle); }

static wm_status mismatch(wm_error *err, wm_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static wm_status mismatch(wm_error *err, wm_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    err->os_errno = errno;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

/* Tensor `i` read back through ggml equals its bytes in the file (read with pread from `fd`,
 * its shard). a and b hold at least the tensor's bytes. */
static wm_status verify_tensor(const wm_ggml *g, size_t i, int fd, unsigned char *a,
                               unsigned char *b, wm_error *err) {
    const wm_file *f = wm_model_file(wm_ggml_model(g));
    wm_tensor_info ti;
    wm_file_tensor(f, i, &ti);
    struct ggml_tensor *t = wm_ggml_tensor(g, i);
    size_t n = ggml_nbytes(t);
    if (n != ti.nbytes)
        return mismatch(err, WM_EFORMAT, "%s: tensor '%s' is %zu bytes in ggml, %llu in the file",
                        wm_file_path(f), ti.name, n, (unsigned long long)ti.nbytes);
    if (!n) return WM_OK;
    ggml_backend_tensor_get(t, a, 0, n);
    for (size_t done = 0; done < n;) {
        ssize_t r = pread(fd, b + done, n - done, (off_t)(ti.offset + done));
        if (r <= 0)
            return mismatch(err, WM_EIO, "%s: reading tensor '%s' at offset %llu: %s",
                            wm_file_shard_path(f, ti.shard), ti.name,
                            (unsigned long long)(ti.offset + done), r ? strerror(errno) : "EOF");
        done += (size_t)r;
    }
    for (size_t k = 0; k < n; k++)
        if (a[k] != b[k])
            return mismatch(err, WM_EFORMAT,
                            "%s: tensor '%s' read back through ggml differs from the file at "
                            "offset %llu (byte %zu of %zu)",
                            wm_file_shard_path(f, ti.shard), ti.name,
                            (unsigned long long)(ti.offset + k), k, n);
    return WM_OK;
}

static wm_status ggml_verify(void *handle, wm_error *err) {
    const wm_ggml *g = handle;
    const wm_file *f = wm_model_file(wm_ggml_model(g));
    size_t n = wm_file_tensor_count(f), largest = 1;
    for (size_t i = 0; i < n; i++) {
        wm_tensor_info ti;
        wm_file_tensor(f, i, &ti);
        if (ti.nbytes > largest) largest = (size_t)ti.nbytes;
    }
    uint32_t n_shards = wm_file_shard_count(f);
    int *fds = calloc(n_shards, sizeof *fds);
    /* the two copies come from pages, given back at once: no allocator keeps them, so the
     * footprint check judges the load alone */
    unsigned char *a =
        mmap(NULL, 2 * largest, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) a = NULL;
    unsigned char *b = a ? a + largest : NULL;
    wm_status st = fds && a ? WM_OK : mismatch(err, WM_ENOMEM, "check --ggml: out of memory");
    for (uint32_t s = 0; fds && s < n_shards; s++)
        fds[s] = -1;
    for (uint32_t s = 0; !st && s < n_shards; s++) {
        fds[s] = open(wm_file_shard_path(f, s), O_RDONLY | O_CLOEXEC);
        if (fds[s] < 0)
            st = mismatch(err, WM_EIO, "%s: cannot open: %s", wm_file_shard_path(f, s),
                          strerror(errno));
    }
    for (size_t i = 0; !st && i < n; i++) {
        wm_tensor_info ti;
        wm_file_tensor(f, i, &ti);
        st = verify_tensor(g, i, fds[ti.shard], a, b, err);
    }
    for (uint32_t s = 0; fds && s < n_shards; s++)
        if (fds[s] >= 0) close(fds[s]);
    free(fds);
    if (a) munmap(a, 2 * largest);
    return st;
}

const cli_via cli_ggml_via = {
    .name = "ggml",
    .load = ggml_load,
    .verify = ggml_verify,
    .release = ggml_release,
};
