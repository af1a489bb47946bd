/*
 * test_llama.c: the llama.cpp bridge (include/weightmap_llama.h) against the stock prebuilt
 * llama.cpp v0.4.0 (npm @node-llama-cpp/linux-x64@3.21.1, with the headers scripts/llama.sh
 * puts beside it). What a runtime sees: the same greedy tokens and the same first logits, bit
 * for bit, through wm_llama_load as through llama_model_load_from_file in its read and mmap
 * modes, for real quantizations of stories260K and a make-model file, with every tensor read in
 * place and with every tensor forced through the window and ggml_backend_tensor_set (the path
 * of a device buffer, which this CPU-only build has none of); llama.cpp's extra buffer types
 * (repacked weights) as its own loader chooses them; load/free cycles that leave no ledger byte
 * and no mapping; every failure, injected or from a cut or crafted file, holds nothing, and a
 * file weightmap refuses never reaches llama.cpp (it logs not one line).
 */
#include "../bridge/llama_bridge.h" /* the placement rule (extras), for mapped_repacked_* */
#include "gguf_builder.h"
#include "os/fault.h"
#include "weightmap_llama.h"
#include "wmtest.h"

#include <errno.h>
#include <fcntl.h>
#include <ggml-backend.h>
#include <malloc.h>
#include <regex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- llama.cpp, once per process ---- */

/* What llama.cpp logged since the last reset: how many lines, and the lines that give a model
 * buffer's size by buffer type ("CPU_REPACK model buffer size = ..."). */
static _Atomic int log_lines;
static _Atomic int mlock_warnings; /* lines that say "failed to mlock" */
static char buffer_lines[4096];

static void on_log(enum ggml_log_level level, const char *text, void *user) {
    (void)level, (void)user;
    atomic_fetch_add(&log_lines, 1);
    if (strstr(text, "failed to mlock")) atomic_fetch_add(&mlock_warnings, 1);
    const char *p = strstr(text, "model buffer size");
    if (p) {
        size_t n = strlen(buffer_lines);
        snprintf(buffer_lines + n, sizeof buffer_lines - n, "%s", text);
    }
}

static void reset_log(void) {
    atomic_store(&log_lines, 0);
    atomic_store(&mlock_warnings, 0);
    buffer_lines[0] = 0;
}

static void setup(void) {
    static bool done;
    if (done) return;
    done = true;
    llama_log_set(on_log, NULL);
    ggml_backend_load_all_from_path(WM_LLAMA_LIBDIR);
    llama_backend_init();
}

/* The CPU, read (NONE): the cases of the reading path; the modes' cases set their own. */
static struct llama_model_params cpu_params(void) {
    struct llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = 0;
    p.load_mode = LLAMA_LOAD_MODE_NONE;
    return p;
}

/* ---- decoding ---- */

#define N_TOKENS 24

typedef struct decoded {
    llama_token tokens[N_TOKENS];
    float *first; /* the logits after BOS (malloc'd) */
    int n_vocab;
    char buffers[4096]; /* the buffer-size lines of the load (but a mapped one's) */
} decoded;

/* Greedy decoding from BOS, one token at a time. */
static void greedy(struct llama_model *m, decoded *d) {
    const struct llama_vocab *v = llama_model_get_vocab(m);
    d->n_vocab = llama_vocab_n_tokens(v);
    d->first = malloc((size_t)d->n_vocab * sizeof(float));
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 64;
    cp.n_threads = 1; /* ggml's workers spin while they wait: two tests at once on two cores
                         would take minutes, and the results do not depend on it */
    cp.n_threads_batch = 1;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    CHECK(ctx != NULL);
    llama_token tok = llama_vocab_bos(v);
    for (int i = 0; i < N_TOKENS; i++) {
        struct llama_batch b = llama_batch_get_one(&tok, 1);
        CHECK_EQ(llama_decode(ctx, b), 0);
        const float *lg = llama_get_logits_ith(ctx, -1);
        if (i == 0) memcpy(d->first, lg, (size_t)d->n_vocab * sizeof(float));
        int best = 0;
        for (int k = 1; k < d->n_vocab; k++)
            if (lg[k] > lg[best]) best = k;
        d->tokens[i] = tok = best;
    }
    llama_free(ctx);
}

/* The buffer lines of the last load, by type and size (the bridge's own buffers are of
 * llama.cpp's types: the same lines as its read mode), but a mapped buffer's (mmap mode). */
static void keep_buffers(decoded *d) {
    d->buffers[0] = 0;
    for (char *line = strtok(buffer_lines, "\n"); line; line = strtok(NULL, "\n")) {
        if (strstr(line, "CPU_Mapped model")) continue;
        size_t n = strlen(d->buffers);
        snprintf(d->buffers + n, sizeof d->buffers - n, "%s\n", line);
    }
}

static void by_llama(const char *path, int load_mode, decoded *d) {
    struct llama_model_params p = cpu_params();
    p.load_mode = load_mode;
    reset_log();
    struct llama_model *m = llama_model_load_from_file(path, p);
    CHECK_MSG(m != NULL, "llama.cpp did not load %s (mode %d)", path, load_mode);
    keep_buffers(d);
    greedy(m, d);
    llama_model_free(m);
}

static void by_bridge_repack(const char *path, wm_llama_upload upload, wm_llama_buffers buffers,
                             wm_llama_repack repack, wm_llama_stats *s, decoded *d) {
    struct llama_model_params p = cpu_params();
    wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
    o.threads = 2;
    o.upload = upload;
    o.buffers = buffers;
    o.repack = repack;
    o.stats = s;
    struct llama_model *m = NULL;
    wm_error err;
    reset_log();
    CHECK_MSG(wm_llama_load(path, &p, &o, &m, &err) == WM_OK, "%s", err.msg);
    keep_buffers(d);
    CHECK_LEDGER_EMPTY();
    CHECK_EQ(wmt_count_file_maps(path), 0);
    greedy(m, d);
    llama_model_free(m);
}

static void by_bridge(const char *path, wm_llama_upload upload, wm_llama_buffers buffers,
                      wm_llama_stats *s, decoded *d) {
    by_bridge_repack(path, upload, buffers, WM_LLAMA_REPACK_AUTO, s, d);
}

static void same(const decoded *a, const decoded *b, const char *what) {
    CHECK_EQ(a->n_vocab, b->n_vocab);
    for (int i = 0; i < N_TOKENS; i++)
        CHECK_MSG(a->tokens[i] == b->tokens[i], "%s: token %d is %d, not %d", what, i, a->tokens[i],
                  b->tokens[i]);
    CHECK_MSG(memcmp(a->first, b->first, (size_t)a->n_vocab * sizeof(float)) == 0,
              "%s: the first logits differ", what);
}

/* A loaded model decodes as ref does, then its free leaves no mapping of path and an empty
 * ledger. */
static void same_then_freed(struct llama_model *m, const decoded *ref, const char *what,
                            const char *path) {
    decoded d;
    greedy(m, &d);
    same(&d, ref, what);
    free(d.first);
    llama_model_free(m);
    CHECK_EQ(wmt_count_file_maps(path), 0);
    CHECK_LEDGER_EMPTY();
}

/* Greedy tokens and first logits: the bridge (in place, windowed, in llama.cpp's buffers, each
 * repacked tensor handed over whole) equals llama.cpp's read and mmap modes; the extra buffer
 * types are the same as llama.cpp's read mode chose. Where ggml repacks (on this CPU), every
 * repacked tensor of these models (rows a multiple of 16) goes over in row groups as it is read
 * (wm_llama_repack AUTO): a group repacked anywhere but where the whole repack puts it changes
 * the logits. */
static void tokens_equal(const char *path) {
    setup();
    decoded rd, mm, wm, win, lb, wh;
    wm_llama_stats s = WM_LLAMA_STATS_INIT, sw = WM_LLAMA_STATS_INIT, sl = WM_LLAMA_STATS_INIT;
    wm_llama_stats sh = WM_LLAMA_STATS_INIT;
    by_llama(path, 0, &rd);
    by_llama(path, 1, &mm);
    by_bridge(path, WM_LLAMA_UPLOAD_AUTO, WM_LLAMA_BUFFERS_AUTO, &s, &wm);
    by_bridge(path, WM_LLAMA_UPLOAD_WINDOW, WM_LLAMA_BUFFERS_AUTO, &sw, &win);
    by_bridge(path, WM_LLAMA_UPLOAD_AUTO, WM_LLAMA_BUFFERS_LLAMA, &sl, &lb);
    by_bridge_repack(path, WM_LLAMA_UPLOAD_AUTO, WM_LLAMA_BUFFERS_AUTO, WM_LLAMA_REPACK_WHOLE, &sh,
                     &wh);
    same(&mm, &rd, "llama.cpp mmap vs read");
    same(&wm, &rd, "wm_llama_load vs llama.cpp read");
    same(&win, &rd, "wm_llama_load windowed vs llama.cpp read");
    same(&lb, &rd, "wm_llama_load in llama.cpp's buffers vs llama.cpp read");
    same(&wh, &rd, "wm_llama_load, repacked whole, vs llama.cpp read");
    /* in row groups: every repacked tensor where ggml's repack type is CPU_REPACK alone (the
     * development VM's and CI's CPUs), none where it is AMX alone (the H200 host's) */
    bool amx = strstr(rd.buffers, "AMX") != NULL;
    if (!amx) {
        CHECK_EQ(s.repacked_rows, s.repacked);
        CHECK_EQ(sl.repacked_rows, sl.repacked);
    } else if (!strstr(rd.buffers, "CPU_REPACK")) {
        CHECK_EQ(s.repacked_rows, 0);
    }
    CHECK_EQ(sh.repacked_rows, 0);
    CHECK_EQ(sh.repacked, s.repacked);
    CHECK_MSG(strcmp(wm.buffers, rd.buffers) == 0, "buffers: bridge\n%s\nllama.cpp\n%s", wm.buffers,
              rd.buffers);
    CHECK_MSG(strcmp(lb.buffers, rd.buffers) == 0, "buffers: bridge\n%s\nllama.cpp\n%s", lb.buffers,
              rd.buffers);
    /* every weight buffer the bridge's own pages (the ggml it was built with); AMX's too since
     * 1.8.4 (the GPU hosts' CPUs: llama.cpp allocated those before) */
    CHECK_MSG(s.bytes_own >= s.bytes_read && sw.bytes_own >= sw.bytes_read,
              "own buffers: %llu bytes for %llu read", (unsigned long long)s.bytes_own,
              (unsigned long long)s.bytes_read);
    CHECK_EQ(sl.bytes_own, 0);
    CHECK_EQ(s.tensors, s.in_place + s.windowed + s.filled);
    CHECK_EQ(s.windowed, s.repacked);
    CHECK_EQ(sw.in_place, 0);
    CHECK_EQ(sw.windowed + sw.filled, sw.tensors);
    fprintf(stderr,
            "%s: %zu tensors (%zu in place, %zu windowed, %zu repacked, %zu of them in row "
            "groups, %zu filled), %llu bytes; tokens:",
            path, s.tensors, s.in_place, s.windowed, s.repacked, s.repacked_rows, s.filled,
            (unsigned long long)s.bytes_read);
    for (int i = 0; i < 8; i++)
        fprintf(stderr, " %d", wm.tokens[i]);
    fprintf(stderr, "\nbuffers other than CPU:\n%s", rd.buffers);
    free(rd.first), free(mm.first), free(wm.first), free(win.first), free(lb.first);
    free(wh.first);
}

WM_TEST(tokens_equal_f32) { tokens_equal(wmt_fixture("gguf/stories260K.gguf")); }
WM_TEST(tokens_equal_q4_0) { tokens_equal(wmt_fixture("gguf/stories260K-q4_0.gguf")); }
WM_TEST(tokens_equal_q8_0) { tokens_equal(wmt_fixture("gguf/stories260K-q8_0.gguf")); }
WM_TEST(tokens_equal_q4_k_m) { tokens_equal(wmt_fixture("gguf/stories260K-q4_k_m.gguf")); }
WM_TEST(tokens_equal_make_model) { tokens_equal(wmt_make_model("m.gguf", "--size 8M")); }

/* Repacked tensors in row groups, in several pieces each: a 128M model (its q4_0 matrices 1.5
 * MiB, repacked where ggml repacks on this CPU) read with a window of 1 MiB a thread, so that each
 * matrix reaches the sink in pieces of whole 16-row groups, each repacked where it lies; the
 * tokens and first logits equal those of the same model with each tensor repacked whole
 * (WM_LLAMA_REPACK_WHOLE, ggml's own repack of the tensor). With the sink repacking a piece
 * anywhere but at its offset, the logits differ. */
