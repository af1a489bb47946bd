/*
 * read.c: wm_file_read_tensors (include/weightmap.h), the public face of reading tensors into
 * memory the caller owns: the arguments and the options struct are checked, every item before
 * anything is read, then the reading engine of src/backend/host.c (wm__read_items) does the
 * work.
 */
#include "backend/host.h"

#include <string.h>

#define WM__READ_OPTIONS_SIZE_1_2 WM__END_OF(wm_read_options, progress_user)

static wm_status check_items(const wm_file *f, const wm_read_item *items, size_t n,
                             const wm_read_options *o, wm_error *err) {
    for (size_t i = 0; i < n; i++) {
        const wm_read_item *it = &items[i];
        if (it->tensor >= f->n_tensors)
            return wm__err(err, WM_EINVAL, 0,
                           "%s: read item %zu names tensor %zu; the file has %zu", f->path, i,
                           it->tensor, f->n_tensors);
        if (it->flags & ~(WM_READ_WHOLE | WM_READ_SINK_WRITES | WM_READ_SINK_ROWS))
            return wm__err(err, WM_EINVAL, 0, "%s: read item %zu has unknown flags 0x%x", f->path,
                           i, (unsigned)it->flags);
        if ((it->flags & WM_READ_SINK_ROWS) &&
            ((it->flags & WM_READ_WHOLE) || (it->dst && !(it->flags & WM_READ_SINK_WRITES))))
            return wm__err(
                err, WM_EINVAL, 0, "%s: read item %zu (tensor '%s') is WM_READ_SINK_ROWS with %s",
                f->path, i, f->names + f->tensors[it->tensor].name_off,
                (it->flags & WM_READ_WHOLE) ? "WM_READ_WHOLE" : "a dst to read into (no sink)");
        if ((it->flags & WM_READ_SINK_WRITES) && !it->dst)
            return wm__err(err, WM_EINVAL, 0,
                           "%s: read item %zu (tensor '%s') is WM_READ_SINK_WRITES with no dst",
                           f->path, i, f->names + f->tensors[it->tensor].name_off);
        if ((!it->dst || (it->flags & WM_READ_SINK_WRITES)) && !o->sink)
            return wm__err(err, WM_EINVAL, 0,
                           "%s: read item %zu (tensor '%s') has no destination and the options "
                           "no sink",
                           f->path, i, f->names + f->tensors[it->tensor].name_off);
    }
    return WM_OK;
}

/* ---- prefetch: a read ahead into memory the file holds ----
 *
 * The bytes are read past the page cache (O_DIRECT where the file system allows it) by a few
 * threads, a chunk at a time in file order, into one page allocation that mirrors the ranges
 * asked for. A read of the file then copies what is in (wm__pre_part, from wm__read), awaits a
 * chunk being read, and reads every other byte itself. Through the page cache instead (1.3's
 * POSIX_FADV_WILLNEED), the kernel's readahead read at a fraction of the disk's speed beside the
 * model's making, and a chunk still in flight when the read began was read a second time: on
 * the H200 host 128 MiB asked for saved 40 ms of a 65 ms head start (bench/RESULTS.md, llama). */

#define PRE_CHUNK ((uint64_t)4 << 20) /* doubled until the chunks fit PRE_CHUNKS */
#define PRE_CHUNKS 256
#define PRE_RANGES 4
#define PRE_THREADS 16 /* at most; they wait on the disk, not on a CPU */

/* A chunk's state. NOT: refused by the file, or left to the read (taken before any thread). */
enum { CH_FREE, CH_READING, CH_READ, CH_NOT };

typedef struct pre_range {
    uint32_t shard;
    uint32_t first;  /* its first chunk */
    uint32_t tensor; /* a tensor of the shard (named should a read of it fail: never shown) */
    uint64_t off;    /* file bytes [off, off + len), off on the page grid */
    uint64_t len;
    uint64_t end;   /* the shard's last tensor byte + 1, or less: what the chunks read */
    uint64_t lead;  /* off - the chunk grid's line at or before it: chunks lie on the file's
                       chunk grid (the first one shorter), as the reads' 8 MiB pieces do, so
                       that a piece takes whole chunks, not a part of one and the rest read */
    size_t mem_off; /* where they lie in mem */
} pre_range;

