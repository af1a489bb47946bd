/*
 * nccl_mock.c: a stand-in for the few NCCL calls src/backend/read_once.c makes (and the three a
 * test needs to make a communicator), built into the library with the CUDA mock
 * (-DWM_CUDA_MOCK=ON), so that read-once runs and is checked without GPUs.
 *
 * Ranks are processes, as in real use: ncclGetUniqueId makes a shared anonymous mapping (the
 * "interconnect") before the test forks its ranks, and the id carries its address. A broadcast
 * goes through it in 1 MiB steps, with a barrier after the root writes and after the others
 * read. Collectives queued between ncclGroupStart and ncclGroupEnd run at ncclGroupEnd, in
 * order; outside a group each runs at once. Like NCCL, every rank must make the same calls in
 * the same order: the root publishes each call's count and root, every other rank compares, and
 * a mismatch is counted (wm__nccl_mock_violations) and said. Device memory is the CUDA mock's
 * (host memory), so copies are memcpy.
 *
 * Sections: the interconnect; communicators; collectives.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define STEP ((size_t)1 << 20)
#define MAX_QUEUED 4096

/* ---- the interconnect ---- */

typedef struct wire {
    _Atomic unsigned arrived, generation; /* a barrier of all ranks */
    _Atomic unsigned long violations;
    uint64_t seq; /* the root's call number */
    size_t count; /* its count and root, for the others to compare */
    int root;
    unsigned char data[STEP];
} wire;

struct ncclComm {
    wire *w;
    int n, rank, device;
    uint64_t seq;
};

unsigned long wm__nccl_mock_violations(ncclComm_t comm);
unsigned long wm__nccl_mock_violations(ncclComm_t comm) {
    return atomic_load(&comm->w->violations);
}

static void barrier(const struct ncclComm *c) {
    unsigned gen = atomic_load(&c->w->generation);
    if (atomic_fetch_add(&c->w->arrived, 1) + 1 == (unsigned)c->n) {
        atomic_store(&c->w->arrived, 0);
        atomic_fetch_add(&c->w->generation, 1);
    } else {
        while (atomic_load(&c->w->generation) == gen)
            sched_yield();
    }
}

/* ---- communicators ---- */

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    wire *w = mmap(NULL, sizeof *w, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (w == MAP_FAILED) return ncclSystemError;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &w, sizeof w);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int n, ncclUniqueId id, int rank) {
    if (n < 1 || rank < 0 || rank >= n) return ncclInvalidArgument;
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    memcpy(&c->w, id.internal, sizeof c->w);
    c->n = n;
    c->rank = rank;
    if (cudaGetDevice(&c->device) != cudaSuccess) {
        free(c);
        return ncclUnhandledCudaError;
    }
    barrier(c); /* as NCCL's init, it returns once every rank is there */
    *out = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    free(c);
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t c, int *n) {
    *n = c->n;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank) {
    *rank = c->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t c, int *device) {
    *device = c->device;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) { return r ? "mock NCCL error" : "no error"; }

/* ---- collectives ---- */

typedef struct queued {
    const void *send;
    void *recv;
    size_t count;
    int root;
    ncclComm_t comm;
} queued;

/* The calls queued in a group. Per process, not per thread: a rank makes its calls on one
 * thread, and thread-local arrays this size would sit in every thread's static TLS, which
 * glibc carves out of the library's own small worker stacks. */
static queued q[MAX_QUEUED];
static size_t n_q;
static int in_group;

static void violation(struct ncclComm *c, const char *what) {
    atomic_fetch_add(&c->w->violations, 1);
    fprintf(stderr, "nccl_mock: rank %d: %s\n", c->rank, what);
}

static void run_broadcast(const queued *b) {
    struct ncclComm *c = b->comm;
    c->seq++;
    for (size_t off = 0; off < b->count || off == 0; off += STEP) {
        size_t n = b->count - off < STEP ? b->count - off : STEP;
        if (c->rank == b->root) {
            c->w->seq = c->seq;
            c->w->count = b->count;
            c->w->root = b->root;
            memcpy(c->w->data, (const char *)b->send + off, n);
            if (b->recv != b->send) memcpy((char *)b->recv + off, (const char *)b->send + off, n);
        }
        barrier(c);
        if (c->rank != b->root) {
            if (c->w->seq != c->seq || c->w->count != b->count || c->w->root != b->root)
                violation(c, "ranks made different collective calls");
            memcpy((char *)b->recv + off, c->w->data, n);
        }
        barrier(c);
        if (b->count == 0) break;
    }
}

static ncclResult_t flush(void) {
    for (size_t i = 0; i < n_q; i++)
        run_broadcast(&q[i]);
    n_q = 0;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
    in_group++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (in_group == 0) return ncclInvalidUsage;
    return --in_group == 0 ? flush() : ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
    (void)stream;
    if (type != ncclUint8 && type != ncclInt8) return ncclInvalidArgument;
    if (root < 0 || root >= comm->n) return ncclInvalidArgument;
    if (n_q == MAX_QUEUED) return ncclInvalidUsage;
    q[n_q++] = (queued){send, recv, count, root, comm};
    return in_group ? ncclSuccess : flush();
}
