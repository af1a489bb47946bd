/*
 * items.c: wm_file_read_tensors' items laid out as jobs of the reading engine (engine.h) and run.
 * A run of its own (the file, a reader, the threads, the caller's progress) and page allocations
 * for the order of the items and for the job table with the WM_READ_WHOLE items' states, so the
 * calling thread takes nothing from malloc. Jobs with a destination and a WM_READ_WHOLE item's
 * pieces are cut where the file offset crosses a multiple of WM_JOB_BYTES (so that a destination
 * laid out as the file reads every block but its first and last in place, direct: reader.c); a
 * whole item's pieces are read into one window (whole_job); jobs for the sink are pieces of one
 * thread's window share.
 *
 * Order: the WM_READ_WHOLE items come first, the biggest first, then the rest in the caller's
 * order. A whole item is handed over only once its last piece is in and its sink (a repack, say)
 * then works on one thread, so the biggest one last would leave the disk with one reader, or
 * none, at the end (on the H200 host, llama.cpp's 133 MiB output matrix last in the file).
 *
 * The tail: the last threads x WM_JOB_BYTES bytes, in that order, are cut into pieces of at most
 * TAIL_PIECE (whole items' on a TAIL_PIECE file grid). Each thread's last job ends when it ends,
 * and with 8 MiB jobs on a disk that 16 threads share a job takes 80 ms or so: the threads that
 * finish first leave the disk with fewer readers for up to that long. Smaller last jobs even the
 * ends out; earlier ones stay big (fewer calls, fewer sink calls).
 */
#include "engine.h"

#define DEFAULT_WINDOW ((size_t)64 << 20)
#define MIN_WINDOW_EACH ((size_t)1 << 20)
#define TAIL_PIECE ((size_t)2 << 20)

/* Where the engine reads an item's bytes itself: its dst, unless the sink writes there. */
static unsigned char *read_dst(const wm_read_item *it) {
    return it->flags & WM_READ_SINK_WRITES ? NULL : it->dst;
}

static bool is_whole(const wm_read_item *it) {
    return !read_dst(it) && (it->flags & WM_READ_WHOLE);
}

/* A WM_READ_SINK_ROWS item's group: row_group rows (at least 1) of its bytes, or the whole
 * tensor where that is less (or the rows cannot be told: a tensor of no elements). */
static uint64_t group_bytes(const wm__tensor *t, uint32_t row_group) {
    uint64_t rows = t->ne[0] ? t->n_elements / t->ne[0] : 0;
    if (rows == 0 || t->nbytes % rows) return t->nbytes;
    uint64_t row = t->nbytes / rows, g = row_group ? row_group : 1;
    return g >= rows ? t->nbytes : row * g;
}

/* The end of the piece that starts `off` bytes into the tensor: (a whole item's, or one read
 * into its dst) the next file offset on a multiple of the piece's size, so that the pieces of a
 * destination laid out as the file meet on whole direct-read blocks (reader.c, read_direct);
 * else `piece` bytes on (a WM_READ_SINK_ROWS item's: rounded down to whole groups, at least
 * one); at most the tensor's end. */
static uint64_t piece_end(const wm_read_item *it, const wm__tensor *t, uint64_t off, bool tail,
                          size_t window_each, uint32_t row_group) {
    uint64_t at;
    if (is_whole(it) || read_dst(it)) {
        uint64_t grid = tail ? TAIL_PIECE : WM_JOB_BYTES, file = t->offset + off;
        at = (file / grid + 1) * grid - t->offset;
    } else {
        size_t piece = window_each;
        uint64_t len = tail && piece > TAIL_PIECE ? TAIL_PIECE : piece;
        if (it->flags & WM_READ_SINK_ROWS) {
            uint64_t g = group_bytes(t, row_group);
            len = len > g ? len / g * g : g;
        }
        at = off + len;
    }
    return at < t->nbytes ? at : t->nbytes;
}

/* Whether item a goes before item b: whole items first, the bigger first, then by index. */
static bool before(const wm_file *f, const wm_read_item *items, size_t a, size_t b) {
    bool wa = is_whole(&items[a]), wb = is_whole(&items[b]);
    if (wa != wb) return wa;
    uint64_t na = wa ? f->tensors[items[a].tensor].nbytes : 0;
    uint64_t nb = wb ? f->tensors[items[b].tensor].nbytes : 0;
    return na != nb ? na > nb : a < b;
}

/* order[0 .. n): the items' indices sorted by `before` (a heap sort: in place, no allocation). */
static void sift(const wm_file *f, const wm_read_item *items, size_t *order, size_t root,
                 size_t n) {
    for (size_t child; (child = 2 * root + 1) < n; root = child) {
        if (child + 1 < n && before(f, items, order[child], order[child + 1])) child++;
        if (!before(f, items, order[root], order[child])) return;
        size_t t = order[root];
        order[root] = order[child];
        order[child] = t;
    }
}

static void sort_items(const wm_file *f, const wm_read_item *items, size_t n, size_t *order) {
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = n / 2; i-- > 0;)
        sift(f, items, order, i, n);
    for (size_t end = n; end > 1; end--) {
        size_t t = order[0];
        order[0] = order[end - 1];
        order[end - 1] = t;
        sift(f, items, order, 0, end - 1);
    }
}

