/*
 * cuda_mock.c: a stand-in for the few CUDA runtime calls src/backend/cuda.c makes, built into
 * the library instead of the runtime with -DWM_CUDA_MOCK=ON, so that the staged pipeline every
 * device backend shares (src/backend/staged.c, staged_load.c: the window plan, slot reuse,
 * registration, release, fault paths) runs through cuda.c's device operations and is checked on
 * a machine without a GPU. It is strict where the real runtime is, and stricter where that finds
 * bugs:
 *   - "device memory" is malloc'd; cudaMemGetInfo reports a fixed total minus what is held;
 *   - copies (host to device, and device to host for a sleeping model's weights) are queued on
 *     their stream and only run when an event recorded after them, or the stream, is
 *     synchronised, so a slot refilled (or a host copy read or freed) before its event has
 *     passed delivers the wrong bytes (the tests compare every byte);
 *   - a stream destroyed with copies queued keeps them queued (the runtime runs them later);
 *     memory freed or unregistered under such a copy aborts the test, and only
 *     cudaDeviceSynchronize runs them;
 *   - a copy must come from registered host memory, a registration must not overlap another,
 *     a read-only one must not be required to be writable, and unregistering an address that
 *     is not a registration's base gives cudaErrorHostMemoryNotRegistered;
 *   - every entry point must be called from the thread that first called the mock (the
 *     process's loading thread): the real runtime keeps host memory for every thread that ever
 *     called it, so a load must make no CUDA call on its worker threads. A call from another
 *     thread prints a line, fails with cudaErrorNotPermitted and is counted
 *     (wm__cuda_mock_violations, which the tests read).
 *   - several devices (WM_CUDA_MOCK_DEVICES=N, default 1; 0 to see "no device"): memory,
 *     streams and events belong to the device current when they were made; a copy must go to
 *     memory of its stream's device with that device current, an event must be recorded on a
 *     stream of its own device, and a copy to another device than the one that registered its
 *     source needs a portable registration (cudaHostRegisterPortable). Each is counted as a
 *     violation (wm__cuda_mock_violations) and fails as the runtime would.
 *
 * Sections: state; the calling thread; errors and devices; memory; registration; streams, events
 * and copies; what bench/gpu.c also calls.
 */
#include <cuda_runtime_api.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- state ---- */

#define MOCK_TOTAL ((size_t)64 << 30)
#define MAX_REG 4096
#define MAX_OPS 4096

typedef struct reg {
    uintptr_t base;
    size_t len;
    int device;   /* current when it was registered */
    int portable; /* cudaHostRegisterPortable: every device may copy from it */
} reg;

#define MAX_BLOCKS 65536
typedef struct dev_block {
    uintptr_t base;
    size_t len;
    int device;
} dev_block;
static dev_block blocks[MAX_BLOCKS];
static size_t n_blocks;

typedef struct op {
    int is_event;
    int d2h; /* device to host: dst is the registered host memory */
    void *dst;
    const void *src;
    size_t len;  /* bytes of a row */
    size_t rows; /* 1 for a plain copy */
    size_t spitch, dpitch;
    struct mock_event *ev;
} op;

struct mock_stream {
    op *ops;
    size_t n, head;
    int device;
};

typedef struct mock_event {
    struct mock_stream *stream; /* where it was last recorded, or NULL */
    size_t pos;                 /* ops before it in that stream */
    int device;
} mock_event;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static reg regs[MAX_REG];
static size_t n_regs;
static size_t device_held;
/* Copies still queued on a stream when it was destroyed: the runtime returns at once and runs
 * them later, so they run here only at cudaDeviceSynchronize, and memory freed or unregistered
 * under one of them aborts the test (a missing wait before a release). */
static op orphans[MAX_OPS];
static size_t n_orphans;
static _Thread_local cudaError_t last_error;
static _Thread_local int current_device;

static cudaError_t ret(cudaError_t e) {
    if (e) last_error = e;
    return e;
}

/* ---- the calling thread ---- */

static pthread_t owner;
static int owner_set;
static unsigned long violations; /* calls from threads other than the first caller so far */

