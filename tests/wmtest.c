/*
 * wmtest.c: the runner behind wmtest.h. `test_x CASE` runs one case; `test_x --list` lists them.
 * After the case returns, the ledger must be empty.
 * Also the helpers every test file shares: the ledger, descriptor and mapping checks, files, the
 * fault sweeps (wmt_sweep_*) and byte buffers.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "wmtest.h"

#include "oracle.h"

#include "os/fault.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
    wm_ledger l = WM_LEDGER_INIT;
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

const char *wmt_peer_dir(void) { return wm_oracle_dir(); }

static int by_name(const void *a, const void *b) { return strcmp(a, b); }

int wmt_peer_cpu_variants(char (*names)[32], int cap) {
    DIR *d = opendir(wmt_peer_dir());
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && n < cap) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "libggml-cpu-", 12) || len < 16 || len - 15 >= sizeof names[0] ||
            strcmp(e->d_name + len - 3, ".so"))
            continue;
        memcpy(names[n], e->d_name + 12, len - 15);
        names[n++][len - 15] = 0;
    }
    if (d) closedir(d);
    qsort(names, (size_t)n, sizeof names[0], by_name);
    return n;
}

const char *wmt_peer_variant_dir(const char *variant) {
    static char dir[600];
    char want[64], from[1200], to[1200];
    snprintf(dir, sizeof dir, "%s/ggml-cpu-%s", wmt_tmpdir(), variant);
    snprintf(want, sizeof want, "libggml-cpu-%s.so", variant);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        wmt_fail(__FILE__, __LINE__, "mkdir %s: %s", dir, strerror(errno));
    DIR *d = opendir(wmt_peer_dir());
    if (!d) WM_SKIP("llama.cpp peer not installed (scripts/peer.sh installs it)");
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        bool variant_lib = !strncmp(e->d_name, "libggml-cpu-", 12);
        if (variant_lib && strcmp(e->d_name, want)) continue;
        found += variant_lib;
        snprintf(from, sizeof from, "%s/%s", wmt_peer_dir(), e->d_name);
        snprintf(to, sizeof to, "%s/%s", dir, e->d_name);
        if (symlink(from, to) != 0 && errno != EEXIST)
            wmt_fail(__FILE__, __LINE__, "symlink %s: %s", to, strerror(errno));
    }
    closedir(d);
    if (!found) wmt_fail(__FILE__, __LINE__, "the peer has no %s", want);
    return dir;
}

const char *wmt_peer_lib(const char *name) {
    static char lib[4200];
    wm_oracle_path(lib, sizeof lib, name);
    if (access(lib, R_OK) != 0)
        WM_SKIP("llama.cpp peer not installed (scripts/peer.sh installs it; or set WM_PEER_DIR to "
                "its library folder)");
    return lib;
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
    if (!p || fread(p, 1, (size_t)n, f) != (size_t)n)
        wmt_fail(__FILE__, __LINE__, "fread %s", path);
    fclose(f);
    *len = (size_t)n;
    return p;
}

size_t wmt_copy_file(const char *from, const char *to) {
    size_t len;
    void *bytes = wmt_read_file(from, &len);
    wmt_write_file(to, bytes, len);
    free(bytes);
    return len;
}

static wm_file *open_ok(wmt_opener open, const char *file, int line, const char *path) {
    wm_file *f = NULL;
    wm_error err = {0};
    wm_status st = open(path, &f, &err);
    if (st != WM_OK || !f)
        wmt_fail(file, line, "open %s returned %s: %s", path, wm_status_name(st), err.msg);
    return f;
}

wm_file *wmt_open_ok(const char *file, int line, const char *path) {
    return open_ok(wm_file_open, file, line, path);
}

wm_file *wmt_open_set_ok(const char *file, int line, const char *path) {
    return open_ok(wm_file_open_set, file, line, path);
}

const char *wmt_make_model(const char *name, const char *args) {
    const char *path = wmt_tmp(name);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' make-model '%s' %s >/dev/null", WM_CLI, path, args);
    if (system(cmd) != 0) wmt_fail(__FILE__, __LINE__, "make-model failed: %s", cmd);
    return path;
}

wm_tensor_info wmt_tensor_named(const wm_file *f, const char *name) {
    size_t i;
    wm_tensor_info t;
    wm_status st = wm_file_find_tensor(f, name, &i);
    if (st == WM_OK) st = wm_file_tensor(f, i, &t);
    if (st != WM_OK) wmt_fail(__FILE__, __LINE__, "tensor '%s': %s", name, wm_status_name(st));
    return t;
}

int wmt_run(const char *cmdline, char **out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s 2>%s", cmdline, wmt_tmp("stderr.txt"));
    FILE *p = popen(cmd, "r");
    if (!p) wmt_fail(__FILE__, __LINE__, "popen %s: %s", cmd, strerror(errno));
    size_t cap = 1 << 16, n = 0, k;
    char *buf = malloc(cap);
    if (!buf) wmt_fail(__FILE__, __LINE__, "out of memory");
    while ((k = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += k;
        if (n + 1 == cap && !(buf = realloc(buf, cap *= 2)))
            wmt_fail(__FILE__, __LINE__, "out of memory");
    }
    buf[n] = 0;
    int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

char *wmt_stderr_text(void) {
    size_t n;
    char *s = wmt_read_file(wmt_tmp("stderr.txt"), &n);
    if (!(s = realloc(s, n + 1))) wmt_fail(__FILE__, __LINE__, "out of memory");
    s[n] = 0;
    return s;
}

int wmt_cli(const char *args, char *out, size_t cap) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", WM_CLI, args);
    FILE *p = popen(cmd, "r");
    if (!p) wmt_fail(__FILE__, __LINE__, "popen %s: %s", cmd, strerror(errno));
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The errnos tests inject and the OS layer returns (glibc's strerrorname_np is glibc's only). */
const char *wmt_errno_name(int e) {
    static const struct {
        int e;
        const char *name;
    } names[] = {
#define WMT_ERRNO(x) {x, #x}
        WMT_ERRNO(EPERM),  WMT_ERRNO(ENOENT),     WMT_ERRNO(ESRCH),     WMT_ERRNO(EINTR),
        WMT_ERRNO(EIO),    WMT_ERRNO(EBADF),      WMT_ERRNO(EAGAIN),    WMT_ERRNO(ENOMEM),
        WMT_ERRNO(EACCES), WMT_ERRNO(EFAULT),     WMT_ERRNO(EBUSY),     WMT_ERRNO(EEXIST),
        WMT_ERRNO(EINVAL), WMT_ERRNO(ENFILE),     WMT_ERRNO(EMFILE),    WMT_ERRNO(EFBIG),
        WMT_ERRNO(ENOSPC), WMT_ERRNO(ERANGE),     WMT_ERRNO(ENOSYS),    WMT_ERRNO(EOVERFLOW),
        WMT_ERRNO(ESTALE), WMT_ERRNO(EOPNOTSUPP), WMT_ERRNO(ETIMEDOUT),
#undef WMT_ERRNO
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].e == e) return names[i].name;
    static _Thread_local char other[24];
    snprintf(other, sizeof other, "errno %d", e);
    return other;
}

