/*
 * read_once.c: read once across ranks (read_once.h). NCCL is not linked: its library is loaded
 * at the first load that asks for it and kept until exit (NCCL keeps threads), so that binaries
 * built here run where NCCL is absent. The mock build (WM_CUDA_MOCK) binds the same table to
 * tests/nccl_mock.c instead.
 *
 * Sections: the NCCL table; checks; completion.
 */
#include "read_once.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <stdio.h>
#include <threads.h>

/* Collectives fused in one ncclGroupStart/End: NCCL allows a few thousand; fewer keeps each
 * group's bookkeeping small. */
#define GROUP_OPS 256

/* ---- the NCCL table ---- */

typedef struct nccl_table {
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                              cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*count)(const ncclComm_t, int *);
    ncclResult_t (*user_rank)(const ncclComm_t, int *);
    ncclResult_t (*cu_device)(const ncclComm_t, int *);
    const char *(*error_string)(ncclResult_t);
} nccl_table;

static nccl_table api;
static const char *api_missing; /* why NCCL could not be loaded, or NULL */
static once_flag api_once = ONCE_FLAG_INIT;

#ifdef WM_CUDA_MOCK
static void load_api(void) {
    api = (nccl_table){ncclBroadcast,    ncclGroupStart,   ncclGroupEnd,      ncclCommCount,
                       ncclCommUserRank, ncclCommCuDevice, ncclGetErrorString};
}
#else
static void load_api(void) {
    static const char *const names[] = {
        "libnccl.so.2",
#ifdef WM_NCCL_DIR
        WM_NCCL_DIR "/libnccl.so.2",
#endif
    };
    void *lib;
    wm__os_library(names, sizeof names / sizeof names[0], &lib, &api_missing);
    if (!lib) return;
    /* POSIX: a function pointer travels through void * from dlsym. */
    *(void **)&api.broadcast = wm__os_symbol(lib, "ncclBroadcast");
    *(void **)&api.group_start = wm__os_symbol(lib, "ncclGroupStart");
    *(void **)&api.group_end = wm__os_symbol(lib, "ncclGroupEnd");
    *(void **)&api.count = wm__os_symbol(lib, "ncclCommCount");
    *(void **)&api.user_rank = wm__os_symbol(lib, "ncclCommUserRank");
    *(void **)&api.cu_device = wm__os_symbol(lib, "ncclCommCuDevice");
    *(void **)&api.error_string = wm__os_symbol(lib, "ncclGetErrorString");
    if (!api.broadcast || !api.group_start || !api.group_end || !api.count || !api.user_rank ||
        !api.cu_device || !api.error_string) {
        api = (nccl_table){0};
        api_missing = "libnccl.so.2 lacks a function weightmap calls";
    }
}
#endif

/* Fails a call as the fault table says (kind DEVICE, like every CUDA call). */
static ncclResult_t nccl_call(ncclResult_t r) { return r; }
#define NC(call) (wm__fault_hit(WM_OS_DEVICE) ? ncclSystemError : nccl_call(call))

static wm_status nccl_fail(const wm_model *m, ncclResult_t r, const char *what, wm_error *err) {
    return wm__err(err, WM_EDEVICE, 0, "%s: %s: %s", m->file->path, what,
                   api.error_string ? api.error_string(r) : "NCCL error");
}

/* ---- checks ---- */

wm_status wm__read_once_check(const wm_model *m, wm_error *err) {
    call_once(&api_once, load_api);
    const char *path = m->file->path;
    if (!api.broadcast)
        return wm__err(err, WM_EUNSUPPORTED, 0,
                       "%s: read-once needs NCCL, which could not be "
                       "loaded: %s",
                       path, api_missing ? api_missing : "unknown reason");
    ncclComm_t comm = m->cuda.nccl_comm;
    int n = 0, rank = -1, device = -1;
    ncclResult_t r = NC(api.count(comm, &n));
    if (!r) r = NC(api.user_rank(comm, &rank));
    if (!r) r = NC(api.cu_device(comm, &device));
    if (r) return nccl_fail(m, r, "asking the communicator its size, rank and device", err);
    unsigned world = m->opts.tp_world > 1 ? m->opts.tp_world : 1;
    if ((unsigned)n != world || (unsigned)rank != (world > 1 ? m->opts.tp_rank : 0))
        return wm__err(err, WM_EINVAL, 0,
                       "%s: the communicator is rank %d of %d, the load says tp_rank %u of "
                       "tp_world %u",
                       path, rank, n, m->opts.tp_rank, m->opts.tp_world);
    if (device != m->devs[0])
        return wm__err(err, WM_EINVAL, 0, "%s: the communicator's device is %d, the load's %d",
                       path, device, m->devs[0]);
    return WM_OK;
}

/* ---- completion ---- */

/* Queues the broadcasts of every read-once tensor, GROUP_OPS at a time. */
static wm_status broadcasts(const wm_model *m, unsigned char *const *dev, cudaStream_t s,
                            wm_error *err) {
    ncclComm_t comm = m->cuda.nccl_comm;
    unsigned ranks = m->opts.tp_world;
    unsigned in_group = 0;
    ncclResult_t r = ncclSuccess;
    for (size_t k = 0; k < m->file->n_tensors && !r; k++) {
        uint32_t i = m->order[k];
        const wm__place *p = &m->place[i];
        if (!p->read_once) continue;
        unsigned char *base = dev[p->chunk] + p->dst_off;
        for (unsigned root = 0; root < ranks && !r; root++) {
            uint64_t lo, hi;
            wm__read_once_range(p->nbytes, root, ranks, &lo, &hi);
            if (hi == lo) continue;
            if (in_group == 0) r = NC(api.group_start());
            if (!r)
                r = NC(api.broadcast(base + lo, base + lo, (size_t)(hi - lo), ncclUint8, (int)root,
                                     comm, s));
            if (!r && ++in_group == GROUP_OPS) {
                r = NC(api.group_end());
                in_group = 0;
            }
        }
    }
    /* A group that was started is always ended, failed or not. */
    if (in_group) {
        ncclResult_t e = NC(api.group_end());
        if (!r) r = e;
    }
    return r ? nccl_fail(m, r, "ncclBroadcast of the ranks' ranges", err) : WM_OK;
}

wm_status wm__read_once_complete(const wm_model *m, unsigned char *const *dev, wm_error *err) {
    cudaStream_t s;
    cudaError_t ce = wm__fault_hit(WM_OS_DEVICE)
                         ? cudaErrorMemoryAllocation
                         : cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (ce) {
        (void)cudaGetLastError();
        return wm__err(err, WM_EDEVICE, 0, "%s: cudaStreamCreateWithFlags: %s", m->file->path,
                       cudaGetErrorString(ce));
    }
    wm_status st = broadcasts(m, dev, s, err);
    ce = cudaStreamSynchronize(s);
    if (!st && ce)
        st = wm__err(err, WM_EDEVICE, 0, "%s: waiting for the broadcasts: %s", m->file->path,
                     cudaGetErrorString(ce));
    cudaStreamDestroy(s);
    (void)cudaGetLastError();
    return st;
}