WM_TEST(repack_in_row_groups_equals_whole) {
    setup();
    const char *path = wmt_make_model("m128.gguf", "--size 128M");
    decoded rows, whole;
    wm_llama_stats s[2] = {WM_LLAMA_STATS_INIT, WM_LLAMA_STATS_INIT};
    uint64_t peak[2];
    for (int k = 0; k < 2; k++) {
        reset_log();
        wm_ledger_reset_peaks();
        struct llama_model_params p = cpu_params();
        wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
        o.threads = 2;
        o.window = (size_t)2 << 20;
        o.repack = k ? WM_LLAMA_REPACK_WHOLE : WM_LLAMA_REPACK_AUTO;
        o.stats = &s[k];
        struct llama_model *m = NULL;
        wm_error err;
        CHECK_MSG(wm_llama_load(path, &p, &o, &m, &err) == WM_OK, "%s", err.msg);
        CHECK_LEDGER_EMPTY();
        wm_ledger l = WM_LEDGER_INIT;
        wm_ledger_get(&l);
        peak[k] = l.cat[WM_LEDGER_SCRATCH].peak;
        keep_buffers(k ? &whole : &rows);
        greedy(m, k ? &whole : &rows);
        llama_model_free(m);
    }
    CHECK_EQ(s[0].repacked, s[1].repacked);
    CHECK_EQ(s[1].repacked_rows, 0);
    same(&rows, &whole, "repacked in row groups vs whole");
    fprintf(stderr,
            "%zu tensors repacked, in row groups: %zu; the load's scratch at most %llu bytes, "
            "%llu with each tensor whole\n",
            s[0].repacked, s[0].repacked_rows, (unsigned long long)peak[0],
            (unsigned long long)peak[1]);
    if (!strstr(rows.buffers, "AMX")) { /* ggml's repack type is CPU_REPACK (if any) */
        CHECK_EQ(s[0].repacked_rows, s[0].repacked);
        /* no window of a repacked tensor's size: the threads' shares only */
        if (s[0].repacked) CHECK(peak[0] < peak[1]);
    }
    free(rows.first);
    free(whole.first);
}

/* ---- cycles ---- */

WM_TEST(cycles_leave_nothing) {
    setup();
    const char *path = wmt_fixture("gguf/stories260K-q8_0.gguf");
    struct llama_model_params p = cpu_params();
    for (int c = 0; c < 20; c++) {
        struct llama_model *m = NULL;
        wm_error err;
        CHECK_MSG(wm_llama_load(path, &p, NULL, &m, &err) == WM_OK, "cycle %d: %s", c, err.msg);
        CHECK_LEDGER_EMPTY();
        CHECK_EQ(wmt_count_file_maps(path), 0);
        llama_model_free(m);
        CHECK_EQ(wmt_count_file_maps(path), 0);
    }
}

/* ---- failures hold nothing ---- */

typedef struct sweep_run {
    wm_file *f;
    wm_llama_options o;
    const struct llama_model_tensor_buft_override *ov; /* params' (NULL: none) */
    bool cold; /* the file dropped from the page cache before each run */
} sweep_run;

static wm_status sweep_once(void *user, wm_error *err) {
    sweep_run *r = user;
    if (r->cold) wmt_make_cold(wm_file_path(r->f), 0, 0);
    struct llama_model_params p = cpu_params();
    p.tensor_buft_overrides = r->ov;
    struct llama_model *m = (struct llama_model *)(uintptr_t)1;
    wm_status st = wm_llama_load_file(r->f, &p, &r->o, &m, err);
    if (st) {
        CHECK(m == NULL);
        return st;
    }
    llama_model_free(m);
    return WM_OK;
}

static void sweep(wm_llama_upload upload) {
    setup();
    const char *path = wmt_fixture("gguf/stories260K-q4_0.gguf");
    sweep_run run = {.f = OPEN_OK(path), .o = WM_LLAMA_OPTIONS_INIT};
    run.o.threads = 2;
    run.o.upload = upload;
    wmt_sweep s = {.what = "wm_llama_load_file",
                   .run = sweep_once,
                   .check = wmt_check_io_failure,
                   .user = &run,
                   .path = path,
                   .shown = "stories260K-q4_0.gguf",
                   .cycle = 1}; /* call k with EIO or ENOMEM in turn: a model per call */
    static const int errs[] = {EIO, ENOMEM};
    wmt_sweep_result res = {0};
    wmt_sweep_any(&s, errs, 2, &res);
    CHECK(res.counts[WM_OS_ALLOC] >= 3 && res.counts[WM_OS_DEVICE] >= 2);
    CHECK(res.failed > 0);
    fprintf(stderr, "%llu calls (%llu allocations, %llu device), %llu faulted runs, %llu failed\n",
            (unsigned long long)res.counts[WM_OS_ANY], (unsigned long long)res.counts[WM_OS_ALLOC],
            (unsigned long long)res.counts[WM_OS_DEVICE], (unsigned long long)res.runs,
            (unsigned long long)res.failed);
    wm_file_close(run.f);
}

WM_TEST(fault_sweep_in_place) { sweep(WM_LLAMA_UPLOAD_AUTO); }
WM_TEST(fault_sweep_windowed) { sweep(WM_LLAMA_UPLOAD_WINDOW); }

/* A refusal: the status, *out NULL, err naming the file and `needle`, nothing held; `silent`:
 * llama.cpp was never called (it logged nothing). */
static void check_refused(const char *path, wm_status want, const char *needle, bool silent) {
    setup();
    struct llama_model_params p = cpu_params();
    struct llama_model *m = (struct llama_model *)(uintptr_t)1;
    wm_error err = {0};
    reset_log();
    CHECK_STATUS(wm_llama_load(path, &p, NULL, &m, &err), want);
    CHECK(m == NULL);
    CHECK_MSG_HAS(err, needle);
    if (silent) CHECK_EQ(atomic_load(&log_lines), 0);
    CHECK_LEDGER_EMPTY();
    CHECK_EQ(wmt_count_file_maps(path), 0);
    fprintf(stderr, "refused: %s\n", err.msg);
}

WM_TEST(truncated_file_refused_before_llama) {
    const char *src = wmt_fixture("gguf/stories260K-q8_0.gguf");
    const char *path = wmt_tmp("cut.gguf");
    size_t size = wmt_copy_file(src, path);
    CHECK(truncate(path, (off_t)(size - 4096)) == 0);
    check_refused(path, WM_EFORMAT, "cut.gguf", true);
}

/* Bytes of `path` with the first `from` (of n bytes) after `after` replaced by `to`. */
static const char *patched(const char *src, const char *name, const char *after, const void *from,
                           const void *to, size_t n) {
    size_t len;
    unsigned char *b = wmt_read_file(src, &len);
    unsigned char *at = memmem(b, len, after, strlen(after));
    CHECK(at != NULL);
    unsigned char *hit = memmem(at, len - (size_t)(at - b), from, n);
    CHECK(hit != NULL);
    memcpy(hit, to, n);
    const char *path = wmt_tmp(name);
    wmt_write_file(path, b, len);
    free(b);
    return path;
}

/* A tensor whose two dimensions are swapped (same bytes, so the file is sound): llama.cpp's
 * user path would take it; the bridge refuses it naming both shapes, and frees the model. */
WM_TEST(crafted_shape_refused) {
    const char *src = wmt_fixture("gguf/stories260K.gguf");
    uint64_t from[2] = {64, 172}, to[2] = {172, 64};
    const char *path = patched(src, "shape.gguf", "blk.0.ffn_gate.weight", from, to, sizeof from);
    check_refused(path, WM_EFORMAT, "tensor 'blk.0.ffn_gate.weight' is f32 [172, 64", false);
}

/* A tensor of a type ggml removed (4, Q4_2): refused by weightmap before llama.cpp is called. */
WM_TEST(crafted_type_refused_before_llama) {
    const char *src = wmt_fixture("gguf/stories260K-q8_0.gguf");
    uint64_t dims[2] = {64, 64};
    size_t len;
    unsigned char *b = wmt_read_file(src, &len);
    unsigned char *at = memmem(b, len, "blk.0.attn_q.weight", 19);
    CHECK(at != NULL);
    unsigned char *ne = memmem(at, 64, dims, sizeof dims);
    CHECK(ne != NULL);
    uint32_t removed = 4;
    memcpy(ne + sizeof dims, &removed, 4); /* the type follows the dimensions */
    const char *path = wmt_tmp("type.gguf");
    wmt_write_file(path, b, len);
    free(b);
    check_refused(path, WM_EFORMAT, "type.gguf", true);
}

WM_TEST(not_gguf_refused_before_llama) {
    check_refused(wmt_fixture("safetensors/hf-sample-f.safetensors"), WM_EFORMAT,
                  "llama.cpp loads GGUF files", true);
}

/* A sound GGUF file that is no model: llama.cpp refuses it, and the error carries llama.cpp's
 * own reason (its log's last error line, kept whatever the process's callback does with it: the
 * tests' callback only counts lines). */
WM_TEST(model_rule_is_llama_cpps) {
    check_refused(wmt_fixture("gguf/ratchet-test.gguf"), WM_EDEVICE,
                  "key not found in model: llama.context_length", false);
}

/* A vocabulary-only GGUF (llama.cpp's ggml-vocab-*.gguf): refused by llama.cpp, and the error
 * says the file has no weights, with llama.cpp's reason. */
WM_TEST(vocabulary_only_file_says_no_weights) {
    check_refused(wmt_fixture("gguf/ggml-vocab-llama-spm.gguf"), WM_EDEVICE,
                  "a vocabulary-only GGUF, no weights", false);
    check_refused(wmt_fixture("gguf/ggml-vocab-llama-spm.gguf"), WM_EDEVICE,
                  "too many tensors created", false);
}

/* No backend loaded (this case's process never calls ggml_backend_load_all): the error says which
 * call to make, nothing held. */
WM_TEST(no_backend_says_which_call) {
    const char *path = wmt_fixture("gguf/stories260K-q8_0.gguf");
    struct llama_model_params p = cpu_params();
    struct llama_model *m = (struct llama_model *)(uintptr_t)1;
    wm_error err = {0};
    llama_log_set(on_log, NULL);
    CHECK_STATUS(wm_llama_load(path, &p, NULL, &m, &err), WM_EDEVICE);
    CHECK(m == NULL);
    CHECK_MSG_HAS(err, "call ggml_backend_load_all()");
    CHECK_LEDGER_EMPTY();
    CHECK_EQ(wmt_count_file_maps(path), 0);
    fprintf(stderr, "refused: %s\n", err.msg);
}

WM_TEST(refusals_of_arguments) {
    setup();
    struct llama_model *m = (struct llama_model *)(uintptr_t)1;
    wm_error err;
    CHECK_STATUS(wm_llama_load(NULL, NULL, NULL, &m, &err), WM_EINVAL);
    CHECK(m == NULL);
    CHECK_STATUS(wm_llama_load("x.gguf", NULL, NULL, NULL, &err), WM_EINVAL);
    /* each enum field out of range: WM_EINVAL naming the field and the value */
    wm_llama_options bad[5];
    for (int i = 0; i < 5; i++)
        bad[i] = (wm_llama_options)WM_LLAMA_OPTIONS_INIT;
    bad[0].repack = (wm_llama_repack)5;
    bad[1].buffers = (wm_llama_buffers)7;
    bad[2].trim = (wm_llama_trim)9;
    bad[3].prefault = (wm_llama_prefault)4;
    bad[4].prefetch = (wm_llama_prefetch)3;
    static const char *const said[5] = {"repack 5", "buffers 7", "trim 9", "prefault 4",
                                        "prefetch 3"};
    for (int i = 0; i < 5; i++) {
        CHECK_STATUS(wm_llama_load(wmt_fixture("gguf/stories260K.gguf"), NULL, &bad[i], &m, &err),
                     WM_EINVAL);
        CHECK_MSG_HAS(err, said[i]);
    }
    /* a caller of the header before `buffers` and `trim`: its size ends before them, and what
     * lies past it is not read (both AUTO: the bridge's own buffers) */
    wm_llama_stats st = WM_LLAMA_STATS_INIT;
    struct llama_model_params p = cpu_params();
    wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
    o.size = (uint32_t)offsetof(wm_llama_options, buffers);
    o.stats = &st;
    o.buffers = WM_LLAMA_BUFFERS_LLAMA;
    o.trim = (wm_llama_trim)9;
    CHECK_STATUS(wm_llama_load(wmt_fixture("gguf/stories260K.gguf"), &p, &o, &m, &err), WM_OK);
    CHECK(st.bytes_own >= st.bytes_read && st.bytes_read > 0);
    llama_model_free(m);
    struct {
        wm_llama_options o;
        uint64_t later;
    } longer = {.o = WM_LLAMA_OPTIONS_INIT, .later = 1};
    longer.o.size = sizeof longer;
    CHECK_STATUS(wm_llama_load(wmt_fixture("gguf/stories260K.gguf"), NULL, &longer.o, &m, &err),
                 WM_EINVAL);
    CHECK_MSG_HAS(err, "sets a field past");
    CHECK_LEDGER_EMPTY();
}

/* The progress callback as llama.cpp's loader calls it, and a false from it cancels. */
static bool stop_at_half(float f, void *user) {
    *(float *)user = f;
    return f < 0.5f;
}

WM_TEST(progress_cancels) {
    setup();
    const char *path = wmt_make_model("m.gguf", "--size 8M");
    extras x;
    wm__llama_cpu_extras(&x);
    for (int mode = LLAMA_LOAD_MODE_NONE; mode <= LLAMA_LOAD_MODE_MMAP; mode++) {
        /* MMAP with the file warm: the repacked tensors come from the mapping, and the cancel
         * comes there (on a CPU whose ggml repacks nothing, nothing is read: no progress) */
        if (mode == LLAMA_LOAD_MODE_MMAP && !x.n) break;
        struct llama_model_params p = cpu_params();
        p.load_mode = (enum llama_load_mode)mode;
        float last = -1;
        p.progress_callback = stop_at_half;
        p.progress_callback_user_data = &last;
        wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
        o.threads = 1;
        wm_llama_stats s = WM_LLAMA_STATS_INIT;
        o.stats = &s;
        struct llama_model *m = NULL;
        wm_error err;
        wm__llama_test_early = 0; /* converted after the making: progress tensor by tensor */
        wm_status st = wm_llama_load(path, &p, &o, &m, &err);
        wm__llama_test_early = -1;
        CHECK_STATUS(st, WM_ECANCELED);
        CHECK(m == NULL);
        CHECK(last >= 0.5f && last < 1.0f);
        CHECK_EQ(wmt_count_file_maps(path), 0);
        CHECK_LEDGER_EMPTY();
    }
}