/* ---- fault sweeps ---- */

/* What a sweep compares against after every run: the ledger and the descriptors before it. */
typedef struct sweep_base {
    wm_ledger ledger;
    int fds;
} sweep_base;

static void sweep_after(const wmt_sweep *s, const sweep_base *b, const char *run) {
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    for (int c = 0; c < WM_LEDGER_COUNT; c++)
        if (l.cat[c].current != b->ledger.cat[c].current ||
            l.cat[c].regions != b->ledger.cat[c].regions)
            wmt_fail(__FILE__, __LINE__,
                     "%s: %s: ledger %s holds %" PRIu64 " bytes in %" PRIu64 " regions, %" PRIu64
                     " in %" PRIu64 " before",
                     s->what, run, wm_ledger_category_name((wm_ledger_category)c), l.cat[c].current,
                     l.cat[c].regions, b->ledger.cat[c].current, b->ledger.cat[c].regions);
    int fds = wmt_count_fds();
    if (fds != b->fds)
        wmt_fail(__FILE__, __LINE__, "%s: %s: %d descriptors open, %d before", s->what, run, fds,
                 b->fds);
    if (s->path && wmt_count_file_maps(s->path) != 0)
        wmt_fail(__FILE__, __LINE__, "%s: %s: a mapping of %s is left", s->what, run, s->path);
}

static void sweep_base_take(sweep_base *b) {
    b->ledger.size = sizeof b->ledger;
    wm_ledger_get(&b->ledger);
    b->fds = wmt_count_fds();
}

