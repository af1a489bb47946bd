/*
 * read.c: wm_file_read_tensors and wm_file_prefetch (include/weightmap.h), the public face of
 * reading tensors into memory the caller owns: the arguments and the options struct are checked,
 * every item before anything is read, then the reading engine (src/read/engine.h) does the work.
 */
#include "read/engine.h"

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

uint64_t wm_file_prefetch(wm_file *f, uint64_t bytes) { return wm__prefetch_start(f, bytes); }

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
