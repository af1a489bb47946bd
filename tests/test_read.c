/*
 * test_read.c: wm_file_read_tensors, reading tensors into memory the caller owns. Every byte
 * lands as it is in the file, once (the kernel's rchar), in destinations of any alignment; the
 * sink path hands over windows no larger than each thread's share (or the whole tensor, asked
 * for whole), one call at a time when asked; the call takes nothing from the counted allocator
 * (whose small blocks are malloc's) and leaves the ledger as it was; every refusal, a cut file,
 * a sink that refuses, a cancel and a fault at each OS call leave nothing held.
 */
#include "gguf_builder.h"
#include "wmtest.h"

#include "internal.h"
#include "os/fault.h"
#include "read/engine.h" /* WM__STAGE_BYTES, wm__file_prefetch_wait */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Every tensor of f, each into malloc'd memory one byte past an aligned start (any alignment). */
typedef struct host_set {
    wm_read_item *items;
    unsigned char **mem;
    size_t n;
} host_set;

static host_set host_items(const wm_file *f) {
    host_set h = {.n = wm_file_tensor_count(f)};
    h.items = calloc(h.n, sizeof *h.items);
    h.mem = calloc(h.n, sizeof *h.mem);
    for (size_t i = 0; i < h.n; i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        h.mem[i] = malloc(t.nbytes + 1);
        h.items[i] = (wm_read_item){.tensor = i, .dst = h.mem[i] + 1};
    }
    return h;
}

static void host_free(host_set *h) {
    for (size_t i = 0; i < h->n; i++)
        free(h->mem[i]);
    free(h->mem);
    free(h->items);
}

/* Each item's bytes equal the file's at the tensor's offset. */
static void check_equal_file(const wm_file *f, const char *path, const host_set *h) {
    size_t len;
    unsigned char *file = wmt_read_file(path, &len);
    for (size_t i = 0; i < h->n; i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, h->items[i].tensor, &t), WM_OK);
        CHECK_MSG(memcmp(h->items[i].dst, file + t.offset, t.nbytes) == 0,
                  "tensor '%s' differs from the file", t.name);
    }
    free(file);
}

static uint64_t scratch_now(void) {
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    return l.cat[WM_LEDGER_SCRATCH].current;
}

WM_TEST(host_destinations_get_the_file_bytes_once) {
    const char *path = wmt_make_model("m.gguf", "--size 24M");
    wm_file *f = OPEN_OK(path);
    host_set h = host_items(f);
    wm_ledger before = WM_LEDGER_INIT;
    wm_ledger_get(&before);
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = 3;
    wm_error err;
    uint64_t r0 = wmt_rchar(true);
    CHECK_MSG(wm_file_read_tensors(f, h.items, h.n, &o, &err) == WM_OK, "%s", err.msg);
    CHECK_EQ(wmt_rchar(false) - r0, wm_file_tensor_bytes(f));
    wm_ledger after = WM_LEDGER_INIT;
    wm_ledger_get(&after);
    CHECK_EQ(wm_ledger_bytes(&after), wm_ledger_bytes(&before));
    CHECK_EQ(wm_ledger_regions(&after), wm_ledger_regions(&before));
    CHECK(after.cat[WM_LEDGER_SCRATCH].total > before.cat[WM_LEDGER_SCRATCH].total); /* jobs */
    check_equal_file(f, path, &h);
    host_free(&h);
    wm_file_close(f);
}

/* The tail: the last threads x 8 MiB of a read come in pieces of at most 2 MiB (so that the
 * threads' last jobs end close together), the rest in pieces of up to 8 MiB. The 40M model's
 * items last to first (the engine keeps the caller's order), so that its 16 MiB token_embd is
 * read last; one thread, so that the progress callback, called after every job, sees each
 * job's bytes. */
typedef struct steps {
    uint64_t last, biggest, biggest_in_tail, tail_from;
} steps;

static int on_step(void *user, uint64_t done, uint64_t total) {
    steps *s = user;
    (void)total;
    uint64_t d = done - s->last;
    if (d > s->biggest) s->biggest = d;
    if (s->last >= s->tail_from && d > s->biggest_in_tail) s->biggest_in_tail = d;
    s->last = done;
    return 0;
}

WM_TEST(host_last_jobs_are_small) {
    const char *path = wmt_make_model("m40.gguf", "--size 40M");
    wm_file *f = OPEN_OK(path);
    host_set h = host_items(f);
    for (size_t i = 0; i < h.n / 2; i++) { /* the caller's order, last to first: token_embd last */
        wm_read_item t = h.items[i];
        h.items[i] = h.items[h.n - 1 - i];
        h.items[h.n - 1 - i] = t;
    }
    uint64_t total = wm_file_tensor_bytes(f);
    steps st = {.tail_from = total - ((uint64_t)8 << 20)};
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = 1;
    o.progress = on_step;
    o.progress_user = &st;
    wm_error err;
    CHECK_MSG(wm_file_read_tensors(f, h.items, h.n, &o, &err) == WM_OK, "%s", err.msg);
    CHECK_EQ(st.last, total);
    CHECK_EQ(st.biggest, (uint64_t)8 << 20);
    CHECK_MSG(st.biggest_in_tail <= ((uint64_t)2 << 20) && st.biggest_in_tail > 0,
              "a job of %llu bytes in the last 8 MiB", (unsigned long long)st.biggest_in_tail);
    check_equal_file(f, path, &h);
    host_free(&h);
    wm_file_close(f);
}

/* ---- the sink ---- */

typedef struct sink_rec {
    const wm_file *f;
    unsigned char **mem; /* by item index */
    const wm_read_item *first;
    _Atomic size_t calls, largest;
    _Atomic int inside, most_inside;
    int refuse_at;         /* the call (1-based) that returns non-zero; 0: none */
    uint64_t scratch_peak; /* the scratch ledger seen inside the calls, at most */
} sink_rec;

static int sink(void *user, const wm_read_item *item, uint64_t offset, const void *bytes,
                size_t len) {
    sink_rec *s = user;
    int in = atomic_fetch_add(&s->inside, 1) + 1;
    int most = atomic_load(&s->most_inside);
    while (in > most && !atomic_compare_exchange_weak(&s->most_inside, &most, in)) {
    }
    size_t calls = atomic_fetch_add(&s->calls, 1) + 1;
    size_t big = atomic_load(&s->largest);
    while (len > big && !atomic_compare_exchange_weak(&s->largest, &big, len)) {
    }
    memcpy(s->mem[item - s->first] + offset, bytes, len);
    /* a moment inside, so that calls from other threads overlap where they may */
    for (volatile int k = 0; k < 20000; k++) {
    }
    atomic_fetch_sub(&s->inside, 1);
    return s->refuse_at && calls == (size_t)s->refuse_at;
}

/* All tensors through the sink (dst NULL), copied by it into h's memory. */
static void sink_setup(const wm_file *f, host_set *h, sink_rec *s, uint32_t flags) {
    *h = host_items(f);
    for (size_t i = 0; i < h->n; i++) {
        h->items[i].dst = NULL;
        h->items[i].flags = flags;
    }
    *s = (sink_rec){.f = f, .mem = h->mem, .first = h->items};
    for (size_t i = 0; i < h->n; i++)
        h->mem[i] += 1;
}

static void sink_done(host_set *h) {
    for (size_t i = 0; i < h->n; i++) {
        h->mem[i] -= 1;
        h->items[i].dst = h->mem[i] + 1;
    }
}

WM_TEST(sink_gets_windows_of_the_thread_share) {
    const char *path = wmt_make_model("m.gguf", "--size 24M");
    wm_file *f = OPEN_OK(path);
    host_set h;
    sink_rec s;
    sink_setup(f, &h, &s, 0);
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = 2;
    o.window = (size_t)4 << 20; /* 2 MiB a thread */
    o.sink = sink;
    o.sink_user = &s;
    wm_error err;
    CHECK_MSG(wm_file_read_tensors(f, h.items, h.n, &o, &err) == WM_OK, "%s", err.msg);
    CHECK(atomic_load(&s.largest) <= ((size_t)2 << 20));
    CHECK(atomic_load(&s.calls) > h.n); /* the big tensors came in several pieces */
    CHECK_EQ(scratch_now(), 0);
    sink_done(&h);
    check_equal_file(f, path, &h);
    host_free(&h);
    wm_file_close(f);
}

WM_TEST(sink_whole_items_come_in_one_call) {
    const char *path = wmt_make_model("m.gguf", "--size 24M");
    wm_file *f = OPEN_OK(path);
    host_set h;
    sink_rec s;
    sink_setup(f, &h, &s, WM_READ_WHOLE);
    size_t with_bytes = 0;
    uint64_t largest = 0;
    for (size_t i = 0; i < h.n; i++) {
        wm_tensor_info t;
        wm_file_tensor(f, i, &t);
        with_bytes += t.nbytes > 0;
        if (t.nbytes > largest) largest = t.nbytes;
    }
    CHECK(largest > ((size_t)1 << 20));
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = 2;
    o.window = (size_t)2 << 20;
    o.sink = sink;
    o.sink_user = &s;
    wm_error err;
    CHECK_MSG(wm_file_read_tensors(f, h.items, h.n, &o, &err) == WM_OK, "%s", err.msg);
    CHECK_EQ(atomic_load(&s.calls), with_bytes);
    CHECK_EQ(atomic_load(&s.largest), largest);
    CHECK_EQ(scratch_now(), 0);
    sink_done(&h);
    check_equal_file(f, path, &h);
    host_free(&h);
    wm_file_close(f);
}

