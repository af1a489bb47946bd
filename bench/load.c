/*
 * load.c: the load benchmark. Time to loaded, peak footprint during the load, and footprint
 * after release and after N cycles, for weightmap's wm_model_load / wm_model_release (heap,
 * mmap, mmap with prefetch, mmap-private) against llama.cpp's llama_model_load_from_file /
 * llama_model_free (load_mode 0 = read, 1 = mmap; n_gpu_layers 0), next to three plain
 * parallel preads of the same bytes that bound what any loader can do on this machine:
 * into memory that is already faulted in (the ceiling), into fresh anonymous memory,
 * and into fresh anonymous memory advised MADV_HUGEPAGE (the ceiling of a loader that must
 * allocate what it fills).
 *
 * Method: every measurement runs in its own child process (fork), so one contender's
 * allocations, caches and global state (llama.cpp keeps some after llama_model_free) never
 * show in another's figures. A child takes its baseline footprint before the first load, then
 * runs `cycles` load+release cycles: the first one with a sampler thread that reads
 * /proc/self/smaps_rollup and /proc/self/status about every millisecond (peak footprint, peak
 * AnonHugePages; that cycle is not timed), the others timed. It reports the footprint after
 * the first release and after the last one, as deltas from the baseline. Rounds alternate the
 * contenders (the order rotates every round) so every one sees the same warm page cache; the
 * file is read once before the first round. Footprint = Anonymous + Swap (smaps_rollup) +
 * RssShmem (status).
 *
 * Sections: options and contenders; memory sampling; the plain pread ceilings; one child's
 * measurement; the per-file loop and table; main.
 *
 * Usage: load [-r ROUNDS] [-c CYCLES] [-t THREADS] [--peer DIR] [--only LIST] [FILE...]
 *   -r ROUNDS   child processes per contender and file (default 3)
 *   -c CYCLES   load+release cycles per child (default 20; the first is sampled, not timed)
 *   -t THREADS  weightmap's and the preads' threads (default 0: one per online CPU)
 *   --only LIST comma-separated contender names (default: all but pread-fresh): heap, mmap,
 *               mmap-prefetch, mmap-private, llama-read, llama-mmap, pread-faulted,
 *               pread-fresh, pread-fresh-huge
 *   FILE...     GGUF files (default: a 1200 MB llama-shaped model made with
 *               `weightmap make-model` next to this executable, and stories260K.gguf)
 */
#include "peer.h"

#include <weightmap.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_HUGEPAGE
#define MADV_HUGEPAGE 14
#endif

#define MAX_CYCLES 1000
#define MAX_THREADS 64
#define SLACK_BYTES ((uint64_t)64 << 10) /* the footprint target after the cycles */

/* ---- options and contenders ---- */

typedef enum kind {
    K_WM_HEAP,
    K_WM_MMAP,
    K_WM_MMAP_PREFETCH,
    K_WM_MMAP_PRIVATE,
    K_LL_READ,
    K_LL_MMAP,
    K_PREAD_FAULTED,
    K_PREAD_FRESH,
    K_PREAD_FRESH_HUGE,
    K_COUNT
} kind;

static const char *const kind_name[K_COUNT] = {
    "weightmap heap",         "weightmap mmap",      "weightmap mmap+prefetch",
    "weightmap mmap-private", "llama.cpp read",      "llama.cpp mmap",
    "pread, faulted memory",  "pread, fresh memory", "pread, fresh MADV_HUGEPAGE",
};
static const char *const kind_key[K_COUNT] = {
    "heap",       "mmap",          "mmap-prefetch", "mmap-private",     "llama-read",
    "llama-mmap", "pread-faulted", "pread-fresh",   "pread-fresh-huge",
};

typedef struct options {
    int rounds, cycles;
    unsigned threads;
    const char *peer_dir;
    bool only[K_COUNT];
} options;

/* What a child sends back through its pipe. */
typedef struct result {
    int ok;
    int n;                    /* timed cycles */
    double total[MAX_CYCLES]; /* ms: parse + load (weightmap), the call (llama.cpp), the read */
    double parse[MAX_CYCLES]; /* ms: wm_file_open alone (weightmap); 0 for the others */
    double release[MAX_CYCLES];
    int64_t peak;      /* bytes over the baseline, sampled during the first load */
    int64_t peak_thp;  /* AnonHugePages at its highest during the first load */
    int64_t after_one; /* after the first release */
    int64_t after_all; /* after the last release */
    uint64_t bytes;    /* tensor bytes loaded */
    unsigned threads;  /* threads the load used (weightmap, the preads) */
    char msg[256];
} result;

