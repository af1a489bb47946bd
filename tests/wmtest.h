/*
 * wmtest.h: the test runner's interface. Each tests/test_*.c holds cases written as
 *
 *     WM_TEST(name) { ... CHECK(x); CHECK_STATUS(call, WM_OK); ... }
 *
 * CMake registers one ctest entry per case (it reads the WM_TEST lines), each run in its own
 * process with a timeout. After every case the runner asserts that the library holds nothing:
 * every ledger `current` and region count is 0. A case that cannot run here calls
 * WM_SKIP("why") (exit 77, reported by ctest as skipped).
 */
#ifndef WM_TEST_H
#define WM_TEST_H

#include "weightmap.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* WMT_ASAN is 1 in AddressSanitizer builds (gcc and clang), for the few figures it distorts. */
#if defined(__SANITIZE_ADDRESS__)
#define WMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WMT_ASAN 1
#endif
#endif
#ifndef WMT_ASAN
#define WMT_ASAN 0
#endif

typedef void (*wmt_fn)(void);
void wmt_register(const char *name, wmt_fn fn);

#define WM_TEST(name)                                                                              \
    static void wmt_case_##name(void);                                                             \
    __attribute__((constructor)) static void wmt_reg_##name(void) {                                \
        wmt_register(#name, wmt_case_##name);                                                      \
    }                                                                                              \
    static void wmt_case_##name(void)

void wmt_fail(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
void wmt_skip(const char *why) __attribute__((noreturn));

#define WM_SKIP(why) wmt_skip(why)
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) wmt_fail(__FILE__, __LINE__, "CHECK(%s) failed", #c);                            \
    } while (0)
#define CHECK_MSG(c, ...)                                                                          \
    do {                                                                                           \
        if (!(c)) wmt_fail(__FILE__, __LINE__, __VA_ARGS__);                                       \
    } while (0)
#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        uint64_t wmt_a = (uint64_t)(a), wmt_b = (uint64_t)(b);                                     \
        if (wmt_a != wmt_b)                                                                        \
            wmt_fail(__FILE__, __LINE__, "%s == %s: %" PRIu64 " != %" PRIu64, #a, #b, wmt_a,       \
                     wmt_b);                                                                       \
    } while (0)
#define CHECK_STATUS(expr, want)                                                                   \
    do {                                                                                           \
        wm_status wmt_s = (expr);                                                                  \
        if (wmt_s != (want))                                                                       \
            wmt_fail(__FILE__, __LINE__, "%s returned %s, want %s", #expr, wm_status_name(wmt_s),  \
                     wm_status_name(want));                                                        \
    } while (0)
/* err.msg contains `needle` */
#define CHECK_MSG_HAS(err, needle)                                                                 \
    do {                                                                                           \
        if (!strstr((err).msg, (needle)))                                                          \
            wmt_fail(__FILE__, __LINE__, "message \"%s\" lacks \"%s\"", (err).msg, (needle));      \
    } while (0)

/* The ledger holds nothing (bytes and regions), or the case fails with the figures. */
void wmt_check_ledger_empty(const char *file, int line);
#define CHECK_LEDGER_EMPTY() wmt_check_ledger_empty(__FILE__, __LINE__)

/* Absolute path of a fixture: wmt_fixture("gguf/stories260K.gguf"). Static buffer. */
const char *wmt_fixture(const char *rel);
/* A fresh per-case temporary directory (removed by the runner after the case). */
const char *wmt_tmpdir(void);
/* Path inside the temporary directory. Returns a static rotating buffer (8 slots). */
const char *wmt_tmp(const char *name);
/* Writes bytes to a file; aborts the case on error. */
void wmt_write_file(const char *path, const void *data, size_t len);
/* Reads a whole file into malloc'd memory; *len gets its size. */
void *wmt_read_file(const char *path, size_t *len);
/* Number of regions of this process that map `path` (matched by device and inode, from
 * /proc/self/maps). */
int wmt_count_file_maps(const char *path);

/* A growable byte buffer for hand-built files. */
typedef struct wmt_buf {
    unsigned char *p;
    size_t len, cap;
} wmt_buf;
void wmt_put(wmt_buf *b, const void *data, size_t n);
void wmt_put_u8(wmt_buf *b, uint8_t v);
void wmt_put_u32(wmt_buf *b, uint32_t v);
void wmt_put_u64(wmt_buf *b, uint64_t v);
void wmt_put_zeros(wmt_buf *b, size_t n);
void wmt_buf_free(wmt_buf *b);

#endif