/* ---- WM_READ_SINK_ROWS items: every sink call on whole row groups ----
 * Every tensor of a 24M model through the sink in groups of `row_group` rows: each call starts
 * on a group's boundary and holds whole groups (the last of a tensor the rows left), the bytes
 * as the file's; the share is 2 MiB a thread, so the big tensors come in several calls. A group
 * of 6144 rows (3 MiB of the 4 MiB token_embd) is bigger than the share: that tensor's calls are
 * one group each (and the rows left), in a window grown to it. Without the cut on groups
 * (piece_end), the calls end wherever the share does. */
typedef struct rows_rec {
    sink_rec s;
    uint32_t row_group;
    _Atomic size_t off_group; /* calls not on whole groups */
    _Atomic size_t biggest_group_calls;
    size_t biggest; /* the item whose group exceeds the share */
} rows_rec;

static int rows_sink(void *user, const wm_read_item *item, uint64_t offset, const void *bytes,
                     size_t len) {
    rows_rec *r = user;
    wm_tensor_info t;
    wm_file_tensor(r->s.f, item->tensor, &t);
    uint64_t rows = t.n_elements / t.shape[0], g = t.nbytes / rows * r->row_group;
    if (g > t.nbytes) g = t.nbytes;
    if (offset % g || (len % g && offset + len != t.nbytes)) atomic_fetch_add(&r->off_group, 1);
    if ((size_t)(item - r->s.first) == r->biggest) {
        atomic_fetch_add(&r->biggest_group_calls, 1);
        /* a group bigger than the share: one group a call */
        if (g > ((size_t)2 << 20) && len != g && offset + len != t.nbytes)
            atomic_fetch_add(&r->off_group, 1);
    }
    return sink(&r->s, item, offset, bytes, len);
}

static void rows_case(uint32_t row_group) {
    const char *path = wmt_make_model("m.gguf", "--size 24M");
    wm_file *f = OPEN_OK(path);
    host_set h;
    rows_rec r = {.row_group = row_group};
    sink_setup(f, &h, &r.s, WM_READ_SINK_ROWS);
    uint64_t big = 0;
    for (size_t i = 0; i < h.n; i++) {
        wm_tensor_info t;
        wm_file_tensor(f, i, &t);
        if (t.nbytes > big) big = t.nbytes, r.biggest = i;
    }
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = 2;
    o.window = (size_t)4 << 20; /* 2 MiB a thread */
    o.sink = rows_sink;
    o.sink_user = &r;
    o.row_group = row_group;
    wm_error err;
    CHECK_MSG(wm_file_read_tensors(f, h.items, h.n, &o, &err) == WM_OK, "%s", err.msg);
    CHECK_EQ(atomic_load(&r.off_group), 0);
    CHECK(atomic_load(&r.s.calls) > h.n); /* the big tensors came in several pieces */
    CHECK(atomic_load(&r.biggest_group_calls) > 1);
    CHECK_EQ(scratch_now(), 0);
    sink_done(&h);
    check_equal_file(f, path, &h);
    host_free(&h);
    wm_file_close(f);
}

WM_TEST(sink_rows_come_in_whole_groups) {
    rows_case(16);
    rows_case(6144);
}

/* ---- WM_READ_WHOLE items: in pieces, the biggest first, in windows that mirror the file ----
 * The 40M model's token_embd (16 MiB at a file offset off the 4 KiB grid) and its other
 * matrices are asked for whole, its norms in windows. One thread, so that the order is the
 * engine's own: every whole item comes before every other, the biggest first, each in one call at
 * offset 0 whose bytes start as far past the 4 KiB grid as the tensor does in the file (a direct
 * read lands there in place); the progress callback, called after every job, shows the biggest
 * item's first piece ending where the file offset reaches a multiple of 8 MiB. Then cold, on
 * three threads (the pieces read direct, in place): the same bytes. */
typedef struct whole_rec {
    const wm_file *f;
    unsigned char **mem;
    const wm_read_item *first;
    size_t calls, wholes_seen, misplaced, out_of_order;
    bool other_seen;      /* a call for an item not asked for whole */
    uint64_t last_whole;  /* nbytes of the last whole item handed over */
    uint64_t progress[8]; /* the first progress values */
    size_t n_progress;
} whole_rec;

static int whole_sink(void *user, const wm_read_item *item, uint64_t offset, const void *bytes,
                      size_t len) {
    whole_rec *r = user;
    wm_tensor_info t;
    CHECK_STATUS(wm_file_tensor(r->f, item->tensor, &t), WM_OK);
    r->calls++;
    if (item->flags & WM_READ_WHOLE) {
        CHECK_EQ(offset, 0);
        CHECK_EQ(len, t.nbytes);
        r->misplaced += (uintptr_t)bytes % 4096 != t.offset % 4096;
        r->out_of_order += r->other_seen || (r->wholes_seen && t.nbytes > r->last_whole);
        r->last_whole = t.nbytes;
        r->wholes_seen++;
    } else {
        r->other_seen = true;
    }
    memcpy(r->mem[item - r->first] + offset, bytes, len);
    return 0;
}

/* Every tensor of f through the sink (sink_setup's layout), its matrices (256 KiB or more)
 * WM_READ_WHOLE; *big: the biggest of those. Returns how many are whole. */
static size_t whole_setup(const wm_file *f, host_set *h, wm_tensor_info *big) {
    sink_rec unused;
    sink_setup(f, h, &unused, 0);
    size_t wholes = 0;
    *big = (wm_tensor_info){0};
    for (size_t i = 0; i < h->n; i++) {
        wm_tensor_info t;
        wm_file_tensor(f, i, &t);
        h->items[i].flags = t.nbytes >= ((uint64_t)256 << 10) ? WM_READ_WHOLE : 0;
        wholes += h->items[i].flags != 0;
        if (h->items[i].flags && t.nbytes > big->nbytes) *big = t;
    }
    return wholes;
}

static int whole_progress(void *user, uint64_t done, uint64_t total) {
    whole_rec *r = user;
    (void)total;
    if (r->n_progress < 8) r->progress[r->n_progress++] = done;
    return 0;
}

WM_TEST(sink_whole_items_in_pieces_biggest_first) {
    const char *path = wmt_make_model("m40.gguf", "--size 40M");
    wm_file *f = OPEN_OK(path);
    uint64_t size = wm_file_size(f), data = wm_file_data_offset(f);
    for (int cold = 0; cold < 2; cold++) {
        host_set h;
        wm_tensor_info big;
        size_t wholes = whole_setup(f, &h, &big);
        CHECK(wholes > 4 && wholes < h.n);
        uint64_t first_piece = ((uint64_t)big.offset / (8u << 20) + 1) * (8u << 20) - big.offset;
        CHECK(big.offset % 4096 != 0 && first_piece < big.nbytes); /* the case in point */
        whole_rec r = {.f = f, .mem = h.mem, .first = h.items};
        wm_read_options o = WM_READ_OPTIONS_INIT;
        o.threads = cold ? 3 : 1;
        o.sink = whole_sink;
        o.sink_user = &r;
        o.flags = WM_READ_SINK_SERIAL;
        o.progress = whole_progress;
        o.progress_user = &r;
        if (cold) wmt_make_cold(path, 0, 0);
        wm_error err;
        CHECK_MSG(wm_file_read_tensors(f, h.items, h.n, &o, &err) == WM_OK, "%s", err.msg);
        CHECK_EQ(r.wholes_seen, wholes);
        CHECK_EQ(r.misplaced, 0);
        if (!cold) {
            CHECK_EQ(r.out_of_order, 0);
            CHECK(r.n_progress > 0);
            CHECK_EQ(r.progress[0], first_piece);
        } else {
            CHECK(wmt_cached_bytes(path, data, size - data) < wm_file_tensor_bytes(f) / 8);
        }
        CHECK_EQ(scratch_now(), 0);
        sink_done(&h);
        check_equal_file(f, path, &h);
        host_free(&h);
    }
    wm_file_close(f);
}

/* The windows of whole items are reused from item to item: with every matrix of the 40M model
 * (44 of them) whole on 2 threads, the read maps pages for the job table, one worker's stack,
 * the threads' staging and at most threads + 1 windows, not a window per item (wmt_sweep_count
 * counts the page allocations). */
typedef struct whole_run {
    wm_file *f;
    host_set *h;
    wm_read_options o;
} whole_run;

