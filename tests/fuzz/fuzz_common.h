/*
 * fuzz_common.h: what every libFuzzer harness of weightmap shares (header-only; each harness is
 * one executable).
 *
 * Sections: the leak rule (after every input the library's ledger must read zero bytes and zero
 * regions, or the harness aborts, so that libFuzzer reports the input as a crash); writing the
 * input where the library can open it (a memfd reached as /proc/self/fd/N, or a named file in a
 * per-process temporary folder when the name matters); walking an open file through every getter
 * of the public API, so that every parsed field is read at least once under ASan; running an
 * input a second time with one OS call or allocation failed (fault injection), so that the error
 * paths of every odd file the fuzzer makes are checked for leaks too.
 */
#ifndef WM_FUZZ_COMMON_H
#define WM_FUZZ_COMMON_H

#include "weightmap.h"
#ifdef WM_FAULT_INJECTION
#include "os/fault.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- the leak rule ---- */

/* Aborts when the library still holds anything: a leak of counted memory, a mapping or a region
 * is a crash for the fuzzer. */
static void wmf_check_ledger_empty(const char *where) {
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    if (wm_ledger_bytes(&l) == 0 && wm_ledger_regions(&l) == 0) return;
    for (int k = 0; k < WM_LEDGER_COUNT; k++)
        fprintf(stderr, "ledger %s: %llu bytes in %llu regions\n",
                wm_ledger_category_name((wm_ledger_category)k),
                (unsigned long long)l.cat[k].current, (unsigned long long)l.cat[k].regions);
    fprintf(stderr, "weightmap fuzz: the ledger is not empty after %s\n", where);
    abort();
}

/* ---- where the input lives ---- */

/* Writes all of buf to fd or aborts (the harness, not the library, failed). */
static void wmf_write_all(int fd, const uint8_t *buf, size_t n) {
    while (n) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            perror("weightmap fuzz: write");
            abort();
        }
        buf += w;
        n -= (size_t)w;
    }
}

/* The input in a memfd; *path gets "/proc/self/fd/N". Returns the descriptor to close. */
static int wmf_memfd(const uint8_t *data, size_t size, char *path, size_t path_cap) {
    int fd = memfd_create("wm-fuzz-input", MFD_CLOEXEC);
    if (fd < 0) {
        perror("weightmap fuzz: memfd_create");
        abort();
    }
    wmf_write_all(fd, data, size);
    snprintf(path, path_cap, "/proc/self/fd/%d", fd);
    return fd;
}

/* A folder of this process's own, made once and removed (with what wmf_put_file wrote into it) at
 * exit. */
static char wmf_dir_path[256];
static char wmf_dir_files[16][64];
static int wmf_dir_nfiles;

static void wmf_dir_remove(void) {
    char p[400];
    for (int i = 0; i < wmf_dir_nfiles; i++) {
        snprintf(p, sizeof p, "%s/%s", wmf_dir_path, wmf_dir_files[i]);
        unlink(p);
    }
    rmdir(wmf_dir_path);
}

static const char *wmf_dir(void) {
    if (wmf_dir_path[0]) return wmf_dir_path;
    const char *tmp = getenv("TMPDIR");
    snprintf(wmf_dir_path, sizeof wmf_dir_path, "%s/wm-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(wmf_dir_path)) {
        perror("weightmap fuzz: mkdtemp");
        abort();
    }
    atexit(wmf_dir_remove);
    return wmf_dir_path;
}

/* Writes (replaces) the file `name` in the folder; returns its path (static buffer). */
static const char *wmf_put_file(const char *name, const void *data, size_t size) {
    static char path[400];
    int known = 0;
    for (int i = 0; i < wmf_dir_nfiles; i++)
        known |= strcmp(wmf_dir_files[i], name) == 0;
    if (!known && wmf_dir_nfiles < 16) snprintf(wmf_dir_files[wmf_dir_nfiles++], 64, "%s", name);
    snprintf(path, sizeof path, "%s/%s", wmf_dir(), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror("weightmap fuzz: open");
        abort();
    }
    wmf_write_all(fd, data, size);
    close(fd);
    return path;
}

/* ---- reading everything an open file offers ---- */

static volatile uint64_t wmf_sink;

static void wmf_take_string(wm_string s) {
    uint64_t h = 0;
    for (size_t i = 0; i < s.len; i++)
        h = h * 31 + (unsigned char)s.ptr[i];
    wmf_sink += h;
}

/* Calls every getter on every tensor and metadata entry; the results are summed into a sink so
 * that every byte the getters point at is read. */