/* ---- memory sampling ---- */

/* Adds the "Key:   N kB" values of the listed keys found in a /proc file. */
static int read_kb(const char *path, const char *const *keys, uint64_t *const *outs, size_t n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[8192];
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got <= 0) return -1;
    buf[got] = 0;
    for (char *line = buf; line && *line;
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        for (size_t i = 0; i < n; i++) {
            size_t kl = strlen(keys[i]);
            if (strncmp(line, keys[i], kl) == 0 && line[kl] == ':')
                *outs[i] = strtoull(line + kl + 1, NULL, 10) * 1024u;
        }
    }
    return 0;
}

typedef struct mem {
    uint64_t footprint, thp;
} mem;

static mem mem_now(void) {
    uint64_t anon = 0, swap = 0, thp = 0, shmem = 0;
    const char *rk[] = {"Anonymous", "Swap", "AnonHugePages"};
    uint64_t *const ro[] = {&anon, &swap, &thp};
    read_kb("/proc/self/smaps_rollup", rk, ro, 3);
    const char *sk[] = {"RssShmem"};
    uint64_t *const so[] = {&shmem};
    read_kb("/proc/self/status", sk, so, 1);
    return (mem){anon + swap + shmem, thp};
}

typedef struct sampler {
    pthread_t th;
    atomic_int stop;
    uint64_t peak, peak_thp;
} sampler;

static void *sample_loop(void *arg) {
    sampler *s = arg;
    struct timespec ms = {0, 1000000};
    do {
        mem m = mem_now();
        if (m.footprint > s->peak) s->peak = m.footprint;
        if (m.thp > s->peak_thp) s->peak_thp = m.thp;
        nanosleep(&ms, NULL);
    } while (!atomic_load(&s->stop));
    return NULL;
}

static int sampler_start(sampler *s) {
    s->peak = s->peak_thp = 0;
    atomic_init(&s->stop, 0);
    return pthread_create(&s->th, NULL, sample_loop, s);
}

static void sampler_stop(sampler *s) {
    atomic_store(&s->stop, 1);
    pthread_join(s->th, NULL);
    mem m = mem_now(); /* the state at the end of the load counts too */
    if (m.footprint > s->peak) s->peak = m.footprint;
    if (m.thp > s->peak_thp) s->peak_thp = m.thp;
}

/* ---- the plain pread ceilings ---- */

typedef struct slice {
    int fd;
    unsigned char *dst;
    uint64_t off;
    size_t len;
    int err;
} slice;

