/*
 * test_fault_campaign.c: every fallible OS call and allocation of the whole lifecycle (open,
 * load, conversion on load, touch, release, close), failed in turn with every errno that call can
 * really return, in every mode, over GGUF, safetensors and a sharded safetensors set.
 *
 * For a scenario (a file, load options), a clean run counts the calls of each kind; then for each
 * kind, each k from 1 to that count and each errno of the kind, the k-th call of that kind fails
 * with that errno and the scenario runs again. Whatever happens: the status is one the failing
 * function documents for an OS failure (EIO stays EIO, an allocation's ENOMEM stays ENOMEM), the
 * message names the file, out-pointers are NULL, a load that succeeds delivers the same bytes as
 * the clean run, and afterwards the ledger is empty, no region maps the file and no descriptor is
 * left open.
 *
 * The errnos by kind (what open(2), fstat(2), pread(2), mmap(2), mlock(2), madvise(2) and
 * pthread_create(3) document for a regular file): see `errnos` below. ENOSPC applies to none of
 * them (nothing on these paths writes a file), so it is never injected. An injected EINTR on a
 * read is retried, as a real one is, so the load must succeed. Short reads are the file shrinking:
 * truncated after open (the load refuses it) and truncated in the middle of a heap load from the
 * progress callback (the next read comes back short, and the load fails with EFORMAT).
 *
 * Sections: checks; the scenario; the sweep; the cases.
 */
#include "wmtest.h"

#include "os/fault.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* ---- checks ---- */

typedef struct errset {
    wm_os_call kind;
    int errs[6];
} errset;

/* What each call can really return (0 ends a list). */
static const errset errnos[] = {
    {WM_OS_OPEN, {EIO, ENOMEM, EACCES, EMFILE, ENFILE, EINTR}},
    {WM_OS_STAT, {EIO, ENOMEM, EOVERFLOW}},
    {WM_OS_PREAD, {EIO, EINTR, EAGAIN, ENOMEM}},
    {WM_OS_MAP, {ENOMEM, EAGAIN, ENODEV, EACCES}},
    {WM_OS_PAGES, {ENOMEM, EAGAIN}},
    {WM_OS_LOCK, {ENOMEM, EAGAIN, EPERM}},
    {WM_OS_ADVISE, {EINVAL, ENOMEM, EAGAIN, EIO}},
    {WM_OS_THREAD, {EAGAIN, ENOMEM}},
    {WM_OS_ALLOC, {ENOMEM}},
};

/* The statuses an OS failure may produce: wm_file_open and wm_model_load document these. */
static int status_allowed(wm_status st, wm_os_call kind, int errn) {
    if (errn == EIO) return st == WM_EIO;
    if (kind == WM_OS_ALLOC || kind == WM_OS_PAGES) return st == WM_ENOMEM;
    return st == WM_EIO || st == WM_ENOMEM || st == WM_EPERM || st == WM_ENOENT;
}

/* ---- the scenario ---- */

typedef struct scenario {
    const char *path;  /* what wm_file_open gets */
    const char *shown; /* a name the messages must contain */
    wm_load_options o;
    uint64_t sum; /* checksum of every loaded byte (clean run) */
    uint64_t got; /* the same, of the last successful run */
} scenario;

/* A checksum of every loaded tensor byte, in order. */
static uint64_t touch(const wm_model *m) {
    const wm_file *f = wm_model_file(m);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        uint64_t nbytes;
        wm_type type;
        CHECK_STATUS(wm_model_tensor_info(m, i, &type, &nbytes), WM_OK);
        const unsigned char *p = wm_model_tensor_data(m, i);
        CHECK(p != NULL || nbytes == 0);
        for (uint64_t k = 0; k < nbytes; k++)
            h = (h ^ p[k]) * 1099511628211ull;
    }
    return h;
}