/* The longest registration made since the tests last asked (a sleep's and a wake's bounce ring
 * against a host copy registered whole). */
static size_t largest_registration;

size_t wm__cuda_mock_largest_registration(void);
size_t wm__cuda_mock_largest_registration(void) {
    pthread_mutex_lock(&lock);
    size_t n = largest_registration;
    largest_registration = 0;
    pthread_mutex_unlock(&lock);
    return n;
}

unsigned long wm__cuda_mock_violations(void);
unsigned long wm__cuda_mock_violations(void) {
    pthread_mutex_lock(&lock);
    unsigned long n = violations;
    pthread_mutex_unlock(&lock);
    return n;
}

/* True when the caller is the thread that first called the mock; otherwise counts and says so. */
/* A rule of several devices broken: counted with the thread violations, and said. */
static cudaError_t device_violation(const char *what, cudaError_t e);

static int own_thread(const char *fn) {
    pthread_mutex_lock(&lock);
    if (!owner_set) {
        owner = pthread_self();
        owner_set = 1;
    }
    int ok = pthread_equal(owner, pthread_self());
    if (!ok) violations++;
    pthread_mutex_unlock(&lock);
    if (!ok)
        fprintf(stderr, "cuda_mock: %s called from a thread other than the loading thread\n", fn);
    return ok;
}

static cudaError_t device_violation(const char *what, cudaError_t e) {
    pthread_mutex_lock(&lock);
    violations++;
    pthread_mutex_unlock(&lock);
    fprintf(stderr, "cuda_mock: %s\n", what);
    return e;
}

#define OWN_THREAD()                                                                               \
    do {                                                                                           \
        if (!own_thread(__func__)) return ret(cudaErrorNotPermitted);                              \
    } while (0)

/* ---- errors and devices ---- */

cudaError_t cudaGetLastError(void) {
    if (!own_thread(__func__)) return cudaErrorNotPermitted;
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

const char *cudaGetErrorString(cudaError_t e) {
    (void)own_thread(__func__);
    return e ? "mock error" : "no error";
}
const char *cudaGetErrorName(cudaError_t e) {
    (void)own_thread(__func__);
    return e ? "cudaErrorMock" : "cudaSuccess";
}

static int devices(void) {
    const char *s = getenv("WM_CUDA_MOCK_DEVICES");
    return s ? atoi(s) : 1;
}

cudaError_t cudaGetDeviceCount(int *n) {
    OWN_THREAD();
    if (devices() == 0) return ret(cudaErrorNoDevice);
    *n = devices();
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d) {
    OWN_THREAD();
    *d = current_device;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) {
    OWN_THREAD();
    if (d < 0 || d >= devices()) return ret(cudaErrorInvalidDevice);
    current_device = d;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr attr, int d) {
    OWN_THREAD();
    if (d < 0 || d >= devices()) return ret(cudaErrorInvalidDevice);
    *v = attr == cudaDevAttrHostRegisterReadOnlySupported ? 1 : 0;
    return cudaSuccess;
}

/* ---- memory ---- */

typedef struct block {
    size_t len;
    max_align_t align;
} block;

cudaError_t cudaMalloc(void **p, size_t len) {
    OWN_THREAD();
    pthread_mutex_lock(&lock);
    int full = device_held + len > MOCK_TOTAL;
    if (!full) device_held += len;
    pthread_mutex_unlock(&lock);
    if (full) return ret(cudaErrorMemoryAllocation);
    block *b = malloc(sizeof *b + len);
    if (!b) return ret(cudaErrorMemoryAllocation);
    b->len = len;
    memset(b + 1, 0xA5, len); /* device memory is not zeroed */
    pthread_mutex_lock(&lock);
    if (n_blocks < MAX_BLOCKS)
        blocks[n_blocks++] = (dev_block){(uintptr_t)(b + 1), len, current_device};
    pthread_mutex_unlock(&lock);
    *p = b + 1;
    return cudaSuccess;
}

/* The device whose memory holds [p, p + len), or -1. */
static int device_of(const void *p, size_t len) {
    uintptr_t a = (uintptr_t)p;
    int d = -1;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_blocks && d < 0; i++)
        if (a >= blocks[i].base && a + len <= blocks[i].base + blocks[i].len) d = blocks[i].device;
    pthread_mutex_unlock(&lock);
    return d;
}

