/*
 * reload.c: a model released and loaded again (issue 45, bench/RESULTS.md "reload"): the time
 * from asking for a model again to having it loaded, for
 *
 *   wm-wake      weightmap's pool: a mode mmap model evicted (asleep: its pages left to the page
 *                cache) and got again, with MADV_POPULATE_READ (every page mapped before get
 *                returns, as a loaded model is)
 *   wm-heap      the pool, mode heap: evicted, got again from the warm page cache (the parallel
 *                reader into fresh pages)
 *   wm-heap-cold the same from a cold file (fdatasync, POSIX_FADV_DONTNEED before each load,
 *                checked with mincore): the reader's direct I/O
 *   wm-wake-cold mode mmap with its pages dropped: populated from the disk
 *   llama-mmap   llama.cpp's llama_model_load_from_file, load_mode mmap (1), after
 *                llama_model_free, warm
 *   llama-read   the same, load_mode read (0): into its own buffers, warm
 *   llama-*-cold both from a cold file
 *
 * Each contender runs in a child process of its own (fork): one load and release first, not
 * timed, then ROUNDS timed reloads (each after the release of the last); the median and the
 * spread. The pool's evictions are checked proven (wm_pool_stats.unproven 0) and the ledger at 0
 * after each child's pool is closed.
 *
 *     build/bench/reload [-r ROUNDS] [--only KEY,KEY...] [MODEL]
 *
 * MODEL defaults to bench-reload-512M.gguf in the working folder, made with `weightmap
 * make-model --size 512M` (the CLI beside this program's folder) when missing. Needs the peer
 * (scripts/peer.sh) for the llama rows; without it they are skipped.
 */
#include "peer.h"
#include "weightmap.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ROUNDS 32

/* ---- the page cache ---- */

static double cached_share(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || st.st_size == 0) return 0;
    return (double)bench_cached_bytes(path) / (double)st.st_size;
}

/* ---- contenders ---- */

typedef struct contender {
    const char *key;
    bool cold, llama;
    wm_mode mode;  /* the pool's */
    int load_mode; /* llama.cpp's */
} contender;

static const contender contenders[] = {
    {"wm-wake", false, false, WM_MODE_MMAP, 0},
    {"wm-heap", false, false, WM_MODE_HEAP, 0},
    {"llama-mmap", false, true, 0, BENCH_LLAMA_LOAD_MMAP},
    {"llama-read", false, true, 0, BENCH_LLAMA_LOAD_READ},
    {"wm-wake-cold", true, false, WM_MODE_MMAP, 0},
    {"wm-heap-cold", true, false, WM_MODE_HEAP, 0},
    {"llama-mmap-cold", true, true, 0, BENCH_LLAMA_LOAD_MMAP},
    {"llama-read-cold", true, true, 0, BENCH_LLAMA_LOAD_READ},
};
#define N_CONTENDERS (sizeof contenders / sizeof contenders[0])

/* Before a timed load: the file cold or warm, as the contender wants (checked). */
static int prepare(const contender *c, const char *path) {
    if (c->cold)
        bench_make_cold(path);
    else
        bench_make_warm(path);
    double share = cached_share(path);
    if (c->cold ? share > 0.02 : share < 0.98) {
        fprintf(stderr, "reload: %s: the file is %.0f%% cached, not %s\n", c->key, share * 100,
                c->cold ? "cold" : "warm");
        return -1;
    }
    return 0;
}

/* The pool's reload: get (loads), put, trim (evicts, proven); the first not timed. */
static int run_pool(const contender *c, const char *path, int rounds, double *ms) {
    wm_pool_options po = WM_POOL_OPTIONS_INIT;
    wm_pool *pool;
    wm_error err;
    if (wm_pool_open(&po, &pool, &err)) return fprintf(stderr, "reload: %s\n", err.msg), -1;
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = c->mode;
    o.prefetch = c->mode == WM_MODE_MMAP;
    int rc = 0;
    for (int r = -1; r < rounds && !rc; r++) {
        if (r >= 0 && prepare(c, path)) rc = -1;
        wm_model *m;
        double t0 = bench_now_ms();
        if (!rc && wm_pool_get(pool, path, &o, &m, &err)) {
            fprintf(stderr, "reload: %s\n", err.msg);
            rc = -1;
        }
        if (rc) break;
        if (r >= 0) ms[r] = bench_now_ms() - t0;
        wm_pool_put(pool, m, NULL);
        wm_pool_trim(pool);
    }
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(pool, &s);
    wm_pool_close(pool, NULL);
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    if (!rc && (s.unproven || wm_ledger_bytes(&l))) {
        fprintf(stderr, "reload: %s: %llu unproven evictions, ledger %llu\n", c->key,
                (unsigned long long)s.unproven, (unsigned long long)wm_ledger_bytes(&l));
        rc = -1;
    }
    return rc;
}