/* ---- weightmap check --llama ---- */

/* check --llama on each fixture: every load mode, each with its verdict ok (the mapped ones with
 * r--s regions while loaded, the others with none), "all memory returned"; the JSON names each
 * cycle's mode. */
WM_TEST(cli_check_llama_fixtures) {
    static const char *const files[] = {"stories260K.gguf", "stories260K-q4_0.gguf",
                                        "stories260K-q8_0.gguf", "stories260K-q4_k_m.gguf"};
    static const char *const rows[] = {"\nnone ", "\nmmap ", "\nmlock ", "\nmmap+mlock ", "\ndio "};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char args[1024], out[16384];
        char rel[64];
        snprintf(rel, sizeof rel, "gguf/%s", files[i]);
        snprintf(args, sizeof args, "check --llama '%s' --cycles 2", wmt_fixture(rel));
        int rc = wmt_cli(args, out, sizeof out);
        CHECK_MSG(rc == 0 && strstr(out, "all memory returned") && strstr(out, "' Once'") &&
                      strstr(out, "(AUTO is mmap here)") && !strstr(out, "LEAK"),
                  "check --llama %s: exit %d\n%s", files[i], rc, out);
        for (size_t k = 0; k < sizeof rows / sizeof *rows; k++)
            CHECK_MSG(strstr(out, rows[k]) != NULL, "no row of mode%s in\n%s", rows[k], out);
    }
    char out[4096];
    snprintf(out, sizeof out, "check --llama '%s' --json --cycles 1",
             wmt_fixture("gguf/stories260K.gguf"));
    char json[16384];
    CHECK_EQ(wmt_cli(out, json, sizeof json), 0);
    CHECK(strstr(json, "\"via\": \"llama\", \"auto\": \"mmap\", \"ok\": true") != NULL);
    CHECK(strstr(json, "{\"mode\": \"mmap+mlock\"") != NULL);
    CHECK_EQ(wmt_cli("check --llama --ggml x.gguf", out, sizeof out), 2);
}

/* ---- cold files ---- */

/* A cold model loads through the bridge with O_DIRECT (the reading engine's default, AUTO):
 * not one page of its tensor data comes into the page cache, the norms of 1 KiB included, and
 * the tokens are those of a warm load. First the file is made cold after it is opened (as in
 * test_cold.c), then before wm_llama_load opens it, as a runtime after a reboot finds it: the
 * open reads the header with no readahead past it (src/open/open.c), so that only the page
 * the header shares with the data is cached. Before that, the open's readahead and the
 * buffered reads of what it brought in kept each other going, and a model opened cold came
 * into the page cache whole (bench/RESULTS.md, llama). */
WM_TEST(cold_file_loads_direct) {
    setup();
    const char *path = wmt_make_model("m.gguf", "--size 8M");
    decoded warm, cold;
    wm_llama_stats s = WM_LLAMA_STATS_INIT;
    for (int repack = 0; repack < 2; repack++) {
        /* against a warm load of the same layout (repacked kernels may round otherwise) */
        by_bridge_repack(path, WM_LLAMA_UPLOAD_AUTO, WM_LLAMA_BUFFERS_AUTO,
                         repack ? WM_LLAMA_REPACK_AUTO : WM_LLAMA_REPACK_OFF, &s, &warm);
        wm_file *f = OPEN_OK(path);
        uint64_t size = wm_file_size(f), data = wm_file_data_offset(f);
        wmt_make_cold(path, 0, 0);
        struct llama_model_params p = cpu_params();
        wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
        o.threads = 2;
        o.repack = repack ? WM_LLAMA_REPACK_AUTO : WM_LLAMA_REPACK_OFF;
        o.prefault = repack ? WM_LLAMA_PREFAULT_AUTO : WM_LLAMA_PREFAULT_ON; /* both paths */
        struct llama_model *m = NULL;
        wm_error err;
        CHECK_MSG(wm_llama_load_file(f, &p, &o, &m, &err) == WM_OK, "%s", err.msg);
        wm_file_close(f);
        uint64_t cached = wmt_cached_bytes(path, data, size - data);
        CHECK_MSG(cached == 0, "%llu of %llu bytes of the cold model came into the page cache",
                  (unsigned long long)cached, (unsigned long long)(size - data));
        greedy(m, &cold);
        llama_model_free(m);
        same(&cold, &warm, "cold vs warm");
        free(cold.first);
        free(warm.first);
    }
    /* wm_llama_load opens the file itself and reads the start of its tensor data ahead, past the
     * page cache, while llama.cpp makes the model (prefetch: a quarter of it here); the read
     * copies those bytes and frees them, so the load leaves the cache cold (but for the page
     * the header shares with the data) and the ledger empty. */
    path = wmt_make_model("m64.gguf", "--size 64M");
    by_bridge(path, WM_LLAMA_UPLOAD_AUTO, WM_LLAMA_BUFFERS_AUTO, &s, &warm);
    s = (wm_llama_stats)WM_LLAMA_STATS_INIT;
    wm_file *f = OPEN_OK(path);
    uint64_t size = wm_file_size(f), data = wm_file_data_offset(f);
    wm_file_close(f);
    wmt_make_cold(path, 0, 0);
    struct llama_model_params p = cpu_params();
    wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
    o.threads = 2;
    o.stats = &s;
    struct llama_model *m = NULL;
    wm_error err;
    CHECK_MSG(wm_llama_load(path, &p, &o, &m, &err) == WM_OK, "%s", err.msg);
    CHECK(s.bytes_prefetched >= (size - data) / 4);
    uint64_t cached = wmt_cached_bytes(path, data, size - data);
    CHECK_MSG(cached <= (uint64_t)sysconf(_SC_PAGESIZE),
              "%llu of %llu bytes of the cold model stayed in the page cache after a load "
              "that prefetched %llu",
              (unsigned long long)cached, (unsigned long long)(size - data),
              (unsigned long long)s.bytes_prefetched);
    greedy(m, &cold);
    llama_model_free(m);
    same(&cold, &warm, "cold (prefetched) vs warm");
    free(cold.first);
    free(warm.first);
    CHECK_LEDGER_EMPTY();
}

/* The bridge's own buffers start where their tensors' places agree with the file offsets on the
 * 4 KiB grid (bridge/llama_own.c, "own buffers laid out as the file"), so that a direct read lands
 * in place. One start per buffer: llama.cpp orders a buffer's tensors its own way (here token_embd
 * and the output layer before the blocks, ffn_down before ffn_up), so where tensors of sizes off
 * the grid come between, not all of them can agree; the start is where the most bytes do, at
 * least the biggest tensor's. With repack off every tensor is in one plain CPU buffer of the
 * bridge's. Without the shift 1 tensor in 128 would agree, by chance. */
WM_TEST(own_buffers_laid_out_as_the_file) {
    setup();
    char *paths[] = {strdup(wmt_make_model("m.gguf", "--size 8M")),
                     strdup(wmt_fixture("gguf/stories260K.gguf")),
                     strdup(wmt_fixture("gguf/stories260K-q4_0.gguf")),
                     strdup(wmt_fixture("gguf/stories260K-q4_k_m.gguf"))};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        wm_file *f = OPEN_OK(paths[i]);
        uint64_t biggest = 0;
        for (size_t k = 0; k < wm_file_tensor_count(f); k++) {
            wm_tensor_info t;
            CHECK_STATUS(wm_file_tensor(f, k, &t), WM_OK);
            if (t.nbytes > biggest) biggest = t.nbytes;
        }
        wm_file_close(f);
        wm_llama_stats s = WM_LLAMA_STATS_INIT;
        decoded d;
        by_bridge_repack(paths[i], WM_LLAMA_UPLOAD_AUTO, WM_LLAMA_BUFFERS_AUTO, WM_LLAMA_REPACK_OFF,
                         &s, &d);
        free(d.first);
        if (s.bytes_own) /* else not this ggml's layout: llama.cpp's own buffers */
            CHECK_MSG(s.bytes_laid_out >= biggest && s.bytes_laid_out <= s.bytes_read,
                      "%s: %llu of the %llu bytes read lie as in the file (the biggest tensor "
                      "has %llu)",
                      paths[i], (unsigned long long)s.bytes_laid_out,
                      (unsigned long long)s.bytes_read, (unsigned long long)biggest);
        free(paths[i]);
    }
}

/* ---- GGUF split sets ---- */

/* A split set (make-model --shards 3) loads through the bridge from any of its parts
 * (wm_file_open_set), with the tokens and first logits of llama.cpp's own load of the set from
 * its first part; a part's own load as a file alone is what wm_llama_load_file of
 * wm_file_open(part) gives: that part's tensors only, which llama.cpp refuses as a model. */
WM_TEST(split_set_loads_from_any_part) {
    setup();
    wmt_make_model("m.gguf", "--size 12M --shards 3");
    char parts[3][4096];
    for (int i = 0; i < 3; i++)
        snprintf(parts[i], sizeof parts[i], "%s",
                 wmt_tmp(i == 0   ? "m-00001-of-00003.gguf"
                         : i == 1 ? "m-00002-of-00003.gguf"
                                  : "m-00003-of-00003.gguf"));
    decoded rd;
    by_llama(parts[0], 0, &rd);
    for (int i = 0; i < 3; i++) {
        decoded wm;
        wm_llama_stats s = WM_LLAMA_STATS_INIT;
        by_bridge(parts[i], WM_LLAMA_UPLOAD_AUTO, WM_LLAMA_BUFFERS_AUTO, &s, &wm);
        same(&wm, &rd, "split set through the bridge vs llama.cpp");
        for (int k = 0; k < 3; k++)
            CHECK_EQ(wmt_count_file_maps(parts[k]), 0);
        free(wm.first);
    }
    /* mapped (MMAP): every part mapped while loaded, the same tokens, nothing after the free */
    struct llama_model_params mp = cpu_params();
    mp.load_mode = LLAMA_LOAD_MODE_MMAP;
    struct llama_model *mm = NULL;
    wm_error merr;
    CHECK_MSG(wm_llama_load(parts[1], &mp, NULL, &mm, &merr) == WM_OK, "%s", merr.msg);
    for (int k = 0; k < 3; k++)
        CHECK(wmt_count_file_maps(parts[k]) >= 1);
    decoded md;
    greedy(mm, &md);
    llama_model_free(mm);
    same(&md, &rd, "split set mapped through the bridge vs llama.cpp");
    for (int k = 0; k < 3; k++)
        CHECK_EQ(wmt_count_file_maps(parts[k]), 0);
    free(md.first);
    free(rd.first);
    wm_file *f = OPEN_OK(parts[1]); /* that part alone */
    struct llama_model_params p = cpu_params();
    struct llama_model *m = NULL;
    wm_error err;
    CHECK(wm_llama_load_file(f, &p, NULL, &m, &err) != WM_OK);
    CHECK(m == NULL);
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
}

/* ---- the load modes (params.load_mode, wm_llama_options.load_mode) ---- */

static const int all_modes[] = {LLAMA_LOAD_MODE_NONE, LLAMA_LOAD_MODE_MMAP, LLAMA_LOAD_MODE_MLOCK,
                                LLAMA_LOAD_MODE_MMAP_MLOCK, LLAMA_LOAD_MODE_DIRECT_IO};
#define N_MODES (sizeof all_modes / sizeof *all_modes)

static bool maps_file(int mode) {
    return mode == LLAMA_LOAD_MODE_MMAP || mode == LLAMA_LOAD_MODE_MMAP_MLOCK;
}

/* A figure of /proc/self/status in kB (its line's format, "RssAnon: %llu kB"), bytes. */
static uint64_t status_bytes(const char *format) {
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f != NULL);
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, format, &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb << 10;
}

static uint64_t rss_anon(void) { return status_bytes("RssAnon: %llu kB"); }

typedef struct in_mode {
    decoded d;
    uint64_t anon;    /* RssAnon while loaded, over the process's before the load */
    int maps, not_rs; /* the file's regions while loaded, and those not r--s */
    uint64_t locked;  /* VmLck while loaded */
    wm_llama_stats s;
} in_mode;

/* One load of `path` in `mode`: by llama.cpp's own loader (bridge false) or through the bridge;
 * the figures while it is loaded, the tokens, then the free: no region of the file and (the
 * bridge) the ledger empty. In a child process of its own (forked from the case, which has
 * loaded before: ggml's CPU backend keeps no thread between contexts), so that the RssAnon it
 * adds is its own, not what the allocator kept of the loads before it. */
