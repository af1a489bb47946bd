/*
 * prefetch.c: a read ahead of a file into memory the file holds (wm_file_prefetch; engine.h).
 *
 * The bytes are read past the page cache (O_DIRECT where the file system allows it) by a few
 * threads, a chunk at a time in file order, into one page allocation that mirrors the ranges
 * asked for. A read of the file then copies what is in (pre_part, which the reader calls through
 * the file's ahead_take hook), awaits a chunk being read, and reads every other byte itself. Why
 * not the page cache's own readahead: docs/DECISIONS.md, "The read ahead".
 */
#include "engine.h"

#include <string.h>

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

static size_t pre_part(wm__pre *p, uint32_t shard, uint64_t off, size_t len, unsigned char *dst,
                       bool *copied) {
    *copied = false;
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

/* ---- the read ahead of a file ---- */

uint64_t wm__prefetch_start(wm_file *f, uint64_t bytes) {
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
    f->ahead_take = pre_part; /* before `pre` is published (release) */
    atomic_store_explicit(&f->pre, p, memory_order_release);
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