void wmt_sweep_count(const wmt_sweep *s, wmt_sweep_result *res) {
    sweep_base b;
    sweep_base_take(&b);
    wm_error err = {0};
    wm__fault_reset();
    wm__fault_pin_cached(!s->real_cache);
    wm_status st = s->run(s->user, &err);
    wm__fault_pin_cached(0);
    if (st != WM_OK)
        wmt_fail(__FILE__, __LINE__, "%s: the clean run failed: %s: %s", s->what,
                 wm_status_name(st), err.msg);
    for (int c = 0; c <= WM_OS_CALL_COUNT; c++)
        res->counts[c] = wm__fault_count((wm_os_call)c);
    wm__fault_reset();
    sweep_after(s, &b, "the clean run");
}

/* One faulted run: the k-th call of `kind` fails with errn. */
static void sweep_one(const wmt_sweep *s, const sweep_base *b, wm_os_call kind, uint64_t k,
                      uint64_t n, int errn, wmt_sweep_result *res) {
    char run[160];
    snprintf(run, sizeof run, "%s call %" PRIu64 " of %" PRIu64 " failed with %s",
             kind == WM_OS_ANY ? "any" : wm__fault_call_name(kind), k, n, wmt_errno_name(errn));
    wm_error err;
    memset(&err, 0, sizeof err);
    wm__fault_arm(kind, k, errn);
    wm__fault_pin_cached(!s->real_cache);
    wm_status st = s->run(s->user, &err);
    wm__fault_pin_cached(0);
    uint64_t injected = wm__fault_injected();
    wm__fault_reset();
    res->runs++;
    if (s->must_hit && injected != 1)
        wmt_fail(__FILE__, __LINE__, "%s: %s: %" PRIu64 " faults injected (not repeatable?)",
                 s->what, run, injected);
    if (st != WM_OK) {
        res->failed++;
        res->enomem += st == WM_ENOMEM;
        if (!injected)
            wmt_fail(__FILE__, __LINE__, "%s: %s: failed with no fault injected: %s: %s", s->what,
                     run, wm_status_name(st), err.msg);
        if (err.code != st)
            wmt_fail(__FILE__, __LINE__, "%s: %s: err.code %s for status %s", s->what, run,
                     wm_status_name(err.code), wm_status_name(st));
        if (!err.msg[0] || (s->shown && !strstr(err.msg, s->shown)))
            wmt_fail(__FILE__, __LINE__, "%s: %s: message \"%s\" lacks \"%s\"", s->what, run,
                     err.msg, s->shown ? s->shown : "anything");
    }
    sweep_after(s, b, run);
    if (s->check) {
        wmt_fault_run r = {kind, k, n, errn, st, &err, injected};
        s->check(s->user, &r);
    }
}

void wmt_sweep_kind(const wmt_sweep *s, wm_os_call kind, uint64_t n, const int *errs, int n_errs,
                    wmt_sweep_result *res) {
    sweep_base b;
    sweep_base_take(&b);
    uint64_t last = s->past_end ? n + 1 : n;
    if (s->cycle) {
        for (uint64_t k = 1; k <= last; k++)
            sweep_one(s, &b, kind, k, n, errs[(k - 1) % (uint64_t)n_errs], res);
        return;
    }
    for (int e = 0; e < n_errs; e++)
        for (uint64_t k = 1; k <= last; k++)
            sweep_one(s, &b, kind, k, n, errs[e], res);
}

void wmt_sweep_any(const wmt_sweep *s, const int *errs, int n_errs, wmt_sweep_result *res) {
    wmt_sweep_count(s, res);
    wmt_sweep_kind(s, WM_OS_ANY, res->counts[WM_OS_ANY], errs, n_errs, res);
}

wm_status wmt_open_close_by(wmt_opener open, const char *path, wm_error *err) {
    wm_file *f = (wm_file *)(uintptr_t)1; /* must be overwritten */
    wm_status st = open(path, &f, err);
    if (st == WM_OK)
        wm_file_close(f);
    else if (f != NULL)
        wmt_fail(__FILE__, __LINE__, "%s: *out is not NULL after a failed open", path);
    return st;
}

wm_status wmt_open_close(void *path, wm_error *err) {
    return wmt_open_close_by(wm_file_open, path, err);
}