static void load_in_child(const char *path, int mode, bool bridge, in_mode *r, int fd) {
    struct llama_model_params p = cpu_params();
    p.load_mode = (enum llama_load_mode)mode;
    uint64_t before = rss_anon();
    struct llama_model *m = NULL;
    r->s = (wm_llama_stats)WM_LLAMA_STATS_INIT;
    if (bridge) {
        wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
        o.threads = 2;
        o.stats = &r->s;
        wm_error err;
        if (wm_llama_load(path, &p, &o, &m, &err) != WM_OK) _exit(3);
    } else if (!(m = llama_model_load_from_file(path, p))) {
        _exit(4);
    }
    uint64_t after = rss_anon();
    r->anon = after > before ? after - before : 0; /* malloc may give back more than it takes */
    r->locked = status_bytes("VmLck: %llu kB");
    r->maps = wmt_count_file_maps_of(path, &r->not_rs);
    keep_buffers(&r->d);
    greedy(m, &r->d);
    llama_model_free(m);
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    int bad = wmt_count_file_maps(path) != 0 || (bridge && wm_ledger_bytes(&l) != 0);
    if (write(fd, r, sizeof *r) != (ssize_t)sizeof *r ||
        write(fd, r->d.first, (size_t)r->d.n_vocab * sizeof(float)) < 0)
        _exit(5);
    _exit(bad ? 6 : 0);
}

static void load_in_mode(const char *path, int mode, bool bridge, in_mode *r) {
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        load_in_child(path, mode, bridge, r, pfd[1]);
    }
    close(pfd[1]);
    FILE *in = fdopen(pfd[0], "r");
    CHECK(in != NULL);
    bool got = fread(r, sizeof *r, 1, in) == 1;
    r->d.first = got ? malloc((size_t)r->d.n_vocab * sizeof(float)) : NULL;
    got = got && fread(r->d.first, sizeof(float), (size_t)r->d.n_vocab, in) == (size_t)r->d.n_vocab;
    fclose(in);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(got && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "%s, mode %d, %s: the child's status %#x (3: the bridge refused, 4: llama.cpp did, "
              "6: a region of the file or a ledger byte left after the free)",
              path, mode, bridge ? "bridge" : "llama.cpp", status);
    if (bridge) {
        CHECK_EQ(r->s.load_mode, mode);
        CHECK_EQ(r->s.load_mode_asked, mode);
    }
}

/* What the bridge may lock more than llama.cpp: a page at each end of each buffer and range. */
#define LOCK_SLACK ((uint64_t)64 << 10)

/* What the anonymous memory of a load through the bridge may exceed llama.cpp's own load in the
 * same mode by (RssAnon while loaded, over the process's before, each load in a fresh child): the
 * bridge's own buffers are whole pages (and a header page before each) where llama.cpp's are
 * malloc'd to the byte, and its load leaves a little more of its threads' and the library's
 * memory. Measured: the stories260K files 20-60 KiB above or below llama.cpp's in every mode, the
 * 32 MiB make-model file +340 KiB in the mapped modes, the 1.2 GiB bench model 1.7 MiB below
 * (bench/RESULTS.md, llama, "Load modes"). */
#define ANON_SLACK ((uint64_t)1 << 20)

/* Under AddressSanitizer RssAnon holds its shadow memory and freed blocks in its quarantine,
 * which are the order of the loads', not theirs: the bound is judged in the normal lane only. */
#if defined(__SANITIZE_ADDRESS__)
#define JUDGE_ANON 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define JUDGE_ANON 0
#endif
#endif
#ifndef JUDGE_ANON
#define JUDGE_ANON 1
#endif

/* Every mode, through the bridge and by llama.cpp's own load in the same mode: the same greedy
 * tokens and first logits; the file mapped r--s only in the mapped modes, and not at all in the
 * others; RssAnon within ANON_SLACK of llama.cpp's (in the mapped modes the weights are the
 * file's pages, not anonymous: the bridge's CPU buffer is never touched); nothing after the free.
 */
static void modes_equal(const char *path) {
    setup();
    for (size_t k = 0; k < N_MODES; k++) {
        int mode = all_modes[k];
        in_mode ll, wm;
        load_in_mode(path, mode, false, &ll);
        load_in_mode(path, mode, true, &wm);
        same(&wm.d, &ll.d, llama_load_mode_name((enum llama_load_mode)mode));
        if (maps_file(mode)) {
            CHECK_MSG(wm.maps >= 1 && wm.not_rs == 0, "%s: %d regions map the file, %d not r--s",
                      llama_load_mode_name((enum llama_load_mode)mode), wm.maps, wm.not_rs);
            CHECK(wm.s.mapped > 0 && wm.s.bytes_mapped > 0);
            CHECK_EQ(wm.s.tensors, wm.s.in_place + wm.s.windowed + wm.s.filled + wm.s.mapped);
        } else {
            CHECK_EQ(wm.maps, 0);
            CHECK_EQ(wm.s.mapped, 0);
        }
        if (mode == LLAMA_LOAD_MODE_MLOCK || mode == LLAMA_LOAD_MODE_MMAP_MLOCK)
            CHECK(wm.s.bytes_locked > 0 || wm.s.lock_short);
        /* locked what llama.cpp locks, no more: its host buffers (not the repacked ones, whose
         * types are not host: 1.8.3 locked those too), and of the mapping the tensors used from
         * it (llama.cpp locks the mapping from its start to the last of those, repacked ranges
         * between included), each rounded to pages */
        if (!wm.s.lock_short)
            CHECK_MSG(wm.locked <= ll.locked + LOCK_SLACK,
                      "%s: %llu KiB locked through the bridge, %llu KiB by llama.cpp",
                      llama_load_mode_name((enum llama_load_mode)mode),
                      (unsigned long long)(wm.locked >> 10), (unsigned long long)(ll.locked >> 10));
        CHECK_MSG(!JUDGE_ANON || wm.anon <= ll.anon + ANON_SLACK,
                  "%s: RssAnon +%llu KiB while loaded through the bridge, +%llu KiB by llama.cpp",
                  llama_load_mode_name((enum llama_load_mode)mode),
                  (unsigned long long)(wm.anon >> 10), (unsigned long long)(ll.anon >> 10));
        fprintf(stderr,
                "%-10s RssAnon +%6llu KiB (llama.cpp +%6llu KiB); regions %d (llama.cpp %d); "
                "%zu mapped, %llu bytes read, %llu locked%s; VmLck %llu KiB (llama.cpp %llu)\n",
                llama_load_mode_name((enum llama_load_mode)mode),
                (unsigned long long)(wm.anon >> 10), (unsigned long long)(ll.anon >> 10), wm.maps,
                ll.maps, wm.s.mapped, (unsigned long long)wm.s.bytes_read,
                (unsigned long long)wm.s.bytes_locked, wm.s.lock_short ? " (lock short)" : "",
                (unsigned long long)(wm.locked >> 10), (unsigned long long)(ll.locked >> 10));
        free(ll.d.first), free(wm.d.first);
    }
}

WM_TEST(modes_equal_f32) { modes_equal(wmt_fixture("gguf/stories260K.gguf")); }
WM_TEST(modes_equal_q4_0) { modes_equal(wmt_fixture("gguf/stories260K-q4_0.gguf")); }
WM_TEST(modes_equal_q8_0) { modes_equal(wmt_fixture("gguf/stories260K-q8_0.gguf")); }
WM_TEST(modes_equal_q4_k_m) { modes_equal(wmt_fixture("gguf/stories260K-q4_k_m.gguf")); }
WM_TEST(modes_equal_make_model) { modes_equal(wmt_make_model("m.gguf", "--size 32M")); }

/* AUTO (llama_model_default_params'): on this CPU-only host llama.cpp resolves it to MMAP, and so
 * does the bridge; where the bridge cannot map (buffers LLAMA) AUTO reads instead and says so
 * (stats and a line in llama.cpp's log), while an explicit MMAP is refused before llama.cpp is
 * called, naming the mode, holding nothing. The options' load_mode chooses over params'. */
WM_TEST(auto_resolves_as_llama_cpp) {
    setup();
    const char *path = wmt_fixture("gguf/stories260K-q8_0.gguf");
    struct llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = 0;
    wm_llama_stats s = WM_LLAMA_STATS_INIT;
    wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
    o.stats = &s;
    struct llama_model *m = NULL;
    wm_error err;
    CHECK_STATUS(wm_llama_load(path, &p, &o, &m, &err), WM_OK);
    CHECK_EQ(s.load_mode_asked, LLAMA_LOAD_MODE_AUTO);
    CHECK_EQ(s.load_mode, LLAMA_LOAD_MODE_MMAP);
    CHECK_EQ(s.load_mode_fell_back, 0);
    CHECK(wmt_count_file_maps(path) >= 1);
    llama_model_free(m);
    CHECK_EQ(wmt_count_file_maps(path), 0);
    CHECK_LEDGER_EMPTY();
    o.buffers = WM_LLAMA_BUFFERS_LLAMA; /* AUTO cannot map: it reads, and says so */
    s = (wm_llama_stats)WM_LLAMA_STATS_INIT;
    reset_log();
    CHECK_STATUS(wm_llama_load(path, &p, &o, &m, &err), WM_OK);
    CHECK_EQ(s.load_mode, LLAMA_LOAD_MODE_NONE);
    CHECK_EQ(s.load_mode_fell_back, 1);
    CHECK_EQ(wmt_count_file_maps(path), 0);
    llama_model_free(m);
    o.load_mode = WM_LLAMA_LOAD_MMAP; /* chosen: refused before llama.cpp */
    reset_log();
    m = (struct llama_model *)(uintptr_t)1;
    CHECK_STATUS(wm_llama_load(path, &p, &o, &m, &err), WM_EUNSUPPORTED);
    CHECK(m == NULL);
    CHECK_MSG_HAS(err, "load_mode MMAP");
    CHECK_EQ(atomic_load(&log_lines), 0);
    CHECK_EQ(wmt_count_file_maps(path), 0);
    CHECK_LEDGER_EMPTY();
    o.buffers = WM_LLAMA_BUFFERS_AUTO;
    o.load_mode = WM_LLAMA_LOAD_NONE; /* the options over params' AUTO */
    s = (wm_llama_stats)WM_LLAMA_STATS_INIT;
    CHECK_STATUS(wm_llama_load(path, &p, &o, &m, &err), WM_OK);
    CHECK_EQ(s.load_mode, LLAMA_LOAD_MODE_NONE);
    CHECK_EQ(s.load_mode_asked, LLAMA_LOAD_MODE_NONE);
    CHECK_EQ(wmt_count_file_maps(path), 0);
    llama_model_free(m);
    CHECK_LEDGER_EMPTY();
}

/* Bad input in the mapped modes, refused before llama.cpp is called (it logs nothing), holding
 * nothing: a load_mode out of range (params' or the options'), a file that changed size between
 * its open and the mapping (longer, then shorter). */