typedef struct wm__pre {
    wm_file *f;
    size_t self_len;
    unsigned char *mem;
    size_t mem_len;
    pre_range r[PRE_RANGES];
    uint32_t n_ranges;
    uint32_t n_chunks;
    uint64_t chunk;
    _Atomic unsigned char state[PRE_CHUNKS];
    atomic_uint next;
    atomic_bool stop;
    wm__reader rd;
    bool rd_made, lock_made, cond_made;
    wm_os_mutex lock; /* with cond: a chunk's end, for a read that awaits it */
    wm_os_cond cond;
    wm_os_thread th[PRE_THREADS];
    unsigned n_threads; /* started and not yet joined (their stacks in the ledger as scratch) */
} wm__pre;

/* Chunk k: its range, and its bytes' place in the file and in mem. */
static const pre_range *pre_chunk(const wm__pre *p, uint32_t k, uint64_t *off, size_t *len,
                                  unsigned char **mem) {
    uint32_t i = 0;
    while (i + 1 < p->n_ranges && p->r[i + 1].first <= k)
        i++;
    const pre_range *r = &p->r[i];
    uint64_t line = r->off - r->lead + (uint64_t)(k - r->first) * p->chunk; /* on the grid */
    *off = line > r->off ? line : r->off;
    uint64_t end = line + p->chunk < r->end ? line + p->chunk : r->end; /* not the pages' last */
    *len = (size_t)(end - *off);
    *mem = p->mem + r->mem_off + (*off - r->off);
    return r;
}

static void pre_end_chunk(wm__pre *p, uint32_t k, unsigned char to) {
    wm__os_mutex_lock(&p->lock);
    atomic_store(&p->state[k], to);
    wm__os_cond_broadcast(&p->cond);
    wm__os_mutex_unlock(&p->lock);
}

/* A reading thread: chunks in file order until none is left or the read has begun. */
static void *pre_main(void *arg) {
    wm__pre *p = arg;
    while (!atomic_load(&p->stop)) {
        uint32_t k = atomic_fetch_add(&p->next, 1);
        if (k >= p->n_chunks) break;
        unsigned char free_ = CH_FREE;
        if (!atomic_compare_exchange_strong(&p->state[k], &free_, CH_READING)) continue;
        wm__read_req q = {.mirror = true}; /* mem mirrors the file on the page grid */
        const pre_range *r = pre_chunk(p, k, &q.off, &q.len, &q.dst);
        q.shard = r->shard;
        q.fd = p->f->shards[r->shard].fd;
        q.tensor = r->tensor;
        wm_error e;
        bool ok = wm__read(&p->rd, &q, NULL, &e) == WM_OK;
        pre_end_chunk(p, k, ok ? CH_READ : CH_NOT);
        if (!ok) atomic_store(&p->stop, true); /* the read meets the failure itself, and says it */
    }
    return NULL;
}

static void pre_join(wm__pre *p) {
    for (unsigned i = 0; i < p->n_threads; i++) {
        size_t len = p->th[i].stack_len;
        wm__os_thread_join(&p->th[i]);
        wm__ledger_release(WM_LEDGER_SCRATCH, len);
    }
    p->n_threads = 0;
}

/* The one release of a read ahead, whatever of it was made. */
static void pre_free(wm__pre *p) {
    atomic_store(&p->stop, true);
    pre_join(p);
    /* bytes read through the page cache (no O_DIRECT here): the cache as it was found */
    if (p->rd_made && atomic_load(&p->rd.buffered_bytes))
        for (uint32_t i = 0; i < p->n_ranges; i++)
            (void)wm__os_file_drop(p->f->shards[p->r[i].shard].fd, p->r[i].off, p->r[i].len);
    if (p->rd_made) wm__reader_free(&p->rd);
    if (p->cond_made) wm__os_cond_destroy(&p->cond);
    if (p->lock_made) wm__os_mutex_destroy(&p->lock);
    wm__scratch_free(p->mem, p->mem_len);
    wm__scratch_free(p, p->self_len);
}

/* The ranges of a prefetch of `bytes`: each shard's tensor data from its first byte, in order,
 * until `bytes`; none from a shard a quarter or more cached (a warm file needs none) on. */