wm_status wmt_load_release(void *load_run, wm_error *err) {
    wmt_load_run *l = load_run;
    wm_model *m = (wm_model *)(uintptr_t)1; /* must be overwritten */
    wm_status st = wm_model_load(l->f, &l->o, &m, err);
    if (st != WM_OK) {
        if (m != NULL) wmt_fail(__FILE__, __LINE__, "*out is not NULL after a failed load");
        return st;
    }
    if (l->use) l->use(m);
    wm_model_release(m);
    return st;
}

void wmt_check_io_status(void *user, const wmt_fault_run *r) {
    (void)user;
    if (r->st != WM_OK && r->st != WM_EIO && r->st != WM_ENOMEM)
        wmt_fail(__FILE__, __LINE__, "call %" PRIu64 " of %" PRIu64 " failed with %s: %s", r->k,
                 r->n, wm_status_name(r->st), r->err->msg);
}

/* The status rules of an open's fault (it may succeed where the call was advice). */
typedef struct open_sweep {
    char path[1024], shown[1024]; /* copies: the caller's may be wmt_fixture's static buffer */
    wmt_opener open;
} open_sweep;

static wm_status open_sweep_run(void *user, wm_error *err) {
    const open_sweep *o = user;
    return wmt_open_close_by(o->open, o->path, err);
}

static void open_fault_check(void *user, const wmt_fault_run *r) {
    const open_sweep *o = user;
    if (r->st == WM_OK) return; /* counted against the advice calls by the caller */
    if (r->errn == ENOMEM && r->st != WM_ENOMEM)
        wmt_fail(__FILE__, __LINE__, "%s: ENOMEM at call %" PRIu64 " gave %s: %s", o->path, r->k,
                 wm_status_name(r->st), r->err->msg);
    if (r->errn == EIO && r->st != WM_EIO && r->st != WM_ENOMEM)
        wmt_fail(__FILE__, __LINE__, "%s: EIO at call %" PRIu64 " gave %s: %s", o->path, r->k,
                 wm_status_name(r->st), r->err->msg);
}

uint64_t wmt_open_fault_sweep(const char *path, const char *shown) {
    return wmt_open_fault_sweep_by(wm_file_open, path, shown);
}

uint64_t wmt_open_fault_sweep_by(wmt_opener open, const char *path, const char *shown) {
    open_sweep o = {.open = open};
    snprintf(o.path, sizeof o.path, "%s", path);
    snprintf(o.shown, sizeof o.shown, "%s", shown ? shown : "");
    wmt_sweep s = {.what = o.path,
                   .run = open_sweep_run,
                   .check = open_fault_check,
                   .user = &o,
                   .path = o.path,
                   .shown = shown ? o.shown : NULL,
                   .must_hit = 1};
    wmt_sweep_result res = {0};
    wmt_sweep_count(&s, &res);
    uint64_t n = res.counts[WM_OS_ANY], n_mem = res.counts[WM_OS_ALLOC] + res.counts[WM_OS_PAGES];
    fprintf(stderr, "%s: %" PRIu64 " fallible calls (%" PRIu64 " allocations)\n", path, n, n_mem);
    static const int errs[] = {EIO, ENOMEM};
    for (int e = 0; e < 2; e++) {
        wmt_sweep_result r = {0};
        wmt_sweep_kind(&s, WM_OS_ANY, n, &errs[e], 1, &r);
        /* Only advice may fail without failing the open. */
        if (r.runs - r.failed != res.counts[WM_OS_ADVISE])
            wmt_fail(__FILE__, __LINE__,
                     "%s: %" PRIu64 " opens succeeded with a fault, %" PRIu64 " advice calls", path,
                     r.runs - r.failed, res.counts[WM_OS_ADVISE]);
        /* With EIO, exactly the failed allocations report WM_ENOMEM. */
        if (errs[e] == EIO && r.enomem != n_mem)
            wmt_fail(__FILE__, __LINE__,
                     "%s: %" PRIu64 " opens failed with WM_ENOMEM under EIO, %" PRIu64
                     " allocations",
                     path, r.enomem, n_mem);
    }
    return n;
}