WM_TEST(mapped_bad_input_refused_before_llama) {
    setup();
    const char *path = wmt_tmp("m.gguf");
    wmt_copy_file(wmt_fixture("gguf/stories260K-q8_0.gguf"), path);
    struct llama_model_params p = cpu_params();
    struct llama_model *m = (struct llama_model *)(uintptr_t)1;
    wm_error err;
    p.load_mode = (enum llama_load_mode)7;
    reset_log();
    CHECK_STATUS(wm_llama_load(path, &p, NULL, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "load_mode 7");
    p.load_mode = (enum llama_load_mode) - 2;
    CHECK_STATUS(wm_llama_load(path, &p, NULL, &m, &err), WM_EINVAL);
    wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
    o.load_mode = (wm_llama_load_mode)9;
    p.load_mode = LLAMA_LOAD_MODE_MMAP;
    CHECK_STATUS(wm_llama_load(path, &p, &o, &m, &err), WM_EINVAL);
    CHECK_MSG_HAS(err, "load_mode 9");
    CHECK(m == NULL);
    for (int grow = 1; grow >= 0; grow--) {
        wm_file *f = OPEN_OK(path);
        struct stat st;
        CHECK(stat(path, &st) == 0);
        CHECK(truncate(path, grow ? st.st_size + 4096 : st.st_size - 4096) == 0);
        CHECK_STATUS(wm_llama_load_file(f, &p, NULL, &m, &err), WM_EFORMAT);
        CHECK_MSG_HAS(err, "changed size");
        CHECK(m == NULL);
        wm_file_close(f);
        CHECK(truncate(path, st.st_size) == 0);
    }
    CHECK_EQ(atomic_load(&log_lines), 0);
    CHECK_EQ(wmt_count_file_maps(path), 0);
    CHECK_LEDGER_EMPTY();
}

/* The mapping refused (mmap failing with ENODEV, a file system without mmap, and with ENOMEM:
 * the library's fault table): the mapped load fails before llama.cpp is called (it logs
 * nothing), naming the file, nothing held. */
WM_TEST(mapped_map_refused_before_llama) {
    setup();
    const char *path = wmt_fixture("gguf/stories260K-q8_0.gguf");
    static const int errs[] = {ENODEV, ENOMEM};
    for (int k = 0; k < 2; k++) {
        struct llama_model_params p = cpu_params();
        p.load_mode = LLAMA_LOAD_MODE_MMAP;
        struct llama_model *m = (struct llama_model *)(uintptr_t)1;
        wm_error err = {0};
        reset_log();
        wm__fault_arm(WM_OS_MAP, 1, errs[k]);
        wm_status st = wm_llama_load(path, &p, NULL, &m, &err);
        wm__fault_reset();
        CHECK(st == WM_EIO || st == WM_ENOMEM || st == WM_EUNSUPPORTED);
        CHECK(m == NULL);
        CHECK_MSG_HAS(err, "stories260K-q8_0.gguf");
        CHECK_EQ(atomic_load(&log_lines), 0);
        CHECK_EQ(wmt_count_file_maps(path), 0);
        CHECK_LEDGER_EMPTY();
        fprintf(stderr, "refused (%s): %s\n", strerror(errs[k]), err.msg);
    }
}

/* 20 load/free cycles in every mode (a decode in the first of each): a mapping of the file while
 * loaded in the mapped modes only, none after each free, and the ledger back to empty. */
WM_TEST(mode_cycles_leave_nothing) {
    setup();
    const char *path = wmt_fixture("gguf/stories260K-q4_0.gguf");
    for (size_t k = 0; k < N_MODES; k++)
        for (int c = 0; c < 20; c++) {
            struct llama_model_params p = cpu_params();
            p.load_mode = (enum llama_load_mode)all_modes[k];
            struct llama_model *m = NULL;
            wm_error err;
            CHECK_MSG(wm_llama_load(path, &p, NULL, &m, &err) == WM_OK, "mode %d, cycle %d: %s",
                      all_modes[k], c, err.msg);
            CHECK_EQ(wmt_count_file_maps(path) >= 1, maps_file(all_modes[k]));
            if (c == 0) {
                decoded d;
                greedy(m, &d);
                free(d.first);
            }
            llama_model_free(m);
            CHECK_EQ(wmt_count_file_maps(path), 0);
            CHECK_LEDGER_EMPTY();
        }
}

/* Every call of the mapped load failed in turn (the mapping's open, stat and map, the populate's
 * advice and threads, the locks, the bridge's allocations): a failure holds nothing (the sweep
 * checks the ledger and the file's regions after each run); a lock refused is not a failure.
 * Cold: the file dropped from the page cache before each run, so that the populate brings the
 * repacked tensors' pages too and their conversions wait for them (1.8.5). */
static void sweep_mapped(int mode, bool cold) {
    setup();
    const char *path = wmt_fixture("gguf/stories260K-q4_0.gguf");
    sweep_run run = {.f = OPEN_OK(path), .o = WM_LLAMA_OPTIONS_INIT, .cold = cold};
    run.o.threads = 2;
    run.o.load_mode = (wm_llama_load_mode)(mode + 2);
    wmt_sweep s = {.what = "wm_llama_load_file (mapped)",
                   .run = sweep_once,
                   .check = wmt_check_io_failure,
                   .user = &run,
                   .path = path,
                   .shown = "stories260K-q4_0.gguf",
                   .cycle = 1,
                   .real_cache = cold}; /* (cold: each run drops the file; the bridge's count of
                                           the page cache is the kernel's, which a pin would
                                           answer "all cached") */
    static const int errs[] = {EIO, ENOMEM};
    wmt_sweep_result res = {0};
    wm__llama_test_early = 1; /* every repacked tensor converted early: its calls every run */
    wmt_sweep_any(&s, errs, 2, &res);
    wm__llama_test_early = -1;
    CHECK(res.counts[WM_OS_MAP] >= 1 && res.counts[WM_OS_ADVISE] >= 1);
    if (mode == LLAMA_LOAD_MODE_MMAP_MLOCK) CHECK(res.counts[WM_OS_LOCK] >= 1);
    CHECK(res.failed > 0);
    fprintf(
        stderr, "%llu calls (%llu map, %llu advise, %llu lock), %llu faulted runs, %llu failed\n",
        (unsigned long long)res.counts[WM_OS_ANY], (unsigned long long)res.counts[WM_OS_MAP],
        (unsigned long long)res.counts[WM_OS_ADVISE], (unsigned long long)res.counts[WM_OS_LOCK],
        (unsigned long long)res.runs, (unsigned long long)res.failed);
    wm_file_close(run.f);
}

WM_TEST(fault_sweep_mmap) { sweep_mapped(LLAMA_LOAD_MODE_MMAP, false); }
WM_TEST(fault_sweep_mmap_cold) { sweep_mapped(LLAMA_LOAD_MODE_MMAP, true); }
WM_TEST(fault_sweep_mmap_mlock) { sweep_mapped(LLAMA_LOAD_MODE_MMAP_MLOCK, false); }

/* MLOCK and MMAP_MLOCK over RLIMIT_MEMLOCK: as llama.cpp, a warning in llama.cpp's log ("failed
 * to mlock") and the load goes on; the stats say it. The soft limit is lowered to 0 for the case
 * and, where that does not refuse (root: CAP_IPC_LOCK), mlock is failed with ENOMEM (the
 * library's fault table, which the bridge's test build asks before each lock) from its first
 * call on. */
WM_TEST(mlock_over_the_limit_warns_and_goes_on) {
    setup();
    const char *path = wmt_fixture("gguf/stories260K-q8_0.gguf");
    struct rlimit was;
    CHECK(getrlimit(RLIMIT_MEMLOCK, &was) == 0);
    struct rlimit none = {0, was.rlim_max};
    CHECK(setrlimit(RLIMIT_MEMLOCK, &none) == 0);
    for (int k = 0; k < 2; k++) {
        struct llama_model_params p = cpu_params();
        p.load_mode = k ? LLAMA_LOAD_MODE_MMAP_MLOCK : LLAMA_LOAD_MODE_MLOCK;
        wm_llama_stats s = WM_LLAMA_STATS_INIT;
        wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
        o.stats = &s;
        struct llama_model *m = NULL;
        wm_error err;
        if (geteuid() == 0) wm__fault_arm_sticky(WM_OS_LOCK, 1, ENOMEM);
        reset_log();
        CHECK_STATUS(wm_llama_load(path, &p, &o, &m, &err), WM_OK);
        wm__fault_reset();
        CHECK_EQ(s.lock_short, 1);
        CHECK_EQ(s.bytes_locked, 0);
        CHECK_EQ(atomic_load(&mlock_warnings), 1); /* once, as llama.cpp */
        llama_model_free(m);
    }
    CHECK(setrlimit(RLIMIT_MEMLOCK, &was) == 0);
    CHECK_LEDGER_EMPTY();
}

/* A mapped file changed under a loaded model. Replaced (a new file renamed over its path): the
 * mapping keeps the old file's pages, and decoding gives the same tokens. Cut short: the pages
 * past the new end are gone; the load populated them, but the kernel drops them with the
 * truncation, and the next read of one is a SIGBUS, as in llama.cpp's own mmap mode (weightmap
 * cannot catch it in llama.cpp's kernels): a child process decodes after the cut and is killed
 * by SIGBUS (or, under AddressSanitizer, reports it and exits non-zero). */
WM_TEST(mapped_file_replaced_or_cut_while_loaded) {
    setup();
    const char *src = wmt_fixture("gguf/stories260K-q8_0.gguf");
    const char *path = wmt_tmp("m.gguf"), *other = wmt_tmp("other.gguf");
    wmt_copy_file(src, path);
    decoded before, after;
    struct llama_model_params p = cpu_params();
    p.load_mode = LLAMA_LOAD_MODE_MMAP;
    struct llama_model *m = NULL;
    wm_error err;
    CHECK_STATUS(wm_llama_load(path, &p, NULL, &m, &err), WM_OK);
    greedy(m, &before);
    wmt_copy_file(wmt_fixture("gguf/stories260K.gguf"), other);
    CHECK(rename(other, path) == 0);
    greedy(m, &after);
    same(&after, &before, "decoding after the file was replaced");
    llama_model_free(m);
    free(before.first), free(after.first);
    CHECK_LEDGER_EMPTY();
    wmt_copy_file(src, path);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        struct llama_model *c = NULL;
        if (wm_llama_load(path, &p, NULL, &c, &err) != WM_OK) _exit(3);
        if (truncate(path, 4096) != 0) _exit(4);
        decoded d;
        greedy(c, &d); /* SIGBUS here */
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG((WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS) ||
                  (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3 &&
                   WEXITSTATUS(status) != 4),
              "the child decoding after the cut: status %#x", status);
}

/* ---- the mapped modes with layers on a GPU ----
 * llama.cpp's mmap mode with layers on a GPU maps the tensors it keeps in the CPU's own buffer
 * type (the input layer's and the layers below max(block_count + 1 - n_gpu_layers, 0); the GPU's
 * pinned host type it replaces with the CPU's) and fills the device buffers. The bridge predicts
 * that split before llama.cpp is called (its overrides send exactly those tensors to its own CPU
 * type, and its populate covers exactly their ranges): the prediction is tested here against
 * regcomp, and the path itself on this CPU-only host by the bridge's wm__llama_test_cpu_layers,
 * which has a CPU load place its tensors as with layers on a GPU (the layers from it on would be
 * the device's: here llama.cpp keeps them in a CPU buffer too, so they are mapped as well). */

/* The bridge's own (bridge/llama_bridge.h), from its static library. */
bool wm__llama_host_tensor(const char *name, int cpu_layers);
size_t wm__llama_below_pattern(unsigned k, char *out);
int wm__llama_cpu_layers(const wm_file *f, const struct llama_model_params *p);
extern int wm__llama_test_cpu_layers;

/* The pattern of the layers below k matches exactly the layer numbers below k (as POSIX extended
 * regular expressions read it, which the pattern's subset shares with std::regex), and
 * wm__llama_host_tensor says the same of each name; the input layer is kept, other names not. */
WM_TEST(cpu_layers_pattern_names_exactly_those_below) {
    static const unsigned ks[] = {1, 2, 9, 10, 11, 26, 99, 100, 101, 137, 1000, 4321};
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        char pat[512] = "^blk\\.(", *at = pat + strlen(pat);
        size_t n = wm__llama_below_pattern(ks[i], at);
        CHECK(n > 0 && n < 200);
        strcpy(at + n, ")\\.");
        regex_t re;
        CHECK_MSG(regcomp(&re, pat, REG_EXTENDED | REG_NOSUB) == 0, "%s", pat);
        for (unsigned layer = 0; layer < ks[i] + 1200; layer++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%u.attn_q.weight", layer);
            bool matched = regexec(&re, name, 0, NULL, 0) == 0;
            CHECK_MSG(matched == (layer < ks[i]), "k %u: '%s' against %s", ks[i], name, pat);
            CHECK_EQ(wm__llama_host_tensor(name, (int)ks[i]), layer < ks[i]);
            snprintf(name, sizeof name, "blk.0%u.ffn_up.weight", layer);
            CHECK(!wm__llama_host_tensor(name, (int)ks[i])); /* not how llama.cpp names them */
            CHECK(regexec(&re, name, 0, NULL, 0) != 0);
        }
        regfree(&re);
    }
    CHECK(wm__llama_host_tensor("token_embd.weight", 0));
    CHECK(wm__llama_host_tensor("position_embd.weight", 0));
    CHECK(!wm__llama_host_tensor("token_embd_norm.weight", 5));
    CHECK(!wm__llama_host_tensor("output.weight", 5));
    CHECK(!wm__llama_host_tensor("output_norm.weight", 5));
    CHECK(!wm__llama_host_tensor("rope_freqs.weight", 5));
    CHECK(!wm__llama_host_tensor("blk.x.attn_q.weight", 5));
    /* llama.cpp's rule: stories260K has 5 blocks */
    wm_file *f = OPEN_OK(wmt_fixture("gguf/stories260K.gguf"));
    struct llama_model_params p = llama_model_default_params();
    static const int ngl[] = {-1, 999, 6, 5, 1, 0}, want[] = {0, 0, 0, 1, 5, 6};
    for (size_t k = 0; k < sizeof ngl / sizeof *ngl; k++) {
        p.n_gpu_layers = ngl[k];
        CHECK_EQ(wm__llama_cpu_layers(f, &p), want[k]);
    }
    wm_file_close(f);
}

/* Resident bytes of this process's regions that map `path` (/proc/self/smaps: the pages its
 * page tables map, which a populate maps and nothing else of the load touches). */
static uint64_t file_rss(const char *path) {
    char real[4096], line[4096];
    CHECK(realpath(path, real) != NULL);
    FILE *f = fopen("/proc/self/smaps", "r");
    CHECK(f != NULL);
    uint64_t bytes = 0;
    bool in = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        size_t n = strlen(line), m = strlen(real);
        if (n && line[n - 1] == '\n') line[--n] = 0;
        if (strchr(line, '-') && strchr(line, '-') < strchr(line, ' ') && strchr(line, ' '))
            in = n >= m && strcmp(line + n - m, real) == 0;
        else if (in && sscanf(line, "Rss: %llu kB", &kb) == 1)
            bytes += (uint64_t)kb << 10;
    }
    fclose(f);
    return bytes;
}

/* The GPU path's placement on the CPU: for 0, 1 and 3 layers kept on the CPU, with and without a
 * caller's override to ggml's CPU type. llama.cpp makes one context per buffer type's name
 * (llama-model-loader.h ctx_key_comparator), allocated by the type of its first tensor: the
 * bridge's own CPU type has the CPU's name, so once the input layer's token_embd goes to it every
 * tensor llama.cpp keeps in a "CPU" buffer is there, and mapped, as in llama.cpp's mmap mode
 * (here all of them: this host has no GPU to offload to). Those the prediction did not name
 * (layers from cpu_layers on, the output layer, the overridden) are brought in by the second
 * populate: the mapping's resident pages cover every mapped byte before the first decode. The
 * same greedy tokens and first logits as llama.cpp's own mmap load (extra buffer types off on
 * both sides: the GPU path never repacks, as llama.cpp does not with a GPU's host type first
 * among the CPU's types); the file mapped r--s only while loaded, nothing of it or of the ledger
 * after the free. */