static void *read_slice(void *arg) {
    slice *s = arg;
    size_t done = 0;
    while (done < s->len) {
        ssize_t n = pread(s->fd, s->dst + done, s->len - done, (off_t)(s->off + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            s->err = n < 0 ? errno : EIO;
            return NULL;
        }
        done += (size_t)n;
    }
    return NULL;
}

/* Reads [off, off+len) of fd into dst with `threads` threads, one contiguous slice each (the
 * calling thread takes the first). Returns 0 or an errno value. */
static int parallel_pread(int fd, unsigned char *dst, uint64_t off, size_t len, unsigned threads) {
    pthread_t th[MAX_THREADS];
    slice sl[MAX_THREADS];
    size_t each = (len / threads + 4095) / 4096 * 4096;
    unsigned n = 0;
    for (size_t at = 0; at < len && n < threads; n++, at += each) {
        sl[n] = (slice){fd, dst + at, off + at, len - at < each ? len - at : each, 0};
    }
    for (unsigned i = 1; i < n; i++)
        if (pthread_create(&th[i], NULL, read_slice, &sl[i])) return EAGAIN;
    read_slice(&sl[0]);
    int err = sl[0].err;
    for (unsigned i = 1; i < n; i++) {
        pthread_join(th[i], NULL);
        if (sl[i].err) err = sl[i].err;
    }
    return err;
}

/* ---- one child's measurement ---- */

typedef struct target {
    const char *path;
    uint64_t data_off, data_len; /* the tensor data: what the preads read */
} target;

typedef struct contender_state {
    const options *o;
    const target *t;
    kind k;
    bench_peer peer;
    int fd;
    unsigned char *faulted;
} contender_state;

/* One load and release; fills the times (ms). Returns 0, or -1 with r->msg set. */
static int one_cycle(contender_state *s, result *r, double *total, double *parse, double *rel) {
    double t0 = bench_now_ms(), t1 = t0, t2, t3;
    const options *o = s->o;
    switch (s->k) {
    case K_WM_HEAP:
    case K_WM_MMAP:
    case K_WM_MMAP_PREFETCH:
    case K_WM_MMAP_PRIVATE: {
        wm_error err;
        wm_file *f = NULL;
        wm_model *m = NULL;
        wm_load_options lo;
        memset(&lo, 0, sizeof lo);
        lo.mode = s->k == K_WM_HEAP           ? WM_MODE_HEAP
                  : s->k == K_WM_MMAP_PRIVATE ? WM_MODE_MMAP_PRIVATE
                                              : WM_MODE_MMAP;
        lo.prefetch = s->k == K_WM_MMAP_PREFETCH;
        lo.threads = o->threads;
        if (wm_file_open(s->t->path, &f, &err) != WM_OK) {
            snprintf(r->msg, sizeof r->msg, "wm_file_open: %.200s", err.msg);
            return -1;
        }
        t1 = bench_now_ms();
        if (wm_model_load(f, &lo, &m, &err) != WM_OK) {
            snprintf(r->msg, sizeof r->msg, "wm_model_load: %.200s", err.msg);
            wm_file_close(f);
            return -1;
        }
        t2 = bench_now_ms();
        wm_model_stats st = WM_MODEL_STATS_INIT;
        wm_model_stats_get(m, &st);
        r->bytes = st.tensor_bytes;
        r->threads = st.threads;
        wm_model_release(m);
        wm_file_close(f);
        t3 = bench_now_ms();
        break;
    }
    case K_LL_READ:
    case K_LL_MMAP: {
        struct bench_llama_model_params p = s->peer.llama_model_default_params();
        p.n_gpu_layers = 0;
        p.load_mode = s->k == K_LL_READ ? BENCH_LLAMA_LOAD_READ : BENCH_LLAMA_LOAD_MMAP;
        struct llama_model *m = s->peer.llama_model_load_from_file(s->t->path, p);
        t2 = bench_now_ms();
        if (!m) {
            snprintf(r->msg, sizeof r->msg,
                     "llama_model_load_from_file failed (WM_PEER_LOG=1 says why)");
            return -1;
        }
        r->bytes = s->peer.llama_model_size(m);
        r->threads = 1;
        s->peer.llama_model_free(m);
        t3 = bench_now_ms();
        break;
    }
    default: {
        size_t len = (size_t)s->t->data_len;
        unsigned char *dst = s->faulted;
        if (s->k != K_PREAD_FAULTED) {
            void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) {
                snprintf(r->msg, sizeof r->msg, "mmap: %s", strerror(errno));
                return -1;
            }
            if (s->k == K_PREAD_FRESH_HUGE) madvise(p, len, MADV_HUGEPAGE);
            dst = p;
        }
        int e = parallel_pread(s->fd, dst, s->t->data_off, len, o->threads);
        t2 = bench_now_ms();
        if (s->k != K_PREAD_FAULTED) munmap(dst, len);
        t3 = bench_now_ms();
        if (e) {
            snprintf(r->msg, sizeof r->msg, "pread: %s", strerror(e));
            return -1;
        }
        r->bytes = len;
        r->threads = o->threads;
        break;
    }
    }
    *total = t2 - t0;
    *parse = t1 - t0;
    *rel = t3 - t2;
    return 0;
}

/* The child: set up (not measured), baseline, cycles, figures. */
static void run_child(const options *o, const target *t, kind k, result *r) {
    contender_state s = {.o = o, .t = t, .k = k, .fd = -1};
    if (k == K_LL_READ || k == K_LL_MMAP) {
        if (bench_peer_open_llama(&s.peer, o->peer_dir)) {
            snprintf(r->msg, sizeof r->msg, "cannot open llama.cpp (run scripts/peer.sh)");
            return;
        }
    }
    if (k >= K_PREAD_FAULTED) {
        s.fd = open(t->path, O_RDONLY | O_CLOEXEC);
        if (s.fd < 0) {
            snprintf(r->msg, sizeof r->msg, "open: %s", strerror(errno));
            return;
        }
    }
    if (k == K_PREAD_FAULTED) {
        /* Faulted before the baseline: this contender's memory is not part of its load. */
        void *p = mmap(NULL, (size_t)t->data_len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            snprintf(r->msg, sizeof r->msg, "mmap: %s", strerror(errno));
            return;
        }
        madvise(p, (size_t)t->data_len, MADV_HUGEPAGE);
        memset(p, 1, (size_t)t->data_len);
        s.faulted = p;
    }
    uint64_t base = mem_now().footprint;
    sampler smp;
    if (sampler_start(&smp)) {
        snprintf(r->msg, sizeof r->msg, "cannot start the sampler thread");
        return;
    }
    double tot, par, rel;
    int rc = one_cycle(&s, r, &tot, &par, &rel);
    sampler_stop(&smp);
    if (rc) return;
    r->peak = (int64_t)(smp.peak - base);
    r->peak_thp = (int64_t)smp.peak_thp;
    r->after_one = (int64_t)(mem_now().footprint - base);
    for (int c = 1; c < o->cycles; c++) {
        if (one_cycle(&s, r, &r->total[r->n], &r->parse[r->n], &r->release[r->n])) return;
        r->n++;
    }
    r->after_all = (int64_t)(mem_now().footprint - base);
    r->ok = 1;
}