static void orphans_clear_of(const void *p, size_t len, const char *what);

cudaError_t cudaFree(void *p) {
    OWN_THREAD();
    if (!p) return cudaSuccess;
    block *b = (block *)p - 1;
    orphans_clear_of(p, b->len, "device memory freed");
    pthread_mutex_lock(&lock);
    device_held -= b->len;
    for (size_t i = 0; i < n_blocks; i++)
        if (blocks[i].base == (uintptr_t)p) {
            blocks[i] = blocks[--n_blocks];
            break;
        }
    pthread_mutex_unlock(&lock);
    free(b);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    OWN_THREAD();
    pthread_mutex_lock(&lock);
    *free_bytes = MOCK_TOTAL - device_held;
    pthread_mutex_unlock(&lock);
    *total = MOCK_TOTAL;
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t len, enum cudaMemcpyKind kind) {
    OWN_THREAD();
    (void)kind;
    memcpy(dst, src, len);
    return cudaSuccess;
}

static void orphans_run(void);

cudaError_t cudaDeviceSynchronize(void) {
    OWN_THREAD();
    orphans_run();
    return cudaSuccess;
}

/* ---- registration ---- */

cudaError_t cudaHostRegister(void *p, size_t len, unsigned flags) {
    OWN_THREAD();
    uintptr_t a = (uintptr_t)p;
    if (!p || !len) return ret(cudaErrorInvalidValue);
    /* Fault every page in as the driver does when it pins them (readable for read-only, writable
     * otherwise), in the kernel, without reading or writing a byte: readers may already be
     * filling a ring that is being registered, as with the real runtime. Memory that is not
     * mapped (or not writable for a writable registration) is refused. */
    uintptr_t page = 4096, lo = a / page * page, hi = (a + len + page - 1) / page * page;
    int adv = flags & cudaHostRegisterReadOnly ? MADV_POPULATE_READ : MADV_POPULATE_WRITE;
    if (madvise((void *)lo, hi - lo, adv) != 0 && errno != EINVAL) /* EINVAL: a kernel < 5.14 */
        return ret(cudaErrorInvalidValue);
    pthread_mutex_lock(&lock);
    cudaError_t e = cudaSuccess;
    for (size_t i = 0; i < n_regs && !e; i++)
        if (a < regs[i].base + regs[i].len && regs[i].base < a + len)
            e = cudaErrorHostMemoryAlreadyRegistered;
    if (!e && n_regs == MAX_REG) e = cudaErrorMemoryAllocation;
    if (!e) regs[n_regs++] = (reg){a, len, current_device, (flags & cudaHostRegisterPortable) != 0};
    if (!e && len > largest_registration) largest_registration = len;
    pthread_mutex_unlock(&lock);
    return ret(e);
}

/* What an address is: device memory (a cudaMalloc block, its device), pinned host memory (a
 * registration) or unregistered, as the runtime (11 and later) answers for plain host memory. */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *at, const void *p) {
    OWN_THREAD();
    if (!at) return ret(cudaErrorInvalidValue);
    memset(at, 0, sizeof *at);
    at->type = cudaMemoryTypeUnregistered;
    at->device = -2;
    int d = device_of(p, 1);
    if (d >= 0) {
        at->type = cudaMemoryTypeDevice;
        at->device = d;
        at->devicePointer = (void *)(uintptr_t)p;
        return cudaSuccess;
    }
    uintptr_t a = (uintptr_t)p;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_regs; i++)
        if (a >= regs[i].base && a < regs[i].base + regs[i].len) {
            at->type = cudaMemoryTypeHost;
            at->device = regs[i].device;
            at->hostPointer = (void *)(uintptr_t)p;
        }
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p) {
    OWN_THREAD();
    uintptr_t a = (uintptr_t)p;
    cudaError_t e = cudaErrorHostMemoryNotRegistered;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_regs; i++)
        if (regs[i].base == a) {
            orphans_clear_of(p, regs[i].len, "host memory unregistered");
            regs[i] = regs[--n_regs];
            e = cudaSuccess;
            break;
        }
    pthread_mutex_unlock(&lock);
    return ret(e);
}