static void mapped_beside_gpu(const char *path) {
    setup();
    struct llama_model_params p = cpu_params();
    p.load_mode = LLAMA_LOAD_MODE_MMAP;
    p.use_extra_bufts = false;
    decoded ref;
    struct llama_model *m = llama_model_load_from_file(path, p);
    CHECK(m != NULL);
    greedy(m, &ref);
    llama_model_free(m);
    static const struct llama_model_tensor_buft_override none[] = {{NULL, NULL}};
    struct llama_model_tensor_buft_override down[] = {{"ffn_down", NULL}, {NULL, NULL}};
    down[0].buft = ggml_backend_cpu_buffer_type();
    static const int ks[] = {0, 1, 3};
    for (size_t k = 0; k < 3; k++)
        for (int with = 0; with < 2; with++) {
            wm_llama_stats s = WM_LLAMA_STATS_INIT;
            wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
            o.stats = &s;
            o.threads = 2;
            p.tensor_buft_overrides = with ? down : none;
            wm_error err;
            wm__llama_test_cpu_layers = ks[k];
            wm_status st = wm_llama_load(path, &p, &o, &m, &err);
            wm__llama_test_cpu_layers = -1;
            CHECK_MSG(st == WM_OK, "%s", err.msg);
            int not_rs = -1;
            CHECK(wmt_count_file_maps_of(path, &not_rs) >= 1);
            CHECK_EQ(not_rs, 0);
            uint64_t rss = file_rss(path);
            fprintf(stderr,
                    "%d layers kept%s: %zu of %zu tensors mapped (%llu bytes), %zu read; the "
                    "mapping's resident bytes %llu\n",
                    ks[k], with ? ", ffn_down to the CPU" : "", s.mapped, s.tensors,
                    (unsigned long long)s.bytes_mapped, s.in_place, (unsigned long long)rss);
            CHECK_EQ(s.cpu_layers, ks[k]);
            CHECK_EQ(s.load_mode, LLAMA_LOAD_MODE_MMAP);
            CHECK_EQ(s.tensors, s.mapped + s.filled);
            CHECK(rss >= s.bytes_mapped);
            CHECK_EQ(s.repacked, 0);
            same_then_freed(m, &ref,
                            "mapped beside a GPU's layers (on the CPU) against llama.cpp's mmap",
                            path);
        }
    free(ref.first);
}

/* The mmap mode on the CPU with its weights repacked (the CPU's extra buffer types): the populate
 * maps only the tensors that stay mapped, never the repacked ones' pages, which are read as in
 * the read modes or converted from the mapping and unmapped again. The bound: the mapped
 * tensors' ranges on whole pages, merged. A fault (and a populate) maps the page cache's pages
 * around it too, up to fault_around_bytes (64 KiB by default), into the repacked neighbours'
 * ranges: the load unmaps those once it is done (bridge/llama_map.c wm__llama_map_keep_only;
 * without it, 1.8.3, 0.9-1.2 MiB of a 64 MiB model stayed mapped over this bound). (A huge folio
 * the kernel maps whole would need 2 MiB; neither this VM nor the GPU host maps the file's folios
 * by PMD: FilePmdMapped stays 0.)
 * The tensors that stay mapped are those no extra buffer type takes (llama_place.c's rule, the
 * same the bridge uses to place them), checked against what llama.cpp did: as many repacked as
 * the rule names. On a CPU whose ggml repacks nothing the bound is the whole file and the test
 * says so. 1.8.1 populated the whole mapping on the CPU (on the GPU host's CPU, 836 of 1086 MiB
 * mapped in for nothing): the mapping's resident bytes were the file's, over the bound. */
static void mapped_repacked_not_populated(const char *path) {
    setup();
    struct llama_model_params p = cpu_params();
    p.load_mode = LLAMA_LOAD_MODE_MMAP;
    wm_llama_stats s = WM_LLAMA_STATS_INIT;
    wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
    o.stats = &s;
    wm_error err;
    struct llama_model *m = NULL;
    wm_status st = wm_llama_load(path, &p, &o, &m, &err);
    CHECK_MSG(st == WM_OK, "%s", err.msg);
    uint64_t rss = file_rss(path);
    wm_file *f = NULL;
    CHECK_EQ(wm_file_open(path, &f, NULL), WM_OK);
    extras x;
    wm__llama_cpu_extras(&x);
    const uint64_t around = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t bound = 0, end = 0, file = 0;
    size_t repacked = 0;
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) { /* in file order */
        wm_tensor_info ti;
        CHECK_EQ(wm_file_tensor(f, i, &ti), WM_OK);
        file = ti.offset + ti.nbytes > file ? ti.offset + ti.nbytes : file;
        if (wm__llama_extra_for(&x, f, i, ti.name) >= 0) {
            repacked++;
            continue;
        }
        uint64_t lo = ti.offset / around * around;
        uint64_t hi = (ti.offset + ti.nbytes + around - 1) / around * around;
        if (lo < end) lo = end;
        if (hi > lo) bound += hi - lo, end = hi;
    }
    wm_file_close(f);
    fprintf(stderr,
            "%s: %zu tensors repacked (%zu by the rule), %zu mapped (%llu bytes); the mapping's "
            "resident bytes %llu, at most %llu (the file's data %llu)%s\n",
            path, s.repacked, repacked, s.mapped, (unsigned long long)s.bytes_mapped,
            (unsigned long long)rss, (unsigned long long)bound, (unsigned long long)file,
            bound >= file ? ": nothing repacked here, nothing to tell apart" : "");
    CHECK_EQ(s.load_mode, LLAMA_LOAD_MODE_MMAP);
    CHECK_EQ(s.repacked, repacked);
    CHECK(rss >= s.bytes_mapped); /* every mapped byte in before the first decode */
    CHECK_MSG(rss <= bound,
              "the mapping has %llu bytes resident, over the %llu of the ranges of "
              "the tensors that stay mapped: the repacked ones' pages were mapped in",
              (unsigned long long)rss, (unsigned long long)bound);
    llama_model_free(m);
    CHECK_EQ(wmt_count_file_maps(path), 0);
    CHECK_LEDGER_EMPTY();
}

WM_TEST(mapped_repacked_not_populated_q4_0) {
    mapped_repacked_not_populated(wmt_fixture("gguf/stories260K-q4_0.gguf"));
}
WM_TEST(mapped_repacked_not_populated_make_model) {
    mapped_repacked_not_populated(wmt_make_model("m.gguf", "--size 64M"));
}

static bool keep_progress(float f, void *user) {
    *(float *)user = f;
    return true;
}

/* wm_llama_load of path in the MMAP mode on the CPU, two threads, the stats in *s; with last, the
 * progress callback keeps its last value there. */
static wm_status load_mmap(const char *path, float *last, wm_llama_stats *s, struct llama_model **m,
                           wm_error *err) {
    struct llama_model_params p = cpu_params();
    p.load_mode = LLAMA_LOAD_MODE_MMAP;
    if (last) p.progress_callback = keep_progress, p.progress_callback_user_data = last;
    wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
    o.stats = s;
    o.threads = 2;
    return wm_llama_load(path, &p, &o, m, err);
}

/* The mmap mode's repacked tensors are converted straight from the mapping (bridge/llama_map.c,
 * "repacked from the mapping"): warm, every one, nothing read; cold, every one too, their pages
 * brought in by the populate after the mapped tensors' and the conversions waiting for them
 * (bridge/llama.c, start_populate), nothing read past the page cache; with the first half of the
 * file's data cached, every one where the mapped tensors' sample found them cold, else those
 * whose bytes are cached and the others read (direct I/O), decided tensor by tensor: together
 * every repacked byte. Each time the same greedy tokens and first logits as llama.cpp's own mmap
 * load, the file mapped r--s only, and nothing of it or of the ledger after the free. Without
 * the conversion from the mapping the warm load reads every repacked byte; without the repacked
 * ranges in the cold populate (1.8.4) the cold one reads them, with direct I/O after the making,
 * as a cold load still does where the system has no room for their page cache beside their
 * copies (wm__llama_test_room 0: most read, none brought in for them). The conversions' wait for
 * pages the populate has not yet brought is converted_early's to show (here the populate wins that
 * race). (stories260K's tensors are smaller than a page: the pages of the mapped ones bring in most
 * of the repacked ones' too. There only the sums are checked: pages_apart false.) */
static void repacked_from_the_mapping(const char *path, bool pages_apart) {
    setup();
    size_t size_read = 0;
    free(wmt_read_file(path, &size_read)); /* warm (every byte read through the page cache) */
    decoded ref;
    by_llama(path, LLAMA_LOAD_MODE_MMAP, &ref);
    wm_file *f = OPEN_OK(path);
    uint64_t data = wm_file_data_offset(f), size = wm_file_size(f);
    wm_file_close(f);
    uint64_t all = 0;
    /* all of it, the first half, none; then none where the system has no room (-1) */
    for (int cached = 2; cached >= -1; cached--) {
        if (cached < 2) wmt_make_cold(path, data, cached > 0 ? (size - data) / 2 : 0);
        wm_llama_stats s = WM_LLAMA_STATS_INIT;
        struct llama_model *m = NULL;
        wm_error err;
        if (cached < 0) wm__llama_test_room = 0;
        wm_status st = load_mmap(path, NULL, &s, &m, &err);
        wm__llama_test_room = -1;
        CHECK_MSG(st == WM_OK, "%s", err.msg);
        fprintf(stderr,
                "%s cached: %zu repacked, %zu of them (%llu bytes) from the mapping, %llu bytes "
                "read\n",
                cached == 2   ? "all"
                : cached == 1 ? "half"
                : cached == 0 ? "none"
                              : "none, no room,",
                s.repacked, s.repacked_mapped, (unsigned long long)s.bytes_repacked_mapped,
                (unsigned long long)s.bytes_read);
        if (!s.repacked) {
            fprintf(stderr, "(this CPU's ggml repacks nothing of %s: nothing to tell)\n", path);
            llama_model_free(m);
            break;
        }
        int not_rs = -1;
        CHECK(wmt_count_file_maps_of(path, &not_rs) >= 1);
        CHECK_EQ(not_rs, 0);
        /* the mapped tensors' bytes that the populate found cached (page-rounded spans) */
        if (cached == 2) CHECK(s.bytes_mapped_cached >= s.bytes_mapped);
        if (pages_apart && cached <= 0) CHECK(s.bytes_mapped_cached * 4 < s.bytes_mapped);
        if (cached == 2) {
            all = s.bytes_repacked_mapped;
            CHECK_EQ(s.repacked_mapped, s.repacked);
            CHECK_EQ(s.bytes_read, 0); /* on the CPU every tensor is mapped or repacked */
        } else {
            CHECK_EQ(s.bytes_repacked_mapped + s.bytes_read, all);
            bool every = s.repacked_mapped == s.repacked && s.bytes_read == 0;
            if (pages_apart && !cached)
                CHECK_MSG(every, "cold: %zu of %zu repacked from the mapping, %llu bytes read",
                          s.repacked_mapped, s.repacked, (unsigned long long)s.bytes_read);
            /* no room for their page cache: not brought in, read past it (those the mapped
             * tensors' faults read around into excepted: the kernel's async readahead) */
            if (pages_apart && cached < 0)
                CHECK_MSG(s.repacked_mapped * 2 < s.repacked && s.bytes_read > 0,
                          "no room: %zu of %zu repacked from the mapping, %llu bytes read",
                          s.repacked_mapped, s.repacked, (unsigned long long)s.bytes_read);
            /* half: every one (the sample found the mapped tensors cold), or some of each */
            if (pages_apart && cached > 0 && !every)
                CHECK(s.repacked_mapped > 0 && s.repacked_mapped < s.repacked);
            if (cached > 0 && every)
                fprintf(stderr, "half cached: the populate brought the rest\n");
        }
        same_then_freed(m, &ref, "repacked from the mapping against llama.cpp's mmap", path);
    }
    free(ref.first);
}

/* The metadata llama.cpp makes the model from (bridge/llama_meta.c) is copied through one
 * scratch mapping, the size of the largest entry, not one an entry: in the mapped modes each
 * mapping waited for the populate (which holds the address space's lock a piece at a time), 15-20
 * ms on the GPU host before llama.cpp could begin. Counted by the fault table's allocations
 * (wm__llama_pages asks it first): one, where one an entry made six of the make-model file (three
 * strings, three arrays: tokens, scores, types). Every entry arrives with its value: the
 * tokens, the scores and a string compared with the file's. */