static wm_status whole_read_once(void *user, wm_error *err) {
    whole_run *run = user;
    whole_rec *r = run->o.sink_user;
    r->calls = r->wholes_seen = 0; /* each run starts over */
    r->other_seen = false;
    return wm_file_read_tensors(run->f, run->h->items, run->h->n, &run->o, err);
}

WM_TEST(sink_whole_windows_are_reused) {
    const char *path = wmt_make_model("m40.gguf", "--size 40M");
    wm_file *f = OPEN_OK(path);
    host_set h;
    wm_tensor_info big;
    size_t wholes = whole_setup(f, &h, &big);
    whole_rec r = {.f = f, .mem = h.mem, .first = h.items};
    whole_run run = {f, &h, WM_READ_OPTIONS_INIT};
    run.o.threads = 2;
    run.o.sink = whole_sink;
    run.o.sink_user = &r;
    run.o.flags = WM_READ_SINK_SERIAL;
    wmt_sweep sw = {.what = "wm_file_read_tensors", .run = whole_read_once, .user = &run};
    wmt_sweep_result res = {0};
    wmt_sweep_count(&sw, &res);
    unsigned t = run.o.threads;
    fprintf(stderr, "%zu whole items, %llu page allocations\n", wholes,
            (unsigned long long)res.counts[WM_OS_PAGES]);
    CHECK(wholes > 30);
    CHECK_MSG(res.counts[WM_OS_PAGES] <= 1 + (t - 1) + t + (t + 1),
              "%llu page allocations for %zu whole items on %u threads",
              (unsigned long long)res.counts[WM_OS_PAGES], wholes, t);
    sink_done(&h);
    check_equal_file(f, path, &h);
    host_free(&h);
    wm_file_close(f);
}

/* A whole item's window in huge pages: it starts on a 2 MiB boundary and is whole huge pages
 * (src/os/linux.c, wm__os_pages_alloc; src/read/run.c, window_len), so that where the kernel gives
 * huge pages (transparent_hugepage not "never") it can back every page of it with one, and a direct
 * read into it is a few long segments, not up to 254 of 4 KiB a request. Each sink call of a
 * whole item of 2 MiB or more finds the mapping that holds its bytes in /proc/self/smaps: its
 * start and size on the 2 MiB grid (with the alignment removed: 2 of 2 windows unaligned,
 * 2056-4624 kB of them in 4 KiB pages in two runs). Whether the kernel found free huge pages for
 * it is its own affair (memory can be too fragmented): printed, not asserted. */
typedef struct huge_rec {
    size_t calls, unaligned, short_of_huge;
    uint64_t worst; /* the most kB of a window not in huge pages */
} huge_rec;

/* The mapping of /proc/self/smaps that holds p: its start, size and anonymous huge pages (kB). */
static bool smaps_of(const void *p, uintptr_t *start, uint64_t *size_kb, uint64_t *huge_kb) {
    FILE *fp = fopen("/proc/self/smaps", "r");
    if (!fp) return false;
    char line[512];
    bool in = false, found = false;
    *size_kb = *huge_kb = 0;
    while (fgets(line, sizeof line, fp)) {
        unsigned long long a, b, v;
        if (sscanf(line, "%llx-%llx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            if (found) break;
            in = (uintptr_t)p >= a && (uintptr_t)p < b;
            found = in;
            if (in) *start = (uintptr_t)a;
        } else if (in && sscanf(line, "Size: %llu kB", &v) == 1) {
            *size_kb = v;
        } else if (in && sscanf(line, "AnonHugePages: %llu kB", &v) == 1) {
            *huge_kb = v;
        }
    }
    fclose(fp);
    return found;
}

static int huge_sink(void *user, const wm_read_item *item, uint64_t offset, const void *bytes,
                     size_t len) {
    huge_rec *r = user;
    (void)item;
    (void)offset;
    if (len < ((size_t)2 << 20)) return 0;
    r->calls++;
    uintptr_t start = 0;
    uint64_t size, huge;
    CHECK(smaps_of(bytes, &start, &size, &huge));
    uintptr_t base = (uintptr_t)bytes / 4096 * 4096; /* the window: the tensor at its skew */
    r->unaligned +=
        base % ((uintptr_t)2 << 20) != 0 || start % ((uintptr_t)2 << 20) != 0 || size % 2048 != 0;
    if (huge < size) {
        r->short_of_huge++;
        if (size - huge > r->worst) r->worst = size - huge;
    }
    return 0;
}

WM_TEST(sink_whole_windows_in_huge_pages) {
    const char *path = wmt_make_model("m40.gguf", "--size 40M");
    wm_file *f = OPEN_OK(path);
    host_set h;
    wm_tensor_info big;
    size_t wholes = whole_setup(f, &h, &big);
    CHECK(wholes > 0 && big.nbytes >= ((uint64_t)8 << 20) && big.offset % 4096 != 0);
    huge_rec r = {0};
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = 1;
    o.sink = huge_sink;
    o.sink_user = &r;
    wm_error err;
    CHECK_MSG(wm_file_read_tensors(f, h.items, h.n, &o, &err) == WM_OK, "%s", err.msg);
    fprintf(stderr,
            "%zu whole items of 2 MiB or more: %zu unaligned, %zu short of huge pages (at "
            "most %llu kB in 4 KiB pages)\n",
            r.calls, r.unaligned, r.short_of_huge, (unsigned long long)r.worst);
    CHECK(r.calls > 0);
    CHECK_EQ(r.unaligned, 0);
    sink_done(&h);
    host_free(&h);
    wm_file_close(f);
}

/* The windows of whole items together stay within the pool's cap: twice the biggest item's
 * window, or 8 MiB a thread where that is more (src/read/run.c, whole_cap); a failure
 * while threads wait for room ends the read. Eight 16 MiB tensors asked for whole on three
 * threads: while one thread's sink copies an item out of its window, the other two take pieces
 * of the next two items, so without the cap three windows (54 MiB in whole huge pages) are held
 * at once; with it, 36 MiB, and a piece of a third item waits for a window to be given back.
 * The scratch the ledger counts during every sink call is the pool plus the job table and the
 * threads' stacks and staging. */
typedef struct cap_rec {
    const wm_file *f;
    unsigned char *mem;
    _Atomic uint64_t most; /* the scratch ledger at most, seen from the sinks */
    _Atomic int calls;
    int refuse_at; /* the call (1-based) that refuses; 0: none */
} cap_rec;

static int cap_sink(void *user, const wm_read_item *item, uint64_t offset, const void *bytes,
                    size_t len) {
    cap_rec *r = user;
    uint64_t now = scratch_now(), most = atomic_load(&r->most);
    while (now > most && !atomic_compare_exchange_weak(&r->most, &most, now)) {
    }
    memcpy(r->mem + item->tensor * len + offset, bytes, len);
    return atomic_fetch_add(&r->calls, 1) + 1 == r->refuse_at;
}

WM_TEST(sink_whole_windows_within_the_cap) {
    enum { N = 8 };
    const size_t each = (size_t)16 << 20;
    ggb g;
    ggb_begin(&g, 3, N, 0);
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        ggb_tensor1(&g, name, each / 4, 0 /* f32 */, (uint64_t)i * each);
    }
    ggb_pad(&g, 32);
    ggb_data(&g, N * each);
    const char *path = ggb_write(&g, "whole8.gguf");
    ggb_free(&g);
    wm_file *f = OPEN_OK(path);
    cap_rec r = {.f = f, .mem = malloc(N * each)};
    wm_read_item items[N];
    for (int i = 0; i < N; i++)
        items[i] = (wm_read_item){.tensor = (size_t)i, .flags = WM_READ_WHOLE};
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = 3;
    o.sink = cap_sink;
    o.sink_user = &r;
    wm_error err;
    CHECK_MSG(wm_file_read_tensors(f, items, N, &o, &err) == WM_OK, "%s", err.msg);
    /* two windows of 16 MiB and a few KiB of slack each, in whole huge pages (18 MiB), 4 MiB
     * for the rest (three windows, without the cap: 54 MiB) */
    uint64_t bound = 2 * ((uint64_t)each + ((uint64_t)2 << 20)) + ((uint64_t)4 << 20);
    fprintf(stderr, "scratch at most %llu bytes during the sinks (bound %llu)\n",
            (unsigned long long)atomic_load(&r.most), (unsigned long long)bound);
    CHECK(atomic_load(&r.most) <= bound);
    CHECK_EQ(scratch_now(), 0);
    size_t len;
    unsigned char *file = wmt_read_file(path, &len);
    wm_tensor_info t;
    wm_file_tensor(f, 0, &t);
    CHECK(memcmp(r.mem, file + t.offset, N * each) == 0);
    free(file);
    /* a failure while threads may wait for room: the sink refusing its second item, each pread
     * failing in turn; the read returns (a thread waiting for room wakes when a window is given
     * back, a failed piece's included, and sees the failure), reports that failure and holds
     * nothing */
    r.refuse_at = 2;
    atomic_store(&r.calls, 0);
    CHECK_STATUS(wm_file_read_tensors(f, items, N, &o, &err), WM_EDEVICE);
    CHECK_EQ(scratch_now(), 0);
    r.refuse_at = 0;
    for (uint64_t k = 2; k <= 2 * N; k++) { /* each pread in turn, one item's pieces and on */
        wm__fault_reset();
        wm__fault_pin_cached(1);
        wm__fault_arm(WM_OS_PREAD, k, EIO);
        CHECK_STATUS(wm_file_read_tensors(f, items, N, &o, &err), WM_EIO);
        wm__fault_pin_cached(0);
        wm__fault_reset();
        CHECK_EQ(scratch_now(), 0);
    }
    CHECK_EQ(scratch_now(), 0);
    free(r.mem);
    wm_file_close(f);
}

