/*
 * llama_modes.c: every load mode of llama.cpp v0.4.0 (params.load_mode: NONE, MMAP, MLOCK,
 * MMAP_MLOCK, DIRECT_IO) through the llama.cpp bridge (wm_llama_load) against llama.cpp's own
 * loader in the same mode, cold and warm, in one run (docs/LLAMA.md "Load modes",
 * bench/RESULTS.md, llama, "Load modes"; bench/llama_modes.sh adds the tracer's rules):
 *
 *   load ms   time to loaded, median (p10-p90) of the rounds, each load in a child process of
 *             its own; cold: fdatasync and POSIX_FADV_DONTNEED on the file first (what is left
 *             cached is printed), warm: the file read through once first;
 *   anon MiB  RssAnon of the child with the model loaded, over the child's before the load
 *             (median): the anonymous memory a device's killer counts (iOS: phys_footprint,
 *             Android: the low-memory killer's anon+swap), which mapped file pages are not;
 *   regions   the file's mappings while loaded (r--s: shared, read-only);
 *   the disk  parallel O_DIRECT 8 MiB preads of the tensor data from the cold file, the same
 *             rounds: each cold load's ratio to it, paired round by round (median);
 *   the page cache  the cold file's tensor data brought into the page cache through a shared
 *             mapping (below), the same rounds: the most a mapped load can reach where the page
 *             cache fills slower than the disk reads; each cold load's ratio to it, paired.
 *
 *     build/bench/llama_modes [-r ROUNDS] [--gpu] [--warm-memory GIB] [--modes LIST] [MODEL]
 *
 * --modes: only the modes named, comma-separated as the table names them (mmap,dio).
 * MODEL defaults to bench-llama-1200M.gguf in the working folder (`weightmap make-model FILE
 * --size 1200M` makes it; bench/llama_modes.sh does when it is missing). --gpu
 * offloads every layer (n_gpu_layers 999; a ggml CUDA backend beside the prebuilt libraries,
 * bench/llama_cuda.sh): then AUTO resolves as llama.cpp resolves it there, and in the mapped
 * modes the bridge maps what llama.cpp's mmap mode maps (the input layer's tensors: every layer
 * is on the GPU) and fills the device's buffers by its staged pipeline (docs/LLAMA.md, "Mapped
 * with layers on a GPU").
 */
#include "peer.h"
#include "weightmap_llama.h"

#include <fcntl.h>
#include <ggml-backend.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ROUNDS 16
#define BLOCK ((size_t)8 << 20)

static const int modes[] = {0, 1, 2, 3, 4}; /* llama.cpp's enum llama_load_mode */
#define N_MODES 5
static const char *const mode_names[N_MODES] = {"none", "mmap", "mlock", "mmap+mlock", "dio"};
static int gpu_layers;

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)level, (void)text, (void)user;
}

static uint64_t rss_anon(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return (uint64_t)kb << 10;
}

/* ---- the disk: O_DIRECT preads of [data, size) by one thread per CPU ---- */

typedef struct disk_run {
    int fd;
    uint64_t data, size;
    atomic_uint_fast64_t next;
} disk_run;

static void *disk_thread(void *arg) {
    disk_run *r = arg;
    void *b = mmap(NULL, BLOCK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) return NULL;
    madvise(b, BLOCK, MADV_HUGEPAGE);
    memset(b, 0, BLOCK);
    uint64_t start = r->data / 4096 * 4096;
    for (;;) {
        uint64_t at = start + atomic_fetch_add(&r->next, BLOCK);
        if (at >= r->size) break;
        if (pread(r->fd, b, BLOCK, (off_t)at) <= 0) break;
    }
    munmap(b, BLOCK);
    return NULL;
}

static double disk_ms(const char *path, uint64_t data, uint64_t size) {
    disk_run r = {.fd = open(path, O_RDONLY | O_DIRECT), .data = data, .size = size};
    if (r.fd < 0) return -1;
    atomic_init(&r.next, 0);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    pthread_t th[64];
    n = n < 1 ? 1 : n > 64 ? 64 : n;
    double t0 = bench_now_ms();
    for (long k = 0; k < n; k++)
        pthread_create(&th[k], NULL, disk_thread, &r);
    for (long k = 0; k < n; k++)
        pthread_join(th[k], NULL);
    close(r.fd);
    return bench_now_ms() - t0;
}

