/*
 * peer.c: the shared part of every benchmark (see peer.h).
 *
 * Sections: opening llama.cpp's libraries with dlopen; time and percentiles; memory figures
 * from /proc; paths and the machine line for RESULTS.md.
 */
#include "peer.h"

#include "oracle.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef WM_SOURCE_DIR
#define WM_SOURCE_DIR "."
#endif
#ifndef WM_FIXTURES
#define WM_FIXTURES WM_SOURCE_DIR "/../shared/fixtures"
#endif

/* ---- the peer ---- */

const char *bench_peer_default_dir(void) { return wm_oracle_dir(); }

static void *open_lib(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h)
        fprintf(stderr,
                "peer: cannot load %s: %s\n(run scripts/peer.sh to install the peer, or set "
                "WM_PEER_DIR)\n",
                path, dlerror());
    return h;
}

/* ISO C has no conversion from void * to a function pointer; POSIX guarantees the two have
 * the same representation, so the address is copied bytewise. */
static int sym(void *lib, const char *name, void *fnptr, size_t size) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "peer: symbol %s not found: %s\n", name, dlerror());
        return -1;
    }
    if (size != sizeof p) return -1;
    memcpy(fnptr, &p, size);
    return 0;
}
#define SYM(lib, field) sym((lib), #field, &p->field, sizeof p->field)

/* The peer logs every tensor it creates to stderr; benchmarks print tables. */
static void quiet_log(int level, const char *text, void *user) {
    (void)level;
    (void)text;
    (void)user;
}

static bool peer_log_wanted(void) {
    const char *env = getenv("WM_PEER_LOG");
    return env && strcmp(env, "1") == 0;
}

int bench_peer_open_gguf(bench_peer *p, const char *dir) {
    if (p->base) return 0;
    if (!dir) dir = bench_peer_default_dir();
    snprintf(p->dir, sizeof p->dir, "%s", dir);
    void *b = open_lib(dir, "libggml-base.so");
    if (!b) return -1;
    if (SYM(b, gguf_init_from_file) || SYM(b, gguf_free) || SYM(b, gguf_get_n_tensors) ||
        SYM(b, gguf_get_n_kv) || SYM(b, gguf_get_data_offset) || SYM(b, ggml_version) ||
        SYM(b, ggml_commit) || SYM(b, ggml_log_set))
        return -1;
    if (!peer_log_wanted()) p->ggml_log_set(quiet_log, NULL);
    p->base = b;
    return 0;
}

int bench_peer_open_llama(bench_peer *p, const char *dir) {
    if (p->llama) return 0;
    if (bench_peer_open_gguf(p, dir)) return -1;
    void *g = open_lib(p->dir, "libggml.v0.4.0.so");
    if (!g || SYM(g, ggml_backend_load_all_from_path)) return -1;
    void *l = open_lib(p->dir, "libllama.v0.4.0.so");
    if (!l || SYM(l, llama_backend_init) || SYM(l, llama_backend_free) ||
        SYM(l, llama_model_default_params) || SYM(l, llama_model_load_from_file) ||
        SYM(l, llama_model_free) || SYM(l, llama_model_size) || SYM(l, llama_model_n_params) ||
        SYM(l, llama_log_set))
        return -1;
    if (!peer_log_wanted()) p->llama_log_set(quiet_log, NULL);
    p->ggml_backend_load_all_from_path(p->dir);
    p->llama_backend_init();
    p->ggml = g;
    p->llama = l;
    return 0;
}

void bench_peer_close(bench_peer *p) {
    if (!p) return;
    if (p->llama && p->llama_backend_free) p->llama_backend_free();
    memset(p, 0, sizeof *p);
}

/* ---- time and statistics ---- */

double bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double quantile(const double *v, size_t n, double q) {
    double pos = q * (double)(n - 1);
    size_t i = (size_t)pos;
    if (i + 1 >= n) return v[n - 1];
    double frac = pos - (double)i;
    return v[i] + (v[i + 1] - v[i]) * frac;
}