WM_TEST(sink_serial_is_one_call_at_a_time) {
    const char *path = wmt_make_model("m.gguf", "--size 24M");
    wm_file *f = OPEN_OK(path);
    int most[2];
    for (int serial = 0; serial < 2; serial++) {
        host_set h;
        sink_rec s;
        sink_setup(f, &h, &s, 0);
        wm_read_options o = WM_READ_OPTIONS_INIT;
        o.threads = 4;
        o.window = (size_t)4 << 20;
        o.flags = serial ? WM_READ_SINK_SERIAL : 0;
        o.sink = sink;
        o.sink_user = &s;
        wm_error err;
        CHECK_MSG(wm_file_read_tensors(f, h.items, h.n, &o, &err) == WM_OK, "%s", err.msg);
        most[serial] = atomic_load(&s.most_inside);
        sink_done(&h);
        check_equal_file(f, path, &h);
        host_free(&h);
    }
    CHECK_EQ(most[1], 1);
    fprintf(stderr, "sink calls at once: %d without WM_READ_SINK_SERIAL, %d with it\n", most[0],
            most[1]);
    wm_file_close(f);
}

/* ---- nothing from malloc, nothing kept ---- */

typedef struct read_run {
    wm_file *f;
    host_set h;
    wm_read_options o;
} read_run;

static wm_status read_once(void *user, wm_error *err) {
    read_run *r = user;
    return wm_file_read_tensors(r->f, r->h.items, r->h.n, &r->o, err);
}

/* The clean run's calls: pages (the job table, the stacks, the windows) and reads, and not one
 * block of the counted allocator, the only way the library reaches malloc. Then every call
 * failed in turn: the documented statuses and nothing held. */
static void sweep(bool with_sink, bool prefault, bool whole) {
    const char *path = wmt_make_model("m.gguf", "--size 12M");
    read_run r = {.f = OPEN_OK(path), .o = WM_READ_OPTIONS_INIT};
    r.h = host_items(r.f);
    sink_rec s;
    if (with_sink) {
        host_free(&r.h);
        sink_setup(r.f, &r.h, &s, 0);
        for (size_t i = 1; whole && i < r.h.n; i += 2) /* every other item whole */
            r.h.items[i].flags = WM_READ_WHOLE;
        r.o.sink = sink;
        r.o.sink_user = &s;
    }
    if (prefault) { /* every other item through the sink into memory it names (SINK_WRITES) */
        r.o.flags = WM_READ_PREFAULT;
        for (size_t i = 0; with_sink && i < r.h.n; i += 2)
            r.h.items[i].dst = s.mem[i], r.h.items[i].flags = WM_READ_SINK_WRITES;
    }
    r.o.threads = 3;
    wmt_sweep sw = {.what = "wm_file_read_tensors",
                    .run = read_once,
                    .check = wmt_check_io_status,
                    .user = &r,
                    .shown = "m.gguf"};
    wmt_sweep_result res = {0};
    wmt_sweep_count(&sw, &res);
    CHECK_EQ(res.counts[WM_OS_ALLOC], 0);
    CHECK(res.counts[WM_OS_PAGES] >= 1 && res.counts[WM_OS_PREAD] >= 2);
    static const int errs[] = {EIO, ENOMEM};
    wmt_sweep_any(&sw, errs, 2, &res);
    CHECK(res.failed > 0);
    fprintf(stderr, "%llu calls, %llu faulted runs, %llu failed\n",
            (unsigned long long)res.counts[WM_OS_ANY], (unsigned long long)res.runs,
            (unsigned long long)res.failed);
    if (with_sink) sink_done(&r.h);
    host_free(&r.h);
    wm_file_close(r.f);
}

WM_TEST(fault_sweep_host) { sweep(false, false, false); }
WM_TEST(fault_sweep_sink) { sweep(true, false, false); }
/* the windows of whole items (a pool of the read's) fail to map too */
WM_TEST(fault_sweep_sink_whole) { sweep(true, false, true); }
/* the prefaulting thread's start failed too: a hint, so the read goes on without it */
WM_TEST(fault_sweep_prefault) { sweep(true, true, false); }

/* ---- WM_READ_PREFAULT ----
 * One reading thread, three items: A through the sink, B through the sink into memory it names
 * (WM_READ_SINK_WRITES), C read in place; B's and C's memory fresh anonymous pages. The sink,
 * called for A's first piece, holds the only reader there until every whole page of B and C is
 * resident (mincore), which only another thread can have done: the prefaulting thread, faulting
 * the destinations of the jobs no reader has taken whose bytes are not cached (the file is made
 * cold first). Without the flag the same moment finds them not resident. Then the bytes are the
 * file's and nothing is held. */
typedef struct ahead_rec {
    unsigned char *dst[2]; /* B's and C's */
    size_t len[2];
    unsigned char *a_mem, *b_mem; /* where the sink copies A's and B's bytes */
    const wm_read_item *items;
    bool wait, resident; /* wait: hold until resident; resident: what A's first call saw */
    _Atomic int calls;
} ahead_rec;

static size_t resident_pages(unsigned char *p, size_t len) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = len / page, in = 0;
    unsigned char *v = malloc(n ? n : 1);
    CHECK(mincore(p, n * page, (void *)v) == 0); /* Darwin: char * */
    for (size_t i = 0; i < n; i++)
        in += v[i] & 1;
    free(v);
    return in;
}

static bool ahead_resident(const ahead_rec *r) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return resident_pages(r->dst[0], r->len[0] / page * page) == r->len[0] / page &&
           resident_pages(r->dst[1], r->len[1] / page * page) == r->len[1] / page;
}

static int ahead_sink(void *user, const wm_read_item *item, uint64_t offset, const void *bytes,
                      size_t len) {
    ahead_rec *r = user;
    if (item == &r->items[0] && atomic_fetch_add(&r->calls, 1) == 0) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do {
            r->resident = ahead_resident(r);
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (r->wait && !r->resident) sched_yield();
        } while (r->wait && !r->resident && t.tv_sec - t0.tv_sec < 60); /* a deadlock guard */
    }
    memcpy((item == &r->items[0] ? r->a_mem : r->b_mem) + offset, bytes, len);
    return 0;
}

static void read_ahead_case(const char *path, wm_file *f, bool prefault) {
    size_t idx[3], n_found = 0, count = wm_file_tensor_count(f);
    for (size_t i = 0; i < count && n_found < 3; i++) {
        wm_tensor_info t;
        wm_file_tensor(f, i, &t);
        if (t.nbytes >= ((size_t)64 << 10)) idx[n_found++] = i;
    }
    CHECK_EQ(n_found, 3);
    wm_tensor_info ti[3];
    for (int k = 0; k < 3; k++)
        wm_file_tensor(f, idx[k], &ti[k]);
    ahead_rec r = {.wait = prefault};
    for (int k = 0; k < 2; k++) {
        r.len[k] = ti[k + 1].nbytes;
        r.dst[k] = mmap(NULL, r.len[k], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(r.dst[k] != MAP_FAILED);
#ifdef MADV_NOHUGEPAGE
        (void)madvise(r.dst[k], r.len[k], MADV_NOHUGEPAGE); /* page by page, as counted */
#endif
    }
    r.a_mem = malloc(ti[0].nbytes);
    r.b_mem = r.dst[0]; /* B's sink writes where B's item says */
    CHECK_EQ(resident_pages(r.dst[0], r.len[0]) + resident_pages(r.dst[1], r.len[1]), 0);
    wm_read_item items[3] = {{.tensor = idx[0]},
                             {.tensor = idx[1], .dst = r.dst[0], .flags = WM_READ_SINK_WRITES},
                             {.tensor = idx[2], .dst = r.dst[1]}};
    r.items = items;
    wmt_make_cold(path, 0, 0); /* the thread faults ahead only where the disk must read */
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = 1;
    o.flags = prefault ? WM_READ_PREFAULT : 0;
    o.sink = ahead_sink;
    o.sink_user = &r;
    wm_error err;
    CHECK_MSG(wm_file_read_tensors(f, items, 3, &o, &err) == WM_OK, "%s", err.msg);
    CHECK_MSG(r.resident == prefault,
              "with%s WM_READ_PREFAULT, B's and C's pages were%s resident while the only reader "
              "was still in A",
              prefault ? "" : "out", r.resident ? "" : " not");
    CHECK_EQ(scratch_now(), 0); /* the thread's stack given back */
    size_t len;
    unsigned char *file = wmt_read_file(path, &len);
    CHECK(memcmp(r.a_mem, file + ti[0].offset, ti[0].nbytes) == 0);
    CHECK(memcmp(r.dst[0], file + ti[1].offset, ti[1].nbytes) == 0);
    CHECK(memcmp(r.dst[1], file + ti[2].offset, ti[2].nbytes) == 0);
    free(file);
    free(r.a_mem);
    munmap(r.dst[0], r.len[0]);
    munmap(r.dst[1], r.len[1]);
}

/* Whether this system faults pages in on MADV_POPULATE_WRITE (Linux 5.14+; qemu-user answers 0
 * to madvise hints it does not carry out, so the pages themselves are asked). */
static bool populate_works(void) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *p =
        mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    bool ok =
        madvise(p, 4 * page, 23 /* MADV_POPULATE_WRITE */) == 0 && resident_pages(p, 4 * page) == 4;
    munmap(p, 4 * page);
    return ok;
}