static uint64_t pre_ranges(const wm_file *f, uint64_t bytes, pre_range *r, uint32_t *n_out) {
    uint64_t left = bytes, asked = 0, page = wm__os_page_size();
    uint32_t n = 0;
    for (uint32_t s = 0; s < f->n_shards && left && n < PRE_RANGES; s++) {
        uint64_t a = UINT64_MAX, b = 0, cached;
        uint32_t tensor = 0;
        for (size_t t = 0; t < f->n_tensors; t++) /* the shard's tensor data: first to last byte */
            if (f->tensors[t].shard == s && f->tensors[t].nbytes) {
                if (f->tensors[t].offset < a) a = f->tensors[t].offset, tensor = (uint32_t)t;
                if (f->tensors[t].offset + f->tensors[t].nbytes > b)
                    b = f->tensors[t].offset + f->tensors[t].nbytes;
            }
        if (b <= a) continue;
        /* Asked of the shard's whole tensor data, not of the range: the open's header read has
         * the kernel's readahead bring in the first megabytes after the header (up to its
         * window, 8 MiB here), which may be much of a small range. */
        if (wm__os_cached(f->shards[s].fd, a, b - a, &cached) != 0 || cached > (b - a) / 4) break;
        uint64_t len = b - a < left ? b - a : left, end = a + len;
        len = (end + page - 1) / page * page - a / page * page; /* whole pages */
        r[n] = (pre_range){
            .shard = s, .tensor = tensor, .off = a / page * page, .len = len, .end = end};
        n++;
        asked += len;
        left = len < left ? left - len : 0;
    }
    *n_out = n;
    return asked;
}

uint64_t wm_file_prefetch(wm_file *f, uint64_t bytes) {
    if (!f || !bytes || atomic_load(&f->pre)) return 0;
    pre_range r[PRE_RANGES];
    uint32_t n = 0;
    uint64_t asked = pre_ranges(f, bytes, r, &n);
    if (n == 0) return 0;
    uint64_t chunk = PRE_CHUNK, chunks;
    for (;; chunk *= 2) {
        chunks = 0;
        for (uint32_t i = 0; i < n; i++)
            chunks += (r[i].off % chunk + r[i].len + chunk - 1) / chunk;
        if (chunks <= PRE_CHUNKS) break;
    }
    size_t page = wm__os_page_size(), self_len = (sizeof(wm__pre) + page - 1) / page * page;
    void *mem;
    wm__pre *p;
    if (wm__scratch_alloc(self_len, &mem)) return 0;
    p = mem;
    p->f = f;
    p->self_len = self_len;
    p->n_ranges = n;
    p->n_chunks = (uint32_t)chunks;
    p->chunk = chunk;
    uint32_t first = 0;
    for (uint32_t i = 0; i < n; i++) {
        p->r[i] = r[i];
        p->r[i].first = first;
        p->r[i].mem_off = p->mem_len;
        p->r[i].lead = r[i].off % chunk;
        first += (uint32_t)((p->r[i].lead + r[i].len + chunk - 1) / chunk);
        p->mem_len += (size_t)r[i].len; /* whole pages already */
    }
    p->mem_len = wm__os_huge_len(p->mem_len);
    for (uint32_t k = 0; k < PRE_CHUNKS; k++)
        atomic_init(&p->state[k], CH_FREE);
    atomic_init(&p->next, 0);
    atomic_init(&p->stop, false);
    if (wm__scratch_alloc(p->mem_len, &mem)) {
        p->mem_len = 0;
        pre_free(p);
        return 0;
    }
    p->mem = mem;
    /* a hint: a direct read into huge pages is a few long segments (reader.c, the staging) */
    (void)wm__os_advise(p->mem, p->mem_len, WM_OS_ADV_HUGEPAGE);
    wm_error e;
    p->rd_made = wm__reader_init(&p->rd, f, WM_DIRECT_ON, &e) == WM_OK;
    p->rd.no_prefetch = true; /* its reads are the read ahead's own */
    for (uint32_t i = 0; p->rd_made && i < n; i++)
        wm__reader_open(&p->rd, r[i].shard);
    p->lock_made = p->rd_made && wm__os_mutex_init(&p->lock) == 0;
    p->cond_made = p->lock_made && wm__os_cond_init(&p->cond) == 0;
    unsigned want = wm__os_cpu_count();
    if (want > PRE_THREADS) want = PRE_THREADS;
    if (want > p->n_chunks) want = p->n_chunks;
    for (unsigned i = 0; p->cond_made && i < want; i++) {
        if (wm__os_thread_start(&p->th[i], pre_main, p) != 0) break;
        p->n_threads++;
        wm__ledger_acquire(WM_LEDGER_SCRATCH, p->th[i].stack_len);
    }
    if (p->n_threads == 0) {
        pre_free(p);
        return 0;
    }
    atomic_store(&f->pre, p);
    return asked;
}