/* Runs open -> load -> touch -> release -> close once. Returns the status of the first failure
 * (WM_OK when all went through); s->got gets the checksum of a successful load. The sweep
 * (wmtest.h) checks what must hold whatever the outcome: the ledger empty, no mapping of the
 * file, no descriptor left, err.code the status and the message naming the file. */
static wm_status run(void *user, wm_error *err) {
    scenario *s = user;
    wm_file *f = (wm_file *)1;
    wm_status st = wm_file_open(s->path, &f, err);
    if (st != WM_OK) {
        CHECK_MSG(f == NULL, "failed open left a file");
        return st;
    }
    wm_model *m = (wm_model *)1;
    st = wm_model_load(f, &s->o, &m, err);
    if (st == WM_OK) {
        s->got = touch(m);
        wm_model_release(m);
    } else {
        CHECK_MSG(m == NULL, "failed load left a model");
    }
    wm_file_close(f);
    return st;
}

/* ---- the sweep ---- */

static void campaign_check(void *user, const wmt_fault_run *r) {
    const scenario *s = user;
    char what[128];
    snprintf(what, sizeof what, "%s call %llu of %llu failed with %s", wm__fault_call_name(r->kind),
             (unsigned long long)r->k, (unsigned long long)r->n, wmt_errno_name(r->errn));
    if (r->st == WM_OK) {
        CHECK_MSG(s->got == s->sum, "%s: the load succeeded with other bytes", what);
        return;
    }
    CHECK_MSG(r->errn != EINTR || r->kind != WM_OS_PREAD, "%s: a retried EINTR failed with %s",
              what, wm_status_name(r->st));
    CHECK_MSG(status_allowed(r->st, r->kind, r->errn), "%s: status %s", what,
              wm_status_name(r->st));
}

static void campaign(scenario *s) {
    wmt_sweep sw = {.what = s->shown,
                    .run = run,
                    .check = campaign_check,
                    .user = s,
                    .path = s->path,
                    .shown = s->shown,
                    .must_hit = 1};
    wmt_sweep_result res = {0};
    wmt_sweep_count(&sw, &res);
    s->sum = s->got;
    for (size_t e = 0; e < sizeof errnos / sizeof errnos[0]; e++) {
        int n_errs = 0;
        while (n_errs < 6 && errnos[e].errs[n_errs])
            n_errs++;
        wmt_sweep_kind(&sw, errnos[e].kind, res.counts[errnos[e].kind], errnos[e].errs, n_errs,
                       &res);
    }
    CHECK(res.runs > 0 && res.failed > 0);
    fprintf(stderr, "%s (%s): %llu faulted runs, %llu failed cleanly\n", s->shown,
            wm_mode_name(s->o.mode), (unsigned long long)res.runs, (unsigned long long)res.failed);
}

/* ---- short reads: the file shrinks ---- */

typedef struct shrink {
    const char *path;
    uint64_t calls, at;
    off_t to;
} shrink;

/* Progress callback: at the at-th call, cut the file to `to` bytes. */
static int shrink_now(void *user, uint64_t done, uint64_t total) {
    (void)done;
    (void)total;
    shrink *s = user;
    if (++s->calls == s->at) CHECK(truncate(s->path, s->to) == 0);
    return 0;
}