bench_stats bench_stats_of(double *v, size_t n) {
    bench_stats s = {0};
    if (n == 0) return s;
    qsort(v, n, sizeof *v, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    s.n = n;
    s.min = v[0];
    s.max = v[n - 1];
    s.mean = sum / (double)n;
    s.p10 = quantile(v, n, 0.10);
    s.median = quantile(v, n, 0.50);
    s.p90 = quantile(v, n, 0.90);
    return s;
}

/* ---- memory ---- */

/* Adds the "Key:   N kB" value of every listed key found in a /proc file. */
static int read_kb(const char *path, const char *const *keys, uint64_t *const *outs, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        for (size_t i = 0; i < n; i++) {
            size_t kl = strlen(keys[i]);
            if (strncmp(line, keys[i], kl) == 0 && line[kl] == ':') {
                unsigned long long kb = strtoull(line + kl + 1, NULL, 10);
                *outs[i] = (uint64_t)kb * 1024u;
            }
        }
    }
    fclose(f);
    return 0;
}

int bench_mem_get(bench_mem *out) {
    bench_mem m = {0};
    const char *rk[] = {"Rss", "Anonymous", "Swap", "Locked"};
    uint64_t *const ro[] = {&m.rss, &m.anonymous, &m.swap, &m.locked};
    if (read_kb("/proc/self/smaps_rollup", rk, ro, 4)) return -1;
    const char *sk[] = {"RssShmem", "RssFile"};
    uint64_t *const so[] = {&m.shmem, &m.rss_file};
    if (read_kb("/proc/self/status", sk, so, 2)) return -1;
    m.footprint = m.anonymous + m.swap + m.shmem;
    *out = m;
    return 0;
}

/* ---- paths and output ---- */

const char *bench_fixture(char *buf, size_t cap, const char *rel) {
    const char *env = getenv("WM_FIXTURES");
    snprintf(buf, cap, "%s/%s", env && *env ? env : WM_FIXTURES, rel);
    return buf;
}

void bench_machine_line(char *buf, size_t cap) {
    char model[160] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *v = strchr(line, ':');
            if (v) {
                v++;
                while (*v == ' ' || *v == '\t')
                    v++;
                snprintf(model, sizeof model, "%.*s", (int)strcspn(v, "\n"), v);
            }
            break;
        }
    }
    if (f) fclose(f);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &tm);
    /* The load average says how far a shared machine's absolute times can be trusted. */
    char load[64] = "?";
    FILE *l = fopen("/proc/loadavg", "r");
    if (l && fgets(load, sizeof load, l)) {
        int fields = 0;
        for (char *c = load; *c; c++)
            if (*c == ' ' && ++fields == 3) *c = 0;
        load[strcspn(load, "\n")] = 0;
    }
    if (l) fclose(l);
    cpu_set_t set;
    long cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? (long)CPU_COUNT(&set)
                                                            : sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(buf, cap, "%s; %ld CPUs (nproc); %s; load average %s", date, cpus, model, load);
}

/* ---- the page cache ---- */

uint64_t bench_cached_bytes(const char *path) {
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
        if (fd >= 0) close(fd);
        return 0;
    }
    size_t len = (size_t)st.st_size, pg = (size_t)sysconf(_SC_PAGESIZE), n = (len + pg - 1) / pg;
    void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    unsigned char *v = malloc(n);
    uint64_t c = 0;
    if (p != MAP_FAILED && v && mincore(p, len, v) == 0)
        for (size_t i = 0; i < n; i++)
            c += (v[i] & 1) ? pg : 0;
    if (p != MAP_FAILED) munmap(p, len);
    free(v);
    return c;
}

void bench_make_cold(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

/* ---- the guest's memory ---- */

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

typedef struct warm_half {
    unsigned char *p;
    size_t n;
} warm_half;

static void *warm_populate(void *arg) {
    const warm_half *h = arg;
    if (madvise(h->p, h->n, MADV_POPULATE_WRITE) != 0) memset(h->p, 1, h->n);
    return NULL;
}

void bench_warm_memory(double gib) {
    size_t n = (size_t)(gib * 1073741824.0) / 4096 * 4096;
    if (n == 0) return;
    unsigned char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    madvise(p, n, MADV_HUGEPAGE);
    warm_half h[2] = {{p, n / 2}, {p + n / 2, n - n / 2}};
    pthread_t th;
    bool two = pthread_create(&th, NULL, warm_populate, &h[1]) == 0;
    warm_populate(&h[0]);
    if (two)
        pthread_join(th, NULL);
    else
        warm_populate(&h[1]);
    munmap(p, n);
}

void bench_make_warm(const char *path) {
    int fd = open(path, O_RDONLY);
    size_t len = (size_t)8 << 20;
    char *b = malloc(len);
    while (fd >= 0 && b && read(fd, b, len) > 0) {
    }
    free(b);
    if (fd >= 0) close(fd);
}