static void wmf_walk_file(const wm_file *f) {
    wmf_sink += wm_file_format(f) + wm_file_version(f) + wm_file_size(f) + wm_file_data_offset(f) +
                wm_file_alignment(f) + wm_file_tensor_bytes(f);
    wmf_sink += strlen(wm_file_path(f)) + strlen(wm_format_name(wm_file_format(f)));
    for (uint32_t s = 0; s < wm_file_shard_count(f); s++)
        wmf_sink += strlen(wm_file_shard_path(f, s));
    size_t nt = wm_file_tensor_count(f);
    for (size_t i = 0; i < nt; i++) {
        wm_tensor_info t;
        if (wm_file_tensor(f, i, &t) != WM_OK) abort();
        const char *tn = wm_type_name(t.type);
        if (!tn || wm_type_from_name(tn) != t.type) abort();
        wmf_sink += wm_type_block_elems(t.type) + wm_type_block_bytes(t.type);
        size_t back;
        if (wm_file_find_tensor(f, t.name, &back) != WM_OK) abort();
        wmf_sink += strlen(t.name) + (uint64_t)t.type + t.n_dims + t.n_elements + t.offset +
                    t.nbytes + t.shard + back;
        for (uint32_t d = 0; d < WM_MAX_DIMS; d++)
            wmf_sink += t.shape[d];
        if (t.offset + t.nbytes < t.offset) abort();
    }
    wm_tensor_info t;
    if (wm_file_tensor(f, nt, &t) != WM_ERANGE) abort();
    size_t nkv = wm_file_metadata_count(f);
    for (size_t i = 0; i < nkv; i++) {
        wm_kv kv;
        if (wm_file_metadata(f, i, &kv) != WM_OK) abort();
        size_t back;
        if (wm_file_find_metadata(f, kv.key, &back) != WM_OK) abort();
        wmf_sink += strlen(kv.key) + kv.type + kv.elem_type + kv.length + back;
        uint64_t u;
        int64_t s;
        double d;
        wm_string str;
        int b;
        uint32_t u32;
        if (wm_file_kv_u64(f, i, &u) == WM_OK) wmf_sink += u;
        if (wm_file_kv_i64(f, i, &s) == WM_OK) wmf_sink += (uint64_t)s;
        if (wm_file_kv_f64(f, i, &d) == WM_OK) wmf_sink += (uint64_t)(d == d);
        if (wm_file_kv_string(f, i, &str) == WM_OK) wmf_take_string(str);
        if (wm_file_get_u32(f, kv.key, &u32) == WM_OK) wmf_sink += u32;
        if (wm_file_get_bool(f, kv.key, &b) == WM_OK) wmf_sink += (unsigned)b;
        if (wm_file_get_string(f, kv.key, &str) == WM_OK) wmf_take_string(str);
        if (kv.type != WM_VALUE_ARRAY) continue;
        /* Sample the array: the first and last few elements by index, then all strings by
         * iteration (bounded, so a huge count in a tiny file costs no time). */
        uint64_t n = kv.length;
        for (uint64_t e = 0; e < n && e < 8; e++) {
            if (wm_file_array_u64(f, i, e, &u) == WM_OK) wmf_sink += u;
            if (wm_file_array_i64(f, i, e, &s) == WM_OK) wmf_sink += (uint64_t)s;
            if (wm_file_array_f64(f, i, e, &d) == WM_OK) wmf_sink += (uint64_t)(d == d);
        }
        if (n > 0) {
            if (wm_file_array_u64(f, i, n - 1, &u) == WM_OK) wmf_sink += u;
            if (wm_file_array_f64(f, i, n - 1, &d) == WM_OK) wmf_sink += (uint64_t)(d == d);
            if (wm_file_array_string(f, i, n - 1, &str) == WM_OK) wmf_take_string(str);
        }
        if (wm_file_array_u64(f, i, n, &u) == WM_OK) abort();
        wm_array_iter it;
        if (wm_file_array_iter(f, i, &it) == WM_OK) {
            uint64_t k = 0;
            while (k++ < 100000 && wm_array_iter_next(&it, &str) == WM_OK)
                wmf_take_string(str);
        }
    }
    wm_kv kv;
    if (wm_file_metadata(f, nkv, &kv) != WM_ERANGE) abort();
}

/* ---- faults ---- */

/* Opens `path` with `open` (wm_file_open, wm_file_open_set), reads every tensor and key,
 * closes; a failed open must leave *out NULL and a message, and either way the ledger must be
 * empty afterwards (else abort: a leak is a crash). */
static void wmf_open_with_walk_close(wm_status (*open)(const char *, wm_file **, wm_error *),
                                     const char *path) {
    wm_file *f = NULL;
    wm_error err;
    wm_status st = open(path, &f, &err);
    if (st == WM_OK) {
        wmf_walk_file(f);
        wm_file_close(f);
    } else if (f != NULL || err.code != st || err.msg[0] == '\0') {
        fprintf(stderr, "failed open left out=%p, err.code %d for status %d, msg '%s'\n", (void *)f,
                err.code, st, err.msg);
        abort();
    }
    wmf_check_ledger_empty("wm_file_open/wm_file_close");
}

/* The same through wm_file_open (a path is that file; an index, its set). */
static void wmf_open_walk_close(const char *path) { wmf_open_with_walk_close(wm_file_open, path); }

/* The same through wm_file_open_set (a shard's or a split part's path, its whole set). */
static void wmf_open_set_walk_close(const char *path) {
    wmf_open_with_walk_close(wm_file_open_set, path);
}

/* Runs fn(ctx), which must check the ledger itself; then, when the build has fault injection,
 * again with one of the calls it made failed: the k-th of n, with k and the errno (EIO or ENOMEM)
 * chosen from the input's bytes so that a crash reproduces from the input alone. With
 * WM_FUZZ_FAULT_SWEEP=1 in the environment (coverage runs), every k with both errnos instead. */
static void wmf_with_faults(void (*fn)(void *), void *ctx, const uint8_t *data, size_t size) {
#ifdef WM_FAULT_INJECTION
    wm__fault_reset();
    fn(ctx);
    uint64_t n = wm__fault_count(WM_OS_ANY);
    if (n == 0) return;
    static int sweep = -1;
    if (sweep < 0) sweep = getenv("WM_FUZZ_FAULT_SWEEP") != NULL;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ull;
    for (uint64_t k = sweep ? 1 : h % n + 1; k <= (sweep ? n : h % n + 1); k++) {
        for (int e = 0; e < 2; e++) {
            if (!sweep && e != (int)((h >> 32) & 1)) continue;
            wm__fault_arm(WM_OS_ANY, k, e ? EIO : ENOMEM);
            fn(ctx);
            wm__fault_reset();
        }
    }
#else
    (void)data;
    (void)size;
    fn(ctx);
#endif
}

#endif /* WM_FUZZ_COMMON_H */
