/*
 * meter.c: the operating system's view of a process's memory (wm_mem_figures_get,
 * wm_mem_file_regions), over os.h's process-info primitives (wm__os_process_info,
 * wm__os_file_regions): the arguments checked, the regions of one file chosen (by device and
 * inode) or of weight files (by name), and the OS's failures turned into statuses and
 * messages that name what was read. No OS is named here; linux.c reads /proc.
 *
 * These calls run between load cycles, so they are cheap and hold nothing: no allocation at
 * all (the ledger is untouched).
 */
#include "internal.h"

#include <errno.h>
#include <string.h>

/* A process that is gone reads as ENOENT (at open) or ESRCH (mid-read); a process we may not
 * inspect as EACCES. */
static wm_status os_err(wm_error *err, int e, int pid, const wm_os_why *why) {
    if (e == ENOSYS)
        return wm__err(err, WM_EUNSUPPORTED, e, "memory figures: not available on %s",
                       wm__os_caps()->name);
    if (why->detail) return wm__err(err, WM_ENOENT, 0, "%s: %s", why->source, why->detail);
    if (e == ENOENT || e == ESRCH)
        return wm__err(err, WM_ENOENT, e, "%s: %s (no process %d)", why->source, wm__errno_text(e),
                       pid);
    if (e == EACCES || e == EPERM)
        return wm__err(err, WM_EPERM, e,
                       "%s: %s (reading another process needs the same user or more: Linux's "
                       "ptrace access, CAP_SYS_PTRACE; Darwin's same-user rule, or root)",
                       why->source, wm__errno_text(e));
    return wm__err(err, wm__status_io(e), e, "%s: %s", why->source, wm__errno_text(e));
}

/* pid 0 always; another process's only where the OS can inspect one. */
static bool pid_ok(int pid) { return pid == 0 || (pid > 0 && wm__os_caps()->other_process); }

wm_status wm_mem_figures_get(int pid, wm_mem_figures *out, wm_error *err) {
    if (!out || pid < 0) return wm__err(err, WM_EINVAL, 0, "wm_mem_figures_get: bad argument");
    wm_os_why why = {{0}, NULL};
    wm_os_process_info info;
    int e =
        pid_ok(pid) && wm__os_caps()->process_info ? wm__os_process_info(pid, &info, &why) : ENOSYS;
    if (e) return os_err(err, e, pid, &why);
    out->footprint = info.footprint;
    out->resident = info.resident;
    out->file_resident = info.file_resident;
    out->locked = info.locked;
    out->committed = info.committed;
    return WM_OK;
}

typedef struct region_walk {
    const wm_os_stat *file; /* the file asked for, or NULL: every weight file */
    wm_file_region *out;
    size_t cap, found;
} region_walk;

/* A weight file by name: an absolute path whose name ends in .gguf or .safetensors. */
static int take_region(void *user, const wm_os_region *g) {
    region_walk *w = user;
    bool match = w->file ? g->ino == w->file->ino && g->dev == w->file->dev
                         : g->path[0] == '/' && (wm__ends_with(g->name_tail, ".gguf") ||
                                                 wm__ends_with(g->name_tail, ".safetensors"));
    if (!match) return 0;
    if (w->found < w->cap) {
        wm_file_region *r = &w->out[w->found];
        memset(r, 0, sizeof *r);
        r->start = g->start;
        r->end = g->end;
        r->offset = g->offset;
        memcpy(r->perms, g->perms, sizeof r->perms);
        r->size = g->end - g->start;
        r->rss = g->rss;
        r->privatised = g->privatised;
        r->private_dirty = g->private_dirty;
        r->locked = g->locked;
        _Static_assert(sizeof r->path == sizeof g->path, "region paths differ in size");
        memcpy(r->path, g->path, sizeof r->path);
    }
    w->found++;
    return 0;
}

wm_status wm_mem_file_regions(int pid, const char *path, wm_file_region *regions, size_t cap,
                              size_t *count, wm_error *err) {
    if (!count || pid < 0 || (cap && !regions))
        return wm__err(err, WM_EINVAL, 0, "wm_mem_file_regions: bad argument");
    wm_os_stat fst = {0};
    if (path) {
        int se = wm__os_stat_path(path, &fst);
        if (se) {
            wm_status st = wm__status_from_errno(se);
            if (st != WM_ENOENT && st != WM_EPERM && st != WM_ENOMEM) st = WM_EIO;
            return wm__err(err, st, se, "%s: %s", path, wm__errno_text(se));
        }
    }
    region_walk w = {path ? &fst : NULL, regions, cap, 0};
    wm_os_why why = {{0}, NULL};
    int e = pid_ok(pid) && wm__os_caps()->process_info
                ? wm__os_file_regions(pid, take_region, &w, &why)
                : ENOSYS;
    if (e) return os_err(err, e, pid, &why);
    *count = w.found;
    return WM_OK;
}