/* Forks a child for one measurement and collects its result. Returns 0 or -1. */
static int measure(const options *o, const target *t, kind k, result *r) {
    int fds[2];
    memset(r, 0, sizeof *r);
    if (pipe(fds)) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        result *mine = calloc(1, sizeof *mine);
        if (mine) {
            run_child(o, t, k, mine);
            const char *p = (const char *)mine;
            size_t left = sizeof *mine;
            while (left) {
                ssize_t n = write(fds[1], p, left);
                if (n <= 0) break;
                p += n;
                left -= (size_t)n;
            }
        }
        _exit(0);
    }
    close(fds[1]);
    char *p = (char *)r;
    size_t got = 0;
    while (got < sizeof *r) {
        ssize_t n = read(fds[0], p + got, sizeof *r - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != sizeof *r) {
        snprintf(r->msg, sizeof r->msg, "the child died (status %d)", status);
        r->ok = 0;
    }
    return r->ok ? 0 : -1;
}

/* ---- the per-file loop and table ---- */

typedef struct summary {
    bool done;
    bench_stats total, parse, release;
    int64_t peak, peak_thp, after_one, after_all; /* worst over the rounds */
    uint64_t bytes;
    unsigned threads;
} summary;

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Reads the whole file once so every contender starts from a warm page cache. */
static int warm(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    static unsigned char buf[1 << 20];
    while (read(fd, buf, sizeof buf) > 0) {
    }
    close(fd);
    return 0;
}

static void fmt_bytes(char *buf, size_t cap, int64_t v) {
    double a = (double)(v < 0 ? -v : v);
    const char *sign = v < 0 ? "-" : "";
    if (a >= (double)(1 << 20))
        snprintf(buf, cap, "%s%.1f MiB", sign, a / (double)(1 << 20));
    else
        snprintf(buf, cap, "%s%.0f KiB", sign, a / 1024.0);
}

/* The table of one file's rows, then the targets where this run measured what they
 * need. */
