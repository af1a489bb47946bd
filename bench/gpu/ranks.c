/*
 * ranks.c: `gpu ranks`: W processes at once, a rank per device: whole, tensor-parallel slices, or
 * read once (NCCL) (main.c has the options).
 */
#include "gpu.h"

#ifdef WM_HAVE_CUDA
#ifdef WM_HAVE_NCCL
#include <dirent.h>
#include <dlfcn.h>
#include <nccl.h>
#include <sys/wait.h>

#define MAX_RANKS 8
#define MAX_ROUNDS 16

/* What the ranks share (a shared anonymous mapping made before they fork). */
typedef struct ranks_shared {
    _Atomic unsigned arrived, generation;
    double t0[MAX_ROUNDS][MAX_RANKS], t1[MAX_ROUNDS][MAX_RANKS];
    uint64_t bytes_read[MAX_RANKS], tensor_bytes[MAX_RANKS];
    int failed;
    ncclUniqueId id; /* rank 0 makes it (NCCL and CUDA start in the ranks, never before fork) */
} ranks_shared;

static void ranks_barrier(ranks_shared *s, unsigned n) {
    unsigned gen = atomic_load(&s->generation);
    if (atomic_fetch_add(&s->arrived, 1) + 1 == n) {
        atomic_store(&s->arrived, 0);
        atomic_fetch_add(&s->generation, 1);
    } else {
        while (atomic_load(&s->generation) == gen)
            sched_yield();
    }
}

typedef ncclResult_t (*get_id_fn)(ncclUniqueId *);
typedef ncclResult_t (*init_rank_fn)(ncclComm_t *, int, ncclUniqueId, int);

static void *nccl_lib(void) {
    void *h = dlopen("libnccl.so.2", RTLD_NOW);
#ifdef WM_NCCL_DIR
    if (!h) h = dlopen(WM_NCCL_DIR "/libnccl.so.2", RTLD_NOW);
#endif
    return h;
}

/* One rank: loads `rounds` times with the others, between barriers. */
static int rank_main(ranks_shared *sh, const char *path, unsigned r, unsigned w, int dev, bool tp,
                     bool nccl, unsigned rounds, unsigned threads) {
    wm_error err;
    if (wm_backend_init(WM_BACKEND_CUDA, dev, &err) != WM_OK) {
        fprintf(stderr, "gpu ranks: %s\n", err.msg);
        return 1;
    }
    ncclComm_t comm = NULL;
    void *lib = nccl ? nccl_lib() : NULL;
    if (nccl) {
        get_id_fn get = lib ? (get_id_fn)(uintptr_t)dlsym(lib, "ncclGetUniqueId") : NULL;
        init_rank_fn init = lib ? (init_rank_fn)(uintptr_t)dlsym(lib, "ncclCommInitRank") : NULL;
        if (r == 0 && (!get || get(&sh->id) != ncclSuccess)) sh->failed = 1;
        ranks_barrier(sh, w);
        CUDA_OK(cudaSetDevice(dev));
        if (sh->failed || !init || init(&comm, (int)w, sh->id, (int)r) != ncclSuccess) {
            fprintf(stderr, "gpu ranks: ncclCommInitRank failed\n");
            return 1;
        }
    }
    wm_file *f;
    if (wm_file_open(path, &f, &err) != WM_OK) {
        fprintf(stderr, "gpu ranks: %s\n", err.msg);
        return 1;
    }
    wm_load_options o = {.mode = WM_MODE_HEAP,
                         .backend = WM_BACKEND_CUDA,
                         .device = dev,
                         .threads = threads,
                         .tp_rank = r,
                         .tp_world = tp || nccl ? w : 0,
                         .tp_split = tp ? wm_split_llama : NULL,
                         .cuda = &(wm_cuda_options){.nccl_comm = comm}};
    for (unsigned k = 0; k < rounds; k++) {
        ranks_barrier(sh, w);
        wm_model *m;
        sh->t0[k][r] = now_s();
        wm_status st = wm_model_load(f, &o, &m, &err);
        sh->t1[k][r] = now_s();
        if (st) {
            fprintf(stderr, "gpu ranks: rank %u: %s\n", r, err.msg);
            sh->failed = 1;
            return 1;
        }
        wm_model_stats s = WM_MODEL_STATS_INIT;
        wm_model_stats_get(m, &s);
        sh->bytes_read[r] = s.bytes_read;
        sh->tensor_bytes[r] = s.tensor_bytes;
        wm_model_release(m);
        ranks_barrier(sh, w);
    }
    wm_file_close(f);
    return 0;
}

