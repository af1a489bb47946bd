/*
 * read.c: wm_file_read_tensors (include/weightmap.h), the public face of reading tensors into
 * memory the caller owns: the arguments and the options struct are checked, every item before
 * anything is read, then the reading engine of src/backend/host.c (wm__read_items) does the
 * work.
 */
#include "backend/host.h"

#define WM__READ_OPTIONS_SIZE_1_2 WM__END_OF(wm_read_options, progress_user)

static wm_status check_items(const wm_file *f, const wm_read_item *items, size_t n,
                             const wm_read_options *o, wm_error *err) {
    for (size_t i = 0; i < n; i++) {
        const wm_read_item *it = &items[i];
        if (it->tensor >= f->n_tensors)
            return wm__err(err, WM_EINVAL, 0,
                           "%s: read item %zu names tensor %zu; the file has %zu", f->path, i,
                           it->tensor, f->n_tensors);
        if (it->flags & ~(WM_READ_WHOLE | WM_READ_SINK_WRITES))
            return wm__err(err, WM_EINVAL, 0, "%s: read item %zu has unknown flags 0x%x", f->path,
                           i, (unsigned)it->flags);
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

/* ---- prefetch ---- */

/* The prefetching thread: the kernel's WILLNEED submits the reads and waits for none, but on a
 * shallow device queue the submission itself blocks (seen: 100-240 ms for 128 MiB on the
 * development VM's virtio disk), which must not delay the caller's own work. */
static void *prefetch_main(void *arg) {
    wm_file *f = arg;
    for (uint32_t i = 0; i < f->pf_n; i++)
        if (wm__os_file_prefetch(f->shards[f->pf[i].shard].fd, f->pf[i].off, f->pf[i].len) != 0)
            break;
    return NULL;
}

uint64_t wm_file_prefetch(wm_file *f, uint64_t bytes) {
    if (!f || !bytes || atomic_load(&f->pf_live)) return 0;
    uint64_t left = bytes, asked = 0;
    uint32_t n = 0;
    for (uint32_t s = 0; s < f->n_shards && left && n < WM__PREFETCH_RANGES; s++) {
        const wm__shard *sh = &f->shards[s];
        uint64_t a = UINT64_MAX, b = 0, cached;
        for (size_t t = 0; t < f->n_tensors; t++) /* the shard's tensor data: first to last byte */
            if (f->tensors[t].shard == s && f->tensors[t].nbytes) {
                if (f->tensors[t].offset < a) a = f->tensors[t].offset;
                if (f->tensors[t].offset + f->tensors[t].nbytes > b)
                    b = f->tensors[t].offset + f->tensors[t].nbytes;
            }
        if (b <= a) continue;
        /* A warm file needs none. Asked of the shard's whole tensor data, not of the range: the
         * open's header read has the kernel's readahead bring in the first megabytes after the
         * header (up to its window, 8 MiB here), which may be much of a small range. */
        if (wm__os_cached(sh->fd, a, b - a, &cached) != 0 || cached > (b - a) / 4) break;
        uint64_t len = b - a < left ? b - a : left, page = wm__os_page_size();
        /* whole pages: WILLNEED reads the edge pages whole, and DONTNEED drops only whole ones */
        len = (a + len + page - 1) / page * page - a / page * page;
        a = a / page * page;
        f->pf[n].shard = s;
        f->pf[n].off = a;
        f->pf[n].len = len;
        n++;
        asked += len;
        left = len < left ? left - len : 0;
    }
    f->pf_n = n;
    if (n == 0 || wm__os_thread_start(&f->pf_thread, prefetch_main, f) != 0) return 0;
    wm__ledger_acquire(WM_LEDGER_SCRATCH, f->pf_thread.stack_len);
    atomic_store(&f->pf_live, 1);
    return asked;
}

void wm__file_prefetch_drop(wm_file *f) {
    if (!atomic_exchange(&f->pf_live, 0)) return;
    size_t len = f->pf_thread.stack_len;
    wm__os_thread_join(&f->pf_thread);
    wm__ledger_release(WM_LEDGER_SCRATCH, len);
    for (uint32_t i = 0; i < f->pf_n; i++)
        (void)wm__os_file_drop(f->shards[f->pf[i].shard].fd, f->pf[i].off, f->pf[i].len);
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
     * prefetch record: what wm_file_prefetch brought in is read from the cache, then dropped. */
    wm_file *f = (wm_file *)(uintptr_t)file;
    st = wm__read_items(f, items, n, &o, err);
    wm__file_prefetch_drop(f);
    return st;
}
