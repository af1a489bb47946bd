/*
 * host.c: the host memory of every backend (host.h): counted regions (file mappings and
 * anonymous pages) and locking them.
 */
#include "host.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define LOCK_STEP ((size_t)16 << 20)

/* ---- regions ---- */

wm_status wm__region_map(wm_model *m, uint32_t shard, uint64_t off, size_t len, wm_os_map_kind kind,
                         wm__region *r, wm_error *err) {
    const wm__shard *sh = &m->file->shards[shard];
    void *p;
    int e = wm__os_map(sh->fd, off, len, kind, &p);
    if (e)
        return wm__err(err, wm__status_io(e), e, "%s: mapping %zu bytes at offset %llu: %s",
                       sh->path, len, (unsigned long long)off, wm__errno_text(e));
    r->base = p;
    r->len = len;
    r->cat = kind == WM_OS_MAP_SHARED_RO ? WM_LEDGER_MAP_SHARED : WM_LEDGER_MAP_PRIVATE;
    r->locked = 0;
    wm__ledger_acquire(r->cat, len);
    return WM_OK;
}

wm_status wm__region_pages(wm_model *m, size_t len, wm_ledger_category cat, wm__region *r,
                           wm_error *err) {
    void *p;
    int e = wm__os_pages_alloc(len, &p);
    if (e)
        return wm__err(err, WM_ENOMEM, e, "%s: allocating %zu bytes of pages: %s", m->file->path,
                       len, wm__errno_text(e));
    r->base = p;
    r->len = len;
    r->cat = cat;
    r->locked = 0;
    wm__ledger_acquire(cat, len);
    return WM_OK;
}

void wm__region_free(wm__region *r) {
    if (!r || !r->base) return;
    if (r->locked) {
        wm__os_unlock(r->base, r->locked);
        wm__ledger_release(WM_LEDGER_LOCKED, r->locked);
    }
    if (r->cat == WM_LEDGER_MAP_SHARED || r->cat == WM_LEDGER_MAP_PRIVATE)
        wm__os_unmap(r->base, r->len);
    else
        wm__os_pages_free(r->base, r->len);
    wm__ledger_release(r->cat, r->len);
    *r = (wm__region){0};
}

/* ---- locking ---- */

wm_status wm__region_lock(wm_model *m, wm__region *r, wm_error *err) {
    if (m->opts.lock == WM_LOCK_OFF || !r->base || !r->len) return WM_OK;
    if (m->opts.lock == WM_LOCK_REQUIRED) {
        int e = wm__os_lock(r->base, r->len);
        if (e) {
            uint64_t limit = 0;
            wm__os_memlock_limit(&limit);
            bool perm = e == ENOMEM || e == EPERM || e == EAGAIN;
            char lim[32];
            if (limit == UINT64_MAX)
                snprintf(lim, sizeof lim, "unlimited");
            else
                snprintf(lim, sizeof lim, "%llu bytes", (unsigned long long)limit);
            return wm__err(err, perm ? WM_EPERM : WM_EIO, e,
                           "%s: locking %zu bytes failed (%s); RLIMIT_MEMLOCK is %s: raise it "
                           "(ulimit -l) or ask for --lock=best-effort",
                           m->file->path, r->len, wm__errno_text(e), lim);
        }
        r->locked = r->len;
    } else {
        /* Lock from the start in steps; when a step fails, halve it down to one page, so the
         * locked prefix ends close to what RLIMIT_MEMLOCK allows. */
        size_t done = 0, step = LOCK_STEP, page = wm__os_page_size();
        while (done < r->len) {
            size_t n = r->len - done < step ? r->len - done : step;
            if (wm__os_lock((char *)r->base + done, n) == 0) {
                done += n;
            } else if (step > page) {
                step /= 2;
            } else {
                break;
            }
        }
        r->locked = done;
    }
    if (r->locked) wm__ledger_acquire(WM_LEDGER_LOCKED, r->locked);
    m->stats.locked_bytes += r->locked;
    return WM_OK;
}