void wm__file_prefetch_stop(wm_file *f) {
    wm__pre *p = atomic_load(&f->pre);
    if (p) atomic_store(&p->stop, true);
}

void wm__file_prefetch_wait(wm_file *f) {
    wm__pre *p = atomic_load(&f->pre);
    if (p) pre_join(p);
}

void wm__file_prefetch_drop(wm_file *f) {
    wm__pre *p = atomic_exchange(&f->pre, NULL);
    if (!p) return;
    /* a wm__read that counted itself before the exchange may still copy from p or await one of
     * its chunks (whose reading threads finish it); one that counts itself after finds NULL */
    while (atomic_load(&f->pre_users) != 0)
        wm__os_yield();
    pre_free(p);
}

/* Chunk k for a read: READ (copy it), or NOT (read it yourself: a free chunk is taken so, and
 * no thread reads it after); a chunk being read is awaited. */
static unsigned char pre_take(wm__pre *p, uint32_t k) {
    unsigned char s = CH_FREE;
    if (atomic_compare_exchange_strong(&p->state[k], &s, CH_NOT)) return CH_NOT;
    if (s == CH_READING) {
        wm__os_mutex_lock(&p->lock);
        while ((s = atomic_load(&p->state[k])) == CH_READING)
            wm__os_cond_wait(&p->cond, &p->lock);
        wm__os_mutex_unlock(&p->lock);
    }
    return s;
}

size_t wm__pre_part(const wm_file *f, uint32_t shard, uint64_t off, size_t len, unsigned char *dst,
                    bool *copied) {
    *copied = false;
    wm__pre *p = atomic_load_explicit(&((wm_file *)(uintptr_t)f)->pre, memory_order_acquire);
    if (!p) return len;
    size_t n = len;
    for (uint32_t i = 0; i < p->n_ranges; i++) {
        const pre_range *r = &p->r[i];
        if (r->shard != shard || off + len <= r->off || off >= r->off + r->len) continue;
        if (off < r->off) { /* up to the range */
            if (r->off - off < n) n = (size_t)(r->off - off);
            continue;
        }
        uint64_t j = (off - r->off + r->lead) / p->chunk; /* its chunk, and that one's end */
        uint64_t end = r->off - r->lead + (j + 1) * p->chunk;
        if (end > r->off + r->len) end = r->off + r->len;
        n = (size_t)(end - off < len ? end - off : len);
        if (pre_take(p, r->first + (uint32_t)j) == CH_READ) {
            memcpy(dst, p->mem + r->mem_off + (off - r->off), n);
            *copied = true;
        }
        return n;
    }
    return n;
}

/* ---- reading ---- */

wm_status wm_file_read_tensors(const wm_file *file, const wm_read_item *items, size_t n,
                               const wm_read_options *opts, wm_error *err) {
    if (!file || (n && !items))
        return wm__err(err, WM_EINVAL, 0, "wm_file_read_tensors: NULL file or items");
    wm_read_options o = WM_READ_OPTIONS_INIT;
    if (opts) {
        wm_status st =
            wm__struct_in(&o, sizeof o, opts, WM__READ_OPTIONS_SIZE_1_2, "wm_read_options", err);
        if (st) return st;
    }
    if (o.flags & ~(WM_READ_SINK_SERIAL | WM_READ_PREFAULT))
        return wm__err(err, WM_EINVAL, 0, "%s: wm_read_options has unknown flags 0x%x", file->path,
                       (unsigned)o.flags);
    if ((unsigned)o.direct_io > WM_DIRECT_ON)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: wm_read_options.direct_io %d is none of AUTO, OFF, ON", file->path,
                       (int)o.direct_io);
    wm_status st = check_items(file, items, n, &o, err);
    if (st) return st;
    /* The engine reads through the file's descriptors and changes nothing of the file but its
     * prefetch: what wm_file_prefetch read ahead is copied from its memory, which is then freed. */
    wm_file *f = (wm_file *)(uintptr_t)file;
    wm__file_prefetch_stop(f); /* its threads finish the chunks they hold, and take no more */
    st = wm__read_items(f, items, n, &o, err);
    wm__file_prefetch_drop(f);
    return st;
}
