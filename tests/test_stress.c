/*
 * test_stress.c: concurrency stress of the whole lifecycle. Eight threads each run 200 cycles of
 * open, load, check and hand over: the model (with the file it came from) goes through a small
 * queue to the next thread in the ring, which releases it and closes the file, so every model is
 * released on a thread other than the one that loaded it. Cycles turn through several files
 * (GGUF and safetensors, small and larger) and every mode; half of them load from one file that
 * all threads share (objects may be read from several threads at once). Afterwards the ledger
 * holds nothing and no region maps any of the files. Run under ThreadSanitizer by `make
 * test-tsan`, which scales the cycles down with WM_STRESS_CYCLES; the normal build runs 8 x 200.
 *
 * Sections: the hand-over queue; the worker; the cases.
 */
#include "wmtest.h"

#include <pthread.h>
#include <string.h>

#define THREADS 8
#define CYCLES 200

static const char *const files[] = {
    "gguf/stories260K.gguf", "gguf/stories260K-q4_0.gguf", "gguf/ratchet-dummy.gguf",
    "safetensors/candle-mel-filters.safetensors", "safetensors/runai-test.safetensors"};
#define N_FILES (sizeof files / sizeof files[0])
static const wm_mode modes[] = {WM_MODE_HEAP, WM_MODE_MMAP, WM_MODE_MMAP_PRIVATE};

/* ---- the hand-over queue: one inbox per thread, unbounded, mutex and condition ---- */

typedef struct item {
    struct item *next;
    wm_model *model;
    wm_file *file; /* closed by the receiver when the loader opened it for this cycle */
    int loader;
} item;

typedef struct inbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    item *head, *tail;
} inbox;

static inbox boxes[THREADS];

static void box_push(inbox *b, item *it) {
    pthread_mutex_lock(&b->mu);
    it->next = NULL;
    if (b->tail)
        b->tail->next = it;
    else
        b->head = it;
    b->tail = it;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* Takes the oldest item; waits for one when `wait`, else returns NULL on an empty inbox. */
static item *box_pop(inbox *b, int wait) {
    pthread_mutex_lock(&b->mu);
    while (wait && !b->head)
        pthread_cond_wait(&b->cv, &b->mu);
    item *it = b->head;
    if (it) {
        b->head = it->next;
        if (!b->head) b->tail = NULL;
    }
    pthread_mutex_unlock(&b->mu);
    return it;
}

/* ---- the worker ---- */

typedef struct shared_file {
    wm_file *file; /* opened once, loaded by every thread */
    unsigned char *bytes;
    size_t len;
} shared_file;

static shared_file fixtures_bytes[N_FILES];
/* Absolute paths, made before the threads start (wmt_fixture returns a static buffer). */
static char *paths[N_FILES];
static wm_file *common; /* fixtures_bytes[0]'s file, shared by all threads */
static int cycles;

typedef struct worker {
    int id;
    int released;
    char failure[512];
} worker;

/* Every tensor's bytes equal the file's (a sample of rows for the larger files). */
static int same_bytes(const wm_model *m, const shared_file *sf) {
    const wm_file *f = wm_model_file(m);
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        if (wm_file_tensor(f, i, &t) != WM_OK) return 0;
        const unsigned char *p = wm_model_tensor_data(m, i);
        if (t.nbytes && (!p || t.offset + t.nbytes > sf->len)) return 0;
        if (t.nbytes && memcmp(p, sf->bytes + t.offset, t.nbytes) != 0) return 0;
    }
    return 1;
}

static void release(worker *w, item *it) {
    if (it->loader == w->id)
        snprintf(w->failure, sizeof w->failure, "model released by its loader");
    wm_model_release(it->model);
    if (it->file != common) wm_file_close(it->file);
    free(it);
    w->released++;
}