/* ---- the page cache: the cold file mapped shared and brought in, as a mapped load must ----
 * [data, size) of a MAP_SHARED, PROT_READ mapping advised huge pages, MADV_POPULATE_READ by 16
 * threads in 1 MiB pieces (the bridge's populate, nothing else beside it): the fastest way to the
 * page cache measured on the development VM and the GPU host, and so the most a load that takes
 * its bytes through the page cache can reach. */

#define PC_PIECE ((uint64_t)1 << 20)
#define PC_THREADS 16

typedef struct pc_run {
    char *base;
    uint64_t data, size;
    atomic_uint_fast64_t next;
} pc_run;

static void *pc_thread(void *arg) {
    pc_run *r = arg;
    for (;;) {
        uint64_t at = r->data / 4096 * 4096 + atomic_fetch_add(&r->next, PC_PIECE);
        if (at >= r->size) break;
        uint64_t n = r->size - at < PC_PIECE ? r->size - at : PC_PIECE;
        if (madvise(r->base + at, (size_t)n, 22 /* MADV_POPULATE_READ */) != 0) break;
    }
    return NULL;
}

static double page_cache_ms(const char *path, uint64_t data, uint64_t size) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    pc_run r = {.data = data, .size = size};
    r.base = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (r.base == MAP_FAILED) return -1;
    madvise(r.base, (size_t)size, MADV_HUGEPAGE);
    atomic_init(&r.next, 0);
    pthread_t th[PC_THREADS];
    double t0 = bench_now_ms();
    for (int k = 0; k < PC_THREADS; k++)
        pthread_create(&th[k], NULL, pc_thread, &r);
    for (int k = 0; k < PC_THREADS; k++)
        pthread_join(th[k], NULL);
    double ms = bench_now_ms() - t0;
    munmap(r.base, (size_t)size);
    return ms;
}

/* ---- one load, in a child ---- */

typedef struct result {
    double ms;
    double anon;
    int regions, not_rs, mode_used, fell_back;
} result;

static int file_regions(const char *path, int *not_rs) {
    wm_file_region r[64];
    size_t n = 0;
    *not_rs = 0;
    if (wm_mem_file_regions(0, path, r, 64, &n, NULL) != WM_OK) return 0;
    for (size_t k = 0; k < n && k < 64; k++)
        *not_rs += strcmp(r[k].perms, "r--s") != 0;
    return (int)n;
}

/* The first progress call: llama.cpp's load_all_data begins (its model made), or the bridge's
 * first tensor in. */
static double t_first = -1;
static bool first_progress(float done, void *user) {
    (void)done, (void)user;
    if (t_first < 0) t_first = bench_now_ms();
    return true;
}

static result load_once(const char *path, int mode, bool bridge) {
    llama_log_set(quiet, NULL);
    ggml_backend_load_all_from_path(WM_LLAMA_LIBDIR);
    llama_backend_init();
    struct llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = gpu_layers;
    p.load_mode = (enum llama_load_mode)mode;
    p.progress_callback = first_progress;
    result r = {.ms = -1, .mode_used = mode};
    uint64_t before = rss_anon();
    struct llama_model *m = NULL;
    double t0 = bench_now_ms();
    if (bridge) {
        wm_llama_stats st = WM_LLAMA_STATS_INIT;
        wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
        o.stats = &st;
        wm_error err;
        if (wm_llama_load(path, &p, &o, &m, &err) != WM_OK) {
            fprintf(stderr, "llama_modes: %s: %s\n", mode_names[mode], err.msg);
            return r;
        }
        r.mode_used = st.load_mode;
        r.fell_back = (int)st.load_mode_fell_back;
        fprintf(stderr,
                "  wm_llama_load %s: model %.1f ms, reads %.1f ms (%.1f MiB), populate %.1f ms "
                "(%u threads, %.1f of %.1f MiB cached), from the mapping %.1f ms (%.1f MiB; "
                "%.1f MiB during the making, %.1f ms), trim %.1f ms\n",
                mode_names[mode], st.seconds_model * 1e3, st.seconds_read * 1e3,
                (double)st.bytes_read / 1048576.0, st.seconds_populate * 1e3, st.populate_threads,
                (double)st.bytes_mapped_cached / 1048576.0, (double)st.bytes_mapped / 1048576.0,
                st.seconds_repacked_mapped * 1e3, (double)st.bytes_repacked_mapped / 1048576.0,
                (double)st.bytes_repacked_early / 1048576.0, st.seconds_early * 1e3,
                st.seconds_trim * 1e3);
    } else {
        m = llama_model_load_from_file(path, p);
    }
    r.ms = bench_now_ms() - t0;
    if (!bridge && m)
        fprintf(stderr, "  llama.cpp %s: model %.1f ms, then the tensors %.1f ms\n",
                mode_names[mode], t_first - t0, r.ms - (t_first - t0));
    if (!m) return (result){.ms = -1};
    uint64_t after = rss_anon();
    r.anon = after > before ? (double)(after - before) / 1048576.0 : 0;
    r.regions = file_regions(path, &r.not_rs);
    llama_model_free(m);
    return r;
}