static void short_reads(wm_mode mode, unsigned threads) {
    size_t len;
    unsigned char *bytes = wmt_read_file(wmt_fixture("gguf/stories260K.gguf"), &len);
    const char *path = wmt_tmp("short.gguf");
    wmt_write_file(path, bytes, len);
    wm_file *f;
    CHECK_STATUS(wm_file_open(path, &f, NULL), WM_OK);
    uint64_t data = wm_file_data_offset(f);
    /* Cut points: inside the header, at the data, inside and at the end of tensors. */
    off_t cuts[] = {
        0, 100, (off_t)data - 1, (off_t)data, (off_t)data + 4097, (off_t)(len / 2), (off_t)len - 1};
    int fds = wmt_count_fds();
    uint64_t progress_calls = 0, mid_load_failures = 0;
    /* Mid-load cuts only for heap: a mapping made before the cut is valid until touched. */
    for (int pass = 0; pass < (mode == WM_MODE_HEAP ? 2 : 1); pass++) {
        for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
            /* pass 1 samples the progress calls: the first, the middle and the last (distinct,
             * increasing); pass 0 runs once with at = 0 */
            uint64_t ats[3] = {0}, n_at = 0;
            if (!pass) {
                ats[n_at++] = 0;
            } else {
                uint64_t cand[3] = {1, progress_calls / 2, progress_calls};
                for (int k = 0; k < 3; k++)
                    if (cand[k] >= 1 && cand[k] <= progress_calls &&
                        (n_at == 0 || cand[k] > ats[n_at - 1]))
                        ats[n_at++] = cand[k];
            }
            for (uint64_t ai = 0; ai < n_at; ai++) {
                uint64_t at = ats[ai];
                /* pass 0: truncated between open and load; pass 1: at the at-th progress call */
                shrink sh = {path, 0, at, cuts[c]};
                if (!pass) CHECK(truncate(path, cuts[c]) == 0);
                wm_load_options o = {.mode = mode,
                                     .threads = threads,
                                     .max_buffer_size = 256 << 10,
                                     .progress = shrink_now,
                                     .progress_user = &sh};
                wm_model *m = (wm_model *)1;
                wm_error err;
                wm_status st = wm_model_load(f, &o, &m, &err);
                if (st == WM_OK) {
                    /* Only a heap load may finish after the cut, when every read came before it. */
                    CHECK_MSG(mode == WM_MODE_HEAP && pass, "cut to %lld before the load: loaded",
                              (long long)cuts[c]);
                    touch(m);
                    wm_model_release(m);
                } else {
                    CHECK(m == NULL);
                    CHECK_MSG(st == WM_EFORMAT, "cut to %lld at progress %llu: %s: %s",
                              (long long)cuts[c], (unsigned long long)at, wm_status_name(st),
                              err.msg);
                    CHECK_MSG_HAS(err, "short.gguf");
                    mid_load_failures += pass;
                }
                CHECK_EQ(wmt_count_file_maps(path), 0);
                CHECK_EQ(wmt_count_fds(), fds);
                wmt_write_file(path, bytes, len); /* same inode: open, truncate, write */
                if (!pass && c == 0 && mode == WM_MODE_HEAP) {
                    /* count the progress calls of a whole load, for pass 1 */
                    shrink none = {path, 0, 0, 0};
                    o.progress_user = &none;
                    CHECK_STATUS(wm_model_load(f, &o, &m, NULL), WM_OK);
                    wm_model_release(m);
                    progress_calls = none.calls;
                }
            }
        }
    }
    /* A heap load did meet a short read after it began. With one thread the reads and the
     * progress calls alternate on it, so this is certain; with workers, the loading thread may
     * make few progress calls and the workers may read everything before the cut, which is also a
     * correct outcome. */
    CHECK(mode != WM_MODE_HEAP || threads > 1 || (progress_calls >= 2 && mid_load_failures > 0));
    wm_file_close(f);
    free(bytes);
}

/* ---- the cases ---- */

static void gguf_campaign(const char *fixture, wm_load_options o) {
    scenario s = {wmt_fixture(fixture), strrchr(fixture, '/') + 1, o, 0, 0};
    campaign(&s);
}

#define HEAP_OPTS                                                                                  \
    { .mode = WM_MODE_HEAP, .threads = 2, .max_buffer_size = 256 << 10 }
#define MMAP_OPTS                                                                                  \
    { .mode = WM_MODE_MMAP, .prefetch = 1, .max_buffer_size = 256 << 10 }
#define PRIV_OPTS                                                                                  \
    { .mode = WM_MODE_MMAP_PRIVATE, .prefetch = 1, .max_buffer_size = 256 << 10 }