/* 1 when [p, p + len) lies in one registration that device `device` may copy from (-1: any);
 * 2 when it lies in one that only another device may. */
static int registered_for(const void *p, size_t len, int device) {
    uintptr_t a = (uintptr_t)p;
    int ok = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_regs && !ok; i++)
        if (a >= regs[i].base && a + len <= regs[i].base + regs[i].len)
            ok = device < 0 || regs[i].portable || regs[i].device == device ? 1 : 2;
    pthread_mutex_unlock(&lock);
    return ok;
}

static int registered(const void *p, size_t len) { return registered_for(p, len, -1) != 0; }

/* ---- streams, events and copies ---- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    OWN_THREAD();
    (void)flags;
    /* mmap, not malloc: freed blocks this size would raise malloc's mmap threshold and stay in
     * its heap, which the CLI's "all memory returned" figure would count. */
    struct mock_stream *ms = mmap(NULL, sizeof *ms + MAX_OPS * sizeof(op), PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ms == MAP_FAILED) return ret(cudaErrorMemoryAllocation);
    ms->ops = (op *)(ms + 1);
    ms->device = current_device;
    *s = (cudaStream_t)(void *)ms;
    return cudaSuccess;
}

/* Runs queued operations up to (not including) position `upto`. */
static void drain(struct mock_stream *ms, size_t upto) {
    for (; ms->head < upto && ms->head < ms->n; ms->head++) {
        op *o = &ms->ops[ms->head];
        if (o->is_event) continue;
        const void *host = o->d2h ? o->dst : o->src;
        size_t pitch = o->d2h ? o->dpitch : o->spitch;
        if (!registered(host, (o->rows - 1) * pitch + o->len)) {
            fprintf(stderr, "cuda_mock: a queued copy's host memory was unregistered before it "
                            "ran\n");
            abort();
        }
        for (size_t r = 0; r < o->rows; r++)
            memcpy((char *)o->dst + r * o->dpitch, (const char *)o->src + r * o->spitch, o->len);
    }
    if (ms->head == ms->n) ms->head = ms->n = 0;
}

static void orphans_run(void) {
    for (size_t i = 0; i < n_orphans; i++)
        for (size_t r = 0; r < orphans[i].rows; r++)
            memcpy((char *)orphans[i].dst + r * orphans[i].dpitch,
                   (const char *)orphans[i].src + r * orphans[i].spitch, orphans[i].len);
    n_orphans = 0;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    OWN_THREAD();
    struct mock_stream *ms = (struct mock_stream *)(void *)s;
    drain(ms, ms->n);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    OWN_THREAD();
    struct mock_stream *ms = (struct mock_stream *)(void *)s;
    for (; ms->head < ms->n; ms->head++)
        if (!ms->ops[ms->head].is_event) {
            if (n_orphans == MAX_OPS) abort();
            orphans[n_orphans++] = ms->ops[ms->head];
        }
    munmap(ms, sizeof *ms + MAX_OPS * sizeof(op));
    return cudaSuccess;
}

/* Aborts when [p, p + len) holds a byte a copy still queued (on a destroyed stream) reads or
 * writes. */
static void orphans_clear_of(const void *p, size_t len, const char *what) {
    uintptr_t a = (uintptr_t)p;
    for (size_t i = 0; i < n_orphans; i++) {
        const op *o = &orphans[i];
        uintptr_t s = (uintptr_t)o->src, d = (uintptr_t)o->dst;
        size_t ss = (o->rows - 1) * o->spitch + o->len, ds = (o->rows - 1) * o->dpitch + o->len;
        if ((s < a + len && a < s + ss) || (d < a + len && a < d + ds)) {
            fprintf(stderr, "cuda_mock: %s under a copy still queued\n", what);
            abort();
        }
    }
}