WM_TEST(metadata_copied_through_one_scratch) {
    setup();
    const char *path = wmt_make_model("m.gguf", "--size 16M");
    wm_file *f = OPEN_OK(path);
    struct gguf_context *g = NULL;
    wm_error err;
    wm__fault_reset();
    CHECK_MSG(wm__llama_metadata(f, &g, &err) == WM_OK, "%s", err.msg);
    CHECK_EQ(wm__fault_count(WM_OS_ALLOC), 1);
    CHECK_EQ((size_t)gguf_get_n_kv(g), wm_file_metadata_count(f));
    int64_t tokens = gguf_find_key(g, "tokenizer.ggml.tokens");
    int64_t scores = gguf_find_key(g, "tokenizer.ggml.scores");
    CHECK(tokens >= 0 && scores >= 0);
    size_t tk = 0, sk = 0;
    CHECK_EQ(wm_file_find_metadata(f, "tokenizer.ggml.tokens", &tk), WM_OK);
    CHECK_EQ(wm_file_find_metadata(f, "tokenizer.ggml.scores", &sk), WM_OK);
    wm_kv kv;
    wm_file_metadata(f, tk, &kv);
    CHECK(kv.length > 1000);
    CHECK_EQ((uint64_t)gguf_get_arr_n(g, tokens), kv.length);
    const float *sc = gguf_get_arr_data(g, scores);
    wm_array_iter it;
    wm_string str;
    CHECK_EQ(wm_file_array_iter(f, tk, &it), WM_OK);
    for (uint64_t e = 0; e < kv.length; e++) {
        CHECK_EQ(wm_array_iter_next(&it, &str), WM_OK);
        const char *got = gguf_get_arr_str(g, tokens, e);
        CHECK(strlen(got) == str.len && memcmp(got, str.ptr, str.len) == 0);
        double d = 0;
        CHECK_EQ(wm_file_array_f64(f, sk, e, &d), WM_OK);
        CHECK(sc[e] == (float)d); /* (CHECK_EQ compares as integers) */
    }
    wm_string arch;
    CHECK_EQ(wm_file_get_string(f, "general.architecture", &arch), WM_OK);
    int64_t ak = gguf_find_key(g, "general.architecture");
    CHECK(ak >= 0 && strlen(gguf_get_val_str(g, ak)) == arch.len &&
          memcmp(gguf_get_val_str(g, ak), arch.ptr, arch.len) == 0);
    gguf_free(g);
    wm_file_close(f);
    CHECK_LEDGER_EMPTY();
}

WM_TEST(mapped_repacked_from_the_mapping_q4_0) { /* a copy: the fixture's pages are shared */
    const char *path = wmt_tmp("q4_0.gguf");
    wmt_copy_file(wmt_fixture("gguf/stories260K-q4_0.gguf"), path);
    repacked_from_the_mapping(path, false);
}
WM_TEST(mapped_repacked_from_the_mapping_make_model) {
    repacked_from_the_mapping(wmt_make_model("m.gguf", "--size 64M"), true);
    repacked_from_the_mapping(wmt_make_model("s.gguf", "--size 16M --seed 3"), true);
}

/* The mmap mode's repacked tensors converted while llama.cpp makes the model and their pages
 * moved into their places as it makes the buffers (bridge/llama_early.c); each place here waits
 * for its tensor's conversion (wm__llama_test_early 1), so that all of them are converted early
 * on any machine. Every repacked tensor early (and from the mapping), nothing read, the progress
 * at 1, the same greedy tokens and first logits as llama.cpp's own mmap load, and after the free
 * no mapping of the file and the ledger empty. Off (0): none early, the same tokens. Warm, then
 * cold (1.8.5), where the populate leaves the repacked tensors' pages to the conversions
 * (wm__llama_test_populate_more 0), so that each conversion, early or after the making, brings
 * its own: without the early conversions' wait none is early cold; without from_map's, the off
 * load reads them. Without the early start no tensor is early; without the move (the pages
 * converted but left in the scratch) neither ("0 != 48"), and each is converted again after the
 * making; a neighbour's pages moved into a place leave tensors not early ("17 != 48"); pages
 * moved before their conversion ended would change the tokens. */
static void converted_early(const char *path) {
    setup();
    size_t size_read = 0;
    free(wmt_read_file(path, &size_read)); /* warm */
    decoded ref;
    by_llama(path, LLAMA_LOAD_MODE_MMAP, &ref);
    for (int cold = 0; cold < 2; cold++)
        for (int on = 1; on >= 0; on--) {
            float last = -1;
            wm_llama_stats s = WM_LLAMA_STATS_INIT;
            struct llama_model *m = NULL;
            wm_error err;
            if (cold) wmt_make_cold(path, 0, 0);
            wm__llama_test_early = on;
            wm__llama_test_populate_more = cold ? 0 : -1;
            wm_status st = load_mmap(path, &last, &s, &m, &err);
            wm__llama_test_early = -1;
            wm__llama_test_populate_more = -1;
            CHECK_MSG(st == WM_OK, "%s", err.msg);
            fprintf(stderr,
                    "%s, %s: %zu repacked, %zu early (%llu bytes, %.1f ms), %llu bytes read\n",
                    cold ? "cold" : "warm", on ? "early" : "off", s.repacked, s.repacked_early,
                    (unsigned long long)s.bytes_repacked_early, s.seconds_early * 1e3,
                    (unsigned long long)s.bytes_read);
            if (!s.repacked) {
                fprintf(stderr, "(this CPU's ggml repacks nothing of %s: nothing to tell)\n", path);
                llama_model_free(m);
                free(ref.first);
                return;
            }
            CHECK_EQ(s.repacked_mapped, s.repacked);
            CHECK_EQ(s.bytes_read, 0);
            if (on) {
                CHECK_EQ(s.repacked_early, s.repacked);
                CHECK_EQ(s.bytes_repacked_early, s.bytes_repacked_mapped);
                CHECK(s.seconds_early > 0);
            } else {
                CHECK_EQ(s.repacked_early, 0);
                CHECK_EQ(s.bytes_repacked_early, 0);
            }
            CHECK(last == 1.0f);
            same_then_freed(m, &ref, "converted early against llama.cpp's mmap", path);
        }
    free(ref.first);
}

WM_TEST(mapped_repacked_converted_early_q4_0) { /* a copy: the fixture's pages are shared */
    const char *path = wmt_tmp("q4_0.gguf");
    wmt_copy_file(wmt_fixture("gguf/stories260K-q4_0.gguf"), path);
    converted_early(path);
}
WM_TEST(mapped_repacked_converted_early_make_model) {
    converted_early(wmt_make_model("m.gguf", "--size 64M"));
    converted_early(wmt_make_model("s.gguf", "--size 16M --seed 3"));
}
/* Cold, the populate brings the repacked tensors' ranges in first, then the mapped ones (1.8.6,
 * llama_map.c order_spans), so that the last repacked tensors' conversions run while the mapped
 * tensors come in rather than after the fill. Told to hand out only its first 4 MiB
 * (wm__llama_test_populate_bytes), the populate leaves the token embedding (mapped, the file's
 * first tensor) uncached past its first 2 MiB (asked for apart, as an edge); the conversions
 * fault in only the repacked tensors' pages. In the file's order (1.8.5) those 4 MiB were the
 * embedding's own and this fails ("2097152 of the embedding's 2 MiB at 3 MiB cached"). Then the
 * same greedy tokens as llama.cpp's own mmap load, and nothing held after the free. */
static void repacked_first(const char *path) {
    setup();
    wm_file *f = NULL;
    wm_tensor_info ti;
    size_t e;
    CHECK_EQ(wm_file_open(path, &f, NULL), WM_OK);
    CHECK_EQ(wm_file_find_tensor(f, "token_embd.weight", &e), WM_OK);
    CHECK_EQ(wm_file_tensor(f, e, &ti), WM_OK);
    wm_file_close(f);
    const uint64_t mib = (uint64_t)1 << 20, page = (uint64_t)sysconf(_SC_PAGESIZE);
    CHECK(ti.nbytes >= 8 * mib); /* the window below lies inside it, clear of its edges */
    uint64_t window = (ti.offset + 3 * mib) / page * page;
    decoded ref;
    by_llama(path, LLAMA_LOAD_MODE_MMAP, &ref);
    wmt_make_cold(path, 0, 0);
    wm__llama_test_populate_bytes = (int64_t)(4 * mib);
    wm__llama_test_room = INT64_MAX; /* the repacked ranges through the page cache on any host */
    wm_llama_stats s = WM_LLAMA_STATS_INIT;
    struct llama_model *m = NULL;
    wm_error err;
    wm_status st = load_mmap(path, NULL, &s, &m, &err);
    wm__llama_test_populate_bytes = -1;
    wm__llama_test_room = -1;
    CHECK_MSG(st == WM_OK, "%s", err.msg);
    uint64_t cached = wmt_cached_bytes(path, window, 2 * mib); /* before a decode touches it */
    fprintf(
        stderr,
        "%s: %zu repacked (%zu from the mapping), %llu of the embedding's 2 MiB at 3 MiB cached\n",
        path, s.repacked, s.repacked_mapped, (unsigned long long)cached);
    if (!s.repacked) {
        fprintf(stderr, "(this CPU's ggml repacks nothing of %s: nothing to tell)\n", path);
    } else {
        CHECK_EQ(s.repacked_mapped, s.repacked); /* the cold path: through the page cache */
        CHECK_EQ(s.bytes_read, 0);
        CHECK_MSG(cached == 0,
                  "%llu of the embedding's 2 MiB at 3 MiB cached: the populate began with a "
                  "mapped tensor",
                  (unsigned long long)cached);
    }
    same_then_freed(m, &ref, "repacked ranges first against llama.cpp's mmap", path);
    free(ref.first);
}

WM_TEST(mapped_repacked_ranges_first_make_model) {
    repacked_first(wmt_make_model("m.gguf", "--size 64M"));
}

/* A cold populate's decision counts every byte where the kernel counts a range in one call (1.8.7:
 * wm_model_cached, cachestat), not a sample: a 64 MiB make-model file, nothing repacked (the
 * extra buffer types off, so that the populate covers the whole mapping), with exactly the first
 * 64 KiB of each MiB of the mapping cached, is a sixteenth cached: cold, the populate's threads
 * for a cold file (more than the 4 of a cached one); 1.8.6's sample, those very 64 KiB, found it
 * all cached and took the cached route. bytes_mapped_cached is what was cached, and what the
 * open read (its header buffer, 2 MiB of whole huge pages, which it keeps cached where the file's
 * start was not cold: src/open/open.c). Skipped where the kernel has no count (the sample is then
 * the rule). */
WM_TEST(mapped_cold_counted_whole_make_model) {
    setup();
    const char *path = wmt_make_model("m.gguf", "--size 64M");
    uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE), mib = 1u << 20, seg = 64u << 10;
    wm_file *f = OPEN_OK(path);
    uint64_t start = wm_file_data_offset(f) / pg * pg, size = wm_file_size(f);
    wm_load_options lo = {.mode = WM_MODE_MMAP};
    wm_model *probe = NULL;
    CHECK_STATUS(wm_model_load(f, &lo, &probe, NULL), WM_OK);
    uint64_t any;
    wm_status counts = wm_model_cached(probe, wm_model_buffer_data(probe, 0), pg, &any);
    wm_model_release(probe);
    wm_file_close(f);
    if (counts == WM_EUNSUPPORTED) WM_SKIP("the kernel has no count of its own over a range");
    wmt_make_cold(path, 0, 0);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM) == 0);
    static unsigned char buf[64 << 10];
    for (uint64_t at = start; at < size; at += mib)
        CHECK(pread(fd, buf, size - at < seg ? (size_t)(size - at) : sizeof buf, (off_t)at) > 0);
    close(fd);
    uint64_t warm = wmt_cached_bytes(path, start, size - start);
    CHECK_MSG(warm * 8 < size - start, "%llu of %llu bytes cached (readahead)",
              (unsigned long long)warm, (unsigned long long)(size - start));
    struct llama_model_params p = cpu_params();
    p.load_mode = LLAMA_LOAD_MODE_MMAP;
    p.use_extra_bufts = false;
    wm_llama_stats s = WM_LLAMA_STATS_INIT;
    wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
    o.stats = &s;
    struct llama_model *m = NULL;
    wm_error err;
    CHECK_MSG(wm_llama_load(path, &p, &o, &m, &err) == WM_OK, "%s", err.msg);
    fprintf(stderr, "%llu of %llu MiB cached: %u populate threads, %llu bytes found cached\n",
            (unsigned long long)(warm >> 20), (unsigned long long)((size - start) >> 20),
            s.populate_threads, (unsigned long long)s.bytes_mapped_cached);
    CHECK_EQ(s.repacked, 0);
    CHECK_MSG(s.populate_threads > 4,
              "%u populate threads: a sixteenth cached taken for cached (a sample's decision)",
              s.populate_threads);
    CHECK(s.bytes_mapped_cached >= warm && s.bytes_mapped_cached <= warm + 2 * mib);
    llama_model_free(m);
    CHECK_EQ(wmt_count_file_maps(path), 0);
    CHECK_LEDGER_EMPTY();
}

WM_TEST(mapped_beside_gpu_f32) { mapped_beside_gpu(wmt_fixture("gguf/stories260K.gguf")); }
WM_TEST(mapped_beside_gpu_q4_0) { mapped_beside_gpu(wmt_fixture("gguf/stories260K-q4_0.gguf")); }
WM_TEST(mapped_beside_gpu_make_model) { mapped_beside_gpu(wmt_make_model("m.gguf", "--size 8M")); }

/* Every call of that path failed in turn (the map, the populates, both of them: a caller's
 * override to the CPU type makes the second): a failure holds nothing. */