/* The items cut into jobs, in order; the tail (the bytes from tail_from on) in small pieces.
 * Counts only (the jobs and the whole items) when jobs is NULL, else fills jobs and wholes. */
typedef struct layout {
    const wm_file *f;
    const wm_read_item *items;
    const size_t *order;
    size_t n, window_each;
    uint32_t row_group; /* wm_read_options.row_group */
    uint64_t tail_from;
    size_t jobs, wholes; /* counted */
} layout;

static void lay_jobs(layout *lo, wm__job *jobs, wm__whole *wholes) {
    uint64_t at = 0; /* bytes before the item, in order */
    lo->jobs = lo->wholes = 0;
    for (size_t o = 0; o < lo->n; o++) {
        const wm_read_item *it = &lo->items[lo->order[o]];
        const wm__tensor *t = &lo->f->tensors[it->tensor];
        wm__whole *h = NULL;
        if (t->nbytes && is_whole(it)) {
            if (wholes) {
                h = &wholes[lo->wholes];
                h->slot = -1;
                atomic_init(&h->base, NULL);
                atomic_init(&h->left, t->nbytes);
            }
            lo->wholes++;
        }
        for (uint64_t off = 0, end; off < t->nbytes; off = end) {
            end = piece_end(it, t, off, at + off >= lo->tail_from, lo->window_each, lo->row_group);
            if (jobs)
                jobs[lo->jobs] = (wm__job){.shard = t->shard,
                                           .file_off = t->offset + off,
                                           .len = (size_t)(end - off),
                                           .dst = read_dst(it) ? read_dst(it) + off : NULL,
                                           .from = (wm_type)t->type,
                                           .to = (wm_type)t->type,
                                           .tensor = (uint32_t)it->tensor,
                                           .rows = 1,
                                           .item = it,
                                           .item_off = off,
                                           .whole = h};
            lo->jobs++;
        }
        at += t->nbytes;
    }
}

static wm_status pages(const wm_file *f, size_t len, const char *what, void **p, wm_error *err) {
    int e = wm__scratch_alloc(len, p);
    return e ? wm__err(err, WM_ENOMEM, e, "%s: allocating %zu bytes of %s: %s", f->path, len, what,
                       wm__errno_text(e))
             : WM_OK;
}

wm_status wm__read_items(const wm_file *f, const wm_read_item *items, size_t n,
                         const wm_read_options *o, wm_error *err) {
    size_t page = wm__os_page_size();
    unsigned threads = wm__read_threads(o->threads);
    size_t each = (o->window ? o->window : DEFAULT_WINDOW) / (threads ? threads : 1);
    if (each < MIN_WINDOW_EACH) each = MIN_WINDOW_EACH;
    if (each > WM_JOB_BYTES) each = WM_JOB_BYTES;
    each = each / page * page;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += f->tensors[items[i].tensor].nbytes;
    if (total == 0) return WM_OK;
    if (n > (SIZE_MAX - page) / sizeof(size_t))
        return wm__err(err, WM_ENOMEM, 0, "%s: %zu read items do not fit in memory", f->path, n);
    size_t order_len = (n * sizeof(size_t) + page - 1) / page * page;
    void *order;
    wm_status st = pages(f, order_len, "read order", &order, err);
    if (st) return st;
    sort_items(f, items, n, order);
    uint64_t tail = (uint64_t)(threads ? threads : 1) * WM_JOB_BYTES;
    layout lo = {.f = f,
                 .items = items,
                 .order = order,
                 .n = n,
                 .window_each = each,
                 .row_group = o->row_group,
                 .tail_from = total > tail ? total - tail : 0};
    lay_jobs(&lo, NULL, NULL);
    /* the table: the jobs, then the whole items' states */
    size_t nj = lo.jobs, nw = lo.wholes, room = SIZE_MAX - page;
    size_t table = 0;
    void *p = NULL;
    if (nj > room / sizeof(wm__job) || nw > (room - nj * sizeof(wm__job)) / sizeof(wm__whole))
        st = wm__err(err, WM_ENOMEM, 0, "%s: %zu read jobs do not fit in memory", f->path, nj);
    else
        table = (nj * sizeof(wm__job) + nw * sizeof(wm__whole) + page - 1) / page * page;
    if (!st) st = pages(f, table, "read jobs", &p, err);
    if (!st) {
        lay_jobs(&lo, p, (wm__whole *)(void *)((unsigned char *)p + nj * sizeof(wm__job)));
        wm__reader rd;
        wm__read_run run = {.file = f,
                            .rd = &rd,
                            .threads = threads,
                            .progress = o->progress,
                            .progress_user = o->progress_user};
        wm__sink sink = {
            .fn = o->sink, .user = o->sink_user, .window_each = each, .flags = o->flags};
        st = wm__reader_init(&rd, f, o->direct_io, err);
        if (!st) st = wm__run_jobs(&run, p, nj, &sink, err);
        wm__reader_free(&rd);
    }
    wm__scratch_free(p, table);
    wm__scratch_free(order, order_len);
    return st;
}