static int run_llama(const contender *c, const char *path, int rounds, double *ms) {
    bench_peer peer = {0};
    if (bench_peer_open_llama(&peer, NULL)) return 77;
    struct bench_llama_model_params p = peer.llama_model_default_params();
    p.load_mode = c->load_mode;
    int rc = 0;
    for (int r = -1; r < rounds && !rc; r++) {
        if (r >= 0 && prepare(c, path)) rc = -1;
        if (rc) break;
        double t0 = bench_now_ms();
        struct llama_model *m = peer.llama_model_load_from_file(path, p);
        if (!m) {
            fprintf(stderr, "reload: %s: llama.cpp did not load %s\n", c->key, path);
            rc = -1;
            break;
        }
        if (r >= 0) ms[r] = bench_now_ms() - t0;
        peer.llama_model_free(m);
    }
    bench_peer_close(&peer);
    return rc;
}

/* One contender in a child process; its times come back through a pipe. */
static int measure(const contender *c, const char *path, int rounds, double *ms) {
    int fds[2];
    if (pipe(fds)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        int rc = c->llama ? run_llama(c, path, rounds, ms) : run_pool(c, path, rounds, ms);
        if (!rc && write(fds[1], ms, sizeof *ms * (size_t)rounds) < 0) rc = -1;
        _exit(rc < 0 ? 1 : rc);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], ms, sizeof *ms * (size_t)rounds);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    if (code) return code;
    return got == (ssize_t)(sizeof *ms * (size_t)rounds) ? 0 : -1;
}

/* ---- the run ---- */

static const char *model_path(const char *arg, const char *self, char *buf, size_t cap) {
    if (arg) return arg;
    snprintf(buf, cap, "bench-reload-512M.gguf");
    if (access(buf, R_OK) == 0) return buf;
    char cli[4096];
    snprintf(cli, sizeof cli, "%s", self);
    char *slash = strrchr(cli, '/');
    if (slash) *slash = 0;
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "'%s/../weightmap' make-model '%s' --size 512M >/dev/null",
             slash ? cli : ".", buf);
    return system(cmd) == 0 ? buf : NULL;
}

static bool wanted(const char *only, const char *key) {
    if (!only) return true;
    size_t n = strlen(key);
    for (const char *s = strstr(only, key); s; s = strstr(s + 1, key))
        if ((s == only || s[-1] == ',') && (s[n] == 0 || s[n] == ',')) return true;
    return false;
}

int main(int argc, char **argv) {
    int rounds = 7;
    const char *only = NULL, *arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        else
            arg = argv[i];
    }
    if (rounds < 1 || rounds > MAX_ROUNDS) return fprintf(stderr, "reload: -r 1..32\n"), 2;
    char buf[4096];
    const char *path = model_path(arg, argv[0], buf, sizeof buf);
    if (!path) return fprintf(stderr, "reload: no model (make-model failed)\n"), 1;
    struct stat st;
    if (stat(path, &st)) return perror(path), 1;
    char machine[512];
    bench_machine_line(machine, sizeof machine);
    printf("reload: %s, %.1f MiB, %d timed reloads each (median, p10-p90); %s\n", path,
           (double)st.st_size / 1048576.0, rounds, machine);
    printf("%-16s %10s %18s %9s\n", "contender", "median ms", "p10-p90 ms", "GB/s");
    int failed = 0;
    for (size_t k = 0; k < N_CONTENDERS; k++) {
        if (!wanted(only, contenders[k].key)) continue;
        double ms[MAX_ROUNDS];
        int rc = measure(&contenders[k], path, rounds, ms);
        if (rc == 77) {
            printf("%-16s skipped: no peer (scripts/peer.sh)\n", contenders[k].key);
            continue;
        }
        if (rc) {
            printf("%-16s FAILED\n", contenders[k].key);
            failed = 1;
            continue;
        }
        bench_stats s = bench_stats_of(ms, (size_t)rounds);
        printf("%-16s %10.1f %8.1f-%-9.1f %9.2f\n", contenders[k].key, s.median, s.p10, s.p90,
               (double)st.st_size / (s.median * 1e6));
    }
    return failed;
}