WM_TEST(fault_sweep_mapped_beside_gpu) {
    setup();
    const char *path = wmt_fixture("gguf/stories260K-q4_0.gguf");
    struct llama_model_tensor_buft_override down[] = {{"ffn_down", NULL}, {NULL, NULL}};
    down[0].buft = ggml_backend_cpu_buffer_type();
    sweep_run run = {.f = OPEN_OK(path), .o = WM_LLAMA_OPTIONS_INIT, .ov = down};
    run.o.threads = 2;
    run.o.load_mode = WM_LLAMA_LOAD_MMAP;
    wmt_sweep s = {.what = "wm_llama_load_file (mapped beside a GPU)",
                   .run = sweep_once,
                   .check = wmt_check_io_failure,
                   .user = &run,
                   .path = path,
                   .shown = "stories260K-q4_0.gguf",
                   .cycle = 1};
    static const int errs[] = {EIO, ENOMEM};
    wmt_sweep_result res = {0};
    wm__llama_test_cpu_layers = 2;
    wmt_sweep_any(&s, errs, 2, &res);
    wm__llama_test_cpu_layers = -1;
    CHECK(res.counts[WM_OS_MAP] >= 1 && res.counts[WM_OS_ADVISE] >= 2);
    CHECK(res.failed > 0);
    fprintf(stderr, "%llu calls (%llu map, %llu advise), %llu faulted runs, %llu failed\n",
            (unsigned long long)res.counts[WM_OS_ANY], (unsigned long long)res.counts[WM_OS_MAP],
            (unsigned long long)res.counts[WM_OS_ADVISE], (unsigned long long)res.runs,
            (unsigned long long)res.failed);
    wm_file_close(run.f);
}

/* ---- CUDA buffers (a GPU host with ggml's CUDA backend, which bench/llama_cuda.sh builds) ---- */

/* ggml's first device of its CUDA registry, or NULL. */
static ggml_backend_dev_t cuda_device(void) {
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        ggml_backend_reg_t r = ggml_backend_dev_backend_reg(d);
        if (ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_GPU && r &&
            strcmp(ggml_backend_reg_name(r), "CUDA") == 0)
            return d;
    }
    return NULL;
}

/* A load with `layers` layers offloaded (read mode), by llama.cpp or the bridge, decoded; the
 * device's free memory after the model's free in *free_after. */
static void gpu_load(const char *path, int layers, bool bridge, wm_llama_upload upload,
                     wm_llama_prefetch prefetch, wm_llama_stats *s, decoded *d,
                     size_t *free_after) {
    struct llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = layers;
    p.load_mode = LLAMA_LOAD_MODE_NONE;
    struct llama_model *m = NULL;
    if (bridge) {
        wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
        o.upload = upload;
        o.prefetch = prefetch;
        o.stats = s;
        wm_error err;
        CHECK_MSG(wm_llama_load(path, &p, &o, &m, &err) == WM_OK, "%s", err.msg);
        wm_ledger l = WM_LEDGER_INIT;
        wm_ledger_get(&l);
        CHECK_EQ(l.cat[WM_LEDGER_PINNED].current, 0);
        CHECK_EQ(l.cat[WM_LEDGER_DEVICE].current, 0);
    } else {
        m = llama_model_load_from_file(path, p);
        CHECK_MSG(m != NULL, "llama.cpp did not load %s", path);
    }
    greedy(m, d);
    llama_model_free(m);
    size_t total;
    ggml_backend_dev_memory(cuda_device(), free_after, &total);
    CHECK_LEDGER_EMPTY();
    CHECK_EQ(wmt_count_file_maps(path), 0);
}

/* Every layer on the GPU, and the layers split over the GPU and the CPU: the tensors in CUDA
 * buffers are filled by weightmap's staged pipeline (stats.staged), loaded ahead during the
 * model's making and copied into place (stats.ahead, prefetch AUTO) or after it (prefetch OFF);
 * the tokens and first logits equal llama.cpp's own load and the bridge's
 * ggml_backend_tensor_set path, nothing is pinned or counted after the load, and the device's
 * free memory after llama_model_free is what it was after llama.cpp's own load and free (the
 * staged paths'; the tensor_set path's printed). */
static void cuda_staged(const char *path) {
    setup();
    if (!cuda_device() || !wm_backend_available(WM_BACKEND_CUDA))
        WM_SKIP("no CUDA device in ggml (bench/llama_cuda.sh builds ggml's CUDA backend) or no "
                "CUDA backend in this weightmap");
    static const int layers[] = {999, 1};
    for (size_t k = 0; k < sizeof layers / sizeof *layers; k++) {
        decoded ref, st, after, set;
        wm_llama_stats s1 = WM_LLAMA_STATS_INIT, s2 = WM_LLAMA_STATS_INIT;
        wm_llama_stats s3 = WM_LLAMA_STATS_INIT;
        size_t f0, f1, f2, f3;
        const wm_llama_upload AUTO = WM_LLAMA_UPLOAD_AUTO;
        gpu_load(path, layers[k], false, AUTO, WM_LLAMA_PREFETCH_AUTO, NULL, &ref, &f0);
        gpu_load(path, layers[k], true, AUTO, WM_LLAMA_PREFETCH_AUTO, &s1, &st, &f1);
        gpu_load(path, layers[k], true, AUTO, WM_LLAMA_PREFETCH_OFF, &s3, &after, &f3);
        gpu_load(path, layers[k], true, WM_LLAMA_UPLOAD_TENSOR_SET, WM_LLAMA_PREFETCH_AUTO, &s2,
                 &set, &f2);
        fprintf(stderr,
                "%s, %d layers: %zu tensors (%llu bytes) staged in %.1f ms, %zu of them ahead "
                "(%llu bytes read ahead in %.1f ms, waited %.1f ms, copied in %.1f ms), %zu "
                "windowed, %zu in place; without the read ahead %zu staged; device free after "
                "the free: %zu, %zu, %zu, %zu\n",
                path, layers[k], s1.staged, (unsigned long long)s1.bytes_staged,
                s1.seconds_staged * 1e3, s1.ahead, (unsigned long long)s1.bytes_ahead,
                s1.seconds_ahead * 1e3, s1.seconds_ahead_wait * 1e3, s1.seconds_ahead_copy * 1e3,
                s1.windowed, s1.in_place, s3.staged, f0, f1, f3, f2);
        CHECK(s1.staged > 0 && s1.bytes_staged > 0);
        /* the H100 host's device has the room, and llama.cpp's rule, applied ahead, names every
         * tensor it puts on the device */
        CHECK(s1.ahead > 0 && s1.bytes_ahead > 0);
        CHECK_EQ(s1.ahead, s1.staged);
        CHECK_EQ(s3.ahead, 0);
        CHECK_EQ(s3.bytes_ahead, 0);
        CHECK_EQ(s3.staged, s1.staged);
        CHECK_EQ(s2.staged, 0);
        CHECK_EQ(s1.staged + s1.windowed + s1.in_place, s2.windowed + s2.in_place);
        same(&st, &ref, "staged (read ahead) into CUDA buffers against llama.cpp's own load");
        same(&after, &ref, "staged after the making against llama.cpp's own load");
        same(&set, &ref, "ggml_backend_tensor_set against llama.cpp's own load");
        /* the staged paths'; the tensor_set path's is printed: on an H100 ggml's CUDA backend
         * left 6 MiB less free after its first ggml_backend_tensor_set loads of a model */
        CHECK_MSG(f1 == f0, "device free memory after the free: %zu against %zu", f1, f0);
        CHECK_MSG(f3 == f0, "device free memory after the free: %zu against %zu", f3, f0);
        free(ref.first), free(st.first), free(after.first), free(set.first);
    }
}

WM_TEST(cuda_staged_q8_0) { cuda_staged(wmt_fixture("gguf/stories260K-q8_0.gguf")); }
WM_TEST(cuda_staged_make_model) { cuda_staged(wmt_make_model("m.gguf", "--size 32M")); }

/* The mapped modes with layers on a GPU (1 layer, and all), against llama.cpp's own mmap load
 * with the same params: the same greedy tokens and first logits, the same device buffers (the
 * "CUDA0 model buffer size" lines; neither has a "CUDA_Host" one: llama.cpp's mmap mode keeps the
 * CPU's tensors in the CPU's type), the CPU's tensors mapped (stats.mapped, at least token_embd;
 * cpu_layers as llama.cpp places them) and the device's filled (staged where this weightmap has
 * the CUDA backend); while loaded the file mapped r--s only, after llama_model_free not at all,
 * the ledger empty, and the device's free memory what it was after llama.cpp's own load and free.
 * MMAP, MMAP_MLOCK, and AUTO (which CUDA's mmap_support resolves to MMAP). */
static void cuda_gpu_load_mapped(const char *path, int layers, int mode, bool bridge,
                                 wm_llama_stats *s, decoded *d, size_t *free_after, int *maps,
                                 int *not_rs) {
    struct llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = layers;
    p.load_mode = (enum llama_load_mode)mode;
    struct llama_model *m = NULL;
    reset_log();
    if (bridge) {
        wm_llama_options o = WM_LLAMA_OPTIONS_INIT;
        o.stats = s;
        wm_error err;
        CHECK_MSG(wm_llama_load(path, &p, &o, &m, &err) == WM_OK, "%s", err.msg);
    } else {
        m = llama_model_load_from_file(path, p);
        CHECK_MSG(m != NULL, "llama.cpp did not load %s", path);
    }
    *maps = wmt_count_file_maps_of(path, not_rs);
    d->buffers[0] = 0; /* the device's buffer lines */
    for (char *line = strtok(buffer_lines, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(line, "CUDA")) continue;
        size_t n = strlen(d->buffers);
        snprintf(d->buffers + n, sizeof d->buffers - n, "%s\n", strstr(line, "CUDA"));
    }
    greedy(m, d);
    llama_model_free(m);
    size_t total;
    ggml_backend_dev_memory(cuda_device(), free_after, &total);
    CHECK_EQ(wmt_count_file_maps(path), 0);
    CHECK_LEDGER_EMPTY();
}

static void cuda_mapped(const char *path) {
    setup();
    if (!cuda_device())
        WM_SKIP("no CUDA device in ggml (bench/llama_cuda.sh builds ggml's CUDA backend)");
    static const int layers[] = {1, 999};
    static const int modes[] = {LLAMA_LOAD_MODE_MMAP, LLAMA_LOAD_MODE_MMAP_MLOCK,
                                LLAMA_LOAD_MODE_AUTO};
    /* the layers llama.cpp keeps on the CPU, from the file (closed again: the loads' checks of
     * the ledger see no open file of the test's) */
    int want_cpu_layers[2];
    wm_file *f = OPEN_OK(path);
    for (size_t k = 0; k < 2; k++) {
        struct llama_model_params p = llama_model_default_params();
        p.n_gpu_layers = layers[k];
        want_cpu_layers[k] = wm__llama_cpu_layers(f, &p);
    }
    wm_file_close(f);
    for (size_t k = 0; k < 2; k++)
        for (size_t j = 0; j < 3; j++) {
            decoded ref, wm;
            wm_llama_stats s = WM_LLAMA_STATS_INIT;
            size_t f0, f1;
            int maps0, maps1, bad0, bad1;
            int ll_mode = modes[j] == LLAMA_LOAD_MODE_AUTO ? LLAMA_LOAD_MODE_MMAP : modes[j];
            cuda_gpu_load_mapped(path, layers[k], ll_mode, false, NULL, &ref, &f0, &maps0, &bad0);
            cuda_gpu_load_mapped(path, layers[k], modes[j], true, &s, &wm, &f1, &maps1, &bad1);
            fprintf(stderr,
                    "%s, %d layers, %s: %zu tensors mapped (%llu bytes, %d layers on the CPU), "
                    "%zu staged, %zu windowed, %zu in place; regions %d (llama.cpp %d); device "
                    "free after the free %zu (llama.cpp %zu)\n%s",
                    path, layers[k], llama_load_mode_name((enum llama_load_mode)modes[j]), s.mapped,
                    (unsigned long long)s.bytes_mapped, s.cpu_layers, s.staged, s.windowed,
                    s.in_place, maps1, maps0, f1, f0, wm.buffers);
            CHECK_EQ(s.load_mode,
                     LLAMA_LOAD_MODE_MMAP + (modes[j] == LLAMA_LOAD_MODE_MMAP_MLOCK) * 2);
            CHECK_EQ(s.load_mode_fell_back, 0);
            CHECK_EQ(s.cpu_layers, want_cpu_layers[k]);
            CHECK(s.mapped > 0 && s.bytes_mapped > 0);
            CHECK(maps1 >= 1 && bad1 == 0);
            if (wm_backend_available(WM_BACKEND_CUDA)) CHECK(s.staged > 0);
            CHECK_EQ(s.tensors, s.mapped + s.staged + s.windowed + s.in_place + s.filled);
            CHECK_MSG(strcmp(wm.buffers, ref.buffers) == 0, "device buffers:\n%s against\n%s",
                      wm.buffers, ref.buffers);
            CHECK(strstr(wm.buffers, "CUDA_Host") == NULL);
            same(&wm, &ref, "mapped beside CUDA layers against llama.cpp's own mmap load");
            CHECK_MSG(f1 == f0, "device free memory after the free: %zu against %zu", f1, f0);
            free(ref.first), free(wm.first);
        }
}

WM_TEST(cuda_mapped_q8_0) { cuda_mapped(wmt_fixture("gguf/stories260K-q8_0.gguf")); }
WM_TEST(cuda_mapped_make_model) { cuda_mapped(wmt_make_model("m.gguf", "--size 32M")); }