WM_TEST(gguf_heap) { gguf_campaign("gguf/stories260K.gguf", (wm_load_options)HEAP_OPTS); }
WM_TEST(gguf_mmap) { gguf_campaign("gguf/stories260K.gguf", (wm_load_options)MMAP_OPTS); }
WM_TEST(gguf_mmap_private) { gguf_campaign("gguf/stories260K.gguf", (wm_load_options)PRIV_OPTS); }

WM_TEST(gguf_heap_convert_f16_to_f32) {
    static const wm_convert_rule rules[] = {{NULL, WM_TYPE_F16, WM_TYPE_F32}};
    wm_load_options o = HEAP_OPTS;
    o.convert = rules;
    o.n_convert = 1;
    gguf_campaign("gguf/stories260K-f16.gguf", o);
}

WM_TEST(gguf_heap_convert_q4_0_to_f16) {
    static const wm_convert_rule rules[] = {{"token_embd.weight", WM_TYPE_INVALID, WM_TYPE_F32},
                                            {NULL, WM_TYPE_Q4_0, WM_TYPE_F16}};
    wm_load_options o = HEAP_OPTS;
    o.threads = 1;
    o.convert = rules;
    o.n_convert = 2;
    gguf_campaign("gguf/stories260K-q4_0.gguf", o);
}

/* Locks: best effort must survive any lock failure; required turns it into a documented status. */
WM_TEST(gguf_mmap_lock_best_effort) {
    wm_load_options o = MMAP_OPTS;
    o.lock = WM_LOCK_BEST_EFFORT;
    gguf_campaign("gguf/ratchet-dummy.gguf", o);
}

WM_TEST(gguf_heap_lock_required) {
    wm_file *f;
    CHECK_STATUS(wm_file_open(wmt_fixture("gguf/ratchet-dummy.gguf"), &f, NULL), WM_OK);
    wm_load_options o = HEAP_OPTS;
    o.lock = WM_LOCK_REQUIRED;
    wm_model *m;
    wm_status st = wm_model_load(f, &o, &m, NULL);
    if (st == WM_OK) wm_model_release(m);
    wm_file_close(f);
    if (st == WM_EPERM) WM_SKIP("RLIMIT_MEMLOCK too low here to lock a small model");
    gguf_campaign("gguf/ratchet-dummy.gguf", o);
}

WM_TEST(safetensors_every_mode) {
    wm_load_options opts[] = {HEAP_OPTS, MMAP_OPTS, PRIV_OPTS};
    for (int i = 0; i < 3; i++)
        gguf_campaign("safetensors/candle-mel-filters.safetensors", opts[i]);
}

WM_TEST(sharded_safetensors_every_mode) {
    wmt_make_model("m.safetensors", "--size 1M --format safetensors --shards 3");
    /* the set is opened through its index */
    DIR *d = opendir(wmt_tmpdir());
    CHECK(d != NULL);
    static char index[512];
    index[0] = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".index.json"))
            snprintf(index, sizeof index, "%s/%s", wmt_tmpdir(), e->d_name);
    closedir(d);
    CHECK_MSG(index[0], "make-model --shards wrote no index");
    wm_load_options opts[] = {HEAP_OPTS, MMAP_OPTS, PRIV_OPTS};
    for (int i = 0; i < 3; i++) {
        opts[i].max_buffer_size = 0; /* its tensors are larger than the other cases' chunks */
        scenario s = {index, ".safetensors", opts[i], 0, 0};
        campaign(&s);
    }
}

WM_TEST(short_reads_heap_1_thread) { short_reads(WM_MODE_HEAP, 1); }
WM_TEST(short_reads_heap_2_threads) { short_reads(WM_MODE_HEAP, 2); }
WM_TEST(short_reads_mmap) { short_reads(WM_MODE_MMAP, 1); }
WM_TEST(short_reads_mmap_private) { short_reads(WM_MODE_MMAP_PRIVATE, 1); }