static result in_child(const char *path, int mode, bool bridge) {
    int pfd[2];
    result r = {.ms = -1};
    if (pipe(pfd) != 0) return r;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        result v = load_once(path, mode, bridge);
        if (write(pfd[1], &v, sizeof v) != (ssize_t)sizeof v) _exit(1);
        _exit(0);
    }
    close(pfd[1]);
    if (read(pfd[0], &r, sizeof r) != (ssize_t)sizeof r) r.ms = -1;
    close(pfd[0]);
    int status;
    waitpid(pid, &status, 0);
    return r;
}

/* ---- the run ---- */

typedef struct cell {
    double ms[MAX_ROUNDS], anon[MAX_ROUNDS], ratio[MAX_ROUNDS];
    double to_cache[MAX_ROUNDS]; /* cold: the round's page cache fill / the load */
    result last;
} cell;

static cell cells[2][N_MODES][2]; /* [cold][mode][bridge] */
static bool skip[N_MODES];        /* --modes: the modes left out */
static double disk[MAX_ROUNDS], cache[MAX_ROUNDS];
static double warm_gib;

static void print_row(int cold, int k, int b, int rounds) {
    cell *c = &cells[cold][k][b];
    for (int r = 0; r < rounds; r++)
        if (c->ms[r] < 0) { /* refused (the bridge's explicit MMAP where it cannot map) */
            printf("| %s | %s | %s | refused (stderr says why) | - | - | - | - |\n",
                   cold ? "cold" : "warm", mode_names[k], b ? "wm_llama_load" : "llama.cpp");
            return;
        }
    double ms[MAX_ROUNDS], an[MAX_ROUNDS], ra[MAX_ROUNDS], tc[MAX_ROUNDS];
    memcpy(ms, c->ms, sizeof ms), memcpy(an, c->anon, sizeof an), memcpy(ra, c->ratio, sizeof ra);
    memcpy(tc, c->to_cache, sizeof tc);
    bench_stats s = bench_stats_of(ms, (size_t)rounds), a = bench_stats_of(an, (size_t)rounds);
    char pair[32] = "-", pair_cache[32] = "-";
    if (cold) {
        snprintf(pair, sizeof pair, "%.3f", bench_stats_of(ra, (size_t)rounds).median);
        snprintf(pair_cache, sizeof pair_cache, "%.3f", bench_stats_of(tc, (size_t)rounds).median);
    }
    printf("| %s | %s | %s | %.1f (%.1f-%.1f) | %s | %s | %.1f | %d (%d not r--s)%s |\n",
           cold ? "cold" : "warm", mode_names[k], b ? "wm_llama_load" : "llama.cpp", s.median,
           s.p10, s.p90, pair, pair_cache, a.median, c->last.regions, c->last.not_rs,
           c->last.fell_back ? ", read instead (AUTO fell back)" : "");
}