WM_TEST(prefault_runs_ahead_of_the_readers) {
    if (!populate_works())
        WM_SKIP("MADV_POPULATE_WRITE faults nothing in here (before Linux 5.14, or qemu-user)");
    const char *path = wmt_make_model("m.gguf", "--size 24M");
    wm_file *f = OPEN_OK(path);
    read_ahead_case(path, f, false);
    read_ahead_case(path, f, true);
    wm_file_close(f);
}

/* A WM_READ_WHOLE item's memory (WM_READ_SINK_WRITES) is written by its sink once every piece
 * is in, on the thread that read the last one; the prefaulting thread leaves it to that sink
 * (faulting 835 MiB of repacked tensors ahead slowed cold loads: bench/RESULTS.md, llama) and
 * goes on to the next item. The 40M model's token_embd (three pieces) whole, then a plain item
 * into fresh memory, one reading thread, the file cold: the progress callback, after the first
 * piece, holds the only reader until the plain item's pages are resident (the prefaulting thread
 * has passed the whole item), and then none of the whole item's pages may be. With 1.3's rule
 * (every whole item's memory faulted) they all are. */
typedef struct whole_ahead {
    unsigned char *dst, *next;
    size_t len, next_len, resident;
    bool reached;
    int calls;
} whole_ahead;

static int whole_ahead_progress(void *user, uint64_t done, uint64_t total) {
    whole_ahead *r = user;
    if (done == total || r->calls++ > 0) return 0;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        r->reached = resident_pages(r->next, r->next_len / page * page) == r->next_len / page;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (!r->reached) sched_yield();
    } while (!r->reached && t.tv_sec - t0.tv_sec < 20); /* a deadlock guard */
    r->resident = resident_pages(r->dst, r->len / page * page);
    return 0;
}

static int copy_sink(void *user, const wm_read_item *item, uint64_t offset, const void *bytes,
                     size_t len) {
    (void)user;
    memcpy((unsigned char *)item->dst + offset, bytes, len);
    return 0;
}

