/*
 * wmtest.c: the runner behind wmtest.h. `test_x CASE` runs one case; `test_x --list` lists them.
 * After the case returns, the ledger must be empty.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "wmtest.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define MAX_CASES 512

static struct {
    const char *name;
    wmt_fn fn;
} cases[MAX_CASES];
static int n_cases;
static char tmpdir[256];

void wmt_register(const char *name, wmt_fn fn) {
    if (n_cases < MAX_CASES) {
        cases[n_cases].name = name;
        cases[n_cases++].fn = fn;
    }
}

static void rm_tmp(void) {
    if (!tmpdir[0]) return;
    DIR *d = opendir(tmpdir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(tmpdir);
}

void wmt_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    rm_tmp();
    exit(1);
}

void wmt_skip(const char *why) {
    fprintf(stderr, "SKIP: %s\n", why);
    rm_tmp();
    exit(77);
}

void wmt_check_ledger_empty(const char *file, int line) {
    wm_ledger l;
    wm_ledger_get(&l);
    if (wm_ledger_bytes(&l) == 0 && wm_ledger_regions(&l) == 0) return;
    char buf[512];
    size_t n = 0;
    for (int i = 0; i < WM_LEDGER_COUNT; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, " %s=%" PRIu64 "/%" PRIu64,
                              wm_ledger_category_name((wm_ledger_category)i), l.cat[i].current,
                              l.cat[i].regions);
    wmt_fail(file, line, "ledger not empty (bytes/regions):%s", buf);
}

const char *wmt_fixture(const char *rel) {
    static char p[1024];
    snprintf(p, sizeof p, "%s/%s", WM_FIXTURES, rel);
    return p;
}

const char *wmt_tmpdir(void) {
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/wmtest.XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) wmt_fail(__FILE__, __LINE__, "mkdtemp: %s", strerror(errno));
    }
    return tmpdir;
}

const char *wmt_tmp(const char *name) {
    static char slots[8][512];
    static int next;
    char *p = slots[next++ % 8];
    snprintf(p, 512, "%s/%s", wmt_tmpdir(), name);
    return p;
}

void wmt_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) wmt_fail(__FILE__, __LINE__, "fopen %s: %s", path, strerror(errno));
    if (len && fwrite(data, 1, len, f) != len) wmt_fail(__FILE__, __LINE__, "fwrite %s", path);
    fclose(f);
}

void *wmt_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) wmt_fail(__FILE__, __LINE__, "fopen %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(n ? (size_t)n : 1);
    if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) wmt_fail(__FILE__, __LINE__, "fread %s", path);
    fclose(f);
    *len = (size_t)n;
    return p;
}

int wmt_count_file_maps(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) wmt_fail(__FILE__, __LINE__, "stat %s: %s", path, strerror(errno));
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) wmt_fail(__FILE__, __LINE__, "open /proc/self/maps");
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long lo, hi, off, ino;
        unsigned maj, min;
        char perms[8];
        if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &lo, &hi, perms, &off, &maj, &min, &ino) == 7 &&
            ino == (unsigned long long)st.st_ino && makedev(maj, min) == st.st_dev)
            n++;
    }
    fclose(f);
    return n;
}

void wmt_put(wmt_buf *b, const void *data, size_t n) {
    if (b->len + n > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->len + n) c *= 2;
        b->p = realloc(b->p, c);
        if (!b->p) wmt_fail(__FILE__, __LINE__, "out of memory");
        b->cap = c;
    }
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
}
void wmt_put_u8(wmt_buf *b, uint8_t v) { wmt_put(b, &v, 1); }
void wmt_put_u32(wmt_buf *b, uint32_t v) { wmt_put(b, &v, 4); }
void wmt_put_u64(wmt_buf *b, uint64_t v) { wmt_put(b, &v, 8); }
void wmt_put_zeros(wmt_buf *b, size_t n) {
    static const unsigned char z[4096];
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        wmt_put(b, z, k);
        n -= k;
    }
}
void wmt_buf_free(wmt_buf *b) {
    free(b->p);
    *b = (wmt_buf){0};
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (int i = 0; i < n_cases; i++) puts(cases[i].name);
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s CASE | --list\n", argv[0]);
        return 2;
    }
    for (int i = 0; i < n_cases; i++) {
        if (strcmp(cases[i].name, argv[1]) != 0) continue;
        cases[i].fn();
        wmt_check_ledger_empty(__FILE__, __LINE__);
        rm_tmp();
        printf("PASS %s\n", argv[1]);
        return 0;
    }
    fprintf(stderr, "no case %s\n", argv[1]);
    return 2;
}