static void *work(void *p) {
    worker *w = p;
    inbox *next = &boxes[(w->id + 1) % THREADS];
    for (int c = 0; c < cycles && !w->failure[0]; c++) {
        size_t fi = (size_t)(w->id * 7 + c) % N_FILES;
        wm_mode mode = modes[(size_t)(w->id + c) % 3];
        wm_file *f = common;
        if (c % 2 || fi != 0) {
            wm_error err;
            if (wm_file_open(paths[fi], &f, &err) != WM_OK) {
                snprintf(w->failure, sizeof w->failure, "open %s: %s", files[fi], err.msg);
                break;
            }
        }
        wm_load_options o = {.mode = mode, .threads = 1 + (unsigned)(c % 3)};
        wm_model *m = NULL;
        wm_error err;
        if (wm_model_load(f, &o, &m, &err) != WM_OK) {
            snprintf(w->failure, sizeof w->failure, "load %s (%s): %s", files[fi],
                     wm_mode_name(mode), err.msg);
            if (f != common) wm_file_close(f);
            break;
        }
        if (c % 16 == 0 && !same_bytes(m, &fixtures_bytes[fi]))
            snprintf(w->failure, sizeof w->failure, "%s (%s): bytes differ", files[fi],
                     wm_mode_name(mode));
        item *it = malloc(sizeof *it);
        if (!it) abort();
        *it = (item){.model = m, .file = f, .loader = w->id};
        box_push(next, it);
        /* Release whatever the previous thread has handed over so far. */
        for (item *got; (got = box_pop(&boxes[w->id], 0));)
            release(w, got);
    }
    /* The previous thread hands over exactly `cycles` models (fewer only after a failure, which
     * the case reports anyway: then stop waiting once the inbox is empty). */
    while (w->released < cycles) {
        item *got = box_pop(&boxes[w->id], !w->failure[0]);
        if (!got) break;
        release(w, got);
    }
    return NULL;
}

/* ---- the cases ---- */

static void make_paths(void) {
    for (size_t i = 0; i < N_FILES; i++)
        paths[i] = strdup(wmt_fixture(files[i]));
}

static void free_paths(void) {
    for (size_t i = 0; i < N_FILES; i++) {
        CHECK_EQ(wmt_count_file_maps(paths[i]), 0);
        free(paths[i]);
    }
}

static int stress_cycles(void) {
    make_paths();
    const char *e = getenv("WM_STRESS_CYCLES");
    int n = e ? atoi(e) : CYCLES;
    return n > 0 && n <= CYCLES ? n : CYCLES;
}

WM_TEST(eight_threads_load_and_release_elsewhere) {
    cycles = stress_cycles();
    for (size_t i = 0; i < N_FILES; i++)
        fixtures_bytes[i].bytes = wmt_read_file(wmt_fixture(files[i]), &fixtures_bytes[i].len);
    wm_error err;
    CHECK_STATUS(wm_file_open(paths[0], &common, &err), WM_OK);
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        pthread_mutex_init(&boxes[i].mu, NULL);
        pthread_cond_init(&boxes[i].cv, NULL);
        w[i] = (worker){.id = i};
    }
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, work, &w[i]) == 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    /* Anything left after a failure is released here, so the report is the failure itself. */
    for (int i = 0; i < THREADS; i++)
        for (item *got; (got = box_pop(&boxes[i], 0));)
            release(&w[(i + 1) % THREADS], got);
    for (int i = 0; i < THREADS; i++)
        CHECK_MSG(!w[i].failure[0], "thread %d: %s", i, w[i].failure);
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ(w[i].released, cycles);
    wm_file_close(common);
    CHECK_LEDGER_EMPTY();
    for (size_t i = 0; i < N_FILES; i++)
        free(fixtures_bytes[i].bytes);
    free_paths();
    fprintf(stderr, "%d threads x %d cycles\n", THREADS, cycles);
}

/* Open and close storms on one path while other threads read a shared file's metadata. */
typedef struct opener {
    const char *path;
    int failures;
} opener;

static void *open_close(void *p) {
    opener *o = p;
    for (int c = 0; c < cycles; c++) {
        wm_file *f;
        if (wm_file_open(o->path, &f, NULL) != WM_OK) {
            o->failures++;
            continue;
        }
        size_t idx;
        if (wm_file_find_tensor(common, "token_embd.weight", &idx) != WM_OK) o->failures++;
        wm_string s;
        if (wm_file_get_string(common, "general.architecture", &s) != WM_OK) o->failures++;
        wm_file_close(f);
    }
    return NULL;
}

WM_TEST(eight_threads_open_and_close) {
    cycles = stress_cycles();
    CHECK_STATUS(wm_file_open(paths[0], &common, NULL), WM_OK);
    pthread_t t[THREADS];
    opener o[THREADS];
    for (int i = 0; i < THREADS; i++) {
        o[i] = (opener){paths[(size_t)i % N_FILES], 0};
        CHECK(pthread_create(&t[i], NULL, open_close, &o[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(o[i].failures, 0);
    }
    wm_file_close(common);
    CHECK_LEDGER_EMPTY();
    free_paths();
}