WM_TEST(prefault_leaves_whole_items_to_their_sink) {
    if (!populate_works())
        WM_SKIP("MADV_POPULATE_WRITE faults nothing in here (before Linux 5.14, or qemu-user)");
    const char *path = wmt_make_model("m40.gguf", "--size 40M");
    wm_file *f = OPEN_OK(path);
    wm_tensor_info t, u;
    CHECK_STATUS(wm_file_tensor(f, 0, &t), WM_OK);
    CHECK(t.nbytes >= ((uint64_t)16 << 20)); /* token_embd: three pieces */
    size_t k = 1;
    for (; k < wm_file_tensor_count(f); k++) { /* a plain item of a megabyte or more */
        CHECK_STATUS(wm_file_tensor(f, k, &u), WM_OK);
        if (u.nbytes >= ((uint64_t)1 << 20)) break;
    }
    CHECK(k < wm_file_tensor_count(f));
    whole_ahead r = {.len = (size_t)t.nbytes, .next_len = (size_t)u.nbytes};
    r.dst = mmap(NULL, r.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    r.next = mmap(NULL, r.next_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(r.dst != MAP_FAILED && r.next != MAP_FAILED);
#ifdef MADV_NOHUGEPAGE
    (void)madvise(r.dst, r.len, MADV_NOHUGEPAGE); /* page by page, as counted */
    (void)madvise(r.next, r.next_len, MADV_NOHUGEPAGE);
#endif
    wm_read_item it[2] = {{.tensor = 0, .dst = r.dst, .flags = WM_READ_WHOLE | WM_READ_SINK_WRITES},
                          {.tensor = k, .dst = r.next}};
    wmt_make_cold(path, 0, 0);
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = 1;
    o.flags = WM_READ_PREFAULT;
    o.sink = copy_sink;
    o.progress = whole_ahead_progress;
    o.progress_user = &r;
    wm_error err;
    CHECK_MSG(wm_file_read_tensors(f, it, 2, &o, &err) == WM_OK, "%s", err.msg);
    CHECK_EQ(r.calls > 0, 1);
    CHECK_MSG(r.reached, "the prefaulting thread never reached the plain item");
    CHECK_MSG(r.resident == 0, "%zu of the whole item's pages were faulted before its sink",
              r.resident);
    size_t len;
    unsigned char *file = wmt_read_file(path, &len);
    CHECK(memcmp(r.dst, file + t.offset, t.nbytes) == 0);
    CHECK(memcmp(r.next, file + u.offset, u.nbytes) == 0);
    free(file);
    munmap(r.dst, r.len);
    munmap(r.next, r.next_len);
    CHECK_EQ(scratch_now(), 0);
    wm_file_close(f);
}

/* ---- refusals ---- */

static void check_refused(wm_file *f, const wm_read_item *items, size_t n, const wm_read_options *o,
                          wm_status want, const char *needle) {
    wm_ledger before = WM_LEDGER_INIT;
    wm_ledger_get(&before);
    wm_error err = {0};
    CHECK_STATUS(wm_file_read_tensors(f, items, n, o, &err), want);
    CHECK_EQ(err.code, want);
    CHECK_MSG_HAS(err, needle);
    wm_ledger after = WM_LEDGER_INIT;
    wm_ledger_get(&after);
    CHECK_EQ(wm_ledger_bytes(&after), wm_ledger_bytes(&before));
}

WM_TEST(refusals_name_the_item) {
    const char *path = wmt_fixture("gguf/stories260K.gguf");
    wm_file *f = OPEN_OK(path);
    unsigned char buf[64];
    wm_read_item bad_index = {.tensor = 48, .dst = buf};
    check_refused(f, &bad_index, 1, NULL, WM_EINVAL, "names tensor 48; the file has 48");
    wm_read_item no_dst = {.tensor = 0};
    check_refused(f, &no_dst, 1, NULL, WM_EINVAL, "has no destination");
    wm_read_item flags = {.tensor = 0, .dst = buf, .flags = 0x8};
    check_refused(f, &flags, 1, NULL, WM_EINVAL, "unknown flags 0x8");
    wm_read_item sink_writes = {.tensor = 0, .flags = WM_READ_SINK_WRITES};
    check_refused(f, &sink_writes, 1, NULL, WM_EINVAL, "is WM_READ_SINK_WRITES with no dst");
    sink_writes.dst = buf; /* the bytes go to a sink, and there is none */
    check_refused(f, &sink_writes, 1, NULL, WM_EINVAL, "the options no sink");
    wm_read_item rows_whole = {.tensor = 0, .flags = WM_READ_SINK_ROWS | WM_READ_WHOLE};
    check_refused(f, &rows_whole, 1, NULL, WM_EINVAL, "is WM_READ_SINK_ROWS with WM_READ_WHOLE");
    wm_read_item rows_dst = {.tensor = 0, .dst = buf, .flags = WM_READ_SINK_ROWS};
    check_refused(f, &rows_dst, 1, NULL, WM_EINVAL, "is WM_READ_SINK_ROWS with a dst");
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.flags = 0x10;
    wm_read_item ok = {.tensor = 0, .dst = buf};
    check_refused(f, &ok, 1, &o, WM_EINVAL, "wm_read_options has unknown flags");
    o.flags = 0;
    o.direct_io = (wm_direct_io)7;
    check_refused(f, &ok, 1, &o, WM_EINVAL, "direct_io 7");
    /* a newer caller's longer struct that sets a field this library does not know */
    struct {
        wm_read_options o;
        uint64_t later;
    } longer = {.o = WM_READ_OPTIONS_INIT, .later = 1};
    longer.o.size = sizeof longer;
    check_refused(f, &ok, 1, &longer.o, WM_EINVAL, "sets a field past");
    CHECK_STATUS(wm_file_read_tensors(NULL, &ok, 1, NULL, NULL), WM_EINVAL);
    CHECK_STATUS(wm_file_read_tensors(f, NULL, 1, NULL, NULL), WM_EINVAL);
    CHECK_STATUS(wm_file_read_tensors(f, NULL, 0, NULL, NULL), WM_OK);
    wm_file_close(f);
}

WM_TEST(sink_refusal_is_edevice) {
    const char *path = wmt_make_model("m.gguf", "--size 8M");
    wm_file *f = OPEN_OK(path);
    host_set h;
    sink_rec s;
    sink_setup(f, &h, &s, 0);
    s.refuse_at = 3;
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = 2;
    o.sink = sink;
    o.sink_user = &s;
    check_refused(f, h.items, h.n, &o, WM_EDEVICE, "the sink refused");
    CHECK_EQ(scratch_now(), 0);
    sink_done(&h);
    host_free(&h);
    wm_file_close(f);
}

static int cancel_at_once(void *user, uint64_t done, uint64_t total) {
    (void)user, (void)done, (void)total;
    return 1;
}

WM_TEST(cancel_is_ecanceled) {
    const char *path = wmt_make_model("m.gguf", "--size 8M");
    wm_file *f = OPEN_OK(path);
    host_set h = host_items(f);
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = 2;
    o.progress = cancel_at_once;
    check_refused(f, h.items, h.n, &o, WM_ECANCELED, "canceled");
    host_free(&h);
    wm_file_close(f);
}

/* An 8M model opened, then cut 100 bytes short (the header promises more than the file has). */
static wm_file *open_then_cut(const char **path) {
    const char *src = wmt_make_model("m.gguf", "--size 8M");
    *path = wmt_tmp("cut.gguf");
    size_t size = wmt_copy_file(src, *path);
    wm_file *f = OPEN_OK(*path);
    CHECK(truncate(*path, (off_t)(size - 100)) == 0);
    return f;
}

WM_TEST(file_cut_after_open_is_eformat) {
    const char *path;
    wm_file *f = open_then_cut(&path);
    host_set h = host_items(f);
    check_refused(f, h.items, h.n, NULL, WM_EFORMAT, "shorter than its header says");
    host_free(&h);
    wm_file_close(f);
}

/* ---- cold bytes go direct, for free ----
 * The reads go through the reading engine's policy (src/read/reader.h): with the default
 * (WM_DIRECT_AUTO) a cold file is read with O_DIRECT and not one page of its tensor data comes
 * into the page cache, the 1 KiB norms between its weights included (read buffered, each
 * started the kernel's readahead: src/read/reader.c, DIRECT_MIN); WM_DIRECT_OFF reads the cold file
 * through the page cache, which then holds it. Measured by the test itself (cachestat or
 * mincore), not through the library. */
WM_TEST(cold_file_read_direct_by_default) {
    const char *path = wmt_make_model("m.gguf", "--size 24M");
    wm_file *f = OPEN_OK(path);
    uint64_t size = wm_file_size(f), data = wm_file_data_offset(f);
    for (int pass = 0; pass < 2; pass++) {
        host_set h = host_items(f);
        wmt_make_cold(path, 0, 0);
        wm_read_options o = WM_READ_OPTIONS_INIT;
        o.threads = 2;
        o.direct_io = pass ? WM_DIRECT_OFF : WM_DIRECT_AUTO;
        wm_error err;
        CHECK_MSG(wm_file_read_tensors(f, h.items, h.n, &o, &err) == WM_OK, "%s", err.msg);
        uint64_t cached = wmt_cached_bytes(path, data, size - data);
        if (pass == 0)
            CHECK_MSG(cached == 0, "auto: %llu bytes of the cold file came into the page cache",
                      (unsigned long long)cached);
        else
            CHECK_MSG(cached >= wm_file_tensor_bytes(f) / 2,
                      "off: only %llu bytes in the page cache", (unsigned long long)cached);
        check_equal_file(f, path, &h);
        host_free(&h);
        CHECK_EQ(scratch_now(), 0);
    }
    wm_file_close(f);
}

/* A file cold before it is opened: the open reads the header through the page cache, and
 * only the header's pages are left there (no readahead past what was read, src/open/open.c),
 * so the load finds the tensor data cold and reads it direct, with nothing of it cached after.
 */
WM_TEST(cold_before_open_read_direct) {
    const char *path = wmt_make_model("m.gguf", "--size 24M");
    wmt_make_cold(path, 0, 0);
    wm_file *f = OPEN_OK(path);
    uint64_t size = wm_file_size(f), data = wm_file_data_offset(f);
    uint64_t after_open = wmt_cached_bytes(path, data, size - data);
    host_set h = host_items(f);
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = 2;
    wm_error err;
    CHECK_MSG(wm_file_read_tensors(f, h.items, h.n, &o, &err) == WM_OK, "%s", err.msg);
    CHECK_MSG(after_open <= (uint64_t)sysconf(_SC_PAGESIZE),
              "%llu bytes of the tensor data cached by the open", (unsigned long long)after_open);
    uint64_t cached = wmt_cached_bytes(path, data, size - data);
    CHECK_MSG(cached == after_open, "%llu bytes of the cold file came into the page cache",
              (unsigned long long)(cached - after_open));
    check_equal_file(f, path, &h);
    host_free(&h);
    CHECK_EQ(scratch_now(), 0);
    wm_file_close(f);
}

/* ---- destinations laid out as the file ----
 * A destination whose address agrees with its tensor's file offset on the 4 KiB grid (as the
 * llama.cpp bridge's own buffers start) gets the blocks wholly inside the tensor by direct reads
 * into place, and only its partial first and last blocks through the thread's staging; nothing
 * outside [dst, dst + nbytes) is written. */

/* A safetensors file of U8 tensors of `sizes`, its header padded with spaces so that the data
 * starts at 4096: every tensor of a size that is a multiple of 4096 then lies on whole blocks. */
static const char *write_block_file(const uint64_t *sizes, size_t n) {
    char hdr[4096 - 8];
    size_t len = 0;
    uint64_t off = 0;
    len += (size_t)snprintf(hdr + len, sizeof hdr - len, "{");
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(hdr + len, sizeof hdr - len,
                                "%s\"t%zu\":{\"dtype\":\"U8\",\"shape\":[%llu],\"data_offsets\":"
                                "[%llu,%llu]}",
                                i ? "," : "", i, (unsigned long long)sizes[i],
                                (unsigned long long)off, (unsigned long long)(off + sizes[i]));
        off += sizes[i];
    }
    len += (size_t)snprintf(hdr + len, sizeof hdr - len, "}");
    CHECK(len < sizeof hdr);
    memset(hdr + len, ' ', sizeof hdr - len);
    const char *path = wmt_tmp("blocks.safetensors");
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    uint64_t hlen = sizeof hdr;
    CHECK(fwrite(&hlen, 8, 1, fp) == 1 && fwrite(hdr, 1, sizeof hdr, fp) == sizeof hdr);
    for (uint64_t k = 0; k < off; k++)
        CHECK(fputc(wmt_cold_byte(k), fp) != EOF);
    CHECK(fclose(fp) == 0);
    return path;
}

/* Every tensor of f into one page-aligned region, at its file offset plus `gap` times its index
 * (gap a multiple of 4096: each place still agrees with the file), the rest of the region
 * filled with 0xA5; reads it cold with O_DIRECT on `threads` threads, checks the bytes and that
 * every byte outside the tensors is still 0xA5, and returns the scratch peak of the read (and
 * in *preads the read calls it made, where asked). */
static uint64_t read_laid_out(const char *path, size_t gap, unsigned threads, uint64_t *preads) {
    wm_file *f = OPEN_OK(path);
    size_t n = wm_file_tensor_count(f), len = (size_t)wm_file_size(f) + n * gap;
    unsigned char *mem =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(mem != MAP_FAILED);
    memset(mem, 0xA5, len);
    wm_read_item *items = calloc(n, sizeof *items);
    for (size_t i = 0; i < n; i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        items[i] = (wm_read_item){.tensor = i, .dst = mem + t.offset + i * gap};
    }
    wmt_make_cold(path, 0, 0);
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = threads;
    o.direct_io = WM_DIRECT_ON;
    wm_ledger_reset_peaks();
    wm__fault_reset();
    wm_error err;
    CHECK_MSG(wm_file_read_tensors(f, items, n, &o, &err) == WM_OK, "%s", err.msg);
    if (preads) *preads = wm__fault_count(WM_OS_PREAD);
    wm_ledger led = WM_LEDGER_INIT;
    wm_ledger_get(&led);
    size_t flen;
    unsigned char *file = wmt_read_file(path, &flen);
    size_t at = 0; /* region bytes checked so far */
    for (size_t i = 0; i < n; i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        size_t place = (size_t)t.offset + i * gap;
        for (; at < place; at++)
            CHECK_MSG(mem[at] == 0xA5, "byte %zu before tensor '%s' was written", at, t.name);
        CHECK_MSG(memcmp(mem + place, file + t.offset, t.nbytes) == 0, "tensor '%s' differs",
                  t.name);
        at = place + t.nbytes;
    }
    for (; at < len; at++)
        CHECK_MSG(mem[at] == 0xA5, "byte %zu past the last tensor was written", at);
    free(file);
    free(items);
    munmap(mem, len);
    CHECK_EQ(scratch_now(), 0);
    wm_file_close(f);
    return led.cat[WM_LEDGER_SCRATCH].peak;
}

WM_TEST(dst_laid_out_as_the_file_read_in_place) {
    /* whole blocks only: no staging at all (with it, a 2 MiB staging per thread that reads) */
    const uint64_t sizes[] = {(uint64_t)3 << 20, 5 * 4096, (uint64_t)9 << 20, 4096};
    uint64_t peak = read_laid_out(write_block_file(sizes, 4), 0, 2, NULL);
    CHECK_MSG(peak < WM__STAGE_BYTES,
              "the read made %llu bytes of scratch: a staging for reads that agree with the file",
              (unsigned long long)peak);
    /* a GGUF file's 32-byte packing: partial first and last blocks, a gap between the places;
     * each piece one read call (its partial blocks in the same call): at most a call per tensor
     * and one per 8 MiB of the file more (with the partial blocks read apart, one more call for
     * each partial block: 218 calls here against 88) */
    const char *path = wmt_make_model("m.gguf", "--size 12M");
    read_laid_out(path, 2 * 4096, 3, NULL);
    uint64_t preads;
    peak = read_laid_out(path, 0, 1, &preads);
    wm_file *f = OPEN_OK(path);
    /* the tail (the last 8 MiB of a one-thread read) in 2 MiB pieces: 4 calls, not 1 */
    uint64_t most = wm_file_tensor_count(f) + wm_file_size(f) / ((uint64_t)8 << 20) + 1 + 3;
    wm_file_close(f);
    CHECK_MSG(preads <= most, "%llu read calls for the file's tensors (at most %llu)",
              (unsigned long long)preads, (unsigned long long)most);
    CHECK_MSG(peak < WM__STAGE_BYTES, "%llu bytes of scratch: a staging for the partial blocks",
              (unsigned long long)peak);
}

/* The sink path too: a cold file's windows come from direct reads. */
WM_TEST(cold_file_sink_direct_by_default) {
    const char *path = wmt_make_model("m.gguf", "--size 12M");
    wm_file *f = OPEN_OK(path);
    uint64_t size = wm_file_size(f), data = wm_file_data_offset(f);
    host_set h;
    sink_rec s;
    sink_setup(f, &h, &s, 0);
    wmt_make_cold(path, 0, 0);
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = 2;
    o.sink = sink;
    o.sink_user = &s;
    wm_error err;
    CHECK_MSG(wm_file_read_tensors(f, h.items, h.n, &o, &err) == WM_OK, "%s", err.msg);
    CHECK_EQ(wmt_cached_bytes(path, data, size - data), 0);
    sink_done(&h);
    check_equal_file(f, path, &h);
    host_free(&h);
    wm_file_close(f);
}

/* A sink job whose first megabytes are cached and the rest not: the cached run is read
 * buffered and the cold run after it with O_DIRECT into the thread's window, where it lies past
 * the job's first block (under UBSan its place was once formed by subtracting a wrapped offset
 * from the job's: src/read/reader.c, read_direct). The warm range [4 MiB, 14 MiB) of the cold
 * file ends 2 MiB into its fifth tensor (each of 3 MiB and a bit). */
WM_TEST(sink_cold_run_after_a_cached_one) {
    const char *path = wmt_cold_file();
    wm_file *f = OPEN_OK(path);
    uint64_t size = wm_file_size(f), warm_end = WMT_WARM_OFF + WMT_WARM_LEN + ((uint64_t)2 << 20);
    host_set h;
    sink_rec s;
    sink_setup(f, &h, &s, 0);
    wmt_make_cold(path, WMT_WARM_OFF, warm_end - WMT_WARM_OFF);
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = 2;
    o.sink = sink;
    o.sink_user = &s;
    wm_error err;
    CHECK_MSG(wm_file_read_tensors(f, h.items, h.n, &o, &err) == WM_OK, "%s", err.msg);
    CHECK_EQ(wmt_cached_bytes(path, warm_end, size - warm_end), 0); /* the cold part: direct */
    sink_done(&h);
    check_equal_file(f, path, &h);
    host_free(&h);
    CHECK_EQ(scratch_now(), 0);
    wm_file_close(f);
}

/* A destination that mirrors the file (wm__read_req.mirror) may be written over the aligned
 * blocks that cover the request and nowhere else: 17 MiB from an offset off the 4 KiB grid,
 * read by the reader itself into memory that is exactly that cover and ends at an inaccessible
 * page (on 4 KiB pages one lies before it too): with O_DIRECT (three 8 MiB segments, the later
 * ones starting past the request's first block) and, under AUTO, cold but for 2 MiB in it (a
 * cold run after a cached one). Every byte comes, by the route asked, and a read outside the
 * cover would fail (EFAULT) or fault. Under UBSan the later runs' place was once formed by
 * subtracting a wrapped offset (src/read/reader.c, read_direct). */
WM_TEST(mirror_reads_stay_in_the_aligned_cover) {
    const char *path = wmt_make_model("m.gguf", "--size 24M");
    wm_file *f = OPEN_OK(path);
    size_t flen, page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *file = wmt_read_file(path, &flen);
    uint64_t off = wm_file_data_offset(f) + 12345, len = (uint64_t)17 << 20;
    CHECK(off + len <= flen);
    uint64_t lo = off / 4096 * 4096, cover = (off + len + 4095) / 4096 * 4096 - lo;
    size_t room = (size_t)(cover + page - 1) / page * page;
    unsigned char *mem = mmap(NULL, room + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(mem != MAP_FAILED);
    CHECK(mprotect(mem + page, room, PROT_READ | PROT_WRITE) == 0);
    unsigned char *at = mem + page + (room - cover); /* the cover, up to the last guard */
    for (int auto_io = 0; auto_io < 2; auto_io++) {
        uint64_t warm_off = lo + ((uint64_t)1 << 20), warm = auto_io ? (uint64_t)2 << 20 : 0;
        wmt_make_cold(path, warm_off, warm);
        wm__reader rd;
        wm_error err;
        CHECK_STATUS(wm__reader_init(&rd, f, auto_io ? WM_DIRECT_AUTO : WM_DIRECT_ON, &err), WM_OK);
        memset(at, 0, (size_t)cover);
        wm__read_req q = {.fd = f->shards[0].fd,
                          .off = off,
                          .len = (size_t)len,
                          .dst = at + (off - lo),
                          .mirror = true};
        wm_status st = wm__read(&rd, &q, NULL, &err);
        CHECK_MSG(st == WM_OK, "%s", err.msg);
        CHECK_MSG(atomic_load(&rd.buffered_bytes) == warm &&
                      atomic_load(&rd.direct_bytes) == len - warm,
                  "%s: %llu bytes read buffered, %llu direct", auto_io ? "auto" : "on",
                  (unsigned long long)atomic_load(&rd.buffered_bytes),
                  (unsigned long long)atomic_load(&rd.direct_bytes));
        CHECK(memcmp(q.dst, file + off, (size_t)len) == 0);
        wm__reader_free(&rd);
    }
    munmap(mem, room + 2 * page);
    free(file);
    CHECK_EQ(scratch_now(), 0);
    wm_file_close(f);
}

/* ---- wm_file_prefetch ----
 * A cold file: the call starts reading the start of the tensor data into memory of the file's
 * own (scratch in the ledger) and returns at once; wm__file_prefetch_wait (src/read/engine.h) joins
 * its threads, so that a test sees every chunk in. The read then copies those bytes, which it shows
 * by succeeding with every pread of the file failing; the bytes never pass through the page
 * cache (O_DIRECT), and after the read (or a close without one) the ledger is back at 0. */

/* The whole file prefetched and awaited, then read with every pread failing. */
WM_TEST(prefetch_reads_ahead_into_its_own_memory) {
    const char *path = wmt_make_model("m.gguf", "--size 24M");
    wm_file *f = OPEN_OK(path);
    uint64_t data = wm_file_data_offset(f), bytes = wm_file_tensor_bytes(f);
    wmt_make_cold(path, 0, 0);
    uint64_t asked = wm_file_prefetch(f, UINT64_MAX); /* all of it, in whole pages */
    CHECK(asked >= bytes && asked <= bytes + 2 * (uint64_t)sysconf(_SC_PAGESIZE));
    CHECK_EQ(wm_file_prefetch(f, 1), 0); /* one at a time: the first is still live */
    wm__file_prefetch_wait(f);
    CHECK(scratch_now() >= asked);                    /* its memory, until the read */
    CHECK_EQ(wmt_cached_bytes(path, data, bytes), 0); /* past the page cache */
    host_set h = host_items(f);
    wm_error err;
    wm__fault_reset();
    wm__fault_arm_sticky(WM_OS_PREAD, 1, EIO); /* the file cannot be read any more */
    wm_status st = wm_file_read_tensors(f, h.items, h.n, NULL, &err);
    uint64_t refused = wm__fault_injected();
    wm__fault_reset();
    CHECK_MSG(st == WM_OK, "the read did not take the prefetched bytes: %s", err.msg);
    CHECK_EQ(refused, 0); /* not one pread asked */
    check_equal_file(f, path, &h);
    host_free(&h);
    CHECK_EQ(scratch_now(), 0);
    CHECK_EQ(wm_file_prefetch(f, UINT64_MAX), 0); /* warm now (check_equal_file read it) */
    wm_file_close(f);
    CHECK_EQ(wm_file_prefetch(NULL, 1), 0);
}

/* Part of the file, and a read that begins at once: every byte right whichever chunks were in,
 * being read (awaited) or not begun (read by the read itself); nothing left in the page cache or
 * the ledger. And a close without a read. */
WM_TEST(prefetch_part_then_read_at_once) {
    const char *path = wmt_make_model("m.gguf", "--size 24M");
    wm_file *f = OPEN_OK(path);
    uint64_t data = wm_file_data_offset(f), size = wm_file_size(f);
    for (int round = 0; round < 4; round++) {
        wmt_make_cold(path, 0, 0);
        uint64_t asked = wm_file_prefetch(f, (uint64_t)(round + 1) * (5 << 20));
        CHECK(asked > 0);
        host_set h = host_items(f);
        wm_read_options o = WM_READ_OPTIONS_INIT;
        o.threads = 3;
        wm_error err;
        CHECK_MSG(wm_file_read_tensors(f, h.items, h.n, &o, &err) == WM_OK, "%s", err.msg);
        /* the parts of tensors cut by the prefetch's chunks too, however short */
        CHECK_EQ(wmt_cached_bytes(path, data, size - data), 0);
        check_equal_file(f, path, &h);
        host_free(&h);
        CHECK_EQ(scratch_now(), 0);
    }
    wmt_make_cold(path, 0, 0);
    CHECK(wm_file_prefetch(f, 8 << 20) > 0);
    wm_file_close(f);
    CHECK_EQ(scratch_now(), 0);
}

/* Two reads of one file at once after a prefetch (a wm_file is read by several threads at once,
 * include/weightmap.h): the one that ends first drops the prefetch's memory while the other may
 * still be copying from it or awaiting one of its chunks. Both get the file's bytes, and nothing
 * is held after. */
/* One read of every tensor on a thread of its own (or the caller's): its status, and when it
 * has returned. */
typedef struct bg_read {
    wm_file *f;
    host_set h;
    wm_status st;
    _Atomic int done;
} bg_read;

static void *bg_main(void *arg) {
    bg_read *t = arg;
    wm_read_options o = WM_READ_OPTIONS_INIT;
    o.threads = 2;
    t->st = wm_file_read_tensors(t->f, t->h.items, t->h.n, &o, NULL);
    atomic_store(&t->done, 1);
    return NULL;
}

WM_TEST(prefetch_then_two_reads_at_once) {
    const char *path = wmt_make_model("m.gguf", "--size 24M");
    wm_file *f = OPEN_OK(path);
    for (int round = 0; round < 12; round++) {
        wmt_make_cold(path, 0, 0);
        CHECK(wm_file_prefetch(f, (uint64_t)(round % 4 + 1) * (4 << 20)) > 0);
        bg_read t[2] = {{.f = f, .h = host_items(f)}, {.f = f, .h = host_items(f)}};
        pthread_t th;
        CHECK_EQ(pthread_create(&th, NULL, bg_main, &t[1]), 0);
        bg_main(&t[0]);
        pthread_join(th, NULL);
        for (int k = 0; k < 2; k++) {
            CHECK_STATUS(t[k].st, WM_OK);
            check_equal_file(f, path, &t[k].h);
            host_free(&t[k].h);
        }
        CHECK_EQ(scratch_now(), 0);
    }
    wm_file_close(f);
}

/* The drop waits for the reads that may still use the read ahead: a reader counted in
 * pre_users (as wm__read counts itself before it loads f->pre) keeps the prefetch's memory
 * mapped and in the ledger after a wm_file_read_tensors on another thread has taken it off the
 * file, and that read returns only once the reader is gone. Without the wait the read freed the
 * memory at once and returned (the check below, after up to 100000 yields, fails). */
WM_TEST(prefetch_drop_waits_for_readers) {
    const char *path = wmt_make_model("m.gguf", "--size 24M");
    bg_read d = {.f = OPEN_OK(path)};
    d.h = host_items(d.f);
    wmt_make_cold(path, 0, 0);
    uint64_t asked = wm_file_prefetch(d.f, 8 << 20);
    CHECK(asked > 0);
    atomic_fetch_add(&d.f->pre_users, 1); /* a reader inside wm__read, on no thread of the test */
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, bg_main, &d), 0);
    while (atomic_load(&d.f->pre) != NULL && !atomic_load(&d.done)) /* the read's end began */
        sched_yield();
    for (int k = 0; k < 100000 && !atomic_load(&d.done); k++)
        sched_yield();
    CHECK(!atomic_load(&d.done));
    CHECK(scratch_now() >= asked);
    atomic_fetch_sub(&d.f->pre_users, 1);
    pthread_join(th, NULL);
    CHECK_STATUS(d.st, WM_OK);
    CHECK_EQ(scratch_now(), 0);
    check_equal_file(d.f, path, &d.h);
    host_free(&d.h);
    wm_file_close(d.f);
}