int gpu_ranks(int argc, char **argv) {
    const char *path = NULL;
    unsigned w = 2, rounds = 5, threads = 0;
    bool tp = false, nccl = false;
    for (int i = 0; i < argc; i++) {
        uint64_t v;
        if (!strcmp(argv[i], "--ranks") && i + 1 < argc && parse_size(argv[++i], &v) && v &&
            v <= MAX_RANKS)
            w = (unsigned)v;
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc && parse_size(argv[++i], &v) && v &&
                 v <= MAX_ROUNDS)
            rounds = (unsigned)v;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc && parse_size(argv[++i], &v))
            threads = (unsigned)v;
        else if (!strcmp(argv[i], "--tp"))
            tp = true;
        else if (!strcmp(argv[i], "--nccl"))
            nccl = true;
        else if (!path && argv[i][0] != '-')
            path = argv[i];
        else
            return 2;
    }
    /* The devices, counted without starting CUDA here: a process must not fork after it. */
    int n_dev = 0;
    DIR *gpus = opendir("/proc/driver/nvidia/gpus");
    for (struct dirent *e; gpus && (e = readdir(gpus));)
        n_dev += e->d_name[0] != '.';
    if (gpus) closedir(gpus);
    if (!path || n_dev == 0) return 77;
    if (nccl && (unsigned)n_dev < w) {
        fprintf(stderr, "gpu ranks: --nccl needs a device per rank (%d devices)\n", n_dev);
        return 77;
    }
    ranks_shared *sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return 1;
    memset(sh, 0, sizeof *sh);
    pid_t pid[MAX_RANKS];
    for (unsigned r = 0; r < w; r++) {
        pid[r] = fork();
        if (pid[r] == 0)
            _exit(rank_main(sh, path, r, w, (int)(r % (unsigned)n_dev), tp, nccl, rounds, threads));
    }
    int bad = 0;
    for (unsigned r = 0; r < w; r++) {
        int status;
        waitpid(pid[r], &status, 0);
        bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    if (bad || sh->failed) return 1;
    double t[MAX_ROUNDS];
    for (unsigned k = 0; k < rounds; k++) {
        double lo = sh->t0[k][0], hi = sh->t1[k][0];
        for (unsigned r = 1; r < w; r++) {
            if (sh->t0[k][r] < lo) lo = sh->t0[k][r];
            if (sh->t1[k][r] > hi) hi = sh->t1[k][r];
        }
        t[k] = hi - lo;
    }
    qsort(t, rounds, sizeof *t, cmp_double);
    uint64_t read = 0, delivered = 0, file_bytes = 0;
    for (unsigned r = 0; r < w; r++) {
        read += sh->bytes_read[r];
        delivered += sh->tensor_bytes[r];
    }
    wm_file *f;
    wm_error err;
    if (wm_file_open(path, &f, &err) != WM_OK) return 1;
    file_bytes = wm_file_tensor_bytes(f);
    wm_file_close(f);
    double med = t[rounds / 2];
    printf("{\"bench\": \"ranks\", \"file\": \"%s\", \"ranks\": %u, \"devices\": %d, "
           "\"mode\": \"%s%s\", \"repeat\": %u, \"best_s\": %.4f, \"median_s\": %.4f, "
           "\"delivered_bytes\": %" PRIu64
           ", \"delivered_gbps_median\": %.2f, \"bytes_read\": %" PRIu64
           ", \"read_x_file\": %.3f}\n",
           path, w, n_dev < (int)w ? n_dev : (int)w,
           tp     ? "tp"
           : nccl ? ""
                  : "whole",
           nccl ? (tp ? "+nccl" : "nccl") : "", rounds, t[0], med, delivered,
           (double)delivered / med / 1e9, read, (double)read / (double)file_bytes);
    munmap(sh, sizeof *sh);
    return 0;
}
#endif
#endif /* WM_HAVE_CUDA */