/* A host-to-device copy of `rows` rows of len bytes (spitch apart in the source, dpitch in the
 * destination), or a device-to-host one (a sleep's), checked as the runtime would and queued on
 * its stream: the device side must be memory of the stream's device, the host side registered
 * for it. */
static cudaError_t queue_copy(void *dst, const void *src, size_t len, size_t rows, size_t spitch,
                              size_t dpitch, enum cudaMemcpyKind kind, cudaStream_t s) {
    struct mock_stream *ms = (struct mock_stream *)(void *)s;
    size_t src_span = (rows - 1) * spitch + len, dst_span = (rows - 1) * dpitch + len;
    int d2h = kind == cudaMemcpyDeviceToHost;
    if ((kind != cudaMemcpyHostToDevice && !d2h) || !rows || len > spitch || len > dpitch)
        return ret(cudaErrorInvalidValue);
    if (ms->device != current_device)
        return ret(device_violation("a copy queued on a stream of another device than the current",
                                    cudaErrorInvalidResourceHandle));
    int dd = d2h ? device_of(src, src_span) : device_of(dst, dst_span);
    if (dd != ms->device)
        return ret(device_violation(d2h ? "a copy from memory of another device than its stream's"
                                        : "a copy to memory of another device than its stream's",
                                    cudaErrorInvalidValue));
    int r =
        d2h ? registered_for(dst, dst_span, ms->device) : registered_for(src, src_span, ms->device);
    if (r == 2)
        return ret(device_violation("a copy from a registration of another device that is not "
                                    "portable",
                                    cudaErrorInvalidValue));
    if (!r) return ret(cudaErrorInvalidValue);
    if (ms->n == MAX_OPS) drain(ms, ms->n);
    if (ms->n == MAX_OPS) return ret(cudaErrorMemoryAllocation);
    ms->ops[ms->n++] = (op){.d2h = d2h,
                            .dst = dst,
                            .src = src,
                            .len = len,
                            .rows = rows,
                            .spitch = spitch,
                            .dpitch = dpitch};
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t len, enum cudaMemcpyKind kind,
                            cudaStream_t s) {
    OWN_THREAD();
    return queue_copy(dst, src, len, 1, len, len, kind, s);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t s) {
    OWN_THREAD();
    return queue_copy(dst, src, width, height, spitch, dpitch, kind, s);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    OWN_THREAD();
    (void)flags;
    mock_event *me = calloc(1, sizeof *me);
    if (!me) return ret(cudaErrorMemoryAllocation);
    me->device = current_device;
    *e = (cudaEvent_t)(void *)me;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    OWN_THREAD();
    free((void *)e);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    OWN_THREAD();
    mock_event *me = (mock_event *)(void *)e;
    struct mock_stream *ms = (struct mock_stream *)(void *)s;
    if (me->device != ms->device)
        return ret(device_violation("an event recorded on a stream of another device",
                                    cudaErrorInvalidResourceHandle));
    if (ms->n == MAX_OPS) drain(ms, ms->n);
    ms->ops[ms->n++] = (op){.is_event = 1, .ev = me};
    me->stream = ms;
    me->pos = ms->n;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    OWN_THREAD();
    mock_event *me = (mock_event *)(void *)e;
    if (me->stream) drain(me->stream, me->pos);
    me->stream = NULL;
    return cudaSuccess;
}

/* Done only every other time it is asked about pending copies (and then they run), so that the
 * backend's "not yet" path runs too. A "not yet" is no error: the last error stays as it was. */
cudaError_t cudaEventQuery(cudaEvent_t e) {
    OWN_THREAD();
    static unsigned asked;
    mock_event *me = (mock_event *)(void *)e;
    if (me->stream && me->stream->head < me->pos && asked++ % 2 == 0) return cudaErrorNotReady;
    return cudaEventSynchronize(e);
}

/* ---- what bench/gpu.c also calls ---- */

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    OWN_THREAD();
    (void)a;
    (void)b;
    *ms = 1.0f;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    OWN_THREAD();
    if (d < 0 || d >= devices()) return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    strcpy(p->name, "cuda_mock");
    return cudaSuccess;
}