/* A file cut after the open: the prefetch's reads of the missing end fail, the read finds the
 * cut itself and says so as without a prefetch, and nothing is held. */
WM_TEST(prefetch_of_a_cut_file) {
    const char *path;
    wm_file *f = open_then_cut(&path);
    wmt_make_cold(path, 0, 0);
    CHECK(wm_file_prefetch(f, UINT64_MAX) > 0);
    wm__file_prefetch_wait(f);
    host_set h = host_items(f);
    wm_error err;
    CHECK_STATUS(wm_file_read_tensors(f, h.items, h.n, NULL, &err), WM_EFORMAT);
    CHECK_MSG(strstr(err.msg, "shorter than its header says") && strstr(err.msg, "cut.gguf"), "%s",
              err.msg);
    host_free(&h);
    CHECK_EQ(scratch_now(), 0);
    wm_file_close(f);
}

/* Each call the prefetch makes (its pages, threads, lock, descriptors, reads) failed in turn:
 * the prefetch gives up or reads less, the read after it is whole, nothing is held. */
WM_TEST(fault_sweep_prefetch_itself) {
    const char *path = wmt_make_model("m.gguf", "--size 8M");
    wm_file *f = OPEN_OK(path);
    wmt_make_cold(path, 0, 0);
    wm__fault_reset();
    (void)wm_file_prefetch(f, UINT64_MAX);
    wm__file_prefetch_wait(f);
    uint64_t n = wm__fault_count(WM_OS_ANY);
    wm__file_prefetch_drop(f);
    CHECK(n > 4);
    for (uint64_t k = 1; k <= n; k++) {
        wmt_make_cold(path, 0, 0);
        wm__fault_reset();
        wm__fault_arm(WM_OS_ANY, k, k % 2 ? EIO : ENOMEM);
        (void)wm_file_prefetch(f, UINT64_MAX);
        wm__file_prefetch_wait(f);
        CHECK_MSG(wm__fault_injected() == 1, "call %llu of %llu not failed", (unsigned long long)k,
                  (unsigned long long)n);
        wm__fault_reset();
        host_set h = host_items(f);
        wm_error err;
        CHECK_MSG(wm_file_read_tensors(f, h.items, h.n, NULL, &err) == WM_OK, "call %llu: %s",
                  (unsigned long long)k, err.msg);
        check_equal_file(f, path, &h);
        host_free(&h);
        CHECK_EQ(scratch_now(), 0);
    }
    wm_file_close(f);
}

/* Every call of open, prefetch, read and close failed in turn: nothing held, whatever failed
 * (the prefetch a hint: its thread or its WILLNEED refused, the read goes on). */
static wm_status prefetch_read_once(void *user, wm_error *err) {
    const char *path = user;
    wm_file *f = NULL;
    wm_status st = wm_file_open(path, &f, err);
    if (st) return st;
    (void)wm_file_prefetch(f, (uint64_t)1 << 20);
    host_set h = host_items(f);
    st = wm_file_read_tensors(f, h.items, h.n, NULL, err);
    host_free(&h);
    wm_file_close(f);
    return st;
}

WM_TEST(fault_sweep_prefetch) {
    const char *path = wmt_make_model("m.gguf", "--size 8M");
    wmt_sweep sw = {.what = "open, wm_file_prefetch, read, close",
                    .run = prefetch_read_once,
                    .check = wmt_check_io_status,
                    .user = (void *)path,
                    .path = path,
                    .shown = "m.gguf"};
    wmt_sweep_result res = {0};
    wmt_sweep_count(&sw, &res);
    static const int errs[] = {EIO, ENOMEM};
    wmt_sweep_any(&sw, errs, 2, &res);
    CHECK(res.failed > 0);
}