static void print_table(const options *o, const char *path, const target *t,
                        const summary sum[K_COUNT]) {
    const char *slash = strrchr(path, '/');
    printf("\n### %s (%llu bytes, %.1f MiB of tensor data)\n\n", slash ? slash + 1 : path,
           (unsigned long long)(t->data_off + t->data_len), (double)t->data_len / (1 << 20));
    printf("| contender | threads | time to loaded ms: median (p10-p90) | of which parse | GB/s | "
           "ceiling / this | fresh ceiling / this | peak footprint | peak AnonHugePages | after "
           "release | after %d cycles | release ms |\n",
           o->cycles);
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    double ceil = sum[K_PREAD_FAULTED].done ? sum[K_PREAD_FAULTED].total.median : 0;
    double fresh = sum[K_PREAD_FRESH_HUGE].done ? sum[K_PREAD_FRESH_HUGE].total.median : 0;
    for (int k = 0; k < K_COUNT; k++) {
        const summary *s = &sum[k];
        if (!s->done) continue;
        char pk[32], th[32], a1[32], an[32], rc1[32] = "", rc2[32] = "";
        fmt_bytes(pk, sizeof pk, s->peak);
        fmt_bytes(th, sizeof th, s->peak_thp);
        fmt_bytes(a1, sizeof a1, s->after_one);
        fmt_bytes(an, sizeof an, s->after_all);
        if (ceil > 0) snprintf(rc1, sizeof rc1, "%.2fx", ceil / s->total.median);
        if (fresh > 0) snprintf(rc2, sizeof rc2, "%.2fx", fresh / s->total.median);
        printf(
            "| %s | %u | %.2f (%.2f-%.2f) | %.2f | %.2f | %s | %s | %s | %s | %s | %s | %.2f |\n",
            kind_name[k], s->threads, s->total.median, s->total.p10, s->total.p90, s->parse.median,
            (double)s->bytes / s->total.median / 1e6, rc1, rc2, pk, th, a1, an, s->release.median);
    }
    /* The targets, where this run measured what they need. */
    const summary *h = &sum[K_WM_HEAP], *lr = &sum[K_LL_READ], *mm = &sum[K_WM_MMAP];
    printf("\n");
    if (h->done && ceil > 0)
        printf("- heap at least 0.9x the faulted-memory pread ceiling: %s (%.2fx; %.2fx without "
               "the parse)\n",
               ceil / h->total.median >= 0.9 ? "met" : "NOT met", ceil / h->total.median,
               ceil / (h->total.median - h->parse.median));
    if (h->done && fresh > 0)
        printf("- heap against the fresh-memory (MADV_HUGEPAGE) pread ceiling: %.2fx (%.2fx "
               "without the parse)\n",
               fresh / h->total.median, fresh / (h->total.median - h->parse.median));
    if (h->done && lr->done)
        printf("- heap faster than llama.cpp read: %s (%.2fx)\n",
               h->total.median < lr->total.median ? "met" : "NOT met",
               lr->total.median / h->total.median);
    if (mm->done)
        printf("- mmap ready in parse time + 1 ms: %s (parse %.3f ms, total %.3f ms)\n",
               mm->total.median - mm->parse.median <= 1.0 ? "met" : "NOT met", mm->parse.median,
               mm->total.median);
    bool all = true;
    for (int k = K_WM_HEAP; k <= K_WM_MMAP_PRIVATE; k++)
        if (sum[k].done && (sum[k].after_all > (int64_t)SLACK_BYTES)) all = false;
    printf("- weightmap footprint after %d cycles within 64 KiB of the baseline in every mode: "
           "%s\n",
           o->cycles, all ? "met" : "NOT met");
}

static int bench_file(const options *o, const char *path) {
    wm_error err;
    wm_file *f = NULL;
    if (wm_file_open(path, &f, &err) != WM_OK) {
        fprintf(stderr, "load: %s\n", err.msg);
        return -1;
    }
    target t = {.path = path, .data_off = wm_file_data_offset(f)};
    t.data_len = wm_file_size(f) - t.data_off;
    wm_file_close(f);
    if (warm(path)) {
        fprintf(stderr, "load: cannot read %s\n", path);
        return -1;
    }

    kind ks[K_COUNT];
    int nk = 0;
    for (int k = 0; k < K_COUNT; k++)
        if (o->only[k]) ks[nk++] = (kind)k;
    static double tot[K_COUNT][MAX_CYCLES * 16], par[K_COUNT][MAX_CYCLES * 16],
        rel[K_COUNT][MAX_CYCLES * 16];
    size_t nt[K_COUNT] = {0};
    summary sum[K_COUNT];
    memset(sum, 0, sizeof sum);
    result *r = calloc(1, sizeof *r);
    if (!r) return -1;
    int rc = 0;
    for (int round = 0; round < o->rounds && rc == 0; round++) {
        for (int j = 0; j < nk && rc == 0; j++) {
            kind k = ks[(j + round) % nk];
            if (measure(o, &t, k, r)) {
                fprintf(stderr, "load: %s: %s: %s\n", path, kind_name[k], r->msg);
                rc = -1;
                break;
            }
            summary *s = &sum[k];
            for (int c = 0; c < r->n && nt[k] < (size_t)MAX_CYCLES * 16; c++, nt[k]++) {
                tot[k][nt[k]] = r->total[c];
                par[k][nt[k]] = r->parse[c];
                rel[k][nt[k]] = r->release[c];
            }
            s->peak = s->done ? max64(s->peak, r->peak) : r->peak;
            s->peak_thp = s->done ? max64(s->peak_thp, r->peak_thp) : r->peak_thp;
            s->after_one = s->done ? max64(s->after_one, r->after_one) : r->after_one;
            s->after_all = s->done ? max64(s->after_all, r->after_all) : r->after_all;
            s->bytes = r->bytes;
            s->threads = r->threads;
            s->done = true;
        }
    }
    free(r);
    if (rc) return rc;
    for (int j = 0; j < nk; j++) {
        kind k = ks[j];
        sum[k].total = bench_stats_of(tot[k], nt[k]);
        sum[k].parse = bench_stats_of(par[k], nt[k]);
        sum[k].release = bench_stats_of(rel[k], nt[k]);
    }

    print_table(o, path, &t, sum);
    fflush(stdout);
    return 0;
}