void wmt_put(wmt_buf *b, const void *data, size_t n) {
    if (b->len + n > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->len + n)
            c *= 2;
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
        for (int i = 0; i < n_cases; i++)
            puts(cases[i].name);
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

void wmt_gpu_lock(bool exclusive) {
    static int fd = -1;
    if (fd < 0) fd = open("/tmp/weightmap-test-cuda.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0 || flock(fd, exclusive ? LOCK_EX : LOCK_SH) != 0)
        wmt_fail(__FILE__, __LINE__, "cannot lock /tmp/weightmap-test-cuda.lock");
}

/* ---- the page cache ---- */

const char *wmt_write_u8_tensors(const char *name, const uint64_t *sizes, size_t n) {
    wmt_buf hdr = {0};
    char item[160];
    uint64_t off = 0;
    wmt_put(&hdr, "{", 1);
    for (size_t i = 0; i < n; i++) {
        int len = snprintf(item, sizeof item,
                           "%s\"t%zu\":{\"dtype\":\"U8\",\"shape\":[%" PRIu64
                           "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                           i ? "," : "", i, sizes[i], off, off + sizes[i]);
        wmt_put(&hdr, item, (size_t)len);
        off += sizes[i];
    }
    wmt_put(&hdr, "}", 1);
    const char *path = wmt_tmp(name);
    FILE *fp = fopen(path, "wb");
    CHECK_MSG(fp != NULL, "create %s", path);
    uint64_t hlen = hdr.len;
    CHECK(fwrite(&hlen, 8, 1, fp) == 1 && fwrite(hdr.p, 1, hdr.len, fp) == hdr.len);
    unsigned char block[65536];
    for (uint64_t k = 0; k < off;) {
        size_t m = off - k < sizeof block ? (size_t)(off - k) : sizeof block;
        for (size_t j = 0; j < m; j++)
            block[j] = wmt_cold_byte(k + j);
        CHECK(fwrite(block, 1, m, fp) == m);
        k += m;
    }
    CHECK(fclose(fp) == 0);
    wmt_buf_free(&hdr);
    return path;
}

uint64_t wmt_cached_bytes(const char *path, uint64_t off, uint64_t len) {
    int fd = open(path, O_RDONLY);
    CHECK_MSG(fd >= 0, "open %s", path);
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), a = off / page * page;
    uint64_t b = (off + len + page - 1) / page * page, n = 0;
    if (b > a) {
        void *p = mmap(NULL, (size_t)(b - a), PROT_READ, MAP_SHARED, fd, (off_t)a);
        CHECK_MSG(p != MAP_FAILED, "map %s", path);
        unsigned char *vec = malloc((size_t)((b - a) / page));
        CHECK(vec && mincore(p, (size_t)(b - a), (void *)vec) == 0); /* Darwin: char * */
        for (uint64_t i = 0; i < (b - a) / page; i++)
            n += (vec[i] & 1) ? page : 0;
        free(vec);
        munmap(p, (size_t)(b - a));
    }
    close(fd);
    return n;
}

/* What a load holds (the ledger's current bytes by category) and what it read (rchar), from
 * before it to after it. */
typedef struct held {
    wm_ledger before, after;
    uint64_t rchar0, read;
} held;

static void held_start(held *h) {
    h->before = (wm_ledger)WM_LEDGER_INIT;
    wm_ledger_get(&h->before);
    h->rchar0 = wmt_rchar(true);
}

static void held_stop(held *h) {
    h->read = wmt_rchar(false) - h->rchar0;
    h->after = (wm_ledger)WM_LEDGER_INIT;
    wm_ledger_get(&h->after);
}

static uint64_t held_cat(const held *h, wm_ledger_category c) {
    return h->after.cat[c].current - h->before.cat[c].current;
}

static uint64_t held_regions(const held *h, wm_ledger_category c) {
    return h->after.cat[c].regions - h->before.cat[c].regions;
}

void wmt_shards_hold_the_set_once(const char *set_path, const char *const *shards, size_t n,
                                  wm_load_options o, uint64_t slack) {
    CHECK(n >= 2 && n <= 16);
    wm_error err;
    wm_file *set = wmt_open_ok(__FILE__, __LINE__, set_path);
    CHECK_EQ(wm_file_shard_count(set), n);
    wm_model *m = NULL;
    held hs;
    held_start(&hs);
    CHECK_MSG(wm_model_load(set, &o, &m, &err) == WM_OK, "%s: %s", set_path, err.msg);
    held_stop(&hs);
    wm_model_stats ss = WM_MODEL_STATS_INIT;
    wm_model_stats_get(m, &ss);
    wm_model_release(m);
    uint64_t set_bytes = wm_file_tensor_bytes(set);
    wm_file_close(set);

    wm_file *f[16];
    wm_model *ms[16];
    uint64_t sum_bytes = 0, sum_heap = 0, sum_read = 0;
    for (size_t i = 0; i < n; i++) {
        f[i] = wmt_open_ok(__FILE__, __LINE__, shards[i]);
        CHECK_EQ(wm_file_shard_count(f[i]), 1);
        sum_bytes += wm_file_tensor_bytes(f[i]);
    }
    CHECK_EQ(sum_bytes, set_bytes);
    held h4;
    held_start(&h4);
    for (size_t i = 0; i < n; i++)
        CHECK_MSG(wm_model_load(f[i], &o, &ms[i], &err) == WM_OK, "%s: %s", shards[i], err.msg);
    held_stop(&h4);
    for (size_t i = 0; i < n; i++) {
        wm_model_stats s = WM_MODEL_STATS_INIT;
        wm_model_stats_get(ms[i], &s);
        sum_heap += s.heap_bytes;
        sum_read += s.bytes_read;
    }
    /* Mappings, locks, registrations and device memory: exactly the set's, region for region. */
    static const wm_ledger_category exact[] = {WM_LEDGER_MAP_SHARED, WM_LEDGER_MAP_PRIVATE,
                                               WM_LEDGER_PINNED, WM_LEDGER_LOCKED,
                                               WM_LEDGER_DEVICE};
    for (size_t k = 0; k < sizeof exact / sizeof exact[0]; k++) {
        wm_ledger_category c = exact[k];
        CHECK_MSG(held_cat(&h4, c) == held_cat(&hs, c),
                  "%s: %zu shards hold %llu bytes, the set %llu", wm_ledger_category_name(c), n,
                  (unsigned long long)held_cat(&h4, c), (unsigned long long)held_cat(&hs, c));
        CHECK_EQ(held_regions(&h4, c), held_regions(&hs, c));
    }
    /* Heap: the tensor pages exactly the set's; besides them each model's tables, which hold a
     * subset of the set's tensors and so are no larger than the set model's. */
    CHECK_EQ(sum_heap, ss.heap_bytes);
    uint64_t tables_set = held_cat(&hs, WM_LEDGER_HEAP) - ss.heap_bytes;
    uint64_t tables_4 = held_cat(&h4, WM_LEDGER_HEAP) - sum_heap;
    CHECK_MSG(tables_4 <= n * tables_set,
              "heap besides the tensors: %llu for %zu shards, %llu for the set",
              (unsigned long long)tables_4, n, (unsigned long long)tables_set);
    /* Read once: the library's count exactly the set's; the kernel's the same bytes (plus at
     * most `slack` a load). */
    CHECK_EQ(sum_read, ss.bytes_read);
    CHECK_MSG(hs.read >= ss.bytes_read && hs.read - ss.bytes_read <= slack,
              "the set's load: the kernel counted %llu bytes read, the library %llu",
              (unsigned long long)hs.read, (unsigned long long)ss.bytes_read);
    CHECK_MSG(h4.read >= sum_read && h4.read - sum_read <= slack * n,
              "%zu shards: the kernel counted %llu bytes read, the library %llu", n,
              (unsigned long long)h4.read, (unsigned long long)sum_read);
    for (size_t i = 0; i < n; i++) {
        wm_model_release(ms[i]);
        wm_file_close(f[i]);
    }
    CHECK_LEDGER_EMPTY();
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(wmt_count_file_maps(shards[i]), 0);
}

const char *wmt_cold_file(void) {
    uint64_t sizes[WMT_COLD_N];
    for (int i = 0; i < WMT_COLD_N; i++)
        sizes[i] = WMT_COLD_TENSOR;
    return wmt_write_u8_tensors("cold.safetensors", sizes, WMT_COLD_N);
}

wm_status wmt_cold_load(void *cold_run, wm_error *err) {
    wmt_cold_run *c = cold_run;
    wmt_make_cold(c->path, WMT_WARM_OFF, WMT_WARM_LEN);
    wm_status st = wmt_load_release(&c->l, err);
    if (st && strstr(err->msg, "(direct)")) c->direct_failures++;
    return st;
}

void wmt_check_io_failure(void *user, const wmt_fault_run *r) {
    (void)user;
    if (r->st == WM_OK) return;
    CHECK_MSG(r->st == WM_EIO || r->st == WM_ENOMEM || r->st == WM_EDEVICE,
              "call %llu of %llu failed: %s (%s)", (unsigned long long)r->k,
              (unsigned long long)r->n, wm_status_name(r->st), r->err->msg);
}