/* The rounds: the disk, then each mode, loader and temperature, in an order that rotates. */
static void run_rounds(const char *path, uint64_t data, uint64_t size, int rounds) {
    for (int r = 0; r < rounds; r++) {
        bench_make_cold(path);
        disk[r] = disk_ms(path, data, size);
        bench_make_cold(path);
        bench_warm_memory(warm_gib); /* its pages fresh memory, as a load's are */
        cache[r] = page_cache_ms(path, data, size);
        for (int k0 = 0; k0 < N_MODES; k0++)
            for (int b0 = 0; b0 < 2; b0++)
                for (int cold = 1; cold >= 0; cold--) {
                    int k = (k0 + r) % N_MODES, b = (b0 + r) % 2; /* the order rotates */
                    if (skip[k]) continue;
                    cold ? bench_make_cold(path) : bench_make_warm(path);
                    bench_warm_memory(warm_gib);
                    uint64_t left = cold ? bench_cached_bytes(path) : 0;
                    result x = in_child(path, modes[k], b);
                    cell *c = &cells[cold][k][b];
                    c->ms[r] = x.ms, c->anon[r] = x.anon, c->last = x;
                    c->ratio[r] = x.ms > 0 ? disk[r] / x.ms : 0;
                    c->to_cache[r] = x.ms > 0 ? cache[r] / x.ms : 0;
                    if (cold && left > (64u << 20))
                        fprintf(stderr,
                                "llama_modes: %llu bytes stayed cached before a cold load\n",
                                (unsigned long long)left);
                }
    }
}

/* --modes LIST: only the modes named (comma-separated, as the table names them). */
static void only_modes(const char *list) {
    for (int k = 0; k < N_MODES; k++) {
        size_t n = strlen(mode_names[k]);
        const char *at = list;
        skip[k] = true;
        while ((at = strstr(at, mode_names[k])) != NULL) {
            if ((at == list || at[-1] == ',') && (at[n] == ',' || at[n] == 0)) skip[k] = false;
            at += n;
        }
    }
}

int main(int argc, char **argv) {
    int rounds = 3;
    const char *path = "bench-llama-1200M.gguf";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-r") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warm-memory") && i + 1 < argc)
            warm_gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--gpu"))
            gpu_layers = 999;
        else if (!strcmp(argv[i], "--modes") && i + 1 < argc)
            only_modes(argv[++i]);
        else
            path = argv[i];
    }
    rounds = rounds < 1 ? 1 : rounds > MAX_ROUNDS ? MAX_ROUNDS : rounds;
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "llama_modes: %s missing: make it with weightmap make-model --size 1200M\n",
                path);
        return 2;
    }
    wm_file *f = NULL;
    if (wm_file_open(path, &f, NULL) != WM_OK) return 2;
    uint64_t data = wm_file_data_offset(f), size = wm_file_size(f);
    wm_file_close(f);
    char machine[512];
    bench_machine_line(machine, sizeof machine);
    run_rounds(path, data, size, rounds);
    bench_stats d = bench_stats_of(disk, (size_t)rounds);
    printf("#### load modes: %s (%.1f MiB), %s%s, --warm-memory %.1f; median (p10-p90) of %d "
           "rounds\n\n",
           path, (double)(size - data) / 1048576.0, machine, gpu_layers ? ", --gpu" : "", warm_gib,
           rounds);
    printf("the disk (O_DIRECT 8 MiB preads, one thread per CPU, cold): %.1f ms (%.1f-%.1f), %.2f "
           "GB/s\n\n",
           d.median, d.p10, d.p90, (double)(size - data) / d.median / 1e6);
    bench_stats pc = bench_stats_of(cache, (size_t)rounds);
    printf("the page cache (the cold file mapped shared, advised huge pages, MADV_POPULATE_READ by "
           "%d threads in 1 MiB pieces: the most a load through the page cache can reach): %.1f ms "
           "(%.1f-%.1f), %.2f GB/s, %.3fx the disk\n\n",
           PC_THREADS, pc.median, pc.p10, pc.p90, (double)(size - data) / pc.median / 1e6,
           pc.median > 0 ? d.median / pc.median : 0);
    printf("| | mode | loader | load ms | cold: the disk / it, paired | cold: the page cache / it, "
           "paired | RssAnon while loaded, MiB | the file's regions while loaded "
           "|\n|---|---|---|---:|---:|---:|---:|---|\n");
    for (int cold = 1; cold >= 0; cold--)
        for (int k = 0; k < N_MODES; k++)
            for (int b = 0; b < 2 && !skip[k]; b++)
                print_row(cold, k, b, rounds);
    return 0;
}