/* ---- main ---- */

static void usage(void) {
    fprintf(stderr, "usage: load [-r ROUNDS] [-c CYCLES] [-t THREADS] [--peer DIR] [--only "
                    "LIST] [FILE...]\n");
}

static int parse_only(options *o, const char *list) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    memset(o->only, 0, sizeof o->only);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < K_COUNT && strcmp(tok, kind_key[k]) != 0)
            k++;
        if (k == K_COUNT) {
            fprintf(stderr, "load: unknown contender '%s' (known:", tok);
            for (int j = 0; j < K_COUNT; j++)
                fprintf(stderr, " %s", kind_key[j]);
            fprintf(stderr, ")\n");
            return -1;
        }
        o->only[k] = true;
    }
    return 0;
}

/* The default big model: bench-load-1200M.gguf next to this executable, made once with the
 * weightmap CLI of the same build when missing. */
static int default_model(char *buf, size_t cap) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = 0;
    snprintf(buf, cap, "%.4000s/bench-load-1200M.gguf", exe);
    struct stat st;
    if (stat(buf, &st) == 0) return 0;
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "'%s/../weightmap' make-model '%s' --size 1200M >&2", exe, buf);
    fprintf(stderr, "load: making the benchmark model: %s\n", cmd);
    return system(cmd) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    options o = {.rounds = 3, .cycles = 20};
    /* pread into fresh 4 KiB pages is left out by default: it only shows what faults cost. */
    for (int k = 0; k < K_COUNT; k++)
        o.only[k] = k != K_PREAD_FRESH;
    const char **files = calloc((size_t)argc + 2, sizeof *files);
    static char model[4096], stories[4096];
    size_t n_files = 0;
    if (!files) return 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-r") == 0 && i + 1 < argc) {
            o.rounds = atoi(argv[++i]);
        } else if (strcmp(argv[i], "-c") == 0 && i + 1 < argc) {
            o.cycles = atoi(argv[++i]);
        } else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) {
            o.threads = (unsigned)atoi(argv[++i]);
        } else if (strcmp(argv[i], "--peer") == 0 && i + 1 < argc) {
            o.peer_dir = argv[++i];
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            if (parse_only(&o, argv[++i])) return 2;
        } else if (argv[i][0] == '-') {
            usage();
            return 2;
        } else {
            files[n_files++] = argv[i];
        }
    }
    if (o.rounds < 1 || o.cycles < 2 || o.cycles > MAX_CYCLES || o.threads > MAX_THREADS) {
        usage();
        return 2;
    }
    if (o.threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o.threads = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (unsigned)n;
    }
    if (n_files == 0) {
        if (default_model(model, sizeof model)) {
            fprintf(stderr, "load: cannot make the default model\n");
            return 1;
        }
        files[n_files++] = model;
        files[n_files++] = bench_fixture(stories, sizeof stories, "gguf/stories260K.gguf");
    }
    if (o.only[K_LL_READ] || o.only[K_LL_MMAP]) {
        /* Checked here once so a missing peer fails fast; the children open it themselves. */
        bench_peer probe = {0};
        pid_t pid = fork();
        if (pid == 0) _exit(bench_peer_open_llama(&probe, o.peer_dir) ? 1 : 0);
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
            return 1;
    }

    char machine[512];
    bench_machine_line(machine, sizeof machine);
    printf("## load\n\n");
    printf(
        "Time to loaded (warm page cache), median (p10-p90) of %d rounds x %d timed cycles; each "
        "measurement in its own child process, contenders alternating by round; footprint = "
        "Anonymous + Swap + RssShmem, as a delta from a baseline taken in the child before its "
        "first load (peak: sampled every ~1 ms during the first, untimed, load; the other "
        "columns: worst child).\n",
        o.rounds, o.cycles - 1);
    printf("weightmap %s (%u threads); llama.cpp v0.4.0 llama_model_load_from_file(n_gpu_layers=0) "
           "+ llama_model_free (one thread); preads: %u threads, one contiguous slice each, of "
           "[data offset, end of file).\n",
           wm_version(), o.threads, o.threads);
    printf("Machine: %s.\n", machine);
    int rc = 0;
    for (size_t i = 0; i < n_files; i++)
        if (bench_file(&o, files[i])) rc = 1;
    free(files);
    return rc;
}
